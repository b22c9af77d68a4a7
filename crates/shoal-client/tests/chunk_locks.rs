//! Chunk locks over the real protocol (`docs/chunks.md`, "Locks"): an
//! in-process server's native front end on 127.0.0.1 (port 0), the async
//! and blocking clients, and bad lock requests from a raw socket.

use shoal_client::blocking;
use shoal_client::*;
use shoal_proto::{check_frame, decode_response, encode_header, DEFAULT_MAX_BODY_BYTES, HEADER_LEN};
use shoal_server::{ByteSize, Server, ServerConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn start_with(f: impl FnOnce(&mut ServerConfig)) -> (Server, SocketAddr) {
    let mut config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        ..ServerConfig::default()
    };
    f(&mut config);
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

fn stat(c: &mut blocking::Client, name: &str) -> u64 {
    match c.stats().unwrap().into_iter().find(|(n, _)| n == name).map(|(_, v)| v) {
        Some(StatValue::U64(v)) => v,
        other => panic!("stat {name}: {other:?}"),
    }
}

const LEASE: Duration = Duration::from_secs(5);

#[test]
fn lock_shared_and_exclusive_between_two_clients() {
    let (_server, addr) = start_with(|_| {});
    let mut a = blocking::Client::connect(addr).unwrap();
    let mut b = blocking::Client::connect(addr).unwrap();
    assert_ne!(a.lock_owner(), b.lock_owner());
    let t = a.create_chunk_table("g").unwrap();
    let id = a.create_chunk(t, b"v").unwrap();

    let ra = a.try_lock_chunk(t, id, LockMode::Shared, LEASE).unwrap();
    let rb = b.try_lock_chunk(t, id, LockMode::Shared, LEASE).unwrap();
    assert!(rb.token > ra.token);
    assert_eq!(ra.lease, LEASE);
    assert!(matches!(b.try_lock_chunk(t, id, LockMode::Exclusive, LEASE), Err(LockError::Invalid(_))));
    a.unlock_chunk(&ra).unwrap();
    b.unlock_chunk(&rb).unwrap();

    let wa = a.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap();
    assert!(wa.token > rb.token);
    assert!(matches!(b.try_lock_chunk(t, id, LockMode::Shared, LEASE), Err(LockError::Busy { .. })));
    assert!(matches!(
        b.lock_chunk(t, id, LockMode::Exclusive, LEASE, Duration::from_millis(200)),
        Err(LockError::Timeout)
    ));
    // A repeated lock by the holder is the same grant.
    assert_eq!(a.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap().token, wa.token);
    assert_eq!(stat(&mut a, "chunk_locks_held"), 1);
    a.unlock_chunk(&wa).unwrap();
    assert!(matches!(a.unlock_chunk(&wa), Err(LockError::Lost)), "a second unlock");
    b.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap();
    assert!(stat(&mut a, "chunk_lock_busy") >= 2);
}

#[test]
fn lock_bad_input_gets_clear_errors() {
    let (_server, addr) = start_with(|_| {});
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_chunk_table("g").unwrap();
    let kv = c.create_table("kv").unwrap();
    let id = c.create_chunk(t, b"v").unwrap();
    // No such chunk, an id never created, a key-value table, no such table.
    assert!(matches!(c.try_lock_chunk(t, ChunkId(999), LockMode::Shared, LEASE), Err(LockError::NotFound)));
    assert!(matches!(c.try_lock_chunk(kv, id, LockMode::Shared, LEASE), Err(LockError::Invalid(_))));
    assert!(matches!(c.try_lock_chunk(TableId(77), id, LockMode::Shared, LEASE), Err(LockError::UnknownTable(_))));
    // Unlock of a lock never taken: a token the server never granted.
    let mut fake = c.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap();
    fake.token += 1000;
    assert!(matches!(c.unlock_chunk(&fake), Err(LockError::NotHeld)));
    fake.token = 42;
    assert!(matches!(c.renew_chunk_lock(&fake), Err(LockError::NotHeld)));
    // Held exclusively: asking for shared is refused, not granted twice.
    match c.try_lock_chunk(t, id, LockMode::Shared, LEASE) {
        Err(LockError::Invalid(why)) => assert!(why.contains("other mode"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Owner 0 is refused.
    c.set_lock_owner(0);
    assert!(matches!(c.try_lock_chunk(t, id, LockMode::Shared, LEASE), Err(LockError::Invalid(_))));
}

#[test]
fn remove_chunk_loses_its_lock_and_a_removed_chunk_cannot_be_locked() {
    let (_server, addr) = start_with(|_| {});
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_chunk_table("g").unwrap();
    let id = c.create_chunk(t, b"v").unwrap();
    let l = c.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap();
    c.remove_chunk(t, id).unwrap();
    assert!(matches!(c.renew_chunk_lock(&l), Err(LockError::Lost)));
    assert!(matches!(c.try_lock_chunk(t, id, LockMode::Exclusive, LEASE), Err(LockError::NotFound)));
    // The id is reused by the next create: its lock starts free.
    assert_eq!(c.create_chunk(t, b"w").unwrap(), id);
    let mut other = blocking::Client::connect(addr).unwrap();
    other.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap();
    assert_eq!(stat(&mut c, "chunk_locks_held"), 1);
}

#[test]
fn lease_expiry_hands_the_lock_over_and_fences_the_old_holder() {
    let (_server, addr) = start_with(|c| c.chunk_lock_max_lease_ms = 300);
    let mut a = blocking::Client::connect(addr).unwrap();
    let mut b = blocking::Client::connect(addr).unwrap();
    let t = a.create_chunk_table("g").unwrap();
    let id = a.create_chunk(t, b"v0").unwrap();
    // A lease above the server's maximum is cut to it.
    let la = a.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).unwrap();
    assert_eq!(la.lease, Duration::from_millis(300));
    a.put_chunk_locked(&la, b"a1").unwrap();
    // A stops renewing (a pause, a partition): B waits and gets the lock.
    let start = Instant::now();
    let lb = b.lock_chunk(t, id, LockMode::Exclusive, LEASE, Duration::from_secs(5)).unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(250), "granted after {waited:?}, before the lease ran out");
    assert!(lb.token > la.token);
    // A's late write is refused; B's goes in.
    assert!(matches!(a.put_chunk_locked(&la, b"a2"), Err(LockError::Lost)));
    assert!(matches!(a.renew_chunk_lock(&la), Err(LockError::Lost)));
    b.put_chunk_locked(&lb, b"b1").unwrap();
    assert_eq!(a.get_chunk(t, id).unwrap().0, b"b1".to_vec());
    // A shared lock is not enough for a fenced put.
    b.unlock_chunk(&lb).unwrap();
    let r = b.try_lock_chunk(t, id, LockMode::Shared, LEASE).unwrap();
    assert!(matches!(b.put_chunk_locked(&r, b"b2"), Err(LockError::Lost)));
    assert!(stat(&mut a, "chunk_lock_lease_expiries") >= 1);
}

#[test]
fn lock_table_full_is_refused_with_its_limit() {
    let (_server, addr) = start_with(|c| {
        c.chunk_lock_limit = 4;
        c.chunk_lock_owner_limit = Some(4);
    });
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_chunk_table("g").unwrap();
    let payloads: Vec<&[u8]> = vec![b"x"; 6];
    let ids = c.create_chunks(t, &payloads).unwrap();
    for id in &ids[..4] {
        c.try_lock_chunk(t, *id, LockMode::Shared, LEASE).unwrap();
    }
    assert!(matches!(c.try_lock_chunk(t, ids[4], LockMode::Shared, LEASE), Err(LockError::TableFull { limit: 4 })));
    let held = c.try_lock_chunk(t, ids[0], LockMode::Shared, LEASE).unwrap();
    c.unlock_chunk(&held).unwrap();
    c.try_lock_chunk(t, ids[4], LockMode::Shared, LEASE).unwrap();
}

#[test]
fn owner_limit_refuses_one_owner_and_the_server_limit_bounds_many() {
    let (_server, addr) = start_with(|c| {
        c.chunk_lock_limit = 5;
        c.chunk_lock_owner_limit = Some(2);
    });
    let mut a = blocking::Client::connect(addr).unwrap();
    let mut b = blocking::Client::connect(addr).unwrap();
    let t = a.create_chunk_table("g").unwrap();
    let payloads: Vec<&[u8]> = vec![b"x"; 6];
    let ids = a.create_chunks(t, &payloads).unwrap();
    a.try_lock_chunk(t, ids[0], LockMode::Shared, LEASE).unwrap();
    let held = a.try_lock_chunk(t, ids[1], LockMode::Shared, LEASE).unwrap();
    // A third lock of the same owner, held or waited for, is refused at once.
    assert!(matches!(a.try_lock_chunk(t, ids[2], LockMode::Shared, LEASE), Err(LockError::OwnerLimit { limit: 2 })));
    let w = b.try_lock_chunk(t, ids[3], LockMode::Exclusive, LEASE).unwrap();
    let start = Instant::now();
    assert!(matches!(
        a.lock_chunk(t, ids[3], LockMode::Shared, LEASE, Duration::from_secs(5)),
        Err(LockError::OwnerLimit { limit: 2 })
    ));
    assert!(start.elapsed() < Duration::from_secs(2), "an owner limit is not retried");
    // A lock it holds is granted again (no new entry), and other owners go on.
    assert_eq!(a.try_lock_chunk(t, ids[1], LockMode::Shared, LEASE).unwrap().token, held.token);
    b.try_lock_chunk(t, ids[0], LockMode::Shared, LEASE).unwrap();
    assert_eq!(stat(&mut a, "chunk_lock_owners"), 2);
    assert_eq!(stat(&mut a, "chunk_lock_owner_limited"), 2);
    // Unlocking gives the owner room again.
    a.unlock_chunk(&held).unwrap();
    a.try_lock_chunk(t, ids[2], LockMode::Shared, LEASE).unwrap();
    // A client that takes another owner id escapes its cap (owner ids are
    // the client's choice), but not the server's limit: 5 entries in all.
    a.set_lock_owner(a.lock_owner() ^ 1);
    a.try_lock_chunk(t, ids[4], LockMode::Shared, LEASE).unwrap();
    assert!(matches!(a.try_lock_chunk(t, ids[5], LockMode::Shared, LEASE), Err(LockError::TableFull { limit: 5 })));
    b.unlock_chunk(&w).unwrap();
    a.try_lock_chunk(t, ids[5], LockMode::Shared, LEASE).unwrap();
}

/// Issue 18: a chunk evicted in cache mode (no remove) took its id's locks
/// with it only when their lease ran out, so a new chunk given the reused
/// id looked locked by the old holder, and the old holder's fenced put
/// wrote the new chunk.
#[test]
fn evicted_chunk_takes_its_locks_with_it() {
    let (_server, addr) = start_with(|c| c.eviction = shoal_engine::Eviction::Oldest);
    let mut a = blocking::Client::connect(addr).unwrap();
    let mut b = blocking::Client::connect(addr).unwrap();
    let t = a.create_chunk_table("g").unwrap();
    let kv = a.create_table("filler").unwrap();
    let id = a.create_chunk(t, b"old").unwrap();
    let old = a.try_lock_chunk(t, id, LockMode::Exclusive, Duration::from_secs(30)).unwrap();
    assert_eq!(stat(&mut a, "chunk_locks_held"), 1);
    // Fill the 64 MiB store until the chunk's segment is evicted.
    let value = vec![7u8; 60 << 10];
    let mut evicted = false;
    for i in 0..5_000u32 {
        a.write(kv, &i.to_le_bytes(), &value).unwrap();
        if i % 32 == 0 && matches!(a.get_chunk(t, id), Err(ReadError::NotFound)) {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "the chunk was never evicted");
    // The table's only freed id is handed out again: to a chunk nobody
    // locked, which the old holder's token cannot write.
    assert_eq!(b.create_chunk(t, b"new").unwrap(), id);
    let put = a.put_chunk_locked(&old, b"stale");
    assert!(matches!(put, Err(LockError::Lost)), "the old holder's fenced put: {put:?}");
    assert_eq!(b.get_chunk(t, id).unwrap().0, b"new".to_vec());
    let fresh = b.try_lock_chunk(t, id, LockMode::Exclusive, LEASE);
    assert!(fresh.is_ok(), "the new chunk is free to lock: {fresh:?}");
    b.put_chunk_locked(&fresh.unwrap(), b"new2").unwrap();
    assert!(matches!(a.renew_chunk_lock(&old), Err(LockError::Lost)));
    assert_eq!(stat(&mut a, "chunk_locks_held"), 1, "only the new chunk's lock");
}

/// Issue 18: dropping a chunk table left its chunks' locks in the lock
/// table until their leases ran out, counted against the server's and the
/// owner's limits.
#[test]
fn dropped_table_takes_its_locks_with_it() {
    let (_server, addr) = start_with(|c| {
        c.chunk_lock_limit = 10;
        c.chunk_lock_owner_limit = Some(2);
    });
    let mut a = blocking::Client::connect(addr).unwrap();
    let mut b = blocking::Client::connect(addr).unwrap();
    let t1 = a.create_chunk_table("g1").unwrap();
    let ids = a.create_chunks(t1, &[b"x", b"y"]).unwrap();
    let locks: Vec<_> =
        ids.iter().map(|id| a.try_lock_chunk(t1, *id, LockMode::Exclusive, Duration::from_secs(30)).unwrap()).collect();
    assert!(b.lock_chunk(t1, ids[0], LockMode::Exclusive, LEASE, Duration::from_millis(50)).is_err());
    assert_eq!((stat(&mut a, "chunk_locks_held"), stat(&mut a, "chunk_lock_waiters")), (2, 1));
    a.drop_table("g1").unwrap();
    assert_eq!((stat(&mut a, "chunk_locks_held"), stat(&mut a, "chunk_lock_waiters")), (0, 0));
    // The owner's room is back, and the freed ids (reused by the next
    // table's chunks) start unlocked.
    let t2 = a.create_chunk_table("g2").unwrap();
    let ids2 = a.create_chunks(t2, &[b"x", b"y"]).unwrap();
    let mut again: Vec<_> = ids2.clone();
    again.sort();
    let mut before = ids.clone();
    before.sort();
    assert_eq!(again, before, "the ids were reused");
    for id in &ids2 {
        a.try_lock_chunk(t2, *id, LockMode::Exclusive, LEASE).unwrap();
    }
    assert!(matches!(a.renew_chunk_lock(&locks[0]), Err(LockError::UnknownTable(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_chunk_waits_for_release_and_a_queued_writer_goes_before_readers() {
    let (_server, addr) = start_with(|_| {});
    let reader = Client::connect(addr).await.unwrap();
    let writer = Client::connect(addr).await.unwrap();
    let late = Client::connect(addr).await.unwrap();
    let t = reader.create_chunk_table("g").await.unwrap();
    let id = reader.create_chunk(t, b"v").await.unwrap();
    let r = reader.try_lock_chunk(t, id, LockMode::Shared, LEASE).await.unwrap();
    let w = writer.clone();
    let waiting =
        tokio::spawn(async move { w.lock_chunk(t, id, LockMode::Exclusive, LEASE, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The writer is queued: a later reader waits behind it.
    assert!(matches!(late.try_lock_chunk(t, id, LockMode::Shared, LEASE).await, Err(LockError::Busy { .. })));
    reader.unlock_chunk(&r).await.unwrap();
    let wl = waiting.await.unwrap().unwrap();
    assert!(wl.token > r.token);
    assert!(matches!(late.try_lock_chunk(t, id, LockMode::Shared, LEASE).await, Err(LockError::Busy { .. })));
    writer.unlock_chunk(&wl).await.unwrap();
    late.try_lock_chunk(t, id, LockMode::Shared, LEASE).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_keeper_renews_past_the_lease_until_dropped() {
    let (_server, addr) = start_with(|c| c.chunk_lock_max_lease_ms = 300);
    let holder = Client::connect(addr).await.unwrap();
    let other = Client::connect(addr).await.unwrap();
    let t = holder.create_chunk_table("g").await.unwrap();
    let id = holder.create_chunk(t, b"v").await.unwrap();
    let lock = holder.try_lock_chunk(t, id, LockMode::Exclusive, LEASE).await.unwrap();
    let keeper = holder.keep_chunk_lock(lock);
    // Four leases long, the lock stays held.
    let until = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < until {
        assert!(matches!(other.try_lock_chunk(t, id, LockMode::Shared, LEASE).await, Err(LockError::Busy { .. })));
        assert!(!keeper.is_lost());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.put_chunk_locked(keeper.lock(), b"kept").await.unwrap();
    keeper.unlock().await.unwrap();
    other.try_lock_chunk(t, id, LockMode::Shared, LEASE).await.unwrap();

    // A keeper whose lock is removed reports it lost.
    let id2 = holder.create_chunk(t, b"w").await.unwrap();
    let lock2 = holder.try_lock_chunk(t, id2, LockMode::Exclusive, LEASE).await.unwrap();
    let keeper2 = holder.keep_chunk_lock(lock2);
    holder.remove_chunk(t, id2).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !keeper2.is_lost() {
        assert!(Instant::now() < deadline, "the keeper did not notice the loss");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn frame(opcode: u8, id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_header(&mut out, opcode, 0, id);
    out.extend_from_slice(body);
    let len = (out.len() - HEADER_LEN) as u32;
    out[12..16].copy_from_slice(&len.to_le_bytes());
    out
}

/// Reads `n` response frames: (request id, status or OK).
fn read_frames(s: &mut TcpStream, n: usize) -> Vec<(u64, Result<(), ErrorStatus>)> {
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 4096];
    while out.len() < n {
        if let Some(h) = check_frame(&buf, DEFAULT_MAX_BODY_BYTES).unwrap() {
            let r = decode_response(h.opcode, &buf[HEADER_LEN..h.frame_len()]).unwrap().map(|_| ());
            out.push((h.request_id, r));
            buf.drain(..h.frame_len());
            continue;
        }
        let got = s.read(&mut chunk).unwrap();
        assert!(got > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..got]);
    }
    out
}

#[test]
fn malformed_lock_requests_get_errors_and_the_connection_goes_on() {
    let (_server, addr) = start_with(|_| {});
    let mut c = blocking::Client::connect(addr).unwrap();
    let t = c.create_chunk_table("g").unwrap();
    let id = c.create_chunk(t, b"v").unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let lock = |mode: u8, wait: u8, lease: u32| {
        let mut b = Vec::new();
        b.extend_from_slice(&t.0.to_le_bytes());
        b.extend_from_slice(&id.0.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        b.extend_from_slice(&[mode, wait]);
        b.extend_from_slice(&lease.to_le_bytes());
        b
    };
    let mut bytes = frame(27, 1, &lock(2, 0, 100)); // bad mode
    bytes.extend(frame(27, 2, &lock(1, 7, 100))); // bad wait flag
    bytes.extend(frame(27, 3, &lock(1, 0, 0))); // zero lease
    bytes.extend(frame(27, 4, &lock(1, 0, 100)[..20])); // truncated
    let mut long = lock(1, 0, 100);
    long.push(0);
    bytes.extend(frame(27, 5, &long)); // trailing byte
    let mut put = vec![0u8; 36];
    put[32] = 100;
    bytes.extend(frame(30, 6, &put)); // fenced put: payload length past the body
    bytes.extend(frame(28, 7, &[0u8; 31])); // unlock: short
    bytes.extend(frame(27, 8, &lock(1, 0, 100))); // a good one
    s.write_all(&bytes).unwrap();
    let got = read_frames(&mut s, 8);
    for (i, (rid, r)) in got.iter().enumerate() {
        assert_eq!(*rid, i as u64 + 1);
        if i < 7 {
            assert!(matches!(r, Err(ErrorStatus::MalformedRequest(_))), "request {rid}: {r:?}");
        } else {
            assert_eq!(*r, Ok(()), "the good lock is granted");
        }
    }
}
