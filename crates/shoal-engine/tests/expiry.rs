//! Expiry tests: an expired object reads as missing everywhere, objects
//! without expiry never read the clock, the cleaner drops expired objects
//! instead of relocating them (and a replay of what is left cannot bring
//! back an older version), the sweep removes them with tombstones within
//! its budget, and a replay keeps expiry times.

mod common;

use shoal_engine::{
    format, EnumCursor, Expiry, ManualClock, RejectRules, Store, StoreConfig, StoreError, TableId, UnixMillis, Version,
    WriteOp,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: TableId = TableId(1);
const T0: u64 = 1_700_000_000_000;

/// A small store on a manual clock, without the sweep thread.
fn store_on(clock: &Arc<ManualClock>) -> Store {
    let config =
        StoreConfig { clock: clock.clone(), expiry_sweep_interval: Duration::ZERO, ..common::small_config(256, false) };
    let store = Store::new(config).unwrap();
    store.create_table(T);
    store
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(UnixMillis(T0)))
}

fn at(ms_from_start: u64) -> Expiry {
    Expiry::At(UnixMillis(T0 + ms_from_start))
}

const NONE: RejectRules = RejectRules {
    given_version: Version(0),
    doesnt_exist: false,
    exists: false,
    version_le_given: false,
    version_ne_given: false,
};

#[test]
fn expired_object_is_a_missing_key_to_every_operation() {
    let c = clock();
    let store = store_on(&c);
    let v1 = store.write_with_expiry(T, b"k", b"v", NONE, at(100)).unwrap();
    assert_eq!(store.read(T, b"k", NONE), Ok((b"v".to_vec(), v1)));
    let meta = store.meta(T, b"k", NONE).unwrap();
    assert_eq!(meta.expiry, Some(UnixMillis(T0 + 100)));
    c.advance_ms(99);
    assert!(store.read(T, b"k", NONE).is_ok(), "alive until its expiry time");
    c.advance_ms(1);
    // Expired = expiry <= now.
    assert_eq!(store.read(T, b"k", NONE), Err(StoreError::ObjectDoesntExist));
    assert_eq!(store.meta(T, b"k", NONE), Err(StoreError::ObjectDoesntExist));
    assert_eq!(store.multi_read(&[(T, b"k")]), vec![Err(StoreError::ObjectDoesntExist)]);
    assert!(common::enumerate_all(&store, T, 3).is_empty());
    assert_eq!(store.set_expiry(T, b"k", None, NONE), Err(StoreError::ObjectDoesntExist));
    // Counted until reclaimed, as Redis's DBSIZE counts them.
    assert_eq!(store.table_objects(T), Ok(1));
    // Must-exist rules refuse; must-not-exist ones accept, with a higher version.
    assert_eq!(store.write(T, b"k", b"x", RejectRules::must_exist()), Err(StoreError::ObjectDoesntExist));
    let v2 = store.write(T, b"k", b"new", RejectRules::must_not_exist()).unwrap();
    assert!(v2 > v1);
    assert_eq!(store.meta(T, b"k", NONE).unwrap().expiry, None, "a plain write clears the expiry");
    // An increment of an expired counter starts from 0 and keeps no expiry.
    store.write_with_expiry(T, b"n", b"41", NONE, at(200)).unwrap();
    assert_eq!(store.increment(T, b"n", 1, NONE).unwrap().0, 42);
    assert_eq!(store.meta(T, b"n", NONE).unwrap().expiry, Some(UnixMillis(T0 + 200)), "increments keep it");
    c.advance_ms(100);
    assert_eq!(store.increment(T, b"n", 1, NONE).unwrap().0, 1);
    assert_eq!(store.meta(T, b"n", NONE).unwrap().expiry, None);
    // A remove of an expired object answers "did not exist" and reclaims it.
    store.write_with_expiry(T, b"r", b"v", NONE, at(250)).unwrap();
    c.advance_ms(100);
    assert_eq!(store.remove(T, b"r", RejectRules::must_exist()), Err(StoreError::ObjectDoesntExist));
    assert_eq!(store.remove(T, b"r", NONE), Ok(None));
    let s = store.stats();
    assert_eq!(s.expired_keys, 3, "the overwrite, the increment and the remove: {s:?}");
    assert_eq!(store.table_objects(T), Ok(2));
    store.check_invariants().unwrap();
}

