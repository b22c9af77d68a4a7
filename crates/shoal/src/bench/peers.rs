//! Redis and memcached as the memory benchmark's peers: a pipelined load
//! of N items with 8-byte keys, and what each store says it holds (Redis
//! `INFO memory`, memcached `stats` and `stats slabs`) with its RSS from
//! `/proc` when it runs on this machine (`shoal bench overhead --chunks
//! --redis/--memcached`).
//!
//! The admin commands are read through a small blocking reader of one
//! reply; the load goes through `shoal bench ycsb`'s RESP and memcached
//! clients. Every read has a timeout and every reply a size bound.

use super::ycsb::wire::{Memcached, Reply, Req, Resp, Wire, REPLY_TIMEOUT};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

/// Which store a peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    Redis,
    Memcached,
}

impl PeerKind {
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Redis => "redis",
            PeerKind::Memcached => "memcached",
        }
    }
}

/// What a peer says it holds, at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Accounting {
    /// Items it holds (Redis `DBSIZE`, memcached `curr_items`).
    pub items: u64,
    /// Its own count of bytes for data: Redis `used_memory`; memcached
    /// `bytes` (items with their headers) + `hash_bytes` (its hash table).
    pub bytes: u64,
    /// memcached: the slab chunks its items occupy (chunk size x used
    /// chunks, summed over the slab classes) + `hash_bytes`: `bytes` with
    /// the slack of the slab classes. Redis: `None`.
    pub slab_bytes: Option<u64>,
    /// Its RSS, when its process is on this machine.
    pub rss_bytes: Option<u64>,
}

/// Largest admin reply accepted (`INFO`, `stats slabs`).
const MAX_ADMIN_REPLY: usize = 1 << 20;

/// Items per pipelined round of the load.
const LOAD_DEPTH: usize = 256;

/// An admin connection to a peer.
pub struct Peer {
    pub kind: PeerKind,
    pub addr: SocketAddr,
    stream: TcpStream,
    /// The peer's process id (from the peer itself).
    pid: u32,
}

