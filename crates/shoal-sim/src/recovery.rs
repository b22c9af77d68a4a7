//! Crash recovery at scale: how long until a crashed master's data is
//! served again, when B backups read its log segments from disk and send
//! them to M recovery masters, which replay them and re-replicate what
//! they recovered (RAMCloud's and Shoal's parallel recovery,
//! `docs/recovery.md`).
//!
//! Contract: `predict(params)` is a pure function. The model is a
//! pipeline: segments stream from backup disks through backup NICs into
//! recovery masters, which replay them and send R new replicas out, all
//! at once, so the data-moving phase takes as long as its slowest stage
//! (a bandwidth or the cores), plus the time to fill the pipeline with one
//! segment. To that it adds failure detection and the coordinator's
//! per-server work (asking every backup what it holds), which grows with
//! the cluster. Every server is a backup and a recovery master; they do
//! not serve other clients meanwhile.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryParams {
    /// Servers in the cluster, the crashed one included.
    pub servers: u32,
    /// Cores per server that recovery can use.
    pub cores_per_server: f64,
    pub nic_gbit_s: f64,
    /// Sequential read bandwidth of one server's disks.
    pub disk_gbyte_s: f64,
    /// Log bytes the crashed master held.
    pub data_gbytes: f64,
    /// Log bytes per object (value, key and entry header).
    pub object_bytes: f64,
    /// Core time the whole cluster spends per recovered object: the backup
    /// cutting it out of its replica, the transfers, the replay and the
    /// re-replication (measured: docs/recovery.md).
    pub core_us_per_object: f64,
    /// Replicas written of each recovered segment.
    pub replicas: u32,
    pub segment_mbytes: f64,
    /// Recovery masters; 0 means every surviving server.
    pub recovery_masters: u32,
    pub detection_ms: f64,
    /// Coordinator time per server to start a recovery (replica census,
    /// partition hand-out), serial.
    pub coordinator_us_per_server: f64,
}

impl Default for RecoveryParams {
    /// RAMCloud's recovery experiment (35 GB on a 60-node cluster: 4-core
    /// machines, 32 Gbit/s InfiniBand, two disks each) with Shoal's
    /// measured per-object cost and 100-byte values.
    fn default() -> Self {
        RecoveryParams {
            servers: 60,
            cores_per_server: 4.0,
            nic_gbit_s: 32.0,
            disk_gbyte_s: 0.3,
            data_gbytes: 35.0,
            object_bytes: 140.0,
            core_us_per_object: 1.5,
            replicas: 2,
            segment_mbytes: 8.0,
            recovery_masters: 0,
            detection_ms: 110.0,
            coordinator_us_per_server: 50.0,
        }
    }
}

/// The predicted recovery time and what limits it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecoveryPrediction {
    pub servers: u32,
    pub total_s: f64,
    /// Time of each stage if it were alone, seconds.
    pub disk_read_s: f64,
    pub nic_s: f64,
    pub cores_s: f64,
    pub coordination_s: f64,
    pub detection_s: f64,
    /// Which stage set the data-moving time.
    pub bottleneck: &'static str,
    pub gbyte_s: f64,
}

/// Predicts one recovery.
pub fn predict(p: &RecoveryParams) -> RecoveryPrediction {
    let survivors = p.servers.saturating_sub(1).max(1) as f64;
    let masters = match p.recovery_masters {
        0 => survivors,
        m => (m as f64).min(survivors),
    };
    let backups = survivors;
    let d = p.data_gbytes * 1e9;
    let nic = p.nic_gbit_s * 1e9 / 8.0;
    let r = p.replicas as f64;
    let disk_read_s = d / (backups * p.disk_gbyte_s * 1e9);
    // Each server is both: in = its share of segments as a master plus the
    // re-replicated copies it stores as a backup; out the reverse.
    let nic_in = d / masters + r * d / backups;
    let nic_out = d / backups + r * d / masters;
    let nic_s = nic_in.max(nic_out) / nic;
    let objects = d / p.object_bytes;
    let cores_s = objects * p.core_us_per_object * 1e-6 / (survivors * p.cores_per_server);
    let fill_s = p.segment_mbytes * 1e6 / (p.disk_gbyte_s * 1e9);
    let coordination_s = p.servers as f64 * p.coordinator_us_per_server * 1e-6;
    let detection_s = p.detection_ms * 1e-3;
    let stages = [("disk", disk_read_s), ("network", nic_s), ("cores", cores_s)];
    let (bottleneck, moving) = stages.iter().cloned().fold(("disk", 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let total_s = detection_s + coordination_s + fill_s + moving;
    RecoveryPrediction {
        servers: p.servers,
        total_s,
        disk_read_s,
        nic_s,
        cores_s,
        coordination_s,
        detection_s,
        bottleneck,
        gbyte_s: p.data_gbytes / (total_s - detection_s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predict_more_servers_recover_faster_until_coordination_dominates() {
        let at = |n| predict(&RecoveryParams { servers: n, ..Default::default() }).total_s;
        assert!(at(60) < at(10));
        assert!(at(1000) < at(60));
        // The serial coordinator term eventually wins.
        assert!(at(100_000) > at(1000));
    }

    #[test]
    fn predict_two_core_machine_matches_measured_one_gigabyte() {
        // docs/recovery.md: 1 GB of 100-byte values on 4 servers sharing
        // 2 cores took 6.6-7.0 s (kill to served), detection included.
        let p = RecoveryParams {
            servers: 4,
            cores_per_server: 2.0 / 3.0,
            disk_gbyte_s: 2.0,
            data_gbytes: 1.0,
            ..Default::default()
        };
        let t = predict(&p);
        assert_eq!(t.bottleneck, "cores");
        assert!((5.0..8.0).contains(&t.total_s), "{}", t.total_s);
    }
}
