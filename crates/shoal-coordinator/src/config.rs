//! The coordinator's command-line flags, configuration and errors.

use crate::etcd::EtcdConfig;
use crate::probe::ProbeConfig;
use shoal_cluster::auth::{ClusterSecret, SecretError};
use shoal_cluster::tls::InternalTls;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Default address of the control protocol.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7600";
/// Default state directory.
pub const DEFAULT_DATA_DIR: &str = "./shoal-coordinator";
/// Default bound on open control connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default time a suspect has to answer one of the coordinator's PINGs.
pub const DEFAULT_PROBE_TIMEOUT_MS: u64 = 250;
/// Default bound on open control connections from one IP address.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 64;
/// Default number of PINGs a suspect may miss before it is declared dead.
pub const DEFAULT_PROBE_ATTEMPTS: u32 = 2;

/// Flags of `shoal coordinator`.
#[derive(clap::Args, Clone, Debug)]
pub struct CoordinatorArgs {
    /// Address the control protocol listens on. Servers enlist here, and
    /// clients and the command line fetch the cluster map and create tables
    /// here (give it to them as --coordinator).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Directory that keeps the coordinator's state (servers, tables,
    /// tablets) in coordinator.json; created if missing. Restarting with the
    /// same directory resumes the same cluster. One coordinator at a time:
    /// a second one on the directory refuses to start (coordinator.lock).
    /// Unused with --etcd.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// Replicas each master keeps of its log (R), 0 for none. Default:
    /// 3, or fewer while the cluster has at most 3 live servers (one less
    /// than the live servers, since a server never backs up its own log).
    #[arg(long, value_name = "R")]
    pub replicas: Option<u32>,

    /// Servers per symmetric-caching group: the up servers, by id, are
    /// cut into groups of at most this many that each cache the same hot
    /// keys (docs/symmetric-caching.md). Default: the whole cluster, up
    /// to 8 servers per group.
    #[arg(long, value_name = "N", default_value_t = crate::state::DEFAULT_SC_GROUP_SIZE, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub sc_group_size: u32,

    /// What to log: a level (error, warn, info, debug, trace) or a filter
    /// such as "info,shoal_coordinator=debug". Logs go to stderr as plain
    /// lines.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log_level: String,

    /// When a server reports a peer unreachable, the coordinator PINGs the
    /// peer's native port itself; each PING must be answered within this
    /// many milliseconds. A process that accepts connections but does not
    /// answer (stopped, wedged) counts as dead.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_PROBE_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub probe_timeout_ms: u64,

    /// PINGs a suspected server may leave unanswered, one after the other,
    /// before it is declared dead and its tablets are recovered elsewhere.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROBE_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub probe_attempts: u32,

    /// After this coordinator restarts on an existing cluster, a server
    /// reported unreachable is not checked (nor declared dead) for this many
    /// milliseconds unless it has enlisted again: in a whole-cluster restart
    /// the servers come back one by one, and each recovers its own log.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_RESTART_GRACE_MS)]
    pub restart_grace_ms: u64,

    /// Length of a master's lease, in milliseconds. A server serves its
    /// tablets (reads included) only while it holds a lease, renewed here
    /// every quarter of this; a server that cannot renew (stopped, cut off
    /// from the coordinator) stops serving when it ends, and a dead
    /// server's tablets are served elsewhere only after its lease surely
    /// ended (this plus 4% and 50 ms after its last renewal). Longer
    /// leases ride out longer coordinator outages; shorter ones make crash
    /// recovery start sooner (docs/recovery.md, "Leases").
    #[arg(long, value_name = "MS", default_value_t = crate::lease::DEFAULT_LEASE_MS,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub lease_ms: u64,

