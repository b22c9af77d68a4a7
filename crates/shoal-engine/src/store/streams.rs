//! Streams: KerA's streamlets, groups and segments over the store's log
//! (`docs/streams.md`).
//!
//! A stream is a table of the stream kind with a fixed [`StreamShape`]. Each
//! streamlet is a MultiLog of `shape.logs` logs; a producer appends to log
//! `producer id % logs`, under that log's append lock only, so producers
//! of different logs never wait for each other here. Each log is a
//! sequence of groups (at most one open: the log's active group), a group
//! a sequence of up to `group_segments` stream segments, a stream segment a
//! sequence of batches holding up to `segment_bytes` of records. Group ids
//! are unique and increasing within a streamlet.
//!
//! A produce request becomes one stream batch entry (type 10) in the
//! store's log, so it is replicated and recovered with everything else.
//! The entry names its place (streamlet, log, group, segment, index in the
//! segment): no per-record offset is stored, and replay rebuilds the index
//! from the entries alone, in any order. A stream segment is a logical
//! unit, not a log segment: its batches are entries of whatever log
//! segments were the head when they were appended.
//!
//! The index here (per segment, each batch's [`LogRef`], its index and its
//! first record's position) is the only reference to a batch entry. Stream
//! data is append-only: the cleaner never picks a log segment holding a
//! batch (`SegmentSlot::stream_bytes`), so references never move.
//! Dropping the stream's table makes its batches dead and their segments
//! cleanable, and so does retention for a streamlet's oldest groups
//! ([`Store::stream_retention_due`], [`Store::mark_stream_trimmed`],
//! [`Store::trim_stream`]): a streamlet's trim point is an object of the
//! stream's table under the streamlet's key, written (and made durable by
//! the server) before the groups below it leave the index, so a replay
//! drops them again ([`Store::finish_replay`]) even when some of their
//! batches are still in the log.

use super::*;
use crate::format::{BatchPlace, StreamBatchView};
use shoal_common::{StreamOffset, StreamShape};
use std::collections::BTreeMap;

/// Most records one produce may carry.
pub const MAX_BATCH_RECORDS: usize = 65_536;

/// What each record counts beyond its bytes towards a consume's limit (its
/// length on the native wire), so that empty records cannot make a reply
/// unbounded.
pub const RECORD_OVERHEAD: usize = 4;

/// Why a stream operation was refused. Nothing in the store changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// The table does not exist, or is not a stream.
    UnknownStream(TableId),
    /// [`Store::create_stream`] of a stream that exists with another shape.
    ShapeMismatch { existing: StreamShape },
    /// The shape is not one a stream may have (`StreamShape::check`).
    InvalidShape(String),
    /// The streamlet is not one of the stream's.
    NoSuchStreamlet { streamlet: u32, streamlets: u32 },
    /// No group of the streamlet has this id.
    NoSuchGroup { streamlet: u32, group: u64 },
    /// The group was removed by retention: every group below `first` was.
    Trimmed { streamlet: u32, group: u64, first: u64 },
    /// The offset's segment or position is past what its group holds.
    InvalidOffset(StreamOffset),
    /// A produce with no records, more than [`MAX_BATCH_RECORDS`], or more
    /// bytes than the store's largest value.
    InvalidBatch(String),
    /// Live data and stream data fill the memory.
    OutOfMemory,
    /// A consumer name's commit refused: a name too long, too many names
    /// in the streamlet, offsets that no longer fit a value.
    Consumers(String),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::UnknownStream(t) => write!(f, "table {t} is not a stream"),
            StreamError::ShapeMismatch { existing } => write!(f, "the stream exists with another shape: {existing:?}"),
            StreamError::InvalidShape(why) => write!(f, "invalid stream shape: {why}"),
            StreamError::NoSuchStreamlet { streamlet, streamlets } => {
                write!(f, "streamlet {streamlet} does not exist (the stream has {streamlets})")
            }
            StreamError::NoSuchGroup { streamlet, group } => {
                write!(f, "group {group} does not exist in streamlet {streamlet}")
            }
            StreamError::Trimmed { streamlet, group, first } => write!(
                f,
                "group {group} of streamlet {streamlet} was removed by retention (its groups from {first} are kept)"
            ),
            StreamError::InvalidOffset(o) => write!(f, "offset {o} is past the end of its group"),
            StreamError::InvalidBatch(why) => write!(f, "invalid batch: {why}"),
            StreamError::OutOfMemory => write!(f, "out of memory: live data fills the store"),
            StreamError::Consumers(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for StreamError {}

/// What a produce appended: the address of its first record and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Produced {
    pub first: StreamOffset,
    pub count: u32,
}

