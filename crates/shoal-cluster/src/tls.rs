//! Mutual TLS on the internal ports (`--internal-tls-cert`,
//! `--internal-tls-key`, `--internal-tls-ca`; `docs/security.md`,
//! "Internal TLS"): the coordinator's control port and every server's
//! backup port, and everyone who dials them.
//!
//! Both ends present a certificate signed by the cluster's CA and check
//! the other's against it. A certificate must name [`INTERNAL_NAME`]
//! (a DNS subjectAltName) and allow both server and client
//! authentication: the map's addresses may be unspecified (`0.0.0.0`) or
//! translated, so names tell nothing; what a peer proves is that the
//! cluster's CA vouched for it. Which server it is, and whether it may
//! change the cluster, is still proved by the cluster handshake
//! ([`crate::auth`]), which runs inside the TLS session.
//!
//! A TLS listener never reads clear text as a protocol: [`InternalTls::accept`]
//! peeks at the first byte and hands a peer that does not open with a TLS
//! handshake record back to the caller ([`Accepted::Clear`]), which refuses
//! it in its protocol's words ([`crate::auth::TLS_ONLY`] for a clear
//! cluster handshake). Both handshakes are bounded by
//! [`auth::HANDSHAKE_TIMEOUT`](crate::auth::HANDSHAKE_TIMEOUT), and rustls
//! bounds what a session buffers (about 100 KiB) and reports hostile input
//! as errors.
//!
//! [`InternalStream`] is what internal connections run over: a plain
//! socket or a TLS session, as an enum so that the clear path stays the
//! socket's own calls.

use crate::auth::HANDSHAKE_TIMEOUT;
use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use shoal_common::tls::{load_certs, load_key, load_roots, provider};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, Interest, ReadBuf, Ready};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The name every internal certificate carries (a DNS subjectAltName) and
/// every dialer checks.
pub const INTERNAL_NAME: &str = "shoal-internal";

/// The first byte of a TLS connection: the content type of a handshake
/// record (the ClientHello).
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A process's TLS identity on the internal ports: its certificate and
/// key, and the cluster CA it checks peers against. Cheap to clone.
#[derive(Clone)]
pub struct InternalTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for InternalTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InternalTls(..)")
    }
}

/// A connection on a TLS internal port, past its first byte.
pub enum Accepted {
    /// The TLS handshake succeeded: the peer holds a certificate of the
    /// cluster's CA.
    Tls(InternalStream),
    /// The peer speaks clear text (its first byte is no TLS handshake
    /// record); nothing was read.
    Clear(TcpStream),
}

impl InternalTls {
    /// Loads PEM files: `cert` (the certificate, then its chain), `key`
    /// and `ca` (the cluster CA's certificates). Errors name the file and
    /// what is wrong with it.
    pub fn load(cert: &Path, key: &Path, ca: &Path) -> Result<InternalTls, String> {
        let chain = load_certs(cert)?;
        let key_der = load_key(key)?;
        let roots = Arc::new(load_roots(ca)?);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| format!("internal TLS CA {}: {e}", ca.display()))?;
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(|e| format!("internal TLS certificate {} and key {}: {e}", cert.display(), key.display()))?;
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key_der)
            .map_err(|e| format!("internal TLS certificate {} and key {}: {e}", cert.display(), key.display()))?;
        Ok(InternalTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// [`InternalTls::load`] from optional paths: all three or none (`Ok(None)`,
    /// internal TLS off). `what` names the flags in errors.
    pub fn from_paths(
        cert: Option<&Path>,
        key: Option<&Path>,
        ca: Option<&Path>,
    ) -> Result<Option<InternalTls>, String> {
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => InternalTls::load(cert, key, ca).map(Some),
            _ => Err("internal TLS needs all three of --internal-tls-cert, --internal-tls-key and \
                      --internal-tls-ca (TOML internal_tls_cert, internal_tls_key, internal_tls_ca), or none"
                .into()),
        }
    }

    /// The listener's side: waits (within [`HANDSHAKE_TIMEOUT`]) for the
    /// peer's first byte; a TLS peer must then finish the handshake,
    /// presenting a certificate of the cluster CA, within the same time.
    /// Errors: the peer closed or sent nothing in time, or the handshake
    /// failed (no certificate, another CA's, not TLS after all).
    pub async fn accept(&self, stream: TcpStream) -> io::Result<Accepted> {
        let handshake = async {
            let mut first = [0u8; 1];
            match stream.peek(&mut first).await? {
                0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before the TLS handshake")),
                _ if first[0] != TLS_HANDSHAKE_RECORD => return Ok(Accepted::Clear(stream)),
                _ => {}
            }
            let tls = self.acceptor.accept(stream).await?;
            Ok(Accepted::Tls(InternalStream::Tls(Box::new(tokio_rustls::TlsStream::Server(tls)))))
        };
        within_handshake_time(handshake).await
    }

    /// The dialer's side over `stream`, connected to `addr` (for errors):
    /// the handshake within [`HANDSHAKE_TIMEOUT`]. Errors: it failed (the
    /// peer speaks no TLS, or its certificate is not the cluster CA's).
    pub async fn connect(&self, addr: SocketAddr, stream: TcpStream) -> io::Result<InternalStream> {
        let handshake = self.connector.connect(internal_name(), stream);
        match within_handshake_time(handshake).await {
            Ok(tls) => Ok(InternalStream::Tls(Box::new(tokio_rustls::TlsStream::Client(tls)))),
            Err(e) => Err(handshake_error(addr, e)),
        }
    }

    /// [`InternalTls::connect`] over a blocking socket (whose timeouts bound
    /// each read and write of the handshake, which runs here).
    pub fn connect_blocking(
        &self,
        addr: SocketAddr,
        mut stream: std::net::TcpStream,
    ) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>> {
        let mut conn = rustls::ClientConnection::new(self.connector.config().clone(), internal_name())
            .map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut stream).map_err(|e| handshake_error(addr, e))?;
        }
        Ok(rustls::StreamOwned::new(conn, stream))
    }
}

