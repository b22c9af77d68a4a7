//! Failure detection and crash recovery over the network: `suspect` makes
//! the coordinator PING the suspect itself; a server that does not answer
//! is declared dead and its recovery planned; `recovery_done` hands its
//! tablets over. The "servers" here are fakes: a native port that answers
//! PINGs, one that accepts connections but never answers (a stopped
//! process), and one that is closed (a killed process).

use shoal_cluster::{
    ClusterMap, ControlClient, ControlError, ControlErrorCode, ControlRequest, ControlResponse, ServerId, ServerState,
};
use shoal_coordinator::{Coordinator, CoordinatorConfig};
use shoal_proto::{check_frame, Response};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A coordinator with 100 ms leases: the fake servers here never renew,
/// so a declaration waits at most 100 ms * 1.04 + 50 ms after its start.
async fn start(dir: &Path) -> Coordinator {
    start_with_lease(dir, Duration::from_millis(100)).await
}

async fn start_with_lease(dir: &Path, lease: Duration) -> Coordinator {
    let config = CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        lease,
        ..CoordinatorConfig::default()
    };
    Coordinator::start(config).await.expect("coordinator starts")
}

/// A native port that answers every request frame with a PING answer, and
/// counts the frames it answered.
async fn answering() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let pings = Arc::new(AtomicUsize::new(0));
    let counter = pings.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 256];
                loop {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Ok(Some(h)) = check_frame(&buf, 1 << 20) {
                        buf.drain(..h.frame_len());
                        let mut out = Vec::new();
                        Response::Ping.encode(h.request_id, &mut out);
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    (addr, pings)
}

/// A port whose listener never accepts: the kernel completes connections
/// on its backlog, nobody reads them (like a process under SIGSTOP).
fn silent() -> (SocketAddr, std::net::TcpListener) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (listener.local_addr().unwrap(), listener)
}

/// A port nobody listens on (like a killed process).
fn closed() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

async fn enlist(c: &mut ControlClient, previous: Option<ServerId>, native: SocketAddr) -> ServerId {
    let other = SocketAddr::from(([127, 0, 0, 1], 1));
    let req = ControlRequest::Enlist { previous, native, resp: other, backup: other };
    let (server, log) = match c.call(&req).await.unwrap() {
        ControlResponse::Enlisted { server, log, .. } => (server, log),
        other => panic!("{other:?}"),
    };
    // As a real server does once its head is on a backup: it may then
    // hold a lease.
    assert_eq!(c.call(&ControlRequest::HeadReplicated { server, log }).await.unwrap(), ControlResponse::Ok);
    server
}

/// Waits (at most `limit`) for a map satisfying `cond`.
async fn wait_map(c: &mut ControlClient, limit: Duration, cond: impl Fn(&ClusterMap) -> bool) -> Option<ClusterMap> {
    let deadline = Instant::now() + limit;
    let mut map = c.get_map().await.unwrap();
    while !cond(&map) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let req =
            ControlRequest::WatchMap { known_version: map.version, timeout_ms: left.as_millis() as u64, server: None };
        map = match c.call(&req).await.unwrap() {
            ControlResponse::Map { map } => map,
            other => panic!("{other:?}"),
        };
    }
    Some(map)
}

fn state(map: &ClusterMap, id: ServerId) -> ServerState {
    map.server(id).unwrap().state
}

async fn suspect(c: &mut ControlClient, reporter: ServerId, suspect: ServerId) {
    let started = Instant::now();
    assert_eq!(c.call(&ControlRequest::Suspect { reporter, suspect }).await.unwrap(), ControlResponse::Ok);
    assert!(started.elapsed() < Duration::from_millis(150), "suspect waited for the probe");
}

