//! `shoal rebalance` and `shoal drain` (`docs/migration.md`, "Rebalancing
//! and drain"): ask the coordinator for a plan of tablet moves, print it,
//! and follow the job that runs it (the coordinator's `stats`,
//! `rebalance`) with a line or a bar per move until it ends.

use super::{CliError, Common, REFUSED, UNREACHABLE, USAGE};
use crate::progress::{Progress, Stream, Unit};
use clap::Args;
use indicatif::HumanBytes;
use serde_json::{json, Value};
use shoal_cluster::auth::ClusterSecret;
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::rebalance::{Load, Plan, Step};
use shoal_cluster::{
    ControlAuth, ControlError, ControlErrorCode, ControlRequest, ControlResponse, CoordinatorAddrs, ServerId,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags both commands share.
#[derive(Args, Debug)]
pub struct JobArgs {
    /// Print the plan and stop: nothing moves.
    #[arg(long)]
    pub dry_run: bool,
    /// Start the job and return once the plan is printed, instead of
    /// following it (`shoal stats --coordinator` shows its progress).
    #[arg(long)]
    pub no_wait: bool,
    /// Longest wait for the whole job, in seconds (the job goes on after).
    #[arg(long, default_value_t = 3600.0, value_name = "SECS")]
    pub wait: f64,
    /// The cluster's secret (the coordinator's --cluster-secret-file),
    /// when it has one: moving tablets needs it.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct RebalanceArgs {
    /// Move only this table's tablets (the memory of every table counts).
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
    #[command(flatten)]
    pub job: JobArgs,
}

// `--server` here is the drained server's id: the shared flag of that
// name (a server's address, unused with --coordinator) is renamed away.
#[derive(Args, Debug)]
#[command(mut_arg("server", |a| a.long("server-address").hide(true)))]
pub struct DrainArgs {
    /// The id of the server to empty (as shoal tablet list and shoal stats
    /// --coordinator show it).
    #[arg(long = "server", value_name = "SERVER_ID")]
    pub server_id: u64,
    /// Clear the server's draining mark instead: it may take tablets again
    /// (nothing moves back by itself; run shoal rebalance).
    #[arg(long, conflicts_with = "dry_run")]
    pub undo: bool,
    #[command(flatten)]
    pub job: JobArgs,
}

/// Runs `shoal rebalance`.
pub(super) fn rebalance(a: &RebalanceArgs) -> Result<(), CliError> {
    let req = ControlRequest::Rebalance { table: a.table.clone(), dry_run: a.job.dry_run };
    run(&a.job, req, None)
}

/// Runs `shoal drain`.
pub(super) fn drain(a: &DrainArgs) -> Result<(), CliError> {
    let req = ControlRequest::Drain { server: ServerId(a.server_id), dry_run: a.job.dry_run, undo: a.undo };
    run(&a.job, req, Some(ServerId(a.server_id)))
}

fn run(a: &JobArgs, req: ControlRequest, drained: Option<ServerId>) -> Result<(), CliError> {
    let usage = |message: String| CliError { kind: "usage", message, code: USAGE };
    let common = &a.common;
    let Some(coordinator) = &common.coordinator else {
        return Err(usage("this command needs --coordinator (the cluster's coordinator)".into()));
    };
    let tls = common.internal_tls().map_err(usage)?;
    let secret = a
        .cluster_secret_file
        .as_deref()
        .map(ClusterSecret::load)
        .transpose()
        .map_err(|e| usage(format!("--cluster-secret-file: {e}")))?;
    let auth = ControlAuth { secret, identity: None, tls };
    // Planning reads every server's STATS (up to 5 s each, in parallel).
    let timeout = Duration::from_secs_f64(common.timeout.max(15.0));
    let undo = matches!(req, ControlRequest::Drain { undo: true, .. });
    let (plan, job) = match call(coordinator, &auth, &req, timeout)? {
        ControlResponse::Plan { plan, job } => (plan, job),
        ControlResponse::Ok if undo => {
            let server = drained.expect("a drain");
            match common.json {
                true => out!("{}", json!({ "server": server.0, "draining": false })),
                false => out!("server {server} is no longer draining: it may take tablets again"),
            }
            return Ok(());
        }
        ControlResponse::Error { code, message } => return Err(refusal(code, message)),
        other => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
    };
    print_plan(&plan, job, common.json)?;
    let Some(job) = job else {
        if !common.json {
            match (drained, a.dry_run) {
                (Some(s), false) => out!("server {s} masters nothing: it can be stopped (it is marked draining)"),
                (_, true) => out!("dry run: nothing moved"),
                (None, false) => out!("the servers are balanced: nothing to move"),
            }
        }
        return Ok(());
    };
    if a.no_wait {
        if !common.json {
            out!("job {job} started; shoal stats --coordinator {coordinator} shows its progress");
        }
        return Ok(());
    }
    follow(coordinator, &auth, timeout, job, &plan, drained, a)
}

/// Follows job `job` in the coordinator's `stats` until it ends; a line
/// per move (a bar on a terminal), then the outcome.
fn follow(
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    timeout: Duration,
    job: u64,
    plan: &Plan,
    drained: Option<ServerId>,
    a: &JobArgs,
) -> Result<(), CliError> {
    let json = a.common.json;
    let moves_of =
        |p: &Plan| -> Vec<Step> { p.steps.iter().filter(|s| matches!(s, Step::Move { .. })).cloned().collect() };
    let mut planned = plan.clone();
    let mut moves = moves_of(plan);
    let progress = if json { None } else { Some(Progress::new(Stream::Stderr)) };
    let task = progress.as_ref().map(|p| p.task(format!("job {job}"), Some(moves.len() as u64), Unit::Count("moves")));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(a.wait);
    let (mut shown_start, mut shown_done) = (0usize, 0usize);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let stats = match call(coordinator, auth, &ControlRequest::Stats, timeout) {
            Ok(ControlResponse::Stats { stats }) => stats,
            // A coordinator failing over: its standby answers soon.
            _ if Instant::now() < deadline => continue,
            Ok(other) => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
            Err(e) => return Err(e),
        };
        let j = &stats["rebalance"];
        // A coordinator that took over plans the saved job again (under its
        // id) once the move in flight has ended.
        let saved = stats["rebalance_job"]["id"].as_u64() == Some(job);
        if j["id"].as_u64() != Some(job) && saved && Instant::now() < deadline {
            continue;
        }
        if j["id"].as_u64() != Some(job) {
            return Err(CliError::refused(
                "lost",
                format!(
                    "the coordinator no longer knows job {job} (it restarted or failed over): run the command again"
                ),
            ));
        }
        if let Ok(now) = serde_json::from_value::<Plan>(j["plan"].clone()) {
            if now != planned {
                moves = moves_of(&now);
                planned = now;
                (shown_start, shown_done) = (0, 0);
                if let Some(p) = &progress {
                    p.println(&format!(
                        "the coordinator failed over: job {job} was planned again from the map, {} moves",
                        moves.len()
                    ));
                }
                if let Some(t) = &task {
                    t.set_total(moves.len() as u64);
                    t.set_position(0);
                }
            }
        }
        let done = j["moves_done"].as_u64().unwrap_or(0) as usize;
        let current = j["current"]["number"].as_u64().map(|n| n as usize);
        let describe = |n: usize| {
            match moves.get(n - 1) {
            Some(Step::Move { name, start_hash, end_hash, from, to, bytes, objects, .. }) => format!(
                "table {name} tablet {start_hash:#018x}..{end_hash:#018x}, server {from} -> {to} (about {}, {objects} objects)",
                HumanBytes(*bytes)
            ),
            _ => String::new(),
        }
        };
        while shown_done < done {
            shown_done += 1;
            let ms = j["move_ms"][shown_done - 1].as_u64().unwrap_or(0);
            if let Some(p) = &progress {
                let what =
                    if shown_start >= shown_done { String::new() } else { format!("{}: ", describe(shown_done)) };
                p.println(&format!(
                    "move {shown_done}/{}: {what}committed in {ms} ms, {:.1} s into the job",
                    moves.len(),
                    started.elapsed().as_secs_f64()
                ));
            }
            shown_start = shown_start.max(shown_done);
            if let Some(t) = &task {
                t.set_message("");
                t.set_position(shown_done as u64);
            }
        }
        if let Some(n) = current.filter(|n| *n > shown_start) {
            shown_start = n;
            if let Some(p) = &progress {
                p.println(&format!("move {n}/{}: {} ...", moves.len(), describe(n)));
            }
            if let Some(t) = &task {
                t.set_message(format!("moving {n}"));
            }
        }
        match j["state"].as_str() {
            Some("running") if Instant::now() < deadline => continue,
            Some("running") => {
                return Err(CliError::refused(
                    "timeout",
                    format!("job {job} is still running after {} s (it goes on)", a.wait),
                ))
            }
            Some("done") => {
                if let Some(t) = task {
                    t.finish("done");
                }
                return print_done(j, plan, drained, json);
            }
            _ => {
                if let Some(t) = task {
                    t.finish("stopped");
                }
                let why = j["error"].as_str().unwrap_or("no reason given");
                return Err(CliError::refused("failed", format!("job {job} stopped after {done} moves: {why}")));
            }
        }
    }
}

