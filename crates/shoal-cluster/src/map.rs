//! The cluster map: the coordinator's view of servers, tables and tablets.
//!
//! The coordinator is its only author. Every change bumps `version`;
//! servers and clients keep a copy and replace it with any newer one.

use serde::{Deserialize, Serialize};
use shoal_common::{ChunkId, KeyHash, LogId, SegmentId, StreamShape, TableId};
use std::fmt;
use std::net::SocketAddr;

/// A server's id, assigned by the coordinator at enlistment, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct ServerId(pub u64);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a server is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Enlisted, rebuilding its tablets from an earlier log before serving
    /// them (a whole-cluster restart). Its backup already serves.
    Recovering,
    /// Serving its tablets.
    Up,
    /// Declared dead or gone; its tablets are elsewhere or waiting.
    Down,
}

/// One server: its master's and backup's addresses and its current log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub id: ServerId,
    /// Native protocol (reads, writes).
    pub native: SocketAddr,
    /// Redis protocol.
    pub resp: SocketAddr,
    /// Replication port of its backup (`docs/replication.md`).
    pub backup: SocketAddr,
    /// The log this incarnation of the master writes.
    pub log: LogId,
    pub state: ServerState,
}

/// A table's name and id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableInfo {
    pub id: TableId,
    pub name: String,
    /// A chunk table: keyless chunks found by id (`docs/chunks.md`), one
    /// tablet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chunks: bool,
    /// A stream (`docs/streams.md`) and its shape: one tablet, whose
    /// master serves every streamlet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamShape>,
}

/// A key-hash range `[start_hash, end_hash]` (inclusive) of one table and
/// the master that owns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabletInfo {
    pub table: TableId,
    pub start_hash: u64,
    pub end_hash: u64,
    pub master: ServerId,
}

impl TabletInfo {
    pub fn contains(&self, table: TableId, hash: KeyHash) -> bool {
        self.table == table && self.start_hash <= hash.0 && hash.0 <= self.end_hash
    }
}

/// The whole map. Tablets of a table cover its hash space exactly once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Bumped by every change; 0 is never a real map.
    pub version: u64,
    /// Replicas each master keeps of every segment (R).
    pub replicas: u32,
    pub servers: Vec<ServerInfo>,
    pub tables: Vec<TableInfo>,
    pub tablets: Vec<TabletInfo>,
    /// Crash recoveries in progress (`docs/recovery.md`).
    #[serde(default)]
    pub recoveries: Vec<Recovery>,
    /// Logs no master may write any more (their master was declared dead),
    /// with the version backups must hold them at: every backup refuses
    /// appends below it. `free`: the log was recovered and its replicas
    /// may be dropped.
    #[serde(default)]
    pub fenced: Vec<FencedLog>,
    /// Per segment of a log that may still be read, the replica epoch below
    /// which its replicas are stale (their master re-opened the segment
    /// elsewhere and the new replicas caught up): recovery never uses
    /// them. At most one entry per (log, segment); dropped with the log.
    #[serde(default)]
    pub replica_floors: Vec<ReplicaFloor>,
    /// Per log that may still be read, the lowest segment recovery may take
    /// as its head (`docs/recovery.md`, "Head floors"): its master raised it
    /// to a head's id once that head's digest was durable on R backups and
    /// before acknowledging any write in it. A log whose newest head found
    /// is below it is incomplete. At most one entry per log; only raised;
    /// dropped with the log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub head_floors: Vec<HeadFloor>,
    /// Symmetric-caching groups (`docs/symmetric-caching.md`): the up
    /// servers, by id, cut into contiguous groups of nearly equal size,
    /// none larger than the coordinator's `--sc-group-size`. Every up
    /// server is in exactly one group; servers recovering or down are in
    /// none. Rebuilt at every map change ([`sc_groups`]).
    #[serde(default)]
    pub sc_groups: Vec<ScGroup>,
    /// Tablet migrations in progress (`docs/migration.md`): each names one
    /// whole tablet of the map, still mastered by `from`. The source drives
    /// the move; the record leaves the map when the move commits (in the
    /// same change that makes `to` the tablet's master) or aborts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<Migration>,
    /// Where each server's ownership of a key range began in its log, for
    /// ranges it gained by a migration or a recovery (`docs/migration.md`,
    /// "Log positions"): that server's log may still hold entries of the
    /// range from an earlier time it owned it, which a recovery or restart
    /// must not replay. At most one record covers a key of a table per
    /// server; a record goes when its server loses the range or its log is
    /// freed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owned_since: Vec<OwnedSince>,
    /// Logs whose master has not yet reported its head durable on a
    /// backup (`ControlRequest::HeadReplicated`), in the order they were
    /// handed out. The coordinator grants no master lease to such a log
    /// while R > 0, so it has acknowledged nothing: a recovery that finds
    /// no replica of it anywhere takes it for empty instead of waiting
    /// for backups that never held it (`docs/recovery.md`). A log leaves
    /// when its master reports, or when the log is freed or dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreplicated: Vec<LogId>,
    /// Who serves which chunk ids of the chunk tables (`docs/chunks.md`,
    /// "In a cluster"), sorted by (table, node, first local id), ranges of
    /// one (table, node) disjoint: [`ClusterMap::chunk_owner`] finds the
    /// range of an id by binary search. Each server not down when a chunk
    /// table is made, and each server that enlists later, gets the whole
    /// local range of its own node id (its server id); a crash recovery
    /// hands the dead server's ranges to recovery masters. A chunk id in
    /// no range is served by nobody.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunk_ranges: Vec<ChunkRange>,
    /// Moves of chunk id ranges in progress (`docs/chunks.md`, "Migration
    /// of id ranges"): each names one entry of `chunk_ranges` exactly,
    /// still served by `from`, which drives the move as for a tablet. Ids
    /// are shared with `migrations` (one counter), so `FinishMigration` and
    /// `AbortMigration` name either kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunk_migrations: Vec<ChunkMigration>,
}

