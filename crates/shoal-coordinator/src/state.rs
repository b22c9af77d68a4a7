//! The coordinator's decision-making core: the cluster's configuration and
//! every rule that changes it, with no I/O.
//!
//! [`ClusterState`] is fed control requests ([`ClusterState::apply`]) and
//! answers each with the response to send and whether the state changed.
//! The caller (`service.rs`) owns durability: it saves a changed state
//! before it lets the response out, and keeps the old state if saving
//! fails. Everything here is deterministic, so the tests below drive it
//! directly.
//!
//! Invariants ([`ClusterState::check`]), kept by every method:
//! * server, table and log ids are below their `next_*` counters, so an id
//!   is never handed out twice, not even after its owner is gone;
//! * each table's tablets cover the 64-bit hash space exactly once, and each
//!   tablet's master is a known server; a slot-hashed table's tablets are
//!   whole ranges of Redis Cluster slots;
//! * every server's current log and every log in a recover list has a
//!   replica version (`log_versions`);
//! * `map.replicas` follows the replica rule ([`ClusterState::effective_replicas`])
//!   and `map.version` grew by one at every change;
//! * crash recovery (`docs/recovery.md`): each recovery's dead server is
//!   down and has no other recovery; its logs are fenced at the recovery's
//!   `log_version` and not free; the dead server's tablets in the map are
//!   exactly the pieces of the unfinished partitions (a piece is a map
//!   tablet, still mastered by the dead server); a finished partition's
//!   pieces are mastered by its recovery master (unless that one died
//!   since); an unfinished partition's master is up, and a recovery has no
//!   partitions only while no server is up;
//! * logs not yet reported replicated (`map.unreplicated`) may still be
//!   read (are in `log_versions`);
//! * replica floors (`map.replica_floors`) name logs that may still be read
//!   (in `log_versions`), each (log, segment) once, at an epoch of at least 2;
//! * head floors (`map.head_floors`) name logs that may still be read (in
//!   `log_versions`), each log once, at a segment of at least 1; a log's
//!   head floor never goes down while the log is read;
//! * symmetric-caching groups (`map.sc_groups`) hold up servers only, each
//!   in one group at most, ascending, with an epoch in 1..=version; after
//!   every change they are exactly [`sc_groups`] of the up servers;
//! * draining servers (`draining`, `shoal drain`) are known and not down;
//!   no tablet move, recovery partition or new table's tablet is given to
//!   one while another server could take it;
//! * the saved rebalancing job (`rebalance_job`) is only what a running
//!   job asked for; nothing else depends on it, and a server it names may
//!   be gone (the job is then refused when planned again, and dropped);
//! * server credentials (`credentials`) belong to known servers and are
//!   SHA-256 digests (64 hex digits); a server's credential never changes
//!   once issued.

use serde::{Deserialize, Serialize};
use shoal_cluster::auth::Credential;
use shoal_cluster::control::MAX_FLOORS_PER_REQUEST;
use shoal_cluster::map::{
    sc_groups, split_hash_space, ChunkMigration, ChunkRange, ChunkSpan, ClusterMap, FencedLog, HeadFloor, Migration,
    OwnedSince, Partition, Recovery, ReplicaFloor, ServerId, ServerInfo, ServerState, TableInfo, TabletInfo,
};
use shoal_cluster::{ControlErrorCode, ControlRequest, ControlResponse};
use shoal_common::slots::{hashes_slot_range, split_slots, table_id, table_number, SLOTS};
use shoal_common::{LogId, SegmentId, StreamShape, TableId};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// Version of the saved state's layout (`format` in `coordinator.json`).
/// 2 added `credentials`; format 1 files are read (their servers have no
/// credential until they next enlist) and saved as format 2. 3 added chunk
/// id ranges (`map.chunk_ranges`): an older state's chunk tables get
/// theirs when it is read, and a coordinator that reads at most format 2
/// refuses a format 3 state instead of dropping the ranges it does not know.
pub const STATE_FORMAT: u32 = 3;
/// Oldest layout [`ClusterState::decode`] reads.
pub const OLDEST_STATE_FORMAT: u32 = 1;

/// Who sent an enlistment, as its control connection proved it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enlister {
    /// A cluster without a secret: nothing is proven. `previous` is taken
    /// at its word, no credential is issued, and a live server whose
    /// native address is claimed is declared dead.
    Unchecked,
    /// A connection that proved the cluster secret, and the server whose
    /// credential it proved, if any ([`ClusterState::prove`]).
    Member(Option<ServerId>),
}
/// Longest table name, in bytes.
pub const MAX_TABLE_NAME: usize = 255;
/// Most tablets one `CreateTable` may ask for.
pub const MAX_SPAN: u32 = 1024;
/// Most tablets the whole cluster may hold: keeps the map well inside one
/// control frame.
pub const MAX_TABLETS: usize = 65_536;
/// Replicas per log when `--replicas` is not given and the cluster is big
/// enough (DESIGN.md: R = 3 by default).
pub const DEFAULT_REPLICAS: u32 = 3;
/// Committed migration ids remembered ([`ClusterState::apply`] of
/// `AbortMigration`).
pub const MAX_COMMITTED: usize = 256;
/// Freed logs kept in `map.fenced` (the newest): enough for every backup
/// watching the map to drop their replicas; older entries go.
pub const MAX_FREED_LOGS: usize = 64;
/// Servers declared dead that nothing names any more kept in the map (the
/// newest), so that operators and the dashboard see them; older ones are
/// retired from it.
pub const MAX_DOWN_SERVERS: usize = 16;
/// The smallest piece (in hashes) a crash recovery cuts a tablet into:
/// 1/256 of the hash space. Pieces of repeated recoveries stop splitting
/// there and are dealt whole, so a table never has more than 256 tablets
/// from recoveries (`plan`).
pub const MIN_RECOVERY_PIECE: u128 = 1 << 56;

/// What [`ClusterState::apply`] decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The answer to send once the state (if changed) is durable.
    pub response: ControlResponse,
    /// Whether the state changed and must be saved before answering.
    pub changed: bool,
}

impl Outcome {
    fn unchanged(response: ControlResponse) -> Outcome {
        Outcome { response, changed: false }
    }

    fn changed(response: ControlResponse) -> Outcome {
        Outcome { response, changed: true }
    }
}

/// The coordinator's whole durable state. Serialized as the JSON of
/// `docs/coordinator.md` ("State file").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// [`STATE_FORMAT`] of the file this was read from.
    format: u32,
    /// Servers, tables and tablets as handed out.
    map: ClusterMap,
    next_server: u64,
    next_table: u64,
    next_log: u64,
    /// Round-robin cursor over the live servers for the next tablet, so
    /// consecutive tables start on different servers.
    next_slot: u64,
    /// Replica version of each log that may still be read: the current
    /// logs and those waiting in recover lists. Starts at 1; fencing bumps
    /// it so that replicas carrying an older version are never used.
    log_versions: BTreeMap<LogId, u64>,
    /// Per server, the logs of its earlier incarnations it must still
    /// replay, oldest first. A server with an empty list has no entry.
    recover: BTreeMap<ServerId, Vec<LogId>>,
    /// The next crash recovery's id (`map.recoveries`); ids start at 1.
    /// Absent from files written before crash recovery existed.
    #[serde(default = "first_id")]
    next_recovery: u64,
    /// The next tablet migration's id (`map.migrations`); ids start at 1.
    #[serde(default = "first_id")]
    next_migration: u64,
    /// Ids of the last [`MAX_COMMITTED`] migrations that committed, so a
    /// late `AbortMigration` of one is refused rather than taken as done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    committed_migrations: Vec<u64>,
    /// Per server, the SHA-256 (hex) of the credential it was issued.
    /// Servers enlisted without a secret, or before format 2, have none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    credentials: BTreeMap<ServerId, String>,
    /// Servers being drained (`ControlRequest::Drain`): they take no new
    /// tablets. A server leaves the set when it is declared dead, enlists
    /// again, or the drain is undone. Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    draining: BTreeSet<ServerId>,
    /// The rebalancing or drain job running (`rebalancer.rs`): saved so
    /// that a coordinator taking over plans it again and finishes it.
    /// Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rebalance_job: Option<SavedJob>,
    /// `--replicas`: configuration, not state, so not saved.
    #[serde(skip)]
    replicas_config: Option<u32>,
    /// `--sc-group-size` ([`ClusterState::set_sc_group_size`]); 0 until
    /// set, which counts as [`DEFAULT_SC_GROUP_SIZE`]. Not saved.
    #[serde(skip)]
    sc_group_size: u32,
}

/// What a running rebalancing or drain job asked for: enough to plan it
/// again (`docs/coordinator.md`, "Rebalancing across a fail-over").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedJob {
    /// The job's id, which a resumed job keeps.
    pub id: u64,
    /// Only this table's tablets move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The drained server (a drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<ServerId>,
    /// Only gathering and merging (after a recovery).
    #[serde(default)]
    pub gather_only: bool,
    /// How many coordinators have taken the job over so far.
    #[serde(default)]
    pub resumes: u32,
}

/// Symmetric-caching group size when `--sc-group-size` is not given: the
/// whole cluster, up to 8 servers per group.
pub const DEFAULT_SC_GROUP_SIZE: u32 = 8;

impl ClusterState {
    /// A cluster with no servers and no tables (map version 1).
    pub fn new(replicas_config: Option<u32>) -> ClusterState {
        let mut state = ClusterState {
            format: STATE_FORMAT,
            map: ClusterMap {
                version: 1,
                replicas: 0,
                servers: Vec::new(),
                tables: Vec::new(),
                tablets: Vec::new(),
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
            },
            next_server: 1,
            next_table: 1,
            next_log: 1,
            next_slot: 0,
            log_versions: BTreeMap::new(),
            recover: BTreeMap::new(),
            next_recovery: 1,
            next_migration: 1,
            committed_migrations: Vec::new(),
            credentials: BTreeMap::new(),
            draining: BTreeSet::new(),
            rebalance_job: None,
            replicas_config,
            sc_group_size: 0,
        };
        state.map.replicas = state.effective_replicas();
        state
    }

