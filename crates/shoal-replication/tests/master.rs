//! The replicator against fake backups over real TCP on 127.0.0.1, fed by a
//! real store's log: replicas byte-identical to what the log appended, R = 0,
//! an unknown R, killed, stalled, refusing and garbage-speaking backups,
//! conventional mode, the head OPEN ordering, FREE after a splice, and the
//! replica epochs and floors that follow the loss of a replica.

use parking_lot::Mutex;
use shoal_cluster::ServerId;
use shoal_common::{LogId, SegmentId, TableId};
use shoal_engine::format;
use shoal_engine::{RejectRules, SegmentKind, Store};
use shoal_replication::master::{FloorRecorder, ReplicationError, ReplicationMode, Replicator, ReplicatorConfig};
use shoal_replication::wire::{self, Header, Hello, Kind, Mode, HEADER_LEN};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod master_common;

use master_common::*;

const MASTER: ServerId = ServerId(1);

/// A replica as a fake backup holds it: bytes, (length, checksum) once
/// closed, freed.
type Held = (Vec<u8>, Option<(u32, u32)>, bool);
/// A replica and the index of the backup holding it.
type Holder = (usize, Vec<u8>, Option<(u32, u32)>);

// ---------------------------------------------------------------------------
// A fake backup: places DATA bytes, ACKs cumulative counts, answers OPEN,
// CLOSE and APPEND as docs/replication.md says. Knobs make it refuse,
// stall, answer garbage or delay its CLOSED.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Open { backup: u64, seg: u64, epoch: u64 },
    Epoch { backup: u64, seg: u64, epoch: u64 },
    Acked { backup: u64, seg: u64, n: u32 },
    Closed { backup: u64, seg: u64 },
    Free { backup: u64, seg: u64 },
}

#[derive(Default)]
struct FakeReplica {
    bytes: Vec<u8>,
    closed: Option<(u32, u32)>,
    freed: bool,
    epoch: u64,
}

#[derive(Default)]
struct Knobs {
    refuse: AtomicBool,
    /// Answers OPEN, never ACKs, APPENDEDs, CLOSEs or EPOCHs.
    silent: AtomicBool,
    /// Answers OPEN with bytes that are no frame.
    garbage: AtomicBool,
    close_delay_ms: AtomicU64,
}

struct FakeBackup {
    id: ServerId,
    addr: SocketAddr,
    knobs: Arc<Knobs>,
    replicas: Arc<Mutex<HashMap<u64, FakeReplica>>>,
    hellos: Arc<Mutex<Vec<Hello>>>,
    frames: Arc<Mutex<HashMap<&'static str, u64>>>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl FakeBackup {
    fn start(id: u64, events: Arc<Mutex<Vec<Event>>>) -> FakeBackup {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let b = FakeBackup {
            id: ServerId(id),
            addr,
            knobs: Arc::default(),
            replicas: Arc::default(),
            hellos: Arc::default(),
            frames: Arc::default(),
            streams: Arc::default(),
            stop: Arc::default(),
        };
        let (knobs, replicas, hellos, frames, streams, stop) = (
            b.knobs.clone(),
            b.replicas.clone(),
            b.hellos.clone(),
            b.frames.clone(),
            b.streams.clone(),
            b.stop.clone(),
        );
        std::thread::spawn(move || {
            for s in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(s) = s else { continue };
                streams.lock().push(s.try_clone().unwrap());
                let conn = FakeConn {
                    id,
                    knobs: knobs.clone(),
                    replicas: replicas.clone(),
                    hellos: hellos.clone(),
                    frames: frames.clone(),
                    events: events.clone(),
                };
                std::thread::spawn(move || conn.serve(s));
            }
        });
        b
    }

    /// Like a SIGKILL: every connection drops and nothing listens any more.
    fn kill(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        for s in self.streams.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn replica(&self, seg: u64) -> Option<Held> {
        self.replicas.lock().get(&seg).map(|r| (r.bytes.clone(), r.closed, r.freed))
    }

    fn epoch(&self, seg: u64) -> Option<u64> {
        self.replicas.lock().get(&seg).map(|r| r.epoch)
    }

    fn frames(&self, kind: &'static str) -> u64 {
        self.frames.lock().get(kind).copied().unwrap_or(0)
    }
}