/// Resolves `HOST:PORT`.
pub fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("bad address {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

/// Item `i`'s key: exactly 8 printable bytes (base 64, no spaces), so
/// that memcached's text protocol takes it as Redis does.
pub fn key8(i: u64) -> [u8; 8] {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut k = [b'A'; 8];
    let mut n = i;
    for d in k.iter_mut().rev() {
        *d = DIGITS[(n % 64) as usize];
        n /= 64;
    }
    k
}

impl Peer {
    pub fn connect(kind: PeerKind, addr: SocketAddr) -> Result<Peer, String> {
        let stream = TcpStream::connect_timeout(&addr, REPLY_TIMEOUT)
            .map_err(|e| format!("cannot connect to {} at {addr}: {e}", kind.name()))?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT)).map_err(|e| e.to_string())?;
        let mut peer = Peer { kind, addr, stream, pid: 0 };
        let pid = match kind {
            PeerKind::Redis => info_field(&peer.redis(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?, "process_id"),
            PeerKind::Memcached => info_field(&peer.memcached(b"stats\r\n")?, "pid"),
        };
        peer.pid = pid.ok_or_else(|| format!("{} at {addr} did not say its process id", kind.name()))? as u32;
        Ok(peer)
    }

    /// Empties the store: Redis FLUSHALL, then MEMORY PURGE (asks its
    /// allocator to return freed pages, so that RSS starts low; an error
    /// of it is ignored); memcached flush_all (its items become invalid
    /// at once and are reclaimed lazily, so `curr_items` may stay up).
    pub fn flush(&mut self) -> Result<(), String> {
        match self.kind {
            PeerKind::Redis => {
                let r = self.redis(b"*1\r\n$8\r\nFLUSHALL\r\n")?;
                if !r.starts_with("+OK") {
                    return Err(format!("FLUSHALL: {}", r.trim_end()));
                }
                self.redis(b"*2\r\n$6\r\nMEMORY\r\n$5\r\nPURGE\r\n")?;
            }
            PeerKind::Memcached => {
                let r = self.memcached_line(b"flush_all\r\n")?;
                if r.trim_end() != "OK" {
                    return Err(format!("flush_all: {}", r.trim_end()));
                }
            }
        }
        Ok(())
    }

    /// What the peer holds now.
    pub fn accounting(&mut self) -> Result<Accounting, String> {
        let mut a = Accounting {
            rss_bytes: Some(shoal_bench_baseline::rss::rss_of(self.pid)).filter(|&b| b > 0),
            ..Accounting::default()
        };
        let (kind, addr) = (self.kind, self.addr);
        let missing = |what: &str| format!("{} at {addr} did not report {what}", kind.name());
        match self.kind {
            PeerKind::Redis => {
                let info = self.redis(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")?;
                a.bytes = info_field(&info, "used_memory").ok_or_else(|| missing("used_memory"))?;
                let size = self.redis(b"*1\r\n$6\r\nDBSIZE\r\n")?;
                a.items = size.trim_start_matches(':').trim_end().parse().map_err(|_| missing("DBSIZE"))?;
            }
            PeerKind::Memcached => {
                let stats = self.memcached(b"stats\r\n")?;
                let hash = info_field(&stats, "hash_bytes").ok_or_else(|| missing("hash_bytes"))?;
                a.bytes = info_field(&stats, "bytes").ok_or_else(|| missing("bytes"))? + hash;
                a.items = info_field(&stats, "curr_items").ok_or_else(|| missing("curr_items"))?;
                a.slab_bytes = Some(slab_chunk_bytes(&self.memcached(b"stats slabs\r\n")?) + hash);
            }
        }
        Ok(a)
    }

    /// Sends a RESP command and reads its one reply (a line or a bulk
    /// string) as text.
    fn redis(&mut self, command: &[u8]) -> Result<String, String> {
        self.ask(command, |b| {
            let Some(end) = b.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
            if b[0] != b'$' {
                return Ok(Some(end + 2));
            }
            let len: i64 =
                std::str::from_utf8(&b[1..end]).ok().and_then(|s| s.parse().ok()).ok_or("bad bulk length")?;
            let total = end + 2 + usize::try_from(len).unwrap_or(0) + if len < 0 { 0 } else { 2 };
            Ok((b.len() >= total).then_some(total))
        })
    }

    /// Sends a memcached `stats` command and reads its lines up to END.
    fn memcached(&mut self, command: &[u8]) -> Result<String, String> {
        self.ask(command, |b| {
            if b.starts_with(b"END\r\n") {
                return Ok(Some(5));
            }
            if b.starts_with(b"ERROR") || b.starts_with(b"CLIENT_ERROR") || b.starts_with(b"SERVER_ERROR") {
                return Err(String::from_utf8_lossy(b).trim_end().to_string());
            }
            Ok(b.windows(7).position(|w| w == b"\r\nEND\r\n").map(|i| i + 7))
        })
    }

    /// Sends a memcached command answered with one line.
    fn memcached_line(&mut self, command: &[u8]) -> Result<String, String> {
        self.ask(command, |b| Ok(b.windows(2).position(|w| w == b"\r\n").map(|i| i + 2)))
    }

    /// Writes `command`, then reads until `complete` says how long the
    /// reply is (bounded by [`MAX_ADMIN_REPLY`] and the read timeout).
    fn ask(
        &mut self,
        command: &[u8],
        complete: impl Fn(&[u8]) -> Result<Option<usize>, String>,
    ) -> Result<String, String> {
        let who = format!("{} at {}", self.kind.name(), self.addr);
        self.stream.write_all(command).map_err(|e| format!("{who}: send: {e}"))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 << 10];
        loop {
            if !buf.is_empty() {
                if let Some(n) = complete(&buf).map_err(|e| format!("{who}: {e}"))? {
                    buf.truncate(n);
                    return Ok(String::from_utf8_lossy(&buf).into_owned());
                }
            }
            if buf.len() > MAX_ADMIN_REPLY {
                return Err(format!("{who}: a reply over {MAX_ADMIN_REPLY} bytes"));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(format!("{who}: connection closed")),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("{who}: receive: {e}")),
            }
        }
    }
}

