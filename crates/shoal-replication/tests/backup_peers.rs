//! Symmetric-caching peers on the backup port (`wire::Mode::Peer`): after
//! the cluster handshake and a peer HELLO the connection is handed to the
//! server's `PeerHandler`, which sees the id the handshake claimed; a
//! backup without a handler, or a peer that claimed no id, is refused.

mod backup_support;

use backup_support::*;
use parking_lot::Mutex;
use shoal_cluster::auth::{self, ClusterSecret, Credential, Identity, Port};
use shoal_cluster::tls::InternalStream;
use shoal_cluster::ServerId;
use shoal_engine::LogId;
use shoal_replication::backup::{Backup, PeerHandler, PeerHandlers};
use shoal_replication::wire::{Hello, Kind, Mode};
use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn secret() -> ClusterSecret {
    ClusterSecret::from_bytes(b"the peer tests' cluster secret!!").unwrap()
}

/// Who connected, as the handler saw them.
#[derive(Default)]
struct Echo {
    seen: Mutex<Vec<Option<ServerId>>>,
}

/// Echoes every byte back.
struct EchoHandler(Arc<Echo>);

impl PeerHandler for EchoHandler {
    fn serve(
        &self,
        server: Option<ServerId>,
        _addr: SocketAddr,
        mut stream: InternalStream,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.0.seen.lock().push(server);
        Box::pin(async move {
            let mut buf = [0u8; 256];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if stream.write_all(&buf[..n]).await.is_err() || stream.flush().await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    }
}

fn start(dir: &std::path::Path, echo: Option<Arc<Echo>>) -> Backup {
    let mut c = config(dir);
    c.secret = Some(secret());
    c.peers = echo.map(|e| PeerHandlers(Arc::new(EchoHandler(e))));
    Backup::start(c).unwrap()
}

/// A peer that proved the secret claiming server `id` (0: none) and said
/// a peer HELLO; returns the answer's kind and text.
fn peer_hello(addr: SocketAddr, id: u64) -> (Peer, Kind, String) {
    let mut p = Peer::connect(addr);
    let identity = (id != 0).then_some(Identity { id, credential: Credential([0; 32]) });
    auth::initiate_blocking(&mut p.s, &secret(), Port::Backup, identity).expect("the handshake succeeds");
    let mut out = Vec::new();
    Hello { mode: Mode::Peer, master: ServerId(id), log: LogId(0), log_version: 0 }.encode(&mut out);
    p.send(&out);
    let f = p.recv().expect("an answer to HELLO");
    (p, f.kind, f.text())
}

#[test]
fn peer_hello_hands_the_connection_to_the_handler() {
    let dir = tempfile::tempdir().unwrap();
    let echo = Arc::new(Echo::default());
    let backup = start(dir.path(), Some(echo.clone()));
    let (mut p, kind, text) = peer_hello(backup.local_addr(), 5);
    assert_eq!(kind, Kind::HelloOk, "{text}");
    p.s.write_all(b"not a replication frame").unwrap();
    let mut back = [0u8; 23];
    p.s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"not a replication frame", "the handler, not the backup, reads what follows");
    assert_eq!(*echo.seen.lock(), vec![Some(ServerId(5))]);
}

#[test]
fn peer_hello_without_a_claimed_id_or_a_handler_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let echo = Arc::new(Echo::default());
    let backup = start(dir.path(), Some(echo.clone()));
    let (mut p, kind, text) = peer_hello(backup.local_addr(), 0);
    assert_eq!(kind, Kind::Error);
    assert!(text.contains("claimed a server id"), "{text}");
    assert!(p.recv().is_none());

    let dir = tempfile::tempdir().unwrap();
    let plain = start(dir.path(), None);
    let (_p, kind, text) = peer_hello(plain.local_addr(), 5);
    assert_eq!(kind, Kind::Error);
    assert!(text.contains("no symmetric-caching peers"), "{text}");
    assert!(echo.seen.lock().is_empty());
}

#[test]
fn connect_peer_dials_with_the_process_secret() {
    let dir = tempfile::tempdir().unwrap();
    let echo = Arc::new(Echo::default());
    let backup = start(dir.path(), Some(echo.clone()));
    let addr = backup.local_addr();
    shoal_replication::dial::set_cluster_secret(Some(secret()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut s = shoal_replication::dial::connect_peer(addr, ServerId(9)).await.expect("dialled");
        s.write_all(b"hi").await.unwrap();
        s.flush().await.unwrap();
        let mut back = [0u8; 2];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hi");
    });
    assert_eq!(*echo.seen.lock(), vec![Some(ServerId(9))]);
}

/// Tablet migration's connections (`wire::Mode::Migrate`, `docs/migration.md`)
/// go to the migration handler, never to the symmetric-caching one, and
/// a backup without a migration handler refuses them.
#[test]
fn migrate_hello_goes_to_the_migration_handler_only() {
    let dir = tempfile::tempdir().unwrap();
    let peers = Arc::new(Echo::default());
    let migrations = Arc::new(Echo::default());
    let mut c = config(dir.path());
    c.secret = Some(secret());
    c.peers = Some(PeerHandlers(Arc::new(EchoHandler(peers.clone()))));
    c.migrations = Some(PeerHandlers(Arc::new(EchoHandler(migrations.clone()))));
    let backup = Backup::start(c).unwrap();
    let addr = backup.local_addr();
    shoal_replication::dial::set_cluster_secret(Some(secret()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut s = shoal_replication::dial::connect_migration(addr, ServerId(4)).await.expect("dialled");
        s.write_all(b"batch").await.unwrap();
        s.flush().await.unwrap();
        let mut back = [0u8; 5];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"batch");
    });
    assert_eq!(*migrations.seen.lock(), vec![Some(ServerId(4))]);
    assert!(peers.seen.lock().is_empty());

    let dir = tempfile::tempdir().unwrap();
    let plain = start(dir.path(), Some(peers.clone()));
    let refused = rt.block_on(shoal_replication::dial::connect_migration(plain.local_addr(), ServerId(4)));
    let e = refused.err().expect("refused");
    assert!(e.to_string().contains("no tablet migrations"), "{e}");
    assert!(peers.seen.lock().is_empty());
}
