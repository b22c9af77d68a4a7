//! Small scenarios whose answers are known without simulating: they pin the
//! engine to queueing theory and the systems to their definitions.

use shoal_sim::plan::hot_write_cost;
use shoal_sim::scenario::{Consistency, Protocol, Scenario, Substrate};
use shoal_sim::simulate;

/// A tiny cluster with a fast network, so cores are what limits.
fn small(servers: u32, cores: u32, keys: u64) -> Scenario {
    let mut s = Scenario::default();
    s.infrastructure.servers = servers;
    s.infrastructure.cores_per_server = cores;
    s.infrastructure.nic_gbit_s = 10_000.0;
    s.infrastructure.memory_gbyte_s = 10_000.0;
    s.workload.keys = keys;
    s.workload.zipf_exponent = 0.0;
    s.workload.write_ratio = 0.0;
    s.system.caching = false;
    s.system.substrate = Substrate::Erew;
    s.system.cache_keys = keys.min(1000);
    s.run.warmup_requests = 5_000;
    s.run.requests = 40_000;
    s
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b
}

#[test]
fn single_server_one_request_in_flight_takes_the_sum_of_its_service_times() {
    // Operational law, N = 1: no queueing, X = 1 / (demand + delays).
    let mut s = small(1, 1, 1000);
    s.run.outstanding_per_server = 1;
    let r = simulate(&s).unwrap();
    let c = &s.costs;
    let i = &s.infrastructure;
    let bytes = (c.header_bytes + s.workload.key_bytes) + (c.header_bytes + s.workload.value_bytes);
    let cycle_us = c.request_us
        + 2.0 * i.network_latency_us
        + bytes as f64 * 8.0 / (i.nic_gbit_s * 1e3)
        + c.memory_bytes_per_access as f64 / (i.memory_gbyte_s * 1e3);
    assert!(close(r.throughput_mops, 1.0 / cycle_us, 0.001), "{} vs {}", r.throughput_mops, 1.0 / cycle_us);
    assert!(close(r.latency_us.mean, cycle_us, 0.01));
}

#[test]
fn single_server_uniform_load_saturates_at_cores_over_service_time() {
    // Operational law, N large: X = 1 / D_max = cores / request_us; and
    // Little's law N = X R holds for the closed loop.
    let mut s = small(1, 4, 100_000);
    s.run.outstanding_per_server = 256;
    let r = simulate(&s).unwrap();
    let bound = 4.0 / s.costs.request_us;
    assert!(close(r.throughput_mops, bound, 0.02), "{} vs {bound}", r.throughput_mops);
    assert!(r.cores.min > 0.95, "{:?}", r.cores);
    let little = r.throughput_mops * r.latency_us.mean;
    assert!(close(little, 256.0, 0.03), "N = X R gives {little}");
    assert!(r.converged());
}

#[test]
fn lone_hot_key_on_erew_is_capped_by_one_core() {
    let mut s = small(4, 8, 1);
    let r = simulate(&s).unwrap();
    assert!(close(r.throughput_mops, 1.0 / s.costs.request_us, 0.01), "{}", r.throughput_mops);
    assert!(r.cores.max > 0.99 && r.cores.min == 0.0);
    assert!(close(r.cores.mean, 1.0 / 32.0, 0.02));
    // CREW spreads it over every core of every server instead.
    s.system.substrate = Substrate::Crew;
    let crew = simulate(&s).unwrap();
    assert!(crew.throughput_mops > 3.0 * r.throughput_mops);
}

#[test]
fn symmetric_caching_without_writes_spreads_a_hot_key_over_the_group() {
    let mut s = small(4, 8, 1);
    s.system.caching = true;
    s.system.cache_keys = 1;
    s.run.outstanding_per_server = 256;
    let r = simulate(&s).unwrap();
    // Every core of all 4 members serves the key: 32 cores.
    let bound = 32.0 / (s.costs.request_us + s.costs.sync_us);
    assert!(close(r.throughput_mops, bound, 0.03), "{} vs {bound}", r.throughput_mops);
    assert!(r.cores.min > 0.95, "{:?}", r.cores);
    assert_eq!(r.stale_read_fraction, 0.0);
    assert_eq!(r.coherence_messages_per_request, 0.0);
}

