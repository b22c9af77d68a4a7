//! A stream's producer and consumer over the async client
//! (`docs/streams.md`).
//!
//! [`Producer`] batches records per streamlet, by size
//! ([`ProducerConfig::batch_bytes`]) and by time ([`ProducerConfig::linger`]),
//! and pipelines the batches with at most [`ProducerConfig::max_in_flight`]
//! PRODUCE requests unanswered. Batches are written to the master's
//! connection in the order they were closed, and a connection's requests
//! are executed in order, so one producer's records are appended in the
//! order it sent them. Every record's [`Ack`] resolves once its batch is
//! durable (or failed).
//!
//! [`GroupConsumer`] is one instance of a consumer name: the server hands
//! it groups no other instance of the name holds and keeps the name's
//! offsets (`docs/streams.md`, "Consumer names: one consumer per group").
//!
//! [`Consumer`] reads one streamlet, keeping an offset per group (and may
//! commit them to a key-value table, to resume there after a restart). It reads
//! the groups of each log of the MultiLog one at a time, in id order, and
//! moves to a log's next group only once the server says the current one
//! is closed and read to its end: a producer's records, which are all in
//! one log, come out in the order they were appended.

use crate::error::{ClientError, ReadError, StreamError, WriteError};
use crate::ops::conv;
use crate::Client;
use shoal_proto::{key_hash, ErrorStatus, Request, StreamOffset, StreamShape, TableId, Version, MAX_PRODUCE_RECORDS};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Mutex, Semaphore};
use tokio::task::JoinHandle;

/// How a producer picks the streamlet of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Streamlets in turn, one batch each.
    RoundRobin,
    /// The record's key hash modulo the streamlets (records without a key
    /// go round robin): records of one key stay in order in one streamlet.
    ByKey,
}

/// A producer's settings.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// The producer id: the server appends its batches to log
    /// `id % logs` of each streamlet's MultiLog.
    pub id: u64,
    /// A streamlet's batch is sent once it holds this many bytes of
    /// records (each counting 5 bytes beyond its own).
    pub batch_bytes: usize,
    /// ... or once its first record has waited this long.
    pub linger: Duration,
    /// Most PRODUCE requests in flight at once (at least 1).
    pub max_in_flight: usize,
    pub routing: Routing,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            id: 0,
            batch_bytes: 64 << 10,
            linger: Duration::from_millis(5),
            max_in_flight: 8,
            routing: Routing::RoundRobin,
        }
    }
}

/// What a record's acknowledgement says: its offset once durable, or why
/// its batch failed (shared by the batch's records).
pub type AckResult = Result<(u32, StreamOffset), Arc<StreamError>>;

/// A record's acknowledgement: resolves to its streamlet and offset.
pub struct Ack(oneshot::Receiver<AckResult>);

impl Ack {
    /// Waits for the record's batch to be answered.
    pub async fn wait(self) -> AckResult {
        self.0.await.unwrap_or_else(|_| Err(Arc::new(StreamError::Client(ClientError::Closed))))
    }
}

/// Bytes a record counts in a batch beyond its own (its length on the wire
/// and a margin for its length in the log).
const RECORD_COST: usize = 5;

#[derive(Default)]
struct Batch {
    records: Vec<Vec<u8>>,
    bytes: usize,
    acks: Vec<oneshot::Sender<AckResult>>,
    since: Option<Instant>,
}

struct State {
    batches: Vec<Batch>,
    next: u32,
}

struct Shared {
    client: Client,
    table: TableId,
    config: ProducerConfig,
    state: Mutex<State>,
    permits: Arc<Semaphore>,
}

/// Batches and pipelines records to one stream. See the module comment.
pub struct Producer {
    shared: Arc<Shared>,
    linger: JoinHandle<()>,
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.linger.abort();
    }
}