    /// Rebalance without an operator: after a new server joins, move
    /// tablets (splitting big ones) so that the up servers' memory and
    /// load become even, as `shoal rebalance` does; after a crash recovery
    /// ends, gather the small pieces it cut tablets into and merge them
    /// back. Off by default: moving data is the operator's call
    /// (docs/migration.md, "Rebalancing and drain"). The old name
    /// --rebalance-on-join still works.
    #[arg(long, alias = "rebalance-on-join")]
    pub auto_rebalance: bool,
    /// File holding the cluster's secret (16 to 4096 bytes, e.g. 64 hex
    /// digits; mode 0600, else it is refused). Every server and the
    /// coordinator need the same file: each control and replication
    /// connection starts by proving both ends hold it, and servers get a
    /// credential at their first enlistment. Without the handshake a
    /// connection may only read the map and statistics. Required unless
    /// --insecure-no-secret is given. See docs/security.md.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,

    /// Run without a cluster secret: anyone who can reach the control port
    /// can enlist servers, drop tables and have servers declared dead. Only
    /// for a network where every peer is trusted.
    #[arg(long, conflicts_with = "cluster_secret_file")]
    pub insecure_no_secret: bool,

    /// Open control connections one IP address may hold; more are refused,
    /// so that one client cannot starve the servers' connections.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_IP, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections_per_ip: usize,

    /// Port of the coordinator's HTTP listener, on the address of --listen:
    /// /metrics (Prometheus text format: requests, cluster map, leases,
    /// recoveries) and the live dashboard at / (docs/observability.md). 0
    /// picks a free port (logged). Without it, no HTTP listener is opened
    /// (neither /metrics nor the dashboard) and servers are not polled for
    /// the dashboard.
    #[arg(long, value_name = "PORT")]
    pub metrics_port: Option<u16>,

    /// Mutual TLS on the control port: this coordinator's certificate (PEM,
    /// then its chain), signed by the cluster CA of --internal-tls-ca and
    /// naming the DNS name shoal-internal, for server and client
    /// authentication. With it the control port speaks only TLS, and every
    /// peer (servers, clients, the command line) must present a certificate
    /// of the same CA. Needs --internal-tls-key and --internal-tls-ca.
    /// See docs/security.md, "Internal TLS".
    #[arg(long, value_name = "PATH", requires_all = ["internal_tls_key", "internal_tls_ca"])]
    pub internal_tls_cert: Option<PathBuf>,

    /// The private key of --internal-tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PATH", requires = "internal_tls_cert")]
    pub internal_tls_key: Option<PathBuf>,

    /// The cluster CA's certificates (PEM): peers of the control port must
    /// present a certificate it signed.
    #[arg(long, value_name = "PATH", requires = "internal_tls_cert")]
    pub internal_tls_ca: Option<PathBuf>,

    /// Keep the state in etcd instead of --data-dir, at these client URLs
    /// (comma-separated, e.g. http://10.0.0.1:2379,http://10.0.0.2:2379),
    /// and run as one of several coordinators: the one elected through an
    /// etcd lease leads and listens on --listen; the others stand by,
    /// unlistening, and take over within about --etcd-lease-secs when it
    /// dies. Give servers and clients every coordinator's address. See
    /// docs/coordinator.md, "Standby coordinators".
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub etcd: Vec<String>,

    /// The cluster's key prefix in etcd: coordinators with the same prefix
    /// share one state and elect one leader.
    #[arg(long, value_name = "PREFIX", default_value = crate::etcd::DEFAULT_PREFIX, requires = "etcd")]
    pub etcd_prefix: String,

    /// TTL of a coordinator's etcd lease, in seconds (at least 2, etcd's
    /// minimum): a leader that stops renewing it is replaced after at most
    /// this long.
    #[arg(long, value_name = "SECS", default_value_t = crate::etcd::DEFAULT_LEASE_SECS, requires = "etcd",
        value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(2..=3600))]
    pub etcd_lease_secs: u64,
}

/// Default of `--restart-grace-ms`.
pub const DEFAULT_RESTART_GRACE_MS: u64 = 10_000;

