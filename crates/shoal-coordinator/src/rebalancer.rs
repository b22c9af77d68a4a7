//! Rebalancing and drain jobs (`docs/migration.md`, "Rebalancing and
//! drain"): a `rebalance` or `drain` request (or, with `--auto-rebalance`,
//! a server joining or a recovery ending) reads every up server's figures,
//! plans with
//! [`shoal_cluster::rebalance::plan`], and runs the plan's steps one at a
//! time in a task of its own, each through the ordinary `split_tablet`
//! and `start_migration` changes: a move is driven by its source as any
//! other, and the job waits for its record to leave the map.
//!
//! One job runs at a time. What it was asked for is saved with the state
//! ([`SavedJob`]) while it runs; its plan and progress are memory of this
//! process. A coordinator that takes over (a standby, or this one
//! restarted) finds the saved job, waits for the move in flight to end
//! (the migration's own fail-over finishes or aborts it) and plans again
//! from the map and fresh figures, under the same job id
//! (`docs/coordinator.md`, "Rebalancing across a fail-over"). The job
//! stops at the first refused or aborted step and says why in `stats`
//! (`rebalance`) and the log; a job that ends, either way, leaves the
//! saved state.

use crate::sampler;
use crate::service::Service;
use crate::state::SavedJob;
use serde::Serialize;
use shoal_cluster::map::{ClusterMap, ServerId, ServerState};
use shoal_cluster::rebalance::{self, Load, Options, Plan, ServerUsage, Step};
use shoal_cluster::{ControlErrorCode, ControlRequest, ControlResponse};
use shoal_common::KeyHash;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use tracing::{info, warn};

/// Time a server has to answer the STATS a plan needs.
pub const USAGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one move of a job may take before the job gives up waiting
/// (the move itself goes on).
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(600);
/// After a server joins, the wait before the automatic rebalance plans
/// (the new server answers STATS and has the map by then).
pub const JOIN_SETTLE: Duration = Duration::from_secs(2);
/// How long after its last move a job measures the servers' rates (they
/// average the last few seconds: `shoal-server`'s `load.rs`).
pub const LOAD_SETTLE: Duration = Duration::from_secs(5);
/// How long an automatic rebalance keeps retrying while the cluster is
/// busy (another job, a migration or a recovery).
pub const JOIN_RETRY_FOR: Duration = Duration::from_secs(600);
/// Most times a saved job is taken over by a new coordinator: a job that
/// keeps ending with its coordinator is dropped after that.
pub const MAX_RESUMES: u32 = 3;

/// What started a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Request,
    /// `--auto-rebalance`, after this server joined.
    Join(ServerId),
    /// `--auto-rebalance`, after the recovery of this server ended: gather
    /// and merge only.
    Recovery(ServerId),
    /// A saved job this coordinator took over.
    Resume,
}

/// A job's state, as `stats` shows it (`rebalance`).
#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub id: u64,
    /// "rebalance" or "drain".
    pub kind: &'static str,
    /// The drained server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerId>,
    pub trigger: Trigger,
    pub plan: Plan,
    /// Steps finished.
    pub steps_done: usize,
    pub moves_done: usize,
    /// Estimated bytes and objects of the finished moves.
    pub bytes_moved: u64,
    pub objects_moved: u64,
    /// How long each finished move took (start to commit), in order.
    pub move_ms: Vec<u64>,
    /// The move under way: its number (1-based, among the moves) and when
    /// it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<CurrentMove>,
    /// "running", "done" or "failed".
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started_unix_ms: u64,
    pub elapsed_ms: u64,
    /// From the start to the end of the last step (done only): the
    /// elapsed time less the final measurement (at least 300 ms, and
    /// [`LOAD_SETTLE`] with traffic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_ms: Option<u64>,
    /// The servers' loads measured when the job ended (done only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<Load>>,
    #[serde(skip)]
    started: Option<Instant>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CurrentMove {
    pub number: usize,
    pub migration: u64,
    pub started_unix_ms: u64,
}

