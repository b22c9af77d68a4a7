//! Runs every `shoal bench` subcommand at a tiny size through the built
//! binary and checks that it exits 0 and that its JSON lines parse and hold
//! plausible values.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const BASELINES: [&str; 2] = ["shoal-baseline-sys", "shoal-baseline-jemalloc"];

/// The memory benchmark runs the baseline executables next to `shoal`.
/// `cargo test --workspace` builds them (their crate has integration tests);
/// `cargo test -p shoal` does not, so build them here, into the same
/// directory, when they are missing.
fn ensure_baselines() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = Path::new(SHOAL).parent().expect("binary directory").to_path_buf();
        let missing =
            |d: &PathBuf| BASELINES.iter().any(|b| !d.join(format!("{b}{}", std::env::consts::EXE_SUFFIX)).exists());
        if !missing(&dir) {
            return;
        }
        let profile = dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "shoal-bench-baseline", "--bins"]);
        if profile != "debug" {
            cmd.args(["--profile", profile]);
        }
        let status = cmd.status().expect("run cargo build for the baselines");
        assert!(status.success(), "building the baseline executables failed");
        assert!(!missing(&dir), "baseline executables still missing from {}", dir.display());
    });
}

/// Runs `shoal bench <args> --json`; asserts exit 0; returns the JSON lines.
fn bench(args: &[&str]) -> Vec<Value> {
    let out = Command::new(SHOAL).arg("bench").args(args).arg("--json").output().expect("run shoal");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "shoal bench {args:?} exited with {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!lines.is_empty(), "no JSON output");
    lines
}

