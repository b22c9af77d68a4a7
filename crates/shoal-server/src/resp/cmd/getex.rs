//! GETEX key [EX seconds | PX ms | EXAT unix-seconds | PXAT unix-ms |
//! PERSIST]: the value (null if the key does not exist), and the key's
//! expiry set as given, or removed (PERSIST). A time already past (EXAT,
//! PXAT) deletes the key after replying with its value.
//!
//! As in Redis, a missing key answers null before the time is checked;
//! for an existing key a bad time is "ERR invalid expire time in 'getex'
//! command" and nothing changes. Options: as SET parses them
//! ([`Options::parse`]). Atomic: the change is made only on the version
//! read, retrying otherwise.

use super::set::Options;
use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::RejectRules;

pub static SPEC: CommandSpec = CommandSpec {
    name: "getex",
    syntax: "key expiration=[EX seconds#integer|PX milliseconds#integer|EXAT unix-time-seconds#unix-time|PXAT unix-time-milliseconds#unix-time|PERSIST]",
    arity: -2,
    flags: &["write", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@fast"],
    group: "string",
    since: "6.2.0",
    summary: "Get the value of a key and optionally set its expiration",
    ..CommandSpec::BASE
};

struct Getex<'a> {
    key: &'a [u8],
    options: Options<'a>,
}

impl<'a> Getex<'a> {
    fn parse(args: Args<'a>) -> Result<Getex<'a>, ErrorReply> {
        Ok(Getex { key: args.get(1), options: Options::parse(args, false)? })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let mut value = std::mem::take(&mut session.scratch);
        let result = self.change(session, &mut value);
        match &result {
            Ok(true) => out.bulk(&value),
            Ok(false) => out.null(),
            Err(_) => {}
        }
        session.scratch = value;
        result.map(|_| ())
    }

    /// Reads the value into `value` and changes the expiry; false if the
    /// key does not exist.
    fn change(&self, session: &Session, value: &mut Vec<u8>) -> Result<bool, ErrorReply> {
        let db = session.db();
        loop {
            let Some(meta) = db.get_meta_into(self.key, value)? else {
                return Ok(false);
            };
            let rules = RejectRules::version_is(meta.version);
            let done = match self.options.expiry {
                Some((kind, arg)) => {
                    let at = kind.time(arg, db.now(), "getex")?;
                    if kind.absolute() && at <= db.now() {
                        db.remove_version(self.key, meta.version)?
                    } else {
                        db.set_expiry(self.key, Some(at), rules)?
                    }
                }
                None if self.options.persist && meta.expiry.is_some() => db.set_expiry(self.key, None, rules)?,
                None => true,
            };
            if done {
                return Ok(true);
            }
        }
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Getex::parse(args)?.apply(session, out)
}
