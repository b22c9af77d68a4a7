//! The memory pool: one fixed allocation divided into seglets.
//!
//! All object memory of a store comes from here; nothing is allocated per
//! object. The pool hands out seglet indices and gives raw access to their
//! bytes. It is one of the two files with `unsafe` (the other is
//! `hashtable.rs`, for its lock-free buckets): the log's discipline makes the
//! accesses sound, and each accessor states the contract its caller (only
//! `segment.rs`) must keep.
//!
//! Free seglets are handed out lowest index first, and whole free regions
//! (huge pages) given back to the OS (`FreeSet`, `Pool::trim`). Allocation
//! honours reserve tiers so that the cleaner and tombstones always find
//! memory (Rumble §4.5).

use parking_lot::Mutex;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Who is asking for a seglet: each tier may dig deeper into the reserve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Client writes: must leave the tombstone and cleaner reserves alone.
    Write,
    /// Removes (tombstones): may use the tombstone reserve.
    Remove,
    /// The cleaner's survivors and emergency heads: may use everything.
    Cleaner,
}

/// The pool's bytes are shared memory whose access discipline is enforced
/// by the log (see `read`/`write`); the free list is locked.
pub struct Pool {
    mem: HugeMapping,
    seglet_bytes: usize,
    seglets: u32,
    free: Mutex<FreeSet>,
    /// Seglets in the free set plus those being returned to the OS.
    free_count: AtomicUsize,
    /// Free seglets in regions given back to the OS.
    returned: AtomicUsize,
    /// Seglets per region, the unit memory is given back in.
    per_region: usize,
    /// Debug builds (the tests): which seglets are handed out, to catch a
    /// seglet freed twice or handed out twice before it corrupts data.
    #[cfg(debug_assertions)]
    owned: Mutex<Vec<bool>>,
    /// Seglets that only `Tier::Cleaner` may take.
    cleaner_reserve: usize,
    /// Seglets that `Tier::Write` may not take (on top of the cleaner's).
    remove_reserve: usize,
    /// One past the highest seglet ever handed out: the pool's bytes below
    /// `frontier * seglet_bytes` have been written, those above have not
    /// (seglets are handed out lowest index first, freed ones again first).
    frontier: AtomicUsize,
    /// Bytes from the start that the populating thread has made resident.
    populated: AtomicUsize,
    /// The thread that keeps pages resident ahead of the frontier, woken
    /// when the frontier comes within half of [`POPULATE_AHEAD`] of it.
    populator: OnceLock<std::thread::Thread>,
}

/// Free seglets, handed out lowest index first, so that the seglets in use
/// gather at the start of the pool and whole regions at its end fall free.
/// Memory goes back to the OS a whole region at a time ([`Pool::trim`]):
/// with transparent huge pages, a region is one huge page, and giving back
/// part of one would not shrink the resident set (the kernel's khugepaged
/// fills a partly present huge page again).
struct FreeSet {
    free: std::collections::BTreeSet<u32>,
    /// Free seglets per region.
    region_free: Vec<u32>,
    /// Whether a region's memory may be resident (false once given back,
    /// until a seglet of it is handed out).
    resident: Vec<bool>,
}

/// How far ahead of the frontier the populating thread keeps the pool
/// resident. The first write to a fresh page costs a fault and the zeroing
/// of the page, and with huge pages that is 2 MiB at once: 2-8 ms on this
/// project's VMs, long enough to show in the p99 of every client of the
/// worker that happens to cross it. A thread of its own takes those faults
/// instead. Two huge pages: at 50 MB/s of appends that is 80 ms of lead,
/// and the resident memory it adds is small beside any real data set.
pub const POPULATE_AHEAD: usize = 4 << 20;

/// Size of a base page: the unit `madvise` gives back.
const PAGE: usize = 4096;

/// Size of a transparent huge page on x86-64.
const HUGE_PAGE: usize = 2 << 20;

