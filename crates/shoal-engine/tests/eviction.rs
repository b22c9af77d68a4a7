//! Cache mode (`StoreConfig::eviction`): a full store evicts its oldest
//! segments instead of refusing writes, never shows an older version of a
//! key than the last written, and a replay of the log brings back exactly
//! what the store still holds (no evicted object, no removed key).

mod common;

use shoal_engine::{
    Eviction, LogObserver, RejectRules, SegmentId, Store, StoreConfig, StoreError, TableId, EVICT_ABOVE,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

const T: TableId = TableId(1);

fn cache_config(memory_kib: usize, cleaner_thread: bool) -> StoreConfig {
    StoreConfig { eviction: Eviction::Oldest, ..common::small_config(memory_kib, cleaner_thread) }
}

/// A value naming its key and write number.
fn value(key: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{key}:{seq}:").into_bytes();
    v.resize(len.max(v.len()), b'x');
    v
}

#[test]
fn a_full_cache_evicts_the_oldest_writes_instead_of_refusing() {
    let store = Store::new(cache_config(256, true)).unwrap();
    store.create_table(T);
    // 20x the memory in unique keys: without eviction the store refuses
    // writes after about 200 of them.
    for i in 0..5000u32 {
        store.write(T, &i.to_le_bytes(), &value(i, i, 1000), RejectRules::default()).unwrap();
    }
    let s = store.stats();
    assert_eq!(s.out_of_memory, 0);
    assert!(s.evicted > 4000 && s.eviction_passes > 0, "{s:?}");
    assert!(s.memory_utilisation <= EVICT_ABOVE + 0.05, "{s:?}");
    assert_eq!(s.objects + s.evicted, 5000, "every object is either held or evicted: {s:?}");
    // The newest writes are held, the oldest are gone: eviction is by age.
    for i in 4950..5000u32 {
        assert_eq!(store.read(T, &i.to_le_bytes(), RejectRules::default()).unwrap().0, value(i, i, 1000));
    }
    for i in 0..50u32 {
        assert_eq!(store.read(T, &i.to_le_bytes(), RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    }
    store.check_invariants().unwrap();
}

#[test]
fn a_store_of_record_refuses_writes_when_full_until_switched_to_cache_mode() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    let refused =
        (0..1000u32).find_map(|i| store.write(T, &i.to_le_bytes(), &[1u8; 1000], RejectRules::default()).err());
    assert_eq!(refused, Some(StoreError::OutOfMemory));
    assert_eq!(store.stats().evicted, 0);
    // Switched to cache mode at run time, the same store takes writes.
    store.set_eviction(Eviction::Oldest);
    assert_eq!(store.eviction(), Eviction::Oldest);
    for i in 1000..1300u32 {
        store.write(T, &i.to_le_bytes(), &[2u8; 1000], RejectRules::default()).unwrap();
    }
    assert!(store.stats().evicted > 0);
    store.check_invariants().unwrap();
}

/// The bytes every segment was given, as a backup would keep them.
#[derive(Default)]
struct Mirror {
    segments: Mutex<HashMap<SegmentId, Vec<u8>>>,
}

impl LogObserver for Mirror {
    fn segment_opened(&self, segment: SegmentId, _kind: shoal_engine::SegmentKind) {
        self.segments.lock().unwrap().insert(segment, Vec::new());
    }
    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        let mut s = self.segments.lock().unwrap();
        let buf = s.get_mut(&segment).expect("append to an unopened segment");
        assert_eq!(buf.len(), offset as usize);
        buf.extend_from_slice(bytes);
    }
}

/// Overwrites and removes over a key space larger than the memory, cleaning
/// inline: every key read is missing or holds its last written value, and a
/// replay of the log's segments (as replicated, uncompacted) rebuilds the
/// same contents: evicted objects stay evicted, and tombstones carried out
/// of evicted segments keep older versions dead.
#[test]
fn eviction_never_brings_back_an_older_version_nor_an_evicted_object_at_replay() {
    for seed in 1..=4 {
        evict_and_replay(seed, false);
        evict_and_replay(seed, true);
    }
}

fn evict_and_replay(mut seed: u64, cleaner_thread: bool) {
    let mirror = Arc::new(Mirror::default());
    let store =
        Store::with_observer(cache_config(256, cleaner_thread), Some(mirror.clone() as Arc<dyn LogObserver>)).unwrap();
    store.create_table(T);
    let mut last: BTreeMap<u32, Option<Vec<u8>>> = BTreeMap::new();
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    for seq in 0..20_000u32 {
        // Hot keys are rewritten and removed often, so their tombstones sit
        // in the segments that get evicted.
        let key = if rnd() % 2 == 0 { rnd() % 40 } else { rnd() % 1200 };
        if rnd() % 5 == 0 {
            store.remove(T, &key.to_le_bytes(), RejectRules::default()).unwrap();
            last.insert(key, None);
        } else {
            let v = value(key, seq, 100 + (rnd() % 500) as usize);
            if let Err(e) = store.write(T, &key.to_le_bytes(), &v, RejectRules::default()) {
                panic!("write {seq}: {e}: {:?}", store.stats());
            }
            last.insert(key, Some(v));
        }
    }
    let s = store.stats();
    assert!(s.evicted > 500 && s.out_of_memory == 0, "seed {seed}: {s:?}");
    // With the cleaner thread, a pass may still evict: take the contents
    // between two identical views of the log.
    let (in_log, held) = (0..50)
        .find_map(|_| {
            let before = store.log_segments();
            let held = common::enumerate_all(&store, T, 32);
            let after = store.log_segments();
            let same = before.iter().map(|s| s.0).eq(after.iter().map(|s| s.0));
            same.then_some((after, held))
        })
        .expect("the log kept changing");
    for (k, (v, _)) in &held {
        let key = u32::from_le_bytes(k.as_slice().try_into().unwrap());
        assert_eq!(last.get(&key), Some(&Some(v.clone())), "seed {seed}: key {key} holds an older value");
    }
    store.check_invariants().unwrap();
    // Replay what the backups hold for the segments now in the log.
    let segments = mirror.segments.lock().unwrap();
    let replicas: Vec<&[u8]> = in_log.iter().map(|(id, _)| segments[id].as_slice()).collect();
    let rebuilt = Store::new(common::small_config(1024, false)).unwrap();
    rebuilt.replay(replicas.iter().copied()).unwrap();
    assert_eq!(common::enumerate_all(&rebuilt, T, 32), held, "seed {seed}: replay differs from the store");
    assert!(rebuilt.safe_version() >= store.safe_version());
}

/// Chunks in a cache: a full store evicts the oldest chunks as it does
/// objects (no cleaner reserve runs out relocating them), their ids become
/// free, and a replay of the log brings back exactly the chunks held.
#[test]
fn a_full_cache_evicts_the_oldest_chunks() {
    let store = Store::new(cache_config(256, false)).unwrap();
    let heard = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let h = heard.clone();
    store.on_chunk_gone(std::sync::Arc::new(move |_, _| {
        h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }));
    let c = TableId(3);
    store.create_table(c);
    let mut ids = Vec::new();
    for i in 0..5000u32 {
        ids.push(store.create_chunk(c, 1, &value(i, i, 1000)).unwrap());
    }
    let s = store.stats();
    assert_eq!(s.out_of_memory, 0);
    assert!(s.evicted > 4000, "{s:?}");
    assert_eq!(s.chunks + s.evicted, 5000, "every chunk is either held or evicted: {s:?}");
    // Each eviction told the callback (the server drops the chunk's locks).
    assert_eq!(heard.load(std::sync::atomic::Ordering::Relaxed), s.evicted);
    store.check_invariants().unwrap();
    // Evicted ids are handed out again: the ids seen, each once.
    let distinct: std::collections::BTreeSet<shoal_engine::ChunkId> = ids.iter().copied().collect();
    assert!(distinct.len() < ids.len(), "evicted ids are reused");
    let held: Vec<(shoal_engine::ChunkId, Vec<u8>)> =
        distinct.iter().filter_map(|id| store.get_chunk(c, *id).ok().map(|(p, _)| (*id, p))).collect();
    assert_eq!(held.len() as u64, s.chunks);
    assert!(held.iter().any(|(id, _)| *id == ids[4999]), "the newest chunk is held");
    let segs = store.log_segments();
    let rebuilt = Store::new(common::small_config(512, false)).unwrap();
    rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    assert_eq!(rebuilt.chunk_count(), s.chunks);
    for (id, p) in &held {
        assert_eq!(&rebuilt.get_chunk(c, *id).unwrap().0, p);
    }
}
