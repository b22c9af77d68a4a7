//! `shoal tablet list|split|merge`: a table's tablets as the coordinator's
//! map has them, and the map changes that cut one in two or join two
//! neighbours on one master (`docs/migration.md`, "Split and merge").

use super::migrate::control;
use super::{CliError, Common, USAGE};
use clap::{Args, Subcommand};
use serde_json::json;
use shoal_cluster::auth::ClusterSecret;
use shoal_cluster::{ClusterMap, ControlAuth, ControlRequest, ControlResponse};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum TabletCommand {
    /// Lists a table's tablets: first and last key hash, master.
    List(TabletArgs),
    /// Splits the tablet holding key hash --at into two, both on its
    /// master: [start, at - 1] and [at, end]. No data moves.
    Split(TabletAtArgs),
    /// Merges the tablet starting at key hash --at into the tablet just
    /// before it; both must be on one master (move one first with shoal
    /// migrate). No data moves.
    Merge(TabletAtArgs),
}

impl TabletCommand {
    pub fn common(&self) -> &Common {
        match self {
            TabletCommand::List(a) => &a.common,
            TabletCommand::Split(a) | TabletCommand::Merge(a) => &a.common,
        }
    }
}

#[derive(Args, Debug)]
pub struct TabletArgs {
    /// The table.
    #[arg(long, value_name = "NAME")]
    pub table: String,
    /// The cluster's secret, when it has one (not needed to list).
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct TabletAtArgs {
    /// The table.
    #[arg(long, value_name = "NAME")]
    pub table: String,
    /// The key hash, in hex (0x...) or decimal.
    #[arg(long, value_name = "HASH", value_parser = super::migrate::parse_hash)]
    pub at: u64,
    /// The cluster's secret (the coordinator's --cluster-secret-file),
    /// when it has one: changing the map needs it.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

/// Runs `shoal tablet ...`.
pub(super) fn run(cmd: &TabletCommand) -> Result<(), CliError> {
    let usage = |message: String| CliError { kind: "usage", message, code: USAGE };
    let common = cmd.common();
    let Some(coordinator) = &common.coordinator else {
        return Err(usage("shoal tablet needs --coordinator (the cluster's coordinator)".into()));
    };
    let tls = common.internal_tls().map_err(usage)?;
    let timeout = Duration::from_secs_f64(common.timeout);
    let (table, req, secret) = match cmd {
        TabletCommand::List(a) => (&a.table, ControlRequest::GetMap, a.cluster_secret_file.as_deref()),
        TabletCommand::Split(a) => (
            &a.table,
            ControlRequest::SplitTablet { table: a.table.clone(), at: a.at },
            a.cluster_secret_file.as_deref(),
        ),
        TabletCommand::Merge(a) => (
            &a.table,
            ControlRequest::MergeTablets { table: a.table.clone(), at: a.at },
            a.cluster_secret_file.as_deref(),
        ),
    };
    let secret =
        secret.map(ClusterSecret::load).transpose().map_err(|e| usage(format!("--cluster-secret-file: {e}")))?;
    let auth = ControlAuth { secret, identity: None, tls };
    let map = match control(coordinator, &auth, &req, timeout)? {
        ControlResponse::Map { map } => map,
        ControlResponse::Error { code, message } => return Err(super::migrate::refused(code, message)),
        other => return Err(CliError::refused("protocol", format!("the coordinator answered {other:?}"))),
    };
    print_tablets(&map, table, common.json)
}

fn print_tablets(map: &ClusterMap, table: &str, json: bool) -> Result<(), CliError> {
    let Some(info) = map.table_by_name(table) else {
        return Err(CliError::refused("not_found", format!("no table named '{table}'")));
    };
    let mut tablets: Vec<_> = map.tablets.iter().filter(|t| t.table == info.id).collect();
    tablets.sort_by_key(|t| t.start_hash);
    for t in tablets {
        let moving = map.migrations.iter().find(|m| m.table == t.table && m.start_hash == t.start_hash);
        if json {
            let mut o = json!({ "start": t.start_hash, "end": t.end_hash, "master": t.master.0 });
            if let Some(m) = moving {
                o["moving_to"] = json!(m.to.0);
            }
            out!("{o}");
        } else {
            let m = moving.map_or(String::new(), |m| format!(" (moving to server {})", m.to));
            out!("{:#018x} {:#018x} server {}{m}", t.start_hash, t.end_hash, t.master);
        }
    }
    Ok(())
}
