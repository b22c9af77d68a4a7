//! Chunks: the keyless objects of chunk tables (DXRAM), in the same log as
//! objects and found through the CID table instead of the hash table.
//!
//! A chunk has a 64-bit id ([`ChunkId`]: the creating node and a 48-bit
//! local id that the store hands out, reusing removed ids), a payload, and
//! a version of its own: 1 when its id is first used, one more at every
//! put, and one above the last version of a reused id. Chunk versions are
//! per chunk (small, so their varint takes a byte in the common case) and
//! independent of the store's safe version.
//!
//! Writes of one chunk are serialised by its CID table stripe lock, which
//! the cleaner also takes to relocate it; a put appends the new entry and a
//! chunk tombstone naming the old entry's segment (as an object overwrite
//! does), a remove a chunk tombstone. Reads take no lock.
//!
//! The table of a chunk is in its entry: a chunk read or written through
//! another table does not exist there. Which tables are chunk tables is the
//! server's business: the store only requires that the table exists.

use super::*;
use crate::cidtable::{ChunkAt, Slot};
use shoal_common::ChunkId;

/// A live chunk found under its stripe lock (or an epoch guard).
#[derive(Clone, Copy, Debug)]
struct ChunkFound {
    at: ChunkAt,
    table: TableId,
    version: Version,
    /// The log bytes it stands for in the live-byte counts: its whole
    /// entry, or its share of a chunk run.
    entry_len: usize,
    /// Where its payload starts in its segment.
    payload_at: usize,
    payload_len: usize,
}

/// Most chunks one create appends as one log append group.
const CREATE_GROUP: usize = 1024;

/// Most ids one step of [`Store::chunk_range_entries`] looks at.
const RANGE_STEP_IDS: u64 = 1 << 16;

/// Most bytes of records (distances and payloads) a chunk run carries:
/// 16 KiB shares a run's 16-byte header among 128 chunks of 128 bytes, and
/// a run that does not fit the end of a head segment leaves at most that
/// much unused there (64 KiB runs of payload cost 128-byte chunks 1.05 B
/// each in partly used seglets, 16 KiB runs 0.26 B; 1 M chunks measured
/// with `shoal bench overhead --chunks`). A run also carries no more than
/// the largest value, so it is never a larger entry than an object with a
/// key of 46 bytes or more can be (the cleaner and the log size their
/// reserves by the largest object).
pub(crate) const RUN_PAYLOAD_BYTES: usize = 16 << 10;

/// Where a chunk went in a batch [`encode_chunks`] wrote: the entry's
/// index among the batch's entries, the record's index in it, and the
/// bytes it stands for.
#[derive(Clone, Copy, Debug)]
struct Placed {
    entry: usize,
    index: u16,
    bytes: usize,
    /// Whether the entry is a chunk run.
    run: bool,
}

/// Appends chunks `(table, id, version, payload)` to `b`: those that share
/// a table, a node, a version and a payload length as chunk runs (type 11),
/// ids ascending, a chunk with no such company as a chunk entry (type 8).
/// Returns where each went, in the order given. A bulk create of
/// same-sized chunks (DXRAM's usual load) becomes a few runs whose
/// records cost no header at all.
fn encode_chunks(b: &mut Batch, items: &[(TableId, ChunkId, Version, &[u8])], max_value: usize) -> Vec<Placed> {
    let mut placed = vec![Placed { entry: 0, index: 0, bytes: 0, run: false }; items.len()];
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by_key(|&i| {
        let (t, id, v, p) = items[i];
        (t, id.node(), v, p.len(), id.local())
    });
    let same = |a: usize, c: usize| {
        let (x, y) = (items[a], items[c]);
        x.0 == y.0 && x.1.node() == y.1.node() && x.2 == y.2 && x.3.len() == y.3.len()
    };
    let mut start = 0;
    while start < order.len() {
        let first = order[start];
        let len = items[first].3.len();
        let most = (RUN_PAYLOAD_BYTES.min(max_value) / (len + 6)).clamp(1, format::MAX_RUN_RECORDS);
        let mut end = start + 1;
        while end < order.len() && end - start < most && same(first, order[end]) {
            end += 1;
        }
        let group = &order[start..end];
        if group.len() == 1 {
            let (table, id, version, payload) = items[first];
            let n = format::encode_chunk(&mut b.buf, table, id, version, payload);
            b.mark();
            placed[first] = Placed { entry: b.ends.len() - 1, index: 0, bytes: n, run: false };
        } else {
            let records: Vec<(u64, &[u8])> = group.iter().map(|&i| (items[i].1.local(), items[i].3)).collect();
            let (table, id, version, _) = items[first];
            let at = b.buf.len();
            format::encode_chunk_run(&mut b.buf, table, id.node(), version, &records);
            b.mark();
            let h = format::parse_chunk_run_header(&b.buf[at..]).expect("a run just written");
            for (k, &i) in group.iter().enumerate() {
                placed[i] = Placed { entry: b.ends.len() - 1, index: k as u16, bytes: h.record_bytes(k), run: true };
            }
        }
        start = end;
    }
    placed
}

