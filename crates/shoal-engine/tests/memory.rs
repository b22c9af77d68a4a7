//! Resident memory follows the data (`StoreConfig::target_utilisation`):
//! after a fill then a delete of most of it, the cleaner shrinks the log and
//! gives the freed memory back to the OS. One test in its own process, so
//! that its resident set is its own.

use shoal_engine::{RejectRules, Store, StoreConfig, TableId};
use std::time::{Duration, Instant};

#[allow(dead_code)] // the shared helpers this file does not call
mod common;
use common::rss_bytes;

#[test]
fn resident_memory_returns_near_live_data_after_a_fill_then_delete() {
    let t = TableId(1);
    let store = Store::new(StoreConfig { memory_bytes: 1 << 30, ..StoreConfig::default() }).unwrap();
    store.create_table(t);
    let value = vec![7u8; 1000];
    let start = rss_bytes();
    let n = 200_000u32;
    for i in 0..n {
        store.write(t, &i.to_le_bytes(), &value, RejectRules::default()).unwrap();
    }
    let full = rss_bytes();
    assert!(full > start + 180_000_000, "the fill made {} MB resident", (full - start) >> 20);
    // Keep one object in ten.
    for i in (0..n).filter(|i| i % 10 != 0) {
        store.remove(t, &i.to_le_bytes(), RejectRules::default()).unwrap();
    }
    let live = store.stats().live_bytes;
    // Live data is ~20 MB (and ~5 MB of tombstones); at the 0.9 target
    // with two segments of slack, a segment of warm free seglets and the
    // populating thread's lead (4 MiB), resident memory settles within
    // ~40 MB of live data above where it started; the bound allows 60.
    let bound = start + live + (60 << 20);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut now = rss_bytes();
    while now > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        now = rss_bytes();
    }
    let s = store.stats();
    eprintln!(
        "RSS: start {} MB, full {} MB, after deletes {} MB; live {} MB; seglets returned {}",
        start >> 20,
        full >> 20,
        now >> 20,
        live >> 20,
        s.seglets_returned
    );
    assert!(now <= bound, "RSS {} MB above the bound {} MB: {s:?}", now >> 20, bound >> 20);
    assert!(s.seglets_returned > 0);
    // Everything kept is still there.
    for i in (0..n).step_by(10) {
        assert_eq!(store.read(t, &i.to_le_bytes(), RejectRules::default()).unwrap().0, value);
    }
    store.check_invariants().unwrap();
}