/// Local ids `lo..=hi` of node `node`'s chunks: the part of a chunk id
/// range a `StartMigration` moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkSpan {
    pub node: u16,
    pub lo: u64,
    pub hi: u64,
}

/// A chunk id range moving from its server `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkMigration {
    /// Unique per cluster, never reused (shared with tablet migrations).
    pub id: u64,
    pub table: TableId,
    pub node: u16,
    pub lo: u64,
    pub hi: u64,
    pub from: ServerId,
    pub to: ServerId,
    /// When the coordinator recorded it (ms since the Unix epoch).
    pub started_unix_ms: u64,
}

impl ChunkMigration {
    /// Whether chunk `id` of `table` is in the moving range.
    pub fn contains(&self, table: TableId, id: ChunkId) -> bool {
        self.table == table && self.node == id.node() && self.lo <= id.local() && id.local() <= self.hi
    }
}

/// Chunk ids `node << 48 | lo ..= node << 48 | hi` of chunk table `table`
/// and the server that serves them (gets, puts, removes, locks; creates
/// too when `node` is `master`'s own server id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChunkRange {
    pub table: TableId,
    pub node: u16,
    pub lo: u64,
    pub hi: u64,
    pub master: ServerId,
}

impl ChunkRange {
    /// The range of every local id of `node` in `table`.
    pub fn whole(table: TableId, node: u16, master: ServerId) -> ChunkRange {
        ChunkRange { table, node, lo: 0, hi: ChunkId::MAX_LOCAL, master }
    }

    /// Whether `id` of `table` is in the range.
    pub fn contains(&self, table: TableId, id: ChunkId) -> bool {
        self.table == table && self.node == id.node() && self.lo <= id.local() && id.local() <= self.hi
    }

    /// The sort key of [`ClusterMap::chunk_ranges`].
    pub fn start(&self) -> (TableId, u16, u64) {
        (self.table, self.node, self.lo)
    }

    /// Whether this is every local id of its node's chunks, served by the
    /// server of that node id: the one case where its server creates
    /// chunks of the table (`docs/chunks.md`, "Who creates").
    pub fn is_creators(&self) -> bool {
        u64::from(self.node) == self.master.0 && self.lo == 0 && self.hi == ChunkId::MAX_LOCAL
    }
}

