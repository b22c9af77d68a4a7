//! TLS on the Redis port, with real clients: redis-cli and
//! redis-benchmark (`--tls`), redis-py (`ssl=True`); mutual TLS (no client
//! certificate, one from another CA, the right one); a clear-text client
//! and a silent client on a TLS port; the reply bound through TLS. The
//! certificates come from `LocalPki` (a throwaway CA made per test).
//! Each test fails in CI when a tool is missing, and skips loudly elsewhere.

mod common;

use common::{config, have_tool, start};
use shoal_server::tls::LocalPki;
use shoal_server::{ByteSize, Server, ServerConfig, TlsAuthClients};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A directory of certificates, removed at the end (kept if the test failed).
struct Pki {
    dir: PathBuf,
    files: LocalPki,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("shoal-resp-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = LocalPki::create_or_load(&dir).expect("certificates");
        Pki { dir, files }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A server speaking TLS with `pki`'s server certificate; with its CA as
/// `tls_ca` when `mutual`.
fn tls_config(pki: &Pki, mutual: bool) -> ServerConfig {
    ServerConfig {
        tls_cert: Some(pki.files.server_cert.clone()),
        tls_key: Some(pki.files.server_key.clone()),
        tls_ca: mutual.then(|| pki.files.ca.clone()),
        ..config()
    }
}

fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{cmd:?} took more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// redis-cli over TLS to `server`, trusting `pki`'s CA, presenting
/// `identity` (certificate, key) if given: (success, stdout, stderr).
fn cli(server: &Server, pki: &Pki, identity: Option<(&PathBuf, &PathBuf)>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["--tls", "--cacert"]).arg(&pki.files.ca);
    if let Some((cert, key)) = identity {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    cmd.args(["-h", "127.0.0.1", "-p", &server.resp_addr().port().to_string()]).args(args);
    let out = run_bounded(&mut cmd, Duration::from_secs(20));
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim_end().to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// One field of `INFO stats` over TLS.
fn info_stat(server: &Server, pki: &Pki, identity: Option<(&PathBuf, &PathBuf)>, field: &str) -> u64 {
    let (_, info, _) = cli(server, pki, identity, &["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn redis_cli_and_redis_benchmark_work_over_tls() {
    if !have_tool("redis-cli", &["--version"]) || !have_tool("redis-benchmark", &["--version"]) {
        return;
    }
    let pki = Pki::new("cli");
    let server = start(tls_config(&pki, false));
    assert_eq!(cli(&server, &pki, None, &["SET", "greeting", "hello"]).1, "OK");
    assert_eq!(cli(&server, &pki, None, &["GET", "greeting"]).1, "hello");
    assert_eq!(cli(&server, &pki, None, &["MSET", "a", "1", "b", "2"]).1, "OK");
    assert_eq!(cli(&server, &pki, None, &["MGET", "a", "b", "missing"]).1, "1\n2", "nil: an empty line");
    // A pipelined load: 50 clients, 16 requests in flight each.
    let port = server.resp_addr().port().to_string();
    let out = run_bounded(
        Command::new("redis-benchmark").args(["--tls", "--cacert"]).arg(&pki.files.ca).args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "set,get",
            "-n",
            "20000",
            "-P",
            "16",
            "-r",
            "1000",
            "-q",
        ]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for test in ["SET", "GET"] {
        assert!(stdout.contains(&format!("{test}: ")), "no {test} result in {stdout:?}");
    }
    assert!(!stdout.to_lowercase().contains("error"), "{stdout}");
    let (_, dbsize, _) = cli(&server, &pki, None, &["DBSIZE"]);
    assert!(dbsize.parse::<u64>().unwrap() > 3, "the benchmark's keys are there: {dbsize}");
    assert!(info_stat(&server, &pki, None, "tls_handshakes") >= 55, "50 benchmark clients, 5 redis-cli runs");
    assert_eq!(info_stat(&server, &pki, None, "tls_handshake_failures"), 0);
}

/// redis-py: `ssl=True` with the CA, a password (AUTH through TLS), a
/// pipeline of 2000 commands; with mutual TLS: refused without a client
/// certificate, served with one. Prints one line per check.
const REDIS_PY: &str = r#"
import sys, redis
port, ca, cert, key, password = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
try:
    redis.Redis(port=port, ssl=True, ssl_ca_certs=ca, password=password).ping()
    print("no certificate: served")
except redis.exceptions.ConnectionError as e:
    print("no certificate: refused:", e)
r = redis.Redis(port=port, ssl=True, ssl_ca_certs=ca, ssl_certfile=cert, ssl_keyfile=key, password=password)
r.set("k", "v")
print("get:", r.get("k").decode())
p = r.pipeline(transaction=False)
for i in range(1000):
    p.set("p%d" % i, i)
    p.incr("counter")
replies = p.execute()
print("pipeline:", len(replies), replies[-1])
print("dbsize:", r.dbsize())
try:
    redis.Redis(port=port, ssl=True, ssl_ca_certs=ca, ssl_certfile=cert, ssl_keyfile=key).get("k")
    print("no password: served")
except redis.exceptions.AuthenticationError as e:
    print("no password: refused:", e)
"#;

#[test]
fn redis_py_works_over_mutual_tls_with_a_password() {
    if !have_tool("python3", &["-c", "import redis"]) {
        return;
    }
    let pki = Pki::new("py");
    let server = start(ServerConfig {
        requirepass: Some(shoal_server::auth::Password("s3cret".into())),
        ..tls_config(&pki, true)
    });
    let f = &pki.files;
    let out = run_bounded(
        Command::new("python3")
            .args(["-c", REDIS_PY, &server.resp_addr().port().to_string()])
            .args([&f.ca, &f.client_cert, &f.client_key])
            .arg("s3cret"),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("no certificate: refused:") && lines[0].contains("CERTIFICATE_REQUIRED"), "{stdout}");
    assert_eq!(&lines[1..4], ["get: v", "pipeline: 2000 1000", "dbsize: 1002"], "{stdout}");
    assert!(lines[4].starts_with("no password: refused:"), "{stdout}");
}

#[test]
fn mutual_tls_refuses_a_missing_or_foreign_certificate() {
    if !have_tool("redis-cli", &["--version"]) {
        return;
    }
    let pki = Pki::new("mutual");
    let other = Pki::new("mutual-other");
    let server = start(tls_config(&pki, true));
    let mine = Some((&pki.files.client_cert, &pki.files.client_key));
    let (ok, out, err) = cli(&server, &pki, None, &["PING"]);
    assert!(!ok && out.is_empty(), "no certificate: refused ({out:?}, {err:?})");
    let (ok, out, err) = cli(&server, &pki, Some((&other.files.client_cert, &other.files.client_key)), &["PING"]);
    assert!(!ok && out.is_empty(), "a certificate of another CA: refused ({out:?}, {err:?})");
    assert_eq!(cli(&server, &pki, mine, &["PING"]).1, "PONG");
    assert_eq!(info_stat(&server, &pki, mine, "tls_handshake_failures"), 2);
    // Optional: served without a certificate, still refused with a foreign one.
    let server = start(ServerConfig { tls_auth_clients: TlsAuthClients::Optional, ..tls_config(&pki, true) });
    assert_eq!(cli(&server, &pki, None, &["PING"]).1, "PONG");
    let (ok, out, _) = cli(&server, &pki, Some((&other.files.client_cert, &other.files.client_key)), &["PING"]);
    assert!(!ok && out.is_empty());
    assert_eq!(cli(&server, &pki, mine, &["PING"]).1, "PONG");
}

#[test]
fn a_clear_text_client_on_a_tls_port_is_refused_and_others_are_served() {
    if !have_tool("redis-cli", &["--version"]) {
        return;
    }
    let pki = Pki::new("plain");
    let server = start(tls_config(&pki, false));
    let addr = server.resp_addr();
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut got = String::new();
    plain.read_to_string(&mut got).expect("closed, not timed out");
    assert_eq!(got, "-ERR this port speaks TLS only (redis-cli: --tls)\r\n");
    // Bytes that start like TLS and are not: the handshake fails, cleanly.
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    garbage.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5, 0xff, 0xff]).unwrap();
    let mut rest = Vec::new();
    let _ = garbage.read_to_end(&mut rest);
    // redis-cli without --tls sees the error; with it, all is served.
    let out = Command::new("redis-cli").args(["-p", &addr.port().to_string(), "PING"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("TLS only"), "{out:?}");
    assert_eq!(cli(&server, &pki, None, &["SET", "after", "yes"]).1, "OK");
    assert_eq!(cli(&server, &pki, None, &["GET", "after"]).1, "yes");
    assert_eq!(info_stat(&server, &pki, None, "tls_handshake_failures"), 3);
}

#[test]
fn a_silent_client_is_dropped_after_the_handshake_timeout_and_blocks_no_one() {
    if !have_tool("redis-cli", &["--version"]) {
        return;
    }
    let pki = Pki::new("silent");
    let server = start(ServerConfig { tls_handshake_timeout_ms: 1500, max_connections: 3, ..tls_config(&pki, false) });
    let addr = server.resp_addr();
    let started = Instant::now();
    let silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // They hold no one up: a TLS client is served meanwhile.
    assert_eq!(cli(&server, &pki, None, &["PING"]).1, "PONG");
    std::thread::sleep(Duration::from_millis(300));
    // They count toward the limit: with both open, a third waiting client
    // fills it and a fourth is closed at once.
    let _third = TcpStream::connect(addr).unwrap();
    let mut fourth = TcpStream::connect(addr).unwrap();
    fourth.set_read_timeout(Some(Duration::from_millis(1000))).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(fourth.read(&mut b), Ok(0)), "over the connection limit: closed without a word");
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "closed by the server");
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1400) && waited < Duration::from_secs(5), "closed after {waited:?}");
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(info_stat(&server, &pki, None, "tls_handshake_timeouts"), 3);
    assert_eq!(info_stat(&server, &pki, None, "rejected_connections"), 1);
}

