//! Live tablet migration, a server's side (`docs/migration.md`).
//!
//! The coordinator records a move in `map.migrations`; the tablet's master
//! (the *source*) drives it:
//! 1. while it still serves the tablet, it streams the tablet's live object
//!    entries to the *target* over an authenticated connection to the
//!    target's replication port (`wire::Mode::Migrate`), keeping the key
//!    and version of each one sent. The target replays them into its own
//!    log (so they are replicated to its backups like any write);
//! 2. it *freezes* the tablet: from then on its front ends answer every
//!    request for the tablet's keys that may write with the retryable
//!    status they give during a recovery ([`crate::cluster::Route::Moving`]);
//!    requests routed as reads only ([`ClusterNode::route_read`]) are
//!    still served. The freeze waits for the requests already past routing
//!    to finish (`Migrations::gate`), so no write lands after the last pass
//!    read it;
//! 3. frozen, it sends the *delta*: the target's safe version raised to
//!    the source's, the objects whose version differs from the one sent
//!    (or that are new), and the keys sent that are gone (the target
//!    removes them, with tombstones). The target answers the last frame
//!    only once all of it is durable. Writes pause only for the delta;
//! 4. it stops serving reads of the tablet too (waiting for those routed),
//!    then asks the coordinator to commit (`FinishMigration`): one state
//!    change makes the target the master and drops the record.
//!
//! A freeze is lifted only by a map in which its migration is gone: then
//! the tablet is either the target's (the source forgets its copy, without
//! tombstones) or still the source's (aborted: it serves it again). A move
//! that fails (the target is unreachable or refuses, or either server is
//! declared dead) is aborted at the coordinator, which never commits an
//! aborted move.
//!
//! A chunk id range (`map.chunk_migrations`, `docs/chunks.md`) moves the
//! same way, over the same connection kind and frames, with its own BEGIN,
//! GONE and ABORT: the source walks the range's live chunks
//! (`Store::chunk_range_entries`) and keeps each id's version, freezes the
//! range, sends the chunks whose version changed and the ids gone, and
//! commits with the same `FinishMigration`; the target installs them with
//! `Replay::for_chunk_migration` and removes the gone ones (chunk
//! tombstones). After the commit the source forgets the chunks
//! (`Store::forget_chunk_range`) and the target grants no lock on them for
//! one longest lease (`LockTable::hold_off`).
//!
//! Who may call what: front ends take [`ClusterNode::serving`] around
//! their routing decision and store operation; the map watcher calls
//! [`Migrations::on_map`]; the backup port hands `Mode::Migrate`
//! connections to [`TargetHandler`].

use crate::cluster::ClusterNode;
use parking_lot::{Mutex, RwLock};
use shoal_cluster::map::{ChunkMigration, Migration};
use shoal_cluster::{ClusterMap, ControlError, ControlErrorCode, ControlRequest, ControlResponse, ServerId};
use shoal_common::{key_hash, ChunkId, KeyHash, SegmentId, TableId, Version};
use shoal_engine::format::{self, Entry};
use shoal_engine::{EnumCursor, RejectRules, Replay, Store};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{info, warn};

/// Bytes of entries the source gathers before it sends a batch.
const BATCH_BYTES: usize = 1 << 20;
/// Objects per enumeration step at the source (a step holds the store's
/// epoch; a few more may come with a bucket).
const STEP_OBJECTS: usize = 16;
/// Largest frame body the target accepts: a batch is about
/// [`BATCH_BYTES`] plus the objects of one enumeration step, each at most
/// a key and a value of the largest sizes.
pub const MAX_FRAME: usize = 64 << 20;
/// How long the target waits for its map to show a migration the source
/// names (the source saw it first).
const MAP_PATIENCE: Duration = Duration::from_secs(5);
/// How long one step of the copy (a frame and its answer) may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between attempts to reach the coordinator about a move's outcome.
const RESOLVE_PAUSE: Duration = Duration::from_millis(200);
/// How long the source keeps asking to commit before it tries to abort.
const COMMIT_PATIENCE: Duration = Duration::from_secs(10);

/// Frame kinds of the migration protocol (`docs/wire-format.md`,
/// "Tablet migration"). Requests from the source:
const BEGIN: u8 = 1;
const ENTRIES: u8 = 2;
const DONE: u8 = 3;
const ABORT: u8 = 4;
/// The delta begins: the source's safe version, 8 bytes.
const DELTA: u8 = 5;
/// Keys the target must remove: each a length (u32) and its bytes.
const GONE: u8 = 6;
/// A chunk id range's move begins (body: id, table, node, first and last
/// local id, each u64) or is given up (same body).
const CHUNK_BEGIN: u8 = 7;
const CHUNK_ABORT: u8 = 9;
/// Chunk ids the target must remove: each a u64.
const CHUNK_GONE: u8 = 8;
/// Chunks of a range per walk step at the source.
const STEP_CHUNKS: usize = 256;
/// Answers from the target:
const OK: u8 = 0x80;
const ERR: u8 = 0x81;
/// BEGIN's body: migration id, table, first hash, last hash, safe version.
const BEGIN_LEN: usize = 40;

/// A tablet this server, as a source, does not serve while it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Freeze {
    id: u64,
    table: TableId,
    start: u64,
    end: u64,
    /// Reads refused too (the last step, before the commit); until then
    /// requests that only read are served.
    reads: bool,
}

/// A chunk id range this server, as a source, does not serve while it
/// moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ChunkFreeze {
    id: u64,
    table: TableId,
    node: u16,
    lo: u64,
    hi: u64,
    /// Reads refused too (the last step, before the commit).
    reads: bool,
}

/// This server's migrations, as source and as target.
#[derive(Default)]
pub struct Migrations {
    /// Chunk id ranges frozen here (see [`Freeze`]).
    frozen_chunks: RwLock<Vec<ChunkFreeze>>,
    /// The server's chunk lock table, told of ranges gained here.
    locks: OnceLock<Arc<crate::chunklocks::LockTable>>,
    /// Chunks sent as a source, received and removed (by a GONE) as a target.
    pub chunks_sent: AtomicU64,
    pub chunks_received: AtomicU64,
    pub chunks_removed: AtomicU64,
    /// The node and its store, set once the server's context exists.
    attached: OnceLock<(Weak<ClusterNode>, Arc<Store>)>,
    frozen: RwLock<Vec<Freeze>>,
    /// Taken for reading (recursively, so never a deadlock) by every front
    /// end from its routing decision to the end of its store operation;
    /// a freeze takes it for writing, so it waits for those in flight.
    gate: RwLock<()>,
    /// Migrations this server has driven or drives now, by id: a map
    /// that still shows a finished one (it was received before the
    /// outcome) must not start it again.
    driving: Mutex<HashSet<u64>>,
    /// Statistics.
    pub objects_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub objects_received: AtomicU64,
    /// Keys removed here, as targets, by a delta's GONE.
    pub objects_removed: AtomicU64,
    pub committed: AtomicU64,
    pub aborted: AtomicU64,
    /// Milliseconds tablets were frozen for writes here, as sources.
    pub frozen_ms: AtomicU64,
}

