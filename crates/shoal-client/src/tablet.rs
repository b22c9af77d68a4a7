//! The client's copy of the tablet map: which server owns which key-hash
//! range of which table.
//!
//! Today a Shoal deployment is one server, so the map has one entry (every
//! table, the whole hash range, one address). The cluster fills the map
//! from the coordinator; nothing else in the client changes, because every
//! request is already routed by `(table id, key hash)` through
//! [`TabletMap::locate`], and a server that answers `UNKNOWN_TABLET` makes
//! the client refresh the map and retry.

use shoal_proto::{ChunkId, KeyHash, TableId};
use std::net::SocketAddr;

/// One tablet: a key-hash range of one table (or of every table) and the
/// server that owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tablet {
    /// `None`: this entry covers every table.
    pub table: Option<TableId>,
    /// First key hash of the range.
    pub start_hash: u64,
    /// Last key hash of the range (inclusive).
    pub end_hash: u64,
    pub server: SocketAddr,
}

/// Chunk ids `node << 48 | lo ..= node << 48 | hi` of one chunk table and
/// the server that serves them (the cluster map's chunk id ranges,
/// `docs/chunks.md`, "In a cluster").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    pub table: TableId,
    pub node: u16,
    pub lo: u64,
    pub hi: u64,
    pub server: SocketAddr,
    /// Whether `server` creates chunks with this node id (its own).
    pub creates: bool,
}

/// The tablet map. Lookups pick the first tablet that matches, so specific
/// entries go before catch-all ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TabletMap {
    tablets: Vec<Tablet>,
    /// Where table management and statistics go (the coordinator's job in
    /// a cluster; today the one server).
    admin: SocketAddr,
    /// Symmetric-caching groups: each group's members' addresses.
    groups: Vec<Vec<SocketAddr>>,
    /// Chunk id ranges, sorted by (table, node, lo), disjoint.
    chunks: Vec<ChunkSpan>,
}

