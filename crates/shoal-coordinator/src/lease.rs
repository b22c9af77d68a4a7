//! Master leases, the coordinator's side (`docs/recovery.md`, "Leases").
//!
//! A master serves its tablets, reads included, only while it holds a
//! lease, which it renews here every fraction of [`Leases::duration`]. The
//! coordinator never lets another server serve a master's tablets (a crash
//! recovery, a new incarnation taking its id or address) before that
//! master's lease has surely expired: it first *condemns* the incarnation
//! (no more renewals) and then waits until [`Leases::condemn`]'s instant.
//!
//! Timing argument. The master counts its lease from when it *sent* the
//! renewal, with a clock that keeps counting through suspends; the
//! coordinator records the grant when it *answers*, which is later. If the
//! coordinator's clock runs at most `1 + d` times as fast as a server's
//! (`d` = [`DRIFT_PER_MILLE`]), then while the master's lease runs, the
//! coordinator's clock advances at most `duration * (1 + d)` past the
//! grant; the coordinator waits `duration * (1 + 2d) + MARGIN`.
//! A coordinator that restarts does not know what its predecessor granted:
//! it treats every incarnation as granted a lease at its own start.
//!
//! Keyed by (server, log): the log names the incarnation, so an earlier
//! incarnation of a server (a zombie) cannot renew on behalf of the new one.
//!
//! No I/O: the service passes the clock in and does the waiting.

use shoal_cluster::map::{ClusterMap, ServerId, ServerState};
use shoal_common::LogId;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How much faster than a server's clock the coordinator's may run, per
/// mille (the wait uses twice this, for headroom).
pub const DRIFT_PER_MILLE: u32 = 20;
/// Added to every wait for a lease to expire: scheduling and the coarse
/// parts of both clocks.
pub const MARGIN: Duration = Duration::from_millis(50);
/// Default lease length (`--lease-ms`).
pub const DEFAULT_LEASE_MS: u64 = 2000;

/// One master incarnation.
pub type Incarnation = (ServerId, LogId);

/// Why a renewal was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    UnknownServer,
    Down,
    /// The server enlisted again since: `log` is an earlier incarnation's.
    OldIncarnation,
    /// The incarnation is being declared dead or replaced.
    Condemned,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::UnknownServer => "no such server",
            Refused::Down => "the server was declared dead",
            Refused::OldIncarnation => "the server enlisted again since; this log is an earlier incarnation's",
            Refused::Condemned => "the server is being declared dead or replaced",
        })
    }
}

/// Leases granted by this coordinator process.
#[derive(Debug)]
pub struct Leases {
    duration: Duration,
    /// What a predecessor may have granted is assumed granted now.
    started: Instant,
    granted: BTreeMap<Incarnation, Instant>,
    condemned: BTreeSet<Incarnation>,
}

impl Leases {
    pub fn new(duration: Duration, now: Instant) -> Leases {
        Leases { duration, started: now, granted: BTreeMap::new(), condemned: BTreeSet::new() }
    }

    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Grants `inc` a lease at `now` if `map` says it is a live incarnation
    /// and it is not condemned.
    pub fn renew(&mut self, map: &ClusterMap, inc: Incarnation, now: Instant) -> Result<Duration, Refused> {
        let (server, log) = inc;
        let s = map.server(server).ok_or(Refused::UnknownServer)?;
        if s.state == ServerState::Down {
            return Err(Refused::Down);
        }
        if s.log != log {
            return Err(Refused::OldIncarnation);
        }
        if self.condemned.contains(&inc) {
            return Err(Refused::Condemned);
        }
        self.granted.insert(inc, now);
        Ok(self.duration)
    }

    /// Refuses `inc` every renewal from now on and returns the instant its
    /// lease has surely expired: nobody else may serve its tablets before.
    pub fn condemn(&mut self, inc: Incarnation) -> Instant {
        self.condemned.insert(inc);
        let last = self.granted.get(&inc).copied().unwrap_or(self.started).max(self.started);
        last + self.duration + self.duration * (2 * DRIFT_PER_MILLE) / 1000 + MARGIN
    }

