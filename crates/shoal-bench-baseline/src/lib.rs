//! The memory-efficiency benchmark's shared parts (Rumble thesis Table 3.1):
//! the workloads W1..W8 and their deterministic op generator, the binary op
//! stream that carries them to worker processes, the worker loop that
//! applies ops to a key-value target while sampling its own RSS, and the
//! report a worker prints.
//!
//! Every engine (Shoal's store, and a `HashMap` over the system allocator or
//! jemalloc in this crate's two binaries) runs in its own process and reads
//! the same op stream from stdin. The generator runs in the parent, so its
//! bookkeeping (one entry per live object) never inflates a worker's RSS.
//! Servers reached over the network (Shoal's Redis port, redis-server,
//! memcached) are driven by the same loop ([`run_ops`]) in the parent,
//! sampling the server process' RSS instead of its own.

pub mod rss;
pub mod worker;
pub mod workload;

pub use worker::{baseline_main, run_ops, run_worker, HashMapTarget, PhaseSample, Target, WorkerReport};
pub use workload::{
    fill_value, key_of, write_ops, Generator, Op, OpReader, SizeDist, WorkloadParams, WorkloadSpec, KEY_BYTES,
    WORKLOADS,
};
