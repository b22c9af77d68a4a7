//! The server's configuration: defaults, an optional TOML file, and command
//! line flags that override the file ([`ServerArgs`], flattened into
//! `shoal server` and `shoal local` by the binary).
//!
//! Precedence: flag > file > default. [`ServerConfig::validate`] checks the
//! limits against each other (a request must be able to carry the largest
//! value, a reply buffer must hold the largest reply of one value, ...), and
//! [`ServerConfig::store_config`] derives the engine's configuration.

use crate::auth::{Password, Users};
use crate::tls::ServerTls;
use serde::Deserialize;
use shoal_cluster::CoordinatorAddrs;
use shoal_engine::{Eviction, StoreConfig};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Default port of the native protocol.
pub const DEFAULT_NATIVE_PORT: u16 = 7700;
/// Default port of the Redis protocol (not Redis's 6379, so it never collides
/// with a local Redis).
pub const DEFAULT_RESP_PORT: u16 = 6380;
/// Default port of the memcached protocol (not memcached's 11211, so that
/// it never collides with a local memcached).
pub const DEFAULT_MEMCACHED_PORT: u16 = 11212;

/// Everything a server needs to start. `ServerConfig::default()` is what
/// `shoal server` runs with when given no file and no flags.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address every listener binds to.
    pub listen: IpAddr,
    /// Port of the native binary protocol; 0 picks a free port.
    pub native_port: u16,
    /// Port of the Redis protocol (RESP2/RESP3); 0 picks a free port.
    pub resp_port: u16,
    /// Port of the memcached protocol (text and meta commands); 0 picks a
    /// free port.
    pub memcached_port: u16,
    /// Whether to serve the memcached protocol at all.
    pub memcached: bool,
    /// Bytes of log memory for objects (the store's pool).
    pub memory: ByteSize,
    /// What a full store does: refuse writes ("none") or evict its oldest
    /// segments ("oldest", cache mode). See `docs/resp.md`, cache mode.
    #[serde(deserialize_with = "from_str")]
    pub eviction: Eviction,
    /// The log utilisation the cleaner keeps, beyond a slack of 2-16 MiB,
    /// giving freed memory back to the OS (0: clean only when memory is
    /// short). See `StoreConfig::target_utilisation`.
    pub target_utilisation: f64,
    /// Largest value a client may store.
    pub max_value_size: ByteSize,
    /// Largest single request (one RESP command or one native frame). Must
    /// exceed `max_value_size`, since a write carries a whole value.
    pub max_request_size: ByteSize,
    /// Per connection: most bytes of received, not yet executed requests
    /// held in memory. At least `max_request_size`.
    pub request_buffer_size: ByteSize,
    /// Per connection: most bytes of replies not yet taken by the client. A
    /// client whose unread replies reach it is disconnected.
    pub reply_buffer_size: ByteSize,
    /// Most client connections at once, over all protocols; more are sent an
    /// error and closed.
    pub max_connections: usize,
    /// Over all client connections (every front end): most bytes their
    /// request and reply buffers may hold together. Over it, connections
    /// with unread replies stop being read, then those holding the most
    /// unread replies are closed (module `budget`). At least
    /// `request_buffer_size` + `reply_buffer_size`.
    pub client_buffer_budget: ByteSize,
    /// Milliseconds a connection may hold part of a request without
    /// completing one (a request sent slowly or stalled half way) before it
    /// is closed; 0 means never. Independent of the idle timeout.
    pub request_timeout_ms: u64,
    /// Seconds a connection may make no progress (nothing read, nothing of
    /// its replies taken) before it is closed; 0 means never.
    pub idle_timeout_secs: u64,
    /// Log filter: a level (error, warn, info, debug, trace) or a
    /// `tracing_subscriber` filter such as `shoal_server=debug`.
    pub log_level: String,
    /// Directory for durable data: the server's id in its cluster and its
    /// backup's buffers and segment files. Required with `coordinator`.
    pub data_dir: Option<PathBuf>,
    /// The coordinators' addresses (the leader and its standbys, in any
    /// order). Set: the server enlists with the leader, serves the tablets
    /// it is given and replicates its log to other servers' backups.
    /// Unset: a standalone server, in memory only.
    pub coordinator: Option<CoordinatorAddrs>,
    /// Port of the backup's replication protocol (`docs/replication.md`);
    /// 0 picks a free port.
    pub backup_port: u16,
    /// Segment buffers the backup keeps for open replicas (each the size of
    /// a segment, in files under `data_dir`, mapped into memory).
    pub backup_buffers: usize,
    /// Logs of each streamlet's MultiLog for streams created without a
    /// number of their own (`docs/streams.md`); 0: the number of cores.
    pub stream_logs: u32,
    /// Retention of streams (`docs/streams.md`, "Retention"): the most
    /// bytes of records each streamlet keeps (its oldest closed groups go
    /// first); 0: no limit.
    pub stream_retention_bytes: ByteSize,
    /// Retention of streams: how long a closed group is kept after its
    /// last record was appended, in milliseconds; 0: no limit.
    pub stream_retention_ms: u64,
    /// Sync an open replica's buffer to disk before acknowledging its bytes
    /// (durability against a whole-cluster power loss, at a cost per write).
    pub sync_open: bool,
    /// How the master sends its log to backups: "tailwind" (bytes land in
    /// place, cumulative acknowledgements) or "conventional" (one parsed and
    /// answered call per append, as RAMCloud before Tailwind).
    pub replication: ReplicationMode,
    /// Milliseconds a backup may leave appended bytes unacknowledged before its
    /// replica is re-opened on another backup.
    pub replica_timeout_ms: u64,
    /// Make all of `memory` resident at start (in the background) rather
    /// than a few MiB ahead of the writes; resident memory is then `memory`
    /// from the start.
    pub prefault_memory: bool,
    /// The `default` user's password (Redis's `requirepass`): set, clients
    /// must authenticate on every client port before anything but AUTH,
    /// HELLO, QUIT and (native) PING. See `docs/security.md`.
    pub requirepass: Option<Password>,
    /// A Redis-style ACL file of more users (`user NAME on >password`; see
    /// [`crate::auth`] for the rules accepted). Every user has full access.
    pub acl_file: Option<PathBuf>,
    /// File holding the cluster's secret (the coordinator's and every
    /// server's): control and replication connections prove it
    /// (`docs/security.md`). Unset: no handshake; the command line then
    /// requires `insecure_no_secret` for a server with a coordinator.
    pub cluster_secret_file: Option<PathBuf>,
    /// Run in a cluster without a secret (command line: otherwise refused).
    pub insecure_no_secret: bool,
    /// PEM file of this server's certificate (then its chain). With
    /// `tls_key`, the client ports (RESP, memcached and native) speak only TLS
    /// (`docs/security.md`, "TLS").
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// PEM file of the CA certificates that sign client certificates (and,
    /// in a cluster, the other servers' certificates). Set: clients must
    /// present a certificate it signed, unless `tls_auth_clients` says
    /// otherwise.
    pub tls_ca: Option<PathBuf>,
    /// Whether clients must present a certificate when `tls_ca` is set
    /// (Redis's `tls-auth-clients`).
    pub tls_auth_clients: TlsAuthClients,
    /// Milliseconds a client has to complete the TLS handshake after
    /// connecting; then it is closed.
    pub tls_handshake_timeout_ms: u64,
    /// Mutual TLS on the internal connections (`docs/security.md`,
    /// "Internal TLS"): PEM files of this server's internal certificate
    /// (naming `shoal-internal`, signed by the cluster CA), its key and the
    /// cluster CA. All three or none; with them the backup port speaks only
    /// TLS, and the server dials the coordinator and other backups over TLS.
    pub internal_tls_cert: Option<PathBuf>,
    pub internal_tls_key: Option<PathBuf>,
    pub internal_tls_ca: Option<PathBuf>,
    /// The Redis port behaves as a Redis Cluster node (`docs/redis-cluster.md`):
    /// CLUSTER SLOTS/SHARDS/NODES/INFO describe the cluster's slots, a key
    /// mastered elsewhere is answered `-MOVED slot host:port` instead of
    /// being forwarded, keys of several slots are refused with CROSSSLOT,
    /// and keyless commands (DBSIZE, KEYS, SCAN, FLUSHALL) see this server
    /// only. Off: any server serves any key by forwarding.
    pub cluster_mode: bool,
    /// Port of the HTTP listener serving `/metrics` (Prometheus text
    /// format; `docs/observability.md`); 0 picks a free port. Unset: no
    /// HTTP listener.
    pub metrics_port: Option<u16>,
    /// Symmetric caching (`docs/symmetric-caching.md`): "on" caches the
    /// hottest keys of this server's group on every member ("off": none).
    pub sc: ScSwitch,
    /// The consistency of hot keys' writes this server publishes when it
    /// leads its group: "strong" (linearizable) or "eventual".
    pub sc_consistency: ScConsistency,
    /// Length of a hot-set round in milliseconds.
    pub sc_epoch_ms: u64,
    /// Most keys in a hot set; unset: 0.1% of the keys, at most 100,000.
    pub sc_cache_keys: Option<usize>,
    /// The longest lease of a chunk lock (a longer one asked for is cut
    /// to it), and how long chunks taken over in a crash recovery stay
    /// unlockable (`docs/chunks.md`, "Locks").
    pub chunk_lock_max_lease_ms: u64,
    /// Most chunk locks held and waiting together on this server.
    pub chunk_lock_limit: usize,
    /// Most chunk locks held and waiting of one lock owner; unset: a tenth
    /// of `chunk_lock_limit` (at least 1). Owner ids are the client's
    /// choice: this bounds a client that keeps one id, and the server-wide
    /// limit bounds everything (`docs/chunks.md`, "Limits and metrics").
    pub chunk_lock_owner_limit: Option<usize>,
}

