//! How this process opens replication connections (to backups' ports):
//! with the cluster handshake ([`shoal_cluster::auth`]) once the process
//! has a cluster secret, without it before.
//!
//! A process belongs to one cluster: its secret is set once, when it joins
//! ([`set_cluster_secret`]), and every replication connection it opens
//! after that (a master's, a reader's, a fence) proves it. Kept here rather
//! than passed to each call because every entry point of [`crate::restore`]
//! and [`crate::master`] dials backups.

use shoal_cluster::auth::{self, ClusterSecret, Credential, Identity, Port};
use shoal_cluster::ServerId;
use std::io;
use std::net::SocketAddr;
use std::sync::RwLock;
use tokio::net::TcpStream;

static SECRET: RwLock<Option<ClusterSecret>> = RwLock::new(None);

/// Sets the secret every later replication connection of this process
/// proves (`None`: no handshake, for a cluster without a secret).
pub fn set_cluster_secret(secret: Option<ClusterSecret>) {
    *SECRET.write().unwrap_or_else(|e| e.into_inner()) = secret;
}

fn secret() -> Option<ClusterSecret> {
    SECRET.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Connects to the backup at `addr` and, with a secret, runs the handshake
/// claiming to be `master` (backups bind the connection to it; readers and
/// fences claim none). Errors: the connection fails, or the handshake does
/// (as `PermissionDenied`, with the reason).
pub(crate) async fn connect(addr: SocketAddr, master: Option<ServerId>) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
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