/// The job running or last run, and the gate that makes planning and
/// starting one atomic.
#[derive(Default)]
pub(crate) struct Jobs {
    next: parking_lot::Mutex<u64>,
    last: parking_lot::Mutex<Option<Job>>,
    gate: tokio::sync::Mutex<()>,
}

impl Jobs {
    /// The running or last job, with its elapsed time now.
    pub(crate) fn last(&self) -> Option<Job> {
        let mut job = self.last.lock().clone()?;
        if let (Some(started), "running") = (job.started, job.state) {
            job.elapsed_ms = started.elapsed().as_millis() as u64;
        }
        Some(job)
    }

    fn running(&self) -> Option<u64> {
        self.last.lock().as_ref().filter(|j| j.state == "running").map(|j| j.id)
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut Job)) {
        if let Some(j) = self.last.lock().as_mut().filter(|j| j.id == id) {
            f(j);
        }
    }
}

/// What a rebalance or drain request asks for.
#[derive(Clone, Debug)]
pub(crate) struct Ask {
    pub table: Option<String>,
    pub drain: Option<ServerId>,
    pub dry_run: bool,
    pub trigger: Trigger,
    /// Gather and merge only ([`Options::gather_only`]).
    pub gather_only: bool,
    /// The id of the saved job taken over ([`Trigger::Resume`]).
    pub id: Option<u64>,
    pub resumes: u32,
}

impl Ask {
    /// A request's ask (`rebalance`, `drain`).
    pub(crate) fn request(table: Option<String>, drain: Option<ServerId>, dry_run: bool) -> Ask {
        Ask { table, drain, dry_run, trigger: Trigger::Request, gather_only: false, id: None, resumes: 0 }
    }
}

/// Plans `ask` and, unless it is a dry run (or there is nothing to do),
/// starts its job. Answers `Plan` or an error (see
/// `ControlRequest::Rebalance` and `Drain`).
pub(crate) async fn start(service: &Arc<Service>, ask: Ask) -> ControlResponse {
    let jobs = &service.jobs;
    let _gate = jobs.gate.lock().await;
    if let Some(id) = jobs.running() {
        return invalid(format!("rebalance job {id} is running: wait for it to end (shoal stats shows its progress)"));
    }
    let map = service.map();
    let table = match &ask.table {
        None => None,
        Some(name) => match map.table_by_name(name) {
            Some(t) => Some(t.id),
            None => {
                return ControlResponse::Error {
                    code: ControlErrorCode::NotFound,
                    message: format!("no table named '{name}'"),
                }
            }
        },
    };
    if let Some(d) = ask.drain {
        if map.server(d).is_none() {
            return ControlResponse::Error { code: ControlErrorCode::NotFound, message: format!("no server {d}") };
        }
    }
    let usage = match gather(&map).await {
        Ok(u) => u,
        Err(e) => return invalid(e),
    };
    let opts = Options { table, drain: ask.drain, excluded: service.draining().await, gather_only: ask.gather_only };
    let plan = match rebalance::plan(&map, &usage, &opts) {
        Ok(p) => p,
        Err(e) => return invalid(e),
    };
    if ask.dry_run {
        return ControlResponse::Plan { plan, job: None };
    }
    if let Some(d) = ask.drain {
        if let resp @ ControlResponse::Error { .. } = service.set_draining(d, true).await {
            return resp;
        }
    }
    if plan.steps.is_empty() {
        return ControlResponse::Plan { plan, job: None };
    }
    let id = {
        let mut next = jobs.next.lock();
        *next = (*next + 1).max(ask.id.unwrap_or(0));
        *next
    };
    let saved =
        SavedJob { id, table: ask.table.clone(), drain: ask.drain, gather_only: ask.gather_only, resumes: ask.resumes };
    if let ControlResponse::Error { message, .. } = service.save_job(Some(saved), 0).await {
        return invalid(format!("cannot save the job: {message}"));
    }
    let kind = if ask.drain.is_some() { "drain" } else { "rebalance" };
    info!(
        "rebalance job {id} ({kind}{}): {} steps, {} moves, spread {} -> {} bytes (estimated)",
        ask.drain.map_or(String::new(), |d| format!(" of server {d}")),
        plan.steps.len(),
        plan.moves(),
        Plan::spread(&plan.before),
        Plan::spread(&plan.after)
    );
    *jobs.last.lock() = Some(Job {
        id,
        kind,
        server: ask.drain,
        trigger: ask.trigger,
        plan: plan.clone(),
        steps_done: 0,
        moves_done: 0,
        bytes_moved: 0,
        objects_moved: 0,
        move_ms: Vec::new(),
        current: None,
        state: "running",
        error: None,
        started_unix_ms: unix_ms(),
        elapsed_ms: 0,
        steps_ms: None,
        after: None,
        started: Some(Instant::now()),
    });
    let this = service.clone();
    let steps = plan.steps.clone();
    tokio::spawn(async move {
        run(this.clone(), id, steps, ask.drain).await;
        // Done or failed: no coordinator takes it over. (A coordinator that
        // lost its leadership cannot save; the saved job stays for the next.)
        if let ControlResponse::Error { message, .. } = this.save_job(None, id).await {
            warn!("rebalance job {id} ended but stays saved: {message}");
        }
    });
    ControlResponse::Plan { plan, job: Some(id) }
}

