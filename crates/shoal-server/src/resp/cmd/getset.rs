//! GETSET key value: SET key value GET (the old value, or null). Like a
//! plain SET, it clears the key's expiry.

use super::set::{Condition, Set};
use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "getset",
    syntax: "key value",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@fast"],
    group: "string",
    summary: "Set the string value of a key and return its old value",
    ..CommandSpec::BASE
};

fn parse(args: Args<'_>) -> Set<'_> {
    Set { key: args.get(1), value: args.get(2), condition: Condition::Always, get: true, expiry: None, keepttl: false }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    parse(args).apply(session, out)
}
