//! Live tablet migration on real processes (`docs/migration.md`): a tablet
//! moved with `shoal migrate` under a write and read load keeps every
//! acknowledged write, and versions keep growing; a move whose target is
//! SIGKILLed in the middle loses nothing either.

mod common;

use common::{signal, Cluster, Root};
use shoal_client::blocking::Client;
use shoal_client::{ClientConfig, TableId};
use shoal_cluster::{ClusterMap, CoordinatorAddrs, ServerId, ServerState, TabletInfo};
use std::collections::HashMap;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per key, the last acknowledged value and version.
type Acked = HashMap<Vec<u8>, (Vec<u8>, u64)>;
/// Acknowledged writes, shared by the writers.
type Ledger = Arc<Mutex<Acked>>;

/// What a [`Load`] did.
struct Outcome {
    ledger: Acked,
    acks: u64,
    reads: u64,
    /// The longest single request (retries included) any client saw.
    longest: Duration,
    /// The longest read any reader saw.
    longest_read: Duration,
    failures: u64,
}

/// Writers and readers of one table; each op's latency (retries included)
/// is the longest pause its client saw.
struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
    ledger: Ledger,
    acks: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
    longest_us: Arc<AtomicU64>,
    longest_read_us: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
}

impl Load {
    fn start(
        coordinator: CoordinatorAddrs,
        config: ClientConfig,
        table: TableId,
        writers: usize,
        readers: usize,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::default();
        let (acks, reads, longest_us, failures): (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>) =
            Default::default();
        let longest_read_us: Arc<AtomicU64> = Arc::default();
        let mut handles = Vec::new();
        for t in 0..writers + readers {
            let (stop, ledger, acks, reads, longest, failures) = (
                stop.clone(),
                ledger.clone(),
                Arc::clone(&acks),
                Arc::clone(&reads),
                Arc::clone(&longest_us),
                Arc::clone(&failures),
            );
            let (coordinator, config) = (coordinator.clone(), config.clone());
            let longest_read = longest_read_us.clone();
            let writer = t < writers;
            handles.push(std::thread::spawn(move || {
                let mut c = Client::connect_cluster(coordinator.clone(), config.clone()).unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let started = Instant::now();
                    if writer {
                        let key = format!("w{t}-{}", n % 400).into_bytes();
                        let value = format!("t{t}-n{n}").into_bytes();
                        match c.write(table, &key, &value) {
                            Ok(v) => {
                                ledger.lock().unwrap().insert(key, (value, v.0));
                                acks.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                eprintln!("writer {t}: {e}");
                                c = Client::connect_cluster(coordinator.clone(), config.clone()).unwrap();
                            }
                        }
                    } else {
                        let key = format!("pre-{}", n % 2000).into_bytes();
                        match c.read(table, &key) {
                            Ok(got) => {
                                assert_eq!(
                                    got.0,
                                    format!("value-{}", n % 2000).into_bytes(),
                                    "a preloaded key read back wrong"
                                );
                                reads.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                eprintln!("reader {t}: {e}");
                                c = Client::connect_cluster(coordinator.clone(), config.clone()).unwrap();
                            }
                        }
                    }
                    longest.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    if !writer {
                        longest_read.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    }
                }
            }));
        }
        Load { stop, handles, ledger, acks, reads, longest_us, longest_read_us, failures }
    }

    fn finish(self) -> Outcome {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
        let ledger = self.ledger.lock().unwrap().clone();
        Outcome {
            ledger,
            acks: self.acks.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            longest: Duration::from_micros(self.longest_us.load(Ordering::Relaxed)),
            longest_read: Duration::from_micros(self.longest_read_us.load(Ordering::Relaxed)),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// Runs `shoal migrate` against `cluster` with `args`.
fn migrate(cluster: &Cluster, args: &[&str]) -> Output {
    cluster.cli(&[&["migrate"], args].concat())
}

/// Starts moving `tablet` of table `moving` to `to` (`--no-wait`) and
/// returns once the target's log says it is receiving: the copy has begun.
fn start_move_and_wait_for_the_copy(cluster: &Cluster, tablet: &TabletInfo, to: ServerId) {
    let start = format!("{:#x}", tablet.start_hash);
    let out = migrate(cluster, &["--no-wait", "--table", "moving", "--start", &start, "--to", &to.0.to_string()]);
    assert!(out.status.success(), "{out:?}");
    let log = cluster.root.join(format!("server-{}/log", cluster.process_of(to)));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("receiving table") {
        assert!(Instant::now() < deadline, "the target never began receiving");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The delta phase: while the copy is under way (the target stopped with
/// SIGSTOP after BEGIN, so the source waits on its first batch) the tablet
/// is still served, and clients remove and overwrite its keys. Once the
/// target runs again, the frozen delta sends the overwritten objects again
/// and removes the keys that went (GONE): nothing removed comes back,
/// nothing written is lost, and the writes were not paused for the copy.
#[test]
fn writes_during_the_copy_reach_the_target_in_the_delta() {
    let root = Root::new("migrate-delta");
    // R = 0: the stopped target is nobody's backup, so the writes below
    // wait for nothing but the source.
    let cluster = Cluster::start(&root.0, 3, 0, 0);
    let mut c = cluster.client();
    let table = c.create_table("moving").unwrap();
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);
    let in_tablet = |k: &[u8]| tablet.contains(table, shoal_client::key_hash(table, k));
    // About 1,000 keys of 2 KB in the tablet: the first batch (1 MB) holds
    // about half of them.
    let filler = "y".repeat(2000);
    let keys: Vec<Vec<u8>> =
        (0..20_000).map(|i| format!("d-{i}").into_bytes()).filter(|k| in_tablet(k)).take(1000).collect();
    for k in &keys {
        c.write(table, k, format!("old{filler}").as_bytes()).unwrap();
    }
    let target = cluster.process_of(to);
    start_move_and_wait_for_the_copy(&cluster, &tablet, to);
    let pid = cluster.servers[target].id();
    signal(pid, "-STOP");
    // The source still serves the tablet: keys removed and overwritten,
    // each acknowledged at once, for at most 400 ms (a target stopped for
    // much longer would be declared dead).
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    let mut changed = 0;
    for (i, k) in keys.iter().enumerate().take(600) {
        if started.elapsed() > Duration::from_millis(400) {
            break;
        }
        let t = Instant::now();
        if i % 2 == 0 {
            c.remove(table, k).unwrap();
        } else {
            c.write(table, k, b"new").unwrap();
        }
        longest = longest.max(t.elapsed());
        changed += 1;
    }
    let served_in = started.elapsed();
    signal(pid, "-CONT");
    assert!(changed >= 40, "only {changed} writes in 400 ms while the tablet was being copied");
    let map = cluster.wait_for_map("the move committed", 30, |m| {
        m.migrations.is_empty()
            && m.tablets.iter().any(|t| t.table == table && t.start_hash == tablet.start_hash && t.master == to)
    });
    assert!(map.tablets.iter().any(|t| t.table == table && t.start_hash == tablet.start_hash && t.master == to));
    eprintln!("{changed} writes and removes served during the copy in {served_in:?}, longest {longest:?}");
    for (i, k) in keys.iter().enumerate() {
        let got = c.read(table, k);
        match i {
            i if i < changed && i % 2 == 0 => assert!(
                matches!(got, Err(shoal_client::ReadError::NotFound)),
                "key {i} removed during the copy came back: {:?}",
                got.map(|v| v.1)
            ),
            i if i < changed => assert_eq!(got.unwrap().0, b"new", "key {i} written during the copy"),
            i => assert_eq!(got.unwrap().0, format!("old{filler}").into_bytes(), "key {i}"),
        }
    }
    // The target removed keys for the delta, and the source was frozen
    // for part of the move only.
    let server = |id: ServerId| map.server(id).unwrap().native;
    let stats = |id| Client::connect(server(id)).unwrap().stats().unwrap();
    let removed = common::stat(&stats(to), "migration_objects_removed").unwrap();
    assert!(removed > 0, "no key was removed at the target by the delta");
    let frozen_ms = common::stat(&stats(tablet.master), "migration_frozen_ms").unwrap();
    eprintln!("the target removed {removed} keys for the delta; the source was frozen for {frozen_ms} ms");
}

/// The first tablet of `table` and a server (up) that is not its master.
fn tablet_and_target(map: &ClusterMap, table: TableId) -> (TabletInfo, ServerId) {
    let t = map.tablets.iter().filter(|t| t.table == table).min_by_key(|t| t.start_hash).unwrap().clone();
    let to = map.servers.iter().find(|s| s.id != t.master && s.state == ServerState::Up).unwrap().id;
    (t, to)
}

/// Checks every ledger entry reads back with its value, at a version at
/// least the acknowledged one.
fn check_ledger(c: &mut Client, table: TableId, ledger: &Acked) {
    let mut lost = 0;
    for (k, (v, version)) in ledger {
        match c.read(table, k) {
            Ok(got) if &got.0 == v => assert!(got.1 .0 >= *version, "key {k:?}: version went back"),
            Ok(got) => {
                // A later write, sent but not acknowledged, may have landed.
                let n = |s: &[u8]| String::from_utf8_lossy(s).rsplit('n').next().unwrap().parse::<u64>().unwrap();
                assert!(n(&got.0) > n(v), "key {k:?}: acknowledged {v:?}, found {:?}", got.0);
            }
            Err(e) => {
                lost += 1;
                eprintln!("key {:?}: {e}", String::from_utf8_lossy(k));
            }
        }
    }
    assert_eq!(lost, 0, "{lost} of {} acknowledged writes lost", ledger.len());
}

/// Preloads 2000 keys `pre-i` = `value-i` (each `pad` bytes longer) and a
/// key written then removed; returns that removed key's last version.
fn preload(c: &mut Client, table: TableId, pad: usize) -> u64 {
    let filler = "x".repeat(pad);
    for i in 0..2000 {
        let value = format!("value-{i}");
        c.write(table, format!("pre-{i}").as_bytes(), value.as_bytes()).unwrap();
        if pad > 0 {
            c.write(table, format!("big-{i}").as_bytes(), format!("{value}{filler}").as_bytes()).unwrap();
        }
    }
    let mut last = 0;
    for i in 0..5 {
        last = c.write(table, b"gone", format!("g{i}").as_bytes()).unwrap().0;
    }
    c.remove(table, b"gone").unwrap();
    last
}

#[test]
fn migrate_under_load_keeps_every_acknowledged_write_and_versions_grow() {
    let root = Root::new("migrate-load");
    let cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("moving").unwrap();
    let gone_version = preload(&mut c, table, 0);
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);

    let load = Load::start(cluster.coordinator.into(), cluster.client_config(), table, 3, 2);
    std::thread::sleep(Duration::from_millis(700));
    let before = load.acks.load(Ordering::Relaxed);
    let started = Instant::now();
    let out = migrate(
        &cluster,
        &["--table", "moving", "--start", &format!("{:#x}", tablet.start_hash), "--to", &to.0.to_string()],
    );
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "shoal migrate failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["state"], "committed", "{line}");
    std::thread::sleep(Duration::from_millis(700));
    let Outcome { ledger, acks, reads, longest, longest_read, failures } = load.finish();
    eprintln!(
        "moved in {took:?}; {acks} writes acknowledged ({before} before the move), {reads} reads; \
         longest pause a client saw: {longest:?} (a reader: {longest_read:?}); {failures} failed requests"
    );
    assert!(acks > before, "writes went on after the move");
    assert_eq!(failures, 0, "clients retry a moving tablet transparently");

    let map = cluster.map().unwrap();
    assert!(map.migrations.is_empty());
    let now = map.tablets.iter().find(|t| t.table == table && t.start_hash == tablet.start_hash).unwrap();
    assert_eq!((now.master, now.end_hash), (to, tablet.end_hash), "the tablet is the target's");

    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..2000 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
    // Versions keep growing: past every version the source gave the key,
    // also for a key it had removed.
    for (k, (_, version)) in ledger.iter().take(200) {
        let v = c.write(table, k, b"after").unwrap();
        assert!(v.0 > *version, "key {k:?}: version {} after the move, {version} before", v.0);
    }
    let v = c.write(table, b"gone", b"back").unwrap();
    assert!(v.0 > gone_version, "a removed key comes back at version {} <= {gone_version}", v.0);

    // Bad requests get clear errors.
    let bad = migrate(&cluster, &["--table", "nope", "--start", "0", "--to", &to.0.to_string()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stdout).contains("no table named 'nope'"), "{bad:?}");
    let bad = migrate(&cluster, &["--table", "moving", "--start", "0x1234", "--to", &to.0.to_string()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stdout).contains("no tablet starting at"), "{bad:?}");
    let bad = migrate(&cluster, &["--table", "moving", "--start", &format!("{:#x}", tablet.start_hash), "--to", "99"]);
    assert!(String::from_utf8_lossy(&bad.stdout).contains("no server 99"), "{bad:?}");
    let bad = migrate(
        &cluster,
        &["--table", "moving", "--start", &format!("{:#x}", tablet.start_hash), "--to", &to.0.to_string()],
    );
    assert!(String::from_utf8_lossy(&bad.stdout).contains("masters that tablet already"), "{bad:?}");
}

#[test]
fn migrate_to_a_target_killed_mid_move_loses_nothing() {
    let root = Root::new("migrate-kill");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("moving").unwrap();
    // About 16 MB, so that the copy takes a while.
    preload(&mut c, table, 8 << 10);
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);

    let load = Load::start(cluster.coordinator.into(), cluster.client_config(), table, 2, 1);
    std::thread::sleep(Duration::from_millis(500));
    // Killed as soon as it is receiving: the copy has megabytes to go.
    start_move_and_wait_for_the_copy(&cluster, &tablet, to);
    let moving = cluster.map().unwrap().migrations.len();
    let victim = cluster.process_of(to);
    let _ = cluster.servers[victim].kill();
    let _ = cluster.servers[victim].wait();
    let map = cluster.wait_for_map("the target declared dead and the move over", 30, |m| {
        m.server(to).is_some_and(|s| s.state == ServerState::Down) && m.migrations.is_empty() && m.recoveries.is_empty()
    });
    let owner = map.tablets.iter().find(|t| t.table == table && t.start_hash == tablet.start_hash).unwrap().master;
    eprintln!("target killed with {moving} move(s) in progress; the tablet is now server {owner}'s");
    std::thread::sleep(Duration::from_millis(500));
    let Outcome { ledger, acks, longest, failures, .. } = load.finish();
    eprintln!("{acks} writes acknowledged; longest pause a client saw: {longest:?}; {failures} failed requests");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..2000 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
    assert_eq!(moving, 1, "the target was killed while the move was in progress");
    assert_eq!(owner, tablet.master, "the aborted move left the tablet at its source");
}

#[test]
fn migrate_from_a_source_killed_mid_move_loses_nothing() {
    let root = Root::new("migrate-kill-source");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("moving").unwrap();
    preload(&mut c, table, 8 << 10);
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);

    let load = Load::start(cluster.coordinator.into(), cluster.client_config(), table, 2, 0);
    std::thread::sleep(Duration::from_millis(500));
    start_move_and_wait_for_the_copy(&cluster, &tablet, to);
    let moving = cluster.map().unwrap().migrations.len();
    let victim = cluster.process_of(tablet.master);
    let _ = cluster.servers[victim].kill();
    let _ = cluster.servers[victim].wait();
    let map = cluster.wait_for_map("the source declared dead and recovered", 30, |m| {
        m.server(tablet.master).is_some_and(|s| s.state == ServerState::Down)
            && m.migrations.is_empty()
            && m.recoveries.is_empty()
    });
    assert!(map.tablets.iter().filter(|t| t.table == table).all(|t| t.master != tablet.master));
    std::thread::sleep(Duration::from_millis(500));
    let Outcome { ledger, acks, longest, .. } = load.finish();
    eprintln!("source killed with {moving} move(s) in progress; {acks} writes acknowledged; longest pause {longest:?}");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..2000 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
    assert_eq!(moving, 1, "the source was killed while the move was in progress");
}

/// The coordinator SIGKILLed in the middle of a copy and started again on
/// its state: the move is in the saved state, so the source's commit (or,
/// past its patience, its abort) reaches the new process; either way the
/// tablet has one master and no acknowledged write is lost.
#[test]
fn migrate_with_the_coordinator_killed_mid_move_loses_nothing() {
    let root = Root::new("migrate-kill-coordinator");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("moving").unwrap();
    preload(&mut c, table, 8 << 10);
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);

    let load = Load::start(cluster.coordinator.into(), cluster.client_config(), table, 2, 1);
    std::thread::sleep(Duration::from_millis(500));
    start_move_and_wait_for_the_copy(&cluster, &tablet, to);
    let mut coordinator = cluster.coordinator_proc.take().unwrap();
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    std::thread::sleep(Duration::from_millis(300));
    cluster.start_coordinator();
    let map = cluster.wait_for_map("the move over", 30, |m| m.migrations.is_empty());
    let owner = map.tablets.iter().find(|t| t.table == table && t.start_hash == tablet.start_hash).unwrap().master;
    assert!(owner == to || owner == tablet.master, "the tablet is server {owner}'s");
    assert!(map.servers.iter().all(|s| s.state == ServerState::Up), "no server was declared dead: {map:?}");
    std::thread::sleep(Duration::from_millis(500));
    let Outcome { ledger, acks, longest, failures, .. } = load.finish();
    eprintln!(
        "coordinator killed mid-move; the tablet is server {owner}'s ({}); {acks} writes acknowledged; longest \
         pause {longest:?}; {failures} failed requests",
        if owner == to { "committed" } else { "aborted" }
    );
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..2000 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
}