/// What a consume read: where the next read of the group starts, how many
/// records it passed to the visitor, and whether the group is closed and
/// read to its end (the consumer moves to another group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consumed {
    pub next: StreamOffset,
    pub records: u32,
    pub end_of_group: bool,
}

/// One group of a streamlet, as [`Store::stream_groups`] describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    pub id: u64,
    /// The log of the streamlet's MultiLog that holds it.
    pub log: u32,
    pub segments: u32,
    pub records: u64,
    /// Bytes of records as stored (each with its varint length).
    pub bytes: u64,
    /// No record will be appended to it any more.
    pub closed: bool,
}

/// How much of each streamlet a server keeps (`docs/streams.md`,
/// "Retention"): a streamlet's oldest closed groups are removed while its
/// groups hold more than `bytes` of records, or once their last record is
/// older than `age_ms`. Zero: no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub bytes: u64,
    pub age_ms: u64,
}

impl Retention {
    pub fn is_none(&self) -> bool {
        self.bytes == 0 && self.age_ms == 0
    }
}

/// The streams of a store and the log bytes their batches take.
#[derive(Default)]
pub(crate) struct Streams {
    map: RwLock<HashMap<TableId, Arc<Stream>>>,
    /// Entry bytes of stream batches in the log (they count as live).
    pub bytes: AtomicU64,
}

pub(super) struct Stream {
    pub(super) shape: StreamShape,
    streamlets: Box<[Streamlet]>,
    /// Set under every log lock by [`Store::drop_stream`]: no produce
    /// appends after it.
    dropped: AtomicBool,
}

pub(super) struct Streamlet {
    /// The MultiLog: each log's append lock and active group.
    logs: Box<[Mutex<LogHead>]>,
    /// Held over every read-modify-write of the streamlet's object (trim
    /// point and consumer offsets, `stream_meta`).
    pub(super) meta: Mutex<()>,
    pub(super) groups: RwLock<BTreeMap<u64, Arc<RwLock<Group>>>>,
    next_group: AtomicU64,
    /// Every group below this id was removed by retention.
    trimmed: AtomicU64,
}

#[derive(Default)]
struct LogHead {
    active: Option<Arc<RwLock<Group>>>,
}

pub(super) struct Group {
    pub(super) id: u64,
    pub(super) log: u32,
    /// `LogState::now_ms` when it opened.
    opened_ms: u64,
    /// `LogState::now_ms` of its last append (of its replay, for a
    /// replayed group): retention's age.
    last_ms: u64,
    pub(super) closed: bool,
    pub(super) segments: Vec<Seg>,
}

#[derive(Default)]
pub(super) struct Seg {
    /// In index order; `first` positions are consecutive.
    batches: Vec<BatchRef>,
    pub(super) records: u32,
    bytes: u64,
}

#[derive(Clone, Copy)]
struct BatchRef {
    r: LogRef,
    index: u32,
    first: u32,
    count: u32,
}

impl Stream {
    fn new(shape: StreamShape) -> Stream {
        let streamlets = (0..shape.streamlets)
            .map(|_| Streamlet {
                logs: (0..shape.logs).map(|_| Mutex::new(LogHead::default())).collect(),
                groups: RwLock::new(BTreeMap::new()),
                next_group: AtomicU64::new(0),
                trimmed: AtomicU64::new(0),
                meta: Mutex::new(()),
            })
            .collect();
        Stream { shape, streamlets, dropped: AtomicBool::new(false) }
    }

