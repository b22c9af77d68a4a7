//! `shoal migrate`: moves one tablet, or one range of chunk ids, to another
//! server while clients keep using it (`docs/migration.md`,
//! `docs/chunks.md`). Asks the coordinator to start the move, then follows
//! the cluster map until the move commits or aborts.

use super::{CliError, Common, REFUSED, UNREACHABLE, USAGE};
use clap::Args;
use serde_json::json;
use shoal_cluster::auth::ClusterSecret;
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::{
    ClusterMap, ControlAuth, ControlError, ControlRequest, ControlResponse, CoordinatorAddrs, ServerId,
};
use shoal_common::KeyHash;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The table whose tablet (or, for a chunk table, whose chunk ids)
    /// moves.
    #[arg(long, value_name = "NAME")]
    pub table: String,
    /// The tablet's first key hash, in hex (0x...) or decimal, as `shoal
    /// tablet list` prints it (the error for a wrong one lists the
    /// table's tablet starts too). Not with --node.
    #[arg(long, value_name = "HASH", value_parser = parse_hash, required_unless_present = "node", conflicts_with = "node")]
    pub start: Option<u64>,
    /// Moves chunk ids of a chunk table instead of a tablet: those of this
    /// node id (the server id that created them, the top 16 bits of a chunk
    /// id), with local ids --lo..=--hi. They must lie in one range of one
    /// server (a part of one is split off).
    #[arg(long, value_name = "NODE", requires_all = ["lo", "hi"])]
    pub node: Option<u16>,
    /// First local id of the chunk ids that move (with --node), in hex
    /// (0x...) or decimal.
    #[arg(long, value_name = "LOCAL", value_parser = parse_local, requires = "node")]
    pub lo: Option<u64>,
    /// Last local id of the chunk ids that move (with --node); 0xffffffffffff
    /// is the last there is.
    #[arg(long, value_name = "LOCAL", value_parser = parse_local, requires = "node")]
    pub hi: Option<u64>,
    /// The id of the server to move it to (an up server other than its
    /// master).
    #[arg(long, value_name = "SERVER_ID")]
    pub to: u64,
    /// Start the move and return at once, printing its id, instead of
    /// waiting for it to commit or abort.
    #[arg(long)]
    pub no_wait: bool,
    /// Longest wait for the move to finish, in seconds.
    #[arg(long, default_value_t = 600.0, value_name = "SECS")]
    pub wait: f64,
    /// The cluster's secret (the coordinator's --cluster-secret-file),
    /// when it has one: starting a move needs it.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

pub(super) fn parse_hash(s: &str) -> Result<u64, String> {
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    n.map_err(|e| format!("not a 64-bit key hash ({e}): give it in hex (0x...) or decimal"))
}

fn parse_local(s: &str) -> Result<u64, String> {
    parse_hash(s).map_err(|_| {
        format!(
            "not a local chunk id: give it in hex (0x...) or decimal, at most {:#x}",
            shoal_common::ChunkId::MAX_LOCAL
        )
    })
}

/// Runs `shoal migrate`.
pub(super) fn run(a: &MigrateArgs) -> Result<(), CliError> {
    let usage = |message: String| CliError { kind: "usage", message, code: USAGE };
    let Some(coordinator) = &a.common.coordinator else {
        return Err(usage("shoal migrate needs --coordinator (the cluster's coordinator)".into()));
    };
    let tls = a.common.internal_tls().map_err(usage)?;
    let secret = a
        .cluster_secret_file
        .as_deref()
        .map(ClusterSecret::load)
        .transpose()
        .map_err(|e| usage(format!("--cluster-secret-file: {e}")))?;
    let auth = ControlAuth { secret, identity: None, tls };
    let timeout = Duration::from_secs_f64(a.common.timeout);
    let moving = match (a.node, a.lo, a.hi) {
        (Some(node), Some(lo), Some(hi)) => {
            start_chunk_move(a, coordinator, &auth, timeout, shoal_cluster::ChunkSpan { node, lo, hi })?
        }
        _ => {
            let start = a
                .start
                .ok_or_else(|| usage("shoal migrate needs --start (a tablet) or --node, --lo and --hi".into()))?;
            start_tablet_move(a, coordinator, &auth, timeout, start)?
        }
    };
    follow(a, coordinator, &auth, timeout, moving)
}

/// A move the coordinator recorded: its id and servers, what moves (for
/// messages), whether a map still has it, and who serves it in a map.
struct Moving {
    id: u64,
    from: ServerId,
    to: ServerId,
    what: String,
    in_progress: Box<dyn Fn(&ClusterMap) -> bool>,
    owner: Box<Owner>,
}

/// Who serves what moves, in a map.
type Owner = dyn Fn(&ClusterMap) -> Option<ServerId>;

