//! Backup failure against real backups over TCP: the closed segments whose
//! replica was on a lost backup are copied from the store to other backups
//! until each is closed on R live ones again (checked by listing and reading
//! what the backups serve) at the next replica epoch, with its floor
//! recorded, writes go on meanwhile, and a segment the cleaner freed before
//! its copy is not copied.

mod master_common;

use master_common::*;
use parking_lot::Mutex;
use shoal_cluster::ServerId;
use shoal_common::{LogId, SegmentId};
use shoal_engine::format;
use shoal_engine::Store;
use shoal_replication::backup::{Backup, BackupConfig};
use shoal_replication::master::{FloorRecorder, ReplicationMode, Replicator, ReplicatorConfig};
use shoal_replication::restore;
use shoal_replication::wire::ReplicaState;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const LOG: LogId = LogId(7);

struct Setup {
    rep: Arc<Replicator>,
    _tee: Arc<Tee>,
    store: Arc<Store>,
    backups: Vec<Option<Backup>>,
    addrs: Vec<SocketAddr>,
    /// Segments the replicator asked the store for.
    asked: Arc<Mutex<Vec<SegmentId>>>,
    _dirs: Vec<tempfile::TempDir>,
}

fn setup(backups: usize, mode: ReplicationMode) -> Setup {
    setup_with(backups, mode, None)
}

