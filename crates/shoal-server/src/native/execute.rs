//! Applying native requests to the store: each [`Request`] becomes store
//! (or table registry) calls, and the result is encoded as its response
//! frame. Decoding and framing live in `shoal-proto`; this file is the only
//! place where the native protocol meets the store.

use crate::chunklocks::{LockError, Now};
use crate::cluster::Route;
use crate::context::{Durability, ServerContext, ServerStats, TableError};
use crate::subscriptions::AssignError;
use shoal_common::{streamlet_key, ChunkId};
use shoal_engine::format::chunk_key;
use shoal_engine::{
    key_hash, EnumCursor, Expiry, KeyHash, RejectRules, Store, StoreError, StoreStats, StreamError, StreamShape,
    TableId, WriteOp,
};
use shoal_proto::{
    encode_error, DecodeError, ErrorStatus, GroupClaim, Header, Object, Opcode, Request, Response, Stat, StatValue,
    StreamGroup, StreamOffset, Version, MAX_DESCRIBE_GROUPS,
};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// Objects an ENUMERATE returns when the request asks for 0 (the default),
/// and the most it returns whatever it asks for.
const DEFAULT_ENUMERATE_COUNT: u32 = 1000;
const MAX_ENUMERATE_COUNT: u32 = 100_000;
/// An ENUMERATE response stops taking more hash buckets past this many
/// bytes of keys and values.
const ENUMERATE_BYTES: usize = 1 << 20;

/// Per-connection scratch space reused between requests.
#[derive(Default)]
pub struct Scratch {
    value: Vec<u8>,
    values: Vec<u8>,
    /// A request since the last reset read or wrote stored data: its reply
    /// waits until the log is durable (a read must not show what a crash
    /// could still lose; see `ServerContext::wait_durable`) and needs the
    /// lease (`ServerContext::lease_held`).
    pub touched: bool,
    /// What the replies since the last reset wait for, when `touched`.
    pub durable: Durability,
    /// An AUTH request of this connection logged it in.
    authenticated: bool,
    /// The connection is in clear text on a TLS port: only PING is served.
    pub ping_only: bool,
}

impl Scratch {
    /// Drops buffers that a large request grew.
    pub fn trim(&mut self) {
        for b in [&mut self.value, &mut self.values] {
            if b.capacity() > 1 << 20 {
                *b = Vec::new();
            }
        }
    }
}

/// Executes the request framed by `header` and `body`, appending exactly
/// one response frame to `out`. `max_response` bounds the body of responses
/// whose size the request does not fix (multi-read, enumerate). Returns
/// whether the request failed: its response is an error other than a
/// missing object or a reject rule's verdict.
pub fn execute(
    ctx: &ServerContext,
    header: &Header,
    body: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
    max_response: usize,
) -> bool {
    ServerStats::add(&ctx.stats.commands, 1);
    let id = header.request_id;
    if header.flags != 0 {
        ServerStats::add(&ctx.stats.protocol_errors, 1);
        let e = ErrorStatus::MalformedRequest("request flags must be zero".into());
        encode_error(out, id, header.opcode, &e);
        return true;
    }
    // A connection in clear text on a TLS port is served PING only.
    if scratch.ping_only && Opcode::from_u8(header.opcode) != Some(Opcode::Ping) {
        let e = ErrorStatus::MalformedRequest("this port speaks TLS; in clear text it answers PING only".into());
        encode_error(out, id, header.opcode, &e);
        return true;
    }
    // Before logging in, only PING (so that failure detectors need no
    // credentials) and AUTH are even decoded.
    if !scratch.authenticated
        && ctx.auth.required()
        && !matches!(Opcode::from_u8(header.opcode), Some(Opcode::Ping | Opcode::Auth))
    {
        encode_error(out, id, header.opcode, &ErrorStatus::NotAuthenticated);
        return true;
    }
    let req = match Request::decode(header.opcode, body) {
        Ok(r) => r,
        Err(e) => {
            ServerStats::add(&ctx.stats.protocol_errors, 1);
            let status = match e {
                DecodeError::UnknownOpcode(_) => ErrorStatus::UnknownOpcode,
                DecodeError::Malformed(why) => ErrorStatus::MalformedRequest(why.into()),
            };
            encode_error(out, id, header.opcode, &status);
            return true;
        }
    };
    let (touched_before, durable_before) = (scratch.touched, scratch.durable);
    // From routing to the end of the store operation (`ClusterNode::serving`).
    let serving = ctx.cluster.as_ref().map(|n| n.serving());
    let applied = apply(ctx, req, scratch, max_response);
    drop(serving);
    match applied {
        Ok(resp) => {
            resp.encode(id, out);
            false
        }
        Err(status) => {
            // Refused by routing (not this server's key or table, or no
            // lease or a recovery yet): no stored data was read or
            // written, so the refusal goes out whatever the lease (a
            // connection whose first request came before the server's
            // first lease was closed, failing a write that had changed
            // nothing).
            if matches!(status, ErrorStatus::Retry { .. } | ErrorStatus::UnknownTablet | ErrorStatus::UnknownTable(_)) {
                scratch.touched = touched_before;
                scratch.durable = durable_before;
            }
            // A missing object or a reject rule's verdict is an answer, not a failure.
            let answer = matches!(
                status,
                ErrorStatus::ObjectDoesntExist
                    | ErrorStatus::ObjectExists { .. }
                    | ErrorStatus::WrongVersion { .. }
                    | ErrorStatus::LockBusy { .. }
            );
            encode_error(out, id, header.opcode, &status);
            !answer
        }
    }
}

/// What a read's reply waits for: a present object, its key's last write;
/// anything else (a miss may be a removal still replicating, or an
/// eviction; a refusal by reject rules saw a version), the whole log.
fn wait_for_read(store: &Store, need: &mut Durability, table: TableId, key: &[u8], found: bool) {
    if found {
        need.key(store.write_position(table, key));
    } else {
        need.log_end();
    }
}

