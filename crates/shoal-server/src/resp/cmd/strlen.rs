//! STRLEN key: the length of the value, 0 if the key does not exist.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "strlen",
    syntax: "key",
    arity: 2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@read", "@string", "@fast"],
    group: "string",
    since: "2.2.0",
    summary: "Get the length of the value stored in a key",
    ..CommandSpec::BASE
};

struct Strlen<'a> {
    key: &'a [u8],
}

impl<'a> Strlen<'a> {
    fn parse(args: Args<'a>) -> Strlen<'a> {
        Strlen { key: args.get(1) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let mut value = std::mem::take(&mut session.scratch);
        let found = session.db().get_into(self.key, &mut value);
        let len = value.len();
        session.scratch = value;
        out.int(if found?.is_some() { len as i64 } else { 0 });
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Strlen::parse(args).apply(session, out)
}
