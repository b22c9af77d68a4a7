//! The backup service driven with raw frames by a tiny test master: bytes
//! land exactly, ACKs count them, admission refuses, bad input ends only its
//! own connection without touching any buffer, a killed backup keeps what it
//! received, corrupt files are not served, FREE and FREE_LOG drop replicas.

mod backup_support;

use backup_support::*;
use shoal_engine::format;
use shoal_engine::{LogId, SegmentId, SegmentKind, TableId};
use shoal_replication::backup::Backup;
use shoal_replication::wire::{self, Hello, KeyRange, Kind, Mode, ReplicaState, HEADER_LEN};
use std::io::Write;

const LOG: LogId = LogId(42);
/// Where a segment file's bytes start: after its 4096-byte header block.
const FILE_DATA_AT: usize = 4096;

#[test]
fn tailwind_stream_lands_exactly_and_is_acked_cumulatively() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (_store, rec) = store_with(LOG, 300, 400);
    let segments = rec.segments.lock().clone();
    assert!(segments.len() >= 2, "the store should have filled several segments");

    let mut master = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    let mut sent = 0u64;
    for (&id, seg) in &segments {
        master.open_ok(id);
        // Every DATA frame goes out before any ACK is read (pipelining).
        let mut ends = Vec::new();
        for (off, bytes) in &seg.appends {
            master.data(id, *off, bytes);
            ends.push(*off + bytes.len() as u32);
        }
        let total = seg.bytes().len() as u32;
        sent += total as u64;
        for n in master.wait_ack(id, total) {
            assert!(ends.contains(&n), "ACK {n} is not at the end of a DATA frame");
        }
        if let Some((len, checksum)) = seg.closed {
            master.close(id, len, checksum);
        }
    }

    let mut reader = Peer::hello(backup.local_addr(), Mode::Reader, LogId(0), 0);
    let listed = reader.list(LOG);
    assert_eq!(listed.len(), segments.len());
    for (info, (&id, seg)) in listed.iter().zip(&segments) {
        let bytes = seg.bytes();
        assert_eq!(info.segment, id);
        assert_eq!(info.len as usize, bytes.len(), "an open replica lists its verified prefix: all of it");
        assert_eq!(info.log_version, 1);
        let state = if seg.closed.is_some() { ReplicaState::Closed } else { ReplicaState::Open };
        assert_eq!(info.state, state);
        assert_eq!(reader.read(LOG, id).unwrap(), (state, bytes));
    }

    // Closed replicas reach their files: header block, then exactly the bytes.
    let closed: Vec<_> = segments.iter().filter(|(_, s)| s.closed.is_some()).collect();
    wait_stats(&backup, "flushes", |s| s.segments_flushed == closed.len() as u64);
    for (&id, seg) in &closed {
        let file = std::fs::read(dir.path().join(format!("backup/segments/{}-{}.seg", LOG.0, id.0))).unwrap();
        assert_eq!(&file[FILE_DATA_AT..], &seg.bytes()[..]);
    }
    let s = backup.stats();
    assert_eq!(s.bytes_received, sent);
    assert_eq!(s.segments_opened, segments.len() as u64);
    assert_eq!(s.segments_closed, closed.len() as u64);
    assert_eq!(s.buffers_in_use, segments.len() - closed.len(), "flushed buffers are free again");
    assert_eq!(s.segments_on_disk, closed.len());
    assert_eq!(s.protocol_errors, 0);
}

#[test]
fn data_split_anywhere_lands_in_place() {
    // One DATA frame written to the socket a few bytes at a time: the
    // backup's reader resumes mid-header, mid-offset and mid-bytes.
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (seg, ends) = groups(LOG, SegmentId(1), 30);
    let mut master = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    master.open_ok(SegmentId(1));
    let mut frame = Vec::new();
    wire::encode_data_prefix(Kind::Data, SegmentId(1), 0, seg.len(), &mut frame);
    frame.extend_from_slice(&seg);
    for chunk in frame.chunks(7) {
        master.send(chunk);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    master.wait_ack(SegmentId(1), seg.len() as u32);
    master.close(SegmentId(1), seg.len() as u32, format::scan(&seg).last_checksum);
    assert_eq!(*ends.last().unwrap(), seg.len());
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(1)).unwrap(), (ReplicaState::Closed, seg));
}

