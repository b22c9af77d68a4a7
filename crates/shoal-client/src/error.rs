//! Errors, one enum per operation family, and their mapping from wire
//! statuses. Statuses a family cannot produce become
//! [`ClientError::Refused`]; retryable statuses (`UNKNOWN_TABLET`, `RETRY`)
//! never reach these enums: the client absorbs them and retries, and only
//! reports [`ClientError::Unavailable`] when it gives up.

use shoal_proto::{ErrorStatus, TableId, Version};

/// Failures of the connection or the protocol, common to every operation.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The server closed the connection (requests in flight may or may not
    /// have been executed).
    #[error("connection closed by the server")]
    Closed,
    /// The server's bytes did not parse, or answered another operation.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server refused the request itself (malformed, unknown opcode,
    /// frame too large, unsupported version), or answered with a status this
    /// operation cannot have.
    #[error("server refused the request: {0}")]
    Refused(ErrorStatus),
    /// The server refused the configured credentials (no such user, wrong
    /// password, or user disabled).
    #[error("authentication failed: invalid user-password pair or user is disabled")]
    AuthFailed,
    /// The TLS handshake with the server failed (its certificate is not
    /// trusted or does not name it, it requires a client certificate, or
    /// it does not speak TLS).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The request would exceed the frame limit; it was not sent.
    #[error("request of {len} bytes exceeds the frame limit of {max}")]
    RequestTooLarge { len: usize, max: u32 },
    /// A multi-chunk write went to several servers and the request that
    /// carried this item failed (the first item of that request has the
    /// error itself); the other requests' items were applied or not, each
    /// as its own result says.
    #[error("the request carrying this item failed: {0}")]
    GroupFailed(String),
    /// The server kept answering "not my tablet" or "retry".
    #[error("gave up after {attempts} attempts, last status: {last}")]
    Unavailable { attempts: u32, last: ErrorStatus },
    /// The tablet map has no server for this key.
    #[error("no server in the tablet map for table {0}")]
    NoRoute(TableId),
    /// The coordinator could not be reached or gave no usable map.
    #[error("cluster: {0}")]
    Cluster(String),
}

/// A reject rule refused the operation; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("object does not exist")]
    DoesntExist,
    #[error("object exists (version {version})")]
    Exists { version: Version },
    #[error("wrong version: the object's version is {version}")]
    WrongVersion { version: Version },
}

impl Rejected {
    fn from_status(s: &ErrorStatus) -> Option<Rejected> {
        match s {
            ErrorStatus::ObjectDoesntExist => Some(Rejected::DoesntExist),
            ErrorStatus::ObjectExists { version } => Some(Rejected::Exists { version: *version }),
            ErrorStatus::WrongVersion { version } => Some(Rejected::WrongVersion { version: *version }),
            _ => None,
        }
    }
}

