//! What every front end and connection shares: the store, the table
//! registry, server-level statistics, the start time and the shutdown
//! signal. Front ends reach the store only through its public operations.

use crate::admin::Admin;
use crate::auth::Users;
use crate::budget::ClientBudget;
use crate::cluster::ClusterNode;
use crate::config::ServerConfig;
use crate::spin::SpinGate;
use crate::tls::ServerTls;
use parking_lot::RwLock;
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::{ClusterMap, ControlAuth, ControlError, ControlErrorCode, ControlRequest, ControlResponse};
use shoal_common::slots::table_id;
use shoal_engine::{Store, StoreError, StreamShape, TableId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::warn;

/// The state of one running server, shared by all its connections.
pub struct ServerContext {
    pub config: ServerConfig,
    pub store: Arc<Store>,
    pub tables: TableRegistry,
    pub stats: ServerStats,
    /// The memcached front end's counters (its `stats`).
    pub memcached: crate::memcached::McStats,
    /// Set when the server is part of a cluster.
    pub cluster: Option<Arc<ClusterNode>>,
    /// The users clients authenticate as (see `auth`).
    pub auth: Users,
    /// Which connection may spin after a reply (see `spin`).
    pub(crate) spin: SpinGate,
    /// The bound on all client connections' buffers (see `budget`).
    pub budget: Arc<ClientBudget>,
    /// TLS on the client ports, when configured (see `tls`).
    pub tls: Option<Arc<ServerTls>>,
    /// Client connections, slow log, latency monitor, run-time settings.
    pub admin: Admin,
    /// The chunk locks of the chunk tables this server serves (not logged:
    /// a crash recovery releases them; `docs/chunks.md`, "Locks").
    pub locks: Arc<crate::chunklocks::LockTable>,
    /// The group leases of consumer names on the streamlets this server
    /// serves (in memory only: `subscriptions`).
    pub subscriptions: crate::subscriptions::Subscriptions,
    /// The Redis streams of the RESP port: their indexes and the signal
    /// blocked XREADs wait on (`resp::xstream`).
    pub xstreams: crate::resp::xstream::XStreams,
    /// Operations per second per table (see `load`).
    pub load: crate::load::LoadMeter,
    started: Instant,
    shutdown: watch::Sender<bool>,
}

/// What the replies to a batch of commands must wait for before they go
/// out, so that none shows data a crash could still lose.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// A command wrote, or read something other than a present object (a
    /// miss may be a removal still replicating, or an eviction): the
    /// whole log applied so far.
    pub log_end: bool,
    /// Reads of present objects: the highest of their keys' write
    /// positions (`Store::write_position`). A read of an object written
    /// long ago waits for nothing, however many other writes are
    /// replicating meanwhile.
    pub keys: u64,
}

impl Durability {
    pub const LOG_END: Durability = Durability { log_end: true, keys: 0 };

    /// Everything applied so far must be durable.
    pub fn log_end(&mut self) {
        self.log_end = true;
    }

    /// A present object of a key whose write position is `pos` was read.
    pub fn key(&mut self, pos: u64) {
        self.keys = self.keys.max(pos);
    }
}

impl ServerContext {
    /// Creates the store for `config` (which must be valid).
    pub fn new(config: ServerConfig) -> Result<ServerContext, shoal_engine::ConfigError> {
        Self::build(config, None)
    }

    /// A context for a cluster member: the store's log is replicated by the
    /// node's replicator, tables are the cluster's.
    pub fn with_cluster(
        config: ServerConfig,
        node: Arc<ClusterNode>,
    ) -> Result<ServerContext, shoal_engine::ConfigError> {
        Self::build(config, Some(node))
    }

