//! The cluster handshake: how the two ends of an internal connection (a
//! control connection to the coordinator, a replication connection to a
//! backup) prove to each other that they hold the cluster's secret, without
//! sending it (`docs/security.md`, "Internal ports").
//!
//! The initiator (the side that connected) speaks first; every message has
//! a fixed length, so nothing is allocated from the peer's bytes:
//!
//! ```text
//! HELLO     initiator -> acceptor   48 bytes: magic "SHOALAU1", port (1 control, 2 backup),
//!                                             7 reserved zero bytes, nonce_i (32)
//! CHALLENGE acceptor  -> initiator  64 bytes: nonce_a (32),
//!                                             HMAC(secret, "shoal acceptor" | port | nonce_i | nonce_a)
//! PROOF     initiator -> acceptor   72 bytes: identity (u64 LE, 0 for none),
//!                                             credential XOR HMAC(secret, "shoal credential" | port | nonce_i | nonce_a),
//!                                             HMAC(secret, "shoal initiator" | port | nonce_i | nonce_a | identity | masked credential)
//! VERDICT   acceptor  -> initiator   2 + n bytes: status (0 accepted, 1 refused), n (u8), n bytes of UTF-8 reason
//! ```
//!
//! The HMAC is HMAC-SHA256 and both proofs are checked in constant time.
//! Each side's proof covers the other's fresh nonce, so a recorded exchange
//! cannot be replayed, and the two directions use different labels, so one
//! side's proof is never valid as the other's. The acceptor answers a
//! wrong PROOF with a refusing VERDICT; the initiator closes on a wrong
//! CHALLENGE without sending a PROOF.
//!
//! An initiator may claim an identity (a server id) and, with it, a
//! 32-byte credential, masked so that only a holder of the secret can read
//! it. The acceptor's caller decides whether it accepts that claim
//! ([`Accepting::finish`]); this module only proves the secret.
//!
//! The first four bytes of HELLO, read as a little-endian u32, exceed every
//! internal protocol's frame limit, and its first byte is no replication
//! frame kind, so an acceptor can tell a handshake from an old-protocol
//! peer by peeking at them ([`is_handshake`]).
//!
//! A listener with internal TLS (`crate::tls`) answers a HELLO sent in
//! clear text with [`TLS_ONLY`] in place of a CHALLENGE (a fixed text no
//! real CHALLENGE can be: its first 32 bytes would be a random nonce), so
//! that a clear-text initiator fails with [`AuthError::TlsRequired`]
//! rather than a wrong-secret error.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

type HmacSha256 = Hmac<Sha256>;

/// First bytes of every HELLO.
pub const MAGIC: [u8; 8] = *b"SHOALAU1";
/// Bytes of a HELLO.
pub const HELLO_LEN: usize = 48;
/// Bytes of a CHALLENGE.
pub const CHALLENGE_LEN: usize = 64;
/// Bytes of a PROOF.
pub const PROOF_LEN: usize = 72;
/// Longest a VERDICT's reason may be.
pub const MAX_REASON: usize = 255;
/// Time either side has for the whole handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Fewest bytes a secret file must hold.
pub const MIN_SECRET_LEN: usize = 16;
/// Most bytes a secret file may hold.
pub const MAX_SECRET_LEN: usize = 4096;
/// Bytes of a server credential.
pub const CREDENTIAL_LEN: usize = 32;

/// What a listener that speaks only TLS sends a clear-text HELLO, in
/// place of a CHALLENGE.
pub const TLS_ONLY: [u8; CHALLENGE_LEN] = *b"SHOAL-TLS-ONLY: this internal port speaks TLS (--internal-tls-*)";

const _: () = assert!(MAGIC.len() + 1 + 7 + 32 == HELLO_LEN);
const _: () = assert!(32 + 32 == CHALLENGE_LEN);
const _: () = assert!(8 + CREDENTIAL_LEN + 32 == PROOF_LEN);

/// The internal port a handshake is for; part of every proof, so an
/// exchange with one port proves nothing to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Port {
    Control = 1,
    Backup = 2,
}

