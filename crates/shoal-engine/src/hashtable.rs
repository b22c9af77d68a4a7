//! The hash table: the only reference to each live object.
//!
//! Contract: an object is live exactly when a slot of this table holds its
//! [`LogRef`]. Lookups take no lock: they load slots with acquire ordering
//! and may run beside any mutation. Mutations ([`HashTable::insert`],
//! [`HashTable::set`], [`HashTable::clear`]) require the caller to hold the
//! stripe lock of the key's bucket ([`HashTable::lock`]); the cleaner takes
//! the same lock to relocate an object, so a writer and the cleaner never
//! race on one key.
//!
//! Implementation details. Buckets are 64 bytes (one cache line) of eight
//! 64-bit slots (Rumble Fig. 4.4):
//!
//! ```text
//!  63            48 47 46                                  0
//! +----------------+--+-------------------------------------+
//! | partial hash   |C | 47-bit reference                    |
//! +----------------+--+-------------------------------------+
//! ```
//!
//! A zero slot is empty. With C set (only ever in slot 7), the reference is
//! the index of an overflow bucket that continues the chain. Overflow buckets
//! come from an arena of fixed chunks that are never moved or freed while
//! the table lives, so a reader can follow a chain without a lock. A key's
//! bucket is `(hash * buckets) >> 64`: buckets are in key-hash order, which
//! makes the enumeration cursor a key hash that stays meaningful across
//! tables of different sizes. An object never changes slot except when an
//! overflow bucket is added behind slot 7 (its content is copied to the new
//! bucket before the chain pointer is published, so readers never miss it),
//! or when the table grows.
//!
//! Growth (a table made with [`HashTable::growing`]). The table starts at
//! [`MIN_GROWING_BUCKETS`] buckets and, when it holds more than
//! [`GROW_ABOVE`] objects per bucket on average, grows by half into a new
//! table, online: [`HashTable::maintain`], called by writers after they
//! have released their locks, moves one stripe at a time (under that
//! stripe's lock) into the new table, so no request waits for more than
//! one stripe's move. A growing table's sizes are multiples of the stripe
//! count and its stripes are ranges of key hashes (`hash >> 52`), so a
//! stripe is the same whole run of buckets in the old and the new table.
//! Each table counts the stripes already moved out of it (`moved`); a
//! lookup starts at the newest table it knows and goes to the next one for
//! a moved stripe. The old table stops changing once a stripe has moved,
//! so a reader that chose it just before the move answers what was true
//! at the move, which is within its own interval. An old table is freed
//! only once no reader can still hold it: the cleaner takes the retired
//! tables ([`HashTable::take_retired`]) before its epoch synchronisation
//! and drops them after. Tables never shrink.

use crate::pool::HugeMapping;
use crate::segment::LogRef;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

const SLOTS: usize = 8;
const CHAIN: u64 = 1 << 47;
const REF_MASK: u64 = CHAIN - 1;
const CHUNK_BUCKETS: usize = 4096;
const MAX_CHUNKS: usize = 1 << 16;
const STRIPES: usize = 4096;
/// Bits of a key hash below a growing table's stripe number.
const STRIPE_SHIFT: u32 = 64 - STRIPES.trailing_zeros();
/// Buckets of a new growing table (256 KiB).
pub const MIN_GROWING_BUCKETS: usize = STRIPES;
/// A growing table grows when it holds more objects than this per main
/// bucket (the density of a table planned for a full memory before tables
/// grew): after growing by half it holds 5.3 per bucket, so a growing
/// table costs 8 to 12 bytes per object.
pub const GROW_ABOVE: usize = 8;

/// Entries a stripe's move prefetches ahead of the one it hashes.
const MOVE_PREFETCH: usize = 16;
/// Slots of a moved stripe the mover's buffer keeps between moves.
const MOVE_KEEP: usize = 1 << 16;

