//! The coordinator's metrics (`/metrics`; `docs/observability.md` lists
//! them): read when scraped from what the service keeps anyway (its
//! counters, the published map, leases, the recovery clock), without the
//! state lock ([`Service::figures`]).

use crate::service::Service;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use shoal_cluster::ServerState;
use shoal_http::prom::{Result, Scrape};
use std::sync::Arc;

/// The coordinator's metrics, encoded when scraped.
pub(crate) struct CoordinatorMetrics {
    pub service: Arc<Service>,
}

impl std::fmt::Debug for CoordinatorMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CoordinatorMetrics")
    }
}

impl Collector for CoordinatorMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> Result {
        let mut s = Scrape::new(encoder);
        let f = self.service.figures();
        s.gauge("shoal_coordinator_uptime_seconds", "Seconds since the coordinator started.", f.uptime.as_secs_f64())?;
        s.gauge(
            "shoal_process_resident_memory_bytes",
            "Resident memory of the coordinator process.",
            shoal_common::os::rss_bytes(),
        )?;
        let ops: Vec<[(&str, &str); 1]> = f.requests.iter().map(|(op, _)| [("op", *op)]).collect();
        s.counters(
            "shoal_coordinator_requests",
            "Control requests received, by operation (refused ones included).",
            ops.iter().zip(&f.requests).map(|(l, (_, n))| (&l[..], *n)),
        )?;
        s.counter("shoal_coordinator_enlistments", "Server enlistments accepted.", f.enlistments)?;
        s.gauge("shoal_coordinator_connections", "Control connections open now.", f.connections as u64)?;
        let map = &f.map;
        s.gauge("shoal_cluster_map_version", "Version of the published cluster map.", map.version)?;
        s.gauge("shoal_cluster_replicas", "Replicas each master keeps of its log (R).", u64::from(map.replicas))?;
        let count = |state: ServerState| map.servers.iter().filter(|s| s.state == state).count() as u64;
        s.gauges(
            "shoal_cluster_servers",
            "Servers in the cluster map, by state.",
            [
                (&[("state", "up")][..], count(ServerState::Up)),
                (&[("state", "recovering")][..], count(ServerState::Recovering)),
                (&[("state", "down")][..], count(ServerState::Down)),
            ],
        )?;
        s.gauge("shoal_cluster_tables", "Tables.", map.tables.len() as u64)?;
        s.gauge("shoal_cluster_tablets", "Tablets.", map.tablets.len() as u64)?;
        s.gauge("shoal_cluster_sc_groups", "Symmetric-caching groups in the cluster map.", map.sc_groups.len() as u64)?;
        s.gauge(
            "shoal_cluster_fenced_logs",
            "Logs fenced and not yet freed.",
            map.fenced.iter().filter(|l| !l.free).count() as u64,
        )?;
        s.gauge("shoal_coordinator_leases_held", "Master leases held now.", f.leases_held as u64)?;
        s.gauge("shoal_coordinator_lease_seconds", "Length of a master lease (--lease-ms).", f.lease.as_secs_f64())?;
        s.gauge("shoal_coordinator_recoveries_running", "Crash recoveries under way.", map.recoveries.len() as u64)?;
        s.counter(
            "shoal_coordinator_recoveries_finished",
            "Crash recoveries that finished since this coordinator started.",
            f.recoveries_finished,
        )?;
        let parts = map.recoveries.iter().flat_map(|r| &r.partitions);
        let (done, all) = parts.fold((0u64, 0u64), |(d, a), p| (d + u64::from(p.done), a + 1));
        s.gauges(
            "shoal_coordinator_recovery_partitions",
            "Partitions of the crash recoveries under way, by state.",
            [(&[("state", "done")][..], done), (&[("state", "pending")][..], all - done)],
        )?;
        s.gauge(
            "shoal_coordinator_recovery_reported_objects",
            "Objects the recovery masters reported replayed, over the recoveries under way.",
            f.running.iter().map(|r| r.objects).sum::<u64>(),
        )?;
        s.gauge(
            "shoal_coordinator_recovery_reported_bytes",
            "Bytes the recovery masters reported replayed, over the recoveries under way.",
            f.running.iter().map(|r| r.bytes).sum::<u64>(),
        )?;
        s.gauge(
            "shoal_coordinator_recovery_elapsed_seconds",
            "Time since the longest-running recovery under way began (0: none).",
            f.running.iter().map(|r| r.elapsed.as_secs_f64()).fold(0.0, f64::max),
        )?;
        let Some(last) = &f.last_finished else { return Ok(()) };
        let secs = |ms: u64| ms as f64 / 1000.0;
        let mut phases = vec![(&[("phase", "total")][..], secs(last.total_ms))];
        if let Some(ms) = last.detection_ms {
            phases.push((&[("phase", "detection")][..], secs(ms)));
        }
        if let Some(ms) = last.lease_wait_ms {
            phases.push((&[("phase", "lease_wait")][..], secs(ms)));
        }
        if let Some(ms) = last.assigned_ms {
            phases.push((&[("phase", "assigned")][..], secs(ms)));
        }
        if let Some(ms) = last.replay_ms {
            phases.push((&[("phase", "replay")][..], secs(ms)));
        }
        s.gauges(
            "shoal_coordinator_last_recovery_seconds",
            "The last finished recovery's phases: detection (first suspicion to declaration), lease_wait (the part \
             of detection waiting for the dead server's lease), assigned (declaration to partitions assigned), \
             replay (the longest partition's), total (declaration to the last partition).",
            phases,
        )
    }
}