/// Everything [`Coordinator::start`](crate::Coordinator::start) needs.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Control protocol address; port 0 picks a free one
    /// ([`Coordinator::local_addr`](crate::Coordinator::local_addr) tells it).
    pub listen: SocketAddr,
    /// State directory for [`DirStore`](crate::DirStore).
    pub data_dir: PathBuf,
    /// `None`: the automatic replica rule.
    pub replicas: Option<u32>,
    /// Servers per symmetric-caching group (`--sc-group-size`).
    pub sc_group_size: u32,
    /// Filter for [`init_logging`](crate::init_logging), used by [`run`](crate::run).
    pub log_level: String,
    /// Open control connections beyond this are answered with an error and
    /// closed.
    pub max_connections: usize,
    /// How a suspected server is checked before it is declared dead.
    pub probe: ProbeConfig,
    /// After a restart on an existing cluster, how long suspicions of
    /// servers that have not enlisted again are ignored.
    pub restart_grace: Duration,
    /// Length of master leases (`--lease-ms`).
    pub lease: Duration,
    /// `--auto-rebalance`: rebalance after a new server joins, gather and
    /// merge after a recovery.
    pub auto_rebalance: bool,
    /// The cluster secret; `None`: no handshake, every request taken at its
    /// word (docs/security.md).
    pub secret: Option<ClusterSecret>,
    /// Open control connections beyond this from one IP address are
    /// answered with an error and closed.
    pub max_connections_per_ip: usize,
    /// Address of the HTTP listener (`/metrics` and the dashboard); `None`:
    /// none. Port 0 picks a free one ([`Coordinator::http_addr`](crate::Coordinator::http_addr) tells it).
    pub metrics_listen: Option<SocketAddr>,
    /// Mutual TLS on the control port (`--internal-tls-*`); `None`: clear
    /// text.
    pub internal_tls: Option<InternalTls>,
    /// The state in etcd, with leader election (`--etcd`); `None`: in
    /// `data_dir`, one coordinator.
    pub etcd: Option<EtcdConfig>,
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            replicas: None,
            sc_group_size: crate::state::DEFAULT_SC_GROUP_SIZE,
            log_level: "info".into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            probe: ProbeConfig {
                attempts: DEFAULT_PROBE_ATTEMPTS,
                timeout: Duration::from_millis(DEFAULT_PROBE_TIMEOUT_MS),
            },
            restart_grace: Duration::from_millis(DEFAULT_RESTART_GRACE_MS),
            lease: Duration::from_millis(crate::lease::DEFAULT_LEASE_MS),
            auto_rebalance: false,
            secret: None,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            metrics_listen: None,
            internal_tls: None,
            etcd: None,
        }
    }
}

impl TryFrom<CoordinatorArgs> for CoordinatorConfig {
    type Error = CoordinatorError;

    /// Errors: neither --cluster-secret-file nor --insecure-no-secret, or
    /// a secret file that cannot be used.
    fn try_from(args: CoordinatorArgs) -> Result<CoordinatorConfig, CoordinatorError> {
        let secret = match (&args.cluster_secret_file, args.insecure_no_secret) {
            (Some(path), _) => Some(ClusterSecret::load(path)?),
            (None, true) => None,
            (None, false) => return Err(CoordinatorError::NoSecret),
        };
        let internal_tls = InternalTls::from_paths(
            args.internal_tls_cert.as_deref(),
            args.internal_tls_key.as_deref(),
            args.internal_tls_ca.as_deref(),
        )
        .map_err(CoordinatorError::Tls)?;
        Ok(CoordinatorConfig {
            listen: args.listen,
            data_dir: args.data_dir,
            replicas: args.replicas,
            sc_group_size: args.sc_group_size,
            log_level: args.log_level,
            probe: ProbeConfig { attempts: args.probe_attempts, timeout: Duration::from_millis(args.probe_timeout_ms) },
            restart_grace: Duration::from_millis(args.restart_grace_ms),
            lease: Duration::from_millis(args.lease_ms),
            auto_rebalance: args.auto_rebalance,
            secret,
            max_connections_per_ip: args.max_connections_per_ip,
            metrics_listen: args.metrics_port.map(|port| SocketAddr::new(args.listen.ip(), port)),
            internal_tls,
            etcd: (!args.etcd.is_empty()).then(|| EtcdConfig {
                endpoints: args.etcd.clone(),
                prefix: args.etcd_prefix.trim_end_matches('/').to_string(),
                lease_secs: args.etcd_lease_secs,
            }),
            ..CoordinatorConfig::default()
        })
    }
}