async fn stats(c: &mut ControlClient) -> serde_json::Value {
    match c.call(&ControlRequest::Stats).await.unwrap() {
        ControlResponse::Stats { stats } => stats,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_silent_server_is_declared_dead_and_an_answering_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let (alive_addr, pings) = answering().await;
    let (other_addr, _) = answering().await;
    let (stopped_addr, _keep) = silent();
    let alive = enlist(&mut c, None, alive_addr).await;
    let stopped = enlist(&mut c, None, stopped_addr).await;
    let other = enlist(&mut c, None, other_addr).await;
    c.create_table("t", 6).await.unwrap();

    // An answering server stays up.
    let version = c.get_map().await.unwrap().version;
    suspect(&mut c, stopped, alive).await;
    assert!(wait_map(&mut c, Duration::from_millis(800), |m| m.version > version).await.is_none());
    assert_eq!(state(&c.get_map().await.unwrap(), alive), ServerState::Up);
    assert_eq!(pings.load(Ordering::Relaxed), 1, "one answered ping is enough");

    // A server that accepts connections but never answers is declared dead
    // after two pings of 250 ms.
    let started = Instant::now();
    suspect(&mut c, alive, stopped).await;
    suspect(&mut c, other, stopped).await; // a second report while it is checked
    let map = wait_map(&mut c, Duration::from_secs(3), |m| state(m, stopped) == ServerState::Down).await.unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_millis(1200), "{took:?}");
    assert_eq!(map.version, version + 1, "declared dead in one change");
    assert_eq!(map.recoveries.len(), 1);
    let r = &map.recoveries[0];
    assert_eq!(r.dead, stopped);
    let mut masters: Vec<ServerId> = r.partitions.iter().map(|p| p.master).collect();
    masters.sort();
    assert_eq!(masters, vec![alive, other]);
    assert_eq!(map.fenced.len(), 1);
    assert!(!map.fenced[0].free);

    // Reports about a server already down are ignored.
    suspect(&mut c, alive, stopped).await;
    let s = stats(&mut c).await;
    assert_eq!(s["recoveries"][0]["id"], r.id);
    assert!(s["recoveries"][0]["detection_ms"].as_u64().unwrap() >= 450);
    assert!(s["recoveries"][0]["elapsed_ms"].is_u64());
}

/// Leases (docs/recovery.md): a suspect that renewed its lease is declared
/// dead (and its tablets planned for recovery) only once that lease has
/// surely ended, and it gets no renewal once condemned.
#[tokio::test]
async fn a_dead_server_s_tablets_wait_for_its_lease_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let lease = Duration::from_millis(1500);
    let coordinator = start_with_lease(dir.path(), lease).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let (alive_addr, _) = answering().await;
    let alive = enlist(&mut c, None, alive_addr).await;
    let killed = enlist(&mut c, None, closed()).await;
    c.create_table("t", 2).await.unwrap();
    let log = c.get_map().await.unwrap().server(killed).unwrap().log;
    // Wait out the lease this coordinator assumes at its start, then renew.
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    let renewed = Instant::now();
    let renew = ControlRequest::RenewLease { server: killed, log };
    assert_eq!(c.call(&renew).await.unwrap(), ControlResponse::Lease { ms: 1500 });
    suspect(&mut c, alive, killed).await;
    // The probe fails at once (closed port); the declaration waits.
    let map = wait_map(&mut c, Duration::from_secs(5), |m| state(m, killed) == ServerState::Down).await.unwrap();
    let took = renewed.elapsed();
    assert!(took >= Duration::from_millis(1500 * 104 / 100 + 50), "declared {took:?} after the renewal");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(map.recoveries.len(), 1);
    // Condemned, then down: no more leases for it, nor for a stale log.
    match c.call(&renew).await {
        Err(ControlError::Refused { code: ControlErrorCode::InvalidRequest, .. }) => {}
        other => panic!("a dead server got {other:?}"),
    }
    let alive_log = map.server(alive).unwrap().log;
    let stale = ControlRequest::RenewLease { server: alive, log: shoal_common::LogId(alive_log.0 + 100) };
    assert!(matches!(c.call(&stale).await, Err(ControlError::Refused { .. })));
    assert_eq!(
        c.call(&ControlRequest::RenewLease { server: alive, log: alive_log }).await.unwrap(),
        ControlResponse::Lease { ms: 1500 }
    );
}