fn internal_name() -> ServerName<'static> {
    ServerName::try_from(INTERNAL_NAME).expect("a valid DNS name")
}

/// A dialer's handshake failure, with the likely cause.
fn handshake_error(addr: SocketAddr, e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "internal TLS handshake with {addr} failed: {e} (the peer must have internal TLS on, \
             with a certificate of the same cluster CA naming {INTERNAL_NAME})"
        ),
    )
}

async fn within_handshake_time<T>(f: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => {
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}")))
        }
    }
}

/// An internal connection's bytes: a plain socket, or a TLS session over
/// one. Reads and writes of the plain variant are the socket's own.
pub enum InternalStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl From<TcpStream> for InternalStream {
    fn from(s: TcpStream) -> InternalStream {
        InternalStream::Plain(s)
    }
}

impl InternalStream {
    /// The socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            InternalStream::Plain(s) => s,
            InternalStream::Tls(s) => s.get_ref().0,
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, InternalStream::Tls(_))
    }

    /// Waits (at most `timeout`) for the peer's first bytes and returns up
    /// to 4 of them without consuming them (`None`: closed first). Under
    /// TLS these are the start of the first record's data (a Shoal peer
    /// sends its first message in one record), and may be fewer than 4.
    pub async fn peek_start(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        match self {
            InternalStream::Plain(s) => Ok(crate::auth::peek_start(s, timeout).await?.map(|b| b.to_vec())),
            InternalStream::Tls(s) => {
                use tokio::io::AsyncBufReadExt;
                match tokio::time::timeout(timeout, s.fill_buf()).await {
                    Ok(Ok([])) => Ok(None),
                    Ok(Ok(data)) => Ok(Some(data[..data.len().min(4)].to_vec())),
                    Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
                    Ok(Err(e)) => Err(e),
                    Err(_) => {
                        Err(io::Error::new(io::ErrorKind::TimedOut, "the peer sent nothing within the handshake time"))
                    }
                }
            }
        }
    }

    /// Waits until the peer has sent something, without consuming it;
    /// false when it closed (or the connection failed).
    pub async fn wait_data(&mut self) -> bool {
        match self {
            InternalStream::Plain(s) => matches!(s.peek(&mut [0u8; 1]).await, Ok(n) if n > 0),
            InternalStream::Tls(s) => {
                use tokio::io::AsyncBufReadExt;
                matches!(s.fill_buf().await, Ok(data) if !data.is_empty())
            }
        }
    }

    /// Halves to read and write concurrently.
    pub fn split(self) -> (InternalReadHalf, InternalWriteHalf) {
        match self {
            InternalStream::Plain(s) => {
                let (r, w) = s.into_split();
                (InternalReadHalf::Plain(r), InternalWriteHalf::Plain(w))
            }
            InternalStream::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (InternalReadHalf::Tls(r), InternalWriteHalf::Tls(w))
            }
        }
    }

    /// Waits until the stream may be read or written as `interest` asks,
    /// as `TcpStream::ready` does. Under TLS, decrypted bytes not yet read
    /// count as readable, and records the session still holds are sent
    /// whenever the socket takes them (so bytes [`try_write`](Self::try_write)
    /// accepted always leave).
    pub async fn ready(&mut self, interest: Interest) -> io::Result<Ready> {
        let tls = match self {
            InternalStream::Plain(s) => return s.ready(interest).await,
            InternalStream::Tls(s) => s,
        };
        loop {
            flush_now(tls)?;
            let (_, session) = tls.get_ref();
            if interest.is_readable() && !session.wants_read() {
                return Ok(Ready::READABLE);
            }
            let pending_out = session.wants_write();
            let want = if pending_out { interest | Interest::WRITABLE } else { interest };
            let ready = tls.get_ref().0.ready(want).await?;
            let for_caller = (interest.is_readable() && (ready.is_readable() || ready.is_read_closed()))
                || (interest.is_writable() && ready.is_writable());
            if for_caller {
                return Ok(ready);
            }
            // Only the session's own records could be written: loop to send them.
        }
    }

    /// A read that never waits: `WouldBlock` when nothing is there, `Ok(0)`
    /// at the end of the stream (under TLS also when the peer closed the
    /// socket without a close_notify: every internal protocol delimits its
    /// own messages).
    pub fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            InternalStream::Plain(s) => s.try_read(buf),
            InternalStream::Tls(s) => {
                let mut rb = ReadBuf::new(buf);
                match poll_once(|cx| Pin::new(&mut **s).poll_read(cx, &mut rb)) {
                    Poll::Ready(Ok(())) => Ok(rb.filled().len()),
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                    Poll::Ready(Err(e)) => Err(e),
                    Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                }
            }
        }
    }

    /// A write that never waits: `WouldBlock` when nothing was taken. Under
    /// TLS the bytes taken may still be in the session's records;
    /// [`ready`](Self::ready) sends them.
    pub fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            InternalStream::Plain(s) => s.try_write(buf),
            InternalStream::Tls(s) => match poll_once(|cx| Pin::new(&mut **s).poll_write(cx, buf)) {
                Poll::Ready(r) => r,
                Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
            },
        }
    }
}

