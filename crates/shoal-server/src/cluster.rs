//! A server's life in a cluster: enlisting with the coordinator, keeping
//! the cluster map current, deciding which keys it serves, replicating its
//! log (through the replicator it hands the store as observer) and, after a
//! restart, rebuilding its tablets from its earlier logs on the backups.
//!
//! Front ends ask [`ClusterNode::route`] where a key lives, and wait on
//! [`ClusterNode::wait_durable`] before acknowledging a write. Everything
//! else here runs on the server's own thread: the map watcher and the
//! restart recovery.

use crate::config::{ReplicationMode, ServerConfig};
use crate::lease::Lease;
use parking_lot::{Mutex, RwLock};
use shoal_cluster::auth::{AuthError, ClusterSecret, Credential, Identity, SecretError};
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::CoordinatorAddrs;
use shoal_cluster::{
    find_chunk_range, ChunkRange, ClusterMap, ControlAuth, ControlClient, ControlError, ControlErrorCode,
    ControlRequest, ControlResponse, ReplicaFloor, ServerId, ServerState,
};
use shoal_common::dirlock::DirLock;
use shoal_common::{ChunkId, KeyHash, LogId, SegmentId, TableId};
use shoal_engine::Store;
use shoal_replication::backup::{Backup, BackupConfig, PeerHandlers};
use shoal_replication::master::{
    FloorRecorder, FloorRequest, ReplicationMode as WireMode, Replicator, ReplicatorConfig,
};
use shoal_replication::restore;
use shoal_replication::wire::KeyRange;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a starting server keeps trying to reach the coordinator.
const ENLIST_PATIENCE: Duration = Duration::from_secs(60);
/// Timeout of one control call.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one map watch waits for a change before asking again.
const WATCH_MS: u64 = 30_000;
/// How often a server pings a random peer (failure detection).
pub const PING_INTERVAL: Duration = Duration::from_millis(100);
/// How long a ping may take before it counts as missed.
pub const PING_TIMEOUT: Duration = Duration::from_millis(250);
/// Longest a recovery master waits for one backup to take a fence.
const FENCE_TIMEOUT: Duration = Duration::from_secs(2);
/// Segments a recovery master asks of backups at once (READ_PART).
const PARALLEL_PART_READS: usize = 8;
/// Segments' entries received and waiting for the replay: with the reads
/// in flight, what bounds a recovery master's memory beyond its store.
const PART_QUEUE: usize = 8;
/// Missed pings in a row before a peer is reported.
pub const PING_MISSES: u32 = 3;
/// The file in the data directory that remembers the server's id.
const ID_FILE: &str = "server-id";
/// The lock file a server holds in its data directory while it runs (with
/// its PID): a second server on the directory is refused.
pub const LOCK_FILE: &str = "server.lock";
/// The file beside it with the credential the coordinator issued for that
/// id (hex, mode 0600): proving it is what lets this server enlist again
/// under its id.
const CREDENTIAL_FILE: &str = "server-credential";

/// Where a key is served, as this server sees it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here.
    Local,
    /// By another server: its native and Redis addresses.
    Remote { native: SocketAddr, resp: SocketAddr },
    /// Here, once the restart recovery has rebuilt this server's tablets.
    Recovering,
    /// Here, but this server's lease has lapsed (it lost touch with the
    /// coordinator, or was stopped): served again once it is renewed,
    /// never if the server was declared dead meanwhile.
    NoLease,
    /// No tablet holds the key (the table does not exist in the cluster).
    NoTablet,
    /// Here, but the tablet is moving to another server
    /// (`docs/migration.md`): served again here if the move aborts, by
    /// the target once it commits.
    Moving,
}

/// Progress of a restart recovery (for statistics).
#[derive(Clone, Debug, Default)]
pub struct RecoveryProgress {
    pub logs: Vec<LogId>,
    pub phase: &'static str,
    pub segments: u64,
    pub bytes: u64,
    pub objects: u64,
    pub elapsed_ms: u64,
    pub done: bool,
}

/// The cluster map this server acts on, with what routing derives from
/// it once per map rather than once per request.
struct HeldMap {
    map: Arc<ClusterMap>,
    /// The highest server id the map names (0 if none): a chunk id of a
    /// node above it was created by a server that enlisted after this map
    /// ([`ClusterNode::route_chunks`]).
    newest_server: u64,
}

impl HeldMap {
    fn new(map: Arc<ClusterMap>) -> HeldMap {
        let newest_server = map.servers.iter().map(|s| s.id.0).max().unwrap_or(0);
        HeldMap { map, newest_server }
    }
}

impl std::ops::Deref for HeldMap {
    type Target = ClusterMap;

    fn deref(&self) -> &ClusterMap {
        &self.map
    }
}

/// This server's membership in a cluster.
pub struct ClusterNode {
    pub id: ServerId,
    /// The log this incarnation writes.
    pub log: LogId,
    pub coordinator: CoordinatorAddrs,
    /// How this server's control connections authenticate (the cluster
    /// secret and this server's credential).
    pub auth: ControlAuth,
    pub replicator: Arc<Replicator>,
    backup: Mutex<Option<Backup>>,
    backup_addr: SocketAddr,
    map: RwLock<HeldMap>,
    /// Earlier logs of this server to replay before serving.
    recover: Vec<LogId>,
    recovering: AtomicBool,
    pub recovery: Mutex<RecoveryProgress>,
    /// Declared dead by the coordinator (this server is a zombie): it
    /// serves nothing and stops.
    dead: AtomicBool,
    /// This incarnation's master lease (`lease.rs`): its tablets are
    /// served only while it is held.
    pub lease: Lease,
    /// The coordinator recorded this log's head durable on a backup
    /// ([`ClusterNode::report_head`]): until then it grants no lease
    /// while R > 0.
    head_reported: AtomicBool,
    /// The first head was opened while R was 0, so it went to no backup.
    head_opened_unreplicated: bool,
    /// Crash-recovery partitions this server is replaying now, by
    /// (recovery id, partition index).
    replaying: Mutex<HashSet<(u64, u32)>>,
    /// Partitions replayed by this server, with their progress (statistics).
    pub partitions: Mutex<Vec<PartitionProgress>>,
    /// Symmetric caching (`sc.rs`), when on. Its driver starts with
    /// [`ClusterNode::start_sc`].
    pub sc: Option<Arc<crate::sc::Sc>>,
    /// Tablet migrations, as source and target (`migrate.rs`).
    pub migrations: Arc<crate::migrate::Migrations>,
    /// Held while the server runs ([`LOCK_FILE`]).
    _dir_lock: DirLock,
}

