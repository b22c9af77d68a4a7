//! Requests: opcodes, reject rules, and each request body in both
//! directions. Layouts are in `docs/wire-format.md`; offsets below are
//! relative to the start of the body (or of a multi-op item).

use crate::frame::{encode_header, finish_frame};
use crate::stream::{self, Subscriber};
use crate::wire::{get_u32, get_u64, len32, put_str16, DecodeError, Reader};
use shoal_common::{ChunkId, StreamOffset, StreamShape, TableId, Version};

/// The operations. Matched exhaustively: adding one shows every place to
/// update. Codes 34-255 are reserved for the cluster (tablet maps,
/// replication) and later versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    Ping = 1,
    Read = 2,
    Write = 3,
    Remove = 4,
    Increment = 5,
    MultiRead = 6,
    MultiWrite = 7,
    MultiRemove = 8,
    Enumerate = 9,
    WriteTtl = 10,
    ReadTtl = 11,
    ChunkCreate = 12,
    ChunkGet = 13,
    ChunkPut = 14,
    ChunkRemove = 15,
    CreateTable = 16,
    DropTable = 17,
    GetTableId = 18,
    Stats = 19,
    Auth = 20,
    CreateChunkTable = 21,
    CreateStream = 22,
    Produce = 23,
    Consume = 24,
    DescribeStream = 25,
    ScFilter = 26,
    ChunkLock = 27,
    ChunkUnlock = 28,
    ChunkRenew = 29,
    ChunkPutLocked = 30,
    ClaimGroup = 31,
    ConsumeClaimed = 32,
    CommitGroup = 33,
}

impl Opcode {
    pub fn from_u8(code: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match code {
            1 => Ping,
            2 => Read,
            3 => Write,
            4 => Remove,
            5 => Increment,
            6 => MultiRead,
            7 => MultiWrite,
            8 => MultiRemove,
            9 => Enumerate,
            10 => WriteTtl,
            11 => ReadTtl,
            12 => ChunkCreate,
            13 => ChunkGet,
            14 => ChunkPut,
            15 => ChunkRemove,
            16 => CreateTable,
            17 => DropTable,
            18 => GetTableId,
            19 => Stats,
            20 => Auth,
            21 => CreateChunkTable,
            22 => CreateStream,
            23 => Produce,
            24 => Consume,
            25 => DescribeStream,
            26 => ScFilter,
            27 => ChunkLock,
            28 => ChunkUnlock,
            29 => ChunkRenew,
            30 => ChunkPutLocked,
            31 => ClaimGroup,
            32 => ConsumeClaimed,
            33 => CommitGroup,
            _ => return None,
        })
    }
}

/// Reject rules travel as a flags byte and the given version.
pub use shoal_common::RejectRules;

const RULE_DOESNT_EXIST: u8 = 0x01;
const RULE_EXISTS: u8 = 0x02;
const RULE_VERSION_LE_GIVEN: u8 = 0x04;
const RULE_VERSION_NE_GIVEN: u8 = 0x08;
const RULES_FLAGS_AT: usize = 0;
const RULES_VERSION_AT: usize = 1;
/// Size of encoded reject rules: a flags byte and the given version.
pub(crate) const RULES_LEN: usize = 9;
const _: () = assert!(RULES_VERSION_AT + 8 == RULES_LEN);

fn encode_rules(rules: &RejectRules, out: &mut Vec<u8>) {
    let mut flags = 0;
    for (on, bit) in [
        (rules.doesnt_exist, RULE_DOESNT_EXIST),
        (rules.exists, RULE_EXISTS),
        (rules.version_le_given, RULE_VERSION_LE_GIVEN),
        (rules.version_ne_given, RULE_VERSION_NE_GIVEN),
    ] {
        if on {
            flags |= bit;
        }
    }
    out.push(flags);
    out.extend_from_slice(&rules.given_version.0.to_le_bytes());
}

/// Reads rules from `b[at..at + RULES_LEN]` (length checked by the caller).
fn decode_rules(b: &[u8], at: usize) -> Result<RejectRules, DecodeError> {
    let flags = b[at + RULES_FLAGS_AT];
    if flags & !(RULE_DOESNT_EXIST | RULE_EXISTS | RULE_VERSION_LE_GIVEN | RULE_VERSION_NE_GIVEN) != 0 {
        return Err(DecodeError::Malformed("unknown reject rule bits"));
    }
    Ok(RejectRules {
        given_version: Version(get_u64(b, at + RULES_VERSION_AT)),
        doesnt_exist: flags & RULE_DOESNT_EXIST != 0,
        exists: flags & RULE_EXISTS != 0,
        version_le_given: flags & RULE_VERSION_LE_GIVEN != 0,
        version_ne_given: flags & RULE_VERSION_NE_GIVEN != 0,
    })
}

