//! Shoal's master store: RAMCloud's log-structured memory as a library.
//!
//! One [`Store`] holds a master's objects in a log of segments built from
//! seglets of one fixed memory pool, indexed by a cache-line hash table, and
//! cleaned by a two-level cleaner on its own thread. No networking: the
//! server, replication and recovery build on the [`LogObserver`] interface
//! and [`Store::replay`].
//!
//! Layers, each seeing only the one below: `format` (the byte layout of
//! entries), `pool` (seglets), `segment` (segments in memory and log
//! references), `hashtable`, `cidtable` (where each chunk is, by id),
//! `epoch`, `log` (head, side logs, digest,
//! observer), `cleaner`, `expiry` (the sweep of expired objects), `clock`
//! (the wall clock expiry times are compared with), and `store`
//! (operations, statistics, replay).

mod cidtable;
mod cleaner;
mod clock;
mod config;
pub mod counter;
mod epoch;
mod expiry;
pub mod format;
mod hashtable;
mod log;
mod pool;
mod segment;
mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ConfigError, Eviction, StoreConfig, DEFAULT_TARGET_UTILISATION, EVICT_ABOVE, EVICT_TO};
pub use log::{LogObserver, SegmentKind};
pub use shoal_common::{
    key_hash, ChunkId, KeyHash, LogId, SegmentId, StreamOffset, StreamShape, TableId, UnixMillis, Version,
};
pub use store::{
    ChunkGone, Commit, Committed, Consumed, ConsumerHead, EnumCursor, EnumeratedObject, Expiry, GroupInfo, ObjectMeta,
    Produced, RejectRules, Replay, ReplayError, ReplayReport, Retention, Store, StoreError, StoreStats, StreamError,
    Txn, WriteOp, MAX_ATOMIC_BATCH, MAX_BATCH_RECORDS, MAX_CONSUMER_NAME, MAX_CONSUMER_NAMES, RECORD_OVERHEAD,
};
