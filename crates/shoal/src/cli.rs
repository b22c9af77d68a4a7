//! `shoal get/put/del/incr/scan/create-table/drop-table/stats/load`: the
//! command line as a client of a running server, over the native protocol
//! through the client library (blocking; `load` pipelines multi-writes
//! through the async client, `load.rs`).
//!
//! Tables are named on the command line and looked up by name (GET_TABLE_ID)
//! before each operation. Output is for people by default and one JSON
//! object per line with `--json`. Exit codes: 0 on success, 1 when the
//! server refused the operation (missing object, reject rule, unknown
//! table, ...), 2 on bad usage, 3 when the server cannot be reached or
//! the connection fails, 4 when the server wants credentials that were not
//! given or refuses those given (--user, --password or SHOAL_PASSWORD).

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use shoal_client::blocking::Client;
use shoal_client::names;
use shoal_client::{
    ChunkId, ChunkLock, ClientConfig, ClientError, ClientTls, Credentials, ErrorStatus, IncrementError, LockError,
    LockMode, ReadError, RejectRules, Rejected, StatValue, TableError, TableId, Version, WriteError,
};
use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Prints a line on stdout, returning early with [`CliError::stdout`] if
/// that fails.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(CliError::stdout)?
    };
}

mod load;
mod migrate;
mod rebalance;
mod stats;
mod stream;
mod tablet;

/// Where the server is and how to print; every client subcommand takes these.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The server's native-protocol address.
    #[arg(long, default_value = "127.0.0.1:7700", value_name = "HOST:PORT")]
    pub server: String,
    /// A cluster's coordinator, or its coordinators comma-separated (a
    /// leader and its standbys: the leader is the one that answers):
    /// requests go straight to each key's master, found in the cluster's
    /// tablet map (overrides --server).
    #[arg(long, value_name = "IP:PORT[,IP:PORT...]")]
    pub coordinator: Option<shoal_cluster::CoordinatorAddrs>,
    /// Print one JSON object per line (errors too) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the connection and for each reply.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub timeout: f64,
    /// Log in with this password (the servers' --password, or an ACL
    /// user's with --user). Also read from SHOAL_PASSWORD, which keeps it
    /// out of the process list and shell history.
    #[arg(long, value_name = "PASSWORD", env = "SHOAL_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The user to log in as with --password.
    #[arg(long, default_value = "default", value_name = "NAME", requires = "password")]
    pub user: String,
    /// Speak TLS to the servers (those started with --tls-cert). Their
    /// certificates must be signed by --tls-ca (else by a CA of the
    /// system's store) and name the IP address connected to (or
    /// --tls-server-name).
    #[arg(long)]
    pub tls: bool,
    /// PEM file of the CA that signed the servers' certificates.
    #[arg(long, value_name = "PATH", requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate, for servers that require one (--tls-ca on
    /// the server: mutual TLS).
    #[arg(long, value_name = "PATH", requires_all = ["tls", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the servers' certificates must carry, instead of the IP
    /// address connected to.
    #[arg(long, value_name = "NAME", requires = "tls")]
    pub tls_server_name: Option<String>,
    /// With --coordinator, when the cluster has internal TLS: a certificate
    /// (PEM) signed by the cluster CA, naming shoal-internal, presented to
    /// the coordinator's control port (mutual TLS). Needs
    /// --internal-tls-key and --internal-tls-ca. See docs/security.md,
    /// "Internal TLS".
    #[arg(long, value_name = "PATH", requires_all = ["coordinator", "internal_tls_key", "internal_tls_ca"])]
    pub internal_tls_cert: Option<PathBuf>,
    /// PEM private key of --internal-tls-cert.
    #[arg(long, value_name = "PATH", requires = "internal_tls_cert")]
    pub internal_tls_key: Option<PathBuf>,
    /// PEM certificates of the cluster CA, which signed the coordinator's
    /// internal certificate.
    #[arg(long, value_name = "PATH", requires = "internal_tls_cert")]
    pub internal_tls_ca: Option<PathBuf>,
}

impl Common {
    /// The TLS settings of the flags (`None` without --tls).
    pub fn client_tls(&self) -> Result<Option<ClientTls>, String> {
        if !self.tls {
            return Ok(None);
        }
        let identity = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
        let tls = ClientTls::new(self.tls_ca.as_deref(), identity)?;
        match &self.tls_server_name {
            Some(name) => tls.with_server_name(name).map(Some),
            None => Ok(Some(tls)),
        }
    }

    /// The internal TLS identity of the flags, for the coordinator (`None`
    /// without --internal-tls-cert).
    pub fn internal_tls(&self) -> Result<Option<shoal_cluster::tls::InternalTls>, String> {
        shoal_cluster::tls::InternalTls::from_paths(
            self.internal_tls_cert.as_deref(),
            self.internal_tls_key.as_deref(),
            self.internal_tls_ca.as_deref(),
        )
    }
}