    pub(super) fn streamlet(&self, streamlet: u32) -> Result<&Streamlet, StreamError> {
        self.streamlets
            .get(streamlet as usize)
            .ok_or(StreamError::NoSuchStreamlet { streamlet, streamlets: self.shape.streamlets })
    }

    pub(super) fn timed_out(&self, g: &Group, now_ms: u64) -> bool {
        self.shape.group_timeout_ms > 0 && now_ms.saturating_sub(g.opened_ms) >= self.shape.group_timeout_ms
    }
}

impl Streamlet {
    pub(super) fn group(&self, streamlet: u32, group: u64) -> Result<Arc<RwLock<Group>>, StreamError> {
        let groups = self.groups.read();
        if let Some(g) = groups.get(&group) {
            return Ok(g.clone());
        }
        let first = self.trimmed.load(Ordering::Acquire);
        if group < first {
            let first = groups.keys().next().copied().unwrap_or(first);
            return Err(StreamError::Trimmed { streamlet, group, first });
        }
        Err(StreamError::NoSuchGroup { streamlet, group })
    }
}

/// Where the next batch of a log goes.
enum Placement {
    /// The active group's last segment.
    Same,
    /// A new segment of the active group.
    NewSegment,
    /// A new group (closing the active one, if any).
    NewGroup(u64),
}

impl Seg {
    fn push(&mut self, r: LogRef, count: u32, bytes: u64) -> u32 {
        let index = self.batches.len() as u32;
        let first = self.records;
        self.batches.push(BatchRef { r, index, first, count });
        self.records += count;
        self.bytes += bytes;
        first
    }

    /// Inserts a replayed batch in index order; false if it is here already.
    fn insert(&mut self, r: LogRef, index: u32, count: u32, bytes: u64) -> bool {
        let Err(at) = self.batches.binary_search_by_key(&index, |b| b.index) else {
            return false;
        };
        self.batches.insert(at, BatchRef { r, index, first: 0, count });
        let mut first = if at == 0 { 0 } else { self.batches[at - 1].first + self.batches[at - 1].count };
        for b in &mut self.batches[at..] {
            b.first = first;
            first += b.count;
        }
        self.records += count;
        self.bytes += bytes;
        true
    }
}

impl Inner {
    pub(super) fn stream(&self, table: TableId) -> Result<Arc<Stream>, StreamError> {
        self.streams.map.read().get(&table).cloned().ok_or(StreamError::UnknownStream(table))
    }

    /// Appends one encoded batch entry, waiting for the cleaner while
    /// memory is short; its reference.
    fn append_batch(&self, b: &Batch, refs: &mut Vec<LogRef>) -> Result<LogRef, StreamError> {
        let started = Instant::now();
        while self.try_append(b, Tier::Write, refs).is_err() {
            self.wait_for_space(started).map_err(|_| StreamError::OutOfMemory)?;
        }
        self.streams.bytes.fetch_add(b.buf.len() as u64, Ordering::Relaxed);
        Ok(refs[0])
    }
}

impl Store {
    /// Makes `table` (which must exist) a stream of `shape`. Creating it
    /// again with the same shape does nothing.
    pub fn create_stream(&self, table: TableId, shape: StreamShape) -> Result<(), StreamError> {
        shape.check().map_err(StreamError::InvalidShape)?;
        self.inner.check_table(table).map_err(|_| StreamError::UnknownStream(table))?;
        let mut map = self.inner.streams.map.write();
        match map.get(&table) {
            Some(s) if s.shape == shape => Ok(()),
            Some(s) => Err(StreamError::ShapeMismatch { existing: s.shape }),
            None => {
                map.insert(table, Arc::new(Stream::new(shape)));
                Ok(())
            }
        }
    }