impl Producer {
    /// A producer of stream `table`, whose shape is `shape` (from
    /// [`Client::create_stream`] or [`Client::describe_stream`]).
    pub fn new(client: Client, table: TableId, shape: StreamShape, mut config: ProducerConfig) -> Producer {
        config.max_in_flight = config.max_in_flight.max(1);
        let streamlets = shape.streamlets.max(1);
        let shared = Arc::new(Shared {
            client,
            table,
            permits: Arc::new(Semaphore::new(config.max_in_flight)),
            state: Mutex::new(State { batches: (0..streamlets).map(|_| Batch::default()).collect(), next: 0 }),
            config,
        });
        let weak = Arc::downgrade(&shared);
        let tick = shared.config.linger.max(Duration::from_millis(1));
        let linger = tokio::spawn(async move {
            loop {
                tokio::time::sleep(tick / 2).await;
                let Some(shared) = weak.upgrade() else { return };
                let mut st = shared.state.lock().await;
                for s in 0..st.batches.len() {
                    if st.batches[s].since.is_some_and(|t| t.elapsed() >= shared.config.linger) {
                        shared.flush(&mut st, s as u32).await;
                    }
                }
            }
        });
        Producer { shared, linger }
    }

    /// Adds a record to its streamlet's batch (sending the batch if it is
    /// full); the returned [`Ack`] resolves once the record is durable.
    /// Waits while `max_in_flight` requests are unanswered.
    pub async fn send(&self, key: Option<&[u8]>, record: Vec<u8>) -> Ack {
        let sh = &self.shared;
        let (tx, rx) = oneshot::channel();
        let mut st = sh.state.lock().await;
        let n = st.batches.len() as u32;
        let streamlet = match (sh.config.routing, key) {
            (Routing::ByKey, Some(k)) => (key_hash(sh.table, k).0 % u64::from(n)) as u32,
            _ => st.next,
        };
        let cost = record.len() + RECORD_COST;
        let b = &st.batches[streamlet as usize];
        if !b.records.is_empty() && b.bytes + cost > sh.config.batch_bytes {
            sh.flush(&mut st, streamlet).await;
        }
        let b = &mut st.batches[streamlet as usize];
        b.since.get_or_insert_with(Instant::now);
        b.bytes += cost;
        b.records.push(record);
        b.acks.push(tx);
        if b.bytes >= sh.config.batch_bytes || b.records.len() >= MAX_PRODUCE_RECORDS {
            sh.flush(&mut st, streamlet).await;
        }
        Ack(rx)
    }

    /// Sends every batch now and waits until every request is answered.
    pub async fn flush(&self) {
        let sh = &self.shared;
        {
            let mut st = sh.state.lock().await;
            for s in 0..st.batches.len() {
                sh.flush(&mut st, s as u32).await;
            }
        }
        let all = sh.config.max_in_flight as u32;
        drop(sh.permits.acquire_many(all).await);
    }
}

impl Shared {
    /// Sends streamlet `s`'s batch, if it has records: takes a permit (an
    /// in-flight slot), writes the request to the master's connection now
    /// (under the state lock, so requests go out in the order batches
    /// close) and answers the records' acks from a task.
    async fn flush(self: &Arc<Self>, st: &mut State, s: u32) {
        let b = std::mem::take(&mut st.batches[s as usize]);
        if b.records.is_empty() {
            return;
        }
        if self.config.routing == Routing::RoundRobin || st.next == s {
            st.next = (s + 1) % st.batches.len() as u32;
        }
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let records: Vec<&[u8]> = b.records.iter().map(Vec::as_slice).collect();
        let req = Request::Produce { table: self.table, streamlet: s, producer: self.config.id, records };
        let sent = match self.client.stream_channel(self.table, s).await {
            Ok(c) => c.send(&req).map_err(StreamError::from),
            Err(e) => Err(StreamError::from(e)),
        };
        let me = self.clone();
        tokio::spawn(async move {
            let result = match sent {
                Ok(reply) => me.answer(reply, s, &b.records).await,
                Err(e) => Err(e),
            };
            drop(permit);
            let result = result.map_err(Arc::new);
            for (i, ack) in b.acks.into_iter().enumerate() {
                let _ = ack.send(match &result {
                    Ok(first) => Ok((s, StreamOffset { position: first.position + i as u32, ..*first })),
                    Err(e) => Err(e.clone()),
                });
            }
        });
    }

    /// The first record's offset of a sent batch. A retryable status (its
    /// master moved, or is recovering) sends the batch again through the
    /// client's routing and retries: it may then land after batches this
    /// producer sent later.
    async fn answer(&self, reply: crate::Reply, s: u32, records: &[Vec<u8>]) -> Result<StreamOffset, StreamError> {
        let frame = reply.wait().await?;
        let status = match frame.reply()? {
            Ok(r) => return Ok(conv::produce(r, records.len())?.first),
            Err(status) => status,
        };
        match status {
            ErrorStatus::UnknownTablet | ErrorStatus::Retry { .. } | ErrorStatus::UnknownTable(_) => {
                let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
                Ok(self.client.produce(self.table, s, self.config.id, &refs).await?.first)
            }
            s => Err(StreamError::from(s)),
        }
    }
}

