//! The bodies of the stream operations (CREATE_STREAM, PRODUCE, CONSUME,
//! DESCRIBE_STREAM) in both directions; `docs/wire-format.md`, "Streams".
//! Offsets are relative to the start of the body (after a response's
//! status byte).

use crate::request::len32_count;
use crate::wire::{get_u32, get_u64, len32, put_str16, DecodeError, Reader};
use shoal_common::{StreamOffset, StreamShape, TableId};

/// Most records one PRODUCE may carry (the store's limit too).
pub const MAX_PRODUCE_RECORDS: usize = 65_536;
/// Most groups one DESCRIBE_STREAM answers with.
pub const MAX_DESCRIBE_GROUPS: u32 = 10_000;

/// A stream shape: streamlets, logs, segment bytes, segments per group,
/// group timeout. In CREATE_STREAM a 0 in logs, segment bytes or segments
/// per group asks for the server's default.
mod shape {
    pub const STREAMLETS: usize = 0;
    pub const LOGS: usize = 4;
    pub const SEGMENT_BYTES: usize = 8;
    pub const GROUP_SEGMENTS: usize = 12;
    pub const GROUP_TIMEOUT_MS: usize = 16;
    pub const LEN: usize = 24;
}
const _: () = assert!(shape::GROUP_TIMEOUT_MS + 8 == shape::LEN);

/// PRODUCE: table, streamlet, producer id, record count; then each record
/// as a u32 length and its bytes.
mod produce {
    pub const TABLE: usize = 0;
    pub const STREAMLET: usize = 8;
    pub const PRODUCER: usize = 12;
    pub const COUNT: usize = 20;
    pub const FIXED: usize = 24;
}
const _: () = assert!(produce::COUNT + 4 == produce::FIXED);

/// An offset: group, segment, position.
mod offset {
    pub const GROUP: usize = 0;
    pub const SEGMENT: usize = 8;
    pub const POSITION: usize = 12;
    pub const LEN: usize = 16;
}
const _: () = assert!(offset::POSITION + 4 == offset::LEN);

/// CONSUME: table, streamlet, offset, max bytes.
mod consume {
    pub const TABLE: usize = 0;
    pub const STREAMLET: usize = 8;
    pub const OFFSET: usize = 12;
    pub const MAX_BYTES: usize = 28;
    pub const FIXED: usize = 32;
}
const _: () = assert!(consume::OFFSET + offset::LEN == consume::MAX_BYTES);
const _: () = assert!(consume::MAX_BYTES + 4 == consume::FIXED);

/// DESCRIBE_STREAM: table, streamlet, first group id, most groups.
mod describe {
    pub const TABLE: usize = 0;
    pub const STREAMLET: usize = 8;
    pub const FROM_GROUP: usize = 12;
    pub const MAX_GROUPS: usize = 20;
    pub const FIXED: usize = 24;
}
const _: () = assert!(describe::MAX_GROUPS + 4 == describe::FIXED);

/// A group in a DESCRIBE_STREAM response: id, log, segments, records,
/// bytes, flags (bit 0: closed).
mod group {
    pub const ID: usize = 0;
    pub const LOG: usize = 8;
    pub const SEGMENTS: usize = 12;
    pub const RECORDS: usize = 16;
    pub const BYTES: usize = 24;
    pub const FLAGS: usize = 32;
    pub const LEN: usize = 33;
    pub const CLOSED: u8 = 0x01;
}
const _: () = assert!(group::FLAGS + 1 == group::LEN);

/// CONSUME response: next offset, flags (bit 0: end of group), record
/// count; then each record as a u32 length and its bytes.
mod consumed {
    pub const NEXT: usize = 0;
    pub const FLAGS: usize = 16;
    pub const COUNT: usize = 17;
    pub const FIXED: usize = 21;
    pub const END_OF_GROUP: u8 = 0x01;
}
const _: () = assert!(consumed::COUNT + 4 == consumed::FIXED);

/// PRODUCE response: the first record's offset, the record count.
mod produced {
    pub const FIRST: usize = 0;
    pub const COUNT: usize = 16;
    pub const LEN: usize = 20;
}
const _: () = assert!(produced::COUNT + 4 == produced::LEN);

