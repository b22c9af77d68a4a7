//! `shoal server`, `shoal coordinator` and `shoal local`: run Shoal in the
//! foreground until Ctrl-C (SIGINT) or SIGTERM, then stop gracefully.
//!
//! `shoal server` starts one server from its flags and config file (alone,
//! or in a cluster with --coordinator). `shoal coordinator` starts a
//! coordinator. `shoal local` starts a whole cluster on this machine: a
//! coordinator in its own process and N servers as child processes of it,
//! each with a data directory under one root, and prints how to connect.
//! Starting it again on the same root brings the cluster back with its data.
//! Its processes share a cluster secret, `<root>/cluster-secret` (mode
//! 0600), made at the first start; with --tls, a throwaway CA and
//! certificates in `<root>/tls` too; with --internal-tls, a throwaway
//! cluster CA and one certificate per process (and one for clients) in
//! `<root>/internal-tls`.

use crate::recovery_watch::RecoveryWatch;
use clap::ValueEnum;
use shoal_cluster::{ClusterMap, ControlAuth, ControlClient, CoordinatorAddrs, ServerState};
use shoal_common::dirlock::DirLock;
use shoal_coordinator::local_etcd::LocalEtcd;
use shoal_server::{init_logging, ByteSize, ReplicationMode, Server, ServerArgs, ServerConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ServerCommand {
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Args, Debug)]
pub struct LocalCommand {
    /// Servers to start; each is a master and a backup.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub servers: usize,
    /// Replicas of every segment (R) [default: 3, or one fewer than the
    /// servers when there are fewer than 4].
    #[arg(long, value_name = "R")]
    pub replicas: Option<u32>,
    /// Servers per symmetric-caching group, passed to the coordinator
    /// (docs/symmetric-caching.md) [default: the whole cluster, up to 8].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub sc_group_size: Option<u32>,
    /// Passed to the coordinators: rebalance by themselves after a server
    /// joins, and merge back the pieces a recovery left once it ends
    /// (docs/migration.md, "Rebalancing and drain"). The old name
    /// --rebalance-on-join still works.
    #[arg(long, alias = "rebalance-on-join")]
    pub auto_rebalance: bool,
    /// Directory holding the coordinator's state and one data directory per
    /// server. Starting again with the same root restarts the same cluster,
    /// with every acknowledged write. One `shoal local` at a time: a second
    /// one on a root in use is refused (<root>/shoal-local.lock).
    #[arg(long, default_value = "shoal-local", value_name = "DIR")]
    pub root: PathBuf,
    /// Port of the coordinator (with --etcd, of the first; the second uses
    /// this + 1); 0 picks free ports.
    #[arg(long, default_value_t = 7600, value_name = "PORT")]
    pub coordinator_port: u16,
    /// Keep the coordinators' state in a real etcd started here (Debian's
    /// etcd-server; data and log in <root>/etcd), and run two coordinators:
    /// a leader and a standby that takes over within seconds if the
    /// leader dies (docs/coordinator.md, "Standby coordinators"). A root
    /// keeps the choice it was first started with.
    #[arg(long)]
    pub etcd: bool,
    /// Members of that etcd cluster.
    #[arg(long, default_value_t = 1, value_name = "N", requires = "etcd",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=7))]
    pub etcd_nodes: usize,
    /// Client port of the first etcd member; member i uses this + 2i and
    /// peer port this + 2i + 1. 0 picks free ports (then a root's etcd of
    /// several members cannot be started again: its members remember
    /// their peers' ports).
    #[arg(long, default_value_t = 2379, value_name = "PORT", requires = "etcd")]
    pub etcd_port: u16,
    /// Native protocol port of the first server; server i uses this + i.
    /// 0 lets every server pick a free port.
    #[arg(long, default_value_t = shoal_server::DEFAULT_NATIVE_PORT, value_name = "PORT")]
    pub native_port: u16,
    /// Redis protocol port of the first server; server i uses this + i.
    /// 0 lets every server pick a free port.
    #[arg(long, default_value_t = shoal_server::DEFAULT_RESP_PORT, value_name = "PORT")]
    pub resp_port: u16,
    /// memcached protocol port of the first server; server i uses this + i.
    /// 0 lets every server pick a free port (each logs it).
    #[arg(long, default_value_t = shoal_server::DEFAULT_MEMCACHED_PORT, value_name = "PORT")]
    pub memcached_port: u16,
    /// Replication port of the first server's backup; server i uses this + i.
    /// 0 lets every server pick a free port.
    #[arg(long, default_value_t = shoal_server::DEFAULT_BACKUP_PORT, value_name = "PORT")]
    pub backup_port: u16,
    /// HTTP port of the coordinator: its /metrics (Prometheus text format)
    /// and the cluster's live dashboard at / (docs/observability.md)
    /// [default: the coordinator's port + 2000, so 9600; a free port when
    /// that is 0, so that clusters started side by side never collide].
    #[arg(long, value_name = "PORT")]
    pub coordinator_metrics_port: Option<u16>,
    /// HTTP port of the first server's /metrics; server i uses this + i. 0
    /// lets every server pick a free port (each logs it) [default: the
    /// first server's native port + 2000, so 9700; free ports when that is 0].
    #[arg(long, value_name = "PORT")]
    pub metrics_port: Option<u16>,
    /// Open no HTTP port: no /metrics anywhere, and so no dashboard either
    /// (the coordinator serves it on its metrics port).
    #[arg(long, conflicts_with_all = ["metrics_port", "coordinator_metrics_port"])]
    pub no_metrics: bool,
    /// Memory for objects, per server.
    #[arg(long, default_value = "1GiB", value_name = "SIZE")]
    pub memory: ByteSize,
    /// What a full server does: none (refuse writes) or oldest (cache
    /// mode: evict the oldest segments; see `shoal server --help`).
    #[arg(long, default_value = "none", value_name = "POLICY")]
    pub eviction: shoal_engine::Eviction,
    /// Stream retention by size, per streamlet (see `shoal server --help`;
    /// 0: no limit).
    #[arg(long, default_value = "0", value_name = "BYTES")]
    pub stream_retention_bytes: ByteSize,
    /// Stream retention by age of a closed group's last record, in
    /// milliseconds (0: no limit).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub stream_retention_ms: u64,
    /// Replication data path: tailwind or conventional.
    #[arg(long, default_value = "tailwind", value_name = "MODE")]
    pub replication: ReplicationMode,
    /// Backups sync open replicas to disk before acknowledging.
    #[arg(long)]
    pub sync_open: bool,
    /// Log level of every process (their logs go to <root>/*/log).
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
    /// Password every server requires of clients, on every client port (the
    /// `default` user's; see `shoal server --help`). Also read from
    /// SHOAL_PASSWORD; servers are given it in their environment, never on
    /// their command line.
    #[arg(long, value_name = "PASSWORD", env = "SHOAL_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Serve the client ports (Redis and native) over TLS only, with
    /// mutual TLS: a throwaway CA, a server certificate (for localhost and
    /// 127.0.0.1) and a client certificate are made in <root>/tls at the
    /// first start (kept for later ones); clients must present the client
    /// certificate. The hints printed show how to connect.
    #[arg(long)]
    pub tls: bool,
    /// Mutual TLS on the internal ports (the coordinator's control port and
    /// every backup port): a throwaway cluster CA and a certificate per
    /// process (coordinator.crt, server-N.crt, and client.crt for the
    /// command line and clients) are made in <root>/internal-tls, kept for
    /// later starts. The hints printed show the CLI's flags. See
    /// docs/security.md, "Internal TLS".
    #[arg(long)]
    pub internal_tls: bool,
    /// Redis Cluster mode on every server's Redis port (on or off): cluster
    /// clients (redis-cli -c, redis-py RedisCluster, go-redis ClusterClient,
    /// ...) read the slot map and send each key to its master, and a key sent
    /// elsewhere is answered -MOVED. Off: any server serves any key by
    /// forwarding, for plain clients (see docs/redis-cluster.md).
    #[arg(long, default_value = "on", value_name = "on|off", action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new())]
    pub cluster_mode: bool,
    /// Symmetric caching on every server (docs/symmetric-caching.md): the
    /// hottest keys cached on every member of a group, reads of them
    /// answered by any member. Only with --cluster-mode off (cluster
    /// clients send every key to its master) [default: off].
    #[arg(long, value_name = "off|on")]
    pub sc: Option<shoal_server::config::ScSwitch>,
    /// Consistency of hot keys' writes: strong (linearizable) or eventual [default: strong].
    #[arg(long, value_name = "strong|eventual")]
    pub sc_consistency: Option<shoal_server::config::ScConsistency>,
    /// Length of a hot-set round in milliseconds [default: 1000].
    #[arg(long, value_name = "MS")]
    pub sc_epoch_ms: Option<u64>,
    /// Most keys in a hot set [default: 0.1% of the keys, at most 100000].
    #[arg(long, value_name = "N")]
    pub sc_cache_keys: Option<usize>,
}

