//! The log: the head segment that takes appends, the side logs the cleaner
//! writes survivors through, the set of segments that make up the log, and
//! the observer that replication and recovery watch it through.
//!
//! Every append group ends with a checksum entry carrying the cumulative
//! CRC over the segment's entry headers (Tailwind), so the bytes of any
//! segment up to any group boundary are a verifiable prefix. A new head
//! starts with a segment header, a log digest naming every segment of the
//! log (itself included) and the safe version (Rumble §4.1).

use crate::format::{self, EntryType, HeaderCrc, CHECKSUM_ENTRY_BYTES};
use crate::pool::Tier;
use crate::segment::{LogRef, Segments, SlotState};
use parking_lot::Mutex;
use shoal_common::{LogId, SegmentId, Version};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Whether a segment is a log head or written by the cleaner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    Head,
    /// Written through a side log; joins the log when the cleaner splices it.
    Survivor,
}

/// How replication and recovery see the log. Every method is called in log
/// order for a given segment, while the log holds the lock that orders it,
/// so implementations must be quick and must not call back into the store.
pub trait LogObserver: Send + Sync {
    /// A segment was opened; its first bytes follow through `appended`.
    fn segment_opened(&self, _segment: SegmentId, _kind: SegmentKind) {}
    /// Bytes were appended at `offset`: exactly the bytes now in memory. One
    /// append group may arrive as several calls with consecutive offsets;
    /// each group ends with a checksum entry.
    fn appended(&self, _segment: SegmentId, _offset: u32, _bytes: &[u8]) {}
    /// A segment was closed at `len` bytes with this last checksum.
    fn segment_closed(&self, _segment: SegmentId, _len: u32, _checksum: u32) {}
    /// Survivor segments joined the log and cleaned segments left it; a new
    /// head whose digest says so has been opened (and announced) before
    /// this call. Replicas of `freed` may go once that digest is durable.
    fn segments_freed(&self, _survivors: &[SegmentId], _freed: &[SegmentId]) {}
    /// The entries of one append by a writer (not the cleaner's
    /// relocations), whole, after its group's `appended` calls: the
    /// position then covers them. One call per append, so that a write's
    /// object and the tombstone of the object it replaces are seen
    /// together. Symmetric caching watches its hot keys' writes here
    /// (`shoal-server`'s `sc`).
    fn entries_appended(&self, _entries: &mut dyn Iterator<Item = &[u8]>) {}
    /// The log position: how many bytes `appended` has been given so far,
    /// counting the bytes of a call before it returns. The store stamps it
    /// on the keys it writes ([`crate::Store::write_position`]) so that a
    /// reader can wait for its own key's last write instead of the whole
    /// log. An observer that keeps no position answers 0.
    fn position(&self) -> u64 {
        0
    }
}

/// One segment being written: the head, or a survivor of the cleaner.
pub(crate) struct SegmentWriter {
    pub slot: u32,
    pub id: SegmentId,
    pub len: usize,
    pub crc: HeaderCrc,
    /// Entries appended since the last checksum entry.
    pub unsealed: bool,
}

/// Returned when memory is short for an append; nothing was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSpace;

/// A group of complete, encoded entries to append together.
#[derive(Default)]
pub struct Batch {
    pub buf: Vec<u8>,
    pub ends: Vec<usize>,
}

impl Batch {
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    /// Records that the bytes appended to `buf` since the last call form one entry.
    pub fn mark(&mut self) {
        self.ends.push(self.buf.len());
    }

    fn entry(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }
}

struct HeadState {
    w: SegmentWriter,
    /// The segments of the log, by id, with their current slots.
    members: BTreeMap<SegmentId, u32>,
    /// Bytes of tombstones that name each segment of the log. All of them
    /// die when that segment leaves the log, so this is what cleaning it
    /// frees beyond its own dead bytes (the cleaner's benefit estimate).
    tomb_refs: HashMap<SegmentId, u64>,
}

pub struct Log {
    pub segs: Arc<Segments>,
    head: Mutex<HeadState>,
    observer: Option<Arc<dyn LogObserver>>,
    log_id: LogId,
    next_id: AtomicU64,
    /// No object version at or below this was ever removed without its
    /// removal being covered; new objects start here (RAMCloud's safe version).
    pub safe_version: AtomicU64,
    /// Bytes of tombstones appended and not yet known to be dead.
    pub tomb_bytes: AtomicU64,
    /// Segments in the log (kept for cheap statistics).
    pub members_count: AtomicU64,
    /// Tombstones (of objects and of chunks) appended so far.
    pub tombstones_appended: AtomicU64,
    /// The head's slot, for a writer's guess without the head lock
    /// ([`Log::head_slot`]).
    head_slot: AtomicU32,
    start: Instant,
}

