//! Crash recovery on a real cluster (see `common`): servers killed with
//! SIGKILL (or stopped with SIGSTOP) under a write load from several
//! clients. Each test keeps a ledger of acknowledged writes and checks
//! every one against what the cluster returns at the end.

mod common;

use common::*;
use shoal_client::blocking::Client;
use shoal_client::{ClientConfig, Connection, Request, Response, TableId};
use shoal_cluster::{ClusterMap, ServerId, ServerState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The index (in `cluster.servers`) of the process of server `id`.
fn process_of(root: &std::path::Path, cluster: &Cluster, id: ServerId) -> usize {
    (0..cluster.servers.len())
        .find(|i| {
            std::fs::read_to_string(root.join(format!("server-{i}/data/server-id")))
                .is_ok_and(|s| s.trim() == id.0.to_string())
        })
        .expect("a process for the server")
}

/// SIGKILLs server process `idx` and reaps it (it stays in the list).
fn kill(cluster: &mut Cluster, idx: usize) {
    let p = &mut cluster.servers[idx];
    p.kill().unwrap();
    p.wait().unwrap();
}

/// Waits until `f(map)` holds; returns that map.
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

/// A table's map once its tablets exist.
fn table_map(cluster: &Cluster, table: TableId) -> ClusterMap {
    wait_map(cluster, "the table's tablets", 10, |m| m.tablets.iter().any(|t| t.table == table))
}

fn owner(map: &ClusterMap, table: TableId, key: &[u8]) -> ServerId {
    map.tablet(table, shoal_client::key_hash(table, key)).expect("a tablet").master
}

/// The server owning the most tablets of `table` (the one to kill).
fn busiest(map: &ClusterMap, table: TableId) -> ServerId {
    let mut best = (0, ServerId(0));
    for s in &map.servers {
        let n = map.tablets.iter().filter(|t| t.table == table && t.master == s.id).count();
        if n > best.0 {
            best = (n, s.id);
        }
    }
    best.1
}

/// The server owning the most tablets of `table` (the one to kill) and
/// `n` keys it masters: `prefix` followed by a number.
fn keys_of_busiest(cluster: &Cluster, table: TableId, prefix: &str, n: usize) -> (ServerId, Vec<Vec<u8>>) {
    let map = table_map(cluster, table);
    let victim = busiest(&map, table);
    let keys = (0..100 * n)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .filter(|k| owner(&map, table, k) == victim)
        .take(n)
        .collect();
    (victim, keys)
}

fn recovered(map: &ClusterMap, dead: ServerId) -> bool {
    map.server(dead).is_some_and(|s| s.state == ServerState::Down)
        && map.recoveries.is_empty()
        && map.tablets.iter().all(|t| t.master != dead)
}

/// Waits until the process of `cluster.servers[idx]` has exited (a zombie
/// stops on its own once it learns it was declared dead).
fn wait_exit(cluster: &mut Cluster, idx: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !matches!(cluster.servers[idx].try_wait(), Ok(Some(_))) {
        assert!(Instant::now() < deadline, "the zombie did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_killed_master_is_recovered_and_no_acknowledged_write_is_lost() {
    let root = Root::new("recovery-kill-master");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("ledger").unwrap();
    let map = table_map(&cluster, table);
    let victim = busiest(&map, table);
    let old_key = (0..10_000).map(|i| format!("v{i}").into_bytes()).find(|k| owner(&map, table, k) == victim).unwrap();
    let load = WriteLoad::start(cluster.coordinator, table, 3, |t, n| Some(format!("t{t}-k{}", n % 2000).into_bytes()));
    std::thread::sleep(Duration::from_secs(2));
    let idx = process_of(&root.0, &cluster, victim);
    let before = load.acks();
    let killed = Instant::now();
    kill(&mut cluster, idx);
    // Writes to the dead master's keys come back once its tablets are recovered.
    wait_map(&cluster, "the recovery", 30, |m| recovered(m, victim));
    let recovered_in = killed.elapsed();
    let mut c = cluster.client();
    let first_write = Instant::now();
    // A key that was the victim's: served by a recovery master now.
    c.write(table, &old_key, b"after").unwrap();
    let write_after = first_write.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let (ledger, after) = load.finish();
    assert!(after > before + 100, "writes did not go on: {before} then {after}");
    eprintln!("recovered in {recovered_in:?}; a write after it took {write_after:?}");
    assert!(recovered_in < Duration::from_secs(20), "recovery took {recovered_in:?}");
    let mut ledger = ledger;
    ledger.insert(old_key, b"after".to_vec());
    check_ledger(&mut c, table, &ledger);
    cluster.kill_all();
}

/// A master whose log never reached a backup (R = 1 and no other server)
/// holds no lease, so it acknowledges nothing. Killed, it is recovered as
/// empty as soon as servers come, instead of its recovery waiting for ever
/// for backups that never held its log (`docs/recovery.md`, "A log that
/// never reached a backup"). Servers whose heads reached a backup are
/// reported, get leases and serve.
#[test]
fn a_master_killed_before_its_log_reached_a_backup_is_recovered_as_empty() {
    let root = Root::new("recovery-unreplicated-log");
    let mut cluster = Cluster::start(&root.0, 1, 1, 0);
    let map = cluster.map().unwrap();
    let lonely = map.servers[0].clone();
    assert!(!map.head_replicated(lonely.log), "server {} has no backup, yet its head was reported", lonely.id);
    let table = cluster.client().create_table("early").unwrap();
    assert!(table_map(&cluster, table).tablets.iter().all(|t| t.master == lonely.id));
    // It serves nothing: no lease while its log is on no backup.
    let mut raw = Connection::connect(lonely.native, &cluster.client_config()).unwrap();
    raw.send(&Request::Write { table, key: b"k", value: b"v", rules: Default::default() }).unwrap();
    let answer = raw.recv();
    assert!(
        !matches!(answer.as_ref().map(|f| f.reply()), Ok(Ok(Ok(Response::Write { .. })))),
        "a master with no replicated head acknowledged a write"
    );
    kill(&mut cluster, 0);
    for i in 1..3 {
        let s = cluster.spawn_server(i);
        cluster.servers.push(s);
    }
    let started = Instant::now();
    let map = wait_map(&cluster, "the empty recovery", 60, |m| recovered(m, lonely.id));
    eprintln!("recovered as empty in {:?}", started.elapsed());
    for s in map.servers.iter().filter(|s| s.state == ServerState::Up) {
        assert!(map.head_replicated(s.log), "server {}'s head was never reported: {map:?}", s.id);
    }
    let mut c = cluster.client();
    assert_eq!(c.read(table, b"k").ok(), None, "an unacknowledged write came back");
    c.write(table, b"k", b"after").unwrap();
    assert_eq!(c.read(table, b"k").unwrap().0, b"after");
}

#[test]
fn two_masters_killed_one_during_the_others_recovery() {
    let root = Root::new("recovery-two");
    let mut cluster = Cluster::start(&root.0, 5, 2, 0);
    let table = cluster.client().create_table("ledger").unwrap();
    let map = table_map(&cluster, table);
    let first = busiest(&map, table);
    let load = WriteLoad::start(cluster.coordinator, table, 3, |t, n| Some(format!("t{t}-k{}", n % 2000).into_bytes()));
    std::thread::sleep(Duration::from_secs(2));
    let idx = process_of(&root.0, &cluster, first);
    kill(&mut cluster, idx);
    // As soon as the first recovery is planned, kill one of its recovery masters.
    let during = wait_map(&cluster, "the first recovery", 20, |m| !m.recoveries.is_empty());
    let second = during.recoveries[0].partitions[0].master;
    let idx = process_of(&root.0, &cluster, second);
    kill(&mut cluster, idx);
    wait_map(&cluster, "both recoveries", 40, |m| recovered(m, first) && recovered(m, second));
    std::thread::sleep(Duration::from_secs(1));
    let (ledger, _) = load.finish();
    assert!(ledger.len() > 500, "only {} keys written", ledger.len());
    check_ledger(&mut cluster.client(), table, &ledger);
    cluster.kill_all();
}

#[test]
fn a_master_and_one_of_its_backups_killed_at_once_with_three_replicas() {
    let root = Root::new("recovery-master-and-backup");
    // Six servers: after two are gone, each master still has three others for R=3.
    let mut cluster = Cluster::start(&root.0, 6, 3, 0);
    let table = cluster.client().create_table("ledger").unwrap();
    let map = table_map(&cluster, table);
    let master = busiest(&map, table);
    let other = map.servers.iter().map(|s| s.id).find(|&id| id != master).unwrap();
    let load = WriteLoad::start(cluster.coordinator, table, 3, |t, n| Some(format!("t{t}-k{}", n % 2000).into_bytes()));
    std::thread::sleep(Duration::from_secs(2));
    for id in [master, other] {
        let idx = process_of(&root.0, &cluster, id);
        kill(&mut cluster, idx);
    }
    wait_map(&cluster, "both recoveries", 40, |m| recovered(m, master) && recovered(m, other));
    std::thread::sleep(Duration::from_secs(1));
    let (ledger, _) = load.finish();
    check_ledger(&mut cluster.client(), table, &ledger);
    cluster.kill_all();
}

#[test]
fn a_zombie_master_acknowledges_nothing_after_its_tablets_moved() {
    let root = Root::new("recovery-zombie");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("ledger").unwrap();
    let map = table_map(&cluster, table);
    let zombie = busiest(&map, table);
    let zombie_addr = map.server(zombie).unwrap().native;
    // Keys of the zombie's tablets, written before it stops.
    let keys: Vec<Vec<u8>> =
        (0..5000).map(|i| format!("z{i}").into_bytes()).filter(|k| owner(&map, table, k) == zombie).take(200).collect();
    let mut c = cluster.client();
    for k in &keys {
        c.write(table, k, b"before").unwrap();
    }
    let idx = process_of(&root.0, &cluster, zombie);
    let pid = cluster.servers[idx].id();
    signal(pid, "-STOP");
    wait_map(&cluster, "the zombie's recovery", 30, |m| recovered(m, zombie));
    // Open a connection while it is stopped (the kernel accepts it), send
    // writes, then let it run: none of them may be acknowledged.
    let config = ClientConfig { timeout: Some(Duration::from_secs(3)), ..ClientConfig::default() };
    let mut conn = Connection::connect(zombie_addr, &config).ok();
    if let Some(conn) = conn.as_mut() {
        for k in keys.iter().take(20) {
            let _ = conn.send(&Request::Write { table, key: k, value: b"zombie", rules: Default::default() });
        }
    }
    signal(pid, "-CONT");
    let acknowledged = Arc::new(AtomicU64::new(0));
    if let Some(mut conn) = conn {
        for _ in 0..20 {
            match conn.recv() {
                Ok(frame) => {
                    if matches!(frame.reply(), Ok(Ok(_))) {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => break,
            }
        }
    }
    assert_eq!(acknowledged.load(Ordering::Relaxed), 0, "the zombie acknowledged writes");
    // The zombie stops on its own once it learns it was declared dead.
    wait_exit(&mut cluster, idx, Duration::from_secs(15));
    // The recovered values are the acknowledged ones.
    let mut c = cluster.client();
    for k in &keys {
        assert_eq!(c.read(table, k).unwrap().0, b"before");
    }
    cluster.kill_all();
}

/// A zombie's stale reads (issue 11): a master stopped (SIGSTOP) while
/// its tablets are recovered elsewhere and overwritten there must not,
/// once it runs again, answer reads with the values it still holds, on
/// connections opened before the pause (native and RESP) or after.
#[test]
fn a_zombie_master_answers_no_read_after_its_tablets_moved() {
    use std::io::{BufRead, BufReader, Write};
    let root = Root::new("recovery-zombie-reads");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("stale").unwrap();
    // The RESP port's database 0 is the table "db0".
    let db0 = cluster.client().create_table("db0").unwrap();
    table_map(&cluster, db0);
    let map = table_map(&cluster, table);
    let zombie = busiest(&map, table);
    let (zombie_native, zombie_resp) = {
        let s = map.server(zombie).unwrap();
        (s.native, s.resp)
    };
    let keys: Vec<Vec<u8>> =
        (0..5000).map(|i| format!("s{i}").into_bytes()).filter(|k| owner(&map, table, k) == zombie).take(20).collect();
    let mut c = cluster.client();
    for k in &keys {
        c.write(table, k, b"before").unwrap();
    }
    // Connections opened (and used) before the pause.
    let config = ClientConfig { timeout: Some(Duration::from_secs(10)), ..ClientConfig::default() };
    let mut native = Connection::connect(zombie_native, &config).unwrap();
    native.send(&Request::Read { table, key: &keys[0], rules: Default::default() }).unwrap();
    assert!(matches!(native.recv().unwrap().reply(), Ok(Ok(Response::Read { value, .. })) if value == b"before"));
    let mut resp = std::net::TcpStream::connect(zombie_resp).unwrap();
    resp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut resp_in = BufReader::new(resp.try_clone().unwrap());
    let get = |key: &[u8]| {
        let mut cmd = format!("*2\r\n$3\r\nGET\r\n${}\r\n", key.len()).into_bytes();
        cmd.extend_from_slice(key);
        cmd.extend_from_slice(b"\r\n");
        cmd
    };
    let resp_key: Vec<u8> =
        (0..5000).map(|i| format!("r{i}").into_bytes()).find(|k| owner(&map, db0, k) == zombie).unwrap();
    c.write(db0, &resp_key, b"before").unwrap();
    let idx = process_of(&root.0, &cluster, zombie);
    let pid = cluster.servers[idx].id();
    signal(pid, "-STOP");
    wait_map(&cluster, "the zombie's recovery", 30, |m| recovered(m, zombie));
    // New values, acknowledged by the recovery masters.
    let mut c = cluster.client();
    for k in &keys {
        c.write(table, k, b"after").unwrap();
    }
    c.write(db0, &resp_key, b"after").unwrap();
    // Reads sent to the zombie while it is stopped, answered (if at all)
    // once it runs again.
    for k in &keys {
        let _ = native.send(&Request::Read { table, key: k, rules: Default::default() });
    }
    resp.write_all(&get(&resp_key)).unwrap();
    signal(pid, "-CONT");
    let mut stale = 0;
    for _ in 0..keys.len() {
        match native.recv() {
            Ok(frame) => {
                if let Ok(Ok(Response::Read { value, .. })) = frame.reply() {
                    assert_eq!(value, b"after", "a read answered with neither value");
                    stale += usize::from(value == b"before");
                }
            }
            Err(_) => break,
        }
    }
    assert_eq!(stale, 0, "the zombie answered {stale} reads with stale values on a connection from before the pause");
    // RESP: the zombie held the key's tablet in its map, so it never
    // forwards the GET: nothing but an error or a closed connection.
    let mut line = String::new();
    match resp_in.read_line(&mut line) {
        Ok(0) | Err(_) => {}
        Ok(_) => assert!(line.starts_with('-'), "the zombie answered a RESP GET with {line:?}"),
    }
    // The zombie stops on its own.
    wait_exit(&mut cluster, idx, Duration::from_secs(15));
    let mut c = cluster.client();
    for k in &keys {
        assert_eq!(c.read(table, k).unwrap().0, b"after");
    }
    cluster.kill_all();
}

#[test]
fn a_returning_server_does_not_resurrect_deleted_or_overwritten_objects() {
    let root = Root::new("recovery-return");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("ledger").unwrap();
    let (victim, keys) = keys_of_busiest(&cluster, table, "r", 300);
    let mut c = cluster.client();
    for k in &keys {
        c.write(table, k, b"old").unwrap();
    }
    let idx = process_of(&root.0, &cluster, victim);
    kill(&mut cluster, idx);
    wait_map(&cluster, "the recovery", 30, |m| recovered(m, victim));
    let mut c = cluster.client();
    for (i, k) in keys.iter().enumerate() {
        if i % 2 == 0 {
            c.remove(table, k).unwrap();
        } else {
            c.write(table, k, b"new").unwrap();
        }
    }
    // The old server comes back with its old data directory.
    cluster.servers[idx] = cluster.spawn_server(idx);
    let map = wait_map(&cluster, "the returning server", 30, |m| {
        m.servers.iter().filter(|s| s.state == ServerState::Up).count() == 4
    });
    assert!(map.server(victim).is_some_and(|s| s.state == ServerState::Down), "it came back under its old id");
    std::thread::sleep(Duration::from_secs(1));
    let mut c = Client::connect_cluster(cluster.coordinator, ClientConfig::default()).unwrap();
    for (i, k) in keys.iter().enumerate() {
        let got = c.read(table, k);
        if i % 2 == 0 {
            assert!(got.is_err(), "deleted key {:?} came back", String::from_utf8_lossy(k));
        } else {
            assert_eq!(got.unwrap().0, b"new");
        }
    }
    cluster.kill_all();
}

/// Expiry times across a crash recovery: the recovery masters replay each
/// object with its expiry time unchanged, and serve an object only until
/// it; an object that had expired before the crash does not come back,
/// nor the older version it had replaced.
#[test]
fn expiry_times_survive_crash_recovery_and_expired_objects_stay_gone() {
    let root = Root::new("recovery-expiry");
    // Four servers: after the crash, each master still has two backups.
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("ttl").unwrap();
    let (victim, keys) = keys_of_busiest(&cluster, table, "x", 200);
    let written = ExpiringKeys::write(&mut cluster.client(), table, keys);
    let idx = process_of(&root.0, &cluster, victim);
    kill(&mut cluster, idx);
    wait_map(&cluster, "the recovery", 30, |m| recovered(m, victim));
    let mut c = Client::connect_cluster(cluster.coordinator, ClientConfig::default()).unwrap();
    let alive = written.check(&mut c, table);
    assert!(alive > 0, "the recovery took longer than the medium keys live: nothing checked their expiry times");
    cluster.kill_all();
}

/// The STATS of every server in `ids`, by id (None for one that did not answer).
/// Cache mode across a crash: a master that evicted keys is killed; its
/// recovery brings back none of the keys a client had seen evicted (a read
/// that misses waits for the digest that dropped them to be durable), and
/// every key it serves holds the value last written.
#[test]
fn a_recovered_cache_brings_back_no_key_a_client_saw_evicted() {
    let root = Root::new("recovery-eviction");
    let args = ["--memory", "32MiB", "--eviction", "oldest"];
    let mut cluster = Cluster::start_with(&root.0, 4, 2, 0, &args);
    let table = cluster.client().create_table("cache").unwrap();
    // About twice the victim's memory in 20 KiB values.
    let (victim, keys) = keys_of_busiest(&cluster, table, "c", 3000);
    let mut c = cluster.client();
    let value = |k: &[u8]| {
        let mut v = k.to_vec();
        v.resize(20 << 10, b'.');
        v
    };
    for k in &keys {
        c.write(table, k, &value(k)).unwrap();
    }
    let (mut held, mut evicted) = (Vec::new(), Vec::new());
    for k in &keys {
        match c.read(table, k) {
            Ok(v) => {
                assert_eq!(v.0, value(k));
                held.push(k.clone());
            }
            Err(shoal_client::ReadError::NotFound) => evicted.push(k.clone()),
            Err(e) => panic!("read: {e}"),
        }
    }
    assert!(evicted.len() > 1000 && held.len() > 500, "{} evicted, {} held", evicted.len(), held.len());
    let idx = process_of(&root.0, &cluster, victim);
    kill(&mut cluster, idx);
    wait_map(&cluster, "the recovery", 60, |m| recovered(m, victim));
    let mut c = Client::connect_cluster(cluster.coordinator, ClientConfig::default()).unwrap();
    for k in &evicted {
        assert!(c.read(table, k).is_err(), "evicted key {:?} came back", String::from_utf8_lossy(k));
    }
    let mut back = 0;
    for k in &held {
        if let Ok(v) = c.read(table, k) {
            assert_eq!(v.0, value(k));
            back += 1;
        }
    }
    // The victim may have evicted a few more after the reads, not many.
    assert!(back * 10 >= held.len() * 9, "{back} of {} held keys recovered", held.len());
    cluster.kill_all();
}

fn stats_of(map: &ClusterMap, ids: &[ServerId]) -> Vec<(ServerId, Option<shoal_client::Stats>)> {
    ids.iter()
        .map(|id| {
            let addr = map.server(*id).unwrap().native;
            (*id, Client::connect(addr).ok().and_then(|mut c| c.stats().ok()))
        })
        .collect()
}

/// Closed replicas of `log` on the backup at `addr`.
fn closed_replicas(addr: std::net::SocketAddr, log: shoal_common::LogId) -> Vec<u64> {
    use shoal_replication::wire::ReplicaState;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let list = rt.block_on(shoal_replication::restore::list_replicas(addr, log)).unwrap_or_default();
    list.into_iter().filter(|r| r.state == ReplicaState::Closed).map(|r| r.segment.0).collect()
}

#[test]
fn a_killed_backup_s_segments_get_back_to_r_replicas_and_writes_go_on() {
    let root = Root::new("recovery-kill-backup");
    let mut cluster = Cluster::start(&root.0, 5, 2, 0);
    cluster.dial_backups();
    let table = cluster.client().create_table("ledger").unwrap();
    let map = table_map(&cluster, table);
    // Big values first, so that every master closes segments (8 MiB each)
    // whose replicas are spread over the other backups.
    let fill = |i: usize| vec![(i % 251) as u8; 16 << 10];
    std::thread::scope(|s| {
        for t in 0..4 {
            let coordinator = cluster.coordinator;
            s.spawn(move || {
                let mut c = Client::connect_cluster(coordinator, ClientConfig::default()).unwrap();
                for i in (t..6000).step_by(4) {
                    c.write(table, format!("fill{i}").as_bytes(), &fill(i)).unwrap();
                }
            });
        }
    });
    let victim = busiest(&map, table);
    let survivors: Vec<ServerId> = map.servers.iter().map(|s| s.id).filter(|id| *id != victim).collect();
    // What the victim's backup holds of the survivors' logs: each must be
    // copied elsewhere.
    let victim_backup = map.server(victim).unwrap().backup;
    let held: Vec<(ServerId, Vec<u64>)> =
        survivors.iter().map(|id| (*id, closed_replicas(victim_backup, map.server(*id).unwrap().log))).collect();
    let held_total: usize = held.iter().map(|h| h.1.len()).sum();
    eprintln!("the victim's backup holds closed replicas {held:?}");
    assert!(held_total > 0, "the victim holds no closed replica of the others' logs");
    for (id, st) in stats_of(&map, &survivors) {
        assert_eq!(stat(&st.unwrap(), "closed_segments_below_r"), Some(0), "server {id} before the kill");
    }
    let load = WriteLoad::start(cluster.coordinator, table, 3, |t, n| Some(format!("t{t}-k{}", n % 2000).into_bytes()));
    std::thread::sleep(Duration::from_secs(1));
    let idx = process_of(&root.0, &cluster, victim);
    let killed = Instant::now();
    kill(&mut cluster, idx);
    // Every survivor gets its closed segments back to R replicas.
    let deadline = killed + Duration::from_secs(15);
    let mut copied;
    loop {
        let all = stats_of(&map, &survivors);
        let below: Vec<(ServerId, Option<u64>)> =
            all.iter().map(|(id, s)| (*id, s.as_ref().and_then(|s| stat(s, "closed_segments_below_r")))).collect();
        copied = all.iter().filter_map(|(_, s)| s.as_ref().and_then(|s| stat(s, "segments_rereplicated"))).sum::<u64>();
        if below.iter().all(|b| b.1 == Some(0)) && copied >= held_total as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "closed segments below R 15 s after the kill: {below:?}, {copied} copied of {held_total}; logs under {}",
            root.0.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{copied} closed segments back to R replicas {:?} after the kill", killed.elapsed());
    // Each segment the victim held is closed on R live backups now (or was
    // cleaned since, and is on none).
    let live = wait_map(&cluster, "the recovery", 30, |m| recovered(m, victim));
    for (id, segs) in &held {
        let log = map.server(*id).unwrap().log;
        let on: Vec<Vec<u64>> =
            survivors.iter().map(|b| closed_replicas(live.server(*b).unwrap().backup, log)).collect();
        for seg in segs {
            let n = on.iter().filter(|l| l.contains(seg)).count();
            assert!(n == 0 || n >= 2, "segment {seg} of server {id}: closed on {n} live backups");
        }
    }
    let before = load.acks();
    std::thread::sleep(Duration::from_secs(1));
    let (ledger, after) = load.finish();
    assert!(after > before + 100, "writes did not go on: {before} then {after}");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..6000 {
        assert_eq!(c.read(table, format!("fill{i}").as_bytes()).unwrap().0, fill(i), "fill{i}");
    }
    cluster.kill_all();
}

/// Issue 20's bounded state on real processes: 50 times, a server that
/// holds tablets is SIGKILLed under a write load, recovered, and started
/// again on its data directory (it rejoins as a new server). The map stops
/// growing (dead servers retired beyond 16, freed logs beyond 64, no
/// recovery piece below 1/256 of the hash space), and every acknowledged
/// write is read back at the end.
#[test]
fn the_map_stays_bounded_across_50_kills_and_recoveries() {
    let root = Root::new("bounded-cycles");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("ledger").unwrap();
    let load = WriteLoad::start(cluster.coordinator, table, 2, |t, n| Some(format!("t{t}-k{}", n % 2000).into_bytes()));
    // Every master has replicated its log before the first kill: a master
    // killed before its first replica leaves a log that no backup holds,
    // and its recovery waits for backups that might hold it
    // (docs/recovery.md, "Replay"), for ever if none does.
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.acks() < 2000 {
        assert!(Instant::now() < deadline, "the load did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let mut sizes = Vec::new();
    for cycle in 0..50 {
        let map = cluster.map().unwrap();
        let holders: Vec<ServerId> = map
            .servers
            .iter()
            .filter(|s| s.state == ServerState::Up && map.tablets_of(s.id).next().is_some())
            .map(|s| s.id)
            .collect();
        let victim = holders[cycle % holders.len()];
        let idx = cluster.process_of(victim);
        kill(&mut cluster, idx);
        cluster.wait_for_map("the victim declared dead and recovered", 60, |m| {
            m.server(victim).is_none_or(|s| s.state == ServerState::Down) && m.recoveries.is_empty()
        });
        cluster.servers[idx] = cluster.spawn_server(idx);
        let map = cluster.wait_for_map("four servers up", 60, |m| {
            m.servers.iter().filter(|s| s.state == ServerState::Up).count() == 4
        });
        sizes.push((map.servers.len(), map.fenced.len(), map.tablets.len(), serde_json::to_vec(&map).unwrap().len()));
    }
    let (ledger, acks) = load.finish();
    let last = *sizes.last().unwrap();
    eprintln!(
        "50 kills in {:.1} s; {acks} writes acknowledged; (servers, fenced logs, tablets, map bytes) after 10, 25, \
         50: {:?} {:?} {last:?}",
        started.elapsed().as_secs_f64(),
        sizes[9],
        sizes[24]
    );
    assert!(last.0 <= 4 + 16 && last.1 <= 64 && last.2 <= 256, "{last:?}");
    assert!(sizes[40..].iter().all(|x| x.0 == last.0 && x.2 <= last.2), "{:?}", &sizes[40..]);
    check_ledger(&mut cluster.client(), table, &ledger);
}
