//! The Redis front end in a cluster: one coordinator and three servers in
//! this process, clients talking RESP to one server about keys mastered by
//! all three.
//!
//! * Reads and writes of any key through any server (most are forwarded),
//!   each key stored on exactly one master.
//! * Multi-key commands across masters: MGET reassembled in order, DEL and
//!   EXISTS summed, MSET split, MSETNX refused with CROSSSLOT.
//! * DBSIZE, SCAN and FLUSHDB over the whole cluster; SCAN returns every
//!   key exactly once.
//! * Pipelines mixing local and forwarded commands are answered in order,
//!   in RESP2 and RESP3, in another database.
//! * A write's reply comes only once the log holding it is durable.
//! * With a password, forwarded connections log in and every key is still
//!   reachable from every server; failure detection still sees the servers.

mod common;

use common::cluster::Cluster;
use common::Client;
use shoal_server::Server;
use std::collections::HashSet;
use std::time::Duration;

fn int(reply: &str) -> i64 {
    reply.strip_prefix(':').and_then(|r| r.strip_suffix("\r\n")).and_then(|r| r.parse().ok()).expect(reply)
}

fn bulk(v: &str) -> String {
    format!("${}\r\n{v}\r\n", v.len())
}

/// The keys of a whole SCAN iteration (each checked to come only once).
fn scan_all(c: &mut Client, count: &str) -> (HashSet<String>, usize) {
    let mut seen = HashSet::new();
    let mut cursor = "0".to_string();
    let mut pages = 0;
    loop {
        c.send(&[b"SCAN", cursor.as_bytes(), b"COUNT", count.as_bytes()]);
        let reply = c.read_reply();
        let lines: Vec<&str> = reply.split("\r\n").collect();
        cursor = lines[2].to_string();
        for k in lines[4..].iter().skip(1).step_by(2) {
            if !k.is_empty() {
                assert!(seen.insert(k.to_string()), "{k} returned twice");
            }
        }
        pages += 1;
        if cursor == "0" {
            return (seen, pages);
        }
        assert!(pages < 10_000, "scan does not end");
    }
}

#[test]
fn any_server_serves_any_key() {
    let cluster = Cluster::start("keys", 3);
    let mut c = Client::connect(cluster.addr(0));
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&["SET", k, &format!("v-{k}")]), "+OK\r\n");
    }
    // Each key is on exactly one master, and every master has some.
    let mut locals: Vec<Client> = (0..3).map(|i| cluster.local(i)).collect();
    let mut per_server = [0; 3];
    for k in &keys {
        let holders: Vec<usize> = (0..3).filter(|&i| locals[i].call(&["GET", k]) == bulk(&format!("v-{k}"))).collect();
        // A local-only connection refuses the keys it does not master.
        for (i, l) in locals.iter_mut().enumerate() {
            if !holders.contains(&i) {
                assert!(l.call(&["GET", k]).starts_with("-TRYAGAIN"), "server {i} refuses {k}");
            }
        }
        assert_eq!(holders.len(), 1, "{k} on {holders:?}");
        per_server[holders[0]] += 1;
    }
    assert!(per_server.iter().all(|&n| n > 30), "keys spread over the masters: {per_server:?}");
    let local_sizes: Vec<i64> = locals.iter_mut().map(|l| int(&l.call(&["DBSIZE"]))).collect();
    assert_eq!(local_sizes, per_server.to_vec(), "local-only DBSIZE counts one server");

    // Read back through the other servers.
    for i in 1..3 {
        let mut other = Client::connect(cluster.addr(i));
        for k in &keys {
            assert_eq!(other.call(&["GET", k]), bulk(&format!("v-{k}")));
        }
        assert_eq!(other.call(&["GET", "missing"]), "$-1\r\n");
        assert_eq!(int(&other.call(&["DBSIZE"])), 300);
    }

    // Read-modify-write commands on remote keys are still atomic per key.
    for _ in 0..20 {
        assert!(c.call(&["INCR", "counter"]).starts_with(':'));
    }
    assert_eq!(c.call(&["APPEND", "counter", "0"]), ":3\r\n");
    assert_eq!(Client::connect(cluster.addr(2)).call(&["GET", "counter"]), bulk("200"));
    assert_eq!(c.call(&["GETSET", "counter", "x"]), bulk("200"));
    assert_eq!(c.call(&["SETNX", "counter", "y"]), ":0\r\n");
    assert_eq!(c.call(&["SET", "counter", "z", "XX", "GET"]), bulk("x"));
    assert_eq!(c.call(&["STRLEN", "counter"]), ":1\r\n");
    assert_eq!(c.call(&["INCR", "counter"]), "-ERR value is not an integer or out of range\r\n");
}

