//! The replicator's decision-making core: which segments have replicas
//! where, what each replica has been sent and has acknowledged, what to send
//! next, when a replica has failed, and how far the durable position goes.
//!
//! It does no I/O. The observer feeds it log events; the connection tasks
//! feed it the backups' answers and failures; [`State::pump`] turns all of
//! that into frames appended to each connection's outgoing buffer, new
//! connections to open and connections to drop, and replica floors for
//! the coordinator. The shell in `conn.rs` moves those bytes and requests.
//!
//! Replica epochs (`docs/recovery.md`, "Stale replicas"). Each segment has
//! an epoch, 1 at first, which every OPEN carries. When a replica that may
//! hold bytes leaves a segment's replicas before the segment is closed on
//! all of them (its connection failed, its backup left the cluster, R went
//! down; not a REFUSED, which left nothing behind), the segment's epoch is
//! raised: new replicas open at the new epoch and the remaining ones are
//! sent EPOCH. Until the coordinator has recorded the new epoch as the
//! segment's floor, nothing of the segment beyond what every replica had
//! acknowledged at the loss (`Seg::hold`) counts as durable, and the
//! segment is not retired: so a replica left behind holds every write
//! acknowledged until it is declared stale. The floor is asked for once
//! every replica confirmed the epoch and holds those bytes (a copy's new
//! replicas: once closed).
//!
//! Head floors (`docs/recovery.md`, "Head floors"). Nothing written to a
//! head counts as durable, and the head is not retired, until the
//! coordinator has recorded a head floor at or above its id; the floor is
//! asked for once the head's opening (header, digest, safe version, up to
//! its first checksum entry) is acknowledged by every replica the segment
//! must have. So every write acknowledged to a client lies in a head at or
//! below the log's floor, and the floor never names a head whose digest is
//! on fewer than R backups: recovery, which takes no head below the floor,
//! never recovers the log short of an acknowledged write.

use crate::master::{FloorRequest, ReplicationMode, ReplicationStats};
use crate::wire::{self, Hello, Kind, Mode};
use shoal_cluster::control::MAX_FLOORS_PER_REQUEST;
use shoal_cluster::ServerId;
use shoal_common::{LogId, SegmentId};
use shoal_engine::format::{self, EntryType};
use shoal_engine::SegmentKind;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

/// How long a backup whose connection failed is passed over.
const DOWN_BACKOFF: Duration = Duration::from_millis(500);
/// How long a segment that found no backup to place a replica on waits
/// before it tries again (also forgetting which backups refused it).
const PLACE_BACKOFF: Duration = Duration::from_millis(50);
/// Segment buffers kept for reuse (each up to a segment's size).
const SPARE_BUFFERS: usize = 4;
/// Closed segments being re-replicated at once (fetched or being sent):
/// bounds the master's memory for copies to this many segments.
const MAX_COPIES: usize = 2;
/// A copy's DATA goes out in pieces of this size, with at most
/// `COPY_WINDOW` bytes unacknowledged, so that the head's DATA on the same
/// connection never queues behind a whole segment.
const COPY_CHUNK: u32 = 512 << 10;
const COPY_WINDOW: u32 = 2 << 20;
/// A closed segment whose bytes could not be had (not in the log, and not
/// freed either: a survivor not yet spliced in) is asked for again after this.
const FETCH_BACKOFF: Duration = Duration::from_millis(200);
/// After a failed attempt to record replica floors at the coordinator, the
/// next one waits this long.
const FLOOR_BACKOFF: Duration = Duration::from_millis(500);

/// The settings the core needs.
pub(crate) struct Settings {
    pub master: ServerId,
    pub log: LogId,
    pub log_version: u64,
    pub segment_bytes: u32,
    pub mode: ReplicationMode,
    pub replica_timeout: Duration,
    /// Floors go to the coordinator (through the shell); without one they
    /// count as recorded at once (a master outside a cluster, tests).
    pub record_floors: bool,
}

/// One replica of a segment on one backup, over one connection instance.
struct Replica {
    backup: ServerId,
    /// The connection instance it was opened on (see [`Conn::gen`]).
    gen: u64,
    /// OPENED came back.
    opened: bool,
    /// Bytes sent (DATA or APPEND), from offset 0.
    sent: u32,
    /// Bytes the backup acknowledged (ACK or APPENDED), cumulative.
    acked: u32,
    close_sent: bool,
    /// CLOSED came back.
    closed: bool,
    /// The epoch the backup was given (OPEN, then EPOCH) and the one it
    /// confirmed (OPENED, EPOCHED).
    epoch_sent: u64,
    epoch_acked: u64,
    /// When the replica last made progress or last started waiting for an
    /// answer: an answer overdue by `replica_timeout` fails the connection.
    since: Instant,
}

impl Replica {
    /// Waiting for an answer from the backup.
    fn outstanding(&self) -> bool {
        !self.opened
            || self.sent > self.acked
            || (self.close_sent && !self.closed)
            || self.epoch_sent > self.epoch_acked
    }
}

/// A closed replica of a copy's segment that survived elsewhere.
struct Kept {
    backup: ServerId,
    /// As [`Replica`]: the epoch sent (EPOCH) and confirmed (EPOCHED).
    epoch_sent: u64,
    epoch_acked: u64,
    /// When its EPOCH went out (an answer overdue fails the connection).
    since: Instant,
}