#[test]
fn open_is_refused_without_a_free_buffer_or_over_the_flush_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.buffers = 2;
    let backup = Backup::start(c).unwrap();
    let mut master = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    master.open_ok(SegmentId(1));
    master.open_ok(SegmentId(2));
    let f = master.open(SegmentId(3), SEG);
    assert_eq!(f.kind, Kind::Refused, "{}", f.text());
    assert_eq!(f.segment, SegmentId(3));
    let f = master.open(SegmentId(4), SEG + 1);
    assert_eq!(f.kind, Kind::Refused, "a segment larger than the buffers: {}", f.text());
    // The connection carries on: a FREE makes room.
    master.free(SegmentId(1));
    master.open_ok(SegmentId(3));
    let s = backup.stats();
    assert_eq!((s.refusals, s.buffers_total, s.buffers_in_use), (1, 2, 2));

    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.flush_limit = 0;
    let backup = Backup::start(c).unwrap();
    let mut master = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    let f = master.open(SegmentId(1), SEG);
    assert_eq!(f.kind, Kind::Refused, "a zero flush limit admits nothing");
    assert!(f.text().contains("waiting for the disk"), "{}", f.text());
}

/// Bad input of every kind: each ends its own connection with ERROR, and
/// neither the other connections nor any buffer notice.
#[test]
fn bad_frames_end_their_connection_and_touch_no_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let addr = backup.local_addr();
    let (seg, ends) = groups(LOG, SegmentId(7), 10);
    let first = ends[3];
    let mut good = Peer::hello(addr, Mode::Tailwind, LOG, 1);
    good.open_ok(SegmentId(7));
    good.data(SegmentId(7), 0, &seg[..first]);
    good.wait_ack(SegmentId(7), first as u32);

    let hello = |mode: u8, magic: &[u8; 4], version: u16| {
        let mut out = Vec::new();
        Hello { mode: Mode::Tailwind, master: shoal_cluster::ServerId(1), log: LOG, log_version: 1 }.encode(&mut out);
        out[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(magic);
        out[HEADER_LEN + 4..HEADER_LEN + 6].copy_from_slice(&version.to_le_bytes());
        out[HEADER_LEN + 6] = mode;
        out
    };
    let frame = |kind: u8, seg: u64, body: &[u8]| {
        let mut out = vec![kind, 0, 0, 0];
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&seg.to_le_bytes());
        out.extend_from_slice(body);
        out
    };
    let data_7_at = |offset: u32, len: usize| {
        let mut out = Vec::new();
        wire::encode_data_prefix(Kind::Data, SegmentId(7), offset, len, &mut out);
        out.extend(std::iter::repeat_n(0xee, len));
        out
    };
    let before_hello: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("bad magic", hello(0, b"XXXX", wire::PROTOCOL_VERSION)),
        ("protocol version 1 (no replica epochs)", hello(0, b"SHRB", 1)),
        ("protocol version 3", hello(0, b"SHRB", 3)),
        ("mode 3", hello(3, b"SHRB", wire::PROTOCOL_VERSION)),
        ("OPEN before HELLO", frame(Kind::Open as u8, 1, &[0; 8])),
        ("HELLO too long", frame(Kind::Hello as u8, 0, &[0; 40])),
    ];
    let after_hello: Vec<(&str, Vec<u8>)> = vec![
        ("unknown kind", frame(0x7f, 0, &[])),
        ("nonzero flags", {
            let mut f = frame(Kind::Free as u8, 7, &[]);
            f[1] = 1;
            f
        }),
        ("body above the limit", frame(Kind::Data as u8, 7, &vec![0; SEG as usize + 100])),
        ("OPEN with a 7-byte body", frame(Kind::Open as u8, 9, &[0; 7])),
        ("OPEN with protocol version 1's 8-byte body", frame(Kind::Open as u8, 9, &[0, 0, 1, 0, 0, 0, 0, 0])),
        ("OPEN at epoch 0", {
            let mut body = [0u8; wire::OPEN_LEN];
            body[..4].copy_from_slice(&SEG.to_le_bytes());
            frame(Kind::Open as u8, 9, &body)
        }),
        ("EPOCH with a 4-byte body", frame(Kind::Epoch as u8, 7, &[2, 0, 0, 0])),
        ("EPOCH 0", frame(Kind::Epoch as u8, 7, &0u64.to_le_bytes())),
        ("LIST on a Tailwind connection", frame(Kind::List as u8, 0, &LOG.0.to_le_bytes())),
        ("an answer kind", frame(Kind::Ack as u8, 7, &100u32.to_le_bytes())),
        ("a second HELLO", hello(0, b"SHRB", wire::PROTOCOL_VERSION)),
        ("DATA for a segment another connection opened", data_7_at(first as u32, 50)),
        ("DATA shorter than its offset", frame(Kind::Data as u8, 7, &[1, 2])),
        ("CLOSE of a segment not open", {
            let mut out = Vec::new();
            wire::encode_close(SegmentId(7), first as u32, 1, &mut out);
            out
        }),
    ];
    let cases = before_hello.len() + after_hello.len();
    for (what, bytes) in before_hello {
        let mut p = Peer::connect(addr);
        p.send(&bytes);
        let msg = p.expect_error_and_close();
        assert!(!msg.is_empty(), "{what}: ERROR carries a reason");
    }
    for (what, bytes) in after_hello {
        let mut p = Peer::hello(addr, Mode::Tailwind, LOG, 1);
        p.send(&bytes);
        let msg = p.expect_error_and_close();
        assert!(!msg.is_empty(), "{what}: ERROR carries a reason");
    }
    assert_eq!(backup.stats().protocol_errors, cases as u64);
    let untouched = |dir: &std::path::Path, len: usize| {
        let data = buffer_data(dir, LOG, SegmentId(7));
        assert_eq!(&data[..len], &seg[..len]);
        assert!(data[len..].iter().all(|b| *b == 0), "bytes beyond the {len} received must still be zero");
    };
    untouched(dir.path(), first);

    // The good connection never noticed.
    good.data(SegmentId(7), first as u32, &seg[first..ends[5]]);
    good.wait_ack(SegmentId(7), ends[5] as u32);
    untouched(dir.path(), ends[5]);
    // Its own bad frames: out of order, then past the segment's end.
    good.send(&data_7_at(ends[5] as u32 + 1, 10));
    good.expect_error_and_close();
    untouched(dir.path(), ends[5]);
    let mut again = Peer::hello(addr, Mode::Tailwind, LOG, 1);
    again.open_ok(SegmentId(8));
    let mut past_end = Vec::new();
    wire::encode_data_prefix(Kind::Data, SegmentId(8), 0, 10, &mut past_end);
    past_end[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&(SEG - 5).to_le_bytes());
    past_end.extend_from_slice(&[0xee; 10]);
    again.send(&past_end);
    again.expect_error_and_close();
    assert!(buffer_data(dir.path(), LOG, SegmentId(8)).iter().all(|b| *b == 0));
    // The replica keeps its verified prefix for readers.
    assert_eq!(read(addr, LOG, SegmentId(7)).unwrap(), (ReplicaState::Open, seg[..ends[5]].to_vec()));
}

