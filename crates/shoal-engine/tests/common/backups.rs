//! What backups would hold of a store's log, for replay tests: the tests
//! that include it (`#[path]`) replay it as a recovery would.

use shoal_engine::{LogObserver, SegmentId, SegmentKind, Store};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The bytes of every segment ever opened, each as it was appended (a
/// compacted segment's replica keeps its original bytes; a freed segment's
/// stays here too, but leaves the log).
#[derive(Default)]
pub struct Backups {
    segments: Mutex<BTreeMap<SegmentId, Vec<u8>>>,
}

impl LogObserver for Backups {
    fn segment_opened(&self, segment: SegmentId, _kind: SegmentKind) {
        self.segments.lock().unwrap().insert(segment, Vec::new());
    }
    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        let mut s = self.segments.lock().unwrap();
        let buf = s.get_mut(&segment).expect("append to an unopened segment");
        assert_eq!(buf.len(), offset as usize, "appends not contiguous");
        buf.extend_from_slice(bytes);
    }
}

impl Backups {
    /// What a recovery would read now: every segment of `store`'s log, as
    /// the backups hold it or, where `from_memory(i)` says so for the i-th
    /// segment, in its in-memory form (a replica re-created from memory:
    /// the compacted form of a compacted segment), in an order shuffled by
    /// `seed`.
    pub fn log_of(&self, store: &Store, from_memory: impl Fn(usize) -> bool, seed: u64) -> Vec<Vec<u8>> {
        // The log first: it pauses the cleaner, which may be appending to
        // a survivor (and so waiting for `segments`) until its pass ends.
        let log = store.log_segments();
        let held = self.segments.lock().unwrap();
        let mut segs: Vec<Vec<u8>> = log
            .into_iter()
            .enumerate()
            .map(|(i, (id, memory))| if from_memory(i) { memory } else { held[&id].clone() })
            .collect();
        let mut x = seed | 1;
        for i in (1..segs.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            segs.swap(i, (x >> 33) as usize % (i + 1));
        }
        segs
    }
}