/// One group of a streamlet, as DESCRIBE_STREAM reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamGroup {
    pub id: u64,
    /// The log of the streamlet's MultiLog that holds it.
    pub log: u32,
    pub segments: u32,
    pub records: u64,
    /// Bytes of records as stored (each with its 1-5 byte length).
    pub bytes: u64,
    /// No record will be appended to it any more.
    pub closed: bool,
}

pub(crate) fn put_shape(out: &mut Vec<u8>, s: &StreamShape) {
    for v in [s.streamlets, s.logs, s.segment_bytes, s.group_segments] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&s.group_timeout_ms.to_le_bytes());
}

pub(crate) fn get_shape(r: &mut Reader<'_>) -> Result<StreamShape, DecodeError> {
    let f = r.fixed(shape::LEN)?;
    Ok(StreamShape {
        streamlets: get_u32(f, shape::STREAMLETS),
        logs: get_u32(f, shape::LOGS),
        segment_bytes: get_u32(f, shape::SEGMENT_BYTES),
        group_segments: get_u32(f, shape::GROUP_SEGMENTS),
        group_timeout_ms: get_u64(f, shape::GROUP_TIMEOUT_MS),
    })
}

fn put_offset(out: &mut Vec<u8>, o: &StreamOffset) {
    out.extend_from_slice(&o.group.to_le_bytes());
    out.extend_from_slice(&o.segment.to_le_bytes());
    out.extend_from_slice(&o.position.to_le_bytes());
}

fn offset_at(f: &[u8], at: usize) -> StreamOffset {
    StreamOffset {
        group: get_u64(f, at + offset::GROUP),
        segment: get_u32(f, at + offset::SEGMENT),
        position: get_u32(f, at + offset::POSITION),
    }
}

/// Records, each a u32 length and its bytes.
fn put_records(out: &mut Vec<u8>, records: &[&[u8]]) {
    for r in records {
        out.extend_from_slice(&len32(r));
        out.extend_from_slice(r);
    }
}

/// `n` records; `n` was checked against the bytes left at 4 bytes each.
fn get_records<'a>(r: &mut Reader<'a>, n: usize) -> Result<Vec<&'a [u8]>, DecodeError> {
    let mut records = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()? as usize;
        records.push(r.take(len)?);
    }
    Ok(records)
}

fn checked_count(n: u32, r: &Reader<'_>, min_item: usize) -> Result<usize, DecodeError> {
    let n = n as usize;
    if n.saturating_mul(min_item) > r.remaining() {
        return Err(DecodeError::Malformed("item count exceeds the message"));
    }
    Ok(n)
}

pub(crate) fn put_create(out: &mut Vec<u8>, name: &str, s: &StreamShape) {
    put_str16(out, name);
    put_shape(out, s);
}

pub(crate) fn put_produce(out: &mut Vec<u8>, table: TableId, streamlet: u32, producer: u64, records: &[&[u8]]) {
    out.extend_from_slice(&table.0.to_le_bytes());
    out.extend_from_slice(&streamlet.to_le_bytes());
    out.extend_from_slice(&producer.to_le_bytes());
    out.extend_from_slice(&len32_count(records.len()));
    put_records(out, records);
}

/// A PRODUCE body: (table, streamlet, producer, records).
pub(crate) type ProduceBody<'a> = (TableId, u32, u64, Vec<&'a [u8]>);

pub(crate) fn get_produce<'a>(r: &mut Reader<'a>) -> Result<ProduceBody<'a>, DecodeError> {
    let f = r.fixed(produce::FIXED)?;
    let n = get_u32(f, produce::COUNT);
    if n == 0 || n as usize > MAX_PRODUCE_RECORDS {
        return Err(DecodeError::Malformed("a PRODUCE carries 1-65536 records"));
    }
    let n = checked_count(n, r, 4)?;
    let records = get_records(r, n)?;
    Ok((TableId(get_u64(f, produce::TABLE)), get_u32(f, produce::STREAMLET), get_u64(f, produce::PRODUCER), records))
}

