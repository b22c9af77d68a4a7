//! Shoal's server: a master's store behind network front ends.
//!
//! * [`admin`]: what the server commands watch and change at run time:
//!   client connections, slow log, latency monitor, settings.
//! * [`auth`]: client authentication: users, passwords, checking them.
//! * [`config`]: [`ServerConfig`] (defaults, TOML file) and [`ServerArgs`]
//!   (the flags `shoal server` and `shoal local` flatten).
//! * [`context`]: [`ServerContext`], what every connection shares: the
//!   store, the table registry, statistics, the shutdown signal.
//! * [`server`]: [`Server`], its threads (two workers, each a single-threaded
//!   runtime serving its share of the connections: `workers`), listeners
//!   and graceful shutdown.
//! * [`budget`]: the bound on all client connections' buffers together.
//! * [`listener`]: accepting connections for a [`FrontEnd`], with the
//!   server-wide connection limit.
//! * [`resp`]: the Redis protocol front end.
//! * [`memcached`]: the memcached protocol front end (text and meta commands).
//! * `connection`: the connection driver both text front ends share.
//! * [`native`]: Shoal's native binary protocol front end.
//! * [`stream`]: what a front end serves a connection over, plain TCP or
//!   TLS ([`stream::ClientStream`]), and how either moves between workers.
//! * [`subscriptions`]: consumer names' group leases (one consumer per
//!   group, KerA's rule).
//! * [`tls`]: TLS on the client ports: certificates, the bounded handshake.
//! * [`metrics`]: the server's Prometheus metrics, gathered at scrape time,
//!   and the front ends' per-operation counters and latency histograms;
//!   [`http`]: the HTTP listener that serves them (`--metrics-port`).
//!
//! # Adding a front end
//!
//! A protocol is one module that implements [`FrontEnd`] (its name, the
//! bytes a refused connection gets, and `serve` for one connection, which
//! must stop reading and finish its replies once
//! `conn.ctx.shutdown_signal()` fires). To serve it, add a `bind` of its
//! address and one `tokio::spawn(listener::run(...))` in `server::serve`,
//! next to the RESP and native ones, and report its address in
//! [`Addresses`]. Front ends reach the store only through its public
//! operations, and create tables only through [`TableRegistry`], so that
//! the registry knows every table.

pub mod admin;
pub mod auth;
pub mod budget;
pub mod chunklocks;
pub mod cluster;
pub mod config;
mod connection;
pub mod context;
pub mod http;
pub mod lease;
pub mod listener;
pub mod load;
pub mod memcached;
pub mod metrics;
pub mod migrate;
pub mod native;
pub mod resp;
pub mod retention;
pub mod sc;
pub mod server;
mod spin;
pub mod stream;
pub mod subscriptions;
pub mod tls;
mod workers;

pub use config::{
    ByteSize, ConfigError, ReplicationMode, ServerArgs, ServerConfig, TlsAuthClients, DEFAULT_BACKUP_PORT,
    DEFAULT_MEMCACHED_PORT, DEFAULT_NATIVE_PORT, DEFAULT_RESP_PORT,
};
pub use context::{ServerContext, ServerStats, TableRegistry};
pub use listener::{Connection, FrontEnd};
pub use server::{init_logging, Addresses, Server, ServerError};
