//! `shoal bench overhead`: memory per small object beyond its key and value
//! (DXRAM's workload: 16-byte keys, 32-byte values), from the store's
//! statistics and from the process' RSS. With `--chunks`: memory per chunk
//! beyond its payload (chunk entry headers, CID table, seglet slack) for
//! payloads of 16, 32, 64 and 128 bytes, against key-value objects of the
//! same values with 8-byte keys (`docs/chunks.md`); with `--redis` and
//! `--memcached`, against those stores holding as many items with 8-byte
//! keys, by their own accounting and by their RSS (`super::peers`).

use super::peers::{self, Peer, PeerKind};
use super::{emit_json, fit_memory, store_config, Table, MIB};
use clap::Args as ClapArgs;
use serde::Serialize;
use shoal_bench_baseline::rss::rss_bytes;
use shoal_engine::format::object_len;
use shoal_engine::{RejectRules, Store, TableId, Version, WriteOp};
use std::time::Instant;

const KEY: usize = 16;
const VALUE: usize = 32;
const BATCH: usize = 64;
const TABLE: TableId = TableId(1);

/// Options of `shoal bench overhead`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Objects loaded through multi_write batches of 64.
    #[arg(long, default_value_t = 10_000_000)]
    pub objects: u64,
    /// Objects loaded one `write` at a time into a second store (0: skip;
    /// default: a tenth of --objects).
    #[arg(long)]
    pub single_objects: Option<u64>,
    /// Store memory per object, in bytes (rounded up to whole segments).
    #[arg(long, default_value_t = 80)]
    pub memory_per_object: u64,
    /// Plan a fixed hash table for objects of this entry size (8 per
    /// bucket, for a memory full of them) instead of the default table that
    /// grows with the objects.
    #[arg(long)]
    pub expected_object_bytes: Option<usize>,
    /// Segment size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub segment_kib: usize,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Chunks instead: --objects chunks of each of --chunk-sizes bytes,
    /// created 1024 per call, against as many key-value objects of the
    /// same values with 8-byte keys (64 per multi_write). Memory per item
    /// beyond its payload (an object's key counted in), from the store's statistics.
    #[arg(long)]
    pub chunks: bool,
    /// Payload sizes for --chunks.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128")]
    pub chunk_sizes: Vec<usize>,
    /// With --chunks: a Redis server to load as many items into, for each
    /// size (8-byte keys, pipelined SETs, FLUSHALL and MEMORY PURGE before
    /// each size), reporting its memory per item beyond key and value from
    /// INFO memory's used_memory and from its RSS (when it runs on this
    /// machine). Its data is lost.
    #[arg(long, value_name = "HOST:PORT", requires = "chunks")]
    pub redis: Option<String>,
    /// With --chunks: a memcached to load as many items into, for each
    /// size (8-byte keys, pipelined sets, flush_all before each size),
    /// reporting its memory per item beyond key and value from its stats
    /// (bytes + hash_bytes; slab chunks in use + hash_bytes) and from its
    /// RSS (when it runs on this machine). Its data is lost. flush_all
    /// leaves the flushed items counted, so only the first size is
    /// measured on one memcached: give each size a fresh one (one size
    /// per run; bench/overhead.sh does).
    #[arg(long, value_name = "HOST:PORT", requires = "chunks")]
    pub memcached: Option<String>,
}

