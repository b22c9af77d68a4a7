//! Tombstones an overwrite leaves out (`docs/cleaning.md`, "Overwrites in
//! the head need no tombstone"): when they are left out and when not, and
//! that no replay of what the backups hold, in any order, brings back an
//! overwritten or removed object.

#[path = "common/backups.rs"]
mod backups;
mod common;

use backups::Backups;
use shoal_engine::{LogObserver, RejectRules, Store, StoreError, TableId, Version, WriteOp};
use std::collections::BTreeMap;
use std::sync::Arc;

const T: TableId = TableId(1);

fn store_with_backups() -> (Store, Arc<Backups>) {
    let backups = Arc::new(Backups::default());
    let store =
        Store::with_observer(common::small_config(256, false), Some(backups.clone() as Arc<dyn LogObserver>)).unwrap();
    store.create_table(T);
    (store, backups)
}

/// A new store holding table `T`, rebuilt from `segments` by a replay.
fn replayed(segments: &[Vec<u8>]) -> Store {
    let rebuilt = Store::new(common::small_config(1024, false)).unwrap();
    rebuilt.create_table(T);
    rebuilt.replay(segments.iter().map(|s| s.as_slice())).unwrap();
    rebuilt
}

/// Replays the log as backups hold it, and in mixed forms, in several
/// orders, and checks each result against `model` for every key in `keys`
/// (a key missing from the model must be missing).
fn check_replays(store: &Store, backups: &Backups, model: &BTreeMap<Vec<u8>, (Vec<u8>, Version)>, keys: &[Vec<u8>]) {
    for seed in 0..4u64 {
        // Seed 0: every segment as appended; then a mix with compacted forms.
        let segs = backups.log_of(store, |i| seed != 0 && (i as u64 + seed).is_multiple_of(2), seed);
        let rebuilt = replayed(&segs);
        for k in keys {
            let got = rebuilt.read(T, k, RejectRules::default());
            match model.get(k) {
                Some(want) => assert_eq!(got.as_ref(), Ok(want), "key {k:?} after replay {seed}"),
                None => assert_eq!(got, Err(StoreError::ObjectDoesntExist), "key {k:?} came back in replay {seed}"),
            }
        }
        rebuilt.check_invariants().unwrap();
    }
}

#[test]
fn write_overwrite_of_an_object_in_the_head_appends_no_tombstone() {
    let (store, backups) = store_with_backups();
    let mut model = BTreeMap::new();
    let v1 = store.write(T, b"k", b"one", RejectRules::default()).unwrap();
    let v2 = store.write(T, b"k", b"two", RejectRules::default()).unwrap();
    assert!(v2 > v1);
    let s = store.stats();
    assert_eq!((s.tombstones_written, s.tombstones_elided), (0, 1));
    // A multi-write: one overwrite (elided) and one new key (nothing to elide).
    let ops =
        [WriteOp::new(T, b"k", b"three", RejectRules::default()), WriteOp::new(T, b"j", b"j1", RejectRules::default())];
    let vs: Vec<Version> = store.multi_write(&ops).into_iter().map(|r| r.unwrap()).collect();
    // An increment and an expiry change are overwrites too.
    let vc1 = store.write(T, b"c", b"1", RejectRules::default()).unwrap();
    let (_, vc2) = store.increment(T, b"c", 4, RejectRules::default()).unwrap();
    assert!(vc2 > vc1);
    store.set_expiry(T, b"j", None, RejectRules::default()).unwrap();
    let s = store.stats();
    assert_eq!((s.tombstones_written, s.tombstones_elided), (0, 4), "{s:?}");
    let vj = store.read(T, b"j", RejectRules::default()).unwrap().1;
    model.insert(b"k".to_vec(), (b"three".to_vec(), vs[0]));
    model.insert(b"j".to_vec(), (b"j1".to_vec(), vj));
    model.insert(b"c".to_vec(), (b"5".to_vec(), vc2));
    let keys: Vec<Vec<u8>> = ["k", "j", "c"].iter().map(|k| k.as_bytes().to_vec()).collect();
    check_replays(&store, &backups, &model, &keys);

    // In a new head, the overwrite of an object in the old one appends
    // its tombstone, and a remove always does.
    store.roll_head().unwrap();
    let v4 = store.write(T, b"k", b"four", RejectRules::default()).unwrap();
    assert_eq!(store.stats().tombstones_written, 1);
    model.insert(b"k".to_vec(), (b"four".to_vec(), v4));
    check_replays(&store, &backups, &model, &keys);
    store.remove(T, b"k", RejectRules::default()).unwrap();
    store.remove(T, b"c", RejectRules::default()).unwrap();
    let s = store.stats();
    assert_eq!((s.tombstones_written, s.tombstones_elided), (3, 4), "{s:?}");
    model.remove(b"k".as_slice());
    model.remove(b"c".as_slice());
    check_replays(&store, &backups, &model, &keys);
    // And after cleaning moved and dropped them.
    store.clean_now(4, true);
    store.clean_now(4, false);
    check_replays(&store, &backups, &model, &keys);
}

