//! OBJECT ENCODING | FREQ | HELP and MEMORY USAGE | HELP: what Redis tools
//! (`redis-cli --bigkeys`, `--memkeys`) ask about a key.
//!
//! * OBJECT ENCODING answers what Redis would choose for the value: `int`
//!   for a decimal 64-bit integer of at most 20 bytes, `embstr` up to 44
//!   bytes, `raw` beyond. (Redis also answers `raw` for short values made
//!   by APPEND or SETRANGE; Shoal does not record how a value was made.)
//! * OBJECT FREQ answers Redis's error for a server without an LFU policy:
//!   Shoal keeps no access frequencies.
//! * MEMORY USAGE is Shoal's own figure: the bytes of the object's log
//!   entry (header, table id, version, expiry, key and value) plus its
//!   8-byte hash-table reference.
//!
//! OBJECT IDLETIME and REFCOUNT are not supported (Shoal tracks neither);
//! they get Redis's unknown-subcommand error.

use super::{help, lookup_sub, unknown_subcommand, wrong_arity, CommandSpec, NOT_AN_INTEGER, SYNTAX_ERROR};
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::{counter, format};

const OBJECT_SUB: CommandSpec = CommandSpec {
    name: "object|encoding",
    syntax: "key",
    arity: 3,
    flags: &["readonly"],
    first_key: 2,
    last_key: 2,
    step: 1,
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "2.2.3",
    summary: "Inspect the internal encoding of a Redis object",
    ..CommandSpec::BASE
};

// The containers name their subcommands' key (position 2) so that routing
// sends `OBJECT ENCODING key` and `MEMORY USAGE key` to the key's master
// (Redis reports 0, 0, 0 for the containers and the key in the
// subcommands' key specs).
pub static OBJECT: CommandSpec = CommandSpec {
    name: "object",
    arity: -2,
    flags: &[],
    first_key: 2,
    last_key: 2,
    step: 1,
    acl: &["@slow"],
    group: "generic",
    since: "2.2.3",
    summary: "A container for object introspection commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        OBJECT_SUB,
        CommandSpec {
            name: "object|freq",
            syntax: "key",
            since: "4.0.0",
            summary: "Get the logarithmic access frequency counter of a Redis object",
            ..OBJECT_SUB
        },
        CommandSpec {
            name: "object|help",
            syntax: "",
            arity: 2,
            flags: &["loading", "stale"],
            first_key: 0,
            last_key: 0,
            step: 0,
            since: "6.2.0",
            summary: "Show helpful text about the different subcommands",
            ..OBJECT_SUB
        },
    ],
    ..CommandSpec::BASE
};

const MEMORY_SUB: CommandSpec = CommandSpec {
    name: "memory|usage",
    syntax: "key [SAMPLES count#integer]",
    arity: -3,
    flags: &["readonly"],
    first_key: 2,
    last_key: 2,
    step: 1,
    acl: &["@read", "@slow"],
    group: "server",
    since: "4.0.0",
    summary: "Estimate the memory usage of a key",
    complexity: "O(N) where N is the number of samples.",
    ..CommandSpec::BASE
};

pub static MEMORY: CommandSpec = CommandSpec {
    name: "memory",
    arity: -2,
    flags: &[],
    first_key: 2,
    last_key: 2,
    step: 1,
    acl: &["@slow"],
    group: "server",
    since: "4.0.0",
    summary: "A container for memory diagnostics commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        MEMORY_SUB,
        CommandSpec {
            name: "memory|help",
            syntax: "",
            arity: 2,
            flags: &["loading", "stale"],
            first_key: 0,
            last_key: 0,
            step: 0,
            summary: "Show helpful text about the different subcommands",
            ..MEMORY_SUB
        },
    ],
    ..CommandSpec::BASE
};

/// Bytes of a hash-table reference to an object.
const HASH_TABLE_REF_BYTES: usize = 8;

/// Redis's string encoding for `value`.
fn encoding(value: &[u8]) -> &'static str {
    if counter::parse(value).is_some() {
        "int"
    } else if value.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

pub fn run_object(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let sub = lookup_sub(&OBJECT, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
    if !sub.arity_ok(args.len()) {
        return Err(wrong_arity(sub.name));
    }
    match sub.name {
        "object|help" => help(
            out,
            &[
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "    Return the kind of internal representation used in order to store the value",
                "    associated with a <key>.",
                "FREQ <key>",
                "    Return the access logarithmic frequency counter of a <key>.",
                "HELP",
                "    Print this help.",
            ],
        ),
        "object|encoding" => {
            let mut value = std::mem::take(&mut session.scratch);
            let found = session.db().get_into(args.get(2), &mut value);
            let r = found.map(|f| match f {
                Some(_) => out.bulk(encoding(&value).as_bytes()),
                None if crate::resp::xstream::exists(&session.ctx, session.db, args.get(2)) => out.bulk(b"stream"),
                None => out.null(),
            });
            session.scratch = value;
            r?;
        }
        "object|freq" => {
            if session.db().meta(args.get(2))?.is_none()
                && !crate::resp::xstream::exists(&session.ctx, session.db, args.get(2))
            {
                out.null();
                return Ok(());
            }
            return Err(ErrorReply::new(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when \
                 switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ));
        }
        _ => return Err(unknown_subcommand(args)),
    }
    Ok(())
}

pub fn run_memory(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let sub = lookup_sub(&MEMORY, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
    if !sub.arity_ok(args.len()) {
        return Err(wrong_arity(sub.name));
    }
    if sub.name == "memory|help" {
        help(
            out,
            &[
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value. Nested values are",
                "    sampled up to <count> times (default: 5, 0 means sample all).",
                "HELP",
                "    Print this help.",
            ],
        );
        return Ok(());
    }
    // USAGE key [SAMPLES count]
    let mut i = 3;
    while i < args.len() {
        if super::is(args.get(i), "samples") && i + 1 < args.len() {
            let n = parse_i64(args.get(i + 1)).ok_or(NOT_AN_INTEGER)?;
            if n < 0 {
                return Err(SYNTAX_ERROR);
            }
            i += 2;
        } else {
            return Err(SYNTAX_ERROR);
        }
    }
    let key = args.get(2);
    let mut value = std::mem::take(&mut session.scratch);
    let db = session.db();
    let r = db.get_meta_into(key, &mut value).map(|found| match (found, db.table()) {
        (Some(meta), Some(table)) => {
            let entry = format::object_len_with(table, meta.version, meta.expiry, key.len(), value.len());
            out.int((entry + HASH_TABLE_REF_BYTES) as i64);
        }
        _ => out.null(),
    });
    session.scratch = value;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_follows_redis_for_fresh_strings() {
        assert_eq!(encoding(b"123"), "int");
        assert_eq!(encoding(b"-9223372036854775808"), "int");
        assert_eq!(encoding(b"0123"), "embstr");
        assert_eq!(encoding(&[b'x'; 44]), "embstr");
        assert_eq!(encoding(&[b'x'; 45]), "raw");
        assert_eq!(encoding(b"99999999999999999999"), "embstr", "past i64");
    }
}
