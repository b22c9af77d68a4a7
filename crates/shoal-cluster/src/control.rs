//! The control protocol: how servers, clients and the command line talk to
//! the coordinator (`docs/coordinator.md`).
//!
//! A frame is a 4-byte little-endian body length followed by that many
//! bytes of UTF-8 JSON: one [`ControlRequest`] from the caller, answered by
//! one [`ControlResponse`], in order, on a connection the caller may reuse.
//! Bodies over [`MAX_CONTROL_FRAME`] are refused before they are read.
//!
//! When the cluster has a secret, a connection begins with the cluster
//! handshake ([`crate::auth`]); what each kind of connection may ask is in
//! `docs/security.md` ("Internal ports"). [`ControlAuth`] says how a caller
//! authenticates.

use crate::auth::{self, AuthError, ClusterSecret, Credential, Identity, Port, Session};
use crate::map::{ClusterMap, ReplicaFloor, ServerId, TableInfo};
use crate::tls::{InternalStream, InternalTls};
use serde::{Deserialize, Serialize};
use shoal_common::{LogId, SegmentId};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest control frame body either side accepts.
pub const MAX_CONTROL_FRAME: usize = 16 << 20;

/// A request to the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlRequest {
    /// A server starting. `previous` is the id it had before a restart (read
    /// from its data directory): the coordinator gives the same id back,
    /// with the same tablets, and names the earlier logs it must replay
    /// before serving. Answered by `Enlisted`.
    Enlist { previous: Option<ServerId>, native: SocketAddr, resp: SocketAddr, backup: SocketAddr },
    /// The current map. Answered by `Map`.
    GetMap,
    /// The map once its version exceeds `known_version`, or the current one
    /// after `timeout_ms`. Answered by `Map`.
    WatchMap {
        known_version: u64,
        timeout_ms: u64,
        /// The watching server, if a server: the coordinator then knows
        /// which map versions each server has applied (fencing waits for it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<ServerId>,
    },
    /// Creates a table split into `span` tablets spread over the servers
    /// (idempotent by name: an existing table is returned as it is). With
    /// `slots`, the table is slot-hashed (`shoal_common::slots`: its id has
    /// the flag bit and its tablets are whole ranges of Redis Cluster
    /// slots). Answered by `Table`.
    CreateTable {
        name: String,
        span: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        slots: bool,
        /// A chunk table (`docs/chunks.md`): one tablet whatever `span`;
        /// an existing table of the other kind is refused.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        chunks: bool,
        /// A stream of this shape (`docs/streams.md`): one tablet whatever
        /// `span`; an existing table of another kind or shape is refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<shoal_common::StreamShape>,
    },
    /// Drops a table and its tablets. Answered by `Ok`; `NotFound` if absent.
    DropTable { name: String },
    /// Answered by `Table`; `NotFound` if absent.
    GetTable { name: String },
    /// `server` has replayed `logs` (named in its `Enlisted`) and re-replicated
    /// their contents in its current log: the coordinator forgets them and
    /// marks the server up. Answered by `Ok`.
    Recovered { server: ServerId, logs: Vec<LogId> },
    /// Coordinator statistics. Answered by `Stats`.
    Stats,
    /// `reporter` could not reach `suspect` (failure detection): the
    /// coordinator checks for itself and, if it is dead, declares it so and
    /// starts its recovery. Answered by `Ok`.
    Suspect { reporter: ServerId, suspect: ServerId },
    /// A recovery master finished its partition: its objects are replayed and
    /// durable in its own log. The coordinator gives it the partition's
    /// tablets. Answered by `Ok`. `since`: the first segment of its log
    /// holding the replayed entries (it rolled its head before the replay),
    /// recorded in `map.owned_since` for the partition's pieces.
    RecoveryDone {
        recovery: u64,
        partition: u32,
        server: ServerId,
        objects: u64,
        bytes: u64,
        replay_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<SegmentId>,
    },
    /// `server` re-opened replicas of segments of its current log, and the
    /// new replicas caught up: the replicas of each `(log, segment)` below
    /// `epoch` are stale. Floors only grow. Answered by `Ok` once saved;
    /// the master acknowledges no more writes to those segments until then.
    RaiseReplicaFloors { server: ServerId, floors: Vec<ReplicaFloor> },
    /// `server`'s head `segment` of its current log `log` is durable (its
    /// digest) on R backups, and no write in it is acknowledged yet:
    /// recovery must not take a segment of `log` below `segment` as its
    /// head (`docs/recovery.md`, "Head floors"). Floors only grow (a lower
    /// one is answered `Ok` and changes nothing). Answered by `Ok` once
    /// saved; refused (`invalid_request`) for a log that is not the
    /// server's current one or a server declared dead.
    RaiseHeadFloor { server: ServerId, log: LogId, segment: SegmentId },
    /// `server`'s log `log` (its current incarnation's) has its first head
    /// durable on R >= 1 backups: the log leaves `map.unreplicated`, and
    /// the server may hold a master lease. Answered by `Ok` once saved
    /// (again `Ok` if already recorded); refused (`invalid_request`) for a
    /// log that is not the server's current one.
    HeadReplicated { server: ServerId, log: LogId },
    /// `server`, writing `log` (the incarnation its `Enlisted` named), asks
    /// for its master lease to be extended (`docs/recovery.md`, "Leases"):
    /// it serves its tablets, reads included, only while it holds one.
    /// Answered by `Lease`, counted from when the server sent this request;
    /// refused (`invalid_request`) for a server that is down, is being
    /// declared dead, or has enlisted again since (an older `log`).
    RenewLease { server: ServerId, log: LogId },
    /// Starts moving the tablet of `table` (by name) that begins at
    /// `start_hash` to server `to` (`docs/migration.md`): recorded in
    /// `map.migrations`; the tablet's master then drives the move. Answered
    /// by `Map` (the map with the new record, the last one). Refused
    /// (`not_found`) for an unknown table, tablet start or server;
    /// (`invalid_request`) for a chunk table or stream, a target that is
    /// the master already or not up, a master not up, or a tablet already
    /// moving or being recovered.
    ///
    /// With `chunks`, the move is of local ids `lo..=hi` of node `node`'s
    /// chunks of chunk table `table` instead (`docs/chunks.md`, "Migration
    /// of id ranges"; `start_hash` is ignored): the ids must lie in one
    /// range of `map.chunk_ranges`, which is split so that they are a
    /// range of their own, recorded in `map.chunk_migrations`. Refused
    /// (`not_found`) for an unknown table or server, ids in no range;
    /// (`invalid_request`) for a key-value table, `lo > hi` or `hi` past
    /// the largest local id, ids over two ranges or of a range moving or
    /// being recovered, a target that serves them already or is not up
    /// or is draining.
    StartMigration {
        table: String,
        start_hash: u64,
        to: ServerId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chunks: Option<crate::map::ChunkSpan>,
    },
    /// `server`, the source of migration `id`, has handed every object of
    /// the tablet to the target, which holds them durably: the coordinator
    /// makes the target the tablet's master and drops the record, in one
    /// change. Answered by `Ok` (also when this already happened); refused
    /// (`invalid_request`) if the migration is gone (aborted). `since`:
    /// the first segment of the target's log holding the copy (the target
    /// rolled its head before it), recorded in `map.owned_since`.
    FinishMigration {
        id: u64,
        server: ServerId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<SegmentId>,
    },
    /// `server` (the source or target of migration `id`) gives it up: the
    /// record is dropped and the tablet stays where it is. Answered by
    /// `Ok` (also if the record is gone); refused (`invalid_request`) if
    /// the migration committed already (the tablet is the target's).
    AbortMigration { id: u64, server: ServerId, reason: String },
    /// Splits the tablet of `table` (by name) that holds hash `at` into
    /// `[start, at - 1]` and `[at, end]`, both on its master. Answered by
    /// `Map`. Refused (`not_found`) for an unknown table; (`invalid_request`)
    /// for a chunk table or stream, `at` already a tablet's first hash, a
    /// master not up, a tablet moving, a slot-hashed table's hash that is
    /// not a slot's first, or the cluster's tablet limit.
    SplitTablet { table: String, at: u64 },
    /// Merges the tablet of `table` that starts at `at` with the one
    /// ending at `at - 1` (`docs/migration.md`, "Split and merge"). Both
    /// must have the same master, up, and neither may be moving. Answered
    /// by `Map`; refused (`not_found`) for an unknown table or no tablet
    /// starting at `at`, (`invalid_request`) otherwise.
    MergeTablets { table: String, at: u64 },
    /// Plans tablet moves (and splits) that even the memory of the up
    /// servers (`docs/migration.md`, "Rebalancing and drain"), from the
    /// figures the coordinator reads from every up server, and, unless
    /// `dry_run`, runs them one at a time in the background (progress in
    /// `stats`, `rebalance`). With `table`, only that table's tablets move.
    /// Answered by `Plan`. Refused (`invalid_request`) while a rebalance or
    /// drain runs, a migration or recovery is in progress, or a server's
    /// figures cannot be read; (`not_found`) for an unknown table.
    Rebalance {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        table: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dry_run: bool,
    },
    /// Moves every tablet off `server` to the least loaded others, and
    /// marks it draining (saved): no move, recovery or new table puts a
    /// tablet on it until it is declared dead, enlists again or `undo`
    /// clears the mark. Answered by `Plan`. Refused (`not_found`) for an
    /// unknown server; (`invalid_request`) when it is not up, is the only
    /// server that could take tablets, masters a chunk table or stream (the
    /// message lists them), or as `Rebalance` is.
    Drain {
        server: ServerId,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dry_run: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        undo: bool,
    },
}

