//! One client connection of a text front end (RESP, memcached): read what
//! the client sent, execute every complete request in it, answer them all
//! with one write. What a request is and how it runs is the [`Protocol`]'s
//! business; this driver owns the buffers, the limits, the timeouts, the
//! durability wait and forwarding.
//!
//! Bounds, per connection:
//! * received bytes not yet executed: at most `request_buffer_size` (the
//!   socket is not read while the buffer is full; the buffer then always
//!   holds a complete request, since one may not exceed `max_request_size`);
//! * replies not yet taken by the client: past `reply_buffer_size` the
//!   client is disconnected (it pipelines without reading its replies);
//! * time: no progress (nothing read, nothing of the replies sent) for the
//!   idle timeout closes the connection, whether it is idle, stalled in the
//!   middle of a request, or not reading; part of a request held for the
//!   request timeout without a complete request closes it too (slowloris).
//!
//! And over all connections, the client buffer budget (`budget`): while the
//! server is over it, a connection with unread replies neither reads nor
//! executes requests; one chosen for closing closes at once.
//!
//! A protocol error (malformed or oversized request) is answered with its
//! error, then the connection closes, as in Redis and memcached. Reading and writing are
//! concurrent, so a client that sends a long pipeline before reading
//! anything is served (within the reply bound).
//!
//! In a cluster, two more things happen here, both without blocking the
//! worker (each is one more branch of the connection's select loop):
//! * Replies to writes wait until the log is durable. After a batch that
//!   wrote, the replies it appended (and every reply after them) are held
//!   back until the replicator reports the log durable up to the position
//!   taken after the batch; earlier replies go out meanwhile, and requests
//!   keep being executed. If replication stops (shutdown), the connection
//!   closes without sending the held replies.
//! * A command forwarded to other servers (see `routing`) is awaited before
//!   the next request runs, so that replies stay in request order.
//!
//! A standalone server does neither, at the cost of a few untaken branches.

use crate::admin::clients::{ClientSlot, Mail};
use crate::budget::PAUSE_SLACK;
use crate::context::{Durability, ServerContext, ServerStats};
use crate::listener::Connection;
use crate::resp::forward::{self, Job};
use crate::resp::routing::NO_TABLET_RETRY;
use crate::spin;
use crate::stream::ClientStream;
use crate::workers::{Moved, Placement, Served};
use bytes::{Buf, BufMut, BytesMut};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tracing::debug;

/// Longest a connection keeps trying to send its last replies once it is
/// closing (QUIT, protocol error, shutdown).
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Buffers larger than this are released once empty, so that an idle
/// connection holds at most a few KiB.
const KEEP_BUFFER: usize = 16 * 1024;
/// First read size; reads grow (doubling, up to `MAX_READ_CHUNK`) while
/// they fill the buffer, and start small again once the buffer is released.
const READ_CHUNK: usize = 4 * 1024;
const MAX_READ_CHUNK: usize = 64 * 1024;
/// Most requests executed before the connection lets others run.
const MAX_BATCH: usize = 1024;

/// What became of one request.
pub enum Step {
    /// Its reply is in the output.
    Done,
    /// Its reply comes from running this job (the request is consumed).
    Forward(Job),
    /// Nothing was done: run the same request again after a short pause.
    Retry,
    /// Nothing was done: run the same request again once this completes
    /// (a blocked XREAD: new data, or its timeout). The connection runs
    /// nothing else meanwhile, as a blocked Redis client.
    Wait(Pin<Box<dyn Future<Output = ()> + Send>>),
}

/// A request the connection cannot accept: `reply` is sent, then the
/// connection closes.
pub struct Fatal {
    pub reply: Vec<u8>,
    pub reason: String,
}