/// Adds the chunk runs of an appended batch to their segments' run slack
/// (`SegmentSlot::run_slack`, which the cleaner reserves for).
fn note_runs(segs: &crate::segment::Segments, b: &Batch, refs: &[crate::segment::LogRef], placed: &[Placed]) {
    let mut runs: Vec<usize> = placed.iter().filter(|p| p.run).map(|p| p.entry).collect();
    runs.sort_unstable();
    runs.dedup();
    for e in runs {
        let start = if e == 0 { 0 } else { b.ends[e - 1] };
        let h = format::parse_chunk_run_header(&b.buf[start..b.ends[e]]).expect("a run just written");
        segs.slot(refs[e].slot()).run_slack.fetch_add(h.relocation_slack() as u64, Ordering::Relaxed);
    }
}

impl Inner {
    /// The live chunk `id` (stripe lock held, or an epoch guard).
    fn find_chunk(&self, id: ChunkId) -> Option<ChunkFound> {
        let at = self.cids.live_ref(id)?;
        Some(self.chunk_at(at, id))
    }

    /// The chunk whose CID table slot holds `at`. The entry's first bytes
    /// are read and its header parsed once: of a chunk run they place the
    /// record; a chunk entry is in them whole when short, else read whole.
    fn chunk_at(&self, at: ChunkAt, id: ChunkId) -> ChunkFound {
        let (h, pre) = self.segs.entry_prefix(at.r, format::MAX_RUN_HEADER_BYTES);
        let off = at.r.offset() as usize;
        if h.entry_type == format::EntryType::ChunkRun {
            let run = format::parse_chunk_run_header_after(&pre, &h).expect("the CID table points at a chunk run");
            debug_assert!((at.index as usize) < run.count);
            return ChunkFound {
                at,
                table: run.table,
                version: run.version,
                entry_len: run.record_bytes(at.index as usize),
                payload_at: off + run.payload_at(at.index as usize),
                payload_len: run.payload_len,
            };
        }
        let e = if pre.len() == h.total_len() { pre } else { self.segs.entry(at.r) };
        let c = format::parse_chunk_after(&e, &h).expect("the CID table points at a chunk entry");
        debug_assert_eq!(c.id, id);
        ChunkFound {
            at,
            table: c.table,
            version: c.version,
            entry_len: e.len(),
            payload_at: off + e.len() - c.payload.len(),
            payload_len: c.payload.len(),
        }
    }

    /// The live chunk `id` of `table` (stripe lock held).
    fn find_chunk_in(&self, table: TableId, id: ChunkId) -> Result<ChunkFound, StoreError> {
        self.find_chunk(id).filter(|f| f.table == table).ok_or(StoreError::ObjectDoesntExist)
    }

