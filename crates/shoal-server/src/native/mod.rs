//! The native protocol's front end (`docs/wire-format.md`, crate
//! `shoal-proto`).
//!
//! A connection's task reads whatever bytes are available (up to the
//! request buffer's bound), runs every whole frame in them against the
//! store in order, and writes all their responses with one write. Frames
//! are decoded in two passes ([`shoal_proto::check_frame`], then
//! [`shoal_proto::Request::decode`]), so a frame split across reads is
//! simply completed by the next read.
//!
//! Bounds per connection: received bytes are held up to
//! `request_buffer_size`; no frame body may exceed `max_request_size`;
//! responses stop being produced once `reply_buffer_size` bytes wait to be
//! written, and nothing more is read until they are. A client that stops
//! reading its responses, or stalls half way through a frame, makes no
//! progress and is closed after `idle_timeout_secs`. A connection that holds
//! part of a frame and completes none for `request_timeout_ms` is closed
//! (slowloris), whatever the idle timeout.
//!
//! Over all connections, the client buffer budget (`budget`): while the
//! server is over it, responses are written (and nothing more read) as soon
//! as `budget::PAUSE_SLACK` bytes of them wait, rather than at
//! `reply_buffer_size`; a connection chosen for closing closes at once.
//!
//! Bad input: a body that does not parse or an unknown opcode gets an error
//! response and the connection goes on; a wrong magic byte, an unsupported
//! version or an oversized frame get an error response and the connection
//! is closed, because the stream can no longer be framed (or its body would
//! not fit).

mod execute;

use crate::budget::{Account, FREE, PAUSE_SLACK};
use crate::context::{ServerContext, ServerStats};
use crate::listener::{Connection, FrontEnd};
use crate::spin;
use crate::stream::ClientStream;
use crate::workers::{Moved, Placement, Served};
use bytes::BufMut;
use execute::{execute, Scratch};
use shoal_proto::{check_frame, encode_error, ErrorStatus, FrameError, Opcode, DEFAULT_MAX_BODY_BYTES, HEADER_LEN};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

/// The response sent to a connection refused because too many are open:
/// request id 0, opcode 0, status RETRY after 1 ms.
const REFUSAL: [u8; 21] = [
    0x53, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0x05, 0, 0, 0, // header, body length 5
    12, 0xe8, 0x03, 0, 0, // RETRY, 1000 us
];

/// Bytes read at most per read call when the request buffer allows it.
const READ_CHUNK: usize = 64 * 1024;

/// Serves Shoal's native protocol.
pub struct NativeFrontEnd;

impl NativeFrontEnd {
    pub fn new() -> NativeFrontEnd {
        NativeFrontEnd
    }
}

impl Default for NativeFrontEnd {
    fn default() -> Self {
        NativeFrontEnd::new()
    }
}

impl FrontEnd for NativeFrontEnd {
    fn name(&self) -> &'static str {
        "native"
    }

    fn refusal(&self) -> &'static [u8] {
        &REFUSAL
    }

    fn serve<S: ClientStream>(self: Arc<Self>, stream: S, conn: Connection, placement: Placement) -> Served {
        resume(NativeConn::new(conn), stream, placement)
    }

    fn serve_plain_on_tls(self: Arc<Self>, stream: TcpStream, conn: Connection, placement: Placement) -> Served {
        let mut c = NativeConn::new(conn);
        c.scratch.ping_only = true;
        resume(c, stream, placement)
    }
}

/// Serves `c` on the worker of `placement` until it ends or moves.
fn resume<S: ClientStream>(mut c: NativeConn, stream: S, placement: Placement) -> Served {
    Box::pin(async move {
        match serve_connection(stream, &mut c, &placement).await {
            Ok(Some(stream)) => match stream.detach() {
                Ok((stream, reattach)) => {
                    let resume = Box::new(move |socket, placement| resume(c, reattach(socket), placement));
                    return Some(Moved { stream, resume });
                }
                Err(e) => debug!("native: connection {} from {}: cannot move: {e}", c.conn.id, c.conn.peer),
            },
            Ok(None) => {}
            Err(why) => debug!("native: connection {} from {}: closed: {why}", c.conn.id, c.conn.peer),
        }
        None
    })
}

/// The limits a connection works within, from the server's configuration.
struct Limits {
    max_body: u32,
    request_buffer: usize,
    reply_buffer: usize,
    /// Largest body of a response whose size the request does not fix.
    max_response: usize,
    idle: Option<Duration>,
    /// Longest a part of a frame may wait for the rest.
    request: Option<Duration>,
}

