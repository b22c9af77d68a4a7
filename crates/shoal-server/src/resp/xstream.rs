//! Redis streams on Shoal's KerA streams (`docs/streams.md`, "Redis
//! streams on the RESP port"). Commands (`cmd/x*.rs`) parse and reply;
//! this module holds the model they share and is the only one that
//! reads or writes a Redis stream's records.
//!
//! * **Mapping.** The Redis stream `key` of database `n` is the Shoal
//!   stream named [`table_name`] (`redis.db{n}.stream.{key, escaped}`),
//!   of [`SHAPE`]: one streamlet of one log, so the streamlet's records
//!   are in one order, the order of their appends, which is ID order.
//! * **Records.** Each XADD appends one record holding the entry's ID and
//!   its field-value pairs ([`encode_entry`]); XDEL and exact trimming
//!   append a *marker* record instead of rewriting anything (the log is
//!   append-only): a deletion marker lists the IDs it removes, a trim
//!   marker removes every entry appended before it below an ID. Markers
//!   also carry the stream's last ID, so that the last ID survives the
//!   removal of every entry. An XADD that trims appends its entry and its
//!   marker as one batch (one log entry: both or neither).
//! * **Index.** In memory, per open stream: its last ID and a `BTreeMap`
//!   from each live entry's ID to its record's offset. Built on first use
//!   by reading the streamlet from its first group ([`XStream::load`]),
//!   so after a restart or a recovery the index is the replay of the
//!   records in order.
//! * **Reclaiming.** Groups (KerA's unit of retention) that hold no live
//!   entry any more, below the first group holding one, are removed with
//!   the store's trim point (`Store::mark_stream_trimmed`, `trim_stream`):
//!   the cleaner then frees their memory. Approximate trimming (`~`)
//!   removes whole groups only.
//!
//! Concurrency: one mutex per stream serialises its writers (ID
//! assignment, append and index update happen under it, so ID order is
//! append order) and its readers (a range is found in the index and its
//! records read from the store under it). Lock order: the map of open
//! streams, then a stream.

use crate::context::ServerContext;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use parking_lot::Mutex;
use shoal_common::{StreamOffset, StreamShape};
use shoal_engine::{StreamError, TableId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use tokio::sync::Notify;

/// The shape of every Redis stream: one streamlet of one log (one append
/// order); groups of 4 segments of 256 KiB, so a group (the unit in which
/// memory is given back) holds about 1 MiB of entries.
pub const SHAPE: StreamShape =
    StreamShape { streamlets: 1, logs: 1, segment_bytes: 256 << 10, group_segments: 4, group_timeout_ms: 0 };

/// The one streamlet of a Redis stream.
const STREAMLET: u32 = 0;

/// Most bytes of a Shoal table name (the coordinator's limit).
const MAX_TABLE_NAME: usize = 255;

pub const WRONGTYPE: ErrorReply = ErrorReply::new("WRONGTYPE Operation against a key holding the wrong kind of value");
pub const INVALID_ID: ErrorReply = ErrorReply::new("ERR Invalid stream ID specified as stream command argument");
pub const NOT_GREATER: ErrorReply =
    ErrorReply::new("ERR The ID specified in XADD is equal or smaller than the target stream top item");

/// A Redis stream entry ID: milliseconds and a sequence number, ordered
/// as the pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    /// The next ID (Redis's `streamIncrID`); `None` past the last one.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId { ms: ms + 1, seq: 0 }),
            (ms, seq) => Some(StreamId { ms, seq: seq + 1 }),
        }
    }

    /// The previous ID (Redis's `streamDecrID`); `None` before 0-0.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId { ms: ms - 1, seq: u64::MAX }),
            (ms, seq) => Some(StreamId { ms, seq: seq - 1 }),
        }
    }

    /// The ID as Redis writes it: "ms-seq".
    pub fn text(self) -> Vec<u8> {
        format!("{}-{}", self.ms, self.seq).into_bytes()
    }
}

/// An ID argument as Redis parses it (`streamGenericParseIDOrReply`):
/// `-` and `+` (unless `strict`), `ms` (the sequence is `missing_seq`),
/// `ms-seq`, and with `star` also `ms-*` (the sequence is chosen by
/// XADD; `seq_given` false). Numbers are read as C's `string2ull`.
pub struct ParsedId {
    pub id: StreamId,
    pub seq_given: bool,
}

pub fn parse_id(arg: &[u8], strict: bool, missing_seq: u64, star: bool) -> Result<ParsedId, ErrorReply> {
    if arg.len() > 127 {
        return Err(INVALID_ID);
    }
    // Redis reads the argument as a C string.
    let s = arg.split(|&c| c == 0).next().unwrap_or(arg);
    if strict && (s == b"-" || s == b"+") {
        return Err(INVALID_ID);
    }
    match s {
        b"-" => return Ok(ParsedId { id: StreamId::MIN, seq_given: true }),
        b"+" => return Ok(ParsedId { id: StreamId::MAX, seq_given: true }),
        _ => {}
    }
    let (ms, seq) = match s.iter().position(|&c| c == b'-') {
        Some(dash) => (&s[..dash], Some(&s[dash + 1..])),
        None => (s, None),
    };
    let ms = string2ull(ms).ok_or(INVALID_ID)?;
    match seq {
        None => Ok(ParsedId { id: StreamId { ms, seq: missing_seq }, seq_given: true }),
        Some(b"*") if star => Ok(ParsedId { id: StreamId { ms, seq: 0 }, seq_given: false }),
        Some(seq) => Ok(ParsedId { id: StreamId { ms, seq: string2ull(seq).ok_or(INVALID_ID)? }, seq_given: true }),
    }
}

