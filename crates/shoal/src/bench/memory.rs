//! `shoal bench memory`: memory efficiency under changing workloads (Rumble
//! thesis Table 3.1, W1..W8), Shoal's store against a `HashMap` over the
//! system allocator and over jemalloc.
//!
//! Every (workload, engine) pair runs in a fresh child process: Shoal's in
//! this executable's hidden `memory-worker` subcommand, the baselines in the
//! `shoal-baseline-sys` and `shoal-baseline-jemalloc` executables next to
//! it. This process generates the ops (one deterministic generator per run,
//! seeded the same for every engine) and streams them to the child's stdin;
//! the child samples its own RSS and prints a [`WorkerReport`].
//!
//! With `--over-resp` the engines are servers instead, reached over the
//! network (see [`net`]): Shoal's through its Redis port, at each
//! `--server-memory-factors` multiple of the live data, redis-server and
//! memcached, each a fresh process per workload.

mod net;

use super::{emit_json, fit_memory, positive, store_config, Table, MIB};
use clap::{Args as ClapArgs, ValueEnum};
use serde::{Deserialize, Serialize};
use shoal_bench_baseline::{
    run_worker, worker::print_report, write_ops, Generator, PhaseSample, Target, WorkerReport, WorkloadParams,
    WorkloadSpec, KEY_BYTES, WORKLOADS,
};
use shoal_engine::{RejectRules, Store, TableId};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SEGMENT_BYTES: usize = 8 << 20;
const SEGLET_BYTES: usize = 64 << 10;

/// Options of `shoal bench memory`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Size factor: live value bytes are capped at 256 MiB x scale and
    /// 1.25 GiB x scale of values are written (half in phase 1, half in
    /// phase 3; all in phase 1 for W1).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Workloads to run, comma-separated (W1..W8).
    #[arg(long, value_delimiter = ',', default_value = "W1,W2,W3,W4,W5,W6,W7,W8")]
    pub workloads: Vec<String>,
    /// Engines to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "shoal,sys,jemalloc")]
    pub engines: Vec<Engine>,
    /// Over the network: the engines become shoal-resp (a `shoal server`
    /// through its Redis port, once per --server-memory-factors), redis
    /// and memcached, each a fresh process per workload whose RSS is read
    /// from /proc (replaces --engines).
    #[arg(long)]
    pub over_resp: bool,
    /// shoal-resp's --memory, as multiples of the live-value cap
    /// (comma-separated; one run per factor).
    #[arg(long, value_delimiter = ',', default_value = "4,1.5")]
    pub server_memory_factors: Vec<f64>,
    /// The redis-server program for the redis engine.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: String,
    /// The memcached program for the memcached engine (given 4x the
    /// live-value cap for items, so that it never evicts).
    #[arg(long, default_value = "memcached")]
    pub memcached: String,
    /// Instead of W1-W8, idle growth (with --over-resp or server
    /// --engines): this many cycles of a SET and a DEL of one of
    /// --idle-keys keys, beside as many keys that stay; RSS at the end
    /// against RSS before the cycles (target: at most 1.2x for Shoal).
    #[arg(long, default_value_t = 0)]
    pub idle_cycles: u64,
    /// Keys of the idle-growth run (each 50 bytes of value).
    #[arg(long, default_value_t = 100)]
    pub idle_keys: u64,
    /// Shoal's log memory as a multiple of the live-value cap (rounded up to
    /// whole 8 MiB segments, and raised to the smallest valid store).
    #[arg(long, default_value_t = 1.30)]
    pub shoal_memory_factor: f64,
    /// Seed of the op generator (every engine gets the same ops).
    #[arg(long, default_value_t = 0x5ea1)]
    pub seed: u64,
    /// Workers sample their RSS every this many ops (and at phase ends).
    #[arg(long, default_value_t = 1000)]
    pub sample_every: u64,
    /// A worker still running after this many seconds is killed and its run reported as failed.
    #[arg(long, default_value_t = 900)]
    pub worker_timeout: u64,
}

