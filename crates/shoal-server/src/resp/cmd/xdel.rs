//! XDEL key id [id ...]: removes entries of a stream; how many existed.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use crate::resp::xstream;

pub static SPEC: CommandSpec = CommandSpec {
    name: "xdel",
    syntax: "key id...",
    arity: -3,
    flags: &["write", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@stream", "@fast"],
    group: "stream",
    since: "5.0.0",
    summary: "Removes the specified entries from the stream. Returns the number of items actually deleted, that may \
              be different from the number of IDs passed in case certain IDs do not exist.",
    complexity: "O(1) for each single item to delete in the stream, regardless of the stream size.",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    xstream::check_standalone(session)?;
    // As Redis: a missing key answers 0 before the IDs are read.
    let Some(x) = xstream::lookup(session, args.get(1))? else {
        out.int(0);
        return Ok(());
    };
    // Every ID is checked before anything is removed.
    let ids = args
        .skip(2)
        .iter()
        .map(|a| xstream::parse_id(a, true, 0, false).map(|p| p.id))
        .collect::<Result<Vec<_>, _>>()?;
    let removed = x.lock().delete(&session.ctx, &ids)?;
    out.int(removed as i64);
    Ok(())
}
