//! Store configuration and its validation.

use crate::clock::{Clock, SystemClock};
use crate::format;
use crate::segment::{MAX_SEGMENT_BYTES, MAX_SLOTS};
use shoal_common::{LogId, UnixMillis, DEFAULT_MAX_VALUE_BYTES, MAX_KEY_BYTES};
use std::sync::Arc;
use std::time::Duration;

/// How a store is sized and tuned. `StoreConfig::default()` is the
/// production default (1 GiB, 8 MiB segments of 64 KiB seglets, 1 MiB values).
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Bytes of log memory (the pool). Rounded down to whole seglets.
    pub memory_bytes: usize,
    /// Segment size: the unit of replication. A power of two multiple of the seglet.
    pub segment_bytes: usize,
    /// Seglet size: the unit of memory allocation. A power of two.
    pub seglet_bytes: usize,
    /// Largest value accepted.
    pub max_value_bytes: usize,
    /// Largest key accepted (at most 64 KiB, the protocol's limit).
    pub max_key_bytes: usize,
    /// Main hash table buckets (8 slots each). `None` (the default): the
    /// table starts at 4096 buckets (256 KiB) and grows by half, online,
    /// whenever it holds more than 8 objects per bucket, so its memory
    /// follows the objects, not `memory_bytes` (`hashtable.rs`). `Some(n)`:
    /// a fixed table of `n` buckets, planned by the caller; more objects
    /// than planned chain into overflow buckets.
    pub hash_table_buckets: Option<usize>,
    /// Id written into every segment header of this log.
    pub log_id: LogId,
    /// Run the cleaner on its own thread. Without it, cleaning happens only
    /// through [`crate::Store::clean_now`] (tests) or inline when a write
    /// finds no memory.
    pub cleaner_thread: bool,
    /// Combined cleaning runs when tombstones believed live make up this
    /// fraction of the freeable memory (Rumble §5.1.3).
    pub max_tombstone_ratio: f64,
    /// Longest a write waits for the cleaner before it is refused with
    /// `OutOfMemory`.
    pub write_wait: Duration,
    /// Make the whole pool resident at start, on a background thread
    /// (`madvise(MADV_POPULATE_WRITE)`), as RAMCloud reserves its memory up
    /// front: the first write to a fresh page otherwise costs a fault and a
    /// zeroing on the write path (on this project's VMs about 4 us per 4 KiB,
    /// 1 GB/s, which caps how fast a recovery master can take in a crashed
    /// master's data). Costs resident memory the size of the pool from the
    /// start; off by default, so that resident memory follows the data.
    pub prefault: bool,
    /// The wall clock that objects' expiry times are compared with.
    pub clock: Arc<dyn Clock>,
    /// How often the expiry sweep looks for segments holding expired
    /// objects (`expiry.rs`). Zero: no sweep thread (expired objects are
    /// still never read, and the cleaner drops them; tests call
    /// [`crate::Store::sweep_expired`]).
    pub expiry_sweep_interval: Duration,
    /// Most time one sweep pass may take; the rest waits for the next.
    /// With the interval, this bounds the sweep's share of a core
    /// (10 ms every 100 ms: 10%).
    pub expiry_sweep_budget: Duration,
    /// What a full store does: refuse writes (`None`, the default) or
    /// evict (cache mode; see [`Eviction`]).
    pub eviction: Eviction,
    /// The cleaner keeps the log at least this full (live objects over the
    /// memory the log holds), beyond a slack of an eighth of that (2 MiB to
    /// two segments), whatever `memory_bytes` allows, and
    /// gives freed memory back to the OS: resident memory follows the
    /// data. 0 turns it off (the cleaner then runs only when memory is
    /// short, as RAMCloud's).
    pub target_utilisation: f64,
}

/// Cache mode: what the cleaner does when live objects fill the memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eviction {
    /// Writes wait for the cleaner and are refused with `OutOfMemory` when
    /// it cannot free memory (a store of record).
    #[default]
    None,
    /// When live objects fill more than [`EVICT_ABOVE`] of the memory, or
    /// the cleaner frees nothing, the oldest segments of the log are
    /// dropped whole: their live objects are forgotten instead of
    /// relocated, which costs no copying (see `cleaner.rs`). "Oldest" is
    /// by the time the segment was written; survivors of the cleaner carry
    /// the age of what they hold, so this is first in, first out by write
    /// time, as memcached's slab LRU without its read bumps.
    Oldest,
}

