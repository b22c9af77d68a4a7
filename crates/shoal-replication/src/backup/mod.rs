//! The backup service (`docs/replication.md`): holds replicas of masters'
//! segments in pre-zeroed, memory-mapped buffers that streamed bytes land in
//! at their final offset, writes closed replicas to files, and serves them
//! back to readers.
//!
//! [`Backup::start`] binds the replication port and runs the service on its
//! own threads (a single-threaded tokio runtime for every connection, and a
//! flusher thread for the disk), so it needs no runtime from its caller.
//! [`Backup::shutdown`], or dropping the [`Backup`], stops both; what was
//! received stays in the buffer files and is served again by the next
//! start on the same data directory.
//!
//! Inside: `mmap` (the only `unsafe`), `buffers` (buffer files and their
//! metadata block), `files` (segment files), `replicas` (the table of
//! replicas, admission, fencing, flushing, reading back) and `conn` (one
//! connection: frames, the Tailwind, conventional and reader modes).

mod buffers;
mod conn;
mod files;
mod mmap;
mod replicas;

/// Not an API: the backup's decoders of bytes read from its disk, for the
/// fuzz targets in `fuzz/` (`docs/fuzzing.md`).
#[doc(hidden)]
pub mod fuzzing {
    pub use super::buffers::{Meta, MetaState};
    pub use super::files::FileHeader;
    use std::io;
    use std::path::Path;

    /// The header of the segment file at `path`, as the start-up scan reads it.
    pub fn read_file_header(path: &Path) -> io::Result<FileHeader> {
        super::files::read_header(path)
    }

    /// The segment file at `path`, header and bytes, as a READ serves it
    /// (buffers sized for segments of `segment_bytes`).
    pub fn read_segment_file(path: &Path, segment_bytes: usize) -> io::Result<(FileHeader, Vec<u8>)> {
        let (header, bytes) = super::files::read_segment(path, &super::files::ReadBufs::new(segment_bytes))?;
        Ok((header, bytes.to_vec()))
    }
}

use parking_lot::Mutex;
use replicas::{Job, Shared};
use shoal_common::LogId;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// How a backup is set up.
#[derive(Clone, Debug)]
pub struct BackupConfig {
    /// The replication port's address.
    pub listen: SocketAddr,
    /// Buffers and files live under `<data_dir>/backup/`.
    pub data_dir: PathBuf,
    /// Size of each buffer: the largest segment this backup accepts.
    pub segment_bytes: u32,
    /// Number of buffers, i.e. of replicas open or waiting for the disk.
    pub buffers: usize,
    /// Most closed replicas waiting for the disk; at the limit, OPENs are
    /// refused (the master goes elsewhere rather than wait for this disk).
    pub flush_limit: usize,
    /// Sync each buffer's newly received range before acknowledging it
    /// (survives a power loss, not only a killed process).
    pub sync_open: bool,
    /// Most connections served at once; more are answered ERROR.
    pub max_connections: usize,
    /// Most connections from one IP address at once; more are answered ERROR.
    pub max_connections_per_ip: usize,
    /// The cluster secret: every connection must open with the cluster
    /// handshake (`docs/security.md`). `None`: anyone who can connect is
    /// served.
    pub secret: Option<shoal_cluster::auth::ClusterSecret>,
    /// Mutual TLS (`docs/security.md`, "Internal TLS"): every connection
    /// must open with a TLS handshake presenting a certificate of the
    /// cluster CA; clear-text peers are refused. `None`: clear text.
    pub tls: Option<shoal_cluster::tls::InternalTls>,
    /// Who takes connections that say HELLO as a symmetric-caching peer
    /// (`wire::Mode::Peer`); `None`: such a HELLO is refused.
    pub peers: Option<PeerHandlers>,
    /// Who takes connections that say HELLO as a tablet migration's source
    /// (`wire::Mode::Migrate`, `docs/migration.md`); `None`: refused.
    pub migrations: Option<PeerHandlers>,
}

/// Takes over the connections of symmetric-caching peers
/// (`docs/symmetric-caching.md`). The backup has run the handshake (and
/// TLS) and the HELLO, and counts the connection against its limits until
/// [`PeerHandler::serve`] returns.
pub trait PeerHandler: Send + Sync + 'static {
    /// Serves one peer connection until it ends. `server`: the id the
    /// peer's cluster handshake proved it holds the secret for, or without
    /// a secret the id its HELLO claimed (`None`: it claimed none); `addr`:
    /// its address.
    fn serve(
        &self,
        server: Option<shoal_cluster::ServerId>,
        addr: SocketAddr,
        stream: shoal_cluster::tls::InternalStream,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

/// A [`PeerHandler`] in a [`BackupConfig`].
#[derive(Clone)]
pub struct PeerHandlers(pub Arc<dyn PeerHandler>);

impl std::fmt::Debug for PeerHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerHandlers")
    }
}

impl BackupConfig {
    /// The defaults: 8 MiB segments, 16 buffers, at most 8 of them waiting
    /// for the disk, no sync of open buffers, 1024 connections (64 per
    /// address), no secret.
    pub fn new(listen: SocketAddr, data_dir: impl Into<PathBuf>) -> BackupConfig {
        BackupConfig {
            listen,
            data_dir: data_dir.into(),
            segment_bytes: 8 << 20,
            buffers: 16,
            flush_limit: 8,
            sync_open: false,
            max_connections: 1024,
            max_connections_per_ip: 64,
            secret: None,
            tls: None,
            peers: None,
            migrations: None,
        }
    }