/// Expiry commands on keys of every master through one server (most are
/// forwarded): the expiry is set on the key's master, read back through
/// any server, and the key is gone everywhere once it expires.
#[test]
fn expiry_commands_reach_every_master() {
    let cluster = Cluster::start("expiry", 3);
    let mut c = Client::connect(cluster.addr(0));
    let keys: Vec<String> = (0..60).map(|i| format!("ttl:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let reply = match i % 4 {
            0 => c.call(&["SET", k, "v", "EX", "1000"]),
            1 => c.call(&["SETEX", k, "1000", "v"]),
            2 => c.call(&["SET", k, "v", "PX", "300"]),
            _ => c.call(&["PSETEX", k, "300", "v"]),
        };
        assert_eq!(reply, "+OK\r\n", "{k}");
    }
    let mut other = Client::connect(cluster.addr(2));
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 4 < 2) {
        assert_eq!(other.call(&["TTL", k]), ":1000\r\n", "{k}");
        match i % 4 {
            0 => assert_eq!(c.call(&["EXPIRE", k, "2000", "GT"]), ":1\r\n"),
            _ => assert_eq!(c.call(&["PERSIST", k]), ":1\r\n"),
        }
    }
    std::thread::sleep(Duration::from_millis(400));
    for (i, k) in keys.iter().enumerate() {
        let want = match i % 4 {
            0 => ":2000\r\n",
            1 => ":-1\r\n",
            _ => ":-2\r\n",
        };
        assert_eq!(other.call(&["TTL", k]), want, "{k}");
        assert_eq!(c.call(&["EXISTS", k]), if i % 4 < 2 { ":1\r\n" } else { ":0\r\n" }, "{k}");
    }
    assert_eq!(c.call(&["GETEX", "ttl:0", "PERSIST"]), bulk("v"));
    assert_eq!(other.call(&["PEXPIRETIME", "ttl:0"]), ":-1\r\n");
}

#[test]
fn with_a_password_forwarded_commands_log_in_and_reach_every_master() {
    use shoal_server::auth::Password;
    let cluster = Cluster::start_configured("auth", 3, Some("pw"), |c| c.requirepass = Some(Password("pw".into())));
    let mut anonymous = Client::connect(cluster.addr(0));
    assert_eq!(anonymous.call(&["GET", "key:0"]), "-NOAUTH Authentication required.\r\n");
    assert_eq!(anonymous.call(&["SET", "key:0", "x"]), "-NOAUTH Authentication required.\r\n");
    let mut c = cluster.client_to(cluster.addr(0));
    let keys: Vec<String> = (0..100).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&["SET", k, &format!("v-{k}")]), "+OK\r\n");
    }
    // Most keys live on the other two masters: they were forwarded there.
    let mut locals: Vec<Client> = (0..3).map(|i| cluster.local(i)).collect();
    let per_server: Vec<i64> = locals.iter_mut().map(|l| int(&l.call(&["DBSIZE"]))).collect();
    assert_eq!(per_server.iter().sum::<i64>(), 100);
    assert!(per_server[1] > 0 && per_server[2] > 0, "keys on other masters: {per_server:?}");
    for i in 0..3 {
        let mut other = cluster.client_to(cluster.addr(i));
        for k in &keys {
            assert_eq!(other.call(&["GET", k]), bulk(&format!("v-{k}")));
        }
        assert_eq!(int(&other.call(&["DBSIZE"])), 100, "DBSIZE asks every server");
        let reply = other.call(&["MGET", "key:1", "key:2", "key:3", "nope"]);
        assert_eq!(reply, format!("*4\r\n{}{}{}$-1\r\n", bulk("v-key:1"), bulk("v-key:2"), bulk("v-key:3")));
    }
    // RESP3 after HELLO AUTH, forwarded the same way.
    let mut r3 = Client::connect(cluster.addr(1));
    assert!(r3.call(&["HELLO", "3", "AUTH", "default", "pw"]).starts_with("%7\r\n"));
    assert_eq!(r3.call(&["GET", "key:7"]), bulk("v-key:7"));
    assert_eq!(r3.call(&["DEL", "key:7", "key:8", "key:9"]), ":3\r\n");
    // Failure detection (native PINGs, which need no login) declares nobody dead.
    let info = c.call(&["INFO", "replication"]);
    assert!(info.contains("cluster_servers_up:3\r\n"), "{info}");
}