thread_local! {
    /// The slots of the stripe being moved.
    static MOVING: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[repr(C, align(64))]
struct Bucket {
    slots: [AtomicU64; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(std::mem::align_of::<Bucket>() == 64);
const _: () = assert!(STRIPES.is_power_of_two() && MIN_GROWING_BUCKETS.is_multiple_of(STRIPES));

impl Bucket {
    fn zeroed_chunk(n: usize) -> Box<[Bucket]> {
        (0..n).map(|_| Bucket { slots: Default::default() }).collect()
    }
}

/// The main buckets: a huge-page mapping (zero-filled, so every bucket
/// starts empty; see [`HugeMapping`]). Lookups land on random buckets of a
/// table of tens or hundreds of MiB.
struct MainBuckets {
    mem: HugeMapping,
    n: usize,
}

impl MainBuckets {
    /// `populate`: make the buckets resident at once (a table made at
    /// start: its memory is the server's from the start, not charged to
    /// the first writes). A table grown into is not populated: the moves
    /// fault its pages in, stripe by stripe.
    fn new(n: usize, populate: bool) -> MainBuckets {
        let bytes = n * std::mem::size_of::<Bucket>();
        let mem = HugeMapping::new(bytes, "the hash table");
        if populate {
            // Where populating is not supported, pages come on first write.
            let _ = mem.populate(0, bytes);
        }
        MainBuckets { mem, n }
    }
}

impl std::ops::Deref for MainBuckets {
    type Target = [Bucket];
    fn deref(&self) -> &[Bucket] {
        // SAFETY: `n` buckets from `buckets` lie within the mapping, which
        // is zero-filled (all-zero atomics are valid empty buckets) and
        // lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.mem.start().as_ptr() as *const Bucket, self.n) }
    }
}

/// Where a key's slot is, as found by [`HashTable::find`]. Valid only while
/// the caller holds the key's stripe lock and has not inserted into the
/// same bucket since (an insert may move slot 7 to an overflow bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPos {
    bucket: *const Bucket,
    slot: usize,
}

// SAFETY: a SlotPos is only an address of a bucket that lives as long as its
// table, which is not freed while the caller holds the stripe lock (a stripe
// moves out of a table only under its lock, and a table is freed only once
// all its stripes have moved).
unsafe impl Send for SlotPos {}

/// The key-hash range of one main bucket, `first..next` (`next` may be
/// 2^64: the last bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketRange {
    pub first: u128,
    pub next: u128,
}

fn tag_of(hash: u64) -> u64 {
    hash & 0xffff
}

fn pack(hash: u64, r: LogRef) -> u64 {
    debug_assert!(r.0 <= REF_MASK && r.0 != 0);
    (tag_of(hash) << 48) | r.0
}

/// One table of main buckets with its overflow arena.
struct Table {
    main: MainBuckets,
    chunks: Box<[AtomicPtr<Bucket>]>,
    overflow_used: AtomicUsize,
    overflow_alloc: Mutex<()>,
    /// The table this one is growing into (null: none).
    next: AtomicPtr<Table>,
    /// Stripes `0..moved` live in `next` now, not here.
    moved: AtomicUsize,
}

impl Table {
    fn new(buckets: usize, populate: bool) -> Table {
        Table {
            main: MainBuckets::new(buckets.max(1), populate),
            chunks: (0..MAX_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            overflow_used: AtomicUsize::new(0),
            overflow_alloc: Mutex::new(()),
            next: AtomicPtr::new(std::ptr::null_mut()),
            moved: AtomicUsize::new(0),
        }
    }

    fn memory_bytes(&self) -> usize {
        let chunks = self.overflow_used.load(Ordering::Relaxed).div_ceil(CHUNK_BUCKETS);
        (self.main.len() + chunks * CHUNK_BUCKETS) * 64
    }

    fn bucket_index(&self, hash: u64) -> usize {
        ((hash as u128 * self.main.len() as u128) >> 64) as usize
    }

    fn first_hash_of(&self, bucket: usize) -> u128 {
        let n = self.main.len() as u128;
        ((bucket as u128) << 64).div_ceil(n)
    }

    fn overflow(&self, index: u64) -> &Bucket {
        let i = index as usize;
        let chunk = self.chunks[i / CHUNK_BUCKETS].load(Ordering::Acquire);
        assert!(!chunk.is_null(), "chain to an unallocated overflow bucket");
        // SAFETY: chunks are allocated before any chain pointer to them is
        // published (release/acquire) and freed only when the table drops.
        unsafe { &*chunk.add(i % CHUNK_BUCKETS) }
    }

    fn find(&self, hash: u64, mut f: impl FnMut(LogRef) -> bool) -> Option<(SlotPos, LogRef)> {
        let tag = tag_of(hash);
        let mut bucket: &Bucket = &self.main[self.bucket_index(hash)];
        loop {
            let mut next = None;
            for (i, s) in bucket.slots.iter().enumerate() {
                let v = s.load(Ordering::Acquire);
                if v == 0 {
                    continue;
                }
                if v & CHAIN != 0 {
                    next = Some(v & REF_MASK);
                    break;
                }
                if v >> 48 == tag && f(LogRef(v & REF_MASK)) {
                    return Some((SlotPos { bucket, slot: i }, LogRef(v & REF_MASK)));
                }
            }
            match next {
                Some(i) => bucket = self.overflow(i),
                None => return None,
            }
        }
    }

    fn insert_packed(&self, bucket: usize, packed: u64) {
        let mut bucket: &Bucket = &self.main[bucket];
        loop {
            let last = bucket.slots[SLOTS - 1].load(Ordering::Acquire);
            let chained = last & CHAIN != 0;
            let usable = if chained { SLOTS - 1 } else { SLOTS };
            for s in &bucket.slots[..usable] {
                if s.load(Ordering::Relaxed) == 0 {
                    s.store(packed, Ordering::Release);
                    return;
                }
            }
            if chained {
                bucket = self.overflow(last & REF_MASK);
                continue;
            }
            // Full and unchained: move slot 7 into a new overflow bucket,
            // then publish the chain pointer.
            let index = self.alloc_overflow();
            let next = self.overflow(index);
            next.slots[0].store(last, Ordering::Release);
            next.slots[1].store(packed, Ordering::Release);
            bucket.slots[SLOTS - 1].store(CHAIN | index, Ordering::Release);
            return;
        }
    }

    fn alloc_overflow(&self) -> u64 {
        let _g = self.overflow_alloc.lock();
        let i = self.overflow_used.load(Ordering::Relaxed);
        let chunk = i / CHUNK_BUCKETS;
        assert!(chunk < MAX_CHUNKS, "hash table overflow arena exhausted");
        if self.chunks[chunk].load(Ordering::Acquire).is_null() {
            let b = Box::into_raw(Bucket::zeroed_chunk(CHUNK_BUCKETS)) as *mut Bucket;
            self.chunks[chunk].store(b, Ordering::Release);
        }
        self.overflow_used.store(i + 1, Ordering::Relaxed);
        i as u64
    }

    /// Calls `f` with every packed slot of main bucket `bucket` and its chain.
    fn for_each_packed(&self, bucket: usize, mut f: impl FnMut(u64)) {
        let mut b: &Bucket = &self.main[bucket];
        loop {
            let mut next = None;
            for s in &b.slots {
                let v = s.load(Ordering::Acquire);
                if v == 0 {
                    continue;
                }
                if v & CHAIN != 0 {
                    next = Some(v & REF_MASK);
                } else {
                    f(v);
                }
            }
            match next {
                Some(i) => b = self.overflow(i),
                None => return,
            }
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        for c in self.chunks.iter() {
            let p = c.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: allocated in `alloc_overflow` as a boxed slice of CHUNK_BUCKETS.
                unsafe { drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, CHUNK_BUCKETS))) }
            }
        }
    }
}

