//! Chunk locks across processes (`docs/chunks.md`, "Locks"): a `shoal
//! chunk lock --hold-ms 0` process holding a lock is SIGKILLed and another
//! client gets the lock once its lease runs out; and a chunk table's master
//! holding locks is SIGKILLed: the recovery master has released them (the
//! holders learn it, their fenced writes are refused) and grants them
//! again only after the longest lease has passed, with greater tokens.

mod common;

use common::*;
use shoal_client::{ChunkId, LockError, LockMode, TableId};
use shoal_cluster::{ClusterMap, ServerState};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A standalone `shoal server` process on a free port, killed on drop.
struct Standalone {
    child: Child,
    addr: String,
    _root: Root,
}

impl Standalone {
    fn start(name: &str, extra: &[&str]) -> Standalone {
        let root = Root::new(name);
        let port = free_port();
        let child = Command::new(SHOAL)
            .args(["server", "--native-port", &port.to_string(), "--resp-port", "0", "--no-memcached"])
            .args(["--memory", "64MiB", "--log-level", "warn"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log_file(&root.0))
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while shoal_client::blocking::Client::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "server did not start; log under {}", root.0.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Standalone { child, addr, _root: root }
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The owner and token a `shoal chunk lock` line prints.
fn parse_lock_line(line: &str) -> (u64, u64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |w: &str| words[words.iter().position(|x| *x == w).unwrap() + 1].parse::<u64>().unwrap();
    (after("owner"), after("token"))
}

fn cli(server: &str, args: &[&str]) -> std::process::Output {
    Command::new(SHOAL).args(["chunk"]).args(args).args(["--server", server]).output().unwrap()
}

#[test]
fn a_sigkilled_lock_holder_loses_its_lock_when_the_lease_runs_out() {
    let server = Standalone::start("locks-holder-killed", &["--chunk-lock-max-lease-ms", "5000"]);
    let mut c = shoal_client::blocking::Client::connect(&server.addr).unwrap();
    let table = c.create_chunk_table("g").unwrap();
    let id = c.create_chunk(table, b"v").unwrap();
    let id_arg = id.to_string();

    // A holder process: locks with a 2 s lease and renews it (every third
    // of it) until killed.
    let mut holder = Command::new(SHOAL)
        .args(["chunk", "lock", "g", &id_arg, "--lease-ms", "2000", "--hold-ms", "0", "--server", &server.addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("locked"), "holder printed {line:?}");
    let (owner, token) = parse_lock_line(&line);

    // Held well past its 2 s lease while the holder lives (it renews).
    let until = Instant::now() + Duration::from_millis(4000);
    while Instant::now() < until {
        assert!(
            matches!(
                c.try_lock_chunk(table, id, LockMode::Shared, Duration::from_secs(1)),
                Err(LockError::Busy { .. })
            ),
            "the live holder's lock was granted to another"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Another process cannot take it either (`trylock` exits 1, busy).
    let out = cli(&server.addr, &["trylock", "g", &id_arg]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"), "{out:?}");

    // SIGKILL the holder: no unlock is ever sent.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let killed = Instant::now();
    let got = c.lock_chunk(table, id, LockMode::Exclusive, Duration::from_secs(5), Duration::from_secs(10)).unwrap();
    let waited = killed.elapsed();
    // The last renewal was about a third of the lease before the kill (at
    // most: 667 ms, plus the time a busy machine delays it).
    assert!(waited >= Duration::from_millis(800), "granted {waited:?} after the kill: before the lease ran out");
    assert!(waited < Duration::from_secs(6), "granted only {waited:?} after the kill");
    eprintln!("lock granted {waited:?} after the holder was killed (lease 2 s)");
    assert!(got.token > token, "tokens grow: {} then {}", token, got.token);
    let stats = c.stats().unwrap();
    assert!(stat(&stats, "chunk_lock_lease_expiries").unwrap() >= 1);

    // The dead holder's owner and token are refused, with a clear error.
    let out =
        cli(&server.addr, &["unlock", "g", &id_arg, "--owner", &owner.to_string(), "--token", &token.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("lock lost"), "{out:?}");
    c.unlock_chunk(&got).unwrap();
}

fn wait_map(cluster: &Cluster, what: &str, secs: u64, f: impl Fn(&ClusterMap) -> bool) -> ClusterMap {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(m) = cluster.map() {
            if f(&m) {
                return m;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; logs under {}", cluster.root.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn chunk_master(map: &ClusterMap, table: TableId, id: ChunkId) -> shoal_cluster::ServerId {
    map.chunk_owner(table, id).expect("the chunk's id range").master
}

#[test]
fn a_killed_chunk_master_releases_its_locks_safely() {
    const MAX_LEASE_MS: u64 = 2000;
    let root = Root::new("locks-kill-master");
    let lease_flag = MAX_LEASE_MS.to_string();
    let mut cluster = Cluster::start_with(&root.0, 4, 2, 0, &["--chunk-lock-max-lease-ms", &lease_flag]);
    let mut a = cluster.client();
    let mut b = cluster.client();
    let table = a.create_chunk_table("graph").unwrap();
    let map = wait_map(&cluster, "the chunk ranges", 10, |m| m.chunk_creators(table).count() == 4);
    let id: ChunkId = a.create_chunk(table, b"v0").unwrap();
    // The server that created the chunk serves it (its own id range).
    let victim = chunk_master(&map, table, id);
    assert_eq!(id.node() as u64, victim.0);

    // A holds the chunk and writes under its lock.
    let lease = Duration::from_millis(MAX_LEASE_MS);
    let la = a.try_lock_chunk(table, id, LockMode::Exclusive, lease).unwrap();
    a.put_chunk_locked(&la, b"a1").unwrap();
    assert!(matches!(b.try_lock_chunk(table, id, LockMode::Exclusive, lease), Err(LockError::Busy { .. })));

    // SIGKILL the chunk master and wait for its recovery.
    let idx = (0..cluster.servers.len())
        .find(|i| {
            std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id")))
                .is_ok_and(|s| s.trim() == victim.0.to_string())
        })
        .unwrap();
    cluster.servers[idx].kill().unwrap();
    cluster.servers[idx].wait().unwrap();
    wait_map(&cluster, "the recovery", 40, |m| {
        m.server(victim).is_some_and(|s| s.state == ServerState::Down)
            && m.recoveries.is_empty()
            && m.tablets.iter().all(|t| t.master != victim)
            && m.chunk_ranges.iter().all(|c| c.master != victim)
    });

    // The recovery master holds no lock of A's: B is refused only for the
    // grace (the old master's leases may still run), then granted.
    let first_try = Instant::now();
    assert!(matches!(b.try_lock_chunk(table, id, LockMode::Exclusive, lease), Err(LockError::Busy { .. })));
    // A learns that its lock is gone; its fenced write is refused.
    assert!(matches!(a.renew_chunk_lock(&la), Err(LockError::Lost)));
    assert!(matches!(a.put_chunk_locked(&la, b"a2"), Err(LockError::Lost)));
    let lb = b.lock_chunk(table, id, LockMode::Exclusive, lease, Duration::from_secs(15)).unwrap();
    let waited = first_try.elapsed();
    assert!(
        waited >= Duration::from_millis(MAX_LEASE_MS - 100),
        "granted {waited:?} after the recovery: within the longest lease the old master could have granted"
    );
    assert!(lb.token > la.token, "the recovery master's tokens are greater: {} then {}", la.token, lb.token);
    eprintln!("lock granted {waited:?} after the first request to the recovery master (grace {MAX_LEASE_MS} ms)");
    // A's acknowledged fenced write survived the crash; B writes under its lock.
    assert_eq!(b.get_chunk(table, id).unwrap().0, b"a1".to_vec());
    b.put_chunk_locked(&lb, b"b1").unwrap();
    assert!(matches!(a.unlock_chunk(&la), Err(LockError::Lost)));
    b.unlock_chunk(&lb).unwrap();
    // Chunks the recovery master creates are locked at once.
    let fresh = b.create_chunk(table, b"new").unwrap();
    b.try_lock_chunk(table, fresh, LockMode::Exclusive, lease).unwrap();
    cluster.kill_all();
}
