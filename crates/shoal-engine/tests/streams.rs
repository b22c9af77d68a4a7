//! Streams in the store (`docs/streams.md`): many producers appending to
//! the MultiLogs of a stream while objects are overwritten and both
//! cleaners run in the same log; every consumer read sees each producer's
//! records in order and every acknowledged record exactly once; a replay
//! of the log, in any segment order, rebuilds the same streams.

#[allow(dead_code)] // the shared helpers this file does not call
mod common;

use shoal_engine::{RejectRules, Retention, Store, StreamError, StreamOffset, StreamShape, TableId, MAX_BATCH_RECORDS};
use std::collections::HashMap;
use std::sync::Arc;

const STREAM: TableId = TableId(7);
const OBJECTS: TableId = TableId(1);

fn shape() -> StreamShape {
    StreamShape { streamlets: 2, logs: 3, segment_bytes: 4096, group_segments: 2, group_timeout_ms: 0 }
}

/// A record: producer id, sequence number, then filler.
fn record(producer: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(16 + len);
    r.extend_from_slice(&producer.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.resize(16 + len, seq as u8);
    r
}

fn parse(r: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(r[..8].try_into().unwrap()), u64::from_le_bytes(r[8..16].try_into().unwrap()))
}

/// Every record of a streamlet, group by group in id order, each group
/// read to its end in reads of at most `max_bytes`.
fn consume_all(store: &Store, streamlet: u32, max_bytes: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for g in store.stream_groups(STREAM, streamlet, 0, usize::MAX).unwrap() {
        let mut at = StreamOffset { group: g.id, segment: 0, position: 0 };
        loop {
            let c = store.consume(STREAM, streamlet, at, max_bytes, |r| out.push(r.to_vec())).unwrap();
            assert!(c.next >= at, "offsets only move forward");
            if c.records == 0 {
                break;
            }
            at = c.next;
        }
    }
    out
}

/// Checks each producer's records are in sequence order, with no gap and
/// no repeat: 0, 1, 2, ... up to what it was acknowledged.
fn check_order(records: &[Vec<u8>], acked: &HashMap<u64, u64>) {
    let mut next: HashMap<u64, u64> = HashMap::new();
    for r in records {
        let (p, seq) = parse(r);
        let want = next.entry(p).or_default();
        assert_eq!(seq, *want, "producer {p}: record {seq} where {want} was due");
        *want += 1;
    }
    for (p, n) in acked {
        assert_eq!(next.get(p).copied().unwrap_or(0), *n, "producer {p}: records read != acknowledged");
    }
}

