//! The slow log: the latest commands that ran longer than
//! `slowlog-log-slower-than`, newest first, as Redis keeps them.
//!
//! Memory is bounded twice: each entry keeps at most 32 arguments of at
//! most 128 bytes each (Redis's cuts, with its "... (N more arguments)" and
//! "... (N more bytes)" markers), and the log keeps at most
//! `slowlog-max-len` entries, and never more than [`MAX_ENTRIES`] whatever
//! that setting says (Redis has no such cap).

use parking_lot::Mutex;
use std::collections::VecDeque;

/// Most arguments an entry keeps (the last of them then says how many more
/// there were).
const MAX_ARGS: usize = 32;
/// Most bytes of an argument an entry keeps.
const MAX_ARG_BYTES: usize = 128;
/// Most entries the log keeps, whatever `slowlog-max-len` says.
pub const MAX_ENTRIES: usize = 4096;

/// One slow command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowEntry {
    pub id: u64,
    /// When it ran, in Unix seconds.
    pub time: i64,
    pub usec: u64,
    pub args: Vec<Vec<u8>>,
    /// The client's address ("ip:port") and name.
    pub addr: String,
    pub name: Vec<u8>,
}

#[derive(Default)]
pub struct SlowLog {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Newest first.
    entries: VecDeque<SlowEntry>,
    next_id: u64,
}

impl SlowLog {
    /// Records a command (its arguments cut to the bounds), keeping at most
    /// `max_len` entries.
    pub fn record<'a>(
        &self,
        args: impl ExactSizeIterator<Item = &'a [u8]>,
        time: i64,
        usec: u64,
        addr: String,
        name: Vec<u8>,
        max_len: u64,
    ) {
        let max_len = (max_len as usize).min(MAX_ENTRIES);
        let argc = args.len();
        let kept = argc.min(MAX_ARGS);
        let mut cut = Vec::with_capacity(kept);
        for (i, a) in args.take(kept).enumerate() {
            if kept < argc && i == kept - 1 {
                cut.push(format!("... ({} more arguments)", argc - kept + 1).into_bytes());
            } else if a.len() > MAX_ARG_BYTES {
                let mut s = a[..MAX_ARG_BYTES].to_vec();
                s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
                cut.push(s);
            } else {
                cut.push(a.to_vec());
            }
        }
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.entries.push_front(SlowEntry { id, time, usec, args: cut, addr, name });
        inner.entries.truncate(max_len);
    }

    /// The newest `count` entries (all if `None`), newest first.
    pub fn latest(&self, count: Option<usize>) -> Vec<SlowEntry> {
        let inner = self.inner.lock();
        inner.entries.iter().take(count.unwrap_or(usize::MAX)).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.inner.lock().entries = VecDeque::new();
    }

    /// Drops the oldest entries past `max_len` (after CONFIG SET).
    pub fn trim(&self, max_len: u64) {
        self.inner.lock().entries.truncate((max_len as usize).min(MAX_ENTRIES));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(log: &SlowLog, args: &[&[u8]], max_len: u64) {
        log.record(args.iter().copied(), 1, 2, "1.2.3.4:5".into(), b"n".to_vec(), max_len);
    }

    #[test]
    fn record_cuts_arguments_as_redis() {
        let log = SlowLog::default();
        let long = [b'x'; 130];
        let many: Vec<&[u8]> = std::iter::repeat_n(&b"a"[..], 40).collect();
        record(&log, &[b"set", &long], 10);
        record(&log, &many, 10);
        let e = log.latest(None);
        assert_eq!(e[1].args[1], [&[b'x'; 128][..], b"... (2 more bytes)"].concat());
        assert_eq!(e[0].args.len(), 32);
        assert_eq!(e[0].args[31], b"... (9 more arguments)");
        assert_eq!((e[0].id, e[1].id), (1, 0), "newest first");
    }

    #[test]
    fn record_keeps_at_most_max_len_and_the_hard_cap() {
        let log = SlowLog::default();
        for _ in 0..5 {
            record(&log, &[b"get"], 3);
        }
        assert_eq!(log.len(), 3);
        log.trim(1);
        assert_eq!(log.latest(Some(10)).len(), 1);
        for _ in 0..MAX_ENTRIES + 10 {
            record(&log, &[b"get"], u64::MAX);
        }
        assert_eq!(log.len(), MAX_ENTRIES);
        log.reset();
        assert!(log.is_empty());
    }
}