/// Where a consumer is in one group.
#[derive(Clone, Copy, Debug)]
struct GroupCursor {
    log: u32,
    at: StreamOffset,
}

/// Reads one streamlet of a stream, keeping its offsets itself. See the
/// module comment for the order it reads groups in.
pub struct Consumer {
    client: Client,
    table: TableId,
    streamlet: u32,
    max_bytes: u32,
    /// Groups known and not finished, by id.
    open: BTreeMap<u64, GroupCursor>,
    /// Groups with ids below this are known (finished or in `open`).
    known_below: u64,
    /// Groups removed by retention before this consumer finished them.
    removed: u64,
    /// When the groups were last described, and whether the last poll
    /// gave a reason to describe them again before [`REDISCOVER_EVERY`]
    /// (it found nothing new, or finished or lost a group): see
    /// [`Consumer::poll`].
    discovered: Option<Instant>,
    stale: bool,
}

/// Longest a [`Consumer`] that keeps finding records goes without
/// describing the streamlet's groups (so a log that starts a group while
/// the others keep it busy is found within this).
const REDISCOVER_EVERY: Duration = Duration::from_millis(50);

impl Consumer {
    /// A consumer of `streamlet` of stream `table` that asks for up to
    /// `max_bytes` a read, from the streamlet's first group.
    pub fn new(client: Client, table: TableId, streamlet: u32, max_bytes: u32) -> Consumer {
        Consumer {
            client,
            table,
            streamlet,
            max_bytes,
            open: BTreeMap::new(),
            known_below: 0,
            removed: 0,
            discovered: None,
            stale: true,
        }
    }

    /// Groups that retention removed (`docs/streams.md`, "Retention")
    /// before this consumer had read them to their end: their records
    /// not read by then are lost to it, and it went on with the next
    /// groups (as a Kafka consumer whose offset fell out of range).
    pub fn groups_removed(&self) -> u64 {
        self.removed
    }

    /// Whether group `id` is gone from the streamlet (removed by
    /// retention): the streamlet's first group from `id` on is another.
    async fn gone(&self, id: u64) -> Result<bool, StreamError> {
        let d = self.client.describe_stream(self.table, self.streamlet, id, 1).await?;
        Ok(d.groups.first().map(|g| g.id) != Some(id))
    }

    /// The offsets of the groups not finished yet (to resume from later
    /// with [`Consumer::resume`]), and the first group id not seen yet.
    pub fn offsets(&self) -> (Vec<StreamOffset>, u64) {
        (self.open.values().map(|c| c.at).collect(), self.known_below)
    }

    /// A consumer that continues from [`Consumer::offsets`].
    pub async fn resume(
        client: Client,
        table: TableId,
        streamlet: u32,
        max_bytes: u32,
        offsets: &[StreamOffset],
        known_below: u64,
    ) -> Result<Consumer, StreamError> {
        let mut c = Consumer::new(client, table, streamlet, max_bytes);
        for o in offsets {
            if o.group >= known_below {
                return Err(StreamError::Invalid(format!(
                    "offset {o} is in a group the consumer had not seen (first unseen: {known_below})"
                )));
            }
            let d = c.client.describe_stream(table, streamlet, o.group, 1).await?;
            match d.groups.first().filter(|g| g.id == o.group) {
                Some(g) => {
                    c.open.insert(o.group, GroupCursor { log: g.log, at: *o });
                }
                // Removed by retention since the offsets were taken.
                None => c.removed += 1,
            }
        }
        c.known_below = known_below;
        Ok(c)
    }

    /// Commits the consumer's offsets to Shoal: writes them to `key` of
    /// the key-value table `offsets` (see [`encode_offsets`]), so that a
    /// consumer restarted later resumes there
    /// ([`Consumer::resume_committed`]). Records read since are read again
    /// after such a restart (at-least-once): commit after processing.
    pub async fn commit(&self, offsets: TableId, key: &[u8]) -> Result<Version, WriteError> {
        let (open, known_below) = self.offsets();
        self.client.write(offsets, key, &encode_offsets(&open, known_below)).await
    }