/// Whether `first` (the first bytes a peer sent, at least 4) begin a
/// handshake rather than an old-protocol frame.
pub fn is_handshake(first: &[u8]) -> bool {
    first.len() >= 4 && first[..4] == MAGIC[..4]
}

/// Waits (at most `timeout`) until `stream` has its first 4 bytes and
/// returns them without consuming them, for [`is_handshake`]. `Ok(None)`:
/// the peer closed first. Errors: the time ran out, or the socket failed.
pub async fn peek_start(stream: &tokio::net::TcpStream, timeout: Duration) -> io::Result<Option<[u8; 4]>> {
    let wait = async {
        let mut first = [0u8; 4];
        loop {
            match stream.peek(&mut first).await? {
                0 => return Ok(None),
                4 => return Ok(Some(first)),
                // Fewer bytes so far: peek returns at once while they wait.
                _ => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "the peer sent nothing within the handshake time")),
    }
}

/// Open connections per peer IP address, for a listener that bounds
/// them ([`PerIpLimit::take`]); cheap to clone (shared counts).
#[derive(Clone, Debug, Default)]
pub struct PerIpLimit {
    counts: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

/// One open connection counted against its address; dropping it gives
/// the count back.
#[derive(Debug)]
pub struct IpSlot {
    limit: PerIpLimit,
    ip: std::net::IpAddr,
}

impl PerIpLimit {
    /// A slot for `ip`, unless it already holds `max` of them.
    pub fn take(&self, ip: std::net::IpAddr, max: usize) -> Option<IpSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpSlot { limit: self.clone(), ip })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.limit.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// The cluster's shared secret. Never printed, never sent.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

/// Why a secret file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read the cluster secret file {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "the cluster secret file {path} can be read by other users (mode {mode:o}); make it private: chmod 600 {path}"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error("the cluster secret file {path} holds {len} bytes; it needs {MIN_SECRET_LEN} to {MAX_SECRET_LEN} (e.g. 64 hex digits)")]
    Length { path: PathBuf, len: usize },
    #[error("cannot create the cluster secret file {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
}

impl ClusterSecret {
    /// A secret from raw bytes (at least [`MIN_SECRET_LEN`]).
    pub fn from_bytes(bytes: &[u8]) -> Option<ClusterSecret> {
        (MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&bytes.len()).then(|| ClusterSecret(bytes.to_vec()))
    }

    /// Reads a secret file: its bytes, less surrounding whitespace, are the
    /// secret. Errors: unreadable, readable by group or others (like ssh's
    /// keys, a shared secret in a world-readable file is no secret), or
    /// shorter than [`MIN_SECRET_LEN`] or longer than [`MAX_SECRET_LEN`].
    pub fn load(path: &Path) -> Result<ClusterSecret, SecretError> {
        use std::os::unix::fs::PermissionsExt;
        let read = |source| SecretError::Read { path: path.to_path_buf(), source };
        let meta = std::fs::metadata(path).map_err(read)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Permissions { path: path.to_path_buf(), mode });
        }
        if meta.len() > 2 * MAX_SECRET_LEN as u64 {
            return Err(SecretError::Length { path: path.to_path_buf(), len: meta.len() as usize });
        }
        let bytes = std::fs::read(path).map_err(read)?;
        let trimmed = bytes.trim_ascii();
        ClusterSecret::from_bytes(trimmed).ok_or(SecretError::Length { path: path.to_path_buf(), len: trimmed.len() })
    }

    /// Makes `path` a new secret file (64 random hex digits, mode 0600) if
    /// it does not exist, and reads it.
    pub fn create_or_load(path: &Path) -> Result<ClusterSecret, SecretError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let created = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
        match created {
            Ok(mut f) => {
                let text = format!("{}\n", hex(&random_bytes::<32>()));
                let create = |source| SecretError::Create { path: path.to_path_buf(), source };
                f.write_all(text.as_bytes()).map_err(create)?;
                f.sync_all().map_err(create)?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(SecretError::Create { path: path.to_path_buf(), source }),
        }
        ClusterSecret::load(path)
    }

    fn mac(&self, label: &[u8], port: Port, nonces: &[u8; 64], extra: &[u8]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(&[port as u8]);
        mac.update(nonces);
        mac.update(extra);
        mac.finalize().into_bytes().into()
    }

    fn verify(&self, label: &[u8], port: Port, nonces: &[u8; 64], extra: &[u8], proof: &[u8]) -> bool {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(&[port as u8]);
        mac.update(nonces);
        mac.update(extra);
        mac.verify_slice(proof).is_ok()
    }
}

