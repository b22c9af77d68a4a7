//! COMMAND [COUNT | LIST [FILTERBY ...] | INFO [name ...] | DOCS [name ...] | HELP]: what
//! the server supports, as Redis 7 describes it, enough for redis-cli's
//! help and hints and for client libraries that read the command table.
//!
//! COMMAND and COMMAND INFO: per command [name, arity, flags, first key,
//! last key, step, ACL categories, tips, key specs, subcommands]. COMMAND
//! DOCS: a map of name to {summary, since, group, complexity[, subcommands]}.

use super::{
    help, is, lookup, lookup_sub, syntax, unknown_subcommand, wrong_arity, CommandSpec, COMMANDS, SYNTAX_ERROR,
};
use crate::resp::frame::Args;
use crate::resp::glob;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

const SUB: CommandSpec = CommandSpec {
    name: "command|count",
    arity: 2,
    flags: &["loading", "stale"],
    acl: &["@slow", "@connection"],
    group: "server",
    since: "2.8.13",
    summary: "Get total number of Redis commands",
    ..CommandSpec::BASE
};

pub static SPEC: CommandSpec = CommandSpec {
    name: "command",
    tips: &["nondeterministic_output_order"],
    arity: -1,
    flags: &["loading", "stale"],
    acl: &["@slow", "@connection"],
    group: "server",
    since: "2.8.13",
    summary: "Get array of Redis command details",
    complexity: "O(N) where N is the total number of Redis commands",
    subcommands: &[
        SUB,
        CommandSpec {
            name: "command|list",
            syntax: "[FILTERBY filterby=(MODULE module-name|ACLCAT category|PATTERN pattern#pattern)]",
            arity: -2,
            since: "7.0.0",
            summary: "Get an array of Redis command names",
            ..SUB
        },
        CommandSpec {
            name: "command|info",
            syntax: "[command-name...]",
            arity: -2,
            summary: "Get array of specific Redis command details, or all when no argument is given.",
            ..SUB
        },
        CommandSpec {
            name: "command|docs",
            syntax: "[command-name...]",
            arity: -2,
            since: "7.0.0",
            summary: "Get array of specific Redis command documentation",
            ..SUB
        },
        CommandSpec {
            name: "command|help",
            since: "5.0.0",
            summary: "Show helpful text about the different subcommands",
            ..SUB
        },
    ],
    ..CommandSpec::BASE
};

enum Filter<'a> {
    Module,
    AclCategory(&'a [u8]),
    Pattern(&'a [u8]),
}

impl Filter<'_> {
    fn picks(&self, spec: &CommandSpec) -> bool {
        match self {
            Filter::Module => false,
            Filter::AclCategory(cat) => {
                spec.acl.iter().any(|a| a.strip_prefix('@').is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(cat)))
            }
            Filter::Pattern(p) => glob::matches(&p.to_ascii_lowercase(), spec.name.as_bytes()),
        }
    }
}

