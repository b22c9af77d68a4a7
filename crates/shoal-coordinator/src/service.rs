//! The coordinator's requests, decided by the state machine and made
//! durable: one [`Service`] per coordinator, shared by its connections.
//!
//! A changing request runs under the state lock on a blocking thread:
//! decide on a copy of the state, save the copy, then make it current and
//! publish its map. So the reply, and every reader, sees a change only
//! after it is on disk; a failed save leaves the state as it was and the
//! request is refused (`internal`). Running the whole step on its own
//! thread also means a caller that goes away mid-request cannot leave the
//! store and memory disagreeing.
//!
//! Reads of the map (`get_map`, `get_table`, `watch_map`) take no lock:
//! they read the last published map from a `watch` channel, which is also
//! what wakes the long polls.
//!
//! Every request is first checked against what its connection proved
//! ([`Caller`]; `docs/security.md`, "Internal ports"): a refused one gets
//! `unauthorized` and reaches nothing.
//!
//! Failure detection's last step lives here because it does I/O: a
//! `suspect` is answered at once, and a task of its own probes the suspect
//! ([`probe`]) outside the state lock; only its verdict, "dead", becomes a
//! change ([`ClusterState::declare_dead`]), saved and published like any
//! other. The times of each recovery's phases are kept in memory
//! ([`RecoveryClock`]) for the log and `stats`.

use crate::config::CoordinatorError;
use crate::etcd::Fence;
use crate::lease::{Leases, DEFAULT_LEASE_MS};
use crate::probe::{probe, ProbeConfig};
use crate::rebalancer::{self, Ask, Jobs};
use crate::state::{self, ClusterState, Enlister, Outcome, SavedJob};
use crate::store::StateStore;
use shoal_cluster::auth::Credential;
use shoal_cluster::map::{ClusterMap, Recovery, ServerId, ServerState};
use shoal_cluster::{ControlErrorCode, ControlRequest, ControlResponse};
use shoal_common::LogId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Mutex};
use tracing::{debug, error, info, warn};

/// Longest a `watch_map` waits, whatever it asks for.
pub const MAX_WATCH: Duration = Duration::from_secs(60);
/// Finished recoveries `stats` remembers (since this process started).
pub const FINISHED_RECOVERIES_KEPT: usize = 16;
/// Servers declared dead that the dashboard lists (since this process
/// started), the latest last.
pub const FAILURES_KEPT: usize = 16;

/// What a control connection proved, decided when it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// The coordinator has no secret: every request is taken at its word.
    Unchecked,
    /// No handshake, on a coordinator with a secret: the read-only
    /// requests only (`get_map`, `get_table`, `stats`, `watch_map` without
    /// a server).
    Anonymous,
    /// Proved the cluster secret, as no server (an operator's tool, or a
    /// server that has no id or no credential yet): also table changes and
    /// enlistment.
    Member,
    /// Proved the cluster secret and this server's credential: also the
    /// requests that speak for this server, and only for it.
    Server(ServerId),
}

impl Caller {
    /// Whether this caller may send `req`; the refusal says why not.
    fn authorize(self, req: &ControlRequest) -> Result<(), String> {
        let named = match req {
            ControlRequest::GetMap | ControlRequest::GetTable { .. } | ControlRequest::Stats => return Ok(()),
            ControlRequest::WatchMap { server: None, .. } => return Ok(()),
            ControlRequest::CreateTable { .. }
            | ControlRequest::DropTable { .. }
            | ControlRequest::Enlist { .. }
            | ControlRequest::StartMigration { .. }
            | ControlRequest::SplitTablet { .. }
            | ControlRequest::MergeTablets { .. }
            | ControlRequest::Rebalance { .. }
            | ControlRequest::Drain { .. } => None,
            ControlRequest::WatchMap { server: Some(s), .. }
            | ControlRequest::Recovered { server: s, .. }
            | ControlRequest::RecoveryDone { server: s, .. }
            | ControlRequest::RaiseReplicaFloors { server: s, .. }
            | ControlRequest::RaiseHeadFloor { server: s, .. }
            | ControlRequest::HeadReplicated { server: s, .. }
            | ControlRequest::RenewLease { server: s, .. }
            | ControlRequest::FinishMigration { server: s, .. }
            | ControlRequest::AbortMigration { server: s, .. }
            | ControlRequest::Suspect { reporter: s, .. } => Some(*s),
        };
        let op = op_name(req);
        match (self, named) {
            (Caller::Unchecked, _) => Ok(()),
            (Caller::Anonymous, _) => Err(format!(
                "{op} needs a connection that proved the cluster secret (--cluster-secret-file); \
                 without it only get_map, get_table, stats and watch_map are answered"
            )),
            (Caller::Member, None) => Ok(()),
            (Caller::Server(me), None) => match req {
                ControlRequest::Enlist { previous, .. } if *previous != Some(me) => {
                    Err(format!("this connection proved server {me}; it can only enlist again as server {me}"))
                }
                _ => Ok(()),
            },
            (Caller::Server(me), Some(s)) if s == me => Ok(()),
            (Caller::Server(me), Some(s)) => {
                Err(format!("{op} names server {s}, but this connection proved server {me}"))
            }
            (Caller::Member, Some(s)) => {
                Err(format!("{op} speaks for server {s}: it needs a connection that proved server {s}'s credential"))
            }
        }
    }
}

pub(crate) struct Service {
    state: Arc<Mutex<ClusterState>>,
    store: Arc<dyn StateStore>,
    map: watch::Sender<Arc<ClusterMap>>,
    probe: ProbeConfig,
    started: Instant,
    requests: AtomicU64,
    /// Requests per operation, by position in [`OPS`].
    requests_by_op: [AtomicU64; OPS.len()],
    enlistments: AtomicU64,
    /// Control connections open now (kept by the listener).
    pub(crate) connections: AtomicUsize,
    detection: parking_lot::Mutex<Detection>,
    clock: parking_lot::Mutex<RecoveryClock>,
    /// The last servers declared dead, oldest first.
    failures: parking_lot::Mutex<VecDeque<Failure>>,
    /// Per server, the highest map version it said it holds (`watch_map`).
    seen: parking_lot::Mutex<BTreeMap<ServerId, u64>>,
    /// This process resumed a cluster with servers: suspicions of a server
    /// that has not enlisted again since are ignored for `restart_grace`.
    resumed: bool,
    restart_grace: Duration,
    /// Servers that enlisted since this process started.
    enlisted: parking_lot::Mutex<BTreeSet<ServerId>>,
    /// Master leases granted by this process (`lease.rs`).
    leases: parking_lot::Mutex<Leases>,
    /// With the state in etcd: whether this process still leads. No
    /// master lease is granted once it does not (`etcd.rs`).
    fence: Option<Fence>,
    /// The rebalancing or drain job running or last run (`rebalancer.rs`).
    pub(crate) jobs: Jobs,
    /// `--rebalance-on-join`: a new server starts a rebalance.
    auto_rebalance: bool,
}

/// Suspects being checked, and when each was first reported.
#[derive(Default)]
struct Detection {
    checking: BTreeSet<ServerId>,
    first_suspect: BTreeMap<ServerId, Instant>,
    /// The server that first reported each suspect.
    reporter: BTreeMap<ServerId, ServerId>,
    /// Suspects that answered no PING and wait for their lease to end
    /// before they are declared dead.
    condemned: BTreeMap<ServerId, Condemned>,
}