    /// Points the CID table at a newly appended chunk entry and keeps the
    /// statistics (stripe lock held).
    fn install_chunk(
        &self,
        table: TableId,
        id: ChunkId,
        old: Option<ChunkFound>,
        at: ChunkAt,
        entry_len: usize,
        payload_len: usize,
    ) {
        self.stamp_write(key_hash(table, &format::chunk_key(id)).0);
        let c = &self.counters;
        self.cids.set(id, Slot::Live(at));
        match old {
            Some(f) => {
                self.segs.slot(f.at.r.slot()).live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
                c.live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
                c.live_kv_bytes.fetch_sub(f.payload_len as u64, Ordering::Relaxed);
            }
            None => {
                self.cids.live.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.segs.slot(at.r.slot()).live_bytes.fetch_add(entry_len as u64, Ordering::Relaxed);
        c.live_bytes.fetch_add(entry_len as u64, Ordering::Relaxed);
        c.live_kv_bytes.fetch_add(payload_len as u64, Ordering::Relaxed);
    }

    /// Forgets chunk `f` after its tombstone was appended (stripe lock
    /// held): its id becomes free at version `removed` (at least its own).
    fn uninstall_chunk(&self, table: TableId, id: ChunkId, f: ChunkFound, removed: Version, reuse: bool) {
        self.stamp_write(key_hash(table, &format::chunk_key(id)).0);
        let c = &self.counters;
        let removed = removed.max(f.version);
        if reuse {
            self.cids.free(id, removed);
        } else {
            self.cids.kill(id, removed);
        }
        self.cids.live.fetch_sub(1, Ordering::Relaxed);
        self.segs.slot(f.at.r.slot()).live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
        c.live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
        c.live_kv_bytes.fetch_sub(f.payload_len as u64, Ordering::Relaxed);
        // Every way a chunk stops being live comes here (remove, a table's
        // clear or drop, eviction, a replayed chunk tombstone), before its
        // id can be handed out again (the stripe lock is still held).
        if let Some(gone) = self.chunk_gone.get() {
            gone(table, id);
        }
    }

    /// The cleaner's eviction (cache mode): forgets chunk `id` if its entry
    /// is still at `at`, without a tombstone (its segment has left the
    /// log); its id becomes free above its version. Returns the entry's
    /// length if it was forgotten.
    pub(crate) fn evict_chunk(&self, id: ChunkId, at: ChunkAt) -> Option<usize> {
        let _lock = self.cids.lock(id);
        let f = self.find_chunk(id).filter(|f| f.at == at)?;
        self.uninstall_chunk(f.table, id, f, f.version, true);
        Some(f.entry_len)
    }

    fn push_chunk_tombstone(&self, b: &mut Batch, table: TableId, id: ChunkId, f: &ChunkFound) {
        let seg = self.segs.slot(f.at.r.slot()).segment_id();
        format::encode_chunk_tombstone(&mut b.buf, table, id, f.version, seg);
        b.mark();
    }

    /// Creates up to [`CREATE_GROUP`] chunks in one append group.
    fn create_group(&self, table: TableId, node: u16, payloads: &[&[u8]]) -> Result<Vec<ChunkId>, StoreError> {
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let ids = self.cids.allocate(node, payloads.len()).ok_or(StoreError::ChunkIdsExhausted)?;
                let locks = self.cids.lock_many(ids.iter().map(|a| a.id));
                b.clear();
                let items: Vec<(TableId, ChunkId, Version, &[u8])> =
                    ids.iter().zip(payloads).map(|(a, p)| (table, a.id, a.version, *p)).collect();
                let placed = encode_chunks(b, &items, self.config.max_value_bytes);
                if self.try_append(b, Tier::Write, refs).is_err() {
                    drop(locks);
                    self.cids.release(&ids);
                    self.wait_for_space(started)?;
                    continue;
                }
                note_runs(&self.segs, b, refs, &placed);
                for ((_, id, _, p), at) in items.iter().zip(&placed) {
                    let r = ChunkAt { r: refs[at.entry], index: at.index };
                    self.install_chunk(table, *id, None, r, at.bytes, p.len());
                }
                drop(locks);
                self.counters.writes.fetch_add(ids.len() as u64, Ordering::Relaxed);
                return Ok(ids.iter().map(|a| a.id).collect());
            }
        })
    }

    /// Puts (`Some(payload)`) and removes (`None`) of `n` items, `item(i)`
    /// each, in groups of distinct ids: each group under its ids' stripe
    /// locks, one log append for all its entries and chunk tombstones.
    fn chunk_groups<'p>(
        &self,
        table: TableId,
        n: usize,
        item: impl Fn(usize) -> (ChunkId, Option<&'p [u8]>),
    ) -> Vec<Result<Version, StoreError>> {
        let mut out: Vec<Result<Version, StoreError>> = Vec::with_capacity(n);
        if let Err(e) = self.check_table(table) {
            return (0..n).map(|_| Err(e.clone())).collect();
        }
        let mut start = 0;
        while start < n {
            // The group: distinct ids, at most CREATE_GROUP.
            let mut seen = std::collections::HashSet::new();
            let mut end = start;
            while end < n && end - start < CREATE_GROUP && seen.insert(item(end).0) {
                end += 1;
            }
            out.extend(self.chunk_group(table, (start..end).map(&item).collect()));
            start = end;
        }
        out
    }

    fn chunk_group(&self, table: TableId, items: Vec<(ChunkId, Option<&[u8]>)>) -> Vec<Result<Version, StoreError>> {
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let locks = self.cids.lock_many(items.iter().map(|(id, _)| *id));
                b.clear();
                // Per item: its result, or the chunk found.
                let plan: Vec<Result<ChunkFound, StoreError>> = items
                    .iter()
                    .map(|(id, payload)| {
                        payload
                            .map_or(Ok(()), |p| self.check_sizes(&[], Some(p)))
                            .and_then(|()| self.find_chunk_in(table, *id))
                    })
                    .collect();
                // The new payloads first (runs where they share a version
                // and a length), then a chunk tombstone per chunk found.
                let puts: Vec<(TableId, ChunkId, Version, &[u8])> = items
                    .iter()
                    .zip(&plan)
                    .filter_map(|((id, payload), p)| {
                        Some((table, *id, Version(p.as_ref().ok()?.version.0 + 1), (*payload)?))
                    })
                    .collect();
                let placed = encode_chunks(b, &puts, self.config.max_value_bytes);
                for ((id, _), p) in items.iter().zip(&plan) {
                    if let Ok(f) = p {
                        self.push_chunk_tombstone(b, table, *id, f);
                    }
                }
                // Removes alone may use the remove reserve, as object removes do.
                let tier = if items.iter().all(|(_, p)| p.is_none()) { Tier::Remove } else { Tier::Write };
                if !b.ends.is_empty() && self.try_append(b, tier, refs).is_err() {
                    drop(locks);
                    if let Err(e) = self.wait_for_space(started) {
                        return items.iter().map(|_| Err(e.clone())).collect();
                    }
                    continue;
                }
                note_runs(&self.segs, b, refs, &placed);
                let mut placed = placed.iter();
                let results = items
                    .iter()
                    .zip(plan)
                    .map(|((id, payload), p)| {
                        let f = p?;
                        match payload {
                            Some(p) => {
                                let at = placed.next().expect("one place per put");
                                let r = ChunkAt { r: refs[at.entry], index: at.index };
                                self.install_chunk(table, *id, Some(f), r, at.bytes, p.len());
                                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                                Ok(Version(f.version.0 + 1))
                            }
                            None => {
                                self.uninstall_chunk(table, *id, f, f.version, true);
                                self.counters.removes.fetch_add(1, Ordering::Relaxed);
                                Ok(f.version)
                            }
                        }
                    })
                    .collect();
                drop(locks);
                return results;
            }
        })
    }

    /// Puts `payload` into chunk `id` of `table` if `check` (run under the
    /// chunk's stripe lock, just before the append, again at each retry)
    /// passes: `Err(e)` of the check, else the put's result.
    fn put_chunk_if<E>(
        &self,
        table: TableId,
        id: ChunkId,
        payload: &[u8],
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<Version, StoreError>, E> {
        if let Err(e) = self.check_table(table).and_then(|()| self.check_sizes(&[], Some(payload))) {
            return Ok(Err(e));
        }
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let lock = self.cids.lock(id);
                check()?;
                let f = match self.find_chunk_in(table, id) {
                    Ok(f) => f,
                    Err(e) => return Ok(Err(e)),
                };
                let version = Version(f.version.0 + 1);
                b.clear();
                format::encode_chunk(&mut b.buf, table, id, version, payload);
                b.mark();
                self.push_chunk_tombstone(b, table, id, &f);
                if self.try_append(b, Tier::Write, refs).is_err() {
                    drop(lock);
                    if let Err(e) = self.wait_for_space(started) {
                        return Ok(Err(e));
                    }
                    continue;
                }
                self.install_chunk(table, id, Some(f), ChunkAt::entry(refs[0]), b.ends[0], payload.len());
                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(Ok(version));
            }
        })
    }

    fn remove_chunk(&self, table: TableId, id: ChunkId) -> Result<Version, StoreError> {
        self.check_table(table)?;
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let lock = self.cids.lock(id);
                let f = self.find_chunk_in(table, id)?;
                b.clear();
                self.push_chunk_tombstone(b, table, id, &f);
                if self.try_append(b, Tier::Remove, refs).is_err() {
                    drop(lock);
                    self.wait_for_space(started)?;
                    continue;
                }
                self.uninstall_chunk(table, id, f, f.version, true);
                self.counters.removes.fetch_add(1, Ordering::Relaxed);
                return Ok(f.version);
            }
        })
    }

    fn get_chunk(&self, table: TableId, id: ChunkId, out: &mut Vec<u8>) -> Result<Version, StoreError> {
        self.check_table(table)?;
        let _g = self.epochs.pin();
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        let f = self.find_chunk(id).ok_or(StoreError::ObjectDoesntExist)?;
        if f.table != table {
            return Err(StoreError::ObjectDoesntExist);
        }
        out.clear();
        self.segs.for_each_piece(f.at.r.slot(), f.payload_at, f.payload_len, |p| out.extend_from_slice(p));
        Ok(f.version)
    }
}