fn apply<'s>(
    ctx: &ServerContext,
    req: Request<'_>,
    scratch: &'s mut Scratch,
    max_response: usize,
) -> Result<Response<'s>, ErrorStatus> {
    let store = &ctx.store;
    // Table operations go to the coordinator; PING, AUTH and STATS read no
    // object. A multi-op touches stored data only if one of its items is
    // this server's to serve (set below): one whose every item is refused
    // by routing (e.g. sent before this server's first lease) changed
    // nothing, and its per-item refusals must reach the client.
    if !matches!(
        req,
        Request::Ping
            | Request::Auth { .. }
            | Request::Stats
            | Request::ScFilter
            | Request::CreateTable { .. }
            | Request::DropTable { .. }
            | Request::GetTableId { .. }
            | Request::CreateChunkTable { .. }
            | Request::CreateStream { .. }
            | Request::MultiRead(_)
            | Request::MultiWrite(_)
            | Request::MultiRemove(_)
    ) {
        scratch.touched = true;
        // A read of a present object waits for its key's last write only
        // (set below); everything else for the whole log applied so far.
        if !matches!(req, Request::Read { .. }) {
            scratch.durable.log_end();
        }
    }
    Ok(match req {
        Request::Ping => Response::Ping,
        Request::Auth { user, password } => {
            if !ctx.auth.authenticate(user, password) {
                return Err(ErrorStatus::AuthFailed);
            }
            scratch.authenticated = true;
            Response::Auth
        }
        Request::Read { table, key, rules } => {
            if let Some(sc) = ctx.cluster.as_ref().and_then(|n| n.sc.as_ref()) {
                sc.sample(table, key);
            }
            if let Err(e) = reader(ctx, table, key) {
                // A hot key of another member of this server's group: its copy.
                return match cached_read(ctx, table, key, rules, &mut scratch.value) {
                    Some(Ok(version)) => {
                        ServerStats::add(&ctx.stats.keyspace_hits, 1);
                        Ok(Response::Read { version, value: &scratch.value })
                    }
                    Some(Err(status)) => Err(status),
                    None => Err(e),
                };
            }
            let read = store.read_into(table, key, rules, &mut scratch.value);
            wait_for_read(store, &mut scratch.durable, table, key, read.is_ok());
            let version = read.map_err(status_of)?;
            ServerStats::add(&ctx.stats.keyspace_hits, 1);
            Response::Read { version, value: &scratch.value }
        }
        Request::Write { table, key, value, rules } => {
            if let Some(sc) = ctx.cluster.as_ref().and_then(|n| n.sc.as_ref()) {
                sc.sample(table, key);
            }
            owner(ctx, table, key)?;
            Response::Write { version: store.write(table, key, value, rules).map_err(status_of)? }
        }
        Request::WriteTtl { table, key, value, rules, ttl_ms } => {
            owner(ctx, table, key)?;
            let expiry = Expiry::At(store.now().plus_ms(ttl_ms));
            Response::WriteTtl {
                version: store.write_with_expiry(table, key, value, rules, expiry).map_err(status_of)?,
            }
        }
        Request::ReadTtl { table, key, rules } => {
            reader(ctx, table, key)?;
            let meta = store.meta(table, key, rules).map_err(status_of)?;
            let ttl_ms = meta.expiry.map_or(0, |at| at.ms_since(store.now()));
            Response::ReadTtl { version: meta.version, expires_at: meta.expiry, ttl_ms }
        }
        Request::Remove { table, key, rules } => {
            owner(ctx, table, key)?;
            Response::Remove { version: store.remove(table, key, rules).map_err(status_of)? }
        }
        Request::Increment { table, key, delta, rules } => {
            owner(ctx, table, key)?;
            let (value, version) = store.increment(table, key, delta, rules).map_err(status_of)?;
            Response::Increment { value, version }
        }
        Request::MultiRead(items) => {
            // Values go one after another into one buffer; the response
            // is refused before it outgrows the limit.
            let buf = &mut scratch.values;
            buf.clear();
            let mut results: Vec<Result<(Version, std::ops::Range<usize>), ErrorStatus>> =
                Vec::with_capacity(items.len());
            for it in &items {
                let start = buf.len();
                let r = reader(ctx, it.table, it.key).and_then(|()| {
                    scratch.touched = true;
                    let read = store.read_into(it.table, it.key, RejectRules::default(), &mut scratch.value);
                    wait_for_read(store, &mut scratch.durable, it.table, it.key, read.is_ok());
                    read.map_err(status_of)
                });
                results.push(match r {
                    Ok(v) => {
                        buf.extend_from_slice(&scratch.value);
                        Ok((v, start..buf.len()))
                    }
                    Err(e) => Err(e),
                });
                let size = buf.len() + results.len() * 13;
                if size > max_response {
                    return Err(ErrorStatus::FrameTooLarge { len: sat32(size), max: sat32(max_response) });
                }
            }
            let buf = &scratch.values;
            Response::MultiRead(results.into_iter().map(|r| r.map(|(v, range)| (v, &buf[range]))).collect())
        }
        Request::MultiWrite(items) => {
            let checks: Vec<Result<(), ErrorStatus>> = items.iter().map(|w| owner(ctx, w.table, w.key)).collect();
            if checks.iter().any(Result::is_ok) {
                scratch.touched = true;
                scratch.durable.log_end();
            }
            let ops: Vec<WriteOp<'_>> = items
                .iter()
                .zip(&checks)
                .filter(|(_, c)| c.is_ok())
                .map(|(w, _)| WriteOp::new(w.table, w.key, w.value, w.rules))
                .collect();
            let mut done = store.multi_write(&ops).into_iter();
            Response::MultiWrite(
                checks
                    .into_iter()
                    .map(|c| c.and_then(|()| done.next().expect("one result per op").map_err(status_of)))
                    .collect(),
            )
        }
        Request::MultiRemove(items) => {
            let checks: Vec<Result<(), ErrorStatus>> = items.iter().map(|r| owner(ctx, r.table, r.key)).collect();
            if checks.iter().any(Result::is_ok) {
                scratch.touched = true;
                scratch.durable.log_end();
            }
            let ops: Vec<_> =
                items.iter().zip(&checks).filter(|(_, c)| c.is_ok()).map(|(r, _)| (r.table, r.key, r.rules)).collect();
            let mut done = store.multi_remove(&ops).into_iter();
            Response::MultiRemove(
                checks
                    .into_iter()
                    .map(|c| c.and_then(|()| done.next().expect("one result per op").map_err(status_of)))
                    .collect(),
            )
        }
        Request::Enumerate { table, cursor, max_count } => {
            let want = match max_count {
                0 => DEFAULT_ENUMERATE_COUNT,
                n => n.min(MAX_ENUMERATE_COUNT),
            } as usize;
            let budget = ENUMERATE_BYTES.min(max_response);
            // In a cluster the cursor (a key-hash position) names a tablet of
            // this server; the enumeration stops at its end, and the next
            // cursor is the next tablet's first hash, wherever it is served.
            let end = match &ctx.cluster {
                Some(node) => match node.local_tablet_end(table, KeyHash(cursor)) {
                    Ok(end) => end,
                    Err(Route::Recovering | Route::Moving) => {
                        return Err(ErrorStatus::Retry { after_us: RECOVERING_RETRY_US })
                    }
                    Err(_) => return Err(ErrorStatus::UnknownTablet),
                },
                None => u64::MAX,
            };
            // Keys and values go straight into the scratch buffer (they must
            // outlive this call), laid out key then value.
            let buf = &mut scratch.values;
            buf.clear();
            let mut spans: Vec<(usize, usize, usize, Version)> = Vec::new();
            let mut bytes = 0;
            let mut next = Some(EnumCursor(cursor));
            while let Some(c) = next {
                if spans.len() >= want || bytes >= budget {
                    break;
                }
                let n = store
                    .enumerate_range(table, c, end, (want - spans.len()).min(64), |key, value, version| {
                        bytes += key.len() + value.len() + 16;
                        spans.push((buf.len(), key.len(), value.len(), version));
                        buf.extend_from_slice(key);
                        buf.extend_from_slice(value);
                    })
                    .map_err(status_of)?;
                next = n;
                if next.is_none() && end != u64::MAX {
                    // The tablet's end: the next tablet, wherever it is served.
                    next = Some(EnumCursor(end + 1));
                    break;
                }
            }
            if bytes > max_response {
                return Err(ErrorStatus::FrameTooLarge { len: sat32(bytes), max: sat32(max_response) });
            }
            let buf = &scratch.values;
            Response::Enumerate {
                objects: spans
                    .into_iter()
                    .map(|(k, kl, vl, version)| Object {
                        key: &buf[k..k + kl],
                        value: &buf[k + kl..k + kl + vl],
                        version,
                    })
                    .collect(),
                next: next.map(|c| c.0),
            }
        }
        Request::CreateTable { name } => {
            Response::CreateTable { table: ctx.tables.create(name).map_err(table_status)? }
        }
        Request::DropTable { name } => match ctx.tables.drop_table(name).map_err(table_status)? {
            true => Response::DropTable,
            false => return Err(ErrorStatus::UnknownTableName),
        },
        Request::GetTableId { name } => {
            Response::GetTableId { table: ctx.tables.lookup(name).ok_or(ErrorStatus::UnknownTableName)? }
        }
        Request::Stats => Response::Stats(stats(ctx)),
        Request::ScFilter => {
            let (epoch, bloom) = match ctx.cluster.as_ref().and_then(|n| n.sc.as_ref()) {
                Some(sc) => sc.filter(),
                None => Default::default(),
            };
            scratch.value.clear();
            scratch.value.extend_from_slice(&bloom);
            Response::ScFilter { membership: epoch.membership, round: epoch.round.0, bloom: &scratch.value }
        }
        Request::CreateChunkTable { name } => {
            Response::CreateChunkTable { table: ctx.tables.create_chunk_table(name).map_err(table_status)? }
        }
        Request::ChunkCreate { table, payloads } => {
            chunk_table(ctx, table, ChunkRoute::Create)?;
            let node = chunk_node(ctx)?;
            Response::ChunkCreate(store.create_chunks(table, node, &payloads).map_err(status_of)?)
        }
        Request::ChunkGet { table, ids } => {
            chunk_table(ctx, table, ChunkRoute::Reads(&mut ids.iter().copied()))?;
            // Payloads go one after another into one buffer; the response
            // is refused before it outgrows the limit.
            let buf = &mut scratch.values;
            buf.clear();
            let mut results: Vec<Result<(Version, std::ops::Range<usize>), ErrorStatus>> =
                Vec::with_capacity(ids.len());
            for id in &ids {
                let start = buf.len();
                let got = store.get_chunk_into(table, *id, &mut scratch.value);
                wait_for_read(store, &mut scratch.durable, table, &chunk_key(*id), got.is_ok());
                let r = got.map_err(status_of);
                results.push(r.map(|v| {
                    buf.extend_from_slice(&scratch.value);
                    (v, start..buf.len())
                }));
                let size = buf.len() + results.len() * 13;
                if size > max_response {
                    return Err(ErrorStatus::FrameTooLarge { len: sat32(size), max: sat32(max_response) });
                }
            }
            let buf = &scratch.values;
            Response::ChunkGet(results.into_iter().map(|r| r.map(|(v, range)| (v, &buf[range]))).collect())
        }
        Request::ChunkPut { table, items } => {
            chunk_table(ctx, table, ChunkRoute::Ids(&mut items.iter().map(|i| i.0)))?;
            Response::ChunkPut(
                store.multi_put_chunks(table, &items).into_iter().map(|r| r.map_err(status_of)).collect(),
            )
        }
        Request::ChunkRemove { table, ids } => {
            chunk_table(ctx, table, ChunkRoute::Ids(&mut ids.iter().copied()))?;
            // Removing a chunk releases its locks (the store tells the lock
            // table, `ServerContext::new`), before its id can be reused.
            let removed = store.multi_remove_chunks(table, &ids);
            Response::ChunkRemove(removed.into_iter().map(|r| r.map_err(status_of)).collect())
        }
        Request::ChunkLock { table, chunk, owner, mode, wait, lease_ms } => {
            chunk_table(ctx, table, ChunkRoute::Ids(&mut std::iter::once(chunk)))?;
            // Only live chunks are locked, and the chunk stays live until
            // the grant is recorded (under its stripe lock): a lock never
            // outlives its chunk to be found on a new chunk of the same id.
            let lease = Duration::from_millis(lease_ms.into());
            let g = store
                .with_chunk(table, chunk, |live| match live {
                    true => ctx.locks.lock(table, chunk, owner, mode, lease, wait, Now::clock()).map_err(lock_status),
                    false => Err(ErrorStatus::ObjectDoesntExist),
                })
                .map_err(status_of)??;
            Response::ChunkLock { token: g.token, lease_ms: sat32(g.lease.as_millis() as usize) }
        }
        Request::ChunkUnlock { table, chunk, owner, token } => {
            chunk_table(ctx, table, ChunkRoute::Ids(&mut std::iter::once(chunk)))?;
            ctx.locks.unlock(table, chunk, owner, token, Now::clock()).map_err(lock_status)?;
            Response::ChunkUnlock
        }
        Request::ChunkRenew { table, chunk, owner, token, lease_ms } => {
            chunk_table(ctx, table, ChunkRoute::Ids(&mut std::iter::once(chunk)))?;
            let lease = Duration::from_millis(lease_ms.into());
            let granted = ctx.locks.renew(table, chunk, owner, token, lease, Now::clock()).map_err(lock_status)?;
            Response::ChunkRenew { lease_ms: sat32(granted.as_millis() as usize) }
        }
        Request::ChunkPutLocked { table, chunk, owner, token, payload } => {
            chunk_table(ctx, table, ChunkRoute::Ids(&mut std::iter::once(chunk)))?;
            // The check runs under the chunk's stripe lock just before the
            // append: no other owner can be granted the chunk in between.
            let put = store
                .put_chunk_if(table, chunk, payload, || {
                    ctx.locks.check_exclusive(table, chunk, owner, token, Now::clock())
                })
                .map_err(lock_status)?;
            Response::ChunkPutLocked { version: put.map_err(status_of)? }
        }
        Request::CreateStream { name, shape } => {
            let shape = stream_defaults(ctx, shape);
            let table = ctx.tables.create_stream(name, shape).map_err(table_status)?;
            Response::CreateStream { table, shape: store.stream_shape(table).map_err(stream_status)? }
        }
        Request::Produce { table, streamlet, producer, records } => {
            stream_table(ctx, table, streamlet)?;
            let p = store.produce(table, streamlet, producer, &records).map_err(stream_status)?;
            Response::Produce { first: p.first, count: p.count }
        }
        Request::Consume { table, streamlet, from, max_bytes } => {
            stream_table(ctx, table, streamlet)?;
            let (next, end_of_group, records) =
                read_group(store, (table, streamlet), from, max_bytes, scratch, max_response)?;
            Response::Consume { next, end_of_group, records }
        }
        Request::ClaimGroup(who) => {
            stream_table(ctx, who.table, who.streamlet)?;
            // Leases are kept only for streamlets that exist.
            store.stream_trimmed(who.table, who.streamlet).map_err(stream_status)?;
            let lease = Duration::from_millis(who.lease_ms.into());
            let (table, streamlet) = (who.table, who.streamlet);
            let claim =
                ctx.subscriptions.claim(table, streamlet, who.name, who.instance, lease, Instant::now(), || {
                    let cursors = store.consumer_cursors(table, streamlet, who.name).map_err(stream_status)?;
                    store.consumer_heads(table, streamlet, &cursors).map_err(stream_status)
                })?;
            Response::ClaimGroup(claim.map(|c| GroupClaim {
                log: c.log,
                from: c.from,
                lease_ms: sat32(c.lease.as_millis() as usize),
            }))
        }
        Request::ConsumeClaimed { who, from, max_bytes } => {
            stream_table(ctx, who.table, who.streamlet)?;
            let lease = Duration::from_millis(who.lease_ms.into());
            let subs = &ctx.subscriptions;
            // Checked (and renewed) under the streamlet's lock, read outside
            // it, so instances' reads do not wait for each other: a read
            // racing its lease's expiry returns records that the next
            // holder reads too, from the last commit, as it would anyway.
            let now = Instant::now();
            let renew = || Ok::<_, ErrorStatus>(((), false));
            subs.holding(who.table, who.streamlet, who.name, who.instance, from.group, lease, now, false, renew)?;
            let (next, end_of_group, records) =
                read_group(store, (who.table, who.streamlet), from, max_bytes, scratch, max_response)?;
            Response::ConsumeClaimed { next, end_of_group, records }
        }
        Request::CommitGroup { who, at, release } => {
            stream_table(ctx, who.table, who.streamlet)?;
            let lease = Duration::from_millis(who.lease_ms.into());
            let subs = &ctx.subscriptions;
            let done = subs.holding(
                who.table,
                who.streamlet,
                who.name,
                who.instance,
                at.group,
                lease,
                Instant::now(),
                release,
                || {
                    let c = store.commit_consumer(who.table, who.streamlet, who.name, at).map_err(stream_status)?;
                    Ok::<_, ErrorStatus>((c.done, c.done))
                },
            )?;
            Response::CommitGroup { done }
        }
        Request::DescribeStream { table, streamlet, from_group, max_groups } => {
            stream_table(ctx, table, streamlet)?;
            // 33 bytes a group: the reply stays within the response limit.
            let fit = max_response.saturating_sub(64) / 33;
            let max = (max_groups.min(MAX_DESCRIBE_GROUPS) as usize).min(fit);
            let groups = store.stream_groups(table, streamlet, from_group, max).map_err(stream_status)?;
            Response::DescribeStream {
                shape: store.stream_shape(table).map_err(stream_status)?,
                groups: groups
                    .into_iter()
                    .map(|g| StreamGroup {
                        id: g.id,
                        log: g.log,
                        segments: g.segments,
                        records: g.records,
                        bytes: g.bytes,
                        closed: g.closed,
                    })
                    .collect(),
            }
        }
    })
}

