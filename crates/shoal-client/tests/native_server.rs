//! The client library against an in-process server's native front end on
//! 127.0.0.1 (port 0): every operation, pipelining, multi-ops, reject rules
//! and versions, enumeration, and bad input from raw sockets.

use shoal_client::blocking;
use shoal_client::*;
use shoal_proto::{check_frame, decode_response, encode_header, DEFAULT_MAX_BODY_BYTES, HEADER_LEN};
use shoal_server::{ByteSize, Server, ServerConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn start_with(f: impl FnOnce(&mut ServerConfig)) -> (Server, SocketAddr) {
    let mut config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        ..ServerConfig::default()
    };
    f(&mut config);
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

fn start() -> (Server, SocketAddr) {
    start_with(|_| {})
}

#[test]
fn blocking_client_every_operation() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    c.ping().unwrap();
    let t = c.create_table("users").unwrap();
    assert_eq!(c.create_table("users").unwrap(), t, "create is idempotent");
    assert_eq!(c.table_id("users").unwrap(), t);

    let v1 = c.write(t, b"alice", b"1").unwrap();
    assert_eq!(c.read(t, b"alice").unwrap(), (b"1".to_vec(), v1));
    let v2 = c.write(t, b"alice", b"2").unwrap();
    assert!(v2 > v1);
    assert!(matches!(c.read(t, b"bob"), Err(ReadError::NotFound)));
    assert_eq!(c.remove(t, b"alice").unwrap(), Some(v2));
    assert_eq!(c.remove(t, b"alice").unwrap(), None);
    let v3 = c.write(t, b"alice", b"3").unwrap();
    assert!(v3 > v2, "versions grow across remove and re-create");

    assert_eq!(c.increment(t, b"n", 5).unwrap().0, 5);
    assert_eq!(c.increment(t, b"n", -7).unwrap().0, -2);
    assert_eq!(c.read(t, b"n").unwrap().0, b"-2".to_vec());

    let all = c.enumerate_all(t).unwrap();
    let mut keys: Vec<_> = all.iter().map(|o| o.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, vec![b"alice".to_vec(), b"n".to_vec()]);

    let stats = c.stats().unwrap();
    let objects = stats.iter().find(|(n, _)| n == "objects").map(|(_, v)| *v);
    assert_eq!(objects, Some(StatValue::U64(2)));

    c.drop_table("users").unwrap();
    assert!(matches!(c.table_id("users"), Err(TableError::UnknownTableName)));
    assert!(matches!(c.drop_table("users"), Err(TableError::UnknownTableName)));
    assert!(matches!(c.read(t, b"alice"), Err(ReadError::UnknownTable(x)) if x == t));
}

#[test]
fn reject_rules_and_versions() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_table("t").unwrap();
    let v1 = c.write_with(t, b"k", b"a", RejectRules::must_not_exist()).unwrap();
    match c.write_with(t, b"k", b"b", RejectRules::must_not_exist()) {
        Err(WriteError::Rejected(Rejected::Exists { version })) => assert_eq!(version, v1),
        other => panic!("{other:?}"),
    }
    // Compare-and-swap: only the holder of the current version wins.
    let v2 = c.write_with(t, b"k", b"b", RejectRules::version_is(v1)).unwrap();
    match c.write_with(t, b"k", b"c", RejectRules::version_is(v1)) {
        Err(WriteError::Rejected(Rejected::WrongVersion { version })) => assert_eq!(version, v2),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.write_with(t, b"missing", b"x", RejectRules::must_exist()),
        Err(WriteError::Rejected(Rejected::DoesntExist))
    ));
    let le = RejectRules { given_version: v2, version_le_given: true, ..Default::default() };
    assert!(matches!(c.read_with(t, b"k", le), Err(ReadError::Rejected(Rejected::WrongVersion { .. }))));
    assert!(matches!(
        c.remove_with(t, b"k", RejectRules::version_is(v1)),
        Err(WriteError::Rejected(Rejected::WrongVersion { version })) if version == v2
    ));
    assert_eq!(c.remove_with(t, b"k", RejectRules::version_is(v2)).unwrap(), Some(v2));
    assert!(matches!(
        c.increment_with(t, b"k", 1, RejectRules::must_exist()),
        Err(IncrementError::Rejected(Rejected::DoesntExist))
    ));
}