/// The cluster secret of `shoal local` (and of `shoal bench recovery`'s
/// clusters), in their root.
pub(crate) const SECRET_FILE: &str = "cluster-secret";
/// The lock file in `shoal local`'s root, held while it runs (with its PID).
pub(crate) const ROOT_LOCK_FILE: &str = "shoal-local.lock";

/// Starts a server from `args` over `base`, logs, and waits for a signal.
fn start(args: ServerArgs, base: ServerConfig) -> Result<Server, String> {
    let config = args.into_config(base).map_err(|e| e.to_string())?;
    init_logging(&config.log_level)?;
    if config.coordinator.is_none() {
        if let Some(dir) = &config.data_dir {
            tracing::warn!(
                "data directory {} is not used: without --coordinator this server keeps everything in memory",
                dir.display()
            );
        }
    }
    Server::start_with_signals(config).map_err(|e| e.to_string())
}

fn fail(e: String) -> ExitCode {
    eprintln!("shoal: {e}");
    ExitCode::FAILURE
}

pub fn server(cmd: &ServerCommand) -> ExitCode {
    let server = match start(cmd.server.clone(), ServerConfig::default()) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let a = server.addresses();
    let native = a.native.map_or("off".to_string(), |n| n.to_string());
    let memcached = a.memcached.map_or("off".to_string(), |m| m.to_string());
    if let Some(m) = a.metrics {
        tracing::info!("shoal server metrics on http://{m}/metrics");
    }
    // The Redis address ends the line: tools read it from there.
    tracing::info!(
        "shoal server ready: native protocol on {native}, memcached protocol on {memcached}, Redis protocol on {}",
        a.resp
    );
    server.wait();
    ExitCode::SUCCESS
}