/// The engines compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Shoal's log-structured store.
    Shoal,
    /// HashMap<Vec<u8>, Vec<u8>> over the system allocator (glibc malloc).
    Sys,
    /// HashMap<Vec<u8>, Vec<u8>> over jemalloc.
    Jemalloc,
    /// `shoal server`, driven through its Redis port.
    ShoalResp,
    /// redis-server, driven over RESP.
    Redis,
    /// memcached, driven over its text protocol.
    Memcached,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Shoal => "shoal",
            Engine::Sys => "hashmap-sys",
            Engine::Jemalloc => "hashmap-jemalloc",
            Engine::ShoalResp => "shoal-resp",
            Engine::Redis => "redis",
            Engine::Memcached => "memcached",
        }
    }

    /// A server reached over the network rather than a worker process.
    fn over_network(self) -> bool {
        matches!(self, Engine::ShoalResp | Engine::Redis | Engine::Memcached)
    }
}

/// Options of the hidden `memory-worker` subcommand: one run of Shoal's
/// store on the op stream read from stdin.
#[derive(ClapArgs, Debug)]
pub struct WorkerArgs {
    /// Workload name for the report.
    #[arg(long)]
    pub workload: String,
    #[arg(long)]
    pub memory_bytes: usize,
    #[arg(long, default_value_t = SEGMENT_BYTES)]
    pub segment_bytes: usize,
    #[arg(long, default_value_t = SEGLET_BYTES)]
    pub seglet_bytes: usize,
    #[arg(long, default_value_t = 1000)]
    pub sample_every: u64,
}

/// Shoal's statistics at the end of a run (and the peak of seglets in use).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShoalMemoryStats {
    pub memory_bytes: u64,
    pub seglet_bytes: u64,
    pub seglets_in_use: u64,
    pub peak_seglets_in_use: u64,
    pub hash_table_bytes: u64,
    pub objects: u64,
    /// Bytes of live object entries (headers, keys, values).
    pub live_bytes: u64,
    pub log_utilisation: f64,
    pub compactions: u64,
    pub combined_passes: u64,
    pub write_cost: f64,
    pub out_of_memory: u64,
    pub cleaning_ms: u64,
}

struct ShoalTarget {
    store: Store,
    table: TableId,
    peak_seglets: u64,
}

impl Target for ShoalTarget {
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.store.write(self.table, key, value, RejectRules::default()).map(|_| ()).map_err(|e| e.to_string())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), String> {
        match self.store.remove(self.table, key, RejectRules::default()) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("deleted key does not exist".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn sample(&mut self) {
        self.peak_seglets = self.peak_seglets.max(self.store.stats().seglets_in_use);
    }

    fn stats(&self) -> serde_json::Value {
        let s = self.store.stats();
        let out = ShoalMemoryStats {
            memory_bytes: s.memory_bytes,
            seglet_bytes: s.seglet_bytes,
            seglets_in_use: s.seglets_in_use,
            peak_seglets_in_use: self.peak_seglets.max(s.seglets_in_use),
            hash_table_bytes: s.hash_table_bytes,
            objects: s.objects,
            live_bytes: s.live_bytes,
            log_utilisation: s.log_utilisation,
            compactions: s.compactions,
            combined_passes: s.combined_passes,
            write_cost: s.write_cost,
            out_of_memory: s.out_of_memory,
            cleaning_ms: s.cleaning_ms,
        };
        serde_json::to_value(out).expect("stats serialise")
    }
}

/// The hidden worker: applies stdin's op stream to a new store, prints the
/// report. Returns the exit code (see [`print_report`]).
pub fn worker(args: &WorkerArgs) -> i32 {
    let config = store_config(args.memory_bytes, args.segment_bytes, args.seglet_bytes, None);
    let make = || {
        let store = Store::new(config).map_err(|e| e.to_string())?;
        let table = TableId(1);
        store.create_table(table);
        Ok(ShoalTarget { store, table, peak_seglets: 0 })
    };
    let report = run_worker(Engine::Shoal.name(), &args.workload, make, std::io::stdin().lock(), args.sample_every);
    print_report(&report)
}

/// One (workload, engine) result.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryResult {
    pub bench: &'static str,
    pub workload: String,
    /// "before / deleted / after" distributions.
    pub description: String,
    pub engine: &'static str,
    /// shoal-resp: its --memory as a multiple of the live-value cap.
    pub memory_factor: Option<f64>,
    /// `None` when the run completed.
    pub error: Option<String>,
    pub scale: f64,
    pub cap_bytes: u64,
    pub ops: u64,
    pub elapsed_secs: f64,
    pub baseline_rss_bytes: u64,
    pub peak_rss_bytes: u64,
    pub final_rss_bytes: u64,
    pub max_live_value_bytes: u64,
    pub live_value_bytes_at_peak: u64,
    pub final_live_value_bytes: u64,
    /// Headline: peak RSS / max live value bytes.
    pub peak_ratio: f64,
    /// (peak RSS - baseline RSS) / max live value bytes.
    pub peak_ratio_net: f64,
    /// Final RSS / final live value bytes.
    pub final_ratio: f64,
    /// (final RSS - baseline RSS) / final live value bytes.
    pub final_ratio_net: f64,
    /// Servers: RSS again a moment ([`net::SETTLE`]) after the last op.
    pub settled_rss_bytes: Option<u64>,
    /// Shoal's target for `peak_ratio` (none for the baselines).
    pub target_peak_ratio: Option<f64>,
    pub meets_target: Option<bool>,
    pub shoal: Option<ShoalMemoryStats>,
    pub phases: Vec<PhaseSample>,
}