impl Limits {
    fn of(ctx: &ServerContext) -> Limits {
        let c = &ctx.config;
        let max_body = c.max_request_size.0.saturating_sub(HEADER_LEN as u64).min(u32::MAX as u64) as u32;
        let reply_buffer = c.reply_buffer_size.0 as usize;
        Limits {
            max_body,
            request_buffer: (c.request_buffer_size.0 as usize).max(HEADER_LEN + max_body as usize),
            reply_buffer,
            max_response: reply_buffer.min(DEFAULT_MAX_BODY_BYTES as usize),
            idle: c.idle_timeout(),
            request: c.request_timeout(),
        }
    }
}

/// Why a connection ended early (for the debug log).
type Closed = String;

/// One connection's state, kept across a move to another worker.
struct NativeConn {
    conn: Connection,
    limits: Limits,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// Received bytes not yet run: at most a part of one frame between reads.
    inbuf: Vec<u8>,
    out: Vec<u8>,
    scratch: Scratch,
    /// Whether to spin for the client's next request (see `spin`), and
    /// when the last replies were all written (`None` since the last read).
    spin: spin::SpinPolicy,
    replied_at: Option<std::time::Instant>,
    /// Since when `inbuf` holds part of a frame without a whole frame run
    /// (kept only with a request timeout).
    partial: Option<std::time::Instant>,
}

impl NativeConn {
    fn new(conn: Connection) -> NativeConn {
        NativeConn {
            limits: Limits::of(&conn.ctx),
            shutdown: conn.ctx.shutdown_signal(),
            inbuf: Vec::with_capacity(16 * 1024),
            out: Vec::with_capacity(16 * 1024),
            scratch: Scratch::default(),
            spin: spin::SpinPolicy::default(),
            replied_at: None,
            partial: None,
            conn,
        }
    }
}

