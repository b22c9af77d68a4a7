//! Benchmarks of the master store and, with `ycsb` and `stream`, of a
//! running server.
//! Each is bounded in count and time, prints an aligned table (or one JSON
//! object per result with `--json`), and returns whether every run
//! completed.

pub mod dxram;
pub mod memory;
pub mod ops;
pub mod overhead;
pub mod peers;
pub mod recovery;
pub mod stream;
pub mod utilization;
pub mod ycsb;
pub mod zipf;

use serde::Serialize;
use shoal_engine::StoreConfig;

pub const MIB: f64 = (1u64 << 20) as f64;

/// True for a finite number above zero (command-line checks).
pub fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// Prints one result as a JSON line on stdout.
pub fn emit_json(v: &impl Serialize) {
    println!("{}", serde_json::to_string(v).expect("results serialise"));
}

/// A store configuration with the given sizes, the cleaner thread on, the
/// largest value the segment size allows (at most the default 1 MiB: an
/// entry with the largest key must fit twice in a segment) and everything
/// else default. `planned`: the hash table is fixed, planned for a memory
/// full of objects of that entry size (8 per bucket), as the benchmarks
/// measured before tables grew; `None`: it grows with the objects (the
/// server's default).
pub fn store_config(
    memory_bytes: usize,
    segment_bytes: usize,
    seglet_bytes: usize,
    planned: Option<usize>,
) -> StoreConfig {
    let max_value = (segment_bytes / 2).saturating_sub(shoal_common::MAX_KEY_BYTES + 64);
    StoreConfig {
        memory_bytes,
        segment_bytes,
        seglet_bytes,
        max_value_bytes: max_value.min(StoreConfig::default().max_value_bytes),
        hash_table_buckets: planned.map(|bytes| (memory_bytes / bytes.max(16) / 8).max(64)),
        cleaner_thread: true,
        ..StoreConfig::default()
    }
}

/// `want` bytes rounded up to whole segments, raised segment by segment to
/// the smallest memory the engine accepts with these sizes. Errors when the
/// configuration is invalid for another reason than its size.
pub fn fit_memory(
    want: u64,
    segment_bytes: usize,
    seglet_bytes: usize,
    expected: Option<usize>,
) -> Result<usize, String> {
    let mut memory = (want.max(1) as usize).div_ceil(segment_bytes) * segment_bytes;
    // The minimum is a few segments plus reserves; 64 steps is far beyond it.
    for _ in 0..64 {
        match store_config(memory, segment_bytes, seglet_bytes, expected).validate() {
            Ok(()) => return Ok(memory),
            Err(_) => memory += segment_bytes,
        }
    }
    store_config(memory, segment_bytes, seglet_bytes, expected).validate().map_err(|e| e.to_string())?;
    Ok(memory)
}

/// An aligned text table: the first `left` columns are left-aligned, the
/// others right-aligned.
pub struct Table {
    headers: Vec<String>,
    left: usize,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str], left: usize) -> Table {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), left, rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| self.rows.iter().map(|r| r[c].len()).chain([self.headers[c].len()]).max().unwrap_or(0))
            .collect();
        let line = |cells: &[String]| {
            let parts: Vec<String> =
                cells
                    .iter()
                    .enumerate()
                    .map(|(c, s)| {
                        if c < self.left {
                            format!("{s:<w$}", w = widths[c])
                        } else {
                            format!("{s:>w$}", w = widths[c])
                        }
                    })
                    .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        out.push_str(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["name", "value"], 1);
        t.row(vec!["a".into(), "1.5".into()]);
        t.row(vec!["longer".into(), "22".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "name    value");
        assert_eq!(lines[2], "a         1.5");
        assert_eq!(lines[3], "longer     22");
    }

    #[test]
    fn fit_memory_rounds_up_to_a_valid_store() {
        let seg = 8 << 20;
        let m = fit_memory(1 << 20, seg, 64 << 10, Some(128)).unwrap();
        assert_eq!(m % seg, 0);
        assert!(store_config(m, seg, 64 << 10, Some(128)).validate().is_ok());
        assert!(store_config(m - seg, seg, 64 << 10, Some(128)).validate().is_err());
        assert_eq!(fit_memory(1 << 30, seg, 64 << 10, Some(128)).unwrap(), 1 << 30);
    }
}
