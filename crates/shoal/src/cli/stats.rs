//! `shoal stats --coordinator`: the coordinator's statistics, then every
//! server of its cluster map, each asked for its STATS in parallel.
//!
//! Every server of the map gets a section: a server the map marks down is
//! listed as down (not asked), and a live one that does not answer within
//! --timeout is listed with the error. Neither makes the command fail: it
//! reports the cluster as it is.

use super::{client_config, print_stats, stats_json, CliError, Common, Target, UNREACHABLE, USAGE};
use serde_json::{json, Value};
use shoal_client::blocking::Client;
use shoal_client::{ClientConfig, Stats};
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::{ControlAuth, ControlRequest, ControlResponse, CoordinatorAddrs, ServerInfo, ServerState};
use std::io::Write;
use std::time::Duration;

/// What one server said.
enum Answer {
    /// The map marks it down: not asked.
    Down,
    Stats(Stats),
    /// Asked, and it did not answer (or refused).
    Failed(String),
}

/// Prints the cluster's statistics and every server's.
pub(super) fn cluster(coordinator: &CoordinatorAddrs, common: &Common) -> Result<(), CliError> {
    let timeout = Duration::from_secs_f64(common.timeout);
    let tls = common.internal_tls().map_err(|message| CliError { kind: "usage", message, code: USAGE })?;
    let auth = ControlAuth::anonymous_tls(tls);
    let stats = match control(coordinator, &auth, ControlRequest::Stats, timeout)? {
        ControlResponse::Stats { stats } => stats,
        other => return Err(unexpected(other)),
    };
    let map = match control(coordinator, &auth, ControlRequest::GetMap, timeout)? {
        ControlResponse::Map { map } => map,
        other => return Err(unexpected(other)),
    };
    let config = client_config(common)?;
    let mut servers = map.servers.clone();
    servers.sort_by_key(|s| s.id);
    let answers: Vec<Answer> = std::thread::scope(|scope| {
        let asks: Vec<_> = servers.iter().map(|s| scope.spawn(|| ask(s, &config))).collect();
        asks.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Answer::Failed("the query thread panicked".into())))
            .collect()
    });

    if common.json {
        out!("{}", json!({ "coordinator": stats }));
        for (s, answer) in servers.iter().zip(&answers) {
            let mut o = json!({ "server": s.id.0, "address": s.native.to_string(), "state": s.state });
            match answer {
                Answer::Down => {}
                Answer::Stats(stats) => o["stats"] = Value::Object(stats_json(stats)),
                Answer::Failed(e) => o["error"] = Value::from(e.as_str()),
            }
            out!("{o}");
        }
        return Ok(());
    }
    let count = |state| servers.iter().filter(|s| s.state == state).count();
    out!(
        "cluster (coordinator {coordinator}): {} servers ({} up, {} recovering, {} down)",
        servers.len(),
        count(ServerState::Up),
        count(ServerState::Recovering),
        count(ServerState::Down)
    );
    out!("{}", serde_json::to_string_pretty(&stats).unwrap_or_default());
    for (s, answer) in servers.iter().zip(&answers) {
        out!("");
        let state = state_name(s.state);
        match answer {
            Answer::Down => out!("server {} ({}): down (declared dead; not asked)", s.id, s.native),
            Answer::Failed(e) => out!("server {} ({}, {state}): not answering: {e}", s.id, s.native),
            Answer::Stats(stats) => {
                out!("server {} ({}, {state}):", s.id, s.native);
                print_stats(stats, false)?;
            }
        }
    }
    Ok(())
}

/// One server's statistics, on a connection of its own.
fn ask(s: &ServerInfo, config: &ClientConfig) -> Answer {
    if s.state == ServerState::Down {
        return Answer::Down;
    }
    let addr = s.native.to_string();
    let t = Target { server: &addr, table: "", key: None };
    match Client::with_config(s.native, config.clone()).and_then(|mut c| c.stats()) {
        Ok(stats) => Answer::Stats(stats),
        Err(e) => Answer::Failed(t.client(e).message),
    }
}

fn state_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Up => "up",
        ServerState::Recovering => "recovering",
        ServerState::Down => "down",
    }
}

/// One control request, over internal TLS when the flags give it.
fn control(
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    req: ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, CliError> {
    call_blocking_any(coordinator, auth, &req, timeout).map_err(|e| CliError {
        kind: "connection",
        message: format!("cannot reach the coordinator at {coordinator}: {e}"),
        code: UNREACHABLE,
    })
}

fn unexpected(other: ControlResponse) -> CliError {
    CliError::refused("protocol", format!("the coordinator answered {other:?}"))
}