/// A segment whose replicas are not all closed yet. Its bytes are kept so
/// that a replica can be re-opened elsewhere and sent everything again.
struct Seg {
    kind: SegmentKind,
    bytes: Vec<u8>,
    /// segment_closed was seen: (length, last checksum).
    closed: Option<(u32, u32)>,
    /// Replicas this segment gets (the latest R; None: R unknown yet).
    r: Option<u32>,
    replicas: Vec<Replica>,
    /// Backups that refused or failed this segment (not tried again until
    /// the placement backoff passes).
    tried: Vec<ServerId>,
    /// No backup was available: try again at this time.
    retry_at: Option<Instant>,
    /// A head: segments that must be closed on all replicas before its OPEN.
    barrier: Vec<SegmentId>,
    /// The cleaner freed it before its replicas were all closed.
    freed: bool,
    /// A re-replication of a closed segment (since when its replica was
    /// lost): its bytes came from the store, its close item is long past,
    /// so it holds back neither the durable position nor a head's OPEN.
    copy: Option<Instant>,
    /// A copy's replicas that survived elsewhere (closed, counted toward R).
    kept: Vec<Kept>,
    /// Backups that held a replica and were lost (still sent FREE, if they
    /// are listed again, so a replica left behind there is dropped).
    stale: Vec<ServerId>,
    /// The segment's replica epoch: what an OPEN carries now (see the
    /// module comment).
    epoch: u64,
    /// The highest epoch the coordinator recorded as this segment's floor
    /// (1: none, nothing is stale).
    floor: u64,
    /// While `floor < epoch`: the bytes every replica had acknowledged when
    /// one was lost; nothing beyond counts as durable until the floor is
    /// recorded.
    hold: u32,
    /// A head whose head floor the coordinator has not recorded yet: none of
    /// its bytes counts as durable (with R > 0).
    head_floor_wanted: bool,
    /// A head's opening bytes, up to and with its first checksum entry (0
    /// until they have all been appended).
    opening: u32,
}

impl Seg {
    /// Bytes acknowledged by every replica it must have (and, while a new
    /// epoch waits for its floor, no more than `hold`).
    fn acked_all(&self) -> u32 {
        let acked = match self.r {
            None => 0,
            Some(0) => u32::MAX,
            Some(r) if self.replicas.len() < r as usize => 0,
            Some(_) => self.replicas.iter().map(|x| x.acked).min().unwrap_or(0),
        };
        if self.head_floor_wanted && self.r != Some(0) {
            0
        } else if self.floor < self.epoch {
            acked.min(self.hold)
        } else {
            acked
        }
    }

    /// Whether this head's floor may be recorded now: its opening is
    /// acknowledged by every replica it must have (R > 0).
    fn head_floor_due(&self) -> bool {
        if !self.head_floor_wanted || self.opening == 0 {
            return false;
        }
        match self.r {
            None | Some(0) => false,
            Some(r) => {
                self.replicas.len() >= self.wanted(r)
                    && self.replicas.iter().all(|x| x.opened && x.acked >= self.opening)
            }
        }
    }

