//! The backup's table of replicas and its buffer pool: who holds what, the
//! admission rule, fencing, and the transitions OPEN, CLOSE, EPOCH,
//! flushed, FREE.
//!
//! Locking: a buffer's lock may be taken while the table's is held, never
//! the other way round. A replica in a buffer is identified by the buffer's
//! generation: a holder (a connection, a flush job, a reader) checks the
//! generation under the buffer's lock, so a buffer reset, freed or reused
//! meanwhile is noticed.

use super::buffers::{Buffer, Meta, MetaState};
use super::files::{self, FileHeader, ReadBufs, SegmentBytes};
use super::{BackupConfig, Counters};
use crate::restore::verify_replica;
use crate::wire::{self, KeyRange, PartInfo, ReplicaInfo, ReplicaState};
use parking_lot::Mutex;
use shoal_common::{LogId, SegmentId};
use shoal_engine::format::{self, Entry};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

type Key = (LogId, SegmentId);

/// Work for the flusher thread.
pub(crate) enum Job {
    /// Write the closed replica `key` (if its buffer is still at `gen`).
    Flush {
        key: Key,
        gen: u64,
    },
    Stop,
}

/// Where one replica lives. `epoch` is the replica's epoch, as its buffer's
/// metadata or its file's header records it.
#[derive(Clone)]
pub(crate) enum Replica {
    /// Being written (or found open at start).
    Open { buf: Arc<Buffer>, gen: u64, version: u64, epoch: u64 },
    /// Closed, in its buffer, waiting for the flusher.
    Closed { buf: Arc<Buffer>, gen: u64, version: u64, epoch: u64, len: u32, checksum: u32 },
    /// Closed and in its file.
    OnDisk { version: u64, epoch: u64, len: u32, checksum: u32, path: PathBuf },
}

impl Replica {
    fn epoch(&self) -> u64 {
        match self {
            Replica::Open { epoch, .. } | Replica::Closed { epoch, .. } | Replica::OnDisk { epoch, .. } => *epoch,
        }
    }

    /// The buffer generation of a replica in a buffer.
    fn gen(&self) -> Option<u64> {
        match self {
            Replica::Open { gen, .. } | Replica::Closed { gen, .. } => Some(*gen),
            Replica::OnDisk { .. } => None,
        }
    }

    fn set_epoch(&mut self, e: u64) {
        match self {
            Replica::Open { epoch, .. } | Replica::Closed { epoch, .. } | Replica::OnDisk { epoch, .. } => {
                *epoch = (*epoch).max(e)
            }
        }
    }
}

struct Table {
    /// Every buffer by index; `None` for a retired one.
    buffers: Vec<Option<Arc<Buffer>>>,
    free: Vec<usize>,
    replicas: BTreeMap<Key, Replica>,
    /// Highest log version seen per log (HELLO, buffers, files).
    fences: HashMap<LogId, Arc<AtomicU64>>,
    awaiting_flush: usize,
    next_gen: u64,
}

impl Table {
    fn gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }
}

/// Everything a connection, the flusher and `Backup` share.
pub(crate) struct Shared {
    pub config: BackupConfig,
    pub segments_dir: PathBuf,
    pub counters: Counters,
    table: Mutex<Table>,
    /// Aligned buffers that segment files are read into.
    read_bufs: Arc<ReadBufs>,
    jobs: Mutex<Sender<Job>>,
    /// Serializes the rewrites of files' header blocks (EPOCH on disk), so
    /// that two never read and write one header at once.
    epoch_io: Mutex<()>,
}

/// The answer to an OPEN.
pub(crate) enum Opened {
    Yes { buf: Arc<Buffer>, gen: u64 },
    Refused(String),
}

/// What checking a replica for a reader found.
enum Checked {
    Ok(ReadOut),
    Corrupt,
    /// Its buffer changed hands (flushed, reset, freed): look it up again.
    Moved,
}

/// One replica's entries of a partition, as a reader gets them.
pub(crate) struct PartOut {
    pub info: PartInfo,
    pub entries: Vec<u8>,
}

