//! Test helpers shared by the backup and restore tests: a tiny blocking
//! master that speaks the replication protocol with raw frames, and real
//! segments recorded from a `shoal_engine::Store` through its observer.
#![allow(dead_code)]

use parking_lot::Mutex;
use shoal_cluster::ServerId;
use shoal_engine::format::{self, HeaderCrc};
use shoal_engine::{LogId, LogObserver, SegmentId, SegmentKind, Store, StoreConfig, TableId, Version};
use shoal_replication::backup::{Backup, BackupConfig, BackupStats};
use shoal_replication::wire::{self, Header, Hello, Kind, Mode, HEADER_LEN};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SEG: u32 = 64 << 10;

pub fn config(dir: &Path) -> BackupConfig {
    let mut c = BackupConfig::new("127.0.0.1:0".parse().unwrap(), dir);
    c.segment_bytes = SEG;
    c.buffers = 16;
    c.flush_limit = 16;
    c
}

pub fn start(dir: &Path) -> Backup {
    Backup::start(config(dir)).unwrap()
}

/// Polls `f` until it holds (10 s at most).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn wait_stats(b: &Backup, what: &str, f: impl Fn(&BackupStats) -> bool) {
    wait_for(what, || f(&b.stats()));
}

/// One frame received.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: Kind,
    pub segment: SegmentId,
    pub body: Vec<u8>,
}

impl Frame {
    pub fn u32(&self) -> u32 {
        wire::decode_u32(&self.body, "u32").unwrap()
    }
    pub fn text(&self) -> String {
        wire::decode_text(&self.body)
    }
}

/// A blocking peer of a backup (a master or a reader), frame by frame.
pub struct Peer {
    pub s: TcpStream,
}

impl Peer {
    pub fn connect(addr: SocketAddr) -> Peer {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Peer { s }
    }

    /// Connects and says HELLO; panics unless HELLO_OK comes back.
    pub fn hello(addr: SocketAddr, mode: Mode, log: LogId, version: u64) -> Peer {
        let mut p = Peer::connect(addr);
        let f = p.say_hello(mode, log, version);
        assert_eq!(f.kind, Kind::HelloOk, "HELLO answered {:?}: {}", f.kind, f.text());
        p
    }