/// Why the coordinator could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("cannot use the state directory {dir}: {source}")]
    DataDir { dir: PathBuf, source: io::Error },
    #[error("cannot read the coordinator's state: {0}")]
    Load(io::Error),
    #[error("the coordinator's saved state is unusable ({0}); fix or move it away to start a new cluster")]
    Corrupt(String),
    #[error("cannot save the coordinator's state: {0}")]
    Save(io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("bad log level '{level}': {message}")]
    LogLevel { level: String, message: String },
    #[error("cannot install signal handlers: {0}")]
    Signals(io::Error),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(
        "no cluster secret: give --cluster-secret-file PATH (the same file to every server), or \
         --insecure-no-secret to let anyone who can reach the control port change the cluster"
    )]
    NoSecret,
    #[error("{0}")]
    Tls(String),
    #[error("etcd at {endpoints}: {message}")]
    Etcd { endpoints: String, message: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: CoordinatorArgs,
    }

    #[test]
    fn args_defaults_and_overrides() {
        assert!(matches!(CoordinatorConfig::try_from(Cli::parse_from(["c"]).args), Err(CoordinatorError::NoSecret)));
        let config = CoordinatorConfig::try_from(Cli::parse_from(["c", "--insecure-no-secret"]).args).unwrap();
        assert!(config.secret.is_none());
        assert_eq!(config.max_connections_per_ip, DEFAULT_MAX_CONNECTIONS_PER_IP);
        assert_eq!(config.listen, "127.0.0.1:7600".parse().unwrap());
        assert_eq!(config.data_dir, PathBuf::from("./shoal-coordinator"));
        assert_eq!(config.replicas, None);
        assert_eq!(config.log_level, "info");
        assert_eq!(config.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(config.probe, ProbeConfig::default());
        assert_eq!(config.metrics_listen, None);

        let cli = Cli::parse_from([
            "c",
            "--listen",
            "0.0.0.0:9",
            "--data-dir",
            "/x",
            "--replicas",
            "2",
            "--log-level",
            "debug",
            "--probe-timeout-ms",
            "100",
            "--probe-attempts",
            "3",
            "--insecure-no-secret",
            "--max-connections-per-ip",
            "5",
            "--metrics-port",
            "9600",
        ]);
        let config = CoordinatorConfig::try_from(cli.args).unwrap();
        assert_eq!(config.max_connections_per_ip, 5);
        assert_eq!(config.metrics_listen, Some("0.0.0.0:9600".parse().unwrap()));
        assert_eq!(config.listen, "0.0.0.0:9".parse().unwrap());
        assert_eq!(config.data_dir, PathBuf::from("/x"));
        assert_eq!(config.replicas, Some(2));
        assert_eq!(config.log_level, "debug");
        assert_eq!(config.probe, ProbeConfig { attempts: 3, timeout: Duration::from_millis(100) });
        assert!(Cli::try_parse_from(["c", "--replicas", "-1"]).is_err());
        assert!(Cli::try_parse_from(["c", "--probe-timeout-ms", "0"]).is_err());
        assert!(Cli::try_parse_from(["c", "--probe-attempts", "0"]).is_err());
    }
}
