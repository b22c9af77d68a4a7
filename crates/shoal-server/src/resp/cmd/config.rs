//! CONFIG GET pattern [pattern ...]: the matching parameters as a map of
//! name to value (RESP2: a flat array), enough for tools that ask (e.g.
//! redis-benchmark asks for "save" and "appendonly"). Values reflect the
//! server's real configuration.
//!
//! CONFIG SET name value [name value ...]: the settings that can change
//! while the server runs ([`SETTABLE`], `admin::settings`), all or none,
//! with Redis 7's checks and errors: an unknown name first, then a setting
//! fixed at start ("can't set immutable config") or named twice, then each
//! value's parse and range. REWRITE and RESETSTAT reply a clear error.

use super::{help, lookup_sub, unknown_subcommand, wrong_arity, CommandSpec};
use crate::config::ScSwitch;
use crate::context::ServerContext;
use crate::resp::db::DATABASES;
use crate::resp::frame::parse_i64;
use crate::resp::frame::Args;
use crate::resp::glob;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::Eviction;
use std::sync::atomic::Ordering::Relaxed;

const SUB: CommandSpec = CommandSpec {
    name: "config|get",
    syntax: "(parameter)...",
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
            syntax: "data=(parameter value)...",
            arity: -4,
            summary: "Set configuration parameters to the given values",
            ..SUB
        },
        CommandSpec { name: "config|rewrite", syntax: "", arity: 2, summary: "Rewrite the configuration file", ..SUB },
        CommandSpec {
            name: "config|resetstat",
            syntax: "",
            arity: 2,
            summary: "Reset the stats returned by INFO",
            ..SUB
        },
        CommandSpec {
            name: "config|help",
            syntax: "",
            arity: 2,
            flags: &["loading", "stale"],
            acl: &["@slow"],
            summary: "Show helpful text about the different subcommands",
            ..SUB
        },
    ],
    ..CommandSpec::BASE
};

/// The parameters CONFIG GET knows, in the order it lists them.
fn parameters(ctx: &ServerContext) -> Vec<(&'static str, String)> {
    let c = &ctx.config;
    let mut params = vec![
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
    ];
    // The settings CONFIG SET changes: their current values.
    params.retain(|(name, _)| !SETTABLE.iter().any(|s| s.name == *name));
    params.extend(SETTABLE.iter().map(|s| (s.name, s.value.show((s.get)(ctx)))));
    params
}

/// A setting CONFIG SET may change: its name, its values, and how it is
/// read and written (as an integer: the number, or the index of the name).
struct Settable {
    name: &'static str,
    value: Value,
    get: fn(&ServerContext) -> i64,
    set: fn(&ServerContext, i64),
}

/// What values a setting takes.
enum Value {
    /// An integer in Redis's range.
    Int { min: i64, max: i64 },
    /// One of these names (case-insensitive, as Redis's enums).
    OneOf(&'static [&'static str]),
}

impl Value {
    fn show(&self, v: i64) -> String {
        match self {
            Value::Int { .. } => v.to_string(),
            Value::OneOf(names) => names.get(v as usize).copied().unwrap_or("").to_string(),
        }
    }

    /// The value of `text`, or why not (Redis's words).
    fn parse(&self, text: &[u8]) -> Result<i64, String> {
        match *self {
            Value::Int { min, max } => {
                let v = parse_i64(text).ok_or("argument couldn't be parsed into an integer")?;
                if v < min || v > max {
                    return Err(format!("argument must be between {min} and {max} inclusive"));
                }
                Ok(v)
            }
            Value::OneOf(names) => names
                .iter()
                .position(|n| n.as_bytes().eq_ignore_ascii_case(text))
                .map(|i| i as i64)
                .ok_or_else(|| format!("argument(s) must be one of the following: {}", names.join(", "))),
        }
    }
}

/// `maxmemory-policy`'s names, in the order of [`Eviction`]'s index.
const POLICIES: &[&str] = &["noeviction", "allkeys-oldest"];

fn eviction_index(e: Eviction) -> i64 {
    match e {
        Eviction::None => 0,
        Eviction::Oldest => 1,
    }
}