    fn validate(&self) -> io::Result<()> {
        let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_owned()));
        if self.segment_bytes == 0 || self.segment_bytes as usize > (1 << 30) {
            return bad("backup segment size must be within 1 B..=1 GiB");
        }
        if self.buffers == 0 {
            return bad("a backup needs at least one buffer");
        }
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            return bad("a backup must accept at least one connection");
        }
        Ok(())
    }
}

/// A snapshot of a backup's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupStats {
    pub buffers_total: usize,
    pub buffers_in_use: usize,
    /// Closed replicas still in their buffers, waiting for the flusher.
    pub awaiting_flush: usize,
    /// Closed replicas in files.
    pub segments_on_disk: usize,
    /// Segment bytes received (DATA and APPEND).
    pub bytes_received: u64,
    pub segments_opened: u64,
    pub segments_closed: u64,
    pub segments_flushed: u64,
    pub segments_freed: u64,
    /// OPENs refused (no free buffer, or the flush backlog).
    pub refusals: u64,
    pub connections_accepted: u64,
    pub connections_active: u64,
    /// Connections turned away at `max_connections`.
    pub connections_refused: u64,
    /// APPEND calls served (conventional mode).
    pub conventional_appends: u64,
    /// Connections closed with an ERROR for bad input.
    pub protocol_errors: u64,
    /// Closed replicas found corrupt when listed or read (not served).
    pub corrupt_replicas: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub bytes_received: AtomicU64,
    pub segments_opened: AtomicU64,
    pub segments_closed: AtomicU64,
    pub segments_flushed: AtomicU64,
    pub segments_freed: AtomicU64,
    pub refusals: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub connections_active: AtomicU64,
    pub connections_refused: AtomicU64,
    pub conventional_appends: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub corrupt_replicas: AtomicU64,
}

/// A running backup service. Dropping it stops the service.
pub struct Backup {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Arc<tokio::sync::Notify>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Backup {
    /// Loads what `config.data_dir` holds, binds `config.listen` and starts
    /// serving. Errors: the configuration is invalid, the data directory
    /// cannot be read or its buffers created, or the address cannot be bound.
    pub fn start(config: BackupConfig) -> io::Result<Backup> {
        config.validate()?;
        let (tx, rx) = mpsc::channel();
        let shared = Shared::load(config.clone(), tx)?;
        let listener = std::net::TcpListener::bind(config.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(tokio::sync::Notify::new());

        let flusher = {
            let shared = shared.clone();
            std::thread::Builder::new().name("shoal-backup-flush".into()).spawn(move || flusher(shared, rx))?
        };
        let server = {
            let shared = shared.clone();
            let stop = stop.clone();
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            std::thread::Builder::new().name("shoal-backup".into()).spawn(move || {
                rt.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => conn::accept_loop(shared, listener, stop).await,
                        Err(e) => tracing::error!(error = %e, "backup: cannot serve the replication port"),
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(2));
            })?
        };
        Ok(Backup { shared, addr, stop, threads: Mutex::new(vec![server, flusher]) })
    }

    /// The address the backup listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> BackupStats {
        let c = &self.shared.counters;
        let (buffers_total, buffers_in_use, awaiting_flush, segments_on_disk) = self.shared.occupancy();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BackupStats {
            buffers_total,
            buffers_in_use,
            awaiting_flush,
            segments_on_disk,
            bytes_received: get(&c.bytes_received),
            segments_opened: get(&c.segments_opened),
            segments_closed: get(&c.segments_closed),
            segments_flushed: get(&c.segments_flushed),
            segments_freed: get(&c.segments_freed),
            refusals: get(&c.refusals),
            connections_accepted: get(&c.connections_accepted),
            connections_active: get(&c.connections_active),
            connections_refused: get(&c.connections_refused),
            conventional_appends: get(&c.conventional_appends),
            protocol_errors: get(&c.protocol_errors),
            corrupt_replicas: get(&c.corrupt_replicas),
        }
    }

    /// Fences `log` at `version`: from now on its master's connections with
    /// a lower version are refused at HELLO and cut at their next frame (a
    /// master declared dead cannot make another byte durable here).
    pub fn fence(&self, log: LogId, version: u64) {
        let _ = self.shared.hello(log, version);
    }

    /// Drops every replica of `log` held here (a log recovered elsewhere).
    pub fn free_log(&self, log: LogId) {
        self.shared.free_log(log);
    }

    /// Stops accepting, closes every connection and stops the flusher
    /// (replicas still waiting for it are flushed after the next start).
    /// Waits for the service's threads; idempotent.
    pub fn shutdown(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        if threads.is_empty() {
            return;
        }
        self.stop.notify_one();
        self.shared.stop_flusher();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Backup {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The flusher thread: writes closed replicas to files, one at a time;
/// retries failed writes every second.
fn flusher(shared: Arc<Shared>, rx: mpsc::Receiver<Job>) {
    let mut retry = Vec::new();
    loop {
        let job = if retry.is_empty() {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    for (key, gen) in std::mem::take(&mut retry) {
                        if !shared.flush(key, gen) {
                            retry.push((key, gen));
                        }
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            }
        };
        match job {
            Some(Job::Flush { key, gen }) => {
                if !shared.flush(key, gen) {
                    retry.push((key, gen));
                }
            }
            Some(Job::Stop) | None => return,
        }
    }
}
