//! Chunks on a real cluster (see `common`): every server creates chunks of
//! a chunk table with its own node id and serves its id range; clients
//! find an id's server in the map. Under a write load that keeps a ledger
//! of every acknowledged chunk write, one chunk master is SIGKILLed (or the
//! whole cluster is, and restarted on the same directories). Every
//! acknowledged write must be there afterwards, found under the same chunk
//! id at the server that took over its range.

mod common;

use common::*;
use shoal_client::{ChunkId, ClientConfig, ErrorStatus, Request, TableId};
use shoal_cluster::{ClusterMap, ServerState};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Ledger = Arc<Mutex<HashMap<ChunkId, Vec<u8>>>>;

/// Clients that each create chunks (every fourth write) and put new
/// payloads into their own chunks otherwise; a write enters the ledger
/// only once acknowledged.
struct ChunkLoad {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
    ledger: Ledger,
    acks: Arc<AtomicU64>,
}

impl ChunkLoad {
    fn start(coordinator: SocketAddr, table: TableId, threads: usize) -> ChunkLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::default();
        let acks = Arc::new(AtomicU64::new(0));
        let handles = (0..threads)
            .map(|t| {
                let (stop, ledger, acks) = (stop.clone(), ledger.clone(), acks.clone());
                std::thread::spawn(move || {
                    let config = ClientConfig::default();
                    let mut c = shoal_client::blocking::Client::connect_cluster(coordinator, config.clone()).unwrap();
                    let mut mine: Vec<ChunkId> = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) && n < 1_000_000 {
                        n += 1;
                        let payload = format!("t{t}-n{n}").into_bytes();
                        let done = if mine.is_empty() || n.is_multiple_of(4) {
                            c.create_chunk(table, &payload).inspect(|id| mine.push(*id))
                        } else {
                            let id = mine[(n as usize * 7) % mine.len()];
                            c.put_chunk(table, id, &payload).map(|_| id)
                        };
                        match done {
                            Ok(id) => {
                                ledger.lock().unwrap().insert(id, payload);
                                acks.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(5));
                                if let Ok(fresh) =
                                    shoal_client::blocking::Client::connect_cluster(coordinator, config.clone())
                                {
                                    c = fresh;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        ChunkLoad { stop, handles, ledger, acks }
    }

    fn acks(&self) -> u64 {
        self.acks.load(Ordering::Relaxed)
    }

    fn finish(self) -> HashMap<ChunkId, Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
        let ledger = self.ledger.lock().unwrap().clone();
        ledger
    }
}

/// Every acknowledged chunk write is there: the acknowledged payload, or a
/// later one of the same client (a put that reached the store before the
/// kill without being acknowledged).
fn check_ledger(c: &mut shoal_client::blocking::Client, table: TableId, ledger: &HashMap<ChunkId, Vec<u8>>) {
    let ids: Vec<ChunkId> = ledger.keys().copied().collect();
    let mut missing = 0;
    for batch in ids.chunks(500) {
        let got = c.get_chunks(table, batch).unwrap();
        for (id, g) in batch.iter().zip(got) {
            let want = String::from_utf8_lossy(&ledger[id]).into_owned();
            match g {
                Ok((payload, _)) if payload == ledger[id] => {}
                Ok((payload, _)) => {
                    let found = String::from_utf8_lossy(&payload).into_owned();
                    let n = |s: &str| s.rsplit('n').next().unwrap().parse::<u64>().unwrap();
                    let same_client = want.split('-').next() == found.split('-').next();
                    assert!(same_client && n(&found) > n(&want), "chunk {id}: acknowledged {want}, found {found}");
                }
                Err(e) => {
                    missing += 1;
                    eprintln!("chunk {id} ({want}): {e}");
                }
            }
        }
    }
    assert_eq!(missing, 0, "{missing} of {} acknowledged chunk writes lost", ledger.len());
}

fn wait_map(cluster: &Cluster, what: &str, secs: u64, f: impl Fn(&ClusterMap) -> bool) -> ClusterMap {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(m) = cluster.map() {
            if f(&m) {
                return m;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; logs under {}", cluster.root.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server of chunk `id` of `table` in `map`.
fn chunk_owner(map: &ClusterMap, table: TableId, id: ChunkId) -> shoal_cluster::ServerId {
    map.chunk_owner(table, id).unwrap_or_else(|| panic!("no range holds chunk {id}: {map:?}")).master
}

/// The index in `cluster.servers` of the process of server `id`.
fn process_of(root: &Root, cluster: &Cluster, id: shoal_cluster::ServerId) -> usize {
    (0..cluster.servers.len())
        .find(|i| {
            std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id")))
                .is_ok_and(|s| s.trim() == id.0.to_string())
        })
        .unwrap()
}

/// A chunk table spreads over the servers: creates from one client go to
/// each server in turn and carry its node id; every id is read back (one
/// at a time and in multi requests mixing servers, results in order)
/// through the id ranges of the map; a server refuses ids of another's
/// range with `UNKNOWN_TABLET`; puts and removes reach the owner.
#[test]
fn a_chunk_table_spreads_over_the_servers_and_ids_are_found_through_the_map() {
    let root = Root::new("chunks-spread");
    let cluster = Cluster::start(&root.0, 4, 1, 0);
    let mut c = cluster.client();
    let table = c.create_chunk_table("graph").unwrap();
    let map = wait_map(&cluster, "the chunk ranges", 10, |m| m.chunk_creators(table).count() == 4);
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(c.create_chunk(table, format!("v{i}").as_bytes()).unwrap());
    }
    let mut nodes: Vec<u16> = ids.iter().map(|id| id.node()).collect();
    nodes.sort();
    nodes.dedup();
    let servers: Vec<u16> = map.servers.iter().map(|s| s.id.0 as u16).collect();
    assert_eq!(nodes, servers, "every server created chunks with its own node id");
    // Batches of creates too (one request each, to one server).
    let batch: Vec<Vec<u8>> = (0..300).map(|i| format!("b{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
    let more = c.create_chunks(table, &refs).unwrap();
    assert!(more.iter().all(|id| id.node() == more[0].node()), "one create request, one server");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(chunk_owner(&map, table, *id).0, id.node() as u64);
        assert_eq!(c.get_chunk(table, *id).unwrap().0, format!("v{i}").into_bytes());
    }
    // One multi request over ids of every server, in a mixed order.
    let mut mixed: Vec<ChunkId> = ids.iter().rev().copied().collect();
    mixed.extend(more.iter().step_by(7));
    // Node id 0 is no server's (ids start at 1): an id of it is in no
    // range and was never handed out. (An id of a node id above every
    // server the map knows is sent back as UNKNOWN_TABLET instead: it may
    // be a server that enlisted after the map was made.)
    mixed.push(ChunkId::new(0, 1));
    let got = c.get_chunks(table, &mixed).unwrap();
    for (id, g) in mixed.iter().zip(&got) {
        match ids.iter().position(|x| x == id) {
            Some(i) => assert_eq!(g.as_ref().unwrap().0, format!("v{i}").into_bytes()),
            None if id.node() == 0 => assert!(g.is_err(), "an id in no range does not exist"),
            None => {
                let i = more.iter().position(|x| x == id).unwrap();
                assert_eq!(g.as_ref().unwrap().0, format!("b{i}").into_bytes());
            }
        }
    }
    // A server that does not own an id refuses it: the client's cue to
    // refresh its map.
    let id = ids[0];
    let owner = map.server(chunk_owner(&map, table, id)).unwrap().native;
    let other = map.servers.iter().find(|s| s.native != owner).unwrap().native;
    for req in [
        Request::ChunkGet { table, ids: vec![id] },
        Request::ChunkPut { table, items: vec![(id, b"x")] },
        Request::ChunkRemove { table, ids: vec![ids[1], id] },
    ] {
        let frame = c.conn(other).unwrap().call(&req).unwrap();
        match frame.reply().unwrap() {
            Err(ErrorStatus::UnknownTablet) => {}
            Err(status) => panic!("server {other} answered {status:?} for chunk {id} of server {owner}"),
            Ok(_) => panic!("server {other} served chunk {id} of server {owner}"),
        }
    }
    // Multi puts and removes split by owner, results in order.
    let items: Vec<(ChunkId, &[u8])> = ids.iter().map(|id| (*id, &b"put"[..])).collect();
    let versions = c.put_chunks(table, &items).unwrap();
    assert!(versions.iter().all(|v| v.as_ref().unwrap().0 == 2), "{versions:?}");
    let removed = c.remove_chunks(table, &ids[..20]).unwrap();
    assert!(removed.iter().all(|v| v.as_ref().unwrap().0 == 2), "{removed:?}");
    let after = c.get_chunks(table, &ids).unwrap();
    assert!(after[..20].iter().all(|g| g.is_err()));
    assert!(after[20..].iter().all(|g| g.as_ref().unwrap().0 == b"put".to_vec()));
}

#[test]
fn a_killed_chunk_master_is_recovered_and_no_acknowledged_chunk_write_is_lost() {
    let root = Root::new("chunks-kill-master");
    // Four servers: with one dead, each master still has two backups for R=2.
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_chunk_table("graph").unwrap();
    assert!(cluster.client().create_table("graph").is_err(), "the name is a chunk table");
    wait_map(&cluster, "the chunk ranges", 10, |m| m.chunk_creators(table).count() == 4);
    let load = ChunkLoad::start(cluster.coordinator, table, 3);
    std::thread::sleep(Duration::from_secs(2));
    let before = load.acks();
    assert!(before > 100, "only {before} chunk writes acknowledged before the kill");
    // The victim: the server of the chunk table's one tablet, which also
    // holds the range of its own chunk ids.
    let victim = cluster.map().unwrap().tablets.iter().find(|t| t.table == table).unwrap().master;
    let idx = process_of(&root, &cluster, victim);
    cluster.servers[idx].kill().unwrap();
    cluster.servers[idx].wait().unwrap();
    let map = wait_map(&cluster, "the recovery", 30, |m| {
        m.server(victim).is_some_and(|s| s.state == ServerState::Down)
            && m.recoveries.is_empty()
            && m.tablets.iter().all(|t| t.master != victim)
            && m.chunk_ranges.iter().all(|c| c.master != victim)
    });
    std::thread::sleep(Duration::from_millis(500));
    let ledger = load.finish();
    let created_before: usize = ledger.keys().filter(|id| id.node() as u64 == victim.0).count();
    assert!(created_before > 10, "{created_before} chunks of the victim in the ledger");
    let mut nodes: Vec<u16> = ledger.keys().map(|id| id.node()).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 4, "every server created chunks: {nodes:?}");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    // The recovery master serves the victim's chunks under their ids, and
    // creates new ones with its own node id; the victim creates no more.
    let old = *ledger.keys().find(|id| id.node() as u64 == victim.0).unwrap();
    let now = chunk_owner(&map, table, old);
    assert_eq!(map.server(now).unwrap().state, ServerState::Up);
    for _ in 0..6 {
        let fresh = c.create_chunk(table, b"after").unwrap();
        assert_ne!(fresh.node() as u64, victim.0);
        assert_eq!(chunk_owner(&map, table, fresh).0, fresh.node() as u64);
    }
    let v = c.put_chunk(table, old, b"put after recovery").unwrap();
    assert_eq!(c.get_chunk(table, old).unwrap(), (b"put after recovery".to_vec(), v));
    cluster.kill_all();
}

#[test]
fn whole_cluster_sigkill_and_restart_keeps_every_acknowledged_chunk_write() {
    let root = Root::new("chunks-restart");
    let mut cluster = Cluster::start(&root.0, 3, 2, 0);
    let port = cluster.coordinator.port();
    let table = cluster.client().create_chunk_table("graph").unwrap();
    let load = ChunkLoad::start(cluster.coordinator, table, 3);
    std::thread::sleep(Duration::from_secs(2));
    cluster.kill_all();
    let ledger = load.finish();
    assert!(ledger.len() > 100, "only {} chunks acknowledged", ledger.len());
    let mut again = Cluster::start(&root.0, 3, 2, port);
    let mut c = again.client();
    check_ledger(&mut c, table, &ledger);
    // Removed ids are reused after the restart, above their last version.
    let id = *ledger.keys().next().unwrap();
    let had = c.remove_chunk(table, id).unwrap();
    // Creates go to the three servers in turn: one of three lands on the
    // server of the removed id, which hands it out again.
    let created: Vec<ChunkId> = (0..3).map(|_| c.create_chunk(table, b"reused").unwrap()).collect();
    let reused = *created.iter().find(|x| x.node() == id.node()).expect("a create on every server");
    assert_eq!(reused, id, "the removed id is handed out again");
    assert!(c.get_chunk(table, reused).unwrap().1 > had);
    again.kill_all();
}
