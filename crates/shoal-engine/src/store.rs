//! The store: the public face of a master's memory. Objects addressed by
//! (table id, key), with versions, reject rules, multi-operations,
//! enumeration, statistics and replay.
//!
//! Concurrency: reads pin an epoch and take no lock. A write locks its key's
//! hash table stripe, appends to the head (serialised by the head lock) and
//! updates the hash table before unlocking. The cleaner takes the same
//! stripe locks to relocate objects. When memory is short a write releases
//! its locks, wakes the cleaner and waits; it is refused with
//! [`StoreError::OutOfMemory`] only when the cleaner finds nothing to free,
//! or after [`StoreConfig::write_wait`].

use crate::cidtable::CidTable;
use crate::cleaner::{self, CleanerState};
use crate::config::{ConfigError, Eviction, StoreConfig};
use crate::counter;
use crate::epoch::Epochs;
use crate::expiry::{self, SweepState};
use crate::format::{self, Entry};
use crate::hashtable::{HashTable, SlotPos};
use crate::log::{Batch, Log, LogObserver, NoSpace};
use crate::pool::{self, Pool, Tier};
use crate::segment::{LogRef, Segments};
use parking_lot::{Condvar, Mutex, RwLock};
pub use shoal_common::RejectRules;
use shoal_common::{key_hash, ChunkId, SegmentId, TableId, UnixMillis, Version};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

mod chunks;
pub(crate) use chunks::RUN_PAYLOAD_BYTES;
mod stream_meta;
mod streams;
mod txn;
pub use stream_meta::{Committed, ConsumerHead, MAX_CONSUMER_NAME, MAX_CONSUMER_NAMES};
pub use streams::{Consumed, GroupInfo, Produced, Retention, StreamError, MAX_BATCH_RECORDS, RECORD_OVERHEAD};
pub use txn::{Commit, Txn};

/// Applies reject rules to an object's current version (`None`: absent).
fn check_rules(rules: &RejectRules, current: Option<Version>) -> Result<(), StoreError> {
    match current {
        None if rules.doesnt_exist => Err(StoreError::ObjectDoesntExist),
        None => Ok(()),
        Some(v) if rules.exists => Err(StoreError::ObjectExists { version: v }),
        Some(v) if rules.version_le_given && v <= rules.given_version => Err(StoreError::WrongVersion { version: v }),
        Some(v) if rules.version_ne_given && v != rules.given_version => Err(StoreError::WrongVersion { version: v }),
        Some(_) => Ok(()),
    }
}

/// Why an operation was refused. Nothing in the store changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The table id is not one of this store's tables.
    UnknownTable(TableId),
    /// The key is longer than the configured maximum (64 KiB by default).
    KeyTooLarge { len: usize, max: usize },
    /// The value is longer than the configured maximum.
    ValueTooLarge { len: usize, max: usize },
    /// A reject rule: the object does not exist.
    ObjectDoesntExist,
    /// A reject rule: the object exists (with this version).
    ObjectExists { version: Version },
    /// A reject rule on the version failed; the object's current version.
    WrongVersion { version: Version },
    /// `increment` on a value that is not 8 bytes.
    NotAnInteger,
    /// `increment` would overflow a signed 64-bit integer.
    Overflow,
    /// Live data and the tombstones that must be kept fill the memory.
    OutOfMemory,
    /// An all-or-nothing multi-write repeats a key or has more than
    /// [`MAX_ATOMIC_BATCH`] items.
    InvalidBatch,
    /// A transaction used a key it did not declare ([`Store::transaction`]).
    NotInTransaction,
    /// Every 48-bit local chunk id of the node is in use
    /// ([`Store::create_chunks`]).
    ChunkIdsExhausted,
}

/// Most items an all-or-nothing multi-write takes.
pub const MAX_ATOMIC_BATCH: usize = 256;

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::UnknownTable(t) => write!(f, "unknown table {t}"),
            StoreError::KeyTooLarge { len, max } => write!(f, "key of {len} bytes exceeds the maximum of {max}"),
            StoreError::ValueTooLarge { len, max } => write!(f, "value of {len} bytes exceeds the maximum of {max}"),
            StoreError::ObjectDoesntExist => write!(f, "object does not exist"),
            StoreError::ObjectExists { version } => write!(f, "object exists (version {version})"),
            StoreError::WrongVersion { version } => write!(f, "object version is {version}"),
            StoreError::NotAnInteger => write!(f, "value is not a decimal 64-bit integer"),
            StoreError::Overflow => write!(f, "increment overflows a 64-bit integer"),
            StoreError::OutOfMemory => write!(f, "out of memory: live data fills the store"),
            StoreError::InvalidBatch => {
                write!(f, "an all-or-nothing write repeats a key or has more than {MAX_ATOMIC_BATCH} items")
            }
            StoreError::NotInTransaction => write!(f, "the key is not one the transaction declared"),
            StoreError::ChunkIdsExhausted => write!(f, "every local chunk id of this node is in use"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A failure to replay segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// An entry in the verified prefix failed its own checksum (`segment`
    /// is the index of the input segment, 0 for [`Store::replay_entries`];
    /// `offset` is where in the segment or batch the entry starts, 0 when
    /// unknown).
    Corrupt {
        segment: usize,
        offset: usize,
        reason: format::FormatError,
    },
    Store(StoreError),
    /// A stream batch entry names a stream, streamlet or place this store
    /// cannot hold (the stream must be created before its batches replay).
    Stream(StreamError),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Corrupt { segment, offset, reason } => {
                write!(f, "segment #{segment} corrupt at offset {offset}: {reason}")
            }
            ReplayError::Store(e) => write!(f, "replay: {e}"),
            ReplayError::Stream(e) => write!(f, "replay: {e}"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl ReplayError {
    /// The same error, naming segment `index` of a replay's input.
    fn in_segment(self, index: usize) -> ReplayError {
        match self {
            ReplayError::Corrupt { offset, reason, .. } => ReplayError::Corrupt { segment: index, offset, reason },
            other => other,
        }
    }
}

/// What a write does to the object's expiry time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expiry {
    /// The object never expires (an expiry the key had is cleared).
    #[default]
    Never,
    /// The object expires at this wall-clock time (it is expired from then on).
    At(UnixMillis),
    /// The object keeps the expiry of the object it replaces, none if the
    /// key is missing or expired (Redis's KEEPTTL; increments do this).
    Keep,
}

impl Expiry {
    /// The expiry time a write gives its object, `kept` being the expiry of
    /// the live object it replaces (none if missing or expired).
    fn resolve(self, kept: Option<UnixMillis>) -> Option<UnixMillis> {
        match self {
            Expiry::Never => None,
            Expiry::At(at) => Some(at),
            Expiry::Keep => kept,
        }
    }
}

/// An object's version and expiry time, as a read finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    pub version: Version,
    /// When the object expires; `None`: never.
    pub expiry: Option<UnixMillis>,
}

/// One write of a multi-write.
#[derive(Clone, Debug)]
pub struct WriteOp<'a> {
    pub table: TableId,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub rules: RejectRules,
    pub expiry: Expiry,
}

impl<'a> WriteOp<'a> {
    /// A write of an object that never expires.
    pub fn new(table: TableId, key: &'a [u8], value: &'a [u8], rules: RejectRules) -> WriteOp<'a> {
        WriteOp { table, key, value, rules, expiry: Expiry::Never }
    }
}

/// One object returned by enumeration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumeratedObject {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub version: Version,
}

/// Where an enumeration resumes: the smallest key hash not yet visited.
/// Start with `EnumCursor::START`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnumCursor(pub u64);

impl EnumCursor {
    pub const START: EnumCursor = EnumCursor(0);
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub segments: usize,
    pub bytes_scanned: usize,
    pub objects_replayed: u64,
    pub objects_skipped: u64,
    pub tombstones: u64,
    /// Objects removed at the end by a tombstone of the replay: replayed
    /// before their tombstone arrived, or held by the store before.
    pub objects_removed: u64,
    /// Objects found expired: not installed, and treated as tombstones of
    /// their key up to their version (an older version must not come back).
    pub objects_expired: u64,
    /// Chunk entries installed, and those skipped because the store held
    /// the chunk at a version at least as new or a chunk tombstone killed
    /// them.
    pub chunks_replayed: u64,
    pub chunks_skipped: u64,
    /// Chunks removed by a chunk tombstone of the replay.
    pub chunks_removed: u64,
    /// Stream batch entries placed in their streams, and those skipped
    /// because their place held a batch already.
    pub batches_replayed: u64,
    pub batches_skipped: u64,
}

/// A hasher for keys that are key hashes already (uniform 64-bit values).
#[derive(Default)]
struct HashIsKey(u64);

impl std::hash::Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Most objects a replay writes as one append group.
const REPLAY_GROUP: usize = 256;

/// Objects visited per enumeration step when clearing a table: a step
/// holds the store's epoch, so it stays short.
const CLEAR_STEP: usize = 256;

/// A replay in progress ([`Store::replay_entries`]): the tombstones seen so
/// far and what was done.
#[derive(Debug, Default)]
pub struct Replay {
    /// By key hash: (table, key, newest version a tombstone killed).
    tombs: HashMap<u64, Vec<(TableId, Vec<u8>, Version)>>,
    tables: HashSet<TableId>,
    /// Nodes whose chunks the replay saw (their free lists are rebuilt).
    chunk_nodes: HashSet<u16>,
    /// A chunk migration's replay ([`Replay::for_chunk_migration`]).
    chunk_migration: bool,
    /// The node whose chunks this store creates meanwhile, if any
    /// ([`Replay::creating`]): its free list is left alone.
    creating: Option<u16>,
    pub report: ReplayReport,
}

impl Replay {
    /// A replay of chunks a migration brings (`shoal-server`'s
    /// `migrate.rs`): free lists are left alone at the end (this store may
    /// be creating chunks of the same node meanwhile, and ids it gave away
    /// must stay out of them), and a chunk whose id is live here in another
    /// table is refused (`StoreError::ObjectExists`) rather than replaced:
    /// one id cannot be two chunks in one store.
    pub fn for_chunk_migration() -> Replay {
        Replay { chunk_migration: true, ..Replay::default() }
    }

    /// A replay (a crash recovery's partition) into a store that creates
    /// chunks of `node` while it runs: that node's free list is not rebuilt
    /// at the end (a rebuild could hand out again an id just allocated, or
    /// one that moved to another server). Chunks of `node` replayed here
    /// came back from a server that had taken them over.
    pub fn creating(node: u16) -> Replay {
        Replay { creating: Some(node), ..Replay::default() }
    }

    /// Remembers that every version of (table, key) up to `version` is
    /// dead (`hash` is the key's hash).
    fn kill(&mut self, table: TableId, key: &[u8], version: Version, hash: u64) {
        let same = self.tombs.entry(hash).or_default();
        match same.iter_mut().find(|(t, k, _)| *t == table && k.as_slice() == key) {
            Some(x) => x.2 = x.2.max(version),
            None => same.push((table, key.to_vec(), version)),
        }
    }
}

