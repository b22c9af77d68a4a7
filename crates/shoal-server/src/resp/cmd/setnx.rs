//! SETNX key value: 1 if the key was set, 0 if it already existed.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::RejectRules;

pub static SPEC: CommandSpec = CommandSpec {
    name: "setnx",
    syntax: "key value",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@fast"],
    group: "string",
    summary: "Set the value of a key, only if the key does not exist",
    ..CommandSpec::BASE
};

struct Setnx<'a> {
    key: &'a [u8],
    value: &'a [u8],
}

impl<'a> Setnx<'a> {
    fn parse(args: Args<'a>) -> Setnx<'a> {
        Setnx { key: args.get(1), value: args.get(2) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let written = session.db().write(self.key, self.value, RejectRules::must_not_exist())?;
        out.int(written as i64);
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Setnx::parse(args).apply(session, out)
}
