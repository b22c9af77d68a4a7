//! `shoal bench ycsb`: YCSB's core workloads against a running server,
//! with closed-loop client threads.
//!
//! Each thread owns one connection and runs rounds: it queues `--pipeline`
//! operations, sends them in one write and waits for all their replies (as
//! `redis-benchmark -P` does), then starts the next round. An operation's
//! latency runs from the send of its round to the parse of its reply; a
//! read-modify-write is a read in one round and a write of the same key in
//! the next, timed from the read's send to the write's reply. The run stops
//! at `--operations` or `--duration`, whichever comes first.
//!
//! The same driver speaks Shoal's native protocol (the client library's
//! pipelined connection), the Redis protocol (GET/SET) and memcached's text
//! protocol (get/set), so it measures Shoal and the stores it is compared
//! with under identical load.
//!
//! With `--coordinator` the native clients talk to a cluster: the tablet
//! map comes from the coordinator once, and each thread keeps a pipelined
//! connection per server and sends each request straight to its key's
//! master (a round's requests go to their masters together). A server that
//! answers `UNKNOWN_TABLET` makes that thread fetch the map again and
//! resend; the report counts those fetches.

pub(crate) mod wire;
pub(crate) mod workload;

use super::{emit_json, Table};
use crate::progress::{Progress, Stream, Unit};
use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use shoal_client::{blocking, ClientConfig, CoordinatorMap, TableError, TableId, TabletMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use wire::{ClusterNative, Memcached, Native, Reply, Req, Resp, Wire};
use workload::{record_key, Chooser, KeyDist, OpKind, Records, Workload};

/// Which protocol the clients speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Shoal's native protocol (default address 127.0.0.1:7700).
    Native,
    /// The Redis protocol, GET and SET (default address 127.0.0.1:6380,
    /// Shoal's RESP port; point --server at a redis-server to compare).
    Resp,
    /// memcached's text protocol, get and set (default 127.0.0.1:11211).
    Memcached,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Resp => "resp",
            Protocol::Memcached => "memcached",
        }
    }

    fn default_server(self) -> &'static str {
        match self {
            Protocol::Native => "127.0.0.1:7700",
            Protocol::Resp => "127.0.0.1:6380",
            Protocol::Memcached => "127.0.0.1:11211",
        }
    }
}

