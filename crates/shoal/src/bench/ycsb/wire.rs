//! The protocols `shoal bench ycsb` speaks: Shoal's native protocol through
//! the client library's pipelined [`Connection`], and minimal pipelined
//! clients of the Redis protocol (GET/SET) and of memcached's text protocol
//! (get/set), so that one driver measures Shoal and the stores it is
//! compared with.
//!
//! A [`Wire`] works in rounds: `push` queues requests, `exchange` sends
//! them in one write and hands each reply to a callback as it is parsed.

use shoal_client::{ClientConfig, Connection, ErrorStatus, RejectRules, Request, Response, TableId};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A request of the benchmark: read a record or write it whole.
#[derive(Clone, Copy, Debug)]
pub enum Req<'a> {
    Get(&'a [u8]),
    Set(&'a [u8], &'a [u8]),
}

/// What a request got back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A read found the record.
    Found,
    /// A read found no record.
    NotFound,
    /// A write was applied.
    Stored,
    /// The server refused the request (its error text).
    Error(String),
}

/// One pipelined connection.
pub trait Wire: Send {
    /// Queues a request for the next [`Wire::exchange`].
    fn push(&mut self, req: Req<'_>) -> Result<(), String>;

    /// Sends the queued requests and waits for all their replies, calling
    /// `on_reply(index in the round, reply)` as each one is parsed. An
    /// error means the connection failed (or spoke something else) and
    /// cannot be used further.
    fn exchange(&mut self, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String>;
}

/// Longest any reply may take before the connection counts as failed.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A text protocol's reply parser: a reply and the bytes it used, `None`
/// when more bytes are needed, or an error when the bytes are not that
/// protocol.
type Parse = fn(&[u8]) -> Result<Option<(Reply, usize)>, String>;

/// Largest reply the text protocols accept (bounds the receive buffer).
const MAX_REPLY_BYTES: usize = 64 << 20;

/// Shoal's native protocol through the client library.
pub struct Native {
    conn: Connection,
    table: TableId,
    ids: Vec<u64>,
}

impl Native {
    /// `spin`: the client library's spin budget while it waits for a reply.
    pub fn connect(addr: SocketAddr, table: TableId, spin: Duration) -> Result<Native, String> {
        let config = ClientConfig { timeout: Some(REPLY_TIMEOUT), spin, ..ClientConfig::default() };
        let conn = Connection::connect(addr, &config).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        Ok(Native { conn, table, ids: Vec::new() })
    }
}

impl Wire for Native {
    fn push(&mut self, req: Req<'_>) -> Result<(), String> {
        let (table, rules) = (self.table, RejectRules::default());
        let req = match req {
            Req::Get(key) => Request::Read { table, key, rules },
            Req::Set(key, value) => Request::Write { table, key, value, rules },
        };
        let id = self.conn.send(&req).map_err(|e| e.to_string())?;
        self.ids.push(id);
        Ok(())
    }

    fn exchange(&mut self, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String> {
        for _ in 0..self.ids.len() {
            let frame = self.conn.recv().map_err(|e| e.to_string())?;
            let index = self
                .ids
                .iter()
                .position(|&id| id == frame.request_id)
                .ok_or_else(|| format!("reply to request {} that was not sent", frame.request_id))?;
            let reply = match frame.reply().map_err(|e| e.to_string())? {
                Ok(Response::Read { .. }) => Reply::Found,
                Ok(Response::Write { .. }) => Reply::Stored,
                Ok(r) => return Err(format!("unexpected response {:?}", r.opcode())),
                Err(ErrorStatus::ObjectDoesntExist) => Reply::NotFound,
                Err(status) => Reply::Error(status.to_string()),
            };
            on_reply(index, reply);
        }
        self.ids.clear();
        Ok(())
    }
}

/// A blocking TCP stream with a receive buffer and a send buffer, for the
/// text protocols.
struct Stream {
    stream: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    queued: usize,
}

impl Stream {
    fn connect(addr: SocketAddr) -> Result<Stream, String> {
        let stream =
            TcpStream::connect_timeout(&addr, REPLY_TIMEOUT).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let setup = |s: &TcpStream| -> io::Result<()> {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(REPLY_TIMEOUT))?;
            s.set_write_timeout(Some(REPLY_TIMEOUT))
        };
        setup(&stream).map_err(|e| e.to_string())?;
        Ok(Stream { stream, out: Vec::new(), buf: vec![0; 64 << 10], start: 0, end: 0, queued: 0 })
    }

    /// Writes the queued requests, then parses `queued` replies with `parse`.
    fn exchange(&mut self, parse: Parse, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String> {
        self.stream.write_all(&self.out).map_err(|e| format!("send: {e}"))?;
        self.out.clear();
        for i in 0..std::mem::take(&mut self.queued) {
            loop {
                if let Some((reply, used)) = parse(&self.buf[self.start..self.end])? {
                    self.start += used;
                    on_reply(i, reply);
                    break;
                }
                self.fill()?;
            }
        }
        Ok(())
    }

    /// Reads more bytes (at least one), making room first.
    fn fill(&mut self) -> Result<(), String> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_REPLY_BYTES {
                return Err(format!("a reply exceeds {MAX_REPLY_BYTES} bytes"));
            }
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err("connection closed by the server".into()),
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(format!("no reply within {REPLY_TIMEOUT:?}"))
                }
                Err(e) => return Err(format!("receive: {e}")),
            }
        }
    }
}

