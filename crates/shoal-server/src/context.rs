//! What every front end and connection shares: the store, the table
//! registry, server-level statistics, the start time and the shutdown
//! signal. Front ends reach the store only through its public operations.

use crate::config::ServerConfig;
use crate::spin::SpinGate;
use parking_lot::RwLock;
use shoal_engine::{EnumCursor, RejectRules, Store, StoreError, TableId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The state of one running server, shared by all its connections.
pub struct ServerContext {
    pub config: ServerConfig,
    pub store: Arc<Store>,
    pub tables: TableRegistry,
    pub stats: ServerStats,
    /// Which connection may spin after a reply (see `spin`).
    pub(crate) spin: SpinGate,
    started: Instant,
    shutdown: watch::Sender<bool>,
}

impl ServerContext {
    /// Creates the store for `config` (which must be valid).
    pub fn new(config: ServerConfig) -> Result<ServerContext, shoal_engine::ConfigError> {
        let store = Arc::new(Store::new(config.store_config())?);
        let tables = TableRegistry::new(store.clone());
        Ok(ServerContext {
            config,
            store,
            tables,
            stats: ServerStats::default(),
            spin: SpinGate::default(),
            started: Instant::now(),
            shutdown: watch::channel(false).0,
        })
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
    inner: RwLock<Registry>,
    /// Changes whenever a table is created or dropped, so that a connection
    /// may cache name lookups and check them with one load.
    generation: AtomicU64,
}

struct Registry {
    by_name: HashMap<String, TableId>,
    next_id: u64,
}

impl TableRegistry {
    fn new(store: Arc<Store>) -> TableRegistry {
        TableRegistry {
            store,
            inner: RwLock::new(Registry { by_name: HashMap::new(), next_id: 1 }),
            generation: AtomicU64::new(0),
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
    pub fn create(&self, name: &str) -> TableId {
        if let Some(id) = self.lookup(name) {
            return id;
        }
        let mut r = self.inner.write();
        if let Some(id) = r.by_name.get(name) {
            return *id;
        }
        let id = TableId(r.next_id);
        r.next_id += 1;
        self.store.create_table(id);
        r.by_name.insert(name.to_owned(), id);
        self.generation.fetch_add(1, Ordering::AcqRel);
        id
    }

    /// Removes the table and all its objects; returns whether it existed.
    pub fn drop_table(&self, name: &str) -> Result<bool, StoreError> {
        let Some(id) = self.inner.write().by_name.remove(name) else {
            return Ok(false);
        };
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.store.drop_table(id)?;
        Ok(true)
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

    /// Removes every object of `table`, keeping the table. Not atomic:
    /// writes that run concurrently may survive.
    pub fn clear(&self, table: TableId) -> Result<(), StoreError> {
        let mut keys = Vec::new();
        let mut cursor = Some(EnumCursor::START);
        while let Some(c) = cursor {
            keys.clear();
            cursor = self.store.enumerate_with(table, c, ENUM_STEP, |key, _, _| keys.push(key.to_vec()))?;
            for key in &keys {
                self.store.remove(table, key, RejectRules::default())?;
            }
        }
        Ok(())
    }
}

/// Objects visited per call into the store's enumeration when counting or
/// clearing a table: a step holds the store's epoch, so it stays short.
const ENUM_STEP: usize = 256;

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
    pub commands: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub protocol_errors: AtomicU64,
    /// Reads that found their key / did not.
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
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

    fn ctx() -> ServerContext {
        ServerContext::new(ServerConfig { memory: ByteSize(64 << 20), ..Default::default() }).unwrap()
    }

    #[test]
    fn registry_create_is_idempotent_and_ids_are_not_reused() {
        let c = ctx();
        let a = c.tables.create("a");
        assert_eq!(c.tables.create("a"), a);
        let b = c.tables.create("b");
        assert_ne!(a, b);
        assert!(c.tables.drop_table("a").unwrap());
        assert!(!c.tables.drop_table("a").unwrap());
        assert_eq!(c.tables.lookup("a"), None);
        let a2 = c.tables.create("a");
        assert!(a2 != a && a2 != b);
        assert_eq!(c.tables.list(), vec![("a".to_string(), a2), ("b".to_string(), b)]);
    }

    #[test]
    fn len_and_clear_count_only_their_table() {
        let c = ctx();
        let a = c.tables.create("a");
        for i in 0..100u32 {
            c.store.write(a, &i.to_le_bytes(), b"v", RejectRules::default()).unwrap();
        }
        assert_eq!(c.tables.len(a).unwrap(), 100, "fast path: only table");
        let b = c.tables.create("b");
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
