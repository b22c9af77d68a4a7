//! One connection to the backup: the listener, the frame reader and the
//! three modes (`docs/replication.md`).
//!
//! The connection reads with non-blocking `try_read` only, so it always
//! knows when the socket has nothing more to give: that is when it sends
//! its ACKs (one per segment whose count advanced). A DATA frame is read in
//! three steps — the 16-byte header, the 4-byte offset, then the segment
//! bytes straight into the replica's buffer at that offset — and the header
//! and offset are checked before a single byte reaches the buffer. Any bad
//! input ends the connection with an ERROR; nothing here panics on input.
//!
//! With a cluster secret, a connection begins with the cluster handshake
//! ([`shoal_cluster::auth`]); until it succeeds nothing is read as a frame
//! and nothing is allocated. The identity it claims is the only master a
//! writing HELLO may name (a HELLO naming master 0 only raises the log's
//! fence: it may send nothing after). A peer that does not complete the
//! handshake within [`HANDSHAKE_TIMEOUT`] is closed. Connections are also
//! bounded per peer address (`max_connections_per_ip`).
//!
//! With internal TLS (`BackupConfig::tls`) a connection first completes a
//! mutual TLS handshake within [`HANDSHAKE_TIMEOUT`], and everything above
//! runs inside the session ([`InternalStream`]: its `try_read`, `try_write`
//! and `ready` behave as the socket's, so the frame reader is the same). A
//! clear-text peer is answered in clear text (ERROR, or
//! [`auth::TLS_ONLY`] for a cluster handshake) and closed, unread.
//!
//! Memory: an APPEND's body is read into one buffer per connection, only
//! for a replica open on that connection and only up to the bytes that
//! replica has left, so at most one segment's worth; it is released when
//! the connection has no open replica left.
//!
//! An EPOCH is applied in order with the frames around it: at once for a
//! replica this connection is writing (its buffer's metadata), otherwise
//! (a closed replica, whose epoch must reach the disk) on the blocking
//! pool while the connection reads nothing more; either way EPOCHED is
//! queued before anything that follows it.

use super::buffers::Buffer;
use super::replicas::{Opened, PartOut, ReadOut, Shared};
use crate::wire::{self, Header, Hello, Kind, Mode, DATA_PREFIX, HEADER_LEN, HELLO_LEN, OPEN_LEN};
use shoal_cluster::auth::{self, ClusterSecret, PerIpLimit, Port, HANDSHAKE_TIMEOUT};
use shoal_cluster::tls::{Accepted, InternalStream, TLS_HANDSHAKE_RECORD};
use shoal_cluster::ServerId;
use shoal_common::{LogId, SegmentId};
use shoal_engine::format::{self, Entry, HeaderCrc};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Bytes read in one go before ACKs are sent and other connections get
/// the (single) thread.
const DRAIN_BUDGET: usize = 4 << 20;
/// No more requests are read while this much output waits.
const OUT_LIMIT: usize = 1 << 20;
/// How long a closing connection tries to deliver its last frames.
const LINGER: Duration = Duration::from_secs(2);

/// Accepts connections until `stop` is notified; each is served by its own task.
pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, stop: Arc<Notify>) {
    let per_ip = PerIpLimit::default();
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.notified() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "backup: accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let c = &shared.counters;
        // Over a limit a TLS port closes without a word: clear bytes would
        // not be read as TLS.
        let answer = shared.config.tls.is_none();
        if c.connections_active.load(Ordering::Relaxed) >= shared.config.max_connections as u64 {
            c.connections_refused.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                if !answer {
                    return;
                }
                let mut out = Vec::new();
                wire::encode_text(Kind::Error, SegmentId(0), "too many connections", &mut out);
                linger_close(stream, &out).await;
            });
            continue;
        }
        let Some(slot) = per_ip.take(peer.ip(), shared.config.max_connections_per_ip) else {
            c.connections_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, "backup: refusing a connection: too many from this address");
            tokio::spawn(async move {
                if !answer {
                    return;
                }
                let mut out = Vec::new();
                wire::encode_text(Kind::Error, SegmentId(0), "too many connections from this address", &mut out);
                linger_close(stream, &out).await;
            });
            continue;
        };
        c.connections_accepted.fetch_add(1, Ordering::Relaxed);
        c.connections_active.fetch_add(1, Ordering::Relaxed);
        let guard = ActiveGuard(shared.clone());
        let shared = shared.clone();
        tokio::spawn(async move {
            let (_guard, _slot) = (guard, slot);
            let Some(mut stream) = open_tls(&shared, stream, peer).await else { return };
            let proven = match &shared.config.secret {
                None => None,
                Some(secret) => match admit(secret, &mut stream).await {
                    Ok(proven) => proven,
                    Err(Refusal { message, answer }) => {
                        shared.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, error = %message, "backup: refusing a connection");
                        if answer {
                            let mut out = Vec::new();
                            wire::encode_text(Kind::Error, SegmentId(0), &message, &mut out);
                            linger_close(stream, &out).await;
                        }
                        return;
                    }
                },
            };
            Conn::new(shared, stream, peer, proven).run().await;
        });
    }
}