/// The first line of `b` (without its CRLF) and the length with it.
fn line(b: &[u8]) -> Result<Option<(&[u8], usize)>, String> {
    match b.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&b[..i], i + 2))),
        None if b.len() > MAX_REPLY_BYTES => Err("reply line without an end".into()),
        None => Ok(None),
    }
}

fn number(b: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad number in reply: {:?}", String::from_utf8_lossy(b)))
}

/// The Redis protocol: GET and SET, replies in RESP2 or RESP3.
pub struct Resp(Stream);

impl Resp {
    pub fn connect(addr: SocketAddr) -> Result<Resp, String> {
        Stream::connect(addr).map(Resp)
    }

    /// Parses one reply: `+`, `-`, `:`, `$` (null or bulk) or `_`.
    pub fn parse(b: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some((head, n)) = line(b)? else { return Ok(None) };
        let Some((&kind, rest)) = head.split_first() else { return Err("empty reply line".into()) };
        let reply = match kind {
            b'+' | b':' => Reply::Stored,
            b'-' => Reply::Error(String::from_utf8_lossy(rest).into_owned()),
            b'_' => Reply::NotFound,
            b'$' => {
                let len = number(rest)?;
                if len < 0 {
                    return Ok(Some((Reply::NotFound, n)));
                }
                let len = usize::try_from(len).map_err(|_| "bulk length out of range")?;
                if len > MAX_REPLY_BYTES {
                    return Err(format!("bulk reply of {len} bytes"));
                }
                if b.len() < n + len + 2 {
                    return Ok(None);
                }
                if &b[n + len..n + len + 2] != b"\r\n" {
                    return Err("bulk reply without CRLF".into());
                }
                return Ok(Some((Reply::Found, n + len + 2)));
            }
            k => return Err(format!("unexpected RESP reply type {:?}", k as char)),
        };
        Ok(Some((reply, n)))
    }
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

impl Wire for Resp {
    fn push(&mut self, req: Req<'_>) -> Result<(), String> {
        let out = &mut self.0.out;
        match req {
            Req::Get(key) => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                bulk(out, key);
            }
            Req::Set(key, value) => {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                bulk(out, key);
                bulk(out, value);
            }
        }
        self.0.queued += 1;
        Ok(())
    }