#[test]
fn many_producers_each_read_in_order_exactly_once_while_the_cleaner_runs() {
    let store = Arc::new(Store::new(common::small_config(2048, true)).unwrap());
    store.create_table(STREAM);
    store.create_table(OBJECTS);
    store.create_stream(STREAM, shape()).unwrap();
    let producers: Vec<u64> = (0..6).collect();
    let threads: Vec<_> = producers
        .iter()
        .map(|&p| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut seq = 0u64;
                let streamlet = (p % 2) as u32;
                let mut last = StreamOffset::default();
                for i in 0..150u64 {
                    let n = 1 + (i % 5) as usize;
                    let batch: Vec<Vec<u8>> =
                        (0..n).map(|k| record(p, seq + k as u64, (i % 7) as usize * 40)).collect();
                    let got = store.produce(STREAM, streamlet, p, &batch).unwrap();
                    assert_eq!(got.count, n as u32);
                    assert!(got.first > last || i == 0, "a producer's batches get increasing offsets");
                    last = got.first;
                    seq += n as u64;
                    // Object overwrites between, so the cleaner has work.
                    store
                        .write(OBJECTS, &[p as u8, (i % 4) as u8], &vec![i as u8; 300], RejectRules::default())
                        .unwrap();
                }
                (p, seq)
            })
        })
        .collect();
    for _ in 0..20 {
        store.clean_now(2, false);
        store.clean_now(1, true);
    }
    let acked: HashMap<u64, u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    store.clean_now(4, true);
    store.check_invariants().unwrap();
    let mut all = Vec::new();
    for streamlet in 0..2 {
        let groups = store.stream_groups(STREAM, streamlet, 0, usize::MAX).unwrap();
        assert!(groups.len() > 3, "records spread over several groups");
        assert!(groups.iter().all(|g| g.segments <= 2), "a group has at most 2 segments");
        assert!(groups.windows(2).all(|w| w[0].id < w[1].id));
        // At most one open group per log.
        let open: Vec<u32> = groups.iter().filter(|g| !g.closed).map(|g| g.log).collect();
        let mut dedup = open.clone();
        dedup.dedup();
        assert_eq!(open.len(), dedup.len());
        for max in [1, 500, 1 << 20] {
            let records = consume_all(&store, streamlet, max);
            let mine: HashMap<u64, u64> =
                acked.iter().filter(|(p, _)| **p % 2 == streamlet as u64).map(|(p, n)| (*p, *n)).collect();
            check_order(&records, &mine);
            if max == 1 {
                all.extend(records);
            }
        }
    }
    check_order(&all, &acked);

    // The log replays into a fresh store, in either segment order, to the
    // same streams; appends after the replay open new groups.
    let segs = store.log_segments();
    for reversed in [false, true] {
        let mut s: Vec<&[u8]> = segs.iter().map(|s| s.1.as_slice()).collect();
        if reversed {
            s.reverse();
        }
        let rebuilt = Store::new(common::small_config(4096, false)).unwrap();
        rebuilt.create_table(STREAM);
        rebuilt.create_stream(STREAM, shape()).unwrap();
        let report = rebuilt.replay(s).unwrap();
        assert!(report.batches_replayed >= 900, "{report:?}");
        rebuilt.check_invariants().unwrap();
        for streamlet in 0..2 {
            let before = store.stream_groups(STREAM, streamlet, 0, usize::MAX).unwrap();
            let after = rebuilt.stream_groups(STREAM, streamlet, 0, usize::MAX).unwrap();
            assert_eq!(before.len(), after.len());
            for (b, a) in before.iter().zip(&after) {
                assert_eq!(
                    (b.id, b.log, b.segments, b.records, b.bytes),
                    (a.id, a.log, a.segments, a.records, a.bytes)
                );
                assert!(a.closed, "a replayed group is closed");
            }
            assert_eq!(consume_all(&store, streamlet, 700), consume_all(&rebuilt, streamlet, 700));
            let p = rebuilt.produce(STREAM, streamlet, 0, &[b"after"]).unwrap();
            assert!(p.first.group > before.last().unwrap().id);
        }
        // A second replay of the same bytes places nothing twice.
        let again = rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
        assert_eq!(again.batches_replayed, 0);
        assert!(again.batches_skipped >= 900);
    }
}