/// One crash-recovery partition replayed by this server (statistics).
#[derive(Clone, Debug, Default)]
pub struct PartitionProgress {
    pub recovery: u64,
    pub partition: u32,
    pub dead: ServerId,
    pub phase: &'static str,
    pub segments: u64,
    pub bytes: u64,
    pub objects: u64,
    pub find_ms: u64,
    pub replay_ms: u64,
    pub durable_ms: u64,
    pub total_ms: u64,
}

/// Why a server could not join its cluster.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("cannot start the backup on {addr}: {source}")]
    Backup { addr: SocketAddr, source: std::io::Error },
    #[error("data directory {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    #[error("cannot enlist with the coordinator at {addr}: {source}")]
    Enlist { addr: CoordinatorAddrs, source: ControlError },
    #[error("the coordinator answered enlistment with {0}")]
    Unexpected(String),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("{0}")]
    Tls(String),
}

impl ClusterNode {
    /// Starts the backup, enlists with the coordinator (as the server this
    /// data directory was before, if it was one) and starts the replicator.
    /// `native` and `resp` are the bound front-end addresses.
    pub fn join(config: &ServerConfig, native: SocketAddr, resp: SocketAddr) -> Result<ClusterNode, JoinError> {
        let coordinator = config.coordinator.clone().expect("join is for servers with a coordinator");
        let dir = config.data_dir.clone().expect("validated: a cluster server has a data_dir");
        std::fs::create_dir_all(&dir).map_err(|source| JoinError::DataDir { path: dir.clone(), source })?;
        // Before anything in the directory is read or written: two servers
        // on one directory would claim one id and overwrite each other's
        // replicas.
        let dir_lock =
            DirLock::acquire(&dir, LOCK_FILE).map_err(|source| JoinError::DataDir { path: dir.clone(), source })?;
        let store_config = config.store_config();
        let secret = config.cluster_secret_file.as_deref().map(ClusterSecret::load).transpose()?;
        shoal_replication::dial::set_cluster_secret(secret.clone());
        let tls = config.internal_tls().map_err(JoinError::Tls)?;
        shoal_replication::dial::set_internal_tls(tls.clone());
        // Symmetric caching's id is only known after enlisting: the peer
        // handler reaches it through this cell.
        let sc_cell: Arc<OnceLock<Weak<crate::sc::Sc>>> = Arc::new(OnceLock::new());
        let migrations = Arc::new(crate::migrate::Migrations::default());
        let backup_config = BackupConfig {
            listen: config.backup_addr(),
            data_dir: dir.clone(),
            segment_bytes: store_config.segment_bytes as u32,
            buffers: config.backup_buffers,
            flush_limit: (config.backup_buffers / 2).max(1),
            sync_open: config.sync_open,
            max_connections: 1024,
            max_connections_per_ip: 64,
            secret: secret.clone(),
            tls: tls.clone(),
            peers: (config.sc == crate::config::ScSwitch::On)
                .then(|| PeerHandlers(Arc::new(crate::sc::ScPeers(sc_cell.clone())))),
            migrations: Some(PeerHandlers(Arc::new(crate::migrate::TargetHandler(migrations.clone())))),
        };
        let backup =
            Backup::start(backup_config).map_err(|source| JoinError::Backup { addr: config.backup_addr(), source })?;
        let backup_addr = backup.local_addr();
        let previous = read_id(&dir);
        let credential = read_credential(&dir).map_err(|source| JoinError::DataDir { path: dir.clone(), source })?;
        let identity = match (previous, credential) {
            (Some(p), Some(credential)) => Some(Identity { id: p.0, credential }),
            _ => None,
        };
        let enlist_auth = ControlAuth { secret: secret.clone(), identity, tls: tls.clone() };
        let req = ControlRequest::Enlist { previous, native, resp, backup: backup_addr };
        let deadline = Instant::now() + ENLIST_PATIENCE;
        let reply = loop {
            match call_blocking_any(&coordinator, &enlist_auth, &req, CONTROL_TIMEOUT) {
                Ok(r) => break r,
                // An address this server listens on is still held in the
                // map by a live server: one that died and had it before
                // (ports picked by the system are reused). It is declared
                // dead, or enlists again elsewhere, within seconds: wait
                // for that rather than stop.
                Err(ControlError::Refused { code: ControlErrorCode::Unauthorized, ref message })
                    if message.contains("is held by live server") && Instant::now() < deadline =>
                {
                    warn!("cannot enlist yet: {message}; retrying");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(
                    e @ (ControlError::Refused { .. }
                    | ControlError::Auth(AuthError::WrongSecret | AuthError::Refused(_) | AuthError::TlsRequired)),
                ) => {
                    return Err(JoinError::Enlist { addr: coordinator.clone(), source: e });
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(JoinError::Enlist { addr: coordinator.clone(), source: e })
                }
                Err(e) => {
                    warn!("coordinator {coordinator} not reachable yet ({e}); retrying");
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        };
        let ControlResponse::Enlisted { server, log, recover, map, credential: issued } = reply else {
            return Err(JoinError::Unexpected(format!("{reply:?}")));
        };
        let data_dir_err = |source| JoinError::DataDir { path: dir.clone(), source };
        // The credential first: an id on disk without its credential could
        // never enlist under that id again.
        let credential = match issued {
            Some(text) => {
                let c = Credential::from_hex(&text)
                    .ok_or_else(|| JoinError::Unexpected("a malformed credential".into()))?;
                write_credential(&dir, &c).map_err(data_dir_err)?;
                Some(c)
            }
            None => identity.filter(|i| i.id == server.0).map(|i| i.credential),
        };
        write_id(&dir, server).map_err(data_dir_err)?;
        let auth = ControlAuth {
            secret: secret.clone(),
            identity: credential.map(|credential| Identity { id: server.0, credential }),
            tls,
        };
        info!(
            "enlisted with {coordinator} as server {server}, writing log {}; {} earlier log(s) to recover",
            log.0,
            recover.len()
        );
        let replicator = Replicator::start(ReplicatorConfig {
            master: server,
            log,
            log_version: 1,
            segment_bytes: store_config.segment_bytes as u32,
            mode: match config.replication {
                ReplicationMode::Tailwind => WireMode::Tailwind,
                ReplicationMode::Conventional => WireMode::Conventional,
            },
            replica_timeout: Duration::from_millis(config.replica_timeout_ms.max(1)),
            floor_recorder: Some(floor_recorder(coordinator.clone(), auth.clone(), server, log)),
        });
        let sc = (config.sc == crate::config::ScSwitch::On).then(|| {
            let sc = crate::sc::Sc::new(
                server,
                crate::sc::ScSettings {
                    consistency: match config.sc_consistency {
                        crate::config::ScConsistency::Strong => shoal_symcache::Consistency::Strong,
                        crate::config::ScConsistency::Eventual => shoal_symcache::Consistency::Eventual,
                    },
                    epoch_ms: config.sc_epoch_ms.max(1),
                    cache_keys: config.sc_cache_keys,
                },
            );
            let _ = sc_cell.set(Arc::downgrade(&sc));
            sc
        });
        let node = ClusterNode {
            sc,
            migrations,
            id: server,
            log,
            coordinator,
            auth,
            replicator,
            backup: Mutex::new(Some(backup)),
            backup_addr,
            map: RwLock::new(HeldMap::new(Arc::new(ClusterMap::default()))),
            recovering: AtomicBool::new(!recover.is_empty()),
            recover,
            head_reported: AtomicBool::new(false),
            head_opened_unreplicated: map.replicas == 0,
            recovery: Mutex::new(RecoveryProgress::default()),
            dead: AtomicBool::new(false),
            lease: Lease::default(),
            replaying: Mutex::new(HashSet::new()),
            partitions: Mutex::new(Vec::new()),
            _dir_lock: dir_lock,
        };
        node.set_map(map);
        Ok(node)
    }

    /// Starts symmetric caching's driver, if it is on.
    pub fn start_sc(self: &Arc<ClusterNode>) -> std::io::Result<()> {
        match &self.sc {
            Some(sc) => sc.start(Arc::downgrade(self)),
            None => Ok(()),
        }
    }

    /// A control client that proves this server (its secret and
    /// credential) to the coordinator, for the requests that speak for it.
    pub fn control_client(&self) -> ControlClient {
        ControlClient::new(self.coordinator.clone()).with_timeout(CONTROL_TIMEOUT).with_auth(self.auth.clone())
    }

    /// The cluster map as last received.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().map.clone()
    }

    pub fn backup_addr(&self) -> SocketAddr {
        self.backup_addr
    }

    /// The backup's statistics (None once stopped).
    pub fn backup_stats(&self) -> Option<shoal_replication::backup::BackupStats> {
        self.backup.lock().as_ref().map(|b| b.stats())
    }

    /// Whether the coordinator declared this server dead.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub fn is_recovering(&self) -> bool {
        self.recovering.load(Ordering::Acquire)
    }

    /// Whether this incarnation may hold a master lease, as far as this
    /// server knows: its head is on a backup, or there is no replication.
    pub fn may_serve(&self) -> bool {
        self.head_reported.load(Ordering::Acquire) || self.map().replicas == 0
    }

    /// Waits until [`ClusterNode::may_serve`]; false on shutdown.
    async fn wait_may_serve(&self, shutdown: &mut tokio::sync::watch::Receiver<bool>) -> bool {
        while !self.may_serve() {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = shutdown.wait_for(|s| *s) => return false,
            }
        }
        true
    }