/// CONSUME's read: records of one group from `from`, into the
/// connection's scratch buffer. The reply (21 bytes and the records, 4
/// bytes of length each) stays within the response limit, unless one
/// record alone exceeds it.
fn read_group<'s>(
    store: &Store,
    (table, streamlet): (TableId, u32),
    from: StreamOffset,
    max_bytes: u32,
    scratch: &'s mut Scratch,
    max_response: usize,
) -> Result<(StreamOffset, bool, Vec<&'s [u8]>), ErrorStatus> {
    let max = (max_bytes as usize).min(max_response.saturating_sub(64));
    let buf = &mut scratch.values;
    buf.clear();
    let mut ends = Vec::new();
    let c = store
        .consume(table, streamlet, from, max, |r| {
            buf.extend_from_slice(r);
            ends.push(buf.len());
        })
        .map_err(stream_status)?;
    let size = 64 + buf.len() + 4 * ends.len();
    if size > max_response {
        return Err(ErrorStatus::FrameTooLarge { len: sat32(size), max: sat32(max_response) });
    }
    let buf = &scratch.values;
    let mut start = 0;
    let records = ends
        .iter()
        .map(|&end| {
            let r = &buf[start..end];
            start = end;
            r
        })
        .collect();
    Ok((c.next, c.end_of_group, records))
}