    fn build(
        config: ServerConfig,
        cluster: Option<Arc<ClusterNode>>,
    ) -> Result<ServerContext, shoal_engine::ConfigError> {
        let auth = Users::from_config(&config).map_err(shoal_engine::ConfigError)?;
        let tls = ServerTls::from_config(&config).map_err(shoal_engine::ConfigError)?.map(Arc::new);
        let mut store_config = config.store_config();
        let observer: Option<Arc<dyn shoal_engine::LogObserver>> = match &cluster {
            Some(node) => {
                store_config.log_id = node.log;
                match &node.sc {
                    Some(sc) => {
                        Some(Arc::new(crate::sc::ScObserver { replicator: node.replicator.clone(), sc: sc.clone() }))
                    }
                    None => Some(node.replicator.clone()),
                }
            }
            None => None,
        };
        let store = Arc::new(Store::with_observer(store_config, observer)?);
        if let Some(sc) = cluster.as_ref().and_then(|n| n.sc.as_ref()) {
            sc.set_store(&store);
        }
        if let Some(node) = &cluster {
            // Closed segments re-replicated after a backup failure come from
            // the store (held weakly: the store holds the replicator).
            let weak = Arc::downgrade(&store);
            node.replicator.set_segment_source(Arc::new(move |id| weak.upgrade()?.segment_copy(id)));
        }
        let tables =
            TableRegistry::new(store.clone(), cluster.as_ref().map(|c| (c.coordinator.clone(), c.auth.clone())));
        if let Some(node) = &cluster {
            tables.sync(&node.map());
        }
        let budget = Arc::new(ClientBudget::new(config.client_buffer_budget.0 as usize));
        let admin = Admin::new(&config);
        let locks = Arc::new(crate::chunklocks::LockTable::new(crate::chunklocks::LockConfig {
            // A server id past 65535 creates no chunks (`chunk_node`).
            own_node: cluster.as_ref().map_or(0, |n| u16::try_from(n.id.0).unwrap_or(u16::MAX)),
            max_lease: std::time::Duration::from_millis(config.chunk_lock_max_lease_ms),
            limit: config.chunk_lock_limit,
            owner_limit: config.chunk_lock_owner_limit(),
        }));
        // A chunk's locks go with it, however it goes (removed, evicted,
        // its table dropped), before its id can name a new chunk.
        let gone = locks.clone();
        store.on_chunk_gone(Arc::new(move |table, id| gone.forget(table, [id])));
        Ok(ServerContext {
            locks,
            subscriptions: Default::default(),
            xstreams: Default::default(),
            load: Default::default(),
            admin,
            config,
            store,
            tables,
            stats: ServerStats::default(),
            memcached: Default::default(),
            cluster,
            auth,
            spin: SpinGate::default(),
            budget,
            tls,
            started: Instant::now(),
            shutdown: watch::channel(false).0,
        })
    }

    /// The log position after everything this thread applied so far, if
    /// writes must wait for replication (see [`ServerContext::wait_durable`]).
    pub fn replication_target(&self) -> Option<u64> {
        self.durable_target(Durability::LOG_END)
    }

    /// The log position replies must wait for (see
    /// [`ServerContext::wait_durable`]) after commands that needed
    /// `need`; `None` if the log is durable that far already, or on a
    /// standalone server.
    pub fn durable_target(&self, need: Durability) -> Option<u64> {
        let node = self.cluster.as_ref()?;
        let pos = if need.log_end { node.position() } else { need.keys };
        let held = node.sc.as_ref().is_some_and(|sc| sc.holds(pos));
        (node.replicator.durable() < pos || held).then_some(pos)
    }

    /// Whether replies to commands that read or wrote stored data may go
    /// out: always on a standalone server; in a cluster, while this
    /// server's lease holds (`lease.rs`). Call it after the commands ran.
    pub fn lease_held(&self) -> bool {
        self.cluster.as_ref().is_none_or(|node| node.lease.held())
    }

