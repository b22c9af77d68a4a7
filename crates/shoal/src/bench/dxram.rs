//! `shoal bench dxram`: DXRAM's small-object workloads (issue 18) over
//! Shoal's chunks, Shoal's key-value tables or Redis, one system per run,
//! with closed-loop client threads doing one operation at a time.
//!
//! * Facebook-B: items of 32 bytes, 95% get, 5% put.
//! * Facebook-F: items of 64 bytes, 100% get.
//! * YCSB-A: items of 1,000 bytes (YCSB's 10 fields of 100 bytes, written
//!   whole: chunks have no fields), 50% get, 50% put.
//!
//! A run loads `--items` items (in batches: CHUNK_CREATE of 1,024, multi
//! writes, pipelined SETs), then runs the mix for `--operations` or
//! `--duration`, whichever comes first. Item `i` is picked by YCSB's
//! scrambled Zipfian (0.99) or uniformly (`--key-dist`). Every operation
//! of the mix is a single request and reply: `get_chunk`/`put_chunk` and
//! `read`/`write` of the blocking client (8-byte keys), GET/SET of the
//! RESP client of `shoal bench ycsb` (8-byte keys). Afterwards the
//! tables are dropped (Redis: FLUSHALL).
//!
//! **Chunks over several masters.** Every chunk table spans every server
//! (chunk id ranges, `docs/chunks.md`, "In a cluster"): creates go
//! round-robin over the servers. The bench still creates `--chunk-tables`
//! chunk tables and puts item `i` in table `i % tables` (its stand-in from
//! before id ranges); the `masters` column counts the tables' tablets,
//! which no longer say where chunks are.

use super::peers::key8;
use super::ycsb::wire::{Reply, Req, Resp, Wire};
use super::ycsb::workload::{Chooser, KeyDist, Records};
use super::{emit_json, Table};
use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use shoal_client::{blocking, key_hash, ChunkId, ClientConfig, CoordinatorMap, RejectRules, TableId, WriteItem};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The store a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    /// Shoal's chunks (--coordinator), spread over --chunk-tables tables.
    Chunks,
    /// Shoal's key-value tables with 8-byte keys (--coordinator).
    Kv,
    /// Redis with 8-byte keys (--redis).
    Redis,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Chunks => "chunks",
            System::Kv => "kv",
            System::Redis => "redis",
        }
    }
}

/// DXRAM's workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Workload {
    /// Facebook-B: 32-byte items, 95% get, 5% put.
    #[value(name = "fb-b")]
    FbB,
    /// Facebook-F: 64-byte items, 100% get.
    #[value(name = "fb-f")]
    FbF,
    /// YCSB-A: 1,000-byte items (10 x 100 B), 50% get, 50% put.
    #[value(name = "ycsb-a")]
    YcsbA,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::FbB => "fb-b",
            Workload::FbF => "fb-f",
            Workload::YcsbA => "ycsb-a",
        }
    }

    fn item_bytes(self) -> usize {
        match self {
            Workload::FbB => 32,
            Workload::FbF => 64,
            Workload::YcsbA => 1000,
        }
    }

    /// Share of gets; the rest are puts.
    fn get_share(self) -> f64 {
        match self {
            Workload::FbB => 0.95,
            Workload::FbF => 1.0,
            Workload::YcsbA => 0.5,
        }
    }

    fn default_items(self) -> u64 {
        match self {
            Workload::FbB | Workload::FbF => 1_000_000,
            Workload::YcsbA => 200_000,
        }
    }
}