impl Detection {
    /// Forgets what was noted of `server`'s suspicion (it answered, or was
    /// declared dead and its failure recorded).
    fn forget(&mut self, server: ServerId) {
        self.first_suspect.remove(&server);
        self.reporter.remove(&server);
        self.condemned.remove(&server);
    }
}

/// A suspect that answered none of the coordinator's PINGs.
struct Condemned {
    /// When its last PING failed.
    at: Instant,
    /// When its lease surely ended: it is declared dead then.
    until: Instant,
    /// The last PING's failure.
    why: String,
}

/// A server declared dead, as the dashboard lists it (`FAILURES_KEPT` of
/// them, since this process started).
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Failure {
    pub server: ServerId,
    pub native: std::net::SocketAddr,
    pub unix_ms: u64,
    pub reason: String,
    /// The recovery of its tablets; `None` if it had none.
    pub recovery: Option<u64>,
}

/// A suspect being checked now (not yet declared dead).
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct SuspectView {
    pub server: ServerId,
    pub reporter: Option<ServerId>,
    /// Since it was first reported.
    pub suspected_ms: Option<u64>,
    /// "pinging" (the coordinator's PINGs are under way) or "waiting for
    /// its lease to end" (it answered none; declared dead when it ended).
    pub phase: &'static str,
    pub lease_left_ms: Option<u64>,
    pub why: Option<String>,
}

/// The times this process saw of a recovery under way (`RecoveryClock`).
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct RecoveryTimes {
    pub id: u64,
    /// Since it was declared.
    pub elapsed_ms: u64,
    /// First `suspect` to declaration (lease wait included).
    pub detection_ms: Option<u64>,
    /// The part of detection spent waiting for the dead server's lease.
    pub lease_wait_ms: Option<u64>,
    /// Declaration to partitions assigned to recovery masters.
    pub assigned_ms: Option<u64>,
    /// Per finished partition, declaration to its report.
    pub done_ms: BTreeMap<u32, u64>,
    pub objects: u64,
    pub bytes: u64,
}

/// What the dashboard shows of the coordinator itself: the published map
/// and what this process saw happen (`Service::observe`).
pub(crate) struct Observed {
    pub map: Arc<ClusterMap>,
    pub uptime: Duration,
    pub requests: u64,
    pub connections: usize,
    pub leases_held: usize,
    pub suspects: Vec<SuspectView>,
    pub running: Vec<RecoveryTimes>,
    pub finished: Vec<serde_json::Value>,
    pub failures: Vec<Failure>,
}

/// What this process saw of each recovery: when its phases happened and
/// what the recovery masters reported. Lost at a restart: a recovery that
/// was under way then is timed from its `started_unix_ms`, and counts only
/// the reports that came after.
#[derive(Default)]
struct RecoveryClock {
    running: BTreeMap<u64, Running>,
    finished: VecDeque<serde_json::Value>,
    /// Recoveries that finished since this process started.
    finished_count: u64,
}

struct Running {
    dead: ServerId,
    declared: Instant,
    /// First `suspect` to declaration; `None` if not declared by detection.
    detection: Option<Duration>,
    /// The part of `detection` spent waiting for the lease to end.
    lease_wait: Option<Duration>,
    /// Declaration to the first assignment of its partitions.
    assigned: Option<Duration>,
    objects: u64,
    bytes: u64,
    replay_ms: u64,
    /// Per finished partition, the time from declaration to its report.
    done_ms: BTreeMap<u32, u64>,
}

impl Service {
    /// After a restart of this process, a suspicion of a server that has not
    /// enlisted again is ignored for `grace` from the start. When a whole
    /// cluster restarts, servers enlist again one after another and ping
    /// peers whose old addresses are still in the map; declaring those dead
    /// would turn an ordinary restart (each server recovers its own log)
    /// into crash recoveries racing the return of the backups that hold the
    /// logs.
    pub(crate) fn with_restart_grace(mut self, grace: Duration) -> Service {
        self.restart_grace = grace;
        self
    }

    /// Grants master leases of `duration` (`--lease-ms`).
    pub(crate) fn with_lease(self, duration: Duration) -> Service {
        *self.leases.lock() = Leases::new(duration, self.started);
        self
    }

    /// Rebalances after every new server joins (`--rebalance-on-join`).
    pub(crate) fn with_auto_rebalance(mut self, on: bool) -> Service {
        self.auto_rebalance = on;
        self
    }

    /// Grants master leases only while `fence` holds (a leader elected in
    /// etcd).
    pub(crate) fn with_fence(mut self, fence: Option<Fence>) -> Service {
        self.fence = fence;
        self
    }

    /// Loads the state from `store` (a new cluster if it holds none), applies
    /// `replicas` and `sc_group_size` (`--sc-group-size`), and saves it if
    /// that changed anything. Suspects are
    /// checked as `probe` says.
    pub(crate) async fn open(
        store: Arc<dyn StateStore>,
        replicas: Option<u32>,
        sc_group_size: u32,
        probe: ProbeConfig,
    ) -> Result<Service, CoordinatorError> {
        let loader = store.clone();
        let loaded = blocking(move || loader.load()).await.map_err(CoordinatorError::Load)?;
        let (mut state, mut save) = match loaded {
            None => (ClusterState::new(replicas), true),
            Some(bytes) => ClusterState::decode(&bytes, replicas).map_err(CoordinatorError::Corrupt)?,
        };
        save |= state.set_sc_group_size(sc_group_size);
        if save {
            let bytes = state.encode();
            let saver = store.clone();
            blocking(move || saver.save(&bytes)).await.map_err(CoordinatorError::Save)?;
        }
        let map = state.map();
        let resumed = !map.servers.is_empty();
        if map.servers.is_empty() && map.tables.is_empty() {
            info!("new cluster (map version {})", map.version);
        } else {
            info!(
                "resumed cluster: {} servers, {} tables, {} tablets, map version {}, {} replicas, {} recoveries in progress",
                map.servers.len(),
                map.tables.len(),
                map.tablets.len(),
                map.version,
                map.replicas,
                map.recoveries.len()
            );
        }
        // Recoveries under way are timed from when they started.
        let mut clock = RecoveryClock::default();
        let (now_ms, now) = (unix_ms(), Instant::now());
        for r in &map.recoveries {
            let age = Duration::from_millis(now_ms.saturating_sub(r.started_unix_ms));
            clock.running.insert(
                r.id,
                Running {
                    dead: r.dead,
                    declared: now.checked_sub(age).unwrap_or(now),
                    detection: None,
                    lease_wait: None,
                    assigned: None,
                    objects: 0,
                    bytes: 0,
                    replay_ms: 0,
                    done_ms: BTreeMap::new(),
                },
            );
        }
        let (map, _) = watch::channel(Arc::new(map.clone()));
        Ok(Service {
            state: Arc::new(Mutex::new(state)),
            store,
            map,
            probe,
            started: now,
            requests: AtomicU64::new(0),
            requests_by_op: Default::default(),
            enlistments: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            detection: Default::default(),
            clock: parking_lot::Mutex::new(clock),
            failures: Default::default(),
            seen: Default::default(),
            resumed,
            restart_grace: Duration::from_millis(crate::config::DEFAULT_RESTART_GRACE_MS),
            enlisted: Default::default(),
            leases: parking_lot::Mutex::new(Leases::new(Duration::from_millis(DEFAULT_LEASE_MS), now)),
            fence: None,
            jobs: Jobs::default(),
            auto_rebalance: false,
        })
    }

