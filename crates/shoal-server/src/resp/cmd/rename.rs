//! RENAME key newkey, RENAMENX key newkey, COPY source destination [DB
//! destination-db] [REPLACE]: a key's value and expiry moved or copied to
//! another key, atomically (one store transaction over both keys: no other
//! client sees one without the other). In a cluster both keys must be on
//! one master (CROSSSLOT otherwise, as Redis Cluster answers), and COPY
//! stays in the selected database.

use super::{is, select_index, CommandSpec, NOT_AN_INTEGER, SYNTAX_ERROR};
use crate::resp::db::Db;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::multi::atomically;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{Expiry, RejectRules};

pub static RENAME: CommandSpec = CommandSpec {
    name: "rename",
    syntax: "key newkey#key",
    arity: 3,
    flags: &["write"],
    first_key: 1,
    last_key: 2,
    step: 1,
    acl: &["@keyspace", "@write", "@slow"],
    group: "generic",
    since: "1.0.0",
    summary: "Rename a key",
    ..CommandSpec::BASE
};

pub static RENAMENX: CommandSpec = CommandSpec {
    name: "renamenx",
    syntax: "key newkey#key",
    flags: &["write", "fast"],
    acl: &["@keyspace", "@write", "@fast"],
    since: "1.0.0",
    summary: "Rename a key, only if the new key does not exist",
    ..RENAME
};

pub static COPY: CommandSpec = CommandSpec {
    name: "copy",
    syntax: "source#key destination#key [DB destination-db#integer] [REPLACE]",
    arity: -3,
    flags: &["write", "denyoom"],
    acl: &["@keyspace", "@write", "@slow"],
    since: "6.2.0",
    summary: "Copy a key",
    complexity: "O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
    ..RENAME
};

const NO_SUCH_KEY: ErrorReply = ErrorReply::new("ERR no such key");

/// Moves `from`'s value and expiry to `to` (replacing it unless `nx` and
/// it exists); whether it moved. `Err(NO_SUCH_KEY)` if `from` is missing.
fn rename(s: &mut Session, from: &[u8], to: &[u8], nx: bool) -> Result<bool, ErrorReply> {
    let db = s.db;
    let mut value = std::mem::take(&mut s.scratch);
    let r = atomically(s, &[(db, from), (db, to)], |s| {
        let d = s.db();
        let Some(meta) = d.get_meta_into(from, &mut value)? else { return Err(NO_SUCH_KEY) };
        if from == to {
            return Ok(!nx);
        }
        let rules = if nx { RejectRules::must_not_exist() } else { RejectRules::default() };
        let expiry = meta.expiry.map_or(Expiry::Never, Expiry::At);
        if !d.write_with_expiry(to, &value, rules, expiry)? {
            return Ok(false);
        }
        d.remove(from)?;
        Ok(true)
    });
    s.scratch = value;
    r
}

pub fn run_rename(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    rename(session, args.get(1), args.get(2), false)?;
    out.ok();
    Ok(())
}

pub fn run_renamenx(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let moved = rename(session, args.get(1), args.get(2), true)?;
    out.int(i64::from(moved));
    Ok(())
}

struct Copy<'a> {
    from: &'a [u8],
    to: &'a [u8],
    db: Option<usize>,
    replace: bool,
}

impl<'a> Copy<'a> {
    fn parse(args: Args<'a>, cluster_mode: bool, clustered: bool, current: usize) -> Result<Copy<'a>, ErrorReply> {
        let mut c = Copy { from: args.get(1), to: args.get(2), db: None, replace: false };
        let mut i = 3;
        while i < args.len() {
            let a = args.get(i);
            if is(a, "replace") {
                c.replace = true;
                i += 1;
            } else if is(a, "db") && i + 1 < args.len() {
                let n = parse_i64(args.get(i + 1)).ok_or(NOT_AN_INTEGER)?;
                if i32::try_from(n).is_err() {
                    return Err(ErrorReply::new(
                        "ERR value is out of range, value must between -2147483648 and 2147483647",
                    ));
                }
                let index = select_index(args.get(i + 1)).ok_or(ErrorReply::new("ERR DB index is out of range"))?;
                c.db = Some(index);
                i += 2;
            } else {
                return Err(SYNTAX_ERROR);
            }
        }
        if cluster_mode && c.db.is_some_and(|d| d != 0) {
            return Err(ErrorReply::new("ERR Copying to another database is not allowed in cluster mode"));
        }
        // Routing placed the request by its keys in the selected database;
        // the destination's master in another one may be another server.
        if clustered && c.db.is_some_and(|d| d != current) {
            return Err(ErrorReply::new(
                "ERR COPY to another database is not supported in a Shoal cluster (the key may be on another master)",
            ));
        }
        Ok(c)
    }

    /// Whether it copied.
    fn apply(self, s: &mut Session) -> Result<bool, ErrorReply> {
        let (src_db, dst_db) = (s.db, self.db.unwrap_or(s.db));
        if src_db == dst_db && self.from == self.to {
            return Err(ErrorReply::new("ERR source and destination objects are the same"));
        }
        let mut value = std::mem::take(&mut s.scratch);
        let r = atomically(s, &[(src_db, self.from), (dst_db, self.to)], |s| {
            let Some(meta) = s.db().get_meta_into(self.from, &mut value)? else { return Ok(false) };
            let rules = if self.replace { RejectRules::default() } else { RejectRules::must_not_exist() };
            let expiry = meta.expiry.map_or(Expiry::Never, Expiry::At);
            Db::new(&s.ctx, dst_db, s.table_cache(), &s.txn).write_with_expiry(self.to, &value, rules, expiry)
        });
        s.scratch = value;
        r
    }
}

/// The database a COPY request writes its destination in, if it names one
/// with a valid DB option (for EXEC, which locks the keys before running).
pub fn copy_destination_db(args: Args<'_>) -> Option<usize> {
    let mut i = 3;
    let mut db = None;
    while i + 1 < args.len() {
        if is(args.get(i), "db") {
            db = select_index(args.get(i + 1));
            i += 2;
        } else {
            i += 1;
        }
    }
    db
}

pub fn run_copy(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let copied = Copy::parse(args, session.cluster_mode, session.clustered(), session.db)?.apply(session)?;
    out.int(i64::from(copied));
    Ok(())
}
