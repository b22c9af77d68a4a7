//! The master's side of replication (`docs/replication.md`, "The master's
//! side"): a [`LogObserver`] that streams every segment of the log to R
//! backups and tells writers when their bytes are durable.
//!
//! The observer only copies appended bytes into the replicator's state and
//! wakes the replication thread (its own thread, with a current-thread
//! tokio runtime). That thread keeps one TCP connection per backup, sends
//! each round everything appended since the previous one (group commit)
//! without waiting for the previous round's acknowledgements (pipelining),
//! re-opens replicas of failed backups elsewhere, copies closed segments
//! whose replica was lost to new backups (from the store's memory, see
//! [`Replicator::set_segment_source`]), records at the coordinator which
//! replicas that leaves behind are stale ([`FloorRecorder`]), and
//! publishes the durable position, which writers on any runtime await
//! with [`Replicator::wait_durable`].
//!
//! Who may call what: the store calls the observer methods (under its log
//! lock); the server calls [`Replicator::set_backups`] whenever its cluster
//! map changes, and [`Replicator::position`] / [`Replicator::wait_durable`]
//! around each write.

mod conn;
mod state;
mod waiters;

use parking_lot::Mutex;
use shoal_cluster::ServerId;
use shoal_common::{LogId, SegmentId};
use shoal_engine::{LogObserver, SegmentKind};
use state::{Settings, State};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// How segment bytes travel to backups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationMode {
    /// DATA frames placed in the backup's buffer, cumulative ACKs, rounds
    /// pipelined (Tailwind).
    Tailwind,
    /// One APPEND per append group, each answered before the next is sent
    /// (RAMCloud before Tailwind), for comparison.
    Conventional,
}

/// How a replicator is set up.
#[derive(Clone, Debug)]
pub struct ReplicatorConfig {
    /// This server: never chosen as a backup of its own log.
    pub master: ServerId,
    /// The log replicated.
    pub log: LogId,
    /// The version replicas are written with (backups fence lower ones).
    pub log_version: u64,
    /// The store's segment size (sent with every OPEN).
    pub segment_bytes: u32,
    pub mode: ReplicationMode,
    /// A replica whose backup owes an answer this long is re-opened
    /// elsewhere (its whole connection is dropped).
    pub replica_timeout: Duration,
    /// Where replica floors are recorded (the coordinator). `None`: they
    /// count as recorded at once, which is right only for a master whose
    /// log no one recovers from other backups (tests, no cluster).
    pub floor_recorder: Option<FloorRecorder>,
}

impl Default for ReplicatorConfig {
    fn default() -> Self {
        ReplicatorConfig {
            master: ServerId(0),
            log: LogId(1),
            log_version: 1,
            segment_bytes: 8 << 20,
            mode: ReplicationMode::Tailwind,
            replica_timeout: Duration::from_secs(2),
            floor_recorder: None,
        }
    }
}

/// Floors of this master's log for the coordinator to record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FloorRequest {
    /// `(segment, epoch)`: the segment's replicas below the epoch are stale
    /// (`ControlRequest::RaiseReplicaFloors`).
    pub replicas: Vec<(SegmentId, u64)>,
    /// The log's head floor, raised to this head: its opening is durable
    /// on R backups (`ControlRequest::RaiseHeadFloor`).
    pub head: Option<SegmentId>,
}

impl FloorRequest {
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty() && self.head.is_none()
    }
}

/// Records floors at the coordinator: its future resolves `Ok` once the
/// coordinator has durably recorded every floor of the [`FloorRequest`].
/// Any error is logged and the whole request made again later; writes to
/// the segments wait meanwhile (for a head floor: every write in that
/// head). Called from the replication thread's runtime, one request at a
/// time.
#[derive(Clone)]
pub struct FloorRecorder(Arc<RecordFn>);

type RecordFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type RecordFn = dyn Fn(FloorRequest) -> RecordFuture + Send + Sync;

impl FloorRecorder {
    pub fn new<F, Fut>(f: F) -> FloorRecorder
    where
        F: Fn(FloorRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        FloorRecorder(Arc::new(move |floors| Box::pin(f(floors)) as RecordFuture))
    }

    fn record(&self, floors: FloorRequest) -> RecordFuture {
        (self.0)(floors)
    }
}

impl fmt::Debug for FloorRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FloorRecorder")
    }
}

/// The only error a waiter sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    /// The replicator shut down before the position became durable.
    #[error("the replicator shut down before the write was durable")]
    Shutdown,
}