pub(crate) fn put_consume(out: &mut Vec<u8>, table: TableId, streamlet: u32, from: &StreamOffset, max_bytes: u32) {
    out.extend_from_slice(&table.0.to_le_bytes());
    out.extend_from_slice(&streamlet.to_le_bytes());
    put_offset(out, from);
    out.extend_from_slice(&max_bytes.to_le_bytes());
}

pub(crate) fn get_consume(r: &mut Reader<'_>) -> Result<(TableId, u32, StreamOffset, u32), DecodeError> {
    let f = r.fixed(consume::FIXED)?;
    Ok((
        TableId(get_u64(f, consume::TABLE)),
        get_u32(f, consume::STREAMLET),
        offset_at(f, consume::OFFSET),
        get_u32(f, consume::MAX_BYTES),
    ))
}

pub(crate) fn put_describe(out: &mut Vec<u8>, table: TableId, streamlet: u32, from_group: u64, max_groups: u32) {
    out.extend_from_slice(&table.0.to_le_bytes());
    out.extend_from_slice(&streamlet.to_le_bytes());
    out.extend_from_slice(&from_group.to_le_bytes());
    out.extend_from_slice(&max_groups.to_le_bytes());
}

pub(crate) fn get_describe(r: &mut Reader<'_>) -> Result<(TableId, u32, u64, u32), DecodeError> {
    let f = r.fixed(describe::FIXED)?;
    Ok((
        TableId(get_u64(f, describe::TABLE)),
        get_u32(f, describe::STREAMLET),
        get_u64(f, describe::FROM_GROUP),
        get_u32(f, describe::MAX_GROUPS),
    ))
}

pub(crate) fn put_produced(out: &mut Vec<u8>, first: &StreamOffset, count: u32) {
    put_offset(out, first);
    out.extend_from_slice(&count.to_le_bytes());
}

pub(crate) fn get_produced(r: &mut Reader<'_>) -> Result<(StreamOffset, u32), DecodeError> {
    let f = r.fixed(produced::LEN)?;
    Ok((offset_at(f, produced::FIRST), get_u32(f, produced::COUNT)))
}

pub(crate) fn put_consumed(out: &mut Vec<u8>, next: &StreamOffset, end_of_group: bool, records: &[&[u8]]) {
    put_offset(out, next);
    out.push(if end_of_group { consumed::END_OF_GROUP } else { 0 });
    out.extend_from_slice(&len32_count(records.len()));
    put_records(out, records);
}

/// A CONSUME response body: (next offset, end of group, records).
pub(crate) type ConsumedBody<'a> = (StreamOffset, bool, Vec<&'a [u8]>);

pub(crate) fn get_consumed<'a>(r: &mut Reader<'a>) -> Result<ConsumedBody<'a>, DecodeError> {
    let f = r.fixed(consumed::FIXED)?;
    let end = match f[consumed::FLAGS] {
        0 => false,
        consumed::END_OF_GROUP => true,
        _ => return Err(DecodeError::Malformed("unknown CONSUME flags")),
    };
    let n = checked_count(get_u32(f, consumed::COUNT), r, 4)?;
    Ok((offset_at(f, consumed::NEXT), end, get_records(r, n)?))
}

pub(crate) fn put_described(out: &mut Vec<u8>, s: &StreamShape, groups: &[StreamGroup]) {
    put_shape(out, s);
    out.extend_from_slice(&len32_count(groups.len()));
    for g in groups {
        out.extend_from_slice(&g.id.to_le_bytes());
        out.extend_from_slice(&g.log.to_le_bytes());
        out.extend_from_slice(&g.segments.to_le_bytes());
        out.extend_from_slice(&g.records.to_le_bytes());
        out.extend_from_slice(&g.bytes.to_le_bytes());
        out.push(if g.closed { group::CLOSED } else { 0 });
    }
}

