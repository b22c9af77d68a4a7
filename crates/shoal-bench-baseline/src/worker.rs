//! The worker side of the memory benchmark: apply an op stream to a target
//! and report the process' RSS against the live value bytes.

use crate::rss::rss_bytes;
use crate::workload::{fill_value, key_of, Op, OpReader};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Instant;

/// A key-value engine under test.
pub trait Target {
    /// Stores an object whose key does not exist yet.
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<(), String>;
    /// Deletes an object that exists.
    fn delete(&mut self, key: &[u8]) -> Result<(), String>;
    /// Called at every RSS sample, so an engine can track peaks of its own statistics.
    fn sample(&mut self) {}
    /// Called before every RSS sample: makes every op given so far applied
    /// (a client that pipelines waits for its replies here), so that the
    /// sample sees them.
    fn sync(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Engine-specific statistics for the report (taken at the end).
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// The state at the end of one phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseSample {
    pub phase: u8,
    pub ops: u64,
    pub rss_bytes: u64,
    pub live_value_bytes: u64,
}

/// What a worker prints: one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub engine: String,
    pub workload: String,
    /// Ops applied (writes, deletes and phase ends).
    pub ops: u64,
    pub elapsed_secs: f64,
    /// RSS before the target was created: the process' own baseline.
    pub baseline_rss_bytes: u64,
    /// RSS right after the target was created, before any op.
    pub created_rss_bytes: u64,
    /// Highest RSS sampled (every `sample_every` ops, at phase ends and at the end).
    pub peak_rss_bytes: u64,
    /// Live value bytes when the peak was first sampled.
    pub live_value_bytes_at_peak: u64,
    /// Highest live value bytes over the run.
    pub max_live_value_bytes: u64,
    pub final_rss_bytes: u64,
    pub final_live_value_bytes: u64,
    pub final_objects: u64,
    pub phases: Vec<PhaseSample>,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
    pub engine_stats: serde_json::Value,
}

/// Applies the op stream `input` to the target `make` creates, sampling RSS
/// every `sample_every` ops. Baseline RSS is taken before `make` runs. A
/// target error, or a malformed stream, ends the run with `error` set.
pub fn run_worker<T: Target>(
    engine: &str,
    workload: &str,
    make: impl FnOnce() -> Result<T, String>,
    input: impl Read,
    sample_every: u64,
) -> WorkerReport {
    let mut reader = OpReader::new(input);
    let next = move || reader.next_op().map_err(|e| format!("reading the op stream: {e}"));
    run_ops(engine, workload, make, next, sample_every, rss_bytes)
}

/// Applies the ops `next` gives (until `Ok(None)`) to the target `make`
/// creates, sampling `rss` every `sample_every` ops: this process' own for
/// a target in it, a server's for a target reached over the network.
/// Baseline RSS is taken before `make` runs. A target error, or an error
/// of `next`, ends the run with `error` set.
pub fn run_ops<T: Target>(
    engine: &str,
    workload: &str,
    make: impl FnOnce() -> Result<T, String>,
    mut next: impl FnMut() -> Result<Option<Op>, String>,
    sample_every: u64,
    rss: impl Fn() -> u64,
) -> WorkerReport {
    let mut value = Vec::with_capacity(1 << 16);
    let sample_every = sample_every.max(1);
    let mut report = WorkerReport {
        engine: engine.to_string(),
        workload: workload.to_string(),
        ops: 0,
        elapsed_secs: 0.0,
        baseline_rss_bytes: rss(),
        created_rss_bytes: 0,
        peak_rss_bytes: 0,
        live_value_bytes_at_peak: 0,
        max_live_value_bytes: 0,
        final_rss_bytes: 0,
        final_live_value_bytes: 0,
        final_objects: 0,
        phases: Vec::new(),
        error: None,
        engine_stats: serde_json::Value::Null,
    };
    let started = Instant::now();
    let mut target = match make() {
        Ok(t) => t,
        Err(e) => {
            report.error = Some(format!("creating the target: {e}"));
            return report;
        }
    };
    report.created_rss_bytes = rss();
    let (mut live, mut objects) = (0u64, 0u64);
    // Samples RSS once the target applied every op so far (keeping the
    // peak) and the target; returns the RSS.
    let sample = |report: &mut WorkerReport, target: &mut T, live: u64| -> Result<u64, String> {
        target.sync()?;
        let rss = rss();
        if rss > report.peak_rss_bytes {
            report.peak_rss_bytes = rss;
            report.live_value_bytes_at_peak = live;
        }
        target.sample();
        Ok(rss)
    };
    if let Err(e) = sample(&mut report, &mut target, 0) {
        report.error = Some(e);
        return report;
    }
    loop {
        let op = match next() {
            Ok(Some(op)) => op,
            Ok(None) => break,
            Err(e) => {
                report.error = Some(e);
                break;
            }
        };
        report.ops += 1;
        let result = match op {
            Op::Write { id, len } => {
                fill_value(id, len, &mut value);
                live += len as u64;
                objects += 1;
                report.max_live_value_bytes = report.max_live_value_bytes.max(live);
                target.write(&key_of(id), &value)
            }
            Op::Delete { id, len } => {
                live -= len as u64;
                objects -= 1;
                target.delete(&key_of(id))
            }
            Op::PhaseEnd(phase) => sample(&mut report, &mut target, live).map(|rss| {
                report.phases.push(PhaseSample { phase, ops: report.ops, rss_bytes: rss, live_value_bytes: live });
            }),
        };
        let result = result.and_then(|()| {
            if report.ops.is_multiple_of(sample_every) {
                sample(&mut report, &mut target, live).map(drop)
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            report.error = Some(format!("op {} ({op:?}): {e}", report.ops));
            break;
        }
    }
    match sample(&mut report, &mut target, live) {
        Ok(rss) => report.final_rss_bytes = rss,
        Err(e) => {
            report.error.get_or_insert(format!("at the end: {e}"));
        }
    }
    report.final_live_value_bytes = live;
    report.final_objects = objects;
    report.engine_stats = target.stats();
    report.elapsed_secs = started.elapsed().as_secs_f64();
    report
}

/// The baselines: a `HashMap` of owned keys and values over whatever global
/// allocator the binary has.
#[derive(Default)]
pub struct HashMapTarget {
    map: HashMap<Vec<u8>, Vec<u8>>,
}

impl Target for HashMapTarget {
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.map.insert(key.to_vec(), value.to_vec()) {
            None => Ok(()),
            Some(_) => Err("key written twice".into()),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), String> {
        self.map.remove(key).map(|_| ()).ok_or_else(|| "deleted key does not exist".into())
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "objects": self.map.len(), "capacity": self.map.capacity() })
    }
}