    /// A consumer resuming from the offsets last committed to `key` of
    /// `offsets`, or from the streamlet's start if none were.
    pub async fn resume_committed(
        client: Client,
        table: TableId,
        streamlet: u32,
        max_bytes: u32,
        offsets: TableId,
        key: &[u8],
    ) -> Result<Consumer, StreamError> {
        let value = match client.read(offsets, key).await {
            Ok((value, _)) => value,
            Err(ReadError::NotFound) => return Ok(Consumer::new(client, table, streamlet, max_bytes)),
            Err(ReadError::UnknownTable(t)) => return Err(StreamError::UnknownTable(t)),
            Err(ReadError::Client(e)) => return Err(StreamError::Client(e)),
            Err(e) => return Err(StreamError::Invalid(e.to_string())),
        };
        let (open, known_below) = decode_offsets(&value)
            .ok_or_else(|| StreamError::Invalid(format!("the value at {key:?} is not committed offsets")))?;
        Consumer::resume(client, table, streamlet, max_bytes, &open, known_below).await
    }

    /// Learns the groups created since the last call.
    async fn discover(&mut self) -> Result<(), StreamError> {
        loop {
            let d = self
                .client
                .describe_stream(self.table, self.streamlet, self.known_below, shoal_proto::MAX_DESCRIBE_GROUPS)
                .await?;
            let Some(last) = d.groups.last().map(|g| g.id) else { return Ok(()) };
            for g in &d.groups {
                let at = StreamOffset { group: g.id, segment: 0, position: 0 };
                self.open.insert(g.id, GroupCursor { log: g.log, at });
            }
            self.known_below = last + 1;
            if d.groups.len() < shoal_proto::MAX_DESCRIBE_GROUPS as usize {
                return Ok(());
            }
        }
    }

    /// The next records of the streamlet, from the groups that may be read
    /// now (each log's oldest unfinished group); empty when there is
    /// nothing new. Learns new groups (a DESCRIBE_STREAM) when the last
    /// poll found nothing new or finished a group, and otherwise at most
    /// every [`REDISCOVER_EVERY`]: a consumer that keeps finding records
    /// spends its requests on them.
    pub async fn poll(&mut self) -> Result<Vec<Vec<u8>>, StreamError> {
        if self.stale || self.discovered.is_none_or(|t| t.elapsed() >= REDISCOVER_EVERY) {
            self.discover().await?;
            self.discovered = Some(Instant::now());
        }
        let groups_before = self.open.len();
        let mut read_logs = std::collections::HashSet::new();
        let mut out = Vec::new();
        // Each log's oldest unfinished group, in id order; a group removed
        // by retention gives its place to the log's next one.
        while let Some((id, at, log)) =
            self.open.iter().find(|(_, c)| !read_logs.contains(&c.log)).map(|(id, c)| (*id, c.at, c.log))
        {
            let c = match self.client.consume(self.table, self.streamlet, at, self.max_bytes).await {
                Ok(c) => c,
                Err(e) => {
                    if self.gone(id).await? {
                        self.open.remove(&id);
                        self.removed += 1;
                        continue;
                    }
                    return Err(e);
                }
            };
            read_logs.insert(log);
            if c.end_of_group {
                self.open.remove(&id);
            } else if let Some(g) = self.open.get_mut(&id) {
                g.at = c.next;
            }
            out.extend(c.records);
        }
        self.stale = out.is_empty() || self.open.len() < groups_before;
        Ok(out)
    }
}

/// A [`GroupConsumer`]'s settings.
#[derive(Clone, Debug)]
pub struct GroupConsumerConfig {
    /// The consumer name: instances sharing it split the stream's groups,
    /// one instance per group at a time, and share committed offsets.
    pub name: String,
    /// This instance's id (not 0), unique among the name's instances.
    pub instance: u64,
    /// The lease asked for: a group whose holder neither reads nor commits
    /// for this long goes to another instance (the server grants at most
    /// 60 s).
    pub lease: Duration,
    /// Most groups held at once.
    pub max_groups: usize,
    /// Bytes asked for per read of a group.
    pub max_bytes: u32,
}

impl GroupConsumerConfig {
    pub fn new(name: &str, instance: u64) -> GroupConsumerConfig {
        GroupConsumerConfig {
            name: name.to_owned(),
            instance,
            lease: Duration::from_secs(10),
            max_groups: 4,
            max_bytes: 1 << 20,
        }
    }
}

