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
//! created and, after recoveries, those of other nodes), found through a
//! two-level array of published pointers indexed by node id (two loads, no
//! lock). A node's table is a radix tree over the 48-bit local id whose
//! height grows with the largest id set: 4,096 cells per level (32 KiB),
//! a leaf of slots below 4,096, one directory above it up to 2^24, and so
//! on to 4 levels for the whole id space. Ids are handed out densely from
//! 1, so a store of up to 16 M chunks of a node reads a slot in three
//! dependent loads (root, directory, leaf). Levels and node tables are
//! created on demand, published with one atomic store or compare-exchange
//! and never freed or moved while the table lives (a grown tree keeps its
//! old root as its first child), so a reader needs no epoch for them; the
//! epoch guard protects only the log bytes a slot points at. A slot is one
//! `u64`:
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
use parking_lot::{Mutex, MutexGuard};
use shoal_common::{ChunkId, Version};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const LEVEL_BITS: u32 = 12;
const FANOUT: usize = 1 << LEVEL_BITS;
/// The height of a tree whose root covers every local id (leaves are 0).
const MAX_HEIGHT: u32 = 3;
const _: () = assert!((MAX_HEIGHT + 1) * LEVEL_BITS == ChunkId::LOCAL_BITS);
/// Node ids are split into a group (high byte) and a member (low byte).
const NODE_FANOUT: usize = 256;
const _: () = assert!(NODE_FANOUT * NODE_FANOUT == 1 << 16);
/// Directory cells hold child addresses in a `u64`.
const _: () = assert!(usize::BITS == 64);
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

/// A box published once through an atomic pointer: null until
/// [`Published::get_or_create`] installs it, then never replaced, moved or
/// freed until the `Published` is dropped (which takes `&mut`, so no
/// reader is left). Readers take it with one acquire load.
struct Published<T: Send + Sync>(AtomicPtr<T>);

impl<T: Send + Sync> Published<T> {
    const fn new() -> Published<T> {
        Published(AtomicPtr::new(std::ptr::null_mut()))
    }

