//! `shoal load TABLE FILE`: streams key/value records from a file (or
//! stdin) into a table.
//!
//! The format (`shoal load --help`, the README) is text, one record per
//! line, `key<TAB>value`, with backslash escapes ([`parse_record`]). Lines
//! are read one at a time, each at most as long as a record within the
//! server's limits can be written, so memory is bounded by one line, the
//! batch being filled and the batches in flight (--in-flight batches of at
//! most --batch records and about [`BATCH_BYTES`]), whatever the file's
//! size.
//!
//! A batch is one multi-write through the async client, which splits it
//! over the keys' masters and sends the pieces pipelined; up to
//! --in-flight batches are outstanding while the next one is parsed (the
//! client runs on a runtime thread of its own). The first failure stops the
//! load. A malformed line or an oversized key or value (exit 2): every
//! record before that line is written, none after. A write the server
//! refused or a lost connection (exit 1 or 3): nothing more is sent, and
//! the batches already in flight are waited for and counted. Nothing is
//! rolled back.

use super::{client_config, max_value_bytes, stat_u64, CliError, Common, Target, USAGE};
use crate::progress::{Progress, Stream, Unit};
use clap::Args;
use indicatif::{HumanBytes, HumanCount};
use serde_json::json;
use shoal_client::{Client, ClientError, RejectRules, TableId, Version, WriteError, WriteItem};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::task::JoinSet;

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The table to load into (it must exist: shoal create-table).
    pub table: String,
    /// The file of records; `-` reads them from stdin.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Most records per multi-write.
    #[arg(long, default_value_t = 500, value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
    /// Multi-writes outstanding at once (pipelined).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub in_flight: u32,
    #[command(flatten)]
    pub common: Common,
}

/// A batch is sent once its keys and values pass this many bytes.
pub const BATCH_BYTES: usize = 1 << 20;

/// Records read and not yet acknowledged: one multi-write.
#[derive(Default)]
struct Batch {
    /// Each record's line number in the input.
    lines: Vec<u64>,
    records: Vec<(Vec<u8>, Vec<u8>)>,
    /// Key and value bytes.
    bytes: usize,
    /// Input bytes the batch's lines took (empty lines included).
    input_bytes: u64,
}

/// What the load has done so far.
#[derive(Default)]
struct Tally {
    records: u64,
    /// Key and value bytes written.
    bytes: u64,
}

type Outcome = (Batch, Result<Vec<Result<Version, WriteError>>, ClientError>);

pub(super) fn run(a: &LoadArgs) -> Result<(), CliError> {
    let config = client_config(&a.common)?;
    // One runtime thread drives the connections; this thread parses.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| CliError::refused("internal", format!("cannot start a runtime: {e}")))?;
    runtime.block_on(load(a, config))
}

