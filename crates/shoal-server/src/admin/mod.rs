//! What the Redis front end's server commands watch and change while the
//! server runs: the registry of client connections (CLIENT LIST/KILL,
//! MONITOR), the slow log (SLOWLOG), the latency monitor (LATENCY) and the
//! settings CONFIG SET may change.
//!
//! Cost on the request path: a connection updates its own slot with
//! relaxed atomic stores; the slow log and the latency monitor take their
//! lock only for a command over their threshold; monitors are fed only
//! while one is connected (one atomic load per command otherwise). Nothing
//! here does I/O: connections read their mail in the connection driver.

pub mod clients;
pub mod latency;
pub mod settings;
pub mod slowlog;

use crate::config::ServerConfig;

/// The server's run-time administration state (`ServerContext::admin`).
pub struct Admin {
    pub clients: clients::ClientRegistry,
    pub slowlog: slowlog::SlowLog,
    pub latency: latency::LatencyMonitor,
    pub settings: settings::Settings,
}

impl Admin {
    pub fn new(config: &ServerConfig) -> Admin {
        Admin {
            clients: clients::ClientRegistry::default(),
            slowlog: slowlog::SlowLog::default(),
            latency: latency::LatencyMonitor::default(),
            settings: settings::Settings::new(config),
        }
    }
}
