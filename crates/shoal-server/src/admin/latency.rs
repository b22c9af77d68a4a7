//! The latency monitor: per event ("command", "fast-command"), the samples
//! over `latency-monitor-threshold`, at most one per second (the largest)
//! and the last 160 of them, and the largest ever seen, as Redis keeps them.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
const HISTORY: usize = 160;

/// One event's samples: (Unix seconds, milliseconds), oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventHistory {
    pub samples: VecDeque<(i64, u64)>,
    pub max: u64,
}

#[derive(Default)]
pub struct LatencyMonitor {
    events: Mutex<BTreeMap<&'static str, EventHistory>>,
}

impl LatencyMonitor {
    /// Adds a sample of `ms` for `event` at Unix second `now`.
    pub fn add(&self, event: &'static str, now: i64, ms: u64) {
        let mut events = self.events.lock();
        let h = events.entry(event).or_default();
        h.max = h.max.max(ms);
        if let Some(last) = h.samples.back_mut() {
            if last.0 == now {
                last.1 = last.1.max(ms);
                return;
            }
        }
        if h.samples.len() == HISTORY {
            h.samples.pop_front();
        }
        h.samples.push_back((now, ms));
    }

    /// Every event with its history.
    pub fn all(&self) -> Vec<(&'static str, EventHistory)> {
        self.events.lock().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    pub fn history(&self, event: &[u8]) -> Option<EventHistory> {
        self.events.lock().iter().find(|(k, _)| k.as_bytes() == event).map(|(_, v)| v.clone())
    }

    /// Forgets the named events (all if `None`); how many there were.
    pub fn reset(&self, events: Option<&[&[u8]]>) -> usize {
        let mut all = self.events.lock();
        match events {
            None => std::mem::take(&mut *all).len(),
            Some(names) => {
                let before = all.len();
                all.retain(|k, _| !names.contains(&k.as_bytes()));
                before - all.len()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_keeps_one_sample_per_second_and_the_maximum() {
        let m = LatencyMonitor::default();
        m.add("command", 10, 5);
        m.add("command", 10, 7);
        m.add("command", 10, 6);
        m.add("command", 11, 2);
        let h = m.history(b"command").unwrap();
        assert_eq!(h.samples, VecDeque::from([(10, 7), (11, 2)]));
        assert_eq!(h.max, 7);
        for s in 0..500 {
            m.add("fast-command", s, 1);
        }
        assert_eq!(m.history(b"fast-command").unwrap().samples.len(), HISTORY);
        assert_eq!(m.reset(Some(&[b"command", b"nosuch"])), 1);
        assert_eq!(m.reset(None), 1);
        assert!(m.all().is_empty());
    }
}