/// Runs `shoal tablet` against `cluster` with `args`.
fn tablet_cmd(cluster: &Cluster, args: &[&str]) -> Output {
    cluster.cli(&[&["tablet"], args].concat())
}

#[test]
fn split_move_back_and_merge_under_load_keep_every_acknowledged_write() {
    let root = Root::new("migrate-split");
    let cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("parts").unwrap();
    preload(&mut c, table, 0);
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);
    let of_table = |m: &ClusterMap| {
        let mut v: Vec<(u64, u64, ServerId)> =
            m.tablets.iter().filter(|t| t.table == table).map(|t| (t.start_hash, t.end_hash, t.master)).collect();
        v.sort();
        v
    };
    let original = of_table(&map);
    let load = Load::start(cluster.coordinator.into(), cluster.client_config(), table, 2, 1);
    std::thread::sleep(Duration::from_millis(300));

    let mid = tablet.start_hash + (tablet.end_hash - tablet.start_hash) / 2 + 1;
    let at = format!("{mid:#x}");
    let out = tablet_cmd(&cluster, &["split", "--table", "parts", "--at", &at]);
    assert!(out.status.success(), "{out:?}");
    let split = of_table(&cluster.map().unwrap());
    assert!(
        split.contains(&(tablet.start_hash, mid - 1, tablet.master))
            && split.contains(&(mid, tablet.end_hash, tablet.master))
    );
    assert_eq!(split.len(), original.len() + 1);

    let out = migrate(&cluster, &["--table", "parts", "--start", &at, "--to", &to.0.to_string()]);
    assert!(out.status.success(), "{out:?}");
    std::thread::sleep(Duration::from_millis(200));
    let refused = tablet_cmd(&cluster, &["merge", "--table", "parts", "--at", &at]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("move one first"), "{refused:?}");
    let out = migrate(&cluster, &["--table", "parts", "--start", &at, "--to", &tablet.master.0.to_string()]);
    assert!(out.status.success(), "{out:?}");
    std::thread::sleep(Duration::from_millis(200));
    let out = tablet_cmd(&cluster, &["merge", "--table", "parts", "--at", &at]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(of_table(&cluster.map().unwrap()), original, "split and merged back");
    let listed = tablet_cmd(&cluster, &["list", "--table", "parts"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), original.len());

    std::thread::sleep(Duration::from_millis(300));
    let Outcome { ledger, acks, longest, failures, .. } = load.finish();
    eprintln!("{acks} writes acknowledged; longest pause {longest:?}; {failures} failed requests");
    assert_eq!(failures, 0);
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    for i in 0..2000 {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("value-{i}").into_bytes());
    }
}