#[test]
fn consume_resumes_at_any_offset_and_reports_the_end_of_a_closed_group() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(STREAM);
    store.create_stream(STREAM, shape()).unwrap();
    // 4 KiB segments, 2 per group: 1 KiB records, 3 per batch, fill one
    // group (segments of up to 4 records) and start the next.
    let mut seq = 0;
    let mut firsts = Vec::new();
    for _ in 0..6 {
        let batch: Vec<Vec<u8>> = (0..3).map(|k| record(9, seq + k, 1000)).collect();
        firsts.push(store.produce(STREAM, 1, 9, &batch).unwrap().first);
        seq += 3;
    }
    assert_eq!(firsts[0], StreamOffset { group: 0, segment: 0, position: 0 });
    assert_eq!(firsts[1], StreamOffset { group: 0, segment: 1, position: 0 });
    assert_eq!(firsts[2], StreamOffset { group: 1, segment: 0, position: 0 });
    let groups = store.stream_groups(STREAM, 1, 0, 10).unwrap();
    assert_eq!(
        groups.iter().map(|g| (g.id, g.records, g.closed)).collect::<Vec<_>>(),
        [(0, 6, true), (1, 6, true), (2, 6, false)]
    );
    // From the middle of a batch to the end of the group: a read stops at
    // the end of its segment, the next one moves on.
    let mut got = Vec::new();
    let c = store
        .consume(STREAM, 1, StreamOffset { group: 0, segment: 0, position: 1 }, 1 << 20, |r| got.push(parse(r).1))
        .unwrap();
    assert_eq!(got, [1, 2]);
    assert_eq!((c.next, c.records, c.end_of_group), (StreamOffset { group: 0, segment: 0, position: 3 }, 2, false));
    let c = store.consume(STREAM, 1, c.next, 1 << 20, |r| got.push(parse(r).1)).unwrap();
    assert_eq!(got, [1, 2, 3, 4, 5]);
    assert_eq!(c.next, StreamOffset { group: 0, segment: 1, position: 3 });
    assert!(c.end_of_group);
    // The open group is never at its end; a read past what it holds is empty.
    let c = store.consume(STREAM, 1, StreamOffset { group: 2, segment: 1, position: 3 }, 10, |_| {}).unwrap();
    assert_eq!((c.records, c.end_of_group), (0, false));
    // A record larger than max_bytes still comes alone.
    let c = store.consume(STREAM, 1, StreamOffset { group: 1, segment: 0, position: 0 }, 1, |_| {}).unwrap();
    assert_eq!((c.records, c.next.position), (1, 1));
    // Offsets and names that do not exist.
    let bad = |o| store.consume(STREAM, 1, o, 10, |_| {}).unwrap_err();
    assert_eq!(
        bad(StreamOffset { group: 0, segment: 2, position: 0 }),
        StreamError::InvalidOffset(StreamOffset { group: 0, segment: 2, position: 0 })
    );
    assert!(matches!(bad(StreamOffset { group: 0, segment: 0, position: 4 }), StreamError::InvalidOffset(_)));
    assert_eq!(
        bad(StreamOffset { group: 9, segment: 0, position: 0 }),
        StreamError::NoSuchGroup { streamlet: 1, group: 9 }
    );
    assert_eq!(
        store.consume(STREAM, 2, StreamOffset::default(), 1, |_| {}).unwrap_err(),
        StreamError::NoSuchStreamlet { streamlet: 2, streamlets: 2 }
    );
    assert_eq!(
        store.consume(OBJECTS, 0, StreamOffset::default(), 1, |_| {}).unwrap_err(),
        StreamError::UnknownStream(OBJECTS)
    );
}

#[test]
fn invalid_batches_and_shapes_are_refused_and_change_nothing() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    assert_eq!(store.create_stream(STREAM, shape()), Err(StreamError::UnknownStream(STREAM)), "the table must exist");
    store.create_table(STREAM);
    assert!(matches!(
        store.create_stream(STREAM, StreamShape { logs: 0, ..shape() }),
        Err(StreamError::InvalidShape(_))
    ));
    store.create_stream(STREAM, shape()).unwrap();
    store.create_stream(STREAM, shape()).unwrap();
    assert!(matches!(
        store.create_stream(STREAM, StreamShape { streamlets: 3, ..shape() }),
        Err(StreamError::ShapeMismatch { .. })
    ));
    let empty: [&[u8]; 0] = [];
    assert!(matches!(store.produce(STREAM, 0, 1, &empty), Err(StreamError::InvalidBatch(_))));
    let too_many = vec![&b""[..]; MAX_BATCH_RECORDS + 1];
    assert!(matches!(store.produce(STREAM, 0, 1, &too_many), Err(StreamError::InvalidBatch(_))));
    // The store's largest value is 4 KiB here.
    assert!(matches!(store.produce(STREAM, 0, 1, &[vec![0u8; 4096]]), Err(StreamError::InvalidBatch(_))));
    assert!(matches!(store.produce(STREAM, 5, 1, &[b"x"]), Err(StreamError::NoSuchStreamlet { .. })));
    assert!(store.stream_groups(STREAM, 0, 0, 10).unwrap().is_empty());
    assert_eq!(store.stats().stream_bytes, 0);
}

