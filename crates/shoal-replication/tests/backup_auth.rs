//! The backup port with a cluster secret: peers that speak the old
//! protocol or hold a wrong secret are refused before any frame, a member
//! writes only as the master it claimed, declared lengths allocate nothing
//! they should not, and connections per address are bounded.

mod backup_support;
mod master_common;

use backup_support::*;
use master_common::{store as master_store, wait, write, Tee, SEGMENT};
use parking_lot::Mutex;
use shoal_cluster::auth::{self, AuthError, ClusterSecret, Credential, Identity, Port};
use shoal_cluster::ServerId;
use shoal_engine::{LogId, SegmentId};
use shoal_replication::backup::{Backup, BackupConfig};
use shoal_replication::master::{ReplicationMode, Replicator, ReplicatorConfig};
use shoal_replication::restore;
use shoal_replication::wire::{self, Hello, Kind, Mode, HEADER_LEN};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

const LOG: LogId = LogId(7);

fn secret() -> ClusterSecret {
    ClusterSecret::from_bytes(b"the backup tests' cluster secret").unwrap()
}

fn secured_config(dir: &std::path::Path) -> BackupConfig {
    let mut c = config(dir);
    c.secret = Some(secret());
    c
}

/// A peer that proved the secret, claiming `master` (0: none).
fn member(addr: SocketAddr, master: u64) -> Peer {
    let mut p = Peer::connect(addr);
    let identity = (master != 0).then_some(Identity { id: master, credential: Credential([0; 32]) });
    auth::initiate_blocking(&mut p.s, &secret(), Port::Backup, identity).expect("the handshake succeeds");
    p
}

fn member_hello(addr: SocketAddr, master: u64, mode: Mode, log: LogId, version: u64) -> (Peer, wire::Kind, String) {
    let mut p = member(addr, master);
    let mut out = Vec::new();
    Hello { mode, master: ServerId(master), log, log_version: version }.encode(&mut out);
    p.send(&out);
    let f = p.recv().expect("an answer to HELLO");
    (p, f.kind, f.text())
}

fn listed(addr: SocketAddr, log: LogId) -> usize {
    let (mut r, kind, _) = member_hello(addr, 0, Mode::Reader, LogId(0), 0);
    assert_eq!(kind, Kind::HelloOk);
    r.list(log).len()
}

#[test]
fn old_protocol_and_wrong_secret_peers_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backup = Backup::start(secured_config(dir.path())).unwrap();
    let addr = backup.local_addr();
    let (_store, rec) = store_with(LOG, 50, 100);
    let (&segment, seg) = rec.segments.lock().iter().next().map(|(k, v)| (k, v.clone())).unwrap();

    // A member, as master 1, replicates a segment and keeps it open.
    let (mut master, kind, text) = member_hello(addr, 1, Mode::Tailwind, LOG, 1);
    assert_eq!(kind, Kind::HelloOk, "{text}");
    master.open_ok(segment);
    let first = &seg.appends[0];
    master.data(segment, first.0, &first.1);
    master.wait_ack(segment, first.1.len() as u32);
    assert_eq!(listed(addr, LOG), 1);

    // Old protocol: a reader's FREE_LOG, a fence with a huge version.
    for (mode, version) in [(Mode::Reader, 0), (Mode::Tailwind, u64::MAX)] {
        let mut stranger = Peer::connect(addr);
        let mut out = Vec::new();
        Hello { mode, master: ServerId(1), log: LOG, log_version: version }.encode(&mut out);
        wire::encode_u64(Kind::FreeLog, SegmentId(0), LOG.0, &mut out);
        stranger.send(&out);
        let why = stranger.expect_error_and_close();
        assert!(why.contains("handshake"), "{why}");
    }
    // A wrong secret.
    let mut stranger = Peer::connect(addr);
    let wrong = ClusterSecret::from_bytes(b"some other cluster's secret").unwrap();
    let err = auth::initiate_blocking(&mut stranger.s, &wrong, Port::Backup, None).unwrap_err();
    assert!(matches!(err, AuthError::WrongSecret), "{err}");
    drop(stranger);
    wait_stats(&backup, "three refusals", |s| s.protocol_errors >= 3);

    // Nothing changed: the replica is there and its master is not fenced.
    assert_eq!(listed(addr, LOG), 1);
    if let Some(second) = seg.appends.get(1) {
        master.data(segment, second.0, &second.1);
        master.wait_ack(segment, (first.1.len() + second.1.len()) as u32);
    }
}