/// The client subcommands (flattened into `shoal`'s own).
///
/// Exit codes: 0 success; 1 the server refused the operation (no such
/// object, reject rule, unknown table, not an integer); 2 bad usage; 3 the
/// server could not be reached or the connection failed; 4 missing or
/// refused credentials.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Reads an object: prints its value and version.
    ///
    /// Exits 1 if the object does not exist.
    Get(GetArgs),
    /// Writes an object (creates or overwrites); prints its new version.
    ///
    /// The value is the third argument, or with `-` read from stdin, or
    /// read from the file of --value-file; stdin and files are taken as
    /// raw bytes (binary-safe, nothing stripped), and reading stops past
    /// the server's largest value (its max_value_bytes statistic): a larger
    /// value is refused with exit code 2 before anything is written.
    ///
    /// Reject rules make the write conditional; when one refuses, nothing
    /// changes and the command exits 1. With --ttl-ms the object expires
    /// that long after the write (then it reads as missing); without, it
    /// never expires (an expiry it had is cleared).
    Put(PutArgs),
    /// Prints when an object expires (a wall-clock time, ms since the Unix
    /// epoch) and the time left, or that it never expires.
    ///
    /// Exits 1 if the object does not exist (or has expired).
    Ttl(GetArgs),
    /// Removes an object; prints the version it had.
    ///
    /// Removing a missing object is not an error (it prints that nothing
    /// was removed), unless --if-version is given.
    Del(DelArgs),
    /// Adds a delta (default 1) to a counter (a decimal integer, as Redis INCR stores it),
    /// creating it at 0 if missing; prints the new value.
    Incr(IncrArgs),
    /// Lists a table's objects (key, value, version), in hash order.
    Scan(ScanArgs),
    /// Creates a table (or finds the existing one of that name); prints its id.
    CreateTable(TableArgs),
    /// Drops a table and every object in it.
    DropTable(TableArgs),
    /// Chunks: keyless objects of chunk tables, with 64-bit ids the server
    /// hands out (docs/chunks.md).
    ///
    /// `shoal chunk create-table NAME`, `shoal chunk create TABLE PAYLOAD...`
    /// (prints one id per payload), `shoal chunk get TABLE ID`, `shoal chunk
    /// put TABLE ID PAYLOAD`, `shoal chunk rm TABLE ID`; names for chunk
    /// ids: `shoal chunk name TABLE NAME ID`, `lookup TABLE NAME`, `unname
    /// TABLE NAME`, `names TABLE [PREFIX]`; locks: `shoal chunk lock TABLE
    /// ID` (waits; --shared, --lease-ms, --hold-ms), `trylock TABLE ID`,
    /// `unlock TABLE ID --owner O --token T`. Ids are printed and read in
    /// hex (0x...) or decimal. Exits 1 for a chunk that does not exist, a
    /// table that is not a chunk table, or a lock that is busy or lost.
    #[command(subcommand)]
    Chunk(ChunkCommand),
    /// Streams: KerA's streamlets, groups and segments (docs/streams.md).
    ///
    /// `shoal stream create NAME --streamlets N`, `shoal stream produce
    /// NAME [RECORD...]` (stdin lines without records), `shoal stream
    /// consume NAME --streamlet S [--from G:S:P]`, `shoal stream describe
    /// NAME`. Exits 1 when the server refuses (not a stream, no such
    /// streamlet or group, ...).
    #[command(subcommand)]
    Stream(stream::StreamCommand),
    /// Prints the server's statistics; with --coordinator, the cluster's
    /// and every server's.
    ///
    /// With --coordinator: the coordinator's statistics (servers, tables,
    /// recoveries), then one section per server of the cluster map, each
    /// queried in parallel. A server the map marks down is listed as down;
    /// one that does not answer is listed with the error. With --json: one
    /// object for the coordinator, then one per server
    /// ({"server": id, "address", "state", "stats"} or "error").
    Stats(StatsArgs),
    /// Loads key/value records from a file (or stdin) into a table
    ///
    /// The format is text, one record per line: the key, a TAB, the value,
    /// then a newline (LF; a CR before it is dropped, so CRLF files work).
    /// In keys and values a backslash starts an escape: \\ (a backslash),
    /// \t (TAB), \n (LF), \r (CR), \0 (NUL) and \xHH (any byte, two hex
    /// digits), so any bytes can be loaded; other escapes are errors. The
    /// first TAB of a line ends the key (a TAB in a key must be \t); TABs
    /// after it belong to the value. Empty lines are skipped; a line with
    /// no TAB is an error. Example:
    ///
    ///     alice<TAB>hello world
    ///     bin\x00key<TAB>\xff\xfe\n
    ///
    /// The file is streamed (memory stays bounded whatever its size) and
    /// written with multi-writes, --in-flight of them pipelined, each
    /// split over the keys' masters (--coordinator). Progress goes to
    /// stderr: a bar on a terminal, otherwise a line per tenth of the file
    /// (or every 5 s). At the end it prints the records loaded and the
    /// rate. The table must exist (shoal create-table).
    ///
    /// A malformed line, or a key or value over the server's limits, stops
    /// the load with exit code 2: the records before that line are
    /// loaded, none after it. A write the server refuses stops it with
    /// exit code 1 (3 if the connection fails); batches already sent may
    /// have been written. Nothing is rolled back; the count loaded is
    /// printed.
    #[command(verbatim_doc_comment)]
    Load(load::LoadArgs),
    /// Moves one tablet, or a range of chunk ids, to another server while
    /// clients keep using it (docs/migration.md, docs/chunks.md).
    ///
    /// `shoal migrate --coordinator ADDR --table NAME --start HASH --to
    /// SERVER_ID`: the tablet of NAME that begins at key hash HASH (hex
    /// 0x... or decimal; a wrong one is answered with the table's tablet
    /// starts) moves from its master to server SERVER_ID. Waits until the
    /// coordinator has committed the move (exit 0, the time taken) or it
    /// was aborted (exit 1: a server died, or the target refused). While
    /// it moves, writes of its keys (and all Redis and memcached requests
    /// for them) are answered with the retryable status of a recovery
    /// (Redis clients see TRYAGAIN); Shoal's clients retry by themselves.
    /// Native reads are served until the last step. Exits 1 for an unknown table, tablet or
    /// server, a target that masters it already or is not up, or a tablet
    /// already moving; 3 if the coordinator cannot be reached.
    ///
    /// `shoal migrate --coordinator ADDR --table NAME --node N --lo A --hi B
    /// --to SERVER_ID`: for a chunk table, the chunk ids of node N with
    /// local ids A..=B move instead (they must lie in one server's range;
    /// a part of one is split off), in the same steps: chunk writes and
    /// lock requests are answered RETRY while frozen, reads served until
    /// the last step, removed chunks stay removed and ids keep their
    /// numbers. A server creates chunks only while it holds all of its own
    /// node's ids, and the locks on moved chunks are released (the target
    /// grants none for one longest lease).
    Migrate(migrate::MigrateArgs),
    /// A table's tablets: list them, split one at a key hash, merge one
    /// into its neighbour on the same master (docs/migration.md).
    ///
    /// `shoal tablet list --coordinator ADDR --table NAME` prints each
    /// tablet's first and last key hash and master; `shoal tablet split
    /// ... --table NAME --at HASH` cuts the tablet holding HASH into
    /// [start, HASH-1] and [HASH, end]; `shoal tablet merge ... --at HASH`
    /// joins the tablet starting at HASH to the one before it. Both print
    /// the table's tablets after the change. No data moves: only the map
    /// changes. Exits 1 when the coordinator refuses (unknown table, a
    /// hash that is already a boundary or not one, tablets on two
    /// masters, a tablet moving or being recovered, a slot-hashed table's
    /// hash that is not a slot's first).
    #[command(subcommand)]
    Tablet(tablet::TabletCommand),
    /// Moves tablets so that the memory of the up servers becomes even
    /// (docs/migration.md, "Rebalancing and drain").
    ///
    /// `shoal rebalance --coordinator ADDR [--dry-run] [--table NAME]`:
    /// the coordinator reads every up server's figures (live bytes and
    /// operations per second, and both per table, which it shares among a
    /// server's tablets of the table by their hash widths), plans moves
    /// that even the memory first and then the load (hot parts out, cold
    /// parts back, splitting a tablet too big to move whole), merges back
    /// small pieces a recovery left, and runs the moves one at a time
    /// through the migration path of shoal migrate, while clients keep
    /// working. Prints the plan (each move's estimated bytes and objects,
    /// each server's memory and ops/s before and after), then a line per
    /// move (a bar on a terminal) with its time, then the measured memory
    /// and load per server and their spreads. --dry-run prints the plan only. Servers being
    /// drained take nothing. Exits 1 when refused (another rebalance or
    /// drain running, a migration or recovery in progress, a server whose
    /// STATS cannot be read) or when a move aborts (the rest is dropped);
    /// 3 if the coordinator cannot be reached.
    Rebalance(rebalance::RebalanceArgs),
    /// Moves every tablet off one server, so that it can be stopped with
    /// no crash recovery (docs/migration.md, "Rebalancing and drain").
    ///
    /// `shoal drain --coordinator ADDR --server ID`: marks the server
    /// draining (no move, recovery partition or new table puts a tablet on
    /// it from then on), moves each of its tablets, heaviest first, to the
    /// least loaded other server, and follows the moves as shoal rebalance
    /// does. When it ends the server masters nothing: stop it. The mark
    /// stays until the server is declared dead or enlists again, or
    /// --undo clears it. Refused (exit 1) when the server is the only one
    /// that could take tablets, or masters chunk tables or streams (they
    /// cannot move: the message names them).
    Drain(rebalance::DrainArgs),
}

