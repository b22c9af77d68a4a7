//! Both baseline binaries apply an op stream from stdin and print a report.

use shoal_bench_baseline::{write_ops, Generator, WorkerReport, WorkloadParams, WORKLOADS};
use std::io::Write;
use std::process::{Command, Stdio};

fn run(bin: &str) -> WorkerReport {
    let p = WorkloadParams { cap_bytes: 2 << 20, total_write_bytes: 8 << 20, seed: 3 };
    let mut stream = Vec::new();
    write_ops(Generator::new(&WORKLOADS[4], p), &mut stream).unwrap();
    let mut child = Command::new(bin)
        .args(["--workload", "W5", "--sample-every", "500"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{bin} exited with {}", out.status);
    let report: WorkerReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.error, None);
    assert_eq!(report.workload, "W5");
    assert!(report.peak_rss_bytes >= report.baseline_rss_bytes);
    assert!(report.max_live_value_bytes > p.cap_bytes / 2 && report.max_live_value_bytes <= p.cap_bytes);
    assert_eq!(report.phases.len(), 3);
    report
}

#[test]
fn system_allocator_worker() {
    assert_eq!(run(env!("CARGO_BIN_EXE_shoal-baseline-sys")).engine, "hashmap-sys");
}

#[test]
fn jemalloc_worker() {
    assert_eq!(run(env!("CARGO_BIN_EXE_shoal-baseline-jemalloc")).engine, "hashmap-jemalloc");
}

#[test]
fn help_and_bad_arguments() {
    let bin = env!("CARGO_BIN_EXE_shoal-baseline-sys");
    let help = Command::new(bin).arg("--help").output().unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--sample-every"));
    let bad = Command::new(bin).arg("--bogus").stdin(Stdio::null()).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
}
