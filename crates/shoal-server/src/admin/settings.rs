//! The settings CONFIG SET may change while the server runs, each an atomic
//! read where it is used. Their names, ranges and defaults are Redis's.

use crate::config::ServerConfig;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

pub struct Settings {
    /// Commands that take at least this many microseconds go to the slow
    /// log; negative: none.
    pub slowlog_slower_than: AtomicI64,
    /// Most entries the slow log keeps (see `slowlog::MAX_ENTRIES`).
    pub slowlog_max_len: AtomicU64,
    /// Commands that take at least this many milliseconds are latency
    /// samples; 0: the latency monitor is off.
    pub latency_threshold_ms: AtomicU64,
    /// Seconds without progress after which a client connection is closed;
    /// 0: never.
    pub timeout_secs: AtomicU64,
    /// Most client connections open at once (all front ends).
    pub max_clients: AtomicU64,
}

impl Settings {
    pub fn new(config: &ServerConfig) -> Settings {
        Settings {
            slowlog_slower_than: AtomicI64::new(10_000),
            slowlog_max_len: AtomicU64::new(128),
            latency_threshold_ms: AtomicU64::new(0),
            timeout_secs: AtomicU64::new(config.idle_timeout_secs),
            max_clients: AtomicU64::new(config.max_connections as u64),
        }
    }

    /// The idle timeout of client connections, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        let secs = self.timeout_secs.load(Ordering::Relaxed);
        (secs > 0).then(|| Duration::from_secs(secs))
    }

    pub fn max_clients(&self) -> u64 {
        self.max_clients.load(Ordering::Relaxed)
    }
}