impl Store {
    /// Creates a chunk of `table` holding `payload`, with an id of `node`
    /// (the server's own node id); returns its id. Errors: `UnknownTable`,
    /// `ValueTooLarge`, `OutOfMemory`, `ChunkIdsExhausted`.
    pub fn create_chunk(&self, table: TableId, node: u16, payload: &[u8]) -> Result<ChunkId, StoreError> {
        Ok(self.create_chunks(table, node, &[payload])?[0])
    }

    /// Creates one chunk per payload; returns their ids in order. Chunks
    /// are appended in groups of up to 1,024 (one log append each): on an
    /// error the groups before it stay created and their ids are lost to
    /// the caller, so a caller that must not leak chunks sends at most
    /// 1,024 at a time (the native protocol's limit is lower).
    pub fn create_chunks(&self, table: TableId, node: u16, payloads: &[&[u8]]) -> Result<Vec<ChunkId>, StoreError> {
        let inner = &self.inner;
        inner.check_table(table)?;
        for p in payloads {
            inner.check_sizes(&[], Some(p))?;
        }
        let mut ids = Vec::with_capacity(payloads.len());
        for group in payloads.chunks(CREATE_GROUP) {
            ids.extend(inner.create_group(table, node, group)?);
        }
        Ok(ids)
    }

