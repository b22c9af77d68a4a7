//! Native-protocol authentication against an in-process server with a
//! password and ACL users: both clients log in with their configured
//! credentials, refuse wrong ones, and an unauthenticated connection gets
//! NOT_AUTHENTICATED for everything but PING and AUTH.

use shoal_client::blocking;
use shoal_client::*;
use shoal_server::auth::Password;
use shoal_server::{ByteSize, Server, ServerConfig};
use std::net::SocketAddr;

fn start() -> (Server, SocketAddr) {
    let dir = std::env::temp_dir().join(format!(
        "shoal-client-auth-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let acl = dir.join("users.acl");
    std::fs::write(&acl, "user alice on >apw\nuser bob off >bpw\n").unwrap();
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        requirepass: Some(Password("s3cret".into())),
        acl_file: Some(acl),
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

fn with(user: &str, password: &str) -> ClientConfig {
    ClientConfig {
        credentials: Some(Credentials { user: user.into(), password: password.into() }),
        ..ClientConfig::default()
    }
}

#[test]
fn blocking_client_logs_in_or_is_refused() {
    let (_server, addr) = start();
    let mut c = blocking::Client::with_config(
        addr,
        ClientConfig { credentials: Some(Credentials::password("s3cret")), ..ClientConfig::default() },
    )
    .unwrap();
    let t = c.create_table("t").unwrap();
    c.write(t, b"k", b"v").unwrap();
    let mut alice = blocking::Client::with_config(addr, with("alice", "apw")).unwrap();
    assert_eq!(alice.read(t, b"k").unwrap().0, b"v");
    for (user, password) in [("default", "wrong"), ("alice", "s3cret"), ("bob", "bpw"), ("nobody", "")] {
        let r = blocking::Client::with_config(addr, with(user, password));
        assert!(matches!(r, Err(ClientError::AuthFailed)), "{user}: {:?}", r.err());
    }
}

#[test]
fn unauthenticated_connection_gets_not_authenticated_except_ping() {
    let (_server, addr) = start();
    let mut conn = Connection::connect(addr, &ClientConfig::default()).unwrap();
    let status = |f: ResponseFrame| f.reply().unwrap().err();
    assert_eq!(status(conn.call(&Request::Ping).unwrap()), None, "PING needs no login");
    let read = Request::Read { table: TableId(1), key: b"k", rules: RejectRules::default() };
    assert_eq!(status(conn.call(&read).unwrap()), Some(ErrorStatus::NotAuthenticated));
    let create = Request::CreateTable { name: "t" };
    assert_eq!(status(conn.call(&create).unwrap()), Some(ErrorStatus::NotAuthenticated));
    // A pipeline: a failed AUTH, then a write: the write is not applied.
    let bad = Request::Auth { user: b"default", password: b"nope" };
    let ids = [conn.send(&bad).unwrap(), conn.send(&create).unwrap()];
    assert_eq!(status(conn.recv_id(ids[0]).unwrap()), Some(ErrorStatus::AuthFailed));
    assert_eq!(status(conn.recv_id(ids[1]).unwrap()), Some(ErrorStatus::NotAuthenticated));
    let good = Request::Auth { user: b"alice", password: b"apw" };
    assert_eq!(status(conn.call(&good).unwrap()), None);
    let get = Request::GetTableId { name: "t" };
    assert_eq!(status(conn.call(&get).unwrap()), Some(ErrorStatus::UnknownTableName), "the create never ran");
    assert_eq!(status(conn.call(&create).unwrap()), None);
    // A failed AUTH on a logged-in connection leaves it logged in.
    assert_eq!(status(conn.call(&bad).unwrap()), Some(ErrorStatus::AuthFailed));
    assert_eq!(status(conn.call(&get).unwrap()), None);
}

#[test]
fn async_client_logs_in_or_is_refused() {
    let (_server, addr) = start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = Client::with_config(addr, with("alice", "apw")).await.unwrap();
        let t = c.create_table("t").await.unwrap();
        c.write(t, b"k", b"v").await.unwrap();
        assert_eq!(c.read(t, b"k").await.unwrap().0, b"v");
        let anonymous = Client::with_config(addr, ClientConfig::default()).await.unwrap();
        match anonymous.read(t, b"k").await {
            Err(ReadError::Client(ClientError::Refused(ErrorStatus::NotAuthenticated))) => {}
            other => panic!("expected NOT_AUTHENTICATED, got {other:?}"),
        }
        match Client::with_config(addr, with("alice", "nope")).await {
            Err(ClientError::AuthFailed) => {}
            Err(e) => panic!("expected a refused login, got {e:?}"),
            Ok(_) => panic!("expected a refused login, got a client"),
        }
    });
}
