//! The control port of a coordinator with a cluster secret: what an
//! unauthenticated peer, a peer with a wrong secret, and a member that
//! impersonates a server are refused, and that nothing changes for it.

use shoal_cluster::auth::{AuthError, ClusterSecret, Credential, Identity};
use shoal_cluster::control::{read_frame, write_frame};
use shoal_cluster::{
    ControlAuth, ControlClient, ControlError, ControlErrorCode, ControlRequest, ControlResponse, ServerId, ServerState,
};
use shoal_coordinator::{Coordinator, CoordinatorConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

fn secret(text: &str) -> ClusterSecret {
    ClusterSecret::from_bytes(text.as_bytes()).unwrap()
}

const SECRET: &str = "the cluster secret of these tests";

async fn start(dir: &std::path::Path, per_ip: usize) -> Coordinator {
    let config = CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        secret: Some(secret(SECRET)),
        max_connections_per_ip: per_ip,
        replicas: Some(0),
        ..CoordinatorConfig::default()
    };
    Coordinator::start(config).await.expect("coordinator starts")
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn enlist_req(previous: Option<ServerId>, port: u16) -> ControlRequest {
    ControlRequest::Enlist { previous, native: addr(port), resp: addr(port + 1), backup: addr(port + 2) }
}

fn member(c: &Coordinator) -> ControlClient {
    ControlClient::new(c.local_addr()).with_auth(ControlAuth {
        secret: Some(secret(SECRET)),
        identity: None,
        tls: None,
    })
}

fn as_server(c: &Coordinator, id: ServerId, credential: Credential) -> ControlClient {
    let identity = Some(Identity { id: id.0, credential });
    ControlClient::new(c.local_addr()).with_auth(ControlAuth { secret: Some(secret(SECRET)), identity, tls: None })
}

async fn enlist(c: &mut ControlClient, port: u16) -> (ServerId, Credential) {
    match c.call(&enlist_req(None, port)).await.unwrap() {
        ControlResponse::Enlisted { server, credential, .. } => {
            (server, Credential::from_hex(&credential.expect("a new server gets a credential")).unwrap())
        }
        other => panic!("{other:?}"),
    }
}

fn code(result: Result<ControlResponse, ControlError>) -> ControlErrorCode {
    match result {
        Err(ControlError::Refused { code, .. }) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// One request in the old protocol (no handshake) on a raw socket.
async fn raw_call(addr: SocketAddr, req: &ControlRequest) -> ControlResponse {
    let mut s = TcpStream::connect(addr).await.unwrap();
    write_frame(&mut s, req).await.unwrap();
    read_frame(&mut s).await.unwrap().expect("an answer")
}

#[tokio::test]
async fn an_unauthenticated_peer_only_reads_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path(), 64).await;
    let mut admin = member(&coordinator);
    let (one, _) = enlist(&mut admin, 7000).await;
    admin.create_table("users", 2).await.unwrap();
    let before = coordinator.map();

    // The read-only requests are answered.
    let at = coordinator.local_addr();
    assert!(matches!(raw_call(at, &ControlRequest::GetMap).await, ControlResponse::Map { .. }));
    assert!(matches!(
        raw_call(at, &ControlRequest::GetTable { name: "users".into() }).await,
        ControlResponse::Table { .. }
    ));
    // Everything else is refused.
    let hostile = [
        ControlRequest::DropTable { name: "users".into() },
        ControlRequest::CreateTable { name: "junk".into(), span: 1, slots: false, chunks: false, stream: None },
        enlist_req(None, 7000),
        enlist_req(Some(one), 7000),
        ControlRequest::Suspect { reporter: one, suspect: one },
        ControlRequest::Recovered { server: one, logs: vec![] },
        ControlRequest::RaiseReplicaFloors { server: one, floors: vec![] },
        ControlRequest::WatchMap { known_version: 0, timeout_ms: 10, server: Some(one) },
    ];
    for req in &hostile {
        match raw_call(at, req).await {
            ControlResponse::Error { code: ControlErrorCode::Unauthorized, .. } => {}
            other => panic!("{req:?} answered {other:?}"),
        }
    }
    // A body larger than an anonymous request may be is not read.
    let mut s = TcpStream::connect(at).await.unwrap();
    let big = ControlRequest::GetTable { name: "x".repeat(shoal_coordinator::MAX_ANONYMOUS_FRAME) };
    write_frame(&mut s, &big).await.unwrap();
    let answer: ControlResponse = read_frame(&mut s).await.unwrap().unwrap();
    assert!(matches!(answer, ControlResponse::Error { code: ControlErrorCode::InvalidRequest, .. }), "{answer:?}");

    // A wrong secret gets no further than the handshake.
    let wrong = ControlAuth { secret: Some(secret("not the cluster secret at all")), identity: None, tls: None };
    let mut stranger = ControlClient::new(at).with_auth(wrong);
    for req in &hostile {
        match stranger.call(req).await {
            Err(ControlError::Auth(AuthError::WrongSecret)) => {}
            other => panic!("{req:?} with a wrong secret: {other:?}"),
        }
    }
    assert_eq!(coordinator.map(), before);
    assert_eq!(coordinator.map().server(one).unwrap().state, ServerState::Up);
}

#[tokio::test]
async fn members_cannot_impersonate_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path(), 64).await;
    let mut admin = member(&coordinator);
    let (one, cred_one) = enlist(&mut admin, 7000).await;
    let (two, cred_two) = enlist(&mut admin, 7100).await;
    let before = coordinator.map();

    // A member without the credential: not under its id, not at its addresses.
    assert_eq!(code(admin.call(&enlist_req(Some(one), 7000)).await), ControlErrorCode::Unauthorized);
    assert_eq!(code(admin.call(&enlist_req(None, 7000)).await), ControlErrorCode::Unauthorized);
    assert_eq!(code(admin.call(&enlist_req(None, 6999)).await), ControlErrorCode::Unauthorized);
    let floors = ControlRequest::RaiseReplicaFloors { server: one, floors: vec![] };
    assert_eq!(code(admin.call(&floors).await), ControlErrorCode::Unauthorized);
    // Another server speaks only for itself.
    let mut other = as_server(&coordinator, two, cred_two);
    let suspect = ControlRequest::Suspect { reporter: one, suspect: two };
    assert_eq!(code(other.call(&suspect).await), ControlErrorCode::Unauthorized);
    let done = ControlRequest::RecoveryDone {
        recovery: 1,
        partition: 0,
        server: one,
        objects: 0,
        bytes: 0,
        replay_ms: 0,
        since: None,
    };
    assert_eq!(code(other.call(&done).await), ControlErrorCode::Unauthorized);
    assert_eq!(code(other.call(&enlist_req(Some(one), 7000)).await), ControlErrorCode::Unauthorized);
    // A wrong credential fails the handshake.
    let mut liar = as_server(&coordinator, one, cred_two);
    match liar.call(&ControlRequest::GetMap).await {
        Err(ControlError::Auth(AuthError::Refused(why))) => assert!(why.contains("credential"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(coordinator.map(), before);

    // The server itself, with its credential, enlists again under its id.
    let mut real = as_server(&coordinator, one, cred_one);
    match real.call(&enlist_req(Some(one), 7000)).await.unwrap() {
        ControlResponse::Enlisted { server, credential, .. } => {
            assert_eq!(server, one);
            assert!(credential.is_none(), "a credential is issued once");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn connections_per_address_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start(dir.path(), 4).await;
    let at = coordinator.local_addr();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(at).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = ControlClient::new(at);
    match c.get_map().await {
        Err(ControlError::Refused { message, .. }) => assert!(message.contains("from this address"), "{message}"),
        other => panic!("{other:?}"),
    }
    drop(idle);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(ControlClient::new(at).get_map().await.is_ok());
}