/// Symmetric caching at all ([`ServerConfig::sc`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ScSwitch {
    #[default]
    Off,
    On,
}

/// [`ServerConfig::sc_consistency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ScConsistency {
    #[default]
    Strong,
    Eventual,
}

/// Whether TLS clients must present a certificate (with `tls_ca` set), as
/// Redis's `tls-auth-clients`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TlsAuthClients {
    /// A certificate signed by the CA is required.
    #[default]
    Yes,
    /// None is asked for (the CA then only verifies other servers).
    No,
    /// One is asked for and verified if given, but not required.
    Optional,
}

/// The replication data path (see [`ServerConfig::replication`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ReplicationMode {
    #[default]
    Tailwind,
    Conventional,
}

/// Deserializes a config value through its `FromStr` (the same spelling as
/// its flag).
fn from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr<Err = String>,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// Default port of the backup's replication protocol.
pub const DEFAULT_BACKUP_PORT: u16 = 7800;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
            native_port: DEFAULT_NATIVE_PORT,
            resp_port: DEFAULT_RESP_PORT,
            memcached_port: DEFAULT_MEMCACHED_PORT,
            memcached: true,
            memory: ByteSize(1 << 30),
            eviction: Eviction::None,
            target_utilisation: shoal_engine::DEFAULT_TARGET_UTILISATION,
            max_value_size: ByteSize(StoreConfig::default().max_value_bytes as u64),
            max_request_size: ByteSize(2 << 20),
            request_buffer_size: ByteSize(4 << 20),
            reply_buffer_size: ByteSize(64 << 20),
            max_connections: 10_000,
            client_buffer_budget: ByteSize(256 << 20),
            request_timeout_ms: 10_000,
            idle_timeout_secs: 0,
            log_level: "info".into(),
            data_dir: None,
            coordinator: None,
            backup_port: DEFAULT_BACKUP_PORT,
            backup_buffers: 16,
            stream_logs: 0,
            stream_retention_bytes: ByteSize(0),
            stream_retention_ms: 0,
            sync_open: false,
            replication: ReplicationMode::Tailwind,
            replica_timeout_ms: 2000,
            prefault_memory: false,
            requirepass: None,
            acl_file: None,
            cluster_secret_file: None,
            insecure_no_secret: false,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_auth_clients: TlsAuthClients::Yes,
            tls_handshake_timeout_ms: 5000,
            internal_tls_cert: None,
            internal_tls_key: None,
            internal_tls_ca: None,
            cluster_mode: false,
            metrics_port: None,
            sc: ScSwitch::Off,
            sc_consistency: ScConsistency::Strong,
            sc_epoch_ms: 1000,
            sc_cache_keys: None,
            chunk_lock_max_lease_ms: 30_000,
            chunk_lock_limit: 100_000,
            chunk_lock_owner_limit: None,
        }
    }
}