#[test]
fn a_group_closes_after_its_timeout() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(STREAM);
    store.create_stream(STREAM, StreamShape { group_timeout_ms: 50, ..shape() }).unwrap();
    let a = store.produce(STREAM, 0, 4, &[b"one"]).unwrap();
    let c = store.consume(STREAM, 0, a.first, 100, |_| {}).unwrap();
    assert!(!c.end_of_group);
    std::thread::sleep(std::time::Duration::from_millis(80));
    // The consumer closes it: no produce places a batch in it any more.
    let c = store.consume(STREAM, 0, c.next, 100, |_| {}).unwrap();
    assert!(c.end_of_group);
    let b = store.produce(STREAM, 0, 4, &[b"two"]).unwrap();
    assert!(b.first.group > a.first.group);
}

#[test]
fn streams_fill_memory_to_a_clear_refusal_and_are_never_cleaned_away() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    store.create_table(STREAM);
    store.create_stream(STREAM, shape()).unwrap();
    let mut acked = 0u64;
    let err = loop {
        match store.produce(STREAM, 0, 0, &[record(0, acked, 2000)]) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 1000, "256 KiB cannot hold 1,000 records of 2 KiB");
    };
    assert_eq!(err, StreamError::OutOfMemory);
    assert!(acked > 50);
    store.clean_now(4, true);
    store.check_invariants().unwrap();
    check_order(&consume_all(&store, 0, 1 << 20), &HashMap::from([(0, acked)]));
}

#[test]
fn a_dropped_stream_is_cleaned_away_and_skipped_by_replay() {
    let store = Store::new(common::small_config(256, false)).unwrap();
    store.create_table(STREAM);
    store.create_stream(STREAM, shape()).unwrap();
    for i in 0..40 {
        store.produce(STREAM, 0, i, &[record(i, 0, 2000)]).unwrap();
    }
    let segs = store.log_segments();
    let before = store.stats();
    assert!(before.stream_bytes > 40 * 2000);
    store.drop_table(STREAM).unwrap();
    assert_eq!(store.stats().stream_bytes, 0);
    assert_eq!(store.produce(STREAM, 0, 1, &[b"x"]), Err(StreamError::UnknownStream(STREAM)));
    store.clean_now(4, true);
    store.check_invariants().unwrap();
    assert!(store.stats().seglets_in_use < before.seglets_in_use / 2, "the dead batches' segments were freed");
    // A replay into a store without the table skips the batches.
    let rebuilt = Store::new(common::small_config(512, false)).unwrap();
    let report = rebuilt.replay(segs.iter().map(|s| s.1.as_slice())).unwrap();
    assert_eq!((report.batches_replayed, report.batches_skipped), (0, 40));
    // With the table but not the stream, a replay refuses them.
    let wrong = Store::new(common::small_config(512, false)).unwrap();
    wrong.create_table(STREAM);
    assert!(wrong.replay(segs.iter().map(|s| s.1.as_slice())).is_err());
}