/// A replica's bytes as a reader gets them.
pub(crate) struct ReadOut {
    pub info: ReplicaInfo,
    pub bytes: ReplicaBytes,
}

/// A replica's bytes: copied out of its buffer, or its file as read (served
/// from the aligned read buffer, which goes back for reuse when this is
/// dropped). Derefs to the bytes.
pub(crate) enum ReplicaBytes {
    Copied(Vec<u8>),
    File(SegmentBytes),
}

impl Deref for ReplicaBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ReplicaBytes::Copied(v) => v,
            ReplicaBytes::File(f) => f,
        }
    }
}

impl Shared {
    /// Loads what `config.data_dir` holds (buffers and segment files) and
    /// queues closed buffers for the flusher.
    pub(crate) fn load(config: BackupConfig, jobs: Sender<Job>) -> io::Result<Arc<Shared>> {
        let base = config.data_dir.join("backup");
        let buffers_dir = base.join("buffers");
        let segments_dir = base.join("segments");
        std::fs::create_dir_all(&buffers_dir)?;
        std::fs::create_dir_all(&segments_dir)?;
        let capacity = config.segment_bytes as usize;

        let mut table = Table {
            buffers: Vec::new(),
            free: Vec::new(),
            replicas: BTreeMap::new(),
            fences: HashMap::new(),
            awaiting_flush: 0,
            next_gen: 0,
        };
        let mut found: BTreeMap<Key, Replica> = BTreeMap::new();
        let mut to_flush = Vec::new();
        let mut versions: HashMap<LogId, u64> = HashMap::new();

        for (h, path) in files::scan_dir(&segments_dir)? {
            let v = versions.entry(h.log).or_default();
            *v = (*v).max(h.log_version);
            found.insert(
                (h.log, h.segment),
                Replica::OnDisk { version: h.log_version, epoch: h.epoch, len: h.len, checksum: h.checksum, path },
            );
        }

        // Buffer files: the configured ones, plus any others holding replicas.
        let mut indices: Vec<usize> = (0..config.buffers).collect();
        for entry in std::fs::read_dir(&buffers_dir)? {
            let name = entry?.file_name();
            let idx = name.to_str().and_then(|n| n.strip_prefix("buf-")).and_then(|n| n.parse::<usize>().ok());
            match idx {
                Some(i) if i >= config.buffers => indices.push(i),
                Some(_) => {}
                None => tracing::warn!(file = ?name, "backup: ignoring an unknown file among buffers"),
            }
        }
        indices.sort_unstable();
        table.buffers.resize(indices.last().map_or(0, |i| i + 1), None);
        for idx in indices {
            let buf = Arc::new(Buffer::open(&buffers_dir, idx, capacity)?);
            let meta = buf.lock().meta;
            let Some(meta) = meta else {
                if idx < config.buffers {
                    table.buffers[idx] = Some(buf.clone());
                    table.free.push(idx);
                } else {
                    let _ = std::fs::remove_file(&buf.path);
                }
                continue;
            };
            let v = versions.entry(meta.log).or_default();
            *v = (*v).max(meta.log_version);
            table.buffers[idx] = Some(buf.clone());
            let gen = table.gen();
            buf.lock().gen = gen;
            let key = (meta.log, meta.segment);
            let (version, epoch) = (meta.log_version, meta.epoch);
            let replica = match meta.state {
                MetaState::Open => Replica::Open { buf: buf.clone(), gen, version, epoch },
                MetaState::Closed { len, checksum } => {
                    Replica::Closed { buf: buf.clone(), gen, version, epoch, len, checksum }
                }
            };
            // Two copies of one replica (a kill between a flush and the
            // release of its buffer, or an EPOCH meanwhile): the newer
            // version wins, then the higher epoch, then closed over open,
            // then the file over the buffer.
            let rank = |r: &Replica| match r {
                Replica::Open { version, epoch, .. } => (*version, *epoch, 0),
                Replica::Closed { version, epoch, .. } => (*version, *epoch, 1),
                Replica::OnDisk { version, epoch, .. } => (*version, *epoch, 2),
            };
            let keep_new = found.get(&key).is_none_or(|old| rank(&replica) > rank(old));
            let loser = if keep_new { found.insert(key, replica) } else { Some(replica) };
            match loser {
                Some(Replica::Open { buf, .. } | Replica::Closed { buf, .. }) => {
                    buf.lock().release(capacity)?;
                    if buf.idx < config.buffers {
                        table.free.push(buf.idx);
                    } else {
                        table.buffers[buf.idx] = None;
                        let _ = std::fs::remove_file(&buf.path);
                    }
                }
                Some(Replica::OnDisk { path, .. }) => {
                    let _ = std::fs::remove_file(path);
                }
                None => {}
            }
        }
        for (key, r) in &found {
            if let Replica::Closed { gen, .. } = r {
                table.awaiting_flush += 1;
                to_flush.push(Job::Flush { key: *key, gen: *gen });
            }
        }
        table.replicas = found;
        table.fences = versions.into_iter().map(|(log, v)| (log, Arc::new(AtomicU64::new(v)))).collect();
        for job in to_flush {
            let _ = jobs.send(job);
        }
        Ok(Arc::new(Shared {
            config,
            segments_dir,
            counters: Counters::default(),
            table: Mutex::new(table),
            read_bufs: ReadBufs::new(capacity),
            jobs: Mutex::new(jobs),
            epoch_io: Mutex::new(()),
        }))
    }

