//! MULTI, EXEC, DISCARD, WATCH, UNWATCH: Redis transactions, and the two
//! internal commands that run them across a cluster (SHOAL.EXEC,
//! SHOAL.VERSIONS). The transaction itself (queueing, the store
//! transaction, routing) is `resp::multi`; these are its entry points.
//!
//! Replies as Redis's: MULTI "+OK" ("ERR MULTI calls can not be nested"),
//! EXEC an array of the queued commands' replies, a null array when a
//! watched key changed, "EXECABORT Transaction discarded because of
//! previous errors." when queueing failed, "ERR EXEC without MULTI";
//! DISCARD "+OK" ("ERR DISCARD without MULTI"); WATCH "+OK" ("ERR WATCH
//! inside MULTI is not allowed"); UNWATCH "+OK".

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::multi;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

const BASE: CommandSpec = CommandSpec {
    arity: 1,
    flags: &["noscript", "loading", "stale", "fast", "allow_busy"],
    acl: &["@fast", "@transaction"],
    group: "transactions",
    ..CommandSpec::BASE
};

pub static MULTI: CommandSpec =
    CommandSpec { name: "multi", since: "1.2.0", summary: "Mark the start of a transaction block", ..BASE };

pub static EXEC: CommandSpec = CommandSpec {
    name: "exec",
    flags: &["noscript", "loading", "stale", "skip_slowlog"],
    acl: &["@slow", "@transaction"],
    since: "1.2.0",
    summary: "Execute all commands issued after MULTI",
    complexity: "Depends on commands in the transaction",
    ..BASE
};

pub static DISCARD: CommandSpec = CommandSpec {
    name: "discard",
    since: "2.0.0",
    summary: "Discard all commands issued after MULTI",
    complexity: "O(N), when N is the number of queued commands",
    ..BASE
};

pub static WATCH: CommandSpec = CommandSpec {
    name: "watch",
    syntax: "key...",
    arity: -2,
    first_key: 1,
    last_key: -1,
    step: 1,
    since: "2.2.0",
    summary: "Watch the given keys to determine execution of the MULTI/EXEC block",
    complexity: "O(1) for every key.",
    ..BASE
};

pub static UNWATCH: CommandSpec =
    CommandSpec { name: "unwatch", since: "2.2.0", summary: "Forget about all watched keys", ..BASE };

/// Internal: SHOAL.EXEC n [db key version]xn command...: runs a
/// transaction forwarded by another server (`resp::multi`).
pub static SHOAL_EXEC: CommandSpec = CommandSpec {
    name: "shoal.exec",
    arity: -2,
    flags: &["noscript", "write"],
    acl: &["@write", "@transaction"],
    group: "transactions",
    summary: "Internal: run a transaction forwarded by another server of the cluster",
    ..CommandSpec::BASE
};

/// Internal: SHOAL.VERSIONS key...: what WATCH records of each key
/// (`multi::Seen::to_wire`: a version, or an absent key's absence stamp),
/// for keys another server masters.
pub static SHOAL_VERSIONS: CommandSpec = CommandSpec {
    name: "shoal.versions",
    arity: -2,
    flags: &["readonly", "fast"],
    first_key: 1,
    last_key: -1,
    step: 1,
    acl: &["@read", "@transaction"],
    group: "transactions",
    summary: "Internal: the versions of keys, for WATCH across the cluster",
    ..CommandSpec::BASE
};

pub fn run_multi(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    if session.multi.is_some() {
        return Err(ErrorReply::new("ERR MULTI calls can not be nested"));
    }
    session.multi = Some(multi::Multi::default());
    out.ok();
    Ok(())
}

pub fn run_exec(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    multi::exec_here(session, out)
}

pub fn run_discard(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    if session.multi.take().is_none() {
        return Err(ErrorReply::new("ERR DISCARD without MULTI"));
    }
    session.unwatch();
    out.ok();
    Ok(())
}

pub fn run_watch(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    if session.multi.is_some() {
        return Err(ErrorReply::new("ERR WATCH inside MULTI is not allowed"));
    }
    let mut versions = Vec::with_capacity(args.len() - 1);
    {
        let db = session.db();
        for key in args.iter().skip(1) {
            versions.push(db.seen(key)?);
        }
    }
    let db = session.db;
    for (key, version) in args.iter().skip(1).zip(versions) {
        session.watch(db, key, version)?;
    }
    out.ok();
    Ok(())
}

pub fn run_unwatch(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    session.unwatch();
    out.ok();
    Ok(())
}

pub fn run_shoal_exec(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    multi::exec_forwarded(args, session, out)
}

pub fn run_shoal_versions(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let db = session.db();
    let mut versions = Vec::with_capacity(args.len() - 1);
    for key in args.iter().skip(1) {
        versions.push(db.seen(key)?);
    }
    out.array(versions.len());
    for v in versions {
        out.int(v.to_wire());
    }
    Ok(())
}
