//! The coordinator over the network: the control protocol, restart on the
//! same state directory, long polls, and what bad clients get.

use shoal_cluster::control::{read_frame, write_frame};
use shoal_cluster::{
    ClusterMap, ControlClient, ControlError, ControlErrorCode, ControlRequest, ControlResponse, ReplicaFloor, ServerId,
    ServerState,
};
use shoal_common::{LogId, SegmentId};
use shoal_coordinator::{Coordinator, CoordinatorConfig, MAX_REQUEST_FRAME};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(dir: &Path) -> Coordinator {
    start_with(CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        ..CoordinatorConfig::default()
    })
    .await
}

async fn start_with(config: CoordinatorConfig) -> Coordinator {
    Coordinator::start(config).await.expect("coordinator starts")
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn enlist(c: &mut ControlClient, previous: Option<ServerId>, port: u16) -> (ServerId, LogId, Vec<LogId>) {
    let req = ControlRequest::Enlist { previous, native: addr(port), resp: addr(port + 1), backup: addr(port + 2) };
    match c.call(&req).await.unwrap() {
        ControlResponse::Enlisted { server, log, recover, map, .. } => {
            assert_eq!(map.server(server).unwrap().log, log);
            (server, log, recover)
        }
        other => panic!("{other:?}"),
    }
}

fn refused(result: Result<ControlResponse, ControlError>) -> ControlErrorCode {
    match result {
        Err(ControlError::Refused { code, .. }) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn restart_resumes_the_same_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());

    let empty = c.get_map().await.unwrap();
    assert!(empty.servers.is_empty());
    let code = refused(
        c.call(&ControlRequest::CreateTable {
            name: "early".into(),
            span: 0,
            slots: false,
            chunks: false,
            stream: None,
        })
        .await,
    );
    assert_eq!(code, ControlErrorCode::NoServers);

    let mut servers = Vec::new();
    for i in 0..3 {
        servers.push(enlist(&mut c, None, 7000 + 10 * i).await);
    }
    assert_eq!(servers.iter().map(|s| s.0 .0).collect::<Vec<_>>(), vec![1, 2, 3]);
    let users = c.create_table("users", 0).await.unwrap();
    let logs = c.create_table("logs", 5).await.unwrap();
    let scratch = c.create_table("scratch", 2).await.unwrap();
    assert_eq!((users.id.0, logs.id.0, scratch.id.0), (1, 2, 3));
    assert_eq!(c.call(&ControlRequest::DropTable { name: "scratch".into() }).await.unwrap(), ControlResponse::Ok);
    let code = refused(c.call(&ControlRequest::GetTable { name: "scratch".into() }).await);
    assert_eq!(code, ControlErrorCode::NotFound);

    let before = c.get_map().await.unwrap();
    assert_eq!(before.replicas, 2);
    assert_eq!(before.tablets.len(), 3 + 5);
    coordinator.shutdown();
    coordinator.wait().await;
    assert!(c.get_map().await.is_err(), "the coordinator is gone");

    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let after = c.get_map().await.unwrap();
    assert_eq!(after, before);
    assert_eq!(coordinator.map(), before);
    let got = c.call(&ControlRequest::GetTable { name: "users".into() }).await.unwrap();
    assert_eq!(got, ControlResponse::Table { table: users.clone() });
    // Table ids are not reused across the restart.
    assert_eq!(c.create_table("scratch", 1).await.unwrap().id.0, 4);

    // A whole-cluster restart from the coordinator's side: server 2 comes
    // back with its id, keeps its tablets, gets a new log and must replay
    // the old one.
    let (id, old_log, _) = servers[1];
    let tablets_before: Vec<_> = c.get_map().await.unwrap().tablets_of(id).cloned().collect();
    assert!(!tablets_before.is_empty());
    let (again, new_log, recover) = enlist(&mut c, Some(id), 7010).await;
    assert_eq!(again, id);
    assert_ne!(new_log, old_log);
    assert_eq!(recover, vec![old_log]);
    let map = c.get_map().await.unwrap();
    assert_eq!(map.server(id).unwrap().state, ServerState::Recovering);
    assert_eq!(map.tablets_of(id).cloned().collect::<Vec<_>>(), tablets_before);
    // New log ids are new across the restart too.
    assert!(servers.iter().all(|s| s.1 != new_log));

    // The recover list itself survives a restart.
    coordinator.shutdown();
    coordinator.wait().await;
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let (_, newer_log, recover) = enlist(&mut c, Some(id), 7010).await;
    assert_eq!(recover, vec![old_log, new_log]);
    let ok = c.call(&ControlRequest::Recovered { server: id, logs: recover }).await.unwrap();
    assert_eq!(ok, ControlResponse::Ok);
    let map = c.get_map().await.unwrap();
    assert_eq!(map.server(id).unwrap().state, ServerState::Up);
    assert_eq!(map.server(id).unwrap().log, newer_log);

    let stats = match c.call(&ControlRequest::Stats).await.unwrap() {
        ControlResponse::Stats { stats } => stats,
        other => panic!("{other:?}"),
    };
    assert_eq!(stats["map_version"], map.version);
    assert_eq!(stats["tables"], 3);
    assert_eq!(stats["enlistments"], 1);
    assert!(stats["requests"].as_u64().unwrap() >= 4);
    assert_eq!(stats["servers"].as_array().unwrap().len(), 3);
    coordinator.shutdown();
    coordinator.wait().await;
}

/// `raise_replica_floors` over the network: answered once saved (the
/// floors are in the file, and in the map after a restart), a repeat
/// changes nothing, another server's log is refused.
#[tokio::test]
async fn replica_floors_are_saved_before_the_answer_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let (a, log_a, _) = enlist(&mut c, None, 7200).await;
    let (_, log_b, _) = enlist(&mut c, None, 7210).await;
    let floor = |log, segment, epoch| ReplicaFloor { log, segment: SegmentId(segment), epoch };
    let req = ControlRequest::RaiseReplicaFloors { server: a, floors: vec![floor(log_a, 12, 2), floor(log_a, 3, 4)] };
    let version = c.get_map().await.unwrap().version;
    assert_eq!(c.call(&req).await.unwrap(), ControlResponse::Ok);
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("coordinator.json")).unwrap()).unwrap();
    assert_eq!(file["map"]["replica_floors"].as_array().unwrap().len(), 2, "saved before the answer");
    let map = c.get_map().await.unwrap();
    assert_eq!(map.version, version + 1);
    assert_eq!(c.call(&req).await.unwrap(), ControlResponse::Ok);
    assert_eq!(c.get_map().await.unwrap().version, version + 1, "a repeat changes nothing");
    let wrong = ControlRequest::RaiseReplicaFloors { server: a, floors: vec![floor(log_b, 1, 2)] };
    assert_eq!(refused(c.call(&wrong).await), ControlErrorCode::InvalidRequest);

    coordinator.shutdown();
    coordinator.wait().await;
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    let after = c.get_map().await.unwrap();
    assert_eq!(after, map);
    let mut floors: Vec<_> = after.replica_floors_of(log_a).map(|(s, e)| (s.0, e)).collect();
    floors.sort();
    assert_eq!(floors, vec![(3, 4), (12, 2)]);
    coordinator.shutdown();
    coordinator.wait().await;
}

