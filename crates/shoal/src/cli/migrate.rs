//! `shoal migrate`: moves one tablet, or one range of chunk ids, to another
//! server while clients keep using it (`docs/migration.md`,
//! `docs/chunks.md`). Asks the coordinator to start the move, then follows
//! the cluster map until the move commits or aborts.

use super::{CliError, Common, REFUSED, UNREACHABLE, USAGE};
use clap::Args;
use serde_json::json;
use shoal_cluster::auth::ClusterSecret;
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::{ControlAuth, ControlError, ControlRequest, ControlResponse, CoordinatorAddrs, ServerId};
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
    if let (Some(node), Some(lo), Some(hi)) = (a.node, a.lo, a.hi) {
        let span = shoal_cluster::ChunkSpan { node, lo, hi };
        return run_chunks(a, coordinator, &auth, timeout, span);
    }
    let start =
        a.start.ok_or_else(|| usage("shoal migrate needs --start (a tablet) or --node, --lo and --hi".into()))?;
    let req =
        ControlRequest::StartMigration { table: a.table.clone(), start_hash: start, to: ServerId(a.to), chunks: None };
    let map = match control(coordinator, &auth, &req, timeout)? {
        ControlResponse::Map { map } => map,
        ControlResponse::Error { code, message } => return Err(refused(code, message)),
        other => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
    };
    let m = map
        .migrations
        .iter()
        .rev()
        .find(|m| m.start_hash == start && m.to == ServerId(a.to))
        .cloned()
        .ok_or_else(|| CliError::refused("protocol", "the coordinator's map has no record of the move"))?;
    let started = Instant::now();
    if a.no_wait {
        match a.common.json {
            true => out!("{}", json!({ "migration": m.id, "from": m.from.0, "to": m.to.0, "state": "started" })),
            false => out!(
                "migration {} started: table {} tablet {:#018x}..{:#018x}, server {} -> {}",
                m.id,
                a.table,
                m.start_hash,
                m.end_hash,
                m.from,
                m.to
            ),
        }
        return Ok(());
    }
    if !a.common.json {
        eprintln!(
            "migration {}: moving table {} tablet {:#018x}..{:#018x} from server {} to server {} ...",
            m.id, a.table, m.start_hash, m.end_hash, m.from, m.to
        );
    }
    let deadline = started + Duration::from_secs_f64(a.wait);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let map = match control(coordinator, &auth, &ControlRequest::GetMap, timeout) {
            Ok(ControlResponse::Map { map }) => map,
            // A coordinator failing over: its standby answers soon.
            Ok(_) | Err(_) if Instant::now() < deadline => continue,
            Ok(other) => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
            Err(e) => return Err(e),
        };
        if map.migrations.iter().any(|x| x.id == m.id) {
            if Instant::now() >= deadline {
                return Err(CliError::refused(
                    "timeout",
                    format!("migration {} is still in progress after {} s (it goes on)", m.id, a.wait),
                ));
            }
            continue;
        }
        let ms = started.elapsed().as_millis() as u64;
        let owner = map.tablet(m.table, KeyHash(m.start_hash)).map(|t| t.master);
        if owner == Some(m.to) {
            match a.common.json {
                true => out!(
                    "{}",
                    json!({ "migration": m.id, "from": m.from.0, "to": m.to.0, "state": "committed", "ms": ms })
                ),
                false => out!("migration {} committed in {ms} ms: the tablet is served by server {}", m.id, m.to),
            }
            return Ok(());
        }
        return Err(CliError::refused(
            "aborted",
            format!(
                "migration {} aborted after {ms} ms: the tablet stays with server {} (the source's log says why)",
                m.id,
                owner.map_or("?".to_string(), |o| o.to_string())
            ),
        ));
    }
}

/// `shoal migrate --node N --lo A --hi B`: the move of chunk ids `span`.
fn run_chunks(
    a: &MigrateArgs,
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    timeout: Duration,
    span: shoal_cluster::ChunkSpan,
) -> Result<(), CliError> {
    let req = ControlRequest::StartMigration {
        table: a.table.clone(),
        start_hash: 0,
        to: ServerId(a.to),
        chunks: Some(span),
    };
    let map = match control(coordinator, auth, &req, timeout)? {
        ControlResponse::Map { map } => map,
        ControlResponse::Error { code, message } => return Err(refused(code, message)),
        other => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
    };
    let m = map
        .chunk_migrations
        .iter()
        .rev()
        .find(|m| (m.node, m.lo, m.hi, m.to) == (span.node, span.lo, span.hi, ServerId(a.to)))
        .cloned()
        .ok_or_else(|| CliError::refused("protocol", "the coordinator's map has no record of the move"))?;
    let what = format!("chunk ids {}:{:#x}..={:#x} of table {}", m.node, m.lo, m.hi, a.table);
    let started = Instant::now();
    if a.no_wait {
        match a.common.json {
            true => out!("{}", json!({ "migration": m.id, "from": m.from.0, "to": m.to.0, "state": "started" })),
            false => out!("migration {} started: {what}, server {} -> {}", m.id, m.from, m.to),
        }
        return Ok(());
    }
    if !a.common.json {
        eprintln!("migration {}: moving {what} from server {} to server {} ...", m.id, m.from, m.to);
    }
    let deadline = started + Duration::from_secs_f64(a.wait);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let map = match control(coordinator, auth, &ControlRequest::GetMap, timeout) {
            Ok(ControlResponse::Map { map }) => map,
            Ok(_) | Err(_) if Instant::now() < deadline => continue,
            Ok(other) => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
            Err(e) => return Err(e),
        };
        if map.chunk_migrations.iter().any(|x| x.id == m.id) {
            if Instant::now() >= deadline {
                return Err(CliError::refused(
                    "timeout",
                    format!("migration {} is still in progress after {} s (it goes on)", m.id, a.wait),
                ));
            }
            continue;
        }
        let ms = started.elapsed().as_millis() as u64;
        let owner = map.chunk_owner(m.table, shoal_common::ChunkId::new(m.node, m.lo)).map(|r| r.master);
        if owner == Some(m.to) {
            match a.common.json {
                true => out!(
                    "{}",
                    json!({ "migration": m.id, "from": m.from.0, "to": m.to.0, "state": "committed", "ms": ms })
                ),
                false => out!("migration {} committed in {ms} ms: {what} are served by server {}", m.id, m.to),
            }
            return Ok(());
        }
        return Err(CliError::refused(
            "aborted",
            format!(
                "migration {} aborted after {ms} ms: {what} stay with server {} (the source's log says why)",
                m.id,
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
