//! Streams on a real cluster (see `common`, `docs/streams.md`): producers
//! append sequence-numbered records under a load, keeping a ledger of each
//! acknowledged batch and its offset; then the master of a streamlet is
//! SIGKILLed (or the whole cluster is, and restarted on the same
//! directories). Afterwards every acknowledged record is read at its
//! offset, each producer's records come in order with none twice, and
//! producing goes on in new groups.

mod common;

use common::*;
use shoal_client::blocking::Client;
use shoal_client::{key_hash, streamlet_key, ClientConfig, StreamOffset, StreamShape, Subscriber, TableId};
use shoal_cluster::{ClusterMap, ServerState};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHAPE: StreamShape =
    StreamShape { streamlets: 4, logs: 2, segment_bytes: 16 << 10, group_segments: 2, group_timeout_ms: 0 };

/// (producer, sequence number) of each acknowledged record, by streamlet
/// and offset.
type Ledger = Arc<Mutex<BTreeMap<(u32, StreamOffset), (u64, u64)>>>;

fn record(producer: u64, seq: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(16 + 40);
    r.extend_from_slice(&producer.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.resize(16 + (seq % 40) as usize, b'x');
    r
}

fn parse(r: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(r[..8].try_into().unwrap()), u64::from_le_bytes(r[8..16].try_into().unwrap()))
}

/// Producer threads: producer `p` appends batches of 1-20 records to
/// streamlet `p % 4`. A batch whose outcome is unknown (an error) is not
/// sent again: the producer goes on with new sequence numbers, so no
/// record can be appended twice.
struct StreamLoad {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
    ledger: Ledger,
    acks: Arc<AtomicU64>,
}

impl StreamLoad {
    fn start(coordinator: SocketAddr, table: TableId, producers: u64) -> StreamLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::default();
        let acks = Arc::new(AtomicU64::new(0));
        let handles = (0..producers)
            .map(|p| {
                let (stop, ledger, acks) = (stop.clone(), ledger.clone(), acks.clone());
                std::thread::spawn(move || {
                    let config = ClientConfig::default();
                    let mut c = Client::connect_cluster(coordinator, config.clone()).unwrap();
                    let streamlet = (p % SHAPE.streamlets as u64) as u32;
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) && seq < 10_000_000 {
                        let n = 1 + seq % 20;
                        let batch: Vec<Vec<u8>> = (seq..seq + n).map(|s| record(p, s)).collect();
                        let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                        match c.produce(table, streamlet, p, &refs) {
                            Ok(at) => {
                                let mut l = ledger.lock().unwrap();
                                for i in 0..n {
                                    let o = StreamOffset { position: at.first.position + i as u32, ..at.first };
                                    assert!(l.insert((streamlet, o), (p, seq + i)).is_none(), "offset {o} twice");
                                }
                                acks.fetch_add(n, Ordering::Relaxed);
                            }
                            Err(_) => {
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(5));
                                if let Ok(fresh) = Client::connect_cluster(coordinator, config.clone()) {
                                    c = fresh;
                                }
                            }
                        }
                        seq += n;
                    }
                })
            })
            .collect();
        StreamLoad { stop, handles, ledger, acks }
    }

    fn acks(&self) -> u64 {
        self.acks.load(Ordering::Relaxed)
    }

    fn finish(self) -> BTreeMap<(u32, StreamOffset), (u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
        let ledger = self.ledger.lock().unwrap().clone();
        ledger
    }
}

/// Every record of a streamlet with its offset: each log's groups in id
/// order, each read to its end.
fn read_streamlet(c: &mut Client, table: TableId, streamlet: u32) -> Vec<(StreamOffset, Vec<u8>)> {
    read_streamlet_from(c, table, streamlet).1
}

