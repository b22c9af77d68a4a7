//! Clients of a cluster: the tablet map comes from the coordinator, and is
//! fetched again whenever a server answers that a key is not its own.
//!
//! [`CoordinatorMap`] is the [`MapSource`] that does it. Its refresh is a
//! short blocking call to the coordinator (it happens once per map change,
//! not per request).

use crate::error::ClientError;
use crate::tablet::{ChunkSpan, MapSource, Tablet, TabletMap};
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::tls::InternalTls;
use shoal_cluster::{ClusterMap, ControlAuth, ControlRequest, ControlResponse, CoordinatorAddrs, ServerState};
use std::net::SocketAddr;
use std::time::Duration;

/// Longest a map fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Fetches tablet maps from a coordinator (the leader, given the addresses
/// of a leader and its standbys).
#[derive(Clone, Debug)]
pub struct CoordinatorMap {
    coordinator: CoordinatorAddrs,
    auth: ControlAuth,
}

impl CoordinatorMap {
    pub fn new(coordinator: impl Into<CoordinatorAddrs>) -> CoordinatorMap {
        CoordinatorMap::with_tls(coordinator, None)
    }

    /// Over mutual TLS with `tls` (a coordinator with internal TLS).
    pub fn with_tls(coordinator: impl Into<CoordinatorAddrs>, tls: Option<InternalTls>) -> CoordinatorMap {
        CoordinatorMap { coordinator: coordinator.into(), auth: ControlAuth::anonymous_tls(tls) }
    }

    /// The current map as a client's tablet map.
    pub fn fetch(&self) -> Result<TabletMap, ClientError> {
        match call_blocking_any(&self.coordinator, &self.auth, &ControlRequest::GetMap, FETCH_TIMEOUT) {
            Ok(ControlResponse::Map { map }) => tablet_map(&map)
                .ok_or(ClientError::Cluster(format!("the cluster at {} has no servers up", self.coordinator))),
            Ok(other) => Err(ClientError::Cluster(format!("unexpected answer from the coordinator: {other:?}"))),
            Err(e) => Err(ClientError::Cluster(e.to_string())),
        }
    }
}

impl MapSource for CoordinatorMap {
    /// The coordinator's current map; the one held if it cannot be reached.
    fn refresh(&self, current: &TabletMap) -> TabletMap {
        self.fetch().unwrap_or_else(|_| current.clone())
    }
}

/// A client's view of a cluster map: each tablet at its master's native
/// address; table management and statistics go to the first server up.
/// `None` if no server is up.
pub fn tablet_map(map: &ClusterMap) -> Option<TabletMap> {
    let admin = map.servers.iter().filter(|s| s.state == ServerState::Up).min_by_key(|s| s.id)?.native;
    let tablets = map
        .tablets
        .iter()
        .filter_map(|t| {
            let s = map.server(t.master)?;
            Some(Tablet { table: Some(t.table), start_hash: t.start_hash, end_hash: t.end_hash, server: s.native })
        })
        .collect();
    let groups = map
        .sc_groups
        .iter()
        .map(|g| g.members.iter().filter_map(|m| map.server(*m)).map(|s| s.native).collect())
        .collect();
    let chunks = map
        .chunk_ranges
        .iter()
        .filter_map(|c| {
            let s = map.server(c.master)?;
            // A server declared dead creates nothing, even before its
            // ranges have moved.
            let creates = u64::from(c.node) == c.master.0 && s.state != ServerState::Down;
            Some(ChunkSpan { table: c.table, node: c.node, lo: c.lo, hi: c.hi, server: s.native, creates })
        })
        .collect();
    Some(TabletMap::new(tablets, admin).with_groups(groups).with_chunks(chunks))
}

/// Native addresses of every server not down (where a table's objects may be).
pub fn servers(map: &ClusterMap) -> Vec<SocketAddr> {
    map.servers.iter().filter(|s| s.state != ServerState::Down).map(|s| s.native).collect()
}
