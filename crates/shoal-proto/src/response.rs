//! Responses: a status, its detail, and (status OK) each operation's result,
//! in both directions. Layouts are in `docs/wire-format.md`.

use crate::frame::{encode_header, finish_frame, FLAG_RESPONSE};
use crate::request::{len32_count, Opcode};
use crate::status::{ErrorStatus, StatusCode};
use crate::stream::{self, GroupClaim, StreamGroup};
use crate::wire::{get_u32, get_u64, len32, put_str8, DecodeError, Reader};
use shoal_common::{ChunkId, StreamOffset, StreamShape, TableId, UnixMillis, Version};
use std::borrow::Cow;

/// ENUMERATE result: flags (bit 0: more follow), next cursor, object count.
mod enumerate_res {
    pub const FLAGS: usize = 0;
    pub const NEXT: usize = 1;
    pub const COUNT: usize = 9;
    pub const FIXED: usize = 13;
    pub const MORE: u8 = 0x01;
}
const _: () = assert!(enumerate_res::COUNT + 4 == enumerate_res::FIXED);

/// Each enumerated object: version, key length, value length, key, value.
mod object {
    pub const VERSION: usize = 0;
    pub const KEY_LEN: usize = 8;
    pub const VALUE_LEN: usize = 12;
    pub const FIXED: usize = 16;
}
const _: () = assert!(object::VALUE_LEN + 4 == object::FIXED);

/// READ result and each OK multi-read item: version, value length, value.
mod read_res {
    pub const VERSION: usize = 0;
    pub const VALUE_LEN: usize = 8;
    pub const FIXED: usize = 12;
}
const _: () = assert!(read_res::VALUE_LEN + 4 == read_res::FIXED);

/// READ_TTL result: version, expiry time (0: never), milliseconds left.
mod read_ttl_res {
    pub const VERSION: usize = 0;
    pub const EXPIRES_AT: usize = 8;
    pub const TTL: usize = 16;
    pub const FIXED: usize = 24;
}
const _: () = assert!(read_ttl_res::TTL + 8 == read_ttl_res::FIXED);

/// INCREMENT result: new value, new version.
mod increment_res {
    pub const VALUE: usize = 0;
    pub const VERSION: usize = 8;
    pub const FIXED: usize = 16;
}
const _: () = assert!(increment_res::VERSION + 8 == increment_res::FIXED);

const STAT_U64: u8 = 0;
const STAT_F64: u8 = 1;

/// One object returned by enumeration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Object<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub version: Version,
}

/// A statistic's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StatValue {
    U64(u64),
    F64(f64),
}

/// One named statistic. Names are lower_snake_case, at most 255 bytes; a
/// client must ignore names it does not know.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat<'a> {
    pub name: Cow<'a, str>,
    pub value: StatValue,
}

