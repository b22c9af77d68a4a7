//! Segments in memory: a table of segment slots, each a list of seglets from
//! the pool plus the soft statistics the cleaner selects by (Rumble §4.2.2).
//!
//! A segment is addressed by its slot number while it is in memory; its
//! [`SegmentId`] names it in the log (compaction moves a segment to a new
//! slot under the same id). A [`LogRef`] names an entry: slot and offset.
//!
//! Contract: a slot's seglet list and bytes below its published length are
//! immutable until the slot is freed, and a slot is freed only after an
//! epoch has passed since the last hash table reference to it was removed.
//! Bytes at and beyond the published length belong to the single writer of
//! the segment (the log head's holder or the cleaner).

use crate::pool::{Pool, Tier};
use parking_lot::Mutex;
use shoal_common::SegmentId;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Bits of a [`LogRef`] that hold the offset within the segment.
pub const OFFSET_BITS: u32 = 27;
/// Largest segment the reference format can address.
pub const MAX_SEGMENT_BYTES: usize = 1 << OFFSET_BITS;
/// Bits of a segment slot number in a [`LogRef`].
pub const SLOT_BITS: u32 = 20;
/// Most segment slots the reference format can address.
pub const MAX_SLOTS: usize = 1 << SLOT_BITS;

/// A reference to a log entry: 20-bit slot, 27-bit offset. Never zero (slot 0
/// is never used), so a zero hash table slot can mean "empty".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogRef(pub u64);

impl LogRef {
    pub fn new(slot: u32, offset: u32) -> LogRef {
        debug_assert!((slot as usize) < MAX_SLOTS && slot != 0 && (offset as usize) < MAX_SEGMENT_BYTES);
        LogRef(((slot as u64) << OFFSET_BITS) | offset as u64)
    }

    pub fn slot(self) -> u32 {
        (self.0 >> OFFSET_BITS) as u32
    }

    pub fn offset(self) -> u32 {
        (self.0 & ((1 << OFFSET_BITS) - 1)) as u32
    }
}

/// What a slot currently holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SlotState {
    Free = 0,
    /// The log head: takes appends.
    Head = 1,
    /// A closed, immutable segment of the log.
    Closed = 2,
    /// A survivor or compaction target being written by the cleaner.
    Building = 3,
    /// Cleaned, waiting for an epoch to pass before its seglets are reused.
    Dying = 4,
}

/// One segment slot. Counters are soft state (recomputed on replay).
/// Aligned to two cache lines so that the writer's head slot and the
/// cleaner's slots never share a line.
#[repr(align(128))]
pub struct SegmentSlot {
    pub id: AtomicU64,
    /// Bytes published (readable).
    pub len: AtomicU32,
    pub seglets: AtomicU32,
    /// Bytes of live object entries.
    pub live_bytes: AtomicU64,
    /// Bytes of tombstone entries appended and not known to be dead.
    pub tomb_bytes: AtomicU64,
    /// Bytes of stream batch entries: the cleaner never picks a segment
    /// that holds any (set under the head lock, before it can close).
    pub stream_bytes: AtomicU64,
    /// Sum of `ChunkRunHeader::relocation_slack` over the chunk runs written
    /// to it (soft state): relocating a run with a dead record rewrites it
    /// as the run of its live records, which may be larger than their
    /// shares of the old run by that much, so the cleaner reserves for a
    /// segment up to its live bytes plus this (`cleaner`).
    pub run_slack: AtomicU64,
    /// Bytes of its tombstones found dead by the last scan (Rumble §4.2.2).
    pub tomb_dead: AtomicU64,
    /// The cleaner's splice count when its tombstones were last scanned.
    pub tomb_gen: AtomicU64,
    /// Creation time (ms since the store started); for survivors the
    /// live-byte-weighted mean of their sources' times.
    pub created_ms: AtomicU64,
    /// When its tombstones were last rechecked (ms since start).
    pub tomb_scanned_ms: AtomicU64,
    /// No live object of this segment expires before this time
    /// ([`shoal_common::UnixMillis`]; `u64::MAX`: none expires): the
    /// expiry sweep skips the segment until then (see `expiry.rs`).
    pub next_expiry: AtomicU64,
    state: AtomicU8,
}

impl SegmentSlot {
    pub fn state(&self) -> SlotState {
        match self.state.load(Ordering::Acquire) {
            0 => SlotState::Free,
            1 => SlotState::Head,
            2 => SlotState::Closed,
            3 => SlotState::Building,
            _ => SlotState::Dying,
        }
    }

    pub fn set_state(&self, s: SlotState) {
        self.state.store(s as u8, Ordering::Release);
    }

    pub fn segment_id(&self) -> SegmentId {
        SegmentId(self.id.load(Ordering::Acquire))
    }
}