/// A record a [`GroupConsumer`] read, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub streamlet: u32,
    pub offset: StreamOffset,
    pub record: Vec<u8>,
}

/// A group a [`GroupConsumer`] holds.
#[derive(Clone, Copy, Debug)]
struct Held {
    /// Where the next read starts.
    at: StreamOffset,
    /// What the server has committed for the name.
    committed: StreamOffset,
    /// The last read found nothing new in the (open) group.
    idle: bool,
    /// The last read reached the end of the closed group.
    end: bool,
}

/// One instance of a consumer name over every streamlet of a stream, with
/// the server assigning groups (`docs/streams.md`, "Consumer names: one
/// consumer per group"): it claims up to `max_groups` groups no other
/// live instance of the name holds, reads them, and commits its offsets
/// to the server, which keeps them durably for the name.
///
/// Offsets are committed at the start of each [`GroupConsumer::poll`] (the
/// records the previous poll returned: process them before polling again)
/// and by [`GroupConsumer::commit`]. A group read to its closed end is
/// committed done and given back; a group found idle (open, nothing new)
/// is given back too, so that the instances rotate over the logs that
/// have data. An instance that stops (crashes) loses its groups when its
/// leases run out; the next holder starts at the last committed offset,
/// so the records it had read since its last commit are read again: with
/// no failures, every record is read exactly once by the name.
pub struct GroupConsumer {
    client: Client,
    table: TableId,
    streamlets: u32,
    config: GroupConsumerConfig,
    held: BTreeMap<(u32, u64), Held>,
    /// The streamlet the next claim starts at (round robin).
    next_streamlet: u32,
    lost: u64,
}

impl GroupConsumer {
    /// An instance of `config.name` reading stream `table` of `shape`.
    pub fn new(client: Client, table: TableId, shape: StreamShape, mut config: GroupConsumerConfig) -> GroupConsumer {
        config.max_groups = config.max_groups.max(1);
        let next_streamlet = (config.instance % u64::from(shape.streamlets.max(1))) as u32;
        let streamlets = shape.streamlets.max(1);
        GroupConsumer { client, table, streamlets, config, held: BTreeMap::new(), next_streamlet, lost: 0 }
    }

