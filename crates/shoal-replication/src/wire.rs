//! The replication protocol's frames (`docs/replication.md`, "Wire format").
//!
//! Every frame is a 16-byte header — kind, flags, reserved, body length,
//! segment id — and a body. Bodies are little-endian at fixed offsets. The
//! receiver checks the kind and the body length against its limit before it
//! reads the body; the decoders below check every length again and never
//! panic on any input.
//!
//! A DATA frame's body is a 4-byte offset followed by the segment bytes
//! themselves: the backup reads the offset, then receives the bytes straight
//! into its buffer at that offset. That header is the only thing a backup
//! looks at per frame, whatever the number of records inside.
//!
//! Replica epochs: every replica of a segment carries a u64 epoch, given by
//! its OPEN and raised by EPOCH. A master that re-opens a replica of a
//! segment raises the segment's epoch, so that replicas left behind (on a
//! backup that was lost and comes back) carry a lower one; the coordinator
//! records the epoch below which a segment's replicas are stale
//! (`docs/recovery.md`, "Stale replicas").

use shoal_cluster::ServerId;
use shoal_common::{key_hash, ChunkId, LogId, SegmentId, TableId};
use shoal_engine::format::EntryFilter;

/// Bytes of every frame header.
pub const HEADER_LEN: usize = 16;
/// The first four bytes of every HELLO body: "SHRB".
pub const MAGIC: [u8; 4] = *b"SHRB";
/// The protocol version this code speaks (2: replica epochs in OPEN,
/// EPOCH and LISTING).
pub const PROTOCOL_VERSION: u16 = 2;
/// Bytes of a DATA or APPEND body before the segment bytes: the offset.
pub const DATA_PREFIX: usize = 4;
/// Bytes of one replica in a LISTING body.
pub const REPLICA_INFO_LEN: usize = 40;
/// Bytes of an OPEN body: segment size, survivor flag, reserved, epoch.
pub const OPEN_LEN: usize = 16;
/// Bytes of a SEGMENT body before the segment bytes.
pub const SEGMENT_PREFIX: usize = 16;
/// Bytes of a HELLO body.
pub const HELLO_LEN: usize = 32;
/// Bytes of a READ_PART body before its key ranges: log id, range count,
/// count of chunk id ranges among them (the last ones).
pub const READ_PART_PREFIX: usize = 16;
/// Bytes of one key range in a READ_PART body.
pub const KEY_RANGE_LEN: usize = 24;
/// Most key ranges one READ_PART may carry.
pub const MAX_KEY_RANGES: usize = 4096;
/// Bytes of a PART body before the entries.
pub const PART_PREFIX: usize = 40;

const KIND_AT: usize = 0;
const FLAGS_AT: usize = 1;
const BODY_LEN_AT: usize = 4;
const SEGMENT_AT: usize = 8;
const _: () = assert!(SEGMENT_AT + 8 == HEADER_LEN);

/// Frame kinds. Requests (master or reader to backup) are below 0x80,
/// answers (backup to master) at and above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// First frame of every connection: mode, master, log, log version.
    Hello = 0x01,
    /// Opens a replica of the header's segment.
    Open = 0x02,
    /// Segment bytes at an offset (Tailwind mode): no reply of its own.
    Data = 0x03,
    /// The replica is complete: length and last checksum.
    Close = 0x04,
    /// The replica is no longer needed (the cleaner freed the segment).
    Free = 0x05,
    /// Segment bytes at an offset (conventional mode): parsed, copied, answered.
    Append = 0x06,
    /// Which replicas of a log does this backup hold?
    List = 0x07,
    /// Send one replica's bytes.
    Read = 0x08,
    /// Drop every replica of a log.
    FreeLog = 0x09,
    /// Send the entries of one replica whose keys fall in the given key
    /// ranges (a recovery master's partition).
    ReadPart = 0x0a,
    /// Raises the epoch of the replica of the header's segment.
    Epoch = 0x0b,
    HelloOk = 0x80,
    /// Cumulative bytes of the segment received.
    Ack = 0x81,
    Opened = 0x82,
    /// The backup refuses the open (no buffer it could flush in time, ...).
    Refused = 0x83,
    Closed = 0x84,
    /// Conventional mode: cumulative bytes of the segment received.
    Appended = 0x85,
    Listing = 0x86,
    Segment = 0x87,
    Freed = 0x88,
    /// A replica's entries of one partition (the answer to READ_PART).
    Part = 0x89,
    /// The EPOCH was applied (durably, for a closed replica).
    Epoched = 0x8a,
    /// A fatal error; the connection closes after it.
    Error = 0x8f,
}

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            0x01 => Hello,
            0x02 => Open,
            0x03 => Data,
            0x04 => Close,
            0x05 => Free,
            0x06 => Append,
            0x07 => List,
            0x08 => Read,
            0x09 => FreeLog,
            0x0a => ReadPart,
            0x0b => Epoch,
            0x80 => HelloOk,
            0x81 => Ack,
            0x82 => Opened,
            0x83 => Refused,
            0x84 => Closed,
            0x85 => Appended,
            0x86 => Listing,
            0x87 => Segment,
            0x88 => Freed,
            0x89 => Part,
            0x8a => Epoched,
            0x8f => Error,
            _ => return None,
        })
    }
}

