//! The CID table: where each chunk's entry is in the log, indexed directly by
//! chunk id (DXRAM's CID table), in place of the hash table for chunks.
//!
//! Contract: the CID table holds the only reference to a chunk's entry, as
//! the hash table does for objects, so a chunk entry is live exactly when its
//! id's slot points at it; the cleaner's liveness check and relocation go
//! through [`CidTable::get`] and [`CidTable::set`] under the chunk's stripe
//! lock ([`CidTable::lock`]), which every writer of the chunk also holds.
//! Readers take no lock: they load the slot under an epoch guard.
//!
//! Implementation: one table per node id (a store holds the chunks it
//! created and, after recoveries, those of other nodes), each a page table
//! of four 12-bit levels over the 48-bit local id; directories and leaves
//! (4,096 8-byte slots, 32 KiB) are created on demand and never freed while
//! the store lives. A slot is one `u64`:
//!
//! ```text
//!  0                   never used (or no entry survived a replay)
//!  bit 63 clear, != 0  live: bits 0-46 the LogRef of the chunk's entry,
//!                      bits 47-62 the chunk's record index in it (a
//!                      chunk run, type 11; 0 for a chunk entry)
//!  bit 63 set          free: the id was removed; bits 0-62 hold the last
//!                      version it had, so a reuse continues above it
//! ```
//!
//! Removed ids go on a per-node free list and are handed out again before
//! new ones (DXRAM's reuse of chunk ids); the version a reused id starts at
//! is one above its last, so the chunk tombstone of the old incarnation can
//! never kill the new one at a replay.

use crate::segment::{LogRef, OFFSET_BITS, SLOT_BITS};
use parking_lot::{Mutex, MutexGuard, RwLock};
use shoal_common::{ChunkId, Version};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

const LEVEL_BITS: u32 = 12;
const FANOUT: usize = 1 << LEVEL_BITS;
const _: () = assert!(4 * LEVEL_BITS == ChunkId::LOCAL_BITS);
const FREE: u64 = 1 << 63;
/// Stripe locks serialising writers of a chunk with the cleaner.
const STRIPES: usize = 1024;

/// Bits of a slot that hold the entry's [`LogRef`]; the record index is
/// above them, below the free bit.
const REF_BITS: u32 = OFFSET_BITS + SLOT_BITS;
const _: () = assert!(REF_BITS + 16 == 63);

/// Where a live chunk is: its entry, and its record's index in the entry
/// when the entry is a chunk run (0 for a chunk entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkAt {
    pub r: LogRef,
    pub index: u16,
}

impl ChunkAt {
    pub fn entry(r: LogRef) -> ChunkAt {
        ChunkAt { r, index: 0 }
    }
}

/// What a CID table slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Never used.
    Empty,
    /// Live: its entry (and record).
    Live(ChunkAt),
    /// Removed at this version (its id may be reused above it).
    Free(Version),
}

impl Slot {
    fn encode(self) -> u64 {
        match self {
            Slot::Empty => 0,
            Slot::Live(at) => {
                debug_assert!(at.r.0 != 0 && at.r.0 >> REF_BITS == 0);
                at.r.0 | (at.index as u64) << REF_BITS
            }
            Slot::Free(v) => FREE | (v.0 & !FREE),
        }
    }

    fn decode(raw: u64) -> Slot {
        if raw == 0 {
            Slot::Empty
        } else if raw & FREE != 0 {
            Slot::Free(Version(raw & !FREE))
        } else {
            Slot::Live(ChunkAt { r: LogRef(raw & ((1 << REF_BITS) - 1)), index: (raw >> REF_BITS) as u16 })
        }
    }
}

struct Leaf {
    slots: Box<[AtomicU64]>,
}

impl Leaf {
    fn new() -> Leaf {
        Leaf { slots: (0..FANOUT).map(|_| AtomicU64::new(0)).collect() }
    }
}

struct Dir<T> {
    children: Box<[OnceLock<Box<T>>]>,
}

impl<T> Dir<T> {
    fn new() -> Dir<T> {
        Dir { children: (0..FANOUT).map(|_| OnceLock::new()).collect() }
    }
}

fn index(local: u64, level: u32) -> usize {
    ((local >> (LEVEL_BITS * level)) as usize) & (FANOUT - 1)
}

