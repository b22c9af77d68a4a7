//! SHOAL.LOCAL: internal, "+OK". Sent by another server of the cluster on
//! the connections it forwards commands over: from then on the session runs
//! every command here and never forwards it (keyless commands such as
//! DBSIZE and FLUSHDB count and clear only this server; a key this server
//! does not master is refused with TRYAGAIN), so a forwarded request never
//! loops. Clients have no use for it.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "shoal.local",
    arity: 1,
    flags: &["fast"],
    group: "connection",
    summary: "Internal: make this connection run every command on this server only (used between cluster servers)",
    ..CommandSpec::BASE
};

pub fn run(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    session.local_only = true;
    out.ok();
    Ok(())
}