/// Errors of `read` and each `multi_read` item.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("object not found")]
    NotFound,
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLarge { len: u32, max: u32 },
    #[error("rejected: {0}")]
    Rejected(Rejected),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Errors of `write`, `remove` and each `multi_write`/`multi_remove` item.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLarge { len: u32, max: u32 },
    #[error("value of {len} bytes exceeds the maximum of {max}")]
    ValueTooLarge { len: u32, max: u32 },
    #[error("rejected: {0}")]
    Rejected(Rejected),
    #[error("server out of memory")]
    OutOfMemory,
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Errors of `increment`.
#[derive(Debug, thiserror::Error)]
pub enum IncrementError {
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLarge { len: u32, max: u32 },
    #[error("rejected: {0}")]
    Rejected(Rejected),
    #[error("value is not a decimal 64-bit integer (the counter format)")]
    NotAnInteger,
    #[error("increment overflows a 64-bit integer")]
    Overflow,
    #[error("server out of memory")]
    OutOfMemory,
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Errors of the stream operations (`docs/streams.md`).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    /// The server refused the request and said why: the table is not a
    /// stream, a streamlet, group or offset that does not exist, a batch
    /// or shape it cannot take, a name taken by another kind of table.
    #[error("{0}")]
    Invalid(String),
    #[error("server out of memory")]
    OutOfMemory,
    /// A read or commit of a group by a consumer instance that does not
    /// hold its lease (`LOCK_LOST`): its lease ran out and another
    /// instance took the group, the name is done with it, or the server
    /// recovered the streamlet since. Claim a group again.
    #[error("this consumer instance does not hold the group's lease any more; claim again")]
    NotHeld,
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl From<ErrorStatus> for StreamError {
    fn from(s: ErrorStatus) -> Self {
        match s {
            ErrorStatus::UnknownTable(t) => StreamError::UnknownTable(t),
            ErrorStatus::OutOfMemory => StreamError::OutOfMemory,
            ErrorStatus::MalformedRequest(why) => StreamError::Invalid(why),
            ErrorStatus::LockLost => StreamError::NotHeld,
            s => StreamError::Client(ClientError::Refused(s)),
        }
    }
}

impl From<TableError> for StreamError {
    fn from(e: TableError) -> Self {
        match e {
            TableError::UnknownTable(t) => StreamError::UnknownTable(t),
            TableError::UnknownTableName => StreamError::Invalid("no table has that name".into()),
            TableError::Client(c) => StreamError::Client(c),
        }
    }
}

/// Errors of the chunk lock operations (`docs/chunks.md`, "Locks").
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A try-lock found the lock held in a conflicting mode (or others
    /// queued first); the server suggests trying again after `after_us`.
    #[error("chunk lock busy")]
    Busy { after_us: u32 },
    /// A waiting lock was not granted before its timeout.
    #[error("timed out waiting for the chunk lock")]
    Timeout,
    /// The chunk does not exist (never created, or removed).
    #[error("chunk does not exist")]
    NotFound,
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    /// Unlock, renew or fenced put with a token the server never granted.
    #[error("chunk lock not held (the server never granted this token)")]
    NotHeld,
    /// Unlock, renew or fenced put of a lock that is not held any more: its
    /// lease ran out, it was released, its chunk was removed, or its master
    /// crashed and was recovered. Stop acting under it.
    #[error("chunk lock lost (lease expired, released, chunk removed, or master recovered)")]
    Lost,
    /// The server holds its maximum of locks and waiters.
    #[error("the server's chunk lock table is full ({limit} locks and waiters)")]
    TableFull { limit: u32 },
    /// This client's lock owner holds the server's maximum of locks and
    /// waiting requests per owner (`--chunk-lock-owner-limit`): unlock some.
    #[error("this lock owner holds its maximum of chunk locks and waiting requests ({limit}); unlock some first")]
    OwnerLimit { limit: u32 },
    /// The server refused the request and said why (the table is not a
    /// chunk table, the lock is held in the other mode, owner id 0).
    #[error("{0}")]
    Invalid(String),
    #[error("payload of {len} bytes exceeds the maximum of {max}")]
    ValueTooLarge { len: u32, max: u32 },
    #[error("server out of memory")]
    OutOfMemory,
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl From<ErrorStatus> for LockError {
    fn from(s: ErrorStatus) -> Self {
        match s {
            ErrorStatus::LockBusy { after_us } => LockError::Busy { after_us },
            ErrorStatus::LockNotHeld => LockError::NotHeld,
            ErrorStatus::LockLost => LockError::Lost,
            ErrorStatus::LockTableFull { limit } => LockError::TableFull { limit },
            ErrorStatus::LockOwnerLimit { limit } => LockError::OwnerLimit { limit },
            ErrorStatus::ObjectDoesntExist => LockError::NotFound,
            ErrorStatus::UnknownTable(t) => LockError::UnknownTable(t),
            ErrorStatus::MalformedRequest(why) => LockError::Invalid(why),
            ErrorStatus::ValueTooLarge { len, max } => LockError::ValueTooLarge { len, max },
            ErrorStatus::OutOfMemory => LockError::OutOfMemory,
            s => LockError::Client(ClientError::Refused(s)),
        }
    }
}

/// Errors of table management and enumeration.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("no table has that name")]
    UnknownTableName,
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl From<ErrorStatus> for ReadError {
    fn from(s: ErrorStatus) -> Self {
        match s {
            ErrorStatus::ObjectDoesntExist => ReadError::NotFound,
            ErrorStatus::UnknownTable(t) => ReadError::UnknownTable(t),
            ErrorStatus::KeyTooLarge { len, max } => ReadError::KeyTooLarge { len, max },
            s => match Rejected::from_status(&s) {
                Some(r) => ReadError::Rejected(r),
                None => ReadError::Client(ClientError::Refused(s)),
            },
        }
    }
}

impl From<ErrorStatus> for WriteError {
    fn from(s: ErrorStatus) -> Self {
        match s {
            ErrorStatus::UnknownTable(t) => WriteError::UnknownTable(t),
            ErrorStatus::KeyTooLarge { len, max } => WriteError::KeyTooLarge { len, max },
            ErrorStatus::ValueTooLarge { len, max } => WriteError::ValueTooLarge { len, max },
            ErrorStatus::OutOfMemory => WriteError::OutOfMemory,
            s => match Rejected::from_status(&s) {
                Some(r) => WriteError::Rejected(r),
                None => WriteError::Client(ClientError::Refused(s)),
            },
        }
    }
}

impl From<ErrorStatus> for IncrementError {
    fn from(s: ErrorStatus) -> Self {
        match s {
            ErrorStatus::UnknownTable(t) => IncrementError::UnknownTable(t),
            ErrorStatus::KeyTooLarge { len, max } => IncrementError::KeyTooLarge { len, max },
            ErrorStatus::NotAnInteger => IncrementError::NotAnInteger,
            ErrorStatus::Overflow => IncrementError::Overflow,
            ErrorStatus::OutOfMemory => IncrementError::OutOfMemory,
            s => match Rejected::from_status(&s) {
                Some(r) => IncrementError::Rejected(r),
                None => IncrementError::Client(ClientError::Refused(s)),
            },
        }
    }
}

impl From<ErrorStatus> for TableError {
    fn from(s: ErrorStatus) -> Self {
        match s {
            ErrorStatus::UnknownTableName => TableError::UnknownTableName,
            ErrorStatus::UnknownTable(t) => TableError::UnknownTable(t),
            s => TableError::Client(ClientError::Refused(s)),
        }
    }
}

impl From<ErrorStatus> for ClientError {
    fn from(s: ErrorStatus) -> Self {
        ClientError::Refused(s)
    }
}