impl Migrations {
    /// Gives the migration machinery its node and store (once).
    pub fn attach(&self, node: &Arc<ClusterNode>, store: Arc<Store>) {
        let _ = self.attached.set((Arc::downgrade(node), store));
    }

    /// Gives the migration machinery the server's chunk lock table (once).
    pub fn attach_locks(&self, locks: Arc<crate::chunklocks::LockTable>) {
        let _ = self.locks.set(locks);
    }

    /// Whether chunk `id` of `table` is in a range frozen here, for a
    /// request that only reads (`read_only`) or any.
    pub fn is_chunk_frozen(&self, table: TableId, id: ChunkId, read_only: bool) -> bool {
        let frozen = self.frozen_chunks.read();
        !frozen.is_empty()
            && frozen.iter().any(|f| {
                f.table == table
                    && f.node == id.node()
                    && f.lo <= id.local()
                    && id.local() <= f.hi
                    && (f.reads || !read_only)
            })
    }

    /// Freezes `m`'s range for writes (`reads`: for reads too) and waits
    /// for the requests past routing.
    fn freeze_chunks(&self, m: &ChunkMigration, reads: bool) {
        let _all = self.gate.write();
        let mut frozen = self.frozen_chunks.write();
        match frozen.iter_mut().find(|f| f.id == m.id) {
            Some(f) => f.reads |= reads,
            None => frozen.push(ChunkFreeze { id: m.id, table: m.table, node: m.node, lo: m.lo, hi: m.hi, reads }),
        }
    }

    fn attached(&self) -> Option<(Arc<ClusterNode>, Arc<Store>)> {
        let (node, store) = self.attached.get()?;
        Some((node.upgrade()?, store.clone()))
    }

    /// Whether `(table, hash)` is in a tablet frozen here, for a request
    /// that only reads (`read_only`) or any.
    pub fn is_frozen(&self, table: TableId, hash: KeyHash, read_only: bool) -> bool {
        let frozen = self.frozen.read();
        !frozen.is_empty()
            && frozen
                .iter()
                .any(|f| f.table == table && f.start <= hash.0 && hash.0 <= f.end && (f.reads || !read_only))
    }

    /// See [`Migrations::gate`]'s field comment.
    pub fn serving(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.gate.read_recursive()
    }

    /// Freezes `m`'s tablet for writes and waits for the requests past
    /// routing.
    fn freeze(&self, m: &Migration) {
        let _all = self.gate.write();
        let mut frozen = self.frozen.write();
        if !frozen.iter().any(|f| f.id == m.id) {
            frozen.push(Freeze { id: m.id, table: m.table, start: m.start_hash, end: m.end_hash, reads: false });
        }
    }

    /// Freezes `m`'s tablet for reads too and waits for the requests past
    /// routing: after this, nothing of the tablet is served here.
    fn freeze_reads(&self, m: &Migration) {
        let _all = self.gate.write();
        for f in self.frozen.write().iter_mut().filter(|f| f.id == m.id) {
            f.reads = true;
        }
    }

    /// Acts on a map just installed: starts driving the moves this server
    /// is the source of, and lifts the freezes whose move is over
    /// (forgetting the tablet's objects when it went to the target).
    pub fn on_map(&self, node: &Arc<ClusterNode>, map: &ClusterMap) {
        let Some((_, store)) = self.attached() else { return };
        let over: Vec<Freeze> = {
            let frozen = self.frozen.read();
            frozen.iter().filter(|f| !map.migrations.iter().any(|m| m.id == f.id)).copied().collect()
        };
        for f in over {
            let moved = map
                .tablet(f.table, KeyHash(f.start))
                .is_some_and(|t| t.master != node.id && t.start_hash == f.start && t.end_hash == f.end);
            self.frozen.write().retain(|x| x.id != f.id);
            if moved {
                let store = store.clone();
                tokio::task::spawn_blocking(move || match store.forget_range(f.table, f.start, f.end) {
                    Ok(n) => info!("migration {}: forgot the {n} objects of the tablet that moved away", f.id),
                    Err(e) => warn!("migration {}: cannot forget the moved tablet's objects: {e}", f.id),
                });
            } else {
                info!("migration {}: aborted; serving table {} from {:#018x} again", f.id, f.table.0, f.start);
            }
        }
        for m in map.migrations.iter().filter(|m| m.from == node.id) {
            if !self.driving.lock().insert(m.id) {
                continue;
            }
            let (node, store, m) = (node.clone(), store.clone(), m.clone());
            tokio::spawn(async move { drive(&node, &store, &m).await });
        }
        self.on_map_chunks(node, &store, map);
    }

    /// [`Migrations::on_map`] for chunk id ranges.
    fn on_map_chunks(&self, node: &Arc<ClusterNode>, store: &Arc<Store>, map: &ClusterMap) {
        let over: Vec<ChunkFreeze> = {
            let frozen = self.frozen_chunks.read();
            frozen.iter().filter(|f| !map.chunk_migrations.iter().any(|m| m.id == f.id)).copied().collect()
        };
        for f in over {
            let moved = map.chunk_owner(f.table, ChunkId::new(f.node, f.lo)).is_some_and(|r| r.master != node.id);
            self.frozen_chunks.write().retain(|x| x.id != f.id);
            if moved {
                let store = store.clone();
                tokio::task::spawn_blocking(move || match store.forget_chunk_range(f.table, f.node, f.lo, f.hi) {
                    Ok(n) => info!("migration {}: forgot the {n} chunks of the id range that moved away", f.id),
                    Err(e) => warn!("migration {}: cannot forget the moved chunks: {e}", f.id),
                });
            } else {
                info!(
                    "migration {}: aborted; serving chunk ids {}:{}..={} of table {} again",
                    f.id, f.node, f.lo, f.hi, f.table.0
                );
            }
        }
        for m in map.chunk_migrations.iter().filter(|m| m.from == node.id) {
            if !self.driving.lock().insert(m.id) {
                continue;
            }
            let (node, store, m) = (node.clone(), store.clone(), m.clone());
            tokio::spawn(async move { drive_chunks(&node, &store, &m).await });
        }
    }
}

