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
//! * [`store`]: durability ([`StateStore`], [`DirStore`]).
//!
//! Beside them, with `--metrics-port`: one HTTP listener (`http.rs`: the
//! routes, served by `shoal_http`'s bounded listener, as servers' are)
//! serving `/metrics` (`metrics.rs`, read from the service at scrape time)
//! and the dashboard (`dashboard/`), whose per-server figures come from
//! `sampler.rs` (each server's native STATS, polled once a second). None of
//! it reaches the state machine.

mod config;
mod dashboard;
mod http;
pub mod lease;
mod metrics;
pub mod probe;
mod sampler;
mod server;
mod service;
pub mod state;
pub mod store;

pub use config::{CoordinatorArgs, CoordinatorConfig, CoordinatorError};
pub use probe::ProbeConfig;
pub use server::{Coordinator, FRAME_TIMEOUT, MAX_ANONYMOUS_FRAME, MAX_REQUEST_FRAME, SHUTDOWN_GRACE, WRITE_TIMEOUT};
pub use service::{FINISHED_RECOVERIES_KEPT, MAX_WATCH};
pub use state::ClusterState;
pub use store::{DirStore, StateStore};

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

/// Sends `tracing` output to stderr as plain lines (no colours), filtered by
/// `filter` (a level or a `tracing_subscriber` filter). Does nothing if a
/// subscriber is already installed.
pub fn init_logging(filter: &str) -> Result<(), CoordinatorError> {
    let parsed = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| CoordinatorError::LogLevel { level: filter.to_string(), message: e.to_string() })?;
    let _ = tracing_subscriber::fmt().with_env_filter(parsed).with_ansi(false).with_writer(std::io::stderr).try_init();
    Ok(())
}