/// Most floors one `RaiseReplicaFloors` may carry.
pub const MAX_FLOORS_PER_REQUEST: usize = 4096;

/// The coordinator's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum ControlResponse {
    /// `log`: the log this incarnation writes (new at every enlistment).
    /// `recover`: earlier logs of this server to replay before serving.
    /// `credential`: the server's credential (hex), issued at its first
    /// enlistment (and to a server that had none): it keeps it in its data
    /// directory and proves it to enlist again under its id. On the wire it
    /// is masked with the connection's handshake session; [`ControlClient`]
    /// and [`call_blocking_with`] unmask it.
    Enlisted {
        server: ServerId,
        log: LogId,
        recover: Vec<LogId>,
        map: ClusterMap,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        credential: Option<String>,
    },
    Map {
        map: ClusterMap,
    },
    Table {
        table: TableInfo,
    },
    Ok,
    Stats {
        stats: serde_json::Value,
    },
    /// The plan of a `Rebalance` or `Drain`; `job` is the id of the
    /// background job running it (`None` for a dry run or an empty plan).
    Plan {
        plan: crate::rebalance::Plan,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
    },
    /// A master lease of `ms` milliseconds, counted from when the request
    /// was sent.
    Lease {
        ms: u64,
    },
    Error {
        code: ControlErrorCode,
        message: String,
    },
}