/// Why bytes could not be decoded as a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    #[error("nonzero flags or reserved bytes")]
    Reserved,
    #[error("frame body of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("malformed {0} body")]
    Malformed(&'static str),
    #[error("bad magic or unsupported protocol version")]
    Handshake,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub body_len: usize,
    pub segment: SegmentId,
}

impl Header {
    /// Decodes and checks a header; bodies longer than `max_body` are refused.
    pub fn decode(b: &[u8; HEADER_LEN], max_body: usize) -> Result<Header, WireError> {
        let kind = Kind::from_u8(b[KIND_AT]).ok_or(WireError::UnknownKind(b[KIND_AT]))?;
        if b[FLAGS_AT] != 0 || b[2] != 0 || b[3] != 0 {
            return Err(WireError::Reserved);
        }
        let body_len = get_u32(b, BODY_LEN_AT) as usize;
        if body_len > max_body {
            return Err(WireError::TooLarge { len: body_len, max: max_body });
        }
        Ok(Header { kind, body_len, segment: SegmentId(get_u64(b, SEGMENT_AT)) })
    }

    /// Appends a header to `out`.
    pub fn encode(kind: Kind, segment: SegmentId, body_len: usize, out: &mut Vec<u8>) {
        out.push(kind as u8);
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&(body_len as u32).to_le_bytes());
        out.extend_from_slice(&segment.0.to_le_bytes());
    }
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What a connection is for, chosen by its HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Tailwind: DATA frames land in place, acknowledged by cumulative count.
    Tailwind = 0,
    /// Conventional: APPEND calls, each parsed, copied and answered.
    Conventional = 1,
    /// LIST, READ and FREE_LOG only (restart and recovery).
    Reader = 2,
    /// A symmetric-caching peer (`docs/symmetric-caching.md`): after
    /// HELLO_OK the connection belongs to the server's peer handler
    /// (`BackupConfig::peers`) and carries that protocol's frames, not
    /// these. Needs a handshake that claimed a server id when the backup
    /// has a secret.
    Peer = 3,
    /// A tablet migration's source (`docs/migration.md`): the connection
    /// is handed to the server's migration handler after HELLO_OK.
    Migrate = 4,
}

/// HELLO body: magic, version, mode, reserved, master id, log id, log version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub mode: Mode,
    pub master: ServerId,
    pub log: LogId,
    /// The replica version this master writes with; a backup refuses a
    /// log version lower than one it has seen for the same log (fencing).
    pub log_version: u64,
}

impl Hello {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Header::encode(Kind::Hello, SegmentId(0), HELLO_LEN, out);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        out.push(self.mode as u8);
        out.push(0);
        out.extend_from_slice(&self.master.0.to_le_bytes());
        out.extend_from_slice(&self.log.0.to_le_bytes());
        out.extend_from_slice(&self.log_version.to_le_bytes());
    }

    pub fn decode(body: &[u8]) -> Result<Hello, WireError> {
        if body.len() != HELLO_LEN {
            return Err(WireError::Malformed("HELLO"));
        }
        if body[0..4] != MAGIC || u16::from_le_bytes([body[4], body[5]]) != PROTOCOL_VERSION {
            return Err(WireError::Handshake);
        }
        let mode = match body[6] {
            0 => Mode::Tailwind,
            1 => Mode::Conventional,
            2 => Mode::Reader,
            3 => Mode::Peer,
            4 => Mode::Migrate,
            _ => return Err(WireError::Malformed("HELLO")),
        };
        if body[7] != 0 {
            return Err(WireError::Reserved);
        }
        Ok(Hello {
            mode,
            master: ServerId(get_u64(body, 8)),
            log: LogId(get_u64(body, 16)),
            log_version: get_u64(body, 24),
        })
    }
}

