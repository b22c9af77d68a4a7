//! One blocking connection to one server, over `std::net` with its own
//! framing: the transport of [`crate::blocking::Client`].
//!
//! The socket stays in non-blocking mode. Waiting for a response first
//! spins for a short, adaptive time retrying the read (a reply on loopback
//! often comes back within a few tens of microseconds, sooner than the
//! kernel would wake a blocked thread), then blocks in `poll(2)`. The spin
//! budget never exceeds [`ClientConfig::spin`] per wait, grows back while
//! replies come quickly and shrinks while they are slow, so an idle or slow
//! server costs no CPU.

use crate::error::ClientError;
use crate::ops::ResponseFrame;
use crate::tls::ClientTls;
use shoal_proto::{check_frame, ErrorStatus, FrameError, Request, Response, DEFAULT_MAX_BODY_BYTES, HEADER_LEN};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Settings shared by the blocking and async clients.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Largest frame body sent or accepted (must not exceed the server's).
    pub max_body_bytes: u32,
    /// Longest the blocking client spins waiting for a reply before it
    /// blocks (0 disables spinning). The actual budget adapts below this.
    pub spin: Duration,
    /// Longest to wait for a connection or for any reply (`None`: forever).
    pub timeout: Option<Duration>,
    /// Log every new connection in with these before using it (needed
    /// when the servers have a password or users; see `docs/security.md`).
    pub credentials: Option<Credentials>,
    /// Speak TLS to the servers (needed when their client ports do).
    pub tls: Option<ClientTls>,
    /// Speak mutual TLS to the coordinator (needed when its control port
    /// does: the cluster has internal TLS, `docs/security.md`): a
    /// certificate of the cluster CA. Only `connect_cluster` uses it.
    pub coordinator_tls: Option<shoal_cluster::tls::InternalTls>,
    /// Symmetric caching (`docs/symmetric-caching.md`): the async client
    /// fetches each group's filter of hot keys and sends reads of keys it
    /// holds to any member of the key's group, round-robin, instead of
    /// the key's master. On by default; it costs one small request per
    /// group every half second when the servers run without it.
    pub spread_hot_reads: bool,
}

/// A user name and password for the native protocol's AUTH request.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl Credentials {
    /// The `default` user (the one a server's `--password` protects).
    pub fn password(password: impl Into<String>) -> Credentials {
        Credentials { user: "default".into(), password: password.into() }
    }

    pub(crate) fn request(&self) -> Request<'_> {
        Request::Auth { user: self.user.as_bytes(), password: self.password.as_bytes() }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <redacted>)", self.user)
    }
}

/// The outcome of an AUTH request's response.
pub(crate) fn login_result(frame: &ResponseFrame) -> Result<(), ClientError> {
    match frame.reply()? {
        Ok(Response::Auth) => Ok(()),
        Ok(r) => Err(ClientError::Protocol(format!("unexpected response to AUTH: {:?}", r.opcode()))),
        Err(ErrorStatus::AuthFailed) => Err(ClientError::AuthFailed),
        Err(s) => Err(ClientError::Refused(s)),
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            spin: Duration::from_micros(50),
            timeout: Some(Duration::from_secs(30)),
            credentials: None,
            tls: None,
            coordinator_tls: None,
            spread_hot_reads: true,
        }
    }
}

const INITIAL_BUF: usize = 64 * 1024;
const MIN_SPIN: Duration = Duration::from_micros(2);
/// A connection unused for this long is checked for a close by the server
/// before it is used again.
const STALE_CHECK_AFTER: Duration = Duration::from_millis(100);

/// The adaptive spin budget (see the module comment).
#[derive(Debug)]
struct Spinner {
    max: Duration,
    budget: Duration,
}

impl Spinner {
    /// Records how long a wait took and whether spinning caught the reply.
    fn record(&mut self, waited: Duration, caught_spinning: bool) {
        if caught_spinning {
            return;
        }
        if waited <= self.max * 2 {
            // The reply came just after we gave up: spinning longer pays.
            self.budget = (self.budget * 2).max(MIN_SPIN).min(self.max);
        } else {
            // A slow or idle server: spinning only burns CPU.
            self.budget /= 2;
        }
    }
}

/// A connection carrying pipelined requests. `send` queues a request and
/// returns its id; `recv`/`recv_id` return responses (those that arrive
/// while looking for another id are kept until asked for).
pub struct Connection {
    io: Transport,
    addr: SocketAddr,
    /// Received bytes live in `buf[start..end]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    next_id: u64,
    stash: HashMap<u64, ResponseFrame>,
    in_flight: usize,
    max_body: u32,
    timeout: Option<Duration>,
    spinner: Spinner,
    last_used: Instant,
}

