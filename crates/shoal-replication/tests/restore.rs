//! Finding a log among backups: a real store's log (cleaned, so it has
//! survivors and segments that left it) replicated to three real backups,
//! then found again with `restore::find_log` and replayed into a new store.

mod backup_support;

use backup_support::*;
use shoal_engine::{LogId, SegmentId, SegmentKind, Store, TableId};
use shoal_replication::backup::Backup;
use shoal_replication::restore::{self, Floors, RestoreError};
use shoal_replication::wire::{KeyRange, Mode, ReplicaState};
use std::collections::BTreeMap;
use std::net::SocketAddr;

const LOG: LogId = LogId(11);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Three backups on directories of their own (kept as long as the first
/// value lives).
fn three_backups() -> (Vec<tempfile::TempDir>, Vec<Backup>) {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let backups = dirs.iter().map(|d| start(d.path())).collect();
    (dirs, backups)
}

/// An address nobody listens on.
fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A log with survivors, cleaned segments and a head with data: 300 keys
/// written, all overwritten, 50 removed, the cleaner run, more writes.
fn cleaned_log() -> (Store, std::sync::Arc<Recorder>) {
    let (store, rec) = store_with(LOG, 300, 400);
    for i in 0..300 {
        store.write(TableId(1), key(i).as_bytes(), &value(i, 1, 400), Default::default()).unwrap();
    }
    for i in 0..50 {
        store.remove(TableId(1), key(i * 3).as_bytes(), Default::default()).unwrap();
    }
    assert!(store.clean_now(20, false) > 0, "the cleaner should free memory");
    for i in 300..320 {
        store.write(TableId(1), key(i).as_bytes(), &value(i, 0, 400), Default::default()).unwrap();
    }
    assert!(!rec.freed.lock().is_empty(), "some segments left the log");
    assert!(rec.segments.lock().values().any(|s| s.kind == Some(SegmentKind::Survivor)));
    (store, rec)
}

/// The head: the last head segment the log opened.
fn head_of(rec: &Recorder) -> SegmentId {
    let segments = rec.segments.lock();
    *rec.order.lock().iter().rev().find(|s| segments[s].kind == Some(SegmentKind::Head)).unwrap()
}

/// Replicates every recorded segment, in the order the log opened them,
/// to two of the backups (round robin), except where `place` says
/// otherwise: it may return the bytes to send to backup `b` (a prefix) or
/// `None` to skip it.
fn replicate_log(
    backups: &[&Backup],
    rec: &Recorder,
    place: impl Fn(SegmentId, usize, &SegmentRecord) -> Option<SegmentRecord>,
) {
    let mut peers: Vec<Peer> = backups.iter().map(|b| Peer::hello(b.local_addr(), Mode::Tailwind, LOG, 1)).collect();
    let segments = rec.segments.lock().clone();
    for (i, id) in rec.order.lock().iter().enumerate() {
        for k in 0..2 {
            let b = (i + k) % backups.len();
            if let Some(r) = place(*id, b, &segments[id]) {
                replicate(&mut peers[b], *id, &r);
            }
        }
    }
}

/// Keeps the first `n` appends of an open segment.
fn prefix(rec: &SegmentRecord, n: usize) -> SegmentRecord {
    SegmentRecord { kind: rec.kind, appends: rec.appends[..n].to_vec(), closed: None }
}

#[test]
fn find_log_rebuilds_a_cleaned_log_from_the_longest_prefixes() {
    let (store, rec) = cleaned_log();
    let (_dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    let head = head_of(&rec);
    let head_rec = rec.segments.lock()[&head].clone();
    assert!(head_rec.closed.is_none() && head_rec.appends.len() > 3);
    // The head's first replica got everything, its second only a prefix.
    let first_of_head = rec.order.lock().iter().position(|s| *s == head).unwrap() % 3;
    replicate_log(
        &refs,
        &rec,
        |id, b, r| {
            if id == head && b != first_of_head {
                Some(prefix(r, 2))
            } else {
                Some(r.clone())
            }
        },
    );

    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    assert_eq!(found.head, Some(head));
    assert!(found.unreachable.is_empty());
    let members: Vec<SegmentId> = store.log_segments().into_iter().map(|(id, _)| id).collect();
    assert_eq!(found.segments.iter().map(|(id, _)| *id).collect::<Vec<_>>(), members, "exactly the digest's segments");
    let freed = rec.freed.lock().clone();
    assert!(found.segments.iter().all(|(id, _)| !freed.contains(id)));
    let recorded = rec.segments.lock().clone();
    for (id, bytes) in &found.segments {
        assert_eq!(bytes, &recorded[id].bytes(), "segment {id}: the longest verified prefix");
    }
    assert_eq!(found.bytes, found.segments.iter().map(|(_, b)| b.len() as u64).sum::<u64>());

    // Replayed, the found log holds exactly the store's objects.
    let copy = Store::new(store_config(LogId(99))).unwrap();
    copy.replay(found.segments.iter().map(|(_, b)| b.as_slice())).unwrap();
    for i in 0..320 {
        let want = store.read(TableId(1), key(i).as_bytes(), Default::default()).ok();
        let got = copy.read(TableId(1), key(i).as_bytes(), Default::default()).ok();
        assert_eq!(got, want, "key {i}");
    }
}

#[test]
fn find_log_reports_missing_members_and_unreachable_backups() {
    let (store, rec) = cleaned_log();
    let (_dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    let head = head_of(&rec);
    // A closed member of the log that no backup got.
    let lost = store.log_segments().into_iter().map(|(id, _)| id).find(|id| *id != head).unwrap();
    replicate_log(&refs, &rec, |id, _, r| (id != lost).then(|| r.clone()));

    let dead = dead_addr();
    let mut addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    addrs.push(dead);
    match rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())) {
        Err(RestoreError::Incomplete { missing, unreachable }) => {
            assert_eq!(missing, vec![lost]);
            assert_eq!(unreachable, vec![dead]);
        }
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
    // Once the segment turns up (the caller retries), the log is complete.
    let mut p = Peer::hello(backups[2].local_addr(), Mode::Tailwind, LOG, 1);
    replicate(&mut p, lost, &rec.segments.lock()[&lost]);
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    assert!(found.segments.iter().any(|(id, _)| *id == lost));
    assert_eq!(found.unreachable, vec![dead]);
}

#[test]
fn find_log_of_an_empty_log_and_of_a_log_without_head() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let addrs = [backup.local_addr()];
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    assert_eq!((found.head, found.segments.len(), found.bytes), (None, 0, 0));
    // With a backup unreachable, "no replica" proves nothing.
    let dead = dead_addr();
    match rt().block_on(restore::find_log(&[backup.local_addr(), dead], LOG, &Floors::none())) {
        Err(RestoreError::Incomplete { missing, unreachable }) => {
            assert!(missing.is_empty());
            assert_eq!(unreachable, vec![dead]);
        }
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
    // Only a survivor (no digest): data but no head.
    let (_store, rec) = cleaned_log();
    let (&survivor, seg) = rec
        .segments
        .lock()
        .iter()
        .find(|(_, s)| s.kind == Some(SegmentKind::Survivor))
        .map(|(i, s)| (i, s.clone()))
        .unwrap();
    let mut p = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    replicate(&mut p, survivor, &seg);
    match rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())) {
        Err(RestoreError::NoHead { segments }) => assert_eq!(segments, vec![survivor]),
        other => panic!("expected NoHead, got {:?}", other.map(|f| f.head)),
    }
}

