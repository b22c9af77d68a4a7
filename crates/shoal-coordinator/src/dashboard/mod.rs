//! The dashboard (`docs/observability.md`, "Dashboard"): one page and the
//! two JSON documents it polls, served on the coordinator's HTTP listener
//! (`http.rs`).
//!
//! * `/` with `/dashboard.js` and `/dashboard.css`: files embedded in the
//!   binary (`include_str!`), no build step; the page draws its charts
//!   itself (canvas), and asks for everything below once a second.
//! * `/api/cluster`: the map (servers, states, tablets per server and per
//!   table), each server's latest sample ([`Sampler`]), replication
//!   health, suspects being checked, recoveries under way with their
//!   phases and progress, finished recoveries and the last failures.
//! * `/api/history?since=MS`: per server, the samples taken after `since`
//!   (ms since the Unix epoch; all of the last five minutes without it),
//!   as rates and fractions ready to plot.
//!
//! Every figure comes from the coordinator's state or from the servers'
//! own STATS; what is unknown is `null`, never made up.

use crate::sampler::{Sample, Sampler, ServerHistory};
use crate::service::{Observed, Service};
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use shoal_cluster::map::{ClusterMap, ServerId, ServerState};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("index.html");
const DASHBOARD_JS: &str = include_str!("dashboard.js");
const DASHBOARD_CSS: &str = include_str!("dashboard.css");

/// What the dashboard's handlers read.
#[derive(Clone)]
pub(crate) struct Dashboard {
    pub service: Arc<Service>,
    pub sampler: Arc<Sampler>,
    /// The control protocol's address, shown on the page.
    pub control: SocketAddr,
}

/// The dashboard's routes.
pub(crate) fn routes(dashboard: Dashboard) -> Router {
    Router::new()
        .route("/", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML) }))
        .route(
            "/dashboard.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], DASHBOARD_JS) }),
        )
        .route("/dashboard.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], DASHBOARD_CSS) }))
        .route("/api/cluster", get(api_cluster))
        .route("/api/history", get(api_history))
        .with_state(dashboard)
}

async fn api_cluster(State(d): State<Dashboard>) -> impl IntoResponse {
    Json(cluster_view(&d.service.observe(), &d.sampler.snapshot(), d.control, crate::sampler::unix_ms()))
}

#[derive(serde::Deserialize)]
struct HistoryQuery {
    since: Option<u64>,
}

async fn api_history(State(d): State<Dashboard>, Query(q): Query<HistoryQuery>) -> impl IntoResponse {
    Json(history_view(&d.service.map(), &d.sampler.snapshot(), q.since.unwrap_or(0)))
}

/// Store operations per second between two samples of one server; `None`
/// if either has no statistics, or the counters went back (a restart).
fn ops_per_sec(a: &Sample, b: &Sample) -> Option<f64> {
    let (x, y) = (a.stats.as_ref()?, b.stats.as_ref()?);
    let ops = |s: &crate::sampler::ServerStats| s.reads + s.writes + s.removes;
    let dt = b.unix_ms.checked_sub(a.unix_ms).filter(|&d| d > 0)? as f64 / 1000.0;
    Some(ops(y).checked_sub(ops(x))? as f64 / dt)
}

/// Fraction of the server's memory (seglets) in use by its log.
fn memory_used(s: &crate::sampler::ServerStats) -> Option<f64> {
    (s.seglets_total > 0).then(|| s.seglets_in_use as f64 / s.seglets_total as f64)
}