    /// Makes this incarnation's log one that a recovery looks for: once
    /// the cluster replicates (R >= 1), a head durable on R backups,
    /// reported to the coordinator (`HeadReplicated`). Until the report is
    /// saved the coordinator grants this server no lease, so the log
    /// acknowledges nothing, and a recovery that finds no replica of it
    /// takes it for empty (`docs/recovery.md`, "A log that never reached a
    /// backup"). A head opened while R was 0 went to no backup: a new head
    /// is rolled for the report.
    pub async fn report_head(self: Arc<Self>, store: Arc<Store>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        loop {
            if self.is_dead() || *shutdown.borrow() {
                return;
            }
            let map = self.map();
            if map.head_replicated(self.log) {
                self.head_reported.store(true, Ordering::Release);
                return;
            }
            if map.replicas > 0 {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
        if self.head_opened_unreplicated {
            let s = store.clone();
            match tokio::task::spawn_blocking(move || s.roll_head()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!("cannot open a head to replicate: {e}; this server gets no lease"),
                Err(e) => warn!("cannot open a head to replicate: {e}; this server gets no lease"),
            }
        }
        let pos = self.position();
        tokio::select! {
            durable = self.wait_durable(pos) => if !durable { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let mut client =
            ControlClient::new(self.coordinator.clone()).with_timeout(CONTROL_TIMEOUT).with_auth(self.auth.clone());
        let req = ControlRequest::HeadReplicated { server: self.id, log: self.log };
        loop {
            match client.call(&req).await {
                Ok(_) => break,
                Err(e @ ControlError::Refused { .. }) => {
                    warn!("the coordinator refused this log's head report: {e}");
                    return;
                }
                Err(e) => {
                    warn!("cannot report this log's head replicated: {e}; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            }
        }
        self.head_reported.store(true, Ordering::Release);
        info!("log {}: head durable on {} backup(s); reported", self.log.0, self.map().replicas);
    }

    /// Installs `map` if it is newer than the one held; returns whether it was.
    fn set_map(&self, map: ClusterMap) -> bool {
        let mut held = self.map.write();
        if map.version <= held.version && held.version != 0 {
            return false;
        }
        let backups: Vec<(ServerId, SocketAddr)> =
            map.live_servers().filter(|s| s.id != self.id).map(|s| (s.id, s.backup)).collect();
        self.replicator.set_backups(backups, map.replicas);
        *held = HeldMap::new(Arc::new(map));
        true
    }

    /// Where `(table, hash)` is served, for any request.
    pub fn route(&self, table: TableId, hash: KeyHash) -> Route {
        self.route_for(table, hash, false)
    }

    /// [`ClusterNode::route`] for a request that only reads: a tablet this
    /// server is copying to another (`docs/migration.md`) is still served
    /// for reads until the last step of the move.
    pub fn route_read(&self, table: TableId, hash: KeyHash) -> Route {
        self.route_for(table, hash, true)
    }

    /// Where a request on chunks `ids` of chunk table `table` is served
    /// (`ClusterMap::chunk_ranges`), under one look at the map: `Local` if
    /// every id is served here, else the route (as [`ClusterNode::route`]'s)
    /// of the first that is not. An id in no range of a node id this map
    /// knows was never handed out (every server that creates chunks holds
    /// the range of its node id, and ranges only move): it counts as
    /// `Local`, and the store answers that no such chunk exists. An id of
    /// a node id above every server this map knows is of a server that
    /// enlisted after it (server ids only grow): `NoTablet`, so the client
    /// refreshes its map and asks again, rather than being told that a
    /// chunk another client created does not exist.
    ///
    /// An id of a range this server is moving to another is `Moving` for
    /// any request from the freeze on, and for reads (`read_only`) too
    /// from the last step before the commit (`docs/chunks.md`).
    pub fn route_chunks(&self, table: TableId, ids: &mut dyn Iterator<Item = ChunkId>, read_only: bool) -> Route {
        if self.is_dead() {
            return Route::NoTablet;
        }
        let map = self.map.read();
        for id in ids {
            match map.chunk_owner(table, id) {
                Some(r) => match self.route_to(&map, Some(r.master)) {
                    Route::Local if self.migrations.is_chunk_frozen(table, id, read_only) => return Route::Moving,
                    Route::Local => {}
                    other => return other,
                },
                None if u64::from(id.node()) > map.newest_server => return Route::NoTablet,
                None => {}
            }
        }
        Route::Local
    }

    /// Where chunks of chunk table `table` are created with this server's
    /// node id: here if it holds the whole range of its own node id's
    /// chunks and none of it is moving (`ClusterMap::chunk_creators`),
    /// `NoTablet` if not.
    pub fn route_chunk_create(&self, table: TableId) -> Route {
        if self.is_dead() {
            return Route::NoTablet;
        }
        let map = self.map.read();
        let mine = map.chunk_creators(table).any(|s| s == self.id);
        self.route_to(&map, mine.then_some(self.id))
    }

    /// The route to a chunk range's `master` (none: `NoTablet`).
    fn route_to(&self, map: &ClusterMap, master: Option<ServerId>) -> Route {
        match master {
            None => Route::NoTablet,
            Some(m) if m == self.id => {
                if self.is_recovering() {
                    Route::Recovering
                } else if !self.lease.held() {
                    Route::NoLease
                } else {
                    Route::Local
                }
            }
            Some(m) => match map.server(m) {
                Some(s) if s.state != ServerState::Down => Route::Remote { native: s.native, resp: s.resp },
                _ => Route::Recovering,
            },
        }
    }

    fn route_for(&self, table: TableId, hash: KeyHash, read_only: bool) -> Route {
        if self.is_dead() {
            return Route::NoTablet;
        }
        let map = self.map.read();
        let Some(t) = map.tablet(table, hash) else {
            return Route::NoTablet;
        };
        if t.master == self.id {
            return if self.is_recovering() {
                Route::Recovering
            } else if !self.lease.held() {
                Route::NoLease
            } else if self.migrations.is_frozen(table, hash, read_only) {
                Route::Moving
            } else {
                Route::Local
            };
        }
        match map.server(t.master) {
            Some(s) if s.state != ServerState::Down => Route::Remote { native: s.native, resp: s.resp },
            // Its master is gone; the coordinator will move it (crash recovery).
            _ => Route::Recovering,
        }
    }

    /// Held by a front end from its routing decision ([`ClusterNode::route`])
    /// to the end of the store operation it routed, so that a tablet
    /// migration's freeze waits for the operations already routed here
    /// (`migrate.rs`). Cheap (one atomic), and never blocks unless a freeze
    /// is starting.
    pub fn serving(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.migrations.serving()
    }

    /// The local tablet holding `(table, hash)`: its last hash, or where
    /// the tablet is served if not here.
    pub fn local_tablet_end(&self, table: TableId, hash: KeyHash) -> Result<u64, Route> {
        match self.route(table, hash) {
            Route::Local => {}
            other => return Err(other),
        }
        let map = self.map.read();
        map.tablet(table, hash).map(|t| t.end_hash).ok_or(Route::NoTablet)
    }

    /// The current log position; a write applied before this call is
    /// durable once [`ClusterNode::wait_durable`] of it returns.
    pub fn position(&self) -> u64 {
        self.replicator.position()
    }

    /// Waits until every byte before `pos` is on all its replicas.
    pub async fn wait_durable(&self, pos: u64) -> bool {
        if self.replicator.durable() >= pos {
            return true;
        }
        self.replicator.wait_durable(pos).await.is_ok()
    }

    /// [`ClusterNode::wait_durable`] for a recovery's replayed data, with a
    /// warning every 5 s while it is not durable: with fewer other servers
    /// up than R, it cannot be until more come.
    async fn wait_durable_saying_why(&self, pos: u64, recovery: u64) -> bool {
        let started = Instant::now();
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.wait_durable(pos)).await {
                Ok(done) => return done,
                Err(_) => {
                    let map = self.map();
                    let others = map.servers.iter().filter(|s| s.id != self.id && s.state == ServerState::Up).count();
                    warn!(
                        "recovery {recovery}: replayed data not durable after {} s (R = {}, {} other servers up)",
                        started.elapsed().as_secs(),
                        map.replicas,
                        others
                    );
                }
            }
        }
    }

    /// Keeps the map current until shutdown: long-polls the coordinator and
    /// applies every newer map (`on_map` sees each one).
    pub async fn watch_map(
        self: Arc<Self>,
        store: Arc<Store>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        on_map: impl Fn(&ClusterMap),
        on_dead: impl Fn(),
    ) {
        let mut client =
            ControlClient::new(self.coordinator.clone()).with_timeout(CONTROL_TIMEOUT).with_auth(self.auth.clone());
        on_map(&self.map());
        self.apply_map(&store, &shutdown, &on_dead);
        loop {
            let known = self.map.read().version;
            let req = ControlRequest::WatchMap { known_version: known, timeout_ms: WATCH_MS, server: Some(self.id) };
            let call = client.call(&req);
            let reply = tokio::select! {
                r = call => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match reply {
                Ok(ControlResponse::Map { map }) => {
                    if self.set_map(map) {
                        on_map(&self.map());
                        self.apply_map(&store, &shutdown, &on_dead);
                        if self.is_dead() {
                            return;
                        }
                    }
                }
                Ok(other) => warn!("coordinator answered a map watch with {other:?}"),
                Err(e) => {
                    warn!("cannot watch the cluster map: {e}; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            }
        }
    }

    /// Acts on a new map: fences (and frees) logs on the local backup,
    /// stops if this server was declared dead, and starts replaying every
    /// crash-recovery partition assigned here.
    fn apply_map(
        self: &Arc<Self>,
        store: &Arc<Store>,
        shutdown: &tokio::sync::watch::Receiver<bool>,
        on_dead: &impl Fn(),
    ) {
        let map = self.map();
        if let Some(backup) = self.backup.lock().as_ref() {
            for f in &map.fenced {
                backup.fence(f.log, f.version);
                if f.free {
                    backup.free_log(f.log);
                }
            }
        }
        // Declared dead, or retired from the map since (the coordinator
        // removes dead servers once nothing names them).
        let me = map.server(self.id);
        if me.is_none_or(|s| s.state == ServerState::Down) && !self.dead.swap(true, Ordering::AcqRel) {
            warn!("the coordinator declared this server ({}) dead: serving nothing more and stopping", self.id);
            self.lease.revoke();
            // Writes waiting for replication are never acknowledged.
            self.replicator.shutdown();
            on_dead();
            return;
        }
        self.migrations.on_map(self, &map);
        for rec in &map.recoveries {
            for (i, part) in rec.partitions.iter().enumerate() {
                if part.master != self.id || part.done {
                    continue;
                }
                if !self.replaying.lock().insert((rec.id, i as u32)) {
                    continue;
                }
                let node = self.clone();
                let (store, rec, shutdown) = (store.clone(), rec.clone(), shutdown.clone());
                tokio::spawn(async move {
                    node.clone().replay_partition(store, rec.clone(), i, shutdown).await;
                    node.replaying.lock().remove(&(rec.id, i as u32));
                });
            }
        }
    }

    /// Whether partition `index` of recovery `id` is still this server's to do.
    fn still_mine(&self, id: u64, index: usize) -> bool {
        let map = self.map();
        map.recoveries
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| r.partitions.get(index))
            .is_some_and(|p| p.master == self.id && !p.done)
    }

    /// Replays one partition of a crashed master's logs (docs/recovery.md,
    /// phase 3): fences the logs on every backup, finds them, replays the
    /// partition's keys, waits until they are durable in this server's log
    /// and reports to the coordinator, which then hands over the tablets.
    async fn replay_partition(
        self: Arc<Self>,
        store: Arc<Store>,
        rec: shoal_cluster::Recovery,
        index: usize,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let started = Instant::now();
        let part = rec.partitions[index].clone();
        info!(
            "recovery {} of server {}: replaying partition {index} ({} tablet pieces) of logs {:?}",
            rec.id,
            rec.dead,
            part.tablets.len(),
            rec.logs.iter().map(|l| l.0).collect::<Vec<_>>()
        );
        let mut progress = PartitionProgress {
            recovery: rec.id,
            partition: index as u32,
            dead: rec.dead,
            phase: "fencing",
            ..Default::default()
        };
        let publish = |p: &PartitionProgress| {
            let mut all = self.partitions.lock();
            match all.iter_mut().find(|x| x.recovery == p.recovery && x.partition == p.partition) {
                Some(x) => *x = p.clone(),
                None => all.push(p.clone()),
            }
        };
        publish(&progress);
        // This server may hold objects of the pieces from an earlier time
        // it had them (a move that went away, or one given up): not its
        // tablets, so forgotten. Then a new head: the replay's entries are
        // all at or above it, so what this log holds of the pieces below it
        // is from before, and the coordinator records that (`since`).
        let forget = {
            let (store, pieces, chunks) = (store.clone(), part.tablets.clone(), part.chunks.clone());
            tokio::task::spawn_blocking(move || {
                for t in &pieces {
                    store.forget_range(t.table, t.start_hash, t.end_hash)?;
                }
                for c in &chunks {
                    store.forget_chunk_range(c.table, c.node, c.lo, c.hi)?;
                }
                store.roll_head()
            })
        };
        let since = match forget.await {
            Ok(Ok(since)) => since,
            Ok(Err(e)) => {
                warn!("recovery {}: partition {index}: cannot start the replay: {e}", rec.id);
                return;
            }
            Err(e) => {
                warn!("recovery {}: partition {index}: cannot start the replay: {e}", rec.id);
                return;
            }
        };
        // The replay runs on a thread of its own while the backups' answers
        // arrive (each a segment's share of this partition, cut by the
        // backup), so reading and replaying overlap.
        let (sink, mut arrivals) = tokio::sync::mpsc::channel::<restore::PartSegment>(PART_QUEUE);
        let s = store.clone();
        // This server keeps creating chunks of its own node while it replays.
        let own_node = u16::try_from(self.id.0).unwrap_or(u16::MAX);
        let replayer = shoal_replication::spawn_recovery_work("shoal-replay", move || {
            let mut replay = shoal_engine::Replay::creating(own_node);
            while let Some(p) = arrivals.blocking_recv() {
                s.replay_entries(&mut replay, &p.entries, shoal_engine::Version(p.safe_version))?;
            }
            s.finish_replay(replay)
        });
        let replayer = match replayer {
            Ok(r) => r,
            Err(e) => {
                warn!("recovery {}: partition {index}: cannot start the replay thread: {e}", rec.id);
                return;
            }
        };
        for &log in &rec.logs {
            let read = loop {
                if *shutdown.borrow() || !self.still_mine(rec.id, index) {
                    return;
                }
                let map = self.map();
                let backups: Vec<SocketAddr> =
                    map.servers.iter().filter(|s| s.state != ServerState::Down).map(|s| s.backup).collect();
                // Replicas the dead master left behind are not read. Its
                // floors are all in this map: the coordinator takes none
                // from a server it declared dead.
                let floors = restore::Floors::of_log(&map, log);
                // Each piece counts from where the dead master's ownership
                // of it began in this log (`map.owned_since`), chunk id
                // ranges too (one may have moved away and back).
                let chunk_ranges = part.chunks.iter().flat_map(|c| {
                    let pieces = map.owned_chunk_pieces(rec.dead, log, c.table, c.node, c.lo, c.hi);
                    pieces.into_iter().map(|p| (KeyRange::chunk_ids(c.table, c.node, p.start_hash, p.end_hash), p.from))
                });
                let ranges = Arc::new(restore::PartitionRanges::new(
                    part.tablets
                        .iter()
                        .flat_map(|t| {
                            let pieces = map.owned_pieces(rec.dead, log, t.table, t.start_hash, t.end_hash);
                            pieces.into_iter().map(|p| (KeyRange::hashes(t.table, p.start_hash, p.end_hash), p.from))
                        })
                        .chain(chunk_ranges)
                        .collect(),
                ));
                // Fence first: from here on the dead master (if it still
                // runs) cannot make another byte durable on these backups.
                // All backups at once.
                let mut fences = tokio::task::JoinSet::new();
                for &b in &backups {
                    let version = rec.log_version;
                    fences.spawn(async move {
                        (b, tokio::time::timeout(FENCE_TIMEOUT, restore::fence(b, log, version)).await)
                    });
                }
                while let Some(done) = fences.join_next().await {
                    match done {
                        Ok((b, Ok(Err(e)))) => {
                            warn!("recovery {}: cannot fence log {} on backup {b}: {e}", rec.id, log.0)
                        }
                        Ok((b, Err(_))) => warn!("recovery {}: fencing log {} on backup {b} timed out", rec.id, log.0),
                        _ => {}
                    }
                }
                progress.phase = "reading replicas";
                publish(&progress);
                let opts = restore::FindOptions { parallel_reads: PARALLEL_PART_READS, ..Default::default() };
                match restore::read_partition(&backups, log, &floors, ranges.clone(), index, opts, sink.clone()).await {
                    // No replica of the log on any backup in the map. With
                    // replication on, every log of a server that served has
                    // a replicated head, so its backups have not come back
                    // yet (a server declared dead returns as a new one):
                    // wait rather than recover an empty log.
                    Ok(read) if read.head.is_none() && self.map().replicas > 0 && self.map().head_replicated(log) => {
                        warn!(
                        "recovery {}: log {}: no replica on any of {} backups; waiting for the backups that hold it",
                        rec.id,
                        log.0,
                        backups.len()
                    )
                    }
                    Ok(read) => break read,
                    // The replay failed: its error is reported below.
                    Err(restore::RestoreError::Closed) => break restore::PartitionRead::default(),
                    Err(e) => warn!("recovery {}: log {}: {e}; waiting", rec.id, log.0),
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            };
            progress.segments += read.segments as u64;
            progress.bytes += read.entry_bytes;
        }
        drop(sink);
        progress.find_ms = started.elapsed().as_millis() as u64;
        progress.phase = "replaying";
        publish(&progress);
        let replay_started = Instant::now();
        match replayer.await {
            Ok(Ok(report)) => progress.objects = report.objects_replayed - report.objects_removed,
            Ok(Err(e)) => {
                warn!("recovery {}: partition {index}: replay failed: {e}", rec.id);
                progress.phase = "failed";
                publish(&progress);
                return;
            }
            Err(e) => {
                warn!("recovery {}: partition {index}: replay task failed: {e}", rec.id);
                progress.phase = "failed";
                publish(&progress);
                return;
            }
        }
        progress.replay_ms = replay_started.elapsed().as_millis() as u64;
        progress.phase = "re-replicating";
        publish(&progress);
        let durable_started = Instant::now();
        if !self.wait_durable_saying_why(self.position(), rec.id).await {
            return;
        }
        progress.durable_ms = durable_started.elapsed().as_millis() as u64;
        // The coordinator must know this log is one to recover before it
        // hands the partition over (and frees the dead master's logs).
        if !self.wait_may_serve(&mut shutdown).await {
            return;
        }
        let mut client =
            ControlClient::new(self.coordinator.clone()).with_timeout(CONTROL_TIMEOUT).with_auth(self.auth.clone());
        let done = ControlRequest::RecoveryDone {
            recovery: rec.id,
            partition: index as u32,
            server: self.id,
            objects: progress.objects,
            bytes: progress.bytes,
            replay_ms: progress.find_ms + progress.replay_ms + progress.durable_ms,
            since: Some(since),
        };
        loop {
            match client.call(&done).await {
                Ok(_) => break,
                // The partition is no longer ours (the coordinator gave it to
                // another server meanwhile): what was replayed here is never
                // served, since the tablets are not ours.
                Err(e @ ControlError::Refused { .. }) => {
                    warn!("recovery {}: partition {index} done but refused: {e}", rec.id);
                    progress.phase = "refused";
                    publish(&progress);
                    return;
                }
                Err(e) => {
                    warn!("recovery {}: cannot report partition {index} done: {e}; retrying", rec.id);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            }
        }
        progress.total_ms = started.elapsed().as_millis() as u64;
        progress.phase = "done";
        publish(&progress);
        info!(
            "recovery {} of server {}: partition {index} done: {} objects, {} bytes in {} segments; find {} ms, \
             replay {} ms, re-replication {} ms, total {} ms",
            rec.id,
            rec.dead,
            progress.objects,
            progress.bytes,
            progress.segments,
            progress.find_ms,
            progress.replay_ms,
            progress.durable_ms,
            progress.total_ms
        );
    }

    /// Failure detection (docs/recovery.md, phase 1): every
    /// `PING_INTERVAL` pings a random live peer; a peer that misses
    /// `PING_MISSES` pings in a row is reported to the coordinator.
    pub async fn ping_peers(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        use rand::seq::SliceRandom;
        let mut client =
            ControlClient::new(self.coordinator.clone()).with_timeout(CONTROL_TIMEOUT).with_auth(self.auth.clone());
        let mut conns: HashMap<SocketAddr, tokio::net::TcpStream> = HashMap::new();
        let mut ticker = tokio::time::interval(PING_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            if self.is_dead() {
                return;
            }
            let map = self.map();
            let peers: Vec<_> =
                map.servers.iter().filter(|s| s.id != self.id && s.state != ServerState::Down).collect();
            let Some(peer) = peers.choose(&mut rand::thread_rng()) else { continue };
            let mut misses = 0;
            while misses < PING_MISSES {
                if ping(&mut conns, peer.native).await.is_ok() {
                    break;
                }
                conns.remove(&peer.native);
                misses += 1;
            }
            if misses < PING_MISSES {
                continue;
            }
            warn!("server {} ({}) missed {misses} pings: reporting it to the coordinator", peer.id, peer.native);
            if let Err(e) = client.call(&ControlRequest::Suspect { reporter: self.id, suspect: peer.id }).await {
                warn!("cannot report server {} to the coordinator: {e}", peer.id);
            }
        }
    }

    /// Rebuilds this server's tablets from its earlier logs (a restart):
    /// finds each log on the backups, replays it into `store`, waits until
    /// what was replayed is replicated in the current log, tells the
    /// coordinator, frees the old replicas and starts serving. Waits (and
    /// says so) while a segment of an earlier log is on no reachable backup.
    pub async fn recover(self: Arc<Self>, store: Arc<Store>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        if self.recover.is_empty() {
            return;
        }
        let started = Instant::now();
        {
            let mut p = self.recovery.lock();
            p.logs = self.recover.clone();
            p.phase = "finding replicas";
        }
        for &log in &self.recover {
            let found = loop {
                // Servers declared dead are not waited for: their logs are
                // fenced and recovered elsewhere, and with R >= 2 every
                // segment has a replica on another backup.
                let map = self.map();
                let backups: Vec<SocketAddr> =
                    map.servers.iter().filter(|s| s.state != ServerState::Down).map(|s| s.backup).collect();
                // Replicas the earlier incarnation left behind are not read,
                // nor a head below its head floor.
                let floors = restore::Floors::of_log(&map, log);
                let attempt = tokio::select! {
                    r = restore::find_log(&backups, log, &floors) => r,
                    _ = shutdown.wait_for(|s| *s) => return,
                };
                match attempt {
                    // A backup that did not answer might hold the only
                    // replicas of a newer head: wait for every server.
                    Ok(found) if !found.unreachable.is_empty() => {
                        warn!("recovery of log {}: waiting for backups {:?} to answer", log.0, found.unreachable);
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = shutdown.wait_for(|s| *s) => return,
                        }
                    }
                    // No replica anywhere: its backups are not back yet
                    // (with replication on, a log that served has a
                    // replicated head).
                    Ok(found) if found.head.is_none() && self.map().replicas > 0 && self.map().head_replicated(log) => {
                        warn!("recovery of log {}: no replica on any of {} backups; waiting", log.0, backups.len());
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = shutdown.wait_for(|s| *s) => return,
                        }
                    }
                    Ok(found) => break found,
                    Err(e) => {
                        warn!("recovery of log {}: {e}; waiting for its backups", log.0);
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = shutdown.wait_for(|s| *s) => return,
                        }
                    }
                }
            };
            let segments = found.segments.len() as u64;
            info!("recovery of log {}: {} segments, {} bytes found; replaying", log.0, segments, found.bytes);
            {
                let mut p = self.recovery.lock();
                p.phase = "replaying";
                p.segments += segments;
                p.bytes += found.bytes;
            }
            // Only this server's tablets, each from where it gained it:
            // the log may hold tablets that moved away since, and older
            // entries of ones that came back.
            let owned = OwnedRanges::of(&self.map(), self.id, log);
            let s = store.clone();
            let replayed = tokio::task::spawn_blocking(move || {
                let segments = found.segments.iter().map(|(id, b)| (*id, b.as_slice()));
                s.replay_filtered(segments, |segment, table, key| owned.keeps(segment, table, key))
            })
            .await;
            match replayed {
                Ok(Ok(report)) => {
                    info!("recovery of log {}: {} objects replayed", log.0, report.objects_replayed);
                    self.recovery.lock().objects += report.objects_replayed;
                }
                Ok(Err(e)) => {
                    warn!("recovery of log {} failed: {e}; this server's tablets stay unavailable", log.0);
                    self.recovery.lock().phase = "failed";
                    return;
                }
                Err(e) => {
                    warn!("recovery of log {} failed: {e}", log.0);
                    self.recovery.lock().phase = "failed";
                    return;
                }
            }
        }
        self.recovery.lock().phase = "re-replicating";
        if !self.wait_durable(self.position()).await || !self.wait_may_serve(&mut shutdown).await {
            return;
        }
        let mut client =
            ControlClient::new(self.coordinator.clone()).with_timeout(CONTROL_TIMEOUT).with_auth(self.auth.clone());
        loop {
            match client.call(&ControlRequest::Recovered { server: self.id, logs: self.recover.clone() }).await {
                Ok(_) => break,
                Err(e) => {
                    warn!("cannot report the recovery to the coordinator: {e}; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            }
        }
        self.recovering.store(false, Ordering::Release);
        let elapsed = started.elapsed();
        {
            let mut p = self.recovery.lock();
            p.phase = "done";
            p.done = true;
            p.elapsed_ms = elapsed.as_millis() as u64;
        }
        info!("recovered {} earlier log(s) in {:.3} s; serving", self.recover.len(), elapsed.as_secs_f64());
        let backups: Vec<SocketAddr> = self.map().servers.iter().map(|s| s.backup).collect();
        for &log in &self.recover {
            for &b in &backups {
                if let Err(e) = restore::free_log(b, log).await {
                    warn!("could not free log {} on backup {b}: {e}", log.0);
                }
            }
        }
    }

    /// Stops the backup and the replicator.
    pub fn stop(&self) {
        self.replicator.shutdown();
        if let Some(b) = self.backup.lock().take() {
            b.shutdown();
        }
    }
}

/// The key ranges a server owns, each with the first segment of one of its
/// logs whose entries of it count (`ClusterMap::owned_pieces`), sorted
/// for lookup by key hash; and its chunk id ranges likewise
/// (`ClusterMap::owned_chunk_pieces`), sorted for [`find_chunk_range`],
/// each piece's first segment beside it.
struct OwnedRanges {
    keys: Vec<(TableId, u64, u64, SegmentId)>,
    chunks: Vec<ChunkRange>,
    chunks_from: std::collections::HashMap<(TableId, u16, u64), SegmentId>,
    chunk_tables: Vec<TableId>,
}

impl OwnedRanges {
    /// `server`'s tablets and chunk id ranges in `map`, as they count in
    /// its log `log`.
    fn of(map: &ClusterMap, server: ServerId, log: LogId) -> OwnedRanges {
        let mut v: Vec<(TableId, u64, u64, SegmentId)> = map
            .tablets_of(server)
            .flat_map(|t| {
                let pieces = map.owned_pieces(server, log, t.table, t.start_hash, t.end_hash);
                pieces.into_iter().map(|p| (t.table, p.start_hash, p.end_hash, p.from))
            })
            .collect();
        v.sort();
        let mut chunks = Vec::new();
        let mut chunks_from = std::collections::HashMap::new();
        for c in map.chunk_ranges.iter().filter(|c| c.master == server) {
            for p in map.owned_chunk_pieces(server, log, c.table, c.node, c.lo, c.hi) {
                chunks.push(ChunkRange { lo: p.start_hash, hi: p.end_hash, ..*c });
                chunks_from.insert((c.table, c.node, p.start_hash), p.from);
            }
        }
        chunks.sort();
        let chunk_tables = map.tables.iter().filter(|t| t.chunks).map(|t| t.id).collect();
        OwnedRanges { keys: v, chunks, chunks_from, chunk_tables }
    }

    /// Whether an entry of `table`'s `key` in `segment` is the server's. A
    /// chunk entry comes with the chunk's id as its key
    /// (`format::chunk_key`; the replay's filter offers chunks so).
    fn keeps(&self, segment: SegmentId, table: TableId, key: &[u8]) -> bool {
        if self.chunk_tables.contains(&table) {
            // A chunk table holds chunk entries only.
            return <[u8; 8]>::try_from(key).is_ok_and(|id| {
                find_chunk_range(&self.chunks, table, ChunkId(u64::from_le_bytes(id)))
                    .is_some_and(|r| self.chunks_from.get(&r.start()).is_some_and(|from| *from <= segment))
            });
        }
        let hash = shoal_common::key_hash(table, key).0;
        let i = self.keys.partition_point(|r| (r.0, r.1) <= (table, hash));
        i > 0 && {
            let (t, _, end, from) = self.keys[i - 1];
            t == table && hash <= end && from <= segment
        }
    }
}

/// Records this server's replica floors (`RaiseReplicaFloors`) and head
/// floor (`RaiseHeadFloor`) at the coordinator, for the replicator of
/// `log`. Runs on the replicator's runtime, one request at a time, over
/// one kept connection.
fn floor_recorder(coordinator: CoordinatorAddrs, auth: ControlAuth, server: ServerId, log: LogId) -> FloorRecorder {
    let client = ControlClient::new(coordinator).with_timeout(CONTROL_TIMEOUT).with_auth(auth);
    let client = Arc::new(tokio::sync::Mutex::new(client));
    FloorRecorder::new(move |floors: FloorRequest| {
        let client = client.clone();
        async move {
            let mut calls = Vec::new();
            if !floors.replicas.is_empty() {
                let list = floors.replicas.iter().map(|&(segment, epoch)| ReplicaFloor { log, segment, epoch });
                calls.push(ControlRequest::RaiseReplicaFloors { server, floors: list.collect() });
            }
            if let Some(segment) = floors.head {
                calls.push(ControlRequest::RaiseHeadFloor { server, log, segment });
            }
            let mut client = client.lock().await;
            for call in &calls {
                match client.call(call).await {
                    Ok(ControlResponse::Ok) => {}
                    Ok(other) => return Err(format!("unexpected answer {other:?}")),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        }
    })
}

fn read_id(dir: &Path) -> Option<ServerId> {
    let text = std::fs::read_to_string(dir.join(ID_FILE)).ok()?;
    text.trim().parse().ok().map(ServerId)
}

/// The credential kept in `dir`, if any. Errors: the file exists but
/// cannot be read or is not a credential.
fn read_credential(dir: &Path) -> std::io::Result<Option<Credential>> {
    match std::fs::read_to_string(dir.join(CREDENTIAL_FILE)) {
        Ok(text) => Credential::from_hex(&text).map(Some).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{CREDENTIAL_FILE} is not a credential"))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the credential atomically, readable by this user only.
fn write_credential(dir: &Path, credential: &Credential) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!("{CREDENTIAL_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    writeln!(f, "{}", credential.to_hex())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(CREDENTIAL_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Writes the id atomically (temporary file, sync, rename).
fn write_id(dir: &Path, id: ServerId) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{ID_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{}", id.0)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(ID_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// One native PING to `addr` over a cached connection, within `PING_TIMEOUT`.
async fn ping(conns: &mut HashMap<SocketAddr, tokio::net::TcpStream>, addr: SocketAddr) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let s = match conns.entry(addr) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let s = tokio::net::TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                e.insert(s)
            }
        };
        let mut req = Vec::with_capacity(shoal_proto::HEADER_LEN);
        shoal_proto::Request::Ping.encode(1, &mut req);
        s.write_all(&req).await?;
        let mut buf = Vec::with_capacity(64);
        loop {
            let mut chunk = [0u8; 64];
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            buf.extend_from_slice(&chunk[..n]);
            match shoal_proto::check_frame(&buf, 1024) {
                Ok(Some(h)) if buf.len() >= h.frame_len() => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            }
        }
    };
    match tokio::time::timeout(PING_TIMEOUT, attempt).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn held_map_knows_its_newest_server() {
        assert_eq!(HeldMap::new(Arc::new(ClusterMap::default())).newest_server, 0);
        let mut map = ClusterMap::default();
        for id in [3, 9, 5] {
            let addr: SocketAddr = format!("127.0.0.1:{}", 7000 + id).parse().unwrap();
            let state = ServerState::Up;
            map.servers.push(shoal_cluster::ServerInfo {
                id: ServerId(id),
                native: addr,
                resp: addr,
                backup: addr,
                log: LogId(id),
                state,
            });
        }
        let held = HeldMap::new(Arc::new(map));
        assert_eq!(held.newest_server, 9);
        assert_eq!(held.servers.len(), 3, "the map itself through the holder");
    }

    #[test]
    fn the_credential_file_is_private_and_round_trips() {
        let dir = std::env::temp_dir().join(format!("shoal-credential-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_credential(&dir).unwrap(), None);
        let c = Credential::random();
        write_credential(&dir, &c).unwrap();
        let mode = std::fs::metadata(dir.join(CREDENTIAL_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read_credential(&dir).unwrap(), Some(c));
        std::fs::write(dir.join(CREDENTIAL_FILE), "not hex\n").unwrap();
        assert!(read_credential(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
