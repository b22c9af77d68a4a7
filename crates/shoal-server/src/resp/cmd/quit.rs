//! QUIT: "+OK", then the connection closes once its replies are sent.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "quit",
    arity: -1,
    flags: &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"],
    acl: &["@fast", "@connection"],
    group: "connection",
    summary: "Close the connection",
    ..CommandSpec::BASE
};

pub fn run(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    session.quit = true;
    out.ok();
    Ok(())
}
