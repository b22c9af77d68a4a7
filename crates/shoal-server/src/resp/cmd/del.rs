//! DEL key [key ...] and UNLINK key [key ...]: the number of keys removed
//! (a key named twice counts once). UNLINK is DEL: removal already takes
//! constant time in Shoal, whatever the value's size.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static DEL: CommandSpec = CommandSpec {
    name: "del",
    syntax: "key...",
    tips: &["request_policy:multi_shard", "response_policy:agg_sum"],
    arity: -2,
    flags: &["write"],
    first_key: 1,
    last_key: -1,
    step: 1,
    acl: &["@keyspace", "@write", "@slow"],
    group: "generic",
    summary: "Delete a key",
    complexity: "O(N) where N is the number of keys that will be removed",
    ..CommandSpec::BASE
};

pub static UNLINK: CommandSpec = CommandSpec {
    name: "unlink",
    syntax: "key...",
    tips: &["request_policy:multi_shard", "response_policy:agg_sum"],
    flags: &["write", "fast"],
    acl: &["@keyspace", "@write", "@fast"],
    since: "4.0.0",
    summary: "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.",
    ..DEL
};

struct Del<'a> {
    keys: Args<'a>,
}

impl<'a> Del<'a> {
    fn parse(args: Args<'a>) -> Del<'a> {
        Del { keys: args.skip(1) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        let mut removed = 0;
        for key in self.keys.iter() {
            let string = db.remove(key)?;
            let stream = crate::resp::xstream::remove(&session.ctx, session.db, key)?;
            removed += (string || stream) as i64;
        }
        out.int(removed);
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Del::parse(args).apply(session, out)
}
