//! Redis Cluster mode (`--cluster-mode`, docs/redis-cluster.md): a cluster
//! of three servers that cluster-aware clients drive directly.
//!
//! * CLUSTER SLOTS, SHARDS, NODES and INFO describe one slot map that
//!   covers all 16,384 slots with the three servers' Redis addresses.
//! * Every key is answered by the master its slot names; any other server
//!   answers `-MOVED slot host:port` to that master, and nothing is
//!   forwarded (the `forwarded_requests` counter stays 0).
//! * Multi-key commands and transactions across slots get CROSSSLOT and
//!   apply nothing; a transaction with a key of another master applies
//!   nothing (EXECABORT).
//! * `redis-cli -c` and redis-py's `RedisCluster` follow the map: every key
//!   lands on its master without forwarding.

mod common;

use common::cluster::Cluster;
use common::{have_tool, Client};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

fn start(name: &str) -> Cluster {
    Cluster::start_configured(name, 3, None, |c| c.cluster_mode = true)
}

/// The integers and strings of a RESP2 reply, in order (a flat parse).
fn tokens(reply: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = reply.split("\r\n");
    while let Some(line) = lines.next() {
        match line.as_bytes().first() {
            Some(b':') => out.push(line[1..].to_string()),
            Some(b'$') if line != "$-1" => out.push(lines.next().unwrap_or_default().to_string()),
            _ => {}
        }
    }
    out
}

/// CLUSTER SLOTS as (first, last, address) ranges.
fn slot_map(c: &mut Client) -> Vec<(u16, u16, SocketAddr)> {
    let reply = c.call(&["CLUSTER", "SLOTS"]);
    let t = tokens(&reply);
    assert_eq!(t.len() % 5, 0, "{reply}");
    t.chunks(5)
        .map(|x| {
            let addr: SocketAddr = format!("{}:{}", x[2], x[3]).parse().unwrap();
            assert_eq!(x[4].len(), 40, "a node id is 40 hex digits: {reply}");
            (x[0].parse().unwrap(), x[1].parse().unwrap(), addr)
        })
        .collect()
}

fn owner_of(map: &[(u16, u16, SocketAddr)], slot: u16) -> SocketAddr {
    map.iter().find(|(a, b, _)| *a <= slot && slot <= *b).map(|x| x.2).expect("every slot has a master")
}

fn stat(c: &mut Client, name: &str) -> u64 {
    let info = c.call(&["INFO", "stats"]);
    let line = info.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("{info}"));
    line[name.len() + 1..].trim().parse().unwrap()
}

fn forwarded(cluster: &Cluster) -> u64 {
    (0..3).map(|i| stat(&mut cluster.client_to(cluster.addr(i)), "forwarded_requests")).sum()
}