pub struct Segments {
    pub pool: Pool,
    slots: Box<[SegmentSlot]>,
    /// `per_segment` seglet numbers per slot.
    seglet_table: Box<[AtomicU32]>,
    per_segment: usize,
    segment_bytes: usize,
    free_slots: Mutex<Vec<u32>>,
}

impl Segments {
    pub fn new(pool: Pool, segment_bytes: usize) -> Segments {
        let seglet = pool.seglet_bytes();
        let per_segment = segment_bytes / seglet;
        // Every segment in memory holds at least one seglet, plus slack for
        // segments being built and dying.
        let nslots = (pool.total_seglets() as usize + 16).min(MAX_SLOTS - 1);
        let slots = (0..=nslots)
            .map(|_| SegmentSlot {
                id: AtomicU64::new(0),
                len: AtomicU32::new(0),
                seglets: AtomicU32::new(0),
                live_bytes: AtomicU64::new(0),
                tomb_bytes: AtomicU64::new(0),
                stream_bytes: AtomicU64::new(0),
                run_slack: AtomicU64::new(0),
                tomb_dead: AtomicU64::new(0),
                tomb_gen: AtomicU64::new(0),
                created_ms: AtomicU64::new(0),
                tomb_scanned_ms: AtomicU64::new(0),
                next_expiry: AtomicU64::new(u64::MAX),
                state: AtomicU8::new(0),
            })
            .collect();
        let seglet_table = (0..(nslots + 1) * per_segment).map(|_| AtomicU32::new(0)).collect();
        Segments {
            pool,
            slots,
            seglet_table,
            per_segment,
            segment_bytes,
            // Slot 0 is never used, so that no LogRef is zero.
            free_slots: Mutex::new((1..=nslots as u32).rev().collect()),
        }
    }

    pub fn segment_bytes(&self) -> usize {
        self.segment_bytes
    }

    pub fn slot(&self, slot: u32) -> &SegmentSlot {
        &self.slots[slot as usize]
    }

    /// Takes a free slot for a new segment.
    pub fn alloc_slot(&self, id: SegmentId, created_ms: u64, state: SlotState) -> u32 {
        let slot = self.free_slots.lock().pop().expect("segment slots exhausted (more segments than seglets)");
        let s = &self.slots[slot as usize];
        s.id.store(id.0, Ordering::Relaxed);
        s.len.store(0, Ordering::Relaxed);
        s.seglets.store(0, Ordering::Relaxed);
        s.live_bytes.store(0, Ordering::Relaxed);
        s.tomb_bytes.store(0, Ordering::Relaxed);
        s.stream_bytes.store(0, Ordering::Relaxed);
        s.run_slack.store(0, Ordering::Relaxed);
        s.tomb_dead.store(0, Ordering::Relaxed);
        s.tomb_gen.store(0, Ordering::Relaxed);
        s.created_ms.store(created_ms, Ordering::Relaxed);
        s.tomb_scanned_ms.store(created_ms, Ordering::Relaxed);
        s.next_expiry.store(u64::MAX, Ordering::Relaxed);
        s.set_state(state);
        slot
    }

    /// Returns a slot and its seglets to the free pools.
    ///
    /// Contract: the slot is unreachable (no hash table reference) and an
    /// epoch has passed since it became so.
    pub fn free_slot(&self, slot: u32) {
        let s = &self.slots[slot as usize];
        let n = s.seglets.swap(0, Ordering::AcqRel) as usize;
        let base = slot as usize * self.per_segment;
        self.pool.release((0..n).map(|i| self.seglet_table[base + i].load(Ordering::Relaxed)));
        s.len.store(0, Ordering::Relaxed);
        s.live_bytes.store(0, Ordering::Relaxed);
        s.tomb_bytes.store(0, Ordering::Relaxed);
        s.stream_bytes.store(0, Ordering::Relaxed);
        s.set_state(SlotState::Free);
        self.free_slots.lock().push(slot);
    }

    /// Gives `slot` enough seglets to hold `end` bytes, taking them from
    /// `spare` first and then from the pool at `tier`. False if the pool
    /// refused (nothing is lost: seglets taken stay with the slot).
    pub fn grow(&self, slot: u32, end: usize, spare: &mut Vec<u32>, tier: Tier) -> bool {
        debug_assert!(end <= self.segment_bytes);
        let s = &self.slots[slot as usize];
        let want = end.div_ceil(self.pool.seglet_bytes());
        let base = slot as usize * self.per_segment;
        let mut have = s.seglets.load(Ordering::Relaxed) as usize;
        while have < want {
            let g = match spare.pop().or_else(|| self.pool.alloc(tier)) {
                Some(g) => g,
                None => return false,
            };
            self.seglet_table[base + have].store(g, Ordering::Relaxed);
            have += 1;
            s.seglets.store(have as u32, Ordering::Release);
        }
        true
    }

