//! A real cluster on 127.0.0.1 for the integration tests: `shoal
//! coordinator` and `shoal server` processes with data directories in a
//! temporary root, a write load that keeps a ledger of acknowledged writes,
//! and the check of a ledger against what the cluster returns.

#![allow(dead_code)]

use shoal_client::blocking::Client;
use shoal_client::{ClientConfig, TableId};
use shoal_cluster::{ClusterMap, ControlAuth, ControlClient, ServerState};
use shoal_server::tls::InternalPki;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// A port nobody listens on, below Linux's ephemeral range (32768 and up):
/// a port the kernel hands out for port-0 listeners and outgoing connections
/// could be taken by another process between this check and the bind of the
/// server it is for (seen: a coordinator's port taken by another test's
/// connection).
pub fn free_port() -> u16 {
    shoal_common::os::free_local_port().expect("a free port in 20000-31999")
}

/// A temporary root removed at the end (kept if the test failed, for its logs).
pub struct Root(pub PathBuf);

impl Root {
    pub fn new(name: &str) -> Root {
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
pub struct Cluster {
    pub coordinator: SocketAddr,
    pub coordinator_proc: Option<Child>,
    pub servers: Vec<Child>,
    pub root: PathBuf,
    pub replicas: u32,
    /// Flags every server is started with besides the defaults of
    /// [`Cluster::spawn_server`] (a `--memory` here replaces its 64MiB).
    pub server_args: Vec<String>,
    /// With internal TLS: the cluster CA in `<root>/internal-tls`, which
    /// signs each process's certificate (and the test's, `client`).
    pub internal: Option<InternalPki>,
    /// Flags the coordinator is started with besides the defaults of
    /// [`Cluster::start_coordinator_with`].
    pub coordinator_args: Vec<String>,
}

pub fn log_file(dir: &Path) -> std::fs::File {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::OpenOptions::new().create(true).append(true).open(dir.join("log")).unwrap()
}

impl Cluster {
    /// Starts a coordinator on `port` (a fresh one if 0) and `n` servers.
    pub fn start(root: &Path, n: usize, replicas: u32, port: u16) -> Cluster {
        Cluster::start_with(root, n, replicas, port, &[])
    }

    /// [`Cluster::start`] with `server_args` given to every server (later
    /// flags override the defaults, e.g. `--memory`).
    pub fn start_with(root: &Path, n: usize, replicas: u32, port: u16, server_args: &[&str]) -> Cluster {
        Cluster::launch(root, n, replicas, port, server_args, &[], false)
    }

    /// [`Cluster::start`] with `coordinator_args` given to the coordinator
    /// (each time it is started).
    pub fn start_with_coordinator(root: &Path, n: usize, replicas: u32, coordinator_args: &[&str]) -> Cluster {
        Cluster::launch(root, n, replicas, 0, &[], coordinator_args, false)
    }

    /// [`Cluster::start`] with mutual TLS on every internal connection
    /// (`--internal-tls-*`, certificates of a throwaway CA).
    pub fn start_internal_tls(root: &Path, n: usize, replicas: u32) -> Cluster {
        Cluster::launch(root, n, replicas, 0, &[], &[], true)
    }

    fn launch(
        root: &Path,
        n: usize,
        replicas: u32,
        port: u16,
        server_args: &[&str],
        coordinator_args: &[&str],
        internal_tls: bool,
    ) -> Cluster {
        let port = if port == 0 { free_port() } else { port };
        let coordinator: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let internal = internal_tls.then(|| InternalPki::create_or_load(&root.join("internal-tls")).unwrap());
        let mut c = Cluster {
            coordinator,
            coordinator_proc: None,
            servers: Vec::new(),
            root: root.into(),
            replicas,
            server_args: server_args.iter().map(|s| s.to_string()).collect(),
            internal,
            coordinator_args: coordinator_args.iter().map(|s| s.to_string()).collect(),
        };
        std::fs::create_dir_all(root).unwrap();
        shoal_cluster::auth::ClusterSecret::create_or_load(&c.secret_file()).unwrap();
        c.start_coordinator();
        for i in 0..n {
            let s = c.spawn_server(i);
            c.servers.push(s);
        }
        c.wait_up(n);
        c
    }

    /// The cluster secret every process of this cluster is given.
    pub fn secret_file(&self) -> PathBuf {
        self.root.join("cluster-secret")
    }

    /// Makes this test process's replication connections (`restore::*`)
    /// prove the cluster's secret, as its servers' do.
    pub fn dial_backups(&self) {
        let secret = shoal_cluster::auth::ClusterSecret::load(&self.secret_file()).unwrap();
        shoal_replication::dial::set_cluster_secret(Some(secret));
    }

    /// The `--internal-tls-*` flags of process `name` (none without
    /// internal TLS).
    pub fn internal_flags(&self, name: &str) -> Vec<String> {
        let Some(pki) = &self.internal else { return Vec::new() };
        let (cert, key) = pki.identity(name).unwrap();
        [("--internal-tls-cert", &cert), ("--internal-tls-key", &key), ("--internal-tls-ca", &pki.ca)]
            .iter()
            .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
            .collect()
    }

    /// This test's internal TLS identity (`client`), if the cluster has one.
    pub fn internal_tls(&self) -> Option<shoal_cluster::tls::InternalTls> {
        let pki = self.internal.as_ref()?;
        let (cert, key) = pki.identity("client").unwrap();
        Some(shoal_cluster::tls::InternalTls::load(&cert, &key, &pki.ca).unwrap())
    }

    /// A client configuration that reaches this cluster's coordinator.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig { coordinator_tls: self.internal_tls(), ..ClientConfig::default() }
    }

    pub fn start_coordinator(&mut self) {
        self.start_coordinator_with(&[]);
    }

    /// [`Cluster::start_coordinator`] with extra flags.
    pub fn start_coordinator_with(&mut self, extra: &[&str]) {
        let dir = self.root.join("coordinator");
        let child = Command::new(SHOAL)
            .args(["coordinator", "--listen", &self.coordinator.to_string(), "--log-level", "info"])
            .arg("--cluster-secret-file")
            .arg(self.secret_file())
            .args(extra)
            .args(&self.coordinator_args)
            .args(self.internal_flags("coordinator"))
            .args(["--replicas", &self.replicas.to_string()])
            .arg("--data-dir")
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .stderr(log_file(&dir))
            .spawn()
            .unwrap();
        self.coordinator_proc = Some(child);
    }

    pub fn spawn_server(&self, i: usize) -> Child {
        let dir = self.root.join(format!("server-{i}"));
        Command::new(SHOAL)
            .args(["server", "--coordinator", &self.coordinator.to_string()])
            .arg("--cluster-secret-file")
            .arg(self.secret_file())
            .args(["--native-port", "0", "--resp-port", "0", "--memcached-port", "0", "--backup-port", "0"])
            .args(["--backup-buffers", "8", "--replica-timeout-ms", "1000"])
            .args(if self.server_args.iter().any(|a| a == "--memory") { &[][..] } else { &["--memory", "64MiB"][..] })
            .args(["--log-level", "info"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(&self.server_args)
            .args(self.internal_flags(&format!("server-{i}")))
            .stdout(Stdio::null())
            .stderr(log_file(&dir))
            .spawn()
            .unwrap()
    }

    pub fn map(&self) -> Option<ClusterMap> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let auth = ControlAuth::anonymous_tls(self.internal_tls());
        rt.block_on(ControlClient::new(self.coordinator).with_timeout(Duration::from_secs(2)).with_auth(auth).get_map())
            .ok()
    }

    /// Waits until `n` servers are up (after a restart: recovered).
    pub fn wait_up(&self, n: usize) -> ClusterMap {
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

    pub fn client(&self) -> Client {
        Client::connect_cluster(self.coordinator, self.client_config()).expect("cluster client")
    }

    /// SIGKILLs every process, the coordinator first: a whole cluster
    /// losing power at once, with no server declared dead by the others
    /// while the rest are being killed one by one.
    pub fn kill_all(&mut self) {
        let mut all: Vec<Child> = self.coordinator_proc.take().into_iter().chain(self.servers.drain(..)).collect();
        for c in &mut all {
            let _ = c.kill();
        }
        for c in &mut all {
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

pub fn stat(stats: &shoal_client::Stats, name: &str) -> Option<u64> {
    stats.iter().find(|(n, _)| n == name).and_then(|(_, v)| match v {
        shoal_client::StatValue::U64(v) => Some(*v),
        _ => None,
    })
}

pub fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success());
}

/// Acknowledged writes: the last acknowledged value of each key.
pub type Ledger = Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>;

/// A write load from several cluster clients that keeps a ledger of
/// acknowledged writes (the last acknowledged value per key wins).
pub struct WriteLoad {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
    ledger: Ledger,
    acks: Arc<AtomicU64>,
}

impl WriteLoad {
    /// Starts `threads` clients; client t writes `keys(t, n)` for n = 1, 2,
    /// ... (skipping `None`) until [`WriteLoad::finish`] or a million writes.
    pub fn start(
        coordinator: impl Into<shoal_cluster::CoordinatorAddrs>,
        table: TableId,
        threads: usize,
        keys: impl Fn(usize, u64) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> WriteLoad {
        WriteLoad::start_with(coordinator, ClientConfig::default(), table, threads, keys)
    }

    /// [`WriteLoad::start`] with clients configured as `config`.
    pub fn start_with(
        coordinator: impl Into<shoal_cluster::CoordinatorAddrs>,
        config: ClientConfig,
        table: TableId,
        threads: usize,
        keys: impl Fn(usize, u64) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> WriteLoad {
        let coordinator = coordinator.into();
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::new(Mutex::new(HashMap::new()));
        let acks = Arc::new(AtomicU64::new(0));
        let keys = Arc::new(keys);
        let handles = (0..threads)
            .map(|t| {
                let (stop, ledger, keys, acks) = (stop.clone(), ledger.clone(), keys.clone(), acks.clone());
                let (config, coordinator) = (config.clone(), coordinator.clone());
                std::thread::spawn(move || {
                    let mut c = Client::connect_cluster(coordinator.clone(), config.clone()).unwrap();
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
                            // Not acknowledged, so not in the ledger.
                            Err(_) => {
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(5));
                                if let Ok(fresh) = Client::connect_cluster(coordinator.clone(), config.clone()) {
                                    c = fresh;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        WriteLoad { stop, handles, ledger, acks }
    }

    /// Writes acknowledged so far.
    pub fn acks(&self) -> u64 {
        self.acks.load(Ordering::Relaxed)
    }

    /// Stops the clients and returns the ledger and the acknowledged count.
    pub fn finish(self) -> (HashMap<Vec<u8>, Vec<u8>>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
        let ledger = self.ledger.lock().unwrap().clone();
        (ledger, self.acks.load(Ordering::Relaxed))
    }
}

pub fn check_ledger(c: &mut Client, table: TableId, ledger: &HashMap<Vec<u8>, Vec<u8>>) {
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

/// Keys of four kinds for the expiry tests, by index mod 4: 0 expires in
/// an hour, 1 never, 2 expired (after half a second) over an older version
/// that never expires, 3 expires [`ExpiringKeys::MEDIUM`] after it was
/// written (after the crash or restart under test, if that is quick).
pub struct ExpiringKeys {
    pub keys: Vec<Vec<u8>>,
    /// The expiry time each key of kinds 0 and 3 got, as READ_TTL said.
    pub expires: HashMap<Vec<u8>, shoal_client::UnixMillis>,
}

impl ExpiringKeys {
    pub const MEDIUM: Duration = Duration::from_secs(12);

    /// Writes `keys`, then waits until the kind 2 keys have expired.
    pub fn write(c: &mut Client, table: TableId, keys: Vec<Vec<u8>>) -> ExpiringKeys {
        let mut expires = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            match i % 4 {
                0 => c.write_ttl(table, k, b"hour", Duration::from_secs(3600)),
                1 => c.write(table, k, b"plain"),
                2 => {
                    c.write(table, k, b"old").and_then(|_| c.write_ttl(table, k, b"short", Duration::from_millis(500)))
                }
                _ => c.write_ttl(table, k, b"medium", Self::MEDIUM),
            }
            .unwrap();
            if i % 4 == 0 || i % 4 == 3 {
                expires.insert(k.clone(), c.ttl(table, k).unwrap().expires_at.expect("an expiry"));
            }
        }
        std::thread::sleep(Duration::from_millis(600));
        ExpiringKeys { keys, expires }
    }

    /// Checks every key after the crash or restart: the same expiry times,
    /// values where alive, and the expired ones gone (not their older
    /// versions back). Then waits for the kind 3 keys to expire and checks
    /// that they are gone too. Returns how many kind 3 keys were still
    /// alive (and checked alive) after the crash or restart.
    pub fn check(&self, c: &mut Client, table: TableId) -> usize {
        let mut medium_alive = 0;
        for (i, k) in self.keys.iter().enumerate() {
            let name = String::from_utf8_lossy(k);
            let read = c.read(table, k);
            match i % 4 {
                0 | 3 => {
                    let want = self.expires[k];
                    // A medium key may expire while this runs: check it
                    // only well before its time.
                    if i % 4 == 3 && shoal_client::UnixMillis::now().plus_ms(1000) >= want {
                        continue;
                    }
                    medium_alive += (i % 4 == 3) as usize;
                    let value: &[u8] = if i % 4 == 0 { b"hour" } else { b"medium" };
                    assert_eq!(read.unwrap().0, value, "{name}");
                    assert_eq!(c.ttl(table, k).unwrap().expires_at, Some(want), "expiry time of {name} changed");
                }
                1 => {
                    assert_eq!(read.unwrap().0, b"plain", "{name}");
                    assert_eq!(c.ttl(table, k).unwrap().expires_at, None, "{name}");
                }
                _ => assert!(
                    matches!(read, Err(shoal_client::ReadError::NotFound)),
                    "expired {name} came back: {read:?}"
                ),
            }
        }
        let last = self.expires.iter().filter(|(k, _)| self.keys.iter().position(|x| x == *k).unwrap() % 4 == 3);
        if let Some(latest) = last.map(|(_, t)| *t).max() {
            let wait = latest.ms_since(shoal_client::UnixMillis::now()) + 300;
            std::thread::sleep(Duration::from_millis(wait));
        }
        for (i, k) in self.keys.iter().enumerate().filter(|(i, _)| i % 4 == 3) {
            let read = c.read(table, k);
            assert!(matches!(read, Err(shoal_client::ReadError::NotFound)), "key {i} still there: {read:?}");
        }
        medium_alive
    }
}

/// Raw TLS peers of the internal ports, for tests that must present no
/// certificate, or one from another CA: `roots` is the CA trusted for the
/// listener's certificate (which must name `shoal-internal`), `identity`
/// the certificate and key presented, if any.
pub mod raw_tls {
    use std::path::Path;
    use std::sync::Arc;
    use tokio::net::TcpStream;

    pub type Stream = tokio_rustls::client::TlsStream<TcpStream>;

    pub fn config(roots: &Path, identity: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
        use shoal_common::tls::{load_certs, load_key, load_roots, provider};
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(load_roots(roots).unwrap());
        Arc::new(match identity {
            Some((cert, key)) => {
                builder.with_client_auth_cert(load_certs(cert).unwrap(), load_key(key).unwrap()).unwrap()
            }
            None => builder.with_no_client_auth(),
        })
    }

    /// A TLS session with `addr`; errors as strings.
    pub async fn connect(addr: std::net::SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<Stream, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = rustls::pki_types::ServerName::try_from(shoal_cluster::tls::INTERNAL_NAME).unwrap();
        tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(|e| format!("TLS: {e}"))
    }
}

/// A TCP proxy on 127.0.0.1 in front of `target` that records every byte
/// passing in either direction (for checks of what is on the wire).
pub struct Recorder {
    pub addr: SocketAddr,
    pub bytes: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    /// Starts the proxy on the current tokio runtime.
    pub async fn start(target: SocketAddr) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let recorded = bytes.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(target).await else { continue };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, recorded.clone()));
                tokio::spawn(pump(sr, cw, recorded.clone()));
            }
        });
        Recorder { addr, bytes }
    }

    /// Whether `needle` passed through the proxy, in either direction.
    pub fn saw(&self, needle: &[u8]) -> bool {
        self.bytes.lock().unwrap().windows(needle.len()).any(|w| w == needle)
    }

    pub fn len(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }
}

/// Copies `from` to `to`, recording the bytes, until either ends.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    recorded: Arc<Mutex<Vec<u8>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        recorded.lock().unwrap().extend_from_slice(&buf[..n]);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Cluster {
    /// Runs `shoal <args> --coordinator ... --json --cluster-secret-file ...`
    /// against this cluster.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(SHOAL)
            .args(args)
            .args(["--coordinator", &self.coordinator.to_string(), "--json"])
            .arg("--cluster-secret-file")
            .arg(self.secret_file())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The index (in `servers`) of the process of server `id`.
    pub fn process_of(&self, id: shoal_cluster::ServerId) -> usize {
        (0..self.servers.len())
            .find(|i| {
                std::fs::read_to_string(self.root.join(format!("server-{i}/data/server-id")))
                    .is_ok_and(|s| s.trim() == id.0.to_string())
            })
            .expect("a process for the server")
    }

    /// Waits until `f(map)` holds; returns that map.
    pub fn wait_for_map(&self, what: &str, secs: u64, f: impl Fn(&ClusterMap) -> bool) -> ClusterMap {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(m) = self.map() {
                if f(&m) {
                    return m;
                }
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; logs under {}", self.root.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