#[test]
fn errors_are_typed() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_table("t").unwrap();
    let nowhere = TableId(9999);
    assert!(matches!(c.read(nowhere, b"k"), Err(ReadError::UnknownTable(x)) if x == nowhere));
    assert!(matches!(c.write(nowhere, b"k", b"v"), Err(WriteError::UnknownTable(_))));
    assert!(matches!(c.enumerate(nowhere, 0, 10), Err(TableError::UnknownTable(_))));
    let big_key = vec![7u8; 64 * 1024 + 1];
    assert!(matches!(c.write(t, &big_key, b"v"), Err(WriteError::KeyTooLarge { len: 65537, .. })));
    assert!(matches!(c.read(t, &big_key), Err(ReadError::KeyTooLarge { .. })));
    let big_value = vec![1u8; (1 << 20) + 1];
    assert!(matches!(c.write(t, b"k", &big_value), Err(WriteError::ValueTooLarge { .. })));
    c.write(t, b"s", b"not a number").unwrap();
    assert!(matches!(c.increment(t, b"s", 1), Err(IncrementError::NotAnInteger)));
    c.write(t, b"max", i64::MAX.to_string().as_bytes()).unwrap();
    assert!(matches!(c.increment(t, b"max", 1), Err(IncrementError::Overflow)));
    // A request over the server's frame limit: refused, connection closed,
    // and the next request reconnects.
    let huge = vec![0u8; 3 << 20];
    match c.write(t, b"k", &huge) {
        Err(WriteError::Client(ClientError::Refused(ErrorStatus::FrameTooLarge { .. })))
        | Err(WriteError::Client(ClientError::Closed | ClientError::Io(_))) => {}
        other => panic!("{other:?}"),
    }
    c.ping().unwrap();
    assert_eq!(c.read(t, b"s").unwrap().0, b"not a number");
}