    pub fn say_hello(&mut self, mode: Mode, log: LogId, version: u64) -> Frame {
        let mut out = Vec::new();
        Hello { mode, master: ServerId(1), log, log_version: version }.encode(&mut out);
        self.send(&out);
        self.recv().expect("an answer to HELLO")
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// The next frame, or `None` once the backup closed the connection.
    pub fn recv(&mut self) -> Option<Frame> {
        let mut head = [0u8; HEADER_LEN];
        match self.s.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) => {
                return None
            }
            Err(e) => panic!("reading from the backup: {e}"),
        }
        let h = Header::decode(&head, 1 << 28).expect("a valid header from the backup");
        let mut body = vec![0; h.body_len];
        self.s.read_exact(&mut body).unwrap();
        Some(Frame { kind: h.kind, segment: h.segment, body })
    }

    /// The next frame that is not an ACK.
    pub fn recv_skip_acks(&mut self) -> Option<Frame> {
        loop {
            let f = self.recv()?;
            if f.kind != Kind::Ack {
                return Some(f);
            }
        }
    }

    /// Expects an ERROR (ACKs may come first), then the end of the connection.
    pub fn expect_error_and_close(&mut self) -> String {
        let f = self.recv_skip_acks().expect("an ERROR before the connection closed");
        assert_eq!(f.kind, Kind::Error, "expected ERROR, got {f:?}");
        assert!(self.recv().is_none(), "the connection stays open after ERROR");
        f.text()
    }

    pub fn open(&mut self, segment: SegmentId, size: u32) -> Frame {
        self.open_at(segment, size, 1)
    }

    /// OPEN at a replica epoch.
    pub fn open_at(&mut self, segment: SegmentId, size: u32, epoch: u64) -> Frame {
        let mut out = Vec::new();
        wire::encode_open(segment, &wire::Open { size, survivor: false, epoch }, &mut out);
        self.send(&out);
        self.recv_skip_acks().expect("an answer to OPEN")
    }

    pub fn open_ok(&mut self, segment: SegmentId) {
        let f = self.open(segment, SEG);
        assert_eq!(f.kind, Kind::Opened, "OPEN answered {:?}: {}", f.kind, f.text());
    }

    /// EPOCH; returns the answer (EPOCHED or ERROR), ACKs skipped.
    pub fn epoch(&mut self, segment: SegmentId, epoch: u64) -> Frame {
        let mut out = Vec::new();
        wire::encode_epoch(Kind::Epoch, segment, epoch, &mut out);
        self.send(&out);
        self.recv_skip_acks().expect("an answer to EPOCH")
    }

    /// EPOCH, answered EPOCHED with the same epoch.
    pub fn epoch_ok(&mut self, segment: SegmentId, epoch: u64) {
        let f = self.epoch(segment, epoch);
        assert_eq!((f.kind, f.segment), (Kind::Epoched, segment), "EPOCH answered {:?}: {}", f.kind, f.text());
        assert_eq!(wire::decode_epoch(&f.body), Ok(epoch));
    }

    pub fn data(&mut self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        let mut out = Vec::new();
        wire::encode_data_prefix(Kind::Data, segment, offset, bytes.len(), &mut out);
        out.extend_from_slice(bytes);
        self.send(&out);
    }

    /// Reads ACKs until `segment`'s reaches `count`; returns every count seen.
    pub fn wait_ack(&mut self, segment: SegmentId, count: u32) -> Vec<u32> {
        let mut seen = Vec::new();
        loop {
            let f = self.recv().expect("an ACK");
            assert_eq!(f.kind, Kind::Ack, "expected ACK, got {:?}: {}", f.kind, f.text());
            if f.segment == segment {
                let n = f.u32();
                assert!(seen.last().is_none_or(|l| *l < n), "ACKs must advance: {seen:?} then {n}");
                seen.push(n);
                if n >= count {
                    assert_eq!(n, count, "ACK beyond the bytes sent");
                    return seen;
                }
            }
        }
    }

    pub fn close(&mut self, segment: SegmentId, len: u32, checksum: u32) {
        let mut out = Vec::new();
        wire::encode_close(segment, len, checksum, &mut out);
        self.send(&out);
        let f = self.recv_skip_acks().expect("CLOSED");
        assert_eq!((f.kind, f.segment), (Kind::Closed, segment), "CLOSE answered {f:?}: {}", f.text());
        assert_eq!(f.u32(), len);
    }

    pub fn free(&mut self, segment: SegmentId) {
        let mut out = Vec::new();
        wire::encode_empty(Kind::Free, segment, &mut out);
        self.send(&out);
    }

    /// Conventional mode: one APPEND, answered APPENDED with the count.
    pub fn append(&mut self, segment: SegmentId, offset: u32, bytes: &[u8]) -> Frame {
        let mut out = Vec::new();
        wire::encode_data_prefix(Kind::Append, segment, offset, bytes.len(), &mut out);
        out.extend_from_slice(bytes);
        self.send(&out);
        self.recv().expect("an answer to APPEND")
    }

    /// Reader mode: LIST.
    pub fn list(&mut self, log: LogId) -> Vec<wire::ReplicaInfo> {
        let mut out = Vec::new();
        wire::encode_u64(Kind::List, SegmentId(0), log.0, &mut out);
        self.send(&out);
        let f = self.recv().expect("LISTING");
        assert_eq!(f.kind, Kind::Listing, "LIST answered {:?}: {}", f.kind, f.text());
        let mut l = wire::decode_listing(&f.body).unwrap();
        l.sort_by_key(|r| r.segment);
        l
    }

    /// Reader mode: READ; `Err` with the ERROR text.
    pub fn read(&mut self, log: LogId, segment: SegmentId) -> Result<(wire::ReplicaState, Vec<u8>), String> {
        let mut out = Vec::new();
        wire::encode_u64(Kind::Read, segment, log.0, &mut out);
        self.send(&out);
        let f = self.recv().expect("SEGMENT or ERROR");
        match f.kind {
            Kind::Segment => {
                let (_, state, bytes) = wire::decode_segment(&f.body).unwrap();
                Ok((state, bytes.to_vec()))
            }
            Kind::Error => Err(f.text()),
            k => panic!("READ answered {k:?}"),
        }
    }
}

/// A reader connection's LIST.
pub fn list(addr: SocketAddr, log: LogId) -> Vec<wire::ReplicaInfo> {
    Peer::hello(addr, Mode::Reader, LogId(0), 0).list(log)
}

/// A reader connection's READ.
pub fn read(addr: SocketAddr, log: LogId, segment: SegmentId) -> Result<(wire::ReplicaState, Vec<u8>), String> {
    Peer::hello(addr, Mode::Reader, LogId(0), 0).read(log, segment)
}

// ---------------------------------------------------------------------------
// Real segments, recorded from a store.

/// What the store's log did to one segment, in order.
#[derive(Clone, Debug, Default)]
pub struct SegmentRecord {
    pub kind: Option<SegmentKind>,
    pub appends: Vec<(u32, Vec<u8>)>,
    pub closed: Option<(u32, u32)>,
}

impl SegmentRecord {
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for (off, a) in &self.appends {
            assert_eq!(*off as usize, b.len());
            b.extend_from_slice(a);
        }
        b
    }
}

/// A `LogObserver` that records everything.
#[derive(Default)]
pub struct Recorder {
    pub segments: Mutex<BTreeMap<SegmentId, SegmentRecord>>,
    pub order: Mutex<Vec<SegmentId>>,
    pub freed: Mutex<Vec<SegmentId>>,
}