    fn who(&self, streamlet: u32) -> shoal_proto::Subscriber<'_> {
        shoal_proto::Subscriber {
            table: self.table,
            streamlet,
            name: &self.config.name,
            instance: self.config.instance,
            lease_ms: u32::try_from(self.config.lease.as_millis()).unwrap_or(u32::MAX).max(1),
        }
    }

    /// Groups held now: (streamlet, group id).
    pub fn groups(&self) -> Vec<(u32, u64)> {
        self.held.keys().copied().collect()
    }

    /// Groups this instance lost before finishing them: its lease ran out
    /// and another instance took them, or retention removed them.
    pub fn groups_lost(&self) -> u64 {
        self.lost
    }

    /// Commits every held group's offset; gives back the groups read to
    /// their end and the idle ones (all of them with `release_all`).
    async fn commit_held(&mut self, release_all: bool) -> Result<(), StreamError> {
        let held: Vec<((u32, u64), Held)> = self.held.iter().map(|(k, h)| (*k, *h)).collect();
        for ((streamlet, group), h) in held {
            let release = release_all || h.idle;
            if h.at == h.committed && !release && !h.end {
                continue;
            }
            match self.client.commit_group(self.who(streamlet), h.at, release).await {
                Ok(done) if done || release => {
                    self.held.remove(&(streamlet, group));
                }
                Ok(_) => {
                    if let Some(h) = self.held.get_mut(&(streamlet, group)) {
                        h.committed = h.at;
                    }
                }
                Err(StreamError::NotHeld) => {
                    self.held.remove(&(streamlet, group));
                    self.lost += 1;
                }
                // Removed by retention: give it up (the server releases it
                // even though the commit is refused).
                Err(StreamError::Invalid(_)) => {
                    let _ = self.client.commit_group(self.who(streamlet), h.at, true).await;
                    self.held.remove(&(streamlet, group));
                    self.lost += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Commits the offsets of what [`GroupConsumer::poll`] returned so far
    /// (durably, on the server), keeping the groups.
    pub async fn commit(&mut self) -> Result<(), StreamError> {
        self.commit_held(false).await
    }

    /// Commits and gives back every group, for another instance to go on.
    pub async fn close(mut self) -> Result<(), StreamError> {
        self.commit_held(true).await
    }

    /// Claims groups until `max_groups` are held or no streamlet has one
    /// free, trying each streamlet at most once.
    async fn claim(&mut self) -> Result<(), StreamError> {
        for i in 0..self.streamlets {
            if self.held.len() >= self.config.max_groups {
                return Ok(());
            }
            let streamlet = (self.next_streamlet + i) % self.streamlets;
            if let Some(c) = self.client.claim_group(self.who(streamlet)).await? {
                self.held
                    .insert((streamlet, c.from.group), Held { at: c.from, committed: c.from, idle: false, end: false });
            }
        }
        self.next_streamlet = (self.next_streamlet + 1) % self.streamlets;
        Ok(())
    }

    /// Commits what the previous poll returned, claims groups, and reads
    /// each held group once; the records read (empty when there is nothing
    /// new).
    pub async fn poll(&mut self) -> Result<Vec<GroupRecord>, StreamError> {
        self.commit_held(false).await?;
        self.claim().await?;
        let mut out = Vec::new();
        let keys: Vec<(u32, u64)> = self.held.keys().copied().collect();
        for (streamlet, group) in keys {
            let at = self.held[&(streamlet, group)].at;
            let c = match self.client.consume_claimed(self.who(streamlet), at, self.config.max_bytes).await {
                Ok(c) => c,
                Err(StreamError::NotHeld) => {
                    self.held.remove(&(streamlet, group));
                    self.lost += 1;
                    continue;
                }
                // Removed by retention (or the stream dropped): give it up.
                Err(StreamError::Invalid(_)) => {
                    let _ = self.client.commit_group(self.who(streamlet), at, true).await;
                    self.held.remove(&(streamlet, group));
                    self.lost += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let n = c.records.len() as u32;
            let first = c.next.position - n;
            for (i, record) in c.records.into_iter().enumerate() {
                let offset = StreamOffset { position: first + i as u32, ..c.next };
                out.push(GroupRecord { streamlet, offset, record });
            }
            if let Some(h) = self.held.get_mut(&(streamlet, group)) {
                h.at = c.next;
                h.idle = n == 0 && !c.end_of_group;
                h.end = c.end_of_group;
            }
        }
        Ok(out)
    }
}

/// Committed offsets as a value: the first group id not seen yet (u64),
/// the count of unfinished groups (u32), and each one's offset (group u64,
/// segment u32, position u32); little-endian.
pub fn encode_offsets(open: &[StreamOffset], known_below: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + 16 * open.len());
    v.extend_from_slice(&known_below.to_le_bytes());
    v.extend_from_slice(&u32::try_from(open.len()).unwrap_or(u32::MAX).to_le_bytes());
    for o in open {
        v.extend_from_slice(&o.group.to_le_bytes());
        v.extend_from_slice(&o.segment.to_le_bytes());
        v.extend_from_slice(&o.position.to_le_bytes());
    }
    v
}

/// The offsets [`encode_offsets`] wrote; `None` for any other bytes.
pub fn decode_offsets(v: &[u8]) -> Option<(Vec<StreamOffset>, u64)> {
    let known_below = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
    let n = u32::from_le_bytes(v.get(8..12)?.try_into().ok()?) as usize;
    let rest = v.get(12..)?;
    if rest.len() != n.checked_mul(16)? {
        return None;
    }
    let open = rest
        .chunks_exact(16)
        .map(|c| StreamOffset {
            group: u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
            segment: u32::from_le_bytes(c[8..12].try_into().expect("4 bytes")),
            position: u32::from_le_bytes(c[12..].try_into().expect("4 bytes")),
        })
        .collect();
    Some((open, known_below))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_offsets_round_trip_and_other_bytes_are_refused() {
        let open = vec![
            StreamOffset { group: 3, segment: 1, position: 7 },
            StreamOffset { group: 9, segment: 0, position: 0 },
        ];
        let v = encode_offsets(&open, 12);
        assert_eq!(decode_offsets(&v), Some((open, 12)));
        assert_eq!(decode_offsets(&encode_offsets(&[], 0)), Some((vec![], 0)));
        for bad in [&v[..v.len() - 1], &v[..5], b"", &[v.as_slice(), &[0]].concat()] {
            assert_eq!(decode_offsets(bad), None, "{bad:?}");
        }
    }
}