/// Retention by size: the oldest closed groups go, in id order, until the
/// streamlet holds at most the limit (open groups stay whatever their
/// size); their segments are cleaned away; consumes of them say they were
/// removed and which groups are kept; and a replay of the log, although
/// it still holds batches of the removed groups, brings none back
/// (the trim point, an object under the streamlet's key, is replayed
/// with them), whichever order the segments come in.
#[test]
fn retention_removes_the_oldest_groups_and_a_replay_does_not_bring_them_back() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(STREAM);
    let one_log = StreamShape { logs: 1, ..shape() };
    store.create_stream(STREAM, one_log).unwrap();
    // 2 streamlets; streamlet 1 is left alone by retention below its limit.
    for i in 0..60u64 {
        store.produce(STREAM, 0, 0, &[record(0, i, 2000), record(0, i, 2000)]).unwrap();
    }
    store.produce(STREAM, 1, 0, &[record(1, 0, 100)]).unwrap();
    let before = store.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
    assert!(before.len() >= 10, "{} groups", before.len());
    let limit = Retention { bytes: 40_000, age_ms: 0 };
    let due = store.stream_retention_due(limit);
    assert_eq!(due.len(), 1, "{due:?}");
    let (table, streamlet, keep) = due[0];
    assert_eq!((table, streamlet), (STREAM, 0));
    // What is kept: the newest groups whose bytes fit, and the open one.
    let kept_bytes: u64 = before.iter().filter(|g| g.id >= keep).map(|g| g.bytes).sum();
    let first_kept = before.iter().find(|g| g.id >= keep).unwrap();
    assert!(kept_bytes <= 40_000 || first_kept.id == before.last().unwrap().id, "{kept_bytes}");
    assert!(kept_bytes + before.iter().rev().find(|g| g.id < keep).unwrap().bytes > 40_000);
    let stats = store.stats();
    store.mark_stream_trimmed(STREAM, 0, keep).unwrap();
    let removed = store.trim_stream(STREAM, 0, keep).unwrap();
    assert_eq!(removed, before.iter().filter(|g| g.id < keep).count());
    assert!(store.stream_retention_due(limit).is_empty(), "nothing more to remove");
    let after = store.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
    assert_eq!(after.first().unwrap().id, keep);
    let old = StreamOffset { group: before[0].id, segment: 0, position: 0 };
    assert_eq!(
        store.consume(STREAM, 0, old, 100, |_| {}),
        Err(StreamError::Trimmed { streamlet: 0, group: old.group, first: keep })
    );
    // Producing goes on after the trim, in new groups.
    let p = store.produce(STREAM, 0, 0, &[record(0, 60, 10)]).unwrap();
    assert!(p.first.group >= keep);
    store.clean_now(8, true);
    store.check_invariants().unwrap();
    assert!(store.stats().stream_bytes < stats.stream_bytes / 2);
    assert!(store.stats().seglets_in_use < stats.seglets_in_use, "the removed groups' segments were freed");

    // The log as it is now, cleaned (the next test replays one that still
    // holds every batch of the removed groups).
    let segs = store.log_segments();
    for reversed in [false, true] {
        let mut s: Vec<&[u8]> = segs.iter().map(|s| s.1.as_slice()).collect();
        if reversed {
            s.reverse();
        }
        let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
        rebuilt.create_table(STREAM);
        rebuilt.create_stream(STREAM, one_log).unwrap();
        rebuilt.replay(s).unwrap();
        rebuilt.check_invariants().unwrap();
        let groups = rebuilt.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
        assert_eq!(groups.first().unwrap().id, keep, "reversed: {reversed}");
        assert_eq!(consume_all(&rebuilt, 0, 1 << 20), consume_all(&store, 0, 1 << 20));
        assert_eq!(consume_all(&rebuilt, 1, 1 << 20).len(), 1);
    }
}

#[test]
fn retention_replays_a_trim_point_over_every_batch_of_the_removed_groups() {
    // The trim point written, the groups not yet removed (a crash between
    // the two): a replay removes them.
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(STREAM);
    let one_log = StreamShape { logs: 1, ..shape() };
    store.create_stream(STREAM, one_log).unwrap();
    for i in 0..30u64 {
        store.produce(STREAM, 0, 0, &[record(0, i, 2000), record(0, i, 2000)]).unwrap();
    }
    let groups = store.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
    let keep = groups[groups.len() / 2].id;
    store.mark_stream_trimmed(STREAM, 0, keep).unwrap();
    for reversed in [false, true] {
        let mut s: Vec<Vec<u8>> = store.log_segments().into_iter().map(|s| s.1).collect();
        if reversed {
            s.reverse();
        }
        let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
        rebuilt.create_table(STREAM);
        rebuilt.create_stream(STREAM, one_log).unwrap();
        rebuilt.replay(s.iter().map(|s| s.as_slice())).unwrap();
        rebuilt.check_invariants().unwrap();
        let after = rebuilt.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
        assert_eq!(after.first().unwrap().id, keep);
        assert_eq!(after.len(), groups.iter().filter(|g| g.id >= keep).count());
        assert_eq!(rebuilt.stream_trimmed(STREAM, 0).unwrap(), keep);
    }
    // A trim point never moves back.
    store.mark_stream_trimmed(STREAM, 0, 1).unwrap();
    store.trim_stream(STREAM, 0, 1).unwrap();
    store.trim_stream(STREAM, 0, keep).unwrap();
    assert_eq!(store.stream_trimmed(STREAM, 0).unwrap(), keep);
    assert_eq!(store.read(STREAM, &0u32.to_le_bytes(), RejectRules::default()).unwrap().0, keep.to_le_bytes());
}

