//! What a run measured, as a table for people and JSON for machines.

use crate::scenario::{Consistency, Protocol, Scenario, Substrate};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt::Write;

/// Utilisation (busy time / measured time) over the components of one
/// kind: Katsarakis Fig. 4.4's bars, and Fig. 4.6's coherence share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Utilisation {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Mean utilisation spent on coherence actions.
    pub coherence_mean: f64,
}

impl Utilisation {
    pub fn of(busy: &[f64], coherence: &[f64]) -> Utilisation {
        let n = busy.len().max(1) as f64;
        Utilisation {
            mean: busy.iter().sum::<f64>() / n,
            min: busy.iter().cloned().fold(f64::INFINITY, f64::min),
            max: busy.iter().cloned().fold(0.0, f64::max),
            coherence_mean: coherence.iter().sum::<f64>() / n,
        }
    }
}

/// Request latency from the client's send to the reply's arrival.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    /// From a histogram of nanoseconds.
    pub fn of(h: &Histogram<u64>) -> Latency {
        let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
        Latency { mean: h.mean() / 1000.0, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: h.max() as f64 / 1000.0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    /// The system, e.g. "EREW + SC(All Peers, EC)".
    pub system: String,
    /// Requests completed per second in the measured window, millions.
    pub throughput_mops: f64,
    pub first_half_mops: f64,
    pub second_half_mops: f64,
    /// |first - second| / overall: the convergence check (< 0.01 is
    /// reported as converged).
    pub halves_differ: f64,
    pub cores: Utilisation,
    pub nic_in: Utilisation,
    pub nic_out: Utilisation,
    pub memory: Utilisation,
    pub latency_us: Latency,
    pub reads: u64,
    /// Reads of a cached copy that missed a newer completed write (EC).
    pub stale_read_fraction: f64,
    pub mean_versions_behind: f64,
    /// Reads that waited for an invalid copy's update (SC).
    pub blocked_read_fraction: f64,
    /// Server-bound and client-bound messages per request, coherence
    /// included.
    pub messages_per_request: f64,
    pub coherence_messages_per_request: f64,
    pub simulated_ms: f64,
    pub requests: u64,
    pub wall_seconds: f64,
}

impl Report {
    pub fn converged(&self) -> bool {
        self.halves_differ < 0.01
    }

    /// The aligned, human-readable form.
    pub fn table(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "scenario {}: {}", self.scenario, self.system);
        let _ = writeln!(
            o,
            "  throughput      {:>10.2} Mops/s  (halves {:.2} / {:.2}, differ {:.2}%: {})",
            self.throughput_mops,
            self.first_half_mops,
            self.second_half_mops,
            self.halves_differ * 100.0,
            if self.converged() { "converged" } else { "NOT converged: run more requests" }
        );
        let _ = writeln!(o, "  utilisation      mean    min    max   coherence");
        for (name, u) in
            [("cores", &self.cores), ("NIC in", &self.nic_in), ("NIC out", &self.nic_out), ("memory", &self.memory)]
        {
            let _ = writeln!(
                o,
                "    {:<12} {:>5.1}% {:>5.1}% {:>5.1}%  {:>5.1}%",
                name,
                u.mean * 100.0,
                u.min * 100.0,
                u.max * 100.0,
                u.coherence_mean * 100.0
            );
        }
        let l = &self.latency_us;
        let _ = writeln!(
            o,
            "  latency (us)    mean {:.2}  p50 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            l.mean, l.p50, l.p99, l.p999, l.max
        );
        let _ = writeln!(
            o,
            "  reads           stale {:.4}% (mean {:.2} versions behind), blocked {:.4}%",
            self.stale_read_fraction * 100.0,
            self.mean_versions_behind,
            self.blocked_read_fraction * 100.0
        );
        let _ = writeln!(
            o,
            "  messages/req    {:.3} (coherence {:.3})",
            self.messages_per_request, self.coherence_messages_per_request
        );
        let _ = writeln!(
            o,
            "  run             {} requests, {:.3} ms simulated, {:.1} s wall",
            self.requests, self.simulated_ms, self.wall_seconds
        );
        o
    }
}

/// A short name of the scenario's system.
pub fn label(s: &Scenario) -> String {
    let sub = match s.system.substrate {
        Substrate::Erew => "EREW",
        Substrate::Crew => "CREW",
    };
    if !s.system.caching {
        return format!("{sub} baseline");
    }
    let p = match s.system.protocol {
        Protocol::PrimaryBroadcast => "Primary Broadcast",
        Protocol::PrimaryTimestamp => "Primary Timestamp",
        Protocol::AllPeers => "All Peers",
    };
    let c = match s.system.consistency {
        Consistency::Ec => "EC",
        Consistency::Sc => "SC",
    };
    format!("{sub} + symmetric caching ({p}, {c})")
}
