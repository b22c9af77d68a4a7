//! Chunks against a model: random sequences of chunk creates (single and
//! multi), gets, puts and removes, interleaved with object writes in the
//! same log and with both cleaners, checked against a `BTreeMap` of ids and
//! a model of the id allocator (removed ids are reused, last removed first,
//! at a version above their last). After every step the store's invariants
//! are checked (every CID table reference points at its own chunk's entry in
//! the log, live bytes equal a recount). At the end the log is replayed into
//! a fresh store, which must hold exactly the same chunks and reuse only
//! ids that are free.

mod common;

use proptest::prelude::*;
use shoal_engine::{ChunkId, RejectRules, Store, StoreError, TableId, Version};
use std::collections::{BTreeMap, BTreeSet};

const NODE: u16 = 3;
const CHUNKS: TableId = TableId(5);
const OBJECTS: TableId = TableId(1);
/// Most live chunks the model lets a test create.
const MAX_LIVE: usize = 64;

#[derive(Clone, Debug)]
enum Op {
    Create { lens: Vec<(usize, u8)> },
    Get { pick: usize },
    GetWrongTable { pick: usize },
    Put { pick: usize, len: usize, fill: u8 },
    Remove { pick: usize },
    MultiGet { picks: Vec<usize> },
    MultiRemove { picks: Vec<usize> },
    MultiPut { items: Vec<(usize, usize, u8)> },
    ObjectWrite { k: u8, len: usize },
    Clean { combined: bool },
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![6 => 0usize..130, 2 => 130usize..1500, 1 => 1500usize..4000];
    let pick = any::<usize>();
    prop_oneof![
        12 => prop::collection::vec((len.clone(), any::<u8>()), 1..12).prop_map(|lens| Op::Create { lens }),
        // Same-sized creates and puts: these become chunk runs.
        6 => (1usize..12, len.clone(), any::<u8>()).prop_map(|(n, l, fill)| Op::Create {
            lens: (0..n).map(|i| (l, fill.wrapping_add(i as u8))).collect()
        }),
        8 => pick.prop_map(|pick| Op::Get { pick }),
        1 => pick.prop_map(|pick| Op::GetWrongTable { pick }),
        12 => (pick, len.clone(), any::<u8>()).prop_map(|(pick, len, fill)| Op::Put { pick, len, fill }),
        8 => pick.prop_map(|pick| Op::Remove { pick }),
        2 => prop::collection::vec(pick, 1..8).prop_map(|picks| Op::MultiGet { picks }),
        2 => prop::collection::vec(pick, 1..8).prop_map(|picks| Op::MultiRemove { picks }),
        3 => prop::collection::vec((pick, 0usize..300, any::<u8>()), 1..8).prop_map(|items| Op::MultiPut { items }),
        3 => (prop::collection::vec(pick, 1..8), 0usize..300, any::<u8>())
            .prop_map(|(picks, len, fill)| Op::MultiPut { items: picks.into_iter().map(|p| (p, len, fill)).collect() }),
        4 => (0u8..32, 0usize..600).prop_map(|(k, len)| Op::ObjectWrite { k, len }),
        2 => any::<bool>().prop_map(|combined| Op::Clean { combined }),
    ]
}

