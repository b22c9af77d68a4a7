//! Running commands on other servers of the cluster, for keys this server
//! does not master: a [`Job`] names the parts of one client command (each
//! answered here already, or to send to one server's RESP port) and how
//! their replies make the client's reply. [`run`] sends the remote parts,
//! all before reading any reply (so parts on different servers run
//! concurrently), and merges.
//!
//! Connections to other servers are pooled per worker thread (a worker runs
//! a single-threaded runtime, so a pooled socket is only ever used by the
//! runtime it is registered with). Each first logs in with the server's
//! own credentials when the cluster has them (`auth::Users::
//! peer_credentials`: all servers of a cluster share them), then is made
//! local-only with `SHOAL.LOCAL`, so the receiving server executes what it is
//! sent itself and never forwards it again; `HELLO` and `SELECT` keep it in
//! the client's protocol and database, so its replies are relayed
//! byte for byte. A connection goes back to the pool only after a complete
//! exchange; any error or timeout drops it.
//!
//! Replies from other servers are framed by [`reply_len`], which bounds
//! them by the client connection's reply limit and never panics.

use crate::auth::Credentials;
use crate::resp::frame::parse_i64;
use crate::resp::reply::{ErrorReply, Protocol, Reply};
use crate::tls::ServerTls;
use bytes::{BufMut, Bytes, BytesMut};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a whole forwarded command may take, reply included. A write's
/// master answers once the write is durable, so this also bounds a
/// replication stall as a client sees it.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection attempt to another server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle pooled connections kept per server and worker.
const MAX_IDLE_PER_PEER: usize = 32;
/// Pooled connections idle for longer are closed rather than reused (an
/// idle timeout of the other server may have closed them).
const MAX_IDLE_TIME: Duration = Duration::from_secs(30);

/// One client command as it is run across the cluster.
pub struct Job {
    /// The client's database and protocol, which the remote parts run in.
    pub db: usize,
    pub proto: Protocol,
    /// In the order their replies are merged.
    pub parts: Vec<Part>,
    pub merge: Merge,
    /// Most bytes of one part's reply (the client connection's reply limit).
    pub max_reply: usize,
    /// What new connections to other servers log in with (`None`: no AUTH).
    pub credentials: Option<Arc<Credentials>>,
    /// With TLS on the client ports: how to connect to other servers'
    /// (their RESP ports speak TLS too).
    pub tls: Option<Arc<ServerTls>>,
}

/// One server's share of a command.
pub struct Part {
    pub target: Target,
    /// For [`Merge::Array`]: the position in the client's reply of each
    /// item of this part's reply.
    pub slots: Vec<usize>,
}

pub enum Target {
    /// Already run on this server: its reply.
    Here(BytesMut),
    /// To send to the server at this RESP address: one encoded request.
    Remote { addr: SocketAddr, request: Vec<u8> },
}

/// How the parts' replies make the client's reply. An error reply of any
/// part is the reply (the first one in part order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// One part; its reply as it is.
    Relay,
    /// An array of `len` items, each taken from the array reply of the part
    /// that holds its slot (MGET).
    Array { len: usize },
    /// The sum of the integer replies (DEL, UNLINK, EXISTS, DBSIZE).
    Sum,
    /// `+OK` if every part answered `+OK` (MSET, FLUSHDB).
    AllOk,
    /// One array of the items of every part's array reply, in part order
    /// (KEYS).
    Concat,
    /// memcached get replies (bulk strings of `SHOAL.MC`): one bulk string
    /// of every part's VALUE lines, in part order, then one END.
    MemcachedGet,
    /// memcached replies that are all "OK" (flush_all): "OK", else the
    /// first other one; as a bulk string.
    MemcachedAll,
}

/// A job of `parts` for the memcached front end (database 0, with the
/// server's own credentials and TLS setting).
pub fn memcached_job(ctx: &crate::context::ServerContext, parts: Vec<Part>, merge: Merge) -> Job {
    Job {
        db: 0,
        proto: Protocol::Resp2,
        parts,
        merge,
        max_reply: ctx.config.reply_buffer_size.0 as usize,
        credentials: ctx.auth.peer_credentials().cloned(),
        tls: ctx.tls.clone(),
    }
}