    /// The last published (durable) map.
    pub(crate) fn map(&self) -> Arc<ClusterMap> {
        self.map.borrow().clone()
    }

    /// Follows the published map.
    pub(crate) fn map_watch(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.map.subscribe()
    }

    /// The server a connection proved by presenting `credential` for `id`
    /// ([`ClusterState::prove`]).
    pub(crate) async fn prove(&self, id: ServerId, credential: &Credential) -> Result<Option<ServerId>, String> {
        self.state.lock().await.prove(id, credential)
    }

    /// Answers `req` from `caller` (refused with `unauthorized` if the
    /// caller may not send it). A `watch_map` returns early, with the
    /// current map, once `shutdown` turns true; a suspect's check is
    /// dropped then. An `Enlisted` answer may carry a newly issued
    /// credential in plain hex: the connection masks it.
    pub(crate) async fn handle(
        self: &Arc<Self>,
        req: ControlRequest,
        caller: Caller,
        shutdown: &mut watch::Receiver<bool>,
    ) -> ControlResponse {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.requests_by_op[op_index(&req)].fetch_add(1, Ordering::Relaxed);
        if let Err(message) = caller.authorize(&req) {
            debug!("{} refused: {message}", op_name(&req));
            return ControlResponse::Error { code: ControlErrorCode::Unauthorized, message };
        }
        match req {
            ControlRequest::GetMap => ControlResponse::Map { map: (*self.map()).clone() },
            ControlRequest::GetTable { name } => state::get_table(&self.map(), &name),
            ControlRequest::WatchMap { known_version, timeout_ms, server } => {
                if let Some(server) = server {
                    let mut seen = self.seen.lock();
                    let v = seen.entry(server).or_default();
                    *v = (*v).max(known_version);
                }
                self.watch(known_version, Duration::from_millis(timeout_ms), shutdown).await
            }
            ControlRequest::Stats => self.stats().await,
            ControlRequest::Suspect { reporter, suspect } => {
                self.suspect(reporter, suspect, shutdown.clone());
                ControlResponse::Ok
            }
            ControlRequest::RenewLease { server, .. } if self.fence.as_ref().is_some_and(|f| !f.holds()) => {
                ControlResponse::Error {
                    code: ControlErrorCode::Internal,
                    message: format!("no lease for server {server}: this coordinator is no longer the leader"),
                }
            }
            // A log none of whose heads is on a backup yet acknowledges
            // nothing (`map.unreplicated`): a recovery takes it for empty
            // if no replica of it turns up.
            ControlRequest::RenewLease { server, log } if !self.map().may_serve(log) => ControlResponse::Error {
                code: ControlErrorCode::InvalidRequest,
                message: format!(
                    "no lease for server {server} writing log {}: its head is not yet durable on a backup",
                    log.0
                ),
            },
            ControlRequest::RenewLease { server, log } => {
                let granted = self.leases.lock().renew(&self.map(), (server, log), Instant::now());
                match granted {
                    Ok(d) => ControlResponse::Lease { ms: d.as_millis() as u64 },
                    Err(why) => ControlResponse::Error {
                        code: ControlErrorCode::InvalidRequest,
                        message: format!("no lease for server {server} writing log {}: {why}", log.0),
                    },
                }
            }
            req @ ControlRequest::Enlist { .. } => {
                let previous = match &req {
                    ControlRequest::Enlist { previous, .. } => *previous,
                    _ => None,
                };
                let answer = self.enlist(req, caller).await;
                if let ControlResponse::Enlisted { server, map, .. } = &answer {
                    self.enlisted.lock().insert(*server);
                    let joined =
                        previous != Some(*server) && map.server(*server).is_some_and(|s| s.state == ServerState::Up);
                    if joined && self.auto_rebalance {
                        tokio::spawn(rebalancer::after_join(self.clone(), *server));
                    }
                }
                answer
            }
            ControlRequest::Rebalance { table, dry_run } => {
                rebalancer::start(self, Ask::request(table, None, dry_run)).await
            }
            ControlRequest::Drain { server, undo: true, .. } => self.set_draining(server, false).await,
            ControlRequest::Drain { server, dry_run, .. } => {
                rebalancer::start(self, Ask::request(None, Some(server), dry_run)).await
            }
            req @ (ControlRequest::CreateTable { .. }
            | ControlRequest::DropTable { .. }
            | ControlRequest::Recovered { .. }
            | ControlRequest::RecoveryDone { .. }
            | ControlRequest::RaiseReplicaFloors { .. }
            | ControlRequest::RaiseHeadFloor { .. }
            | ControlRequest::HeadReplicated { .. }
            | ControlRequest::StartMigration { .. }
            | ControlRequest::FinishMigration { .. }
            | ControlRequest::AbortMigration { .. }
            | ControlRequest::SplitTablet { .. }
            | ControlRequest::MergeTablets { .. }) => self.change(req).await,
        }
    }