    /// Forgets stream `table` (if it is one): its batches become dead, so
    /// the log segments holding only dead batches may be cleaned. Part of
    /// [`Store::drop_table`].
    pub(super) fn drop_stream(&self, table: TableId) {
        let inner = &self.inner;
        let Some(stream) = inner.streams.map.write().remove(&table) else {
            return;
        };
        let _pin = inner.epochs.pin();
        for sl in stream.streamlets.iter() {
            let heads: Vec<_> = sl.logs.iter().map(|l| l.lock()).collect();
            stream.dropped.store(true, Ordering::Release);
            for g in sl.groups.read().values() {
                for seg in &g.read().segments {
                    for b in &seg.batches {
                        let len = inner.segs.entry(b.r).len() as u64;
                        inner.segs.slot(b.r.slot()).stream_bytes.fetch_sub(len, Ordering::AcqRel);
                        inner.streams.bytes.fetch_sub(len, Ordering::Relaxed);
                    }
                }
            }
            drop(heads);
        }
    }

    /// The shape of stream `table`.
    pub fn stream_shape(&self, table: TableId) -> Result<StreamShape, StreamError> {
        Ok(self.inner.stream(table)?.shape)
    }

    /// Appends `records` to `streamlet` as one batch entry, in log
    /// `producer % logs` of its MultiLog, after every batch that log
    /// appended before. Records of one producer are therefore in the
    /// order of its produces, in the groups of one log.
    pub fn produce<R: AsRef<[u8]>>(
        &self,
        table: TableId,
        streamlet: u32,
        producer: u64,
        records: &[R],
    ) -> Result<Produced, StreamError> {
        let inner = &self.inner;
        let stream = inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        if records.is_empty() || records.len() > MAX_BATCH_RECORDS {
            return Err(StreamError::InvalidBatch(format!(
                "{} records (a batch has 1-{MAX_BATCH_RECORDS})",
                records.len()
            )));
        }
        let bytes = format::batch_records_len(records);
        if bytes > inner.config.max_value_bytes {
            return Err(StreamError::InvalidBatch(format!(
                "{bytes} bytes of records exceed the maximum of {}",
                inner.config.max_value_bytes
            )));
        }
        let log = (producer % stream.shape.logs as u64) as u32;
        let mut head = sl.logs[log as usize].lock();
        if stream.dropped.load(Ordering::Acquire) {
            return Err(StreamError::UnknownStream(table));
        }
        let now = inner.log.now_ms();
        let shape = &stream.shape;
        let (placement, place) = {
            let active = head.active.as_ref().map(|g| g.read());
            let placement = match &active {
                Some(g) if !stream.timed_out(g, now) => {
                    let last = g.segments.last().expect("a group has a segment");
                    if last.bytes == 0 || last.bytes + bytes as u64 <= shape.segment_bytes as u64 {
                        Placement::Same
                    } else if (g.segments.len() as u32) < shape.group_segments {
                        Placement::NewSegment
                    } else {
                        Placement::NewGroup(sl.next_group.fetch_add(1, Ordering::AcqRel))
                    }
                }
                _ => Placement::NewGroup(sl.next_group.fetch_add(1, Ordering::AcqRel)),
            };
            let (group, segment, index) = match (&placement, &active) {
                (Placement::Same, Some(g)) => {
                    let s = g.segments.len() - 1;
                    (g.id, s as u32, g.segments[s].batches.len() as u32)
                }
                (Placement::NewSegment, Some(g)) => (g.id, g.segments.len() as u32, 0),
                (Placement::NewGroup(id), _) => (*id, 0, 0),
                _ => unreachable!("only a new group is placed without an active group"),
            };
            (placement, BatchPlace { table, streamlet, log, group, segment, index })
        };
        let r = SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            b.clear();
            format::encode_stream_batch(&mut b.buf, &place, records);
            b.mark();
            inner.append_batch(b, refs)
        })?;
        let count = records.len() as u32;
        let first = match placement {
            Placement::NewGroup(id) => {
                if let Some(old) = head.active.take() {
                    old.write().closed = true;
                }
                let mut seg = Seg::default();
                let first = seg.push(r, count, bytes as u64);
                let g = Group { id, log, opened_ms: now, last_ms: now, closed: false, segments: vec![seg] };
                let g = Arc::new(RwLock::new(g));
                sl.groups.write().insert(id, g.clone());
                head.active = Some(g);
                first
            }
            Placement::NewSegment | Placement::Same => {
                let mut g = head.active.as_ref().expect("placed in the active group").write();
                g.last_ms = now;
                if matches!(placement, Placement::NewSegment) {
                    g.segments.push(Seg::default());
                }
                g.segments.last_mut().expect("a group has a segment").push(r, count, bytes as u64)
            }
        };
        inner.counters.writes.fetch_add(1, Ordering::Relaxed);
        Ok(Produced { first: StreamOffset { group: place.group, segment: place.segment, position: first }, count })
    }

    /// Reads records of one group of `streamlet` from `from`, passing each
    /// to `visit` in order, until `max_bytes` (each record counting its
    /// bytes and [`RECORD_OVERHEAD`]; at least one record if there is one,
    /// whatever its size) or the end of the segment holding the first
    /// record: the records returned are the `records` just before `next`
    /// in one segment. A read at the end of a segment starts at the next
    /// one; a read never crosses into another group.
    pub fn consume(
        &self,
        table: TableId,
        streamlet: u32,
        from: StreamOffset,
        max_bytes: usize,
        mut visit: impl FnMut(&[u8]),
    ) -> Result<Consumed, StreamError> {
        let inner = &self.inner;
        let stream = inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        let group = sl.group(streamlet, from.group)?;
        self.close_if_timed_out(&stream, sl, &group);
        // Retention may remove the group at any time, and the cleaner then
        // free its segments once the readers pinned before are done. So
        // pin, then check it is still in the index: if it is, it was
        // removed (if at all) after the pin, and its segments outlive
        // this read. The same for a drop of the stream.
        let _pin = inner.epochs.pin();
        inner.stream(table)?;
        sl.group(streamlet, from.group)?;
        let g = group.read();
        let seg_ok = (from.segment as usize) < g.segments.len();
        if !seg_ok || from.position > g.segments[from.segment as usize].records {
            return Err(StreamError::InvalidOffset(from));
        }
        let mut at = from;
        let (mut bytes, mut n) = (0usize, 0u32);
        'segments: loop {
            let seg = &g.segments[at.segment as usize];
            if at.position >= seg.records {
                // A read returns records of one segment, so the reader
                // knows each one's offset: the last is just before `next`.
                if n == 0 && (at.segment as usize) + 1 < g.segments.len() {
                    at.segment += 1;
                    at.position = 0;
                    continue;
                }
                break;
            }
            let start = seg.batches.partition_point(|b| b.first + b.count <= at.position);
            for b in &seg.batches[start..] {
                let raw = inner.segs.entry(b.r);
                let view = format::parse_stream_batch(&raw).expect("a stream index points at a batch entry");
                for rec in view.iter().skip((at.position - b.first) as usize) {
                    let cost = rec.len() + RECORD_OVERHEAD;
                    if n > 0 && bytes + cost > max_bytes {
                        break 'segments;
                    }
                    visit(rec);
                    bytes += cost;
                    n += 1;
                    at.position += 1;
                }
            }
        }
        let last = g.segments.len() - 1;
        let end_of_group = g.closed && at.segment as usize == last && at.position == g.segments[last].records;
        Ok(Consumed { next: at, records: n, end_of_group })
    }

    /// Closes `group` if its time is up. Under its log's append lock, so no
    /// produce is placing a batch in it meanwhile: once a reader sees it
    /// closed, it holds every record it will ever hold.
    pub(super) fn close_if_timed_out(&self, stream: &Stream, sl: &Streamlet, group: &Arc<RwLock<Group>>) {
        let (log, open) = {
            let g = group.read();
            (g.log, !g.closed && stream.timed_out(&g, self.inner.log.now_ms()))
        };
        if !open {
            return;
        }
        let mut head = sl.logs[log as usize].lock();
        group.write().closed = true;
        if head.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, group)) {
            head.active = None;
        }
    }

    /// The groups of `streamlet` with ids from `from_group`, at most `max`,
    /// in id order.
    pub fn stream_groups(
        &self,
        table: TableId,
        streamlet: u32,
        from_group: u64,
        max: usize,
    ) -> Result<Vec<GroupInfo>, StreamError> {
        let stream = self.inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        let groups: Vec<Arc<RwLock<Group>>> =
            sl.groups.read().range(from_group..).take(max).map(|(_, g)| g.clone()).collect();
        let now = self.inner.log.now_ms();
        Ok(groups
            .iter()
            .map(|g| {
                let g = g.read();
                GroupInfo {
                    id: g.id,
                    log: g.log,
                    segments: g.segments.len() as u32,
                    records: g.segments.iter().map(|s| s.records as u64).sum(),
                    bytes: g.segments.iter().map(|s| s.bytes).sum(),
                    closed: g.closed || stream.timed_out(&g, now),
                }
            })
            .collect())
    }

    /// Places a replayed batch entry (`raw`, decoded as `b`) in its stream,
    /// appending it to this store's log. A batch already in place is
    /// skipped. Every group a replay touches is closed: appends after a
    /// recovery open new groups, with higher ids than every recovered one,
    /// so reading a log's groups in id order keeps each producer's order.
    pub(super) fn replay_batch(
        &self,
        replay: &mut Replay,
        b: &StreamBatchView<'_>,
        raw: &[u8],
    ) -> Result<(), ReplayError> {
        let inner = &self.inner;
        let p = b.place;
        let stream = match inner.stream(p.table) {
            Ok(s) => s,
            // A dropped stream's batches (the registry creates every stream
            // it knows before a replay).
            Err(_) if inner.check_table(p.table).is_err() => {
                replay.report.batches_skipped += 1;
                return Ok(());
            }
            Err(e) => return Err(ReplayError::Stream(e)),
        };
        let sl = stream.streamlet(p.streamlet).map_err(ReplayError::Stream)?;
        if p.log >= stream.shape.logs {
            return Err(ReplayError::Stream(StreamError::InvalidBatch(format!(
                "batch of log {} in a stream of {} logs per streamlet",
                p.log, stream.shape.logs
            ))));
        }
        if p.segment >= stream.shape.group_segments {
            return Err(ReplayError::Stream(StreamError::InvalidBatch(format!(
                "batch of segment {} in a stream of {} segments per group",
                p.segment, stream.shape.group_segments
            ))));
        }
        let mut head = sl.logs[p.log as usize].lock();
        if p.group < sl.trimmed.load(Ordering::Acquire) {
            replay.report.batches_skipped += 1;
            return Ok(());
        }
        let group = sl
            .groups
            .write()
            .entry(p.group)
            .or_insert_with(|| {
                let now = inner.log.now_ms();
                let g =
                    Group { id: p.group, log: p.log, opened_ms: 0, last_ms: now, closed: true, segments: Vec::new() };
                Arc::new(RwLock::new(g))
            })
            .clone();
        let mut g = group.write();
        if g.log != p.log {
            return Err(ReplayError::Stream(StreamError::InvalidBatch(format!(
                "batch of group {} in log {}, whose group is in log {}",
                p.group, p.log, g.log
            ))));
        }
        g.closed = true;
        if head.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &group)) {
            head.active = None;
        }
        while g.segments.len() <= p.segment as usize {
            g.segments.push(Seg::default());
        }
        let seg = &mut g.segments[p.segment as usize];
        if seg.batches.binary_search_by_key(&p.index, |x| x.index).is_ok() {
            replay.report.batches_skipped += 1;
            return Ok(());
        }
        let r = SCRATCH.with(|cell| {
            let (batch, refs) = &mut *cell.borrow_mut();
            batch.clear();
            batch.buf.extend_from_slice(raw);
            batch.mark();
            inner.append_batch(batch, refs)
        });
        let r = r.map_err(|_| ReplayError::Store(StoreError::OutOfMemory))?;
        seg.insert(r, p.index, b.count, b.records.len() as u64);
        sl.next_group.fetch_max(p.group + 1, Ordering::AcqRel);
        replay.report.batches_replayed += 1;
        Ok(())
    }
}

