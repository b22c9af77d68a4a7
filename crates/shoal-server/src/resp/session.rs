//! One client's state (selected database, protocol version, name) and the
//! dispatch of its commands: look the name up, check the arity, (in a
//! cluster) route, run.

use crate::admin::clients::ClientSlot;
pub use crate::connection::Step;
use crate::context::{Durability, ServerContext, ServerStats};
use crate::resp::cmd;
use crate::resp::db::{Db, TableCache};
use crate::resp::frame::Args;
use crate::resp::multi::{self, Multi, Seen};
use crate::resp::reply::{ErrorReply, Protocol, Reply};
use crate::resp::routing::{self, Routed};
use crate::resp::xstream::{self, OnStreamKey};
use bytes::BytesMut;
use shoal_engine::Txn;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub struct Session {
    pub ctx: Arc<ServerContext>,
    pub id: u64,
    /// Selected database (0..16).
    pub db: usize,
    pub proto: Protocol,
    /// The connection's entry in the client registry (its name and library
    /// live there), registered while the session lives.
    pub slot: Arc<ClientSlot>,
    /// Logged in (see `auth`): every command may run. A connection starts
    /// logged in when the server needs no authentication.
    pub authenticated: bool,
    /// Set by QUIT: the connection closes once its replies are sent.
    pub quit: bool,
    /// Most bytes of replies the connection may hold; commands with large
    /// replies (MGET) stop early past it, and the connection is then closed.
    pub reply_limit: usize,
    /// A reusable buffer for values read from the store.
    pub scratch: Vec<u8>,
    /// The server is part of a cluster: commands are routed first.
    clustered: bool,
    /// The server runs in Redis Cluster mode (`routing::decide_by_slot`).
    pub cluster_mode: bool,
    /// Set by SHOAL.LOCAL (on connections from other servers): run every
    /// command here, never forward (see `routing`).
    pub local_only: bool,
    /// In a cluster: a command run here since the connection last took
    /// this flag read or wrote stored data (`cmd::touches_data`): its reply
    /// waits until the log is durable and needs the lease.
    pub touched: bool,
    /// What the replies of those commands wait for (see [`Session::touch`]).
    pub durable: Durability,
    /// When the request being retried first found no tablet for its key.
    pub no_tablet_since: Option<Instant>,
    /// Between MULTI and EXEC: the queued commands (`multi`).
    pub multi: Option<Multi>,
    /// WATCHed keys: per (database, key), what WATCH saw.
    watched: HashMap<(usize, Vec<u8>), Seen>,
    /// Bytes of keys in `watched`.
    watched_bytes: usize,
    /// In a cluster: the (database, keys) of a WATCH whose versions are
    /// being read on other servers ([`Session::forwarded`] records them).
    pub pending_watch: Option<(usize, Vec<Vec<u8>>)>,
    /// While EXEC runs the queued commands: their store transaction, which
    /// [`Db`] reads and writes through.
    pub txn: RefCell<Option<Txn>>,
    /// A blocked XREAD's state, kept while it waits and runs again
    /// (`cmd::xread`).
    pub blocked_read: Option<crate::resp::cmd::BlockedRead>,
    /// Set by a command that blocks instead of replying: the connection
    /// runs the same request again once it completes ([`Step::Wait`]).
    pub wait: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    tables: TableCache,
}

impl Session {
    /// A session for connection `id`, whose peer is not known (tests).
    pub fn new(ctx: Arc<ServerContext>, id: u64) -> Session {
        let unknown = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        Session::with_slot(ctx, ClientSlot::new(id, unknown, None, -1))
    }

    /// A session registered in the client registry as `slot`.
    pub fn with_slot(ctx: Arc<ServerContext>, slot: ClientSlot) -> Session {
        let id = slot.id;
        let slot = Arc::new(slot);
        ctx.admin.clients.register(slot.clone());
        let reply_limit = ctx.config.reply_buffer_size.0 as usize;
        let clustered = ctx.cluster.is_some();
        let cluster_mode = ctx.config.cluster_mode;
        let authenticated = !ctx.auth.required();
        Session {
            ctx,
            id,
            db: 0,
            proto: Protocol::Resp2,
            slot,
            authenticated,
            quit: false,
            reply_limit,
            scratch: Vec::new(),
            clustered,
            cluster_mode,
            local_only: false,
            touched: false,
            durable: Durability::default(),
            no_tablet_since: None,
            multi: None,
            watched: HashMap::new(),
            watched_bytes: 0,
            pending_watch: None,
            txn: RefCell::new(None),
            blocked_read: None,
            wait: None,
            tables: TableCache::default(),
        }
    }