/// The ids one node's chunks use: allocation state and the levels.
struct NodeTable {
    root: Dir<Dir<Dir<Leaf>>>,
    alloc: Mutex<Alloc>,
    /// Leaves and directories created (for the memory statistics).
    leaves: AtomicU64,
    dirs: AtomicU64,
}

#[derive(Default)]
struct Alloc {
    /// The lowest local id never handed out (ids start at 1).
    next: u64,
    /// Removed ids, reused last-removed first.
    free: Vec<u64>,
}

impl NodeTable {
    fn new() -> NodeTable {
        NodeTable {
            root: Dir::new(),
            alloc: Mutex::new(Alloc { next: 1, free: Vec::new() }),
            leaves: AtomicU64::new(0),
            dirs: AtomicU64::new(1),
        }
    }

    fn leaf(&self, local: u64) -> Option<&Leaf> {
        let d1 = self.root.children[index(local, 3)].get()?;
        let d2 = d1.children[index(local, 2)].get()?;
        d2.children[index(local, 1)].get().map(|l| &**l)
    }

    fn leaf_or_create(&self, local: u64) -> &Leaf {
        let d1 = self.root.children[index(local, 3)].get_or_init(|| {
            self.dirs.fetch_add(1, Ordering::Relaxed);
            Box::new(Dir::new())
        });
        let d2 = d1.children[index(local, 2)].get_or_init(|| {
            self.dirs.fetch_add(1, Ordering::Relaxed);
            Box::new(Dir::new())
        });
        d2.children[index(local, 1)].get_or_init(|| {
            self.leaves.fetch_add(1, Ordering::Relaxed);
            Box::new(Leaf::new())
        })
    }

    /// Calls `f` with every local id (ascending, from 1, below `end`)
    /// whose leaf exists, and its slot.
    fn for_each_slot(&self, end: u64, mut f: impl FnMut(u64, Slot)) {
        for (i1, d1) in self.root.children.iter().enumerate() {
            let Some(d1) = d1.get() else { continue };
            for (i2, d2) in d1.children.iter().enumerate() {
                let Some(d2) = d2.get() else { continue };
                for (i3, leaf) in d2.children.iter().enumerate() {
                    let Some(leaf) = leaf.get() else { continue };
                    let base = ((i1 as u64) << 36) | ((i2 as u64) << 24) | ((i3 as u64) << 12);
                    for (i, s) in leaf.slots.iter().enumerate() {
                        let local = base | i as u64;
                        if local == 0 {
                            continue;
                        }
                        if local >= end {
                            return;
                        }
                        f(local, Slot::decode(s.load(Ordering::Acquire)));
                    }
                }
            }
        }
    }

    fn slot(&self, local: u64) -> Slot {
        match self.leaf(local) {
            Some(l) => Slot::decode(l.slots[index(local, 0)].load(Ordering::Acquire)),
            None => Slot::Empty,
        }
    }

    fn set(&self, local: u64, s: Slot) {
        self.leaf_or_create(local).slots[index(local, 0)].store(s.encode(), Ordering::Release);
    }
}

/// The CID tables of every node whose chunks the store holds.
pub(crate) struct CidTable {
    nodes: RwLock<Vec<(u16, Arc<NodeTable>)>>,
    locks: Box<[Mutex<()>]>,
    /// Live chunks.
    pub live: AtomicU64,
}

/// An allocated id and the version its first entry gets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Allocated {
    pub id: ChunkId,
    pub version: Version,
}

impl CidTable {
    pub fn new() -> CidTable {
        CidTable {
            nodes: RwLock::new(Vec::new()),
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            live: AtomicU64::new(0),
        }
    }

    fn node(&self, node: u16) -> Option<Arc<NodeTable>> {
        self.nodes.read().iter().find(|(n, _)| *n == node).map(|(_, t)| t.clone())
    }

    fn node_or_create(&self, node: u16) -> Arc<NodeTable> {
        if let Some(t) = self.node(node) {
            return t;
        }
        let mut nodes = self.nodes.write();
        if let Some((_, t)) = nodes.iter().find(|(n, _)| *n == node) {
            return t.clone();
        }
        let t = Arc::new(NodeTable::new());
        nodes.push((node, t.clone()));
        t
    }

    /// The stripe index of a chunk id.
    pub fn stripe(id: ChunkId) -> usize {
        (id.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % STRIPES
    }

    /// Locks chunk `id` against other writers and the cleaner.
    pub fn lock(&self, id: ChunkId) -> MutexGuard<'_, ()> {
        self.locks[Self::stripe(id)].lock()
    }