impl Log {
    /// The observer's log position ([`LogObserver::position`]); 0 without one.
    pub fn position(&self) -> u64 {
        self.observer.as_ref().map_or(0, |o| o.position())
    }

    pub fn new(segs: Arc<Segments>, log_id: LogId, observer: Option<Arc<dyn LogObserver>>) -> Log {
        let start = Instant::now();
        let placeholder =
            SegmentWriter { slot: 0, id: SegmentId(0), len: 0, crc: HeaderCrc::default(), unsealed: false };
        let log = Log {
            segs,
            head: Mutex::new(HeadState { w: placeholder, members: BTreeMap::new(), tomb_refs: HashMap::new() }),
            observer,
            log_id,
            next_id: AtomicU64::new(1),
            safe_version: AtomicU64::new(1),
            tomb_bytes: AtomicU64::new(0),
            members_count: AtomicU64::new(0),
            tombstones_appended: AtomicU64::new(0),
            head_slot: AtomicU32::new(0),
            start,
        };
        {
            let mut h = log.head.lock();
            let mut spare = Vec::new();
            let ok = log.open_head(&mut h, &mut spare, Tier::Cleaner);
            assert!(ok, "memory too small for the first head segment");
        }
        log
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Raises the safe version to at least `v`.
    pub fn raise_safe_version(&self, v: Version) {
        self.safe_version.fetch_max(v.0, Ordering::AcqRel);
    }

    pub fn allocate_id(&self) -> SegmentId {
        SegmentId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Bytes a new head takes before its first object.
    fn head_overhead(members: usize) -> usize {
        format::SEGMENT_HEADER_BYTES
            + format::digest_len(members + 1)
            + format::SAFE_VERSION_BYTES
            + CHECKSUM_ENTRY_BYTES
    }

    /// Closes the current head (if any) and opens a new one. False if no
    /// seglet could be had at `tier` (the old head stays).
    fn open_head(&self, h: &mut HeadState, spare: &mut Vec<u32>, tier: Tier) -> bool {
        let need = Self::head_overhead(h.members.len());
        if spare.is_empty() && self.segs.pool.available(tier) < need.div_ceil(self.segs.pool.seglet_bytes()) {
            return false;
        }
        let id = self.allocate_id();
        let slot = self.segs.alloc_slot(id, self.now_ms(), SlotState::Head);
        let mut w = SegmentWriter { slot, id, len: 0, crc: HeaderCrc::default(), unsealed: false };
        if !self.segs.grow(slot, need, spare, tier) {
            self.segs.free_slot(slot);
            return false;
        }
        if h.w.slot != 0 {
            self.close(&mut h.w);
        }
        h.members.insert(id, slot);
        self.members_count.store(h.members.len() as u64, Ordering::Relaxed);
        let ids: Vec<SegmentId> = h.members.keys().copied().collect();
        let mut b = Batch::default();
        format::encode_segment_header(&mut b.buf, self.log_id, id, self.segs.segment_bytes() as u32);
        b.mark();
        format::encode_digest(&mut b.buf, &ids);
        b.mark();
        format::encode_safe_version(&mut b.buf, Version(self.safe_version.load(Ordering::Acquire)));
        b.mark();
        if let Some(o) = &self.observer {
            o.segment_opened(id, SegmentKind::Head);
        }
        self.write_group(&mut w, &b, 0..b.ends.len(), &mut Vec::new());
        self.head_slot.store(w.slot, Ordering::Relaxed);
        h.w = w;
        true
    }

    /// Marks a writer's segment closed and tells the observer.
    pub(crate) fn close(&self, w: &mut SegmentWriter) {
        debug_assert!(!w.unsealed);
        self.segs.slot(w.slot).set_state(SlotState::Closed);
        if let Some(o) = &self.observer {
            o.segment_closed(w.id, w.len as u32, w.crc.value());
        }
    }

    /// Appends entries `range` of `b` and a checksum entry to `w`, publishes
    /// them and tells the observer. Seglets must be available (see `grow`).
    /// Returns the offset of each entry.
    pub(crate) fn write_group(
        &self,
        w: &mut SegmentWriter,
        b: &Batch,
        range: std::ops::Range<usize>,
        refs: &mut Vec<LogRef>,
    ) {
        let start = w.len;
        for i in range {
            let e = b.entry(i);
            let h = format::read_header(e).expect("encoded entry");
            w.crc.add(&e[..h.header_len]);
            self.segs.write(w.slot, w.len, e);
            refs.push(LogRef::new(w.slot, w.len as u32));
            w.len += e.len();
            if h.entry_type.is_tombstone() {
                self.segs.slot(w.slot).tomb_bytes.fetch_add(e.len() as u64, Ordering::Relaxed);
                self.tomb_bytes.fetch_add(e.len() as u64, Ordering::Relaxed);
            }
            if h.entry_type == EntryType::StreamBatch {
                self.segs.slot(w.slot).stream_bytes.fetch_add(e.len() as u64, Ordering::Release);
            }
            self.note_expiry(w.slot, e, h.entry_type);
        }
        self.seal(w, start);
    }

    /// Lowers the segment's `next_expiry` to an object's expiry time (the
    /// expiry sweep's hint). Called for every entry written, before the
    /// segment can be seen by the sweep with it: under the head lock for a
    /// head, before the splice or slot replacement for the cleaner's.
    fn note_expiry(&self, slot: u32, e: &[u8], t: EntryType) {
        if t != EntryType::ObjectWithExpiry {
            return;
        }
        if let Ok(format::ObjectView { expiry: Some(at), .. }) = format::parse_object(e) {
            self.segs.slot(slot).next_expiry.fetch_min(at.0, Ordering::AcqRel);
        }
    }

    /// Appends one entry to a writer without sealing (the cleaner's path)
    /// and publishes it, so that a hash table reference to it may be stored.
    /// Seglets must be there (see `Segments::grow`).
    pub(crate) fn write_entry(&self, w: &mut SegmentWriter, e: &[u8]) -> LogRef {
        let h = format::read_header(e).expect("encoded entry");
        w.crc.add(&e[..h.header_len]);
        self.segs.write(w.slot, w.len, e);
        self.note_expiry(w.slot, e, h.entry_type);
        let r = LogRef::new(w.slot, w.len as u32);
        w.len += e.len();
        w.unsealed = true;
        self.segs.publish(w.slot, w.len);
        r
    }

    /// Ends the bytes written since `start` with a checksum entry, publishes
    /// them and tells the observer.
    pub(crate) fn seal(&self, w: &mut SegmentWriter, start: usize) {
        self.seal_quietly(w);
        if let Some(o) = &self.observer {
            let mut off = start;
            self.segs.for_each_piece(w.slot, start, w.len - start, |p| {
                o.appended(w.id, off as u32, p);
                off += p.len();
            });
        }
    }

    /// Seals without telling the observer (compacted segments, which
    /// backups never see).
    pub(crate) fn seal_quietly(&self, w: &mut SegmentWriter) {
        let tag = [EntryType::Checksum as u8];
        w.crc.add(&tag);
        let ck = format::checksum_entry(w.crc.value());
        self.segs.write(w.slot, w.len, &ck);
        w.len += ck.len();
        w.unsealed = false;
        self.segs.publish(w.slot, w.len);
    }

    /// Seglets needed to append `b` to the head as it is now, rolling to new
    /// heads where entries do not fit.
    fn plan(&self, h: &HeadState, b: &Batch) -> Result<usize, NoSpace> {
        let seg = self.segs.segment_bytes();
        let seglet = self.segs.pool.seglet_bytes();
        let mut need = 0;
        let mut len = h.w.len;
        let mut have = self.segs.slot(h.w.slot).seglets.load(Ordering::Relaxed) as usize * seglet;
        let mut members = h.members.len();
        let mut open = false;
        for i in 0..b.ends.len() {
            let n = b.entry(i).len();
            if len + n + CHECKSUM_ENTRY_BYTES > seg {
                if open {
                    len += CHECKSUM_ENTRY_BYTES;
                }
                need += len.saturating_sub(have).div_ceil(seglet);
                len = Self::head_overhead(members);
                members += 1;
                have = 0;
                if len + n + CHECKSUM_ENTRY_BYTES > seg {
                    return Err(NoSpace);
                }
            }
            len += n;
            open = true;
        }
        len += CHECKSUM_ENTRY_BYTES;
        need += len.saturating_sub(have).div_ceil(seglet);
        Ok(need)
    }

    /// Appends a batch to the head as one or more groups (a new group at
    /// each head roll), each ending with a checksum entry. All or nothing:
    /// on `NoSpace` nothing was appended.
    pub fn append(&self, b: &Batch, tier: Tier, refs: &mut Vec<LogRef>) -> Result<(), NoSpace> {
        let mut h = self.head.lock();
        self.append_locked(&mut h, b, tier, refs)
    }

    /// [`Log::append`] only if every entry of `b` lands in the segment in
    /// `slot`: that segment is the head and `b` fits in it. Ok(false),
    /// having appended nothing, if not. A write whose batch leaves out the
    /// tombstone of an object in `slot` appends it this way
    /// (`docs/cleaning.md`, "Overwrites in the head need no tombstone").
    pub fn append_within(&self, b: &Batch, tier: Tier, refs: &mut Vec<LogRef>, slot: u32) -> Result<bool, NoSpace> {
        let mut h = self.head.lock();
        // Entries only ever lengthen the segment, so the batch stays in the
        // head exactly when the whole of it fits with its checksum entry.
        if h.w.slot != slot || h.w.len + b.buf.len() + CHECKSUM_ENTRY_BYTES > self.segs.segment_bytes() {
            return Ok(false);
        }
        self.append_locked(&mut h, b, tier, refs).map(|()| true)
    }

    /// The head's slot as last seen: a guess unless the caller holds
    /// something that keeps the head from moving. [`Log::append_within`]
    /// checks it under the head lock.
    pub fn head_slot(&self) -> u32 {
        self.head_slot.load(Ordering::Relaxed)
    }

    fn append_locked(&self, h: &mut HeadState, b: &Batch, tier: Tier, refs: &mut Vec<LogRef>) -> Result<(), NoSpace> {
        let need = self.plan(h, b)?;
        let mut spare = Vec::with_capacity(need);
        for _ in 0..need {
            match self.segs.pool.alloc(tier) {
                Some(g) => spare.push(g),
                None => {
                    self.segs.pool.release(spare);
                    return Err(NoSpace);
                }
            }
        }
        let seg = self.segs.segment_bytes();
        let mut first = 0;
        let mut len = h.w.len;
        for i in 0..b.ends.len() {
            let n = b.entry(i).len();
            if len + n + CHECKSUM_ENTRY_BYTES > seg {
                if first < i {
                    let end = h.w.len
                        + (b.ends[i - 1] - if first == 0 { 0 } else { b.ends[first - 1] })
                        + CHECKSUM_ENTRY_BYTES;
                    let ok = self.segs.grow(h.w.slot, end, &mut spare, tier);
                    assert!(ok, "planned seglets missing");
                    let mut w = std::mem::replace(
                        &mut h.w,
                        SegmentWriter { slot: 0, id: SegmentId(0), len: 0, crc: HeaderCrc::default(), unsealed: false },
                    );
                    self.write_group(&mut w, b, first..i, refs);
                    h.w = w;
                }
                let ok = self.open_head(h, &mut spare, tier);
                assert!(ok, "planned seglets missing for a new head");
                first = i;
                len = h.w.len;
            }
            len += n;
        }
        let end = len + CHECKSUM_ENTRY_BYTES;
        let ok = self.segs.grow(h.w.slot, end, &mut spare, tier);
        assert!(ok, "planned seglets missing");
        let mut w = std::mem::replace(
            &mut h.w,
            SegmentWriter { slot: 0, id: SegmentId(0), len: 0, crc: HeaderCrc::default(), unsealed: false },
        );
        self.write_group(&mut w, b, first..b.ends.len(), refs);
        h.w = w;
        if !spare.is_empty() {
            self.segs.pool.release(spare);
        }
        if let Some(o) = &self.observer {
            o.entries_appended(&mut (0..b.ends.len()).map(|i| b.entry(i)));
        }
        for i in 0..b.ends.len() {
            let e = b.entry(i);
            if !matches!(EntryType::from_code(e[0] & 0x1f), Some(t) if t.is_tombstone()) {
                continue;
            }
            if let Ok((t, len)) = format::decode_trusted(e) {
                if let Some(seg) = t.tombstone_segment() {
                    *h.tomb_refs.entry(seg).or_default() += len as u64;
                    self.tombstones_appended.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Closes the head and opens a new one, whose id it returns: every entry
    /// appended from now on lands in that segment or a later one, and
    /// every segment opened from now on (a head or a cleaner's survivor)
    /// has a higher id. `NoSpace` if no seglet can be had at `tier` (the
    /// head stays).
    pub fn roll_head(&self, tier: Tier) -> Result<SegmentId, NoSpace> {
        let mut h = self.head.lock();
        if !self.open_head(&mut h, &mut Vec::new(), tier) {
            return Err(NoSpace);
        }
        Ok(h.w.id)
    }

    /// Runs `f` with no append in progress and none starting until it
    /// returns (the head lock held): a head's published length and
    /// `next_expiry` stay still. `f` must be quick and must not append.
    pub(crate) fn with_appends_paused<R>(&self, f: impl FnOnce() -> R) -> R {
        let _h = self.head.lock();
        f()
    }

    /// Bytes of tombstones naming each segment (see `HeadState::tomb_refs`).
    pub(crate) fn tomb_refs(&self) -> HashMap<SegmentId, u64> {
        self.head.lock().tomb_refs.clone()
    }

    /// Id and slot of the current head.
    pub fn head(&self) -> (SegmentId, u32) {
        let h = self.head.lock();
        (h.w.id, h.w.slot)
    }

    /// The segments of the log in id order, with their slots.
    pub fn members(&self) -> Vec<(SegmentId, u32)> {
        self.head.lock().members.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The slot of segment `id` if it is in the log now.
    pub(crate) fn slot_of(&self, id: SegmentId) -> Option<u32> {
        self.head.lock().members.get(&id).copied()
    }

    /// Opens a segment for the cleaner (a survivor, or a compaction target
    /// reusing `reuse_id`). It is not part of the log until spliced.
    /// Its first seglet comes from `spare` (the pass's reservation) when
    /// there is one. None only if no seglet can be had at all.
    pub(crate) fn open_side(
        &self,
        reuse_id: Option<SegmentId>,
        created_ms: u64,
        spare: &mut Vec<u32>,
    ) -> Option<SegmentWriter> {
        if spare.is_empty() && self.segs.pool.available(Tier::Cleaner) == 0 {
            return None;
        }
        let id = reuse_id.unwrap_or_else(|| self.allocate_id());
        let slot = self.segs.alloc_slot(id, created_ms, SlotState::Building);
        let mut w = SegmentWriter { slot, id, len: 0, crc: HeaderCrc::default(), unsealed: false };
        if reuse_id.is_none() {
            if let Some(o) = &self.observer {
                o.segment_opened(id, SegmentKind::Survivor);
            }
        }
        let mut b = Vec::new();
        format::encode_segment_header(&mut b, self.log_id, id, self.segs.segment_bytes() as u32);
        if !self.segs.grow(slot, b.len(), spare, Tier::Cleaner) {
            self.segs.free_slot(slot);
            return None;
        }
        self.write_entry(&mut w, &b);
        Some(w)
    }

    /// Replaces a compacted segment's slot (same id). Returns the old slot.
    pub(crate) fn replace_slot(&self, id: SegmentId, new_slot: u32) -> u32 {
        let mut h = self.head.lock();
        let old = h.members.insert(id, new_slot).expect("compacted segment not in the log");
        self.segs.slot(new_slot).set_state(SlotState::Closed);
        old
    }

    /// Seglets a new head needs before its first object, now.
    pub(crate) fn head_seglets(&self) -> usize {
        let members = self.head.lock().members.len();
        (Self::head_overhead(members) + 64 * 8).div_ceil(self.segs.pool.seglet_bytes())
    }

    /// Makes survivors part of the log and removes cleaned segments from it,
    /// by opening a new head (an emergency head if memory is short, from
    /// `spare`, which the cleaner reserved beforehand) whose digest says so.
    /// Returns the slots of the cleaned segments.
    pub(crate) fn splice(
        &self,
        survivors: &[(SegmentId, u32)],
        cleaned: &[SegmentId],
        mut spare: Vec<u32>,
    ) -> Vec<u32> {
        let mut h = self.head.lock();
        for (id, slot) in survivors {
            h.members.insert(*id, *slot);
            self.segs.slot(*slot).set_state(SlotState::Closed);
        }
        let mut slots = Vec::new();
        for id in cleaned {
            if let Some(s) = h.members.remove(id) {
                slots.push(s);
            }
            h.tomb_refs.remove(id);
        }
        self.members_count.store(h.members.len() as u64, Ordering::Relaxed);
        let ok = self.open_head(&mut h, &mut spare, Tier::Cleaner);
        assert!(ok, "the cleaner's reserved seglets did not hold a new head");
        self.segs.pool.release(spare);
        if let Some(o) = &self.observer {
            let ids: Vec<SegmentId> = survivors.iter().map(|s| s.0).collect();
            o.segments_freed(&ids, cleaned);
        }
        slots
    }

    /// Ids currently in the log, and the highest id ever allocated: an id
    /// above it did not exist when the snapshot was taken.
    pub(crate) fn membership(&self) -> (std::collections::HashSet<SegmentId>, SegmentId) {
        let h = self.head.lock();
        (h.members.keys().copied().collect(), SegmentId(self.next_id.load(Ordering::Relaxed)))
    }
}
