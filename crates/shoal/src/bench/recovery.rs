//! `shoal bench recovery`: crash recovery on real processes (issue 5's
//! benchmarks).
//!
//! Each run starts a cluster of its own (a `shoal coordinator` and
//! `--servers` `shoal server` processes on free loopback ports, every
//! server a master and a backup, R = `--replicas`, data under a temporary
//! root), creates a table with one tablet per server, and fills ONE master
//! (the victim: the owner of the table's first tablet) with `--sizes`
//! megabytes of object data (keys and values; 100-byte values by default):
//! keys are picked by their hash so that they fall in the victim's tablet,
//! and written with multi-writes by `--fill-threads` clients. Then it
//! kills the victim with SIGKILL and measures, from the kill:
//!
//! * **detection**: until the coordinator's map says the victim is down
//!   (polled every 5 ms);
//! * per recovery master, from its native STATS (`recovery_<id>_partition_<i>_*`):
//!   replica collection (fencing, listing, reading the log from the
//!   backups), replay, re-replication (until the replayed data is durable
//!   in its own log) and its total (from the moment it saw the recovery);
//! * **total**: until the map has no recovery left and no tablet owned by
//!   the victim, AND a read of one of the victim's keys (by a new client)
//!   succeeds.
//!
//! GB/s is the victim's live key and value bytes (its `live_key_value_bytes`
//! just before the kill) over the total. After each recovery a sample of the
//! victim's keys (every 1000th written) is read back and checked.
//!
//! During every run a client thread reads one victim key in a loop (each
//! read with the client's own retries) and records the longest time
//! between two successful reads around the kill (availability). With
//! `--impact-runs`, extra runs of `--impact-size` also run
//! `--impact-threads` closed-loop clients (95% reads, 5% writes, uniform,
//! 100-byte values) on keys owned by the other masters only, and report
//! their throughput and p99 latency over `--before-secs` before the kill
//! against the time from the kill to the end of the recovery. Those runs
//! are reported apart and left out of the recovery-speed medians (the load
//! competes with the recovery for the CPU).
//!
//! Every wait is bounded (`--timeout-secs` per phase); the processes are
//! this program's children and are stopped by their PIDs (SIGKILL) when a
//! run ends, whatever happened.

use super::{emit_json, Table};
use crate::serve::{pick_port, spawn};
use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use shoal_client::blocking::Client;
use shoal_client::{key_hash, ClientConfig, RejectRules, StatValue, TableId, WriteItem};
use shoal_cluster::control::call_blocking;
use shoal_cluster::{ClusterMap, ControlRequest, ControlResponse, ServerId, ServerState, TabletInfo};
use shoal_server::ByteSize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const MB: f64 = 1e6;
const GB: f64 = 1e9;
/// Objects per multi-write of the fill.
const FILL_BATCH: usize = 1000;
/// Keys owned by the other masters, for the impact clients.
const OTHER_KEYS: u64 = 50_000;
/// Every this many fill keys, one is kept for the check after recovery.
const SAMPLE_EVERY: u64 = 1000;
const TABLE_NAME: &str = "recovery";

/// Options of `shoal bench recovery`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Object data (keys and values) on the victim, in MB (10^6 bytes); one
    /// recovery per size and run.
    #[arg(long, value_delimiter = ',', default_value = "512,1024,2048", value_name = "MB,...")]
    pub sizes: Vec<u64>,
    /// Runs per size (the report gives medians).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Servers (each a master and a backup); the recovery masters are the
    /// others than the victim.
    #[arg(long, default_value_t = 4)]
    pub servers: usize,
    /// Replicas of every segment (R).
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Object memory per server [default: 1.5 times the largest size plus
    /// 512 MiB, in whole 64 MiB].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<ByteSize>,
    /// Client threads filling the victim.
    #[arg(long, default_value_t = 2)]
    pub fill_threads: usize,
    /// Start the servers without --prefault-memory: recovery masters then
    /// fault in fresh pages as they replay (about 1 GB/s per core here).
    #[arg(long)]
    pub no_prefault: bool,
    /// Extra runs with clients on the other masters' keys (impact of a
    /// recovery on the rest of the cluster).
    #[arg(long, default_value_t = 0)]
    pub impact_runs: usize,
    /// Size (MB) of the impact runs [default: the largest size up to 1024].
    #[arg(long, value_name = "MB")]
    pub impact_size: Option<u64>,
    /// Closed-loop client threads of the impact runs.
    #[arg(long, default_value_t = 2)]
    pub impact_threads: usize,
    /// Seconds of load measured before the kill (impact runs).
    #[arg(long, default_value_t = 5.0)]
    pub before_secs: f64,
    /// Longest any phase may take (start, fill, recovery), in seconds.
    #[arg(long, default_value_t = 300.0)]
    pub timeout_secs: f64,
    /// Directory for the runs' data (a run's directory is removed after it
    /// unless --keep) [default: the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Keep each run's data and logs.
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object per result instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Also append the JSON objects to this file (with the tables on stdout).
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
}

/// One recovery master's partition, from its STATS.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionResult {
    pub server: u64,
    pub partition: u64,
    /// Replayed, durable and reported to the coordinator.
    pub done: bool,
    pub segments: u64,
    /// Bytes of its partition's entries this recovery master received from
    /// the backups (each backup sends only the partition's entries).
    pub bytes_read: u64,
    pub objects: u64,
    pub find_ms: u64,
    pub replay_ms: u64,
    pub rereplication_ms: u64,
    pub total_ms: u64,
}

