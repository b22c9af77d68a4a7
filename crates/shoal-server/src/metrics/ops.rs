//! Per-operation counters and latency histograms of one front end: for
//! each operation (a position in the front end's fixed table of commands or
//! opcodes), how many ran and how long each took, how many of those failed,
//! and how many were refused before they ran.
//!
//! Cost on the request path: [`OpStats::ran`] is two relaxed atomic adds
//! (the duration's bucket and the sum) on a shard picked by the calling
//! thread, so the two workers rarely share a cache line; failures and
//! refusals are one more add, on their path only. No lock, no lookup, no
//! allocation. Reading ([`OpStats::figures`]) sums the shards: a scrape,
//! `INFO commandstats`.
//!
//! Buckets are fixed and exponential: bucket `i` counts durations of at
//! most 2^(8+i) ns (256 ns, 512 ns, ... about 4.3 s), the last one
//! everything longer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Buckets per histogram, the last one unbounded.
pub const BUCKETS: usize = 26;
/// log2 of the first bucket's bound, in nanoseconds.
const FIRST_SHIFT: u32 = 8;
/// Shards of counters; threads take them in turn.
const SHARDS: usize = 4;

/// The upper bound of bucket `i` in seconds (`f64::MAX` for the last).
pub fn bucket_bound(i: usize) -> f64 {
    if i + 1 >= BUCKETS {
        return f64::MAX;
    }
    (1u64 << (FIRST_SHIFT as usize + i)) as f64 * 1e-9
}

/// The bucket of a duration of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    let bits = 64 - ns.saturating_sub(1).leading_zeros();
    (bits.saturating_sub(FIRST_SHIFT) as usize).min(BUCKETS - 1)
}

/// One operation's counters in one shard (a cache line of its own at the start).
#[repr(align(64))]
struct Row {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Row {
    fn default() -> Row {
        Row { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }
}

/// One operation's figures, summed over the shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpFigures {
    /// Ran (each counted in one bucket).
    pub calls: u64,
    pub sum_ns: u64,
    pub buckets: [u64; BUCKETS],
    /// Of those that ran, how many failed (answered an error).
    pub failed: u64,
    /// Refused before they ran (not counted in `calls`).
    pub rejected: u64,
}

/// The counters of a front end's `N` operations (see the module comment).
pub struct OpStats<const N: usize> {
    /// `SHARDS` blocks of one row per operation.
    rows: Box<[Row]>,
    failed: Box<[AtomicU64]>,
    rejected: Box<[AtomicU64]>,
}

thread_local! {
    /// This thread's shard.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Relaxed) % SHARDS;
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl<const N: usize> Default for OpStats<N> {
    /// Counters for operations `0..N`; others are ignored.
    fn default() -> OpStats<N> {
        OpStats {
            rows: (0..SHARDS * N).map(|_| Row::default()).collect(),
            failed: (0..N).map(|_| AtomicU64::new(0)).collect(),
            rejected: (0..N).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl<const N: usize> OpStats<N> {
    /// Operation `op` ran for `took`, and failed or not.
    pub fn ran(&self, op: usize, took: Duration, failed: bool) {
        if op >= N {
            return;
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let row = &self.rows[SHARD.with(|s| *s) * N + op];
        row.buckets[bucket(ns)].fetch_add(1, Relaxed);
        row.sum_ns.fetch_add(ns, Relaxed);
        if failed {
            self.failed[op].fetch_add(1, Relaxed);
        }
    }

    /// Operation `op` was refused before it ran.
    pub fn rejected(&self, op: usize) {
        if let Some(c) = self.rejected.get(op) {
            c.fetch_add(1, Relaxed);
        }
    }

    /// Operation `op`'s figures (zero for an unknown one).
    pub fn figures(&self, op: usize) -> OpFigures {
        let mut f = OpFigures::default();
        if op >= N {
            return f;
        }
        for shard in 0..SHARDS {
            let row = &self.rows[shard * N + op];
            for (sum, b) in f.buckets.iter_mut().zip(&row.buckets) {
                *sum += b.load(Relaxed);
            }
            f.sum_ns += row.sum_ns.load(Relaxed);
        }
        f.calls = f.buckets.iter().sum();
        f.failed = self.failed[op].load(Relaxed);
        f.rejected = self.rejected[op].load(Relaxed);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_are_inclusive_powers_of_two() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(256), 0);
        assert_eq!(bucket(257), 1);
        assert_eq!(bucket(512), 1);
        assert_eq!(bucket(1_000), 2);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_bound(0), 256e-9);
        assert!((bucket_bound(BUCKETS - 2) - 4.294967296).abs() < 1e-12);
        assert_eq!(bucket_bound(BUCKETS - 1), f64::MAX);
        for i in 0..BUCKETS - 1 {
            let ns = (bucket_bound(i) * 1e9).round() as u64;
            assert_eq!(bucket(ns), i, "a duration equal to bucket {i}'s bound is in it");
            assert_eq!(bucket(ns + 1), i + 1);
        }
    }

    #[test]
    fn ran_counts_over_threads_and_rejected_apart() {
        let s = std::sync::Arc::new(OpStats::<3>::default());
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        s.ran(1, Duration::from_micros(3), false);
                    }
                    s.ran(1, Duration::from_secs(10), true);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        s.rejected(1);
        s.rejected(7);
        s.ran(9, Duration::from_micros(1), true);
        let f = s.figures(1);
        assert_eq!((f.calls, f.failed, f.rejected), (606, 6, 1));
        assert_eq!(f.sum_ns, 6 * (100 * 3_000 + 10_000_000_000));
        assert_eq!(f.buckets[bucket(3_000)], 600);
        assert_eq!(f.buckets[BUCKETS - 1], 6);
        assert_eq!(s.figures(0), OpFigures::default());
        assert_eq!(s.figures(9), OpFigures::default());
    }
}
