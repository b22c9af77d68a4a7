//! What the replicator tests share: an observer that records what the log
//! told it beside the replicator, the store they write through, and waits.

#![allow(dead_code)]

use parking_lot::Mutex;
use shoal_common::{LogId, SegmentId, TableId};
use shoal_engine::{LogObserver, RejectRules, SegmentKind, Store, StoreConfig};
use shoal_replication::master::{FloorRecorder, FloorRequest, ReplicationError, Replicator};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SEGMENT: usize = 1 << 20;

// ---------------------------------------------------------------------------
// What the log told the observer, recorded beside the replicator.

#[derive(Default)]
pub struct TeeLog {
    pub bytes: HashMap<u64, Vec<u8>>,
    pub kinds: HashMap<u64, SegmentKind>,
    pub closed: Vec<u64>,
    /// Each head, with the segments closed before it was opened.
    pub heads: Vec<(u64, Vec<u64>)>,
    /// Each splice: the head it opened, that head's bytes then, the freed.
    pub frees: Vec<(u64, u32, Vec<u64>)>,
}

pub struct Tee {
    pub rep: Arc<Replicator>,
    pub log: Mutex<TeeLog>,
}

impl LogObserver for Tee {
    fn segment_opened(&self, segment: SegmentId, kind: SegmentKind) {
        let mut l = self.log.lock();
        l.kinds.insert(segment.0, kind);
        l.bytes.insert(segment.0, Vec::new());
        if kind == SegmentKind::Head {
            let before = l.closed.clone();
            l.heads.push((segment.0, before));
        }
        self.rep.segment_opened(segment, kind);
    }
    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        let mut l = self.log.lock();
        let b = l.bytes.get_mut(&segment.0).unwrap();
        assert_eq!(b.len(), offset as usize);
        b.extend_from_slice(bytes);
        self.rep.appended(segment, offset, bytes);
    }
    fn segment_closed(&self, segment: SegmentId, len: u32, checksum: u32) {
        let mut l = self.log.lock();
        l.closed.push(segment.0);
        self.rep.segment_closed(segment, len, checksum);
    }
    fn position(&self) -> u64 {
        self.rep.position()
    }
    fn segments_freed(&self, survivors: &[SegmentId], freed: &[SegmentId]) {
        let mut l = self.log.lock();
        let head = l.heads.last().unwrap().0;
        let len = l.bytes[&head].len() as u32;
        l.frees.push((head, len, freed.iter().map(|s| s.0).collect()));
        self.rep.segments_freed(survivors, freed);
    }
}

/// A store of 64 MiB in 1 MiB segments (so segments roll), without a
/// cleaner thread, reporting to `tee`, with table 1.
pub fn store(tee: &Arc<Tee>) -> Store {
    let config = StoreConfig {
        memory_bytes: 64 << 20,
        segment_bytes: SEGMENT,
        seglet_bytes: 64 << 10,
        max_value_bytes: 64 << 10,
        log_id: LogId(7),
        cleaner_thread: false,
        ..StoreConfig::default()
    };
    let store = Store::with_observer(config, Some(tee.clone() as Arc<dyn LogObserver>)).unwrap();
    store.create_table(TableId(1));
    store
}

/// Writes `n` objects of `len` bytes from `threads` threads.
pub fn write(store: &Store, threads: usize, n: usize, len: usize, tag: u8) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let value = vec![tag ^ t as u8; len];
                for i in (t..n).step_by(threads) {
                    store.write(TableId(1), format!("key{i}").as_bytes(), &value, RejectRules::default()).unwrap();
                }
            });
        }
    });
}

/// Waits on a runtime of its own (not the replicator's) for `pos` to be
/// durable; false after `secs`.
pub fn wait(rep: &Replicator, pos: u64, secs: u64) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(secs), rep.wait_durable(pos)).await.is_ok() })
}

pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

pub fn wait_result(rep: &Replicator, pos: u64) -> Result<(), ReplicationError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(rep.wait_durable(pos))
}

// ---------------------------------------------------------------------------
// The coordinator's side of replica floors.

/// One floor request as the fake coordinator saw it: its (segment, epoch)
/// pairs, and whether it was answered `Ok`.
pub type FloorCall = (Vec<(u64, u64)>, bool);

/// A fake coordinator for floors: records every request (those with
/// replica floors in `calls`, head floors in `heads`), and answers it with
/// an error while `down`.
#[derive(Default)]
pub struct FakeFloors {
    pub down: AtomicBool,
    pub calls: Mutex<Vec<FloorCall>>,
    /// Head floors asked for, and whether they were answered `Ok`.
    pub heads: Mutex<Vec<(u64, bool)>>,
}

impl FakeFloors {
    pub fn recorder(self: &Arc<Self>) -> FloorRecorder {
        let me = self.clone();
        FloorRecorder::new(move |floors: FloorRequest| {
            let me = me.clone();
            async move {
                let ok = !me.down.load(Ordering::SeqCst);
                if !floors.replicas.is_empty() {
                    me.calls.lock().push((floors.replicas.iter().map(|(s, e)| (s.0, *e)).collect(), ok));
                }
                if let Some(head) = floors.head {
                    me.heads.lock().push((head.0, ok));
                }
                if ok {
                    Ok(())
                } else {
                    Err("the coordinator is unreachable".to_string())
                }
            }
        })
    }

    /// Whether a request with the floor `(seg, epoch)` was answered `ok`.
    pub fn asked(&self, seg: u64, epoch: u64, ok: bool) -> bool {
        self.calls.lock().iter().any(|(f, k)| *k == ok && f.contains(&(seg, epoch)))
    }
}