impl Group {
    fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }
}

/// Retention (`docs/streams.md`, "Retention").
impl Store {
    /// The streamlets whose oldest groups `limits` removes now:
    /// (stream, streamlet, id of the first group kept). Groups go in id
    /// order, oldest first, and only closed ones (or ones past their
    /// timeout): an open group stops its streamlet's trim.
    pub fn stream_retention_due(&self, limits: Retention) -> Vec<(TableId, u32, u64)> {
        if limits.is_none() {
            return Vec::new();
        }
        let now = self.inner.log.now_ms();
        let streams: Vec<(TableId, Arc<Stream>)> =
            self.inner.streams.map.read().iter().map(|(t, s)| (*t, s.clone())).collect();
        let mut due = Vec::new();
        for (table, stream) in streams {
            for (i, sl) in stream.streamlets.iter().enumerate() {
                let groups = sl.groups.read();
                let mut total: u64 = groups.values().map(|g| g.read().bytes()).sum();
                let mut keep = None;
                let mut last = None;
                for (id, g) in groups.iter() {
                    let g = g.read();
                    let closed = g.closed || stream.timed_out(&g, now);
                    let old = limits.age_ms > 0 && now.saturating_sub(g.last_ms) >= limits.age_ms;
                    let big = limits.bytes > 0 && total > limits.bytes;
                    if !closed || !(old || big) {
                        keep = Some(*id);
                        break;
                    }
                    total -= g.bytes();
                    last = Some(*id);
                }
                if let Some(keep) = keep.or(last.map(|l| l + 1)) {
                    if keep > sl.trimmed.load(Ordering::Acquire) && last.is_some() {
                        due.push((table, i as u32, keep));
                    }
                }
            }
        }
        due
    }

