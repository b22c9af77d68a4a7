//! What the HTTP endpoints of Shoal's processes share (`/metrics` on every
//! server; `/metrics` and the dashboard on the coordinator;
//! `docs/observability.md`):
//!
//! * [`listener`]: serving an axum `Router` over HTTP/1.1 within bounds
//!   (connections, header size and count, time; GET and HEAD only, no
//!   request bodies; no-store/nosniff/CSP headers on every answer), so
//!   that the endpoint's network input never panics and holds bounded
//!   memory. The one listener of every process's HTTP port;
//! * [`prom`]: writing metrics in the Prometheus (OpenMetrics) text format
//!   at scrape time, from figures the process already keeps, through
//!   `prometheus-client`'s encoder.
//!
//! Each process keeps its own router and metrics (`shoal-server`'s and
//! `shoal-coordinator`'s `http.rs` and `metrics.rs`); nothing here knows
//! what they serve.

pub mod listener;
pub mod prom;

pub use listener::{bind, serve, Limits};
