//! YCSB's core workloads as operation mixes, its record keys, and the key
//! choosers (uniform, scrambled Zipfian, latest).

use crate::bench::zipf::{fnv1a64, KeyChooser, Zipfian};
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// YCSB's Zipfian constant.
pub const ZIPF_THETA: f64 = 0.99;

/// One operation type, as YCSB reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Read,
    Update,
    Insert,
    /// Read-modify-write: a read, then a write of the same key.
    Rmw,
}

impl OpKind {
    pub const ALL: [OpKind; 4] = [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Rmw];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Rmw => "rmw",
        }
    }
}

/// YCSB's core workloads, and a write-only one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Workload {
    /// 50% reads, 50% updates (update heavy).
    #[value(name = "A", alias = "a")]
    A,
    /// 95% reads, 5% updates (read mostly).
    #[value(name = "B", alias = "b")]
    B,
    /// 100% reads (read only).
    #[value(name = "C", alias = "c")]
    C,
    /// 95% reads of the latest records, 5% inserts.
    #[value(name = "D", alias = "d")]
    D,
    /// 50% reads, 50% read-modify-writes.
    #[value(name = "F", alias = "f")]
    F,
    /// 100% updates (write only).
    #[value(name = "W", alias = "w")]
    W,
    /// 99% reads, 1% updates (symmetric caching's write-rate sweep).
    #[value(name = "U1", alias = "u1")]
    U1,
    /// 90% reads, 10% updates (the same sweep).
    #[value(name = "U10", alias = "u10")]
    U10,
}

impl Workload {
    /// The mix as (operation, proportion); proportions sum to 1.
    pub fn mix(self) -> &'static [(OpKind, f64)] {
        match self {
            Workload::A => &[(OpKind::Read, 0.5), (OpKind::Update, 0.5)],
            Workload::B => &[(OpKind::Read, 0.95), (OpKind::Update, 0.05)],
            Workload::C => &[(OpKind::Read, 1.0)],
            Workload::D => &[(OpKind::Read, 0.95), (OpKind::Insert, 0.05)],
            Workload::F => &[(OpKind::Read, 0.5), (OpKind::Rmw, 0.5)],
            Workload::W => &[(OpKind::Update, 1.0)],
            Workload::U1 => &[(OpKind::Read, 0.99), (OpKind::Update, 0.01)],
            Workload::U10 => &[(OpKind::Read, 0.9), (OpKind::Update, 0.1)],
        }
    }

    /// YCSB's request distribution for this workload.
    pub fn default_dist(self) -> KeyDist {
        match self {
            Workload::D => KeyDist::Latest,
            _ => KeyDist::Zipfian,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "A",
            Workload::B => "B",
            Workload::C => "C",
            Workload::D => "D",
            Workload::F => "F",
            Workload::W => "W",
            Workload::U1 => "U1",
            Workload::U10 => "U10",
        }
    }

    /// Draws the next operation.
    pub fn pick(self, rng: &mut impl Rng) -> OpKind {
        let mix = self.mix();
        let mut u: f64 = rng.gen();
        for &(op, p) in mix {
            if u < p {
                return op;
            }
            u -= p;
        }
        mix[mix.len() - 1].0
    }
}

/// Which records reads and updates touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDist {
    Uniform,
    /// YCSB's scrambled Zipfian (0.99): popular records spread over the keys.
    Zipfian,
    /// Zipfian over recency: the most recently inserted records are the
    /// most popular (YCSB's skewed-latest).
    Latest,
}

impl KeyDist {
    pub fn name(self) -> &'static str {
        match self {
            KeyDist::Uniform => "uniform",
            KeyDist::Zipfian => "zipfian",
            KeyDist::Latest => "latest",
        }
    }
}

/// Record `i`'s key, YCSB style: "user" and a hash of the record number
/// (FNV-1a over 8 bytes is a bijection on u64, so keys are distinct).
pub fn record_key(i: u64, out: &mut String) {
    out.clear();
    write!(out, "user{}", fnv1a64(i)).expect("writing to a String");
}

/// The record numbers inserted so far, shared by every thread. Inserts
/// claim the next number; a record counts for reads once its insert is
/// acknowledged and every earlier insert is too (YCSB's acknowledged
/// counter), so "latest" never picks a record whose insert is in flight.
#[derive(Debug)]
pub struct Records {
    next: AtomicU64,
    acked: AtomicU64,
    /// Acknowledged numbers above `acked` (acknowledged out of order).
    early: Mutex<BTreeSet<u64>>,
}