/// Zero-filled anonymous memory aligned to [`HUGE_PAGE`] and marked for
/// transparent huge pages, unmapped when dropped. The kernel backs it only
/// as it is first written. Both big structures of a store live in one: the
/// pool, whose objects are read at random, and the hash table. With 4 KiB
/// pages nearly every such read misses the TLB, and under virtualisation a
/// TLB miss walks two sets of page tables: on this project's VMs that walk
/// was measured as a third of the server's CPU time in a SET benchmark.
pub(crate) struct HugeMapping {
    map: *mut libc::c_void,
    map_len: usize,
    start: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory; who may touch which bytes is the owner's business.
unsafe impl Send for HugeMapping {}
unsafe impl Sync for HugeMapping {}

impl HugeMapping {
    /// Reserves `len` bytes (`what` names them in the panic if the address
    /// space is exhausted).
    pub(crate) fn new(len: usize, what: &str) -> HugeMapping {
        let map_len = len + HUGE_PAGE;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(map != libc::MAP_FAILED, "cannot map {len} bytes for {what}: {}", std::io::Error::last_os_error());
        let start = (map as usize).next_multiple_of(HUGE_PAGE);
        // SAFETY: the range lies within the mapping; the advice is a hint
        // (ignored where transparent huge pages are off).
        unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        let start = NonNull::new(start as *mut u8).expect("mmap returned null");
        HugeMapping { map, map_len, start, len }
    }

    pub(crate) fn start(&self) -> NonNull<u8> {
        self.start
    }