/// The payload of a bulk string reply.
fn bulk_payload(reply: &[u8]) -> Option<&[u8]> {
    let body = reply.strip_prefix(b"$")?;
    let eol = body.iter().position(|&c| c == b'\r')?;
    let len = usize::try_from(parse_i64(&body[..eol])?).ok()?;
    body.get(eol + 2..eol + 2 + len)
}

/// Appends `words` to `out` as one multibulk request.
pub fn encode_request(words: &[&[u8]], out: &mut Vec<u8>) {
    out.put_u8(b'*');
    out.extend_from_slice(words.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for w in words {
        out.put_u8(b'$');
        out.extend_from_slice(w.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(w);
        out.extend_from_slice(b"\r\n");
    }
}

/// Runs `job` and returns the client's reply (an error reply if a server
/// could not be reached or did not answer in time).
pub async fn run(job: Job) -> BytesMut {
    let proto = job.proto;
    let replies = match tokio::time::timeout(FORWARD_TIMEOUT, exchange(&job)).await {
        Ok(Ok(replies)) => replies,
        Ok(Err(e)) => return error_reply(proto, &e.reply()),
        Err(_) => {
            let e = ErrorReply::owned(format!(
                "TRYAGAIN no reply from the key's master within {} s; the command may have been applied",
                FORWARD_TIMEOUT.as_secs()
            ));
            return error_reply(proto, &e);
        }
    };
    match merge(&job, replies) {
        Ok(reply) => reply,
        Err(e) => error_reply(proto, &e),
    }
}

fn error_reply(proto: Protocol, e: &ErrorReply) -> BytesMut {
    let mut out = BytesMut::new();
    Reply::new(&mut out, proto).error(e);
    out
}

/// Why a remote part has no reply.
#[derive(Debug)]
enum ForwardError {
    /// Nothing was sent: safe to retry.
    Unreachable(SocketAddr, std::io::Error),
    /// The request may have been applied.
    Lost(SocketAddr, std::io::Error),
    /// The other server refused a connection setup command.
    Setup(SocketAddr, String),
}

impl ForwardError {
    fn reply(&self) -> ErrorReply {
        ErrorReply::owned(self.to_string())
    }
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardError::Unreachable(addr, e) => write!(f, "TRYAGAIN cannot reach the key's master at {addr}: {e}"),
            ForwardError::Lost(addr, e) => {
                write!(f, "ERR connection to the key's master at {addr} lost ({e}); the command may have been applied")
            }
            ForwardError::Setup(addr, e) => write!(f, "ERR the key's master at {addr} refused the connection: {e}"),
        }
    }
}

/// Sends every remote part, then reads their replies in order. The
/// replies of all parts, in part order.
async fn exchange(job: &Job) -> Result<Vec<Bytes>, ForwardError> {
    let mut peers: Vec<(Peer, usize)> = Vec::new();
    let mut out = Vec::new();
    for part in &job.parts {
        let Target::Remote { addr, request } = &part.target else { continue };
        let mut peer = match checkout(*addr) {
            Some(p) => p,
            None => Peer::connect(*addr, job.tls.as_deref()).await.map_err(|e| ForwardError::Unreachable(*addr, e))?,
        };
        out.clear();
        let setup = peer.prepare(job.db, job.proto, job.credentials.as_deref(), &mut out);
        out.extend_from_slice(request);
        peer.stream.write_all(&out).await.map_err(|e| ForwardError::Lost(*addr, e))?;
        peers.push((peer, setup));
    }
    let mut remote = Vec::with_capacity(peers.len());
    for (peer, setup) in &mut peers {
        let addr = peer.addr;
        for _ in 0..*setup {
            let r = peer.read_reply(job.max_reply).await.map_err(|e| ForwardError::Lost(addr, e))?;
            if r.first() == Some(&b'-') {
                let text = String::from_utf8_lossy(&r[1..r.len().saturating_sub(2)]).into_owned();
                return Err(ForwardError::Setup(addr, text));
            }
        }
        remote.push(peer.read_reply(job.max_reply).await.map_err(|e| ForwardError::Lost(addr, e))?);
    }
    for (peer, _) in peers {
        checkin(peer);
    }
    let mut remote = remote.into_iter();
    Ok(job
        .parts
        .iter()
        .map(|p| match &p.target {
            Target::Here(reply) => Bytes::copy_from_slice(reply),
            Target::Remote { .. } => remote.next().expect("one reply per remote part"),
        })
        .collect())
}

