//! The expiry sweep: a bounded background pass (Redis's active expire
//! cycle) that removes expired objects, so that expired data does not hold
//! memory for long.
//!
//! Reads never return an expired object, and the cleaner drops the expired
//! objects it meets instead of relocating them (`cleaner.rs`). Until one
//! of those happens, an expired object still holds its bytes, its hash
//! table slot and a place in the table's object count. The sweep finds
//! them without looking at every object: each segment keeps
//! `next_expiry`, a time before which none of its live objects expires
//! (every append of an object with an expiry lowers it: `Log::note_expiry`).
//! A pass visits, earliest first, the segments whose `next_expiry` has
//! come. In each it walks the entries, collects the objects whose expiry
//! has come and that the hash table still references, and sets
//! `next_expiry` to the earliest expiry of the others. Then it removes the
//! collected objects through the normal remove path, if each is still the
//! same version and still expired: a tombstone is appended first, so
//! replication carries the removal and a recovery cannot bring back an
//! older version of the key, nor the object itself on a recovery master
//! whose clock runs behind this one's.
//!
//! Cost: a pass reads the segments that hold expiring objects, sequentially,
//! and looks up only the expired ones. Each pass stops after
//! `StoreConfig::expiry_sweep_budget` and passes run every
//! `expiry_sweep_interval`, so the sweep takes at most budget / interval
//! of one core (10% by default). An expired object is removed within about
//! one interval of its expiry when the sweep keeps up; when more expires
//! than a budget removes, the rest waits for the following passes, earliest
//! first. A store without objects with expiry never reads the clock here.

use crate::format::{self, EntryType};
use crate::segment::LogRef;
use crate::store::Inner;
use parking_lot::{Condvar, Mutex, MutexGuard};
use shoal_common::{key_hash, SegmentId, TableId, UnixMillis, Version};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Removals between two checks of the pass's time budget.
const BUDGET_CHECK_EVERY: usize = 64;

#[derive(Default)]
pub(crate) struct SweepState {
    /// Held for the whole of a pass; `pause` takes it.
    pass: Mutex<()>,
    /// Set to stop the thread's wait early (shutdown).
    woken: Mutex<bool>,
    wake: Condvar,
}

impl SweepState {
    /// Keeps the sweep from starting a pass while the guard lives.
    pub fn pause(&self) -> MutexGuard<'_, ()> {
        self.pass.lock()
    }
}

/// An expired object a pass found in a segment, to remove.
struct Expired {
    table: TableId,
    key: Vec<u8>,
    version: Version,
    at: UnixMillis,
}

/// The sweep thread: one pass per interval until shutdown.
pub(crate) fn run(inner: Arc<Inner>) {
    let interval = inner.config.expiry_sweep_interval;
    loop {
        {
            let mut woken = inner.sweep.woken.lock();
            if !*woken {
                inner.sweep.wake.wait_for(&mut woken, interval);
            }
            *woken = false;
        }
        if inner.shutdown.load(Ordering::Acquire) {
            return;
        }
        sweep(&inner, Some(inner.config.expiry_sweep_budget));
    }
}

/// Ends the thread's wait at once (it then checks for shutdown).
pub(crate) fn wake(inner: &Inner) {
    *inner.sweep.woken.lock() = true;
    inner.sweep.wake.notify_one();
}

