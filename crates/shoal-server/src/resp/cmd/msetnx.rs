//! MSETNX key value [key value ...]: 1 if every key was missing and all
//! were set, 0 (and nothing set) if any existed.
//!
//! Exact, as in Redis: the store checks that every key is missing and
//! writes them all under all the keys' locks, or writes nothing. A key
//! named twice is set to its last value, as in Redis. At most
//! [`MAX_ATOMIC_BATCH`] distinct keys (the store's bound on an atomic
//! write); more are refused with [`TOO_MANY_KEYS`] and nothing is written.

use super::mset::{pairs, Pair};
use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{RejectRules, MAX_ATOMIC_BATCH};
use std::collections::HashMap;

pub static SPEC: CommandSpec = CommandSpec {
    name: "msetnx",
    syntax: "data=(key value)...",
    tips: &["request_policy:multi_shard", "response_policy:agg_min"],
    arity: -3,
    flags: &["write", "denyoom"],
    first_key: 1,
    last_key: -1,
    step: 2,
    acl: &["@write", "@string", "@slow"],
    group: "string",
    since: "1.0.1",
    summary: "Set multiple keys to multiple values, only if none of the keys exist",
    complexity: "O(N) where N is the number of keys to set.",
    ..CommandSpec::BASE
};

/// The reply to an MSETNX with more distinct keys than one atomic write takes.
pub const TOO_MANY_KEYS: ErrorReply = ErrorReply::new("ERR MSETNX takes at most 256 distinct keys in Shoal");
const _: () = assert!(MAX_ATOMIC_BATCH == 256, "TOO_MANY_KEYS names the bound");

struct Msetnx<'a> {
    /// Distinct keys, each with the last value given for it, in the order
    /// of their last occurrence.
    pairs: Vec<Pair<'a>>,
}

impl<'a> Msetnx<'a> {
    fn parse(args: Args<'a>) -> Result<Msetnx<'a>, ErrorReply> {
        Ok(Msetnx { pairs: last_of_each_key(pairs(args, SPEC.name)?) })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        if self.pairs.len() > MAX_ATOMIC_BATCH {
            return Err(TOO_MANY_KEYS);
        }
        let all = session.db().write_all_or_nothing(&self.pairs, RejectRules::must_not_exist())?;
        out.int(all as i64);
        Ok(())
    }
}

/// `all` without the pairs whose key is named again later.
fn last_of_each_key(all: Vec<Pair<'_>>) -> Vec<Pair<'_>> {
    if all.len() == 1 {
        return all;
    }
    let last: HashMap<&[u8], usize> = all.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();
    all.iter().enumerate().filter(|(i, (k, _))| last[k] == *i).map(|(_, p)| *p).collect()
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Msetnx::parse(args)?.apply(session, out)
}

#[cfg(test)]
mod tests {
    use super::last_of_each_key;

    #[test]
    fn last_of_each_key_keeps_the_last_value_of_a_repeated_key() {
        let all: Vec<(&[u8], &[u8])> = vec![(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4"), (b"b", b"5")];
        let kept: Vec<(&[u8], &[u8])> = vec![(b"a", b"3"), (b"c", b"4"), (b"b", b"5")];
        assert_eq!(last_of_each_key(all), kept);
        assert_eq!(last_of_each_key(vec![(b"k", b"v")]), vec![(&b"k"[..], &b"v"[..])]);
    }
}
