//! SELECT index: makes database `index` (0..15, a table named "db{index}")
//! the connection's; "+OK".

use super::{CommandSpec, NOT_AN_INTEGER};
use crate::resp::db::DATABASES;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "select",
    syntax: "index#integer",
    arity: 2,
    flags: &["loading", "stale", "fast"],
    acl: &["@keyspace", "@fast"],
    group: "connection",
    summary: "Change the selected database for the current connection",
    ..CommandSpec::BASE
};

/// The database index SELECT accepts in `arg` (0..15), if valid.
pub fn parse_index(arg: &[u8]) -> Option<usize> {
    parse_i64(arg).and_then(|n| usize::try_from(n).ok()).filter(|&i| i < DATABASES)
}

struct Select {
    index: usize,
}

impl Select {
    fn parse(args: Args<'_>, cluster_mode: bool) -> Result<Select, ErrorReply> {
        let n = parse_i64(args.get(1)).filter(|n| i32::try_from(*n).is_ok()).ok_or(NOT_AN_INTEGER)?;
        if cluster_mode && n != 0 {
            return Err(ErrorReply::new("ERR SELECT is not allowed in cluster mode"));
        }
        match usize::try_from(n) {
            Ok(index) if index < DATABASES => Ok(Select { index }),
            _ => Err(ErrorReply::new("ERR DB index is out of range")),
        }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        session.db = self.index;
        out.ok();
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Select::parse(args, session.cluster_mode)?.apply(session, out);
    Ok(())
}