/// A table that has grown into another: freed once no reader can hold it.
pub struct Retired(*mut Table);

// SAFETY: a Retired is the only owner of its table (see HashTable::maintain).
unsafe impl Send for Retired {}

impl Drop for Retired {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in HashTable; owned only by this
        // Retired since the table was retired; no reader holds it any more
        // (the caller dropped it after an epoch synchronisation).
        unsafe { drop(Box::from_raw(self.0)) }
    }
}

pub struct HashTable {
    /// The newest table whose growth has finished (readers start here).
    current: AtomicPtr<Table>,
    /// Whether the table grows (stripes are then ranges of key hashes).
    growing: bool,
    stripes: Box<[Mutex<()>]>,
    /// Held by the one writer moving a stripe.
    mover: Mutex<()>,
    /// Tables all of whose stripes have moved, waiting to be freed.
    retired: Mutex<Vec<Retired>>,
    /// Stripes moved so far and growths finished, for statistics.
    stripes_moved: AtomicU64,
    growths: AtomicU64,
    /// [`HashTable::maintain`] has work only above this many objects: the
    /// current table's growth point, 0 while a growth is under way, never
    /// for a table that does not grow. Read without pinning an epoch
    /// ([`HashTable::may_need_work`]), so that a write that has nothing to
    /// maintain pays one plain load.
    work_above: AtomicU64,
}

