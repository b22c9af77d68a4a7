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

use crate::config::{ServerConfig, TlsAuthClients};
use crate::context::ServerStats;
use crate::listener::Connection;
use crate::stream::{Socket, TlsStream};
use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use shoal_common::tls::{load_certs, load_key, load_roots, provider};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::debug;

/// The first byte of a TLS connection: the content type of a handshake
/// record (the ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A connection on a TLS port, past its first bytes.
pub enum Accepted {
    /// The handshake succeeded.
    Tls(Box<TlsStream>),
    /// The client does not speak TLS (its first byte is not a handshake
    /// record); nothing was read from the socket.
    Plain(TcpStream),
}

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
    /// handshake timeout (or until shutdown). A client whose first byte is
    /// not a TLS handshake record is returned as it is ([`Accepted::Plain`])
    /// for its front end to refuse or serve in its own way. `None`, counted
    /// and logged at debug level, if the handshake failed or timed out.
    pub async fn accept(&self, stream: TcpStream, conn: &Connection) -> Option<Accepted> {
        let stats = &conn.ctx.stats;
        let mut shutdown = conn.ctx.shutdown_signal();
        let handshake = tokio::time::timeout(self.handshake_timeout, async {
            let mut first = [0u8; 1];
            match stream.peek(&mut first).await {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(_) if first[0] != TLS_HANDSHAKE_RECORD => return Ok(Accepted::Plain(stream)),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            self.acceptor.accept(Socket::new(stream)).await.map(|s| Accepted::Tls(Box::new(s)))
        });
        let outcome = tokio::select! {
            r = handshake => r,
            _ = shutdown.wait_for(|s| *s) => return None,
        };
        match outcome {
            Ok(Ok(accepted)) => {
                if let Accepted::Tls(_) = accepted {
                    ServerStats::add(&stats.tls_handshakes, 1);
                }
                Some(accepted)
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

/// A throwaway certificate authority and two certificates it signed, as
/// PEM files in one directory: for `shoal local --tls` and tests, never
/// for production (the CA's key is not kept, so nothing more can be
/// signed). The server certificate names `localhost` and 127.0.0.1 and
/// allows client authentication too (servers of a cluster present it to
/// each other); the client certificate is for mutual TLS.
#[derive(Clone, Debug)]
pub struct LocalPki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl LocalPki {
    /// The files' paths in `dir` (whether or not they exist).
    pub fn in_dir(dir: &Path) -> LocalPki {
        LocalPki {
            ca: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        }
    }

    /// The files in `dir`, made (keys mode 0600) unless all are there.
    pub fn create_or_load(dir: &Path) -> Result<LocalPki, String> {
        let pki = LocalPki::in_dir(dir);
        let all = [&pki.ca, &pki.server_cert, &pki.server_key, &pki.client_cert, &pki.client_key];
        if all.iter().all(|p| p.exists()) {
            return Ok(pki);
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let pem = pki.generate().map_err(|e| format!("cannot make TLS certificates: {e}"))?;
        for (path, text, secret) in [
            (&pki.ca, &pem[0], false),
            (&pki.server_cert, &pem[1], false),
            (&pki.server_key, &pem[2], true),
            (&pki.client_cert, &pem[3], false),
            (&pki.client_key, &pem[4], true),
        ] {
            write_file(path, text, secret).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(pki)
    }

    /// The PEM texts: CA certificate, server certificate and key, client
    /// certificate and key.
    fn generate(&self) -> Result<[String; 5], rcgen::Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, KeyPair, KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(DnType::CommonName, "Shoal throwaway CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issue = |names: Vec<String>, cn: &str, usages: Vec<Eku>| -> Result<(String, String), rcgen::Error> {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(names)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = usages;
            Ok((params.signed_by(&key, &ca_cert, &ca_key)?.pem(), key.serialize_pem()))
        };
        let (server, server_key) = issue(
            vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            "shoal server",
            vec![Eku::ServerAuth, Eku::ClientAuth],
        )?;
        let (client, client_key) = issue(Vec::new(), "shoal client", vec![Eku::ClientAuth])?;
        Ok([ca_cert.pem(), server, server_key, client, client_key])
    }
}

/// A throwaway cluster CA for internal TLS (`docs/security.md`, "Internal
/// TLS") and the certificates it signs, as PEM files in one directory: for
/// `shoal local --internal-tls` and tests, never for production. Unlike
/// [`LocalPki`] the CA's key is kept (`ca.key`, mode 0600), so that a
/// process added at a later start gets its certificate from the same CA.
/// Every certificate names [`INTERNAL_NAME`](shoal_cluster::tls::INTERNAL_NAME)
/// and allows server and client authentication.
#[derive(Clone, Debug)]
pub struct InternalPki {
    dir: PathBuf,
    /// The CA certificate: every process's `--internal-tls-ca`.
    pub ca: PathBuf,
    ca_key: PathBuf,
}

const INTERNAL_CA_NAME: &str = "Shoal throwaway internal CA";

impl InternalPki {
    /// The CA in `dir`, made (with `dir`) unless it is there.
    pub fn create_or_load(dir: &Path) -> Result<InternalPki, String> {
        let pki = InternalPki { dir: dir.to_path_buf(), ca: dir.join("ca.crt"), ca_key: dir.join("ca.key") };
        if pki.ca.exists() && pki.ca_key.exists() {
            return Ok(pki);
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let key = rcgen::KeyPair::generate().map_err(|e| format!("cannot make a CA key: {e}"))?;
        let cert = Self::ca_params()
            .and_then(|p| p.self_signed(&key))
            .map_err(|e| format!("cannot make a CA certificate: {e}"))?;
        write_file(&pki.ca_key, &key.serialize_pem(), true)
            .map_err(|e| format!("cannot write {}: {e}", pki.ca_key.display()))?;
        write_file(&pki.ca, &cert.pem(), false).map_err(|e| format!("cannot write {}: {e}", pki.ca.display()))?;
        Ok(pki)
    }

    fn ca_params() -> Result<rcgen::CertificateParams, rcgen::Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(DnType::CommonName, INTERNAL_CA_NAME);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(ca)
    }

    /// The certificate and key files of process `name` (`<name>.crt`,
    /// `<name>.key`, key mode 0600), signed by the CA now unless both are
    /// there.
    pub fn identity(&self, name: &str) -> Result<(PathBuf, PathBuf), String> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, KeyPair};
        let (cert, key) = (self.dir.join(format!("{name}.crt")), self.dir.join(format!("{name}.key")));
        if cert.exists() && key.exists() {
            return Ok((cert, key));
        }
        let make = || -> Result<(String, String), String> {
            let ca_pem = std::fs::read_to_string(&self.ca_key)
                .map_err(|e| format!("cannot read {}: {e}", self.ca_key.display()))?;
            let ca_key = KeyPair::from_pem(&ca_pem).map_err(|e| format!("{}: {e}", self.ca_key.display()))?;
            // The same name and key as ca.crt: what it signs chains to ca.crt.
            let issuer = Self::ca_params().and_then(|p| p.self_signed(&ca_key)).map_err(|e| e.to_string())?;
            let key = KeyPair::generate().map_err(|e| e.to_string())?;
            let mut params = CertificateParams::new(vec![shoal_cluster::tls::INTERNAL_NAME.to_string()])
                .map_err(|e| e.to_string())?;
            params.distinguished_name.push(DnType::CommonName, format!("shoal {name}"));
            params.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
            let cert = params.signed_by(&key, &issuer, &ca_key).map_err(|e| e.to_string())?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (cert_pem, key_pem) = make().map_err(|e| format!("cannot make the internal certificate of {name}: {e}"))?;
        write_file(&key, &key_pem, true).map_err(|e| format!("cannot write {}: {e}", key.display()))?;
        write_file(&cert, &cert_pem, false).map_err(|e| format!("cannot write {}: {e}", cert.display()))?;
        Ok((cert, key))
    }
}

/// Writes `text` to a new file at `path`, readable by its owner only when
/// `secret`.
fn write_file(path: &Path, text: &str, secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(if secret { 0o600 } else { 0o644 }).open(path)?;
    f.write_all(text.as_bytes())
}