/// The range of `ranges` (sorted by [`ChunkRange::start`], disjoint per
/// table and node) holding `id` of `table`: one binary search.
pub fn find_chunk_range(ranges: &[ChunkRange], table: TableId, id: ChunkId) -> Option<&ChunkRange> {
    let key = (table, id.node(), id.local());
    let i = ranges.partition_point(|r| r.start() <= key);
    ranges[..i].last().filter(|r| r.contains(table, id))
}

/// Entries of `table`'s keys with hashes in `start_hash..=end_hash` are
/// `server`'s only from segment `segment` of its log `log` on: those in
/// lower segments of `log`, and any in an older log of the server, were
/// written while the range was someone else's or before it left this
/// server (RAMCloud's log position per tablet assignment). With
/// `chunk_node`, the record is of the chunk ids of that node with local ids
/// `start_hash..=end_hash` instead (a chunk id range gained by a move or a
/// recovery).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedSince {
    pub server: ServerId,
    pub log: LogId,
    pub table: TableId,
    pub start_hash: u64,
    pub end_hash: u64,
    pub segment: SegmentId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_node: Option<u16>,
}

/// A piece of a key range and the first segment of one log whose entries
/// of it count ([`ClusterMap::owned_pieces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedPiece {
    pub start_hash: u64,
    pub end_hash: u64,
    pub from: SegmentId,
}

/// A tablet moving from its master `from` to `to` (`docs/migration.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// Unique per cluster, never reused.
    pub id: u64,
    pub table: TableId,
    pub start_hash: u64,
    pub end_hash: u64,
    pub from: ServerId,
    pub to: ServerId,
    /// When the coordinator recorded it (ms since the Unix epoch).
    pub started_unix_ms: u64,
}

impl Migration {
    /// Whether `(table, hash)` is in the moving tablet.
    pub fn contains(&self, table: TableId, hash: KeyHash) -> bool {
        self.table == table && self.start_hash <= hash.0 && hash.0 <= self.end_hash
    }
}

/// One symmetric-caching group: servers that cache the same hot keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScGroup {
    /// The members, ascending; the first (lowest id) leads the group's
    /// hot-set agreement.
    pub members: Vec<ServerId>,
    /// The map version at which the group got these members. It changes
    /// whenever a member joins, dies or is recovered, and is never
    /// reused: members drop every symmetric-caching message and cached
    /// value of another membership epoch.
    pub epoch: u64,
}

impl ScGroup {
    /// The member that merges the members' reports and publishes the hot set.
    pub fn leader(&self) -> Option<ServerId> {
        self.members.first().copied()
    }
}

/// Groups for `up` (the up servers' ids, any order) of at most `size`
/// (at least 1) members each: ceil(n / size) groups of contiguous ids
/// whose sizes differ by at most one. A group with exactly the members
/// of one of `old` keeps its epoch; any other gets `epoch`.
pub fn sc_groups(up: &[ServerId], size: u32, old: &[ScGroup], epoch: u64) -> Vec<ScGroup> {
    let mut up = up.to_vec();
    up.sort();
    up.dedup();
    if up.is_empty() {
        return Vec::new();
    }
    let size = size.max(1) as usize;
    let groups = up.len().div_ceil(size);
    let (base, extra) = (up.len() / groups, up.len() % groups);
    let mut out = Vec::with_capacity(groups);
    let mut at = 0;
    for g in 0..groups {
        let len = base + usize::from(g < extra);
        let members = up[at..at + len].to_vec();
        at += len;
        let epoch = old.iter().find(|o| o.members == members).map_or(epoch, |o| o.epoch);
        out.push(ScGroup { members, epoch });
    }
    out
}

/// Replicas of `segment` of `log` with an epoch below `epoch` are stale
/// (see [`ClusterMap::replica_floors`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaFloor {
    pub log: LogId,
    pub segment: SegmentId,
    pub epoch: u64,
}

