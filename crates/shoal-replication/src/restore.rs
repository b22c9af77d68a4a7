//! Reading replicas back from backups: the reader side of the protocol
//! (`docs/replication.md`, mode 2) and [`find_log`], which rebuilds a log
//! from the replicas scattered over many backups.
//!
//! Every replica is checked here again, whatever the backup said:
//! [`verify_replica`] runs Tailwind's Algorithm 1 (`format::scan`) and then
//! decodes every entry of the verified prefix with its own CRC, so a
//! replica is trusted only up to the last checksum entry before anything
//! wrong. A closed replica must verify to exactly its recorded length and
//! last checksum; an open one counts for its verified prefix.
//!
//! Replicas below their segment's floor ([`Floors`], the coordinator's
//! record of which replicas a master left behind) are stale and never
//! used, however long or closed they are: a segment whose only replicas
//! are stale has none (`Incomplete`, never a fallback to a stale one).

use crate::wire::{
    self, Header, Hello, KeyRange, Kind, Mode, PartInfo, ReplicaInfo, ReplicaState, WireError, HEADER_LEN,
};
use shoal_cluster::tls::InternalStream;
use shoal_cluster::{ClusterMap, ServerId};
use shoal_common::{LogId, SegmentId};
use shoal_engine::format::{self, Entry, SegmentHeaderView};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest frame body a reader accepts: a segment of the largest size the
/// engine can address (128 MiB) and its prefix. Bodies are read as they
/// arrive, so a lying length costs no more memory than the bytes sent.
const MAX_BODY: usize = (1 << 27) + 64;

/// Why reading from backups failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Connecting, reading or writing failed.
    #[error("backup {addr}: {source}")]
    Io {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The backup did not answer in time.
    #[error("backup {addr} did not answer within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    /// The backup sent something that is not a valid answer.
    #[error("backup {addr}: {source}")]
    Protocol {
        addr: SocketAddr,
        #[source]
        source: WireError,
    },
    /// The backup answered with a frame of the wrong kind.
    #[error("backup {addr} answered {kind:?} where {expected} was expected")]
    Unexpected { addr: SocketAddr, kind: Kind, expected: &'static str },
    /// The backup answered ERROR (for READ: it holds no such replica, or
    /// the one it holds is corrupt).
    #[error("backup {addr}: {message}")]
    Backup { addr: SocketAddr, message: String },
    /// Segments the log's digest names have no usable replica on any
    /// reachable backup; `unreachable` may hold them. Retry later.
    #[error("log incomplete: segments {missing:?} have no usable replica (unreachable backups: {unreachable:?})")]
    Incomplete { missing: Vec<SegmentId>, unreachable: Vec<SocketAddr> },
    /// Replicas hold data but none of them has a verified log digest: the
    /// head's replicas are all lost.
    #[error("no replica of the log's head: segments {segments:?} hold data but no log digest")]
    NoHead { segments: Vec<SegmentId> },
    /// A verified replica's entries do not decode.
    #[error("segment {segment}: {message}")]
    Corrupt { segment: SegmentId, message: String },
    /// The consumer of a streamed read went away.
    #[error("the replay stopped")]
    Closed,
}

// ---------------------------------------------------------------------------
// Replica and head floors

/// The floors of one log, from the coordinator's map:
/// * replica floors (`ClusterMap::replica_floors`): per segment, the lowest
///   replica epoch that is not stale. A segment not named has floor 1:
///   none of its replicas is stale;
/// * the head floor (`ClusterMap::head_floors`): the lowest segment that
///   may be taken as the log's head (`SegmentId(0)`: any). Its master
///   acknowledged writes in that head, so a head found below it would
///   recover the log short (`docs/recovery.md`, "Head floors").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Floors {
    replicas: BTreeMap<SegmentId, u64>,
    head: SegmentId,
}

impl Floors {
    /// No floors: every replica counts, any head does.
    pub fn none() -> Floors {
        Floors::default()
    }

    /// Every floor of `log` in `map`.
    pub fn of_log(map: &ClusterMap, log: LogId) -> Floors {
        map.replica_floors_of(log).collect::<Floors>().with_head(map.head_floor_of(log))
    }

    /// These floors with the head floor at `segment`.
    pub fn with_head(self, segment: SegmentId) -> Floors {
        Floors { head: segment, ..self }
    }

    /// The lowest segment that may be the log's head.
    pub fn head(&self) -> SegmentId {
        self.head
    }

