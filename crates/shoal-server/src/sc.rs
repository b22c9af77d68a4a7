//! Symmetric caching on a server (`docs/symmetric-caching.md`): the
//! hottest keys of a group of servers cached on every member, kept
//! coherent with the All-Peers protocol, the decisions made by the
//! sans-I/O core in `shoal-symcache`.
//!
//! What this module adds to the core:
//!
//! * **The home is the only writer of its hot keys.** Every write command
//!   of every front end (and transactions, expiry sweeps) ends in the
//!   log, so the home watches its log ([`ScObserver::entries_appended`])
//!   instead of each command. A write of a key hot in the installed epoch
//!   is stamped `(2 * version (+1 for a removal), home)`, monotonic per
//!   key; in strong mode its invalidation goes to every other member at
//!   once, and the write is *held*: replies that need the log durable past
//!   it (its own reply, reads of its key at the home) wait until every
//!   member acknowledged the invalidation, as they wait for the backups
//!   ([`Sc::hold`], checked by `ServerContext::durable_target`). Once the
//!   write is also on its backups, its value goes to every copy as an
//!   UPDATE. Eventual mode sends the UPDATE only.
//! * **Members serve copies**: a read of a hot key at a member that is not
//!   its home is answered from the member's copy when it is valid, the
//!   member holds its master lease and it is in a group; otherwise the read
//!   goes to the home as any remote key does.
//! * **Epoch changes** (a new round or a new membership): the home sends
//!   its pending writes' invalidations again in the new epoch, holds writes
//!   of keys that cooled down until every member confirmed leaving the
//!   epoch they were hot in (`retired`), and fills the copies of the new
//!   hot keys from a read made under the key's stripe lock (no write of it
//!   half done).
//!
//! Peer frames travel over the backup port (a peer HELLO): each member
//! dials every other member once and sends on that connection only; what
//! it receives comes on the connections the others dialled. Frames to a
//! member queue in a bounded channel; when it is full or the connection is
//! down they are dropped (invalidations are sent again every
//! [`RETRANSMIT`]; a lost update leaves a copy invalid, its reads go home).

use crate::cluster::ClusterNode;
use parking_lot::Mutex;
use shoal_cluster::ServerId;
use shoal_common::key_hash;
use shoal_engine::format::{self, Entry};
use shoal_engine::{LogObserver, SegmentId, SegmentKind, Store, TableId};
use shoal_replication::master::Replicator;
use shoal_symcache::bloom::Bloom;
use shoal_symcache::group::{self, EpochId, GroupConfig, GroupView};
use shoal_symcache::key::{Action as KeyAction, CachedKey};
use shoal_symcache::retired::Retired;
use shoal_symcache::sketch::SpaceSaving;
use shoal_symcache::wire::{self, Frame, Header, Key, Value, HEADER_LEN, MAX_VALUE};
use shoal_symcache::{Consistency, NodeId, Ts};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tracing::{debug, info, warn};

/// Pending invalidations are sent again this often to members that have
/// not acknowledged them.
const RETRANSMIT: Duration = Duration::from_millis(20);
/// How often the driver looks at the cluster map for a membership change.
const MAP_POLL: Duration = Duration::from_millis(20);
/// How often the hot set's most keys is worked out again (from the store's
/// object count, without `--sc-cache-keys`).
const SIZE_EVERY: Duration = Duration::from_millis(250);
/// A member's lease on its copies of a home's keys, counted by the member
/// from when it asked (less [`LEASE_DRIFT`]) and by the home from when it
/// granted (plus [`LEASE_MARGIN`]).
const LEASE: Duration = Duration::from_millis(500);
/// How often a member asks each home for its lease again.
const LEASE_RENEW: Duration = Duration::from_millis(100);
/// Clock rates may differ by this much over a lease: the member's is shorter.
const LEASE_DRIFT: Duration = Duration::from_millis(25);
/// The home waits this much beyond a member's lease before it stops
/// waiting for that member.
const LEASE_MARGIN: Duration = Duration::from_millis(10);
/// A member that leaves an invalidation unacknowledged this long is
/// expelled: no more grants, and once its lease ran out the home's writes
/// stop waiting for it (a member cut off from its group).
const GIVE_UP: Duration = Duration::from_millis(200);
/// Frames queued to one member before more are dropped.
const PEER_QUEUE: usize = 1 << 16;
/// Frames received and not yet handled, over all members.
const INBOX: usize = 1 << 14;
/// One access in this many is sampled into the sketch (with this weight).
const SAMPLE_EVERY: u64 = 8;
/// Fewest sampled accesses (summed over the group's reports, in accesses)
/// in a round that make a key hot.
const MIN_COUNT: u64 = 2 * SAMPLE_EVERY;
/// The false-positive rate of the clients' filter (the seed's 0.1%).
const FILTER_FALSE_POSITIVES: f64 = 0.001;
/// The most keys in a hot set when `--sc-cache-keys` is not given.
const MAX_DEFAULT_CACHE_KEYS: usize = 100_000;

/// The symmetric-caching settings of a server (`--sc*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScSettings {
    pub consistency: Consistency,
    pub epoch_ms: u64,
    /// `None`: 0.1% of the keys (the group's, estimated from this
    /// server's), at least 1, at most 100,000.
    pub cache_keys: Option<usize>,
}

/// Counters for INFO, `shoal stats` and `/metrics`.
#[derive(Default)]
pub struct ScStats {
    pub membership: AtomicU64,
    pub round: AtomicU64,
    pub hot_keys: AtomicU64,
    pub home_keys: AtomicU64,
    pub copies: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub invalidations_sent: AtomicU64,
    pub invalidations_received: AtomicU64,
    pub acks_received: AtomicU64,
    pub updates_sent: AtomicU64,
    pub updates_received: AtomicU64,
    pub writes_held: AtomicU64,
    pub frames_dropped: AtomicU64,
    pub installs: AtomicU64,
}