/// What the replicator has done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicationStats {
    /// Rounds that carried new log bytes to backups.
    pub rounds: u64,
    /// Log bytes per round (new bytes of the log, not counting copies).
    pub round_bytes_mean: f64,
    pub round_bytes_max: u64,
    /// Observer appends per round.
    pub round_appends_mean: f64,
    pub round_appends_max: u64,
    /// Segment bytes sent, summed over replicas (re-sent bytes included).
    pub bytes_replicated: u64,
    /// Replicas opened (OPEN sent), re-opened ones included.
    pub replicas_opened: u64,
    /// Replicas the backups confirmed closed.
    pub replicas_closed: u64,
    /// Replicas lost (refusal, error, disconnect, timeout, backup gone) and
    /// so opened again elsewhere.
    pub replicas_reopened: u64,
    /// OPENs refused.
    pub refusals: u64,
    /// Replicas open now (not yet confirmed closed).
    pub open_replicas: u64,
    /// Segments freed on their backups (FREE sent).
    pub segments_freed: u64,
    /// Closed segments copied from the store to new backups after one of
    /// their replicas was lost (a backup died), and back to R replicas.
    pub segments_rereplicated: u64,
    /// Segment bytes sent for those copies, summed over replicas.
    pub rereplication_bytes: u64,
    /// Closed segments with fewer than R replicas now (waiting for their
    /// copy or being copied).
    pub closed_segments_below_r: u64,
    /// Segment epochs raised (a replica that may hold bytes was lost).
    pub epochs_raised: u64,
    /// Replica floors recorded at the coordinator.
    pub floors_recorded: u64,
    /// Head floors recorded at the coordinator (one per head opened, or
    /// fewer when one covered several).
    pub head_floors_recorded: u64,
    /// Segments whose new epoch's floor is not recorded yet (their writes
    /// wait for it).
    pub floors_waiting: u64,
    pub position: u64,
    pub durable: u64,
    /// `position - durable`.
    pub durable_lag: u64,
}

/// Shared between the observer, the API and the replication thread.
pub(crate) struct Inner {
    state: Mutex<State>,
    /// Wakes the replication thread (from any thread).
    notify: Notify,
    position: AtomicU64,
    durable: AtomicU64,
    durable_tx: Mutex<Option<watch::Sender<u64>>>,
    durable_rx: watch::Receiver<u64>,
    /// Set (before the watch's sender goes) once the replicator stopped.
    closed: AtomicBool,
    waiters: waiters::Waiters,
    replica_timeout: Duration,
    /// Where closed segments' bytes come from when they must be copied
    /// again (see [`Replicator::set_segment_source`]).
    source: Mutex<Option<SegmentSource>>,
    floor_recorder: Option<FloorRecorder>,
}

/// The current bytes of a segment of the master's log, or None if it left
/// the log (normally `Store::segment_copy`).
pub type SegmentSource = Arc<dyn Fn(SegmentId) -> Option<Vec<u8>> + Send + Sync>;

impl Inner {
    /// Waiters see the shutdown once the sender is gone.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.durable_tx.lock().take();
    }

    fn publish(&self, durable: u64) {
        self.durable.fetch_max(durable, Ordering::SeqCst);
        if let Some(tx) = self.durable_tx.lock().as_ref() {
            tx.send_if_modified(|d| {
                let moved = durable > *d;
                if moved {
                    *d = durable;
                }
                moved
            });
        }
    }
}

