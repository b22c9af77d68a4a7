//! MSETNX key value [key value ...]: 1 if every key was missing and all
//! were set, 0 (and nothing set) if any existed.
//!
//! The store has no all-or-nothing multi-write, so: check that every key is
//! missing, write them all with "must not exist", and if a concurrent
//! writer created one in between, remove the pairs this command wrote
//! (only if still at the version it wrote) and reply 0. Between the write
//! and that undo, other clients may briefly see some of the pairs.

use super::mset::{pairs, Pair};
use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::RejectRules;

pub static SPEC: CommandSpec = CommandSpec {
    name: "msetnx",
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

struct Msetnx<'a> {
    /// Distinct keys, each with the last value given for it.
    pairs: Vec<Pair<'a>>,
}

impl<'a> Msetnx<'a> {
    fn parse(args: Args<'a>) -> Result<Msetnx<'a>, ErrorReply> {
        let all = pairs(args, SPEC.name)?;
        let mut last = std::collections::HashMap::with_capacity(all.len());
        for (i, (k, _)) in all.iter().enumerate() {
            last.insert(*k, i);
        }
        let pairs = all.iter().enumerate().filter(|(i, (k, _))| last[k] == *i).map(|(_, p)| *p).collect();
        Ok(Msetnx { pairs })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let mut scratch = Vec::new();
        let db = session.db();
        let mut any = false;
        for (k, _) in &self.pairs {
            any |= db.exists(k, &mut scratch)?;
            if any {
                break;
            }
        }
        if any {
            out.int(0);
            return Ok(());
        }
        let written = db.write_all(&self.pairs, RejectRules::must_not_exist())?;
        if written.iter().all(|w| w.is_some()) {
            out.int(1);
            return Ok(());
        }
        for ((k, _), version) in self.pairs.iter().zip(written) {
            if let Some(v) = version {
                db.remove_if(k, RejectRules::version_is(v))?;
            }
        }
        out.int(0);
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Msetnx::parse(args)?.apply(session, out)
}
