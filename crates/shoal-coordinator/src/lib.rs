//! Shoal's coordinator: the keeper of the cluster's configuration.
//!
//! It enlists servers, creates and drops tables, assigns their tablets to
//! masters, declares failed servers dead and plans their crash recovery
//! (`docs/recovery.md`), and hands out the versioned cluster map over the
//! control protocol (`shoal_cluster::control`, `docs/coordinator.md`). It
//! is never on the read or write path. Its state survives restarts: every change is
//! saved through a [`StateStore`] before it is answered.
//!
//! Layers, each seeing only the one below:
//! * [`Coordinator`] / [`run`] (`server.rs`): the control listener, one
//!   task per connection, shutdown;
//! * `service.rs`: answers requests, saves every change before publishing
//!   it, wakes long polls, checks suspected servers ([`probe`]) and times
//!   crash recoveries;
//! * [`state`]: the decision-making core, a pure state machine with no
//!   I/O ([`ClusterState`]), crash recovery planning included;
//! * [`store`]: durability ([`StateStore`], [`DirStore`]), or [`etcd`]:
//!   the state in etcd ([`EtcdStore`]) with leader election among several
//!   coordinators ([`Leadership`]); `run` then stands by until elected.
//!
//! Beside them, with `--metrics-port`: one HTTP listener (`http.rs`: the
//! routes, served by `shoal_http`'s bounded listener, as servers' are)
//! serving `/metrics` (`metrics.rs`, read from the service at scrape time)
//! and the dashboard (`dashboard/`), whose per-server figures come from
//! `sampler.rs` (each server's native STATS, polled once a second). None of
//! it reaches the state machine.

mod config;
mod dashboard;
pub mod etcd;
mod http;
pub mod lease;
pub mod local_etcd;
mod metrics;
pub mod probe;
mod rebalancer;
mod sampler;
mod server;
mod service;
pub mod state;
pub mod store;

pub use config::{CoordinatorArgs, CoordinatorConfig, CoordinatorError};
pub use etcd::{EtcdConfig, EtcdStore, Fence, Leadership};
pub use probe::ProbeConfig;
pub use server::{Coordinator, FRAME_TIMEOUT, MAX_ANONYMOUS_FRAME, MAX_REQUEST_FRAME, SHUTDOWN_GRACE, WRITE_TIMEOUT};
pub use service::{FINISHED_RECOVERIES_KEPT, MAX_WATCH};
pub use state::ClusterState;
pub use store::{DirStore, StateStore};

use std::sync::Arc;

/// Runs `shoal coordinator`: starts a coordinator from `args`, logs its
/// address, and serves until SIGINT or SIGTERM, then stops gracefully.
/// Errors: those of [`Coordinator::start`], a bad `--log-level`, or signal
/// handlers that cannot be installed.
pub async fn run(args: CoordinatorArgs) -> Result<(), CoordinatorError> {
    let config = CoordinatorConfig::try_from(args)?;
    init_logging(&config.log_level)?;
    // Install the handlers first, so that a signal right after start is not lost.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(CoordinatorError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(CoordinatorError::Signals)?;
    if let Some(etcd) = config.etcd.clone() {
        return run_elected(config, etcd, term, int).await;
    }
    let coordinator = Coordinator::start(config.clone()).await?;
    if config.secret.is_none() {
        tracing::warn!("running without a cluster secret (--insecure-no-secret): anyone who can reach {} can enlist servers, drop tables and have servers declared dead", config.listen);
    }
    tracing::info!(
        "shoal coordinator ready: control protocol on {} ({}), state in {}",
        coordinator.local_addr(),
        if config.internal_tls.is_some() { "mutual TLS" } else { "clear text" },
        config.data_dir.display()
    );
    if let Some(http) = coordinator.http_addr() {
        tracing::info!("shoal coordinator metrics on http://{http}/metrics, dashboard on http://{http}/");
    }
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!("{name} received");
    coordinator.shutdown();
    coordinator.wait().await;
    Ok(())
}