/// Writes 600 keys `back-i` = `old-i` and returns those of them in
/// `tablet`.
fn keys_in(c: &mut Client, table: TableId, tablet: &TabletInfo) -> Vec<Vec<u8>> {
    let mut mine = Vec::new();
    for i in 0..600 {
        let key = format!("back-{i}").into_bytes();
        c.write(table, &key, format!("old-{i}").as_bytes()).unwrap();
        let h = shoal_client::key_hash(table, &key).0;
        if tablet.start_hash <= h && h <= tablet.end_hash {
            mine.push(key);
        }
    }
    mine
}

/// Moves `tablet` of `name` away to `to`, removes every other key of
/// `keys` and overwrites the rest there, and moves it back: its first
/// master's log now holds old entries of the tablet from before it left.
fn away_change_and_back(
    cluster: &Cluster,
    name: &str,
    table: TableId,
    tablet: &TabletInfo,
    to: ServerId,
    keys: &[Vec<u8>],
) {
    let start = format!("{:#x}", tablet.start_hash);
    let out = migrate(cluster, &["--table", name, "--start", &start, "--to", &to.0.to_string()]);
    assert!(out.status.success(), "{out:?}");
    let mut c = cluster.client();
    for (i, key) in keys.iter().enumerate() {
        if i % 2 == 0 {
            c.remove(table, key).unwrap();
        } else {
            c.write(table, key, b"new").unwrap();
        }
    }
    let out = migrate(cluster, &["--table", name, "--start", &start, "--to", &tablet.master.0.to_string()]);
    assert!(out.status.success(), "{out:?}");
}