#[test]
fn fencing_refuses_an_older_log_version_and_cuts_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let addr = backup.local_addr();
    let (seg, ends) = groups(LOG, SegmentId(1), 4);
    let mut old = Peer::hello(addr, Mode::Tailwind, LOG, 1);
    old.open_ok(SegmentId(1));
    old.data(SegmentId(1), 0, &seg[..ends[1]]);
    old.wait_ack(SegmentId(1), ends[1] as u32);

    let mut new = Peer::hello(addr, Mode::Tailwind, LOG, 2);
    new.open_ok(SegmentId(2));
    let mut stale = Peer::connect(addr);
    assert_eq!(stale.say_hello(Mode::Tailwind, LOG, 1).kind, Kind::Error);
    assert!(stale.recv().is_none());
    // Another log is not affected.
    Peer::hello(addr, Mode::Tailwind, LogId(43), 1);
    // The old master's next frame is refused; its bytes stay as they were.
    old.data(SegmentId(1), ends[1] as u32, &seg[ends[1]..]);
    assert!(old.expect_error_and_close().contains("fenced"));
    assert_eq!(read(addr, LOG, SegmentId(1)).unwrap().1, seg[..ends[1]].to_vec());

    // The version seen survives a restart through the buffers' metadata.
    drop((new, backup));
    let backup = start(dir.path());
    let mut stale = Peer::connect(backup.local_addr());
    assert_eq!(stale.say_hello(Mode::Tailwind, LOG, 1).kind, Kind::Error);
    Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 2);
}

