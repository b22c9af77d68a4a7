//! Real Redis clients against an in-process Shoal: redis-cli, a short
//! redis-benchmark run, and redis-py compared reply by reply with a real
//! redis-server (tests/resp_compat.py, for transactions
//! tests/resp_txn_compat.py, for streams tests/resp_stream_compat.py). Each test fails in CI when a tool is
//! missing, and skips with a loud message elsewhere.

mod common;

use common::{config, have_tool, start};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd`, killing it after `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{cmd:?} took more than {limit:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = run_bounded(
        Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "redis-cli {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

#[test]
fn redis_cli_works() {
    if !have_tool("redis-cli", &["--version"]) {
        return;
    }
    let server = start(config());
    let port = server.resp_addr().port();
    assert_eq!(cli(port, &["PING"]), "PONG");
    assert_eq!(cli(port, &["SET", "greeting", "hello"]), "OK");
    assert_eq!(cli(port, &["GET", "greeting"]), "hello");
    assert_eq!(cli(port, &["INCRBY", "n", "41"]), "41");
    assert_eq!(cli(port, &["INCR", "n"]), "42");
    assert_eq!(cli(port, &["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(cli(port, &["MGET", "a", "b", "missing"]), "1\n2", "nil prints as an empty line");
    assert_eq!(cli(port, &["DBSIZE"]), "4");
    assert_eq!(cli(port, &["-n", "3", "SET", "other", "db"]), "OK");
    assert_eq!(cli(port, &["-n", "3", "DBSIZE"]), "1");
    assert_eq!(cli(port, &["--scan", "--pattern", "gree*"]), "greeting");
    assert!(cli(port, &["INFO"]).contains("redis_version:"));
    assert!(cli(port, &["INFO", "shoal"]).contains("memory_utilisation:"));
    assert_eq!(cli(port, &["GET"]), "ERR wrong number of arguments for 'get' command");
    assert_eq!(cli(port, &["NOSUCH", "x"]), "ERR unknown command 'NOSUCH', with args beginning with: 'x'");
    assert_eq!(cli(port, &["-3", "GET", "missing"]), "", "RESP3 null prints as nothing");
    assert_eq!(cli(port, &["-3", "GET", "a"]), "1");
    // Commands from stdin, as a script would pipe them.
    let mut piped = Command::new("redis-cli");
    piped.args(["-p", &port.to_string()]).stdin(Stdio::piped());
    let mut child = piped.stdout(Stdio::piped()).spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"SET piped yes\nGET piped\nDEL piped\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\nyes\n1\n");
}

#[test]
fn redis_benchmark_completes_without_errors() {
    if !have_tool("redis-benchmark", &["--version"]) {
        return;
    }
    let server = start(config());
    let port = server.resp_addr().port().to_string();
    for extra in [&[][..], &["-P", "16"][..]] {
        let out = run_bounded(
            Command::new("redis-benchmark")
                .args(["-h", "127.0.0.1", "-p", &port, "-n", "20000", "-q", "-t", "set,get,incr,mset"])
                .args(extra),
            Duration::from_secs(180),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "redis-benchmark failed:\n{stdout}\n{stderr}");
        for t in ["SET", "GET", "INCR", "MSET"] {
            assert!(
                stdout.lines().any(|l| l.contains(t) && l.contains("requests per second")),
                "no result for {t}:\n{stdout}"
            );
        }
        let lower = format!("{stdout}{stderr}").to_lowercase();
        assert!(!lower.contains("error") && !lower.contains("warning"), "benchmark reported:\n{stdout}\n{stderr}");
    }
    let stats = &server.context().stats;
    assert_eq!(shoal_server::ServerStats::get(&stats.protocol_errors), 0);
}

/// Runs the differential script `script` (in tests/) against a fresh
/// server, with `args` after `--shoal-port PORT`, within `limit`: it must
/// report no difference from the real Redis. Skips (loudly, failing in CI)
/// without redis-server or redis-py.
fn differential(script: &str, args: &[&str], limit: Duration, what: &str) {
    if !have_tool("redis-server", &["--version"]) || !have_tool("python3", &["-c", "import redis"]) {
        return;
    }
    let server = start(config());
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let port = server.resp_addr().port().to_string();
    let out =
        run_bounded(Command::new("python3").args(["-W", "ignore", &path, "--shoal-port", &port]).args(args), limit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} differ from Redis:\n{stdout}");
    assert!(stdout.contains(", 0 differences"));
}

#[test]
fn redis_py_replies_match_a_real_redis_server() {
    differential("resp_compat.py", &["--ops", "3000"], Duration::from_secs(240), "replies");
}

#[test]
fn redis_py_transactions_match_a_real_redis_server() {
    differential("resp_txn_compat.py", &["--rounds", "400"], Duration::from_secs(240), "transaction replies");
}

#[test]
fn redis_py_stream_replies_match_a_real_redis_server() {
    differential("resp_stream_compat.py", &["--ops", "3000"], Duration::from_secs(240), "stream replies");
}

#[test]
fn command_and_error_counters_match_a_real_redis_server() {
    differential("resp_stats_compat.py", &[], Duration::from_secs(60), "INFO commandstats/errorstats");
}

#[test]
fn server_commands_and_incrbyfloat_match_a_real_redis_server() {
    differential(
        "resp_server_compat.py",
        &["--floats", "20000"],
        Duration::from_secs(240),
        "server commands, COMMAND DOCS and INCRBYFLOAT",
    );
}