#[test]
fn find_log_uses_a_good_replica_when_another_is_corrupt() {
    let (_store, rec) = cleaned_log();
    let (dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    replicate_log(&refs, &rec, |_, _, r| Some(r.clone()));
    for b in &backups {
        wait_stats(b, "flushes", |s| s.awaiting_flush == 0);
    }
    // Flip a bit in the middle of one file of every closed segment.
    let mut flipped = BTreeMap::new();
    for d in &dirs {
        for entry in std::fs::read_dir(d.path().join("backup/segments")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let id = SegmentId(name.split_once('-').unwrap().1.parse().unwrap());
            if flipped.contains_key(&id) {
                continue;
            }
            let mut bytes = std::fs::read(&path).unwrap();
            let mid = 48 + (bytes.len() - 48) / 2;
            bytes[mid] ^= 0x01;
            std::fs::write(&path, &bytes).unwrap();
            flipped.insert(id, path);
        }
    }
    assert!(flipped.len() > 3);
    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    let recorded = rec.segments.lock().clone();
    for (id, bytes) in &found.segments {
        assert_eq!(bytes, &recorded[id].bytes(), "segment {id}");
    }
    // Each flipped copy is refused when read (LIST does not read files).
    for (id, path) in &flipped {
        let i = dirs.iter().position(|d| path.starts_with(d.path())).unwrap();
        assert!(rt().block_on(restore::read_replica(addrs[i], LOG, *id)).is_err(), "segment {id}");
    }
    assert!(backups.iter().map(|b| b.stats().corrupt_replicas).sum::<u64>() >= flipped.len() as u64);

    // Both copies of a member corrupt: that member is missing.
    let (&victim, _) = flipped.iter().find(|(id, _)| found.segments.iter().any(|(s, _)| s == *id)).unwrap();
    for d in &dirs {
        let path = d.path().join(format!("backup/segments/{}-{}.seg", LOG.0, victim.0));
        if let Ok(mut bytes) = std::fs::read(&path) {
            let n = bytes.len();
            bytes[n - 2] ^= 0x40;
            std::fs::write(&path, &bytes).unwrap();
        }
    }
    match rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())) {
        Err(RestoreError::Incomplete { missing, .. }) => assert_eq!(missing, vec![victim]),
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
}