    /// Forgets incarnations `map` no longer has as a live server's current
    /// log (they can never renew again).
    pub fn retain_live(&mut self, map: &ClusterMap) {
        let live =
            |inc: &Incarnation| map.server(inc.0).is_some_and(|s| s.state != ServerState::Down && s.log == inc.1);
        self.granted.retain(|inc, _| live(inc));
        self.condemned.retain(live);
    }

    /// Incarnations holding a lease at `now` (statistics).
    pub fn held(&self, now: Instant) -> usize {
        self.granted.iter().filter(|(inc, t)| !self.condemned.contains(inc) && now < **t + self.duration).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_cluster::map::ServerInfo;

    fn map_with(servers: &[(u64, u64, ServerState)]) -> ClusterMap {
        let addr = "127.0.0.1:1".parse().unwrap();
        ClusterMap {
            servers: servers
                .iter()
                .map(|&(id, log, state)| ServerInfo {
                    id: ServerId(id),
                    native: addr,
                    resp: addr,
                    backup: addr,
                    log: LogId(log),
                    state,
                })
                .collect(),
            ..Default::default()
        }
    }

    const L: Duration = Duration::from_millis(2000);

    #[test]
    fn renew_grants_live_current_incarnations_only() {
        let t0 = Instant::now();
        let map = map_with(&[(1, 10, ServerState::Up), (2, 20, ServerState::Down), (3, 30, ServerState::Recovering)]);
        let mut l = Leases::new(L, t0);
        assert_eq!(l.renew(&map, (ServerId(1), LogId(10)), t0), Ok(L));
        assert_eq!(l.renew(&map, (ServerId(3), LogId(30)), t0), Ok(L));
        assert_eq!(l.renew(&map, (ServerId(2), LogId(20)), t0), Err(Refused::Down));
        assert_eq!(l.renew(&map, (ServerId(1), LogId(9)), t0), Err(Refused::OldIncarnation));
        assert_eq!(l.renew(&map, (ServerId(4), LogId(40)), t0), Err(Refused::UnknownServer));
        assert_eq!(l.held(t0), 2);
    }

    #[test]
    fn condemn_refuses_renewals_and_waits_past_the_last_grant_with_the_drift_margin() {
        let t0 = Instant::now();
        let map = map_with(&[(1, 10, ServerState::Up)]);
        let mut l = Leases::new(L, t0);
        let inc = (ServerId(1), LogId(10));
        let t1 = t0 + Duration::from_millis(700);
        l.renew(&map, inc, t1).unwrap();
        let until = l.condemn(inc);
        // 2000 ms * (1 + 2 * 2%) + 50 ms after the last grant.
        assert_eq!(until, t1 + Duration::from_millis(2000 + 80 + 50));
        assert_eq!(l.renew(&map, inc, t1 + Duration::from_millis(10)), Err(Refused::Condemned));
        // Condemning again does not move the instant: no grant since.
        assert_eq!(l.condemn(inc), until);
        assert_eq!(l.held(t1), 0);
    }

    #[test]
    fn an_incarnation_never_granted_here_is_assumed_granted_at_start() {
        let t0 = Instant::now();
        let mut l = Leases::new(L, t0);
        let until = l.condemn((ServerId(7), LogId(70)));
        assert_eq!(until, t0 + Duration::from_millis(2130));
    }

    #[test]
    fn retain_live_forgets_replaced_and_dead_incarnations() {
        let t0 = Instant::now();
        let mut map = map_with(&[(1, 10, ServerState::Up), (2, 20, ServerState::Up)]);
        let mut l = Leases::new(L, t0);
        l.renew(&map, (ServerId(1), LogId(10)), t0).unwrap();
        l.renew(&map, (ServerId(2), LogId(20)), t0).unwrap();
        l.condemn((ServerId(2), LogId(20)));
        map.servers[0].log = LogId(11);
        map.servers[1].state = ServerState::Down;
        l.retain_live(&map);
        assert!(l.granted.is_empty());
        assert!(l.condemned.is_empty());
    }
}