#[tokio::test]
async fn a_closed_port_is_declared_dead_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let (alive_addr, _) = answering().await;
    let alive = enlist(&mut c, None, alive_addr).await;
    let killed = enlist(&mut c, None, closed()).await;
    c.create_table("t", 2).await.unwrap();
    let started = Instant::now();
    suspect(&mut c, alive, killed).await;
    wait_map(&mut c, Duration::from_secs(2), |m| state(m, killed) == ServerState::Down).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());
    // Unknown suspects are ignored.
    suspect(&mut c, alive, ServerId(99)).await;
}

#[tokio::test]
async fn recovery_done_hands_tablets_over_and_survives_a_coordinator_restart() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let mut servers = Vec::new();
    for _ in 0..3 {
        let (addr, _) = answering().await;
        servers.push(enlist(&mut c, None, addr).await);
    }
    let dead = enlist(&mut c, None, closed()).await;
    c.create_table("t", 8).await.unwrap();
    suspect(&mut c, servers[0], dead).await;
    let map = wait_map(&mut c, Duration::from_secs(2), |m| !m.recoveries.is_empty()).await.unwrap();
    let r = map.recoveries[0].clone();
    assert_eq!(r.partitions.len(), 3);

    // Partition 0 is reported; then the coordinator restarts mid-recovery.
    let report = |partition: u32, server, replay_ms| ControlRequest::RecoveryDone {
        recovery: r.id,
        partition,
        server,
        objects: 100,
        bytes: 10_000,
        replay_ms,
        since: None,
    };
    assert_eq!(c.call(&report(0, r.partitions[0].master, 40)).await.unwrap(), ControlResponse::Ok);
    let wrong = c.call(&report(1, r.partitions[0].master, 40)).await;
    assert!(matches!(wrong, Err(shoal_cluster::ControlError::Refused { code: ControlErrorCode::InvalidRequest, .. })));
    coordinator.shutdown();
    coordinator.wait().await;

    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let map = c.get_map().await.unwrap();
    assert_eq!(map.recoveries.len(), 1);
    assert!(map.recoveries[0].partitions[0].done);
    let s = stats(&mut c).await;
    assert!(s["recoveries"][0]["elapsed_ms"].as_u64().is_some());
    assert_eq!(s["recoveries"][0]["partitions"][0]["done"], true);

    for (i, p) in r.partitions.iter().enumerate().skip(1) {
        assert_eq!(c.call(&report(i as u32, p.master, 70 + i as u64)).await.unwrap(), ControlResponse::Ok);
    }
    let map = c.get_map().await.unwrap();
    assert!(map.recoveries.is_empty());
    assert!(map.fenced.iter().all(|f| f.free));
    assert_eq!(map.tablets_of(dead).count(), 0);
    for s in &servers {
        assert!(map.tablets_of(*s).count() >= 2);
    }
    // A late repeat is harmless.
    assert_eq!(c.call(&report(1, r.partitions[1].master, 1)).await.unwrap(), ControlResponse::Ok);

    let s = stats(&mut c).await;
    let done = &s["finished_recoveries"][0];
    assert_eq!(done["id"], r.id);
    assert_eq!(done["replay_ms"], 72);
    assert_eq!(done["objects"], 200, "only what this process saw");
    assert_eq!(done["bytes"], 20_000);
    assert!(done["total_ms"].is_u64());

    // The dead server comes back with its old id: a new server.
    let (addr, _) = answering().await;
    let again = enlist(&mut c, Some(dead), addr).await;
    assert!(again.0 > dead.0);
    assert_eq!(state(&c.get_map().await.unwrap(), dead), ServerState::Down);
}