async fn load(a: &LoadArgs, config: shoal_client::ClientConfig) -> Result<(), CliError> {
    let server = a.common.server.as_str();
    let t = Target { server, table: &a.table, key: None };
    let client = match &a.common.coordinator {
        Some(coordinator) => Client::connect_cluster(coordinator.clone(), config).await.map_err(|e| CliError {
            kind: "connection",
            message: format!("cannot reach the cluster of {coordinator}: {e}"),
            code: super::UNREACHABLE,
        })?,
        None => Client::with_config(server, config).await.map_err(|e| t.client(e))?,
    };
    let table = client.table_id(&a.table).await.map_err(|e| t.table_error(e))?;
    let stats = client.stats().await.map_err(|e| t.client(e))?;
    let max_value = max_value_bytes(&stats);
    let max_key = stat_u64(&stats, "max_key_bytes").map_or(shoal_common::MAX_KEY_BYTES, |n| n as usize);
    // The longest line a record within the limits can take: every byte
    // escaped as \xHH, the TAB and a CR.
    let max_line = 4 * (max_key + max_value) + 2;

    let Input { name, size: total, reader: mut input } = open(&a.file)?;
    let progress = Progress::new(Stream::Stderr);
    let task = progress.task(format!("load '{}'", a.table), total, Unit::Bytes);
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut failure: Option<CliError> = None;
    let mut flights: JoinSet<Outcome> = JoinSet::new();
    let mut batch = Batch::default();
    let mut line = Vec::new();
    let mut line_no = 0u64;
    let mut write_failed = false;
    let settle = |outcome: Option<Result<Outcome, tokio::task::JoinError>>,
                  tally: &mut Tally,
                  failure: &mut Option<CliError>| {
        let Some(outcome) = outcome else { return };
        let (e, input_bytes) = settle_one(outcome, &t, &name, tally);
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        let rate = (tally.records as f64 / secs) as u64;
        task.advance(input_bytes, format!("{} records, {} records/s", HumanCount(tally.records), HumanCount(rate)));
        if failure.is_none() {
            *failure = e;
        }
    };
    loop {
        let n = match read_line(&mut *input, &mut line, max_line) {
            Ok(Line::Eof) => break,
            Ok(Line::Read(n)) => n,
            Ok(Line::TooLong) => {
                failure = Some(CliError {
                    kind: "too_large",
                    message: format!(
                        "{name}:{}: the line is longer than {max_line} bytes, more than a record within the \
                         server's limits (keys of {max_key} bytes, values of {max_value}) can take",
                        line_no + 1
                    ),
                    code: USAGE,
                });
                break;
            }
            Err(e) => {
                failure = Some(input_error(format!("cannot read {name}: {e}")));
                break;
            }
        };
        line_no += 1;
        batch.input_bytes += n as u64;
        let content = line_content(&line);
        if content.is_empty() {
            continue;
        }
        let (key, value) = match parse_record(content) {
            Ok(r) => r,
            Err(e) => {
                failure = Some(input_error(format!("{name}:{line_no}: {e}")));
                break;
            }
        };
        if let Some(e) = oversize(&name, line_no, "key", key.len(), max_key)
            .or_else(|| oversize(&name, line_no, "value", value.len(), max_value))
        {
            failure = Some(e);
            break;
        }
        batch.bytes += key.len() + value.len();
        batch.lines.push(line_no);
        batch.records.push((key, value));
        if batch.records.len() >= a.batch as usize || batch.bytes >= BATCH_BYTES {
            if flights.len() >= a.in_flight as usize {
                settle(flights.join_next().await, &mut tally, &mut failure);
                if failure.is_some() {
                    write_failed = true;
                    break;
                }
            }
            flights.spawn(write(client.clone(), table, std::mem::take(&mut batch)));
        }
    }
    // After a bad line, the records before it are written too; after a
    // failed write, nothing more is sent.
    if !write_failed {
        if batch.records.is_empty() {
            // Only empty lines since the last batch.
            task.inc(batch.input_bytes);
        } else {
            flights.spawn(write(client.clone(), table, batch));
        }
    }
    while !flights.is_empty() {
        settle(flights.join_next().await, &mut tally, &mut failure);
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { tally.records as f64 / secs } else { 0.0 };
    if let Some(mut e) = failure {
        task.finish(format!("stopped after {} records", HumanCount(tally.records)));
        e.message += &format!(" ({} records were loaded before the load stopped)", tally.records);
        return Err(e);
    }
    task.finish(format!(
        "{} records in {secs:.2} s ({} records/s)",
        HumanCount(tally.records),
        HumanCount(rate as u64)
    ));
    if a.common.json {
        out!(
            "{}",
            json!({
                "table": a.table,
                "records": tally.records,
                "bytes": tally.bytes,
                "secs": secs,
                "records_per_sec": rate,
            })
        );
    } else {
        out!(
            "loaded {} records ({} of keys and values) into '{}' in {secs:.2} s: {} records/s",
            tally.records,
            HumanBytes(tally.bytes),
            a.table,
            rate.round() as u64
        );
    }
    Ok(())
}

/// The records' source.
struct Input {
    /// For messages: the path, or "stdin".
    name: String,
    /// Its size, if known (a regular file).
    size: Option<u64>,
    reader: Box<dyn BufRead>,
}

fn open(path: &Path) -> Result<Input, CliError> {
    const BUFFER: usize = 256 << 10;
    if path == Path::new("-") {
        let reader = Box::new(BufReader::with_capacity(BUFFER, std::io::stdin()));
        return Ok(Input { name: "stdin".into(), size: None, reader });
    }
    let file = std::fs::File::open(path).map_err(|e| input_error(format!("cannot open {}: {e}", path.display())))?;
    let size = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    Ok(Input { name: path.display().to_string(), size, reader: Box::new(BufReader::with_capacity(BUFFER, file)) })
}

/// Writes one batch; hands it back with the results (for the messages).
async fn write(client: Client, table: TableId, batch: Batch) -> Outcome {
    let items: Vec<WriteItem<'_>> = batch
        .records
        .iter()
        .map(|(key, value)| WriteItem { table, key, value, rules: RejectRules::default() })
        .collect();
    let r = client.multi_write(&items).await;
    drop(items);
    (batch, r)
}

/// Counts a finished batch; returns its first failure and its input bytes.
fn settle_one(
    outcome: Result<Outcome, tokio::task::JoinError>,
    t: &Target<'_>,
    name: &str,
    tally: &mut Tally,
) -> (Option<CliError>, u64) {
    let (batch, results) = match outcome {
        Ok(o) => o,
        Err(e) => return (Some(CliError::refused("internal", format!("a write task failed: {e}"))), 0),
    };
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            let mut e = t.client(e);
            e.message = format!("{name}:{}: {}", batch.lines.first().copied().unwrap_or(0), e.message);
            return (Some(e), batch.input_bytes);
        }
    };
    let mut first = None;
    for ((line, (key, value)), r) in batch.lines.iter().zip(&batch.records).zip(results) {
        match r {
            Ok(_) => {
                tally.records += 1;
                tally.bytes += (key.len() + value.len()) as u64;
            }
            Err(e) if first.is_none() => {
                let target = Target { server: t.server, table: t.table, key: Some(key) };
                let mut e = target.write_error(e);
                e.message = format!("{name}:{line}: {}", e.message);
                first = Some(e);
            }
            Err(_) => {}
        }
    }
    (first, batch.input_bytes)
}