/// Consumer names' refusals: a lease not held is `LOCK_LOST` (claim
/// again); a bound reached or a bad argument, `MALFORMED_REQUEST` saying
/// which.
impl From<AssignError> for ErrorStatus {
    fn from(e: AssignError) -> ErrorStatus {
        match e {
            AssignError::NotHeld { .. } => ErrorStatus::LockLost,
            AssignError::Full(_) | AssignError::Invalid(_) => ErrorStatus::MalformedRequest(e.to_string()),
        }
    }
}

/// Default stream segment: 1 MiB of records.
pub const DEFAULT_STREAM_SEGMENT_BYTES: u32 = 1 << 20;
/// Default segments per group.
pub const DEFAULT_GROUP_SEGMENTS: u32 = 4;

/// A CREATE_STREAM's shape with the server's defaults for the fields it
/// left 0: logs (`--stream-logs`, or the number of cores), segment bytes
/// and segments per group.
fn stream_defaults(ctx: &ServerContext, mut shape: StreamShape) -> StreamShape {
    if shape.logs == 0 {
        shape.logs = match ctx.config.stream_logs {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            q => q,
        }
        .min(shoal_common::stream::MAX_STREAM_LOGS);
    }
    if shape.segment_bytes == 0 {
        shape.segment_bytes = DEFAULT_STREAM_SEGMENT_BYTES;
    }
    if shape.group_segments == 0 {
        shape.group_segments = DEFAULT_GROUP_SEGMENTS;
    }
    shape
}