/// What `away_change_and_back` left: removed keys absent, the others new.
fn check_changed(c: &mut Client, table: TableId, keys: &[Vec<u8>]) {
    let mut wrong = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let got = c.read(table, key);
        let ok = match (i % 2 == 0, &got) {
            (true, Err(shoal_client::ReadError::NotFound)) => true,
            (false, Ok(v)) => v.0 == b"new",
            _ => false,
        };
        if !ok {
            wrong.push(format!("{}: {got:?}", String::from_utf8_lossy(key)));
        }
    }
    assert!(wrong.is_empty(), "{} of {} keys wrong, e.g. {:?}", wrong.len(), keys.len(), &wrong[..wrong.len().min(5)]);
}

/// RAMCloud's reason for a log position per tablet assignment: a tablet
/// that leaves a master and comes back finds its old entries still in
/// that master's log. A crash recovery of that master must not replay
/// them, or a key removed while the tablet was away comes back.
#[test]
fn a_tablet_that_moved_away_and_back_recovers_without_its_old_entries() {
    let root = Root::new("migrate-back-crash");
    let mut cluster = Cluster::start(&root.0, 3, 1, 0);
    let mut c = cluster.client();
    let table = c.create_table("back").unwrap();
    let (tablet, to) = tablet_and_target(&cluster.map().unwrap(), table);
    let keys = keys_in(&mut c, table, &tablet);
    assert!(keys.len() > 50, "only {} keys in the tablet", keys.len());
    away_change_and_back(&cluster, "back", table, &tablet, to, &keys);
    check_changed(&mut c, table, &keys);

    let victim = cluster.process_of(tablet.master);
    let _ = cluster.servers[victim].kill();
    let _ = cluster.servers[victim].wait();
    cluster.wait_for_map("the tablet's master declared dead and recovered", 30, |m| {
        m.server(tablet.master).is_some_and(|s| s.state == ServerState::Down) && m.recoveries.is_empty()
    });
    check_changed(&mut cluster.client(), table, &keys);
}

