//! A real cluster on 127.0.0.1: `shoal coordinator` and `shoal server`
//! processes with data directories in a temporary root.
//!
//! * Writes through the cluster client land on their keys' masters and are
//!   read back from any client.
//! * Whole-cluster SIGKILL under a write load, then a restart on the same
//!   directories: every acknowledged write is there (a ledger of them is
//!   checked one by one).
//! * A backup that stalls (its server stopped with SIGSTOP) mid-segment:
//!   the other masters re-open their replicas elsewhere and their writes go
//!   on.

use shoal_client::blocking::Client;
use shoal_client::{ClientConfig, TableId};
use shoal_cluster::{ClusterMap, ControlClient, ServerState};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A temporary root removed at the end (kept if the test failed, for its logs).
struct Root(PathBuf);

impl Root {
    fn new(name: &str) -> Root {
        let p = std::env::temp_dir().join(format!("shoal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Root(p)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Processes killed (SIGKILL) when dropped.
struct Cluster {
    coordinator: SocketAddr,
    coordinator_proc: Option<Child>,
    servers: Vec<Child>,
    root: PathBuf,
    replicas: u32,
}

fn log_file(dir: &Path) -> std::fs::File {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::OpenOptions::new().create(true).append(true).open(dir.join("log")).unwrap()
}

impl Cluster {
    /// Starts a coordinator on `port` (a fresh one if 0) and `n` servers.
    fn start(root: &Path, n: usize, replicas: u32, port: u16) -> Cluster {
        let port = if port == 0 { free_port() } else { port };
        let coordinator: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut c = Cluster { coordinator, coordinator_proc: None, servers: Vec::new(), root: root.into(), replicas };
        c.start_coordinator();
        for i in 0..n {
            let s = c.spawn_server(i);
            c.servers.push(s);
        }
        c.wait_up(n);
        c
    }

    fn start_coordinator(&mut self) {
        let dir = self.root.join("coordinator");
        let child = Command::new(SHOAL)
            .args(["coordinator", "--listen", &self.coordinator.to_string(), "--log-level", "info"])
            .args(["--replicas", &self.replicas.to_string()])
            .arg("--data-dir")
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .stderr(log_file(&dir))
            .spawn()
            .unwrap();
        self.coordinator_proc = Some(child);
    }

    fn spawn_server(&self, i: usize) -> Child {
        let dir = self.root.join(format!("server-{i}"));
        Command::new(SHOAL)
            .args(["server", "--coordinator", &self.coordinator.to_string()])
            .args(["--native-port", "0", "--resp-port", "0", "--backup-port", "0"])
            .args(["--memory", "64MiB", "--backup-buffers", "8", "--replica-timeout-ms", "1000"])
            .args(["--log-level", "info"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .stdout(Stdio::null())
            .stderr(log_file(&dir))
            .spawn()
            .unwrap()
    }

    fn map(&self) -> Option<ClusterMap> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(ControlClient::new(self.coordinator).with_timeout(Duration::from_secs(2)).get_map()).ok()
    }

    /// Waits until `n` servers are up (after a restart: recovered).
    fn wait_up(&self, n: usize) -> ClusterMap {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(map) = self.map() {
                if map.servers.iter().filter(|s| s.state == ServerState::Up).count() >= n {
                    return map;
                }
            }
            assert!(Instant::now() < deadline, "cluster not up in time; logs under {}", self.root.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn client(&self) -> Client {
        Client::connect_cluster(self.coordinator, ClientConfig::default()).expect("cluster client")
    }

    fn kill_all(&mut self) {
        for mut c in self.servers.drain(..).chain(self.coordinator_proc.take()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

fn stat(stats: &shoal_client::Stats, name: &str) -> Option<u64> {
    stats.iter().find(|(n, _)| n == name).and_then(|(_, v)| match v {
        shoal_client::StatValue::U64(v) => Some(*v),
        _ => None,
    })
}

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success());
}

#[test]
fn cluster_routes_writes_to_masters_and_reads_them_back() {
    let root = Root::new("cluster-routes");
    let cluster = Cluster::start(&root.0, 3, 2, 0);
    let mut c = cluster.client();
    let t = c.create_table("users").unwrap();
    for i in 0..2000u32 {
        c.write(t, format!("user{i}").as_bytes(), format!("v{i}").as_bytes()).unwrap();
    }
    // A second client with its own map reads everything back.
    let mut d = cluster.client();
    for i in 0..2000u32 {
        let v = d.read(t, format!("user{i}").as_bytes()).unwrap();
        assert_eq!(v.0, format!("v{i}").as_bytes());
    }
    // The table's tablets are spread over the three masters, and each holds some keys.
    let map = cluster.map().unwrap();
    let masters: std::collections::HashSet<_> = map.tablets.iter().filter(|x| x.table == t).map(|x| x.master).collect();
    assert_eq!(masters.len(), 3, "{map:?}");
    let mut per_server = Vec::new();
    for s in &map.servers {
        let mut one = Client::connect(s.native).unwrap();
        let objects = stat(&one.stats().unwrap(), "objects").unwrap();
        per_server.push(objects);
    }
    assert_eq!(per_server.iter().sum::<u64>(), 2000, "{per_server:?}");
    assert!(per_server.iter().all(|&n| n > 300), "{per_server:?}");
}

/// Writes by `threads` clients until `stop`; each acknowledged (key, value)
/// goes into the ledger (the last acknowledged value per key wins).
fn write_load(
    coordinator: SocketAddr,
    table: TableId,
    threads: usize,
    stop: Arc<AtomicBool>,
    keys: impl Fn(usize, u64) -> Option<Vec<u8>> + Send + Sync + 'static,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>, Arc<AtomicU64>) {
    let ledger = Arc::new(Mutex::new(HashMap::new()));
    let acks = Arc::new(AtomicU64::new(0));
    let keys = Arc::new(keys);
    let handles = (0..threads)
        .map(|t| {
            let (stop, ledger, keys, acks) = (stop.clone(), ledger.clone(), keys.clone(), acks.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect_cluster(coordinator, ClientConfig::default()).unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && n < 1_000_000 {
                    n += 1;
                    let Some(key) = keys(t, n) else { continue };
                    let value = format!("t{t}-n{n}").into_bytes();
                    match c.write(table, &key, &value) {
                        Ok(_) => {
                            ledger.lock().unwrap().insert(key, value);
                            acks.fetch_add(1, Ordering::Relaxed);
                        }
                        // The cluster is being killed: unacknowledged, so not in the ledger.
                        Err(_) => {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                            if let Ok(fresh) = Client::connect_cluster(coordinator, ClientConfig::default()) {
                                c = fresh;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    (handles, ledger, acks)
}

fn check_ledger(c: &mut Client, table: TableId, ledger: &HashMap<Vec<u8>, Vec<u8>>) {
    let mut missing = 0;
    for (k, v) in ledger {
        match c.read(table, k) {
            Ok(got) if &got.0 == v => {}
            Ok(got) => {
                // A later write of the same key may have reached the store but
                // not been acknowledged before the kill; it must be newer.
                let older = String::from_utf8_lossy(v);
                let newer = String::from_utf8_lossy(&got.0);
                let n = |s: &str| s.rsplit('n').next().unwrap().parse::<u64>().unwrap();
                let same_thread = older.split('-').next() == newer.split('-').next();
                assert!(same_thread && n(&newer) > n(&older), "key {k:?}: acknowledged {older}, found {newer}");
            }
            Err(e) => {
                missing += 1;
                eprintln!("key {:?}: {e}", String::from_utf8_lossy(k));
            }
        }
    }
    assert_eq!(missing, 0, "{missing} of {} acknowledged writes lost", ledger.len());
}

#[test]
fn whole_cluster_sigkill_and_restart_keeps_every_acknowledged_write() {
    let root = Root::new("cluster-restart");
    let mut cluster = Cluster::start(&root.0, 4, 2, 0);
    let port = cluster.coordinator.port();
    let table = cluster.client().create_table("ledger").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Each thread writes its own keys, so the ledger's last value is the newest.
    let (handles, ledger, _) = write_load(cluster.coordinator, table, 4, stop.clone(), |t, n| {
        Some(format!("t{t}-k{}", n % 5000).into_bytes())
    });
    std::thread::sleep(Duration::from_secs(3));
    cluster.kill_all();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let ledger = ledger.lock().unwrap().clone();
    assert!(ledger.len() > 1000, "only {} writes acknowledged", ledger.len());

    // Same directories, same coordinator port.
    let mut again = Cluster::start(&root.0, 4, 2, port);
    let mut c = again.client();
    check_ledger(&mut c, table, &ledger);
    again.kill_all();
}

#[test]
fn a_stalled_backup_is_replaced_and_writes_to_other_masters_go_on() {
    let root = Root::new("cluster-stall");
    let cluster = Cluster::start(&root.0, 4, 2, 0);
    let table = cluster.client().create_table("stall").unwrap();
    let map = {
        // The map with the new table's tablets.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let m = cluster.map().unwrap();
            if m.tablets.iter().any(|t| t.table == table) || Instant::now() > deadline {
                break m;
            }
        }
    };
    // Stop one server: its backup stalls (and its own keys are not written).
    // Servers enlist in any order, so find its process by its data directory's id.
    let victim = map.servers.iter().max_by_key(|s| s.id).unwrap().clone();
    let victim_idx = (0..cluster.servers.len())
        .find(|i| {
            let id = std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id"))).unwrap();
            id.trim() == victim.id.0.to_string()
        })
        .expect("the victim's process");
    let pid = cluster.servers[victim_idx].id();
    let victim_id = victim.id;
    let owned_by_victim = {
        let map = map.clone();
        move |key: &[u8]| {
            let h = shoal_client::key_hash(table, key);
            map.tablet(table, h).map(|t| t.master) == Some(victim.id)
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let keys = move |t: usize, n: u64| {
        let k = format!("t{t}-k{}", n % 3000).into_bytes();
        (!owned_by_victim(&k)).then_some(k)
    };
    let (handles, ledger, acks) = write_load(cluster.coordinator, table, 3, stop.clone(), keys);
    std::thread::sleep(Duration::from_secs(1));
    signal(pid, "-STOP");
    let stalled_at = acks.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(5));
    let after = acks.load(Ordering::Relaxed);
    signal(pid, "-CONT");
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert!(after > stalled_at + 100, "writes stopped with a stalled backup: {stalled_at} then {after}");
    let ledger = ledger.lock().unwrap().clone();
    let mut c = cluster.client();
    check_ledger(&mut c, table, &ledger);
    // The masters say they re-opened replicas.
    let mut reopened = 0;
    for s in map.servers.iter().filter(|s| s.id != victim_id) {
        let mut one = Client::connect(s.native).unwrap();
        reopened += stat(&one.stats().unwrap(), "replicas_reopened").unwrap();
    }
    assert!(reopened > 0, "no replica was re-opened");
}
