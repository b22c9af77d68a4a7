//! What the async and blocking clients share: owned result types, the
//! response frame, the conversion of each operation's response into its
//! typed result, and the routing and retry policy.

use crate::error::ClientError;
use shoal_proto::{
    decode_response, ChunkId, ErrorStatus, GroupClaim, Response, StatValue, StreamGroup, StreamOffset, StreamShape,
    TableId, UnixMillis, Version,
};
use std::time::Duration;

/// A response frame as received: its opcode and body, owned.
#[derive(Clone, Debug)]
pub struct ResponseFrame {
    pub request_id: u64,
    pub opcode: u8,
    pub body: Vec<u8>,
}

impl ResponseFrame {
    /// Parses the body: the outer error is a protocol error, the inner one
    /// the server's status.
    pub fn reply(&self) -> Result<Result<Response<'_>, ErrorStatus>, ClientError> {
        decode_response(self.opcode, &self.body).map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

/// One object returned by enumeration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub version: Version,
}

/// One page of an enumeration; `next` is `None` when the table is done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub objects: Vec<Object>,
    pub next: Option<u64>,
}

/// A value and its version, as reads return them.
pub type Versioned = (Vec<u8>, Version);

/// An object's expiry, as a TTL read finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttl {
    pub version: Version,
    /// When the object expires (wall-clock time); `None`: never.
    pub expires_at: Option<UnixMillis>,
    /// The time left until then by the server's clock; `None`: never expires.
    pub remaining: Option<Duration>,
}

/// A time to live as the wire carries it: whole milliseconds, rounded up,
/// at least 1.
pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX).max(1)
}

/// What a produce appended: its first record's offset and how many; the
/// records of one batch are consecutive in one stream segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Produced {
    pub first: StreamOffset,
    pub count: u32,
}

/// What a consume read: the records, where the next read of the group
/// starts, and whether the group is closed and read to its end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumed {
    pub records: Vec<Vec<u8>>,
    pub next: StreamOffset,
    pub end_of_group: bool,
}

/// A stream's shape and the groups of a streamlet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub shape: StreamShape,
    pub groups: Vec<StreamGroup>,
}

/// One result per item of a multi-op, each with its own status.
pub type ItemResults<T> = Vec<Result<T, ErrorStatus>>;

/// A server's statistics, in the order it sent them.
pub type Stats = Vec<(String, StatValue)>;

/// How many times a request is sent before the client gives up on
/// `UNKNOWN_TABLET`/`RETRY`, and the longest it sleeps between tries.
/// Attempts of one operation before it gives up: with retry delays of up
/// to `MAX_RETRY_DELAY`, up to about 20 s (a tablet being recovered after
/// its master crashed).
pub(crate) const MAX_ATTEMPTS: u32 = 200;
/// Wait before retrying a request whose server could not be reached.
pub(crate) const UNREACHABLE_DELAY: Duration = Duration::from_millis(50);
pub(crate) const MAX_RETRY_DELAY: Duration = Duration::from_millis(100);

/// What the client does with a status before the operation sees it.
pub(crate) enum Disposition {
    /// Not a retryable status: hand it to the operation.
    Final,
    /// Refresh the tablet map, then send again.
    RefreshAndRetry,
    /// Refresh the tablet map, wait, then send again.
    RefreshAfter(Duration),
    /// Wait, then send again.
    RetryAfter(Duration),
}

/// `named(t)` tells whether the client's map names table `t` (asked only
/// for `UNKNOWN_TABLE`; answer false once attempts are spent).
pub(crate) fn disposition(status: &ErrorStatus, named: impl FnOnce(TableId) -> bool) -> Disposition {
    match status {
        ErrorStatus::UnknownTablet => Disposition::RefreshAndRetry,
        // A cluster member whose map is older than the client's: the table
        // was created since it last heard from the coordinator. Retried
        // while a fresh map still names the table, paced: the member's map
        // may lag by hundreds of milliseconds on a loaded machine, and 200
        // attempts back to back last less than that.
        ErrorStatus::UnknownTable(t) if named(*t) => Disposition::RefreshAfter(UNREACHABLE_DELAY),
        ErrorStatus::Retry { after_us } => {
            Disposition::RetryAfter(Duration::from_micros(u64::from(*after_us)).min(MAX_RETRY_DELAY))
        }
        _ => Disposition::Final,
    }
}