/// [`read_streamlet`], with the first group it read from. Retention may
/// remove a group between the listing and its read (it runs every second,
/// on its own): then the read starts again from a fresh listing.
fn read_streamlet_from(c: &mut Client, table: TableId, streamlet: u32) -> (u64, Vec<(StreamOffset, Vec<u8>)>) {
    let mut attempts = 0;
    'again: loop {
        attempts += 1;
        let d = c.describe_stream(table, streamlet, 0, 10_000).unwrap();
        let first = d.groups.iter().map(|g| g.id).min().unwrap_or(u64::MAX);
        let mut by_log: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for g in &d.groups {
            by_log.entry(g.log).or_default().push(g.id);
        }
        let mut out = Vec::new();
        for ids in by_log.values() {
            for &id in ids {
                let mut at = StreamOffset { group: id, segment: 0, position: 0 };
                loop {
                    let got = match c.consume(table, streamlet, at, 64 << 10) {
                        Ok(got) => got,
                        Err(e) if attempts < 20 && e.to_string().contains("removed by retention") => {
                            std::thread::sleep(Duration::from_millis(50));
                            continue 'again;
                        }
                        Err(e) => panic!("streamlet {streamlet} at {at}: {e}"),
                    };
                    let n = got.records.len() as u32;
                    for (i, r) in got.records.into_iter().enumerate() {
                        out.push((StreamOffset { position: got.next.position - n + i as u32, ..got.next }, r));
                    }
                    if n == 0 {
                        break;
                    }
                    at = got.next;
                }
            }
        }
        return (first, out);
    }
}

/// Every acknowledged record is at its offset; each producer's records
/// come in increasing sequence order (so none twice).
fn check_ledger(c: &mut Client, table: TableId, ledger: &BTreeMap<(u32, StreamOffset), (u64, u64)>) {
    let mut found = 0;
    for streamlet in 0..SHAPE.streamlets {
        let records = read_streamlet(c, table, streamlet);
        let mut last: HashMap<u64, u64> = HashMap::new();
        let at: HashMap<StreamOffset, (u64, u64)> = records.iter().map(|(o, r)| (*o, parse(r))).collect();
        for (_, r) in &records {
            let (p, seq) = parse(r);
            if let Some(prev) = last.insert(p, seq) {
                assert!(seq > prev, "streamlet {streamlet}: producer {p}'s record {seq} after {prev}");
            }
        }
        for ((s, o), want) in ledger.range((streamlet, StreamOffset::default())..) {
            if *s != streamlet {
                break;
            }
            assert_eq!(at.get(o), Some(want), "streamlet {streamlet} offset {o}: acknowledged {want:?}");
            found += 1;
        }
    }
    assert_eq!(found, ledger.len());
}