#[test]
fn restart_serves_open_prefixes_and_closed_files() {
    let dir = tempfile::tempdir().unwrap();
    let (a, a_ends) = groups(LOG, SegmentId(1), 6);
    let (b, b_ends) = groups(LOG, SegmentId(2), 6);
    let torn = b_ends[3] + 3; // three bytes into the fifth group
    {
        let backup = start(dir.path());
        let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 3);
        m.open_ok(SegmentId(1));
        m.data(SegmentId(1), 0, &a);
        m.wait_ack(SegmentId(1), a.len() as u32);
        m.close(SegmentId(1), a.len() as u32, format::scan(&a).last_checksum);
        m.open_ok(SegmentId(2));
        m.data(SegmentId(2), 0, &b[..torn]);
        m.wait_ack(SegmentId(2), torn as u32);
        wait_stats(&backup, "the flush of segment 1", |s| s.segments_flushed == 1);
    }
    let backup = start(dir.path());
    let listed = list(backup.local_addr(), LOG);
    assert_eq!(listed.len(), 2);
    assert_eq!((listed[0].state, listed[0].len as usize), (ReplicaState::Closed, a.len()));
    assert_eq!((listed[1].state, listed[1].len as usize), (ReplicaState::Open, b_ends[3]));
    assert_eq!(listed[1].log_version, 3);
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(1)).unwrap().1, a);
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(2)).unwrap().1, b[..b_ends[3]].to_vec());
    let s = backup.stats();
    assert_eq!((s.buffers_in_use, s.segments_on_disk), (1, 1));
    let _ = a_ends;
}

/// Run by `killed_backup_keeps_what_it_received` in a child process, which
/// it kills with SIGKILL.
#[test]
#[ignore = "a helper process for killed_backup_keeps_what_it_received"]
fn killed_backup_child() {
    let Ok(dir) = std::env::var("SHOAL_BACKUP_CHILD_DIR") else { return };
    let backup = start(std::path::Path::new(&dir));
    println!("ADDR {}", backup.local_addr());
    std::io::stdout().flush().unwrap();
    // Killed long before; never outlive a parent that died.
    std::thread::sleep(std::time::Duration::from_secs(60));
}

/// Kills the child process however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn killed_backup_keeps_what_it_received() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "killed_backup_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("SHOAL_BACKUP_CHILD_DIR", dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = std::io::BufReader::new(child.0.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the child prints its address").unwrap();
        // libtest prints "test killed_backup_child ... " first on that line.
        if let Some((_, a)) = line.split_once("ADDR ") {
            break a.trim().parse().unwrap();
        }
    };
    let (_store, rec) = store_with(LOG, 250, 400);
    let segments = rec.segments.lock().clone();
    let mut m = Peer::hello(addr, Mode::Tailwind, LOG, 1);
    for (&id, seg) in &segments {
        replicate(&mut m, id, seg);
    }
    // A torn append after the acknowledged ones on the head.
    let (&head, head_rec) = segments.iter().next_back().unwrap();
    assert!(head_rec.closed.is_none());
    let acked = head_rec.bytes();
    let mut tail = Vec::new();
    format::encode_object(&mut tail, shoal_engine::TableId(1), shoal_engine::Version(9999), b"torn", &[5; 100]);
    m.data(head, acked.len() as u32, &tail[..60]);
    // The torn bytes are in the buffer before the kill.
    m.wait_ack(head, acked.len() as u32 + 60);
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();

    let backup = start(dir.path());
    let listed = list(backup.local_addr(), LOG);
    assert_eq!(listed.len(), segments.len());
    for info in &listed {
        let seg = &segments[&info.segment];
        let bytes = seg.bytes();
        assert_eq!(info.len as usize, bytes.len(), "segment {}", info.segment.0);
        let (state, got) = read(backup.local_addr(), LOG, info.segment).unwrap();
        assert_eq!(state, if seg.closed.is_some() { ReplicaState::Closed } else { ReplicaState::Open });
        assert_eq!(got, bytes, "segment {} after the kill", info.segment.0);
    }
    // Whatever the flusher had not written yet, it writes now.
    let closed = segments.values().filter(|s| s.closed.is_some()).count();
    wait_stats(&backup, "flushes after restart", |s| s.segments_on_disk == closed && s.awaiting_flush == 0);
}