/// A server credential: 32 random bytes, issued by the coordinator.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Credential(pub [u8; CREDENTIAL_LEN]);

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(..)")
    }
}

impl Credential {
    /// A fresh random credential.
    pub fn random() -> Credential {
        Credential(random_bytes())
    }

    /// SHA-256 of the credential, in hex: what the coordinator keeps.
    pub fn digest_hex(&self) -> String {
        hex(&Sha256::digest(self.0))
    }

    /// Whether `digest_hex` (as from [`Credential::digest_hex`]) is this
    /// credential's, compared in constant time.
    pub fn matches(&self, digest_hex: &str) -> bool {
        let mine = self.digest_hex();
        mine.len() == digest_hex.len()
            && mine.bytes().zip(digest_hex.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    pub fn from_hex(text: &str) -> Option<Credential> {
        let text = text.trim();
        if text.len() != 2 * CREDENTIAL_LEN {
            return None;
        }
        let mut out = [0u8; CREDENTIAL_LEN];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Credential(out))
    }
}

/// What an initiator claims to be: a server id and its credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Never 0 (0 means "no identity" on the wire).
    pub id: u64,
    pub credential: Credential,
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("handshake failed: {0}")]
    Io(#[from] io::Error),
    #[error("the peer did not complete the cluster handshake within {HANDSHAKE_TIMEOUT:?}")]
    Timeout,
    #[error("the peer does not speak the cluster handshake (is it configured with --cluster-secret-file?)")]
    NotAHandshake,
    #[error("the peer does not hold the cluster secret")]
    WrongSecret,
    #[error("the peer refused the handshake: {0}")]
    Refused(String),
    #[error("malformed handshake message: {0}")]
    Malformed(&'static str),
    #[error(
        "the peer speaks only TLS on its internal ports: give this process the cluster's \
         --internal-tls-cert, --internal-tls-key and --internal-tls-ca"
    )]
    TlsRequired,
}

/// The proven facts of a completed handshake, on either side.
#[derive(Clone, Debug)]
pub struct Session {
    secret: ClusterSecret,
    port: Port,
    nonces: [u8; 64],
}

impl Session {
    /// `data` masked with a key only the two ends of this session can
    /// compute (for `label`); masking twice unmasks. For sending a
    /// credential over an unencrypted connection.
    pub fn mask(&self, label: &[u8], data: [u8; 32]) -> [u8; 32] {
        let key = self.secret.mac(b"shoal mask ", self.port, &self.nonces, label);
        let mut out = data;
        for (o, k) in out.iter_mut().zip(key) {
            *o ^= k;
        }
        out
    }
}

/// The acceptor's side after a valid PROOF: the caller decides on the
/// claimed identity, then answers with [`Accepting::finish`].
#[derive(Debug)]
pub struct Accepting {
    pub session: Session,
    /// The identity the initiator claimed, credential unmasked.
    pub identity: Option<Identity>,
}

/// Runs the initiator's side on `stream` (within [`HANDSHAKE_TIMEOUT`]).
/// Errors: the peer's CHALLENGE does not prove the secret
/// ([`AuthError::WrongSecret`]), its VERDICT refuses ([`AuthError::Refused`]),
/// or the connection fails.
pub async fn initiate<S>(
    stream: &mut S,
    secret: &ClusterSecret,
    port: Port,
    identity: Option<Identity>,
) -> Result<Session, AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        let nonce_i = random_bytes::<32>();
        stream.write_all(&hello(port, &nonce_i)).await?;
        stream.flush().await?;
        let mut challenge = [0u8; CHALLENGE_LEN];
        stream.read_exact(&mut challenge).await?;
        let (session, proof) = answer_challenge(secret, port, &nonce_i, &challenge, identity)?;
        stream.write_all(&proof).await?;
        stream.flush().await?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await?;
        let mut reason = vec![0u8; head[1] as usize];
        stream.read_exact(&mut reason).await?;
        verdict(head[0], &reason)?;
        Ok(session)
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(AuthError::Timeout),
    }
}