#[test]
fn a_member_writes_only_as_the_master_it_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let backup = Backup::start(secured_config(dir.path())).unwrap();
    let addr = backup.local_addr();
    // Claimed server 2, says HELLO as master 1.
    let mut other = member(addr, 2);
    let mut out = Vec::new();
    Hello { mode: Mode::Tailwind, master: ServerId(1), log: LOG, log_version: 1 }.encode(&mut out);
    other.send(&out);
    let why = other.expect_error_and_close();
    assert!(why.contains("master 1") && why.contains("server 2"), "{why}");
    // Claimed nobody: no writing HELLO either.
    let mut anonymous = member(addr, 0);
    let mut out = Vec::new();
    Hello { mode: Mode::Conventional, master: ServerId(3), log: LOG, log_version: 1 }.encode(&mut out);
    anonymous.send(&out);
    let why = anonymous.expect_error_and_close();
    assert!(why.contains("master 3") && why.contains("no server"), "{why}");
    // A fence (master 0) is a HELLO and nothing after it.
    let (mut fence, kind, _) = member_hello(addr, 0, Mode::Tailwind, LOG, 2);
    assert_eq!(kind, Kind::HelloOk);
    let f = fence.open(SegmentId(1), SEG);
    assert_eq!(f.kind, Kind::Error, "{}", f.text());
    assert_eq!(listed(addr, LOG), 0);
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// 200 connections, each a conventional HELLO and an APPEND header that
/// declares 8 MiB (48 bytes), held open together: before the fix each made
/// the backup allocate and zero 8 MiB.
fn append_header_attack(addr: SocketAddr, handshake: bool) -> Vec<TcpStream> {
    let mut conns = Vec::new();
    for _ in 0..200 {
        let mut s = if handshake { member(addr, 1).s } else { TcpStream::connect(addr).unwrap() };
        let mut out = Vec::new();
        Hello { mode: Mode::Conventional, master: ServerId(1), log: LOG, log_version: 1 }.encode(&mut out);
        wire::encode_data_prefix(Kind::Append, SegmentId(1), 0, 8 << 20, &mut out);
        assert_eq!(out.len(), 2 * HEADER_LEN + wire::HELLO_LEN + wire::DATA_PREFIX);
        let _ = s.write_all(&out);
        conns.push(s);
    }
    conns
}

#[test]
fn declared_lengths_allocate_nothing_before_a_replica_admits_them() {
    const BOUND: u64 = 100 << 20;
    for secured in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = if secured { secured_config(dir.path()) } else { config(dir.path()) };
        c.segment_bytes = 8 << 20;
        c.buffers = 2;
        c.max_connections_per_ip = 1024;
        let backup = Backup::start(c).unwrap();
        let before = rss();
        // Unauthenticated on a secured backup; and, authenticated or not,
        // an APPEND to a segment not open on the connection.
        let mut held = append_header_attack(backup.local_addr(), false);
        if secured {
            held.extend(append_header_attack(backup.local_addr(), true));
        }
        std::thread::sleep(Duration::from_millis(500));
        let grown = rss().saturating_sub(before);
        assert!(grown < BOUND, "secured {secured}: RSS grew by {} MiB", grown >> 20);
        assert!(backup.stats().protocol_errors >= 200, "{:?}", backup.stats());
        drop(held);
    }
}

#[test]
fn connections_per_address_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = secured_config(dir.path());
    c.max_connections_per_ip = 3;
    let backup = Backup::start(c).unwrap();
    let held: Vec<Peer> = (0..3).map(|_| member(backup.local_addr(), 1)).collect();
    let mut extra = Peer::connect(backup.local_addr());
    let why = extra.expect_error_and_close();
    assert!(why.contains("too many connections from this address"), "{why}");
    drop(held);
    wait_stats(&backup, "the connections to close", |s| s.connections_active == 0);
    assert_eq!(listed(backup.local_addr(), LOG), 0);
}

#[test]
fn masters_and_readers_with_the_secret_replicate_and_read_back() {
    // This test binary's replication connections prove the secret.
    shoal_replication::dial::set_cluster_secret(Some(secret()));
    for mode in [ReplicationMode::Tailwind, ReplicationMode::Conventional] {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let backups: Vec<Backup> = dirs
            .iter()
            .map(|d| {
                let mut c = secured_config(d.path());
                c.segment_bytes = SEGMENT as u32;
                c.buffers = 8;
                Backup::start(c).unwrap()
            })
            .collect();
        let rep = Replicator::start(ReplicatorConfig {
            master: ServerId(1),
            log: LOG,
            log_version: 1,
            segment_bytes: SEGMENT as u32,
            mode,
            replica_timeout: Duration::from_millis(1000),
            floor_recorder: None,
        });
        let tee = Arc::new(Tee { rep: rep.clone(), log: Mutex::default() });
        let store = master_store(&tee);
        rep.set_backups(
            backups.iter().enumerate().map(|(i, b)| (ServerId(10 + i as u64), b.local_addr())).collect(),
            2,
        );
        write(&store, 2, 3000, 1000, 1);
        assert!(wait(&rep, rep.position(), 20), "{mode:?}: writes become durable");
        let addrs: Vec<SocketAddr> = backups.iter().map(|b| b.local_addr()).collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let found = rt.block_on(restore::find_log(&addrs, LOG, &restore::Floors::none())).unwrap();
        assert!(found.unreachable.is_empty() && found.head.is_some(), "{mode:?}");
        assert_eq!(backups.iter().map(|b| b.stats().protocol_errors).sum::<u64>(), 0);
        rep.shutdown();
    }
}