/// What an OPEN asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    /// The segment size (the buffer the replica needs).
    pub size: u32,
    /// A survivor segment (the cleaner's), not a head: informational.
    pub survivor: bool,
    /// The replica's epoch (1 for a segment's first replicas).
    pub epoch: u64,
}

/// OPEN body: segment size u32, kind u8 (0 head, 1 survivor), 3 reserved
/// bytes, epoch u64.
pub fn encode_open(segment: SegmentId, open: &Open, out: &mut Vec<u8>) {
    Header::encode(Kind::Open, segment, OPEN_LEN, out);
    out.extend_from_slice(&open.size.to_le_bytes());
    out.extend_from_slice(&[open.survivor as u8, 0, 0, 0]);
    out.extend_from_slice(&open.epoch.to_le_bytes());
}

/// Decodes an OPEN body. An epoch of 0 is refused (epochs start at 1).
pub fn decode_open(body: &[u8]) -> Result<Open, WireError> {
    if body.len() != OPEN_LEN || body[4] > 1 || body[5..8] != [0, 0, 0] || get_u64(body, 8) == 0 {
        return Err(WireError::Malformed("OPEN"));
    }
    Ok(Open { size: get_u32(body, 0), survivor: body[4] == 1, epoch: get_u64(body, 8) })
}

/// The header and offset of a DATA (or, with `Kind::Append`, APPEND) frame
/// carrying `len` segment bytes; the bytes follow.
pub fn encode_data_prefix(kind: Kind, segment: SegmentId, offset: u32, len: usize, out: &mut Vec<u8>) {
    debug_assert!(matches!(kind, Kind::Data | Kind::Append));
    Header::encode(kind, segment, DATA_PREFIX + len, out);
    out.extend_from_slice(&offset.to_le_bytes());
}

/// CLOSE body: final length and last checksum of the segment.
pub fn encode_close(segment: SegmentId, len: u32, checksum: u32, out: &mut Vec<u8>) {
    Header::encode(Kind::Close, segment, 8, out);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum.to_le_bytes());
}

pub fn decode_close(body: &[u8]) -> Result<(u32, u32), WireError> {
    if body.len() != 8 {
        return Err(WireError::Malformed("CLOSE"));
    }
    Ok((get_u32(body, 0), get_u32(body, 4)))
}

/// A frame whose body is one u32 (DATA-less answers: ACK, CLOSED, APPENDED).
pub fn encode_u32(kind: Kind, segment: SegmentId, v: u32, out: &mut Vec<u8>) {
    Header::encode(kind, segment, 4, out);
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn decode_u32(body: &[u8], what: &'static str) -> Result<u32, WireError> {
    if body.len() != 4 {
        return Err(WireError::Malformed(what));
    }
    Ok(get_u32(body, 0))
}

/// A frame whose body is one u64 (LIST, READ, FREE_LOG carry a log id).
pub fn encode_u64(kind: Kind, segment: SegmentId, v: u64, out: &mut Vec<u8>) {
    Header::encode(kind, segment, 8, out);
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn decode_u64(body: &[u8], what: &'static str) -> Result<u64, WireError> {
    if body.len() != 8 {
        return Err(WireError::Malformed(what));
    }
    Ok(get_u64(body, 0))
}

/// EPOCH (master to backup) or EPOCHED (its answer): the replica of
/// `segment` is at `epoch` (at least) from now on.
pub fn encode_epoch(kind: Kind, segment: SegmentId, epoch: u64, out: &mut Vec<u8>) {
    debug_assert!(matches!(kind, Kind::Epoch | Kind::Epoched));
    encode_u64(kind, segment, epoch, out);
}

/// Decodes an EPOCH or EPOCHED body; an epoch of 0 is refused.
pub fn decode_epoch(body: &[u8]) -> Result<u64, WireError> {
    match decode_u64(body, "EPOCH")? {
        0 => Err(WireError::Malformed("EPOCH")),
        e => Ok(e),
    }
}

/// A frame without a body (FREE, OPENED, FREED, HELLO_OK).
pub fn encode_empty(kind: Kind, segment: SegmentId, out: &mut Vec<u8>) {
    Header::encode(kind, segment, 0, out);
}

/// A frame whose body is a UTF-8 message (REFUSED, ERROR); cut to 1 KiB.
pub fn encode_text(kind: Kind, segment: SegmentId, text: &str, out: &mut Vec<u8>) {
    let mut end = text.len().min(1024);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Header::encode(kind, segment, end, out);
    out.extend_from_slice(&text.as_bytes()[..end]);
}

pub fn decode_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// A replica's state on a backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReplicaState {
    /// Still open (in a buffer): its verified prefix is found by scanning.
    Open = 1,
    /// Closed: `len` and `checksum` came with the CLOSE.
    Closed = 2,
}

/// One replica in a LISTING.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub segment: SegmentId,
    pub log_version: u64,
    /// Bytes held (for an open replica: received so far).
    pub len: u32,
    /// Last checksum from the CLOSE; 0 for an open replica.
    pub checksum: u32,
    pub state: ReplicaState,
    /// The replica's epoch: below its segment's floor at the coordinator,
    /// the replica is stale.
    pub epoch: u64,
}