fn num(v: &Value, field: &str) -> f64 {
    v[field].as_f64().unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

#[test]
fn memory_bench_runs_every_engine() {
    ensure_baselines();
    let lines = bench(&["memory", "--scale", "0.03", "--workloads", "W1,W3,W8"]);
    assert_eq!(lines.len(), 9, "3 workloads x 3 engines");
    for l in &lines {
        assert_eq!(l["bench"], "memory");
        assert!(l["error"].is_null(), "{l}");
        for f in ["peak_ratio", "peak_ratio_net", "final_ratio", "final_ratio_net"] {
            assert!(num(l, f) > 0.0, "{f} in {l}");
        }
        assert!(num(l, "peak_rss_bytes") >= num(l, "baseline_rss_bytes"));
        let cap = num(l, "cap_bytes");
        assert!(num(l, "max_live_value_bytes") <= cap && num(l, "max_live_value_bytes") > 0.5 * cap, "{l}");
    }
    let shoal: Vec<&Value> = lines.iter().filter(|l| l["engine"] == "shoal").collect();
    assert_eq!(shoal.len(), 3);
    for l in shoal {
        let s = &l["shoal"];
        assert!(num(s, "seglets_in_use") > 0.0 && num(s, "log_utilisation") > 0.0, "{l}");
        assert!(num(s, "write_cost") >= 1.0);
        assert!(l["meets_target"].is_boolean());
    }
    for engine in ["hashmap-sys", "hashmap-jemalloc"] {
        assert_eq!(lines.iter().filter(|l| l["engine"] == engine).count(), 3);
    }
}

/// Whether `tool probe...` runs; in CI (`CI` set) a missing tool fails the
/// test instead of skipping it.
fn have_tool(tool: &str, probe: &[&str]) -> bool {
    let ok = Command::new(tool).args(probe).output().is_ok_and(|o| o.status.success());
    if !ok {
        let msg = format!(
            "`{tool} {}` failed: install redis-server and memcached (scripts/check does this)",
            probe.join(" ")
        );
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    }
    ok
}

#[test]
fn memory_bench_over_resp_drives_servers() {
    if !have_tool("redis-server", &["--version"]) || !have_tool("memcached", &["-V"]) {
        return;
    }
    // The smallest scale whose 1.5x still makes a valid Shoal server (a
    // store needs a few segments' worth of seglets).
    let lines =
        bench(&["memory", "--over-resp", "--scale", "0.12", "--workloads", "W3", "--server-memory-factors", "4"]);
    assert_eq!(lines.len(), 3, "shoal-resp, redis, memcached: {lines:?}");
    for (l, engine) in lines.iter().zip(["shoal-resp", "redis", "memcached"]) {
        assert_eq!(l["engine"], engine);
        assert!(l["error"].is_null(), "{l}");
        // The server held the live values: its RSS grew by at least as much.
        let grown = num(l, "peak_rss_bytes") - num(l, "baseline_rss_bytes");
        assert!(grown >= num(l, "max_live_value_bytes"), "{l}");
        assert!(num(l, "settled_rss_bytes") > 0.0, "{l}");
        // W3 deletes 90% in phase 2: the live bytes at the end are what phase 3 added back.
        let phases = l["phases"].as_array().expect("phases");
        assert_eq!(phases.len(), 3, "{l}");
        assert!(num(&phases[1], "live_value_bytes") < 0.2 * num(&phases[0], "live_value_bytes"), "{l}");
    }
    assert_eq!(lines[0]["memory_factor"].as_f64(), Some(4.0));
    assert!(lines[0]["meets_target"].is_boolean());
}

#[test]
fn memory_bench_idle_growth_reports_rss_before_and_after() {
    if !have_tool("redis-server", &["--version"]) || !have_tool("memcached", &["-V"]) {
        return;
    }
    let lines = bench(&["memory", "--over-resp", "--idle-cycles", "20000", "--scale", "0.12"]);
    assert_eq!(lines.len(), 4, "shoal-resp x4, x1.5, redis, memcached: {lines:?}");
    for l in &lines {
        assert_eq!(l["bench"], "memory-idle");
        assert!(l["error"].is_null(), "{l}");
        assert_eq!(num(l, "cycles"), 20000.0);
        let start = num(l, "start_rss_bytes");
        assert!(start > 0.0 && num(l, "peak_rss_bytes") >= start, "{l}");
        assert!((num(l, "growth") - num(l, "end_rss_bytes") / start).abs() < 1e-9, "{l}");
    }
    assert!(lines[0]["meets_target"].is_boolean());
}

#[test]
fn utilization_bench_reports_throughput_and_ratio() {
    let lines = bench(&[
        "utilization",
        "--memory-mib",
        "48",
        "--segment-kib",
        "1024",
        "--seglet-kib",
        "64",
        "--sizes",
        "100,1000",
        "--utils",
        "30,60",
        "--dist",
        "uniform,zipf",
        "--duration",
        "0.3",
    ]);
    let runs: Vec<&Value> = lines.iter().filter(|l| l["bench"] == "utilization").collect();
    let ratios: Vec<&Value> = lines.iter().filter(|l| l["bench"] == "utilization_ratio").collect();
    assert_eq!(runs.len(), 8);
    assert_eq!(ratios.len(), 4);
    for r in runs {
        assert!(r["error"].is_null(), "{r}");
        assert!(num(r, "ops_per_sec") > 0.0 && num(r, "mb_per_sec") > 0.0, "{r}");
        assert!(num(r, "write_cost") >= 1.0 && num(r, "store_write_cost") >= 1.0, "{r}");
        let util = num(r, "target_util_pct") / 100.0;
        assert!((num(r, "memory_utilisation") - util).abs() < 0.05, "{r}");
    }
    for r in ratios {
        assert!(num(r, "ratio") > 0.0, "{r}");
        assert_eq!(r["target"].is_number(), r["value_bytes"] == 100);
    }
}

#[test]
fn overhead_bench_reports_bytes_per_object() {
    let lines = bench(&["overhead", "--objects", "200000", "--single-objects", "20000"]);
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert!(l["error"].is_null(), "{l}");
        assert!(num(l, "live_key_value_bytes") == num(l, "objects") * 48.0, "{l}");
        // An entry header is 9-13 bytes for these objects.
        let header = num(l, "entry_overhead_per_object");
        assert!((9.0..14.0).contains(&header), "{l}");
        // The smallest valid store is 32 MiB: its hash table alone is large
        // per object for a few thousand objects, so only bound from below.
        for f in ["stats_bytes_per_object", "log_bytes_per_object"] {
            assert!(num(l, f) > header, "{f} in {l}");
        }
        assert!(num(l, "rss_bytes_per_object").is_finite());
        assert!(num(l, "objects_per_sec") > 0.0);
    }
    assert!(num(&lines[0], "stats_bytes_per_object") < 200.0, "{}", lines[0]);
    assert_eq!(lines[0]["load"], "multi_write x64");
    assert_eq!(lines[1]["load"], "write");
}

#[test]
fn ops_bench_reports_rates_and_latencies() {
    let lines = bench(&["ops", "--objects", "20000", "--ops", "20000", "--value-size", "64"]);
    let ops: Vec<&str> = lines.iter().map(|l| l["op"].as_str().expect("op")).collect();
    assert_eq!(ops, ["read", "overwrite", "insert", "remove"]);
    for l in &lines {
        assert!(l["error"].is_null(), "{l}");
        assert_eq!(num(l, "ops"), 20000.0, "{l}");
        assert!(num(l, "ops_per_sec") > 0.0);
        assert!(num(l, "p50_ns") > 0.0 && num(l, "p99_ns") >= num(l, "p50_ns"), "{l}");
    }
}

#[test]
fn help_describes_every_bench() {
    let out = Command::new(SHOAL).args(["bench", "--help"]).output().expect("run shoal");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in ["memory", "utilization", "overhead", "ops", "dxram"] {
        assert!(help.contains(sub), "{sub} missing from:\n{help}");
        let sub_help = Command::new(SHOAL).args(["bench", sub, "--help"]).output().expect("run shoal");
        assert!(sub_help.status.success());
        assert!(String::from_utf8_lossy(&sub_help.stdout).contains("--json"));
    }
    let bad =
        Command::new(SHOAL).args(["bench", "memory", "--workloads", "W9", "--engines", "shoal"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