pub fn coordinator(args: &shoal_coordinator::CoordinatorArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(shoal_coordinator::run(args.clone())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e.to_string()),
    }
}

/// The processes of a local cluster (each with the log its standard error
/// goes to); stopped (SIGTERM, then SIGKILL after a grace period) when
/// dropped.
struct Processes(Vec<(String, Child, PathBuf)>);

impl Processes {
    /// Fails, saying why, if one of the processes has exited: its exit
    /// status and the last line of its log, which says why a process
    /// refused to start (a bad setting, a port in use).
    fn all_running(&mut self, during: &str) -> Result<(), String> {
        for (name, child, log) in &mut self.0 {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(&*log).unwrap_or_default();
                let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
                let why = if last.is_empty() { String::new() } else { format!(": {last}") };
                return Err(format!("{name} exited{during} ({status}){why} (log: {})", log.display()));
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        for (_, child, _) in &mut self.0 {
            // Only PIDs this process spawned and has not reaped yet (a
            // child that has exited is reaped here, and not signalled).
            if matches!(child.try_wait(), Ok(None)) {
                let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (name, child, _) in &mut self.0 {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        eprintln!("shoal: {name} did not stop in time; killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        self.0.clear();
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The HTTP ports of `shoal local`: the coordinator's (/metrics and the
/// dashboard) and the first server's /metrics (`None`: no HTTP port). By default each is its
/// process's main port + 2000 (7600 -> 9600, 7700 + i -> 9700 + i), and
/// free ports (0) when the main ports are.
fn metrics_ports(cmd: &LocalCommand) -> Option<(u16, u16)> {
    if cmd.no_metrics {
        return None;
    }
    let derived = |port: u16| if port == 0 { 0 } else { port.saturating_add(2000) };
    Some((
        cmd.coordinator_metrics_port.unwrap_or(derived(cmd.coordinator_port)),
        cmd.metrics_port.unwrap_or(derived(cmd.native_port)),
    ))
}

fn port(base: u16, i: usize) -> String {
    if base == 0 {
        "0".into()
    } else {
        (base as usize + i).to_string()
    }
}

/// Spawns `shoal <args>` with its stderr in `<dir>/log` (also used by
/// `shoal bench recovery`).
pub(crate) fn spawn(exe: &Path, args: &[String], dir: &Path) -> Result<Child, String> {
    spawn_with_env(exe, args, &[], dir)
}

/// [`spawn`], with `env` added to the child's environment.
fn spawn_with_env(exe: &Path, args: &[String], env: &[(&str, &str)], dir: &Path) -> Result<Child, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .map_err(|e| format!("cannot open the log in {}: {e}", dir.display()))?;
    Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))
}

/// Waits until a coordinator at `addrs` answers (the leader, with etcd);
/// fails if one of them exits first.
fn wait_for_coordinator(
    addrs: &CoordinatorAddrs,
    auth: &ControlAuth,
    logs: &[PathBuf],
    deadline: Instant,
    procs: &mut Processes,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let where_ = logs.iter().map(|l| l.display().to_string()).collect::<Vec<_>>().join(", ");
    loop {
        let mut c = ControlClient::new(addrs.clone()).with_timeout(Duration::from_millis(500)).with_auth(auth.clone());
        if runtime.block_on(c.get_map()).is_ok() {
            return Ok(());
        }
        procs.all_running("")?;
        if Instant::now() >= deadline {
            return Err(format!("the coordinator did not start in time; see {where_}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `nodes` etcd members under `dir`, member i on client port
/// `port + 2i` and peer port `port + 2i + 1` (free ports when `port` is 0).
fn start_etcd(dir: &Path, nodes: usize, port: u16) -> Result<LocalEtcd, String> {
    if !shoal_coordinator::local_etcd::etcd_installed() {
        return Err(format!(
            "--etcd needs etcd ({} not found; on Debian: apt-get install etcd-server)",
            shoal_coordinator::local_etcd::etcd_binary().display()
        ));
    }
    let mut ports = Vec::new();
    for i in 0..nodes {
        ports.push(match port {
            0 => (pick_port(0)?, pick_port(0)?),
            p => {
                let client = p.checked_add(2 * i as u16).ok_or("--etcd-port is too high")?;
                (client, client.checked_add(1).ok_or("--etcd-port is too high")?)
            }
        });
    }
    for &(client, _) in &ports {
        if std::net::TcpListener::bind(("127.0.0.1", client)).is_err() {
            return Err(format!("etcd's client port {client} is in use; give --etcd-port (0: free ports)"));
        }
    }
    LocalEtcd::start(dir, &ports).map_err(|e| format!("cannot start etcd: {e}"))
}

/// Runs `f` to completion on a runtime of its own; `None` if no runtime
/// can be made.
fn runtime_block_on<T>(f: impl std::future::Future<Output = Option<T>>) -> Option<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?.block_on(f)
}

/// `port`, or a free port of 127.0.0.1 if it is 0.
pub(crate) fn pick_port(port: u16) -> Result<u16, String> {
    if port != 0 {
        return Ok(port);
    }
    shoal_common::os::free_local_port().ok_or_else(|| "cannot find a free port in 20000-31999".to_string())
}

pub fn local(cmd: &LocalCommand) -> ExitCode {
    match run_local(cmd) {
        Ok(()) => {
            println!("Shoal stopped.");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn run_local(cmd: &LocalCommand) -> Result<(), String> {
    if cmd.servers == 0 {
        return Err("--servers must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the shoal executable: {e}"))?;
    std::fs::create_dir_all(&cmd.root).map_err(|e| format!("cannot create {}: {e}", cmd.root.display()))?;
    let root = cmd.root.canonicalize().map_err(|e| format!("{}: {e}", cmd.root.display()))?;
    // Held until this function returns, after every process stopped: a
    // second run on this root would otherwise truncate the coordinator's
    // log, and its servers would find the first run's coordinator on the
    // port and enlist there with data directories that live servers use.
    let _root_lock = DirLock::acquire(&root, ROOT_LOCK_FILE).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => format!(
            "{} is already running a cluster ({e}); stop that `shoal local` first, or give another --root",
            root.display()
        ),
        _ => format!("cannot lock {}: {e}", root.join(ROOT_LOCK_FILE).display()),
    })?;
    let secret = root.join(SECRET_FILE);
    shoal_cluster::auth::ClusterSecret::create_or_load(&secret).map_err(|e| e.to_string())?;
    let secret = secret.display().to_string();
    let pki = match cmd.tls {
        true => Some(shoal_server::tls::LocalPki::create_or_load(&root.join("tls"))?),
        false => None,
    };
    // Per process: the internal TLS flags (empty without --internal-tls).
    let internal = match cmd.internal_tls {
        true => Some(shoal_server::tls::InternalPki::create_or_load(&root.join("internal-tls"))?),
        false => None,
    };
    let internal_flags = |name: &str| -> Result<Vec<String>, String> {
        let Some(pki) = &internal else { return Ok(Vec::new()) };
        let (cert, key) = pki.identity(name)?;
        Ok([("--internal-tls-cert", &cert), ("--internal-tls-key", &key), ("--internal-tls-ca", &pki.ca)]
            .iter()
            .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
            .collect())
    };
    let client_flags = internal_flags("client")?;
    let local_auth = match &internal {
        Some(pki) => {
            let (cert, key) = pki.identity("client")?;
            ControlAuth::anonymous_tls(Some(shoal_cluster::tls::InternalTls::load(&cert, &key, &pki.ca)?))
        }
        None => ControlAuth::anonymous(),
    };
    // A root keeps its cluster's state in one place: the directory store or etcd.
    let dir_state = root.join("coordinator/state").join(shoal_coordinator::store::STATE_FILE);
    let etcd_root = root.join("etcd");
    if cmd.etcd && dir_state.exists() {
        return Err(format!(
            "{}'s cluster keeps its coordinator's state in {}: start it without --etcd (or use another --root)",
            root.display(),
            dir_state.display()
        ));
    }
    if !cmd.etcd && etcd_root.exists() {
        return Err(format!(
            "{}'s cluster keeps its coordinators' state in etcd ({}): start it with --etcd (or use another --root)",
            root.display(),
            etcd_root.display()
        ));
    }
    // Declared before the processes: dropped (stopped) after them, so that
    // the leader can resign.
    let etcd = match cmd.etcd {
        true => Some(start_etcd(&etcd_root, cmd.etcd_nodes, cmd.etcd_port)?),
        false => None,
    };
    let mut procs = Processes(Vec::new());
    let signals = Signals::install()?;

    // The coordinators (one, or a leader and a standby with --etcd), and
    // their addresses once one listens.
    let count = if cmd.etcd { 2 } else { 1 };
    let metrics = metrics_ports(cmd);
    let mut addrs = Vec::new();
    let mut https = Vec::new();
    let mut logs = Vec::new();
    for i in 0..count {
        let cdir = match i {
            0 => root.join("coordinator"),
            _ => root.join(format!("coordinator-{i}")),
        };
        let log = cdir.join("log");
        let _ = std::fs::remove_file(&log);
        let base = if cmd.coordinator_port == 0 { 0 } else { cmd.coordinator_port.saturating_add(i as u16) };
        let coordinator: SocketAddr =
            format!("127.0.0.1:{}", pick_port(base)?).parse().map_err(|e| format!("bad coordinator address: {e}"))?;
        let mut args = vec![
            "coordinator".to_string(),
            "--listen".into(),
            coordinator.to_string(),
            "--data-dir".into(),
            cdir.join("state").display().to_string(),
            "--log-level".into(),
            cmd.log_level.clone(),
            "--cluster-secret-file".into(),
            secret.clone(),
        ];
        if let Some(etcd) = &etcd {
            args.extend(["--etcd".into(), etcd.endpoints().join(","), "--etcd-prefix".into(), "/shoal/local".into()]);
        }
        if let Some(r) = cmd.replicas {
            args.extend(["--replicas".into(), r.to_string()]);
        }
        if let Some(n) = cmd.sc_group_size {
            args.extend(["--sc-group-size".into(), n.to_string()]);
        }
        if cmd.auto_rebalance {
            args.push("--auto-rebalance".into());
        }
        // The coordinator's HTTP port is picked here when free, so that the
        // dashboard's address can be printed.
        let http = match metrics {
            Some((0, _)) => Some(SocketAddr::new(coordinator.ip(), pick_port(0)?)),
            Some((port, _)) => Some(SocketAddr::new(coordinator.ip(), port.saturating_add(i as u16))),
            None => None,
        };
        if let Some(http) = http {
            args.extend(["--metrics-port".into(), http.port().to_string()]);
        }
        args.extend(internal_flags("coordinator")?);
        // Whatever answers on the port is taken for this run's coordinator:
        // make sure it is not another cluster's.
        if let Err(e) = std::net::TcpListener::bind(coordinator) {
            return Err(format!(
                "the coordinator's address {coordinator} is in use ({e}): another cluster runs there? \
                 Stop it, or give --coordinator-port (0: a free one)"
            ));
        }
        let name = match (i, count) {
            (_, 1) => "the coordinator".to_string(),
            _ => format!("the coordinator in {}", cdir.file_name().unwrap_or_default().to_string_lossy()),
        };
        procs.0.push((name, spawn(&exe, &args, &cdir)?, log.clone()));
        addrs.push(coordinator);
        https.push(http);
        logs.push(log);
    }
    let coordinator = CoordinatorAddrs::new(addrs.clone()).expect("at least one coordinator");
    let deadline = Instant::now() + Duration::from_secs(30);
    wait_for_coordinator(&coordinator, &local_auth, &logs, deadline, &mut procs)?;

    for i in 0..cmd.servers {
        let dir = root.join(format!("server-{i}"));
        let mut args = vec![
            "server".to_string(),
            "--coordinator".into(),
            coordinator.to_string(),
            "--data-dir".into(),
            dir.join("data").display().to_string(),
            "--native-port".into(),
            port(cmd.native_port, i),
            "--resp-port".into(),
            port(cmd.resp_port, i),
            "--memcached-port".into(),
            port(cmd.memcached_port, i),
            "--backup-port".into(),
            port(cmd.backup_port, i),
            "--memory".into(),
            cmd.memory.to_string(),
            "--eviction".into(),
            cmd.eviction.name().into(),
            "--stream-retention-bytes".into(),
            cmd.stream_retention_bytes.0.to_string(),
            "--stream-retention-ms".into(),
            cmd.stream_retention_ms.to_string(),
            "--replication".into(),
            match cmd.replication {
                ReplicationMode::Tailwind => "tailwind".into(),
                ReplicationMode::Conventional => "conventional".into(),
            },
            "--log-level".into(),
            cmd.log_level.clone(),
            "--cluster-secret-file".into(),
            secret.clone(),
        ];
        if cmd.sync_open {
            args.push("--sync-open".into());
        }
        if cmd.cluster_mode {
            args.push("--cluster-mode".into());
        }
        if let Some(sc) = cmd.sc {
            args.extend(["--sc".into(), sc.to_possible_value().expect("a flag value").get_name().to_string()]);
        }
        if let Some(c) = cmd.sc_consistency {
            args.extend([
                "--sc-consistency".into(),
                c.to_possible_value().expect("a flag value").get_name().to_string(),
            ]);
        }
        if let Some(ms) = cmd.sc_epoch_ms {
            args.extend(["--sc-epoch-ms".into(), ms.to_string()]);
        }
        if let Some(n) = cmd.sc_cache_keys {
            args.extend(["--sc-cache-keys".into(), n.to_string()]);
        }
        if let Some((_, base)) = metrics {
            args.extend(["--metrics-port".into(), port(base, i)]);
        }
        if let Some(pki) = &pki {
            for (flag, path) in
                [("--tls-cert", &pki.server_cert), ("--tls-key", &pki.server_key), ("--tls-ca", &pki.ca)]
            {
                args.extend([flag.to_string(), path.display().to_string()]);
            }
        }
        args.extend(internal_flags(&format!("server-{i}"))?);
        let env: Vec<(&str, &str)> = cmd.password.iter().map(|p| ("SHOAL_PASSWORD", p.as_str())).collect();
        // Named by its directory: its server id is the coordinator's to give.
        procs.0.push((format!("the server in server-{i}"), spawn_with_env(&exe, &args, &env, &dir)?, dir.join("log")));
    }

    // Wait until every server serves (a restart first replays the logs).
    let map = wait_for_cluster(&coordinator, &local_auth, cmd.servers, &mut procs, &signals)?;
    let Some(map) = map else {
        procs.stop();
        return Ok(());
    };
    // The banner only for a cluster whose every process is still running.
    procs.all_running(" during startup")?;
    println!(
        "Shoal is running on this machine: {} and {} server{}, {} of memory each, {} replica(s) per segment.",
        if etcd.is_some() { "two coordinators (a leader and a standby)" } else { "a coordinator" },
        cmd.servers,
        if cmd.servers == 1 { "" } else { "s" },
        cmd.memory,
        map.replicas
    );
    // The leader is the one that answered (standbys do not listen).
    let leader = ControlClient::new(coordinator.clone()).with_auth(local_auth.clone());
    let leader = runtime_block_on(async move {
        let mut leader = leader;
        leader.get_map().await.ok().map(|_| leader.addr())
    });
    match &etcd {
        None => println!("  coordinator:     {coordinator}"),
        Some(etcd) => {
            for a in &addrs {
                let role = if Some(*a) == leader { "leader" } else { "standby" };
                println!("  coordinator:     {a} ({role})");
            }
            println!(
                "  etcd:            {} ({} member{}; the coordinators' state, under /shoal/local)",
                etcd.endpoints().join(","),
                cmd.etcd_nodes,
                if cmd.etcd_nodes == 1 { "" } else { "s" }
            );
        }
    }
    let http = addrs.iter().zip(&https).find(|(a, _)| Some(**a) == leader).and_then(|(_, h)| *h).or(https[0]);
    match http {
        Some(http) if etcd.is_some() => println!("  dashboard:       http://{http}/ (the leader's)"),
        Some(http) => println!("  dashboard:       http://{http}/"),
        None => println!("  dashboard:       off (--no-metrics)"),
    }
    let mut servers: Vec<_> = map.servers.iter().filter(|s| s.state != ServerState::Down).collect();
    servers.sort_by_key(|s| s.id);
    // The map does not carry memcached addresses: server i's is the
    // configured port + i, as its Redis port is (or a free port it logs).
    let memcached_addr = |s: &shoal_cluster::ServerInfo| match (cmd.memcached_port, cmd.resp_port) {
        (0, _) | (_, 0) => None,
        (p, r) => Some(std::net::SocketAddr::new(s.resp.ip(), p.wrapping_add(s.resp.port().wrapping_sub(r)))),
    };
    let memcached = |s: &shoal_cluster::ServerInfo| {
        memcached_addr(s).map_or("on a free port (in its log)".to_string(), |a| a.to_string())
    };
    // Nor metrics addresses: server i's is the configured port + i.
    let server_metrics = |s: &shoal_cluster::ServerInfo| match (metrics, cmd.native_port) {
        (None, _) => "off".to_string(),
        (Some((_, 0)), _) | (_, 0) => "on a free port (in its log)".to_string(),
        (Some((_, m)), n) => {
            format!("http://{}:{}/metrics", s.native.ip(), m.wrapping_add(s.native.port().wrapping_sub(n)))
        }
    };
    for s in &servers {
        println!(
            "  server {}: native protocol {}, Redis protocol {}, memcached protocol {}, backup {}, metrics {}",
            s.id,
            s.native,
            s.resp,
            memcached(s),
            s.backup,
            server_metrics(s)
        );
    }
    if let Some(http) = http {
        println!("  metrics:         http://{http}/metrics (coordinator)");
    }
    // With a password, the hints read it from the environment rather than
    // print it.
    let (mut redis_cli, shoal_cli) = match cmd.password {
        Some(_) => ("REDISCLI_AUTH=\"$SHOAL_PASSWORD\" redis-cli".to_string(), "SHOAL_PASSWORD=... shoal"),
        None => ("redis-cli".to_string(), "shoal"),
    };
    // The shoal CLI's TLS flags, after each command.
    let mut tls_flags = String::new();
    if let Some(pki) = &pki {
        println!("  TLS (mutual) on the client ports; CA and client certificate in {}", root.join("tls").display());
        let (ca, cert, key) = (pki.ca.display(), pki.client_cert.display(), pki.client_key.display());
        redis_cli += &format!(" --tls --cacert {ca} --cert {cert} --key {key}");
        tls_flags = format!(" --tls --tls-ca {ca} --tls-cert {cert} --tls-key {key}");
    }
    if internal.is_some() {
        println!(
            "  mutual TLS on the internal ports (control, backup); cluster CA and certificates in {}",
            root.join("internal-tls").display()
        );
        tls_flags += &format!(" {}", client_flags.join(" "));
    }
    if cmd.password.is_some() {
        println!(
            "  clients must log in with the password (user `default`): set SHOAL_PASSWORD to it for the hints below"
        );
    }
    if cmd.cluster_mode {
        println!("  Redis Cluster mode: cluster clients send each key to its master (plain clients get -MOVED; --cluster-mode off forwards instead)");
        redis_cli += " -c";
    }
    if let Some(s) = servers.first() {
        println!("  native protocol: {}", s.native);
        println!("  Redis protocol:  {}    try: {redis_cli} -p {} set hello world", s.resp, s.resp.port());
        if let Some(m) = memcached_addr(s) {
            println!(
                "  memcached:       {m}    try: exec 3<>/dev/tcp/{}/{} && printf 'get hello\\r\\nquit\\r\\n' >&3 && cat <&3",
                m.ip(),
                m.port()
            );
        }
    }
    println!(
        "  shoal CLI:       {shoal_cli} create-table greetings --coordinator {coordinator}{tls_flags}; {shoal_cli} put \
         greetings hello world --coordinator {coordinator}{tls_flags}"
    );
    println!("Data and logs are under {}. Stop with Ctrl-C.", root.display());

    // Run until a signal; report servers that exit on their own, and the
    // progress of the recoveries that follow.
    let mut watch = RecoveryWatch::new(coordinator, local_auth);
    loop {
        if signals.received() {
            break;
        }
        for (name, child, _) in &mut procs.0 {
            if let Ok(Some(status)) = child.try_wait() {
                watch.progress().suspend(|| eprintln!("shoal: {name} exited ({status})"));
            }
        }
        procs.0.retain_mut(|(_, c, _)| matches!(c.try_wait(), Ok(None)));
        watch.poll();
        std::thread::sleep(Duration::from_millis(100));
    }
    procs.stop();
    Ok(())
}

/// Polls the coordinator until `n` servers are up; `None` if a signal came first.
fn wait_for_cluster(
    coordinator: &CoordinatorAddrs,
    auth: &ControlAuth,
    n: usize,
    procs: &mut Processes,
    signals: &Signals,
) -> Result<Option<ClusterMap>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let mut client = ControlClient::new(coordinator.clone()).with_auth(auth.clone());
    let started = Instant::now();
    let mut said = false;
    loop {
        if signals.received() {
            return Ok(None);
        }
        procs.all_running(" during startup")?;
        if let Ok(map) = runtime.block_on(client.get_map()) {
            let up = map.servers.iter().filter(|s| s.state == ServerState::Up).count();
            if up >= n {
                return Ok(Some(map));
            }
            let recovering = map.servers.iter().filter(|s| s.state == ServerState::Recovering).count();
            if recovering > 0 && !said && started.elapsed() > Duration::from_secs(2) {
                println!("{recovering} server(s) are replaying their logs from the backups...");
                said = true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGINT and SIGTERM, noted by a flag (the main thread polls it).
struct Signals {
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = flag.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("shoal-signals".into())
            .spawn(move || {
                runtime.block_on(async move {
                    use tokio::signal::unix::{signal, SignalKind};
                    let (Ok(mut term), Ok(mut int)) =
                        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
                    else {
                        let _ = tx.send(false);
                        return;
                    };
                    let _ = tx.send(true);
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                    f.store(true, std::sync::atomic::Ordering::Release);
                })
            })
            .map_err(|e| format!("cannot start the signal thread: {e}"))?;
        match rx.recv() {
            Ok(true) => Ok(Signals { flag }),
            _ => Err("cannot install signal handlers".into()),
        }
    }

    fn received(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::Acquire)
    }
}
