//! PERSIST key: 1 if the key's expiry was removed, 0 if the key does not
//! exist or has no expiry. Atomic: the change is made only on the version
//! read, retrying otherwise.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::RejectRules;

pub static SPEC: CommandSpec = CommandSpec {
    name: "persist",
    syntax: "key",
    arity: 2,
    flags: &["write", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@keyspace", "@write", "@fast"],
    group: "generic",
    since: "2.2.0",
    summary: "Remove the expiration from a key",
    ..CommandSpec::BASE
};

struct Persist<'a> {
    key: &'a [u8],
}

impl<'a> Persist<'a> {
    fn parse(args: Args<'a>) -> Persist<'a> {
        Persist { key: args.get(1) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        let removed = loop {
            match db.meta(self.key)? {
                Some(meta) if meta.expiry.is_some() => {
                    if db.set_expiry(self.key, None, RejectRules::version_is(meta.version))? {
                        break true;
                    }
                }
                _ => break false,
            }
        };
        out.int(removed as i64);
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Persist::parse(args).apply(session, out)
}