    /// The floor of `segment`.
    pub fn of(&self, segment: SegmentId) -> u64 {
        self.replicas.get(&segment).copied().unwrap_or(1)
    }

    /// Whether a replica of `segment` at `epoch` is stale.
    pub fn stale(&self, segment: SegmentId, epoch: u64) -> bool {
        epoch < self.of(segment)
    }
}

impl FromIterator<(SegmentId, u64)> for Floors {
    /// Floors from `(segment, epoch)` pairs; the highest wins for a segment
    /// named twice.
    fn from_iter<I: IntoIterator<Item = (SegmentId, u64)>>(iter: I) -> Floors {
        let mut m = BTreeMap::new();
        for (s, e) in iter {
            let f: &mut u64 = m.entry(s).or_insert(1);
            *f = (*f).max(e);
        }
        Floors { replicas: m, head: SegmentId(0) }
    }
}

// ---------------------------------------------------------------------------
// Verifying a replica's bytes

/// What [`verify_replica`] found in a replica's bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// Bytes from the start that end with a verified checksum entry and
    /// whose every entry decodes with a correct CRC.
    pub len: usize,
    /// The value of that last checksum entry (0 if `len` is 0).
    pub last_checksum: u32,
    /// The segment header entry, if within `len`.
    pub header: Option<SegmentHeaderView>,
    /// The log digest, if one is within `len` (a head segment's).
    pub digest: Option<Vec<SegmentId>>,
}

/// Finds the trusted prefix of a replica: Tailwind's Algorithm 1
/// (`format::scan`), then every entry of that prefix decoded and its CRC
/// checked; the prefix is cut back to the last checksum entry before the
/// first entry that fails.
pub fn verify_replica(bytes: &[u8]) -> Verified {
    let scan = format::scan(bytes);
    let mut v = Verified::default();
    let mut header = None;
    let mut digest = None;
    for item in format::EntryIter::new(&bytes[..scan.verified_len]) {
        let Ok((at, entry)) = item else { break };
        match entry {
            Entry::Checksum(c) => {
                v.len = at + format::CHECKSUM_ENTRY_BYTES;
                v.last_checksum = c;
                v.header = header;
                v.digest.clone_from(&digest);
            }
            Entry::SegmentHeader(h) => header = Some(h),
            Entry::LogDigest(ids) => digest = Some(ids),
            Entry::Object(_)
            | Entry::Tombstone(_)
            | Entry::SafeVersion(_)
            | Entry::Chunk(_)
            | Entry::ChunkTombstone(_)
            | Entry::StreamBatch(_)
            | Entry::ChunkRun(_) => {}
        }
    }
    v
}

// ---------------------------------------------------------------------------
// The reader connection

/// A reader-mode connection to one backup.
struct Reader {
    addr: SocketAddr,
    stream: InternalStream,
}

impl Reader {
    async fn connect(addr: SocketAddr) -> Result<Reader, RestoreError> {
        let io_err = |source| RestoreError::Io { addr, source };
        let stream = crate::dial::connect(addr, None).await.map_err(io_err)?;
        let mut r = Reader { addr, stream };
        let mut out = Vec::new();
        Hello { mode: Mode::Reader, master: ServerId(0), log: LogId(0), log_version: 0 }.encode(&mut out);
        r.call(&out, Kind::HelloOk, "HELLO_OK").await?;
        Ok(r)
    }

