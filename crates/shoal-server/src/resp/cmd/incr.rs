//! INCR key, INCRBY key delta, DECR key, DECRBY key delta: the value read as
//! a decimal 64-bit integer (a missing key is 0), changed by the delta and
//! stored back as decimal; the reply is the new value.
//!
//! Values and deltas must be integers as Redis writes them ("-12", never
//! "+12", "012" or " 12"), else "ERR value is not an integer or out of
//! range"; a result outside i64 is "ERR increment or decrement would
//! overflow". Atomic: a versioned read-modify-write ([`Db::update`]). The
//! key keeps its expiry, as in Redis; an expired key counts as missing (0).
//!
//! INCRBYFLOAT key increment: the value and the increment read and added
//! as Redis does on x86-64 (80-bit `long double`, see `long_double`), the
//! sum stored and answered as Redis writes it ("%.17Lf" without trailing
//! zeros), so GET and INCR then see Redis's text. Errors: "ERR value is not
//! a valid float" (value or increment), "ERR increment would produce NaN or
//! Infinity". Atomic and expiry-keeping as INCR.
//!
//! [`Db::update`]: crate::resp::db::Db::update

use super::{CommandSpec, NOT_AN_INTEGER};
use crate::resp::db::Update;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::long_double::{self, LongDouble};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::Expiry;

const BASE: CommandSpec = CommandSpec {
    name: "incr",
    syntax: "key",
    arity: 2,
    flags: &["write", "denyoom", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@fast"],
    group: "string",
    summary: "Increment the integer value of a key by one",
    ..CommandSpec::BASE
};

pub static INCR: CommandSpec = BASE;
pub static INCRBY: CommandSpec = CommandSpec {
    name: "incrby",
    syntax: "key increment#integer",
    arity: 3,
    summary: "Increment the integer value of a key by the given amount",
    ..BASE
};
pub static DECR: CommandSpec =
    CommandSpec { name: "decr", syntax: "key", summary: "Decrement the integer value of a key by one", ..BASE };
pub static DECRBY: CommandSpec = CommandSpec {
    name: "decrby",
    syntax: "key decrement#integer",
    arity: 3,
    summary: "Decrement the integer value of a key by the given number",
    ..BASE
};

pub static INCRBYFLOAT: CommandSpec = CommandSpec {
    name: "incrbyfloat",
    syntax: "key increment#double",
    arity: 3,
    since: "2.6.0",
    summary: "Add a floating point number to the number a key holds (0 if missing)",
    ..BASE
};

const OVERFLOW: ErrorReply = ErrorReply::new("ERR increment or decrement would overflow");

struct Incr<'a> {
    key: &'a [u8],
    delta: i64,
}

impl<'a> Incr<'a> {
    fn parse(args: Args<'a>, sign: i64, explicit: bool) -> Result<Incr<'a>, ErrorReply> {
        let delta = if explicit { parse_i64(args.get(2)).ok_or(NOT_AN_INTEGER)? } else { 1 };
        if sign < 0 && delta == i64::MIN {
            return Err(ErrorReply::new("ERR decrement would overflow"));
        }
        Ok(Incr { key: args.get(1), delta: delta * sign })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let new = update_keeping_expiry(session, self.key, |current| {
            let old = match current {
                None => 0,
                Some(v) => parse_i64(v).ok_or(NOT_AN_INTEGER)?,
            };
            let new = old.checked_add(self.delta).ok_or(OVERFLOW)?;
            Ok(Update::Write(new.to_string().into_bytes(), new))
        })?;
        out.int(new);
        Ok(())
    }
}

pub fn run_incr(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Incr::parse(args, 1, false)?.apply(session, out)
}

pub fn run_incrby(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Incr::parse(args, 1, true)?.apply(session, out)
}

pub fn run_decr(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Incr::parse(args, -1, false)?.apply(session, out)
}

pub fn run_decrby(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Incr::parse(args, -1, true)?.apply(session, out)
}

/// The atomic read-modify-write of `key` both commands make (see
/// [`Db::update`]), keeping the key's expiry, through the session's buffer.
///
/// [`Db::update`]: crate::resp::db::Db::update
fn update_keeping_expiry<T>(
    session: &mut Session,
    key: &[u8],
    step: impl FnMut(Option<&[u8]>) -> Result<Update<T>, ErrorReply>,
) -> Result<T, ErrorReply> {
    let mut scratch = std::mem::take(&mut session.scratch);
    let result = session.db().update(key, &mut scratch, Expiry::Keep, step);
    session.scratch = scratch;
    result
}

const NOT_A_FLOAT: ErrorReply = ErrorReply::new("ERR value is not a valid float");

struct IncrByFloat<'a> {
    key: &'a [u8],
    incr: LongDouble,
}

impl<'a> IncrByFloat<'a> {
    fn parse(args: Args<'a>) -> Result<IncrByFloat<'a>, ErrorReply> {
        Ok(IncrByFloat { key: args.get(1), incr: long_double::parse(args.get(2)).ok_or(NOT_A_FLOAT)? })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let text = update_keeping_expiry(session, self.key, |current| {
            let old = match current {
                None => LongDouble::Finite { neg: false, mant: 0, exp: 0 },
                Some(v) => long_double::parse(v).ok_or(NOT_A_FLOAT)?,
            };
            let sum = long_double::add(old, self.incr);
            if !sum.is_finite() {
                return Err(ErrorReply::new("ERR increment would produce NaN or Infinity"));
            }
            let text = long_double::format_human(sum).into_bytes();
            Ok(Update::Write(text.clone(), text))
        })?;
        out.bulk(&text);
        Ok(())
    }
}

pub fn run_incrbyfloat(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    IncrByFloat::parse(args)?.apply(session, out)
}