/// What a finished copy moved.
#[derive(Default)]
struct Copied {
    /// Objects and entry bytes of the first pass (the tablet served).
    objects: u64,
    bytes: u64,
    /// Objects and entry bytes sent again in the delta, and keys removed.
    again: u64,
    again_bytes: u64,
    gone: u64,
    /// How long the tablet was frozen for writes before the copy was
    /// durable at the target.
    frozen: Duration,
    /// The first segment of the target's log holding the copy.
    since: SegmentId,
}

/// The source's whole part in migration `m`: freeze, copy, commit (or
/// abort). Returns once the coordinator has decided the outcome (or the
/// server is dead or stopping).
async fn drive(node: &Arc<ClusterNode>, store: &Arc<Store>, m: &Migration) {
    let started = Instant::now();
    if !node.map().migrations.iter().any(|x| x.id == m.id) {
        return;
    }
    info!(
        "migration {}: moving table {} [{:#018x}, {:#018x}] to server {}; copying while serving it",
        m.id, m.table.0, m.start_hash, m.end_hash, m.to
    );
    match copy(node, store, m).await {
        Ok(c) => {
            let secs = started.elapsed().as_secs_f64();
            info!(
                "migration {}: {} objects, {} bytes copied to server {} in {:.3} s ({:.1} MB/s), then frozen for \
                 {} ms: {} objects ({} bytes) again, {} removed; committing",
                m.id,
                c.objects,
                c.bytes,
                m.to,
                secs,
                (c.bytes + c.again_bytes) as f64 / 1e6 / secs.max(1e-9),
                c.frozen.as_millis(),
                c.again,
                c.again_bytes,
                c.gone,
            );
            // No read may be served here once the target may serve.
            commit(node, m.id, &c, started, || node.migrations.freeze_reads(m)).await;
        }
        Err(why) => {
            let mut body = Vec::with_capacity(BEGIN_LEN);
            encode_begin(&mut body, m, Version(0));
            abort(node, m.id, m.to, &why, ABORT, &body).await;
        }
    }
}

/// The end of a copied move `id`: reads frozen too (`freeze_reads`), then
/// the commit asked for until the coordinator decides.
async fn commit(node: &Arc<ClusterNode>, id: u64, c: &Copied, started: Instant, freeze_reads: impl FnOnce()) {
    node.migrations.frozen_ms.fetch_add(c.frozen.as_millis() as u64, Ordering::Relaxed);
    freeze_reads();
    if resolve(node, id, Some(c.since), "").await {
        node.migrations.committed.fetch_add(1, Ordering::Relaxed);
        info!("migration {id}: committed after {} ms", started.elapsed().as_millis());
    } else {
        node.migrations.aborted.fetch_add(1, Ordering::Relaxed);
    }
}

/// The end of a move `id` whose copy failed (`why`): the target told to
/// drop its copy (an ABORT frame of `kind` with the BEGIN's `body`), and
/// the abort asked for until the coordinator decides.
async fn abort(node: &Arc<ClusterNode>, id: u64, to: ServerId, why: &str, kind: u8, body: &[u8]) {
    warn!("migration {id}: {why}; aborting");
    tell_target_abort(node, id, to, kind, body).await;
    resolve(node, id, None, why).await;
    node.migrations.aborted.fetch_add(1, Ordering::Relaxed);
}

/// Asks the coordinator to commit (`since`: where the copy begins in the
/// target's log) or abort (`None`) `m` until it has decided, and returns
/// whether the move committed. A commit that the coordinator cannot be
/// reached for within [`COMMIT_PATIENCE`] turns into an abort, which it
/// refuses if the commit got through after all.
async fn resolve(node: &Arc<ClusterNode>, id: u64, since: Option<SegmentId>, why: &str) -> bool {
    let mut client = node.control_client();
    let deadline = Instant::now() + COMMIT_PATIENCE;
    let mut commit = since.is_some();
    loop {
        if node.is_dead() {
            return false;
        }
        let req = match commit {
            true => ControlRequest::FinishMigration { id, server: node.id, since },
            false => ControlRequest::AbortMigration {
                id,
                server: node.id,
                reason: if why.is_empty() { "the commit could not be sent".into() } else { why.into() },
            },
        };
        match client.call(&req).await {
            Ok(ControlResponse::Ok) => return commit,
            Ok(ControlResponse::Error { code: ControlErrorCode::InvalidRequest, message })
            | Err(ControlError::Refused { code: ControlErrorCode::InvalidRequest, message }) => {
                // A commit refused: the move was aborted (a server was
                // declared dead). An abort refused: it committed.
                warn!("migration {id}: the coordinator says: {message}");
                return !commit;
            }
            Ok(other) => warn!("migration {id}: unexpected answer {other:?}"),
            Err(e) => warn!("migration {id}: cannot reach the coordinator ({e}); retrying"),
        }
        if commit && Instant::now() >= deadline {
            commit = false;
        }
        tokio::time::sleep(RESOLVE_PAUSE).await;
    }
}

/// Best effort: tells the target `to` of migration `id` to drop what it
/// received (an ABORT frame of `kind`, with the BEGIN's `body`).
async fn tell_target_abort(node: &Arc<ClusterNode>, id: u64, to: ServerId, kind: u8, body: &[u8]) {
    let Some(addr) = node.map().server(to).map(|s| s.backup) else { return };
    let abort = async {
        let mut s = shoal_replication::dial::connect_migration(addr, node.id).await.map_err(|e| e.to_string())?;
        call(&mut s, kind, body).await.map(|_| ())
    };
    if let Ok(Err(e)) | Err(e) =
        tokio::time::timeout(Duration::from_secs(2), abort).await.map_err(|_| "timed out".to_string())
    {
        warn!("migration {id}: could not tell server {to} to drop its copy: {e}");
    }
}

fn encode_begin(out: &mut Vec<u8>, m: &Migration, safe: Version) {
    out.extend_from_slice(&m.id.to_le_bytes());
    out.extend_from_slice(&m.table.0.to_le_bytes());
    out.extend_from_slice(&m.start_hash.to_le_bytes());
    out.extend_from_slice(&m.end_hash.to_le_bytes());
    out.extend_from_slice(&safe.0.to_le_bytes());
}