#[test]
fn a_flipped_bit_in_a_closed_file_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (seg, ends) = groups(LOG, SegmentId(5), 8);
    let (other, _) = groups(LOG, SegmentId(6), 8);
    let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    for (id, bytes) in [(SegmentId(5), &seg), (SegmentId(6), &other)] {
        m.open_ok(id);
        m.data(id, 0, bytes);
        m.close(id, bytes.len() as u32, format::scan(bytes).last_checksum);
    }
    wait_stats(&backup, "flushes", |s| s.segments_flushed == 2);
    let path = dir.path().join(format!("backup/segments/{}-5.seg", LOG.0));
    let good = std::fs::read(&path).unwrap();
    // A bit in an object's value: the header scan still passes, the entry's
    // CRC does not.
    let mut bad = good.clone();
    bad[FILE_DATA_AT + ends[4] - 10] ^= 0x04;
    assert_eq!(format::scan(&bad[FILE_DATA_AT..]).verified_len, seg.len());
    std::fs::write(&path, &bad).unwrap();
    // LIST answers from what the CLOSE recorded (it reads no file); READ
    // verifies every byte and refuses the corrupt replica.
    let listed = list(backup.local_addr(), LOG);
    assert_eq!(listed.iter().map(|r| r.segment).collect::<Vec<_>>(), vec![SegmentId(5), SegmentId(6)]);
    assert!(read(backup.local_addr(), LOG, SegmentId(5)).is_err());
    assert!(read(backup.local_addr(), LOG, SegmentId(5)).is_err());
    assert!(backup.stats().corrupt_replicas >= 2);
    // A bit in the last checksum entry.
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 0x80;
    std::fs::write(&path, &bad).unwrap();
    assert!(read(backup.local_addr(), LOG, SegmentId(5)).is_err());
    // Restored bytes are served again.
    std::fs::write(&path, &good).unwrap();
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(5)).unwrap().1, seg);

    // At start: a flipped header bit or a truncated file is skipped.
    drop(backup);
    let mut bad = good.clone();
    bad[20] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let other_path = dir.path().join(format!("backup/segments/{}-6.seg", LOG.0));
    let o = std::fs::read(&other_path).unwrap();
    std::fs::write(&other_path, &o[..o.len() - 1]).unwrap();
    let backup = start(dir.path());
    assert!(list(backup.local_addr(), LOG).is_empty());
    assert_eq!(backup.stats().segments_on_disk, 0);
}

/// A closed replica is flushed to its file (a 4096-byte header block, then
/// exactly its bytes, the last block partial) and served from there by
/// READ and READ_PART as it was received; a damaged header block is
/// refused when read, and the file skipped at the next start.
#[test]
fn flushed_replicas_round_trip_through_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (seg, _) = groups(LOG, SegmentId(3), 150);
    assert!(seg.len() > 2 * FILE_DATA_AT && seg.len() % FILE_DATA_AT != 0, "len {}", seg.len());
    let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    m.open_ok(SegmentId(3));
    m.data(SegmentId(3), 0, &seg);
    m.close(SegmentId(3), seg.len() as u32, format::scan(&seg).last_checksum);
    wait_stats(&backup, "the flush", |s| s.segments_flushed == 1 && s.buffers_in_use == 0);
    let path = dir.path().join(format!("backup/segments/{}-3.seg", LOG.0));
    let good = std::fs::read(&path).unwrap();
    assert_eq!(good.len(), FILE_DATA_AT + seg.len());
    assert_eq!(&good[..4], b"SHSG");
    assert!(good[56..FILE_DATA_AT].iter().all(|&b| b == 0), "the header block is zero padded");
    assert_eq!(&good[FILE_DATA_AT..], &seg[..]);

    let mut r = Peer::hello(backup.local_addr(), Mode::Reader, LogId(0), 0);
    let half = KeyRange::hashes(TableId(1), 0, u64::MAX / 2);
    let mut expect = Vec::new();
    let f = format::filter_entries(&seg, |t, k: &[u8]| wire::in_ranges(&[half], t, k), &mut expect).unwrap();
    assert!(f.objects > 10 && expect.len() < seg.len(), "the range takes some of the keys");
    let read_part = |r: &mut Peer| {
        let mut out = Vec::new();
        wire::encode_read_part(LOG, SegmentId(3), &[half], &mut out);
        r.send(&out);
        let f = r.recv().expect("PART or ERROR");
        match f.kind {
            Kind::Part => {
                let (info, entries) = wire::decode_part(&f.body).unwrap();
                Ok((info.replica_len, entries.to_vec()))
            }
            Kind::Error => Err(f.text()),
            k => panic!("READ_PART answered {k:?}"),
        }
    };
    // Read twice: the second read reuses the first one's read buffer.
    for _ in 0..2 {
        assert_eq!(r.read(LOG, SegmentId(3)).unwrap(), (ReplicaState::Closed, seg.clone()));
        assert_eq!(read_part(&mut r).unwrap(), (seg.len() as u32, expect.clone()));
    }

    let mut bad = good.clone();
    bad[1000] = 1; // in the header block's padding
    std::fs::write(&path, &bad).unwrap();
    assert!(r.read(LOG, SegmentId(3)).is_err());
    let mut r = Peer::hello(backup.local_addr(), Mode::Reader, LogId(0), 0);
    assert!(read_part(&mut r).is_err());
    let corrupt = backup.stats().corrupt_replicas;
    assert!(corrupt >= 2, "{corrupt}");
    drop(backup);
    let backup = start(dir.path());
    assert!(list(backup.local_addr(), LOG).is_empty(), "skipped at start");
    assert_eq!(backup.stats().segments_on_disk, 0);
}