    /// Asks the flusher thread to stop after its current job.
    pub(crate) fn stop_flusher(&self) {
        let _ = self.jobs.lock().send(Job::Stop);
    }

    /// Registers a master's HELLO: refuses a log version below the highest
    /// seen for the log (fencing), else returns the log's fence, which the
    /// connection checks before every frame.
    pub(crate) fn hello(&self, log: LogId, version: u64) -> Result<Arc<AtomicU64>, String> {
        let mut t = self.table.lock();
        let fence = t.fences.entry(log).or_default().clone();
        let seen = fence.fetch_max(version, Ordering::AcqRel);
        if version < seen {
            return Err(format!("log {} version {version} is fenced: version {seen} was seen", log.0));
        }
        Ok(fence)
    }

    /// OPEN: a pre-zeroed buffer for `(log, segment)` of `size` bytes at
    /// `epoch`, or a refusal (no free buffer, or the flush backlog at its
    /// limit). A replica of that segment already held is dropped (an open
    /// one is restarted in its own buffer).
    pub(crate) fn open(
        &self,
        log: LogId,
        segment: SegmentId,
        version: u64,
        size: u32,
        epoch: u64,
    ) -> io::Result<Opened> {
        if size == 0 || size > self.config.segment_bytes {
            return Ok(Opened::Refused(format!(
                "segment size {size} not within 1..={} (this backup's buffers)",
                self.config.segment_bytes
            )));
        }
        let key = (log, segment);
        let meta = Meta { log, log_version: version, segment, size, state: MetaState::Open, epoch };
        let mut t = self.table.lock();
        // Restart an open replica in place (if its buffer is large enough;
        // nesting the buffer's lock inside the table's is the allowed order).
        if let Some(Replica::Open { buf, .. }) = t
            .replicas
            .get(&key)
            .filter(|r| matches!(r, Replica::Open { buf, .. } if buf.lock().capacity() >= size as usize))
        {
            let buf = buf.clone();
            let gen = t.gen();
            t.replicas.insert(key, Replica::Open { buf: buf.clone(), gen, version, epoch });
            drop(t);
            buf.lock().assign(meta, gen, self.config.sync_open)?;
            self.counters.segments_opened.fetch_add(1, Ordering::Relaxed);
            return Ok(Opened::Yes { buf, gen });
        }
        let closed_here = matches!(t.replicas.get(&key), Some(Replica::Closed { .. })) as usize;
        if t.free.is_empty() {
            self.counters.refusals.fetch_add(1, Ordering::Relaxed);
            return Ok(Opened::Refused("no free buffer".into()));
        }
        if t.awaiting_flush - closed_here >= self.config.flush_limit {
            self.counters.refusals.fetch_add(1, Ordering::Relaxed);
            return Ok(Opened::Refused(format!("{} closed buffers are waiting for the disk", t.awaiting_flush)));
        }
        let dropped = self.remove_locked(&mut t, key);
        let idx = t.free.pop().expect("checked above");
        let buf = t.buffers[idx].clone().expect("free buffers exist");
        let gen = t.gen();
        t.replicas.insert(key, Replica::Open { buf: buf.clone(), gen, version, epoch });
        drop(t);
        if let Some(old) = dropped {
            self.release(&old);
        }
        buf.lock().assign(meta, gen, self.config.sync_open)?;
        self.counters.segments_opened.fetch_add(1, Ordering::Relaxed);
        Ok(Opened::Yes { buf, gen })
    }

