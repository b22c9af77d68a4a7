//! Transaction tests: a model check against a `BTreeMap`, atomicity under
//! concurrent writers and the cleaner, rollback, retry when memory is full,
//! and replay of committed transactions.

mod common;

use proptest::prelude::*;
use shoal_engine::{Commit, RejectRules, Store, StoreError, TableId, Txn, Version};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const T: TableId = TableId(1);

fn commit(txn: Txn) {
    assert_eq!(txn.commit(), Ok(Commit::Done));
}

#[test]
fn transaction_reads_its_own_writes_and_applies_them_together() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    let va = store.write(T, b"a", b"1", RejectRules::default()).unwrap();
    let mut txn = store.transaction(&[(T, b"a"), (T, b"b"), (T, b"c")]);
    let mut buf = Vec::new();
    assert_eq!(txn.read_into(T, b"a", &mut buf), Ok(va));
    let va2 = txn.write(T, b"a", b"2", RejectRules::default()).unwrap();
    assert!(va2 > va);
    assert_eq!(txn.read_into(T, b"a", &mut buf), Ok(va2));
    assert_eq!(buf, b"2");
    txn.write(T, b"b", b"x", RejectRules::must_not_exist()).unwrap();
    assert_eq!(txn.remove(T, b"c", RejectRules::default()), Ok(None));
    assert!(txn.version(T, b"b").unwrap().is_some());
    // Not visible to others before the commit.
    assert_eq!(store.read(T, b"a", RejectRules::default()).unwrap().0, b"1");
    assert_eq!(store.read(T, b"b", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    commit(txn);
    assert_eq!(store.read(T, b"a", RejectRules::default()), Ok((b"2".to_vec(), va2)));
    assert_eq!(store.read(T, b"b", RejectRules::default()).unwrap().0, b"x");
    assert_eq!(store.stats().objects, 2);
    store.check_invariants().unwrap();
}

#[test]
fn transaction_refuses_undeclared_keys_and_rejected_rules_stage_nothing() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    store.write(T, b"a", b"1", RejectRules::default()).unwrap();
    let mut txn = store.transaction(&[(T, b"a")]);
    // "zz" shares no stripe with "a" in a 16-bucket table only by chance;
    // find a key that does not.
    let other = (0..1000u32)
        .map(|i| format!("k{i}").into_bytes())
        .find(|k| txn.version(T, k) == Err(StoreError::NotInTransaction))
        .expect("some key on another stripe");
    assert_eq!(txn.write(T, &other, b"v", RejectRules::default()), Err(StoreError::NotInTransaction));
    assert!(matches!(txn.write(T, b"a", b"2", RejectRules::must_not_exist()), Err(StoreError::ObjectExists { .. })));
    assert_eq!(txn.write(TableId(9), b"a", b"2", RejectRules::default()), Err(StoreError::UnknownTable(TableId(9))));
    commit(txn);
    assert_eq!(store.read(T, b"a", RejectRules::default()).unwrap(), (b"1".to_vec(), Version(1)));
    assert_eq!(store.stats().writes, 1);
}

#[test]
fn a_dropped_transaction_applies_nothing_and_releases_its_keys() {
    let store = Arc::new(Store::new(common::small_config(256, true)).unwrap());
    store.create_table(T);
    store.write(T, b"a", b"1", RejectRules::default()).unwrap();
    let mut txn = store.transaction(&[(T, b"a")]);
    txn.write(T, b"a", b"2", RejectRules::default()).unwrap();
    txn.remove(T, b"a", RejectRules::default()).unwrap();
    // A writer of the same key waits for the transaction.
    // Measured from the drop, not from the writer's start: on a loaded
    // machine the writer's thread may start late.
    let s = store.clone();
    let writer = thread::spawn(move || {
        s.write(T, b"a", b"3", RejectRules::default()).unwrap();
        Instant::now()
    });
    thread::sleep(Duration::from_millis(100));
    let dropped = Instant::now();
    drop(txn);
    assert!(writer.join().unwrap() >= dropped, "the writer did not wait for the transaction");
    assert_eq!(store.read(T, b"a", RejectRules::default()).unwrap().0, b"3");
    store.check_invariants().unwrap();
}