    /// Sets `opening` once the head's first checksum entry has been
    /// appended (the opening group may come in several pieces).
    fn find_opening(&mut self) {
        for item in format::EntryIter::new(&self.bytes) {
            match item {
                Ok((at, format::Entry::Checksum(_))) => {
                    self.opening = (at + format::CHECKSUM_ENTRY_BYTES) as u32;
                    return;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }

    fn fully_closed(&self) -> bool {
        match self.r {
            None => false,
            Some(r) => {
                self.closed.is_some()
                    && self.replicas.len() + self.kept.len() >= r as usize
                    && self.replicas.iter().all(|x| x.closed)
                    && self.floor >= self.epoch
                    && (!self.head_floor_wanted || r == 0)
            }
        }
    }

    /// A replica that may hold bytes of this segment is about to leave it:
    /// raises the epoch, so that the replica (and any other left behind)
    /// is stale once the new floor is recorded, and holds the durable
    /// bytes of the segment where they are until then.
    fn raise_epoch(&mut self) {
        self.hold = self.acked_all();
        self.epoch += 1;
    }

    /// The epoch whose floor may be recorded now, if one is due: every
    /// replica the segment must have confirmed the epoch and holds what
    /// counted as durable (a copy's new replicas: all of it, closed), and
    /// a copy's kept replicas confirmed the epoch.
    fn floor_due(&self) -> Option<u64> {
        if self.floor >= self.epoch {
            return None;
        }
        if self.replicas.len() < self.wanted(self.r?) {
            return None;
        }
        let caught_up = self.replicas.iter().all(|x| {
            x.opened && x.epoch_acked >= self.epoch && if self.copy.is_some() { x.closed } else { x.acked >= self.hold }
        });
        let kept = self.kept.iter().all(|k| k.epoch_acked >= self.epoch);
        (caught_up && kept).then_some(self.epoch)
    }

    /// Replicas to place on new backups (R less the copies kept elsewhere).
    fn wanted(&self, r: u32) -> usize {
        (r as usize).saturating_sub(self.kept.len())
    }
}

/// Where the replicas of a segment closed on all of them are.
struct Done {
    holders: Vec<ServerId>,
    /// Backups that were holders once and were lost (FREE goes there too).
    stale: Vec<ServerId>,
    /// The holders' epoch, recorded as the segment's floor.
    epoch: u64,
}

/// A closed segment that lost a replica and waits for its bytes (from the
/// store) to be copied to a new backup.
struct Pending {
    /// Backups still holding a closed replica.
    holders: Vec<ServerId>,
    stale: Vec<ServerId>,
    /// Its bytes are being fetched from the store.
    fetching: bool,
    /// Not fetched before this (the store did not have it last time).
    retry_at: Option<Instant>,
    /// When the replica was lost.
    since: Instant,
    /// The holders' epoch (its copy raises it).
    epoch: u64,
}

/// One stretch of the log position, in observer order.
#[derive(Clone, Copy)]
enum Item {
    /// Bytes `start..end` of `seg`; the log position just after them.
    Bytes { seg: SegmentId, start: u32, end: u32, pos_end: u64 },
    /// `seg` was closed when the log position was `pos`.
    Close { seg: SegmentId, pos: u64 },
    /// Bytes up to `pos` that need no replica.
    Mark { pos: u64 },
}

/// A connection to one backup. `out` is what the writer sends next.
pub(crate) struct Conn {
    pub addr: SocketAddr,
    /// Unique per connection instance, so that answers and failures of a
    /// dropped connection are never applied to its successor.
    pub gen: u64,
    pub out: Vec<u8>,
    /// `out` gained bytes since the writer was last woken.
    pub dirty: bool,
    /// The task running the connection; None until the shell spawns it.
    pub task: Option<AbortHandle>,
    /// HELLO_OK came back.
    pub hello_ok: bool,
    pub wake: std::sync::Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct Counters {
    rounds: u64,
    round_bytes: u64,
    round_bytes_max: u64,
    round_appends: u64,
    round_appends_max: u64,
    bytes_replicated: u64,
    replicas_opened: u64,
    replicas_closed: u64,
    replicas_reopened: u64,
    refusals: u64,
    segments_freed: u64,
    segments_rereplicated: u64,
    rereplication_bytes: u64,
    epochs_raised: u64,
    floors_recorded: u64,
    head_floors_recorded: u64,
}

/// Everything the replicator knows; behind one mutex shared by the
/// observer (which only appends) and the replication thread.
pub(crate) struct State {
    pub settings: Settings,
    /// R; None until the first `set_backups`.
    replicas: Option<u32>,
    candidates: Vec<(ServerId, SocketAddr)>,
    segs: HashMap<SegmentId, Seg>,
    /// Segments closed on all their replicas, with the backups holding them
    /// (kept until the cleaner frees them).
    done: HashMap<SegmentId, Done>,
    /// Closed segments that lost a replica, waiting to be copied (in id
    /// order; at most `MAX_COPIES` are fetched or in `segs` at once).
    pending: BTreeMap<SegmentId, Pending>,
    items: VecDeque<Item>,
    /// Freed segments, with the log position their FREE waits for.
    frees: VecDeque<(u64, Vec<SegmentId>)>,
    pub position: u64,
    pub durable: u64,
    pub conns: HashMap<ServerId, Conn>,
    next_gen: u64,
    down: HashMap<ServerId, Instant>,
    /// Connections dropped since the shell last looked: their tasks to abort.
    pub killed: Vec<AbortHandle>,
    /// `appended` calls and log position at the last round.
    appends_since_round: u64,
    round_mark: u64,
    counters: Counters,
    spare_bufs: Vec<Vec<u8>>,
    scratch: Vec<SegmentId>,
    /// Floors for the shell to send to the coordinator.
    pub floors_out: FloorRequest,
    /// The highest head floor recorded at the coordinator.
    head_floor: SegmentId,
    /// A floor request is with the coordinator (one at a time).
    floors_in_flight: bool,
    /// The last one failed: the next not before this.
    floors_retry_at: Option<Instant>,
    pub shut: bool,
}

impl State {
    pub fn new(settings: Settings) -> State {
        State {
            settings,
            replicas: None,
            candidates: Vec::new(),
            segs: HashMap::new(),
            done: HashMap::new(),
            pending: BTreeMap::new(),
            items: VecDeque::new(),
            frees: VecDeque::new(),
            position: 0,
            durable: 0,
            conns: HashMap::new(),
            next_gen: 1,
            down: HashMap::new(),
            killed: Vec::new(),
            appends_since_round: 0,
            round_mark: 0,
            counters: Counters::default(),
            spare_bufs: Vec::new(),
            scratch: Vec::new(),
            floors_out: FloorRequest::default(),
            head_floor: SegmentId(0),
            floors_in_flight: false,
            floors_retry_at: None,
            shut: false,
        }
    }

    // ----------------------------------------------------------------------
    // Log events (the observer, under the log's lock: quick, no I/O).

    pub fn opened(&mut self, id: SegmentId, kind: SegmentKind) {
        let barrier = match kind {
            SegmentKind::Head => {
                // Copies of closed segments are no barrier: writes wait
                // only for the head.
                self.segs.iter().filter(|(_, s)| s.closed.is_some() && s.copy.is_none()).map(|(id, _)| *id).collect()
            }
            SegmentKind::Survivor => Vec::new(),
        };
        let cap = self.settings.segment_bytes as usize;
        let bytes = self.spare_bufs.pop().unwrap_or_else(|| Vec::with_capacity(cap));
        let seg = Seg {
            kind,
            bytes,
            closed: None,
            r: self.replicas,
            replicas: Vec::new(),
            tried: Vec::new(),
            retry_at: None,
            barrier,
            freed: false,
            copy: None,
            kept: Vec::new(),
            stale: Vec::new(),
            epoch: 1,
            floor: 1,
            hold: 0,
            head_floor_wanted: kind == SegmentKind::Head && id > self.head_floor,
            opening: 0,
        };
        self.segs.insert(id, seg);
    }

    /// Returns true if the durable position moved (R = 0 needs no thread).
    pub fn appended(&mut self, id: SegmentId, offset: u32, bytes: &[u8]) -> bool {
        let n = bytes.len() as u64;
        self.position += n;
        self.appends_since_round += 1;
        let Some(seg) = self.segs.get_mut(&id) else {
            // Not announced (never happens with the engine's log): its bytes
            // cannot be replicated, so they never hold durability back.
            return self.skip_if_idle();
        };
        debug_assert_eq!(offset as usize, seg.bytes.len(), "appended out of order");
        seg.bytes.extend_from_slice(bytes);
        if seg.head_floor_wanted && seg.opening == 0 {
            seg.find_opening();
        }
        if seg.r == Some(0) {
            return self.skip_if_idle();
        }
        let end = offset + bytes.len() as u32;
        if let Some(Item::Bytes { seg: s, end: e, pos_end, .. }) = self.items.back_mut() {
            if *s == id && *e == offset {
                *e = end;
                *pos_end = self.position;
                return false;
            }
        }
        self.items.push_back(Item::Bytes { seg: id, start: offset, end, pos_end: self.position });
        false
    }

    /// With nothing queued before them, bytes that need no replica are
    /// durable at once.
    fn skip_if_idle(&mut self) -> bool {
        if self.items.is_empty() {
            self.durable = self.position;
            true
        } else {
            self.items.push_back(Item::Mark { pos: self.position });
            false
        }
    }

    pub fn closed(&mut self, id: SegmentId, len: u32, checksum: u32) {
        if let Some(seg) = self.segs.get_mut(&id) {
            debug_assert_eq!(len as usize, seg.bytes.len());
            seg.closed = Some((len, checksum));
            if seg.r != Some(0) {
                self.items.push_back(Item::Close { seg: id, pos: self.position });
            }
        }
    }

    pub fn freed(&mut self, freed: &[SegmentId]) {
        if !freed.is_empty() {
            self.frees.push_back((self.position, freed.to_vec()));
        }
    }

    // ----------------------------------------------------------------------
    // The cluster.

    pub fn set_backups(&mut self, mut candidates: Vec<(ServerId, SocketAddr)>, replicas: u32, now: Instant) {
        let me = self.settings.master;
        candidates.retain(|(id, _)| *id != me);
        candidates.sort_by_key(|c| c.0);
        candidates.dedup_by_key(|c| c.0);
        self.candidates = candidates;
        self.replicas = Some(replicas);
        // Segments not yet closed everywhere follow the new R: a cluster
        // that shrank below the old R must not stall writes for ever.
        let mut extra: Vec<(ServerId, u64, SegmentId)> = Vec::new();
        for (id, seg) in self.segs.iter_mut() {
            let Some(r) = seg.r else { continue };
            if r == replicas {
                continue;
            }
            seg.r = Some(replicas);
            let want = seg.wanted(replicas);
            if seg.replicas.len() > want {
                // Keep the most advanced replicas; free the others (a FREE
                // may never arrive: they are stale from the next floor on).
                seg.replicas.sort_by_key(|x| std::cmp::Reverse((x.closed, x.acked)));
                seg.raise_epoch();
                self.counters.epochs_raised += 1;
                for x in seg.replicas.drain(want..) {
                    extra.push((x.backup, x.gen, *id));
                }
            }
        }
        for (backup, gen, id) in extra {
            if let Some(c) = self.conns.get_mut(&backup).filter(|c| c.gen == gen) {
                wire::encode_empty(Kind::Free, id, &mut c.out);
                c.dirty = true;
            }
        }
        let gone: Vec<ServerId> =
            self.conns.keys().copied().filter(|id| !self.candidates.iter().any(|c| c.0 == *id)).collect();
        for id in gone {
            let gen = self.conns[&id].gen;
            self.fail_conn(id, gen, "the backup left the cluster", now);
        }
        // A backup whose address changed is a new process: reconnect.
        let moved: Vec<(ServerId, u64)> = self
            .conns
            .iter()
            .filter(|(id, c)| self.candidates.iter().any(|(i, a)| i == *id && *a != c.addr))
            .map(|(id, c)| (*id, c.gen))
            .collect();
        for (id, gen) in moved {
            self.fail_conn(id, gen, "the backup moved to another address", now);
        }
        // Closed segments with a replica on a backup no longer listed (with
        // or without a connection to it) need a new one.
        let mut holders: Vec<ServerId> = self
            .done
            .values()
            .flat_map(|d| d.holders.iter())
            .chain(self.pending.values().flat_map(|p| p.holders.iter()))
            .chain(self.segs.values().flat_map(|s| s.kept.iter().map(|k| &k.backup)))
            .copied()
            .filter(|b| !self.candidates.iter().any(|c| c.0 == *b))
            .collect();
        holders.sort_unstable();
        holders.dedup();
        for b in holders {
            self.lose_closed(b, "the backup left the cluster", now);
        }
    }

    /// Backup `b` is gone, or may be (its connection failed): every closed
    /// segment with a replica there needs a new one. Its other replicas
    /// are kept and counted; `b` gets FREE if it is ever listed again.
    fn lose_closed(&mut self, b: ServerId, why: &str, now: Instant) {
        let hit: Vec<SegmentId> = self.done.iter().filter(|(_, d)| d.holders.contains(&b)).map(|(id, _)| *id).collect();
        let mut n = hit.len();
        for id in hit {
            let mut d = self.done.remove(&id).expect("listed");
            d.holders.retain(|h| *h != b);
            d.stale.push(b);
            let p = Pending {
                holders: d.holders,
                stale: d.stale,
                fetching: false,
                retry_at: None,
                since: now,
                epoch: d.epoch,
            };
            self.pending.insert(id, p);
        }
        for p in self.pending.values_mut().filter(|p| p.holders.contains(&b)) {
            p.holders.retain(|h| *h != b);
            p.stale.push(b);
            n += 1;
        }
        for seg in self.segs.values_mut().filter(|s| s.kept.iter().any(|k| k.backup == b)) {
            seg.raise_epoch();
            self.counters.epochs_raised += 1;
            seg.kept.retain(|k| k.backup != b);
            seg.stale.push(b);
            n += 1;
        }
        if n > 0 {
            warn!("backup {b} lost ({why}): {n} closed segment(s) had a replica there; re-replicating them");
        }
    }

    // ----------------------------------------------------------------------
    // Re-replication of closed segments (the shell fetches their bytes).

    /// Closed segments whose bytes the shell should fetch from the store
    /// now (marked as being fetched). None while there is no source.
    pub fn take_fetches(&mut self, now: Instant, have_source: bool) -> Vec<SegmentId> {
        let Some(r) = self.replicas else { return Vec::new() };
        // Enough replicas left after all (R went down): nothing to copy.
        let enough: Vec<SegmentId> =
            self.pending.iter().filter(|(_, p)| p.holders.len() >= r as usize).map(|(id, _)| *id).collect();
        for id in enough {
            let p = self.pending.remove(&id).expect("listed");
            self.done.insert(id, Done { holders: p.holders, stale: p.stale, epoch: p.epoch });
        }
        if !have_source {
            return Vec::new();
        }
        let mut busy = self.segs.values().filter(|s| s.copy.is_some()).count()
            + self.pending.values().filter(|p| p.fetching).count();
        let mut out = Vec::new();
        for (id, p) in self.pending.iter_mut() {
            if busy >= MAX_COPIES {
                break;
            }
            if p.fetching || p.retry_at.is_some_and(|t| now < t) {
                continue;
            }
            p.fetching = true;
            p.retry_at = None;
            busy += 1;
            out.push(*id);
        }
        out
    }

    /// The store's answer for a fetched segment: its bytes (start copying
    /// them), or None (it is not in the log).
    pub fn copy_ready(&mut self, id: SegmentId, bytes: Option<Vec<u8>>, now: Instant) {
        // Freed (FREE sent) while it was fetched: nothing to copy.
        if !self.pending.get(&id).is_some_and(|p| p.fetching) {
            return;
        }
        let p = self.pending.remove(&id).expect("listed");
        let Some(mut bytes) = bytes else {
            if self.frees.iter().any(|(_, ids)| ids.contains(&id)) {
                // It left the log; its FREE is on the way: just forget it.
                debug!("segment {} left the log before its re-replication", id.0);
                self.done.insert(id, Done { holders: p.holders, stale: p.stale, epoch: p.epoch });
            } else {
                // Not in the log yet (a survivor before its splice).
                let retry_at = Some(now + FETCH_BACKOFF);
                self.pending.insert(id, Pending { fetching: false, retry_at, ..p });
            }
            return;
        };
        let scan = format::scan(&bytes);
        if scan.verified_len < bytes.len() {
            warn!(
                "segment {} verifies to {} of its {} bytes in memory; copying the verified part",
                id.0,
                scan.verified_len,
                bytes.len()
            );
            bytes.truncate(scan.verified_len);
        }
        if bytes.is_empty() {
            warn!("segment {} has no verified bytes in memory; not re-replicated", id.0);
            self.done.insert(id, Done { holders: p.holders, stale: p.stale, epoch: p.epoch });
            return;
        }
        // A replica was lost: the copy and the kept replicas move to the
        // next epoch.
        let epoch = p.epoch + 1;
        self.counters.epochs_raised += 1;
        info!(
            "re-replicating closed segment {} ({} bytes, replicas left on {:?}) at epoch {epoch}",
            id.0,
            bytes.len(),
            p.holders.iter().map(|h| h.0).collect::<Vec<_>>()
        );
        let closed = Some((bytes.len() as u32, scan.last_checksum));
        let kept = p
            .holders
            .iter()
            .map(|&backup| Kept { backup, epoch_sent: p.epoch, epoch_acked: p.epoch, since: now })
            .collect();
        self.segs.insert(
            id,
            Seg {
                // Not a head (the flag is informational for the backup).
                kind: SegmentKind::Survivor,
                bytes,
                closed,
                r: self.replicas,
                replicas: Vec::new(),
                tried: Vec::new(),
                retry_at: None,
                barrier: Vec::new(),
                freed: false,
                copy: Some(p.since),
                kept,
                stale: p.stale,
                epoch,
                floor: p.epoch,
                hold: 0,
                // Closed long ago: any head floor it needed is recorded.
                head_floor_wanted: false,
                opening: 0,
            },
        );
    }

    // ----------------------------------------------------------------------
    // Backups' answers (from the connection tasks).

    /// Applies one frame from backup `id` over connection `gen`. An error
    /// means the connection must be dropped.
    pub fn on_frame(
        &mut self,
        id: ServerId,
        gen: u64,
        kind: Kind,
        segment: SegmentId,
        body: &[u8],
        now: Instant,
    ) -> Result<(), String> {
        let Some(conn) = self.conns.get_mut(&id).filter(|c| c.gen == gen) else {
            return Ok(());
        };
        if !conn.hello_ok {
            return match kind {
                Kind::HelloOk => {
                    conn.hello_ok = true;
                    Ok(())
                }
                Kind::Error => Err(format!("backup refused the connection: {}", wire::decode_text(body))),
                k => Err(format!("expected HELLO_OK, got {k:?}")),
            };
        }
        if kind == Kind::Error {
            return Err(format!("backup error: {}", wire::decode_text(body)));
        }
        let Some(seg) = self.segs.get_mut(&segment) else {
            // A late answer about a replica already done with or dropped.
            return match kind {
                Kind::Ack | Kind::Opened | Kind::Refused | Kind::Closed | Kind::Appended | Kind::Epoched => Ok(()),
                k => Err(format!("unexpected {k:?} from a backup")),
            };
        };
        if kind == Kind::Epoched {
            let e = wire::decode_epoch(body).map_err(|e| e.to_string())?;
            let (acked, sent) = if let Some(r) = seg.replicas.iter_mut().find(|r| r.backup == id && r.gen == gen) {
                if !r.opened {
                    // An answer to an earlier replica of the segment there
                    // (dropped as surplus): its OPEN comes first.
                    return Ok(());
                }
                r.since = now;
                (&mut r.epoch_acked, r.epoch_sent)
            } else if let Some(k) = seg.kept.iter_mut().find(|k| k.backup == id) {
                k.since = now;
                (&mut k.epoch_acked, k.epoch_sent)
            } else {
                return Ok(()); // a replica dropped meanwhile
            };
            if e > sent {
                return Err(format!("EPOCHED {e} for segment {}, which was sent {sent}", segment.0));
            }
            *acked = (*acked).max(e);
            return Ok(());
        }
        let Some(ix) = seg.replicas.iter().position(|r| r.backup == id && r.gen == gen) else {
            return Ok(());
        };
        let r = &mut seg.replicas[ix];
        match kind {
            Kind::Opened => {
                if r.opened {
                    return Err(format!("OPENED twice for segment {}", segment.0));
                }
                r.opened = true;
                r.epoch_acked = r.epoch_sent;
                r.since = now;
            }
            Kind::Refused => {
                if r.opened {
                    return Err(format!("REFUSED after OPENED for segment {}", segment.0));
                }
                warn!(
                    "backup {id} refused a replica of segment {} ({}); opening it elsewhere",
                    segment.0,
                    wire::decode_text(body)
                );
                // Nothing was left there: the epoch stays.
                seg.replicas.swap_remove(ix);
                seg.tried.push(id);
                self.counters.refusals += 1;
                self.counters.replicas_reopened += 1;
            }
            Kind::Ack | Kind::Appended => {
                let what = if kind == Kind::Ack { "ACK" } else { "APPENDED" };
                let n = wire::decode_u32(body, what).map_err(|e| e.to_string())?;
                if n > r.sent || n < r.acked {
                    return Err(format!(
                        "{what} of {n} bytes for segment {} (sent {}, acknowledged {})",
                        segment.0, r.sent, r.acked
                    ));
                }
                r.acked = n;
                r.since = now;
            }
            Kind::Closed => {
                let n = wire::decode_u32(body, "CLOSED").map_err(|e| e.to_string())?;
                if !r.close_sent || r.closed || Some(n) != seg.closed.map(|c| c.0) {
                    return Err(format!("unexpected CLOSED of {n} bytes for segment {}", segment.0));
                }
                r.closed = true;
                r.acked = n;
                r.since = now;
                self.counters.replicas_closed += 1;
            }
            k => return Err(format!("unexpected {k:?} from a backup")),
        }
        Ok(())
    }

    /// Drops connection `gen` to backup `id`: every replica on it is
    /// re-opened elsewhere.
    pub fn fail_conn(&mut self, id: ServerId, gen: u64, why: &str, now: Instant) {
        let Some(conn) = self.conns.get(&id) else { return };
        if conn.gen != gen {
            return;
        }
        let conn = self.conns.remove(&id).expect("present");
        if let Some(t) = conn.task {
            self.killed.push(t);
        }
        self.down.insert(id, now + DOWN_BACKOFF);
        self.lose_closed(id, why, now);
        for (sid, seg) in self.segs.iter_mut() {
            if !seg.replicas.iter().any(|r| r.backup == id && r.gen == gen) {
                continue;
            }
            // It may hold bytes (whatever its OPEN's fate): a new epoch.
            seg.raise_epoch();
            seg.replicas.retain(|r| !(r.backup == id && r.gen == gen));
            warn!(
                "replica of segment {} on backup {id} lost ({why}); re-opening it elsewhere at epoch {}",
                sid.0, seg.epoch
            );
            seg.tried.push(id);
            self.counters.replicas_reopened += 1;
            self.counters.epochs_raised += 1;
        }
    }

    /// The floors the shell's request recorded at the coordinator (`ok`),
    /// or failed to: those are asked for again after a backoff.
    pub fn floors_recorded(&mut self, floors: &FloorRequest, ok: bool, now: Instant) {
        self.floors_in_flight = false;
        if !ok {
            self.floors_retry_at = Some(now + FLOOR_BACKOFF);
            return;
        }
        for &(id, epoch) in &floors.replicas {
            if let Some(seg) = self.segs.get_mut(&id) {
                seg.floor = seg.floor.max(epoch);
            }
        }
        self.counters.floors_recorded += floors.replicas.len() as u64;
        if let Some(head) = floors.head {
            self.head_floor = self.head_floor.max(head);
            for (_, seg) in self.segs.iter_mut().filter(|(id, _)| **id <= head) {
                seg.head_floor_wanted = false;
            }
            self.counters.head_floors_recorded += 1;
        }
    }

    /// Floors due (see [`Seg::floor_due`]): recorded at once without a
    /// coordinator; otherwise queued in `floors_out` for the shell, unless
    /// a request is under way or backing off. Returns whether any floor
    /// was recorded.
    fn ask_floors(&mut self, now: Instant) -> bool {
        if self.floors_in_flight || self.floors_retry_at.is_some_and(|t| now < t) {
            return false;
        }
        let mut replicas: Vec<(SegmentId, u64)> =
            self.segs.iter().filter_map(|(id, s)| s.floor_due().map(|e| (*id, e))).collect();
        // The newest head due covers every older one.
        let head = self.segs.iter().filter(|(_, s)| s.head_floor_due()).map(|(id, _)| *id).max();
        if replicas.is_empty() && head.is_none() {
            return false;
        }
        replicas.sort_unstable();
        replicas.truncate(MAX_FLOORS_PER_REQUEST);
        let due = FloorRequest { replicas, head };
        if self.settings.record_floors {
            self.floors_in_flight = true;
            self.floors_retry_at = None;
            self.floors_out = due;
            return false;
        }
        self.floors_recorded(&due, true, now);
        true
    }

    // ----------------------------------------------------------------------
    // Deciding what to send.

    /// Places replicas, queues frames, fails stalled replicas, advances the
    /// durable position and sends due FREEs. Returns whether durable moved.
    pub fn pump(&mut self, now: Instant) -> bool {
        let new_bytes = self.position - self.round_mark;
        let replicated_before = self.counters.bytes_replicated;
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(self.segs.keys().copied());
        // Lower ids first: older segments (and their CLOSEs) go out first.
        ids.sort_unstable();
        let mut stalled: Vec<(ServerId, u64)> = Vec::new();
        // A segment retired may let a head's OPEN go out: go round again.
        loop {
            for &id in &ids {
                let Some(seg) = self.segs.get(&id) else { continue };
                if !seg.barrier.iter().all(|b| self.segs.get(b).is_none_or(|s| s.copy.is_some())) {
                    continue;
                }
                self.segs.get_mut(&id).expect("listed").barrier.clear();
                self.drive(id, now, &mut stalled);
            }
            for (b, gen) in stalled.drain(..) {
                warn!("backup {b} did not answer within {:?}", self.settings.replica_timeout);
                self.fail_conn(b, gen, "no answer in time", now);
            }
            self.ask_floors(now);
            let mut retired = false;
            for &id in &ids {
                if self.segs.get(&id).is_some_and(|s| s.fully_closed()) {
                    self.retire(id);
                    retired = true;
                }
            }
            if !retired {
                break;
            }
        }
        self.scratch = ids;
        if self.counters.bytes_replicated > replicated_before && new_bytes > 0 {
            let c = &mut self.counters;
            c.rounds += 1;
            c.round_bytes += new_bytes;
            c.round_bytes_max = c.round_bytes_max.max(new_bytes);
            c.round_appends += self.appends_since_round;
            c.round_appends_max = c.round_appends_max.max(self.appends_since_round);
            self.round_mark = self.position;
            self.appends_since_round = 0;
        }
        self.down.retain(|_, until| *until > now);
        let moved = self.advance_durable();
        self.send_frees();
        moved
    }

    /// Places and feeds the replicas of one segment.
    fn drive(&mut self, id: SegmentId, now: Instant, stalled: &mut Vec<(ServerId, u64)>) {
        let replicas = self.replicas;
        let seg = self.segs.get_mut(&id).expect("listed");
        if seg.r.is_none() {
            seg.r = replicas;
        }
        let Some(r) = seg.r else { return };
        let want = seg.wanted(r);
        if seg.replicas.len() < want {
            self.place(id, want, now);
        }
        let mode = self.settings.mode;
        let timeout = self.settings.replica_timeout;
        let seg = self.segs.get_mut(&id).expect("listed");
        for rep in seg.replicas.iter_mut() {
            let conn = self.conns.get_mut(&rep.backup).expect("a replica's connection exists");
            debug_assert_eq!(conn.gen, rep.gen);
            if rep.outstanding() && now.duration_since(rep.since) > timeout {
                stalled.push((rep.backup, rep.gen));
                continue;
            }
            if !rep.opened {
                continue;
            }
            if rep.epoch_sent < seg.epoch {
                // Before any DATA that follows: the backup applies it in order.
                if !rep.outstanding() {
                    rep.since = now;
                }
                wire::encode_epoch(Kind::Epoch, id, seg.epoch, &mut conn.out);
                conn.dirty = true;
                rep.epoch_sent = seg.epoch;
            }
            let len = seg.bytes.len() as u32;
            let from = rep.sent;
            let upto = match mode {
                // A copy goes in windowed pieces (see COPY_CHUNK).
                ReplicationMode::Tailwind if seg.copy.is_some() => {
                    if from - rep.acked >= COPY_WINDOW {
                        from
                    } else {
                        len.min(from + COPY_CHUNK)
                    }
                }
                ReplicationMode::Tailwind => len,
                ReplicationMode::Conventional if rep.acked == rep.sent => next_group_end(&seg.bytes, from),
                ReplicationMode::Conventional => from,
            };
            if upto > from {
                if !rep.outstanding() {
                    rep.since = now;
                }
                let kind = match mode {
                    ReplicationMode::Tailwind => Kind::Data,
                    ReplicationMode::Conventional => Kind::Append,
                };
                let body = &seg.bytes[from as usize..upto as usize];
                wire::encode_data_prefix(kind, id, from, body.len(), &mut conn.out);
                conn.out.extend_from_slice(body);
                conn.dirty = true;
                rep.sent = upto;
                self.counters.bytes_replicated += body.len() as u64;
                if seg.copy.is_some() {
                    self.counters.rereplication_bytes += body.len() as u64;
                }
            }
            if let Some((clen, ck)) = seg.closed {
                let all_sent = rep.sent == clen;
                let may = match mode {
                    ReplicationMode::Tailwind => all_sent,
                    ReplicationMode::Conventional => all_sent && rep.acked == clen,
                };
                if may && !rep.close_sent {
                    if !rep.outstanding() {
                        rep.since = now;
                    }
                    wire::encode_close(id, clen, ck, &mut conn.out);
                    conn.dirty = true;
                    rep.close_sent = true;
                }
            }
        }
        self.drive_kept(id, now, stalled);
    }

    /// Sends a copy's kept replicas the segment's epoch (EPOCH, answered
    /// once their backup recorded it durably) and fails those overdue.
    fn drive_kept(&mut self, id: SegmentId, now: Instant, stalled: &mut Vec<(ServerId, u64)>) {
        let timeout = self.settings.replica_timeout;
        let seg = self.segs.get_mut(&id).expect("listed");
        let epoch = seg.epoch;
        let mut due = Vec::new();
        for k in seg.kept.iter_mut() {
            if k.epoch_sent < epoch {
                k.epoch_sent = epoch;
                k.since = now;
                due.push(k.backup);
            } else if k.epoch_acked < k.epoch_sent && now.duration_since(k.since) > timeout {
                if let Some(c) = self.conns.get(&k.backup) {
                    stalled.push((k.backup, c.gen));
                }
            }
        }
        for b in due {
            // Listed, or it would have been lost already (`lose_closed`).
            let Some(&(_, addr)) = self.candidates.iter().find(|c| c.0 == b) else { continue };
            let conn = self.conn(b, addr);
            wire::encode_epoch(Kind::Epoch, id, epoch, &mut conn.out);
            conn.dirty = true;
        }
    }

    /// Opens replicas of `id` on randomly chosen backups until it has `r`,
    /// or no eligible backup is left.
    fn place(&mut self, id: SegmentId, r: usize, now: Instant) {
        use rand::seq::SliceRandom;
        let mut rng = rand::thread_rng();
        let mut eligible: Vec<(ServerId, SocketAddr)> = Vec::new();
        loop {
            let seg = self.segs.get_mut(&id).expect("listed");
            if seg.replicas.len() >= r {
                return;
            }
            if let Some(at) = seg.retry_at {
                if now < at {
                    return;
                }
                seg.retry_at = None;
                seg.tried.clear();
            }
            eligible.clear();
            eligible.extend(self.candidates.iter().copied().filter(|(b, _)| {
                !seg.replicas.iter().any(|x| x.backup == *b)
                    && !seg.kept.iter().any(|k| k.backup == *b)
                    && !seg.tried.contains(b)
                    && !self.down.contains_key(b)
            }));
            let Some(&(backup, addr)) = eligible.choose(&mut rng) else {
                seg.retry_at = Some(now + PLACE_BACKOFF);
                return;
            };
            let open = wire::Open {
                size: self.settings.segment_bytes,
                survivor: seg.kind == SegmentKind::Survivor,
                epoch: seg.epoch,
            };
            let conn = self.conn(backup, addr);
            wire::encode_open(id, &open, &mut conn.out);
            conn.dirty = true;
            let gen = conn.gen;
            self.segs.get_mut(&id).expect("listed").replicas.push(Replica {
                backup,
                gen,
                opened: false,
                sent: 0,
                acked: 0,
                close_sent: false,
                closed: false,
                epoch_sent: open.epoch,
                epoch_acked: 0,
                since: now,
            });
            self.counters.replicas_opened += 1;
        }
    }

    /// A segment closed on all its replicas: forget its bytes, remember
    /// where its replicas are.
    fn retire(&mut self, id: SegmentId) {
        let mut seg = self.segs.remove(&id).expect("listed");
        let holders: Vec<ServerId> =
            seg.replicas.iter().map(|r| r.backup).chain(seg.kept.iter().map(|k| k.backup)).collect();
        let mut stale = std::mem::take(&mut seg.stale);
        stale.retain(|b| !holders.contains(b));
        stale.sort_unstable();
        stale.dedup();
        if let Some(since) = seg.copy {
            self.counters.segments_rereplicated += 1;
            info!(
                "closed segment {} back to {} replicas ({:?}) {:?} after one was lost",
                id.0,
                holders.len(),
                holders.iter().map(|h| h.0).collect::<Vec<_>>(),
                since.elapsed()
            );
        }
        if seg.bytes.capacity() <= self.settings.segment_bytes as usize && self.spare_bufs.len() < SPARE_BUFFERS {
            seg.bytes.clear();
            self.spare_bufs.push(std::mem::take(&mut seg.bytes));
        }
        if seg.freed {
            self.free_on(id, &holders, &stale);
        } else if !holders.is_empty() || !stale.is_empty() {
            self.done.insert(id, Done { holders, stale, epoch: seg.epoch });
        }
    }

    /// Moves the durable position as far as the queue allows.
    fn advance_durable(&mut self) -> bool {
        let old = self.durable;
        let mut d = self.durable;
        while let Some(item) = self.items.front().copied() {
            match item {
                Item::Bytes { seg, start, end, pos_end } => {
                    // A copy (re-replication) holds nothing back.
                    let acked = self.segs.get(&seg).filter(|s| s.copy.is_none()).map_or(u32::MAX, |s| s.acked_all());
                    if acked >= end {
                        d = d.max(pos_end);
                        self.items.pop_front();
                        continue;
                    }
                    if acked > start {
                        d = d.max(pos_end - (end - acked) as u64);
                    }
                    break;
                }
                Item::Close { seg, pos } => {
                    if self.segs.get(&seg).is_none_or(|s| s.copy.is_some() || s.fully_closed()) {
                        d = d.max(pos);
                        self.items.pop_front();
                        continue;
                    }
                    // The segment lies wholly before `pos`: not yet there.
                    d = d.min(pos.saturating_sub(1)).max(old);
                    break;
                }
                Item::Mark { pos } => {
                    d = d.max(pos);
                    self.items.pop_front();
                }
            }
        }
        if self.items.is_empty() {
            d = d.max(self.position);
        }
        self.durable = d;
        d != old
    }

    /// Sends FREE for every freed segment whose splice's head is durable.
    fn send_frees(&mut self) {
        while self.frees.front().is_some_and(|(pos, _)| *pos <= self.durable) {
            let (_, ids) = self.frees.pop_front().expect("front");
            for id in ids {
                if let Some(d) = self.done.remove(&id) {
                    self.free_on(id, &d.holders, &d.stale);
                } else if let Some(p) = self.pending.remove(&id) {
                    info!("segment {} was cleaned before its re-replication: not copied", id.0);
                    self.free_on(id, &p.holders, &p.stale);
                } else if self.segs.get(&id).is_some_and(|s| s.copy.is_some()) {
                    // A copy under way: stop it and free every replica.
                    info!("segment {} was cleaned during its re-replication: copy dropped", id.0);
                    let seg = self.segs.remove(&id).expect("listed");
                    for r in &seg.replicas {
                        if let Some(c) = self.conns.get_mut(&r.backup).filter(|c| c.gen == r.gen) {
                            wire::encode_empty(Kind::Free, id, &mut c.out);
                            c.dirty = true;
                        }
                    }
                    let mut stale = seg.stale;
                    stale.retain(|b| !seg.replicas.iter().any(|r| r.backup == *b));
                    let kept: Vec<ServerId> = seg.kept.iter().map(|k| k.backup).collect();
                    self.free_on(id, &kept, &stale);
                } else if let Some(seg) = self.segs.get_mut(&id) {
                    seg.freed = true;
                }
            }
        }
    }

    fn free_on(&mut self, id: SegmentId, holders: &[ServerId], stale: &[ServerId]) {
        for b in holders.iter().chain(stale.iter().filter(|s| !holders.contains(s))) {
            // A backup no longer listed is gone: nothing to free there.
            let Some(&(_, addr)) = self.candidates.iter().find(|c| c.0 == *b) else { continue };
            let conn = self.conn(*b, addr);
            wire::encode_empty(Kind::Free, id, &mut conn.out);
            conn.dirty = true;
        }
        self.counters.segments_freed += 1;
    }

    /// The connection to `backup`, opened (HELLO queued) if there is none.
    fn conn(&mut self, backup: ServerId, addr: SocketAddr) -> &mut Conn {
        let s = &self.settings;
        let next_gen = &mut self.next_gen;
        self.conns.entry(backup).or_insert_with(|| {
            let gen = *next_gen;
            *next_gen += 1;
            let mut out = Vec::new();
            let mode = match s.mode {
                ReplicationMode::Tailwind => Mode::Tailwind,
                ReplicationMode::Conventional => Mode::Conventional,
            };
            Hello { mode, master: s.master, log: s.log, log_version: s.log_version }.encode(&mut out);
            Conn { addr, gen, out, dirty: true, task: None, hello_ok: false, wake: Default::default() }
        })
    }

    pub fn stats(&self) -> ReplicationStats {
        let c = &self.counters;
        let mean = |sum: u64| if c.rounds == 0 { 0.0 } else { sum as f64 / c.rounds as f64 };
        ReplicationStats {
            rounds: c.rounds,
            round_bytes_mean: mean(c.round_bytes),
            round_bytes_max: c.round_bytes_max,
            round_appends_mean: mean(c.round_appends),
            round_appends_max: c.round_appends_max,
            bytes_replicated: c.bytes_replicated,
            replicas_opened: c.replicas_opened,
            replicas_closed: c.replicas_closed,
            replicas_reopened: c.replicas_reopened,
            refusals: c.refusals,
            open_replicas: self.segs.values().map(|s| s.replicas.iter().filter(|r| !r.closed).count() as u64).sum(),
            segments_freed: c.segments_freed,
            segments_rereplicated: c.segments_rereplicated,
            rereplication_bytes: c.rereplication_bytes,
            epochs_raised: c.epochs_raised,
            floors_recorded: c.floors_recorded,
            head_floors_recorded: c.head_floors_recorded,
            floors_waiting: self.segs.values().filter(|s| s.floor < s.epoch).count() as u64,
            closed_segments_below_r: (self.pending.len() + self.segs.values().filter(|s| s.copy.is_some()).count())
                as u64,
            position: self.position,
            durable: self.durable,
            durable_lag: self.position - self.durable,
        }
    }
}

/// The end of the first whole append group at or after `from` (a group ends
/// with a checksum entry), or `from` if none is complete yet. Bytes that do
/// not parse are sent as they are, in one piece: the backup will refuse
/// them, which is the right outcome for a log that is not well formed.
fn next_group_end(bytes: &[u8], from: u32) -> u32 {
    let mut pos = from as usize;
    while pos < bytes.len() {
        let Ok(h) = format::read_header(&bytes[pos..]) else {
            return bytes.len() as u32;
        };
        let end = pos + h.total_len();
        if end > bytes.len() {
            break;
        }
        if h.entry_type == EntryType::Checksum {
            return end as u32;
        }
        pos = end;
    }
    from
}