#[test]
fn same_seed_same_report() {
    let mut s = small(4, 4, 10_000);
    s.workload.zipf_exponent = 0.99;
    s.workload.write_ratio = 0.05;
    s.system.caching = true;
    s.system.cache_keys = 10;
    s.system.consistency = Consistency::Sc;
    s.run.outstanding_per_server = 64;
    let strip = |mut r: shoal_sim::Report| {
        r.wall_seconds = 0.0;
        serde_json::to_string(&r).unwrap()
    };
    let a = strip(simulate(&s).unwrap());
    assert_eq!(a, strip(simulate(&s).unwrap()));
    s.seed += 1;
    assert_ne!(a, strip(simulate(&s).unwrap()));
}

#[test]
fn hot_writes_send_the_protocols_message_counts() {
    // Every request a write of one cached key: the simulated coherence
    // messages per request equal the protocol's count (Ch. 3), averaged
    // over entries that are or are not the key's home for the primaries.
    let g = 4;
    for (cons, proto) in [
        (Consistency::Ec, Protocol::AllPeers),
        (Consistency::Sc, Protocol::AllPeers),
        (Consistency::Ec, Protocol::PrimaryTimestamp),
        (Consistency::Sc, Protocol::PrimaryBroadcast),
    ] {
        let mut s = small(g, 4, 1);
        s.system.caching = true;
        s.system.cache_keys = 1;
        s.system.consistency = cons;
        s.system.protocol = proto;
        s.workload.write_ratio = 1.0;
        s.run.outstanding_per_server = 8;
        let r = simulate(&s).unwrap();
        let c = hot_write_cost(proto, cons, g);
        let primary_extra = if proto == Protocol::AllPeers { 0.0 } else { 2.0 };
        // A quarter of the writes arrive at the home and skip the extra hop.
        let expected = c.messages as f64 - primary_extra / g as f64;
        assert!(
            close(r.coherence_messages_per_request, expected, 0.02),
            "{cons:?} {proto:?}: {} vs {expected}",
            r.coherence_messages_per_request
        );
    }
}

#[test]
fn eventual_consistency_serves_stale_reads_and_strong_never_does() {
    let mut s = small(4, 4, 1);
    s.system.caching = true;
    s.system.cache_keys = 1;
    s.workload.write_ratio = 0.3;
    s.infrastructure.nic_gbit_s = 40.0;
    s.run.outstanding_per_server = 64;
    s.system.consistency = Consistency::Ec;
    let ec = simulate(&s).unwrap();
    assert!(ec.stale_read_fraction > 0.0);
    s.system.consistency = Consistency::Sc;
    let sc = simulate(&s).unwrap();
    assert_eq!(sc.stale_read_fraction, 0.0);
    assert!(sc.blocked_read_fraction > 0.0);
}

#[test]
fn scenario_toml_round_trips_and_rejects_unknown_fields() {
    let s = Scenario::default();
    assert_eq!(Scenario::from_toml(&s.to_toml()).unwrap(), s);
    let partial = Scenario::from_toml("[infrastructure]\nservers = 20\n").unwrap();
    assert_eq!(partial.infrastructure.servers, 20);
    assert_eq!(partial.workload.keys, 250_000_000);
    assert!(Scenario::from_toml("[infrastructure]\nserverz = 20\n").is_err());
    assert!(Scenario::from_toml("[system]\ngroup_size = 7\n").is_err());
}

#[test]
fn calibration_scenario_parses_and_its_nics_limit() {
    let text = include_str!("../scenarios/shoal-4-servers-tc.toml");
    let mut s = Scenario::from_toml(text).unwrap();
    s.run.requests = 20_000;
    s.system.caching = false;
    let r = simulate(&s).unwrap();
    // Without caching the hot key's home NIC is the bottleneck.
    assert!(r.nic_out.max > 0.95, "{:?}", r.nic_out);
}
