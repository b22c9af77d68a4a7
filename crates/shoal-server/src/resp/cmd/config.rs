//! CONFIG GET pattern [pattern ...]: the matching parameters as a map of
//! name to value (RESP2: a flat array), enough for tools that ask (e.g.
//! redis-benchmark asks for "save" and "appendonly"). Values reflect the
//! server's real configuration. CONFIG SET, REWRITE and RESETSTAT reply a
//! clear error: Shoal's configuration is set at start.

use super::{lookup_sub, unknown_subcommand, wrong_arity, CommandSpec};
use crate::context::ServerContext;
use crate::resp::db::DATABASES;
use crate::resp::frame::Args;
use crate::resp::glob;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

const SUB: CommandSpec = CommandSpec {
    name: "config|get",
    arity: -3,
    flags: &["admin", "noscript", "loading", "stale"],
    acl: &["@admin", "@slow", "@dangerous"],
    group: "server",
    since: "2.0.0",
    summary: "Get the values of configuration parameters",
    complexity: "O(N) when N is the number of configuration parameters provided",
    ..CommandSpec::BASE
};

pub static SPEC: CommandSpec = CommandSpec {
    name: "config",
    arity: -2,
    flags: &[],
    acl: &["@slow"],
    group: "server",
    since: "2.0.0",
    summary: "A container for server configuration commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        SUB,
        CommandSpec {
            name: "config|set",
            arity: -4,
            summary: "Set configuration parameters to the given values",
            ..SUB
        },
        CommandSpec { name: "config|rewrite", arity: 2, summary: "Rewrite the configuration file", ..SUB },
        CommandSpec { name: "config|resetstat", arity: 2, summary: "Reset the stats returned by INFO", ..SUB },
        CommandSpec {
            name: "config|help",
            arity: 2,
            flags: &["loading", "stale"],
            summary: "Show helpful text about the different subcommands",
            ..SUB
        },
    ],
    ..CommandSpec::BASE
};

/// The parameters CONFIG GET knows, in the order it lists them.
fn parameters(ctx: &ServerContext) -> Vec<(&'static str, String)> {
    let c = &ctx.config;
    vec![
        ("bind", c.listen.to_string()),
        ("port", c.resp_port.to_string()),
        ("databases", DATABASES.to_string()),
        ("maxmemory", ctx.store.config().memory_bytes.to_string()),
        ("maxmemory-policy", super::info::maxmemory_policy(ctx).into()),
        ("maxclients", c.max_connections.to_string()),
        ("timeout", c.idle_timeout_secs.to_string()),
        ("proto-max-bulk-len", ctx.store.config().max_value_bytes.to_string()),
        ("client-query-buffer-limit", c.request_buffer_size.0.to_string()),
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("io-threads", "1".into()),
        ("requirepass", ctx.auth.requirepass().into()),
    ]
}

enum Config<'a> {
    Get(Args<'a>),
    Help,
    Unsupported(&'static str),
}

impl<'a> Config<'a> {
    fn parse(args: Args<'a>) -> Result<Config<'a>, ErrorReply> {
        let sub = lookup_sub(&SPEC, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
        if !sub.arity_ok(args.len()) {
            return Err(wrong_arity(sub.name));
        }
        Ok(match sub.name {
            "config|get" => Config::Get(args.skip(2)),
            "config|help" => Config::Help,
            other => Config::Unsupported(other),
        })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        match self {
            Config::Get(patterns) => {
                let params = parameters(&session.ctx);
                let selected: Vec<_> = params
                    .iter()
                    .filter(|(name, _)| {
                        patterns.iter().any(|p| glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
                    })
                    .collect();
                out.map(selected.len());
                for (name, value) in selected {
                    out.bulk(name.as_bytes());
                    out.bulk(value.as_bytes());
                }
                Ok(())
            }
            Config::Help => {
                let lines = [
                    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GET <pattern>",
                    "    Return parameters matching the glob-like <pattern> and their values.",
                    "HELP",
                    "    Prints this help.",
                ];
                out.array(lines.len());
                for l in lines {
                    out.simple(l);
                }
                Ok(())
            }
            Config::Unsupported(name) => Err(ErrorReply::owned(format!(
                "ERR {} is not supported: Shoal's configuration is set when the server starts",
                name.replace('|', " ").to_ascii_uppercase()
            ))),
        }
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Config::parse(args)?.apply(session, out)
}