enum Command<'a> {
    /// COMMAND, COMMAND INFO: all (no names) or the named ones.
    Info(Option<Args<'a>>),
    Docs(Option<Args<'a>>),
    Count,
    /// COMMAND LIST, or with FILTERBY, the commands and subcommands it picks.
    List(Option<Filter<'a>>),
    Help,
}

impl<'a> Command<'a> {
    fn parse(args: Args<'a>) -> Result<Command<'a>, ErrorReply> {
        if args.len() == 1 {
            return Ok(Command::Info(None));
        }
        let sub = lookup_sub(&SPEC, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
        if !sub.arity_ok(args.len()) {
            return Err(wrong_arity(sub.name));
        }
        let names = (args.len() > 2).then(|| args.skip(2));
        Ok(match sub.name {
            "command|count" => Command::Count,
            "command|list" if args.len() == 2 => Command::List(None),
            "command|list" if args.len() == 5 && is(args.get(2), "FILTERBY") => {
                let (kind, value) = (args.get(3), args.get(4));
                Command::List(Some(if is(kind, "MODULE") {
                    Filter::Module
                } else if is(kind, "ACLCAT") {
                    Filter::AclCategory(value)
                } else if is(kind, "PATTERN") {
                    Filter::Pattern(value)
                } else {
                    return Err(SYNTAX_ERROR);
                }))
            }
            "command|list" => return Err(SYNTAX_ERROR),
            "command|info" => Command::Info(names),
            "command|docs" => Command::Docs(names),
            _ => Command::Help,
        })
    }

    fn apply(self, out: &mut Reply) {
        match self {
            Command::Count => out.int(COMMANDS.len() as i64),
            Command::List(None) => {
                out.array(COMMANDS.len());
                for e in COMMANDS {
                    out.bulk(e.spec.name.as_bytes());
                }
            }
            Command::List(Some(filter)) => {
                let picked: Vec<&CommandSpec> = COMMANDS
                    .iter()
                    .flat_map(|e| std::iter::once(e.spec).chain(e.spec.subcommands.iter()))
                    .filter(|s| filter.picks(s))
                    .collect();
                out.array(picked.len());
                for s in picked {
                    out.bulk(s.name.as_bytes());
                }
            }
            Command::Info(None) => {
                out.array(COMMANDS.len());
                for e in COMMANDS {
                    info(e.spec, out);
                }
            }
            Command::Info(Some(names)) => {
                out.array(names.len());
                for n in names.iter() {
                    match find(n) {
                        Some(spec) => info(spec, out),
                        None => out.null_array(),
                    }
                }
            }
            Command::Docs(names) => {
                let specs: Vec<&CommandSpec> = match names {
                    None => COMMANDS.iter().map(|e| e.spec).collect(),
                    Some(names) => names.iter().filter_map(find).collect(),
                };
                out.map(specs.len());
                for spec in specs {
                    out.bulk(spec.name.as_bytes());
                    docs(spec, out);
                }
            }
            Command::Help => {
                let lines = [
                    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "(no subcommand)",
                    "    Return details about all Redis commands.",
                    "COUNT",
                    "    Return the total number of commands in this Redis server.",
                    "LIST",
                    "    Return a list of all commands in this Redis server.",
                    "INFO [<command-name> ...]",
                    "    Return details about multiple Redis commands.",
                    "DOCS [<command-name> ...]",
                    "    Return documentation details about multiple Redis commands.",
                    "HELP",
                    "    Prints this help.",
                ];
                help(out, &lines);
            }
        }
    }
}

/// A command ("get") or subcommand ("config|get") by name.
fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    let mut parts = name.splitn(2, |&c| c == b'|');
    let top = lookup(parts.next().unwrap_or_default())?.spec;
    match parts.next() {
        None => Some(top),
        Some(sub) => lookup_sub(top, sub),
    }
}

fn info(spec: &CommandSpec, out: &mut Reply) {
    out.array(10);
    out.bulk(spec.name.as_bytes());
    out.int(spec.arity as i64);
    out.set(spec.flags.len());
    for f in spec.flags {
        out.simple(f);
    }
    out.int(spec.first_key as i64);
    out.int(spec.last_key as i64);
    out.int(spec.step as i64);
    out.set(spec.acl.len());
    for a in spec.acl {
        out.simple(a);
    }
    out.set(spec.tips.len());
    for t in spec.tips {
        out.bulk(t.as_bytes());
    }
    out.array(0);
    out.array(spec.subcommands.len());
    for s in spec.subcommands {
        info(s, out);
    }
}

fn docs(spec: &CommandSpec, out: &mut Reply) {
    let has_subs = !spec.subcommands.is_empty();
    // The table's syntax strings are checked by a unit test of `syntax`.
    let args = syntax::parse(spec.syntax).unwrap_or_default();
    out.map(4 + !args.is_empty() as usize + has_subs as usize);
    for (k, v) in
        [("summary", spec.summary), ("since", spec.since), ("group", spec.group), ("complexity", spec.complexity)]
    {
        out.bulk(k.as_bytes());
        out.bulk(v.as_bytes());
    }
    if !args.is_empty() {
        out.bulk(b"arguments");
        arguments(&args, out);
    }
    if has_subs {
        out.bulk(b"subcommands");
        out.map(spec.subcommands.len());
        for s in spec.subcommands {
            out.bulk(s.name.as_bytes());
            docs(s, out);
        }
    }
}

/// Arguments as COMMAND DOCS lists them: per argument a map of name,
/// type, token, flags and nested arguments, as Redis 7 writes them.
fn arguments(args: &[syntax::Arg], out: &mut Reply) {
    out.array(args.len());
    for a in args {
        let flags: Vec<&str> = [("optional", a.optional), ("multiple", a.multiple)]
            .iter()
            .filter(|(_, on)| *on)
            .map(|(f, _)| *f)
            .collect();
        out.map(2 + a.token.is_some() as usize + !flags.is_empty() as usize + !a.args.is_empty() as usize);
        out.bulk(b"name");
        out.bulk(a.name.as_bytes());
        out.bulk(b"type");
        out.bulk(a.kind.as_bytes());
        if let Some(t) = &a.token {
            out.bulk(b"token");
            out.bulk(t.as_bytes());
        }
        if !flags.is_empty() {
            out.bulk(b"flags");
            out.set(flags.len());
            for f in flags {
                out.simple(f);
            }
        }
        if !a.args.is_empty() {
            out.bulk(b"arguments");
            arguments(&a.args, out);
        }
    }
}

pub fn run(args: Args<'_>, _: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Command::parse(args)?.apply(out);
    Ok(())
}