/// Redis's `string2ull`: a strict decimal `long long` that is not
/// negative, or else whatever C's `strtoull` reads from the whole string
/// (leading white space, a sign, a negative number wrapping around;
/// refused on overflow or when nothing or not all of it is a number).
fn string2ull(s: &[u8]) -> Option<u64> {
    if let Some(v) = crate::resp::frame::parse_i64(s) {
        return u64::try_from(v).ok();
    }
    let mut i = s.iter().take_while(|&&c| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')).count();
    let negative = s.get(i) == Some(&b'-');
    if matches!(s.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// The Shoal stream name of Redis stream `key` in database `db`: bytes
/// other than printable ASCII, and `%`, are written `%XX`. `Err` when the
/// name would pass [`MAX_TABLE_NAME`] (a documented limit on stream keys).
pub fn table_name(db: usize, key: &[u8]) -> Result<String, ErrorReply> {
    let mut name = format!("redis.db{db}.stream.");
    for &c in key {
        if (b' '..=b'~').contains(&c) && c != b'%' {
            name.push(c as char);
        } else {
            name.push_str(&format!("%{c:02X}"));
        }
    }
    if name.len() > MAX_TABLE_NAME {
        return Err(ErrorReply::owned(format!(
            "ERR stream key too long for Shoal: its stream name would have {} bytes, at most {MAX_TABLE_NAME} \
             (printable ASCII counts 1 byte, other bytes 3)",
            name.len()
        )));
    }
    Ok(name)
}

/// The prefix of every Redis stream name of database `db`.
pub fn db_prefix(db: usize) -> String {
    format!("redis.db{db}.stream.")
}

// ---------------------------------------------------------------- records
//
// A record's first byte is its kind; integers are little-endian.
//
//   entry:  1 | ms u64 | seq u64 | pairs u32 | 2 x pairs x (len u32 | bytes)
//   delete: 2 | last ms u64 | last seq u64 | n u32 | n x (ms u64 | seq u64)
//   trim:   3 | last ms u64 | last seq u64 | all u8 | below ms u64 | below seq u64
//
// `last` is the stream's last ID when the marker was appended; a trim
// removes the entries appended before it whose ID is below `below`, or
// all of them if `all` is 1.

const ENTRY: u8 = 1;
const DELETE: u8 = 2;
const TRIM: u8 = 3;

/// Bytes of an entry record beyond its fields' bytes.
pub const ENTRY_OVERHEAD: usize = 21;

/// Room an entry leaves in a batch (whose records may hold at most the
/// store's largest value): the records' varint lengths and an XADD's
/// trim marker (34 bytes).
const BATCH_MARGIN: usize = 64;

pub fn encode_entry<'a>(id: StreamId, fields: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let n = fields.len();
    let mut r = Vec::with_capacity(ENTRY_OVERHEAD + 64);
    r.push(ENTRY);
    put_id(&mut r, id);
    r.extend_from_slice(&((n / 2) as u32).to_le_bytes());
    for f in fields {
        r.extend_from_slice(&(f.len() as u32).to_le_bytes());
        r.extend_from_slice(f);
    }
    r
}

fn encode_delete(last: StreamId, ids: &[StreamId]) -> Vec<u8> {
    let mut r = Vec::with_capacity(21 + 16 * ids.len());
    r.push(DELETE);
    put_id(&mut r, last);
    r.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    for &id in ids {
        put_id(&mut r, id);
    }
    r
}

fn encode_trim(last: StreamId, below: Option<StreamId>) -> Vec<u8> {
    let mut r = Vec::with_capacity(34);
    r.push(TRIM);
    put_id(&mut r, last);
    r.push(below.is_none() as u8);
    put_id(&mut r, below.unwrap_or_default());
    r
}

fn put_id(r: &mut Vec<u8>, id: StreamId) {
    r.extend_from_slice(&id.ms.to_le_bytes());
    r.extend_from_slice(&id.seq.to_le_bytes());
}

/// A decoding cursor; every read is bounds-checked.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn id(&mut self) -> Option<StreamId> {
        Some(StreamId { ms: self.u64()?, seq: self.u64()? })
    }
}

/// What a record does to the index.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    Entry(StreamId),
    Delete { last: StreamId, ids: Vec<StreamId> },
    Trim { last: StreamId, below: Option<StreamId> },
}

/// The record's effect; `None` for bytes that are no record of a Redis
/// stream (written to the same stream by a native producer): skipped.
fn decode(rec: &[u8]) -> Option<Record> {
    let mut c = Cursor(rec);
    match c.u8()? {
        ENTRY => Some(Record::Entry(c.id()?)),
        DELETE => {
            let last = c.id()?;
            let n = c.u32()? as usize;
            if c.0.len() != n.checked_mul(16)? {
                return None;
            }
            let ids = (0..n).map(|_| c.id()).collect::<Option<Vec<_>>>()?;
            Some(Record::Delete { last, ids })
        }
        TRIM => {
            let last = c.id()?;
            let all = c.u8()? != 0;
            let below = c.id()?;
            Some(Record::Trim { last, below: (!all).then_some(below) })
        }
        _ => None,
    }
}

/// Writes an entry record as Redis replies with an entry: its ID, then
/// the array of its fields and values. `false` (nothing written) if the
/// record is not a well-formed entry.
fn reply_entry(rec: &[u8], out: &mut Reply) -> bool {
    let mut c = Cursor(rec);
    let (Some(ENTRY), Some(id), Some(pairs)) = (c.u8(), c.id(), c.u32()) else { return false };
    let mut fields = Vec::with_capacity((pairs as usize).min(c.0.len() / 4) * 2);
    for _ in 0..pairs as usize * 2 {
        let Some(f) = c.u32().and_then(|n| c.take(n as usize)) else { return false };
        fields.push(f);
    }
    out.array(2);
    out.bulk(&id.text());
    out.array(fields.len());
    for f in fields {
        out.bulk(f);
    }
    true
}

// ---------------------------------------------------------------- streams

/// The open Redis streams of a server: their indexes, loaded on first
/// use, and the blocked XREADs waiting on each key.
#[derive(Default)]
pub struct XStreams {
    open: Mutex<HashMap<TableId, Arc<Mutex<XStream>>>>,
    waiters: Mutex<Waiters>,
}