/// A point-in-time view of the store's statistics. Cheap to take.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreStats {
    pub memory_bytes: u64,
    pub segment_bytes: u64,
    pub seglet_bytes: u64,
    pub seglets_total: u64,
    pub seglets_free: u64,
    pub seglets_in_use: u64,
    pub segments_in_log: u64,
    pub objects: u64,
    /// Live chunks (of every chunk table), and the bytes of their CID
    /// tables (slots, directories and free lists).
    pub chunks: u64,
    pub cid_table_bytes: u64,
    /// Bytes of stream batch entries in the log (live, never cleaned).
    pub stream_bytes: u64,
    /// Bytes of live object and chunk entries (headers, keys and values).
    pub live_bytes: u64,
    /// Bytes of the live objects' keys and values and the live chunks'
    /// payloads alone.
    pub live_key_value_bytes: u64,
    /// Bytes of tombstones believed live.
    pub tombstone_bytes: u64,
    /// live_bytes / bytes of seglets in use: how full the log is.
    pub log_utilisation: f64,
    /// live_bytes / memory_bytes.
    pub memory_utilisation: f64,
    pub hash_table_bytes: u64,
    /// Main buckets of the hash table, and the times it has grown.
    pub hash_table_buckets: u64,
    pub hash_table_growths: u64,
    pub reads: u64,
    pub writes: u64,
    pub removes: u64,
    pub out_of_memory: u64,
    pub compactions: u64,
    pub combined_passes: u64,
    pub segments_compacted: u64,
    pub segments_cleaned: u64,
    pub tombstone_scans: u64,
    pub bytes_relocated: u64,
    pub seglets_freed: u64,
    pub cleaning_ms: u64,
    /// Live objects that carry an expiry time (expired ones not yet
    /// reclaimed included).
    pub expiring_objects: u64,
    /// Objects reclaimed because they expired, by every path: the sweep,
    /// the cleaner, and a remove or overwrite of an expired object
    /// (Redis's `expired_keys`).
    pub expired_keys: u64,
    /// Of those, removed by the expiry sweep (with a tombstone).
    pub expired_swept: u64,
    /// Of those, dropped by the cleaner instead of relocated.
    pub expired_dropped: u64,
    /// Cache mode (`StoreConfig::eviction`): live objects the cleaner
    /// evicted, their entry bytes, and the passes that evicted.
    pub evicted: u64,
    pub evicted_bytes: u64,
    pub eviction_passes: u64,
    /// Free seglets whose memory is given back to the OS now, and the
    /// seglets given back so far (`StoreConfig::target_utilisation`).
    pub seglets_returned_now: u64,
    pub seglets_returned: u64,
    /// Heads the cleaner closed early because they were mostly dead and
    /// the log was above its target (a small store under churn).
    pub heads_rolled: u64,
    /// Sweep passes run, segments they scanned, and their time.
    pub sweep_passes: u64,
    pub sweep_segments_scanned: u64,
    pub sweep_ms: u64,
    /// (bytes appended by clients + bytes relocated) / bytes appended by clients.
    pub write_cost: f64,
    /// Bytes appended by writes, removes and replays (entries, without the
    /// checksum entries), the denominator of `write_cost`.
    pub appended_bytes: u64,
    /// Tombstones appended (of objects and chunks, by overwrites, removes
    /// and replays), and overwrites that appended none because the object
    /// they replaced was in the head with them (`docs/cleaning.md`).
    pub tombstones_written: u64,
    pub tombstones_elided: u64,
    /// Bytes of the pool made resident so far ahead of use by the
    /// populating thread: a few MiB past the memory in use, or with
    /// `StoreConfig::prefault` the whole pool (`memory_bytes` once done).
    pub prefaulted_bytes: u64,
}

/// The store's statistics. Fields are grouped by who updates them, each
/// group on its own cache lines, so that readers, writers and the cleaner
/// (on different cores) do not bounce one line between them.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Counters {
    // Writers (under stripe locks).
    pub objects: AtomicU64,
    pub live_bytes: AtomicU64,
    pub live_kv_bytes: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub removes: AtomicU64,
    pub oom: AtomicU64,
    /// Live objects with an expiry.
    pub expiring: AtomicU64,
    /// Expired objects removed or replaced by a write.
    pub expired_lazily: AtomicU64,
    /// Overwrites that appended no tombstone ([`Inner::elidable`]).
    pub tombstones_elided: AtomicU64,
    _pad_writers: [u64; 6],
    // Readers.
    pub reads: AtomicU64,
    _pad_readers: [u64; 15],
    // The cleaner.
    pub compactions: AtomicU64,
    pub combined: AtomicU64,
    pub segments_compacted: AtomicU64,
    pub segments_cleaned: AtomicU64,
    pub tombstone_scans: AtomicU64,
    pub relocated: AtomicU64,
    pub seglets_freed: AtomicU64,
    pub cleaning_ns: AtomicU64,
    pub expired_dropped: AtomicU64,
    /// Cache mode: objects evicted, their entry bytes, eviction passes.
    pub evicted: AtomicU64,
    pub evicted_bytes: AtomicU64,
    pub eviction_passes: AtomicU64,
    /// Seglets whose memory was given back to the OS (`Pool::trim`).
    pub seglets_returned: AtomicU64,
    /// Heads closed early by the cleaner (`cleaner::roll_dead_head`).
    pub heads_rolled: AtomicU64,
    _pad_cleaner: [u64; 2],
    // The expiry sweep.
    pub expired_swept: AtomicU64,
    pub sweep_passes: AtomicU64,
    pub sweep_segments: AtomicU64,
    pub sweep_ns: AtomicU64,
    _pad_sweep: [u64; 12],
}

/// A table's object counts.
#[derive(Default)]
struct TableCounts {
    objects: AtomicU64,
    /// Bytes of their log entries (as the global `live_bytes` counts them).
    bytes: AtomicU64,
    /// Of those, objects with an expiry.
    expiring: AtomicU64,
    /// Client operations on the table's keys since it was created here
    /// (reads, writes, removes, increments; each item of a batch counts):
    /// what rebalancing evens as load. One relaxed add per operation, on
    /// the counts the table check already looks up.
    ops: AtomicU64,
}

/// What [`Store::on_chunk_gone`] calls for each chunk of a table that
/// stops being live.
pub type ChunkGone = Arc<dyn Fn(TableId, ChunkId) + Send + Sync>;

pub(crate) struct Inner {
    pub config: StoreConfig,
    pub segs: Arc<Segments>,
    pub log: Log,
    pub ht: HashTable,
    /// Where each chunk is: the only reference to a chunk entry.
    pub cids: CidTable,
    /// Told of every chunk that stops being live ([`Store::on_chunk_gone`]).
    pub chunk_gone: std::sync::OnceLock<ChunkGone>,
    /// The streams (`store/streams.rs`).
    pub(crate) streams: streams::Streams,
    pub epochs: Epochs,
    /// The tables, each with its number of objects.
    tables: RwLock<HashMap<TableId, TableCounts>>,
    pub counters: Counters,
    pub cleaner: CleanerState,
    pub sweep: SweepState,
    pub shutdown: AtomicBool,
    /// Bumped after every cleaner pass; writers waiting for memory watch it.
    pub space: (Mutex<u64>, Condvar),
    /// Removals so far, per [`ABSENCE_SLOTS`] slice of the key-hash space
    /// ([`Store::absence_stamp`]); bumped under the key's stripe lock.
    removals: Box<[AtomicU32]>,
    /// Per [`WRITE_SLOTS`] slice of the key-hash space, the log position
    /// ([`LogObserver::position`]) after the last object or tombstone
    /// appended for a key of the slice ([`Store::write_position`]). Raised
    /// under the key's stripe lock *before* the hash table changes, so a
    /// reader that sees an object (or its absence) and then loads the slot
    /// gets a position at or past the append it saw.
    written: Box<[AtomicU64]>,
}

/// Slices of the key-hash space that absence stamps count removals in.
const ABSENCE_SLOTS: usize = 1 << 16;

fn absence_slot(hash: u64) -> usize {
    (hash >> 48) as usize % ABSENCE_SLOTS
}

/// Slices of the key-hash space that write positions are kept for (32 KiB).
const WRITE_SLOTS: usize = 1 << 12;

fn write_slot(hash: u64) -> usize {
    (hash >> 52) as usize % WRITE_SLOTS
}

/// A master's in-memory store. Cheap to share: wrap in an `Arc`.
pub struct Store {
    inner: Arc<Inner>,
    cleaner: Option<JoinHandle<()>>,
    sweeper: Option<JoinHandle<()>>,
    populate: Option<JoinHandle<()>>,
}

thread_local! {
    /// Per-thread buffers of the write path: the entries being appended and
    /// their log references, reused so a write allocates nothing.
    static SCRATCH: std::cell::RefCell<(Batch, Vec<LogRef>)> = std::cell::RefCell::new(Default::default());
}

/// What an update writes: given bytes, the current integer plus a delta,
/// or the current value again (a new expiry time).
#[derive(Clone, Copy)]
enum NewValue<'a> {
    Bytes(&'a [u8]),
    Increment(i64),
    Unchanged,
}

/// A found object: where its slot is, its reference, version, expiry and
/// entry size. It may have expired: see [`Inner::live`].
#[derive(Clone, Copy)]
pub(crate) struct Found {
    pos: SlotPos,
    r: LogRef,
    version: Version,
    expiry: Option<UnixMillis>,
    entry_len: usize,
    kv_len: usize,
}

impl Inner {
    /// Finds the live object (table, key). Caller holds an epoch guard or
    /// the key's stripe lock.
    fn lookup(&self, table: TableId, key: &[u8], hash: u64) -> Option<Found> {
        // The stripe lock keeps the table holding the key's stripe alive,
        // but not an older table the lookup may start from: pin while the
        // table is resolved (the found slot is then safe under the lock).
        let _g = self.epochs.pin();
        let mut out = None;
        self.ht
            .find(hash, |r| {
                let e = self.segs.entry(r);
                match format::parse_object(&e) {
                    Ok(o) if o.table == table && o.key == key => {
                        out = Some((o.version, o.expiry, e.len(), o.key.len() + o.value.len()));
                        true
                    }
                    _ => false,
                }
            })
            .map(|(pos, r)| {
                let (version, expiry, entry_len, kv_len) = out.expect("found");
                Found { pos, r, version, expiry, entry_len, kv_len }
            })
    }

    /// The current wall-clock time, by the store's clock.
    pub(crate) fn now(&self) -> UnixMillis {
        self.config.clock.now()
    }

    /// Whether an object with this expiry has expired. Reads the clock
    /// only for an object that has an expiry.
    pub(crate) fn expired(&self, expiry: Option<UnixMillis>) -> bool {
        expiry.is_some_and(|at| at <= self.now())
    }

    /// `found` if it has not expired: what reads, reject rules and
    /// read-modify-writes see (an expired object is a missing key).
    fn live(&self, found: Option<Found>) -> Option<Found> {
        found.filter(|f| !self.expired(f.expiry))
    }

    fn check_table(&self, table: TableId) -> Result<(), StoreError> {
        if self.tables.read().contains_key(&table) {
            Ok(())
        } else {
            Err(StoreError::UnknownTable(table))
        }
    }

