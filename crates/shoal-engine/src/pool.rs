//! The memory pool: one fixed allocation divided into seglets.
//!
//! All object memory of a store comes from here; nothing is allocated per
//! object. The pool hands out seglet indices and gives raw access to their
//! bytes. It is one of the two files with `unsafe` (the other is
//! `hashtable.rs`, for its lock-free buckets): the log's discipline makes the
//! accesses sound, and each accessor states the contract its caller (only
//! `segment.rs`) must keep.
//!
//! Free seglets are kept in a stack. Allocation honours reserve tiers so
//! that the cleaner and tombstones always find memory (Rumble §4.5).

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
    free: Mutex<FreeLists>,
    /// Seglets in the free lists plus those being returned to the OS.
    free_count: AtomicUsize,
    /// Seglets returned to the OS and not handed out since.
    returned: AtomicUsize,
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

/// Free seglets: `warm` ones are resident (handed out first, most recently
/// freed first), `cold` ones were given back to the OS ([`Pool::trim`]) and
/// cost page faults when next written.
#[derive(Default)]
struct FreeLists {
    warm: Vec<u32>,
    cold: Vec<u32>,
}

impl FreeLists {
    fn len(&self) -> usize {
        self.warm.len() + self.cold.len()
    }
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
    /// used are never resident; the free list hands out recently freed
    /// seglets first, which keeps the resident set small.
    pub fn new(seglet_bytes: usize, seglets: u32, cleaner_reserve: usize, remove_reserve: usize) -> Pool {
        assert!(seglet_bytes.is_power_of_two() && seglets > 0);
        let len = seglet_bytes * seglets as usize;
        let mem = HugeMapping::new(len, "the memory pool");

        // Hand out low indices first so that a lightly used pool touches few pages.
        let warm: Vec<u32> = (0..seglets).rev().collect();
        Pool {
            mem,
            seglet_bytes,
            seglets,
            free_count: AtomicUsize::new(warm.len()),
            returned: AtomicUsize::new(0),
            #[cfg(debug_assertions)]
            owned: Mutex::new(vec![false; seglets as usize]),
            free: Mutex::new(FreeLists { warm, cold: Vec::new() }),
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
        if free.len() <= floor {
            return None;
        }
        let s = match free.warm.pop() {
            Some(s) => Some(s),
            None => {
                let s = free.cold.pop();
                self.returned.fetch_sub(s.is_some() as usize, Ordering::Relaxed);
                s
            }
        };
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
        let before = free.warm.len();
        for s in seglets {
            debug_assert!(s < self.seglets);
            #[cfg(debug_assertions)]
            {
                let mut o = self.owned.lock();
                assert!(o[s as usize], "seglet {s} released twice");
                o[s as usize] = false;
            }
            free.warm.push(s);
        }
        self.free_count.fetch_add(free.warm.len() - before, Ordering::Relaxed);
    }

    /// Gives the memory of free seglets back to the OS, all but `keep` of
    /// the resident ones (the least recently freed go first), so that the
    /// process's resident memory follows the data rather than its peak.
    /// Returns the seglets given back. The `madvise` calls run without the
    /// free-list lock (allocations meanwhile take other seglets), so call
    /// it from a background thread (the cleaner's), not the write path.
    /// Never touches a seglet in use: only seglets in the free list, which
    /// no reader can see (`release`'s contract).
    pub fn trim(&self, keep: usize) -> usize {
        let mut out: Vec<u32> = {
            let mut free = self.free.lock();
            let n = free.warm.len().saturating_sub(keep);
            if n == 0 {
                return 0;
            }
            free.warm.drain(..n).collect()
        };
        out.sort_unstable();
        // One call per run of adjacent seglets.
        let mut i = 0;
        while i < out.len() {
            let mut j = i + 1;
            while j < out.len() && out[j] == out[j - 1] + 1 {
                j += 1;
            }
            // Only whole pages inside the run: a page also holding a seglet
            // in use (seglets smaller than a page) must keep its bytes.
            let from = (self.ptr(out[i], 0, self.seglet_bytes) as usize).next_multiple_of(PAGE);
            let to = (self.ptr(out[j - 1], 0, self.seglet_bytes) as usize + self.seglet_bytes) / PAGE * PAGE;
            if to > from {
                // SAFETY: [from, to) lies within the run of free seglets
                // (`ptr` checked its ends are in the pool): nobody reads or
                // writes them until `alloc` hands them out again, after
                // which the zero pages the kernel gives are overwritten
                // before they are published.
                unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED) };
            }
            i = j;
        }
        let n = out.len();
        let mut free = self.free.lock();
        free.cold.extend(out);
        self.returned.fetch_add(n, Ordering::Relaxed);
        n
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