/// `/api/cluster` (see the module comment).
fn cluster_view(o: &Observed, samples: &BTreeMap<ServerId, ServerHistory>, control: SocketAddr, now_ms: u64) -> Value {
    let map: &ClusterMap = &o.map;
    let table_name = |id| map.tables.iter().find(|t| t.id == id).map(|t| t.name.clone());
    let latest = |id: &ServerId| samples.get(id).and_then(|h| h.samples.back());
    let servers: Vec<Value> = map
        .servers
        .iter()
        .map(|s| {
            let h = samples.get(&s.id);
            let last = latest(&s.id);
            let ops = h.and_then(|h| {
                let n = h.samples.len();
                (n >= 2).then(|| ops_per_sec(&h.samples[n - 2], &h.samples[n - 1])).flatten()
            });
            let mut per_table: BTreeMap<u64, u64> = BTreeMap::new();
            for t in map.tablets_of(s.id) {
                *per_table.entry(t.table.0).or_default() += 1;
            }
            let tables: Vec<Value> = per_table
                .iter()
                .map(|(t, n)| json!({"table": t, "name": table_name(shoal_common::TableId(*t)), "tablets": n}))
                .collect();
            // Pieces it is replaying for recoveries (not yet its tablets).
            let recovering: usize = map
                .recoveries
                .iter()
                .flat_map(|r| &r.partitions)
                .filter(|p| p.master == s.id && !p.done)
                .map(|p| p.tablets.len())
                .sum();
            json!({
                "id": s.id,
                "state": s.state,
                "native": s.native,
                "resp": s.resp,
                "backup": s.backup,
                "log": s.log.0,
                "tablets": map.tablets_of(s.id).count(),
                "tables": tables,
                "pieces_recovering": recovering,
                "polled_unix_ms": last.map(|x| x.unix_ms),
                "ping_us": last.and_then(|x| x.ping_us),
                "ops_per_sec": ops,
                "memory_used": last.and_then(|x| x.stats.as_ref()).and_then(memory_used),
                "stats": last.and_then(|x| x.stats.as_ref()),
                "stats_error": h.and_then(|h| h.error.clone()),
            })
        })
        .collect();
    let tables: Vec<Value> = map
        .tables
        .iter()
        .map(|t| {
            let tablets: Vec<Value> = map
                .tablets
                .iter()
                .filter(|x| x.table == t.id)
                .map(|x| json!({"start_hash": x.start_hash.to_string(), "end_hash": x.end_hash.to_string(),
                                "start": x.start_hash as f64 / u64::MAX as f64, "end": x.end_hash as f64 / u64::MAX as f64,
                                "master": x.master}))
                .collect();
            json!({"id": t.id.0, "name": t.name, "tablets": tablets})
        })
        .collect();

    // Replication health, from the live servers' own counts.
    let live = map.servers.iter().filter(|s| s.state != ServerState::Down);
    let reporting: Vec<&crate::sampler::ServerStats> =
        live.clone().filter_map(|s| latest(&s.id).and_then(|x| x.stats.as_ref())).collect();
    let replication = json!({
        "replicas": map.replicas,
        "live_servers": live.count(),
        "servers_reporting": reporting.len(),
        "segments_below_r": reporting.iter().map(|s| s.closed_segments_below_r).sum::<u64>(),
        "durable_lag_bytes": reporting.iter().map(|s| s.durable_lag).sum::<u64>(),
        "fenced_logs": map.fenced.iter().filter(|f| !f.free).count(),
        "replica_floors": map.replica_floors.len(),
    });

    let recoveries: Vec<Value> = map
        .recoveries
        .iter()
        .map(|r| {
            let times = o.running.iter().find(|t| t.id == r.id);
            let done = r.partitions.iter().filter(|p| p.done).count();
            let partitions: Vec<Value> = r
                .partitions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    // What the recovery master's STATS says of this partition.
                    let replayed = latest(&p.master)
                        .and_then(|x| x.stats.as_ref())
                        .and_then(|s| s.partitions.iter().find(|q| q.recovery == r.id && q.partition == i as u32));
                    json!({
                        "index": i,
                        "master": p.master,
                        "tablets": p.tablets.len(),
                        "done": p.done,
                        "done_after_ms": times.and_then(|t| t.done_ms.get(&(i as u32))),
                        "replayed": replayed,
                    })
                })
                .collect();
            let phase = if r.partitions.is_empty() { "waiting for a recovery master" } else { "replaying partitions" };
            json!({
                "id": r.id,
                "dead": r.dead,
                "logs": r.logs.iter().map(|l| l.0).collect::<Vec<_>>(),
                "started_unix_ms": r.started_unix_ms,
                "elapsed_ms": times.map_or(now_ms.saturating_sub(r.started_unix_ms), |t| t.elapsed_ms),
                "detection_ms": times.and_then(|t| t.detection_ms),
                "lease_wait_ms": times.and_then(|t| t.lease_wait_ms),
                "assigned_ms": times.and_then(|t| t.assigned_ms),
                "objects_replayed": times.map(|t| t.objects),
                "bytes_replayed": times.map(|t| t.bytes),
                "phase": phase,
                "partitions": partitions,
                "partitions_done": done,
                "progress": if r.partitions.is_empty() { 0.0 } else { done as f64 / r.partitions.len() as f64 },
            })
        })
        .collect();
    let mut failures = o.failures.clone();
    failures.reverse();
    json!({
        "now_unix_ms": now_ms,
        "coordinator": {
            "control": control,
            "uptime_secs": o.uptime.as_secs(),
            "requests": o.requests,
            "connections": o.connections,
            "leases_held": o.leases_held,
            "map_version": map.version,
            "replicas": map.replicas,
            "poll_interval_ms": crate::sampler::POLL_INTERVAL.as_millis() as u64,
        },
        "servers": servers,
        "tables": tables,
        "replication": replication,
        "suspects": o.suspects,
        "recoveries": recoveries,
        "finished_recoveries": o.finished.iter().rev().collect::<Vec<_>>(),
        "failures": failures,
    })
}

