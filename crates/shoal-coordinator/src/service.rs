//! The coordinator's requests, decided by the state machine and made
//! durable: one [`Service`] per coordinator, shared by its connections.
//!
//! A changing request runs under the state lock on a blocking thread:
//! decide on a copy of the state, save the copy, then make it current and
//! publish its map. So the reply, and every reader, sees a change only
//! after it is on disk; a failed save leaves the state as it was and the
//! request is refused (`internal`). Running the whole step on its own
//! thread also means a caller that goes away mid-request cannot leave the
//! store and memory disagreeing.
//!
//! Reads of the map (`get_map`, `get_table`, `watch_map`) take no lock:
//! they read the last published map from a `watch` channel, which is also
//! what wakes the long polls.

use crate::config::CoordinatorError;
use crate::state::{self, ClusterState, Outcome};
use crate::store::StateStore;
use shoal_cluster::map::ClusterMap;
use shoal_cluster::{ControlErrorCode, ControlRequest, ControlResponse};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Mutex};
use tracing::{debug, error, info};

/// Longest a `watch_map` waits, whatever it asks for.
pub const MAX_WATCH: Duration = Duration::from_secs(60);

pub(crate) struct Service {
    state: Arc<Mutex<ClusterState>>,
    store: Arc<dyn StateStore>,
    map: watch::Sender<Arc<ClusterMap>>,
    started: Instant,
    requests: AtomicU64,
    enlistments: AtomicU64,
    /// Control connections open now (kept by the listener).
    pub(crate) connections: AtomicUsize,
}

impl Service {
    /// Loads the state from `store` (a new cluster if it holds none), applies
    /// `replicas`, and saves it if that changed anything.
    pub(crate) async fn open(store: Arc<dyn StateStore>, replicas: Option<u32>) -> Result<Service, CoordinatorError> {
        let loader = store.clone();
        let loaded = blocking(move || loader.load()).await.map_err(CoordinatorError::Load)?;
        let (state, save) = match loaded {
            None => (ClusterState::new(replicas), true),
            Some(bytes) => ClusterState::decode(&bytes, replicas).map_err(CoordinatorError::Corrupt)?,
        };
        if save {
            let bytes = state.encode();
            let saver = store.clone();
            blocking(move || saver.save(&bytes)).await.map_err(CoordinatorError::Save)?;
        }
        let map = state.map();
        if map.servers.is_empty() && map.tables.is_empty() {
            info!("new cluster (map version {})", map.version);
        } else {
            info!(
                "resumed cluster: {} servers, {} tables, {} tablets, map version {}, {} replicas",
                map.servers.len(),
                map.tables.len(),
                map.tablets.len(),
                map.version,
                map.replicas
            );
        }
        let (map, _) = watch::channel(Arc::new(map.clone()));
        Ok(Service {
            state: Arc::new(Mutex::new(state)),
            store,
            map,
            started: Instant::now(),
            requests: AtomicU64::new(0),
            enlistments: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
        })
    }

    /// The last published (durable) map.
    pub(crate) fn map(&self) -> Arc<ClusterMap> {
        self.map.borrow().clone()
    }

    /// Answers `req`. A `watch_map` returns early, with the current map,
    /// once `shutdown` turns true.
    pub(crate) async fn handle(
        self: &Arc<Self>,
        req: ControlRequest,
        shutdown: &mut watch::Receiver<bool>,
    ) -> ControlResponse {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match req {
            ControlRequest::GetMap => ControlResponse::Map { map: (*self.map()).clone() },
            ControlRequest::GetTable { name } => state::get_table(&self.map(), &name),
            ControlRequest::WatchMap { known_version, timeout_ms, .. } => {
                self.watch(known_version, Duration::from_millis(timeout_ms), shutdown).await
            }
            ControlRequest::Stats => self.stats().await,
            req @ (ControlRequest::Enlist { .. }
            | ControlRequest::CreateTable { .. }
            | ControlRequest::DropTable { .. }
            | ControlRequest::Recovered { .. }
            | ControlRequest::Suspect { .. }
            | ControlRequest::RecoveryDone { .. }) => self.change(req).await,
        }
    }

