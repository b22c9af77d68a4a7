//! The log's byte format: the one place that reads and writes log entries.
//!
//! `docs/log-format.md` is the specification; this module mirrors it. Every
//! entry is an *entry header* (a tag byte and a 0-3 byte little-endian body
//! length) followed by its body:
//!
//! ```text
//!  tag byte:  bit 7      bits 6-5          bits 4-0
//!             reserved 0 length-field size  entry type (0 is invalid)
//! ```
//!
//! Entries are unaligned and self-identifying. Every structured body starts
//! with a CRC32C over the entry header and the rest of the body, so an entry
//! can be verified on its own wherever it travels. The checksum entry carries
//! the cumulative CRC32C over all entry headers of its segment so far (Tailwind):
//! a buffer that holds any prefix of a segment can be scanned and its last
//! verified offset found without any other metadata ([`scan`]).
//!
//! Decoding never panics and never trusts a length before checking it
//! against the bytes present: replicas come from other machines.

use shoal_common::{ChunkId, LogId, SegmentId, TableId, UnixMillis, Version};

/// Version of the entry format written by this code (in the segment header).
/// 2 added the object-with-expiry entry (type 7), 3 the chunk and chunk
/// tombstone entries (types 8 and 9), 4 the stream batch entry (type 10),
/// 5 the chunk run entry (type 11); an older segment is a valid version 5
/// segment (it has none of the newer entries).
pub const FORMAT_VERSION: u8 = 5;

/// Size of a checksum entry: tag byte plus 4-byte CRC.
pub const CHECKSUM_ENTRY_BYTES: usize = 5;

/// Largest body an entry header can describe (3-byte length field).
pub const MAX_BODY_BYTES: usize = (1 << 24) - 1;

/// Length of a segment header entry (tag, 1-byte length, 25-byte body).
pub const SEGMENT_HEADER_BYTES: usize = 27;

/// The types of log entries. Matched exhaustively: adding one shows every
/// place to update. Codes 12-31 are free; 0 is never a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryType {
    SegmentHeader = 1,
    Object = 2,
    Tombstone = 3,
    LogDigest = 4,
    SafeVersion = 5,
    Checksum = 6,
    /// An object with an absolute expiry time (format version 2). Objects
    /// without one stay type 2, byte for byte.
    ObjectWithExpiry = 7,
    /// A keyless chunk of a chunk table, found through the CID table
    /// (format version 3).
    Chunk = 8,
    /// The tombstone of a removed or overwritten chunk (format version 3).
    ChunkTombstone = 9,
    /// One produce request's records, appended to a streamlet's log of a
    /// stream table (format version 4; `docs/streams.md`).
    StreamBatch = 10,
    /// Many chunks of one table and node, at one version and with payloads
    /// of one length, in one entry (format version 5): a chunk costs its
    /// payload and at most a few bytes of id in the log.
    ChunkRun = 11,
}

impl EntryType {
    pub fn from_code(code: u8) -> Option<EntryType> {
        Some(match code {
            1 => EntryType::SegmentHeader,
            2 => EntryType::Object,
            3 => EntryType::Tombstone,
            4 => EntryType::LogDigest,
            5 => EntryType::SafeVersion,
            6 => EntryType::Checksum,
            7 => EntryType::ObjectWithExpiry,
            8 => EntryType::Chunk,
            9 => EntryType::ChunkTombstone,
            10 => EntryType::StreamBatch,
            11 => EntryType::ChunkRun,
            _ => return None,
        })
    }

    /// Body size of types that have no length field.
    fn fixed_body(self) -> Option<usize> {
        match self {
            EntryType::Checksum => Some(4),
            EntryType::SegmentHeader
            | EntryType::Object
            | EntryType::ObjectWithExpiry
            | EntryType::Tombstone
            | EntryType::LogDigest
            | EntryType::SafeVersion
            | EntryType::Chunk
            | EntryType::ChunkTombstone
            | EntryType::StreamBatch
            | EntryType::ChunkRun => None,
        }
    }

    /// Whether entries of this type are objects (with or without expiry).
    pub fn is_object(self) -> bool {
        match self {
            EntryType::Object | EntryType::ObjectWithExpiry => true,
            EntryType::SegmentHeader
            | EntryType::Tombstone
            | EntryType::LogDigest
            | EntryType::SafeVersion
            | EntryType::Checksum
            | EntryType::Chunk
            | EntryType::ChunkTombstone
            | EntryType::StreamBatch
            | EntryType::ChunkRun => false,
        }
    }

    /// Whether entries of this type are tombstones (of objects or chunks):
    /// they name a segment and live while it is in the log.
    pub fn is_tombstone(self) -> bool {
        match self {
            EntryType::Tombstone | EntryType::ChunkTombstone => true,
            EntryType::SegmentHeader
            | EntryType::Object
            | EntryType::ObjectWithExpiry
            | EntryType::LogDigest
            | EntryType::SafeVersion
            | EntryType::Checksum
            | EntryType::Chunk
            | EntryType::StreamBatch
            | EntryType::ChunkRun => false,
        }
    }
}

/// Why bytes could not be decoded as an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// The buffer ends before the entry does.
    Truncated,
    /// A zero tag byte: the end of the written part of a pre-zeroed buffer.
    Zero,
    /// Unknown type, reserved bit set, or a length field that does not fit its type.
    BadHeader,
    /// The entry's own CRC32C does not match its contents.
    BadChecksum,
    /// The body's fields are inconsistent with its length.
    Malformed,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            FormatError::Truncated => "entry truncated",
            FormatError::Zero => "zero tag byte (end of written data)",
            FormatError::BadHeader => "invalid entry header",
            FormatError::BadChecksum => "entry checksum mismatch",
            FormatError::Malformed => "malformed entry body",
        };
        f.write_str(s)
    }
}

impl std::error::Error for FormatError {}

/// A decoded entry header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    pub entry_type: EntryType,
    /// Bytes of the header itself (1-4).
    pub header_len: usize,
    /// Bytes of the body that follows.
    pub body_len: usize,
}

impl EntryHeader {
    pub fn total_len(&self) -> usize {
        self.header_len + self.body_len
    }
}

/// Reads the entry header at the start of `buf`.
pub fn read_header(buf: &[u8]) -> Result<EntryHeader, FormatError> {
    let tag = *buf.first().ok_or(FormatError::Truncated)?;
    if tag == 0 {
        return Err(FormatError::Zero);
    }
    if tag & 0x80 != 0 {
        return Err(FormatError::BadHeader);
    }
    let entry_type = EntryType::from_code(tag & 0x1f).ok_or(FormatError::BadHeader)?;
    let len_bytes = ((tag >> 5) & 0x3) as usize;
    match (entry_type.fixed_body(), len_bytes) {
        (Some(fixed), 0) => Ok(EntryHeader { entry_type, header_len: 1, body_len: fixed }),
        (Some(_), _) | (None, 0) => Err(FormatError::BadHeader),
        (None, n) => {
            if buf.len() < 1 + n {
                return Err(FormatError::Truncated);
            }
            let mut body_len = 0usize;
            for (i, b) in buf[1..1 + n].iter().enumerate() {
                body_len |= (*b as usize) << (8 * i);
            }
            Ok(EntryHeader { entry_type, header_len: 1 + n, body_len })
        }
    }
}

/// Appends an entry header for a body of `body_len` bytes; returns its length.
fn put_header(out: &mut Vec<u8>, t: EntryType, body_len: usize) -> usize {
    debug_assert!(body_len <= MAX_BODY_BYTES);
    if t.fixed_body().is_some() {
        out.push(t as u8);
        return 1;
    }
    let n = if body_len < 1 << 8 {
        1
    } else if body_len < 1 << 16 {
        2
    } else {
        3
    };
    out.push(t as u8 | ((n as u8) << 5));
    out.extend_from_slice(&(body_len as u32).to_le_bytes()[..n]);
    1 + n
}

// ---------------------------------------------------------------------------
// Varints (unsigned LEB128)

pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*pos`, advancing it. At most 10 bytes; rejects overflow.
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64, FormatError> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos).ok_or(FormatError::Malformed)?;
        *pos += 1;
        if i == 9 && b > 1 {
            return Err(FormatError::Malformed);
        }
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(FormatError::Malformed)
}

fn get_u32(buf: &[u8], pos: usize) -> Result<u32, FormatError> {
    let b = buf.get(pos..pos + 4).ok_or(FormatError::Malformed)?;
    Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

fn get_u64(buf: &[u8], pos: usize) -> Result<u64, FormatError> {
    let b = buf.get(pos..pos + 8).ok_or(FormatError::Malformed)?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// Finishes a structured entry that starts at `start` in `out`: the body's
/// first 4 bytes become the CRC32C of the header and the rest of the body.
fn seal(out: &mut [u8], start: usize, header_len: usize) {
    let crc_pos = start + header_len;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[start..crc_pos]), &out[crc_pos + 4..]);
    out[crc_pos..crc_pos + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the CRC of a structured entry given as its full bytes.
fn verify(entry: &[u8], h: &EntryHeader) -> Result<(), FormatError> {
    if h.body_len < 4 || entry.len() < h.total_len() {
        return Err(FormatError::Malformed);
    }
    let crc_pos = h.header_len;
    let stored = get_u32(entry, crc_pos)?;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&entry[..crc_pos]), &entry[crc_pos + 4..h.total_len()]);
    if crc != stored {
        return Err(FormatError::BadChecksum);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Encoders. Each appends one entry to `out` and returns its length.

/// Length an object entry without expiry will take, to plan appends
/// before encoding.
pub fn object_len(table: TableId, version: Version, key_len: usize, value_len: usize) -> usize {
    object_len_with(table, version, None, key_len, value_len)
}

/// Length of an object entry with an optional expiry (type 7 with one,
/// type 2 without).
pub fn object_len_with(
    table: TableId,
    version: Version,
    expiry: Option<UnixMillis>,
    key_len: usize,
    value_len: usize,
) -> usize {
    let body = object_body_len(table, version, expiry, key_len, value_len);
    header_len_for(body) + body
}

fn object_body_len(
    table: TableId,
    version: Version,
    expiry: Option<UnixMillis>,
    key_len: usize,
    value_len: usize,
) -> usize {
    let expiry_len = expiry.map_or(0, |e| varint_len(e.0));
    4 + varint_len(table.0) + varint_len(version.0) + expiry_len + varint_len(key_len as u64) + key_len + value_len
}

fn header_len_for(body: usize) -> usize {
    if body < 1 << 8 {
        2
    } else if body < 1 << 16 {
        3
    } else {
        4
    }
}

/// Appends an object entry without expiry (type 2).
pub fn encode_object(out: &mut Vec<u8>, table: TableId, version: Version, key: &[u8], value: &[u8]) -> usize {
    encode_object_with(out, table, version, None, key, value)
}

/// Appends an object entry: type 7 carrying `expiry` when there is one,
/// else type 2 (exactly the bytes [`encode_object`] writes).
pub fn encode_object_with(
    out: &mut Vec<u8>,
    table: TableId,
    version: Version,
    expiry: Option<UnixMillis>,
    key: &[u8],
    value: &[u8],
) -> usize {
    let start = out.len();
    let body = object_body_len(table, version, expiry, key.len(), value.len());
    let t = if expiry.is_some() { EntryType::ObjectWithExpiry } else { EntryType::Object };
    let hl = put_header(out, t, body);
    out.extend_from_slice(&[0; 4]);
    put_varint(out, table.0);
    put_varint(out, version.0);
    if let Some(e) = expiry {
        put_varint(out, e.0);
    }
    put_varint(out, key.len() as u64);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    seal(out, start, hl);
    out.len() - start
}

pub fn tombstone_len(table: TableId, version: Version, segment: SegmentId, key_len: usize) -> usize {
    let body = 4 + varint_len(table.0) + varint_len(version.0) + varint_len(segment.0) + key_len;
    header_len_for(body) + body
}

pub fn encode_tombstone(out: &mut Vec<u8>, table: TableId, version: Version, segment: SegmentId, key: &[u8]) -> usize {
    let start = out.len();
    let body = 4 + varint_len(table.0) + varint_len(version.0) + varint_len(segment.0) + key.len();
    let hl = put_header(out, EntryType::Tombstone, body);
    out.extend_from_slice(&[0; 4]);
    put_varint(out, table.0);
    put_varint(out, version.0);
    put_varint(out, segment.0);
    out.extend_from_slice(key);
    seal(out, start, hl);
    out.len() - start
}

/// Length of a chunk entry.
pub fn chunk_len(table: TableId, id: ChunkId, version: Version, payload_len: usize) -> usize {
    let body = chunk_body_len(table, id, version, payload_len);
    header_len_for(body) + body
}

fn chunk_id_len(id: ChunkId) -> usize {
    varint_len(id.node() as u64) + varint_len(id.local())
}

fn chunk_body_len(table: TableId, id: ChunkId, version: Version, payload_len: usize) -> usize {
    4 + varint_len(table.0) + chunk_id_len(id) + varint_len(version.0) + payload_len
}

/// Appends a chunk entry (type 8): table, chunk id (node, local id),
/// version, payload.
pub fn encode_chunk(out: &mut Vec<u8>, table: TableId, id: ChunkId, version: Version, payload: &[u8]) -> usize {
    let start = out.len();
    let body = chunk_body_len(table, id, version, payload.len());
    let hl = put_header(out, EntryType::Chunk, body);
    out.extend_from_slice(&[0; 4]);
    put_varint(out, table.0);
    put_varint(out, id.node() as u64);
    put_varint(out, id.local());
    put_varint(out, version.0);
    out.extend_from_slice(payload);
    seal(out, start, hl);
    out.len() - start
}

/// Length of a chunk tombstone entry.
pub fn chunk_tombstone_len(table: TableId, id: ChunkId, version: Version, segment: SegmentId) -> usize {
    let body = 4 + varint_len(table.0) + chunk_id_len(id) + varint_len(version.0) + varint_len(segment.0);
    header_len_for(body) + body
}

/// Appends a chunk tombstone (type 9): every version of chunk `id` up to
/// `version` is dead; the newest of them was in `segment`.
pub fn encode_chunk_tombstone(
    out: &mut Vec<u8>,
    table: TableId,
    id: ChunkId,
    version: Version,
    segment: SegmentId,
) -> usize {
    let start = out.len();
    let body = 4 + varint_len(table.0) + chunk_id_len(id) + varint_len(version.0) + varint_len(segment.0);
    let hl = put_header(out, EntryType::ChunkTombstone, body);
    out.extend_from_slice(&[0; 4]);
    put_varint(out, table.0);
    put_varint(out, id.node() as u64);
    put_varint(out, id.local());
    put_varint(out, version.0);
    put_varint(out, segment.0);
    seal(out, start, hl);
    out.len() - start
}

/// Most records one chunk run holds: a record's index in its run fits the
/// 16 bits a CID table slot has for it.
pub const MAX_RUN_RECORDS: usize = u16::MAX as usize;

/// Most bytes a chunk run's header takes (tag, length field, CRC, table,
/// node, version, payload length, count, first local id and id width at
/// their longest): a reader that wants one record reads this much of the
/// entry's start to find it.
pub const MAX_RUN_HEADER_BYTES: usize = 1 + 3 + 4 + 10 + 3 + 10 + 4 + 3 + 7 + 1;

/// Bytes a record's local id takes in a run whose ids span `first..=last`
/// over `count` records: 0 when they are consecutive (`first + i`), else
/// the bytes of `last - first`, each record storing its distance from
/// `first` (little-endian).
fn run_id_width(first: u64, last: u64, count: usize) -> usize {
    let span = last - first;
    if span == count as u64 - 1 {
        0
    } else {
        (64 - span.leading_zeros() as usize).div_ceil(8)
    }
}

/// Length of a chunk run entry of `count` records with payloads of
/// `payload_len` bytes and local ids from `first` to `last` (ascending).
pub fn chunk_run_len(table: TableId, node: u16, version: Version, payload_len: usize, ids: (u64, u64, usize)) -> usize {
    let body = run_body_len(table, node, version, payload_len, ids);
    header_len_for(body) + body
}

/// Body length of a chunk run; `ids` is (first, last, count).
fn run_body_len(table: TableId, node: u16, version: Version, payload_len: usize, ids: (u64, u64, usize)) -> usize {
    let (first, last, count) = ids;
    4 + varint_len(table.0)
        + varint_len(node as u64)
        + varint_len(version.0)
        + varint_len(payload_len as u64)
        + varint_len(count as u64)
        + varint_len(first)
        + 1
        + count * (run_id_width(first, last, count) + payload_len)
}

/// Appends a chunk run (type 11): the chunks `records` (local id, payload)
/// of `node` in `table`, all at `version`. The caller guarantees what a
/// reader checks: 1 to [`MAX_RUN_RECORDS`] records, local ids strictly
/// ascending and within 1..=[`ChunkId::MAX_LOCAL`], payloads of one length.
pub fn encode_chunk_run(
    out: &mut Vec<u8>,
    table: TableId,
    node: u16,
    version: Version,
    records: &[(u64, &[u8])],
) -> usize {
    debug_assert!(!records.is_empty() && records.len() <= MAX_RUN_RECORDS);
    debug_assert!(records.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1.len() == w[1].1.len()));
    let start = out.len();
    let count = records.len();
    let first = records[0].0;
    let last = records[count - 1].0;
    let payload_len = records[0].1.len();
    let width = run_id_width(first, last, count);
    let body = run_body_len(table, node, version, payload_len, (first, last, count));
    let hl = put_header(out, EntryType::ChunkRun, body);
    out.extend_from_slice(&[0; 4]);
    put_varint(out, table.0);
    put_varint(out, node as u64);
    put_varint(out, version.0);
    put_varint(out, payload_len as u64);
    put_varint(out, count as u64);
    put_varint(out, first);
    out.push(width as u8);
    if width > 0 {
        for (local, _) in records {
            out.extend_from_slice(&(local - first).to_le_bytes()[..width]);
        }
    }
    for (_, p) in records {
        out.extend_from_slice(p);
    }
    seal(out, start, hl);
    out.len() - start
}

/// Where a stream batch entry belongs: its stream (a table), streamlet,
/// log of the streamlet's MultiLog, group, segment of the group, and its
/// index among the segment's batches (`docs/streams.md`). Replay places a
/// batch by these alone, whatever order segments come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchPlace {
    pub table: TableId,
    pub streamlet: u32,
    pub log: u32,
    pub group: u64,
    pub segment: u32,
    pub index: u32,
}

fn batch_place_len(p: &BatchPlace) -> usize {
    varint_len(p.table.0)
        + varint_len(p.streamlet as u64)
        + varint_len(p.log as u64)
        + varint_len(p.group)
        + varint_len(p.segment as u64)
        + varint_len(p.index as u64)
}

/// Bytes the records of a batch take in its entry: each a varint length
/// and its bytes.
pub fn batch_records_len<R: AsRef<[u8]>>(records: &[R]) -> usize {
    records.iter().map(|r| varint_len(r.as_ref().len() as u64) + r.as_ref().len()).sum()
}

/// Length of a stream batch entry whose records take `records_len` bytes
/// ([`batch_records_len`]).
pub fn stream_batch_len(p: &BatchPlace, count: usize, records_len: usize) -> usize {
    let body = 4 + batch_place_len(p) + varint_len(count as u64) + records_len;
    header_len_for(body) + body
}

/// Appends a stream batch entry (type 10): its place, the record count and
/// the records, each a varint length and its bytes. No per-record offset
/// or header is stored: a record's address is its batch's place and its
/// index in the batch. The caller keeps the body within [`MAX_BODY_BYTES`].
pub fn encode_stream_batch<R: AsRef<[u8]>>(out: &mut Vec<u8>, p: &BatchPlace, records: &[R]) -> usize {
    let start = out.len();
    let body = 4 + batch_place_len(p) + varint_len(records.len() as u64) + batch_records_len(records);
    let hl = put_header(out, EntryType::StreamBatch, body);
    out.extend_from_slice(&[0; 4]);
    put_varint(out, p.table.0);
    put_varint(out, p.streamlet as u64);
    put_varint(out, p.log as u64);
    put_varint(out, p.group);
    put_varint(out, p.segment as u64);
    put_varint(out, p.index as u64);
    put_varint(out, records.len() as u64);
    for r in records {
        put_varint(out, r.as_ref().len() as u64);
        out.extend_from_slice(r.as_ref());
    }
    seal(out, start, hl);
    out.len() - start
}

pub fn encode_segment_header(out: &mut Vec<u8>, log: LogId, segment: SegmentId, capacity: u32) -> usize {
    let start = out.len();
    let hl = put_header(out, EntryType::SegmentHeader, 25);
    out.extend_from_slice(&[0; 4]);
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&log.0.to_le_bytes());
    out.extend_from_slice(&segment.0.to_le_bytes());
    out.extend_from_slice(&capacity.to_le_bytes());
    seal(out, start, hl);
    out.len() - start
}

pub fn digest_len(count: usize) -> usize {
    let body = 8 + 8 * count;
    header_len_for(body) + body
}

pub fn encode_digest(out: &mut Vec<u8>, segments: &[SegmentId]) -> usize {
    let start = out.len();
    let hl = put_header(out, EntryType::LogDigest, 8 + 8 * segments.len());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(segments.len() as u32).to_le_bytes());
    for s in segments {
        out.extend_from_slice(&s.0.to_le_bytes());
    }
    seal(out, start, hl);
    out.len() - start
}

pub const SAFE_VERSION_BYTES: usize = 14;

pub fn encode_safe_version(out: &mut Vec<u8>, version: Version) -> usize {
    let start = out.len();
    let hl = put_header(out, EntryType::SafeVersion, 12);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&version.0.to_le_bytes());
    seal(out, start, hl);
    out.len() - start
}

/// Appends a checksum entry carrying `crc`, the cumulative header CRC
/// *including this entry's own tag byte* (see [`HeaderCrc`]).
pub fn encode_checksum(out: &mut Vec<u8>, crc: u32) -> usize {
    out.extend_from_slice(&checksum_entry(crc));
    CHECKSUM_ENTRY_BYTES
}

/// A checksum entry's bytes (see [`encode_checksum`]), without a buffer.
pub fn checksum_entry(crc: u32) -> [u8; CHECKSUM_ENTRY_BYTES] {
    let c = crc.to_le_bytes();
    [EntryType::Checksum as u8, c[0], c[1], c[2], c[3]]
}

// ---------------------------------------------------------------------------
// The cumulative header checksum (Tailwind).

/// Running CRC32C over the entry headers of one segment.
///
/// Contract: `add` is called with the header bytes (tag and length field) of
/// every entry in segment order, checksum entries included. A checksum entry
/// stores [`HeaderCrc::value`] taken right after its own tag byte was added.
/// The stored value is never zero (a zero CRC is stored as 1), so a partly
/// written checksum in a pre-zeroed buffer can never verify.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderCrc(pub u32);

impl HeaderCrc {
    pub fn add(&mut self, header: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, header);
    }

    pub fn value(&self) -> u32 {
        if self.0 == 0 {
            1
        } else {
            self.0
        }
    }
}

// ---------------------------------------------------------------------------
// Decoded views.

/// An object entry (type 2, or 7 when `expiry` is set), borrowed from the
/// bytes it was decoded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectView<'a> {
    pub table: TableId,
    pub version: Version,
    /// When the object expires (expired once the clock reaches it).
    pub expiry: Option<UnixMillis>,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl ObjectView<'_> {
    /// Whether the object has expired at `now` (never, without an expiry).
    pub fn expired_at(&self, now: UnixMillis) -> bool {
        self.expiry.is_some_and(|e| e <= now)
    }
}

/// A tombstone entry: the object (table, key, version) it kills lived in `segment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TombstoneView<'a> {
    pub table: TableId,
    pub version: Version,
    pub segment: SegmentId,
    pub key: &'a [u8],
}