/// An object written with a time to live: its TTL read, then, once the
/// time is up, a missing key to every read; old WRITE requests still write
/// objects without expiry, and a plain write clears one.
#[test]
fn write_ttl_expires_objects_and_ttl_reads_them() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_table("t").unwrap();
    let before = UnixMillis::now();
    let v = c.write_ttl(t, b"short", b"v", Duration::from_millis(300)).unwrap();
    c.write_ttl(t, b"long", b"v", Duration::from_secs(3600)).unwrap();
    let vp = c.write(t, b"plain", b"v").unwrap();
    let ttl = c.ttl(t, b"short").unwrap();
    assert_eq!(ttl.version, v);
    let at = ttl.expires_at.expect("an expiry");
    assert!(at >= before.plus_ms(300) && at <= UnixMillis::now().plus_ms(300), "{at} vs {before}");
    assert!(ttl.remaining.unwrap() <= Duration::from_millis(300));
    assert_eq!(c.ttl(t, b"plain").unwrap(), Ttl { version: vp, expires_at: None, remaining: None });
    assert!(matches!(c.ttl(t, b"missing"), Err(ReadError::NotFound)));
    assert_eq!(c.read(t, b"short").unwrap().0, b"v");
    std::thread::sleep(Duration::from_millis(350));
    assert!(matches!(c.read(t, b"short"), Err(ReadError::NotFound)));
    assert!(matches!(c.ttl(t, b"short"), Err(ReadError::NotFound)));
    assert!(c.multi_read(&[(t, &b"short"[..])]).unwrap()[0].is_err());
    assert!(c.enumerate_all(t).unwrap().iter().all(|o| o.key != b"short"));
    // A write only if absent succeeds on the expired key.
    c.write_with(t, b"short", b"again", RejectRules::must_not_exist()).unwrap();
    // A plain write clears an expiry; an increment keeps it.
    c.write(t, b"long", b"v2").unwrap();
    assert_eq!(c.ttl(t, b"long").unwrap().expires_at, None);
    c.write_ttl(t, b"n", b"5", Duration::from_secs(60)).unwrap();
    assert_eq!(c.increment(t, b"n", 1).unwrap().0, 6);
    assert!(c.ttl(t, b"n").unwrap().expires_at.is_some());
    // A TTL of 0 ms is malformed; the connection goes on.
    let req = Request::WriteTtl { table: t, key: b"z", value: b"v", rules: RejectRules::default(), ttl_ms: 0 };
    let mut out = Vec::new();
    req.encode(7, &mut out);
    let mut s = Raw::connect(addr);
    s.s.write_all(&out).unwrap();
    let (id, _, r) = s.read_frame().unwrap();
    assert!(id == 7 && matches!(r, Err(ErrorStatus::MalformedRequest(_))), "{r:?}");
    s.s.write_all(&frame(1, 8, &[])).unwrap();
    assert!(matches!(s.read_frame().unwrap(), (8, _, Ok(Response::Ping))));
    let stats = c.stats().unwrap();
    let expired = stats.iter().find(|(n, _)| n == "expired_keys").map(|(_, v)| *v);
    assert_eq!(expired, Some(StatValue::U64(1)), "the write over the expired key reclaimed it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_client_write_ttl_and_ttl() {
    let (_server, addr) = start();
    let c = Client::connect(addr).await.unwrap();
    let t = c.create_table("t").await.unwrap();
    let v = c.write_ttl(t, b"k", b"v", Duration::from_millis(1500)).await.unwrap();
    let ttl = c.ttl(t, b"k").await.unwrap();
    assert_eq!(ttl.version, v);
    assert!(ttl.remaining.unwrap() > Duration::from_millis(1000));
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(matches!(c.read(t, b"k").await, Err(ReadError::NotFound)));
}

#[test]
fn multi_ops_have_one_result_per_item() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_table("t").unwrap();
    let keys: Vec<Vec<u8>> = (0..200u32).map(|i| format!("key{i}").into_bytes()).collect();
    let mut writes: Vec<WriteItem<'_>> =
        keys.iter().map(|k| WriteItem { table: t, key: k, value: k, rules: RejectRules::default() }).collect();
    writes.push(WriteItem { table: TableId(777), key: b"x", value: b"y", rules: RejectRules::default() });
    let res = c.multi_write(&writes).unwrap();
    assert_eq!(res.len(), 201);
    assert!(res[..200].iter().all(|r| r.is_ok()));
    assert!(matches!(res[200], Err(WriteError::UnknownTable(_))));

    let mut reads: Vec<(TableId, &[u8])> = keys.iter().map(|k| (t, &k[..])).collect();
    reads.push((t, b"absent"));
    let got = c.multi_read(&reads).unwrap();
    for (i, r) in got[..200].iter().enumerate() {
        assert_eq!(r.as_ref().unwrap().0, keys[i]);
    }
    assert!(matches!(got[200], Err(ReadError::NotFound)));

    let removes: Vec<RemoveItem<'_>> =
        keys.iter().take(100).map(|k| RemoveItem { table: t, key: k, rules: RejectRules::default() }).collect();
    let res = c.multi_remove(&removes).unwrap();
    assert!(res.iter().all(|r| matches!(r, Ok(Some(_)))));
    assert_eq!(c.enumerate_all(t).unwrap().len(), 100);
}

