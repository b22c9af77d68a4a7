//! Migration of chunk id ranges on a real cluster (see `common`,
//! `docs/chunks.md`): client threads create, put, remove and read chunks
//! and keep a ledger of every acknowledged write while a range of one
//! server's own chunk ids moves to a second server, on to a third and back
//! home (`shoal migrate --node`), or moves and its new server is
//! SIGKILLed, or its source or target is SIGKILLed in the middle of the
//! copy. Afterwards every acknowledged write reads back with its last
//! acknowledged payload and every acknowledged remove stays removed; where
//! no server dies, no client saw an error (moves are retried by the client
//! library).

mod common;

use common::*;
use shoal_client::{ChunkId, ClientConfig, TableId};
use shoal_cluster::{ClusterMap, ServerId, ServerState};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per chunk id, its last acknowledged payload, or `None` once removed.
type Ledger = Arc<Mutex<Payloads>>;
type Payloads = HashMap<ChunkId, Option<Vec<u8>>>;

/// Each thread creates chunks (every fifth operation, or when it has
/// none), removes one of its own (every seventh), reads one, and puts new
/// payloads into its own otherwise. A write enters the ledger once
/// acknowledged; a remove is entered before it is sent, so that a create
/// of another thread that reuses the id (only possible once the remove
/// took effect) is entered after it. Any error a call returns is counted:
/// the client library retries `RETRY` and `UNKNOWN_TABLET` itself, so a
/// move must surface none.
struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
    ledger: Ledger,
    acks: Arc<AtomicU64>,
    errors: Arc<Mutex<Vec<String>>>,
    uncertain: Arc<Mutex<HashSet<ChunkId>>>,
}

