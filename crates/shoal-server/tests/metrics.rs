//! `/metrics` of a server and of the coordinator (`--metrics-port`;
//! `docs/observability.md`): scraped over HTTP before and after load on
//! every front end, the counters move, and the whole text parses with the
//! Prometheus client library's parsers (`tests/metrics_check.py`).

mod common;

use common::cluster::Cluster;
use common::{config, have_tool, start, Client};
use shoal_proto::{check_frame, Request, HEADER_LEN};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// The body of `GET /metrics` (asking for OpenMetrics if `openmetrics`),
/// checked to be a 200 of the expected content type.
fn scrape(addr: SocketAddr, openmetrics: bool) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = if openmetrics { "Accept: application/openmetrics-text; version=1.0.0\r\n" } else { "" };
    write!(s, "GET /metrics HTTP/1.1\r\nHost: shoal\r\nConnection: close\r\n{accept}\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the response");
    let (head, body) = out.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let kind = if openmetrics { "application/openmetrics-text" } else { "text/plain; version=0.0.4" };
    assert!(head.to_ascii_lowercase().contains(&format!("content-type: {kind}")), "{head}");
    body.to_string()
}

/// The value of the sample written exactly as `sample` (name and labels), 0 if absent.
fn value(text: &str, sample: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

/// Checks that docs/observability.md lists every family of `text` (a
/// scrape in the text format).
fn documented(text: &str) {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/observability.md")).unwrap();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("# TYPE ").and_then(|t| t.split(' ').next()) {
            assert!(doc.contains(&format!("`{name}`")), "docs/observability.md does not list {name}");
        }
    }
}

/// Runs `metrics_check.py` on two scrapes and an OpenMetrics one, with
/// samples that must have moved between them.
fn python_check(name: &str, first: &str, second: &str, openmetrics: &str, moved: &[&str]) {
    if !have_tool("python3", &["-c", "import prometheus_client"]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("shoal-metrics-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<_> = [("first.txt", first), ("second.txt", second), ("om.txt", openmetrics)]
        .iter()
        .map(|(f, text)| {
            let p = dir.join(f);
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metrics_check.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(&files[0]).arg(&files[1]).arg("--openmetrics").arg(&files[2]);
    for m in moved {
        cmd.args(["--moved", m]);
    }
    let out = cmd.output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the metrics do not check out:\n{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `n` native PINGs and one READ of a table that does not exist
/// (an error), and reads the `n + 1` responses.
fn native_load(addr: SocketAddr, n: usize) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    for id in 0..n as u64 {
        Request::Ping.encode(id, &mut out);
    }
    let read = Request::Read { table: shoal_common::TableId(999), key: b"k", rules: Default::default() };
    read.encode(n as u64, &mut out);
    s.write_all(&out).unwrap();
    let (mut buf, mut got) = (Vec::new(), 0);
    while got < n + 1 {
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).expect("responses");
        assert!(k > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..k]);
        while let Some(h) = check_frame(&buf, 1 << 20).unwrap() {
            assert!(buf.len() >= HEADER_LEN);
            buf.drain(..h.frame_len());
            got += 1;
        }
    }
}

/// memcached `set` and `get` `n` times, and one unknown command.
fn memcached_load(addr: SocketAddr, n: usize) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = Vec::new();
    for i in 0..n {
        req.extend_from_slice(format!("set k{i} 0 0 1\r\nv\r\nget k{i}\r\n").as_bytes());
    }
    req.extend_from_slice(b"bogus\r\n");
    s.write_all(&req).unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"ERROR\r\n") {
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).expect("replies");
        assert!(k > 0, "the server closed the connection");
        got.extend_from_slice(&chunk[..k]);
    }
}

