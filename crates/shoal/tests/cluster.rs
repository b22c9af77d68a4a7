//! A real cluster on 127.0.0.1 (see `common`):
//!
//! * Writes through the cluster client land on their keys' masters and are
//!   read back from any client.
//! * Whole-cluster SIGKILL under a write load, then a restart on the same
//!   directories: every acknowledged write is there (a ledger of them is
//!   checked one by one).
//! * Expiry times are the same after a whole-cluster restart.
//! * A backup that stalls (its server stopped with SIGSTOP) mid-segment:
//!   the other masters re-open their replicas elsewhere and their writes go
//!   on.

mod common;

use common::*;
use shoal_client::blocking::Client;
use std::collections::HashSet;
use std::time::{Duration, Instant};

#[test]
fn cluster_routes_writes_to_masters_and_reads_them_back() {
    let root = Root::new("cluster-routes");
    let cluster = Cluster::start(&root.0, 3, 2, 0);
    let mut c = cluster.client();
    let t = c.create_table("users").unwrap();
    for i in 0..2000u32 {
        c.write(t, format!("user{i}").as_bytes(), format!("v{i}").as_bytes()).unwrap();
    }
    // A second client with its own map reads everything back.
    let mut d = cluster.client();
    for i in 0..2000u32 {
        let v = d.read(t, format!("user{i}").as_bytes()).unwrap();
        assert_eq!(v.0, format!("v{i}").as_bytes());
    }
    // The table's tablets are spread over the three masters, and each holds some keys.
    let map = cluster.map().unwrap();
    let masters: HashSet<_> = map.tablets.iter().filter(|x| x.table == t).map(|x| x.master).collect();
    assert_eq!(masters.len(), 3, "{map:?}");
    let mut per_server = Vec::new();
    for s in &map.servers {
        let mut one = Client::connect(s.native).unwrap();
        let objects = stat(&one.stats().unwrap(), "objects").unwrap();
        per_server.push(objects);
    }
    assert_eq!(per_server.iter().sum::<u64>(), 2000, "{per_server:?}");
    assert!(per_server.iter().all(|&n| n > 300), "{per_server:?}");
}

#[test]
fn whole_cluster_sigkill_and_restart_keeps_every_acknowledged_write() {
    let root = Root::new("cluster-restart");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let port = cluster.coordinator.port();
    let table = cluster.client().create_table("ledger").unwrap();
    // Each thread writes its own keys, so the ledger's last value is the newest.
    let load = WriteLoad::start(cluster.coordinator, table, 4, |t, n| Some(format!("t{t}-k{}", n % 5000).into_bytes()));
    std::thread::sleep(Duration::from_secs(3));
    cluster.kill_all();
    let (ledger, _) = load.finish();
    assert!(ledger.len() > 1000, "only {} writes acknowledged", ledger.len());

    // Same directories, same coordinator port.
    let mut again = Cluster::start(&root.0, 4, 2, port);
    let mut c = again.client();
    check_ledger(&mut c, table, &ledger);
    again.kill_all();
}

/// Expiry times across a whole-cluster SIGKILL and restart: every server
/// replays its own log from the backups' disks with each object's expiry
/// time unchanged; objects that expired before do not come back.
#[test]
fn whole_cluster_restart_keeps_expiry_times() {
    let root = Root::new("cluster-restart-expiry");
    let mut cluster = Cluster::start(&root.0, 3, 2, 0);
    let port = cluster.coordinator.port();
    let table = cluster.client().create_table("ttl").unwrap();
    let keys = (0..400).map(|i| format!("x{i}").into_bytes()).collect();
    let written = ExpiringKeys::write(&mut cluster.client(), table, keys);
    cluster.kill_all();
    let mut again = Cluster::start(&root.0, 3, 2, port);
    let alive = written.check(&mut again.client(), table);
    assert!(alive > 0, "the restart took longer than the medium keys live: nothing checked their expiry times");
    again.kill_all();
}