/// Sends what the session holds, as far as the socket takes it now.
fn flush_now(tls: &mut tokio_rustls::TlsStream<TcpStream>) -> io::Result<()> {
    if !tls.get_ref().1.wants_write() {
        return Ok(());
    }
    match poll_once(|cx| Pin::new(&mut *tls).poll_flush(cx)) {
        Poll::Ready(r) => r,
        Poll::Pending => Ok(()),
    }
}

/// Polls `f` once with a waker that does nothing, outside tokio's
/// cooperative budget: these calls stand for the socket's `try_read` and
/// `try_write`, which never consult the budget. Under it, a spent budget
/// would make the TLS stream answer `Pending` while the socket stays
/// readable, and a caller that waits with `ready` (which returns at once
/// then) would spin without ever yielding to refill it.
fn poll_once<T>(f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut once = std::pin::pin!(tokio::task::unconstrained(std::future::poll_fn(f)));
    once.as_mut().poll(&mut cx)
}

macro_rules! delegate_read {
    ($ty:ty) => {
        impl AsyncRead for $ty {
            fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

macro_rules! delegate_write {
    ($ty:ty) => {
        impl AsyncWrite for $ty {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

delegate_read!(InternalStream);
delegate_write!(InternalStream);

impl AsyncBufRead for InternalStream {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        match self.get_mut() {
            // Not used on plain sockets; the control port peeks them instead.
            Self::Plain(_) => Poll::Ready(Err(io::Error::other("a plain socket has no read buffer"))),
            Self::Tls(s) => Pin::new(&mut **s).poll_fill_buf(cx),
        }
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        if let Self::Tls(s) = self.get_mut() {
            Pin::new(&mut **s).consume(amt)
        }
    }
}

/// The reading half of an [`InternalStream`].
pub enum InternalReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<tokio_rustls::TlsStream<TcpStream>>),
}

/// The writing half of an [`InternalStream`]. Under TLS a writer must
/// flush after its last write.
pub enum InternalWriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<tokio_rustls::TlsStream<TcpStream>>),
}

delegate_read!(InternalReadHalf);
delegate_write!(InternalWriteHalf);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// PEM files of a CA and one certificate it signed for `INTERNAL_NAME`
    /// in `dir`: (cert, key, ca).
    fn pki(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa, KeyPair};
        std::fs::create_dir_all(dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![INTERNAL_NAME.to_string()]).unwrap();
        params.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let paths = (dir.join("node.crt"), dir.join("node.key"), dir.join("ca.crt"));
        std::fs::write(&paths.0, cert.pem()).unwrap();
        std::fs::write(&paths.1, key.serialize_pem()).unwrap();
        std::fs::write(&paths.2, ca.pem()).unwrap();
        paths
    }

    /// Reads `n` bytes with `ready` and `try_read` only, as the backup does.
    async fn read_nonblocking(s: &mut InternalStream, n: usize) -> Vec<u8> {
        let mut got = Vec::with_capacity(n);
        let mut buf = [0u8; 3000];
        while got.len() < n {
            s.ready(Interest::READABLE).await.unwrap();
            loop {
                match s.try_read(&mut buf) {
                    Ok(0) => panic!("end of stream after {} bytes", got.len()),
                    Ok(k) => got.extend_from_slice(&buf[..k]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        got
    }

    /// Writes `data` with `ready` and `try_write` only, then waits until
    /// the peer has it (the session's records must leave by `ready` alone).
    async fn write_nonblocking(s: &mut InternalStream, data: &[u8]) {
        let mut pos = 0;
        while pos < data.len() {
            match s.try_write(&data[pos..]) {
                Ok(k) => pos += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    s.ready(Interest::WRITABLE).await.unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[tokio::test]
    async fn the_nonblocking_calls_move_every_byte_through_a_session_both_ways() {
        let dir = std::env::temp_dir().join(format!("shoal-cluster-tls-{}", std::process::id()));
        let (cert, key, ca) = pki(&dir);
        let tls = InternalTls::load(&cert, &key, &ca).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let server_tls = tls.clone();
        let expected = data.clone();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let Accepted::Tls(mut s) = server_tls.accept(tcp).await.unwrap() else { panic!("clear text") };
            let got = read_nonblocking(&mut s, expected.len()).await;
            assert!(got == expected, "the bytes differ");
            // Answer with all of it, then wait for the peer to close while
            // `ready` alone sends what the session holds.
            write_nonblocking(&mut s, &got).await;
            loop {
                s.ready(Interest::READABLE).await.unwrap();
                match s.try_read(&mut [0u8; 16]) {
                    Ok(0) => break,
                    Ok(_) => panic!("unexpected bytes"),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut c = tls.connect(addr, tcp).await.unwrap();
        c.write_all(&data).await.unwrap();
        c.flush().await.unwrap();
        let mut back = vec![0u8; data.len()];
        c.read_exact(&mut back).await.unwrap();
        assert!(back == data, "the answer differs");
        drop(c);
        server.await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_clear_text_peer_is_handed_back_unread_and_a_tls_dialer_to_it_fails_clearly() {
        let dir = std::env::temp_dir().join(format!("shoal-cluster-tls-clear-{}", std::process::id()));
        let (cert, key, ca) = pki(&dir);
        let tls = InternalTls::load(&cert, &key, &ca).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clear = TcpStream::connect(addr).await.unwrap();
        clear.write_all(b"hello").await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let Accepted::Clear(tcp) = tls.accept(tcp).await.unwrap() else { panic!("not clear text") };
        let mut first = [0u8; 5];
        tcp.peek(&mut first).await.unwrap();
        assert_eq!(&first, b"hello");
        // A listener that answers clear text and closes.
        let answer = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let _ = tcp.write_all(b"not TLS at all\r\n").await;
        });
        let err = tls.connect(addr, TcpStream::connect(addr).await.unwrap()).await.err().expect("a failure");
        assert!(err.to_string().contains("internal TLS handshake with"), "{err}");
        answer.await.unwrap();
        assert!(InternalTls::from_paths(Some(&cert), None, Some(&ca)).is_err());
        assert!(InternalTls::from_paths(None, None, None).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