#[test]
fn write_overwrite_that_does_not_fit_in_the_head_appends_its_tombstone() {
    let (store, backups) = store_with_backups();
    let mut model = BTreeMap::new();
    // 3 KiB values in 16 KiB segments: about every fifth overwrite finds
    // the head too full, goes into a new head, and must log a tombstone
    // for the object left in the old one.
    let n = 40;
    for i in 0..n {
        let v = store.write(T, b"big", &vec![i as u8; 3000], RejectRules::default()).unwrap();
        model.insert(b"big".to_vec(), (vec![i as u8; 3000], v));
    }
    let s = store.stats();
    assert_eq!(s.tombstones_written + s.tombstones_elided, n - 1, "{s:?}");
    assert!(s.tombstones_written >= 5 && s.tombstones_elided >= 20, "{s:?}");
    let keys = vec![b"big".to_vec()];
    check_replays(&store, &backups, &model, &keys);
    store.clean_now(3, true);
    check_replays(&store, &backups, &model, &keys);
    store.remove(T, b"big", RejectRules::default()).unwrap();
    model.clear();
    check_replays(&store, &backups, &model, &keys);
    store.clean_now(3, true);
    store.clean_now(3, false);
    check_replays(&store, &backups, &model, &keys);
}

/// The case the rule has to survive: an object overwritten in the head
/// (no tombstone), then its successor relocated by the cleaner into a
/// survivor, overwritten again from another segment, and removed, with
/// cleaning between every step.
#[test]
fn replay_after_elided_overwrite_relocation_and_remove_brings_nothing_back() {
    let (store, backups) = store_with_backups();
    let mut model = BTreeMap::new();
    let keys: Vec<Vec<u8>> = (0..8u32).map(|i| format!("key{i}").into_bytes()).collect();
    let filler = |store: &Store, round: u32| {
        for i in 0..30u32 {
            store.write(T, format!("fill{round}-{i}").as_bytes(), &[1u8; 600], RejectRules::default()).unwrap();
        }
    };
    for (i, k) in keys.iter().enumerate() {
        store.write(T, k, b"old", RejectRules::default()).unwrap();
        let v = store.write(T, k, format!("new{i}").as_bytes(), RejectRules::default()).unwrap();
        model.insert(k.clone(), (format!("new{i}").into_bytes(), v));
    }
    assert_eq!(store.stats().tombstones_elided, keys.len() as u64);
    // The old versions' segment is left behind and cleaned.
    filler(&store, 0);
    for i in 0..30u32 {
        store.remove(T, format!("fill0-{i}").as_bytes(), RejectRules::default()).unwrap();
    }
    check_replays(&store, &backups, &model, &keys);
    store.clean_now(6, true);
    check_replays(&store, &backups, &model, &keys);
    // Overwrite half from wherever they are now, remove the other half.
    for (i, k) in keys.iter().enumerate() {
        if i % 2 == 0 {
            let v = store.write(T, k, b"newest", RejectRules::default()).unwrap();
            model.insert(k.clone(), (b"newest".to_vec(), v));
        } else {
            store.remove(T, k, RejectRules::default()).unwrap();
            model.remove(k);
        }
        check_replays(&store, &backups, &model, &keys);
    }
    for round in 1..4 {
        filler(&store, round);
        for i in 0..30u32 {
            store.remove(T, format!("fill{round}-{i}").as_bytes(), RejectRules::default()).unwrap();
        }
        store.clean_now(4, round % 2 == 0);
        check_replays(&store, &backups, &model, &keys);
    }
    let s = store.stats();
    assert!(s.combined_passes > 0 && s.compactions > 0, "{s:?}");
}