/// One load of N objects into a fresh store.
#[derive(Clone, Debug, Serialize)]
pub struct OverheadResult {
    pub bench: &'static str,
    /// "multi_write x64" or "write".
    pub load: &'static str,
    pub objects: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub memory_bytes: u64,
    pub seglets_in_use: u64,
    pub seglet_bytes: u64,
    pub hash_table_bytes: u64,
    pub live_bytes: u64,
    pub live_key_value_bytes: u64,
    pub load_secs: f64,
    pub objects_per_sec: f64,
    /// (seglets in use x seglet size + hash table - keys and values) / N.
    pub stats_bytes_per_object: f64,
    /// (live entry bytes - keys and values) / N: entry headers alone.
    pub entry_overhead_per_object: f64,
    /// Hash table bytes / N.
    pub hash_table_per_object: f64,
    /// entry_overhead_per_object + hash_table_per_object (the log's actual bytes, no seglet slack).
    pub log_bytes_per_object: f64,
    pub rss_before_bytes: u64,
    pub rss_after_bytes: u64,
    /// (RSS after the load - RSS before creating the store - keys and values) / N.
    pub rss_bytes_per_object: f64,
    pub target_bytes_per_object: f64,
    /// `None` when the load completed.
    pub error: Option<String>,
}

fn key_of(i: u64) -> [u8; KEY] {
    let mut k = [b'0'; KEY];
    let mut n = i;
    for d in k.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

fn value_of(i: u64) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for c in v.chunks_mut(8) {
        c.copy_from_slice(&i.to_le_bytes());
    }
    v
}

/// Loads `n` objects into `store`, in batches of 64 or one at a time.
fn load(store: &Store, n: u64, batched: bool) -> Result<(), String> {
    let mut i = 0;
    while i < n {
        if batched {
            let end = (i + BATCH as u64).min(n);
            let keys: Vec<[u8; KEY]> = (i..end).map(key_of).collect();
            let values: Vec<[u8; VALUE]> = (i..end).map(value_of).collect();
            let ops: Vec<WriteOp> =
                keys.iter().zip(&values).map(|(k, v)| WriteOp::new(TABLE, k, v, RejectRules::default())).collect();
            if let Some(e) = store.multi_write(&ops).into_iter().find_map(|r| r.err()) {
                return Err(format!("multi_write at object {i}: {e}"));
            }
            i = end;
        } else {
            store
                .write(TABLE, &key_of(i), &value_of(i), RejectRules::default())
                .map_err(|e| format!("write of object {i}: {e}"))?;
            i += 1;
        }
    }
    Ok(())
}