    /// An enlistment ends the incarnations it replaces (the same id again,
    /// or a live server's native address): condemns their leases
    /// and waits until they surely ended, so that the newcomer never serves
    /// while an old incarnation (a zombie) still may.
    async fn end_leases_replaced_by(&self, req: &ControlRequest) {
        let ControlRequest::Enlist { previous, native, .. } = req else { return };
        let map = self.map();
        let replaced: Vec<(ServerId, LogId)> = map
            .servers
            .iter()
            .filter(|s| s.state != ServerState::Down)
            .filter(|s| Some(s.id) == *previous || (!native.ip().is_unspecified() && s.native == *native))
            .map(|s| (s.id, s.log))
            .collect();
        let until = {
            let mut leases = self.leases.lock();
            replaced.iter().map(|&inc| leases.condemn(inc)).max()
        };
        if let Some(until) = until {
            let wait = until.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                info!(
                    "enlistment replaces {:?}: waiting {} ms for their leases to end",
                    replaced.iter().map(|(s, l)| format!("server {s} (log {})", l.0)).collect::<Vec<_>>(),
                    wait.as_millis()
                );
                tokio::time::sleep_until(until.into()).await;
            }
        }
    }

    async fn watch(
        &self,
        known_version: u64,
        timeout: Duration,
        shutdown: &mut watch::Receiver<bool>,
    ) -> ControlResponse {
        let mut rx = self.map.subscribe();
        tokio::select! {
            _ = tokio::time::timeout(timeout.min(MAX_WATCH), rx.wait_for(|m| m.version > known_version)) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
        let map = (**rx.borrow()).clone();
        ControlResponse::Map { map }
    }

    async fn stats(&self) -> ControlResponse {
        let mut stats = self.state.lock().await.stats();
        stats["uptime_secs"] = self.started.elapsed().as_secs().into();
        stats["requests"] = self.requests.load(Ordering::Relaxed).into();
        stats["enlistments"] = self.enlistments.load(Ordering::Relaxed).into();
        stats["connections"] = self.connections.load(Ordering::Relaxed).into();
        {
            let leases = self.leases.lock();
            stats["lease_ms"] = (leases.duration().as_millis() as u64).into();
            stats["leases_held"] = leases.held(Instant::now()).into();
        }
        {
            let seen = self.seen.lock();
            if let Some(servers) = stats["servers"].as_array_mut() {
                for s in servers {
                    let id = ServerId(s["id"].as_u64().unwrap_or(0));
                    s["map_version_seen"] = seen.get(&id).copied().into();
                }
            }
        }
        let clock = self.clock.lock();
        if let Some(recoveries) = stats["recoveries"].as_array_mut() {
            let now = unix_ms();
            for r in recoveries {
                let id = r["id"].as_u64().unwrap_or(0);
                let started = r["started_unix_ms"].as_u64().unwrap_or(now);
                match clock.running.get(&id) {
                    Some(run) => {
                        r["elapsed_ms"] = millis(run.declared.elapsed()).into();
                        r["detection_ms"] = run.detection.map(millis).into();
                        r["objects"] = run.objects.into();
                        r["bytes"] = run.bytes.into();
                        if let Some(parts) = r["partitions"].as_array_mut() {
                            for (i, p) in parts.iter_mut().enumerate() {
                                p["done_after_ms"] = run.done_ms.get(&(i as u32)).copied().into();
                            }
                        }
                    }
                    None => r["elapsed_ms"] = now.saturating_sub(started).into(),
                }
            }
        }
        stats["finished_recoveries"] = clock.finished.iter().cloned().collect::<Vec<_>>().into();
        stats["rebalance"] = serde_json::to_value(self.jobs.last()).unwrap_or_default();
        ControlResponse::Stats { stats }
    }

    /// What the coordinator's metrics report (`metrics.rs`), read without
    /// the state lock: counters, the published map, leases, recoveries.
    /// Recovery times come from the same bookkeeping (`RecoveryClock`) as
    /// the dashboard's ([`observe`](Self::observe)).
    pub(crate) fn figures(&self) -> Figures {
        let now = Instant::now();
        let (lease, leases_held) = {
            let leases = self.leases.lock();
            (leases.duration(), leases.held(now))
        };
        let clock = self.clock.lock();
        let ms = |v: &serde_json::Value| v.as_u64();
        Figures {
            uptime: self.started.elapsed(),
            requests: OPS.iter().zip(&self.requests_by_op).map(|(op, n)| (*op, n.load(Ordering::Relaxed))).collect(),
            enlistments: self.enlistments.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            map: self.map(),
            lease,
            leases_held,
            recoveries_finished: clock.finished_count,
            running: clock
                .running
                .values()
                .map(|r| RunningFigures { elapsed: r.declared.elapsed(), objects: r.objects, bytes: r.bytes })
                .collect(),
            last_finished: clock.finished.back().map(|f| FinishedFigures {
                detection_ms: ms(&f["detection_ms"]),
                lease_wait_ms: ms(&f["lease_wait_ms"]),
                assigned_ms: ms(&f["assigned_ms"]),
                replay_ms: ms(&f["replay_ms"]),
                total_ms: ms(&f["total_ms"]).unwrap_or(0),
            }),
        }
    }

    /// What the dashboard shows of the coordinator: the published map,
    /// suspects being checked, recoveries' times, the last failures.
    /// Takes no lock that a request holds while it waits.
    pub(crate) fn observe(&self) -> Observed {
        let now = Instant::now();
        let suspects = {
            let d = self.detection.lock();
            d.checking
                .iter()
                .map(|&server| {
                    let condemned = d.condemned.get(&server);
                    SuspectView {
                        server,
                        reporter: d.reporter.get(&server).copied(),
                        suspected_ms: d.first_suspect.get(&server).map(|t| millis(now.saturating_duration_since(*t))),
                        phase: if condemned.is_some() { "waiting for its lease to end" } else { "pinging" },
                        lease_left_ms: condemned.map(|c| millis(c.until.saturating_duration_since(now))),
                        why: condemned.map(|c| c.why.clone()),
                    }
                })
                .collect()
        };
        let (running, finished) = {
            let clock = self.clock.lock();
            let running = clock
                .running
                .iter()
                .map(|(&id, run)| RecoveryTimes {
                    id,
                    elapsed_ms: millis(now.saturating_duration_since(run.declared)),
                    detection_ms: run.detection.map(millis),
                    lease_wait_ms: run.lease_wait.map(millis),
                    assigned_ms: run.assigned.map(millis),
                    done_ms: run.done_ms.clone(),
                    objects: run.objects,
                    bytes: run.bytes,
                })
                .collect();
            (running, clock.finished.iter().cloned().collect())
        };
        Observed {
            map: self.map(),
            uptime: self.started.elapsed(),
            requests: self.requests.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            leases_held: self.leases.lock().held(now),
            suspects,
            running,
            finished,
            failures: self.failures.lock().iter().cloned().collect(),
        }
    }

    /// `reporter` cannot reach `suspect`: unless it is unknown, already
    /// down, or being checked, check it in the background and declare it
    /// dead if it answers no PING.
    fn suspect(self: &Arc<Self>, reporter: ServerId, suspect: ServerId, mut shutdown: watch::Receiver<bool>) {
        let map = self.map();
        let native = match map.server(suspect) {
            None => return debug!("server {reporter} suspects server {suspect}, which is unknown; ignored"),
            Some(s) if s.state == ServerState::Down => {
                return debug!("server {reporter} suspects server {suspect}, which is already down; ignored")
            }
            Some(s) => (s.native, s.log),
        };
        let (native, log) = native;
        if self.resumed && self.started.elapsed() < self.restart_grace && !self.enlisted.lock().contains(&suspect) {
            return info!(
                "server {reporter} suspects server {suspect}, which has not enlisted since this coordinator \
                 resumed the cluster {} ms ago; not checked before {} ms",
                self.started.elapsed().as_millis(),
                self.restart_grace.as_millis()
            );
        }
        {
            let mut d = self.detection.lock();
            if !d.checking.insert(suspect) {
                return debug!("server {reporter} suspects server {suspect}, which is being checked already");
            }
            d.first_suspect.entry(suspect).or_insert_with(Instant::now);
            d.reporter.entry(suspect).or_insert(reporter);
        }
        info!("server {reporter} cannot reach server {suspect}; pinging it at {native}");
        let this = self.clone();
        tokio::spawn(async move {
            let verdict = probe(native, this.probe).await;
            match verdict {
                Ok(()) => {
                    info!("server {suspect} answers a ping; it stays up");
                    this.detection.lock().forget(suspect);
                }
                Err(_) if *shutdown.borrow() => {}
                Err(why) => {
                    // Nobody else serves its tablets while it may still hold
                    // a lease (docs/recovery.md, "Leases").
                    let until = this.leases.lock().condemn((suspect, log));
                    let condemned = Condemned { at: Instant::now(), until, why: why.clone() };
                    this.detection.lock().condemned.insert(suspect, condemned);
                    warn!(
                        "server {suspect} at {native} answered none of {} pings ({why}); declaring it dead once \
                         its lease has ended ({} ms)",
                        this.probe.attempts,
                        until.saturating_duration_since(Instant::now()).as_millis()
                    );
                    tokio::select! {
                        _ = tokio::time::sleep_until(until.into()) => {}
                        _ = shutdown.wait_for(|s| *s) => {
                            let mut d = this.detection.lock();
                            d.checking.remove(&suspect);
                            d.condemned.remove(&suspect);
                            return;
                        }
                    }
                    // Only the incarnation that was condemned: one that
                    // enlisted again meanwhile (a restart) is not this one.
                    let declare = move |s: &mut ClusterState, now| Outcome {
                        response: ControlResponse::Ok,
                        changed: s.map().server(suspect).is_some_and(|x| x.log == log) && s.declare_dead(suspect, now),
                    };
                    let resp = this.commit("declare_dead", declare, |_, _, _| {});
                    if let ControlResponse::Error { message, .. } = resp.await {
                        error!("server {suspect} could not be declared dead: {message}");
                        this.detection.lock().forget(suspect);
                    }
                }
            }
            let mut d = this.detection.lock();
            d.checking.remove(&suspect);
            d.condemned.remove(&suspect);
        });
    }

    /// Decides an enlistment from `caller` ([`ClusterState::enlist_as`]),
    /// issuing a fresh credential to a server that has none.
    async fn enlist(self: &Arc<Self>, req: ControlRequest, caller: Caller) -> ControlResponse {
        let by = match caller {
            Caller::Unchecked => Enlister::Unchecked,
            Caller::Server(id) => Enlister::Member(Some(id)),
            Caller::Member | Caller::Anonymous => Enlister::Member(None),
        };
        // An enlistment that will be accepted and replaces a live
        // incarnation waits for that one's lease to end; one that will be
        // refused condemns nothing (else a refused claim would cost a live
        // server its lease).
        let accepted = {
            let mut dry = self.state.lock().await.clone();
            matches!(dry.enlist_as(&req, by, None, unix_ms()).0.response, ControlResponse::Enlisted { .. })
        };
        if accepted {
            self.end_leases_replaced_by(&req).await;
        }
        let fresh = Credential::random();
        let issued = Arc::new(AtomicBool::new(false));
        let logged = req.clone();
        let flag = issued.clone();
        let mut answer = self
            .commit(
                "enlist",
                move |state, now| {
                    let (out, issued) = state.enlist_as(&req, by, Some(&fresh.digest_hex()), now);
                    flag.store(issued, Ordering::Relaxed);
                    out
                },
                move |this, out, state| this.log(&logged, out, state),
            )
            .await;
        if let ControlResponse::Enlisted { credential, .. } = &mut answer {
            if issued.load(Ordering::Relaxed) {
                *credential = Some(fresh.to_hex());
            }
        }
        answer
    }

    /// Marks `server` draining or not ([`ClusterState::set_draining`]),
    /// saved and published like any change.
    pub(crate) async fn set_draining(self: &Arc<Self>, server: ServerId, on: bool) -> ControlResponse {
        self.commit(
            "drain",
            move |state, _| state.set_draining(server, on),
            move |_, out, _| {
                if out.changed {
                    info!(
                        "server {server} {}",
                        if on { "is draining: it takes no new tablets" } else { "is no longer draining" }
                    );
                }
            },
        )
        .await
    }

    /// Saves `job` as the rebalancing job running, or (`None`) forgets
    /// job `clear` if it is the one saved ([`ClusterState::set_rebalance_job`]).
    pub(crate) async fn save_job(self: &Arc<Self>, job: Option<SavedJob>, clear: u64) -> ControlResponse {
        self.commit("rebalance_job", move |state, _| state.set_rebalance_job(job, clear), |_, _, _| {}).await
    }

    /// The saved rebalancing job, if any.
    pub(crate) async fn saved_job(&self) -> Option<SavedJob> {
        self.state.lock().await.rebalance_job().cloned()
    }

    /// Whether `--auto-rebalance` is on.
    pub(crate) fn auto_rebalance(&self) -> bool {
        self.auto_rebalance
    }

    /// The servers being drained.
    pub(crate) async fn draining(&self) -> BTreeSet<ServerId> {
        self.state.lock().await.draining().clone()
    }

    /// Decides `req`, saves the result if it changed, then publishes it.
    pub(crate) async fn change(self: &Arc<Self>, req: ControlRequest) -> ControlResponse {
        let (name, logged) = (op_name(&req), req.clone());
        self.commit(
            name,
            move |state, now| state.apply(&req, now),
            move |this, out, state| this.log(&logged, out, state),
        )
        .await
    }

    /// Runs `decide` on a copy of the state (with the time now); if it
    /// changed the copy, saves it, makes it current and publishes its map.
    /// Then `after` sees the outcome and the current state, and what
    /// happened to recoveries is logged. Returns `decide`'s response, or
    /// `internal` if the change could not be saved (then `after` is not
    /// called).
    async fn commit<F, A>(self: &Arc<Self>, what: &'static str, decide: F, after: A) -> ControlResponse
    where
        F: FnOnce(&mut ClusterState, u64) -> Outcome + Send + 'static,
        A: FnOnce(&Service, &Outcome, &ClusterState) + Send + 'static,
    {
        let mut current = self.state.clone().lock_owned().await;
        let this = self.clone();
        let step = blocking(move || {
            let mut next = current.clone();
            let out = decide(&mut next, unix_ms());
            if out.changed {
                if let Err(e) = this.store.save(&next.encode()) {
                    error!("cannot save the coordinator's state; refusing {what}: {e}");
                    return Ok(ControlResponse::Error {
                        code: ControlErrorCode::Internal,
                        message: format!("the coordinator cannot save its state: {e}"),
                    });
                }
                let before = std::mem::replace(&mut *current, next);
                this.map.send_replace(Arc::new(current.map().clone()));
                this.leases.lock().retain_live(current.map());
                after(&this, &out, &current);
                this.track_recoveries(before.map(), current.map());
            } else {
                after(&this, &out, &current);
            }
            Ok(out.response)
        });
        match step.await {
            Ok(response) => response,
            Err(e) => ControlResponse::Error { code: ControlErrorCode::Internal, message: e.to_string() },
        }
    }

    /// Logs and times what a saved change did to recoveries: declared,
    /// (re)assigned, finished. Records the servers it declared dead
    /// (`failures`), with why.
    fn track_recoveries(&self, before: &ClusterMap, after: &ClusterMap) {
        // Per server declared dead by this change: its detection time and
        // lease wait, taken from what failure detection noted.
        let mut declared: BTreeMap<ServerId, (Option<Duration>, Option<Duration>)> = BTreeMap::new();
        for s in &after.servers {
            let was = before.server(s.id).map(|b| b.state);
            if s.state != ServerState::Down || !was.is_some_and(|w| w != ServerState::Down) {
                continue;
            }
            let recovery = after.recoveries.iter().find(|r| r.dead == s.id).map(|r| r.id);
            if recovery.is_none() && !before.recoveries.iter().any(|r| r.dead == s.id) {
                info!("server {} declared dead; it had no tablets, its logs are free", s.id);
            }
            let (first, reporter, condemned) = {
                let mut d = self.detection.lock();
                (d.first_suspect.remove(&s.id), d.reporter.remove(&s.id), d.condemned.remove(&s.id))
            };
            let reason = match (&condemned, reporter) {
                (Some(c), reporter) => format!(
                    "{}answered none of the coordinator's {} pings ({}); declared dead once its lease had ended",
                    reporter.map_or(String::new(), |r| format!("reported unreachable by server {r}; ")),
                    self.probe.attempts,
                    c.why
                ),
                (None, _) => match after.servers.iter().find(|o| o.id != s.id && o.native == s.native) {
                    Some(o) => format!("server {} enlisted at its address {}", o.id, s.native),
                    None => "declared dead".to_string(),
                },
            };
            let mut failures = self.failures.lock();
            failures.push_back(Failure { server: s.id, native: s.native, unix_ms: unix_ms(), reason, recovery });
            while failures.len() > FAILURES_KEPT {
                failures.pop_front();
            }
            let lease_wait = condemned.map(|c| c.until.saturating_duration_since(c.at));
            declared.insert(s.id, (first.map(|t| t.elapsed()), lease_wait));
        }
        let mut clock = self.clock.lock();
        for r in &after.recoveries {
            let old = before.recoveries.iter().find(|o| o.id == r.id);
            if old.is_none() {
                let (detection, lease_wait) = declared.remove(&r.dead).unwrap_or_default();
                info!(
                    "server {} declared dead{}: recovery {} of logs {:?}, fenced at version {}",
                    r.dead,
                    detection.map_or(String::new(), |d| format!(" {} ms after it was first suspected", millis(d))),
                    r.id,
                    r.logs.iter().map(|l| l.0).collect::<Vec<_>>(),
                    r.log_version
                );
                clock.running.insert(
                    r.id,
                    Running {
                        dead: r.dead,
                        declared: Instant::now(),
                        detection,
                        lease_wait,
                        assigned: None,
                        objects: 0,
                        bytes: 0,
                        replay_ms: 0,
                        done_ms: BTreeMap::new(),
                    },
                );
            }
            if old.is_none_or(|o| o.partitions.is_empty()) {
                if r.partitions.is_empty() {
                    warn!("recovery {}: no server is up to recover server {}; waiting for one", r.id, r.dead);
                } else {
                    info!("recovery {}: {}", r.id, describe_partitions(r));
                    if let Some(run) = clock.running.get_mut(&r.id) {
                        run.assigned.get_or_insert(run.declared.elapsed());
                    }
                }
            }
            if let Some(old) = old {
                for (i, (p, q)) in old.partitions.iter().zip(&r.partitions).enumerate() {
                    if q.done && !p.done {
                        if let Some(run) = clock.running.get_mut(&r.id) {
                            run.done_ms.insert(i as u32, millis(run.declared.elapsed()));
                        }
                    }
                }
            }
        }
        for r in before.recoveries.iter().filter(|r| !after.recoveries.iter().any(|a| a.id == r.id)) {
            let run = clock.running.remove(&r.id);
            let finished = finish_record(r, run.as_ref());
            let ms = |v: &serde_json::Value| v.as_u64().map_or("unknown".to_string(), |v| format!("{v} ms"));
            info!(
                "recovery {} of server {} finished: detection {}, replay {}, total {} (declaration to last partition), {} objects, {} bytes, {} partitions",
                r.id,
                r.dead,
                ms(&finished["detection_ms"]),
                ms(&finished["replay_ms"]),
                ms(&finished["total_ms"]),
                finished["objects"],
                finished["bytes"],
                r.partitions.len()
            );
            clock.finished.push_back(finished);
            clock.finished_count += 1;
            while clock.finished.len() > FINISHED_RECOVERIES_KEPT {
                clock.finished.pop_front();
            }
        }
    }

    /// One line per change worth an operator's attention.
    fn log(&self, req: &ControlRequest, out: &Outcome, state: &ClusterState) {
        match (req, &out.response) {
            (
                ControlRequest::Enlist { previous, native, .. },
                ControlResponse::Enlisted { server, log, recover, map, .. },
            ) => {
                self.enlistments.fetch_add(1, Ordering::Relaxed);
                if *previous == Some(*server) {
                    info!(
                        "server {server} re-enlisted at {native}: log {}, must replay logs {:?} ({} tablets, map version {})",
                        log.0,
                        recover.iter().map(|l| l.0).collect::<Vec<_>>(),
                        map.tablets_of(*server).count(),
                        map.version
                    );
                } else {
                    info!("server {server} enlisted at {native}: log {}, map version {}", log.0, map.version);
                }
            }
            (ControlRequest::CreateTable { name, .. }, ControlResponse::Table { table }) if out.changed => {
                let tablets = state.map().tablets.iter().filter(|t| t.table == table.id).count();
                info!(
                    "created table '{name}': id {}, {tablets} tablets, map version {}",
                    table.id.0,
                    state.map().version
                );
            }
            (ControlRequest::DropTable { name }, ControlResponse::Ok) => {
                info!("dropped table '{name}' (map version {})", state.map().version);
            }
            (ControlRequest::Recovered { server, logs }, ControlResponse::Ok) if out.changed => {
                let left = state.recover_list(*server);
                let now = state.map().server(*server).map(|s| s.state);
                info!(
                    "server {server} reports logs {:?} recovered; {} left to replay, now {now:?}",
                    logs.iter().map(|l| l.0).collect::<Vec<_>>(),
                    left.len()
                );
            }
            (
                ControlRequest::RecoveryDone { recovery, partition, server, objects, bytes, replay_ms, .. },
                ControlResponse::Ok,
            ) if out.changed => {
                info!(
                    "recovery {recovery}: server {server} replayed partition {partition}: {objects} objects, {bytes} bytes in {replay_ms} ms"
                );
                if let Some(run) = self.clock.lock().running.get_mut(recovery) {
                    run.objects += objects;
                    run.bytes += bytes;
                    run.replay_ms = run.replay_ms.max(*replay_ms);
                }
            }
            (ControlRequest::RaiseReplicaFloors { server, floors }, ControlResponse::Ok) if out.changed => {
                let list: Vec<String> =
                    floors.iter().map(|f| format!("{}/{}@{}", f.log.0, f.segment.0, f.epoch)).collect();
                info!(
                    "server {server}: replicas below these floors are stale (log/segment@epoch): {} (map version {})",
                    list.join(", "),
                    state.map().version
                );
            }
            (ControlRequest::StartMigration { table, to, chunks: Some(c), .. }, ControlResponse::Map { map }) => {
                info!(
                    "migration of chunk ids {}:{}..={} of table '{table}' to server {to} started (map version {})",
                    c.node, c.lo, c.hi, map.version
                );
            }
            (ControlRequest::StartMigration { table, start_hash, to, .. }, ControlResponse::Map { map }) => {
                info!(
                    "migration of table '{table}' tablet {start_hash:#018x} to server {to} started (map version {})",
                    map.version
                );
            }
            (ControlRequest::SplitTablet { table, at }, ControlResponse::Map { map }) => {
                info!("split a tablet of table '{table}' at {at:#018x} (map version {})", map.version);
            }
            (ControlRequest::MergeTablets { table, at }, ControlResponse::Map { map }) => {
                info!(
                    "merged the tablet of table '{table}' at {at:#018x} into the one before (map version {})",
                    map.version
                );
            }
            (ControlRequest::FinishMigration { id, server, .. }, ControlResponse::Ok) if out.changed => {
                info!("migration {id} from server {server} committed (map version {})", state.map().version);
            }
            (ControlRequest::AbortMigration { id, server, reason }, ControlResponse::Ok) if out.changed => {
                warn!("migration {id} aborted by server {server}: {reason} (map version {})", state.map().version);
            }
            (ControlRequest::RaiseReplicaFloors { server, .. }, ControlResponse::Error { code, message }) => {
                warn!("server {server}: replica floors refused: {code:?}: {message}");
            }
            (ControlRequest::RaiseHeadFloor { server, log, segment }, ControlResponse::Error { code, message }) => {
                warn!("server {server}: head floor {} of log {} refused: {code:?}: {message}", segment.0, log.0);
            }
            (_, ControlResponse::Error { code, message }) => {
                debug!("{} refused: {code:?}: {message}", op_name(req));
            }
            _ => {}
        }
    }
}

/// "partition 0: server 2, 3 tablets; ..."
fn describe_partitions(r: &Recovery) -> String {
    let parts: Vec<String> = r
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| format!("partition {i}: server {}, {} tablets", p.master, p.tablets.len()))
        .collect();
    format!("{} partitions of server {}'s tablets: {}", r.partitions.len(), r.dead, parts.join("; "))
}