/// Streams `m`'s tablet to the target, then freezes it and sends what
/// changed meanwhile; `Ok` once the target holds all of it durably (the
/// tablet frozen here for writes).
async fn copy(node: &Arc<ClusterNode>, store: &Arc<Store>, m: &Migration) -> Result<Copied, String> {
    let mut body = Vec::with_capacity(BATCH_BYTES + (2 << 20));
    encode_begin(&mut body, m, store.safe_version());
    let (mut s, since) = begin(node, m.to, BEGIN, &body).await?;
    let mut copied = Copied { since, ..Copied::default() };

    // 1. Every live object as it is now, the tablet served meanwhile. A
    // key's version grows at every write (and a key removed and written
    // again starts above its old one), so (key, version) names the
    // contents sent.
    let mut sent: HashMap<Vec<u8>, Version> = HashMap::new();
    let (n, bytes) = send_tablet(node, store, m, &mut s, &mut body, |key, version| {
        sent.insert(key.to_vec(), version);
        true
    })
    .await?;
    (copied.objects, copied.bytes) = (n, bytes);

    // 2. Frozen: no write of the tablet lands here from now on. A map
    // without the move may have been installed (and its freezes lifted)
    // just before: then it is over already.
    node.migrations.freeze(m);
    let frozen = Instant::now();
    if !node.map().migrations.iter().any(|x| x.id == m.id) {
        node.migrations.frozen.write().retain(|f| f.id != m.id);
        return Err("the coordinator dropped the migration".into());
    }

    // 3. The delta: no version is handed out for the tablet from here on.
    call(&mut s, DELTA, &store.safe_version().0.to_le_bytes()).await?;
    let (n, bytes) =
        send_tablet(node, store, m, &mut s, &mut body, |key, version| sent.remove(key) != Some(version)).await?;
    (copied.again, copied.again_bytes) = (n, bytes);
    body.clear();
    for key in sent.keys() {
        body.extend_from_slice(&(key.len() as u32).to_le_bytes());
        body.extend_from_slice(key);
        copied.gone += 1;
        if body.len() >= BATCH_BYTES {
            call(&mut s, GONE, &body).await?;
            body.clear();
        }
    }
    if !body.is_empty() {
        call(&mut s, GONE, &body).await?;
    }
    call(&mut s, DONE, &[]).await?;
    copied.frozen = frozen.elapsed();
    Ok(copied)
}

/// Connects to `to`'s replication port as a migration's source and sends
/// a BEGIN frame (`kind`, `body`); returns the connection and the first
/// segment of the target's log that will hold the copy (BEGIN's answer).
async fn begin(
    node: &Arc<ClusterNode>,
    to: ServerId,
    kind: u8,
    body: &[u8],
) -> Result<(shoal_cluster::tls::InternalStream, SegmentId), String> {
    let addr = node.map().server(to).map(|s| s.backup).ok_or_else(|| format!("no server {to} in the map"))?;
    let mut s = shoal_replication::dial::connect_migration(addr, node.id)
        .await
        .map_err(|e| format!("cannot reach server {to}: {e}"))?;
    let begun = call(&mut s, kind, body).await?;
    let since = <[u8; 8]>::try_from(begun.as_slice())
        .map(|b| SegmentId(u64::from_le_bytes(b)))
        .map_err(|_| format!("the target answered BEGIN with {} bytes, not a segment id", begun.len()))?;
    Ok((s, since))
}

/// Sends the entries of `m`'s tablet that `want(key, version)` picks, in
/// batches; returns how many objects and bytes went.
async fn send_tablet<S: AsyncRead + AsyncWrite + Unpin>(
    node: &Arc<ClusterNode>,
    store: &Arc<Store>,
    m: &Migration,
    s: &mut S,
    body: &mut Vec<u8>,
    mut want: impl FnMut(&[u8], Version) -> bool,
) -> Result<(u64, u64), String> {
    let mut cursor = Some(EnumCursor(m.start_hash));
    let moving = |map: &ClusterMap| map.migrations.iter().any(|x| x.id == m.id);
    send_batches(node, s, body, &node.migrations.objects_sent, moving, |body| {
        let Some(c) = cursor else { return Ok((0, true)) };
        let mut n = 0;
        cursor = store
            .enumerate_versioned_entries_range(m.table, c, m.end_hash, STEP_OBJECTS, |e, key, version| {
                if want(key, version) {
                    body.extend_from_slice(e);
                    n += 1;
                }
            })
            .map_err(|e| format!("cannot read the tablet: {e}"))?;
        Ok((n, cursor.is_none()))
    })
    .await
}

/// Sends ENTRIES batches of about [`BATCH_BYTES`] that `fill` makes, one
/// walk step at a time (each call appends a step's entries to the body and
/// says how many, and whether the walk is over); between batches, checks
/// that the move is still `moving` in this server's map. Counts the
/// entries sent in `sent`; returns how many entries and bytes went.
async fn send_batches<S: AsyncRead + AsyncWrite + Unpin>(
    node: &Arc<ClusterNode>,
    s: &mut S,
    body: &mut Vec<u8>,
    sent: &AtomicU64,
    moving: impl Fn(&ClusterMap) -> bool,
    mut fill: impl FnMut(&mut Vec<u8>) -> Result<(u64, bool), String>,
) -> Result<(u64, u64), String> {
    let (mut entries, mut bytes) = (0, 0);
    loop {
        body.clear();
        let (mut n, mut done) = (0u64, false);
        while !done && body.len() < BATCH_BYTES {
            let (k, over) = fill(body)?;
            (n, done) = (n + k, over);
        }
        if !body.is_empty() {
            call(s, ENTRIES, body).await?;
            entries += n;
            bytes += body.len() as u64;
            sent.fetch_add(n, Ordering::Relaxed);
            node.migrations.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
        }
        if done {
            return Ok((entries, bytes));
        }
        if !moving(&node.map()) {
            return Err("the coordinator dropped the migration".into());
        }
    }
}

/// The source's whole part in chunk migration `m`, as [`drive`] for a
/// tablet: copy while serving, freeze, delta, commit (or abort).
async fn drive_chunks(node: &Arc<ClusterNode>, store: &Arc<Store>, m: &ChunkMigration) {
    let started = Instant::now();
    if !node.map().chunk_migrations.iter().any(|x| x.id == m.id) {
        return;
    }
    info!(
        "migration {}: moving chunk ids {}:{}..={} of table {} to server {}; copying while serving them",
        m.id, m.node, m.lo, m.hi, m.table.0, m.to
    );
    match copy_chunks(node, store, m).await {
        Ok(c) => {
            info!(
                "migration {}: {} chunks ({} bytes) copied to server {} in {:.3} s, then frozen for {} ms: {} \
                 chunks again, {} removed; committing",
                m.id,
                c.objects,
                c.bytes,
                m.to,
                started.elapsed().as_secs_f64(),
                c.frozen.as_millis(),
                c.again,
                c.gone,
            );
            commit(node, m.id, &c, started, || node.migrations.freeze_chunks(m, true)).await;
        }
        Err(why) => abort(node, m.id, m.to, &why, CHUNK_ABORT, &encode_chunk_begin(m)).await,
    }
}