    /// Writes bytes at `offset` of a segment being built (seglets already
    /// there: see [`grow`]). Does not publish them.
    pub fn write(&self, slot: u32, mut offset: usize, mut src: &[u8]) {
        let seglet = self.pool.seglet_bytes();
        let base = slot as usize * self.per_segment;
        while !src.is_empty() {
            let g = self.seglet_table[base + offset / seglet].load(Ordering::Relaxed);
            let within = offset % seglet;
            let n = src.len().min(seglet - within);
            self.pool.write(g, within, &src[..n]);
            src = &src[n..];
            offset += n;
        }
    }

    /// Makes bytes below `len` readable.
    pub fn publish(&self, slot: u32, len: usize) {
        self.slots[slot as usize].len.store(len as u32, Ordering::Release);
    }

    /// Calls `f` with each contiguous piece of `[offset, offset + len)`.
    /// Contract: the range is published and kept alive (epoch or lock).
    pub fn for_each_piece(&self, slot: u32, mut offset: usize, mut len: usize, mut f: impl FnMut(&[u8])) {
        let seglet = self.pool.seglet_bytes();
        let base = slot as usize * self.per_segment;
        while len > 0 {
            let g = self.seglet_table[base + offset / seglet].load(Ordering::Acquire);
            let within = offset % seglet;
            let n = len.min(seglet - within);
            f(self.pool.slice(g, within, n));
            offset += n;
            len -= n;
        }
    }

    /// The bytes `[offset, offset + len)`: borrowed when they lie in one
    /// seglet, copied otherwise. Same contract as [`for_each_piece`].
    pub fn bytes(&self, slot: u32, offset: usize, len: usize) -> Cow<'_, [u8]> {
        let seglet = self.pool.seglet_bytes();
        let within = offset % seglet;
        if within + len <= seglet {
            let g = self.seglet_table[slot as usize * self.per_segment + offset / seglet].load(Ordering::Acquire);
            return Cow::Borrowed(self.pool.slice(g, within, len));
        }
        let mut v = Vec::with_capacity(len);
        self.for_each_piece(slot, offset, len, |p| v.extend_from_slice(p));
        Cow::Owned(v)
    }

    /// Hints the CPU to load the start of the entry at `r` (a batch of
    /// entries read at random overlaps its cache misses this way).
    pub fn prefetch_entry(&self, r: LogRef) {
        #[cfg(target_arch = "x86_64")]
        {
            let b = self.bytes(r.slot(), r.offset() as usize, 1);
            // SAFETY: a prefetch is only a hint; it never faults, and `b`
            // points into the pool. SSE is part of the x86_64 baseline.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(b.as_ptr() as *const i8) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = r;
    }

    /// The whole entry at `r` (header and body). Same contract as
    /// [`for_each_piece`]; `r` must point at an entry start.
    pub fn entry(&self, r: LogRef) -> Cow<'_, [u8]> {
        let slot = r.slot();
        let off = r.offset() as usize;
        let len = self.slots[slot as usize].len.load(Ordering::Acquire) as usize;
        let hdr = self.bytes(slot, off, 4.min(len - off));
        let h = crate::format::read_header(&hdr).expect("log reference to a malformed entry");
        self.bytes(slot, off, h.total_len())
    }

    /// The entry header at `r` and the first `max` bytes of the entry (all
    /// of it if shorter), for readers that need only its fixed part: one
    /// look-up of the seglet and one parse of the header. Same contract as
    /// [`Segments::entry`].
    pub fn entry_prefix(&self, r: LogRef, max: usize) -> (crate::format::EntryHeader, Cow<'_, [u8]>) {
        let slot = r.slot();
        let off = r.offset() as usize;
        let len = self.slots[slot as usize].len.load(Ordering::Acquire) as usize;
        // The published bytes past the entry belong to later entries: read
        // with it, then cut off.
        let bytes = self.bytes(slot, off, max.min(len - off));
        let h = crate::format::read_header(&bytes).expect("log reference to a malformed entry");
        let n = h.total_len().min(bytes.len());
        let prefix = match bytes {
            Cow::Borrowed(b) => Cow::Borrowed(&b[..n]),
            Cow::Owned(mut v) => {
                v.truncate(n);
                Cow::Owned(v)
            }
        };
        (h, prefix)
    }

    /// Calls `f(offset, entry bytes)` for each entry of a segment, in place.
    /// Contract: as [`for_each_piece`], and the segment is well formed.
    pub fn for_each_entry(&self, slot: u32, mut f: impl FnMut(usize, &[u8])) {
        let len = self.slots[slot as usize].len.load(Ordering::Acquire) as usize;
        let mut off = 0;
        while off < len {
            let e = self.entry(LogRef::new(slot, off as u32));
            f(off, &e);
            off += e.len();
        }
    }

    /// A copy of a segment's published bytes.
    pub fn copy_segment(&self, slot: u32) -> Vec<u8> {
        let len = self.slots[slot as usize].len.load(Ordering::Acquire) as usize;
        self.bytes(slot, 0, len).into_owned()
    }
}