/// Blocked XREADs by (database, key): each one's `Notify`, held by its
/// wait (a dead `Weak` is a wait that ended).
#[derive(Default)]
struct Waiters {
    by_key: HashMap<(usize, Vec<u8>), Vec<Weak<Notify>>>,
    /// `by_key`'s size after its last sweep of dead waits.
    swept_len: usize,
}

impl XStreams {
    /// Registers `waiter` to be notified at the next XADD to each of
    /// `keys` of database `db`. Register before looking for data: an XADD
    /// after the look then leaves its permit in `waiter`.
    pub fn wait_on<'a>(&self, db: usize, keys: impl Iterator<Item = &'a [u8]>, waiter: &Arc<Notify>) {
        let mut w = self.waiters.lock();
        for key in keys {
            let list = w.by_key.entry((db, key.to_vec())).or_default();
            list.retain(|n| n.strong_count() > 0);
            list.push(Arc::downgrade(waiter));
        }
        // Keys waited on and never written keep dead waits: sweep them
        // whenever the map doubled since the last sweep.
        if w.by_key.len() > 2 * w.swept_len.max(512) {
            w.by_key.retain(|_, list| {
                list.retain(|n| n.strong_count() > 0);
                !list.is_empty()
            });
            w.swept_len = w.by_key.len();
        }
    }

    /// Wakes the XREADs blocked on `key` of database `db` (after an XADD):
    /// they run again, and register again if they still wait.
    pub fn wake(&self, db: usize, key: &[u8]) {
        let Some(list) = self.waiters.lock().by_key.remove(&(db, key.to_vec())) else { return };
        for n in list.iter().filter_map(Weak::upgrade) {
            n.notify_one();
        }
    }
}

/// One Redis stream's index.
pub struct XStream {
    table: TableId,
    loaded: bool,
    /// Its table was dropped (DEL): holders must look the key up again.
    dropped: bool,
    /// The greatest ID ever added (XADD's lower bound), kept when entries go.
    pub last: StreamId,
    /// The group of the last record appended: it holds the record that
    /// carries `last` (an entry or a marker), so it is never given back.
    last_group: u64,
    /// The live entries, by ID: where each one's record is.
    entries: BTreeMap<StreamId, StreamOffset>,
}

/// A trimming strategy (XTRIM, XADD's MAXLEN/MINID).
#[derive(Clone, Copy, Debug)]
pub struct Trim {
    pub kind: TrimKind,
    /// `~`: only whole groups go (see the module comment).
    pub approx: bool,
    /// With `~`: at most this many entries go (0: no limit).
    pub limit: u64,
}

#[derive(Clone, Copy, Debug)]
pub enum TrimKind {
    MaxLen(u64),
    MinId(StreamId),
}

fn stream_error(e: StreamError) -> ErrorReply {
    match e {
        StreamError::OutOfMemory => ErrorReply::new("OOM command not allowed when used memory > 'maxmemory'."),
        e => ErrorReply::owned(format!("ERR stream store: {e}")),
    }
}

/// Looks up the Redis stream `key` of database `db`: `None` if there is
/// none. Loads its index on first use.
pub fn find(ctx: &ServerContext, db: usize, key: &[u8]) -> Result<Option<Arc<Mutex<XStream>>>, ErrorReply> {
    if !ctx.tables.has_stream_tables() {
        return Ok(None);
    }
    // A key too long to name a stream is none.
    let Ok(name) = table_name(db, key) else { return Ok(None) };
    let Some(table) = ctx.tables.lookup(&name).filter(|&t| ctx.tables.is_stream_table(t)) else { return Ok(None) };
    let x = ctx
        .xstreams
        .open
        .lock()
        .entry(table)
        .or_insert_with(|| {
            Arc::new(Mutex::new(XStream {
                table,
                loaded: false,
                dropped: false,
                last: StreamId::MIN,
                last_group: 0,
                entries: BTreeMap::new(),
            }))
        })
        .clone();
    let loaded = {
        let mut s = x.lock();
        if s.loaded {
            Ok(())
        } else {
            s.load(ctx)
        }
    };
    if let Err(e) = loaded {
        // Removed (DEL) between the lookup and the load: it is gone, and
        // so is the entry made for it (the stream's lock is released
        // first: `remove_named` takes the map's lock, then the stream's).
        if !ctx.tables.is_stream_table(table) {
            ctx.xstreams.open.lock().remove(&table);
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(x))
}

/// [`find`], creating the stream if there is none.
pub fn find_or_create(ctx: &ServerContext, db: usize, key: &[u8]) -> Result<Arc<Mutex<XStream>>, ErrorReply> {
    if let Some(x) = find(ctx, db, key)? {
        return Ok(x);
    }
    let name = table_name(db, key)?;
    ctx.tables
        .create_stream(&name, SHAPE)
        .map_err(|e| ErrorReply::owned(format!("ERR cannot create the stream: {e}")))?;
    find(ctx, db, key)?.ok_or(ErrorReply::new("ERR the stream was removed while it was created"))
}

/// Whether `key` of database `db` is a Redis stream (without loading it).
pub fn exists(ctx: &ServerContext, db: usize, key: &[u8]) -> bool {
    if !ctx.tables.has_stream_tables() || !ctx.tables.may_be_stream(filter_hash(db, key)) {
        return false;
    }
    table_name(db, key).ok().and_then(|n| ctx.tables.lookup(&n)).is_some_and(|t| ctx.tables.is_stream_table(t))
}

/// What the registry's stream filter files Redis stream `key` of database
/// `db` under ([`crate::context::NameFilter`]): a one-shot hash of the key
/// (a few nanoseconds for short keys; a streamed hash of the whole table
/// name cost more than the lookup it saves).
pub fn filter_hash(db: usize, key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, db as u64)
}

/// [`filter_hash`] of the Redis stream a table name names ([`table_name`]);
/// `None` for any other name.
pub fn filter_hash_of_name(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("redis.db")?;
    let dot = rest.find('.')?;
    let db: usize = rest[..dot].parse().ok()?;
    let key = unescape(rest[dot..].strip_prefix(".stream.")?.as_bytes())?;
    Some(filter_hash(db, &key))
}

