//! Rebalancing and drain on real processes (`docs/migration.md`,
//! "Rebalancing and drain"): `shoal rebalance` after a server joins, under
//! a write load, keeps every acknowledged write and narrows the spread of
//! memory; `shoal drain` under load empties a server, which can then be
//! SIGKILLed without any recovery; `--auto-rebalance` (by its old name
//! `--rebalance-on-join`) does the first by itself, and merges back the
//! pieces of a recovery with no operator; a rebalance whose coordinator
//! is SIGKILLed mid-move is taken over by the restarted one; a server
//! whose tablet takes all the traffic, memory being even, gets load moved
//! off it.

mod common;

use common::{check_ledger, stat, Cluster, Root, WriteLoad, SHOAL};
use shoal_client::blocking::Client;
use shoal_client::TableId;
use shoal_cluster::rebalance::{Load, MIN_OPS};
use shoal_cluster::{ClusterMap, ServerId, ServerState};
use shoal_common::key_hash;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `shoal <args>` against `cluster`.
fn shoal(cluster: &Cluster, args: &[&str]) -> Output {
    cluster.cli(args)
}

/// The JSON of the last line `out` printed.
fn last_line(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_else(|| panic!("no output: {out:?}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// Each up server's `live_bytes`, from its own STATS.
fn memory(map: &ClusterMap) -> Vec<(ServerId, u64)> {
    map.servers
        .iter()
        .filter(|s| s.state == ServerState::Up)
        .map(|s| (s.id, stat(&Client::connect(s.native).unwrap().stats().unwrap(), "live_bytes").unwrap()))
        .collect()
}

fn spread(m: &[(ServerId, u64)]) -> u64 {
    m.iter().map(|x| x.1).max().unwrap() - m.iter().map(|x| x.1).min().unwrap()
}

/// Writes `n` keys `pre-i` of about 2 KiB each.
fn preload(c: &mut Client, table: TableId, n: usize) {
    let filler = "p".repeat(2000);
    for i in 0..n {
        c.write(table, format!("pre-{i}").as_bytes(), format!("value-{i}-{filler}").as_bytes()).unwrap();
    }
}

fn check_preload(c: &mut Client, table: TableId, n: usize) {
    let filler = "p".repeat(2000);
    for i in 0..n {
        let got = c.read(table, format!("pre-{i}").as_bytes()).unwrap().0;
        assert_eq!(got, format!("value-{i}-{filler}").into_bytes(), "pre-{i}");
    }
}

/// Keys the write load writes: 300 per thread, over and over.
fn keys(t: usize, n: u64) -> Option<Vec<u8>> {
    Some(format!("w{t}-{}", n % 300).into_bytes())
}

#[test]
fn rebalance_after_a_server_joins_under_load_keeps_every_acknowledged_write_and_narrows_the_spread() {
    let root = Root::new("rebalance-join");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("kv").unwrap();
    preload(&mut c, table, 3000);
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 3, keys);

    let new = cluster.spawn_server(3);
    cluster.servers.push(new);
    let map = cluster.wait_up(4);
    let before = memory(&map);
    eprintln!("memory per server before: {before:?}");

    // A dry run plans and moves nothing.
    let out = shoal(&cluster, &["rebalance", "--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    let dry = last_line(&out);
    let steps = dry["plan"]["steps"].as_array().unwrap().len();
    assert!(steps > 0 && dry["job"].is_null(), "{dry}");
    assert_eq!(cluster.map().unwrap().tablets, map.tablets, "a dry run changes nothing");

    let started = Instant::now();
    let out = shoal(&cluster, &["rebalance"]);
    let took = started.elapsed();
    assert!(out.status.success(), "shoal rebalance failed: {out:?}");
    let done = last_line(&out);
    assert_eq!(done["state"], "done", "{done}");
    std::thread::sleep(Duration::from_millis(300));
    let (ledger, acks) = load.finish();

    let map = cluster.map().unwrap();
    assert!(map.migrations.is_empty());
    let after = memory(&map);
    let added = map.servers.iter().map(|s| s.id).max().unwrap();
    eprintln!(
        "rebalanced in {took:?} ({} moves); memory per server after: {after:?}; spread {} -> {} bytes; \
         {acks} writes acknowledged",
        done["moves"],
        spread(&before),
        spread(&after)
    );
    assert!(map.tablets_of(added).count() > 0, "the new server masters tablets");
    assert!(spread(&after) < spread(&before) / 2, "spread {} -> {}", spread(&before), spread(&after));
    assert!(acks > 0);
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    check_preload(&mut c, table, 3000);

    // Balanced now: once the traffic (the load, then the checks' reads)
    // has left the servers' rates, a second rebalance has nothing to do.
    wait_quiet(&cluster);
    let out = shoal(&cluster, &["rebalance"]);
    assert!(out.status.success(), "{out:?}");
    assert!(last_line(&out)["job"].is_null(), "{out:?}");
}

#[test]
fn drain_under_load_empties_a_server_that_then_dies_without_a_recovery() {
    let root = Root::new("rebalance-drain");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("kv").unwrap();
    preload(&mut c, table, 2000);
    let map = cluster.map().unwrap();
    let victim = map.tablets.iter().find(|t| t.table == table).unwrap().master;
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 3, keys);
    std::thread::sleep(Duration::from_millis(300));

    // Moving tablets needs the cluster secret.
    let anonymous = Command::new(SHOAL)
        .args(["drain", "--server", &victim.0.to_string(), "--coordinator", &cluster.coordinator.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(anonymous.status.code(), Some(1), "{anonymous:?}");
    assert!(String::from_utf8_lossy(&anonymous.stderr).contains("cluster secret"), "{anonymous:?}");
    let refused = shoal(&cluster, &["drain", "--server", "99"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("no server 99"), "{refused:?}");

    let out = shoal(&cluster, &["drain", "--server", &victim.0.to_string()]);
    assert!(out.status.success(), "shoal drain failed: {out:?}");
    assert_eq!(last_line(&out)["state"], "done", "{out:?}");
    let map = cluster.map().unwrap();
    assert_eq!(map.tablets_of(victim).count(), 0, "the drained server masters nothing");
    // It takes no tablet while draining.
    let other = map.tablets.iter().find(|t| t.table == table).unwrap();
    let refused = shoal(
        &cluster,
        &["migrate", "--table", "kv", "--start", &format!("{:#x}", other.start_hash), "--to", &victim.0.to_string()],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("being drained"), "{refused:?}");

    let process = cluster.process_of(victim);
    let _ = cluster.servers[process].kill();
    let _ = cluster.servers[process].wait();
    // Its backups' masters report it; it is declared dead with nothing to
    // recover.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = cluster.map().unwrap();
        assert!(m.recoveries.iter().all(|r| r.dead != victim), "a recovery was started for the drained server");
        if m.server(victim).is_some_and(|s| s.state == ServerState::Down) {
            break;
        }
        assert!(Instant::now() < deadline, "the killed server was never declared dead");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (ledger, acks) = load.finish();
    eprintln!("{acks} writes acknowledged");
    let stats = cluster_stats(&cluster);
    assert_eq!(stats["finished_recoveries"].as_array().map(Vec::len), Some(0), "{stats}");
    assert!(cluster.map().unwrap().recoveries.is_empty());
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    check_preload(&mut c, table, 2000);

    // What cannot move is named: a chunk table's tablet.
    let chunks = c.create_chunk_table("blobs").unwrap();
    let master = cluster.map().unwrap().tablets.iter().find(|t| t.table == chunks).unwrap().master;
    let refused = shoal(&cluster, &["drain", "--server", &master.0.to_string()]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let text = String::from_utf8_lossy(&refused.stdout);
    assert!(text.contains("cannot move") && text.contains("chunk table 'blobs'"), "{text}");
}

#[test]
fn auto_rebalance_moves_tablets_to_a_new_server_by_itself() {
    let root = Root::new("rebalance-auto");
    let mut cluster = Cluster::start_with_coordinator(&root.0, 2, 1, &["--rebalance-on-join"]);
    let mut c = cluster.client();
    let table = c.create_table("kv").unwrap();
    preload(&mut c, table, 1500);
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 2, keys);

    let new = cluster.spawn_server(2);
    cluster.servers.push(new);
    cluster.wait_up(3);
    let map = cluster.wait_for_map("the new server mastering tablets", 45, |m| {
        let newest = m.servers.iter().map(|s| s.id).max().unwrap();
        m.tablets_of(newest).count() > 0 && m.migrations.is_empty()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let s = cluster_stats(&cluster);
        if s["rebalance"]["state"] != "running" {
            break s["rebalance"].clone();
        }
        assert!(Instant::now() < deadline, "the job never ended: {s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(job["state"], "done", "{job}");
    assert!(job["trigger"]["join"].as_u64().is_some(), "{job}");
    let (ledger, _) = load.finish();
    eprintln!("automatic rebalance: {} moves in {} ms", job["moves_done"], job["elapsed_ms"]);
    assert!(map.servers.iter().filter(|s| s.state == ServerState::Up).count() == 3);
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    check_preload(&mut c, table, 1500);
}

/// The coordinator's `stats`, through `shoal stats`'s request.
fn cluster_stats(cluster: &Cluster) -> serde_json::Value {
    try_cluster_stats(cluster).expect("the coordinator's stats")
}

/// [`cluster_stats`], `None` while the coordinator does not answer.
fn try_cluster_stats(cluster: &Cluster) -> Option<serde_json::Value> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut client = shoal_cluster::ControlClient::new(cluster.coordinator).with_timeout(Duration::from_secs(5));
    match rt.block_on(client.call(&shoal_cluster::ControlRequest::Stats)).ok()? {
        shoal_cluster::ControlResponse::Stats { stats } => Some(stats),
        _ => None,
    }
}

/// Issue 20's "recovered pieces are merged back": a crash recovery cuts
/// the dead master's tablet into pieces over the servers left; `shoal
/// rebalance` gathers the pieces of a small table onto one server and
/// merges them, under a write load, losing nothing.
#[test]
fn rebalance_merges_back_the_pieces_a_recovery_left() {
    let root = Root::new("rebalance-merge-back");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("small").unwrap();
    for i in 0..300 {
        c.write(table, format!("pre-{i}").as_bytes(), format!("value-{i}").as_bytes()).unwrap();
    }
    let map = cluster.map().unwrap();
    let count = |m: &ClusterMap| m.tablets.iter().filter(|t| t.table == table).count();
    let before = count(&map);
    let victim = map.tablets.iter().find(|t| t.table == table).unwrap().master;
    let idx = cluster.process_of(victim);
    let _ = cluster.servers[idx].kill();
    let _ = cluster.servers[idx].wait();
    let recovered = cluster.wait_for_map("the victim recovered", 30, |m| {
        m.server(victim).is_some_and(|s| s.state == ServerState::Down) && m.recoveries.is_empty()
    });
    assert!(count(&recovered) > before, "the recovery cut the tablet into pieces");

    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 2, keys);
    std::thread::sleep(Duration::from_millis(200));
    let out = shoal(&cluster, &["rebalance"]);
    assert!(out.status.success(), "shoal rebalance failed: {out:?}");
    let done = last_line(&out);
    assert_eq!(done["state"], "done", "{done}");
    std::thread::sleep(Duration::from_millis(200));
    let (ledger, acks) = load.finish();
    let map = cluster.map().unwrap();
    eprintln!(
        "tablets of the table: {before} before the kill, {} after the recovery, {} after the rebalance ({} moves); \
         {acks} writes acknowledged",
        count(&recovered),
        count(&map),
        done["moves"]
    );
    assert_eq!(count(&map), 1, "{:?}", map.tablets);
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..300 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
}

/// Waits (at most 30 s) until every up server's rate is below half of
/// what rebalancing evens ([`MIN_OPS`]).
fn wait_quiet(cluster: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = rates(&cluster.map().unwrap());
        if r.iter().all(|x| x.1 < MIN_OPS / 2) {
            return;
        }
        assert!(Instant::now() < deadline, "the servers' rates never fell: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Each up server's `ops_per_sec`, from its own STATS.
fn rates(map: &ClusterMap) -> Vec<(ServerId, u64)> {
    map.servers
        .iter()
        .filter(|s| s.state == ServerState::Up)
        .map(|s| (s.id, stat(&Client::connect(s.native).unwrap().stats().unwrap(), "ops_per_sec").unwrap()))
        .collect()
}

/// Issue 20's "memory and load are even": three servers with even memory,
/// all traffic on one server's tablet. `shoal rebalance` moves part of the
/// load off it (and cold data back, so memory stays even), as its
/// measured figures and the servers' own STATS show; every acknowledged
/// write reads back.
#[test]
fn rebalance_moves_load_off_a_server_whose_tablet_takes_all_the_traffic() {
    let root = Root::new("rebalance-load");
    let cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("kv").unwrap();
    preload(&mut c, table, 3000);
    let map = cluster.map().unwrap();
    assert_eq!(map.tablets.iter().filter(|t| t.table == table).count(), 3, "{map:?}");
    let hot = map.tablets.iter().find(|t| t.table == table).unwrap().clone();
    let in_hot = |k: &[u8]| (hot.start_hash..=hot.end_hash).contains(&key_hash(table, k).0);
    let hot_keys: Vec<Vec<u8>> =
        (0..).map(|i| format!("hot-{i}").into_bytes()).filter(|k| in_hot(k)).take(4 * 250).collect();
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 4, move |t, n| {
        Some(hot_keys[t * 250 + (n % 250) as usize].clone())
    });
    // The rates build up over a few seconds; the load must be well past
    // what rebalancing evens.
    let deadline = Instant::now() + Duration::from_secs(20);
    let before = loop {
        std::thread::sleep(Duration::from_millis(500));
        let r = rates(&map);
        if r.iter().find(|x| x.0 == hot.master).unwrap().1 >= 4 * MIN_OPS
            && Instant::now() > deadline - Duration::from_secs(15)
        {
            break r;
        }
        assert!(Instant::now() < deadline, "the hot server's rate never reached {}/s: {r:?}", 4 * MIN_OPS);
    };
    let total: u64 = before.iter().map(|x| x.1).sum();
    let share = |r: &[(ServerId, u64)], s: ServerId| r.iter().find(|x| x.0 == s).unwrap().1 as f64 / total as f64;
    eprintln!("ops/s per server before: {before:?}; memory {:?}", memory(&map));
    assert!(share(&before, hot.master) > 0.9, "{before:?}");

    let started = Instant::now();
    let out = shoal(&cluster, &["rebalance"]);
    assert!(out.status.success(), "shoal rebalance failed: {out:?}");
    let done = last_line(&out);
    assert_eq!(done["state"], "done", "{done}");
    let planned: Vec<Load> = serde_json::from_value(done["before"].clone()).unwrap();
    let after: Vec<Load> = serde_json::from_value(done["after"].clone()).unwrap();
    let ops_total: u64 = after.iter().map(|l| l.ops).sum();
    let hot_after = after.iter().find(|l| l.server == hot.master).unwrap();
    let mean_bytes = after.iter().map(|l| l.bytes).sum::<u64>() / 3;
    eprintln!(
        "rebalanced in {:?} ({} moves); measured per server: before {planned:?}, after {after:?}; \
         load spread {} -> {} ops/s, memory spread {} -> {} bytes",
        started.elapsed(),
        done["moves"],
        done["ops_spread_before"],
        done["ops_spread_after"],
        done["spread_before"],
        done["spread_after"]
    );
    assert!(
        (hot_after.ops as f64) < 0.6 * ops_total as f64,
        "the hot server still takes {} of {ops_total} ops/s",
        hot_after.ops
    );
    assert!(done["ops_spread_after"].as_u64().unwrap() * 2 < done["ops_spread_before"].as_u64().unwrap(), "{done}");
    assert!(done["spread_after"].as_u64().unwrap() < mean_bytes / 4, "memory stays even: {done}");
    // The servers' own figures a moment later agree.
    let now = rates(&cluster.map().unwrap());
    let sum: u64 = now.iter().map(|x| x.1).sum();
    assert!((now.iter().find(|x| x.0 == hot.master).unwrap().1 as f64) < 0.6 * sum as f64, "{now:?}");
    assert!(now.iter().filter(|x| x.1 > sum / 10).count() >= 2, "the load is spread: {now:?}");

    let (ledger, acks) = load.finish();
    eprintln!("ops/s per server after: {now:?}; {acks} writes acknowledged");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    check_preload(&mut c, table, 3000);
}

/// `--auto-rebalance`: after a crash recovery cut a tablet into pieces,
/// the coordinator gathers and merges them back by itself (no CLI call),
/// under a write load, losing nothing.
#[test]
fn auto_rebalance_merges_back_the_pieces_of_a_recovery_by_itself() {
    let root = Root::new("rebalance-auto-merge");
    let mut cluster = Cluster::start_with_coordinator(&root.0, 3, 1, &["--auto-rebalance"]);
    let mut c = cluster.client();
    let table = c.create_table("small").unwrap();
    for i in 0..300 {
        c.write(table, format!("pre-{i}").as_bytes(), format!("value-{i}").as_bytes()).unwrap();
    }
    // The three joins' automatic rebalances (2 s after each) are over:
    // they gather the small table's tablets onto one server.
    let log = cluster.root.join("coordinator/log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&log).unwrap_or_default().matches(" joined: ").count() < 3
        || cluster_stats(&cluster)["rebalance"]["state"] == "running"
    {
        assert!(Instant::now() < deadline, "the joins' rebalances never ended; see {}", log.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    let map = cluster.map().unwrap();
    let count = |m: &ClusterMap| m.tablets.iter().filter(|t| t.table == table).count();
    let before = count(&map);
    let victim = map.tablets.iter().find(|t| t.table == table).unwrap().master;
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 2, keys);
    std::thread::sleep(Duration::from_millis(300));
    let idx = cluster.process_of(victim);
    let _ = cluster.servers[idx].kill();
    let _ = cluster.servers[idx].wait();
    let killed = Instant::now();
    let most = std::cell::Cell::new(0);
    let merged = cluster.wait_for_map("the pieces merged back", 90, |m| {
        let recovered = m.server(victim).is_some_and(|s| s.state == ServerState::Down) && m.recoveries.is_empty();
        most.set(most.get().max(count(m)));
        recovered && most.get() > before && count(m) == 1 && m.migrations.is_empty()
    });
    let took = killed.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let s = cluster_stats(&cluster);
        if s["rebalance"]["state"] != "running" {
            break s["rebalance"].clone();
        }
        assert!(Instant::now() < deadline, "the job never ended: {s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["trigger"]["recovery"].as_u64(), Some(victim.0), "{job}");
    std::thread::sleep(Duration::from_millis(200));
    let (ledger, acks) = load.finish();
    eprintln!(
        "tablets of the table: {before} before the kill, up to {} seen after it, {} merged back {took:?} after \
         the kill ({} moves, {} merges, no CLI call); {acks} writes acknowledged",
        most.get(),
        count(&merged),
        job["moves_done"],
        job["plan"]["steps"].as_array().map_or(0, |s| s.iter().filter(|x| x["step"] == "merge").count())
    );
    assert!(job["plan"]["steps"].as_array().unwrap().iter().any(|x| x["step"] == "merge"), "{job}");
    assert!(acks > 0);
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..300 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
}

/// A rebalance whose coordinator is SIGKILLed during a move: the job is
/// in the saved state, so the restarted coordinator waits for the move in
/// flight to end, plans again and finishes it under the same job id; the
/// new server ends with tablets and every acknowledged write reads back.
#[test]
fn rebalance_with_the_coordinator_killed_mid_move_is_finished_by_the_next_one() {
    let root = Root::new("rebalance-kill-coordinator");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("kv").unwrap();
    preload(&mut c, table, 6000);
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 2, keys);
    let new = cluster.spawn_server(3);
    cluster.servers.push(new);
    let map = cluster.wait_up(4);
    let before = memory(&map);

    // The CLI follows the job across the restart.
    let follower = {
        let mut cmd = Command::new(SHOAL);
        cmd.args(["rebalance", "--wait", "120", "--coordinator", &cluster.coordinator.to_string(), "--json"])
            .arg("--cluster-secret-file")
            .arg(cluster.secret_file())
            .stdin(Stdio::null());
        std::thread::spawn(move || cmd.output().unwrap())
    };
    // Kill it while a move is in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let m = cluster.map().unwrap();
        let s = cluster_stats(&cluster);
        if !m.migrations.is_empty() && s["rebalance"]["state"] == "running" {
            assert_eq!(s["rebalance_job"]["id"], s["rebalance"]["id"], "the job is saved: {s}");
            break s["rebalance"]["id"].as_u64().unwrap();
        }
        assert!(Instant::now() < deadline, "no move ever started");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut coordinator = cluster.coordinator_proc.take().unwrap();
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    cluster.start_coordinator();

    let deadline = Instant::now() + Duration::from_secs(120);
    let resumed = loop {
        if let Some(s) = try_cluster_stats(&cluster) {
            let j = &s["rebalance"];
            if j["id"].as_u64() == Some(job) && j["state"] != "running" {
                break j.clone();
            }
        }
        assert!(Instant::now() < deadline, "the job was not finished by the restarted coordinator");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(resumed["state"], "done", "{resumed}");
    assert_eq!(resumed["trigger"], "resume", "{resumed}");
    let map = cluster.map().unwrap();
    assert!(map.migrations.is_empty());
    let added = map.servers.iter().map(|s| s.id).max().unwrap();
    assert!(map.tablets_of(added).count() > 0, "the new server masters tablets: {map:?}");
    let after = memory(&map);
    eprintln!(
        "coordinator killed mid-move; job {job} taken over and done {:?} after the kill ({} more moves); memory \
         spread {} -> {} bytes",
        killed.elapsed(),
        resumed["moves_done"],
        spread(&before),
        spread(&after)
    );
    assert!(spread(&after) < spread(&before) / 2, "{before:?} -> {after:?}");
    assert!(map.servers.iter().all(|s| s.state == ServerState::Up), "no server was declared dead: {map:?}");
    let out = follower.join().unwrap();
    assert!(out.status.success(), "shoal rebalance did not follow the job across the restart: {out:?}");
    assert_eq!(last_line(&out)["state"], "done", "{out:?}");
    assert!(cluster_stats(&cluster)["rebalance_job"].is_null(), "a finished job leaves the saved state");
    std::thread::sleep(Duration::from_millis(300));
    let (ledger, acks) = load.finish();
    eprintln!("{acks} writes acknowledged");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    check_preload(&mut c, table, 6000);
}
