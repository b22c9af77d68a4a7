//! `shoal bench utilization`: single-threaded overwrite throughput against
//! memory utilisation, with the cleaner thread running (Rumble thesis
//! Fig. 8.1, without replication).
//!
//! For each object size, key distribution and utilisation: a new store of M
//! bytes is filled with N objects whose entries make up util% of M, then
//! overwrites pick keys from the distribution, first as a warm-up (until
//! the bytes written exceed the free memory, so the cleaner is in its
//! steady state) and then timed.

use super::zipf::{KeyChooser, Zipfian};
use super::{emit_json, fit_memory, positive, store_config, Table, MIB};
use clap::{Args as ClapArgs, ValueEnum};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use shoal_bench_baseline::{key_of, KEY_BYTES};
use shoal_engine::format::{object_len, tombstone_len};
use shoal_engine::{RejectRules, SegmentId, Store, StoreStats, TableId, Version, WriteOp};
use std::time::{Duration, Instant};

/// Options of `shoal bench utilization`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Size factor: the store has 256 MiB x scale of memory (unless
    /// --memory-mib) and each timed run lasts 5 s x scale (unless --duration).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Print one JSON object per result instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Value sizes in bytes, comma-separated (keys are 10 bytes).
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    pub sizes: Vec<usize>,
    /// Memory utilisations in percent (live object entries / memory), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "30,50,70,80,90")]
    pub utils: Vec<u32>,
    /// Key distributions of the overwrites, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "uniform,zipf")]
    pub dist: Vec<Dist>,
    /// Store memory in MiB (default: 256 x scale, raised to the smallest valid store).
    #[arg(long)]
    pub memory_mib: Option<f64>,
    /// Seconds of timed overwrites per run (default: 5 x scale, at least 0.2);
    /// the warm-up is bounded by the same time.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Most overwrites per run, warm-up and timed phase each.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_overwrites: u64,
    /// Exponent of the Zipfian distribution.
    #[arg(long, default_value_t = 0.99)]
    pub zipf_theta: f64,
    /// Segment size in KiB (default: 8 MiB, or memory / 32 rounded down to a
    /// power of two when that is smaller, at least 256 KiB, so that small
    /// stores are not mostly cleaner reserve).
    #[arg(long)]
    pub segment_kib: Option<usize>,
    /// Seglet size in KiB (default: 64, or segment / 16 when that is smaller).
    #[arg(long)]
    pub seglet_kib: Option<usize>,
    /// Seed of the key choices.
    #[arg(long, default_value_t = 0x5ea1)]
    pub seed: u64,
}

/// How overwrites pick their keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Every object equally likely.
    Uniform,
    /// YCSB's scrambled Zipfian (theta from --zipf-theta).
    Zipf,
}

/// One (size, distribution, utilisation) run.
#[derive(Clone, Debug, Serialize)]
pub struct UtilResult {
    pub bench: &'static str,
    pub value_bytes: usize,
    pub dist: Dist,
    pub target_util_pct: u32,
    pub memory_bytes: u64,
    pub objects: u64,
    /// live_bytes / memory after the fill.
    pub memory_utilisation: f64,
    pub warmup_overwrites: u64,
    pub warmup_secs: f64,
    pub overwrites: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    /// Value bytes overwritten per second, in MB (10^6 bytes).
    pub mb_per_sec: f64,
    /// Write cost of the timed phase: 1 + bytes relocated / bytes the
    /// overwrites appended (objects and the tombstones not left out).
    pub write_cost: f64,
    /// Tombstones the timed phase's overwrites appended, and overwrites
    /// that appended none (`docs/cleaning.md`, "Overwrites in the head need
    /// no tombstone").
    pub tombstones_written: u64,
    pub tombstones_elided: u64,
    /// The store's own cumulative write cost (fill and warm-up included).
    pub store_write_cost: f64,
    pub compactions: u64,
    pub combined_passes: u64,
    pub cleaning_ms: u64,
    pub log_utilisation: f64,
    pub out_of_memory: u64,
    /// `None` when the run completed.
    pub error: Option<String>,
}

/// Throughput at the highest utilisation over throughput at the lowest.
#[derive(Clone, Debug, Serialize)]
pub struct RatioResult {
    pub bench: &'static str,
    pub value_bytes: usize,
    pub dist: Dist,
    pub high_util_pct: u32,
    pub low_util_pct: u32,
    /// `None` when either run failed.
    pub ratio: Option<f64>,
    /// 0.8 for 100-byte objects.
    pub target: Option<f64>,
    pub meets_target: Option<bool>,
}

const TABLE: TableId = TableId(1);

struct Plan {
    memory: usize,
    segment: usize,
    seglet: usize,
    duration: Duration,
}