/// The same after a whole-cluster restart: each server replays its own
/// earlier log, which must skip the entries of tablets it no longer
/// masters and those from before it last became a tablet's master.
#[test]
fn a_tablet_that_moved_away_and_back_restarts_without_its_old_entries() {
    let root = Root::new("migrate-back-restart");
    let mut cluster = Cluster::start(&root.0, 3, 2, 0);
    let port = cluster.coordinator.port();
    let mut c = cluster.client();
    let table = c.create_table("back").unwrap();
    let map = cluster.map().unwrap();
    let (tablet, to) = tablet_and_target(&map, table);
    let keys = keys_in(&mut c, table, &tablet);
    // A second tablet goes away for good: its old master must not load it
    // again at the restart.
    let other = map.tablets.iter().filter(|t| t.table == table).max_by_key(|t| t.start_hash).unwrap().clone();
    let elsewhere = map.servers.iter().find(|s| s.id != other.master).unwrap().id;
    let out = migrate(
        &cluster,
        &["--table", "back", "--start", &format!("{:#x}", other.start_hash), "--to", &elsewhere.0.to_string()],
    );
    assert!(out.status.success(), "{out:?}");
    away_change_and_back(&cluster, "back", table, &tablet, to, &keys);
    check_changed(&mut c, table, &keys);
    // The 600 keys less those removed, once the last move's source has
    // forgotten its copy (it does so after the commit, on its own time).
    let before = 600 - keys.len().div_ceil(2) as u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while per_server_objects(&cluster).iter().sum::<u64>() != before {
        assert!(Instant::now() < deadline, "objects per server: {:?}, not {before}", per_server_objects(&cluster));
        std::thread::sleep(Duration::from_millis(50));
    }

    let old_logs: Vec<_> = cluster.map().unwrap().servers.iter().map(|s| s.log).collect();
    cluster.kill_all();
    let again = Cluster::start(&root.0, 3, 2, port);
    again.wait_for_map("every server back with a new log and up", 60, |m| {
        m.servers.iter().all(|s| s.state == ServerState::Up && !old_logs.contains(&s.log))
    });
    check_changed(&mut again.client(), table, &keys);
    let after = per_server_objects(&again);
    assert_eq!(after.iter().sum::<u64>(), before, "objects per server after the restart: {after:?}");
}

/// The `objects` statistic of every server of the map.
fn per_server_objects(cluster: &Cluster) -> Vec<u64> {
    let map = cluster.map().unwrap();
    map.servers
        .iter()
        .filter(|s| s.state == ServerState::Up)
        .map(|s| common::stat(&Client::connect(s.native).unwrap().stats().unwrap(), "objects").unwrap())
        .collect()
}