/// LISTING body: a count and that many 40-byte replica records.
pub fn encode_listing(replicas: &[ReplicaInfo], out: &mut Vec<u8>) {
    Header::encode(Kind::Listing, SegmentId(0), 4 + replicas.len() * REPLICA_INFO_LEN, out);
    out.extend_from_slice(&(replicas.len() as u32).to_le_bytes());
    for r in replicas {
        out.extend_from_slice(&r.segment.0.to_le_bytes());
        out.extend_from_slice(&r.log_version.to_le_bytes());
        out.extend_from_slice(&r.len.to_le_bytes());
        out.extend_from_slice(&r.checksum.to_le_bytes());
        out.push(r.state as u8);
        out.extend_from_slice(&[0; 7]);
        out.extend_from_slice(&r.epoch.to_le_bytes());
    }
}

pub fn decode_listing(body: &[u8]) -> Result<Vec<ReplicaInfo>, WireError> {
    if body.len() < 4 {
        return Err(WireError::Malformed("LISTING"));
    }
    let n = get_u32(body, 0) as usize;
    if body.len() != 4 + n.checked_mul(REPLICA_INFO_LEN).ok_or(WireError::Malformed("LISTING"))? {
        return Err(WireError::Malformed("LISTING"));
    }
    (0..n)
        .map(|i| {
            let r = &body[4 + i * REPLICA_INFO_LEN..4 + (i + 1) * REPLICA_INFO_LEN];
            let state = match r[24] {
                1 => ReplicaState::Open,
                2 => ReplicaState::Closed,
                _ => return Err(WireError::Malformed("LISTING")),
            };
            if r[25..32] != [0; 7] {
                return Err(WireError::Malformed("LISTING"));
            }
            Ok(ReplicaInfo {
                segment: SegmentId(get_u64(r, 0)),
                log_version: get_u64(r, 8),
                len: get_u32(r, 16),
                checksum: get_u32(r, 20),
                state,
                epoch: get_u64(r, 32),
            })
        })
        .collect()
}

/// The header and prefix of a SEGMENT frame (log version, state, reserved,
/// length); the `len` segment bytes follow.
pub fn encode_segment_prefix(segment: SegmentId, log_version: u64, state: ReplicaState, len: u32, out: &mut Vec<u8>) {
    Header::encode(Kind::Segment, segment, SEGMENT_PREFIX + len as usize, out);
    out.extend_from_slice(&log_version.to_le_bytes());
    out.extend_from_slice(&[state as u8, 0, 0, 0]);
    out.extend_from_slice(&len.to_le_bytes());
}

/// Decodes a SEGMENT body: (log version, state, bytes). The reserved
/// bytes after the state must be zero, as in every other body.
pub fn decode_segment(body: &[u8]) -> Result<(u64, ReplicaState, &[u8]), WireError> {
    if body.len() < SEGMENT_PREFIX || body[9..12] != [0; 3] {
        return Err(WireError::Malformed("SEGMENT"));
    }
    let state = match body[8] {
        1 => ReplicaState::Open,
        2 => ReplicaState::Closed,
        _ => return Err(WireError::Malformed("SEGMENT")),
    };
    let len = get_u32(body, 12) as usize;
    if body.len() != SEGMENT_PREFIX + len {
        return Err(WireError::Malformed("SEGMENT"));
    }
    Ok((get_u64(body, 0), state, &body[SEGMENT_PREFIX..]))
}

