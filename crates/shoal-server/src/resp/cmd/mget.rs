//! MGET key [key ...]: an array of the values, null for missing keys.
//!
//! The reply can be large: once the connection's reply buffer passes its
//! limit the command stops, and the connection (which checks the limit
//! after every command) is closed without sending the partial reply.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "mget",
    syntax: "key...",
    tips: &["request_policy:multi_shard"],
    arity: -2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: -1,
    step: 1,
    acl: &["@read", "@string", "@fast"],
    group: "string",
    summary: "Get the values of all the given keys",
    complexity: "O(N) where N is the number of keys to retrieve.",
    ..CommandSpec::BASE
};

struct Mget<'a> {
    keys: Args<'a>,
}

impl<'a> Mget<'a> {
    fn parse(args: Args<'a>) -> Mget<'a> {
        Mget { keys: args.skip(1) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        let mut value = std::mem::take(&mut session.scratch);
        let db = session.db();
        out.array(self.keys.len());
        for key in self.keys.iter() {
            if out.buffered() > session.reply_limit {
                break;
            }
            // An error reading one key (none is expected for reads) reads as a missing key.
            match db.get_into(key, &mut value) {
                Ok(Some(_)) => out.bulk(&value),
                _ => out.null(),
            }
        }
        session.scratch = value;
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Mget::parse(args).apply(session, out);
    Ok(())
}