    /// Makes streamlet `streamlet`'s trim point `keep` durable-to-be: an
    /// object of the stream's table under the streamlet's key holding it
    /// with the consumer names' offsets (`stream_meta`), which a replay
    /// applies
    /// ([`Store::finish_replay`]). The caller waits until the log is
    /// durable past it before [`Store::trim_stream`], so that no replay can
    /// bring back some of the groups below `keep` without the point that
    /// removes them. Object requests of clients cannot reach a stream's
    /// table, so no client can write it.
    pub fn mark_stream_trimmed(&self, table: TableId, streamlet: u32, keep: u64) -> Result<Version, StreamError> {
        self.write_trim_point(table, streamlet, keep)
    }

    /// Removes streamlet `streamlet`'s groups below `keep` from the index,
    /// stopping at the first that is still open: their batches become
    /// dead, so the log segments holding only dead data may be cleaned
    /// (and their replicas freed). Consumes of them then answer
    /// [`StreamError::Trimmed`]. Returns the groups removed.
    pub fn trim_stream(&self, table: TableId, streamlet: u32, keep: u64) -> Result<usize, StreamError> {
        let inner = &self.inner;
        let stream = inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        let now = inner.log.now_ms();
        let below: Vec<Arc<RwLock<Group>>> = sl.groups.read().range(..keep).map(|(_, g)| g.clone()).collect();
        let mut keep = keep;
        for group in &below {
            // Closed under its log's append lock, as a timeout closes it:
            // no produce places a batch in it once it is gone.
            let log = group.read().log;
            let mut head = sl.logs[log as usize].lock();
            let mut g = group.write();
            if !g.closed && !stream.timed_out(&g, now) {
                keep = g.id;
                break;
            }
            g.closed = true;
            if head.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, group)) {
                head.active = None;
            }
        }
        let removed = {
            let mut groups = sl.groups.write();
            let kept = groups.split_off(&keep);
            sl.trimmed.fetch_max(keep, Ordering::AcqRel);
            std::mem::replace(&mut *groups, kept)
        };
        let _pin = inner.epochs.pin();
        for g in removed.values() {
            for seg in &g.read().segments {
                for b in &seg.batches {
                    let len = inner.segs.entry(b.r).len() as u64;
                    inner.segs.slot(b.r.slot()).stream_bytes.fetch_sub(len, Ordering::AcqRel);
                    inner.streams.bytes.fetch_sub(len, Ordering::Relaxed);
                }
            }
        }
        Ok(removed.len())
    }

    /// The id below which streamlet `streamlet`'s groups were removed by
    /// retention (0: none were).
    pub fn stream_trimmed(&self, table: TableId, streamlet: u32) -> Result<u64, StreamError> {
        Ok(self.inner.stream(table)?.streamlet(streamlet)?.trimmed.load(Ordering::Acquire))
    }

    /// After a replay: applies every streamlet's trim point found in the
    /// store, removing the groups a replay brought back below it.
    pub(super) fn apply_trim_points(&self) {
        let streams: Vec<(TableId, Arc<Stream>)> =
            self.inner.streams.map.read().iter().map(|(t, s)| (*t, s.clone())).collect();
        for (table, stream) in streams {
            for i in 0..stream.shape.streamlets {
                if let Some(keep) = self.stored_trim_point(table, i).filter(|&k| k > 0) {
                    let _ = self.trim_stream(table, i, keep);
                }
            }
        }
    }
}