/// The keys of database `db`'s Redis streams (KEYS, DBSIZE).
pub fn keys(ctx: &ServerContext, db: usize) -> Vec<Vec<u8>> {
    if !ctx.tables.has_stream_tables() {
        return Vec::new();
    }
    let prefix = db_prefix(db);
    let mut keys: Vec<Vec<u8>> = ctx
        .tables
        .names_with_prefix(&prefix)
        .iter()
        .filter(|n| ctx.tables.lookup(n).is_some_and(|t| ctx.tables.is_stream_table(t)))
        .filter_map(|n| unescape(&n.as_bytes()[prefix.len()..]))
        .collect();
    keys.sort();
    keys
}

/// The key a [`table_name`] escaped; `None` if `name` is not an escape.
fn unescape(name: &[u8]) -> Option<Vec<u8>> {
    let mut key = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            let hex = std::str::from_utf8(name.get(i + 1..i + 3)?).ok()?;
            key.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            key.push(name[i]);
            i += 1;
        }
    }
    Some(key)
}

/// Removes the Redis stream `key` of database `db` (DEL): whether it existed.
pub fn remove(ctx: &ServerContext, db: usize, key: &[u8]) -> Result<bool, ErrorReply> {
    if !exists(ctx, db, key) {
        return Ok(false);
    }
    let name = table_name(db, key)?;
    remove_named(ctx, &name)
}

fn remove_named(ctx: &ServerContext, name: &str) -> Result<bool, ErrorReply> {
    let Some(table) = ctx.tables.lookup(name) else { return Ok(false) };
    let open = ctx.xstreams.open.lock().remove(&table);
    // Under the stream's lock, so no writer of it is half-way.
    let _held = open.as_ref().map(|x| {
        let mut s = x.lock();
        s.dropped = true;
        s
    });
    ctx.tables.drop_table(name).map_err(|e| ErrorReply::owned(format!("ERR cannot remove the stream: {e}")))
}

/// Removes every Redis stream of database `db` (FLUSHDB); how many.
pub fn remove_all(ctx: &ServerContext, db: usize) -> Result<usize, ErrorReply> {
    if !ctx.tables.has_stream_tables() {
        return Ok(0);
    }
    let mut n = 0;
    for name in ctx.tables.names_with_prefix(&db_prefix(db)) {
        n += remove_named(ctx, &name)? as usize;
    }
    Ok(n)
}

/// Redis streams are served by standalone servers only, for now
/// (`docs/streams.md`): in a cluster a stream's streamlet is placed by
/// the hash of its table, not by its key's slot, so it is not where
/// routing sends its key.
pub const CLUSTER_REFUSED: ErrorReply = ErrorReply::new(
    "ERR Redis stream commands are not supported by a Shoal cluster yet, only by a standalone server \
     (docs/streams.md)",
);

/// Refuses a stream command on a server that is part of a cluster.
pub fn check_standalone(session: &Session) -> Result<(), ErrorReply> {
    if session.clustered() || session.cluster_mode {
        return Err(CLUSTER_REFUSED);
    }
    Ok(())
}

/// The stream at `key` of the session's database, for a command on a
/// stream: `None` if the key does not exist, `WRONGTYPE` if it holds a
/// string.
pub fn lookup(session: &Session, key: &[u8]) -> Result<Option<Arc<Mutex<XStream>>>, ErrorReply> {
    if let Some(x) = find(&session.ctx, session.db, key)? {
        return Ok(Some(x));
    }
    if session.db().meta(key)?.is_some() {
        return Err(WRONGTYPE);
    }
    Ok(None)
}

/// What a string command (group "string") does when some of its keys
/// hold a stream, by Redis's type rules.
pub enum OnStreamKey {
    /// No key is a stream, or the command treats one as a missing string
    /// (MGET): run it.
    Run,
    /// The command overwrites its keys whatever their type (SET without
    /// GET or NX, SETEX, PSETEX, MSET): run it, then remove these streams
    /// if it succeeded.
    RunThenRemove(Vec<Vec<u8>>),
    /// The command reads or changes a string: WRONGTYPE.
    WrongType,
    /// The command writes only keys that do not exist (SET NX: a null
    /// reply; SETNX, MSETNX: 0).
    NotWritten,
}

/// [`OnStreamKey`] for command `entry` with `args`.
pub fn string_command_on_streams(
    session: &Session,
    entry: &crate::resp::cmd::Entry,
    args: crate::resp::frame::Args<'_>,
) -> OnStreamKey {
    let ctx = &session.ctx;
    if entry.spec.group != "string" || !ctx.tables.has_stream_tables() {
        return OnStreamKey::Run;
    }
    let Some((first, last, step)) = crate::resp::routing::key_positions(entry, args.len()) else {
        return OnStreamKey::Run;
    };
    let streams: Vec<Vec<u8>> = (first..=last)
        .step_by(step)
        .map(|i| args.get(i))
        .filter(|k| exists(ctx, session.db, k))
        .map(<[u8]>::to_vec)
        .collect();
    if streams.is_empty() {
        return OnStreamKey::Run;
    }
    let option = |word: &str| args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(word.as_bytes()));
    match entry.spec.name {
        "mget" => OnStreamKey::Run,
        "set" if option("get") => OnStreamKey::WrongType,
        "set" if option("nx") => OnStreamKey::NotWritten,
        "set" | "setex" | "psetex" | "mset" => OnStreamKey::RunThenRemove(streams),
        "setnx" | "msetnx" => OnStreamKey::NotWritten,
        _ => OnStreamKey::WrongType,
    }
}

/// Refuses an entry record of `bytes` that the store cannot hold in one
/// batch (its largest value, less the batch's own bytes).
pub fn check_entry_size(ctx: &ServerContext, bytes: usize) -> Result<(), ErrorReply> {
    let max = ctx.store.config().max_value_bytes;
    if bytes + BATCH_MARGIN > max {
        return Err(ErrorReply::owned(format!(
            "ERR Elements are too large to be stored (an entry holds at most {} bytes of fields and their lengths \
             in Shoal: --max-value-size less {})",
            max.saturating_sub(BATCH_MARGIN + ENTRY_OVERHEAD),
            BATCH_MARGIN + ENTRY_OVERHEAD
        )));
    }
    Ok(())
}