/// Recovery takes no segment of `log` below `segment` as its head (see
/// [`ClusterMap::head_floors`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadFloor {
    pub log: LogId,
    pub segment: SegmentId,
}

/// A log fenced at a version (see [`ClusterMap::fenced`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencedLog {
    pub log: LogId,
    pub version: u64,
    pub free: bool,
}

/// The recovery of a crashed master: its tablets split into partitions,
/// each replayed by one recovery master from the dead master's logs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    /// Unique per cluster, never reused.
    pub id: u64,
    pub dead: ServerId,
    /// The logs to replay (the dead master's current log and any earlier
    /// one it had not finished recovering), all fenced.
    pub logs: Vec<LogId>,
    /// The version the logs are fenced at; readers use it.
    pub log_version: u64,
    pub partitions: Vec<Partition>,
    /// When the coordinator declared the master dead (ms since the Unix epoch).
    pub started_unix_ms: u64,
}

/// Key-hash ranges of tablets, and chunk id ranges, handed to one recovery
/// master. Each entry of `tablets` and `chunks` has `master` = the
/// recovery master; they become its own when it reports the partition
/// done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub master: ServerId,
    pub tablets: Vec<TabletInfo>,
    /// The dead server's chunk id ranges this partition replays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<ChunkRange>,
    pub done: bool,
}

impl Partition {
    /// Whether `(table, hash)` belongs to this partition.
    pub fn contains(&self, table: TableId, hash: KeyHash) -> bool {
        self.tablets.iter().any(|t| t.contains(table, hash))
    }
}

impl ClusterMap {
    pub fn server(&self, id: ServerId) -> Option<&ServerInfo> {
        self.servers.iter().find(|s| s.id == id)
    }

    pub fn table_by_name(&self, name: &str) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The tablet holding `(table, hash)`, if the table exists.
    pub fn tablet(&self, table: TableId, hash: KeyHash) -> Option<&TabletInfo> {
        self.tablets.iter().find(|t| t.contains(table, hash))
    }

    /// The server that owns `(table, hash)`.
    pub fn locate(&self, table: TableId, hash: KeyHash) -> Option<&ServerInfo> {
        self.tablet(table, hash).and_then(|t| self.server(t.master))
    }

    /// The range holding chunk `id` of `table` and its server, if any
    /// ([`ClusterMap::chunk_ranges`]).
    pub fn chunk_owner(&self, table: TableId, id: ChunkId) -> Option<&ChunkRange> {
        find_chunk_range(&self.chunk_ranges, table, id)
    }