impl LogObserver for Recorder {
    fn segment_opened(&self, segment: SegmentId, kind: SegmentKind) {
        self.segments.lock().entry(segment).or_default().kind = Some(kind);
        self.order.lock().push(segment);
    }
    fn appended(&self, segment: SegmentId, offset: u32, bytes: &[u8]) {
        self.segments.lock().entry(segment).or_default().appends.push((offset, bytes.to_vec()));
    }
    fn segment_closed(&self, segment: SegmentId, len: u32, checksum: u32) {
        self.segments.lock().entry(segment).or_default().closed = Some((len, checksum));
    }
    fn segments_freed(&self, _survivors: &[SegmentId], freed: &[SegmentId]) {
        self.freed.lock().extend_from_slice(freed);
    }
}

pub fn store_config(log: LogId) -> StoreConfig {
    StoreConfig {
        memory_bytes: 8 << 20,
        segment_bytes: SEG as usize,
        seglet_bytes: 4 << 10,
        max_value_bytes: 2048,
        max_key_bytes: 64,
        log_id: log,
        cleaner_thread: false,
        ..StoreConfig::default()
    }
}

/// A store of log `log` with `n` objects of `value_len` bytes written to it.
pub fn store_with(log: LogId, n: usize, value_len: usize) -> (Store, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let store = Store::with_observer(store_config(log), Some(rec.clone())).unwrap();
    store.create_table(TableId(1));
    for i in 0..n {
        store.write(TableId(1), key(i).as_bytes(), &value(i, 0, value_len), Default::default()).unwrap();
    }
    (store, rec)
}

pub fn key(i: usize) -> String {
    format!("key-{i:05}")
}

pub fn value(i: usize, round: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7 + round * 13) as u8).collect()
}

/// Sends every append of `rec` to `peer` (already said HELLO) for `segment`:
/// OPEN, the DATA frames, the ACK wait and, if the segment was closed, CLOSE.
pub fn replicate(peer: &mut Peer, segment: SegmentId, rec: &SegmentRecord) {
    replicate_at(peer, segment, rec, 1)
}

/// [`replicate`] with the replica opened at `epoch`.
pub fn replicate_at(peer: &mut Peer, segment: SegmentId, rec: &SegmentRecord, epoch: u64) {
    let f = peer.open_at(segment, SEG, epoch);
    assert_eq!(f.kind, Kind::Opened, "OPEN answered {:?}: {}", f.kind, f.text());
    for (off, bytes) in &rec.appends {
        peer.data(segment, *off, bytes);
    }
    let total = rec.bytes().len() as u32;
    if total > 0 {
        peer.wait_ack(segment, total);
    }
    if let Some((len, checksum)) = rec.closed {
        peer.close(segment, len, checksum);
    }
}

/// Append groups built with the format's encoders: a segment header group,
/// then `n` groups of an object (and a tombstone in every other one).
/// Returns the bytes and each group's end.
pub fn groups(log: LogId, segment: SegmentId, n: usize) -> (Vec<u8>, Vec<usize>) {
    let mut seg = Vec::new();
    let mut crc = HeaderCrc::default();
    let mut ends = Vec::new();
    let group = |seg: &mut Vec<u8>, entries: &[Vec<u8>], crc: &mut HeaderCrc| {
        for e in entries {
            let h = format::read_header(e).unwrap();
            crc.add(&e[..h.header_len]);
            seg.extend_from_slice(e);
        }
        crc.add(&[6]);
        format::encode_checksum(seg, crc.value());
    };
    let mut hdr = Vec::new();
    format::encode_segment_header(&mut hdr, log, segment, SEG);
    let mut digest = Vec::new();
    format::encode_digest(&mut digest, &[segment]);
    group(&mut seg, &[hdr, digest], &mut crc);
    ends.push(seg.len());
    for i in 0..n {
        let mut a = Vec::new();
        format::encode_object(&mut a, TableId(1), Version(i as u64 + 1), key(i).as_bytes(), &value(i, 0, 20 + i));
        let mut b = Vec::new();
        format::encode_tombstone(&mut b, TableId(1), Version(i as u64), segment, b"old");
        let entries = if i % 2 == 0 { vec![a] } else { vec![a, b] };
        group(&mut seg, &entries, &mut crc);
        ends.push(seg.len());
    }
    (seg, ends)
}

/// The data bytes of the buffer file holding `(log, segment)` (found by its
/// metadata block: log at 8, segment at 24, state at 6).
pub fn buffer_data(dir: &Path, log: LogId, segment: SegmentId) -> Vec<u8> {
    for entry in std::fs::read_dir(dir.join("backup/buffers")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        if bytes[6] != 0 && u64_at(8) == log.0 && u64_at(24) == segment.0 {
            return bytes[4096..].to_vec();
        }
    }
    panic!("no buffer holds log {} segment {}", log.0, segment.0);
}