/// Options of `shoal bench ycsb`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Workloads to run, in order, on the same records: A (50% read, 50%
    /// update), B (95/5), C (read only), D (95% read latest, 5% insert), F
    /// (50% read, 50% read-modify-write), W (update only), U1 (99/1), U10
    /// (90/10).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "A")]
    pub workload: Vec<Workload>,
    /// The server's address (default: the protocol's usual port on 127.0.0.1).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "coordinator")]
    pub server: Option<String>,
    /// A cluster's coordinator (native protocol): requests go to each key's
    /// master by the tablet map fetched from there, over one connection
    /// per server and thread.
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// Protocol spoken to the server.
    #[arg(long, value_enum, default_value = "native")]
    pub protocol: Protocol,
    /// Records the workloads address (keys "user<hash of 0..N>").
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Load the records before the workloads (otherwise they must already
    /// be there: reads of missing records are counted as "not found").
    #[arg(long)]
    pub load: bool,
    /// Most operations per workload (all threads together). Default:
    /// 1,000,000 unless --duration is given.
    #[arg(long)]
    pub operations: Option<u64>,
    /// Most seconds per workload.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Key distribution of reads and updates (default: zipfian, and latest
    /// for workload D). Zipfian is YCSB's scrambled Zipfian with 0.99.
    #[arg(long, value_enum)]
    pub key_dist: Option<KeyDist>,
    /// Client threads, each with its own connection.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Requests in flight per thread (sent together, then awaited).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Longest the native client spins on its socket waiting for a reply
    /// before it sleeps in poll(2) (the client library's adaptive spin;
    /// 0 never spins). Spinning lowers latency when a core is free for it,
    /// and costs throughput when threads outnumber cores. Default: the
    /// library's own (50) when --threads is at most half the cores, else 0.
    #[arg(long, value_name = "MICROSECONDS")]
    pub spin_us: Option<u64>,
    /// Redis protocol: follow each SET with `WAIT N 0`, so that a write
    /// counts as done once N replicas acknowledged it (Redis replication's
    /// synchronous mode; a write's latency includes its WAIT).
    #[arg(long, value_name = "N")]
    pub resp_wait: Option<u32>,
    /// Every write (the load's too) sets this time to live, in seconds
    /// (native WRITE_TTL, Redis SET EX, memcached exptime); 0: none.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub ttl: u32,
    /// With --short-ttl-percent: the time to live of writes to that share of
    /// the records (record numbers whose last two digits are below it), so
    /// that a cache holds that share of expired keys once they pass it.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub short_ttl: u32,
    /// Percentage of the records written with --short-ttl instead of --ttl.
    #[arg(long, value_name = "PERCENT", default_value_t = 0)]
    pub short_ttl_percent: u32,
    /// Table of the records (native protocol; created by --load).
    #[arg(long, default_value = "ycsb")]
    pub table: String,
    /// Seed of the operation and key choices.
    #[arg(long, default_value_t = 0x5c5b)]
    pub seed: u64,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One line of the report: one operation type (or "all", or the load) of
/// one workload.
#[derive(Clone, Debug, Serialize)]
pub struct YcsbResult {
    pub bench: &'static str,
    /// "A".."W", or "load".
    pub workload: String,
    pub protocol: &'static str,
    pub server: String,
    pub records: u64,
    pub value_bytes: usize,
    pub key_dist: &'static str,
    pub threads: usize,
    pub pipeline: usize,
    /// "read", "update", "insert", "rmw", or "all".
    pub op: &'static str,
    /// Operations completed (failed ones included).
    pub ops: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Reads (and the read of read-modify-writes) that found no record.
    pub not_found: u64,
    /// Operations the server refused.
    pub errors: u64,
    /// The first refusal, or the failure that stopped a thread.
    pub error: Option<String>,
    /// Servers the requests went to (1 unless --coordinator).
    pub servers: usize,
    /// Tablet map fetches after `UNKNOWN_TABLET` (cluster only).
    pub map_refreshes: u64,
    /// Reads sent to another member of the master's symmetric-caching
    /// group because its filter held the key (cluster only).
    pub spread_reads: u64,
    /// Replicas each Redis SET waited for (--resp-wait; 0 without).
    pub resp_wait: u32,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("histogram bounds")
}

/// What one thread measured in one workload.
struct Tally {
    hist: Vec<Histogram<u64>>,
    not_found: [u64; 4],
    errors: [u64; 4],
    first_error: Option<String>,
    /// Why the thread stopped early (its connection failed).
    fatal: Option<String>,
    /// Tablet map fetches after `UNKNOWN_TABLET`.
    map_refreshes: u64,
    spread_reads: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            hist: OpKind::ALL.iter().map(|_| histogram()).collect(),
            not_found: [0; 4],
            errors: [0; 4],
            first_error: None,
            fatal: None,
            map_refreshes: 0,
            spread_reads: 0,
        }
    }

    fn merge(&mut self, o: Tally) {
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            a.add(b).expect("same histogram bounds");
        }
        for k in 0..4 {
            self.not_found[k] += o.not_found[k];
            self.errors[k] += o.errors[k];
        }
        self.first_error = self.first_error.take().or(o.first_error);
        self.fatal = self.fatal.take().or(o.fatal);
        self.map_refreshes += o.map_refreshes;
        self.spread_reads += o.spread_reads;
    }

    fn error(&mut self, kind: OpKind, message: String) {
        self.errors[kind.index()] += 1;
        self.first_error.get_or_insert(message);
    }
}

/// What a workload shares between its threads.
struct Shared {
    workload: Workload,
    chooser: Chooser,
    records: Records,
    /// Operations started, against the limit.
    started: AtomicU64,
    limit: u64,
    deadline: Instant,
    value_size: usize,
    /// --ttl, --short-ttl, --short-ttl-percent.
    ttl: (u32, u32, u32),
}