#[test]
fn server_metrics_count_every_front_end_and_parse() {
    let server = start(shoal_server::ServerConfig { metrics_port: Some(0), ..config() });
    let addrs = server.addresses();
    let metrics = addrs.metrics.expect("a metrics listener");
    let first = scrape(metrics, false);
    let mut c = Client::connect(server.resp_addr());
    for i in 0..20 {
        assert_eq!(c.call(&["SET", &format!("k{i}"), "v"]), "+OK\r\n");
        assert!(c.call(&["GET", &format!("k{i}")]).starts_with('$'));
    }
    assert!(c.call(&["INCR", "k0"]).starts_with('-'), "an error reply");
    native_load(addrs.native.unwrap(), 30);
    memcached_load(addrs.memcached.unwrap(), 10);
    let second = scrape(metrics, false);
    let moved = |sample: &str| value(&second, sample) - value(&first, sample);
    assert_eq!(moved(r#"shoal_requests_total{frontend="resp",command="set"}"#), 20.0);
    assert_eq!(moved(r#"shoal_request_duration_seconds_count{frontend="resp",command="get"}"#), 20.0);
    assert_eq!(moved(r#"shoal_request_errors_total{frontend="resp",command="incr"}"#), 1.0);
    assert_eq!(moved(r#"shoal_requests_total{frontend="native",command="ping"}"#), 30.0);
    assert_eq!(moved(r#"shoal_request_errors_total{frontend="native",command="read"}"#), 1.0);
    assert_eq!(moved(r#"shoal_requests_total{frontend="memcached",command="set"}"#), 10.0);
    assert_eq!(moved(r#"shoal_request_errors_total{frontend="memcached",command="unknown"}"#), 1.0);
    assert_eq!(moved(r#"shoal_store_operations_total{op="write"}"#), 30.0);
    assert!(moved(r#"shoal_client_connections_accepted_total"#) >= 3.0);
    assert!(moved("shoal_memory_live_bytes") > 0.0);
    assert!(
        value(&second, r#"shoal_request_duration_seconds_bucket{le="+Inf",frontend="resp",command="set"}"#) >= 20.0
    );
    documented(&second);
    let om = scrape(metrics, true);
    assert!(om.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    python_check(
        "server",
        &first,
        &second,
        &om,
        &[
            r#"shoal_requests_total{frontend="resp",command="set"}"#,
            r#"shoal_request_duration_seconds_count{frontend="native",command="ping"}"#,
            r#"shoal_requests_total{frontend="memcached",command="get"}"#,
            r#"shoal_client_received_bytes_total"#,
        ],
    );
}

#[test]
fn cluster_and_coordinator_metrics_move_with_writes_and_parse() {
    let cluster = Cluster::start_configured("metrics", 2, None, |c| c.metrics_port = Some(0));
    let server = cluster.servers[0].addresses().metrics.expect("a metrics listener");
    let coordinator = cluster.coordinator_metrics();
    let (first, coordinator_first) = (scrape(server, false), scrape(coordinator, false));
    let mut c = cluster.client_to(cluster.addr(0));
    for i in 0..20 {
        // Some of the keys are server 0's, the others forwarded.
        assert_eq!(c.call(&["SET", &format!("key{i}"), "v"]), "+OK\r\n");
    }
    // Leases are renewed every quarter lease; wait for one at least.
    std::thread::sleep(Duration::from_millis(1500));
    let (second, coordinator_second) = (scrape(server, false), scrape(coordinator, false));
    assert!(value(&second, "shoal_replication_rounds_total") > value(&first, "shoal_replication_rounds_total"));
    assert_eq!(value(&second, "shoal_replication_segments_below_r"), 0.0);
    assert_eq!(value(&second, "shoal_cluster_replicas"), 1.0);
    assert!(value(&second, "shoal_backup_buffers") > 0.0);
    assert_eq!(value(&coordinator_second, r#"shoal_cluster_servers{state="up"}"#), 2.0);
    documented(&second);
    documented(&coordinator_second);
    python_check(
        "server-in-cluster",
        &first,
        &second,
        &scrape(server, true),
        &["shoal_replication_rounds_total", "shoal_replication_sent_bytes_total"],
    );
    python_check(
        "coordinator",
        &coordinator_first,
        &coordinator_second,
        &scrape(coordinator, true),
        &[r#"shoal_coordinator_requests_total{op="renew_lease"}"#],
    );
}