    /// Locks the stripes of all `ids` (in stripe order, so two callers
    /// cannot deadlock).
    pub fn lock_many(&self, ids: impl Iterator<Item = ChunkId>) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = ids.map(Self::stripe).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes.into_iter().map(|s| self.locks[s].lock()).collect()
    }

    /// What the slot of `id` holds now.
    pub fn get(&self, id: ChunkId) -> Slot {
        match self.node(id.node()) {
            Some(t) => t.slot(id.local()),
            None => Slot::Empty,
        }
    }

    /// The live entry of `id`, if any.
    pub fn live_ref(&self, id: ChunkId) -> Option<ChunkAt> {
        match self.get(id) {
            Slot::Live(at) => Some(at),
            Slot::Empty | Slot::Free(_) => None,
        }
    }

    /// Sets the slot of `id` (its stripe lock held), creating the levels
    /// on the way. An id not handed out by [`CidTable::allocate`] (a
    /// replayed one) must be passed to [`CidTable::note_id`] first.
    pub fn set(&self, id: ChunkId, s: Slot) {
        self.node_or_create(id.node()).set(id.local(), s);
    }

    /// Moves the node's allocation point above `id` (a replayed id), so
    /// that it is never handed out while in use.
    pub fn note_id(&self, id: ChunkId) {
        let t = self.node_or_create(id.node());
        let mut a = t.alloc.lock();
        if id.local() >= a.next {
            a.next = id.local() + 1;
        }
    }

    /// Takes `n` ids of `node` for new chunks: removed ids first, then new
    /// ones. None if the node's 48-bit id space is spent. The caller
    /// installs each or gives it back with [`CidTable::release`].
    pub fn allocate(&self, node: u16, n: usize) -> Option<Vec<Allocated>> {
        let t = self.node_or_create(node);
        let mut a = t.alloc.lock();
        let fresh = n.saturating_sub(a.free.len()) as u64;
        if a.next.checked_add(fresh).is_none_or(|end| end > ChunkId::MAX_LOCAL + 1) {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let local = match a.free.pop() {
                Some(l) => l,
                None => {
                    a.next += 1;
                    a.next - 1
                }
            };
            let version = match t.slot(local) {
                Slot::Free(v) => Version(v.0 + 1),
                Slot::Empty => Version(1),
                Slot::Live(r) => unreachable!("allocated a live chunk id {local} at {r:?}"),
            };
            out.push(Allocated { id: ChunkId::new(node, local), version });
        }
        Some(out)
    }

    /// Gives back ids taken by [`CidTable::allocate`] and not installed.
    pub fn release(&self, ids: &[Allocated]) {
        for a in ids.iter().rev() {
            if let Some(t) = self.node(a.id.node()) {
                t.alloc.lock().free.push(a.id.local());
            }
        }
    }

    /// Marks `id` removed at `version` and puts it on its node's free list
    /// (stripe lock held).
    pub fn free(&self, id: ChunkId, version: Version) {
        let t = self.node_or_create(id.node());
        t.set(id.local(), Slot::Free(version));
        t.alloc.lock().free.push(id.local());
    }

    /// Marks `id` removed at `version` without freeing it for reuse (a
    /// replay: the free lists are rebuilt by [`CidTable::rebuild_free_lists`]).
    pub fn kill(&self, id: ChunkId, version: Version) {
        self.note_id(id);
        self.set(id, Slot::Free(version));
    }

    /// After a replay: every id below each node's allocation point that is
    /// not live and whose leaf exists becomes free, lowest reused first
    /// (ids in leaves never created are not reused; dense allocation leaves
    /// none). No chunk of these nodes may be created meanwhile (a recovery
    /// master replays other nodes' chunks and creates only its own).
    pub fn rebuild_free_lists_of(&self, nodes: &std::collections::HashSet<u16>) {
        for (_, t) in self.nodes.read().iter().filter(|(n, _)| nodes.contains(n)) {
            let next = t.alloc.lock().next;
            let mut free = Vec::new();
            t.for_each_slot(next, |local, s| match s {
                Slot::Live(_) => {}
                Slot::Empty | Slot::Free(_) => free.push(local),
            });
            free.reverse();
            t.alloc.lock().free = free;
        }
    }

    /// Calls `f` with every live chunk's id and entry (for invariant checks
    /// and enumeration; not a snapshot).
    pub fn for_each_live(&self, mut f: impl FnMut(ChunkId, ChunkAt)) {
        let nodes: Vec<(u16, Arc<NodeTable>)> = self.nodes.read().clone();
        for (node, t) in nodes {
            let next = t.alloc.lock().next;
            t.for_each_slot(next, |local, s| {
                if let Slot::Live(r) = s {
                    f(ChunkId::new(node, local), r)
                }
            });
        }
    }

    /// Bytes the tables take: slots, directories and free lists.
    pub fn memory_bytes(&self) -> u64 {
        let nodes = self.nodes.read();
        nodes
            .iter()
            .map(|(_, t)| {
                let leaf = (FANOUT * std::mem::size_of::<AtomicU64>()) as u64;
                let dir = (FANOUT * std::mem::size_of::<OnceLock<Box<Leaf>>>()) as u64;
                let free = (t.alloc.lock().free.capacity() * 8) as u64;
                t.leaves.load(Ordering::Relaxed) * leaf + t.dirs.load(Ordering::Relaxed) * dir + free
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_encoding_round_trips() {
        for s in [
            Slot::Empty,
            Slot::Live(ChunkAt::entry(LogRef::new(3, 17))),
            Slot::Live(ChunkAt { r: LogRef::new((1 << 20) - 1, (1 << 27) - 1), index: u16::MAX }),
            Slot::Free(Version(0)),
            Slot::Free(Version(1 << 40)),
        ] {
            assert_eq!(Slot::decode(s.encode()), s);
        }
    }

    #[test]
    fn allocate_reuses_removed_ids_above_their_last_version() {
        let t = CidTable::new();
        let a = t.allocate(7, 3).unwrap();
        assert_eq!(a.iter().map(|x| x.id).collect::<Vec<_>>(), (1..=3).map(|l| ChunkId::new(7, l)).collect::<Vec<_>>());
        assert!(a.iter().all(|x| x.version == Version(1)));
        for x in &a {
            t.set(x.id, Slot::Live(ChunkAt::entry(LogRef::new(1, x.id.local() as u32))));
        }
        t.free(a[1].id, Version(4));
        let b = t.allocate(7, 2).unwrap();
        assert_eq!((b[0].id, b[0].version), (ChunkId::new(7, 2), Version(5)));
        assert_eq!((b[1].id, b[1].version), (ChunkId::new(7, 4), Version(1)));
        t.release(&b);
        let c = t.allocate(7, 1).unwrap();
        assert_eq!(c[0].id, ChunkId::new(7, 2), "released ids come back first");
    }

    #[test]
    fn levels_are_created_on_demand_for_far_ids() {
        let t = CidTable::new();
        let far = ChunkId::new(1, ChunkId::MAX_LOCAL);
        assert_eq!(t.get(far), Slot::Empty);
        t.note_id(far);
        t.set(far, Slot::Live(ChunkAt::entry(LogRef::new(2, 5))));
        assert_eq!(t.live_ref(far), Some(ChunkAt::entry(LogRef::new(2, 5))));
        assert_eq!(t.get(ChunkId::new(1, 1)), Slot::Empty);
        assert_eq!(t.get(ChunkId::new(2, ChunkId::MAX_LOCAL)), Slot::Empty, "other nodes are separate");
        assert!(t.allocate(1, 1).is_none(), "the id space above the far id is spent");
        let mut seen = Vec::new();
        t.for_each_live(|id, r| seen.push((id, r)));
        assert_eq!(seen, vec![(far, ChunkAt::entry(LogRef::new(2, 5)))]);
    }

    #[test]
    fn rebuild_free_lists_frees_every_id_not_live() {
        let t = CidTable::new();
        t.note_id(ChunkId::new(3, 2));
        t.set(ChunkId::new(3, 2), Slot::Live(ChunkAt::entry(LogRef::new(1, 1))));
        t.kill(ChunkId::new(3, 4), Version(9));
        t.note_id(ChunkId::new(3, 5));
        t.set(ChunkId::new(3, 5), Slot::Live(ChunkAt::entry(LogRef::new(1, 2))));
        t.rebuild_free_lists_of(&[3].into_iter().collect());
        let a = t.allocate(3, 4).unwrap();
        let got: Vec<(u64, u64)> = a.iter().map(|x| (x.id.local(), x.version.0)).collect();
        assert_eq!(got, vec![(1, 1), (3, 1), (4, 10), (6, 1)]);
    }
}