/// Why the coordinator refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlErrorCode {
    NotFound,
    InvalidRequest,
    /// No server can take tablets yet.
    NoServers,
    Internal,
    /// The connection is not authenticated for this request: it needs the
    /// cluster handshake, or names a server other than the one it proved,
    /// or an enlistment lacks the credential of the server it claims.
    Unauthorized,
}

/// What went wrong in a control call.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot reach the coordinator at {addr}: {source}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    #[error("control connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("control frame of {0} bytes exceeds the limit")]
    TooLarge(usize),
    #[error("malformed control frame: {0}")]
    Malformed(String),
    #[error("coordinator refused: {code:?}: {message}")]
    Refused { code: ControlErrorCode, message: String },
    #[error("unexpected reply from the coordinator: {0}")]
    Unexpected(String),
    #[error("control call timed out")]
    Timeout,
    #[error("coordinator handshake: {0}")]
    Auth(#[from] AuthError),
}

/// How a caller authenticates its control connections: with the cluster
/// secret (none: no handshake, which a coordinator with a secret answers
/// only for the read-only requests), as a server (its id and credential)
/// once it has one, and over mutual TLS when the coordinator's control
/// port speaks it (`tls`; [`crate::tls`]).
#[derive(Clone, Debug, Default)]
pub struct ControlAuth {
    pub secret: Option<ClusterSecret>,
    pub identity: Option<Identity>,
    pub tls: Option<InternalTls>,
}

impl ControlAuth {
    /// No handshake: read-only requests, or any cluster without a secret.
    pub fn anonymous() -> ControlAuth {
        ControlAuth::default()
    }

    /// No handshake, over mutual TLS with `tls` if given: the read-only
    /// requests of a client.
    pub fn anonymous_tls(tls: Option<InternalTls>) -> ControlAuth {
        ControlAuth { tls, ..ControlAuth::default() }
    }