/// Why a configuration could not be loaded or cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl ServerConfig {
    /// Reads a TOML file; keys missing from it keep their defaults, unknown
    /// keys are an error.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        ServerConfig::from_toml(&text).map_err(|message| ConfigError::Parse { path: path.into(), message })
    }

    /// Parses the text of a TOML config file.
    pub fn from_toml(text: &str) -> Result<ServerConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    pub fn resp_addr(&self) -> SocketAddr {
        SocketAddr::new(self.listen, self.resp_port)
    }

    pub fn memcached_addr(&self) -> SocketAddr {
        SocketAddr::new(self.listen, self.memcached_port)
    }

    pub fn native_addr(&self) -> SocketAddr {
        SocketAddr::new(self.listen, self.native_port)
    }

    pub fn backup_addr(&self) -> SocketAddr {
        SocketAddr::new(self.listen, self.backup_port)
    }

    /// The HTTP listener's address, if `/metrics` is served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_port.map(|port| SocketAddr::new(self.listen, port))
    }

    /// `None` when connections never time out.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_secs > 0).then(|| Duration::from_secs(self.idle_timeout_secs))
    }

    /// `None` when half-sent requests never time out.
    pub fn request_timeout(&self) -> Option<Duration> {
        (self.request_timeout_ms > 0).then(|| Duration::from_millis(self.request_timeout_ms))
    }

    /// How long a client may take over the TLS handshake (at least 1 ms).
    /// The internal TLS identity of `internal_tls_*` (`None`: off), loaded
    /// from its files. Errors name the file and what is wrong with it.
    pub fn internal_tls(&self) -> Result<Option<shoal_cluster::tls::InternalTls>, String> {
        shoal_cluster::tls::InternalTls::from_paths(
            self.internal_tls_cert.as_deref(),
            self.internal_tls_key.as_deref(),
            self.internal_tls_ca.as_deref(),
        )
    }

    pub fn tls_handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.tls_handshake_timeout_ms.max(1))
    }

    /// The engine's configuration for this server.
    /// The per-owner chunk lock limit in force: the one set, or a tenth of
    /// the server's limit (at least 1).
    pub fn chunk_lock_owner_limit(&self) -> usize {
        self.chunk_lock_owner_limit.unwrap_or((self.chunk_lock_limit / 10).max(1))
    }

    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            memory_bytes: self.memory.0 as usize,
            max_value_bytes: self.max_value_size.0 as usize,
            prefault: self.prefault_memory,
            eviction: self.eviction,
            target_utilisation: self.target_utilisation,
            ..StoreConfig::default()
        }
    }

    /// The stream retention these settings ask for.
    pub fn stream_retention(&self) -> shoal_engine::Retention {
        shoal_engine::Retention { bytes: self.stream_retention_bytes.0, age_ms: self.stream_retention_ms }
    }

    /// Checks the limits against each other and against the engine's.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |s: String| Err(ConfigError::Invalid(s));
        if self.stream_logs > shoal_common::stream::MAX_STREAM_LOGS {
            return bad(format!(
                "stream_logs ({}) must be at most {}",
                self.stream_logs,
                shoal_common::stream::MAX_STREAM_LOGS
            ));
        }
        let (value, request) = (self.max_value_size.0, self.max_request_size.0);
        if request <= value + 1024 {
            return bad(format!(
                "max_request_size ({}) must exceed max_value_size ({}) by more than 1 KiB, so a write can carry \
                 the largest value",
                self.max_request_size, self.max_value_size
            ));
        }
        if self.request_buffer_size.0 < request {
            return bad(format!(
                "request_buffer_size ({}) must be at least max_request_size ({})",
                self.request_buffer_size, self.max_request_size
            ));
        }
        if self.reply_buffer_size.0 < value + 64 * 1024 {
            return bad(format!(
                "reply_buffer_size ({}) must exceed max_value_size ({}) by at least 64 KiB, so a reply can carry \
                 the largest value",
                self.reply_buffer_size, self.max_value_size
            ));
        }
        if self.client_buffer_budget.0 < self.request_buffer_size.0.saturating_add(self.reply_buffer_size.0) {
            return bad(format!(
                "client_buffer_budget ({}) must be at least request_buffer_size ({}) + reply_buffer_size ({}), so \
                 one connection can use its own bounds",
                self.client_buffer_budget, self.request_buffer_size, self.reply_buffer_size
            ));
        }
        if self.sc == ScSwitch::On && self.coordinator.is_none() {
            return bad("sc = on needs a cluster (a coordinator): symmetric caching is between servers".into());
        }
        if self.sc == ScSwitch::On && self.eviction == Eviction::Oldest {
            return bad("sc = on cannot be combined with eviction = oldest: an evicted hot key would stay readable \
                        from the copies on the other servers of the group (eviction sends no invalidation)"
                .into());
        }
        if self.sc_epoch_ms == 0 {
            return bad("sc_epoch_ms must be at least 1".into());
        }
        if self.chunk_lock_max_lease_ms == 0 || self.chunk_lock_max_lease_ms > u32::MAX as u64 {
            return bad("chunk_lock_max_lease_ms must be 1 to 4294967295".into());
        }
        if self.chunk_lock_limit == 0 {
            return bad("chunk_lock_limit must be at least 1".into());
        }
        if self.chunk_lock_owner_limit == Some(0) {
            return bad("chunk_lock_owner_limit must be at least 1".into());
        }
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1".into());
        }
        if self.coordinator.is_some() && self.data_dir.is_none() {
            return bad("a server in a cluster (coordinator set) needs a data_dir for its backup".into());
        }
        if self.coordinator.is_some() && self.backup_buffers < 2 {
            return bad("backup_buffers must be at least 2".into());
        }
        if usize::try_from(self.memory.0).is_err() || usize::try_from(request).is_err() {
            return bad("sizes must fit this machine's address space".into());
        }
        Users::from_config(self).map_err(ConfigError::Invalid)?;
        let internal = self.internal_tls().map_err(ConfigError::Invalid)?;
        if internal.is_some() && self.coordinator.is_none() {
            return bad("internal TLS (internal_tls_cert) is for a server in a cluster: give coordinator too".into());
        }
        let tls = ServerTls::from_config(self).map_err(ConfigError::Invalid)?;
        if self.coordinator.is_some() && tls.as_ref().is_some_and(|t| !t.can_connect_peers()) {
            return bad("a server in a cluster with TLS needs tls_ca: servers forward commands to each other over \
                 TLS and verify each other's certificates with it (tls_auth_clients = no keeps client \
                 certificates optional)"
                .into());
        }
        self.store_config().validate().map_err(|e| ConfigError::Invalid(e.0))
    }
}

