//! GET key: the value as a bulk string, or null if the key does not exist.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "get",
    syntax: "key",
    arity: 2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@read", "@string", "@fast"],
    group: "string",
    summary: "Get the value of a key",
    ..CommandSpec::BASE
};

struct Get<'a> {
    key: &'a [u8],
}

impl<'a> Get<'a> {
    fn parse(args: Args<'a>) -> Get<'a> {
        Get { key: args.get(1) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let mut value = std::mem::take(&mut session.scratch);
        let found = session.db().get_into(self.key, &mut value);
        match found {
            Ok(Some(_)) => {
                let pos = session.db().write_position(self.key);
                session.durable.key(pos);
                out.bulk(&value)
            }
            // A miss may be a removal or an eviction still replicating.
            Ok(None) => {
                session.durable.log_end();
                out.null()
            }
            Err(_) => session.durable.log_end(),
        }
        session.scratch = value;
        found.map(|_| ())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Get::parse(args).apply(session, out)
}
