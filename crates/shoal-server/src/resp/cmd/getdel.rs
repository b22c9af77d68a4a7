//! GETDEL key: the value (null if missing), and the key removed. Atomic:
//! the removal applies only to the version read, else both run again.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "getdel",
    syntax: "key",
    arity: 2,
    flags: &["write", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@fast"],
    group: "string",
    since: "6.2.0",
    summary: "Get the value of a key and delete the key",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let key = args.get(1);
    let mut value = std::mem::take(&mut session.scratch);
    let result = (|| {
        let db = session.db();
        loop {
            let Some(version) = db.get_into(key, &mut value)? else { return Ok(false) };
            if db.remove_version(key, version)? {
                return Ok(true);
            }
        }
    })();
    match result {
        Ok(true) => out.bulk(&value),
        Ok(false) => out.null(),
        Err(_) => {}
    }
    session.scratch = value;
    result.map(|_| ())
}