/// With internal TLS, the TLS handshake; a clear-text peer is told why it
/// is refused and closed (`None`, as for a failed handshake).
async fn open_tls(shared: &Shared, stream: TcpStream, peer: SocketAddr) -> Option<InternalStream> {
    let Some(tls) = &shared.config.tls else { return Some(InternalStream::Plain(stream)) };
    let refused = |why: &dyn std::fmt::Display| {
        shared.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%peer, "backup: refusing a connection: {why}");
    };
    match tls.accept(stream).await {
        Ok(Accepted::Tls(s)) => Some(s),
        Ok(Accepted::Clear(mut stream)) => {
            refused(
                &"clear text on a port that speaks only TLS (the peer needs the cluster's \
                      --internal-tls-cert, --internal-tls-key and --internal-tls-ca)",
            );
            let first = auth::peek_start(&stream, Duration::from_secs(1)).await.ok().flatten();
            if first.is_some_and(|f| auth::is_handshake(&f)) {
                auth::refuse_clear_handshake(&mut stream).await;
            } else {
                let mut out = Vec::new();
                let why = "this backup speaks only TLS: the master needs the cluster's --internal-tls-cert, \
                           --internal-tls-key and --internal-tls-ca";
                wire::encode_text(Kind::Error, SegmentId(0), why, &mut out);
                linger_close(stream, &out).await;
            }
            None
        }
        Err(e) => {
            refused(&format_args!("internal TLS: {e}"));
            None
        }
    }
}

/// Why a connection was not admitted; `answer`: tell the peer in an ERROR
/// frame (an old-protocol peer; the handshake answers for itself).
struct Refusal {
    message: String,
    answer: bool,
}

/// Runs the acceptor's side of the cluster handshake; returns the server
/// the peer claims to be (0 on the wire: none).
async fn admit(secret: &ClusterSecret, stream: &mut InternalStream) -> Result<Option<ServerId>, Refusal> {
    let first = stream
        .peek_start(HANDSHAKE_TIMEOUT)
        .await
        .map_err(|e| Refusal { message: e.to_string(), answer: false })?
        .ok_or(Refusal { message: "closed before the handshake".into(), answer: false })?;
    if !stream.is_tls() && first[0] == TLS_HANDSHAKE_RECORD {
        return Err(Refusal {
            message: "the peer opened a TLS handshake, but this backup has no internal TLS (--internal-tls-cert)"
                .into(),
            answer: false,
        });
    }
    if !auth::is_handshake(&first) {
        return Err(Refusal {
            message: "this backup requires the cluster handshake: the master needs the cluster's \
                      --cluster-secret-file"
                .into(),
            answer: true,
        });
    }
    let accepting = auth::accept(stream, secret, Port::Backup)
        .await
        .map_err(|e| Refusal { message: e.to_string(), answer: false })?;
    let proven = accepting.identity.map(|i| ServerId(i.id));
    accepting.finish(stream, Ok(())).await.map_err(|e| Refusal { message: e.to_string(), answer: false })?;
    Ok(proven)
}