/// Stream requests name a stream: `UNKNOWN_TABLE` for no table,
/// `MALFORMED_REQUEST` for a table of another kind. A streamlet is served
/// by the master of the tablet holding its key's hash (`streamlet_key`;
/// in a cluster another server answers `UNKNOWN_TABLET` or `RETRY`).
fn stream_table(ctx: &ServerContext, table: TableId, streamlet: u32) -> Result<(), ErrorStatus> {
    if ctx.tables.is_stream_table(table) {
        return route(ctx, table, &streamlet_key(streamlet));
    }
    match ctx.store.has_table(table) {
        true => Err(ErrorStatus::MalformedRequest(format!("table {table} is not a stream"))),
        false => Err(ErrorStatus::UnknownTable(table)),
    }
}

/// The status for each stream error: out of memory as for writes, every
/// other refusal `MALFORMED_REQUEST` saying why.
fn stream_status(e: StreamError) -> ErrorStatus {
    match e {
        StreamError::OutOfMemory => ErrorStatus::OutOfMemory,
        StreamError::UnknownStream(_)
        | StreamError::ShapeMismatch { .. }
        | StreamError::InvalidShape(_)
        | StreamError::NoSuchStreamlet { .. }
        | StreamError::NoSuchGroup { .. }
        | StreamError::Trimmed { .. }
        | StreamError::InvalidOffset(_)
        | StreamError::InvalidBatch(_)
        | StreamError::Consumers(_) => ErrorStatus::MalformedRequest(e.to_string()),
    }
}