fn payload(len: usize, fill: u8) -> Vec<u8> {
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

/// The model: live chunks by id, the last version each id had, and the
/// allocator (a stack of removed ids, the next fresh local id).
struct Model {
    chunks: BTreeMap<u64, (Vec<u8>, Version)>,
    last_version: BTreeMap<u64, Version>,
    free: Vec<u64>,
    next: u64,
    /// Every id ever handed out, for picking (removed ones too).
    known: Vec<u64>,
}

impl Model {
    fn pick(&self, p: usize) -> ChunkId {
        if self.known.is_empty() {
            ChunkId::new(NODE, 1)
        } else {
            ChunkId(self.known[p % self.known.len()])
        }
    }

    /// The ids and versions a create of `n` chunks must return.
    fn allocate(&mut self, n: usize) -> Vec<(u64, Version)> {
        (0..n)
            .map(|_| {
                let id = self.free.pop().unwrap_or_else(|| {
                    self.next += 1;
                    ChunkId::new(NODE, self.next - 1).0
                });
                (id, Version(self.last_version.get(&id).map_or(1, |v| v.0 + 1)))
            })
            .collect()
    }

    /// A refused create gives its ids back (fresh ones too).
    fn release(&mut self, ids: &[(u64, Version)]) {
        self.free.extend(ids.iter().rev().map(|x| x.0));
    }

    fn remove(&mut self, id: u64) -> Option<Version> {
        let (_, v) = self.chunks.remove(&id)?;
        self.free.push(id);
        Some(v)
    }
}

fn run(ops: Vec<Op>, cleaner_thread: bool) {
    let store = Store::new(common::small_config(256, cleaner_thread)).unwrap();
    store.create_table(CHUNKS);
    store.create_table(OBJECTS);
    let mut m =
        Model { chunks: BTreeMap::new(), last_version: BTreeMap::new(), free: Vec::new(), next: 1, known: vec![] };
    for op in ops {
        match op {
            // Live data stays well below the memory (removes must never
            // be refused), as the object model's 96 keys do.
            Op::Create { lens } if m.chunks.len() + lens.len() > MAX_LIVE => {}
            Op::Create { lens } => {
                let payloads: Vec<Vec<u8>> = lens.iter().map(|(l, f)| payload(*l, *f)).collect();
                let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
                let want = m.allocate(refs.len());
                match store.create_chunks(CHUNKS, NODE, &refs) {
                    Ok(ids) => {
                        let got: Vec<u64> = ids.iter().map(|i| i.0).collect();
                        assert_eq!(got, want.iter().map(|x| x.0).collect::<Vec<_>>(), "ids handed out");
                        for ((id, v), p) in want.into_iter().zip(payloads) {
                            assert_eq!(ChunkId(id).node(), NODE);
                            m.last_version.insert(id, v);
                            m.chunks.insert(id, (p, v));
                            if !m.known.contains(&id) {
                                m.known.push(id);
                            }
                        }
                    }
                    Err(StoreError::OutOfMemory) => {
                        assert!(store.stats().memory_utilisation > 0.5, "refused create");
                        m.release(&want);
                    }
                    Err(e) => panic!("create: {e}"),
                }
            }
            Op::Get { pick } => {
                let id = m.pick(pick);
                let want = m.chunks.get(&id.0).cloned().ok_or(StoreError::ObjectDoesntExist);
                assert_eq!(store.get_chunk(CHUNKS, id), want, "get {id}");
            }
            Op::GetWrongTable { pick } => {
                let id = m.pick(pick);
                assert_eq!(store.get_chunk(OBJECTS, id), Err(StoreError::ObjectDoesntExist));
                assert_eq!(store.put_chunk(OBJECTS, id, b"x"), Err(StoreError::ObjectDoesntExist));
                assert_eq!(store.get_chunk(TableId(99), id), Err(StoreError::UnknownTable(TableId(99))));
            }
            Op::Put { pick, len, fill } => {
                let id = m.pick(pick);
                let p = payload(len, fill);
                match (store.put_chunk(CHUNKS, id, &p), m.chunks.get(&id.0).map(|c| c.1)) {
                    (Ok(v), Some(old)) => {
                        assert_eq!(v, Version(old.0 + 1), "put {id}");
                        m.last_version.insert(id.0, v);
                        m.chunks.insert(id.0, (p, v));
                    }
                    (Err(StoreError::OutOfMemory), Some(_)) => {}
                    (Err(e), None) => assert_eq!(e, StoreError::ObjectDoesntExist),
                    (got, want) => panic!("put {id}: {got:?}, model {want:?}"),
                }
            }
            Op::Remove { pick } => {
                let id = m.pick(pick);
                let got = store.remove_chunk(CHUNKS, id);
                match m.remove(id.0) {
                    Some(v) => assert_eq!(got, Ok(v), "remove {id}"),
                    None => assert_eq!(got, Err(StoreError::ObjectDoesntExist)),
                }
            }
            Op::MultiGet { picks } => {
                let ids: Vec<ChunkId> = picks.iter().map(|p| m.pick(*p)).collect();
                let got = store.multi_get_chunks(CHUNKS, &ids);
                for (id, g) in ids.iter().zip(got) {
                    assert_eq!(g, m.chunks.get(&id.0).cloned().ok_or(StoreError::ObjectDoesntExist));
                }
            }
            Op::MultiRemove { picks } => {
                let ids: Vec<ChunkId> = picks.iter().map(|p| m.pick(*p)).collect();
                let got = store.multi_remove_chunks(CHUNKS, &ids);
                for (id, g) in ids.iter().zip(got) {
                    assert_eq!(g, m.remove(id.0).ok_or(StoreError::ObjectDoesntExist), "multi-remove {id}");
                }
            }
            Op::MultiPut { items } => {
                let owned: Vec<(ChunkId, Vec<u8>)> =
                    items.iter().map(|(p, len, fill)| (m.pick(*p), payload(*len, *fill))).collect();
                let req: Vec<(ChunkId, &[u8])> = owned.iter().map(|(id, p)| (*id, p.as_slice())).collect();
                let got = store.multi_put_chunks(CHUNKS, &req);
                for ((id, p), g) in owned.into_iter().zip(got) {
                    match (g, m.chunks.get(&id.0).map(|c| c.1)) {
                        (Ok(v), Some(old)) => {
                            assert_eq!(v, Version(old.0 + 1), "multi-put {id}");
                            m.last_version.insert(id.0, v);
                            m.chunks.insert(id.0, (p, v));
                        }
                        (Err(StoreError::OutOfMemory), Some(_)) => {}
                        (Err(e), None) => assert_eq!(e, StoreError::ObjectDoesntExist),
                        (got, want) => panic!("multi-put {id}: {got:?}, model {want:?}"),
                    }
                }
            }
            Op::ObjectWrite { k, len } => match store.write(OBJECTS, &[k], &payload(len, k), RejectRules::default()) {
                Ok(_) | Err(StoreError::OutOfMemory) => {}
                Err(e) => panic!("object write: {e}"),
            },
            Op::Clean { combined } => {
                store.clean_now(2, combined);
            }
        }
        store.check_invariants().unwrap_or_else(|e| panic!("invariant broken: {e}"));
        assert_eq!(store.chunk_count() as usize, m.chunks.len());
    }
    store.clean_now(4, true);
    store.check_invariants().unwrap();
    assert!(common::enumerate_all(&store, CHUNKS, 4).is_empty(), "chunks are not enumerated as objects");
    for (id, c) in &m.chunks {
        assert_eq!(store.get_chunk(CHUNKS, ChunkId(*id)).as_ref(), Ok(c), "chunk {id} after cleaning");
    }

    // Replay the log into a fresh store: the same chunks, and only free ids reused.
    let segs = store.log_segments();
    let rebuilt = Store::new(common::small_config(512, false)).unwrap();
    // The table exists where it is served, whether or not the log held a chunk.
    rebuilt.create_table(CHUNKS);
    let report = rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    rebuilt.check_invariants().unwrap();
    assert_eq!(rebuilt.chunk_count() as usize, m.chunks.len(), "{report:?}");
    for (id, c) in &m.chunks {
        assert_eq!(rebuilt.get_chunk(CHUNKS, ChunkId(*id)).as_ref(), Ok(c), "chunk {id} after replay");
    }
    let free: BTreeSet<u64> = m.free.iter().copied().collect();
    let fresh = rebuilt.create_chunk(CHUNKS, NODE, b"after replay").unwrap();
    assert!(
        free.contains(&fresh.0) || fresh.local() >= m.next,
        "replayed store handed out {fresh}, which is live or was never free"
    );
    // The rebuilt store's own log, replayed again, holds the new chunk too.
    let again = Store::new(common::small_config(512, false)).unwrap();
    let segs = rebuilt.log_segments();
    again.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    again.check_invariants().unwrap();
    assert_eq!(again.get_chunk(CHUNKS, fresh).map(|c| c.0), Ok(b"after replay".to_vec()));
    assert_eq!(again.chunk_count() as usize, m.chunks.len() + 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn chunks_match_model_inline_cleaning(ops in prop::collection::vec(op(), 1..600)) {
        run(ops, false);
    }

    #[test]
    fn chunks_match_model_cleaner_thread(ops in prop::collection::vec(op(), 1..400)) {
        run(ops, true);
    }
}

/// A removed chunk's tombstone keeps an older entry of its id from coming
/// back at a replay, in whatever order the segments arrive, and an id
/// reused after the removal wins over both.
#[test]
fn replay_honours_chunk_tombstones_in_any_segment_order() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    store.create_table(CHUNKS);
    let a = store.create_chunk(CHUNKS, NODE, b"first").unwrap();
    let b = store.create_chunk(CHUNKS, NODE, b"kept").unwrap();
    // Overwrites of another chunk between, so that the versions of `a`
    // and its tombstones land in different segments.
    let mut i = 0u8;
    let mut fill = |n: u8| {
        for _ in 0..n {
            store.put_chunk(CHUNKS, b, &[i; 700]).unwrap();
            i += 1;
        }
    };
    fill(20);
    assert_eq!(store.put_chunk(CHUNKS, a, b"second"), Ok(Version(2)));
    fill(20);
    assert_eq!(store.remove_chunk(CHUNKS, a), Ok(Version(2)));
    fill(20);
    let again = store.create_chunk(CHUNKS, NODE, b"reused").unwrap();
    assert_eq!(again, a, "the removed id is reused");
    assert_eq!(store.get_chunk(CHUNKS, again), Ok((b"reused".to_vec(), Version(3))));
    let segs = store.log_segments();
    assert!(segs.len() >= 2);
    for order in [false, true] {
        let mut s: Vec<&[u8]> = segs.iter().map(|s| s.1.as_slice()).collect();
        if order {
            s.reverse();
        }
        let rebuilt = Store::new(common::small_config(512, false)).unwrap();
        rebuilt.replay(s).unwrap();
        rebuilt.check_invariants().unwrap();
        assert_eq!(rebuilt.get_chunk(CHUNKS, a), Ok((b"reused".to_vec(), Version(3))), "reversed: {order}");
        assert_eq!(rebuilt.get_chunk(CHUNKS, b), Ok((vec![59; 700], Version(61))));
        assert_eq!(rebuilt.chunk_count(), 2);
    }
    // Removed and not reused: nothing comes back.
    assert_eq!(store.remove_chunk(CHUNKS, a), Ok(Version(3)));
    let segs = store.log_segments();
    let mut s: Vec<&[u8]> = segs.iter().map(|s| s.1.as_slice()).collect();
    s.reverse();
    let rebuilt = Store::new(common::small_config(512, false)).unwrap();
    rebuilt.replay(s).unwrap();
    assert_eq!(rebuilt.get_chunk(CHUNKS, a), Err(StoreError::ObjectDoesntExist));
    // The id is free again there, above its last version.
    let c = rebuilt.create_chunk(CHUNKS, NODE, b"x").unwrap();
    assert_eq!(c, a);
    assert_eq!(rebuilt.get_chunk(CHUNKS, c).unwrap().1, Version(4));
}

/// Many chunks, many overwrites: both cleaners relocate chunk entries
/// through the CID table, and nothing is lost.
#[test]
fn cleaner_relocates_chunks_many_times() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    let heard = listening(&store);
    store.create_table(CHUNKS);
    let mut m: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let ids = store.create_chunks(CHUNKS, NODE, &vec![&b"init"[..]; 64]).unwrap();
    for id in &ids {
        m.insert(id.0, b"init".to_vec());
    }
    let mut seed = 11u64;
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    for i in 0..20_000u64 {
        let id = ids[(rnd() % ids.len() as u64) as usize];
        let p = payload((rnd() % 600) as usize, i as u8);
        store.put_chunk(CHUNKS, id, &p).unwrap_or_else(|e| panic!("put {i}: {e}; {:#?}", store.stats()));
        m.insert(id.0, p);
        if i % 4000 == 0 {
            store.check_invariants().unwrap();
        }
    }
    store.check_invariants().unwrap();
    let s = store.stats();
    assert!(s.compactions > 10 && s.combined_passes > 10, "{s:#?}");
    assert!(sorted(&heard).is_empty(), "relocating a chunk is not losing it");
    for (id, p) in &m {
        assert_eq!(&store.get_chunk(CHUNKS, ChunkId(*id)).unwrap().0, p);
    }
}