/// Runs the connection until the peer closes it, it breaks a limit, or the
/// server shuts down (after the replies owed are written): `None`; or until
/// it is asked to move: its stream.
async fn serve_connection<S: ClientStream>(
    mut stream: S,
    c: &mut NativeConn,
    placement: &Placement,
) -> Result<Option<S>, Closed> {
    let NativeConn { conn, limits, shutdown, inbuf, out, scratch, spin: policy, replied_at, partial } = c;
    let ctx = &conn.ctx;
    let account = &mut conn.account;
    loop {
        // Between requests, with every reply written: the connection may
        // move to another worker.
        if placement.should_move() {
            return Ok(Some(stream));
        }
        // Read what is available (at least one byte), within the bound. The
        // buffer never holds a whole frame here (those ran), so there is room.
        let want = (limits.request_buffer - inbuf.len()).min(READ_CHUNK);
        inbuf.reserve(want);
        // Right after answering a client that sends its requests back to
        // back, spin briefly for the next one (see `spin`).
        let mut caught = None;
        if let Some(socket) = stream.raw().filter(|_| replied_at.is_some() && policy.spin_next()) {
            match ctx.spin.try_enter(&ctx.stats) {
                Some(_permit) => {
                    let until = std::time::Instant::now() + spin::SPIN;
                    caught = spin::read_until(socket, inbuf, want, until).await.transpose();
                }
                None => policy.not_spinning(),
            }
        }
        let read = match caught {
            Some(r) => Some(r),
            None => {
                // The idle timeout, or sooner the request timeout of a part of a frame.
                let stall_at = partial.zip(limits.request).map(|(since, t)| since + t);
                let limit = match stall_at {
                    None => limits.idle,
                    Some(at) => {
                        let left = at.saturating_duration_since(std::time::Instant::now());
                        Some(limits.idle.map_or(left, |idle| idle.min(left)))
                    }
                };
                let mut dst = (&mut *inbuf).limit(want);
                let read = tokio::select! {
                    r = with_timeout(limit, stream.read_buf(&mut dst)) => r,
                    _ = shutdown.wait_for(|s| *s) => return Ok(None),
                    _ = account.evicted(), if account.is_charged() => return Err(OVER_BUDGET.into()),
                };
                if read.is_none() && stall_at.is_some_and(|at| std::time::Instant::now() >= at) {
                    ServerStats::add(&ctx.stats.request_timeouts, 1);
                    return Err("part of a frame held longer than the request timeout".into());
                }
                read
            }
        };
        if let Some(Ok(n)) = read {
            if n > 0 {
                match replied_at.take() {
                    Some(t) => policy.record(t.elapsed()),
                    None => policy.disarm(),
                }
            }
        }
        match read {
            None => {
                ServerStats::add(&ctx.stats.idle_timeouts, 1);
                return Err(if inbuf.is_empty() { "idle".into() } else { "stalled in the middle of a frame".into() });
            }
            Some(Ok(0)) => {
                return if inbuf.is_empty() { Ok(None) } else { Err("peer closed in the middle of a frame".into()) }
            }
            Some(Ok(n)) => ServerStats::add(&ctx.stats.bytes_in, n as u64),
            Some(Err(e)) => return Err(format!("read: {e}")),
        }
        // Run every whole frame; flush whenever the replies reach their bound.
        // Each request is timed from the end of the one before it (one
        // clock read per request, and one per batch).
        let mut pos = 0;
        let mut fatal = None;
        let mut clock = std::time::Instant::now();
        loop {
            match check_frame(&inbuf[pos..], limits.max_body) {
                Ok(Some(h)) => {
                    let body = &inbuf[pos + HEADER_LEN..pos + h.frame_len()];
                    let failed = execute(ctx, &h, body, out, scratch, limits.max_response);
                    let now = std::time::Instant::now();
                    ctx.stats.native_ops.ran(op_index(h.opcode), now - clock, failed);
                    clock = now;
                    pos += h.frame_len();
                    if out.len() >= limits.reply_buffer
                        || (out.len() > PAUSE_SLACK
                            && over_budget(account, inbuf.capacity() + out.capacity(), out.len()))
                    {
                        settle(ctx, scratch).await?;
                        flush(&mut stream, out, ctx, limits.idle, account).await?;
                        clock = std::time::Instant::now();
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    ServerStats::add(&ctx.stats.protocol_errors, 1);
                    let (id, opcode, status) = match e {
                        FrameError::BadMagic(_) => (0, 0, ErrorStatus::MalformedRequest(e.to_string())),
                        FrameError::UnsupportedVersion { header, .. } => {
                            (header.request_id, header.opcode, ErrorStatus::UnsupportedVersion)
                        }
                        FrameError::TooLarge { header, max } => {
                            (header.request_id, header.opcode, ErrorStatus::FrameTooLarge { len: header.body_len, max })
                        }
                    };
                    encode_error(out, id, opcode, &status);
                    fatal = Some(e.to_string());
                    break;
                }
            }
        }
        inbuf.drain(..pos);
        if limits.request.is_some() {
            if inbuf.is_empty() {
                *partial = None;
            } else if pos > 0 || partial.is_none() {
                *partial = Some(std::time::Instant::now());
            }
        }
        scratch.trim();
        // Larger buffers than everyday ones are not kept (they count
        // against the budget).
        if inbuf.is_empty() && inbuf.capacity() > FREE {
            *inbuf = Vec::with_capacity(16 * 1024);
        }
        account.report(inbuf.capacity() + out.capacity(), out.len());
        settle(ctx, scratch).await?;
        let replied = !out.is_empty();
        flush(&mut stream, out, ctx, limits.idle, account).await?;
        if replied && inbuf.is_empty() {
            *replied_at = Some(std::time::Instant::now());
        }
        if out.capacity() > FREE {
            *out = Vec::with_capacity(16 * 1024);
        }
        account.report(inbuf.capacity() + out.capacity(), 0);
        if let Some(why) = fatal {
            let _ = stream.shutdown().await;
            return Err(why);
        }
    }
}

/// Operations of the native protocol, for its statistics (`/metrics`):
/// index 0 is any unknown opcode, and every other is its opcode's value.
pub const OPS: usize = 34;

/// The statistics index of `opcode` (see [`OPS`]).
pub fn op_index(opcode: u8) -> usize {
    Opcode::from_u8(opcode).map_or(0, |op| op as usize)
}

/// The name of operation `index` (see [`OPS`]); `None` for a value that
/// is no opcode.
pub fn op_name(index: usize) -> Option<&'static str> {
    if index == 0 {
        return Some("unknown");
    }
    let op = Opcode::from_u8(u8::try_from(index).ok()?)?;
    Some(match op {
        Opcode::Ping => "ping",
        Opcode::Read => "read",
        Opcode::Write => "write",
        Opcode::Remove => "remove",
        Opcode::Increment => "increment",
        Opcode::MultiRead => "multi_read",
        Opcode::MultiWrite => "multi_write",
        Opcode::MultiRemove => "multi_remove",
        Opcode::Enumerate => "enumerate",
        Opcode::WriteTtl => "write_ttl",
        Opcode::ReadTtl => "read_ttl",
        Opcode::CreateTable => "create_table",
        Opcode::DropTable => "drop_table",
        Opcode::GetTableId => "get_table_id",
        Opcode::Stats => "stats",
        Opcode::Auth => "auth",
        Opcode::ChunkCreate => "chunk_create",
        Opcode::ChunkGet => "chunk_get",
        Opcode::ChunkPut => "chunk_put",
        Opcode::ChunkRemove => "chunk_remove",
        Opcode::CreateChunkTable => "create_chunk_table",
        Opcode::CreateStream => "create_stream",
        Opcode::Produce => "produce",
        Opcode::Consume => "consume",
        Opcode::DescribeStream => "describe_stream",
        Opcode::ScFilter => "sc_filter",
        Opcode::ChunkLock => "chunk_lock",
        Opcode::ChunkUnlock => "chunk_unlock",
        Opcode::ChunkRenew => "chunk_renew",
        Opcode::ChunkPutLocked => "chunk_put_locked",
        Opcode::ClaimGroup => "claim_group",
        Opcode::ConsumeClaimed => "consume_claimed",
        Opcode::CommitGroup => "commit_group",
    })
}

