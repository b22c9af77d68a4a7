//! `shoal bench ops`: single-threaded operation rates on a populated store,
//! with latency percentiles.
//!
//! The store is filled with N objects (10-byte keys) through multi_write,
//! then four timed phases run in order: reads of random existing keys,
//! overwrites of random existing keys, inserts of new keys, and removes of
//! those new keys in random order. Each phase is bounded by --ops and
//! --max-secs. Throughput is ops / wall time of the phase; every fourth op
//! is timed on its own for the latency histogram, so the clock reads cost
//! the throughput little.
//!
//! With `--chunks`: the same four phases on chunks (read, put, create,
//! remove of random ids; created 1,024 per call to populate) and on
//! key-value objects with 8-byte keys, for DXRAM's comparison of a chunk
//! table's CID table against the hash table without a network in between.
//! The chunk phases pick ids from the array their creates returned; the
//! key-value phases compute their keys, or with `--held-keys` pick them
//! from an array too, so that both pay the same load outside the store.

use super::{emit_json, fit_memory, positive, store_config, Table, MIB};
use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use shoal_bench_baseline::key_of;
use shoal_engine::format::object_len;
use shoal_engine::{ChunkId, RejectRules, Store, StoreError, TableId, Version, WriteOp};
use std::time::{Duration, Instant};

const TABLE: TableId = TableId(1);
const TIME_EVERY: u64 = 4;

/// Options of `shoal bench ops`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Objects in the store before the timed phases.
    #[arg(long, default_value_t = 1_000_000)]
    pub objects: u64,
    /// Value size in bytes (keys are 10 bytes).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Most ops per phase (default: --objects).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Most seconds per phase.
    #[arg(long, default_value_t = 10.0)]
    pub max_secs: f64,
    /// Seed of the key choices.
    #[arg(long, default_value_t = 0x5ea1)]
    pub seed: u64,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Chunks against key-value objects with 8-byte keys, one after the
    /// other, each in a fresh store (the values are the chunks' payloads).
    #[arg(long)]
    pub chunks: bool,
    /// With --chunks: the key-value phases also pick the keys they read
    /// and overwrite from an array of the keys held in memory (kind
    /// "kv8-held"), as the chunk phases pick ids from the array their
    /// creates returned, so that both pay the same load per op outside
    /// the store (an 8 MB array for 1 M items).
    #[arg(long, requires = "chunks")]
    pub held_keys: bool,
}

/// One phase's rate and latencies.
#[derive(Clone, Debug, Serialize)]
pub struct OpsResult {
    pub bench: &'static str,
    /// "kv" (10-byte keys), "kv8" (8-byte keys) or "chunks".
    pub kind: &'static str,
    /// "read", "overwrite", "insert" or "remove".
    pub op: &'static str,
    pub objects: u64,
    pub value_bytes: usize,
    pub ops: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    pub latency_samples: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// `None` when the phase completed.
    pub error: Option<String>,
}