pub(crate) fn get_described(r: &mut Reader<'_>) -> Result<(StreamShape, Vec<StreamGroup>), DecodeError> {
    let s = get_shape(r)?;
    let n = r.u32()?;
    let n = checked_count(n, r, group::LEN)?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        let f = r.fixed(group::LEN)?;
        let closed = match f[group::FLAGS] {
            0 => false,
            group::CLOSED => true,
            _ => return Err(DecodeError::Malformed("unknown group flags")),
        };
        groups.push(StreamGroup {
            id: get_u64(f, group::ID),
            log: get_u32(f, group::LOG),
            segments: get_u32(f, group::SEGMENTS),
            records: get_u64(f, group::RECORDS),
            bytes: get_u64(f, group::BYTES),
            closed,
        });
    }
    Ok((s, groups))
}

/// Longest consumer name in the consumer-name requests, in bytes.
pub const MAX_CONSUMER_NAME: usize = 255;

/// The head of CLAIM_GROUP, CONSUME_CLAIMED and COMMIT_GROUP: table,
/// streamlet, instance, lease; then per opcode (below), then the consumer
/// name (u16 length and UTF-8 bytes, 1-255 of them).
mod claim {
    pub const TABLE: usize = 0;
    pub const STREAMLET: usize = 8;
    pub const INSTANCE: usize = 12;
    pub const LEASE_MS: usize = 20;
    pub const HEAD: usize = 24;
    /// CONSUME_CLAIMED: offset, max bytes.
    pub const READ_OFFSET: usize = HEAD;
    pub const READ_MAX_BYTES: usize = HEAD + 16;
    pub const READ_FIXED: usize = HEAD + 20;
    /// COMMIT_GROUP: offset, flags (bit 0: release the group).
    pub const COMMIT_OFFSET: usize = HEAD;
    pub const COMMIT_FLAGS: usize = HEAD + 16;
    pub const COMMIT_FIXED: usize = HEAD + 17;
    pub const RELEASE: u8 = 0x01;
}
const _: () = assert!(claim::LEASE_MS + 4 == claim::HEAD);
const _: () = assert!(claim::READ_MAX_BYTES + 4 == claim::READ_FIXED);
const _: () = assert!(claim::COMMIT_FLAGS + 1 == claim::COMMIT_FIXED);

/// CLAIM_GROUP response: flags (bit 0: a group is granted), log, offset to
/// read from, lease granted (ms); all zero but flags when none is.
mod claimed {
    pub const FLAGS: usize = 0;
    pub const LOG: usize = 1;
    pub const FROM: usize = 5;
    pub const LEASE_MS: usize = 21;
    pub const LEN: usize = 25;
    pub const GRANTED: u8 = 0x01;
}
const _: () = assert!(claimed::LEASE_MS + 4 == claimed::LEN);

/// COMMIT_GROUP response: flags (bit 0: the group is done for the name).
mod committed {
    pub const DONE: u8 = 0x01;
}

/// Who asks, in the consumer-name requests: the stream and streamlet, the
/// consumer name, the instance (not 0) and the lease it asks for (ms, not
/// 0; the server may grant less).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subscriber<'a> {
    pub table: TableId,
    pub streamlet: u32,
    pub name: &'a str,
    pub instance: u64,
    pub lease_ms: u32,
}

/// A group granted by CLAIM_GROUP: its log, where to read it from (the
/// name's committed offset in it, or its start), and the lease granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupClaim {
    pub log: u32,
    pub from: StreamOffset,
    pub lease_ms: u32,
}

fn put_subscriber_head(out: &mut Vec<u8>, s: &Subscriber<'_>) {
    out.extend_from_slice(&s.table.0.to_le_bytes());
    out.extend_from_slice(&s.streamlet.to_le_bytes());
    out.extend_from_slice(&s.instance.to_le_bytes());
    out.extend_from_slice(&s.lease_ms.to_le_bytes());
}

fn get_subscriber<'a>(f: &[u8], r: &mut Reader<'a>) -> Result<Subscriber<'a>, DecodeError> {
    let name = r.str16()?;
    if name.is_empty() || name.len() > MAX_CONSUMER_NAME {
        return Err(DecodeError::Malformed("a consumer name has 1-255 bytes"));
    }
    let instance = get_u64(f, claim::INSTANCE);
    if instance == 0 {
        return Err(DecodeError::Malformed("consumer instance id 0 is reserved"));
    }
    let lease_ms = get_u32(f, claim::LEASE_MS);
    if lease_ms == 0 {
        return Err(DecodeError::Malformed("a consumer group lease must be at least 1 ms"));
    }
    Ok(Subscriber {
        table: TableId(get_u64(f, claim::TABLE)),
        streamlet: get_u32(f, claim::STREAMLET),
        name,
        instance,
        lease_ms,
    })
}