/// A chunk entry (type 8), borrowed from the bytes it was decoded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkView<'a> {
    pub table: TableId,
    pub id: ChunkId,
    pub version: Version,
    pub payload: &'a [u8],
}

/// A chunk tombstone (type 9): versions of chunk `id` up to `version` are
/// dead; the newest of them lived in `segment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkTombstoneView {
    pub table: TableId,
    pub id: ChunkId,
    pub version: Version,
    pub segment: SegmentId,
}

/// The fixed part of a chunk run (type 11): enough to find any of its
/// records without reading the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRunHeader {
    pub table: TableId,
    pub node: u16,
    pub version: Version,
    /// Every record's payload length.
    pub payload_len: usize,
    /// Records in the run (1 to [`MAX_RUN_RECORDS`]).
    pub count: usize,
    /// The first record's local id.
    pub first: u64,
    /// Bytes of each record's distance from `first` (0: the ids are
    /// consecutive and no distances are stored).
    pub width: usize,
    /// Offset of the distances from the entry's start; the payloads
    /// follow them.
    pub ids_at: usize,
}

impl ChunkRunHeader {
    /// Offset of record `i`'s payload from the entry's start.
    pub fn payload_at(&self, i: usize) -> usize {
        self.ids_at + self.count * self.width + i * self.payload_len
    }

    /// The entry's total length.
    pub fn total_len(&self) -> usize {
        self.payload_at(self.count)
    }

    /// The log bytes record `i` stands for in the store's live-byte
    /// counts: its distance and payload, and its share of the header (the
    /// first record takes the remainder, so the records of a run count
    /// exactly its bytes).
    pub fn record_bytes(&self, i: usize) -> usize {
        let share = self.ids_at / self.count + if i == 0 { self.ids_at % self.count } else { 0 };
        self.width + self.payload_len + share
    }

