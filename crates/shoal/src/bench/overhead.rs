//! `shoal bench overhead`: memory per small object beyond its key and value
//! (DXRAM's workload: 16-byte keys, 32-byte values), from the store's
//! statistics and from the process' RSS.

use super::{emit_json, fit_memory, store_config, Table, MIB};
use clap::Args as ClapArgs;
use serde::Serialize;
use shoal_bench_baseline::rss::rss_bytes;
use shoal_engine::{RejectRules, Store, TableId, WriteOp};
use std::time::Instant;

const KEY: usize = 16;
const VALUE: usize = 32;
const BATCH: usize = 64;
const TABLE: TableId = TableId(1);

/// Options of `shoal bench overhead`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Objects loaded through multi_write batches of 64.
    #[arg(long, default_value_t = 10_000_000)]
    pub objects: u64,
    /// Objects loaded one `write` at a time into a second store (0: skip;
    /// default: a tenth of --objects).
    #[arg(long)]
    pub single_objects: Option<u64>,
    /// Store memory per object, in bytes (rounded up to whole segments).
    #[arg(long, default_value_t = 80)]
    pub memory_per_object: u64,
    /// Plan a fixed hash table for objects of this entry size (8 per
    /// bucket, for a memory full of them) instead of the default table that
    /// grows with the objects.
    #[arg(long)]
    pub expected_object_bytes: Option<usize>,
    /// Segment size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub segment_kib: usize,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One load of N objects into a fresh store.
#[derive(Clone, Debug, Serialize)]
pub struct OverheadResult {
    pub bench: &'static str,
    /// "multi_write x64" or "write".
    pub load: &'static str,
    pub objects: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub memory_bytes: u64,
    pub seglets_in_use: u64,
    pub seglet_bytes: u64,
    pub hash_table_bytes: u64,
    pub live_bytes: u64,
    pub live_key_value_bytes: u64,
    pub load_secs: f64,
    pub objects_per_sec: f64,
    /// (seglets in use x seglet size + hash table - keys and values) / N.
    pub stats_bytes_per_object: f64,
    /// (live entry bytes - keys and values) / N: entry headers alone.
    pub entry_overhead_per_object: f64,
    /// Hash table bytes / N.
    pub hash_table_per_object: f64,
    /// entry_overhead_per_object + hash_table_per_object (the log's actual bytes, no seglet slack).
    pub log_bytes_per_object: f64,
    pub rss_before_bytes: u64,
    pub rss_after_bytes: u64,
    /// (RSS after the load - RSS before creating the store - keys and values) / N.
    pub rss_bytes_per_object: f64,
    pub target_bytes_per_object: f64,
    /// `None` when the load completed.
    pub error: Option<String>,
}

fn key_of(i: u64) -> [u8; KEY] {
    let mut k = [b'0'; KEY];
    let mut n = i;
    for d in k.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

fn value_of(i: u64) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for c in v.chunks_mut(8) {
        c.copy_from_slice(&i.to_le_bytes());
    }
    v
}

/// Loads `n` objects into `store`, in batches of 64 or one at a time.
fn load(store: &Store, n: u64, batched: bool) -> Result<(), String> {
    let mut i = 0;
    while i < n {
        if batched {
            let end = (i + BATCH as u64).min(n);
            let keys: Vec<[u8; KEY]> = (i..end).map(key_of).collect();
            let values: Vec<[u8; VALUE]> = (i..end).map(value_of).collect();
            let ops: Vec<WriteOp> =
                keys.iter().zip(&values).map(|(k, v)| WriteOp::new(TABLE, k, v, RejectRules::default())).collect();
            if let Some(e) = store.multi_write(&ops).into_iter().find_map(|r| r.err()) {
                return Err(format!("multi_write at object {i}: {e}"));
            }
            i = end;
        } else {
            store
                .write(TABLE, &key_of(i), &value_of(i), RejectRules::default())
                .map_err(|e| format!("write of object {i}: {e}"))?;
            i += 1;
        }
    }
    Ok(())
}

