//! SET key value [NX | XX] [GET] [EX seconds | PX ms | EXAT unix-seconds |
//! PXAT unix-ms | KEEPTTL]: "+OK"; null if NX/XX refused the write; with
//! GET, the old value (or null) whether or not it wrote.
//!
//! The value is written with the expiry given, or with the old value's
//! (KEEPTTL), or with none (a plain SET clears an expiry). Options are
//! parsed as Redis parses them ([`Options::parse`], shared with GETEX), so
//! errors read the same; an expiry time that is not positive, or that
//! overflows, is "ERR invalid expire time in 'set' command", checked
//! before anything else happens. Atomicity: NX/XX are the store's reject
//! rules; GET is a versioned read-modify-write.

use super::{is, CommandSpec, SYNTAX_ERROR};
use crate::resp::db::Update;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{Expiry, RejectRules, UnixMillis};

pub static SPEC: CommandSpec = CommandSpec {
    name: "set",
    syntax: "key value condition=[NX|XX] [GET] expiration=[EX seconds#integer|PX milliseconds#integer|EXAT unix-time-seconds#unix-time|PXAT unix-time-milliseconds#unix-time|KEEPTTL]",
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

/// A write condition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Condition {
    Always,
    /// NX: only if the key does not exist.
    Missing,
    /// XX: only if the key exists.
    Present,
}

/// How an expiry time option counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExpiryKind {
    /// EX: seconds from now.
    Seconds,
    /// PX: milliseconds from now.
    Millis,
    /// EXAT: a Unix time in seconds.
    AtSeconds,
    /// PXAT: a Unix time in milliseconds.
    AtMillis,
}

impl ExpiryKind {
    const OPTIONS: [(&'static str, ExpiryKind); 4] = [
        ("EX", ExpiryKind::Seconds),
        ("PX", ExpiryKind::Millis),
        ("EXAT", ExpiryKind::AtSeconds),
        ("PXAT", ExpiryKind::AtMillis),
    ];

    /// Whether the time is absolute (EXAT, PXAT).
    pub fn absolute(self) -> bool {
        matches!(self, ExpiryKind::AtSeconds | ExpiryKind::AtMillis)
    }

    /// The expiry time `arg` means at `now`, as Redis computes it: an
    /// integer ("ERR value is not an integer or out of range"), positive,
    /// and within range once in milliseconds and (EX, PX) added to now
    /// ("ERR invalid expire time in '<command>' command").
    pub fn time(self, arg: &[u8], now: UnixMillis, command: &str) -> Result<UnixMillis, ErrorReply> {
        let n = parse_i64(arg).ok_or(super::NOT_AN_INTEGER)?;
        let seconds = matches!(self, ExpiryKind::Seconds | ExpiryKind::AtSeconds);
        if n <= 0 || (seconds && n > i64::MAX / 1000) {
            return Err(invalid_expire_time(command));
        }
        let ms = if seconds { n * 1000 } else { n };
        let base = if self.absolute() { 0 } else { i64::try_from(now.0).unwrap_or(i64::MAX) };
        match ms.checked_add(base) {
            Some(at) => Ok(UnixMillis(at as u64)),
            None => Err(invalid_expire_time(command)),
        }
    }
}

/// Redis's error for an expiry time out of range.
pub fn invalid_expire_time(command: &str) -> ErrorReply {
    ErrorReply::owned(format!("ERR invalid expire time in '{command}' command"))
}

/// The options of SET (from argument 3) or GETEX (from argument 2), as
/// Redis's `parseExtendedStringArgumentsOrReply` takes them: NX, XX and
/// GET only for SET, PERSIST only for GETEX, KEEPTTL only for SET; one
/// kind of expiry (repeating it is allowed, the last one counts), never
/// with KEEPTTL or PERSIST; anything else is "ERR syntax error".
#[derive(Debug)]
pub struct Options<'a> {
    pub condition: Condition,
    pub get: bool,
    pub expiry: Option<(ExpiryKind, &'a [u8])>,
    pub keepttl: bool,
    pub persist: bool,
}

impl<'a> Options<'a> {
    pub fn parse(args: Args<'a>, for_set: bool) -> Result<Options<'a>, ErrorReply> {
        let mut o = Options { condition: Condition::Always, get: false, expiry: None, keepttl: false, persist: false };
        let mut i = if for_set { 3 } else { 2 };
        while i < args.len() {
            let opt = args.get(i);
            let has_next = i + 1 < args.len();
            let kind = ExpiryKind::OPTIONS.iter().find(|(name, _)| is(opt, name)).map(|(_, k)| *k);
            if for_set && is(opt, "NX") && o.condition != Condition::Present {
                o.condition = Condition::Missing;
            } else if for_set && is(opt, "XX") && o.condition != Condition::Missing {
                o.condition = Condition::Present;
            } else if for_set && is(opt, "GET") {
                o.get = true;
            } else if for_set && is(opt, "KEEPTTL") && o.expiry.is_none() {
                o.keepttl = true;
            } else if !for_set && is(opt, "PERSIST") && o.expiry.is_none() {
                o.persist = true;
            } else if let Some(kind) =
                kind.filter(|k| !o.keepttl && !o.persist && has_next && o.expiry.is_none_or(|(given, _)| given == *k))
            {
                o.expiry = Some((kind, args.get(i + 1)));
                i += 1;
            } else {
                return Err(SYNTAX_ERROR);
            }
            i += 1;
        }
        Ok(o)
    }
}

pub struct Set<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub condition: Condition,
    /// GET: reply with the old value.
    pub get: bool,
    /// The expiry option, not yet turned into a time.
    pub expiry: Option<(ExpiryKind, &'a [u8])>,
    pub keepttl: bool,
}

impl<'a> Set<'a> {
    fn parse(args: Args<'a>) -> Result<Set<'a>, ErrorReply> {
        let o = Options::parse(args, true)?;
        Ok(Set {
            key: args.get(1),
            value: args.get(2),
            condition: o.condition,
            get: o.get,
            expiry: o.expiry,
            keepttl: o.keepttl,
        })
    }

    /// Writes if the condition holds, and replies: "+OK" or null; with GET
    /// the old value or null.
    pub fn apply(&self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let db = session.db();
        let expiry = match self.expiry {
            Some((kind, arg)) => Expiry::At(kind.time(arg, db.now(), "set")?),
            None if self.keepttl => Expiry::Keep,
            None => Expiry::Never,
        };
        if !self.get {
            let rules = match self.condition {
                Condition::Always => RejectRules::default(),
                Condition::Missing => RejectRules::must_not_exist(),
                Condition::Present => RejectRules::must_exist(),
            };
            if db.write_with_expiry(self.key, self.value, rules, expiry)? {
                out.ok();
            } else {
                out.null();
            }
            return Ok(());
        }
        let mut scratch = Vec::new();
        let old = db.update(self.key, &mut scratch, expiry, |cur| {
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