/// Chunks created together with one size share chunk runs: a chunk costs
/// its payload and a share of the run's header in the log, and its 8-byte
/// CID slot. Removing most of them and cleaning rewrites the runs with
/// the records still live; puts and a replay (segments in any order) keep
/// every chunk.
#[test]
fn chunk_runs_are_dense_and_survive_cleaning_and_replay() {
    let store = Store::new(common::small_config(2048, false)).unwrap();
    store.create_table(CHUNKS);
    let n = 20_000usize;
    let payloads: Vec<Vec<u8>> = (0..n).map(|i| payload(32, i as u8)).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let ids = store.create_chunks(CHUNKS, NODE, &refs).unwrap();
    let s = store.stats();
    let log_per_chunk = (s.live_bytes - s.live_key_value_bytes) as f64 / n as f64;
    // Runs of 128 here (4 KiB of payload, the largest value): a 16-byte
    // header shared by 128 chunks.
    assert!(log_per_chunk < 0.2, "log bytes per chunk beyond the payload: {log_per_chunk}");
    assert_eq!(s.live_key_value_bytes, 32 * n as u64);
    store.check_invariants().unwrap();
    let mut m: BTreeMap<u64, Vec<u8>> = ids.iter().zip(&payloads).map(|(id, p)| (id.0, p.clone())).collect();
    // Remove two of every three; put a new payload into some of the rest,
    // in groups (runs of version 2) and one by one.
    let gone: Vec<ChunkId> = ids.iter().enumerate().filter(|(i, _)| i % 3 != 0).map(|(_, id)| *id).collect();
    for r in store.multi_remove_chunks(CHUNKS, &gone) {
        r.unwrap();
    }
    for id in &gone {
        m.remove(&id.0);
    }
    let kept: Vec<ChunkId> = ids.iter().step_by(3).copied().collect();
    let new: Vec<Vec<u8>> = kept.iter().take(300).map(|id| payload(48, id.local() as u8)).collect();
    let items: Vec<(ChunkId, &[u8])> = kept.iter().zip(&new).map(|(id, p)| (*id, p.as_slice())).collect();
    for (r, (id, p)) in store.multi_put_chunks(CHUNKS, &items).into_iter().zip(&items) {
        assert_eq!(r, Ok(Version(2)));
        m.insert(id.0, p.to_vec());
    }
    for id in kept.iter().skip(300).take(50) {
        let p = payload(7, 1);
        store.put_chunk(CHUNKS, *id, &p).unwrap();
        m.insert(id.0, p);
    }
    store.check_invariants().unwrap();
    for round in 0..4 {
        store.clean_now(8, round % 2 == 1);
        store.check_invariants().unwrap();
    }
    let s = store.stats();
    assert!(s.compactions + s.combined_passes > 0, "{s:#?}");
    for (id, p) in &m {
        assert_eq!(&store.get_chunk(CHUNKS, ChunkId(*id)).unwrap().0, p, "chunk {id} after cleaning");
    }
    for id in gone.iter().take(100) {
        assert_eq!(store.get_chunk(CHUNKS, *id), Err(StoreError::ObjectDoesntExist));
    }
    // Replayed in reverse segment order, the same chunks and nothing else.
    let mut segs = store.log_segments();
    segs.reverse();
    let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
    rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    rebuilt.check_invariants().unwrap();
    assert_eq!(rebuilt.chunk_count(), m.len() as u64);
    for (id, p) in &m {
        assert_eq!(&rebuilt.get_chunk(CHUNKS, ChunkId(*id)).unwrap().0, p, "chunk {id} after replay");
    }
    let s = rebuilt.stats();
    let log_per_chunk = (s.live_bytes - s.live_key_value_bytes) as f64 / m.len() as f64;
    // Every third id is left: runs store a 2-byte distance per record; the
    // 50 chunks put one by one are chunk entries of 12 bytes. Chunk
    // entries alone would cost more than 12 bytes each.
    assert!(log_per_chunk < 3.0, "a replay writes runs again: {log_per_chunk} B per chunk");
}

