//! A small store under a steady churn stays small: a few keys set and
//! removed over and over leave whole segments of dead objects and
//! tombstones, which the cleaner must clean away although the log is far
//! below `--memory` (issue 16's idle growth). One test in its own process,
//! so that its resident set is its own.

use shoal_engine::{RejectRules, Store, StoreConfig, TableId};
use std::time::{Duration, Instant};

#[allow(dead_code)] // the shared helpers this file does not call
mod common;
use common::rss_bytes;

#[test]
fn a_small_store_under_set_and_remove_churn_stays_small() {
    let t = TableId(1);
    let config = StoreConfig { memory_bytes: 1 << 30, ..StoreConfig::default() };
    let seglet = config.seglet_bytes as u64;
    let segment = config.segment_bytes as u64;
    let store = Store::new(config).unwrap();
    store.create_table(t);
    let value = vec![b'v'; 50];
    for i in 0..100u32 {
        store.write(t, format!("kept:{i}").as_bytes(), &value, RejectRules::default()).unwrap();
    }
    let start = rss_bytes();
    // About 30 MiB of entries appended: four segments' worth, which the
    // old floor (no cleaning for the target below four segments) left in
    // memory with two more of slack.
    let cycles = 300_000u32;
    let started = Instant::now();
    for n in 0..cycles {
        let key = format!("churn:{}", n % 100);
        store.write(t, key.as_bytes(), &value, RejectRules::default()).unwrap();
        store.remove(t, key.as_bytes(), RejectRules::default()).unwrap();
    }
    let churned = started.elapsed();
    let appended = store.stats().appended_bytes;
    assert!(appended > 3 * segment, "the churn appended only {appended} bytes");
    // The log falls to about the head and a survivor holding the kept keys:
    // at most 4 MiB in use (two segments of slack would be 16 MiB).
    let bound = 4 << 20;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = store.stats();
    while s.seglets_in_use * seglet > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        s = store.stats();
    }
    let now = rss_bytes();
    eprintln!(
        "{cycles} cycles in {churned:?}: {} KiB appended; log in use {} KiB, heads rolled {}, RSS start {} KiB, now {} KiB",
        appended >> 10,
        (s.seglets_in_use * seglet) >> 10,
        s.heads_rolled,
        start >> 10,
        now >> 10
    );
    assert!(s.seglets_in_use * seglet <= bound, "log in use {} KiB: {s:?}", (s.seglets_in_use * seglet) >> 10);
    assert!(s.heads_rolled > 0, "{s:?}");
    // The memory freed went back to the OS: what stays resident beyond the
    // start is the log in use and a few MiB of the allocator's and the
    // hash table's (the bound allows 12 MiB).
    assert!(now <= start + (12 << 20), "RSS grew from {} to {} KiB", start >> 10, now >> 10);
    for i in 0..100u32 {
        assert_eq!(store.read(t, format!("kept:{i}").as_bytes(), RejectRules::default()).unwrap().0, value);
    }
    assert!(store.read(t, b"churn:0", RejectRules::default()).is_err());
    store.check_invariants().unwrap();
}