#[test]
fn keep_and_set_expiry_change_only_what_they_say() {
    let c = clock();
    let store = store_on(&c);
    store.write_with_expiry(T, b"k", b"one", NONE, at(1000)).unwrap();
    store.write_with_expiry(T, b"k", b"two", NONE, Expiry::Keep).unwrap();
    assert_eq!(store.meta(T, b"k", NONE).unwrap().expiry, Some(UnixMillis(T0 + 1000)));
    let v = store.set_expiry(T, b"k", Some(UnixMillis(T0 + 5)), NONE).unwrap();
    assert_eq!(store.read(T, b"k", NONE), Ok((b"two".to_vec(), v)), "value kept, new version");
    let v = store.set_expiry(T, b"k", None, RejectRules::version_is(v)).unwrap();
    c.advance_ms(10);
    assert_eq!(store.read(T, b"k", NONE), Ok((b"two".to_vec(), v)), "persisted");
    // Keep on a missing key: no expiry. A multi-write may keep too.
    store.write_with_expiry(T, b"m", b"v", NONE, Expiry::Keep).unwrap();
    assert_eq!(store.meta(T, b"m", NONE).unwrap().expiry, None);
    store.write_with_expiry(T, b"w", b"v", NONE, at(500)).unwrap();
    let ops = [WriteOp { table: T, key: b"w", value: b"w2", rules: NONE, expiry: Expiry::Keep }];
    store.multi_write(&ops)[0].as_ref().unwrap();
    assert_eq!(store.meta(T, b"w", NONE).unwrap().expiry, Some(UnixMillis(T0 + 500)));
    store.check_invariants().unwrap();
}

/// The hot path: objects without expiry never make the store read its
/// clock (a read of an object with one reads it once).
#[test]
fn objects_without_expiry_never_read_the_clock() {
    let c = clock();
    let store = store_on(&c);
    for i in 0..200u32 {
        store.write(T, &i.to_le_bytes(), b"plain", NONE).unwrap();
    }
    let mut out = Vec::new();
    for i in 0..200u32 {
        store.read_into(T, &i.to_le_bytes(), NONE, &mut out).unwrap();
        store.write(T, &i.to_le_bytes(), b"again", NONE).unwrap();
    }
    store.increment(T, b"counter", 1, NONE).unwrap();
    store.enumerate(T, EnumCursor::START, 1000).unwrap();
    store.remove(T, &0u32.to_le_bytes(), NONE).unwrap();
    store.clean_now(4, true);
    assert_eq!(store.sweep_expired(), 0);
    assert_eq!(c.reads(), 0, "the clock was read for objects without expiry");
    store.write_with_expiry(T, b"e", b"v", NONE, at(10)).unwrap();
    let before = c.reads();
    store.read_into(T, b"e", NONE, &mut out).unwrap();
    assert_eq!(c.reads(), before + 1);
}

/// The entry of an object without expiry is byte for byte what format
/// version 1 wrote, and one with an expiry is 1-10 bytes longer.
#[test]
fn objects_without_expiry_do_not_grow() {
    let plain = format::object_len(T, Version(5), 8, 100);
    assert_eq!(format::object_len_with(T, Version(5), None, 8, 100), plain);
    let expiring = format::object_len_with(T, Version(5), Some(UnixMillis(T0)), 8, 100);
    assert_eq!(expiring, plain + 6, "a current time is a 6-byte varint");
}

/// Fills the store with objects that will expire, overwriting some keys
/// first so that tombstones of older versions exist.
fn fill_expiring(store: &Store, n: u32, ttl: u64) {
    for i in 0..n {
        let key = format!("old{i}");
        store.write(T, key.as_bytes(), &[1u8; 300], NONE).unwrap();
        store.write_with_expiry(T, key.as_bytes(), &[2u8; 300], NONE, at(ttl)).unwrap();
    }
}

#[test]
fn cleaner_drops_expired_objects_instead_of_relocating_them() {
    let c = clock();
    let store = store_on(&c);
    fill_expiring(&store, 150, 1000);
    store.write(T, b"keeper", b"stays", NONE).unwrap();
    let dropped_version = store.meta(T, b"old0", NONE).unwrap().version;
    let before = store.stats();
    c.advance_ms(1000);
    store.clean_now(20, true);
    let s = store.stats();
    assert!(s.expired_dropped > 100, "dropped only {}", s.expired_dropped);
    assert!(
        s.bytes_relocated - before.bytes_relocated < 150 * 300,
        "expired objects were relocated: {} bytes",
        s.bytes_relocated - before.bytes_relocated
    );
    assert_eq!(s.expired_keys, s.expired_dropped);
    store.check_invariants().unwrap();
    // Dropping raised the safe version: a re-created key gets a higher version.
    let v = store.write(T, b"old0", b"again", NONE).unwrap();
    assert!(v > dropped_version, "{v} after a dropped {dropped_version}");
}

