//! FLUSHDB [ASYNC | SYNC]: removes every key of the selected database;
//! FLUSHALL [ASYNC | SYNC]: of every database; "+OK". Both modes remove
//! synchronously. Not atomic: writes that run at the same time may survive.

use super::{is, CommandSpec, SYNTAX_ERROR};
use crate::resp::db::{Db, DATABASES};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "flushdb",
    syntax: "flush-type=[ASYNC|SYNC]",
    tips: &["request_policy:all_shards", "response_policy:all_succeeded"],
    arity: -1,
    flags: &["write"],
    acl: &["@keyspace", "@write", "@slow", "@dangerous"],
    group: "server",
    summary: "Remove all keys from the current database",
    complexity: "O(N) where N is the number of keys in the selected database",
    ..CommandSpec::BASE
};

pub static FLUSHALL: CommandSpec = CommandSpec {
    name: "flushall",
    syntax: "flush-type=[ASYNC|SYNC]",
    tips: &["request_policy:all_shards", "response_policy:all_succeeded"],
    summary: "Remove all keys from all databases",
    complexity: "O(N) where N is the total number of keys in all databases",
    ..SPEC
};

struct Flushdb;

impl Flushdb {
    fn parse(args: Args<'_>) -> Result<Flushdb, ErrorReply> {
        match args.len() {
            1 => Ok(Flushdb),
            2 if is(args.get(1), "ASYNC") || is(args.get(1), "SYNC") => Ok(Flushdb),
            _ => Err(SYNTAX_ERROR),
        }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        session.db().clear()?;
        crate::resp::xstream::remove_all(&session.ctx, session.db)?;
        out.ok();
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Flushdb::parse(args)?.apply(session, out)
}

pub fn run_flushall(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Flushdb::parse(args)?;
    for index in 0..DATABASES {
        Db::new(&session.ctx, index, session.table_cache(), &session.txn).clear()?;
        crate::resp::xstream::remove_all(&session.ctx, index)?;
    }
    out.ok();
    Ok(())
}