/// One pass over the segments whose `next_expiry` has come, earliest
/// first, until `budget` is spent (`None`: no limit). Returns the objects
/// removed.
pub(crate) fn sweep(inner: &Inner, budget: Option<Duration>) -> u64 {
    if inner.counters.expiring.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let _pass = inner.sweep.pass.lock();
    let started = Instant::now();
    let now = inner.now();
    // The hints are read without pinning: a slot freed meanwhile gives a
    // stale hint, and each segment is looked up again by id below.
    let mut due: Vec<(u64, SegmentId)> = inner
        .log
        .members()
        .into_iter()
        .filter_map(|(id, slot)| {
            let next = inner.segs.slot(slot).next_expiry.load(Ordering::Acquire);
            (next <= now.0).then_some((next, id))
        })
        .collect();
    due.sort_unstable();
    let deadline = budget.map(|b| started + b);
    let (mut removed, mut scanned) = (0, 0);
    for (_, id) in due {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        scanned += 1;
        let (n, finished) = sweep_segment(inner, id, now, deadline);
        removed += n;
        if !finished {
            break;
        }
    }
    let c = &inner.counters;
    c.sweep_passes.fetch_add(1, Ordering::Relaxed);
    c.sweep_segments.fetch_add(scanned, Ordering::Relaxed);
    c.sweep_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    removed
}

/// Sweeps segment `id`: recomputes its `next_expiry` and removes its
/// expired live objects, until `deadline`. Returns the objects removed and
/// whether the segment was finished (false: out of time or memory; its
/// `next_expiry` then still covers what is left).
fn sweep_segment(inner: &Inner, id: SegmentId, now: UnixMillis, deadline: Option<Instant>) -> (u64, bool) {
    let mut expired = Vec::new();
    {
        // The slot cannot be freed (nor reused) while the epoch is pinned.
        let _g = inner.epochs.pin();
        let Some(slot) = inner.log.slot_of(id) else {
            return (0, true);
        };
        let s = inner.segs.slot(slot);
        let mut next = u64::MAX;
        let first = s.len.load(Ordering::Acquire) as usize;
        scan(inner, slot, 0..first, now, &mut next, &mut expired);
        // A head may have taken appends during the scan: their expiries
        // lowered `next_expiry` under the head lock, so the rest is scanned
        // and the hint replaced under it too, with no append in between.
        inner.log.with_appends_paused(|| {
            let end = s.len.load(Ordering::Acquire) as usize;
            scan(inner, slot, first..end, now, &mut next, &mut expired);
            s.next_expiry.store(next, Ordering::Release);
        });
    }
    let mut removed = 0;
    for (i, e) in expired.iter().enumerate() {
        let out_of_time = i % BUDGET_CHECK_EVERY == 0 && i > 0 && deadline.is_some_and(|d| Instant::now() >= d);
        let done = if out_of_time { Err(()) } else { inner.remove_expired(e.table, &e.key, e.version).map_err(|_| ()) };
        match done {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(()) => {
                // Not removed (no time, or no memory for the tombstones):
                // the segment must come up again at the first expiry left.
                let first_left = expired[i..].iter().map(|e| e.at.0).min().unwrap_or(u64::MAX);
                let _g = inner.epochs.pin();
                if let Some(slot) = inner.log.slot_of(id) {
                    inner.segs.slot(slot).next_expiry.fetch_min(first_left, Ordering::AcqRel);
                }
                return (removed, false);
            }
        }
    }
    (removed, true)
}

/// Walks the entries of `slot` in `range` (published bytes, pinned by the
/// caller): lowers `next` to each unexpired object's expiry, and collects
/// the expired objects the hash table still references. Objects without
/// expiry are skipped by their tag alone.
fn scan(
    inner: &Inner,
    slot: u32,
    range: std::ops::Range<usize>,
    now: UnixMillis,
    next: &mut u64,
    expired: &mut Vec<Expired>,
) {
    let mut off = range.start;
    while off < range.end {
        let r = LogRef::new(slot, off as u32);
        let e = inner.segs.entry(r);
        off += e.len();
        if !matches!(format::read_header(&e), Ok(h) if h.entry_type == EntryType::ObjectWithExpiry) {
            continue;
        }
        let Ok(o) = format::parse_object(&e) else { continue };
        let Some(at) = o.expiry else { continue };
        if at > now {
            *next = (*next).min(at.0);
        } else if inner.ht.find(key_hash(o.table, o.key).0, |x| x == r).is_some() {
            expired.push(Expired { table: o.table, key: o.key.to_vec(), version: o.version, at });
        }
    }
}