    /// Most bytes the cleaner may write, beyond its live records' shares
    /// of this run ([`Self::record_bytes`]), when it rewrites it as the
    /// run of its live records: a header at its longest, and per record
    /// the widest distance a subset of its ids can need (a subset spans
    /// no more than the run: `width` bytes, or for consecutive ids the
    /// bytes of `count - 1`).
    pub fn relocation_slack(&self) -> usize {
        let span = self.count as u64 - 1;
        let widest = self.width.max((64 - span.leading_zeros() as usize).div_ceil(8));
        MAX_RUN_HEADER_BYTES + self.count * widest
    }
}

/// A chunk run entry (type 11), borrowed from the bytes it was decoded
/// from: its records were checked (ids ascending and in range).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRunView<'a> {
    pub header: ChunkRunHeader,
    entry: &'a [u8],
}

impl<'a> ChunkRunView<'a> {
    pub fn len(&self) -> usize {
        self.header.count
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The id of record `i`.
    pub fn id(&self, i: usize) -> ChunkId {
        let h = &self.header;
        let dist = if h.width == 0 {
            i as u64
        } else {
            let at = h.ids_at + i * h.width;
            let mut b = [0u8; 8];
            b[..h.width].copy_from_slice(&self.entry[at..at + h.width]);
            u64::from_le_bytes(b)
        };
        ChunkId::new(h.node, h.first + dist)
    }

    /// Record `i` as a chunk.
    pub fn chunk(&self, i: usize) -> ChunkView<'a> {
        let h = &self.header;
        let at = h.payload_at(i);
        ChunkView { table: h.table, id: self.id(i), version: h.version, payload: &self.entry[at..at + h.payload_len] }
    }

    /// The records in order, as chunks.
    pub fn iter(&self) -> impl Iterator<Item = ChunkView<'a>> + '_ {
        (0..self.header.count).map(|i| self.chunk(i))
    }
}

/// Reads a chunk run's fixed part from the start of its entry (at least
/// [`MAX_RUN_HEADER_BYTES`] of it, or all of a shorter entry), checking
/// that the record sizes it gives end the entry exactly. The read path
/// uses it to find one record without reading the rest.
pub fn parse_chunk_run_header(prefix: &[u8]) -> Result<ChunkRunHeader, FormatError> {
    parse_chunk_run_header_after(prefix, &read_header(prefix)?)
}

/// [`parse_chunk_run_header`] of an entry whose header `h` was read
/// already (the read path reads it once per lookup).
pub fn parse_chunk_run_header_after(prefix: &[u8], h: &EntryHeader) -> Result<ChunkRunHeader, FormatError> {
    if h.entry_type != EntryType::ChunkRun {
        return Err(FormatError::Malformed);
    }
    let mut pos = h.header_len + 4;
    let table = TableId(get_varint(prefix, &mut pos)?);
    let node = u16::try_from(get_varint(prefix, &mut pos)?).map_err(|_| FormatError::Malformed)?;
    let version = Version(get_varint(prefix, &mut pos)?);
    let payload_len = get_varint(prefix, &mut pos)?;
    let count = get_varint(prefix, &mut pos)?;
    let first = get_varint(prefix, &mut pos)?;
    let width = *prefix.get(pos).ok_or(FormatError::Malformed)? as usize;
    pos += 1;
    // Varints padded beyond their shortest form could push the fixed part
    // past what a reader of one record reads: refused.
    if count == 0
        || count > MAX_RUN_RECORDS as u64
        || first == 0
        || first > ChunkId::MAX_LOCAL
        || width > 6
        || pos > MAX_RUN_HEADER_BYTES
    {
        return Err(FormatError::Malformed);
    }
    let (count, payload_len) = (count as usize, usize::try_from(payload_len).map_err(|_| FormatError::Malformed)?);
    let records = payload_len.checked_add(width).and_then(|s| s.checked_mul(count));
    if records.and_then(|r| r.checked_add(pos)) != Some(h.total_len()) {
        return Err(FormatError::Malformed);
    }
    Ok(ChunkRunHeader { table, node, version, payload_len, count, first, width, ids_at: pos })
}

/// Decodes a full chunk run without checking its CRC (as [`parse_chunk`]).
pub fn parse_chunk_run(entry: &[u8]) -> Result<ChunkRunView<'_>, FormatError> {
    let h = read_header(entry)?;
    if h.entry_type != EntryType::ChunkRun || entry.len() < h.total_len() {
        return Err(FormatError::Malformed);
    }
    parse_chunk_run_body(&entry[..h.total_len()])
}

fn parse_chunk_run_body(entry: &[u8]) -> Result<ChunkRunView<'_>, FormatError> {
    let header = parse_chunk_run_header(entry)?;
    let h = &header;
    let last = if h.width == 0 {
        h.count as u64 - 1
    } else {
        // Distances: the first 0, then strictly ascending.
        let mut prev = None;
        for i in 0..h.count {
            let at = h.ids_at + i * h.width;
            let mut b = [0u8; 8];
            b[..h.width].copy_from_slice(&entry[at..at + h.width]);
            let d = u64::from_le_bytes(b);
            match prev {
                None if d != 0 => return Err(FormatError::Malformed),
                Some(p) if d <= p => return Err(FormatError::Malformed),
                _ => prev = Some(d),
            }
        }
        prev.expect("at least one record")
    };
    if h.first.checked_add(last).is_none_or(|l| l > ChunkId::MAX_LOCAL) {
        return Err(FormatError::Malformed);
    }
    Ok(ChunkRunView { header, entry })
}

/// A decoded stream batch entry: its place and its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamBatchView<'a> {
    pub place: BatchPlace,
    /// Records in the batch (at least 1).
    pub count: u32,
    /// The records as stored: each a varint length and its bytes; walk
    /// them with [`BatchRecords`].
    pub records: &'a [u8],
}

impl<'a> StreamBatchView<'a> {
    /// The batch's records, in order.
    pub fn iter(&self) -> BatchRecords<'a> {
        BatchRecords { buf: self.records, pos: 0 }
    }
}

/// The records of a stream batch, in order. The records were checked to
/// parse when the entry was decoded, so iteration stops only at the end.
#[derive(Clone)]
pub struct BatchRecords<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let len = get_varint(self.buf, &mut self.pos).ok()? as usize;
        let r = self.buf.get(self.pos..self.pos.checked_add(len)?)?;
        self.pos += len;
        Some(r)
    }
}

/// The 8 bytes (chunk id, little-endian) that stand for a chunk's key where
/// entries are routed by (table, key): recovery partitions and filters.
pub fn chunk_key(id: ChunkId) -> [u8; 8] {
    id.0.to_le_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeaderView {
    pub format: u8,
    pub log: LogId,
    pub segment: SegmentId,
    pub capacity: u32,
}

/// Any decoded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    SegmentHeader(SegmentHeaderView),
    /// An object, with or without expiry (types 2 and 7).
    Object(ObjectView<'a>),
    Tombstone(TombstoneView<'a>),
    LogDigest(Vec<SegmentId>),
    SafeVersion(Version),
    Checksum(u32),
    Chunk(ChunkView<'a>),
    ChunkTombstone(ChunkTombstoneView),
    StreamBatch(StreamBatchView<'a>),
    ChunkRun(ChunkRunView<'a>),
}

impl Entry<'_> {
    /// The segment a tombstone (of an object or a chunk) names; `None` for
    /// every other entry.
    pub fn tombstone_segment(&self) -> Option<SegmentId> {
        match self {
            Entry::Tombstone(t) => Some(t.segment),
            Entry::ChunkTombstone(t) => Some(t.segment),
            Entry::SegmentHeader(_)
            | Entry::Object(_)
            | Entry::LogDigest(_)
            | Entry::SafeVersion(_)
            | Entry::Checksum(_)
            | Entry::Chunk(_)
            | Entry::StreamBatch(_)
            | Entry::ChunkRun(_) => None,
        }
    }
}

/// Decodes the object fields of a full object entry without checking its
/// CRC (the read path; the entry was verified when written). Use
/// [`decode`] to verify.
pub fn parse_object(entry: &[u8]) -> Result<ObjectView<'_>, FormatError> {
    let h = read_header(entry)?;
    if !h.entry_type.is_object() || entry.len() < h.total_len() {
        return Err(FormatError::Malformed);
    }
    parse_object_body(&entry[..h.total_len()], &h)
}

fn parse_object_body<'a>(entry: &'a [u8], h: &EntryHeader) -> Result<ObjectView<'a>, FormatError> {
    let mut pos = h.header_len + 4;
    let table = TableId(get_varint(entry, &mut pos)?);
    let version = Version(get_varint(entry, &mut pos)?);
    let expiry = match h.entry_type {
        EntryType::ObjectWithExpiry => Some(UnixMillis(get_varint(entry, &mut pos)?)),
        _ => None,
    };
    let key_len = get_varint(entry, &mut pos)? as usize;
    let end = h.total_len();
    if key_len > end.saturating_sub(pos) {
        return Err(FormatError::Malformed);
    }
    Ok(ObjectView { table, version, expiry, key: &entry[pos..pos + key_len], value: &entry[pos + key_len..end] })
}

/// Decodes a full chunk entry without checking its CRC (the read path, as
/// [`parse_object`]).
pub fn parse_chunk(entry: &[u8]) -> Result<ChunkView<'_>, FormatError> {
    parse_chunk_after(entry, &read_header(entry)?)
}