/// Why a connection chosen by the budget's enforcer ends (for the log).
const OVER_BUDGET: &str = "closed to keep client buffers within the budget";

/// Reports the buffers (`held` bytes, `unread` of them responses) to the
/// client buffer budget; whether the server is over it, so the replies must go out now.
fn over_budget(account: &mut Account, held: usize, unread: usize) -> bool {
    account.report(held, unread);
    account.throttled(unread)
}

/// Before replies go out, if a request since the last call read or wrote
/// stored data (in a cluster): the connection closes without them unless
/// this server's lease held after those requests ran (another server may
/// serve their keys by now), and they wait until the log is durable up to
/// everything applied so far (group commit: every write of every
/// connection applied meanwhile rides the same replication round; a read
/// never shows what a crash could still lose).
async fn settle(ctx: &ServerContext, scratch: &mut Scratch) -> Result<(), Closed> {
    let need = std::mem::take(&mut scratch.durable);
    if !std::mem::take(&mut scratch.touched) {
        return Ok(());
    }
    if !ctx.lease_held() {
        ServerStats::add(&ctx.stats.lease_lapses, 1);
        return Err("this server's lease lapsed while its requests ran; replies dropped".into());
    }
    match ctx.durable_target(need) {
        Some(pos) if !ctx.wait_durable(pos).await => Err("replication stopped; writes not acknowledged".into()),
        _ => Ok(()),
    }
}

/// Writes every pending response (one write when the socket takes it).
/// A client that takes none of it for the idle timeout is closed, and so is
/// a connection the budget's enforcer chose.
async fn flush<S: ClientStream>(
    stream: &mut S,
    out: &mut Vec<u8>,
    ctx: &ServerContext,
    idle: Option<Duration>,
    account: &Account,
) -> Result<(), Closed> {
    if out.is_empty() {
        return Ok(());
    }
    let mut written = 0;
    while written < out.len() {
        let wrote = tokio::select! {
            biased;
            r = with_timeout(idle, stream.write(&out[written..])) => r,
            _ = account.evicted(), if account.is_charged() => return Err(OVER_BUDGET.into()),
        };
        match wrote {
            None => {
                ServerStats::add(&ctx.stats.reply_overflows, 1);
                return Err("client does not read its replies".into());
            }
            Some(Ok(0)) => return Err("peer closed".into()),
            Some(Ok(n)) => written += n,
            Some(Err(e)) => return Err(format!("write: {e}")),
        }
    }
    if S::BUFFERS_WRITES {
        match with_timeout(idle, stream.flush()).await {
            None => {
                ServerStats::add(&ctx.stats.reply_overflows, 1);
                return Err("client does not read its replies".into());
            }
            Some(Err(e)) => return Err(format!("write: {e}")),
            Some(Ok(())) => {}
        }
    }
    ServerStats::add(&ctx.stats.bytes_out, written as u64);
    out.clear();
    Ok(())
}

/// Runs `f` for at most `limit` (`None`: no limit); `None` if it timed out.
async fn with_timeout<T>(limit: Option<Duration>, f: impl Future<Output = T>) -> Option<T> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await.ok(),
        None => Some(f.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_index_covers_every_opcode_within_ops() {
        for code in 0..=u8::MAX {
            let i = op_index(code);
            assert!(i < OPS);
            assert_eq!(i != 0, Opcode::from_u8(code).is_some());
            assert!(op_name(i).is_some());
        }
        let names: std::collections::BTreeSet<_> = (0..OPS).filter_map(op_name).collect();
        assert_eq!(names.len(), (0..OPS).filter(|&i| op_name(i).is_some()).count(), "names are distinct");
    }

    #[test]
    fn refusal_is_a_retry_response() {
        let mut out = Vec::new();
        encode_error(&mut out, 0, 0, &ErrorStatus::Retry { after_us: 1000 });
        assert_eq!(out, REFUSAL);
    }
}