/// What a chunk request needs of this server: to create chunks with its
/// own node id, or to serve the chunks of these ids.
enum ChunkRoute<'a> {
    Create,
    Ids(&'a mut dyn Iterator<Item = ChunkId>),
    /// Ids of a request that only reads (served while their range is
    /// being copied away, until the last step of the move).
    Reads(&'a mut dyn Iterator<Item = ChunkId>),
}

/// Chunk requests name a chunk table: `UNKNOWN_TABLE` for no table,
/// `MALFORMED_REQUEST` for a key-value table. In a cluster, a server
/// serves the chunks of the id ranges the map gives it, and creates chunks
/// if it holds the range of its own node id (`ClusterMap::chunk_ranges`):
/// a request with any other id, or a create on a server without its own
/// range, is answered `UNKNOWN_TABLET` (the client refreshes its map and
/// goes to the owner), one of ids being recovered `RETRY`, for the whole
/// request, as for keys of tablets.
fn chunk_table(ctx: &ServerContext, table: TableId, route: ChunkRoute<'_>) -> Result<(), ErrorStatus> {
    if ctx.tables.is_chunk_table(table) {
        let Some(node) = &ctx.cluster else {
            return Ok(());
        };
        return match route {
            ChunkRoute::Create => routed(node, table, node.route_chunk_create(table)),
            ChunkRoute::Ids(ids) => routed(node, table, node.route_chunks(table, ids, false)),
            ChunkRoute::Reads(ids) => routed(node, table, node.route_chunks(table, ids, true)),
        };
    }
    match ctx.store.has_table(table) {
        true => Err(ErrorStatus::MalformedRequest(format!("table {table} is not a chunk table"))),
        false => Err(ErrorStatus::UnknownTable(table)),
    }
}

/// The node id of the chunks this server creates: its server id in a
/// cluster (at most 65535, the width of a chunk id's node field), 0 alone.
fn chunk_node(ctx: &ServerContext) -> Result<u16, ErrorStatus> {
    match &ctx.cluster {
        Some(node) => u16::try_from(node.id.0).map_err(|_| {
            ErrorStatus::MalformedRequest(format!("server id {} is too large for chunk ids (at most 65535)", node.id))
        }),
        None => Ok(0),
    }
}

/// In a cluster: whether this server serves `key` of `table` now. A key of
/// another master's tablet gets `UNKNOWN_TABLET` (the client refreshes its
/// map), one of a tablet being rebuilt `RETRY`.
/// Object requests on a chunk table or a stream are `MALFORMED_REQUEST`.
fn owner(ctx: &ServerContext, table: TableId, key: &[u8]) -> Result<(), ErrorStatus> {
    if ctx.tables.has_chunk_tables() && ctx.tables.is_chunk_table(table) {
        return Err(ErrorStatus::MalformedRequest(format!(
            "table {table} is a chunk table: its chunks are read and written with the CHUNK_* requests"
        )));
    }
    if ctx.tables.is_stream_table(table) {
        return Err(ErrorStatus::MalformedRequest(format!(
            "table {table} is a stream: its records are appended and read with PRODUCE and CONSUME"
        )));
    }
    route(ctx, table, key)
}

/// [`owner`] for a request that only reads: served also while its tablet
/// is being copied to another server (`ClusterNode::route_read`).
fn reader(ctx: &ServerContext, table: TableId, key: &[u8]) -> Result<(), ErrorStatus> {
    if (ctx.tables.has_chunk_tables() && ctx.tables.is_chunk_table(table)) || ctx.tables.is_stream_table(table) {
        return owner(ctx, table, key);
    }
    let Some(node) = &ctx.cluster else {
        return Ok(());
    };
    routed(node, table, node.route_read(table, key_hash(table, key)))
}

/// [`owner`] without the table kind's check.
fn route(ctx: &ServerContext, table: TableId, key: &[u8]) -> Result<(), ErrorStatus> {
    let Some(node) = &ctx.cluster else {
        return Ok(());
    };
    routed(node, table, node.route(table, key_hash(table, key)))
}

/// The answer to a request routed to `route`.
fn routed(node: &crate::cluster::ClusterNode, table: TableId, route: Route) -> Result<(), ErrorStatus> {
    match route {
        Route::Local => Ok(()),
        Route::Remote { .. } => Err(ErrorStatus::UnknownTablet),
        // Being recovered, or moving to another server (`docs/migration.md`).
        Route::Recovering | Route::Moving => Err(ErrorStatus::Retry { after_us: RECOVERING_RETRY_US }),
        // This server's lease lapsed: renewed within a few tenths of a
        // second if the coordinator answers; if this server was declared
        // dead instead, the client's map refresh sends it elsewhere.
        Route::NoLease => Err(ErrorStatus::Retry { after_us: RECOVERING_RETRY_US }),
        Route::NoTablet => match node.map().tables.iter().any(|t| t.id == table) {
            true => Err(ErrorStatus::UnknownTablet),
            false => Err(ErrorStatus::UnknownTable(table)),
        },
    }
}

/// A read of `key` answered from this member's copy (symmetric caching,
/// `sc.rs`): the value into the scratch buffer and its version, or the
/// reject rules' refusal; `None` if there is no valid copy to serve (the
/// read goes to the key's home). Only reads without reject rules are
/// served from copies.
fn cached_read(
    ctx: &ServerContext,
    table: TableId,
    key: &[u8],
    rules: shoal_engine::RejectRules,
    out: &mut Vec<u8>,
) -> Option<Result<Version, ErrorStatus>> {
    let node = ctx.cluster.as_ref()?;
    let sc = node.sc.as_ref()?;
    if rules != shoal_engine::RejectRules::default() {
        return None;
    }
    match sc.read(node, table, key)? {
        shoal_symcache::wire::Value::Present { version, bytes } => {
            *out = bytes;
            Some(Ok(Version(version)))
        }
        shoal_symcache::wire::Value::Absent => Some(Err(ErrorStatus::ObjectDoesntExist)),
    }
}

/// How long a client should wait before retrying a key whose tablet is
/// being recovered.
const RECOVERING_RETRY_US: u32 = 20_000;

fn table_status(e: TableError) -> ErrorStatus {
    match &e {
        TableError::Store(e) => status_of(e.clone()),
        // The coordinator is unreachable: try again a little later.
        TableError::Coordinator(_) => ErrorStatus::Retry { after_us: 100_000 },
        TableError::WrongKind(_) | TableError::Stream(_) => ErrorStatus::MalformedRequest(e.to_string()),
    }
}

/// The status for each lock table refusal.
fn lock_status(e: LockError) -> ErrorStatus {
    match e {
        LockError::Busy { retry_after } => ErrorStatus::LockBusy { after_us: sat32(retry_after.as_micros() as usize) },
        LockError::NotHeld => ErrorStatus::LockNotHeld,
        LockError::Lost => ErrorStatus::LockLost,
        LockError::TableFull { limit } => ErrorStatus::LockTableFull { limit: sat32(limit) },
        LockError::OwnerLimit { limit } => ErrorStatus::LockOwnerLimit { limit: sat32(limit) },
        LockError::HeldInOtherMode | LockError::Invalid(_) => ErrorStatus::MalformedRequest(e.to_string()),
    }
}

fn sat32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The status for each store error (one status per variant).
fn status_of(e: StoreError) -> ErrorStatus {
    match e {
        StoreError::UnknownTable(t) => ErrorStatus::UnknownTable(t),
        StoreError::KeyTooLarge { len, max } => ErrorStatus::KeyTooLarge { len: sat32(len), max: sat32(max) },
        StoreError::ValueTooLarge { len, max } => ErrorStatus::ValueTooLarge { len: sat32(len), max: sat32(max) },
        StoreError::ObjectDoesntExist => ErrorStatus::ObjectDoesntExist,
        StoreError::ObjectExists { version } => ErrorStatus::ObjectExists { version },
        StoreError::WrongVersion { version } => ErrorStatus::WrongVersion { version },
        StoreError::NotAnInteger => ErrorStatus::NotAnInteger,
        StoreError::Overflow => ErrorStatus::Overflow,
        StoreError::OutOfMemory => ErrorStatus::OutOfMemory,
        StoreError::InvalidBatch | StoreError::NotInTransaction => ErrorStatus::MalformedRequest(e.to_string()),
        // A server out of chunk ids cannot create chunks, as one out of memory.
        StoreError::ChunkIdsExhausted => ErrorStatus::OutOfMemory,
    }
}

/// The store's statistics and the server's, by name.
fn stats(ctx: &ServerContext) -> Vec<Stat<'static>> {
    let StoreStats {
        memory_bytes,
        segment_bytes,
        seglet_bytes,
        seglets_total,
        seglets_free,
        seglets_in_use,
        segments_in_log,
        objects,
        chunks,
        cid_table_bytes,
        stream_bytes,
        live_bytes,
        live_key_value_bytes,
        tombstone_bytes,
        log_utilisation,
        memory_utilisation,
        hash_table_bytes,
        hash_table_buckets,
        hash_table_growths,
        reads,
        writes,
        removes,
        out_of_memory,
        compactions,
        combined_passes,
        segments_compacted,
        segments_cleaned,
        tombstone_scans,
        bytes_relocated,
        seglets_freed,
        cleaning_ms,
        expiring_objects,
        expired_keys,
        expired_swept,
        expired_dropped,
        evicted,
        evicted_bytes,
        eviction_passes,
        seglets_returned_now,
        seglets_returned,
        heads_rolled,
        sweep_passes,
        sweep_segments_scanned,
        sweep_ms,
        write_cost,
        appended_bytes,
        tombstones_written,
        tombstones_elided,
        prefaulted_bytes,
    } = ctx.store.stats();
    let s = &ctx.stats;
    let u = |name: &'static str, v: u64| Stat { name: Cow::Borrowed(name), value: StatValue::U64(v) };
    let f = |name: &'static str, v: f64| Stat { name: Cow::Borrowed(name), value: StatValue::F64(v) };
    let mut v = vec![
        u("uptime_secs", ctx.uptime().as_secs()),
        u("connections_current", ServerStats::get(&s.connections_current)),
        u("connections_total", ServerStats::get(&s.connections_total)),
        u("connections_rejected", ServerStats::get(&s.connections_rejected)),
        u("reply_overflows", ServerStats::get(&s.reply_overflows)),
        u("idle_timeouts", ServerStats::get(&s.idle_timeouts)),
        u("request_timeouts", ServerStats::get(&s.request_timeouts)),
        u("lease_lapses", ServerStats::get(&s.lease_lapses)),
        u("tls_handshakes", ServerStats::get(&s.tls_handshakes)),
        u("tls_handshake_failures", ServerStats::get(&s.tls_handshake_failures)),
        u("tls_handshake_timeouts", ServerStats::get(&s.tls_handshake_timeouts)),
        u("client_buffer_disconnects", ServerStats::get(&s.client_buffer_disconnects)),
        u("client_buffer_bytes", ctx.budget.used() as u64),
        u("client_buffer_budget", ctx.budget.limit() as u64),
        u("commands", ServerStats::get(&s.commands)),
        u("protocol_errors", ServerStats::get(&s.protocol_errors)),
        u("bytes_in", ServerStats::get(&s.bytes_in)),
        u("bytes_out", ServerStats::get(&s.bytes_out)),
        u("tables", ctx.tables.list().len() as u64),
        // The largest key and value this server takes: clients that stream
        // a value in (`shoal put TABLE KEY -`, `shoal load`) stop reading past them.
        u("max_key_bytes", ctx.store.config().max_key_bytes as u64),
        u("max_value_bytes", ctx.store.config().max_value_bytes as u64),
        u("memory_bytes", memory_bytes),
        u("segment_bytes", segment_bytes),
        u("seglet_bytes", seglet_bytes),
        u("seglets_total", seglets_total),
        u("seglets_free", seglets_free),
        u("seglets_in_use", seglets_in_use),
        u("segments_in_log", segments_in_log),
        u("objects", objects),
        u("chunks", chunks),
        u("cid_table_bytes", cid_table_bytes),
        u("stream_bytes", stream_bytes),
        u("stream_groups_trimmed", ServerStats::get(&s.stream_groups_trimmed)),
        u("live_bytes", live_bytes),
        u("live_key_value_bytes", live_key_value_bytes),
        u("tombstone_bytes", tombstone_bytes),
        f("log_utilisation", log_utilisation),
        f("memory_utilisation", memory_utilisation),
        u("hash_table_bytes", hash_table_bytes),
        u("hash_table_buckets", hash_table_buckets),
        u("hash_table_growths", hash_table_growths),
        u("reads", reads),
        u("writes", writes),
        u("removes", removes),
        u("out_of_memory", out_of_memory),
        u("compactions", compactions),
        u("combined_passes", combined_passes),
        u("segments_compacted", segments_compacted),
        u("segments_cleaned", segments_cleaned),
        u("tombstone_scans", tombstone_scans),
        u("bytes_relocated", bytes_relocated),
        u("seglets_freed", seglets_freed),
        u("cleaning_ms", cleaning_ms),
        u("expiring_objects", expiring_objects),
        u("expired_keys", expired_keys),
        u("expired_swept", expired_swept),
        u("expired_dropped", expired_dropped),
        u("evicted", evicted),
        u("evicted_bytes", evicted_bytes),
        u("eviction_passes", eviction_passes),
        u("seglets_returned_now", seglets_returned_now),
        u("seglets_returned", seglets_returned),
        u("heads_rolled", heads_rolled),
        u("expiry_sweep_passes", sweep_passes),
        u("expiry_sweep_segments_scanned", sweep_segments_scanned),
        u("expiry_sweep_ms", sweep_ms),
        f("write_cost", write_cost),
        u("appended_bytes", appended_bytes),
        u("tombstones_written", tombstones_written),
        u("tombstones_elided", tombstones_elided),
        u("prefaulted_bytes", prefaulted_bytes),
    ];
    let l = ctx.locks.stats(Now::clock());
    v.extend([
        u("chunk_locks_held", l.held),
        u("chunk_lock_waiters", l.waiters),
        u("chunk_lock_owners", l.owners),
        u("chunk_lock_owner_limited", l.owner_limited),
        u("chunk_lock_grants", l.grants),
        u("chunk_lock_busy", l.busy),
        u("chunk_lock_releases", l.releases),
        u("chunk_lock_lease_expiries", l.lease_expiries),
    ]);
    if let Some(node) = &ctx.cluster {
        cluster_stats(node, &mut v);
        {
            use std::sync::atomic::Ordering::Relaxed;
            let m = &node.migrations;
            v.extend([
                u("migrations_committed", m.committed.load(Relaxed)),
                u("migrations_aborted", m.aborted.load(Relaxed)),
                u("migration_objects_sent", m.objects_sent.load(Relaxed)),
                u("migration_bytes_sent", m.bytes_sent.load(Relaxed)),
                u("migration_frozen_ms", m.frozen_ms.load(Relaxed)),
                u("migration_objects_received", m.objects_received.load(Relaxed)),
                u("migration_objects_removed", m.objects_removed.load(Relaxed)),
                u("migration_chunks_sent", m.chunks_sent.load(Relaxed)),
                u("migration_chunks_received", m.chunks_received.load(Relaxed)),
                u("migration_chunks_removed", m.chunks_removed.load(Relaxed)),
            ]);
        }
        if let Some(sc) = &node.sc {
            use std::sync::atomic::Ordering::Relaxed;
            let t = &sc.stats;
            v.extend([
                u("sc_membership_epoch", t.membership.load(Relaxed)),
                u("sc_round", t.round.load(Relaxed)),
                u("sc_hot_keys", t.hot_keys.load(Relaxed)),
                u("sc_home_keys", t.home_keys.load(Relaxed)),
                u("sc_copies", t.copies.load(Relaxed)),
                u("sc_hits", t.hits.load(Relaxed)),
                u("sc_misses", t.misses.load(Relaxed)),
                u("sc_invalidations_sent", t.invalidations_sent.load(Relaxed)),
                u("sc_invalidations_received", t.invalidations_received.load(Relaxed)),
                u("sc_acks_received", t.acks_received.load(Relaxed)),
                u("sc_updates_sent", t.updates_sent.load(Relaxed)),
                u("sc_updates_received", t.updates_received.load(Relaxed)),
                u("sc_writes_held", t.writes_held.load(Relaxed)),
                u("sc_frames_dropped", t.frames_dropped.load(Relaxed)),
                u("sc_installs", t.installs.load(Relaxed)),
            ]);
        }
    }
    let rates = ctx.load.rates();
    v.push(u("ops_per_sec", rates.iter().map(|(_, r)| r).sum()));
    // Last, per table holding objects (at most MAX_TABLE_STATS tables):
    // table_<id>_objects and table_<id>_bytes (its objects' log entries),
    // which rebalancing weighs tablets by (docs/migration.md). Last so
    // that a bound on the answer cuts these, not the server's figures.
    let tables = ctx.tables.list().into_iter().filter_map(|(_, id)| {
        let objects = ctx.store.table_objects(id).ok().filter(|n| *n > 0)?;
        Some((id, objects, ctx.store.table_bytes(id).ok()?))
    });
    for (id, objects, bytes) in tables.take(MAX_TABLE_STATS) {
        for (what, value) in [("objects", objects), ("bytes", bytes)] {
            v.push(Stat { name: Cow::Owned(format!("table_{}_{what}", id.0)), value: StatValue::U64(value) });
        }
    }
    // And table_<id>_ops_per_sec of each table with operations (the load
    // that rebalancing evens, `load.rs`).
    for (id, rate) in rates.into_iter().take(MAX_TABLE_STATS) {
        v.push(Stat { name: Cow::Owned(format!("table_{}_ops_per_sec", id.0)), value: StatValue::U64(rate) });
    }
    v
}