    /// CLOSE of the replica a connection holds at `gen`: records it closed
    /// at `len` and queues it for the disk. Fails if the replica was reset or
    /// freed meanwhile.
    pub(crate) fn close(
        &self,
        log: LogId,
        segment: SegmentId,
        buf: &Arc<Buffer>,
        gen: u64,
        len: u32,
        checksum: u32,
    ) -> Result<(), String> {
        {
            let mut g = buf.lock();
            if g.gen != gen {
                return Err(format!("replica of segment {} was reset or freed", segment.0));
            }
            g.close(len, checksum, self.config.sync_open).map_err(|e| format!("closing segment {}: {e}", segment.0))?;
        }
        let key = (log, segment);
        let mut t = self.table.lock();
        match t.replicas.get(&key) {
            Some(Replica::Open { gen: g, version, epoch, .. }) if *g == gen => {
                let (version, epoch) = (*version, *epoch);
                t.replicas.insert(key, Replica::Closed { buf: buf.clone(), gen, version, epoch, len, checksum });
                t.awaiting_flush += 1;
            }
            _ => return Err(format!("replica of segment {} was reset or freed", segment.0)),
        }
        drop(t);
        self.counters.segments_closed.fetch_add(1, Ordering::Relaxed);
        let _ = self.jobs.lock().send(Job::Flush { key, gen });
        Ok(())
    }

    /// FREE: drops the replica of `(log, segment)` if held.
    pub(crate) fn free(&self, log: LogId, segment: SegmentId) {
        let mut t = self.table.lock();
        let dropped = self.remove_locked(&mut t, (log, segment));
        drop(t);
        if let Some(buf) = dropped {
            self.release(&buf);
        }
    }

    /// FREE_LOG: drops every replica of `log`.
    pub(crate) fn free_log(&self, log: LogId) {
        let mut t = self.table.lock();
        let keys: Vec<Key> =
            t.replicas.range((log, SegmentId(0))..=(log, SegmentId(u64::MAX))).map(|(k, _)| *k).collect();
        let dropped: Vec<Arc<Buffer>> = keys.into_iter().filter_map(|k| self.remove_locked(&mut t, k)).collect();
        drop(t);
        for buf in dropped {
            self.release(&buf);
        }
    }