/// Counts a connection as active while it lives (even if its task is
/// dropped at shutdown).
struct ActiveGuard(Arc<Shared>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.counters.connections_active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why serving a connection stopped.
enum Stop {
    /// Bad input: answered with ERROR, counted, connection closed.
    Protocol(String),
    /// A request that cannot be served (READ of a missing replica): ERROR
    /// and close, as the protocol has it, but not the peer's fault.
    Answer(String),
    Io(io::Error),
}

fn bad(msg: impl Into<String>) -> Stop {
    Stop::Protocol(msg.into())
}

/// Why a drain of the socket stopped.
enum Drained {
    /// Nothing more to read now.
    Blocked,
    /// Read `DRAIN_BUDGET` bytes; more may be waiting.
    Budget,
    /// The peer closed its side.
    Eof,
    /// A reader request to execute before reading on.
    Request(Request),
    /// A peer HELLO was accepted: the connection goes to the peer handler.
    Peer,
}

enum Request {
    List(LogId),
    Read(LogId, SegmentId),
    ReadPart(LogId, SegmentId, Vec<wire::KeyRange>),
    FreeLog(LogId),
    /// An EPOCH for a replica this connection is not writing (closed).
    Epoch(LogId, SegmentId, u64),
}

/// Where the next bytes from the socket go.
#[derive(Clone, Copy)]
enum Rx {
    Header {
        got: usize,
    },
    /// A whole (bounded) body into `Conn::body`.
    Body {
        header: Header,
        got: usize,
    },
    /// A DATA frame's offset.
    Offset {
        segment: SegmentId,
        len: usize,
        got: usize,
        bytes: [u8; 4],
    },
    /// A DATA frame's bytes, into the buffer at `pos..end`.
    Data {
        segment: SegmentId,
        pos: usize,
        end: usize,
    },
}

/// What the HELLO established.
struct Session {
    mode: Mode,
    /// The master the HELLO named; 0: a fence, which sends nothing more.
    master: ServerId,
    log: LogId,
    version: u64,
    /// The log's highest version seen (not for readers).
    fence: Option<Arc<AtomicU64>>,
}

/// A replica this connection writes.
struct OpenReplica {
    buf: Arc<Buffer>,
    gen: u64,
    size: usize,
    received: usize,
    acked: usize,
    /// Conventional mode: the running header CRC of the entries so far.
    crc: HeaderCrc,
}

struct Conn {
    shared: Arc<Shared>,
    stream: InternalStream,
    peer: SocketAddr,
    rx: Rx,
    head: [u8; HEADER_LEN],
    body: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    session: Option<Session>,
    open: HashMap<SegmentId, OpenReplica>,
    /// With a cluster secret: the server the handshake claimed, the only
    /// master this connection may write for.
    proven: Option<ServerId>,
    /// A peer HELLO was accepted: read nothing more, hand the connection over.
    to_peer_handler: bool,
}

/// A non-blocking read: `None` when it would block, `Some(0)` at EOF.
fn try_read(stream: &mut InternalStream, buf: &mut [u8]) -> Result<Option<usize>, Stop> {
    loop {
        match stream.try_read(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Stop::Io(e)),
        }
    }
}

impl Conn {
    fn new(shared: Arc<Shared>, stream: InternalStream, peer: SocketAddr, proven: Option<ServerId>) -> Conn {
        Conn {
            shared,
            stream,
            peer,
            rx: Rx::Header { got: 0 },
            head: [0; HEADER_LEN],
            body: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            session: None,
            open: HashMap::new(),
            proven,
            to_peer_handler: false,
        }
    }

    async fn run(mut self) {
        let (msg, count) = match self.serve().await {
            Ok(hand_over) => {
                let rest = async {
                    self.stream.write_all(&self.out[self.out_pos..]).await?;
                    self.stream.flush().await
                };
                let sent = tokio::time::timeout(LINGER, rest).await;
                if hand_over && matches!(sent, Ok(Ok(()))) {
                    let migrating = self.session.as_ref().is_some_and(|s| s.mode == Mode::Migrate);
                    let handlers = match migrating {
                        true => self.shared.config.migrations.clone(),
                        false => self.shared.config.peers.clone(),
                    };
                    if let Some(handler) = handlers {
                        // Without a secret the HELLO's claim is all there is.
                        let claimed = self.session.as_ref().map(|s| s.master).filter(|m| m.0 != 0);
                        handler.0.serve(self.proven.or(claimed), self.peer, self.stream).await;
                    }
                }
                return;
            }
            Err(Stop::Io(e)) => {
                tracing::debug!(peer = %self.peer, error = %e, "backup: connection failed");
                return;
            }
            Err(Stop::Protocol(msg)) => (msg, true),
            Err(Stop::Answer(msg)) => (msg, false),
        };
        if count {
            self.shared.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
            tracing::info!(peer = %self.peer, error = %msg, "backup: closing a connection on bad input");
        }
        wire::encode_text(Kind::Error, SegmentId(0), &msg, &mut self.out);
        let out = std::mem::take(&mut self.out);
        linger_close(self.stream, &out[self.out_pos..]).await;
    }

