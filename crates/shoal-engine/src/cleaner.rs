//! The two-level cleaner (Rumble Ch. 4, 5, 7).
//!
//! * **Segment compaction** rewrites one segment in memory under the same
//!   segment id, keeping its live objects and live tombstones and dropping
//!   everything else; it frees seglets and does no I/O (backups keep the
//!   original). Selection is greedy: the best ratio of freeable seglets to
//!   live bytes.
//! * **Combined cleaning** picks segments by cost-benefit with segment age,
//!   `(1 - u) * age / (1 + u)` (Rumble eq. 7.3), relocates their live entries
//!   oldest segment first into survivor segments written through a side log,
//!   and splices the survivors in with a new head whose log digest drops the
//!   cleaned segments; the observer is told which segments were freed.
//! * **The balancer** runs combined cleaning when tombstones believed live
//!   reach `max_tombstone_ratio` of the freeable memory, or when compaction
//!   freed nothing; compaction otherwise.
//! * **When**: whenever free seglets F <= min(0.1, (1 - L) / 2), L being the
//!   fraction of memory in live objects, or a write is waiting for memory.
//!
//! * **Eviction** (cache mode, `StoreConfig::eviction`): when live objects
//!   fill more than `EVICT_ABOVE` of the memory, or cleaning frees nothing,
//!   a combined pass takes the *oldest* segments and drops their live
//!   objects instead of relocating them (their tombstones are relocated as
//!   usual). Dropping a segment whole costs no copying, which is why a log
//!   evicts cheaply where a heap must free object by object. The objects
//!   stay readable until the splice's new head (whose digest drops their
//!   segments) is open, then leave the hash table (`Evicting`).
//!
//! Every pass pre-allocates from the cleaner's reserve all the seglets it
//! can need, and each pass frees more than it takes, so cleaning cannot
//! deadlock. Freed segments are reclaimed after an epoch.
//!
//! **Expired objects are dropped, not relocated** (both kinds of pass): the
//! hash table forgets the object (under its stripe lock, with the safe
//! version raised above it) and no tombstone is written. This is safe
//! because neither the object nor an older version of its key can come
//! back at a recovery:
//! * The object itself may survive on backups (the original replica of a
//!   compacted segment, or of a segment whose freeing is not yet durable).
//!   A replay that meets it finds it expired, since expiry times are
//!   absolute, and treats it as a tombstone of its key up to its version
//!   (`Store::replay_entries`). A newer object of the key outranks it:
//!   the raised safe version gives every later write a higher version.
//! * Every older version of the key was superseded by a write or a remove
//!   that appended a tombstone naming the older version's segment, and the
//!   cleaner keeps a tombstone while the segment it names is in the log
//!   (`Membership::tombstone_live`); or by an overwrite into the head that
//!   held it, which left its tombstone out (`docs/cleaning.md`,
//!   "Overwrites in the head need no tombstone"), and then the older
//!   version is present only while the newer one is beside it in that
//!   segment's replica. So each older version is either gone with its
//!   segment or still covered by its tombstone or by the newer version
//!   beside it (which a replay finds expired, a tombstone of its key);
//!   dropping the newest version from memory touches none of these. (A
//!   combined pass that cleans the older version's segment together with
//!   the tombstone's drops both in the same splice.)
//!
//! Expiry here is by the store's clock at the start of the segment's
//! relocation; an object that expires during it is relocated.

use crate::cidtable::{ChunkAt, Slot};
use crate::config::{EVICT_ABOVE, EVICT_TO};
use crate::format::{self, Entry, CHECKSUM_ENTRY_BYTES};
use crate::log::SegmentWriter;
use crate::pool::Tier;
use crate::segment::{LogRef, SlotState};
use crate::store::Inner;
use parking_lot::{Condvar, Mutex, MutexGuard};
use shoal_common::{key_hash, ChunkId, SegmentId, TableId, Version};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Scan one segment for dead tombstones every this many passes (Rumble §4.2.2).
const TOMBSTONE_SCAN_EVERY: u64 = 5;
/// Segments above this utilisation are never combined-cleaned (Rumble §4.5).
const MAX_CLEANABLE_UTILISATION: f64 = 0.98;
/// Entries whose buckets the cleaner prefetches before looking them up.
const RELOCATION_BATCH: usize = 16;
/// Most segments one combined pass cleans.
const MAX_SOURCES: usize = 64;
/// Most times one combined pass chooses again after losing the seglets it
/// chose for to a growing head.
const SPLICE_ATTEMPTS: usize = 4;

#[derive(Default)]
pub(crate) struct CleanerState {
    /// Held for the whole of a pass; `pause` takes it.
    pass: Mutex<()>,
    requested: Mutex<bool>,
    wake: Condvar,
    /// Pass number at which the cleaner last found nothing to free while
    /// memory was short; writers waiting then give up.
    pub stuck_at: AtomicU64,
    last_compaction_failed: AtomicBool,
    passes: AtomicU64,
    /// Cache mode: whether full memory evicts ([`crate::Eviction::Oldest`]);
    /// starts as `StoreConfig::eviction`, changed by `Store::set_eviction`.
    pub evicting: AtomicBool,
    /// Combined passes done: tombstones die only when one splices, so a
    /// segment scanned since the last one has no newly dead tombstones.
    splices: AtomicU64,
    /// (appended bytes, live bytes) when a pass made for the target last
    /// freed nothing: [`stalled`].
    stalled: Mutex<Option<(u64, u64)>>,
}

impl CleanerState {
    pub fn new(eviction: crate::Eviction) -> CleanerState {
        CleanerState { evicting: AtomicBool::new(eviction != crate::Eviction::None), ..Default::default() }
    }

    /// Keeps the cleaner from starting a pass while the guard lives.
    pub fn pause(&self) -> MutexGuard<'_, ()> {
        self.pass.lock()
    }
}

/// Fraction of memory in live objects, and in free seglets.
fn fractions(inner: &Inner) -> (f64, f64) {
    let pool = &inner.segs.pool;
    let memory = (pool.total_seglets() as usize * pool.seglet_bytes()) as f64;
    let live = (inner.counters.live_bytes.load(Ordering::Relaxed) + inner.streams.bytes.load(Ordering::Relaxed)) as f64
        / memory;
    let free = pool.free_seglets() as f64 / pool.total_seglets() as f64;
    (live, free)
}

/// Free seglets F <= min(0.1, (1 - L) / 2): writes will soon wait.
fn memory_short(inner: &Inner) -> bool {
    let (l, f) = fractions(inner);
    f <= (0.1f64).min((1.0 - l) / 2.0)
}

fn should_clean(inner: &Inner) -> bool {
    memory_short(inner) || below_target(inner)
}

/// Whether the log holds more memory than its live objects need at the
/// target utilisation (`StoreConfig::target_utilisation`) plus its slack
/// ([`target_excess`]), and the cleaner has not given up on that since
/// the log last changed ([`CleanerState::stalled`]).
fn below_target(inner: &Inner) -> bool {
    target_excess(inner) > 1.0 && !stalled(inner)
}