#[test]
fn versions_of_a_key_removed_and_written_again_in_a_transaction_keep_growing() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    let v1 = store.write(T, b"a", b"1", RejectRules::default()).unwrap();
    let mut txn = store.transaction(&[(T, b"a")]);
    let v2 = txn.write(T, b"a", b"2", RejectRules::default()).unwrap();
    txn.remove(T, b"a", RejectRules::default()).unwrap();
    let v3 = txn.write(T, b"a", b"3", RejectRules::must_not_exist()).unwrap();
    assert!(v1 < v2 && v2 < v3, "{v1} {v2} {v3}");
    commit(txn);
    assert_eq!(store.read(T, b"a", RejectRules::default()), Ok((b"3".to_vec(), v3)));
    // Removed in a transaction: a later create gets a higher version.
    let mut txn = store.transaction(&[(T, b"a")]);
    txn.remove(T, b"a", RejectRules::default()).unwrap();
    commit(txn);
    assert_eq!(store.read(T, b"a", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    let v4 = store.write(T, b"a", b"4", RejectRules::default()).unwrap();
    assert!(v4 > v3);
    store.check_invariants().unwrap();
}

#[test]
fn transfers_in_transactions_keep_the_sum_under_concurrency_and_cleaning() {
    // Two threads move amounts between 8 accounts in transactions while a
    // third audits the sum in transactions and a fourth churns other keys
    // so the cleaner relocates the accounts. Any interleaving inside a
    // transaction would show as a wrong sum.
    let store = Arc::new(Store::new(common::small_config(512, true)).unwrap());
    store.create_table(T);
    let accounts: Vec<Vec<u8>> = (0..8).map(|i| format!("acct{i}").into_bytes()).collect();
    for a in &accounts {
        store.write(T, a, b"100", RejectRules::default()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let read_int = |txn: &Txn, k: &[u8]| {
        let mut buf = Vec::new();
        txn.read_into(T, k, &mut buf).unwrap();
        std::str::from_utf8(&buf).unwrap().parse::<i64>().unwrap()
    };
    let mut handles = Vec::new();
    for seed in 0..2u64 {
        let (store, accounts, stop) = (store.clone(), accounts.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            let mut x = seed * 7919 + 1;
            let mut done = 0u64;
            let deadline = Instant::now() + Duration::from_secs(2);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && done < 20_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (i, j) = ((x >> 33) as usize % 8, (x >> 40) as usize % 8);
                if i == j {
                    continue;
                }
                let keys = [(T, &accounts[i][..]), (T, &accounts[j][..])];
                loop {
                    let mut txn = store.transaction(&keys);
                    let (a, b) = (read_int(&txn, &accounts[i]), read_int(&txn, &accounts[j]));
                    let amount = (x >> 50) as i64 % 10;
                    txn.write(T, &accounts[i], (a - amount).to_string().as_bytes(), RejectRules::default()).unwrap();
                    txn.write(T, &accounts[j], (b + amount).to_string().as_bytes(), RejectRules::default()).unwrap();
                    if txn.commit().unwrap() == Commit::Done {
                        break;
                    }
                }
                done += 1;
            }
            done
        }));
    }
    let churn = {
        let (store, stop) = (store.clone(), stop.clone());
        thread::spawn(move || {
            let value = vec![7u8; 900];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 200_000 {
                store.write(T, format!("churn{}", n % 64).as_bytes(), &value, RejectRules::default()).unwrap();
                n += 1;
            }
        })
    };
    let keys: Vec<(TableId, &[u8])> = accounts.iter().map(|a| (T, &a[..])).collect();
    let mut audits = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let txn = store.transaction(&keys);
        let sum: i64 = accounts.iter().map(|a| read_int(&txn, a)).sum();
        drop(txn);
        assert_eq!(sum, 800, "audit {audits} saw a transfer half done");
        audits += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let transfers: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    churn.join().unwrap();
    assert!(transfers > 100 && audits > 100, "too little concurrency: {transfers} transfers, {audits} audits");
    let total: i64 = accounts
        .iter()
        .map(|a| {
            std::str::from_utf8(&store.read(T, a, RejectRules::default()).unwrap().0).unwrap().parse::<i64>().unwrap()
        })
        .sum();
    assert_eq!(total, 800);
    assert!(store.stats().bytes_relocated > 0, "the cleaner never ran");
    store.check_invariants().unwrap();
}

#[test]
fn a_commit_that_finds_memory_full_applies_nothing_and_asks_for_a_retry() {
    // No cleaner thread: a full log is cleaned inline, and with every
    // object live nothing can be freed.
    let store = Store::new(common::small_config(192, false)).unwrap();
    store.create_table(T);
    let value = vec![1u8; 3000];
    let mut n = 0;
    while store.write(T, format!("fill{n}").as_bytes(), &value, RejectRules::default()).is_ok() {
        n += 1;
    }
    let before = store.stats();
    let mut txn = store.transaction(&[(T, b"x"), (T, b"y")]);
    txn.write(T, b"x", &value, RejectRules::default()).unwrap();
    txn.write(T, b"y", &value, RejectRules::default()).unwrap();
    assert_eq!(txn.commit(), Err(StoreError::OutOfMemory));
    let after = store.stats();
    assert_eq!((before.objects, before.writes), (after.objects, after.writes));
    assert_eq!(store.read(T, b"x", RejectRules::default()), Err(StoreError::ObjectDoesntExist));
    // The keys were released: removing fill objects makes room, and the
    // same transaction then commits.
    for i in 0..n / 2 {
        store.remove(T, format!("fill{i}").as_bytes(), RejectRules::default()).unwrap();
    }
    let committed = loop {
        let mut txn = store.transaction(&[(T, b"x"), (T, b"y")]);
        txn.write(T, b"x", &value, RejectRules::default()).unwrap();
        txn.write(T, b"y", &value, RejectRules::default()).unwrap();
        match txn.commit() {
            Ok(Commit::Done) => break true,
            Ok(Commit::Retry) => continue,
            Err(e) => panic!("commit after freeing memory: {e}"),
        }
    };
    assert!(committed);
    assert_eq!(store.read(T, b"y", RejectRules::default()).unwrap().0, value);
    store.check_invariants().unwrap();
}