    /// [`Inner::check_table`] for a client operation, which it counts in
    /// the table's `ops`.
    fn count_op(&self, table: TableId) -> Result<(), StoreError> {
        match self.tables.read().get(&table) {
            Some(n) => {
                n.ops.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            None => Err(StoreError::UnknownTable(table)),
        }
    }

    fn check_sizes(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        if key.len() > self.config.max_key_bytes {
            return Err(StoreError::KeyTooLarge { len: key.len(), max: self.config.max_key_bytes });
        }
        if let Some(v) = value {
            if v.len() > self.config.max_value_bytes {
                return Err(StoreError::ValueTooLarge { len: v.len(), max: self.config.max_value_bytes });
            }
        }
        Ok(())
    }

    /// Appends `b`, waiting for the cleaner while memory is short. Caller
    /// holds no stripe lock (it is called again after `NoSpace`).
    fn try_append(&self, b: &Batch, tier: Tier, refs: &mut Vec<LogRef>) -> Result<(), NoSpace> {
        refs.clear();
        let r = self.log.append(b, tier, refs);
        if r.is_ok() {
            let before = self.counters.appended_bytes.fetch_add(b.buf.len() as u64, Ordering::Relaxed);
            cleaner::maybe_wake(self, before, before + b.buf.len() as u64);
        }
        r
    }

    /// [`Inner::try_append`] only if all of `b` lands in the segment in
    /// `slot` ([`Log::append_within`]): Ok(false), nothing appended, if not.
    fn try_append_within(&self, b: &Batch, tier: Tier, refs: &mut Vec<LogRef>, slot: u32) -> Result<bool, NoSpace> {
        refs.clear();
        let r = self.log.append_within(b, tier, refs, slot);
        if r == Ok(true) {
            let before = self.counters.appended_bytes.fetch_add(b.buf.len() as u64, Ordering::Relaxed);
            cleaner::maybe_wake(self, before, before + b.buf.len() as u64);
        }
        r
    }

    /// Whether the overwrite of `f` (found under its key's stripe lock)
    /// may leave out `f`'s tombstone, provided the new object lands in the
    /// same segment, the head (`docs/cleaning.md`, "Overwrites in the head
    /// need no tombstone", has the proof): `f` is in `head`, the head's
    /// slot as last seen ([`Log::head_slot`], read once per batch). Removes
    /// never leave theirs out. The append that leaves it out must go
    /// through [`Inner::try_append_within`] with `head`.
    fn elidable(f: &Found, head: u32) -> bool {
        // While the stripe lock is held `f` stays where it is (the cleaner
        // moves or drops objects under it), so its slot holds its segment.
        f.r.slot() == head
    }

    /// Waits until the cleaner finished a pass after `seen`, or decides it
    /// cannot free memory. Err(OutOfMemory) when there is no hope.
    fn wait_for_space(&self, started: Instant) -> Result<(), StoreError> {
        if started.elapsed() > self.config.write_wait {
            self.counters.oom.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::OutOfMemory);
        }
        if !self.config.cleaner_thread {
            // No cleaner thread: clean inline.
            let freed = cleaner::run_pass(self, false);
            if freed == 0 {
                self.counters.oom.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::OutOfMemory);
            }
            return Ok(());
        }
        let mut passes = self.space.0.lock();
        let seen = *passes;
        let stuck_before = self.cleaner.stuck_at.load(Ordering::Acquire);
        cleaner::request(self);
        self.space.1.wait_for(&mut passes, std::time::Duration::from_millis(200));
        if *passes != seen {
            let stuck = self.cleaner.stuck_at.load(Ordering::Acquire);
            // A pass that freed nothing with less than half the memory
            // live (objects and tombstones) lost a race with writers, not
            // the memory: wait for the next (write_wait bounds the wait).
            let memory = self.segs.pool.total_seglets() as u64 * self.segs.pool.seglet_bytes() as u64;
            let held = self.counters.live_bytes.load(Ordering::Relaxed)
                + self.streams.bytes.load(Ordering::Relaxed)
                + self.log.tomb_bytes.load(Ordering::Relaxed);
            if stuck != stuck_before && stuck == *passes && held >= memory / 2 {
                self.counters.oom.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Writes or overwrites one object.
    fn put(
        &self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
        expiry: Expiry,
    ) -> Result<Version, StoreError> {
        self.check_sizes(key, Some(value))?;
        self.update(table, key, rules, NewValue::Bytes(value), expiry).map(|(v, _)| v)
    }

    /// The write path shared by write, increment and expiry changes: under
    /// the key's stripe lock, checks the rules against the live object (an
    /// expired one counts as missing), appends the new object (and a
    /// tombstone for the one it replaces, expired or not) and installs it.
    /// Returns the new version and, for an increment, the new integer.
    fn update(
        &self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
        value: NewValue<'_>,
        expiry: Expiry,
    ) -> Result<(Version, i64), StoreError> {
        self.count_op(table)?;
        self.check_sizes(key, None)?;
        let hash = key_hash(table, key).0;
        let started = Instant::now();
        // Cleared when the head moved away from the old object between the
        // guess and the append: the next try appends the tombstone.
        let mut may_elide = true;
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let lock = self.ht.lock(hash);
                let found = self.lookup(table, key, hash);
                let live = self.live(found);
                check_rules(&rules, live.map(|f| f.version))?;
                let mut int = itoa::Buffer::new();
                let current;
                let (bytes, new_int) = match value {
                    NewValue::Bytes(v) => (v, 0),
                    NewValue::Increment(delta) => {
                        let old = match live {
                            Some(f) => {
                                let e = self.segs.entry(f.r);
                                let o = format::parse_object(&e).expect("live object");
                                counter::parse(o.value).ok_or(StoreError::NotAnInteger)?
                            }
                            None => 0,
                        };
                        let n = old.checked_add(delta).ok_or(StoreError::Overflow)?;
                        (counter::format(n, &mut int), n)
                    }
                    NewValue::Unchanged => {
                        let f = live.ok_or(StoreError::ObjectDoesntExist)?;
                        current = self.segs.entry(f.r);
                        (format::parse_object(&current).expect("live object").value, 0)
                    }
                };
                let expiry = expiry.resolve(live.and_then(|f| f.expiry));
                let version = self.next_version(found.map(|f| f.version));
                b.clear();
                format::encode_object_with(&mut b.buf, table, version, expiry, key, bytes);
                b.mark();
                let head = self.log.head_slot();
                let within = found.filter(|f| may_elide && Self::elidable(f, head)).map(|_| head);
                if let (Some(f), None) = (found, within) {
                    self.push_tombstone(b, table, key, &f);
                }
                let appended = match within {
                    Some(slot) => self.try_append_within(b, Tier::Write, refs, slot),
                    None => self.try_append(b, Tier::Write, refs).map(|()| true),
                };
                match appended {
                    Ok(true) => {}
                    Ok(false) => {
                        may_elide = false;
                        continue;
                    }
                    Err(NoSpace) => {
                        drop(lock);
                        self.wait_for_space(started)?;
                        continue;
                    }
                }
                if within.is_some() {
                    self.counters.tombstones_elided.fetch_add(1, Ordering::Relaxed);
                }
                let kv_len = key.len() + bytes.len();
                self.install(table, hash, found, refs[0], b.ends[0], kv_len, expiry);
                if found.is_some() && live.is_none() {
                    self.counters.expired_lazily.fetch_add(1, Ordering::Relaxed);
                }
                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                drop(lock);
                self.grow_hash_table();
                return Ok((version, new_int));
            }
        })
    }

    fn next_version(&self, current: Option<Version>) -> Version {
        let safe = self.log.safe_version.load(Ordering::Acquire);
        match current {
            Some(v) => Version(v.0 + 1),
            None => Version(safe.max(1)),
        }
    }

    /// Points the hash table at a newly appended object and keeps the
    /// statistics (stripe lock held).
    #[allow(clippy::too_many_arguments)]
    fn install(
        &self,
        table: TableId,
        hash: u64,
        old: Option<Found>,
        r: LogRef,
        entry_len: usize,
        kv_len: usize,
        expiry: Option<UnixMillis>,
    ) {
        self.stamp_write(hash);
        let c = &self.counters;
        let counts = self.tables.read();
        let per_table = counts.get(&table);
        let expiring_before = old.is_some_and(|f| f.expiry.is_some());
        match old {
            Some(f) => {
                self.ht.set(f.pos, hash, r);
                self.segs.slot(f.r.slot()).live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
                c.live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
                c.live_kv_bytes.fetch_sub(f.kv_len as u64, Ordering::Relaxed);
                if let Some(n) = per_table {
                    n.bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
                }
            }
            None => {
                {
                    // As in `lookup`: insert resolves its table.
                    let _g = self.epochs.pin();
                    self.ht.insert(hash, r);
                }
                c.objects.fetch_add(1, Ordering::Relaxed);
                if let Some(n) = per_table {
                    n.objects.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some(n) = per_table {
            n.bytes.fetch_add(entry_len as u64, Ordering::Relaxed);
        }
        if expiring_before != expiry.is_some() {
            for n in [Some(&c.expiring), per_table.map(|n| &n.expiring)].into_iter().flatten() {
                if expiring_before {
                    n.fetch_sub(1, Ordering::Relaxed);
                } else {
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.segs.slot(r.slot()).live_bytes.fetch_add(entry_len as u64, Ordering::Relaxed);
        c.live_bytes.fetch_add(entry_len as u64, Ordering::Relaxed);
        c.live_kv_bytes.fetch_add(kv_len as u64, Ordering::Relaxed);
    }

    /// A step of the hash table's growth, if it is due (`hashtable.rs`):
    /// called by writers after they released their stripe locks, and by
    /// the cleaner thread.
    pub(crate) fn grow_hash_table(&self) {
        let objects = self.counters.objects.load(Ordering::Relaxed);
        // Most writes: nothing to do, known without pinning.
        if !self.ht.may_need_work(objects) {
            return;
        }
        // The table is resolved from `current`, which a growth may retire.
        let _g = self.epochs.pin();
        let was_growing = self.ht.growth_in_progress();
        self.ht.maintain(objects, |r| self.hash_of(r), |r| self.segs.prefetch_entry(r));
        if !was_growing && self.config.cleaner_thread && self.ht.growth_in_progress() {
            // The cleaner thread moves the rest of the stripes (and frees
            // the old table): a growth ends in one go instead of lasting
            // 4,096 writes with the old table overfull meanwhile.
            cleaner::nudge(self);
        }
    }

    /// The key hash of the object at `r` (live: its stripe is locked).
    pub(crate) fn hash_of(&self, r: LogRef) -> u64 {
        let e = self.segs.entry(r);
        let o = format::parse_object(&e).expect("the hash table references only objects");
        key_hash(o.table, o.key).0
    }

    /// Records that the key of `hash` was just written (an object or a
    /// tombstone appended; the observer has seen it): before the hash
    /// table changes, under the key's stripe lock.
    fn stamp_write(&self, hash: u64) {
        let pos = self.log.position();
        if pos != 0 {
            self.written[write_slot(hash)].fetch_max(pos, Ordering::Release);
        }
    }

    /// Removes the object from the hash table and the statistics (stripe
    /// lock held, `f` found under it; `hash` is its key's) after its
    /// tombstone was appended, or when the cleaner drops it expired. Raises
    /// the safe version above it, so that the key's next object gets a
    /// higher version, and bumps the key's absence stamp.
    pub(crate) fn uninstall(&self, table: TableId, hash: u64, f: Found) {
        self.stamp_write(hash);
        let c = &self.counters;
        self.ht.clear(f.pos);
        self.removals[absence_slot(hash)].fetch_add(1, Ordering::Release);
        self.segs.slot(f.r.slot()).live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
        c.live_bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
        c.live_kv_bytes.fetch_sub(f.kv_len as u64, Ordering::Relaxed);
        c.objects.fetch_sub(1, Ordering::Relaxed);
        if f.expiry.is_some() {
            c.expiring.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(n) = self.tables.read().get(&table) {
            n.objects.fetch_sub(1, Ordering::Relaxed);
            n.bytes.fetch_sub(f.entry_len as u64, Ordering::Relaxed);
            if f.expiry.is_some() {
                n.expiring.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.log.raise_safe_version(Version(f.version.0 + 1));
    }

    /// Adds to `b` the tombstone of `f`, the object of (table, key) that a
    /// write or remove replaces: it names the segment `f` is in now.
    fn push_tombstone(&self, b: &mut Batch, table: TableId, key: &[u8], f: &Found) {
        let seg = self.segs.slot(f.r.slot()).segment_id();
        format::encode_tombstone(&mut b.buf, table, f.version, seg, key);
        b.mark();
    }

    /// The object at `r`, found by the cleaner under the key's stripe lock
    /// at hash table position `pos`.
    pub(crate) fn found_at(&self, pos: SlotPos, r: LogRef, o: &format::ObjectView<'_>, entry_len: usize) -> Found {
        Found { pos, r, version: o.version, expiry: o.expiry, entry_len, kv_len: o.key.len() + o.value.len() }
    }

    /// Removes the object under `rules` (checked against the live object:
    /// an expired one counts as missing). An expired object is removed all
    /// the same (a tombstone is appended) and `None` returned, as for a
    /// missing key.
    fn remove(&self, table: TableId, key: &[u8], rules: RejectRules) -> Result<Option<Version>, StoreError> {
        self.count_op(table)?;
        self.check_sizes(key, None)?;
        let hash = key_hash(table, key).0;
        let started = Instant::now();
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            loop {
                let lock = self.ht.lock(hash);
                let found = self.lookup(table, key, hash);
                let live = self.live(found);
                check_rules(&rules, live.map(|f| f.version))?;
                let Some(f) = found else {
                    return Ok(None);
                };
                b.clear();
                self.push_tombstone(b, table, key, &f);
                if self.try_append(b, Tier::Remove, refs).is_err() {
                    drop(lock);
                    self.wait_for_space(started)?;
                    continue;
                }
                self.uninstall(table, hash, f);
                drop(lock);
                if live.is_none() {
                    self.counters.expired_lazily.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                self.counters.removes.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(f.version));
            }
        })
    }

    /// Removes (table, key) if it is still at `version` and has expired:
    /// the expiry sweep's remove, through the normal path (a tombstone is
    /// appended, so replication carries it). Never waits for memory:
    /// `OutOfMemory` if the tombstone does not fit now. Ok(false) if the
    /// object changed, is gone, or has not expired.
    pub(crate) fn remove_expired(&self, table: TableId, key: &[u8], version: Version) -> Result<bool, StoreError> {
        if self.check_table(table).is_err() {
            return Ok(false);
        }
        let hash = key_hash(table, key).0;
        SCRATCH.with(|cell| {
            let (b, refs) = &mut *cell.borrow_mut();
            let _lock = self.ht.lock(hash);
            let f = match self.lookup(table, key, hash) {
                Some(f) if f.version == version && self.expired(f.expiry) => f,
                _ => return Ok(false),
            };
            b.clear();
            self.push_tombstone(b, table, key, &f);
            if self.try_append(b, Tier::Remove, refs).is_err() {
                return Err(StoreError::OutOfMemory);
            }
            self.uninstall(table, hash, f);
            self.counters.expired_swept.fetch_add(1, Ordering::Relaxed);
            Ok(true)
        })
    }

    /// Reads an object: copies its value into `out` when given. An
    /// expired object is missing. The clock is read only for an object
    /// that has an expiry.
    fn read(
        &self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<ObjectMeta, StoreError> {
        self.count_op(table)?;
        self.check_sizes(key, None)?;
        let hash = key_hash(table, key).0;
        let _g = self.epochs.pin();
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        let mut meta = None;
        self.ht.find(hash, |r| {
            let e = self.segs.entry(r);
            match format::parse_object(&e) {
                Ok(o) if o.table == table && o.key == key => {
                    if !self.expired(o.expiry) {
                        if let Some(out) = out.as_deref_mut() {
                            out.clear();
                            out.extend_from_slice(o.value);
                        }
                        meta = Some(ObjectMeta { version: o.version, expiry: o.expiry });
                    }
                    true
                }
                _ => false,
            }
        });
        check_rules(&rules, meta.map(|m| m.version))?;
        meta.ok_or(StoreError::ObjectDoesntExist)
    }
}

impl Store {
    /// Creates an empty store.
    pub fn new(config: StoreConfig) -> Result<Store, ConfigError> {
        Self::with_observer(config, None)
    }

    /// Creates an empty store whose log reports to `observer`.
    pub fn with_observer(config: StoreConfig, observer: Option<Arc<dyn LogObserver>>) -> Result<Store, ConfigError> {
        config.validate()?;
        let pool =
            Pool::new(config.seglet_bytes, config.seglets() as u32, config.cleaner_reserve(), config.remove_reserve());
        let segs = Arc::new(Segments::new(pool, config.segment_bytes));
        let log = Log::new(segs.clone(), config.log_id, observer);
        let inner = Arc::new(Inner {
            ht: match config.hash_table_buckets {
                Some(n) => HashTable::new(n),
                None => HashTable::growing(),
            },
            cids: CidTable::new(),
            chunk_gone: std::sync::OnceLock::new(),
            streams: Default::default(),
            segs,
            log,
            epochs: Epochs::default(),
            tables: RwLock::new(HashMap::new()),
            counters: Counters::default(),
            cleaner: CleanerState::new(config.eviction),
            sweep: SweepState::default(),
            shutdown: AtomicBool::new(false),
            space: (Mutex::new(0), Condvar::new()),
            removals: (0..ABSENCE_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            written: (0..WRITE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            config,
        });
        let cleaner = if inner.config.cleaner_thread {
            let i = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("shoal-cleaner".into())
                    .spawn(move || cleaner::run(i))
                    .expect("spawn cleaner"),
            )
        } else {
            None
        };
        let sweeper = if inner.config.expiry_sweep_interval.is_zero() {
            None
        } else {
            let i = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("shoal-expiry".into())
                    .spawn(move || expiry::run(i))
                    .expect("spawn expiry sweep"),
            )
        };
        let i = inner.clone();
        let populate = Some(
            std::thread::Builder::new()
                .name("shoal-populate".into())
                .spawn(move || populate(&i))
                .expect("spawn populate"),
        );
        Ok(Store { inner, cleaner, sweeper, populate })
    }

    /// The configuration the store was made with (`eviction` as it was at
    /// start: see [`Store::eviction`]).
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// What a full store does now.
    pub fn eviction(&self) -> Eviction {
        if self.inner.cleaner.evicting.load(Ordering::Relaxed) {
            Eviction::Oldest
        } else {
            Eviction::None
        }
    }

    /// Changes what a full store does, at once (Redis's `CONFIG SET
    /// maxmemory-policy`). Writes waiting for memory see it at the
    /// cleaner's next pass.
    pub fn set_eviction(&self, e: Eviction) {
        self.inner.cleaner.evicting.store(e != Eviction::None, Ordering::Relaxed);
        cleaner::request(&self.inner);
    }

    /// Makes `table` known to the store. Idempotent.
    pub fn create_table(&self, table: TableId) {
        self.inner.tables.write().entry(table).or_default();
    }

    /// Removes every object of `table` (appending tombstones), forgets its
    /// stream if it is one (`store/streams.rs`), and forgets it.
    pub fn drop_table(&self, table: TableId) -> Result<(), StoreError> {
        self.drop_stream(table);
        self.clear_table(table)?;
        self.inner.tables.write().remove(&table);
        Ok(())
    }

    /// Removes every object and chunk of `table`, expired ones included
    /// (appending tombstones), keeping the table. Not atomic: objects and
    /// chunks written concurrently may survive.
    pub fn clear_table(&self, table: TableId) -> Result<(), StoreError> {
        self.clear_chunks(table)?;
        let mut keys = Vec::new();
        let mut cursor = Some(EnumCursor::START);
        while let Some(c) = cursor {
            keys.clear();
            cursor =
                self.enumerate_objects(table, c, u64::MAX, CLEAR_STEP, true, |key, _, _| keys.push(key.to_vec()))?;
            for key in &keys {
                self.inner.remove(table, key, RejectRules::default())?;
            }
        }
        Ok(())
    }

    /// Number of objects in `table`, from a counter (O(1)). Expired objects
    /// count until they are reclaimed (the sweep bounds how long), as
    /// Redis's DBSIZE counts them.
    pub fn table_objects(&self, table: TableId) -> Result<u64, StoreError> {
        self.inner
            .tables
            .read()
            .get(&table)
            .map(|n| n.objects.load(Ordering::Relaxed))
            .ok_or(StoreError::UnknownTable(table))
    }

    /// Bytes of the log entries of `table`'s objects (what `live_bytes` in
    /// [`StoreStats`] counts of them), from a counter (O(1)). Rebalancing
    /// reads it to estimate what a tablet weighs (`docs/migration.md`,
    /// "Rebalancing and drain").
    pub fn table_bytes(&self, table: TableId) -> Result<u64, StoreError> {
        self.inner
            .tables
            .read()
            .get(&table)
            .map(|n| n.bytes.load(Ordering::Relaxed))
            .ok_or(StoreError::UnknownTable(table))
    }

    /// Client operations on `table` since it was created on this store
    /// (reads, writes, removes, increments; each item of a batch counts),
    /// from a counter (O(1)). Servers turn it into a rate that
    /// rebalancing evens (`docs/migration.md`, "Rebalancing and drain").
    pub fn table_ops(&self, table: TableId) -> Result<u64, StoreError> {
        self.inner
            .tables
            .read()
            .get(&table)
            .map(|n| n.ops.load(Ordering::Relaxed))
            .ok_or(StoreError::UnknownTable(table))
    }

    /// Number of objects of `table` that carry an expiry (expired ones not
    /// yet reclaimed included), from a counter.
    pub fn table_expiring(&self, table: TableId) -> Result<u64, StoreError> {
        self.inner
            .tables
            .read()
            .get(&table)
            .map(|n| n.expiring.load(Ordering::Relaxed))
            .ok_or(StoreError::UnknownTable(table))
    }

    pub fn has_table(&self, table: TableId) -> bool {
        self.inner.tables.read().contains_key(&table)
    }

    /// Reads an object's value into `out` (replacing its contents); returns its version.
    pub fn read_into(
        &self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
        out: &mut Vec<u8>,
    ) -> Result<Version, StoreError> {
        self.inner.read(table, key, rules, Some(out)).map(|m| m.version)
    }

    /// [`Store::read_into`] that also returns the object's expiry time.
    pub fn read_meta_into(
        &self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
        out: &mut Vec<u8>,
    ) -> Result<ObjectMeta, StoreError> {
        self.inner.read(table, key, rules, Some(out))
    }

    /// An object's version and expiry time, without its value (a TTL read).
    /// Errors as [`Store::read`].
    pub fn meta(&self, table: TableId, key: &[u8], rules: RejectRules) -> Result<ObjectMeta, StoreError> {
        self.inner.read(table, key, rules, None)
    }

    /// Reads an object. An object whose expiry time has come is missing.
    /// Errors: `UnknownTable`, `KeyTooLarge`, `ObjectDoesntExist`, or a
    /// reject rule's error.
    pub fn read(&self, table: TableId, key: &[u8], rules: RejectRules) -> Result<(Vec<u8>, Version), StoreError> {
        let mut v = Vec::new();
        let meta = self.inner.read(table, key, rules, Some(&mut v))?;
        Ok((v, meta.version))
    }

    /// Creates or overwrites an object without expiry (an expiry the key
    /// had is cleared); returns its new version. Reject rules see an
    /// expired object as missing.
    pub fn write(&self, table: TableId, key: &[u8], value: &[u8], rules: RejectRules) -> Result<Version, StoreError> {
        self.inner.put(table, key, value, rules, Expiry::Never)
    }

    /// [`Store::write`] with an expiry: a time, none, or the replaced
    /// object's ([`Expiry::Keep`]). A time already past writes an object
    /// that reads as missing at once.
    pub fn write_with_expiry(
        &self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
        expiry: Expiry,
    ) -> Result<Version, StoreError> {
        self.inner.put(table, key, value, rules, expiry)
    }

    /// Gives the object a new expiry time (`None`: never expires), keeping
    /// its value: a new version of it is written. Errors as
    /// [`Store::write`], and `ObjectDoesntExist` if the key is missing or
    /// expired.
    pub fn set_expiry(
        &self,
        table: TableId,
        key: &[u8],
        expiry: Option<UnixMillis>,
        rules: RejectRules,
    ) -> Result<Version, StoreError> {
        let expiry = expiry.map_or(Expiry::Never, Expiry::At);
        self.inner.update(table, key, rules, NewValue::Unchanged, expiry).map(|(v, _)| v)
    }

    /// The current time by the store's clock (the one expiry times are
    /// compared with).
    pub fn now(&self) -> UnixMillis {
        self.inner.now()
    }

    /// Removes an object; returns the version it had, or `None` if it did
    /// not exist (and no rule refused that).
    pub fn remove(&self, table: TableId, key: &[u8], rules: RejectRules) -> Result<Option<Version>, StoreError> {
        self.inner.remove(table, key, rules)
    }

    /// Adds `delta` to the object's value read as a counter (decimal ASCII,
    /// [`crate::counter`]; a missing or expired object counts as 0 and is
    /// created). The object
    /// keeps its expiry time. Returns the new value and version.
    pub fn increment(
        &self,
        table: TableId,
        key: &[u8],
        delta: i64,
        rules: RejectRules,
    ) -> Result<(i64, Version), StoreError> {
        let (version, n) = self.inner.update(table, key, rules, NewValue::Increment(delta), Expiry::Keep)?;
        Ok((n, version))
    }

    /// A stamp that changes whenever a key that hashes like (`table`, `key`)
    /// is removed (1 in 65,536 of the key-hash space shares it): with the
    /// key absent both times, an unchanged stamp means it was not created
    /// and removed again in between (WATCH of an absent key). A removal of
    /// another key of the same slice changes it too, so the answer errs
    /// only towards "changed". Read it before checking that the key is absent.
    pub fn absence_stamp(&self, table: TableId, key: &[u8]) -> u32 {
        self.inner.removals[absence_slot(key_hash(table, key).0)].load(Ordering::Acquire)
    }

    /// A log position ([`LogObserver::position`]) at or past the last
    /// append of an object or tombstone of (table, key) by this store's
    /// writes, as seen by a read that ran before this call: once the log
    /// is durable up to it, what that read returned survives a crash.
    /// Shared by every key of a slice of the key-hash space, so it errs
    /// only towards later. 0 without an observer, or for keys of a slice
    /// never written (objects that came by replay are as durable as the
    /// replay, which the caller waits for before serving them).
    pub fn write_position(&self, table: TableId, key: &[u8]) -> u64 {
        self.inner.written[write_slot(key_hash(table, key).0)].load(Ordering::Acquire)
    }

    /// Reads an object under its key's stripe lock and hands `f` the value,
    /// version and expiry (`None`: no live object). No write of the key is
    /// half done meanwhile: every write appended before this call is
    /// installed, and none appends until `f` returns. `f` must be quick
    /// and must not call into the store.
    pub fn read_locked<R>(
        &self,
        table: TableId,
        key: &[u8],
        f: impl FnOnce(Option<(&[u8], Version, Option<UnixMillis>)>) -> R,
    ) -> Result<R, StoreError> {
        let inner = &*self.inner;
        inner.count_op(table)?;
        inner.check_sizes(key, None)?;
        let hash = key_hash(table, key).0;
        let _lock = inner.ht.lock(hash);
        let found = inner.live(inner.lookup(table, key, hash));
        Ok(match found {
            Some(found) => {
                let e = inner.segs.entry(found.r);
                let o = format::parse_object(&e).expect("live object");
                f(Some((o.value, o.version, o.expiry)))
            }
            None => f(None),
        })
    }

    /// Reads several objects; one result per item, in order.
    pub fn multi_read(&self, items: &[(TableId, &[u8])]) -> Vec<Result<(Vec<u8>, Version), StoreError>> {
        items.iter().map(|(t, k)| self.read(*t, k, RejectRules::default())).collect()
    }

    /// Writes several objects as one append group (one checksum, one
    /// replication round). Each item has its own rules and result.
    pub fn multi_write(&self, items: &[WriteOp<'_>]) -> Vec<Result<Version, StoreError>> {
        let inner = &self.inner;
        let mut results: Vec<Option<Result<Version, StoreError>>> = vec![None; items.len()];
        let mut todo: Vec<usize> = Vec::new();
        for (i, op) in items.iter().enumerate() {
            match inner.count_op(op.table).and_then(|_| inner.check_sizes(op.key, Some(op.value))) {
                Ok(()) => todo.push(i),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        // Split into chunks without repeated keys; each chunk is one group.
        let mut start = 0;
        while start < todo.len() {
            let mut seen = HashSet::new();
            let mut end = start;
            while end < todo.len() && end - start < 256 {
                let op = &items[todo[end]];
                if !seen.insert((op.table, op.key)) {
                    break;
                }
                end += 1;
            }
            self.write_group(items, &todo[start..end], &mut results, false, None);
            self.inner.grow_hash_table();
            start = end;
        }
        results.into_iter().map(|r| r.expect("every item answered")).collect()
    }

    /// Writes all of `items` or none: if any item's rules refuse it, or any
    /// item is invalid, nothing is written and the first refusal is returned
    /// with its index. The writes are one append group and become visible
    /// together under the keys' locks. Keys must be distinct, and at most
    /// [`MAX_ATOMIC_BATCH`] items (else `InvalidBatch` at the offending item).
    pub fn multi_write_all_or_nothing(&self, items: &[WriteOp<'_>]) -> Result<Vec<Version>, (usize, StoreError)> {
        let inner = &self.inner;
        let mut seen = HashSet::new();
        for (i, op) in items.iter().enumerate() {
            inner.count_op(op.table).and_then(|_| inner.check_sizes(op.key, Some(op.value))).map_err(|e| (i, e))?;
            if !seen.insert((op.table, op.key)) || i >= MAX_ATOMIC_BATCH {
                return Err((i, StoreError::InvalidBatch));
            }
        }
        let idx: Vec<usize> = (0..items.len()).collect();
        let mut results = vec![None; items.len()];
        self.write_group(items, &idx, &mut results, true, None);
        inner.grow_hash_table();
        if let Some((i, Some(Err(e)))) = results.iter().enumerate().find(|(_, r)| matches!(r, Some(Err(_)))) {
            return Err((i, e.clone()));
        }
        Ok(results.into_iter().map(|r| r.expect("every item written").expect("no refusal")).collect())
    }

    /// Appends the writes `idx` of `items` as one group under their stripe
    /// locks. With `all_or_nothing`, one refused item refuses them all.
    /// With `forced` (a replay), item `i` is written at version `forced[i]`
    /// unless the store holds its key at that version or newer, in which
    /// case it is left alone and answered with the version held.
    fn write_group(
        &self,
        items: &[WriteOp<'_>],
        idx: &[usize],
        results: &mut [Option<Result<Version, StoreError>>],
        all_or_nothing: bool,
        forced: Option<&[Version]>,
    ) {
        let inner = &self.inner;
        let hashes: Vec<u64> = idx.iter().map(|&i| key_hash(items[i].table, items[i].key).0).collect();
        // The group's buckets load in parallel while the locks are taken.
        {
            let _g = inner.epochs.pin();
            for &h in &hashes {
                inner.ht.prefetch(h);
            }
        }
        let mut stripes: Vec<usize> = hashes.iter().map(|h| inner.ht.stripe_of(*h)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let started = Instant::now();
        let mut b = Batch::default();
        let mut refs = Vec::new();
        // As in `Inner::update`: cleared when the head moved meanwhile.
        let mut may_elide = true;
        loop {
            let _locks: Vec<_> = stripes.iter().map(|s| inner.ht.lock_stripe(*s)).collect();
            b.clear();
            // The slot of the head whose objects' tombstones this batch
            // leaves out, and how many it leaves out.
            let (mut within, mut elided) = (None, 0u64);
            let head = inner.log.head_slot();
            // (index in idx, item, found, entry index of the object,
            // version, expiry, whether `found` had expired)
            let mut plan = Vec::new();
            for (j, &i) in idx.iter().enumerate() {
                let op = &items[i];
                let found = inner.lookup(op.table, op.key, hashes[j]);
                let live = inner.live(found);
                if let Err(e) = check_rules(&op.rules, live.map(|f| f.version)) {
                    results[i] = Some(Err(e));
                    continue;
                }
                let version = match (forced, found) {
                    (Some(v), Some(f)) if f.version >= v[i] => {
                        results[i] = Some(Ok(f.version));
                        continue;
                    }
                    (Some(v), _) => v[i],
                    (None, _) => inner.next_version(found.map(|f| f.version)),
                };
                let expiry = op.expiry.resolve(live.and_then(|f| f.expiry));
                format::encode_object_with(&mut b.buf, op.table, version, expiry, op.key, op.value);
                b.mark();
                let obj = b.ends.len() - 1;
                if let Some(f) = found {
                    if may_elide && Inner::elidable(&f, head) {
                        within = Some(head);
                        elided += 1;
                    } else {
                        inner.push_tombstone(&mut b, op.table, op.key, &f);
                    }
                }
                plan.push((j, i, found, obj, version, expiry, found.is_some() && live.is_none()));
            }
            if plan.is_empty() {
                return;
            }
            if all_or_nothing && plan.len() < idx.len() {
                // Items refused by their rules hold their error; the others
                // stay unanswered: nothing is written.
                return;
            }
            let appended = match within {
                Some(slot) => inner.try_append_within(&b, Tier::Write, &mut refs, slot),
                None => inner.try_append(&b, Tier::Write, &mut refs).map(|()| true),
            };
            if appended == Ok(false) {
                may_elide = false;
                for (_, i, ..) in plan {
                    results[i] = None;
                }
                continue;
            }
            if appended.is_err() {
                drop(_locks);
                if let Err(e) = inner.wait_for_space(started) {
                    for (_, i, ..) in plan {
                        results[i] = Some(Err(e.clone()));
                    }
                    return;
                }
                for (_, i, ..) in plan {
                    results[i] = None;
                }
                continue;
            }
            inner.counters.tombstones_elided.fetch_add(elided, Ordering::Relaxed);
            let len_of = |k: usize| b.ends[k] - if k == 0 { 0 } else { b.ends[k - 1] };
            // Overwrites first: an insert may move a slot of its bucket into
            // a new overflow bucket, which would stale the positions found.
            plan.sort_by_key(|p| p.2.is_none());
            for (j, i, found, obj, version, expiry, replaced_expired) in plan {
                let op = &items[i];
                let kv_len = op.key.len() + op.value.len();
                inner.install(op.table, hashes[j], found, refs[obj], len_of(obj), kv_len, expiry);
                if replaced_expired {
                    inner.counters.expired_lazily.fetch_add(1, Ordering::Relaxed);
                }
                inner.counters.writes.fetch_add(1, Ordering::Relaxed);
                results[i] = Some(Ok(version));
            }
            return;
        }
    }

    /// Removes several objects; one result per item, in order.
    pub fn multi_remove(&self, items: &[(TableId, &[u8], RejectRules)]) -> Vec<Result<Option<Version>, StoreError>> {
        items.iter().map(|(t, k, r)| self.remove(*t, k, *r)).collect()
    }

    /// Returns objects of `table` from `cursor` on, at least `max` unless the
    /// table ends (a bucket is never split, so a few more may come), and the
    /// cursor to resume from (`None`: done). Every object present for the
    /// whole enumeration is returned exactly once, even while the cleaner
    /// moves objects and the hash table grows: the cursor is a key-hash
    /// position, and each step returns the objects from it to the end of
    /// the bucket that holds it.
    pub fn enumerate(
        &self,
        table: TableId,
        cursor: EnumCursor,
        max: usize,
    ) -> Result<(Vec<EnumeratedObject>, Option<EnumCursor>), StoreError> {
        let mut out = Vec::new();
        let next = self.enumerate_with(table, cursor, max, |key, value, version| {
            out.push(EnumeratedObject { key: key.to_vec(), value: value.to_vec(), version });
        })?;
        Ok((out, next))
    }

    /// Like [`Store::enumerate`], but hands each object to `visit` (key,
    /// value, version) without copying it, so a caller that needs only keys
    /// copies only keys. `visit` runs while the object's memory is pinned:
    /// it must be quick and must not call back into the store. Expired
    /// objects are left out.
    pub fn enumerate_with(
        &self,
        table: TableId,
        cursor: EnumCursor,
        max: usize,
        visit: impl FnMut(&[u8], &[u8], Version),
    ) -> Result<Option<EnumCursor>, StoreError> {
        self.enumerate_objects(table, cursor, u64::MAX, max, false, visit)
    }

    /// [`Store::enumerate_with`] limited to the key hashes `cursor..=end`
    /// (a tablet): objects whose key hash is outside are left out, and the
    /// walk stops at `end`'s bucket (`None` then), so a tablet's last page
    /// costs its own buckets only.
    pub fn enumerate_range(
        &self,
        table: TableId,
        cursor: EnumCursor,
        end: u64,
        max: usize,
        visit: impl FnMut(&[u8], &[u8], Version),
    ) -> Result<Option<EnumCursor>, StoreError> {
        self.enumerate_objects(table, cursor, end, max, false, visit)
    }

    /// [`Store::enumerate_range`], with the expired objects not yet
    /// reclaimed when `with_expired`.
    fn enumerate_objects(
        &self,
        table: TableId,
        cursor: EnumCursor,
        end: u64,
        max: usize,
        with_expired: bool,
        mut visit: impl FnMut(&[u8], &[u8], Version),
    ) -> Result<Option<EnumCursor>, StoreError> {
        self.walk_range(table, cursor, end, max, with_expired, |_, o| visit(o.key, o.value, o.version))
    }

    /// The raw log entries of the live objects of `table` with key hashes
    /// `cursor..=end`, as [`Store::enumerate_range`] walks them: each is a
    /// whole object entry with its own CRC (expiry and version included),
    /// what [`Store::replay_entries`] takes. Tablet migration's source
    /// (`docs/migration.md`) sends these. `visit` runs with the entry
    /// pinned: it must be quick and must not call back into the store.
    pub fn enumerate_entries_range(
        &self,
        table: TableId,
        cursor: EnumCursor,
        end: u64,
        max: usize,
        mut visit: impl FnMut(&[u8]),
    ) -> Result<Option<EnumCursor>, StoreError> {
        self.walk_range(table, cursor, end, max, false, |e, _| visit(e))
    }

    /// [`Store::enumerate_entries_range`], handing `visit` each entry's
    /// key and version too (a migration's source keeps them, to send only
    /// what changed since).
    pub fn enumerate_versioned_entries_range(
        &self,
        table: TableId,
        cursor: EnumCursor,
        end: u64,
        max: usize,
        mut visit: impl FnMut(&[u8], &[u8], Version),
    ) -> Result<Option<EnumCursor>, StoreError> {
        self.walk_range(table, cursor, end, max, false, |e, o| visit(e, o.key, o.version))
    }

    /// Drops every object of `table` with a key hash in `start..=end` from
    /// the hash table *without* appending tombstones, and returns how many
    /// went. For a tablet this server no longer masters (it moved away,
    /// or a migration to here was given up): its log entries stay where
    /// they are, dead, for the cleaner. Never for a tablet this server
    /// serves: a crash would bring the objects back from the log.
    pub fn forget_range(&self, table: TableId, start: u64, end: u64) -> Result<u64, StoreError> {
        let inner = &self.inner;
        if inner.check_table(table).is_err() {
            return Ok(0);
        }
        let mut keys = Vec::new();
        let mut cursor = Some(EnumCursor(start));
        let mut gone = 0;
        while let Some(c) = cursor {
            keys.clear();
            cursor = self.walk_range(table, c, end, CLEAR_STEP, true, |_, o| keys.push(o.key.to_vec()))?;
            for key in &keys {
                let hash = key_hash(table, key).0;
                let _lock = inner.ht.lock(hash);
                if let Some(f) = inner.lookup(table, key, hash) {
                    inner.uninstall(table, hash, f);
                    gone += 1;
                }
            }
        }
        Ok(gone)
    }

    /// Walks the live objects of `table` with key hashes `cursor..=end`
    /// (expired ones too when `with_expired`), handing each one's entry and
    /// parsed view to `visit`: the walk of [`Store::enumerate_range`].
    fn walk_range(
        &self,
        table: TableId,
        cursor: EnumCursor,
        end: u64,
        max: usize,
        with_expired: bool,
        mut visit: impl FnMut(&[u8], &format::ObjectView<'_>),
    ) -> Result<Option<EnumCursor>, StoreError> {
        let inner = &self.inner;
        inner.check_table(table)?;
        let ht = &inner.ht;
        let mut count = 0;
        let mut at = cursor.0 as u128;
        let mut refs = Vec::new();
        while at <= end as u128 {
            // The bucket holding `at`, in the table that holds it now: a
            // growing table's buckets change size when it grows, so each
            // step covers `at` to the end of whatever bucket holds `at`.
            // Only a bucket that reaches below `at` or past `end` can hold
            // hashes outside them: check those objects' hashes.
            let _g = inner.epochs.pin();
            refs.clear();
            let range = ht.for_each_in_bucket_of(at as u64, |r| refs.push(r));
            let edge = range.first < at || range.next > end as u128 + 1;
            for &r in &refs {
                let e = inner.segs.entry(r);
                if let Ok(o) = format::parse_object(&e) {
                    if o.table == table
                        && (with_expired || !inner.expired(o.expiry))
                        && (!edge || (at..=end as u128).contains(&(key_hash(table, o.key).0 as u128)))
                    {
                        visit(&e, &o);
                        count += 1;
                    }
                }
            }
            at = range.next;
            if count >= max.max(1) {
                break;
            }
        }
        Ok(if at > end as u128 || at >= 1u128 << 64 { None } else { Some(EnumCursor(at as u64)) })
    }

    /// Statistics, read from counters without locks.
    pub fn stats(&self) -> StoreStats {
        let i = &self.inner;
        let c = &i.counters;
        let seglet = i.config.seglet_bytes as u64;
        let total = i.segs.pool.total_seglets() as u64;
        let free = i.segs.pool.free_seglets() as u64;
        let live = c.live_bytes.load(Ordering::Relaxed);
        let appended = c.appended_bytes.load(Ordering::Relaxed);
        let relocated = c.relocated.load(Ordering::Relaxed);
        StoreStats {
            memory_bytes: total * seglet,
            segment_bytes: i.config.segment_bytes as u64,
            seglet_bytes: seglet,
            seglets_total: total,
            seglets_free: free,
            seglets_in_use: total - free,
            segments_in_log: i.log.members_count.load(Ordering::Relaxed),
            objects: c.objects.load(Ordering::Relaxed),
            chunks: i.cids.live.load(Ordering::Relaxed),
            cid_table_bytes: i.cids.memory_bytes(),
            stream_bytes: i.streams.bytes.load(Ordering::Relaxed),
            live_bytes: live,
            live_key_value_bytes: c.live_kv_bytes.load(Ordering::Relaxed),
            tombstone_bytes: i.log.tomb_bytes.load(Ordering::Relaxed),
            log_utilisation: live as f64 / ((total - free).max(1) * seglet) as f64,
            memory_utilisation: live as f64 / (total * seglet) as f64,
            hash_table_bytes: {
                let _g = i.epochs.pin();
                i.ht.memory_bytes() as u64
            },
            hash_table_buckets: {
                let _g = i.epochs.pin();
                i.ht.main_buckets() as u64
            },
            hash_table_growths: i.ht.growth_stats().1,
            reads: c.reads.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            removes: c.removes.load(Ordering::Relaxed),
            out_of_memory: c.oom.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            combined_passes: c.combined.load(Ordering::Relaxed),
            segments_compacted: c.segments_compacted.load(Ordering::Relaxed),
            segments_cleaned: c.segments_cleaned.load(Ordering::Relaxed),
            tombstone_scans: c.tombstone_scans.load(Ordering::Relaxed),
            bytes_relocated: relocated,
            seglets_freed: c.seglets_freed.load(Ordering::Relaxed),
            cleaning_ms: c.cleaning_ns.load(Ordering::Relaxed) / 1_000_000,
            expiring_objects: c.expiring.load(Ordering::Relaxed),
            expired_keys: c.expired_lazily.load(Ordering::Relaxed)
                + c.expired_swept.load(Ordering::Relaxed)
                + c.expired_dropped.load(Ordering::Relaxed),
            expired_swept: c.expired_swept.load(Ordering::Relaxed),
            expired_dropped: c.expired_dropped.load(Ordering::Relaxed),
            evicted: c.evicted.load(Ordering::Relaxed),
            evicted_bytes: c.evicted_bytes.load(Ordering::Relaxed),
            eviction_passes: c.eviction_passes.load(Ordering::Relaxed),
            seglets_returned_now: i.segs.pool.returned_seglets() as u64,
            seglets_returned: c.seglets_returned.load(Ordering::Relaxed),
            heads_rolled: c.heads_rolled.load(Ordering::Relaxed),
            sweep_passes: c.sweep_passes.load(Ordering::Relaxed),
            sweep_segments_scanned: c.sweep_segments.load(Ordering::Relaxed),
            sweep_ms: c.sweep_ns.load(Ordering::Relaxed) / 1_000_000,
            write_cost: if appended == 0 { 1.0 } else { (appended + relocated) as f64 / appended as f64 },
            appended_bytes: appended,
            tombstones_written: i.log.tombstones_appended.load(Ordering::Relaxed),
            tombstones_elided: c.tombstones_elided.load(Ordering::Relaxed),
            prefaulted_bytes: i.segs.pool.populated_bytes() as u64,
        }
    }

    /// Runs one expiry sweep pass now (in this thread), over every segment
    /// that may hold an expired object, without a time budget; returns the
    /// objects it removed. For tests, and for stores without the sweep
    /// thread (`StoreConfig::expiry_sweep_interval` zero).
    pub fn sweep_expired(&self) -> u64 {
        expiry::sweep(&self.inner, None)
    }

    /// Runs cleaner passes now (in this thread) until one frees nothing or
    /// `passes` ran; returns seglets freed. `combined` forces combined cleaning.
    pub fn clean_now(&self, passes: usize, combined: bool) -> usize {
        let mut total = 0;
        for _ in 0..passes {
            let freed = cleaner::run_pass(&self.inner, combined);
            total += freed;
            if freed == 0 {
                break;
            }
        }
        total
    }

    /// Copies of the in-memory bytes of every segment of the log, in id
    /// order (what a backup would hold, for the uncompacted ones).
    pub fn log_segments(&self) -> Vec<(SegmentId, Vec<u8>)> {
        let _pause = self.inner.cleaner.pause();
        self.inner.log.members().into_iter().map(|(id, slot)| (id, self.inner.segs.copy_segment(slot))).collect()
    }

    /// A copy of the current in-memory bytes of segment `id`, or None if it
    /// is not in the log (the cleaner freed it, or it is a survivor not yet
    /// spliced in). For a re-replication of a closed segment whose replicas
    /// were lost (`docs/replication.md`, backup failure).
    ///
    /// The bytes may differ from what backups were sent when the segment
    /// closed: a compacted segment keeps its id but holds only its live
    /// entries, sealed with a checksum of its own. They are still a whole,
    /// verifiable segment (`format::scan` verifies all of them), so a replica
    /// re-created from them may be the compacted form.
    ///
    /// Safe against the cleaner without pausing it: an epoch is pinned
    /// before the slot is looked up, so a slot the cleaner replaces or frees
    /// meanwhile is not reused until the copy is done. Costs one lock of the
    /// log's head (the lookup) and the copy.
    pub fn segment_copy(&self, id: SegmentId) -> Option<Vec<u8>> {
        let _g = self.inner.epochs.pin();
        let slot = self.inner.log.slot_of(id)?;
        Some(self.inner.segs.copy_segment(slot))
    }

    /// Starts a new head segment and returns its id: every entry written
    /// from now on is in that segment or a later one, and any segment
    /// below it was opened before this call. A server that gains a key
    /// range calls it after forgetting what it held of the range
    /// ([`Store::forget_range`]) and before replaying the range's objects,
    /// so that its log's entries of the range below the returned segment
    /// are known to be from before (`docs/migration.md`, "Log positions").
    pub fn roll_head(&self) -> Result<SegmentId, StoreError> {
        self.inner.log.roll_head(Tier::Write).map_err(|_| StoreError::OutOfMemory)
    }

    /// The current safe version: every new object gets at least this.
    pub fn safe_version(&self) -> Version {
        Version(self.inner.log.safe_version.load(Ordering::Acquire))
    }

    /// Rebuilds objects from segments (for example a crashed master's log as
    /// recovery found it): each segment's verified prefix is replayed; the
    /// newest version of each key wins and tombstones are honoured; tables
    /// seen are created; the safe version is raised above every version seen.
    /// Segments may come in any order.
    pub fn replay<'a>(
        &self,
        segments: impl IntoIterator<Item = &'a [u8]> + Clone,
    ) -> Result<ReplayReport, ReplayError> {
        self.replay_filtered(segments.into_iter().map(|s| (SegmentId(0), s)), |_, _, _| true)
    }

    /// [`Store::replay`] of only the entries for which `keep(segment,
    /// table, key)` holds, with `segment` the id of the segment they are
    /// in (a recovery master's partition of a crashed master's tablets; a
    /// restarted server's own tablets, each from where it gained it). The
    /// safe version is still raised above every version in the segments.
    pub fn replay_filtered<'a>(
        &self,
        segments: impl IntoIterator<Item = (SegmentId, &'a [u8])>,
        mut keep: impl FnMut(SegmentId, TableId, &[u8]) -> bool,
    ) -> Result<ReplayReport, ReplayError> {
        let mut replay = Replay::default();
        let mut kept = Vec::new();
        for (si, (id, seg)) in segments.into_iter().enumerate() {
            let verified = &seg[..format::scan(seg).verified_len];
            kept.clear();
            let f = format::filter_entries(verified, |table, key: &[u8]| keep(id, table, key), &mut kept)
                .map_err(|reason| ReplayError::Corrupt { segment: si, offset: 0, reason })?;
            replay.report.segments += 1;
            replay.report.bytes_scanned += verified.len();
            self.replay_entries(&mut replay, &kept, Version(f.safe_version)).map_err(|e| e.in_segment(si))?;
        }
        self.finish_replay(replay)
    }

    /// Replays one batch of a replay: `entries` are whole object and
    /// tombstone entries back to back (a partition's share of one segment,
    /// as `format::filter_entries` or a backup cut it), each checked against
    /// its own CRC; the safe version is raised to `safe` first. An object
    /// is installed unless the store holds the key at a version at least as
    /// new, or a tombstone seen so far in this replay kills it; tombstones
    /// are remembered for the rest of the replay. Batches may come in any
    /// order: [`Store::finish_replay`] applies the tombstones to objects
    /// replayed before them.
    pub fn replay_entries(&self, replay: &mut Replay, entries: &[u8], safe: Version) -> Result<(), ReplayError> {
        let inner = &self.inner;
        inner.log.raise_safe_version(safe);
        // Objects are written in append groups of up to REPLAY_GROUP
        // distinct keys (one log append, one replication hand-off each).
        let mut ops: Vec<WriteOp<'_>> = Vec::with_capacity(REPLAY_GROUP);
        let mut versions: Vec<Version> = Vec::with_capacity(REPLAY_GROUP);
        // Key hashes in the group (two keys of one hash just end it early).
        let mut keys: HashSet<u64, BuildHasherDefault<HashIsKey>> = HashSet::default();
        // Read once, at the first object with an expiry.
        let mut now = None;
        // Chunk entries of distinct ids, replayed as one append group
        // before any chunk tombstone and at the end.
        let mut chunks: Vec<format::ChunkView<'_>> = Vec::with_capacity(REPLAY_GROUP);
        let mut pos = 0;
        while pos < entries.len() {
            let (e, len) = format::decode(&entries[pos..]).map_err(|reason| ReplayError::Corrupt {
                segment: 0,
                offset: pos,
                reason,
            })?;
            pos += len;
            match e {
                Entry::Object(o) => {
                    let hash = key_hash(o.table, o.key).0;
                    if o.expiry.is_some() && o.expired_at(*now.get_or_insert_with(|| inner.now())) {
                        // Not installed, and a tombstone for its key up to
                        // its version: an older version replayed from
                        // another segment must not come back in its place.
                        replay.report.objects_expired += 1;
                        replay.kill(o.table, o.key, o.version, hash);
                        continue;
                    }
                    let killed = replay
                        .tombs
                        .get(&hash)
                        .and_then(|v| v.iter().find(|(t, k, _)| *t == o.table && k.as_slice() == o.key).map(|x| x.2));
                    if killed.is_some_and(|tv| o.version <= tv) {
                        replay.report.objects_skipped += 1;
                        continue;
                    }
                    if !replay.tables.contains(&o.table) {
                        self.create_table(o.table);
                        replay.tables.insert(o.table);
                    }
                    if ops.len() == REPLAY_GROUP || keys.contains(&hash) {
                        self.replay_group(replay, &ops, &versions)?;
                        ops.clear();
                        versions.clear();
                        keys.clear();
                    }
                    inner.check_sizes(o.key, Some(o.value)).map_err(ReplayError::Store)?;
                    keys.insert(hash);
                    let expiry = o.expiry.map_or(Expiry::Never, Expiry::At);
                    ops.push(WriteOp {
                        table: o.table,
                        key: o.key,
                        value: o.value,
                        rules: RejectRules::default(),
                        expiry,
                    });
                    versions.push(o.version);
                }
                Entry::Tombstone(t) => {
                    replay.report.tombstones += 1;
                    replay.kill(t.table, t.key, t.version, key_hash(t.table, t.key).0);
                }
                Entry::Chunk(c) => self.replay_chunk_entry(replay, &mut chunks, c)?,
                Entry::ChunkRun(run) => {
                    for c in run.iter() {
                        self.replay_chunk_entry(replay, &mut chunks, c)?;
                    }
                }
                Entry::ChunkTombstone(t) => {
                    self.replay_chunks(replay, &chunks)?;
                    chunks.clear();
                    replay.report.tombstones += 1;
                    replay.chunk_nodes.insert(t.id.node());
                    self.replay_chunk_tombstone(replay, &t)?;
                }
                Entry::StreamBatch(b) => {
                    self.replay_batch(replay, &b, &entries[pos - len..pos])?;
                }
                // Not what a filter keeps; harmless if a caller passes them.
                Entry::SafeVersion(v) => inner.log.raise_safe_version(v),
                Entry::SegmentHeader(_) | Entry::LogDigest(_) | Entry::Checksum(_) => {}
            }
        }
        self.replay_chunks(replay, &chunks)?;
        self.replay_group(replay, &ops, &versions)
    }

    /// Adds a replayed chunk to the group of chunks of distinct ids that
    /// is replayed together, replaying the group first when it is full or
    /// holds the same id.
    fn replay_chunk_entry<'e>(
        &self,
        replay: &mut Replay,
        chunks: &mut Vec<format::ChunkView<'e>>,
        c: format::ChunkView<'e>,
    ) -> Result<(), ReplayError> {
        if !replay.tables.contains(&c.table) {
            self.create_table(c.table);
            replay.tables.insert(c.table);
        }
        self.inner.check_sizes(&[], Some(c.payload)).map_err(ReplayError::Store)?;
        replay.chunk_nodes.insert(c.id.node());
        if chunks.len() == REPLAY_GROUP || chunks.iter().any(|x| x.id == c.id) {
            self.replay_chunks(replay, chunks)?;
            chunks.clear();
        }
        chunks.push(c);
        Ok(())
    }

    /// Writes one group of a replay at the versions given (distinct keys).
    fn replay_group(&self, replay: &mut Replay, ops: &[WriteOp<'_>], versions: &[Version]) -> Result<(), ReplayError> {
        if ops.is_empty() {
            return Ok(());
        }
        let idx: Vec<usize> = (0..ops.len()).collect();
        let mut results = vec![None; ops.len()];
        self.write_group(ops, &idx, &mut results, false, Some(versions));
        self.inner.grow_hash_table();
        for r in results {
            match r {
                Some(Ok(_)) => replay.report.objects_replayed += 1,
                Some(Err(e)) => return Err(ReplayError::Store(e)),
                None => unreachable!("write_group answers every item"),
            }
        }
        Ok(())
    }

    /// Ends a replay: removes every object the store holds that a replayed
    /// tombstone kills (it was replayed before its tombstone arrived, or
    /// was here already).
    pub fn finish_replay(&self, replay: Replay) -> Result<ReplayReport, ReplayError> {
        let inner = &self.inner;
        if !replay.chunk_migration {
            let mut nodes = replay.chunk_nodes.clone();
            if let Some(n) = replay.creating {
                nodes.remove(&n);
            }
            inner.cids.rebuild_free_lists_of(&nodes);
        }
        // Streams' trim points, whichever came first in the replay: the
        // point or batches of the groups below it.
        self.apply_trim_points();
        let mut report = replay.report;
        for (table, key, tv) in replay.tombs.into_values().flatten() {
            if !self.has_table(table) {
                continue;
            }
            let hash = key_hash(table, &key).0;
            let live = {
                let _g = inner.ht.lock(hash);
                inner.lookup(table, &key, hash).map(|f| f.version)
            };
            if let Some(v) = live {
                if v <= tv {
                    inner.remove(table, &key, RejectRules::default()).map_err(ReplayError::Store)?;
                    report.objects_removed += 1;
                }
            }
        }
        Ok(report)
    }

    /// Checks the store's invariants against a full recount (for tests;
    /// pauses the cleaner; call when no writes are running):
    /// every hash table reference points at a live object entry of a segment
    /// in the log, no key appears twice, every CID table reference points at
    /// the chunk entry of its own id in a segment of the log, every segment of the log scans to
    /// its full length, per-segment and global counters equal a recount,
    /// and no object expires before its segment's `next_expiry` (the
    /// sweep would miss it).
    pub fn check_invariants(&self) -> Result<(), String> {
        let _pause = self.inner.cleaner.pause();
        let _sweep = self.inner.sweep.pause();
        let inner = &self.inner;
        let members = inner.log.members();
        let member_slots: HashMap<u32, SegmentId> = members.iter().map(|(id, s)| (*s, *id)).collect();
        let mut live_per_slot: HashMap<u32, u64> = HashMap::new();
        let mut keys = HashSet::new();
        let (mut objects, mut live, mut kv) = (0u64, 0u64, 0u64);
        let mut expiring: HashMap<TableId, u64> = HashMap::new();
        let mut bytes_per_table: HashMap<TableId, u64> = HashMap::new();
        let mut at: u128 = 0;
        while at < 1 << 64 {
            let mut err = None;
            let mut wrong_bucket = Vec::new();
            let range = inner.ht.for_each_in_bucket_of(at as u64, |r| {
                if err.is_some() {
                    return;
                }
                if !member_slots.contains_key(&r.slot()) {
                    err = Some(format!("reference {r:?} into slot {} which is not in the log", r.slot()));
                    return;
                }
                let e = inner.segs.entry(r);
                match format::decode(&e) {
                    Ok((Entry::Object(o), len)) => {
                        wrong_bucket.push(key_hash(o.table, o.key).0 as u128);
                        if !keys.insert((o.table, o.key.to_vec())) {
                            err = Some(format!("key {:?} referenced twice", o.key));
                        }
                        objects += 1;
                        live += len as u64;
                        *bytes_per_table.entry(o.table).or_default() += len as u64;
                        kv += (o.key.len() + o.value.len()) as u64;
                        *live_per_slot.entry(r.slot()).or_default() += len as u64;
                        if let Some(at) = o.expiry {
                            *expiring.entry(o.table).or_default() += 1;
                            let hint = inner.segs.slot(r.slot()).next_expiry.load(Ordering::Acquire);
                            if at.0 < hint {
                                err = Some(format!("object expiring at {at} in a segment whose next expiry is {hint}"));
                            }
                        }
                    }
                    other => err = Some(format!("reference {r:?} to a non-object or corrupt entry: {other:?}")),
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
            if let Some(h) = wrong_bucket.iter().find(|h| !(range.first..range.next).contains(h)) {
                return Err(format!("object of hash {h:x} in the bucket of {:x}..{:x}", range.first, range.next));
            }
            at = range.next;
        }
        let (chunks, chunk_live, chunk_payload) = self.check_chunks(&member_slots, &mut live_per_slot)?;
        let stream_per_slot = self.check_streams(&member_slots)?;
        live += chunk_live;
        kv += chunk_payload;
        let have = inner.cids.live.load(Ordering::Relaxed);
        if have != chunks {
            return Err(format!("live chunk counter {have} != recount {chunks}"));
        }
        let mut per_table: HashMap<TableId, u64> = HashMap::new();
        for (t, _) in &keys {
            *per_table.entry(*t).or_default() += 1;
        }
        for (t, n) in inner.tables.read().iter() {
            let (have, want) = (n.objects.load(Ordering::Relaxed), per_table.get(t).copied().unwrap_or(0));
            if have != want {
                return Err(format!("table {t}: object count {have} != recount {want}"));
            }
            let (have, want) = (n.bytes.load(Ordering::Relaxed), bytes_per_table.get(t).copied().unwrap_or(0));
            if have != want {
                return Err(format!("table {t}: object bytes {have} != recount {want}"));
            }
            let (have, want) = (n.expiring.load(Ordering::Relaxed), expiring.get(t).copied().unwrap_or(0));
            if have != want {
                return Err(format!("table {t}: expiring object count {have} != recount {want}"));
            }
        }
        let (have, want) = (inner.counters.expiring.load(Ordering::Relaxed), expiring.values().sum::<u64>());
        if have != want {
            return Err(format!("expiring object counter {have} != recount {want}"));
        }
        let c = &inner.counters;
        let counted = (
            c.objects.load(Ordering::Relaxed),
            c.live_bytes.load(Ordering::Relaxed),
            c.live_kv_bytes.load(Ordering::Relaxed),
        );
        if counted != (objects, live, kv) {
            return Err(format!("counters (objects, live, kv) {counted:?} != recount {:?}", (objects, live, kv)));
        }
        let (in_log, max_id) = inner.log.membership();
        let mut tomb_total = 0u64;
        for (id, slot) in &members {
            let s = inner.segs.slot(*slot);
            let bytes = inner.segs.copy_segment(*slot);
            let scan = format::scan(&bytes);
            if scan.verified_len != bytes.len() {
                return Err(format!("segment {id} verifies to {} of {} bytes", scan.verified_len, bytes.len()));
            }
            let want = live_per_slot.get(slot).copied().unwrap_or(0);
            let have = s.live_bytes.load(Ordering::Relaxed);
            if want != have {
                return Err(format!("segment {id}: live bytes {have} != recount {want}"));
            }
            let want = stream_per_slot.get(slot).copied().unwrap_or(0);
            let have = s.stream_bytes.load(Ordering::Relaxed);
            if want != have {
                return Err(format!("segment {id}: stream batch bytes {have} != recount {want}"));
            }
            let mut live_tombs = 0u64;
            let mut all_tombs = 0u64;
            for e in format::EntryIter::new(&bytes) {
                let (off, e) = e.map_err(|e| format!("segment {id}: {e}"))?;
                if let Some(seg) = e.tombstone_segment() {
                    let len = format::read_header(&bytes[off..]).map(|h| h.total_len()).unwrap_or(0) as u64;
                    all_tombs += len;
                    if in_log.contains(&seg) || seg > max_id {
                        live_tombs += len;
                    }
                }
            }
            let believed = s.tomb_bytes.load(Ordering::Relaxed);
            if believed < live_tombs || believed > all_tombs {
                return Err(format!("segment {id}: tombstone bytes {believed} outside [{live_tombs}, {all_tombs}]"));
            }
            tomb_total += believed;
        }
        // Tombstones naming each segment of the log, against the log's count.
        let mut named: HashMap<SegmentId, u64> = HashMap::new();
        for (_, slot) in &members {
            inner.segs.for_each_entry(*slot, |_, raw| {
                if let Ok((e, len)) = format::decode_trusted(raw) {
                    if let Some(seg) = e.tombstone_segment().filter(|s| in_log.contains(s)) {
                        *named.entry(seg).or_default() += len as u64;
                    }
                }
            });
        }
        let refs = inner.log.tomb_refs();
        for id in in_log.iter() {
            let (want, have) = (named.get(id).copied().unwrap_or(0), refs.get(id).copied().unwrap_or(0));
            if want != have {
                return Err(format!("segment {id}: tombstones naming it {have} != recount {want}"));
            }
        }
        let global_tombs = inner.log.tomb_bytes.load(Ordering::Relaxed);
        if global_tombs != tomb_total {
            return Err(format!("tombstone counter {global_tombs} != sum over segments {tomb_total}"));
        }
        Ok(())
    }
}

/// Keeps the pool resident ahead of use: [`pool::POPULATE_AHEAD`] bytes
/// beyond the highest seglet handed out, so that the first write to fresh
/// memory (a page fault and the zeroing of a page, 2 MiB at once with huge
/// pages) is taken here rather than by a worker in the middle of its
/// clients' requests. Sleeps (parked) while it is far enough ahead; the
/// pool wakes it. With `StoreConfig::prefault` it makes the whole pool
/// resident instead, at the lowest CPU priority. Populates 2 MiB at a
/// time: populating holds the process's memory-map lock, and a thread of
/// the server that needs it exclusively (a mapping made by the allocator)
/// waits for the chunk, so the chunks are kept short for the server to
/// answer pings promptly even on a busy machine (a server that misses them
/// is declared dead).
fn populate(inner: &Inner) {
    const CHUNK: usize = 2 << 20;
    let whole = inner.config.prefault;
    if whole {
        shoal_common::os::lower_this_thread_priority(19);
    }
    let memory = &inner.segs.pool;
    memory.set_populator(std::thread::current());
    let started = Instant::now();
    let mut at = 0;
    while at < memory.len() && !inner.shutdown.load(Ordering::Acquire) {
        let target =
            if whole { memory.len() } else { (memory.frontier_bytes() + pool::POPULATE_AHEAD).min(memory.len()) };
        if at >= target {
            std::thread::park();
            continue;
        }
        let len = CHUNK.min(memory.len() - at);
        if let Err(e) = memory.populate(at, len) {
            if whole {
                tracing::warn!("cannot prefault the memory pool ({e}); pages are faulted in as they are first written");
            }
            return;
        }
        at += len;
        if whole {
            std::thread::yield_now();
        }
    }
    if whole {
        tracing::info!("memory pool resident: {} MiB in {} ms", at >> 20, started.elapsed().as_millis());
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.inner.shutdown.store(true, Ordering::Release);
        cleaner::request(&self.inner);
        expiry::wake(&self.inner);
        if let Some(h) = self.cleaner.take() {
            let _ = h.join();
        }
        if let Some(h) = self.sweeper.take() {
            let _ = h.join();
        }
        if let Some(h) = self.populate.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}