/// READ and REMOVE bodies, and each MULTI_REMOVE item: table, rules, key length, key.
mod key_op {
    pub const TABLE: usize = 0;
    pub const RULES: usize = 8;
    pub const KEY_LEN: usize = RULES + super::RULES_LEN;
    pub const FIXED: usize = KEY_LEN + 4;
}
const _: () = assert!(key_op::FIXED == 21);

/// WRITE bodies and each MULTI_WRITE item: table, rules, key and value lengths, key, value.
mod write_op {
    pub const TABLE: usize = 0;
    pub const RULES: usize = 8;
    pub const KEY_LEN: usize = RULES + super::RULES_LEN;
    pub const VALUE_LEN: usize = KEY_LEN + 4;
    pub const FIXED: usize = VALUE_LEN + 4;
}
const _: () = assert!(write_op::FIXED == 25);

/// WRITE_TTL bodies: table, rules, time to live, key and value lengths,
/// key, value.
mod write_ttl_op {
    pub const TABLE: usize = 0;
    pub const RULES: usize = 8;
    pub const TTL: usize = RULES + super::RULES_LEN;
    pub const KEY_LEN: usize = TTL + 8;
    pub const VALUE_LEN: usize = KEY_LEN + 4;
    pub const FIXED: usize = VALUE_LEN + 4;
}
const _: () = assert!(write_ttl_op::FIXED == 33);

/// INCREMENT bodies: table, rules, delta, key length, key.
mod increment_op {
    pub const TABLE: usize = 0;
    pub const RULES: usize = 8;
    pub const DELTA: usize = RULES + super::RULES_LEN;
    pub const KEY_LEN: usize = DELTA + 8;
    pub const FIXED: usize = KEY_LEN + 4;
}
const _: () = assert!(increment_op::FIXED == 29);

/// Each MULTI_READ item: table, key length, key.
mod read_item {
    pub const TABLE: usize = 0;
    pub const KEY_LEN: usize = 8;
    pub const FIXED: usize = 12;
}
const _: () = assert!(read_item::KEY_LEN + 4 == read_item::FIXED);

/// ENUMERATE bodies: table, cursor, maximum count.
mod enumerate_op {
    pub const TABLE: usize = 0;
    pub const CURSOR: usize = 8;
    pub const MAX_COUNT: usize = 16;
    pub const FIXED: usize = 20;
}
const _: () = assert!(enumerate_op::MAX_COUNT + 4 == enumerate_op::FIXED);

/// AUTH bodies: user name length, password length, user name, password.
mod auth_op {
    pub const USER_LEN: usize = 0;
    pub const PASSWORD_LEN: usize = 2;
    pub const FIXED: usize = 4;
}
const _: () = assert!(auth_op::PASSWORD_LEN + 2 == auth_op::FIXED);

/// Chunk requests: the table and the item count, then the items.
mod chunk_op {
    pub const TABLE: usize = 0;
    pub const COUNT: usize = 8;
    pub const FIXED: usize = 12;
    /// CHUNK_CREATE items: payload length, payload.
    pub const CREATE_ITEM: usize = 4;
    /// CHUNK_GET and CHUNK_REMOVE items: a chunk id.
    pub const ID_ITEM: usize = 8;
    /// CHUNK_PUT items: chunk id, payload length, payload.
    pub const PUT_ID: usize = 0;
    pub const PUT_LEN: usize = 8;
    pub const PUT_ITEM: usize = 12;
}
const _: () = assert!(chunk_op::COUNT + 4 == chunk_op::FIXED && chunk_op::PUT_LEN + 4 == chunk_op::PUT_ITEM);

/// Chunk lock requests: table, chunk id and owner, then per opcode:
/// CHUNK_LOCK mode, wait and lease; CHUNK_UNLOCK the token; CHUNK_RENEW
/// the token and lease; CHUNK_PUT_LOCKED the token and payload length,
/// then the payload.
mod lock_op {
    pub const TABLE: usize = 0;
    pub const CHUNK: usize = 8;
    pub const OWNER: usize = 16;
    pub const MODE: usize = 24;
    pub const WAIT: usize = 25;
    pub const LOCK_LEASE: usize = 26;
    pub const LOCK_FIXED: usize = 30;
    pub const TOKEN: usize = 24;
    pub const UNLOCK_FIXED: usize = 32;
    pub const RENEW_LEASE: usize = 32;
    pub const RENEW_FIXED: usize = 36;
    pub const PUT_LEN: usize = 32;
    pub const PUT_FIXED: usize = 36;
}
const _: () = assert!(
    lock_op::LOCK_LEASE + 4 == lock_op::LOCK_FIXED
        && lock_op::TOKEN + 8 == lock_op::UNLOCK_FIXED
        && lock_op::RENEW_LEASE + 4 == lock_op::RENEW_FIXED
        && lock_op::PUT_LEN + 4 == lock_op::PUT_FIXED
);