#[derive(Subcommand, Debug)]
pub enum ChunkCommand {
    /// Creates a chunk table (or finds the existing one); prints its id.
    CreateTable(TableArgs),
    /// Creates one chunk per payload, in one request; prints their ids.
    Create(ChunkCreateArgs),
    /// Prints a chunk's payload and version.
    Get(ChunkIdArgs),
    /// Replaces an existing chunk's payload; prints its new version.
    Put(ChunkPutArgs),
    /// Removes a chunk; prints the version it had. Its id will be reused.
    Rm(ChunkIdArgs),
    /// Registers a name for a chunk id (in the key-value table
    /// `chunk-names`, created if missing); an existing name is refused
    /// unless --replace.
    Name(ChunkNameArgs),
    /// Prints the chunk id registered for a name.
    Lookup(ChunkLookupArgs),
    /// Removes a name (not its chunk).
    Unname(ChunkLookupArgs),
    /// Lists a chunk table's names (optionally those starting with a
    /// prefix), sorted, with their chunk ids.
    Names(ChunkNamesArgs),
    /// Locks a chunk (exclusive, or shared with --shared), waiting up to
    /// --timeout-ms; prints the owner id and fencing token. The lock lasts
    /// its lease (--lease-ms) unless held with --hold-ms (renewed, then
    /// unlocked) or unlocked with `shoal chunk unlock`. Exits 1 if busy
    /// until the timeout, or if a held lock is lost.
    Lock(ChunkLockArgs),
    /// Locks a chunk only if it is free now (as `lock` without waiting).
    Trylock(ChunkLockArgs),
    /// Releases a lock given its owner id and token (from `lock`).
    Unlock(ChunkUnlockArgs),
}