/// Options of `shoal bench dxram`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The store to measure.
    #[arg(long, value_enum)]
    pub system: System,
    /// Workloads to run, in order, each on freshly loaded items.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fb-b,fb-f,ycsb-a")]
    pub workload: Vec<Workload>,
    /// The Shoal cluster's coordinator (chunks, kv).
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// The Redis server (redis). FLUSHALL before the load and after the run.
    #[arg(long, value_name = "HOST:PORT")]
    pub redis: Option<String>,
    /// Items loaded per workload (default: 1,000,000 for fb-b and fb-f,
    /// 200,000 for ycsb-a).
    #[arg(long)]
    pub items: Option<u64>,
    /// Most operations per workload (all threads together).
    #[arg(long, default_value_t = 1_000_000)]
    pub operations: u64,
    /// Most seconds per workload's mix.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Client threads, each with its own connections, one operation at a
    /// time.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Which items the mix touches: uniform, or zipfian, YCSB's scrambled
    /// Zipfian (0.99); latest is refused (the mix inserts nothing).
    #[arg(long, value_enum, default_value = "zipfian")]
    pub key_dist: KeyDist,
    /// Chunk tables the chunks are spread over (item i in table i % N);
    /// each spans every server.
    #[arg(long, default_value_t = 4)]
    pub chunk_tables: usize,
    /// Seed of the operation and item choices.
    #[arg(long, default_value_t = 0xd7a)]
    pub seed: u64,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One line of the report: gets, puts or all operations of one workload.
#[derive(Clone, Debug, Serialize)]
pub struct DxramResult {
    pub bench: &'static str,
    pub workload: &'static str,
    pub system: &'static str,
    pub items: u64,
    pub item_bytes: usize,
    pub key_dist: &'static str,
    pub threads: usize,
    /// "get", "put" or "all".
    pub op: &'static str,
    pub ops: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub errors: u64,
    pub load_secs: f64,
    /// Shoal: distinct masters of the tables' tablets (chunks: of the
    /// chunk tables); Redis: 1.
    pub masters: usize,
    /// Tables the items were spread over (chunks), else 1.
    pub tables: usize,
    pub error: Option<String>,
}

/// Where item `i` lives.
enum Layout {
    /// Chunk tables, and each item's (table, id).
    Chunks(Vec<(TableId, ChunkId)>),
    Kv(TableId),
    Redis(SocketAddr),
}

/// A client thread's connection.
enum Conn {
    Shoal(Box<blocking::Client>),
    Redis(Resp),
}

fn client_config(threads: usize) -> ClientConfig {
    // Spinning for replies costs throughput when threads outnumber cores
    // (as `shoal bench ycsb` decides).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spin = if threads * 2 <= cores { ClientConfig::default().spin } else { Duration::ZERO };
    ClientConfig { timeout: Some(super::ycsb::wire::REPLY_TIMEOUT), spin, ..ClientConfig::default() }
}

fn resolve(what: &str, addr: &Option<String>) -> Result<SocketAddr, String> {
    let addr = addr.as_ref().ok_or_else(|| format!("this system needs {what}"))?;
    super::peers::resolve(addr)
}