/// Combines the parts' replies as `job.merge` says.
fn merge(job: &Job, replies: Vec<Bytes>) -> Result<BytesMut, ErrorReply> {
    if let Some(e) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        return Ok(BytesMut::from(&e[..]));
    }
    let unexpected = |r: &[u8]| {
        let shown = String::from_utf8_lossy(&r[..r.len().min(64)]).into_owned();
        ErrorReply::owned(format!("ERR unexpected reply from another server: {shown:?}"))
    };
    let mut out = BytesMut::new();
    match job.merge {
        Merge::Relay => {
            let [reply] = &replies[..] else { return Err(unexpected(b"")) };
            out.extend_from_slice(reply);
        }
        Merge::Sum => {
            let mut sum: i64 = 0;
            for r in &replies {
                let n = r
                    .strip_prefix(b":")
                    .and_then(|r| r.strip_suffix(b"\r\n"))
                    .and_then(parse_i64)
                    .ok_or_else(|| unexpected(r))?;
                sum = sum.saturating_add(n);
            }
            Reply::new(&mut out, job.proto).int(sum);
        }
        Merge::AllOk => {
            if let Some(r) = replies.iter().find(|r| &r[..] != b"+OK\r\n") {
                return Err(unexpected(r));
            }
            out.extend_from_slice(b"+OK\r\n");
        }
        Merge::Concat => {
            let mut items = Vec::new();
            for r in &replies {
                items.extend(array_items(r, job.max_reply).ok_or_else(|| unexpected(r))?);
            }
            Reply::new(&mut out, job.proto).array(items.len());
            for item in items {
                out.extend_from_slice(&item);
            }
        }
        Merge::MemcachedGet => {
            let mut body = Vec::new();
            for r in &replies {
                let p = bulk_payload(r).ok_or_else(|| unexpected(r))?;
                body.extend_from_slice(p.strip_suffix(b"END\r\n").unwrap_or(p));
            }
            body.extend_from_slice(b"END\r\n");
            Reply::new(&mut out, job.proto).bulk(&body);
        }
        Merge::MemcachedAll => {
            let mut first = &b"OK\r\n"[..];
            for r in &replies {
                let p = bulk_payload(r).ok_or_else(|| unexpected(r))?;
                if p != b"OK\r\n" && first == b"OK\r\n" {
                    first = p;
                }
            }
            Reply::new(&mut out, job.proto).bulk(first);
        }
        Merge::Array { len } => {
            let mut items: Vec<Option<Bytes>> = vec![None; len];
            for (part, r) in job.parts.iter().zip(&replies) {
                let split = array_items(r, job.max_reply).ok_or_else(|| unexpected(r))?;
                if split.len() != part.slots.len() {
                    return Err(unexpected(r));
                }
                for (&slot, item) in part.slots.iter().zip(split) {
                    *items.get_mut(slot).ok_or_else(|| unexpected(r))? = Some(item);
                }
            }
            Reply::new(&mut out, job.proto).array(len);
            for item in items {
                out.extend_from_slice(&item.ok_or_else(|| unexpected(b"(missing item)"))?);
            }
        }
    }
    Ok(out)
}

/// The items of an array reply, each as its own complete reply.
fn array_items(reply: &Bytes, max: usize) -> Option<Vec<Bytes>> {
    let body = reply.strip_prefix(b"*")?;
    let eol = body.iter().position(|&c| c == b'\r')?;
    let n = usize::try_from(parse_i64(&body[..eol])?).ok()?;
    let mut pos = 1 + eol + 2;
    let mut items = Vec::with_capacity(n.min(reply.len() / 3));
    for _ in 0..n {
        let len = reply_len(&reply[pos..], max).ok()??;
        items.push(reply.slice(pos..pos + len));
        pos += len;
    }
    (pos == reply.len()).then_some(items)
}