    /// Waits until the log is durable up to `pos` (from
    /// [`ServerContext::replication_target`]); false if replication stopped
    /// (the server is shutting down) and the writes must not be acknowledged.
    pub async fn wait_durable(&self, pos: u64) -> bool {
        match &self.cluster {
            Some(node) => {
                let durable = node.wait_durable(pos).await;
                if let Some(sc) = &node.sc {
                    // Hot keys' writes are durable once every member of the
                    // group dropped its copy (`sc.rs`).
                    sc.wait_released(pos).await;
                }
                durable
            }
            None => true,
        }
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Asks every listener and connection to stop. Idempotent.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// A receiver whose `wait_for(|s| *s)` completes once shutdown was asked.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

/// Named tables over the store's numeric ids. Every table the server's
/// front ends use is created through the registry, so it knows them all.
/// Ids are assigned from 1 in creation order and never reused.
pub struct TableRegistry {
    store: Arc<Store>,
    /// In a cluster, tables are the coordinator's: created and dropped
    /// there (over connections authenticated as this server), and learnt
    /// from the cluster map.
    coordinator: Option<(shoal_cluster::CoordinatorAddrs, ControlAuth)>,
    inner: RwLock<Registry>,
    /// Changes whenever a table is created or dropped, so that a connection
    /// may cache name lookups and check them with one load.
    generation: AtomicU64,
    /// Whether `chunk_tables` is not empty.
    any_chunk_tables: std::sync::atomic::AtomicBool,
    /// Whether `stream_tables` is not empty.
    any_stream_tables: std::sync::atomic::AtomicBool,
    /// The hashes of the streams' names ([`NameFilter`]).
    stream_names: NameFilter,
}

/// A 4,096-bit filter of the Redis streams' keys
/// ([`xstream::filter_hash`](crate::resp::xstream::filter_hash)), so that
/// the Redis front end, which asks whether a key is a Redis stream on
/// every string command, can rule it out with a hash of the key and one
/// load, instead of building the stream's table name and taking the
/// registry's lock. It may answer yes for a key it was never given (then
/// the caller looks the name up), never no for one it holds: every change
/// happens under the registry's write lock, bits are set before a name is
/// installed, and a rebuild stores words that keep the bits of every
/// stream still held.
pub struct NameFilter {
    words: [AtomicU64; 64],
}

impl NameFilter {
    fn new() -> NameFilter {
        NameFilter { words: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    fn bit(hash: u64) -> (usize, u64) {
        let b = (hash % 4096) as usize;
        (b / 64, 1 << (b % 64))
    }

    fn insert(&self, hash: u64) {
        let (w, m) = Self::bit(hash);
        self.words[w].fetch_or(m, Ordering::SeqCst);
    }

    /// False only if no name with this hash was given.
    pub fn may_hold(&self, hash: u64) -> bool {
        let (w, m) = Self::bit(hash);
        self.words[w].load(Ordering::SeqCst) & m != 0
    }

    /// Exactly the names of `hashes` from now on.
    fn rebuild(&self, hashes: impl Iterator<Item = u64>) {
        let mut words = [0u64; 64];
        for h in hashes {
            let (w, m) = Self::bit(h);
            words[w] |= m;
        }
        for (slot, w) in self.words.iter().zip(words) {
            slot.store(w, Ordering::SeqCst);
        }
    }
}

use crate::resp::xstream::filter_hash_of_name as stream_filter_hash;

/// What kind of table a name is: each name is of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    KeyValue,
    /// A chunk table (`docs/chunks.md`).
    Chunks,
    /// A stream of this shape (`docs/streams.md`).
    Stream(StreamShape),
}

struct Registry {
    by_name: HashMap<String, TableId>,
    /// The chunk tables among them (`docs/chunks.md`).
    chunk_tables: std::collections::HashSet<TableId>,
    /// The streams among them (`docs/streams.md`).
    stream_tables: std::collections::HashSet<TableId>,
    next_id: u64,
}

impl TableRegistry {
    fn new(store: Arc<Store>, coordinator: Option<(shoal_cluster::CoordinatorAddrs, ControlAuth)>) -> TableRegistry {
        TableRegistry {
            store,
            coordinator,
            inner: RwLock::new(Registry {
                by_name: HashMap::new(),
                chunk_tables: Default::default(),
                stream_tables: Default::default(),
                next_id: 1,
            }),
            generation: AtomicU64::new(0),
            any_chunk_tables: Default::default(),
            any_stream_tables: Default::default(),
            stream_names: NameFilter::new(),
        }
    }

    pub fn lookup(&self, name: &str) -> Option<TableId> {
        self.inner.read().by_name.get(name).copied()
    }

    /// A number that changes whenever a table is created or dropped: a
    /// [`TableRegistry::lookup`] made at generation g is still right while
    /// `generation()` returns g.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The table called `name`, created (empty) if it does not exist yet.
    /// In a cluster this asks the coordinator (a blocking call: tables are
    /// created rarely), which fails only if it cannot be reached.
    pub fn create(&self, name: &str) -> Result<TableId, TableError> {
        self.create_with(name, false)
    }

    /// [`TableRegistry::create`], making a new table slot-hashed if `slots`
    /// (`shoal_common::slots`; the Redis databases are). An existing table
    /// is returned as it is.
    pub fn create_with(&self, name: &str, slots: bool) -> Result<TableId, TableError> {
        self.create_kind(name, slots, TableKind::KeyValue)
    }

    /// [`TableRegistry::create`] of a chunk table (`docs/chunks.md`).
    /// `TableError::WrongKind` if `name` is a key-value table.
    pub fn create_chunk_table(&self, name: &str) -> Result<TableId, TableError> {
        self.create_kind(name, false, TableKind::Chunks)
    }

    /// [`TableRegistry::create`] of a stream of `shape` (`docs/streams.md`).
    /// `TableError::WrongKind` if `name` is a table of another kind or a
    /// stream of another shape, `TableError::Stream` if the shape is not
    /// one a stream may have.
    pub fn create_stream(&self, name: &str, shape: StreamShape) -> Result<TableId, TableError> {
        shape.check().map_err(TableError::Stream)?;
        self.create_kind(name, false, TableKind::Stream(shape))
    }

    /// Whether any stream exists (one load).
    pub fn has_stream_tables(&self) -> bool {
        self.any_stream_tables.load(Ordering::Acquire)
    }

    /// False if no Redis stream's key hashes to `hash`
    /// ([`xstream::filter_hash`](crate::resp::xstream::filter_hash)): then
    /// the key is no Redis stream, with no lookup.
    pub fn may_be_stream(&self, hash: u64) -> bool {
        self.has_stream_tables() && self.stream_names.may_hold(hash)
    }

    /// Makes the name filter exactly the streams' names (the registry's
    /// write lock held).
    fn refilter(&self, r: &Registry) {
        let names = r.by_name.iter().filter(|(_, id)| r.stream_tables.contains(id));
        self.stream_names.rebuild(names.filter_map(|(n, _)| stream_filter_hash(n)));
    }

    /// The names of the tables that start with `prefix`.
    pub fn names_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.inner.read().by_name.keys().filter(|n| n.starts_with(prefix)).cloned().collect()
    }

    /// Whether `table` is a stream.
    pub fn is_stream_table(&self, table: TableId) -> bool {
        self.any_stream_tables.load(Ordering::Acquire) && self.inner.read().stream_tables.contains(&table)
    }

    /// The kind of table `id`, which exists.
    fn kind_of(&self, id: TableId) -> TableKind {
        if self.is_chunk_table(id) {
            return TableKind::Chunks;
        }
        match self.store.stream_shape(id) {
            Ok(shape) => TableKind::Stream(shape),
            Err(_) => TableKind::KeyValue,
        }
    }

    /// Records `id` as a table of `kind` in the store and the registry
    /// (the registry's lock held).
    fn install_kind(&self, r: &mut Registry, id: TableId, kind: TableKind) -> Result<(), TableError> {
        self.store.create_table(id);
        match kind {
            TableKind::KeyValue => {}
            TableKind::Chunks => {
                r.chunk_tables.insert(id);
                self.any_chunk_tables.store(true, Ordering::Release);
            }
            TableKind::Stream(shape) => {
                self.store.create_stream(id, shape).map_err(|e| TableError::Stream(e.to_string()))?;
                r.stream_tables.insert(id);
                self.any_stream_tables.store(true, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Whether `table` is a chunk table.
    pub fn is_chunk_table(&self, table: TableId) -> bool {
        self.inner.read().chunk_tables.contains(&table)
    }

    /// Whether any chunk table exists (one load: object requests check
    /// their table's kind only then).
    pub fn has_chunk_tables(&self) -> bool {
        self.any_chunk_tables.load(Ordering::Acquire)
    }

    fn create_kind(&self, name: &str, slots: bool, kind: TableKind) -> Result<TableId, TableError> {
        if let Some(id) = self.lookup(name) {
            if self.kind_of(id) != kind {
                return Err(TableError::WrongKind(name.to_owned()));
            }
            return Ok(id);
        }
        if let Some((coordinator, auth)) = &self.coordinator {
            let (chunks, stream) = match kind {
                TableKind::KeyValue => (false, None),
                TableKind::Chunks => (true, None),
                TableKind::Stream(shape) => (false, Some(shape)),
            };
            let req = ControlRequest::CreateTable { name: name.to_owned(), span: 0, slots, chunks, stream };
            let table = match call_blocking_any(coordinator, auth, &req, COORDINATOR_TIMEOUT) {
                Ok(ControlResponse::Table { table }) => table,
                Ok(other) => return Err(TableError::Coordinator(format!("unexpected answer {other:?}"))),
                // A stream's shape the coordinator refuses: say why now.
                Err(ControlError::Refused { code: ControlErrorCode::InvalidRequest, message }) if stream.is_some() => {
                    return Err(TableError::Stream(message))
                }
                Err(e) => return Err(TableError::Coordinator(e.to_string())),
            };
            let mut r = self.inner.write();
            self.install_kind(&mut r, table.id, kind_of_info(&table))?;
            if let Some(h) = table.stream.and_then(|_| stream_filter_hash(&table.name)) {
                self.stream_names.insert(h);
            }
            if r.by_name.insert(table.name, table.id) != Some(table.id) {
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
            return Ok(table.id);
        }
        let mut r = self.inner.write();
        if let Some(id) = r.by_name.get(name) {
            return Ok(*id);
        }
        let id = table_id(r.next_id, slots);
        r.next_id += 1;
        self.install_kind(&mut r, id, kind)?;
        if let Some(h) = stream_filter_hash(name).filter(|_| matches!(kind, TableKind::Stream(_))) {
            self.stream_names.insert(h);
        }
        r.by_name.insert(name.to_owned(), id);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(id)
    }

    /// Removes the table and all its objects; returns whether it existed.
    pub fn drop_table(&self, name: &str) -> Result<bool, TableError> {
        if let Some((coordinator, auth)) = &self.coordinator {
            let req = ControlRequest::DropTable { name: name.to_owned() };
            match call_blocking_any(coordinator, auth, &req, COORDINATOR_TIMEOUT) {
                Ok(_) => {}
                Err(ControlError::Refused { code: ControlErrorCode::NotFound, .. }) => return Ok(false),
                Err(e) => return Err(TableError::Coordinator(e.to_string())),
            }
        }
        let removed = {
            let mut r = self.inner.write();
            let id = r.by_name.remove(name);
            if let Some(id) = id {
                r.chunk_tables.remove(&id);
                r.stream_tables.remove(&id);
                self.refilter(&r);
            }
            id
        };
        let Some(id) = removed else {
            // In a cluster the coordinator dropped it: the map this server
            // received since may already have removed it here (`sync`).
            return Ok(self.coordinator.is_some());
        };
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.store.drop_table(id).map_err(TableError::Store)?;
        Ok(true)
    }

    /// Makes the registry the cluster map's tables: new ones are created in
    /// the store, ones the map no longer has are dropped with their objects.
    pub fn sync(&self, map: &ClusterMap) {
        let mut r = self.inner.write();
        let fresh: HashMap<String, TableId> = map.tables.iter().map(|t| (t.name.clone(), t.id)).collect();
        r.chunk_tables = map.tables.iter().filter(|t| t.chunks).map(|t| t.id).collect();
        self.any_chunk_tables.store(!r.chunk_tables.is_empty(), Ordering::Release);
        // Every stream is created here before any replay can meet its
        // batches (a recovery starts after the map that plans it is synced).
        r.stream_tables.clear();
        for t in &map.tables {
            if let Some(shape) = t.stream {
                self.store.create_table(t.id);
                match self.store.create_stream(t.id, shape) {
                    Ok(()) => {
                        r.stream_tables.insert(t.id);
                    }
                    Err(e) => warn!("stream {} ({}) of the cluster map: {e}", t.name, t.id),
                }
            }
        }
        self.any_stream_tables.store(!r.stream_tables.is_empty(), Ordering::Release);
        // The map's streams before its names: a stream already installed
        // keeps its bit throughout (the words stored hold it too).
        for h in map.tables.iter().filter(|t| t.stream.is_some()).filter_map(|t| stream_filter_hash(&t.name)) {
            self.stream_names.insert(h);
        }
        if fresh == r.by_name {
            self.refilter(&r);
            return;
        }
        for id in fresh.values() {
            self.store.create_table(*id);
        }
        for (name, id) in &r.by_name {
            if fresh.get(name) != Some(id) {
                let _ = self.store.drop_table(*id);
            }
        }
        r.by_name = fresh;
        self.refilter(&r);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Every table, by name.
    pub fn list(&self) -> Vec<(String, TableId)> {
        let mut v: Vec<_> = self.inner.read().by_name.iter().map(|(n, id)| (n.clone(), *id)).collect();
        v.sort();
        v
    }

    /// Number of objects in `table` (the store keeps a count per table).
    pub fn len(&self, table: TableId) -> Result<u64, StoreError> {
        self.store.table_objects(table)
    }

    /// Removes every object of `table`, expired ones included, keeping the
    /// table. Not atomic: writes that run concurrently may survive.
    pub fn clear(&self, table: TableId) -> Result<(), StoreError> {
        self.store.clear_table(table)
    }
}

/// Why a table could not be created or dropped.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{0}")]
    Store(StoreError),
    #[error("coordinator: {0}")]
    Coordinator(String),
    /// The name is a table of another kind (key-value, chunks, or a
    /// stream of another shape).
    #[error("table {0} exists as a table of another kind (or a stream of another shape)")]
    WrongKind(String),
    /// A stream cannot be created as asked (its shape).
    #[error("{0}")]
    Stream(String),
}

/// The kind of a table of the cluster map.
fn kind_of_info(t: &shoal_cluster::map::TableInfo) -> TableKind {
    match (t.chunks, t.stream) {
        (true, _) => TableKind::Chunks,
        (false, Some(shape)) => TableKind::Stream(shape),
        (false, None) => TableKind::KeyValue,
    }
}

/// Longest a table call to the coordinator may take.
const COORDINATOR_TIMEOUT: Duration = Duration::from_secs(5);

/// Server-level counters, updated without locks.
#[derive(Default)]
pub struct ServerStats {
    pub connections_current: AtomicU64,
    pub connections_total: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub connections_rejected: AtomicU64,
    /// Connections closed because their unread replies passed the limit.
    pub reply_overflows: AtomicU64,
    /// Connections closed because they made no progress for the idle timeout.
    pub idle_timeouts: AtomicU64,
    /// Connections closed because this server's lease lapsed while their
    /// commands ran (their replies were dropped: `lease.rs`).
    pub lease_lapses: AtomicU64,
    /// Connections closed to keep all client buffers within the budget.
    pub client_buffer_disconnects: AtomicU64,
    /// Stream groups removed by retention (`retention.rs`).
    pub stream_groups_trimmed: AtomicU64,
    /// Connections closed because part of a request waited longer than the
    /// request timeout.
    pub request_timeouts: AtomicU64,
    pub commands: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub protocol_errors: AtomicU64,
    /// Reads that found their key / did not.
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    /// Redis requests sent on to another server (its keys are mastered
    /// there), and requests answered -MOVED (Redis Cluster mode).
    pub forwarded_requests: AtomicU64,
    pub moved_replies: AtomicU64,
    /// The Redis front end's per-command and per-error counters.
    pub resp_commands: crate::resp::stats::CommandStats,
    /// The native and memcached front ends' per-operation counters and
    /// latency histograms (`metrics::ops`).
    pub native_ops: crate::metrics::ops::OpStats<{ crate::native::OPS }>,
    pub memcached_ops: crate::metrics::ops::OpStats<{ crate::memcached::cmd::OPS.len() }>,
    /// TLS handshakes completed, failed (not TLS, a certificate refused,
    /// ...) and not finished within the handshake timeout.
    pub tls_handshakes: AtomicU64,
    pub tls_handshake_failures: AtomicU64,
    pub tls_handshake_timeouts: AtomicU64,
}

impl ServerStats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ByteSize;
    use shoal_engine::RejectRules;

    fn ctx() -> ServerContext {
        ServerContext::new(ServerConfig { memory: ByteSize(64 << 20), ..Default::default() }).unwrap()
    }

    #[test]
    fn registry_create_is_idempotent_and_ids_are_not_reused() {
        let c = ctx();
        let a = c.tables.create("a").unwrap();
        assert_eq!(c.tables.create("a").unwrap(), a);
        let b = c.tables.create("b").unwrap();
        assert_ne!(a, b);
        assert!(c.tables.drop_table("a").unwrap());
        assert!(!c.tables.drop_table("a").unwrap());
        assert_eq!(c.tables.lookup("a"), None);
        let a2 = c.tables.create("a").unwrap();
        assert!(a2 != a && a2 != b);
        assert_eq!(c.tables.list(), vec![("a".to_string(), a2), ("b".to_string(), b)]);
    }

    #[test]
    fn the_stream_name_filter_holds_every_stream_and_forgets_dropped_ones() {
        let c = ctx();
        let shape =
            StreamShape { streamlets: 1, logs: 1, segment_bytes: 64 << 10, group_segments: 4, group_timeout_ms: 0 };
        let key = |n: &str| n.strip_prefix("redis.db0.stream.").unwrap().as_bytes().to_vec();
        let h = |n: &str| crate::resp::xstream::filter_hash(0, &key(n));
        c.tables.create("redis.db0.stream.kv").unwrap();
        assert!(!c.tables.may_be_stream(h("redis.db0.stream.kv")));
        let names: Vec<String> = (0..300).map(|i| format!("redis.db0.stream.s{i}")).collect();
        for n in &names {
            c.tables.create_stream(n, shape).unwrap();
        }
        assert!(names.iter().all(|n| c.tables.may_be_stream(h(n))), "a stream the filter does not hold");
        // 300 names in 4,096 bits: most other names are ruled out.
        let false_hits = (0..1000).filter(|i| c.tables.may_be_stream(h(&format!("redis.db0.stream.kv{i}")))).count();
        assert!(false_hits < 150, "{false_hits} of 1000 other names pass");
        for n in &names[..299] {
            assert!(c.tables.drop_table(n).unwrap());
        }
        assert!(c.tables.may_be_stream(h("redis.db0.stream.s299")));
        let false_hits = names[..299].iter().filter(|n| c.tables.may_be_stream(h(n))).count();
        assert!(false_hits <= 1, "{false_hits} dropped streams still pass");
    }

    #[test]
    fn len_and_clear_count_only_their_table() {
        let c = ctx();
        let a = c.tables.create("a").unwrap();
        for i in 0..100u32 {
            c.store.write(a, &i.to_le_bytes(), b"v", RejectRules::default()).unwrap();
        }
        assert_eq!(c.tables.len(a).unwrap(), 100, "fast path: only table");
        let b = c.tables.create("b").unwrap();
        c.store.write(b, b"k", b"v", RejectRules::default()).unwrap();
        assert_eq!(c.tables.len(a).unwrap(), 100);
        assert_eq!(c.tables.len(b).unwrap(), 1);
        c.tables.clear(a).unwrap();
        assert_eq!(c.tables.len(a).unwrap(), 0);
        assert_eq!(c.tables.len(b).unwrap(), 1);
    }

    #[test]
    fn shutdown_is_observed_by_subscribers() {
        let c = ctx();
        let rx = c.shutdown_signal();
        assert!(!*rx.borrow());
        c.shutdown();
        assert!(*rx.borrow());
        assert!(c.is_shutting_down());
    }
}
