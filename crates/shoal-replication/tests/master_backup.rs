//! The replicator against the real backup service over TCP: what the
//! backups serve back (through the reader mode) is what the log appended,
//! in both modes; a backup stopped mid-segment (its replacement at the next
//! replica epoch, the floor recorded before more writes are acknowledged),
//! one that refuses every OPEN, and FREE after cleaning.

mod master_common;

use master_common::*;
use parking_lot::Mutex;
use shoal_cluster::ServerId;
use shoal_common::{LogId, SegmentId};
use shoal_engine::Store;
use shoal_replication::backup::{Backup, BackupConfig};
use shoal_replication::master::{FloorRecorder, ReplicationMode, Replicator, ReplicatorConfig};
use shoal_replication::restore;
use shoal_replication::wire::ReplicaState;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

struct Setup {
    rep: Arc<Replicator>,
    tee: Arc<Tee>,
    store: Store,
    backups: Vec<Option<Backup>>,
    addrs: Vec<SocketAddr>,
    _dirs: Vec<tempfile::TempDir>,
}

fn setup(backups: usize, mode: ReplicationMode, backup_segment: u32) -> Setup {
    setup_with(backups, mode, backup_segment, None)
}

fn setup_with(backups: usize, mode: ReplicationMode, backup_segment: u32, floors: Option<FloorRecorder>) -> Setup {
    let rep = Replicator::start(ReplicatorConfig {
        master: ServerId(1),
        log: LogId(7),
        log_version: 1,
        segment_bytes: SEGMENT as u32,
        mode,
        replica_timeout: Duration::from_millis(1000),
        floor_recorder: floors,
    });
    let tee = Arc::new(Tee { rep: rep.clone(), log: Mutex::default() });
    let store = store(&tee);
    let mut dirs = Vec::new();
    let mut bs = Vec::new();
    for i in 0..backups {
        let dir = tempfile::tempdir().unwrap();
        let mut c = BackupConfig::new("127.0.0.1:0".parse().unwrap(), dir.path());
        c.segment_bytes = if i == 0 { backup_segment } else { SEGMENT as u32 };
        c.buffers = 8;
        c.flush_limit = 6;
        bs.push(Some(Backup::start(c).unwrap()));
        dirs.push(dir);
    }
    let addrs = bs.iter().map(|b| b.as_ref().unwrap().local_addr()).collect();
    Setup { rep, tee, store, backups: bs, addrs, _dirs: dirs }
}

impl Setup {
    fn list(&self, which: &[usize]) -> Vec<(ServerId, SocketAddr)> {
        which.iter().map(|&i| (ServerId(10 + i as u64), self.addrs[i])).collect()
    }

    /// Every segment of the log that is still wanted is held, verified and
    /// byte-identical, by `r` of the backups `live`; closed ones closed.
    fn check_replicas(&self, r: usize, live: &[usize]) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let log = self.tee.log.lock();
        let freed: Vec<u64> = log.frees.iter().flat_map(|f| f.2.iter().copied()).collect();
        let mut checked = 0;
        for (seg, bytes) in &log.bytes {
            if freed.contains(seg) {
                continue;
            }
            let mut complete = 0;
            for &i in live {
                let Ok((info, got)) = rt.block_on(restore::read_replica(self.addrs[i], LogId(7), SegmentId(*seg)))
                else {
                    continue;
                };
                if got == *bytes {
                    let want = if log.closed.contains(seg) { ReplicaState::Closed } else { ReplicaState::Open };
                    assert_eq!(info.state, want, "segment {seg} on backup {i}");
                    complete += 1;
                }
            }
            assert!(complete >= r, "segment {seg}: {complete} complete replicas of {r}");
            checked += 1;
        }
        assert!(checked >= 3, "only {checked} segments checked");
    }
}

#[test]
fn tailwind_to_real_backups_serves_back_the_log() {
    let s = setup(3, ReplicationMode::Tailwind, SEGMENT as u32);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    write(&s.store, 3, 5000, 1000, 1);
    assert!(wait(&s.rep, s.rep.position(), 20));
    s.check_replicas(2, &[0, 1, 2]);
    let received: u64 = s.backups.iter().map(|b| b.as_ref().unwrap().stats().bytes_received).sum();
    assert_eq!(received, 2 * s.rep.position());
    assert_eq!(s.rep.stats().replicas_reopened, 0);
}

#[test]
fn conventional_to_real_backups_serves_back_the_log() {
    let s = setup(2, ReplicationMode::Conventional, SEGMENT as u32);
    s.rep.set_backups(s.list(&[0, 1]), 2);
    write(&s.store, 2, 3000, 1000, 2);
    assert!(wait(&s.rep, s.rep.position(), 30));
    s.check_replicas(2, &[0, 1]);
    for b in &s.backups {
        assert!(b.as_ref().unwrap().stats().conventional_appends >= 3000);
    }
}