/// Most tables STATS lists figures of: keeps the answer well under the
/// 1 MiB a reader such as the coordinator takes (about 90 bytes a table).
pub const MAX_TABLE_STATS: usize = 8192;

/// A cluster member's statistics: its place in the cluster, its
/// replicator's and its backup's counters.
fn cluster_stats(node: &crate::cluster::ClusterNode, v: &mut Vec<Stat<'static>>) {
    let u = |name: &'static str, x: u64| Stat { name: Cow::Borrowed(name), value: StatValue::U64(x) };
    let f = |name: &'static str, x: f64| Stat { name: Cow::Borrowed(name), value: StatValue::F64(x) };
    let map = node.map();
    let r = node.replicator.stats();
    v.extend([
        u("server_id", node.id.0),
        u("log_id", node.log.0),
        u("map_version", map.version),
        u("replicas", u64::from(map.replicas)),
        u("recovering", node.is_recovering() as u64),
        u("replication_rounds", r.rounds),
        f("replication_round_bytes_mean", r.round_bytes_mean),
        u("replication_round_bytes_max", r.round_bytes_max),
        f("replication_round_appends_mean", r.round_appends_mean),
        u("replication_round_appends_max", r.round_appends_max),
        u("bytes_replicated", r.bytes_replicated),
        u("replicas_opened", r.replicas_opened),
        u("replicas_closed", r.replicas_closed),
        u("replicas_reopened", r.replicas_reopened),
        u("replica_refusals", r.refusals),
        u("open_replicas", r.open_replicas),
        u("segments_freed_on_backups", r.segments_freed),
        u("segments_rereplicated", r.segments_rereplicated),
        u("rereplication_bytes", r.rereplication_bytes),
        u("closed_segments_below_r", r.closed_segments_below_r),
        u("epochs_raised", r.epochs_raised),
        u("floors_recorded", r.floors_recorded),
        u("floors_waiting", r.floors_waiting),
        u("log_position", r.position),
        u("durable_position", r.durable),
        u("durable_lag", r.durable_lag),
    ]);
    let p = node.recovery.lock().clone();
    if !p.logs.is_empty() {
        v.extend([
            u("restart_recovery_segments", p.segments),
            u("restart_recovery_bytes", p.bytes),
            u("restart_recovery_objects", p.objects),
            u("restart_recovery_ms", p.elapsed_ms),
            u("restart_recovery_done", p.done as u64),
        ]);
    }
    // Crash-recovery partitions this server replayed (or is replaying), one
    // group of stats each: recovery_<id>_partition_<i>_<what>.
    let parts = node.partitions.lock().clone();
    v.push(u("recovery_partitions", parts.len() as u64));
    for p in &parts {
        let n = |what: &str, x: u64| Stat {
            name: Cow::Owned(format!("recovery_{}_partition_{}_{what}", p.recovery, p.partition)),
            value: StatValue::U64(x),
        };
        v.extend([
            n("dead", p.dead.0),
            n("done", (p.phase == "done") as u64),
            n("segments", p.segments),
            n("bytes", p.bytes),
            n("objects", p.objects),
            n("find_ms", p.find_ms),
            n("replay_ms", p.replay_ms),
            n("durable_ms", p.durable_ms),
            n("total_ms", p.total_ms),
        ]);
    }
    if let Some(b) = node.backup_stats() {
        v.extend([
            u("backup_buffers_total", b.buffers_total as u64),
            u("backup_buffers_in_use", b.buffers_in_use as u64),
            u("backup_awaiting_flush", b.awaiting_flush as u64),
            u("backup_segments_on_disk", b.segments_on_disk as u64),
            u("backup_bytes_received", b.bytes_received),
            u("backup_segments_opened", b.segments_opened),
            u("backup_segments_closed", b.segments_closed),
            u("backup_segments_flushed", b.segments_flushed),
            u("backup_segments_freed", b.segments_freed),
            u("backup_refusals", b.refusals),
            u("backup_connections_active", b.connections_active),
            u("backup_conventional_appends", b.conventional_appends),
            u("backup_protocol_errors", b.protocol_errors),
            u("backup_corrupt_replicas", b.corrupt_replicas),
        ]);
    }
}
