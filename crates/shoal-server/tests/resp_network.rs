//! The RESP front end over real sockets: commands, pipelining, and every
//! kind of bad client (malformed, oversized, stalled, not reading, too
//! many), each checked to be answered or closed while other clients are
//! still served.

mod common;

use common::{config, encode, start, Client};
use shoal_server::{ByteSize, ServerStats};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A client on `server` answers PING: the server is still serving.
fn still_serving(server: &shoal_server::Server) {
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    assert_eq!(c.call(&["SET", "alive", "yes"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "alive"]), "$3\r\nyes\r\n");
}

#[test]
fn basic_commands_reply_like_redis() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    assert_eq!(c.call(&["ping", "hi"]), "$2\r\nhi\r\n");
    assert_eq!(c.call(&["GET", "k"]), "$-1\r\n");
    assert_eq!(c.call(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "k", "w", "NX"]), "$-1\r\n");
    assert_eq!(c.call(&["SET", "k", "w", "XX", "GET"]), "$1\r\nv\r\n");
    assert_eq!(c.call(&["SET", "k", "w", "NX", "XX"]), "-ERR syntax error\r\n");
    assert_eq!(c.call(&["SET", "k", "w", "EX", "10"]), "+OK\r\n");
    assert_eq!(c.call(&["TTL", "k"]), ":10\r\n");
    assert_eq!(c.call(&["SET", "k", "w", "EX", "0"]), "-ERR invalid expire time in 'set' command\r\n");
    assert_eq!(c.call(&["PERSIST", "k"]), ":1\r\n");
    assert_eq!(c.call(&["GET"]), "-ERR wrong number of arguments for 'get' command\r\n");
    assert_eq!(c.call(&["INCR", "k"]), "-ERR value is not an integer or out of range\r\n");
    assert_eq!(c.call(&["INCRBY", "n", "5"]), ":5\r\n");
    assert_eq!(c.call(&["DECRBY", "n", "7"]), ":-2\r\n");
    assert_eq!(c.call(&["APPEND", "n", "0"]), ":3\r\n");
    assert_eq!(c.call(&["GET", "n"]), "$3\r\n-20\r\n");
    assert_eq!(c.call(&["MSET", "a", "1", "b", "2"]), "+OK\r\n");
    assert_eq!(c.call(&["MGET", "a", "x", "b"]), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n");
    assert_eq!(c.call(&["MSETNX", "a", "9", "c", "3"]), ":0\r\n");
    assert_eq!(c.call(&["EXISTS", "a", "a", "c"]), ":2\r\n");
    assert_eq!(c.call(&["DBSIZE"]), ":4\r\n");
    assert_eq!(c.call(&["DEL", "a", "b", "zz"]), ":2\r\n");
    assert_eq!(c.call(&["SELECT", "1"]), "+OK\r\n");
    assert_eq!(c.call(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.call(&["SELECT", "16"]), "-ERR DB index is out of range\r\n");
    assert_eq!(c.call(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c.call(&["FLUSHDB"]), "+OK\r\n");
    assert_eq!(c.call(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.call(&["foo", "a"]), "-ERR unknown command 'foo', with args beginning with: 'a' \r\n");
    assert_eq!(c.call(&["CONFIG", "GET", "appendonly"]), "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    assert_eq!(c.call(&["CONFIG", "nope"]), "-ERR unknown subcommand 'nope'. Try CONFIG HELP.\r\n");
    assert_eq!(c.call(&["CLIENT", "SETNAME", "me"]), "+OK\r\n");
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$2\r\nme\r\n");
    assert!(c.call(&["INFO", "shoal"]).contains("log_utilisation:"));
    assert_eq!(c.call(&["QUIT"]), "+OK\r\n");
    assert!(c.closed_by_server());
}

/// Keys set to expire are gone to every command once their time comes,
/// the sweep reclaims them without anyone touching them, and INFO counts
/// them (`expired_keys`, `expires=` of the keyspace).
#[test]
fn expired_keys_are_gone_and_reclaimed_and_counted() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    for i in 0..50 {
        assert_eq!(c.call(&["SET", &format!("short:{i}"), "v", "PX", "200"]), "+OK\r\n");
    }
    assert_eq!(c.call(&["SET", "long", "v", "EX", "1000"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", "plain", "v"]), "+OK\r\n");
    assert_eq!(c.call(&["DBSIZE"]), ":52\r\n");
    assert!(c.call(&["INFO", "keyspace"]).contains("db0:keys=52,expires=51,avg_ttl=0"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.call(&["GET", "short:0"]), "$-1\r\n");
    assert_eq!(c.call(&["EXISTS", "short:1", "long"]), ":1\r\n");
    assert_eq!(c.call(&["TTL", "short:2"]), ":-2\r\n");
    assert_eq!(c.call(&["INCR", "short:3"]), ":1\r\n");
    assert_eq!(c.call(&["TTL", "short:3"]), ":-1\r\n");
    // Nobody touches the others: the sweep removes them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.call(&["DBSIZE"]) != ":3\r\n" {
        assert!(Instant::now() < deadline, "expired keys still counted: {}", c.call(&["DBSIZE"]));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(c.call(&["INFO", "stats"]).contains("expired_keys:50\r\n"));
    assert!(c.call(&["INFO", "keyspace"]).contains("db0:keys=3,expires=1,avg_ttl=0"));
    let shoal = c.call(&["INFO", "shoal"]);
    assert!(shoal.contains("expiring_objects:1\r\n") && shoal.contains("expiry_sweep_passes:"), "{shoal}");
    // The commands' specs name their key, so that a cluster routes them.
    let info = c.call(&["COMMAND", "INFO", "ttl"]);
    assert!(info.contains("$3\r\nttl\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"), "{info}");
    let info = c.call(&["COMMAND", "INFO", "expire"]);
    assert!(info.contains("$6\r\nexpire\r\n:-3\r\n") && info.contains(":1\r\n:1\r\n:1\r\n"), "{info}");
}

#[test]
fn scan_visits_every_key_once_with_match_and_count() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    for i in 0..500 {
        let k = format!("key:{i}");
        assert_eq!(c.call(&["SET", &k, "v"]), "+OK\r\n");
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    let mut pages = 0;
    loop {
        c.send(&[b"SCAN", cursor.as_bytes(), b"MATCH", b"key:1*", b"COUNT", b"50"]);
        let reply = c.read_reply();
        let lines: Vec<&str> = reply.split("\r\n").collect();
        // *2, $len, cursor, *n, then $len/key pairs.
        cursor = lines[2].to_string();
        for k in lines[4..].iter().skip(1).step_by(2) {
            if !k.is_empty() {
                assert!(seen.insert(k.to_string()), "{k} returned twice");
            }
        }
        pages += 1;
        if cursor == "0" {
            break;
        }
        assert!(pages < 1000, "scan does not end");
    }
    let expected: std::collections::HashSet<String> =
        (0..500).map(|i| format!("key:{i}")).filter(|k| k.starts_with("key:1")).collect();
    assert_eq!(seen, expected);
    assert!(pages > 1, "COUNT 50 over 500 keys takes several pages");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    let mut batch = Vec::new();
    for i in 0..2000 {
        batch.extend_from_slice(&encode(&[b"INCR", b"counter"]));
        if i % 100 == 0 {
            batch.extend_from_slice(b"PING\r\n");
        }
    }
    c.send_raw(&batch);
    for i in 0..2000 {
        assert_eq!(c.read_reply(), format!(":{}\r\n", i + 1));
        if i % 100 == 0 {
            assert_eq!(c.read_reply(), "+PONG\r\n");
        }
    }
}

#[test]
fn inline_commands_work() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    c.send_raw(b"SET greeting \"hello world\"\r\nGET greeting\r\n\r\nPING\n");
    assert_eq!(c.read_reply(), "+OK\r\n");
    assert_eq!(c.read_reply(), "$11\r\nhello world\r\n");
    assert_eq!(c.read_reply(), "+PONG\r\n");
}

#[test]
fn resp3_after_hello_3() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    let hello = c.call(&["HELLO", "3"]);
    assert!(hello.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello}");
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"));
    assert_eq!(c.call(&["GET", "missing"]), "_\r\n");
    assert!(c.call(&["CONFIG", "GET", "save"]).starts_with("%1\r\n"));
    assert!(c.call(&["INFO", "server"]).starts_with("="));
    assert_eq!(c.call(&["HELLO", "4"]), "-NOPROTO unsupported protocol version\r\n");
    let back = c.call(&["HELLO", "2"]);
    assert!(back.starts_with("*14\r\n"), "{back}");
    assert_eq!(c.call(&["GET", "missing"]), "$-1\r\n");
}

#[test]
fn malformed_requests_get_a_protocol_error_and_are_closed() {
    let server = start(config());
    let cases: &[(&[u8], &str)] = &[
        (b"*1\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$999999999999\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$2\r\nabc\r\n", "-ERR Protocol error: expected CRLF after bulk string\r\n"),
        (b"SET a \"b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
        (b"*99999999\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
    ];
    for (bytes, expected) in cases {
        let mut c = Client::connect(server.resp_addr());
        c.send_raw(bytes);
        assert_eq!(&c.read_reply(), expected, "for {:?}", String::from_utf8_lossy(bytes));
        assert!(c.closed_by_server(), "closed after {:?}", String::from_utf8_lossy(bytes));
    }
    // A long line with no newline: refused at the inline limit, before 1 MiB arrives.
    let mut c = Client::connect(server.resp_addr());
    let _ = c.stream.write_all(&vec![b'a'; 100 * 1024]);
    assert_eq!(c.read_reply(), "-ERR Protocol error: too big inline request\r\n");
    assert!(c.closed_by_server());
    let stats = &server.context().stats;
    assert_eq!(ServerStats::get(&stats.protocol_errors), cases.len() as u64 + 1);
    still_serving(&server);
}

#[test]
fn requests_over_the_size_limits_are_refused() {
    let server = start(shoal_server::ServerConfig {
        max_value_size: ByteSize(64 << 10),
        max_request_size: ByteSize(160 << 10),
        request_buffer_size: ByteSize(160 << 10),
        reply_buffer_size: ByteSize(256 << 10),
        ..config()
    });
    let mut c = Client::connect(server.resp_addr());
    // Slightly over the largest value: the command's error, connection kept.
    let big = vec![b'x'; (64 << 10) + 10];
    c.send(&[b"SET", b"k", &big]);
    assert_eq!(c.read_reply(), "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n");
    assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    // A bulk string far over it: refused from its length alone.
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n");
    assert_eq!(c.read_reply(), "-ERR Protocol error: invalid bulk length\r\n");
    assert!(c.closed_by_server());
    // Values that fit one by one, but not together in one request.
    let mut c = Client::connect(server.resp_addr());
    let v = vec![b'y'; 60 << 10];
    let req = encode(&[b"MSET", b"a", &v, b"b", &v, b"c", &v]);
    let _ = c.stream.write_all(&req);
    assert_eq!(c.read_reply(), format!("-ERR Protocol error: request exceeds the maximum of {} bytes\r\n", 160 << 10));
    assert!(c.closed_by_server());
    still_serving(&server);
}

#[test]
fn a_half_request_that_stalls_is_closed_after_the_idle_timeout() {
    let server = start(shoal_server::ServerConfig { idle_timeout_secs: 1, ..config() });
    let mut stalled = Client::connect(server.resp_addr());
    stalled.send_raw(b"*2\r\n$3\r\nGET\r\n$10\r\nabc");
    let started = Instant::now();
    still_serving(&server);
    assert!(stalled.closed_by_server());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(5), "closed after {waited:?}");
    assert!(ServerStats::get(&server.context().stats.idle_timeouts) >= 1);
}

#[test]
fn a_client_that_never_reads_is_disconnected_at_the_reply_limit() {
    let server = start(shoal_server::ServerConfig {
        max_value_size: ByteSize(16 << 10),
        max_request_size: ByteSize(64 << 10),
        request_buffer_size: ByteSize(64 << 10),
        reply_buffer_size: ByteSize(128 << 10),
        ..config()
    });
    let mut setup = Client::connect(server.resp_addr());
    let value = "v".repeat(16 << 10);
    assert_eq!(setup.call(&["SET", "big", &value]), "+OK\r\n");
    let mut greedy = TcpStream::connect(server.resp_addr()).unwrap();
    greedy.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let gets = encode(&[b"GET", b"big"]).repeat(1000);
    let started = Instant::now();
    let mut cut = false;
    // 10,000 GETs ask for 160 MiB of replies, far beyond what socket buffers hold.
    for _ in 0..10 {
        if greedy.write_all(&gets).is_err() {
            cut = true;
            break;
        }
    }
    let stats = &server.context().stats;
    while !cut && ServerStats::get(&stats.reply_overflows) == 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ServerStats::get(&stats.reply_overflows), 1, "the greedy client was disconnected");
    still_serving(&server);
}

#[test]
fn a_thousand_idle_connections_do_not_stop_service() {
    let server = start(config());
    let idle: Vec<TcpStream> = (0..1200).map(|_| TcpStream::connect(server.resp_addr()).unwrap()).collect();
    let stats = &server.context().stats;
    let started = Instant::now();
    while ServerStats::get(&stats.connections_current) < 1200 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ServerStats::get(&stats.connections_current), 1200);
    still_serving(&server);
    drop(idle);
    while ServerStats::get(&stats.connections_current) > 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ServerStats::get(&stats.connections_current), 0);
}

#[test]
fn connections_over_the_limit_are_refused_with_an_error() {
    let server = start(shoal_server::ServerConfig { max_connections: 3, ..config() });
    let mut open: Vec<Client> = (0..3).map(|_| Client::connect(server.resp_addr())).collect();
    for c in &mut open {
        assert_eq!(c.call(&["PING"]), "+PONG\r\n");
    }
    let mut refused = Client::connect(server.resp_addr());
    assert_eq!(refused.read_reply(), "-ERR max number of clients reached\r\n");
    assert!(refused.closed_by_server());
    assert_eq!(ServerStats::get(&server.context().stats.connections_rejected), 1);
    drop(open.pop());
    std::thread::sleep(Duration::from_millis(200));
    still_serving(&server);
}

#[test]
fn random_garbage_never_stops_the_server() {
    let server = start(config());
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..100 {
        let mut s = TcpStream::connect(server.resp_addr()).unwrap();
        let len = (next() % 4096) as usize;
        let alphabet = b"*$\r\n-0123456789 \"'\\xabcGETSET";
        let bytes: Vec<u8> = (0..len)
            .map(|_| if next() % 2 == 0 { alphabet[(next() % alphabet.len() as u64) as usize] } else { next() as u8 })
            .collect();
        let _ = s.write_all(&bytes);
    }
    still_serving(&server);
}

#[test]
fn shutdown_finishes_replies_and_stops_accepting() {
    let server = start(config());
    let addr = server.resp_addr();
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["SET", "k", "v"]), "+OK\r\n");
    c.send_raw(&encode(&[b"GET", b"k"]));
    assert_eq!(c.read_reply(), "$1\r\nv\r\n");
    let started = Instant::now();
    server.shutdown();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(c.closed_by_server());
    assert!(TcpStream::connect(addr).is_err(), "no longer accepting");
}

#[test]
fn a_pipeline_sent_before_closing_the_write_side_is_answered_in_full() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    // Inline commands are small: one read holds more than one batch of them.
    let batch = b"INCR n\r\n".repeat(20_000);
    c.send_raw(&batch);
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    for i in 1..=20_000 {
        assert_eq!(c.read_reply(), format!(":{i}\r\n"));
    }
    assert!(c.closed_by_server());
}

