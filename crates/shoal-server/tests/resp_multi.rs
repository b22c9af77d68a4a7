//! Redis transactions on a standalone server: a failed MULTI applies
//! nothing (the hazard of applying commands queued after an unsupported
//! MULTI), EXEC is atomic against other clients, WATCH aborts on any change,
//! and a queue cannot grow past the connection's bound. Replies are checked
//! against Redis's in tests/resp_txn_compat.py (redis_tools.rs).

mod common;

use common::{config, start, Client};
use shoal_server::ByteSize;
use std::thread;

fn bulk(v: &str) -> String {
    format!("${}\r\n{v}\r\n", v.len())
}

#[test]
fn a_transaction_with_a_queueing_error_applies_nothing_even_pipelined() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    // As redis-py's pipeline(transaction=True) sends it: all in one write.
    c.send_raw(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*1\r\n$6\r\nNOSUCH\r\n*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*1\r\n$4\r\nEXEC\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nn\r\n");
    assert_eq!(c.read_reply(), "+OK\r\n");
    assert_eq!(c.read_reply(), "+QUEUED\r\n");
    assert_eq!(c.read_reply(), "-ERR unknown command 'NOSUCH', with args beginning with: \r\n");
    assert_eq!(c.read_reply(), "+QUEUED\r\n");
    assert_eq!(c.read_reply(), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(c.read_reply(), "$-1\r\n", "SET queued before the error was not applied");
    assert_eq!(c.read_reply(), "$-1\r\n", "INCR queued after the error was not applied");
    // An arity error and a refused keyless command abort the same way.
    for bad in [&["GET"][..], &["DBSIZE"], &["FLUSHDB"], &["SCAN", "0"]] {
        assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
        assert_eq!(c.call(&["INCR", "n"]), "+QUEUED\r\n");
        assert!(c.call(bad).starts_with("-ERR"), "{bad:?} refused when queued");
        assert_eq!(c.call(&["EXEC"]), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    }
    assert_eq!(c.call(&["GET", "n"]), "$-1\r\n");
    // DISCARD drops the queue; the connection is usable after each.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "a", "2"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["DISCARD"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "a"]), "$-1\r\n");
    assert_eq!(c.call(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    // A good transaction: replies in order, errors of single commands inside.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    for cmd in [
        &["SET", "a", "x"][..],
        &["INCR", "a"],
        &["APPEND", "a", "y"],
        &["GET", "a"],
        &["SELECT", "2"],
        &["SET", "a", "db2"],
    ] {
        assert_eq!(c.call(cmd), "+QUEUED\r\n");
    }
    assert_eq!(
        c.call(&["EXEC"]),
        "*6\r\n+OK\r\n-ERR value is not an integer or out of range\r\n:2\r\n$2\r\nxy\r\n+OK\r\n+OK\r\n"
    );
    assert_eq!(c.call(&["GET", "a"]), bulk("db2"), "SELECT inside EXEC stays in effect");
    assert_eq!(c.call(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "a"]), bulk("xy"));
}

#[test]
fn exec_is_atomic_against_other_clients() {
    let server = start(config());
    let addr = server.resp_addr();
    let writers: Vec<_> = (0..3)
        .map(|_| {
            thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..300 {
                    c.send_raw(b"*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$1\r\na\r\n*2\r\n$4\r\nINCR\r\n$1\r\nb\r\n*1\r\n$4\r\nEXEC\r\n");
                    for _ in 0..3 {
                        c.read_reply();
                    }
                    let exec = c.read_reply();
                    assert!(exec.starts_with("*2\r\n:"), "{exec}");
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut nonzero = 0;
                for _ in 0..300 {
                    // Both keys in one transaction, and in one MGET: never apart.
                    c.send_raw(b"*1\r\n$5\r\nMULTI\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n*1\r\n$4\r\nEXEC\r\n");
                    for _ in 0..3 {
                        c.read_reply();
                    }
                    let exec = c.read_reply();
                    // Two bulks, each "$-1" (before any write) or "$n" and
                    // its value.
                    let body = exec.strip_prefix("*2\r\n").unwrap_or_else(|| panic!("EXEC answered {exec:?}"));
                    let first_len = if body.starts_with("$-1\r\n") {
                        5
                    } else {
                        let n: usize = body[1..body.find("\r\n").unwrap()].parse().unwrap();
                        body.find("\r\n").unwrap() + 2 + n + 2
                    };
                    let (a, b) = body.split_at(first_len);
                    assert_eq!(a, b, "a transaction saw another half done: {exec:?}");
                    nonzero += (a != "$-1\r\n") as u32;
                }
                nonzero
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let seen: u32 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["MGET", "a", "b"]), format!("*2\r\n{}{}", bulk("900"), bulk("900")));
    assert!(seen > 0, "the readers never overlapped the writers");
}

#[test]
fn watch_aborts_exec_after_any_change_and_optimistic_increments_are_exact() {
    let server = start(config());
    let addr = server.resp_addr();
    let mut c = Client::connect(addr);
    let mut other = Client::connect(addr);
    // Another client's write, the same client's write, a removal, a write
    // of the same value: each aborts.
    for (who, change) in [
        (1, &["SET", "w", "1"][..]),
        (0, &["SET", "w", "2"]),
        (1, &["DEL", "w"]),
        (1, &["SET", "w", "3"]),
        (1, &["SET", "w", "3"]),
    ] {
        assert_eq!(c.call(&["WATCH", "w"]), "+OK\r\n");
        let writer = if who == 0 { &mut c } else { &mut other };
        assert!(!writer.call(change).starts_with('-'));
        assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
        assert_eq!(c.call(&["SET", "w", "txn"]), "+QUEUED\r\n");
        assert_eq!(c.call(&["EXEC"]), "*-1\r\n", "EXEC after {change:?} by client {who}");
        assert_ne!(c.call(&["GET", "w"]), bulk("txn"));
    }
    // Absent at WATCH, created and removed again: aborts too.
    assert_eq!(c.call(&["WATCH", "ghost"]), "+OK\r\n");
    other.call(&["SET", "ghost", "boo"]);
    other.call(&["DEL", "ghost"]);
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "ghost", "txn"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*-1\r\n");
    // Unchanged (or UNWATCHed): applied; EXEC unwatches everything.
    assert_eq!(c.call(&["WATCH", "w", "ghost"]), "+OK\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "w", "txn"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*1\r\n+OK\r\n");
    other.call(&["SET", "w", "later"]);
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "w"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), format!("*1\r\n{}", bulk("later")));

    // Four clients add 1 to a counter 150 times each with WATCH, GET, MULTI,
    // SET, EXEC, retrying on abort: no increment lost or doubled.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut aborts = 0;
                for _ in 0..150 {
                    loop {
                        assert_eq!(c.call(&["WATCH", "counter"]), "+OK\r\n");
                        let current = c.call(&["GET", "counter"]);
                        let n: i64 = current.split("\r\n").nth(1).map_or(0, |v| v.parse().unwrap_or(0));
                        assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
                        assert_eq!(c.call(&["SET", "counter", &(n + 1).to_string()]), "+QUEUED\r\n");
                        match c.call(&["EXEC"]).as_str() {
                            "*1\r\n+OK\r\n" => break,
                            "*-1\r\n" => aborts += 1,
                            other => panic!("EXEC: {other}"),
                        }
                    }
                }
                aborts
            })
        })
        .collect();
    let aborts: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(c.call(&["GET", "counter"]), bulk("600"), "{aborts} aborted attempts");
}

#[test]
fn queued_commands_are_bounded_per_connection() {
    let mut cfg = config();
    cfg.max_value_size = ByteSize(48 << 10);
    cfg.max_request_size = ByteSize(64 << 10);
    cfg.request_buffer_size = ByteSize(256 << 10);
    let server = start(cfg);
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    let value = "v".repeat(32 << 10);
    let mut refused = 0;
    for i in 0..20 {
        let r = c.call(&["SET", &format!("k{i}"), &value]);
        if r.starts_with("-ERR transaction too large") {
            refused += 1;
        } else {
            assert_eq!(r, "+QUEUED\r\n");
        }
    }
    assert!(refused > 0, "256 KiB bound never reached by 640 KiB of queued commands");
    assert_eq!(c.call(&["EXEC"]), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(c.call(&["EXISTS", "k0"]), ":0\r\n");
    assert_eq!(c.call(&["PING"]), "+PONG\r\n");
}