fn run_one(args: &Args, n: u64, batched: bool) -> OverheadResult {
    let segment = args.segment_kib << 10;
    let expected = args.expected_object_bytes;
    let mut r = OverheadResult {
        bench: "overhead",
        load: if batched { "multi_write x64" } else { "write" },
        objects: n,
        key_bytes: KEY,
        value_bytes: VALUE,
        memory_bytes: 0,
        seglets_in_use: 0,
        seglet_bytes: 0,
        hash_table_bytes: 0,
        live_bytes: 0,
        live_key_value_bytes: 0,
        load_secs: 0.0,
        objects_per_sec: 0.0,
        stats_bytes_per_object: 0.0,
        entry_overhead_per_object: 0.0,
        hash_table_per_object: 0.0,
        log_bytes_per_object: 0.0,
        rss_before_bytes: 0,
        rss_after_bytes: 0,
        rss_bytes_per_object: 0.0,
        target_bytes_per_object: 24.0,
        error: None,
    };
    let memory = match fit_memory(n * args.memory_per_object, segment, 64 << 10, expected) {
        Ok(m) => m,
        Err(e) => {
            r.error = Some(e);
            return r;
        }
    };
    r.rss_before_bytes = rss_bytes();
    let store = match Store::new(store_config(memory, segment, 64 << 10, expected)) {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    store.create_table(TABLE);
    let started = Instant::now();
    let loaded = load(&store, n, batched);
    r.load_secs = started.elapsed().as_secs_f64();
    r.rss_after_bytes = rss_bytes();
    r.objects_per_sec = n as f64 / r.load_secs.max(1e-9);
    let s = store.stats();
    r.memory_bytes = s.memory_bytes;
    r.seglets_in_use = s.seglets_in_use;
    r.seglet_bytes = s.seglet_bytes;
    r.hash_table_bytes = s.hash_table_bytes;
    r.live_bytes = s.live_bytes;
    r.live_key_value_bytes = s.live_key_value_bytes;
    let per = |b: f64| b / n.max(1) as f64;
    let kv = s.live_key_value_bytes as f64;
    r.stats_bytes_per_object = per((s.seglets_in_use * s.seglet_bytes + s.hash_table_bytes) as f64 - kv);
    r.entry_overhead_per_object = per(s.live_bytes as f64 - kv);
    r.hash_table_per_object = per(s.hash_table_bytes as f64);
    r.log_bytes_per_object = r.entry_overhead_per_object + r.hash_table_per_object;
    r.rss_bytes_per_object =
        per(r.rss_after_bytes as f64 - r.rss_before_bytes as f64 - (n * (KEY + VALUE) as u64) as f64);
    r.error = loaded.err();
    r
}

fn print_table(results: &[OverheadResult]) {
    let mut t = Table::new(
        &[
            "load",
            "objects",
            "memory MiB",
            "hash MiB",
            "secs",
            "objects/s",
            "stats B/obj",
            "entry hdr B/obj",
            "hash B/obj",
            "log B/obj",
            "RSS B/obj",
            "target",
            "error",
        ],
        1,
    );
    for r in results {
        t.row(vec![
            r.load.to_string(),
            r.objects.to_string(),
            format!("{:.1}", r.memory_bytes as f64 / MIB),
            format!("{:.1}", r.hash_table_bytes as f64 / MIB),
            format!("{:.2}", r.load_secs),
            format!("{:.0}", r.objects_per_sec),
            format!("{:.2}", r.stats_bytes_per_object),
            format!("{:.2}", r.entry_overhead_per_object),
            format!("{:.2}", r.hash_table_per_object),
            format!("{:.2}", r.log_bytes_per_object),
            format!("{:.2}", r.rss_bytes_per_object),
            format!("<={}", r.target_bytes_per_object),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!(
        "stats = (seglets in use x seglet + hash table - keys - values) / N; log = entry headers + hash table, \
         without seglet slack; RSS = (RSS after load - RSS before the store - keys - values) / N"
    );
}

/// Runs the benchmark; false if a load failed.
pub fn run(args: &Args) -> Result<bool, String> {
    if args.objects == 0 {
        return Err("--objects must be positive".into());
    }
    let single = args.single_objects.unwrap_or(args.objects / 10);
    if !args.json {
        println!(
            "per-object overhead (DXRAM small objects): {KEY}-byte keys, {VALUE}-byte values, \
             memory {} B/object, {} KiB segments",
            args.memory_per_object, args.segment_kib
        );
    }
    let mut results = Vec::new();
    for (n, batched) in [(args.objects, true), (single, false)] {
        if n == 0 {
            continue;
        }
        eprintln!("overhead: loading {n} objects with {} ...", if batched { "multi_write" } else { "write" });
        let r = run_one(args, n, batched);
        if let Some(e) = &r.error {
            eprintln!("overhead: FAILED: {e}");
        }
        if args.json {
            emit_json(&r);
        }
        results.push(r);
    }
    if !args.json {
        print_table(&results);
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}