#[test]
fn a_full_store_refuses_writes_with_redis_oom_error_and_keeps_serving() {
    let server = start(shoal_server::ServerConfig { memory: ByteSize(32 << 20), ..config() });
    let mut c = Client::connect(server.resp_addr());
    let value = "x".repeat(60 << 10);
    let started = Instant::now();
    let mut stored = 0;
    let refusal = loop {
        let reply = c.call(&["SET", &format!("key:{stored}"), &value]);
        if reply != "+OK\r\n" {
            break reply;
        }
        stored += 1;
        assert!(stored < 1000, "32 MiB cannot hold 60 MB");
    };
    assert_eq!(refusal, "-OOM command not allowed when used memory > 'maxmemory'.\r\n");
    assert!(stored > 100, "most of the memory holds data before refusals ({stored} values)");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(c.call(&["GET", "key:0"]).len(), value.len() + "$61440\r\n\r\n".len());
    assert_eq!(c.call(&["DEL", "key:0"]), ":1\r\n");
    assert!(c.call(&["INFO", "shoal"]).contains("out_of_memory_refusals:"));
    still_serving(&server);
}

#[test]
fn a_full_cache_evicts_the_oldest_keys_and_says_so() {
    let server = start(shoal_server::ServerConfig {
        memory: ByteSize(32 << 20),
        eviction: shoal_engine::Eviction::Oldest,
        ..config()
    });
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(
        c.call(&["CONFIG", "GET", "maxmemory-policy"]),
        "*2\r\n$16\r\nmaxmemory-policy\r\n$14\r\nallkeys-oldest\r\n"
    );
    // Three times the memory: every SET is taken.
    let value = "x".repeat(60 << 10);
    for i in 0..1600 {
        assert_eq!(c.call(&["SET", &format!("key:{i}"), &value]), "+OK\r\n", "SET {i}");
    }
    let info = c.call(&["INFO", "everything"]);
    let field = |name: &str| -> u64 {
        let line = info.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("no {name}"));
        line[name.len() + 1..].trim().parse().unwrap()
    };
    assert!(info.contains("maxmemory_policy:allkeys-oldest"));
    let evicted = field("evicted_keys");
    assert!(evicted > 1000, "evicted {evicted}");
    assert_eq!(field("out_of_memory_refusals"), 0);
    let held: u64 = c.call(&["DBSIZE"]).trim_start_matches(':').trim().parse().unwrap();
    assert_eq!(held + evicted, 1600, "every key is held or evicted");
    // First written, first evicted.
    assert_eq!(c.call(&["EXISTS", "key:0"]), ":0\r\n");
    assert_eq!(c.call(&["STRLEN", "key:1599"]), format!(":{}\r\n", value.len()));
    // The policy changes at run time; Redis's policies Shoal lacks are refused.
    assert_eq!(c.call(&["CONFIG", "SET", "maxmemory-policy", "NOEVICTION"]), "+OK\r\n");
    assert!(c.call(&["INFO", "memory"]).contains("maxmemory_policy:noeviction"));
    assert_eq!(
        c.call(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the \
         following: noeviction, allkeys-oldest\r\n"
    );
    still_serving(&server);
}