#[test]
fn committed_transactions_survive_replay() {
    let store = Store::new(common::small_config(256, true)).unwrap();
    store.create_table(T);
    store.write(T, b"gone", b"1", RejectRules::default()).unwrap();
    store.write(T, b"kept", b"1", RejectRules::default()).unwrap();
    let mut txn = store.transaction(&[(T, b"gone"), (T, b"kept"), (T, b"new")]);
    txn.remove(T, b"gone", RejectRules::default()).unwrap();
    txn.write(T, b"kept", b"2", RejectRules::default()).unwrap();
    txn.write(T, b"new", b"3", RejectRules::default()).unwrap();
    commit(txn);
    let expected = common::enumerate_all(&store, T, 4);
    let segments = store.log_segments();
    let rebuilt = Store::new(common::small_config(256, true)).unwrap();
    rebuilt.replay(segments.iter().map(|(_, s)| s.as_slice())).unwrap();
    assert_eq!(common::enumerate_all(&rebuilt, T, 4), expected);
    assert_eq!(expected.keys().map(|k| k.as_slice()).collect::<Vec<_>>(), [&b"kept"[..], b"new"]);
}

#[derive(Clone, Debug)]
enum Op {
    Write(u8, u8),
    WriteIfAbsent(u8, u8),
    Remove(u8),
    Read(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6u8, any::<u8>()).prop_map(|(k, v)| Op::Write(k, v)),
        (0..6u8, any::<u8>()).prop_map(|(k, v)| Op::WriteIfAbsent(k, v)),
        (0..6u8).prop_map(Op::Remove),
        (0..6u8).prop_map(Op::Read),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Transactions (committed or dropped) against a `BTreeMap` model: every
    /// read inside a transaction and the store after each one agree with it.
    #[test]
    fn transactions_match_a_model(txns in prop::collection::vec((prop::collection::vec(op(), 1..12), any::<bool>()), 1..20)) {
        let store = Store::new(common::small_config(256, true)).unwrap();
        store.create_table(T);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let keys: Vec<Vec<u8>> = (0..6u8).map(|k| vec![b'k', k]).collect();
        let declared: Vec<(TableId, &[u8])> = keys.iter().map(|k| (T, &k[..])).collect();
        for (ops, keep) in txns {
            let mut view = model.clone();
            let mut txn = store.transaction(&declared);
            let mut buf = Vec::new();
            for op in ops {
                match op {
                    Op::Write(k, v) => {
                        txn.write(T, &keys[k as usize], &[v], RejectRules::default()).unwrap();
                        view.insert(keys[k as usize].clone(), vec![v]);
                    }
                    Op::WriteIfAbsent(k, v) => {
                        let r = txn.write(T, &keys[k as usize], &[v], RejectRules::must_not_exist());
                        prop_assert_eq!(r.is_ok(), !view.contains_key(&keys[k as usize]));
                        view.entry(keys[k as usize].clone()).or_insert(vec![v]);
                    }
                    Op::Remove(k) => {
                        let r = txn.remove(T, &keys[k as usize], RejectRules::default()).unwrap();
                        prop_assert_eq!(r.is_some(), view.remove(&keys[k as usize]).is_some());
                    }
                    Op::Read(k) => {
                        let r = txn.read_into(T, &keys[k as usize], &mut buf);
                        match view.get(&keys[k as usize]) {
                            Some(v) => { prop_assert!(r.is_ok()); prop_assert_eq!(&buf, v); }
                            None => prop_assert_eq!(r, Err(StoreError::ObjectDoesntExist)),
                        }
                    }
                }
            }
            if keep {
                prop_assert_eq!(txn.commit(), Ok(Commit::Done));
                model = view;
            } else {
                drop(txn);
            }
            let stored: BTreeMap<Vec<u8>, Vec<u8>> =
                common::enumerate_all(&store, T, 3).into_iter().map(|(k, (v, _))| (k, v)).collect();
            prop_assert_eq!(&stored, &model);
            prop_assert_eq!(store.stats().objects, model.len() as u64);
        }
        store.check_invariants().unwrap();
    }
}