impl Records {
    /// Records `0..loaded` exist.
    pub fn new(loaded: u64) -> Records {
        Records { next: AtomicU64::new(loaded), acked: AtomicU64::new(loaded), early: Mutex::new(BTreeSet::new()) }
    }

    /// Claims the number of a new record.
    pub fn claim(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks record `i` as inserted.
    pub fn ack(&self, i: u64) {
        let mut early = self.early.lock().expect("records lock");
        early.insert(i);
        let mut acked = self.acked.load(Ordering::Relaxed);
        while early.remove(&acked) {
            acked += 1;
        }
        self.acked.store(acked, Ordering::Release);
    }

    /// Records `0..n` are all inserted.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }
}

/// Chooses the record for a read, update or read-modify-write.
#[derive(Clone, Debug)]
pub struct Chooser {
    dist: KeyDist,
    zipf: Option<KeyChooser>,
    /// Ranks for `Latest`, over the loaded record count.
    ranks: Option<Zipfian>,
}

impl Chooser {
    /// A chooser over `records` loaded records (at least 1). Zipfian takes
    /// O(records) to set up; share it between threads by cloning.
    pub fn new(dist: KeyDist, records: u64) -> Chooser {
        let n = records.max(1);
        let zipf = (dist == KeyDist::Zipfian).then(|| KeyChooser::ScrambledZipfian(Zipfian::new(n, ZIPF_THETA)));
        let ranks = (dist == KeyDist::Latest).then(|| Zipfian::new(n, ZIPF_THETA));
        Chooser { dist, zipf, ranks }
    }

    /// A record number. Uniform picks among every acknowledged record;
    /// Zipfian among the loaded ones (YCSB's key space for it); latest
    /// picks `acked - 1 - rank`, ranks Zipfian over the loaded count.
    pub fn next(&self, rng: &mut impl Rng, records: &Records) -> u64 {
        let acked = records.acked().max(1);
        match self.dist {
            KeyDist::Uniform => rng.gen_range(0..acked),
            KeyDist::Zipfian => self.zipf.as_ref().expect("built for zipfian").next(rng),
            KeyDist::Latest => {
                let rank = self.ranks.as_ref().expect("built for latest").rank(rng);
                acked - 1 - rank.min(acked - 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn mixes_sum_to_one_and_pick_in_proportion() {
        let mut rng = StdRng::seed_from_u64(3);
        for w in
            [Workload::A, Workload::B, Workload::C, Workload::D, Workload::F, Workload::W, Workload::U1, Workload::U10]
        {
            let sum: f64 = w.mix().iter().map(|(_, p)| p).sum();
            assert!((sum - 1.0).abs() < 1e-9, "{w:?}");
        }
        let n = 100_000;
        let reads = (0..n).filter(|_| Workload::B.pick(&mut rng) == OpKind::Read).count();
        assert!((reads as f64 / n as f64 - 0.95).abs() < 0.01, "{reads}");
        assert!((0..1000).all(|_| Workload::C.pick(&mut rng) == OpKind::Read));
    }

    #[test]
    fn records_acknowledge_in_order() {
        let r = Records::new(10);
        let (a, b, c) = (r.claim(), r.claim(), r.claim());
        assert_eq!((a, b, c), (10, 11, 12));
        r.ack(b);
        assert_eq!(r.acked(), 10, "11 is acknowledged but 10 is not");
        r.ack(a);
        assert_eq!(r.acked(), 12);
        r.ack(c);
        assert_eq!(r.acked(), 13);
    }

    #[test]
    fn latest_prefers_recent_records() {
        let records = Records::new(1000);
        let c = Chooser::new(KeyDist::Latest, 1000);
        let mut rng = StdRng::seed_from_u64(4);
        let picks: Vec<u64> = (0..10_000).map(|_| c.next(&mut rng, &records)).collect();
        assert!(picks.iter().all(|&k| k < 1000));
        let newest_tenth = picks.iter().filter(|&&k| k >= 900).count();
        assert!(newest_tenth > 5_000, "{newest_tenth} of 10000 in the newest 10%");
        let i = records.claim();
        records.ack(i);
        assert!((0..1000).any(|_| c.next(&mut rng, &records) == 1000), "a new record becomes the latest");
    }

    #[test]
    fn keys_are_distinct_and_ycsb_shaped() {
        let (mut a, mut b) = (String::new(), String::new());
        record_key(1, &mut a);
        record_key(2, &mut b);
        assert!(a.starts_with("user") && a != b);
    }
}