/// Loads items `0..n`, each an 8-byte key ([`key8`]) and `size` bytes of
/// value, with pipelined SETs (Redis) or sets (memcached), [`LOAD_DEPTH`]
/// per round over one connection. Any refusal stops the load.
pub fn load(kind: PeerKind, addr: SocketAddr, n: u64, size: usize) -> Result<(), String> {
    let mut wire: Box<dyn Wire> = match kind {
        PeerKind::Redis => Box::new(Resp::with_wait(addr, None)?),
        PeerKind::Memcached => Box::new(Memcached::connect(addr)?),
    };
    let value = vec![b'v'; size];
    let mut i = 0;
    while i < n {
        let end = (i + LOAD_DEPTH as u64).min(n);
        for k in i..end {
            wire.push(Req::Set(&key8(k), &value, 0))?;
        }
        let mut refused = None;
        wire.exchange(&mut |at, reply| {
            if reply != Reply::Stored && refused.is_none() {
                refused = Some(format!("item {}: {reply:?}", i + at as u64));
            }
        })?;
        if let Some(e) = refused {
            return Err(format!("{} refused a set: {e}", kind.name()));
        }
        i = end;
    }
    Ok(())
}

/// The number after `name:` (Redis INFO) or `STAT name ` (memcached
/// stats) in `text`.
fn info_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let l = l.trim_end();
        let v = l
            .strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .or_else(|| l.strip_prefix("STAT ").and_then(|r| r.strip_prefix(name)).and_then(|r| r.strip_prefix(' ')))?;
        v.parse().ok()
    })
}

/// Chunk size x used chunks, summed over the slab classes of a memcached
/// `stats slabs` reply (lines `STAT <class>:chunk_size N` and
/// `STAT <class>:used_chunks N`).
fn slab_chunk_bytes(text: &str) -> u64 {
    let mut sizes = std::collections::BTreeMap::<u32, (u64, u64)>::new();
    for l in text.lines() {
        let Some(rest) = l.trim_end().strip_prefix("STAT ") else { continue };
        let Some((class, rest)) = rest.split_once(':') else { continue };
        let (Ok(class), Some((field, value))) = (class.parse::<u32>(), rest.split_once(' ')) else { continue };
        let Ok(value) = value.parse::<u64>() else { continue };
        let e = sizes.entry(class).or_default();
        match field {
            "chunk_size" => e.0 = value,
            "used_chunks" => e.1 = value,
            _ => {}
        }
    }
    sizes.values().map(|(size, used)| size * used).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key8_is_eight_distinct_printable_bytes() {
        let keys: std::collections::HashSet<[u8; 8]> = (0..100_000).map(key8).collect();
        assert_eq!(keys.len(), 100_000);
        assert!(keys.iter().all(|k| k.iter().all(|c| c.is_ascii_graphic())));
        assert_ne!(key8(0), key8(1 << 40));
    }

    #[test]
    fn info_field_reads_redis_and_memcached_lines() {
        let redis = "# Memory\r\nused_memory:1234\r\nused_memory_human:1.2K\r\nused_memory_rss:99\r\n";
        assert_eq!(info_field(redis, "used_memory"), Some(1234));
        assert_eq!(info_field(redis, "used_memory_rss"), Some(99));
        let mc = "STAT pid 42\r\nSTAT bytes 10\r\nSTAT bytes_read 7\r\nEND\r\n";
        assert_eq!(info_field(mc, "bytes"), Some(10));
        assert_eq!(info_field(mc, "pid"), Some(42));
        assert_eq!(info_field(mc, "limit_maxbytes"), None);
    }

    #[test]
    fn slab_chunk_bytes_sums_classes() {
        let s = "STAT 1:chunk_size 96\r\nSTAT 1:used_chunks 10\r\nSTAT 2:chunk_size 120\r\n\
                 STAT 2:used_chunks 2\r\nSTAT active_slabs 2\r\nEND\r\n";
        assert_eq!(slab_chunk_bytes(s), 96 * 10 + 120 * 2);
    }
}
