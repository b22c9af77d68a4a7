//! SETEX key seconds value, PSETEX key milliseconds value: SET key value EX
//! seconds (PX milliseconds): "+OK". A time that is not an integer is
//! "ERR value is not an integer or out of range"; one that is not positive
//! or overflows is "ERR invalid expire time in 'setex' command" (or
//! 'psetex'), and nothing is written.

use super::set::ExpiryKind;
use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{Expiry, RejectRules};

pub static SETEX: CommandSpec = CommandSpec {
    name: "setex",
    syntax: "key seconds#integer value",
    arity: 4,
    flags: &["write", "denyoom"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@slow"],
    group: "string",
    since: "2.0.0",
    summary: "Set the value and expiration of a key",
    ..CommandSpec::BASE
};

pub static PSETEX: CommandSpec = CommandSpec {
    name: "psetex",
    syntax: "key milliseconds#integer value",
    since: "2.6.0",
    summary: "Set the value and expiration in milliseconds of a key",
    ..SETEX
};

struct Setex<'a> {
    key: &'a [u8],
    time: &'a [u8],
    value: &'a [u8],
    kind: ExpiryKind,
    command: &'static str,
}

impl<'a> Setex<'a> {
    fn parse(args: Args<'a>, kind: ExpiryKind, command: &'static str) -> Setex<'a> {
        Setex { key: args.get(1), time: args.get(2), value: args.get(3), kind, command }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        let at = self.kind.time(self.time, db.now(), self.command)?;
        db.write_with_expiry(self.key, self.value, RejectRules::default(), Expiry::At(at))?;
        out.ok();
        Ok(())
    }
}

pub fn run_setex(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Setex::parse(args, ExpiryKind::Seconds, "setex").apply(session, out)
}

pub fn run_psetex(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Setex::parse(args, ExpiryKind::Millis, "psetex").apply(session, out)
}