    /// Serves frames until the peer closes (`false`) or a peer HELLO hands
    /// the connection over (`true`, its HELLO_OK still in `out`).
    async fn serve(&mut self) -> Result<bool, Stop> {
        loop {
            let reading = self.out.len() - self.out_pos < OUT_LIMIT;
            let interest = match (reading, self.out_pos < self.out.len()) {
                (true, false) => Interest::READABLE,
                (true, true) => Interest::READABLE | Interest::WRITABLE,
                (false, _) => Interest::WRITABLE,
            };
            let ready = self.stream.ready(interest).await.map_err(Stop::Io)?;
            if reading && (ready.is_readable() || ready.is_read_closed()) {
                let drained = self.drain()?;
                self.ack()?;
                match drained {
                    Drained::Blocked => {}
                    Drained::Budget => {
                        self.write_some()?;
                        tokio::task::yield_now().await;
                    }
                    Drained::Eof => return Ok(false),
                    Drained::Peer => return Ok(true),
                    Drained::Request(r) => self.execute(r).await?,
                }
            }
            self.write_some()?;
        }
    }

    /// Writes what the socket takes without waiting.
    fn write_some(&mut self) -> Result<(), Stop> {
        while self.out_pos < self.out.len() {
            match self.stream.try_write(&self.out[self.out_pos..]) {
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Stop::Io(e)),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    /// Reads and handles frames until the socket would block (or the budget
    /// is spent, the peer closes, or a reader request needs executing).
    fn drain(&mut self) -> Result<Drained, Stop> {
        let mut budget = DRAIN_BUDGET;
        loop {
            let n = match self.rx {
                Rx::Header { got } => {
                    let Some(n) = try_read(&mut self.stream, &mut self.head[got..])? else {
                        return Ok(Drained::Blocked);
                    };
                    if n > 0 {
                        if got + n < HEADER_LEN {
                            self.rx = Rx::Header { got: got + n };
                        } else {
                            self.rx = Rx::Header { got: 0 };
                            if let Some(r) = self.start_frame()? {
                                return Ok(Drained::Request(r));
                            }
                        }
                    }
                    n
                }
                Rx::Body { header, got } => {
                    let Some(n) = try_read(&mut self.stream, &mut self.body[got..])? else {
                        return Ok(Drained::Blocked);
                    };
                    if n > 0 {
                        if got + n < self.body.len() {
                            self.rx = Rx::Body { header, got: got + n };
                        } else {
                            self.rx = Rx::Header { got: 0 };
                            if let Some(r) = self.frame(header)? {
                                return Ok(Drained::Request(r));
                            }
                            if self.to_peer_handler {
                                return Ok(Drained::Peer);
                            }
                        }
                    }
                    n
                }
                Rx::Offset { segment, len, got, mut bytes } => {
                    let Some(n) = try_read(&mut self.stream, &mut bytes[got..])? else { return Ok(Drained::Blocked) };
                    if n > 0 {
                        self.rx = if got + n < DATA_PREFIX {
                            Rx::Offset { segment, len, got: got + n, bytes }
                        } else {
                            self.start_data(segment, u32::from_le_bytes(bytes) as usize, len)?
                        };
                    }
                    n
                }
                Rx::Data { segment, pos, end } => {
                    let o = self.open.get_mut(&segment).ok_or_else(|| bad("DATA for a segment not open"))?;
                    let mut g = o.buf.lock();
                    if g.gen != o.gen {
                        return Err(bad(format!("replica of segment {} was reset or freed meanwhile", segment.0)));
                    }
                    let Some(n) = try_read(&mut self.stream, g.data_mut(pos, end))? else {
                        return Ok(Drained::Blocked);
                    };
                    g.written(pos + n);
                    drop(g);
                    o.received = pos + n;
                    self.shared.counters.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                    if n > 0 {
                        self.rx = if pos + n == end {
                            Rx::Header { got: 0 }
                        } else {
                            Rx::Data { segment, pos: pos + n, end }
                        };
                    }
                    n
                }
            };
            if n == 0 {
                return Ok(Drained::Eof);
            }
            budget = budget.saturating_sub(n);
            if budget == 0 {
                return Ok(Drained::Budget);
            }
        }
    }

    /// A whole header arrived: checks it (kind allowed in this mode, fence,
    /// body length for the kind) and sets up the reading of its body.
    fn start_frame(&mut self) -> Result<Option<Request>, Stop> {
        let max_body = self.shared.config.segment_bytes as usize + 16;
        let h = Header::decode(&self.head, max_body).map_err(|e| {
            if self.head[0] == TLS_HANDSHAKE_RECORD && !self.stream.is_tls() {
                bad(format!("{e}: the peer speaks TLS, but this backup has no internal TLS (--internal-tls-cert)"))
            } else {
                bad(e.to_string())
            }
        })?;
        match &self.session {
            None if h.kind != Kind::Hello => return Err(bad("expected HELLO")),
            None => {}
            Some(s) => {
                let allowed = match s.mode {
                    Mode::Tailwind | Mode::Conventional if s.master.0 == 0 => false,
                    Mode::Tailwind => {
                        matches!(h.kind, Kind::Open | Kind::Data | Kind::Close | Kind::Free | Kind::Epoch)
                    }
                    Mode::Conventional => {
                        matches!(h.kind, Kind::Open | Kind::Append | Kind::Close | Kind::Free | Kind::Epoch)
                    }
                    Mode::Reader => matches!(h.kind, Kind::List | Kind::Read | Kind::ReadPart | Kind::FreeLog),
                    // Handed over right after its HELLO: never read here.
                    Mode::Peer | Mode::Migrate => false,
                };
                if !allowed {
                    return Err(bad(format!("{:?} is not allowed on a {:?} connection", h.kind, s.mode)));
                }
                if let Some(fence) = &s.fence {
                    let seen = fence.load(Ordering::Acquire);
                    if seen > s.version {
                        return Err(bad(format!("log {} version {} is fenced by version {seen}", s.log.0, s.version)));
                    }
                }
            }
        }
        let len_ok = match h.kind {
            Kind::Hello => h.body_len == HELLO_LEN,
            Kind::Open => h.body_len == OPEN_LEN,
            Kind::Close | Kind::List | Kind::Read | Kind::FreeLog | Kind::Epoch => h.body_len == 8,
            Kind::Free => h.body_len == 0,
            Kind::ReadPart => wire::read_part_len_ok(h.body_len),
            Kind::Data | Kind::Append => {
                h.body_len >= DATA_PREFIX && h.body_len - DATA_PREFIX <= self.shared.config.segment_bytes as usize
            }
            _ => return Err(bad(format!("{:?} is an answer, not a request", h.kind))),
        };
        if !len_ok {
            return Err(bad(format!("{:?} frame with a {}-byte body", h.kind, h.body_len)));
        }
        if h.kind == Kind::Data {
            self.rx = Rx::Offset { segment: h.segment, len: h.body_len - DATA_PREFIX, got: 0, bytes: [0; 4] };
            return Ok(None);
        }
        if h.kind == Kind::Append {
            let o = self
                .open
                .get(&h.segment)
                .ok_or_else(|| bad(format!("APPEND to segment {}, which is not open here", h.segment.0)))?;
            if h.body_len - DATA_PREFIX > o.size - o.received {
                return Err(bad(format!(
                    "APPEND of {} bytes to segment {}, which has {} left",
                    h.body_len - DATA_PREFIX,
                    h.segment.0,
                    o.size - o.received
                )));
            }
        }
        self.body.clear();
        self.body.resize(h.body_len, 0);
        if h.body_len == 0 {
            return self.frame(h);
        }
        self.rx = Rx::Body { header: h, got: 0 };
        Ok(None)
    }

    /// A DATA frame's offset arrived: it must continue the segment exactly
    /// and the bytes must fit, or nothing is received.
    fn start_data(&mut self, segment: SegmentId, offset: usize, len: usize) -> Result<Rx, Stop> {
        let o = self
            .open
            .get(&segment)
            .ok_or_else(|| bad(format!("DATA for segment {}, which is not open on this connection", segment.0)))?;
        if offset != o.received {
            return Err(bad(format!(
                "DATA for segment {} at offset {offset}, but {} bytes were received",
                segment.0, o.received
            )));
        }
        if offset + len > o.size {
            return Err(bad(format!("DATA for segment {} runs past its size {}", segment.0, o.size)));
        }
        Ok(if len == 0 { Rx::Header { got: 0 } } else { Rx::Data { segment, pos: offset, end: offset + len } })
    }

    /// A whole frame (other than DATA) with its body in `self.body`.
    fn frame(&mut self, h: Header) -> Result<Option<Request>, Stop> {
        if h.kind == Kind::Hello {
            self.hello()?;
            if self.session.as_ref().is_some_and(|s| matches!(s.mode, Mode::Peer | Mode::Migrate)) {
                self.to_peer_handler = true;
            }
            return Ok(None);
        }
        let s = self.session.as_ref().ok_or_else(|| bad("expected HELLO"))?;
        let (log, version) = (s.log, s.version);
        match h.kind {
            Kind::Open => {
                let open = wire::decode_open(&self.body).map_err(|e| bad(e.to_string()))?;
                let size = open.size;
                let opened = self
                    .shared
                    .open(log, h.segment, version, size, open.epoch)
                    .map_err(|e| bad(format!("opening segment {}: {e}", h.segment.0)))?;
                match opened {
                    Opened::Yes { buf, gen } => {
                        let o = OpenReplica {
                            buf,
                            gen,
                            size: size as usize,
                            received: 0,
                            acked: 0,
                            crc: HeaderCrc::default(),
                        };
                        self.open.insert(h.segment, o);
                        wire::encode_empty(Kind::Opened, h.segment, &mut self.out);
                    }
                    Opened::Refused(why) => wire::encode_text(Kind::Refused, h.segment, &why, &mut self.out),
                }
            }
            Kind::Close => {
                let (len, checksum) = wire::decode_close(&self.body).map_err(|e| bad(e.to_string()))?;
                let o = self
                    .open
                    .get(&h.segment)
                    .ok_or_else(|| bad(format!("CLOSE of segment {}, which is not open here", h.segment.0)))?;
                if o.received != len as usize {
                    return Err(bad(format!(
                        "CLOSE of segment {} at {len} bytes, but {} were received",
                        h.segment.0, o.received
                    )));
                }
                self.ack_one(h.segment)?;
                let o = &self.open[&h.segment];
                self.shared.close(log, h.segment, &o.buf, o.gen, len, checksum).map_err(bad)?;
                self.open.remove(&h.segment);
                self.release_body();
                wire::encode_u32(Kind::Closed, h.segment, len, &mut self.out);
            }
            Kind::Free => {
                self.open.remove(&h.segment);
                self.release_body();
                self.shared.free(log, h.segment);
            }
            Kind::Append => self.append(h.segment)?,
            Kind::Epoch => {
                let epoch = wire::decode_epoch(&self.body).map_err(|e| bad(e.to_string()))?;
                if !self.open.contains_key(&h.segment) {
                    return Ok(Some(Request::Epoch(log, h.segment, epoch)));
                }
                // Open here: its buffer's metadata, no disk (as its bytes).
                self.shared.raise_epoch(log, h.segment, epoch).map_err(bad)?;
                wire::encode_epoch(Kind::Epoched, h.segment, epoch, &mut self.out);
            }
            Kind::List => return Ok(Some(Request::List(self.log_in_body("LIST")?))),
            Kind::Read => return Ok(Some(Request::Read(self.log_in_body("READ")?, h.segment))),
            Kind::ReadPart => {
                let (log, ranges) = wire::decode_read_part(&self.body).map_err(|e| bad(e.to_string()))?;
                return Ok(Some(Request::ReadPart(log, h.segment, ranges)));
            }
            Kind::FreeLog => return Ok(Some(Request::FreeLog(self.log_in_body("FREE_LOG")?))),
            _ => return Err(bad(format!("{:?} is not a request", h.kind))),
        }
        Ok(None)
    }

    /// Gives an APPEND-sized body buffer back once no replica is open here.
    fn release_body(&mut self) {
        if self.open.is_empty() && self.body.capacity() > HEADER_LEN + HELLO_LEN {
            self.body = Vec::new();
        }
    }

    fn log_in_body(&self, what: &'static str) -> Result<LogId, Stop> {
        wire::decode_u64(&self.body, what).map(LogId).map_err(|e| bad(e.to_string()))
    }

    fn hello(&mut self) -> Result<(), Stop> {
        if self.session.is_some() {
            return Err(bad("a second HELLO"));
        }
        let hello = Hello::decode(&self.body).map_err(|e| bad(format!("HELLO: {e}")))?;
        let writes = matches!(hello.mode, Mode::Tailwind | Mode::Conventional) && hello.master.0 != 0;
        if writes && self.shared.config.secret.is_some() && self.proven != Some(hello.master) {
            return Err(bad(format!(
                "HELLO as master {}, but this connection's handshake claimed {}",
                hello.master,
                self.proven.map_or("no server".to_string(), |p| format!("server {p}"))
            )));
        }
        if matches!(hello.mode, Mode::Peer | Mode::Migrate) {
            if hello.mode == Mode::Peer && self.shared.config.peers.is_none() {
                return Err(bad("this server takes no symmetric-caching peers"));
            }
            if hello.mode == Mode::Migrate && self.shared.config.migrations.is_none() {
                return Err(bad("this server takes no tablet migrations"));
            }
            if self.shared.config.secret.is_some() && self.proven.is_none() {
                return Err(bad("a peer HELLO needs a handshake that claimed a server id"));
            }
            if self.proven.is_some_and(|p| hello.master.0 != 0 && p != hello.master) {
                return Err(bad(format!(
                    "peer HELLO as server {}, but this connection's handshake claimed {}",
                    hello.master,
                    self.proven.map_or(0, |p| p.0)
                )));
            }
        }
        let fence = match hello.mode {
            Mode::Reader | Mode::Peer | Mode::Migrate => None,
            Mode::Tailwind | Mode::Conventional => Some(self.shared.hello(hello.log, hello.log_version).map_err(bad)?),
        };
        self.session =
            Some(Session { mode: hello.mode, master: hello.master, log: hello.log, version: hello.log_version, fence });
        wire::encode_empty(Kind::HelloOk, SegmentId(0), &mut self.out);
        Ok(())
    }

    /// Conventional mode: the APPEND's body is in `self.body`; every entry is
    /// decoded and checked (its CRC, and each checksum entry against the
    /// running header CRC) before the bytes are copied into the buffer.
    fn append(&mut self, segment: SegmentId) -> Result<(), Stop> {
        let offset = wire::decode_u32(&self.body[..DATA_PREFIX], "APPEND").map_err(|e| bad(e.to_string()))? as usize;
        let bytes = &self.body[DATA_PREFIX..];
        let o = self
            .open
            .get_mut(&segment)
            .ok_or_else(|| bad(format!("APPEND to segment {}, which is not open here", segment.0)))?;
        if offset != o.received || offset + bytes.len() > o.size {
            return Err(bad(format!(
                "APPEND to segment {} at {offset}+{}: {} received, size {}",
                segment.0,
                bytes.len(),
                o.received,
                o.size
            )));
        }
        let mut crc = o.crc;
        let mut pos = 0;
        while pos < bytes.len() {
            let at = offset + pos;
            let (entry, n) = format::decode(&bytes[pos..]).map_err(|e| bad(format!("APPEND entry at {at}: {e}")))?;
            let h = format::read_header(&bytes[pos..]).map_err(|e| bad(format!("APPEND entry at {at}: {e}")))?;
            crc.add(&bytes[pos..pos + h.header_len]);
            if let Entry::Checksum(c) = entry {
                if c != crc.value() {
                    return Err(bad(format!("APPEND checksum entry at {at} does not match the segment's entries")));
                }
            }
            pos += n;
        }
        let end = offset + bytes.len();
        {
            let mut g = o.buf.lock();
            if g.gen != o.gen {
                return Err(bad(format!("replica of segment {} was reset or freed meanwhile", segment.0)));
            }
            g.data_mut(offset, end).copy_from_slice(bytes);
            g.written(end);
            if self.shared.config.sync_open {
                g.sync_data(offset, end).map_err(Stop::Io)?;
            }
        }
        o.received = end;
        o.acked = end;
        o.crc = crc;
        let c = &self.shared.counters;
        c.conventional_appends.fetch_add(1, Ordering::Relaxed);
        c.bytes_received.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        wire::encode_u32(Kind::Appended, segment, end as u32, &mut self.out);
        Ok(())
    }

    /// One ACK per segment whose received count advanced (synced first
    /// with `sync_open`).
    fn ack(&mut self) -> Result<(), Stop> {
        let advanced: Vec<SegmentId> =
            self.open.iter().filter(|(_, o)| o.received > o.acked).map(|(s, _)| *s).collect();
        for segment in advanced {
            self.ack_one(segment)?;
        }
        Ok(())
    }

    fn ack_one(&mut self, segment: SegmentId) -> Result<(), Stop> {
        let Some(o) = self.open.get_mut(&segment) else { return Ok(()) };
        if o.received <= o.acked {
            return Ok(());
        }
        if self.shared.config.sync_open {
            let g = o.buf.lock();
            if g.gen != o.gen {
                return Err(bad(format!("replica of segment {} was reset or freed meanwhile", segment.0)));
            }
            g.sync_data(o.acked, o.received).map_err(Stop::Io)?;
        }
        o.acked = o.received;
        wire::encode_u32(Kind::Ack, segment, o.received as u32, &mut self.out);
        Ok(())
    }

    /// Runs a reader request on the blocking pool (it reads files and scans
    /// buffers) and queues its answer.
    async fn execute(&mut self, request: Request) -> Result<(), Stop> {
        enum Answer {
            Listing(Vec<wire::ReplicaInfo>),
            Segment(SegmentId, Result<ReadOut, String>),
            Part(SegmentId, Result<PartOut, String>),
            Freed,
            Epoched(SegmentId, u64, Result<(), String>),
        }
        let shared = self.shared.clone();
        let answer = match request {
            // Recovery's bulk work: at low priority, on a thread of its own.
            Request::ReadPart(log, segment, ranges) => {
                let cut = crate::spawn_recovery_work("shoal-backup-part", move || {
                    Answer::Part(segment, shared.read_part(log, segment, &ranges))
                })
                .map_err(|e| Stop::Answer(format!("cannot start a thread: {e}")))?;
                cut.await.map_err(|_| Stop::Answer("internal error: READ_PART failed".into()))?
            }
            request => tokio::task::spawn_blocking(move || match request {
                Request::List(log) => Answer::Listing(shared.list(log)),
                Request::Read(log, segment) => Answer::Segment(segment, shared.read(log, segment)),
                // Taken by the arm above.
                Request::ReadPart(_, segment, _) => Answer::Part(segment, Err("internal error".into())),
                Request::FreeLog(log) => {
                    shared.free_log(log);
                    Answer::Freed
                }
                Request::Epoch(log, segment, epoch) => {
                    Answer::Epoched(segment, epoch, shared.raise_epoch(log, segment, epoch))
                }
            })
            .await
            .map_err(|e| Stop::Answer(format!("internal error: {e}")))?,
        };
        match answer {
            Answer::Listing(replicas) => wire::encode_listing(&replicas, &mut self.out),
            Answer::Segment(segment, Ok(r)) => {
                wire::encode_segment_prefix(segment, r.info.log_version, r.info.state, r.info.len, &mut self.out);
                self.out.extend_from_slice(&r.bytes);
            }
            Answer::Part(segment, Ok(p)) => {
                wire::encode_part_prefix(segment, &p.info, p.entries.len(), &mut self.out);
                self.out.extend_from_slice(&p.entries);
            }
            Answer::Segment(_, Err(msg)) | Answer::Part(_, Err(msg)) => return Err(Stop::Answer(msg)),
            Answer::Freed => wire::encode_empty(Kind::Freed, SegmentId(0), &mut self.out),
            Answer::Epoched(segment, epoch, Ok(())) => wire::encode_epoch(Kind::Epoched, segment, epoch, &mut self.out),
            // The master believes this backup holds a replica it does not
            // (or the disk failed): its bad input, as a DATA for a segment
            // not open here would be.
            Answer::Epoched(_, _, Err(msg)) => return Err(Stop::Protocol(msg)),
        }
        Ok(())
    }
}

/// Sends `last` (an ERROR), closes the sending side and reads whatever the
/// peer still sends for a moment, so the peer gets the ERROR rather than a
/// reset.
async fn linger_close<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, last: &[u8]) {
    let _ = tokio::time::timeout(LINGER, async {
        stream.write_all(last).await?;
        stream.flush().await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 16 << 10];
        let mut total = 0usize;
        while total < 64 << 20 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => total += n,
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
}
