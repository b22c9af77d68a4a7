//! DBSIZE: the number of keys in the selected database.

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
    out.int(session.db().len()? as i64);
    Ok(())
}
