//! TLS on the client ports (`--tls-cert`, `--tls-key`, `--tls-ca`;
//! `docs/security.md`, "TLS"): loading the certificates, the handshake and
//! its time bound. With TLS on, both client ports (RESP and native) speak
//! only TLS; the front ends serve the resulting [`TlsStream`] with the same
//! code as a plain socket (`stream`).
//!
//! Where the handshake runs: on the worker that serves the connection, as
//! the first step of the connection's task (`listener` hands the plain
//! socket to the worker, as for a plain port). So the listener never waits
//! for a client, a slow or silent client holds only its own task, and the
//! session is created on the runtime whose epoll reads its socket. The
//! connection counts toward `max_connections` from its accept, handshake
//! included.
//!
//! A handshake that fails (not TLS, a certificate the CA did not sign, no
//! certificate where one is required) or does not finish within
//! `tls_handshake_timeout_ms` closes the connection and is counted
//! (`tls_handshake_failures`, `tls_handshake_timeouts`); rustls reports
//! bad input as errors, and nothing here panics on it.
//!
//! The crypto provider is *ring*, chosen explicitly (the process-wide
//! default is never installed or relied on).

use crate::config::{ServerConfig, TlsAuthClients};
use crate::context::ServerStats;
use crate::listener::Connection;
use crate::stream::{Socket, TlsStream};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::debug;

/// A server's TLS settings, loaded once at start.
pub struct ServerTls {
    acceptor: TlsAcceptor,
    /// How this server connects to other servers' RESP ports when it
    /// forwards a command (`resp::forward`): it verifies them with the CA
    /// of `--tls-ca` and presents its own certificate, since they may
    /// require one. `None` without a CA.
    connector: Option<TlsConnector>,
    handshake_timeout: Duration,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("handshake_timeout", &self.handshake_timeout).finish_non_exhaustive()
    }
}

/// The crypto provider of every TLS configuration Shoal makes.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerTls {
    /// The TLS settings of `config`, or `None` when TLS is off (no
    /// `tls_cert`). Errors name the file and what is wrong with it.
    pub fn from_config(config: &ServerConfig) -> Result<Option<ServerTls>, String> {
        let (cert, key) = match (&config.tls_cert, &config.tls_key) {
            (None, None) => {
                if config.tls_ca.is_some() {
                    return Err("tls_ca needs tls_cert and tls_key (TLS is off without them)".into());
                }
                return Ok(None);
            }
            (Some(c), Some(k)) => (c, k),
            _ => return Err("tls_cert and tls_key go together: give both or neither".into()),
        };
        let chain = load_certs(cert)?;
        let key_der = load_key(key)?;
        let roots = config.tls_ca.as_deref().map(load_roots).transpose()?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match &roots {
            Some(roots) if config.tls_auth_clients != TlsAuthClients::No => {
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots.clone()), provider());
                let verifier = match config.tls_auth_clients {
                    TlsAuthClients::Optional => verifier.allow_unauthenticated(),
                    _ => verifier,
                };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("TLS CA: {e}"))?)
            }
            _ => builder.with_no_client_auth(),
        };
        let server = builder
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(|e| format!("TLS certificate {} and key {}: {e}", cert.display(), key.display()))?;
        let connector = match roots {
            Some(roots) => {
                let client = rustls::ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("TLS: {e}"))?
                    .with_root_certificates(roots)
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
                Some(TlsConnector::from(Arc::new(client)))
            }
            None => None,
        };
        Ok(Some(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector,
            handshake_timeout: config.tls_handshake_timeout(),
        }))
    }

    /// Runs the server side of the handshake on `stream` within the
    /// handshake timeout (or until shutdown); `None`, counted and logged at
    /// debug level, if it failed.
    pub async fn accept(&self, stream: TcpStream, conn: &Connection) -> Option<TlsStream> {
        let stats = &conn.ctx.stats;
        let mut shutdown = conn.ctx.shutdown_signal();
        let handshake = tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(Socket::new(stream)));
        let outcome = tokio::select! {
            r = handshake => r,
            _ = shutdown.wait_for(|s| *s) => return None,
        };
        match outcome {
            Ok(Ok(tls)) => {
                ServerStats::add(&stats.tls_handshakes, 1);
                Some(tls)
            }
            Ok(Err(e)) => {
                ServerStats::add(&stats.tls_handshake_failures, 1);
                debug!("connection {} from {}: TLS handshake failed: {e}", conn.id, conn.peer);
                None
            }
            Err(_) => {
                ServerStats::add(&stats.tls_handshake_timeouts, 1);
                debug!(
                    "connection {} from {}: no TLS handshake within {:?}: closing",
                    conn.id, conn.peer, self.handshake_timeout
                );
                None
            }
        }
    }

    /// Connects TLS to another server of the cluster at `addr` (whose
    /// certificate must name its IP address), over `stream`.
    pub async fn connect_peer(
        &self,
        addr: std::net::SocketAddr,
        stream: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let Some(connector) = &self.connector else {
            return Err(std::io::Error::other("TLS to other servers needs the CA of --tls-ca"));
        };
        let handshake = connector.connect(ServerName::IpAddress(addr.ip().into()), stream);
        match tokio::time::timeout(self.handshake_timeout, handshake).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")),
        }
    }

    /// Whether this server can forward to other servers over TLS.
    pub fn can_connect_peers(&self) -> bool {
        self.connector.is_some()
    }
}

/// The certificates of a PEM file, in order (the server's first, then the
/// chain).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read TLS certificate file {}: {e}", path.display()))?
        .collect();
    let certs = certs.map_err(|e| format!("TLS certificate file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("TLS certificate file {} holds no certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("TLS key file {}: {e}", path.display()))
}

/// The CA certificates of a PEM file, as trust roots.
pub fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| format!("TLS CA file {}: {e}", path.display()))?;
    }
    Ok(roots)
}