#[test]
fn concurrent_increments_and_appends_are_atomic() {
    let server = start(config());
    let addr = server.resp_addr();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let batch = [encode(&[b"INCR", b"counter"]), encode(&[b"APPEND", b"log", b"x"])].concat().repeat(500);
                c.send_raw(&batch);
                for _ in 0..1000 {
                    assert!(c.read_reply().starts_with(':'));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["GET", "counter"]), "$4\r\n4000\r\n");
    assert_eq!(c.call(&["STRLEN", "log"]), ":4000\r\n");
}

#[test]
fn msetnx_is_all_or_nothing_and_a_repeated_key_takes_its_last_value() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["MSETNX", "a", "1", "b", "2", "a", "3"]), ":1\r\n");
    assert_eq!(c.call(&["MGET", "a", "b"]), "*2\r\n$1\r\n3\r\n$1\r\n2\r\n");
    assert_eq!(c.call(&["MSETNX", "c", "1", "b", "9"]), ":0\r\n");
    assert_eq!(c.call(&["EXISTS", "c"]), ":0\r\n", "nothing written when one key exists");
    // 256 distinct keys are one atomic write; 257 are refused, nothing written.
    let args = |n: usize| -> Vec<Vec<u8>> {
        let mut a = vec![b"MSETNX".to_vec()];
        for i in 0..n {
            a.push(format!("n{n}:{i}").into_bytes());
            a.push(b"v".to_vec());
        }
        a
    };
    for (n, reply) in [(256, ":1\r\n"), (257, "-ERR MSETNX takes at most 256 distinct keys in Shoal\r\n")] {
        let a = args(n);
        c.send(&a.iter().map(|x| x.as_slice()).collect::<Vec<_>>());
        assert_eq!(c.read_reply(), reply);
    }
    assert_eq!(c.call(&["EXISTS", "n256:255", "n257:0"]), ":1\r\n");
}