fn setup_with(backups: usize, mode: ReplicationMode, floors: Option<FloorRecorder>) -> Setup {
    let rep = Replicator::start(ReplicatorConfig {
        master: ServerId(1),
        log: LOG,
        log_version: 1,
        segment_bytes: SEGMENT as u32,
        mode,
        replica_timeout: Duration::from_millis(1000),
        floor_recorder: floors,
    });
    let tee = Arc::new(Tee { rep: rep.clone(), log: Mutex::default() });
    let store = Arc::new(store(&tee));
    let mut dirs = Vec::new();
    let mut bs = Vec::new();
    for _ in 0..backups {
        let dir = tempfile::tempdir().unwrap();
        let mut c = BackupConfig::new("127.0.0.1:0".parse().unwrap(), dir.path());
        c.segment_bytes = SEGMENT as u32;
        c.buffers = 8;
        c.flush_limit = 6;
        bs.push(Some(Backup::start(c).unwrap()));
        dirs.push(dir);
    }
    let addrs = bs.iter().map(|b| b.as_ref().unwrap().local_addr()).collect();
    Setup { rep, _tee: tee, store, backups: bs, addrs, asked: Arc::default(), _dirs: dirs }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

impl Setup {
    fn list(&self, which: &[usize]) -> Vec<(ServerId, SocketAddr)> {
        which.iter().map(|&i| (ServerId(10 + i as u64), self.addrs[i])).collect()
    }

    /// The replicator gets segments from the store (held weakly, as the
    /// server does), and records what it asked for.
    fn connect_source(&self) {
        let store = Arc::downgrade(&self.store);
        let asked = self.asked.clone();
        self.rep.set_segment_source(Arc::new(move |id| {
            asked.lock().push(id);
            store.upgrade()?.segment_copy(id)
        }));
    }

    /// Closed replicas of the log on backup `i`: segment -> (len, checksum).
    fn closed_on(&self, i: usize) -> BTreeMap<u64, (u32, u32)> {
        self.closed_epochs_on(i).into_iter().map(|(s, (len, ck, _))| (s, (len, ck))).collect()
    }

    /// Closed replicas of the log on backup `i`: segment -> (len, checksum, epoch).
    fn closed_epochs_on(&self, i: usize) -> BTreeMap<u64, (u32, u32, u64)> {
        let list = rt().block_on(restore::list_replicas(self.addrs[i], LOG)).unwrap();
        list.iter()
            .filter(|r| r.state == ReplicaState::Closed)
            .map(|r| (r.segment.0, (r.len, r.checksum, r.epoch)))
            .collect()
    }

    /// Segments of the log in memory now, but the head (the one open).
    fn closed_in_log(&self) -> BTreeMap<u64, Vec<u8>> {
        let mut segs = self.store.log_segments();
        segs.pop();
        segs.into_iter().map(|(id, b)| (id.0, b)).collect()
    }

    /// The backup holding the most closed replicas.
    fn busiest(&self) -> usize {
        (0..self.addrs.len()).max_by_key(|&i| self.closed_on(i).len()).unwrap()
    }

    /// Every closed segment of the log is closed on at least `r` of the
    /// backups `live`, each replica verified and equal to the segment's
    /// bytes in memory now (which may be its compacted form).
    fn check_closed_on(&self, r: usize, live: &[usize]) {
        let rt = rt();
        let in_log = self.closed_in_log();
        assert!(in_log.len() >= 3, "only {} closed segments", in_log.len());
        for (seg, bytes) in &in_log {
            let mut complete = Vec::new();
            for &i in live {
                let Ok((info, got)) = rt.block_on(restore::read_replica(self.addrs[i], LOG, SegmentId(*seg))) else {
                    continue;
                };
                if info.state == ReplicaState::Closed && got == *bytes {
                    let scan = format::scan(&got);
                    assert_eq!((scan.verified_len, scan.last_checksum), (got.len(), info.checksum));
                    complete.push(i);
                }
            }
            assert!(complete.len() >= r, "segment {seg}: closed and whole on {complete:?} only, of {live:?}");
        }
    }
}

/// A backup dies (its process ends, so its connection does) after several
/// segments closed; the cluster then drops it from the list. Each copied
/// segment's replicas are at epoch 2 on the live backups — the copy opened
/// there, the surviving one (on disk by then) raised by EPOCH — and its
/// floor (segment, 2) was recorded; the other segments stay at epoch 1.
#[test]
fn closed_segments_of_a_dead_backup_get_new_replicas_on_live_backups() {
    let coordinator = Arc::new(FakeFloors::default());
    let mut s = setup_with(4, ReplicationMode::Tailwind, Some(coordinator.recorder()));
    s.connect_source();
    s.rep.set_backups(s.list(&[0, 1, 2, 3]), 2);
    write(&s.store, 2, 5000, 1000, 1);
    assert!(wait(&s.rep, s.rep.position(), 20));
    s.check_closed_on(2, &[0, 1, 2, 3]);
    let victim = s.busiest();
    let lost: BTreeSet<u64> = s.closed_on(victim).into_keys().collect();
    assert!(lost.len() >= 2, "the victim held {lost:?}");
    assert_eq!(s.rep.stats().closed_segments_below_r, 0);
    // An open replica there (the head's) is re-opened elsewhere: epoch 2 too.
    let open_there: BTreeSet<u64> = rt()
        .block_on(restore::list_replicas(s.addrs[victim], LOG))
        .unwrap()
        .iter()
        .filter(|r| r.state == ReplicaState::Open)
        .map(|r| r.segment.0)
        .collect();
    s.backups[victim].take().unwrap().shutdown();
    // Writes go on while the copies are made.
    write(&s.store, 2, 2000, 1000, 2);
    assert!(wait(&s.rep, s.rep.position(), 20), "writes stalled after a backup died");
    let live: Vec<usize> = (0..4).filter(|i| *i != victim).collect();
    s.rep.set_backups(s.list(&live), 2);
    assert!(
        eventually(20, || s.rep.stats().closed_segments_below_r == 0
            && s.rep.stats().segments_rereplicated >= lost.len() as u64),
        "copies not done: {:?}",
        s.rep.stats()
    );
    s.check_closed_on(2, &live);
    let st = s.rep.stats();
    assert_eq!(st.segments_rereplicated, lost.len() as u64, "{st:?}");
    assert!(st.rereplication_bytes >= (lost.len() * SEGMENT / 2) as u64, "{st:?}");
    // Only the lost segments were asked for.
    let asked: BTreeSet<u64> = s.asked.lock().iter().map(|i| i.0).collect();
    assert_eq!(asked, lost);
    for seg in s.closed_in_log().into_keys() {
        let epochs: Vec<u64> = live.iter().filter_map(|&i| s.closed_epochs_on(i).get(&seg).map(|r| r.2)).collect();
        let hit = lost.contains(&seg) || open_there.contains(&seg);
        let want = if hit { 2 } else { 1 };
        assert!(epochs.len() >= 2 && epochs.iter().all(|e| *e == want), "segment {seg}: epochs {epochs:?}");
        assert_eq!(coordinator.asked(seg, 2, true), hit, "segment {seg}'s floor");
    }
    assert_eq!(s.rep.stats().floors_waiting, 0);
    // And nothing below R now, after more writes.
    write(&s.store, 2, 2000, 1000, 3);
    assert!(wait(&s.rep, s.rep.position(), 20));
    s.check_closed_on(2, &live);
}

/// The map drops a backup (declared dead) that still runs: its replicas
/// no longer count, copies go to the listed backups only.
#[test]
fn a_backup_dropped_from_the_list_is_no_longer_counted_conventional() {
    let s = setup(4, ReplicationMode::Conventional);
    s.connect_source();
    s.rep.set_backups(s.list(&[0, 1, 2, 3]), 2);
    write(&s.store, 2, 4000, 1000, 4);
    assert!(wait(&s.rep, s.rep.position(), 30));
    let victim = s.busiest();
    let lost = s.closed_on(victim).len() as u64;
    assert!(lost >= 2);
    let live: Vec<usize> = (0..4).filter(|i| *i != victim).collect();
    s.rep.set_backups(s.list(&live), 2);
    assert!(
        eventually(20, || s.rep.stats().closed_segments_below_r == 0 && s.rep.stats().segments_rereplicated == lost),
        "copies not done: {:?}",
        s.rep.stats()
    );
    s.check_closed_on(2, &live);
}

/// Segments the cleaner frees while their copy waits are not copied (and
/// their surviving replicas are freed); the others are.
#[test]
fn a_segment_cleaned_before_its_copy_is_not_copied() {
    let mut s = setup(4, ReplicationMode::Tailwind);
    s.rep.set_backups(s.list(&[0, 1, 2, 3]), 2);
    // Old keys, then keys that stay, then the old ones again: the first
    // segments become all dead and the cleaner frees them.
    write(&s.store, 1, 2500, 1000, 5);
    let old: BTreeSet<u64> = s.closed_in_log().into_keys().collect();
    for i in 0..1500 {
        s.store
            .write(shoal_common::TableId(1), format!("stay{i}").as_bytes(), &[9u8; 1000], Default::default())
            .unwrap();
    }
    assert!(wait(&s.rep, s.rep.position(), 20));
    let victim = s.busiest();
    let lost: BTreeSet<u64> = s.closed_on(victim).into_keys().collect();
    assert!(!lost.is_disjoint(&old), "the victim holds none of the old segments: {lost:?} {old:?}");
    // No source yet: the copies wait.
    s.backups[victim].take().unwrap().shutdown();
    let live: Vec<usize> = (0..4).filter(|i| *i != victim).collect();
    s.rep.set_backups(s.list(&live), 2);
    assert!(eventually(10, || s.rep.stats().closed_segments_below_r == lost.len() as u64), "{:?}", s.rep.stats());
    write(&s.store, 1, 2500, 1000, 6);
    assert!(s.store.clean_now(20, true) > 0);
    write(&s.store, 1, 200, 1000, 7);
    assert!(wait(&s.rep, s.rep.position(), 20));
    let in_log: BTreeSet<u64> = s.closed_in_log().into_keys().collect();
    let freed: BTreeSet<u64> = lost.difference(&in_log).copied().collect();
    assert!(!freed.is_empty(), "none of {lost:?} was cleaned");
    // Their FREE came once the splice was durable: no longer waiting.
    let still: u64 = lost.intersection(&in_log).count() as u64;
    assert!(eventually(10, || s.rep.stats().closed_segments_below_r == still), "{:?}", s.rep.stats());
    s.connect_source();
    assert!(eventually(20, || s.rep.stats().closed_segments_below_r == 0), "{:?}", s.rep.stats());
    assert_eq!(s.rep.stats().segments_rereplicated, still);
    let asked: BTreeSet<u64> = s.asked.lock().iter().map(|i| i.0).collect();
    assert!(asked.is_disjoint(&freed), "asked for cleaned segments: {asked:?} {freed:?}");
    s.check_closed_on(2, &live);
    // No live backup keeps a replica of a cleaned segment.
    assert!(eventually(10, || live.iter().all(|&i| s.closed_on(i).keys().all(|k| !freed.contains(k)))));
}