    /// Opens TLS if configured, then runs the handshake if there is a secret.
    async fn open(
        &self,
        addr: SocketAddr,
        stream: TcpStream,
    ) -> Result<(InternalStream, Option<Session>), ControlError> {
        let mut stream = match &self.tls {
            Some(tls) => tls.connect(addr, stream).await?,
            None => InternalStream::Plain(stream),
        };
        let session = match &self.secret {
            Some(secret) => Some(auth::initiate(&mut stream, secret, Port::Control, self.identity).await?),
            None => None,
        };
        Ok((stream, session))
    }
}

/// Unmasks the credential of an `Enlisted` answer (masked by the
/// coordinator with the session's key).
pub fn unmask_response(resp: &mut ControlResponse, session: Option<&Session>) -> Result<(), ControlError> {
    mask_response(resp, session).map_err(ControlError::Malformed)
}

/// Masks (or unmasks: the same operation) an `Enlisted` answer's
/// credential with `session`. Errors if a credential is present and
/// malformed, or present without a session to protect it.
pub fn mask_response(resp: &mut ControlResponse, session: Option<&Session>) -> Result<(), String> {
    if let ControlResponse::Enlisted { credential: Some(text), .. } = resp {
        let session = session.ok_or("a credential cannot be sent without a handshake")?;
        let c = Credential::from_hex(text).ok_or("malformed credential")?;
        *text = Credential(session.mask(b"issued credential", c.0)).to_hex();
    }
    Ok(())
}

/// Reads one frame and decodes its JSON. `Ok(None)` on a clean end of stream.
pub async fn read_frame<T, R>(r: &mut R) -> Result<Option<T>, ControlError>
where
    T: for<'de> Deserialize<'de>,
    R: AsyncRead + Unpin,
{
    read_frame_limited(r, MAX_CONTROL_FRAME).await
}

