//! TTL key, PTTL key: the time left before the key expires, in seconds
//! (rounded to the nearest) or milliseconds; EXPIRETIME key, PEXPIRETIME
//! key: the time it expires, a Unix time in seconds (rounded) or
//! milliseconds. -2 if the key does not exist (an expired key does not),
//! -1 if it has no expiry, as in Redis.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static TTL: CommandSpec = CommandSpec {
    name: "ttl",
    syntax: "key",
    tips: &["nondeterministic_output"],
    arity: 2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@keyspace", "@read", "@fast"],
    group: "generic",
    since: "1.0.0",
    summary: "Get the time to live for a key in seconds",
    ..CommandSpec::BASE
};

pub static PTTL: CommandSpec = CommandSpec {
    name: "pttl",
    syntax: "key",
    since: "2.6.0",
    summary: "Get the time to live for a key in milliseconds",
    ..TTL
};

pub static EXPIRETIME: CommandSpec = CommandSpec {
    name: "expiretime",
    syntax: "key",
    since: "7.0.0",
    summary: "Get the expiration Unix timestamp for a key",
    tips: &[],
    ..TTL
};

pub static PEXPIRETIME: CommandSpec = CommandSpec {
    name: "pexpiretime",
    syntax: "key",
    since: "7.0.0",
    summary: "Get the expiration Unix timestamp for a key in milliseconds",
    tips: &[],
    ..TTL
};

struct Ttl<'a> {
    key: &'a [u8],
    /// Milliseconds rather than seconds.
    millis: bool,
    /// The expiry time rather than the time left.
    absolute: bool,
}

impl<'a> Ttl<'a> {
    fn parse(args: Args<'a>, millis: bool, absolute: bool) -> Ttl<'a> {
        Ttl { key: args.get(1), millis, absolute }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        let Some(meta) = db.meta(self.key)? else {
            // A stream has no expiry (`docs/streams.md`).
            let stream = crate::resp::xstream::exists(&session.ctx, session.db, self.key);
            out.int(if stream { -1 } else { -2 });
            return Ok(());
        };
        let Some(at) = meta.expiry else {
            out.int(-1);
            return Ok(());
        };
        let at = i64::try_from(at.0).unwrap_or(i64::MAX);
        let now = i64::try_from(db.now().0).unwrap_or(i64::MAX);
        let ms = if self.absolute { at } else { at - now }.max(0);
        // Rounded without overflow: near the largest time Redis's
        // (ms + 500) / 1000 comes out as this too.
        out.int(if self.millis { ms } else { ((ms as i128 + 500) / 1000) as i64 });
        Ok(())
    }
}

pub fn run_ttl(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Ttl::parse(args, false, false).apply(session, out)
}

pub fn run_pttl(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Ttl::parse(args, true, false).apply(session, out)
}

pub fn run_expiretime(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Ttl::parse(args, false, true).apply(session, out)
}

pub fn run_pexpiretime(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Ttl::parse(args, true, true).apply(session, out)
}