impl Store {
    /// [`Store::check_invariants`] of the streams: every batch the index
    /// references is a stream batch entry in a segment of the log, at the
    /// place the index has it, with the count it has; first positions are
    /// consecutive; segment and total counters match. Returns the batch
    /// bytes per slot, which each slot's `stream_bytes` must equal.
    pub(super) fn check_streams(&self, member_slots: &HashMap<u32, SegmentId>) -> Result<HashMap<u32, u64>, String> {
        let inner = &self.inner;
        let mut per_slot: HashMap<u32, u64> = HashMap::new();
        let mut total = 0u64;
        let streams: Vec<(TableId, Arc<Stream>)> =
            inner.streams.map.read().iter().map(|(t, s)| (*t, s.clone())).collect();
        for (table, stream) in streams {
            for (si, sl) in stream.streamlets.iter().enumerate() {
                let trimmed = sl.trimmed.load(Ordering::Acquire);
                for (gid, g) in sl.groups.read().iter() {
                    let g = g.read();
                    if *gid < trimmed {
                        return Err(format!(
                            "stream {table} streamlet {si}: group {gid} is below the trim point {trimmed}"
                        ));
                    }
                    if g.id != *gid
                        || g.log >= stream.shape.logs
                        || g.segments.len() > stream.shape.group_segments as usize
                    {
                        return Err(format!("stream {table} streamlet {si}: group {gid} is malformed"));
                    }
                    for (segi, seg) in g.segments.iter().enumerate() {
                        let (mut records, mut bytes) = (0u32, 0u64);
                        for b in &seg.batches {
                            let at =
                                format!("stream {table} streamlet {si} group {gid} segment {segi} batch {}", b.index);
                            if !member_slots.contains_key(&b.r.slot()) {
                                return Err(format!("{at}: reference {:?} outside the log", b.r));
                            }
                            let raw = inner.segs.entry(b.r);
                            let Ok((Entry::StreamBatch(v), len)) = format::decode(&raw) else {
                                return Err(format!("{at}: reference {:?} is not a stream batch", b.r));
                            };
                            let want = BatchPlace {
                                table,
                                streamlet: si as u32,
                                log: g.log,
                                group: *gid,
                                segment: segi as u32,
                                index: b.index,
                            };
                            if v.place != want || v.count != b.count || b.first != records {
                                return Err(format!(
                                    "{at}: entry {:?} x{} at {} in the index",
                                    v.place, v.count, b.first
                                ));
                            }
                            records += b.count;
                            bytes += v.records.len() as u64;
                            *per_slot.entry(b.r.slot()).or_default() += len as u64;
                            total += len as u64;
                        }
                        if (records, bytes) != (seg.records, seg.bytes) {
                            return Err(format!(
                                "stream {table} streamlet {si} group {gid} segment {segi}: counters {:?} != recount {:?}",
                                (seg.records, seg.bytes),
                                (records, bytes)
                            ));
                        }
                    }
                }
            }
        }
        let have = inner.streams.bytes.load(Ordering::Relaxed);
        if have != total {
            return Err(format!("stream bytes {have} != recount {total}"));
        }
        Ok(per_slot)
    }
}