// SAFETY: the raw table pointers are owned by the HashTable (current) or by
// Retired values; all shared access goes through atomics and locks.
unsafe impl Send for HashTable {}
unsafe impl Sync for HashTable {}

impl HashTable {
    /// A table of `buckets` main buckets that never grows (more objects
    /// than planned chain into overflow buckets).
    pub fn new(buckets: usize) -> HashTable {
        Self::with_table(Table::new(buckets, true), false)
    }

    /// A table that starts small and grows with the objects it holds, as
    /// [`HashTable::maintain`] is called.
    pub fn growing() -> HashTable {
        Self::with_table(Table::new(MIN_GROWING_BUCKETS, true), true)
    }

    fn with_table(t: Table, growing: bool) -> HashTable {
        let work_above = if growing { (GROW_ABOVE * t.main.len()) as u64 } else { u64::MAX };
        HashTable {
            current: AtomicPtr::new(Box::into_raw(Box::new(t))),
            growing,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            mover: Mutex::new(()),
            retired: Mutex::new(Vec::new()),
            stripes_moved: AtomicU64::new(0),
            growths: AtomicU64::new(0),
            work_above: AtomicU64::new(work_above),
        }
    }

    /// Whether [`HashTable::maintain`] may have work with `objects` held;
    /// false means it surely has none. Needs no epoch pin.
    pub fn may_need_work(&self, objects: u64) -> bool {
        objects > self.work_above.load(Ordering::Relaxed)
    }

