//! The memcached front end: memcached's text protocol, classic and meta
//! commands (`docs/memcached.md`), so that memcached clients (pymemcache,
//! libmemcached, ...) work against Shoal on its own port
//! (`--memcached-port`, default 11212).
//!
//! Layers, each seeing only the one below: `frame` (bytes to command
//! lines and data blocks, bounded), the driver in `crate::connection`
//! (buffers, limits, timeouts, durability, forwarding; shared with the
//! Redis front end), this module's [`Memcached`] (one client: framing,
//! refusing oversized values, authentication, routing, dispatch), `cmd`
//! (one file per command family: parse, run, reply) and `items` (items
//! over the store's public operations: the Redis front end's database 0,
//! flags, expiry).
//!
//! In a cluster, a command whose key another server masters is forwarded
//! to that server's Redis port as `SHOAL.MC <request>` over the Redis
//! front end's pooled, authenticated connections (`resp::forward`); it runs
//! there through [`run_forwarded`], and its memcached reply comes back as
//! a bulk string. A multi-key get whose keys are on several servers is
//! split into one get per server, and the hits are put back in key order;
//! `flush_all` runs on every live server.

pub mod cmd;
pub mod frame;
pub mod items;

use crate::cluster::Route;
use crate::connection::{self, Fatal, Protocol, Step};
use crate::context::{Durability, ServerContext, ServerStats};
use crate::listener::{Connection, FrontEnd};
use crate::resp::db::TableCache;
use crate::resp::forward::{encode_request, memcached_job, Merge, Part, Target};
use crate::resp::routing::{NO_LEASE_PATIENCE, NO_TABLET_PATIENCE};
use crate::stream::ClientStream;
use crate::workers::{Placement, Served};
use bytes::BytesMut;
use cmd::{Command, Exec};
use frame::{Limits, Tokens};
use items::Items;
use shoal_cluster::ServerState;
use shoal_engine::key_hash;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpStream;
use tracing::debug;

/// Counters of the memcached front end (`stats`), over all its connections.
#[derive(Default)]
pub struct McStats {
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub delete_misses: AtomicU64,
    pub delete_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
}