/// Shoal's target peak ratio: 1.45 on W1-W5, 1.15 on W6-W8.
fn target_for(workload: &str) -> f64 {
    match workload {
        "W6" | "W7" | "W8" => 1.15,
        _ => 1.45,
    }
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn sibling(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating the shoal executable: {e}"))?;
    let path = exe.with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found next to {} (build it: cargo build -p shoal-bench-baseline --bins, same profile)",
            path.display(),
            exe.display()
        ))
    }
}

/// Runs one worker process on `spec`'s op stream; kills it after `timeout`.
fn run_child(
    mut cmd: Command,
    spec: &WorkloadSpec,
    params: WorkloadParams,
    timeout: Duration,
) -> Result<WorkerReport, String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawning {cmd:?}: {e}"))?;
    let stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let spec = *spec;
    // A worker that stops early closes its stdin: the broken pipe is expected then.
    let feeder = std::thread::spawn(move || write_ops(Generator::new(&spec, params), stdin));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for the worker: {e}")),
        }
    };
    let fed = feeder.join().expect("feeder thread");
    let out = reader.join().expect("reader thread").map_err(|e| format!("reading the worker's output: {e}"))?;
    let Some(status) = status else {
        return Err(format!("worker killed after {}s (timeout)", timeout.as_secs()));
    };
    let line = out.lines().rev().find(|l| !l.trim().is_empty());
    let report: Option<WorkerReport> = line.and_then(|l| serde_json::from_str(l).ok());
    match (report, fed) {
        (Some(r), _) => Ok(r),
        (None, Err(e)) => Err(format!("worker exited with {status} after the op stream failed: {e}")),
        (None, Ok(_)) => Err(format!("worker exited with {status} without a report")),
    }
}

/// The result of one (workload, engine) pair; a failed run has `error` set.
/// `factor`: shoal-resp's memory as a multiple of the cap.
fn run_pair(
    args: &Args,
    spec: &WorkloadSpec,
    engine: Engine,
    factor: Option<f64>,
    params: WorkloadParams,
) -> MemoryResult {
    let mut result = MemoryResult {
        bench: "memory",
        workload: spec.name.to_string(),
        description: spec.describe(),
        engine: engine.name(),
        memory_factor: factor,
        error: None,
        scale: args.scale,
        cap_bytes: params.cap_bytes,
        ops: 0,
        elapsed_secs: 0.0,
        baseline_rss_bytes: 0,
        peak_rss_bytes: 0,
        final_rss_bytes: 0,
        max_live_value_bytes: 0,
        live_value_bytes_at_peak: 0,
        final_live_value_bytes: 0,
        peak_ratio: 0.0,
        peak_ratio_net: 0.0,
        final_ratio: 0.0,
        final_ratio_net: 0.0,
        settled_rss_bytes: None,
        target_peak_ratio: None,
        meets_target: None,
        shoal: None,
        phases: Vec::new(),
    };
    let mut settled = None;
    let report = if engine.over_network() {
        run_server(args, spec, engine, factor, params).map(|(r, s)| {
            settled = Some(s);
            r
        })
    } else {
        run_worker_process(args, spec, engine, params)
    };
    let r = match report {
        Ok(r) => r,
        Err(e) => {
            result.error = Some(e);
            return result;
        }
    };
    result.error = r.error.clone();
    result.ops = r.ops;
    result.elapsed_secs = r.elapsed_secs;
    result.baseline_rss_bytes = r.baseline_rss_bytes;
    result.peak_rss_bytes = r.peak_rss_bytes;
    result.final_rss_bytes = r.final_rss_bytes;
    result.settled_rss_bytes = settled;
    result.max_live_value_bytes = r.max_live_value_bytes;
    result.live_value_bytes_at_peak = r.live_value_bytes_at_peak;
    result.final_live_value_bytes = r.final_live_value_bytes;
    result.peak_ratio = ratio(r.peak_rss_bytes, r.max_live_value_bytes);
    result.peak_ratio_net = ratio(r.peak_rss_bytes.saturating_sub(r.baseline_rss_bytes), r.max_live_value_bytes);
    result.final_ratio = ratio(r.final_rss_bytes, r.final_live_value_bytes);
    result.final_ratio_net = ratio(r.final_rss_bytes.saturating_sub(r.baseline_rss_bytes), r.final_live_value_bytes);
    result.phases = r.phases;
    if matches!(engine, Engine::Shoal | Engine::ShoalResp) {
        let target = target_for(spec.name);
        result.target_peak_ratio = Some(target);
        result.meets_target = Some(result.error.is_none() && result.peak_ratio <= target);
    }
    if engine == Engine::Shoal {
        result.shoal = serde_json::from_value(r.engine_stats).ok();
    }
    result
}