/// `shoal coordinator --etcd`: stands by until elected, leads until the
/// leadership is lost (then stands by again) or a signal comes (then
/// resigns, so that a standby takes over at once).
async fn run_elected(
    config: CoordinatorConfig,
    etcd: EtcdConfig,
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
) -> Result<(), CoordinatorError> {
    let endpoints = etcd.endpoints.join(",");
    let failed =
        |e: etcd_client::Error| CoordinatorError::Etcd { endpoints: endpoints.clone(), message: e.to_string() };
    if config.secret.is_none() {
        tracing::warn!("running without a cluster secret (--insecure-no-secret)");
    }
    // etcd may start after the coordinators (shoal local starts them together).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let client = loop {
        let connected = tokio::select! {
            c = etcd.connect() => c,
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        };
        match connected {
            Ok(c) => break c,
            Err(e) if std::time::Instant::now() >= deadline => return Err(failed(e)),
            Err(e) => {
                tracing::warn!("cannot reach etcd at {endpoints} yet ({e}); retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    };
    let me = config.listen.to_string();
    loop {
        tracing::info!("campaigning for leadership in etcd at {endpoints} ({}/leader) as {me}", etcd.prefix);
        let leadership = tokio::select! {
            l = etcd::Leadership::campaign(&client, &etcd, &me) => match l {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("etcd at {endpoints}: {e}; campaigning again in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            },
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        };
        let store = Arc::new(leadership.store());
        // The restart grace is for servers restarting with the whole
        // cluster; a takeover finds them running (a dead one stays dead).
        let mut config = config.clone();
        if leadership.took_over() {
            config.restart_grace = std::time::Duration::ZERO;
        }
        let coordinator = match Coordinator::start_fenced(config.clone(), store, Some(leadership.fence())).await {
            Ok(c) => c,
            // etcd failed under the load or the first save (it may be
            // down, or this coordinator deposed already): stand by again.
            Err(e @ (CoordinatorError::Load(_) | CoordinatorError::Save(_))) => {
                tracing::warn!("{e}; giving the leadership up and campaigning again in 1 s");
                leadership.resign().await;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => {
                // A damaged state or an address that cannot be bound: say
                // so and let a standby lead rather than hold the lease.
                leadership.resign().await;
                return Err(e);
            }
        };
        tracing::info!(
            "shoal coordinator leading: control protocol on {} ({}), state in etcd at {endpoints} under {} (term {})",
            coordinator.local_addr(),
            if config.internal_tls.is_some() { "mutual TLS" } else { "clear text" },
            etcd.prefix,
            leadership.revision()
        );
        if let Some(http) = coordinator.http_addr() {
            tracing::info!("shoal coordinator metrics on http://{http}/metrics, dashboard on http://{http}/");
        }
        let signal = tokio::select! {
            _ = leadership.lost() => None,
            _ = term.recv() => Some("SIGTERM"),
            _ = int.recv() => Some("SIGINT"),
        };
        coordinator.shutdown();
        coordinator.wait().await;
        match signal {
            Some(name) => {
                tracing::info!("{name} received; resigning the leadership");
                leadership.resign().await;
                return Ok(());
            }
            None => {
                tracing::error!("lost the leadership; stopped serving, standing by again");
                // Our key may still be there (a failed compare-and-swap
                // leaves the lease alive): free it rather than wait its TTL.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), leadership.resign()).await;
            }
        }
    }
}

/// Sends `tracing` output to stderr as plain lines (no colours), filtered by
/// `filter` (a level or a `tracing_subscriber` filter). Does nothing if a
/// subscriber is already installed.
pub fn init_logging(filter: &str) -> Result<(), CoordinatorError> {
    let parsed = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| CoordinatorError::LogLevel { level: filter.to_string(), message: e.to_string() })?;
    let _ = tracing_subscriber::fmt().with_env_filter(parsed).with_ansi(false).with_writer(std::io::stderr).try_init();
    Ok(())
}
