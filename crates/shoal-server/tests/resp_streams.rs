//! Redis streams on the RESP port (`docs/streams.md`, "Redis streams on
//! the RESP port"): what the differential test against a real Redis
//! (tests/resp_stream_compat.py) cannot show: that a blocked XREAD holds
//! no worker thread, wakes on an XADD and not on others, Shoal's limits,
//! and where a stream's records go.

mod common;

use common::{config, start, Client};
use std::time::{Duration, Instant};

/// XREAD's RESP2 reply for one stream with one entry of one field.
fn one_entry(key: &str, id: &str, field: &str, value: &str) -> String {
    format!(
        "*1\r\n*2\r\n${}\r\n{key}\r\n*1\r\n*2\r\n${}\r\n{id}\r\n*2\r\n${}\r\n{field}\r\n${}\r\n{value}\r\n",
        key.len(),
        id.len(),
        field.len(),
        value.len()
    )
}

#[test]
fn blocked_xreads_hold_no_worker_and_wake_on_xadd() {
    let server = start(config());
    let addr = server.resp_addr();
    // More blocked readers than the server has worker threads.
    let mut readers: Vec<Client> = (0..64).map(|_| Client::connect(addr)).collect();
    for r in &mut readers {
        r.send(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"]);
    }
    let mut w = Client::connect(addr);
    // The readers are blocked and the server still serves.
    let started = Instant::now();
    for i in 0..100 {
        assert_eq!(w.call(&["SET", &format!("k{i}"), "v"]), "+OK\r\n");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?} for 100 SETs", started.elapsed());
    // An append to another stream does not answer them.
    assert_eq!(w.call(&["XADD", "other", "1-1", "f", "v"]), "$3\r\n1-1\r\n");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(w.call(&["XADD", "s", "5-1", "field", "value"]), "$3\r\n5-1\r\n");
    let woken = Instant::now();
    for r in &mut readers {
        assert_eq!(r.read_reply(), one_entry("s", "5-1", "field", "value"));
    }
    assert!(woken.elapsed() < Duration::from_secs(5), "{:?} to wake 64 readers", woken.elapsed());
    // Each reader's connection goes on as usual.
    for r in &mut readers {
        assert_eq!(r.call(&["XLEN", "s"]), ":1\r\n");
    }
}

#[test]
fn a_blocked_xread_times_out_with_a_null_array_in_both_protocols() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    let started = Instant::now();
    assert_eq!(c.call(&["XREAD", "BLOCK", "150", "STREAMS", "s", "0"]), "*-1\r\n");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(150) && waited < Duration::from_secs(3), "{waited:?}");
    assert!(c.call(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(c.call(&["XREAD", "BLOCK", "50", "STREAMS", "s", "$"]), "_\r\n");
    // RESP3: a map from each stream to its entries.
    assert_eq!(c.call(&["XADD", "s", "1-1", "f", "v"]), "$3\r\n1-1\r\n");
    assert_eq!(
        c.call(&["XREAD", "BLOCK", "50", "STREAMS", "s", "0"]),
        "%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
}

#[test]
fn a_blocked_xread_with_dollar_keeps_the_last_id_it_started_from() {
    let server = start(config());
    let addr = server.resp_addr();
    let mut w = Client::connect(addr);
    assert_eq!(w.call(&["XADD", "s", "1-1", "f", "old"]), "$3\r\n1-1\r\n");
    let mut r = Client::connect(addr);
    r.send(&[b"XREAD", b"BLOCK", b"5000", b"STREAMS", b"s", b"$"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(w.call(&["XADD", "s", "2-1", "f", "new"]), "$3\r\n2-1\r\n");
    assert_eq!(r.read_reply(), one_entry("s", "2-1", "f", "new"), "only what came after the XREAD started");
}

#[test]
fn an_entry_over_the_value_limit_is_refused_and_creates_nothing() {
    let mut cfg = config();
    cfg.max_value_size = shoal_server::ByteSize(4 << 10);
    let server = start(cfg);
    let mut c = Client::connect(server.resp_addr());
    let big = "x".repeat(5 << 10);
    let refused = c.call(&["XADD", "s", "*", "f", &big]);
    assert!(refused.starts_with("-ERR Elements are too large to be stored"), "{refused}");
    assert_eq!(c.call(&["EXISTS", "s"]), ":0\r\n");
    assert_eq!(c.call(&["XADD", "s", "1-1", "f", &"x".repeat(3 << 10)]), "$3\r\n1-1\r\n");
    // Many fields: bounded by the request size, each one counted.
    let mut args: Vec<String> = vec!["XADD".into(), "s".into(), "2-1".into()];
    for i in 0..2_000 {
        args.push(format!("f{i}"));
        args.push("v".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(c.call(&args).starts_with("-ERR Elements are too large"));
    assert_eq!(c.call(&["XLEN", "s"]), ":1\r\n");
}

#[test]
fn a_redis_stream_is_a_shoal_stream_of_one_streamlet() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["SELECT", "2"]), "+OK\r\n");
    assert_eq!(c.call(&["XADD", "events:42", "1-1", "f", "v"]), "$3\r\n1-1\r\n");
    let ctx = server.context();
    let table = ctx.tables.lookup("redis.db2.stream.events:42").expect("the stream's table");
    assert!(ctx.tables.is_stream_table(table));
    assert_eq!(ctx.store.stream_shape(table).unwrap().streamlets, 1);
    let groups = ctx.store.stream_groups(table, 0, 0, 10).unwrap();
    assert_eq!(groups.iter().map(|g| g.records).sum::<u64>(), 1);
    // XDEL appends a marker record; DEL drops the table.
    assert_eq!(c.call(&["XDEL", "events:42", "1-1"]), ":1\r\n");
    let groups = ctx.store.stream_groups(table, 0, 0, 10).unwrap();
    assert_eq!(groups.iter().map(|g| g.records).sum::<u64>(), 2);
    assert_eq!(c.call(&["DEL", "events:42"]), ":1\r\n");
    assert!(ctx.tables.lookup("redis.db2.stream.events:42").is_none());
    // A key too long to name a stream.
    let long = "k".repeat(300);
    assert!(c.call(&["XADD", &long, "*", "f", "v"]).starts_with("-ERR stream key too long for Shoal"));
    assert_eq!(c.call(&["XLEN", &long]), ":0\r\n");
}

#[test]
fn stream_commands_are_refused_inside_a_transaction_and_apply_nothing() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "k", "v"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["XADD", "s", "1-1", "f", "v"]), "-ERR Command not allowed inside a transaction\r\n");
    assert_eq!(c.call(&["EXEC"]), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(c.call(&["EXISTS", "s", "k"]), ":0\r\n");
}

/// `connected_clients` from INFO clients.
fn connected(c: &mut Client) -> usize {
    let info = c.call(&["INFO", "clients"]);
    let line = info.lines().find(|l| l.starts_with("connected_clients:")).expect("connected_clients");
    line["connected_clients:".len()..].trim().parse().unwrap()
}

#[test]
fn a_blocked_client_that_disconnects_is_freed() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    let mut blocked: Vec<Client> = (0..10).map(|_| Client::connect(server.resp_addr())).collect();
    for b in &mut blocked {
        b.send(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"]);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(connected(&mut c), 11);
    drop(blocked);
    let deadline = Instant::now() + Duration::from_secs(5);
    while connected(&mut c) != 1 {
        assert!(Instant::now() < deadline, "blocked connections kept after their clients closed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_range_over_the_reply_limit_closes_the_connection_as_mget_does() {
    let mut cfg = config();
    cfg.max_value_size = shoal_server::ByteSize(16 << 10);
    cfg.reply_buffer_size = shoal_server::ByteSize(128 << 10);
    let server = start(cfg);
    let mut c = Client::connect(server.resp_addr());
    let value = "v".repeat(100);
    for i in 1..=2_000 {
        assert_eq!(c.call(&["XADD", "s", &format!("{i}-0"), "f", &value]), bulk(&format!("{i}-0")));
    }
    let ten = c.call(&["XRANGE", "s", "-", "+", "COUNT", "10"]);
    assert!(ten.starts_with("*10\r\n*2\r\n$3\r\n1-0\r\n"), "{ten}");
    c.send(&[b"XRANGE", b"s", b"-", b"+"]);
    assert!(c.closed_by_server(), "a reply of about 250 KiB over a 128 KiB limit");
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["XLEN", "s"]), ":2000\r\n");
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}
