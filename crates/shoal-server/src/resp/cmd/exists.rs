//! EXISTS key [key ...]: how many of the keys exist (a key named twice
//! counts twice, as in Redis).

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "exists",
    syntax: "key...",
    tips: &["request_policy:multi_shard", "response_policy:agg_sum"],
    arity: -2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: -1,
    step: 1,
    acl: &["@keyspace", "@read", "@fast"],
    group: "generic",
    summary: "Determine if a key exists",
    complexity: "O(N) where N is the number of keys to check.",
    ..CommandSpec::BASE
};

struct Exists<'a> {
    keys: Args<'a>,
}

impl<'a> Exists<'a> {
    fn parse(args: Args<'a>) -> Exists<'a> {
        Exists { keys: args.skip(1) }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let mut scratch = std::mem::take(&mut session.scratch);
        let db = session.db();
        let mut n = 0;
        let mut result = Ok(());
        for key in self.keys.iter() {
            match db.exists(key, &mut scratch) {
                Ok(found) => n += (found || crate::resp::xstream::exists(&session.ctx, session.db, key)) as i64,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        session.scratch = scratch;
        result?;
        out.int(n);
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Exists::parse(args).apply(session, out)
}