/// After server `joined` enlisted (`--auto-rebalance`): rebalances
/// ([`automatic`]).
pub(crate) async fn after_join(service: Arc<Service>, joined: ServerId) {
    let ask = Ask { trigger: Trigger::Join(joined), ..Ask::request(None, None, false) };
    automatic(service, ask, format!("server {joined} joined")).await;
}

/// With `--auto-rebalance`, for as long as this coordinator serves: each
/// time a recovery leaves the map, gathers and merges the pieces it left
/// ([`automatic`]). Returns at `shutdown`.
pub(crate) async fn after_recoveries(service: Arc<Service>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut watch = service.map_watch();
    let mut known: BTreeMap<u64, ServerId> = BTreeMap::new();
    loop {
        let map = watch.borrow_and_update().clone();
        let now: BTreeMap<u64, ServerId> = map.recoveries.iter().map(|r| (r.id, r.dead)).collect();
        for (id, dead) in &known {
            if !now.contains_key(id) {
                let ask =
                    Ask { trigger: Trigger::Recovery(*dead), gather_only: true, ..Ask::request(None, None, false) };
                tokio::spawn(automatic(service.clone(), ask, format!("the recovery of server {dead} ended")));
            }
        }
        known = now;
        tokio::select! {
            changed = watch.changed() => if changed.is_err() { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// On a coordinator that has just started serving: takes over the saved
/// job, if any ([`automatic`] under its id), or drops it after
/// [`MAX_RESUMES`] takeovers.
pub(crate) async fn resume(service: Arc<Service>) {
    let Some(saved) = service.saved_job().await else { return };
    if saved.resumes >= MAX_RESUMES {
        warn!("rebalance job {} was taken over {} times already: dropped", saved.id, saved.resumes);
        service.save_job(None, saved.id).await;
        return;
    }
    info!("taking over rebalance job {}: planning it again once the cluster is quiet", saved.id);
    let ask = Ask {
        table: saved.table.clone(),
        drain: saved.drain,
        dry_run: false,
        trigger: Trigger::Resume,
        gather_only: saved.gather_only,
        id: Some(saved.id),
        resumes: saved.resumes + 1,
    };
    if !automatic(service.clone(), ask, format!("rebalance job {} taken over", saved.id)).await {
        service.save_job(None, saved.id).await;
    }
}

/// Runs `ask` without an operator: waits [`JOIN_SETTLE`] (a new server
/// answers STATS and has the map by then; the pieces of a recovery have
/// their masters), then plans and starts the job, retrying every 2 s for
/// up to [`JOIN_RETRY_FOR`] while the cluster is busy. `why` starts its
/// log lines. Returns whether a job started.
async fn automatic(service: Arc<Service>, ask: Ask, why: String) -> bool {
    tokio::time::sleep(JOIN_SETTLE).await;
    let until = Instant::now() + JOIN_RETRY_FOR;
    loop {
        match start(&service, ask.clone()).await {
            ControlResponse::Plan { job: Some(id), plan } => {
                info!("{why}: rebalance job {id} started ({} moves, {} merges)", plan.moves(), plan.merges());
                return true;
            }
            ControlResponse::Plan { job: None, .. } => {
                info!("{why}: nothing to move or merge");
                return false;
            }
            ControlResponse::Error { message, .. } if busy(&message) && Instant::now() < until => {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            other => {
                warn!("{why}: no rebalance: {other:?}");
                return false;
            }
        }
    }
}

/// Whether a refusal is one that passes (another job, a move or a
/// recovery in progress, a server not answering STATS yet).
fn busy(message: &str) -> bool {
    message.contains("is running") || message.contains("in progress") || message.contains("cannot read server")
}

/// Runs the steps of job `id`; stops at the first that fails.
async fn run(service: Arc<Service>, id: u64, steps: Vec<Step>, drain: Option<ServerId>) {
    let jobs = &service.jobs;
    let total = steps.iter().filter(|s| matches!(s, Step::Move { .. })).count();
    let mut number = 0;
    let failed = |why: String| {
        warn!("rebalance job {id} stopped: {why}");
        jobs.update(id, |j| {
            j.state = "failed";
            j.error = Some(why);
            j.current = None;
            j.elapsed_ms = j.started.map_or(0, |s| s.elapsed().as_millis() as u64);
        });
    };
    for step in steps {
        match step {
            Step::Split { name, at, .. } => {
                let req = ControlRequest::SplitTablet { table: name.clone(), at };
                if let ControlResponse::Error { message, .. } = service.change(req).await {
                    return failed(format!("the split of table {name} at {at:#018x} was refused: {message}"));
                }
            }
            Step::Merge { name, at, .. } => {
                let req = ControlRequest::MergeTablets { table: name.clone(), at };
                if let ControlResponse::Error { message, .. } = service.change(req).await {
                    return failed(format!("the merge of table {name} at {at:#018x} was refused: {message}"));
                }
            }
            Step::Move { table, name, start_hash, end_hash, from, to, bytes, objects } => {
                number += 1;
                let started = Instant::now();
                let req = ControlRequest::StartMigration { table: name.clone(), start_hash, to, chunks: None };
                let map = match service.change(req).await {
                    ControlResponse::Map { map } => map,
                    ControlResponse::Error { message, .. } => {
                        return failed(format!("move {number}/{total} was refused: {message}"))
                    }
                    other => return failed(format!("move {number}/{total}: unexpected answer {other:?}")),
                };
                let Some(m) =
                    map.migrations.iter().rev().find(|m| m.table == table && m.start_hash == start_hash && m.to == to)
                else {
                    return failed(format!("move {number}/{total}: the map has no record of it"));
                };
                let mid = m.id;
                jobs.update(id, |j| {
                    j.current = Some(CurrentMove { number, migration: mid, started_unix_ms: unix_ms() })
                });
                info!(
                    "rebalance job {id}: move {number}/{total} (migration {mid}): table {name} tablet \
                     {start_hash:#018x}..{end_hash:#018x}, server {from} -> {to}, about {bytes} bytes, {objects} objects"
                );
                let map = match wait_for_move(&service, mid).await {
                    Ok(map) => map,
                    Err(e) => return failed(format!("move {number}/{total} (migration {mid}): {e}")),
                };
                let owner = map.tablet(table, KeyHash(start_hash)).map(|t| t.master);
                if owner != Some(to) {
                    return failed(format!(
                        "move {number}/{total} (migration {mid}) aborted: the tablet stays with server {} \
                         (server {from}'s log says why); the rest of the plan is dropped",
                        owner.map_or("?".into(), |o| o.to_string())
                    ));
                }
                let ms = started.elapsed().as_millis() as u64;
                info!("rebalance job {id}: move {number}/{total} (migration {mid}) committed in {ms} ms");
                jobs.update(id, |j| {
                    j.move_ms.push(ms);
                    j.moves_done += 1;
                    j.bytes_moved += bytes;
                    j.objects_moved += objects;
                    j.current = None;
                });
            }
        }
        jobs.update(id, |j| j.steps_done += 1);
    }
    jobs.update(id, |j| j.steps_ms = j.started.map(|s| s.elapsed().as_millis() as u64));
    let map = service.map();
    if let Some(d) = drain {
        let left: Vec<String> = map.tablets_of(d).map(|t| format!("{}@{:#018x}", t.table, t.start_hash)).collect();
        if !left.is_empty() {
            return failed(format!("server {d} still masters tablets: {}", left.join(", ")));
        }
    }
    let after = settled(&map).await.map(|u| {
        u.iter()
            .filter(|(s, _)| map.server(**s).is_some_and(|x| x.state == ServerState::Up))
            .map(|(s, x)| Load { server: *s, bytes: x.bytes, ops: x.ops })
            .collect::<Vec<_>>()
    });
    let spread = after.as_deref().map(Plan::spread);
    jobs.update(id, |j| {
        j.state = "done";
        j.after = after;
        j.elapsed_ms = j.started.map_or(0, |s| s.elapsed().as_millis() as u64);
        info!(
            "rebalance job {id} done in {} ms: {} moves, about {} bytes; spread now {} bytes",
            j.elapsed_ms,
            j.moves_done,
            j.bytes_moved,
            spread.map_or("?".into(), |s| s.to_string())
        );
    });
}

/// Waits until migration `id` has left the map (committed or aborted);
/// returns that map.
async fn wait_for_move(service: &Service, id: u64) -> Result<Arc<ClusterMap>, String> {
    let mut watch = service.map_watch();
    let deadline = tokio::time::Instant::now() + MOVE_TIMEOUT;
    loop {
        let map = watch.borrow_and_update().clone();
        if !map.migrations.iter().any(|m| m.id == id) {
            return Ok(map);
        }
        match tokio::time::timeout_at(deadline, watch.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err("the coordinator is stopping".into()),
            Err(_) => return Err(format!("still in progress after {} s (it goes on)", MOVE_TIMEOUT.as_secs())),
        }
    }
}

/// Every up server's figures once they have settled: a source drops a
/// moved tablet's objects only after its map shows the commit, in the
/// background, so the figures are read every 300 ms until their total
/// changes by less than 1% (at most 5 s); and a server's rate follows a
/// change of traffic within about four of its periods
/// ([`LOAD_SETTLE`]), so with traffic the last reading is no earlier
/// than that. `None` if a server cannot be read.
async fn settled(map: &ClusterMap) -> Option<BTreeMap<ServerId, ServerUsage>> {
    let total = |u: &BTreeMap<ServerId, ServerUsage>| u.values().map(|x| x.bytes).sum::<u64>();
    let started = Instant::now();
    let mut last = gather(map).await.ok()?;
    let until = started + Duration::from_secs(5);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = gather(map).await.ok()?;
        let (a, b) = (total(&last), total(&now));
        last = now;
        if a.abs_diff(b) <= a / 100 {
            break;
        }
    }
    if last.values().any(|u| u.ops > 0) && started.elapsed() < LOAD_SETTLE {
        tokio::time::sleep(LOAD_SETTLE - started.elapsed()).await;
        last = gather(map).await.ok()?;
    }
    Some(last)
}

/// Every up server's figures ([`sampler::usage`]), asked in parallel.
/// Errors name the first server that did not answer.
async fn gather(map: &ClusterMap) -> Result<BTreeMap<ServerId, ServerUsage>, String> {
    let mut asks = JoinSet::new();
    for s in map.servers.iter().filter(|s| s.state == ServerState::Up) {
        let (id, native) = (s.id, s.native);
        asks.spawn(async move { (id, native, sampler::usage(native, USAGE_TIMEOUT).await) });
    }
    let mut out = BTreeMap::new();
    while let Some(done) = asks.join_next().await {
        let (id, native, got) = done.map_err(|e| format!("a STATS task failed: {e}"))?;
        match got {
            Ok(u) => {
                out.insert(id, u);
            }
            Err(e) => {
                return Err(format!("cannot read server {id}'s figures (STATS at {native}): {e}"));
            }
        }
    }
    Ok(out)
}

fn invalid(message: String) -> ControlResponse {
    ControlResponse::Error { code: ControlErrorCode::InvalidRequest, message }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