/// The distinct servers the tablet map sends `tables`' requests to (their
/// chunk route for chunk tables, every tablet for key-value tables), once
/// the map has them all (waits up to 10 s).
fn masters(coordinator: SocketAddr, tables: &[TableId], chunks: bool) -> Result<usize, String> {
    let source = CoordinatorMap::new(coordinator);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let map = source.fetch().map_err(|e| format!("tablet map from {coordinator}: {e}"))?;
        let found: Option<BTreeSet<SocketAddr>> = if chunks {
            tables.iter().map(|&t| map.locate(t, key_hash(t, b""))).collect()
        } else {
            let s: BTreeSet<SocketAddr> = map
                .tablets()
                .iter()
                .filter(|t| t.table.is_some_and(|id| tables.contains(&id)))
                .map(|t| t.server)
                .collect();
            (!s.is_empty()).then_some(s)
        };
        if let Some(s) = found {
            return Ok(s.len());
        }
        if Instant::now() >= deadline {
            return Err("the coordinator's map does not place every table after 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Creates the tables (or flushes Redis) and loads `n` items of `size`
/// bytes. Returns the layout and the masters the tables landed on.
fn load(args: &Args, w: Workload, n: u64) -> Result<(Layout, usize, usize), String> {
    let size = w.item_bytes();
    let payload = vec![b'd'; size];
    let tag = format!("dxram-{}-{}", w.name(), std::process::id());
    match args.system {
        System::Chunks => {
            let coord = resolve("--coordinator", &args.coordinator)?;
            let mut c = blocking::Client::connect_cluster(coord, client_config(1)).map_err(|e| e.to_string())?;
            let mut tables = Vec::new();
            for t in 0..args.chunk_tables {
                let name = format!("{tag}-chunks-{t}");
                tables.push(c.create_chunk_table(&name).map_err(|e| format!("create chunk table {name}: {e}"))?);
            }
            let masters = masters(coord, &tables, true)?;
            let mut items = vec![(TableId(0), ChunkId(0)); n as usize];
            for (t, &table) in tables.iter().enumerate() {
                let mine: Vec<u64> = (t as u64..n).step_by(tables.len()).collect();
                for group in mine.chunks(8192) {
                    let payloads = vec![payload.as_slice(); group.len()];
                    let ids = c.create_chunks(table, &payloads).map_err(|e| format!("create chunks: {e}"))?;
                    for (&i, id) in group.iter().zip(ids) {
                        items[i as usize] = (table, id);
                    }
                }
            }
            Ok((Layout::Chunks(items), masters, tables.len()))
        }
        System::Kv => {
            let coord = resolve("--coordinator", &args.coordinator)?;
            let mut c = blocking::Client::connect_cluster(coord, client_config(1)).map_err(|e| e.to_string())?;
            let name = format!("{tag}-kv");
            let table = c.create_table(&name).map_err(|e| format!("create table {name}: {e}"))?;
            let masters = masters(coord, &[table], false)?;
            // A client with a map that has the table's tablets (multi_write
            // does not fetch the map for a table it does not know).
            let mut c = blocking::Client::connect_cluster(coord, client_config(1)).map_err(|e| e.to_string())?;
            let mut i = 0;
            while i < n {
                let end = (i + 256).min(n);
                let keys: Vec<[u8; 8]> = (i..end).map(key8).collect();
                let items: Vec<WriteItem> = keys
                    .iter()
                    .map(|k| WriteItem { table, key: k, value: &payload, rules: RejectRules::default() })
                    .collect();
                let out = c.multi_write(&items).map_err(|e| format!("multi_write: {e}"))?;
                if let Some(e) = out.into_iter().find_map(|r| r.err()) {
                    return Err(format!("multi_write at item {i}: {e}"));
                }
                i = end;
            }
            Ok((Layout::Kv(table), masters, 1))
        }
        System::Redis => {
            let addr = resolve("--redis", &args.redis)?;
            let mut peer = super::peers::Peer::connect(super::peers::PeerKind::Redis, addr)?;
            peer.flush()?;
            super::peers::load(super::peers::PeerKind::Redis, addr, n, size)?;
            Ok((Layout::Redis(addr), 1, 1))
        }
    }
}

/// Drops what `load` made.
fn unload(args: &Args, layout: &Layout, w: Workload) -> Result<(), String> {
    let tag = format!("dxram-{}-{}", w.name(), std::process::id());
    match layout {
        Layout::Chunks(_) | Layout::Kv(_) => {
            let coord = resolve("--coordinator", &args.coordinator)?;
            let mut c = blocking::Client::connect_cluster(coord, client_config(1)).map_err(|e| e.to_string())?;
            let names: Vec<String> = match layout {
                Layout::Chunks(_) => (0..args.chunk_tables).map(|t| format!("{tag}-chunks-{t}")).collect(),
                _ => vec![format!("{tag}-kv")],
            };
            for name in names {
                c.drop_table(&name).map_err(|e| format!("drop table {name}: {e}"))?;
            }
        }
        Layout::Redis(addr) => super::peers::Peer::connect(super::peers::PeerKind::Redis, *addr)?.flush()?,
    }
    Ok(())
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("histogram bounds")
}

/// What one thread measured: gets and puts.
struct Tally {
    hist: [Histogram<u64>; 2],
    errors: u64,
    first_error: Option<String>,
}

/// One operation on item `i`: a get, or a put of `value`.
fn one_op(conn: &mut Conn, layout: &Layout, i: u64, value: Option<&[u8]>) -> Result<(), String> {
    match (conn, layout) {
        (Conn::Shoal(c), Layout::Chunks(items)) => {
            let (table, id) = items[i as usize];
            match value {
                None => c.get_chunk(table, id).map(drop).map_err(|e| format!("get_chunk {id:?}: {e}")),
                Some(v) => c.put_chunk(table, id, v).map(drop).map_err(|e| format!("put_chunk {id:?}: {e}")),
            }
        }
        (Conn::Shoal(c), Layout::Kv(table)) => match value {
            None => c.read(*table, &key8(i)).map(drop).map_err(|e| format!("read of item {i}: {e}")),
            Some(v) => c.write(*table, &key8(i), v).map(drop).map_err(|e| format!("write of item {i}: {e}")),
        },
        (Conn::Redis(r), Layout::Redis(_)) => {
            let key = key8(i);
            r.push(match value {
                None => Req::Get(&key),
                Some(v) => Req::Set(&key, v, 0),
            })?;
            let mut reply = Reply::Stored;
            r.exchange(&mut |_, got| reply = got)?;
            match reply {
                Reply::Found | Reply::Stored => Ok(()),
                Reply::NotFound => Err(format!("GET of item {i}: not found")),
                Reply::Error(e) => Err(format!("item {i}: {e}")),
            }
        }
        _ => Err("connection and layout of different systems".into()),
    }
}

/// What a workload's mix shares between its threads.
struct Mix<'a> {
    args: &'a Args,
    workload: Workload,
    layout: &'a Layout,
    chooser: Chooser,
    records: Records,
    /// Operations started, against `--operations`.
    started: AtomicU64,
    deadline: Instant,
}

/// Runs one thread's operations until the shared limit or the deadline.
fn drive(mix: &Mix, seed: u64) -> Result<Tally, String> {
    let (args, w, layout) = (mix.args, mix.workload, mix.layout);
    let mut conn = match layout {
        Layout::Redis(addr) => Conn::Redis(Resp::with_wait(*addr, None)?),
        _ => {
            let coord = resolve("--coordinator", &args.coordinator)?;
            Conn::Shoal(Box::new(
                blocking::Client::connect_cluster(coord, client_config(args.threads)).map_err(|e| e.to_string())?,
            ))
        }
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut value = vec![b'p'; w.item_bytes()];
    let mut tally = Tally { hist: [histogram(), histogram()], errors: 0, first_error: None };
    let mut stamp = 0u64;
    while Instant::now() < mix.deadline && mix.started.fetch_add(1, Ordering::Relaxed) < args.operations {
        let i = mix.chooser.next(&mut rng, &mix.records);
        let get = rng.gen::<f64>() < w.get_share();
        if !get {
            stamp += 1;
            let n = value.len().min(8);
            value[..n].copy_from_slice(&stamp.to_le_bytes()[..n]);
        }
        let t = Instant::now();
        let r = one_op(&mut conn, layout, i, (!get).then_some(value.as_slice()));
        let ns = t.elapsed().as_nanos() as u64;
        match r {
            Ok(()) => tally.hist[usize::from(!get)].saturating_record(ns.max(1)),
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert(e);
            }
        }
    }
    Ok(tally)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Loads, runs and unloads one workload; its report lines.
fn run_workload(args: &Args, w: Workload) -> Vec<DxramResult> {
    let n = args.items.unwrap_or(w.default_items());
    let line = |op, h: Option<&Histogram<u64>>, secs: f64| {
        let count = h.map_or(0, |h| h.len());
        let q = |p: f64| h.filter(|h| !h.is_empty()).map_or(0.0, |h| us(h.value_at_quantile(p)));
        DxramResult {
            bench: "dxram",
            workload: w.name(),
            system: args.system.name(),
            items: n,
            item_bytes: w.item_bytes(),
            key_dist: args.key_dist.name(),
            threads: args.threads,
            op,
            ops: count,
            secs,
            ops_per_sec: if secs > 0.0 { count as f64 / secs } else { 0.0 },
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: h.filter(|h| !h.is_empty()).map_or(0.0, |h| us(h.max())),
            errors: 0,
            load_secs: 0.0,
            masters: 0,
            tables: 0,
            error: None,
        }
    };
    eprintln!("dxram {}: loading {n} items of {} B into {} ...", w.name(), w.item_bytes(), args.system.name());
    let load_started = Instant::now();
    let (layout, masters, tables) = match load(args, w, n) {
        Ok(l) => l,
        Err(e) => {
            let mut r = line("all", None, 0.0);
            r.error = Some(format!("load: {e}"));
            return vec![r];
        }
    };
    let load_secs = load_started.elapsed().as_secs_f64();
    eprintln!(
        "dxram {}: loaded in {load_secs:.1} s ({tables} table(s) on {masters} master(s)); {} threads, {} keys ...",
        w.name(),
        args.threads,
        args.key_dist.name()
    );
    let started = Instant::now();
    let mix = Mix {
        args,
        workload: w,
        layout: &layout,
        chooser: Chooser::new(args.key_dist, n),
        records: Records::new(n),
        started: AtomicU64::new(0),
        deadline: started + Duration::from_secs_f64(args.duration),
    };
    let results: Vec<Result<Tally, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let mix = &mix;
                let seed = args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (t as u64 + 1);
                s.spawn(move || drive(mix, seed))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client thread")).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let (mut gets, mut puts, mut all) = (histogram(), histogram(), histogram());
    let (mut errors, mut first_error) = (0, None);
    for r in results {
        match r {
            Ok(t) => {
                gets.add(&t.hist[0]).expect("same bounds");
                puts.add(&t.hist[1]).expect("same bounds");
                errors += t.errors;
                first_error = first_error.or(t.first_error);
            }
            Err(e) => {
                errors += 1;
                first_error = first_error.or(Some(e));
            }
        }
    }
    all.add(&gets).expect("same bounds");
    all.add(&puts).expect("same bounds");
    if let Err(e) = unload(args, &layout, w) {
        first_error = first_error.or(Some(format!("unload: {e}")));
    }
    let mut lines = Vec::new();
    for (op, h) in [("get", &gets), ("put", &puts)] {
        if !h.is_empty() {
            lines.push(line(op, Some(h), secs));
        }
    }
    let mut total = line("all", Some(&all), secs);
    total.errors = errors;
    total.error = first_error;
    lines.push(total);
    for l in &mut lines {
        l.load_secs = load_secs;
        l.masters = masters;
        l.tables = tables;
    }
    lines
}

/// Runs each workload; prints the report. Returns whether every run
/// completed without errors.
pub fn run(args: &Args) -> Result<bool, String> {
    if args.threads == 0 || args.operations == 0 || args.chunk_tables == 0 || args.items == Some(0) {
        return Err("--threads, --operations, --chunk-tables and --items must be at least 1".into());
    }
    if !super::positive(args.duration) {
        return Err("--duration must be a positive number of seconds".into());
    }
    if args.key_dist == KeyDist::Latest {
        return Err("--key-dist is zipfian or uniform".into());
    }
    let mut lines = Vec::new();
    for &w in &args.workload {
        let l = run_workload(args, w);
        if args.json {
            l.iter().for_each(emit_json);
        }
        lines.extend(l);
    }
    if !args.json {
        print_table(&lines);
    }
    Ok(lines.iter().all(|l| l.error.is_none() && l.errors == 0))
}

fn print_table(lines: &[DxramResult]) {
    let mut t = Table::new(
        &[
            "workload", "system", "op", "items", "item B", "keys", "threads", "masters", "ops", "secs", "kops/s",
            "p50 us", "p99 us", "p99.9 us", "errors",
        ],
        3,
    );
    for l in lines {
        t.row(vec![
            l.workload.to_string(),
            l.system.to_string(),
            l.op.to_string(),
            l.items.to_string(),
            l.item_bytes.to_string(),
            l.key_dist.to_string(),
            l.threads.to_string(),
            l.masters.to_string(),
            l.ops.to_string(),
            format!("{:.2}", l.secs),
            format!("{:.1}", l.ops_per_sec / 1000.0),
            format!("{:.1}", l.p50_us),
            format!("{:.1}", l.p99_us),
            format!("{:.1}", l.p999_us),
            l.errors.to_string(),
        ]);
    }
    print!("{}", t.render());
    for l in lines {
        if let Some(e) = &l.error {
            println!("{} {} {}: {e}", l.workload, l.system, l.op);
        }
    }
}
