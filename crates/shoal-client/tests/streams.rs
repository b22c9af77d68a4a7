//! Streams end to end against an in-process server (`docs/streams.md`):
//! many producers with per-producer sequence numbers, batching and
//! pipelining, while consumers read every streamlet; every consumer sees
//! each producer's records in order, and every acknowledged record exactly
//! once. Instances of one consumer name split the groups (KerA's rule).
//! Refusals come back as clear errors.

use shoal_client::*;
use shoal_server::{ByteSize, Server, ServerConfig};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn start() -> (Server, SocketAddr) {
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(256 << 20),
        log_level: "warn".into(),
        stream_logs: 3,
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

fn record(producer: u64, seq: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(16 + (seq % 50) as usize);
    r.extend_from_slice(&producer.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.resize(16 + (seq % 50) as usize, 0xab);
    r
}

fn parse(r: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(r[..8].try_into().unwrap()), u64::from_le_bytes(r[8..16].try_into().unwrap()))
}

const PRODUCERS: u64 = 6;
const RECORDS: u64 = 3000;
const STREAMLETS: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_are_read_in_order_and_every_acknowledged_record_exactly_once() {
    let (_server, addr) = start();
    let client = Client::connect(addr).await.unwrap();
    let asked =
        StreamShape { streamlets: STREAMLETS, logs: 0, segment_bytes: 8192, group_segments: 2, group_timeout_ms: 0 };
    let (table, shape) = client.create_stream("events", asked).await.unwrap();
    assert_eq!(shape, StreamShape { logs: 3, ..asked }, "the server's --stream-logs filled in");
    assert_eq!(client.create_stream("events", asked).await.unwrap(), (table, shape), "created again: the same");

    let done = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..STREAMLETS)
        .map(|s| {
            let (client, done) = (client.clone(), done.clone());
            tokio::spawn(async move {
                let mut c = Consumer::new(client, table, s, 4096);
                let mut got = Vec::new();
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let batch = c.poll().await.unwrap();
                    if batch.is_empty() {
                        if finished {
                            return got;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    got.extend(batch.iter().map(|r| parse(r)));
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let client = client.clone();
            tokio::spawn(async move {
                let config = ProducerConfig {
                    id: p,
                    batch_bytes: 700 + 300 * p as usize,
                    linger: Duration::from_millis(2),
                    max_in_flight: 4,
                    // Half by key (one streamlet each), half round robin.
                    routing: if p % 2 == 0 { Routing::ByKey } else { Routing::RoundRobin },
                };
                let producer = Producer::new(client, table, shape, config);
                let key = p.to_le_bytes();
                let mut acks = Vec::new();
                for seq in 0..RECORDS {
                    acks.push((seq, producer.send(Some(&key), record(p, seq)).await));
                }
                producer.flush().await;
                let mut acked = Vec::new();
                for (seq, ack) in acks {
                    let (s, at) = ack.wait().await.expect("acknowledged");
                    acked.push((s, at, seq));
                }
                acked
            })
        })
        .collect();
    let mut acked: HashMap<(u64, u64), (u32, StreamOffset)> = HashMap::new();
    for (p, t) in producers.into_iter().enumerate() {
        for (s, at, seq) in t.await.unwrap() {
            assert!(acked.insert((p as u64, seq), (s, at)).is_none());
        }
    }
    done.store(true, Ordering::Release);
    let mut seen = BTreeSet::new();
    for (s, t) in consumers.into_iter().enumerate() {
        let got = t.await.unwrap();
        // Each producer's records in this streamlet come in increasing order.
        let mut last: HashMap<u64, u64> = HashMap::new();
        for &(p, seq) in &got {
            if let Some(prev) = last.insert(p, seq) {
                assert!(seq > prev, "streamlet {s}: producer {p}'s record {seq} after {prev}");
            }
            assert!(seen.insert((p, seq)), "record ({p}, {seq}) read twice");
            assert_eq!(acked[&(p, seq)].0, s as u32, "read in the streamlet it was acknowledged in");
        }
    }
    assert_eq!(seen.len() as u64, PRODUCERS * RECORDS, "every acknowledged record read");
    // Producers by key stayed in one streamlet; offsets of one producer's
    // records in one streamlet's log grow with its sequence numbers.
    for p in (0..PRODUCERS).step_by(2) {
        let streamlets: BTreeSet<u32> = (0..RECORDS).map(|seq| acked[&(p, seq)].0).collect();
        assert_eq!(streamlets.len(), 1);
        let offsets: Vec<StreamOffset> = (0..RECORDS).map(|seq| acked[&(p, seq)].1).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "producer {p}'s offsets grow");
    }
    // The groups: several per streamlet, at most 2 segments each, at most
    // one open per log.
    for s in 0..STREAMLETS {
        let d = client.describe_stream(table, s, 0, 1000).await.unwrap();
        assert_eq!(d.shape, shape);
        assert!(d.groups.len() > 2, "streamlet {s}: {:?}", d.groups);
        assert!(d.groups.iter().all(|g| g.segments <= 2 && g.log < 3));
        let open: Vec<u32> = d.groups.iter().filter(|g| !g.closed).map(|g| g.log).collect();
        assert_eq!(open.len(), open.iter().collect::<BTreeSet<_>>().len(), "one open group per log");
    }
}

#[tokio::test]
async fn refusals_are_clear_errors() {
    let (_server, addr) = start();
    let client = Client::connect(addr).await.unwrap();
    let shape = StreamShape { streamlets: 2, logs: 1, segment_bytes: 4096, group_segments: 1, group_timeout_ms: 0 };
    let (table, _) = client.create_stream("s", shape).await.unwrap();
    let kv = client.create_table("kv").await.unwrap();
    let invalid = |e: StreamError, says: &str| match e {
        StreamError::Invalid(why) => assert!(why.contains(says), "{why:?} does not say {says:?}"),
        e => panic!("{e:?} is not a refusal saying {says:?}"),
    };
    invalid(client.produce(kv, 0, 1, &[b"x"]).await.unwrap_err(), "not a stream");
    invalid(client.produce(table, 2, 1, &[b"x"]).await.unwrap_err(), "streamlet 2 does not exist");
    let big = vec![0u8; 2 << 20];
    assert!(client.produce(table, 0, 1, &[&big]).await.is_err(), "a batch over the largest value is refused");
    invalid(
        client.consume(table, 0, StreamOffset { group: 5, segment: 0, position: 0 }, 100).await.unwrap_err(),
        "group 5",
    );
    assert!(matches!(client.produce(TableId(999), 0, 1, &[b"x"]).await, Err(StreamError::UnknownTable(TableId(999)))));
    invalid(client.create_stream("s", StreamShape { streamlets: 3, ..shape }).await.unwrap_err(), "another kind");
    invalid(client.create_stream("kv", shape).await.unwrap_err(), "another kind");
    invalid(client.create_stream("z", StreamShape { streamlets: 0, ..shape }).await.unwrap_err(), "streamlets");
    // Object requests on a stream are refused too.
    assert!(client.write(table, b"k", b"v").await.is_err());
    // A record larger than max_bytes comes alone; offsets then move on.
    let p = client.produce(table, 0, 1, &[&[7u8; 3000], b"small"]).await.unwrap();
    let c = client.consume(table, 0, p.first, 10).await.unwrap();
    assert_eq!((c.records.len(), c.records[0].len(), c.next.position), (1, 3000, 1));
    let c = client.consume(table, 0, c.next, 10).await.unwrap();
    assert_eq!(c.records, vec![b"small".to_vec()]);

    // Consumer names: a read or commit by an instance without the group's
    // lease is refused; bad names, instances and streamlets too.
    let who = Subscriber { table, streamlet: 0, name: "n", instance: 1, lease_ms: 5000 };
    let other = Subscriber { instance: 2, ..who };
    let claim = client.claim_group(who).await.unwrap().expect("a group");
    assert_eq!(claim.from, StreamOffset { group: p.first.group, segment: 0, position: 0 });
    assert!(matches!(client.consume_claimed(other, claim.from, 100).await, Err(StreamError::NotHeld)));
    assert!(matches!(client.commit_group(other, claim.from, false).await, Err(StreamError::NotHeld)));
    assert_eq!(client.consume_claimed(who, claim.from, 10).await.unwrap().records.len(), 1);
    assert_eq!(client.claim_group(other).await.unwrap(), None, "the one log's group is held");
    invalid(client.claim_group(Subscriber { name: "", ..who }).await.unwrap_err(), "1-255 bytes");
    invalid(client.claim_group(Subscriber { instance: 0, ..who }).await.unwrap_err(), "instance id 0");
    invalid(client.claim_group(Subscriber { lease_ms: 0, ..who }).await.unwrap_err(), "at least 1 ms");
    invalid(client.claim_group(Subscriber { streamlet: 9, ..who }).await.unwrap_err(), "streamlet 9 does not exist");
    invalid(client.claim_group(Subscriber { table: kv, ..who }).await.unwrap_err(), "not a stream");
    let past = StreamOffset { position: 99, ..claim.from };
    invalid(client.commit_group(who, past, false).await.unwrap_err(), "past the end of its group");
    assert!(!client.commit_group(who, StreamOffset { position: 1, ..claim.from }, true).await.unwrap());
    assert!(matches!(client.consume_claimed(who, claim.from, 10).await, Err(StreamError::NotHeld)), "released");
    let again = client.claim_group(other).await.unwrap().expect("released: free again");
    assert_eq!(again.from, StreamOffset { position: 1, ..claim.from }, "from the commit");
}

/// A consumer commits its offsets to a key-value table; one restarted from
/// them reads exactly the records it had not read, and one with nothing
/// committed starts at the beginning.
#[tokio::test]
async fn a_consumer_resumes_from_committed_offsets() {
    let (_server, addr) = start();
    let client = Client::connect(addr).await.unwrap();
    let shape = StreamShape { streamlets: 1, logs: 2, segment_bytes: 4096, group_segments: 1, group_timeout_ms: 0 };
    let (table, _) = client.create_stream("s", shape).await.unwrap();
    let offsets = client.create_table("offsets").await.unwrap();
    let mut all = Vec::new();
    for seq in 0..400u64 {
        let r = record(seq % 2, seq);
        client.produce(table, 0, seq % 2, &[&r]).await.unwrap();
        all.push(parse(&r));
    }
    let mut first = Consumer::new(client.clone(), table, 0, 2000);
    let mut got = Vec::new();
    while got.len() < 150 {
        got.extend(first.poll().await.unwrap().iter().map(|r| parse(r)));
    }
    first.commit(offsets, b"reader-1").await.unwrap();
    drop(first);
    let mut again = Consumer::resume_committed(client.clone(), table, 0, 2000, offsets, b"reader-1").await.unwrap();
    loop {
        let batch = again.poll().await.unwrap();
        if batch.is_empty() {
            break;
        }
        got.extend(batch.iter().map(|r| parse(r)));
    }
    got.sort();
    all.sort();
    assert_eq!(got, all, "every record once across the restart");
    let fresh = Consumer::resume_committed(client.clone(), table, 0, 2000, offsets, b"nobody").await.unwrap();
    assert_eq!(fresh.offsets(), (vec![], 0));
    client.write(offsets, b"junk", b"xyz").await.unwrap();
    assert!(matches!(
        Consumer::resume_committed(client, table, 0, 2000, offsets, b"junk").await,
        Err(StreamError::Invalid(_))
    ));
}

/// Retention on a server (`--stream-retention-bytes`): while a producer
/// appends 4x the limit, the server removes the oldest groups; a consumer
/// that had stopped in a removed group goes on with the groups kept
/// (counting what it lost), reads of a removed group say so, the groups
/// kept hold at most the limit plus the open group, and the newest records
/// are all there, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_removes_old_groups_and_consumers_go_on() {
    let limit = 64 * 1024;
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        stream_retention_bytes: ByteSize(limit),
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let client = Client::connect(server.addresses().native.unwrap()).await.unwrap();
    let shape = StreamShape { streamlets: 1, logs: 1, segment_bytes: 4096, group_segments: 2, group_timeout_ms: 0 };
    let (table, _) = client.create_stream("s", shape).await.unwrap();
    let mut consumer = Consumer::new(client.clone(), table, 0, 1000);
    let config = GroupConsumerConfig { max_groups: 1, max_bytes: 1000, ..GroupConsumerConfig::new("g", 1) };
    let mut named = GroupConsumer::new(client.clone(), table, shape, config);
    let mut seq = 0u64;
    let mut produce = |n: u64| {
        let client = client.clone();
        let from = seq;
        seq += n;
        async move {
            for s in from..from + n {
                let r = [&s.to_le_bytes()[..], &[0xab; 500]].concat();
                client.produce(table, 0, 0, &[&r]).await.unwrap();
            }
        }
    };
    produce(20).await;
    let first = consumer.poll().await.unwrap();
    assert!(!first.is_empty());
    let stopped_in = consumer.offsets().0[0];
    assert_eq!(named.poll().await.unwrap().len(), first.len(), "the same first read");
    assert_eq!(named.groups(), vec![(0, stopped_in.group)]);
    produce(500).await; // about 4x the limit
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let groups = loop {
        let d = client.describe_stream(table, 0, 0, 10_000).await.unwrap();
        let kept: u64 = d.groups.iter().filter(|g| g.closed).map(|g| g.bytes).sum();
        if d.groups.first().map(|g| g.id) > Some(stopped_in.group) && kept <= limit {
            break d.groups;
        }
        assert!(std::time::Instant::now() < deadline, "retention did not run: {} groups", d.groups.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    match client.consume(table, 0, stopped_in, 1000).await {
        Err(StreamError::Invalid(why)) => assert!(why.contains("removed by retention"), "{why}"),
        other => panic!("a read of a removed group: {other:?}"),
    }
    // The consumer goes on with the kept groups, and reads them all.
    let mut got = Vec::new();
    loop {
        let batch = consumer.poll().await.unwrap();
        if batch.is_empty() {
            break;
        }
        got.extend(batch.iter().map(|r| u64::from_le_bytes(r[..8].try_into().unwrap())));
    }
    assert!(consumer.groups_removed() >= 1);
    let kept_records: u64 = groups.iter().map(|g| g.records).sum();
    assert!(got.len() as u64 >= kept_records, "{} read, {kept_records} kept", got.len());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(*got.last().unwrap(), 519, "the newest record is kept");
    // So does an instance of a consumer name: its commit of the removed
    // group is refused, it gives the group up and claims the first kept.
    let mut named_got = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        let batch = named.poll().await.unwrap();
        empty = if batch.is_empty() { empty + 1 } else { 0 };
        named_got.extend(batch.iter().map(|r| u64::from_le_bytes(r.record[..8].try_into().unwrap())));
    }
    assert!(named.groups_lost() >= 1);
    assert!(named_got.len() as u64 >= kept_records, "{} read, {kept_records} kept", named_got.len());
    assert!(named_got.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(named_got.last(), Some(&519));
    let stats = client.stats().await.unwrap();
    let trimmed = stats.iter().find(|(name, _)| name == "stream_groups_trimmed").map(|(_, v)| format!("{v:?}"));
    assert!(trimmed.as_ref().is_some_and(|t| t != "U64(0)"), "{trimmed:?}");
}

/// What one consumer instance read: (global read stamp, streamlet,
/// producer, sequence number), and the reads of its last poll (not
/// committed when it stops).
struct Reads {
    all: Vec<(u64, u32, u64, u64)>,
    last_poll: Vec<(u32, u64, u64)>,
    /// When the poll of each stamp returned.
    returned: HashMap<u64, std::time::Instant>,
    /// When the last poll that returned records started.
    last_poll_started: Option<std::time::Instant>,
}

/// Polls `c` until `stop` says so; each poll's records get one stamp from
/// `clock`, taken after the poll returns (so a group's reads by its next
/// holder get later stamps than its previous holder's: the previous one
/// committed them before the group was handed over).
async fn read_as_instance(
    mut c: GroupConsumer,
    clock: Arc<std::sync::atomic::AtomicU64>,
    mut stop: impl FnMut(&[(u64, u32, u64, u64)]) -> bool,
) -> (GroupConsumer, Reads) {
    let mut reads = Reads { all: Vec::new(), last_poll: Vec::new(), returned: HashMap::new(), last_poll_started: None };
    while !stop(&reads.all) {
        let started = std::time::Instant::now();
        let batch = c.poll().await.unwrap();
        let stamp = clock.fetch_add(1, Ordering::AcqRel);
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        reads.returned.insert(stamp, std::time::Instant::now());
        reads.last_poll_started = Some(started);
        reads.last_poll.clear();
        for r in &batch {
            let (p, seq) = parse(&r.record);
            reads.all.push((stamp, r.streamlet, p, seq));
            reads.last_poll.push((r.streamlet, p, seq));
        }
    }
    (c, reads)
}

/// KerA's rule (`docs/streams.md`, "Consumer names"): 4 producers with
/// per-producer sequence numbers; 3 instances of one consumer name split
/// the groups of 2 streamlets x 3 logs, the server handing each group to
/// one instance at a time. A fourth instance reads some records and is
/// dropped without committing its last poll; once its leases run out its
/// groups go to the others, from its last commit. Then: every
/// acknowledged record is read; the only records read twice are those of
/// the dropped instance's last poll (read again after the lease expiry);
/// leaving those out, every record is read exactly once and each
/// producer's records of a streamlet in order across instances and
/// hand-overs. Finally a new instance of the name (a restarted consumer)
/// reads only records produced after everything was committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_of_one_name_share_groups_and_read_each_record_once() {
    const PRODUCERS: u64 = 4;
    const RECORDS: u64 = 2000;
    const LEASE: Duration = Duration::from_millis(300);
    let (_server, addr) = start();
    let client = Client::connect(addr).await.unwrap();
    let asked = StreamShape { streamlets: 2, logs: 0, segment_bytes: 4096, group_segments: 2, group_timeout_ms: 0 };
    let (table, shape) = client.create_stream("billing-events", asked).await.unwrap();
    let instance = |id: u64| {
        let config = GroupConsumerConfig {
            lease: LEASE,
            max_groups: 2,
            max_bytes: 2048,
            ..GroupConsumerConfig::new("billing", id)
        };
        GroupConsumer::new(client.clone(), table, shape, config)
    };
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(0));

    // Producers, each acknowledged record noted.
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let client = client.clone();
            tokio::spawn(async move {
                let routing = if p % 2 == 0 { Routing::ByKey } else { Routing::RoundRobin };
                let config = ProducerConfig {
                    id: p,
                    batch_bytes: 600,
                    linger: Duration::from_millis(2),
                    max_in_flight: 4,
                    routing,
                };
                let producer = Producer::new(client, table, shape, config);
                let mut acks = Vec::new();
                for seq in 0..RECORDS {
                    acks.push((seq, producer.send(Some(&p.to_le_bytes()), record(p, seq)).await));
                    if seq % 200 == 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                producer.flush().await;
                let mut acked = Vec::new();
                for (seq, ack) in acks {
                    acked.push((ack.wait().await.expect("acknowledged").0, p, seq));
                }
                acked
            })
        })
        .collect();

    // The instance that dies: it stops after a poll that returned records,
    // once it has read at least 300, and is dropped without committing.
    let dead = {
        let clock = clock.clone();
        let c = instance(4);
        tokio::spawn(async move { read_as_instance(c, clock, |all| all.len() >= 300).await })
    };
    let (dead_consumer, dead_reads) = dead.await.unwrap();
    assert!(!dead_consumer.groups().is_empty(), "it dies holding groups");
    drop(dead_consumer);
    assert!(!dead_reads.last_poll.is_empty());

    let total = (PRODUCERS * RECORDS) as usize;
    // The survivors, started while the producers run, read until, together with the dead instance's
    // committed reads, every acknowledged record is read.
    let seen = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let dead_last: BTreeSet<(u32, u64, u64)> = dead_reads.last_poll.iter().copied().collect();
    seen.lock()
        .unwrap()
        .extend(dead_reads.all.iter().map(|&(_, s, p, q)| (s, p, q)).filter(|r| !dead_last.contains(r)));
    let survivors: Vec<_> = (1..=3)
        .map(|id| {
            let (c, clock, seen) = (instance(id), clock.clone(), seen.clone());
            tokio::spawn(async move {
                let mut counted = 0;
                let (c, reads) = read_as_instance(c, clock, |all| {
                    let mut seen = seen.lock().unwrap();
                    seen.extend(all[counted..].iter().map(|&(_, s, p, q)| (s, p, q)));
                    counted = all.len();
                    seen.len() >= total
                })
                .await;
                c.close().await.unwrap();
                reads
            })
        })
        .collect();
    let mut acked: BTreeSet<(u32, u64, u64)> = BTreeSet::new();
    for t in producers {
        acked.extend(t.await.unwrap());
    }
    assert_eq!(acked.len(), total);
    let mut reads = dead_reads.all.clone();
    let mut per_instance = Vec::new();
    // The dropped instance's last poll renewed its leases no earlier than
    // it started: nobody gets those groups before a lease after that.
    let lease_out = dead_reads.last_poll_started.unwrap() + LEASE;
    for t in survivors {
        let r = tokio::time::timeout(Duration::from_secs(60), t).await.expect("read everything within 60 s").unwrap();
        per_instance.push(r.all.len());
        for &(stamp, s, p, q) in &r.all {
            if dead_last.contains(&(s, p, q)) {
                assert!(r.returned[&stamp] >= lease_out, "({s}, {p}, {q}) read again before the lease ran out");
            }
        }
        reads.extend(r.all);
    }

    // Duplicates: only the dead instance's last poll, each read once more.
    let mut count: HashMap<(u32, u64, u64), usize> = HashMap::new();
    for &(_, s, p, q) in &reads {
        *count.entry((s, p, q)).or_default() += 1;
    }
    for (r, n) in &count {
        let allowed = if dead_last.contains(r) { 2 } else { 1 };
        assert_eq!(*n, allowed, "record {r:?} read {n} time(s) ({per_instance:?} read per survivor)");
    }
    let read: BTreeSet<_> = count.keys().copied().collect();
    assert_eq!(read, acked, "every acknowledged record read, and nothing else");
    // Order: leaving out the dead instance's uncommitted reads, each
    // producer's records of a streamlet come in sequence, in stamp order.
    reads.sort_by_key(|r| r.0);
    let dead_last_stamp = dead_reads.all.last().unwrap().0;
    let mut dead_skipped = 0;
    let mut last: HashMap<(u32, u64), u64> = HashMap::new();
    for &(stamp, s, p, q) in &reads {
        if stamp == dead_last_stamp {
            dead_skipped += 1;
            continue;
        }
        if let Some(prev) = last.insert((s, p), q) {
            assert!(q > prev, "streamlet {s}: producer {p}'s record {q} read after {prev}");
        }
    }
    assert_eq!(dead_skipped, dead_last.len());

    // A restarted instance of the name resumes from the committed
    // offsets: only what is produced now.
    let producer = Producer::new(client.clone(), table, shape, ProducerConfig { id: 9, ..ProducerConfig::default() });
    let mut acks = Vec::new();
    for q in 0..20 {
        acks.push(producer.send(None, record(9, q)).await);
    }
    producer.flush().await;
    for a in acks {
        a.wait().await.unwrap();
    }
    let restarted = instance(7);
    let (_, r) = tokio::time::timeout(
        Duration::from_secs(20),
        read_as_instance(restarted, clock.clone(), |all| all.len() >= 20),
    )
    .await
    .expect("the new records within 20 s");
    let got: Vec<(u64, u64)> = r.all.iter().map(|&(_, _, p, q)| (p, q)).collect();
    assert_eq!(got.len(), 20, "{got:?}");
    assert!(got.iter().all(|&(p, _)| p == 9), "only the new records: {got:?}");
}