/// A watched write (or a fill) at the home, waiting for acknowledgements,
/// the barrier or its backups before its update goes out.
#[derive(Debug)]
struct Pending {
    /// The log position after its append: replies needing the log durable
    /// this far wait while the entry holds.
    at: u64,
    key: Key,
    ts: Ts,
    /// What copies may hold after it; `None`: nothing (an object with an
    /// expiry time, or too large to cache): copies stay invalid.
    value: Option<Value>,
    /// Members whose acknowledgement of its invalidation is missing, with
    /// when it was first asked of them.
    need: BTreeMap<NodeId, Instant>,
    /// A write of a key that cooled down: held until no member may still
    /// serve it from an older epoch ([`Retired::holds`]).
    barrier: bool,
    /// When it started waiting for the barrier.
    barrier_since: Instant,
    /// The epoch its invalidations (and its update) are sent in.
    epoch: EpochId,
}

impl Pending {
    fn holds(&self) -> bool {
        !self.need.is_empty() || self.barrier
    }
}

/// This member's group, as installed.
struct Group {
    view: GroupView<Key>,
    epoch: EpochId,
    consistency: Consistency,
    /// Hot keys of the installed epoch whose home is this server.
    home: HashSet<Key>,
    /// Hot keys of the installed epoch whose home is another member.
    copies: HashMap<Key, CachedKey<Value, ()>>,
    /// The home of each copy.
    homes: HashMap<Key, NodeId>,
}

/// A member's lease on its copies of one home's keys.
#[derive(Default)]
struct Held {
    /// Until when (this server's clock) the copies may be served; `None`:
    /// never granted.
    until: Option<Instant>,
    /// LEASE requests sent and not answered: sequence number, when sent.
    asked: VecDeque<(u64, Instant)>,
}

/// A home's grants to one member.
#[derive(Default)]
struct Granted {
    /// Until when (this server's clock) the member may serve copies of this
    /// home's keys: the last grant plus the lease.
    until: Option<Instant>,
    /// The member left an invalidation unanswered too long: no more grants
    /// until the last one ran out; then its acknowledgements are not
    /// waited for.
    expelled: bool,
}

#[derive(Default)]
struct State {
    group: Option<Group>,
    retired: Retired<Key>,
    /// The keys of `retired` (it keeps no list of its own).
    retired_keys: HashSet<Key>,
    /// Hashes of the keys whose writes are watched: `home` and retired.
    watched: HashSet<u64>,
    /// Per watched key: the highest timestamp its writes were given.
    stamped: HashMap<Key, Ts>,
    pending: BTreeMap<u64, Pending>,
    next_pending: u64,
    /// The latest epoch each member said it installed.
    confirmed: HashMap<NodeId, EpochId>,
    /// Per member: its frame queue (dialled lazily by the driver).
    peers: HashMap<NodeId, mpsc::Sender<Vec<u8>>>,
    /// As a member: leases on copies, per home.
    held: HashMap<NodeId, Held>,
    /// As a home: grants, per member.
    granted: HashMap<NodeId, Granted>,
    next_lease: u64,
}

impl State {
    /// Members whose acknowledgement a new invalidation must wait for:
    /// every other member but those expelled whose last grant ran out.
    fn must_ack(&self, members: &[NodeId], me: NodeId, now: Instant) -> BTreeSet<NodeId> {
        members
            .iter()
            .copied()
            .filter(|&m| m != me)
            .filter(|m| {
                self.granted.get(m).is_none_or(|g| !(g.expelled && g.until.is_none_or(|u| now > u + LEASE_MARGIN)))
            })
            .collect()
    }
}

enum Event {
    Frame { from: NodeId, epoch: EpochId, frame: Frame },
}

/// A server's symmetric caching: shared by the log observer, the front
/// ends (reads, sampling, durability) and the driver thread.
pub struct Sc {
    me: ServerId,
    settings: ScSettings,
    state: Mutex<State>,
    /// Whether any key's writes are watched (the observer's fast path).
    watching: AtomicBool,
    /// Whether this member holds copies (the read path's fast path).
    caching: AtomicBool,
    /// The lowest log position of a held write; `u64::MAX`: none.
    hold: AtomicU64,
    released: Notify,
    sketch: Mutex<SpaceSaving<Key>>,
    store: OnceLock<Weak<Store>>,
    inbox: mpsc::Sender<Event>,
    inbox_rx: Mutex<Option<mpsc::Receiver<Event>>>,
    /// The installed hot set's epoch and its clients' Bloom filter (encoded;
    /// empty: no group).
    filter: Mutex<(EpochId, Arc<Vec<u8>>)>,
    wake: Notify,
    pub stats: ScStats,
}

thread_local! {
    static SAMPLED: Cell<u64> = const { Cell::new(0) };
}

fn node(id: ServerId) -> NodeId {
    NodeId(id.0 as u32)
}

fn now_ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

impl Sc {
    pub fn new(me: ServerId, settings: ScSettings) -> Arc<Sc> {
        let (tx, rx) = mpsc::channel(INBOX);
        Arc::new(Sc {
            me,
            settings,
            state: Mutex::new(State::default()),
            watching: AtomicBool::new(false),
            caching: AtomicBool::new(false),
            hold: AtomicU64::new(u64::MAX),
            released: Notify::new(),
            sketch: Mutex::new(SpaceSaving::new(1024)),
            store: OnceLock::new(),
            inbox: tx,
            inbox_rx: Mutex::new(Some(rx)),
            filter: Mutex::new((EpochId::default(), Arc::new(Vec::new()))),
            wake: Notify::new(),
            stats: ScStats::default(),
        })
    }

    pub fn settings(&self) -> ScSettings {
        self.settings
    }

    /// The store whose hot keys are filled from (set once, after it exists).
    pub fn set_store(&self, store: &Arc<Store>) {
        let _ = self.store.set(Arc::downgrade(store));
    }

    /// The installed hot set's epoch and the Bloom filter of its keys'
    /// hashes for clients (SC_FILTER); empty outside a group.
    pub fn filter(&self) -> (EpochId, Arc<Vec<u8>>) {
        let f = self.filter.lock();
        (f.0, f.1.clone())
    }

