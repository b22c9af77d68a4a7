//! EXPIRE key seconds, PEXPIRE key milliseconds, EXPIREAT key
//! unix-seconds, PEXPIREAT key unix-ms, each with [NX | XX | GT | LT]: 1
//! if the key's expiry was set, or the key deleted because the time is
//! already past (zero and negative times included); 0 if the key does not
//! exist or a condition refused.
//!
//! Conditions, as in Redis 7: NX only if the key has no expiry, XX only if
//! it has one, GT only if the new time is later than its expiry (a key
//! without one never passes GT), LT only if earlier (a key without one
//! always passes LT). Errors, checked in Redis's order before anything
//! changes: an unknown option "ERR Unsupported option <opt>"; NX with
//! another, or GT with LT, "... options at the same time are not
//! compatible"; a time that is not an integer "ERR value is not an integer
//! or out of range"; one whose milliseconds overflow "ERR invalid expire
//! time in 'expire' command". Atomic: the change is made only on the
//! version read, retrying otherwise.

use super::{c_string, is, CommandSpec, NOT_AN_INTEGER};
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{RejectRules, UnixMillis};

pub static EXPIRE: CommandSpec = CommandSpec {
    name: "expire",
    syntax: "key seconds#integer condition=[NX|XX|GT|LT]",
    arity: -3,
    flags: &["write", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@keyspace", "@write", "@fast"],
    group: "generic",
    since: "1.0.0",
    summary: "Set a key's time to live in seconds",
    ..CommandSpec::BASE
};

pub static PEXPIRE: CommandSpec = CommandSpec {
    name: "pexpire",
    syntax: "key milliseconds#integer condition=[NX|XX|GT|LT]",
    since: "2.6.0",
    summary: "Set a key's time to live in milliseconds",
    ..EXPIRE
};

pub static EXPIREAT: CommandSpec = CommandSpec {
    name: "expireat",
    syntax: "key unix-time-seconds#unix-time condition=[NX|XX|GT|LT]",
    since: "1.2.0",
    summary: "Set the expiration for a key as a UNIX timestamp",
    ..EXPIRE
};

pub static PEXPIREAT: CommandSpec = CommandSpec {
    name: "pexpireat",
    syntax: "key unix-time-milliseconds#unix-time condition=[NX|XX|GT|LT]",
    since: "2.6.0",
    summary: "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
    ..EXPIRE
};

/// The NX, XX, GT and LT options given.
#[derive(Default)]
struct Conditions {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl Conditions {
    fn parse(args: Args<'_>) -> Result<Conditions, ErrorReply> {
        let mut c = Conditions::default();
        for opt in args.iter().skip(3) {
            if is(opt, "NX") {
                c.nx = true;
            } else if is(opt, "XX") {
                c.xx = true;
            } else if is(opt, "GT") {
                c.gt = true;
            } else if is(opt, "LT") {
                c.lt = true;
            } else {
                let mut text = b"ERR Unsupported option ".to_vec();
                text.extend_from_slice(c_string(opt, usize::MAX));
                return Err(ErrorReply::owned(text));
            }
        }
        if c.nx && (c.xx || c.gt || c.lt) {
            return Err(ErrorReply::new("ERR NX and XX, GT or LT options at the same time are not compatible"));
        }
        if c.gt && c.lt {
            return Err(ErrorReply::new("ERR GT and LT options at the same time are not compatible"));
        }
        Ok(c)
    }

    /// Whether the conditions let a key whose expiry is `current` get `when`.
    fn allow(&self, current: Option<i64>, when: i64) -> bool {
        !(self.nx && current.is_some()
            || self.xx && current.is_none()
            || self.gt && current.is_none_or(|c| when <= c)
            || self.lt && current.is_some_and(|c| when >= c))
    }
}

struct Expire<'a> {
    key: &'a [u8],
    /// The new expiry time, ms since the epoch; may be negative.
    when: i64,
    conditions: Conditions,
}

impl<'a> Expire<'a> {
    /// `seconds`: the time is in seconds; `relative`: it counts from `now`.
    fn parse(
        args: Args<'a>,
        seconds: bool,
        relative: bool,
        now: UnixMillis,
        command: &str,
    ) -> Result<Expire<'a>, ErrorReply> {
        let conditions = Conditions::parse(args)?;
        let mut when = parse_i64(args.get(2)).ok_or(NOT_AN_INTEGER)?;
        let invalid = || ErrorReply::owned(format!("ERR invalid expire time in '{command}' command"));
        if seconds {
            when = when.checked_mul(1000).ok_or_else(invalid)?;
        }
        if relative {
            when = when.checked_add(i64::try_from(now.0).unwrap_or(i64::MAX)).ok_or_else(invalid)?;
        }
        Ok(Expire { key: args.get(1), when, conditions })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        let changed = loop {
            let Some(meta) = db.meta(self.key)? else { break false };
            let current = meta.expiry.map(|t| i64::try_from(t.0).unwrap_or(i64::MAX));
            if !self.conditions.allow(current, self.when) {
                break false;
            }
            let rules = RejectRules::version_is(meta.version);
            let now = i64::try_from(db.now().0).unwrap_or(i64::MAX);
            let done = if self.when <= now {
                db.remove_version(self.key, meta.version)?
            } else {
                db.set_expiry(self.key, Some(UnixMillis(self.when as u64)), rules)?
            };
            if done {
                break true;
            }
        };
        out.int(changed as i64);
        Ok(())
    }
}

fn run(
    args: Args<'_>,
    session: &mut Session,
    out: &mut Reply<'_>,
    seconds: bool,
    relative: bool,
    command: &str,
) -> Result<(), ErrorReply> {
    let now = session.db().now();
    Expire::parse(args, seconds, relative, now, command)?.apply(session, out)
}

pub fn run_expire(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    run(args, session, out, true, true, "expire")
}

pub fn run_pexpire(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    run(args, session, out, false, true, "pexpire")
}

pub fn run_expireat(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    run(args, session, out, true, false, "expireat")
}

pub fn run_pexpireat(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    run(args, session, out, false, false, "pexpireat")
}
