//! Mutual TLS on the internal ports (issue 11, `docs/security.md`,
//! "Internal TLS"): a cluster whose every internal connection is TLS
//! recovers a killed master with every acknowledged write; the control
//! port and the backup port refuse peers without a certificate, with one
//! of another CA, or speaking clear text, and change nothing for them.
//!
//! What is on the wire is checked in `internal_tls_wire.rs` (it sets this
//! process's replication dialer, which is process-wide).

mod common;

use common::*;
use shoal_client::TableId;
use shoal_cluster::auth::{self, AuthError, ClusterSecret, Credential, Identity, Port};
use shoal_cluster::control::{call_blocking, call_blocking_with, read_frame, write_frame};
use shoal_cluster::tls::InternalTls;
use shoal_cluster::{
    ClusterMap, ControlAuth, ControlClient, ControlError, ControlErrorCode, ControlRequest, ControlResponse, ServerId,
    ServerState,
};
use shoal_common::{LogId, SegmentId};
use shoal_replication::backup::{Backup, BackupConfig};
use shoal_replication::wire::{self, Header, Hello, Kind, Mode, Open, HEADER_LEN};
use shoal_server::tls::InternalPki;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

fn owner(map: &ClusterMap, table: TableId, key: &[u8]) -> ServerId {
    map.tablet(table, shoal_client::key_hash(table, key)).expect("a tablet").master
}

/// The server owning the most tablets of `table`.
fn busiest(map: &ClusterMap, table: TableId) -> ServerId {
    let count = |id| map.tablets.iter().filter(|t| t.table == table && t.master == id).count();
    map.servers.iter().map(|s| s.id).max_by_key(|&id| count(id)).expect("servers")
}

fn recovered(map: &ClusterMap, dead: ServerId) -> bool {
    map.server(dead).is_some_and(|s| s.state == ServerState::Down)
        && map.recoveries.is_empty()
        && map.tablets.iter().all(|t| t.master != dead)
}