fn print_plan(plan: &Plan, job: Option<u64>, json: bool) -> Result<(), CliError> {
    if json {
        out!("{}", json!({ "plan": plan, "job": job }));
        return Ok(());
    }
    let splits = plan.steps.len() - plan.moves() - plan.merges();
    let bytes: u64 = plan.steps.iter().map(|s| if let Step::Move { bytes, .. } = s { *bytes } else { 0 }).sum();
    out!(
        "plan: {} moves, {splits} splits and {} merges, about {} to move; spread across servers (estimated): \
         memory {} -> {}, load {} -> {} ops/s",
        plan.moves(),
        plan.merges(),
        HumanBytes(bytes),
        HumanBytes(Plan::spread(&plan.before)),
        HumanBytes(Plan::spread(&plan.after)),
        Plan::ops_spread(&plan.before),
        Plan::ops_spread(&plan.after)
    );
    let mut n = 0;
    for s in &plan.steps {
        match s {
            Step::Split { name, at, master, .. } => out!("  split  table {name} at {at:#018x} (server {master})"),
            Step::Merge { name, at, master, .. } => out!("  merge  table {name} at {at:#018x} (server {master})"),
            Step::Move { name, start_hash, end_hash, from, to, bytes, objects, .. } => {
                n += 1;
                out!(
                    "  move {n:>3}  table {name} {start_hash:#018x}..{end_hash:#018x}  server {from} -> {to}  about {}, {objects} objects",
                    HumanBytes(*bytes)
                );
            }
        }
    }
    for (b, a) in plan.before.iter().zip(&plan.after) {
        out!(
            "  server {:>3}: {:>11} -> {:>11}   {:>8} -> {:>8} ops/s",
            b.server,
            HumanBytes(b.bytes).to_string(),
            HumanBytes(a.bytes).to_string(),
            b.ops,
            a.ops
        );
    }
    if let Some(job) = job {
        out!("job {job} runs the plan, one move at a time");
    }
    Ok(())
}

