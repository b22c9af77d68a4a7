//! One client's state (selected database, protocol version, name) and the
//! dispatch of its commands: look the name up, check the arity, run.

use crate::context::{ServerContext, ServerStats};
use crate::resp::cmd;
use crate::resp::db::{Db, TableCache};
use crate::resp::frame::Args;
use crate::resp::reply::{Protocol, Reply};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;

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
    /// Set by QUIT: the connection closes once its replies are sent.
    pub quit: bool,
    /// Most bytes of replies the connection may hold; commands with large
    /// replies (MGET) stop early past it, and the connection is then closed.
    pub reply_limit: usize,
    /// A reusable buffer for values read from the store.
    pub scratch: Vec<u8>,
    tables: TableCache,
}

impl Session {
    pub fn new(ctx: Arc<ServerContext>, id: u64, peer: SocketAddr) -> Session {
        let reply_limit = ctx.config.reply_buffer_size.0 as usize;
        Session {
            ctx,
            id,
            peer,
            db: 0,
            proto: Protocol::Resp2,
            name: None,
            lib_name: None,
            lib_ver: None,
            quit: false,
            reply_limit,
            scratch: Vec::new(),
            tables: TableCache::default(),
        }
    }

    /// The selected database.
    pub fn db(&self) -> Db<'_> {
        Db::new(&self.ctx, self.db, &self.tables)
    }

    /// Runs one command (a non-empty request) and appends its reply to `out`.
    pub fn execute(&mut self, args: Args<'_>, out: &mut BytesMut) {
        ServerStats::add(&self.ctx.stats.commands, 1);
        let mut reply = Reply::new(out, self.proto);
        let Some(entry) = cmd::lookup(args.get(0)) else {
            reply.error(&cmd::unknown_command(args));
            return;
        };
        if !entry.spec.arity_ok(args.len()) {
            reply.error(&cmd::wrong_arity(entry.spec.name));
            return;
        }
        if let Err(e) = (entry.run)(args, self, &mut reply) {
            reply.error(&e);
        }
        if self.scratch.capacity() > 1 << 16 {
            self.scratch = Vec::new();
        }
    }
}