/// Runs `op(i)` for i in 0..max until `time` passed; times every
/// [`TIME_EVERY`]th call. Stops at the first error.
fn phase(name: &'static str, max: u64, time: Duration, mut op: impl FnMut(u64) -> Result<(), StoreError>) -> OpsResult {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    let mut error = None;
    let started = Instant::now();
    let mut i = 0;
    while i < max {
        if i % 256 == 0 && started.elapsed() >= time {
            break;
        }
        let res = if i % TIME_EVERY == 0 {
            let t = Instant::now();
            let res = op(i);
            hist.saturating_record((t.elapsed().as_nanos() as u64).max(1));
            res
        } else {
            op(i)
        };
        if let Err(e) = res {
            error = Some(format!("{name} {i}: {e}"));
            break;
        }
        i += 1;
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    OpsResult {
        bench: "ops",
        kind: "kv",
        op: name,
        objects: 0,
        value_bytes: 0,
        ops: i,
        secs,
        ops_per_sec: i as f64 / secs,
        latency_samples: hist.len(),
        p50_ns: hist.value_at_quantile(0.5),
        p99_ns: hist.value_at_quantile(0.99),
        p999_ns: hist.value_at_quantile(0.999),
        max_ns: hist.max(),
        error,
    }
}

fn print_table(results: &[OpsResult]) {
    let mut t =
        Table::new(&["kind", "op", "ops", "secs", "ops/s", "p50 ns", "p99 ns", "p99.9 ns", "max ns", "error"], 2);
    for r in results {
        t.row(vec![
            r.kind.to_string(),
            r.op.to_string(),
            r.ops.to_string(),
            format!("{:.2}", r.secs),
            format!("{:.0}", r.ops_per_sec),
            r.p50_ns.to_string(),
            r.p99_ns.to_string(),
            r.p999_ns.to_string(),
            r.max_ns.to_string(),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
}

/// Runs the benchmark; false if a phase failed.
pub fn run(args: &Args) -> Result<bool, String> {
    if args.objects == 0 {
        return Err("--objects must be positive".into());
    }
    if !positive(args.max_secs) {
        return Err("--max-secs must be positive".into());
    }
    let mut results = if args.chunks {
        let mut r = run_chunks(args)?;
        let kind = if args.held_keys { "kv8-held" } else { "kv8" };
        r.extend(run_kv(args, kind, |i: u64| i.to_le_bytes())?);
        r
    } else {
        run_kv(args, "kv", key_of)?
    };
    for r in &mut results {
        r.objects = args.objects;
        r.value_bytes = args.value_size;
    }
    if args.json {
        results.iter().for_each(emit_json);
    } else {
        print_table(&results);
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}

/// The four phases on key-value objects with keys `key(i)`.
fn run_kv<K: AsRef<[u8]> + Clone>(
    args: &Args,
    kind: &'static str,
    key: fn(u64) -> K,
) -> Result<Vec<OpsResult>, String> {
    let n = args.objects;
    let max_ops = args.ops.unwrap_or(n);
    let time = Duration::from_secs_f64(args.max_secs);
    let key_len = key(0).as_ref().len();
    let entry = object_len(TABLE, Version(1), key_len, args.value_size);
    let (segment, seglet) = (8 << 20, 64 << 10);
    // Room for three times the live data: the cleaner keeps up without pressure.
    let memory = fit_memory(3 * (n + max_ops) * entry as u64, segment, seglet, Some(entry))?;
    let store = Store::new(store_config(memory, segment, seglet, Some(entry))).map_err(|e| e.to_string())?;
    store.create_table(TABLE);
    if !args.json {
        println!(
            "single-thread op rates ({kind}): {n} objects, {key_len}-byte keys, {}-byte values, memory {:.1} MiB, \
             at most {max_ops} ops and {:.1} s per phase",
            args.value_size,
            memory as f64 / MIB,
            args.max_secs
        );
    }
    eprintln!("ops: populating {n} objects ...");
    let value = vec![b'v'; args.value_size];
    let mut id = 0;
    while id < n {
        let end = (id + 64).min(n);
        let keys: Vec<K> = (id..end).map(key).collect();
        let ops: Vec<WriteOp> =
            keys.iter().map(|k| WriteOp::new(TABLE, k.as_ref(), &value, RejectRules::default())).collect();
        if let Some(e) = store.multi_write(&ops).into_iter().find_map(|r| r.err()) {
            return Err(format!("populating at object {id}: {e}"));
        }
        id = end;
    }
    // The keys of reads and overwrites: computed, or (--held-keys) loaded
    // from an array, as the chunk phases load ids.
    let held: Vec<K> = if args.held_keys { (0..n).map(key).collect() } else { Vec::new() };
    let pick = |i: u64| if held.is_empty() { key(i) } else { held[i as usize].clone() };
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut results = Vec::new();
    let mut buf = Vec::with_capacity(args.value_size);
    eprintln!("ops: reads ...");
    results.push(phase("read", max_ops, time, |_| {
        store.read_into(TABLE, pick(rng.gen_range(0..n)).as_ref(), RejectRules::default(), &mut buf).map(|_| ())
    }));
    eprintln!("ops: overwrites ...");
    results.push(phase("overwrite", max_ops, time, |_| {
        store.write(TABLE, pick(rng.gen_range(0..n)).as_ref(), &value, RejectRules::default()).map(|_| ())
    }));
    eprintln!("ops: inserts ...");
    let insert = phase("insert", max_ops, time, |i| {
        store.write(TABLE, key(n + i).as_ref(), &value, RejectRules::must_not_exist()).map(|_| ())
    });
    let mut inserted: Vec<u64> = (n..n + insert.ops).collect();
    results.push(insert);
    inserted.shuffle(&mut rng);
    eprintln!("ops: removes ...");
    results.push(phase("remove", inserted.len() as u64, time, |i| {
        store.remove(TABLE, key(inserted[i as usize]).as_ref(), RejectRules::must_exist()).map(|_| ())
    }));
    for r in &mut results {
        r.kind = kind;
    }
    Ok(results)
}

/// The four phases on chunks: reads and puts of random ids, creates one
/// at a time, removes of the created ones in random order.
fn run_chunks(args: &Args) -> Result<Vec<OpsResult>, String> {
    let n = args.objects;
    let max_ops = args.ops.unwrap_or(n);
    let time = Duration::from_secs_f64(args.max_secs);
    let entry = shoal_engine::format::chunk_len(TABLE, ChunkId::new(0, n + max_ops), Version(1), args.value_size);
    let (segment, seglet) = (8 << 20, 64 << 10);
    let memory = fit_memory(3 * (n + max_ops) * entry as u64, segment, seglet, None)?;
    let store = Store::new(store_config(memory, segment, seglet, None)).map_err(|e| e.to_string())?;
    store.create_table(TABLE);
    if !args.json {
        println!(
            "single-thread op rates (chunks): {n} chunks of {} bytes, memory {:.1} MiB, at most {max_ops} ops and \
             {:.1} s per phase",
            args.value_size,
            memory as f64 / MIB,
            args.max_secs
        );
    }
    eprintln!("ops: creating {n} chunks ...");
    let value = vec![b'v'; args.value_size];
    let mut ids: Vec<ChunkId> = Vec::with_capacity(n as usize);
    while (ids.len() as u64) < n {
        let k = (n - ids.len() as u64).min(1024) as usize;
        let payloads = vec![value.as_slice(); k];
        ids.extend(store.create_chunks(TABLE, 0, &payloads).map_err(|e| format!("creating chunks: {e}"))?);
    }
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut results = Vec::new();
    let mut buf = Vec::with_capacity(args.value_size);
    eprintln!("ops: chunk reads ...");
    results.push(phase("read", max_ops, time, |_| {
        store.get_chunk_into(TABLE, ids[rng.gen_range(0..n) as usize], &mut buf).map(|_| ())
    }));
    eprintln!("ops: chunk puts ...");
    results.push(phase("overwrite", max_ops, time, |_| {
        store.put_chunk(TABLE, ids[rng.gen_range(0..n) as usize], &value).map(|_| ())
    }));
    eprintln!("ops: chunk creates ...");
    let mut created = Vec::new();
    let insert = phase("insert", max_ops, time, |_| {
        created.push(store.create_chunk(TABLE, 0, &value)?);
        Ok(())
    });
    results.push(insert);
    created.shuffle(&mut rng);
    eprintln!("ops: chunk removes ...");
    results.push(phase("remove", created.len() as u64, time, |i| {
        store.remove_chunk(TABLE, created[i as usize]).map(|_| ())
    }));
    for r in &mut results {
        r.kind = "chunks";
    }
    Ok(results)
}