/// A reply that is not valid RESP.
#[derive(Debug, PartialEq, Eq)]
pub struct BadReply;

/// If `buf` starts with one complete RESP2 or RESP3 reply, its length;
/// `Ok(None)` if more bytes are needed. A reply longer than `max` bytes
/// is [`BadReply`], so a caller never buffers more than `max`.
pub fn reply_len(buf: &[u8], max: usize) -> Result<Option<usize>, BadReply> {
    let mut pos = 0;
    // Items still to read: aggregates add their members.
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        let Some(&kind) = buf.get(pos) else { return Ok(None) };
        // The line after the type byte, up to its CR.
        let Some(len) = buf[pos + 1..].iter().take(max.saturating_sub(pos)).position(|&c| c == b'\r') else {
            return if buf.len() >= max { Err(BadReply) } else { Ok(None) };
        };
        let line = &buf[pos + 1..pos + 1 + len];
        let next = pos + 1 + len + 2;
        match buf.get(pos + 1 + len + 1) {
            None => return Ok(None),
            Some(b'\n') => {}
            Some(_) => return Err(BadReply),
        }
        match kind {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => pos = next,
            b'$' | b'!' | b'=' => {
                let n = parse_i64(line).ok_or(BadReply)?;
                if n == -1 && kind == b'$' {
                    pos = next;
                } else {
                    let n = usize::try_from(n).map_err(|_| BadReply)?;
                    let end = next.checked_add(n).and_then(|e| e.checked_add(2)).ok_or(BadReply)?;
                    if end > max {
                        return Err(BadReply);
                    }
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(BadReply);
                    }
                    pos = end;
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = parse_i64(line).ok_or(BadReply)?;
                pos = next;
                if n == -1 && kind == b'*' {
                    continue;
                }
                // Every item takes at least 3 bytes: a count past that is a lie.
                let n = u64::try_from(n).ok().filter(|&n| n <= (max / 3) as u64).ok_or(BadReply)?;
                pending += match kind {
                    b'%' => 2 * n,
                    // An attribute map precedes the reply it describes.
                    b'|' => 2 * n + 1,
                    _ => n,
                };
            }
            _ => return Err(BadReply),
        }
        if pos > max {
            return Err(BadReply);
        }
    }
    Ok(Some(pos))
}

/// A connection to another server's RESP port, plain or TLS.
enum PeerStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl PeerStream {
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            PeerStream::Plain(s) => s.write_all(bytes).await,
            PeerStream::Tls(s) => {
                s.write_all(bytes).await?;
                s.flush().await
            }
        }
    }

    async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            PeerStream::Plain(s) => s.read_buf(buf).await,
            PeerStream::Tls(s) => s.read_buf(buf).await,
        }
    }

    fn socket(&self) -> &TcpStream {
        match self {
            PeerStream::Plain(s) => s,
            PeerStream::Tls(s) => s.get_ref().0,
        }
    }
}

/// A connection to another server's RESP port, local-only.
struct Peer {
    addr: SocketAddr,
    stream: PeerStream,
    /// Received bytes not yet taken as replies.
    buf: BytesMut,
    /// What the other server's session is set to (after the requests sent).
    marked: bool,
    db: usize,
    proto: Protocol,
    idle_since: Instant,
}