struct FakeConn {
    id: u64,
    knobs: Arc<Knobs>,
    replicas: Arc<Mutex<HashMap<u64, FakeReplica>>>,
    hellos: Arc<Mutex<Vec<Hello>>>,
    frames: Arc<Mutex<HashMap<&'static str, u64>>>,
    events: Arc<Mutex<Vec<Event>>>,
}

impl FakeConn {
    fn serve(self, mut s: TcpStream) {
        let _ = self.run(&mut s);
        let _ = s.shutdown(Shutdown::Both);
    }

    fn count(&self, k: &'static str) {
        *self.frames.lock().entry(k).or_default() += 1;
    }

    fn run(&self, s: &mut TcpStream) -> std::io::Result<()> {
        let mut out = Vec::new();
        let mut body = Vec::new();
        let mut mode = None;
        loop {
            let mut head = [0u8; HEADER_LEN];
            s.read_exact(&mut head)?;
            let h = match Header::decode(&head, SEGMENT + 16) {
                Ok(h) => h,
                Err(e) => return self.error(s, &e.to_string()),
            };
            body.resize(h.body_len, 0);
            s.read_exact(&mut body)?;
            let seg = h.segment;
            out.clear();
            match (h.kind, mode) {
                (Kind::Hello, None) => {
                    let hello = Hello::decode(&body).unwrap();
                    self.hellos.lock().push(hello);
                    mode = Some(hello.mode);
                    wire::encode_empty(Kind::HelloOk, seg, &mut out);
                }
                (Kind::Open, Some(_)) => {
                    self.count("OPEN");
                    let open = wire::decode_open(&body).unwrap();
                    assert_eq!(open.size as usize, SEGMENT);
                    if self.knobs.garbage.load(Ordering::SeqCst) {
                        s.write_all(&[0xff; 40])?;
                        continue;
                    }
                    if self.knobs.refuse.load(Ordering::SeqCst) {
                        wire::encode_text(Kind::Refused, seg, "no buffer", &mut out);
                    } else {
                        self.replicas.lock().insert(seg.0, FakeReplica { epoch: open.epoch, ..Default::default() });
                        self.events.lock().push(Event::Open { backup: self.id, seg: seg.0, epoch: open.epoch });
                        wire::encode_empty(Kind::Opened, seg, &mut out);
                    }
                }
                (Kind::Data, Some(Mode::Tailwind)) | (Kind::Append, Some(Mode::Conventional)) => {
                    let data = h.kind == Kind::Data;
                    self.count(if data { "DATA" } else { "APPEND" });
                    let offset = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
                    let mut reps = self.replicas.lock();
                    let Some(r) = reps.get_mut(&seg.0) else {
                        drop(reps);
                        return self.error(s, "no such replica");
                    };
                    if offset != r.bytes.len() || r.closed.is_some() || offset + body.len() - 4 > SEGMENT {
                        drop(reps);
                        return self.error(s, "out of order");
                    }
                    r.bytes.extend_from_slice(&body[4..]);
                    let n = r.bytes.len() as u32;
                    if !data {
                        // Conventional: whole groups, each verified.
                        assert_eq!(format::scan(&r.bytes).verified_len, r.bytes.len(), "APPEND not a whole group");
                    }
                    drop(reps);
                    if self.knobs.silent.load(Ordering::SeqCst) {
                        continue;
                    }
                    self.events.lock().push(Event::Acked { backup: self.id, seg: seg.0, n });
                    wire::encode_u32(if data { Kind::Ack } else { Kind::Appended }, seg, n, &mut out);
                }
                (Kind::Close, Some(_)) => {
                    self.count("CLOSE");
                    let (len, ck) = wire::decode_close(&body).unwrap();
                    {
                        let mut reps = self.replicas.lock();
                        let Some(r) = reps.get_mut(&seg.0) else {
                            drop(reps);
                            return self.error(s, "no such replica");
                        };
                        if r.bytes.len() != len as usize {
                            drop(reps);
                            return self.error(s, "wrong length");
                        }
                        r.closed = Some((len, ck));
                    }
                    if self.knobs.silent.load(Ordering::SeqCst) {
                        continue;
                    }
                    let delay = self.knobs.close_delay_ms.load(Ordering::SeqCst);
                    if delay > 0 {
                        std::thread::sleep(Duration::from_millis(delay));
                    }
                    self.events.lock().push(Event::Closed { backup: self.id, seg: seg.0 });
                    wire::encode_u32(Kind::Closed, seg, len, &mut out);
                }
                (Kind::Epoch, Some(_)) => {
                    self.count("EPOCH");
                    let epoch = wire::decode_epoch(&body).unwrap();
                    match self.replicas.lock().get_mut(&seg.0) {
                        Some(r) => r.epoch = r.epoch.max(epoch),
                        None => return self.error(s, "EPOCH for no replica"),
                    }
                    self.events.lock().push(Event::Epoch { backup: self.id, seg: seg.0, epoch });
                    if self.knobs.silent.load(Ordering::SeqCst) {
                        continue;
                    }
                    wire::encode_epoch(Kind::Epoched, seg, epoch, &mut out);
                }
                (Kind::Free, Some(_)) => {
                    self.count("FREE");
                    self.events.lock().push(Event::Free { backup: self.id, seg: seg.0 });
                    if let Some(r) = self.replicas.lock().get_mut(&seg.0) {
                        r.freed = true;
                    }
                }
                (k, _) => return self.error(s, &format!("unexpected {k:?}")),
            }
            if !out.is_empty() {
                s.write_all(&out)?;
            }
        }
    }

