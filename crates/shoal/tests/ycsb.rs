//! Smoke test of `shoal bench ycsb` at a tiny size: the real binary against
//! an in-process server, over the native protocol and over RESP.

use serde_json::Value;
use shoal_server::{ByteSize, Server, ServerConfig};
use std::process::Command;

fn start() -> Server {
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        ..ServerConfig::default()
    };
    Server::start(config).expect("server starts")
}

/// Runs the benchmark; returns its JSON lines.
fn ycsb(args: &[&str]) -> Vec<Value> {
    let o = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["bench", "ycsb", "--json", "--records", "300", "--threads", "2", "--pipeline", "4"])
        .args(args)
        .output()
        .expect("run shoal");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "ycsb {args:?} failed:\n{out}\n{}", String::from_utf8_lossy(&o.stderr));
    out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn line<'a>(lines: &'a [Value], workload: &str, op: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["workload"] == workload && l["op"] == op)
        .unwrap_or_else(|| panic!("no line for {workload} {op}"))
}

fn check_clean(lines: &[Value]) {
    for l in lines {
        assert_eq!(l["errors"], 0, "{l}");
        assert!(l["error"].is_null(), "{l}");
        assert_eq!(l["not_found"], 0, "every record was loaded: {l}");
        assert!(l["ops_per_sec"].as_f64().unwrap() > 0.0, "{l}");
        let (p50, p99, max) =
            (l["p50_us"].as_f64().unwrap(), l["p99_us"].as_f64().unwrap(), l["max_us"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{l}");
    }
}

#[test]
fn native_every_workload() {
    let server = start();
    let addr = server.addresses().native.unwrap().to_string();
    let lines = ycsb(&["--server", &addr, "--load", "--workload", "A,B,C,D,F,W", "--operations", "2000"]);
    check_clean(&lines);
    assert_eq!(line(&lines, "load", "insert")["ops"], 300);
    for w in ["A", "B", "C", "D", "F", "W"] {
        assert_eq!(line(&lines, w, "all")["ops"], 2000, "workload {w}");
    }
    let a = line(&lines, "A", "read")["ops"].as_u64().unwrap() + line(&lines, "A", "update")["ops"].as_u64().unwrap();
    assert_eq!(a, 2000);
    assert_eq!(line(&lines, "D", "read")["key_dist"], "latest");
    assert!(line(&lines, "D", "insert")["ops"].as_u64().unwrap() > 0);
    assert!(line(&lines, "F", "rmw")["ops"].as_u64().unwrap() > 0);
    assert!(!lines.iter().any(|l| l["workload"] == "C" && l["op"] == "update"));

    // The records are there for a second run without --load; D's inserts
    // landed in the store.
    let again = ycsb(&["--server", &addr, "--workload", "C", "--operations", "500", "--key-dist", "uniform"]);
    check_clean(&again);
    let stats =
        Command::new(env!("CARGO_BIN_EXE_shoal")).args(["stats", "--json", "--server", &addr]).output().unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert!(stats["objects"].as_u64().unwrap() > 300, "{stats}");
}

#[test]
fn resp_and_duration_bound() {
    let server = start();
    let addr = server.addresses().resp.to_string();
    let lines = ycsb(&["--protocol", "resp", "--server", &addr, "--load", "--workload", "A,F", "--duration", "0.3"]);
    check_clean(&lines);
    let a = line(&lines, "A", "all");
    assert!(a["secs"].as_f64().unwrap() < 5.0, "--duration bounds the run: {a}");
    assert_eq!(a["protocol"], "resp");
}

#[test]
fn missing_table_is_a_clear_error() {
    let server = start();
    let addr = server.addresses().native.unwrap().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["bench", "ycsb", "--server", &addr, "--operations", "10"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no table 'ycsb'") && err.contains("--load"), "{err}");
}

#[test]
fn load_progress_is_plain_lines_on_stderr() {
    let server = start();
    let addr = server.addresses().native.unwrap().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["bench", "ycsb", "--json", "--records", "2000", "--threads", "2", "--pipeline", "10"])
        .args(["--server", &addr, "--load", "--workload", "C", "--operations", "100"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // stdout stays JSON only; stderr (a pipe) has a line per tenth.
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with("ycsb load: ")).collect();
    assert!(progress.iter().filter(|l| l.contains("%)") && l.contains("records/s")).count() >= 5, "{err}");
    assert!(progress.iter().any(|l| l.contains("2,000/2,000 records (100%)")), "{err}");
    assert!(progress.last().unwrap().contains("2,000 records in"), "{err}");
}