/// A whole-cluster restart in which the servers come back slowly, one by
/// one, to a coordinator that checks suspicions at once: the first ones
/// report the others, which are declared dead and recovered by crash
/// recovery while their data directories (their backups' replicas) are
/// still coming back as new servers. The recoveries must wait for those
/// backups rather than take a log they cannot see for empty.
#[test]
fn a_slow_whole_cluster_restart_with_servers_declared_dead_loses_nothing() {
    let root = Root::new("cluster-slow-restart");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let port = cluster.coordinator.port();
    let table = cluster.client().create_table("ledger").unwrap();
    let load = WriteLoad::start(cluster.coordinator, table, 4, |t, n| Some(format!("t{t}-k{}", n % 5000).into_bytes()));
    std::thread::sleep(Duration::from_secs(2));
    cluster.kill_all();
    let (ledger, _) = load.finish();
    assert!(ledger.len() > 1000, "only {} writes acknowledged", ledger.len());

    let coordinator: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut again = Cluster {
        coordinator,
        coordinator_proc: None,
        servers: Vec::new(),
        root: root.0.clone(),
        replicas: 2,
        server_args: Vec::new(),
        internal: None,
        coordinator_args: Vec::new(),
    };
    again.start_coordinator_with(&["--restart-grace-ms", "0"]);
    for i in 0..4 {
        let s = again.spawn_server(i);
        again.servers.push(s);
        // Long enough for the servers back to report the others, and for
        // the coordinator to declare them dead.
        std::thread::sleep(Duration::from_millis(2500));
    }
    // Every server back (as itself or as a new one) and no recovery left.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = again.map().is_some_and(|m| {
            m.recoveries.is_empty()
                && m.servers.iter().filter(|s| s.state == shoal_cluster::ServerState::Up).count() >= 4
        });
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "cluster not recovered in time; logs under {}", root.0.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    let declared =
        std::fs::read_to_string(root.0.join("coordinator/log")).unwrap().matches("declaring it dead").count();
    let mut c = again.client();
    check_ledger(&mut c, table, &ledger);
    again.kill_all();
    assert!(declared > 0, "no server was declared dead: the test did not test what it means to");
}

#[test]
fn a_stalled_backup_is_replaced_and_writes_to_other_masters_go_on() {
    let root = Root::new("cluster-stall");
    let cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("stall").unwrap();
    let map = {
        // The map with the new table's tablets.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let m = cluster.map().unwrap();
            if m.tablets.iter().any(|t| t.table == table) || Instant::now() > deadline {
                break m;
            }
        }
    };
    // Stop one server: its backup stalls (and its own keys are not written).
    // The victim is a server whose backup holds a replica of another
    // master's open head (every head is replicated from its first bytes).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    cluster.dial_backups();
    let holds_others = |s: &shoal_cluster::ServerInfo| {
        map.servers.iter().filter(|m| m.id != s.id).any(|m| {
            rt.block_on(shoal_replication::restore::list_replicas(s.backup, m.log))
                .is_ok_and(|l| l.iter().any(|r| r.state == shoal_replication::wire::ReplicaState::Open))
        })
    };
    let victim = map.servers.iter().find(|s| holds_others(s)).expect("a backup holding an open replica").clone();
    // Servers enlist in any order, so find its process by its data directory's id.
    let victim_idx = (0..cluster.servers.len())
        .find(|i| {
            let id = std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id"))).unwrap();
            id.trim() == victim.id.0.to_string()
        })
        .expect("the victim's process");
    let pid = cluster.servers[victim_idx].id();
    let victim_id = victim.id;
    let owned_by_victim = {
        let map = map.clone();
        move |key: &[u8]| {
            let h = shoal_client::key_hash(table, key);
            map.tablet(table, h).map(|t| t.master) == Some(victim.id)
        }
    };
    let keys = move |t: usize, n: u64| {
        let k = format!("t{t}-k{}", n % 3000).into_bytes();
        (!owned_by_victim(&k)).then_some(k)
    };
    let load = WriteLoad::start(cluster.coordinator, table, 3, keys);
    std::thread::sleep(Duration::from_secs(1));
    signal(pid, "-STOP");
    let stalled_at = load.acks();
    std::thread::sleep(Duration::from_secs(5));
    let after = load.acks();
    signal(pid, "-CONT");
    let (ledger, _) = load.finish();
    assert!(after > stalled_at + 100, "writes stopped with a stalled backup: {stalled_at} then {after}");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    // The masters say they re-opened replicas (open segments) or copied
    // them (closed ones, once the stopped server was declared dead).
    let mut reopened = 0;
    for s in map.servers.iter().filter(|s| s.id != victim_id) {
        let mut one = Client::connect(s.native).unwrap();
        let st = one.stats().unwrap();
        reopened += stat(&st, "replicas_reopened").unwrap() + stat(&st, "segments_rereplicated").unwrap();
    }
    assert!(reopened > 0, "no replica was re-opened");
}