/// Retention by age removes closed groups whose last record is older than
/// the limit; an open group stays, however old.
#[test]
fn retention_by_age_keeps_open_groups() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(STREAM);
    store.create_stream(STREAM, StreamShape { logs: 1, ..shape() }).unwrap();
    for i in 0..12u64 {
        store.produce(STREAM, 0, 0, &[record(0, i, 2000), record(0, i, 2000)]).unwrap();
    }
    let groups = store.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
    assert!(groups.len() >= 2 && !groups.last().unwrap().closed);
    let limit = Retention { bytes: 0, age_ms: 30 };
    assert!(store.stream_retention_due(limit).is_empty(), "nothing is 30 ms old yet");
    std::thread::sleep(std::time::Duration::from_millis(60));
    let due = store.stream_retention_due(limit);
    assert_eq!(due, vec![(STREAM, 0, groups.last().unwrap().id)]);
    store.trim_stream(STREAM, 0, due[0].2).unwrap();
    let after = store.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
    assert_eq!(after.len(), 1);
    assert!(!after[0].closed, "the open group stays");
    store.check_invariants().unwrap();
}

mod model {
    //! Random produces (any producer, streamlet and batch), object
    //! overwrites and cleaning passes against a model: the records of each
    //! log of each streamlet in append order. After every step the store's
    //! invariants hold; reading each log's groups in id order gives exactly
    //! the model's records, from the store and from a replay of its log in
    //! reverse segment order.

    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Produce { streamlet: u32, producer: u64, lens: Vec<usize> },
        Write { k: u8, len: usize },
        Clean { combined: bool },
        Check,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..2, 0u64..5, prop::collection::vec(prop_oneof![4 => 0usize..40, 1 => 40usize..1500], 1..12))
                .prop_map(|(streamlet, producer, lens)| Op::Produce { streamlet, producer, lens }),
            3 => (any::<u8>(), 0usize..900).prop_map(|(k, len)| Op::Write { k: k % 16, len }),
            1 => any::<bool>().prop_map(|combined| Op::Clean { combined }),
            1 => Just(Op::Check),
        ]
    }

    /// Every log's records, in order: each log's groups in id order.
    fn per_log(store: &Store, streamlet: u32) -> HashMap<u32, Vec<Vec<u8>>> {
        let mut out: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
        for g in store.stream_groups(STREAM, streamlet, 0, usize::MAX).unwrap() {
            let mut at = StreamOffset { group: g.id, segment: 0, position: 0 };
            loop {
                let mut got = Vec::new();
                let c = store.consume(STREAM, streamlet, at, 3000, |r| got.push(r.to_vec())).unwrap();
                if c.records == 0 {
                    break;
                }
                out.entry(g.log).or_default().extend(got);
                at = c.next;
            }
        }
        out
    }

    fn check(store: &Store, model: &HashMap<(u32, u32), Vec<Vec<u8>>>) {
        store.check_invariants().unwrap();
        for streamlet in 0..2 {
            let mut got = per_log(store, streamlet);
            for log in 0..3 {
                let want = model.get(&(streamlet, log)).cloned().unwrap_or_default();
                assert_eq!(got.remove(&log).unwrap_or_default(), want, "streamlet {streamlet} log {log}");
            }
            assert!(got.is_empty());
        }
    }

    fn run(ops: Vec<Op>) {
        let store = Store::new(common::small_config(512, false)).unwrap();
        store.create_table(STREAM);
        store.create_table(OBJECTS);
        let shape = StreamShape { streamlets: 2, logs: 3, segment_bytes: 4096, group_segments: 2, group_timeout_ms: 0 };
        store.create_stream(STREAM, shape).unwrap();
        let mut model: HashMap<(u32, u32), Vec<Vec<u8>>> = HashMap::new();
        let mut n = 0u64;
        for op in ops {
            match op {
                Op::Produce { streamlet, producer, lens } => {
                    let batch: Vec<Vec<u8>> = lens
                        .iter()
                        .map(|&len| {
                            n += 1;
                            let mut r = n.to_le_bytes().to_vec();
                            r.resize(8 + len, n as u8);
                            r
                        })
                        .collect();
                    // Records as stored, each with its varint length; the
                    // store's largest value (4 KiB here) bounds a batch.
                    let stored: usize = batch.iter().map(|r| r.len() + if r.len() < 128 { 1 } else { 2 }).sum();
                    match store.produce(STREAM, streamlet, producer, &batch) {
                        Ok(p) => {
                            assert!(stored <= 4096);
                            assert_eq!(p.count as usize, batch.len());
                            model.entry((streamlet, (producer % 3) as u32)).or_default().extend(batch);
                        }
                        Err(StreamError::InvalidBatch(_)) => assert!(stored > 4096),
                        Err(e) => assert_eq!(e, StreamError::OutOfMemory),
                    }
                }
                Op::Write { k, len } => {
                    // Refused when streams fill the memory; nothing changes then.
                    let _ = store.write(OBJECTS, &[k], &vec![k; len], RejectRules::default());
                }
                Op::Clean { combined } => {
                    store.clean_now(1, combined);
                }
                Op::Check => check(&store, &model),
            }
        }
        check(&store, &model);
        let segs = store.log_segments();
        let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
        rebuilt.create_table(STREAM);
        rebuilt.create_stream(STREAM, shape).unwrap();
        rebuilt.replay(segs.iter().rev().map(|s| s.1.as_slice())).unwrap();
        check(&rebuilt, &model);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn streams_match_the_model(ops in prop::collection::vec(op(), 1..250)) {
            run(ops);
        }
    }
}

