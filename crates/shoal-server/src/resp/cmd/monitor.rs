//! MONITOR: "+OK", then every command other connections run, one status
//! line each in Redis's format (see [`super::monitor_line`]); commands
//! flagged `admin` are not shown, and AUTH's passwords are redacted, as
//! in Redis. The lines reach the connection through its mailbox
//! (`admin::clients`), bounded by the reply buffer size: a monitor that
//! does not read them fast enough is disconnected.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "monitor",
    arity: 1,
    flags: &["admin", "noscript", "loading", "stale"],
    acl: &["@admin", "@slow", "@dangerous"],
    group: "server",
    since: "1.0.0",
    summary: "Stream every command the server runs from then on",
    ..CommandSpec::BASE
};

pub fn run(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    session.ctx.admin.clients.add_monitor(&session.slot);
    out.ok();
    Ok(())
}