/// See [`Service::figures`].
pub(crate) struct Figures {
    pub uptime: Duration,
    /// Requests received per operation (every name of [`OPS`]).
    pub requests: Vec<(&'static str, u64)>,
    pub enlistments: u64,
    pub connections: usize,
    pub map: Arc<ClusterMap>,
    pub lease: Duration,
    pub leases_held: usize,
    pub recoveries_finished: u64,
    pub running: Vec<RunningFigures>,
    /// The last recovery that finished since this process started.
    pub last_finished: Option<FinishedFigures>,
}

/// A recovery under way: time since its server was declared dead, and
/// what its recovery masters reported replayed so far.
pub(crate) struct RunningFigures {
    pub elapsed: Duration,
    pub objects: u64,
    pub bytes: u64,
}

/// A finished recovery's phase times (`None`: not known to this process).
pub(crate) struct FinishedFigures {
    pub detection_ms: Option<u64>,
    /// The part of detection spent waiting for the dead server's lease.
    pub lease_wait_ms: Option<u64>,
    /// Declaration to partitions assigned to recovery masters.
    pub assigned_ms: Option<u64>,
    pub replay_ms: Option<u64>,
    pub total_ms: u64,
}

/// What `stats` keeps of a finished recovery.
fn finish_record(r: &Recovery, run: Option<&Running>) -> serde_json::Value {
    let total = match run {
        Some(run) => millis(run.declared.elapsed()),
        None => unix_ms().saturating_sub(r.started_unix_ms),
    };
    serde_json::json!({
        "id": r.id,
        "dead": run.map_or(r.dead, |run| run.dead),
        "partitions": r.partitions.len(),
        "detection_ms": run.and_then(|run| run.detection.map(millis)),
        "lease_wait_ms": run.and_then(|run| run.lease_wait.map(millis)),
        "assigned_ms": run.and_then(|run| run.assigned.map(millis)),
        "finished_unix_ms": unix_ms(),
        "replay_ms": run.map(|run| run.replay_ms),
        "total_ms": total,
        "objects": run.map(|run| run.objects),
        "bytes": run.map(|run| run.bytes),
        "started_unix_ms": r.started_unix_ms,
    })
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// Runs `f` on the blocking pool; a panic in it becomes an error.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> std::io::Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(format!("coordinator task failed: {e}"))),
    }
}