/// One run of a server engine: its report, and its RSS [`net::SETTLE`] after the last op.
fn run_server(
    args: &Args,
    spec: &WorkloadSpec,
    engine: Engine,
    factor: Option<f64>,
    params: WorkloadParams,
) -> Result<(WorkerReport, u64), String> {
    let cap = params.cap_bytes as f64;
    let server = net::start(&match engine {
        Engine::ShoalResp => net::Spec::Shoal { memory_bytes: (cap * factor.unwrap_or(4.0)).ceil() as u64 },
        Engine::Redis => net::Spec::Redis { bin: &args.redis_server },
        _ => net::Spec::Memcached { bin: &args.memcached, memory_mib: (cap * 4.0 / MIB).ceil() as u64 + 64 },
    })?;
    let report = net::drive(&server, engine == Engine::Memcached, engine.name(), spec, params, args.sample_every);
    std::thread::sleep(net::SETTLE);
    let settled = shoal_bench_baseline::rss::rss_of(server.pid);
    Ok((report, settled))
}

/// One run of an engine in a worker process.
fn run_worker_process(
    args: &Args,
    spec: &WorkloadSpec,
    engine: Engine,
    params: WorkloadParams,
) -> Result<WorkerReport, String> {
    let cmd = match engine {
        Engine::Shoal => {
            let want = (params.cap_bytes as f64 * args.shoal_memory_factor).ceil() as u64;
            let memory = fit_memory(want, SEGMENT_BYTES, SEGLET_BYTES, None)?;
            let exe = std::env::current_exe().map_err(|e| format!("locating the shoal executable: {e}"))?;
            let mut c = Command::new(exe);
            c.arg("memory-worker")
                .args(["--workload", spec.name])
                .args(["--memory-bytes", &memory.to_string()])
                .args(["--sample-every", &args.sample_every.to_string()]);
            c
        }
        _ => {
            let bin = if engine == Engine::Sys { "shoal-baseline-sys" } else { "shoal-baseline-jemalloc" };
            let mut c = Command::new(sibling(bin)?);
            c.args(["--workload", spec.name]).args(["--sample-every", &args.sample_every.to_string()]);
            c
        }
    };
    run_child(cmd, spec, params, Duration::from_secs(args.worker_timeout))
}

/// "shoal-resp x1.5" for a run with a memory factor, else the engine's name.
fn engine_label(name: &str, factor: Option<f64>) -> String {
    match factor {
        Some(f) => format!("{name} x{f}"),
        None => name.to_string(),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / MIB)
}