impl Connection {
    /// Connects to `addr` (TCP_NODELAY, non-blocking) and logs in with
    /// `config.credentials`, if any ([`ClientError::AuthFailed`] if they
    /// are refused).
    pub fn connect(addr: SocketAddr, config: &ClientConfig) -> Result<Connection, ClientError> {
        let stream = match config.timeout {
            Some(t) => TcpStream::connect_timeout(&addr, t)?,
            None => TcpStream::connect(addr)?,
        };
        stream.set_nodelay(true)?;
        let tls = match &config.tls {
            Some(tls) => Some(Box::new(handshake(tls.session(addr)?, &stream, config.timeout)?)),
            None => None,
        };
        stream.set_nonblocking(true)?;
        let mut conn = Connection {
            io: Transport { stream, tls },
            addr,
            buf: vec![0; INITIAL_BUF],
            start: 0,
            end: 0,
            out: Vec::new(),
            next_id: 1,
            stash: HashMap::new(),
            in_flight: 0,
            max_body: config.max_body_bytes,
            timeout: config.timeout,
            spinner: Spinner { max: config.spin, budget: config.spin },
            last_used: Instant::now(),
        };
        if let Some(c) = &config.credentials {
            login_result(&conn.call(&c.request())?)?;
        }
        Ok(conn)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests sent whose responses were not yet returned.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues a request; it is written by the next `flush` or `recv`.
    /// Returns its request id. A request over the frame limit is refused
    /// here and not sent.
    pub fn send(&mut self, req: &Request<'_>) -> Result<u64, ClientError> {
        let id = self.next_id;
        let before = self.out.len();
        let len = req.encode(id, &mut self.out);
        if len - HEADER_LEN > self.max_body as usize {
            self.out.truncate(before);
            return Err(ClientError::RequestTooLarge { len: len - HEADER_LEN, max: self.max_body });
        }
        self.next_id += 1;
        self.in_flight += 1;
        self.last_used = Instant::now();
        if self.out.len() >= INITIAL_BUF {
            self.flush()?;
        }
        Ok(id)
    }

    /// Whether the server closed this connection while it sat unused (for
    /// example after its idle timeout). Checked without blocking, and only
    /// when the connection has been idle for a while, so a pooled
    /// connection is replaced before a request is lost on it.
    pub fn is_stale(&mut self) -> bool {
        if self.in_flight > 0 || self.last_used.elapsed() < STALE_CHECK_AFTER {
            return false;
        }
        self.last_used = Instant::now();
        self.read_available().is_err()
    }

    /// Sends one request and waits for its response.
    pub fn call(&mut self, req: &Request<'_>) -> Result<ResponseFrame, ClientError> {
        let id = self.send(req)?;
        self.recv_id(id)
    }

    /// Writes every queued request. While the socket is full it reads
    /// responses, so a deep pipeline never deadlocks against the server.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        let mut written = 0;
        while written < self.out.len() || self.io.pending() {
            match self.io.write(&self.out[written..]) {
                Ok(0) if written < self.out.len() => return Err(ClientError::Closed),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let ev = poll(&self.io.stream, libc::POLLOUT | libc::POLLIN, self.timeout)?;
                    if ev & libc::POLLIN != 0 {
                        self.read_available()?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
        self.out.clear();
        Ok(())
    }

    /// The next response, in arrival order.
    pub fn recv(&mut self) -> Result<ResponseFrame, ClientError> {
        if let Some(&id) = self.stash.keys().next() {
            let f = self.stash.remove(&id).expect("key present");
            self.in_flight -= 1;
            return Ok(f);
        }
        self.flush()?;
        loop {
            if let Some(f) = self.next_frame()? {
                self.in_flight -= 1;
                return Ok(f);
            }
            self.wait_and_read()?;
        }
    }

    /// The response to request `id`; others that arrive first are kept.
    pub fn recv_id(&mut self, id: u64) -> Result<ResponseFrame, ClientError> {
        if let Some(f) = self.stash.remove(&id) {
            self.in_flight -= 1;
            return Ok(f);
        }
        self.flush()?;
        loop {
            while let Some(f) = self.next_frame()? {
                if f.request_id == id {
                    self.in_flight -= 1;
                    return Ok(f);
                }
                self.stash.insert(f.request_id, f);
            }
            self.wait_and_read()?;
        }
    }

    /// Takes one whole frame from the buffer, if there is one.
    fn next_frame(&mut self) -> Result<Option<ResponseFrame>, ClientError> {
        let avail = &self.buf[self.start..self.end];
        let h = match check_frame(avail, self.max_body) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(FrameError::TooLarge { header, max }) => {
                return Err(ClientError::Protocol(format!(
                    "response of {} bytes exceeds the limit {max}",
                    header.body_len
                )))
            }
            Err(e) => return Err(ClientError::Protocol(e.to_string())),
        };
        if !h.is_response() {
            return Err(ClientError::Protocol("server sent a request frame".into()));
        }
        let body = avail[HEADER_LEN..h.frame_len()].to_vec();
        self.start += h.frame_len();
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(Some(ResponseFrame { request_id: h.request_id, opcode: h.opcode, body }))
    }

    /// Makes room at the end of the buffer: compacts, and grows when the
    /// buffer is full of unconsumed bytes (a large frame, or responses
    /// arriving while a deep pipeline is flushed).
    fn make_room(&mut self) {
        if self.end < self.buf.len() {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
    }

    /// Reads whatever is available without waiting.
    fn read_available(&mut self) -> Result<(), ClientError> {
        loop {
            self.make_room();
            match self.io.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// Waits for at least one byte: spins with non-blocking reads for the
    /// current budget, then blocks in `poll`.
    fn wait_and_read(&mut self) -> Result<(), ClientError> {
        self.make_room();
        let started = Instant::now();
        let spin_until = started + self.spinner.budget;
        let mut spinning = !self.spinner.budget.is_zero();
        loop {
            match self.io.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => {
                    self.end += n;
                    self.spinner.record(started.elapsed(), spinning);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if spinning && Instant::now() < spin_until {
                        std::hint::spin_loop();
                        continue;
                    }
                    spinning = false;
                    let ev = poll(&self.io.stream, libc::POLLIN, self.timeout)?;
                    if ev == 0 {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "no reply from the server").into());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
    }
}

/// A connection's socket, and its TLS session when TLS is on. The socket
/// is non-blocking; so are reads and writes through the session.
struct Transport {
    stream: TcpStream,
    tls: Option<Box<rustls::ClientConnection>>,
}

impl Transport {
    /// Reads what is available (decrypted under TLS): `WouldBlock` when
    /// nothing is, `Ok(0)` when the server closed.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &mut self.tls else { return (&self.stream).read(buf) };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without TLS's close_notify: closed all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if tls.read_tls(&mut &self.stream)? == 0 {
                return Ok(0);
            }
            tls.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // What the records asked to send (a key update, an alert).
            push_records(tls, &self.stream)?;
        }
    }

    /// Writes some of `data` (through the session under TLS), and the
    /// session's records waiting to go out: how many bytes of `data` were
    /// taken, `WouldBlock` when the socket took nothing.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let Some(tls) = &mut self.tls else { return (&self.stream).write(data) };
        loop {
            let n = if data.is_empty() { 0 } else { tls.writer().write(data)? };
            let all_sent = push_records(tls, &self.stream)?;
            if n > 0 || data.is_empty() {
                return if n == 0 && !all_sent { Err(io::ErrorKind::WouldBlock.into()) } else { Ok(n) };
            }
            if !all_sent {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            // The session's buffer was full and is now sent: take more.
        }
    }

    /// Whether TLS records wait to be written.
    fn pending(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }
}

/// A failed read or write as the client reports it: a TLS failure (an
/// alert from the server, such as a refused client certificate, or records
/// that do not decrypt) is [`ClientError::Tls`], which no retry can cure.
fn io_error(e: io::Error) -> ClientError {
    if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
        return ClientError::Tls(e.to_string());
    }
    e.into()
}

/// Writes the session's pending records to the non-blocking `stream`;
/// whether all went out.
fn push_records(tls: &mut rustls::ClientConnection, stream: &TcpStream) -> io::Result<bool> {
    while tls.wants_write() {
        match tls.write_tls(&mut &*stream) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Runs the client side of a TLS handshake on the (blocking) `stream`,
/// within `timeout` per read or write.
fn handshake(
    mut tls: rustls::ClientConnection,
    stream: &TcpStream,
    timeout: Option<Duration>,
) -> Result<rustls::ClientConnection, ClientError> {
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut &*stream).map_err(|e| ClientError::Tls(e.to_string()))?;
    }
    // What the handshake's last flight left to send.
    while tls.wants_write() {
        tls.write_tls(&mut &*stream)?;
    }
    Ok(tls)
}

/// Waits until `stream` is ready for `events` (or has an error or hang-up,
/// which the next read or write reports); returns the events, 0 on timeout.
fn poll(stream: &TcpStream, events: libc::c_short, timeout: Option<Duration>) -> io::Result<libc::c_short> {
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
    let mut fd = libc::pollfd { fd: stream.as_raw_fd(), events, revents: 0 };
    loop {
        // SAFETY: `fd` is one valid, initialised pollfd on our stack and we
        // pass nfds = 1; the descriptor belongs to `stream`, which outlives
        // the call. poll(2) only writes `revents`.
        let r = unsafe { libc::poll(&mut fd, 1, ms) };
        if r >= 0 {
            return Ok(if r == 0 { 0 } else { fd.revents });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinner_grows_on_near_misses_and_shrinks_on_slow_replies() {
        let max = Duration::from_micros(50);
        let mut s = Spinner { max, budget: max };
        for _ in 0..10 {
            s.record(Duration::from_millis(5), false);
        }
        assert!(s.budget < Duration::from_micros(1));
        for _ in 0..10 {
            s.record(Duration::from_micros(30), false);
        }
        assert_eq!(s.budget, max);
        s.record(Duration::from_micros(10), true);
        assert_eq!(s.budget, max);
    }
}