impl TabletMap {
    /// A map that sends everything to one server.
    pub fn single(server: SocketAddr) -> TabletMap {
        TabletMap {
            tablets: vec![Tablet { table: None, start_hash: 0, end_hash: u64::MAX, server }],
            admin: server,
            groups: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// A map from explicit tablets (for the cluster, and for tests).
    pub fn new(tablets: Vec<Tablet>, admin: SocketAddr) -> TabletMap {
        TabletMap { tablets, admin, groups: Vec::new(), chunks: Vec::new() }
    }

    /// This map with symmetric-caching groups (each its members' addresses).
    pub fn with_groups(mut self, groups: Vec<Vec<SocketAddr>>) -> TabletMap {
        self.groups = groups;
        self
    }

    /// This map with chunk id ranges (sorted here).
    pub fn with_chunks(mut self, mut chunks: Vec<ChunkSpan>) -> TabletMap {
        chunks.sort_by_key(|c| (c.table, c.node, c.lo));
        self.chunks = chunks;
        self
    }

    /// The server of chunk `id` of `table`: the server of its id range (a
    /// binary search), or, for an id in no range, the admin server, which
    /// answers that no such chunk exists (and a single server's map has no
    /// ranges: it serves every chunk).
    pub fn locate_chunk(&self, table: TableId, id: ChunkId) -> SocketAddr {
        self.chunk_span(table, id).map_or(self.admin, |c| c.server)
    }

    /// The id range holding chunk `id` of `table`, if any.
    pub fn chunk_span(&self, table: TableId, id: ChunkId) -> Option<&ChunkSpan> {
        let key = (table, id.node(), id.local());
        let i = self.chunks.partition_point(|c| (c.table, c.node, c.lo) <= key);
        self.chunks[..i].last().filter(|c| c.table == table && c.node == id.node() && id.local() <= c.hi)
    }

    /// The servers that create chunks of `table` (in a cluster: those
    /// holding the range of their own node id), in id order of their node;
    /// a single server's map: that server. Empty if the map knows of none.
    pub fn chunk_creators(&self, table: TableId) -> Vec<SocketAddr> {
        if self.chunks.is_empty() && !self.per_table() {
            return vec![self.admin];
        }
        self.chunks.iter().filter(|c| c.table == table && c.creates).map(|c| c.server).collect()
    }

    /// The symmetric-caching group `server` belongs to, if any.
    pub fn group_of(&self, server: SocketAddr) -> Option<&[SocketAddr]> {
        self.groups.iter().find(|g| g.contains(&server)).map(|g| g.as_slice())
    }

    /// The server that owns `(table, hash)`, if any.
    pub fn locate(&self, table: TableId, hash: KeyHash) -> Option<SocketAddr> {
        self.tablets
            .iter()
            .find(|t| t.table.is_none_or(|x| x == table) && t.start_hash <= hash.0 && hash.0 <= t.end_hash)
            .map(|t| t.server)
    }

    /// Where table management, statistics and pings go.
    pub fn admin(&self) -> SocketAddr {
        self.admin
    }

    /// Whether a tablet of this map names `table` (a cluster's map does;
    /// a single server's catch-all entry names none).
    pub fn names_table(&self, table: TableId) -> bool {
        self.tablets.iter().any(|t| t.table == Some(table))
    }

    /// Whether every tablet names its table (a cluster's map), so that any
    /// key the map locates is of a table it names.
    pub fn per_table(&self) -> bool {
        self.tablets.iter().all(|t| t.table.is_some())
    }

    pub fn tablets(&self) -> &[Tablet] {
        &self.tablets
    }
}

/// Where the client gets a fresh tablet map when a server answers
/// `UNKNOWN_TABLET`. Today's single-server deployments have nothing newer
/// to fetch, so [`StaticMap`] keeps the map it has; the cluster implements
/// this by asking the coordinator.
pub trait MapSource: Send + Sync {
    /// Returns the current map; `current` is the one the client holds.
    fn refresh(&self, current: &TabletMap) -> TabletMap;
}

/// A map source that never changes the map (single server).
#[derive(Clone, Copy, Debug, Default)]
pub struct StaticMap;

impl MapSource for StaticMap {
    fn refresh(&self, current: &TabletMap) -> TabletMap {
        current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_single_covers_everything() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let m = TabletMap::single(a);
        assert_eq!(m.locate(TableId(0), KeyHash(0)), Some(a));
        assert_eq!(m.locate(TableId(9), KeyHash(u64::MAX)), Some(a));
    }

    #[test]
    fn locate_picks_the_tablet_holding_the_hash() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let m = TabletMap::new(
            vec![
                Tablet { table: Some(TableId(1)), start_hash: 0, end_hash: 99, server: a },
                Tablet { table: Some(TableId(1)), start_hash: 100, end_hash: u64::MAX, server: b },
            ],
            a,
        );
        assert_eq!(m.locate(TableId(1), KeyHash(99)), Some(a));
        assert_eq!(m.locate(TableId(1), KeyHash(100)), Some(b));
        assert_eq!(m.locate(TableId(2), KeyHash(5)), None);
    }

    #[test]
    fn locate_chunk_finds_the_range_and_creators_are_own_ranges() {
        let (a, b, admin): (SocketAddr, SocketAddr, SocketAddr) =
            ("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap(), "127.0.0.1:9".parse().unwrap());
        let span =
            |table, node, lo, hi, server, creates| ChunkSpan { table: TableId(table), node, lo, hi, server, creates };
        let tablets = vec![Tablet { table: Some(TableId(3)), start_hash: 0, end_hash: u64::MAX, server: a }];
        let m = TabletMap::new(tablets, admin).with_chunks(vec![
            span(3, 2, 0, ChunkId::MAX_LOCAL, b, true),
            span(3, 1, 0, 99, a, true),
            span(3, 1, 100, ChunkId::MAX_LOCAL, b, false),
            span(4, 1, 0, ChunkId::MAX_LOCAL, a, true),
        ]);
        assert_eq!(m.locate_chunk(TableId(3), ChunkId::new(1, 99)), a);
        assert_eq!(m.locate_chunk(TableId(3), ChunkId::new(1, 100)), b);
        assert_eq!(m.locate_chunk(TableId(3), ChunkId::new(2, 5)), b);
        assert_eq!(m.locate_chunk(TableId(3), ChunkId::new(7, 5)), admin, "no range: the admin server");
        assert_eq!(m.locate_chunk(TableId(5), ChunkId::new(1, 5)), admin);
        assert_eq!(m.chunk_creators(TableId(3)), vec![a, b]);
        assert_eq!(m.chunk_creators(TableId(4)), vec![a]);
        assert!(m.chunk_creators(TableId(5)).is_empty());
        let single = TabletMap::single(a);
        assert_eq!(single.locate_chunk(TableId(3), ChunkId::new(1, 5)), a);
        assert_eq!(single.chunk_creators(TableId(3)), vec![a], "a single server creates every chunk");
    }
}