/// The master's replication of its log. See the module documentation.
pub struct Replicator {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Replicator {
    /// Starts the replication thread. Until [`Replicator::set_backups`]
    /// names R, appended bytes are kept and not durable (unless R = 0).
    ///
    /// Panics if the thread or its runtime cannot be created.
    pub fn start(config: ReplicatorConfig) -> Arc<Replicator> {
        let (tx, rx) = watch::channel(0u64);
        let inner = Arc::new(Inner {
            state: Mutex::new(State::new(Settings {
                master: config.master,
                log: config.log,
                log_version: config.log_version,
                segment_bytes: config.segment_bytes,
                mode: config.mode,
                replica_timeout: config.replica_timeout,
                record_floors: config.floor_recorder.is_some(),
            })),
            notify: Notify::new(),
            position: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            durable_tx: Mutex::new(Some(tx)),
            durable_rx: rx,
            closed: AtomicBool::new(false),
            waiters: Default::default(),
            replica_timeout: config.replica_timeout,
            source: Mutex::new(None),
            floor_recorder: config.floor_recorder.clone(),
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("replicator runtime");
        let i = inner.clone();
        let thread = std::thread::Builder::new()
            .name("shoal-replicator".into())
            .spawn(move || {
                rt.block_on(conn::drive(i.clone()));
                i.close();
            })
            .expect("spawn the replicator thread");
        Arc::new(Replicator { inner, thread: Mutex::new(Some(thread)) })
    }

    /// Names the backups this master may use (live servers; itself is
    /// skipped) and R. New segments take the newest R; replicas on backups
    /// no longer listed are re-opened elsewhere.
    pub fn set_backups(&self, candidates: Vec<(ServerId, SocketAddr)>, replicas: u32) {
        let mut st = self.inner.state.lock();
        st.set_backups(candidates, replicas, Instant::now());
        drop(st);
        self.inner.notify.notify_one();
    }

    /// Where the bytes of closed segments come from when a backup holding
    /// one of their replicas is lost: the replicator keeps only the bytes of
    /// segments not yet closed on every replica, so it asks the store
    /// (`Store::segment_copy`; the closure should hold the store weakly, as
    /// the store holds the replicator). Until this is set, such segments
    /// stay below R (`closed_segments_below_r`). Called on a blocking
    /// thread, never under the replicator's lock.
    pub fn set_segment_source(&self, source: SegmentSource) {
        *self.inner.source.lock() = Some(source);
        self.inner.notify.notify_one();
    }

    /// The log position: bytes appended so far, over all segments.
    pub fn position(&self) -> u64 {
        self.inner.position.load(Ordering::Acquire)
    }

    /// The durable position: every byte before it is on all the replicas
    /// its segment must have (`docs/replication.md`).
    pub fn durable(&self) -> u64 {
        self.inner.durable.load(Ordering::Acquire)
    }

    /// Completes once the durable position reaches `pos`. Works from any
    /// runtime. Errors only if the replicator shut down first.
    pub async fn wait_durable(&self, pos: u64) -> Result<(), ReplicationError> {
        if self.inner.durable.load(Ordering::SeqCst) >= pos {
            return Ok(());
        }
        match tokio::runtime::Handle::try_current() {
            // One wake per runtime per advance (see `waiters`).
            Ok(handle) => waiters::Wait::new(&self.inner, pos, handle).await,
            Err(_) => {
                let mut rx = self.inner.durable_rx.clone();
                let reached = rx.wait_for(|d| *d >= pos).await.is_ok();
                if reached {
                    Ok(())
                } else {
                    Err(ReplicationError::Shutdown)
                }
            }
        }
    }

    pub fn stats(&self) -> ReplicationStats {
        self.inner.state.lock().stats()
    }

    /// Stops the replication thread and drops every connection. Waiters
    /// not yet durable get [`ReplicationError::Shutdown`]. Idempotent.
    pub fn shutdown(&self) {
        self.inner.state.lock().shut = true;
        self.inner.notify.notify_one();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        self.inner.close();
    }
}

impl Drop for Replicator {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl LogObserver for Replicator {
    fn segment_opened(&self, segment: SegmentId, kind: SegmentKind) {
        let mut st = self.inner.state.lock();
        if st.shut {
            return;
        }
        st.opened(segment, kind);
        drop(st);
        self.inner.notify.notify_one();
    }

    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        let mut st = self.inner.state.lock();
        let moved = if st.shut {
            st.position += bytes.len() as u64;
            false
        } else {
            st.appended(segment, offset, bytes)
        };
        self.inner.position.store(st.position, Ordering::Release);
        let durable = st.durable;
        drop(st);
        if moved {
            self.inner.publish(durable);
        } else {
            self.inner.notify.notify_one();
        }
    }

    fn segment_closed(&self, segment: SegmentId, len: u32, checksum: u32) {
        let mut st = self.inner.state.lock();
        if st.shut {
            return;
        }
        st.closed(segment, len, checksum);
        drop(st);
        self.inner.notify.notify_one();
    }

    fn position(&self) -> u64 {
        self.inner.position.load(Ordering::Acquire)
    }

    fn segments_freed(&self, _survivors: &[SegmentId], freed: &[SegmentId]) {
        let mut st = self.inner.state.lock();
        if st.shut {
            return;
        }
        st.freed(freed);
        drop(st);
        self.inner.notify.notify_one();
    }
}