#[derive(Args, Debug)]
pub struct ChunkNameArgs {
    pub table: String,
    pub name: OsString,
    #[arg(value_parser = parse_chunk_id)]
    pub id: ChunkId,
    /// Replace the id an existing name has.
    #[arg(long)]
    pub replace: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ChunkLookupArgs {
    pub table: String,
    pub name: OsString,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ChunkNamesArgs {
    pub table: String,
    /// Only names starting with this.
    #[arg(default_value = "")]
    pub prefix: OsString,
    #[command(flatten)]
    pub common: Common,
}

/// A chunk id as the CLI reads it: hex with 0x, or decimal.
fn parse_chunk_id(s: &str) -> Result<ChunkId, String> {
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    n.map(ChunkId).map_err(|e| format!("not a chunk id ({e}): give it in hex (0x...) or decimal"))
}

#[derive(Args, Debug)]
pub struct ChunkCreateArgs {
    pub table: String,
    /// The payloads, one chunk each (at most 1024).
    #[arg(required = true, num_args = 1..=1024)]
    pub payloads: Vec<OsString>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ChunkIdArgs {
    pub table: String,
    #[arg(value_parser = parse_chunk_id)]
    pub id: ChunkId,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ChunkLockArgs {
    pub table: String,
    #[arg(value_parser = parse_chunk_id)]
    pub id: ChunkId,
    /// A shared (read) lock instead of an exclusive (write) one.
    #[arg(long)]
    pub shared: bool,
    /// The lease: the lock lapses this long after it was granted or last
    /// renewed (at most the server's --chunk-lock-max-lease-ms).
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..))]
    pub lease_ms: u32,
    /// How long `lock` waits for a busy lock (ignored by `trylock`).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Hold the lock this long, renewing its lease, then unlock it (0:
    /// until the process is killed).
    #[arg(long, value_name = "MS")]
    pub hold_ms: Option<u64>,
    /// The owner id to lock as [default: a random one].
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u64).range(1..))]
    pub owner: Option<u64>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ChunkUnlockArgs {
    pub table: String,
    #[arg(value_parser = parse_chunk_id)]
    pub id: ChunkId,
    /// The owner id `lock` printed.
    #[arg(long, value_name = "ID")]
    pub owner: u64,
    /// The token `lock` printed.
    #[arg(long, value_name = "TOKEN")]
    pub token: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ChunkPutArgs {
    pub table: String,
    #[arg(value_parser = parse_chunk_id)]
    pub id: ChunkId,
    pub payload: OsString,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    pub table: String,
    pub key: OsString,
    #[command(flatten)]
    pub common: Common,
}

/// The reject rules `put` takes; at most one.
#[derive(Args, Debug, Default)]
#[group(multiple = false)]
pub struct PutRules {
    /// Write only if the object exists with exactly this version
    /// (compare-and-swap).
    #[arg(long, value_name = "N")]
    pub if_version: Option<u64>,
    /// Write only if the object does not exist.
    #[arg(long)]
    pub if_absent: bool,
    /// Write only if the object exists.
    #[arg(long)]
    pub if_present: bool,
}

impl PutRules {
    fn rules(&self) -> RejectRules {
        match (self.if_version, self.if_absent, self.if_present) {
            (Some(v), _, _) => RejectRules::version_is(Version(v)),
            (None, true, _) => RejectRules::must_not_exist(),
            (None, false, true) => RejectRules::must_exist(),
            (None, false, false) => RejectRules::default(),
        }
    }
}

#[derive(Args, Debug)]
pub struct PutArgs {
    pub table: String,
    pub key: OsString,
    /// The value; `-` reads it from stdin.
    #[arg(required_unless_present = "value_file", conflicts_with = "value_file")]
    pub value: Option<OsString>,
    /// Read the value from this file (raw bytes) instead of the command line.
    #[arg(long, value_name = "PATH")]
    pub value_file: Option<PathBuf>,
    #[command(flatten)]
    pub rules: PutRules,
    /// The object expires this many milliseconds after the write (at least 1).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub ttl_ms: Option<u64>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct DelArgs {
    pub table: String,
    pub key: OsString,
    /// Remove only if the object exists with exactly this version.
    #[arg(long, value_name = "N")]
    pub if_version: Option<u64>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct IncrArgs {
    pub table: String,
    pub key: OsString,
    /// The amount to add (negative to subtract).
    #[arg(default_value_t = 1, allow_negative_numbers = true)]
    pub delta: i64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ScanArgs {
    pub table: String,
    /// Stop after this many objects (default: the whole table).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct TableArgs {
    pub name: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub common: Common,
}

/// A failed command: what to tell the user, a stable kind for `--json`, and
/// the exit code.
#[derive(Debug)]
struct CliError {
    kind: &'static str,
    message: String,
    code: u8,
}

const REFUSED: u8 = 1;
const USAGE: u8 = 2;
const UNREACHABLE: u8 = 3;
const AUTH: u8 = 4;

impl CliError {
    /// A failed write to stdout: a reader that went away (`shoal scan t |
    /// head`) ends the command quietly and successfully.
    fn stdout(e: std::io::Error) -> CliError {
        match e.kind() {
            ErrorKind::BrokenPipe => CliError { kind: "stdout_closed", message: String::new(), code: 0 },
            _ => CliError { kind: "output", message: format!("cannot write the output: {e}"), code: REFUSED },
        }
    }

    fn refused(kind: &'static str, message: impl Into<String>) -> CliError {
        CliError { kind, message: message.into(), code: REFUSED }
    }
}

/// What a command operates on, for error messages.
struct Target<'a> {
    server: &'a str,
    table: &'a str,
    key: Option<&'a [u8]>,
}

impl Target<'_> {
    fn object(&self) -> String {
        match self.key {
            Some(k) => format!("{}/{}", self.table, show_key(k)),
            None => self.table.to_string(),
        }
    }

    fn client(&self, e: ClientError) -> CliError {
        match e {
            ClientError::Io(io) => {
                let hint = match io.kind() {
                    ErrorKind::ConnectionRefused => {
                        " (is a Shoal server running there? `shoal local` starts one; --server picks another)"
                    }
                    ErrorKind::TimedOut | ErrorKind::WouldBlock => {
                        " (the server did not answer in time; see --timeout)"
                    }
                    _ => "",
                };
                CliError {
                    kind: "connection",
                    message: format!("cannot talk to the server at {}: {io}{hint}", self.server),
                    code: UNREACHABLE,
                }
            }
            ClientError::Closed => CliError {
                kind: "connection",
                message: format!("the server at {} closed the connection", self.server),
                code: UNREACHABLE,
            },
            ClientError::Protocol(m) => CliError {
                kind: "protocol",
                message: format!("the server at {} answered something that is not Shoal's protocol: {m}", self.server),
                code: UNREACHABLE,
            },
            ClientError::RequestTooLarge { len, max } => CliError {
                kind: "too_large",
                message: format!("the request ({len} bytes) exceeds the frame limit of {max} bytes"),
                code: USAGE,
            },
            ClientError::AuthFailed => CliError {
                kind: "auth",
                message: format!("the server at {} refused the user and password given", self.server),
                code: AUTH,
            },
            ClientError::Refused(ErrorStatus::NotAuthenticated) => CliError {
                kind: "auth",
                message: format!(
                    "the server at {} requires a password: give --password (or set SHOAL_PASSWORD), and --user \
                     for a user other than default",
                    self.server
                ),
                code: AUTH,
            },
            e @ (ClientError::Refused(_)
            | ClientError::Unavailable { .. }
            | ClientError::NoRoute(_)
            | ClientError::GroupFailed(_)) => CliError::refused("refused", e.to_string()),
            ClientError::Cluster(m) => CliError { kind: "connection", message: m, code: UNREACHABLE },
            ClientError::Tls(m) => CliError {
                kind: "tls",
                message: format!(
                    "TLS with the server at {} failed: {m} (does it speak TLS? --tls-ca must be the CA that signed \
                     its certificate; a server with --tls-ca needs --tls-cert and --tls-key)",
                    self.server
                ),
                code: UNREACHABLE,
            },
        }
    }

    fn unknown_table(&self, id: TableId) -> CliError {
        CliError::refused("unknown_table", format!("table '{}' (id {id}) no longer exists", self.table))
    }

    fn rejected(&self, r: Rejected) -> CliError {
        let o = self.object();
        match r {
            Rejected::DoesntExist => CliError::refused("not_found", format!("{o}: the object does not exist")),
            Rejected::Exists { version } => {
                CliError::refused("exists", format!("{o}: the object already exists (version {version})"))
            }
            Rejected::WrongVersion { version } => {
                CliError::refused("wrong_version", format!("{o}: wrong version: the object's version is {version}"))
            }
        }
    }

    fn too_large(&self, what: &str, len: u32, max: u32) -> CliError {
        CliError {
            kind: "too_large",
            message: format!("the {what} ({len} bytes) exceeds the maximum of {max}"),
            code: USAGE,
        }
    }

    fn table_error(&self, e: TableError) -> CliError {
        match e {
            TableError::UnknownTableName => CliError::refused(
                "unknown_table",
                format!("no table named '{}' (create it with: shoal create-table {})", self.table, self.table),
            ),
            TableError::UnknownTable(id) => self.unknown_table(id),
            TableError::Client(e) => self.client(e),
        }
    }

    fn lock_error(&self, e: LockError) -> CliError {
        let o = self.object();
        match e {
            LockError::Busy { .. } => CliError::refused("busy", format!("{o}: the lock is held (busy)")),
            LockError::Timeout => CliError::refused("busy", format!("{o}: the lock stayed busy until the timeout")),
            LockError::NotFound => CliError::refused("not_found", format!("{o}: no such chunk")),
            LockError::UnknownTable(id) => self.unknown_table(id),
            LockError::NotHeld => {
                CliError::refused("not_held", format!("{o}: lock not held (the server never granted that token)"))
            }
            LockError::Lost => CliError::refused(
                "lock_lost",
                format!("{o}: lock lost (its lease expired, it was released, the chunk was removed, or its master recovered)"),
            ),
            LockError::TableFull { limit } => CliError::refused(
                "lock_table_full",
                format!("{o}: the server's lock table is full ({limit} locks and waiters)"),
            ),
            LockError::OwnerLimit { limit } => CliError::refused(
                "lock_owner_limit",
                format!("{o}: this lock owner holds its maximum of locks and waiting requests ({limit})"),
            ),
            LockError::Invalid(why) => CliError::refused("invalid", format!("{o}: {why}")),
            LockError::ValueTooLarge { len, max } => self.too_large("value", len, max),
            LockError::OutOfMemory => {
                CliError::refused("out_of_memory", "the server is out of memory: live data fills it")
            }
            LockError::Client(e) => self.client(e),
        }
    }

    fn read_error(&self, e: ReadError) -> CliError {
        match e {
            ReadError::NotFound => CliError::refused("not_found", format!("{}: no such object", self.object())),
            ReadError::UnknownTable(id) => self.unknown_table(id),
            ReadError::KeyTooLarge { len, max } => self.too_large("key", len, max),
            ReadError::Rejected(r) => self.rejected(r),
            ReadError::Client(e) => self.client(e),
        }
    }

    fn write_error(&self, e: WriteError) -> CliError {
        match e {
            WriteError::UnknownTable(id) => self.unknown_table(id),
            WriteError::KeyTooLarge { len, max } => self.too_large("key", len, max),
            WriteError::ValueTooLarge { len, max } => self.too_large("value", len, max),
            WriteError::Rejected(r) => self.rejected(r),
            WriteError::OutOfMemory => {
                CliError::refused("out_of_memory", "the server is out of memory: live data fills it")
            }
            WriteError::Client(e) => self.client(e),
        }
    }

    fn increment_error(&self, e: IncrementError) -> CliError {
        match e {
            IncrementError::UnknownTable(id) => self.unknown_table(id),
            IncrementError::KeyTooLarge { len, max } => self.too_large("key", len, max),
            IncrementError::Rejected(r) => self.rejected(r),
            IncrementError::NotAnInteger => CliError::refused(
                "not_an_integer",
                format!("{}: the value is not a decimal 64-bit integer (the counter format)", self.object()),
            ),
            IncrementError::Overflow => {
                CliError::refused("overflow", format!("{}: the increment overflows a 64-bit integer", self.object()))
            }
            IncrementError::OutOfMemory => {
                CliError::refused("out_of_memory", "the server is out of memory: live data fills it")
            }
            IncrementError::Client(e) => self.client(e),
        }
    }
}

/// Runs one client subcommand and reports its outcome.
pub fn run(cmd: &ClientCommand) -> ExitCode {
    let common = match cmd {
        ClientCommand::Get(a) | ClientCommand::Ttl(a) => &a.common,
        ClientCommand::Put(a) => &a.common,
        ClientCommand::Del(a) => &a.common,
        ClientCommand::Incr(a) => &a.common,
        ClientCommand::Scan(a) => &a.common,
        ClientCommand::CreateTable(a) | ClientCommand::DropTable(a) => &a.common,
        ClientCommand::Chunk(ChunkCommand::CreateTable(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Create(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Get(a) | ChunkCommand::Rm(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Put(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Name(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Lookup(a) | ChunkCommand::Unname(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Names(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Lock(a) | ChunkCommand::Trylock(a)) => &a.common,
        ClientCommand::Chunk(ChunkCommand::Unlock(a)) => &a.common,
        ClientCommand::Stream(s) => s.common(),
        ClientCommand::Stats(a) => &a.common,
        ClientCommand::Load(a) => &a.common,
        ClientCommand::Migrate(a) => &a.common,
        ClientCommand::Tablet(t) => t.common(),
        ClientCommand::Rebalance(a) => &a.job.common,
        ClientCommand::Drain(a) => &a.job.common,
    };
    let outcome = match cmd {
        ClientCommand::Load(a) => load::run(a),
        ClientCommand::Migrate(a) => migrate::run(a),
        ClientCommand::Tablet(t) => tablet::run(t),
        ClientCommand::Rebalance(a) => rebalance::rebalance(a),
        ClientCommand::Drain(a) => rebalance::drain(a),
        ClientCommand::Stats(StatsArgs { common: Common { coordinator: Some(c), .. } }) => stats::cluster(c, common),
        _ => connect(common).and_then(|mut client| execute(&mut client, cmd, common)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if e.code == 0 {
                return ExitCode::SUCCESS;
            }
            if common.json {
                let _ = writeln!(std::io::stdout(), "{}", json!({ "error": e.kind, "message": e.message }));
            }
            eprintln!("shoal: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// The client library's settings from the flags (timeout, login, TLS).
fn client_config(common: &Common) -> Result<ClientConfig, CliError> {
    if !(common.timeout.is_finite() && common.timeout > 0.0) {
        return Err(CliError { kind: "usage", message: "--timeout must be a positive number".into(), code: USAGE });
    }
    let tls = common.client_tls().map_err(|message| CliError { kind: "usage", message, code: USAGE })?;
    let coordinator_tls = common.internal_tls().map_err(|message| CliError { kind: "usage", message, code: USAGE })?;
    Ok(ClientConfig {
        tls,
        coordinator_tls,
        timeout: Some(Duration::from_secs_f64(common.timeout)),
        credentials: common
            .password
            .as_ref()
            .map(|password| Credentials { user: common.user.clone(), password: password.clone() }),
        ..ClientConfig::default()
    })
}

fn connect(common: &Common) -> Result<Client, CliError> {
    let config = client_config(common)?;
    let target = Target { server: &common.server, table: "", key: None };
    if let Some(coordinator) = &common.coordinator {
        return Client::connect_cluster(coordinator.clone(), config).map_err(|e| CliError {
            kind: "connection",
            message: format!("cannot reach the cluster of {coordinator}: {e}"),
            code: UNREACHABLE,
        });
    }
    Client::with_config(common.server.as_str(), config).map_err(|e| target.client(e))
}

fn execute(c: &mut Client, cmd: &ClientCommand, common: &Common) -> Result<(), CliError> {
    let server = common.server.as_str();
    let json = common.json;
    match cmd {
        ClientCommand::Get(a) => {
            let t = Target { server, table: &a.table, key: Some(a.key.as_bytes()) };
            let table = lookup(c, &t)?;
            let (value, version) = c.read(table, a.key.as_bytes()).map_err(|e| t.read_error(e))?;
            if json {
                out!("{}", Value::Object(object_json(&a.table, a.key.as_bytes(), &value, version)));
            } else {
                out!("{}", show_value(&value));
                out!("(version {version})");
            }
        }
        ClientCommand::Put(a) => {
            let t = Target { server, table: &a.table, key: Some(a.key.as_bytes()) };
            let table = lookup(c, &t)?;
            let value = put_value(c, &t, a)?;
            let (key, value, rules) = (a.key.as_bytes(), value.as_slice(), a.rules.rules());
            let version = match a.ttl_ms {
                Some(ms) => c.write_ttl_with(table, key, value, Duration::from_millis(ms), rules),
                None => c.write_with(table, key, value, rules),
            }
            .map_err(|e| t.write_error(e))?;
            if json {
                out!("{}", json!({ "table": a.table, "key": lossy(a.key.as_bytes()), "version": version.0 }));
            } else {
                out!("OK (version {version})");
            }
        }
        ClientCommand::Ttl(a) => {
            let t = Target { server, table: &a.table, key: Some(a.key.as_bytes()) };
            let table = lookup(c, &t)?;
            let ttl = c.ttl(table, a.key.as_bytes()).map_err(|e| t.read_error(e))?;
            let remaining = ttl.remaining.map(|d| d.as_millis() as u64);
            if json {
                out!(
                    "{}",
                    json!({
                        "table": a.table,
                        "key": lossy(a.key.as_bytes()),
                        "version": ttl.version.0,
                        "expires_at_ms": ttl.expires_at.map(|t| t.0),
                        "ttl_ms": remaining,
                    })
                );
            } else {
                match (ttl.expires_at, remaining) {
                    (Some(at), Some(left)) => {
                        out!("expires at {at} ms since the Unix epoch, in {left} ms (version {})", ttl.version)
                    }
                    _ => out!("never expires (version {})", ttl.version),
                }
            }
        }
        ClientCommand::Del(a) => {
            let t = Target { server, table: &a.table, key: Some(a.key.as_bytes()) };
            let table = lookup(c, &t)?;
            let rules = a.if_version.map(|v| RejectRules::version_is(Version(v))).unwrap_or_default();
            let was = c.remove_with(table, a.key.as_bytes(), rules).map_err(|e| t.write_error(e))?;
            if json {
                let was = was.map(|v| v.0);
                out!(
                    "{}",
                    json!({ "table": a.table, "key": lossy(a.key.as_bytes()), "removed": was.is_some(), "version": was })
                );
            } else {
                match was {
                    Some(v) => out!("removed (it had version {v})"),
                    None => out!("nothing removed: the object did not exist"),
                }
            }
        }
        ClientCommand::Incr(a) => {
            let t = Target { server, table: &a.table, key: Some(a.key.as_bytes()) };
            let table = lookup(c, &t)?;
            let (value, version) = c.increment(table, a.key.as_bytes(), a.delta).map_err(|e| t.increment_error(e))?;
            if json {
                out!(
                    "{}",
                    json!({ "table": a.table, "key": lossy(a.key.as_bytes()), "value": value, "version": version.0 })
                );
            } else {
                out!("{value} (version {version})");
            }
        }
        ClientCommand::Scan(a) => {
            let t = Target { server, table: &a.table, key: None };
            let table = lookup(c, &t)?;
            scan(c, &t, table, a.limit, json)?;
        }
        ClientCommand::CreateTable(a) => {
            let t = Target { server, table: &a.name, key: None };
            let id = c.create_table(&a.name).map_err(|e| t.table_error(e))?;
            if json {
                out!("{}", json!({ "table": a.name, "id": id.0 }));
            } else {
                out!("table '{}' has id {id}", a.name);
            }
        }
        ClientCommand::DropTable(a) => {
            let t = Target { server, table: &a.name, key: None };
            c.drop_table(&a.name).map_err(|e| t.table_error(e))?;
            if json {
                out!("{}", json!({ "table": a.name, "dropped": true }));
            } else {
                out!("dropped table '{}'", a.name);
            }
        }
        ClientCommand::Stats(_) => {
            // With --coordinator, run() hands it to stats::cluster.
            let t = Target { server, table: "", key: None };
            let stats = c.stats().map_err(|e| t.client(e))?;
            print_stats(&stats, json)?;
        }
        ClientCommand::Chunk(cmd) => chunk(c, cmd, server, json)?,
        ClientCommand::Stream(cmd) => stream::run(c, cmd, server, json)?,
        ClientCommand::Load(_) => unreachable!("run() hands load to load::run"),
        ClientCommand::Migrate(_) => unreachable!("run() hands migrate to migrate::run"),
        ClientCommand::Tablet(_) => unreachable!("run() hands tablet to tablet::run"),
        ClientCommand::Rebalance(_) | ClientCommand::Drain(_) => unreachable!("run() hands these to rebalance.rs"),
    }
    Ok(())
}

/// `shoal chunk ...`.
fn chunk(c: &mut Client, cmd: &ChunkCommand, server: &str, json: bool) -> Result<(), CliError> {
    let chunk_key = |id: ChunkId| id.to_string().into_bytes();
    match cmd {
        ChunkCommand::CreateTable(a) => {
            let t = Target { server, table: &a.name, key: None };
            let id = c.create_chunk_table(&a.name).map_err(|e| t.table_error(e))?;
            if json {
                out!("{}", json!({ "table": a.name, "id": id.0, "chunks": true }));
            } else {
                out!("chunk table '{}' has id {id}", a.name);
            }
        }
        ChunkCommand::Create(a) => {
            let t = Target { server, table: &a.table, key: None };
            let table = lookup(c, &t)?;
            let payloads: Vec<&[u8]> = a.payloads.iter().map(|p| p.as_bytes()).collect();
            let ids = c.create_chunks(table, &payloads).map_err(|e| t.write_error(e))?;
            if json {
                out!("{}", json!({ "table": a.table, "ids": ids.iter().map(|i| i.to_string()).collect::<Vec<_>>() }));
            } else {
                for id in ids {
                    out!("{id}");
                }
            }
        }
        ChunkCommand::Get(a) => {
            let key = chunk_key(a.id);
            let t = Target { server, table: &a.table, key: Some(&key) };
            let table = lookup(c, &t)?;
            let (payload, version) = c.get_chunk(table, a.id).map_err(|e| t.read_error(e))?;
            if json {
                out!(
                    "{}",
                    json!({ "table": a.table, "id": a.id.to_string(), "payload": lossy(&payload), "version": version.0 })
                );
            } else {
                out!("{}", show_value(&payload));
                out!("(version {version})");
            }
        }
        ChunkCommand::Put(a) => {
            let key = chunk_key(a.id);
            let t = Target { server, table: &a.table, key: Some(&key) };
            let table = lookup(c, &t)?;
            let version = c.put_chunk(table, a.id, a.payload.as_bytes()).map_err(|e| t.write_error(e))?;
            if json {
                out!("{}", json!({ "table": a.table, "id": a.id.to_string(), "version": version.0 }));
            } else {
                out!("OK (version {version})");
            }
        }
        ChunkCommand::Rm(a) => {
            let key = chunk_key(a.id);
            let t = Target { server, table: &a.table, key: Some(&key) };
            let table = lookup(c, &t)?;
            let version = c.remove_chunk(table, a.id).map_err(|e| t.write_error(e))?;
            if json {
                out!("{}", json!({ "table": a.table, "id": a.id.to_string(), "removed": true, "version": version.0 }));
            } else {
                out!("removed (it had version {version})");
            }
        }
        ChunkCommand::Name(a) => {
            let t = Target { server, table: &a.table, key: Some(a.name.as_bytes()) };
            let table = lookup(c, &t)?;
            let nt = Target { server, table: names::NAMES_TABLE, key: Some(a.name.as_bytes()) };
            let names_table = c.create_table(names::NAMES_TABLE).map_err(|e| nt.table_error(e))?;
            names::register(c, names_table, table, a.name.as_bytes(), a.id, a.replace).map_err(|e| {
                if names::is_taken(&e) {
                    CliError::refused("exists", format!("{}: the name is taken (--replace replaces it)", t.object()))
                } else {
                    t.write_error(e)
                }
            })?;
            if json {
                out!("{}", json!({ "table": a.table, "name": lossy(a.name.as_bytes()), "id": a.id.to_string() }));
            } else {
                out!("{} -> {}", show_key(a.name.as_bytes()), a.id);
            }
        }
        ChunkCommand::Lookup(a) | ChunkCommand::Unname(a) => {
            let t = Target { server, table: &a.table, key: Some(a.name.as_bytes()) };
            let table = lookup(c, &t)?;
            let names_table = c
                .table_id(names::NAMES_TABLE)
                .map_err(|_| CliError::refused("not_found", format!("{}: no chunk names registered", t.object())))?;
            if matches!(cmd, ChunkCommand::Unname(_)) {
                let had = names::unregister(c, names_table, table, a.name.as_bytes()).map_err(|e| t.write_error(e))?;
                if json {
                    out!("{}", json!({ "table": a.table, "name": lossy(a.name.as_bytes()), "removed": had.is_some() }));
                } else if had.is_some() {
                    out!("removed the name {}", show_key(a.name.as_bytes()));
                } else {
                    out!("nothing removed: no such name");
                }
            } else {
                let id = names::lookup(c, names_table, table, a.name.as_bytes()).map_err(|e| t.read_error(e))?;
                if json {
                    out!("{}", json!({ "table": a.table, "name": lossy(a.name.as_bytes()), "id": id.to_string() }));
                } else {
                    out!("{id}");
                }
            }
        }
        ChunkCommand::Names(a) => {
            let t = Target { server, table: &a.table, key: None };
            let table = lookup(c, &t)?;
            let list = match c.table_id(names::NAMES_TABLE) {
                Ok(n) => names::list(c, n, table, a.prefix.as_bytes()).map_err(|e| t.table_error(e))?,
                Err(_) => Vec::new(),
            };
            for (name, id) in &list {
                if json {
                    out!("{}", json!({ "table": a.table, "name": lossy(name), "id": id.to_string() }));
                } else {
                    out!("{} -> {id}", show_key(name));
                }
            }
            if !json {
                out!("({} names)", list.len());
            }
        }
        ChunkCommand::Lock(a) | ChunkCommand::Trylock(a) => {
            let key = chunk_key(a.id);
            let t = Target { server, table: &a.table, key: Some(&key) };
            let table = lookup(c, &t)?;
            if let Some(owner) = a.owner {
                c.set_lock_owner(owner);
            }
            let mode = if a.shared { LockMode::Shared } else { LockMode::Exclusive };
            let lease = Duration::from_millis(a.lease_ms.into());
            let lock = match cmd {
                ChunkCommand::Lock(_) => c.lock_chunk(table, a.id, mode, lease, Duration::from_millis(a.timeout_ms)),
                _ => c.try_lock_chunk(table, a.id, mode, lease),
            }
            .map_err(|e| t.lock_error(e))?;
            let mode_name = if a.shared { "shared" } else { "exclusive" };
            if json {
                out!(
                    "{}",
                    json!({ "table": a.table, "id": a.id.to_string(), "mode": mode_name, "owner": lock.owner,
                        "token": lock.token, "lease_ms": lock.lease.as_millis() as u64 })
                );
            } else {
                out!(
                    "locked {} ({mode_name}): owner {} token {} lease {} ms",
                    a.id,
                    lock.owner,
                    lock.token,
                    lock.lease.as_millis()
                );
            }
            if let Some(hold) = a.hold_ms {
                hold_lock(c, &t, lock, hold, json)?;
            }
        }
        ChunkCommand::Unlock(a) => {
            let key = chunk_key(a.id);
            let t = Target { server, table: &a.table, key: Some(&key) };
            let table = lookup(c, &t)?;
            let lock = ChunkLock {
                table,
                chunk: a.id,
                mode: LockMode::Exclusive,
                owner: a.owner,
                token: a.token,
                lease: Duration::from_millis(1),
                renewed_at: std::time::Instant::now(),
            };
            c.unlock_chunk(&lock).map_err(|e| t.lock_error(e))?;
            if json {
                out!("{}", json!({ "table": a.table, "id": a.id.to_string(), "unlocked": true }));
            } else {
                out!("unlocked {}", a.id);
            }
        }
    }
    Ok(())
}

/// Holds `lock` for `hold_ms` (0: until killed), renewing its lease every
/// third of it, then unlocks it. A renewal that answers the lock is lost
/// ends the command with an error.
fn hold_lock(c: &mut Client, t: &Target<'_>, mut lock: ChunkLock, hold_ms: u64, json: bool) -> Result<(), CliError> {
    let end = (hold_ms > 0).then(|| std::time::Instant::now() + Duration::from_millis(hold_ms));
    loop {
        let pause = lock.lease / 3;
        match end {
            Some(end) if std::time::Instant::now() + pause >= end => {
                std::thread::sleep(end.saturating_duration_since(std::time::Instant::now()));
                break;
            }
            _ => std::thread::sleep(pause),
        }
        let sent = std::time::Instant::now();
        lock.lease = c.renew_chunk_lock(&lock).map_err(|e| t.lock_error(e))?;
        lock.renewed_at = sent;
    }
    c.unlock_chunk(&lock).map_err(|e| t.lock_error(e))?;
    if json {
        out!("{}", json!({ "id": lock.chunk.to_string(), "unlocked": true }));
    } else {
        out!("unlocked {}", lock.chunk);
    }
    Ok(())
}

fn lookup(c: &mut Client, t: &Target<'_>) -> Result<TableId, CliError> {
    c.table_id(t.table).map_err(|e| t.table_error(e))
}

/// The largest value the server takes: its `max_value_bytes` statistic,
/// or, from a server that does not report it, the frame limit (the server
/// still refuses a larger value itself). In a cluster the statistics are
/// those of the server admin requests go to: its servers normally share
/// their limits, and a master with a lower one refuses the value itself.
fn max_value_bytes(stats: &[(String, StatValue)]) -> usize {
    stat_u64(stats, "max_value_bytes").map_or(ClientConfig::default().max_body_bytes as usize, |n| n as usize)
}

fn stat_u64(stats: &[(String, StatValue)], name: &str) -> Option<u64> {
    stats.iter().find(|(n, _)| n == name).and_then(|(_, v)| match v {
        StatValue::U64(x) => Some(*x),
        StatValue::F64(_) => None,
    })
}

/// `put`'s value: the argument, stdin (`-`) or --value-file, read up to the
/// server's largest value.
fn put_value(c: &mut Client, t: &Target<'_>, a: &PutArgs) -> Result<Vec<u8>, CliError> {
    let (what, input): (String, Box<dyn Read>) = match (&a.value, &a.value_file) {
        (Some(v), None) if v.as_bytes() != b"-" => return Ok(v.as_bytes().to_vec()),
        (Some(_), None) => ("stdin".into(), Box::new(std::io::stdin().lock())),
        (None, Some(path)) => {
            let file = std::fs::File::open(path).map_err(|e| CliError {
                kind: "input",
                message: format!("cannot open {}: {e}", path.display()),
                code: USAGE,
            })?;
            (path.display().to_string(), Box::new(file))
        }
        _ => unreachable!("clap: exactly one of VALUE and --value-file"),
    };
    let max = max_value_bytes(&c.stats().map_err(|e| t.client(e))?);
    read_bounded(input, max).map_err(|e| match e {
        Bounded::TooLarge => CliError {
            kind: "too_large",
            message: format!(
                "the value from {what} is larger than the server's maximum of {max} bytes (stopped reading at {} \
                 bytes)",
                max + 1
            ),
            code: USAGE,
        },
        Bounded::Io(e) => CliError { kind: "input", message: format!("cannot read {what}: {e}"), code: USAGE },
    })
}

/// Why [`read_bounded`] failed.
#[derive(Debug)]
enum Bounded {
    TooLarge,
    Io(std::io::Error),
}

/// Reads `input` to its end if that is at most `max` bytes; stops after
/// `max + 1` bytes otherwise (never holds more).
fn read_bounded(input: impl Read, max: usize) -> Result<Vec<u8>, Bounded> {
    let mut buf = Vec::new();
    input.take(max as u64 + 1).read_to_end(&mut buf).map_err(Bounded::Io)?;
    if buf.len() > max {
        return Err(Bounded::TooLarge);
    }
    Ok(buf)
}

/// Objects per enumeration request.
const SCAN_PAGE: u32 = 1000;

/// Prints the table's objects page by page, up to `limit`. Ends because the
/// server's cursor reaches the end of the table (every enumeration does) or
/// the limit is reached.
fn scan(c: &mut Client, t: &Target<'_>, table: TableId, limit: Option<u64>, json: bool) -> Result<(), CliError> {
    let limit = limit.unwrap_or(u64::MAX);
    let mut printed = 0u64;
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        if printed >= limit {
            break;
        }
        let want = (limit - printed).min(u64::from(SCAN_PAGE)) as u32;
        let page = c.enumerate(table, at, want).map_err(|e| t.table_error(e))?;
        for o in page.objects.iter().take((limit - printed) as usize) {
            if json {
                out!("{}", Value::Object(object_json(t.table, &o.key, &o.value, o.version)));
            } else {
                out!("{} -> {} (version {})", show_inline(&o.key), show_inline(&o.value), o.version);
            }
            printed += 1;
        }
        cursor = page.next;
    }
    if !json {
        let more = if cursor.is_some() { " (limit reached; more remain)" } else { "" };
        out!("({printed} object{}){more}", if printed == 1 { "" } else { "s" });
    }
    Ok(())
}

/// A server's statistics as one JSON object, by name.
fn stats_json(stats: &[(String, StatValue)]) -> Map<String, Value> {
    stats
        .iter()
        .map(|(n, v)| {
            let v = match v {
                StatValue::U64(x) => Value::from(*x),
                StatValue::F64(x) => Value::from(*x),
            };
            (n.clone(), v)
        })
        .collect()
}

fn print_stats(stats: &[(String, StatValue)], json: bool) -> Result<(), CliError> {
    if json {
        out!("{}", Value::Object(stats_json(stats)));
        return Ok(());
    }
    let width = stats.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, v) in stats {
        match v {
            StatValue::U64(x) => out!("{name:<width$}  {x}"),
            StatValue::F64(x) => out!("{name:<width$}  {x:.4}"),
        }
    }
    Ok(())
}

/// A key and value as JSON: UTF-8 bytes as strings, anything else as hex
/// under `key_hex` / `value_hex`.
fn object_json(table: &str, key: &[u8], value: &[u8], version: Version) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("table".into(), Value::from(table));
    for (name, bytes) in [("key", key), ("value", value)] {
        match std::str::from_utf8(bytes) {
            Ok(s) => o.insert(name.into(), Value::from(s)),
            Err(_) => o.insert(format!("{name}_hex"), Value::from(hex(bytes))),
        };
    }
    o.insert("version".into(), Value::from(version.0));
    o
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A value as `get` prints it: UTF-8 text as is, other bytes escaped.
fn show_value(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => b.escape_ascii().to_string(),
    }
}

/// Bytes quoted and escaped, for one-line listings.
fn show_inline(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => format!("\"{}\"", s.escape_debug()),
        Err(_) => format!("\"{}\"", b.escape_ascii()),
    }
}

/// A key in a message: plain when it is plain text, quoted and escaped
/// otherwise.
fn show_key(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if !s.is_empty() && !s.chars().any(|c| c.is_control() || c.is_whitespace() || c == '"') => s.into(),
        _ => show_inline(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_json_uses_hex_for_binary() {
        let o = object_json("t", b"k", &[0xff, 0x00], Version(3));
        assert_eq!(o["key"], "k");
        assert_eq!(o["value_hex"], "ff00");
        assert!(!o.contains_key("value"));
        assert_eq!(o["version"], 3);
    }

    #[test]
    fn put_rules_map_to_reject_rules() {
        let r = PutRules { if_version: Some(4), ..Default::default() }.rules();
        assert_eq!(r, RejectRules::version_is(Version(4)));
        assert_eq!(PutRules { if_absent: true, ..Default::default() }.rules(), RejectRules::must_not_exist());
        assert_eq!(PutRules { if_present: true, ..Default::default() }.rules(), RejectRules::must_exist());
        assert_eq!(PutRules::default().rules(), RejectRules::default());
    }

    #[test]
    fn read_bounded_stops_past_the_limit() {
        assert_eq!(read_bounded(&b"abc"[..], 3).unwrap(), b"abc");
        assert_eq!(read_bounded(&b""[..], 0).unwrap(), b"");
        assert!(matches!(read_bounded(&b"abcd"[..], 3), Err(Bounded::TooLarge)));
        // An endless input is read only to the limit + 1.
        let mut endless = std::io::repeat(7);
        assert!(matches!(read_bounded(&mut endless, 1 << 20), Err(Bounded::TooLarge)));
    }

    #[test]
    fn show_inline_escapes() {
        assert_eq!(show_inline(b"a\nb"), "\"a\\nb\"");
        assert_eq!(show_inline(&[0xff]), "\"\\xff\"");
    }
}