    /// Sends a request and reads the answer, which must be of kind `expect`.
    async fn call(&mut self, request: &[u8], expect: Kind, name: &'static str) -> Result<Vec<u8>, RestoreError> {
        let addr = self.addr;
        let io_err = |source| RestoreError::Io { addr, source };
        self.stream.write_all(request).await.map_err(io_err)?;
        self.stream.flush().await.map_err(io_err)?;
        let mut head = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut head).await.map_err(io_err)?;
        let h = Header::decode(&head, MAX_BODY).map_err(|source| RestoreError::Protocol { addr, source })?;
        let mut body = Vec::with_capacity(h.body_len.min(1 << 20));
        (&mut self.stream).take(h.body_len as u64).read_to_end(&mut body).await.map_err(io_err)?;
        if body.len() != h.body_len {
            return Err(io_err(io::ErrorKind::UnexpectedEof.into()));
        }
        match h.kind {
            k if k == expect => Ok(body),
            Kind::Error => Err(RestoreError::Backup { addr, message: wire::decode_text(&body) }),
            kind => Err(RestoreError::Unexpected { addr, kind, expected: name }),
        }
    }

    async fn list(&mut self, log: LogId) -> Result<Vec<ReplicaInfo>, RestoreError> {
        let mut out = Vec::new();
        wire::encode_u64(Kind::List, SegmentId(0), log.0, &mut out);
        let body = self.call(&out, Kind::Listing, "LISTING").await?;
        wire::decode_listing(&body).map_err(|source| RestoreError::Protocol { addr: self.addr, source })
    }

    async fn read(&mut self, log: LogId, segment: SegmentId) -> Result<(ReplicaInfo, Vec<u8>), RestoreError> {
        let (mut info, body) = self.read_unverified(log, segment).await?;
        if !body.is_empty() {
            info.checksum = verify_replica(&body).last_checksum;
        }
        Ok((info, body))
    }

    /// A replica's bytes as the backup sent them (`checksum` left 0): for
    /// callers that verify them themselves.
    async fn read_unverified(
        &mut self,
        log: LogId,
        segment: SegmentId,
    ) -> Result<(ReplicaInfo, Vec<u8>), RestoreError> {
        let mut out = Vec::new();
        wire::encode_u64(Kind::Read, segment, log.0, &mut out);
        let mut body = self.call(&out, Kind::Segment, "SEGMENT").await?;
        let (log_version, state, bytes) =
            wire::decode_segment(&body).map_err(|source| RestoreError::Protocol { addr: self.addr, source })?;
        // SEGMENT carries no epoch (LISTING does): 0 here.
        let info = ReplicaInfo { segment, log_version, len: bytes.len() as u32, checksum: 0, state, epoch: 0 };
        body.drain(..wire::SEGMENT_PREFIX);
        Ok((info, body))
    }

    /// One replica's entries of the keys in `ranges`, as the backup cut them.
    async fn read_part(
        &mut self,
        log: LogId,
        segment: SegmentId,
        ranges: &[KeyRange],
    ) -> Result<(PartInfo, Vec<u8>), RestoreError> {
        let mut out = Vec::new();
        wire::encode_read_part(log, segment, ranges, &mut out);
        let mut body = self.call(&out, Kind::Part, "PART").await?;
        let (info, _) =
            wire::decode_part(&body).map_err(|source| RestoreError::Protocol { addr: self.addr, source })?;
        body.drain(..wire::PART_PREFIX);
        Ok((info, body))
    }

    async fn free_log(&mut self, log: LogId) -> Result<(), RestoreError> {
        let mut out = Vec::new();
        wire::encode_u64(Kind::FreeLog, SegmentId(0), log.0, &mut out);
        self.call(&out, Kind::Freed, "FREED").await.map(|_| ())
    }
}

/// Every replica of `log` that `backup` holds and can serve. An open
/// replica's `len` is its verified prefix; closed ones were checked by the
/// backup (corrupt ones are left out).
pub async fn list_replicas(backup: SocketAddr, log: LogId) -> Result<Vec<ReplicaInfo>, RestoreError> {
    Reader::connect(backup).await?.list(log).await
}

/// One replica's bytes: a closed replica whole, an open one's verified
/// prefix. The returned `ReplicaInfo` describes the bytes received (`len`
/// their length, `checksum` their last verified checksum entry's value;
/// `epoch` 0, as SEGMENT does not carry it: [`list_replicas`] does).
/// Errors: `RestoreError::Backup` if the backup holds no such replica or
/// found it corrupt.
pub async fn read_replica(
    backup: SocketAddr,
    log: LogId,
    segment: SegmentId,
) -> Result<(ReplicaInfo, Vec<u8>), RestoreError> {
    Reader::connect(backup).await?.read(log, segment).await
}

/// Fences `log` at `version` on `backup`: a master HELLO at that version,
/// which raises the backup's fence for the log, then a clean close. The
/// log's master, if it still runs with a lower version, is refused there
/// from its next frame on (docs/recovery.md).
pub async fn fence(backup: SocketAddr, log: LogId, version: u64) -> Result<(), RestoreError> {
    let io_err = |source| RestoreError::Io { addr: backup, source };
    let stream = crate::dial::connect(backup, None).await.map_err(io_err)?;
    let mut r = Reader { addr: backup, stream };
    let mut out = Vec::new();
    Hello { mode: Mode::Tailwind, master: ServerId(0), log, log_version: version }.encode(&mut out);
    r.call(&out, Kind::HelloOk, "HELLO_OK").await.map(|_| ())
}

