//! PING [message]: "+PONG", or the message as a bulk string.

use super::{wrong_arity, CommandSpec};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "ping",
    syntax: "[message]",
    tips: &["request_policy:all_shards", "response_policy:all_succeeded"],
    arity: -1,
    flags: &["fast", "sentinel"],
    acl: &["@fast", "@connection"],
    group: "connection",
    summary: "Ping the server",
    ..CommandSpec::BASE
};

struct Ping<'a> {
    message: Option<&'a [u8]>,
}

impl<'a> Ping<'a> {
    fn parse(args: Args<'a>) -> Result<Ping<'a>, ErrorReply> {
        match args.len() {
            1 => Ok(Ping { message: None }),
            2 => Ok(Ping { message: Some(args.get(1)) }),
            _ => Err(wrong_arity(SPEC.name)),
        }
    }

    fn apply(self, out: &mut Reply) {
        match self.message {
            None => out.simple("PONG"),
            Some(m) => out.bulk(m),
        }
    }
}

pub fn run(args: Args<'_>, _: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Ping::parse(args)?.apply(out);
    Ok(())
}