/// One client's protocol state over a connection: framing, dispatch and
/// the per-client state.
pub trait Protocol: Send + 'static {
    /// For logs ("resp", "memcached").
    const NAME: &'static str;

    fn new(ctx: Arc<ServerContext>, conn: &Connection) -> Self;

    /// The connection's entry in the client registry, if the protocol
    /// keeps one: its mail (kill, monitor lines) is read beside the socket,
    /// and its buffer sizes are reported there.
    fn client_slot(&self) -> Option<Arc<ClientSlot>> {
        None
    }

    /// If `input` starts with a complete request, runs it, appending its
    /// reply to `out`: the bytes consumed and what became of it
    /// ([`Step::Retry`] consumes nothing). `Ok(None)`: more bytes are
    /// needed. A protocol may consume bytes without a request (memcached
    /// discarding the data of a refused value).
    fn step(&mut self, input: &[u8], out: &mut BytesMut) -> Result<Option<(usize, Step)>, Fatal>;

    /// The client's reply to a forwarded request, from the reply the job gave.
    fn forwarded(&mut self, reply: BytesMut) -> BytesMut;

    /// The client asked to close (QUIT): the connection closes once its
    /// replies are sent.
    fn quit(&self) -> bool;

    /// If a request run since the last call read or wrote stored data (in
    /// a cluster its reply needs the lease and waits until the log is
    /// durable), what it waits for; clears it.
    fn take_touched(&mut self) -> Option<Durability>;

    /// Memory the protocol state holds for the client (queued transactions,
    /// watched keys), counted in the client buffer budget.
    fn held_bytes(&self) -> usize;

    /// Called after each batch: release buffers grown past `keep` bytes.
    fn trim(&mut self, keep: usize);
}

/// Why a connection ended, for the log.
#[derive(Debug)]
enum End {
    Closed,
    Quit,
    ProtocolError,
    ReplyOverflow,
    /// Closed to keep all client buffers within the budget.
    OverBudget,
    Idle,
    /// Part of a request waited longer than the request timeout.
    RequestTimeout,
    Shutdown,
    /// Replication stopped before the replies' writes were durable.
    NotDurable,
    /// This server's lease lapsed while commands of the last batch ran:
    /// their replies were dropped (see `Conn::hold`).
    LeaseLapsed,
    Io(std::io::Error),
    /// To be handed back, to move to another worker (see `workers`).
    Moved,
    /// CLIENT KILL, or a monitor that fell behind.
    Killed,
}

/// What a connection awaits in a cluster (owned, so the select loop may
/// poll it beside reading and writing).
type Pending<T> = Option<Pin<Box<dyn Future<Output = T> + Send>>>;

/// Completes when `slot` has mail; never without a slot.
async fn wait_mail(slot: Option<Arc<ClientSlot>>) {
    match slot {
        Some(s) => s.mail().await,
        None => std::future::pending().await,
    }
}

/// Serves one connection speaking `P`.
pub(crate) fn serve<P: Protocol, S: ClientStream>(stream: S, conn: Connection, placement: Placement) -> Served {
    resume(Conn::<P>::new(conn), stream, placement)
}

/// Serves `c` on the worker of `placement` until it ends or moves.
fn resume<P: Protocol, S: ClientStream>(mut c: Conn<P>, stream: S, placement: Placement) -> Served {
    Box::pin(async move {
        let id = c._conn.id;
        let (mut rd, mut wr) = stream.split();
        match c.run::<S>(&mut rd, &mut wr, &placement).await {
            End::Moved => match S::unsplit(rd, wr).detach() {
                Ok((stream, reattach)) => {
                    let resume = Box::new(move |socket, placement| resume(c, reattach(socket), placement));
                    return Some(Moved { stream, resume });
                }
                Err(e) => debug!("{} connection {id} ended: cannot move: {e}", P::NAME),
            },
            End::Io(e) => debug!("{} connection {id} ended: i/o error: {e}", P::NAME),
            end => debug!("{} connection {id} ended: {end:?}", P::NAME),
        }
        None
    })
}

struct Conn<P> {
    ctx: Arc<ServerContext>,
    session: P,
    request_limit: usize,
    reply_limit: usize,
    input: BytesMut,
    output: BytesMut,
    /// Complete requests are left in `input` (the last batch was cut at
    /// `MAX_BATCH`, or paused by the budget).
    more: bool,
    /// Requests executed so far (tells the request timeout that one completed).
    executed: u64,
    /// How much to make room for before the next read.
    read_chunk: usize,
    /// Whether to spin for the client's next request after answering.
    spin: spin::SpinPolicy,
    /// Replies at the end of `output` not to send yet: per log position
    /// they wait for, the number of bytes (oldest first; positions grow).
    held: VecDeque<(u64, usize)>,
    /// Sum of the bytes in `held`.
    held_bytes: usize,
    /// The wait for the first of `held` to be durable.
    durable: Pending<bool>,
    /// A forwarded command's reply (or the pause before retrying a
    /// request); no request runs until it is in `output`.
    forward: Pending<BytesMut>,
    /// `forward` is a blocked command's wait ([`Step::Wait`]): a peer that
    /// closes meanwhile ends the connection at once, as Redis frees a
    /// blocked client that disconnects (the wait may never end).
    blocked: bool,
    /// The connection's entry in the client registry (see [`Protocol::client_slot`]).
    slot: Option<Arc<ClientSlot>>,
    _conn: Connection,
}

