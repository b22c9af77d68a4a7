//! Store tests: bad input, concurrency with the cleaner, replay, and what
//! the log observer sees.

mod common;

use shoal_engine::format;
use shoal_engine::{
    LogObserver, RejectRules, SegmentId, SegmentKind, Store, StoreConfig, StoreError, TableId, Version,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: TableId = TableId(1);

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    store.write(T, b"k", b"v", RejectRules::default()).unwrap();
    let before = store.stats();
    let big_key = vec![0u8; 257];
    let big_value = vec![0u8; (4 << 10) + 1];
    assert_eq!(
        store.write(T, &big_key, b"v", RejectRules::default()),
        Err(StoreError::KeyTooLarge { len: 257, max: 256 })
    );
    assert_eq!(
        store.write(T, b"k", &big_value, RejectRules::default()),
        Err(StoreError::ValueTooLarge { len: (4 << 10) + 1, max: 4 << 10 })
    );
    assert_eq!(store.write(TableId(2), b"k", b"v", RejectRules::default()), Err(StoreError::UnknownTable(TableId(2))));
    assert_eq!(store.read(TableId(2), b"k", RejectRules::default()), Err(StoreError::UnknownTable(TableId(2))));
    assert_eq!(
        store.write(T, b"k", b"x", RejectRules::must_not_exist()),
        Err(StoreError::ObjectExists { version: Version(1) })
    );
    assert_eq!(
        store.remove(T, b"k", RejectRules::version_is(Version(5))),
        Err(StoreError::WrongVersion { version: Version(1) })
    );
    assert_eq!(store.increment(T, b"k", 1, RejectRules::default()), Err(StoreError::NotAnInteger));
    assert_eq!(store.read(T, b"k", RejectRules::default()), Ok((b"v".to_vec(), Version(1))));
    let after = store.stats();
    assert_eq!((before.objects, before.live_bytes, before.writes), (after.objects, after.live_bytes, after.writes));
    assert!(StoreConfig { segment_bytes: 3000, ..StoreConfig::default() }.validate().is_err());
    assert!(StoreConfig { memory_bytes: 1 << 20, ..StoreConfig::default() }.validate().is_err());
}

#[test]
fn versions_grow_across_remove_and_recreate() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    let v1 = store.write(T, b"a", b"1", RejectRules::default()).unwrap();
    let v2 = store.write(T, b"a", b"2", RejectRules::default()).unwrap();
    assert!(v2 > v1);
    assert_eq!(store.remove(T, b"a", RejectRules::default()), Ok(Some(v2)));
    let v3 = store.write(T, b"a", b"3", RejectRules::default()).unwrap();
    assert!(v3 > v2, "re-created version {v3} not above removed {v2}");
    assert_eq!(store.increment(T, b"n", 5, RejectRules::default()).unwrap().0, 5);
    assert_eq!(store.increment(T, b"n", -7, RejectRules::default()).unwrap().0, -2);
    // Counters are decimal ASCII, as Redis's INCR makes them.
    assert_eq!(store.read(T, b"n", RejectRules::default()).unwrap().0, b"-2".to_vec());
    store.write(T, b"dec", b"41", RejectRules::default()).unwrap();
    assert_eq!(store.increment(T, b"dec", 1, RejectRules::default()).unwrap().0, 42);
    store.write(T, b"max", i64::MAX.to_string().as_bytes(), RejectRules::default()).unwrap();
    assert_eq!(store.increment(T, b"max", 1, RejectRules::default()), Err(StoreError::Overflow));
}