/// A number of bytes, written as an integer or with a unit: `65536`, `64KiB`,
/// `64k`, `1MiB`, `1m`, `1GiB`, `1g` (units are powers of 1024).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<ByteSize, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits.parse().map_err(|_| format!("'{s}' is not a size (examples: 65536, 64KiB, 1GiB)"))?;
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            other => return Err(format!("unknown size unit '{other}' in '{s}' (use KiB, MiB, GiB)")),
        };
        n.checked_mul(1 << shift).map(ByteSize).ok_or_else(|| format!("size '{s}' is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
            if n >= 1 << shift && n.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Command line flags of a server. Every flag overrides the same key of the
/// config file; unset flags leave the file's value (or the default).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ServerArgs {
    /// TOML config file, with any of the keys listen, native_port,
    /// resp_port, memcached_port, memcached, memory, eviction, target_utilisation, max_value_size, max_request_size,
    /// request_buffer_size, reply_buffer_size, max_connections,
    /// client_buffer_budget, request_timeout_ms, idle_timeout_secs, log_level, data_dir, coordinator, backup_port,
    /// backup_buffers, stream_logs, stream_retention_bytes, stream_retention_ms, sync_open, replication, replica_timeout_ms,
    /// prefault_memory, requirepass, acl_file, cluster_secret_file,
    /// insecure_no_secret, tls_cert, tls_key, tls_ca, tls_auth_clients,
    /// tls_handshake_timeout_ms, internal_tls_cert, internal_tls_key, internal_tls_ca,
    /// cluster_mode, metrics_port, sc, sc_consistency, sc_epoch_ms, sc_cache_keys,
    /// chunk_lock_max_lease_ms, chunk_lock_limit, chunk_lock_owner_limit (sizes as numbers of bytes or strings like
    /// "512MiB"). Flags override the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, for every protocol [default: 127.0.0.1].
    #[arg(long, value_name = "IP")]
    pub listen: Option<IpAddr>,
    /// Port of Shoal's native binary protocol; 0 picks a free port [default: 7700].
    #[arg(long, value_name = "PORT")]
    pub native_port: Option<u16>,
    /// Port of the Redis protocol (RESP2, RESP3 after HELLO 3); 0 picks a
    /// free port [default: 6380, so that it never collides with a local Redis].
    #[arg(long, value_name = "PORT")]
    pub resp_port: Option<u16>,
    /// Port of the memcached protocol (text and meta commands); 0 picks a
    /// free port [default: 11212, so that it never collides with a local
    /// memcached].
    #[arg(long, value_name = "PORT")]
    pub memcached_port: Option<u16>,
    /// Serve no memcached protocol (no port is opened for it).
    #[arg(long)]
    pub no_memcached: bool,
    /// Memory for objects (the log), e.g. 512MiB or 4GiB. Writes are refused
    /// with an out-of-memory error when live data fills it [default: 1GiB].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<ByteSize>,
    /// What a full store does: `none` refuses writes with an out-of-memory
    /// error (a store of record); `oldest` is cache mode, as memcached or
    /// Redis's allkeys policies: when live data passes 90% of --memory, the
    /// oldest segments of the log are evicted whole, first written first
    /// out, so writes never fail for memory [default: none].
    #[arg(long, value_name = "POLICY")]
    pub eviction: Option<Eviction>,
    /// Log utilisation the cleaner keeps (live data over the memory the
    /// log holds), giving the memory it frees back to the OS, so that
    /// resident memory follows the data: about live data / this, plus a
    /// slack of an eighth of that (2 to 16 MiB), plus up to 8 MiB of warm
    /// free memory, plus the hash table (8 to 12 bytes per object; it grows
    /// with the objects), whatever --memory allows. 0 cleans only when --memory is nearly
    /// full (resident memory then grows to --memory and stays). Between
    /// 0.5 and 0.98 [default: 0.9].
    #[arg(long, value_name = "FRACTION")]
    pub target_utilisation: Option<f64>,
    /// Largest value a client may store [default: 1MiB].
    #[arg(long, value_name = "SIZE")]
    pub max_value_size: Option<ByteSize>,
    /// Largest single request (one Redis command, one native frame); larger
    /// ones get an error and the connection is closed. Must exceed
    /// --max-value-size [default: 2MiB].
    #[arg(long, value_name = "SIZE")]
    pub max_request_size: Option<ByteSize>,
    /// Per connection: most bytes of received requests buffered before they
    /// run. At least --max-request-size [default: 4MiB].
    #[arg(long, value_name = "SIZE")]
    pub request_buffer_size: Option<ByteSize>,
    /// Per connection: most bytes of replies the client has not read yet; a
    /// client that lets more pile up is disconnected [default: 64MiB].
    #[arg(long, value_name = "SIZE")]
    pub reply_buffer_size: Option<ByteSize>,
    /// Most client connections at once; more are sent "max number of clients
    /// reached" and closed [default: 10000].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Most bytes the request and reply buffers of all client connections
    /// may hold together. Over it, connections whose clients do not read
    /// their replies stop being read; if that is not enough, those holding
    /// the most unread replies are closed (logged, counted in
    /// client_buffer_disconnects). At least --request-buffer-size +
    /// --reply-buffer-size [default: 256MiB].
    #[arg(long, value_name = "SIZE")]
    pub client_buffer_budget: Option<ByteSize>,
    /// Close a connection that holds part of a request and completes none
    /// for this many milliseconds (a request sent byte by byte, or stalled
    /// half way); a connection with nothing buffered is left to
    /// --idle-timeout. 0: never [default: 10000].
    #[arg(long, value_name = "MS")]
    pub request_timeout_ms: Option<u64>,
    /// Close a connection after this many seconds without progress (idle, or
    /// stalled in the middle of a request, or not reading its replies); 0:
    /// never, as Redis's `timeout`, so that pooled client connections are
    /// not dropped [default: 0].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Log level (error, warn, info, debug, trace) or a tracing filter such
    /// as "shoal_server=debug" [default: info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Data directory: the server's cluster id, its backup's buffers and
    /// segment files. Required with --coordinator.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Join the cluster of the coordinator at this address (ip:port), or
    /// of the coordinators at these (comma-separated: a leader and its
    /// standbys; the server follows whichever leads). Without it the
    /// server runs alone, in memory only.
    #[arg(long, value_name = "ADDR[,ADDR...]")]
    pub coordinator: Option<CoordinatorAddrs>,
    /// Port of the backup's replication protocol; 0 picks a free port [default: 7800].
    #[arg(long, value_name = "PORT")]
    pub backup_port: Option<u16>,
    /// Segment buffers the backup keeps for open replicas, each the size of
    /// a segment (8MiB), in files under the data directory [default: 16].
    #[arg(long, value_name = "N")]
    pub backup_buffers: Option<usize>,
    /// Logs of each streamlet's MultiLog for streams created without a
    /// number of their own: producers of different logs append in parallel
    /// [default: 0, the number of cores].
    #[arg(long, value_name = "Q")]
    pub stream_logs: Option<u32>,
    /// Stream retention by size: the most bytes of records each streamlet
    /// keeps; its oldest closed groups are removed beyond it [default: 0,
    /// no limit].
    #[arg(long, value_name = "BYTES")]
    pub stream_retention_bytes: Option<ByteSize>,
    /// Stream retention by age: a closed group is removed this many
    /// milliseconds after its last record was appended [default: 0, no
    /// limit].
    #[arg(long, value_name = "MS")]
    pub stream_retention_ms: Option<u64>,
    /// Backups sync an open replica to disk before acknowledging its bytes:
    /// survives a whole-cluster power loss, costs a disk sync per round.
    #[arg(long)]
    pub sync_open: bool,
    /// Replication data path: tailwind (bytes land in place on backups,
    /// cumulative acknowledgements) or conventional (each append a call the
    /// backup parses and answers) [default: tailwind].
    #[arg(long, value_name = "MODE")]
    pub replication: Option<ReplicationMode>,
    /// Milliseconds a backup may leave bytes unacknowledged before the
    /// replica is re-opened on another backup [default: 2000].
    #[arg(long, value_name = "MS")]
    pub replica_timeout_ms: Option<u64>,
    /// Make all of --memory resident at start, in the background (as
    /// RAMCloud reserves its memory), at the cost of resident memory the
    /// size of --memory from the start. Without it, a thread keeps the
    /// memory resident a few MiB ahead of the writes, so resident memory
    /// follows the data; a recovery replaying into this server faster than
    /// that thread faults pages in then waits for them.
    #[arg(long)]
    pub prefault_memory: bool,
    /// Password of the `default` user (Redis's requirepass): clients must
    /// authenticate (Redis: AUTH password, or HELLO 3 AUTH default password;
    /// native protocol: its AUTH request) before any other command, on every
    /// client port. Also read from SHOAL_PASSWORD, which keeps it out of the
    /// process list. Give every server of a cluster the same credentials:
    /// servers use them to forward commands to each other.
    #[arg(long, value_name = "PASSWORD", env = "SHOAL_PASSWORD", hide_env_values = true)]
    pub password: Option<Password>,
    /// File of more users, in Redis's ACL file format: one line per user,
    /// `user NAME on >PASSWORD` (also off, nopass, several >passwords). Every
    /// user has full access; rules that would restrict one are refused. A
    /// `user default ...` line sets the default user instead of --password.
    #[arg(long, value_name = "FILE")]
    pub acl_file: Option<PathBuf>,
    /// The cluster's secret file (the same as the coordinator's; mode
    /// 0600). This server proves it on every control and replication
    /// connection, and backups accept only masters that prove it. Required
    /// with --coordinator unless --insecure-no-secret. See docs/security.md.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Join a cluster without a secret: this server's backup then serves
    /// anyone who can connect. Only for a network where every peer is trusted.
    #[arg(long, conflicts_with = "cluster_secret_file")]
    pub insecure_no_secret: bool,
    /// PEM certificate (then its chain) of this server. With --tls-key the
    /// Redis, memcached and native ports speak only TLS, on the same port numbers (as
    /// Redis with `--tls-port P --port 0`). See docs/security.md.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: clients must present a certificate signed by
    /// them (mutual TLS, as Redis's tls-auth-clients yes); in a cluster,
    /// servers also verify each other with them. Needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls-ca: whether clients must present a certificate (yes),
    /// may (optional) or are not asked (no) [default: yes].
    #[arg(long, value_name = "WHEN")]
    pub tls_auth_clients: Option<TlsAuthClients>,
    /// Milliseconds a client has to finish the TLS handshake; a client that
    /// connects and says nothing is closed then [default: 5000].
    #[arg(long, value_name = "MS")]
    pub tls_handshake_timeout_ms: Option<u64>,
    /// Mutual TLS on the internal ports: this server's certificate (PEM,
    /// then its chain), signed by the cluster CA of --internal-tls-ca and
    /// naming the DNS name shoal-internal, for server and client
    /// authentication. With it the backup port speaks only TLS and every
    /// connection to the coordinator and to other backups is TLS, each end
    /// checking the other's certificate; the cluster handshake runs inside.
    /// The coordinator and every server need it (one CA). Needs
    /// --internal-tls-key, --internal-tls-ca and --coordinator. See
    /// docs/security.md, "Internal TLS".
    #[arg(long, value_name = "PATH", requires_all = ["internal_tls_key", "internal_tls_ca"])]
    pub internal_tls_cert: Option<PathBuf>,
    /// PEM private key of --internal-tls-cert.
    #[arg(long, value_name = "PATH", requires = "internal_tls_cert")]
    pub internal_tls_key: Option<PathBuf>,
    /// PEM certificates of the cluster CA: peers on the internal ports must
    /// present a certificate it signed.
    #[arg(long, value_name = "PATH", requires = "internal_tls_cert")]
    pub internal_tls_ca: Option<PathBuf>,
    /// Redis Cluster mode on the Redis port: cluster-aware clients (redis-cli
    /// -c, redis-py RedisCluster, go-redis ClusterClient, ...) read the slot
    /// map with CLUSTER SLOTS/SHARDS/NODES and send each key to its master;
    /// a key mastered elsewhere gets -MOVED, keys of several slots
    /// CROSSSLOT, and DBSIZE, KEYS, SCAN and FLUSHALL see this server only.
    /// Without it, any server serves every key by forwarding, so plain
    /// clients work. See docs/redis-cluster.md.
    #[arg(long)]
    pub cluster_mode: bool,
    /// Serve /metrics (Prometheus text format: requests, latency, memory,
    /// cleaner, replication, backup, recovery; docs/observability.md) over
    /// HTTP on this port of --listen; 0 picks a free port (logged). Without
    /// it no HTTP port is opened.
    #[arg(long, value_name = "PORT")]
    pub metrics_port: Option<u16>,
    /// Symmetric caching (docs/symmetric-caching.md; a cluster server
    /// only): `on` caches the hottest keys of this server's group (the
    /// coordinator's --sc-group-size) on every member, so reads of them are
    /// answered by any member; writes stay at the key's master and its
    /// backups [default: off].
    #[arg(long, value_name = "off|on")]
    pub sc: Option<crate::config::ScSwitch>,
    /// Consistency of hot keys this server publishes when it leads its
    /// group: `strong` (linearizable: a write of a hot key is acknowledged
    /// only once every member dropped its copy) or `eventual` (copies
    /// updated after the write) [default: strong].
    #[arg(long, value_name = "strong|eventual")]
    pub sc_consistency: Option<crate::config::ScConsistency>,
    /// Length of a hot-set round: the group agrees on its hot keys this
    /// often [default: 1000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub sc_epoch_ms: Option<u64>,
    /// Most keys in a hot set [default: 0.1% of the keys, at most 100000].
    #[arg(long, value_name = "N")]
    pub sc_cache_keys: Option<usize>,
    /// Longest lease of a chunk lock, and the time chunks taken over in a
    /// crash recovery stay unlockable [default: 30000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=u32::MAX as u64))]
    pub chunk_lock_max_lease_ms: Option<u64>,
    /// Most chunk locks held and waiting together [default: 100000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub chunk_lock_limit: Option<u64>,
    /// Most chunk locks held and waiting of one lock owner (a client
    /// session's id) [default: a tenth of --chunk-lock-limit].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub chunk_lock_owner_limit: Option<u64>,
}

impl ServerArgs {
    /// The configuration: `base` (or the file given with --config, if any)
    /// with every flag that was set applied on top, validated.
    pub fn into_config(self, base: ServerConfig) -> Result<ServerConfig, ConfigError> {
        let mut c = match &self.config {
            Some(path) => ServerConfig::from_file(path)?,
            None => base,
        };
        macro_rules! set {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = self.$field { c.$target = v; })*
            };
        }
        set!(listen => listen, native_port => native_port, resp_port => resp_port,
            memcached_port => memcached_port, memory => memory, eviction => eviction, target_utilisation => target_utilisation,
            max_value_size => max_value_size, max_request_size => max_request_size,
            request_buffer_size => request_buffer_size, reply_buffer_size => reply_buffer_size,
            max_connections => max_connections, client_buffer_budget => client_buffer_budget,
            request_timeout_ms => request_timeout_ms, idle_timeout => idle_timeout_secs, log_level => log_level,
            backup_port => backup_port, backup_buffers => backup_buffers, stream_logs => stream_logs,
            stream_retention_bytes => stream_retention_bytes, stream_retention_ms => stream_retention_ms,
            replication => replication,
            replica_timeout_ms => replica_timeout_ms, tls_auth_clients => tls_auth_clients,
            tls_handshake_timeout_ms => tls_handshake_timeout_ms);
        if self.data_dir.is_some() {
            c.data_dir = self.data_dir;
        }
        if self.coordinator.is_some() {
            c.coordinator = self.coordinator;
        }
        if self.no_memcached {
            c.memcached = false;
        }
        if self.sync_open {
            c.sync_open = true;
        }
        if self.prefault_memory {
            c.prefault_memory = true;
        }
        if self.cluster_mode {
            c.cluster_mode = true;
        }
        if self.metrics_port.is_some() {
            c.metrics_port = self.metrics_port;
        }
        if let Some(v) = self.sc {
            c.sc = v;
        }
        if let Some(v) = self.sc_consistency {
            c.sc_consistency = v;
        }
        if let Some(v) = self.sc_epoch_ms {
            c.sc_epoch_ms = v;
        }
        if self.sc_cache_keys.is_some() {
            c.sc_cache_keys = self.sc_cache_keys;
        }
        if let Some(v) = self.chunk_lock_max_lease_ms {
            c.chunk_lock_max_lease_ms = v;
        }
        if let Some(v) = self.chunk_lock_limit {
            c.chunk_lock_limit = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = self.chunk_lock_owner_limit {
            c.chunk_lock_owner_limit = Some(usize::try_from(v).unwrap_or(usize::MAX));
        }
        if self.password.is_some() {
            c.requirepass = self.password;
        }
        if self.acl_file.is_some() {
            c.acl_file = self.acl_file;
        }
        if self.cluster_secret_file.is_some() {
            c.cluster_secret_file = self.cluster_secret_file;
        }
        if self.insecure_no_secret {
            c.insecure_no_secret = true;
        }
        for (flag, field) in [
            (self.tls_cert, &mut c.tls_cert),
            (self.tls_key, &mut c.tls_key),
            (self.tls_ca, &mut c.tls_ca),
            (self.internal_tls_cert, &mut c.internal_tls_cert),
            (self.internal_tls_key, &mut c.internal_tls_key),
            (self.internal_tls_ca, &mut c.internal_tls_ca),
        ] {
            if flag.is_some() {
                *field = flag;
            }
        }
        if c.coordinator.is_some() && c.cluster_secret_file.is_none() && !c.insecure_no_secret {
            return Err(ConfigError::Invalid(
                "a server with --coordinator needs --cluster-secret-file PATH (the coordinator's), or \
                 --insecure-no-secret to run its cluster unauthenticated"
                    .into(),
            ));
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        ServerConfig::default().validate().unwrap();
    }

    #[test]
    fn bytesize_parses_units_and_rejects_garbage() {
        assert_eq!("65536".parse::<ByteSize>().unwrap(), ByteSize(65536));
        assert_eq!("64KiB".parse::<ByteSize>().unwrap(), ByteSize(64 << 10));
        assert_eq!("2m".parse::<ByteSize>().unwrap(), ByteSize(2 << 20));
        assert_eq!("1 GiB".parse::<ByteSize>().unwrap(), ByteSize(1 << 30));
        assert!("".parse::<ByteSize>().is_err());
        assert!("12parsecs".parse::<ByteSize>().is_err());
        assert!("99999999999999999999".parse::<ByteSize>().is_err());
        assert!("18446744073709551615g".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(3 << 20).to_string(), "3MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }

    #[test]
    fn from_toml_reads_sizes_as_numbers_or_strings_and_rejects_unknown_keys() {
        let c = ServerConfig::from_toml("resp_port = 7000\nmemory = \"256MiB\"\nmax_value_size = 4096\n").unwrap();
        assert_eq!(c.resp_port, 7000);
        assert_eq!(c.memory, ByteSize(256 << 20));
        assert_eq!(c.max_value_size, ByteSize(4096));
        assert_eq!(c.native_port, DEFAULT_NATIVE_PORT);
        assert!(ServerConfig::from_toml("resp_prot = 7000").unwrap_err().contains("resp_prot"));
    }

    #[test]
    fn into_config_applies_flags_over_file() {
        let dir = std::env::temp_dir().join(format!("shoal-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shoal.toml");
        std::fs::write(&file, "resp_port = 7001\nnative_port = 7002\n").unwrap();
        let args = ServerArgs { config: Some(file), resp_port: Some(7003), ..Default::default() };
        let c = args.into_config(ServerConfig::default()).unwrap();
        assert_eq!((c.resp_port, c.native_port), (7003, 7002));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn requirepass_and_acl_file_come_from_file_or_flags() {
        let dir = std::env::temp_dir().join(format!("shoal-config-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let acl = dir.join("users.acl");
        std::fs::write(&acl, "user alice on >a\n").unwrap();
        let file = dir.join("shoal.toml");
        std::fs::write(&file, format!("requirepass = \"p1\"\nacl_file = {:?}\n", acl.display().to_string())).unwrap();
        let c = ServerArgs { config: Some(file.clone()), ..Default::default() }.into_config(ServerConfig::default());
        let c = c.unwrap();
        assert_eq!(c.requirepass, Some(Password("p1".into())));
        assert_eq!(c.acl_file.as_deref(), Some(acl.as_path()));
        let args = ServerArgs { config: Some(file), password: Some(Password("p2".into())), ..Default::default() };
        assert_eq!(args.into_config(ServerConfig::default()).unwrap().requirepass, Some(Password("p2".into())));
        std::fs::write(&acl, "user alice on ~cache:*\n").unwrap();
        let args = ServerArgs { acl_file: Some(acl), ..Default::default() };
        let e = args.into_config(ServerConfig::default()).unwrap_err().to_string();
        assert!(e.contains("users.acl: line 1: user 'alice'"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn validate_rejects_inconsistent_limits() {
        let mut c = ServerConfig { max_request_size: ByteSize(1 << 20), ..Default::default() };
        assert!(c.validate().is_err(), "request must exceed value");
        c.max_request_size = ByteSize(2 << 20);
        c.request_buffer_size = ByteSize(1 << 20);
        assert!(c.validate().is_err(), "buffer must hold a request");
        c.request_buffer_size = ByteSize(4 << 20);
        c.reply_buffer_size = ByteSize(1 << 20);
        assert!(c.validate().is_err(), "reply buffer must hold a value");
        c.reply_buffer_size = ByteSize(64 << 20);
        c.client_buffer_budget = ByteSize(64 << 20);
        assert!(c.validate().is_err(), "budget must hold one connection's buffers");
        c.client_buffer_budget = ByteSize(256 << 20);
        c.memory = ByteSize(1 << 20);
        assert!(c.validate().is_err(), "engine needs more memory");
    }

    #[test]
    fn validate_refuses_symmetric_caching_with_eviction() {
        let dir = std::env::temp_dir();
        let mut c = ServerConfig {
            coordinator: Some("127.0.0.1:1".parse::<std::net::SocketAddr>().expect("an address").into()),
            data_dir: Some(dir),
            sc: ScSwitch::On,
            ..Default::default()
        };
        c.validate().expect("symmetric caching in a cluster");
        c.eviction = Eviction::Oldest;
        let e = c.validate().expect_err("an evicted hot key would stay readable from copies").to_string();
        assert!(e.contains("sc = on cannot be combined with eviction = oldest"), "{e}");
        c.sc = ScSwitch::Off;
        c.validate().expect("eviction alone");
    }
}
