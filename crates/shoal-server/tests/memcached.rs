//! The memcached front end over real sockets: the text and meta commands,
//! flags and cas, what the Redis front end sees of memcached's items (and
//! the reverse), pipelined noreply loads, oversized values, and pymemcache
//! and raw exchanges compared reply by reply with a real memcached
//! (tests/memcached_compat.py).

mod common;

use common::{config, have_tool, start, Client};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// A raw memcached connection.
struct Mc {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Mc {
    fn connect(addr: SocketAddr) -> Mc {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_nodelay(true).unwrap();
        Mc { stream, buf: Vec::new() }
    }

    /// Sends `req` and reads until the reply ends with `end`.
    fn call_until(&mut self, req: &[u8], end: &[u8]) -> String {
        self.stream.write_all(req).unwrap();
        let mut chunk = [0u8; 65536];
        while !self.buf.ends_with(end) {
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "closed; so far: {:?}", String::from_utf8_lossy(&self.buf));
            self.buf.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8(std::mem::take(&mut self.buf)).unwrap()
    }

    /// Sends `req` followed by `mn`; the replies before MN.
    fn call(&mut self, req: &str) -> String {
        let mut out = self.call_until(format!("{req}mn\r\n").as_bytes(), b"MN\r\n");
        out.truncate(out.len() - 4);
        out
    }
}

fn mc_addr(server: &shoal_server::Server) -> SocketAddr {
    server.addresses().memcached.expect("memcached is served")
}

#[test]
fn text_commands_store_get_and_count() {
    let server = start(config());
    let mut c = Mc::connect(mc_addr(&server));
    assert_eq!(c.call("set a 5 0 5\r\nhello\r\n"), "STORED\r\n");
    assert_eq!(c.call("get a missing\r\n"), "VALUE a 5 5\r\nhello\r\nEND\r\n");
    let gets = c.call("gets a\r\n");
    let cas: u64 = gets.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert_eq!(c.call(&format!("cas a 6 0 2 {}\r\nhi\r\n", cas + 1)), "EXISTS\r\n");
    assert_eq!(c.call(&format!("cas a 6 0 2 {cas}\r\nhi\r\n")), "STORED\r\n");
    assert_eq!(c.call("cas nokey 0 0 1 1\r\nx\r\n"), "NOT_FOUND\r\n");
    assert_eq!(c.call("add a 0 0 1\r\nx\r\nreplace nokey 0 0 1\r\nx\r\n"), "NOT_STORED\r\nNOT_STORED\r\n");
    assert_eq!(
        c.call("append a 0 0 1\r\n!\r\nprepend a 0 0 1\r\n<\r\nget a\r\n"),
        "STORED\r\nSTORED\r\nVALUE a 6 4\r\n<hi!\r\nEND\r\n"
    );
    assert_eq!(c.call("set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\n"), "STORED\r\n15\r\n0\r\n");
    assert_eq!(c.call("incr a 1\r\n"), "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    assert_eq!(c.call("touch a 100\r\ndelete a\r\ndelete a\r\n"), "TOUCHED\r\nDELETED\r\nNOT_FOUND\r\n");
    assert_eq!(c.call("set e 0 -1 1\r\nx\r\nget e\r\n"), "STORED\r\nEND\r\n", "negative exptime: expired at once");
    assert_eq!(c.call("set e 0 100 1\r\nx\r\nmg e t v\r\n"), "STORED\r\nVA 1 t100\r\nx\r\n");
    assert_eq!(c.call("ms m 2 F9 T0\r\nab\r\nmg m v f k\r\nmd m q\r\nmg m v\r\n"), "HD\r\nVA 2 f9 km\r\nab\r\nEN\r\n");
    assert_eq!(c.call("ma cnt N0 J10 v\r\nma cnt D5 v\r\n"), "VA 2\r\n10\r\nVA 2\r\n15\r\n");
    assert_eq!(c.call("flush_all\r\nget n\r\n"), "OK\r\nEND\r\n");
    assert_eq!(c.call("bogus\r\n"), "ERROR\r\n");
    let stats = c.call_until(b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT cmd_set ") && stats.contains("STAT curr_connections 1\r\n"), "{stats}");
    assert!(c.call("version\r\n").starts_with("VERSION "));
    assert_eq!(c.call("verbosity 1\r\n"), "OK\r\n");
    c.stream.write_all(b"quit\r\n").unwrap();
    let mut rest = Vec::new();
    assert_eq!(c.stream.read_to_end(&mut rest).unwrap(), 0, "quit closes the connection");
}

#[test]
fn items_are_the_redis_front_ends_keys() {
    let server = start(config());
    let mut c = Mc::connect(mc_addr(&server));
    let mut r = Client::connect(server.resp_addr());
    // Flags 0: the stored bytes are the data.
    assert_eq!(c.call("set plain 0 0 5\r\nhello\r\n"), "STORED\r\n");
    assert_eq!(r.call(&["GET", "plain"]), "$5\r\nhello\r\n");
    assert_eq!(r.call(&["SET", "fromredis", "world"]), "+OK\r\n");
    assert_eq!(c.call("get fromredis\r\n"), "VALUE fromredis 0 5\r\nworld\r\nEND\r\n");
    // Flags round-trip (and Redis sees the prefix that carries them).
    assert_eq!(
        c.call("set flagged 123456 0 2\r\nhi\r\nget flagged\r\n"),
        "STORED\r\nVALUE flagged 123456 2\r\nhi\r\nEND\r\n"
    );
    assert_eq!(r.call(&["STRLEN", "flagged"]), ":10\r\n");
    // One counter, two front ends.
    assert_eq!(r.call(&["INCRBY", "counter", "40"]), ":40\r\n");
    assert_eq!(c.call("incr counter 1\r\n"), "41\r\n");
    assert_eq!(r.call(&["INCR", "counter"]), ":42\r\n");
    assert_eq!(c.call("decr counter 2\r\nget counter\r\n"), "40\r\nVALUE counter 0 2\r\n40\r\nEND\r\n");
    // Expiry set through memcached is Redis's TTL.
    assert_eq!(c.call("touch plain 100\r\n"), "TOUCHED\r\n");
    let ttl = r.call(&["TTL", "plain"]);
    assert!(ttl == ":100\r\n" || ttl == ":99\r\n", "{ttl}");
}

#[test]
fn pipelined_noreply_loads_are_answered_in_order() {
    let server = start(config());
    let mut c = Mc::connect(mc_addr(&server));
    let mut batch = Vec::new();
    for i in 0..20_000 {
        batch.extend_from_slice(format!("set key{i} {i} 0 8 noreply\r\nval{i:05}\r\n").as_bytes());
    }
    for i in 0..1000 {
        batch.extend_from_slice(format!("get key{i}\r\n").as_bytes());
    }
    batch.extend_from_slice(b"mn\r\n");
    let out = c.call_until(&batch, b"MN\r\n");
    let expected: String = (0..1000).map(|i| format!("VALUE key{i} {i} 8\r\nval{i:05}\r\nEND\r\n")).collect();
    assert_eq!(out, expected + "MN\r\n");
    assert_eq!(c.call("get key19999\r\n"), "VALUE key19999 19999 8\r\nval19999\r\nEND\r\n");
}

#[test]
fn oversized_values_are_refused_and_discarded() {
    let server = start(config());
    let mut c = Mc::connect(mc_addr(&server));
    let mut req = b"set big 0 0 3000000\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'z', 3_000_000));
    req.extend_from_slice(b"\r\nset small 0 0 1\r\nx\r\nget big small\r\nmn\r\n");
    let out = c.call_until(&req, b"MN\r\n");
    assert_eq!(out, "SERVER_ERROR object too large for cache\r\nSTORED\r\nVALUE small 0 1\r\nx\r\nEND\r\nMN\r\n");
    // A line that never ends is a protocol error: the connection closes.
    let mut c = Mc::connect(mc_addr(&server));
    c.stream.write_all(&vec![b'g'; 200_000]).unwrap();
    let mut rest = Vec::new();
    let _ = c.stream.read_to_end(&mut rest);
    assert_eq!(String::from_utf8_lossy(&rest), "CLIENT_ERROR line too long\r\n");
}

#[test]
fn a_password_is_asked_as_memcached_asks_it() {
    let server = start(shoal_server::ServerConfig {
        requirepass: Some(shoal_server::auth::Password("secret".into())),
        ..config()
    });
    let mut c = Mc::connect(mc_addr(&server));
    assert_eq!(c.call_until(b"get a\r\n", b"\r\n"), "CLIENT_ERROR unauthenticated\r\n");
    let failed = c.call_until(b"set auth 0 0 12\r\ndefault nope\r\n", b"\r\n");
    assert_eq!(failed, "CLIENT_ERROR authentication failure\r\n");
    assert_eq!(c.call_until(b"set auth 0 0 14\r\ndefault secret\r\n", b"\r\n"), "STORED\r\n");
    assert_eq!(c.call("set a 0 0 1\r\nx\r\nget a\r\n"), "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
}

#[test]
fn pymemcache_and_raw_replies_match_a_real_memcached() {
    if !have_tool("memcached", &["-V"]) || !have_tool("python3", &["-c", "import pymemcache"]) {
        return;
    }
    let server = start(config());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/memcached_compat.py");
    let out = Command::new("python3")
        .args([script, "--shoal-port", &mc_addr(&server).port().to_string(), "--ops", "3000"])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "replies differ from memcached:\n{stdout}");
    assert!(stdout.contains(", 0 differences"));
}
