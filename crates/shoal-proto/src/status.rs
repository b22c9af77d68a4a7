//! Response statuses. Every response body, and every item of a multi-op
//! response, starts with a status byte; a non-OK status is followed by its
//! detail (see the table in `docs/wire-format.md`).

use crate::wire::{put_str16, DecodeError, Reader};
use shoal_common::{TableId, Version};

/// The status codes on the wire. Matched exhaustively: adding one shows
/// every place to update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum StatusCode {
    Ok = 0,
    UnknownTable = 1,
    KeyTooLarge = 2,
    ValueTooLarge = 3,
    ObjectDoesntExist = 4,
    ObjectExists = 5,
    WrongVersion = 6,
    NotAnInteger = 7,
    Overflow = 8,
    OutOfMemory = 9,
    UnknownTableName = 10,
    UnknownTablet = 11,
    Retry = 12,
    NotAuthenticated = 13,
    AuthFailed = 14,
    MalformedRequest = 16,
    UnknownOpcode = 17,
    FrameTooLarge = 18,
    UnsupportedVersion = 19,
    LockBusy = 20,
    LockNotHeld = 21,
    LockLost = 22,
    LockTableFull = 23,
    LockOwnerLimit = 24,
}

impl StatusCode {
    pub fn from_u8(code: u8) -> Option<StatusCode> {
        use StatusCode::*;
        Some(match code {
            0 => Ok,
            1 => UnknownTable,
            2 => KeyTooLarge,
            3 => ValueTooLarge,
            4 => ObjectDoesntExist,
            5 => ObjectExists,
            6 => WrongVersion,
            7 => NotAnInteger,
            8 => Overflow,
            9 => OutOfMemory,
            10 => UnknownTableName,
            11 => UnknownTablet,
            12 => Retry,
            13 => NotAuthenticated,
            14 => AuthFailed,
            16 => MalformedRequest,
            17 => UnknownOpcode,
            18 => FrameTooLarge,
            19 => UnsupportedVersion,
            20 => LockBusy,
            21 => LockNotHeld,
            22 => LockLost,
            23 => LockTableFull,
            24 => LockOwnerLimit,
            _ => return None,
        })
    }
}