/// Keys of one table whose key hashes lie in `start..=end` (a tablet, or
/// a piece of one); or, with `chunks`, the chunks of one chunk table whose
/// ids lie in `start..=end` (whole 64-bit ids, node and local id: a chunk
/// id range of the cluster map, `ClusterMap::chunk_ranges`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub table: TableId,
    pub start: u64,
    pub end: u64,
    pub chunks: bool,
}

impl KeyRange {
    /// A range of key hashes.
    pub fn hashes(table: TableId, start: u64, end: u64) -> KeyRange {
        KeyRange { table, start, end, chunks: false }
    }

    /// The chunk ids `node << 48 | lo ..= node << 48 | hi` of `table`.
    pub fn chunk_ids(table: TableId, node: u16, lo: u64, hi: u64) -> KeyRange {
        KeyRange { table, start: ChunkId::new(node, lo).0, end: ChunkId::new(node, hi).0, chunks: true }
    }

    /// Whether a key of `table` with hash `hash` is in this range of hashes.
    pub fn contains(&self, table: TableId, hash: u64) -> bool {
        !self.chunks && self.table == table && self.start <= hash && hash <= self.end
    }
}

/// Whether any of `ranges` holds `key` of `table`.
pub fn in_ranges(ranges: &[KeyRange], table: TableId, key: &[u8]) -> bool {
    let hash = key_hash(table, key).0;
    ranges.iter().any(|r| r.contains(table, hash))
}

/// Whether any chunk id range of `ranges` holds chunk `node << 48 | local`
/// of `table`: how a recovery partition classifies every chunk entry and
/// chunk tombstone (at the backups and at the recovery master).
pub fn chunk_in_ranges(ranges: &[KeyRange], table: TableId, node: u16, local: u64) -> bool {
    let id = ChunkId::new(node, local).0;
    ranges.iter().any(|r| r.chunks && r.table == table && r.start <= id && id <= r.end)
}

/// A recovery partition's filter of log entries: keys by hash
/// ([`in_ranges`]), chunks by id ([`chunk_in_ranges`]).
#[derive(Clone, Copy, Debug)]
pub struct PartFilter<'a>(pub &'a [KeyRange]);

impl EntryFilter for PartFilter<'_> {
    fn keep_key(&mut self, table: TableId, key: &[u8]) -> bool {
        in_ranges(self.0, table, key)
    }

    fn keep_chunk(&mut self, table: TableId, node: u16, local: u64) -> bool {
        chunk_in_ranges(self.0, table, node, local)
    }
}

/// A READ_PART of `ranges`: the ranges of key hashes first, then the chunk
/// id ranges (their count in the word after the total).
pub fn encode_read_part(log: LogId, segment: SegmentId, ranges: &[KeyRange], out: &mut Vec<u8>) {
    Header::encode(Kind::ReadPart, segment, READ_PART_PREFIX + ranges.len() * KEY_RANGE_LEN, out);
    out.extend_from_slice(&log.0.to_le_bytes());
    out.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
    let chunks = ranges.iter().filter(|r| r.chunks).count() as u32;
    out.extend_from_slice(&chunks.to_le_bytes());
    for r in ranges.iter().filter(|r| !r.chunks).chain(ranges.iter().filter(|r| r.chunks)) {
        out.extend_from_slice(&r.table.0.to_le_bytes());
        out.extend_from_slice(&r.start.to_le_bytes());
        out.extend_from_slice(&r.end.to_le_bytes());
    }
}

/// Whether a READ_PART body of `len` bytes can be well formed (checked on
/// the header, before the body is read).
pub fn read_part_len_ok(len: usize) -> bool {
    len >= READ_PART_PREFIX
        && (len - READ_PART_PREFIX).is_multiple_of(KEY_RANGE_LEN)
        && (len - READ_PART_PREFIX) / KEY_RANGE_LEN <= MAX_KEY_RANGES
}

pub fn decode_read_part(body: &[u8]) -> Result<(LogId, Vec<KeyRange>), WireError> {
    let bad = || WireError::Malformed("READ_PART");
    if !read_part_len_ok(body.len()) {
        return Err(bad());
    }
    let n = get_u32(body, 8) as usize;
    let chunks = get_u32(body, 12) as usize;
    if body.len() != READ_PART_PREFIX + n * KEY_RANGE_LEN || chunks > n {
        return Err(bad());
    }
    let ranges = body[READ_PART_PREFIX..]
        .chunks_exact(KEY_RANGE_LEN)
        .enumerate()
        .map(|(i, r)| KeyRange {
            table: TableId(get_u64(r, 0)),
            start: get_u64(r, 8),
            end: get_u64(r, 16),
            chunks: i >= n - chunks,
        })
        .collect();
    Ok((LogId(get_u64(body, 0)), ranges))
}

