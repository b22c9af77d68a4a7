//! What internal TLS hides (`docs/security.md`, "Internal TLS"): a
//! recording proxy sits between a master and its backup, and between a
//! server and the coordinator. Without TLS a known value crosses it in
//! clear text (so the check can see it); with TLS it never does, while the
//! same bytes still reach the backup.
//!
//! One test in a binary of its own: it sets this process's replication
//! dialer (`shoal_replication::dial`), which is process-wide.

mod common;

use common::*;
use shoal_cluster::auth::ClusterSecret;
use shoal_cluster::tls::InternalTls;
use shoal_cluster::{ControlAuth, ControlClient, ControlRequest, ControlResponse, ServerId};
use shoal_common::{LogId, TableId};
use shoal_engine::{LogObserver, RejectRules, Store, StoreConfig};
use shoal_replication::backup::{Backup, BackupConfig};
use shoal_replication::master::{Replicator, ReplicatorConfig};
use shoal_server::tls::InternalPki;
use std::sync::Arc;
use std::time::Duration;

const VALUE: &[u8] = b"a value that must never cross the network in clear text: 7f3a9c";
const TABLE: &str = "a-table-name-that-must-not-be-seen-on-the-wire";

/// What crossed each proxy: (replication, control) recorders.
fn run(tls: bool, root: &std::path::Path) -> (Recorder, Recorder) {
    let secret = ClusterSecret::from_bytes(b"the wire test's cluster secret").unwrap();
    let pki = InternalPki::create_or_load(&root.join("ca")).unwrap();
    let identity = |name: &str| {
        let (cert, key) = pki.identity(name).unwrap();
        InternalTls::load(&cert, &key, &pki.ca).unwrap()
    };
    let internal = |name: &str| tls.then(|| identity(name));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    // Master -> proxy -> backup.
    let mut config = BackupConfig::new("127.0.0.1:0".parse().unwrap(), root.join(format!("backup-{tls}")));
    config.segment_bytes = 1 << 20;
    config.buffers = 4;
    config.flush_limit = 2;
    config.secret = Some(secret.clone());
    config.tls = internal("backup");
    let backup = Backup::start(config).unwrap();
    let replication = rt.block_on(Recorder::start(backup.local_addr()));
    shoal_replication::dial::set_cluster_secret(Some(secret.clone()));
    shoal_replication::dial::set_internal_tls(internal("master"));
    let rep = Replicator::start(ReplicatorConfig {
        master: ServerId(1),
        log: LogId(7),
        log_version: 1,
        segment_bytes: 1 << 20,
        ..ReplicatorConfig::default()
    });
    rep.set_backups(vec![(ServerId(2), replication.addr)], 1);
    let store = Store::with_observer(
        StoreConfig {
            memory_bytes: 16 << 20,
            segment_bytes: 1 << 20,
            seglet_bytes: 64 << 10,
            max_value_bytes: 64 << 10,
            log_id: LogId(7),
            cleaner_thread: false,
            ..StoreConfig::default()
        },
        Some(rep.clone() as Arc<dyn LogObserver>),
    )
    .unwrap();
    store.create_table(TableId(1));
    store.write(TableId(1), b"the key", VALUE, RejectRules::default()).unwrap();
    let durable =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), rep.wait_durable(rep.position())).await });
    assert!(matches!(durable, Ok(Ok(()))), "the write did not become durable (tls: {tls}): {durable:?}");
    assert!(backup.stats().bytes_received >= VALUE.len() as u64, "the backup received nothing");
    rep.shutdown();

    // Server -> proxy -> coordinator.
    let control = rt.block_on(async {
        let coordinator = shoal_coordinator::Coordinator::start(shoal_coordinator::CoordinatorConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: root.join(format!("coordinator-{tls}")),
            replicas: Some(0),
            secret: Some(secret.clone()),
            internal_tls: internal("coordinator"),
            ..Default::default()
        })
        .await
        .unwrap();
        let control = Recorder::start(coordinator.local_addr()).await;
        let auth = ControlAuth { secret: Some(secret.clone()), identity: None, tls: internal("server") };
        let mut c = ControlClient::new(control.addr).with_auth(auth);
        // A server enlists (the credential it is issued crosses too), then
        // a table is made on it.
        let addr = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let enlist = ControlRequest::Enlist { previous: None, native: addr(1), resp: addr(2), backup: addr(3) };
        assert!(matches!(c.call(&enlist).await.unwrap(), ControlResponse::Enlisted { .. }));
        c.create_table(TABLE, 0).await.unwrap();
        assert!(c.get_map().await.unwrap().tables.iter().any(|t| t.name == TABLE));
        coordinator.shutdown();
        coordinator.wait().await;
        control
    });
    shoal_replication::dial::set_internal_tls(None);
    rt.shutdown_timeout(Duration::from_secs(1));
    (replication, control)
}

#[test]
fn internal_tls_keeps_replicated_data_and_the_cluster_map_off_the_wire() {
    let root = Root::new("internal-tls-wire");
    // The check works: in clear text the proxies see both.
    let (replication, control) = run(false, &root.0);
    assert!(replication.saw(VALUE), "the value was not seen in clear text: the check cannot work");
    assert!(control.saw(TABLE.as_bytes()), "the table name was not seen in clear text: the check cannot work");
    // With TLS they see records only.
    let (replication, control) = run(true, &root.0);
    assert!(replication.len() > VALUE.len(), "nothing crossed the replication proxy");
    assert!(!replication.saw(VALUE), "the value crossed the replication proxy in clear text");
    assert!(!replication.saw(b"SHOALAU1"), "the cluster handshake crossed in clear text");
    assert!(!control.saw(TABLE.as_bytes()), "the table name crossed the control proxy in clear text");
    assert!(!control.saw(b"create_table"), "a control request crossed in clear text");
}