#[test]
fn list_read_and_free_log_through_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let addr = backup.local_addr();
    let (seg, ends) = groups(LOG, SegmentId(4), 5);
    let mut m = Peer::hello(addr, Mode::Tailwind, LOG, 2);
    m.open_ok(SegmentId(4));
    m.data(SegmentId(4), 0, &seg[..ends[3] + 2]);
    m.wait_ack(SegmentId(4), ends[3] as u32 + 2);
    let rt = rt();
    let listed = rt.block_on(restore::list_replicas(addr, LOG)).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].segment, listed[0].len as usize, listed[0].state),
        (SegmentId(4), ends[3], ReplicaState::Open)
    );
    let (info, bytes) = rt.block_on(restore::read_replica(addr, LOG, SegmentId(4))).unwrap();
    assert_eq!(bytes, seg[..ends[3]].to_vec());
    assert_eq!((info.log_version, info.len as usize), (2, ends[3]));
    assert_eq!(info.checksum, shoal_engine::format::scan(&seg[..ends[3]]).last_checksum);
    match rt.block_on(restore::read_replica(addr, LOG, SegmentId(5))) {
        Err(RestoreError::Backup { message, .. }) => assert!(message.contains("no replica")),
        other => panic!("expected an ERROR from the backup, got {:?}", other.map(|r| r.0)),
    }
    rt.block_on(restore::free_log(addr, LOG)).unwrap();
    assert!(rt.block_on(restore::list_replicas(addr, LOG)).unwrap().is_empty());
    assert_eq!(backup.stats().buffers_in_use, 0);
    assert!(matches!(rt.block_on(restore::list_replicas(dead_addr(), LOG)), Err(RestoreError::Io { .. })));
}

/// Reads partition `index` of `ranges` of LOG from `addrs`, collecting what
/// the sink receives.
fn read_part(
    addrs: &[SocketAddr],
    ranges: Vec<KeyRange>,
    index: usize,
) -> (Result<restore::PartitionRead, RestoreError>, Vec<restore::PartSegment>) {
    read_part_with(addrs, &Floors::none(), ranges, index)
}

/// [`read_part`] with replica floors.
fn read_part_with(
    addrs: &[SocketAddr],
    floors: &Floors,
    ranges: Vec<KeyRange>,
    index: usize,
) -> (Result<restore::PartitionRead, RestoreError>, Vec<restore::PartSegment>) {
    rt().block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let reading = restore::read_partition(
            addrs,
            LOG,
            floors,
            std::sync::Arc::new(ranges.into()),
            index,
            restore::FindOptions::default(),
            tx,
        );
        let collecting = async {
            let mut got = Vec::new();
            while let Some(p) = rx.recv().await {
                got.push(p);
            }
            got
        };
        tokio::join!(reading, collecting)
    })
}