/// A status other than OK, with its detail. Nothing changed on the server
/// when a request (or a multi-op item) answers with one of these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorStatus {
    /// The table id names no table on this server.
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLarge { len: u32, max: u32 },
    #[error("value of {len} bytes exceeds the maximum of {max}")]
    ValueTooLarge { len: u32, max: u32 },
    /// The object does not exist (a read, or a `doesnt_exist` reject rule).
    #[error("object does not exist")]
    ObjectDoesntExist,
    /// An `exists` reject rule: the object exists, with this version.
    #[error("object exists (version {version})")]
    ObjectExists { version: Version },
    /// A version reject rule failed; the object's current version.
    #[error("wrong version: the object's version is {version}")]
    WrongVersion { version: Version },
    #[error("value is not a decimal 64-bit integer (the counter format)")]
    NotAnInteger,
    #[error("increment overflows a 64-bit integer")]
    Overflow,
    #[error("out of memory: live data fills the server")]
    OutOfMemory,
    /// No table has the name given.
    #[error("unknown table name")]
    UnknownTableName,
    /// Not my tablet: refresh the tablet map and retry elsewhere.
    #[error("not my tablet: refresh the tablet map and retry")]
    UnknownTablet,
    /// The server cannot serve this now (recovering, busy); retry after
    /// the given delay.
    #[error("retry after {after_us} us")]
    Retry { after_us: u32 },
    /// The server has credentials and this connection has not logged in
    /// with an AUTH request; only PING and AUTH are served before it does.
    #[error("authentication required: send AUTH with a user and password first")]
    NotAuthenticated,
    /// An AUTH request's user and password do not log in (no such user, a
    /// wrong password, or a disabled user). The connection's state is unchanged.
    #[error("invalid user-password pair or user is disabled")]
    AuthFailed,
    /// The body could not be parsed; the message says why.
    #[error("malformed request: {0}")]
    MalformedRequest(String),
    #[error("unknown opcode")]
    UnknownOpcode,
    /// The request's body, or the response it asks for, exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge { len: u32, max: u32 },
    /// The frame's protocol version is not one the server speaks.
    #[error("unsupported protocol version")]
    UnsupportedVersion,
    /// CHUNK_LOCK: the lock cannot be granted now (held in a conflicting
    /// mode, others queued first, or the chunk's leases from before a
    /// crash recovery may still run): try again after the delay.
    #[error("chunk lock busy: try again in {after_us} us")]
    LockBusy { after_us: u32 },
    /// CHUNK_UNLOCK, CHUNK_RENEW, CHUNK_PUT_LOCKED: this server never
    /// granted that token (a wrong token, or a lock never taken).
    #[error("chunk lock not held: the server never granted this token")]
    LockNotHeld,
    /// CHUNK_UNLOCK, CHUNK_RENEW, CHUNK_PUT_LOCKED: the lock was granted
    /// with this token and is not held any more (its lease ran out, it was
    /// released, its chunk was removed, or its master was recovered after
    /// a crash); the token must not be used any more.
    #[error("chunk lock lost: its lease expired, it was released, its chunk was removed, or its master recovered")]
    LockLost,
    /// CHUNK_LOCK: the server's lock table holds its maximum of locks and
    /// waiters (`--chunk-lock-limit`).
    #[error("the server's chunk lock table is full ({limit} locks and waiters)")]
    LockTableFull { limit: u32 },
    /// CHUNK_LOCK: the requesting owner holds its maximum of locks and
    /// waiters on this server (`--chunk-lock-owner-limit`); other owners
    /// are not refused by it.
    #[error("this lock owner holds its maximum of chunk locks and waiting requests ({limit}); unlock some first")]
    LockOwnerLimit { limit: u32 },
}

impl ErrorStatus {
    pub fn code(&self) -> StatusCode {
        match self {
            ErrorStatus::UnknownTable(_) => StatusCode::UnknownTable,
            ErrorStatus::KeyTooLarge { .. } => StatusCode::KeyTooLarge,
            ErrorStatus::ValueTooLarge { .. } => StatusCode::ValueTooLarge,
            ErrorStatus::ObjectDoesntExist => StatusCode::ObjectDoesntExist,
            ErrorStatus::ObjectExists { .. } => StatusCode::ObjectExists,
            ErrorStatus::WrongVersion { .. } => StatusCode::WrongVersion,
            ErrorStatus::NotAnInteger => StatusCode::NotAnInteger,
            ErrorStatus::Overflow => StatusCode::Overflow,
            ErrorStatus::OutOfMemory => StatusCode::OutOfMemory,
            ErrorStatus::UnknownTableName => StatusCode::UnknownTableName,
            ErrorStatus::UnknownTablet => StatusCode::UnknownTablet,
            ErrorStatus::Retry { .. } => StatusCode::Retry,
            ErrorStatus::NotAuthenticated => StatusCode::NotAuthenticated,
            ErrorStatus::AuthFailed => StatusCode::AuthFailed,
            ErrorStatus::MalformedRequest(_) => StatusCode::MalformedRequest,
            ErrorStatus::UnknownOpcode => StatusCode::UnknownOpcode,
            ErrorStatus::FrameTooLarge { .. } => StatusCode::FrameTooLarge,
            ErrorStatus::UnsupportedVersion => StatusCode::UnsupportedVersion,
            ErrorStatus::LockBusy { .. } => StatusCode::LockBusy,
            ErrorStatus::LockNotHeld => StatusCode::LockNotHeld,
            ErrorStatus::LockLost => StatusCode::LockLost,
            ErrorStatus::LockTableFull { .. } => StatusCode::LockTableFull,
            ErrorStatus::LockOwnerLimit { .. } => StatusCode::LockOwnerLimit,
        }
    }

