//! Memory-benchmark worker: a `HashMap<Vec<u8>, Vec<u8>>` over the system
//! allocator. Reads an op stream on stdin; see `--help`.

fn main() {
    std::process::exit(shoal_bench_baseline::baseline_main("hashmap-sys"));
}