#[test]
fn full_memory_refuses_writes_with_out_of_memory_not_a_hang() {
    let store =
        Store::new(StoreConfig { write_wait: Duration::from_secs(3), ..common::small_config(256, true) }).unwrap();
    store.create_table(T);
    let started = Instant::now();
    let mut refused = None;
    for i in 0..1000u32 {
        match store.write(T, &i.to_le_bytes(), &[1u8; 1000], RejectRules::default()) {
            Ok(_) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (n, e) = refused.expect("256 KiB cannot hold 1000 KB");
    assert_eq!(e, StoreError::OutOfMemory);
    assert!(started.elapsed() < Duration::from_secs(10));
    let s = store.stats();
    assert!(s.memory_utilisation > 0.6, "refused at {} objects, utilisation {}", n, s.memory_utilisation);
    // Removes still work (tombstone reserve), and then writes again.
    for i in 0..n / 2 {
        store.remove(T, &i.to_le_bytes(), RejectRules::default()).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.write(T, b"again", &[2u8; 1000], RejectRules::default()) {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => panic!("write after removes: {e}"),
            Err(_) => {}
        }
    }
    for i in n / 2..n {
        assert_eq!(store.read(T, &i.to_le_bytes(), RejectRules::default()).unwrap().0, vec![1u8; 1000]);
    }
    store.check_invariants().unwrap();
}

/// A value that says which key and which write it is, and checks itself.
fn stamp(key: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let fill = (key as u64).wrapping_mul(31).wrapping_add(seq) as u8;
    while v.len() < len.max(16) {
        v.push(fill);
    }
    v
}

fn check_stamp(key: u32, v: &[u8]) -> u64 {
    assert!(v.len() >= 16, "short value");
    assert_eq!(u32::from_le_bytes(v[..4].try_into().unwrap()), key, "value of another key");
    let seq = u64::from_le_bytes(v[4..12].try_into().unwrap());
    let fill = (key as u64).wrapping_mul(31).wrapping_add(seq) as u8;
    assert!(v[12..].iter().all(|b| *b == fill), "torn value for key {key} seq {seq}");
    seq
}

#[test]
fn readers_writers_and_cleaner_run_together_without_torn_reads() {
    let store = Arc::new(Store::new(common::small_config(512, true)).unwrap());
    store.create_table(T);
    const KEYS: u32 = 64;
    for k in 0..KEYS {
        store.write(T, &k.to_le_bytes(), &stamp(k, 0, 100), RejectRules::default()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let latest: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let mut handles = Vec::new();
    for w in 0..2u32 {
        let (store, stop, latest) = (store.clone(), stop.clone(), latest.clone());
        handles.push(std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                let k = (seq as u32 * 7 + w) % KEYS;
                if k % 2 != w {
                    continue;
                }
                let len = 16 + (seq as usize * 37) % 1500;
                store.write(T, &k.to_le_bytes(), &stamp(k, seq, len), RejectRules::default()).unwrap();
                latest[k as usize].store(seq, Ordering::Release);
                n += 1;
            }
            n
        }));
    }
    for r in 0..2u32 {
        let (store, stop, latest) = (store.clone(), stop.clone(), latest.clone());
        handles.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let mut i = r;
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_mul(1664525).wrapping_add(1013904223);
                let k = i % KEYS;
                let floor = latest[k as usize].load(Ordering::Acquire);
                let (v, _) = store.read(T, &k.to_le_bytes(), RejectRules::default()).unwrap();
                let seq = check_stamp(k, &v);
                // Each key has one writer with increasing seq: a read never
                // goes back before a write that completed before it started.
                assert!(seq >= floor, "key {k}: read seq {seq} older than completed {floor}");
                n += 1;
            }
            n
        }));
    }
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let s = store.stats();
    assert!(counts.iter().all(|c| *c > 100), "some thread made no progress: {counts:?}");
    assert!(s.compactions + s.combined_passes > 10, "cleaner barely ran: {s:?}");
    store.check_invariants().unwrap();
    for k in 0..KEYS {
        let (v, _) = store.read(T, &k.to_le_bytes(), RejectRules::default()).unwrap();
        assert_eq!(check_stamp(k, &v), latest[k as usize].load(Ordering::Relaxed));
    }
}