/// [`parse_chunk`] of an entry whose header `h` was read already.
pub fn parse_chunk_after<'a>(entry: &'a [u8], h: &EntryHeader) -> Result<ChunkView<'a>, FormatError> {
    if h.entry_type != EntryType::Chunk || entry.len() < h.total_len() {
        return Err(FormatError::Malformed);
    }
    parse_chunk_body(&entry[..h.total_len()], h)
}

fn get_chunk_id(entry: &[u8], pos: &mut usize) -> Result<ChunkId, FormatError> {
    let node = get_varint(entry, pos)?;
    let local = get_varint(entry, pos)?;
    if node > u16::MAX as u64 || local == 0 || local > ChunkId::MAX_LOCAL {
        return Err(FormatError::Malformed);
    }
    Ok(ChunkId::new(node as u16, local))
}

fn parse_chunk_body<'a>(entry: &'a [u8], h: &EntryHeader) -> Result<ChunkView<'a>, FormatError> {
    let mut pos = h.header_len + 4;
    let table = TableId(get_varint(entry, &mut pos)?);
    let id = get_chunk_id(entry, &mut pos)?;
    let version = Version(get_varint(entry, &mut pos)?);
    let end = h.total_len();
    if pos > end {
        return Err(FormatError::Malformed);
    }
    Ok(ChunkView { table, id, version, payload: &entry[pos..end] })
}

fn parse_chunk_tombstone_body(entry: &[u8], h: &EntryHeader) -> Result<ChunkTombstoneView, FormatError> {
    let mut pos = h.header_len + 4;
    let table = TableId(get_varint(entry, &mut pos)?);
    let id = get_chunk_id(entry, &mut pos)?;
    let version = Version(get_varint(entry, &mut pos)?);
    let segment = SegmentId(get_varint(entry, &mut pos)?);
    if pos != h.total_len() {
        return Err(FormatError::Malformed);
    }
    Ok(ChunkTombstoneView { table, id, version, segment })
}

/// Decodes a full stream batch entry without checking its CRC (the read
/// path, as [`parse_object`]).
pub fn parse_stream_batch(entry: &[u8]) -> Result<StreamBatchView<'_>, FormatError> {
    let h = read_header(entry)?;
    if h.entry_type != EntryType::StreamBatch || entry.len() < h.total_len() {
        return Err(FormatError::Malformed);
    }
    parse_stream_batch_body(&entry[..h.total_len()], &h)
}

fn get_u32_varint(entry: &[u8], pos: &mut usize) -> Result<u32, FormatError> {
    u32::try_from(get_varint(entry, pos)?).map_err(|_| FormatError::Malformed)
}

fn parse_stream_batch_body<'a>(entry: &'a [u8], h: &EntryHeader) -> Result<StreamBatchView<'a>, FormatError> {
    let mut pos = h.header_len + 4;
    let place = BatchPlace {
        table: TableId(get_varint(entry, &mut pos)?),
        streamlet: get_u32_varint(entry, &mut pos)?,
        log: get_u32_varint(entry, &mut pos)?,
        group: get_varint(entry, &mut pos)?,
        segment: get_u32_varint(entry, &mut pos)?,
        index: get_u32_varint(entry, &mut pos)?,
    };
    let count = get_u32_varint(entry, &mut pos)?;
    let end = h.total_len();
    if count == 0 || pos > end {
        return Err(FormatError::Malformed);
    }
    // Every record's length must fit, and the records must end the body
    // exactly: a reader then walks them without checks.
    let records = &entry[pos..end];
    let mut at = 0;
    for _ in 0..count {
        let len = get_varint(records, &mut at)? as usize;
        if len > records.len() - at {
            return Err(FormatError::Malformed);
        }
        at += len;
    }
    if at != records.len() {
        return Err(FormatError::Malformed);
    }
    Ok(StreamBatchView { place, count, records })
}

fn parse_tombstone_body<'a>(entry: &'a [u8], h: &EntryHeader) -> Result<TombstoneView<'a>, FormatError> {
    let mut pos = h.header_len + 4;
    let table = TableId(get_varint(entry, &mut pos)?);
    let version = Version(get_varint(entry, &mut pos)?);
    let segment = SegmentId(get_varint(entry, &mut pos)?);
    let end = h.total_len();
    if pos > end {
        return Err(FormatError::Malformed);
    }
    Ok(TombstoneView { table, version, segment, key: &entry[pos..end] })
}

/// Decodes and verifies one entry at the start of `buf`; returns it and its length.
pub fn decode(buf: &[u8]) -> Result<(Entry<'_>, usize), FormatError> {
    decode_checked(buf, true)
}

/// Like [`decode`] but without checking the entry's own CRC: for memory the
/// store wrote itself and that was verified when written (the cleaner's path).
pub fn decode_trusted(buf: &[u8]) -> Result<(Entry<'_>, usize), FormatError> {
    decode_checked(buf, false)
}

fn decode_checked(buf: &[u8], check: bool) -> Result<(Entry<'_>, usize), FormatError> {
    let verify = |entry: &[u8], h: &EntryHeader| if check { verify(entry, h) } else { Ok(()) };
    let h = read_header(buf)?;
    if buf.len() < h.total_len() {
        return Err(FormatError::Truncated);
    }
    let entry = &buf[..h.total_len()];
    let body = h.header_len;
    let e = match h.entry_type {
        EntryType::Checksum => Entry::Checksum(get_u32(entry, body)?),
        EntryType::Object | EntryType::ObjectWithExpiry => {
            verify(entry, &h)?;
            Entry::Object(parse_object_body(entry, &h)?)
        }
        EntryType::Tombstone => {
            verify(entry, &h)?;
            Entry::Tombstone(parse_tombstone_body(entry, &h)?)
        }
        EntryType::SegmentHeader => {
            verify(entry, &h)?;
            if h.body_len != 25 {
                return Err(FormatError::Malformed);
            }
            Entry::SegmentHeader(SegmentHeaderView {
                format: entry[body + 4],
                log: LogId(get_u64(entry, body + 5)?),
                segment: SegmentId(get_u64(entry, body + 13)?),
                capacity: get_u32(entry, body + 21)?,
            })
        }
        EntryType::LogDigest => {
            verify(entry, &h)?;
            let count = get_u32(entry, body + 4)? as usize;
            if h.body_len != 8 + count.checked_mul(8).ok_or(FormatError::Malformed)? {
                return Err(FormatError::Malformed);
            }
            let ids =
                (0..count).map(|i| get_u64(entry, body + 8 + 8 * i).map(SegmentId)).collect::<Result<Vec<_>, _>>()?;
            Entry::LogDigest(ids)
        }
        EntryType::SafeVersion => {
            verify(entry, &h)?;
            if h.body_len != 12 {
                return Err(FormatError::Malformed);
            }
            Entry::SafeVersion(Version(get_u64(entry, body + 4)?))
        }
        EntryType::Chunk => {
            verify(entry, &h)?;
            Entry::Chunk(parse_chunk_body(entry, &h)?)
        }
        EntryType::ChunkTombstone => {
            verify(entry, &h)?;
            Entry::ChunkTombstone(parse_chunk_tombstone_body(entry, &h)?)
        }
        EntryType::StreamBatch => {
            verify(entry, &h)?;
            Entry::StreamBatch(parse_stream_batch_body(entry, &h)?)
        }
        EntryType::ChunkRun => {
            verify(entry, &h)?;
            Entry::ChunkRun(parse_chunk_run_body(entry)?)
        }
    };
    Ok((e, h.total_len()))
}

// ---------------------------------------------------------------------------
// Scanning a segment buffer (Tailwind, Algorithm 1).

/// What a scan of a segment buffer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanResult {
    /// Bytes from the start that end with a verified checksum entry: the
    /// longest prefix that can be trusted. 0 if no checksum verified.
    pub verified_len: usize,
    /// The last verified checksum value (0 if none).
    pub last_checksum: u32,
    /// Number of entries (of any type) in the verified prefix.
    pub entries: usize,
}

