//! TLS for the client's connections to servers whose client ports speak
//! TLS (`docs/security.md`, "TLS"): whom to trust, what to present, and
//! the name a server's certificate must carry.
//!
//! A server is reached at the address the tablet map gives (an IP
//! address), so by default its certificate must name that IP address (a
//! subjectAltName of type IP); [`ClientTls::with_server_name`] checks a
//! DNS name instead, as redis-cli's `--sni` does.

use rustls::pki_types::ServerName;
use shoal_common::tls::{load_certs, load_key, load_roots, provider};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// How a client speaks TLS to servers. Cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of the PEM file `ca`, or without one the
    /// system's trust store; presents `identity` (PEM files of a
    /// certificate chain and its key) to servers that require client
    /// certificates (mutual TLS).
    pub fn new(ca: Option<&Path>, identity: Option<(&Path, &Path)>) -> Result<ClientTls, String> {
        let roots = match ca {
            Some(path) => load_roots(path)?,
            None => {
                let found = rustls_native_certs::load_native_certs();
                let mut roots = rustls::RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err("no trusted CA certificates in the system's store: give a CA file".into());
                }
                roots
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let config = match identity {
            Some((cert, key)) => builder
                .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
                .map_err(|e| format!("TLS certificate {} and key {}: {e}", cert.display(), key.display()))?,
            None => builder.with_no_client_auth(),
        };
        Ok(ClientTls { config: Arc::new(config), server_name: None })
    }

    /// Checks servers' certificates for `name` rather than for the IP
    /// address connected to.
    pub fn with_server_name(mut self, name: &str) -> Result<ClientTls, String> {
        let name = ServerName::try_from(name.to_owned()).map_err(|e| format!("TLS server name '{name}': {e}"))?;
        self.server_name = Some(name);
        Ok(self)
    }

    fn name_for(&self, addr: SocketAddr) -> ServerName<'static> {
        self.server_name.clone().unwrap_or(ServerName::IpAddress(addr.ip().into()))
    }

    /// The client side of a session with the server at `addr`, for the
    /// blocking client (which drives it over its own socket).
    pub(crate) fn session(&self, addr: SocketAddr) -> std::io::Result<rustls::ClientConnection> {
        rustls::ClientConnection::new(self.config.clone(), self.name_for(addr)).map_err(std::io::Error::other)
    }

    /// Runs the handshake over `stream`, connected to `addr`.
    pub(crate) async fn connect(
        &self,
        addr: SocketAddr,
        stream: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        tokio_rustls::TlsConnector::from(self.config.clone()).connect(self.name_for(addr), stream).await
    }
}