/// Chunks created one at a time are chunk entries of 10 bytes and more;
/// the cleaner packs those it moves into runs when they share a version
/// and a size, and every chunk reads back the same, before and after a
/// replay.
#[test]
fn cleaner_packs_chunk_entries_into_runs() {
    let store = Store::new(common::small_config(2048, false)).unwrap();
    store.create_table(CHUNKS);
    let mut m: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for i in 0..6000u64 {
        // Two sizes, so that two kinds of runs form.
        let p = payload(if i % 2 == 0 { 24 } else { 40 }, i as u8);
        let id = store.create_chunk(CHUNKS, NODE, &p).unwrap();
        m.insert(id.0, p);
    }
    let per_chunk = |s: &Store| {
        let s = s.stats();
        (s.live_bytes - s.live_key_value_bytes) as f64 / s.chunks as f64
    };
    let before = per_chunk(&store);
    assert!(before >= 10.0, "chunk entries: {before} B per chunk");
    // Free some space in every segment, so that the cleaner takes them.
    let gone: Vec<ChunkId> = m.keys().step_by(5).map(|id| ChunkId(*id)).collect();
    for id in &gone {
        store.remove_chunk(CHUNKS, *id).unwrap();
        m.remove(&id.0);
    }
    for round in 0..6 {
        store.clean_now(16, round % 2 == 1);
    }
    store.check_invariants().unwrap();
    let after = per_chunk(&store);
    eprintln!("log bytes per chunk beyond its payload: {before:.2} as chunk entries, {after:.2} after cleaning");
    assert!(after < 6.0, "after cleaning: {after} B per chunk (before {before})");
    for (id, p) in &m {
        assert_eq!(&store.get_chunk(CHUNKS, ChunkId(*id)).unwrap().0, p, "chunk {id} after cleaning");
    }
    // Puts of packed chunks, then a replay: the same chunks.
    for id in m.keys().take(200).copied().collect::<Vec<_>>() {
        let p = payload(24, 7);
        assert_eq!(store.put_chunk(CHUNKS, ChunkId(id), &p), Ok(Version(2)));
        m.insert(id, p);
    }
    store.check_invariants().unwrap();
    let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
    rebuilt.replay(store.log_segments().iter().map(|s| s.1.as_slice())).unwrap();
    rebuilt.check_invariants().unwrap();
    assert_eq!(rebuilt.chunk_count(), m.len() as u64);
    for (id, p) in &m {
        assert_eq!(&rebuilt.get_chunk(CHUNKS, ChunkId(*id)).unwrap().0, p, "chunk {id} after replay");
    }
}