/// What recovery would find after the cleaner dropped expired objects
/// (what is left of the log, replayed into a new store, clock past the
/// expiry): neither the expired objects nor the older versions they had
/// replaced come back.
#[test]
fn replay_after_the_cleaner_dropped_expired_objects_resurrects_nothing() {
    let c = clock();
    let store = store_on(&c);
    fill_expiring(&store, 150, 1000);
    store.write(T, b"keeper", b"stays", NONE).unwrap();
    c.advance_ms(1000);
    store.clean_now(20, true);
    assert!(store.stats().expired_dropped > 0);
    let segments = store.log_segments();
    let again = store_on(&c);
    let report = again.replay(segments.iter().map(|(_, b)| b.as_slice())).unwrap();
    for i in 0..150u32 {
        let key = format!("old{i}");
        assert_eq!(again.read(T, key.as_bytes(), NONE), Err(StoreError::ObjectDoesntExist), "{key} came back");
    }
    assert_eq!(again.read(T, b"keeper", NONE).unwrap().0, b"stays");
    assert_eq!(again.stats().objects, 1, "{report:?}");
    again.check_invariants().unwrap();
}

/// An expired object met by a replay is a tombstone of its key: an older
/// version in another segment, even without a tombstone of its own, stays
/// dead whichever segment comes first.
#[test]
fn replay_treats_an_expired_object_as_a_tombstone() {
    let c = clock();
    let mut older = Vec::new();
    format::encode_object(&mut older, T, Version(3), b"k", b"older");
    let mut newer = Vec::new();
    format::encode_object_with(&mut newer, T, Version(7), Some(UnixMillis(T0 + 10)), b"k", b"newer");
    // A new store that replayed both, in this order.
    let replayed = |first: &[u8], second: &[u8]| {
        let store = store_on(&c);
        let mut replay = shoal_engine::Replay::default();
        for entries in [first, second] {
            // As `format::filter_entries` computes it: above every version.
            store.replay_entries(&mut replay, entries, Version(8)).unwrap();
        }
        let report = store.finish_replay(replay).unwrap();
        (store, report)
    };
    for (first, second) in [(&older, &newer), (&newer, &older)] {
        let (store, report) = replayed(first, second);
        // Not expired yet: the newer one, with its expiry.
        let meta = store.meta(T, b"k", NONE).unwrap();
        assert_eq!((meta.version, meta.expiry), (Version(7), Some(UnixMillis(T0 + 10))), "{report:?}");
    }
    c.advance_ms(10);
    for (first, second) in [(&older, &newer), (&newer, &older)] {
        let (store, report) = replayed(first, second);
        assert_eq!(report.objects_expired, 1);
        assert_eq!(store.read(T, b"k", NONE), Err(StoreError::ObjectDoesntExist), "{report:?}");
        assert_eq!(store.stats().objects, 0);
        assert!(store.safe_version() > Version(7));
        store.check_invariants().unwrap();
    }
}

#[test]
fn replay_keeps_expiry_times() {
    let c = clock();
    let store = store_on(&c);
    for i in 0..50u32 {
        let expiry = if i % 2 == 0 { at(1000 + i as u64) } else { Expiry::Never };
        store.write_with_expiry(T, &i.to_le_bytes(), b"v", NONE, expiry).unwrap();
    }
    let segments = store.log_segments();
    let again = store_on(&c);
    again.replay(segments.iter().map(|(_, b)| b.as_slice())).unwrap();
    for i in 0..50u32 {
        let want = (i % 2 == 0).then(|| UnixMillis(T0 + 1000 + i as u64));
        assert_eq!(again.meta(T, &i.to_le_bytes(), NONE).unwrap().expiry, want);
    }
    assert_eq!(again.stats().expiring_objects, 25);
    again.check_invariants().unwrap();
}

#[test]
fn sweep_removes_expired_objects_with_tombstones() {
    let c = clock();
    let store = store_on(&c);
    fill_expiring(&store, 100, 500);
    for i in 0..100u32 {
        store.write_with_expiry(T, format!("later{i}").as_bytes(), b"v", NONE, at(5000)).unwrap();
        store.write(T, format!("plain{i}").as_bytes(), b"v", NONE).unwrap();
    }
    assert_eq!(store.sweep_expired(), 0, "nothing has expired");
    let idle = store.stats();
    c.advance_ms(500);
    let tombs_before = store.stats().tombstone_bytes;
    assert_eq!(store.sweep_expired(), 100);
    let s = store.stats();
    assert_eq!((s.objects, s.expired_swept, s.expiring_objects), (300 - 100, 100, 100));
    assert!(s.tombstone_bytes > tombs_before, "the sweep's removals are logged");
    store.check_invariants().unwrap();
    // Segments whose objects expire later are not rescanned for nothing.
    assert_eq!(store.sweep_expired(), 0);
    let after = store.stats();
    assert_eq!(after.sweep_segments_scanned, s.sweep_segments_scanned, "{idle:?}");
    // A replay of the log (clock back before the expiry, as on a recovery
    // master whose clock runs behind) keeps them removed.
    let segments = store.log_segments();
    let behind = clock();
    let again = store_on(&behind);
    again.replay(segments.iter().map(|(_, b)| b.as_slice())).unwrap();
    assert_eq!(again.read(T, b"old0", NONE), Err(StoreError::ObjectDoesntExist));
    assert_eq!(again.stats().objects, 200);
}

