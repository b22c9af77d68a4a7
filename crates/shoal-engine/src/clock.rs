//! The wall clock that decides whether an object has expired.
//!
//! Expiry times are absolute ([`UnixMillis`]), so the store compares them
//! with a wall clock, not with its own start time. The clock is read only
//! for objects that carry an expiry: a read of an object without one never
//! calls it. Tests give the store a [`ManualClock`] to move time by hand.

use shoal_common::UnixMillis;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of the current wall-clock time. Must be cheap (it is read on
/// the read path of every object with an expiry) and should not go
/// backwards: an object seen expired is treated as gone for good (the
/// cleaner may drop it), whatever a later reading says.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> UnixMillis;
}

/// The system's wall clock (`SystemTime`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        UnixMillis::now()
    }
}

/// A clock that moves only when told to, and counts how often it is read
/// (tests check that reads of objects without an expiry never read it).
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU64,
    reads: AtomicU64,
}

impl ManualClock {
    pub fn new(start: UnixMillis) -> ManualClock {
        ManualClock { now: AtomicU64::new(start.0), reads: AtomicU64::new(0) }
    }

    pub fn set(&self, t: UnixMillis) {
        self.now.store(t.0, Ordering::SeqCst);
    }

    pub fn advance_ms(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// How many times [`Clock::now`] was called.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        self.reads.fetch_add(1, Ordering::SeqCst);
        UnixMillis(self.now.load(Ordering::SeqCst))
    }
}