#[test]
fn enumerate_returns_every_object_once() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_table("t").unwrap();
    let other = c.create_table("other").unwrap();
    c.write(other, b"elsewhere", b"x").unwrap();
    let n = 5000u32;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let keys: Vec<Vec<u8>> = chunk.iter().map(|i| i.to_be_bytes().to_vec()).collect();
        let items: Vec<_> =
            keys.iter().map(|k| WriteItem { table: t, key: k, value: b"v", rules: RejectRules::default() }).collect();
        assert!(c.multi_write(&items).unwrap().iter().all(|r| r.is_ok()));
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = Some(0);
    let mut pages = 0;
    while let Some(cur) = cursor {
        let page = c.enumerate(t, cur, 300).unwrap();
        pages += 1;
        for o in page.objects {
            assert!(seen.insert(o.key), "an object came twice");
        }
        cursor = page.next;
    }
    assert_eq!(seen.len(), n as usize);
    assert!(pages > 5);
}

#[test]
fn blocking_pipeline_of_1000_requests() {
    let (_server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_table("t").unwrap();
    let conn = c.conn(addr).unwrap();
    let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let ids: Vec<u64> = keys
        .iter()
        .map(|k| conn.send(&Request::Write { table: t, key: k, value: k, rules: RejectRules::default() }).unwrap())
        .collect();
    assert_eq!(conn.in_flight(), 1000);
    // Collect in reverse order: responses are matched by id.
    for id in ids.iter().rev() {
        let f = conn.recv_id(*id).unwrap();
        assert!(matches!(f.reply().unwrap(), Ok(Response::Write { .. })));
    }
    let ids: Vec<u64> = keys
        .iter()
        .map(|k| conn.send(&Request::Read { table: t, key: k, rules: RejectRules::default() }).unwrap())
        .collect();
    for (k, id) in keys.iter().zip(ids) {
        match conn.recv_id(id).unwrap().reply().unwrap() {
            Ok(Response::Read { value, .. }) => assert_eq!(value, &k[..]),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(conn.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_client_operations_and_pipelining() {
    let (_server, addr) = start();
    let c = Client::connect(addr).await.unwrap();
    c.ping().await.unwrap();
    let t = c.create_table("t").await.unwrap();
    let v = c.write(t, b"k", b"v").await.unwrap();
    assert_eq!(c.read(t, b"k").await.unwrap(), (b"v".to_vec(), v));
    assert!(matches!(c.read(t, b"nope").await, Err(ReadError::NotFound)));
    assert_eq!(c.increment(t, b"n", 3).await.unwrap().0, 3);

    // 1000 requests in one write on one connection.
    let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let reqs: Vec<Request<'_>> =
        keys.iter().map(|k| Request::Write { table: t, key: k, value: k, rules: RejectRules::default() }).collect();
    let chan = c.channel(addr).await.unwrap();
    let replies = chan.send_all(&reqs).unwrap();
    for r in replies {
        assert!(matches!(r.wait().await.unwrap().reply().unwrap(), Ok(Response::Write { .. })));
    }
    // Many tasks sharing the client's one connection.
    let mut tasks = Vec::new();
    for task in 0..8u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100u32 {
                let key = format!("{task}:{i}");
                let v = c.write(t, key.as_bytes(), key.as_bytes()).await.unwrap();
                assert_eq!(c.read(t, key.as_bytes()).await.unwrap(), (key.into_bytes(), v));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let items: Vec<_> = keys.iter().map(|k| (t, &k[..])).collect();
    let got = c.multi_read(&items).await.unwrap();
    assert!(got.iter().zip(&keys).all(|(r, k)| r.as_ref().unwrap().0 == *k));
    let all = c.enumerate_all(t).await.unwrap();
    assert_eq!(all.len(), 1000 + 1 + 1 + 800);
    c.drop_table("t").await.unwrap();
    assert!(matches!(c.table_id("t").await, Err(TableError::UnknownTableName)));
}

/// A raw connection for sending bad bytes.
fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// A raw connection that reads response frames.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Raw {
        Raw { s: raw(addr), buf: Vec::new() }
    }

    /// Reads one response frame; `None` if the server closed the connection.
    fn read_frame(&mut self) -> Option<(u64, u8, Result<Response<'static>, ErrorStatus>)> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(h) = check_frame(&self.buf, DEFAULT_MAX_BODY_BYTES).unwrap() {
                let body: &'static [u8] = Vec::leak(self.buf[HEADER_LEN..h.frame_len()].to_vec());
                self.buf.drain(..h.frame_len());
                return Some((h.request_id, h.opcode, decode_response(h.opcode, body).unwrap()));
            }
            match self.s.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn is_closed(&mut self) -> bool {
        self.buf.is_empty() && is_closed(&mut self.s)
    }
}

fn frame(opcode: u8, id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_header(&mut out, opcode, 0, id);
    out.extend_from_slice(body);
    let len = (out.len() - HEADER_LEN) as u32;
    out[12..16].copy_from_slice(&len.to_le_bytes());
    out
}

fn is_closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn malformed_body_and_unknown_opcode_get_errors_and_the_connection_goes_on() {
    let (_server, addr) = start();
    let mut s = Raw::connect(addr);
    // READ whose key length runs past the body; then an unknown opcode;
    // then a request flag set; then a good PING, all in one write.
    let mut bytes = frame(2, 1, &[0u8; 21]);
    bytes[HEADER_LEN + 17] = 50;
    bytes.extend(frame(200, 2, b"whatever"));
    let mut flagged = frame(1, 3, b"");
    flagged[3] = 0x80;
    bytes.extend(flagged);
    bytes.extend(frame(1, 4, b""));
    s.s.write_all(&bytes).unwrap();
    let (id, _, r) = s.read_frame().unwrap();
    assert_eq!(id, 1);
    assert!(matches!(r, Err(ErrorStatus::MalformedRequest(_))), "{r:?}");
    let (id, op, r) = s.read_frame().unwrap();
    assert_eq!((id, op), (2, 200));
    assert_eq!(r, Err(ErrorStatus::UnknownOpcode));
    let (id, _, r) = s.read_frame().unwrap();
    assert_eq!(id, 3);
    assert!(matches!(r, Err(ErrorStatus::MalformedRequest(_))));
    let (id, _, r) = s.read_frame().unwrap();
    assert_eq!((id, r), (4, Ok(Response::Ping)));
}

#[test]
fn lost_framing_gets_an_error_and_the_connection_is_closed() {
    let (_server, addr) = start();
    // Wrong magic byte.
    let mut s = Raw::connect(addr);
    s.s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let (id, _, r) = s.read_frame().unwrap();
    assert_eq!(id, 0);
    assert!(matches!(r, Err(ErrorStatus::MalformedRequest(_))));
    assert!(s.is_closed());
    // Unsupported version.
    let mut s = Raw::connect(addr);
    let mut f = frame(1, 5, b"");
    f[1] = 9;
    s.s.write_all(&f).unwrap();
    let (id, _, r) = s.read_frame().unwrap();
    assert_eq!((id, r), (5, Err(ErrorStatus::UnsupportedVersion)));
    assert!(s.is_closed());
    // Body length over the limit: refused before the body is read.
    let mut s = Raw::connect(addr);
    let mut header = frame(3, 6, b"");
    header[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    s.s.write_all(&header).unwrap();
    let (id, _, r) = s.read_frame().unwrap();
    assert_eq!(id, 6);
    assert!(matches!(r, Err(ErrorStatus::FrameTooLarge { len: u32::MAX, .. })));
    assert!(s.is_closed());
}

#[test]
fn stalled_and_non_reading_clients_are_closed_while_others_are_served() {
    let (_server, addr) = start_with(|c| {
        c.idle_timeout_secs = 1;
        c.reply_buffer_size = ByteSize(2 << 20);
    });
    let mut setup = blocking::Client::connect(addr).unwrap();
    let t = setup.create_table("t").unwrap();
    setup.write(t, b"big", &vec![5u8; 512 << 10]).unwrap();

    // Half a frame, then nothing.
    let mut half = raw(addr);
    half.write_all(&frame(1, 1, b"")[..7]).unwrap();
    // A client that sends many reads of a 512 KiB value and never reads.
    let mut deaf = raw(addr);
    deaf.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut key_op = t.0.to_le_bytes().to_vec();
    key_op.extend_from_slice(&[0u8; 9]);
    key_op.extend_from_slice(&3u32.to_le_bytes());
    key_op.extend_from_slice(b"big");
    let reads: Vec<u8> = (0..200).flat_map(|i| frame(2, i, &key_op)).collect();
    let started = Instant::now();
    let _ = deaf.write_all(&reads);

    // Meanwhile another client is served promptly.
    let mut other = blocking::Client::connect(addr).unwrap();
    for _ in 0..100 {
        let t0 = Instant::now();
        other.ping().unwrap();
        assert!(t0.elapsed() < Duration::from_millis(500));
    }
    assert!(is_closed(&mut half), "a stalled half frame is closed after the idle timeout");
    // The deaf client's connection is closed: eventually reads show EOF or reset.
    deaf.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let closed = loop {
        match deaf.read(&mut sink) {
            Ok(0) | Err(_) => break true,
            Ok(_) if started.elapsed() > Duration::from_secs(20) => break false,
            Ok(_) => {}
        }
    };
    assert!(closed);
    assert_eq!(other.read(t, b"big").unwrap().0.len(), 512 << 10);
}

/// One RESP command on `s`; its reply (an integer, status, error or bulk
/// string).
fn resp_line(s: &mut TcpStream, args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed");
        line.push(byte[0]);
    }
    if line[0] == b'$' && line[1] != b'-' {
        let n: usize = std::str::from_utf8(&line[1..line.len() - 2]).unwrap().parse().unwrap();
        let mut body = vec![0u8; n + 2];
        s.read_exact(&mut body).unwrap();
        line.extend_from_slice(&body);
    }
    String::from_utf8(line).unwrap()
}

#[test]
fn counters_are_shared_with_the_redis_front_end() {
    let (server, addr) = start();
    let mut c = blocking::Client::connect(addr).unwrap();
    let mut r = TcpStream::connect(server.resp_addr()).unwrap();
    r.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Redis's database 0 is the table "db0".
    assert_eq!(resp_line(&mut r, &["SET", "seed", "x"]), "+OK\r\n");
    let t = c.table_id("db0").unwrap();
    // A native counter, incremented by Redis's INCRBY, read by both.
    assert_eq!(c.increment(t, b"hits", 5).unwrap().0, 5);
    assert_eq!(resp_line(&mut r, &["INCRBY", "hits", "10"]), ":15\r\n");
    assert_eq!(c.read(t, b"hits").unwrap().0, b"15".to_vec());
    assert_eq!(resp_line(&mut r, &["GET", "hits"]), "$2\r\n15\r\n");
    // A Redis counter, incremented natively.
    assert_eq!(resp_line(&mut r, &["INCR", "visits"]), ":1\r\n");
    assert_eq!(c.increment(t, b"visits", 41).unwrap().0, 42);
    assert_eq!(resp_line(&mut r, &["DECRBY", "visits", "2"]), ":40\r\n");
    // What one refuses as a number, so does the other.
    assert_eq!(resp_line(&mut r, &["SET", "word", "012"]), "+OK\r\n");
    assert!(matches!(c.increment(t, b"word", 1), Err(IncrementError::NotAnInteger)));
    assert_eq!(resp_line(&mut r, &["INCR", "word"]), "-ERR value is not an integer or out of range\r\n");
}
