//! TYPE key: "+stream" for a Redis stream (`xstream`), "+string" for any
//! other key that exists, "+none" otherwise.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "type",
    syntax: "key",
    arity: 2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@keyspace", "@read", "@fast"],
    group: "generic",
    summary: "Determine the type stored at key",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    if crate::resp::xstream::exists(&session.ctx, session.db, args.get(1)) {
        out.simple("stream");
        return Ok(());
    }
    let mut value = std::mem::take(&mut session.scratch);
    let found = session.db().get_into(args.get(1), &mut value);
    session.scratch = value;
    out.simple(if found?.is_some() { "string" } else { "none" });
    Ok(())
}