/// [`read_frame`] with a tighter body limit (`max_len`, at most
/// [`MAX_CONTROL_FRAME`]): a receiver that knows its peer only sends small
/// frames (the coordinator reading requests) bounds what one connection can
/// make it allocate. Longer bodies are refused with
/// [`ControlError::TooLarge`] before they are read.
pub async fn read_frame_limited<T, R>(r: &mut R, max_len: usize) -> Result<Option<T>, ControlError>
where
    T: for<'de> Deserialize<'de>,
    R: AsyncRead + Unpin,
{
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > max_len.min(MAX_CONTROL_FRAME) {
        return Err(ControlError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map(Some).map_err(|e| ControlError::Malformed(e.to_string()))
}

/// Encodes `msg` as one frame and writes it.
pub async fn write_frame<T: Serialize, W: AsyncWrite + Unpin>(w: &mut W, msg: &T) -> Result<(), ControlError> {
    let body = serde_json::to_vec(msg).map_err(|e| ControlError::Malformed(e.to_string()))?;
    if body.len() > MAX_CONTROL_FRAME {
        return Err(ControlError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).await?;
    w.flush().await?;
    Ok(())
}

/// The addresses of a cluster's coordinators: the leader and its standbys
/// (`docs/coordinator.md`, "Standby coordinators"). Only the leader
/// listens, so a caller connects to the first address that accepts.
///
/// Written as `host:port[,host:port...]` on the command line and in
/// configuration files; never empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoordinatorAddrs(Vec<SocketAddr>);

impl CoordinatorAddrs {
    /// `addrs`, or `None` if it is empty.
    pub fn new(addrs: Vec<SocketAddr>) -> Option<CoordinatorAddrs> {
        (!addrs.is_empty()).then_some(CoordinatorAddrs(addrs))
    }

    /// The first address: the only one, for a cluster with one coordinator.
    pub fn first(&self) -> SocketAddr {
        self.0[0]
    }

    pub fn as_slice(&self) -> &[SocketAddr] {
        &self.0
    }
}

impl From<SocketAddr> for CoordinatorAddrs {
    fn from(addr: SocketAddr) -> CoordinatorAddrs {
        CoordinatorAddrs(vec![addr])
    }
}

impl std::str::FromStr for CoordinatorAddrs {
    type Err = String;

    /// Comma-separated `ip:port`s, at least one.
    fn from_str(s: &str) -> Result<CoordinatorAddrs, String> {
        let addrs = s
            .split(',')
            .map(|a| a.trim().parse::<SocketAddr>().map_err(|e| format!("coordinator address {a:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        CoordinatorAddrs::new(addrs).ok_or_else(|| "no coordinator address".to_string())
    }
}

impl std::fmt::Display for CoordinatorAddrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

impl Serialize for CoordinatorAddrs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CoordinatorAddrs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CoordinatorAddrs, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// How long a client with several coordinator addresses tries one before
/// the next (a refused connection moves on at once).
pub const CONNECT_EACH_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to the coordinator, reconnecting on the next call after a
/// failure. Calls are sequential; use one client per task.
///
/// Given several addresses, a connection goes to the first that accepts,
/// starting from the one that accepted last; only the leader coordinator
/// listens, so this follows the leader across a fail-over. A call that
/// fails is not repeated here: the caller's next call reconnects.
pub struct ControlClient {
    addrs: CoordinatorAddrs,
    /// Index in `addrs` of the address tried first.
    at: usize,
    conn: Option<(InternalStream, Option<Session>)>,
    timeout: Duration,
    auth: ControlAuth,
}

impl ControlClient {
    /// A client for `addrs` (one address, or a leader and its standbys);
    /// nothing is connected until the first call.
    pub fn new(addrs: impl Into<CoordinatorAddrs>) -> ControlClient {
        ControlClient {
            addrs: addrs.into(),
            at: 0,
            conn: None,
            timeout: Duration::from_secs(10),
            auth: ControlAuth::default(),
        }
    }

    /// Authenticates every connection as `auth` says.
    pub fn with_auth(mut self, auth: ControlAuth) -> ControlClient {
        self.auth = auth;
        self
    }

    /// Longest a call may take (connecting, sending, answering); default 10 s.
    /// A `WatchMap` adds its own timeout to this.
    pub fn with_timeout(mut self, timeout: Duration) -> ControlClient {
        self.timeout = timeout;
        self
    }

    /// The address connected to last (or to be tried first).
    pub fn addr(&self) -> SocketAddr {
        self.addrs.as_slice()[self.at]
    }

    /// Sends `req` and returns the answer; an `Error` answer becomes
    /// [`ControlError::Refused`].
    pub async fn call(&mut self, req: &ControlRequest) -> Result<ControlResponse, ControlError> {
        let extra = match req {
            ControlRequest::WatchMap { timeout_ms, .. } => Duration::from_millis(*timeout_ms),
            _ => Duration::ZERO,
        };
        let result = tokio::time::timeout(self.timeout + extra, self.call_inner(req)).await;
        let result = match result {
            Ok(r) => r,
            Err(_) => Err(ControlError::Timeout),
        };
        if result.is_err() {
            self.conn = None;
        }
        match result? {
            ControlResponse::Error { code, message } => Err(ControlError::Refused { code, message }),
            other => Ok(other),
        }
    }

    async fn call_inner(&mut self, req: &ControlRequest) -> Result<ControlResponse, ControlError> {
        if self.conn.is_none() {
            let (addr, s) = self.connect().await?;
            s.set_nodelay(true)?;
            self.conn = Some(self.auth.open(addr, s).await?);
        }
        let (conn, session) = self.conn.as_mut().expect("connected above");
        write_frame(conn, req).await?;
        match read_frame(conn).await? {
            Some(mut r) => {
                unmask_response(&mut r, session.as_ref())?;
                Ok(r)
            }
            None => Err(ControlError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the coordinator closed the connection",
            ))),
        }
    }

    /// Connects to the first address that accepts, from `at` on; the
    /// error is the last address's.
    async fn connect(&mut self) -> Result<(SocketAddr, TcpStream), ControlError> {
        let addrs = self.addrs.as_slice();
        let mut last = None;
        for i in 0..addrs.len() {
            let at = (self.at + i) % addrs.len();
            let addr = addrs[at];
            let attempt = if addrs.len() == 1 {
                TcpStream::connect(addr).await
            } else {
                match tokio::time::timeout(CONNECT_EACH_TIMEOUT, TcpStream::connect(addr)).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")),
                }
            };
            match attempt {
                Ok(s) => {
                    self.at = at;
                    return Ok((addr, s));
                }
                Err(source) => last = Some(ControlError::Connect { addr, source }),
            }
        }
        Err(last.expect("CoordinatorAddrs is never empty"))
    }

    /// The current cluster map.
    pub async fn get_map(&mut self) -> Result<ClusterMap, ControlError> {
        match self.call(&ControlRequest::GetMap).await? {
            ControlResponse::Map { map } => Ok(map),
            other => Err(ControlError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Creates (or finds) a table.
    pub async fn create_table(&mut self, name: &str, span: u32) -> Result<TableInfo, ControlError> {
        match self
            .call(&ControlRequest::CreateTable { name: name.into(), span, slots: false, chunks: false, stream: None })
            .await?
        {
            ControlResponse::Table { table } => Ok(table),
            other => Err(ControlError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// One control call over a blocking socket, for callers without a runtime
/// (or inside one, where blocking briefly is acceptable: table management).
/// No handshake: see [`call_blocking_with`].
pub fn call_blocking(
    addr: SocketAddr,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, ControlError> {
    call_blocking_with(addr, &ControlAuth::anonymous(), req, timeout)
}

/// [`call_blocking_with`] to the first of `addrs` that accepts a
/// connection (the leader: standbys do not listen); any other failure is
/// returned as it is. A refused connection moves on at once; one that
/// does not connect within `timeout` (or [`CONNECT_EACH_TIMEOUT`] with
/// several addresses) too.
pub fn call_blocking_any(
    addrs: &CoordinatorAddrs,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, ControlError> {
    let each = if addrs.as_slice().len() == 1 { timeout } else { timeout.min(CONNECT_EACH_TIMEOUT) };
    let mut last = None;
    for &addr in addrs.as_slice() {
        match std::net::TcpStream::connect_timeout(&addr, each) {
            Ok(s) => return exchange_connected(s, addr, auth, req, timeout),
            Err(source) => last = Some(ControlError::Connect { addr, source }),
        }
    }
    Err(last.expect("CoordinatorAddrs is never empty"))
}

/// [`call_blocking`] on a connection authenticated as `auth` says.
pub fn call_blocking_with(
    addr: SocketAddr,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, ControlError> {
    let s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| ControlError::Connect { addr, source })?;
    exchange_connected(s, addr, auth, req, timeout)
}

/// One request over `s`, just connected to `addr`.
fn exchange_connected(
    s: std::net::TcpStream,
    addr: SocketAddr,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
) -> Result<ControlResponse, ControlError> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let resp = match &auth.tls {
        None => exchange_blocking(s, auth, req, timeout, |s| s),
        Some(tls) => {
            auth::limit_timeouts(&s)?;
            let tls = tls.connect_blocking(addr, s)?;
            exchange_blocking(tls, auth, req, timeout, |s| &s.sock)
        }
    }?;
    match resp {
        ControlResponse::Error { code, message } => Err(ControlError::Refused { code, message }),
        other => Ok(other),
    }
}

/// The handshake (if a secret) and one request over a connected blocking
/// stream; `socket` finds the socket under it, whose timeouts bound each step.
fn exchange_blocking<S: std::io::Read + std::io::Write>(
    mut s: S,
    auth: &ControlAuth,
    req: &ControlRequest,
    timeout: Duration,
    socket: impl Fn(&S) -> &std::net::TcpStream,
) -> Result<ControlResponse, ControlError> {
    let session = match &auth.secret {
        Some(secret) => {
            auth::limit_timeouts(socket(&s))?;
            let session = auth::initiate_blocking_io(&mut s, secret, Port::Control, auth.identity)?;
            socket(&s).set_read_timeout(Some(timeout))?;
            socket(&s).set_write_timeout(Some(timeout))?;
            Some(session)
        }
        None => {
            socket(&s).set_read_timeout(Some(timeout))?;
            socket(&s).set_write_timeout(Some(timeout))?;
            None
        }
    };
    let body = serde_json::to_vec(req).map_err(|e| ControlError::Malformed(e.to_string()))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    s.write_all(&frame)?;
    s.flush()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_CONTROL_FRAME {
        return Err(ControlError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    let mut resp: ControlResponse =
        serde_json::from_slice(&body).map_err(|e| ControlError::Malformed(e.to_string()))?;
    unmask_response(&mut resp, session.as_ref())?;
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused() {
        let req =
            ControlRequest::CreateTable { name: "users".into(), span: 4, slots: false, chunks: false, stream: None };
        let mut buf = Vec::new();
        write_frame(&mut buf, &req).await.unwrap();
        assert_eq!(&buf[4..], br#"{"op":"create_table","name":"users","span":4}"#);
        let back: ControlRequest = read_frame(&mut &buf[..]).await.unwrap().unwrap();
        assert_eq!(back, req);

        let mut huge = ((MAX_CONTROL_FRAME + 1) as u32).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        let err = read_frame::<ControlRequest, _>(&mut &huge[..]).await.unwrap_err();
        assert!(matches!(err, ControlError::TooLarge(_)));

        let mut small = Vec::new();
        write_frame(&mut small, &req).await.unwrap();
        let limit = small.len() - 4;
        assert!(read_frame_limited::<ControlRequest, _>(&mut &small[..], limit).await.unwrap().is_some());
        let err = read_frame_limited::<ControlRequest, _>(&mut &small[..], limit - 1).await.unwrap_err();
        assert!(matches!(err, ControlError::TooLarge(n) if n == limit));

        let mut bad = 3u32.to_le_bytes().to_vec();
        bad.extend_from_slice(b"{{{");
        assert!(matches!(read_frame::<ControlRequest, _>(&mut &bad[..]).await, Err(ControlError::Malformed(_))));
    }

    #[test]
    fn coordinator_addrs_parse_print_and_deserialize() {
        let addrs: CoordinatorAddrs = "127.0.0.1:7600, 10.0.0.2:7601".parse().unwrap();
        assert_eq!(addrs.as_slice().len(), 2);
        assert_eq!(addrs.first(), "127.0.0.1:7600".parse().unwrap());
        assert_eq!(addrs.to_string(), "127.0.0.1:7600,10.0.0.2:7601");
        assert_eq!(addrs.to_string().parse::<CoordinatorAddrs>().unwrap(), addrs);
        assert!("".parse::<CoordinatorAddrs>().is_err());
        assert!("127.0.0.1:7600,".parse::<CoordinatorAddrs>().is_err());
        assert!("localhost:7600".parse::<CoordinatorAddrs>().unwrap_err().contains("localhost:7600"));
        assert_eq!(CoordinatorAddrs::new(Vec::new()), None);
        // A configuration file's single address reads as before.
        let one: CoordinatorAddrs = serde_json::from_str(r#""127.0.0.1:7600""#).unwrap();
        assert_eq!(one, CoordinatorAddrs::from("127.0.0.1:7600".parse::<SocketAddr>().unwrap()));
        assert_eq!(serde_json::to_string(&addrs).unwrap(), r#""127.0.0.1:7600,10.0.0.2:7601""#);
    }

    /// An address nobody listens on (bound, then let go).
    fn closed_port() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
    }

    #[tokio::test]
    async fn call_goes_to_the_address_that_listens_and_moves_on_when_it_stops() {
        // A coordinator stand-in that answers every request with an empty
        // map, one connection at a time (aborting it closes them all).
        async fn serve(listener: tokio::net::TcpListener, version: u64) {
            while let Ok((mut s, _)) = listener.accept().await {
                while let Ok(Some(_)) = read_frame::<ControlRequest, _>(&mut s).await {
                    let map = ClusterMap { version, ..Default::default() };
                    if write_frame(&mut s, &ControlResponse::Map { map }).await.is_err() {
                        break;
                    }
                }
            }
        }
        let standby = closed_port();
        let leader = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let leader_addr = leader.local_addr().unwrap();
        let first = tokio::spawn(serve(leader, 1));
        let mut c = ControlClient::new(CoordinatorAddrs::new(vec![standby, leader_addr]).unwrap());
        assert_eq!(c.get_map().await.unwrap().version, 1);
        assert_eq!(c.addr(), leader_addr);

        // The leader goes; the standby's address starts to listen.
        first.abort();
        let _ = first.await;
        let next = tokio::net::TcpListener::bind(standby).await.unwrap();
        tokio::spawn(serve(next, 2));
        // The open connection fails once; the next call finds the new leader.
        let mut version = None;
        for _ in 0..3 {
            if let Ok(m) = c.get_map().await {
                version = Some(m.version);
                break;
            }
        }
        assert_eq!(version, Some(2));
        assert_eq!(c.addr(), standby);
        drop(c); // the stand-in serves one connection at a time

        let blocking = tokio::task::spawn_blocking(move || {
            let addrs = CoordinatorAddrs::new(vec![closed_port(), standby]).unwrap();
            call_blocking_any(&addrs, &ControlAuth::anonymous(), &ControlRequest::GetMap, Duration::from_secs(2))
        });
        assert!(matches!(blocking.await.unwrap(), Ok(ControlResponse::Map { map }) if map.version == 2));
        let none = CoordinatorAddrs::new(vec![closed_port(), closed_port()]).unwrap();
        let err = ControlClient::new(none).get_map().await.unwrap_err();
        assert!(matches!(err, ControlError::Connect { .. }), "{err}");
    }
}