#[test]
fn multi_key_commands_span_masters() {
    let cluster = Cluster::start("multi", 3);
    let mut c = Client::connect(cluster.addr(1));
    let keys: Vec<String> = (0..40).map(|i| format!("m:{i}")).collect();
    let mut mset: Vec<&str> = vec!["MSET"];
    let values: Vec<String> = keys.iter().map(|k| format!("val-{k}")).collect();
    for (k, v) in keys.iter().zip(&values) {
        mset.push(k);
        mset.push(v);
    }
    assert_eq!(c.call(&mset), "+OK\r\n");

    // MGET in request order, missing keys null, from another server.
    let mut other = Client::connect(cluster.addr(2));
    let mut mget: Vec<&str> = vec!["MGET"];
    let mut expected = format!("*{}\r\n", keys.len() + 2);
    for (i, (k, v)) in keys.iter().zip(&values).enumerate().rev() {
        mget.push(k);
        expected.push_str(&bulk(v));
        if i == 20 {
            mget.push("nope");
            expected.push_str("$-1\r\n");
        }
    }
    mget.push(&keys[0]);
    expected.push_str(&bulk(&values[0]));
    assert_eq!(other.call(&mget), expected);

    // EXISTS counts a repeated key twice, DEL once; both summed over masters.
    let exists: Vec<&str> = ["EXISTS", "m:1", "m:2", "m:3", "m:1", "nope"].to_vec();
    assert_eq!(int(&other.call(&exists)), 4);
    let del: Vec<&str> = ["DEL", "m:1", "m:2", "m:3", "m:1", "nope", "m:4"].to_vec();
    assert_eq!(int(&c.call(&del)), 4);
    assert_eq!(int(&c.call(&["UNLINK", "m:5", "m:6", "m:5", "m:1"])), 2);
    assert_eq!(int(&other.call(&["DBSIZE"])), 34);
    assert_eq!(other.call(&["MGET", "m:1", "m:7"]), format!("*2\r\n$-1\r\n{}", bulk("val-m:7")));

    // MSETNX across masters cannot be atomic: refused as Redis Cluster does.
    let mut msetnx = vec!["MSETNX".to_string()];
    for i in 0..10 {
        msetnx.push(format!("nx:{i}"));
        msetnx.push("v".into());
    }
    let msetnx: Vec<&str> = msetnx.iter().map(String::as_str).collect();
    assert_eq!(c.call(&msetnx), "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
    assert_eq!(int(&c.call(&["EXISTS", "nx:0", "nx:1", "nx:2"])), 0, "nothing written");
    // On one key (one master, wherever it is) it works as ever.
    assert_eq!(c.call(&["MSETNX", "nx:0", "a", "nx:0", "b"]), ":1\r\n");
    assert_eq!(c.call(&["MSETNX", "nx:0", "c"]), ":0\r\n");
    assert_eq!(other.call(&["GET", "nx:0"]), bulk("b"));

    // A malformed MSET gets Redis's error, not a split.
    assert_eq!(c.call(&["MSET", "a", "1", "b"]), "-ERR wrong number of arguments for 'mset' command\r\n");
}

#[test]
fn scan_dbsize_and_flushdb_cover_the_cluster() {
    let cluster = Cluster::start("scan", 3);
    let mut c = Client::connect(cluster.addr(0));
    let keys: HashSet<String> = (0..500).map(|i| format!("s:{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&["SET", k, "v"]), "+OK\r\n");
    }
    for i in 0..3 {
        let mut other = Client::connect(cluster.addr(i));
        assert_eq!(int(&other.call(&["DBSIZE"])), 500);
        let (seen, pages) = scan_all(&mut other, "37");
        assert_eq!(seen, keys, "a SCAN through server {i} returns every key once");
        assert!(pages >= 3, "one page per tablet at least: {pages}");
    }
    let (seen, _) = scan_all(&mut c, "100000");
    assert_eq!(seen, keys);
    // MATCH filters across servers.
    c.send(&[b"SCAN", b"0", b"MATCH", b"nothing*"]);
    let reply = c.read_reply();
    assert!(reply.ends_with("*0\r\n"), "{reply}");

    assert_eq!(c.call(&["FLUSHDB"]), "+OK\r\n");
    for i in 0..3 {
        let mut other = Client::connect(cluster.addr(i));
        assert_eq!(int(&other.call(&["DBSIZE"])), 0);
        assert_eq!(other.call(&["SCAN", "0"]).matches("\r\n").count(), 4, "no keys");
        assert_eq!(int(&cluster.local(i).call(&["DBSIZE"])), 0);
    }
}

#[test]
fn pipelines_mixing_local_and_forwarded_commands_stay_in_order() {
    let cluster = Cluster::start("pipeline", 3);
    let mut c = Client::connect(cluster.addr(0));
    let mut pipeline = Vec::new();
    let mut expected = String::new();
    for i in 0..200 {
        let k = format!("p:{i}");
        let v = format!("value-{i}");
        pipeline.extend(common::encode(&[b"SET", k.as_bytes(), v.as_bytes()]));
        expected.push_str("+OK\r\n");
        pipeline.extend(common::encode(&[b"GET", k.as_bytes()]));
        expected.push_str(&bulk(&v));
        pipeline.extend(common::encode(&[b"PING"]));
        expected.push_str("+PONG\r\n");
        if i % 10 == 9 {
            pipeline.extend(common::encode(&[b"MGET", format!("p:{}", i - 9).as_bytes(), k.as_bytes()]));
            expected.push_str(&format!("*2\r\n{}{}", bulk(&format!("value-{}", i - 9)), bulk(&v)));
            pipeline.extend(common::encode(&[b"DBSIZE"]));
            expected.push_str(&format!(":{}\r\n", i + 1));
        }
    }
    c.send_raw(&pipeline);
    let mut got = String::new();
    while got.len() < expected.len() {
        got.push_str(&c.read_reply());
    }
    assert_eq!(got, expected);

    // Another database, in RESP3: forwarded replies come in the client's protocol.
    let mut r3 = Client::connect(cluster.addr(1));
    assert!(r3.call(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(r3.call(&["SELECT", "5"]), "+OK\r\n");
    for i in 0..30 {
        assert_eq!(r3.call(&["SET", &format!("p:{i}"), "db5"]), "+OK\r\n");
    }
    assert_eq!(r3.call(&["GET", "p:3"]), bulk("db5"));
    assert_eq!(r3.call(&["MGET", "p:1", "p:100", "p:2"]), format!("*3\r\n{}_\r\n{}", bulk("db5"), bulk("db5")));
    assert_eq!(r3.call(&["GET", "p:100"]), "_\r\n");
    assert_eq!(int(&r3.call(&["DBSIZE"])), 30);
    // Database 0 is untouched.
    assert_eq!(c.call(&["GET", "p:3"]), bulk("value-3"));
    assert_eq!(int(&c.call(&["DBSIZE"])), 200);
    // An inline command is forwarded too.
    c.send_raw(b"GET p:7\r\n");
    assert_eq!(c.read_reply(), bulk("value-7"));
}

#[test]
fn replies_to_writes_wait_until_the_log_is_durable() {
    let cluster = Cluster::start("durable", 3);
    let mut c = Client::connect(cluster.addr(0));
    // Some keys on every master (SET through server 0, so two thirds forwarded).
    for round in 0..20 {
        let mut pipeline = Vec::new();
        for i in 0..10 {
            pipeline.extend(common::encode(&[b"SET", format!("d:{round}:{i}").as_bytes(), &[b'x'; 1000]]));
        }
        c.send_raw(&pipeline);
        for _ in 0..10 {
            assert_eq!(c.read_reply(), "+OK\r\n");
        }
        // Nothing else writes: whoever applied those writes has replicated
        // its log up to its end before answering.
        for i in 0..3 {
            let info = Client::connect(cluster.addr(i)).call(&["INFO", "replication"]);
            let field = |name: &str| -> u64 {
                let line = info.lines().find(|l| l.starts_with(&format!("{name}:"))).expect(name);
                line[name.len() + 1..].trim_end().parse().unwrap()
            };
            assert_eq!(field("master_repl_offset"), field("repl_durable_offset"), "server {i}: {info}");
        }
    }
    // Acknowledged writes are on every replica already: WAIT answers R at once.
    assert_eq!(c.call(&["WAIT", "2", "0"]), ":2\r\n");
    let info = Client::connect(cluster.addr(0)).call(&["INFO"]);
    for field in ["shoal_cluster:1", "server_id:", "map_version:", "repl_rounds:", "backup_buffers_in_use:"] {
        assert!(info.contains(field), "INFO has {field}: {info}");
    }
}

#[test]
fn forwarding_survives_pooled_connections_closed_by_the_other_server() {
    // Servers close connections idle for 1 s, pooled ones included.
    let cluster = Cluster::start_with("idle", 3, 1);
    let keys: Vec<String> = (0..30).map(|i| format!("i:{i}")).collect();
    for round in 0..2 {
        let mut c = Client::connect(cluster.addr(0));
        for k in &keys {
            assert_eq!(c.call(&["SET", k, &format!("{round}")]), "+OK\r\n");
            assert_eq!(c.call(&["GET", k]), bulk(&format!("{round}")));
        }
        std::thread::sleep(Duration::from_millis(2500));
    }
}

#[test]
fn redis_cli_works_against_any_server() {
    if !common::have_tool("redis-cli", &["--version"]) {
        return;
    }
    let cluster = Cluster::start("cli", 3);
    let cli = |i: usize, args: &[&str]| -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &cluster.addr(i).port().to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for i in 0..30 {
        assert_eq!(cli(i % 3, &["SET", &format!("cli:{i}"), &i.to_string()]), "OK");
    }
    for i in 0..30 {
        assert_eq!(cli((i + 1) % 3, &["GET", &format!("cli:{i}")]), i.to_string());
    }
    assert_eq!(cli(2, &["DBSIZE"]), "30");
    let scanned = cli(1, &["--scan"]);
    let seen: HashSet<&str> = scanned.lines().collect();
    assert_eq!(seen.len(), 30, "{scanned}");
    assert_eq!(scanned.lines().count(), 30, "no key twice");
}

/// Keys named `prefix:N` mastered by server `i`, found by writing them
/// through server 0 and asking each server's local-only connection.
fn keys_on(cluster: &Cluster, prefix: &str, i: usize, n: usize) -> Vec<String> {
    let mut c = Client::connect(cluster.addr(0));
    let mut local = cluster.local(i);
    let mut found = Vec::new();
    for j in 0..1000 {
        let k = format!("{prefix}:{j}");
        assert_eq!(c.call(&["SET", &k, "0"]), "+OK\r\n");
        if local.call(&["EXISTS", &k]) == ":1\r\n" {
            found.push(k);
            if found.len() == n {
                return found;
            }
        }
    }
    panic!("fewer than {n} of 1000 keys on server {i}");
}

#[test]
fn transactions_run_on_the_master_of_their_keys() {
    let cluster = Cluster::start("txn", 3);
    let here = keys_on(&cluster, "h", 0, 1);
    let there = keys_on(&cluster, "t", 1, 3);
    let far = keys_on(&cluster, "f", 2, 1);
    let mut c = Client::connect(cluster.addr(0));
    let mut other = Client::connect(cluster.addr(2));

    // All keys on server 1: the whole transaction runs there.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    for cmd in
        [&["SET", &there[0], "x"][..], &["INCR", &there[1]], &["GET", &there[0]], &["MGET", &there[0], &there[1]]]
    {
        assert_eq!(c.call(cmd), "+QUEUED\r\n");
    }
    assert_eq!(c.call(&["EXEC"]), format!("*4\r\n+OK\r\n:1\r\n{}*2\r\n{}{}", bulk("x"), bulk("x"), bulk("1")));
    assert_eq!(cluster.local(1).call(&["GET", &there[1]]), bulk("1"));

    // Keys on two masters: CROSSSLOT, nothing applied.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", &here[0], "cross"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["SET", &there[0], "cross"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
    assert_eq!(c.call(&["MGET", &here[0], &there[0]]), format!("*2\r\n{}{}", bulk("0"), bulk("x")));
    assert_eq!(c.call(&["EXEC"]), "-ERR EXEC without MULTI\r\n", "the transaction was discarded");

    // WATCH of a key on another master: another client's change (through a
    // third server) aborts, no change applies.
    assert_eq!(c.call(&["WATCH", &there[2]]), "+OK\r\n");
    assert_eq!(other.call(&["INCR", &there[2]]), ":1\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", &there[0], "watched"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*-1\r\n");
    assert_eq!(c.call(&["GET", &there[0]]), bulk("x"));
    assert_eq!(c.call(&["WATCH", &there[2], &far[0]]), "+OK\r\n", "WATCH may span masters");
    assert_eq!(c.call(&["UNWATCH"]), "+OK\r\n");
    assert_eq!(c.call(&["WATCH", &there[2]]), "+OK\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", &there[0], "watched"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*1\r\n+OK\r\n");
    assert_eq!(other.call(&["GET", &there[0]]), bulk("watched"));
    // Watched on one master, written on another: refused.
    assert_eq!(c.call(&["WATCH", &far[0]]), "+OK\r\n");
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", &there[0], "no"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "-CROSSSLOT Keys in request don't hash to the same slot\r\n");

    // SELECT inside a forwarded transaction: the client ends in database 3,
    // the pooled connection of the other server stays in database 0.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", &there[0], "db0"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["SELECT", "3"]), "+QUEUED\r\n");
    assert_eq!(c.call(&["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
    assert_eq!(c.call(&["GET", &there[0]]), "$-1\r\n", "now in database 3");
    assert_eq!(c.call(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", &there[0]]), bulk("db0"));
    assert_eq!(other.call(&["GET", &there[0]]), bulk("db0"));
    // A queueing error aborts a forwarded transaction too.
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.call(&["SET", &there[0], "never"]), "+QUEUED\r\n");
    assert!(c.call(&["NOSUCH"]).starts_with("-ERR unknown command"));
    assert_eq!(c.call(&["EXEC"]), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(other.call(&["GET", &there[0]]), bulk("db0"));
}

/// A raw memcached exchange: sends `req` then `mn`, returns what came before MN.
fn mc_call(stream: &mut std::net::TcpStream, req: &str) -> String {
    use std::io::{Read, Write};
    stream.write_all(format!("{req}mn\r\n").as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    while !got.ends_with(b"MN\r\n") {
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    got.truncate(got.len() - 4);
    String::from_utf8(got).unwrap()
}

fn mc_connect(server: &Server) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(server.addresses().memcached.expect("memcached port")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s
}

/// The memcached port in a cluster: keys written through one server's port
/// are read, counted, touched and deleted through the others' (forwarded
/// to their masters as SHOAL.MC), each stored on one master, and a
/// multi-key get over several masters answers in key order.
#[test]
fn memcached_port_serves_any_key_in_a_cluster() {
    let cluster = Cluster::start("memcached", 3);
    let mut m0 = mc_connect(&cluster.servers[0]);
    let keys: Vec<String> = (0..120).map(|i| format!("mk{i}")).collect();
    let mut batch = String::new();
    for (i, k) in keys.iter().enumerate() {
        batch += &format!("set {k} {i} 0 {}\r\nv-{k}\r\n", k.len() + 2);
    }
    assert_eq!(mc_call(&mut m0, &batch), "STORED\r\n".repeat(keys.len()));
    let mut per_server = [0; 3];
    let mut locals: Vec<Client> = (0..3).map(|i| cluster.local(i)).collect();
    for k in &keys {
        let holders: Vec<usize> = (0..3).filter(|&i| locals[i].call(&["EXISTS", k]) == ":1\r\n").collect();
        assert_eq!(holders.len(), 1, "{k} on {holders:?}");
        per_server[holders[0]] += 1;
    }
    assert!(per_server.iter().all(|&n| n > 10), "keys spread over the masters: {per_server:?}");
    for i in 1..3 {
        let mut m = mc_connect(&cluster.servers[i]);
        for (j, k) in keys.iter().enumerate() {
            let v = format!("v-{k}");
            assert_eq!(
                mc_call(&mut m, &format!("get {k}\r\n")),
                format!("VALUE {k} {j} {}\r\n{v}\r\nEND\r\n", v.len())
            );
        }
        // One get over every master: the hits in key order.
        let all = keys[..20].join(" ");
        let expected: String = keys[..20]
            .iter()
            .enumerate()
            .map(|(j, k)| format!("VALUE {k} {j} {}\r\nv-{k}\r\nEND\r\n", k.len() + 2))
            .collect::<String>()
            .replace("END\r\n", "")
            + "END\r\n";
        assert_eq!(mc_call(&mut m, &format!("get {all} nokey\r\n")), expected);
    }
    // Counters, cas, touch, delete and meta commands on remote keys.
    let mut m2 = mc_connect(&cluster.servers[2]);
    assert_eq!(mc_call(&mut m2, "incr ctr 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(mc_call(&mut m0, "set ctr 0 0 1\r\n0\r\n"), "STORED\r\n");
    for i in 1..=10 {
        assert_eq!(mc_call(&mut m2, "incr ctr 1\r\n"), format!("{i}\r\n"));
    }
    let gets = mc_call(&mut m0, "gets ctr\r\n");
    let cas = gets.split_whitespace().nth(4).unwrap().to_string();
    assert_eq!(
        mc_call(&mut m2, &format!("cas ctr 0 0 2 {cas}\r\n20\r\ncas ctr 0 0 2 {cas}\r\n30\r\n")),
        "STORED\r\nEXISTS\r\n"
    );
    assert_eq!(mc_call(&mut m2, "touch mk7 100\r\nmg mk7 t v\r\n"), "TOUCHED\r\nVA 5 t100\r\nv-mk7\r\n");
    assert_eq!(mc_call(&mut m0, "set q 0 0 1 noreply\r\nx\r\ndelete mk7\r\nmg mk7 v\r\n"), "DELETED\r\nEN\r\n");
    assert_eq!(mc_call(&mut m2, "flush_all\r\nget mk1 mk2 mk3 q\r\n"), "OK\r\nEND\r\n");
    for l in &mut locals {
        assert_eq!(int(&l.call(&["DBSIZE"])), 0, "flush_all reached every server");
    }
}

#[test]
fn stream_commands_are_refused_in_a_cluster_and_apply_nothing() {
    // docs/streams.md, "Redis streams on the RESP port": standalone only for now.
    let cluster = Cluster::start("xstreams", 3);
    let refused = "-ERR Redis stream commands are not supported by a Shoal cluster yet, only by a standalone \
                   server (docs/streams.md)\r\n";
    for server in 0..3 {
        let mut c = Client::connect(cluster.addr(server));
        for key in ["s", "t", "u", "v"] {
            assert_eq!(c.call(&["XADD", key, "*", "f", "v"]), refused, "server {server} key {key}");
            assert_eq!(c.call(&["XLEN", key]), refused);
            assert_eq!(c.call(&["XREAD", "BLOCK", "10", "STREAMS", key, "$"]), refused);
            assert_eq!(c.call(&["EXISTS", key]), ":0\r\n");
            assert_eq!(c.call(&["TYPE", key]), "+none\r\n");
        }
    }
    for server in 0..3 {
        let ctx = cluster.servers[server].context();
        assert!(ctx.tables.names_with_prefix("redis.").is_empty(), "no stream was created");
    }
}