    /// The servers that create chunks of `table`: those holding the whole
    /// range of their own node id in it ([`ChunkRange::is_creators`]),
    /// ascending, and not while any of its node's ids of the table are
    /// moving. A server that moved part of its own range away creates
    /// no chunks of the table until it holds all of it again: only then
    /// can it hand out any free id of its node without one being another
    /// server's. (While its range moves whole, the entry is not split, but
    /// a create then would make a chunk the move may have passed.)
    pub fn chunk_creators(&self, table: TableId) -> impl Iterator<Item = ServerId> + '_ {
        let first = self.chunk_ranges.partition_point(|r| r.table < table);
        self.chunk_ranges[first..]
            .iter()
            .take_while(move |r| r.table == table)
            .filter(move |r| {
                r.is_creators() && !self.chunk_migrations.iter().any(|m| m.table == table && m.node == r.node)
            })
            .map(|r| r.master)
    }

    /// The tablets `server` owns.
    pub fn tablets_of(&self, server: ServerId) -> impl Iterator<Item = &TabletInfo> {
        self.tablets.iter().filter(move |t| t.master == server)
    }

    /// Servers whose backups may take replicas: every server not down.
    pub fn live_servers(&self) -> impl Iterator<Item = &ServerInfo> {
        self.servers.iter().filter(|s| s.state != ServerState::Down)
    }

    /// The symmetric-caching group `server` belongs to, if any.
    pub fn sc_group_of(&self, server: ServerId) -> Option<&ScGroup> {
        self.sc_groups.iter().find(|g| g.members.contains(&server))
    }

    /// Which entries of `log` (a log of `server`) belong to `server`'s
    /// ownership of `table`'s hashes `start..=end`: the range cut into
    /// pieces, each with the first segment whose entries of it count. A
    /// piece that `server` gained in a later log is left out (none of
    /// `log`'s entries of it count); one gained earlier, or never gained
    /// (the server has owned it since the table was made), counts from
    /// segment 0.
    pub fn owned_pieces(&self, server: ServerId, log: LogId, table: TableId, start: u64, end: u64) -> Vec<OwnedPiece> {
        self.pieces_of(server, log, table, None, start, end)
    }

    /// [`ClusterMap::owned_pieces`] for the local ids `lo..=hi` of node
    /// `node`'s chunks of `table` (a piece's `start_hash..=end_hash` are
    /// local ids).
    pub fn owned_chunk_pieces(
        &self,
        server: ServerId,
        log: LogId,
        table: TableId,
        node: u16,
        lo: u64,
        hi: u64,
    ) -> Vec<OwnedPiece> {
        self.pieces_of(server, log, table, Some(node), lo, hi)
    }

    fn pieces_of(
        &self,
        server: ServerId,
        log: LogId,
        table: TableId,
        chunk_node: Option<u16>,
        start: u64,
        end: u64,
    ) -> Vec<OwnedPiece> {
        let mut records: Vec<&OwnedSince> = self
            .owned_since
            .iter()
            .filter(|o| {
                o.server == server
                    && o.table == table
                    && o.chunk_node == chunk_node
                    && o.start_hash <= end
                    && start <= o.end_hash
            })
            .collect();
        records.sort_by_key(|o| o.start_hash);
        let mut pieces = Vec::new();
        let mut piece = |a: u128, b: u128, from: SegmentId| {
            pieces.push(OwnedPiece { start_hash: a as u64, end_hash: b as u64, from });
        };
        let mut at = start as u128;
        for o in records {
            let (a, b) = ((o.start_hash as u128).max(at), (o.end_hash as u128).min(end as u128));
            if a > b {
                continue;
            }
            if a > at {
                piece(at, a - 1, SegmentId(0));
            }
            match o.log.cmp(&log) {
                std::cmp::Ordering::Equal => piece(a, b, o.segment),
                std::cmp::Ordering::Less => piece(a, b, SegmentId(0)),
                std::cmp::Ordering::Greater => {}
            }
            at = b + 1;
        }
        if at <= end as u128 {
            piece(at, end as u128, SegmentId(0));
        }
        pieces
    }

    /// Whether `log`'s master reported its head durable on a backup (or the
    /// log predates that report): see [`ClusterMap::unreplicated`].
    pub fn head_replicated(&self, log: LogId) -> bool {
        !self.unreplicated.contains(&log)
    }

    /// Whether `log`'s master may hold a master lease (and so acknowledge
    /// anything): its head is replicated, or there is no replication.
    pub fn may_serve(&self, log: LogId) -> bool {
        self.replicas == 0 || self.head_replicated(log)
    }

    /// The replica floors of `log`: (segment, epoch) pairs.
    pub fn replica_floors_of(&self, log: LogId) -> impl Iterator<Item = (SegmentId, u64)> + '_ {
        self.replica_floors.iter().filter(move |f| f.log == log).map(|f| (f.segment, f.epoch))
    }

    /// The head floor of `log` (`SegmentId(0)`: none recorded).
    pub fn head_floor_of(&self, log: LogId) -> SegmentId {
        self.head_floors.iter().find(|f| f.log == log).map_or(SegmentId(0), |f| f.segment)
    }
}

