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
//! bucket before the chain pointer is published, so readers never miss it).

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

#[repr(C, align(64))]
struct Bucket {
    slots: [AtomicU64; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(std::mem::align_of::<Bucket>() == 64);

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
    fn new(n: usize) -> MainBuckets {
        let bytes = n * std::mem::size_of::<Bucket>();
        let mem = HugeMapping::new(bytes, "the hash table");
        // The table is resident at once, in huge pages where the kernel has
        // them, as a table built bucket by bucket was: its memory is the
        // server's from the start, not charged to the first writes. Where
        // populating is not supported, pages come on first write.
        let _ = mem.populate(0, bytes);
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

// SAFETY: a SlotPos is only an address of a bucket that lives as long as the
// table; it is used only under the stripe lock.
unsafe impl Send for SlotPos {}

fn tag_of(hash: u64) -> u64 {
    hash & 0xffff
}

fn pack(hash: u64, r: LogRef) -> u64 {
    debug_assert!(r.0 <= REF_MASK && r.0 != 0);
    (tag_of(hash) << 48) | r.0
}

pub struct HashTable {
    main: MainBuckets,
    chunks: Box<[AtomicPtr<Bucket>]>,
    overflow_used: AtomicUsize,
    overflow_alloc: Mutex<()>,
    stripes: Box<[Mutex<()>]>,
}

impl HashTable {
    pub fn new(buckets: usize) -> HashTable {
        let buckets = buckets.max(1);
        HashTable {
            main: MainBuckets::new(buckets),
            chunks: (0..MAX_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            overflow_used: AtomicUsize::new(0),
            overflow_alloc: Mutex::new(()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    pub fn main_buckets(&self) -> usize {
        self.main.len()
    }

    /// Bytes of memory the table occupies (main buckets plus overflow arena).
    pub fn memory_bytes(&self) -> usize {
        let chunks = self.overflow_used.load(Ordering::Relaxed).div_ceil(CHUNK_BUCKETS);
        (self.main.len() + chunks * CHUNK_BUCKETS) * 64
    }

    #[cfg(test)]
    pub fn overflow_buckets(&self) -> usize {
        self.overflow_used.load(Ordering::Relaxed)
    }

    pub fn bucket_index(&self, hash: u64) -> usize {
        ((hash as u128 * self.main.len() as u128) >> 64) as usize
    }

    /// Smallest key hash whose bucket is `bucket` (the enumeration cursor).
    pub fn first_hash_of(&self, bucket: usize) -> u128 {
        let n = self.main.len() as u128;
        ((bucket as u128) << 64).div_ceil(n)
    }

    /// Hints the CPU to load `hash`'s main bucket: the cleaner computes the
    /// hashes of a batch of entries, prefetches their buckets, then looks
    /// them up, so the cache misses overlap instead of queueing.
    pub fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = &self.main[self.bucket_index(hash)] as *const Bucket as *const i8;
            // SAFETY: a prefetch is only a hint; it never faults and `p`
            // points into the table anyway. SSE is part of the x86_64 baseline.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = hash;
    }

    /// The stripe lock that must be held to mutate the slots of `hash`'s bucket.
    pub fn lock(&self, hash: u64) -> MutexGuard<'_, ()> {
        self.stripes[self.bucket_index(hash) % STRIPES].lock()
    }

    /// Stripe number of a hash, for callers that lock several keys in order.
    pub fn stripe_of(&self, hash: u64) -> usize {
        self.bucket_index(hash) % STRIPES
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

    fn overflow(&self, index: u64) -> &Bucket {
        let i = index as usize;
        let chunk = self.chunks[i / CHUNK_BUCKETS].load(Ordering::Acquire);
        assert!(!chunk.is_null(), "chain to an unallocated overflow bucket");
        // SAFETY: chunks are allocated before any chain pointer to them is
        // published (release/acquire) and freed only when the table drops.
        unsafe { &*chunk.add(i % CHUNK_BUCKETS) }
    }

    /// Calls `f(ref)` for every object reference in `hash`'s chain whose
    /// partial hash matches, until `f` returns true; returns that slot.
    /// Lock-free.
    pub fn find(&self, hash: u64, mut f: impl FnMut(LogRef) -> bool) -> Option<(SlotPos, LogRef)> {
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

    /// Replaces the reference in a slot found by [`find`] (stripe lock held).
    pub fn set(&self, pos: SlotPos, hash: u64, r: LogRef) {
        // SAFETY: `pos.bucket` points into this table's memory (see SlotPos).
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
        let packed = pack(hash, r);
        let mut bucket: &Bucket = &self.main[self.bucket_index(hash)];
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

    /// Calls `f` with every object reference in main bucket `bucket` and its
    /// chain. Lock-free; used by enumeration and by invariant checks.
    pub fn for_each_in_bucket(&self, bucket: usize, mut f: impl FnMut(LogRef)) {
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
                    f(LogRef(v & REF_MASK));
                }
            }
            match next {
                Some(i) => b = self.overflow(i),
                None => return,
            }
        }
    }
}

impl Drop for HashTable {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        t.for_each_in_bucket(0, |r| seen.push(r.0));
        seen.sort();
        assert_eq!(seen, (1..=100).collect::<Vec<_>>());
        let (pos, _) = t.find(50, |r| r == LogRef(50)).unwrap();
        t.clear(pos);
        assert!(t.find(50, |r| r == LogRef(50)).is_none());
        t.insert(50, LogRef(50));
        assert!(t.find(50, |r| r == LogRef(50)).is_some());
    }

    #[test]
    fn first_hash_of_is_monotone_and_maps_back() {
        let t = HashTable::new(1000);
        for b in 1..1000 {
            let h = t.first_hash_of(b);
            assert_eq!(t.bucket_index(h as u64), b);
            assert_eq!(t.bucket_index(h as u64 - 1), b - 1);
        }
    }
}