/// One run: one kill and its recovery.
#[derive(Clone, Debug, Serialize)]
pub struct RecoveryResult {
    pub bench: &'static str,
    /// "speed", or "impact" for a run with load on the other masters.
    pub kind: &'static str,
    pub run: usize,
    pub target_mb: u64,
    pub servers: usize,
    pub replicas: u32,
    pub memory_bytes: u64,
    pub value_bytes: usize,
    pub victim: u64,
    /// Objects on the victim at the kill (its STATS).
    pub objects: u64,
    /// Live key and value bytes on the victim at the kill.
    pub data_bytes: u64,
    /// Its live bytes in the log (entries with their headers).
    pub log_live_bytes: u64,
    pub fill_secs: f64,
    pub recovery_masters: usize,
    /// Kill to the map saying the victim is down.
    pub detection_ms: Option<f64>,
    /// The coordinator's own detection: first suspicion to declaration.
    pub coordinator_detection_ms: Option<u64>,
    /// The slowest recovery master's phases.
    pub find_ms: Option<u64>,
    pub replay_ms: Option<u64>,
    pub rereplication_ms: Option<u64>,
    pub partition_total_ms: Option<u64>,
    /// The coordinator's declaration to its last partition done.
    pub declared_to_done_ms: Option<u64>,
    /// Kill to a map with no recovery and no tablet of the victim.
    pub map_recovered_ms: Option<f64>,
    /// Kill to all tablets served (map) and a victim key read.
    pub total_ms: Option<f64>,
    /// data_bytes / total, in GB/s (10^9 bytes).
    pub gb_per_sec: Option<f64>,
    /// Bytes all recovery masters read from the backups together.
    pub bytes_read: u64,
    pub partitions: Vec<PartitionResult>,
    /// Sampled victim keys read back after the recovery, and how many were
    /// missing or wrong.
    pub checked: u64,
    pub lost: u64,
    /// Longest time between two successful reads of one victim key that
    /// spans the kill (availability).
    pub unavailable_ms: Option<f64>,
    /// Reads of that key that failed after the client's retries.
    pub read_failures: u64,
    /// Impact runs: the other clients before and during the recovery.
    pub before_ops_per_sec: Option<f64>,
    pub before_p99_us: Option<f64>,
    pub during_ops_per_sec: Option<f64>,
    pub during_p99_us: Option<f64>,
    /// during / before throughput.
    pub throughput_kept: Option<f64>,
    pub error: Option<String>,
}

/// Medians of the speed runs of one size.
#[derive(Clone, Debug, Serialize)]
pub struct SizeSummary {
    pub bench: &'static str,
    pub target_mb: u64,
    pub runs: usize,
    pub data_bytes: f64,
    pub detection_ms: Option<f64>,
    pub find_ms: Option<f64>,
    pub replay_ms: Option<f64>,
    pub rereplication_ms: Option<f64>,
    pub total_ms: Option<f64>,
    pub gb_per_sec: Option<f64>,
    pub unavailable_ms: Option<f64>,
    /// total / total of the smallest size, against data / data of the smallest.
    pub time_ratio: Option<f64>,
    pub size_ratio: Option<f64>,
    pub target_gb_per_sec: f64,
}

pub fn run(args: &Args) -> Result<bool, String> {
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        return Err("--sizes must be positive".into());
    }
    if args.servers < 2 {
        return Err("--servers must be at least 2".into());
    }
    if args.replicas as usize >= args.servers {
        return Err("--replicas must be below --servers (a backup per replica besides the master)".into());
    }
    if args.runs == 0 && args.impact_runs == 0 {
        return Err("nothing to do: --runs and --impact-runs are 0".into());
    }
    if args.value_size == 0 || args.fill_threads == 0 || args.impact_threads == 0 {
        return Err("--value-size, --fill-threads and --impact-threads must be positive".into());
    }
    if !super::positive(args.timeout_secs) || !super::positive(args.before_secs) {
        return Err("--timeout-secs and --before-secs must be positive".into());
    }
    let impact_size = args
        .impact_size
        .unwrap_or_else(|| args.sizes.iter().copied().filter(|&s| s <= 1024).max().unwrap_or(args.sizes[0]));
    let largest = args.sizes.iter().copied().max().unwrap_or(0).max(if args.impact_runs > 0 { impact_size } else { 0 });
    let memory = match args.memory {
        Some(m) => m.0,
        None => {
            let want = (largest as f64 * MB * 1.5) as u64 + (512 << 20);
            want.div_ceil(64 << 20) * (64 << 20)
        }
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the shoal executable: {e}"))?;
    let base = args.root.clone().unwrap_or_else(std::env::temp_dir);
    if !args.json {
        println!(
            "crash recovery: {} servers (coordinator + servers as processes), R={}, {} recovery masters, \
             {}-byte values, {} MiB of object memory per server{}, {} run(s) per size, {} impact run(s) of {} MB",
            args.servers,
            args.replicas,
            args.servers - 1,
            args.value_size,
            memory >> 20,
            if args.no_prefault { "" } else { " (prefaulted)" },
            args.runs,
            args.impact_runs,
            impact_size
        );
    }
    let mut plan: Vec<(u64, bool, usize)> = Vec::new();
    for r in 0..args.runs {
        for &s in &args.sizes {
            plan.push((s, false, r + 1));
        }
    }
    for r in 0..args.impact_runs {
        plan.push((impact_size, true, r + 1));
    }
    let mut results = Vec::new();
    for (size, impact, run_no) in plan {
        let dir = base.join(format!(
            "shoal-bench-recovery-{}-{size}-{run_no}{}",
            std::process::id(),
            if impact { "-impact" } else { "" }
        ));
        eprintln!(
            "recovery: {} MB, run {run_no}{} (data under {})",
            size,
            if impact { " with load on the other masters" } else { "" },
            dir.display()
        );
        let r = one_run(args, &exe, &dir, size, impact, run_no, memory);
        if !args.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        match &r.error {
            Some(e) => eprintln!("recovery: run failed: {e}"),
            None => eprintln!(
                "recovery: {} MB: {} objects, total {} ms, {} GB/s",
                size,
                r.objects,
                fmt_f(r.total_ms, 0),
                fmt_f(r.gb_per_sec, 2)
            ),
        }
        if args.json {
            emit_json(&r);
        }
        append_json(args, &r)?;
        results.push(r);
    }
    let summaries = summarise(&results, &args.sizes);
    for s in &summaries {
        append_json(args, s)?;
    }
    if args.json {
        for s in &summaries {
            emit_json(s);
        }
    } else {
        print_tables(&results, &summaries);
    }
    Ok(results.iter().all(|r| r.error.is_none() && r.lost == 0))
}