#[test]
fn a_cluster_with_internal_tls_recovers_a_killed_master_with_every_acknowledged_write() {
    let root = Root::new("internal-tls-recovery");
    // R = 1: after the kill, each of the two left still has a backup.
    let mut cluster = Cluster::start_internal_tls(&root.0, 3, 1);

    // TLS is really in use: clear-text peers are refused, with a clear
    // reason, by the coordinator and by every backup.
    let clear = call_blocking(cluster.coordinator, &ControlRequest::GetMap, Duration::from_secs(5));
    assert!(
        matches!(&clear, Err(ControlError::Refused { code: ControlErrorCode::Unauthorized, message }) if message.contains("TLS")),
        "{clear:?}"
    );
    let secret = ClusterSecret::load(&cluster.secret_file()).unwrap();
    let member = ControlAuth { secret: Some(secret.clone()), identity: None, tls: None };
    let clear = call_blocking_with(cluster.coordinator, &member, &ControlRequest::GetMap, Duration::from_secs(5));
    assert!(matches!(clear, Err(ControlError::Auth(AuthError::TlsRequired))), "{clear:?}");
    let map = cluster.map().expect("the map over TLS");
    for s in &map.servers {
        let mut tcp = std::net::TcpStream::connect(s.backup).unwrap();
        let r = auth::initiate_blocking(&mut tcp, &secret, Port::Backup, None);
        assert!(matches!(r, Err(AuthError::TlsRequired)), "backup {}: {r:?}", s.backup);
    }

    let table = cluster.client().create_table("ledger").unwrap();
    let map = cluster.wait_for_map("the table's tablets", 10, |m| m.tablets.iter().any(|t| t.table == table));
    let victim = busiest(&map, table);
    let old_key = (0..10_000).map(|i| format!("v{i}").into_bytes()).find(|k| owner(&map, table, k) == victim).unwrap();
    let mut c = cluster.client();
    c.write(table, &old_key, b"before").unwrap();
    let load = WriteLoad::start_with(cluster.coordinator, cluster.client_config(), table, 2, |t, n| {
        Some(format!("t{t}-k{}", n % 1000).into_bytes())
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = load.acks();
    assert!(before > 50, "too few writes acknowledged over TLS: {before}");
    let idx = cluster.process_of(victim);
    cluster.servers[idx].kill().unwrap();
    cluster.servers[idx].wait().unwrap();
    let killed = Instant::now();
    cluster.wait_for_map("the recovery", 40, |m| recovered(m, victim));
    eprintln!("recovered over internal TLS in {:?}", killed.elapsed());
    // The victim's key, recovered from its backups over TLS.
    let mut c = cluster.client();
    assert_eq!(c.read(table, &old_key).unwrap().0, b"before");
    std::thread::sleep(Duration::from_secs(1));
    let (ledger, after) = load.finish();
    assert!(after > before, "writes did not go on after the recovery: {before} then {after}");
    check_ledger(&mut c, table, &ledger);
    cluster.kill_all();
}

const SECRET: &[u8] = b"the internal TLS tests' cluster secret";

fn secret() -> ClusterSecret {
    ClusterSecret::from_bytes(SECRET).unwrap()
}

/// The cluster CA with the listener's and a member's certificates, and a
/// second CA with a stranger's.
struct Pki {
    cluster: InternalPki,
    other: InternalPki,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        Pki {
            cluster: InternalPki::create_or_load(&dir.join("cluster-ca")).unwrap(),
            other: InternalPki::create_or_load(&dir.join("other-ca")).unwrap(),
        }
    }

    fn tls(&self, name: &str) -> InternalTls {
        let (cert, key) = self.cluster.identity(name).unwrap();
        InternalTls::load(&cert, &key, &self.cluster.ca).unwrap()
    }

    /// The ways a peer may try to speak TLS to the cluster's listener
    /// (which it trusts): with no certificate, one of another CA, and (to
    /// show the attempt works) a member's.
    fn peers(&self) -> [(&'static str, std::sync::Arc<rustls::ClientConfig>); 3] {
        let (stranger_cert, stranger_key) = self.other.identity("stranger").unwrap();
        let (member_cert, member_key) = self.cluster.identity("member").unwrap();
        [
            ("no certificate", raw_tls::config(&self.cluster.ca, None)),
            ("a certificate of another CA", raw_tls::config(&self.cluster.ca, Some((&stranger_cert, &stranger_key)))),
            ("a member's certificate", raw_tls::config(&self.cluster.ca, Some((&member_cert, &member_key)))),
        ]
    }
}

/// Over TLS as `config` says, with the secret: enlists a server whose
/// native port is `port` (a change of the map).
async fn enlist_over(
    addr: std::net::SocketAddr,
    config: std::sync::Arc<rustls::ClientConfig>,
    port: u16,
) -> Result<(), String> {
    let mut s = raw_tls::connect(addr, config).await?;
    auth::initiate(&mut s, &secret(), Port::Control, None).await.map_err(|e| e.to_string())?;
    let at = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
    let req = ControlRequest::Enlist { previous: None, native: at(port), resp: at(port + 1), backup: at(port + 2) };
    write_frame(&mut s, &req).await.map_err(|e| e.to_string())?;
    match read_frame::<ControlResponse, _>(&mut s).await {
        Ok(Some(ControlResponse::Enlisted { .. })) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_port_refuses_peers_without_a_cluster_certificate_and_changes_nothing() {
    let root = Root::new("internal-tls-control");
    let pki = Pki::new(&root.0);
    let config = shoal_coordinator::CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: root.0.join("coordinator"),
        replicas: Some(0),
        secret: Some(secret()),
        internal_tls: Some(pki.tls("coordinator")),
        ..Default::default()
    };
    let coordinator = shoal_coordinator::Coordinator::start(config).await.unwrap();
    let addr = coordinator.local_addr();
    let version = coordinator.map().version;

    // Refused: TLS without a certificate or with another CA's.
    let [no_cert, other_ca, member] = pki.peers();
    for (what, config) in [no_cert, other_ca] {
        let r = enlist_over(addr, config, 1000).await;
        assert!(r.is_err(), "a peer with {what} was served");
    }
    // Refused: clear text, with the secret (told TLS is required) or
    // without (an `unauthorized` error saying so).
    let clear_member = ControlAuth { secret: Some(secret()), identity: None, tls: None };
    let r = ControlClient::new(addr).with_auth(clear_member).get_map().await;
    assert!(matches!(r, Err(ControlError::Auth(AuthError::TlsRequired))), "{r:?}");
    let r = ControlClient::new(addr).get_map().await;
    assert!(
        matches!(&r, Err(ControlError::Refused { code: ControlErrorCode::Unauthorized, message }) if message.contains("TLS")),
        "{r:?}"
    );
    // Bytes that begin like TLS and are not: closed, nothing panics.
    let mut junk = tokio::net::TcpStream::connect(addr).await.unwrap();
    junk.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef]).await.unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), junk.read_to_end(&mut sink)).await;
    // A dialer of another cluster refuses this coordinator (its CA is not ours).
    let (cert, key) = pki.other.identity("stranger").unwrap();
    let foreign = InternalTls::load(&cert, &key, &pki.other.ca).unwrap();
    let r = ControlClient::new(addr).with_auth(ControlAuth::anonymous_tls(Some(foreign))).get_map().await;
    assert!(r.is_err(), "{r:?}");

    // Nothing changed.
    assert_eq!(coordinator.map().version, version);
    assert!(coordinator.map().servers.is_empty());
    // The same attempt with a member's certificate works: the refusals
    // above were the certificates'.
    let (_, config) = member;
    enlist_over(addr, config, 2000).await.unwrap();
    let map = ControlClient::new(addr).with_auth(ControlAuth::anonymous_tls(Some(pki.tls("client")))).get_map().await;
    let natives: Vec<u16> = map.unwrap().servers.iter().map(|s| s.native.port()).collect();
    assert_eq!(natives, [2000]);
    coordinator.shutdown();
    coordinator.wait().await;
}