pub(crate) fn put_claim(out: &mut Vec<u8>, s: &Subscriber<'_>) {
    put_subscriber_head(out, s);
    put_str16(out, s.name);
}

pub(crate) fn get_claim<'a>(r: &mut Reader<'a>) -> Result<Subscriber<'a>, DecodeError> {
    let f = r.fixed(claim::HEAD)?;
    get_subscriber(f, r)
}

pub(crate) fn put_consume_claimed(out: &mut Vec<u8>, s: &Subscriber<'_>, from: &StreamOffset, max_bytes: u32) {
    put_subscriber_head(out, s);
    put_offset(out, from);
    out.extend_from_slice(&max_bytes.to_le_bytes());
    put_str16(out, s.name);
}

pub(crate) fn get_consume_claimed<'a>(r: &mut Reader<'a>) -> Result<(Subscriber<'a>, StreamOffset, u32), DecodeError> {
    let f = r.fixed(claim::READ_FIXED)?;
    let s = get_subscriber(f, r)?;
    Ok((s, offset_at(f, claim::READ_OFFSET), get_u32(f, claim::READ_MAX_BYTES)))
}

pub(crate) fn put_commit(out: &mut Vec<u8>, s: &Subscriber<'_>, at: &StreamOffset, release: bool) {
    put_subscriber_head(out, s);
    put_offset(out, at);
    out.push(if release { claim::RELEASE } else { 0 });
    put_str16(out, s.name);
}

pub(crate) fn get_commit<'a>(r: &mut Reader<'a>) -> Result<(Subscriber<'a>, StreamOffset, bool), DecodeError> {
    let f = r.fixed(claim::COMMIT_FIXED)?;
    let release = match f[claim::COMMIT_FLAGS] {
        0 => false,
        claim::RELEASE => true,
        _ => return Err(DecodeError::Malformed("unknown COMMIT_GROUP flags")),
    };
    let s = get_subscriber(f, r)?;
    Ok((s, offset_at(f, claim::COMMIT_OFFSET), release))
}

pub(crate) fn put_claimed(out: &mut Vec<u8>, c: &Option<GroupClaim>) {
    let mut f = [0u8; claimed::LEN];
    if let Some(c) = c {
        f[claimed::FLAGS] = claimed::GRANTED;
        f[claimed::LOG..claimed::FROM].copy_from_slice(&c.log.to_le_bytes());
        let mut o = Vec::with_capacity(offset::LEN);
        put_offset(&mut o, &c.from);
        f[claimed::FROM..claimed::LEASE_MS].copy_from_slice(&o);
        f[claimed::LEASE_MS..].copy_from_slice(&c.lease_ms.to_le_bytes());
    }
    out.extend_from_slice(&f);
}

pub(crate) fn get_claimed(r: &mut Reader<'_>) -> Result<Option<GroupClaim>, DecodeError> {
    let f = r.fixed(claimed::LEN)?;
    match f[claimed::FLAGS] {
        0 if f[1..].iter().all(|&b| b == 0) => Ok(None),
        claimed::GRANTED => Ok(Some(GroupClaim {
            log: get_u32(f, claimed::LOG),
            from: offset_at(f, claimed::FROM),
            lease_ms: get_u32(f, claimed::LEASE_MS),
        })),
        _ => Err(DecodeError::Malformed("bad CLAIM_GROUP response flags")),
    }
}

pub(crate) fn put_committed(out: &mut Vec<u8>, done: bool) {
    out.push(if done { committed::DONE } else { 0 });
}

pub(crate) fn get_committed(r: &mut Reader<'_>) -> Result<bool, DecodeError> {
    match r.u8()? {
        0 => Ok(false),
        committed::DONE => Ok(true),
        _ => Err(DecodeError::Malformed("unknown COMMIT_GROUP response flags")),
    }
}
