//! Values from stdin and files (`shoal put TABLE KEY -`, `--value-file`)
//! and bulk loads (`shoal load`), as the real binary against an in-process
//! server on 127.0.0.1: binary-safe round trips, the bound on what is read,
//! errors and exit codes, and the plain progress lines a load prints when
//! stderr is not a terminal.

use shoal_client::blocking::Client;
use shoal_server::{ByteSize, Server, ServerConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The largest value the test servers take.
const MAX_VALUE: usize = 4096;

fn start() -> (Server, SocketAddr) {
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        max_value_size: ByteSize(MAX_VALUE as u64),
        log_level: "warn".into(),
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

/// Runs `shoal <args> --server <addr>` with `stdin` as its standard input.
fn shoal(addr: SocketAddr, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .args(["--server", &addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shoal");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    // A command that stops reading early closes the pipe: ignore EPIPE.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("shoal runs");
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "shoal failed: {}{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

/// A temporary file, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, content: &[u8]) -> TempFile {
        let p = std::env::temp_dir().join(format!("shoal-client-load-{}-{name}", std::process::id()));
        std::fs::write(&p, content).unwrap();
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn read(addr: SocketAddr, table: &str, key: &[u8]) -> Vec<u8> {
    let mut c = Client::connect(addr).unwrap();
    let t = c.table_id(table).unwrap();
    c.read(t, key).unwrap().0
}

/// Every byte value, then more: a value no shell argument could carry.
fn binary(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 256) as u8).collect()
}

#[test]
fn put_reads_the_value_from_stdin_binary_safe() {
    let (_server, a) = start();
    ok(&shoal(a, &["create-table", "t"], b""));
    let value = binary(1000);
    assert_eq!(ok(&shoal(a, &["put", "t", "k", "-"], &value)), "OK (version 1)\n");
    assert_eq!(read(a, "t", b"k"), value);
    // Exactly the largest value is taken; an empty stdin is an empty value.
    let largest = binary(MAX_VALUE);
    ok(&shoal(a, &["put", "t", "big", "-"], &largest));
    assert_eq!(read(a, "t", b"big"), largest);
    ok(&shoal(a, &["put", "t", "empty", "-", "--json"], b""));
    assert_eq!(read(a, "t", b"empty"), b"");
    // The inline form is unchanged, rules and TTL included.
    ok(&shoal(a, &["put", "t", "k", "inline", "--if-version", "1", "--ttl-ms", "60000"], b""));
    assert_eq!(read(a, "t", b"k"), b"inline");
}

#[test]
fn put_reads_the_value_from_a_file() {
    let (_server, a) = start();
    ok(&shoal(a, &["create-table", "t"], b""));
    let value = binary(3000);
    let f = TempFile::new("value", &value);
    assert_eq!(ok(&shoal(a, &["put", "t", "k", "--value-file", f.path()], b"")), "OK (version 1)\n");
    assert_eq!(read(a, "t", b"k"), value);

    // A value and --value-file together, or neither, are usage errors.
    let o = shoal(a, &["put", "t", "k", "v", "--value-file", f.path()], b"");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = shoal(a, &["put", "t", "k"], b"");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = shoal(a, &["put", "t", "k", "--value-file", "/nonexistent/shoal-value"], b"");
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("cannot open /nonexistent/shoal-value"), "{}", text(&o.stderr));
}

#[test]
fn an_oversized_value_is_refused_without_reading_it_all() {
    let (_server, a) = start();
    ok(&shoal(a, &["create-table", "t"], b""));
    ok(&shoal(a, &["put", "t", "k", "before"], b""));

    let o = shoal(a, &["put", "t", "k", "-"], &binary(MAX_VALUE + 1));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains(&format!("the value from stdin is larger than the server's maximum of {MAX_VALUE} bytes")),
        "{e}"
    );
    let f = TempFile::new("big", &binary(MAX_VALUE * 3));
    let o = shoal(a, &["put", "t", "k", "--value-file", f.path(), "--json"], b"");
    assert_eq!(o.status.code(), Some(2));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["error"], "too_large");
    assert_eq!(read(a, "t", b"k"), b"before", "nothing was written");

    // An input far beyond the limit is not read to its end: the command
    // stops after the limit + 1 and the writer sees the pipe close.
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["put", "t", "k", "-", "--server", &a.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        let mut written = 0usize;
        while written < 256 << 20 {
            if input.write_all(&chunk).is_err() {
                break;
            }
            written += chunk.len();
        }
        written
    });
    assert_eq!(child.wait().unwrap().code(), Some(2));
    let written = writer.join().unwrap();
    assert!(written < 256 << 20, "the command read all {written} bytes");
}