/// Reads one replication frame (bounded).
async fn recv_frame<S: AsyncRead + Unpin>(s: &mut S) -> Result<(Kind, Vec<u8>), String> {
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head).await.map_err(|e| e.to_string())?;
    let h = Header::decode(&head, 1 << 20).map_err(|e| e.to_string())?;
    let mut body = vec![0u8; h.body_len];
    s.read_exact(&mut body).await.map_err(|e| e.to_string())?;
    Ok((h.kind, body))
}

/// As master 1 (with the secret): HELLO, then OPEN of a segment; Ok if both
/// are accepted.
async fn open_replica<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Result<(), String> {
    let identity = Identity { id: 1, credential: Credential([0; 32]) };
    auth::initiate(s, &secret(), Port::Backup, Some(identity)).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    Hello { mode: Mode::Tailwind, master: ServerId(1), log: LogId(7), log_version: 1 }.encode(&mut out);
    wire::encode_open(SegmentId(1), &Open { size: 1 << 20, survivor: false, epoch: 1 }, &mut out);
    s.write_all(&out).await.map_err(|e| e.to_string())?;
    s.flush().await.map_err(|e| e.to_string())?;
    for want in [Kind::HelloOk, Kind::Opened] {
        let (kind, body) = recv_frame(s).await?;
        if kind != want {
            return Err(format!("{kind:?}: {}", wire::decode_text(&body)));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backup_port_refuses_peers_without_a_cluster_certificate_and_changes_nothing() {
    let root = Root::new("internal-tls-backup");
    let pki = Pki::new(&root.0);
    let mut config = BackupConfig::new("127.0.0.1:0".parse().unwrap(), root.0.join("backup"));
    config.segment_bytes = 1 << 20;
    config.buffers = 2;
    config.flush_limit = 1;
    config.secret = Some(secret());
    config.tls = Some(pki.tls("backup"));
    let backup = Backup::start(config).unwrap();
    let addr = backup.local_addr();

    let [no_cert, other_ca, member] = pki.peers();
    for (what, config) in [no_cert, other_ca] {
        let r = match raw_tls::connect(addr, config).await {
            Ok(mut s) => open_replica(&mut s).await,
            Err(e) => Err(e),
        };
        assert!(r.is_err(), "a peer with {what} opened a replica");
    }
    // Clear text: a cluster handshake is told TLS is required; a frame
    // (a master without a secret) gets an ERROR saying so.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let r = auth::initiate(&mut tcp, &secret(), Port::Backup, None).await;
    assert!(matches!(r, Err(AuthError::TlsRequired)), "{r:?}");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut out = Vec::new();
    Hello { mode: Mode::Tailwind, master: ServerId(1), log: LogId(7), log_version: 1 }.encode(&mut out);
    tcp.write_all(&out).await.unwrap();
    let (kind, body) = recv_frame(&mut tcp).await.unwrap();
    assert_eq!(kind, Kind::Error);
    assert!(wire::decode_text(&body).contains("speaks only TLS"), "{}", wire::decode_text(&body));
    // Bytes that begin like TLS and are not.
    let mut junk = tokio::net::TcpStream::connect(addr).await.unwrap();
    junk.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00, 0x01, 0x02, 0x03]).await.unwrap();
    drop(junk);

    // Nothing changed: no replica was opened; the refusals were counted.
    let stats = backup.stats();
    assert_eq!(stats.segments_opened, 0);
    assert!(stats.protocol_errors >= 3, "{stats:?}");
    // A member's certificate opens one: the refusals were the certificates'.
    let (_, config) = member;
    let mut s = raw_tls::connect(addr, config).await.unwrap();
    open_replica(&mut s).await.unwrap();
    assert_eq!(backup.stats().segments_opened, 1);
}