/// Default of [`StoreConfig::target_utilisation`].
pub const DEFAULT_TARGET_UTILISATION: f64 = 0.9;

/// In cache mode, live objects are kept at or below this fraction of the
/// memory: cleaning stays cheap up to about 90% (Rumble Fig. 8.1).
pub const EVICT_ABOVE: f64 = 0.90;
/// An eviction pass drops the oldest segments until live objects are at
/// most this fraction of the memory, so that passes are not back to back.
pub const EVICT_TO: f64 = 0.88;

impl Eviction {
    /// The name used by `--eviction`.
    pub fn name(self) -> &'static str {
        match self {
            Eviction::None => "none",
            Eviction::Oldest => "oldest",
        }
    }
}

impl std::str::FromStr for Eviction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Eviction::None),
            "oldest" => Ok(Eviction::Oldest),
            _ => Err(format!("unknown eviction policy '{s}' (none, oldest)")),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_bytes: 1 << 30,
            segment_bytes: 8 << 20,
            seglet_bytes: 64 << 10,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_key_bytes: MAX_KEY_BYTES,
            hash_table_buckets: None,
            log_id: LogId(1),
            cleaner_thread: true,
            max_tombstone_ratio: 0.4,
            write_wait: Duration::from_secs(10),
            prefault: false,
            clock: Arc::new(SystemClock),
            expiry_sweep_interval: Duration::from_millis(100),
            expiry_sweep_budget: Duration::from_millis(10),
            eviction: Eviction::None,
            target_utilisation: DEFAULT_TARGET_UTILISATION,
        }
    }
}

/// A configuration that cannot work, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid store configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl StoreConfig {
    pub fn seglets(&self) -> usize {
        self.memory_bytes / self.seglet_bytes
    }

    pub fn seglets_per_segment(&self) -> usize {
        self.segment_bytes / self.seglet_bytes
    }

    /// Seglets only the cleaner may use: one segment to compact into, plus
    /// two emergency heads.
    pub fn cleaner_reserve(&self) -> usize {
        self.seglets_per_segment() + 4
    }

    /// Seglets writes may not use, so removes can always add tombstones.
    pub fn remove_reserve(&self) -> usize {
        (self.seglets() / 100).max(2)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |s: String| Err(ConfigError(s));
        if !self.seglet_bytes.is_power_of_two() || self.seglet_bytes < 256 {
            return err(format!("seglet size {} must be a power of two of at least 256", self.seglet_bytes));
        }
        if !self.segment_bytes.is_multiple_of(self.seglet_bytes) || self.segment_bytes < self.seglet_bytes {
            return err(format!(
                "segment size {} must be a multiple of the seglet size {}",
                self.segment_bytes, self.seglet_bytes
            ));
        }
        if self.segment_bytes > MAX_SEGMENT_BYTES {
            return err(format!("segment size {} above the maximum {MAX_SEGMENT_BYTES}", self.segment_bytes));
        }
        if self.seglets() >= MAX_SLOTS - 32 {
            return err(format!("{} seglets: more than the log reference format addresses", self.seglets()));
        }
        if self.max_key_bytes > MAX_KEY_BYTES {
            return err(format!("max key size {} above the protocol's {MAX_KEY_BYTES}", self.max_key_bytes));
        }
        let largest = format::object_len_with(
            shoal_common::TableId(u64::MAX),
            shoal_common::Version(u64::MAX),
            Some(UnixMillis(u64::MAX)),
            self.max_key_bytes,
            self.max_value_bytes,
        );
        if largest > format::MAX_BODY_BYTES || largest * 2 > self.segment_bytes {
            return err(format!(
                "largest object entry ({largest} bytes for a {} byte value) must fit twice in a segment of {} bytes",
                self.max_value_bytes, self.segment_bytes
            ));
        }
        let min_seglets = self.cleaner_reserve() + self.remove_reserve() + 2 * self.seglets_per_segment();
        if self.seglets() < min_seglets {
            return err(format!(
                "memory of {} bytes holds {} seglets; at least {min_seglets} are needed with {}-byte segments",
                self.memory_bytes,
                self.seglets(),
                self.segment_bytes
            ));
        }
        if !(self.target_utilisation == 0.0 || (0.5..=0.98).contains(&self.target_utilisation)) {
            return err(format!("target utilisation {} must be 0 (off) or within 0.5..=0.98", self.target_utilisation));
        }
        if !(0.0..=1.0).contains(&self.max_tombstone_ratio) {
            return err("max tombstone ratio must be within 0..=1".into());
        }
        Ok(())
    }
}