/// Escapes bytes for `shoal load`'s format.
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

/// Records `i` of a load: text keys and values, with every tenth one binary.
fn record(i: usize) -> (Vec<u8>, Vec<u8>) {
    if i % 10 == 3 {
        let mut key = format!("bin{i}-").into_bytes();
        key.extend_from_slice(&[0, b'\t', b'\n', 0xff]);
        (key, binary(50 + i % 300))
    } else {
        (format!("key{i}").into_bytes(), format!("value {i}\twith a tab").into_bytes())
    }
}

fn load_file(records: usize) -> Vec<u8> {
    let mut file = Vec::new();
    for i in 0..records {
        let (k, v) = record(i);
        file.extend(escape(&k));
        file.push(b'\t');
        file.extend(escape(&v));
        file.extend_from_slice(if i % 7 == 0 { b"\r\n" } else { b"\n" });
        if i % 1000 == 0 {
            file.push(b'\n'); // empty lines are skipped
        }
    }
    file
}

#[test]
fn load_round_trips_a_file_and_prints_progress_lines() {
    let (_server, a) = start();
    ok(&shoal(a, &["create-table", "t"], b""));
    let n = 20_000;
    let f = TempFile::new("records", &load_file(n));
    let o = shoal(a, &["load", "t", f.path()], b"");
    let out = ok(&o);
    assert!(out.starts_with(&format!("loaded {n} records (")), "{out}");
    assert!(out.contains("records/s"), "{out}");

    // stderr is a pipe: plain lines, one per tenth of the file at least,
    // then the last one.
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("load 't': ")).collect();
    let tenths = lines.iter().filter(|l| l.contains("%)")).count();
    assert!(tenths >= 5, "progress lines: {err}");
    assert!(lines.iter().any(|l| l.contains("(100%)")), "{err}");
    assert!(lines.last().unwrap().contains(&format!("{} records in", "20,000")), "{err}");
    assert!(!err.contains('\u{1b}'), "no terminal escapes in plain lines: {err:?}");

    let mut c = Client::connect(a).unwrap();
    let t = c.table_id("t").unwrap();
    let all = c.enumerate_all(t).unwrap();
    assert_eq!(all.len(), n);
    for i in (0..n).step_by(7) {
        let (k, v) = record(i);
        assert_eq!(c.read(t, &k).unwrap().0, v, "record {i}");
    }
}

#[test]
fn load_reads_stdin_and_reports_json() {
    let (_server, a) = start();
    ok(&shoal(a, &["create-table", "t"], b""));
    let o = shoal(a, &["load", "t", "-", "--json", "--batch", "2", "--in-flight", "1"], b"a\t1\nb\t2\nc\t3");
    let j: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(j["records"], 3);
    assert_eq!(j["bytes"], 6);
    assert_eq!(read(a, "t", b"c"), b"3", "a last line without a newline");
}

#[test]
fn load_stops_at_a_bad_line_with_its_number() {
    let (_server, a) = start();
    ok(&shoal(a, &["create-table", "t"], b""));
    let f = TempFile::new("bad", b"a\t1\nb\t2\nno tab here\nd\t4\n");
    let o = shoal(a, &["load", "t", f.path()], b"");
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains(&format!("{}:3: no TAB between the key and the value", f.path())), "{e}");
    assert!(e.contains("(2 records were loaded before the load stopped)"), "{e}");
    assert_eq!(read(a, "t", b"b"), b"2");

    let mut big = b"ok\tv\nlarge\t".to_vec();
    big.extend(vec![b'v'; MAX_VALUE + 1]);
    let f = TempFile::new("oversize", &big);
    let o = shoal(a, &["load", "t", f.path()], b"");
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains(&format!(":2: the value ({} bytes) exceeds the server's maximum of {MAX_VALUE}", MAX_VALUE + 1)),
        "{e}"
    );

    let o = shoal(a, &["load", "missing", "-"], b"a\t1\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("no table named 'missing'"), "{}", text(&o.stderr));
}