    /// The selected database.
    /// A command that reads or writes stored data ran here (in a
    /// cluster): its reply needs the lease and waits for durability, up to
    /// the whole log applied so far unless the command says itself what
    /// it waits for (`cmd::waits_for_own_keys`).
    pub fn touch(&mut self, spec: &cmd::CommandSpec) {
        self.touched = true;
        if !cmd::waits_for_own_keys(spec) {
            self.durable.log_end();
        }
    }

    pub fn db(&self) -> Db<'_> {
        Db::new(&self.ctx, self.db, &self.tables, &self.txn)
    }

    pub fn table_cache(&self) -> &TableCache {
        &self.tables
    }

    /// Whether the server is part of a cluster.
    pub fn clustered(&self) -> bool {
        self.clustered
    }

    /// Most bytes of queued commands, and of watched keys, a connection may
    /// hold: what it may hold of unexecuted requests.
    pub fn transaction_limit(&self) -> usize {
        self.ctx.config.request_buffer_size.0 as usize
    }

    /// Memory held by queued commands and watched keys (reported to the
    /// server's client buffer budget with the connection's buffers).
    pub fn transaction_bytes(&self) -> usize {
        self.multi.as_ref().map_or(0, |m| m.bytes) + self.watched_bytes
    }

    /// A command was refused between MULTI and EXEC: EXEC will apply nothing.
    pub fn abort_multi(&mut self) {
        if let Some(m) = self.multi.as_mut() {
            m.aborted = true;
        }
    }

    /// Watches `key` of database `db`, seen as `version`. A key watched
    /// already keeps the version first seen (as Redis keeps its first watch).
    pub fn watch(&mut self, db: usize, key: &[u8], version: Seen) -> Result<(), ErrorReply> {
        if self.watched.contains_key(&(db, key.to_vec())) {
            return Ok(());
        }
        let bytes = key.len() + 64;
        if self.watched_bytes + bytes > self.transaction_limit() {
            return Err(ErrorReply::new("ERR too many watched keys for this connection (request-buffer-size)"));
        }
        self.watched_bytes += bytes;
        self.watched.insert((db, key.to_vec()), version);
        Ok(())
    }

    pub fn unwatch(&mut self) {
        self.watched = HashMap::new();
        self.watched_bytes = 0;
    }

    /// The watched keys (database, key, version seen), unwatching them all.
    pub fn take_watched(&mut self) -> Vec<(usize, Vec<u8>, Seen)> {
        self.watched_bytes = 0;
        std::mem::take(&mut self.watched).into_iter().map(|((db, key), v)| (db, key, v)).collect()
    }

    /// The watched keys (database, key, version seen).
    pub fn watched_list(&self) -> Vec<(usize, Vec<u8>, Seen)> {
        self.watched.iter().map(|((db, key), v)| (*db, key.clone(), *v)).collect()
    }

    /// The client's reply to a forwarded request, from the reply it got: a
    /// WATCH of keys on other servers records the versions they sent and
    /// answers "+OK"; anything else is the reply as it came.
    pub fn forwarded(&mut self, reply: BytesMut) -> BytesMut {
        let Some((db, keys)) = self.pending_watch.take() else { return reply };
        if reply.first() == Some(&b'-') {
            return reply;
        }
        let mut out = BytesMut::new();
        let mut r = Reply::new(&mut out, self.proto);
        let Some(versions) = multi::parse_versions(&reply, keys.len()) else {
            r.error(&ErrorReply::new("ERR unexpected reply from another server to SHOAL.VERSIONS"));
            return out;
        };
        for (key, version) in keys.iter().zip(versions) {
            if let Err(e) = self.watch(db, key, version) {
                r.error(&e);
                return out;
            }
        }
        r.ok();
        out
    }

    /// Runs one command (a non-empty request): appends its reply to `out`,
    /// or (in a cluster) says how else it is answered.
    pub fn execute(&mut self, args: Args<'_>, out: &mut BytesMut) -> Step {
        let start = out.len();
        let step = self.dispatch(args, out);
        // Every error reply this request made here counts (stats.rs).
        if out.get(start) == Some(&b'-') {
            let end = out[start..].iter().position(|&c| c == b'\r').map_or(out.len(), |p| start + p);
            self.ctx.stats.resp_commands.error(&out[start + 1..end]);
        }
        step
    }

    fn dispatch(&mut self, args: Args<'_>, out: &mut BytesMut) -> Step {
        let mut reply = Reply::new(out, self.proto);
        let Some(index) = cmd::lookup_index(args.get(0)) else {
            ServerStats::add(&self.ctx.stats.commands, 1);
            self.abort_multi();
            reply.error(&cmd::unknown_command(args));
            return Step::Done;
        };
        let entry = &cmd::COMMANDS[index];
        if !entry.spec.arity_ok(args.len()) {
            ServerStats::add(&self.ctx.stats.commands, 1);
            self.ctx.stats.resp_commands.rejected(index);
            self.abort_multi();
            reply.error(&cmd::wrong_arity(entry.spec.name));
            return Step::Done;
        }
        // As Redis: unknown commands and arity errors are reported first.
        if !self.authenticated && !cmd::allowed_before_auth(entry.spec) {
            ServerStats::add(&self.ctx.stats.commands, 1);
            self.ctx.stats.resp_commands.rejected(index);
            self.abort_multi();
            reply.error(&cmd::NOAUTH);
            return Step::Done;
        }
        let before = reply.buffered();
        let started = Instant::now();
        if let Some(step) = multi::intercept(self, entry, args, &mut reply) {
            ServerStats::add(&self.ctx.stats.commands, 1);
            let queued = self.multi.as_ref().map_or(-1, |m| m.queued_count() as i64);
            self.slot.multi.store(queued, std::sync::atomic::Ordering::Relaxed);
            if reply.buffered() > before && reply.last_was_error(before) {
                self.ctx.stats.resp_commands.rejected(index);
            }
            // EXEC ran here: monitors see it after its commands (a queued
            // command is shown when EXEC runs it).
            if std::ptr::eq(entry.spec, &cmd::multi::EXEC) && matches!(step, Step::Done) {
                let usec = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.observe(index, None, args, usec);
            }
            return step;
        }
        if self.clustered && !self.cluster_mode && !self.local_only && std::ptr::eq(entry.spec, &cmd::get::SPEC) {
            if let Some(value) = self.cached_get(args.get(1)) {
                // A hot key of another member of this server's group,
                // answered from this member's copy (`sc.rs`).
                ServerStats::add(&self.ctx.stats.commands, 1);
                let started = Instant::now();
                match value {
                    shoal_symcache::wire::Value::Present { bytes, .. } => {
                        ServerStats::add(&self.ctx.stats.keyspace_hits, 1);
                        reply.bulk(&bytes)
                    }
                    shoal_symcache::wire::Value::Absent => {
                        ServerStats::add(&self.ctx.stats.keyspace_misses, 1);
                        reply.null()
                    }
                }
                self.ctx.stats.resp_commands.ran(index, started.elapsed(), false);
                self.observe(index, None, args, 0);
                return Step::Done;
            }
        }
        // From routing to the end of the command (`ClusterNode::serving`).
        let node = self.ctx.cluster.clone();
        let _serving = node.as_ref().map(|n| n.serving());
        if self.clustered || self.cluster_mode {
            match routing::route(self, entry, args) {
                Routed::Local => {}
                Routed::Wait => return Step::Retry,
                Routed::Error(e) => {
                    ServerStats::add(&self.ctx.stats.commands, 1);
                    self.ctx.stats.resp_commands.rejected(index);
                    reply.error(&e);
                    return Step::Done;
                }
                Routed::Forward(job) => {
                    ServerStats::add(&self.ctx.stats.commands, 1);
                    return Step::Forward(job);
                }
            }
            if self.clustered && cmd::touches_data(entry.spec) {
                self.touch(entry.spec);
            }
        }
        ServerStats::add(&self.ctx.stats.commands, 1);
        let started = Instant::now();
        // As Redis, the connection's last command is this one while it runs.
        let sub = cmd::sub_index(entry.spec, args);
        self.slot.record_command(index, sub, started);
        let failed = match xstream::string_command_on_streams(self, entry, args) {
            OnStreamKey::Run => (entry.run)(args, self, &mut reply).map_err(|e| reply.error(&e)).is_err(),
            OnStreamKey::RunThenRemove(streams) => {
                let result = (entry.run)(args, self, &mut reply)
                    .and_then(|()| streams.iter().try_for_each(|k| xstream::remove(&self.ctx, self.db, k).map(|_| ())));
                result.map_err(|e| reply.error(&e)).is_err()
            }
            OnStreamKey::WrongType => {
                reply.error(&xstream::WRONGTYPE);
                true
            }
            OnStreamKey::NotWritten => {
                if entry.spec.name == "set" {
                    reply.null();
                } else {
                    reply.int(0);
                }
                false
            }
        };
        if let Some(until) = self.wait.take() {
            // Blocked (XREAD BLOCK): nothing was replied; the command is
            // counted when it runs again and answers.
            return Step::Wait(until);
        }
        let took = started.elapsed();
        let usec = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.ctx.stats.resp_commands.ran(index, took, failed);
        if self.scratch.capacity() > 1 << 16 {
            self.scratch = Vec::new();
        }
        self.observe(index, sub, args, usec);
        Step::Done
    }

    /// GET of `key` from this member's copy of a hot key homed elsewhere
    /// (symmetric caching), if it has a valid one.
    fn cached_get(&mut self, key: &[u8]) -> Option<shoal_symcache::wire::Value> {
        let node = self.ctx.cluster.clone()?;
        let sc = node.sc.as_ref()?;
        let table = self.db().table()?;
        sc.read(&node, table, key)
    }

    /// After command `index` (subcommand `sub`) ran for `usec`: updates the connection's slot, and feeds the slow log, the
    /// latency monitor and monitors where their thresholds say so.
    pub(crate) fn observe(&mut self, index: usize, sub: Option<usize>, args: Args<'_>, usec: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let entry = &cmd::COMMANDS[index];
        let spec = sub.map_or(entry.spec, |s| &entry.spec.subcommands[s]);
        self.slot.db.store(self.db, Relaxed);
        self.slot.resp.store(self.proto.version() as u32, Relaxed);
        self.slot.multi.store(self.multi.as_ref().map_or(-1, |m| m.queued_count() as i64), Relaxed);
        let admin = &self.ctx.admin;
        let slower_than = admin.settings.slowlog_slower_than.load(Relaxed);
        let latency_ms = admin.settings.latency_threshold_ms.load(Relaxed);
        let slow = slower_than >= 0 && usec >= slower_than as u64 && !spec.flags.contains(&"skip_slowlog");
        let latent = latency_ms > 0 && usec / 1000 >= latency_ms;
        let monitored = admin.clients.monitored() && !cmd::hidden_from_monitor(spec);
        if !(slow || latent || monitored) {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let shown = cmd::redacted(args);
        if slow {
            let addr = self.slot.addr.to_string();
            let name = self.slot.text().name;
            let max_len = admin.settings.slowlog_max_len.load(Relaxed);
            admin.slowlog.record(shown.iter().map(|a| a.as_ref()), now.as_secs() as i64, usec, addr, name, max_len);
        }
        if latent {
            let event = if spec.flags.contains(&"fast") { "fast-command" } else { "command" };
            admin.latency.add(event, now.as_secs() as i64, usec / 1000);
        }
        if monitored {
            let line = cmd::monitor_line(now, self.db, &self.slot.addr, shown.iter().map(|a| a.as_ref()));
            admin.clients.feed_monitors(self.id, &line, self.ctx.config.reply_buffer_size.0 as usize);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ctx.admin.clients.unregister(self.id);
    }
}