/// Asks the coordinator for `req`; the map it answers with.
fn start(
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ClusterMap, CliError> {
    match control(coordinator, auth, req, timeout)? {
        ControlResponse::Map { map } => Ok(map),
        ControlResponse::Error { code, message } => Err(refused(code, message)),
        other => Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
    }
}

fn no_record() -> CliError {
    CliError::refused("protocol", "the coordinator's map has no record of the move")
}

/// Starts the move of `a.table`'s tablet at `start`.
fn start_tablet_move(
    a: &MigrateArgs,
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    timeout: Duration,
    start_hash: u64,
) -> Result<Moving, CliError> {
    let to = ServerId(a.to);
    let req = ControlRequest::StartMigration { table: a.table.clone(), start_hash, to, chunks: None };
    let map = start(coordinator, auth, &req, timeout)?;
    let m = map
        .migrations
        .iter()
        .rev()
        .find(|m| m.start_hash == start_hash && m.to == to)
        .cloned()
        .ok_or_else(no_record)?;
    let (id, table) = (m.id, m.table);
    Ok(Moving {
        id,
        from: m.from,
        to,
        what: format!("table {} tablet {:#018x}..{:#018x}", a.table, m.start_hash, m.end_hash),
        in_progress: Box::new(move |map| map.migrations.iter().any(|x| x.id == id)),
        owner: Box::new(move |map| map.tablet(table, KeyHash(start_hash)).map(|t| t.master)),
    })
}

/// Starts the move of chunk ids `span` of `a.table`.
fn start_chunk_move(
    a: &MigrateArgs,
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    timeout: Duration,
    span: shoal_cluster::ChunkSpan,
) -> Result<Moving, CliError> {
    let to = ServerId(a.to);
    let req = ControlRequest::StartMigration { table: a.table.clone(), start_hash: 0, to, chunks: Some(span) };
    let map = start(coordinator, auth, &req, timeout)?;
    let m = map
        .chunk_migrations
        .iter()
        .rev()
        .find(|m| (m.node, m.lo, m.hi, m.to) == (span.node, span.lo, span.hi, to))
        .cloned()
        .ok_or_else(no_record)?;
    let (id, table, first) = (m.id, m.table, shoal_common::ChunkId::new(m.node, m.lo));
    Ok(Moving {
        id,
        from: m.from,
        to,
        what: format!("chunk ids {}:{:#x}..={:#x} of table {}", m.node, m.lo, m.hi, a.table),
        in_progress: Box::new(move |map| map.chunk_migrations.iter().any(|x| x.id == id)),
        owner: Box::new(move |map| map.chunk_owner(table, first).map(|r| r.master)),
    })
}

/// Follows `m` in the coordinator's map until it commits (Ok) or aborts,
/// printing the outcome (or, with `--no-wait`, that it started).
fn follow(
    a: &MigrateArgs,
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    timeout: Duration,
    m: Moving,
) -> Result<(), CliError> {
    let started = Instant::now();
    if a.no_wait {
        match a.common.json {
            true => out!("{}", json!({ "migration": m.id, "from": m.from.0, "to": m.to.0, "state": "started" })),
            false => out!("migration {} started: {}, server {} -> {}", m.id, m.what, m.from, m.to),
        }
        return Ok(());
    }
    if !a.common.json {
        eprintln!("migration {}: moving {} from server {} to server {} ...", m.id, m.what, m.from, m.to);
    }
    let deadline = started + Duration::from_secs_f64(a.wait);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let map = match control(coordinator, auth, &ControlRequest::GetMap, timeout) {
            Ok(ControlResponse::Map { map }) => map,
            // A coordinator failing over: its standby answers soon.
            Ok(_) | Err(_) if Instant::now() < deadline => continue,
            Ok(other) => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
            Err(e) => return Err(e),
        };
        if (m.in_progress)(&map) {
            if Instant::now() >= deadline {
                return Err(CliError::refused(
                    "timeout",
                    format!("migration {} is still in progress after {} s (it goes on)", m.id, a.wait),
                ));
            }
            continue;
        }
        let ms = started.elapsed().as_millis() as u64;
        let owner = (m.owner)(&map);
        if owner == Some(m.to) {
            match a.common.json {
                true => out!(
                    "{}",
                    json!({ "migration": m.id, "from": m.from.0, "to": m.to.0, "state": "committed", "ms": ms })
                ),
                false => out!("migration {} committed in {ms} ms: {} served by server {}", m.id, m.what, m.to),
            }
            return Ok(());
        }
        return Err(CliError::refused(
            "aborted",
            format!(
                "migration {} aborted after {ms} ms: {} stays with server {} (the source's log says why)",
                m.id,
                m.what,
                owner.map_or("?".to_string(), |o| o.to_string())
            ),
        ));
    }
}

pub(super) fn control(
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, CliError> {
    match call_blocking_any(coordinator, auth, req, timeout) {
        Ok(r) => Ok(r),
        Err(ControlError::Refused { code, message }) => Err(refused(code, message)),
        // A connection error already names the address it tried.
        Err(e @ ControlError::Connect { .. }) => {
            Err(CliError { kind: "connection", message: e.to_string(), code: UNREACHABLE })
        }
        Err(e) => Err(CliError {
            kind: "connection",
            message: format!("the coordinator at {coordinator} did not answer: {e}"),
            code: UNREACHABLE,
        }),
    }
}

pub(super) fn refused(code: shoal_cluster::ControlErrorCode, message: String) -> CliError {
    let kind = match code {
        shoal_cluster::ControlErrorCode::NotFound => "not_found",
        shoal_cluster::ControlErrorCode::Unauthorized => "unauthorized",
        _ => "refused",
    };
    CliError { kind, message: format!("the coordinator refused the move: {message}"), code: REFUSED }
}