/// How an XADD chooses its entry's ID.
#[derive(Clone, Copy, Debug)]
pub enum NewId {
    /// `*`: the time in ms, or the last ID's next.
    Auto,
    /// `ms-seq`.
    Exact(StreamId),
    /// `ms-*`.
    Ms(u64),
}

/// Why an XADD added nothing.
pub enum AddRefused {
    /// The stream was removed meanwhile: look it up again.
    Dropped,
    Error(ErrorReply),
}

impl From<ErrorReply> for AddRefused {
    fn from(e: ErrorReply) -> AddRefused {
        AddRefused::Error(e)
    }
}

impl XStream {
    /// Number of live entries (XLEN).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The greatest live entry's ID, if any.
    pub fn last_entry(&self) -> Option<StreamId> {
        self.entries.keys().next_back().copied()
    }

    /// Builds the index by replaying the streamlet's records in order.
    fn load(&mut self, ctx: &ServerContext) -> Result<(), ErrorReply> {
        let store = &ctx.store;
        let mut from_group = 0;
        loop {
            let groups = store.stream_groups(self.table, STREAMLET, from_group, 1_000).map_err(stream_error)?;
            let Some(last) = groups.last() else { break };
            from_group = last.id + 1;
            for g in groups {
                let mut at = StreamOffset { group: g.id, segment: 0, position: 0 };
                loop {
                    let mut records = Vec::new();
                    let read = store.consume(self.table, STREAMLET, at, 1 << 20, |rec| records.push(decode(rec)));
                    let c = match read {
                        Ok(c) => c,
                        // Removed by retention meanwhile: its entries are gone.
                        Err(StreamError::Trimmed { .. }) => break,
                        Err(e) => return Err(stream_error(e)),
                    };
                    if c.records == 0 {
                        break;
                    }
                    let first = c.next.position - c.records;
                    for (i, r) in records.into_iter().enumerate() {
                        let offset =
                            StreamOffset { group: c.next.group, segment: c.next.segment, position: first + i as u32 };
                        match r {
                            Some(r) => self.apply(r, offset),
                            None => continue,
                        }
                    }
                    at = c.next;
                }
            }
        }
        self.loaded = true;
        Ok(())
    }

    fn apply(&mut self, r: Record, offset: StreamOffset) {
        self.last_group = self.last_group.max(offset.group);
        match r {
            Record::Entry(id) => {
                self.entries.insert(id, offset);
                self.last = self.last.max(id);
            }
            Record::Delete { last, ids } => {
                for id in ids {
                    self.entries.remove(&id);
                }
                self.last = self.last.max(last);
            }
            Record::Trim { last, below } => {
                match below {
                    Some(below) => self.entries = self.entries.split_off(&below),
                    None => self.entries.clear(),
                }
                self.last = self.last.max(last);
            }
        }
    }