/// `/api/history` (see the module comment).
fn history_view(map: &ClusterMap, samples: &BTreeMap<ServerId, ServerHistory>, since: u64) -> Value {
    let servers: Vec<Value> = samples
        .iter()
        .map(|(id, h)| {
            let points: Vec<Value> = h
                .samples
                .iter()
                .enumerate()
                .filter(|(_, x)| x.unix_ms > since)
                .map(|(i, x)| {
                    let prev = i.checked_sub(1).map(|j| &h.samples[j]);
                    let s = x.stats.as_ref();
                    json!({
                        "t": x.unix_ms,
                        "ops_per_sec": prev.and_then(|p| ops_per_sec(p, x)),
                        "ping_ms": x.ping_us.map(|us| us as f64 / 1000.0),
                        "memory_used": s.and_then(memory_used),
                        "log_utilisation": s.map(|s| s.log_utilisation),
                        "live_bytes": s.map(|s| s.live_bytes),
                        "segments_below_r": s.map(|s| s.closed_segments_below_r),
                        "durable_lag": s.map(|s| s.durable_lag),
                    })
                })
                .collect();
            json!({"id": id, "state": map.server(*id).map(|s| s.state), "points": points})
        })
        .collect();
    json!({
        "interval_ms": crate::sampler::POLL_INTERVAL.as_millis() as u64,
        "window_ms": crate::sampler::POLL_INTERVAL.as_millis() as u64 * crate::sampler::HISTORY as u64,
        "servers": servers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::ServerStats;

    fn sample(t: u64, reads: u64) -> Sample {
        Sample {
            unix_ms: t,
            ping_us: Some(250),
            stats: Some(ServerStats { reads, seglets_total: 10, seglets_in_use: 4, ..Default::default() }),
        }
    }

    #[test]
    fn ops_per_sec_needs_two_samples_with_counters_that_grew() {
        assert_eq!(ops_per_sec(&sample(1000, 10), &sample(2000, 110)), Some(100.0));
        assert_eq!(ops_per_sec(&sample(1000, 10), &sample(1500, 60)), Some(100.0));
        assert_eq!(ops_per_sec(&sample(1000, 110), &sample(2000, 10)), None, "restarted server");
        assert_eq!(ops_per_sec(&sample(1000, 10), &sample(1000, 20)), None, "no time passed");
        let no_stats = Sample { unix_ms: 2000, ping_us: None, stats: None };
        assert_eq!(ops_per_sec(&sample(1000, 10), &no_stats), None);
    }

    #[test]
    fn history_keeps_only_points_after_since_and_leaves_unknowns_null() {
        let mut h = ServerHistory::default();
        h.samples.extend([sample(1000, 0), sample(2000, 50), Sample { unix_ms: 3000, ping_us: None, stats: None }]);
        let samples = BTreeMap::from([(ServerId(1), h)]);
        let v = history_view(&ClusterMap::default(), &samples, 1000);
        let points = v["servers"][0]["points"].as_array().unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(points[0]["t"], 2000);
        assert_eq!(points[0]["ops_per_sec"], 50.0);
        assert_eq!(points[0]["memory_used"], 0.4);
        assert_eq!(points[0]["ping_ms"], 0.25);
        assert!(points[1]["ops_per_sec"].is_null() && points[1]["memory_used"].is_null());
    }
}