#[test]
fn a_tls_client_that_does_not_read_its_replies_is_disconnected() {
    let pki = Pki::new("unread");
    let server = start(ServerConfig {
        max_value_size: ByteSize(64 << 10),
        max_request_size: ByteSize(128 << 10),
        request_buffer_size: ByteSize(128 << 10),
        reply_buffer_size: ByteSize(256 << 10),
        ..tls_config(&pki, false)
    });
    let stats = &server.context().stats;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let roots = shoal_common::tls::load_roots(&pki.files.ca).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(shoal_common::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(server.resp_addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client)).connect(name, tcp).await.unwrap();
        let value = "x".repeat(60 << 10);
        tls.write_all(&common::encode(&[b"SET", b"big", value.as_bytes()])).await.unwrap();
        let mut ok = [0u8; 5];
        tls.read_exact(&mut ok).await.unwrap();
        assert_eq!(&ok, b"+OK\r\n");
        // 100 GETs of 60 KiB in one write, never read: 6 MiB of replies
        // against a 256 KiB bound.
        let gets: Vec<u8> = (0..100).flat_map(|_| common::encode(&[b"GET", b"big"])).collect();
        let sent = async {
            let _ = tls.write_all(&gets).await;
            let _ = tls.flush().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), sent).await;
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while shoal_server::ServerStats::get(&stats.reply_overflows) == 0 {
        assert!(
            Instant::now() < deadline,
            "never disconnected: commands {} bytes_in {} bytes_out {} open {}",
            shoal_server::ServerStats::get(&stats.commands),
            shoal_server::ServerStats::get(&stats.bytes_in),
            shoal_server::ServerStats::get(&stats.bytes_out),
            shoal_server::ServerStats::get(&stats.connections_current)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