/// What one round of a multi-op learned: the items to send again, and
/// whether to refresh the tablet map or wait first.
pub(crate) struct Retries<'a> {
    /// Whether the map the items were routed by names each table
    /// ([`TabletMap::per_table`]): then it names every item's table, since
    /// every item was routed by it.
    pub per_table: bool,
    pub pending: &'a mut Vec<usize>,
    pub refresh: bool,
    pub delay: Option<Duration>,
}

impl Retries<'_> {
    /// Files item `i`'s result: a retryable status queues the item and is
    /// returned (the last one is reported if attempts run out); any other
    /// result is final.
    pub fn sort<T>(
        &mut self,
        i: usize,
        r: Result<T, ErrorStatus>,
        results: &mut [Option<Result<T, ErrorStatus>>],
    ) -> Option<ErrorStatus> {
        match r {
            Err(s) => match disposition(&s, |_| self.per_table) {
                Disposition::Final => {
                    results[i] = Some(Err(s));
                    None
                }
                Disposition::RefreshAndRetry => {
                    self.refresh = true;
                    self.pending.push(i);
                    Some(s)
                }
                Disposition::RetryAfter(d) => {
                    self.delay = Some(d);
                    self.pending.push(i);
                    Some(s)
                }
                Disposition::RefreshAfter(d) => {
                    self.refresh = true;
                    self.delay = Some(d);
                    self.pending.push(i);
                    Some(s)
                }
            },
            ok => {
                results[i] = Some(ok);
                None
            }
        }
    }
}

fn mismatch(r: &Response<'_>) -> ClientError {
    ClientError::Protocol(format!("unexpected response to the request: {:?}", r.opcode()))
}

/// Conversions of an OK response into each operation's result. A response
/// of the wrong kind is a protocol error.
pub(crate) mod conv {
    use super::*;
    use shoal_proto::TableId;

    pub fn ping(r: Response<'_>) -> Result<(), ClientError> {
        match r {
            Response::Ping => Ok(()),
            r => Err(mismatch(&r)),
        }
    }

    pub fn read(r: Response<'_>) -> Result<Versioned, ClientError> {
        match r {
            Response::Read { version, value } => Ok((value.to_vec(), version)),
            r => Err(mismatch(&r)),
        }
    }

    pub fn write(r: Response<'_>) -> Result<Version, ClientError> {
        match r {
            Response::Write { version } | Response::WriteTtl { version } => Ok(version),
            r => Err(mismatch(&r)),
        }
    }

    pub fn ttl(r: Response<'_>) -> Result<Ttl, ClientError> {
        match r {
            Response::ReadTtl { version, expires_at, ttl_ms } => {
                Ok(Ttl { version, expires_at, remaining: expires_at.map(|_| Duration::from_millis(ttl_ms)) })
            }
            r => Err(mismatch(&r)),
        }
    }

    pub fn remove(r: Response<'_>) -> Result<Option<Version>, ClientError> {
        match r {
            Response::Remove { version } => Ok(version),
            r => Err(mismatch(&r)),
        }
    }

    pub fn increment(r: Response<'_>) -> Result<(i64, Version), ClientError> {
        match r {
            Response::Increment { value, version } => Ok((value, version)),
            r => Err(mismatch(&r)),
        }
    }

    pub fn enumerate(r: Response<'_>) -> Result<Page, ClientError> {
        match r {
            Response::Enumerate { objects, next } => Ok(Page {
                objects: objects
                    .into_iter()
                    .map(|o| Object { key: o.key.to_vec(), value: o.value.to_vec(), version: o.version })
                    .collect(),
                next,
            }),
            r => Err(mismatch(&r)),
        }
    }

    pub fn table_id(r: Response<'_>) -> Result<TableId, ClientError> {
        match r {
            Response::CreateTable { table } | Response::GetTableId { table } | Response::CreateChunkTable { table } => {
                Ok(table)
            }
            r => Err(mismatch(&r)),
        }
    }

    pub fn drop_table(r: Response<'_>) -> Result<(), ClientError> {
        match r {
            Response::DropTable => Ok(()),
            r => Err(mismatch(&r)),
        }
    }

    pub fn stats(r: Response<'_>) -> Result<Stats, ClientError> {
        match r {
            Response::Stats(s) => Ok(s.into_iter().map(|s| (s.name.into_owned(), s.value)).collect()),
            r => Err(mismatch(&r)),
        }
    }

    /// Multi-op items, each with its own status, checked for count.
    pub fn multi_read(r: Response<'_>, n: usize) -> Result<ItemResults<Versioned>, ClientError> {
        match r {
            Response::MultiRead(items) if items.len() == n => {
                Ok(items.into_iter().map(|i| i.map(|(v, value)| (value.to_vec(), v))).collect())
            }
            r => Err(mismatch(&r)),
        }
    }