/// [`initiate`] over a blocking socket (its timeouts set to at most
/// [`HANDSHAKE_TIMEOUT`] for the exchange, then restored).
pub fn initiate_blocking(
    stream: &mut std::net::TcpStream,
    secret: &ClusterSecret,
    port: Port,
    identity: Option<Identity>,
) -> Result<Session, AuthError> {
    let (read_timeout, write_timeout) = (stream.read_timeout()?, stream.write_timeout()?);
    limit_timeouts(stream)?;
    let session = initiate_blocking_io(stream, secret, port, identity)?;
    stream.set_read_timeout(read_timeout)?;
    stream.set_write_timeout(write_timeout)?;
    Ok(session)
}

/// Sets a blocking socket's timeouts to at most [`HANDSHAKE_TIMEOUT`].
pub fn limit_timeouts(stream: &std::net::TcpStream) -> io::Result<()> {
    let limit = |t: Option<Duration>| Some(t.map_or(HANDSHAKE_TIMEOUT, |t| t.min(HANDSHAKE_TIMEOUT)));
    stream.set_read_timeout(limit(stream.read_timeout()?))?;
    stream.set_write_timeout(limit(stream.write_timeout()?))
}

/// [`initiate`] over any blocking stream (a TLS session over a socket);
/// the caller bounds its time (the socket's timeouts, [`limit_timeouts`]).
pub fn initiate_blocking_io<S: io::Read + io::Write>(
    stream: &mut S,
    secret: &ClusterSecret,
    port: Port,
    identity: Option<Identity>,
) -> Result<Session, AuthError> {
    let nonce_i = random_bytes::<32>();
    stream.write_all(&hello(port, &nonce_i))?;
    stream.flush()?;
    let mut challenge = [0u8; CHALLENGE_LEN];
    stream.read_exact(&mut challenge)?;
    let (session, proof) = answer_challenge(secret, port, &nonce_i, &challenge, identity)?;
    stream.write_all(&proof)?;
    stream.flush()?;
    let mut head = [0u8; 2];
    stream.read_exact(&mut head)?;
    let mut reason = vec![0u8; head[1] as usize];
    stream.read_exact(&mut reason)?;
    verdict(head[0], &reason)?;
    Ok(session)
}

/// A TLS-only listener's answer to a peer that opened a cluster handshake
/// in clear text: reads its HELLO and answers [`TLS_ONLY`] (best effort,
/// at most 1 s), so the peer learns why ([`AuthError::TlsRequired`]).
pub async fn refuse_clear_handshake(stream: &mut tokio::net::TcpStream) {
    let answer = async {
        let mut hello = [0u8; HELLO_LEN];
        stream.read_exact(&mut hello).await?;
        stream.write_all(&TLS_ONLY).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
}

/// Runs the acceptor's side up to the PROOF (within [`HANDSHAKE_TIMEOUT`]).
/// A wrong PROOF is answered with a refusing VERDICT here. Errors: the
/// peer's first bytes are no HELLO ([`AuthError::NotAHandshake`]), the
/// HELLO is for another port, the PROOF is wrong, or the connection fails.
pub async fn accept<S>(stream: &mut S, secret: &ClusterSecret, port: Port) -> Result<Accepting, AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        let mut hello = [0u8; HELLO_LEN];
        stream.read_exact(&mut hello[..MAGIC.len()]).await?;
        if hello[..MAGIC.len()] != MAGIC {
            return Err(AuthError::NotAHandshake);
        }
        stream.read_exact(&mut hello[MAGIC.len()..]).await?;
        if hello[8] != port as u8 {
            let why = "this handshake is for another kind of port";
            refuse(stream, why).await;
            return Err(AuthError::Malformed(why));
        }
        if hello[9..16].iter().any(|&b| b != 0) {
            return Err(AuthError::Malformed("reserved HELLO bytes are not zero"));
        }
        let mut nonces = [0u8; 64];
        nonces[..32].copy_from_slice(&hello[16..48]);
        nonces[32..].copy_from_slice(&random_bytes::<32>());
        let mut challenge = [0u8; CHALLENGE_LEN];
        challenge[..32].copy_from_slice(&nonces[32..]);
        challenge[32..].copy_from_slice(&secret.mac(b"shoal acceptor", port, &nonces, &[]));
        stream.write_all(&challenge).await?;
        stream.flush().await?;
        let mut proof = [0u8; PROOF_LEN];
        stream.read_exact(&mut proof).await?;
        if !secret.verify(b"shoal initiator", port, &nonces, &proof[..40], &proof[40..]) {
            refuse(stream, "the cluster secret does not match").await;
            return Err(AuthError::WrongSecret);
        }
        let session = Session { secret: secret.clone(), port, nonces };
        let id = u64::from_le_bytes(proof[..8].try_into().expect("8 bytes"));
        let identity = (id != 0).then(|| {
            let masked: [u8; 32] = proof[8..40].try_into().expect("32 bytes");
            Identity { id, credential: Credential(session.mask(b"credential", masked)) }
        });
        Ok(Accepting { session, identity })
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(AuthError::Timeout),
    }
}