fn input_error(message: String) -> CliError {
    CliError { kind: "input", message, code: USAGE }
}

fn oversize(name: &str, line: u64, what: &str, len: usize, max: usize) -> Option<CliError> {
    (len > max).then(|| CliError {
        kind: "too_large",
        message: format!("{name}:{line}: the {what} ({len} bytes) exceeds the server's maximum of {max}"),
        code: USAGE,
    })
}

/// One [`read_line`].
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Eof,
    /// A line of this many bytes, its newline included (if it had one).
    Read(usize),
    /// More than the limit without a newline: the rest is not read.
    TooLong,
}

/// Reads one line into `buf` (cleared first), never more than `max` bytes
/// before its newline.
fn read_line(input: &mut dyn BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    buf.clear();
    let n = input.take(max as u64 + 1).read_until(b'\n', buf)?;
    Ok(match n {
        0 => Line::Eof,
        n if n > max && buf.last() != Some(&b'\n') => Line::TooLong,
        n => Line::Read(n),
    })
}

/// A line without its LF or CRLF.
fn line_content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A record line (without its line ending): its key and value, unescaped.
/// The first TAB ends the key.
pub fn parse_record(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let tab = line
        .iter()
        .position(|&b| b == b'\t')
        .ok_or("no TAB between the key and the value (the format is key<TAB>value)")?;
    let key = unescape(&line[..tab]).map_err(|e| format!("in the key: {e}"))?;
    let value = unescape(&line[tab + 1..]).map_err(|e| format!("in the value: {e}"))?;
    Ok((key, value))
}

