//! SET key value [NX | XX] [GET]: "+OK"; null if NX/XX refused the write;
//! with GET, the old value (or null) whether or not it wrote.
//!
//! Keys never expire in Shoal: EX, PX, EXAT, PXAT and KEEPTTL are parsed as
//! Redis parses them (so syntax errors read the same) and then refused with
//! [`NO_EXPIRY`]. Atomicity: NX/XX are the store's reject rules; GET is a
//! versioned read-modify-write.

use super::{is, CommandSpec, SYNTAX_ERROR};
use crate::resp::db::Update;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::RejectRules;

pub static SPEC: CommandSpec = CommandSpec {
    name: "set",
    arity: -3,
    flags: &["write", "denyoom"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@slow"],
    group: "string",
    summary: "Set the string value of a key",
    ..CommandSpec::BASE
};

pub const NO_EXPIRY: ErrorReply =
    ErrorReply::new("ERR EX, PX, EXAT, PXAT and KEEPTTL are not supported: keys do not expire in Shoal");

/// A write condition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Condition {
    Always,
    /// NX: only if the key does not exist.
    Missing,
    /// XX: only if the key exists.
    Present,
}

pub struct Set<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub condition: Condition,
    /// GET: reply with the old value.
    pub get: bool,
}

impl<'a> Set<'a> {
    fn parse(args: Args<'a>) -> Result<Set<'a>, ErrorReply> {
        let mut set = Set { key: args.get(1), value: args.get(2), condition: Condition::Always, get: false };
        // The expiry option given (Redis accepts one kind, repeated), KEEPTTL.
        let (mut expiry, mut keepttl): (Option<&[u8]>, bool) = (None, false);
        let mut i = 3;
        while i < args.len() {
            let opt = args.get(i);
            let has_next = i + 1 < args.len();
            if is(opt, "NX") && set.condition != Condition::Present {
                set.condition = Condition::Missing;
            } else if is(opt, "XX") && set.condition != Condition::Missing {
                set.condition = Condition::Present;
            } else if is(opt, "GET") {
                set.get = true;
            } else if is(opt, "KEEPTTL") && expiry.is_none() {
                keepttl = true;
            } else if ["EX", "PX", "EXAT", "PXAT"].iter().any(|o| is(opt, o))
                && !keepttl
                && has_next
                && expiry.is_none_or(|e| e.eq_ignore_ascii_case(opt))
            {
                expiry = Some(opt);
                i += 1;
            } else {
                return Err(SYNTAX_ERROR);
            }
            i += 1;
        }
        if expiry.is_some() || keepttl {
            return Err(NO_EXPIRY);
        }
        Ok(set)
    }

    /// Writes if the condition holds, and replies: "+OK" or null; with GET
    /// the old value or null.
    pub fn apply(&self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        if !self.get {
            let rules = match self.condition {
                Condition::Always => RejectRules::default(),
                Condition::Missing => RejectRules::must_not_exist(),
                Condition::Present => RejectRules::must_exist(),
            };
            if db.write(self.key, self.value, rules)? {
                out.ok();
            } else {
                out.null();
            }
            return Ok(());
        }
        let mut scratch = Vec::new();
        let old = db.update(self.key, &mut scratch, |cur| {
            let old = cur.map(|v| v.to_vec());
            let write = match self.condition {
                Condition::Always => true,
                Condition::Missing => cur.is_none(),
                Condition::Present => cur.is_some(),
            };
            Ok(if write { Update::Write(self.value.to_vec(), old) } else { Update::Keep(old) })
        })?;
        match old {
            Some(v) => out.bulk(&v),
            None => out.null(),
        }
        Ok(())
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Set::parse(args)?.apply(session, out)
}
