//! The protocols `shoal bench ycsb` speaks: Shoal's native protocol through
//! the client library's pipelined [`Connection`], and minimal pipelined
//! clients of the Redis protocol (GET/SET) and of memcached's text protocol
//! (get/set), so that one driver measures Shoal and the stores it is
//! compared with.
//!
//! A [`Wire`] works in rounds: `push` queues requests, `exchange` sends
//! them in one write and hands each reply to a callback as it is parsed.
//!
//! Against a cluster, [`ClusterNative`] keeps one pipelined connection per
//! server and routes each request by the tablet map: a round's requests go
//! to their masters together and the round ends when every master has
//! answered. The Redis client can follow each SET with `WAIT n 0` (see
//! [`Resp::with_wait`]) so that Redis acknowledges a write only once `n`
//! replicas hold it.

use shoal_client::{
    key_hash, ClientConfig, Connection, CoordinatorMap, ErrorStatus, RejectRules, Request, Response, TableId, TabletMap,
};
use shoal_symcache::bloom::Bloom;
use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::Range;
use std::time::{Duration, Instant};

/// A request of the benchmark: read a record, write it whole (with a time
/// to live in seconds, 0: none), or delete it.
#[derive(Clone, Copy, Debug)]
pub enum Req<'a> {
    Get(&'a [u8]),
    Set(&'a [u8], &'a [u8], u32),
    Delete(&'a [u8]),
}

/// What a request got back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A read found the record.
    Found,
    /// A read, or a delete, found no record.
    NotFound,
    /// A write or a delete was applied.
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

    /// Times the tablet map was fetched again because a server answered
    /// that it does not own a key (cluster only).
    fn map_refreshes(&self) -> u64 {
        0
    }

    /// Reads sent to a member of the master's group for its copy.
    fn spread_reads(&self) -> u64 {
        0
    }
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
            Req::Set(key, value, 0) => Request::Write { table, key, value, rules },
            Req::Set(key, value, ttl) => Request::WriteTtl { table, key, value, rules, ttl_ms: u64::from(ttl) * 1000 },
            Req::Delete(key) => Request::Remove { table, key, rules },
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
                Ok(Response::Write { .. } | Response::WriteTtl { .. } | Response::Remove { .. }) => Reply::Stored,
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

/// Most times a request is sent again after `UNKNOWN_TABLET` (each time
/// with a freshly fetched tablet map) before it counts as an error.
const MAX_ROUTE_ATTEMPTS: u32 = 5;

/// Shoal's native protocol against a cluster: one pipelined connection per
/// server, each request sent to its key's master by the tablet map.
///
/// A server that answers `UNKNOWN_TABLET` (the map changed since it was
/// fetched) makes the client fetch the map from the coordinator again and
/// resend that request to its new master, within the same round (the
/// operation's latency includes the detour); `RETRY` resends it after the
/// server's delay. Both are bounded by [`MAX_ROUTE_ATTEMPTS`].
pub struct ClusterNative {
    source: CoordinatorMap,
    map: TabletMap,
    table: TableId,
    config: ClientConfig,
    /// One connection per server, opened on first use.
    conns: Vec<Connection>,
    /// Per connection: (request id, index in the round) of requests sent.
    sent: Vec<Vec<(u64, usize)>>,
    /// The round's requests, kept to be sent again: key and value ranges
    /// in `bytes` (no value for a read).
    reqs: Vec<(Range<usize>, Option<Range<usize>>)>,
    bytes: Vec<u8>,
    /// Requests answered without a server (no master in the map).
    unrouted: Vec<(usize, Reply)>,
    refreshes: u64,
    /// Symmetric caching: each group's filter of hot keys (by the group's
    /// members) and when it was fetched.
    filters: HashMap<Vec<SocketAddr>, (Option<Bloom>, Instant)>,
    /// Connections the filters are fetched on (none of the round's
    /// requests travel on them).
    filter_conns: HashMap<SocketAddr, Connection>,
    /// Round-robin over a group's members.
    next_member: usize,
    /// Requests of the round sent to a member for its copy: one it refuses
    /// goes to the key's master without a map refresh.
    at_member: HashSet<usize>,
    /// Requests of the round to send to their master, whatever the filter.
    go_home: HashSet<usize>,
    /// Reads sent to a member other than the key's master (statistics).
    pub spread: u64,
}

/// How often a group's filter of hot keys is fetched again.
const FILTER_REFRESH: Duration = Duration::from_millis(500);

impl ClusterNative {
    /// `map`: the tablet map fetched from `source` (shared by the threads,
    /// each refreshing its own copy). `spin`: the client library's spin.
    pub fn new(source: CoordinatorMap, map: TabletMap, table: TableId, spin: Duration) -> ClusterNative {
        ClusterNative {
            source,
            map,
            table,
            config: ClientConfig { timeout: Some(REPLY_TIMEOUT), spin, ..ClientConfig::default() },
            conns: Vec::new(),
            sent: Vec::new(),
            reqs: Vec::new(),
            bytes: Vec::new(),
            unrouted: Vec::new(),
            refreshes: 0,
            filters: HashMap::new(),
            filter_conns: HashMap::new(),
            next_member: 0,
            at_member: HashSet::new(),
            go_home: HashSet::new(),
            spread: 0,
        }
    }

    /// Symmetric caching: the member to read `key` from if the filter of
    /// its master's group holds it (fetched again every
    /// [`FILTER_REFRESH`]); `None`: read it at its master.
    fn hot_member(&mut self, home: SocketAddr, hash: u64) -> Option<SocketAddr> {
        let group = self.map.group_of(home)?.to_vec();
        if group.len() < 2 {
            return None;
        }
        let stale = self.filters.get(&group).is_none_or(|(_, at)| at.elapsed() >= FILTER_REFRESH);
        if stale {
            let bloom = self.fetch_filter(&group);
            self.filters.insert(group.clone(), (bloom, Instant::now()));
        }
        let (bloom, _) = self.filters.get(&group)?;
        if !bloom.as_ref().is_some_and(|b| b.contains(hash)) {
            return None;
        }
        self.next_member = self.next_member.wrapping_add(1);
        Some(group[self.next_member % group.len()])
    }

    /// The filter of the group of `members`, from the first that answers.
    fn fetch_filter(&mut self, members: &[SocketAddr]) -> Option<Bloom> {
        for &m in members {
            if !self.filter_conns.contains_key(&m) {
                match Connection::connect(m, &self.config) {
                    Ok(c) => {
                        self.filter_conns.insert(m, c);
                    }
                    Err(_) => continue,
                }
            }
            let c = self.filter_conns.get_mut(&m)?;
            let Ok(frame) = c.call(&Request::ScFilter) else {
                self.filter_conns.remove(&m);
                continue;
            };
            return match frame.reply() {
                Ok(Ok(Response::ScFilter { bloom, .. })) if !bloom.is_empty() => Bloom::from_bytes(bloom).ok(),
                _ => None,
            };
        }
        None
    }

    /// The connection to `addr`'s index, connecting if needed.
    fn conn(&mut self, addr: SocketAddr) -> Result<usize, String> {
        if let Some(i) = self.conns.iter().position(|c| c.addr() == addr) {
            return Ok(i);
        }
        let c = Connection::connect(addr, &self.config).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        self.conns.push(c);
        self.sent.push(Vec::new());
        Ok(self.conns.len() - 1)
    }

    /// Sends the round's request `index` to its key's master.
    fn send(&mut self, index: usize) -> Result<(), String> {
        let (k, v) = self.reqs[index].clone();
        let key = &self.bytes[k];
        let hash = key_hash(self.table, key);
        let Some(home) = self.map.locate(self.table, hash) else {
            self.unrouted.push((index, Reply::Error(format!("no master for table {} in the map", self.table.0))));
            return Ok(());
        };
        let mut addr = home;
        if v.is_none() && !self.go_home.contains(&index) {
            if let Some(member) = self.hot_member(home, hash.0) {
                addr = member;
                if member != home {
                    self.at_member.insert(index);
                    self.spread += 1;
                }
            }
        }
        let c = self.conn(addr)?;
        let (table, rules) = (self.table, RejectRules::default());
        let key = &self.bytes[self.reqs[index].0.clone()];
        let req = match v {
            None => Request::Read { table, key, rules },
            Some(v) => Request::Write { table, key, value: &self.bytes[v], rules },
        };
        let id = self.conns[c].send(&req).map_err(|e| format!("{addr}: {e}"))?;
        self.sent[c].push((id, index));
        Ok(())
    }

    /// Fetches the tablet map again (keeping the one held if the
    /// coordinator cannot be reached).
    fn refresh(&mut self) {
        self.refreshes += 1;
        if let Ok(m) = self.source.fetch() {
            self.map = m;
        }
    }
}

impl Wire for ClusterNative {
    fn push(&mut self, req: Req<'_>) -> Result<(), String> {
        let at = self.bytes.len();
        let (key, value) = match req {
            Req::Get(key) => (key, None),
            Req::Set(_, _, ttl) if ttl > 0 => return Err("--ttl is not supported against a cluster".into()),
            Req::Delete(_) => return Err("deletes are not supported against a cluster".into()),
            Req::Set(key, value, _) => (key, Some(value)),
        };
        self.bytes.extend_from_slice(key);
        let k = at..self.bytes.len();
        let v = value.map(|v| {
            let at = self.bytes.len();
            self.bytes.extend_from_slice(v);
            at..self.bytes.len()
        });
        self.reqs.push((k, v));
        if self.map.locate(self.table, key_hash(self.table, key)).is_none() {
            // A table created since the map was fetched.
            self.refresh();
        }
        self.send(self.reqs.len() - 1)
    }

    fn exchange(&mut self, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String> {
        let mut again: Vec<usize> = Vec::new();
        let mut attempt = 1;
        loop {
            for c in &mut self.conns {
                if c.in_flight() > 0 {
                    let addr = c.addr();
                    c.flush().map_err(|e| format!("{addr}: {e}"))?;
                }
            }
            let mut delay = Duration::ZERO;
            let mut refresh = false;
            for (c, sent) in self.conns.iter_mut().zip(&mut self.sent) {
                for _ in 0..sent.len() {
                    let addr = c.addr();
                    let frame = c.recv().map_err(|e| format!("{addr}: {e}"))?;
                    let index =
                        sent.iter().find(|(id, _)| *id == frame.request_id).map(|&(_, i)| i).ok_or_else(|| {
                            format!("{addr}: reply to request {} that was not sent", frame.request_id)
                        })?;
                    let reply = match frame.reply().map_err(|e| format!("{addr}: {e}"))? {
                        Ok(Response::Read { .. }) => Reply::Found,
                        Ok(Response::Write { .. }) => Reply::Stored,
                        Ok(r) => return Err(format!("{addr}: unexpected response {:?}", r.opcode())),
                        Err(ErrorStatus::ObjectDoesntExist) => Reply::NotFound,
                        // A member without a valid copy: to the master, the
                        // map is not stale.
                        Err(ErrorStatus::UnknownTablet) if self.at_member.remove(&index) => {
                            self.go_home.insert(index);
                            again.push(index);
                            continue;
                        }
                        Err(ErrorStatus::UnknownTablet) if attempt < MAX_ROUTE_ATTEMPTS => {
                            refresh = true;
                            again.push(index);
                            continue;
                        }
                        Err(ErrorStatus::Retry { after_us }) if attempt < MAX_ROUTE_ATTEMPTS => {
                            delay = delay.max(Duration::from_micros(u64::from(after_us)).min(Duration::from_secs(1)));
                            again.push(index);
                            continue;
                        }
                        Err(status) => Reply::Error(status.to_string()),
                    };
                    on_reply(index, reply);
                }
                sent.clear();
            }
            for (index, reply) in self.unrouted.drain(..) {
                on_reply(index, reply);
            }
            if again.is_empty() {
                break;
            }
            attempt += 1;
            if refresh {
                self.refresh();
            }
            // Give the servers a moment to take up a changed map.
            std::thread::sleep(delay.max(Duration::from_millis(if refresh { 5 } else { 0 })));
            for index in std::mem::take(&mut again) {
                self.send(index)?;
            }
        }
        self.reqs.clear();
        self.bytes.clear();
        self.at_member.clear();
        self.go_home.clear();
        Ok(())
    }

    fn map_refreshes(&self) -> u64 {
        self.refreshes
    }

    fn spread_reads(&self) -> u64 {
        self.spread
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
        self.send()?;
        for i in 0..std::mem::take(&mut self.queued) {
            let reply = self.next(parse)?;
            on_reply(i, reply);
        }
        Ok(())
    }

    /// Writes the queued requests.
    fn send(&mut self) -> Result<(), String> {
        self.stream.write_all(&self.out).map_err(|e| format!("send: {e}"))?;
        self.out.clear();
        Ok(())
    }

    /// The next reply, parsed by `parse`, reading until it is whole.
    fn next<T>(&mut self, parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, String>) -> Result<T, String> {
        loop {
            if let Some((reply, used)) = parse(&self.buf[self.start..self.end])? {
                self.start += used;
                return Ok(reply);
            }
            self.fill()?;
        }
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

/// What a `WAIT` answered: the replicas that acknowledged, or an error.
pub type WaitReply = Result<i64, String>;

/// The Redis protocol: GET and SET, replies in RESP2 or RESP3; with a
/// wait, each SET is followed by `WAIT n 0`.
pub struct Resp {
    stream: Stream,
    /// Replicas each SET waits for (`WAIT n 0` after it), if any.
    wait: Option<u32>,
    /// The queued requests: true for a SET followed by a WAIT.
    waits: Vec<bool>,
}

impl Resp {
    /// A client that, with `wait`, follows each SET with `WAIT n 0` (no timeout: Redis
    /// answers once `n` replicas acknowledged the write) and counts the SET
    /// as done when the WAIT answers; a WAIT that reports fewer than `n`
    /// replicas makes the SET an error.
    pub fn with_wait(addr: SocketAddr, wait: Option<u32>) -> Result<Resp, String> {
        Ok(Resp { stream: Stream::connect(addr)?, wait, waits: Vec::new() })
    }

    /// Parses the reply to `WAIT`: the number of replicas, or the error.
    pub fn parse_wait(b: &[u8]) -> Result<Option<(WaitReply, usize)>, String> {
        let Some((head, n)) = line(b)? else { return Ok(None) };
        match head.split_first() {
            Some((b':', rest)) => Ok(Some((Ok(number(rest)?), n))),
            Some((b'-', rest)) => Ok(Some((Err(String::from_utf8_lossy(rest).into_owned()), n))),
            _ => Err(format!("unexpected reply to WAIT: {:?}", String::from_utf8_lossy(head))),
        }
    }

    /// Parses one reply: `+`, `-`, `:`, `$` (null or bulk) or `_`.
    pub fn parse(b: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some((head, n)) = line(b)? else { return Ok(None) };
        let Some((&kind, rest)) = head.split_first() else { return Err("empty reply line".into()) };
        let reply = match kind {
            b'+' => Reply::Stored,
            // DEL's count of keys deleted.
            b':' if number(rest)? == 0 => Reply::NotFound,
            b':' => Reply::Stored,
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
        let out = &mut self.stream.out;
        let mut wait = false;
        match req {
            Req::Get(key) => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                bulk(out, key);
            }
            Req::Set(key, value, ttl) => {
                out.extend_from_slice(if ttl > 0 { b"*5\r\n$3\r\nSET\r\n" } else { b"*3\r\n$3\r\nSET\r\n" });
                bulk(out, key);
                bulk(out, value);
                if ttl > 0 {
                    bulk(out, b"EX");
                    bulk(out, ttl.to_string().as_bytes());
                }
                if let Some(n) = self.wait {
                    out.extend_from_slice(b"*3\r\n$4\r\nWAIT\r\n");
                    bulk(out, n.to_string().as_bytes());
                    bulk(out, b"0");
                    wait = true;
                }
            }
            Req::Delete(key) => {
                out.extend_from_slice(b"*2\r\n$3\r\nDEL\r\n");
                bulk(out, key);
            }
        }
        self.waits.push(wait);
        Ok(())
    }

    fn exchange(&mut self, on_reply: &mut dyn FnMut(usize, Reply)) -> Result<(), String> {
        self.stream.send()?;
        for (i, wait) in std::mem::take(&mut self.waits).into_iter().enumerate() {
            let mut reply = self.stream.next(Resp::parse)?;
            if wait {
                let want = i64::from(self.wait.unwrap_or(0));
                match self.stream.next(Resp::parse_wait)? {
                    Ok(got) if got >= want => {}
                    Ok(got) => reply = reply_error(reply, format!("WAIT: {got} of {want} replicas acknowledged")),
                    Err(e) => reply = reply_error(reply, format!("WAIT: {e}")),
                }
            }
            on_reply(i, reply);
        }
        Ok(())
    }
}

/// A SET's reply once its WAIT failed: the SET's own error if it had one.
fn reply_error(reply: Reply, wait: String) -> Reply {
    match reply {
        Reply::Error(e) => Reply::Error(e),
        _ => Reply::Error(wait),
    }
}

/// memcached's text protocol: `get` and `set` (flags 0, no expiry).
pub struct Memcached(Stream);

impl Memcached {
    pub fn connect(addr: SocketAddr) -> Result<Memcached, String> {
        Stream::connect(addr).map(Memcached)
    }

    /// Parses one reply: `VALUE ... END` (one key), `END`, `STORED`,
    /// `DELETED`, `NOT_FOUND`, or an error line.
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
            b"END" | b"NOT_FOUND" => Reply::NotFound,
            b"STORED" | b"DELETED" => Reply::Stored,
            other => Reply::Error(String::from_utf8_lossy(other).into_owned()),
        };
        Ok(Some((reply, n)))
    }
}

impl Wire for Memcached {
    fn push(&mut self, req: Req<'_>) -> Result<(), String> {
        let out = &mut self.0.out;
        let key = match req {
            Req::Get(key) | Req::Set(key, _, _) | Req::Delete(key) => key,
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
            Req::Set(key, value, ttl) => {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" 0 {ttl} {}\r\n", value.len()).as_bytes());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            Req::Delete(key) => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
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
        // DEL's count: a key deleted, or none.
        assert_eq!(all(Resp::parse, b":1\r\n:0\r\n"), [Reply::Stored, Reply::NotFound]);
    }

    #[test]
    fn wait_replies_parse() {
        assert_eq!(Resp::parse_wait(b":2\r\n+OK").unwrap(), Some((Ok(2), 4)));
        assert_eq!(Resp::parse_wait(b"-ERR no\r\n").unwrap(), Some((Err("ERR no".into()), 9)));
        assert_eq!(Resp::parse_wait(b":2").unwrap(), None);
        assert!(Resp::parse_wait(b"+OK\r\n").is_err());
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
        assert_eq!(all(Memcached::parse, b"DELETED\r\nNOT_FOUND\r\n"), [Reply::Stored, Reply::NotFound]);
    }
}