#[test]
fn racing_msetnx_on_overlapping_keys_exactly_one_wins() {
    let server = start(config());
    let addr = server.resp_addr();
    let rounds = 300;
    let racers: Vec<_> = [("a", "b"), ("b", "c")]
        .into_iter()
        .map(|(x, y)| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let batch: Vec<u8> = (0..rounds)
                    .flat_map(|r| {
                        let (kx, ky) = (format!("{r}:{x}"), format!("{r}:{y}"));
                        encode(&[b"MSETNX", kx.as_bytes(), x.as_bytes(), ky.as_bytes(), x.as_bytes()])
                    })
                    .collect();
                c.send_raw(&batch);
                (0..rounds).map(|_| c.read_reply() == ":1\r\n").collect::<Vec<bool>>()
            })
        })
        .collect();
    let won: Vec<Vec<bool>> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    let mut c = Client::connect(addr);
    for (r, (&first, &second)) in won[0].iter().zip(&won[1]).enumerate() {
        assert!(first != second, "round {r}: exactly one MSETNX succeeds");
        let (winner, loser_only) = if first { ("a", "c") } else { ("b", "a") };
        let shared = format!("{r}:b");
        assert_eq!(c.call(&["GET", &shared]), format!("$1\r\n{winner}\r\n"));
        assert_eq!(c.call(&["EXISTS", &format!("{r}:{loser_only}")]), ":0\r\n", "round {r}: no partial write");
    }
}