    fn exchange(&mut self, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String> {
        self.0.exchange(Resp::parse, on_reply)
    }
}

/// memcached's text protocol: `get` and `set` (flags 0, no expiry).
pub struct Memcached(Stream);

impl Memcached {
    pub fn connect(addr: SocketAddr) -> Result<Memcached, String> {
        Stream::connect(addr).map(Memcached)
    }

    /// Parses one reply: `VALUE ... END` (one key), `END`, `STORED`, or an
    /// error line.
    pub fn parse(b: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some((head, n)) = line(b)? else { return Ok(None) };
        if let Some(rest) = head.strip_prefix(b"VALUE ") {
            let bytes = rest.split(|&c| c == b' ').nth(2).ok_or("VALUE line without a length")?;
            let len = usize::try_from(number(bytes)?).map_err(|_| "negative VALUE length")?;
            if len > MAX_REPLY_BYTES {
                return Err(format!("value of {len} bytes"));
            }
            let total = n + len + 2 + 5;
            if b.len() < total {
                return Ok(None);
            }
            if &b[n + len..total] != b"\r\nEND\r\n" {
                return Err("VALUE not followed by END".into());
            }
            return Ok(Some((Reply::Found, total)));
        }
        let reply = match head {
            b"END" => Reply::NotFound,
            b"STORED" => Reply::Stored,
            other => Reply::Error(String::from_utf8_lossy(other).into_owned()),
        };
        Ok(Some((reply, n)))
    }
}

impl Wire for Memcached {
    fn push(&mut self, req: Req<'_>) -> Result<(), String> {
        let out = &mut self.0.out;
        let key = match req {
            Req::Get(key) | Req::Set(key, _) => key,
        };
        if key.len() > 250 || key.iter().any(|c| c.is_ascii_whitespace() || c.is_ascii_control()) {
            return Err("memcached keys are at most 250 bytes without spaces or control characters".into());
        }
        match req {
            Req::Get(key) => {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            }
            Req::Set(key, value) => {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
        self.0.queued += 1;
        Ok(())
    }

    fn exchange(&mut self, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String> {
        self.0.exchange(Memcached::parse, on_reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(parse: Parse, mut b: &[u8]) -> Vec<Reply> {
        let mut out = Vec::new();
        while let Some((r, n)) = parse(b).unwrap() {
            out.push(r);
            b = &b[n..];
        }
        assert!(b.is_empty(), "left over: {b:?}");
        out
    }

    #[test]
    fn resp_replies_parse_and_wait_for_whole_bulks() {
        let got = all(Resp::parse, b"+OK\r\n$-1\r\n$5\r\nhe\r\nl\r\n-ERR no\r\n:3\r\n_\r\n");
        let want = [Reply::Stored, Reply::NotFound, Reply::Found, Reply::Error("ERR no".into()), Reply::Stored];
        assert_eq!(got[..5], want);
        assert_eq!(got[5], Reply::NotFound);
        assert_eq!(Resp::parse(b"$5\r\nhel").unwrap(), None);
        assert_eq!(Resp::parse(b"+OK").unwrap(), None);
        assert!(Resp::parse(b"$3\r\nabcde").is_err());
        assert!(Resp::parse(b"*1\r\n").is_err());
        assert!(Resp::parse(b"$99999999999\r\n").is_err());
    }

    #[test]
    fn memcached_replies_parse() {
        let got =
            all(Memcached::parse, b"VALUE k 0 3\r\na\r\n\r\nEND\r\nEND\r\nSTORED\r\nSERVER_ERROR out of memory\r\n");
        assert_eq!(
            got,
            [Reply::Found, Reply::NotFound, Reply::Stored, Reply::Error("SERVER_ERROR out of memory".into())]
        );
        assert_eq!(Memcached::parse(b"VALUE k 0 3\r\nabc\r\nEN").unwrap(), None);
        assert!(Memcached::parse(b"VALUE k 0 3\r\nabcdeEND\r\n").is_err());
    }
}