    async fn watch(
        &self,
        known_version: u64,
        timeout: Duration,
        shutdown: &mut watch::Receiver<bool>,
    ) -> ControlResponse {
        let mut rx = self.map.subscribe();
        tokio::select! {
            _ = tokio::time::timeout(timeout.min(MAX_WATCH), rx.wait_for(|m| m.version > known_version)) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
        let map = (**rx.borrow()).clone();
        ControlResponse::Map { map }
    }

    async fn stats(&self) -> ControlResponse {
        let mut stats = self.state.lock().await.stats();
        stats["uptime_secs"] = self.started.elapsed().as_secs().into();
        stats["requests"] = self.requests.load(Ordering::Relaxed).into();
        stats["enlistments"] = self.enlistments.load(Ordering::Relaxed).into();
        stats["connections"] = self.connections.load(Ordering::Relaxed).into();
        ControlResponse::Stats { stats }
    }

    /// Decides `req`, saves the result if it changed, then publishes it.
    async fn change(self: &Arc<Self>, req: ControlRequest) -> ControlResponse {
        let mut current = self.state.clone().lock_owned().await;
        let this = self.clone();
        let step = blocking(move || {
            let mut next = current.clone();
            let out = next.apply(&req);
            if out.changed {
                if let Err(e) = this.store.save(&next.encode()) {
                    error!("cannot save the coordinator's state; refusing {}: {e}", op_name(&req));
                    return Ok(ControlResponse::Error {
                        code: ControlErrorCode::Internal,
                        message: format!("the coordinator cannot save its state: {e}"),
                    });
                }
                *current = next;
                this.map.send_replace(Arc::new(current.map().clone()));
            }
            this.log(&req, &out, &current);
            Ok(out.response)
        });
        match step.await {
            Ok(response) => response,
            Err(e) => ControlResponse::Error { code: ControlErrorCode::Internal, message: e.to_string() },
        }
    }

    /// One line per change worth an operator's attention.
    fn log(&self, req: &ControlRequest, out: &Outcome, state: &ClusterState) {
        match (req, &out.response) {
            (
                ControlRequest::Enlist { previous, native, .. },
                ControlResponse::Enlisted { server, log, recover, map },
            ) => {
                self.enlistments.fetch_add(1, Ordering::Relaxed);
                if *previous == Some(*server) {
                    info!(
                        "server {server} re-enlisted at {native}: log {}, must replay logs {:?} ({} tablets, map version {})",
                        log.0,
                        recover.iter().map(|l| l.0).collect::<Vec<_>>(),
                        map.tablets_of(*server).count(),
                        map.version
                    );
                } else {
                    info!("server {server} enlisted at {native}: log {}, map version {}", log.0, map.version);
                }
            }
            (ControlRequest::CreateTable { name, .. }, ControlResponse::Table { table }) if out.changed => {
                let tablets = state.map().tablets.iter().filter(|t| t.table == table.id).count();
                info!(
                    "created table '{name}': id {}, {tablets} tablets, map version {}",
                    table.id.0,
                    state.map().version
                );
            }
            (ControlRequest::DropTable { name }, ControlResponse::Ok) => {
                info!("dropped table '{name}' (map version {})", state.map().version);
            }
            (ControlRequest::Recovered { server, logs }, ControlResponse::Ok) if out.changed => {
                let left = state.recover_list(*server);
                let now = state.map().server(*server).map(|s| s.state);
                info!(
                    "server {server} reports logs {:?} recovered; {} left to replay, now {now:?}",
                    logs.iter().map(|l| l.0).collect::<Vec<_>>(),
                    left.len()
                );
            }
            (_, ControlResponse::Error { code, message }) => {
                debug!("{} refused: {code:?}: {message}", op_name(req));
            }
            _ => {}
        }
    }
}

/// Runs `f` on the blocking pool; a panic in it becomes an error.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> std::io::Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(format!("coordinator task failed: {e}"))),
    }
}