/// Memory in use over what the live objects need at the target
/// utilisation plus [`target_slack`]: above 1, the log is below its
/// target. 0 while the target is off.
fn target_excess(inner: &Inner) -> f64 {
    let target = inner.config.target_utilisation;
    if target <= 0.0 {
        return 0.0;
    }
    let pool = &inner.segs.pool;
    let in_use = ((pool.total_seglets() as usize - pool.free_seglets()) * pool.seglet_bytes()) as f64;
    // Live objects only: tombstones are garbage in waiting, which combined
    // cleaning removes (their segments leave the log).
    let need = inner.counters.live_bytes.load(Ordering::Relaxed) as f64 / target;
    in_use / (need + target_slack(inner, need))
}

/// What the log may hold beyond `need` (its live objects at the target
/// utilisation) before it is cleaned for the target: an eighth of `need`,
/// at least [`MIN_SLACK_BYTES`], at most two segments. In bytes, not
/// segments, so that a store holding a few KB is cleaned down to a few
/// MiB (its head rolled early, [`roll_dead_head`]) instead of being left
/// with whole segments of dead objects.
fn target_slack(inner: &Inner, need: f64) -> f64 {
    let two_segments = 2.0 * inner.segs.segment_bytes() as f64;
    (need / 8.0).max(MIN_SLACK_BYTES as f64).min(two_segments)
}

/// [`target_slack`]'s least slack: one huge page, the unit memory goes
/// back to the OS in.
const MIN_SLACK_BYTES: usize = 2 << 20;

/// Whether the last pass made for the target freed nothing, and nothing
/// has changed since that could let the next one do better: no append of
/// [`STALL_RETRY_BYTES`] and no change of the live bytes (a drop or a
/// remove). Keeps a log that cannot get nearer its target from being
/// scanned twice a second for nothing.
fn stalled(inner: &Inner) -> bool {
    let s = inner.cleaner.stalled.lock();
    s.is_some_and(|(appended, live)| {
        inner.counters.appended_bytes.load(Ordering::Relaxed) < appended + STALL_RETRY_BYTES
            && inner.counters.live_bytes.load(Ordering::Relaxed) == live
    })
}

/// Appends after which a stalled cleaner looks at the target again.
const STALL_RETRY_BYTES: u64 = 256 << 10;

/// How long the cleaner rests after a pass made only for the target
/// utilisation that took `took`. Near the target it rests as long as the
/// pass took (at most half a core goes to cleaning; memory converges more
/// slowly instead). Further above it, writes are outpacing the resting
/// cleaner and memory would grow towards `--memory`, so it rests less,
/// then not at all: resident memory follows the data at the price of a
/// core while the writes last.
fn rest_after(excess: f64, took: Duration) -> Duration {
    if excess < REST_FULL_BELOW {
        took
    } else if excess < REST_NONE_ABOVE {
        took / 4
    } else {
        Duration::ZERO
    }
}

/// [`rest_after`]'s bounds on [`target_excess`].
const REST_FULL_BELOW: f64 = 1.1;
const REST_NONE_ABOVE: f64 = 1.25;

/// A log of at most this many segments in use is small: its writers wake
/// the cleaner when it passes its target ([`maybe_wake`]), since its
/// garbage is mostly in a head that fills in a fraction of the cleaner's
/// one-second look.
const SMALL_LOG_SEGMENTS: usize = 4;

/// The least a head must hold for [`roll_dead_head`] to close it early:
/// 1 MiB, or an eighth of a segment if that is less.
fn roll_min_bytes(inner: &Inner) -> usize {
    (1 << 20).min(inner.segs.segment_bytes() / 8)
}

/// When a pass left the log above its target having found nothing to
/// free, or in a small log ([`SMALL_LOG_SEGMENTS`]), what is dead is in
/// the head, which no pass may clean (a store of a few keys set and
/// deleted over and over): closes the head early, a short segment that
/// the next pass can clean, if it holds at least [`roll_min_bytes`] and
/// more than half of it is dead objects or tombstones. The segment is
/// closed as any full head is (replicated, its digest written by the next
/// head), so nothing about recovery changes; the cost is one more segment
/// id and replica. Returns whether it rolled.
fn roll_dead_head(inner: &Inner) -> bool {
    let (_, slot) = inner.log.head();
    let s = inner.segs.slot(slot);
    let len = s.len.load(Ordering::Acquire) as usize;
    let live = s.live_bytes.load(Ordering::Relaxed) as usize;
    if len < roll_min_bytes(inner) || 2 * live > len {
        return false;
    }
    let rolled = inner.log.roll_head(Tier::Write).is_ok();
    if rolled {
        inner.counters.heads_rolled.fetch_add(1, Ordering::Relaxed);
    }
    rolled
}

/// Free seglets kept resident when wholly free regions are given back to
/// the OS: a quarter of the memory in use, at most a segment's worth (the
/// lowest free regions, handed out first), so that a burst of writes or a
/// cleaning pass does not fault pages in, while a small store keeps none
/// beyond its own. (The reserves need not be resident: a seglet given back
/// is still free, and is faulted in when next written.)
fn warm_seglets(inner: &Inner) -> usize {
    let pool = &inner.segs.pool;
    let in_use = pool.total_seglets() as usize - pool.free_seglets();
    (in_use / 4).min(inner.config.seglets_per_segment())
}

