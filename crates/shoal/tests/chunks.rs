//! Chunks on a real cluster (see `common`): clients create chunks and put
//! new payloads under a write load, keeping a ledger of every acknowledged
//! chunk write; then the chunk table's master is SIGKILLed (or the whole
//! cluster is, and restarted on the same directories). Every acknowledged
//! write must be there afterwards, found under the same chunk id, and new
//! chunks get ids of the server that serves the table now.

mod common;

use common::*;
use shoal_client::{ChunkId, ClientConfig, TableId};
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

/// The chunk table's one tablet's master.
fn chunk_master(map: &ClusterMap, table: TableId) -> shoal_cluster::ServerId {
    let tablets: Vec<_> = map.tablets.iter().filter(|t| t.table == table).collect();
    assert_eq!(tablets.len(), 1, "a chunk table has one tablet: {map:?}");
    tablets[0].master
}

#[test]
fn a_killed_chunk_master_is_recovered_and_no_acknowledged_chunk_write_is_lost() {
    let root = Root::new("chunks-kill-master");
    // Four servers: with one dead, each master still has two backups for R=2.
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_chunk_table("graph").unwrap();
    assert!(cluster.client().create_table("graph").is_err(), "the name is a chunk table");
    let map = wait_map(&cluster, "the chunk table", 10, |m| m.tables.iter().any(|t| t.id == table && t.chunks));
    let victim = chunk_master(&map, table);
    let load = ChunkLoad::start(cluster.coordinator, table, 3);
    std::thread::sleep(Duration::from_secs(2));
    let before = load.acks();
    assert!(before > 100, "only {before} chunk writes acknowledged before the kill");
    let idx = (0..cluster.servers.len())
        .find(|i| {
            std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id")))
                .is_ok_and(|s| s.trim() == victim.0.to_string())
        })
        .unwrap();
    cluster.servers[idx].kill().unwrap();
    cluster.servers[idx].wait().unwrap();
    let map = wait_map(&cluster, "the recovery", 30, |m| {
        m.server(victim).is_some_and(|s| s.state == ServerState::Down)
            && m.recoveries.is_empty()
            && m.tablets.iter().all(|t| t.master != victim)
    });
    std::thread::sleep(Duration::from_millis(500));
    let ledger = load.finish();
    let created_before: usize = ledger.keys().filter(|id| id.node() as u64 == victim.0).count();
    assert!(created_before > 10, "{created_before} chunks of the victim in the ledger");
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    // The recovery master serves the victim's chunks under their ids, and
    // creates new ones with its own node id.
    let now = chunk_master(&map, table);
    let fresh = c.create_chunk(table, b"after").unwrap();
    assert_eq!(fresh.node() as u64, now.0);
    let old = *ledger.keys().find(|id| id.node() as u64 == victim.0).unwrap();
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
    let reused = c.create_chunk(table, b"reused").unwrap();
    assert_eq!(reused, id, "the removed id is handed out again");
    assert!(c.get_chunk(table, reused).unwrap().1 > had);
    again.kill_all();
}