static SETTABLE: &[Settable] = &[
    Settable {
        name: "maxmemory-policy",
        value: Value::OneOf(POLICIES),
        get: |ctx| eviction_index(ctx.store.eviction()),
        set: |ctx, v| ctx.store.set_eviction(if v == 1 { Eviction::Oldest } else { Eviction::None }),
    },
    Settable {
        name: "maxclients",
        value: Value::Int { min: 1, max: u32::MAX as i64 },
        get: |ctx| ctx.admin.settings.max_clients.load(Relaxed) as i64,
        set: |ctx, v| ctx.admin.settings.max_clients.store(v as u64, Relaxed),
    },
    Settable {
        name: "timeout",
        value: Value::Int { min: 0, max: i32::MAX as i64 },
        get: |ctx| ctx.admin.settings.timeout_secs.load(Relaxed) as i64,
        set: |ctx, v| {
            ctx.admin.settings.timeout_secs.store(v as u64, Relaxed);
            // Open connections re-read it.
            ctx.admin.clients.wake_all();
        },
    },
    Settable {
        name: "slowlog-log-slower-than",
        value: Value::Int { min: -1, max: i64::MAX },
        get: |ctx| ctx.admin.settings.slowlog_slower_than.load(Relaxed),
        set: |ctx, v| ctx.admin.settings.slowlog_slower_than.store(v, Relaxed),
    },
    Settable {
        name: "slowlog-max-len",
        value: Value::Int { min: 0, max: i64::MAX },
        get: |ctx| ctx.admin.settings.slowlog_max_len.load(Relaxed) as i64,
        set: |ctx, v| {
            ctx.admin.settings.slowlog_max_len.store(v as u64, Relaxed);
            ctx.admin.slowlog.trim(v as u64);
        },
    },
    Settable {
        name: "latency-monitor-threshold",
        value: Value::Int { min: 0, max: i64::MAX },
        get: |ctx| ctx.admin.settings.latency_threshold_ms.load(Relaxed) as i64,
        set: |ctx, v| ctx.admin.settings.latency_threshold_ms.store(v as u64, Relaxed),
    },
];

/// Checks every pair of CONFIG SET's arguments (name, value, ...) as Redis
/// does, and only then applies them all.
fn config_set(ctx: &ServerContext, pairs: Args<'_>) -> Result<(), ErrorReply> {
    if !pairs.len().is_multiple_of(2) {
        return Err(super::SYNTAX_ERROR);
    }
    let failed = |name: &[u8], why: &str| {
        ErrorReply::owned(
            [b"ERR CONFIG SET failed (possibly related to argument '".as_slice(), name, b"') - ", why.as_bytes()]
                .concat(),
        )
    };
    let fixed = parameters(ctx);
    let mut chosen: Vec<(&Settable, &[u8], &[u8])> = Vec::new();
    let mut refusal = None;
    for i in (0..pairs.len()).step_by(2) {
        let (name, value) = (pairs.get(i), pairs.get(i + 1));
        match SETTABLE.iter().find(|s| s.name.as_bytes().eq_ignore_ascii_case(name)) {
            Some(s) if chosen.iter().any(|(c, _, _)| std::ptr::eq(*c, s)) => {
                refusal = Some(failed(name, "duplicate parameter"));
            }
            Some(s) => chosen.push((s, name, value)),
            None if fixed.iter().any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name)) => {
                refusal = Some(failed(name, "can't set immutable config"));
            }
            None => {
                return Err(ErrorReply::owned(
                    [b"ERR Unknown option or number of arguments for CONFIG SET - '".as_slice(), name, b"'"].concat(),
                ))
            }
        }
    }
    if let Some(e) = refusal {
        return Err(e);
    }
    let mut values = Vec::with_capacity(chosen.len());
    for (s, name, value) in &chosen {
        values.push(s.value.parse(value).map_err(|why| failed(name, &why))?);
    }
    for ((s, name, _), v) in chosen.iter().zip(&values) {
        if s.name == "maxmemory-policy" && *v == eviction_index(Eviction::Oldest) && ctx.config.sc == ScSwitch::On {
            // An evicted hot key would stay readable from the copies on the
            // other servers of the group: eviction sends no invalidation.
            return Err(failed(name, "allkeys-oldest cannot be combined with symmetric caching (--sc on)"));
        }
    }
    for ((s, _, _), v) in chosen.iter().zip(values) {
        (s.set)(ctx, v);
    }
    Ok(())
}

enum Config<'a> {
    Get(Args<'a>),
    Set(Args<'a>),
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
            "config|set" => Config::Set(args.skip(2)),
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
            Config::Set(pairs) => {
                config_set(&session.ctx, pairs)?;
                out.ok();
                Ok(())
            }
            Config::Help => {
                let lines = [
                    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GET <pattern>",
                    "    Return parameters matching the glob-like <pattern> and their values.",
                    "SET <directive> <value>",
                    "    Set the configuration <directive> to <value>.",
                    "HELP",
                    "    Prints this help.",
                ];
                help(out, &lines);
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
