//! `Store::write_position`: what a reader of a key waits for before its
//! reply may go out (durable reads, `docs/recovery.md`). It must be at or
//! past the observer's position after the key's last append, and must not
//! move for writes of keys of other slices.

#[allow(dead_code)] // the shared helpers this file does not call
mod common;

use parking_lot::Mutex;
use shoal_engine::{LogObserver, RejectRules, SegmentId, Store, TableId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts appended bytes as the replicator does, and remembers the
/// position after each append.
#[derive(Default)]
struct Counter {
    position: AtomicU64,
    ends: Mutex<Vec<u64>>,
}

impl LogObserver for Counter {
    fn appended(&self, _segment: SegmentId, _offset: u32, bytes: &[u8]) {
        let end = self.position.fetch_add(bytes.len() as u64, Ordering::AcqRel) + bytes.len() as u64;
        self.ends.lock().push(end);
    }
    fn position(&self) -> u64 {
        self.position.load(Ordering::Acquire)
    }
}

const T: TableId = TableId(1);

#[test]
fn write_position_covers_the_last_write_and_removal_of_the_key() {
    let counter = Arc::new(Counter::default());
    let store = Store::with_observer(common::small_config(4096, false), Some(counter.clone())).unwrap();
    store.create_table(T);
    assert_eq!(store.write_position(T, b"never written"), 0);

    store.write(T, b"k", b"one", RejectRules::default()).unwrap();
    let after_first = counter.position();
    assert!(store.write_position(T, b"k") >= after_first);

    // Many writes of other keys: most land in other slices and leave
    // "k"'s position where it was; some share its slice and only raise it.
    for i in 0..2000u32 {
        store.write(T, format!("other-{i}").as_bytes(), b"v", RejectRules::default()).unwrap();
    }
    let k = store.write_position(T, b"k");
    assert!(k >= after_first);
    assert!(k < counter.position(), "a key's position follows its own slice, not the log's end");
    let unmoved =
        (0..2000u32).filter(|i| store.write_position(T, format!("other-{i}").as_bytes()) < counter.position()).count();
    assert!(unmoved > 1000, "only {unmoved} of 2000 keys kept a position behind the log's end");

    // A rewrite and a removal each move it to or past their append.
    store.write(T, b"k", b"two", RejectRules::default()).unwrap();
    assert!(store.write_position(T, b"k") >= counter.position());
    for i in 0..10u32 {
        store.write(T, format!("later-{i}").as_bytes(), b"v", RejectRules::default()).unwrap();
    }
    store.remove(T, b"k", RejectRules::default()).unwrap();
    assert!(store.write_position(T, b"k") >= *counter.ends.lock().last().unwrap());
}

#[test]
fn write_position_is_zero_without_an_observer() {
    let store = Store::new(common::small_config(4096, false)).unwrap();
    store.create_table(T);
    store.write(T, b"k", b"v", RejectRules::default()).unwrap();
    assert_eq!(store.write_position(T, b"k"), 0);
}