    /// Reads a saved state and applies this run's `--replicas`. Returns the
    /// state and whether the replica rule changed the map (then the caller
    /// saves it before serving). Errors say what is wrong with `bytes`.
    pub fn decode(bytes: &[u8], replicas_config: Option<u32>) -> Result<(ClusterState, bool), String> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let format: Format = serde_json::from_slice(bytes).map_err(|e| format!("not a coordinator state: {e}"))?;
        if !(OLDEST_STATE_FORMAT..=STATE_FORMAT).contains(&format.format) {
            return Err(format!(
                "state format {} is not supported (this coordinator reads {OLDEST_STATE_FORMAT} to {STATE_FORMAT})",
                format.format
            ));
        }
        let mut state: ClusterState = serde_json::from_slice(bytes).map_err(|e| format!("malformed state: {e}"))?;
        let upgraded = format.format < 3 && state.give_chunk_ranges_to_old_tables();
        state.check()?;
        state.format = STATE_FORMAT;
        state.replicas_config = replicas_config;
        let replicas = state.effective_replicas();
        let changed = replicas != state.map.replicas || upgraded;
        if changed {
            state.map.replicas = replicas;
            state.map.version += 1;
        }
        Ok((state, changed))
    }

    /// The bytes to save: pretty JSON, readable by people and by [`decode`](Self::decode).
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("the state is plain data and always serializes");
        bytes.push(b'\n');
        bytes
    }

    pub fn map(&self) -> &ClusterMap {
        &self.map
    }

    /// Earlier logs `server` must replay, oldest first (empty if none).
    pub fn recover_list(&self, server: ServerId) -> &[LogId] {
        self.recover.get(&server).map_or(&[], |l| l.as_slice())
    }

    /// Replica version of `log`, if the log may still be read.
    pub fn log_version(&self, log: LogId) -> Option<u64> {
        self.log_versions.get(&log).copied()
    }

    /// R: `--replicas` if given, else min(3, live servers - 1), so that no
    /// master needs more backups than there are other live servers.
    pub fn effective_replicas(&self) -> u32 {
        match self.replicas_config {
            Some(r) => r,
            None => {
                let live = self.map.live_servers().count() as u32;
                DEFAULT_REPLICAS.min(live.saturating_sub(1))
            }
        }
    }

    /// Decides `req` at `now_unix_ms` (ms since the Unix epoch, the time a
    /// recovery started if this one starts any). `WatchMap` is answered with
    /// the current map (the caller does the waiting), `Stats` with the
    /// state's part of the statistics (the caller adds its counters), and
    /// `Suspect` with `Ok` (the caller probes the suspect and, if it is dead,
    /// calls [`declare_dead`](Self::declare_dead)).
    ///
    /// `Enlist` is decided as [`Enlister::Unchecked`]; a coordinator with a
    /// secret enlists through [`enlist_as`](Self::enlist_as) instead.
    pub fn apply(&mut self, req: &ControlRequest, now_unix_ms: u64) -> Outcome {
        match req {
            ControlRequest::Enlist { .. } => self.enlist_as(req, Enlister::Unchecked, None, now_unix_ms).0,
            ControlRequest::GetMap | ControlRequest::WatchMap { .. } => {
                Outcome::unchanged(ControlResponse::Map { map: self.map.clone() })
            }
            ControlRequest::CreateTable { name, span, slots, chunks, stream } => {
                self.create_table(name, *span, *slots, *chunks, *stream)
            }
            ControlRequest::DropTable { name } => self.drop_table(name),
            ControlRequest::GetTable { name } => Outcome::unchanged(get_table(&self.map, name)),
            ControlRequest::Recovered { server, logs } => self.recovered(*server, logs),
            ControlRequest::Stats => Outcome::unchanged(ControlResponse::Stats { stats: self.stats() }),
            ControlRequest::Suspect { .. } => Outcome::unchanged(ControlResponse::Ok),
            ControlRequest::RecoveryDone { recovery, partition, server, since, .. } => {
                self.recovery_done(*recovery, *partition, *server, *since)
            }
            ControlRequest::RaiseReplicaFloors { server, floors } => self.raise_replica_floors(*server, floors),
            ControlRequest::RaiseHeadFloor { server, log, segment } => self.raise_head_floor(*server, *log, *segment),
            ControlRequest::HeadReplicated { server, log } => self.head_replicated(*server, *log),
            // Leases are timing, not durable state: the service grants them
            // (`lease.rs`) and never passes this request here.
            ControlRequest::RenewLease { .. } => {
                Outcome::unchanged(invalid("leases are granted by the coordinator's service, not its state"))
            }
            ControlRequest::StartMigration { table, to, chunks: Some(span), .. } => {
                self.start_chunk_migration(table, *span, *to, now_unix_ms)
            }
            ControlRequest::StartMigration { table, start_hash, to, chunks: None } => {
                self.start_migration(table, *start_hash, *to, now_unix_ms)
            }
            ControlRequest::FinishMigration { id, server, since } => self.finish_migration(*id, *server, *since),
            ControlRequest::AbortMigration { id, server, .. } => self.abort_migration(*id, *server),
            ControlRequest::SplitTablet { table, at } => self.split_or_merge(table, *at, true),
            ControlRequest::MergeTablets { table, at } => self.split_or_merge(table, *at, false),
            // Plans need every server's figures (I/O): the service makes
            // them, and marks a drained server through `set_draining`.
            ControlRequest::Rebalance { .. } | ControlRequest::Drain { .. } => {
                Outcome::unchanged(invalid("rebalancing is run by the coordinator's service, not its state"))
            }
        }
    }

    /// The servers being drained.
    pub fn draining(&self) -> &BTreeSet<ServerId> {
        &self.draining
    }

    /// Marks `server` draining (`on`) or not. Refused (`not_found`) for an
    /// unknown server, (`invalid_request`) for marking one that is not up.
    /// Unchanged (answered `Ok`) when it is already so.
    pub fn set_draining(&mut self, server: ServerId, on: bool) -> Outcome {
        let Some(s) = self.map.server(server) else {
            return Outcome::unchanged(error(ControlErrorCode::NotFound, format!("no server {server}")));
        };
        if on && s.state != ServerState::Up {
            return Outcome::unchanged(invalid(format!("server {server} is not up ({:?})", s.state)));
        }
        let changed = if on { self.draining.insert(server) } else { self.draining.remove(&server) };
        if !changed {
            return Outcome::unchanged(ControlResponse::Ok);
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// The rebalancing or drain job running, if any.
    pub fn rebalance_job(&self) -> Option<&SavedJob> {
        self.rebalance_job.as_ref()
    }

    /// Records `job` as the one running, or with `None` (`clear`: the id
    /// of the job that ended) forgets job `clear` if it is the one saved.
    /// Unchanged (answered `Ok`) when nothing differs.
    pub fn set_rebalance_job(&mut self, job: Option<SavedJob>, clear: u64) -> Outcome {
        let next = match job {
            Some(j) => Some(j),
            None if self.rebalance_job.as_ref().is_some_and(|j| j.id == clear) => None,
            None => return Outcome::unchanged(ControlResponse::Ok),
        };
        if next == self.rebalance_job {
            return Outcome::unchanged(ControlResponse::Ok);
        }
        self.rebalance_job = next;
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// `servers` without the draining ones, unless that leaves none.
    fn undrained(&self, servers: Vec<ServerId>) -> Vec<ServerId> {
        let kept: Vec<ServerId> = servers.iter().copied().filter(|s| !self.draining.contains(s)).collect();
        if kept.is_empty() {
            servers
        } else {
            kept
        }
    }

    /// Splits the tablet of `table` holding `at` at `at` (`split`), or
    /// merges the tablet starting at `at` into the one before it. Errors
    /// as `ControlRequest::SplitTablet` and `MergeTablets` list them; a
    /// refused request changes nothing.
    fn split_or_merge(&mut self, table: &str, at: u64, split: bool) -> Outcome {
        let Some(info) = self.map.table_by_name(table) else {
            return Outcome::unchanged(not_found(table));
        };
        if info.chunks || info.stream.is_some() {
            return Outcome::unchanged(invalid(format!("table '{table}' has one tablet and keeps it whole")));
        }
        let id = info.id;
        let Some(i) = self.map.tablets.iter().position(|t| t.table == id && t.start_hash <= at && at <= t.end_hash)
        else {
            return Outcome::unchanged(not_found(table));
        };
        let t = self.map.tablets[i].clone();
        let moving =
            |s: &ClusterState, start: u64| s.map.migrations.iter().any(|m| m.table == id && m.start_hash == start);
        let up = |s: &ClusterState, server| s.map.server(server).is_some_and(|x| x.state == ServerState::Up);
        let mut next = self.clone();
        if split {
            if t.start_hash == at {
                return Outcome::unchanged(invalid(format!("{at:#018x} is already the first hash of a tablet")));
            }
            if self.map.tablets.len() >= MAX_TABLETS {
                return Outcome::unchanged(invalid(format!("the cluster holds {MAX_TABLETS} tablets, its limit")));
            }
            if !up(self, t.master) || moving(self, t.start_hash) {
                return Outcome::unchanged(invalid(format!(
                    "the tablet is being recovered or moved (master {}); split it later",
                    t.master
                )));
            }
            next.map.tablets[i].end_hash = at - 1;
            next.map.tablets.insert(i + 1, TabletInfo { start_hash: at, ..t.clone() });
        } else {
            if t.start_hash != at {
                return Outcome::unchanged(error(
                    ControlErrorCode::NotFound,
                    format!("table '{table}' has no tablet starting at {at:#018x}"),
                ));
            }
            if at == 0 {
                return Outcome::unchanged(invalid("the table's first tablet has no tablet before it"));
            }
            let Some(j) = self.map.tablets.iter().position(|x| x.table == id && x.end_hash == at - 1) else {
                return Outcome::unchanged(invalid("no tablet ends just before it"));
            };
            let left = &self.map.tablets[j];
            if left.master != t.master {
                return Outcome::unchanged(invalid(format!(
                    "the tablets are on servers {} and {}: move one first (shoal migrate)",
                    left.master, t.master
                )));
            }
            if !up(self, t.master) || moving(self, t.start_hash) || moving(self, left.start_hash) {
                return Outcome::unchanged(invalid(format!(
                    "a tablet is being recovered or moved (master {}); merge them later",
                    t.master
                )));
            }
            next.map.tablets[j].end_hash = t.end_hash;
            next.map.tablets.remove(i);
        }
        if let Err(why) = next.check() {
            return Outcome::unchanged(invalid(format!("refused: {why}")));
        }
        next.bump();
        *self = next;
        Outcome::changed(ControlResponse::Map { map: self.map.clone() })
    }

    /// Records the move of `table`'s tablet starting at `start_hash` to
    /// `to` (`docs/migration.md`). Errors as `ControlRequest::StartMigration`
    /// lists them; a refused request changes nothing.
    fn start_migration(&mut self, table: &str, start_hash: u64, to: ServerId, now_unix_ms: u64) -> Outcome {
        let Some(info) = self.map.table_by_name(table) else {
            return Outcome::unchanged(not_found(table));
        };
        if info.chunks || info.stream.is_some() {
            return Outcome::unchanged(invalid(format!(
                "table '{table}' is a {}: only key-value tablets move",
                if info.chunks { "chunk table" } else { "stream" }
            )));
        }
        let id = info.id;
        let Some(t) = self.map.tablets.iter().find(|t| t.table == id && t.start_hash == start_hash).cloned() else {
            let starts: Vec<String> =
                self.map.tablets.iter().filter(|t| t.table == id).map(|t| format!("{:#018x}", t.start_hash)).collect();
            return Outcome::unchanged(error(
                ControlErrorCode::NotFound,
                format!(
                    "table '{table}' has no tablet starting at {start_hash:#018x} (its tablets start at {})",
                    starts.join(", ")
                ),
            ));
        };
        if let Some(refused) = self.refuse_move(t.master, to, ("masters that tablet", "tablets", "the tablet's master"))
        {
            return Outcome::unchanged(refused);
        }
        if let Some(m) = self.map.migrations.iter().find(|m| m.table == id && m.start_hash == start_hash) {
            return Outcome::unchanged(invalid(format!("that tablet is moving already (migration {})", m.id)));
        }
        let mid = self.next_migration;
        self.next_migration += 1;
        self.map.migrations.push(Migration {
            id: mid,
            table: id,
            start_hash,
            end_hash: t.end_hash,
            from: t.master,
            to,
            started_unix_ms: now_unix_ms,
        });
        self.bump();
        Outcome::changed(ControlResponse::Map { map: self.map.clone() })
    }

    /// The source of migration `id` reports the target holds the tablet:
    /// the target becomes its master and the record goes, in one change.
    /// `since`: where the copy begins in the target's log (none from a
    /// source that does not say: nothing is recorded).
    fn finish_migration(&mut self, id: u64, server: ServerId, since: Option<SegmentId>) -> Outcome {
        if let Some(i) = self.map.chunk_migrations.iter().position(|m| m.id == id) {
            return self.finish_chunk_migration(i, server, since);
        }
        let Some(i) = self.map.migrations.iter().position(|m| m.id == id) else {
            if self.committed_migrations.contains(&id) {
                return Outcome::unchanged(ControlResponse::Ok);
            }
            return Outcome::unchanged(invalid(format!("migration {id} is not in progress (it was aborted)")));
        };
        if self.map.migrations[i].from != server {
            return Outcome::unchanged(invalid(format!(
                "migration {id} is driven by server {}, not {server}",
                self.map.migrations[i].from
            )));
        }
        // The target's log takes the tablet's only copy: it must be one a
        // recovery would look for (`map.unreplicated`). Not an
        // `invalid_request`, which the source takes for an abort: it retries.
        if let Some(refused) = self.unreplicated_target(self.map.migrations[i].to) {
            return Outcome::unchanged(refused);
        }
        let m = self.map.migrations.remove(i);
        let t = self
            .map
            .tablets
            .iter_mut()
            .find(|t| t.table == m.table && t.start_hash == m.start_hash && t.end_hash == m.end_hash)
            .expect("a migration names a tablet of the map (invariant)");
        t.master = m.to;
        self.disown(m.from, m.table, m.start_hash, m.end_hash);
        if let Some(segment) = since {
            self.owned_from(m.to, m.table, m.start_hash, m.end_hash, segment);
        }
        self.committed_migrations.push(id);
        if self.committed_migrations.len() > MAX_COMMITTED {
            self.committed_migrations.remove(0);
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// Records the move of local ids `span.lo..=span.hi` of node
    /// `span.node`'s chunks of chunk table `table` to `to`
    /// (`docs/chunks.md`, "Migration of id ranges"), splitting the range
    /// entry that holds them so that they are an entry of their own (same
    /// server: no data moves, routing is unchanged). Errors as
    /// `ControlRequest::StartMigration` lists them; a refused request
    /// changes nothing.
    fn start_chunk_migration(&mut self, table: &str, span: ChunkSpan, to: ServerId, now_unix_ms: u64) -> Outcome {
        let Some(info) = self.map.table_by_name(table) else {
            return Outcome::unchanged(not_found(table));
        };
        if !info.chunks {
            return Outcome::unchanged(invalid(format!(
                "table '{table}' is not a chunk table: its tablets move with --start"
            )));
        }
        let id = info.id;
        let ChunkSpan { node, lo, hi } = span;
        if lo > hi || hi > shoal_common::ChunkId::MAX_LOCAL {
            return Outcome::unchanged(invalid(format!(
                "local ids {lo}..={hi} are not a range of chunk ids (at most {})",
                shoal_common::ChunkId::MAX_LOCAL
            )));
        }
        let Some(i) =
            self.map.chunk_ranges.iter().position(|r| r.table == id && r.node == node && r.lo <= lo && lo <= r.hi)
        else {
            return Outcome::unchanged(error(
                ControlErrorCode::NotFound,
                format!("no server serves chunk ids {node}:{lo} of table '{table}'"),
            ));
        };
        let range = self.map.chunk_ranges[i];
        if hi > range.hi {
            return Outcome::unchanged(invalid(format!(
                "chunk ids {node}:{lo}..={hi} of table '{table}' span two ranges: the one served by server {} ends \
                 at {} (move each part on its own)",
                range.master, range.hi
            )));
        }
        let words = ("serves those chunk ids", "chunk ids", "the chunk ids' server");
        if let Some(refused) = self.refuse_move(range.master, to, words) {
            return Outcome::unchanged(refused);
        }
        if let Some(m) = self.map.chunk_migrations.iter().find(|m| m.table == id && m.node == node && m.lo == range.lo)
        {
            return Outcome::unchanged(invalid(format!("those chunk ids are moving already (migration {})", m.id)));
        }
        // Cut the range so that lo..=hi is an entry of its own.
        let mut pieces = Vec::with_capacity(3);
        if range.lo < lo {
            pieces.push(ChunkRange { hi: lo - 1, ..range });
        }
        pieces.push(ChunkRange { lo, hi, ..range });
        if hi < range.hi {
            pieces.push(ChunkRange { lo: hi + 1, ..range });
        }
        self.map.chunk_ranges.splice(i..=i, pieces);
        let mid = self.next_migration;
        self.next_migration += 1;
        self.map.chunk_migrations.push(ChunkMigration {
            id: mid,
            table: id,
            node,
            lo,
            hi,
            from: range.master,
            to,
            started_unix_ms: now_unix_ms,
        });
        self.bump();
        Outcome::changed(ControlResponse::Map { map: self.map.clone() })
    }

    /// The refusal of a commit to `to` while its log is not one a recovery
    /// would look for (`map.unreplicated`): `internal`, which the source
    /// retries (an `invalid_request` would make it abort).
    fn unreplicated_target(&self, to: ServerId) -> Option<ControlResponse> {
        let log = self.map.server(to).map(|s| s.log).filter(|l| !self.map.may_serve(*l))?;
        Some(error(
            ControlErrorCode::Internal,
            format!("server {to} has not yet reported its log {} durable on a backup; try again", log.0),
        ))
    }

    /// Why a move from `from` to `to` may not start (`None`: it may): `to`
    /// must be known, up, not `from` and not draining, and `from` up. `words` name, for the
    /// refusals, what `to` does already, what it takes, and who `from` is.
    fn refuse_move(&self, from: ServerId, to: ServerId, words: (&str, &str, &str)) -> Option<ControlResponse> {
        let (holds, takes, source) = words;
        let Some(target) = self.map.server(to) else {
            return Some(error(ControlErrorCode::NotFound, format!("no server {to}")));
        };
        if target.state != ServerState::Up {
            return Some(invalid(format!("server {to} is not up ({:?})", target.state)));
        }
        if from == to {
            return Some(invalid(format!("server {to} {holds} already")));
        }
        if self.draining.contains(&to) {
            return Some(invalid(format!("server {to} is being drained (shoal drain): it takes no {takes}")));
        }
        if self.map.server(from).map(|s| s.state) != Some(ServerState::Up) {
            return Some(invalid(format!("{source}, server {from}, is not up (it is being recovered)")));
        }
        None
    }

    /// [`ClusterState::finish_migration`] of the chunk migration at `i`:
    /// the range's entry goes to the target, which owns it from `since`
    /// of its log on, and the source's record of it goes.
    fn finish_chunk_migration(&mut self, i: usize, server: ServerId, since: Option<SegmentId>) -> Outcome {
        let m = &self.map.chunk_migrations[i];
        if m.from != server {
            return Outcome::unchanged(invalid(format!(
                "migration {} is driven by server {}, not {server}",
                m.id, m.from
            )));
        }
        if let Some(refused) = self.unreplicated_target(m.to) {
            return Outcome::unchanged(refused);
        }
        let m = self.map.chunk_migrations.remove(i);
        let r = self
            .map
            .chunk_ranges
            .iter_mut()
            .find(|r| **r == chunk_range_of(&m))
            .expect("a chunk migration names a chunk range of the map (invariant)");
        r.master = m.to;
        self.disown_of(m.from, m.table, Some(m.node), m.lo, m.hi);
        if let Some(segment) = since {
            self.owned_from_of(m.to, m.table, Some(m.node), m.lo, m.hi, segment);
        }
        self.committed_migrations.push(m.id);
        if self.committed_migrations.len() > MAX_COMMITTED {
            self.committed_migrations.remove(0);
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// Joins adjacent chunk ranges of one (table, node) served by one up
    /// server, except ranges moving: a range that came back to its server,
    /// or the pieces an aborted move left (also one aborted by a server's
    /// death), become one entry again, so a server whose own range is
    /// whole again creates again. Ranges of a server not up are left
    /// alone: a recovery's partitions name them exactly. Part of every
    /// change ([`ClusterState::bump`]).
    fn coalesce_chunk_ranges(&mut self) {
        let moving: BTreeSet<(TableId, u16, u64)> =
            self.map.chunk_migrations.iter().map(|m| (m.table, m.node, m.lo)).collect();
        let up: BTreeSet<ServerId> =
            self.map.servers.iter().filter(|s| s.state == ServerState::Up).map(|s| s.id).collect();
        let mut out: Vec<ChunkRange> = Vec::with_capacity(self.map.chunk_ranges.len());
        for r in self.map.chunk_ranges.drain(..) {
            if let Some(last) = out.last_mut() {
                if (last.table, last.node, last.master) == (r.table, r.node, r.master)
                    && up.contains(&r.master)
                    && last.hi.checked_add(1) == Some(r.lo)
                    && !moving.contains(&last.start())
                    && !moving.contains(&r.start())
                {
                    last.hi = r.hi;
                    continue;
                }
            }
            out.push(r);
        }
        self.map.chunk_ranges = out;
    }

    /// The source or target of migration `id` gives it up.
    fn abort_migration(&mut self, id: u64, server: ServerId) -> Outcome {
        if self.committed_migrations.contains(&id) {
            return Outcome::unchanged(invalid(format!("migration {id} committed: the tablet has moved")));
        }
        // (is it a chunk move, its index, its servers)
        let found = match self.map.chunk_migrations.iter().position(|m| m.id == id) {
            Some(i) => Some((true, i, self.map.chunk_migrations[i].from, self.map.chunk_migrations[i].to)),
            None => self.map.migrations.iter().position(|m| m.id == id).map(|i| {
                let m = &self.map.migrations[i];
                (false, i, m.from, m.to)
            }),
        };
        let Some((chunks, i, from, to)) = found else {
            return Outcome::unchanged(ControlResponse::Ok);
        };
        if from != server && to != server {
            return Outcome::unchanged(invalid(format!(
                "migration {id} is between servers {from} and {to}, not {server}"
            )));
        }
        match chunks {
            true => drop(self.map.chunk_migrations.remove(i)),
            false => drop(self.map.migrations.remove(i)),
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// Drops the migrations whose source or target is no longer up, or
    /// whose tablet is no longer exactly in the map at its source (a
    /// server declared dead or enlisted again, a table dropped): they abort.
    fn drop_stale_migrations(&mut self) {
        let map = &self.map;
        let keep: Vec<bool> = map
            .migrations
            .iter()
            .map(|m| {
                let up = |s| map.server(s).is_some_and(|x| x.state == ServerState::Up);
                up(m.from)
                    && up(m.to)
                    && map.tablets.iter().any(|t| {
                        t.table == m.table
                            && t.start_hash == m.start_hash
                            && t.end_hash == m.end_hash
                            && t.master == m.from
                    })
            })
            .collect();
        let mut k = keep.into_iter();
        self.map.migrations.retain(|m| {
            let kept = k.next().unwrap_or(false);
            if !kept {
                tracing::info!(
                    "migration {} of table {} aborts: server {} or {} is gone",
                    m.id,
                    m.table.0,
                    m.from,
                    m.to
                );
            }
            kept
        });
        let map = &self.map;
        let keep: Vec<bool> = map
            .chunk_migrations
            .iter()
            .map(|m| {
                let up = |s| map.server(s).is_some_and(|x| x.state == ServerState::Up);
                up(m.from) && up(m.to) && map.chunk_ranges.contains(&chunk_range_of(m))
            })
            .collect();
        let mut k = keep.into_iter();
        self.map.chunk_migrations.retain(|m| {
            let kept = k.next().unwrap_or(false);
            if !kept {
                tracing::info!(
                    "migration {} of chunk ids {}:{}:{}..={} aborts: server {} or {} is gone",
                    m.id,
                    m.table.0,
                    m.node,
                    m.lo,
                    m.hi,
                    m.from,
                    m.to
                );
            }
            kept
        });
    }

    /// Records that replicas of each `(log, segment)` below `epoch` are
    /// stale (`docs/recovery.md`, "Stale replicas"): `server` re-opened
    /// replicas of those segments of its log and the new ones caught up.
    /// Floors only grow: an epoch at or below the recorded floor changes
    /// nothing, so a repeated request is `Ok` and unchanged. Errors:
    /// `not_found` for an unknown server; `invalid_request` for a server
    /// declared dead (its log is fenced: nothing it does counts any more),
    /// a log that is not the server's current one (an earlier incarnation's,
    /// or one recovered or freed), an epoch of 0, or more than
    /// `MAX_FLOORS_PER_REQUEST` floors. A refused request changes nothing.
    /// `server`'s current log has a head durable on a backup: it leaves
    /// `map.unreplicated`, so its master may hold a lease.
    fn head_replicated(&mut self, server: ServerId, log: LogId) -> Outcome {
        let Some(s) = self.map.server(server) else {
            return Outcome::unchanged(error(ControlErrorCode::NotFound, format!("no server {server}")));
        };
        if s.log != log || s.state == ServerState::Down {
            return Outcome::unchanged(invalid(format!(
                "log {} is not the log server {server} writes (log {}{})",
                log.0,
                s.log.0,
                if s.state == ServerState::Down { ", declared dead" } else { "" }
            )));
        }
        let before = self.map.unreplicated.len();
        self.map.unreplicated.retain(|l| *l != log);
        if self.map.unreplicated.len() == before {
            return Outcome::unchanged(ControlResponse::Ok);
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    fn raise_replica_floors(&mut self, server: ServerId, floors: &[ReplicaFloor]) -> Outcome {
        let Some(s) = self.map.server(server) else {
            return Outcome::unchanged(error(ControlErrorCode::NotFound, format!("no server {server}")));
        };
        if s.state == ServerState::Down {
            return Outcome::unchanged(invalid(format!("server {server} was declared dead; its log is fenced")));
        }
        if floors.len() > MAX_FLOORS_PER_REQUEST {
            return Outcome::unchanged(invalid(format!(
                "{} floors in one request; at most {MAX_FLOORS_PER_REQUEST}",
                floors.len()
            )));
        }
        if let Some(f) = floors.iter().find(|f| f.log != s.log) {
            return Outcome::unchanged(invalid(format!(
                "log {} is not the log server {server} writes (log {})",
                f.log.0, s.log.0
            )));
        }
        if floors.iter().any(|f| f.epoch == 0) {
            return Outcome::unchanged(invalid("replica epochs start at 1"));
        }
        let mut changed = false;
        for f in floors.iter().filter(|f| f.epoch >= 2) {
            match self.map.replica_floors.iter_mut().find(|x| x.log == f.log && x.segment == f.segment) {
                Some(x) if x.epoch >= f.epoch => {}
                Some(x) => {
                    x.epoch = f.epoch;
                    changed = true;
                }
                None => {
                    self.map.replica_floors.push(*f);
                    changed = true;
                }
            }
        }
        if changed {
            self.bump();
        }
        Outcome { response: ControlResponse::Ok, changed }
    }

    fn raise_head_floor(&mut self, server: ServerId, log: LogId, segment: SegmentId) -> Outcome {
        let Some(s) = self.map.server(server) else {
            return Outcome::unchanged(error(ControlErrorCode::NotFound, format!("no server {server}")));
        };
        if s.state == ServerState::Down {
            return Outcome::unchanged(invalid(format!("server {server} was declared dead; its log is fenced")));
        }
        if log != s.log {
            return Outcome::unchanged(invalid(format!(
                "log {} is not the log server {server} writes (log {})",
                log.0, s.log.0
            )));
        }
        if segment.0 == 0 {
            return Outcome::unchanged(invalid("segment ids start at 1"));
        }
        match self.map.head_floors.iter_mut().find(|f| f.log == log) {
            Some(f) if f.segment >= segment => return Outcome::unchanged(ControlResponse::Ok),
            Some(f) => f.segment = segment,
            None => self.map.head_floors.push(HeadFloor { log, segment }),
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// Drops the replica and head floors of `logs` (their replicas are no
    /// longer read).
    fn forget_floors(&mut self, logs: &[LogId]) {
        self.map.replica_floors.retain(|f| !logs.contains(&f.log));
        self.map.head_floors.retain(|f| !logs.contains(&f.log));
        self.map.owned_since.retain(|o| !logs.contains(&o.log));
    }

    /// Records that `server` owns `table`'s hashes `start..=end` from
    /// `segment` of its current log on, replacing what was recorded of
    /// that range for it.
    fn owned_from(&mut self, server: ServerId, table: TableId, start: u64, end: u64, segment: SegmentId) {
        self.owned_from_of(server, table, None, start, end, segment);
    }

    /// [`ClusterState::owned_from`] of keys (`chunk_node` none) or of the
    /// local ids `start..=end` of a node's chunks.
    fn owned_from_of(
        &mut self,
        server: ServerId,
        table: TableId,
        chunk_node: Option<u16>,
        start: u64,
        end: u64,
        segment: SegmentId,
    ) {
        let Some(log) = self.map.server(server).map(|s| s.log) else { return };
        self.disown_of(server, table, chunk_node, start, end);
        self.map.owned_since.push(OwnedSince {
            server,
            log,
            table,
            start_hash: start,
            end_hash: end,
            segment,
            chunk_node,
        });
    }

    /// Drops what `map.owned_since` records of `table`'s hashes
    /// `start..=end` for `server` (it no longer owns them), cutting the
    /// records that reach outside the range.
    fn disown(&mut self, server: ServerId, table: TableId, start: u64, end: u64) {
        self.disown_of(server, table, None, start, end);
    }

    /// [`ClusterState::disown`] of keys (`chunk_node` none) or of chunk ids.
    fn disown_of(&mut self, server: ServerId, table: TableId, chunk_node: Option<u16>, start: u64, end: u64) {
        let mut kept = Vec::with_capacity(self.map.owned_since.len());
        for o in self.map.owned_since.drain(..) {
            if o.server != server
                || o.table != table
                || o.chunk_node != chunk_node
                || o.end_hash < start
                || end < o.start_hash
            {
                kept.push(o);
                continue;
            }
            if o.start_hash < start {
                kept.push(OwnedSince { end_hash: start - 1, ..o.clone() });
            }
            if end < o.end_hash {
                kept.push(OwnedSince { start_hash: end + 1, ..o });
            }
        }
        self.map.owned_since = kept;
    }

    /// The server a connection proved to be by presenting `credential` for
    /// `id`: `Ok(Some(id))` if it is that server's issued credential,
    /// `Ok(None)` if `id` is unknown here or was never issued one (the
    /// connection is then a member with no identity), `Err` if `id` has a
    /// different credential.
    pub fn prove(&self, id: ServerId, credential: &Credential) -> Result<Option<ServerId>, String> {
        match self.credentials.get(&id) {
            Some(digest) if credential.matches(digest) => Ok(Some(id)),
            Some(_) => Err(format!("the credential presented for server {id} is not its credential")),
            None => Ok(None),
        }
    }

    /// Decides an `Enlist` (anything else is `invalid_request`) sent by
    /// `by`. `issue`: the digest ([`Credential::digest_hex`]) of a fresh
    /// credential, recorded for a server that has none (a new one, or one
    /// enlisted before credentials); returns whether it was, in which case
    /// the caller hands the credential out with the answer.
    ///
    /// For an [`Enlister::Member`], enlisting again under a `previous` id
    /// that holds a credential needs the connection to have proved that
    /// server, and no server may claim an address (native, Redis or
    /// backup) that another live server holds; either is refused
    /// (`unauthorized`) and changes nothing.
    pub fn enlist_as(
        &mut self,
        req: &ControlRequest,
        by: Enlister,
        issue: Option<&str>,
        now_unix_ms: u64,
    ) -> (Outcome, bool) {
        let &ControlRequest::Enlist { previous, native, resp, backup } = req else {
            return (Outcome::unchanged(invalid("not an enlistment")), false);
        };
        let known = previous.filter(|p| self.map.server(*p).is_some_and(|s| s.state != ServerState::Down));
        let mut issued = false;
        if let Enlister::Member(proven) = by {
            if let Some(p) = known.filter(|p| self.credentials.contains_key(p)) {
                if proven != Some(p) {
                    return (
                        Outcome::unchanged(error(
                            ControlErrorCode::Unauthorized,
                            format!(
                                "enlisting again as server {p} needs its credential (the server-credential file in \
                                 its data directory)"
                            ),
                        )),
                        false,
                    );
                }
            }
            let claimed = [native, resp, backup];
            let holder = self.map.servers.iter().find(|s| {
                Some(s.id) != known
                    && s.state != ServerState::Down
                    && claimed.iter().any(|a| !a.ip().is_unspecified() && [s.native, s.resp, s.backup].contains(a))
            });
            if let Some(holder) = holder {
                return (
                    Outcome::unchanged(error(
                        ControlErrorCode::Unauthorized,
                        format!(
                            "an address of this enlistment is held by live server {}; only that server (with its \
                             credential) may enlist there, or wait until it is declared dead",
                            holder.id
                        ),
                    )),
                    false,
                );
            }
            issued = issue.is_some();
        }
        let response = self.enlist(previous, native, resp, backup, now_unix_ms);
        if let ControlResponse::Enlisted { server, .. } = &response {
            match (issued, issue) {
                (true, Some(digest)) if !self.credentials.contains_key(server) => {
                    self.credentials.insert(*server, digest.to_string());
                }
                _ => issued = false,
            }
        }
        (Outcome::changed(response), issued)
    }

    /// Enlists a server. A `previous` id that is known and not down keeps
    /// its id and tablets, gets a new log, and must replay its earlier
    /// log(s) first (state `Recovering`); anything else is a new server, `Up`
    /// at once (a server declared dead never comes back: its tablets went
    /// to others). Another live server that claims the same native address
    /// is gone (two processes cannot listen on one address) and is declared
    /// dead. Recoveries waiting for a recovery master get one.
    fn enlist(
        &mut self,
        previous: Option<ServerId>,
        native: SocketAddr,
        resp: SocketAddr,
        backup: SocketAddr,
        now_unix_ms: u64,
    ) -> ControlResponse {
        let log = LogId(self.next_log);
        self.next_log += 1;
        self.log_versions.insert(log, 1);
        self.map.unreplicated.push(log);
        let known = previous.filter(|p| self.map.server(*p).is_some_and(|s| s.state != ServerState::Down));
        match (previous, known) {
            (Some(p), None) if self.map.server(p).is_some() => {
                tracing::warn!("server {p} was declared dead; rejoining as a new server");
            }
            (Some(p), None) => tracing::warn!("server {p} is unknown here; enlisting it as a new server"),
            _ => {}
        }
        let id = match known {
            Some(id) => {
                let server = self.map.servers.iter_mut().find(|s| s.id == id).expect("known server");
                let old = std::mem::replace(&mut server.log, log);
                server.native = native;
                server.resp = resp;
                server.backup = backup;
                let list = self.recover.entry(id).or_default();
                if !list.contains(&old) {
                    list.push(old);
                }
                server.state = ServerState::Recovering;
                self.draining.remove(&id);
                id
            }
            None => {
                let id = ServerId(self.next_server);
                self.next_server += 1;
                self.map.servers.push(ServerInfo { id, native, resp, backup, log, state: ServerState::Up });
                let chunk_tables: Vec<TableId> = self.map.tables.iter().filter(|t| t.chunks).map(|t| t.id).collect();
                for table in chunk_tables {
                    self.give_own_chunk_range(table, id);
                }
                id
            }
        };
        if !native.ip().is_unspecified() {
            let gone: Vec<ServerId> = self
                .map
                .servers
                .iter()
                .filter(|s| s.id != id && s.native == native && s.state != ServerState::Down)
                .map(|s| s.id)
                .collect();
            for old in gone {
                tracing::warn!("server {old} had address {native}, now taken by server {id}: declaring it dead");
                self.declare(old, now_unix_ms);
            }
        }
        self.assign_recoveries();
        self.bump();
        ControlResponse::Enlisted {
            server: id,
            log,
            recover: self.recover_list(id).to_vec(),
            map: self.map.clone(),
            credential: None,
        }
    }

    /// Creates `name` split into `span` tablets (0: one per live server),
    /// handed round-robin to the live servers in id order, starting where
    /// the previous table stopped. A `slots` table is slot-hashed: its id
    /// carries the flag (`shoal_common::slots::table_id`) and its tablets are whole slot ranges (at
    /// most one per slot). An existing table is returned unchanged.
    /// A chunk table (`chunks`) has one tablet, which no chunk is routed
    /// by: every live server gets the whole range of chunk ids of its own
    /// node id in it ([`ClusterMap::chunk_ranges`]; servers that enlist
    /// later get theirs at enlistment), creates chunks with its node id
    /// and serves them (`docs/chunks.md`, "In a cluster").
    ///
    /// A stream (`stream`, `docs/streams.md`) has one tablet per live
    /// server, at most one per streamlet (its streamlets are spread over
    /// them by the hashes of their keys), and its shape is part of the
    /// table: a stream of that name with another shape is refused.
    fn create_table(
        &mut self,
        name: &str,
        span: u32,
        slots: bool,
        chunks: bool,
        stream: Option<StreamShape>,
    ) -> Outcome {
        if let Err(message) = check_table_name(name) {
            return Outcome::unchanged(invalid(message));
        }
        let kind = |chunks: bool, stream: Option<StreamShape>| match (chunks, stream) {
            (true, _) => "a chunk table".to_string(),
            (false, Some(s)) => format!("a stream of shape {s:?}"),
            (false, None) => "a key-value table".to_string(),
        };
        if let Some(table) = self.map.table_by_name(name) {
            if table.chunks != chunks || table.stream != stream {
                return Outcome::unchanged(invalid(format!(
                    "table {name} exists as {}",
                    kind(table.chunks, table.stream)
                )));
            }
            return Outcome::unchanged(ControlResponse::Table { table: table.clone() });
        }
        if (chunks || stream.is_some()) && slots {
            return Outcome::unchanged(invalid(format!("{} cannot be slot-hashed", kind(chunks, stream))));
        }
        if chunks && stream.is_some() {
            return Outcome::unchanged(invalid("a table is a chunk table or a stream, not both".to_string()));
        }
        if let Some(Err(why)) = stream.map(|s| s.check()) {
            return Outcome::unchanged(invalid(why));
        }
        // A stream's streamlets are spread over its tablets by their keys'
        // hashes: one tablet per live server, at most one per streamlet.
        let span = match stream {
            _ if chunks => 1,
            Some(s) => s.streamlets.min(self.map.live_servers().count().max(1) as u32),
            None => span,
        };
        if span > MAX_SPAN {
            return Outcome::unchanged(invalid(format!("span {span} exceeds the limit of {MAX_SPAN} tablets")));
        }
        let live: Vec<ServerId> = self.undrained(self.map.live_servers().map(|s| s.id).collect());
        if live.is_empty() {
            return Outcome::unchanged(error(ControlErrorCode::NoServers, "no server is up to take tablets"));
        }
        let span = if span == 0 { (live.len() as u32).min(MAX_SPAN) } else { span };
        if self.map.tablets.len() + span as usize > MAX_TABLETS {
            return Outcome::unchanged(invalid(format!(
                "the cluster already holds {} tablets; {span} more would exceed the limit of {MAX_TABLETS}",
                self.map.tablets.len()
            )));
        }
        if self.next_table >= 1 << 56 {
            return Outcome::unchanged(invalid("table ids are exhausted".to_string()));
        }
        let table = TableInfo { id: table_id(self.next_table, slots), name: name.to_string(), chunks, stream };
        self.next_table += 1;
        let ranges = if slots { split_slots(0, SLOTS - 1, u64::from(span)) } else { split_hash_space(span) };
        for (start_hash, end_hash) in ranges {
            let master = live[(self.next_slot % live.len() as u64) as usize];
            self.next_slot = self.next_slot.wrapping_add(1);
            self.map.tablets.push(TabletInfo { table: table.id, start_hash, end_hash, master });
        }
        if chunks {
            let servers: Vec<ServerId> = self.map.live_servers().map(|s| s.id).collect();
            for server in servers {
                self.give_own_chunk_range(table.id, server);
            }
        }
        self.map.tables.push(table.clone());
        self.bump();
        Outcome::changed(ControlResponse::Table { table })
    }

    /// A state saved before chunk id ranges (format 2 and older) has chunk
    /// tables without any: each such table's one tablet master served
    /// every chunk of it. That master gets the range of every node id ever
    /// handed out (below `next_server`; server ids are never reused) that
    /// is not a live server's: the chunks it created and those it
    /// recovered, including those of servers already retired from the map.
    /// Every live server gets its own. Returns whether anything changed.
    /// A state whose chunk table's master is down with its recovery in
    /// flight gives that dead master the ranges, and the state check then
    /// refuses it: upgrade with no recovery in flight (`docs/chunks.md`).
    fn give_chunk_ranges_to_old_tables(&mut self) -> bool {
        let old: Vec<(TableId, ServerId)> = self
            .map
            .tables
            .iter()
            .filter(|t| t.chunks && !self.map.chunk_ranges.iter().any(|c| c.table == t.id))
            .filter_map(|t| self.map.tablets.iter().find(|x| x.table == t.id).map(|x| (t.id, x.master)))
            .collect();
        let live: BTreeSet<u64> =
            self.map.servers.iter().filter(|s| s.state != ServerState::Down).map(|s| s.id.0).collect();
        let last = self.next_server.saturating_sub(1).min(u64::from(u16::MAX));
        for &(table, master) in &old {
            for id in 1..=last {
                let node = id as u16;
                let to = if live.contains(&id) { ServerId(id) } else { master };
                let at = self.map.chunk_ranges.partition_point(|r| r.start() < (table, node, 0));
                self.map.chunk_ranges.insert(at, ChunkRange::whole(table, node, to));
            }
        }
        !old.is_empty()
    }

    /// Gives `server` the whole range of chunk ids of its own node id in
    /// chunk table `table`, keeping `chunk_ranges` sorted. A server id
    /// above 65535 does not fit a chunk id's node field: such a server gets
    /// none (and creates no chunks).
    fn give_own_chunk_range(&mut self, table: TableId, server: ServerId) {
        let Ok(node) = u16::try_from(server.0) else {
            return;
        };
        let range = ChunkRange::whole(table, node, server);
        if self.map.chunk_ranges.iter().any(|r| r.table == table && r.node == node) {
            return;
        }
        let at = self.map.chunk_ranges.partition_point(|r| r.start() < range.start());
        self.map.chunk_ranges.insert(at, range);
    }

    fn drop_table(&mut self, name: &str) -> Outcome {
        let Some(pos) = self.map.tables.iter().position(|t| t.name == name) else {
            return Outcome::unchanged(not_found(name));
        };
        let table = self.map.tables.remove(pos);
        self.map.tablets.retain(|t| t.table != table.id);
        self.map.owned_since.retain(|o| o.table != table.id);
        self.map.chunk_ranges.retain(|r| r.table != table.id);
        // Recoveries no longer replay it (a partition may end up empty; its
        // master still reports it done).
        for r in self.map.recoveries.iter_mut() {
            for p in r.partitions.iter_mut() {
                p.tablets.retain(|t| t.table != table.id);
                p.chunks.retain(|c| c.table != table.id);
            }
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// `server` replayed `logs`: they leave its recover list and their
    /// replica versions are forgotten. With nothing left to replay a
    /// recovering server is up (and may become a recovery master). Logs not
    /// in the list are ignored, so a repeated report is harmless; a down
    /// server's report is ignored (it never comes back).
    fn recovered(&mut self, server: ServerId, logs: &[LogId]) -> Outcome {
        match self.map.server(server) {
            None => return Outcome::unchanged(error(ControlErrorCode::NotFound, format!("no server {server}"))),
            Some(s) if s.state == ServerState::Down => return Outcome::unchanged(ControlResponse::Ok),
            Some(_) => {}
        }
        let mut changed = false;
        if let Some(list) = self.recover.get_mut(&server) {
            let (done, left): (Vec<LogId>, Vec<LogId>) = list.iter().partition(|l| logs.contains(l));
            if !done.is_empty() {
                changed = true;
                for l in &done {
                    self.log_versions.remove(l);
                }
                self.map.unreplicated.retain(|l| !done.contains(l));
                self.map.replica_floors.retain(|f| !done.contains(&f.log));
                self.map.head_floors.retain(|f| !done.contains(&f.log));
                self.map.owned_since.retain(|o| !done.contains(&o.log));
                *list = left;
            }
            if list.is_empty() {
                self.recover.remove(&server);
            }
        }
        let s = self.map.servers.iter_mut().find(|s| s.id == server).expect("checked above");
        if s.state == ServerState::Recovering && !self.recover.contains_key(&server) {
            s.state = ServerState::Up;
            changed = true;
            self.assign_recoveries();
        }
        if changed {
            self.bump();
        }
        Outcome { response: ControlResponse::Ok, changed }
    }

    /// Declares `server` dead (failure detection's verdict, at
    /// `now_unix_ms`) and starts its crash recovery (`docs/recovery.md`,
    /// "Declaration"): it is down; its logs (current and not yet recovered)
    /// are fenced at one new version; its tablets are split into pieces
    /// over partitions, one per up server; a recovery master that dies
    /// hands its unfinished partitions to others. Returns whether anything
    /// changed (false for an unknown or already down server).
    pub fn declare_dead(&mut self, server: ServerId, now_unix_ms: u64) -> bool {
        if !self.declare(server, now_unix_ms) {
            return false;
        }
        self.assign_recoveries();
        self.bump();
        true
    }

    /// [`declare_dead`](Self::declare_dead) without assigning recovery
    /// masters or bumping the version (the caller does both).
    fn declare(&mut self, server: ServerId, now_unix_ms: u64) -> bool {
        let Some(s) = self.map.servers.iter_mut().find(|s| s.id == server) else {
            return false;
        };
        if s.state == ServerState::Down {
            return false;
        }
        s.state = ServerState::Down;
        let current = s.log;
        self.draining.remove(&server);
        let mut logs = self.recover.remove(&server).unwrap_or_default();
        if !logs.contains(&current) {
            logs.push(current);
        }
        // One version for all its logs, above each one's current version.
        let version = logs.iter().map(|l| self.log_versions.get(l).map_or(1, |v| v + 1)).max().unwrap_or(1);
        for l in &logs {
            self.log_versions.insert(*l, version);
            self.fence(*l, version);
        }
        if self.map.tablets_of(server).next().is_none() && !self.map.chunk_ranges.iter().any(|c| c.master == server) {
            // Nothing to serve again: the logs can go at once.
            self.free_logs(&logs);
            return true;
        }
        let id = self.next_recovery;
        self.next_recovery += 1;
        self.map.recoveries.push(Recovery {
            id,
            dead: server,
            logs,
            log_version: version,
            partitions: Vec::new(),
            started_unix_ms: now_unix_ms,
        });
        true
    }

    /// Lists `log` in `map.fenced` at `version`, not free.
    fn fence(&mut self, log: LogId, version: u64) {
        match self.map.fenced.iter_mut().find(|f| f.log == log) {
            Some(f) => {
                f.version = version;
                f.free = false;
            }
            None => self.map.fenced.push(FencedLog { log, version, free: false }),
        }
    }

    /// Marks fenced `logs` free (their replicas may be dropped) and forgets
    /// their replica versions.
    fn free_logs(&mut self, logs: &[LogId]) {
        for f in self.map.fenced.iter_mut().filter(|f| logs.contains(&f.log)) {
            f.free = true;
        }
        for l in logs {
            self.log_versions.remove(l);
        }
        self.map.unreplicated.retain(|l| !logs.contains(l));
        self.forget_floors(logs);
    }

    /// Gives every recovery its recovery masters, if any server is up:
    /// plans the partitions of recoveries that have none yet, and moves
    /// each unfinished partition whose master is no longer up to the up
    /// server with the fewest unfinished partitions (lowest id on ties).
    fn assign_recoveries(&mut self) {
        let all: Vec<ServerId> = self.map.servers.iter().filter(|s| s.state == ServerState::Up).map(|s| s.id).collect();
        // A draining server keeps the partitions it has, and gets no new one.
        let up = self.undrained(all.clone());
        if up.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.map.recoveries.len() {
            if self.map.recoveries[i].partitions.is_empty() && !self.plan(i, &up) {
                continue; // nothing to recover: it was finished and removed
            }
            i += 1;
        }
        let mut load: BTreeMap<ServerId, usize> = up.iter().map(|s| (*s, 0)).collect();
        for p in self.map.recoveries.iter().flat_map(|r| &r.partitions).filter(|p| !p.done) {
            if let Some(n) = load.get_mut(&p.master) {
                *n += 1;
            }
        }
        for r in self.map.recoveries.iter_mut() {
            for (index, p) in r.partitions.iter_mut().enumerate() {
                if p.done || all.contains(&p.master) {
                    continue;
                }
                let (&to, n) = load.iter_mut().min_by_key(|(id, n)| (**n, **id)).expect("some server is up");
                *n += 1;
                tracing::info!(
                    "recovery {}: partition {index} ({} tablets) moves from server {} to server {to}",
                    r.id,
                    p.tablets.len(),
                    p.master
                );
                p.master = to;
                for t in p.tablets.iter_mut() {
                    t.master = to;
                }
                for c in p.chunks.iter_mut() {
                    c.master = to;
                }
            }
        }
    }

    /// Splits the tablets of recovery `index`'s dead server into pieces
    /// over one partition per server of `up` (not empty). Each tablet is
    /// split into `up.len()` pieces of nearly equal hash ranges (fewer if
    /// its range is tiny or the cluster's tablet limit is near; a chunk
    /// table's tablet stays whole); the
    /// pieces replace the tablet in the map, still mastered by the dead
    /// server, and are dealt to the partitions in turn, so every partition
    /// gets a piece of every big tablet. The first partition's master
    /// rotates with the recovery id, spreading successive recoveries.
    /// The dead server's chunk id ranges (of its own node id and any it
    /// took over) are dealt whole, one per partition in turn after the
    /// tablets' pieces, and stay the dead server's in the map until their
    /// partition is done. Returns false if the dead server had no tablets
    /// and no chunk ranges left: the recovery is then finished and removed.
    fn plan(&mut self, index: usize, up: &[ServerId]) -> bool {
        let (id, dead) = (self.map.recoveries[index].id, self.map.recoveries[index].dead);
        let (old, mut tablets): (Vec<TabletInfo>, Vec<TabletInfo>) =
            std::mem::take(&mut self.map.tablets).into_iter().partition(|t| t.master == dead);
        let chunk_ranges: Vec<ChunkRange> =
            self.map.chunk_ranges.iter().filter(|r| r.master == dead).copied().collect();
        if old.is_empty() && chunk_ranges.is_empty() {
            self.map.tablets = tablets;
            let r = self.map.recoveries.remove(index);
            self.free_logs(&r.logs);
            return false;
        }
        let n = up.len();
        let room = MAX_TABLETS.saturating_sub(tablets.len() + old.len());
        let per_tablet = n.min(1 + room / old.len().max(1)).max(1);
        let rotate = (id % n as u64) as usize;
        let mut partitions: Vec<Partition> = (0..n)
            .map(|i| Partition { master: up[(i + rotate) % n], tablets: Vec::new(), chunks: Vec::new(), done: false })
            .collect();
        let mut dealt = 0;
        for t in &old {
            // A chunk table's one tablet is recovered whole; it routes no
            // chunk (the chunk id ranges do, below; `docs/chunks.md`).
            let chunks = self.map.tables.iter().any(|x| x.id == t.table && x.chunks);
            // Pieces of earlier recoveries are not cut below
            // MIN_RECOVERY_PIECE: the tablets of a table stay bounded.
            let room = ((t.end_hash - t.start_hash) as u128 + 1) / MIN_RECOVERY_PIECE;
            let pieces = if chunks { 1 } else { (per_tablet as u64).min(room.max(1) as u64) };
            for (start_hash, end_hash) in split_tablet(t, pieces) {
                let piece = TabletInfo { table: t.table, start_hash, end_hash, master: dead };
                let p = &mut partitions[dealt % n];
                p.tablets.push(TabletInfo { master: p.master, ..piece.clone() });
                tablets.push(piece);
                dealt += 1;
            }
        }
        for range in chunk_ranges {
            let p = &mut partitions[dealt % n];
            p.chunks.push(ChunkRange { master: p.master, ..range });
            dealt += 1;
        }
        partitions.retain(|p| !p.tablets.is_empty() || !p.chunks.is_empty());
        self.map.tablets = tablets;
        self.map.recoveries[index].partitions = partitions;
        true
    }

    /// A recovery master reports `partition` of `recovery` replayed and
    /// durable: its pieces become `server`'s tablets. When every partition
    /// is done the recovery leaves the map and its logs are free. Repeated
    /// reports (also after the recovery finished) are `Ok` and change
    /// nothing. Errors: `not_found` for a recovery that never existed,
    /// `invalid_request` for a partition it does not have, that is
    /// assigned to another server (it was moved: `server` was declared
    /// dead or restarted), or when `server` was declared dead.
    /// `since`: where the replay begins in `server`'s log (recorded for
    /// the pieces in `map.owned_since`).
    fn recovery_done(&mut self, recovery: u64, partition: u32, server: ServerId, since: Option<SegmentId>) -> Outcome {
        let Some(ri) = self.map.recoveries.iter().position(|r| r.id == recovery) else {
            if recovery >= 1 && recovery < self.next_recovery {
                return Outcome::unchanged(ControlResponse::Ok); // finished already
            }
            return Outcome::unchanged(error(ControlErrorCode::NotFound, format!("no recovery {recovery}")));
        };
        let r = &mut self.map.recoveries[ri];
        let dead = r.dead;
        let count = r.partitions.len();
        let Some(p) = r.partitions.get_mut(partition as usize) else {
            return Outcome::unchanged(invalid(format!(
                "recovery {recovery} has {count} partitions, not a partition {partition}"
            )));
        };
        if p.master != server {
            return Outcome::unchanged(invalid(format!(
                "partition {partition} of recovery {recovery} is assigned to server {}, not {server}",
                p.master
            )));
        }
        if p.done {
            return Outcome::unchanged(ControlResponse::Ok);
        }
        // Only while no server is up can a dead one still hold a partition.
        if self.map.server(server).map(|s| s.state) == Some(ServerState::Down) {
            return Outcome::unchanged(invalid(format!("server {server} was declared dead")));
        }
        let p = &mut self.map.recoveries[ri].partitions[partition as usize];
        p.done = true;
        let pieces: BTreeSet<RangeKey> = p.tablets.iter().map(range_key).collect();
        let chunks: BTreeSet<(TableId, u16, u64, u64)> =
            p.chunks.iter().map(|c| (c.table, c.node, c.lo, c.hi)).collect();
        for t in self.map.tablets.iter_mut() {
            if t.master == dead && pieces.contains(&range_key(t)) {
                t.master = server;
            }
        }
        for c in self.map.chunk_ranges.iter_mut() {
            if c.master == dead && chunks.contains(&(c.table, c.node, c.lo, c.hi)) {
                c.master = server;
            }
        }
        if let Some(segment) = since {
            for &(table, start, end) in &pieces {
                self.owned_from(server, table, start, end, segment);
            }
            // A chunk range may come back to a server whose log holds its
            // entries from an earlier time it served it (it moved away).
            for &(table, node, lo, hi) in &chunks {
                self.owned_from_of(server, table, Some(node), lo, hi, segment);
            }
        }
        if self.map.recoveries[ri].partitions.iter().all(|p| p.done) {
            let r = self.map.recoveries.remove(ri);
            self.free_logs(&r.logs);
        }
        self.bump();
        Outcome::changed(ControlResponse::Ok)
    }

    /// Bumps the replica version of `log` (fencing: replicas written under
    /// the old version are stale from now on). `None` if the log is not
    /// tracked. Does not change the map.
    pub fn bump_log_version(&mut self, log: LogId) -> Option<u64> {
        let v = self.log_versions.get_mut(&log)?;
        *v += 1;
        Some(*v)
    }

    /// The state's statistics (see `docs/coordinator.md`, `stats`).
    pub fn stats(&self) -> serde_json::Value {
        let servers: Vec<serde_json::Value> = self
            .map
            .servers
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "state": s.state,
                    "native": s.native,
                    "log": s.log,
                    "tablets": self.map.tablets_of(s.id).count(),
                    "recover": self.recover_list(s.id),
                    "draining": self.draining.contains(&s.id),
                })
            })
            .collect();
        let recoveries: Vec<serde_json::Value> = self
            .map
            .recoveries
            .iter()
            .map(|r| {
                let partitions: Vec<serde_json::Value> = r
                    .partitions
                    .iter()
                    .map(|p| serde_json::json!({"master": p.master, "tablets": p.tablets.len(), "done": p.done}))
                    .collect();
                serde_json::json!({
                    "id": r.id,
                    "dead": r.dead,
                    "logs": r.logs,
                    "log_version": r.log_version,
                    "started_unix_ms": r.started_unix_ms,
                    "partitions_done": r.partitions.iter().filter(|p| p.done).count(),
                    "partitions": partitions,
                })
            })
            .collect();
        serde_json::json!({
            "map_version": self.map.version,
            "replicas": self.map.replicas,
            "servers": servers,
            "tables": self.map.tables.len(),
            "tablets": self.map.tablets.len(),
            "recoveries": recoveries,
            "fenced_logs": self.map.fenced.iter().filter(|f| !f.free).count(),
            "replica_floors": self.map.replica_floors.len(),
            "head_floors": self.map.head_floors.len(),
            "sc_groups": self.map.sc_groups,
            "rebalance_job": self.rebalance_job,
        })
    }

    /// Every change ends here: recompute R, bump the map's version and
    /// rebuild the symmetric-caching groups (a group whose members changed
    /// takes the new version as its epoch).
    fn bump(&mut self) {
        self.drop_stale_migrations();
        self.coalesce_chunk_ranges();
        self.retire_dead_servers();
        self.forget_old_freed_logs();
        self.map.replicas = self.effective_replicas();
        self.map.version += 1;
        self.regroup();
    }

    /// Removes from the map the oldest servers declared dead that nothing
    /// names any more (no recovery of theirs or partition of another's, no
    /// tablet, no migration, and their log freed), keeping the newest
    /// [`MAX_DOWN_SERVERS`] of them. Their ids are never
    /// reused (`next_server`), and their credentials go with them: a
    /// process still running under such an id finds itself missing from
    /// the map (it stops as if declared dead), has its leases refused and
    /// can only enlist again as a new server.
    fn retire_dead_servers(&mut self) {
        let map = &self.map;
        let retired: Vec<ServerId> = map
            .servers
            .iter()
            .filter(|s| {
                s.state == ServerState::Down
                    && !map.recoveries.iter().any(|r| r.dead == s.id || r.partitions.iter().any(|p| p.master == s.id))
                    && !map.tablets.iter().any(|t| t.master == s.id)
                    && !map.chunk_ranges.iter().any(|c| c.master == s.id)
                    && !map.migrations.iter().any(|m| m.from == s.id || m.to == s.id)
                    && !map.chunk_migrations.iter().any(|m| m.from == s.id || m.to == s.id)
                    && !map.fenced.iter().any(|f| f.log == s.log && !f.free)
            })
            .map(|s| s.id)
            .collect();
        // Ids grow with enlistment: the first are the oldest.
        let retired = &retired[..retired.len().saturating_sub(MAX_DOWN_SERVERS)];
        if retired.is_empty() {
            return;
        }
        self.map.servers.retain(|s| !retired.contains(&s.id));
        self.map.owned_since.retain(|o| !retired.contains(&o.server));
        for id in retired {
            self.credentials.remove(id);
            self.recover.remove(id);
        }
    }

    /// Keeps the newest [`MAX_FREED_LOGS`] freed logs in `map.fenced`.
    fn forget_old_freed_logs(&mut self) {
        let mut extra = self.map.fenced.iter().filter(|f| f.free).count().saturating_sub(MAX_FREED_LOGS);
        self.map.fenced.retain(|f| {
            let drop = f.free && extra > 0;
            extra -= drop as usize;
            !drop
        });
    }

    fn regroup(&mut self) {
        let up: Vec<ServerId> = self.map.servers.iter().filter(|s| s.state == ServerState::Up).map(|s| s.id).collect();
        let size = if self.sc_group_size == 0 { DEFAULT_SC_GROUP_SIZE } else { self.sc_group_size };
        self.map.sc_groups = sc_groups(&up, size, &self.map.sc_groups, self.map.version);
    }

    /// Applies this run's `--sc-group-size` (at least 1): regroups, and if
    /// that changed the groups bumps the map's version and returns true
    /// (the caller saves the state before serving).
    pub fn set_sc_group_size(&mut self, size: u32) -> bool {
        self.sc_group_size = size.max(1);
        let before = self.map.sc_groups.clone();
        self.regroup();
        if self.map.sc_groups == before {
            return false;
        }
        self.map.version += 1;
        self.map.sc_groups = before;
        self.regroup();
        true
    }

    /// Checks the invariants of the module comment (not the replica rule,
    /// which depends on this run's configuration). Used on load, so that a
    /// damaged or hand-edited file is refused rather than served.
    pub fn check(&self) -> Result<(), String> {
        if self.map.version == 0 {
            return Err("map version 0".into());
        }
        let mut last = None;
        for s in &self.map.servers {
            if s.id.0 == 0 || s.id.0 >= self.next_server {
                return Err(format!("server id {} outside 1..{}", s.id, self.next_server));
            }
            if last.is_some_and(|l| l >= s.id) {
                return Err(format!("servers not in increasing id order at {}", s.id));
            }
            last = Some(s.id);
            // A down server's log is recovered (then forgotten) or being recovered.
            if s.state != ServerState::Down && !self.log_versions.contains_key(&s.log) {
                return Err(format!("server {} writes log {} that has no replica version", s.id, s.log.0));
            }
        }
        for d in &self.draining {
            if self.map.server(*d).is_none_or(|s| s.state == ServerState::Down) {
                return Err(format!("server {d} is draining but unknown or down"));
            }
        }
        let mut grouped = BTreeSet::new();
        for g in &self.map.sc_groups {
            if g.members.is_empty() || g.epoch == 0 || g.epoch > self.map.version {
                return Err(format!(
                    "symmetric-caching group {:?} is empty or has epoch {} outside 1..={}",
                    g.members, g.epoch, self.map.version
                ));
            }
            if g.members.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("symmetric-caching group {:?} not in increasing id order", g.members));
            }
            for m in &g.members {
                if self.map.server(*m).is_none_or(|s| s.state != ServerState::Up) || !grouped.insert(*m) {
                    return Err(format!("symmetric-caching group member {m} is not up or is in two groups"));
                }
            }
        }
        for (server, digest) in &self.credentials {
            if self.map.server(*server).is_none() {
                return Err(format!("credential of unknown server {server}"));
            }
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("credential digest of server {server} is not 64 hex digits"));
            }
        }
        for (server, logs) in &self.recover {
            if self.map.server(*server).is_none() {
                return Err(format!("recover list of unknown server {server}"));
            }
            if logs.is_empty() {
                return Err(format!("empty recover list of server {server}"));
            }
            if let Some(l) = logs.iter().find(|l| !self.log_versions.contains_key(l)) {
                return Err(format!("server {server} must recover log {} that has no replica version", l.0));
            }
        }
        if let Some(l) = self.log_versions.keys().find(|l| l.0 == 0 || l.0 >= self.next_log) {
            return Err(format!("log id {} outside 1..{}", l.0, self.next_log));
        }
        if let Some(l) = self.map.unreplicated.iter().find(|l| !self.log_versions.contains_key(l)) {
            return Err(format!("unreplicated log {} may no longer be read", l.0));
        }
        for (i, t) in self.map.tables.iter().enumerate() {
            let number = table_number(t.id);
            if number == 0 || number >= self.next_table {
                return Err(format!("table id {} outside 1..{} (flag bits aside)", t.id.0, self.next_table));
            }
            if t.id.is_slot_hashed()
                && self
                    .map
                    .tablets
                    .iter()
                    .any(|x| x.table == t.id && hashes_slot_range(x.start_hash, x.end_hash).is_none())
            {
                return Err(format!("a tablet of slot-hashed table {} is not a whole range of slots", t.id.0));
            }
            if let Err(message) = check_table_name(&t.name) {
                return Err(format!("table {}: {message}", t.id.0));
            }
            if self.map.tables[..i].iter().any(|o| o.id == t.id || o.name == t.name) {
                return Err(format!("table {} ({}) appears twice", t.id.0, t.name));
            }
            let mut ranges: Vec<(u64, u64)> =
                self.map.tablets.iter().filter(|x| x.table == t.id).map(|x| (x.start_hash, x.end_hash)).collect();
            ranges.sort_unstable();
            let mut next: Option<u64> = Some(0);
            for (start, end) in ranges {
                if next != Some(start) || end < start {
                    return Err(format!("tablets of table {} do not cover the hash space exactly once", t.id.0));
                }
                next = end.checked_add(1);
            }
            if next.is_some() {
                return Err(format!("tablets of table {} do not reach the end of the hash space", t.id.0));
            }
        }
        let mut floors = BTreeSet::new();
        for f in &self.map.replica_floors {
            if !self.log_versions.contains_key(&f.log) {
                return Err(format!("replica floor of log {}, which is no longer read", f.log.0));
            }
            if f.epoch < 2 || !floors.insert((f.log, f.segment)) {
                return Err(format!(
                    "replica floor of log {} segment {} below 2 or listed twice",
                    f.log.0, f.segment.0
                ));
            }
        }
        let mut heads = BTreeSet::new();
        for f in &self.map.head_floors {
            if !self.log_versions.contains_key(&f.log) {
                return Err(format!("head floor of log {}, which is no longer read", f.log.0));
            }
            if f.segment.0 == 0 || !heads.insert(f.log) {
                return Err(format!("head floor of log {} at segment 0 or listed twice", f.log.0));
            }
        }
        for x in &self.map.tablets {
            if !self.map.tables.iter().any(|t| t.id == x.table) {
                return Err(format!("tablet of unknown table {}", x.table.0));
            }
            if self.map.server(x.master).is_none() {
                return Err(format!("tablet of table {} held by unknown server {}", x.table.0, x.master));
            }
        }
        self.check_recoveries()
    }

    /// The crash recovery invariants of the module comment.
    fn check_recoveries(&self) -> Result<(), String> {
        let mut fenced = BTreeSet::new();
        for f in &self.map.fenced {
            if f.log.0 == 0 || f.log.0 >= self.next_log || !fenced.insert(f.log) {
                return Err(format!("fenced log {} unknown or listed twice", f.log.0));
            }
        }
        let any_up = self.map.servers.iter().any(|s| s.state == ServerState::Up);
        let masters: BTreeMap<RangeKey, ServerId> = self.map.tablets.iter().map(|t| (range_key(t), t.master)).collect();
        let mut ids = BTreeSet::new();
        let mut dead = BTreeSet::new();
        for r in &self.map.recoveries {
            let id = r.id;
            if id == 0 || id >= self.next_recovery || !ids.insert(id) {
                return Err(format!("recovery id {id} outside 1..{} or used twice", self.next_recovery));
            }
            if self.map.server(r.dead).map(|s| s.state) != Some(ServerState::Down) || !dead.insert(r.dead) {
                return Err(format!("recovery {id}: server {} is not down or has two recoveries", r.dead));
            }
            if r.logs.is_empty() {
                return Err(format!("recovery {id} has no logs"));
            }
            for l in &r.logs {
                let f = self.map.fenced.iter().find(|f| f.log == *l);
                if f.map(|f| (f.version, f.free)) != Some((r.log_version, false))
                    || self.log_versions.get(l) != Some(&r.log_version)
                {
                    return Err(format!("recovery {id}: log {} is not fenced at version {}", l.0, r.log_version));
                }
            }
            if r.partitions.is_empty() {
                if any_up {
                    return Err(format!("recovery {id} has no partitions while servers are up"));
                }
                continue;
            }
            // The dead server's tablets are exactly the unfinished pieces.
            let mut owned: BTreeSet<RangeKey> = self.map.tablets_of(r.dead).map(range_key).collect();
            for (i, p) in r.partitions.iter().enumerate() {
                let master = self.map.server(p.master).map(|s| s.state);
                if master.is_none() {
                    return Err(format!("recovery {id}: partition {i} has unknown master {}", p.master));
                }
                if !p.done && master != Some(ServerState::Up) && any_up {
                    return Err(format!("recovery {id}: unfinished partition {i} has master {} not up", p.master));
                }
                for t in &p.tablets {
                    if t.master != p.master {
                        return Err(format!("recovery {id}: a piece of partition {i} names master {}", t.master));
                    }
                    if p.done {
                        let moved = masters.get(&range_key(t)) == Some(&p.master);
                        if master != Some(ServerState::Down) && !moved {
                            return Err(format!("recovery {id}: finished partition {i} has a piece not at its master"));
                        }
                    } else if !owned.remove(&range_key(t)) {
                        return Err(format!("recovery {id}: partition {i} has a piece the dead server does not own"));
                    }
                }
            }
            // Likewise its chunk id ranges.
            let mut ranges: BTreeSet<ChunkRange> =
                self.map.chunk_ranges.iter().filter(|c| c.master == r.dead).copied().collect();
            for (i, p) in r.partitions.iter().enumerate() {
                for c in &p.chunks {
                    if c.master != p.master {
                        return Err(format!("recovery {id}: a chunk range of partition {i} names master {}", c.master));
                    }
                    let held = ChunkRange { master: r.dead, ..*c };
                    if !p.done && !ranges.remove(&held) {
                        return Err(format!("recovery {id}: partition {i} has a chunk range the dead server lacks"));
                    }
                }
            }
            if let Some(c) = ranges.first() {
                return Err(format!(
                    "recovery {id}: chunk range {}:{}:{}..={} of the dead server is in no unfinished partition",
                    c.table.0, c.node, c.lo, c.hi
                ));
            }
            if let Some((table, start, end)) = owned.first() {
                return Err(format!(
                    "recovery {id}: tablet {}:{start:#x}..{end:#x} of the dead server is in no unfinished partition",
                    table.0
                ));
            }
        }
        self.check_migrations()?;
        self.check_owned_since()?;
        self.check_chunk_ranges()
    }

    /// `chunk_ranges`: sorted, with lo <= hi <= the largest local id, the
    /// ranges of one (table, node) disjoint, each of a chunk table and a
    /// known server; every server not down that fits a node id holds its
    /// own node's whole range of every chunk table.
    fn check_chunk_ranges(&self) -> Result<(), String> {
        let ranges = &self.map.chunk_ranges;
        for (i, c) in ranges.iter().enumerate() {
            if c.lo > c.hi || c.hi > shoal_common::ChunkId::MAX_LOCAL {
                return Err(format!("chunk range {}:{}:{}..={} is empty or too wide", c.table.0, c.node, c.lo, c.hi));
            }
            if !self.map.tables.iter().any(|t| t.id == c.table && t.chunks) || self.map.server(c.master).is_none() {
                return Err(format!("chunk range of table {} names an unknown chunk table or server", c.table.0));
            }
            if let Some(prev) = i.checked_sub(1).map(|j| &ranges[j]) {
                if prev.start() >= c.start() || ((prev.table, prev.node) == (c.table, c.node) && prev.hi >= c.lo) {
                    return Err(format!("chunk ranges of table {} not sorted or overlapping", c.table.0));
                }
            }
        }
        for s in self.map.live_servers() {
            let Ok(node) = u16::try_from(s.id.0) else { continue };
            for t in self.map.tables.iter().filter(|t| t.chunks) {
                // Its node's ids are all served, by it or by the servers
                // parts of them moved to: contiguous from 0 to the last.
                let mut next = 0u64;
                for r in ranges.iter().filter(|r| r.table == t.id && r.node == node) {
                    if r.lo != next {
                        return Err(format!("chunk ids of node {node} in table {} have a gap at {next}", t.id.0));
                    }
                    next = r.hi.saturating_add(1);
                }
                if next != shoal_common::ChunkId::MAX_LOCAL + 1 {
                    return Err(format!("server {} has no range of its own chunk ids in table {}", s.id, t.id.0));
                }
            }
        }
        let mut seen = BTreeSet::new();
        for m in &self.map.chunk_migrations {
            if m.id == 0
                || m.id >= self.next_migration
                || !seen.insert(m.id)
                || self.map.migrations.iter().any(|x| x.id == m.id)
            {
                return Err(format!("migration id {} repeated or outside 1..{}", m.id, self.next_migration));
            }
            let up = |s| self.map.server(s).is_some_and(|x| x.state == ServerState::Up);
            if m.from == m.to || !up(m.from) || !up(m.to) {
                return Err(format!("migration {}: servers {} and {} are not two up servers", m.id, m.from, m.to));
            }
            if !ranges.contains(&chunk_range_of(m)) {
                return Err(format!("migration {} names no chunk range of server {}", m.id, m.from));
            }
        }
        Ok(())
    }

    /// `owned_since`: each record names a known server and table, a range
    /// with start <= end, and a log below `next_log`; a server's records
    /// of one table do not overlap.
    fn check_owned_since(&self) -> Result<(), String> {
        let mut sorted: Vec<&OwnedSince> = self.map.owned_since.iter().collect();
        sorted.sort_by_key(|o| (o.server, o.table, o.chunk_node, o.start_hash));
        for (i, o) in sorted.iter().enumerate() {
            if self.map.server(o.server).is_none() || !self.map.tables.iter().any(|t| t.id == o.table) {
                return Err(format!("owned_since names server {} and table {}, not both known", o.server, o.table.0));
            }
            if o.start_hash > o.end_hash || o.log.0 == 0 || o.log.0 >= self.next_log {
                return Err(format!("owned_since of server {}: a bad range or log {}", o.server, o.log.0));
            }
            if let Some(n) = sorted.get(i + 1) {
                if n.server == o.server
                    && n.table == o.table
                    && n.chunk_node == o.chunk_node
                    && n.start_hash <= o.end_hash
                {
                    return Err(format!(
                        "owned_since of server {}: two records overlap at {:#x}",
                        o.server, n.start_hash
                    ));
                }
            }
        }
        Ok(())
    }

    /// Migrations: ids below `next_migration` and unique; each names one
    /// tablet of the map, mastered by its `from`, at most one migration per
    /// tablet; `from` and `to` are distinct up servers.
    fn check_migrations(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for m in &self.map.migrations {
            if m.id == 0 || m.id >= self.next_migration || !seen.insert(m.id) {
                return Err(format!("migration id {} repeated or outside 1..{}", m.id, self.next_migration));
            }
            let up = |s| self.map.server(s).is_some_and(|x| x.state == ServerState::Up);
            if m.from == m.to || !up(m.from) || !up(m.to) {
                return Err(format!("migration {}: servers {} and {} are not two up servers", m.id, m.from, m.to));
            }
            let at_source = self.map.tablets.iter().any(|t| {
                t.table == m.table && t.start_hash == m.start_hash && t.end_hash == m.end_hash && t.master == m.from
            });
            if !at_source {
                return Err(format!("migration {} names no tablet of server {}", m.id, m.from));
            }
        }
        let tablets: BTreeSet<(TableId, u64)> = self.map.migrations.iter().map(|m| (m.table, m.start_hash)).collect();
        if tablets.len() != self.map.migrations.len() {
            return Err("two migrations of one tablet".into());
        }
        Ok(())
    }
}

/// The entry of `map.chunk_ranges` a chunk migration names.
fn chunk_range_of(m: &ChunkMigration) -> ChunkRange {
    ChunkRange { table: m.table, node: m.node, lo: m.lo, hi: m.hi, master: m.from }
}

/// Splits tablet `t` into `n` pieces as [`split_range`] does; a tablet of a
/// slot-hashed table only on slot boundaries (fewer pieces if it holds
/// fewer than `n` slots), so that every slot stays whole in one tablet.
fn split_tablet(t: &TabletInfo, n: u64) -> Vec<(u64, u64)> {
    match hashes_slot_range(t.start_hash, t.end_hash) {
        Some((first, last)) if t.table.is_slot_hashed() => split_slots(first, last, n),
        _ => split_range(t.start_hash, t.end_hash, n),
    }
}

/// Splits the inclusive hash range `[start, end]` into `n` contiguous
/// ranges of nearly equal size, covering it exactly once; fewer (one per
/// hash) if the range holds fewer than `n` hashes, and at least one.
/// `split_range(0, u64::MAX, n)` is [`split_hash_space`]`(n)`.
pub fn split_range(start: u64, end: u64, n: u64) -> Vec<(u64, u64)> {
    assert!(start <= end, "empty range {start}..={end}");
    let size = (end - start) as u128 + 1;
    let n = (n as u128).clamp(1, size);
    (0..n)
        .map(|i| {
            let first = start as u128 + size * i / n;
            let last = start as u128 + size * (i + 1) / n - 1;
            (first as u64, last as u64)
        })
        .collect()
}

/// A tablet's table and hash range: what identifies a piece in the map.
type RangeKey = (TableId, u64, u64);

fn range_key(t: &TabletInfo) -> RangeKey {
    (t.table, t.start_hash, t.end_hash)
}

fn first_id() -> u64 {
    1
}

/// The answer to `GetTable { name }` from `map`.
pub fn get_table(map: &ClusterMap, name: &str) -> ControlResponse {
    match map.table_by_name(name) {
        Some(table) => ControlResponse::Table { table: table.clone() },
        None => not_found(name),
    }
}

fn check_table_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TABLE_NAME {
        return Err(format!("a table name has 1 to {MAX_TABLE_NAME} bytes, not {}", name.len()));
    }
    Ok(())
}

fn error(code: ControlErrorCode, message: impl Into<String>) -> ControlResponse {
    ControlResponse::Error { code, message: message.into() }
}

fn invalid(message: impl Into<String>) -> ControlResponse {
    error(ControlErrorCode::InvalidRequest, message)
}

fn not_found(table: &str) -> ControlResponse {
    error(ControlErrorCode::NotFound, format!("no table named '{table}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_common::SegmentId;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn enlist_req(previous: Option<u64>, port: u16) -> ControlRequest {
        ControlRequest::Enlist {
            previous: previous.map(ServerId),
            native: addr(port),
            resp: addr(port + 1),
            backup: addr(port + 2),
        }
    }

    /// The clock of these tests (ms since the Unix epoch).
    const NOW: u64 = 1_700_000_000_000;

    /// Applies `req`, checks the invariants and the version rule, and
    /// returns the response.
    fn apply(state: &mut ClusterState, req: ControlRequest) -> ControlResponse {
        let before = state.map.version;
        let out = state.apply(&req, NOW);
        state.check().unwrap();
        assert_eq!(state.map.replicas, state.effective_replicas());
        assert_eq!(state.map.version, before + out.changed as u64, "{req:?}");
        assert_groups_follow_up_servers(state);
        out.response
    }

    /// The groups are exactly the up servers cut by the group size.
    fn assert_groups_follow_up_servers(state: &ClusterState) {
        let up: Vec<ServerId> = state.map.servers.iter().filter(|s| s.state == ServerState::Up).map(|s| s.id).collect();
        let size = if state.sc_group_size == 0 { DEFAULT_SC_GROUP_SIZE } else { state.sc_group_size };
        let expect = sc_groups(&up, size, &state.map.sc_groups, 0);
        assert_eq!(state.map.sc_groups, expect, "groups follow the up servers");
    }

    fn enlist(state: &mut ClusterState, previous: Option<u64>, port: u16) -> (ServerId, LogId, Vec<LogId>) {
        match apply(state, enlist_req(previous, port)) {
            ControlResponse::Enlisted { server, log, recover, map, .. } => {
                assert_eq!(&map, state.map());
                (server, log, recover)
            }
            other => panic!("{other:?}"),
        }
    }

    /// Declares `server` dead, checking the invariants and the version rule.
    fn down(state: &mut ClusterState, server: u64) -> bool {
        let before = state.map.version;
        let changed = state.declare_dead(ServerId(server), NOW);
        state.check().unwrap();
        assert_groups_follow_up_servers(state);
        assert_eq!(state.map.replicas, state.effective_replicas());
        assert_eq!(state.map.version, before + changed as u64);
        changed
    }

    fn create(state: &mut ClusterState, name: &str, span: u32) -> TableInfo {
        match apply(
            state,
            ControlRequest::CreateTable { name: name.into(), span, slots: false, chunks: false, stream: None },
        ) {
            ControlResponse::Table { table } => table,
            other => panic!("{other:?}"),
        }
    }

    fn error_code(resp: ControlResponse) -> ControlErrorCode {
        match resp {
            ControlResponse::Error { code, .. } => code,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// `servers` servers, each with its head reported replicated (as a
    /// real server does once it is on a backup).
    fn cluster(servers: u16) -> ClusterState {
        let mut s = cluster_unreported(servers);
        for x in s.map().servers.clone() {
            apply(&mut s, ControlRequest::HeadReplicated { server: x.id, log: x.log });
        }
        s
    }

    fn cluster_unreported(servers: u16) -> ClusterState {
        let mut s = ClusterState::new(None);
        for i in 0..servers {
            enlist(&mut s, None, 1000 + 10 * i);
        }
        s
    }

    #[test]
    fn sc_groups_change_epoch_with_membership_only() {
        let mut s = cluster(3);
        assert!(s.set_sc_group_size(2));
        let first = s.map.sc_groups.clone();
        assert_eq!(first.iter().map(|g| g.members.len()).collect::<Vec<_>>(), vec![2, 1]);
        assert!(!s.set_sc_group_size(2), "same size, same groups: no change");
        create(&mut s, "t", 3);
        assert_eq!(s.map.sc_groups, first, "a table changes no group");
        enlist(&mut s, None, 2000);
        assert_eq!(s.map.sc_groups[0], first[0], "group 1-2 keeps its epoch");
        assert_eq!(s.map.sc_groups[1].members, vec![ServerId(3), ServerId(4)]);
        assert_eq!(s.map.sc_groups[1].epoch, s.map.version, "the group a server joined has a new epoch");
        let version = s.map.version;
        assert!(down(&mut s, 2));
        assert_eq!(
            s.map.sc_groups.iter().map(|g| g.members.clone()).collect::<Vec<_>>(),
            vec![vec![ServerId(1), ServerId(3)], vec![ServerId(4)]]
        );
        assert!(s.map.sc_groups.iter().all(|g| g.epoch > version), "a member died: every changed group moves on");
        assert!(s.set_sc_group_size(8));
        assert_eq!(s.map.sc_groups.len(), 1);
        s.check().unwrap();
    }

    #[test]
    fn new_has_map_version_one() {
        let s = ClusterState::new(None);
        assert_eq!(s.map().version, 1);
        assert_eq!(s.map().replicas, 0);
        s.check().unwrap();
    }

    #[test]
    fn enlist_new_servers_get_fresh_ids_and_logs() {
        let mut s = ClusterState::new(None);
        let (a, la, ra) = enlist(&mut s, None, 1000);
        let (b, lb, rb) = enlist(&mut s, Some(77), 1010);
        assert_eq!((a, b), (ServerId(1), ServerId(2)));
        assert_ne!(la, lb);
        assert!(ra.is_empty() && rb.is_empty());
        assert_eq!(s.log_version(la), Some(1));
        assert!(s.map().servers.iter().all(|x| x.state == ServerState::Up));
        assert_eq!(s.map().server(b).unwrap().backup, addr(1012));
    }

    #[test]
    fn enlist_again_keeps_id_and_tablets_and_yields_recover_list() {
        let mut s = cluster(2);
        create(&mut s, "t", 4);
        let tablets_before: Vec<TabletInfo> = s.map().tablets_of(ServerId(1)).cloned().collect();
        let old_log = s.map().server(ServerId(1)).unwrap().log;

        let (id, log, recover) = enlist(&mut s, Some(1), 2000);
        assert_eq!(id, ServerId(1));
        assert_ne!(log, old_log);
        assert_eq!(recover, vec![old_log]);
        let info = s.map().server(id).unwrap();
        assert_eq!((info.native, info.log, info.state), (addr(2000), log, ServerState::Recovering));
        let tablets_after: Vec<TabletInfo> = s.map().tablets_of(ServerId(1)).cloned().collect();
        assert_eq!(tablets_before, tablets_after);
        assert_eq!(s.map().servers.len(), 2);

        // A second restart before recovering keeps both earlier logs.
        let (_, log3, recover) = enlist(&mut s, Some(1), 2000);
        assert_eq!(recover, vec![old_log, log]);
        assert!(log3.0 > log.0);
    }

    #[test]
    fn log_ids_are_never_reused() {
        let mut s = ClusterState::new(None);
        let mut seen = std::collections::HashSet::new();
        for i in 0..5 {
            let (_, log, _) = enlist(&mut s, None, 1000 + 10 * i);
            assert!(seen.insert(log));
            let (_, log, _) = enlist(&mut s, Some(1), 3000);
            assert!(seen.insert(log));
        }
        let (id, log, recover) = enlist(&mut s, Some(1), 3000);
        assert!(seen.insert(log));
        assert_eq!(id, ServerId(1));
        assert_eq!(recover.len(), 6);
    }

    #[test]
    fn enlist_at_a_taken_address_marks_the_old_server_down() {
        let mut s = cluster(3);
        let (id, _, _) = enlist(&mut s, None, 1010);
        assert_eq!(id, ServerId(4));
        assert_eq!(s.map().server(ServerId(2)).unwrap().state, ServerState::Down);
        assert_eq!(s.map().live_servers().count(), 3);
        // Unspecified addresses say nothing about identity.
        let mut s = ClusterState::new(None);
        let any = |p| ControlRequest::Enlist {
            previous: None,
            native: SocketAddr::from(([0, 0, 0, 0], p)),
            resp: addr(1),
            backup: addr(2),
        };
        apply(&mut s, any(5));
        apply(&mut s, any(5));
        assert_eq!(s.map().live_servers().count(), 2);
    }

    #[test]
    fn recovered_removes_logs_and_marks_up_when_done() {
        let mut s = cluster(2);
        let (_, _, r1) = enlist(&mut s, Some(2), 1010);
        let (_, current, r2) = enlist(&mut s, Some(2), 1010);
        assert_eq!(r2.len(), 2);
        assert_eq!(r2[0], r1[0]);

        let ok = apply(&mut s, ControlRequest::Recovered { server: ServerId(2), logs: vec![r2[0]] });
        assert_eq!(ok, ControlResponse::Ok);
        assert_eq!(s.recover_list(ServerId(2)), &r2[1..]);
        assert_eq!(s.map().server(ServerId(2)).unwrap().state, ServerState::Recovering);
        assert_eq!(s.log_version(r2[0]), None);

        // Naming the current log or a forgotten one changes nothing.
        let v = s.map().version;
        apply(&mut s, ControlRequest::Recovered { server: ServerId(2), logs: vec![r2[0], current] });
        assert_eq!(s.map().version, v);
        assert_eq!(s.log_version(current), Some(1));
        assert_eq!(s.log_version(r2[1]), Some(1));

        apply(&mut s, ControlRequest::Recovered { server: ServerId(2), logs: vec![r2[1], current] });
        assert_eq!(s.log_version(current), Some(1));
        assert!(s.recover_list(ServerId(2)).is_empty());
        assert_eq!(s.map().server(ServerId(2)).unwrap().state, ServerState::Up);

        // Repeating it is harmless.
        let v = s.map().version;
        assert_eq!(apply(&mut s, ControlRequest::Recovered { server: ServerId(2), logs: r2 }), ControlResponse::Ok);
        assert_eq!(s.map().version, v);

        let err = apply(&mut s, ControlRequest::Recovered { server: ServerId(9), logs: vec![] });
        assert_eq!(error_code(err), ControlErrorCode::NotFound);
    }

    #[test]
    fn recovered_does_not_revive_a_down_server() {
        let mut s = cluster(2);
        let (_, _, r) = enlist(&mut s, Some(1), 1000);
        assert!(down(&mut s, 1));
        assert!(!down(&mut s, 1));
        assert!(!down(&mut s, 9));
        apply(&mut s, ControlRequest::Recovered { server: ServerId(1), logs: r });
        assert_eq!(s.map().server(ServerId(1)).unwrap().state, ServerState::Down);
    }

    #[test]
    fn create_table_ids_start_at_one_and_are_never_reused() {
        let mut s = cluster(1);
        assert_eq!(create(&mut s, "a", 1).id, TableId(1));
        assert_eq!(create(&mut s, "b", 1).id, TableId(2));
        assert_eq!(apply(&mut s, ControlRequest::DropTable { name: "b".into() }), ControlResponse::Ok);
        assert_eq!(create(&mut s, "b", 1).id, TableId(3));
    }

    #[test]
    fn create_table_is_idempotent_by_name() {
        let mut s = cluster(2);
        let t = create(&mut s, "users", 4);
        let v = s.map().version;
        assert_eq!(create(&mut s, "users", 9), t);
        assert_eq!(s.map().version, v);
        assert_eq!(s.map().tablets.len(), 4);
    }

    #[test]
    fn create_table_refuses_bad_names_and_spans() {
        let mut s = cluster(1);
        let req =
            |name: String, span| ControlRequest::CreateTable { name, span, slots: false, chunks: false, stream: None };
        assert_eq!(error_code(apply(&mut s, req(String::new(), 1))), ControlErrorCode::InvalidRequest);
        assert_eq!(error_code(apply(&mut s, req("x".repeat(256), 1))), ControlErrorCode::InvalidRequest);
        create(&mut s, &"x".repeat(255), 1);
        assert_eq!(error_code(apply(&mut s, req("big".into(), MAX_SPAN + 1))), ControlErrorCode::InvalidRequest);
        assert_eq!(error_code(apply(&mut s, req("huge".into(), u32::MAX))), ControlErrorCode::InvalidRequest);
        create(&mut s, "max", MAX_SPAN);
    }

    #[test]
    fn create_table_refuses_past_the_cluster_tablet_limit() {
        let mut s = cluster(1);
        let full = MAX_TABLETS / MAX_SPAN as usize;
        for i in 0..full {
            create(&mut s, &format!("t{i}"), MAX_SPAN);
        }
        let err = apply(
            &mut s,
            ControlRequest::CreateTable { name: "one-more".into(), span: 1, slots: false, chunks: false, stream: None },
        );
        assert_eq!(error_code(err), ControlErrorCode::InvalidRequest);
        apply(&mut s, ControlRequest::DropTable { name: "t0".into() });
        create(&mut s, "one-more", 1);
    }

    #[test]
    fn create_table_without_servers_is_refused() {
        let mut s = ClusterState::new(None);
        let err = apply(
            &mut s,
            ControlRequest::CreateTable { name: "t".into(), span: 0, slots: false, chunks: false, stream: None },
        );
        assert_eq!(error_code(err), ControlErrorCode::NoServers);
        enlist(&mut s, None, 1000);
        down(&mut s, 1);
        let err = apply(
            &mut s,
            ControlRequest::CreateTable { name: "t".into(), span: 0, slots: false, chunks: false, stream: None },
        );
        assert_eq!(error_code(err), ControlErrorCode::NoServers);
        assert!(s.map().tables.is_empty());
    }

    #[test]
    fn create_table_tablets_cover_the_hash_space_once_and_spread() {
        let mut s = cluster(3);
        for (i, span) in [1u32, 2, 3, 5, 7, 64].into_iter().enumerate() {
            let t = create(&mut s, &format!("t{i}"), span);
            let mut tablets: Vec<&TabletInfo> = s.map().tablets.iter().filter(|x| x.table == t.id).collect();
            tablets.sort_by_key(|x| x.start_hash);
            assert_eq!(tablets.len(), span as usize);
            assert_eq!(tablets[0].start_hash, 0);
            assert_eq!(tablets.last().unwrap().end_hash, u64::MAX);
            for w in tablets.windows(2) {
                assert_eq!(w[0].end_hash + 1, w[1].start_hash);
            }
            // Round-robin: per table, masters differ by at most one tablet.
            let counts: Vec<usize> =
                (1..=3).map(|id| tablets.iter().filter(|x| x.master == ServerId(id)).count()).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{counts:?}");
        }
        // Across tables too: single-tablet tables land on different servers.
        let masters: Vec<ServerId> = (0..6)
            .map(|i| {
                let t = create(&mut s, &format!("one{i}"), 1);
                s.map().tablets.iter().find(|x| x.table == t.id).unwrap().master
            })
            .collect();
        for id in 1..=3 {
            assert_eq!(masters.iter().filter(|m| **m == ServerId(id)).count(), 2, "{masters:?}");
        }
    }

    #[test]
    fn slot_tables_have_the_flag_and_whole_slot_tablets_also_after_recovery() {
        let mut s = cluster(3);
        let t = match apply(
            &mut s,
            ControlRequest::CreateTable { name: "db0".into(), span: 0, slots: true, chunks: false, stream: None },
        ) {
            ControlResponse::Table { table } => table,
            other => panic!("{other:?}"),
        };
        assert!(t.id.is_slot_hashed());
        assert_eq!(table_number(t.id), 1);
        let plain = create(&mut s, "plain", 3);
        assert!(!plain.id.is_slot_hashed());
        let slot_ranges = |s: &ClusterState| -> Vec<(u16, u16)> {
            let mut r: Vec<(u16, u16)> = s
                .map()
                .tablets
                .iter()
                .filter(|x| x.table == t.id)
                .map(|x| hashes_slot_range(x.start_hash, x.end_hash).expect("whole slots"))
                .collect();
            r.sort_unstable();
            r
        };
        assert_eq!(slot_ranges(&s), vec![(0, 5460), (5461, 10921), (10922, 16383)]);
        // A recovery splits the dead server's slots over the two others, on
        // slot boundaries (the check in `apply` verifies it too).
        assert!(down(&mut s, 1));
        let r = recovery(&s, 1);
        let pieces: Vec<&TabletInfo> =
            r.partitions.iter().flat_map(|p| p.tablets.iter()).filter(|x| x.table == t.id).collect();
        assert_eq!(pieces.len(), 2);
        assert!(pieces.iter().all(|x| hashes_slot_range(x.start_hash, x.end_hash).is_some()));
        assert_eq!(slot_ranges(&s).len(), 4);
    }

    #[test]
    fn create_table_span_zero_is_one_tablet_per_live_server() {
        let mut s = cluster(4);
        down(&mut s, 3);
        let t = create(&mut s, "t", 0);
        let mut masters: Vec<ServerId> = s.map().tablets.iter().filter(|x| x.table == t.id).map(|x| x.master).collect();
        masters.sort();
        assert_eq!(masters, vec![ServerId(1), ServerId(2), ServerId(4)]);
    }

    #[test]
    fn drop_and_get_table() {
        let mut s = cluster(2);
        let t = create(&mut s, "a", 2);
        create(&mut s, "b", 2);
        assert_eq!(apply(&mut s, ControlRequest::GetTable { name: "a".into() }), ControlResponse::Table { table: t });
        assert_eq!(apply(&mut s, ControlRequest::DropTable { name: "a".into() }), ControlResponse::Ok);
        assert_eq!(s.map().tablets.len(), 2);
        assert!(s.map().table_by_name("a").is_none());
        let err = apply(&mut s, ControlRequest::GetTable { name: "a".into() });
        assert_eq!(error_code(err), ControlErrorCode::NotFound);
        let err = apply(&mut s, ControlRequest::DropTable { name: "a".into() });
        assert_eq!(error_code(err), ControlErrorCode::NotFound);
    }

    #[test]
    fn replicas_auto_rule_follows_live_servers() {
        let mut s = ClusterState::new(None);
        let mut seen = vec![s.map().replicas];
        for i in 0..5 {
            enlist(&mut s, None, 1000 + 10 * i);
            seen.push(s.map().replicas);
        }
        assert_eq!(seen, vec![0, 0, 1, 2, 3, 3]);
        down(&mut s, 1);
        down(&mut s, 2);
        assert_eq!(s.map().replicas, 2);
        // Re-enlisting a known server does not count it twice.
        enlist(&mut s, Some(3), 1020);
        assert_eq!(s.map().replicas, 2);
    }

    #[test]
    fn replicas_config_overrides_the_rule() {
        let mut s = ClusterState::new(Some(1));
        assert_eq!(s.map().replicas, 1);
        for i in 0..5 {
            enlist(&mut s, None, 1000 + 10 * i);
            assert_eq!(s.map().replicas, 1);
        }
    }

    #[test]
    fn decode_round_trips_and_applies_new_replicas_config() {
        let mut s = cluster(3);
        create(&mut s, "t", 5);
        enlist(&mut s, Some(2), 1010);
        s.bump_log_version(s.map().server(ServerId(1)).unwrap().log).unwrap();
        let bytes = s.encode();
        let (back, changed) = ClusterState::decode(&bytes, None).unwrap();
        assert!(!changed);
        assert_eq!(back, s);

        let (back, changed) = ClusterState::decode(&bytes, Some(1)).unwrap();
        assert!(changed);
        assert_eq!(back.map().replicas, 1);
        assert_eq!(back.map().version, s.map().version + 1);
        assert_eq!(back.log_version(back.map().server(ServerId(1)).unwrap().log), Some(2));
    }

    #[test]
    fn decode_refuses_damaged_state() {
        let mut s = cluster(2);
        create(&mut s, "t", 2);
        let good: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        assert!(ClusterState::decode(b"{not json", None).is_err());
        assert!(ClusterState::decode(b"", None).is_err());

        let mut v = good.clone();
        v["format"] = 99.into();
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap_err().contains("format 99"));

        let mut v = good.clone();
        v["map"]["tablets"].as_array_mut().unwrap().pop();
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap_err().contains("hash space"));

        let mut v = good.clone();
        v["next_server"] = 2.into();
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).is_err());

        let mut v = good.clone();
        v["map"]["tablets"][0]["master"] = 9.into();
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).is_err());

        let mut v = good;
        v["log_versions"] = serde_json::json!({});
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).is_err());
    }

    #[test]
    fn bump_log_version_counts_up() {
        let mut s = cluster(1);
        let log = s.map().servers[0].log;
        assert_eq!(s.bump_log_version(log), Some(2));
        assert_eq!(s.bump_log_version(log), Some(3));
        assert_eq!(s.bump_log_version(LogId(999)), None);
    }

    #[test]
    fn stats_describe_servers_and_tables() {
        let mut s = cluster(2);
        create(&mut s, "t", 3);
        enlist(&mut s, Some(1), 1000);
        let stats = s.stats();
        assert_eq!(stats["map_version"], s.map().version);
        assert_eq!(stats["tables"], 1);
        assert_eq!(stats["tablets"], 3);
        assert_eq!(stats["servers"][0]["state"], "recovering");
        assert_eq!(stats["servers"][0]["recover"].as_array().unwrap().len(), 1);
        assert_eq!(stats["servers"][1]["state"], "up");
        assert_eq!(stats["sc_groups"], serde_json::json!([{"members": [2], "epoch": s.map().sc_groups[0].epoch}]));
    }

    // ---- crash recovery ----

    fn recovery(state: &ClusterState, dead: u64) -> Recovery {
        state.map().recoveries.iter().find(|r| r.dead == ServerId(dead)).cloned().expect("a recovery")
    }

    fn done(state: &mut ClusterState, recovery: u64, partition: u32, server: ServerId) -> ControlResponse {
        let req = ControlRequest::RecoveryDone {
            recovery,
            partition,
            server,
            objects: 10,
            bytes: 1000,
            replay_ms: 5,
            since: Some(SegmentId(7)),
        };
        apply(state, req)
    }

    /// Reports every unfinished partition of `dead`'s recovery done.
    fn finish(state: &mut ClusterState, dead: u64) {
        let r = recovery(state, dead);
        for (i, p) in r.partitions.iter().enumerate().filter(|(_, p)| !p.done) {
            assert_eq!(done(state, r.id, i as u32, p.master), ControlResponse::Ok);
        }
        assert!(state.map().recoveries.iter().all(|x| x.id != r.id));
    }

    #[test]
    fn split_range_covers_the_range_once_without_empty_pieces() {
        for n in [1u32, 2, 3, 7, 64] {
            assert_eq!(split_range(0, u64::MAX, n as u64), split_hash_space(n));
        }
        for (start, end, n) in [(0, 0, 3), (5, 6, 3), (10, 12, 3), (100, 1099, 7), (u64::MAX - 2, u64::MAX, 2)] {
            let r = split_range(start, end, n);
            assert_eq!(r.len() as u64, n.min(end - start + 1), "{start}..={end} / {n}");
            assert_eq!((r[0].0, r.last().unwrap().1), (start, end));
            assert!(r.iter().all(|(a, b)| a <= b));
            for w in r.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
            let sizes: Vec<u64> = r.iter().map(|(a, b)| b - a + 1).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        }
        assert_eq!(split_range(7, 7, 0), vec![(7, 7)]);
    }

    /// A chunk table has one tablet, created whole and recovered whole (one
    /// recovery master serves all its chunks); its name cannot be taken by
    /// a key-value table.
    #[test]
    fn a_chunk_table_has_one_tablet_and_is_recovered_whole() {
        let mut s = cluster(4);
        let req = ControlRequest::CreateTable { name: "g".into(), span: 4, slots: false, chunks: true, stream: None };
        let ControlResponse::Table { table } = apply(&mut s, req) else { panic!("a chunk table") };
        assert!(table.chunks);
        let tablets: Vec<TabletInfo> = s.map().tablets.iter().filter(|t| t.table == table.id).cloned().collect();
        assert_eq!(tablets.len(), 1);
        assert_eq!((tablets[0].start_hash, tablets[0].end_hash), (0, u64::MAX));
        let again =
            ControlRequest::CreateTable { name: "g".into(), span: 0, slots: false, chunks: false, stream: None };
        assert!(matches!(apply(&mut s, again), ControlResponse::Error { .. }));
        let master = tablets[0].master;
        assert!(down(&mut s, master.0));
        let r = recovery(&s, master.0);
        let pieces: Vec<&TabletInfo> =
            r.partitions.iter().flat_map(|p| &p.tablets).filter(|t| t.table == table.id).collect();
        assert_eq!(pieces.len(), 1, "{r:?}");
        finish(&mut s, master.0);
        let now: Vec<&TabletInfo> = s.map().tablets.iter().filter(|t| t.table == table.id).collect();
        assert_eq!(now.len(), 1);
        assert_ne!(now[0].master, master);
    }

    /// Every live server gets the whole range of its own chunk ids in a new
    /// chunk table, and a server that enlists later gets its own then; a
    /// dead server's ranges (its own and one it took over) go to recovery
    /// masters and are theirs once their partitions are done; a drop
    /// removes them.
    #[test]
    fn chunk_ranges_follow_servers_through_enlistment_recovery_and_drop() {
        let mut s = cluster(3);
        let req = |name: &str| ControlRequest::CreateTable {
            name: name.into(),
            span: 0,
            slots: false,
            chunks: true,
            stream: None,
        };
        let ControlResponse::Table { table } = apply(&mut s, req("g")) else { panic!("a chunk table") };
        let owners = |s: &ClusterState| -> Vec<(u16, u64)> {
            s.map().chunk_ranges.iter().filter(|c| c.table == table.id).map(|c| (c.node, c.master.0)).collect()
        };
        assert_eq!(owners(&s), vec![(1, 1), (2, 2), (3, 3)]);
        assert_eq!(s.map().chunk_creators(table.id).map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        let id = |node, local| shoal_common::ChunkId::new(node, local);
        assert_eq!(s.map().chunk_owner(table.id, id(2, 77)).map(|c| c.master), Some(ServerId(2)));
        let (four, log, _) = enlist(&mut s, None, 9004);
        apply(&mut s, ControlRequest::HeadReplicated { server: four, log });
        assert_eq!(owners(&s), vec![(1, 1), (2, 2), (3, 3), (4, 4)]);
        // A server with chunk ranges and no tablets is still recovered.
        let t = s.map().tablets.iter().find(|t| t.table == table.id).unwrap().clone();
        let bare = [1, 2, 3].into_iter().find(|&x| x != t.master.0).unwrap();
        assert!(down(&mut s, bare));
        let r = recovery(&s, bare);
        let moved: Vec<&ChunkRange> = r.partitions.iter().flat_map(|p| &p.chunks).collect();
        assert_eq!(moved.len(), 1, "{r:?}");
        assert_eq!((moved[0].node, moved[0].lo, moved[0].hi), (bare as u16, 0, shoal_common::ChunkId::MAX_LOCAL));
        let taker = moved[0].master;
        assert_eq!(s.map().chunk_owner(table.id, id(bare as u16, 5)).map(|c| c.master), Some(ServerId(bare)));
        finish(&mut s, bare);
        assert_eq!(s.map().chunk_owner(table.id, id(bare as u16, 5)).map(|c| c.master), Some(taker));
        assert!(!s.map().chunk_creators(table.id).any(|x| x.0 == bare), "a taken-over range creates nothing");
        // The taker dies too: both its own range and the one it took over
        // go on.
        assert!(down(&mut s, taker.0));
        let r = recovery(&s, taker.0);
        let mut nodes: Vec<u16> = r.partitions.iter().flat_map(|p| &p.chunks).map(|c| c.node).collect();
        nodes.sort();
        let mut expect = vec![bare as u16, taker.0 as u16];
        expect.sort();
        assert_eq!(nodes, expect);
        finish(&mut s, taker.0);
        for node in expect {
            let owner = s.map().chunk_owner(table.id, id(node, 1)).unwrap().master;
            assert_eq!(s.map().server(owner).unwrap().state, ServerState::Up);
        }
        assert_eq!(apply(&mut s, ControlRequest::DropTable { name: "g".into() }), ControlResponse::Ok);
        assert!(s.map().chunk_ranges.is_empty());
        let restored = ClusterState::decode(&s.encode(), None).unwrap().0;
        assert_eq!(restored.map(), s.map());
        let ControlResponse::Table { table } = apply(&mut s, req("h")) else { panic!("a chunk table") };
        let restored = ClusterState::decode(&s.encode(), None).unwrap().0;
        assert_eq!(restored.map().chunk_ranges, s.map().chunk_ranges, "saved with the state");
        assert_eq!(restored.map().chunk_creators(table.id).count(), s.map().live_servers().count());
    }

    fn start_chunk_move(s: &mut ClusterState, table: &str, node: u16, lo: u64, hi: u64, to: u64) -> ControlResponse {
        let chunks = Some(ChunkSpan { node, lo, hi });
        apply(s, ControlRequest::StartMigration { table: table.into(), start_hash: 0, to: ServerId(to), chunks })
    }

    /// (node, lo, hi, master) of every chunk range of `table`.
    fn chunk_layout(s: &ClusterState, table: TableId) -> Vec<(u16, u64, u64, u64)> {
        s.map().chunk_ranges.iter().filter(|c| c.table == table).map(|c| (c.node, c.lo, c.hi, c.master.0)).collect()
    }

    fn chunk_table(s: &mut ClusterState, name: &str) -> TableInfo {
        let req = ControlRequest::CreateTable { name: name.into(), span: 0, slots: false, chunks: true, stream: None };
        let ControlResponse::Table { table } = apply(s, req) else { panic!("a chunk table") };
        table
    }

    /// A chunk move of a sub-range splits its server's range entry in
    /// three (no data moves), the commit hands the middle entry to the
    /// target with where it owns it from, and a move back joins the
    /// entries again, so the server creates again; the record and the
    /// split survive a save.
    #[test]
    fn a_chunk_range_move_splits_commits_and_joins_back() {
        const MAX: u64 = shoal_common::ChunkId::MAX_LOCAL;
        let mut s = cluster(3);
        let t = chunk_table(&mut s, "g");
        let m = match start_chunk_move(&mut s, "g", 1, 100, 199, 2) {
            ControlResponse::Map { map } => map.chunk_migrations.last().cloned().expect("a chunk migration"),
            other => panic!("{other:?}"),
        };
        assert_eq!((m.node, m.lo, m.hi, m.from, m.to), (1, 100, 199, ServerId(1), ServerId(2)));
        let split = vec![(1, 0, 99, 1), (1, 100, 199, 1), (1, 200, MAX, 1), (2, 0, MAX, 2), (3, 0, MAX, 3)];
        assert_eq!(chunk_layout(&s, t.id), split);
        assert!(!s.map().chunk_creators(t.id).any(|x| x.0 == 1), "part of its own range is moving");
        let back = ClusterState::decode(&s.encode(), None).unwrap().0;
        assert_eq!(back.map().chunk_migrations, s.map().chunk_migrations, "a standby coordinator resumes it");
        assert_eq!(back.map().chunk_ranges, s.map().chunk_ranges);
        // Only the source commits; then the entry is the target's.
        let wrong = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: ServerId(2), since: None });
        assert_eq!(error_code(wrong), ControlErrorCode::InvalidRequest);
        let since = Some(SegmentId(7));
        assert_eq!(
            apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: ServerId(1), since }),
            ControlResponse::Ok
        );
        assert!(s.map().chunk_migrations.is_empty());
        let moved = vec![(1, 0, 99, 1), (1, 100, 199, 2), (1, 200, MAX, 1), (2, 0, MAX, 2), (3, 0, MAX, 3)];
        assert_eq!(chunk_layout(&s, t.id), moved);
        let owner =
            |s: &ClusterState, local| s.map().chunk_owner(t.id, shoal_common::ChunkId::new(1, local)).unwrap().master.0;
        assert_eq!((owner(&s, 99), owner(&s, 100), owner(&s, 199), owner(&s, 200)), (1, 2, 2, 1));
        let log2 = s.map().server(ServerId(2)).unwrap().log;
        assert_eq!(
            s.map()
                .owned_chunk_pieces(ServerId(2), log2, t.id, 1, 0, 300)
                .iter()
                .map(|p| (p.start_hash, p.end_hash, p.from.0))
                .collect::<Vec<_>>(),
            vec![(0, 99, 0), (100, 199, 7), (200, 300, 0)],
            "the target's log counts for the range from the copy on"
        );
        assert_eq!(
            apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: ServerId(1), since }),
            ControlResponse::Ok,
            "a repeated commit is ok"
        );
        // Part of the moved ids go on to a third server, the rest back home.
        let ControlResponse::Map { map } = start_chunk_move(&mut s, "g", 1, 150, 199, 3) else { panic!() };
        let third = map.chunk_migrations[0].id;
        assert_eq!(
            apply(&mut s, ControlRequest::FinishMigration { id: third, server: ServerId(2), since }),
            ControlResponse::Ok
        );
        let ControlResponse::Map { map } = start_chunk_move(&mut s, "g", 1, 100, 149, 1) else { panic!() };
        let home = map.chunk_migrations[0].id;
        assert_eq!(
            apply(&mut s, ControlRequest::FinishMigration { id: home, server: ServerId(2), since }),
            ControlResponse::Ok
        );
        assert_eq!(
            chunk_layout(&s, t.id),
            vec![(1, 0, 149, 1), (1, 150, 199, 3), (1, 200, MAX, 1), (2, 0, MAX, 2), (3, 0, MAX, 3)]
        );
        assert!(s.map().owned_since.iter().all(|o| o.server != ServerId(2)), "the target gave all of it up");
        let ControlResponse::Map { map } = start_chunk_move(&mut s, "g", 1, 150, 199, 1) else { panic!() };
        let last = map.chunk_migrations[0].id;
        assert_eq!(
            apply(&mut s, ControlRequest::FinishMigration { id: last, server: ServerId(3), since }),
            ControlResponse::Ok
        );
        assert_eq!(chunk_layout(&s, t.id), vec![(1, 0, MAX, 1), (2, 0, MAX, 2), (3, 0, MAX, 3)], "whole again");
        assert!(s.map().chunk_creators(t.id).any(|x| x.0 == 1), "it creates again");
        let late =
            apply(&mut s, ControlRequest::AbortMigration { id: last, server: ServerId(3), reason: "late".into() });
        assert_eq!(error_code(late), ControlErrorCode::InvalidRequest, "an abort of a committed move is refused");
    }

    #[test]
    fn a_chunk_range_move_is_refused_for_bad_input_and_aborts_with_its_servers() {
        const MAX: u64 = shoal_common::ChunkId::MAX_LOCAL;
        let mut s = cluster(3);
        let t = chunk_table(&mut s, "g");
        create(&mut s, "kv", 1);
        let code = |r: ControlResponse| error_code(r);
        assert_eq!(code(start_chunk_move(&mut s, "nope", 1, 0, 9, 2)), ControlErrorCode::NotFound);
        assert_eq!(code(start_chunk_move(&mut s, "kv", 1, 0, 9, 2)), ControlErrorCode::InvalidRequest);
        assert_eq!(code(start_chunk_move(&mut s, "g", 1, 9, 0, 2)), ControlErrorCode::InvalidRequest, "lo > hi");
        assert_eq!(code(start_chunk_move(&mut s, "g", 1, 0, MAX + 1, 2)), ControlErrorCode::InvalidRequest);
        assert_eq!(code(start_chunk_move(&mut s, "g", 9, 0, 9, 2)), ControlErrorCode::NotFound, "no node 9");
        assert_eq!(code(start_chunk_move(&mut s, "g", 1, 0, 9, 1)), ControlErrorCode::InvalidRequest, "to itself");
        assert_eq!(code(start_chunk_move(&mut s, "g", 1, 0, 9, 8)), ControlErrorCode::NotFound, "no server 8");
        let before = chunk_layout(&s, t.id);
        let ControlResponse::Map { map } = start_chunk_move(&mut s, "g", 1, 10, 19, 2) else { panic!() };
        let m = map.chunk_migrations[0].clone();
        assert_eq!(code(start_chunk_move(&mut s, "g", 1, 12, 13, 3)), ControlErrorCode::InvalidRequest, "moving");
        assert_eq!(code(start_chunk_move(&mut s, "g", 1, 5, 30, 3)), ControlErrorCode::InvalidRequest, "two ranges");
        // An abort puts the pieces together again.
        let ok = apply(&mut s, ControlRequest::AbortMigration { id: m.id, server: ServerId(2), reason: "x".into() });
        assert_eq!(ok, ControlResponse::Ok);
        assert_eq!(chunk_layout(&s, t.id), before);
        let late = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: ServerId(1), since: None });
        assert_eq!(code(late), ControlErrorCode::InvalidRequest, "an aborted move does not commit");
        // The target declared dead: the move is gone in the same change, the
        // source keeps the ids.
        let ControlResponse::Map { map } = start_chunk_move(&mut s, "g", 1, 10, 19, 2) else { panic!() };
        let m = map.chunk_migrations[0].clone();
        assert!(down(&mut s, 2));
        assert!(s.map().chunk_migrations.is_empty());
        assert_eq!(s.map().chunk_owner(t.id, shoal_common::ChunkId::new(1, 15)).unwrap().master, ServerId(1));
        assert!(s.map().chunk_creators(t.id).any(|x| x == ServerId(1)), "the source's range is whole again");
        let late = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: ServerId(1), since: None });
        assert_eq!(code(late), ControlErrorCode::InvalidRequest);
        // Dropping the table drops a move of its ids.
        let ControlResponse::Map { .. } = start_chunk_move(&mut s, "g", 1, 10, 19, 3) else { panic!() };
        assert_eq!(apply(&mut s, ControlRequest::DropTable { name: "g".into() }), ControlResponse::Ok);
        assert!(s.map().chunk_migrations.is_empty() && s.map().chunk_ranges.is_empty());
    }

    /// A state saved before chunk id ranges (chunk tables without any) is
    /// upgraded when read: the table's tablet master gets the ranges of the
    /// down servers' node ids (it served every chunk), live servers their
    /// own; the map version moves so that the change is published.
    #[test]
    fn a_state_without_chunk_ranges_is_upgraded_when_read() {
        let mut s = cluster(3);
        let req = ControlRequest::CreateTable { name: "g".into(), span: 0, slots: false, chunks: true, stream: None };
        let ControlResponse::Table { table } = apply(&mut s, req) else { panic!("a chunk table") };
        let master = s.map().tablets.iter().find(|t| t.table == table.id).unwrap().master;
        let other = [1, 2, 3].into_iter().find(|&x| x != master.0).unwrap();
        assert!(down(&mut s, other));
        finish(&mut s, other);
        let mut old = s.clone();
        old.map.chunk_ranges.clear();
        old.format = 2;
        let bytes = old.encode();
        assert!(old.check().is_err(), "live servers without their own ranges");
        let (read, changed) = ClusterState::decode(&bytes, None).unwrap();
        assert!(changed);
        assert_eq!(read.map().version, old.map.version + 1);
        let owner =
            |node: u64| read.map().chunk_owner(table.id, shoal_common::ChunkId::new(node as u16, 9)).unwrap().master;
        assert_eq!(owner(other), master, "the dead server's node goes to the table's old master");
        for s in read.map().live_servers() {
            assert_eq!(owner(s.id.0), s.id);
        }
        assert!(!ClusterState::decode(&read.encode(), None).unwrap().1, "upgraded once");
        // A format 3 state is taken as it is, ranges or none.
        let mut new = old.clone();
        new.format = STATE_FORMAT;
        assert!(ClusterState::decode(&new.encode(), None).is_err(), "not upgraded, so refused by the check");
    }

    /// A stream has one tablet per live server, at most one per streamlet,
    /// and keeps its shape: the same name with another shape, or as
    /// another kind, is refused, and an invalid shape creates nothing. Its
    /// tablets are recovered in pieces, as a key-value table's.
    #[test]
    fn a_stream_has_a_tablet_per_server_and_keeps_its_shape() {
        let mut s = cluster(3);
        let shape =
            StreamShape { streamlets: 8, logs: 2, segment_bytes: 1 << 20, group_segments: 4, group_timeout_ms: 0 };
        let req = |name: &str, stream| ControlRequest::CreateTable {
            name: name.into(),
            span: 1,
            slots: false,
            chunks: false,
            stream,
        };
        let bad = StreamShape { streamlets: 0, ..shape };
        assert!(matches!(apply(&mut s, req("clicks", Some(bad))), ControlResponse::Error { .. }));
        assert!(s.map().table_by_name("clicks").is_none());
        let ControlResponse::Table { table } = apply(&mut s, req("clicks", Some(shape))) else { panic!("a stream") };
        assert_eq!(table.stream, Some(shape));
        let ControlResponse::Table { table: again } = apply(&mut s, req("clicks", Some(shape))) else {
            panic!("the same stream")
        };
        assert_eq!(again, table);
        let other = StreamShape { logs: 4, ..shape };
        assert!(matches!(apply(&mut s, req("clicks", Some(other))), ControlResponse::Error { .. }));
        assert!(matches!(apply(&mut s, req("clicks", None)), ControlResponse::Error { .. }));
        let tablets: Vec<TabletInfo> = s.map().tablets.iter().filter(|t| t.table == table.id).cloned().collect();
        assert_eq!(tablets.len(), 3, "one per live server");
        let masters: BTreeSet<ServerId> = tablets.iter().map(|t| t.master).collect();
        assert_eq!(masters.len(), 3);
        // Fewer streamlets than servers: one tablet per streamlet.
        let one = StreamShape { streamlets: 1, ..shape };
        let ControlResponse::Table { table: small } = apply(&mut s, req("one", Some(one))) else { panic!("a stream") };
        assert_eq!(s.map().tablets.iter().filter(|t| t.table == small.id).count(), 1);
        let master = tablets[0].master;
        assert!(down(&mut s, master.0));
        let r = recovery(&s, master.0);
        let pieces = r.partitions.iter().flat_map(|p| &p.tablets).filter(|t| t.table == table.id).count();
        assert!(pieces >= 1, "{r:?}");
    }

    #[test]
    fn declare_dead_splits_tablets_into_pieces_over_the_up_servers() {
        let mut s = cluster(4);
        create(&mut s, "t", 4);
        create(&mut s, "u", 8);
        let old: Vec<TabletInfo> = s.map().tablets_of(ServerId(1)).cloned().collect();
        assert_eq!(old.len(), 3);
        let log = s.map().server(ServerId(1)).unwrap().log;

        assert!(down(&mut s, 1));
        assert_eq!(s.map().server(ServerId(1)).unwrap().state, ServerState::Down);
        assert_eq!(s.map().replicas, 2);
        let r = recovery(&s, 1);
        assert_eq!((r.id, r.logs.clone(), r.log_version, r.started_unix_ms), (1, vec![log], 2, NOW));
        assert_eq!(s.map().fenced, vec![FencedLog { log, version: 2, free: false }]);
        assert_eq!(s.log_version(log), Some(2));

        // One partition per up server, each with its own master.
        let mut masters: Vec<ServerId> = r.partitions.iter().map(|p| p.master).collect();
        masters.sort();
        assert_eq!(masters, vec![ServerId(2), ServerId(3), ServerId(4)]);
        // Each old tablet became 3 pieces covering exactly its range, one per partition,
        // still held by the dead server.
        for t in &old {
            let mut pieces: Vec<&TabletInfo> = s
                .map()
                .tablets
                .iter()
                .filter(|x| x.table == t.table && x.start_hash >= t.start_hash && x.end_hash <= t.end_hash)
                .collect();
            pieces.sort_by_key(|x| x.start_hash);
            assert_eq!(pieces.len(), 3);
            assert!(pieces.iter().all(|x| x.master == ServerId(1)));
            assert_eq!((pieces[0].start_hash, pieces[2].end_hash), (t.start_hash, t.end_hash));
            for p in &r.partitions {
                let mine: Vec<&TabletInfo> = p.tablets.iter().filter(|x| pieces.iter().any(|y| same(x, y))).collect();
                assert_eq!(mine.len(), 1);
                assert_eq!(mine[0].master, p.master);
            }
        }
        assert_eq!(s.map().tablets.len(), 12 - 3 + 9);
        // Nothing else moved.
        for id in 2..=4 {
            assert_eq!(s.map().tablets_of(ServerId(id)).count(), 3);
        }
    }

    fn same(a: &TabletInfo, b: &TabletInfo) -> bool {
        range_key(a) == range_key(b)
    }

    #[test]
    fn successive_recoveries_start_on_different_servers() {
        let mut firsts = Vec::new();
        for dead in 1..=3 {
            let mut s = cluster(4);
            create(&mut s, "t", 8);
            // Burn recovery ids so that each run's recovery has another id.
            for extra in 0..dead - 1 {
                let (id, _, _) = enlist(&mut s, None, 5000 + 10 * extra as u16);
                create(&mut s, &format!("x{extra}"), 0);
                down(&mut s, id.0);
                finish(&mut s, id.0);
            }
            down(&mut s, 4);
            let r = recovery(&s, 4);
            assert_eq!(r.id, dead);
            firsts.push(r.partitions[0].master);
        }
        firsts.dedup();
        assert_eq!(firsts.len(), 3, "{firsts:?}");
    }

    #[test]
    fn declare_dead_fences_every_log_at_one_bumped_version() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        let (_, current, earlier) = enlist(&mut s, Some(1), 1000);
        assert_eq!(s.bump_log_version(earlier[0]), Some(2));
        down(&mut s, 1);
        let r = recovery(&s, 1);
        assert_eq!(r.logs, vec![earlier[0], current]);
        assert_eq!(r.log_version, 3);
        assert_eq!(s.log_version(earlier[0]), Some(3));
        assert_eq!(s.log_version(current), Some(3));
        assert!(s.map().fenced.iter().all(|f| f.version == 3 && !f.free));
        assert_eq!(s.map().fenced.len(), 2);
        assert!(s.recover_list(ServerId(1)).is_empty());
    }

    #[test]
    fn recovery_done_hands_pieces_over_and_finishes() {
        let mut s = cluster(3);
        create(&mut s, "t", 6);
        let log = s.map().server(ServerId(1)).unwrap().log;
        down(&mut s, 1);
        let r = recovery(&s, 1);
        assert_eq!(r.partitions.len(), 2);
        let (p0, p1) = (&r.partitions[0], &r.partitions[1]);

        // Refusals change nothing.
        assert_eq!(error_code(done(&mut s, 99, 0, p0.master)), ControlErrorCode::NotFound);
        assert_eq!(error_code(done(&mut s, 0, 0, p0.master)), ControlErrorCode::NotFound);
        assert_eq!(error_code(done(&mut s, r.id, 2, p0.master)), ControlErrorCode::InvalidRequest);
        assert_eq!(error_code(done(&mut s, r.id, 0, p1.master)), ControlErrorCode::InvalidRequest);
        assert_eq!(error_code(done(&mut s, r.id, 0, ServerId(1))), ControlErrorCode::InvalidRequest);

        let v = s.map().version;
        assert_eq!(done(&mut s, r.id, 0, p0.master), ControlResponse::Ok);
        assert_eq!(s.map().version, v + 1);
        for piece in &p0.tablets {
            let t = s.map().tablets.iter().find(|t| same(t, piece)).unwrap();
            assert_eq!(t.master, p0.master);
        }
        for piece in &p1.tablets {
            assert_eq!(s.map().tablets.iter().find(|t| same(t, piece)).unwrap().master, ServerId(1));
        }
        assert!(recovery(&s, 1).partitions[0].done);
        // A repeated report is harmless.
        assert_eq!(done(&mut s, r.id, 0, p0.master), ControlResponse::Ok);
        assert_eq!(s.map().version, v + 1);

        assert_eq!(done(&mut s, r.id, 1, p1.master), ControlResponse::Ok);
        assert!(s.map().recoveries.is_empty());
        assert_eq!(s.map().tablets_of(ServerId(1)).count(), 0);
        assert_eq!(s.map().fenced, vec![FencedLog { log, version: 2, free: true }]);
        assert_eq!(s.log_version(log), None);
        // Reports after the end are still harmless.
        let v = s.map().version;
        assert_eq!(done(&mut s, r.id, 1, p1.master), ControlResponse::Ok);
        assert_eq!(s.map().version, v);
    }

    #[test]
    fn a_recovery_master_that_dies_hands_its_unfinished_partitions_on() {
        let mut s = cluster(4);
        create(&mut s, "t", 12);
        down(&mut s, 1);
        let r1 = recovery(&s, 1);
        assert_eq!(r1.partitions.len(), 3);
        let at = |r: &Recovery, m: u64| r.partitions.iter().position(|p| p.master == ServerId(m)).unwrap() as u32;
        // Server 3 finishes its partition; server 2 dies before finishing its own.
        let (p2, p3) = (at(&r1, 2), at(&r1, 3));
        done(&mut s, r1.id, p3, ServerId(3));
        let own2: Vec<TabletInfo> = s.map().tablets_of(ServerId(2)).cloned().collect();
        down(&mut s, 2);

        let r1 = recovery(&s, 1);
        let moved = &r1.partitions[p2 as usize];
        assert!(!moved.done);
        assert!(moved.master == ServerId(3) || moved.master == ServerId(4), "{moved:?}");
        assert!(moved.tablets.iter().all(|t| t.master == moved.master));
        // Server 2's own recovery covers its tablets only (not the pieces it was replaying).
        let r2 = recovery(&s, 2);
        assert_eq!(r2.id, r1.id + 1);
        let pieces2: usize = r2.partitions.iter().map(|p| p.tablets.len()).sum();
        assert_eq!(pieces2, own2.len() * 2);
        // Its report for the partition it lost is refused.
        assert_eq!(error_code(done(&mut s, r1.id, p2, ServerId(2))), ControlErrorCode::InvalidRequest);

        // Server 3, which finished a partition of recovery 1, dies too: the
        // pieces it received are its tablets and are recovered with the rest.
        let own3 = s.map().tablets_of(ServerId(3)).count();
        assert_eq!(own3, 3 + r1.partitions[p3 as usize].tablets.len());
        down(&mut s, 3);
        let r3 = recovery(&s, 3);
        assert_eq!(r3.partitions.len(), 1);
        assert_eq!(r3.partitions[0].tablets.len(), own3);
        // Everything unfinished now lands on server 4, the only one up.
        for r in &s.map().recoveries {
            assert!(r.partitions.iter().all(|p| p.done || p.master == ServerId(4)), "{r:?}");
        }
        for dead in [1, 2, 3] {
            finish(&mut s, dead);
        }
        assert!(s.map().tablets.iter().all(|t| t.master == ServerId(4)));
        assert!(s.map().fenced.iter().all(|f| f.free));
        assert_eq!(s.map().fenced.len(), 3);
    }

    #[test]
    fn a_server_declared_dead_rejoins_as_a_new_server() {
        let mut s = cluster(2);
        create(&mut s, "t", 2);
        down(&mut s, 1);
        let (id, log, recover) = enlist(&mut s, Some(1), 1000);
        assert_eq!(id, ServerId(3));
        assert!(recover.is_empty());
        assert_eq!(s.map().server(id).unwrap().state, ServerState::Up);
        assert_eq!(s.map().server(ServerId(1)).unwrap().state, ServerState::Down);
        assert_eq!(s.log_version(log), Some(1));
        // Still down for `recovered`, too.
        assert_eq!(apply(&mut s, ControlRequest::Recovered { server: ServerId(1), logs: vec![] }), ControlResponse::Ok);
        assert_eq!(s.map().server(ServerId(1)).unwrap().state, ServerState::Down);
        // The running recovery keeps its masters.
        assert!(recovery(&s, 1).partitions.iter().all(|p| p.master == ServerId(2)));
    }

    #[test]
    fn without_up_servers_partitions_are_planned_when_one_comes() {
        let mut s = cluster(1);
        create(&mut s, "t", 2);
        down(&mut s, 1);
        let r = recovery(&s, 1);
        assert!(r.partitions.is_empty());
        assert_eq!(s.map().tablets_of(ServerId(1)).count(), 2);
        let (id, _, _) = enlist(&mut s, None, 2000);
        let r = recovery(&s, 1);
        assert_eq!(r.partitions.len(), 1);
        assert_eq!(r.partitions[0].master, id);
        assert_eq!(r.partitions[0].tablets.len(), 2);
        finish(&mut s, 1);
        assert_eq!(s.map().tablets_of(id).count(), 2);

        // A server that only recovers its own logs is not up yet: it waits
        // until it reports `recovered`.
        let mut s = cluster(2);
        create(&mut s, "t", 4);
        let (_, _, earlier) = enlist(&mut s, Some(2), 1010);
        down(&mut s, 1);
        assert!(recovery(&s, 1).partitions.is_empty());
        apply(&mut s, ControlRequest::Recovered { server: ServerId(2), logs: earlier });
        let r = recovery(&s, 1);
        assert_eq!(r.partitions.len(), 1);
        assert_eq!(r.partitions[0].master, ServerId(2));
    }

    #[test]
    fn a_recovery_master_that_restarts_loses_its_partition() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        down(&mut s, 1);
        let r = recovery(&s, 1);
        let i = r.partitions.iter().position(|p| p.master == ServerId(2)).unwrap();
        enlist(&mut s, Some(2), 1010); // recovering: cannot take new work
        assert_eq!(recovery(&s, 1).partitions[i].master, ServerId(3));
    }

    #[test]
    fn a_dead_server_without_tablets_needs_no_recovery() {
        let mut s = cluster(2);
        let log = s.map().server(ServerId(1)).unwrap().log;
        down(&mut s, 1);
        assert!(s.map().recoveries.is_empty());
        assert_eq!(s.map().fenced, vec![FencedLog { log, version: 2, free: true }]);
        assert_eq!(s.log_version(log), None);
        // No recovery id was used.
        create(&mut s, "t", 1);
        down(&mut s, 2);
        assert_eq!(recovery(&s, 2).id, 1);
    }

    #[test]
    fn dropping_a_table_during_recovery_drops_its_pieces() {
        let mut s = cluster(3);
        create(&mut s, "a", 3);
        create(&mut s, "b", 3);
        down(&mut s, 1);
        apply(&mut s, ControlRequest::DropTable { name: "a".into() });
        let r = recovery(&s, 1);
        let b = s.map().table_by_name("b").unwrap().id;
        assert!(r.partitions.iter().flat_map(|p| &p.tablets).all(|t| t.table == b));
        finish(&mut s, 1);
        // Dropping the last table leaves empty partitions, still reported.
        down(&mut s, 2);
        apply(&mut s, ControlRequest::DropTable { name: "b".into() });
        assert!(recovery(&s, 2).partitions.iter().all(|p| p.tablets.is_empty()));
        finish(&mut s, 2);
    }

    #[test]
    fn enlist_at_a_taken_address_starts_the_old_servers_recovery() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        let (id, _, _) = enlist(&mut s, None, 1010);
        assert_eq!(s.map().server(ServerId(2)).unwrap().state, ServerState::Down);
        let r = recovery(&s, 2);
        assert_eq!(r.partitions.len(), 3);
        assert!(r.partitions.iter().any(|p| p.master == id));
    }

    #[test]
    fn recovery_splits_less_near_the_tablet_limit() {
        let mut s = cluster(3);
        let full = MAX_TABLETS / MAX_SPAN as usize - 1;
        for i in 0..full {
            create(&mut s, &format!("t{i}"), MAX_SPAN);
        }
        let before = s.map().tablets.len();
        let owned = s.map().tablets_of(ServerId(1)).count();
        down(&mut s, 1);
        // No room to split each of its tablets in two: they are dealt whole.
        assert!(MAX_TABLETS - before < owned);
        assert_eq!(s.map().tablets.len(), before);
        let r = recovery(&s, 1);
        let sizes: Vec<usize> = r.partitions.iter().map(|p| p.tablets.len()).collect();
        assert_eq!(sizes.len(), 2);
        assert!(sizes[0].abs_diff(sizes[1]) <= 1, "{sizes:?}");
    }

    #[test]
    fn recoveries_survive_encoding_and_old_files_decode() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        down(&mut s, 1);
        let bytes = s.encode();
        let (back, _) = ClusterState::decode(&bytes, None).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.next_recovery, 2);

        // A file from before crash recovery: no counter, no recoveries.
        let mut v: serde_json::Value = serde_json::from_slice(&cluster(2).encode()).unwrap();
        v.as_object_mut().unwrap().remove("next_recovery");
        v["map"].as_object_mut().unwrap().remove("recoveries");
        v["map"].as_object_mut().unwrap().remove("fenced");
        let (old, _) = ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap();
        assert_eq!(old.next_recovery, 1);
    }

    fn floors(server: ServerId, log: LogId, list: &[(u64, u64)]) -> ControlRequest {
        let floors = list.iter().map(|&(segment, epoch)| ReplicaFloor { log, segment: SegmentId(segment), epoch });
        ControlRequest::RaiseReplicaFloors { server, floors: floors.collect() }
    }

    fn floors_of(state: &ClusterState, log: LogId) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = state.map().replica_floors_of(log).map(|(s, e)| (s.0, e)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn a_log_is_unreplicated_until_its_master_reports_its_head() {
        let mut s = cluster_unreported(3);
        let logs: Vec<LogId> = s.map().servers.iter().map(|x| x.log).collect();
        assert_eq!(s.map().unreplicated, logs, "every new log starts unreplicated");
        let a = s.map().servers[0].clone();
        assert!(!s.map().may_serve(a.log), "R = 2 here: no lease before the report");
        let before = s.map().version;
        let report = |server: ServerId, log: LogId| ControlRequest::HeadReplicated { server, log };
        assert_eq!(apply(&mut s, report(a.id, a.log)), ControlResponse::Ok);
        assert_eq!(s.map().version, before + 1);
        assert!(s.map().head_replicated(a.log) && s.map().may_serve(a.log));
        // Again: nothing changes. Another server's log, or an unknown
        // server: refused, nothing changes.
        assert_eq!(apply(&mut s, report(a.id, a.log)), ControlResponse::Ok);
        assert_eq!(error_code(apply(&mut s, report(a.id, logs[1]))), ControlErrorCode::InvalidRequest);
        assert_eq!(error_code(apply(&mut s, report(ServerId(99), a.log))), ControlErrorCode::NotFound);
        assert_eq!(s.map().version, before + 1);
        assert_eq!(s.map().unreplicated, logs[1..].to_vec());

        // A server that restarts before reporting: its old log waits in its
        // recover list, still unreplicated (a recovery that finds no
        // replica of it takes it for empty), until the restart recovery
        // is done; its new log starts unreplicated.
        let b = s.map().servers[1].clone();
        let (id, new_log, recover) = enlist(&mut s, Some(b.id.0), 1010);
        assert_eq!((id, recover.clone()), (b.id, vec![b.log]));
        assert!(s.map().unreplicated.contains(&b.log) && s.map().unreplicated.contains(&new_log));
        assert_eq!(apply(&mut s, ControlRequest::Recovered { server: b.id, logs: recover }), ControlResponse::Ok);
        assert!(!s.map().unreplicated.contains(&b.log), "a recovered log leaves the list");
        assert!(s.map().unreplicated.contains(&new_log));
    }

    #[test]
    fn raise_replica_floors_records_growing_floors_of_a_servers_current_log() {
        let mut s = cluster(3);
        let (a, b) = (s.map().servers[0].clone(), s.map().servers[1].clone());
        let before = s.map().version;
        assert_eq!(apply(&mut s, floors(a.id, a.log, &[(3, 2), (5, 3)])), ControlResponse::Ok);
        assert_eq!(s.map().version, before + 1, "one change for the whole request");
        assert_eq!(floors_of(&s, a.log), vec![(3, 2), (5, 3)]);
        // Idempotent: the same floors, lower ones and epoch 1 change nothing.
        assert_eq!(apply(&mut s, floors(a.id, a.log, &[(3, 2), (5, 3)])), ControlResponse::Ok);
        assert_eq!(apply(&mut s, floors(a.id, a.log, &[(3, 1), (5, 2), (7, 1)])), ControlResponse::Ok);
        assert_eq!(s.map().version, before + 1);
        assert_eq!(apply(&mut s, floors(a.id, a.log, &[(3, 4)])), ControlResponse::Ok);
        assert_eq!(floors_of(&s, a.log), vec![(3, 4), (5, 3)]);
        assert_eq!(apply(&mut s, floors(b.id, b.log, &[(3, 2)])), ControlResponse::Ok);
        assert_eq!(floors_of(&s, b.log), vec![(3, 2)]);

        // Refusals change nothing.
        let version = s.map().version;
        let refused = [
            (floors(ServerId(99), a.log, &[(1, 2)]), ControlErrorCode::NotFound),
            (floors(a.id, b.log, &[(1, 2)]), ControlErrorCode::InvalidRequest),
            (floors(a.id, a.log, &[(1, 2), (2, 0)]), ControlErrorCode::InvalidRequest),
            (
                floors(a.id, a.log, &(0..=MAX_FLOORS_PER_REQUEST as u64).map(|i| (i, 2)).collect::<Vec<_>>()),
                ControlErrorCode::InvalidRequest,
            ),
        ];
        for (req, code) in refused {
            assert_eq!(error_code(apply(&mut s, req)), code);
        }
        assert_eq!(s.map().version, version);
        assert_eq!(floors_of(&s, a.log), vec![(3, 4), (5, 3)]);

        // Saved with the rest of the state; files from before floors read.
        let (back, _) = ClusterState::decode(&s.encode(), None).unwrap();
        assert_eq!(back, s);
        let mut v: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        v["map"].as_object_mut().unwrap().remove("replica_floors");
        let (old, _) = ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap();
        assert!(old.map().replica_floors.is_empty());
        // A damaged file is refused: a floor of a log no longer read, or twice.
        let mut v: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        v["map"]["replica_floors"][0]["log"] = 999.into();
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).is_err());
        let mut v: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        let first = v["map"]["replica_floors"][0].clone();
        v["map"]["replica_floors"].as_array_mut().unwrap().push(first);
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).is_err());
    }

    #[test]
    fn replica_floors_live_as_long_as_their_log_is_read() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        let a = s.map().servers[0].clone();
        assert_eq!(apply(&mut s, floors(a.id, a.log, &[(4, 2)])), ControlResponse::Ok);
        // A restart: the old log is to be replayed, its floors stay; it is
        // no longer the server's log, so it takes no new floors.
        let (_, new_log, recover) = enlist(&mut s, Some(a.id.0), 1000);
        assert_eq!(recover, vec![a.log]);
        assert_eq!(floors_of(&s, a.log), vec![(4, 2)]);
        assert_eq!(error_code(apply(&mut s, floors(a.id, a.log, &[(4, 3)]))), ControlErrorCode::InvalidRequest);
        assert_eq!(apply(&mut s, floors(a.id, new_log, &[(1, 2)])), ControlResponse::Ok);
        // Replayed: the old log's floors go, the new log's stay.
        apply(&mut s, ControlRequest::Recovered { server: a.id, logs: vec![a.log] });
        assert_eq!(floors_of(&s, a.log), vec![]);
        assert_eq!(floors_of(&s, new_log), vec![(1, 2)]);

        // Declared dead: its log is fenced and its floors kept for the
        // recovery; it may raise none any more; freed with the recovery.
        down(&mut s, a.id.0);
        assert_eq!(floors_of(&s, new_log), vec![(1, 2)]);
        assert_eq!(error_code(apply(&mut s, floors(a.id, new_log, &[(2, 2)]))), ControlErrorCode::InvalidRequest);
        finish(&mut s, a.id.0);
        assert!(s.map().replica_floors.is_empty());
    }

    #[test]
    fn raise_head_floor_only_raises_is_saved_and_is_dropped_with_its_log() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        let (a, b) = (s.map().servers[0].clone(), s.map().servers[1].clone());
        let head = |server: ServerId, log: LogId, segment: u64| ControlRequest::RaiseHeadFloor {
            server,
            log,
            segment: SegmentId(segment),
        };
        assert_eq!(s.map().head_floor_of(a.log), SegmentId(0), "no floor before the first report");
        let before = s.map().version;
        assert_eq!(apply(&mut s, head(a.id, a.log, 5)), ControlResponse::Ok);
        assert_eq!(s.map().version, before + 1);
        assert_eq!(s.map().head_floor_of(a.log), SegmentId(5));
        // Never lowered: the same or a lower floor is answered Ok and
        // changes nothing.
        assert_eq!(apply(&mut s, head(a.id, a.log, 5)), ControlResponse::Ok);
        assert_eq!(apply(&mut s, head(a.id, a.log, 3)), ControlResponse::Ok);
        assert_eq!((s.map().version, s.map().head_floor_of(a.log)), (before + 1, SegmentId(5)));
        assert_eq!(apply(&mut s, head(a.id, a.log, 9)), ControlResponse::Ok);
        assert_eq!(apply(&mut s, head(b.id, b.log, 2)), ControlResponse::Ok);
        assert_eq!((s.map().head_floor_of(a.log), s.map().head_floor_of(b.log)), (SegmentId(9), SegmentId(2)));
        assert_eq!(s.map().head_floors.len(), 2, "one entry per log");

        // Refusals change nothing.
        let version = s.map().version;
        for (req, code) in [
            (head(ServerId(99), a.log, 10), ControlErrorCode::NotFound),
            (head(a.id, b.log, 10), ControlErrorCode::InvalidRequest),
            (head(a.id, a.log, 0), ControlErrorCode::InvalidRequest),
        ] {
            assert_eq!(error_code(apply(&mut s, req)), code);
        }
        assert_eq!((s.map().version, s.map().head_floor_of(a.log)), (version, SegmentId(9)));

        // Saved with the rest of the state; files from before head floors
        // read; a damaged file (a floor of a log no longer read, a log
        // twice, segment 0) refused.
        let (back, _) = ClusterState::decode(&s.encode(), None).unwrap();
        assert_eq!(back, s);
        let good: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        let mut v = good.clone();
        v["map"].as_object_mut().unwrap().remove("head_floors");
        let (old, _) = ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap();
        assert!(old.map().head_floors.is_empty());
        let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            edit(&mut v);
            assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).is_err(), "{v}");
        };
        refused(&|v| v["map"]["head_floors"][0]["log"] = 999.into());
        refused(&|v| v["map"]["head_floors"][0]["segment"] = 0.into());
        refused(&|v| {
            let first = v["map"]["head_floors"][0].clone();
            v["map"]["head_floors"].as_array_mut().unwrap().push(first);
        });

        // A restart: the old log keeps its floor for the restart recovery
        // and takes no new one; recovered, its floor goes.
        let (_, new_log, recover) = enlist(&mut s, Some(b.id.0), 1000);
        assert_eq!(recover, vec![b.log]);
        assert_eq!(s.map().head_floor_of(b.log), SegmentId(2));
        assert_eq!(error_code(apply(&mut s, head(b.id, b.log, 4))), ControlErrorCode::InvalidRequest);
        assert_eq!(apply(&mut s, head(b.id, new_log, 1)), ControlResponse::Ok);
        apply(&mut s, ControlRequest::Recovered { server: b.id, logs: vec![b.log] });
        assert_eq!((s.map().head_floor_of(b.log), s.map().head_floor_of(new_log)), (SegmentId(0), SegmentId(1)));

        // Declared dead: the floor stays for the crash recovery, no new
        // one is taken, and it goes when the log is recovered (freed).
        down(&mut s, a.id.0);
        assert_eq!(s.map().head_floor_of(a.log), SegmentId(9));
        assert_eq!(error_code(apply(&mut s, head(a.id, a.log, 12))), ControlErrorCode::InvalidRequest);
        finish(&mut s, a.id.0);
        assert_eq!(s.map().head_floor_of(a.log), SegmentId(0));
        assert_eq!(s.map().head_floors.len(), 1, "only the restarted server's new log");
    }

    #[test]
    fn check_refuses_damaged_recoveries() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        down(&mut s, 1);
        let good: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            edit(&mut v);
            ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap_err()
        };
        refused(&|v| v["next_recovery"] = 1.into());
        refused(&|v| {
            v["map"]["recoveries"][0]["partitions"][0]["tablets"].as_array_mut().unwrap().pop();
        });
        refused(&|v| v["map"]["recoveries"][0]["partitions"][0]["master"] = 1.into());
        refused(&|v| v["map"]["fenced"][0]["free"] = true.into());
        refused(&|v| v["map"]["recoveries"][0]["log_version"] = 7.into());
        refused(&|v| v["map"]["recoveries"][0]["dead"] = 2.into());
        refused(&|v| v["map"]["recoveries"][0]["partitions"] = serde_json::json!([]));
        let msg = refused(&|v| v["map"]["recoveries"][0]["partitions"][0]["done"] = true.into());
        assert!(msg.contains("not at its master"), "{msg}");
    }

    #[test]
    fn stats_show_recoveries_in_progress() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        down(&mut s, 1);
        let master = recovery(&s, 1).partitions[0].master;
        done(&mut s, 1, 0, master);
        let stats = s.stats();
        let r = &stats["recoveries"][0];
        assert_eq!(r["id"], 1);
        assert_eq!(r["dead"], 1);
        assert_eq!(r["started_unix_ms"], NOW);
        assert_eq!(r["partitions_done"], 1);
        assert_eq!(r["partitions"][0]["done"], true);
        assert_eq!(r["partitions"][1]["done"], false);
        assert_eq!(stats["fenced_logs"], 1);
    }

    /// Random sequences of events keep every invariant, and every dead
    /// server's tablets end up on live servers once the recoveries finish.
    #[test]
    fn random_failures_keep_the_invariants() {
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut recoveries = 0;
        for _ in 0..30 {
            let mut s = cluster(3);
            create(&mut s, "t", 8);
            let mut port = 3000;
            for step in 0..40 {
                let servers: Vec<ServerId> = s.map().servers.iter().map(|x| x.id).collect();
                let pick = servers[next(servers.len() as u64) as usize];
                match next(6) {
                    0 => {
                        down(&mut s, pick.0);
                    }
                    1 => {
                        port += 10;
                        enlist(&mut s, None, port);
                    }
                    2 => {
                        enlist(&mut s, Some(pick.0), 9000 + pick.0 as u16 * 10);
                    }
                    3 => {
                        let logs = s.recover_list(pick).to_vec();
                        apply(&mut s, ControlRequest::Recovered { server: pick, logs });
                    }
                    4 => {
                        create(&mut s, &format!("x{step}"), 1 + next(4) as u32);
                    }
                    _ => {
                        let map = s.map().clone();
                        let open: Vec<(u64, u32, ServerId)> = map
                            .recoveries
                            .iter()
                            .flat_map(|r| {
                                r.partitions
                                    .iter()
                                    .enumerate()
                                    .filter(|(_, p)| !p.done)
                                    .map(|(i, p)| (r.id, i as u32, p.master))
                            })
                            .collect();
                        if !open.is_empty() {
                            let (r, i, m) = open[next(open.len() as u64) as usize];
                            let resp = done(&mut s, r, i, m);
                            if map.server(m).unwrap().state == ServerState::Down {
                                assert_eq!(error_code(resp), ControlErrorCode::InvalidRequest);
                            } else {
                                assert_eq!(resp, ControlResponse::Ok);
                            }
                        }
                    }
                }
            }
            // Bring every server up, then finish all recoveries.
            for id in s.map().servers.iter().map(|x| x.id).collect::<Vec<_>>() {
                let logs = s.recover_list(id).to_vec();
                apply(&mut s, ControlRequest::Recovered { server: id, logs });
            }
            if s.map().servers.iter().all(|x| x.state != ServerState::Up) {
                enlist(&mut s, None, 8888);
            }
            for dead in s.map().recoveries.iter().map(|r| r.dead.0).collect::<Vec<_>>() {
                finish(&mut s, dead);
            }
            for t in &s.map().tablets {
                assert_ne!(s.map().server(t.master).unwrap().state, ServerState::Down, "{t:?}");
            }
            assert!(s.map().fenced.iter().all(|f| f.free));
            recoveries += s.next_recovery - 1;
        }
        assert!(recoveries >= 60, "only {recoveries} recoveries");
    }

    fn member_enlist(
        state: &mut ClusterState,
        previous: Option<u64>,
        port: u16,
        proven: Option<u64>,
    ) -> (ControlResponse, Option<Credential>) {
        let fresh = Credential::random();
        let before = state.clone();
        let (out, issued) = state.enlist_as(
            &enlist_req(previous, port),
            Enlister::Member(proven.map(ServerId)),
            Some(&fresh.digest_hex()),
            NOW,
        );
        state.check().unwrap();
        if !out.changed {
            assert_eq!(*state, before, "a refused enlistment changes nothing");
        }
        (out.response, issued.then_some(fresh))
    }

    fn enlisted_id(resp: &ControlResponse) -> ServerId {
        match resp {
            ControlResponse::Enlisted { server, .. } => *server,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn enlist_as_member_issues_a_credential_once_and_requires_it_to_enlist_again() {
        let mut s = ClusterState::new(None);
        let (resp, cred) = member_enlist(&mut s, None, 1000, None);
        let id = enlisted_id(&resp);
        let cred = cred.expect("a new server is issued a credential");
        assert_eq!(s.prove(id, &cred), Ok(Some(id)));
        assert!(s.prove(id, &Credential::random()).is_err());
        assert_eq!(s.prove(ServerId(99), &cred), Ok(None));

        // Under its id without having proved it: refused, nothing changes.
        let (resp, _) = member_enlist(&mut s, Some(id.0), 1000, None);
        assert_eq!(error_code(resp), ControlErrorCode::Unauthorized);
        let (resp, _) = member_enlist(&mut s, Some(id.0), 1000, Some(7));
        assert_eq!(error_code(resp), ControlErrorCode::Unauthorized);
        // Proved: the same id, no new credential.
        let (resp, again) = member_enlist(&mut s, Some(id.0), 1000, Some(id.0));
        assert_eq!(enlisted_id(&resp), id);
        assert!(again.is_none());
        assert_eq!(s.prove(id, &cred), Ok(Some(id)));
    }

    #[test]
    fn enlist_as_member_at_a_live_servers_address_is_refused() {
        let mut s = ClusterState::new(None);
        let (resp, _) = member_enlist(&mut s, None, 1000, None);
        let first = enlisted_id(&resp);
        // Its native, Redis or backup address.
        for port in [1000, 999, 998] {
            let (resp, _) = member_enlist(&mut s, None, port, None);
            assert_eq!(error_code(resp), ControlErrorCode::Unauthorized, "port {port}");
        }
        assert_eq!(s.map().server(first).unwrap().state, ServerState::Up);
        // Once it is declared dead, its address is free.
        down(&mut s, first.0);
        let (resp, _) = member_enlist(&mut s, None, 1000, None);
        assert_ne!(enlisted_id(&resp), first);
    }

    #[test]
    fn enlist_unchecked_keeps_taking_previous_at_its_word_and_issues_nothing() {
        let mut s = ClusterState::new(None);
        let (out, issued) = s.enlist_as(&enlist_req(None, 1000), Enlister::Unchecked, Some(&"0".repeat(64)), NOW);
        assert!(!issued);
        let id = enlisted_id(&out.response);
        let (out, _) = s.enlist_as(&enlist_req(Some(id.0), 1000), Enlister::Unchecked, None, NOW);
        assert_eq!(enlisted_id(&out.response), id);
        assert!(s.credentials.is_empty());
    }

    #[test]
    fn a_format_1_server_is_issued_a_credential_at_its_next_enlistment() {
        let mut old = cluster(2);
        old.format = 1;
        let (mut s, _) = ClusterState::decode(&old.encode(), None).unwrap();
        assert_eq!(s.format, STATE_FORMAT);
        let (resp, cred) = member_enlist(&mut s, Some(1), 1000, None);
        assert_eq!(enlisted_id(&resp), ServerId(1));
        let cred = cred.expect("issued");
        let bytes = s.encode();
        let (back, _) = ClusterState::decode(&bytes, None).unwrap();
        assert_eq!(back.prove(ServerId(1), &cred), Ok(Some(ServerId(1))));
        let (resp, _) = member_enlist(&mut s, Some(1), 1000, None);
        assert_eq!(error_code(resp), ControlErrorCode::Unauthorized);

        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["credentials"]["1"] = "xyz".into();
        assert!(ClusterState::decode(&serde_json::to_vec(&v).unwrap(), None).unwrap_err().contains("credential"));
    }

    #[test]
    fn a_draining_server_takes_no_moves_recoveries_or_new_tablets_and_leaves_the_set_when_dead() {
        let mut s = cluster(3);
        create(&mut s, "kv", 3);
        let before = s.map().version;
        assert!(s.set_draining(ServerId(3), true).changed);
        assert_eq!(s.map().version, before + 1);
        assert!(!s.set_draining(ServerId(3), true).changed, "already draining");
        s.check().unwrap();
        assert_eq!(s.stats()["servers"][2]["draining"], true);
        let bytes = s.encode();
        assert_eq!(ClusterState::decode(&bytes, None).unwrap().0.draining(), &BTreeSet::from([ServerId(3)]));

        let t = s.map().tablets_of(ServerId(1)).next().unwrap().clone();
        let refused = start_move(&mut s, "kv", t.start_hash, 3);
        assert!(matches!(&refused, ControlResponse::Error { message, .. } if message.contains("being drained")));
        let more = create(&mut s, "more", 6);
        assert!(s.map().tablets.iter().filter(|t| t.table == more.id).all(|t| t.master != ServerId(3)));
        assert!(down(&mut s, 1));
        assert!(recovery(&s, 1).partitions.iter().all(|p| p.master != ServerId(3)), "no partition on server 3");

        assert!(s.set_draining(ServerId(3), false).changed);
        assert!(s.set_draining(ServerId(3), true).changed);
        assert_eq!(error_code(s.set_draining(ServerId(9), true).response), ControlErrorCode::NotFound);
        assert!(down(&mut s, 3));
        assert!(s.draining().is_empty(), "a dead server is drained for good");
        assert_eq!(error_code(s.set_draining(ServerId(3), true).response), ControlErrorCode::InvalidRequest);
    }

    #[test]
    fn a_saved_rebalance_job_survives_encoding_and_is_cleared_only_by_its_own_id() {
        let mut s = cluster(3);
        let job = SavedJob { id: 4, table: None, drain: Some(ServerId(2)), gather_only: false, resumes: 0 };
        assert!(s.set_rebalance_job(Some(job.clone()), 0).changed);
        assert!(!s.set_rebalance_job(Some(job.clone()), 0).changed, "the same job again");
        let (back, _) = ClusterState::decode(&s.encode(), None).unwrap();
        assert_eq!(back.rebalance_job(), Some(&job));
        assert!(!s.set_rebalance_job(None, 3).changed, "another job's end leaves it");
        assert_eq!(s.rebalance_job(), Some(&job));
        assert!(s.set_rebalance_job(None, 4).changed);
        assert_eq!(s.rebalance_job(), None);
        let (back, _) = ClusterState::decode(&s.encode(), None).unwrap();
        assert_eq!(back.rebalance_job(), None);
        s.check().unwrap();
    }

    #[test]
    fn the_only_server_left_takes_recoveries_even_when_draining() {
        let mut s = cluster(2);
        create(&mut s, "kv", 2);
        assert!(s.set_draining(ServerId(2), true).changed);
        assert!(down(&mut s, 1));
        assert!(recovery(&s, 1).partitions.iter().all(|p| p.master == ServerId(2)));
        assert!(!recovery(&s, 1).partitions.is_empty());
    }

    fn start_move(state: &mut ClusterState, table: &str, start_hash: u64, to: u64) -> ControlResponse {
        apply(state, ControlRequest::StartMigration { table: table.into(), start_hash, to: ServerId(to), chunks: None })
    }

    /// The migration record `StartMigration` answered with.
    fn started(resp: ControlResponse) -> Migration {
        match resp {
            ControlResponse::Map { map } => map.migrations.last().cloned().expect("a migration record"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn start_migration_records_the_move_and_finish_switches_the_master_in_one_change() {
        let mut s = cluster(2);
        create(&mut s, "t", 2);
        let t = s.map.tablets[0].clone();
        let to = if t.master == ServerId(1) { 2 } else { 1 };
        let m = started(start_move(&mut s, "t", t.start_hash, to));
        assert_eq!((m.id, m.from, m.to, m.end_hash), (1, t.master, ServerId(to), t.end_hash));
        assert_eq!(s.map.tablets[0].master, t.master, "the source keeps the tablet while it moves");
        let before = s.map.version;
        // Only the source commits.
        let refused = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: ServerId(to), since: None });
        assert_eq!(error_code(refused), ControlErrorCode::InvalidRequest);
        let ok = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: t.master, since: None });
        assert_eq!(ok, ControlResponse::Ok);
        assert_eq!(s.map.version, before + 1, "one change");
        assert_eq!(s.map.tablets[0].master, ServerId(to));
        assert!(s.map.migrations.is_empty());
        // Repeated (the answer was lost): Ok, nothing changes.
        assert_eq!(
            apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: t.master, since: None }),
            ControlResponse::Ok
        );
        // A late abort of a committed move is refused: the source must not serve again.
        let late = apply(&mut s, ControlRequest::AbortMigration { id: m.id, server: t.master, reason: "late".into() });
        assert_eq!(error_code(late), ControlErrorCode::InvalidRequest);
    }

    /// `(start, end, from)` of `map.owned_pieces` for `server`'s `log`.
    fn pieces(s: &ClusterState, server: u64, log: LogId, start: u64, end: u64) -> Vec<(u64, u64, u64)> {
        let table = s.map.tables[0].id;
        s.map
            .owned_pieces(ServerId(server), log, table, start, end)
            .iter()
            .map(|p| (p.start_hash, p.end_hash, p.from.0))
            .collect()
    }

    #[test]
    fn a_committed_move_records_where_the_target_owns_the_tablet_from() {
        let mut s = cluster(2);
        create(&mut s, "t", 2);
        let t = s.map.tablets[0].clone();
        let (a, b) = (t.master, if t.master == ServerId(1) { ServerId(2) } else { ServerId(1) });
        let (log_a, log_b) = (s.map.server(a).unwrap().log, s.map.server(b).unwrap().log);
        let m = started(start_move(&mut s, "t", t.start_hash, b.0));
        let since = Some(SegmentId(40));
        assert_eq!(apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: a, since }), ControlResponse::Ok);
        s.check().unwrap();
        let (lo, hi) = (t.start_hash, t.end_hash);
        assert_eq!(pieces(&s, b.0, log_b, lo, hi), vec![(lo, hi, 40)], "the target's log counts from segment 40");
        // A log of b older than the one it gained the tablet in holds none of it.
        assert_eq!(pieces(&s, b.0, LogId(log_b.0 - 1), lo, hi), vec![]);
        assert_eq!(pieces(&s, a.0, log_a, lo, hi), vec![(lo, hi, 0)], "nothing recorded for the source");

        // Split at the target, move the upper half back: a's record covers
        // that half only, and b keeps the lower half's.
        let mid = lo + (hi - lo) / 2;
        apply(&mut s, ControlRequest::SplitTablet { table: "t".into(), at: mid });
        let m = started(start_move(&mut s, "t", mid, a.0));
        let since = Some(SegmentId(9));
        assert_eq!(apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: b, since }), ControlResponse::Ok);
        s.check().unwrap();
        assert_eq!(pieces(&s, a.0, log_a, lo, hi), vec![(lo, mid - 1, 0), (mid, hi, 9)]);
        assert_eq!(pieces(&s, b.0, log_b, lo, mid - 1), vec![(lo, mid - 1, 40)]);
        assert_eq!(s.map.owned_since.len(), 2);
        // Kept while a restart replays the log, freed with it, and with the table.
        let port = s.map.server(a).unwrap().native.port();
        let (_, new_log, recover) = enlist(&mut s, Some(a.0), port);
        assert_eq!(recover, vec![log_a]);
        assert_eq!(pieces(&s, a.0, log_a, mid, hi), vec![(mid, hi, 9)], "the restart replays log_a from segment 9");
        assert_eq!(pieces(&s, a.0, new_log, mid, hi), vec![(mid, hi, 0)], "what it replays into its new log counts");
        apply(&mut s, ControlRequest::Recovered { server: a, logs: vec![log_a] });
        assert_eq!(s.map.owned_since.len(), 1);
        apply(&mut s, ControlRequest::DropTable { name: "t".into() });
        assert!(s.map.owned_since.is_empty());
        s.check().unwrap();
    }

    /// Issue 20's bounded state: 100 cycles of a master declared dead, its
    /// recovery finished, and the server back (as a new one) at its
    /// address. The map's servers, fenced logs, tablets and `owned_since`,
    /// and the state's credentials and log versions, stop growing.
    #[test]
    fn state_stays_bounded_across_100_kill_and_recover_cycles() {
        let mut s = cluster(4);
        create(&mut s, "t", 4);
        create(&mut s, "u", 16);
        let mut sizes = Vec::new();
        for cycle in 0..100 {
            // A server back as a new one holds nothing until tablets move
            // to it: the victims are the servers that hold tablets.
            let up: Vec<ServerInfo> = s
                .map
                .servers
                .iter()
                .filter(|x| x.state == ServerState::Up && s.map.tablets_of(x.id).next().is_some())
                .cloned()
                .collect();
            let victim = &up[cycle % up.len()];
            assert!(down(&mut s, victim.id.0));
            let r = recovery(&s, victim.id.0);
            for (i, p) in r.partitions.iter().enumerate() {
                assert_eq!(done(&mut s, r.id, i as u32, p.master), ControlResponse::Ok);
            }
            assert!(s.map.recoveries.is_empty());
            let (id, _, recover) = enlist(&mut s, Some(victim.id.0), victim.native.port());
            assert!(id != victim.id && recover.is_empty(), "back as a new server");
            s.check().unwrap();
            sizes.push((s.map.servers.len(), s.map.fenced.len(), s.map.tablets.len(), s.encode().len()));
        }
        let last = *sizes.last().unwrap();
        eprintln!(
            "(servers, fenced logs, tablets, state bytes) after 10, 25, 50, 100 cycles: {:?} {:?} {:?} {last:?}",
            sizes[9], sizes[24], sizes[49]
        );
        assert_eq!(s.map.servers.iter().filter(|x| x.state == ServerState::Up).count(), 4);
        assert!(s.map.servers.len() <= 4 + MAX_DOWN_SERVERS, "{} servers", s.map.servers.len());
        assert!(s.credentials.len() <= s.map.servers.len());
        assert!(s.map.fenced.len() <= MAX_FREED_LOGS);
        assert!(s.log_versions.len() <= 4, "{} log versions", s.log_versions.len());
        let per_table = ((1u128 << 64) / MIN_RECOVERY_PIECE) as usize;
        for t in &s.map.tables {
            let n = s.map.tablets.iter().filter(|x| x.table == t.id).count();
            assert!(n <= per_table, "table {}: {n} tablets", t.name);
        }
        assert!(s.map.owned_since.len() <= s.map.tablets.len());
        // The last 20 cycles grew nothing.
        assert!(sizes[80..].iter().all(|x| (x.0, x.1, x.2) == (last.0, last.1, last.2)), "{:?}", &sizes[80..]);
    }

    #[test]
    fn a_finished_partition_records_where_its_master_owns_the_pieces_from() {
        let mut s = cluster(3);
        create(&mut s, "t", 3);
        assert!(s.declare_dead(ServerId(1), 0));
        let r = recovery(&s, 1);
        for (i, p) in r.partitions.iter().enumerate() {
            assert_eq!(done(&mut s, r.id, i as u32, p.master), ControlResponse::Ok);
            let log = s.map.server(p.master).unwrap().log;
            for t in &p.tablets {
                assert_eq!(pieces(&s, p.master.0, log, t.start_hash, t.end_hash), vec![(t.start_hash, t.end_hash, 7)]);
            }
        }
        s.check().unwrap();
        assert!(!s.map.owned_since.is_empty());
    }

    #[test]
    fn start_migration_refuses_bad_tables_tablets_servers_and_a_second_move() {
        let mut s = cluster(2);
        create(&mut s, "t", 2);
        let t = s.map.tablets[0].clone();
        let other = if t.master == ServerId(1) { 2 } else { 1 };
        assert_eq!(error_code(start_move(&mut s, "nope", t.start_hash, other)), ControlErrorCode::NotFound);
        assert_eq!(error_code(start_move(&mut s, "t", t.start_hash + 1, other)), ControlErrorCode::NotFound);
        assert_eq!(error_code(start_move(&mut s, "t", t.start_hash, 9)), ControlErrorCode::NotFound);
        assert_eq!(error_code(start_move(&mut s, "t", t.start_hash, t.master.0)), ControlErrorCode::InvalidRequest);
        let chunks =
            ControlRequest::CreateTable { name: "c".into(), span: 1, slots: false, chunks: true, stream: None };
        apply(&mut s, chunks);
        assert_eq!(error_code(start_move(&mut s, "c", 0, 1)), ControlErrorCode::InvalidRequest);
        started(start_move(&mut s, "t", t.start_hash, other));
        assert_eq!(error_code(start_move(&mut s, "t", t.start_hash, other)), ControlErrorCode::InvalidRequest);
    }

    #[test]
    fn abort_migration_leaves_the_tablet_and_a_later_finish_is_refused() {
        let mut s = cluster(2);
        create(&mut s, "t", 1);
        let t = s.map.tablets[0].clone();
        let to = if t.master == ServerId(1) { 2 } else { 1 };
        let m = started(start_move(&mut s, "t", 0, to));
        let stranger =
            apply(&mut s, ControlRequest::AbortMigration { id: m.id, server: ServerId(7), reason: "x".into() });
        assert_eq!(error_code(stranger), ControlErrorCode::InvalidRequest);
        let ok = apply(&mut s, ControlRequest::AbortMigration { id: m.id, server: ServerId(to), reason: "x".into() });
        assert_eq!(ok, ControlResponse::Ok);
        assert!(s.map.migrations.is_empty());
        assert_eq!(s.map.tablets[0].master, t.master);
        let late = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: t.master, since: None });
        assert_eq!(error_code(late), ControlErrorCode::InvalidRequest, "an aborted move never commits");
        // Repeated abort: Ok, unchanged.
        let again = apply(&mut s, ControlRequest::AbortMigration { id: m.id, server: t.master, reason: "x".into() });
        assert_eq!(again, ControlResponse::Ok);
        // The tablet may move again, under a new id.
        assert_eq!(started(start_move(&mut s, "t", 0, to)).id, m.id + 1);
    }

    #[test]
    fn a_dead_source_or_target_aborts_the_migration_in_the_declaring_change() {
        for dead_is_source in [true, false] {
            let mut s = cluster(3);
            create(&mut s, "t", 1);
            let t = s.map.tablets[0].clone();
            let to = (1..=3).find(|&i| ServerId(i) != t.master).unwrap();
            let m = started(start_move(&mut s, "t", 0, to));
            let dead = if dead_is_source { t.master.0 } else { to };
            assert!(down(&mut s, dead));
            assert!(s.map.migrations.is_empty(), "declared dead: the move is gone");
            let late = apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: t.master, since: None });
            assert_eq!(error_code(late), ControlErrorCode::InvalidRequest);
            if dead_is_source {
                assert!(s.map.recoveries.iter().any(|r| r.dead == t.master), "the tablet is recovered from the source");
            } else {
                assert!(s.map.tablets.iter().all(|x| x.master == t.master), "the tablet stays at the source");
            }
        }
    }

    #[test]
    fn a_migration_survives_a_save_and_reload_and_dropping_the_table_aborts_it() {
        let mut s = cluster(2);
        create(&mut s, "t", 1);
        let t = s.map.tablets[0].clone();
        let to = if t.master == ServerId(1) { 2 } else { 1 };
        started(start_move(&mut s, "t", 0, to));
        let (back, changed) = ClusterState::decode(&s.encode(), None).unwrap();
        assert!(!changed);
        assert_eq!(back.map.migrations, s.map.migrations, "a standby coordinator resumes it");
        apply(&mut s, ControlRequest::DropTable { name: "t".into() });
        assert!(s.map.migrations.is_empty());
    }

    fn tablets_of_table(state: &ClusterState, table: TableId) -> Vec<(u64, u64, ServerId)> {
        let mut v: Vec<_> = state
            .map
            .tablets
            .iter()
            .filter(|t| t.table == table)
            .map(|t| (t.start_hash, t.end_hash, t.master))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn split_tablet_cuts_one_tablet_in_two_on_its_master_and_merge_joins_them_back() {
        let mut s = cluster(2);
        let t = create(&mut s, "t", 1);
        let before = tablets_of_table(&s, t.id);
        let master = before[0].2;
        let at = 1u64 << 62;
        let split = apply(&mut s, ControlRequest::SplitTablet { table: "t".into(), at });
        assert!(matches!(split, ControlResponse::Map { .. }));
        assert_eq!(tablets_of_table(&s, t.id), vec![(0, at - 1, master), (at, u64::MAX, master)]);
        // Splitting at a tablet's first hash, or merging the first tablet, is refused.
        let again = apply(&mut s, ControlRequest::SplitTablet { table: "t".into(), at });
        assert_eq!(error_code(again), ControlErrorCode::InvalidRequest);
        let first = apply(&mut s, ControlRequest::MergeTablets { table: "t".into(), at: 0 });
        assert_eq!(error_code(first), ControlErrorCode::InvalidRequest);
        let nowhere = apply(&mut s, ControlRequest::MergeTablets { table: "t".into(), at: at + 1 });
        assert_eq!(error_code(nowhere), ControlErrorCode::NotFound);
        let merged = apply(&mut s, ControlRequest::MergeTablets { table: "t".into(), at });
        assert!(matches!(merged, ControlResponse::Map { .. }));
        assert_eq!(tablets_of_table(&s, t.id), before);
        let unknown = apply(&mut s, ControlRequest::SplitTablet { table: "nope".into(), at });
        assert_eq!(error_code(unknown), ControlErrorCode::NotFound);
    }

    #[test]
    fn merge_refuses_tablets_of_two_masters_or_moving_and_split_refuses_a_moving_tablet() {
        let mut s = cluster(2);
        let t = create(&mut s, "t", 2);
        let tablets = tablets_of_table(&s, t.id);
        assert_ne!(tablets[0].2, tablets[1].2, "two tablets on two servers");
        let two = apply(&mut s, ControlRequest::MergeTablets { table: "t".into(), at: tablets[1].0 });
        assert_eq!(error_code(two), ControlErrorCode::InvalidRequest);
        let other = tablets[1].2;
        started(start_move(&mut s, "t", 0, other.0));
        let moving = apply(&mut s, ControlRequest::SplitTablet { table: "t".into(), at: 5 });
        assert_eq!(error_code(moving), ControlErrorCode::InvalidRequest);
        let m = s.map.migrations[0].clone();
        apply(&mut s, ControlRequest::FinishMigration { id: m.id, server: m.from, since: Some(SegmentId(3)) });
        // Now one master: they merge.
        let merged = apply(&mut s, ControlRequest::MergeTablets { table: "t".into(), at: tablets[1].0 });
        assert!(matches!(merged, ControlResponse::Map { .. }));
        assert_eq!(tablets_of_table(&s, t.id), vec![(0, u64::MAX, other)]);
    }

    #[test]
    fn split_of_a_slot_hashed_table_keeps_whole_slots() {
        let mut s = cluster(1);
        let req = ControlRequest::CreateTable { name: "r".into(), span: 1, slots: true, chunks: false, stream: None };
        let ControlResponse::Table { table } = apply(&mut s, req) else { panic!() };
        let mid = tablets_of_table(&s, table.id)[0].0 + 1;
        let bad = apply(&mut s, ControlRequest::SplitTablet { table: "r".into(), at: mid });
        assert_eq!(error_code(bad), ControlErrorCode::InvalidRequest, "not a slot's first hash");
        assert_eq!(tablets_of_table(&s, table.id).len(), 1, "nothing changed");
    }
}