    fn error(&self, s: &mut TcpStream, msg: &str) -> std::io::Result<()> {
        let mut out = Vec::new();
        wire::encode_text(Kind::Error, SegmentId(0), msg, &mut out);
        s.write_all(&out)
    }
}

// ---------------------------------------------------------------------------
// Helpers.

struct Setup {
    rep: Arc<Replicator>,
    tee: Arc<Tee>,
    store: Store,
    events: Arc<Mutex<Vec<Event>>>,
    backups: Vec<FakeBackup>,
}

fn setup(backups: usize, mode: ReplicationMode, timeout_ms: u64) -> Setup {
    setup_with(backups, mode, timeout_ms, None)
}

fn setup_with(backups: usize, mode: ReplicationMode, timeout_ms: u64, floors: Option<FloorRecorder>) -> Setup {
    let rep = Replicator::start(ReplicatorConfig {
        master: MASTER,
        log: LogId(7),
        log_version: 1,
        segment_bytes: SEGMENT as u32,
        mode,
        replica_timeout: Duration::from_millis(timeout_ms),
        floor_recorder: floors,
    });
    let tee = Arc::new(Tee { rep: rep.clone(), log: Mutex::default() });
    let store = store(&tee);
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let backups = (0..backups).map(|i| FakeBackup::start(10 + i as u64, events.clone())).collect();
    Setup { rep, tee, store, events, backups }
}

impl Setup {
    fn list(&self, which: &[usize]) -> Vec<(ServerId, SocketAddr)> {
        which.iter().map(|&i| (self.backups[i].id, self.backups[i].addr)).collect()
    }

    fn write(&self, threads: usize, n: usize, len: usize, tag: u8) {
        write(&self.store, threads, n, len, tag)
    }

    /// Waits (on a runtime of its own) until everything written is durable.
    fn wait_all(&self, secs: u64) -> bool {
        wait(&self.rep, self.rep.position(), secs)
    }