fn op_name(req: &ControlRequest) -> &'static str {
    match req {
        ControlRequest::Enlist { .. } => "enlist",
        ControlRequest::GetMap => "get_map",
        ControlRequest::WatchMap { .. } => "watch_map",
        ControlRequest::CreateTable { .. } => "create_table",
        ControlRequest::DropTable { .. } => "drop_table",
        ControlRequest::GetTable { .. } => "get_table",
        ControlRequest::Recovered { .. } => "recovered",
        ControlRequest::Stats => "stats",
        ControlRequest::Suspect { .. } => "suspect",
        ControlRequest::RecoveryDone { .. } => "recovery_done",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicBool;

    /// A store in memory whose saves can be made to fail.
    #[derive(Default)]
    struct FlakyStore {
        bytes: parking_lot::Mutex<Option<Vec<u8>>>,
        fail: AtomicBool,
    }

    impl StateStore for FlakyStore {
        fn load(&self) -> io::Result<Option<Vec<u8>>> {
            Ok(self.bytes.lock().clone())
        }

        fn save(&self, state: &[u8]) -> io::Result<()> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(io::Error::other("disk on fire"));
            }
            *self.bytes.lock() = Some(state.to_vec());
            Ok(())
        }
    }

    fn enlist() -> ControlRequest {
        let a = SocketAddr::from(([127, 0, 0, 1], 5000));
        ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a }
    }

    #[tokio::test]
    async fn change_is_saved_before_it_is_published() {
        let store = Arc::new(FlakyStore::default());
        let service = Arc::new(Service::open(store.clone(), None).await.unwrap());
        let (_tx, mut rx) = watch::channel(false);
        let saved = store.bytes.lock().clone().unwrap();
        assert_eq!(ClusterState::decode(&saved, None).unwrap().0.map(), &*service.map());

        let resp = service.handle(enlist(), &mut rx).await;
        assert!(matches!(resp, ControlResponse::Enlisted { .. }), "{resp:?}");
        let saved = store.bytes.lock().clone().unwrap();
        assert_eq!(ClusterState::decode(&saved, None).unwrap().0.map(), &*service.map());
        assert_eq!(service.map().servers.len(), 1);
    }

    #[tokio::test]
    async fn change_that_cannot_be_saved_is_refused_and_forgotten() {
        let store = Arc::new(FlakyStore::default());
        let service = Arc::new(Service::open(store.clone(), None).await.unwrap());
        let (_tx, mut rx) = watch::channel(false);
        service.handle(enlist(), &mut rx).await;
        let before = service.map();

        store.fail.store(true, Ordering::Relaxed);
        let create = ControlRequest::CreateTable { name: "t".into(), span: 2 };
        let resp = service.handle(create.clone(), &mut rx).await;
        assert!(matches!(resp, ControlResponse::Error { code: ControlErrorCode::Internal, .. }), "{resp:?}");
        assert_eq!(service.map(), before);
        let get = service.handle(ControlRequest::GetTable { name: "t".into() }, &mut rx).await;
        assert!(matches!(get, ControlResponse::Error { code: ControlErrorCode::NotFound, .. }));

        store.fail.store(false, Ordering::Relaxed);
        let resp = service.handle(create, &mut rx).await;
        assert!(matches!(resp, ControlResponse::Table { .. }), "{resp:?}");
        assert_eq!(service.map().version, before.version + 1);
    }

    #[tokio::test]
    async fn open_refuses_a_corrupt_state() {
        let store = Arc::new(FlakyStore::default());
        *store.bytes.lock() = Some(b"{\"format\":1}".to_vec());
        assert!(matches!(Service::open(store, None).await, Err(CoordinatorError::Corrupt(_))));
    }

    #[tokio::test]
    async fn watch_returns_at_shutdown() {
        let service = Arc::new(Service::open(Arc::new(FlakyStore::default()), None).await.unwrap());
        let (tx, mut rx) = watch::channel(false);
        let version = service.map().version;
        let waiter = {
            let service = service.clone();
            tokio::spawn(async move {
                service
                    .handle(
                        ControlRequest::WatchMap { known_version: version, timeout_ms: 50_000, server: None },
                        &mut rx,
                    )
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        tx.send_replace(true);
        let resp = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert!(matches!(resp, ControlResponse::Map { map } if map.version == version));
    }
}
