//! `shoal`: Shoal's command-line tool. It runs servers (`shoal server`,
//! `shoal local`), is a client of a running server (`shoal get/put/...`)
//! and drives the benchmarks (`shoal bench ...`).

mod bench;
mod cli;
mod progress;
mod recovery_watch;
mod serve;
mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Shoal, a distributed in-memory key-value store with log-structured memory
/// (RAMCloud lineage).
#[derive(Parser, Debug)]
#[command(name = "shoal", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Starts a working Shoal cluster on this machine and prints how to connect.
    ///
    /// A coordinator (port 7600; /metrics and the dashboard on 9600) and --servers servers
    /// (default 4; server i on native port 7700+i, Redis port 6380+i,
    /// memcached port 11212+i, backup port 7800+i, /metrics on 9700+i),
    /// each replicating its log to --replicas others, with their data under
    /// --root. Stops cleanly on Ctrl-C; starting it again on the same root
    /// brings every acknowledged write back.
    ///
    /// While it runs it reports servers that exit, and shows the progress
    /// of each crash recovery the coordinator runs for a dead server:
    /// tablet pieces of finished partitions out of all of them (a bar on a
    /// terminal, otherwise a line per tenth and every 5 s on stdout).
    Local(serve::LocalCommand),
    /// Runs a coordinator: cluster membership, tables and tablets, kept in
    /// its data directory.
    Coordinator(shoal_coordinator::CoordinatorArgs),
    /// Runs one Shoal server in the foreground until Ctrl-C or SIGTERM.
    ///
    /// Serves Shoal's native protocol (--native-port, default 7700), the
    /// Redis protocol (--resp-port, default 6380), memcached's
    /// (--memcached-port, default 11212) and, with --metrics-port,
    /// Prometheus metrics on /metrics over HTTP. Options come from the
    /// flags, over an optional TOML file (--config), over the defaults.
    Server(Box<serve::ServerCommand>),
    /// Benchmarks of the master store, and YCSB and streams against a
    /// running server.
    ///
    /// Each is bounded in time and op count, prints an aligned table (or one
    /// JSON object per result with --json), and exits 1 if a run failed (for
    /// example with OutOfMemory) and 2 on bad options; missed targets are
    /// reported, not failures.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The discrete-event simulator of skew at datacenter scale
    /// (Katsarakis Ch. 4) and the recovery-time model.
    ///
    /// `shoal sim run [scenario.toml] [--json]`, `shoal sim sweep NAME
    /// [--plot out.svg]`, `shoal sim recovery`, `shoal sim defaults`.
    /// Exits 1 if a run's throughput did not converge.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Internal: one memory-benchmark run of Shoal's store.
    ///
    /// Reads the op stream on stdin and prints a JSON report line.
    #[command(hide = true)]
    MemoryWorker(bench::memory::WorkerArgs),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Memory efficiency under changing workloads (Rumble Table 3.1, W1..W8).
    ///
    /// Peak and final RSS per live value byte of Shoal's store, of a HashMap
    /// over the system allocator and of one over jemalloc, each run in its
    /// own process on the same deterministic op stream.
    ///
    /// Needs the shoal-baseline-sys and shoal-baseline-jemalloc executables
    /// next to this one (cargo build -p shoal-bench-baseline) unless
    /// --engines shoal. Targets: Shoal's peak RSS / live <= 1.45 on W1-W5,
    /// <= 1.15 on W6-W8.
    Memory(bench::memory::Args),
    /// Overwrite throughput against memory utilisation (Rumble Fig. 8.1).
    ///
    /// One writer thread with the cleaner running, for each value size, key
    /// distribution (uniform, scrambled Zipfian) and utilisation. Reports
    /// throughput@highest / throughput@lowest utilisation; target >= 0.8
    /// for 100-byte values.
    Utilization(bench::utilization::Args),
    /// Memory per small object beyond its key and value (DXRAM workload).
    ///
    /// 16-byte keys, 32-byte values; overhead from store statistics and from
    /// RSS. Target: <= 24 bytes per object. With --chunks: memory per chunk
    /// beyond its payload against key-value objects with 8-byte keys and
    /// (--redis, --memcached) against those stores.
    Overhead(bench::overhead::Args),
    /// Single-thread read, overwrite, insert and remove rates.
    ///
    /// On a populated store, with p50/p99/p99.9 latencies.
    Ops(bench::ops::Args),
    /// YCSB workloads (A, B, C, D, F, and W: write only) against a running
    /// server.
    ///
    /// Closed-loop client threads over Shoal's native protocol, the Redis
    /// protocol (--protocol resp, against Shoal's RESP port or a
    /// redis-server) or memcached's; throughput and p50/p99/p99.9 latency
    /// per operation type. --load fills the records first.
    Ycsb(bench::ycsb::Args),
    /// DXRAM's small-object workloads (Facebook-B, Facebook-F, YCSB-A)
    /// over chunks, key-value tables or Redis.
    ///
    /// Loads the items, then closed-loop client threads do one get or put
    /// at a time for a bounded count and time; throughput and p50/p99 per
    /// operation. Chunks are spread over --chunk-tables chunk tables (one
    /// master each) until chunk-id ranges exist.
    Dxram(bench::dxram::Args),
    /// Crash recovery on real processes: a master filled with --sizes MB,
    /// killed with SIGKILL.
    ///
    /// Time from the kill until its tablets are served again, with each
    /// phase (detection, replica collection, replay, re-replication);
    /// GB/s recovered (target >= 1), linearity in the size, availability of
    /// one of its keys, and (--impact-runs) throughput and p99 of clients of
    /// the other masters during the recovery (target >= 70% kept).
    Recovery(bench::recovery::Args),
    /// Stream append and read-back throughput against a running server
    /// (KerA Fig. 5.7-5.8).
    ///
    /// Creates a fresh stream (--streamlets, --logs per streamlet); P
    /// producers (the client's Producer, own connections, producer ids
    /// 0..P) append batches of --batch records of --record-size bytes with
    /// at most --in-flight requests each, until --records or --duration;
    /// then one Consumer per streamlet reads everything back. Reports
    /// records/s, MB/s and per-batch produce latency p50/p99; with --e2e
    /// the consumers read while producing and report produce-to-consume
    /// latency per record; with --round-trip one record at a time is
    /// produced and read back before the next (Kafka's EndToEndLatency).
    Stream(bench::stream::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Local(args) => return serve::local(args),
        Command::Server(args) => return serve::server(args),
        Command::Coordinator(args) => return serve::coordinator(args),
        Command::Client(cmd) => return cli::run(cmd),
        Command::MemoryWorker(args) => return ExitCode::from(bench::memory::worker(args) as u8),
        Command::Sim(cmd) => sim::run(cmd),
        Command::Bench(BenchCommand::Memory(args)) => bench::memory::run(args),
        Command::Bench(BenchCommand::Utilization(args)) => bench::utilization::run(args),
        Command::Bench(BenchCommand::Overhead(args)) => bench::overhead::run(args),
        Command::Bench(BenchCommand::Ops(args)) => bench::ops::run(args),
        Command::Bench(BenchCommand::Ycsb(args)) => bench::ycsb::run(args),
        Command::Bench(BenchCommand::Dxram(args)) => bench::dxram::run(args),
        Command::Bench(BenchCommand::Recovery(args)) => bench::recovery::run(args),
        Command::Bench(BenchCommand::Stream(args)) => bench::stream::run(args),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("shoal: some runs failed or did not converge (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("shoal: {e}");
            ExitCode::from(2)
        }
    }
}