    /// Removes a replica from the table; a file is deleted at once (under
    /// the lock, so no flush of a newer replica can race it), a buffer is
    /// returned, to be released after the lock.
    fn remove_locked(&self, t: &mut Table, key: Key) -> Option<Arc<Buffer>> {
        let r = t.replicas.remove(&key)?;
        self.counters.segments_freed.fetch_add(1, Ordering::Relaxed);
        match r {
            Replica::Open { buf, .. } => Some(buf),
            Replica::Closed { buf, .. } => {
                t.awaiting_flush -= 1;
                Some(buf)
            }
            Replica::OnDisk { path, .. } => {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "backup: could not delete a freed segment");
                }
                None
            }
        }
    }

    /// Zeroes a buffer no replica refers to any more and makes it free.
    fn release(&self, buf: &Arc<Buffer>) {
        let capacity = self.config.segment_bytes as usize;
        if let Err(e) = buf.lock().release(capacity) {
            // Not reusable: leave it out of the pool.
            tracing::warn!(path = %buf.path.display(), error = %e, "backup: could not release a buffer");
            return;
        }
        let mut t = self.table.lock();
        if buf.idx < self.config.buffers {
            t.free.push(buf.idx);
        } else {
            t.buffers[buf.idx] = None;
            let _ = std::fs::remove_file(&buf.path);
        }
    }

    /// The flusher's step for one job: writes the replica's file, then
    /// makes the file the replica and frees the buffer. Returns false if the
    /// write failed (the job should be retried later).
    pub(crate) fn flush(&self, key: Key, gen: u64) -> bool {
        let (buf, version, mut epoch, len, checksum) = match self.table.lock().replicas.get(&key) {
            Some(Replica::Closed { buf, gen: g, version, epoch, len, checksum }) if *g == gen => {
                (buf.clone(), *version, *epoch, *len, *checksum)
            }
            _ => return true, // freed or reset meanwhile
        };
        let header = FileHeader { log: key.0, log_version: version, segment: key.1, len, checksum, epoch };
        let written = {
            let g = buf.lock();
            if g.gen != gen {
                return true;
            }
            files::write_segment(&self.segments_dir, &header, &g.data()[..len as usize])
        };
        let failed = |e: io::Error| {
            tracing::warn!(log = key.0 .0, segment = key.1 .0, error = %e, "backup: writing a closed segment failed");
            false
        };
        let path = match written {
            Ok(p) => p,
            Err(e) => return failed(e),
        };
        loop {
            let mut t = self.table.lock();
            match t.replicas.get(&key) {
                Some(Replica::Closed { gen: g, epoch: now, .. }) if *g == gen && *now > epoch => {
                    // An EPOCH came while the file was written: the file
                    // must say so too before it becomes the replica.
                    let now = *now;
                    drop(t);
                    if let Err(e) = files::raise_epoch(&path, now) {
                        let _ = std::fs::remove_file(&path);
                        return failed(e);
                    }
                    epoch = now;
                }
                Some(Replica::Closed { gen: g, .. }) if *g == gen => {
                    t.replicas.insert(key, Replica::OnDisk { version, epoch, len, checksum, path });
                    t.awaiting_flush -= 1;
                    drop(t);
                    self.release(&buf);
                    self.counters.segments_flushed.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                _ => {
                    // Dropped while we wrote: the file is no replica.
                    let _ = std::fs::remove_file(&path);
                    return true;
                }
            }
        }
    }

    /// EPOCH: raises the epoch of the replica of `(log, segment)` to
    /// `epoch` (never lowers it). Open: its buffer's metadata is rewritten
    /// (synced with `sync_open`); closed in a buffer: rewritten and synced;
    /// on disk: the file's header block rewritten and synced
    /// (`files::raise_epoch`). So a closed replica keeps its epoch through
    /// a restart of the backup. Errors: no such replica here, or the write
    /// failed. May block on the disk: connections call it off their thread
    /// unless the replica is one they are writing (open, in a buffer).
    pub(crate) fn raise_epoch(&self, log: LogId, segment: SegmentId, epoch: u64) -> Result<(), String> {
        let key = (log, segment);
        let missing = || format!("EPOCH for segment {}, of which this backup holds no replica", segment.0);
        let failed = |e: io::Error| format!("recording epoch {epoch} of segment {}: {e}", segment.0);
        // The replica may move meanwhile (flushed, reset): look again.
        for _ in 0..16 {
            let r = self.table.lock().replicas.get(&key).cloned().ok_or_else(missing)?;
            if r.epoch() >= epoch {
                return Ok(());
            }
            match &r {
                Replica::Open { buf, gen, .. } | Replica::Closed { buf, gen, .. } => {
                    let sync = self.config.sync_open || matches!(r, Replica::Closed { .. });
                    {
                        let mut g = buf.lock();
                        if g.gen != *gen {
                            continue;
                        }
                        g.raise_epoch(epoch, sync).map_err(failed)?;
                    }
                    // The table's lock only after the buffer's (the lock
                    // order). If a flush installed the file meanwhile, with
                    // the old epoch, the next round raises the file's.
                    let mut t = self.table.lock();
                    match t.replicas.get_mut(&key) {
                        Some(x @ (Replica::Open { .. } | Replica::Closed { .. })) if x.gen() == Some(*gen) => {
                            x.set_epoch(epoch);
                            return Ok(());
                        }
                        _ => continue,
                    }
                }
                Replica::OnDisk { path, .. } => {
                    let _serial = self.epoch_io.lock();
                    match files::raise_epoch(path, epoch) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(failed(e)),
                    }
                    let mut t = self.table.lock();
                    match t.replicas.get_mut(&key) {
                        Some(Replica::OnDisk { path: p, epoch: e, .. }) if p == path => {
                            *e = (*e).max(epoch);
                            return Ok(());
                        }
                        _ => continue,
                    }
                }
            }
        }
        Err(format!("the replica of segment {} kept moving while its epoch was raised", segment.0))
    }

    /// LIST: every replica of `log` this backup can serve. Open replicas
    /// report their verified prefix; closed ones are checked (bytes scan to
    /// their length, ending with their checksum) and left out if they fail.
    pub(crate) fn list(&self, log: LogId) -> Vec<ReplicaInfo> {
        // Closed replicas are listed from what their CLOSE recorded, without
        // reading them: a LIST of a large log must stay quick (recovery
        // lists every backup at once). READ verifies every byte before it
        // serves them, so a corrupt one is refused there and the reader
        // takes another replica.
        let mut closed = Vec::new();
        let open: Vec<SegmentId> = {
            let t = self.table.lock();
            t.replicas
                .range((log, SegmentId(0))..=(log, SegmentId(u64::MAX)))
                .filter_map(|(k, r)| match r {
                    Replica::Closed { version, epoch, len, checksum, .. }
                    | Replica::OnDisk { version, epoch, len, checksum, .. } => {
                        closed.push(ReplicaInfo {
                            segment: k.1,
                            log_version: *version,
                            len: *len,
                            checksum: *checksum,
                            state: ReplicaState::Closed,
                            epoch: *epoch,
                        });
                        None
                    }
                    Replica::Open { .. } => Some(k.1),
                })
                .collect()
        };
        closed.extend(open.into_iter().filter_map(|segment| self.serve(log, segment, false)).map(|o| o.info));
        closed.sort_by_key(|r| r.segment);
        closed
    }

    /// READ: one replica's bytes (an open one's verified prefix).
    pub(crate) fn read(&self, log: LogId, segment: SegmentId) -> Result<ReadOut, String> {
        self.serve(log, segment, true)
            .ok_or_else(|| format!("no replica of log {} segment {} (or it is corrupt)", log.0, segment.0))
    }

    /// READ_PART: the entries of one replica whose keys fall in `ranges`,
    /// byte for byte but for a chunk run kept in part, which is written
    /// again as the run of its records kept (`format::filter_entries_trusted`: `read` checked every
    /// entry's CRC already), cut from its verified bytes; the replica's
    /// segment header must name `log` and `segment`.
    /// The filtering is the backup's share of a recovery: each recovery
    /// master receives only its partition's objects, so every object
    /// crosses the network once (DXRAM's recovery; RAMCloud's backups
    /// likewise split segments by partition).
    pub(crate) fn read_part(&self, log: LogId, segment: SegmentId, ranges: &[KeyRange]) -> Result<PartOut, String> {
        let r = self.read(log, segment)?;
        let named = match format::decode(&r.bytes) {
            Ok((Entry::SegmentHeader(h), _)) => h.log == log && h.segment == segment,
            _ => r.bytes.is_empty(),
        };
        if !named {
            self.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
            return Err(format!("replica of log {} segment {} names another segment", log.0, segment.0));
        }
        let mut entries = Vec::with_capacity(r.bytes.len() / 2);
        let f = format::filter_entries_trusted(&r.bytes, wire::PartFilter(ranges), &mut entries)
            .map_err(|e| format!("replica of log {} segment {}: {e}", log.0, segment.0))?;
        let info = PartInfo {
            log_version: r.info.log_version,
            closed: r.info.state == ReplicaState::Closed,
            replica_len: r.info.len,
            checksum: r.info.checksum,
            objects: f.objects,
            tombstones: f.tombstones,
            safe_version: f.safe_version,
        };
        Ok(PartOut { info, entries })
    }

    /// Checks the replica of `(log, segment)` and describes it, with its
    /// bytes if `bytes`. A replica that moves while being looked at (its
    /// buffer flushed and released, or reset) is looked up again.
    fn serve(&self, log: LogId, segment: SegmentId, bytes: bool) -> Option<ReadOut> {
        for _ in 0..16 {
            let r = self.table.lock().replicas.get(&(log, segment)).cloned()?;
            match self.check(log, segment, r, bytes) {
                Checked::Ok(out) => return Some(out),
                Checked::Corrupt => return None,
                Checked::Moved => continue,
            }
        }
        None
    }

    fn check(&self, log: LogId, segment: SegmentId, r: Replica, bytes: bool) -> Checked {
        let corrupt = |what: &str| {
            self.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(log = log.0, segment = segment.0, "backup: not serving a corrupt closed replica ({what})");
            Checked::Corrupt
        };
        match r {
            Replica::Open { buf, gen, version, .. } => {
                let g = buf.lock();
                if g.gen != gen {
                    return Checked::Moved;
                }
                // The buffer's own record: an EPOCH may have raised it since
                // the table was looked at.
                let epoch = g.meta.map_or(1, |m| m.epoch);
                let held = &g.data()[..g.received as usize];
                let v = verify_replica(held);
                let info = ReplicaInfo {
                    segment,
                    log_version: version,
                    len: v.len as u32,
                    checksum: 0,
                    state: ReplicaState::Open,
                    epoch,
                };
                let bytes = ReplicaBytes::Copied(if bytes { held[..v.len].to_vec() } else { Vec::new() });
                Checked::Ok(ReadOut { info, bytes })
            }
            Replica::Closed { buf, gen, version, len, checksum, .. } => {
                let g = buf.lock();
                if g.gen != gen {
                    return Checked::Moved;
                }
                let epoch = g.meta.map_or(1, |m| m.epoch);
                let held = &g.data()[..len as usize];
                let v = verify_replica(held);
                if v.len != len as usize || v.last_checksum != checksum {
                    return corrupt("buffer");
                }
                let info =
                    ReplicaInfo { segment, log_version: version, len, checksum, state: ReplicaState::Closed, epoch };
                let bytes = ReplicaBytes::Copied(if bytes { held.to_vec() } else { Vec::new() });
                Checked::Ok(ReadOut { info, bytes })
            }
            Replica::OnDisk { version, epoch, len, checksum, path } => {
                let (h, data) = match files::read_segment(&path, &self.read_bufs) {
                    Ok(x) => x,
                    // Freed (or replaced) meanwhile: look again.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Checked::Moved,
                    Err(e) => return corrupt(&e.to_string()),
                };
                let v = verify_replica(&data);
                // The file's epoch may be ahead of the table's (an EPOCH
                // being recorded now), never behind it.
                let expect = FileHeader { log, log_version: version, segment, len, checksum, epoch: h.epoch };
                if h != expect || h.epoch < epoch || v.len != len as usize || v.last_checksum != checksum {
                    return corrupt("file");
                }
                let info = ReplicaInfo {
                    segment,
                    log_version: version,
                    len,
                    checksum,
                    state: ReplicaState::Closed,
                    epoch: h.epoch,
                };
                let bytes = if bytes { ReplicaBytes::File(data) } else { ReplicaBytes::Copied(Vec::new()) };
                Checked::Ok(ReadOut { info, bytes })
            }
        }
    }

    /// (buffers total, buffers in use, closed awaiting flush, replicas on disk).
    pub(crate) fn occupancy(&self) -> (usize, usize, usize, usize) {
        let t = self.table.lock();
        let total = t.buffers.iter().flatten().count();
        let on_disk = t.replicas.values().filter(|r| matches!(r, Replica::OnDisk { .. })).count();
        (total, total - t.free.len(), t.awaiting_flush, on_disk)
    }
}