#[test]
fn replay_rebuilds_the_same_store() {
    let cfg = common::small_config(512, false);
    let store = Store::new(cfg.clone()).unwrap();
    let (t1, t2) = (TableId(1), TableId(2));
    store.create_table(t1);
    store.create_table(t2);
    let mut seed = 11u64;
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let mut removed_versions: HashMap<(TableId, Vec<u8>), Version> = HashMap::new();
    for i in 0..6000 {
        let t = if rnd() % 3 == 0 { t2 } else { t1 };
        let k = format!("key{}", rnd() % 80).into_bytes();
        if rnd() % 4 == 0 {
            if let Ok(Some(v)) = store.remove(t, &k, RejectRules::default()) {
                removed_versions.insert((t, k), v);
            }
        } else {
            store.write(t, &k, &vec![i as u8; rnd() % 700], RejectRules::default()).unwrap();
        }
    }
    let s = store.stats();
    assert!(s.compactions + s.combined_passes > 5, "cleaning must have happened: {s:?}");
    let segments = store.log_segments();
    let rebuilt = Store::new(StoreConfig { memory_bytes: 2 << 20, ..cfg }).unwrap();
    // Any order: replay newest segment first.
    let mut slices: Vec<&[u8]> = segments.iter().map(|(_, b)| b.as_slice()).collect();
    slices.reverse();
    let report = rebuilt.replay(slices.iter().copied()).unwrap();
    assert_eq!(report.segments, segments.len());
    for t in [t1, t2] {
        let a = common::enumerate_all(&store, t, 16);
        let b = common::enumerate_all(&rebuilt, t, 16);
        assert_eq!(a, b, "table {t} differs after replay");
    }
    assert!(rebuilt.safe_version() >= store.safe_version());
    rebuilt.check_invariants().unwrap();
    // Re-creating a removed key gets a version above the removed one.
    for ((t, k), v) in removed_versions.iter().take(20) {
        if rebuilt.read(*t, k, RejectRules::default()).is_err() {
            let nv = rebuilt.write(*t, k, b"new", RejectRules::default()).unwrap();
            assert!(nv > *v);
        }
    }
}