impl Shared {
    /// Claims the right to start one more operation.
    fn claim(&self) -> bool {
        self.started.fetch_add(1, Ordering::Relaxed) < self.limit
    }
}

/// An operation in the current round.
#[derive(Clone, Copy)]
struct InFlight {
    kind: OpKind,
    record: u64,
    /// When the operation started (a read-modify-write's write carries its
    /// read's start).
    started: Instant,
    /// The read half of a read-modify-write.
    rmw_read: bool,
}

/// The time to live of a write to `record` (0: none).
fn ttl_of(args_ttl: (u32, u32, u32), record: u64) -> u32 {
    let (ttl, short, percent) = args_ttl;
    if record % 100 < u64::from(percent) {
        short
    } else {
        ttl
    }
}

/// Runs one thread's rounds until the limit or the deadline.
fn drive(wire: &mut dyn Wire, shared: &Shared, pipeline: usize, seed: u64) -> Tally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = Tally::new();
    let mut value: Vec<u8> = (0..shared.value_size).map(|_| rng.gen_range(b'a'..=b'z')).collect();
    let mut key = String::new();
    let mut round: Vec<InFlight> = Vec::with_capacity(pipeline);
    // Read-modify-writes whose read is done and whose write is next.
    let mut rmw_writes: Vec<InFlight> = Vec::new();
    let mut stamp = 0u64;
    loop {
        if Instant::now() >= shared.deadline {
            break;
        }
        round.clear();
        let started = Instant::now();
        while round.len() < pipeline {
            let op = match rmw_writes.pop() {
                Some(w) => w,
                None if shared.claim() => {
                    let kind = shared.workload.pick(&mut rng);
                    let record = match kind {
                        OpKind::Insert => shared.records.claim(),
                        _ => shared.chooser.next(&mut rng, &shared.records),
                    };
                    InFlight { kind, record, started, rmw_read: kind == OpKind::Rmw }
                }
                None => break,
            };
            record_key(op.record, &mut key);
            let req = if op.kind == OpKind::Read || op.rmw_read {
                Req::Get(key.as_bytes())
            } else {
                // Vary the value a little so that writes are not identical.
                stamp += 1;
                let n = value.len().min(8);
                value[..n].copy_from_slice(&stamp.to_le_bytes()[..n]);
                Req::Set(key.as_bytes(), &value, ttl_of(shared.ttl, op.record))
            };
            if let Err(e) = wire.push(req) {
                tally.fatal = Some(e);
                tally.map_refreshes = wire.map_refreshes();
                tally.spread_reads = wire.spread_reads();
                return tally;
            }
            round.push(op);
        }
        if round.is_empty() {
            break;
        }
        let mut on_reply = |i: usize, reply: Reply| {
            let op = round[i];
            let now = Instant::now();
            match reply {
                Reply::Error(e) => return tally.error(op.kind, e),
                Reply::NotFound => {
                    tally.not_found[op.kind.index()] += 1;
                    if op.rmw_read {
                        // Nothing to modify: the operation ends here.
                        let ns = now.duration_since(op.started).as_nanos() as u64;
                        tally.hist[op.kind.index()].saturating_record(ns.max(1));
                        return;
                    }
                }
                Reply::Found | Reply::Stored => {}
            }
            if op.rmw_read {
                rmw_writes.push(InFlight { rmw_read: false, ..op });
                return;
            }
            if op.kind == OpKind::Insert {
                shared.records.ack(op.record);
            }
            let ns = now.duration_since(op.started).as_nanos() as u64;
            tally.hist[op.kind.index()].saturating_record(ns.max(1));
        };
        if let Err(e) = wire.exchange(&mut on_reply) {
            tally.fatal = Some(e);
            break;
        }
    }
    tally.map_refreshes = wire.map_refreshes();
    tally.spread_reads = wire.spread_reads();
    tally
}