    /// Reads chunk `id` of `table` into `out` (replacing its contents);
    /// returns its version. `ObjectDoesntExist` if there is no such chunk in
    /// this store's table.
    pub fn get_chunk_into(&self, table: TableId, id: ChunkId, out: &mut Vec<u8>) -> Result<Version, StoreError> {
        self.inner.get_chunk(table, id, out)
    }

    /// Reads chunk `id` of `table`: its payload and version.
    pub fn get_chunk(&self, table: TableId, id: ChunkId) -> Result<(Vec<u8>, Version), StoreError> {
        let mut out = Vec::new();
        let v = self.inner.get_chunk(table, id, &mut out)?;
        Ok((out, v))
    }

    /// Replaces the payload of an existing chunk; returns its new version.
    /// `ObjectDoesntExist` if there is no such chunk (chunks are created
    /// only by [`Store::create_chunks`], which picks the id).
    pub fn put_chunk(&self, table: TableId, id: ChunkId, payload: &[u8]) -> Result<Version, StoreError> {
        match self.inner.put_chunk_if(table, id, payload, || Ok::<(), std::convert::Infallible>(())) {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// [`Store::put_chunk`] only if `check` passes, run under the chunk's
    /// stripe lock just before the append (and again if the put waits for
    /// memory): nothing that [`Store::with_chunk`] runs for this chunk, and
    /// no remove of it, can come between the check and the write.
    /// `Err(e)` of the check (nothing written), else the put's result.
    pub fn put_chunk_if<E>(
        &self,
        table: TableId,
        id: ChunkId,
        payload: &[u8],
        check: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<Version, StoreError>, E> {
        self.inner.put_chunk_if(table, id, payload, check)
    }

    /// Runs `f` under chunk `id`'s stripe lock, told whether the chunk is a
    /// live chunk of `table`: the answer holds while `f` runs (no write of
    /// this chunk, and no removal or eviction of it, can happen meanwhile).
    /// `f` must be quick and must not call into the store. `UnknownTable`
    /// if there is no such table.
    pub fn with_chunk<T>(&self, table: TableId, id: ChunkId, f: impl FnOnce(bool) -> T) -> Result<T, StoreError> {
        let inner = &self.inner;
        inner.check_table(table)?;
        let _lock = inner.cids.lock(id);
        let live = inner.find_chunk_in(table, id).is_ok();
        Ok(f(live))
    }

    /// Calls `gone(table, id)` for every chunk that stops being live from
    /// now on, however it goes: removed (one by one or by a table's clear
    /// or drop), evicted in cache mode, or removed by a replayed chunk
    /// tombstone. The call comes under the chunk's stripe lock, before its
    /// id can be handed out again, so whoever keeps state per chunk
    /// (`shoal-server`'s chunk locks) can drop it before a new chunk takes
    /// the id. `gone` must be quick and must not call into the store. Set
    /// once: a second call is ignored (false).
    pub fn on_chunk_gone(&self, gone: ChunkGone) -> bool {
        self.inner.chunk_gone.set(gone).is_ok()
    }

    /// Removes a chunk; returns the version it had. Its id will be reused.
    pub fn remove_chunk(&self, table: TableId, id: ChunkId) -> Result<Version, StoreError> {
        self.inner.remove_chunk(table, id)
    }

    /// [`Store::get_chunk`] of each id.
    pub fn multi_get_chunks(&self, table: TableId, ids: &[ChunkId]) -> Vec<Result<(Vec<u8>, Version), StoreError>> {
        ids.iter().map(|id| self.get_chunk(table, *id)).collect()
    }

    /// [`Store::put_chunk`] of each (id, payload): one result per item, in
    /// order. Items are appended in groups of up to 1,024 distinct ids
    /// (one log append each); an id repeated in a group starts the next.
    pub fn multi_put_chunks(&self, table: TableId, items: &[(ChunkId, &[u8])]) -> Vec<Result<Version, StoreError>> {
        self.inner.chunk_groups(table, items.len(), |i| (items[i].0, Some(items[i].1)))
    }

    /// [`Store::remove_chunk`] of each id: one result per id (the version
    /// it had), in order, appended in groups as [`Store::multi_put_chunks`].
    pub fn multi_remove_chunks(&self, table: TableId, ids: &[ChunkId]) -> Vec<Result<Version, StoreError>> {
        self.inner.chunk_groups(table, ids.len(), |i| (ids[i], None))
    }

    /// Removes every chunk of `table` (chunk tombstones appended); their ids
    /// become free. Part of [`Store::clear_table`] and `drop_table`.
    pub(super) fn clear_chunks(&self, table: TableId) -> Result<(), StoreError> {
        if self.inner.cids.live.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let mut ids = Vec::new();
        {
            let _g = self.inner.epochs.pin();
            self.inner.cids.for_each_live(|id, at| {
                if self.inner.chunk_at(at, id).table == table {
                    ids.push(id);
                }
            });
        }
        for id in ids {
            match self.inner.remove_chunk(table, id) {
                Ok(_) | Err(StoreError::ObjectDoesntExist) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Walks the live chunks of `table` with ids `node:from..=node:hi`,
    /// ascending, handing each one's entry (a chunk entry, type 8, made
    /// afresh: a chunk of a run is sent alone), id and version to `visit`;
    /// stops after `max` chunks or a bounded number of ids looked at, and
    /// returns where to go on (`None`: done). Not a snapshot: a chunk
    /// written meanwhile is seen at one of its versions. For a chunk id
    /// range's migration (`shoal-server`'s `migrate.rs`).
    pub fn chunk_range_entries(
        &self,
        table: TableId,
        node: u16,
        from: u64,
        hi: u64,
        max: usize,
        mut visit: impl FnMut(&[u8], ChunkId, Version),
    ) -> Result<Option<u64>, StoreError> {
        let inner = &self.inner;
        inner.check_table(table)?;
        // Ids at or above the allocation point were never used here.
        let end = hi.min(inner.cids.allocation_point(node).saturating_sub(1));
        let (mut local, mut found, mut looked) = (from, 0, 0);
        let (mut payload, mut entry) = (Vec::new(), Vec::new());
        while local <= end && found < max && looked < RANGE_STEP_IDS {
            let id = ChunkId::new(node, local);
            if inner.cids.live_ref(id).is_some() {
                if let Ok(version) = inner.get_chunk(table, id, &mut payload) {
                    entry.clear();
                    format::encode_chunk(&mut entry, table, id, version, &payload);
                    visit(&entry, id, version);
                    found += 1;
                }
            }
            local += 1;
            looked += 1;
        }
        Ok((local <= end).then_some(local))
    }

    /// Drops every live chunk of `table` with ids `node:lo..=node:hi`
    /// *without* chunk tombstones, and returns how many went: for ids this
    /// server no longer serves (they moved away, or a move to here was
    /// given up), as [`Store::forget_range`] does for keys. Their locks go
    /// (the `on_chunk_gone` callback). Each id's slot
    /// is left as if never used, and is *not* put on its node's free list: a
    /// create here never hands it out again while the store lives, so the
    /// id cannot become a second chunk beside the one that moved. Never for
    /// ids this server serves: a crash would bring them back from the log.
    pub fn forget_chunk_range(&self, table: TableId, node: u16, lo: u64, hi: u64) -> Result<u64, StoreError> {
        let inner = &self.inner;
        if inner.check_table(table).is_err() {
            return Ok(0);
        }
        let end = hi.min(inner.cids.allocation_point(node).saturating_sub(1));
        let mut gone = 0;
        for local in lo.max(1)..=end {
            let id = ChunkId::new(node, local);
            if inner.cids.live_ref(id).is_none() {
                continue;
            }
            let _lock = inner.cids.lock(id);
            if let Ok(f) = inner.find_chunk_in(table, id) {
                inner.uninstall_chunk(table, id, f, f.version, false);
                // Never used, as far as this store knows now: the chunk
                // lives on elsewhere, and if it comes back (a move or a
                // recovery) at the version it has, nothing here may take
                // it for removed.
                inner.cids.set(id, Slot::Empty);
                gone += 1;
            }
        }
        Ok(gone)
    }

    /// The table whose live chunk `id` is here, if any.
    pub fn live_chunk_table(&self, id: ChunkId) -> Option<TableId> {
        let inner = &self.inner;
        let _lock = inner.cids.lock(id);
        inner.find_chunk(id).map(|f| f.table)
    }

    /// Live chunks of every table (from a counter).
    pub fn chunk_count(&self) -> u64 {
        self.inner.cids.live.load(Ordering::Relaxed)
    }

    /// Replays chunk entries of distinct ids as one append group: each is
    /// installed (appended to this log) unless the store holds the chunk at
    /// a version at least as new, or its id was removed at a version at
    /// least as new. Decided and applied under the group's stripe locks.
    pub(super) fn replay_chunks(
        &self,
        replay: &mut Replay,
        group: &[format::ChunkView<'_>],
    ) -> Result<(), ReplayError> {
        if group.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let locks = inner.cids.lock_many(group.iter().map(|c| c.id));
                if replay.chunk_migration {
                    let other = group.iter().find_map(|c| inner.find_chunk(c.id).filter(|f| f.table != c.table));
                    if let Some(f) = other {
                        return Err(ReplayError::Store(StoreError::ObjectExists { version: f.version }));
                    }
                }
                b.clear();
                // Per chunk: skipped, or the chunk it replaces (if any).
                let plan: Vec<Option<Option<ChunkFound>>> = group
                    .iter()
                    .map(|c| {
                        inner.cids.note_id(c.id);
                        match inner.cids.get(c.id) {
                            // A migration's chunks are live at their source
                            // now: what this store remembers of a removed id
                            // is older (the id moved away and came back).
                            Slot::Free(v) if c.version <= v && !replay.chunk_migration => None,
                            Slot::Empty | Slot::Free(_) => Some(None),
                            Slot::Live(_) => inner.find_chunk(c.id).filter(|f| f.version < c.version).map(Some),
                        }
                    })
                    .collect();
                // The chunks installed (runs again where they can be), then
                // a chunk tombstone per chunk they replace.
                let writes: Vec<(TableId, ChunkId, Version, &[u8])> = group
                    .iter()
                    .zip(&plan)
                    .filter(|(_, p)| p.is_some())
                    .map(|(c, _)| (c.table, c.id, c.version, c.payload))
                    .collect();
                let placed = encode_chunks(b, &writes, inner.config.max_value_bytes);
                for (c, p) in group.iter().zip(&plan) {
                    if let Some(Some(f)) = p {
                        inner.push_chunk_tombstone(b, f.table, c.id, f);
                    }
                }
                if !b.ends.is_empty() && inner.try_append(b, Tier::Write, refs).is_err() {
                    drop(locks);
                    inner.wait_for_space(started).map_err(ReplayError::Store)?;
                    continue;
                }
                note_runs(&inner.segs, b, refs, &placed);
                let mut placed = placed.iter();
                for (c, p) in group.iter().zip(plan) {
                    let Some(old) = p else {
                        replay.report.chunks_skipped += 1;
                        continue;
                    };
                    let at = placed.next().expect("one place per chunk written");
                    let r = ChunkAt { r: refs[at.entry], index: at.index };
                    inner.install_chunk(c.table, c.id, old, r, at.bytes, c.payload.len());
                    replay.report.chunks_replayed += 1;
                }
                drop(locks);
                return Ok(());
            }
        })
    }

    /// Replays one chunk tombstone: a chunk the store holds at or below its
    /// version is removed (a chunk tombstone appended to this log), and the
    /// id is remembered as removed at that version so that an older entry
    /// replayed later is skipped.
    pub(super) fn replay_chunk_tombstone(
        &self,
        replay: &mut Replay,
        t: &format::ChunkTombstoneView,
    ) -> Result<(), ReplayError> {
        let inner = &self.inner;
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let lock = inner.cids.lock(t.id);
                match inner.cids.get(t.id) {
                    Slot::Free(v) if v >= t.version => return Ok(()),
                    Slot::Empty | Slot::Free(_) => {
                        inner.cids.kill(t.id, t.version);
                        return Ok(());
                    }
                    Slot::Live(_) => {}
                }
                let f = inner.find_chunk(t.id).expect("live slot");
                if f.version > t.version {
                    return Ok(());
                }
                b.clear();
                inner.push_chunk_tombstone(b, f.table, t.id, &f);
                if inner.try_append(b, Tier::Remove, refs).is_err() {
                    drop(lock);
                    inner.wait_for_space(started).map_err(ReplayError::Store)?;
                    continue;
                }
                inner.uninstall_chunk(f.table, t.id, f, t.version, false);
                replay.report.chunks_removed += 1;
                return Ok(());
            }
        })
    }

    /// The chunk part of [`Store::check_invariants`]: every CID table
    /// reference points at the chunk entry of its own id, or at its own
    /// record of a chunk run, in a segment of the log. Returns (live chunks, their entry bytes, their payload bytes)
    /// and adds their bytes to `live_per_slot`.
    pub(super) fn check_chunks(
        &self,
        member_slots: &HashMap<u32, SegmentId>,
        live_per_slot: &mut HashMap<u32, u64>,
    ) -> Result<(u64, u64, u64), String> {
        let inner = &self.inner;
        let (mut n, mut live, mut payload) = (0u64, 0u64, 0u64);
        let mut err = None;
        let mut last_run: Option<(crate::segment::LogRef, format::ChunkRunHeader, Vec<ChunkId>)> = None;
        inner.cids.for_each_live(|id, at| {
            if err.is_some() {
                return;
            }
            let slot = at.r.slot();
            if !member_slots.contains_key(&slot) {
                err = Some(format!("chunk {id}: reference {at:?} into slot {slot} which is not in the log"));
                return;
            }
            // A run is decoded (CRC and all) once for all its records.
            if last_run.as_ref().is_none_or(|(r, _, _)| *r != at.r) {
                let e = inner.segs.entry(at.r);
                last_run = match format::decode(&e) {
                    Ok((Entry::ChunkRun(run), _)) => {
                        Some((at.r, run.header, (0..run.len()).map(|i| run.id(i)).collect()))
                    }
                    _ => None,
                };
            }
            let (bytes, payload_len) = match &last_run {
                Some((_, h, ids)) if ids.get(at.index as usize) == Some(&id) => {
                    (h.record_bytes(at.index as usize), h.payload_len)
                }
                Some(_) => {
                    err = Some(format!("chunk {id}: reference {at:?} to another record of a run"));
                    return;
                }
                None => match format::decode(&inner.segs.entry(at.r)) {
                    Ok((Entry::Chunk(c), len)) if c.id == id && at.index == 0 => (len, c.payload.len()),
                    other => {
                        err = Some(format!("chunk {id}: reference {at:?} to another entry: {other:?}"));
                        return;
                    }
                },
            };
            n += 1;
            live += bytes as u64;
            payload += payload_len as u64;
            *live_per_slot.entry(slot).or_default() += bytes as u64;
        });
        match err {
            Some(e) => Err(e),
            None => Ok((n, live, payload)),
        }
    }
}