#[tokio::test]
async fn replicas_flag_applies_to_a_resumed_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let mut c = ControlClient::new(coordinator.local_addr());
    for i in 0..5 {
        enlist(&mut c, None, 7100 + 10 * i).await;
    }
    let auto = c.get_map().await.unwrap();
    assert_eq!(auto.replicas, 3);
    // Stopped, not just dropped: the directory is one coordinator's at a time.
    coordinator.shutdown();
    coordinator.wait().await;

    let config = CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        replicas: Some(1),
        ..CoordinatorConfig::default()
    };
    let coordinator = start_with(config).await;
    let map = ControlClient::new(coordinator.local_addr()).get_map().await.unwrap();
    assert_eq!(map.replicas, 1);
    assert_eq!(map.version, auto.version + 1);
    assert_eq!(map.servers, auto.servers);
}

async fn watch(c: &mut ControlClient, known_version: u64, timeout_ms: u64) -> ClusterMap {
    match c.call(&ControlRequest::WatchMap { known_version, timeout_ms, server: None }).await.unwrap() {
        ControlResponse::Map { map } => map,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn watch_map_wakes_on_a_change_and_times_out_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let addr = coordinator.local_addr();
    let mut c = ControlClient::new(addr);
    let version = c.get_map().await.unwrap().version;

    // An older version is answered at once.
    let started = Instant::now();
    assert_eq!(watch(&mut c, version - 1, 30_000).await.version, version);
    assert!(started.elapsed() < Duration::from_secs(5));

    // No change: the current map after the timeout.
    let started = Instant::now();
    assert_eq!(watch(&mut c, version, 300).await.version, version);
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A change wakes the watcher long before its timeout.
    let watcher = tokio::spawn(async move {
        let mut w = ControlClient::new(addr);
        let started = Instant::now();
        let map = watch(&mut w, version, 30_000).await;
        (map, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!watcher.is_finished());
    enlist(&mut c, None, 7200).await;
    let (map, waited) = tokio::time::timeout(Duration::from_secs(10), watcher).await.unwrap().unwrap();
    assert!(map.version > version);
    assert_eq!(map.servers.len(), 1);
    assert!(waited < Duration::from_secs(10), "{waited:?}");

    // Shutdown answers a pending watch instead of keeping it.
    let current = map.version;
    let watcher = tokio::spawn(async move { watch(&mut ControlClient::new(addr), current, 30_000).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    coordinator.shutdown();
    let map = tokio::time::timeout(Duration::from_secs(10), watcher).await.unwrap().unwrap();
    assert_eq!(map.version, current);
    tokio::time::timeout(Duration::from_secs(10), coordinator.wait()).await.unwrap();
}

/// Reads the one answer a bad client gets, then expects the connection
/// closed.
async fn error_then_close(stream: &mut TcpStream) -> ControlErrorCode {
    let resp: ControlResponse = tokio::time::timeout(Duration::from_secs(10), read_frame(stream))
        .await
        .expect("an answer in time")
        .expect("a frame")
        .expect("not closed yet");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0, "the coordinator closes after the error");
    match resp {
        ControlResponse::Error { code, .. } => code,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_input_gets_an_error_and_others_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path()).await;
    let addr = coordinator.local_addr();
    let mut good = ControlClient::new(addr);
    enlist(&mut good, None, 7300).await;
    let before = good.get_map().await.unwrap();

    // Not the control protocol at all.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert_eq!(error_then_close(&mut s).await, ControlErrorCode::InvalidRequest);

    // A length over the limit, refused before any body is read.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&((MAX_REQUEST_FRAME + 1) as u32).to_le_bytes()).await.unwrap();
    assert_eq!(error_then_close(&mut s).await, ControlErrorCode::InvalidRequest);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    assert_eq!(error_then_close(&mut s).await, ControlErrorCode::InvalidRequest);

    // Well framed, but not a request: bad JSON, an unknown op, a wrong field.
    for body in [&b"{{{"[..], br#"{"op":"format_disk"}"#, br#"{"op":"create_table","name":7,"span":1}"#] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        s.write_all(&frame).await.unwrap();
        assert_eq!(error_then_close(&mut s).await, ControlErrorCode::InvalidRequest);
    }

    // A valid request on the same connection after a good one still works;
    // a bad one after it closes only that connection.
    let mut s = TcpStream::connect(addr).await.unwrap();
    write_frame(&mut s, &ControlRequest::GetMap).await.unwrap();
    let resp: ControlResponse = read_frame(&mut s).await.unwrap().unwrap();
    assert!(matches!(resp, ControlResponse::Map { .. }));
    s.write_all(&[0xff; 8]).await.unwrap();
    assert_eq!(error_then_close(&mut s).await, ControlErrorCode::InvalidRequest);

    // A client that stops halfway through a frame holds only its own
    // connection: the others carry on meanwhile.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(&100u32.to_le_bytes()).await.unwrap();
    stalled.write_all(b"{\"op\":").await.unwrap();

    // Invalid names and spans are refused as requests, and the connection stays.
    let code = refused(
        good.call(&ControlRequest::CreateTable {
            name: String::new(),
            span: 1,
            slots: false,
            chunks: false,
            stream: None,
        })
        .await,
    );
    assert_eq!(code, ControlErrorCode::InvalidRequest);
    let code = refused(
        good.call(&ControlRequest::CreateTable {
            name: "x".repeat(256),
            span: 1,
            slots: false,
            chunks: false,
            stream: None,
        })
        .await,
    );
    assert_eq!(code, ControlErrorCode::InvalidRequest);
    let code = refused(
        good.call(&ControlRequest::CreateTable {
            name: "t".into(),
            span: u32::MAX,
            slots: false,
            chunks: false,
            stream: None,
        })
        .await,
    );
    assert_eq!(code, ControlErrorCode::InvalidRequest);

    assert_eq!(good.get_map().await.unwrap(), before, "nothing bad reached the state");
    good.create_table("t", 2).await.unwrap();
    drop(stalled);
}

#[tokio::test]
async fn connections_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_with(CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        max_connections: 2,
        ..CoordinatorConfig::default()
    })
    .await;
    let addr = coordinator.local_addr();
    let mut a = ControlClient::new(addr);
    let mut b = ControlClient::new(addr);
    a.get_map().await.unwrap();
    b.get_map().await.unwrap();

    let mut third = TcpStream::connect(addr).await.unwrap();
    assert_eq!(error_then_close(&mut third).await, ControlErrorCode::Internal);

    drop(b);
    // The slot frees once the coordinator sees the close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = ControlClient::new(addr);
        match c.get_map().await {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("no slot freed: {e}"),
        }
    }
    a.get_map().await.unwrap();
}

#[tokio::test]
async fn start_refuses_a_damaged_state_file_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("coordinator.json"), b"{\"format\":1,\"map\":").unwrap();
    let config = CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        ..CoordinatorConfig::default()
    };
    let err = Coordinator::start(config).await.err().expect("refused");
    assert!(err.to_string().contains("unusable"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("coordinator.json")).unwrap(), b"{\"format\":1,\"map\":");
}