fn print_table(results: &[MemoryResult]) {
    let mut t = Table::new(
        &[
            "wl",
            "engine",
            "peak MiB",
            "live MiB",
            "peak/live",
            "net",
            "final/live",
            "net",
            "settled/live",
            "target",
            "ok",
            "seglets MiB",
            "peak seglets MiB",
            "log util",
            "compact",
            "combined",
            "w-cost",
            "secs",
            "error",
        ],
        2,
    );
    for r in results {
        let (seg, peak_seg, util, comp, comb, cost) = match &r.shoal {
            Some(s) => (
                mib(s.seglets_in_use * s.seglet_bytes),
                mib(s.peak_seglets_in_use * s.seglet_bytes),
                format!("{:.3}", s.log_utilisation),
                s.compactions.to_string(),
                s.combined_passes.to_string(),
                format!("{:.2}", s.write_cost),
            ),
            None => Default::default(),
        };
        t.row(vec![
            r.workload.clone(),
            engine_label(r.engine, r.memory_factor),
            mib(r.peak_rss_bytes),
            mib(r.max_live_value_bytes),
            format!("{:.3}", r.peak_ratio),
            format!("{:.3}", r.peak_ratio_net),
            format!("{:.3}", r.final_ratio),
            format!("{:.3}", r.final_ratio_net),
            r.settled_rss_bytes.map(|b| format!("{:.3}", ratio(b, r.final_live_value_bytes))).unwrap_or_default(),
            r.target_peak_ratio.map(|t| format!("<={t:.2}")).unwrap_or_default(),
            r.meets_target.map(|m| if m { "yes" } else { "NO" }.to_string()).unwrap_or_default(),
            seg,
            peak_seg,
            util,
            comp,
            comb,
            cost,
            format!("{:.1}", r.elapsed_secs),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!(
        "peak/live = peak RSS / max live value bytes; final/live = final RSS / final live value bytes; \
         net = the same with the worker's RSS before creating the engine subtracted (servers: their RSS \
         before the client connected); settled/live = a server's RSS {}s after the last op / final live value \
         bytes. Keys ({KEY_BYTES} B each) are not counted as live data.",
        net::SETTLE.as_secs()
    );
}

/// One engine's idle-growth result.
#[derive(Clone, Debug, Serialize)]
pub struct IdleResult {
    pub bench: &'static str,
    pub engine: &'static str,
    pub memory_factor: Option<f64>,
    pub error: Option<String>,
    pub keys: u64,
    #[serde(flatten)]
    pub churn: net::Churn,
    /// End RSS / start RSS.
    pub growth: f64,
    /// Settled RSS / start RSS.
    pub settled_growth: f64,
    /// Shoal's: 1.2.
    pub target_growth: Option<f64>,
    pub meets_target: Option<bool>,
}

/// Idle-growth target for Shoal (issue 16).
const IDLE_TARGET: f64 = 1.2;

fn run_idle(args: &Args, runs: &[(Engine, Option<f64>)], params: WorkloadParams) -> Result<bool, String> {
    let mut results = Vec::new();
    for &(engine, factor) in runs {
        if !engine.over_network() {
            return Err(format!("--idle-cycles runs servers only (not {})", engine.name()));
        }
        let name = engine_label(engine.name(), factor);
        eprintln!("memory: idle growth, {} cycles of {} keys, on {name} ...", args.idle_cycles, args.idle_keys);
        let cap = params.cap_bytes as f64;
        let spec = match engine {
            Engine::ShoalResp => net::Spec::Shoal { memory_bytes: (cap * factor.unwrap_or(4.0)).ceil() as u64 },
            Engine::Redis => net::Spec::Redis { bin: &args.redis_server },
            _ => net::Spec::Memcached { bin: &args.memcached, memory_mib: (cap * 4.0 / MIB).ceil() as u64 + 64 },
        };
        let outcome = net::start(&spec)
            .and_then(|server| net::churn(&server, engine == Engine::Memcached, args.idle_keys, 50, args.idle_cycles));
        let shoal = engine == Engine::ShoalResp;
        let (churn, error) = match outcome {
            Ok(c) => (c, None),
            Err(e) => (net::Churn::default(), Some(e)),
        };
        let growth = ratio(churn.end_rss_bytes, churn.start_rss_bytes);
        let r = IdleResult {
            bench: "memory-idle",
            engine: engine.name(),
            memory_factor: factor,
            meets_target: shoal.then_some(error.is_none() && growth <= IDLE_TARGET),
            error,
            keys: args.idle_keys,
            growth,
            settled_growth: ratio(churn.settled_rss_bytes, churn.start_rss_bytes),
            target_growth: shoal.then_some(IDLE_TARGET),
            churn,
        };
        if args.json {
            emit_json(&r);
        }
        results.push(r);
    }
    if !args.json {
        let mut t = Table::new(
            &[
                "engine",
                "start MiB",
                "peak MiB",
                "end MiB",
                "settled MiB",
                "end/start",
                "settled/start",
                "target",
                "ok",
                "secs",
                "error",
            ],
            1,
        );
        for r in &results {
            let c = &r.churn;
            t.row(vec![
                engine_label(r.engine, r.memory_factor),
                mib(c.start_rss_bytes),
                mib(c.peak_rss_bytes),
                mib(c.end_rss_bytes),
                mib(c.settled_rss_bytes),
                format!("{:.3}", r.growth),
                format!("{:.3}", r.settled_growth),
                r.target_growth.map(|t| format!("<={t:.1}")).unwrap_or_default(),
                r.meets_target.map(|m| if m { "yes" } else { "NO" }.to_string()).unwrap_or_default(),
                format!("{:.1}", c.elapsed_secs),
                r.error.clone().unwrap_or_default(),
            ]);
        }
        print!("{}", t.render());
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}

/// Runs the benchmark; false if a run failed.
pub fn run(args: &Args) -> Result<bool, String> {
    if !positive(args.scale) {
        return Err("--scale must be positive".into());
    }
    if !positive(args.shoal_memory_factor) {
        return Err("--shoal-memory-factor must be positive".into());
    }
    if args.server_memory_factors.is_empty() || !args.server_memory_factors.iter().all(|&f| positive(f)) {
        return Err("--server-memory-factors must be positive numbers".into());
    }
    let mut specs = Vec::new();
    for w in &args.workloads {
        let spec = WorkloadSpec::find(w.trim())
            .ok_or_else(|| format!("unknown workload {w} (known: {})", WORKLOADS.map(|w| w.name).join(",")))?;
        specs.push(spec);
    }
    let params = WorkloadParams::scaled(args.scale, args.seed);
    if args.json || args.idle_cycles > 0 {
        // No header: JSON lines only, or the idle-growth table.
    } else if args.over_resp {
        println!(
            "memory efficiency (Rumble Table 3.1) over the network: cap {:.1} MiB live values, {:.1} MiB written; \
             shoal-resp --memory at {:?} x cap, memcached -m 4 x cap",
            params.cap_bytes as f64 / MIB,
            params.total_write_bytes as f64 / MIB,
            args.server_memory_factors
        );
    } else {
        let want = (params.cap_bytes as f64 * args.shoal_memory_factor).ceil() as u64;
        let memory = fit_memory(want, SEGMENT_BYTES, SEGLET_BYTES, None)?;
        println!(
            "memory efficiency (Rumble Table 3.1): cap {:.1} MiB live values, {:.1} MiB written; shoal memory \
             {:.1} MiB ({:.2} x cap, rounded up to whole segments and to the smallest valid store), 8 MiB segments, 64 KiB seglets",
            params.cap_bytes as f64 / MIB,
            params.total_write_bytes as f64 / MIB,
            memory as f64 / MIB,
            args.shoal_memory_factor
        );
    }
    // (engine, shoal-resp's memory factor), in the order they run.
    let mut runs = Vec::new();
    let engines =
        if args.over_resp { &[Engine::ShoalResp, Engine::Redis, Engine::Memcached][..] } else { &args.engines };
    for &engine in engines {
        if engine == Engine::ShoalResp {
            runs.extend(args.server_memory_factors.iter().map(|&f| (engine, Some(f))));
        } else {
            runs.push((engine, None));
        }
    }
    if args.idle_cycles > 0 {
        if args.idle_keys == 0 {
            return Err("--idle-keys must be at least 1".into());
        }
        return run_idle(args, &runs, params);
    }
    let mut results = Vec::new();
    for spec in specs {
        for &(engine, factor) in &runs {
            let name = engine_label(engine.name(), factor);
            eprintln!("memory: {} ({}) on {name} ...", spec.name, spec.describe());
            let r = run_pair(args, spec, engine, factor, params);
            if let Some(e) = &r.error {
                eprintln!("memory: {} on {name} FAILED: {e}", spec.name);
            }
            if args.json {
                emit_json(&r);
            }
            results.push(r);
        }
    }
    if !args.json {
        print_table(&results);
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}