/// A run with a few dead records is larger rewritten as the run of its
/// live records (their ids, no longer consecutive, need distances) than
/// as it is. The cleaner rewrites it all the same: moved whole, its dead
/// records would outlive their tombstones (which name the segment they
/// died in) and come back in a replay. Cleaning reserves for the growth,
/// so no segment overruns (`check_invariants`), and a replay of the log
/// afterwards holds exactly the live chunks.
#[test]
fn cleaning_runs_with_few_dead_records_drops_the_dead_ones() {
    let store = Store::new(common::small_config(2048, false)).unwrap();
    store.create_table(CHUNKS);
    let payloads: Vec<Vec<u8>> = (0..30_000u32).map(|i| payload(16, i as u8)).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let ids = store.create_chunks(CHUNKS, NODE, &refs).unwrap();
    let mut m: BTreeMap<u64, Vec<u8>> = ids.iter().zip(&payloads).map(|(id, p)| (id.0, p.clone())).collect();
    // One in 20 gone: 95% live, where 1-byte distances cost more than the
    // 5% of payload they would save.
    let gone: Vec<ChunkId> = ids.iter().step_by(20).copied().collect();
    for r in store.multi_remove_chunks(CHUNKS, &gone) {
        r.unwrap();
    }
    for id in &gone {
        m.remove(&id.0);
    }
    // Enough rounds for the tombstones' segments to leave the log.
    for round in 0..12 {
        store.clean_now(8, round % 2 == 1);
        store.check_invariants().unwrap();
    }
    let s = store.stats();
    assert!(s.combined_passes > 0, "{s:#?}");
    for (id, p) in &m {
        assert_eq!(&store.get_chunk(CHUNKS, ChunkId(*id)).unwrap().0, p, "chunk {id} after cleaning");
    }
    let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
    rebuilt.create_table(CHUNKS);
    let segs = store.log_segments();
    let report = rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    assert_eq!(rebuilt.chunk_count() as usize, m.len(), "{report:?}");
    for id in &gone {
        assert_eq!(rebuilt.get_chunk(CHUNKS, *id), Err(StoreError::ObjectDoesntExist), "{id} came back: {report:?}");
    }
}