impl Accepting {
    /// Ends the handshake: `Ok` accepts, `Err(reason)` refuses (the caller
    /// then closes). Returns the session if accepted and sent.
    pub async fn finish<S>(self, stream: &mut S, decision: Result<(), String>) -> Result<Session, AuthError>
    where
        S: AsyncWrite + Unpin,
    {
        match decision {
            Ok(()) => {
                let send = async {
                    stream.write_all(&[0, 0]).await?;
                    stream.flush().await
                };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, send).await {
                    Ok(r) => r?,
                    Err(_) => return Err(AuthError::Timeout),
                }
                Ok(self.session)
            }
            Err(reason) => {
                refuse(stream, &reason).await;
                Err(AuthError::Refused(reason))
            }
        }
    }
}

fn hello(port: Port, nonce_i: &[u8; 32]) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8] = port as u8;
    out[16..].copy_from_slice(nonce_i);
    out
}

/// Checks the acceptor's CHALLENGE; returns the session and the PROOF.
fn answer_challenge(
    secret: &ClusterSecret,
    port: Port,
    nonce_i: &[u8; 32],
    challenge: &[u8; CHALLENGE_LEN],
    identity: Option<Identity>,
) -> Result<(Session, [u8; PROOF_LEN]), AuthError> {
    if *challenge == TLS_ONLY {
        return Err(AuthError::TlsRequired);
    }
    let mut nonces = [0u8; 64];
    nonces[..32].copy_from_slice(nonce_i);
    nonces[32..].copy_from_slice(&challenge[..32]);
    if !secret.verify(b"shoal acceptor", port, &nonces, &[], &challenge[32..]) {
        return Err(AuthError::WrongSecret);
    }
    let session = Session { secret: secret.clone(), port, nonces };
    let mut proof = [0u8; PROOF_LEN];
    if let Some(identity) = identity {
        proof[..8].copy_from_slice(&identity.id.to_le_bytes());
        proof[8..40].copy_from_slice(&session.mask(b"credential", identity.credential.0));
    }
    let mac = secret.mac(b"shoal initiator", port, &nonces, &proof[..40]);
    proof[40..].copy_from_slice(&mac);
    Ok((session, proof))
}

fn verdict(status: u8, reason: &[u8]) -> Result<(), AuthError> {
    match status {
        0 => Ok(()),
        1 => Err(AuthError::Refused(String::from_utf8_lossy(reason).into_owned())),
        _ => Err(AuthError::Malformed("unknown VERDICT status")),
    }
}