/// A chunk lock's mode on the wire: 0 shared (read), 1 exclusive (write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LockMode {
    Shared = 0,
    Exclusive = 1,
}

/// Most chunks one CHUNK_CREATE may create: the store appends up to this
/// many as one group, so a refused create created none of them.
pub const MAX_CHUNK_CREATE: usize = 1024;

/// One object of a multi-read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadItem<'a> {
    pub table: TableId,
    pub key: &'a [u8],
}

/// One object of a multi-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteItem<'a> {
    pub table: TableId,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub rules: RejectRules,
}

/// One object of a multi-remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoveItem<'a> {
    pub table: TableId,
    pub key: &'a [u8],
    pub rules: RejectRules,
}

/// A request, borrowing its keys, values and names from the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    Read {
        table: TableId,
        key: &'a [u8],
        rules: RejectRules,
    },
    Write {
        table: TableId,
        key: &'a [u8],
        value: &'a [u8],
        rules: RejectRules,
    },
    Remove {
        table: TableId,
        key: &'a [u8],
        rules: RejectRules,
    },
    Increment {
        table: TableId,
        key: &'a [u8],
        delta: i64,
        rules: RejectRules,
    },
    MultiRead(Vec<ReadItem<'a>>),
    MultiWrite(Vec<WriteItem<'a>>),
    MultiRemove(Vec<RemoveItem<'a>>),
    /// Objects of `table` from key-hash position `cursor` on, about `max_count`.
    Enumerate {
        table: TableId,
        cursor: u64,
        max_count: u32,
    },
    CreateTable {
        name: &'a str,
    },
    DropTable {
        name: &'a str,
    },
    GetTableId {
        name: &'a str,
    },
    Stats,
    /// Logs the connection in as `user` (see `docs/wire-format.md`,
    /// "Authentication"). Names and passwords are bytes, at most 65535 each.
    Auth {
        user: &'a [u8],
        password: &'a [u8],
    },
    /// WRITE of an object that expires `ttl_ms` (at least 1) milliseconds
    /// after the server applies it.
    WriteTtl {
        table: TableId,
        key: &'a [u8],
        value: &'a [u8],
        rules: RejectRules,
        ttl_ms: u64,
    },
    /// An object's version and expiry time, without its value.
    ReadTtl {
        table: TableId,
        key: &'a [u8],
        rules: RejectRules,
    },
    /// Creates one chunk per payload (at most [`MAX_CHUNK_CREATE`]) in a
    /// chunk table; the server picks their ids.
    ChunkCreate {
        table: TableId,
        payloads: Vec<&'a [u8]>,
    },
    /// Reads chunks, each with its own status.
    ChunkGet {
        table: TableId,
        ids: Vec<ChunkId>,
    },
    /// Replaces the payloads of existing chunks, each with its own status.
    ChunkPut {
        table: TableId,
        items: Vec<(ChunkId, &'a [u8])>,
    },
    /// Removes chunks, each with its own status.
    ChunkRemove {
        table: TableId,
        ids: Vec<ChunkId>,
    },
    /// Locks a chunk for `owner` (a client session's id, not 0) with a
    /// lease of `lease_ms` (`docs/chunks.md`, "Locks"). Never waits on the
    /// server: a lock it cannot grant now is answered LOCK_BUSY, and with
    /// `wait` the request keeps a place in the chunk's queue for a second
    /// while the client retries.
    ChunkLock {
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        mode: LockMode,
        wait: bool,
        lease_ms: u32,
    },
    /// Releases the lock `owner` holds on a chunk with `token`.
    ChunkUnlock {
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        token: u64,
    },
    /// Renews the lease of the lock `owner` holds with `token`.
    ChunkRenew {
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        token: u64,
        lease_ms: u32,
    },
    /// A CHUNK_PUT of one chunk applied only while `owner` holds its
    /// exclusive lock with `token` (the fenced write).
    ChunkPutLocked {
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        token: u64,
        payload: &'a [u8],
    },
    /// CREATE_TABLE of a chunk table.
    /// Symmetric caching's filter of the hot keys of the answering
    /// server's group (`docs/symmetric-caching.md`, "The filter").
    ScFilter,
    CreateChunkTable {
        name: &'a str,
    },
    /// Creates a stream (a table of the stream kind) of `shape`; a 0 in
    /// its logs, segment bytes or segments per group asks for the
    /// server's default. Creating it again with the same shape answers its
    /// id (`docs/streams.md`).
    CreateStream {
        name: &'a str,
        shape: StreamShape,
    },
    /// Appends `records` (1-65536) to a streamlet as one batch, in the log
    /// of the streamlet's MultiLog that `producer` maps to.
    Produce {
        table: TableId,
        streamlet: u32,
        producer: u64,
        records: Vec<&'a [u8]>,
    },
    /// Records of one group of a streamlet from `from`, up to about
    /// `max_bytes` (at least one record if there is one).
    Consume {
        table: TableId,
        streamlet: u32,
        from: StreamOffset,
        max_bytes: u32,
    },
    /// The stream's shape and the groups of a streamlet with ids from
    /// `from_group`, at most `max_groups`.
    DescribeStream {
        table: TableId,
        streamlet: u32,
        from_group: u64,
        max_groups: u32,
    },
    /// A group of the streamlet for this instance of the consumer name,
    /// one no other live instance of the name holds, under a lease
    /// (`docs/streams.md`, "Consumer names").
    ClaimGroup(Subscriber<'a>),
    /// CONSUME of a group the instance holds; renews its lease.
    ConsumeClaimed {
        who: Subscriber<'a>,
        from: StreamOffset,
        max_bytes: u32,
    },
    /// Commits the name's offset `at` in a group the instance holds
    /// (durably); renews the lease, or releases the group when `release`
    /// or when `at` is the end of the closed group (done).
    CommitGroup {
        who: Subscriber<'a>,
        at: StreamOffset,
        release: bool,
    },
}

fn put_key_op(out: &mut Vec<u8>, table: TableId, rules: &RejectRules, key: &[u8]) {
    out.extend_from_slice(&table.0.to_le_bytes());
    encode_rules(rules, out);
    out.extend_from_slice(&len32(key));
    out.extend_from_slice(key);
}

fn put_write_op(out: &mut Vec<u8>, w: &WriteItem<'_>) {
    out.extend_from_slice(&w.table.0.to_le_bytes());
    encode_rules(&w.rules, out);
    out.extend_from_slice(&len32(w.key));
    out.extend_from_slice(&len32(w.value));
    out.extend_from_slice(w.key);
    out.extend_from_slice(w.value);
}

fn get_key_op<'a>(r: &mut Reader<'a>) -> Result<(TableId, RejectRules, &'a [u8]), DecodeError> {
    let f = r.fixed(key_op::FIXED)?;
    let table = TableId(get_u64(f, key_op::TABLE));
    let rules = decode_rules(f, key_op::RULES)?;
    let key = r.take(get_u32(f, key_op::KEY_LEN) as usize)?;
    Ok((table, rules, key))
}

fn get_write_op<'a>(r: &mut Reader<'a>) -> Result<WriteItem<'a>, DecodeError> {
    let f = r.fixed(write_op::FIXED)?;
    let table = TableId(get_u64(f, write_op::TABLE));
    let rules = decode_rules(f, write_op::RULES)?;
    let key = r.take(get_u32(f, write_op::KEY_LEN) as usize)?;
    let value = r.take(get_u32(f, write_op::VALUE_LEN) as usize)?;
    Ok(WriteItem { table, key, value, rules })
}

fn get_name<'a>(r: &mut Reader<'a>) -> Result<&'a str, DecodeError> {
    let name = r.str16()?;
    if name.is_empty() {
        return Err(DecodeError::Malformed("empty table name"));
    }
    Ok(name)
}

