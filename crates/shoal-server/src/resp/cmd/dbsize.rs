//! DBSIZE: the number of keys in the selected database, streams included.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "dbsize",
    tips: &["request_policy:all_shards", "response_policy:agg_sum"],
    arity: 1,
    flags: &["readonly", "fast"],
    acl: &["@keyspace", "@read", "@fast"],
    group: "server",
    summary: "Return the number of keys in the selected database",
    ..CommandSpec::BASE
};

pub fn run(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let streams = crate::resp::xstream::keys(&session.ctx, session.db).len();
    out.int((session.db().len()? + streams as u64) as i64);
    Ok(())
}