#[test]
fn conventional_appends_are_checked_copied_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (seg, ends) = groups(LOG, SegmentId(3), 12);
    let mut m = Peer::hello(backup.local_addr(), Mode::Conventional, LOG, 1);
    m.open_ok(SegmentId(3));
    let mut start = 0;
    for &end in &ends[..8] {
        let f = m.append(SegmentId(3), start as u32, &seg[start..end]);
        assert_eq!((f.kind, f.segment, f.u32()), (Kind::Appended, SegmentId(3), end as u32), "{}", f.text());
        start = end;
    }
    assert_eq!(backup.stats().conventional_appends, 8);
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(3)).unwrap().1, seg[..start].to_vec());

    // DATA is not allowed on a conventional connection.
    let mut p = Peer::hello(backup.local_addr(), Mode::Conventional, LOG, 1);
    p.data(SegmentId(3), start as u32, &seg[start..ends[8]]);
    p.expect_error_and_close();

    // A corrupt entry (a flipped value bit), then a wrong checksum entry:
    // refused, and the buffer is as it was.
    let mut bad = seg[start..ends[8]].to_vec();
    bad[10] ^= 1;
    let f = m.append(SegmentId(3), start as u32, &bad);
    assert_eq!(f.kind, Kind::Error);
    assert!(m.recv().is_none());
    let mut m = Peer::hello(backup.local_addr(), Mode::Conventional, LOG, 1);
    m.open_ok(SegmentId(4));
    let (other, other_ends) = groups(LOG, SegmentId(4), 3);
    let mut wrong = other[..other_ends[0]].to_vec();
    let n = wrong.len();
    wrong[n - 1] ^= 1;
    assert_eq!(m.append(SegmentId(4), 0, &wrong).kind, Kind::Error);
    let data = buffer_data(dir.path(), LOG, SegmentId(3));
    assert_eq!(&data[..start], &seg[..start]);
    assert!(data[start..].iter().all(|b| *b == 0));
    assert!(buffer_data(dir.path(), LOG, SegmentId(4)).iter().all(|b| *b == 0));
}

#[test]
fn free_and_free_log_drop_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let addr = backup.local_addr();
    let mut m = Peer::hello(addr, Mode::Tailwind, LOG, 1);
    let mut other = Peer::hello(addr, Mode::Tailwind, LogId(7), 1);
    for id in 1..=4 {
        let (seg, _) = groups(LOG, SegmentId(id), 3);
        m.open_ok(SegmentId(id));
        m.data(SegmentId(id), 0, &seg);
        m.wait_ack(SegmentId(id), seg.len() as u32);
        if id != 4 {
            m.close(SegmentId(id), seg.len() as u32, format::scan(&seg).last_checksum);
        }
    }
    let (seg, _) = groups(LogId(7), SegmentId(1), 3);
    other.open_ok(SegmentId(1));
    other.data(SegmentId(1), 0, &seg);
    other.wait_ack(SegmentId(1), seg.len() as u32);
    wait_stats(&backup, "flushes", |s| s.segments_flushed == 3);
    let file = |id: u64| dir.path().join(format!("backup/segments/{}-{id}.seg", LOG.0));
    assert!(file(2).exists());

    m.free(SegmentId(2)); // on disk
    m.free(SegmentId(4)); // open
    m.free(SegmentId(99)); // not held: ignored
    wait_for("FREE", || list(addr, LOG).len() == 2);
    assert!(!file(2).exists());
    assert_eq!(list(addr, LOG).iter().map(|r| r.segment.0).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(backup.stats().buffers_in_use, 1, "only the other log's open replica");

    let mut r = Peer::hello(addr, Mode::Reader, LogId(0), 0);
    let mut out = Vec::new();
    wire::encode_u64(Kind::FreeLog, SegmentId(0), LOG.0, &mut out);
    r.send(&out);
    assert_eq!(r.recv().unwrap().kind, Kind::Freed);
    assert!(r.list(LOG).is_empty());
    assert!(!file(1).exists() && !file(3).exists());
    assert_eq!(r.list(LogId(7)).len(), 1, "another log keeps its replicas");
    let s = backup.stats();
    assert_eq!((s.segments_freed, s.buffers_in_use, s.segments_on_disk), (4, 1, 0));
}

