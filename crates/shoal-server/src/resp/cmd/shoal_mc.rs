//! SHOAL.MC request: internal. Runs one memcached request (command line
//! and data block, as a client sent it) on this server only and answers
//! its memcached reply as a bulk string. Another server's memcached front
//! end sends it, over the connections it forwards Redis commands on, for
//! a key this server masters (`memcached` module).

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "shoal.mc",
    syntax: "request",
    arity: 2,
    flags: &["write", "denyoom"],
    group: "server",
    summary: "Internal: run one memcached request on this server (used between cluster servers)",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let reply = crate::memcached::run_forwarded(&session.ctx, args.get(1));
    out.bulk(&reply);
    Ok(())
}