    fn get(&self) -> Option<&T> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Box::into_raw` in
        // `get_or_create` (published with release ordering, read with
        // acquire, so the box's contents are visible) and is freed only by
        // `drop`, which cannot run while `&self` is borrowed.
        unsafe { p.as_ref() }
    }

    /// The published box, `make`'s if none was: `(it, whether it is
    /// `make`'s)`. Two racing callers both make one; one wins, the other's
    /// is dropped.
    fn get_or_create(&self, make: impl FnOnce() -> Box<T>) -> (&T, bool) {
        if let Some(t) = self.get() {
            return (t, false);
        }
        let new = Box::into_raw(make());
        match self.0.compare_exchange(std::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `new` is published now and lives as `get`'s do.
            Ok(_) => (unsafe { &*new }, true),
            Err(current) => {
                // SAFETY: `new` was never published; this is its only owner.
                drop(unsafe { Box::from_raw(new) });
                // SAFETY: as in `get` (`current` is not null: the exchange
                // failed because a box was published).
                (unsafe { &*current }, false)
            }
        }
    }
}

impl<T: Send + Sync> Drop for Published<T> {
    fn drop(&mut self) {
        let p = *self.0.get_mut();
        if !p.is_null() {
            // SAFETY: as in `get`; `&mut self` means no borrow is left.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// One level of a node's radix tree: 4,096 cells over `LEVEL_BITS` bits of
/// the local id. In a leaf (height 0) each cell is a slot; in a directory
/// each is the address of the level below (0: not created yet), published
/// once and owned by this level.
struct Level {
    height: u32,
    cells: [AtomicU64; FANOUT],
}

impl Level {
    fn new(height: u32) -> Box<Level> {
        Box::new(Level { height, cells: [const { AtomicU64::new(0) }; FANOUT] })
    }

    /// Whether this level, as a root, covers `local`.
    fn covers(&self, local: u64) -> bool {
        local >> (LEVEL_BITS * (self.height + 1)) == 0
    }

    /// The cell of `local` at this level.
    fn cell(&self, local: u64) -> &AtomicU64 {
        &self.cells[((local >> (LEVEL_BITS * self.height)) as usize) & (FANOUT - 1)]
    }

    /// The level a directory cell's value points at (not 0).
    fn child(&self, raw: u64) -> &Level {
        debug_assert!(self.height > 0 && raw != 0);
        // SAFETY: a directory cell holds 0 or the exposed address of a
        // `Box<Level>` that it owns (`child_or_create`, or a grown root's
        // first cell in `NodeTable::root_covering`), freed only when this
        // level is dropped, which cannot happen while `&self` is borrowed.
        unsafe { &*std::ptr::with_exposed_provenance::<Level>(raw as usize) }
    }

    /// The child of `local` (this a directory), created if there is none:
    /// `(it, whether it was created here)`.
    fn child_or_create(&self, local: u64) -> (&Level, bool) {
        debug_assert!(self.height > 0);
        let cell = self.cell(local);
        let raw = cell.load(Ordering::Acquire);
        if raw != 0 {
            return (self.child(raw), false);
        }
        let new = Box::into_raw(Level::new(self.height - 1));
        let addr = new.expose_provenance() as u64;
        match cell.compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => (self.child(addr), true),
            Err(current) => {
                // SAFETY: `new` was never published; this is its only owner.
                drop(unsafe { Box::from_raw(new) });
                (self.child(current), false)
            }
        }
    }

    /// Calls `f` with every local id (ascending, `base` the first this
    /// level covers) below `end` whose leaf exists, and its slot's value.
    /// False once `end` is reached.
    fn for_each(&self, base: u64, end: u64, f: &mut impl FnMut(u64, u64)) -> bool {
        for (i, cell) in self.cells.iter().enumerate() {
            let at = base | (i as u64) << (LEVEL_BITS * self.height);
            if at >= end {
                return false;
            }
            let raw = cell.load(Ordering::Acquire);
            if self.height == 0 {
                f(at, raw);
            } else if raw != 0 && !self.child(raw).for_each(at, end, f) {
                return false;
            }
        }
        true
    }
}

impl Drop for Level {
    fn drop(&mut self) {
        if self.height == 0 {
            return;
        }
        for cell in &mut self.cells {
            let raw = *cell.get_mut();
            if raw != 0 {
                // SAFETY: the cell owns the box at `raw` (`child_or_create`),
                // and `&mut self` means no borrow of it is left.
                drop(unsafe { Box::from_raw(std::ptr::with_exposed_provenance_mut::<Level>(raw as usize)) });
            }
        }
    }
}

/// The ids one node's chunks use: allocation state and the slots.
struct NodeTable {
    /// The tree's root: null until the first slot is set, replaced only by
    /// a taller root whose first child it becomes (under `grow`).
    root: AtomicPtr<Level>,
    grow: Mutex<()>,
    alloc: Mutex<Alloc>,
    /// Levels created (for the memory statistics).
    levels: AtomicU64,
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
            root: AtomicPtr::new(std::ptr::null_mut()),
            grow: Mutex::new(()),
            alloc: Mutex::new(Alloc { next: 1, free: Vec::new() }),
            levels: AtomicU64::new(0),
        }
    }

    fn root(&self) -> Option<&Level> {
        let p = self.root.load(Ordering::Acquire);
        // SAFETY: a non-null root came from `Box::into_raw` in
        // `root_covering`, published with release ordering; a replaced root
        // lives on as the first child of its successor, and the tree is
        // freed only by `drop`, which needs `&mut self`.
        unsafe { p.as_ref() }
    }

    /// The root, grown first (under `grow`) until it covers `local`.
    fn root_covering(&self, local: u64) -> &Level {
        if let Some(r) = self.root().filter(|r| r.covers(local)) {
            return r;
        }
        let _grow = self.grow.lock();
        loop {
            let current = self.root.load(Ordering::Acquire);
            // SAFETY: as in `root`.
            let new = match unsafe { current.as_ref() } {
                Some(r) if r.covers(local) => return r,
                Some(r) => {
                    let up = Level::new(r.height + 1);
                    // The old root keeps every id it covered: they are the
                    // ones whose bits above it are 0, the first cell. The
                    // new root owns it (the pointer `Box::into_raw` gave,
                    // so that `Level`'s drop may free it).
                    up.cells[0].store(current.expose_provenance() as u64, Ordering::Relaxed);
                    up
                }
                None => {
                    let mut h = 0;
                    while local >> (LEVEL_BITS * (h + 1)) != 0 {
                        h += 1;
                    }
                    Level::new(h)
                }
            };
            debug_assert!(new.height <= MAX_HEIGHT);
            self.levels.fetch_add(1, Ordering::Relaxed);
            self.root.store(Box::into_raw(new), Ordering::Release);
        }
    }

    fn slot(&self, local: u64) -> Slot {
        let Some(mut level) = self.root().filter(|r| r.covers(local)) else {
            return Slot::Empty;
        };
        loop {
            let raw = level.cell(local).load(Ordering::Acquire);
            if level.height == 0 {
                return Slot::decode(raw);
            }
            if raw == 0 {
                return Slot::Empty;
            }
            level = level.child(raw);
        }
    }