/// Dropping a chunk table removes its chunks (tombstones appended, ids
/// free again) and leaves other tables' chunks alone.
#[test]
fn drop_table_removes_its_chunks() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    store.create_table(CHUNKS);
    store.create_table(TableId(6));
    let mine = store.create_chunks(CHUNKS, NODE, &[b"a", b"b", b"c"]).unwrap();
    let other = store.create_chunk(TableId(6), NODE, b"other").unwrap();
    store.drop_table(CHUNKS).unwrap();
    store.check_invariants().unwrap();
    assert_eq!(store.chunk_count(), 1);
    assert_eq!(store.get_chunk(TableId(6), other), Ok((b"other".to_vec(), Version(1))));
    store.create_table(CHUNKS);
    for id in &mine {
        assert_eq!(store.get_chunk(CHUNKS, *id), Err(StoreError::ObjectDoesntExist));
    }
    let reused = store.create_chunk(CHUNKS, NODE, b"again").unwrap();
    assert!(mine.contains(&reused), "{reused} is one of the dropped ids");
    // A replay of the log agrees.
    let segs = store.log_segments();
    let rebuilt = Store::new(common::small_config(512, false)).unwrap();
    rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    assert_eq!(rebuilt.chunk_count(), 2);
}

type Heard = std::sync::Arc<std::sync::Mutex<Vec<(TableId, ChunkId)>>>;

