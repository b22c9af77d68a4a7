//! APPEND key value: appends to the value (creating the key if missing);
//! the reply is the new length. The key keeps its expiry, as in Redis.
//! Atomic (a versioned read-modify-write). A
//! result over the maximum value size is "ERR string exceeds maximum
//! allowed size (proto-max-bulk-len)" and changes nothing.

use super::CommandSpec;
use crate::resp::db::{store_error, Update};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{Expiry, StoreError};

pub static SPEC: CommandSpec = CommandSpec {
    name: "append",
    syntax: "key value",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@fast"],
    group: "string",
    since: "2.0.0",
    summary: "Append a value to a key",
    ..CommandSpec::BASE
};

struct Append<'a> {
    key: &'a [u8],
    value: &'a [u8],
}

impl<'a> Append<'a> {
    fn parse(args: Args<'a>) -> Append<'a> {
        Append { key: args.get(1), value: args.get(2) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let max = session.ctx.store.config().max_value_bytes;
        let mut scratch = std::mem::take(&mut session.scratch);
        let result = session.db().update(self.key, &mut scratch, Expiry::Keep, |current| {
            let current = current.unwrap_or_default();
            let len = current.len() + self.value.len();
            if len > max {
                return Err(store_error(StoreError::ValueTooLarge { len, max }));
            }
            let mut new = Vec::with_capacity(len);
            new.extend_from_slice(current);
            new.extend_from_slice(self.value);
            Ok(Update::Write(new, len))
        });
        session.scratch = scratch;
        out.int(result? as i64);
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Append::parse(args).apply(session, out)
}