    /// XADD: appends an entry of `fields` (field, value, ...) under the ID
    /// `new` makes, then trims by `trim`; the entry's ID. Nothing is
    /// appended when the ID is refused.
    pub fn add<'a>(
        &mut self,
        ctx: &ServerContext,
        new: NewId,
        fields: impl ExactSizeIterator<Item = &'a [u8]>,
        trim: Option<Trim>,
    ) -> Result<StreamId, AddRefused> {
        if self.dropped {
            return Err(AddRefused::Dropped);
        }
        if self.last == StreamId::MAX {
            return Err(
                ErrorReply::new("ERR The stream has exhausted the last possible ID, unable to add more items").into()
            );
        }
        let id = match new {
            NewId::Exact(id) => id,
            NewId::Ms(ms) if ms == self.last.ms => self.last.next().filter(|n| n.ms == ms).ok_or(NOT_GREATER)?,
            NewId::Ms(ms) => StreamId { ms, seq: 0 },
            NewId::Auto => {
                let now = ctx.store.now().0;
                if now > self.last.ms {
                    StreamId { ms: now, seq: 0 }
                } else {
                    self.last.next().ok_or(NOT_GREATER)?
                }
            }
        };
        if id <= self.last {
            return Err(NOT_GREATER.into());
        }
        let entry = encode_entry(id, fields);
        check_entry_size(ctx, entry.len())?;
        // What the trim removes once the entry is in.
        let (exact, groups) = trim.map_or((None, None), |t| self.plan_trim(t, Some(id)));
        let mut records = vec![entry];
        if let Some(below) = exact {
            records.push(encode_trim(id, below));
        }
        let produced = ctx.store.produce(self.table, STREAMLET, 0, &records).map_err(|e| match e {
            StreamError::UnknownStream(_) => AddRefused::Dropped,
            e => AddRefused::Error(stream_error(e)),
        })?;
        self.entries.insert(id, produced.first);
        self.last = id;
        self.last_group = produced.first.group;
        if let Some(below) = exact {
            self.remove_below(below);
        }
        if let Some(keep) = groups {
            self.remove_groups_below(keep);
        }
        self.reclaim(ctx);
        Ok(id)
    }

    /// What trim `t` removes, once XADD's `new` entry (the greatest ID)
    /// is in: for an exact trim, the trim marker's bound (`Some(None)`:
    /// every entry); for `~`, the first group kept.
    fn plan_trim(&self, t: Trim, new: Option<StreamId>) -> (Option<Option<StreamId>>, Option<u64>) {
        // The IDs in order, the new entry (if any) last: it is the greatest.
        let existing = self.entries.len() as u64;
        let len = existing + new.is_some() as u64;
        let nth = |i: u64| -> Option<StreamId> {
            match i.cmp(&existing) {
                std::cmp::Ordering::Less => self.entries.keys().nth(i as usize).copied(),
                std::cmp::Ordering::Equal => new,
                std::cmp::Ordering::Greater => None,
            }
        };
        // How many of the oldest entries go by an exact trim.
        let cut = match t.kind {
            TrimKind::MaxLen(max) => len.saturating_sub(max),
            TrimKind::MinId(min) => self.entries.range(..min).count() as u64 + new.is_some_and(|n| n < min) as u64,
        };
        if cut == 0 {
            return (None, None);
        }
        let first_kept = nth(cut);
        if !t.approx {
            return (Some(first_kept), None);
        }
        // Whole groups, as Redis removes whole nodes: those below the group
        // of the first entry kept; all of them (by a marker, since the
        // last one may be open) if no entry is kept.
        match first_kept {
            None if t.limit == 0 || len <= t.limit => (Some(None), None),
            None => (None, self.whole_groups(u64::MAX, t.limit)),
            Some(id) if Some(id) == new => (None, self.whole_groups(u64::MAX, t.limit)),
            Some(id) => (None, self.whole_groups(self.entries[&id].group, t.limit)),
        }
    }

    /// The first group to keep when whole groups below `keep_group` go,
    /// at most `limit` entries (0: no limit) and never the last group of
    /// the index; `None` if none goes.
    fn whole_groups(&self, keep_group: u64, limit: u64) -> Option<u64> {
        let last_group = self.entries.values().next_back()?.group;
        let keep_group = keep_group.min(last_group);
        let mut per_group: BTreeMap<u64, u64> = BTreeMap::new();
        for o in self.entries.values() {
            if o.group >= keep_group {
                break;
            }
            *per_group.entry(o.group).or_default() += 1;
        }
        let mut removed = 0;
        let mut keep = None;
        for (&g, &n) in &per_group {
            if limit > 0 && removed + n > limit {
                break;
            }
            removed += n;
            keep = Some(g + 1);
        }
        keep
    }

    /// Removes the entries below `below` (`None`: all); how many.
    fn remove_below(&mut self, below: Option<StreamId>) -> usize {
        let before = self.entries.len();
        match below {
            Some(b) => self.entries = self.entries.split_off(&b),
            None => self.entries.clear(),
        }
        before - self.entries.len()
    }

    fn remove_groups_below(&mut self, keep: u64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, o| o.group >= keep);
        before - self.entries.len()
    }

    /// Gives back the groups below the first one holding a live entry,
    /// never the group of the last record (which carries the last ID:
    /// after a replay every group is closed, so the store's rule of
    /// stopping at the open group does not keep it).
    fn reclaim(&mut self, ctx: &ServerContext) {
        let keep = self.entries.values().next().map_or(self.last_group, |o| o.group.min(self.last_group));
        let store = &ctx.store;
        let Ok(first) = store.stream_groups(self.table, STREAMLET, 0, 1) else { return };
        if first.first().is_none_or(|g| g.id >= keep) {
            return;
        }
        // Standalone: the trim point is durable as soon as it is written;
        // in a cluster (where Redis streams are refused) it must be made
        // durable before the groups go (`retention.rs`).
        if store.mark_stream_trimmed(self.table, STREAMLET, keep).is_ok() {
            let _ = store.trim_stream(self.table, STREAMLET, keep);
        }
    }

    /// XTRIM: removes entries by `t`; how many.
    pub fn trim(&mut self, ctx: &ServerContext, t: Trim) -> Result<usize, ErrorReply> {
        let (exact, groups) = self.plan_trim(t, None);
        let mut removed = 0;
        if let Some(below) = exact {
            let marker = encode_trim(self.last, below);
            self.last_group = ctx.store.produce(self.table, STREAMLET, 0, &[marker]).map_err(stream_error)?.first.group;
            removed += self.remove_below(below);
        }
        if let Some(keep) = groups {
            removed += self.remove_groups_below(keep);
        }
        if removed > 0 {
            self.reclaim(ctx);
        }
        Ok(removed)
    }

    /// XDEL: removes the entries of `ids` that exist; how many.
    pub fn delete(&mut self, ctx: &ServerContext, ids: &[StreamId]) -> Result<usize, ErrorReply> {
        let mut present: Vec<StreamId> = ids.iter().copied().filter(|id| self.entries.contains_key(id)).collect();
        present.sort_unstable();
        present.dedup();
        if present.is_empty() {
            return Ok(0);
        }
        let marker = encode_delete(self.last, &present);
        if marker.len() + BATCH_MARGIN > ctx.store.config().max_value_bytes {
            return Err(ErrorReply::new("ERR too many IDs for one XDEL in Shoal"));
        }
        self.last_group = ctx.store.produce(self.table, STREAMLET, 0, &[marker]).map_err(stream_error)?.first.group;
        for id in &present {
            self.entries.remove(id);
        }
        self.reclaim(ctx);
        Ok(present.len())
    }

    /// The IDs and offsets of the entries from `start` to `end` (both
    /// included), at most `count` (0: all), backwards if `rev`; never
    /// more than a reply of `reply_limit` bytes can hold (each entry
    /// takes more than [`ENTRY_OVERHEAD`] bytes of it), so that a range
    /// of a huge stream allocates no more than its reply may take.
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        count: usize,
        rev: bool,
        reply_limit: usize,
    ) -> Vec<(StreamId, StreamOffset)> {
        if start > end {
            return Vec::new();
        }
        let r = self.entries.range(start..=end).map(|(&id, &o)| (id, o));
        let most = reply_limit / ENTRY_OVERHEAD + 1;
        let limit = if count == 0 { most } else { count.min(most) };
        if rev {
            r.rev().take(limit).collect()
        } else {
            r.take(limit).collect()
        }
    }

    /// Replies with the entries `found` (from [`XStream::range`]) as an
    /// array, reading each record from the store; stops early once the
    /// reply passes `reply_limit` (the connection is then closed). An
    /// entry the server's retention removed meanwhile is left out (and
    /// out of the index).
    pub fn reply_entries(
        &mut self,
        ctx: &ServerContext,
        found: &[(StreamId, StreamOffset)],
        reply_limit: usize,
        out: &mut Reply,
    ) {
        let mut records: Vec<Vec<u8>> = Vec::with_capacity(found.len());
        let mut lost = None;
        let mut bytes = 0;
        for &(_, offset) in found {
            let mut rec = Vec::new();
            match ctx.store.consume(self.table, STREAMLET, offset, 1, |r| rec = r.to_vec()) {
                Ok(_) if !rec.is_empty() => {
                    bytes += rec.len();
                    records.push(rec);
                }
                Err(StreamError::Trimmed { first, .. }) => lost = Some(first),
                _ => {}
            }
            if bytes > reply_limit {
                break;
            }
        }
        if let Some(first) = lost {
            self.remove_groups_below(first);
        }
        out.array(records.len());
        for rec in &records {
            if !reply_entry(rec, out) {
                // Cannot be: only entry records are indexed as entries.
                out.array(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_id_reads_numbers_as_redis() {
        let id = |s: &str| parse_id(s.as_bytes(), true, 0, true).ok().map(|p| (p.id.ms, p.id.seq, p.seq_given));
        assert_eq!(id("5"), Some((5, 0, true)));
        assert_eq!(id("5-3"), Some((5, 3, true)));
        assert_eq!(id("5-*"), Some((5, 0, false)));
        assert_eq!(id("01-2"), Some((1, 2, true)), "strtoull reads leading zeros");
        assert_eq!(id(" 5"), Some((5, 0, true)), "and leading white space");
        assert_eq!(id("+5-1"), Some((5, 1, true)));
        assert_eq!(id("18446744073709551615-0"), Some((u64::MAX, 0, true)));
        assert_eq!(id("18446744073709551616"), None, "overflow");
        assert_eq!(id("-"), None, "strict");
        assert_eq!(id("+"), None);
        assert_eq!(id("-5"), None);
        assert_eq!(id("5-"), None);
        assert_eq!(id("5-x"), None);
        assert_eq!(id("5-1-2"), None);
        assert_eq!(id(""), None);
        assert_eq!(id(&"1".repeat(128)), None, "longer than Redis's buffer");
        let loose = |s: &str| parse_id(s.as_bytes(), false, u64::MAX, false).ok().map(|p| p.id);
        assert_eq!(loose("-"), Some(StreamId::MIN));
        assert_eq!(loose("+"), Some(StreamId::MAX));
        assert_eq!(loose("7"), Some(StreamId { ms: 7, seq: u64::MAX }));
        assert_eq!(loose("7-*"), None, "ms-* is XADD's only");
    }

    #[test]
    fn next_and_prev_carry_as_redis() {
        assert_eq!(StreamId { ms: 1, seq: u64::MAX }.next(), Some(StreamId { ms: 2, seq: 0 }));
        assert_eq!(StreamId::MAX.next(), None);
        assert_eq!(StreamId { ms: 2, seq: 0 }.prev(), Some(StreamId { ms: 1, seq: u64::MAX }));
        assert_eq!(StreamId::MIN.prev(), None);
    }

    #[test]
    fn records_round_trip_and_garbage_is_skipped() {
        let id = StreamId { ms: 9, seq: 4 };
        let e = encode_entry(id, [&b"f"[..], b"v"].into_iter());
        assert_eq!(e.len(), ENTRY_OVERHEAD + 2 + 8);
        assert_eq!(decode(&e), Some(Record::Entry(id)));
        let d = encode_delete(id, &[StreamId { ms: 1, seq: 1 }]);
        assert_eq!(decode(&d), Some(Record::Delete { last: id, ids: vec![StreamId { ms: 1, seq: 1 }] }));
        assert_eq!(decode(&encode_trim(id, None)), Some(Record::Trim { last: id, below: None }));
        assert_eq!(decode(&encode_trim(id, Some(id))), Some(Record::Trim { last: id, below: Some(id) }));
        for cut in 0..d.len() {
            assert_eq!(decode(&d[..cut]), None, "a torn marker is not a record");
        }
        assert_eq!(decode(b"hello"), None);
        let mut huge = d.clone();
        huge[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&huge), None, "a count past the bytes present");
    }

    fn ctx() -> ServerContext {
        use crate::config::{ByteSize, ServerConfig};
        ServerContext::new(ServerConfig { memory: ByteSize(64 << 20), ..Default::default() }).unwrap()
    }

    fn ids(x: &XStream) -> Vec<StreamId> {
        x.entries.keys().copied().collect()
    }

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// Forgets every index, as a server that restarted or recovered the
    /// streams' records has none: the next use rebuilds them.
    fn forget(ctx: &ServerContext) {
        ctx.xstreams.open.lock().clear();
    }

    fn add(ctx: &ServerContext, x: &Arc<Mutex<XStream>>, ms: u64, seq: u64, trim: Option<Trim>) {
        let fields = [&b"f"[..], &[b'v'; 200][..]];
        assert!(x.lock().add(ctx, NewId::Exact(id(ms, seq)), fields.into_iter(), trim).is_ok());
    }

    #[test]
    fn the_index_is_rebuilt_from_the_records_alone() {
        let ctx = ctx();
        let x = find_or_create(&ctx, 0, b"s").unwrap();
        for ms in 1..=3_000 {
            add(&ctx, &x, ms, 0, None);
        }
        // An XADD that trims exactly, deletions, an exact trim, and a
        // deletion of the last entry: the last ID must outlive it.
        add(&ctx, &x, 3_001, 0, Some(Trim { kind: TrimKind::MaxLen(2_500), approx: false, limit: 0 }));
        assert_eq!(x.lock().delete(&ctx, &[id(600, 0), id(601, 0), id(9_999, 0)]).unwrap(), 2);
        assert_eq!(
            x.lock().trim(&ctx, Trim { kind: TrimKind::MinId(id(700, 0)), approx: false, limit: 0 }).unwrap(),
            196
        );
        assert_eq!(x.lock().delete(&ctx, &[id(3_001, 0)]).unwrap(), 1);
        let before = ids(&x.lock());
        let last = x.lock().last;
        assert_eq!(before.len(), 2_301);
        assert_eq!(last, id(3_001, 0));
        forget(&ctx);
        let y = find(&ctx, 0, b"s").unwrap().unwrap();
        assert!(!Arc::ptr_eq(&x, &y), "a new index");
        assert_eq!(ids(&y.lock()), before);
        assert_eq!(y.lock().last, last, "the last ID survives the removal of its entry");
        let refused = y.lock().add(&ctx, NewId::Exact(id(3_001, 0)), [&b"f"[..], b"v"].into_iter(), None);
        assert!(matches!(refused, Err(AddRefused::Error(e)) if e == NOT_GREATER));
        // Every offset still reads its own entry.
        let found = y.lock().range(StreamId::MIN, StreamId::MAX, 0, false, usize::MAX);
        for (want, offset) in found {
            let mut got = None;
            ctx.store.consume(y.lock().table, STREAMLET, offset, 1, |r| got = decode(r)).unwrap();
            assert_eq!(got, Some(Record::Entry(want)));
        }
    }

    #[test]
    fn groups_without_live_entries_are_given_back() {
        let ctx = ctx();
        let x = find_or_create(&ctx, 0, b"s").unwrap();
        let table = x.lock().table;
        // About 230 B an entry: 20,000 make 4-5 groups of 1 MiB.
        for ms in 1..=20_000 {
            add(&ctx, &x, ms, 0, None);
        }
        let groups = |ctx: &ServerContext| ctx.store.stream_groups(table, STREAMLET, 0, 100).unwrap().len();
        let all = groups(&ctx);
        assert!(all >= 4, "{all} groups");
        // `~` removes whole groups only, and the count it reports is theirs.
        let approx = Trim { kind: TrimKind::MaxLen(10_000), approx: true, limit: 0 };
        let removed = x.lock().trim(&ctx, approx).unwrap();
        assert!(removed > 0 && removed <= 10_000, "{removed}");
        assert_eq!(x.lock().len(), 20_000 - removed);
        assert!(groups(&ctx) < all);
        let first_kept = x.lock().entries.values().next().unwrap().group;
        assert_eq!(ctx.store.stream_groups(table, STREAMLET, 0, 1).unwrap()[0].id, first_kept);
        // An exact trim to 10 entries leaves the last group or two.
        let exact = Trim { kind: TrimKind::MaxLen(10), approx: false, limit: 0 };
        x.lock().trim(&ctx, exact).unwrap();
        assert_eq!(ids(&x.lock()), (19_991..=20_000).map(|ms| id(ms, 0)).collect::<Vec<_>>());
        assert!(groups(&ctx) <= 2, "{} groups left", groups(&ctx));
        // The removal survives a rebuild (the store's trim point).
        forget(&ctx);
        let y = find(&ctx, 0, b"s").unwrap().unwrap();
        assert_eq!(ids(&y.lock()), (19_991..=20_000).map(|ms| id(ms, 0)).collect::<Vec<_>>());
        // Everything trimmed: every group but the last record's goes, and
        // the last ID outlives a rebuild.
        for ms in 20_001..=30_000 {
            add(&ctx, &y, ms, 0, None);
        }
        y.lock().trim(&ctx, Trim { kind: TrimKind::MaxLen(0), approx: false, limit: 0 }).unwrap();
        assert_eq!(groups(&ctx), 1);
        forget(&ctx);
        let z = find(&ctx, 0, b"s").unwrap().unwrap();
        assert_eq!(z.lock().len(), 0);
        assert_eq!(z.lock().last, id(30_000, 0));
    }

    #[test]
    fn blocked_reads_are_woken_by_their_keys_only_and_ended_waits_are_swept() {
        let x = XStreams::default();
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        x.wait_on(0, [&b"k"[..], b"j"].into_iter(), &a);
        x.wait_on(0, [&b"other"[..]].into_iter(), &b);
        x.wake(1, b"k");
        x.wake(0, b"k");
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let wait = |n: &Arc<Notify>| {
            rt.block_on(async { tokio::time::timeout(std::time::Duration::from_millis(20), n.notified()).await })
        };
        assert!(wait(&a).is_ok(), "an XADD to its key wakes it");
        assert!(wait(&b).is_err(), "an XADD to another key or database does not");
        assert!(!x.waiters.lock().by_key.contains_key(&(0, b"k".to_vec())), "woken waits re-register");
        for i in 0..3_000 {
            let ended = Arc::new(Notify::new());
            x.wait_on(0, [format!("k{i}").as_bytes()].into_iter(), &ended);
        }
        let w = x.waiters.lock();
        assert!(w.by_key.len() <= 1_025, "{} keys kept", w.by_key.len());
        assert!(w.by_key.contains_key(&(0, b"other".to_vec())), "a live wait stays");
    }

    #[test]
    fn filter_hashes_of_names_are_those_of_their_keys() {
        for (db, key) in [(0, &b"s"[..]), (3, b"a b%\x00\xff"), (15, b""), (1, b"%%\n~ x\x7f"), (2, &[b'k'; 200][..])] {
            let name = table_name(db, key).unwrap();
            assert_eq!(filter_hash_of_name(&name), Some(filter_hash(db, key)), "{name}");
        }
        for other in ["kv", "redis.db0", "redis.dbx.stream.s", "redis.db1.streams", "redis.db2.stream.%4"] {
            assert_eq!(filter_hash_of_name(other), None, "{other}");
        }
    }

    #[test]
    fn table_names_escape_and_are_bounded() {
        assert_eq!(table_name(0, b"s").unwrap(), "redis.db0.stream.s");
        assert_eq!(table_name(3, b"a b%\x00\xff").unwrap(), "redis.db3.stream.a b%25%00%FF");
        assert_eq!(unescape(b"a b%25%00%FF").unwrap(), b"a b%\x00\xff");
        assert_eq!(unescape(b"x%4"), None);
        assert!(table_name(0, &[b'a'; 230]).is_ok());
        assert!(table_name(0, &[b'a'; 240]).is_err());
    }
}