/// A store whose `on_chunk_gone` callback records what it hears.
fn listening(store: &Store) -> Heard {
    let heard: Heard = Default::default();
    let h = heard.clone();
    assert!(store.on_chunk_gone(std::sync::Arc::new(move |t, id| h.lock().unwrap().push((t, id)))));
    assert!(!store.on_chunk_gone(std::sync::Arc::new(|_, _| {})), "set once");
    heard
}

fn sorted(heard: &Heard) -> Vec<(TableId, ChunkId)> {
    let mut v = std::mem::take(&mut *heard.lock().unwrap());
    v.sort();
    v
}

/// Every way a chunk stops being live reaches the store's callback (the
/// server drops the chunk's locks there): a remove, a multi-remove, a table
/// drop, a chunk tombstone met in a replay. A put, a relocation by the
/// cleaner or another table's chunk does not.
#[test]
fn on_chunk_gone_hears_removes_drops_and_replayed_tombstones() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    let heard = listening(&store);
    let kept_table = TableId(6);
    store.create_table(CHUNKS);
    store.create_table(kept_table);
    let ids = store.create_chunks(CHUNKS, NODE, &[b"a", b"b", b"c", b"d"]).unwrap();
    let other = store.create_chunk(kept_table, NODE, b"o").unwrap();
    store.put_chunk(CHUNKS, ids[0], b"a2").unwrap();
    assert!(sorted(&heard).is_empty(), "a put is not a removal");
    store.remove_chunk(CHUNKS, ids[0]).unwrap();
    assert!(store.multi_remove_chunks(CHUNKS, &[ids[1]])[0].is_ok());
    assert_eq!(sorted(&heard), vec![(CHUNKS, ids[0]), (CHUNKS, ids[1])]);
    store.drop_table(CHUNKS).unwrap();
    assert_eq!(sorted(&heard), vec![(CHUNKS, ids[2]), (CHUNKS, ids[3])]);
    // A replay installs the chunks and meets their tombstones.
    let segs = store.log_segments();
    let rebuilt = Store::new(common::small_config(512, false)).unwrap();
    let replayed = listening(&rebuilt);
    rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    assert_eq!(sorted(&replayed), ids.iter().map(|id| (CHUNKS, *id)).collect::<Vec<_>>());
    assert_eq!(rebuilt.get_chunk(kept_table, other), Ok((b"o".to_vec(), Version(1))));
}

/// `with_chunk` says whether the chunk is live in that table; `put_chunk_if`
/// writes only when its check passes.
#[test]
fn with_chunk_and_put_chunk_if() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    store.create_table(CHUNKS);
    store.create_table(OBJECTS);
    let id = store.create_chunk(CHUNKS, NODE, b"v1").unwrap();
    assert_eq!(store.with_chunk(CHUNKS, id, |live| live), Ok(true));
    assert_eq!(store.with_chunk(OBJECTS, id, |live| live), Ok(false), "another table's chunk");
    assert_eq!(store.with_chunk(TableId(99), id, |live| live), Err(StoreError::UnknownTable(TableId(99))));
    assert_eq!(store.put_chunk_if(CHUNKS, id, b"no", || Err("refused")), Err("refused"));
    assert_eq!(store.get_chunk(CHUNKS, id), Ok((b"v1".to_vec(), Version(1))), "a refused check writes nothing");
    assert_eq!(store.put_chunk_if(CHUNKS, id, b"v2", || Ok::<(), &str>(())), Ok(Ok(Version(2))));
    store.remove_chunk(CHUNKS, id).unwrap();
    assert_eq!(store.with_chunk(CHUNKS, id, |live| live), Ok(false));
    assert_eq!(store.put_chunk_if(CHUNKS, id, b"v3", || Ok::<(), &str>(())), Ok(Err(StoreError::ObjectDoesntExist)));
}