impl<'a> Request<'a> {
    /// Whether the request may change stored data (its acknowledgement
    /// then waits for replication in a cluster).
    pub fn mutates(&self) -> bool {
        match self {
            Request::Write { .. }
            | Request::WriteTtl { .. }
            | Request::Remove { .. }
            | Request::Increment { .. }
            | Request::MultiWrite(_)
            | Request::MultiRemove(_)
            | Request::CreateTable { .. }
            | Request::DropTable { .. }
            | Request::ChunkCreate { .. }
            | Request::ChunkPut { .. }
            | Request::ChunkRemove { .. }
            | Request::CreateChunkTable { .. }
            | Request::CreateStream { .. }
            | Request::Produce { .. }
            | Request::ChunkUnlock { .. }
            | Request::ChunkPutLocked { .. }
            | Request::CommitGroup { .. } => true,
            Request::Ping
            | Request::Read { .. }
            | Request::ReadTtl { .. }
            | Request::MultiRead(_)
            | Request::Enumerate { .. }
            | Request::GetTableId { .. }
            | Request::Stats
            | Request::ScFilter
            | Request::Auth { .. }
            | Request::ChunkGet { .. }
            | Request::Consume { .. }
            | Request::DescribeStream { .. }
            // A claim or a read changes leases only, which are not logged.
            | Request::ClaimGroup(_)
            | Request::ConsumeClaimed { .. }
            // Repeating a lock or renewal is harmless: an owner that holds
            // the lock gets the same token again.
            | Request::ChunkLock { .. }
            | Request::ChunkRenew { .. } => false,
        }
    }

    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Ping => Opcode::Ping,
            Request::Read { .. } => Opcode::Read,
            Request::Write { .. } => Opcode::Write,
            Request::Remove { .. } => Opcode::Remove,
            Request::Increment { .. } => Opcode::Increment,
            Request::MultiRead(_) => Opcode::MultiRead,
            Request::MultiWrite(_) => Opcode::MultiWrite,
            Request::MultiRemove(_) => Opcode::MultiRemove,
            Request::Enumerate { .. } => Opcode::Enumerate,
            Request::CreateTable { .. } => Opcode::CreateTable,
            Request::DropTable { .. } => Opcode::DropTable,
            Request::GetTableId { .. } => Opcode::GetTableId,
            Request::Stats => Opcode::Stats,
            Request::Auth { .. } => Opcode::Auth,
            Request::WriteTtl { .. } => Opcode::WriteTtl,
            Request::ReadTtl { .. } => Opcode::ReadTtl,
            Request::ChunkCreate { .. } => Opcode::ChunkCreate,
            Request::ChunkGet { .. } => Opcode::ChunkGet,
            Request::ChunkPut { .. } => Opcode::ChunkPut,
            Request::ChunkRemove { .. } => Opcode::ChunkRemove,
            Request::CreateChunkTable { .. } => Opcode::CreateChunkTable,
            Request::CreateStream { .. } => Opcode::CreateStream,
            Request::Produce { .. } => Opcode::Produce,
            Request::Consume { .. } => Opcode::Consume,
            Request::DescribeStream { .. } => Opcode::DescribeStream,
            Request::ScFilter => Opcode::ScFilter,
            Request::ChunkLock { .. } => Opcode::ChunkLock,
            Request::ChunkUnlock { .. } => Opcode::ChunkUnlock,
            Request::ChunkRenew { .. } => Opcode::ChunkRenew,
            Request::ChunkPutLocked { .. } => Opcode::ChunkPutLocked,
            Request::ClaimGroup(_) => Opcode::ClaimGroup,
            Request::ConsumeClaimed { .. } => Opcode::ConsumeClaimed,
            Request::CommitGroup { .. } => Opcode::CommitGroup,
        }
    }

    /// Appends this request as one frame with the given id; returns the
    /// frame's length (the caller checks it against the peer's limit).
    pub fn encode(&self, request_id: u64, out: &mut Vec<u8>) -> usize {
        let start = encode_header(out, self.opcode() as u8, 0, request_id);
        match self {
            Request::Ping | Request::Stats | Request::ScFilter => {}
            Request::Read { table, key, rules }
            | Request::Remove { table, key, rules }
            | Request::ReadTtl { table, key, rules } => put_key_op(out, *table, rules, key),
            Request::WriteTtl { table, key, value, rules, ttl_ms } => {
                out.extend_from_slice(&table.0.to_le_bytes());
                encode_rules(rules, out);
                out.extend_from_slice(&ttl_ms.to_le_bytes());
                out.extend_from_slice(&len32(key));
                out.extend_from_slice(&len32(value));
                out.extend_from_slice(key);
                out.extend_from_slice(value);
            }
            Request::Write { table, key, value, rules } => {
                put_write_op(out, &WriteItem { table: *table, key, value, rules: *rules })
            }
            Request::Increment { table, key, delta, rules } => {
                out.extend_from_slice(&table.0.to_le_bytes());
                encode_rules(rules, out);
                out.extend_from_slice(&delta.to_le_bytes());
                out.extend_from_slice(&len32(key));
                out.extend_from_slice(key);
            }
            Request::MultiRead(items) => {
                out.extend_from_slice(&len32_count(items.len()));
                for it in items {
                    out.extend_from_slice(&it.table.0.to_le_bytes());
                    out.extend_from_slice(&len32(it.key));
                    out.extend_from_slice(it.key);
                }
            }
            Request::MultiWrite(items) => {
                out.extend_from_slice(&len32_count(items.len()));
                for it in items {
                    put_write_op(out, it);
                }
            }
            Request::MultiRemove(items) => {
                out.extend_from_slice(&len32_count(items.len()));
                for it in items {
                    put_key_op(out, it.table, &it.rules, it.key);
                }
            }
            Request::Enumerate { table, cursor, max_count } => {
                out.extend_from_slice(&table.0.to_le_bytes());
                out.extend_from_slice(&cursor.to_le_bytes());
                out.extend_from_slice(&max_count.to_le_bytes());
            }
            Request::CreateTable { name }
            | Request::DropTable { name }
            | Request::GetTableId { name }
            | Request::CreateChunkTable { name } => put_str16(out, name),
            Request::ChunkCreate { table, payloads } => {
                out.extend_from_slice(&table.0.to_le_bytes());
                out.extend_from_slice(&len32_count(payloads.len()));
                for p in payloads {
                    out.extend_from_slice(&len32(p));
                    out.extend_from_slice(p);
                }
            }
            Request::ChunkGet { table, ids } | Request::ChunkRemove { table, ids } => {
                out.extend_from_slice(&table.0.to_le_bytes());
                out.extend_from_slice(&len32_count(ids.len()));
                for id in ids {
                    out.extend_from_slice(&id.0.to_le_bytes());
                }
            }
            Request::ChunkPut { table, items } => {
                out.extend_from_slice(&table.0.to_le_bytes());
                out.extend_from_slice(&len32_count(items.len()));
                for (id, p) in items {
                    out.extend_from_slice(&id.0.to_le_bytes());
                    out.extend_from_slice(&len32(p));
                    out.extend_from_slice(p);
                }
            }
            Request::ChunkLock { table, chunk, owner, mode, wait, lease_ms } => {
                put_lock_head(out, *table, *chunk, *owner);
                out.push(*mode as u8);
                out.push(u8::from(*wait));
                out.extend_from_slice(&lease_ms.to_le_bytes());
            }
            Request::ChunkUnlock { table, chunk, owner, token } => {
                put_lock_head(out, *table, *chunk, *owner);
                out.extend_from_slice(&token.to_le_bytes());
            }
            Request::ChunkRenew { table, chunk, owner, token, lease_ms } => {
                put_lock_head(out, *table, *chunk, *owner);
                out.extend_from_slice(&token.to_le_bytes());
                out.extend_from_slice(&lease_ms.to_le_bytes());
            }
            Request::ChunkPutLocked { table, chunk, owner, token, payload } => {
                put_lock_head(out, *table, *chunk, *owner);
                out.extend_from_slice(&token.to_le_bytes());
                out.extend_from_slice(&len32(payload));
                out.extend_from_slice(payload);
            }
            Request::CreateStream { name, shape } => stream::put_create(out, name, shape),
            Request::Produce { table, streamlet, producer, records } => {
                stream::put_produce(out, *table, *streamlet, *producer, records)
            }
            Request::Consume { table, streamlet, from, max_bytes } => {
                stream::put_consume(out, *table, *streamlet, from, *max_bytes)
            }
            Request::DescribeStream { table, streamlet, from_group, max_groups } => {
                stream::put_describe(out, *table, *streamlet, *from_group, *max_groups)
            }
            Request::ClaimGroup(who) => stream::put_claim(out, who),
            Request::ConsumeClaimed { who, from, max_bytes } => stream::put_consume_claimed(out, who, from, *max_bytes),
            Request::CommitGroup { who, at, release } => stream::put_commit(out, who, at, *release),
            Request::Auth { user, password } => {
                out.extend_from_slice(&len16(user).to_le_bytes());
                out.extend_from_slice(&len16(password).to_le_bytes());
                out.extend_from_slice(&user[..len16(user) as usize]);
                out.extend_from_slice(&password[..len16(password) as usize]);
            }
        }
        finish_frame(out, start)
    }

    /// Pass two: parses a request body (the frame's opcode and body, as
    /// [`crate::check_frame`] delimited them). Rejects unknown opcodes,
    /// truncated fields, unknown rule bits and trailing bytes.
    pub fn decode(opcode: u8, body: &'a [u8]) -> Result<Request<'a>, DecodeError> {
        let op = Opcode::from_u8(opcode).ok_or(DecodeError::UnknownOpcode(opcode))?;
        let mut r = Reader::new(body);
        let req = match op {
            Opcode::Ping => Request::Ping,
            Opcode::Stats => Request::Stats,
            Opcode::ScFilter => Request::ScFilter,
            Opcode::Read => {
                let (table, rules, key) = get_key_op(&mut r)?;
                Request::Read { table, key, rules }
            }
            Opcode::Remove => {
                let (table, rules, key) = get_key_op(&mut r)?;
                Request::Remove { table, key, rules }
            }
            Opcode::Write => {
                let w = get_write_op(&mut r)?;
                Request::Write { table: w.table, key: w.key, value: w.value, rules: w.rules }
            }
            Opcode::WriteTtl => {
                let f = r.fixed(write_ttl_op::FIXED)?;
                let table = TableId(get_u64(f, write_ttl_op::TABLE));
                let rules = decode_rules(f, write_ttl_op::RULES)?;
                let ttl_ms = get_u64(f, write_ttl_op::TTL);
                if ttl_ms == 0 {
                    return Err(DecodeError::Malformed("a time to live must be at least 1 ms"));
                }
                let key = r.take(get_u32(f, write_ttl_op::KEY_LEN) as usize)?;
                let value = r.take(get_u32(f, write_ttl_op::VALUE_LEN) as usize)?;
                Request::WriteTtl { table, key, value, rules, ttl_ms }
            }
            Opcode::ReadTtl => {
                let (table, rules, key) = get_key_op(&mut r)?;
                Request::ReadTtl { table, key, rules }
            }
            Opcode::Increment => {
                let f = r.fixed(increment_op::FIXED)?;
                let table = TableId(get_u64(f, increment_op::TABLE));
                let rules = decode_rules(f, increment_op::RULES)?;
                let delta = get_u64(f, increment_op::DELTA) as i64;
                let key = r.take(get_u32(f, increment_op::KEY_LEN) as usize)?;
                Request::Increment { table, key, delta, rules }
            }
            Opcode::MultiRead => {
                let n = r.count(read_item::FIXED)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let f = r.fixed(read_item::FIXED)?;
                    let table = TableId(get_u64(f, read_item::TABLE));
                    let key = r.take(get_u32(f, read_item::KEY_LEN) as usize)?;
                    items.push(ReadItem { table, key });
                }
                Request::MultiRead(items)
            }
            Opcode::MultiWrite => {
                let n = r.count(write_op::FIXED)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(get_write_op(&mut r)?);
                }
                Request::MultiWrite(items)
            }
            Opcode::MultiRemove => {
                let n = r.count(key_op::FIXED)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let (table, rules, key) = get_key_op(&mut r)?;
                    items.push(RemoveItem { table, key, rules });
                }
                Request::MultiRemove(items)
            }
            Opcode::Enumerate => {
                let f = r.fixed(enumerate_op::FIXED)?;
                Request::Enumerate {
                    table: TableId(get_u64(f, enumerate_op::TABLE)),
                    cursor: get_u64(f, enumerate_op::CURSOR),
                    max_count: get_u32(f, enumerate_op::MAX_COUNT),
                }
            }
            Opcode::CreateTable => Request::CreateTable { name: get_name(&mut r)? },
            Opcode::DropTable => Request::DropTable { name: get_name(&mut r)? },
            Opcode::GetTableId => Request::GetTableId { name: get_name(&mut r)? },
            Opcode::CreateChunkTable => Request::CreateChunkTable { name: get_name(&mut r)? },
            Opcode::ChunkCreate => {
                let (table, n) = get_chunk_head(&mut r, chunk_op::CREATE_ITEM)?;
                if n > MAX_CHUNK_CREATE {
                    return Err(DecodeError::Malformed("more than 1024 chunks in one CHUNK_CREATE"));
                }
                let mut payloads = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = r.u32()? as usize;
                    payloads.push(r.take(len)?);
                }
                Request::ChunkCreate { table, payloads }
            }
            Opcode::ChunkGet | Opcode::ChunkRemove => {
                let (table, n) = get_chunk_head(&mut r, chunk_op::ID_ITEM)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(ChunkId(r.u64()?));
                }
                match op {
                    Opcode::ChunkGet => Request::ChunkGet { table, ids },
                    _ => Request::ChunkRemove { table, ids },
                }
            }
            Opcode::ChunkPut => {
                let (table, n) = get_chunk_head(&mut r, chunk_op::PUT_ITEM)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let f = r.fixed(chunk_op::PUT_ITEM)?;
                    let id = ChunkId(get_u64(f, chunk_op::PUT_ID));
                    items.push((id, r.take(get_u32(f, chunk_op::PUT_LEN) as usize)?));
                }
                Request::ChunkPut { table, items }
            }
            Opcode::ChunkLock => {
                let f = r.fixed(lock_op::LOCK_FIXED)?;
                let (table, chunk, owner) = get_lock_head(f);
                let mode = match f[lock_op::MODE] {
                    0 => LockMode::Shared,
                    1 => LockMode::Exclusive,
                    _ => return Err(DecodeError::Malformed("lock mode must be 0 (shared) or 1 (exclusive)")),
                };
                let wait = match f[lock_op::WAIT] {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Malformed("lock wait flag must be 0 or 1")),
                };
                let lease_ms = get_u32(f, lock_op::LOCK_LEASE);
                Request::ChunkLock { table, chunk, owner, mode, wait, lease_ms }
            }
            Opcode::ChunkUnlock => {
                let f = r.fixed(lock_op::UNLOCK_FIXED)?;
                let (table, chunk, owner) = get_lock_head(f);
                Request::ChunkUnlock { table, chunk, owner, token: get_u64(f, lock_op::TOKEN) }
            }
            Opcode::ChunkRenew => {
                let f = r.fixed(lock_op::RENEW_FIXED)?;
                let (table, chunk, owner) = get_lock_head(f);
                let (token, lease_ms) = (get_u64(f, lock_op::TOKEN), get_u32(f, lock_op::RENEW_LEASE));
                Request::ChunkRenew { table, chunk, owner, token, lease_ms }
            }
            Opcode::ChunkPutLocked => {
                let f = r.fixed(lock_op::PUT_FIXED)?;
                let (table, chunk, owner) = get_lock_head(f);
                let token = get_u64(f, lock_op::TOKEN);
                let payload = r.take(get_u32(f, lock_op::PUT_LEN) as usize)?;
                Request::ChunkPutLocked { table, chunk, owner, token, payload }
            }
            Opcode::CreateStream => {
                let name = get_name(&mut r)?;
                Request::CreateStream { name, shape: stream::get_shape(&mut r)? }
            }
            Opcode::Produce => {
                let (table, streamlet, producer, records) = stream::get_produce(&mut r)?;
                Request::Produce { table, streamlet, producer, records }
            }
            Opcode::Consume => {
                let (table, streamlet, from, max_bytes) = stream::get_consume(&mut r)?;
                Request::Consume { table, streamlet, from, max_bytes }
            }
            Opcode::DescribeStream => {
                let (table, streamlet, from_group, max_groups) = stream::get_describe(&mut r)?;
                Request::DescribeStream { table, streamlet, from_group, max_groups }
            }
            Opcode::ClaimGroup => Request::ClaimGroup(stream::get_claim(&mut r)?),
            Opcode::ConsumeClaimed => {
                let (who, from, max_bytes) = stream::get_consume_claimed(&mut r)?;
                Request::ConsumeClaimed { who, from, max_bytes }
            }
            Opcode::CommitGroup => {
                let (who, at, release) = stream::get_commit(&mut r)?;
                Request::CommitGroup { who, at, release }
            }
            Opcode::Auth => {
                let f = r.fixed(auth_op::FIXED)?;
                let user_len = u16::from_le_bytes([f[auth_op::USER_LEN], f[auth_op::USER_LEN + 1]]);
                let password_len = u16::from_le_bytes([f[auth_op::PASSWORD_LEN], f[auth_op::PASSWORD_LEN + 1]]);
                let user = r.take(user_len as usize)?;
                let password = r.take(password_len as usize)?;
                Request::Auth { user, password }
            }
        };
        r.finish()?;
        Ok(req)
    }
}