impl<P: Protocol> Conn<P> {
    fn new(conn: Connection) -> Conn<P> {
        let ctx = conn.ctx.clone();
        let cfg = &ctx.config;
        let session = P::new(ctx.clone(), &conn);
        Conn {
            slot: session.client_slot(),
            session,
            request_limit: cfg.request_buffer_size.0 as usize,
            reply_limit: cfg.reply_buffer_size.0 as usize,
            input: BytesMut::new(),
            output: BytesMut::new(),
            more: false,
            executed: 0,
            read_chunk: READ_CHUNK,
            spin: spin::SpinPolicy::default(),
            held: VecDeque::new(),
            held_bytes: 0,
            durable: None,
            forward: None,
            blocked: false,
            ctx,
            _conn: conn,
        }
    }

    async fn run<S: ClientStream>(
        &mut self,
        rd: &mut S::ReadHalf,
        wr: &mut S::WriteHalf,
        placement: &Placement,
    ) -> End {
        let ctx = self.ctx.clone();
        // One future for the whole connection: creating it per loop would
        // register and unregister a waiter on the shared shutdown channel
        // (a lock every connection contends for) for every request.
        let mut signal = self.ctx.shutdown_signal();
        let shutdown = async move {
            let _ = signal.wait_for(|s| *s).await;
        };
        tokio::pin!(shutdown);
        let mut idle = self.ctx.admin.settings.idle_timeout();
        // Mail from other connections (see `admin::clients`); one future
        // at a time, made anew after each delivery.
        let slot = self.slot.clone();
        let mut mail = std::pin::pin!(wait_mail(slot.clone()));
        let request_timeout = self.ctx.config.request_timeout();
        let far = Duration::from_secs(86400 * 365);
        let mut last_progress = Instant::now();
        // Since when `input` holds part of a request, and `executed` then.
        let mut partial: Option<(Instant, u64)> = None;
        // When the replies were last all sent (`None`: since the last read).
        let mut replied_at: Option<Instant> = None;
        // Closing: no more reading; the replies owed are sent until this instant.
        let mut closing: Option<(End, Instant)> = None;
        let timer = tokio::time::sleep(idle.unwrap_or(far));
        tokio::pin!(timer);
        // Replies written into a stream that holds them until flushed (TLS).
        let mut unflushed = false;
        loop {
            // Requests left to run: also after the peer closed its side (it
            // may have sent a whole pipeline and shut down writing).
            let draining = self.more && self.forward.is_none() && matches!(closing, None | Some((End::Closed, _)));
            if closing.is_some() && self.output.is_empty() && !draining && self.forward.is_none() {
                let _ = wr.shutdown().await;
                return closing.map_or(End::Closed, |(end, _)| end);
            }
            // Between requests, owing nothing and awaiting nothing, the
            // connection may move to another worker (asked last: a yes
            // claims the move).
            if closing.is_none()
                && self.output.is_empty()
                && !unflushed
                && !draining
                && self.forward.is_none()
                && self.durable.is_none()
                && self.held.is_empty()
                && placement.should_move()
            {
                return End::Moved;
            }
            if self.durable.is_none() {
                if let Some(&(pos, _)) = self.held.front() {
                    let ctx = ctx.clone();
                    self.durable = Some(Box::pin(async move { ctx.wait_durable(pos).await }));
                }
            }
            // Over the budget with replies unread: no reading, no executing.
            let paused = self.over_budget();
            let draining = draining && !paused;
            if let Some(t) = request_timeout {
                let waiting = !self.input.is_empty() && !self.more && self.forward.is_none() && closing.is_none();
                match partial {
                    _ if !waiting => partial = None,
                    Some((_, seen)) if seen == self.executed => {}
                    // Part of a request arrived (with the last read).
                    _ => {
                        partial = Some((last_progress, self.executed));
                        if timer.deadline() > last_progress + t {
                            timer.as_mut().reset(last_progress + t);
                        }
                    }
                }
            }
            let sendable = self.output.len() - self.held_bytes;
            let room = self.request_limit.saturating_sub(self.input.len());
            let can_read = closing.is_none() && room > 0 && !paused;
            let spare = self.input.capacity() - self.input.len();
            if can_read && spare < self.read_chunk.min(room) {
                self.input.reserve(self.read_chunk.max(self.input.len()).min(room));
            }
            let offered = (self.input.capacity() - self.input.len()).min(room);
            // Spin for the next request only right after answering a client
            // that sends its requests back to back (see `spin`).
            let spin_permit = if self.output.is_empty()
                && S::raw_half(rd).is_some()
                && !draining
                && self.forward.is_none()
                && replied_at.is_some()
                && self.spin.spin_next()
            {
                let permit = ctx.spin.try_enter(&ctx.stats);
                if permit.is_none() {
                    self.spin.not_spinning();
                }
                permit
            } else {
                None
            };
            tokio::select! {
                biased;
                // Writes, or once all is written into a stream that holds
                // bytes back (TLS records), a flush.
                r = async {
                    if sendable > 0 {
                        wr.write(&self.output[..sendable]).await.map(Some)
                    } else {
                        wr.flush().await.map(|()| None)
                    }
                }, if sendable > 0 || unflushed => match r {
                    Ok(None) => unflushed = false,
                    Ok(Some(0)) => return End::Closed,
                    Ok(Some(n)) => {
                        ServerStats::add(&self.ctx.stats.bytes_out, n as u64);
                        self.output.advance(n);
                        unflushed = S::BUFFERS_WRITES;
                        // One clock read per event: the clock can be a system call in a VM.
                        last_progress = Instant::now();
                        if self.output.is_empty() {
                            replied_at = Some(last_progress);
                            if self.output.capacity() > KEEP_BUFFER {
                                self.output = BytesMut::new();
                            }
                        }
                    }
                    Err(e) => return End::Io(e),
                },
                _ = self._conn.account.evicted(), if self._conn.account.is_charged() => return End::OverBudget,
                () = &mut mail, if slot.is_some() => {
                    mail.set(wait_mail(slot.clone()));
                    let from = self.output.len();
                    if let Some(s) = &slot {
                        if let Mail::Kill = s.take_mail(&mut self.output) {
                            return End::Killed;
                        }
                    }
                    // Monitor lines go after the replies held for durability,
                    // never before them.
                    if let Some(back) = self.held.back_mut() {
                        back.1 += self.output.len() - from;
                        self.held_bytes += self.output.len() - from;
                    }
                    if self.output.len() > self.reply_limit {
                        ServerStats::add(&self.ctx.stats.reply_overflows, 1);
                        return End::ReplyOverflow;
                    }
                    // The idle timeout may have changed (CONFIG SET timeout).
                    let now_idle = self.ctx.admin.settings.idle_timeout();
                    if now_idle != idle && closing.is_none() {
                        idle = now_idle;
                        // Sooner only: a later deadline is found when the
                        // timer fires (it may be the request timeout's).
                        if let Some(at) = idle.map(|t| last_progress + t) {
                            if at < timer.deadline() {
                                timer.as_mut().reset(at);
                            }
                        }
                    }
                }
                _ = &mut shutdown, if closing.is_none() => {
                    closing = Some((End::Shutdown, Instant::now() + CLOSE_GRACE));
                    timer.as_mut().reset(Instant::now() + CLOSE_GRACE);
                }
                // Never past the limit, whatever capacity the buffer grew to.
                r = async {
                    if let (Some(permit), Some(socket)) = (spin_permit, S::raw_half(rd)) {
                        let until = std::time::Instant::now() + spin::SPIN;
                        let caught = spin::read_until(socket, &mut self.input, room, until).await?;
                        drop(permit);
                        if let Some(n) = caught {
                            return Ok(n);
                        }
                    }
                    rd.read_buf(&mut (&mut self.input).limit(room)).await
                }, if can_read => match r {
                    Ok(0) if self.blocked => return End::Closed,
                    Ok(0) => closing = Some((End::Closed, Instant::now() + CLOSE_GRACE)),
                    Ok(n) => {
                        ServerStats::add(&self.ctx.stats.bytes_in, n as u64);
                        last_progress = Instant::now();
                        match replied_at.take() {
                            Some(t) => self.spin.record(last_progress - t),
                            None => self.spin.disarm(),
                        }
                        if n == offered {
                            self.read_chunk = (self.read_chunk * 2).min(MAX_READ_CHUNK);
                        }
                        if self.forward.is_some() {
                            // Run once the forwarded command is answered.
                            self.more = true;
                        } else if let Some(end) = self.execute() {
                            if matches!(end, End::ReplyOverflow) {
                                return end;
                            }
                            closing = Some((end, Instant::now() + CLOSE_GRACE));
                            timer.as_mut().reset(Instant::now() + CLOSE_GRACE);
                        }
                    }
                    Err(e) => return End::Io(e),
                },
                // More complete requests than one batch: run the next batch
                // after letting other connections of this worker run.
                _ = tokio::task::yield_now(), if draining => {
                    if let Some(end) = self.execute() {
                        if matches!(end, End::ReplyOverflow) {
                            return end;
                        }
                        closing = Some((end, Instant::now() + CLOSE_GRACE));
                        timer.as_mut().reset(Instant::now() + CLOSE_GRACE);
                    }
                }
                ok = async {
                    match self.durable.as_mut() {
                        Some(wait) => wait.await,
                        None => std::future::pending().await,
                    }
                }, if self.durable.is_some() => {
                    self.durable = None;
                    if ok {
                        if let Some((_, n)) = self.held.pop_front() {
                            self.held_bytes -= n;
                        }
                    } else {
                        // Never acknowledge writes that may be lost.
                        self.output.truncate(self.output.len() - self.held_bytes);
                        self.held.clear();
                        self.held_bytes = 0;
                        self.more = false;
                        closing = Some((End::NotDurable, Instant::now() + CLOSE_GRACE));
                        timer.as_mut().reset(Instant::now() + CLOSE_GRACE);
                    }
                }
                reply = async {
                    match self.forward.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if self.forward.is_some() => {
                    self.forward = None;
                    self.blocked = false;
                    let reply = self.session.forwarded(reply);
                    let from = self.output.len();
                    self.output.extend_from_slice(&reply);
                    if let Some(end) = self.hold(from) {
                        closing = Some((end, Instant::now() + CLOSE_GRACE));
                        timer.as_mut().reset(Instant::now() + CLOSE_GRACE);
                        continue;
                    }
                    if self.output.len() > self.reply_limit {
                        ServerStats::add(&self.ctx.stats.reply_overflows, 1);
                        return End::ReplyOverflow;
                    }
                    // The requests after it (if any) run next.
                    self.more = true;
                }
                _ = &mut timer => {
                    let now = Instant::now();
                    match closing.take() {
                        Some((end, until)) if now >= until => return end,
                        Some((end, until)) => {
                            timer.as_mut().reset(until);
                            closing = Some((end, until));
                        }
                        None => {
                            let stalled = partial.zip(request_timeout).map(|((since, _), t)| since + t);
                            if stalled.is_some_and(|at| now >= at) {
                                ServerStats::add(&self.ctx.stats.request_timeouts, 1);
                                debug!(
                                    "{} connection {} from {}: part of a request held longer than the request \
                                     timeout: closing",
                                    P::NAME,
                                    self._conn.id,
                                    self._conn.peer
                                );
                                return End::RequestTimeout;
                            }
                            let idle_at = idle.map(|idle| last_progress + idle);
                            if idle_at.is_some_and(|at| now >= at) {
                                ServerStats::add(&self.ctx.stats.idle_timeouts, 1);
                                return End::Idle;
                            }
                            let next = match (idle_at, stalled) {
                                (Some(a), Some(b)) => a.min(b),
                                (a, b) => a.or(b).unwrap_or(now + far),
                            };
                            timer.as_mut().reset(next);
                        }
                    }
                }
            }
        }
    }

    /// Executes the complete requests in the input buffer (at most
    /// [`MAX_BATCH`]; `more` tells whether some are left), appending the
    /// replies to the output buffer. Returns why the connection must close,
    /// if it must.
    fn execute(&mut self) -> Option<End> {
        let mut end = None;
        self.more = false;
        let from = self.output.len();
        for done in 0.. {
            if done == MAX_BATCH {
                self.more = true;
                break;
            }
            let (n, step) = match self.session.step(&self.input, &mut self.output) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    end = Some(self.protocol_error(e));
                    break;
                }
            };
            match step {
                Step::Done => {}
                Step::Forward(job) => {
                    ServerStats::add(&self.ctx.stats.forwarded_requests, 1);
                    self.forward = Some(Box::pin(forward::run(job)));
                    self.input.advance(n);
                    break;
                }
                Step::Retry => {
                    self.forward = Some(Box::pin(async {
                        tokio::time::sleep(NO_TABLET_RETRY).await;
                        BytesMut::new()
                    }));
                    break;
                }
                Step::Wait(until) => {
                    self.forward = Some(Box::pin(async {
                        until.await;
                        BytesMut::new()
                    }));
                    self.blocked = true;
                    break;
                }
            }
            self.input.advance(n);
            self.executed += 1;
            if self.output.len() > self.reply_limit {
                ServerStats::add(&self.ctx.stats.reply_overflows, 1);
                debug!(
                    "{} connection {}: {} bytes of unread replies, over the limit of {}: closing",
                    P::NAME,
                    self._conn.id,
                    self.output.len(),
                    self.reply_limit
                );
                return Some(End::ReplyOverflow);
            }
            if self.session.quit() {
                end = Some(End::Quit);
                break;
            }
            if self.output.len() > PAUSE_SLACK && self.over_budget() {
                self.more = true;
                break;
            }
        }
        if self.input.is_empty() && self.input.capacity() > KEEP_BUFFER {
            self.input = BytesMut::new();
            self.read_chunk = READ_CHUNK;
        }
        self.session.trim(KEEP_BUFFER);
        self.hold(from).or(end)
    }

    /// Reports the buffers to the client buffer budget; whether the
    /// connection must pause (it holds unread replies and the server is over
    /// the budget).
    fn over_budget(&mut self) -> bool {
        let unread = self.output.len();
        if let Some(slot) = &self.slot {
            use std::sync::atomic::Ordering::Relaxed;
            slot.qbuf.store(self.input.len(), Relaxed);
            slot.qbuf_cap.store(self.input.capacity(), Relaxed);
            slot.obl.store(unread, Relaxed);
            slot.omem.store(self.output.capacity(), Relaxed);
        }
        let account = &mut self._conn.account;
        let held = self.input.capacity() + self.output.capacity() + self.session.held_bytes();
        account.report(held, unread);
        account.throttled(unread)
    }

    /// Replies were appended to `output` from offset `from` on. In a
    /// cluster, if a command since the last call read or wrote stored data,
    /// they are held back until the log is durable up to now (so that no
    /// reply shows data a crash could still lose), or if replies before
    /// them are held. If this server's lease did not hold after those
    /// commands ran, the new replies are dropped and the connection must
    /// close ([`End::LeaseLapsed`]): another server may already serve their
    /// keys, so what they read may be stale.
    fn hold(&mut self, from: usize) -> Option<End> {
        let appended = self.output.len() - from;
        let touched = self.session.take_touched();
        if touched.is_some() && !self.ctx.lease_held() {
            ServerStats::add(&self.ctx.stats.lease_lapses, 1);
            self.output.truncate(from);
            self.more = false;
            return Some(End::LeaseLapsed);
        }
        let target = touched.and_then(|need| self.ctx.durable_target(need));
        match (target, self.held.back_mut()) {
            (None, None) => return None,
            (Some(pos), Some(back)) if back.0 >= pos => back.1 += appended,
            (Some(pos), _) => self.held.push_back((pos, appended)),
            (None, Some(back)) => back.1 += appended,
        }
        self.held_bytes += appended;
        None
    }

    fn protocol_error(&mut self, e: Fatal) -> End {
        ServerStats::add(&self.ctx.stats.protocol_errors, 1);
        debug!("{} connection {} from {}: {}", P::NAME, self._conn.id, self._conn.peer, e.reason);
        self.output.extend_from_slice(&e.reply);
        End::ProtocolError
    }
}
