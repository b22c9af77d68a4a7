//! `run`, as `shoal coordinator` uses it: serves until SIGTERM, then stops.
//! Its own test binary, because it signals its own process.

use shoal_cluster::ControlClient;
use shoal_coordinator::{run, CoordinatorArgs};
use std::time::Duration;

#[tokio::test]
async fn run_serves_until_sigterm_and_keeps_its_state() {
    let dir = tempfile::tempdir().unwrap();
    // A free port: bind one and let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let args = CoordinatorArgs {
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        data_dir: dir.path().join("state"),
        replicas: Some(0),
        sc_group_size: 8,
        log_level: "warn".into(),
        probe_timeout_ms: 250,
        probe_attempts: 2,
        restart_grace_ms: 10_000,
        lease_ms: 2000,
        auto_rebalance: false,
        cluster_secret_file: Some(secret_file(dir.path())),
        insecure_no_secret: false,
        max_connections_per_ip: 64,
        // The HTTP listener (/metrics and the dashboard) starts and stops with it.
        metrics_port: Some(0),
        internal_tls_cert: None,
        internal_tls_key: None,
        internal_tls_ca: None,
        etcd: Vec::new(),
        etcd_prefix: shoal_coordinator::etcd::DEFAULT_PREFIX.into(),
        etcd_lease_secs: shoal_coordinator::etcd::DEFAULT_LEASE_SECS,
    };
    let running = tokio::spawn(run(args.clone()));

    let mut c = ControlClient::new(args.listen).with_timeout(Duration::from_secs(2));
    let mut map = None;
    for _ in 0..200 {
        match c.get_map().await {
            Ok(m) => {
                map = Some(m);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
    let map = map.expect("the coordinator answers");
    assert_eq!(map.replicas, 0);
    assert!(dir.path().join("state/coordinator.json").is_file());
    assert!(!running.is_finished());

    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let result = tokio::time::timeout(Duration::from_secs(10), running).await.expect("stops on SIGTERM").unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(c.get_map().await.is_err());

    let no_secret = CoordinatorArgs { cluster_secret_file: None, ..args.clone() };
    let err = run(no_secret).await.unwrap_err();
    assert!(matches!(err, shoal_coordinator::CoordinatorError::NoSecret), "{err}");
    let bad = CoordinatorArgs { log_level: "not a [level".into(), ..args };
    let err = run(bad).await.unwrap_err();
    assert!(matches!(err, shoal_coordinator::CoordinatorError::LogLevel { .. }), "{err}");
}

fn secret_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("cluster-secret");
    shoal_cluster::auth::ClusterSecret::create_or_load(&path).unwrap();
    path
}