/// A new store holding what `parts` replay to.
fn replay_parts(parts: &[restore::PartSegment]) -> Store {
    let copy = Store::new(store_config(LogId(99))).unwrap();
    let mut replay = shoal_engine::Replay::default();
    for p in parts {
        copy.replay_entries(&mut replay, &p.entries, shoal_engine::Version(p.safe_version)).unwrap();
    }
    copy.finish_replay(replay).unwrap();
    copy
}

/// Three key ranges covering all of table 1's hash space.
fn thirds() -> Vec<KeyRange> {
    let third = u64::MAX / 3;
    vec![
        KeyRange::hashes(TableId(1), 0, third),
        KeyRange::hashes(TableId(1), third + 1, 2 * third),
        KeyRange::hashes(TableId(1), 2 * third + 1, u64::MAX),
    ]
}

#[test]
fn read_partition_sends_each_partition_only_its_keys_and_they_replay_to_the_store() {
    let (store, rec) = cleaned_log();
    let (_dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    replicate_log(&refs, &rec, |_, _, r| Some(r.clone()));
    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let members: Vec<SegmentId> = store.log_segments().into_iter().map(|(id, _)| id).collect();
    let log_bytes: u64 = store.log_segments().iter().map(|(_, b)| b.len() as u64).sum();

    let mut entry_bytes = 0;
    for (index, range) in thirds().into_iter().enumerate() {
        let (read, parts) = read_part(&addrs, vec![range], index);
        let read = read.unwrap();
        assert_eq!(read.head, Some(head_of(&rec)));
        assert_eq!(read.segments, members.len());
        let mut got: Vec<SegmentId> = parts.iter().map(|p| p.segment).collect();
        got.sort();
        assert_eq!(got, members, "one answer per segment of the log");
        assert_eq!(read.replica_bytes, log_bytes);
        assert_eq!(read.entry_bytes, parts.iter().map(|p| p.entries.len() as u64).sum::<u64>());
        entry_bytes += read.entry_bytes;

        // Replayed, the partition holds exactly the store's objects in its range.
        let copy = replay_parts(&parts);
        assert!(copy.safe_version() >= store.safe_version());
        let mut mine = 0;
        for i in 0..320 {
            let k = key(i);
            let got = copy.read(TableId(1), k.as_bytes(), Default::default()).ok();
            if range.contains(TableId(1), shoal_engine::key_hash(TableId(1), k.as_bytes()).0) {
                let want = store.read(TableId(1), k.as_bytes(), Default::default()).ok();
                mine += want.is_some() as u32;
                assert_eq!(got, want, "key {i} in partition {index}");
            } else {
                assert_eq!(got, None, "key {i} is not partition {index}'s");
            }
        }
        assert!(mine > 50, "partition {index} holds {mine} keys");
    }
    // Every entry crossed once: the partitions together got less than the
    // log (headers, digests, checksums and dead entries of cleaned-out
    // segments are not sent).
    assert!(entry_bytes > 0 && entry_bytes < log_bytes, "{entry_bytes} of {log_bytes}");
}

#[test]
fn read_partition_reads_nothing_from_an_incomplete_log_and_survives_a_corrupt_replica() {
    let (store, rec) = cleaned_log();
    let (_dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    let head = head_of(&rec);
    let lost = store.log_segments().into_iter().map(|(id, _)| id).find(|id| *id != head).unwrap();
    replicate_log(&refs, &rec, |id, _, r| (id != lost).then(|| r.clone()));
    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let all = KeyRange::hashes(TableId(1), 0, u64::MAX);

    let (read, parts) = read_part(&addrs, vec![all], 0);
    match read {
        Err(RestoreError::Incomplete { missing, .. }) => assert_eq!(missing, vec![lost]),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert!(parts.is_empty(), "nothing is sent before the whole log is known to be there");

    // The lost segment turns up on two backups, one copy of it damaged: the
    // reader falls back to the good one whichever it asks first.
    let recorded = rec.segments.lock()[&lost].clone();
    let mut damaged = recorded.clone();
    let bytes = &mut damaged.appends.last_mut().unwrap().1;
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let mut p = Peer::hello(backups[0].local_addr(), Mode::Tailwind, LOG, 1);
    replicate(&mut p, lost, &damaged);
    let mut p = Peer::hello(backups[1].local_addr(), Mode::Tailwind, LOG, 1);
    replicate(&mut p, lost, &recorded);
    for spread in 0..2 {
        let (read, parts) = read_part(&addrs, vec![all], spread);
        let read = read.unwrap();
        assert_eq!(parts.len(), read.segments);
        let copy = replay_parts(&parts);
        for i in 0..320 {
            let k = key(i);
            let want = store.read(TableId(1), k.as_bytes(), Default::default()).ok();
            assert_eq!(copy.read(TableId(1), k.as_bytes(), Default::default()).ok(), want, "key {i}");
        }
    }
}

/// Replicas below their segment's floor are stale and never used, even
/// when they hold more than the current ones: the head's stale replica
/// (epoch 1, left behind by a lost backup) holds all of it, the current one
/// (epoch 2) only a prefix, and with the floor the prefix is what is found
/// and read. With only stale replicas of a member, or of the head, the log
/// is `Incomplete`: never a fallback to the stale ones, nor to an older head.
#[test]
fn stale_replicas_below_their_floor_are_never_used() {
    let (store, rec) = cleaned_log();
    let (_dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let head = head_of(&rec);
    let members: Vec<SegmentId> = store.log_segments().into_iter().map(|(id, _)| id).collect();
    let member = *members.iter().find(|id| **id != head).unwrap();
    replicate_log(&refs, &rec, |id, _, r| (id != head && id != member).then(|| r.clone()));
    let segments = rec.segments.lock().clone();
    let full = segments[&head].bytes();
    let current = prefix(&segments[&head], 2);
    assert!(current.bytes().len() < full.len());
    let mut peers: Vec<Peer> = addrs.iter().map(|a| Peer::hello(*a, Mode::Tailwind, LOG, 1)).collect();
    replicate_at(&mut peers[0], head, &segments[&head], 1);
    replicate_at(&mut peers[1], head, &current, 2);
    replicate_at(&mut peers[2], member, &segments[&member], 1);
    let head_bytes = |found: &restore::FoundLog| found.segments.iter().find(|(id, _)| *id == head).unwrap().1.clone();

    // Without floors the stale replica is the longest prefix, and is used.
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    assert_eq!(head_bytes(&found), full);
    // The head's floor at 2: its current replica, shorter, is what counts.
    let floors: Floors = [(head, 2)].into_iter().collect();
    assert_eq!((floors.of(head), floors.of(member)), (2, 1));
    let found = rt().block_on(restore::find_log(&addrs, LOG, &floors)).unwrap();
    assert_eq!(found.head, Some(head));
    assert_eq!(head_bytes(&found), current.bytes());
    assert_eq!(found.segments.len(), members.len());
    let all = KeyRange::hashes(TableId(1), 0, u64::MAX);
    let (read, parts) = read_part_with(&addrs, &floors, vec![all], 0);
    assert_eq!(read.unwrap().segments, members.len());
    let head_part = parts.iter().find(|p| p.segment == head).unwrap();
    assert_eq!(head_part.replica_len as usize, current.bytes().len());

    // The member's floor at 2 too: its only replica is stale.
    let floors: Floors = [(head, 2), (member, 2)].into_iter().collect();
    match rt().block_on(restore::find_log(&addrs, LOG, &floors)) {
        Err(RestoreError::Incomplete { missing, .. }) => assert_eq!(missing, vec![member]),
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
    let (read, parts) = read_part_with(&addrs, &floors, vec![all], 0);
    match read {
        Err(RestoreError::Incomplete { missing, .. }) => assert_eq!(missing, vec![member]),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert!(parts.is_empty(), "nothing read from an incomplete log");

    // The head's current replica is lost too: only the stale one is left,
    // and an older head (any earlier segment with a digest) is no answer.
    peers[1].free(head);
    wait_for("the FREE", || list(addrs[1], LOG).iter().all(|r| r.segment != head));
    let floors: Floors = [(head, 2)].into_iter().collect();
    match rt().block_on(restore::find_log(&addrs, LOG, &floors)) {
        Err(RestoreError::Incomplete { missing, .. }) => assert_eq!(missing, vec![head]),
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
    let (read, parts) = read_part_with(&addrs, &floors, vec![all], 0);
    assert!(matches!(read, Err(RestoreError::Incomplete { ref missing, .. }) if *missing == vec![head]), "{read:?}");
    assert!(parts.is_empty());
}

/// The "older head" case (`docs/recovery.md`, "Head floors"): every replica
/// of the newest head is out of sight, an older head (closed, with its own
/// digest) is not. Without a head floor the log is found short, from that
/// older head; with the floor at the newest head, it is `Incomplete` and
/// nothing is read. A floor at or below the older head changes nothing.
#[test]
fn a_head_below_the_head_floor_is_never_taken() {
    let (_store, rec) = cleaned_log();
    let (_dirs, backups) = three_backups();
    let refs: Vec<&Backup> = backups.iter().collect();
    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let head = head_of(&rec);
    let older = {
        let segments = rec.segments.lock();
        let order = rec.order.lock();
        *order.iter().rev().find(|s| **s != head && segments[s].kind == Some(SegmentKind::Head)).unwrap()
    };
    assert!(older < head);
    replicate_log(&refs, &rec, |id, _, r| (id != head).then(|| r.clone()));
    let all = KeyRange::hashes(TableId(1), 0, u64::MAX);

    // Without a floor: the older head is taken, and the log found short.
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    assert_eq!(found.head, Some(older), "the gap the head floor closes");
    let (read, _) = read_part_with(&addrs, &Floors::none(), vec![all], 0);
    assert_eq!(read.unwrap().head, Some(older));

    // A floor at the older head, or below: the same.
    for floor in [SegmentId(1), older] {
        let floors = Floors::none().with_head(floor);
        let found = rt().block_on(restore::find_log(&addrs, LOG, &floors)).unwrap();
        assert_eq!(found.head, Some(older));
    }

    // The floor at the newest head: wait for it, read nothing.
    let floors = Floors::none().with_head(head);
    match rt().block_on(restore::find_log(&addrs, LOG, &floors)) {
        Err(RestoreError::Incomplete { missing, unreachable }) => {
            assert_eq!(missing, vec![head]);
            assert!(unreachable.is_empty());
        }
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
    let (read, parts) = read_part_with(&addrs, &floors, vec![all], 0);
    assert!(matches!(read, Err(RestoreError::Incomplete { ref missing, .. }) if *missing == vec![head]), "{read:?}");
    assert!(parts.is_empty(), "nothing read below the floor");

    // The newest head comes into sight: found whole, from it.
    let mut peer = Peer::hello(addrs[0], Mode::Tailwind, LOG, 1);
    replicate(&mut peer, head, &rec.segments.lock()[&head]);
    let found = rt().block_on(restore::find_log(&addrs, LOG, &floors)).unwrap();
    assert_eq!(found.head, Some(head));
}

/// A log with a head floor but no replica anywhere, every backup
/// answering, is not empty: its head, holding acknowledged writes, is on
/// backups out of sight.
#[test]
fn a_log_with_a_head_floor_and_no_replica_is_incomplete() {
    let (_dirs, backups) = three_backups();
    let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
    let found = rt().block_on(restore::find_log(&addrs, LOG, &Floors::none())).unwrap();
    assert_eq!(found.head, None, "no floor: an empty log");
    let floors = Floors::none().with_head(SegmentId(4));
    match rt().block_on(restore::find_log(&addrs, LOG, &floors)) {
        Err(RestoreError::Incomplete { missing, .. }) => assert_eq!(missing, vec![SegmentId(4)]),
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.head)),
    }
    let (read, _) = read_part_with(&addrs, &floors, vec![KeyRange::hashes(TableId(1), 0, u64::MAX)], 0);
    assert!(matches!(read, Err(RestoreError::Incomplete { .. })), "{read:?}");
}