const USAGE: &str = "\
Applies a memory-benchmark op stream (from `shoal bench memory`) read on
stdin to a HashMap<Vec<u8>, Vec<u8>> and prints one JSON report line.

Options:
  --workload NAME      workload name to put in the report (default: unknown)
  --sample-every N     sample RSS every N ops (default: 1000)
  -h, --help           print this help";

/// The main of a baseline binary; `engine` names it in the report. Returns
/// the exit code: 0 when the whole stream was applied, 1 on bad arguments,
/// 2 when the run stopped early (the report says why).
pub fn baseline_main(engine: &str) -> i32 {
    let mut workload = "unknown".to_string();
    let mut sample_every = 1000u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{engine}: memory-benchmark worker\n\n{USAGE}");
                return 0;
            }
            "--workload" => match args.next() {
                Some(w) => workload = w,
                None => return usage_error(engine, "--workload needs a value"),
            },
            "--sample-every" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) => sample_every = n,
                None => return usage_error(engine, "--sample-every needs a number"),
            },
            other => return usage_error(engine, &format!("unknown argument {other}")),
        }
    }
    let report = run_worker(engine, &workload, || Ok(HashMapTarget::default()), std::io::stdin().lock(), sample_every);
    print_report(&report)
}

fn usage_error(engine: &str, msg: &str) -> i32 {
    eprintln!("{engine}: {msg}\n\n{USAGE}");
    1
}

/// Prints `report` as one JSON line on stdout; returns the worker's exit
/// code (0, or 2 if the run stopped early).
pub fn print_report(report: &WorkerReport) -> i32 {
    let line = serde_json::to_string(report).expect("report serialises");
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        return 2;
    }
    if report.error.is_some() {
        2
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{write_ops, Generator, WorkloadParams, WORKLOADS};

    #[test]
    fn hashmap_worker_applies_a_whole_workload() {
        let p = WorkloadParams { cap_bytes: 1 << 20, total_write_bytes: 4 << 20, seed: 1 };
        let mut gen = Generator::new(&WORKLOADS[2], p);
        let mut stream = Vec::new();
        write_ops(&mut gen, &mut stream).unwrap();
        let r = run_worker("test", "W3", || Ok(HashMapTarget::default()), &stream[..], 100);
        assert_eq!(r.error, None);
        assert_eq!(r.final_live_value_bytes, gen.live_bytes());
        assert!(r.max_live_value_bytes <= p.cap_bytes && r.max_live_value_bytes > p.cap_bytes / 2);
        assert_eq!(r.phases.iter().map(|s| s.phase).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(r.peak_rss_bytes >= r.final_rss_bytes || r.final_rss_bytes == 0);
        assert_eq!(r.engine_stats["objects"].as_u64(), Some(r.final_objects));
    }

    #[test]
    fn a_target_error_stops_the_run() {
        let p = WorkloadParams { cap_bytes: 1 << 16, total_write_bytes: 1 << 18, seed: 1 };
        let mut stream = Vec::new();
        write_ops(Generator::new(&WORKLOADS[0], p), &mut stream).unwrap();
        // Delete before write: the map does not have the key.
        stream.rotate_left(13 * 700);
        let r = run_worker("test", "W1", || Ok(HashMapTarget::default()), &stream[..], 100);
        assert!(r.error.is_some());
    }
}