/// Undoes the escapes `\\`, `\t`, `\n`, `\r`, `\0` and `\xHH`.
fn unescape(s: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'\\' {
            out.push(s[i]);
            i += 1;
            continue;
        }
        let (byte, len) = match s.get(i + 1) {
            Some(b'\\') => (b'\\', 2),
            Some(b't') => (b'\t', 2),
            Some(b'n') => (b'\n', 2),
            Some(b'r') => (b'\r', 2),
            Some(b'0') => (0, 2),
            Some(b'x') => {
                let hex = s.get(i + 2..i + 4).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) if hex.is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) => (b, 4),
                    _ => return Err(format!("\\x at byte {i} needs two hex digits")),
                }
            }
            Some(&c) => return Err(format!("unknown escape \\{} at byte {i}", c.escape_ascii())),
            None => return Err("a lone backslash at the end (write \\\\ for a backslash)".into()),
        };
        out.push(byte);
        i += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of `unescape` for the tests: escapes what must be.
    fn escape(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &c in b {
            match c {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\t' => out.extend_from_slice(b"\\t"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                c if c.is_ascii_graphic() || c == b' ' => out.push(c),
                c => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
            }
        }
        out
    }

    #[test]
    fn parse_record_unescapes_key_and_value() {
        assert_eq!(parse_record(b"alice\thello world").unwrap(), (b"alice".to_vec(), b"hello world".to_vec()));
        assert_eq!(parse_record(b"k\ta\tb").unwrap().1, b"a\tb", "TABs after the first belong to the value");
        assert_eq!(parse_record(b"a\\tb\t").unwrap(), (b"a\tb".to_vec(), Vec::new()));
        assert_eq!(parse_record(b"\\x00\\xFF\t\\\\\\n\\r\\0").unwrap(), (vec![0, 0xff], b"\\\n\r\0".to_vec()));
    }

    #[test]
    fn parse_record_rejects_bad_lines() {
        assert!(parse_record(b"no tab").unwrap_err().contains("no TAB"));
        assert!(parse_record(b"k\t\\q").unwrap_err().contains("unknown escape \\q"));
        assert!(parse_record(b"k\t\\x4").unwrap_err().contains("two hex digits"));
        assert!(parse_record(b"k\t\\x+1").unwrap_err().contains("two hex digits"));
        assert!(parse_record(b"k\\\tv").unwrap_err().contains("lone backslash"));
    }

    #[test]
    fn escape_then_parse_round_trips_every_byte() {
        let key: Vec<u8> = (0..=255u8).collect();
        let value: Vec<u8> = (0..=255u8).rev().chain(*b"\\t\t\n").collect();
        let mut line = escape(&key);
        line.push(b'\t');
        line.extend(escape(&value));
        assert_eq!(parse_record(&line).unwrap(), (key, value));
    }

    #[test]
    fn read_line_is_bounded() {
        let mut input: &[u8] = b"ab\ncdef\r\nxyz";
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut input, &mut buf, 4).unwrap(), Line::Read(3));
        assert_eq!(line_content(&buf), b"ab");
        assert_eq!(read_line(&mut input, &mut buf, 4).unwrap(), Line::TooLong);
        let mut input: &[u8] = b"cdef\r\nxyz";
        assert_eq!(read_line(&mut input, &mut buf, 5).unwrap(), Line::Read(6));
        assert_eq!(line_content(&buf), b"cdef");
        assert_eq!(read_line(&mut input, &mut buf, 5).unwrap(), Line::Read(3), "a last line without a newline");
        assert_eq!(line_content(&buf), b"xyz");
        assert_eq!(read_line(&mut input, &mut buf, 5).unwrap(), Line::Eof);
        // An endless line is read only to the limit + 1.
        let mut endless = BufReader::new(std::io::repeat(b'a'));
        assert_eq!(read_line(&mut endless, &mut buf, 1000).unwrap(), Line::TooLong);
        assert_eq!(buf.len(), 1001);
    }
}