fn encode_chunk_begin(m: &ChunkMigration) -> Vec<u8> {
    [m.id, m.table.0, u64::from(m.node), m.lo, m.hi].iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Streams `m`'s chunks to the target, then freezes the range and sends
/// what changed meanwhile; `Ok` once the target holds all of it durably
/// (the range frozen here for writes). A chunk's version grows at every
/// put, so (id, version) names the contents sent; no chunk of the range
/// is created meanwhile (its server does not hold its whole own range).
async fn copy_chunks(node: &Arc<ClusterNode>, store: &Arc<Store>, m: &ChunkMigration) -> Result<Copied, String> {
    let (mut s, since) = begin(node, m.to, CHUNK_BEGIN, &encode_chunk_begin(m)).await?;
    let mut copied = Copied { since, ..Copied::default() };
    let mut body = Vec::with_capacity(BATCH_BYTES + (2 << 20));
    let mut sent: HashMap<ChunkId, Version> = HashMap::new();
    (copied.objects, copied.bytes) = send_chunks(node, store, m, &mut s, &mut body, |id, version| {
        sent.insert(id, version);
        true
    })
    .await?;
    node.migrations.freeze_chunks(m, false);
    let frozen = Instant::now();
    if !node.map().chunk_migrations.iter().any(|x| x.id == m.id) {
        node.migrations.frozen_chunks.write().retain(|f| f.id != m.id);
        return Err("the coordinator dropped the migration".into());
    }
    (copied.again, copied.again_bytes) =
        send_chunks(node, store, m, &mut s, &mut body, |id, version| sent.remove(&id) != Some(version)).await?;
    let gone: Vec<u64> = sent.keys().map(|id| id.0).collect();
    copied.gone = gone.len() as u64;
    for ids in gone.chunks(BATCH_BYTES / 8) {
        let body: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        call(&mut s, CHUNK_GONE, &body).await?;
    }
    call(&mut s, DONE, &[]).await?;
    copied.frozen = frozen.elapsed();
    Ok(copied)
}

/// Sends the chunks of `m`'s range that `want(id, version)` picks, in
/// batches; returns how many chunks and bytes went.
async fn send_chunks<S: AsyncRead + AsyncWrite + Unpin>(
    node: &Arc<ClusterNode>,
    store: &Arc<Store>,
    m: &ChunkMigration,
    s: &mut S,
    body: &mut Vec<u8>,
    mut want: impl FnMut(ChunkId, Version) -> bool,
) -> Result<(u64, u64), String> {
    let mut cursor = Some(m.lo);
    let moving = |map: &ClusterMap| map.chunk_migrations.iter().any(|x| x.id == m.id);
    send_batches(node, s, body, &node.migrations.chunks_sent, moving, |body| {
        let Some(from) = cursor else { return Ok((0, true)) };
        let mut n = 0;
        cursor = store
            .chunk_range_entries(m.table, m.node, from, m.hi, STEP_CHUNKS, |e, id, version| {
                if want(id, version) {
                    body.extend_from_slice(e);
                    n += 1;
                }
            })
            .map_err(|e| format!("cannot read the chunks: {e}"))?;
        Ok((n, cursor.is_none()))
    })
    .await
}

/// Sends one frame and waits for its answer: `Ok` with the answer's body,
/// or the target's reason.
async fn call<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, kind: u8, body: &[u8]) -> Result<Vec<u8>, String> {
    let step = async {
        write_frame(s, kind, body).await.map_err(|e| format!("cannot send to the target: {e}"))?;
        let (kind, body) = read_frame(s).await.map_err(|e| format!("no answer from the target: {e}"))?;
        match kind {
            OK => Ok(body),
            ERR => Err(format!("the target refused: {}", String::from_utf8_lossy(&body))),
            k => Err(format!("the target answered with frame kind {k}")),
        }
    };
    tokio::time::timeout(STEP_TIMEOUT, step).await.map_err(|_| "the target did not answer in time".to_string())?
}

/// A frame: body length (u32 LE, kind included), kind (u8), body.
async fn write_frame<S: AsyncWrite + Unpin>(s: &mut S, kind: u8, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len() + 1).map_err(|_| std::io::Error::other("frame too large"))?;
    s.write_all(&len.to_le_bytes()).await?;
    s.write_all(&[kind]).await?;
    s.write_all(body).await?;
    s.flush().await
}

/// Reads one frame, refusing bodies over [`MAX_FRAME`] before reading them.
async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<(u8, Vec<u8>)> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME + 1 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {len} bytes")));
    }
    let mut kind = [0u8; 1];
    s.read_exact(&mut kind).await?;
    let mut body = vec![0u8; len - 1];
    s.read_exact(&mut body).await?;
    Ok((kind[0], body))
}

/// Takes the backup port's `Mode::Migrate` connections: this server as a
/// migration's target.
pub struct TargetHandler(pub Arc<Migrations>);

impl shoal_replication::backup::PeerHandler for TargetHandler {
    fn serve(
        &self,
        server: Option<ServerId>,
        addr: std::net::SocketAddr,
        mut stream: shoal_cluster::tls::InternalStream,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let migrations = self.0.clone();
        Box::pin(async move {
            let Some(from) = server else {
                warn!("migration: a source at {addr} named no server id; closing");
                return;
            };
            let mut target = Target { migrations, from, begun: None, chunks: None, replay: None };
            loop {
                let (kind, body) = match read_frame(&mut stream).await {
                    Ok(f) => f,
                    Err(_) => return,
                };
                let (answer, close) = match target.step(kind, body).await {
                    Ok(body) => ((OK, body), false),
                    Err(why) => {
                        warn!("migration: refusing server {from} at {addr}: {why}");
                        ((ERR, why.into_bytes()), true)
                    }
                };
                if write_frame(&mut stream, answer.0, &answer.1).await.is_err() || close {
                    return;
                }
            }
        })
    }
}

/// One source connection's state at the target.
struct Target {
    migrations: Arc<Migrations>,
    from: ServerId,
    /// The migration BEGIN named, once checked against the map.
    begun: Option<(Migration, Version)>,
    /// The chunk migration CHUNK_BEGIN named, once checked against the map.
    chunks: Option<ChunkMigration>,
    replay: Option<Replay>,
}