/// Drops every replica of `log` on `backup` (after recovery or restart no
/// longer needs them).
pub async fn free_log(backup: SocketAddr, log: LogId) -> Result<(), RestoreError> {
    Reader::connect(backup).await?.free_log(log).await
}

// ---------------------------------------------------------------------------
// Finding a log

/// A log as found on the backups: exactly the segments its newest digest
/// names, each as its verified bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundLog {
    /// The digest's segments in id order, with their verified bytes.
    pub segments: Vec<(SegmentId, Vec<u8>)>,
    /// The head: the highest segment whose verified bytes hold a digest.
    /// `None` for a log with no replica anywhere (a master that never wrote).
    pub head: Option<SegmentId>,
    /// Total bytes of `segments`.
    pub bytes: u64,
    /// Backups that did not answer. The log was found without them, which
    /// is sound as long as they did not hold every replica of a newer head.
    pub unreachable: Vec<SocketAddr>,
}

/// Timeouts of [`find_log_with`].
#[derive(Clone, Copy, Debug)]
pub struct FindOptions {
    /// For connecting to a backup and listing its replicas.
    pub list_timeout: Duration,
    /// For reading one replica.
    pub read_timeout: Duration,
    /// Replicas read at once (over all backups).
    pub parallel_reads: usize,
}

impl Default for FindOptions {
    fn default() -> Self {
        FindOptions { list_timeout: Duration::from_secs(5), read_timeout: Duration::from_secs(60), parallel_reads: 16 }
    }
}

/// [`find_log_with`] with the default timeouts.
pub async fn find_log(backups: &[SocketAddr], log: LogId, floors: &Floors) -> Result<FoundLog, RestoreError> {
    find_log_with(backups, log, floors, FindOptions::default()).await
}

/// One replica a backup listed.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    addr: SocketAddr,
    info: ReplicaInfo,
}

/// Rebuilds `log` from the replicas on `backups`.
///
/// Every backup is asked for its replicas in parallel; those that fail or
/// time out are noted as unreachable. Replicas below their segment's floor
/// in `floors` are dropped. For each segment the best replica is a closed
/// one that verifies, else the open one with the longest verified prefix
/// (ties: the higher log version). The head is the highest segment whose
/// verified bytes hold a log digest; the digest names the log's segments,
/// which are then read in parallel.
///
/// Errors: `Incomplete` when a digest member has no usable replica (or no
/// head was found while some backup was unreachable, or a segment above
/// every head found has only stale replicas: it may be the newest head, or
/// the head found is below the head floor in `floors`, or none was found
/// while there is one);
/// `NoHead` when the reachable replicas hold data but no digest. A log with
/// no replica at all on reachable backups, all of them answering, is empty:
/// `Ok` with no segments.
pub async fn find_log_with(
    backups: &[SocketAddr],
    log: LogId,
    floors: &Floors,
    opts: FindOptions,
) -> Result<FoundLog, RestoreError> {
    let (candidates, unreachable) = list_all(backups, log, floors, opts).await;
    let Some(Head { head, members, mut fetched }) =
        find_head(log, &candidates, &unreachable, floors.head(), opts).await?
    else {
        return Ok(FoundLog { unreachable, ..FoundLog::default() });
    };

    // The digest's other members, in parallel.
    let limit = Arc::new(tokio::sync::Semaphore::new(opts.parallel_reads.max(1)));
    let mut reads = tokio::task::JoinSet::new();
    let mut segments = Vec::new();
    let mut missing = Vec::new();
    for &segment in &members {
        if let Some(bytes) = fetched.remove(&segment) {
            segments.push((segment, bytes));
            continue;
        }
        let closed = closed_candidates(&candidates, segment);
        if closed.is_empty() {
            missing.push(segment);
            continue;
        }
        let limit = limit.clone();
        reads.spawn(async move {
            let _permit = limit.acquire().await.ok();
            let found = fetch_best(log, segment, &closed, opts.read_timeout).await;
            (segment, found.map(|(bytes, _)| bytes))
        });
    }
    while let Some(joined) = reads.join_next().await {
        match joined {
            Ok((segment, Some(bytes))) => segments.push((segment, bytes)),
            Ok((segment, None)) => missing.push(segment),
            Err(e) => return Err(RestoreError::Io { addr: backups[0], source: io::Error::other(e.to_string()) }),
        }
    }
    if !missing.is_empty() {
        missing.sort();
        return Err(RestoreError::Incomplete { missing, unreachable });
    }
    segments.sort_by_key(|(s, _)| *s);
    let bytes = segments.iter().map(|(_, b)| b.len() as u64).sum();
    Ok(FoundLog { segments, head: Some(head), bytes, unreachable })
}

