//! ECHO message: the message as a bulk string.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "echo",
    syntax: "message",
    arity: 2,
    flags: &["fast"],
    acl: &["@fast", "@connection"],
    group: "connection",
    summary: "Echo the given string",
    ..CommandSpec::BASE
};

struct Echo<'a> {
    message: &'a [u8],
}

impl<'a> Echo<'a> {
    fn parse(args: Args<'a>) -> Echo<'a> {
        Echo { message: args.get(1) }
    }

    fn apply(self, out: &mut Reply) {
        out.bulk(self.message);
    }
}

pub fn run(args: Args<'_>, _: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Echo::parse(args).apply(out);
    Ok(())
}