impl McStats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// The command counters, named and ordered as memcached's `stats`.
    pub fn commands(&self) -> [(&'static str, &AtomicU64); 17] {
        [
            ("cmd_get", &self.cmd_get),
            ("cmd_set", &self.cmd_set),
            ("cmd_flush", &self.cmd_flush),
            ("cmd_touch", &self.cmd_touch),
            ("get_hits", &self.get_hits),
            ("get_misses", &self.get_misses),
            ("delete_misses", &self.delete_misses),
            ("delete_hits", &self.delete_hits),
            ("incr_misses", &self.incr_misses),
            ("incr_hits", &self.incr_hits),
            ("decr_misses", &self.decr_misses),
            ("decr_hits", &self.decr_hits),
            ("cas_misses", &self.cas_misses),
            ("cas_hits", &self.cas_hits),
            ("cas_badval", &self.cas_badval),
            ("touch_hits", &self.touch_hits),
            ("touch_misses", &self.touch_misses),
        ]
    }

    /// `stats reset`: the command counters back to 0.
    pub fn reset(&self) {
        for (_, c) in self.commands() {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// The memcached listener's front end.
pub struct MemcachedFrontEnd;

impl FrontEnd for MemcachedFrontEnd {
    fn name(&self) -> &'static str {
        "memcached"
    }

    fn refusal(&self) -> &'static [u8] {
        b"ERROR Too many open connections\r\n"
    }

    fn serve<S: ClientStream>(self: Arc<Self>, stream: S, conn: Connection, placement: Placement) -> Served {
        connection::serve::<Memcached, S>(stream, conn, placement)
    }

    fn serve_plain_on_tls(self: Arc<Self>, stream: TcpStream, conn: Connection, _: Placement) -> Served {
        Box::pin(async move {
            ServerStats::add(&conn.ctx.stats.tls_handshake_failures, 1);
            debug!("memcached connection {} from {}: not TLS on a TLS port: refused", conn.id, conn.peer);
            let _ = stream.try_write(b"SERVER_ERROR this port speaks TLS only\r\n");
            None
        })
    }
}

/// What to make of a forwarded request's reply.
enum Awaiting {
    Nothing,
    Reply {
        noreply: bool,
    },
    /// A get split over several servers: the hits come grouped by server,
    /// and go to the client in the order of these keys.
    Get {
        keys: Vec<Vec<u8>>,
    },
}

/// One memcached client.
pub struct Memcached {
    ctx: Arc<ServerContext>,
    limits: Limits,
    tokens: Tokens,
    cache: TableCache,
    /// Values read from and written to the store (reused).
    buf: Vec<u8>,
    value: Vec<u8>,
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    quit: bool,
    touched: bool,
    authenticated: bool,
    /// Cluster member: commands are routed first.
    clustered: bool,
    /// Running requests forwarded by another server: never forward.
    local_only: bool,
    no_tablet_since: Option<Instant>,
    awaiting: Awaiting,
    /// Counted in the open connections while it lives.
    counted: bool,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        if self.counted {
            self.ctx.memcached.curr_connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
const AUTH_FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";
const NOT_HERE: &str = "SERVER_ERROR the key's tablet is not served by this server (cluster map changing)";
const RECOVERING: &str = "SERVER_ERROR tablet is being recovered";
const NO_TABLET: &str = "SERVER_ERROR no tablet serves this key yet (cluster map changing)";
const NO_LEASE: &str = "SERVER_ERROR this server's lease on the key's tablet has lapsed";

/// Where a command runs.
enum Routed {
    Local,
    Forward(crate::resp::forward::Job),
    Wait,
    Error(&'static str),
}

impl Memcached {
    fn build(ctx: Arc<ServerContext>, local_only: bool) -> Memcached {
        let limits = Limits::new(ctx.config.max_request_size.0 as usize, ctx.store.config().max_value_bytes);
        Memcached {
            limits,
            tokens: Tokens::default(),
            cache: TableCache::default(),
            buf: Vec::new(),
            value: Vec::new(),
            swallow: 0,
            quit: false,
            touched: false,
            authenticated: local_only || !ctx.auth.required(),
            clustered: ctx.cluster.is_some(),
            local_only,
            no_tablet_since: None,
            awaiting: Awaiting::Nothing,
            counted: false,
            ctx,
        }
    }

    /// memcached's ASCII authentication (as `memcached -Y`): before
    /// anything else, a `set` of any key whose data is "<user> <password>".
    fn authenticate(&mut self, cmd: &Command<'_>, data: &[u8], out: &mut BytesMut) {
        let Command::Storage(_) = cmd else {
            return out.extend_from_slice(UNAUTHENTICATED);
        };
        let mut words = data.splitn(2, |&c| c == b' ');
        let (user, password) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
        let password = password.strip_suffix(b"\r\n").unwrap_or(password);
        if self.ctx.auth.authenticate(user, password) {
            self.authenticated = true;
            out.extend_from_slice(b"STORED\r\n");
        } else {
            out.extend_from_slice(AUTH_FAILURE);
        }
    }

    fn run(&mut self, cmd: &Command<'_>, data: &[u8], out: &mut BytesMut) {
        let mut x = Exec {
            ctx: &self.ctx,
            items: Items::new(&self.ctx, &self.cache),
            stats: &self.ctx.memcached,
            buf: &mut self.buf,
            value: &mut self.value,
        };
        cmd.run(data, &mut x, out);
    }

    /// Where `cmd` (whose whole request is `request`) runs, in a cluster.
    fn route(&mut self, cmd: &Command<'_>, request: &[u8]) -> Routed {
        let routed = self.decide(cmd, request);
        if !matches!(routed, Routed::Wait) {
            self.no_tablet_since = None;
        }
        routed
    }

    fn decide(&mut self, cmd: &Command<'_>, request: &[u8]) -> Routed {
        let Some(node) = self.ctx.cluster.clone() else { return Routed::Local };
        if let Command::FlushAll(_) = cmd {
            return self.everywhere(request);
        }
        let keys: Vec<&[u8]> = match cmd {
            Command::Retrieval(r) => r.keys.clone(),
            _ => match cmd.key() {
                Some(k) => vec![k],
                None => return Routed::Local,
            },
        };
        let items = Items::new(&self.ctx, &self.cache);
        let table = match cmd.writes() {
            true => match items.table_for_write() {
                Ok(t) => t,
                Err(_) => return Routed::Error("SERVER_ERROR cannot create the table"),
            },
            false => match items.table() {
                Some(t) => t,
                None => return Routed::Local,
            },
        };
        let mut owners = Vec::with_capacity(keys.len());
        for key in &keys {
            match node.route(table, key_hash(table, key)) {
                Route::Local => owners.push(None),
                Route::Remote { .. } if self.local_only => return Routed::Error(NOT_HERE),
                Route::Remote { resp, .. } => owners.push(Some(resp)),
                Route::Recovering | Route::Moving => return Routed::Error(RECOVERING),
                Route::NoTablet => return self.wait_or(NO_TABLET_PATIENCE, NO_TABLET),
                Route::NoLease => return self.wait_or(NO_LEASE_PATIENCE, NO_LEASE),
            }
        }
        if owners.iter().all(Option::is_none) {
            return Routed::Local;
        }
        let noreply = cmd.noreply();
        self.awaiting = Awaiting::Reply { noreply };
        if let [Some(addr)] = owners[..] {
            return Routed::Forward(memcached_job(&self.ctx, vec![remote(addr, request)], Merge::Relay));
        }
        // A get of keys on several servers: one get per server, of its keys;
        // `forwarded` puts the hits back in key order.
        let Command::Retrieval(r) = cmd else { return Routed::Error(NOT_HERE) };
        let mut groups: Vec<(Option<SocketAddr>, Vec<u8>)> = Vec::new();
        for (key, owner) in keys.iter().zip(owners) {
            let at = match groups.iter().position(|(o, _)| *o == owner) {
                Some(at) => at,
                None => {
                    let mut line = self.tokens_name(request);
                    if let Some(exptime) = r.touch {
                        line.extend_from_slice(format!(" {exptime}").as_bytes());
                    }
                    groups.push((owner, line));
                    groups.len() - 1
                }
            };
            groups[at].1.push(b' ');
            groups[at].1.extend_from_slice(key);
        }
        let mut parts = Vec::with_capacity(groups.len());
        for (owner, mut line) in groups {
            line.extend_from_slice(b"\r\n");
            parts.push(match owner {
                None => here(self.run_one(&line)),
                Some(addr) => remote(addr, &line),
            });
        }
        self.awaiting = Awaiting::Get { keys: keys.iter().map(|k| k.to_vec()).collect() };
        Routed::Forward(memcached_job(&self.ctx, parts, Merge::MemcachedGet))
    }

    /// The command name of `request`.
    fn tokens_name(&self, request: &[u8]) -> Vec<u8> {
        request.iter().take_while(|&&c| c != b' ').copied().collect()
    }

    /// Runs one complete request here; its reply.
    fn run_one(&mut self, request: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        let local = std::mem::replace(&mut self.local_only, true);
        let mut at = 0;
        while at < request.len() {
            match self.step(&request[at..], &mut out) {
                Ok(Some((n, _))) if n > 0 => at += n,
                Ok(_) => break,
                Err(e) => {
                    out.extend_from_slice(&e.reply);
                    break;
                }
            }
        }
        self.local_only = local;
        out.to_vec()
    }

    /// flush_all: here and on every other live server.
    fn everywhere(&mut self, request: &[u8]) -> Routed {
        let Some(node) = self.ctx.cluster.clone() else { return Routed::Local };
        if self.local_only {
            return Routed::Local;
        }
        let map = node.map();
        let others: Vec<SocketAddr> =
            map.servers.iter().filter(|s| s.id != node.id && s.state != ServerState::Down).map(|s| s.resp).collect();
        if others.is_empty() {
            return Routed::Local;
        }
        let noreply = request.windows(7).any(|w| w == b"noreply");
        self.awaiting = Awaiting::Reply { noreply };
        let mut parts = vec![here(self.run_one(request))];
        parts.extend(others.into_iter().map(|addr| remote(addr, request)));
        Routed::Forward(memcached_job(&self.ctx, parts, Merge::MemcachedAll))
    }

    fn wait_or(&mut self, patience: std::time::Duration, error: &'static str) -> Routed {
        if self.local_only {
            return Routed::Error(error);
        }
        let since = *self.no_tablet_since.get_or_insert_with(Instant::now);
        match since.elapsed() >= patience {
            true => Routed::Error(error),
            false => Routed::Wait,
        }
    }
}

/// A part run here already: its memcached reply, as the bulk string a
/// remote part answers.
fn here(reply: Vec<u8>) -> Part {
    let mut out = Vec::new();
    out.push(b'$');
    out.extend_from_slice(reply.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&reply);
    out.extend_from_slice(b"\r\n");
    Part { target: Target::Here(BytesMut::from(&out[..])), slots: Vec::new() }
}

/// `request` (a memcached request), to run on the server at `addr`.
fn remote(addr: SocketAddr, request: &[u8]) -> Part {
    let mut encoded = Vec::with_capacity(request.len() + 32);
    encode_request(&[b"shoal.mc", request], &mut encoded);
    Part { target: Target::Remote { addr, request: encoded }, slots: Vec::new() }
}

impl Protocol for Memcached {
    const NAME: &'static str = "memcached";

    fn new(ctx: Arc<ServerContext>, _conn: &crate::listener::Connection) -> Memcached {
        McStats::add(&ctx.memcached.curr_connections);
        McStats::add(&ctx.memcached.total_connections);
        let mut m = Memcached::build(ctx, false);
        m.counted = true;
        m
    }

    fn step(&mut self, input: &[u8], out: &mut BytesMut) -> Result<Option<(usize, Step)>, Fatal> {
        if self.swallow > 0 {
            if input.is_empty() {
                return Ok(None);
            }
            let n = self.swallow.min(input.len());
            self.swallow -= n;
            return Ok(Some((n, Step::Done)));
        }
        let line_len = match frame::line(input, &self.limits) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(None),
            Err(frame::LineTooLong) => {
                return Err(Fatal {
                    reply: b"CLIENT_ERROR line too long\r\n".to_vec(),
                    reason: format!("a command line longer than {} bytes", self.limits.max_line),
                })
            }
        };
        let line = frame::trim_eol(&input[..line_len]);
        self.tokens.split(line);
        ServerStats::add(&self.ctx.stats.commands, 1);
        // Requests refused before they run count as rejected (`metrics::ops`).
        let op = cmd::op_index(self.tokens.get(line, 0));
        let cmd = match cmd::parse(line, &self.tokens) {
            Ok(cmd) => cmd,
            Err(refusal) => {
                self.ctx.stats.memcached_ops.rejected(op);
                out.extend_from_slice(refusal.as_bytes());
                return Ok(Some((line_len, Step::Done)));
            }
        };
        let (total, data) = match cmd.data_len() {
            None => (line_len, &[][..]),
            Some(n) => {
                let block = n.saturating_add(2);
                let total = line_len.saturating_add(block);
                if n > self.limits.max_value || total > self.limits.max_request {
                    self.ctx.stats.memcached_ops.rejected(op);
                    // memcached's answer; the data is read and dropped, so
                    // the connection stays usable.
                    if !cmd.noreply() {
                        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
                    }
                    let have = (input.len() - line_len).min(block);
                    self.swallow = block - have;
                    return Ok(Some((line_len + have, Step::Done)));
                }
                if input.len() < total {
                    return Ok(None);
                }
                if &input[total - 2..total] != b"\r\n" {
                    self.ctx.stats.memcached_ops.rejected(op);
                    if !cmd.noreply() {
                        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
                    }
                    return Ok(Some((total, Step::Done)));
                }
                (total, &input[line_len..total - 2])
            }
        };
        if !self.authenticated {
            self.ctx.stats.memcached_ops.rejected(op);
            match cmd {
                Command::Quit => self.quit = true,
                _ => self.authenticate(&cmd, data, out),
            }
            return Ok(Some((total, Step::Done)));
        }
        if let Command::Quit = cmd {
            self.ctx.stats.memcached_ops.ran(op, std::time::Duration::ZERO, false);
            self.quit = true;
            return Ok(Some((total, Step::Done)));
        }
        // From routing to the end of the command (`ClusterNode::serving`).
        let node = self.ctx.cluster.clone();
        let _serving = node.as_ref().map(|n| n.serving());
        if self.clustered && cmd.touches_data() {
            match self.route(&cmd, &input[..total]) {
                Routed::Local => {}
                Routed::Forward(job) => return Ok(Some((total, Step::Forward(job)))),
                Routed::Wait => return Ok(Some((0, Step::Retry))),
                Routed::Error(e) => {
                    self.ctx.stats.memcached_ops.rejected(op);
                    if !cmd.noreply() {
                        cmd::put_error(out, e);
                    }
                    return Ok(Some((total, Step::Done)));
                }
            }
            self.touched = true;
        }
        let (from, started) = (out.len(), Instant::now());
        self.run(&cmd, data, out);
        let took = started.elapsed();
        self.ctx.stats.memcached_ops.ran(op, took, cmd::is_error(&out[from..]));
        Ok(Some((total, Step::Done)))
    }

    fn forwarded(&mut self, reply: BytesMut) -> BytesMut {
        let (noreply, keys) = match std::mem::replace(&mut self.awaiting, Awaiting::Nothing) {
            // The pause before retrying a request: nothing to say.
            Awaiting::Nothing => return reply,
            Awaiting::Reply { noreply } => (noreply, None),
            Awaiting::Get { keys } => (false, Some(keys)),
        };
        let mut out = BytesMut::new();
        match reply.first() {
            Some(b'$') => match (bulk_payload(&reply), keys) {
                (Some(payload), Some(keys)) => in_key_order(payload, &keys, &mut out),
                (Some(payload), None) => out.extend_from_slice(payload),
                (None, _) => out.extend_from_slice(b"SERVER_ERROR unexpected reply from another server\r\n"),
            },
            Some(b'-') => {
                let text = reply[1..].strip_suffix(b"\r\n").unwrap_or(&reply[1..]);
                out.extend_from_slice(b"SERVER_ERROR ");
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            _ => out.extend_from_slice(b"SERVER_ERROR unexpected reply from another server\r\n"),
        }
        if noreply {
            out.clear();
        }
        out
    }

    fn quit(&self) -> bool {
        self.quit
    }

    fn take_touched(&mut self) -> Option<Durability> {
        std::mem::take(&mut self.touched).then_some(Durability::LOG_END)
    }

    fn held_bytes(&self) -> usize {
        self.buf.capacity() + self.value.capacity()
    }

    fn trim(&mut self, keep: usize) {
        if self.buf.capacity() > keep {
            self.buf = Vec::new();
        }
        if self.value.capacity() > keep {
            self.value = Vec::new();
        }
    }
}

/// `hits` (VALUE items then END, grouped by server) with the items in the
/// order of `keys` (a key asked twice gets its item twice, as each server
/// answered it). Anything else (an error line) is passed on as it is.
fn in_key_order(hits: &[u8], keys: &[Vec<u8>], out: &mut BytesMut) {
    let mut items: std::collections::HashMap<&[u8], std::collections::VecDeque<&[u8]>> = Default::default();
    let mut rest = hits;
    while !rest.is_empty() && rest != b"END\r\n" {
        let Some(eol) = rest.iter().position(|&c| c == b'\n') else { break };
        let header = &rest[..eol];
        let mut words = header.strip_suffix(b"\r").unwrap_or(header).split(|&c| c == b' ');
        let (Some(b"VALUE"), Some(key), Some(_flags), Some(len)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return out.extend_from_slice(hits);
        };
        let Some(end) =
            frame::parse_u64(len).and_then(|n| usize::try_from(n).ok()).and_then(|n| (eol + 1).checked_add(n + 2))
        else {
            return out.extend_from_slice(hits);
        };
        if end > rest.len() {
            return out.extend_from_slice(hits);
        }
        items.entry(key).or_default().push_back(&rest[..end]);
        rest = &rest[end..];
    }
    if rest != b"END\r\n" {
        return out.extend_from_slice(hits);
    }
    for key in keys {
        if let Some(item) = items.get_mut(&key[..]).and_then(|q| q.pop_front()) {
            out.extend_from_slice(item);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// The payload of a RESP bulk string reply.
fn bulk_payload(reply: &[u8]) -> Option<&[u8]> {
    let body = reply.strip_prefix(b"$")?;
    let eol = body.iter().position(|&c| c == b'\r')?;
    let len = usize::try_from(crate::resp::frame::parse_i64(&body[..eol])?).ok()?;
    body.get(eol + 2..eol + 2 + len)
}

/// Runs `request`, one memcached request forwarded by another server of
/// the cluster (`SHOAL.MC`), here only; its reply. A key this server does
/// not master is refused with a SERVER_ERROR, so a request never loops.
pub fn run_forwarded(ctx: &Arc<ServerContext>, request: &[u8]) -> Vec<u8> {
    // Its keys are this server's: a server that has no lease yet (just
    // enlisted, its head not yet on a backup) or lost it for a moment
    // waits for it, as its own front ends do (`Route::NoLease`), rather
    // than answer an error the sender can only relay. Bounded, on the
    // worker thread that runs the command.
    let deadline = Instant::now() + NO_LEASE_PATIENCE;
    while !ctx.lease_held() && Instant::now() < deadline && !ctx.cluster.as_ref().is_some_and(|n| n.is_dead()) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let mut m = Memcached::build(ctx.clone(), true);
    m.run_one(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_index_names_every_command_of_ops() {
        for (i, name) in cmd::OPS.iter().enumerate().skip(1) {
            assert_eq!(cmd::op_index(name.as_bytes()), i);
        }
        assert_eq!(cmd::op_index(b"nosuch"), 0);
        assert_eq!(cmd::op_index(b"GET"), 0, "memcached's names are lower case");
    }

    #[test]
    fn in_key_order_reorders_hits_of_several_servers() {
        let hits = b"VALUE b 0 1\r\nB\r\nVALUE a 5 2\r\nAA\r\nVALUE a 5 2\r\nAA\r\nEND\r\n";
        let keys: Vec<Vec<u8>> = [&b"a"[..], b"x", b"b", b"a"].iter().map(|k| k.to_vec()).collect();
        let mut out = BytesMut::new();
        in_key_order(hits, &keys, &mut out);
        assert_eq!(&out[..], b"VALUE a 5 2\r\nAA\r\nVALUE b 0 1\r\nB\r\nVALUE a 5 2\r\nAA\r\nEND\r\n");
        let mut out = BytesMut::new();
        in_key_order(b"SERVER_ERROR out of memory\r\n", &keys, &mut out);
        assert_eq!(&out[..], b"SERVER_ERROR out of memory\r\n");
        let mut out = BytesMut::new();
        in_key_order(b"VALUE a 0 99\r\nshort\r\nEND\r\n", &keys, &mut out);
        assert_eq!(&out[..], b"VALUE a 0 99\r\nshort\r\nEND\r\n", "malformed: passed on");
    }
}