/// What the backups list of a log: per segment, the replicas that are not
/// stale.
struct Candidates {
    usable: BTreeMap<SegmentId, Vec<Candidate>>,
    /// Segments whose every listed replica is below its floor.
    only_stale: Vec<SegmentId>,
}

impl Candidates {
    fn get(&self, segment: &SegmentId) -> Option<&Vec<Candidate>> {
        self.usable.get(segment)
    }
}

/// The replicas of every segment of `log` on `backups` that are not stale
/// by `floors`, best first (closed, then the longest prefix, then the
/// newest version), and the backups that did not answer (sorted). Every
/// backup is asked at once.
async fn list_all(
    backups: &[SocketAddr],
    log: LogId,
    floors: &Floors,
    opts: FindOptions,
) -> (Candidates, Vec<SocketAddr>) {
    let mut listing = tokio::task::JoinSet::new();
    for &addr in backups {
        listing.spawn(async move {
            let r = tokio::time::timeout(opts.list_timeout, list_replicas(addr, log)).await;
            (addr, r)
        });
    }
    let mut unreachable = Vec::new();
    let mut candidates: BTreeMap<SegmentId, Vec<Candidate>> = BTreeMap::new();
    while let Some(joined) = listing.join_next().await {
        let Ok((addr, r)) = joined else { continue };
        match r {
            Ok(Ok(replicas)) => {
                for info in replicas {
                    candidates.entry(info.segment).or_default().push(Candidate { addr, info });
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(backup = %addr, error = %e, "restore: backup did not list its replicas");
                unreachable.push(addr);
            }
            Err(_) => {
                tracing::warn!(backup = %addr, "restore: backup did not list its replicas in time");
                unreachable.push(addr);
            }
        }
    }
    unreachable.sort();
    let mut only_stale = Vec::new();
    candidates.retain(|&segment, list| {
        let before = list.len();
        list.retain(|c| !floors.stale(segment, c.info.epoch));
        if list.len() < before {
            tracing::debug!(
                log = log.0,
                segment = segment.0,
                floor = floors.of(segment),
                "restore: ignoring {} stale replica(s)",
                before - list.len()
            );
        }
        if list.is_empty() {
            only_stale.push(segment);
        }
        !list.is_empty()
    });
    for list in candidates.values_mut() {
        list.sort_by_key(|c| {
            (c.info.state != ReplicaState::Closed, std::cmp::Reverse(c.info.len), std::cmp::Reverse(c.info.log_version))
        });
    }
    (Candidates { usable: candidates, only_stale }, unreachable)
}

/// A log's head as [`find_head`] found it.
struct Head {
    head: SegmentId,
    /// The head's digest: the segments of the log.
    members: Vec<SegmentId>,
    /// Verified bytes of the segments read while looking (the head and any
    /// above it without a digest).
    fetched: HashMap<SegmentId, Vec<u8>>,
}

/// The head: the highest segment whose best replica holds a digest.
/// `Ok(None)` for a log with no replica anywhere, every backup answering.
/// Errors: `Incomplete` if no head was found while some backup was
/// unreachable, or if a segment above the head has only stale replicas
/// (its current ones are lost or unreachable: it may be a newer head), or
/// if the head is below `floor` or there is none while `floor` is set
/// (`missing` names the floor: a head at or above it holds acknowledged
/// writes, and its replicas are lost or unreachable); `NoHead` if replicas
/// hold data but none a digest.
async fn find_head(
    log: LogId,
    candidates: &Candidates,
    unreachable: &[SocketAddr],
    floor: SegmentId,
    opts: FindOptions,
) -> Result<Option<Head>, RestoreError> {
    let below_floor = || {
        tracing::debug!(log = log.0, floor = floor.0, "restore: no head at or above the log's head floor");
        RestoreError::Incomplete { missing: vec![floor], unreachable: unreachable.to_vec() }
    };
    let mut fetched = HashMap::new();
    let mut with_data = Vec::new();
    for (&segment, list) in candidates.usable.iter().rev() {
        if list.iter().all(|c| c.info.len == 0) {
            continue;
        }
        if let Some((bytes, v)) = fetch_best(log, segment, list, opts.read_timeout).await {
            with_data.push(segment);
            fetched.insert(segment, bytes);
            if let Some(members) = v.digest {
                let mut above: Vec<SegmentId> =
                    candidates.only_stale.iter().copied().filter(|s| *s > segment).collect();
                if !above.is_empty() {
                    above.sort();
                    return Err(RestoreError::Incomplete { missing: above, unreachable: unreachable.to_vec() });
                }
                if segment < floor {
                    return Err(below_floor());
                }
                return Ok(Some(Head { head: segment, members, fetched }));
            }
        }
    }
    if !unreachable.is_empty() || !candidates.only_stale.is_empty() {
        let mut missing = candidates.only_stale.clone();
        missing.sort();
        return Err(RestoreError::Incomplete { missing, unreachable: unreachable.to_vec() });
    }
    if floor > SegmentId(0) {
        return Err(below_floor());
    }
    if !with_data.is_empty() {
        with_data.sort();
        return Err(RestoreError::NoHead { segments: with_data });
    }
    Ok(None)
}

/// The closed replicas of `segment` (not stale). Every member of a log but
/// the head was closed on all its replicas before the head was opened
/// (docs/replication.md), so only closed replicas count for them: an open
/// one is a partial copy (a re-replication cut short).
fn closed_candidates(candidates: &Candidates, segment: SegmentId) -> Vec<Candidate> {
    candidates
        .get(&segment)
        .map(|list| list.iter().filter(|c| c.info.state == ReplicaState::Closed).cloned().collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Reading one partition of a log

/// One segment's share of a partition, as a backup cut it: object and
/// tombstone entries back to back, for `Store::replay_entries`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartSegment {
    pub segment: SegmentId,
    pub entries: Vec<u8>,
    /// What the replay must raise the safe version to.
    pub safe_version: u64,
    /// Verified bytes of the replica it was cut from.
    pub replica_len: u32,
}

/// What [`read_partition`] read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRead {
    /// The head (`None`: the log has no replica anywhere).
    pub head: Option<SegmentId>,
    /// Segments of the log (the head's digest).
    pub segments: usize,
    /// Bytes of those segments' replicas (what was filtered).
    pub replica_bytes: u64,
    /// Bytes of the partition's entries received.
    pub entry_bytes: u64,
}

/// A partition's key ranges in one log, each with the first segment whose
/// entries of it count (`map.owned_since`, `docs/migration.md`): a
/// segment is cut to the ranges that count from it or an earlier one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRanges(Vec<(KeyRange, SegmentId)>);

impl PartitionRanges {
    pub fn new(ranges: Vec<(KeyRange, SegmentId)>) -> PartitionRanges {
        PartitionRanges(ranges)
    }

    /// The ranges whose entries in `segment` count.
    pub fn at(&self, segment: SegmentId) -> Vec<KeyRange> {
        self.0.iter().filter(|(_, from)| *from <= segment).map(|(r, _)| *r).collect()
    }
}

impl From<Vec<KeyRange>> for PartitionRanges {
    /// Ranges that count in every segment.
    fn from(ranges: Vec<KeyRange>) -> PartitionRanges {
        PartitionRanges(ranges.into_iter().map(|r| (r, SegmentId(0))).collect())
    }
}

/// Reads the entries of one partition (`ranges`) of `log` from the
/// backups and sends them, a segment at a time, to `sink` as they arrive,
/// for a replay that runs meanwhile.
///
/// The log is found as [`find_log_with`] finds it (every backup listed, the
/// head read whole and filtered here, its digest naming the segments), but
/// no other segment crosses the network whole: each is asked of one backup
/// holding a closed replica, which verifies it and sends only the
/// partition's entries (READ_PART). `spread` picks which replica first
/// (recovery masters pass their partition index, so that the masters
/// reading one segment ask different backups). Reads run in parallel
/// (`opts.parallel_reads`) over kept connections, and wait while `sink` is
/// full, so at most that many segments' entries are in memory.
///
/// Replicas below their segment's floor in `floors` are never asked, and a
/// head below the head floor is never taken (`Incomplete`).
/// Nothing is read unless the whole log can be: every backup answered the
/// listing (else `Incomplete` with the unreachable ones) and every member
/// has a closed replica that is not stale (else `Incomplete` with the
/// missing ones). A
/// member whose replicas all fail to read ends with `Incomplete` too,
/// after the segments read so far were sent: the caller retries, and a
/// replay of the same entries twice is harmless. `Closed` if the sink is
/// gone.
pub async fn read_partition(
    backups: &[SocketAddr],
    log: LogId,
    floors: &Floors,
    ranges: Arc<PartitionRanges>,
    spread: usize,
    opts: FindOptions,
    sink: tokio::sync::mpsc::Sender<PartSegment>,
) -> Result<PartitionRead, RestoreError> {
    let (candidates, unreachable) = list_all(backups, log, floors, opts).await;
    if !unreachable.is_empty() {
        return Err(RestoreError::Incomplete { missing: Vec::new(), unreachable });
    }
    let Some(Head { head, members, mut fetched }) =
        find_head(log, &candidates, &unreachable, floors.head(), opts).await?
    else {
        return Ok(PartitionRead::default());
    };
    let mut plan = Vec::new();
    let mut missing = Vec::new();
    for &segment in &members {
        if fetched.contains_key(&segment) {
            continue;
        }
        let mut closed = closed_candidates(&candidates, segment);
        if closed.is_empty() {
            missing.push(segment);
            continue;
        }
        let first = (segment.0 as usize).wrapping_add(spread) % closed.len();
        closed.rotate_left(first);
        plan.push((segment, closed));
    }
    if !missing.is_empty() {
        return Err(RestoreError::Incomplete { missing, unreachable });
    }
    let mut read = PartitionRead { head: Some(head), segments: members.len(), ..Default::default() };

    // Members read while looking for the head (verified by fetch_best,
    // every entry's CRC included): cut here.
    for &segment in &members {
        let Some(bytes) = fetched.remove(&segment) else { continue };
        let mut entries = Vec::new();
        let here = ranges.at(segment);
        let f = format::filter_entries_trusted(&bytes, wire::PartFilter(&here), &mut entries)
            .map_err(|e| RestoreError::Corrupt { segment, message: e.to_string() })?;
        read.replica_bytes += bytes.len() as u64;
        read.entry_bytes += entries.len() as u64;
        let part = PartSegment { segment, entries, safe_version: f.safe_version, replica_len: bytes.len() as u32 };
        sink.send(part).await.map_err(|_| RestoreError::Closed)?;
    }

    let pool: Arc<parking_lot::Mutex<HashMap<SocketAddr, Vec<Reader>>>> = Default::default();
    let limit = Arc::new(tokio::sync::Semaphore::new(opts.parallel_reads.max(1)));
    let mut reads = tokio::task::JoinSet::new();
    for (segment, closed) in plan {
        let (limit, pool, ranges, sink) = (limit.clone(), pool.clone(), ranges.clone(), sink.clone());
        reads.spawn(async move {
            let _permit = limit.acquire().await.ok();
            for c in &closed {
                let pooled = pool.lock().get_mut(&c.addr).and_then(|v| v.pop());
                let attempt = async {
                    let mut reader = match pooled {
                        Some(r) => r,
                        None => Reader::connect(c.addr).await?,
                    };
                    let (info, entries) = reader.read_part(log, segment, &ranges.at(segment)).await?;
                    Ok::<_, RestoreError>((reader, info, entries))
                };
                let (reader, info, entries) = match tokio::time::timeout(opts.read_timeout, attempt).await {
                    Ok(Ok(x)) => x,
                    Ok(Err(e)) => {
                        tracing::warn!(backup = %c.addr, segment = segment.0, error = %e, "restore: reading a partition of a replica failed");
                        continue;
                    }
                    Err(_) => {
                        tracing::warn!(backup = %c.addr, segment = segment.0, "restore: reading a partition of a replica timed out");
                        continue;
                    }
                };
                // The backup verified the replica against what it recorded
                // at CLOSE; it must also be what it listed.
                if !info.closed || info.replica_len != c.info.len || info.checksum != c.info.checksum {
                    tracing::warn!(backup = %c.addr, segment = segment.0, "restore: a replica changed since it was listed; trying another");
                    continue;
                }
                pool.lock().entry(c.addr).or_default().push(reader);
                let n = entries.len() as u64;
                let part =
                    PartSegment { segment, entries, safe_version: info.safe_version, replica_len: info.replica_len };
                return match sink.send(part).await {
                    Ok(()) => Ok((info.replica_len as u64, n)),
                    Err(_) => Err(RestoreError::Closed),
                };
            }
            Err(RestoreError::Incomplete { missing: vec![segment], unreachable: Vec::new() })
        });
    }
    let mut failed = Vec::new();
    let mut closed = false;
    while let Some(joined) = reads.join_next().await {
        match joined {
            Ok(Ok((replica, entries))) => {
                read.replica_bytes += replica;
                read.entry_bytes += entries;
            }
            Ok(Err(RestoreError::Incomplete { missing, .. })) => failed.extend(missing),
            Ok(Err(_)) => closed = true,
            Err(e) => return Err(RestoreError::Io { addr: backups[0], source: io::Error::other(e.to_string()) }),
        }
    }
    if closed {
        return Err(RestoreError::Closed);
    }
    if !failed.is_empty() {
        failed.sort();
        return Err(RestoreError::Incomplete { missing: failed, unreachable: Vec::new() });
    }
    Ok(read)
}

/// Reads the replicas of `segment` in order of preference until one is
/// usable: it verifies (a closed one to exactly its length and checksum),
/// holds something, and its segment header names this log and segment.
/// Returns its verified bytes.
async fn fetch_best(
    log: LogId,
    segment: SegmentId,
    candidates: &[Candidate],
    timeout: Duration,
) -> Option<(Vec<u8>, Verified)> {
    for c in candidates {
        let read = async { Reader::connect(c.addr).await?.read_unverified(log, segment).await };
        let read = match tokio::time::timeout(timeout, read).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::warn!(backup = %c.addr, segment = segment.0, error = %e, "restore: reading a replica failed");
                continue;
            }
            Err(_) => {
                tracing::warn!(backup = %c.addr, segment = segment.0, "restore: reading a replica timed out");
                continue;
            }
        };
        let (info, mut bytes) = read;
        let v = verify_replica(&bytes);
        let whole = match info.state {
            ReplicaState::Closed => {
                v.len == bytes.len() && v.len == c.info.len as usize && { v.last_checksum == c.info.checksum }
            }
            ReplicaState::Open => true,
        };
        let named = v.header.is_some_and(|h| h.log == log && h.segment == segment);
        if !whole || !named || v.len == 0 {
            tracing::warn!(backup = %c.addr, segment = segment.0, "restore: a replica does not verify; trying another");
            continue;
        }
        bytes.truncate(v.len);
        return Some((bytes, v));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_common::{TableId, Version};
    use shoal_engine::format::HeaderCrc;

    fn group(seg: &mut Vec<u8>, crc: &mut HeaderCrc, entries: &[Vec<u8>]) {
        for e in entries {
            let h = format::read_header(e).unwrap();
            crc.add(&e[..h.header_len]);
            seg.extend_from_slice(e);
        }
        crc.add(&[6]);
        format::encode_checksum(seg, crc.value());
    }

    #[test]
    fn verify_replica_finds_header_digest_and_cuts_at_a_bad_entry() {
        let mut seg = Vec::new();
        let mut crc = HeaderCrc::default();
        let (mut h, mut d, mut o) = (Vec::new(), Vec::new(), Vec::new());
        format::encode_segment_header(&mut h, LogId(3), SegmentId(5), 1 << 16);
        format::encode_digest(&mut d, &[SegmentId(1), SegmentId(5)]);
        group(&mut seg, &mut crc, &[h, d]);
        let first = seg.len();
        format::encode_object(&mut o, TableId(1), Version(1), b"k", b"value");
        group(&mut seg, &mut crc, &[o]);
        let v = verify_replica(&seg);
        assert_eq!(v.len, seg.len());
        assert_eq!(v.digest, Some(vec![SegmentId(1), SegmentId(5)]));
        assert_eq!(v.header.map(|h| (h.log, h.segment)), Some((LogId(3), SegmentId(5))));
        assert_eq!(v.last_checksum, format::scan(&seg).last_checksum);
        // A flipped value bit passes the header scan but not the entry's CRC.
        let mut bad = seg.clone();
        let last_value_byte = seg.len() - format::CHECKSUM_ENTRY_BYTES - 1;
        bad[last_value_byte] ^= 0x10;
        assert_eq!(format::scan(&bad).verified_len, seg.len());
        let v = verify_replica(&bad);
        assert_eq!(v.len, first);
        assert_eq!(v.last_checksum, format::scan(&seg[..first]).last_checksum);
        assert_eq!(verify_replica(&[]), Verified::default());
    }
}