    /// Makes `len` bytes from `offset` resident (writable pages faulted in,
    /// contents untouched, so safe while others use them). Errors where the
    /// kernel lacks `MADV_POPULATE_WRITE` (before 5.14).
    pub(crate) fn populate(&self, offset: usize, len: usize) -> std::io::Result<()> {
        assert!(offset <= self.len && len <= self.len - offset);
        // SAFETY: the range lies within the mapping (asserted); populating
        // does not change any byte of it.
        let r = unsafe { libc::madvise(self.start.as_ptr().add(offset).cast(), len, libc::MADV_POPULATE_WRITE) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Drop for HugeMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; borrowers of its bytes borrow
        // its owner, so none outlives it.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

impl Pool {
    /// Reserves `seglets * seglet_bytes` bytes of anonymous memory. The
    /// kernel backs a page only when it is first written, so seglets never
    /// used are never resident; seglets are handed out lowest index first,
    /// which keeps the resident set small and lets the end of the pool be
    /// given back when it falls free.
    pub fn new(seglet_bytes: usize, seglets: u32, cleaner_reserve: usize, remove_reserve: usize) -> Pool {
        assert!(seglet_bytes.is_power_of_two() && seglets > 0);
        let len = seglet_bytes * seglets as usize;
        let mem = HugeMapping::new(len, "the memory pool");

        // Regions: huge pages, or base pages for a pool too small to
        // have many huge pages (tests), but never less than a seglet.
        let region_bytes = if len >= 32 * HUGE_PAGE { HUGE_PAGE } else { PAGE }.max(seglet_bytes);
        let per_region = region_bytes / seglet_bytes;
        let regions = (seglets as usize).div_ceil(per_region);
        let mut region_free = vec![per_region as u32; regions];
        if !(seglets as usize).is_multiple_of(per_region) {
            region_free[regions - 1] = (seglets as usize % per_region) as u32;
        }
        Pool {
            mem,
            seglet_bytes,
            seglets,
            free_count: AtomicUsize::new(seglets as usize),
            returned: AtomicUsize::new(0),
            per_region,
            #[cfg(debug_assertions)]
            owned: Mutex::new(vec![false; seglets as usize]),
            free: Mutex::new(FreeSet { free: (0..seglets).collect(), region_free, resident: vec![true; regions] }),
            cleaner_reserve,
            remove_reserve,
            frontier: AtomicUsize::new(0),
            populated: AtomicUsize::new(0),
            populator: OnceLock::new(),
        }
    }

    /// Bytes of the whole pool.
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// Makes `len` bytes of the pool from `offset` resident (writable pages
    /// faulted in, contents untouched, so safe while the store runs).
    /// Errors where the kernel lacks `MADV_POPULATE_WRITE` (before 5.14).
    pub fn populate(&self, offset: usize, len: usize) -> std::io::Result<()> {
        self.mem.populate(offset, len)?;
        self.populated.fetch_max(offset + len, Ordering::Release);
        Ok(())
    }

    /// Bytes from the start of the pool that seglets handed out so far
    /// cover (see `frontier`).
    pub fn frontier_bytes(&self) -> usize {
        self.frontier.load(Ordering::Acquire) * self.seglet_bytes
    }

    /// Bytes from the start of the pool made resident by [`Pool::populate`].
    pub fn populated_bytes(&self) -> usize {
        self.populated.load(Ordering::Acquire)
    }

    /// Makes the calling thread the one [`Pool::alloc`] wakes
    /// (`std::thread::Thread::unpark`) as the frontier nears the populated
    /// bytes. Once per pool.
    pub fn set_populator(&self, thread: std::thread::Thread) {
        let _ = self.populator.set(thread);
    }

    pub fn seglet_bytes(&self) -> usize {
        self.seglet_bytes
    }

    pub fn total_seglets(&self) -> u32 {
        self.seglets
    }

    pub fn free_seglets(&self) -> usize {
        self.free_count.load(Ordering::Relaxed)
    }

    /// Seglets that `tier` may still take.
    pub fn available(&self, tier: Tier) -> usize {
        let floor = match tier {
            Tier::Write => self.cleaner_reserve + self.remove_reserve,
            Tier::Remove => self.cleaner_reserve,
            Tier::Cleaner => 0,
        };
        self.free_seglets().saturating_sub(floor)
    }

    pub fn alloc(&self, tier: Tier) -> Option<u32> {
        let mut free = self.free.lock();
        let floor = match tier {
            Tier::Write => self.cleaner_reserve + self.remove_reserve,
            Tier::Remove => self.cleaner_reserve,
            Tier::Cleaner => 0,
        };
        if free.free.len() <= floor {
            return None;
        }
        let s = free.free.pop_first();
        if let Some(s) = s {
            let r = s as usize / self.per_region;
            if !free.resident[r] {
                // Its pages come back as they are written.
                free.resident[r] = true;
                self.returned.fetch_sub(free.region_free[r] as usize, Ordering::Relaxed);
            }
            free.region_free[r] -= 1;
        }
        self.free_count.fetch_sub(s.is_some() as usize, Ordering::Relaxed);
        #[cfg(debug_assertions)]
        if let Some(s) = s {
            let mut o = self.owned.lock();
            assert!(!o[s as usize], "seglet {s} handed out twice");
            o[s as usize] = true;
        }
        drop(free);
        if let Some(s) = s {
            let end = self.frontier.fetch_max(s as usize + 1, Ordering::AcqRel).max(s as usize + 1);
            if end * self.seglet_bytes + POPULATE_AHEAD / 2 > self.populated.load(Ordering::Acquire) {
                if let Some(t) = self.populator.get() {
                    t.unpark();
                }
            }
        }
        s
    }

    /// Returns seglets to the pool. The caller guarantees no reader can still
    /// see them (the epoch has passed).
    pub fn release(&self, seglets: impl IntoIterator<Item = u32>) {
        let mut free = self.free.lock();
        let mut n = 0;
        for s in seglets {
            debug_assert!(s < self.seglets);
            #[cfg(debug_assertions)]
            {
                let mut o = self.owned.lock();
                assert!(o[s as usize], "seglet {s} released twice");
                o[s as usize] = false;
            }
            free.free.insert(s);
            free.region_free[s as usize / self.per_region] += 1;
            n += 1;
        }
        self.free_count.fetch_add(n, Ordering::Relaxed);
    }

    /// Gives the memory of wholly free regions back to the OS, all but the
    /// lowest ones holding `keep` seglets (handed out first, so kept
    /// resident), so that the process's resident memory follows the data
    /// rather than its peak. Returns the seglets given back. The `madvise`
    /// runs without the lock: the regions' seglets leave the free set
    /// meanwhile (still counted as free), so nobody is handed one while its
    /// memory is being dropped. Call it from a background thread (the
    /// cleaner's), not the write path.
    pub fn trim(&self, keep: usize) -> usize {
        let full = self.per_region as u32;
        let regions: Vec<usize> = {
            let mut free = self.free.lock();
            let regions: Vec<usize> = (0..free.region_free.len())
                .filter(|&r| free.region_free[r] == full && free.resident[r])
                .skip(keep.div_ceil(self.per_region))
                .collect();
            for &r in &regions {
                for s in self.region_seglets(r) {
                    free.free.remove(&s);
                }
            }
            regions
        };
        for &r in &regions {
            let at = self.ptr(self.region_seglets(r).start, 0, self.seglet_bytes);
            // SAFETY: a whole region of the pool (a multiple of the page
            // size, in bounds: `ptr` checked its first seglet and regions
            // tile the pool) whose seglets are all free and out of the free
            // set: nobody reads or writes them until they are handed out
            // again, after which the zero pages the kernel gives are
            // overwritten before they are published.
            unsafe { libc::madvise(at.cast(), self.per_region * self.seglet_bytes, libc::MADV_DONTNEED) };
        }
        let mut free = self.free.lock();
        for &r in &regions {
            free.resident[r] = false;
            for s in self.region_seglets(r) {
                free.free.insert(s);
            }
        }
        let n = regions.len() * self.per_region;
        self.returned.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// The seglets of region `r` (only whole regions are trimmed: a pool's
    /// last region, if partial, never counts as wholly free).
    fn region_seglets(&self, r: usize) -> std::ops::Range<u32> {
        (r * self.per_region) as u32..((r + 1) * self.per_region) as u32
    }

    /// Free seglets whose memory was given back to the OS.
    pub fn returned_seglets(&self) -> usize {
        self.returned.load(Ordering::Relaxed)
    }

    fn ptr(&self, seglet: u32, offset: usize, len: usize) -> *mut u8 {
        assert!(seglet < self.seglets && offset + len <= self.seglet_bytes, "seglet access out of bounds");
        // SAFETY: in bounds of the allocation by the assertion above.
        unsafe { self.mem.start().as_ptr().add(seglet as usize * self.seglet_bytes + offset) }
    }

    /// Copies `src` into a seglet.
    ///
    /// Contract: the range is owned by the caller: it belongs to a segment
    /// being built (the head or a survivor) past its published length, so no
    /// reader looks at it until a later release-store publishes it.
    pub fn write(&self, seglet: u32, offset: usize, src: &[u8]) {
        let dst = self.ptr(seglet, offset, src.len());
        // SAFETY: in bounds (checked in `ptr`); no other thread accesses the
        // range concurrently (contract above); `src` cannot overlap the pool
        // range because callers build entries in their own buffers.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }

    /// Borrows bytes of a seglet.
    ///
    /// Contract: the range was published (written, then made visible through
    /// an acquire/release pair) and the caller holds an epoch guard or a lock
    /// that keeps the seglet from being released and reused while the slice
    /// lives. Published bytes are never written again until the seglet is
    /// released, so the slice is immutable for its lifetime.
    pub fn slice(&self, seglet: u32, offset: usize, len: usize) -> &[u8] {
        let p = self.ptr(seglet, offset, len);
        // SAFETY: in bounds; immutable for the slice's lifetime by the contract.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}
