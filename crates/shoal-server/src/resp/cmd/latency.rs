//! LATENCY LATEST | HISTORY event | RESET [event ...] | HELP: the latency
//! monitor (`admin::latency`), as Redis 7 answers: LATEST is per event
//! [name, time of the latest sample, its milliseconds, the largest];
//! HISTORY the samples [time, milliseconds], oldest first; RESET the
//! number of events forgotten. Events: "command" and "fast-command"
//! (commands flagged `fast`), recorded while `latency-monitor-threshold`
//! is above 0. DOCTOR, GRAPH and HISTOGRAM are not supported.

use super::{help, lookup_sub, unknown_subcommand, wrong_arity, CommandSpec};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

const SUB: CommandSpec = CommandSpec {
    name: "latency|latest",
    arity: 2,
    flags: &["admin", "noscript", "loading", "stale"],
    acl: &["@admin", "@slow", "@dangerous"],
    tips: &["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"],
    group: "server",
    since: "2.8.13",
    summary: "Read the latest latency sample of every event",
    ..CommandSpec::BASE
};

pub static SPEC: CommandSpec = CommandSpec {
    name: "latency",
    arity: -2,
    acl: &["@slow"],
    group: "server",
    since: "2.8.13",
    summary: "A container for latency monitor commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        SUB,
        CommandSpec {
            name: "latency|history",
            syntax: "event",
            arity: 3,
            summary: "Read the latency samples of an event",
            ..SUB
        },
        CommandSpec {
            name: "latency|reset",
            syntax: "[event...]",
            arity: -2,
            tips: &["request_policy:all_nodes", "response_policy:agg_sum"],
            summary: "Forget the latency samples of some or all events",
            ..SUB
        },
        CommandSpec {
            name: "latency|help",
            flags: &["loading", "stale"],
            acl: &["@slow"],
            tips: &[],
            summary: "Show helpful text about the different subcommands",
            ..SUB
        },
    ],
    ..CommandSpec::BASE
};

enum Latency<'a> {
    Latest,
    History(&'a [u8]),
    Reset(Args<'a>),
    Help,
}

impl<'a> Latency<'a> {
    fn parse(args: Args<'a>) -> Result<Latency<'a>, ErrorReply> {
        let sub = lookup_sub(&SPEC, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
        if !sub.arity_ok(args.len()) {
            return Err(wrong_arity(sub.name));
        }
        Ok(match sub.name {
            "latency|latest" => Latency::Latest,
            "latency|history" => Latency::History(args.get(2)),
            "latency|reset" => Latency::Reset(args.skip(2)),
            _ => Latency::Help,
        })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        let monitor = &session.ctx.admin.latency;
        match self {
            Latency::Latest => {
                let all = monitor.all();
                out.array(all.len());
                for (event, h) in all {
                    let (time, ms) = h.samples.back().copied().unwrap_or_default();
                    out.array(4);
                    out.bulk(event.as_bytes());
                    out.int(time);
                    out.int(ms as i64);
                    out.int(h.max as i64);
                }
            }
            Latency::History(event) => {
                let samples = monitor.history(event).map(|h| h.samples).unwrap_or_default();
                out.array(samples.len());
                for (time, ms) in samples {
                    out.array(2);
                    out.int(time);
                    out.int(ms as i64);
                }
            }
            Latency::Reset(events) => {
                let n = if events.is_empty() {
                    monitor.reset(None)
                } else {
                    let names: Vec<&[u8]> = events.iter().collect();
                    monitor.reset(Some(&names))
                };
                out.int(n as i64);
            }
            Latency::Help => {
                let lines = [
                    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "HISTORY <event>",
                    "    Return time-latency samples for the <event> class.",
                    "LATEST",
                    "    Return the latest latency samples for all events.",
                    "RESET [<event> ...]",
                    "    Reset latency data of one or more <event> classes.",
                    "    (default: reset all data for all event classes)",
                    "HELP",
                    "    Prints this help.",
                ];
                help(out, &lines);
            }
        }
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Latency::parse(args)?.apply(session, out);
    Ok(())
}
