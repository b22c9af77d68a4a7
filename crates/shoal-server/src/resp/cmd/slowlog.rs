//! SLOWLOG GET [count] | LEN | RESET | HELP: the slow log (`admin::slowlog`),
//! newest first: each entry [id, Unix time, microseconds, arguments,
//! client address, client name], as Redis 7 answers. `count` defaults to
//! 10; -1 means all.

use super::{help, lookup_sub, unknown_subcommand, wrong_arity, CommandSpec};
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

const SUB: CommandSpec = CommandSpec {
    name: "slowlog|get",
    syntax: "[count#integer]",
    arity: -2,
    flags: &["admin", "loading", "stale"],
    acl: &["@admin", "@slow", "@dangerous"],
    tips: &["request_policy:all_nodes", "nondeterministic_output"],
    group: "server",
    since: "2.2.12",
    summary: "Read the newest entries of the slow log",
    complexity: "O(N) where N is the number of entries returned",
    ..CommandSpec::BASE
};

pub static SPEC: CommandSpec = CommandSpec {
    name: "slowlog",
    arity: -2,
    acl: &["@slow"],
    group: "server",
    since: "2.2.12",
    summary: "A container for slow log commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        SUB,
        CommandSpec {
            name: "slowlog|len",
            syntax: "",
            arity: 2,
            tips: &["request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"],
            summary: "Count the entries of the slow log",
            complexity: "O(1)",
            ..SUB
        },
        CommandSpec {
            name: "slowlog|reset",
            syntax: "",
            arity: 2,
            tips: &["request_policy:all_nodes", "response_policy:all_succeeded"],
            summary: "Empty the slow log",
            complexity: "O(N) where N is the number of entries in the slow log",
            ..SUB
        },
        CommandSpec {
            name: "slowlog|help",
            syntax: "",
            arity: 2,
            flags: &["loading", "stale"],
            acl: &["@slow"],
            tips: &[],
            since: "6.2.0",
            summary: "Show helpful text about the different subcommands",
            complexity: "O(1)",
            ..SUB
        },
    ],
    ..CommandSpec::BASE
};

enum SlowLog {
    Get(Option<usize>),
    Len,
    Reset,
    Help,
}

impl SlowLog {
    fn parse(args: Args<'_>) -> Result<SlowLog, ErrorReply> {
        let sub = lookup_sub(&SPEC, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
        if !sub.arity_ok(args.len()) || (sub.name == "slowlog|get" && args.len() > 3) {
            return Err(wrong_arity(sub.name));
        }
        Ok(match sub.name {
            "slowlog|get" if args.len() == 3 => match parse_i64(args.get(2)) {
                Some(-1) => SlowLog::Get(None),
                Some(n) if n >= 0 => SlowLog::Get(Some(n as usize)),
                _ => return Err(ErrorReply::new("ERR count should be greater than or equal to -1")),
            },
            "slowlog|get" => SlowLog::Get(Some(10)),
            "slowlog|len" => SlowLog::Len,
            "slowlog|reset" => SlowLog::Reset,
            _ => SlowLog::Help,
        })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        let log = &session.ctx.admin.slowlog;
        match self {
            SlowLog::Get(count) => {
                let entries = log.latest(count);
                out.array(entries.len());
                for e in entries {
                    out.array(6);
                    out.int(e.id as i64);
                    out.int(e.time);
                    out.int(e.usec as i64);
                    out.array(e.args.len());
                    for a in &e.args {
                        out.bulk(a);
                    }
                    out.bulk(e.addr.as_bytes());
                    out.bulk(&e.name);
                }
            }
            SlowLog::Len => out.int(log.len() as i64),
            SlowLog::Reset => {
                log.reset();
                out.ok();
            }
            SlowLog::Help => {
                let lines = [
                    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GET [<count>]",
                    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                    "    Entries are made of:",
                    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                    "    client name",
                    "LEN",
                    "    Return the length of the slowlog.",
                    "RESET",
                    "    Reset the slowlog.",
                    "HELP",
                    "    Prints this help.",
                ];
                help(out, &lines);
            }
        }
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    SlowLog::parse(args)?.apply(session, out);
    Ok(())
}