/// Skewed overwrites and removes in a small store whose both cleaners run
/// often: many elided tombstones, many written, and every replay of the
/// backups' log, in shuffled orders, equals the store.
#[test]
fn replay_of_skewed_overwrites_and_removes_matches_the_model_in_any_order() {
    let (store, backups) = store_with_backups();
    let mut model: BTreeMap<Vec<u8>, (Vec<u8>, Version)> = BTreeMap::new();
    let keys: Vec<Vec<u8>> = (0..64u32).map(|i| format!("key{i}").into_bytes()).collect();
    let mut x = 99u64;
    let mut rnd = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    for step in 0..6000u64 {
        let r = rnd();
        // Nine in ten operations on 4 hot keys.
        let k = &keys[if !r.is_multiple_of(10) { (r % 4) as usize } else { (r % 64) as usize }];
        if rnd().is_multiple_of(7) {
            store.remove(T, k, RejectRules::default()).unwrap();
            model.remove(k);
        } else {
            let val = vec![step as u8; (rnd() % 500) as usize];
            let v = store.write(T, k, &val, RejectRules::default()).unwrap();
            model.insert(k.clone(), (val, v));
        }
        if step % 97 == 0 {
            store.clean_now(1, step % 2 == 0);
        }
        if step % 600 == 599 {
            check_replays(&store, &backups, &model, &keys);
        }
    }
    check_replays(&store, &backups, &model, &keys);
    // Nothing else either: a replay holds exactly the model's objects.
    let rebuilt = replayed(&backups.log_of(&store, |_| false, 7));
    let want: BTreeMap<Vec<u8>, (Vec<u8>, Version)> = model.clone();
    assert_eq!(common::enumerate_all(&rebuilt, T, 16), want);
    let s = store.stats();
    assert!(s.tombstones_elided > 1000 && s.tombstones_written > 500, "{s:?}");
    assert!(s.compactions > 10 && s.combined_passes > 10, "{s:?}");
    store.check_invariants().unwrap();
}

/// A few keys set and removed over and over, with the cleaner thread on:
/// the cleaner closes a head that is mostly dead early (`heads_rolled`;
/// after that each combined pass's splice closes the head it found) and
/// cleans it, the log stays small, and no replay of the backups' log, in
/// any order, brings back a removed key or loses a kept one.
#[test]
fn replay_after_heads_rolled_for_churn_matches_the_model() {
    // Segments larger than the cleaner's least slack (2 MiB), as the
    // default 8 MiB ones are: the garbage of a small log is then in its head.
    let config = shoal_engine::StoreConfig {
        memory_bytes: 64 << 20,
        segment_bytes: 4 << 20,
        seglet_bytes: 4 << 10,
        ..common::small_config(1024, true)
    };
    let backups = Arc::new(Backups::default());
    let store = Store::with_observer(config, Some(backups.clone() as Arc<dyn LogObserver>)).unwrap();
    store.create_table(T);
    let mut model: BTreeMap<Vec<u8>, (Vec<u8>, Version)> = BTreeMap::new();
    let keys: Vec<Vec<u8>> = (0..24u32).map(|i| format!("key{i}").into_bytes()).collect();
    for k in &keys[..8] {
        let v = store.write(T, k, b"kept", RejectRules::default()).unwrap();
        model.insert(k.clone(), (b"kept".to_vec(), v));
    }
    let mut most_in_use = 0;
    for n in 0..200_000u64 {
        let k = &keys[8 + (n % 16) as usize];
        store.write(T, k, &[n as u8; 40], RejectRules::default()).unwrap();
        store.remove(T, k, RejectRules::default()).unwrap();
        if n % 1000 == 0 {
            most_in_use = most_in_use.max(store.stats().seglets_in_use);
        }
        if n % 40_000 == 39_999 {
            check_replays(&store, &backups, &model, &keys);
        }
    }
    let s = store.stats();
    // About 15 MiB appended, in a log that stayed within a head and two
    // segments (the old floor kept four segments before cleaning).
    assert!(s.appended_bytes > 12 << 20 && s.heads_rolled >= 1, "{s:?}");
    assert!(most_in_use * 4096 <= 12 << 20, "{} KiB in use at most: {s:?}", most_in_use * 4);
    check_replays(&store, &backups, &model, &keys);
    let rebuilt = replayed(&backups.log_of(&store, |_| false, 3));
    assert_eq!(common::enumerate_all(&rebuilt, T, 16), model);
    store.check_invariants().unwrap();
}