fn wait_map(cluster: &Cluster, what: &str, secs: u64, f: impl Fn(&ClusterMap) -> bool) -> ClusterMap {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(m) = cluster.map() {
            if f(&m) {
                return m;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; logs under {}", cluster.root.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILLs server `victim` of `cluster` (started under `root`) and waits
/// until the coordinator has recovered all its tablets; the map then.
fn kill_and_recover(cluster: &mut Cluster, root: &Root, victim: shoal_cluster::ServerId) -> ClusterMap {
    let idx = (0..cluster.servers.len())
        .find(|i| {
            std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id")))
                .is_ok_and(|s| s.trim() == victim.0.to_string())
        })
        .unwrap();
    cluster.servers[idx].kill().unwrap();
    cluster.servers[idx].wait().unwrap();
    wait_map(cluster, "the recovery", 30, |m| {
        m.server(victim).is_some_and(|s| s.state == ServerState::Down)
            && m.recoveries.is_empty()
            && m.tablets.iter().all(|t| t.master != victim)
    })
}

/// The master of `streamlet`: that of the tablet holding its key's hash.
fn streamlet_master(map: &ClusterMap, table: TableId, streamlet: u32) -> shoal_cluster::ServerId {
    let h = key_hash(table, &streamlet_key(streamlet)).0;
    let t = map.tablets.iter().find(|t| t.table == table && t.start_hash <= h && h <= t.end_hash);
    t.unwrap_or_else(|| panic!("no tablet of stream {table} holds streamlet {streamlet}: {map:?}")).master
}

#[test]
fn a_killed_streamlet_master_is_recovered_and_every_acknowledged_record_is_read_at_its_offset() {
    let root = Root::new("streams-kill-master");
    // Four servers: with one dead, each master still has two backups for R=2.
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let (table, shape) = cluster.client().create_stream("events", SHAPE).unwrap();
    assert_eq!(shape, SHAPE);
    let map =
        wait_map(&cluster, "the stream", 10, |m| m.tables.iter().any(|t| t.id == table && t.stream == Some(SHAPE)));
    // The stream's streamlets are spread over the servers' tablets.
    let masters: std::collections::BTreeSet<_> =
        (0..SHAPE.streamlets).map(|s| streamlet_master(&map, table, s)).collect();
    assert_eq!(map.tablets.iter().filter(|t| t.table == table).count(), 4, "one tablet per server");
    // (Deterministic: the stream's id and the streamlets' keys fix it.)
    assert!(masters.len() >= 2, "the 4 streamlets land on {} master(s)", masters.len());
    let victim = streamlet_master(&map, table, 0);
    let load = StreamLoad::start(cluster.coordinator, table, 8);
    std::thread::sleep(Duration::from_secs(2));
    let before = load.acks();
    assert!(before > 500, "only {before} records acknowledged before the kill");
    let map = kill_and_recover(&mut cluster, &root, victim);
    assert_ne!(streamlet_master(&map, table, 0), victim);
    // Producing goes on at the new master.
    let after_recovery = load.acks();
    let deadline = Instant::now() + Duration::from_secs(10);
    while load.acks() < after_recovery + 200 {
        assert!(Instant::now() < deadline, "no produce acknowledged after the recovery");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ledger = load.finish();
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    cluster.kill_all();
}

#[test]
fn whole_cluster_sigkill_and_restart_keeps_every_acknowledged_record() {
    let root = Root::new("streams-restart");
    let mut cluster = Cluster::start(&root.0, 3, 2, 0);
    let port = cluster.coordinator.port();
    let (table, _) = cluster.client().create_stream("events", SHAPE).unwrap();
    let load = StreamLoad::start(cluster.coordinator, table, 3);
    std::thread::sleep(Duration::from_secs(2));
    cluster.kill_all();
    let ledger = load.finish();
    assert!(ledger.len() > 500, "only {} records acknowledged", ledger.len());
    let mut again = Cluster::start(&root.0, 3, 2, port);
    let mut c = again.client();
    check_ledger(&mut c, table, &ledger);
    let p = c.produce(table, 0, 0, &[b"after the restart"]).unwrap();
    let groups = c.describe_stream(table, 0, 0, 10_000).unwrap().groups;
    assert_eq!(p.first.group, groups.last().unwrap().id, "a new group after every recovered one");
    again.kill_all();
}

/// Retention on a cluster (`--stream-retention-bytes`), then the master of
/// a streamlet SIGKILLed: its recovery brings back no group that retention
/// had removed (the trim point is replicated and replayed with the
/// batches), and every acknowledged record of the groups kept is at its
/// offset.
#[test]
fn retention_survives_the_recovery_of_a_killed_streamlet_master() {
    let root = Root::new("streams-retention-kill");
    let mut cluster = Cluster::start_with(&root.0, 4, 2, 0, &["--stream-retention-bytes", "128KiB"]);
    let (table, _) = cluster.client().create_stream("events", SHAPE).unwrap();
    let map =
        wait_map(&cluster, "the stream", 10, |m| m.tables.iter().any(|t| t.id == table && t.stream == Some(SHAPE)));
    let victim = streamlet_master(&map, table, 0);
    let load = StreamLoad::start(cluster.coordinator, table, 8);
    let mut c = cluster.client();
    // Until retention has removed groups of streamlet 0.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first_before = loop {
        let groups = c.describe_stream(table, 0, 0, 10_000).unwrap().groups;
        if groups.first().is_some_and(|g| g.id > 2) {
            break groups[0].id;
        }
        assert!(Instant::now() < deadline, "retention removed nothing of streamlet 0 ({} groups)", groups.len());
        std::thread::sleep(Duration::from_millis(100));
    };
    kill_and_recover(&mut cluster, &root, victim);
    let ledger = load.finish();
    let mut c = cluster.client();
    for streamlet in 0..SHAPE.streamlets {
        // The first group of the read: retention may still remove groups
        // while it runs (it does not stop with the load).
        let (first, records) = read_streamlet_from(&mut c, table, streamlet);
        if streamlet == 0 {
            assert!(first >= first_before, "group {first} came back (retention had removed below {first_before})");
        }
        let kept: HashMap<StreamOffset, (u64, u64)> = records.iter().map(|(o, r)| (*o, parse(r))).collect();
        let mut checked = 0;
        for ((s, o), want) in &ledger {
            if *s == streamlet && o.group >= first {
                assert_eq!(kept.get(o), Some(want), "streamlet {streamlet} offset {o}: acknowledged {want:?}");
                checked += 1;
            }
        }
        assert!(checked > 0, "streamlet {streamlet}: no acknowledged record kept");
    }
    cluster.kill_all();
}

/// Reads what instance `who` of a consumer name can claim in its streamlet
/// (every group, one at a time, each to what it holds now), committing
/// after each read, until `want` records are read or nothing is left:
/// the records read, and the offset each claim started at.
fn read_as_name(c: &mut Client, who: Subscriber<'_>, want: usize) -> (Vec<(StreamOffset, Vec<u8>)>, Vec<StreamOffset>) {
    let (mut out, mut claims) = (Vec::new(), Vec::new());
    while out.len() < want {
        let Some(claim) = c.claim_group(who).unwrap() else { break };
        claims.push(claim.from);
        let mut at = claim.from;
        loop {
            let got = c.consume_claimed(who, at, 1024).unwrap();
            let n = got.records.len() as u32;
            for (i, r) in got.records.into_iter().enumerate() {
                out.push((StreamOffset { position: got.next.position - n + i as u32, ..got.next }, r));
            }
            at = got.next;
            let nothing = n == 0 && !got.end_of_group;
            if c.commit_group(who, at, nothing).unwrap() || nothing || out.len() >= want {
                break;
            }
        }
        if claims.len() > 1 && claims[claims.len() - 2] == claim.from {
            break;
        }
    }
    (out, claims)
}

/// Consumer names' offsets are durable (`docs/streams.md`, "Consumer
/// names"): an instance reads part of streamlet 0 and commits; its master
/// is SIGKILLed; after the recovery the instance's lease is gone (leases
/// are not logged), and a new instance of the name claims from the
/// committed offset and reads the rest: together, every record once, in
/// order.
#[test]
fn consumer_offsets_survive_the_recovery_of_a_killed_streamlet_master() {
    let root = Root::new("streams-consumer-kill");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let (table, _) = cluster.client().create_stream("events", SHAPE).unwrap();
    let map =
        wait_map(&cluster, "the stream", 10, |m| m.tables.iter().any(|t| t.id == table && t.stream == Some(SHAPE)));
    let victim = streamlet_master(&map, table, 0);
    let mut c = cluster.client();
    const RECORDS: u64 = 3000;
    for batch in 0..RECORDS / 50 {
        let records: Vec<Vec<u8>> = (batch * 50..(batch + 1) * 50).map(|q| record(0, q)).collect();
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        c.produce(table, 0, 0, &refs).unwrap();
    }
    assert!(c.describe_stream(table, 0, 0, 100).unwrap().groups.len() >= 2, "several groups");
    let first = Subscriber { table, streamlet: 0, name: "audit", instance: 1, lease_ms: 30_000 };
    let (before, _) = read_as_name(&mut c, first, 1700);
    assert!(before.len() >= 1700, "{}", before.len());
    let committed = before.last().map(|(o, _)| StreamOffset { position: o.position + 1, ..*o }).unwrap();

    let map = kill_and_recover(&mut cluster, &root, victim);
    assert_ne!(streamlet_master(&map, table, 0), victim);
    let mut c = cluster.client();
    assert!(
        matches!(c.consume_claimed(first, committed, 1024), Err(shoal_client::StreamError::NotHeld)),
        "leases are not logged: the new master holds none"
    );
    let second = Subscriber { instance: 2, ..first };
    let (after, claims) = read_as_name(&mut c, second, usize::MAX);
    // At the committed offset, or (when the last read reached the end of a
    // closed group, which the commit then marked done) at the start of the
    // log's next group: every group here is producer 0's, in log 0.
    let next_group = StreamOffset { group: committed.group + 1, segment: 0, position: 0 };
    assert!(claims[0] == committed || claims[0] == next_group, "{:?} after a commit of {committed}", claims[0]);
    let seqs: Vec<u64> = before.iter().chain(&after).map(|(_, r)| parse(r).1).collect();
    assert_eq!(seqs, (0..RECORDS).collect::<Vec<_>>(), "every record once, in order");
    cluster.kill_all();
}
