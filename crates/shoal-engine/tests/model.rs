//! Model-based tests: random sequences of every operation against the store
//! and a `BTreeMap` model, in memory small enough that both cleaners run
//! many times. Objects may carry expiry times, on a clock the test moves;
//! the expiry sweep runs as one of the operations. After every step the
//! store's own invariants are checked (every live object reachable exactly
//! once, counters equal a recount, no object expiring before its segment's
//! sweep hint). A replay step rebuilds a store from what backups would
//! hold of the log (segments as appended, some in their compacted form), in
//! a shuffled order, and compares it with the model: no overwritten,
//! removed or expired object may come back (`docs/cleaning.md`,
//! "Overwrites in the head need no tombstone").

#[path = "common/backups.rs"]
mod backups;
mod common;

use backups::Backups;
use proptest::prelude::*;
use shoal_engine::{
    Expiry, LogObserver, ManualClock, RejectRules, Store, StoreConfig, StoreError, TableId, UnixMillis, Version,
    WriteOp,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Where the test's clock starts (ms since the epoch).
const T0: u64 = 1_000_000;

const TABLES: [TableId; 2] = [TableId(1), TableId(7)];

#[derive(Clone, Debug)]
enum Rule {
    None,
    MustExist,
    MustNotExist,
    VersionIs(u64),
    VersionGreater(u64),
}

/// An expiry for a write, relative to the test's clock now.
#[derive(Clone, Copy, Debug)]
enum Ttl {
    Never,
    In(u64),
    Keep,
}

#[derive(Clone, Debug)]
enum Op {
    Write { t: usize, k: u8, len: usize, fill: u8, rule: Rule, ttl: Ttl },
    SetExpiry { t: usize, k: u8, ttl: Option<u64>, rule: Rule },
    Advance { ms: u64 },
    Sweep,
    Remove { t: usize, k: u8, rule: Rule },
    Read { t: usize, k: u8, rule: Rule },
    Increment { t: usize, k: u8, delta: i64 },
    MultiWrite { items: Vec<(usize, u8, usize, u8)> },
    MultiRemove { items: Vec<(usize, u8)> },
    Enumerate { t: usize, batch: usize, clean_between: bool },
    Clean { combined: bool },
    Replay { seed: u64 },
}

fn rule() -> impl Strategy<Value = Rule> {
    prop_oneof![
        6 => Just(Rule::None),
        1 => Just(Rule::MustExist),
        1 => Just(Rule::MustNotExist),
        1 => (0u64..40).prop_map(Rule::VersionIs),
        1 => (0u64..40).prop_map(Rule::VersionGreater),
    ]
}

fn ttl() -> impl Strategy<Value = Ttl> {
    prop_oneof![
        4 => Just(Ttl::Never),
        3 => (0u64..60).prop_map(Ttl::In),
        1 => Just(Ttl::Keep),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..48;
    let t = 0usize..2;
    let len = prop_oneof![4 => 0usize..200, 2 => 200usize..1500, 1 => 1500usize..4000];
    prop_oneof![
        30 => (t.clone(), key.clone(), len.clone(), any::<u8>(), rule(), ttl())
            .prop_map(|(t, k, len, fill, rule, ttl)| Op::Write { t, k, len, fill, rule, ttl }),
        4 => (t.clone(), key.clone(), prop::option::of(0u64..60), rule())
            .prop_map(|(t, k, ttl, rule)| Op::SetExpiry { t, k, ttl, rule }),
        5 => (0u64..25).prop_map(|ms| Op::Advance { ms }),
        2 => Just(Op::Sweep),
        10 => (t.clone(), key.clone(), rule()).prop_map(|(t, k, rule)| Op::Remove { t, k, rule }),
        10 => (t.clone(), key.clone(), rule()).prop_map(|(t, k, rule)| Op::Read { t, k, rule }),
        4 => (t.clone(), key.clone(), -5i64..5).prop_map(|(t, k, delta)| Op::Increment { t, k, delta }),
        4 => prop::collection::vec((t.clone(), key.clone(), len, any::<u8>()), 1..10)
            .prop_map(|items| Op::MultiWrite { items }),
        3 => prop::collection::vec((t.clone(), key.clone()), 1..10).prop_map(|items| Op::MultiRemove { items }),
        2 => (t, 1usize..8, any::<bool>()).prop_map(|(t, batch, clean_between)| Op::Enumerate { t, batch, clean_between }),
        2 => any::<bool>().prop_map(|combined| Op::Clean { combined }),
        2 => any::<u64>().prop_map(|seed| Op::Replay { seed }),
    ]
}

fn rules(r: &Rule) -> RejectRules {
    match r {
        Rule::None => RejectRules::default(),
        Rule::MustExist => RejectRules::must_exist(),
        Rule::MustNotExist => RejectRules::must_not_exist(),
        Rule::VersionIs(v) => RejectRules::version_is(Version(*v)),
        Rule::VersionGreater(v) => {
            RejectRules { given_version: Version(*v), version_le_given: true, ..Default::default() }
        }
    }
}

fn key(k: u8) -> Vec<u8> {
    // Keys of varied length so entries straddle seglets in varied ways.
    let mut v = format!("key-{k}").into_bytes();
    v.resize(5 + (k as usize * 7) % 40, b'.');
    v
}

fn value(len: usize, fill: u8) -> Vec<u8> {
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

/// A modelled object: value, version, expiry time.
type Modelled = (Vec<u8>, Version, Option<u64>);

/// The model: objects (some maybe expired), the highest version each key
/// ever had, and the clock.
struct Model {
    objects: BTreeMap<(TableId, Vec<u8>), Modelled>,
    max_version: HashMap<(TableId, Vec<u8>), Version>,
    now: u64,
}

impl Model {
    /// The object if it exists and has not expired.
    fn live(&self, t: TableId, k: &[u8]) -> Option<&Modelled> {
        self.objects.get(&(t, k.to_vec())).filter(|o| o.2.is_none_or(|at| at > self.now))
    }

    /// Forgets expired objects (what a full sweep does to the store).
    fn prune(&mut self) {
        let now = self.now;
        self.objects.retain(|_, o| o.2.is_none_or(|at| at > now));
    }

    fn expect(&self, t: TableId, k: &[u8], r: &RejectRules) -> Result<(), StoreError> {
        let cur = self.live(t, k).map(|o| o.1);
        match cur {
            None if r.doesnt_exist => Err(StoreError::ObjectDoesntExist),
            Some(v) if r.exists => Err(StoreError::ObjectExists { version: v }),
            Some(v) if r.version_le_given && v <= r.given_version => Err(StoreError::WrongVersion { version: v }),
            Some(v) if r.version_ne_given && v != r.given_version => Err(StoreError::WrongVersion { version: v }),
            _ => Ok(()),
        }
    }

    /// Records a new version, checking it exceeds every earlier one of the key.
    fn written(&mut self, t: TableId, k: &[u8], val: Vec<u8>, v: Version, expiry: Option<u64>) {
        let max = self.max_version.entry((t, k.to_vec())).or_default();
        assert!(v > *max, "version {v} of {k:?} not above earlier {max}");
        *max = v;
        self.objects.insert((t, k.to_vec()), (val, v, expiry));
    }
}

/// Rebuilds a store from what backups hold of `store`'s log (segment i in
/// its in-memory form where bit i % 64 of `seed` is set), replayed in an
/// order shuffled by `seed`, and checks every key either way: each live
/// object of the model is there at its version, every other key is missing.
fn check_replay(store: &Store, backups: &Backups, clock: &Arc<ManualClock>, m: &Model, seed: u64) {
    let segs = backups.log_of(store, |i| (seed >> (i % 64)) & 1 == 1, seed);
    let config = StoreConfig {
        clock: clock.clone(),
        expiry_sweep_interval: Duration::ZERO,
        ..common::small_config(1024, false)
    };
    let rebuilt = Store::new(config).unwrap();
    for t in TABLES {
        rebuilt.create_table(t);
    }
    rebuilt.replay(segs.iter().map(|s| s.as_slice())).unwrap();
    for t in TABLES {
        for k in 0..48u8 {
            let k = key(k);
            let got = rebuilt.read(t, &k, RejectRules::default());
            match m.live(t, &k) {
                Some(o) => assert_eq!(got, Ok(read_of(o)), "{k:?} after a replay"),
                None => assert_eq!(got, Err(StoreError::ObjectDoesntExist), "{k:?} came back in a replay"),
            }
        }
    }
    rebuilt.check_invariants().unwrap_or_else(|e| panic!("invariant broken after a replay: {e}"));
}

/// A model's object as the store reads it.
fn read_of(o: &Modelled) -> (Vec<u8>, Version) {
    (o.0.clone(), o.1)
}

fn run(ops: Vec<Op>, cleaner_thread: bool) {
    let clock = Arc::new(ManualClock::new(UnixMillis(T0)));
    // No sweep thread: the sweep runs as an operation.
    let config = StoreConfig {
        clock: clock.clone(),
        expiry_sweep_interval: Duration::ZERO,
        ..common::small_config(256, cleaner_thread)
    };
    let backups = Arc::new(Backups::default());
    let store = Store::with_observer(config, Some(backups.clone() as Arc<dyn LogObserver>)).unwrap();
    for t in TABLES {
        store.create_table(t);
    }
    let mut m = Model { objects: BTreeMap::new(), max_version: HashMap::new(), now: T0 };
    for op in ops {
        match op {
            Op::Write { t, k, len, fill, rule, ttl } => {
                let (t, k, val, r) = (TABLES[t], key(k), value(len, fill), rules(&rule));
                let expected = m.expect(t, &k, &r);
                let (expiry, want_expiry) = match ttl {
                    Ttl::Never => (Expiry::Never, None),
                    Ttl::In(ms) => (Expiry::At(UnixMillis(m.now + ms)), Some(m.now + ms)),
                    Ttl::Keep => (Expiry::Keep, m.live(t, &k).and_then(|o| o.2)),
                };
                match (store.write_with_expiry(t, &k, &val, r, expiry), expected) {
                    (Ok(v), Ok(())) => m.written(t, &k, val, v, want_expiry),
                    (Err(StoreError::OutOfMemory), Ok(())) => {
                        let s = store.stats();
                        assert!(s.memory_utilisation > 0.5, "refused write at utilisation {}", s.memory_utilisation);
                    }
                    (got, want) => assert_eq!(got.map(|_| ()), want, "write {k:?}"),
                }
            }
            Op::SetExpiry { t, k, ttl, rule } => {
                let (t, k, r) = (TABLES[t], key(k), rules(&rule));
                let expected = m.expect(t, &k, &r).and_then(|()| match m.live(t, &k) {
                    Some(_) => Ok(()),
                    None => Err(StoreError::ObjectDoesntExist),
                });
                let at = ttl.map(|ms| m.now + ms);
                match (store.set_expiry(t, &k, at.map(UnixMillis), r), expected) {
                    (Ok(v), Ok(())) => {
                        let val = m.live(t, &k).expect("live").0.clone();
                        m.written(t, &k, val, v, at);
                    }
                    (Err(StoreError::OutOfMemory), Ok(())) => {}
                    (got, want) => assert_eq!(got.map(|_| ()), want, "set expiry of {k:?}"),
                }
            }
            Op::Advance { ms } => {
                clock.advance_ms(ms);
                m.now += ms;
            }
            Op::Sweep => {
                store.sweep_expired();
                m.prune();
                let s = store.stats();
                assert_eq!(s.objects as usize, m.objects.len(), "objects after a full sweep");
                let expiring = m.objects.values().filter(|o| o.2.is_some()).count();
                assert_eq!(s.expiring_objects as usize, expiring);
            }
            Op::Remove { t, k, rule } => {
                let (t, k, r) = (TABLES[t], key(k), rules(&rule));
                let expected = m.expect(t, &k, &r);
                let got = store.remove(t, &k, r);
                match expected {
                    Ok(()) => {
                        let had = m.live(t, &k).map(|o| o.1);
                        m.objects.remove(&(t, k.clone()));
                        assert_eq!(got, Ok(had), "remove {k:?}");
                    }
                    Err(e) => assert_eq!(got, Err(e)),
                }
            }
            Op::Read { t, k, rule } => {
                let (t, k, r) = (TABLES[t], key(k), rules(&rule));
                let got = store.read(t, &k, r);
                match (m.expect(t, &k, &r), m.live(t, &k)) {
                    (Err(e), _) => assert_eq!(got, Err(e)),
                    (Ok(()), Some(o)) => {
                        assert_eq!(got, Ok(read_of(o)), "read {k:?}");
                        let meta = store.meta(t, &k, RejectRules::default()).unwrap();
                        assert_eq!((meta.version, meta.expiry), (o.1, o.2.map(UnixMillis)), "meta of {k:?}");
                    }
                    (Ok(()), None) => assert_eq!(got, Err(StoreError::ObjectDoesntExist)),
                }
            }
            Op::Increment { t, k, delta } => {
                let (t, k) = (TABLES[t], key(k));
                let cur = m.live(t, &k).cloned();
                let got = store.increment(t, &k, delta, RejectRules::default());
                match cur.as_ref().map(|o| shoal_engine::counter::parse(&o.0)) {
                    Some(None) => assert_eq!(got, Err(StoreError::NotAnInteger)),
                    other => {
                        let old = other.flatten().unwrap_or(0);
                        let (n, v) = got.expect("increment");
                        assert_eq!(n, old + delta);
                        // The counter keeps its expiry.
                        m.written(t, &k, n.to_string().into_bytes(), v, cur.and_then(|o| o.2));
                    }
                }
            }
            Op::MultiWrite { items } => {
                let owned: Vec<(TableId, Vec<u8>, Vec<u8>)> =
                    items.iter().map(|(t, k, len, fill)| (TABLES[*t], key(*k), value(*len, *fill))).collect();
                let ops: Vec<WriteOp> =
                    owned.iter().map(|(t, k, v)| WriteOp::new(*t, k, v, RejectRules::default())).collect();
                let res = store.multi_write(&ops);
                for ((t, k, v), r) in owned.into_iter().zip(res) {
                    match r {
                        Ok(ver) => m.written(t, &k, v, ver, None),
                        Err(StoreError::OutOfMemory) => {}
                        Err(e) => panic!("multi-write {k:?}: {e}"),
                    }
                }
            }
            Op::MultiRemove { items } => {
                let keys: Vec<(TableId, Vec<u8>)> = items.iter().map(|(t, k)| (TABLES[*t], key(*k))).collect();
                let req: Vec<(TableId, &[u8], RejectRules)> =
                    keys.iter().map(|(t, k)| (*t, k.as_slice(), RejectRules::default())).collect();
                let res = store.multi_remove(&req);
                for ((t, k), r) in keys.into_iter().zip(res) {
                    let had = m.live(t, &k).map(|o| o.1);
                    m.objects.remove(&(t, k.clone()));
                    assert_eq!(r, Ok(had), "multi-remove {k:?}");
                }
            }
            Op::Enumerate { t, batch, clean_between } => {
                let t = TABLES[t];
                let got = if clean_between {
                    // Clean between batches: the cursor must survive objects moving.
                    let mut out = BTreeMap::new();
                    let mut cursor = Some(shoal_engine::EnumCursor::START);
                    while let Some(c) = cursor {
                        let (objs, next) = store.enumerate(t, c, batch).unwrap();
                        for o in objs {
                            assert!(out.insert(o.key.clone(), (o.value, o.version)).is_none(), "duplicate");
                        }
                        store.clean_now(1, out.len() % 2 == 0);
                        cursor = next;
                    }
                    out
                } else {
                    common::enumerate_all(&store, t, batch)
                };
                let want: BTreeMap<_, _> = m
                    .objects
                    .iter()
                    .filter(|((tt, k), _)| *tt == t && m.live(t, k).is_some())
                    .map(|((_, k), o)| (k.clone(), read_of(o)))
                    .collect();
                assert_eq!(got, want, "enumeration of table {t}");
            }
            Op::Clean { combined } => {
                store.clean_now(2, combined);
            }
            Op::Replay { seed } => check_replay(&store, &backups, &clock, &m, seed),
        }
        store.check_invariants().unwrap_or_else(|e| panic!("invariant broken: {e}"));
    }
    // Everything still readable at the end, after a final forced clean
    // (which drops expired objects) and a sweep.
    store.clean_now(4, true);
    store.sweep_expired();
    m.prune();
    store.check_invariants().unwrap();
    for ((t, k), o) in &m.objects {
        assert_eq!(store.read(*t, k, RejectRules::default()), Ok(read_of(o)));
    }
    check_replay(&store, &backups, &clock, &m, 0);
    let s = store.stats();
    assert_eq!(s.objects as usize, m.objects.len());
    if std::env::var_os("SHOAL_TEST_VERBOSE").is_some() {
        eprintln!("writes {} compactions {} combined {}", s.writes, s.compactions, s.combined_passes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model_inline_cleaning(ops in prop::collection::vec(op(), 1..800)) {
        run(ops, false);
    }

    #[test]
    fn store_matches_model_cleaner_thread(ops in prop::collection::vec(op(), 1..500)) {
        run(ops, true);
    }
}

/// A long fixed run to make sure both cleaners really run many times.
#[test]
fn store_long_run_cleans_many_times() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    let t = TableId(1);
    store.create_table(t);
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut seed = 7u64;
    let mut rnd = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    for i in 0..20_000u64 {
        let k = key((rnd() % 48) as u8);
        if rnd() % 5 == 0 {
            store.remove(t, &k, RejectRules::default()).unwrap();
            m.remove(&k);
        } else {
            let v = value((rnd() % 1200) as usize, i as u8);
            if let Err(e) = store.write(t, &k, &v, RejectRules::default()) {
                panic!("write {i}: {e}; {:#?}", store.stats());
            }
            m.insert(k, v);
        }
        if i % 2000 == 0 {
            store.check_invariants().unwrap();
        }
    }
    store.check_invariants().unwrap();
    let s = store.stats();
    assert!(s.compactions > 10, "compactions: {}", s.compactions);
    assert!(s.combined_passes > 10, "combined passes: {}", s.combined_passes);
    assert!(s.tombstone_scans > 0);
    for (k, v) in &m {
        assert_eq!(&store.read(t, k, RejectRules::default()).unwrap().0, v);
    }
    assert_eq!(common::enumerate_all(&store, t, 5).len(), m.len());
}