impl Load {
    fn start(coordinator: SocketAddr, table: TableId, threads: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::default();
        let acks = Arc::new(AtomicU64::new(0));
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let uncertain: Arc<Mutex<HashSet<ChunkId>>> = Arc::default();
        let handles = (0..threads)
            .map(|t| {
                let (stop, ledger, acks, errors) = (stop.clone(), ledger.clone(), acks.clone(), errors.clone());
                let uncertain = uncertain.clone();
                std::thread::spawn(move || {
                    let mut c =
                        shoal_client::blocking::Client::connect_cluster(coordinator, ClientConfig::default()).unwrap();
                    let mut mine: Vec<ChunkId> = Vec::new();
                    let mut n = 0u64;
                    // Bounded in count as well as by `stop`.
                    while !stop.load(Ordering::Relaxed) && n < 200_000 {
                        n += 1;
                        let payload = format!("t{t}-n{n}").into_bytes();
                        let failed = if mine.is_empty() || n.is_multiple_of(5) {
                            c.create_chunk(table, &payload)
                                .map(|id| {
                                    mine.push(id);
                                    ledger.lock().unwrap().insert(id, Some(payload));
                                })
                                .err()
                                .map(|e| e.to_string())
                        } else if n.is_multiple_of(7) && mine.len() > 4 {
                            let id = mine.swap_remove((n as usize * 13) % mine.len());
                            ledger.lock().unwrap().insert(id, None);
                            c.remove_chunk(table, id)
                                .map(|_| ())
                                .inspect_err(|_| {
                                    uncertain.lock().unwrap().insert(id);
                                })
                                .err()
                                .map(|e| e.to_string())
                        } else if n.is_multiple_of(3)
                            && !uncertain.lock().unwrap().contains(&mine[(n as usize * 11) % mine.len()])
                        {
                            let id = mine[(n as usize * 11) % mine.len()];
                            let want = ledger.lock().unwrap()[&id].clone();
                            match c.get_chunk(table, id) {
                                Ok((got, _)) if Some(&got) == want.as_ref() => None,
                                Ok((got, _)) => Some(format!(
                                    "chunk {id}: read {:?}, last acknowledged {:?}",
                                    String::from_utf8_lossy(&got),
                                    want.map(|w| String::from_utf8_lossy(&w).into_owned())
                                )),
                                Err(e) => Some(e.to_string()),
                            }
                        } else {
                            let id = mine[(n as usize * 7) % mine.len()];
                            c.put_chunk(table, id, &payload)
                                .map(|_| {
                                    ledger.lock().unwrap().insert(id, Some(payload));
                                })
                                .inspect_err(|_| {
                                    uncertain.lock().unwrap().insert(id);
                                })
                                .err()
                                .map(|e| e.to_string())
                        };
                        match failed {
                            None => {
                                acks.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(e) => errors.lock().unwrap().push(format!("thread {t}, op {n}: {e}")),
                        }
                    }
                })
            })
            .collect();
        Load { stop, handles, ledger, acks, errors, uncertain }
    }

    fn acks(&self) -> u64 {
        self.acks.load(Ordering::Relaxed)
    }

    /// Waits until `more` further operations were acknowledged (at most 30 s).
    fn wait_for(&self, more: u64) {
        let (want, deadline) = (self.acks() + more, Instant::now() + Duration::from_secs(30));
        while self.acks() < want {
            assert!(Instant::now() < deadline, "the load stalled at {} acknowledged operations", self.acks());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the clients; returns the ledger, the errors they saw and the
    /// ids whose last write failed.
    fn finish(self) -> (Payloads, Vec<String>, HashSet<ChunkId>) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
        let ledger = self.ledger.lock().unwrap().clone();
        let errors = self.errors.lock().unwrap().clone();
        let uncertain = self.uncertain.lock().unwrap().clone();
        (ledger, errors, uncertain)
    }
}

/// Every chunk of the ledger holds its last acknowledged payload, and every
/// removed one is absent; returns how many were live and removed.
/// A removed id found holding the payload of a create that failed (so it
/// may have been applied: `errors` name the thread and operation, the
/// payload is made of them) is fine too: that create reused the id.
/// Ids in `uncertain` (a put or remove of theirs failed, so it may or may
/// not have been applied) are not checked.
fn check_ledger(
    c: &mut shoal_client::blocking::Client,
    table: TableId,
    ledger: &Payloads,
    uncertain: &HashSet<ChunkId>,
    errors: &[String],
) -> (usize, usize) {
    let unacknowledged: HashSet<Vec<u8>> = errors
        .iter()
        .filter_map(|e| {
            let (t, rest) = e.strip_prefix("thread ")?.split_once(", op ")?;
            Some(format!("t{t}-n{}", rest.split_once(':')?.0).into_bytes())
        })
        .collect();
    let ids: Vec<ChunkId> = ledger.keys().copied().collect();
    let (mut live, mut removed, mut wrong) = (0, 0, Vec::new());
    for batch in ids.chunks(500) {
        let got = c.get_chunks(table, batch).unwrap();
        for (id, g) in batch.iter().zip(got) {
            match (&ledger[id], g) {
                (Some(want), Ok((payload, _))) if payload == *want => live += 1,
                (None, Err(shoal_client::ReadError::NotFound)) => removed += 1,
                _ if uncertain.contains(id) => {}
                (None, Ok((payload, _))) if unacknowledged.contains(&payload) => {}
                (want, got) => wrong.push(format!(
                    "chunk {id}: acknowledged {:?}, read {:?}",
                    want.as_ref().map(|w| String::from_utf8_lossy(w).into_owned()),
                    got.map(|(p, v)| (String::from_utf8_lossy(&p).into_owned(), v))
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} chunks wrong, e.g. {:?}",
        wrong.len(),
        ledger.len(),
        &wrong[..wrong.len().min(5)]
    );
    (live, removed)
}

/// Runs `shoal migrate` of node `node`'s local ids `lo..=hi` to `to` and
/// waits for its commit.
fn migrate(cluster: &Cluster, node: u16, lo: u64, hi: u64, to: ServerId) -> u64 {
    let (node, lo, hi, to) = (node.to_string(), lo.to_string(), format!("{hi:#x}"), to.0.to_string());
    let out = cluster.cli(&["migrate", "--table", "graph", "--node", &node, "--lo", &lo, "--hi", &hi, "--to", &to]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "migrate failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["state"], "committed", "{v}");
    v["ms"].as_u64().unwrap()
}

fn owner(map: &ClusterMap, table: TableId, node: u16, local: u64) -> ServerId {
    map.chunk_owner(table, ChunkId::new(node, local)).expect("a range holds every id").master
}

/// Starts a 3-server cluster with a chunk table "graph" and a load on it;
/// returns them once the load has written chunks of every server.
fn loaded(name: &str) -> (Root, Cluster, TableId, Load) {
    let root = Root::new(name);
    let cluster = Cluster::start(&root.0, 3, 1, 0);
    let table = cluster.client().create_chunk_table("graph").unwrap();
    cluster.wait_for_map("the chunk ranges", 10, |m| m.chunk_creators(table).count() == 3);
    let load = Load::start(cluster.coordinator, table, 3);
    load.wait_for(6000);
    (root, cluster, table, load)
}

/// A range of one server's own ids (local ids 1 to 2^40, a part of its
/// range: the entry is split) moves to a second server under load, then
/// on to a third, then home; each move commits, the ids keep their numbers
/// and are served by the new server, the source creates no chunks while
/// any part of its own range is away and creates again once it is whole.
#[test]
fn a_chunk_range_moves_under_load_and_back_losing_nothing() {
    let started = Instant::now();
    let (_root, cluster, table, load) = loaded("chunk-migrate-load");
    let map = cluster.map().unwrap();
    let servers: Vec<ServerId> = map.servers.iter().map(|s| s.id).collect();
    let (home, second, third) = (servers[0], servers[1], servers[2]);
    let node = home.0 as u16;
    let hi = 1u64 << 40;
    let ms = migrate(&cluster, node, 1, hi, second);
    let map = cluster.map().unwrap();
    assert_eq!(owner(&map, table, node, 1), second);
    assert_eq!(owner(&map, table, node, hi), second);
    assert_eq!(owner(&map, table, node, hi + 1), home, "the rest of the range stays");
    assert!(!map.chunk_creators(table).any(|s| s == home), "part of its own range is away: it creates nothing");
    load.wait_for(1000);
    let on = migrate(&cluster, node, 1, hi, third);
    assert_eq!(owner(&cluster.map().unwrap(), table, node, 7), third);
    load.wait_for(1000);
    let back = migrate(&cluster, node, 1, hi, home);
    let map = cluster.map().unwrap();
    assert_eq!(
        map.chunk_ranges.iter().filter(|r| r.table == table && r.node == node).count(),
        1,
        "home again, the range is whole: {:?}",
        map.chunk_ranges
    );
    assert!(map.chunk_creators(table).any(|s| s == home), "it creates again");
    load.wait_for(1000);
    let (ledger, errors, uncertain) = load.finish();
    assert!(errors.is_empty(), "{} errors reached the clients: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let of_home = ledger.keys().filter(|id| id.node() == node).count();
    assert!(of_home > 50, "only {of_home} chunks of the moved node in the ledger");
    let mut c = shoal_client::blocking::Client::connect_cluster(cluster.coordinator, ClientConfig::default()).unwrap();
    let (live, removed) = check_ledger(&mut c, table, &ledger, &uncertain, &errors);
    assert!(removed > 20, "only {removed} removed chunks checked");
    // New chunks of the home server take ids it never gave away while its
    // range was away (it created none meanwhile).
    let fresh: Vec<ChunkId> = (0..6).map(|_| c.create_chunk(table, b"after").unwrap()).collect();
    assert!(fresh.iter().any(|id| id.node() == node), "{fresh:?}");
    for id in &fresh {
        assert!(!matches!(ledger.get(id), Some(Some(_))), "{id} was live and handed out again");
    }
    let mut one = shoal_client::blocking::Client::connect(cluster.map().unwrap().server(home).unwrap().native).unwrap();
    assert!(stat(&one.stats().unwrap(), "migration_chunks_sent").unwrap() > 0);
    eprintln!(
        "moves committed in {ms}, {on} and {back} ms; {} chunks checked ({live} live, {removed} removed) in {:.1} s",
        ledger.len(),
        started.elapsed().as_secs_f64()
    );
}

/// A range moves, then its new server is SIGKILLed under load: the crash
/// recovery brings the moved chunks back from the target's log (the copy
/// was durable there before the commit), with their last acknowledged
/// payloads, and chunks removed at the source before or during the move
/// stay removed.
#[test]
fn a_moved_chunk_range_survives_a_crash_of_its_new_server() {
    let (_root, mut cluster, table, load) = loaded("chunk-migrate-crash");
    let map = cluster.map().unwrap();
    let servers: Vec<ServerId> = map.servers.iter().map(|s| s.id).collect();
    let (home, target) = (servers[0], servers[1]);
    let node = home.0 as u16;
    migrate(&cluster, node, 0, shoal_common::ChunkId::MAX_LOCAL, target);
    load.wait_for(1000);
    let idx = cluster.process_of(target);
    cluster.servers[idx].kill().unwrap();
    cluster.servers[idx].wait().unwrap();
    cluster.wait_for_map("the recovery of the target", 30, |m| {
        m.server(target).is_some_and(|s| s.state == ServerState::Down)
            && m.recoveries.is_empty()
            && m.chunk_ranges.iter().all(|c| c.master != target)
    });
    std::thread::sleep(Duration::from_millis(300));
    let (ledger, errors, uncertain) = load.finish();
    // Operations on the killed server's chunks may fail while it is being
    // declared dead (a write in flight to it is not acknowledged); none may
    // be lost.
    eprintln!("{} errors while the target died, {} ids left uncertain: {errors:?}", errors.len(), uncertain.len());
    assert!(uncertain.len() < 20, "{uncertain:?}: {errors:?}");
    let of_home = ledger.keys().filter(|id| id.node() == node).count();
    assert!(of_home > 50, "only {of_home} chunks of the moved node in the ledger");
    let mut c = shoal_client::blocking::Client::connect_cluster(cluster.coordinator, ClientConfig::default()).unwrap();
    let (live, removed) = check_ledger(&mut c, table, &ledger, &uncertain, &errors);
    assert!(removed > 20, "only {removed} removed chunks checked ({live} live)");
    cluster.kill_all();
}

/// The delta of a chunk move: while the copy is under way (the target
/// stopped with SIGSTOP after BEGIN, so the source waits on its first
/// batch) the range is still served, and a client removes and overwrites
/// its chunks, each acknowledged at once. Once the target runs again, the
/// frozen delta sends the overwritten chunks again and removes the ids that
/// went: nothing removed comes back, nothing written is lost.
#[test]
fn chunk_writes_during_the_copy_reach_the_target_in_the_delta() {
    let root = Root::new("chunk-migrate-delta");
    // R = 0: the stopped target is nobody's backup.
    let cluster = Cluster::start_with(&root.0, 3, 0, 0, &["--memory", "256MiB"]);
    let mut c = cluster.client();
    let table = c.create_chunk_table("graph").unwrap();
    cluster.wait_for_map("the chunk ranges", 10, |m| m.chunk_creators(table).count() == 3);
    // 300 chunks of 64 KB of one server (creates go to the servers in
    // turn): a batch of the copy (1 MB) holds 16 of them, so the copy is
    // still under way when the target stops.
    let old = format!("old{}", "y".repeat(64 << 10)).into_bytes();
    let (node, ids) = chunks_of_one_node(&mut c, table, &old, 300);
    let (lo, hi) = (ids.iter().map(|i| i.local()).min().unwrap(), ids.iter().map(|i| i.local()).max().unwrap());
    let map = cluster.map().unwrap();
    let to = map.servers.iter().find(|s| s.id.0 != u64::from(node)).unwrap().id;
    let (node_s, lo_s, hi_s, to_s) = (node.to_string(), lo.to_string(), hi.to_string(), to.0.to_string());
    let args =
        ["migrate", "--no-wait", "--table", "graph", "--node", &node_s, "--lo", &lo_s, "--hi", &hi_s, "--to", &to_s];
    let out = cluster.cli(&args);
    assert!(out.status.success(), "{out:?}");
    let target = cluster.process_of(to);
    let log = cluster.root.join(format!("server-{target}/log"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("receiving chunk ids") {
        assert!(Instant::now() < deadline, "the target never began receiving");
        std::thread::sleep(Duration::from_millis(1));
    }
    let pid = cluster.servers[target].id();
    signal(pid, "-STOP");
    let started = Instant::now();
    let mut changed = 0;
    for (i, id) in ids.iter().enumerate().take(200) {
        if started.elapsed() > Duration::from_millis(400) {
            break;
        }
        if i % 2 == 0 {
            c.remove_chunk(table, *id).unwrap();
        } else {
            c.put_chunk(table, *id, b"new").unwrap();
        }
        changed += 1;
    }
    signal(pid, "-CONT");
    assert!(changed >= 40, "only {changed} writes in 400 ms while the range was being copied");
    let map = cluster.wait_for_map("the move committed", 30, |m| {
        m.chunk_migrations.is_empty() && m.chunk_owner(table, ids[0]).is_some_and(|r| r.master == to)
    });
    assert_eq!(owner(&map, table, node, hi), to);
    for (i, id) in ids.iter().enumerate() {
        let got = c.get_chunk(table, *id);
        match i {
            i if i < changed && i % 2 == 0 => assert!(
                matches!(got, Err(shoal_client::ReadError::NotFound)),
                "chunk {i} removed during the copy came back: {:?}",
                got.map(|v| v.1)
            ),
            i if i < changed => assert_eq!(got.unwrap().0, b"new", "chunk {i} written during the copy"),
            i => assert_eq!(got.unwrap().0, old, "chunk {i}"),
        }
    }
    let mut at = shoal_client::blocking::Client::connect(map.server(to).unwrap().native).unwrap();
    let removed = stat(&at.stats().unwrap(), "migration_chunks_removed").unwrap();
    assert!(removed > 0, "no chunk was removed at the target by the delta");
    eprintln!("{changed} chunk writes and removes during the copy; the target removed {removed} for the delta");
    let source_log = cluster.root.join(format!("server-{}/log", cluster.process_of(ServerId(u64::from(node)))));
    for line in std::fs::read_to_string(source_log).unwrap().lines().filter(|l| l.contains("migration")) {
        eprintln!("source: {line}");
    }
}

/// Creates chunks of `payload` until `n` of them are of one node (creates
/// go to the servers in turn); returns that node and those ids.
fn chunks_of_one_node(
    c: &mut shoal_client::blocking::Client,
    table: TableId,
    payload: &[u8],
    n: usize,
) -> (u16, Vec<ChunkId>) {
    let node = c.create_chunk(table, payload).unwrap().node();
    let mut ids = Vec::new();
    while ids.len() < n {
        let made = c.create_chunks(table, &[payload; 10]).unwrap();
        ids.extend(made.into_iter().filter(|id| id.node() == node));
    }
    (node, ids)
}

/// A server's whole range moves under load, with 20 MB of its chunks so
/// that the copy takes a while, and the source (`source`) or the target is
/// SIGKILLed as soon as the target is receiving. The move aborts with the
/// victim's death; the range is recovered (from the source's log: the
/// target never served it) and every acknowledged write, of the load and
/// of the preloaded chunks, is there.
fn kill_mid_move(name: &str, source: bool) {
    let root = Root::new(name);
    let mut cluster = Cluster::start_with(&root.0, 3, 1, 0, &["--memory", "256MiB"]);
    let mut c = cluster.client();
    let table = c.create_chunk_table("graph").unwrap();
    cluster.wait_for_map("the chunk ranges", 10, |m| m.chunk_creators(table).count() == 3);
    let old = format!("old{}", "y".repeat(64 << 10)).into_bytes();
    let (node, preloaded) = chunks_of_one_node(&mut c, table, &old, 300);
    let from = ServerId(u64::from(node));
    let to = cluster.map().unwrap().servers.iter().find(|s| s.id != from).unwrap().id;
    let load = Load::start(cluster.coordinator, table, 3);
    load.wait_for(2000);
    let (node_s, to_s, hi) = (node.to_string(), to.0.to_string(), ChunkId::MAX_LOCAL.to_string());
    let out = cluster.cli(&[
        "migrate",
        "--no-wait",
        "--table",
        "graph",
        "--node",
        &node_s,
        "--lo",
        "0",
        "--hi",
        &hi,
        "--to",
        &to_s,
    ]);
    assert!(out.status.success(), "{out:?}");
    let log = cluster.root.join(format!("server-{}/log", cluster.process_of(to)));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("receiving chunk ids") {
        assert!(Instant::now() < deadline, "the target never began receiving");
        std::thread::sleep(Duration::from_millis(1));
    }
    let moving = cluster.map().unwrap().chunk_migrations.len();
    let victim = if source { from } else { to };
    let idx = cluster.process_of(victim);
    let _ = cluster.servers[idx].kill();
    let _ = cluster.servers[idx].wait();
    let map = cluster.wait_for_map("the victim declared dead and recovered", 30, |m| {
        m.server(victim).is_some_and(|s| s.state == ServerState::Down)
            && m.chunk_migrations.is_empty()
            && m.recoveries.is_empty()
    });
    let now = owner(&map, table, node, preloaded[0].local());
    match source {
        true => assert_ne!(now, from, "the source's range was recovered elsewhere"),
        false => assert_eq!(now, from, "the aborted move left the range at its source"),
    }
    std::thread::sleep(Duration::from_millis(300));
    let (ledger, errors, uncertain) = load.finish();
    eprintln!(
        "{} killed with {moving} move(s) in progress; {} errors, {} uncertain",
        victim,
        errors.len(),
        uncertain.len()
    );
    assert_eq!(moving, 1, "the victim was killed while the move was in progress");
    assert!(uncertain.len() < 20, "{uncertain:?}: {errors:?}");
    let mut c = shoal_client::blocking::Client::connect_cluster(cluster.coordinator, ClientConfig::default()).unwrap();
    check_ledger(&mut c, table, &ledger, &uncertain, &errors);
    for batch in preloaded.chunks(50) {
        for got in c.get_chunks(table, batch).unwrap() {
            assert_eq!(got.unwrap().0, old);
        }
    }
    cluster.kill_all();
}

#[test]
fn a_chunk_move_whose_target_is_killed_mid_copy_loses_nothing() {
    kill_mid_move("chunk-migrate-kill-target", false);
}

#[test]
fn a_chunk_move_whose_source_is_killed_mid_copy_loses_nothing() {
    kill_mid_move("chunk-migrate-kill-source", true);
}

/// A move releases the locks of the chunks it moves, safely, as a crash
/// recovery does (`docs/chunks.md`, "Migration of id ranges"): the
/// holder's renewal and fenced put at the new server answer `Lost` (the
/// put writes nothing), and the new server grants the chunk to nobody
/// until the longest lease has passed since the copy, then grants it.
#[test]
fn a_moved_chunk_range_releases_its_locks_safely() {
    let root = Root::new("chunk-migrate-locks");
    let max_lease = Duration::from_millis(2000);
    let cluster = Cluster::start_with(&root.0, 2, 1, 0, &["--chunk-lock-max-lease-ms", "2000"]);
    let mut c = cluster.client();
    let table = c.create_chunk_table("graph").unwrap();
    cluster.wait_for_map("the chunk ranges", 10, |m| m.chunk_creators(table).count() == 2);
    let id = c.create_chunk(table, b"locked").unwrap();
    let lock = c.try_lock_chunk(table, id, shoal_client::LockMode::Exclusive, max_lease).unwrap();
    let map = cluster.map().unwrap();
    let to = map.servers.iter().find(|s| s.id.0 != u64::from(id.node())).unwrap().id;
    migrate(&cluster, id.node(), 0, ChunkId::MAX_LOCAL, to);
    let moved = Instant::now();
    assert!(matches!(c.renew_chunk_lock(&lock), Err(shoal_client::LockError::Lost)));
    assert!(matches!(c.put_chunk_locked(&lock, b"stale"), Err(shoal_client::LockError::Lost)));
    let mut other = cluster.client();
    other.set_lock_owner(lock.owner.wrapping_add(1));
    let busy = other.try_lock_chunk(table, id, shoal_client::LockMode::Exclusive, max_lease);
    if moved.elapsed() < max_lease / 2 {
        assert!(matches!(busy, Err(shoal_client::LockError::Busy { .. })), "{busy:?}");
    }
    let got =
        other.lock_chunk(table, id, shoal_client::LockMode::Exclusive, max_lease, Duration::from_secs(10)).unwrap();
    let waited = moved.elapsed();
    assert!(waited >= max_lease - Duration::from_millis(300), "granted {waited:?} after the move");
    assert!(waited < max_lease * 2, "granted only {waited:?} after the move: the graces ran one after the other");
    assert!(got.token > lock.token, "tokens grow: {} then {}", lock.token, got.token);
    assert_eq!(c.get_chunk(table, id).unwrap().0, b"locked", "the stale fenced put wrote nothing");
    eprintln!("the moved chunk was granted again {waited:?} after the commit (longest lease {max_lease:?})");
}
