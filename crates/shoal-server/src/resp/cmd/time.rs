//! TIME: the server's clock, [seconds, microseconds] since the Unix epoch,
//! as two bulk strings.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use std::time::{SystemTime, UNIX_EPOCH};

pub static SPEC: CommandSpec = CommandSpec {
    name: "time",
    tips: &["nondeterministic_output"],
    arity: 1,
    flags: &["loading", "stale", "fast"],
    acl: &["@fast"],
    group: "server",
    since: "2.6.0",
    summary: "Return the current server time",
    ..CommandSpec::BASE
};

pub fn run(_: Args<'_>, _: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    out.array(2);
    out.bulk(now.as_secs().to_string().as_bytes());
    out.bulk(now.subsec_micros().to_string().as_bytes());
    Ok(())
}