    pub fn multi_write(r: Response<'_>, n: usize) -> Result<Vec<Result<Version, ErrorStatus>>, ClientError> {
        match r {
            Response::MultiWrite(items) if items.len() == n => Ok(items),
            r => Err(mismatch(&r)),
        }
    }

    /// CHUNK_CREATE: one id per payload sent.
    pub fn chunk_create(r: Response<'_>, n: usize) -> Result<Vec<ChunkId>, ClientError> {
        match r {
            Response::ChunkCreate(ids) if ids.len() == n => Ok(ids),
            r => Err(mismatch(&r)),
        }
    }

    pub fn chunk_get(r: Response<'_>, n: usize) -> Result<ItemResults<Versioned>, ClientError> {
        match r {
            Response::ChunkGet(items) if items.len() == n => {
                Ok(items.into_iter().map(|i| i.map(|(v, value)| (value.to_vec(), v))).collect())
            }
            r => Err(mismatch(&r)),
        }
    }

    /// CHUNK_PUT (new versions) and CHUNK_REMOVE (versions the chunks had).
    pub fn chunk_versions(r: Response<'_>, n: usize) -> Result<ItemResults<Version>, ClientError> {
        match r {
            Response::ChunkPut(items) | Response::ChunkRemove(items) if items.len() == n => Ok(items),
            r => Err(mismatch(&r)),
        }
    }

    pub fn create_stream(r: Response<'_>) -> Result<(TableId, StreamShape), ClientError> {
        match r {
            Response::CreateStream { table, shape } => Ok((table, shape)),
            r => Err(mismatch(&r)),
        }
    }

    /// PRODUCE: as many records as were sent.
    pub fn produce(r: Response<'_>, n: usize) -> Result<Produced, ClientError> {
        match r {
            Response::Produce { first, count } if count as usize == n => Ok(Produced { first, count }),
            r => Err(mismatch(&r)),
        }
    }

    pub fn consume(r: Response<'_>) -> Result<Consumed, ClientError> {
        match r {
            Response::Consume { next, end_of_group, records }
            | Response::ConsumeClaimed { next, end_of_group, records } => {
                Ok(Consumed { records: records.into_iter().map(<[u8]>::to_vec).collect(), next, end_of_group })
            }
            r => Err(mismatch(&r)),
        }
    }

    pub fn claim_group(r: Response<'_>) -> Result<Option<GroupClaim>, ClientError> {
        match r {
            Response::ClaimGroup(c) => Ok(c),
            r => Err(mismatch(&r)),
        }
    }

    pub fn commit_group(r: Response<'_>) -> Result<bool, ClientError> {
        match r {
            Response::CommitGroup { done } => Ok(done),
            r => Err(mismatch(&r)),
        }
    }

    pub fn describe_stream(r: Response<'_>) -> Result<Described, ClientError> {
        match r {
            Response::DescribeStream { shape, groups } => Ok(Described { shape, groups }),
            r => Err(mismatch(&r)),
        }
    }

    pub fn multi_remove(r: Response<'_>, n: usize) -> Result<Vec<Result<Option<Version>, ErrorStatus>>, ClientError> {
        match r {
            Response::MultiRemove(items) if items.len() == n => Ok(items),
            r => Err(mismatch(&r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tablet::{Tablet, TabletMap};

    #[test]
    fn an_unknown_table_is_retried_only_where_the_clients_map_names_it() {
        let addr = "127.0.0.1:1".parse().unwrap();
        let cluster = TabletMap::new(
            vec![Tablet { table: Some(TableId(7)), start_hash: 0, end_hash: u64::MAX, server: addr }],
            addr,
        );
        let single = TabletMap::single(addr);
        let unknown = |t| ErrorStatus::UnknownTable(TableId(t));
        // A server behind the coordinator: the client's map has the table.
        assert!(matches!(disposition(&unknown(7), |t| cluster.names_table(t)), Disposition::RefreshAfter(_)));
        assert!(matches!(disposition(&unknown(8), |t| cluster.names_table(t)), Disposition::Final));
        assert!(matches!(disposition(&unknown(7), |t| single.names_table(t)), Disposition::Final));
        assert!(matches!(disposition(&unknown(7), |_| false), Disposition::Final));
        assert!(cluster.per_table() && !single.per_table());
    }
}