    /// The backups holding a replica of `seg`, with its bytes and close.
    fn holders(&self, seg: u64) -> Vec<Holder> {
        self.backups
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.replica(seg).map(|(bytes, closed, _)| (i, bytes, closed)))
            .collect()
    }

    /// Every segment the log appended to is on `r` backups among `live`,
    /// byte for byte, and closed there if the log closed it.
    fn check_replicas(&self, r: usize, live: &[usize]) {
        let log = self.tee.log.lock();
        assert!(!log.bytes.is_empty());
        for (seg, bytes) in &log.bytes {
            let holders: Vec<_> = self.holders(*seg).into_iter().filter(|h| live.contains(&h.0)).collect();
            let complete: Vec<_> = holders.iter().filter(|h| h.1 == *bytes).collect();
            assert!(complete.len() >= r, "segment {seg}: {} complete replicas of {r}", complete.len());
            if log.closed.contains(seg) {
                let len = bytes.len() as u32;
                let closed = complete.iter().filter(|h| h.2.is_some_and(|c| c.0 == len)).count();
                assert!(closed >= r, "segment {seg}: closed on {closed} of {r}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tests.

#[test]
fn tailwind_replicas_are_byte_identical_to_the_log() {
    let s = setup(4, ReplicationMode::Tailwind, 2000);
    // The master itself is listed as a backup too: it must never be used.
    let mut list = s.list(&[0, 1, 2]);
    list.push((MASTER, s.backups[3].addr));
    s.rep.set_backups(list, 2);
    s.write(3, 6000, 1000, 1);
    assert!(s.wait_all(20), "writes never became durable");
    assert_eq!(s.rep.durable(), s.rep.position());
    s.check_replicas(2, &[0, 1, 2]);
    assert!(s.backups[3].hellos.lock().is_empty(), "the master replicated to itself");
    // Segments rolled, and each replica sits on distinct backups.
    let log = s.tee.log.lock();
    assert!(log.closed.len() >= 4, "only {} segments closed", log.closed.len());
    for seg in log.bytes.keys() {
        let holders: Vec<usize> = s.holders(*seg).into_iter().map(|h| h.0).collect();
        assert_eq!(holders.len(), 2, "segment {seg} on {holders:?}");
    }
    // Heads in the store itself are what the backups hold.
    for (id, bytes) in s.store.log_segments() {
        assert_eq!(&log.bytes[&id.0], &bytes, "segment {}", id.0);
    }
    for b in &s.backups[..3] {
        assert!(b.hellos.lock().iter().all(|h| h.mode == Mode::Tailwind && h.master == MASTER && h.log == LogId(7)));
        assert_eq!(b.frames("APPEND"), 0);
    }
    let st = s.rep.stats();
    assert!(st.rounds > 0 && st.round_bytes_max > 0 && st.round_appends_mean >= 1.0, "{st:?}");
    assert!(st.bytes_replicated >= 2 * s.rep.position(), "{st:?}");
    assert_eq!(st.replicas_closed as usize, 2 * log.closed.len(), "{st:?}");
    assert_eq!(st.durable_lag, 0);
    assert_eq!(st.replicas_reopened, 0);
}

#[test]
fn with_no_replicas_durable_is_the_position_at_once() {
    let s = setup(0, ReplicationMode::Tailwind, 2000);
    s.rep.set_backups(Vec::new(), 0);
    assert!(eventually(5, || s.rep.durable() == s.rep.position()));
    for i in 0..2000 {
        s.store.write(TableId(1), format!("k{i}").as_bytes(), &[7; 900], RejectRules::default()).unwrap();
        assert_eq!(s.rep.durable(), s.rep.position());
    }
    assert!(!s.tee.log.lock().closed.is_empty());
    assert!(wait(&s.rep, s.rep.position(), 1));
    assert_eq!(s.rep.stats().replicas_opened, 0);
}

#[test]
fn before_backups_are_known_nothing_is_durable_then_everything_is_sent() {
    let s = setup(2, ReplicationMode::Tailwind, 2000);
    s.write(2, 2500, 1000, 2);
    let pos = s.rep.position();
    assert!(pos > SEGMENT as u64);
    assert!(!wait(&s.rep, pos, 1), "durable before any backup was known");
    assert_eq!(s.rep.durable(), 0);
    s.rep.set_backups(s.list(&[0, 1]), 2);
    assert!(wait(&s.rep, pos, 10));
    s.check_replicas(2, &[0, 1]);
}

#[test]
fn a_killed_backup_is_replaced_and_waits_complete() {
    let s = setup(3, ReplicationMode::Tailwind, 1000);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    s.write(2, 300, 1000, 3);
    assert!(s.wait_all(10));
    // Kill a backup holding the open head, mid-segment.
    let head = s.tee.log.lock().heads.last().unwrap().0;
    let victim = s.holders(head)[0].0;
    s.backups[victim].kill();
    s.write(2, 3000, 1000, 4);
    assert!(s.wait_all(20), "writes never became durable after a backup died");
    let live: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
    s.check_replicas(2, &live);
    let st = s.rep.stats();
    assert!(st.replicas_reopened >= 1, "{st:?}");
}

#[test]
fn no_wait_completes_with_a_stalled_replica_until_another_takes_it() {
    let s = setup(3, ReplicationMode::Tailwind, 300);
    s.backups[1].knobs.silent.store(true, Ordering::SeqCst);
    s.rep.set_backups(s.list(&[0, 1]), 2);
    s.write(1, 200, 500, 5);
    let pos = s.rep.position();
    // Backup 1 holds every byte but never acknowledges: through several
    // timeouts, no write is acknowledged with one replica.
    assert!(!wait(&s.rep, pos, 2), "durable with a replica that never acknowledged");
    assert!(s.rep.durable() < pos);
    assert!(s.rep.stats().replicas_reopened >= 2);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    assert!(wait(&s.rep, pos, 10));
    s.check_replicas(2, &[0, 2]);
}

#[test]
fn a_refused_open_goes_to_another_backup() {
    let s = setup(3, ReplicationMode::Tailwind, 2000);
    s.backups[0].knobs.refuse.store(true, Ordering::SeqCst);
    s.rep.set_backups(s.list(&[0, 1]), 2);
    s.write(1, 100, 500, 6);
    let pos = s.rep.position();
    assert!(!wait(&s.rep, pos, 1));
    assert!(s.rep.stats().refusals >= 1);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    s.write(2, 2000, 1000, 7);
    assert!(s.wait_all(10));
    s.check_replicas(2, &[1, 2]);
    assert!(s.backups[0].replicas.lock().is_empty());
}

#[test]
fn garbage_from_a_backup_drops_it_without_harm() {
    let s = setup(3, ReplicationMode::Tailwind, 2000);
    s.backups[0].knobs.garbage.store(true, Ordering::SeqCst);
    s.rep.set_backups(s.list(&[0, 1]), 2);
    s.write(1, 100, 500, 8);
    assert!(!wait(&s.rep, s.rep.position(), 1));
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    assert!(s.wait_all(10));
    s.check_replicas(2, &[1, 2]);
    assert!(s.rep.stats().replicas_reopened >= 1);
}

#[test]
fn conventional_mode_sends_one_append_per_group() {
    let s = setup(3, ReplicationMode::Conventional, 2000);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    s.write(3, 2500, 1000, 9);
    assert!(s.wait_all(30));
    s.check_replicas(2, &[0, 1, 2]);
    let (mut appends, mut data) = (0, 0);
    for b in &s.backups {
        appends += b.frames("APPEND");
        data += b.frames("DATA");
        assert!(b.hellos.lock().iter().all(|h| h.mode == Mode::Conventional));
    }
    assert_eq!(data, 0);
    // Every write is its own group; each replica got them one by one.
    assert!(appends >= 2 * 2500, "{appends} APPENDs");
}

#[test]
fn a_head_opens_only_after_earlier_segments_closed_everywhere() {
    let s = setup(3, ReplicationMode::Tailwind, 2000);
    for b in &s.backups {
        b.knobs.close_delay_ms.store(30, Ordering::SeqCst);
    }
    s.rep.set_backups(s.list(&[0, 1, 2]), 3);
    s.write(2, 5000, 1000, 10);
    assert!(s.wait_all(20));
    let log = s.tee.log.lock();
    let events = s.events.lock();
    let mut checked = 0;
    for (head, before) in &log.heads {
        let Some(open) = events.iter().position(|e| matches!(e, Event::Open { seg, .. } if seg == head)) else {
            continue;
        };
        for seg in before {
            let closes =
                events[..open].iter().filter(|e| matches!(e, Event::Closed { seg: x, .. } if x == seg)).count();
            assert_eq!(closes, 3, "head {head} opened before segment {seg} was closed on every replica");
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} orderings checked");
}

#[test]
fn cleaned_segments_are_freed_once_the_splice_head_is_durable() {
    let s = setup(3, ReplicationMode::Tailwind, 2000);
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    for round in 0..4 {
        s.write(2, 3000, 1000, 11 + round);
    }
    assert!(s.wait_all(20));
    let freed_pages = s.store.clean_now(20, true);
    assert!(freed_pages > 0);
    assert!(s.wait_all(20));
    let log = s.tee.log.lock();
    assert!(!log.frees.is_empty());
    let all_freed: Vec<u64> = log.frees.iter().flat_map(|f| f.2.iter().copied()).collect();
    assert!(!all_freed.is_empty());
    assert!(eventually(10, || {
        let events = s.events.lock();
        all_freed
            .iter()
            .all(|seg| events.iter().filter(|e| matches!(e, Event::Free { seg: x, .. } if x == seg)).count() == 2)
    }));
    // Each FREE came after every replica of the splice's head had its first bytes.
    let events = s.events.lock();
    for (head, len, freed) in &log.frees {
        for seg in freed {
            let first_free = events.iter().position(|e| matches!(e, Event::Free { seg: x, .. } if x == seg)).unwrap();
            let acked = events[..first_free]
                .iter()
                .filter(|e| matches!(e, Event::Acked { seg: x, n, .. } if x == head && *n >= *len))
                .count();
            assert!(acked >= 2, "segment {seg} freed before head {head} was durable");
        }
    }
    for seg in &all_freed {
        for (i, _, _) in s.holders(*seg) {
            assert!(s.backups[i].replica(*seg).unwrap().2, "segment {seg} not freed on backup {i}");
        }
    }
    assert_eq!(s.rep.stats().segments_freed as usize, all_freed.len());
    // The surviving log is still complete on backups.
    drop(events);
    for (id, bytes) in s.store.log_segments() {
        if log.kinds[&id.0] == SegmentKind::Survivor {
            let holders = s.holders(id.0);
            assert_eq!(holders.iter().filter(|h| h.1 == bytes).count(), 2, "survivor {}", id.0);
        }
    }
}

#[test]
fn shutdown_fails_waiters_that_are_not_durable() {
    let s = setup(0, ReplicationMode::Tailwind, 2000);
    s.write(1, 10, 100, 12);
    let rep = s.rep.clone();
    let pos = rep.position();
    let waiter = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(rep.wait_durable(pos))
    });
    std::thread::sleep(Duration::from_millis(100));
    s.rep.shutdown();
    assert_eq!(waiter.join().unwrap(), Err(ReplicationError::Shutdown));
    assert_eq!(wait_result(&s.rep, pos), Err(ReplicationError::Shutdown));
    assert_eq!(wait_result(&s.rep, 0), Ok(()));
}

#[test]
fn a_lower_r_from_a_shrunken_cluster_lets_open_segments_finish() {
    let s = setup(3, ReplicationMode::Tailwind, 300);
    s.rep.set_backups(s.list(&[0, 1, 2]), 3);
    s.write(1, 200, 1000, 13);
    assert!(s.wait_all(10));
    s.backups[2].kill();
    s.write(1, 200, 1000, 14);
    let pos = s.rep.position();
    assert!(!wait(&s.rep, pos, 1), "durable on two replicas with R = 3");
    // The coordinator's next map: two servers left, R = 2.
    s.rep.set_backups(s.list(&[0, 1]), 2);
    assert!(wait(&s.rep, pos, 10));
    s.write(2, 2000, 1000, 15);
    assert!(s.wait_all(10));
    s.check_replicas(2, &[0, 1]);
}

#[test]
fn many_waiters_on_several_runtimes_all_complete_in_order() {
    let s = setup(2, ReplicationMode::Tailwind, 2000);
    s.write(1, 50, 100, 16);
    // Waiters on a runtime that is dropped before they complete.
    let early = s.rep.position();
    {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(async {
            let rep = s.rep.clone();
            let h = tokio::spawn(async move { rep.wait_durable(early).await });
            tokio::time::timeout(Duration::from_millis(100), h).await
        });
        assert!(r.is_err(), "durable before any backup was known");
    }
    s.rep.set_backups(s.list(&[0, 1]), 2);
    let current = |threads: usize| -> tokio::runtime::Runtime {
        if threads == 1 {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap()
        }
    };
    std::thread::scope(|sc| {
        for threads in [1, 1, 2] {
            let s = &s;
            sc.spawn(move || {
                let rt = current(threads);
                rt.block_on(async {
                    let mut tasks = Vec::new();
                    for w in 0..64 {
                        let rep = s.rep.clone();
                        let store = &s.store;
                        store
                            .write(TableId(1), format!("w{threads}-{w}").as_bytes(), &[1; 300], RejectRules::default())
                            .unwrap();
                        let pos = rep.position();
                        tasks.push(tokio::spawn(async move {
                            rep.wait_durable(pos).await.unwrap();
                            assert!(rep.durable() >= pos);
                        }));
                    }
                    for t in tasks {
                        tokio::time::timeout(Duration::from_secs(10), t).await.unwrap().unwrap();
                    }
                });
            });
        }
    });
    assert!(wait(&s.rep, early, 1));
    s.check_replicas(2, &[0, 1]);
}

/// A backup holding the open head dies. The head's new replica opens at
/// epoch 2, the surviving replica is sent EPOCH 2, and the floor (head, 2)
/// is asked of the coordinator; while the coordinator does not answer,
/// nothing written after the loss is acknowledged (the dead replica, were
/// it to come back, still holds every acknowledged write), and once it
/// records the floor the writes complete.
#[test]
fn a_lost_replica_raises_the_epoch_and_writes_wait_for_its_floor() {
    let coordinator = Arc::new(FakeFloors::default());
    let s = setup_with(3, ReplicationMode::Tailwind, 1000, Some(coordinator.recorder()));
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    s.write(2, 300, 1000, 20);
    assert!(s.wait_all(10));
    let head = s.tee.log.lock().heads.last().unwrap().0;
    let holders: Vec<usize> = s.holders(head).into_iter().map(|h| h.0).collect();
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|&i| s.backups[i].epoch(head) == Some(1)), "first replicas open at epoch 1");
    assert!(coordinator.calls.lock().is_empty(), "no floor without a loss");
    let (victim, survivor) = (holders[0], holders[1]);
    let fresh = (0..3).find(|i| !holders.contains(i)).unwrap();

    coordinator.down.store(true, Ordering::SeqCst);
    let acknowledged = s.rep.durable();
    assert_eq!(acknowledged, s.rep.position());
    s.backups[victim].kill();
    s.write(1, 100, 1000, 21);
    let pos = s.rep.position();
    assert!(
        eventually(10, || coordinator.asked(head, 2, false)),
        "the floor (head, 2) was never asked: {:?}",
        coordinator.calls.lock()
    );
    // The new replica caught up and the survivor took the epoch, but
    // without the floor nothing more is acknowledged.
    assert!(eventually(10, || s.backups[fresh].replica(head).is_some_and(|r| r.0 == s.tee.log.lock().bytes[&head])));
    assert_eq!(s.backups[fresh].epoch(head), Some(2), "the re-opened replica");
    assert_eq!(s.backups[survivor].epoch(head), Some(2), "the survivor");
    assert!(s.events.lock().contains(&Event::Open { backup: s.backups[fresh].id.0, seg: head, epoch: 2 }));
    assert!(s.events.lock().contains(&Event::Epoch { backup: s.backups[survivor].id.0, seg: head, epoch: 2 }));
    assert!(!wait(&s.rep, pos, 2), "acknowledged before the floor was recorded");
    assert_eq!(s.rep.durable(), acknowledged);
    let st = s.rep.stats();
    assert!(st.epochs_raised >= 1 && st.floors_waiting >= 1 && st.floors_recorded == 0, "{st:?}");

    coordinator.down.store(false, Ordering::SeqCst);
    assert!(wait(&s.rep, pos, 10), "writes never completed once the floor was recorded");
    assert!(coordinator.asked(head, 2, true));
    // Nothing was recorded before the coordinator answered, and the head
    // has no other floor.
    let calls = coordinator.calls.lock().clone();
    let first_ok = calls.iter().position(|c| c.1).unwrap();
    assert!(calls[..first_ok].iter().all(|c| !c.1));
    s.write(2, 2000, 1000, 22);
    assert!(s.wait_all(20));
    s.check_replicas(2, &[survivor, fresh]);
    let st = s.rep.stats();
    assert!(st.floors_recorded >= 1 && st.floors_waiting == 0, "{st:?}");
}

/// Head floors (`docs/recovery.md`, "Head floors"): no write in a head is
/// acknowledged before the coordinator recorded a head floor at or above
/// that head, and the floor is asked for only once the head's opening (its
/// digest) is on every replica: a recovery that takes no head below the
/// floor always finds one.
#[test]
fn writes_in_a_head_wait_for_its_head_floor() {
    let coordinator = Arc::new(FakeFloors::default());
    coordinator.down.store(true, Ordering::SeqCst);
    let s = setup_with(3, ReplicationMode::Tailwind, 1000, Some(coordinator.recorder()));
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    s.write(1, 50, 1000, 30);
    let pos = s.rep.position();
    let head = s.tee.log.lock().heads.last().unwrap().0;
    assert!(
        eventually(10, || coordinator.heads.lock().contains(&(head, false))),
        "the head floor was never asked: {:?}",
        coordinator.heads.lock()
    );
    // The head's opening is on both replicas, but nothing is acknowledged
    // while the coordinator does not answer.
    let holders = s.holders(head);
    assert_eq!(holders.len(), 2);
    let bytes = s.tee.log.lock().bytes[&head].clone();
    assert!(holders.iter().all(|h| !h.1.is_empty() && bytes.starts_with(&h.1)));
    assert!(!wait(&s.rep, pos, 1), "acknowledged before the head floor was recorded");
    assert_eq!(s.rep.stats().head_floors_recorded, 0);

    coordinator.down.store(false, Ordering::SeqCst);
    assert!(wait(&s.rep, pos, 10), "writes never completed once the head floor was recorded");
    assert!(coordinator.heads.lock().contains(&(head, true)));

    // Several heads later (1 MiB segments), every head holding an
    // acknowledged write is at or below a recorded floor.
    s.write(2, 2000, 1000, 31);
    assert!(s.wait_all(20));
    let last = s.tee.log.lock().heads.last().unwrap().0;
    assert!(last > head, "the log rolled its head");
    let recorded = coordinator.heads.lock().iter().filter(|h| h.1).map(|h| h.0).max().unwrap();
    assert_eq!(recorded, last);
    let asked: Vec<u64> = coordinator.heads.lock().iter().map(|h| h.0).collect();
    assert!(asked.windows(2).all(|w| w[0] <= w[1]), "floors asked only ever grow: {asked:?}");
    assert!(s.rep.stats().head_floors_recorded >= 2);
    s.check_replicas(2, &[0, 1, 2]);
}

/// Without a loss there is no EPOCH: a refused OPEN leaves nothing behind
/// and the segment keeps epoch 1.
#[test]
fn a_refused_open_keeps_the_epoch() {
    let coordinator = Arc::new(FakeFloors::default());
    let s = setup_with(3, ReplicationMode::Tailwind, 2000, Some(coordinator.recorder()));
    s.backups[0].knobs.refuse.store(true, Ordering::SeqCst);
    // Two backups for R = 2: the refusing one is asked for sure.
    s.rep.set_backups(s.list(&[0, 1]), 2);
    s.write(1, 100, 500, 23);
    assert!(eventually(10, || s.rep.stats().refusals >= 1));
    s.rep.set_backups(s.list(&[0, 1, 2]), 2);
    s.write(2, 2000, 1000, 24);
    assert!(s.wait_all(10));
    assert_eq!(s.backups.iter().map(|b| b.frames("EPOCH")).sum::<u64>(), 0);
    assert!(s.events.lock().iter().all(|e| !matches!(e, Event::Open { epoch, .. } if *epoch != 1)));
    assert!(coordinator.calls.lock().is_empty());
}