/// A torn write into a pre-zeroed buffer, through the backup's own path:
/// each prefix of an append group (records and checksum) arrives after a
/// complete one; the replica's verified prefix is the complete append
/// until the last byte of the torn one arrived. Cuts go from longest to
/// shortest, each in the same buffer re-opened, so bytes left over from a
/// longer cut would show.
#[test]
fn torn_appends_scan_to_the_last_complete_one() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (seg, ends) = groups(LOG, SegmentId(1), 2);
    let (complete, torn) = (ends[1], ends[2]);
    assert!(torn - complete > 30, "the torn group holds an object, a tombstone and a checksum");
    let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    let mut r = Peer::hello(backup.local_addr(), Mode::Reader, LogId(0), 0);
    for cut in (complete..=torn).rev() {
        m.open_ok(SegmentId(1));
        m.data(SegmentId(1), 0, &seg[..cut]);
        m.wait_ack(SegmentId(1), cut as u32);
        let expect = if cut == torn { torn } else { complete };
        let (_, got) = r.read(LOG, SegmentId(1)).unwrap();
        assert_eq!(got, seg[..expect].to_vec(), "cut at {cut}");
        assert_eq!(r.list(LOG)[0].len as usize, expect, "cut at {cut}");
    }
    assert_eq!(backup.stats().buffers_in_use, 1, "re-opening reuses the replica's buffer");
}

#[test]
fn connections_above_the_limit_are_turned_away() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_connections = 1;
    let backup = Backup::start(c).unwrap();
    let first = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    let mut second = Peer::connect(backup.local_addr());
    assert!(second.expect_error_and_close().contains("too many"));
    assert_eq!(backup.stats().connections_refused, 1);
    drop(first);
    wait_stats(&backup, "the first connection to end", |s| s.connections_active == 0);
    Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
}

#[test]
fn sync_open_acks_after_syncing() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.sync_open = true;
    let backup = Backup::start(c).unwrap();
    let (_store, rec) = store_with(LOG, 40, 300);
    let segments = rec.segments.lock().clone();
    let (&id, seg) = segments.iter().next().unwrap();
    assert_eq!(seg.kind, Some(SegmentKind::Head));
    let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    replicate(&mut m, id, seg);
    assert_eq!(read(backup.local_addr(), LOG, id).unwrap().1, seg.bytes());
}

#[test]
fn reopening_a_closed_replica_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let backup = start(dir.path());
    let (seg, ends) = groups(LOG, SegmentId(2), 4);
    let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    m.open_ok(SegmentId(2));
    m.data(SegmentId(2), 0, &seg);
    m.close(SegmentId(2), seg.len() as u32, format::scan(&seg).last_checksum);
    wait_stats(&backup, "the flush", |s| s.segments_flushed == 1);
    let file = dir.path().join(format!("backup/segments/{}-2.seg", LOG.0));
    assert!(file.exists());
    // The master re-opens the segment (say, after its connection failed).
    let mut again = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    again.open_ok(SegmentId(2));
    assert!(!file.exists(), "the old closed replica is gone");
    let listed = list(backup.local_addr(), LOG);
    assert_eq!((listed.len(), listed[0].state, listed[0].len), (1, ReplicaState::Open, 0));
    again.data(SegmentId(2), 0, &seg[..ends[2]]);
    again.wait_ack(SegmentId(2), ends[2] as u32);
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(2)).unwrap(), (ReplicaState::Open, seg[..ends[2]].to_vec()));
    let s = backup.stats();
    assert_eq!((s.segments_on_disk, s.buffers_in_use), (0, 1));
}