/// Sends a refusing VERDICT, best effort.
async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, reason: &str) {
    let mut cut = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = vec![1, cut as u8];
    out.extend_from_slice(&reason.as_bytes()[..cut]);
    let send = async {
        stream.write_all(&out).await?;
        stream.flush().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), send).await;
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut out);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::from_bytes(s.as_bytes()).unwrap()
    }

    async fn run(
        initiator_secret: ClusterSecret,
        acceptor_secret: ClusterSecret,
        identity: Option<Identity>,
    ) -> (Result<Session, AuthError>, Result<Accepting, AuthError>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move {
            let r = accept(&mut b, &acceptor_secret, Port::Control).await;
            match r {
                Ok(acc) => {
                    let identity = acc.identity;
                    let session = acc.session.clone();
                    Accepting { session: session.clone(), identity }.finish(&mut b, Ok(())).await.unwrap();
                    Ok(Accepting { session, identity })
                }
                Err(e) => Err(e),
            }
        });
        let i = initiate(&mut a, &initiator_secret, Port::Control, identity).await;
        drop(a);
        (i, acceptor.await.unwrap())
    }

    #[tokio::test]
    async fn handshake_with_the_same_secret_succeeds_and_carries_the_identity() {
        let cred = Credential::random();
        let id = Some(Identity { id: 7, credential: cred });
        let (i, a) = run(secret("0123456789abcdef-1"), secret("0123456789abcdef-1"), id).await;
        let (i, a) = (i.unwrap(), a.unwrap());
        assert_eq!(a.identity, id);
        assert_eq!(i.nonces, a.session.nonces);
        let masked = a.session.mask(b"issue", cred.0);
        assert_ne!(masked, cred.0);
        assert_eq!(i.mask(b"issue", masked), cred.0);
    }

    #[tokio::test]
    async fn handshake_with_a_wrong_secret_fails_on_both_sides() {
        let (i, a) = run(secret("0123456789abcdef-1"), secret("0123456789abcdef-2"), None).await;
        assert!(matches!(i, Err(AuthError::WrongSecret)), "{i:?}");
        // The initiator stops at the bad CHALLENGE: the acceptor never gets a PROOF.
        assert!(a.is_err());
    }

    #[tokio::test]
    async fn a_forged_proof_is_refused() {
        let s = secret("0123456789abcdef-1");
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move { accept(&mut b, &s, Port::Control).await.map(|_| ()) });
        a.write_all(&hello(Port::Control, &[9; 32])).await.unwrap();
        let mut challenge = [0u8; CHALLENGE_LEN];
        a.read_exact(&mut challenge).await.unwrap();
        a.write_all(&[0u8; PROOF_LEN]).await.unwrap();
        let mut head = [0u8; 2];
        a.read_exact(&mut head).await.unwrap();
        assert_eq!(head[0], 1);
        assert!(matches!(acceptor.await.unwrap(), Err(AuthError::WrongSecret)));
    }

    #[tokio::test]
    async fn old_protocol_bytes_are_no_handshake() {
        let s = secret("0123456789abcdef-1");
        let mut frame = 20u32.to_le_bytes().to_vec();
        frame.extend_from_slice(b"{\"op\":\"get_map\"}    ");
        assert!(!is_handshake(&frame));
        assert!(is_handshake(&hello(Port::Backup, &[0; 32])));
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&frame).await.unwrap();
        assert!(matches!(accept(&mut b, &s, Port::Control).await, Err(AuthError::NotAHandshake)));
    }

    #[test]
    fn secret_files_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("shoal-secret-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        let _ = std::fs::remove_file(&path);
        let made = ClusterSecret::create_or_load(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(made.0.len(), 64);
        assert_eq!(ClusterSecret::create_or_load(&path).unwrap().0, made.0);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(ClusterSecret::load(&path), Err(SecretError::Permissions { .. })));
        std::fs::write(&path, "short\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(ClusterSecret::load(&path), Err(SecretError::Length { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn credentials_round_trip_and_match_their_digest() {
        let c = Credential::random();
        assert_eq!(Credential::from_hex(&c.to_hex()), Some(c));
        assert!(c.matches(&c.digest_hex()));
        assert!(!Credential::random().matches(&c.digest_hex()));
        assert_eq!(Credential::from_hex("zz"), None);
    }
}