    /// Whether a reply that needs the log durable up to `pos` must wait
    /// for acknowledgements of invalidations.
    pub fn holds(&self, pos: u64) -> bool {
        pos >= self.hold.load(Ordering::SeqCst)
    }

    /// Waits until no held write is at or below `pos`.
    pub async fn wait_released(&self, pos: u64) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.holds(pos) {
                return;
            }
            released.await;
        }
    }

    /// Counts an access to `key` of `table` (one in [`SAMPLE_EVERY`] goes
    /// into the sketch).
    pub fn sample(&self, table: TableId, key: &[u8]) {
        let n = SAMPLED.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if !n.is_multiple_of(SAMPLE_EVERY) || key.len() > wire::MAX_KEY {
            return;
        }
        if let Some(mut s) = self.sketch.try_lock() {
            s.observe(&Key { table: table.0, key: key.to_vec() }, SAMPLE_EVERY);
        }
    }

    /// A read of `key` of `table` at a member that is not its home: the
    /// copy's value if it is valid and this server may serve it.
    pub fn read(&self, node: &ClusterNode, table: TableId, key: &[u8]) -> Option<Value> {
        if !self.caching.load(Ordering::Acquire) {
            return None;
        }
        let k = Key { table: table.0, key: key.to_vec() };
        let st = self.state.lock();
        let g = st.group.as_ref()?;
        let copy = g.copies.get(&k)?;
        // A copy is served only under this server's master lease (one cut
        // off from the coordinator stops with its own tablets) and under
        // its lease from the key's home (one cut off from its group stops
        // before the home stops waiting for it).
        let home_lease = g.homes.get(&k).and_then(|h| st.held.get(h)).and_then(|l| l.until);
        let leased = home_lease.is_some_and(|u| Instant::now() < u) && node.lease.held();
        let hit = copy.value().cloned().filter(|_| leased);
        drop(st);
        match hit {
            Some(v) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(v)
            }
            None => {
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The entries of one append (see [`ScObserver`]); `pos` is the log
    /// position after it. Decided as a whole, under one lock: a write's
    /// object and the tombstone of the object it replaces arrive together,
    /// and a tombstone is a removal only if no object of its key is in the
    /// same append.
    fn entries_appended(&self, entries: &mut dyn Iterator<Item = &[u8]>, pos: u64) {
        if !self.watching.load(Ordering::Acquire) {
            return;
        }
        let mut objects = Vec::new();
        let mut tombstones = Vec::new();
        for entry in entries {
            match format::decode_trusted(entry) {
                Ok((Entry::Object(o), _)) => {
                    let value = (o.expiry.is_none() && o.value.len() <= MAX_VALUE)
                        .then(|| Value::Present { version: o.version.0, bytes: o.value.to_vec() });
                    objects.push((o.table, o.key, Ts { version: 2 * o.version.0, node: node(self.me) }, value));
                }
                Ok((Entry::Tombstone(t), _)) => tombstones.push((t.table, t.key, t.version)),
                _ => {}
            }
        }
        // Removals: tombstones of keys with no object in this append.
        for (table, key, version) in tombstones {
            if !objects.iter().any(|(t, k, _, _)| *t == table && *k == key) {
                let ts = Ts { version: 2 * version.0 + 1, node: node(self.me) };
                objects.push((table, key, ts, Some(Value::Absent)));
            }
        }
        let mut st = self.state.lock();
        let mut added = false;
        for (table, raw_key, ts, value) in objects {
            if !st.watched.contains(&key_hash(table, raw_key).0) {
                continue;
            }
            let key = Key { table: table.0, key: raw_key.to_vec() };
            if st.stamped.get(&key).is_some_and(|l| *l >= ts) {
                continue;
            }
            let (hot, strong, epoch, members) = match &st.group {
                Some(g) => {
                    (g.home.contains(&key), g.consistency == Consistency::Strong, g.epoch, g.view.members().to_vec())
                }
                None => (false, false, EpochId::default(), Vec::new()),
            };
            let barrier = !hot && st.retired.holds(&key);
            if !hot && !barrier {
                continue;
            }
            st.stamped.insert(key.clone(), ts);
            let now = Instant::now();
            let need: BTreeMap<NodeId, Instant> = if hot && strong {
                st.must_ack(&members, node(self.me), now).into_iter().map(|m| (m, now)).collect()
            } else {
                BTreeMap::new()
            };
            if hot && strong {
                let frame = Frame::Inv { ts, key: key.clone() };
                for &m in need.keys() {
                    send(&st, &self.stats, m, epoch, &frame);
                }
                self.stats.invalidations_sent.fetch_add(need.len() as u64, Ordering::Relaxed);
            }
            let p = Pending {
                at: pos,
                key,
                ts,
                value: if hot { value } else { None },
                need,
                barrier,
                barrier_since: now,
                epoch,
            };
            if p.holds() {
                self.stats.writes_held.fetch_add(1, Ordering::Relaxed);
            }
            let id = st.next_pending;
            st.next_pending += 1;
            st.pending.insert(id, p);
            added = true;
        }
        if added {
            self.update_hold(&st);
            drop(st);
            self.wake.notify_one();
        }
    }

    /// Sets [`Sc::hold`] from the pending entries (state locked).
    fn update_hold(&self, st: &State) {
        let hold = st.pending.values().filter(|p| p.holds()).map(|p| p.at).min().unwrap_or(u64::MAX);
        let before = self.hold.swap(hold, Ordering::SeqCst);
        if hold > before {
            self.released.notify_waiters();
        }
    }

    /// Starts the driver thread. The peer handler must be registered with
    /// the backup already (frames go to [`Sc::inbox`]).
    pub fn start(self: &Arc<Sc>, node: Weak<ClusterNode>) -> std::io::Result<()> {
        let rx = self.inbox_rx.lock().take().expect("started once");
        let sc = self.clone();
        std::thread::Builder::new().name("shoal-sc".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    warn!("symmetric caching: no runtime: {e}");
                    return;
                }
            };
            rt.block_on(sc.drive(node, rx));
        })?;
        Ok(())
    }

    async fn drive(self: Arc<Sc>, cluster: Weak<ClusterNode>, mut rx: mpsc::Receiver<Event>) {
        let start = Instant::now();
        let mut map_version = 0;
        let mut next_retransmit = Instant::now() + RETRANSMIT;
        let mut next_renew = Instant::now();
        let mut cache_keys = self.settings.cache_keys.unwrap_or(1).max(1);
        let mut sized_at = start.checked_sub(SIZE_EVERY).unwrap_or(start);
        loop {
            let Some(n) = cluster.upgrade() else { return };
            if n.is_dead() {
                return;
            }
            let map = n.map();
            if map.version != map_version {
                map_version = map.version;
                self.membership(&n, &map, now_ms(start));
            }
            // Rounds. The hot set's size is worked out before the state is
            // locked: the store is never called with it held (the log
            // observer takes it under the log's lock).
            if sized_at.elapsed() >= SIZE_EVERY {
                let members = self.state.lock().group.as_ref().map_or(1, |g| g.view.members().len());
                cache_keys = self.cache_keys(members);
                sized_at = Instant::now();
            }
            let mut actions = Vec::new();
            let deadline = {
                let mut st = self.state.lock();
                match st.group.as_mut() {
                    Some(g) => {
                        g.view.set_cache_keys(cache_keys);
                        g.view.tick(now_ms(start), &mut actions);
                        Some(g.view.next_deadline_ms())
                    }
                    None => None,
                }
            };
            self.group_actions(&n, actions, now_ms(start));
            if Instant::now() >= next_retransmit {
                self.retransmit();
                self.give_up();
                next_retransmit = Instant::now() + RETRANSMIT;
            }
            if Instant::now() >= next_renew {
                self.ask_leases();
                next_renew = Instant::now() + LEASE_RENEW;
            }
            self.finish_pending(&n);
            let wait = deadline
                .map(|d| Duration::from_millis(d.saturating_sub(now_ms(start))))
                .unwrap_or(MAP_POLL)
                .min(MAP_POLL)
                .min(next_retransmit.saturating_duration_since(Instant::now()))
                .min(next_renew.saturating_duration_since(Instant::now()));
            let durable_wait = self.next_durable(&n);
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => {
                        self.event(&n, ev, now_ms(start));
                        // Take what else is queued before looking around again.
                        while let Ok(ev) = rx.try_recv() {
                            self.event(&n, ev, now_ms(start));
                        }
                    }
                    None => return,
                },
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = async {
                    match durable_wait {
                        Some(pos) => { let _ = n.replicator.wait_durable(pos).await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        }
    }

    /// The log position the oldest released pending entry waits for on
    /// the backups, if any.
    fn next_durable(&self, n: &ClusterNode) -> Option<u64> {
        let st = self.state.lock();
        let durable = n.replicator.durable();
        st.pending.values().filter(|p| !p.holds() && p.at > durable).map(|p| p.at).min()
    }

    /// Sends the updates of pending entries that no longer hold and are on
    /// their backups, in log order, and drops them.
    fn finish_pending(&self, n: &ClusterNode) {
        let durable = n.replicator.durable();
        let mut st = self.state.lock();
        let done: Vec<u64> =
            st.pending.iter().filter(|(_, p)| !p.holds() && p.at <= durable).map(|(id, _)| *id).collect();
        if done.is_empty() {
            return;
        }
        let (epoch, members) = match &st.group {
            Some(g) => (g.epoch, g.view.members().to_vec()),
            None => (EpochId::default(), Vec::new()),
        };
        for id in done {
            let p = st.pending.remove(&id).expect("listed");
            let hot = st.group.as_ref().is_some_and(|g| g.home.contains(&p.key));
            if let (true, Some(value)) = (hot && p.epoch == epoch, p.value) {
                let frame = Frame::Update { ts: p.ts, key: p.key, value };
                for &m in members.iter().filter(|&&m| m != node(self.me)) {
                    send(&st, &self.stats, m, epoch, &frame);
                    self.stats.updates_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.update_hold(&st);
    }

    /// As a member: asks every home of the group for its lease again.
    fn ask_leases(&self) {
        let mut st = self.state.lock();
        let Some(g) = st.group.as_ref() else { return };
        let (epoch, members) = (g.epoch, g.view.members().to_vec());
        let now = Instant::now();
        for m in members.into_iter().filter(|&m| m != node(self.me)) {
            let seq = st.next_lease;
            st.next_lease += 1;
            let held = st.held.entry(m).or_default();
            held.asked.push_back((seq, now));
            // A request older than a lease can never extend it.
            while held.asked.front().is_some_and(|(_, at)| now.duration_since(*at) > LEASE) {
                held.asked.pop_front();
            }
            send(&st, &self.stats, m, epoch, &Frame::Lease { seq });
        }
    }

    /// As a home: member `from` asks for its lease. Granted unless it is
    /// expelled; an expelled member is taken back once its last grant ran
    /// out (it has stopped serving, and drops its copies' values before it
    /// serves again), after the invalidations of the writes pending now
    /// were sent to it again (before the grant, on the same connection).
    fn lease_asked(&self, from: NodeId, seq: u64, epoch: EpochId) {
        let mut st = self.state.lock();
        let Some(g) = st.group.as_ref() else { return };
        let (current, strong) = (g.epoch, g.consistency == Consistency::Strong);
        let now = Instant::now();
        let grant = st.granted.entry(from).or_default();
        if grant.expelled {
            if grant.until.is_some_and(|u| now <= u + LEASE_MARGIN) {
                return;
            }
            grant.expelled = false;
            let st_ref = &mut *st;
            let mut invs = Vec::new();
            let home = st_ref.group.as_ref().map(|g| &g.home);
            for p in st_ref.pending.values_mut() {
                // Every pending write of a key hot here, those whose update
                // carries no value too (an expiry, a large value): the
                // member must see their timestamps before any older update.
                if strong && !p.barrier && p.epoch == current && home.is_some_and(|h| h.contains(&p.key)) {
                    p.need.entry(from).or_insert(now);
                    invs.push(Frame::Inv { ts: p.ts, key: p.key.clone() });
                }
            }
            for f in &invs {
                send(&st, &self.stats, from, current, f);
            }
            self.update_hold(&st);
            info!("symmetric caching: member {from} taken back after its lease ran out");
        }
        st.granted.entry(from).or_default().until = Some(now + LEASE);
        send(&st, &self.stats, from, epoch, &Frame::Grant { seq });
    }

    /// As a member: home `from` granted lease request `seq`. The lease is
    /// counted from the request; if the previous one had run out, the
    /// copies of that home's keys lose their values first (invalidations
    /// may have been missed meanwhile).
    fn lease_granted(&self, from: NodeId, seq: u64) {
        let mut st = self.state.lock();
        let now = Instant::now();
        let st_ref = &mut *st;
        let Some(held) = st_ref.held.get_mut(&from) else { return };
        let Some(i) = held.asked.iter().position(|(s, _)| *s == seq) else { return };
        let asked_at = held.asked[i].1;
        held.asked.drain(..=i);
        let until = asked_at + LEASE - LEASE_DRIFT;
        if held.until.is_none_or(|u| now >= u) {
            if let Some(g) = st_ref.group.as_mut() {
                for (k, c) in g.copies.iter_mut() {
                    if g.homes.get(k) == Some(&from) {
                        c.drop_value();
                    }
                }
            }
        }
        if held.until.is_none_or(|u| u < until) {
            held.until = Some(until);
        }
    }

    /// As a home: members that left an invalidation unacknowledged for
    /// [`GIVE_UP`] are expelled, and writes stop waiting for expelled
    /// members whose last grant ran out.
    fn give_up(&self) {
        let mut st = self.state.lock();
        let now = Instant::now();
        let mut late: BTreeSet<NodeId> = st
            .pending
            .values()
            .flat_map(|p| p.need.iter())
            .filter(|(_, since)| now.duration_since(**since) >= GIVE_UP)
            .map(|(m, _)| *m)
            .collect();
        // Members that have not confirmed leaving an epoch in which a
        // written key was hot, for as long.
        for p in st.pending.values().filter(|p| p.barrier && now.duration_since(p.barrier_since) >= GIVE_UP) {
            late.extend(st.retired.waiting_for(&p.key));
        }
        for m in &late {
            let g = st.granted.entry(*m).or_default();
            if !g.expelled {
                g.expelled = true;
                warn!(
                    "symmetric caching: member {m} left an invalidation or an epoch change unanswered for \
                     {GIVE_UP:?}: no more leases until it answers"
                );
            }
        }
        let gone: Vec<NodeId> = st
            .granted
            .iter()
            .filter(|(_, g)| g.expelled && g.until.is_none_or(|u| now > u + LEASE_MARGIN))
            .map(|(m, _)| *m)
            .collect();
        if gone.is_empty() {
            return;
        }
        // Their leases ran out: they serve no copy of this home's keys, of
        // any epoch, until a new grant has made them drop the values.
        let st_ref = &mut *st;
        let mut changed = false;
        for m in &gone {
            st_ref.retired.gone(*m);
        }
        for p in st_ref.pending.values_mut() {
            for m in &gone {
                changed |= p.need.remove(m).is_some();
            }
            if p.barrier && !st_ref.retired.holds(&p.key) {
                p.barrier = false;
                changed = true;
            }
        }
        if changed {
            debug!("symmetric caching: writes stop waiting for members {gone:?} (their leases ran out)");
            self.rewatch(&mut st);
            self.update_hold(&st);
        }
    }

    fn retransmit(&self) {
        let st = self.state.lock();
        for p in st.pending.values() {
            if p.need.is_empty() {
                continue;
            }
            let frame = Frame::Inv { ts: p.ts, key: p.key.clone() };
            for &m in p.need.keys() {
                send(&st, &self.stats, m, p.epoch, &frame);
            }
        }
    }

    /// The map changed: a new membership starts a new view (and epoch).
    fn membership(&self, n: &ClusterNode, map: &shoal_cluster::ClusterMap, now: u64) {
        let group = map.sc_group_of(self.me).filter(|_| !n.is_recovering());
        let mut st = self.state.lock();
        // Members the map shows down serve nothing any more.
        let down: Vec<NodeId> = st
            .confirmed
            .keys()
            .copied()
            .chain(st.peers.keys().copied())
            .filter(|m| map.server(ServerId(m.0 as u64)).is_none_or(|s| s.state == shoal_cluster::ServerState::Down))
            .collect();
        for m in &down {
            st.retired.gone(*m);
            st.peers.remove(m);
            st.confirmed.remove(m);
        }
        let same = match (&st.group, group) {
            (Some(g), Some(mg)) => g.epoch.membership == mg.epoch,
            (None, None) => true,
            _ => false,
        };
        if same {
            drop(st);
            self.release_barriers();
            return;
        }
        let members: Vec<NodeId> = group.map(|g| g.members.iter().map(|&m| node(m)).collect()).unwrap_or_default();
        // Dial every other member.
        for &m in &members {
            if m == node(self.me) || st.peers.contains_key(&m) {
                continue;
            }
            if let Some(info) = map.server(ServerId(m.0 as u64)) {
                st.peers.insert(m, dial(self.me, m, info.backup));
            }
        }
        drop(st);
        match group {
            Some(g) => {
                info!(
                    "symmetric caching: group {:?} at membership epoch {}",
                    g.members.iter().map(|m| m.0).collect::<Vec<_>>(),
                    g.epoch
                );
                let cache_keys = self.settings.cache_keys.unwrap_or(1).max(1);
                let config = GroupConfig {
                    epoch_ms: self.settings.epoch_ms,
                    cache_keys,
                    report_keys: cache_keys,
                    min_count: MIN_COUNT,
                    consistency: self.settings.consistency,
                };
                let view = GroupView::new(node(self.me), &members, g.epoch, config, now);
                let epoch = view.epoch();
                self.install(n, Some(view), epoch, Vec::new(), self.settings.consistency);
            }
            None => self.install(n, None, EpochId::default(), Vec::new(), self.settings.consistency),
        }
    }

    /// The most keys of a hot set: `--sc-cache-keys`, or 0.1% of the
    /// group's keys estimated from this server's.
    fn cache_keys(&self, members: usize) -> usize {
        if let Some(n) = self.settings.cache_keys {
            return n.max(1);
        }
        let keys = self.store.get().and_then(|s| s.upgrade()).map_or(0, |s| s.stats().objects);
        ((keys as usize).saturating_mul(members) / 1000).clamp(1, MAX_DEFAULT_CACHE_KEYS)
    }

    fn group_actions(&self, n: &ClusterNode, actions: Vec<group::Action<Key>>, now: u64) {
        for a in actions {
            match a {
                group::Action::Report { leader } => {
                    let members = self.state.lock().group.as_ref().map_or(1, |g| g.view.members().len());
                    let keys = self.cache_keys(members);
                    let entries = {
                        let mut s = self.sketch.lock();
                        let top = s.top(keys);
                        *s = SpaceSaving::new((4 * keys).clamp(1024, 400_000));
                        top
                    };
                    let mut out = Vec::new();
                    let mut st = self.state.lock();
                    let Some(g) = st.group.as_mut() else { continue };
                    let membership = g.epoch.membership;
                    if leader == node(self.me) {
                        g.view.report(node(self.me), membership, entries, now, &mut out);
                    } else {
                        let epoch = g.epoch;
                        send(&st, &self.stats, leader, epoch, &Frame::Report { entries });
                    }
                    drop(st);
                    self.group_actions(n, out, now);
                }
                group::Action::Publish { to, epoch, keys, consistency } => {
                    let st = self.state.lock();
                    let frame = Frame::HotSet { consistency, keys };
                    for m in to {
                        send(&st, &self.stats, m, epoch, &frame);
                    }
                }
                group::Action::Install { epoch, keys, consistency } => {
                    self.install(n, None, epoch, keys, consistency);
                }
            }
        }
    }

    /// Installs hot set `keys` at `epoch` (with `view`: a new membership,
    /// replacing the group; `None` and `epoch` default with no view: out
    /// of every group).
    fn install(
        &self,
        n: &ClusterNode,
        view: Option<GroupView<Key>>,
        epoch: EpochId,
        keys: Vec<Key>,
        consistency: Consistency,
    ) {
        let map = n.map();
        let me = node(self.me);
        let mut st = self.state.lock();
        let old = match view {
            Some(v) => st.group.replace(Group {
                view: v,
                epoch,
                consistency,
                home: HashSet::new(),
                copies: HashMap::new(),
                homes: HashMap::new(),
            }),
            None if epoch == EpochId::default() => st.group.take(),
            None => None,
        };
        // The epoch left: its keys, members and home keys.
        let (old_epoch, old_members, old_home, mut old_copies) = match (old, st.group.as_mut()) {
            (Some(o), _) => (o.epoch, o.view.members().to_vec(), o.home, o.copies),
            (None, Some(g)) => {
                (g.epoch, g.view.members().to_vec(), std::mem::take(&mut g.home), std::mem::take(&mut g.copies))
            }
            (None, None) => return,
        };
        let Some(g) = st.group.as_mut() else {
            // Out of every group: nothing cached, nothing watched but the
            // barrier of the keys this server was home of.
            let confirmed: Vec<(NodeId, EpochId)> = st.confirmed.iter().map(|(k, v)| (*k, *v)).collect();
            st.retired.retire(me, old_epoch, &old_members, old_home.iter().cloned(), &confirmed);
            st.retired_keys.extend(old_home);
            self.rewatch(&mut st);
            self.caching.store(false, Ordering::Release);
            *self.filter.lock() = (EpochId::default(), Arc::new(Vec::new()));
            return;
        };
        // Copies are kept only into the next round of the same membership:
        // a member that skipped a round may have missed one in which a key
        // was cold at its home, and writes of a cold key send no
        // invalidation (they wait for the barrier, which this member's
        // confirmation of the later round releases).
        let same_membership = old_epoch.membership == epoch.membership && epoch.round.0 == old_epoch.round.0 + 1;
        g.epoch = epoch;
        g.consistency = consistency;
        let members = g.view.members().to_vec();
        let mut home = HashSet::new();
        let mut copies = HashMap::new();
        let mut homes = HashMap::new();
        for k in keys {
            let Some(t) = map.tablet(TableId(k.table), key_hash(TableId(k.table), &k.key)) else { continue };
            let owner = node(t.master);
            if owner == me {
                home.insert(k);
            } else if members.contains(&owner) {
                let copy = match old_copies.remove(&k) {
                    // A copy kept into the next round stays coherent: a write
                    // of a key hot in both releases only with its
                    // acknowledgement in the home's current epoch.
                    Some(c) if same_membership => c,
                    _ => CachedKey::new(me, members.iter().copied().filter(|&m| m != owner).collect(), consistency),
                };
                homes.insert(k.clone(), owner);
                copies.insert(k, copy);
            }
        }
        let mut bloom = Bloom::for_keys((home.len() + copies.len()).max(1), FILTER_FALSE_POSITIVES);
        for k in home.iter().chain(copies.keys()) {
            bloom.insert(key_hash(TableId(k.table), &k.key).0);
        }
        *self.filter.lock() = (epoch, Arc::new(bloom.to_bytes()));
        let cooled: Vec<Key> = old_home.into_iter().filter(|k| !home.contains(k)).collect();
        g.home = home;
        g.copies = copies;
        g.homes = homes;
        let fills: Vec<Key> = g.home.iter().cloned().collect();
        self.stats.membership.store(epoch.membership, Ordering::Relaxed);
        self.stats.round.store(epoch.round.0, Ordering::Relaxed);
        self.stats.home_keys.store(g.home.len() as u64, Ordering::Relaxed);
        self.stats.copies.store(g.copies.len() as u64, Ordering::Relaxed);
        self.stats.hot_keys.store((g.home.len() + g.copies.len()) as u64, Ordering::Relaxed);
        self.stats.installs.fetch_add(1, Ordering::Relaxed);
        self.caching.store(!g.copies.is_empty(), Ordering::Release);
        let strong = g.consistency == Consistency::Strong;
        let confirmed: Vec<(NodeId, EpochId)> = st.confirmed.iter().map(|(k, v)| (*k, *v)).collect();
        st.retired.retire(me, old_epoch, &old_members, cooled.iter().cloned(), &confirmed);
        st.retired_keys.extend(cooled);
        // Pending writes: hot now, their invalidations again in this epoch;
        // cooled, held by the barrier if some member may serve them.
        let others: BTreeSet<NodeId> = members.iter().copied().filter(|&m| m != me).collect();
        let now = Instant::now();
        let must_ack = st.must_ack(&members, me, now);
        let mut invs = Vec::new();
        let st_ref = &mut *st;
        let home_now = &st_ref.group.as_ref().expect("installed").home;
        for p in st_ref.pending.values_mut() {
            if home_now.contains(&p.key) {
                p.epoch = epoch;
                p.barrier = false;
                // A member's wait counts from its first invalidation of
                // the write, whatever the epochs since.
                p.need = if strong {
                    must_ack.iter().map(|&m| (m, p.need.get(&m).copied().unwrap_or(now))).collect()
                } else {
                    BTreeMap::new()
                };
                if strong {
                    invs.push(Frame::Inv { ts: p.ts, key: p.key.clone() });
                }
            } else {
                p.need.clear();
                p.value = None;
                let barrier = st_ref.retired.holds(&p.key);
                if barrier && !p.barrier {
                    p.barrier_since = now;
                }
                p.barrier = barrier;
            }
        }
        for frame in &invs {
            for &m in &must_ack {
                send(&st, &self.stats, m, epoch, frame);
            }
        }
        for &m in &others {
            send(&st, &self.stats, m, epoch, &Frame::Installed);
        }
        self.rewatch(&mut st);
        self.update_hold(&st);
        drop(st);
        debug!("symmetric caching: installed {epoch:?}, {} keys homed here", fills.len());
        self.fill(n, fills, epoch);
        self.wake.notify_one();
    }

    /// Recomputes the watched keys (home keys and those the barrier
    /// holds) and drops timestamps of keys no longer watched.
    fn rewatch(&self, st: &mut State) {
        let st = &mut *st;
        let retired = &st.retired;
        st.retired_keys.retain(|k| retired.holds(k));
        let home = st.group.as_ref().map(|g| &g.home);
        st.watched = home
            .into_iter()
            .flatten()
            .chain(st.retired_keys.iter())
            .map(|k| key_hash(TableId(k.table), &k.key).0)
            .collect();
        let (home, retired_keys) = (st.group.as_ref().map(|g| &g.home), &st.retired_keys);
        st.stamped.retain(|k, _| home.is_some_and(|h| h.contains(k)) || retired_keys.contains(k));
        self.watching.store(!st.watched.is_empty(), Ordering::Release);
    }

    /// Sends each copy of `keys` (homed here) the value the store holds,
    /// read under the key's stripe lock, once it is on its backups.
    fn fill(&self, n: &ClusterNode, keys: Vec<Key>, epoch: EpochId) {
        let Some(store) = self.store.get().and_then(|s| s.upgrade()) else { return };
        for k in keys {
            let table = TableId(k.table);
            let _ = store.read_locked(table, &k.key, |found| {
                let mut st = self.state.lock();
                if st.group.as_ref().is_none_or(|g| g.epoch != epoch) {
                    return;
                }
                if st.pending.values().any(|p| p.key == k) {
                    // Its pending write's update fills the copies.
                    return;
                }
                let (ts, value) = match found {
                    Some((bytes, version, expiry)) => {
                        if expiry.is_some() || bytes.len() > MAX_VALUE {
                            return;
                        }
                        (
                            Ts { version: 2 * version.0, node: node(self.me) },
                            Value::Present { version: version.0, bytes: bytes.to_vec() },
                        )
                    }
                    None => (st.stamped.get(&k).copied().unwrap_or(Ts::ZERO), Value::Absent),
                };
                let id = st.next_pending;
                st.next_pending += 1;
                let at = n.position();
                st.pending.insert(
                    id,
                    Pending {
                        at,
                        key: k.clone(),
                        ts,
                        value: Some(value),
                        need: BTreeMap::new(),
                        barrier: false,
                        barrier_since: Instant::now(),
                        epoch,
                    },
                );
            });
        }
    }

    /// Barrier entries whose keys no member may serve any more stop holding.
    fn release_barriers(&self) {
        let mut st = self.state.lock();
        let st_ref = &mut *st;
        let mut changed = false;
        for p in st_ref.pending.values_mut() {
            if p.barrier && !st_ref.retired.holds(&p.key) {
                p.barrier = false;
                changed = true;
            }
        }
        if changed {
            self.rewatch(&mut st);
            self.update_hold(&st);
        }
    }

    fn event(&self, n: &ClusterNode, ev: Event, now: u64) {
        let Event::Frame { from, epoch, frame } = ev;
        let mut out = Vec::new();
        let mut st = self.state.lock();
        let Some(g) = st.group.as_mut() else { return };
        if !g.view.members().contains(&from) {
            return;
        }
        match frame {
            Frame::Report { entries } => {
                g.view.report(from, epoch.membership, entries, now, &mut out);
            }
            Frame::HotSet { consistency, keys } => {
                g.view.hot_set(from, epoch, keys, consistency, &mut out);
            }
            Frame::Installed => {
                let e = st.confirmed.entry(from).or_default();
                *e = (*e).max(epoch);
                st.retired.installed(from, epoch);
                drop(st);
                self.release_barriers();
                return;
            }
            Frame::Inv { ts, key } => {
                if epoch != g.epoch {
                    return;
                }
                self.stats.invalidations_received.fetch_add(1, Ordering::Relaxed);
                let mut acts = Vec::new();
                match g.copies.get_mut(&key) {
                    Some(c) => c.inv(from, ts, &mut acts),
                    // Not cached here: nothing to drop, acknowledged.
                    None => acts.push(KeyAction::SendAck { to: from, ts }),
                }
                for a in acts {
                    if let KeyAction::SendAck { to, ts } = a {
                        send(&st, &self.stats, to, epoch, &Frame::Ack { ts, key: key.clone() });
                    }
                }
            }
            Frame::Update { ts, key, value } => {
                if epoch != g.epoch {
                    return;
                }
                self.stats.updates_received.fetch_add(1, Ordering::Relaxed);
                if let Some(c) = g.copies.get_mut(&key) {
                    let mut acts = Vec::new();
                    c.update(ts, value, &mut acts);
                }
            }
            Frame::Ack { ts, key } => {
                if epoch != g.epoch {
                    return;
                }
                self.stats.acks_received.fetch_add(1, Ordering::Relaxed);
                let mut changed = false;
                for p in st.pending.values_mut() {
                    if p.epoch == epoch && p.ts == ts && p.key == key && p.need.remove(&from).is_some() {
                        changed = true;
                    }
                }
                if changed {
                    self.update_hold(&st);
                }
            }
            Frame::Lease { seq } => {
                drop(st);
                self.lease_asked(from, seq, epoch);
                return;
            }
            Frame::Grant { seq } => {
                drop(st);
                self.lease_granted(from, seq);
                return;
            }
            // Writes run at their home only (see the module comment).
            Frame::Persist { .. } | Frame::Persisted { .. } => {}
        }
        drop(st);
        self.group_actions(n, out, now);
    }
}

/// Queues `frame` of `epoch` to member `to` (dropped if its queue is full).
fn send(st: &State, stats: &ScStats, to: NodeId, epoch: EpochId, frame: &Frame) {
    let Some(tx) = st.peers.get(&to) else { return };
    let mut buf = Vec::new();
    if frame.encode(epoch, &mut buf).is_err() {
        return;
    }
    if tx.try_send(buf).is_err() {
        stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// A task sending the frames queued for member `to`, over a connection
/// to its backup port, dialled again when it breaks.
fn dial(me: ServerId, to: NodeId, addr: std::net::SocketAddr) -> mpsc::Sender<Vec<u8>> {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(PEER_QUEUE);
    tokio::spawn(async move {
        loop {
            let mut stream = match shoal_replication::dial::connect_peer(addr, me).await {
                Ok(s) => s,
                Err(e) => {
                    debug!("symmetric caching: cannot reach member {to} at {addr}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // Frames queued meanwhile are stale: drop them.
                    while rx.try_recv().is_ok() {}
                    if rx.is_closed() {
                        return;
                    }
                    continue;
                }
            };
            let mut batch = Vec::new();
            loop {
                let Some(first) = rx.recv().await else { return };
                batch.clear();
                batch.extend_from_slice(&first);
                while batch.len() < 1 << 16 {
                    match rx.try_recv() {
                        Ok(more) => batch.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
                if stream.write_all(&batch).await.is_err() || stream.flush().await.is_err() {
                    break;
                }
            }
        }
    });
    tx
}

/// The peer handler registered with the backup: reads frames from a
/// member and hands them to the driver.
pub struct ScPeers(pub Arc<OnceLock<Weak<Sc>>>);

impl shoal_replication::backup::PeerHandler for ScPeers {
    fn serve(
        &self,
        server: Option<ServerId>,
        addr: std::net::SocketAddr,
        mut stream: shoal_cluster::tls::InternalStream,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let sc = self.0.get().cloned().unwrap_or_default();
        Box::pin(async move {
            let Some(from) = server else {
                debug!("symmetric caching: a peer at {addr} named no server id");
                return;
            };
            let from = node(from);
            let mut head = [0u8; HEADER_LEN];
            let mut body = Vec::new();
            loop {
                if stream.read_exact(&mut head).await.is_err() {
                    return;
                }
                let h = match Header::decode(&head) {
                    Ok(h) => h,
                    Err(e) => {
                        warn!("symmetric caching: member {from} at {addr}: {e}; closing");
                        return;
                    }
                };
                body.resize(h.body_len, 0);
                if stream.read_exact(&mut body).await.is_err() {
                    return;
                }
                let frame = match wire::decode(h.kind, &body) {
                    Ok(f) => f,
                    Err(e) => {
                        warn!("symmetric caching: member {from} at {addr}: {e}; closing");
                        return;
                    }
                };
                if body.capacity() > 1 << 20 {
                    body = Vec::new();
                }
                let Some(sc) = sc.upgrade() else { return };
                if sc.inbox.send(Event::Frame { from, epoch: h.epoch, frame }).await.is_err() {
                    return;
                }
            }
        })
    }
}

/// The store's log observer on a server with symmetric caching: the
/// replicator, and the hot keys' writes for [`Sc`].
pub struct ScObserver {
    pub replicator: Arc<Replicator>,
    pub sc: Arc<Sc>,
}

impl LogObserver for ScObserver {
    fn segment_opened(&self, segment: SegmentId, kind: SegmentKind) {
        self.replicator.segment_opened(segment, kind)
    }
    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        self.replicator.appended(segment, offset, bytes)
    }
    fn segment_closed(&self, segment: SegmentId, len: u32, checksum: u32) {
        self.replicator.segment_closed(segment, len, checksum)
    }
    fn segments_freed(&self, survivors: &[SegmentId], freed: &[SegmentId]) {
        self.replicator.segments_freed(survivors, freed)
    }
    fn entries_appended(&self, entries: &mut dyn Iterator<Item = &[u8]>) {
        self.sc.entries_appended(entries, self.replicator.position())
    }
    fn position(&self) -> u64 {
        self.replicator.position()
    }
}