#[test]
fn replay_honours_tombstones_across_segments_in_any_order() {
    let cfg = common::small_config(512, false);
    let store = Store::new(cfg.clone()).unwrap();
    store.create_table(T);
    store.write(T, b"dead", b"1", RejectRules::default()).unwrap();
    store.write(T, b"live", b"1", RejectRules::default()).unwrap();
    // Push the tombstone into a later segment.
    for i in 0..40u32 {
        store.write(T, &i.to_le_bytes(), &[0u8; 900], RejectRules::default()).unwrap();
    }
    store.remove(T, b"dead", RejectRules::default()).unwrap();
    store.write(T, b"live", b"2", RejectRules::default()).unwrap();
    let segs = store.log_segments();
    assert!(segs.len() > 2);
    for order in [false, true] {
        let rebuilt = Store::new(cfg.clone()).unwrap();
        let mut v: Vec<&[u8]> = segs.iter().map(|s| s.1.as_slice()).collect();
        if order {
            v.reverse();
        }
        rebuilt.replay(v.iter().copied()).unwrap();
        assert_eq!(rebuilt.read(T, b"dead", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
        assert_eq!(rebuilt.read(T, b"live", RejectRules::default()).unwrap().0, b"2");
    }
}

#[test]
fn replay_filtered_keeps_only_its_partition_and_raises_the_safe_version() {
    let cfg = common::small_config(512, false);
    let store = Store::new(cfg.clone()).unwrap();
    store.create_table(T);
    for i in 0..200u32 {
        store.write(T, format!("k{i}").as_bytes(), b"v", RejectRules::default()).unwrap();
    }
    for i in 0..50u32 {
        store.remove(T, format!("k{i}").as_bytes(), RejectRules::default()).unwrap();
    }
    let segs = store.log_segments();
    let mine = |key: &[u8]| shoal_engine::key_hash(T, key).0 < u64::MAX / 2;
    let rebuilt = Store::new(cfg).unwrap();
    let report = rebuilt.replay_filtered(segs.iter().map(|s| (s.0, s.1.as_slice())), |_, _, k| mine(k)).unwrap();
    let mut kept = 0;
    for i in 0..200u32 {
        let key = format!("k{i}");
        let got = rebuilt.read(T, key.as_bytes(), RejectRules::default());
        if mine(key.as_bytes()) && i >= 50 {
            assert!(got.is_ok(), "{key}");
            kept += 1;
        } else {
            assert_eq!(got, Err(StoreError::ObjectDoesntExist), "{key}");
        }
    }
    assert_eq!(report.objects_replayed - report.objects_removed, kept);
    assert!(kept > 40 && kept < 110, "{kept}");
    assert!(rebuilt.safe_version() >= store.safe_version());
}

#[test]
fn replay_of_a_torn_head_keeps_only_verified_appends() {
    let cfg = common::small_config(512, false);
    let store = Store::new(cfg.clone()).unwrap();
    store.create_table(T);
    store.write(T, b"a", b"first", RejectRules::default()).unwrap();
    store.write(T, b"b", b"second", RejectRules::default()).unwrap();
    let segs = store.log_segments();
    let head = &segs.last().unwrap().1;
    // Tear the last append: drop its final byte (part of its checksum).
    let mut torn = vec![0u8; cfg.segment_bytes];
    torn[..head.len() - 1].copy_from_slice(&head[..head.len() - 1]);
    let rebuilt = Store::new(cfg).unwrap();
    rebuilt.replay([torn.as_slice()]).unwrap();
    assert_eq!(rebuilt.read(T, b"a", RejectRules::default()).unwrap().0, b"first");
    assert_eq!(rebuilt.read(T, b"b", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
}

/// Rebuilds every segment from the observer's events alone.
#[derive(Default)]
struct Mirror {
    segments: Mutex<BTreeMap<SegmentId, Vec<u8>>>,
    closed: Mutex<HashMap<SegmentId, (u32, u32)>>,
    freed: Mutex<Vec<SegmentId>>,
    survivors: Mutex<Vec<SegmentId>>,
}

impl LogObserver for Mirror {
    fn segment_opened(&self, segment: SegmentId, kind: SegmentKind) {
        self.segments.lock().unwrap().insert(segment, Vec::new());
        if kind == SegmentKind::Survivor {
            self.survivors.lock().unwrap().push(segment);
        }
    }
    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        let mut s = self.segments.lock().unwrap();
        let buf = s.get_mut(&segment).expect("append to an unopened segment");
        assert_eq!(buf.len(), offset as usize, "appends not contiguous");
        buf.extend_from_slice(bytes);
    }
    fn segment_closed(&self, segment: SegmentId, len: u32, checksum: u32) {
        self.closed.lock().unwrap().insert(segment, (len, checksum));
    }
    fn segments_freed(&self, _survivors: &[SegmentId], freed: &[SegmentId]) {
        self.freed.lock().unwrap().extend_from_slice(freed);
    }
}

#[test]
fn observer_sees_exactly_the_bytes_of_each_segment() {
    let mirror = Arc::new(Mirror::default());
    let store =
        Store::with_observer(common::small_config(256, false), Some(mirror.clone() as Arc<dyn LogObserver>)).unwrap();
    store.create_table(T);
    for i in 0..3000u32 {
        let k = (i % 50).to_le_bytes();
        if i % 7 == 0 {
            store.remove(T, &k, RejectRules::default()).unwrap();
        } else {
            store.write(T, &k, &vec![i as u8; (i as usize * 13) % 900], RejectRules::default()).unwrap();
        }
    }
    store.clean_now(3, true);
    let s = store.stats();
    assert!(s.combined_passes > 0 && s.compactions > 0, "{s:?}");
    let segments = mirror.segments.lock().unwrap();
    let closed = mirror.closed.lock().unwrap();
    for (id, (len, ck)) in closed.iter() {
        let bytes = &segments[id];
        assert_eq!(bytes.len(), *len as usize);
        let scan = format::scan(bytes);
        assert_eq!((scan.verified_len, scan.last_checksum), (bytes.len(), *ck), "segment {id}");
    }
    // Segments never compacted are byte-identical in memory and in the mirror.
    let in_memory = store.log_segments();
    let head = in_memory.last().unwrap().0;
    let head_bytes = &in_memory.last().unwrap().1;
    assert_eq!(&segments[&head], head_bytes, "head differs from what the observer saw");
    assert!(!mirror.freed.lock().unwrap().is_empty());
    assert!(!mirror.survivors.lock().unwrap().is_empty());
    // A replay of the mirror's live segments gives the store's contents.
    let live: Vec<&[u8]> = in_memory.iter().map(|(id, _)| segments[id].as_slice()).collect();
    let rebuilt = Store::new(common::small_config(1024, false)).unwrap();
    rebuilt.replay(live.iter().copied()).unwrap();
    assert_eq!(common::enumerate_all(&rebuilt, T, 8), common::enumerate_all(&store, T, 8));
}

/// Skewed overwrites (90% to 1% of the keys) with the cleaner thread: once
/// made the cleaner open a survivor without a reserved seglet and panic.
#[test]
fn skewed_overwrites_keep_cleaning_without_errors() {
    let cfg = StoreConfig {
        memory_bytes: 13 << 20,
        segment_bytes: 256 << 10,
        seglet_bytes: 16 << 10,
        max_value_bytes: 32 << 10,
        ..StoreConfig::default()
    };
    let store = Store::new(cfg).unwrap();
    store.create_table(T);
    let n = 34_000u64;
    let value = [7u8; 100];
    for i in 0..n {
        store.write(T, format!("{i:010}").as_bytes(), &value, RejectRules::default()).unwrap();
    }
    let mut x = 1u64;
    for w in 0..400_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = x >> 33;
        let k = if !r.is_multiple_of(10) { r % (n / 100) } else { r % n };
        if let Err(e) = store.write(T, format!("{k:010}").as_bytes(), &value, RejectRules::default()) {
            panic!("overwrite {w}: {e}; {:?}", store.stats());
        }
    }
    let s = store.stats();
    assert!(s.compactions + s.combined_passes > 100, "{s:?}");
    store.check_invariants().unwrap();
}

#[test]
fn multi_write_all_or_nothing_writes_all_or_none() {
    use shoal_engine::WriteOp;
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    store.write(T, b"b", b"old", RejectRules::default()).unwrap();
    let op = |k: &'static [u8], v: &'static [u8], rules| WriteOp::new(T, k, v, rules);
    // One refusal (b exists) refuses the whole batch: a and c stay absent.
    let refused = store.multi_write_all_or_nothing(&[
        op(b"a", b"1", RejectRules::must_not_exist()),
        op(b"b", b"2", RejectRules::must_not_exist()),
        op(b"c", b"3", RejectRules::must_not_exist()),
    ]);
    assert_eq!(refused, Err((1, StoreError::ObjectExists { version: Version(1) })));
    assert_eq!(store.read(T, b"a", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    assert_eq!(store.read(T, b"c", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    assert_eq!(store.read(T, b"b", RejectRules::default()).unwrap().0, b"old");
    let versions = store
        .multi_write_all_or_nothing(&[
            op(b"a", b"1", RejectRules::must_not_exist()),
            op(b"b", b"2", RejectRules::default()),
        ])
        .unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(store.read(T, b"b", RejectRules::default()).unwrap().0, b"2");
    assert_eq!(
        store.multi_write_all_or_nothing(&[
            op(b"x", b"1", RejectRules::default()),
            op(b"x", b"2", RejectRules::default())
        ]),
        Err((1, StoreError::InvalidBatch))
    );
    // enumerate_with visits without copying values.
    let mut keys = Vec::new();
    let mut cursor = Some(shoal_engine::EnumCursor::START);
    while let Some(c) = cursor {
        cursor = store.enumerate_with(T, c, 1, |k, _, _| keys.push(k.to_vec())).unwrap();
    }
    keys.sort();
    assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
    store.check_invariants().unwrap();
}

/// The segment named in a segment's header entry, if its bytes start with one.
fn header_segment(bytes: &[u8]) -> Option<SegmentId> {
    match format::decode(bytes) {
        Ok((format::Entry::SegmentHeader(h), _)) => Some(h.segment),
        _ => None,
    }
}

#[test]
fn segment_copy_is_the_segment_as_sent_or_its_compacted_form() {
    let mirror = Arc::new(Mirror::default());
    let store =
        Store::with_observer(common::small_config(256, false), Some(mirror.clone() as Arc<dyn LogObserver>)).unwrap();
    store.create_table(T);
    // Combined cleaning (segments leave the log), then more writes and
    // compaction only (segments keep their ids with fewer bytes).
    for round in 0..2u32 {
        for i in 0..3000u32 {
            let k = (i % 50).to_le_bytes();
            if i % 7 == 0 {
                store.remove(T, &k, RejectRules::default()).unwrap();
            } else {
                let len = (i as usize * 13 + round as usize) % 900;
                store.write(T, &k, &vec![i as u8; len], RejectRules::default()).unwrap();
            }
        }
        store.clean_now(3, round == 0);
    }
    let s = store.stats();
    assert!(s.compactions > 0 && s.combined_passes > 0, "{s:?}");
    let segments = mirror.segments.lock().unwrap();
    let closed = mirror.closed.lock().unwrap();
    let (mut same, mut compacted) = (0, 0);
    for (id, bytes) in store.log_segments() {
        let copy = store.segment_copy(id).expect("a segment of the log");
        assert_eq!(copy, bytes, "segment {id}");
        // Whole and verifiable, and it says which segment it is.
        assert_eq!(format::scan(&copy).verified_len, copy.len(), "segment {id}");
        assert_eq!(header_segment(&copy), Some(id));
        if copy == segments[&id] {
            same += 1;
        } else {
            // Compacted: shorter than what the observer saw close, with a
            // checksum of its own.
            let (len, _) = closed[&id];
            assert!(copy.len() < len as usize, "segment {id}: {} bytes, closed at {len}", copy.len());
            compacted += 1;
        }
    }
    assert!(same > 0 && compacted > 0, "{same} as sent, {compacted} compacted");
    // Segments that left the log, and ids never used, have no copy.
    let freed = mirror.freed.lock().unwrap();
    assert!(!freed.is_empty());
    for id in freed.iter() {
        assert_eq!(store.segment_copy(*id), None, "freed segment {id}");
    }
    assert_eq!(store.segment_copy(SegmentId(u64::MAX)), None);
}

/// Copies taken while writers and the cleaner thread run are always whole
/// segments of the log (never a slot the cleaner freed and reused).
#[test]
fn segment_copy_is_safe_against_the_cleaner() {
    let store = Arc::new(Store::new(common::small_config(256, true)).unwrap());
    store.create_table(T);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let k = (i % 60).to_le_bytes();
                if let Err(e) = store.write(T, &k, &vec![i as u8; (i as usize * 31) % 1500], RejectRules::default()) {
                    panic!("write {i}: {e:?}; {:#?}", store.stats());
                }
                i += 1;
            }
        })
    };
    let (mut copies, mut gone) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        // log_segments pauses the cleaner while it copies: leave it time to
        // run between rounds, or a loaded machine starves the writer of
        // memory.
        std::thread::sleep(Duration::from_millis(2));
        let ids: Vec<SegmentId> = store.log_segments().into_iter().map(|(id, _)| id).collect();
        for id in ids {
            match store.segment_copy(id) {
                Some(copy) => {
                    assert_eq!(format::scan(&copy).verified_len, copy.len(), "segment {id}");
                    assert_eq!(header_segment(&copy), Some(id));
                    copies += 1;
                }
                None => gone += 1,
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let s = store.stats();
    assert!(s.compactions + s.combined_passes > 10, "{s:?}");
    assert!(copies > 100, "{copies} copies, {gone} gone");
}

/// Ranges that split the key-hash space anywhere (mid-bucket too, as
/// tablets do) enumerate every object exactly once between them.
#[test]
fn enumerate_range_splits_the_hash_space_without_overlap_or_gap() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(T);
    for i in 0..2000u32 {
        store.write(T, format!("k{i}").as_bytes(), b"v", RejectRules::default()).unwrap();
    }
    let cuts = [0u64, 1 << 20, u64::MAX / 3 + 12_345, u64::MAX / 2 + 7, u64::MAX - 99];
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    for (i, &start) in cuts.iter().enumerate() {
        let end = cuts.get(i + 1).map_or(u64::MAX, |next| next - 1);
        let mut cursor = Some(shoal_engine::EnumCursor(start));
        let mut pages = 0;
        while let Some(c) = cursor {
            cursor = store
                .enumerate_range(T, c, end, 7, |key, _, _| {
                    let h = shoal_engine::key_hash(T, key).0;
                    assert!((start..=end).contains(&h), "hash {h:x} outside {start:x}..={end:x}");
                    *seen.entry(key.to_vec()).or_default() += 1;
                })
                .unwrap();
            pages += 1;
            assert!(pages < 10_000);
        }
    }
    assert_eq!(seen.len(), 2000);
    assert!(seen.values().all(|&n| n == 1), "an object was returned twice");
}

/// The default hash table starts small and grows with the objects while
/// readers, overwrites, removes and the cleaner run: every object written
/// is readable at every moment, enumeration returns each once, and the
/// invariants hold after several growths.
#[test]
fn hash_table_grows_online_without_losing_objects() {
    let cfg = StoreConfig {
        memory_bytes: 64 << 20,
        segment_bytes: 1 << 20,
        seglet_bytes: 64 << 10,
        max_value_bytes: 64 << 10,
        ..StoreConfig::default()
    };
    assert_eq!(cfg.hash_table_buckets, None);
    let store = Arc::new(Store::new(cfg).unwrap());
    store.create_table(T);
    let start = store.stats();
    assert_eq!(start.hash_table_buckets, 4096);
    assert_eq!(start.hash_table_bytes, 4096 * 64);
    let n = 200_000u64;
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, written, stop) = (store.clone(), written.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut x, mut reads) = (7u64, 0u64);
            while !stop.load(Ordering::Acquire) {
                let upto = written.load(Ordering::Acquire);
                if upto == 0 {
                    continue;
                }
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Keys divisible by 7 are removed as they go; the others stay.
                let i = (x >> 33) % upto;
                if i % 7 == 0 {
                    continue;
                }
                let (v, _) = store.read(T, format!("key{i}").as_bytes(), RejectRules::default()).unwrap_or_else(|e| {
                    panic!("key{i} of {upto} unreadable: {e:?}; {:?}", store.stats());
                });
                assert_eq!(v, format!("value{i}").into_bytes());
                reads += 1;
            }
            reads
        })
    };
    for i in 0..n {
        let k = format!("key{i}");
        store.write(T, k.as_bytes(), format!("value{i}").as_bytes(), RejectRules::default()).unwrap();
        if i % 3 == 0 && i > 0 {
            // An overwrite of an older key, the same value.
            let j = i.wrapping_mul(2_654_435_761) % i;
            if j % 7 != 0 {
                store
                    .write(T, format!("key{j}").as_bytes(), format!("value{j}").as_bytes(), RejectRules::default())
                    .unwrap();
            }
        }
        if i % 7 == 0 {
            store.remove(T, k.as_bytes(), RejectRules::default()).unwrap();
        }
        written.store(i + 1, Ordering::Release);
    }
    stop.store(true, Ordering::Release);
    let reads = reader.join().unwrap();
    assert!(reads > 1000, "only {reads} reads");
    let s = store.stats();
    let live = n - n.div_ceil(7);
    assert_eq!(s.objects, live);
    assert!(s.hash_table_growths >= 3, "{} growths", s.hash_table_growths);
    // Grown by half past 8 objects per bucket: at least 16/3 per bucket
    // once a growth is done (a growth in progress holds both tables).
    assert!(s.hash_table_buckets * 8 >= live, "{} buckets for {live} objects", s.hash_table_buckets);
    assert!(s.hash_table_buckets <= live.div_ceil(5), "{} buckets for {live} objects", s.hash_table_buckets);
    // The cleaner thread finishes a growth and frees the tables grown out
    // of: the table's memory comes down to one table (main buckets and an
    // overflow arena of a few chunks).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = store.stats();
        if s.hash_table_bytes <= 2 * s.hash_table_buckets * 64 {
            break;
        }
        assert!(Instant::now() < deadline, "old tables not freed: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    store.check_invariants().unwrap();
    let all = common::enumerate_all(&store, T, 100);
    assert_eq!(all.len() as u64, live);
    for (k, (v, _)) in &all {
        let i: u64 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        assert!(!i.is_multiple_of(7), "removed key{i} enumerated");
        assert_eq!(v, &format!("value{i}").into_bytes());
    }
}