fn run_one(args: &Args, n: u64, batched: bool) -> OverheadResult {
    let segment = args.segment_kib << 10;
    let expected = args.expected_object_bytes;
    let mut r = OverheadResult {
        bench: "overhead",
        load: if batched { "multi_write x64" } else { "write" },
        objects: n,
        key_bytes: KEY,
        value_bytes: VALUE,
        memory_bytes: 0,
        seglets_in_use: 0,
        seglet_bytes: 0,
        hash_table_bytes: 0,
        live_bytes: 0,
        live_key_value_bytes: 0,
        load_secs: 0.0,
        objects_per_sec: 0.0,
        stats_bytes_per_object: 0.0,
        entry_overhead_per_object: 0.0,
        hash_table_per_object: 0.0,
        log_bytes_per_object: 0.0,
        rss_before_bytes: 0,
        rss_after_bytes: 0,
        rss_bytes_per_object: 0.0,
        target_bytes_per_object: 24.0,
        error: None,
    };
    let memory = match fit_memory(n * args.memory_per_object, segment, 64 << 10, expected) {
        Ok(m) => m,
        Err(e) => {
            r.error = Some(e);
            return r;
        }
    };
    r.rss_before_bytes = rss_bytes();
    let store = match Store::new(store_config(memory, segment, 64 << 10, expected)) {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    store.create_table(TABLE);
    let started = Instant::now();
    let loaded = load(&store, n, batched);
    r.load_secs = started.elapsed().as_secs_f64();
    r.rss_after_bytes = rss_bytes();
    r.objects_per_sec = n as f64 / r.load_secs.max(1e-9);
    let s = store.stats();
    r.memory_bytes = s.memory_bytes;
    r.seglets_in_use = s.seglets_in_use;
    r.seglet_bytes = s.seglet_bytes;
    r.hash_table_bytes = s.hash_table_bytes;
    r.live_bytes = s.live_bytes;
    r.live_key_value_bytes = s.live_key_value_bytes;
    let per = |b: f64| b / n.max(1) as f64;
    let kv = s.live_key_value_bytes as f64;
    r.stats_bytes_per_object = per((s.seglets_in_use * s.seglet_bytes + s.hash_table_bytes) as f64 - kv);
    r.entry_overhead_per_object = per(s.live_bytes as f64 - kv);
    r.hash_table_per_object = per(s.hash_table_bytes as f64);
    r.log_bytes_per_object = r.entry_overhead_per_object + r.hash_table_per_object;
    r.rss_bytes_per_object =
        per(r.rss_after_bytes as f64 - r.rss_before_bytes as f64 - (n * (KEY + VALUE) as u64) as f64);
    r.error = loaded.err();
    r
}

fn print_table(results: &[OverheadResult]) {
    let mut t = Table::new(
        &[
            "load",
            "objects",
            "memory MiB",
            "hash MiB",
            "secs",
            "objects/s",
            "stats B/obj",
            "entry hdr B/obj",
            "hash B/obj",
            "log B/obj",
            "RSS B/obj",
            "target",
            "error",
        ],
        1,
    );
    for r in results {
        t.row(vec![
            r.load.to_string(),
            r.objects.to_string(),
            format!("{:.1}", r.memory_bytes as f64 / MIB),
            format!("{:.1}", r.hash_table_bytes as f64 / MIB),
            format!("{:.2}", r.load_secs),
            format!("{:.0}", r.objects_per_sec),
            format!("{:.2}", r.stats_bytes_per_object),
            format!("{:.2}", r.entry_overhead_per_object),
            format!("{:.2}", r.hash_table_per_object),
            format!("{:.2}", r.log_bytes_per_object),
            format!("{:.2}", r.rss_bytes_per_object),
            format!("<={}", r.target_bytes_per_object),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!(
        "stats = (seglets in use x seglet + hash table - keys - values) / N; log = entry headers + hash table, \
         without seglet slack; RSS = (RSS after load - RSS before the store - keys - values) / N"
    );
}

/// One load of N chunks, or of N key-value objects with 8-byte keys, of
/// one payload size (`--chunks`).
#[derive(Clone, Debug, Serialize)]
pub struct ChunkOverhead {
    pub bench: &'static str,
    /// "chunks" or "kv 8-byte keys".
    pub kind: &'static str,
    pub items: u64,
    pub payload_bytes: usize,
    pub memory_bytes: u64,
    pub seglets_in_use: u64,
    pub seglet_bytes: u64,
    /// The CID table (chunks) or the hash table (key-value objects).
    pub index_bytes: u64,
    pub live_bytes: u64,
    pub load_secs: f64,
    /// (live entry bytes - payloads) / N: entry headers (and keys).
    pub entry_overhead_per_item: f64,
    /// Index bytes / N.
    pub index_per_item: f64,
    /// Entry headers (and keys) + index: the bytes an item costs beyond
    /// its payload in a log without seglet slack.
    pub log_bytes_per_item: f64,
    /// (seglets in use x seglet + index - payloads) / N: with the
    /// slack of partly filled seglets and the head segment.
    pub stats_bytes_per_item: f64,
    pub target_bytes_per_item: f64,
    pub error: Option<String>,
}

const CHUNK_TABLE: TableId = TableId(2);
const CHUNK_BATCH: usize = 1024;

fn run_chunks_one(args: &Args, size: usize, chunks: bool) -> ChunkOverhead {
    let n = args.objects;
    let segment = args.segment_kib << 10;
    let key = if chunks { 0 } else { 8 };
    let entry = if chunks {
        shoal_engine::format::chunk_len(CHUNK_TABLE, shoal_engine::ChunkId::new(0, n.max(1)), Version(1), size)
    } else {
        object_len(TABLE, Version(1), key, size)
    };
    let mut r = ChunkOverhead {
        bench: "overhead_chunks",
        kind: if chunks { "chunks" } else { "kv 8-byte keys" },
        items: n,
        payload_bytes: size,
        memory_bytes: 0,
        seglets_in_use: 0,
        seglet_bytes: 0,
        index_bytes: 0,
        live_bytes: 0,
        load_secs: 0.0,
        entry_overhead_per_item: 0.0,
        index_per_item: 0.0,
        log_bytes_per_item: 0.0,
        stats_bytes_per_item: 0.0,
        target_bytes_per_item: if chunks { 10.0 } else { f64::NAN },
        error: None,
    };
    // Room for every entry plus a quarter, so that the cleaner stays idle.
    let want = n * (entry as u64 + entry as u64 / 4 + 8);
    let memory = match fit_memory(want, segment, 64 << 10, args.expected_object_bytes) {
        Ok(m) => m,
        Err(e) => {
            r.error = Some(e);
            return r;
        }
    };
    let store = match Store::new(store_config(memory, segment, 64 << 10, args.expected_object_bytes)) {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    let table = if chunks { CHUNK_TABLE } else { TABLE };
    store.create_table(table);
    let payload = vec![0xa5u8; size];
    let started = Instant::now();
    let mut i = 0u64;
    while i < n && r.error.is_none() {
        if chunks {
            let end = (i + CHUNK_BATCH as u64).min(n);
            let payloads = vec![payload.as_slice(); (end - i) as usize];
            if let Err(e) = store.create_chunks(table, 0, &payloads) {
                r.error = Some(format!("create_chunks at chunk {i}: {e}"));
            }
            i = end;
        } else {
            let end = (i + BATCH as u64).min(n);
            let keys: Vec<[u8; 8]> = (i..end).map(|k| k.to_le_bytes()).collect();
            let ops: Vec<WriteOp> =
                keys.iter().map(|k| WriteOp::new(table, k, &payload, RejectRules::default())).collect();
            if let Some(e) = store.multi_write(&ops).into_iter().find_map(|r| r.err()) {
                r.error = Some(format!("multi_write at object {i}: {e}"));
            }
            i = end;
        }
    }
    r.load_secs = started.elapsed().as_secs_f64();
    let s = store.stats();
    r.memory_bytes = s.memory_bytes;
    r.seglets_in_use = s.seglets_in_use;
    r.seglet_bytes = s.seglet_bytes;
    r.index_bytes = if chunks { s.cid_table_bytes } else { s.hash_table_bytes };
    r.live_bytes = s.live_bytes;
    let per = |b: f64| b / n.max(1) as f64;
    // Beyond the payloads: a key-value object's key counts as overhead.
    let data = (n * size as u64) as f64;
    r.entry_overhead_per_item = per(s.live_bytes as f64 - data);
    r.index_per_item = per(r.index_bytes as f64);
    r.log_bytes_per_item = r.entry_overhead_per_item + r.index_per_item;
    r.stats_bytes_per_item = per((s.seglets_in_use * s.seglet_bytes + r.index_bytes) as f64 - data);
    r
}

/// One load of N items with 8-byte keys into Redis or memcached, of one
/// value size (`--chunks --redis/--memcached`).
#[derive(Clone, Debug, Serialize)]
pub struct PeerOverhead {
    pub bench: &'static str,
    /// "redis" or "memcached".
    pub kind: &'static str,
    pub server: String,
    pub items: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub load_secs: f64,
    /// Items the peer held before (after the flush) and after the load.
    pub items_before: u64,
    pub items_after: u64,
    /// The peer's own count (Redis used_memory; memcached bytes +
    /// hash_bytes) before and after the load.
    pub own_before_bytes: u64,
    pub own_after_bytes: u64,
    /// (own after - own before) / N - key - value.
    pub own_bytes_per_item: f64,
    /// memcached: (slab chunks in use + hash_bytes, after - before) / N -
    /// key - value: with the slack of its slab classes.
    pub slab_bytes_per_item: Option<f64>,
    pub rss_before_bytes: Option<u64>,
    pub rss_after_bytes: Option<u64>,
    /// (RSS after - RSS before) / N - key - value, when the peer runs here.
    pub rss_bytes_per_item: Option<f64>,
    pub error: Option<String>,
}

/// Empties the peer, loads `args.objects` items of `size` bytes, and
/// measures what it holds before and after.
fn run_peer_one(args: &Args, kind: PeerKind, server: &str, size: usize) -> PeerOverhead {
    let n = args.objects;
    let mut r = PeerOverhead {
        bench: "overhead_chunks_peer",
        kind: kind.name(),
        server: server.to_string(),
        items: n,
        key_bytes: 8,
        value_bytes: size,
        load_secs: 0.0,
        items_before: 0,
        items_after: 0,
        own_before_bytes: 0,
        own_after_bytes: 0,
        own_bytes_per_item: 0.0,
        slab_bytes_per_item: None,
        rss_before_bytes: None,
        rss_after_bytes: None,
        rss_bytes_per_item: None,
        error: None,
    };
    let measured = (|| -> Result<(), String> {
        let addr = peers::resolve(server)?;
        let mut peer = Peer::connect(kind, addr)?;
        peer.flush()?;
        let before = peer.accounting()?;
        r.items_before = before.items;
        if kind == PeerKind::Memcached && before.items > 0 {
            // flush_all leaves the items counted (and their memory held)
            // until memcached reclaims them, as new sets do: the growth
            // would be net of that.
            return Err(format!(
                "memcached holds {} items after flush_all: measure each size on a fresh memcached \
                 (bench/overhead.sh does)",
                before.items
            ));
        }
        let started = Instant::now();
        peers::load(kind, addr, n, size)?;
        r.load_secs = started.elapsed().as_secs_f64();
        let after = peer.accounting()?;
        let per = |a: u64, b: u64| (a as f64 - b as f64) / n as f64 - (8 + size) as f64;
        r.items_after = after.items;
        r.own_before_bytes = before.bytes;
        r.own_after_bytes = after.bytes;
        r.own_bytes_per_item = per(after.bytes, before.bytes);
        r.slab_bytes_per_item = after.slab_bytes.zip(before.slab_bytes).map(|(a, b)| per(a, b));
        r.rss_before_bytes = before.rss_bytes;
        r.rss_after_bytes = after.rss_bytes;
        r.rss_bytes_per_item = after.rss_bytes.zip(before.rss_bytes).map(|(a, b)| per(a, b));
        if after.items != n {
            return Err(format!("{} holds {} items after loading {n}", kind.name(), after.items));
        }
        Ok(())
    })();
    r.error = measured.err();
    r
}

fn print_peers(results: &[PeerOverhead]) {
    let mut t = Table::new(
        &["kind", "value B", "items", "secs", "items before", "own MiB", "own B", "slab B", "RSS B", "error"],
        1,
    );
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
    for r in results {
        t.row(vec![
            r.kind.to_string(),
            r.value_bytes.to_string(),
            r.items.to_string(),
            format!("{:.2}", r.load_secs),
            r.items_before.to_string(),
            format!("{:.1}", (r.own_after_bytes as f64 - r.own_before_bytes as f64) / MIB),
            format!("{:.2}", r.own_bytes_per_item),
            opt(r.slab_bytes_per_item),
            opt(r.rss_bytes_per_item),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!(
        "per item beyond its 8-byte key and value, growth over the load / N: own = the store's own count \
         (Redis used_memory; memcached stats bytes + hash_bytes); slab = memcached's slab chunks in use + \
         hash_bytes (with slab-class slack); RSS = growth of the process' VmRSS; items before = what the \
         store held after the flush"
    );
}

fn run_chunks(args: &Args) -> Result<bool, String> {
    if args.chunk_sizes.is_empty() || args.chunk_sizes.iter().any(|&s| s == 0 || s > 1 << 20) {
        return Err("--chunk-sizes must be sizes of 1 byte to 1 MiB".into());
    }
    if !args.json {
        println!(
            "per-chunk overhead (DXRAM): {} items of each size, chunks against key-value objects with 8-byte keys, \
             {} KiB segments",
            args.objects, args.segment_kib
        );
    }
    let peer_list: Vec<(PeerKind, &String)> = [(PeerKind::Redis, &args.redis), (PeerKind::Memcached, &args.memcached)]
        .into_iter()
        .filter_map(|(k, a)| a.as_ref().map(|a| (k, a)))
        .collect();
    let mut results = Vec::new();
    let mut peer_results = Vec::new();
    for &size in &args.chunk_sizes {
        for &(kind, server) in &peer_list {
            eprintln!("overhead: loading {} items of 8 + {size} B into {} at {server} ...", args.objects, kind.name());
            let r = run_peer_one(args, kind, server, size);
            if let Some(e) = &r.error {
                eprintln!("overhead: FAILED: {e}");
            }
            if args.json {
                emit_json(&r);
            }
            peer_results.push(r);
        }
        for chunks in [true, false] {
            eprintln!(
                "overhead: loading {} {} of {size} B ...",
                args.objects,
                if chunks { "chunks" } else { "objects" }
            );
            let r = run_chunks_one(args, size, chunks);
            if let Some(e) = &r.error {
                eprintln!("overhead: FAILED: {e}");
            }
            if args.json {
                emit_json(&r);
            }
            results.push(r);
        }
    }
    if !args.json {
        let mut t = Table::new(
            &[
                "kind",
                "payload B",
                "items",
                "memory MiB",
                "index MiB",
                "secs",
                "entry hdr B",
                "index B",
                "log B",
                "stats B",
                "target",
                "error",
            ],
            1,
        );
        for r in &results {
            t.row(vec![
                r.kind.to_string(),
                r.payload_bytes.to_string(),
                r.items.to_string(),
                format!("{:.1}", r.memory_bytes as f64 / MIB),
                format!("{:.1}", r.index_bytes as f64 / MIB),
                format!("{:.2}", r.load_secs),
                format!("{:.2}", r.entry_overhead_per_item),
                format!("{:.2}", r.index_per_item),
                format!("{:.2}", r.log_bytes_per_item),
                format!("{:.2}", r.stats_bytes_per_item),
                if r.target_bytes_per_item.is_nan() { "-".into() } else { format!("<={}", r.target_bytes_per_item) },
                r.error.clone().unwrap_or_default(),
            ]);
        }
        print!("{}", t.render());
        println!(
            "per item beyond its payload: entry hdr = entry headers (and the 8-byte keys of objects); index = CID \
             table (chunks) or hash table (objects); log = entry hdr + index; stats = seglets in use x seglet + \
             index - payloads, with seglet slack"
        );
        if !peer_results.is_empty() {
            println!();
            print_peers(&peer_results);
        }
    }
    Ok(results.iter().all(|r| r.error.is_none()) && peer_results.iter().all(|r| r.error.is_none()))
}

/// Runs the benchmark; false if a load failed.
pub fn run(args: &Args) -> Result<bool, String> {
    if args.objects == 0 {
        return Err("--objects must be positive".into());
    }
    if args.chunks {
        return run_chunks(args);
    }
    let single = args.single_objects.unwrap_or(args.objects / 10);
    if !args.json {
        println!(
            "per-object overhead (DXRAM small objects): {KEY}-byte keys, {VALUE}-byte values, \
             memory {} B/object, {} KiB segments",
            args.memory_per_object, args.segment_kib
        );
    }
    let mut results = Vec::new();
    for (n, batched) in [(args.objects, true), (single, false)] {
        if n == 0 {
            continue;
        }
        eprintln!("overhead: loading {n} objects with {} ...", if batched { "multi_write" } else { "write" });
        let r = run_one(args, n, batched);
        if let Some(e) = &r.error {
            eprintln!("overhead: FAILED: {e}");
        }
        if args.json {
            emit_json(&r);
        }
        results.push(r);
    }
    if !args.json {
        print_table(&results);
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}