/// Finds the last verified offset of a (possibly torn) segment buffer.
///
/// Walks entry headers from offset 0, folding each into the running header
/// CRC; at every checksum entry compares. Stops at a zero byte, an invalid
/// header, an entry that runs past the buffer, or a checksum mismatch. Only
/// the prefix ending at the last matching checksum is returned as valid:
/// an append is durable exactly when its trailing checksum arrived whole.
pub fn scan(buf: &[u8]) -> ScanResult {
    let mut crc = HeaderCrc::default();
    let mut pos = 0;
    let mut entries = 0;
    let mut result = ScanResult { verified_len: 0, last_checksum: 0, entries: 0 };
    while pos < buf.len() {
        let h = match read_header(&buf[pos..]) {
            Ok(h) => h,
            Err(_) => break,
        };
        if pos + h.total_len() > buf.len() {
            break;
        }
        crc.add(&buf[pos..pos + h.header_len]);
        entries += 1;
        if h.entry_type == EntryType::Checksum {
            let stored = u32::from_le_bytes(buf[pos + 1..pos + 5].try_into().expect("4 bytes"));
            if stored != crc.value() {
                break;
            }
            result = ScanResult { verified_len: pos + h.total_len(), last_checksum: stored, entries };
        }
        pos += h.total_len();
    }
    result
}

/// Iterates the entries of a buffer that is known to be well formed up to
/// its length (for example a verified prefix returned by [`scan`]). Yields
/// `(offset, decoded entry)`; stops at the first undecodable entry, yielding
/// its error once.
pub struct EntryIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
    check: bool,
}

impl<'a> EntryIter<'a> {
    /// Verifies each entry's own CRC.
    pub fn new(buf: &'a [u8]) -> Self {
        EntryIter { buf, pos: 0, failed: false, check: true }
    }

    /// Skips the per-entry CRC (see [`decode_trusted`]).
    pub fn trusted(buf: &'a [u8]) -> Self {
        EntryIter { buf, pos: 0, failed: false, check: false }
    }
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Result<(usize, Entry<'a>), FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        match decode_checked(&self.buf[self.pos..], self.check) {
            Ok((e, len)) => {
                let at = self.pos;
                self.pos += len;
                Some(Ok((at, e)))
            }
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

/// What [`filter_entries`] kept, and the safe version of everything it saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filtered {
    /// One above the highest version of any object or tombstone in the
    /// buffer (`u64::MAX` if that is the highest: a replica may hold any
    /// version), or the highest safe-version entry if that is higher: what a
    /// replay of the buffer must raise the safe version to, whichever
    /// entries were kept.
    pub safe_version: u64,
    /// Objects, chunks (a run's records one by one) and stream batches kept.
    pub objects: u32,
    /// Tombstone entries (of objects and chunks) kept.
    pub tombstones: u32,
}

/// Which entries a partition keeps ([`filter_entries`]). Any
/// `FnMut(TableId, &[u8]) -> bool` is one that offers chunks under their
/// [`chunk_key`].
pub trait EntryFilter {
    /// Whether to keep an entry of `key` of `table` (objects, tombstones,
    /// stream batches under their streamlet's key).
    fn keep_key(&mut self, table: TableId, key: &[u8]) -> bool;