/// The sweep thread, on the real clock, removes expired objects within a
/// few intervals, and a pass stays within its budget.
#[test]
fn sweep_thread_bounds_how_long_expired_objects_hold_memory() {
    let config = StoreConfig {
        expiry_sweep_interval: Duration::from_millis(20),
        expiry_sweep_budget: Duration::from_millis(5),
        ..common::small_config(512, true)
    };
    let store = Store::new(config).unwrap();
    store.create_table(T);
    let expiry = Expiry::At(store.now().plus_ms(200));
    for i in 0..300u32 {
        store.write_with_expiry(T, &i.to_le_bytes(), &[0u8; 100], NONE, expiry).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(store.stats().objects, 300, "removed before their expiry");
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.stats().objects > 0 {
        assert!(Instant::now() < deadline, "expired objects still held: {:?}", store.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = store.stats();
    assert_eq!(s.expired_keys, 300);
    assert!(s.sweep_passes > 0);
    // Each pass stops at its budget (plus one segment's work).
    assert!(s.sweep_ms <= s.sweep_passes * 50, "{} ms over {} passes", s.sweep_ms, s.sweep_passes);
    store.check_invariants().unwrap();
}

/// A transaction sees an expired key as missing, writes, keeps and
/// changes expiry times as single writes do, and commits them.
#[test]
fn transactions_honour_and_set_expiry_times() {
    use shoal_engine::Commit;
    let c = clock();
    let store = store_on(&c);
    store.write_with_expiry(T, b"gone", b"old", NONE, at(10)).unwrap();
    store.write_with_expiry(T, b"keep", b"v", NONE, at(1000)).unwrap();
    store.write(T, b"plain", b"v", NONE).unwrap();
    c.advance_ms(10);
    let appended = store.stats().writes;
    let mut txn = store.transaction(&[(T, b"gone"), (T, b"keep"), (T, b"plain"), (T, b"new")]);
    let mut buf = Vec::new();
    assert_eq!(txn.read_into(T, b"gone", &mut buf), Err(StoreError::ObjectDoesntExist));
    assert_eq!(txn.version(T, b"gone"), Ok(None));
    // A refused change of an expired key stages nothing to commit.
    assert_eq!(txn.remove(T, b"gone", RejectRules::must_exist()), Err(StoreError::ObjectDoesntExist));
    assert_eq!(txn.set_expiry(T, b"gone", None, NONE), Err(StoreError::ObjectDoesntExist));
    let meta = txn.read_meta_into(T, b"keep", None).unwrap();
    assert_eq!(meta.expiry, Some(UnixMillis(T0 + 1000)));
    txn.write_with_expiry(T, b"keep", b"w", NONE, Expiry::Keep).unwrap();
    txn.set_expiry(T, b"plain", Some(UnixMillis(T0 + 500)), NONE).unwrap();
    txn.write_with_expiry(T, b"new", b"n", RejectRules::must_not_exist(), at(700)).unwrap();
    assert_eq!(txn.read_meta_into(T, b"new", None).unwrap().expiry, Some(UnixMillis(T0 + 700)));
    assert_eq!(txn.commit(), Ok(Commit::Done));
    assert_eq!(store.stats().writes, appended + 3, "the expired key was left alone");
    assert_eq!(store.read(T, b"keep", NONE).unwrap().0, b"w");
    assert_eq!(store.meta(T, b"keep", NONE).unwrap().expiry, Some(UnixMillis(T0 + 1000)));
    assert_eq!(store.meta(T, b"plain", NONE).unwrap().expiry, Some(UnixMillis(T0 + 500)));
    assert_eq!(store.meta(T, b"new", NONE).unwrap().expiry, Some(UnixMillis(T0 + 700)));
    // A write over the expired key in a transaction replaces it.
    let mut txn = store.transaction(&[(T, b"gone")]);
    txn.write(T, b"gone", b"again", RejectRules::must_not_exist()).unwrap();
    assert_eq!(txn.commit(), Ok(Commit::Done));
    assert_eq!(store.read(T, b"gone", NONE).unwrap().0, b"again");
    assert_eq!(store.stats().expired_keys, 1);
    store.check_invariants().unwrap();
}