/// The result of a request whose status is OK, borrowing from the frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Response<'a> {
    Ping,
    Read {
        version: Version,
        value: &'a [u8],
    },
    Write {
        version: Version,
    },
    /// The version the object had; `None` if it did not exist.
    Remove {
        version: Option<Version>,
    },
    Increment {
        value: i64,
        version: Version,
    },
    MultiRead(Vec<Result<(Version, &'a [u8]), ErrorStatus>>),
    MultiWrite(Vec<Result<Version, ErrorStatus>>),
    MultiRemove(Vec<Result<Option<Version>, ErrorStatus>>),
    /// `next`: the cursor to resume from; `None` when the table is done.
    Enumerate {
        objects: Vec<Object<'a>>,
        next: Option<u64>,
    },
    CreateTable {
        table: TableId,
    },
    DropTable,
    GetTableId {
        table: TableId,
    },
    Stats(Vec<Stat<'a>>),
    /// The connection is logged in.
    Auth,
    /// WRITE_TTL: the new version.
    WriteTtl {
        version: Version,
    },
    /// READ_TTL: the object's version and expiry time (`None`: never), and
    /// the milliseconds left until then by the server's clock (0 for none).
    ReadTtl {
        version: Version,
        expires_at: Option<UnixMillis>,
        ttl_ms: u64,
    },
    /// CHUNK_CREATE: the new chunks' ids, in the order of the payloads.
    ChunkCreate(Vec<ChunkId>),
    /// CHUNK_GET: each chunk's version and payload, or why not.
    ChunkGet(Vec<Result<(Version, &'a [u8]), ErrorStatus>>),
    /// CHUNK_PUT: each chunk's new version, or why not.
    ChunkPut(Vec<Result<Version, ErrorStatus>>),
    /// CHUNK_REMOVE: the version each removed chunk had, or why not.
    ChunkRemove(Vec<Result<Version, ErrorStatus>>),
    /// SC_FILTER: the group's membership epoch and round of the filter
    /// (0 and 0 with no filter: symmetric caching off, or no group) and
    /// the Bloom filter's encoding (`shoal_symcache::bloom`; empty: none).
    ScFilter {
        membership: u64,
        round: u64,
        bloom: &'a [u8],
    },
    CreateChunkTable {
        table: TableId,
    },
    /// CHUNK_LOCK: the grant's fencing token and the lease granted.
    ChunkLock {
        token: u64,
        lease_ms: u32,
    },
    ChunkUnlock,
    /// CHUNK_RENEW: the lease granted from the renewal on.
    ChunkRenew {
        lease_ms: u32,
    },
    /// CHUNK_PUT_LOCKED: the chunk's new version.
    ChunkPutLocked {
        version: Version,
    },
    /// CREATE_STREAM: the stream's table id and its shape (the server's
    /// defaults filled in).
    CreateStream {
        table: TableId,
        shape: StreamShape,
    },
    /// PRODUCE: the offset of the batch's first record and how many.
    Produce {
        first: StreamOffset,
        count: u32,
    },
    /// CONSUME: where the next read of the group starts, whether the group
    /// is closed and read to its end, and the records read.
    Consume {
        next: StreamOffset,
        end_of_group: bool,
        records: Vec<&'a [u8]>,
    },
    /// DESCRIBE_STREAM: the stream's shape and the groups asked for.
    DescribeStream {
        shape: StreamShape,
        groups: Vec<StreamGroup>,
    },
    /// CLAIM_GROUP: the group granted, or none free now.
    ClaimGroup(Option<GroupClaim>),
    /// CONSUME_CLAIMED: as CONSUME.
    ConsumeClaimed {
        next: StreamOffset,
        end_of_group: bool,
        records: Vec<&'a [u8]>,
    },
    /// COMMIT_GROUP: whether the group is done for the name (the offset
    /// was the end of the closed group; its lease is released).
    CommitGroup {
        done: bool,
    },
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

impl<'a> Response<'a> {
    pub fn opcode(&self) -> Opcode {
        match self {
            Response::Ping => Opcode::Ping,
            Response::Read { .. } => Opcode::Read,
            Response::Write { .. } => Opcode::Write,
            Response::Remove { .. } => Opcode::Remove,
            Response::Increment { .. } => Opcode::Increment,
            Response::MultiRead(_) => Opcode::MultiRead,
            Response::MultiWrite(_) => Opcode::MultiWrite,
            Response::MultiRemove(_) => Opcode::MultiRemove,
            Response::Enumerate { .. } => Opcode::Enumerate,
            Response::CreateTable { .. } => Opcode::CreateTable,
            Response::DropTable => Opcode::DropTable,
            Response::GetTableId { .. } => Opcode::GetTableId,
            Response::Stats(_) => Opcode::Stats,
            Response::Auth => Opcode::Auth,
            Response::WriteTtl { .. } => Opcode::WriteTtl,
            Response::ReadTtl { .. } => Opcode::ReadTtl,
            Response::ChunkCreate(_) => Opcode::ChunkCreate,
            Response::ChunkGet(_) => Opcode::ChunkGet,
            Response::ChunkPut(_) => Opcode::ChunkPut,
            Response::ChunkRemove(_) => Opcode::ChunkRemove,
            Response::CreateChunkTable { .. } => Opcode::CreateChunkTable,
            Response::CreateStream { .. } => Opcode::CreateStream,
            Response::Produce { .. } => Opcode::Produce,
            Response::Consume { .. } => Opcode::Consume,
            Response::DescribeStream { .. } => Opcode::DescribeStream,
            Response::ScFilter { .. } => Opcode::ScFilter,
            Response::ChunkLock { .. } => Opcode::ChunkLock,
            Response::ChunkUnlock => Opcode::ChunkUnlock,
            Response::ChunkRenew { .. } => Opcode::ChunkRenew,
            Response::ChunkPutLocked { .. } => Opcode::ChunkPutLocked,
            Response::ClaimGroup(_) => Opcode::ClaimGroup,
            Response::ConsumeClaimed { .. } => Opcode::ConsumeClaimed,
            Response::CommitGroup { .. } => Opcode::CommitGroup,
        }
    }

    /// Appends this result as one response frame (status OK) answering
    /// `request_id`; returns the frame's length.
    pub fn encode(&self, request_id: u64, out: &mut Vec<u8>) -> usize {
        let start = encode_header(out, self.opcode() as u8, FLAG_RESPONSE, request_id);
        out.push(StatusCode::Ok as u8);
        match self {
            Response::Ping | Response::DropTable | Response::Auth | Response::ChunkUnlock => {}
            Response::ChunkLock { token, lease_ms } => {
                put_u64(out, *token);
                out.extend_from_slice(&lease_ms.to_le_bytes());
            }
            Response::ChunkRenew { lease_ms } => out.extend_from_slice(&lease_ms.to_le_bytes()),
            Response::ChunkPutLocked { version } => put_u64(out, version.0),
            Response::Read { version, value } => put_read(out, *version, value),
            Response::Write { version } | Response::WriteTtl { version } => put_u64(out, version.0),
            Response::ReadTtl { version, expires_at, ttl_ms } => {
                put_u64(out, version.0);
                put_u64(out, expires_at.map_or(0, |t| t.0));
                put_u64(out, *ttl_ms);
            }
            Response::Remove { version } => put_u64(out, version.map_or(0, |v| v.0)),
            Response::Increment { value, version } => {
                out.extend_from_slice(&value.to_le_bytes());
                put_u64(out, version.0);
            }
            Response::MultiRead(items) | Response::ChunkGet(items) => {
                out.extend_from_slice(&len32_count(items.len()));
                for it in items {
                    match it {
                        Ok((version, value)) => {
                            out.push(StatusCode::Ok as u8);
                            put_read(out, *version, value);
                        }
                        Err(e) => e.encode(out),
                    }
                }
            }
            Response::MultiWrite(items) | Response::ChunkPut(items) | Response::ChunkRemove(items) => {
                out.extend_from_slice(&len32_count(items.len()));
                for it in items {
                    match it {
                        Ok(version) => {
                            out.push(StatusCode::Ok as u8);
                            put_u64(out, version.0);
                        }
                        Err(e) => e.encode(out),
                    }
                }
            }
            Response::MultiRemove(items) => {
                out.extend_from_slice(&len32_count(items.len()));
                for it in items {
                    match it {
                        Ok(version) => {
                            out.push(StatusCode::Ok as u8);
                            put_u64(out, version.map_or(0, |v| v.0));
                        }
                        Err(e) => e.encode(out),
                    }
                }
            }
            Response::Enumerate { objects, next } => {
                out.push(if next.is_some() { enumerate_res::MORE } else { 0 });
                put_u64(out, next.unwrap_or(0));
                out.extend_from_slice(&len32_count(objects.len()));
                for o in objects {
                    put_u64(out, o.version.0);
                    out.extend_from_slice(&len32(o.key));
                    out.extend_from_slice(&len32(o.value));
                    out.extend_from_slice(o.key);
                    out.extend_from_slice(o.value);
                }
            }
            Response::CreateTable { table } | Response::GetTableId { table } | Response::CreateChunkTable { table } => {
                put_u64(out, table.0)
            }
            Response::ScFilter { membership, round, bloom } => {
                put_u64(out, *membership);
                put_u64(out, *round);
                out.extend_from_slice(&len32(bloom));
                out.extend_from_slice(bloom);
            }
            Response::ChunkCreate(ids) => {
                out.extend_from_slice(&len32_count(ids.len()));
                for id in ids {
                    put_u64(out, id.0);
                }
            }
            Response::CreateStream { table, shape } => {
                put_u64(out, table.0);
                stream::put_shape(out, shape);
            }
            Response::Produce { first, count } => stream::put_produced(out, first, *count),
            Response::Consume { next, end_of_group, records }
            | Response::ConsumeClaimed { next, end_of_group, records } => {
                stream::put_consumed(out, next, *end_of_group, records)
            }
            Response::ClaimGroup(c) => stream::put_claimed(out, c),
            Response::CommitGroup { done } => stream::put_committed(out, *done),
            Response::DescribeStream { shape, groups } => stream::put_described(out, shape, groups),
            Response::Stats(stats) => {
                let n = stats.len().min(u16::MAX as usize);
                out.extend_from_slice(&(n as u16).to_le_bytes());
                for s in &stats[..n] {
                    put_str8(out, &s.name);
                    match s.value {
                        StatValue::U64(v) => {
                            out.push(STAT_U64);
                            put_u64(out, v);
                        }
                        StatValue::F64(v) => {
                            out.push(STAT_F64);
                            put_u64(out, v.to_bits());
                        }
                    }
                }
            }
        }
        finish_frame(out, start)
    }
}

fn put_read(out: &mut Vec<u8>, version: Version, value: &[u8]) {
    put_u64(out, version.0);
    out.extend_from_slice(&len32(value));
    out.extend_from_slice(value);
}

fn get_read<'a>(r: &mut Reader<'a>) -> Result<(Version, &'a [u8]), DecodeError> {
    let f = r.fixed(read_res::FIXED)?;
    let version = Version(get_u64(f, read_res::VERSION));
    let value = r.take(get_u32(f, read_res::VALUE_LEN) as usize)?;
    Ok((version, value))
}

fn removed_version(v: u64) -> Option<Version> {
    (v != 0).then_some(Version(v))
}

/// Appends an error response (a non-OK status and its detail) answering
/// `request_id`. `opcode` is the request's, raw, so that a request with an
/// unknown opcode can be answered too. Returns the frame's length.
pub fn encode_error(out: &mut Vec<u8>, request_id: u64, opcode: u8, status: &ErrorStatus) -> usize {
    let start = encode_header(out, opcode, FLAG_RESPONSE, request_id);
    status.encode(out);
    finish_frame(out, start)
}

/// Pass two for responses: parses a response body given its frame's opcode.
/// The outer `Result` is whether the bytes parse; the inner one is the
/// status the server answered with. An error status is accepted with any
/// opcode (the server echoes even unknown ones).
pub fn decode_response(opcode: u8, body: &[u8]) -> Result<Result<Response<'_>, ErrorStatus>, DecodeError> {
    let mut r = Reader::new(body);
    if let Some(status) = ErrorStatus::decode(&mut r)? {
        r.finish()?;
        return Ok(Err(status));
    }
    let op = Opcode::from_u8(opcode).ok_or(DecodeError::UnknownOpcode(opcode))?;
    let res = match op {
        Opcode::Ping => Response::Ping,
        Opcode::DropTable => Response::DropTable,
        Opcode::Auth => Response::Auth,
        Opcode::ChunkUnlock => Response::ChunkUnlock,
        Opcode::ChunkLock => Response::ChunkLock { token: r.u64()?, lease_ms: r.u32()? },
        Opcode::ChunkRenew => Response::ChunkRenew { lease_ms: r.u32()? },
        Opcode::ChunkPutLocked => Response::ChunkPutLocked { version: Version(r.u64()?) },
        Opcode::Read => {
            let (version, value) = get_read(&mut r)?;
            Response::Read { version, value }
        }
        Opcode::Write => Response::Write { version: Version(r.u64()?) },
        Opcode::WriteTtl => Response::WriteTtl { version: Version(r.u64()?) },
        Opcode::ReadTtl => {
            let f = r.fixed(read_ttl_res::FIXED)?;
            let at = get_u64(f, read_ttl_res::EXPIRES_AT);
            Response::ReadTtl {
                version: Version(get_u64(f, read_ttl_res::VERSION)),
                expires_at: (at != 0).then_some(UnixMillis(at)),
                ttl_ms: get_u64(f, read_ttl_res::TTL),
            }
        }
        Opcode::Remove => Response::Remove { version: removed_version(r.u64()?) },
        Opcode::Increment => {
            let f = r.fixed(increment_res::FIXED)?;
            Response::Increment {
                value: get_u64(f, increment_res::VALUE) as i64,
                version: Version(get_u64(f, increment_res::VERSION)),
            }
        }
        Opcode::MultiRead | Opcode::ChunkGet => {
            let n = r.count(1)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(match ErrorStatus::decode(&mut r)? {
                    None => Ok(get_read(&mut r)?),
                    Some(e) => Err(e),
                });
            }
            match op {
                Opcode::ChunkGet => Response::ChunkGet(items),
                _ => Response::MultiRead(items),
            }
        }
        Opcode::MultiWrite | Opcode::ChunkPut | Opcode::ChunkRemove => {
            let n = r.count(1)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(match ErrorStatus::decode(&mut r)? {
                    None => Ok(Version(r.u64()?)),
                    Some(e) => Err(e),
                });
            }
            match op {
                Opcode::ChunkPut => Response::ChunkPut(items),
                Opcode::ChunkRemove => Response::ChunkRemove(items),
                _ => Response::MultiWrite(items),
            }
        }
        Opcode::ChunkCreate => {
            let n = r.count(8)?;
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(ChunkId(r.u64()?));
            }
            Response::ChunkCreate(ids)
        }
        Opcode::CreateChunkTable => Response::CreateChunkTable { table: TableId(r.u64()?) },
        Opcode::CreateStream => {
            let table = TableId(r.u64()?);
            Response::CreateStream { table, shape: stream::get_shape(&mut r)? }
        }
        Opcode::Produce => {
            let (first, count) = stream::get_produced(&mut r)?;
            Response::Produce { first, count }
        }
        Opcode::Consume => {
            let (next, end_of_group, records) = stream::get_consumed(&mut r)?;
            Response::Consume { next, end_of_group, records }
        }
        Opcode::ConsumeClaimed => {
            let (next, end_of_group, records) = stream::get_consumed(&mut r)?;
            Response::ConsumeClaimed { next, end_of_group, records }
        }
        Opcode::ClaimGroup => Response::ClaimGroup(stream::get_claimed(&mut r)?),
        Opcode::CommitGroup => Response::CommitGroup { done: stream::get_committed(&mut r)? },
        Opcode::DescribeStream => {
            let (shape, groups) = stream::get_described(&mut r)?;
            Response::DescribeStream { shape, groups }
        }
        Opcode::ScFilter => {
            let membership = r.u64()?;
            let round = r.u64()?;
            let n = r.u32()? as usize;
            Response::ScFilter { membership, round, bloom: r.take(n)? }
        }
        Opcode::MultiRemove => {
            let n = r.count(1)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(match ErrorStatus::decode(&mut r)? {
                    None => Ok(removed_version(r.u64()?)),
                    Some(e) => Err(e),
                });
            }
            Response::MultiRemove(items)
        }
        Opcode::Enumerate => {
            let f = r.fixed(enumerate_res::FIXED)?;
            let flags = f[enumerate_res::FLAGS];
            let cursor = get_u64(f, enumerate_res::NEXT);
            let next = match flags {
                0 if cursor == 0 => None,
                enumerate_res::MORE => Some(cursor),
                _ => return Err(DecodeError::Malformed("bad enumerate flags")),
            };
            let n = get_u32(f, enumerate_res::COUNT) as usize;
            if n.saturating_mul(object::FIXED) > r.remaining() {
                return Err(DecodeError::Malformed("item count exceeds the message"));
            }
            let mut objects = Vec::with_capacity(n);
            for _ in 0..n {
                let f = r.fixed(object::FIXED)?;
                let version = Version(get_u64(f, object::VERSION));
                let key = r.take(get_u32(f, object::KEY_LEN) as usize)?;
                let value = r.take(get_u32(f, object::VALUE_LEN) as usize)?;
                objects.push(Object { key, value, version });
            }
            Response::Enumerate { objects, next }
        }
        Opcode::CreateTable => Response::CreateTable { table: TableId(r.u64()?) },
        Opcode::GetTableId => Response::GetTableId { table: TableId(r.u64()?) },
        Opcode::Stats => {
            let n = r.u16()? as usize;
            // Each stat takes at least 10 bytes (empty name).
            if n.saturating_mul(10) > r.remaining() {
                return Err(DecodeError::Malformed("item count exceeds the message"));
            }
            let mut stats = Vec::with_capacity(n);
            for _ in 0..n {
                let name = Cow::Borrowed(r.str8()?);
                let value = match r.u8()? {
                    STAT_U64 => StatValue::U64(r.u64()?),
                    STAT_F64 => StatValue::F64(f64::from_bits(r.u64()?)),
                    _ => return Err(DecodeError::Malformed("unknown stat kind")),
                };
                stats.push(Stat { name, value });
            }
            Response::Stats(stats)
        }
    };
    r.finish()?;
    Ok(Ok(res))
}