/// `store`'s log replayed into a fresh store holding stream `STREAM` of
/// `shape`, its segments in order and reversed; each checked.
fn replayed_both_ways(store: &Store, shape: StreamShape) -> Vec<(bool, Store)> {
    let segs = store.log_segments();
    [false, true]
        .into_iter()
        .map(|reversed| {
            let mut s: Vec<&[u8]> = segs.iter().map(|s| s.1.as_slice()).collect();
            if reversed {
                s.reverse();
            }
            let rebuilt = Store::new(common::small_config(2048, false)).unwrap();
            rebuilt.create_table(STREAM);
            rebuilt.create_stream(STREAM, shape).unwrap();
            rebuilt.replay(s).unwrap();
            rebuilt.check_invariants().unwrap();
            (reversed, rebuilt)
        })
        .collect()
}

/// Consumer names' committed offsets (`docs/streams.md`, "Consumer
/// names"): a commit inside a group keeps the name on it; a commit of the
/// end of a closed group moves the name's cursor to its log's next group.
/// The offsets share the streamlet's object with retention's trim point:
/// a trim keeps them, and a replay of the log, in either segment order,
/// brings back both.
#[test]
fn consumer_commits_move_cursors_survive_trims_and_replays() {
    let store = Store::new(common::small_config(1024, false)).unwrap();
    store.create_table(STREAM);
    store.create_stream(STREAM, shape()).unwrap();
    // Producers 0 and 1: logs 0 and 1 of streamlet 0; group 0 fills.
    for i in 0..6u64 {
        store.produce(STREAM, 0, 0, &[record(0, i, 2000)]).unwrap();
    }
    store.produce(STREAM, 0, 1, &[record(1, 0, 10)]).unwrap();
    let groups = store.stream_groups(STREAM, 0, 0, usize::MAX).unwrap();
    let g0 = groups[0];
    assert!(g0.closed && g0.log == 0, "{groups:?}");
    let heads = store.consumer_heads(STREAM, 0, &Default::default()).unwrap();
    let log1 = groups.iter().find(|g| g.log == 1).unwrap().id;
    assert_eq!(heads.iter().map(|h| (h.log, h.group)).collect::<Vec<_>>(), vec![(0, 0), (1, log1)], "{heads:?}");
    assert!(heads[0].closed && heads[0].unread && !heads[1].closed);

    let mid = StreamOffset { group: 0, segment: 0, position: 1 };
    assert!(!store.commit_consumer(STREAM, 0, "a", mid).unwrap().done);
    let cursors = store.consumer_cursors(STREAM, 0, "a").unwrap();
    assert_eq!(cursors[&0], mid);
    assert_eq!(store.consumer_heads(STREAM, 0, &cursors).unwrap()[0].from, mid);
    // The end of closed group 0: done; the name's next group of log 0 is
    // the one after it (not group 1, of log 1).
    let end = StreamOffset { group: 0, segment: g0.segments - 1, position: 0 };
    let end =
        StreamOffset { position: store.consume(STREAM, 0, end, usize::MAX, |_| {}).unwrap().next.position, ..end };
    assert!(store.commit_consumer(STREAM, 0, "a", end).unwrap().done);
    let cursors = store.consumer_cursors(STREAM, 0, "a").unwrap();
    let heads = store.consumer_heads(STREAM, 0, &cursors).unwrap();
    let next0 = groups.iter().find(|g| g.log == 0 && g.id > 0).unwrap().id;
    assert_eq!(heads.iter().map(|h| (h.log, h.group)).collect::<Vec<_>>(), vec![(0, next0), (1, log1)], "{heads:?}");
    assert_eq!(heads[0].from, StreamOffset { group: next0, segment: 0, position: 0 });
    assert!(store.consumer_cursors(STREAM, 0, "b").unwrap().is_empty(), "names are separate");

    // Bad commits change nothing.
    let past = StreamOffset { position: 99, ..mid };
    assert_eq!(store.commit_consumer(STREAM, 0, "a", past), Err(StreamError::InvalidOffset(past)));
    assert!(matches!(store.commit_consumer(STREAM, 0, "", mid), Err(StreamError::Consumers(_))));
    assert!(matches!(store.commit_consumer(STREAM, 0, &"x".repeat(256), mid), Err(StreamError::Consumers(_))));
    for i in 1..shoal_engine::MAX_CONSUMER_NAMES {
        store.commit_consumer(STREAM, 0, &format!("n{i}"), mid).unwrap();
    }
    let e = store.commit_consumer(STREAM, 0, "one-too-many", mid).unwrap_err();
    assert!(e.to_string().contains("maximum of 32 consumer names"), "{e}");
    assert_eq!(store.consumer_cursors(STREAM, 0, "a").unwrap(), cursors);

    // Retention's trim point is written into the same object: the
    // offsets stay, and a replay restores both.
    store.mark_stream_trimmed(STREAM, 0, 1).unwrap();
    store.trim_stream(STREAM, 0, 1).unwrap();
    assert_eq!(store.consumer_cursors(STREAM, 0, "a").unwrap(), cursors);
    let in_next = StreamOffset { group: next0, segment: 0, position: 1 };
    assert!(!store.commit_consumer(STREAM, 0, "a", in_next).unwrap().done);
    let after = store.consumer_cursors(STREAM, 0, "a").unwrap();
    for (reversed, rebuilt) in replayed_both_ways(&store, shape()) {
        assert_eq!(rebuilt.consumer_cursors(STREAM, 0, "a").unwrap(), after, "reversed: {reversed}");
        assert_eq!(rebuilt.stream_trimmed(STREAM, 0).unwrap(), 1);
        assert_eq!(rebuilt.consumer_cursors(STREAM, 0, "n5").unwrap()[&0], mid);
    }
}
