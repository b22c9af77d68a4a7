//! Hostile clients against a real `shoal server` process (issue 11): memory
//! for client buffers is bounded for the whole server, and half-sent
//! requests time out.
//!
//! * 20 clients pipeline GETs of a 512 KiB value and never read a reply, on
//!   the RESP port and on the native port: the server's resident memory
//!   stays under the client buffer budget + 150 MiB (before the budget it
//!   reached 20 x 50 MiB = 1 GB), some of them are disconnected, and a
//!   client on another connection gets every answer meanwhile.
//! * A connection holding half a request (or sending one a byte at a time)
//!   is closed after the request timeout; an idle one is not.

use shoal_proto::{RejectRules, Request, TableId, HEADER_LEN, MAGIC};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const MIB: u64 = 1 << 20;
/// The budget the memory tests run with, and the allowance over it.
const BUDGET: u64 = 128 * MIB;
const SLACK: u64 = 150 * MIB;
const VALUE_LEN: usize = 512 * 1024;
const ATTACKERS: usize = 20;
/// Requests an attacker sends at once: 50 MiB of replies, under the
/// default `reply_buffer_size` of 64 MiB (so, without the budget, 20 of them
/// make a server hold 1 GB).
const BURST: usize = 100;
/// A native response's status byte for success (docs/wire-format.md).
const OK: u8 = 0;