/// Splits the hash space into `n` (>= 1) contiguous ranges of nearly equal size.
pub fn split_hash_space(n: u32) -> Vec<(u64, u64)> {
    let n = n.max(1) as u128;
    let total = 1u128 << 64;
    (0..n)
        .map(|i| {
            let start = (total * i / n) as u64;
            let end = ((total * (i + 1) / n) - 1) as u64;
            (start, end)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_pieces_cut_a_range_at_the_records_of_its_server() {
        let rec = |server, log, start, end, segment| OwnedSince {
            server: ServerId(server),
            log: LogId(log),
            table: TableId(1),
            start_hash: start,
            end_hash: end,
            segment: SegmentId(segment),
            chunk_node: None,
        };
        let map = ClusterMap {
            owned_since: vec![rec(1, 5, 10, 19, 7), rec(1, 6, 30, 39, 2), rec(1, 4, 40, 49, 9), rec(2, 5, 0, 99, 3)],
            ..ClusterMap::default()
        };
        let pieces = |log, start, end| -> Vec<(u64, u64, u64)> {
            map.owned_pieces(ServerId(1), LogId(log), TableId(1), start, end)
                .iter()
                .map(|p| (p.start_hash, p.end_hash, p.from.0))
                .collect()
        };
        // Log 5: from segment 7 where recorded in log 5; nothing where
        // gained in the later log 6; all of it where gained in log 4.
        assert_eq!(pieces(5, 0, 99), vec![(0, 9, 0), (10, 19, 7), (20, 29, 0), (40, 49, 0), (50, 99, 0)]);
        assert_eq!(pieces(6, 15, 35), vec![(15, 19, 0), (20, 29, 0), (30, 35, 2)]);
        assert_eq!(pieces(3, 12, 45), vec![(20, 29, 0)], "log 3 predates every record");
        assert_eq!(pieces(5, 0, u64::MAX).last(), Some(&(50, u64::MAX, 0)));
        assert_eq!(map.owned_pieces(ServerId(3), LogId(5), TableId(1), 0, 9).len(), 1, "no records: whole");
    }

    #[test]
    fn chunk_owner_finds_the_range_of_an_id_by_binary_search() {
        let r =
            |table, node, lo, hi, master| ChunkRange { table: TableId(table), node, lo, hi, master: ServerId(master) };
        let mut ranges = vec![
            r(2, 1, 0, ChunkId::MAX_LOCAL, 1),
            r(2, 3, 0, 99, 3),
            r(2, 3, 100, 199, 4),
            r(2, 3, 300, ChunkId::MAX_LOCAL, 5),
            r(7, 1, 0, ChunkId::MAX_LOCAL, 2),
            r(1, 4, 0, ChunkId::MAX_LOCAL, 4),
        ];
        ranges.sort();
        let map = ClusterMap { chunk_ranges: ranges, ..ClusterMap::default() };
        let owner = |table, node, local| map.chunk_owner(TableId(table), ChunkId::new(node, local)).map(|r| r.master.0);
        assert_eq!(owner(2, 1, 1), Some(1));
        assert_eq!(owner(2, 1, ChunkId::MAX_LOCAL), Some(1));
        assert_eq!(owner(2, 3, 0), Some(3));
        assert_eq!(owner(2, 3, 99), Some(3));
        assert_eq!(owner(2, 3, 100), Some(4));
        assert_eq!(owner(2, 3, 199), Some(4));
        assert_eq!(owner(2, 3, 200), None, "a gap between ranges");
        assert_eq!(owner(2, 3, 299), None);
        assert_eq!(owner(2, 3, 300), Some(5));
        assert_eq!(owner(2, 2, 5), None, "no range of node 2");
        assert_eq!(owner(7, 1, 5), Some(2));
        assert_eq!(owner(7, 3, 5), None, "node 3 has ranges in table 2 only");
        assert_eq!(owner(1, 4, 5), Some(4));
        assert_eq!(owner(3, 1, 5), None, "no such table");
        assert_eq!(
            map.chunk_creators(TableId(2)).collect::<Vec<_>>(),
            vec![ServerId(1)],
            "server 3 holds only part of its own node's ids: it creates none"
        );
        assert_eq!(map.chunk_creators(TableId(7)).count(), 0, "server 2 holds node 1's range only");
        assert_eq!(map.chunk_creators(TableId(1)).collect::<Vec<_>>(), vec![ServerId(4)]);
        // Against a linear search over many random ranges and ids.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut many = Vec::new();
        for table in 1..4u64 {
            for node in 0..5u16 {
                let mut lo = next() % 50;
                while lo < 1000 {
                    let hi = lo + next() % 40;
                    many.push(r(table, node, lo, hi, next() % 9));
                    lo = hi + 1 + next() % 3;
                }
            }
        }
        many.sort();
        for _ in 0..5000 {
            let (table, id) = (TableId(next() % 5), ChunkId::new((next() % 6) as u16, next() % 1100));
            let linear = many.iter().find(|r| r.contains(table, id));
            assert_eq!(find_chunk_range(&many, table, id), linear, "{table:?} {id:?}");
        }
    }

    #[test]
    fn split_hash_space_covers_everything_once() {
        for n in [1, 2, 3, 7, 64] {
            let r = split_hash_space(n);
            assert_eq!(r.len(), n as usize);
            assert_eq!(r[0].0, 0);
            assert_eq!(r.last().unwrap().1, u64::MAX);
            for w in r.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
    }

    #[test]
    fn sc_groups_cut_evenly_and_keep_unchanged_epochs() {
        let ids = |v: &[u64]| v.iter().map(|&i| ServerId(i)).collect::<Vec<_>>();
        let g = sc_groups(&ids(&[5, 1, 3, 2, 4]), 8, &[], 7);
        assert_eq!(g, vec![ScGroup { members: ids(&[1, 2, 3, 4, 5]), epoch: 7 }]);
        assert_eq!(g[0].leader(), Some(ServerId(1)));
        let g = sc_groups(&ids(&[1, 2, 3, 4, 5]), 2, &[], 7);
        assert_eq!(g.iter().map(|g| g.members.len()).collect::<Vec<_>>(), vec![2, 2, 1]);
        let g = sc_groups(&ids(&[1, 2, 3, 4, 5, 6, 7]), 4, &[], 7);
        assert_eq!(g.iter().map(|g| g.members.len()).collect::<Vec<_>>(), vec![4, 3]);
        let after = sc_groups(&ids(&[1, 2, 3, 4, 5, 6, 7, 8]), 4, &g, 9);
        assert_eq!(after[0], ScGroup { members: ids(&[1, 2, 3, 4]), epoch: 7 }, "same members, same epoch");
        assert_eq!(after[1], ScGroup { members: ids(&[5, 6, 7, 8]), epoch: 9 }, "a member joined: new epoch");
        assert!(sc_groups(&[], 4, &g, 9).is_empty());
        assert_eq!(sc_groups(&ids(&[1, 2]), 0, &[], 1).len(), 2, "size 0 counts as 1");
    }

    #[test]
    fn locate_finds_the_owner() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let server =
            |id| ServerInfo { id: ServerId(id), native: a, resp: a, backup: a, log: LogId(id), state: ServerState::Up };
        let map = ClusterMap {
            version: 1,
            replicas: 0,
            servers: vec![server(1), server(2)],
            tables: vec![TableInfo { id: TableId(5), name: "t".into(), chunks: false, stream: None }],
            recoveries: Vec::new(),
            fenced: Vec::new(),
            replica_floors: Vec::new(),
            head_floors: Vec::new(),
            sc_groups: Vec::new(),
            migrations: Vec::new(),
            owned_since: Vec::new(),
            unreplicated: Vec::new(),
            chunk_ranges: Vec::new(),
            chunk_migrations: Vec::new(),
            tablets: split_hash_space(2)
                .into_iter()
                .enumerate()
                .map(|(i, (s, e))| TabletInfo {
                    table: TableId(5),
                    start_hash: s,
                    end_hash: e,
                    master: ServerId(i as u64 + 1),
                })
                .collect(),
        };
        assert_eq!(map.locate(TableId(5), KeyHash(0)).unwrap().id, ServerId(1));
        assert_eq!(map.locate(TableId(5), KeyHash(u64::MAX)).unwrap().id, ServerId(2));
        assert!(map.locate(TableId(6), KeyHash(0)).is_none());
    }
}
