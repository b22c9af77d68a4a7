//! XLEN key: the number of entries of a stream (0 if there is none).

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use crate::resp::xstream;

pub static SPEC: CommandSpec = CommandSpec {
    name: "xlen",
    syntax: "key",
    arity: 2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@read", "@stream", "@fast"],
    group: "stream",
    since: "5.0.0",
    summary: "Return the number of entries in a stream",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    xstream::check_standalone(session)?;
    let n = xstream::lookup(session, args.get(1))?.map_or(0, |x| x.lock().len());
    out.int(n as i64);
    Ok(())
}