/// What a PART answer says of the replica it was cut from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartInfo {
    pub log_version: u64,
    /// 1 open, 2 closed (as [`ReplicaState`]).
    pub closed: bool,
    /// The replica's verified length (all of it for a closed one).
    pub replica_len: u32,
    /// The replica's last verified checksum.
    pub checksum: u32,
    /// Object and tombstone entries in the answer.
    pub objects: u32,
    pub tombstones: u32,
    /// What a replay must raise the safe version to (over every entry of the
    /// replica, kept or not).
    pub safe_version: u64,
}

pub fn encode_part_prefix(segment: SegmentId, info: &PartInfo, entries_len: usize, out: &mut Vec<u8>) {
    Header::encode(Kind::Part, segment, PART_PREFIX + entries_len, out);
    out.extend_from_slice(&info.log_version.to_le_bytes());
    let state = if info.closed { ReplicaState::Closed } else { ReplicaState::Open };
    out.extend_from_slice(&[state as u8, 0, 0, 0]);
    out.extend_from_slice(&info.replica_len.to_le_bytes());
    out.extend_from_slice(&info.checksum.to_le_bytes());
    out.extend_from_slice(&info.objects.to_le_bytes());
    out.extend_from_slice(&info.tombstones.to_le_bytes());
    out.extend_from_slice(&info.safe_version.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
}

/// A PART body: what it says of the replica, and the entries.
pub fn decode_part(body: &[u8]) -> Result<(PartInfo, &[u8]), WireError> {
    let bad = || WireError::Malformed("PART");
    if body.len() < PART_PREFIX || body[9..12] != [0; 3] || body[36..40] != [0; 4] {
        return Err(bad());
    }
    let closed = match body[8] {
        1 => false,
        2 => true,
        _ => return Err(bad()),
    };
    let info = PartInfo {
        log_version: get_u64(body, 0),
        closed,
        replica_len: get_u32(body, 12),
        checksum: get_u32(body, 16),
        objects: get_u32(body, 20),
        tombstones: get_u32(body, 24),
        safe_version: get_u64(body, 28),
    };
    Ok((info, &body[PART_PREFIX..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(b: &[u8]) -> Header {
        Header::decode(b[..HEADER_LEN].try_into().unwrap(), 1 << 20).unwrap()
    }

    #[test]
    fn hello_round_trips_and_checks_magic() {
        let h = Hello { mode: Mode::Tailwind, master: ServerId(3), log: LogId(7), log_version: 2 };
        let mut out = Vec::new();
        h.encode(&mut out);
        let hd = header(&out);
        assert_eq!(hd.kind, Kind::Hello);
        assert_eq!(hd.body_len, HELLO_LEN);
        assert_eq!(Hello::decode(&out[HEADER_LEN..]).unwrap(), h);
        let mut bad = out[HEADER_LEN..].to_vec();
        bad[0] = b'X';
        assert_eq!(Hello::decode(&bad), Err(WireError::Handshake));
    }

    #[test]
    fn open_and_epoch_round_trip_and_refuse_epoch_zero() {
        let open = Open { size: 1 << 20, survivor: true, epoch: 7 };
        let mut out = Vec::new();
        encode_open(SegmentId(5), &open, &mut out);
        let h = header(&out);
        assert_eq!((h.kind, h.segment, h.body_len), (Kind::Open, SegmentId(5), OPEN_LEN));
        assert_eq!(decode_open(&out[HEADER_LEN..]), Ok(open));
        assert_eq!(out[HEADER_LEN + 8..], 7u64.to_le_bytes());
        let mut zero = out[HEADER_LEN..].to_vec();
        zero[8..].fill(0);
        assert!(decode_open(&zero).is_err());
        assert!(decode_open(&out[HEADER_LEN..HEADER_LEN + 8]).is_err(), "the OPEN of protocol version 1");

        for kind in [Kind::Epoch, Kind::Epoched] {
            let mut out = Vec::new();
            encode_epoch(kind, SegmentId(9), 3, &mut out);
            let h = header(&out);
            assert_eq!((h.kind, h.segment, h.body_len), (kind, SegmentId(9), 8));
            assert_eq!(decode_epoch(&out[HEADER_LEN..]), Ok(3));
        }
        assert!(decode_epoch(&[0; 8]).is_err());
        assert!(decode_epoch(&[1; 7]).is_err());
        assert_eq!(Kind::from_u8(0x0b), Some(Kind::Epoch));
        assert_eq!(Kind::from_u8(0x8a), Some(Kind::Epoched));
    }

    #[test]
    fn header_refuses_unknown_kinds_reserved_bits_and_long_bodies() {
        let mut out = Vec::new();
        encode_u32(Kind::Ack, SegmentId(9), 100, &mut out);
        let mut b: [u8; HEADER_LEN] = out[..HEADER_LEN].try_into().unwrap();
        assert_eq!(Header::decode(&b, 4).unwrap().segment, SegmentId(9));
        assert_eq!(Header::decode(&b, 3), Err(WireError::TooLarge { len: 4, max: 3 }));
        b[1] = 1;
        assert_eq!(Header::decode(&b, 4), Err(WireError::Reserved));
        b[1] = 0;
        b[0] = 0x7f;
        assert_eq!(Header::decode(&b, 4), Err(WireError::UnknownKind(0x7f)));
    }

    #[test]
    fn listing_and_segment_round_trip() {
        let rs = vec![
            ReplicaInfo {
                segment: SegmentId(1),
                log_version: 1,
                len: 10,
                checksum: 5,
                state: ReplicaState::Closed,
                epoch: 3,
            },
            ReplicaInfo {
                segment: SegmentId(2),
                log_version: 1,
                len: 3,
                checksum: 0,
                state: ReplicaState::Open,
                epoch: u64::MAX,
            },
        ];
        let mut out = Vec::new();
        encode_listing(&rs, &mut out);
        assert_eq!(header(&out).body_len, 4 + 2 * REPLICA_INFO_LEN);
        assert_eq!(decode_listing(&out[HEADER_LEN..]).unwrap(), rs);
        assert!(decode_listing(&out[HEADER_LEN..out.len() - 1]).is_err());
        // The epoch sits in the record's last 8 bytes.
        let second = HEADER_LEN + 4 + 2 * REPLICA_INFO_LEN - 8;
        assert_eq!(out[second..], u64::MAX.to_le_bytes());
        let mut reserved = out[HEADER_LEN..].to_vec();
        reserved[4 + 25] = 1;
        assert!(decode_listing(&reserved).is_err());

        let mut out = Vec::new();
        encode_segment_prefix(SegmentId(4), 2, ReplicaState::Open, 3, &mut out);
        out.extend_from_slice(b"abc");
        let (v, s, bytes) = decode_segment(&out[HEADER_LEN..]).unwrap();
        assert_eq!((v, s, bytes), (2, ReplicaState::Open, &b"abc"[..]));
    }

    /// Found by the `replication_frame` fuzz target: a SEGMENT whose
    /// reserved bytes were not zero decoded, so two different frames meant
    /// the same answer.
    #[test]
    fn decode_segment_refuses_nonzero_reserved_bytes() {
        let mut out = Vec::new();
        encode_segment_prefix(SegmentId(4), 2, ReplicaState::Closed, 3, &mut out);
        out.extend_from_slice(b"abc");
        assert!(decode_segment(&out[HEADER_LEN..]).is_ok());
        for at in 9..12 {
            let mut bad = out[HEADER_LEN..].to_vec();
            bad[at] = 4;
            assert_eq!(decode_segment(&bad), Err(WireError::Malformed("SEGMENT")), "reserved byte {at}");
        }
    }

    #[test]
    fn read_part_and_part_round_trip_and_check_lengths() {
        let ranges = vec![
            KeyRange::hashes(TableId(1), 0, 99),
            KeyRange::hashes(TableId(2), 5, u64::MAX),
            KeyRange::chunk_ids(TableId(4), 3, 10, 20),
        ];
        let mut out = Vec::new();
        encode_read_part(LogId(7), SegmentId(3), &ranges, &mut out);
        let h = header(&out);
        assert_eq!((h.kind, h.segment), (Kind::ReadPart, SegmentId(3)));
        assert!(read_part_len_ok(h.body_len));
        assert_eq!(decode_read_part(&out[HEADER_LEN..]).unwrap(), (LogId(7), ranges.clone()));
        assert!(decode_read_part(&out[HEADER_LEN..out.len() - 1]).is_err());
        let mut lying = out[HEADER_LEN..].to_vec();
        lying[8] = 4;
        assert!(decode_read_part(&lying).is_err());
        let mut lying = out[HEADER_LEN..].to_vec();
        lying[12] = 4;
        assert!(decode_read_part(&lying).is_err(), "more chunk ranges than ranges");
        // Chunk ranges go last on the wire, whatever their order in the call.
        let mut mixed = Vec::new();
        encode_read_part(LogId(7), SegmentId(3), &[ranges[2], ranges[0], ranges[1]], &mut mixed);
        assert_eq!(mixed, out);
        assert!(chunk_in_ranges(&ranges, TableId(4), 3, 10));
        assert!(chunk_in_ranges(&ranges, TableId(4), 3, 20));
        assert!(!chunk_in_ranges(&ranges, TableId(4), 3, 21));
        assert!(!chunk_in_ranges(&ranges, TableId(4), 2, 15), "another node");
        assert!(!chunk_in_ranges(&ranges, TableId(1), 0, 5), "a range of hashes holds no chunks");
        assert!(!in_ranges(&ranges[2..], TableId(4), &ChunkId::new(3, 15).0.to_le_bytes()), "nor the other way");
        assert!(!read_part_len_ok(READ_PART_PREFIX + (MAX_KEY_RANGES + 1) * KEY_RANGE_LEN));

        let info = PartInfo {
            log_version: 4,
            closed: true,
            replica_len: 1000,
            checksum: 0xdead_beef,
            objects: 3,
            tombstones: 1,
            safe_version: 77,
        };
        let mut out = Vec::new();
        encode_part_prefix(SegmentId(3), &info, 5, &mut out);
        out.extend_from_slice(b"12345");
        assert_eq!(header(&out).body_len, PART_PREFIX + 5);
        assert_eq!(decode_part(&out[HEADER_LEN..]).unwrap(), (info, &b"12345"[..]));
        let mut bad = out[HEADER_LEN..].to_vec();
        bad[8] = 3;
        assert!(decode_part(&bad).is_err());
        let h = key_hash(TableId(2), b"anything").0;
        assert_eq!(in_ranges(&ranges, TableId(2), b"anything"), h >= 5);
        let h = key_hash(TableId(1), b"anything").0;
        assert_eq!(in_ranges(&ranges, TableId(1), b"anything"), h <= 99);
        assert!(!in_ranges(&ranges, TableId(3), b"x"));
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if bytes.len() >= HEADER_LEN {
                let _ = Header::decode(bytes[..HEADER_LEN].try_into().unwrap(), 1 << 20);
            }
            let _ = Hello::decode(&bytes);
            let _ = decode_open(&bytes);
            let _ = decode_epoch(&bytes);
            let _ = decode_close(&bytes);
            let _ = decode_listing(&bytes);
            let _ = decode_segment(&bytes);
            let _ = decode_u32(&bytes, "x");
            let _ = decode_u64(&bytes, "x");
            let _ = decode_read_part(&bytes);
            let _ = decode_part(&bytes);
        }

        #[test]
        fn open_epoch_and_listing_round_trip(
            size in proptest::num::u32::ANY,
            survivor in proptest::bool::ANY,
            epoch in 1..=u64::MAX,
            replicas in proptest::collection::vec(
                (proptest::num::u64::ANY, proptest::num::u64::ANY, proptest::num::u32::ANY,
                 proptest::num::u32::ANY, proptest::bool::ANY, proptest::num::u64::ANY),
                0..20,
            ),
        ) {
            let open = Open { size, survivor, epoch };
            let mut out = Vec::new();
            encode_open(SegmentId(epoch), &open, &mut out);
            proptest::prop_assert_eq!(decode_open(&out[HEADER_LEN..]), Ok(open));
            let mut out = Vec::new();
            encode_epoch(Kind::Epoch, SegmentId(size as u64), epoch, &mut out);
            proptest::prop_assert_eq!(decode_epoch(&out[HEADER_LEN..]), Ok(epoch));
            let rs: Vec<ReplicaInfo> = replicas
                .into_iter()
                .map(|(segment, log_version, len, checksum, closed, epoch)| ReplicaInfo {
                    segment: SegmentId(segment),
                    log_version,
                    len,
                    checksum,
                    state: if closed { ReplicaState::Closed } else { ReplicaState::Open },
                    epoch,
                })
                .collect();
            let mut out = Vec::new();
            encode_listing(&rs, &mut out);
            proptest::prop_assert_eq!(decode_listing(&out[HEADER_LEN..]), Ok(rs));
        }
    }
}