    /// Appends the status byte and its detail.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.code() as u8);
        match self {
            ErrorStatus::UnknownTable(t) => out.extend_from_slice(&t.0.to_le_bytes()),
            ErrorStatus::KeyTooLarge { len, max }
            | ErrorStatus::ValueTooLarge { len, max }
            | ErrorStatus::FrameTooLarge { len, max } => {
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&max.to_le_bytes());
            }
            ErrorStatus::ObjectExists { version } | ErrorStatus::WrongVersion { version } => {
                out.extend_from_slice(&version.0.to_le_bytes())
            }
            ErrorStatus::Retry { after_us } | ErrorStatus::LockBusy { after_us } => {
                out.extend_from_slice(&after_us.to_le_bytes())
            }
            ErrorStatus::LockTableFull { limit } | ErrorStatus::LockOwnerLimit { limit } => {
                out.extend_from_slice(&limit.to_le_bytes())
            }
            ErrorStatus::MalformedRequest(msg) => put_str16(out, msg),
            ErrorStatus::ObjectDoesntExist
            | ErrorStatus::NotAnInteger
            | ErrorStatus::Overflow
            | ErrorStatus::OutOfMemory
            | ErrorStatus::UnknownTableName
            | ErrorStatus::UnknownTablet
            | ErrorStatus::UnknownOpcode
            | ErrorStatus::UnsupportedVersion
            | ErrorStatus::NotAuthenticated
            | ErrorStatus::AuthFailed
            | ErrorStatus::LockNotHeld
            | ErrorStatus::LockLost => {}
        }
    }

    /// Reads a status byte and its detail: `Ok(None)` for OK.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Option<ErrorStatus>, DecodeError> {
        let code = StatusCode::from_u8(r.u8()?).ok_or(DecodeError::Malformed("unknown status code"))?;
        Ok(Some(match code {
            StatusCode::Ok => return Ok(None),
            StatusCode::UnknownTable => ErrorStatus::UnknownTable(TableId(r.u64()?)),
            StatusCode::KeyTooLarge => ErrorStatus::KeyTooLarge { len: r.u32()?, max: r.u32()? },
            StatusCode::ValueTooLarge => ErrorStatus::ValueTooLarge { len: r.u32()?, max: r.u32()? },
            StatusCode::FrameTooLarge => ErrorStatus::FrameTooLarge { len: r.u32()?, max: r.u32()? },
            StatusCode::ObjectDoesntExist => ErrorStatus::ObjectDoesntExist,
            StatusCode::ObjectExists => ErrorStatus::ObjectExists { version: Version(r.u64()?) },
            StatusCode::WrongVersion => ErrorStatus::WrongVersion { version: Version(r.u64()?) },
            StatusCode::NotAnInteger => ErrorStatus::NotAnInteger,
            StatusCode::Overflow => ErrorStatus::Overflow,
            StatusCode::OutOfMemory => ErrorStatus::OutOfMemory,
            StatusCode::UnknownTableName => ErrorStatus::UnknownTableName,
            StatusCode::UnknownTablet => ErrorStatus::UnknownTablet,
            StatusCode::Retry => ErrorStatus::Retry { after_us: r.u32()? },
            StatusCode::NotAuthenticated => ErrorStatus::NotAuthenticated,
            StatusCode::AuthFailed => ErrorStatus::AuthFailed,
            StatusCode::MalformedRequest => ErrorStatus::MalformedRequest(r.str16()?.to_owned()),
            StatusCode::UnknownOpcode => ErrorStatus::UnknownOpcode,
            StatusCode::UnsupportedVersion => ErrorStatus::UnsupportedVersion,
            StatusCode::LockBusy => ErrorStatus::LockBusy { after_us: r.u32()? },
            StatusCode::LockNotHeld => ErrorStatus::LockNotHeld,
            StatusCode::LockLost => ErrorStatus::LockLost,
            StatusCode::LockTableFull => ErrorStatus::LockTableFull { limit: r.u32()? },
            StatusCode::LockOwnerLimit => ErrorStatus::LockOwnerLimit { limit: r.u32()? },
        }))
    }
}