impl Target {
    /// Acts on one frame from the source; returns the body of the OK
    /// answer (BEGIN's: the first segment of this server's log that holds
    /// the copy, 8 bytes; the others': empty).
    async fn step(&mut self, kind: u8, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let (node, store) = self.migrations.attached().ok_or("this server is not serving yet")?;
        if matches!(kind, CHUNK_BEGIN | CHUNK_ABORT | CHUNK_GONE) || (self.chunks.is_some() && kind != BEGIN) {
            return self.step_chunks(&node, &store, kind, body).await;
        }
        match kind {
            BEGIN | ABORT => {
                if body.len() != BEGIN_LEN {
                    return Err(format!("a BEGIN or ABORT body is {BEGIN_LEN} bytes, not {}", body.len()));
                }
                let u = |i: usize| u64::from_le_bytes(body[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                let (id, table, start, end, safe) = (u(0), TableId(u(1)), u(2), u(3), Version(u(4)));
                let Some(m) = self.expect(&node, id, table, start, end, kind == BEGIN).await? else {
                    // An ABORT of a move already gone: the objects stay
                    // until the next BEGIN of the range (this server may
                    // be recovering that tablet now).
                    return Ok(Vec::new());
                };
                // Objects of the range held here are left over from an
                // earlier move that did not finish: not this server's
                // tablet, so forgotten (without tombstones) before the copy.
                let gone = tokio::task::spawn_blocking({
                    let store = store.clone();
                    move || store.forget_range(table, start, end)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                if gone > 0 {
                    info!("migration {id}: dropped {gone} objects left here by an unfinished move");
                }
                if kind == ABORT {
                    return Ok(Vec::new());
                }
                // Entries of the range already in this log (below the new
                // head) are from before: the coordinator records that the
                // tablet is this server's from that segment on, and its
                // recovery and restart skip the older ones.
                let since = store.roll_head().map_err(|e| format!("cannot start a head segment: {e}"))?;
                info!(
                    "migration {id}: receiving table {} [{start:#018x}, {end:#018x}] from server {} from segment {}",
                    table.0, self.from, since.0
                );
                store.create_table(table);
                self.begun = Some((m, safe));
                self.replay = Some(Replay::default());
                Ok(since.0.to_le_bytes().to_vec())
            }
            ENTRIES => {
                let (m, safe) = self.begun.clone().ok_or("ENTRIES before BEGIN")?;
                if !node.map().migrations.iter().any(|x| x.id == m.id) {
                    return Err(format!("migration {} is no longer in progress", m.id));
                }
                check_entries(&body, &m)?;
                let n = count_entries(&body);
                let mut replay = self.replay.take().ok_or("ENTRIES before BEGIN")?;
                let (replay, result) = tokio::task::spawn_blocking(move || {
                    let r = store.replay_entries(&mut replay, &body, safe);
                    (replay, r)
                })
                .await
                .map_err(|e| e.to_string())?;
                self.replay = Some(replay);
                result.map_err(|e| format!("cannot install the objects: {e}"))?;
                self.migrations.objects_received.fetch_add(n, Ordering::Relaxed);
                Ok(Vec::new())
            }
            DELTA => {
                let (m, _) = self.begun.clone().ok_or("DELTA before BEGIN")?;
                let safe = <[u8; 8]>::try_from(body.as_slice())
                    .map(|b| Version(u64::from_le_bytes(b)))
                    .map_err(|_| format!("a DELTA body is 8 bytes, not {}", body.len()))?;
                // Later entries raise the safe version to the source's now.
                self.begun = Some((m, safe));
                Ok(Vec::new())
            }
            GONE => {
                let (m, _) = self.begun.clone().ok_or("GONE before BEGIN")?;
                if !node.map().migrations.iter().any(|x| x.id == m.id) {
                    return Err(format!("migration {} is no longer in progress", m.id));
                }
                let keys = gone_keys(&body, &m)?;
                let removed = tokio::task::spawn_blocking(move || -> Result<u64, String> {
                    let mut n = 0;
                    for key in keys {
                        let gone = store.remove(m.table, &key, RejectRules::default());
                        n += u64::from(gone.map_err(|e| format!("cannot remove a key: {e}"))?.is_some());
                    }
                    Ok(n)
                })
                .await
                .map_err(|e| e.to_string())??;
                self.migrations.objects_removed.fetch_add(removed, Ordering::Relaxed);
                Ok(Vec::new())
            }
            DONE => {
                let (m, _) = self.begun.clone().ok_or("DONE before BEGIN")?;
                let replay = self.replay.take().ok_or("DONE before BEGIN")?;
                let report = tokio::task::spawn_blocking(move || store.finish_replay(replay))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("cannot install the objects: {e}"))?;
                // Durable on this server's backups before the source may commit.
                if !node.wait_durable(node.position()).await {
                    return Err("the copy could not be made durable here".into());
                }
                info!(
                    "migration {}: holding {} objects of table {} from server {} durably",
                    m.id, report.objects_replayed, m.table.0, self.from
                );
                self.begun = None;
                Ok(Vec::new())
            }
            k => Err(format!("unknown frame kind {k}")),
        }
    }

    /// [`Target::step`] of a chunk id range's move: CHUNK_BEGIN, ENTRIES of
    /// chunk entries, CHUNK_GONE, DONE, CHUNK_ABORT.
    async fn step_chunks(
        &mut self,
        node: &Arc<ClusterNode>,
        store: &Arc<Store>,
        kind: u8,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        let store = store.clone();
        match kind {
            CHUNK_BEGIN | CHUNK_ABORT => {
                if body.len() != BEGIN_LEN {
                    return Err(format!("a chunk BEGIN or ABORT body is {BEGIN_LEN} bytes, not {}", body.len()));
                }
                let u = |i: usize| u64::from_le_bytes(body[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                let (id, table) = (u(0), TableId(u(1)));
                let node_id = u16::try_from(u(2)).map_err(|_| format!("node id {} is not 16 bits", u(2)))?;
                let (lo, hi) = (u(3), u(4));
                let Some(m) = self.expect_chunks(node, id, table, node_id, lo, hi, kind == CHUNK_BEGIN).await? else {
                    return Ok(Vec::new());
                };
                // Chunks of the range held here are left over from a move
                // that did not finish: not this server's, so forgotten.
                let gone = tokio::task::spawn_blocking({
                    let store = store.clone();
                    move || store.forget_chunk_range(table, node_id, lo, hi)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                if gone > 0 {
                    info!("migration {id}: dropped {gone} chunks left here by an unfinished move");
                }
                if kind == CHUNK_ABORT {
                    return Ok(Vec::new());
                }
                let since = store.roll_head().map_err(|e| format!("cannot start a head segment: {e}"))?;
                info!(
                    "migration {id}: receiving chunk ids {node_id}:{lo}..={hi} of table {} from server {} from \
                     segment {}",
                    table.0, self.from, since.0
                );
                store.create_table(table);
                self.chunks = Some(m);
                self.replay = Some(Replay::for_chunk_migration());
                Ok(since.0.to_le_bytes().to_vec())
            }
            ENTRIES => {
                let m = self.chunks.clone().ok_or("ENTRIES before BEGIN")?;
                if !node.map().chunk_migrations.iter().any(|x| x.id == m.id) {
                    return Err(format!("migration {} is no longer in progress", m.id));
                }
                let n = check_chunk_entries(&body, &m)?;
                let mut replay = self.replay.take().ok_or("ENTRIES before BEGIN")?;
                let (replay, result) = tokio::task::spawn_blocking(move || {
                    let r = store.replay_entries(&mut replay, &body, Version(0));
                    (replay, r)
                })
                .await
                .map_err(|e| e.to_string())?;
                self.replay = Some(replay);
                result.map_err(|e| match e {
                    shoal_engine::ReplayError::Store(shoal_engine::StoreError::ObjectExists { .. }) => {
                        "a chunk id of the range is a chunk of another table here".to_string()
                    }
                    e => format!("cannot install the chunks: {e}"),
                })?;
                self.migrations.chunks_received.fetch_add(n, Ordering::Relaxed);
                Ok(Vec::new())
            }
            CHUNK_GONE => {
                let m = self.chunks.clone().ok_or("GONE before BEGIN")?;
                if !node.map().chunk_migrations.iter().any(|x| x.id == m.id) {
                    return Err(format!("migration {} is no longer in progress", m.id));
                }
                let ids = gone_chunk_ids(&body, &m)?;
                let removed = tokio::task::spawn_blocking(move || -> Result<u64, String> {
                    let mut n = 0;
                    for id in ids {
                        match store.remove_chunk(m.table, id) {
                            Ok(_) => n += 1,
                            Err(shoal_engine::StoreError::ObjectDoesntExist) => {}
                            Err(e) => return Err(format!("cannot remove a chunk: {e}")),
                        }
                    }
                    Ok(n)
                })
                .await
                .map_err(|e| e.to_string())??;
                self.migrations.chunks_removed.fetch_add(removed, Ordering::Relaxed);
                Ok(Vec::new())
            }
            DONE => {
                let m = self.chunks.clone().ok_or("DONE before BEGIN")?;
                let replay = self.replay.take().ok_or("DONE before BEGIN")?;
                let report = tokio::task::spawn_blocking(move || store.finish_replay(replay))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("cannot install the chunks: {e}"))?;
                if !node.wait_durable(node.position()).await {
                    return Err("the copy could not be made durable here".into());
                }
                // The source grants no more locks on them (frozen): their
                // leases run out within the longest lease from now.
                if let Some(locks) = self.migrations.locks.get() {
                    locks.hold_off(m.table, m.node, m.lo, m.hi, crate::chunklocks::Now::clock());
                }
                info!(
                    "migration {}: holding {} chunks of table {} from server {} durably",
                    m.id, report.chunks_replayed, m.table.0, self.from
                );
                self.chunks = None;
                Ok(Vec::new())
            }
            k => Err(format!("unknown frame kind {k} in a chunk migration")),
        }
    }

    /// The chunk migration `id` of the map, checked as [`Target::expect`]
    /// checks a tablet's.
    #[allow(clippy::too_many_arguments)]
    async fn expect_chunks(
        &self,
        node: &Arc<ClusterNode>,
        id: u64,
        table: TableId,
        chunk_node: u16,
        lo: u64,
        hi: u64,
        begin: bool,
    ) -> Result<Option<ChunkMigration>, String> {
        let me = node.id;
        self.expect_record(
            node,
            id,
            begin,
            "those chunk ids",
            |map| map.chunk_migrations.iter().find(|m| m.id == id).cloned(),
            |m| (m.from, m.to, m.table, m.node, m.lo, m.hi) == (self.from, me, table, chunk_node, lo, hi),
            |map| map.chunk_owner(table, ChunkId::new(chunk_node, lo)).is_some_and(|r| r.master == me),
        )
        .await
    }

    /// The migration `id` of the map, checked to be from this connection's
    /// source to this server over exactly this range; waits a little for a
    /// map that lags. For an ABORT, a migration that is gone is fine
    /// (`None`), but one that committed here is not.
    async fn expect(
        &self,
        node: &Arc<ClusterNode>,
        id: u64,
        table: TableId,
        start: u64,
        end: u64,
        begin: bool,
    ) -> Result<Option<Migration>, String> {
        let me = node.id;
        self.expect_record(
            node,
            id,
            begin,
            "that tablet",
            |map| map.migrations.iter().find(|m| m.id == id).cloned(),
            |m| (m.from, m.to, m.table, m.start_hash, m.end_hash) == (self.from, me, table, start, end),
            |map| map.tablet(table, KeyHash(start)).is_some_and(|t| t.master == me),
        )
        .await
    }

    /// The record of migration `id` in this server's map (`find`), which
    /// must `fit` (from this connection's source to this server, over
    /// exactly the range named: `what`); waits a little for a map that
    /// lags. Without a record, an ABORT (`begin` false) is fine (`None`)
    /// unless the range is `mine` now (the move committed here).
    #[allow(clippy::too_many_arguments)]
    async fn expect_record<R>(
        &self,
        node: &Arc<ClusterNode>,
        id: u64,
        begin: bool,
        what: &str,
        find: impl Fn(&ClusterMap) -> Option<R>,
        fits: impl Fn(&R) -> bool,
        mine: impl Fn(&ClusterMap) -> bool,
    ) -> Result<Option<R>, String> {
        let deadline = Instant::now() + MAP_PATIENCE;
        loop {
            let map = node.map();
            if let Some(m) = find(&map) {
                if !fits(&m) {
                    return Err(format!("migration {id} is not a move of {what} from server {} to here", self.from));
                }
                return Ok(Some(m));
            }
            if !begin {
                if mine(&map) {
                    return Err(format!("the move of {what} committed here already"));
                }
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Err(format!("no migration {id} in this server's map (version {})", map.version));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Checks that `body` is whole object entries, each with a valid CRC, of
/// `m`'s table and key-hash range: nothing else is installed.
fn check_entries(body: &[u8], m: &Migration) -> Result<(), String> {
    let mut pos = 0;
    while pos < body.len() {
        let (e, len) = format::decode(&body[pos..]).map_err(|e| format!("entry at byte {pos}: {e}"))?;
        match e {
            Entry::Object(o) => {
                let h = key_hash(o.table, o.key);
                if !m.contains(o.table, h) {
                    return Err(format!("entry at byte {pos} is outside the moving tablet"));
                }
            }
            _ => return Err(format!("entry at byte {pos} is not an object")),
        }
        pos += len;
    }
    Ok(())
}

/// Checks that `body` is whole chunk entries (type 8), each with a valid
/// CRC, of `m`'s table and id range; returns how many.
fn check_chunk_entries(body: &[u8], m: &ChunkMigration) -> Result<u64, String> {
    let (mut pos, mut n) = (0, 0);
    while pos < body.len() {
        let (e, len) = format::decode(&body[pos..]).map_err(|e| format!("entry at byte {pos}: {e}"))?;
        match e {
            Entry::Chunk(c) if m.contains(c.table, c.id) => {}
            Entry::Chunk(_) => return Err(format!("entry at byte {pos} is outside the moving chunk ids")),
            _ => return Err(format!("entry at byte {pos} is not a chunk")),
        }
        pos += len;
        n += 1;
    }
    Ok(n)
}

/// The ids of a chunk GONE body (u64 each), each checked to be in `m`'s range.
fn gone_chunk_ids(body: &[u8], m: &ChunkMigration) -> Result<Vec<ChunkId>, String> {
    if !body.len().is_multiple_of(8) {
        return Err(format!("a chunk GONE body is whole u64 ids, not {} bytes", body.len()));
    }
    let ids: Vec<ChunkId> =
        body.chunks_exact(8).map(|b| ChunkId(u64::from_le_bytes(b.try_into().expect("8 bytes")))).collect();
    match ids.iter().any(|id| !m.contains(m.table, *id)) {
        true => Err("a chunk GONE id is outside the moving chunk ids".into()),
        false => Ok(ids),
    }
}

/// The keys of a GONE body, each checked to be in `m`'s tablet.
fn gone_keys(body: &[u8], m: &Migration) -> Result<Vec<Vec<u8>>, String> {
    let mut keys = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(4).ok_or("a GONE key's length is cut short")?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (key, tail) = tail.split_at_checked(len).ok_or("a GONE key is cut short")?;
        if !m.contains(m.table, key_hash(m.table, key)) {
            return Err("a GONE key is outside the moving tablet".into());
        }
        keys.push(key.to_vec());
        rest = tail;
    }
    Ok(keys)
}

fn count_entries(body: &[u8]) -> u64 {
    let mut pos = 0;
    let mut n = 0;
    while let Ok((_, len)) = format::decode_trusted(&body[pos..]) {
        pos += len;
        n += 1;
        if pos >= body.len() {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moving(table: u64, start: u64, end: u64) -> Migration {
        Migration {
            id: 1,
            table: TableId(table),
            start_hash: start,
            end_hash: end,
            from: ServerId(1),
            to: ServerId(2),
            started_unix_ms: 0,
        }
    }

    #[test]
    fn check_entries_takes_objects_of_the_range_only() {
        let store =
            Store::new(shoal_engine::StoreConfig { cleaner_thread: false, ..shoal_engine::StoreConfig::default() })
                .unwrap();
        let t = TableId(3);
        store.create_table(t);
        for i in 0..200u32 {
            store.write(t, format!("k{i}").as_bytes(), b"v", shoal_engine::RejectRules::default()).unwrap();
        }
        let half = u64::MAX / 2;
        let mut low = Vec::new();
        store.enumerate_entries_range(t, EnumCursor(0), half, 1000, |e| low.extend_from_slice(e)).unwrap();
        let mut high = Vec::new();
        store.enumerate_entries_range(t, EnumCursor(half + 1), u64::MAX, 1000, |e| high.extend_from_slice(e)).unwrap();
        assert!(!low.is_empty() && !high.is_empty());
        check_entries(&low, &moving(3, 0, half)).unwrap();
        assert!(count_entries(&low) > 0);
        assert!(check_entries(&high, &moving(3, 0, half)).unwrap_err().contains("outside"));
        assert!(check_entries(&low, &moving(4, 0, u64::MAX)).unwrap_err().contains("outside"));
        let mut torn = low.clone();
        torn.truncate(low.len() - 1);
        assert!(check_entries(&torn, &moving(3, 0, half)).is_err(), "a torn entry is refused");
        let mut flipped = low.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x55;
        assert!(check_entries(&flipped, &moving(3, 0, half)).is_err(), "a bad CRC is refused");
    }

    #[test]
    fn chunk_frames_take_chunks_and_ids_of_the_moving_range_only() {
        let m = ChunkMigration {
            id: 1,
            table: TableId(3),
            node: 2,
            lo: 10,
            hi: 19,
            from: ServerId(2),
            to: ServerId(1),
            started_unix_ms: 0,
        };
        let entry = |table, node, local| {
            let mut e = Vec::new();
            format::encode_chunk(&mut e, TableId(table), ChunkId::new(node, local), Version(1), b"payload");
            e
        };
        let body = [entry(3, 2, 10), entry(3, 2, 19)].concat();
        assert_eq!(check_chunk_entries(&body, &m), Ok(2));
        for (t, n, l) in [(3, 2, 9), (3, 2, 20), (3, 1, 15), (4, 2, 15)] {
            let bad = [entry(3, 2, 12), entry(t, n, l)].concat();
            assert!(check_chunk_entries(&bad, &m).unwrap_err().contains("outside"), "{t} {n} {l}");
        }
        let mut torn = body.clone();
        torn.pop();
        assert!(check_chunk_entries(&torn, &m).is_err(), "a torn entry is refused");
        let mut flipped = body.clone();
        flipped[5] ^= 0x40;
        assert!(check_chunk_entries(&flipped, &m).is_err(), "a bad CRC is refused");
        let mut object = Vec::new();
        format::encode_object(&mut object, TableId(3), Version(1), b"k", b"v");
        assert!(check_chunk_entries(&object, &m).unwrap_err().contains("not a chunk"));
        let ids = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let inside = ids(&[ChunkId::new(2, 10).0, ChunkId::new(2, 19).0]);
        assert_eq!(gone_chunk_ids(&inside, &m).unwrap(), vec![ChunkId::new(2, 10), ChunkId::new(2, 19)]);
        assert!(gone_chunk_ids(&ids(&[ChunkId::new(2, 20).0]), &m).is_err());
        assert!(gone_chunk_ids(&inside[..12], &m).is_err(), "ids are whole u64s");
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversized_lengths_are_refused_before_reading() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, ENTRIES, b"abc").await.unwrap();
        assert_eq!(read_frame(&mut b).await.unwrap(), (ENTRIES, b"abc".to_vec()));
        a.write_all(&((MAX_FRAME as u32) + 2).to_le_bytes()).await.unwrap();
        assert!(read_frame(&mut b).await.is_err());
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&0u32.to_le_bytes()).await.unwrap();
        assert!(read_frame(&mut b).await.is_err(), "a frame needs its kind byte");
    }
}