fn print_done(j: &Value, plan: &Plan, drained: Option<ServerId>, json: bool) -> Result<(), CliError> {
    let after: Option<Vec<Load>> = serde_json::from_value(j["after"].clone()).ok();
    let elapsed = j["elapsed_ms"].as_u64().unwrap_or(0);
    let before_spread = Plan::spread(&plan.before);
    let after_spread = after.as_deref().map(Plan::spread);
    let before_ops = Plan::ops_spread(&plan.before);
    let after_ops = after.as_deref().map(Plan::ops_spread);
    if json {
        out!(
            "{}",
            json!({
                "job": j["id"], "state": "done", "elapsed_ms": elapsed, "steps_ms": j["steps_ms"], "moves": j["moves_done"],
                "bytes_moved": j["bytes_moved"], "objects_moved": j["objects_moved"],
                "before": plan.before, "after": after,
                "spread_before": before_spread, "spread_after": after_spread,
                "ops_spread_before": before_ops, "ops_spread_after": after_ops,
            })
        );
        return Ok(());
    }
    out!(
        "job {} done in {:.1} s ({:.1} s of moves, then measuring): {} moves, about {} and {} objects moved",
        j["id"],
        elapsed as f64 / 1000.0,
        j["steps_ms"].as_u64().unwrap_or(elapsed) as f64 / 1000.0,
        j["moves_done"],
        HumanBytes(j["bytes_moved"].as_u64().unwrap_or(0)),
        j["objects_moved"]
    );
    if let Some(d) = drained {
        out!("server {d} masters nothing now: it can be stopped (it stays marked draining)");
        for l in after.iter().flatten() {
            out!("  server {:>3}: {:>11} {:>8} ops/s (measured)", l.server, HumanBytes(l.bytes).to_string(), l.ops);
        }
        return Ok(());
    }
    if let Some(after) = &after {
        for b in &plan.before {
            let Some(a) = after.iter().find(|a| a.server == b.server) else { continue };
            out!(
                "  server {:>3}: {:>11} -> {:>11}   {:>8} -> {:>8} ops/s (measured)",
                b.server,
                HumanBytes(b.bytes).to_string(),
                HumanBytes(a.bytes).to_string(),
                b.ops,
                a.ops
            );
        }
    }
    match after_spread {
        Some(s) => out!(
            "spread across servers: memory {} before, {} after; load {before_ops} before, {} ops/s after (measured)",
            HumanBytes(before_spread),
            HumanBytes(s),
            after_ops.unwrap_or(0)
        ),
        None => out!("spread of memory across servers: {} before (after: not measured)", HumanBytes(before_spread)),
    }
    Ok(())
}

fn refusal(code: ControlErrorCode, message: String) -> CliError {
    let kind = match code {
        ControlErrorCode::NotFound => "not_found",
        ControlErrorCode::Unauthorized => "unauthorized",
        _ => "refused",
    };
    CliError { kind, message: format!("the coordinator refused: {message}"), code: REFUSED }
}

/// One control request; a refusal becomes [`refusal`]'s error, an
/// unreachable coordinator exit code 3.
fn call(
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, CliError> {
    match call_blocking_any(coordinator, auth, req, timeout) {
        Ok(r) => Ok(r),
        Err(ControlError::Refused { code, message }) => Err(refusal(code, message)),
        Err(e) => Err(CliError { kind: "connection", message: e.to_string(), code: UNREACHABLE }),
    }
}