/// An enumeration whose cursor is held across growths of the hash table
/// (writes between its steps grow it twice or more, overwrites land in
/// moved stripes) returns every object present throughout exactly once,
/// with its current value.
#[test]
fn enumeration_cursor_survives_hash_table_growths() {
    let cfg = StoreConfig {
        memory_bytes: 64 << 20,
        segment_bytes: 1 << 20,
        seglet_bytes: 64 << 10,
        max_value_bytes: 64 << 10,
        ..StoreConfig::default()
    };
    let store = Store::new(cfg).unwrap();
    store.create_table(T);
    let base = 30_000u64;
    for i in 0..base {
        store.write(T, format!("key{i}").as_bytes(), b"v0", RejectRules::default()).unwrap();
    }
    assert_eq!(store.stats().hash_table_growths, 0);
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut cursor = Some(shoal_engine::EnumCursor::START);
    let mut extra = 0u64;
    let mut steps = 0u64;
    while let Some(c) = cursor {
        let (objs, next) = store.enumerate(T, c, 40).unwrap();
        for o in objs {
            *seen.entry(o.key).or_insert(0) += 1;
        }
        cursor = next;
        steps += 1;
        // New keys grow the table; overwrites of base keys (same value).
        for _ in 0..100 {
            store.write(T, format!("new{extra}").as_bytes(), b"n", RejectRules::default()).unwrap();
            let j = extra.wrapping_mul(2654435761) % base;
            store.write(T, format!("key{j}").as_bytes(), b"v0", RejectRules::default()).unwrap();
            extra += 1;
        }
    }
    let growths = store.stats().hash_table_growths;
    assert!(growths >= 2, "{growths} growths in {steps} steps");
    for i in 0..base {
        let k = format!("key{i}").into_bytes();
        assert_eq!(seen.get(&k), Some(&1), "key{i} returned {:?} times", seen.get(&k));
    }
    assert!(seen.values().all(|&n| n == 1), "an object was returned twice");
    store.check_invariants().unwrap();
}

