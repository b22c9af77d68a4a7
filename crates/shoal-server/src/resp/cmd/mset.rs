//! MSET key value [key value ...]: "+OK". The pairs are written in order as
//! one append group (a key named twice ends with its last value). On an
//! error (out of memory) the pairs before it may have been written.

use super::{wrong_arity, CommandSpec};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::RejectRules;

pub static SPEC: CommandSpec = CommandSpec {
    name: "mset",
    syntax: "data=(key value)...",
    tips: &["request_policy:multi_shard", "response_policy:all_succeeded"],
    arity: -3,
    flags: &["write", "denyoom"],
    first_key: 1,
    last_key: -1,
    step: 2,
    acl: &["@write", "@string", "@slow"],
    group: "string",
    since: "1.0.1",
    summary: "Set multiple keys to multiple values",
    complexity: "O(N) where N is the number of keys to set.",
    ..CommandSpec::BASE
};

/// A key and its value.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// The (key, value) pairs of MSET and MSETNX; wrong arity if one is incomplete.
pub fn pairs<'a>(args: Args<'a>, name: &str) -> Result<Vec<Pair<'a>>, ErrorReply> {
    if args.len().is_multiple_of(2) {
        return Err(wrong_arity(name));
    }
    Ok((1..args.len()).step_by(2).map(|i| (args.get(i), args.get(i + 1))).collect())
}

struct Mset<'a> {
    pairs: Vec<Pair<'a>>,
}

impl<'a> Mset<'a> {
    fn parse(args: Args<'a>) -> Result<Mset<'a>, ErrorReply> {
        Ok(Mset { pairs: pairs(args, SPEC.name)? })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        session.db().write_all(&self.pairs, RejectRules::default())?;
        out.ok();
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Mset::parse(args)?.apply(session, out)
}