    fn current(&self) -> &Table {
        // SAFETY: `current` always points to a live table: a table stops
        // being current only when its successor is stored, and is freed
        // only after that, once no reader can hold it.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The table that holds `hash`'s stripe now. Callers hold an epoch pin:
    /// it keeps alive every table from `current` on. (The stripe's lock
    /// alone keeps alive only the table holding the stripe, not an older
    /// `current` a resolution may start from; a found [`SlotPos`] is then
    /// safe under the lock.)
    fn table_of(&self, hash: u64) -> &Table {
        let mut t = self.current();
        loop {
            let next = t.next.load(Ordering::Acquire);
            if next.is_null() || self.stripe_of(hash) >= t.moved.load(Ordering::Acquire) {
                return t;
            }
            // SAFETY: a table's `next` is live while the table is reachable.
            t = unsafe { &*next };
        }
    }

    /// Main buckets of the newest table (of the one being grown into,
    /// during a growth).
    pub fn main_buckets(&self) -> usize {
        let t = self.current();
        let next = t.next.load(Ordering::Acquire);
        // SAFETY: as in `table_of`.
        if next.is_null() {
            t.main.len()
        } else {
            unsafe { &*next }.main.len()
        }
    }

    /// Bytes of memory the tables occupy (main buckets plus overflow
    /// arenas; during a growth both tables; retired tables not yet freed).
    pub fn memory_bytes(&self) -> usize {
        let t = self.current();
        let next = t.next.load(Ordering::Acquire);
        // SAFETY: as in `table_of`.
        let growing_into = if next.is_null() { 0 } else { unsafe { &*next }.memory_bytes() };
        // SAFETY: retired tables are live until their Retired drops.
        let retired: usize = self.retired.lock().iter().map(|r| unsafe { &*r.0 }.memory_bytes()).sum();
        t.memory_bytes() + growing_into + retired
    }

    /// Stripes moved and growths finished since the table was made.
    pub fn growth_stats(&self) -> (u64, u64) {
        (self.stripes_moved.load(Ordering::Relaxed), self.growths.load(Ordering::Relaxed))
    }

    #[cfg(test)]
    fn overflow_buckets(&self) -> usize {
        self.current().overflow_used.load(Ordering::Relaxed)
    }

    /// The key-hash range of the main bucket holding `hash`.
    #[cfg(test)]
    fn bucket_range(&self, hash: u64) -> BucketRange {
        let t = self.table_of(hash);
        let b = t.bucket_index(hash);
        BucketRange { first: t.first_hash_of(b), next: t.first_hash_of(b + 1) }
    }

    /// Hints the CPU to load `hash`'s main bucket: the cleaner computes the
    /// hashes of a batch of entries, prefetches their buckets, then looks
    /// them up, so the cache misses overlap instead of queueing.
    pub fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let t = self.table_of(hash);
            let p = &t.main[t.bucket_index(hash)] as *const Bucket as *const i8;
            // SAFETY: a prefetch is only a hint; it never faults and `p`
            // points into the table anyway. SSE is part of the x86_64 baseline.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = hash;
    }