fn append_json(args: &Args, v: &impl Serialize) -> Result<(), String> {
    use std::io::Write;
    let Some(path) = &args.json_out else { return Ok(()) };
    let line = serde_json::to_string(v).map_err(|e| e.to_string())?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn fmt_f(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn fmt_u(x: Option<u64>) -> String {
    x.map_or("-".into(), |v| v.to_string())
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

fn summarise(results: &[RecoveryResult], sizes: &[u64]) -> Vec<SizeSummary> {
    let mut sorted: Vec<u64> = sizes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<SizeSummary> = Vec::new();
    for size in sorted {
        let runs: Vec<&RecoveryResult> =
            results.iter().filter(|r| r.kind == "speed" && r.target_mb == size && r.error.is_none()).collect();
        let med = |f: &dyn Fn(&RecoveryResult) -> Option<f64>| median(runs.iter().filter_map(|r| f(r)).collect());
        let mut s = SizeSummary {
            bench: "recovery_summary",
            target_mb: size,
            runs: runs.len(),
            data_bytes: med(&|r| Some(r.data_bytes as f64)).unwrap_or(0.0),
            detection_ms: med(&|r| r.detection_ms),
            find_ms: med(&|r| r.find_ms.map(|v| v as f64)),
            replay_ms: med(&|r| r.replay_ms.map(|v| v as f64)),
            rereplication_ms: med(&|r| r.rereplication_ms.map(|v| v as f64)),
            total_ms: med(&|r| r.total_ms),
            gb_per_sec: med(&|r| r.gb_per_sec),
            unavailable_ms: med(&|r| r.unavailable_ms),
            time_ratio: None,
            size_ratio: None,
            target_gb_per_sec: 1.0,
        };
        if let Some(first) = out.first() {
            if let (Some(t0), Some(t)) = (first.total_ms, s.total_ms) {
                s.time_ratio = Some(t / t0);
            }
            if first.data_bytes > 0.0 {
                s.size_ratio = Some(s.data_bytes / first.data_bytes);
            }
        }
        out.push(s);
    }
    out
}

fn print_tables(results: &[RecoveryResult], summaries: &[SizeSummary]) {
    let mut t = Table::new(
        &[
            "kind",
            "size MB",
            "run",
            "objects",
            "data MB",
            "masters",
            "detect ms",
            "find ms",
            "replay ms",
            "re-repl ms",
            "part ms",
            "coord ms",
            "total ms",
            "GB/s",
            "gap ms",
            "checked",
            "lost",
            "error",
        ],
        1,
    );
    for r in results {
        t.row(vec![
            r.kind.into(),
            r.target_mb.to_string(),
            r.run.to_string(),
            r.objects.to_string(),
            format!("{:.0}", r.data_bytes as f64 / MB),
            r.recovery_masters.to_string(),
            fmt_f(r.detection_ms, 0),
            fmt_u(r.find_ms),
            fmt_u(r.replay_ms),
            fmt_u(r.rereplication_ms),
            fmt_u(r.partition_total_ms),
            fmt_u(r.declared_to_done_ms),
            fmt_f(r.total_ms, 0),
            fmt_f(r.gb_per_sec, 3),
            fmt_f(r.unavailable_ms, 0),
            r.checked.to_string(),
            r.lost.to_string(),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    println!(
        "\nruns (phases: the slowest recovery master's; total: kill to every tablet served and a victim key read)"
    );
    print!("{}", t.render());

    let mut s = Table::new(
        &[
            "size MB",
            "runs",
            "data MB",
            "detect ms",
            "find ms",
            "replay ms",
            "re-repl ms",
            "total ms",
            "GB/s",
            "target",
            "time ratio",
            "size ratio",
            "gap ms",
        ],
        0,
    );
    for m in summaries {
        s.row(vec![
            m.target_mb.to_string(),
            m.runs.to_string(),
            format!("{:.0}", m.data_bytes / MB),
            fmt_f(m.detection_ms, 0),
            fmt_f(m.find_ms, 0),
            fmt_f(m.replay_ms, 0),
            fmt_f(m.rereplication_ms, 0),
            fmt_f(m.total_ms, 0),
            fmt_f(m.gb_per_sec, 3),
            format!(">= {:.1}", m.target_gb_per_sec),
            fmt_f(m.time_ratio, 2),
            fmt_f(m.size_ratio, 2),
            fmt_f(m.unavailable_ms, 0),
        ]);
    }
    println!("\nrecovery speed (medians of the speed runs; ratios against the smallest size: linear if equal)");
    print!("{}", s.render());

    let impact: Vec<&RecoveryResult> = results.iter().filter(|r| r.kind == "impact").collect();
    if !impact.is_empty() {
        let mut t = Table::new(
            &[
                "size MB",
                "run",
                "before ops/s",
                "before p99 us",
                "during ops/s",
                "during p99 us",
                "kept",
                "target",
                "total ms",
                "error",
            ],
            0,
        );
        for r in impact {
            t.row(vec![
                r.target_mb.to_string(),
                r.run.to_string(),
                fmt_f(r.before_ops_per_sec, 0),
                fmt_f(r.before_p99_us, 0),
                fmt_f(r.during_ops_per_sec, 0),
                fmt_f(r.during_p99_us, 0),
                r.throughput_kept.map_or("-".into(), |k| format!("{:.0}%", k * 100.0)),
                ">= 70%".into(),
                fmt_f(r.total_ms, 0),
                r.error.clone().unwrap_or_default(),
            ]);
        }
        println!("\nimpact on clients of the other masters (95% read, 5% write; during = kill to recovered)");
        print!("{}", t.render());
    }
}

// --- the cluster --------------------------------------------------------------

/// The processes of one run, killed (SIGKILL, by their PIDs) when dropped.
struct Cluster {
    coordinator: SocketAddr,
    procs: Vec<(String, Option<Child>)>,
    root: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.procs {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Cluster {
    fn start(
        exe: &Path,
        root: &Path,
        servers: usize,
        replicas: u32,
        memory: u64,
        prefault: bool,
        deadline: Instant,
    ) -> Result<Cluster, String> {
        let _ = std::fs::remove_dir_all(root);
        let coordinator: SocketAddr = format!("127.0.0.1:{}", pick_port(0)?).parse().map_err(|e| format!("{e}"))?;
        let mut c = Cluster { coordinator, procs: Vec::new(), root: root.to_path_buf() };
        let cdir = root.join("coordinator");
        std::fs::create_dir_all(root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        let secret = root.join(crate::serve::SECRET_FILE);
        shoal_cluster::auth::ClusterSecret::create_or_load(&secret).map_err(|e| e.to_string())?;
        let secret = secret.display().to_string();
        let args: Vec<String> = vec![
            "coordinator".into(),
            "--cluster-secret-file".into(),
            secret.clone(),
            "--listen".into(),
            coordinator.to_string(),
            "--data-dir".into(),
            cdir.join("state").display().to_string(),
            "--replicas".into(),
            replicas.to_string(),
            "--log-level".into(),
            "info".into(),
        ];
        c.procs.push(("coordinator".into(), Some(spawn(exe, &args, &cdir)?)));
        c.note_pid()?;
        for i in 0..servers {
            let dir = root.join(format!("server-{i}"));
            let mut args: Vec<String> = vec![
                "server".into(),
                "--cluster-secret-file".into(),
                secret.clone(),
                "--coordinator".into(),
                coordinator.to_string(),
                "--data-dir".into(),
                dir.join("data").display().to_string(),
                "--native-port".into(),
                "0".into(),
                "--resp-port".into(),
                "0".into(),
                "--memcached-port".into(),
                "0".into(),
                "--backup-port".into(),
                "0".into(),
                "--memory".into(),
                ByteSize(memory).to_string(),
                "--log-level".into(),
                "info".into(),
            ];
            if prefault {
                args.push("--prefault-memory".into());
            }
            c.procs.push((format!("server-{i}"), Some(spawn(exe, &args, &dir)?)));
            c.note_pid()?;
        }
        loop {
            if let Some(map) = c.map() {
                if map.servers.iter().filter(|s| s.state == ServerState::Up).count() >= servers {
                    return Ok(c);
                }
            }
            for (name, child) in &mut c.procs {
                if let Some(ch) = child {
                    if let Ok(Some(status)) = ch.try_wait() {
                        return Err(format!("{name} exited during startup ({status}); see {}", root.display()));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err("the cluster did not start in time".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Appends the newest process's PID to `<root>/pids` (for a script that
    /// must stop them if this program is killed).
    fn note_pid(&self) -> Result<(), String> {
        use std::io::Write;
        let Some((_, Some(child))) = self.procs.last() else { return Ok(()) };
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("pids"))
            .and_then(|mut f| writeln!(f, "{}", child.id()))
            .map_err(|e| format!("cannot write {}: {e}", self.root.join("pids").display()))
    }

    fn map(&self) -> Option<ClusterMap> {
        match call_blocking(self.coordinator, &ControlRequest::GetMap, Duration::from_secs(2)) {
            Ok(ControlResponse::Map { map }) => Some(map),
            _ => None,
        }
    }

    fn coordinator_stats(&self) -> Option<serde_json::Value> {
        match call_blocking(self.coordinator, &ControlRequest::Stats, Duration::from_secs(2)) {
            Ok(ControlResponse::Stats { stats }) => Some(stats),
            _ => None,
        }
    }

    /// The process index (1-based in `procs`) of server `id`, from the
    /// server-id file in its data directory.
    fn process_of(&self, id: ServerId, servers: usize) -> Option<usize> {
        (0..servers).find_map(|i| {
            let s = std::fs::read_to_string(self.root.join(format!("server-{i}/data/server-id"))).ok()?;
            (s.trim() == id.0.to_string()).then_some(i + 1)
        })
    }
}

/// The partitions of the recovery of `victim`, from the live servers' STATS.
fn partition_stats(cluster: &Cluster, victim: ServerId) -> Result<Vec<PartitionResult>, String> {
    let map = cluster.map().ok_or("no map from the coordinator")?;
    let mut out = Vec::new();
    for s in map.servers.iter().filter(|s| s.state != ServerState::Down) {
        let Some(stats) = server_stats(s.native) else { continue };
        for (name, _) in stats.iter() {
            let Some(rest) = name.strip_prefix("recovery_") else { continue };
            let Some((rec, tail)) = rest.split_once("_partition_") else { continue };
            let Some(part) = tail.strip_suffix("_dead") else { continue };
            let p = |what: &str| stat_u64(&stats, &format!("recovery_{rec}_partition_{part}_{what}")).unwrap_or(0);
            if p("dead") != victim.0 {
                continue;
            }
            out.push(PartitionResult {
                server: s.id.0,
                partition: part.parse().unwrap_or(0),
                done: p("done") == 1,
                segments: p("segments"),
                bytes_read: p("bytes"),
                objects: p("objects"),
                find_ms: p("find_ms"),
                replay_ms: p("replay_ms"),
                rereplication_ms: p("durable_ms"),
                total_ms: p("total_ms"),
            });
        }
    }
    out.sort_by_key(|p| p.partition);
    Ok(out)
}

fn client(coordinator: SocketAddr) -> Result<Client, String> {
    let config = ClientConfig { spin: Duration::ZERO, ..ClientConfig::default() };
    Client::connect_cluster(coordinator, config).map_err(|e| format!("cannot connect to the cluster: {e}"))
}

fn key_of(prefix: char, i: u64) -> Vec<u8> {
    format!("{prefix}{i:011}").into_bytes()
}

/// A value that depends on its key (checked after the recovery).
fn value_of(key: &[u8], size: usize) -> Vec<u8> {
    key.iter().copied().cycle().take(size).collect()
}

fn in_any(tablets: &[TabletInfo], table: TableId, key: &[u8]) -> bool {
    let h = key_hash(table, key);
    tablets.iter().any(|t| t.contains(table, h))
}

fn stat_u64(stats: &shoal_client::Stats, name: &str) -> Option<u64> {
    stats.iter().find(|(n, _)| n == name).and_then(|(_, v)| match v {
        StatValue::U64(v) => Some(*v),
        StatValue::F64(_) => None,
    })
}

fn server_stats(addr: SocketAddr) -> Option<shoal_client::Stats> {
    let config =
        ClientConfig { spin: Duration::ZERO, timeout: Some(Duration::from_secs(5)), ..ClientConfig::default() };
    Client::with_config(addr, config).ok()?.stats().ok()
}

// --- one run ------------------------------------------------------------------

fn empty_result(args: &Args, size: u64, impact: bool, run: usize, memory: u64) -> RecoveryResult {
    RecoveryResult {
        bench: "recovery",
        kind: if impact { "impact" } else { "speed" },
        run,
        target_mb: size,
        servers: args.servers,
        replicas: args.replicas,
        memory_bytes: memory,
        value_bytes: args.value_size,
        victim: 0,
        objects: 0,
        data_bytes: 0,
        log_live_bytes: 0,
        fill_secs: 0.0,
        recovery_masters: 0,
        detection_ms: None,
        coordinator_detection_ms: None,
        find_ms: None,
        replay_ms: None,
        rereplication_ms: None,
        partition_total_ms: None,
        declared_to_done_ms: None,
        map_recovered_ms: None,
        total_ms: None,
        gb_per_sec: None,
        bytes_read: 0,
        partitions: Vec::new(),
        checked: 0,
        lost: 0,
        unavailable_ms: None,
        read_failures: 0,
        before_ops_per_sec: None,
        before_p99_us: None,
        during_ops_per_sec: None,
        during_p99_us: None,
        throughput_kept: None,
        error: None,
    }
}

fn one_run(args: &Args, exe: &Path, dir: &Path, size: u64, impact: bool, run: usize, memory: u64) -> RecoveryResult {
    let mut r = empty_result(args, size, impact, run, memory);
    if let Err(e) = measure(args, exe, dir, size, impact, memory, &mut r) {
        r.error = Some(e);
    }
    r
}

/// Stops its threads when dropped (also on an early return).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn measure(
    args: &Args,
    exe: &Path,
    dir: &Path,
    size: u64,
    impact: bool,
    memory: u64,
    r: &mut RecoveryResult,
) -> Result<(), String> {
    let timeout = Duration::from_secs_f64(args.timeout_secs);
    let mut cluster =
        Cluster::start(exe, dir, args.servers, args.replicas, memory, !args.no_prefault, Instant::now() + timeout)?;
    let coordinator = cluster.coordinator;
    let table = match call_blocking(
        coordinator,
        &ControlRequest::CreateTable {
            name: TABLE_NAME.into(),
            span: args.servers as u32,
            slots: false,
            chunks: false,
            stream: None,
        },
        Duration::from_secs(5),
    ) {
        Ok(ControlResponse::Table { table }) => table.id,
        other => return Err(format!("cannot create the table: {other:?}")),
    };
    let map = cluster.map().ok_or("no map from the coordinator")?;
    // Every server must know the table before the first write.
    let deadline = Instant::now() + timeout;
    for s in &map.servers {
        loop {
            let seen = server_stats(s.native).and_then(|st| stat_u64(&st, "map_version")).unwrap_or(0);
            if seen >= map.version {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("server {} did not learn the table's map in time", s.id.0));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Servers started with --prefault-memory make their memory resident in
    // the background: wait for it, so that it neither slows the recovery
    // nor is missing from it.
    if !args.no_prefault {
        for s in &map.servers {
            loop {
                let st = server_stats(s.native);
                let done = st.as_ref().and_then(|st| stat_u64(st, "prefaulted_bytes")).unwrap_or(0);
                let total = st.as_ref().and_then(|st| stat_u64(st, "memory_bytes")).unwrap_or(u64::MAX);
                if done >= total {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!("server {} did not make its memory resident in time", s.id.0));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let victim = map.tablets.iter().find(|t| t.table == table).ok_or("the table has no tablet")?.master;
    r.victim = victim.0;
    let victim_tablets: Vec<TabletInfo> =
        map.tablets.iter().filter(|t| t.table == table && t.master == victim).cloned().collect();
    let other_tablets: Vec<TabletInfo> =
        map.tablets.iter().filter(|t| t.table == table && t.master != victim).cloned().collect();
    let victim_native = map.server(victim).ok_or("the victim is not in the map")?.native;
    let victim_proc = cluster.process_of(victim, args.servers).ok_or("no process for the victim")?;

    // Fill the victim.
    let key_bytes = key_of('k', 0).len();
    let objects = ((size as f64 * MB) / (key_bytes + args.value_size) as f64).ceil() as u64;
    let fill_started = Instant::now();
    let samples = fill(args, coordinator, table, &victim_tablets, objects, fill_started + timeout)?;
    r.fill_secs = fill_started.elapsed().as_secs_f64();
    let stats = server_stats(victim_native).ok_or("no stats from the victim")?;
    r.objects = stat_u64(&stats, "objects").unwrap_or(0);
    r.data_bytes = stat_u64(&stats, "live_key_value_bytes").unwrap_or(0);
    r.log_live_bytes = stat_u64(&stats, "live_bytes").unwrap_or(0);
    eprintln!(
        "recovery: victim server {} holds {} objects, {:.1} MB of keys and values, filled in {:.1} s",
        victim.0,
        r.objects,
        r.data_bytes as f64 / MB,
        r.fill_secs
    );

    let stop = Arc::new(AtomicBool::new(false));
    let _stop_guard = StopOnDrop(stop.clone());
    let kill_at: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());

    // Availability: one victim key read in a loop.
    let watched = samples.first().cloned().ok_or("no victim key")?;
    let avail = {
        let (stop, kill_at, key) = (stop.clone(), kill_at.clone(), watched.clone());
        let value = value_of(&watched, args.value_size);
        let mut c = client(coordinator)?;
        let limit = Instant::now() + 3 * timeout;
        std::thread::spawn(move || availability(&mut c, table, &key, &value, &stop, &kill_at, limit))
    };

    // Impact: clients on the other masters' keys.
    let phase = Arc::new(AtomicU8::new(0));
    let mut loaders = Vec::new();
    if impact {
        preload_others(args, coordinator, table, &other_tablets)?;
        for t in 0..args.impact_threads {
            let (stop, phase) = (stop.clone(), phase.clone());
            let mut c = client(coordinator)?;
            let (others, vs) = (other_tablets.clone(), args.value_size);
            let limit = Instant::now() + 3 * timeout;
            loaders.push(std::thread::spawn(move || {
                other_load(&mut c, table, &others, vs, t as u64, &stop, &phase, limit)
            }));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let before_started = Instant::now();
    phase.store(1, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs_f64(if impact { args.before_secs } else { 1.0 }));
    let before_secs = before_started.elapsed().as_secs_f64();

    // The kill.
    let killed = Instant::now();
    {
        let (_, child) = &mut cluster.procs[victim_proc];
        let mut child = child.take().ok_or("the victim already stopped")?;
        child.kill().map_err(|e| format!("cannot kill the victim: {e}"))?;
        let _ = kill_at.set(killed);
        phase.store(2, Ordering::Relaxed);
        let _ = child.wait();
    }
    let mut down_at = None;
    let mut recovered_at = None;
    let deadline = killed + timeout;
    while Instant::now() < deadline {
        if let Some(m) = cluster.map() {
            let down = m.server(victim).is_some_and(|s| s.state == ServerState::Down);
            if down && down_at.is_none() {
                down_at = Some(killed.elapsed());
            }
            if down && !m.recoveries.iter().any(|x| x.dead == victim) && m.tablets.iter().all(|t| t.master != victim) {
                recovered_at = Some(killed.elapsed());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    r.detection_ms = down_at.map(|d| d.as_secs_f64() * 1e3);
    let Some(recovered_at) = recovered_at else {
        // Say how far it got: partitions done, and those still collecting
        // replicas (no segment found yet).
        let parts = partition_stats(&cluster, victim).unwrap_or_default();
        let done = parts.iter().filter(|p| p.done).count();
        let finding = parts.iter().filter(|p| !p.done && p.segments == 0).count();
        r.partitions = parts;
        r.recovery_masters = r.partitions.len();
        return Err(format!(
            "not recovered within {:.0} s: {done} of {} partitions done, {finding} still collecting replicas",
            timeout.as_secs_f64(),
            r.recovery_masters
        ));
    };
    r.map_recovered_ms = Some(recovered_at.as_secs_f64() * 1e3);
    // A victim key served again (a new client: the map is fetched now).
    let probe = samples.last().cloned().unwrap_or(watched.clone());
    let mut served_at = None;
    while Instant::now() < deadline {
        if let Ok(mut c) = client(coordinator) {
            if c.read(table, &probe).is_ok() {
                served_at = Some(killed.elapsed());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let served_at = served_at.ok_or("a victim key was not served again in time")?;
    let total = served_at.max(recovered_at);
    phase.store(3, Ordering::Relaxed);
    let during_secs = total.as_secs_f64();
    r.total_ms = Some(total.as_secs_f64() * 1e3);
    if r.data_bytes > 0 {
        r.gb_per_sec = Some(r.data_bytes as f64 / GB / total.as_secs_f64());
    }

    // Let the availability reader see a success after the recovery.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (gap, failures) = avail.join().map_err(|_| "the availability reader panicked")?;
    r.unavailable_ms = gap.map(|g| g.as_secs_f64() * 1e3);
    r.read_failures = failures;
    if impact {
        let mut before = (0u64, histogram());
        let mut during = (0u64, histogram());
        for h in loaders {
            let t = h.join().map_err(|_| "a load thread panicked")?;
            before.0 += t.ops[1];
            during.0 += t.ops[2];
            before.1.add(&t.hist[1]).map_err(|e| e.to_string())?;
            during.1.add(&t.hist[2]).map_err(|e| e.to_string())?;
        }
        let b = before.0 as f64 / before_secs;
        let d = during.0 as f64 / during_secs;
        r.before_ops_per_sec = Some(b);
        r.during_ops_per_sec = Some(d);
        r.before_p99_us = (before.0 > 0).then(|| before.1.value_at_quantile(0.99) as f64);
        r.during_p99_us = (during.0 > 0).then(|| during.1.value_at_quantile(0.99) as f64);
        r.throughput_kept = (b > 0.0).then_some(d / b);
    }

    // Phases, from the recovery masters and the coordinator.
    r.partitions = partition_stats(&cluster, victim)?;
    r.recovery_masters = r.partitions.len();
    r.bytes_read = r.partitions.iter().map(|p| p.bytes_read).sum();
    r.find_ms = r.partitions.iter().map(|p| p.find_ms).max();
    r.replay_ms = r.partitions.iter().map(|p| p.replay_ms).max();
    r.rereplication_ms = r.partitions.iter().map(|p| p.rereplication_ms).max();
    r.partition_total_ms = r.partitions.iter().map(|p| p.total_ms).max();
    if let Some(stats) = cluster.coordinator_stats() {
        if let Some(f) = stats["finished_recoveries"]
            .as_array()
            .and_then(|a| a.iter().rev().find(|x| x["dead"].as_u64() == Some(victim.0)))
        {
            r.coordinator_detection_ms = f["detection_ms"].as_u64();
            r.declared_to_done_ms = f["total_ms"].as_u64();
        }
    }

    // Nothing lost: the sampled keys read back.
    let mut c = client(coordinator)?;
    for chunk in samples.chunks(500) {
        let items: Vec<(TableId, &[u8])> = chunk.iter().map(|k| (table, k.as_slice())).collect();
        let got = c.multi_read(&items).map_err(|e| format!("reading back: {e}"))?;
        for (k, g) in chunk.iter().zip(got) {
            r.checked += 1;
            match g {
                Ok((v, _)) if v == value_of(k, args.value_size) => {}
                _ => r.lost += 1,
            }
        }
    }
    drop(cluster);
    Ok(())
}

/// Writes `objects` objects whose keys fall in `tablets`, with
/// `args.fill_threads` clients; returns every `SAMPLE_EVERY`-th key.
fn fill(
    args: &Args,
    coordinator: SocketAddr,
    table: TableId,
    tablets: &[TabletInfo],
    objects: u64,
    deadline: Instant,
) -> Result<Vec<Vec<u8>>, String> {
    let threads = args.fill_threads as u64;
    let written = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let mut handles = Vec::new();
    for t in 0..threads {
        let share = objects / threads + u64::from(t < objects % threads);
        let mut c = client(coordinator)?;
        let (tablets, written, failed, vs) = (tablets.to_vec(), written.clone(), failed.clone(), args.value_size);
        handles.push(std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut done = 0u64;
            let mut i = t;
            let mut keys: Vec<Vec<u8>> = Vec::with_capacity(FILL_BATCH);
            let mut values: Vec<Vec<u8>> = Vec::with_capacity(FILL_BATCH);
            while done < share {
                if Instant::now() >= deadline || failed.lock().unwrap().is_some() {
                    break;
                }
                keys.clear();
                values.clear();
                while keys.len() < FILL_BATCH && done + (keys.len() as u64) < share {
                    let k = key_of('k', i);
                    i += threads;
                    if in_any(&tablets, table, &k) {
                        if (done + keys.len() as u64).is_multiple_of(SAMPLE_EVERY) {
                            samples.push(k.clone());
                        }
                        values.push(value_of(&k, vs));
                        keys.push(k);
                    }
                }
                let items: Vec<WriteItem<'_>> = keys
                    .iter()
                    .zip(&values)
                    .map(|(k, v)| WriteItem { table, key: k, value: v, rules: RejectRules::default() })
                    .collect();
                let res = match c.multi_write(&items) {
                    Ok(res) => res,
                    Err(e) => {
                        *failed.lock().unwrap() = Some(format!("fill: {e}"));
                        break;
                    }
                };
                if let Some(e) = res.into_iter().find_map(|x| x.err()) {
                    *failed.lock().unwrap() = Some(format!("fill: {e}"));
                    break;
                }
                done += keys.len() as u64;
                written.fetch_add(keys.len() as u64, Ordering::Relaxed);
            }
            samples
        }));
    }
    let started = Instant::now();
    let mut last_report = Instant::now();
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        if last_report.elapsed() >= Duration::from_secs(10) {
            let n = written.load(Ordering::Relaxed);
            eprintln!(
                "recovery: filling: {n} of {objects} objects ({:.0} objects/s)",
                n as f64 / started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
    }
    let mut samples = Vec::new();
    for h in handles {
        samples.extend(h.join().map_err(|_| "a fill thread panicked")?);
    }
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(e);
    }
    let n = written.load(Ordering::Relaxed);
    if n < objects {
        return Err(format!("the fill wrote {n} of {objects} objects in time"));
    }
    Ok(samples)
}

/// Writes `OTHER_KEYS` keys owned by the other masters.
fn preload_others(args: &Args, coordinator: SocketAddr, table: TableId, others: &[TabletInfo]) -> Result<(), String> {
    let mut c = client(coordinator)?;
    let keys: Vec<Vec<u8>> = (0..OTHER_KEYS).map(|i| other_key(others, table, i)).collect();
    for chunk in keys.chunks(FILL_BATCH) {
        let values: Vec<Vec<u8>> = chunk.iter().map(|k| value_of(k, args.value_size)).collect();
        let items: Vec<WriteItem<'_>> = chunk
            .iter()
            .zip(&values)
            .map(|(k, v)| WriteItem { table, key: k, value: v, rules: RejectRules::default() })
            .collect();
        let res = c.multi_write(&items).map_err(|e| format!("preloading: {e}"))?;
        if let Some(e) = res.into_iter().find_map(|x| x.err()) {
            return Err(format!("preloading: {e}"));
        }
    }
    Ok(())
}

/// The `i`-th key owned by the other masters: "o<i>", or "o<i>-<j>" for
/// the first j that lands outside the victim's tablets (deterministic).
fn other_key(others: &[TabletInfo], table: TableId, i: u64) -> Vec<u8> {
    let k = key_of('o', i);
    if in_any(others, table, &k) {
        return k;
    }
    (0u64..1000).map(|j| format!("o{i:011}-{j}").into_bytes()).find(|k| in_any(others, table, k)).unwrap_or(k)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// Operations and latencies (us) per phase (0 warm-up, 1 before the kill,
/// 2 during the recovery, 3 after).
struct LoadTally {
    ops: [u64; 4],
    hist: Vec<Histogram<u64>>,
}

#[allow(clippy::too_many_arguments)]
fn other_load(
    c: &mut Client,
    table: TableId,
    others: &[TabletInfo],
    value_size: usize,
    seed: u64,
    stop: &AtomicBool,
    phase: &AtomicU8,
    limit: Instant,
) -> LoadTally {
    let mut rng = StdRng::seed_from_u64(0x5eed ^ seed);
    let mut tally = LoadTally { ops: [0; 4], hist: (0..4).map(|_| histogram()).collect() };
    let keys: Vec<Vec<u8>> = (0..OTHER_KEYS).map(|i| other_key(others, table, i)).collect();
    let values: Vec<Vec<u8>> = keys.iter().map(|k| value_of(k, value_size)).collect();
    // Bounded: by the stop flag, the time limit and a count.
    for n in 0..u64::MAX {
        if n.is_multiple_of(64) && (stop.load(Ordering::Relaxed) || Instant::now() >= limit) {
            break;
        }
        let i = rng.gen_range(0..keys.len());
        let started = Instant::now();
        let ok = if rng.gen_bool(0.95) {
            c.read(table, &keys[i]).is_ok()
        } else {
            c.write(table, &keys[i], &values[i]).is_ok()
        };
        let p = phase.load(Ordering::Relaxed) as usize;
        if ok {
            tally.ops[p.min(3)] += 1;
            let us = started.elapsed().as_micros() as u64;
            tally.hist[p.min(3)].saturating_record(us.max(1));
        }
    }
    tally
}

/// Reads `key` until `stop`; returns the longest time between two
/// successful reads that spans the kill, and how many reads failed.
fn availability(
    c: &mut Client,
    table: TableId,
    key: &[u8],
    value: &[u8],
    stop: &AtomicBool,
    kill_at: &OnceLock<Instant>,
    limit: Instant,
) -> (Option<Duration>, u64) {
    let mut last_ok: Option<Instant> = None;
    let mut gap = None;
    let mut failures = 0;
    while !stop.load(Ordering::Relaxed) && Instant::now() < limit {
        let ok = matches!(c.read(table, key), Ok((v, _)) if v == value);
        let now = Instant::now();
        if ok {
            if let (Some(last), Some(&kill)) = (last_ok, kill_at.get()) {
                if last <= kill && now > kill {
                    gap = Some(now - last);
                }
            }
            last_ok = Some(now);
        } else {
            failures += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    (gap, failures)
}