#[test]
fn a_backup_stopped_mid_segment_is_replaced() {
    let mut s = setup(3, ReplicationMode::Tailwind, SEGMENT as u32);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    write(&s.store, 2, 300, 1000, 3);
    assert!(wait(&s.rep, s.rep.position(), 10));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let head = SegmentId(s.tee.log.lock().heads.last().unwrap().0);
    let victim = (0..3).find(|&i| rt.block_on(restore::read_replica(s.addrs[i], LogId(7), head)).is_ok()).unwrap();
    s.backups[victim].take().unwrap().shutdown();
    write(&s.store, 2, 3000, 1000, 4);
    assert!(wait(&s.rep, s.rep.position(), 20), "writes never became durable after a backup stopped");
    let live: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
    s.check_replicas(2, &live);
    assert!(s.rep.stats().replicas_reopened >= 1);
}

#[test]
fn a_backup_that_refuses_every_open_is_passed_over() {
    // Backup 0's buffers are smaller than the master's segments.
    let s = setup(3, ReplicationMode::Tailwind, (SEGMENT / 2) as u32);
    s.rep.set_backups(s.list(&[0, 1]), 2);
    write(&s.store, 1, 100, 500, 5);
    assert!(!wait(&s.rep, s.rep.position(), 1), "durable with one replica");
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    write(&s.store, 2, 2500, 1000, 6);
    assert!(wait(&s.rep, s.rep.position(), 20));
    s.check_replicas(2, &[1, 2]);
    assert_eq!(s.backups[0].as_ref().unwrap().stats().segments_opened, 0);
    assert!(s.rep.stats().refusals >= 1);
}

#[test]
fn cleaned_segments_are_freed_on_real_backups() {
    let s = setup(3, ReplicationMode::Tailwind, SEGMENT as u32);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    for round in 0..4 {
        write(&s.store, 2, 3000, 1000, 7 + round);
    }
    assert!(wait(&s.rep, s.rep.position(), 20));
    assert!(s.store.clean_now(20, true) > 0);
    assert!(wait(&s.rep, s.rep.position(), 20));
    let freed: usize = s.tee.log.lock().frees.iter().map(|f| f.2.len()).sum();
    assert!(freed > 0);
    assert!(eventually(10, || {
        let n: u64 = s.backups.iter().map(|b| b.as_ref().unwrap().stats().segments_freed).sum();
        n == 2 * freed as u64
    }));
    s.check_replicas(2, &[0, 1, 2]);
}

/// A backup holding the open head stops, with the coordinator unreachable:
/// the head is re-opened on the third backup at epoch 2 and the survivor
/// takes epoch 2 (both as the backups list them), the floor (head, 2) is
/// asked for, and nothing written after the loss is acknowledged until the
/// coordinator records it.
#[test]
fn a_stopped_backups_head_is_reopened_at_the_next_epoch_behind_its_floor() {
    let coordinator = Arc::new(FakeFloors::default());
    let mut s = setup_with(3, ReplicationMode::Tailwind, SEGMENT as u32, Some(coordinator.recorder()));
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    write(&s.store, 2, 300, 1000, 8);
    assert!(wait(&s.rep, s.rep.position(), 10));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let head = SegmentId(s.tee.log.lock().heads.last().unwrap().0);
    let epochs = |i: usize| -> Option<u64> {
        let listed = rt.block_on(restore::list_replicas(s.addrs[i], LogId(7))).ok()?;
        listed.iter().find(|r| r.segment == head).map(|r| r.epoch)
    };
    let holders: Vec<usize> = (0..3).filter(|&i| epochs(i).is_some()).collect();
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|&i| epochs(i) == Some(1)));
    let (victim, survivor) = (holders[0], holders[1]);
    let fresh = (0..3).find(|i| !holders.contains(i)).unwrap();

    coordinator.down.store(true, Ordering::SeqCst);
    let acknowledged = s.rep.durable();
    s.backups[victim].take().unwrap().shutdown();
    write(&s.store, 1, 100, 1000, 9);
    let pos = s.rep.position();
    assert!(eventually(10, || coordinator.asked(head.0, 2, false)), "{:?}", coordinator.calls.lock());
    assert!(eventually(10, || epochs(fresh) == Some(2) && epochs(survivor) == Some(2)));
    assert!(!wait(&s.rep, pos, 1), "acknowledged before the floor was recorded");
    assert_eq!(s.rep.durable(), acknowledged);

    coordinator.down.store(false, Ordering::SeqCst);
    assert!(wait(&s.rep, pos, 10));
    assert!(coordinator.asked(head.0, 2, true));
    write(&s.store, 2, 3000, 1000, 10);
    assert!(wait(&s.rep, s.rep.position(), 20));
    let live = [survivor, fresh];
    s.check_replicas(2, &live);
    let st = s.rep.stats();
    assert!(st.epochs_raised >= 1 && st.floors_recorded >= 1 && st.floors_waiting == 0, "{st:?}");
}
