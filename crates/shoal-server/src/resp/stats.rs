//! Per-command and per-error counters of the Redis front end: what `INFO
//! commandstats`, `INFO errorstats` and `total_error_replies` report, as
//! Redis counts them.
//!
//! * A command that ran is one call, with its run time in microseconds;
//!   `failed_calls` counts the calls whose reply was an error.
//! * A command refused before it ran (wrong arity, not logged in, refused
//!   while queued in MULTI, a routing refusal such as CROSSSLOT or MOVED)
//!   counts in `rejected_calls`, not in calls.
//! * Every error reply counts once in `total_error_replies` and under its
//!   code (the first word: `ERR`, `WRONGTYPE`, `CROSSSLOT`, ...). As in
//!   Redis, at most 128 distinct codes are tracked; further new codes count
//!   only in the total.
//!
//! Calls, run times, failures and refusals are the front end's
//! [`OpStats`], indexed by the command's position in the command table
//! (with a latency histogram per command, which `/metrics` reports). Error codes are counted in a fixed table of (code, count): a code
//! seen before is found by comparing bytes and counted with one atomic add,
//! without allocating or locking; only a new code takes a lock to enter it.

use crate::metrics::ops::OpStats;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Most commands the table may hold (checked by a test of the table).
pub const MAX_COMMANDS: usize = 128;
/// Most distinct error codes tracked.
const MAX_ERROR_CODES: usize = 128;

/// One command's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandFigures {
    pub calls: u64,
    pub usec: u64,
    pub rejected: u64,
    pub failed: u64,
}

pub struct CommandStats {
    per: OpStats<MAX_COMMANDS>,
    errors: ErrorCodes,
    total_errors: AtomicU64,
}

/// Per error code, its count: the first `len` entries are in use; an entry
/// is written once, under `adding`, before `len` covers it.
struct ErrorCodes {
    codes: Box<[OnceLock<Box<[u8]>>]>,
    counts: Box<[AtomicU64]>,
    len: AtomicUsize,
    adding: Mutex<()>,
}

impl ErrorCodes {
    fn new() -> ErrorCodes {
        ErrorCodes {
            codes: (0..MAX_ERROR_CODES).map(|_| OnceLock::new()).collect(),
            counts: (0..MAX_ERROR_CODES).map(|_| AtomicU64::new(0)).collect(),
            len: AtomicUsize::new(0),
            adding: Mutex::new(()),
        }
    }

    /// The position of `code` among the first `len` entries, from `from` on.
    fn find(&self, code: &[u8], from: usize, len: usize) -> Option<usize> {
        (from..len).find(|&i| self.codes[i].get().is_some_and(|c| &c[..] == code))
    }

    fn count(&self, code: &[u8]) {
        let len = self.len.load(Ordering::Acquire);
        if let Some(i) = self.find(code, 0, len) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
            return;
        }
        let _adding = self.adding.lock();
        let now = self.len.load(Ordering::Acquire);
        let i = match self.find(code, len, now) {
            Some(i) => i,
            None if now < MAX_ERROR_CODES => {
                let _ = self.codes[now].set(code.into());
                self.len.store(now + 1, Ordering::Release);
                now
            }
            None => return,
        };
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Every code and its count, in code order.
    fn all(&self) -> Vec<(String, u64)> {
        let len = self.len.load(Ordering::Acquire);
        let mut all: Vec<(String, u64)> = (0..len)
            .filter_map(|i| {
                let code = self.codes[i].get()?;
                Some((String::from_utf8_lossy(code).into_owned(), self.counts[i].load(Ordering::Relaxed)))
            })
            .collect();
        all.sort();
        all
    }
}

/// The name of the command at `index` in the command table.
pub fn command_name(index: usize) -> Option<&'static str> {
    crate::resp::cmd::COMMANDS.get(index).map(|e| e.spec.name)
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats { per: OpStats::default(), errors: ErrorCodes::new(), total_errors: AtomicU64::new(0) }
    }
}

impl CommandStats {
    /// Command `index` ran for `took`.
    pub fn ran(&self, index: usize, took: Duration, failed: bool) {
        self.per.ran(index, took, failed);
    }

    /// Command `index` was refused before it ran.
    pub fn rejected(&self, index: usize) {
        self.per.rejected(index);
    }

    /// The per-command counters and latency histograms.
    pub fn ops(&self) -> &OpStats<MAX_COMMANDS> {
        &self.per
    }

    /// An error reply whose text (without the leading `-`) is `text`.
    pub fn error(&self, text: &[u8]) {
        self.total_errors.fetch_add(1, Ordering::Relaxed);
        let code = text.split(|&c| c == b' ' || c == b'\r').next().unwrap_or_default();
        self.errors.count(&code[..code.len().min(64)]);
    }

    pub fn total_errors(&self) -> u64 {
        self.total_errors.load(Ordering::Relaxed)
    }

    /// The figures of command `index`.
    pub fn figures(&self, index: usize) -> CommandFigures {
        let f = self.per.figures(index);
        CommandFigures { calls: f.calls, usec: f.sum_ns / 1000, rejected: f.rejected, failed: f.failed }
    }

    /// Every error code seen and its count, in code order.
    pub fn error_counts(&self) -> Vec<(String, u64)> {
        self.errors.all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_rejections_failures_and_error_codes() {
        let s = CommandStats::default();
        s.ran(3, Duration::from_micros(10), false);
        s.ran(3, Duration::from_micros(5), true);
        s.rejected(3);
        s.rejected(MAX_COMMANDS + 5);
        assert_eq!(s.figures(3), CommandFigures { calls: 2, usec: 15, rejected: 1, failed: 1 });
        s.error(b"ERR syntax error");
        s.error(b"ERR other");
        s.error(b"WRONGTYPE Operation against a key");
        assert_eq!(s.error_counts(), vec![("ERR".into(), 2), ("WRONGTYPE".into(), 1)]);
        for i in 0..200 {
            s.error(format!("E{i} x").as_bytes());
        }
        assert_eq!(s.error_counts().len(), MAX_ERROR_CODES);
        assert_eq!(s.total_errors(), 203);
    }
}