/// One hostile run at a time: each loads both cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// A `shoal server` killed when dropped.
struct Server {
    child: Child,
    resp: SocketAddr,
    native: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn port() -> u16 {
    shoal_common::os::free_local_port().expect("a free port")
}

/// Starts a standalone server with `extra` flags; returns once it answers.
fn start(extra: &[&str]) -> Server {
    let (resp, native) = (port(), port());
    let child = Command::new(SHOAL)
        .args([
            "server",
            "--resp-port",
            &resp.to_string(),
            "--native-port",
            &native.to_string(),
            "--memcached-port",
            "0",
        ])
        .args(["--memory", "64MiB", "--log-level", "warn"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        resp: format!("127.0.0.1:{resp}").parse().unwrap(),
        native: format!("127.0.0.1:{native}").parse().unwrap(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(server.resp).is_err() || TcpStream::connect(server.native).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("procfs");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn resp_command(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// Reads one RESP reply (simple, error, integer or bulk) whole.
fn resp_reply(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        s.read_exact(&mut byte).expect("reply line");
        got.push(byte[0]);
    }
    if got[0] == b'$' {
        let len: i64 = std::str::from_utf8(&got[1..got.len() - 2]).unwrap().parse().unwrap();
        if len >= 0 {
            let mut body = vec![0u8; len as usize + 2];
            s.read_exact(&mut body).expect("bulk body");
            got.extend_from_slice(&body);
        }
    }
    got
}

fn resp_call(s: &mut TcpStream, args: &[&[u8]]) -> Vec<u8> {
    s.write_all(&resp_command(args)).unwrap();
    resp_reply(s)
}

/// A field of `INFO` (all sections).
fn info_field(addr: SocketAddr, name: &str) -> u64 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let text = String::from_utf8(resp_call(&mut s, &[b"INFO", b"everything"])).unwrap();
    let prefix = format!("{name}:");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {name} in INFO"));
    line[prefix.len()..].trim().parse().unwrap()
}

/// One native frame.
fn native_frame(req: &Request, id: u64) -> Vec<u8> {
    let mut v = Vec::new();
    req.encode(id, &mut v);
    v
}

/// Reads one native response frame whole; returns its body.
fn native_response(s: &mut TcpStream) -> Vec<u8> {
    let mut header = [0u8; HEADER_LEN];
    s.read_exact(&mut header).expect("response header");
    assert_eq!(header[0], MAGIC);
    // The body's length is the header's last field (docs/wire-format.md).
    let len = u32::from_le_bytes(header[HEADER_LEN - 4..].try_into().unwrap());
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body).expect("response body");
    body
}

/// Clients that never read: each sends `burst` requests (whose replies,
/// [`BURST`] of them, stay under the per-connection reply bound), then one
/// `request` a second, and reconnects when the server closes it, until
/// `stop`. Returns each one's number of connections.
fn attackers(addr: SocketAddr, request: Vec<u8>, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<u64>> {
    let (burst, request) = (Arc::new(request.repeat(BURST)), Arc::new(request));
    (0..ATTACKERS)
        .map(|_| {
            let (burst, request, stop) = (burst.clone(), request.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut connects = 0;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    connects += 1;
                    s.set_write_timeout(Some(Duration::from_millis(100))).unwrap();
                    // Whole requests only: a write resumes where the last one stopped.
                    let (mut pending, mut pos) = (burst.clone(), 0);
                    while !stop.load(Ordering::Relaxed) {
                        if pos == pending.len() {
                            std::thread::sleep(Duration::from_secs(1));
                            (pending, pos) = (request.clone(), 0);
                        }
                        match s.write(&pending[pos..]) {
                            Ok(0) => break,
                            Ok(n) => pos += n,
                            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                            Err(_) => break,
                        }
                    }
                }
                connects
            })
        })
        .collect()
}

/// Runs `attack` against `server` for `secs` while `probe` (a well-behaved
/// client's round trip, which panics on a wrong answer) runs every 20 ms;
/// returns the highest resident memory seen and the slowest probe.
fn under_attack(
    server: &Server,
    secs: u64,
    attack: impl FnOnce(Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<u64>>,
    mut probe: impl FnMut(u64),
) -> (u64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss(server.child.id())));
    let sampler = {
        let (stop, peak, pid) = (stop.clone(), peak.clone(), server.child.id());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let threads = attack(stop.clone());
    let (end, mut slowest, mut round) = (Instant::now() + Duration::from_secs(secs), Duration::ZERO, 0);
    while Instant::now() < end {
        let t = Instant::now();
        probe(round);
        slowest = slowest.max(t.elapsed());
        round += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let connects: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    eprintln!(
        "peak RSS {} MiB (budget {} MiB), slowest probe {slowest:?}, {connects} attacker connections, {round} probes",
        peak / MIB,
        BUDGET / MIB
    );
    (peak, slowest)
}

fn budget_flags() -> [String; 2] {
    ["--client-buffer-budget".into(), format!("{}MiB", BUDGET / MIB)]
}

#[test]
fn resp_clients_that_never_read_stay_within_the_budget_while_others_are_served() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let flags = budget_flags();
    let server = start(&[&flags[0], &flags[1]]);
    let value = vec![b'v'; VALUE_LEN];
    let mut good = TcpStream::connect(server.resp).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(resp_call(&mut good, &[b"SET", b"big", &value]), b"+OK\r\n");
    assert_eq!(resp_call(&mut good, &[b"SET", b"k", b"v"]), b"+OK\r\n");
    let big_reply = [format!("${VALUE_LEN}\r\n").into_bytes(), value, b"\r\n".to_vec()].concat();
    let (peak, slowest) = under_attack(
        &server,
        8,
        |stop| attackers(server.resp, resp_command(&[b"GET", b"big"]), stop),
        |round| {
            assert_eq!(resp_call(&mut good, &[b"GET", b"k"]), b"$1\r\nv\r\n");
            if round % 10 == 0 {
                assert!(resp_call(&mut good, &[b"GET", b"big"]) == big_reply, "the large value, whole");
            }
        },
    );
    assert!(peak < BUDGET + SLACK, "peak RSS {} MiB over the bound of {} MiB", peak / MIB, (BUDGET + SLACK) / MIB);
    assert!(slowest < Duration::from_secs(5), "a reading client waited {slowest:?}");
    assert!(info_field(server.resp, "client_buffer_disconnects") > 0, "non-readers were disconnected");
    assert_eq!(resp_call(&mut good, &[b"GET", b"k"]), b"$1\r\nv\r\n");
}

#[test]
fn native_clients_that_never_read_stay_within_the_budget_while_others_are_served() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let flags = budget_flags();
    let server = start(&[&flags[0], &flags[1]]);
    // The RESP port's database 0 is table 1 of a standalone server, made
    // slot-hashed: id 65 (the flag 64 in its id: shoal_common::slots).
    let value = vec![b'v'; VALUE_LEN];
    let mut setup = TcpStream::connect(server.resp).unwrap();
    assert_eq!(resp_call(&mut setup, &[b"SET", b"big", &value]), b"+OK\r\n");
    let read_big = Request::Read { table: TableId(65), key: b"big", rules: RejectRules::default() };
    let mut good = TcpStream::connect(server.native).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    good.write_all(&native_frame(&read_big, 1)).unwrap();
    let big_body = native_response(&mut good);
    assert!(
        big_body.len() > VALUE_LEN && big_body[0] == OK,
        "the value is read on the native port ({} bytes)",
        big_body.len()
    );
    let ping = native_frame(&Request::Ping, 7);
    let (peak, slowest) = under_attack(
        &server,
        8,
        |stop| attackers(server.native, native_frame(&read_big, 9), stop),
        |round| {
            good.write_all(&ping).unwrap();
            assert_eq!(native_response(&mut good), [OK], "PING's response is its status");
            if round % 10 == 0 {
                good.write_all(&native_frame(&read_big, round)).unwrap();
                assert_eq!(native_response(&mut good), big_body);
            }
        },
    );
    assert!(peak < BUDGET + SLACK, "peak RSS {} MiB over the bound of {} MiB", peak / MIB, (BUDGET + SLACK) / MIB);
    assert!(slowest < Duration::from_secs(5), "a reading client waited {slowest:?}");
    assert!(info_field(server.resp, "client_buffer_disconnects") > 0, "non-readers were disconnected");
}

/// Whether the server closed `s` within `within` (a read returns end of
/// stream or a reset).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

#[test]
fn half_sent_requests_time_out_and_idle_connections_do_not() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = start(&["--request-timeout-ms", "1000", "--idle-timeout", "0"]);
    let started = Instant::now();
    let mut idle_resp = TcpStream::connect(server.resp).unwrap();
    let mut idle_native = TcpStream::connect(server.native).unwrap();
    let mut half_resp = TcpStream::connect(server.resp).unwrap();
    half_resp.write_all(b"*2\r\n$3\r\nGET\r\n$3\r\nbi").unwrap();
    let mut half_native = TcpStream::connect(server.native).unwrap();
    half_native.write_all(&native_frame(&Request::Ping, 1)[..HEADER_LEN / 2]).unwrap();
    // A request sent a byte every 100 ms: progress, but never a whole request.
    let drip = {
        let mut s = TcpStream::connect(server.resp).unwrap();
        std::thread::spawn(move || {
            let mut request = b"*3\r\n$3\r\nSET\r\n$1\r\nd\r\n$100\r\n".to_vec();
            request.resize(request.len() + 100, b'x');
            for (i, b) in request.iter().enumerate() {
                if s.write_all(&[*b]).is_err() {
                    return Some(i);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            None
        })
    };
    assert!(closed_within(&mut half_resp, Duration::from_secs(5)), "half a RESP request: closed");
    let at = started.elapsed();
    assert!(at >= Duration::from_millis(900) && at < Duration::from_secs(4), "closed after {at:?}, timeout 1 s");
    assert!(closed_within(&mut half_native, Duration::from_secs(5)), "half a native frame: closed");
    let sent = drip.join().unwrap().expect("the byte-a-time request was cut off");
    assert!(sent < 40, "cut off after {sent} bytes (one every 100 ms, timeout 1 s)");
    // Well past the request timeout: the idle connections still work.
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));
    idle_resp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(resp_call(&mut idle_resp, &[b"PING"]), b"+PONG\r\n");
    idle_native.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    idle_native.write_all(&native_frame(&Request::Ping, 2)).unwrap();
    assert_eq!(native_response(&mut idle_native), [OK]);
    assert!(info_field(server.resp, "client_request_timeouts") >= 3);
}