/// The names of the control operations, for logs and metrics.
pub(crate) const OPS: [&str; 21] = [
    "enlist",
    "get_map",
    "watch_map",
    "create_table",
    "drop_table",
    "get_table",
    "recovered",
    "stats",
    "suspect",
    "recovery_done",
    "raise_replica_floors",
    "renew_lease",
    "start_migration",
    "finish_migration",
    "abort_migration",
    "split_tablet",
    "merge_tablets",
    "rebalance",
    "drain",
    "head_replicated",
    "raise_head_floor",
];

fn op_name(req: &ControlRequest) -> &'static str {
    OPS[op_index(req)]
}

/// The position of `req`'s operation in [`OPS`].
fn op_index(req: &ControlRequest) -> usize {
    match req {
        ControlRequest::Enlist { .. } => 0,
        ControlRequest::GetMap => 1,
        ControlRequest::WatchMap { .. } => 2,
        ControlRequest::CreateTable { .. } => 3,
        ControlRequest::DropTable { .. } => 4,
        ControlRequest::GetTable { .. } => 5,
        ControlRequest::Recovered { .. } => 6,
        ControlRequest::Stats => 7,
        ControlRequest::Suspect { .. } => 8,
        ControlRequest::RecoveryDone { .. } => 9,
        ControlRequest::RaiseReplicaFloors { .. } => 10,
        ControlRequest::RenewLease { .. } => 11,
        ControlRequest::StartMigration { .. } => 12,
        ControlRequest::FinishMigration { .. } => 13,
        ControlRequest::AbortMigration { .. } => 14,
        ControlRequest::SplitTablet { .. } => 15,
        ControlRequest::MergeTablets { .. } => 16,
        ControlRequest::Rebalance { .. } => 17,
        ControlRequest::Drain { .. } => 18,
        ControlRequest::HeadReplicated { .. } => 19,
        ControlRequest::RaiseHeadFloor { .. } => 20,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::DEFAULT_SC_GROUP_SIZE;
    use std::io;
    use std::net::SocketAddr;

    /// A store in memory whose saves can be made to fail.
    #[derive(Default)]
    struct FlakyStore {
        bytes: parking_lot::Mutex<Option<Vec<u8>>>,
        fail: AtomicBool,
    }

    impl StateStore for FlakyStore {
        fn load(&self) -> io::Result<Option<Vec<u8>>> {
            Ok(self.bytes.lock().clone())
        }

        fn save(&self, state: &[u8]) -> io::Result<()> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(io::Error::other("disk on fire"));
            }
            *self.bytes.lock() = Some(state.to_vec());
            Ok(())
        }
    }

    fn enlist() -> ControlRequest {
        let a = SocketAddr::from(([127, 0, 0, 1], 5000));
        ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a }
    }

    #[tokio::test]
    async fn change_is_saved_before_it_is_published() {
        let store = Arc::new(FlakyStore::default());
        let service =
            Arc::new(Service::open(store.clone(), None, DEFAULT_SC_GROUP_SIZE, ProbeConfig::default()).await.unwrap());
        let (_tx, mut rx) = watch::channel(false);
        let saved = store.bytes.lock().clone().unwrap();
        assert_eq!(ClusterState::decode(&saved, None).unwrap().0.map(), &*service.map());

        let resp = service.handle(enlist(), Caller::Unchecked, &mut rx).await;
        assert!(matches!(resp, ControlResponse::Enlisted { .. }), "{resp:?}");
        let saved = store.bytes.lock().clone().unwrap();
        assert_eq!(ClusterState::decode(&saved, None).unwrap().0.map(), &*service.map());
        assert_eq!(service.map().servers.len(), 1);
    }

    #[tokio::test]
    async fn change_that_cannot_be_saved_is_refused_and_forgotten() {
        let store = Arc::new(FlakyStore::default());
        let service =
            Arc::new(Service::open(store.clone(), None, DEFAULT_SC_GROUP_SIZE, ProbeConfig::default()).await.unwrap());
        let (_tx, mut rx) = watch::channel(false);
        service.handle(enlist(), Caller::Unchecked, &mut rx).await;
        let before = service.map();

        store.fail.store(true, Ordering::Relaxed);
        let create =
            ControlRequest::CreateTable { name: "t".into(), span: 2, slots: false, chunks: false, stream: None };
        let resp = service.handle(create.clone(), Caller::Unchecked, &mut rx).await;
        assert!(matches!(resp, ControlResponse::Error { code: ControlErrorCode::Internal, .. }), "{resp:?}");
        assert_eq!(service.map(), before);
        let get = service.handle(ControlRequest::GetTable { name: "t".into() }, Caller::Unchecked, &mut rx).await;
        assert!(matches!(get, ControlResponse::Error { code: ControlErrorCode::NotFound, .. }));

        store.fail.store(false, Ordering::Relaxed);
        let resp = service.handle(create, Caller::Unchecked, &mut rx).await;
        assert!(matches!(resp, ControlResponse::Table { .. }), "{resp:?}");
        assert_eq!(service.map().version, before.version + 1);
    }

    #[tokio::test]
    async fn a_resumed_coordinator_checks_no_suspect_that_has_not_enlisted_again_within_the_grace() {
        // A cluster of two servers whose addresses nobody listens on.
        let unused = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let dead = [unused(), unused()];
        let store = Arc::new(FlakyStore::default());
        let (_tx, mut rx) = watch::channel(false);
        let first =
            Arc::new(Service::open(store.clone(), None, DEFAULT_SC_GROUP_SIZE, ProbeConfig::default()).await.unwrap());
        let mut ids = Vec::new();
        for a in dead {
            let req = ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a };
            match first.handle(req, Caller::Unchecked, &mut rx).await {
                ControlResponse::Enlisted { server, .. } => ids.push(server),
                other => panic!("{other:?}"),
            }
        }
        drop(first);
        let probe = ProbeConfig { attempts: 1, timeout: Duration::from_millis(50) };
        let down = |s: &Service, id: ServerId| s.map().server(id).unwrap().state == ServerState::Down;

        // Resumed with a grace: server 1 has not enlisted again, server 0 has.
        let resumed = Service::open(store.clone(), None, DEFAULT_SC_GROUP_SIZE, probe).await.unwrap();
        let resumed = Arc::new(resumed.with_restart_grace(Duration::from_secs(60)));
        let a = dead[0];
        let again = ControlRequest::Enlist { previous: Some(ids[0]), native: a, resp: a, backup: a };
        assert!(matches!(resumed.handle(again, Caller::Unchecked, &mut rx).await, ControlResponse::Enlisted { .. }));
        for suspect in [ids[1], ids[0]] {
            let req = ControlRequest::Suspect { reporter: ids[0], suspect };
            assert_eq!(resumed.handle(req, Caller::Unchecked, &mut rx).await, ControlResponse::Ok);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !down(&resumed, ids[0]) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(down(&resumed, ids[0]), "a server that enlisted again is checked and declared dead");
        assert!(!down(&resumed, ids[1]), "a server not back yet is left alone during the grace");

        // Without a grace, the same suspicion is checked at once.
        drop(resumed);
        let no_grace = Arc::new(
            Service::open(store, None, DEFAULT_SC_GROUP_SIZE, probe).await.unwrap().with_restart_grace(Duration::ZERO),
        );
        let req = ControlRequest::Suspect { reporter: ids[0], suspect: ids[1] };
        assert_eq!(no_grace.handle(req, Caller::Unchecked, &mut rx).await, ControlResponse::Ok);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !down(&no_grace, ids[1]) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(down(&no_grace, ids[1]));
    }

    #[tokio::test]
    async fn a_server_declared_dead_is_listed_with_why_and_its_recovery_is_timed() {
        let unused = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let service = Arc::new(
            Service::open(
                Arc::new(FlakyStore::default()),
                None,
                DEFAULT_SC_GROUP_SIZE,
                ProbeConfig { attempts: 1, timeout: Duration::from_millis(50) },
            )
            .await
            .unwrap(),
        );
        let (_tx, mut rx) = watch::channel(false);
        let mut ids = Vec::new();
        for _ in 0..2 {
            let a = unused();
            let req = ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a };
            match service.handle(req, Caller::Unchecked, &mut rx).await {
                ControlResponse::Enlisted { server, .. } => ids.push(server),
                other => panic!("{other:?}"),
            }
        }
        let create =
            ControlRequest::CreateTable { name: "t".into(), span: 2, slots: false, chunks: false, stream: None };
        assert!(matches!(service.handle(create, Caller::Unchecked, &mut rx).await, ControlResponse::Table { .. }));
        assert!(service.observe().failures.is_empty());

        let req = ControlRequest::Suspect { reporter: ids[0], suspect: ids[1] };
        assert_eq!(service.handle(req, Caller::Unchecked, &mut rx).await, ControlResponse::Ok);
        let suspects = service.observe().suspects;
        assert_eq!(suspects.len(), 1);
        assert_eq!((suspects[0].server, suspects[0].reporter), (ids[1], Some(ids[0])));
        // The failure is listed when the declaration is saved, and the
        // suspect forgotten just after: wait for both.
        let deadline = Instant::now() + Duration::from_secs(5);
        let settled = |o: &Observed| !o.failures.is_empty() && o.suspects.is_empty();
        while !settled(&service.observe()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seen = service.observe();
        assert_eq!(seen.failures.len(), 1);
        let f = &seen.failures[0];
        assert_eq!(f.server, ids[1]);
        assert!(f.reason.contains(&format!("reported unreachable by server {}", ids[0])), "{}", f.reason);
        assert!(f.reason.contains("pings"), "{}", f.reason);
        let recovery = f.recovery.expect("it had tablets");
        assert!(seen.suspects.is_empty());
        let times = seen.running.iter().find(|t| t.id == recovery).expect("the recovery is timed");
        assert!(times.detection_ms.is_some() && times.lease_wait_ms.is_some(), "{times:?}");
        assert!(times.assigned_ms.is_some(), "a server is up to take the partitions");
    }

    #[tokio::test]
    async fn a_server_replaced_at_its_address_is_listed_with_why() {
        let service = Arc::new(
            Service::open(Arc::new(FlakyStore::default()), None, DEFAULT_SC_GROUP_SIZE, ProbeConfig::default())
                .await
                .unwrap(),
        );
        let (_tx, mut rx) = watch::channel(false);
        let first = service.handle(enlist(), Caller::Unchecked, &mut rx).await;
        let second = service.handle(enlist(), Caller::Unchecked, &mut rx).await;
        let (ControlResponse::Enlisted { server: old, .. }, ControlResponse::Enlisted { server: new, .. }) =
            (first, second)
        else {
            panic!("both enlist");
        };
        let failures = service.observe().failures;
        assert_eq!(failures.len(), 1);
        assert_eq!((failures[0].server, failures[0].recovery), (old, None));
        assert!(
            failures[0].reason.contains(&format!("server {new} enlisted at its address")),
            "{}",
            failures[0].reason
        );
    }

    #[tokio::test]
    async fn open_refuses_a_corrupt_state() {
        let store = Arc::new(FlakyStore::default());
        *store.bytes.lock() = Some(b"{\"format\":1}".to_vec());
        assert!(matches!(
            Service::open(store, None, DEFAULT_SC_GROUP_SIZE, ProbeConfig::default()).await,
            Err(CoordinatorError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn watch_returns_at_shutdown() {
        let service = Arc::new(
            Service::open(Arc::new(FlakyStore::default()), None, DEFAULT_SC_GROUP_SIZE, ProbeConfig::default())
                .await
                .unwrap(),
        );
        let (tx, mut rx) = watch::channel(false);
        let version = service.map().version;
        let waiter = {
            let service = service.clone();
            tokio::spawn(async move {
                service
                    .handle(
                        ControlRequest::WatchMap { known_version: version, timeout_ms: 50_000, server: None },
                        Caller::Unchecked,
                        &mut rx,
                    )
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        tx.send_replace(true);
        let resp = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert!(matches!(resp, ControlResponse::Map { map } if map.version == version));
    }
}