/// Tablet migration's engine side (`docs/migration.md`): the source's raw
/// entries of a hash range, replayed by the target, give the target the
/// same objects at the same versions, and its safe version rises above
/// the source's; `forget_range` then drops the range at the source
/// without a tombstone and leaves the rest.
#[test]
fn enumerate_entries_range_replays_at_the_target_and_forget_range_drops_only_the_range() {
    let source = Store::new(common::small_config(1024, false)).unwrap();
    let target = Store::new(common::small_config(1024, false)).unwrap();
    source.create_table(T);
    for i in 0..500u32 {
        source.write(T, format!("k{i}").as_bytes(), &i.to_le_bytes(), RejectRules::default()).unwrap();
    }
    for i in 0..50u32 {
        source.remove(T, format!("k{i}").as_bytes(), RejectRules::default()).unwrap();
    }
    let (start, end) = (0u64, u64::MAX / 2);
    let in_range = |k: &[u8]| (start..=end).contains(&shoal_engine::key_hash(T, k).0);
    let all = common::enumerate_all(&source, T, 64);
    let expect: BTreeMap<_, _> = all.iter().filter(|(k, _)| in_range(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(!expect.is_empty() && expect.len() < all.len());
    let mut entries = Vec::new();
    let mut cursor = Some(shoal_engine::EnumCursor(start));
    while let Some(c) = cursor {
        cursor = source.enumerate_entries_range(T, c, end, 37, |e| entries.extend_from_slice(e)).unwrap();
    }
    let mut replay = shoal_engine::Replay::default();
    target.replay_entries(&mut replay, &entries, source.safe_version()).unwrap();
    target.finish_replay(replay).unwrap();
    assert_eq!(common::enumerate_all(&target, T, 64), expect);
    assert!(target.safe_version() >= source.safe_version());
    let v = target.write(T, b"new", b"x", RejectRules::default()).unwrap();
    assert!(v > all.values().map(|(_, v)| *v).max().unwrap(), "versions keep growing at the target");

    let tombstones_before = source.stats().tombstone_bytes;
    assert_eq!(source.forget_range(T, start, end).unwrap(), expect.len() as u64);
    assert_eq!(source.stats().tombstone_bytes, tombstones_before, "no tombstone is written");
    let left = common::enumerate_all(&source, T, 64);
    assert!(left.keys().all(|k| !in_range(k)));
    assert_eq!(left.len(), all.len() - expect.len());
    source.check_invariants().unwrap();
    target.check_invariants().unwrap();
}

#[test]
fn table_ops_counts_each_client_operation_of_its_table_only() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    store.create_table(TableId(2));
    assert_eq!(store.table_ops(T), Ok(0));
    store.write(T, b"a", b"1", RejectRules::default()).unwrap();
    store.read(T, b"a", RejectRules::default()).unwrap();
    // A refused or failed operation is still work the server did.
    assert_eq!(store.read(T, b"missing", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    store.increment(T, b"n", 1, RejectRules::default()).unwrap();
    store.remove(T, b"a", RejectRules::default()).unwrap();
    // Each item of a batch counts.
    let batch = store.multi_read(&[(T, b"n"), (T, b"a"), (TableId(2), b"x")]);
    assert_eq!(batch.len(), 3);
    assert_eq!(store.table_ops(T), Ok(7));
    assert_eq!(store.table_ops(TableId(2)), Ok(1));
    assert_eq!(store.table_ops(TableId(3)), Err(StoreError::UnknownTable(TableId(3))));
    // The expiry sweep, enumeration and replay are not client operations.
    common::enumerate_all(&store, T, 10);
    assert_eq!(store.table_ops(T), Ok(7));
}