    fn set(&self, local: u64, s: Slot) {
        let mut level = self.root_covering(local);
        while level.height > 0 {
            let (child, created) = level.child_or_create(local);
            if created {
                self.levels.fetch_add(1, Ordering::Relaxed);
            }
            level = child;
        }
        level.cell(local).store(s.encode(), Ordering::Release);
    }

    /// Calls `f` with every local id (ascending, from 1, below `end`)
    /// whose leaf exists, and its slot.
    fn for_each_slot(&self, end: u64, mut f: impl FnMut(u64, Slot)) {
        if let Some(r) = self.root() {
            r.for_each(0, end, &mut |local, raw| {
                if local != 0 {
                    f(local, Slot::decode(raw))
                }
            });
        }
    }
}

impl Drop for NodeTable {
    fn drop(&mut self) {
        let p = *self.root.get_mut();
        if !p.is_null() {
            // SAFETY: the root is owned by the table (`root_covering`), and
            // `&mut self` means no borrow of it is left; the levels below
            // are freed by `Level`'s drop.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// The node tables of one group of 256 node ids.
type NodeGroup = [Published<NodeTable>; NODE_FANOUT];

/// The CID tables of every node whose chunks the store holds.
pub(crate) struct CidTable {
    /// By the node id's high byte, then its low byte.
    nodes: [Published<NodeGroup>; NODE_FANOUT],
    /// The node ids whose table exists, in order of creation (for walks
    /// over every table); appended to under its lock.
    created: Mutex<Vec<u16>>,
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
            nodes: [const { Published::new() }; NODE_FANOUT],
            created: Mutex::new(Vec::new()),
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            live: AtomicU64::new(0),
        }
    }

    /// The table of `node`, if it exists: two loads, no lock.
    fn node(&self, node: u16) -> Option<&NodeTable> {
        let group = self.nodes[usize::from(node >> 8)].get()?;
        group[usize::from(node & 0xff)].get()
    }

    /// The table of `node`, created if there is none. Created under the
    /// `created` lock, and listed there before it is returned to anyone:
    /// [`CidTable::tables`] (which takes the lock) misses no table that a
    /// slot was set in before it was called.
    fn node_or_create(&self, node: u16) -> &NodeTable {
        if let Some(t) = self.node(node) {
            return t;
        }
        let mut created = self.created.lock();
        let (group, _) =
            self.nodes[usize::from(node >> 8)].get_or_create(|| Box::new([const { Published::new() }; NODE_FANOUT]));
        let (t, made) = group[usize::from(node & 0xff)].get_or_create(|| Box::new(NodeTable::new()));
        if made {
            created.push(node);
        }
        t
    }

    /// Every node table, with its node id, in order of creation.
    fn tables(&self) -> Vec<(u16, &NodeTable)> {
        let created = self.created.lock();
        created.iter().map(|&n| (n, self.node(n).expect("a created node table"))).collect()
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
    /// installs each or gives it back with [`CidTable::release`]. A removed
    /// id that is live again (a chunk migration brought it back) is
    /// dropped from the free list, not handed out.
    pub fn allocate(&self, node: u16, n: usize) -> Option<Vec<Allocated>> {
        let t = self.node_or_create(node);
        let mut a = t.alloc.lock();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let local = match a.free.pop() {
                Some(l) => l,
                None if a.next > ChunkId::MAX_LOCAL => {
                    for x in out.iter().rev() {
                        let x: &Allocated = x;
                        a.free.push(x.id.local());
                    }
                    return None;
                }
                None => {
                    a.next += 1;
                    a.next - 1
                }
            };
            let version = match t.slot(local) {
                Slot::Free(v) => Version(v.0 + 1),
                Slot::Empty => Version(1),
                Slot::Live(_) => continue,
            };
            out.push(Allocated { id: ChunkId::new(node, local), version });
        }
        Some(out)
    }

    /// The lowest local id of `node` never handed out or replayed here (1
    /// for a node without a table): every id in use is below it.
    pub fn allocation_point(&self, node: u16) -> u64 {
        self.node(node).map_or(1, |t| t.alloc.lock().next)
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
        for (_, t) in self.tables().into_iter().filter(|(n, _)| nodes.contains(n)) {
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
        for (node, t) in self.tables() {
            let next = t.alloc.lock().next;
            t.for_each_slot(next, |local, s| {
                if let Slot::Live(r) = s {
                    f(ChunkId::new(node, local), r)
                }
            });
        }
    }

    /// Bytes the tables take: levels, node directories and free lists.
    pub fn memory_bytes(&self) -> u64 {
        let level = std::mem::size_of::<Level>() as u64;
        let group = std::mem::size_of::<NodeGroup>() as u64;
        let groups = self.nodes.iter().filter(|g| g.get().is_some()).count() as u64;
        let tables: u64 = self
            .tables()
            .iter()
            .map(|(_, t)| {
                let table = std::mem::size_of::<NodeTable>() as u64;
                let free = (t.alloc.lock().free.capacity() * 8) as u64;
                t.levels.load(Ordering::Relaxed) * level + table + free
            })
            .sum();
        std::mem::size_of::<CidTable>() as u64 + groups * group + tables
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

    #[test]
    fn node_tables_created_by_racing_threads_are_one_per_node() {
        let t = CidTable::new();
        // Node ids in two groups (high bytes 0 and 3), every thread
        // creating every one, in its own order, and setting a slot in it.
        let nodes: Vec<u16> = vec![0, 1, 255, 3 << 8, (3 << 8) | 7];
        let seen: Vec<Vec<(u16, usize)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4usize)
                .map(|w| {
                    let (t, nodes) = (&t, &nodes);
                    s.spawn(move || {
                        let mut got = Vec::new();
                        for k in 0..nodes.len() {
                            let node = nodes[(k + w) % nodes.len()];
                            let table = t.node_or_create(node);
                            let id = ChunkId::new(node, 1 + w as u64);
                            table.set(id.local(), Slot::Live(ChunkAt::entry(LogRef::new(1, w as u32 + 1))));
                            got.push((node, std::ptr::from_ref(table) as usize));
                        }
                        got
                    })
                })
                .collect();
            workers.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for node in &nodes {
            let mut ptrs: Vec<usize> = seen.iter().flatten().filter(|(n, _)| n == node).map(|(_, p)| *p).collect();
            ptrs.dedup();
            assert_eq!(ptrs.len(), 1, "node {node}: every thread got the same table");
            for w in 0..4u64 {
                assert_eq!(
                    t.live_ref(ChunkId::new(*node, 1 + w)),
                    Some(ChunkAt::entry(LogRef::new(1, w as u32 + 1))),
                    "node {node}: the slot thread {w} set"
                );
            }
        }
        let mut listed: Vec<u16> = t.tables().iter().map(|(n, _)| *n).collect();
        listed.sort_unstable();
        assert_eq!(listed, nodes, "each table listed once");
        assert_eq!(t.get(ChunkId::new(2, 1)), Slot::Empty, "a node never created");
    }

    #[test]
    fn slots_stay_readable_while_the_tree_grows_under_readers() {
        // Ids that make the root grow from a leaf to the full 4 levels.
        // Ascending, each set once (a reader may see sets past the count
        // it read).
        let mut ids: Vec<u64> =
            [1u64, 4095, 4096, 5 << 12, (1 << 24) - 1, 1 << 24, 3 << 30, 1 << 36, ChunkId::MAX_LOCAL]
                .iter()
                .flat_map(|&l| [l, l - 1])
                .filter(|&l| l != 0)
                .collect();
        ids.sort_unstable();
        ids.dedup();
        let t = CidTable::new();
        let published = AtomicU64::new(0);
        let value = |i: usize| Slot::Live(ChunkAt { r: LogRef::new(2, i as u32 + 1), index: i as u16 });
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| loop {
                    let done = published.load(Ordering::Acquire) as usize;
                    for (i, &l) in ids[..done].iter().enumerate() {
                        assert_eq!(t.get(ChunkId::new(9, l)), value(i), "id {l} after {done} sets");
                    }
                    if done == ids.len() {
                        return;
                    }
                });
            }
            for (i, &l) in ids.iter().enumerate() {
                t.note_id(ChunkId::new(9, l));
                t.set(ChunkId::new(9, l), value(i));
                published.store(i as u64 + 1, Ordering::Release);
            }
        });
        let mut seen = Vec::new();
        t.for_each_live(|id, _| seen.push(id.local()));
        let mut want = ids.clone();
        want.sort_unstable();
        want.dedup();
        assert_eq!(seen, want, "a walk finds every id, ascending");
        // 4 levels on the path of every id: the root, and what it needed.
        let table = t.node(9).unwrap();
        assert_eq!(table.root().unwrap().height, MAX_HEIGHT);
        assert!(t.memory_bytes() >= table.levels.load(Ordering::Relaxed) * std::mem::size_of::<Level>() as u64);
    }
}