/// Where the clients send their requests.
enum Target {
    /// One server.
    Server(SocketAddr),
    /// A cluster: its coordinator and the tablet map fetched from it.
    Cluster(CoordinatorMap, TabletMap),
}

impl Target {
    /// Servers the map sends requests to.
    fn servers(&self) -> usize {
        match self {
            Target::Server(_) => 1,
            Target::Cluster(_, map) => {
                let mut s: Vec<SocketAddr> = map.tablets().iter().map(|t| t.server).collect();
                s.sort();
                s.dedup();
                s.len()
            }
        }
    }
}

/// Connects one client of `protocol`.
fn connect(args: &Args, target: &Target, table: TableId) -> Result<Box<dyn Wire>, String> {
    let addr = match target {
        Target::Server(addr) => *addr,
        Target::Cluster(source, map) => {
            return Ok(Box::new(ClusterNative::new(source.clone(), map.clone(), table, spin(args))));
        }
    };
    Ok(match args.protocol {
        Protocol::Native => Box::new(Native::connect(addr, table, spin(args))?),
        Protocol::Resp => Box::new(Resp::with_wait(addr, args.resp_wait)?),
        Protocol::Memcached => Box::new(Memcached::connect(addr)?),
    })
}

/// The native client's spin budget (see `Args::spin_us`).
fn spin(args: &Args) -> Duration {
    let default = ClientConfig::default().spin;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match args.spin_us {
        Some(us) => Duration::from_micros(us),
        None if args.threads * 2 <= cores => default,
        None => Duration::ZERO,
    }
}

/// The native protocol's table: created when loading, looked up otherwise.
fn native_table(addr: SocketAddr, name: &str, create: bool) -> Result<TableId, String> {
    let config = ClientConfig { timeout: Some(wire::REPLY_TIMEOUT), ..ClientConfig::default() };
    let mut c = blocking::Client::with_config(addr, config).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let r = if create { c.create_table(name) } else { c.table_id(name) };
    r.map_err(|e| match e {
        TableError::UnknownTableName => format!("no table '{name}' on {addr}: run with --load to create and fill it"),
        e => format!("table '{name}': {e}"),
    })
}