/// The table and item count of a chunk request; the count is checked
/// against the bytes left at `min_item` bytes an item before anything is
/// allocated for it.
fn get_chunk_head(r: &mut Reader<'_>, min_item: usize) -> Result<(TableId, usize), DecodeError> {
    let f = r.fixed(chunk_op::FIXED)?;
    let n = get_u32(f, chunk_op::COUNT) as usize;
    if n.saturating_mul(min_item) > r.remaining() {
        return Err(DecodeError::Malformed("item count exceeds the message"));
    }
    Ok((TableId(get_u64(f, chunk_op::TABLE)), n))
}

fn put_lock_head(out: &mut Vec<u8>, table: TableId, chunk: ChunkId, owner: u64) {
    out.extend_from_slice(&table.0.to_le_bytes());
    out.extend_from_slice(&chunk.0.to_le_bytes());
    out.extend_from_slice(&owner.to_le_bytes());
}

/// The table, chunk and owner of a lock request's fixed part.
fn get_lock_head(f: &[u8]) -> (TableId, ChunkId, u64) {
    (TableId(get_u64(f, lock_op::TABLE)), ChunkId(get_u64(f, lock_op::CHUNK)), get_u64(f, lock_op::OWNER))
}

/// A name's or password's length as its u16 field; longer ones are cut
/// to 65535 bytes (no real credential is that long).
fn len16(b: &[u8]) -> u16 {
    u16::try_from(b.len()).unwrap_or(u16::MAX)
}

/// An item count as its u32 field (saturated like [`len32`]).
pub(crate) fn len32_count(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes()
}
