//! Memory-benchmark worker: a `HashMap<Vec<u8>, Vec<u8>>` over jemalloc
//! (default configuration). Reads an op stream on stdin; see `--help`.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    std::process::exit(shoal_bench_baseline::baseline_main("hashmap-jemalloc"));
}