/// Overwrites keys from `chooser` until `time` passed or `max` were done,
/// checking the clock every 64 ops. Returns (overwrites, elapsed, error).
fn overwrite(
    store: &Store,
    chooser: &KeyChooser,
    rng: &mut StdRng,
    value: &[u8],
    max: u64,
    time: Duration,
) -> (u64, Duration, Option<String>) {
    let started = Instant::now();
    let mut done = 0;
    while done < max {
        if done % 64 == 0 && started.elapsed() >= time {
            break;
        }
        let id = chooser.next(rng);
        if let Err(e) = store.write(TABLE, &key_of(id), value, RejectRules::default()) {
            return (done, started.elapsed(), Some(format!("overwrite {done}: {e}")));
        }
        done += 1;
    }
    (done, started.elapsed(), None)
}

fn run_one(args: &Args, plan: &Plan, size: usize, dist: Dist, util: u32) -> UtilResult {
    let entry = object_len(TABLE, Version(1), KEY_BYTES, size);
    let n = (plan.memory as f64 * util as f64 / 100.0 / entry as f64) as u64;
    let mut r = UtilResult {
        bench: "utilization",
        value_bytes: size,
        dist,
        target_util_pct: util,
        memory_bytes: plan.memory as u64,
        objects: n,
        memory_utilisation: 0.0,
        warmup_overwrites: 0,
        warmup_secs: 0.0,
        overwrites: 0,
        secs: 0.0,
        ops_per_sec: 0.0,
        mb_per_sec: 0.0,
        write_cost: 0.0,
        tombstones_written: 0,
        tombstones_elided: 0,
        store_write_cost: 0.0,
        compactions: 0,
        combined_passes: 0,
        cleaning_ms: 0,
        log_utilisation: 0.0,
        out_of_memory: 0,
        error: None,
    };
    if n == 0 {
        r.error = Some("no object fits".into());
        return r;
    }
    let store = match Store::new(store_config(plan.memory, plan.segment, plan.seglet, Some(entry))) {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    store.create_table(TABLE);
    let value = vec![b'v'; size];
    let mut id = 0;
    while id < n {
        let end = (id + 64).min(n);
        let keys: Vec<[u8; KEY_BYTES]> = (id..end).map(key_of).collect();
        let ops: Vec<WriteOp> = keys.iter().map(|k| WriteOp::new(TABLE, k, &value, RejectRules::default())).collect();
        if let Some(e) = store.multi_write(&ops).into_iter().find_map(|x| x.err()) {
            r.error = Some(format!("fill at object {id} of {n}: {e}"));
            return r;
        }
        id = end;
    }
    r.memory_utilisation = store.stats().memory_utilisation;
    let chooser = match dist {
        Dist::Uniform => KeyChooser::Uniform(n),
        Dist::Zipf => KeyChooser::ScrambledZipfian(Zipfian::new(n, args.zipf_theta)),
    };
    let mut rng = StdRng::seed_from_u64(args.seed ^ ((size as u64) << 32) ^ util as u64);
    let per_op = entry + tombstone_len(TABLE, Version(2), SegmentId(1 << 10), KEY_BYTES);
    // Warm-up: write more than the free memory, so the timed phase finds the cleaner busy.
    let free = plan.memory as f64 * (1.1 - util as f64 / 100.0);
    let warm_max = ((free / per_op as f64) as u64).min(args.max_overwrites);
    let (w, wt, err) = overwrite(&store, &chooser, &mut rng, &value, warm_max, plan.duration);
    r.warmup_overwrites = w;
    r.warmup_secs = wt.as_secs_f64();
    if err.is_some() {
        r.error = err.map(|e| format!("warm-up: {e}"));
        return r;
    }
    let s0 = store.stats();
    let (ops, t, err) = overwrite(&store, &chooser, &mut rng, &value, args.max_overwrites, plan.duration);
    let s1 = store.stats();
    fill_timed(&mut r, &s0, &s1, ops, t);
    r.error = err;
    r
}

fn fill_timed(r: &mut UtilResult, s0: &StoreStats, s1: &StoreStats, ops: u64, t: Duration) {
    let secs = t.as_secs_f64().max(1e-9);
    r.overwrites = ops;
    r.secs = secs;
    r.ops_per_sec = ops as f64 / secs;
    r.mb_per_sec = (ops * r.value_bytes as u64) as f64 / secs / 1e6;
    let appended = (s1.appended_bytes - s0.appended_bytes).max(1) as f64;
    r.write_cost = 1.0 + (s1.bytes_relocated - s0.bytes_relocated) as f64 / appended;
    r.tombstones_written = s1.tombstones_written - s0.tombstones_written;
    r.tombstones_elided = s1.tombstones_elided - s0.tombstones_elided;
    r.store_write_cost = s1.write_cost;
    r.compactions = s1.compactions - s0.compactions;
    r.combined_passes = s1.combined_passes - s0.combined_passes;
    r.cleaning_ms = s1.cleaning_ms - s0.cleaning_ms;
    r.log_utilisation = s1.log_utilisation;
    r.out_of_memory = s1.out_of_memory;
}

fn ratios(args: &Args, results: &[UtilResult]) -> Vec<RatioResult> {
    let (Some(&hi), Some(&lo)) = (args.utils.iter().max(), args.utils.iter().min()) else {
        return Vec::new();
    };
    if hi == lo {
        return Vec::new();
    }
    let mut out = Vec::new();
    for &size in &args.sizes {
        for &dist in &args.dist {
            let tput = |u: u32| {
                results
                    .iter()
                    .find(|r| r.value_bytes == size && r.dist == dist && r.target_util_pct == u && r.error.is_none())
                    .map(|r| r.ops_per_sec)
            };
            let ratio = match (tput(hi), tput(lo)) {
                (Some(h), Some(l)) if l > 0.0 => Some(h / l),
                _ => None,
            };
            let target = (size == 100).then_some(0.8);
            out.push(RatioResult {
                bench: "utilization_ratio",
                value_bytes: size,
                dist,
                high_util_pct: hi,
                low_util_pct: lo,
                ratio,
                target,
                meets_target: target.map(|t| ratio.is_some_and(|r| r >= t)),
            });
        }
    }
    out
}

fn print_tables(results: &[UtilResult], ratios: &[RatioResult]) {
    let mut t = Table::new(
        &[
            "size",
            "dist",
            "util%",
            "actual",
            "objects",
            "overwrites",
            "ops/s",
            "MB/s",
            "w-cost",
            "elided",
            "store w-cost",
            "compact",
            "combined",
            "clean ms",
            "log util",
            "error",
        ],
        2,
    );
    for r in results {
        t.row(vec![
            r.value_bytes.to_string(),
            format!("{:?}", r.dist).to_lowercase(),
            r.target_util_pct.to_string(),
            format!("{:.3}", r.memory_utilisation),
            r.objects.to_string(),
            r.overwrites.to_string(),
            format!("{:.0}", r.ops_per_sec),
            format!("{:.1}", r.mb_per_sec),
            format!("{:.3}", r.write_cost),
            format!("{:.3}", r.tombstones_elided as f64 / (r.tombstones_written + r.tombstones_elided).max(1) as f64),
            format!("{:.3}", r.store_write_cost),
            r.compactions.to_string(),
            r.combined_passes.to_string(),
            r.cleaning_ms.to_string(),
            format!("{:.3}", r.log_utilisation),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!();
    let mut t = Table::new(&["size", "dist", "ratio", "target", "ok"], 2);
    for r in ratios {
        t.row(vec![
            r.value_bytes.to_string(),
            format!("{:?}", r.dist).to_lowercase(),
            match r.ratio {
                Some(x) => format!("{x:.3} (tput@{}% / tput@{}%)", r.high_util_pct, r.low_util_pct),
                None => format!("n/a (a run failed) (tput@{}% / tput@{}%)", r.high_util_pct, r.low_util_pct),
            },
            r.target.map(|t| format!(">={t}")).unwrap_or_default(),
            r.meets_target.map(|m| if m { "yes" } else { "NO" }.to_string()).unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
}

/// Runs the benchmark; false if a run failed.
pub fn run(args: &Args) -> Result<bool, String> {
    if !positive(args.scale) {
        return Err("--scale must be positive".into());
    }
    if args.utils.iter().any(|&u| u == 0 || u >= 100) {
        return Err("--utils must be within 1..=99".into());
    }
    if args.sizes.contains(&0) {
        return Err("--sizes must be positive".into());
    }
    if !(args.zipf_theta > 0.0 && args.zipf_theta < 1.0) {
        return Err("--zipf-theta must be within (0, 1)".into());
    }
    let want = (args.memory_mib.unwrap_or(256.0 * args.scale) * MIB) as u64;
    let segment = match args.segment_kib {
        Some(k) => k << 10,
        None => (1usize << (want / 32).max(1).ilog2()).clamp(256 << 10, 8 << 20),
    };
    let seglet = args.seglet_kib.map_or((64 << 10).min(segment / 16), |k| k << 10);
    let memory = fit_memory(want, segment, seglet, Some(128))?;
    let duration = Duration::from_secs_f64(args.duration.unwrap_or(5.0 * args.scale).max(0.2));
    let plan = Plan { memory, segment, seglet, duration };
    if !args.json {
        println!(
            "overwrite throughput vs memory utilisation (Rumble Fig. 8.1): memory {:.1} MiB, {} KiB segments, \
             {} KiB seglets, {:.1} s per run, 1 writer thread + cleaner thread, no replication",
            memory as f64 / MIB,
            segment >> 10,
            seglet >> 10,
            duration.as_secs_f64()
        );
    }
    let mut results = Vec::new();
    for &size in &args.sizes {
        for &dist in &args.dist {
            for &util in &args.utils {
                eprintln!("utilization: {size} B, {dist:?}, {util}% ...");
                let r = run_one(args, &plan, size, dist, util);
                if let Some(e) = &r.error {
                    eprintln!("utilization: {size} B {dist:?} {util}% FAILED: {e}");
                }
                if args.json {
                    emit_json(&r);
                }
                results.push(r);
            }
        }
    }
    let ratios = ratios(args, &results);
    if args.json {
        ratios.iter().for_each(emit_json);
    } else {
        print_tables(&results, &ratios);
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}