/// The cluster's table: created (through any server) when loading, looked
/// up otherwise; and the tablet map once it has the table's tablets.
fn cluster_table(coordinator: SocketAddr, name: &str, create: bool) -> Result<(TableId, TabletMap), String> {
    let config = ClientConfig { timeout: Some(wire::REPLY_TIMEOUT), ..ClientConfig::default() };
    let mut c = blocking::Client::connect_cluster(coordinator, config)
        .map_err(|e| format!("cannot reach the cluster of coordinator {coordinator}: {e}"))?;
    let r = if create { c.create_table(name) } else { c.table_id(name) };
    let table = r.map_err(|e| match e {
        TableError::UnknownTableName => {
            format!("no table '{name}' in the cluster: run with --load to create and fill it")
        }
        e => format!("table '{name}': {e}"),
    })?;
    // A created table's tablets appear in the map once the coordinator
    // placed them: fetch the map again until they do (bounded).
    let source = CoordinatorMap::new(coordinator);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let map = source.fetch().map_err(|e| format!("tablet map from {coordinator}: {e}"))?;
        if map.tablets().iter().any(|t| t.table == Some(table)) {
            return Ok((table, map));
        }
        if Instant::now() >= deadline {
            return Err(format!("table '{name}' (id {}) has no tablets in the coordinator's map", table.0));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes records `0..n` from `threads` connections, `depth` at a time.
/// Shows its progress on stderr (a bar on a terminal, else a line per
/// tenth of the records).
fn load(args: &Args, target: &Target, table: TableId, depth: usize) -> Result<(Duration, Tally), String> {
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let progress = Progress::new(Stream::Stderr);
    let task = progress.task("ycsb load", Some(args.records), Unit::Count("records")).with_rate();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (next, task) = (&next, &task);
                s.spawn(move || {
                    let mut tally = Tally::new();
                    let mut wire = match connect(args, target, table) {
                        Ok(w) => w,
                        Err(e) => {
                            tally.fatal = Some(e);
                            return tally;
                        }
                    };
                    let mut rng = StdRng::seed_from_u64(args.seed ^ 0x10ad ^ t as u64);
                    let value: Vec<u8> = (0..args.value_size).map(|_| rng.gen_range(b'a'..=b'z')).collect();
                    let mut key = String::new();
                    loop {
                        let first = next.fetch_add(depth as u64, Ordering::Relaxed);
                        if first >= args.records {
                            return tally;
                        }
                        let last = (first + depth as u64).min(args.records);
                        for i in first..last {
                            record_key(i, &mut key);
                            let ttl = ttl_of((args.ttl, args.short_ttl, args.short_ttl_percent), i);
                            if let Err(e) = wire.push(Req::Set(key.as_bytes(), &value, ttl)) {
                                tally.fatal = Some(e);
                                return tally;
                            }
                        }
                        let sent = Instant::now();
                        let r = wire.exchange(&mut |_, reply| {
                            if let Reply::Error(e) = reply {
                                return tally.error(OpKind::Insert, e);
                            }
                            let ns = sent.elapsed().as_nanos() as u64;
                            tally.hist[OpKind::Insert.index()].saturating_record(ns.max(1));
                        });
                        if let Err(e) = r {
                            tally.fatal = Some(e);
                            return tally;
                        }
                        task.inc(last - first);
                        tally.map_refreshes = wire.map_refreshes();
                        tally.spread_reads = wire.spread_reads();
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("load thread")).collect()
    });
    let mut total = Tally::new();
    for t in tallies {
        total.merge(t);
    }
    let elapsed = started.elapsed();
    match &total.fatal {
        Some(e) => task.finish(format!("stopped: {e}")),
        None => {
            task.finish(format!("{} records in {:.2} s", indicatif::HumanCount(args.records), elapsed.as_secs_f64()))
        }
    }
    Ok((elapsed, total))
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The report line of one operation type from merged histograms.
fn result_line(
    args: &Args,
    ctx: &Context,
    workload: &str,
    op: &'static str,
    h: &Histogram<u64>,
    secs: f64,
) -> YcsbResult {
    let n = h.len();
    let q = |p: f64| if n == 0 { 0.0 } else { us(h.value_at_quantile(p)) };
    YcsbResult {
        bench: "ycsb",
        workload: workload.to_string(),
        protocol: args.protocol.name(),
        server: ctx.server.clone(),
        records: args.records,
        value_bytes: args.value_size,
        key_dist: ctx.dist,
        threads: args.threads,
        pipeline: args.pipeline,
        op,
        ops: n,
        secs,
        ops_per_sec: if secs > 0.0 { n as f64 / secs } else { 0.0 },
        mean_us: if n == 0 { 0.0 } else { h.mean() / 1000.0 },
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: if n == 0 { 0.0 } else { us(h.max()) },
        not_found: 0,
        errors: 0,
        error: None,
        servers: ctx.servers,
        map_refreshes: 0,
        spread_reads: 0,
        resp_wait: args.resp_wait.unwrap_or(0),
    }
}

/// Per-workload facts of the report.
struct Context {
    server: String,
    /// The key distribution's name ("-" for the load).
    dist: &'static str,
    servers: usize,
}

/// The lines of one workload: each operation type it ran, then "all".
fn workload_lines(args: &Args, ctx: &Context, name: &str, tally: &Tally, secs: f64) -> Vec<YcsbResult> {
    let mut lines = Vec::new();
    let mut all = histogram();
    for kind in OpKind::ALL {
        let h = &tally.hist[kind.index()];
        let (nf, errs) = (tally.not_found[kind.index()], tally.errors[kind.index()]);
        if h.is_empty() && errs == 0 {
            continue;
        }
        all.add(h).expect("same histogram bounds");
        let mut line = result_line(args, ctx, name, kind.name(), h, secs);
        line.ops += errs;
        line.ops_per_sec = if secs > 0.0 { line.ops as f64 / secs } else { 0.0 };
        line.not_found = nf;
        line.errors = errs;
        lines.push(line);
    }
    let mut total = result_line(args, ctx, name, "all", &all, secs);
    total.not_found = tally.not_found.iter().sum();
    total.errors = tally.errors.iter().sum();
    total.ops += total.errors;
    total.ops_per_sec = if secs > 0.0 { total.ops as f64 / secs } else { 0.0 };
    total.error = tally.fatal.clone().or_else(|| tally.first_error.clone());
    total.map_refreshes = tally.map_refreshes;
    total.spread_reads = tally.spread_reads;
    lines.push(total);
    lines
}

fn validate(args: &Args) -> Result<(), String> {
    if args.threads == 0 || args.pipeline == 0 {
        return Err("--threads and --pipeline must be at least 1".into());
    }
    if args.records == 0 {
        return Err("--records must be at least 1".into());
    }
    if args.workload.is_empty() {
        return Err("--workload needs at least one of A, B, C, D, F, W".into());
    }
    if let Some(d) = args.duration {
        if !super::positive(d) {
            return Err("--duration must be a positive number of seconds".into());
        }
    }
    if args.operations == Some(0) {
        return Err("--operations must be at least 1".into());
    }
    if args.coordinator.is_some() && args.protocol != Protocol::Native {
        return Err("--coordinator needs the native protocol (a Redis client goes to any server's --server)".into());
    }
    if args.short_ttl_percent > 100 || (args.short_ttl_percent > 0 && args.short_ttl == 0) {
        return Err("--short-ttl-percent is a percentage (0-100) and needs --short-ttl".into());
    }
    if (args.ttl > 0 || args.short_ttl_percent > 0) && args.coordinator.is_some() {
        return Err("--ttl and --short-ttl are not supported against a cluster (--coordinator)".into());
    }
    if args.resp_wait.is_some() && args.protocol != Protocol::Resp {
        return Err("--resp-wait is for the Redis protocol".into());
    }
    Ok(())
}

/// Runs the load (with --load) and each workload; prints the report.
/// Returns whether every run completed without errors.
pub fn run(args: &Args) -> Result<bool, String> {
    validate(args)?;
    let (server, flag) = match &args.coordinator {
        Some(c) => (c.clone(), "--coordinator"),
        None => (args.server.clone().unwrap_or_else(|| args.protocol.default_server().to_string()), "--server"),
    };
    let addr = server
        .to_socket_addrs()
        .map_err(|e| format!("bad {flag} {server}: {e}"))?
        .next()
        .ok_or_else(|| format!("{flag} {server} resolves to no address"))?;
    let (table, target) = match (args.protocol, args.coordinator.is_some()) {
        (Protocol::Native, true) => {
            let (table, map) = cluster_table(addr, &args.table, args.load)?;
            (table, Target::Cluster(CoordinatorMap::new(addr), map))
        }
        (Protocol::Native, false) => (native_table(addr, &args.table, args.load)?, Target::Server(addr)),
        _ => (TableId(0), Target::Server(addr)),
    };
    let servers = target.servers();
    let server = match &target {
        Target::Cluster(..) => format!("cluster of {server} ({servers} servers)"),
        Target::Server(_) => server,
    };
    let limit = match (args.operations, args.duration) {
        (Some(n), _) => n,
        (None, Some(_)) => u64::MAX,
        (None, None) => 1_000_000,
    };
    let time = args.duration.map_or(Duration::from_secs(365 * 24 * 3600), Duration::from_secs_f64);

    let mut lines = Vec::new();
    if args.load {
        eprintln!(
            "loading {} records of {} bytes into {server} ({})",
            args.records,
            args.value_size,
            args.protocol.name()
        );
        let depth = args.pipeline.max(64);
        let (elapsed, tally) = load(args, &target, table, depth)?;
        let ctx = Context { server: server.clone(), dist: "-", servers };
        let h = &tally.hist[OpKind::Insert.index()];
        let mut line = result_line(args, &ctx, "load", "insert", h, elapsed.as_secs_f64());
        line.pipeline = depth;
        line.errors = tally.errors.iter().sum();
        line.ops += line.errors;
        line.error = tally.fatal.clone().or_else(|| tally.first_error.clone());
        line.map_refreshes = tally.map_refreshes;
        lines.push(line);
    }

    // Zipfian choosers take O(records) to build: one per distribution.
    let mut choosers: Vec<(KeyDist, Chooser)> = Vec::new();
    for &w in &args.workload {
        let dist = args.key_dist.unwrap_or(w.default_dist());
        let chooser = match choosers.iter().find(|(d, _)| *d == dist) {
            Some((_, c)) => c.clone(),
            None => {
                let c = Chooser::new(dist, args.records);
                choosers.push((dist, c.clone()));
                c
            }
        };
        eprintln!(
            "workload {} ({}): {} threads x {} in flight, {} keys",
            w.name(),
            args.protocol.name(),
            args.threads,
            args.pipeline,
            dist.name()
        );
        let shared = Shared {
            workload: w,
            chooser,
            records: Records::new(args.records),
            started: AtomicU64::new(0),
            limit,
            deadline: Instant::now() + time,
            value_size: args.value_size,
            ttl: (args.ttl, args.short_ttl, args.short_ttl_percent),
        };
        let started = Instant::now();
        let tallies: Vec<Tally> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..args.threads)
                .map(|t| {
                    let (shared, target) = (&shared, &target);
                    let seed = args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (t as u64 + 1);
                    s.spawn(move || match connect(args, target, table) {
                        Ok(mut wire) => drive(wire.as_mut(), shared, args.pipeline, seed),
                        Err(e) => Tally { fatal: Some(e), ..Tally::new() },
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("client thread")).collect()
        });
        let secs = started.elapsed().as_secs_f64();
        let mut tally = Tally::new();
        for t in tallies {
            tally.merge(t);
        }
        let ctx = Context { server: server.clone(), dist: dist.name(), servers };
        lines.extend(workload_lines(args, &ctx, w.name(), &tally, secs));
    }

    if args.json {
        for l in &lines {
            emit_json(l);
        }
    } else {
        print_table(args, &lines);
    }
    Ok(lines.iter().all(|l| l.error.is_none() && l.errors == 0))
}

fn print_table(args: &Args, lines: &[YcsbResult]) {
    if let Some(l) = lines.first() {
        println!(
            "ycsb over {} at {}: {} records, {}-byte values, {} threads x {} in flight{}",
            l.protocol,
            l.server,
            l.records,
            l.value_bytes,
            args.threads,
            args.pipeline,
            match args.resp_wait {
                Some(n) => format!(", each SET followed by WAIT {n} 0"),
                None => String::new(),
            }
        );
    }
    let mut t = Table::new(
        &[
            "workload",
            "keys",
            "op",
            "ops",
            "secs",
            "kops/s",
            "mean us",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "max us",
            "not found",
            "errors",
        ],
        3,
    );
    for l in lines {
        t.row(vec![
            l.workload.clone(),
            l.key_dist.to_string(),
            l.op.to_string(),
            l.ops.to_string(),
            format!("{:.2}", l.secs),
            format!("{:.1}", l.ops_per_sec / 1000.0),
            format!("{:.1}", l.mean_us),
            format!("{:.1}", l.p50_us),
            format!("{:.1}", l.p99_us),
            format!("{:.1}", l.p999_us),
            format!("{:.0}", l.max_us),
            l.not_found.to_string(),
            l.errors.to_string(),
        ]);
    }
    print!("{}", t.render());
    for l in lines {
        if let Some(e) = &l.error {
            println!("workload {} {}: {e}", l.workload, l.op);
        }
        if l.spread_reads > 0 {
            println!(
                "workload {}: {} reads sent to another member of the master's symmetric-caching group",
                l.workload, l.spread_reads
            );
        }
        if l.map_refreshes > 0 {
            println!("workload {}: {} tablet map fetches after UNKNOWN_TABLET", l.workload, l.map_refreshes);
        }
    }
}
