//! The state in etcd and leader election among coordinators, against a
//! real one-member etcd (Debian's `etcd-server`; skipped, saying so, when
//! `etcd` is not installed): one campaign wins at a time, a standby wins
//! when the leader's lease ends, and a deposed leader can no longer write.

use shoal_coordinator::local_etcd::{etcd_installed, LocalEtcd};
use shoal_coordinator::{EtcdConfig, Leadership, StateStore};
use std::time::{Duration, Instant};

fn etcd(name: &str) -> Option<(LocalEtcd, tempfile::TempDir)> {
    if !etcd_installed() {
        eprintln!("SKIPPED {name}: etcd is not installed (apt-get install etcd-server; .ci/run installs it)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = || shoal_common::os::free_local_port().unwrap();
    let etcd = LocalEtcd::start(dir.path(), &[(port(), port())]).expect("etcd starts");
    Some((etcd, dir))
}

fn config(etcd: &LocalEtcd, prefix: &str) -> EtcdConfig {
    EtcdConfig { endpoints: etcd.endpoints(), prefix: prefix.into(), lease_secs: 2 }
}

/// `load` or `save` on a blocking thread, as the service calls them.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_elects_one_and_a_standby_takes_over_when_the_leader_stops_renewing() {
    let Some((etcd, _dir)) = etcd("campaign_elects_one...") else { return };
    let config = config(&etcd, "/test/elect");
    let client = config.connect().await.unwrap();

    let first = Leadership::campaign(&client, &config, "127.0.0.1:1").await.unwrap();
    assert!(!first.took_over(), "nobody led before");
    let fence = first.fence();
    assert!(fence.holds());
    let store = std::sync::Arc::new(first.store());
    let s = store.clone();
    assert_eq!(blocking(move || s.load()).await.unwrap(), None);
    let s = store.clone();
    blocking(move || s.save(b"one")).await.unwrap();

    // A second campaign waits while the first renews its lease...
    let (c2, cfg2) = (client.clone(), config.clone());
    let second = tokio::spawn(async move { Leadership::campaign(&c2, &cfg2, "127.0.0.1:2").await.unwrap() });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!second.is_finished(), "two leaders at once");
    assert!(first.fence().holds(), "the leader renews its lease");

    // ... and wins within about the TTL once it stops (a crash: no resign).
    let stopped = Instant::now();
    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(10), second).await.expect("a standby took over").unwrap();
    let waited = stopped.elapsed();
    assert!(waited <= Duration::from_secs(4), "took over after {waited:?}");
    assert!(second.took_over());

    // The deposed leader's store cannot write any more: its fence is down
    // (its lease is over by its own clock) and the leader key is not its.
    assert!(!fence.holds(), "the old leader's lease ended by its own clock before the standby won");
    let s = store.clone();
    let err = blocking(move || s.save(b"stale")).await.unwrap_err();
    assert!(err.to_string().contains("no longer the leader"), "{err}");

    // The new leader reads the last write and writes after it.
    let new = std::sync::Arc::new(second.store());
    let s = new.clone();
    assert_eq!(blocking(move || s.load()).await.unwrap().as_deref(), Some(&b"one"[..]));
    let s = new.clone();
    blocking(move || s.save(b"two")).await.unwrap();
    second.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn save_refuses_a_state_changed_by_someone_else_and_deposes_the_writer() {
    let Some((etcd, _dir)) = etcd("save_refuses...") else { return };
    let config = config(&etcd, "/test/cas");
    let mut client = config.connect().await.unwrap();
    let leader = Leadership::campaign(&client, &config, "127.0.0.1:1").await.unwrap();
    let store = std::sync::Arc::new(leader.store());
    let s = store.clone();
    blocking(move || s.load()).await.unwrap();
    let s = store.clone();
    blocking(move || s.save(b"mine")).await.unwrap();

    // Someone else writes the state (an operator, or a coordinator that
    // believes it leads): the next save fails and the leader steps down.
    client.put("/test/cas/state", "theirs", None).await.unwrap();
    let s = store.clone();
    let err = blocking(move || s.save(b"mine again")).await.unwrap_err();
    assert!(err.to_string().contains("changed under this coordinator"), "{err}");
    tokio::time::timeout(Duration::from_secs(1), leader.lost()).await.expect("the leadership is given up");
    assert!(!leader.fence().holds());
    let got = client.get("/test/cas/state", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"theirs", "the refused save changed nothing");
}