impl Peer {
    async fn connect(addr: SocketAddr, tls: Option<&ServerTls>) -> std::io::Result<Peer> {
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(s) => s?,
            Err(_) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out")),
        };
        stream.set_nodelay(true)?;
        let stream = match tls {
            Some(tls) => PeerStream::Tls(Box::new(tls.connect_peer(addr, stream).await?)),
            None => PeerStream::Plain(stream),
        };
        Ok(Peer {
            addr,
            stream,
            buf: BytesMut::new(),
            marked: false,
            db: 0,
            proto: Protocol::Resp2,
            idle_since: Instant::now(),
        })
    }

    /// Appends the requests that put the other server's session in `db`
    /// and `proto` (and, once, logged in with `credentials` and
    /// local-only); how many there are.
    fn prepare(&mut self, db: usize, proto: Protocol, credentials: Option<&Credentials>, out: &mut Vec<u8>) -> usize {
        let mut n = 0;
        if !self.marked {
            if let Some(c) = credentials {
                encode_request(&[b"AUTH", &c.user, &c.password], out);
                n += 1;
            }
            encode_request(&[b"SHOAL.LOCAL"], out);
            self.marked = true;
            n += 1;
        }
        if self.proto != proto {
            let v: &[u8] = if proto == Protocol::Resp3 { b"3" } else { b"2" };
            encode_request(&[b"HELLO", v], out);
            self.proto = proto;
            n += 1;
        }
        if self.db != db {
            encode_request(&[b"SELECT", db.to_string().as_bytes()], out);
            self.db = db;
            n += 1;
        }
        n
    }

    /// The next complete reply.
    async fn read_reply(&mut self, max: usize) -> std::io::Result<Bytes> {
        loop {
            match reply_len(&self.buf, max) {
                Ok(Some(n)) => return Ok(self.buf.split_to(n).freeze()),
                Ok(None) => {}
                Err(BadReply) => {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed or oversized reply"))
                }
            }
            self.buf.reserve(16 * 1024);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Whether a pooled connection may be used again: not idle too long,
    /// and neither closed by the other side nor holding unexpected bytes.
    fn reusable(&self) -> bool {
        if self.idle_since.elapsed() > MAX_IDLE_TIME || !self.buf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        // Straight from the socket, also under TLS: any byte (even a TLS
        // alert) means the connection is not reused.
        matches!(self.stream.socket().try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

thread_local! {
    /// Idle connections of this worker thread, per server.
    static POOL: RefCell<HashMap<SocketAddr, Vec<Peer>>> = RefCell::new(HashMap::new());
}

fn checkout(addr: SocketAddr) -> Option<Peer> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let idle = pool.get_mut(&addr)?;
        while let Some(peer) = idle.pop() {
            if peer.reusable() {
                return Some(peer);
            }
        }
        None
    })
}

fn checkin(mut peer: Peer) {
    if !peer.buf.is_empty() {
        return;
    }
    if peer.buf.capacity() > 64 * 1024 {
        peer.buf = BytesMut::new();
    }
    peer.idle_since = Instant::now();
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let idle = pool.entry(peer.addr).or_default();
        if idle.len() < MAX_IDLE_PER_PEER {
            idle.push(peer);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn reply_len_frames_every_resp2_and_resp3_type() {
        let whole: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":-12\r\n",
            b"$3\r\nabc\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n$1\r\na\r\n$-1\r\n",
            b"*2\r\n*1\r\n:1\r\n+x\r\n",
            b"_\r\n",
            b"#t\r\n",
            b",1.5\r\n",
            b"(123\r\n",
            b"=8\r\ntxt:abcd\r\n",
            b"%1\r\n$1\r\nk\r\n:1\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b"|1\r\n+a\r\n+b\r\n:7\r\n",
        ];
        for r in whole {
            assert_eq!(reply_len(r, MAX), Ok(Some(r.len())), "{}", String::from_utf8_lossy(r));
            let mut more = r.to_vec();
            more.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(reply_len(&more, MAX), Ok(Some(r.len())));
            for cut in 0..r.len() {
                assert_eq!(reply_len(&r[..cut], MAX), Ok(None), "{} cut at {cut}", String::from_utf8_lossy(r));
            }
        }
    }

    #[test]
    fn reply_len_refuses_malformed_and_oversized_replies() {
        for bad in [&b"?x\r\n"[..], b"$x\r\n", b"$-2\r\n", b"$1\r\nab\r\n", b"*-2\r\n", b":1\rx", b"*99999999\r\n"] {
            assert_eq!(reply_len(bad, 4096), Err(BadReply), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(reply_len(b"$100\r\n", 50), Err(BadReply));
        assert_eq!(reply_len(&[b'+'; 100], 50), Err(BadReply));
    }

    #[test]
    fn array_items_split_an_array_reply() {
        let r = Bytes::from_static(b"*3\r\n$1\r\na\r\n$-1\r\n_\r\n");
        let items = array_items(&r, MAX).unwrap();
        assert_eq!(items, vec![&b"$1\r\na\r\n"[..], b"$-1\r\n", b"_\r\n"]);
        assert_eq!(array_items(&Bytes::from_static(b"*2\r\n$1\r\na\r\n"), MAX), None);
        assert_eq!(array_items(&Bytes::from_static(b":1\r\n"), MAX), None);
    }

    fn here(reply: &[u8], slots: Vec<usize>) -> Part {
        Part { target: Target::Here(BytesMut::from(reply)), slots }
    }

    fn job(merge: Merge, parts: Vec<Part>) -> Job {
        Job { db: 0, proto: Protocol::Resp2, parts, merge, max_reply: MAX, credentials: None, tls: None }
    }

    fn merged(j: &Job) -> Vec<u8> {
        let replies = j
            .parts
            .iter()
            .map(|p| match &p.target {
                Target::Here(r) => Bytes::copy_from_slice(r),
                Target::Remote { .. } => unreachable!(),
            })
            .collect();
        match merge(j, replies) {
            Ok(r) => r.to_vec(),
            Err(e) => [b"-".as_slice(), e.text(), b"\r\n"].concat(),
        }
    }

    #[test]
    fn merge_reassembles_arrays_in_slot_order() {
        let j = job(
            Merge::Array { len: 4 },
            vec![here(b"*2\r\n$1\r\na\r\n$-1\r\n", vec![0, 3]), here(b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n", vec![2, 1])],
        );
        assert_eq!(merged(&j), b"*4\r\n$1\r\na\r\n$1\r\nc\r\n$1\r\nb\r\n$-1\r\n");
    }

    #[test]
    fn merge_sums_integers_and_requires_every_ok() {
        let j = job(Merge::Sum, vec![here(b":2\r\n", vec![]), here(b":0\r\n", vec![]), here(b":5\r\n", vec![])]);
        assert_eq!(merged(&j), b":7\r\n");
        let j = job(Merge::AllOk, vec![here(b"+OK\r\n", vec![]), here(b"+OK\r\n", vec![])]);
        assert_eq!(merged(&j), b"+OK\r\n");
        let j = job(Merge::AllOk, vec![here(b"+OK\r\n", vec![]), here(b"$2\r\nOK\r\n", vec![])]);
        assert!(merged(&j).starts_with(b"-ERR unexpected reply"));
    }

    #[test]
    fn merge_answers_the_first_error_of_any_part() {
        let j =
            job(Merge::Sum, vec![here(b":2\r\n", vec![]), here(b"-OOM full\r\n", vec![]), here(b"-ERR b\r\n", vec![])]);
        assert_eq!(merged(&j), b"-OOM full\r\n");
    }

    #[test]
    fn encode_request_is_multibulk() {
        let mut out = Vec::new();
        encode_request(&[b"SET", b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn prepare_marks_once_and_follows_db_and_protocol() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = Peer::connect(listener.local_addr().unwrap(), None).await.unwrap();
            let mut out = Vec::new();
            assert_eq!(peer.prepare(0, Protocol::Resp2, None, &mut out), 1);
            assert_eq!(out, b"*1\r\n$11\r\nSHOAL.LOCAL\r\n");
            out.clear();
            assert_eq!(peer.prepare(0, Protocol::Resp2, None, &mut out), 0);
            assert!(out.is_empty());
            assert_eq!(peer.prepare(3, Protocol::Resp3, None, &mut out), 2);
            assert_eq!(out, b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
        });
    }

    #[test]
    fn prepare_logs_in_before_marking() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = Peer::connect(listener.local_addr().unwrap(), None).await.unwrap();
            let creds = Credentials { user: b"default".to_vec(), password: b"pw".to_vec() };
            let mut out = Vec::new();
            assert_eq!(peer.prepare(0, Protocol::Resp2, Some(&creds), &mut out), 2);
            assert_eq!(out, b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n*1\r\n$11\r\nSHOAL.LOCAL\r\n");
            out.clear();
            assert_eq!(peer.prepare(0, Protocol::Resp2, Some(&creds), &mut out), 0, "once per connection");
        });
    }
}
