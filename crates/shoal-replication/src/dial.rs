//! How this process opens replication connections (to backups' ports):
//! over mutual TLS ([`shoal_cluster::tls`]) when the cluster has internal
//! TLS, then with the cluster handshake ([`shoal_cluster::auth`]) once the
//! process has a cluster secret.
//!
//! A process belongs to one cluster: its secret and TLS identity are set
//! once, when it joins ([`set_cluster_secret`], [`set_internal_tls`]),
//! and every replication connection it opens after that (a master's, a
//! reader's, a fence) uses them. Kept here rather than passed to each call
//! because every entry point of [`crate::restore`] and [`crate::master`]
//! dials backups.

use shoal_cluster::auth::{self, ClusterSecret, Credential, Identity, Port};
use shoal_cluster::tls::{InternalStream, InternalTls};
use shoal_cluster::ServerId;
use std::io;
use std::net::SocketAddr;
use std::sync::RwLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

static SECRET: RwLock<Option<ClusterSecret>> = RwLock::new(None);
static TLS: RwLock<Option<InternalTls>> = RwLock::new(None);

/// Sets the TLS identity every later replication connection of this
/// process uses (`None`: clear text).
pub fn set_internal_tls(tls: Option<InternalTls>) {
    *TLS.write().unwrap_or_else(|e| e.into_inner()) = tls;
}

fn tls() -> Option<InternalTls> {
    TLS.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets the secret every later replication connection of this process
/// proves (`None`: no handshake, for a cluster without a secret).
pub fn set_cluster_secret(secret: Option<ClusterSecret>) {
    *SECRET.write().unwrap_or_else(|e| e.into_inner()) = secret;
}

fn secret() -> Option<ClusterSecret> {
    SECRET.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Connects to the backup at `addr`, with internal TLS opens the TLS
/// session, and with a secret runs the handshake claiming to be `master`
/// (backups bind the connection to it; readers and fences claim none).
/// Errors: the connection fails, or a handshake does (as
/// `PermissionDenied`, with the reason).
pub(crate) async fn connect(addr: SocketAddr, master: Option<ServerId>) -> io::Result<InternalStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut stream = match tls() {
        Some(tls) => tls.connect(addr, stream).await?,
        None => InternalStream::Plain(stream),
    };
    if let Some(secret) = secret() {
        // A backup cannot check a credential (it has none to compare with):
        // the identity is the id alone, which the secret vouches for.
        let identity = master.map(|m| Identity { id: m.0, credential: Credential([0; 32]) });
        auth::initiate(&mut stream, &secret, Port::Backup, identity)
            .await
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, format!("backup {addr}: {e}")))?;
    }
    Ok(stream)
}

/// Opens a symmetric-caching peer connection to the server whose backup
/// port is `addr`, as server `me`: TLS and the handshake as
/// [`connect`] does, then a HELLO in [`crate::wire::Mode::Peer`] and its
/// HELLO_OK. What follows on the stream is the peer protocol
/// (`shoal_symcache::wire`). Errors: the connection or a handshake fails,
/// or the backup refuses the HELLO (`ConnectionRefused`, with its reason).
pub async fn connect_peer(addr: SocketAddr, me: ServerId) -> io::Result<InternalStream> {
    connect_handed_over(addr, me, crate::wire::Mode::Peer).await
}

/// Opens a tablet migration's connection to the target whose backup port
/// is `addr`, as source `me` ([`crate::wire::Mode::Migrate`]); what
/// follows is the migration protocol (`docs/migration.md`). Errors as
/// [`connect_peer`]'s.
pub async fn connect_migration(addr: SocketAddr, me: ServerId) -> io::Result<InternalStream> {
    connect_handed_over(addr, me, crate::wire::Mode::Migrate).await
}

/// [`connect_peer`] in `mode`.
async fn connect_handed_over(addr: SocketAddr, me: ServerId, mode: crate::wire::Mode) -> io::Result<InternalStream> {
    use crate::wire::{self, Header, Hello, Kind, HEADER_LEN};
    let mut stream = connect(addr, Some(me)).await?;
    let mut out = Vec::new();
    Hello { mode, master: me, log: shoal_common::LogId(0), log_version: 0 }.encode(&mut out);
    stream.write_all(&out).await?;
    stream.flush().await?;
    let mut head = [0u8; HEADER_LEN];
    stream.read_exact(&mut head).await?;
    // An answer to a HELLO is HELLO_OK (empty) or an ERROR's short text.
    let h = Header::decode(&head, 4096).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut body = vec![0; h.body_len];
    stream.read_exact(&mut body).await?;
    match h.kind {
        Kind::HelloOk => Ok(stream),
        Kind::Error => Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("backup {addr}: {}", wire::decode_text(&body)),
        )),
        kind => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("backup {addr}: {kind:?} in answer to a {mode:?} HELLO"),
        )),
    }
}