/// The engine's part of a chunk id range's migration: the source walks a
/// range's live chunks of one table as entries (in steps), a store
/// replaying them for a migration installs them at their versions (also
/// over ids it once gave away, and refusing an id live here in another
/// table), and forgetting the range drops its chunks without tombstones
/// and without handing their ids out again.
#[test]
fn a_chunk_range_moves_between_stores_and_its_ids_are_not_reused() {
    let source = Store::new(common::small_config(256, false)).unwrap();
    let heard = listening(&source);
    let other_table = TableId(6);
    source.create_table(CHUNKS);
    source.create_table(other_table);
    let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 10 + i as usize]).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let ids = source.create_chunks(CHUNKS, NODE, &refs).unwrap();
    let kept = source.create_chunk(other_table, NODE, b"kept").unwrap();
    source.put_chunk(CHUNKS, ids[12], b"twelve").unwrap();
    source.remove_chunk(CHUNKS, ids[13]).unwrap();
    let (lo, hi) = (ids[10].local(), ids[29].local());
    // The walk, two chunks at a time, sees the live chunks of the range in
    // that table only.
    let mut entries = Vec::new();
    let mut seen = Vec::new();
    let mut at = Some(lo);
    while let Some(from) = at {
        at = source
            .chunk_range_entries(CHUNKS, NODE, from, hi, 2, |e, id, v| {
                entries.extend_from_slice(e);
                seen.push((id, v));
            })
            .unwrap();
    }
    let expect: Vec<(ChunkId, Version)> = ids[10..30]
        .iter()
        .filter(|id| **id != ids[13])
        .map(|id| (*id, if *id == ids[12] { Version(2) } else { Version(1) }))
        .collect();
    assert_eq!(seen, expect);
    // The target installs them at their versions.
    let target = Store::new(common::small_config(256, false)).unwrap();
    let mut replay = shoal_engine::Replay::for_chunk_migration();
    target.replay_entries(&mut replay, &entries, Version(0)).unwrap();
    target.finish_replay(replay).unwrap();
    assert_eq!(target.get_chunk(CHUNKS, ids[12]), Ok((b"twelve".to_vec(), Version(2))));
    assert_eq!(target.get_chunk(CHUNKS, ids[11]), Ok((payloads[11].clone(), Version(1))));
    assert_eq!(target.get_chunk(CHUNKS, ids[13]), Err(StoreError::ObjectDoesntExist));
    assert_eq!(target.chunk_count(), 19);
    target.check_invariants().unwrap();
    // The source forgets them (their locks too), keeps the rest, and never
    // hands a moved id out again, also when it reuses removed ids.
    assert_eq!(source.forget_chunk_range(CHUNKS, NODE, lo, hi).unwrap(), 19);
    assert_eq!(sorted(&heard).len(), 20, "19 forgotten and 1 removed");
    assert_eq!(source.get_chunk(CHUNKS, ids[11]), Err(StoreError::ObjectDoesntExist));
    assert_eq!(source.get_chunk(CHUNKS, ids[9]), Ok((payloads[9].clone(), Version(1))));
    assert_eq!(source.get_chunk(other_table, kept), Ok((b"kept".to_vec(), Version(1))));
    source.check_invariants().unwrap();
    let fresh = source.create_chunks(other_table, NODE, &[&b"x"[..]; 30]).unwrap();
    let moved: BTreeSet<ChunkId> = ids[10..30].iter().filter(|id| **id != ids[13]).copied().collect();
    assert!(fresh.iter().all(|id| !moved.contains(id)), "{fresh:?}");
    assert!(fresh.contains(&ids[13]), "a removed id is reused");
    // A store where those ids are chunks of another table refuses them.
    let third = Store::new(common::small_config(256, false)).unwrap();
    third.create_table(other_table);
    third.create_chunks(other_table, NODE, &refs).unwrap();
    let mut replay = shoal_engine::Replay::for_chunk_migration();
    let refused = third.replay_entries(&mut replay, &entries, Version(0));
    assert!(matches!(refused, Err(shoal_engine::ReplayError::Store(StoreError::ObjectExists { .. }))), "{refused:?}");
    // Moved back unchanged, they are installed again over the ids' removed
    // slots.
    let mut back = Vec::new();
    let mut at = Some(lo);
    while let Some(from) = at {
        at = target
            .chunk_range_entries(CHUNKS, NODE, from, hi, 100, |e, id, _| {
                if id != ids[13] {
                    back.extend_from_slice(e)
                }
            })
            .unwrap();
    }
    let mut replay = shoal_engine::Replay::for_chunk_migration();
    source.replay_entries(&mut replay, &back, Version(0)).unwrap();
    source.finish_replay(replay).unwrap();
    assert_eq!(source.get_chunk(CHUNKS, ids[12]), Ok((b"twelve".to_vec(), Version(2))));
    assert_eq!(source.get_chunk(CHUNKS, ids[29]), Ok((payloads[29].clone(), Version(1))));
    source.check_invariants().unwrap();
    let more = source.create_chunks(other_table, NODE, &[&b"y"[..]; 5]).unwrap();
    assert!(more.iter().all(|id| !moved.contains(id)), "live ids are not handed out");
}