/// EPOCH raises a replica's epoch wherever the replica is: an open one (its
/// buffer's metadata), a closed one in its file (the header block
/// rewritten) and one closed with its EPOCH right behind the CLOSE (in its
/// buffer or its file, whichever the flusher left it in). LISTING reports
/// each epoch, and so does the next start of the backup; the bytes are
/// untouched. An epoch never goes down, and an EPOCH for a replica the
/// backup does not hold is an ERROR.
#[test]
fn epoch_raises_open_and_closed_replicas_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = groups(LOG, SegmentId(1), 6);
    let (b, b_ends) = groups(LOG, SegmentId(2), 6);
    let (c, _) = groups(LOG, SegmentId(3), 6);
    let epochs = |addr| list(addr, LOG).iter().map(|r| (r.segment.0, r.epoch, r.state)).collect::<Vec<_>>();
    let file = |seg: u64| dir.path().join(format!("backup/segments/{}-{seg}.seg", LOG.0));
    {
        let backup = start(dir.path());
        let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
        m.open_ok(SegmentId(1));
        m.data(SegmentId(1), 0, &a);
        m.close(SegmentId(1), a.len() as u32, format::scan(&a).last_checksum);
        wait_stats(&backup, "the flush of segment 1", |s| s.segments_flushed == 1);
        let f = m.open_at(SegmentId(2), SEG, 3);
        assert_eq!(f.kind, Kind::Opened);
        m.data(SegmentId(2), 0, &b[..b_ends[2]]);
        m.wait_ack(SegmentId(2), b_ends[2] as u32);
        assert_eq!(epochs(backup.local_addr()), vec![(1, 1, ReplicaState::Closed), (2, 3, ReplicaState::Open)]);

        m.epoch_ok(SegmentId(2), 4); // open, on this connection
        m.epoch_ok(SegmentId(1), 5); // on disk
        m.epoch_ok(SegmentId(1), 2); // lower: answered, changes nothing

        // DATA after an EPOCH lands as before.
        m.data(SegmentId(2), b_ends[2] as u32, &b[b_ends[2]..b_ends[4]]);
        m.wait_ack(SegmentId(2), b_ends[4] as u32);
        // Closed and raised at once: CLOSE, then EPOCH, in one write.
        m.open_ok(SegmentId(3));
        let mut out = Vec::new();
        wire::encode_data_prefix(Kind::Data, SegmentId(3), 0, c.len(), &mut out);
        out.extend_from_slice(&c);
        wire::encode_close(SegmentId(3), c.len() as u32, format::scan(&c).last_checksum, &mut out);
        wire::encode_epoch(Kind::Epoch, SegmentId(3), 6, &mut out);
        m.send(&out);
        let f = m.recv_skip_acks().unwrap();
        assert_eq!((f.kind, f.segment), (Kind::Closed, SegmentId(3)));
        let f = m.recv_skip_acks().unwrap();
        assert_eq!((f.kind, f.segment, wire::decode_epoch(&f.body)), (Kind::Epoched, SegmentId(3), Ok(6)));
        let want = vec![(1, 5, ReplicaState::Closed), (2, 4, ReplicaState::Open), (3, 6, ReplicaState::Closed)];
        assert_eq!(epochs(backup.local_addr()), want);
        wait_stats(&backup, "the flush of segment 3", |s| s.segments_flushed == 2);
        assert_eq!(epochs(backup.local_addr()), want, "the flush keeps the epoch");
        let header = std::fs::read(file(1)).unwrap();
        assert_eq!(header[44..52], 5u64.to_le_bytes(), "the file's header records the epoch");
        assert_eq!(&header[FILE_DATA_AT..], &a[..]);

        let mut other = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
        let f = other.epoch(SegmentId(9), 2);
        assert_eq!(f.kind, Kind::Error, "{}", f.text());
        assert!(other.recv().is_none());
    }
    let backup = start(dir.path());
    let want = vec![(1, 5, ReplicaState::Closed), (2, 4, ReplicaState::Open), (3, 6, ReplicaState::Closed)];
    assert_eq!(epochs(backup.local_addr()), want, "after a restart");
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(1)).unwrap().1, a);
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(2)).unwrap().1, b[..b_ends[4]].to_vec());
    assert_eq!(read(backup.local_addr(), LOG, SegmentId(3)).unwrap().1, c);
    // A new OPEN of a segment replaces its replica, at the OPEN's epoch.
    let mut m = Peer::hello(backup.local_addr(), Mode::Tailwind, LOG, 1);
    assert_eq!(m.open_at(SegmentId(1), SEG, 7).kind, Kind::Opened);
    assert_eq!(epochs(backup.local_addr())[0], (1, 7, ReplicaState::Open));
}