/// Gives free memory beyond [`warm_seglets`] back to the OS, unless the
/// pool is meant to be resident (`StoreConfig::prefault`) or the target
/// utilisation is off.
pub(crate) fn trim(inner: &Inner) {
    if !inner.config.prefault && inner.config.target_utilisation > 0.0 {
        let n = inner.segs.pool.trim(warm_seglets(inner));
        if n > 0 {
            inner.counters.seglets_returned.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

/// Wakes the cleaner if memory is low, or if a small log has passed its
/// target (checked once per [`SMALL_LOG_WAKE_BYTES`] of appends: `before`
/// and `after` are the store's appended bytes around this append). Cheap:
/// a few atomic loads. (A larger log is looked at by the cleaner on its
/// own, within a second: its writes do not wake it for the target.)
pub(crate) fn maybe_wake(inner: &Inner, before: u64, after: u64) {
    if !inner.config.cleaner_thread {
        return;
    }
    if memory_short(inner) {
        request(inner);
    } else if before / SMALL_LOG_WAKE_BYTES != after / SMALL_LOG_WAKE_BYTES && small_log_below_target(inner) {
        // Not `request`: a woken cleaner still rests as the target asks.
        nudge(inner);
    }
}

/// Appends between two looks of the writers at a small log's target.
const SMALL_LOG_WAKE_BYTES: u64 = 256 << 10;

fn small_log_below_target(inner: &Inner) -> bool {
    small_log(inner) && below_target(inner)
}

/// Whether at most [`SMALL_LOG_SEGMENTS`] segments of memory are in use,
/// with the target utilisation on.
fn small_log(inner: &Inner) -> bool {
    let pool = &inner.segs.pool;
    let in_use = pool.total_seglets() as usize - pool.free_seglets();
    inner.config.target_utilisation > 0.0 && in_use <= SMALL_LOG_SEGMENTS * inner.config.seglets_per_segment()
}

/// Wakes the cleaner thread to look at what it might do (the hash table's
/// growth), without asking it to clean.
pub(crate) fn nudge(inner: &Inner) {
    // Under the lock the cleaner checks its conditions under, so that the
    // wake-up is not lost between its check and its wait.
    let _req = inner.cleaner.requested.lock();
    inner.cleaner.wake.notify_one();
}

pub(crate) fn request(inner: &Inner) {
    *inner.cleaner.requested.lock() = true;
    inner.cleaner.wake.notify_one();
}

/// The cleaner thread.
pub(crate) fn run(inner: std::sync::Arc<Inner>) {
    loop {
        let asked = {
            let mut req = inner.cleaner.requested.lock();
            while !*req && !inner.shutdown.load(Ordering::Acquire) && !should_clean(&inner) && !hash_table_work(&inner)
            {
                inner.cleaner.wake.wait_for(&mut req, Duration::from_secs(1));
            }
            std::mem::replace(&mut *req, false)
        };
        if inner.shutdown.load(Ordering::Acquire) {
            return;
        }
        if grow_hash_table(&inner) && !asked && !should_clean(&inner) {
            // Woken for the hash table only.
            continue;
        }
        // Cleaning only for the target utilisation (memory is not short and
        // no write waits) yields: after each such pass the cleaner rests
        // (see `rest_after`), so it takes at most half a core from the
        // requests while the log is near its target.
        let for_target_only = !memory_short(&inner) && !*inner.cleaner.requested.lock();
        let started = Instant::now();
        let mut freed = run_pass(&inner, false);
        if (freed == 0 || small_log(&inner)) && below_target(&inner) && roll_dead_head(&inner) {
            freed += run_pass(&inner, false);
        }
        if freed == 0 && for_target_only {
            *inner.cleaner.stalled.lock() = Some((
                inner.counters.appended_bytes.load(Ordering::Relaxed),
                inner.counters.live_bytes.load(Ordering::Relaxed),
            ));
        } else if freed > 0 {
            *inner.cleaner.stalled.lock() = None;
        }
        trim(&inner);
        let rest = rest_after(target_excess(&inner), started.elapsed());
        if for_target_only && freed > 0 && !rest.is_zero() {
            let mut req = inner.cleaner.requested.lock();
            if !*req && !inner.shutdown.load(Ordering::Acquire) {
                inner.cleaner.wake.wait_for(&mut req, rest);
            }
        }
        if freed == 0 {
            // Nothing to gain now: wait to be asked again rather than spin.
            let mut req = inner.cleaner.requested.lock();
            if !*req && !inner.shutdown.load(Ordering::Acquire) {
                inner.cleaner.wake.wait_for(&mut req, Duration::from_millis(500));
            }
        }
    }
}

/// The cleaner thread's share of the hash table's growth: moves the
/// stripes the writers have not moved yet (they move one each after their
/// writes), then frees the tables grown out of once no reader can hold
/// them. Returns whether there was work; if a stripe was locked, waits a
/// millisecond for it rather than spin.
fn grow_hash_table(inner: &Inner) -> bool {
    if !hash_table_work(inner) {
        return false;
    }
    let mut moved = 0;
    loop {
        // Pinned while a table is resolved (a growth may retire it), not
        // across the synchronisation below.
        let _g = inner.epochs.pin();
        let objects = inner.counters.objects.load(Ordering::Relaxed);
        // Writers waiting for memory come first: at most 64 stripes at a
        // time then (a growth of a large table is seconds of work).
        if !inner.ht.maintain(objects, |r| inner.hash_of(r), |r| inner.segs.prefetch_entry(r))
            || (moved >= 64 && memory_short(inner))
        {
            break;
        }
        moved += 1;
    }
    let unfinished = {
        let _g = inner.epochs.pin();
        inner.ht.growth_in_progress()
    };
    if unfinished {
        std::thread::sleep(Duration::from_millis(1));
    }
    let old_tables = inner.ht.take_retired();
    if !old_tables.is_empty() {
        // Only one thread synchronises at a time: the one holding the pass.
        let _pass = inner.cleaner.pass.lock();
        inner.epochs.synchronize();
        drop(old_tables);
    }
    true
}

/// Whether the hash table has growth work or grown-out tables to free.
fn hash_table_work(inner: &Inner) -> bool {
    let _g = inner.epochs.pin();
    inner.ht.needs_work(inner.counters.objects.load(Ordering::Relaxed))
}

/// One cleaner pass, chosen by the balancer. Returns seglets freed. Wakes
/// writers waiting for memory.
pub(crate) fn run_pass(inner: &Inner, force_combined: bool) -> usize {
    let freed = {
        let _pass = inner.cleaner.pass.lock();
        let started = Instant::now();
        let passes = inner.cleaner.passes.fetch_add(1, Ordering::Relaxed) + 1;
        if passes.is_multiple_of(TOMBSTONE_SCAN_EVERY) {
            scan_tombstones(inner);
        }
        let (l, _) = fractions(inner);
        let memory = (inner.segs.pool.total_seglets() as usize * inner.segs.pool.seglet_bytes()) as f64;
        let t = inner.log.tomb_bytes.load(Ordering::Relaxed) as f64 / memory;
        // A small log is cleaned by combined passes: they are cheap there
        // (a few segments, little live data) and free whole segments, their
        // tombstones included, where compaction frees scattered seglets and
        // keeps every tombstone naming the segment compacted.
        let combined_first = force_combined
            || small_log(inner)
            || t / (1.0 - l).max(1e-9) >= inner.config.max_tombstone_ratio
            || inner.cleaner.last_compaction_failed.load(Ordering::Relaxed);
        let caching = inner.cleaner.evicting.load(Ordering::Relaxed);
        let evict_first = caching && l > EVICT_ABOVE;
        let mut freed = if evict_first { evict(inner).freed } else { 0 };
        if freed == 0 && !combined_first {
            freed = compact(inner);
            inner.cleaner.last_compaction_failed.store(freed == 0, Ordering::Relaxed);
        }
        if freed == 0 {
            let c = combined(inner);
            freed = c.freed;
            if c.tombstones_killed > 0 {
                // The tombstones it killed sit in other segments: find them
                // and compact them away now.
                refresh_tombstones(inner, 8 * inner.segs.segment_bytes());
                for _ in 0..MAX_SOURCES {
                    let f = compact(inner);
                    if f == 0 {
                        break;
                    }
                    freed += f;
                }
            }
            if freed > 0 {
                inner.cleaner.last_compaction_failed.store(false, Ordering::Relaxed);
            }
        }
        if freed == 0 && caching && !evict_first {
            // Cleaning freed nothing (memory full of live data): a cache
            // evicts rather than refuse the write.
            freed = evict(inner).freed;
        }
        inner.counters.cleaning_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        inner.counters.seglets_freed.fetch_add(freed as u64, Ordering::Relaxed);
        freed
    };
    let mut passes = inner.space.0.lock();
    *passes += 1;
    if freed == 0 && inner.segs.pool.available(Tier::Write) == 0 {
        inner.cleaner.stuck_at.store(*passes, Ordering::Release);
    }
    inner.space.1.notify_all();
    freed
}

/// Closed segments of the log that may be cleaned: (id, slot). A segment
/// holding a stream batch is never cleaned (stream data is append-only,
/// and its index's references must not move: `store/streams.rs`).
fn candidates(inner: &Inner) -> Vec<(SegmentId, u32)> {
    let (_, head_slot) = inner.log.head();
    inner
        .log
        .members()
        .into_iter()
        .filter(|(_, s)| {
            let slot = inner.segs.slot(*s);
            *s != head_slot && slot.state() == SlotState::Closed && slot.stream_bytes.load(Ordering::Acquire) == 0
        })
        .collect()
}

/// Takes `n` seglets from the cleaner's tier, or none.
fn reserve(inner: &Inner, n: usize) -> Option<Vec<u32>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        match inner.segs.pool.alloc(Tier::Cleaner) {
            Some(g) => v.push(g),
            None => {
                inner.segs.pool.release(v);
                return None;
            }
        }
    }
    Some(v)
}

/// Liveness of tombstones: a snapshot of the log's segment ids, less the
/// segments this pass is cleaning (they leave the log in the same splice
/// that adds the survivors, so a tombstone naming one of them is not needed
/// in a survivor).
struct Membership {
    ids: HashSet<SegmentId>,
    newest: SegmentId,
}

impl Membership {
    fn take(inner: &Inner, leaving: &[SegmentId]) -> Membership {
        let (mut ids, newest) = inner.log.membership();
        for id in leaving {
            ids.remove(id);
        }
        Membership { ids, newest }
    }

    /// A tombstone is live while the segment it names is in the log (ids
    /// created after the snapshot are in the log by definition).
    fn tombstone_live(&self, seg: SegmentId) -> bool {
        seg >= self.newest || self.ids.contains(&seg)
    }
}

/// Where relocated entries go.
trait Target {
    /// The writer that takes the next entry of `len` bytes.
    fn writer(&mut self, inner: &Inner, len: usize, spare: &mut Vec<u32>) -> &mut SegmentWriter;
}

/// Compaction: one segment, same id.
struct Compacted(SegmentWriter);

impl Target for Compacted {
    fn writer(&mut self, inner: &Inner, len: usize, _: &mut Vec<u32>) -> &mut SegmentWriter {
        // Relocation never writes more than it moves, so the survivor fits
        // in the segment's own size; overrunning it would write into the
        // next slot's seglets.
        assert!(
            self.0.len + len + CHECKSUM_ENTRY_BYTES <= inner.segs.segment_bytes(),
            "compaction overran its segment"
        );
        &mut self.0
    }
}

/// Combined cleaning: survivor segments from the side log, a new one
/// whenever the current one is full.
struct Survivors {
    done: Vec<SegmentWriter>,
    current: Option<SegmentWriter>,
    created_ms: u64,
}

impl Target for Survivors {
    fn writer(&mut self, inner: &Inner, len: usize, spare: &mut Vec<u32>) -> &mut SegmentWriter {
        let seg_bytes = inner.segs.segment_bytes();
        if self.current.as_ref().is_some_and(|w| w.len + len + CHECKSUM_ENTRY_BYTES > seg_bytes) {
            let mut w = self.current.take().expect("current survivor");
            finish_survivor(inner, &mut w, spare);
            self.done.push(w);
        }
        let created = self.created_ms;
        self.current
            .get_or_insert_with(|| inner.log.open_side(None, created, spare).expect("cleaner reserve holds a survivor"))
    }
}

/// Copies the live entries of the segment in `slot` into `target`'s
/// writers. Returns (live object bytes, live tombstone bytes) copied.
fn relocate_segment(
    inner: &Inner,
    slot: u32,
    members: &Membership,
    spare: &mut Vec<u32>,
    target: &mut dyn Target,
    mut evicting: Option<&mut Evicting>,
) -> (u64, u64) {
    let seg_bytes = inner.segs.segment_bytes();
    let (mut objs, mut tombs) = (0u64, 0u64);
    let end_of_segment = inner.segs.slot(slot).len.load(Ordering::Acquire) as usize;
    // Read at the first object with an expiry.
    let mut now = None;
    let mut off = 0;
    // Entries are handled in batches: first every object's key hash is
    // computed and its bucket prefetched, then each is looked up.
    let mut batch: Vec<(usize, u64)> = Vec::with_capacity(RELOCATION_BATCH);
    let mut singles: Vec<Single> = Vec::new();
    while off < end_of_segment {
        batch.clear();
        while off < end_of_segment && batch.len() < RELOCATION_BATCH {
            // The segment is closed and only this pass frees it: its bytes
            // are stable, so entries are read in place (copied only when
            // they straddle seglets).
            let raw = inner.segs.entry(LogRef::new(slot, off as u32));
            let hash = match format::decode_trusted(&raw) {
                Ok((Entry::Object(o), _)) => key_hash(o.table, o.key).0,
                // Chunks are found by id (no prefetch); the rest are not indexed.
                Ok(_) => 0,
                Err(e) => panic!("segment in slot {slot} is corrupt in memory at {off}: {e}"),
            };
            if hash != 0 {
                inner.ht.prefetch(hash);
            }
            batch.push((off, hash));
            off += raw.len();
        }
        for &(at, hash) in &batch {
            let raw = inner.segs.entry(LogRef::new(slot, at as u32));
            let raw = &raw[..];
            let len = raw.len();
            match format::decode_trusted(raw).expect("decoded above").0 {
                Entry::Object(o) => {
                    let old = LogRef::new(slot, at as u32);
                    let _lock = inner.ht.lock(hash);
                    let Some((pos, _)) = inner.ht.find(hash, |r| r == old) else {
                        continue;
                    };
                    if o.expiry.is_some() && o.expired_at(*now.get_or_insert_with(|| inner.now())) {
                        // Dropped instead of relocated (see the module comment).
                        inner.uninstall(o.table, hash, inner.found_at(pos, old, &o, len));
                        inner.counters.expired_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if let Some(e) = evicting.as_deref_mut() {
                        // Left installed until the splice (see `Evicting`).
                        e.objects.push((hash, old));
                        e.max_version = e.max_version.max(o.version);
                        continue;
                    }
                    let w = target.writer(inner, len, spare);
                    let end = (w.len + len + CHECKSUM_ENTRY_BYTES).min(seg_bytes);
                    assert!(inner.segs.grow(w.slot, end, spare, Tier::Cleaner), "cleaner reserve exhausted");
                    let new = inner.log.write_entry(w, raw);
                    inner.ht.set(pos, hash, new);
                    inner.segs.slot(slot).live_bytes.fetch_sub(len as u64, Ordering::Relaxed);
                    inner.segs.slot(w.slot).live_bytes.fetch_add(len as u64, Ordering::Relaxed);
                    objs += len as u64;
                }
                Entry::Chunk(c) => {
                    // Live exactly when its CID table slot points here.
                    let old = ChunkAt::entry(LogRef::new(slot, at as u32));
                    let _lock = inner.cids.lock(c.id);
                    if inner.cids.live_ref(c.id) != Some(old) {
                        continue;
                    }
                    if let Some(e) = evicting.as_deref_mut() {
                        // As objects: left installed until the splice.
                        e.chunks.push((c.id, old));
                        continue;
                    }
                    // Moved after the other entries, packed into runs with
                    // the chunks like it (`pack_chunks`).
                    singles.push(Single {
                        at: at as u32,
                        id: c.id,
                        table: c.table,
                        version: c.version,
                        len: c.payload.len(),
                    });
                }
                Entry::ChunkRun(run) => {
                    // Each record is live exactly when its id's slot points
                    // at it. Nothing new comes to point into a segment being
                    // cleaned, so the records that do not are skipped
                    // without locks; those that do are checked again under
                    // their stripe locks.
                    let old = LogRef::new(slot, at as u32);
                    let h = run.header;
                    let here = |i: usize| inner.cids.live_ref(run.id(i)) == Some(ChunkAt { r: old, index: i as u16 });
                    let candidates: Vec<usize> = (0..h.count).filter(|&i| here(i)).collect();
                    if candidates.is_empty() {
                        continue;
                    }
                    let _locks = inner.cids.lock_many(candidates.iter().map(|&i| run.id(i)));
                    let live: Vec<usize> = candidates.into_iter().filter(|&i| here(i)).collect();
                    if live.is_empty() {
                        continue;
                    }
                    if let Some(e) = evicting.as_deref_mut() {
                        e.chunks.extend(live.iter().map(|&i| (run.id(i), ChunkAt { r: old, index: i as u16 })));
                        continue;
                    }
                    // A fully live run moves whole, byte for byte. A run
                    // with a dead record is written again as the run of
                    // its live records, even where that is larger (the
                    // live ids may need wider distances): a dead record
                    // carried into another segment would outlive the
                    // tombstone that keeps it dead, which names the
                    // segment it died in, and come back in a replay.
                    // The growth is bounded (`relocation_slack`) and
                    // reserved for (`relocation_bound`).
                    let mut rewritten = Vec::new();
                    if live.len() < h.count {
                        if let Err(e) = format::decode(raw) {
                            // The records kept get a new CRC: the old one is
                            // checked first, so that a corruption in memory
                            // is not sealed in.
                            panic!("segment in slot {slot} is corrupt in memory at {at}: {e}");
                        }
                        let records: Vec<(u64, &[u8])> =
                            live.iter().map(|&i| (run.id(i).local(), run.chunk(i).payload)).collect();
                        format::encode_chunk_run(&mut rewritten, h.table, h.node, h.version, &records);
                    }
                    let whole = rewritten.is_empty();
                    let bytes: &[u8] = if whole { raw } else { &rewritten };
                    let nh = if whole { h } else { format::parse_chunk_run_header(bytes).expect("a run just written") };
                    let w = target.writer(inner, bytes.len(), spare);
                    let end = (w.len + bytes.len() + CHECKSUM_ENTRY_BYTES).min(seg_bytes);
                    assert!(inner.segs.grow(w.slot, end, spare, Tier::Cleaner), "cleaner reserve exhausted");
                    let new = inner.log.write_entry(w, bytes);
                    let (mut before, mut after) = (0u64, 0u64);
                    for (k, &i) in live.iter().enumerate() {
                        let index = if whole { i } else { k };
                        inner.cids.set(run.id(i), Slot::Live(ChunkAt { r: new, index: index as u16 }));
                        before += h.record_bytes(i) as u64;
                        after += nh.record_bytes(index) as u64;
                    }
                    inner.segs.slot(slot).live_bytes.fetch_sub(before, Ordering::Relaxed);
                    inner.segs.slot(w.slot).live_bytes.fetch_add(after, Ordering::Relaxed);
                    inner.segs.slot(w.slot).run_slack.fetch_add(nh.relocation_slack() as u64, Ordering::Relaxed);
                    // A smaller run's records carry a larger share of its header.
                    inner.counters.live_bytes.fetch_add(after, Ordering::Relaxed);
                    inner.counters.live_bytes.fetch_sub(before, Ordering::Relaxed);
                    objs += bytes.len() as u64;
                }
                e @ (Entry::Tombstone(_) | Entry::ChunkTombstone(_)) => {
                    if !e.tombstone_segment().is_some_and(|s| members.tombstone_live(s)) {
                        continue;
                    }
                    let w = target.writer(inner, len, spare);
                    let end = (w.len + len + CHECKSUM_ENTRY_BYTES).min(seg_bytes);
                    assert!(inner.segs.grow(w.slot, end, spare, Tier::Cleaner), "cleaner reserve exhausted");
                    inner.log.write_entry(w, raw);
                    inner.segs.slot(w.slot).tomb_bytes.fetch_add(len as u64, Ordering::Relaxed);
                    tombs += len as u64;
                }
                // A segment holding a live stream's batch is never picked
                // (`candidates`): this one is of a dropped stream, dead.
                Entry::StreamBatch(_) => {}
                Entry::SegmentHeader(_) | Entry::LogDigest(_) | Entry::SafeVersion(_) | Entry::Checksum(_) => {}
            }
        }
    }
    objs += pack_chunks(inner, slot, &mut singles, spare, target);
    inner.counters.relocated.fetch_add(objs + tombs, Ordering::Relaxed);
    (objs, tombs)
}

/// A live chunk entry (type 8) found by [`relocate_segment`].
struct Single {
    /// Its offset in the segment being cleaned.
    at: u32,
    id: ChunkId,
    table: TableId,
    version: Version,
    len: usize,
}

/// Relocates the chunk entries `singles` of the segment in `slot`: those
/// that share a table, node, version and payload length go into chunk runs
/// (a 12-byte header per chunk becomes a share of one 16-byte header, or
/// a distance of a few bytes), the others move as they are. Chunks put one
/// at a time are chunk entries; once cleaned they cost what a bulk create
/// costs. Each group is decided and moved under its ids' stripe locks; a
/// chunk written since the scan (its slot points elsewhere) is left.
/// Returns the bytes written.
fn pack_chunks(inner: &Inner, slot: u32, singles: &mut [Single], spare: &mut Vec<u32>, target: &mut dyn Target) -> u64 {
    let seg_bytes = inner.segs.segment_bytes();
    let cap = crate::store::RUN_PAYLOAD_BYTES.min(inner.config.max_value_bytes);
    singles.sort_unstable_by_key(|s| (s.table, s.id.node(), s.version, s.len, s.id.local()));
    let mut written = 0u64;
    let mut start = 0;
    while start < singles.len() {
        let first = &singles[start];
        let most = (cap / (first.len + 6)).clamp(1, format::MAX_RUN_RECORDS);
        let mut end = start + 1;
        while end < singles.len() && end - start < most && {
            let s = &singles[end];
            (s.table, s.id.node(), s.version, s.len) == (first.table, first.id.node(), first.version, first.len)
        } {
            end += 1;
        }
        let group = &singles[start..end];
        start = end;
        let _locks = inner.cids.lock_many(group.iter().map(|s| s.id));
        let live: Vec<&Single> = group
            .iter()
            .filter(|s| inner.cids.live_ref(s.id) == Some(ChunkAt::entry(LogRef::new(slot, s.at))))
            .collect();
        if live.is_empty() {
            continue;
        }
        let entries: Vec<_> = live.iter().map(|s| inner.segs.entry(LogRef::new(slot, s.at))).collect();
        let before: usize = entries.iter().map(|e| e.len()).sum();
        let mut packed = Vec::new();
        if live.len() > 1 {
            let records: Vec<(u64, &[u8])> =
                live.iter().zip(&entries).map(|(s, e)| (s.id.local(), &e[e.len() - s.len..])).collect();
            let head = live[0];
            format::encode_chunk_run(&mut packed, head.table, head.id.node(), head.version, &records);
            if packed.len() >= before {
                // Ids far apart cost more as distances than the entries'
                // own headers: the entries move as they are.
                packed.clear();
            } else {
                // The payloads get the run's CRC: each entry's own is
                // checked first, so that a corruption in memory is not
                // sealed in.
                for (s, e) in live.iter().zip(&entries) {
                    if let Err(err) = format::decode(e) {
                        panic!("segment in slot {slot} is corrupt in memory at {}: {err}", s.at);
                    }
                }
            }
        }
        if packed.is_empty() {
            for (s, e) in live.iter().zip(&entries) {
                let w = target.writer(inner, e.len(), spare);
                let end = (w.len + e.len() + CHECKSUM_ENTRY_BYTES).min(seg_bytes);
                assert!(inner.segs.grow(w.slot, end, spare, Tier::Cleaner), "cleaner reserve exhausted");
                let new = inner.log.write_entry(w, e);
                inner.cids.set(s.id, Slot::Live(ChunkAt::entry(new)));
                inner.segs.slot(slot).live_bytes.fetch_sub(e.len() as u64, Ordering::Relaxed);
                inner.segs.slot(w.slot).live_bytes.fetch_add(e.len() as u64, Ordering::Relaxed);
                written += e.len() as u64;
            }
            continue;
        }
        let w = target.writer(inner, packed.len(), spare);
        let end = (w.len + packed.len() + CHECKSUM_ENTRY_BYTES).min(seg_bytes);
        assert!(inner.segs.grow(w.slot, end, spare, Tier::Cleaner), "cleaner reserve exhausted");
        let new = inner.log.write_entry(w, &packed);
        let h = format::parse_chunk_run_header(&packed).expect("a run just written");
        let mut after = 0u64;
        for (k, s) in live.iter().enumerate() {
            inner.cids.set(s.id, Slot::Live(ChunkAt { r: new, index: k as u16 }));
            after += h.record_bytes(k) as u64;
        }
        inner.segs.slot(slot).live_bytes.fetch_sub(before as u64, Ordering::Relaxed);
        inner.segs.slot(w.slot).live_bytes.fetch_add(after, Ordering::Relaxed);
        inner.segs.slot(w.slot).run_slack.fetch_add(h.relocation_slack() as u64, Ordering::Relaxed);
        inner.counters.live_bytes.fetch_add(after, Ordering::Relaxed);
        inner.counters.live_bytes.fetch_sub(before as u64, Ordering::Relaxed);
        written += packed.len() as u64;
    }
    written
}

/// Frees cleaned slots once no reader can see them; fixes the global
/// tombstone count for tombstones dropped. Returns seglets freed.
fn retire(inner: &Inner, slots: &[u32], tombs_kept: u64) -> usize {
    let mut seglets = 0;
    let mut tombs_before = 0;
    for s in slots {
        let slot = inner.segs.slot(*s);
        slot.set_state(SlotState::Dying);
        seglets += slot.seglets.load(Ordering::Relaxed) as usize;
        tombs_before += slot.tomb_bytes.load(Ordering::Relaxed);
    }
    // Hash tables the table has grown out of go with this synchronisation
    // too: a reader may still be in one until it returns.
    let old_tables = inner.ht.take_retired();
    inner.epochs.synchronize();
    drop(old_tables);
    for s in slots {
        inner.segs.free_slot(*s);
    }
    inner.log.tomb_bytes.fetch_sub(tombs_before.saturating_sub(tombs_kept), Ordering::Relaxed);
    // Survivors' counters were added directly; the global one must not count them twice.
    seglets
}

fn estimate_bytes(inner: &Inner, slot: u32) -> usize {
    let s = inner.segs.slot(slot);
    (s.live_bytes.load(Ordering::Relaxed) + s.tomb_bytes.load(Ordering::Relaxed)) as usize
}

/// The most bytes relocating a segment can write: its live and tombstone
/// bytes, plus, for its chunk runs, how much more rewriting a run as the
/// run of its live records may take than their shares of it
/// (`SegmentSlot::run_slack`; with many dead records and tiny payloads
/// this can exceed what the segment holds, and such a segment is then not
/// compacted). For reserving survivors; choosing by utilisation uses
/// [`estimate_bytes`].
fn relocation_bound(inner: &Inner, slot: u32) -> usize {
    let s = inner.segs.slot(slot);
    estimate_bytes(inner, slot) + s.run_slack.load(Ordering::Relaxed) as usize
}

/// Segment compaction. Returns seglets freed (0: no segment worth it).
fn compact(inner: &Inner) -> usize {
    let seglet = inner.segs.pool.seglet_bytes();
    let overhead = format::SEGMENT_HEADER_BYTES + CHECKSUM_ENTRY_BYTES;
    let mut best: Option<(f64, SegmentId, u32, usize)> = None;
    for (id, slot) in candidates(inner) {
        let have = inner.segs.slot(slot).seglets.load(Ordering::Relaxed) as usize;
        let bytes = relocation_bound(inner, slot);
        let need = (bytes + overhead).div_ceil(seglet) + 1;
        if need >= have {
            continue;
        }
        let ratio = (have - need) as f64 / (bytes + 1) as f64;
        if best.is_none_or(|b| ratio > b.0) {
            best = Some((ratio, id, slot, need));
        }
    }
    let Some((_, id, old_slot, need)) = best else {
        return 0;
    };
    let slack = 2 + (inner.config.max_value_bytes + inner.config.max_key_bytes).div_ceil(seglet);
    let Some(mut spare) = reserve(inner, need + slack) else {
        return 0;
    };
    let members = Membership::take(inner, &[]);
    let created = inner.segs.slot(old_slot).created_ms.load(Ordering::Relaxed);
    let Some(w) = inner.log.open_side(Some(id), created, &mut spare) else {
        inner.segs.pool.release(spare);
        return 0;
    };
    let mut target = Compacted(w);
    let (_, tombs) = relocate_segment(inner, old_slot, &members, &mut spare, &mut target, None);
    let mut w = target.0;
    let end = w.len + CHECKSUM_ENTRY_BYTES;
    assert!(inner.segs.grow(w.slot, end, &mut spare, Tier::Cleaner), "cleaner reserve exhausted");
    inner.log.seal_quietly(&mut w);
    inner.segs.pool.release(spare);
    let new_seglets = inner.segs.slot(w.slot).seglets.load(Ordering::Relaxed) as usize;
    let replaced = inner.log.replace_slot(id, w.slot);
    debug_assert_eq!(replaced, old_slot);
    let old_seglets = retire(inner, &[old_slot], tombs);
    inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
    inner.counters.segments_compacted.fetch_add(1, Ordering::Relaxed);
    old_seglets.saturating_sub(new_seglets)
}

/// Seglets a pass must hold to relocate `bytes` into survivors: the bytes,
/// a header and checksum per survivor, a partly used seglet per survivor,
/// and slack for objects installed into a source after it was chosen (a
/// write appended to a head that closed before it updated the hash table).
fn survivor_seglets_needed(inner: &Inner, bytes: usize) -> usize {
    let seglet = inner.segs.pool.seglet_bytes();
    let seg_bytes = inner.segs.segment_bytes();
    // Every survivor but the last holds at least half a segment (no entry
    // is larger than half a segment).
    let survivors = bytes / (seg_bytes / 2) + 1;
    let slack = 2 + (inner.config.max_value_bytes + inner.config.max_key_bytes).div_ceil(seglet);
    (bytes + survivors * (format::SEGMENT_HEADER_BYTES + CHECKSUM_ENTRY_BYTES)).div_ceil(seglet) + survivors + slack
}

/// What one combined pass achieved.
#[derive(Default)]
struct Combined {
    /// Seglets freed net of survivors and the new head.
    freed: usize,
    /// Bytes of tombstones elsewhere that died because their segments left.
    tombstones_killed: u64,
}

/// A segment chosen for a combined pass.
struct Chosen {
    id: SegmentId,
    slot: u32,
    /// The most bytes relocating it writes ([`relocation_bound`]): live
    /// objects and chunks, tombstones believed live, chunk runs rewritten.
    bytes: usize,
    created: u64,
}

/// Combined cleaning. Chooses by cost-benefit, counting as benefit both
/// a segment's dead bytes and the tombstones elsewhere that name it (they
/// all die when it leaves the log).
fn combined(inner: &Inner) -> Combined {
    refresh_tombstones(inner, 4 * inner.segs.segment_bytes());
    // Writers keep appending while the pass chooses: a head that grew
    // meanwhile can leave too few cleaner seglets for the survivors the
    // choice was sized for. That is a lost race, not a lack of memory:
    // choose again against the larger head.
    for _ in 0..SPLICE_ATTEMPTS {
        if let Some(done) = choose_and_splice(inner) {
            return done;
        }
    }
    Combined::default()
}

/// One try of [`combined`]: None if the seglets it chose for could not be
/// reserved by the time it spliced.
fn choose_and_splice(inner: &Inner) -> Option<Combined> {
    let seglet = inner.segs.pool.seglet_bytes();
    let seg_bytes = inner.segs.segment_bytes();
    let now = inner.log.now_ms();
    let refs = inner.log.tomb_refs();
    let mut scored: Vec<(f64, Chosen, u64)> = candidates(inner)
        .into_iter()
        .filter_map(|(id, slot)| {
            let s = inner.segs.slot(slot);
            let bytes = estimate_bytes(inner, slot);
            let named = refs.get(&id).copied().unwrap_or(0);
            let u = bytes.saturating_sub(named as usize) as f64 / seg_bytes as f64;
            if bytes as f64 / seg_bytes as f64 >= MAX_CLEANABLE_UTILISATION && named == 0 {
                return None;
            }
            let created = s.created_ms.load(Ordering::Relaxed);
            let age = (now.saturating_sub(created) + 1) as f64;
            let bytes = relocation_bound(inner, slot);
            Some(((1.0 - u) * age / (1.0 + u), Chosen { id, slot, bytes, created }, named))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let head_seglets = inner.log.head_seglets();
    let budget = inner.segs.pool.available(Tier::Cleaner).saturating_sub(head_seglets);
    let mut chosen = Vec::new();
    let (mut bytes, mut source_seglets, mut killed) = (0usize, 0usize, 0u64);
    for (_, c, named) in scored {
        if chosen.len() >= MAX_SOURCES {
            break;
        }
        if survivor_seglets_needed(inner, bytes + c.bytes) > budget {
            continue;
        }
        bytes += c.bytes;
        killed += named;
        source_seglets += inner.segs.slot(c.slot).seglets.load(Ordering::Relaxed) as usize;
        chosen.push(c);
    }
    // Survivors hold `bytes` in about bytes/seglet seglets; the pass gains
    // the sources' seglets beyond that, plus the tombstones it kills.
    let gain = (source_seglets * seglet + killed as usize) as i64 - (bytes + head_seglets * seglet) as i64;
    if chosen.is_empty() || gain < seglet as i64 {
        return Some(Combined::default());
    }
    splice_out(inner, chosen, bytes, killed, None)
}

/// Cache mode: the live objects of the segments an eviction pass cleans.
/// They are not relocated, and stay in the hash table (readable) until the
/// splice has opened the head whose digest drops their segments; only then
/// are they forgotten. A read that misses one of them therefore replies
/// after that digest is durable (every read waits for the log position of
/// its reply), so no crash can bring back an object a client saw evicted.
/// The tombstones of the evicted segments are relocated like any others:
/// each names an older version of some key that must stay dead.
#[derive(Default)]
struct Evicting {
    objects: Vec<(u64, LogRef)>,
    /// Chunks evicted the same way (their ids become free, above their
    /// versions, once forgotten).
    chunks: Vec<(shoal_common::ChunkId, ChunkAt)>,
    /// The safe version is raised above this before the splice, so that a
    /// key written again after a recovery gets a newer version than the
    /// one evicted (cas uniques and WATCH stay meaningful).
    max_version: Version,
}

/// Cache mode ([`crate::Eviction::Oldest`]): drops the oldest segments whole,
/// enough for live objects to fall to [`EVICT_TO`] of the memory and for
/// the pass to free at least a segment's worth of seglets beyond the new
/// head (the oldest segments may be small after compaction, or mostly
/// tombstones, which move to survivors).
fn evict(inner: &Inner) -> Combined {
    let seglet = inner.segs.pool.seglet_bytes();
    let head_seglets = inner.log.head_seglets();
    let min_gain = (inner.config.seglets_per_segment() + head_seglets) as i64;
    let memory = (inner.segs.pool.total_seglets() as usize * inner.segs.pool.seglet_bytes()) as f64;
    let live = inner.counters.live_bytes.load(Ordering::Relaxed) as f64;
    let excess = (live - EVICT_TO * memory).max(0.0) as u64;
    let refs = inner.log.tomb_refs();
    let mut oldest: Vec<Chosen> = candidates(inner)
        .into_iter()
        .map(|(id, slot)| {
            let created = inner.segs.slot(slot).created_ms.load(Ordering::Relaxed);
            Chosen { id, slot, bytes: 0, created }
        })
        .collect();
    oldest.sort_by_key(|c| c.created);
    let budget = inner.segs.pool.available(Tier::Cleaner).saturating_sub(head_seglets);
    let (mut dropped, mut tombs, mut killed, mut gain) = (0u64, 0usize, 0u64, 0i64);
    let mut chosen = Vec::new();
    for mut c in oldest {
        if chosen.len() >= MAX_SOURCES || (dropped >= excess && gain >= min_gain) {
            break;
        }
        let s = inner.segs.slot(c.slot);
        let t = s.tomb_bytes.load(Ordering::Relaxed) as usize;
        if survivor_seglets_needed(inner, tombs + t) > budget {
            break;
        }
        gain += s.seglets.load(Ordering::Relaxed) as i64 - t.div_ceil(seglet) as i64;
        tombs += t;
        c.bytes = t;
        dropped += s.live_bytes.load(Ordering::Relaxed);
        killed += refs.get(&c.id).copied().unwrap_or(0);
        chosen.push(c);
    }
    if chosen.is_empty() {
        return Combined::default();
    }
    let mut evicting = Evicting::default();
    // A lost race for seglets (see `combined`): the next pass tries again.
    let done = splice_out(inner, chosen, tombs, killed, Some(&mut evicting)).unwrap_or_default();
    if done.freed > 0 || !evicting.objects.is_empty() {
        inner.counters.eviction_passes.fetch_add(1, Ordering::Relaxed);
    }
    done
}

/// The second half of a combined pass: relocates the live entries of
/// `chosen` (about `bytes` of them) into survivors, oldest segment first,
/// and splices the survivors in and the chosen segments out. With
/// `evicting`, live objects are evicted instead of relocated. None, having
/// changed nothing, if the seglets for the new head and the survivors
/// cannot be reserved now (the head grew since `chosen` was sized).
fn splice_out(
    inner: &Inner,
    mut chosen: Vec<Chosen>,
    bytes: usize,
    killed: u64,
    mut evicting: Option<&mut Evicting>,
) -> Option<Combined> {
    let head_seglets = inner.log.head_seglets();
    let head_spare = reserve(inner, head_seglets)?;
    let Some(mut spare) = reserve(inner, survivor_seglets_needed(inner, bytes)) else {
        inner.segs.pool.release(head_spare);
        return None;
    };
    // Oldest first: survivors end up sorted by age.
    chosen.sort_by_key(|c| c.created);
    let total_live: u64 = chosen.iter().map(|c| c.bytes as u64).sum::<u64>().max(1);
    let created =
        (chosen.iter().map(|c| c.created as u128 * c.bytes as u128).sum::<u128>() / total_live as u128) as u64;
    let cleaned: Vec<SegmentId> = chosen.iter().map(|c| c.id).collect();
    let members = Membership::take(inner, &cleaned);
    let mut target = Survivors { done: Vec::new(), current: None, created_ms: created };
    let mut tombs_kept = 0;
    for c in &chosen {
        let (_, t) = relocate_segment(inner, c.slot, &members, &mut spare, &mut target, evicting.as_deref_mut());
        tombs_kept += t;
    }
    let mut done = target.done;
    if let Some(mut w) = target.current.take() {
        finish_survivor(inner, &mut w, &mut spare);
        done.push(w);
    }
    inner.segs.pool.release(spare);
    let survivor_seglets: usize =
        done.iter().map(|w| inner.segs.slot(w.slot).seglets.load(Ordering::Relaxed) as usize).sum();
    let survivors: Vec<(SegmentId, u32)> = done.iter().map(|w| (w.id, w.slot)).collect();
    for w in &mut done {
        inner.log.close(w);
    }
    if let Some(e) = evicting.as_deref() {
        if !e.objects.is_empty() {
            inner.log.raise_safe_version(Version(e.max_version.0 + 1));
        }
    }
    let slots = inner.log.splice(&survivors, &cleaned, head_spare);
    inner.cleaner.splices.fetch_add(1, Ordering::Relaxed);
    if let Some(e) = evicting {
        forget(inner, e);
    }
    let freed = retire(inner, &slots, tombs_kept);
    inner.counters.combined.fetch_add(1, Ordering::Relaxed);
    inner.counters.segments_cleaned.fetch_add(cleaned.len() as u64, Ordering::Relaxed);
    Some(Combined { freed: freed.saturating_sub(survivor_seglets + head_seglets), tombstones_killed: killed })
}

/// Uninstalls the evicted objects still installed where the pass found
/// them (a write or remove since then has replaced or removed them).
fn forget(inner: &Inner, e: &Evicting) {
    for &(id, at) in &e.chunks {
        if let Some(len) = inner.evict_chunk(id, at) {
            inner.counters.evicted.fetch_add(1, Ordering::Relaxed);
            inner.counters.evicted_bytes.fetch_add(len as u64, Ordering::Relaxed);
        }
    }
    for &(hash, at) in &e.objects {
        let _lock = inner.ht.lock(hash);
        let Some((pos, _)) = inner.ht.find(hash, |r| r == at) else {
            continue;
        };
        let raw = inner.segs.entry(at);
        let Ok((Entry::Object(o), len)) = format::decode_trusted(&raw) else {
            panic!("evicted reference {at:?} is not an object");
        };
        inner.uninstall(o.table, hash, inner.found_at(pos, at, &o, len));
        inner.counters.evicted.fetch_add(1, Ordering::Relaxed);
        inner.counters.evicted_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }
}

fn finish_survivor(inner: &Inner, w: &mut SegmentWriter, spare: &mut Vec<u32>) {
    let end = w.len + CHECKSUM_ENTRY_BYTES;
    assert!(inner.segs.grow(w.slot, end, spare, Tier::Cleaner), "cleaner reserve exhausted");
    inner.log.seal(w, 0);
}

/// Rechecks the tombstones of the most promising segment: the highest
/// product of its share of tombstones not known dead and the time since it
/// was last scanned (Rumble §4.2.2).
fn scan_tombstones(inner: &Inner) {
    let now = inner.log.now_ms();
    let best = candidates(inner).into_iter().max_by(|a, b| {
        let score = |slot: u32| {
            let s = inner.segs.slot(slot);
            let len = s.len.load(Ordering::Relaxed).max(1) as f64;
            let t = s.tomb_bytes.load(Ordering::Relaxed) as f64 / len;
            t * (now.saturating_sub(s.tomb_scanned_ms.load(Ordering::Relaxed)) + 1) as f64
        };
        score(a.1).total_cmp(&score(b.1))
    });
    if let Some((_, slot)) = best {
        scan_segment_tombstones(inner, slot, &Membership::take(inner, &[]));
    }
}

/// Before combined selection: rescans the segments whose tombstones may
/// have died since their last scan (one combined pass ago or more), most
/// tombstone-laden first, up to `budget` bytes of segments, so that cost-
/// benefit sees their real utilisation.
fn refresh_tombstones(inner: &Inner, budget: usize) {
    let gen = inner.cleaner.splices.load(Ordering::Relaxed);
    let mut stale: Vec<(u64, u32)> = candidates(inner)
        .into_iter()
        .filter_map(|(_, slot)| {
            let s = inner.segs.slot(slot);
            let t = s.tomb_bytes.load(Ordering::Relaxed);
            (t > 0 && s.tomb_gen.load(Ordering::Relaxed) < gen).then_some((t, slot))
        })
        .collect();
    stale.sort_unstable_by(|a, b| b.cmp(a));
    let members = Membership::take(inner, &[]);
    let mut scanned = 0;
    for (_, slot) in stale {
        if scanned >= budget {
            break;
        }
        scanned += inner.segs.slot(slot).len.load(Ordering::Relaxed) as usize;
        scan_segment_tombstones(inner, slot, &members);
    }
}

fn scan_segment_tombstones(inner: &Inner, slot: u32, members: &Membership) {
    let mut dead = 0u64;
    inner.segs.for_each_entry(slot, |_, raw| {
        if let Ok((e, len)) = format::decode_trusted(raw) {
            if e.tombstone_segment().is_some_and(|s| !members.tombstone_live(s)) {
                dead += len as u64;
            }
        }
    });
    let s = inner.segs.slot(slot);
    let known = s.tomb_dead.swap(dead, Ordering::Relaxed);
    let newly = dead.saturating_sub(known);
    s.tomb_bytes.fetch_sub(newly, Ordering::Relaxed);
    inner.log.tomb_bytes.fetch_sub(newly, Ordering::Relaxed);
    s.tomb_scanned_ms.store(inner.log.now_ms(), Ordering::Relaxed);
    s.tomb_gen.store(inner.cleaner.splices.load(Ordering::Relaxed), Ordering::Relaxed);
    inner.counters.tombstone_scans.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleaner_rests_less_the_further_memory_is_above_its_target() {
        let took = Duration::from_millis(40);
        // Off, within the floor, or at the target: a full rest.
        assert_eq!(rest_after(0.0, took), took);
        assert_eq!(rest_after(1.05, took), took);
        assert_eq!(rest_after(1.2, took), took / 4);
        assert_eq!(rest_after(REST_NONE_ABOVE, took), Duration::ZERO);
        assert_eq!(rest_after(3.0, took), Duration::ZERO);
    }
}
