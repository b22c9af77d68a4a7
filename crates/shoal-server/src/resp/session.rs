//! One client's state (selected database, protocol version, name) and the
//! dispatch of its commands: look the name up, check the arity, (in a
//! cluster) route, run.

use crate::context::{ServerContext, ServerStats};
use crate::resp::cmd;
use crate::resp::db::{Db, TableCache};
use crate::resp::forward::Job;
use crate::resp::frame::Args;
use crate::resp::reply::{Protocol, Reply};
use crate::resp::routing::{self, Routed};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

pub struct Session {
    pub ctx: Arc<ServerContext>,
    pub id: u64,
    pub peer: SocketAddr,
    /// Selected database (0..16).
    pub db: usize,
    pub proto: Protocol,
    pub name: Option<Vec<u8>>,
    pub lib_name: Option<Vec<u8>>,
    pub lib_ver: Option<Vec<u8>>,
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
    /// Set by SHOAL.LOCAL (on connections from other servers): run every
    /// command here, never forward (see `routing`).
    pub local_only: bool,
    /// In a cluster: a command run here since the connection last took
    /// this flag read or wrote stored data (`cmd::touches_data`): its reply
    /// waits until the log is durable and needs the lease.
    pub touched: bool,
    /// When the request being retried first found no tablet for its key.
    pub no_tablet_since: Option<Instant>,
    tables: TableCache,
}

/// What became of one request.
pub enum Step {
    /// Its reply is in the output.
    Done,
    /// Its reply comes from running this job (the request is consumed).
    Forward(Job),
    /// Nothing was done: run the same request again after a short pause.
    Retry,
}

impl Session {
    pub fn new(ctx: Arc<ServerContext>, id: u64, peer: SocketAddr) -> Session {
        let reply_limit = ctx.config.reply_buffer_size.0 as usize;
        let clustered = ctx.cluster.is_some();
        let authenticated = !ctx.auth.required();
        Session {
            ctx,
            id,
            peer,
            db: 0,
            proto: Protocol::Resp2,
            name: None,
            lib_name: None,
            lib_ver: None,
            authenticated,
            quit: false,
            reply_limit,
            scratch: Vec::new(),
            clustered,
            local_only: false,
            touched: false,
            no_tablet_since: None,
            tables: TableCache::default(),
        }
    }

    /// The selected database.
    pub fn db(&self) -> Db<'_> {
        Db::new(&self.ctx, self.db, &self.tables)
    }

    /// Runs one command (a non-empty request): appends its reply to `out`,
    /// or (in a cluster) says how else it is answered.
    pub fn execute(&mut self, args: Args<'_>, out: &mut BytesMut) -> Step {
        let mut reply = Reply::new(out, self.proto);
        let Some(entry) = cmd::lookup(args.get(0)) else {
            ServerStats::add(&self.ctx.stats.commands, 1);
            reply.error(&cmd::unknown_command(args));
            return Step::Done;
        };
        if !entry.spec.arity_ok(args.len()) {
            ServerStats::add(&self.ctx.stats.commands, 1);
            reply.error(&cmd::wrong_arity(entry.spec.name));
            return Step::Done;
        }
        // As Redis: unknown commands and arity errors are reported first.
        if !self.authenticated && !cmd::allowed_before_auth(entry.spec) {
            ServerStats::add(&self.ctx.stats.commands, 1);
            reply.error(&cmd::NOAUTH);
            return Step::Done;
        }
        if self.clustered {
            match routing::route(self, entry, args) {
                Routed::Local => {}
                Routed::Wait => return Step::Retry,
                Routed::Error(e) => {
                    ServerStats::add(&self.ctx.stats.commands, 1);
                    reply.error(&e);
                    return Step::Done;
                }
                Routed::Forward(job) => {
                    ServerStats::add(&self.ctx.stats.commands, 1);
                    return Step::Forward(job);
                }
            }
            if cmd::touches_data(entry.spec) {
                self.touched = true;
            }
        }
        ServerStats::add(&self.ctx.stats.commands, 1);
        if let Err(e) = (entry.run)(args, self, &mut reply) {
            reply.error(&e);
        }
        if self.scratch.capacity() > 1 << 16 {
            self.scratch = Vec::new();
        }
        Step::Done
    }
}