    /// Whether to keep a chunk entry or chunk tombstone of chunk
    /// `node << 48 | local` of `table`. Every entry that names chunks is
    /// classified here, one chunk at a time.
    fn keep_chunk(&mut self, table: TableId, node: u16, local: u64) -> bool {
        self.keep_key(table, &chunk_key(ChunkId::new(node, local)))
    }
}

impl<F: FnMut(TableId, &[u8]) -> bool> EntryFilter for F {
    fn keep_key(&mut self, table: TableId, key: &[u8]) -> bool {
        self(table, key)
    }
}

/// Copies, byte for byte and in order, the object and tombstone entries of
/// `buf` that `keep` keeps to the end of `out`: a
/// partition's share of a segment for recovery. Chunk entries and chunk
/// tombstones are offered to [`EntryFilter::keep_chunk`], and so is each
/// record of a chunk run (a run kept in part is written again as the run
/// of the records kept, with a CRC of its own), stream batches
/// with their streamlet's key ([`shoal_common::streamlet_key`]); chunk versions
/// are per chunk and do not count towards the safe version. Every entry's own CRC is
/// checked (an entry whose key bytes were damaged must not be sorted into
/// the wrong partition unnoticed), so `buf` should be a prefix that
/// [`scan`] verified. Stops with the first entry that does not decode.
pub fn filter_entries(buf: &[u8], keep: impl EntryFilter, out: &mut Vec<u8>) -> Result<Filtered, FormatError> {
    filter_checked(buf, keep, out, true)
}

/// [`filter_entries`] of bytes whose every entry's CRC was checked already
/// (for example by `restore::verify_replica`): entries are not checked again.
pub fn filter_entries_trusted(buf: &[u8], keep: impl EntryFilter, out: &mut Vec<u8>) -> Result<Filtered, FormatError> {
    filter_checked(buf, keep, out, false)
}

fn filter_checked(
    buf: &[u8],
    mut keep: impl EntryFilter,
    out: &mut Vec<u8>,
    check: bool,
) -> Result<Filtered, FormatError> {
    let mut f = Filtered::default();
    let mut pos = 0;
    while pos < buf.len() {
        let (entry, len) = decode_checked(&buf[pos..], check)?;
        let kept = match entry {
            Entry::Object(o) => {
                f.safe_version = f.safe_version.max(o.version.0.saturating_add(1));
                let k = keep.keep_key(o.table, o.key);
                f.objects += k as u32;
                k
            }
            Entry::Tombstone(t) => {
                f.safe_version = f.safe_version.max(t.version.0.saturating_add(1));
                let k = keep.keep_key(t.table, t.key);
                f.tombstones += k as u32;
                k
            }
            Entry::SafeVersion(v) => {
                f.safe_version = f.safe_version.max(v.0);
                false
            }
            Entry::Chunk(c) => {
                let k = keep.keep_chunk(c.table, c.id.node(), c.id.local());
                f.objects += k as u32;
                k
            }
            Entry::ChunkTombstone(t) => {
                let k = keep.keep_chunk(t.table, t.id.node(), t.id.local());
                f.tombstones += k as u32;
                k
            }
            Entry::StreamBatch(b) => {
                let k = keep.keep_key(b.place.table, &shoal_common::streamlet_key(b.place.streamlet));
                f.objects += k as u32;
                k
            }
            Entry::ChunkRun(run) => {
                // Each record goes where its id belongs; a run split by
                // the filter is written again as the run of the records
                // kept (with a CRC of its own).
                let h = &run.header;
                let kept: Vec<usize> =
                    (0..run.len()).filter(|&i| keep.keep_chunk(h.table, h.node, run.id(i).local())).collect();
                f.objects += kept.len() as u32;
                if kept.len() == run.len() {
                    true
                } else {
                    if !kept.is_empty() {
                        let records: Vec<(u64, &[u8])> =
                            kept.iter().map(|&i| (run.id(i).local(), run.chunk(i).payload)).collect();
                        encode_chunk_run(out, h.table, h.node, h.version, &records);
                    }
                    false
                }
            }
            Entry::SegmentHeader(_) | Entry::LogDigest(_) | Entry::Checksum(_) => false,
        };
        if kept {
            out.extend_from_slice(&buf[pos..pos + len]);
        }
        pos += len;
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found with the `log_entry` fuzz target's harness: an object or
    /// tombstone at version `u64::MAX` (a well-formed entry, CRC and all,
    /// as a replica from a backup may hold) made the safe version overflow.
    #[test]
    fn filter_entries_safe_version_saturates_at_the_highest_version() {
        let mut b = Vec::new();
        encode_object(&mut b, TableId(1), Version(u64::MAX), b"k", b"v");
        encode_tombstone(&mut b, TableId(1), Version(u64::MAX), SegmentId(2), b"k");
        let mut out = Vec::new();
        let f = filter_entries(&b, |_, _: &[u8]| true, &mut out).unwrap();
        assert_eq!(f, Filtered { safe_version: u64::MAX, objects: 1, tombstones: 1 });
        assert_eq!(out, b);
        out.clear();
        assert_eq!(filter_entries_trusted(&b, |_, _: &[u8]| false, &mut out).unwrap().safe_version, u64::MAX);
    }

    /// A chunk entry whose local id is 0 or beyond 48 bits, or whose node
    /// id is beyond 16 bits, is malformed even with a matching CRC.
    #[test]
    fn decode_rejects_chunk_ids_out_of_range() {
        for (node, local) in [(1u64, 0u64), (1, 1 << 48), (1 << 16, 1)] {
            let mut rest = Vec::new();
            put_varint(&mut rest, 1);
            put_varint(&mut rest, node);
            put_varint(&mut rest, local);
            put_varint(&mut rest, 1);
            let mut b = Vec::new();
            let hl = put_header(&mut b, EntryType::Chunk, 4 + rest.len());
            b.extend_from_slice(&[0; 4]);
            b.extend_from_slice(&rest);
            seal(&mut b, 0, hl);
            assert_eq!(decode(&b), Err(FormatError::Malformed), "node {node} local {local}");
        }
    }

    /// Chunk entries are offered to a filter under their 8-byte id key and
    /// do not raise the safe version (their versions are per chunk).
    #[test]
    fn filter_entries_offers_chunks_by_id_key() {
        let mut b = Vec::new();
        encode_chunk(&mut b, TableId(4), ChunkId::new(1, 7), Version(9), b"x");
        encode_chunk_tombstone(&mut b, TableId(4), ChunkId::new(1, 8), Version(3), SegmentId(2));
        encode_chunk(&mut b, TableId(4), ChunkId::new(1, 9), Version(1), b"y");
        let mut out = Vec::new();
        let f =
            filter_entries(&b, |t, k: &[u8]| t == TableId(4) && k != chunk_key(ChunkId::new(1, 9)), &mut out).unwrap();
        assert_eq!(f, Filtered { safe_version: 0, objects: 1, tombstones: 1 });
        assert_eq!(out, b[..out.len()]);
    }

    fn batch_vector() -> (BatchPlace, Vec<u8>) {
        let p = BatchPlace { table: TableId(1), streamlet: 0, log: 1, group: 2, segment: 0, index: 3 };
        let mut b = Vec::new();
        let records: [&[u8]; 3] = [b"ab", b"", b"cde"];
        let n = encode_stream_batch(&mut b, &p, &records);
        assert_eq!(n, b.len());
        assert_eq!(n, stream_batch_len(&p, 3, batch_records_len(&records)));
        (p, b)
    }

    /// The chunk run vectors of docs/log-format.md (log_vectors.py): one
    /// with consecutive ids (no ids stored) and one with ids far apart.
    #[test]
    fn chunk_run_matches_documented_vectors() {
        let mut b = Vec::new();
        let records: [(u64, &[u8]); 3] = [(5, b"ab"), (6, b"cd"), (7, b"ef")];
        let n = encode_chunk_run(&mut b, TableId(1), 2, Version(1), &records);
        assert_eq!(n, chunk_run_len(TableId(1), 2, Version(1), 2, (5, 7, 3)));
        assert_eq!(hex(&b), "2b 11 10 46 e4 25 01 02 01 02 03 05 00 61 62 63 64 65 66");
        let Ok((Entry::ChunkRun(run), len)) = decode(&b) else { panic!("not a run") };
        assert_eq!((len, run.len(), run.header.width), (b.len(), 3, 0));
        let chunks: Vec<_> = run.iter().map(|c| (c.table, c.id, c.version, c.payload)).collect();
        assert_eq!(
            chunks,
            [
                (TableId(1), ChunkId::new(2, 5), Version(1), &b"ab"[..]),
                (TableId(1), ChunkId::new(2, 6), Version(1), &b"cd"[..]),
                (TableId(1), ChunkId::new(2, 7), Version(1), &b"ef"[..]),
            ]
        );
        assert_eq!(parse_chunk_run(&b).unwrap(), run);
        assert_eq!(parse_chunk_run_header(&b[..b.len().min(MAX_RUN_HEADER_BYTES)]).unwrap(), run.header);
        // Per record: its payload and nothing else, plus a share of the
        // 13-byte header; the first record takes the remainder.
        assert_eq!((0..3).map(|i| run.header.record_bytes(i)).collect::<Vec<_>>(), [2 + 5, 2 + 4, 2 + 4]);
        assert_eq!((0..3).map(|i| run.header.record_bytes(i)).sum::<usize>(), b.len());
        let mut b = Vec::new();
        let records: [(u64, &[u8]); 3] = [(5, b"ab"), (9, b"cd"), (300, b"ef")];
        let n = encode_chunk_run(&mut b, TableId(1), 2, Version(3), &records);
        assert_eq!(n, chunk_run_len(TableId(1), 2, Version(3), 2, (5, 300, 3)));
        assert_eq!(hex(&b), "2b 17 fd 0e 24 3d 01 02 03 02 03 05 02 00 00 04 00 27 01 61 62 63 64 65 66");
        let run = parse_chunk_run(&b).unwrap();
        assert_eq!(run.header.width, 2);
        assert_eq!(run.iter().map(|c| c.id.local()).collect::<Vec<_>>(), [5, 9, 300]);
        assert_eq!(run.chunk(2).payload, b"ef");
    }

    /// A chunk run is refused when torn, bit-flipped, or well sealed but
    /// inconsistent: ids not ascending, a first distance other than 0, an
    /// id out of range, sizes that do not end the entry.
    #[test]
    fn chunk_run_damaged_or_inconsistent_is_refused() {
        let mut b = Vec::new();
        encode_chunk_run(&mut b, TableId(1), 2, Version(3), &[(5, b"ab"), (9, b"cd"), (300, b"ef")]);
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "prefix of {cut} bytes decoded");
        }
        for bit in 0..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&f).is_err(), "bit {bit} flipped still decodes");
        }
        // Hand-built bodies, sealed so that only the fields are wrong.
        let sealed = |fields: &[u8]| {
            let mut out = Vec::new();
            let hl = put_header(&mut out, EntryType::ChunkRun, 4 + fields.len());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(fields);
            seal(&mut out, 0, hl);
            out
        };
        // table 1, node 2, version 1, payload 1 byte, count 2, first 5, width 1
        let ok = sealed(&[1, 2, 1, 1, 2, 5, 1, 0, 3, b'a', b'b']);
        assert!(decode(&ok).is_ok());
        for (what, fields) in [
            ("descending ids", &[1, 2, 1, 1, 2, 5, 1, 3, 0, b'a', b'b'][..]),
            ("repeated id", &[1, 2, 1, 1, 2, 5, 1, 0, 0, b'a', b'b']),
            ("first distance not 0", &[1, 2, 1, 1, 2, 5, 1, 1, 3, b'a', b'b']),
            ("count 0", &[1, 2, 1, 1, 0, 5, 0]),
            ("local id 0", &[1, 2, 1, 1, 2, 0, 0, b'a', b'b']),
            ("width 7", &[1, 2, 1, 1, 1, 5, 7, 0, 0, 0, 0, 0, 0, 0, b'a']),
            ("payloads short", &[1, 2, 1, 1, 2, 5, 0, b'a']),
            ("payloads long", &[1, 2, 1, 1, 2, 5, 0, b'a', b'b', b'c']),
            ("node beyond 16 bits", &[1, 0x80, 0x80, 0x04, 1, 1, 1, 5, 0, b'a']),
        ] {
            assert_eq!(decode(&sealed(fields)).map(|(e, _)| e), Err(FormatError::Malformed), "{what}");
        }
        // The last id at the 48-bit limit is accepted, one beyond refused.
        let max = ChunkId::MAX_LOCAL;
        let mut b = Vec::new();
        encode_chunk_run(&mut b, TableId(1), 2, Version(1), &[(max - 1, b"a"), (max, b"b")]);
        assert!(decode(&b).is_ok());
        let mut fields = vec![1, 2, 1, 1, 2];
        put_varint(&mut fields, max);
        fields.extend_from_slice(&[0, b'a', b'b']);
        assert_eq!(decode(&sealed(&fields)).map(|(e, _)| e), Err(FormatError::Malformed));
    }

    /// A filter keeps a run whole, drops it, or writes the run of the
    /// records it keeps (a CRC of its own), counting records.
    #[test]
    fn filter_splits_a_chunk_run_by_record() {
        let records: Vec<(u64, Vec<u8>)> = (1..=6u64).map(|l| (l, vec![l as u8; 4])).collect();
        let refs: Vec<(u64, &[u8])> = records.iter().map(|(l, p)| (*l, &p[..])).collect();
        let mut b = Vec::new();
        encode_chunk_run(&mut b, TableId(3), 7, Version(2), &refs);
        let keep_odd = |_: TableId, key: &[u8]| u64::from_le_bytes(key.try_into().unwrap()) & 1 == 1;
        let mut out = Vec::new();
        let f = filter_entries(&b, keep_odd, &mut out).unwrap();
        assert_eq!(f.objects, 3);
        let Ok((Entry::ChunkRun(run), len)) = decode(&out) else { panic!("not a run") };
        assert_eq!(len, out.len());
        let kept: Vec<_> = run.iter().map(|c| (c.id, c.version, c.payload.to_vec())).collect();
        let want: Vec<_> = [1u64, 3, 5].iter().map(|&l| (ChunkId::new(7, l), Version(2), vec![l as u8; 4])).collect();
        assert_eq!(kept, want);
        out.clear();
        assert_eq!(filter_entries(&b, |_, _: &[u8]| true, &mut out).unwrap().objects, 6);
        assert_eq!(out, b, "a run kept whole is copied byte for byte");
        out.clear();
        assert_eq!(filter_entries(&b, |_, _: &[u8]| false, &mut out).unwrap().objects, 0);
        assert!(out.is_empty());
    }

    /// The stream batch vectors of docs/log-format.md (log_vectors.py).
    #[test]
    fn stream_batch_matches_documented_vectors() {
        let (p, b) = batch_vector();
        assert_eq!(hex(&b), "2a 13 8e 2e 29 e4 01 00 01 02 00 03 03 02 61 62 00 03 63 64 65");
        let Ok((Entry::StreamBatch(v), len)) = decode(&b) else { panic!("not a batch") };
        assert_eq!((v.place, v.count, len), (p, 3, b.len()));
        assert_eq!(v.iter().collect::<Vec<_>>(), [&b"ab"[..], b"", b"cde"]);
        assert_eq!(parse_stream_batch(&b).unwrap(), v);
        let p = BatchPlace { table: TableId(5), streamlet: 300, log: 2, group: 70000, segment: 1, index: 0 };
        let records: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
        let mut b = Vec::new();
        encode_stream_batch(&mut b, &p, &records);
        assert_eq!(b.len(), 320);
        assert_eq!(hex(&b[..16]), "4a 3d 01 28 df 21 d2 05 ac 02 02 f0 a2 04 01 00");
        let Ok((Entry::StreamBatch(v), _)) = decode(&b) else { panic!("not a batch") };
        assert_eq!(v.iter().map(|r| r.to_vec()).collect::<Vec<_>>(), records);
    }

    /// A torn batch (any proper prefix) never decodes, and neither does a
    /// batch with any single bit flipped: the header's type or length, the
    /// CRC, the place or a record byte.
    #[test]
    fn stream_batch_torn_or_bit_flipped_is_detected() {
        let (_, b) = batch_vector();
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "prefix of {cut} bytes decoded");
        }
        for bit in 0..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            match decode(&f) {
                Err(_) => {}
                // A flip in the length field can only make the entry shorter
                // or longer than the buffer: never a valid batch.
                Ok((e, len)) => panic!("bit {bit} flipped still decodes: {e:?} ({len} bytes)"),
            }
        }
        // In a segment, Tailwind's scan stops before the torn batch.
        let mut seg = Vec::new();
        encode_segment_header(&mut seg, LogId(1), SegmentId(1), 1 << 20);
        let mut crc = HeaderCrc::default();
        crc.add(&seg[..2]);
        crc.add(&b[..2]);
        seg.extend_from_slice(&b);
        crc.add(&[EntryType::Checksum as u8]);
        encode_checksum(&mut seg, crc.value());
        assert_eq!(scan(&seg).verified_len, seg.len());
        for cut in 0..seg.len() {
            assert_eq!(scan(&seg[..cut]).verified_len, 0, "torn at {cut}");
        }
    }

    /// Records that do not end the body exactly, or a count of 0, are
    /// malformed even with a matching CRC.
    #[test]
    fn stream_batch_with_inconsistent_records_is_malformed() {
        let place = [1u8, 0, 0, 0, 0, 0];
        for (count, records) in [(0u8, &b""[..]), (2, &b"\x01a"[..]), (1, &b"\x01ab"[..]), (1, &b"\x05ab"[..])] {
            let mut rest = place.to_vec();
            rest.push(count);
            rest.extend_from_slice(records);
            let mut b = Vec::new();
            let hl = put_header(&mut b, EntryType::StreamBatch, 4 + rest.len());
            b.extend_from_slice(&[0; 4]);
            b.extend_from_slice(&rest);
            seal(&mut b, 0, hl);
            assert_eq!(decode(&b), Err(FormatError::Malformed), "count {count} records {records:?}");
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
    }

    /// The test vectors of docs/log-format.md, produced independently by
    /// docs/vectors/log_vectors.py.
    #[test]
    fn encode_matches_documented_vectors() {
        let mut b = Vec::new();
        encode_object(&mut b, TableId(1), Version(1), b"key", b"value");
        assert_eq!(hex(&b), "22 0f ca af 46 e2 01 01 03 6b 65 79 76 61 6c 75 65");
        let mut with_none = Vec::new();
        encode_object_with(&mut with_none, TableId(1), Version(1), None, b"key", b"value");
        assert_eq!(with_none, b, "an object without expiry keeps the version 1 bytes");
        let mut b = Vec::new();
        let expiry = Some(UnixMillis(1_700_000_000_000));
        let n = encode_object_with(&mut b, TableId(1), Version(1), expiry, b"key", b"value");
        assert_eq!(n, object_len_with(TableId(1), Version(1), expiry, 3, 5));
        assert_eq!(hex(&b), "27 15 55 74 dd 9a 01 01 80 d0 95 ff bc 31 03 6b 65 79 76 61 6c 75 65");
        let o = parse_object(&b).unwrap();
        assert_eq!((o.expiry, o.key, o.value), (expiry, &b"key"[..], &b"value"[..]));
        assert!(!o.expired_at(UnixMillis(1_699_999_999_999)) && o.expired_at(UnixMillis(1_700_000_000_000)));
        assert_eq!(decode(&b).unwrap().0, Entry::Object(o));
        let mut b = Vec::new();
        encode_tombstone(&mut b, TableId(1), Version(1), SegmentId(3), b"key");
        assert_eq!(hex(&b), "23 0a 22 af 84 51 01 01 03 6b 65 79");
        let mut b = Vec::new();
        encode_safe_version(&mut b, Version(7));
        assert_eq!(hex(&b), "25 0c 20 11 84 89 07 00 00 00 00 00 00 00");
        let mut b = Vec::new();
        encode_digest(&mut b, &[SegmentId(1), SegmentId(2)]);
        assert_eq!(hex(&b), "24 18 6d 69 26 52 02 00 00 00 01 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00");
        let mut b = Vec::new();
        encode_segment_header(&mut b, LogId(9), SegmentId(2), 8 << 20);
        assert_eq!(b.len(), SEGMENT_HEADER_BYTES);
        assert_eq!(hex(&b), "21 19 94 1b 76 f7 05 09 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 00 00 80 00");
        let mut b = Vec::new();
        let n = encode_chunk(&mut b, TableId(1), ChunkId::new(2, 5), Version(1), b"payload");
        assert_eq!(n, chunk_len(TableId(1), ChunkId::new(2, 5), Version(1), 7));
        assert_eq!(hex(&b), "28 0f 61 cd 1e 09 01 02 05 01 70 61 79 6c 6f 61 64");
        let c = parse_chunk(&b).unwrap();
        assert_eq!(
            (c.table, c.id, c.version, c.payload),
            (TableId(1), ChunkId::new(2, 5), Version(1), &b"payload"[..])
        );
        assert_eq!(decode(&b).unwrap().0, Entry::Chunk(c));
        let mut b = Vec::new();
        let payload: Vec<u8> = (0..16).collect();
        let big = ChunkId::new(0xffff, ChunkId::MAX_LOCAL);
        encode_chunk(&mut b, TableId(1), big, Version(300), &payload);
        assert_eq!(
            hex(&b),
            "28 21 4a 29 b2 24 01 ff ff 03 ff ff ff ff ff ff 3f ac 02 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f"
        );
        assert_eq!(parse_chunk(&b).unwrap().id, big);
        let mut b = Vec::new();
        let n = encode_chunk_tombstone(&mut b, TableId(1), ChunkId::new(2, 5), Version(1), SegmentId(3));
        assert_eq!(n, chunk_tombstone_len(TableId(1), ChunkId::new(2, 5), Version(1), SegmentId(3)));
        assert_eq!(hex(&b), "29 09 87 5a 66 93 01 02 05 01 03");
        let (e, _) = decode(&b).unwrap();
        assert_eq!(e.tombstone_segment(), Some(SegmentId(3)));
        // A segment: header, object, checksum over both headers and its own tag.
        let mut seg = Vec::new();
        encode_segment_header(&mut seg, LogId(9), SegmentId(2), 8 << 20);
        encode_object(&mut seg, TableId(1), Version(1), b"key", b"value");
        let mut crc = HeaderCrc::default();
        crc.add(&seg[0..2]);
        crc.add(&seg[27..29]);
        crc.add(&[EntryType::Checksum as u8]);
        encode_checksum(&mut seg, crc.value());
        assert_eq!(hex(&seg[44..]), "06 a1 90 5d cb");
    }
}