#[test]
fn the_slot_map_covers_every_slot_and_each_key_is_served_only_by_its_master() {
    let cluster = start("slots");
    let mut c = cluster.client_to(cluster.addr(0));
    let map = slot_map(&mut c);
    // Whole, in order, over the three servers.
    assert_eq!(map[0].0, 0);
    assert_eq!(map.last().unwrap().1, 16383);
    for w in map.windows(2) {
        assert_eq!(w[0].1 + 1, w[1].0);
    }
    let addrs: Vec<SocketAddr> = (0..3).map(|i| cluster.addr(i)).collect();
    for (_, _, a) in &map {
        assert!(addrs.contains(a), "{a} is not a server's Redis address");
    }
    for a in &addrs {
        assert!(map.iter().any(|x| x.2 == *a), "{a} serves no slots");
    }
    // Every server tells the same map.
    for i in 1..3 {
        assert_eq!(slot_map(&mut cluster.client_to(cluster.addr(i))), map);
    }

    let mut clients: HashMap<SocketAddr, Client> = addrs.iter().map(|a| (*a, cluster.client_to(*a))).collect();
    for i in 0..150 {
        let key = format!("key:{i}");
        let slot: u16 = c.call(&["CLUSTER", "KEYSLOT", &key])[1..].trim().parse().unwrap();
        let master = owner_of(&map, slot);
        for a in &addrs {
            let reply = clients.get_mut(a).unwrap().call(&["SET", &key, &i.to_string()]);
            if *a == master {
                assert_eq!(reply, "+OK\r\n");
            } else {
                assert_eq!(reply, format!("-MOVED {slot} {master}\r\n"));
            }
        }
        let got = clients.get_mut(&master).unwrap().call(&["GET", &key]);
        assert_eq!(got, format!("${}\r\n{i}\r\n", i.to_string().len()));
    }
    // Each server counts only its own keys.
    let total: i64 =
        addrs.iter().map(|a| clients.get_mut(a).unwrap().call(&["DBSIZE"])[1..].trim().parse::<i64>().unwrap()).sum();
    assert_eq!(total, 150);
    assert_eq!(forwarded(&cluster), 0, "nothing was forwarded");

    // The other views agree with SLOTS.
    let nodes = c.call(&["CLUSTER", "NODES"]);
    assert_eq!(nodes.matches("master").count(), 3, "{nodes}");
    assert_eq!(nodes.matches("myself").count(), 1, "{nodes}");
    for a in &addrs {
        assert!(nodes.contains(&format!(" {a}@")), "{nodes}");
    }
    let info = c.call(&["CLUSTER", "INFO"]);
    for line in ["cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384", "cluster_known_nodes:3"]
    {
        assert!(info.contains(&format!("{line}\r\n")), "{info}");
    }
    let shards = c.call(&["CLUSTER", "SHARDS"]);
    assert_eq!(shards.matches("online").count(), 3, "{shards}");
    let myid = tokens(&c.call(&["CLUSTER", "MYID"]));
    assert!(nodes.lines().any(|l| l.starts_with(&myid[0]) && l.contains("myself")), "{nodes}");
    assert!(c.call(&["INFO", "cluster"]).contains("cluster_enabled:1"));
    assert_eq!(c.call(&["READONLY"]), "+OK\r\n");
    assert_eq!(c.call(&["READWRITE"]), "+OK\r\n");
    assert_eq!(c.call(&["SELECT", "1"]), "-ERR SELECT is not allowed in cluster mode\r\n");
    assert_eq!(c.call(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c.call(&["CLUSTER", "NOPE"]), "-ERR unknown subcommand 'NOPE'. Try CLUSTER HELP.\r\n");
    assert_eq!(c.call(&["CLUSTER", "KEYSLOT"]), "-ERR wrong number of arguments for 'cluster|keyslot' command\r\n");
}

#[test]
fn keys_of_several_slots_are_refused_and_nothing_is_applied() {
    let cluster = start("crossslot");
    let mut c = cluster.client_to(cluster.addr(0));
    let map = slot_map(&mut c);
    // "{u}:a" and "{u}:b" share slot of "u"; "a" and "b" do not.
    let slot: u16 = c.call(&["CLUSTER", "KEYSLOT", "u"])[1..].trim().parse().unwrap();
    let mut m = cluster.client_to(owner_of(&map, slot));
    assert_eq!(m.call(&["MSET", "{u}:a", "1", "{u}:b", "2"]), "+OK\r\n");
    assert_eq!(m.call(&["MGET", "{u}:a", "{u}:b"]), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    let crossslot = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    assert_eq!(m.call(&["MSET", "{u}:a", "3", "a", "3"]), crossslot);
    assert_eq!(m.call(&["DEL", "{u}:a", "b"]), crossslot);
    assert_eq!(m.call(&["MGET", "{u}:a", "{u}:b"]), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n", "nothing applied");
    // RENAME and COPY within a slot run; across slots they are refused.
    assert_eq!(m.call(&["COPY", "{u}:a", "{u}:c"]), ":1\r\n");
    assert_eq!(m.call(&["RENAME", "{u}:c", "{u}:d"]), "+OK\r\n");
    assert_eq!(m.call(&["RENAME", "{u}:d", "d"]), crossslot);
    assert_eq!(m.call(&["COPY", "{u}:d", "x", "DB", "1"]), crossslot);
    assert_eq!(m.call(&["GET", "{u}:d"]), "$1\r\n1\r\n");
    assert_eq!(m.call(&["DEL", "{u}:d"]), ":1\r\n");

    // A transaction across slots: the second slot's command is refused
    // when queued and EXEC applies nothing.
    assert_eq!(m.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(m.call(&["INCR", "{u}:a"]), "+QUEUED\r\n");
    let other = (0..100).map(|i| format!("o:{i}")).find(|k| {
        let s: u16 = c.call(&["CLUSTER", "KEYSLOT", k])[1..].trim().parse().unwrap();
        s != slot && owner_of(&map, s) == owner_of(&map, slot)
    });
    let other = other.expect("another slot of the same master");
    assert_eq!(m.call(&["INCR", &other]), crossslot);
    assert_eq!(m.call(&["EXEC"]), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(m.call(&["GET", "{u}:a"]), "$1\r\n1\r\n", "nothing applied");

    // A transaction naming a key of another master: MOVED when queued,
    // EXECABORT, nothing applied.
    let elsewhere = (0..100)
        .map(|i| format!("e:{i}"))
        .find(|k| {
            let s: u16 = c.call(&["CLUSTER", "KEYSLOT", k])[1..].trim().parse().unwrap();
            owner_of(&map, s) != owner_of(&map, slot)
        })
        .expect("a key of another master");
    assert_eq!(m.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(m.call(&["INCR", "{u}:a"]), "+QUEUED\r\n");
    assert!(m.call(&["SET", &elsewhere, "x"]).starts_with("-MOVED "));
    assert_eq!(m.call(&["EXEC"]), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(m.call(&["GET", "{u}:a"]), "$1\r\n1\r\n", "nothing applied");
    // Same slot: runs.
    assert_eq!(m.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(m.call(&["INCR", "{u}:a"]), "+QUEUED\r\n");
    assert_eq!(m.call(&["INCR", "{u}:b"]), "+QUEUED\r\n");
    assert_eq!(m.call(&["EXEC"]), "*2\r\n:2\r\n:3\r\n");
    assert_eq!(forwarded(&cluster), 0);
}

fn run_bounded(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let guard = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if flag.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Release);
    let _ = guard.join();
    out
}

#[test]
fn redis_cli_in_cluster_mode_follows_moved_without_forwarding() {
    if !have_tool("redis-cli", &["--version"]) {
        return;
    }
    let cluster = start("cli");
    let cli = |i: usize, args: &[&str]| -> String {
        let out = run_bounded(
            Command::new("redis-cli")
                .args(["-c", "-h", "127.0.0.1", "-p", &cluster.addr(i).port().to_string()])
                .args(args),
            Duration::from_secs(20),
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for i in 0..30 {
        assert_eq!(cli(i % 3, &["SET", &format!("cli:{i}"), &i.to_string()]), "OK");
    }
    for i in 0..30 {
        assert_eq!(cli((i + 1) % 3, &["GET", &format!("cli:{i}")]), i.to_string());
    }
    assert_eq!(forwarded(&cluster), 0, "redis-cli -c went to each key's master");
    let moved: u64 = (0..3).map(|i| stat(&mut cluster.client_to(cluster.addr(i)), "moved_replies")).sum();
    assert!(moved > 0, "some requests went to the wrong server first");
}

#[test]
fn redis_py_cluster_client_sends_every_key_to_its_master() {
    if !have_tool("python3", &["-c", "import redis"]) {
        return;
    }
    let cluster = start("py");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis_cluster_client.py");
    let out = run_bounded(
        Command::new("python3").args([script, "--port", &cluster.addr(1).port().to_string(), "--keys", "500"]),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("redis-py RedisCluster: 500 keys"), "{stdout}");
    assert_eq!(forwarded(&cluster), 0, "RedisCluster sent each key to its master: {stdout}");
}