    /// The stripe lock that must be held to mutate the slots of `hash`'s bucket.
    pub fn lock(&self, hash: u64) -> MutexGuard<'_, ()> {
        self.stripes[self.stripe_of(hash)].lock()
    }

    /// Stripe number of a hash, for callers that lock several keys in
    /// order. Fixed for the life of the table: a growing table's stripes
    /// are ranges of hashes; a fixed table's, its buckets modulo the count.
    pub fn stripe_of(&self, hash: u64) -> usize {
        if self.growing {
            (hash >> STRIPE_SHIFT) as usize
        } else {
            self.current().bucket_index(hash) % STRIPES
        }
    }

    pub fn lock_stripe(&self, stripe: usize) -> MutexGuard<'_, ()> {
        self.stripes[stripe].lock()
    }

    /// Unlocks a stripe whose guard from [`HashTable::lock_stripe`] was
    /// forgotten (a transaction holds its stripes across calls).
    ///
    /// # Safety
    /// The stripe must be locked by such a forgotten guard and not unlocked
    /// since; each forgotten guard is unlocked exactly once.
    pub unsafe fn unlock_stripe(&self, stripe: usize) {
        // SAFETY: the caller's contract: this context holds the lock.
        unsafe { self.stripes[stripe].force_unlock() }
    }

    /// Calls `f(ref)` for every object reference in `hash`'s chain whose
    /// partial hash matches, until `f` returns true; returns that slot.
    /// Lock-free (the caller holds an epoch pin or the stripe lock).
    pub fn find(&self, hash: u64, f: impl FnMut(LogRef) -> bool) -> Option<(SlotPos, LogRef)> {
        self.table_of(hash).find(hash, f)
    }

    /// Replaces the reference in a slot found by [`find`] (stripe lock held).
    pub fn set(&self, pos: SlotPos, hash: u64, r: LogRef) {
        // SAFETY: `pos.bucket` points into a live table's memory (see SlotPos).
        let b = unsafe { &*pos.bucket };
        b.slots[pos.slot].store(pack(hash, r), Ordering::Release);
    }

    /// Empties a slot found by [`find`] (stripe lock held).
    pub fn clear(&self, pos: SlotPos) {
        // SAFETY: as in `set`.
        let b = unsafe { &*pos.bucket };
        b.slots[pos.slot].store(0, Ordering::Release);
    }

    /// Adds a reference for a key not in the table (stripe lock held).
    pub fn insert(&self, hash: u64, r: LogRef) {
        let t = self.table_of(hash);
        t.insert_packed(t.bucket_index(hash), pack(hash, r));
    }

    /// Calls `f` with every object reference in the main bucket (and its
    /// chain) holding `hash`, and returns that bucket's hash range.
    /// Lock-free (the caller holds an epoch pin); used by enumeration and
    /// by invariant checks.
    pub fn for_each_in_bucket_of(&self, hash: u64, mut f: impl FnMut(LogRef)) -> BucketRange {
        let t = self.table_of(hash);
        let b = t.bucket_index(hash);
        t.for_each_packed(b, |v| f(LogRef(v & REF_MASK)));
        BucketRange { first: t.first_hash_of(b), next: t.first_hash_of(b + 1) }
    }

    /// Growth work for a writer that holds no stripe lock: starts a growth
    /// when a growing table holds more than [`GROW_ABOVE`] objects per
    /// bucket, and moves one stripe of a growth in progress (skipping the
    /// turn if another writer is moving or the stripe is locked).
    /// `hash_of` gives the key hash of an object the table references (it
    /// is live: its stripe is locked while it is read), and `prefetch`
    /// hints that `hash_of` will read it soon. Returns whether it moved a
    /// stripe.
    pub fn maintain(&self, objects: u64, hash_of: impl Fn(LogRef) -> u64, prefetch: impl Fn(LogRef)) -> bool {
        if !self.growing {
            return false;
        }
        let t = self.current();
        if t.next.load(Ordering::Acquire).is_null() && objects <= (GROW_ABOVE * t.main.len()) as u64 {
            return false;
        }
        let Some(_mover) = self.mover.try_lock() else {
            return false;
        };
        let t = self.current();
        let mut next = t.next.load(Ordering::Acquire);
        if next.is_null() {
            if objects <= (GROW_ABOVE * t.main.len()) as u64 {
                return false;
            }
            let buckets = (t.main.len() + t.main.len() / 2).div_ceil(STRIPES) * STRIPES;
            next = Box::into_raw(Box::new(Table::new(buckets, false)));
            t.next.store(next, Ordering::Release);
            self.work_above.store(0, Ordering::Relaxed);
        }
        // SAFETY: `next` is live: only this mover retires tables.
        let to = unsafe { &*next };
        let stripe = t.moved.load(Ordering::Acquire);
        {
            let Some(_lock) = self.stripes[stripe].try_lock() else {
                return false;
            };
            let (from_b, to_b) = (t.main.len() / STRIPES, to.main.len() / STRIPES);
            // The objects' keys are read at random in the log: gather the
            // stripe's slots, then hash them with the next few entries
            // prefetched, so the cache misses overlap.
            MOVING.with(|cell| {
                let packed = &mut *cell.borrow_mut();
                packed.clear();
                for b in stripe * from_b..(stripe + 1) * from_b {
                    t.for_each_packed(b, |v| packed.push(v));
                }
                for v in packed.iter().take(MOVE_PREFETCH) {
                    prefetch(LogRef(v & REF_MASK));
                }
                for i in 0..packed.len() {
                    if let Some(ahead) = packed.get(i + MOVE_PREFETCH) {
                        prefetch(LogRef(ahead & REF_MASK));
                    }
                    let v = packed[i];
                    let h = hash_of(LogRef(v & REF_MASK));
                    debug_assert_eq!(tag_of(h), v >> 48, "an object moved to the wrong tag");
                    let nb = to.bucket_index(h);
                    debug_assert!((stripe * to_b..(stripe + 1) * to_b).contains(&nb));
                    to.insert_packed(nb, v);
                }
                packed.clear();
                packed.shrink_to(MOVE_KEEP);
            });
            t.moved.store(stripe + 1, Ordering::Release);
        }
        self.stripes_moved.fetch_add(1, Ordering::Relaxed);
        if stripe + 1 == STRIPES {
            self.work_above.store((GROW_ABOVE * to.main.len()) as u64, Ordering::Relaxed);
            let old = self.current.swap(next, Ordering::AcqRel);
            self.retired.lock().push(Retired(old));
            self.growths.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Whether a growth is under way.
    pub fn growth_in_progress(&self) -> bool {
        !self.current().next.load(Ordering::Acquire).is_null()
    }

    /// Whether [`HashTable::maintain`] has work with `objects` objects
    /// held, or retired tables wait to be freed.
    pub fn needs_work(&self, objects: u64) -> bool {
        self.growing
            && (self.growth_in_progress()
                || objects > (GROW_ABOVE * self.current().main.len()) as u64
                || !self.retired.lock().is_empty())
    }

    /// The tables retired so far. Drop them only after an epoch
    /// synchronisation that starts after this call: readers may still be
    /// in them until then.
    pub fn take_retired(&self) -> Vec<Retired> {
        std::mem::take(&mut *self.retired.lock())
    }
}

impl Drop for HashTable {
    fn drop(&mut self) {
        let t = *self.current.get_mut();
        // SAFETY: the current table is owned by the HashTable; a growth in
        // progress owns its next table through it (retired tables are
        // dropped with `retired`; their `next` is current or retired too).
        unsafe {
            let next = (*t).next.load(Ordering::Relaxed);
            if !next.is_null() {
                drop(Box::from_raw(next));
            }
            drop(Box::from_raw(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn insert_chains_when_bucket_overflows() {
        let t = HashTable::new(1);
        for i in 1..=100u64 {
            let _g = t.lock(i);
            t.insert(i, LogRef(i));
        }
        assert!(t.overflow_buckets() > 0);
        for i in 1..=100u64 {
            let found = t.find(i, |r| r == LogRef(i));
            assert_eq!(found.map(|f| f.1), Some(LogRef(i)), "lost ref {i}");
        }
        let mut seen = Vec::new();
        let range = t.for_each_in_bucket_of(0, |r| seen.push(r.0));
        assert_eq!(range, BucketRange { first: 0, next: 1 << 64 });
        seen.sort();
        assert_eq!(seen, (1..=100).collect::<Vec<_>>());
        let (pos, _) = t.find(50, |r| r == LogRef(50)).unwrap();
        t.clear(pos);
        assert!(t.find(50, |r| r == LogRef(50)).is_none());
        t.insert(50, LogRef(50));
        assert!(t.find(50, |r| r == LogRef(50)).is_some());
    }

    #[test]
    fn bucket_ranges_are_monotone_and_map_back() {
        let t = HashTable::new(1000);
        let mut h: u128 = 0;
        let mut buckets = 0;
        while h < 1 << 64 {
            let r = t.bucket_range(h as u64);
            assert_eq!(r.first, h);
            assert!(r.next > r.first);
            assert_eq!(t.bucket_range((r.next - 1) as u64), r);
            h = r.next;
            buckets += 1;
        }
        assert_eq!(buckets, 1000);
    }

    /// A key hash for reference `i` (spread over the whole hash space).
    fn hash_of(r: LogRef) -> u64 {
        r.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (r.0 >> 7)
    }

    fn insert(t: &HashTable, i: u64) {
        let h = hash_of(LogRef(i));
        let _g = t.lock(h);
        t.insert(h, LogRef(i));
    }

    fn holds(t: &HashTable, i: u64) -> bool {
        t.find(hash_of(LogRef(i)), |r| r == LogRef(i)).is_some()
    }

    /// A growing table grows by half each time it passes GROW_ABOVE objects
    /// per bucket, one stripe per call, and loses nothing; retired tables
    /// wait to be taken.
    #[test]
    fn growing_table_grows_stripe_by_stripe_and_keeps_every_object() {
        let t = HashTable::growing();
        assert_eq!(t.main_buckets(), MIN_GROWING_BUCKETS);
        let n = (GROW_ABOVE * MIN_GROWING_BUCKETS * 3) as u64;
        let mut objects = 0u64;
        for i in 1..=n {
            insert(&t, i);
            objects += 1;
            t.maintain(objects, hash_of, |_| {});
        }
        let (moved, growths) = t.growth_stats();
        assert!(growths >= 2, "{growths} growths, {moved} stripes moved");
        assert_eq!(moved, growths * STRIPES as u64 + t.current().moved.load(Ordering::Relaxed) as u64);
        assert!(t.main_buckets() > 2 * MIN_GROWING_BUCKETS, "{} buckets", t.main_buckets());
        assert_eq!(t.main_buckets() % STRIPES, 0);
        for i in 1..=n {
            assert!(holds(&t, i), "lost {i}");
        }
        // Every object once, in the bucket its hash names, walking the hash
        // space bucket by bucket (one growth may be half done).
        let mut seen = HashMap::new();
        let mut h: u128 = 0;
        while h < 1 << 64 {
            let r = t.for_each_in_bucket_of(h as u64, |x| {
                let hx = hash_of(x) as u128;
                assert!(hx >= h, "object {x:?} below its bucket");
                *seen.entry(x.0).or_insert(0) += 1;
            });
            assert_eq!(r.first, h);
            h = r.next;
        }
        assert_eq!(seen.len() as u64, n);
        assert!(seen.values().all(|&c| c == 1));
        let retired = t.take_retired();
        assert_eq!(retired.len() as u64, growths);
        assert!(t.take_retired().is_empty());
        drop(retired);
        // A fixed table never grows.
        let f = HashTable::new(16);
        assert!(!f.maintain(1 << 40, hash_of, |_| {}));
        assert_eq!(f.main_buckets(), 16);
    }

    /// Readers never miss an object while writers insert and grow the
    /// table; objects inserted before a reader starts are always found.
    #[test]
    fn readers_find_every_object_while_the_table_grows() {
        let t = Arc::new(HashTable::growing());
        let done = Arc::new(AtomicBool::new(false));
        let inserted = Arc::new(AtomicU64::new(0));
        let n = (GROW_ABOVE * MIN_GROWING_BUCKETS * 4) as u64;
        let writer = {
            let (t, done, inserted) = (t.clone(), done.clone(), inserted.clone());
            std::thread::spawn(move || {
                for i in 1..=n {
                    insert(&t, i);
                    inserted.store(i, Ordering::Release);
                    t.maintain(i, hash_of, |_| {});
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut checks = 0u64;
        let mut x = 1u64;
        while !done.load(Ordering::Acquire) {
            let upto = inserted.load(Ordering::Acquire);
            if upto == 0 {
                continue;
            }
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = 1 + (x >> 33) % upto;
            assert!(holds(&t, i), "object {i} of {upto} missed");
            checks += 1;
        }
        writer.join().unwrap();
        assert!(t.growth_stats().1 >= 2);
        assert!(checks > 1000, "{checks} checks");
        // Retired tables are not freed while the test's readers ran; the
        // table frees the rest when dropped.
        drop(t.take_retired());
    }
}
