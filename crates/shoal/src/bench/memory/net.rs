//! The memory benchmark over the network (`shoal bench memory --over-resp`):
//! each run starts a fresh server process (Shoal's, redis-server or
//! memcached), drives the workload's op stream into it through its client
//! protocol (pipelined SET/DEL over RESP, set/delete over memcached's text
//! protocol) and samples the server's RSS from `/proc`.
//!
//! The ops run in this process ([`run_ops`]); only the server's memory is
//! measured, so the generator's bookkeeping does not count. Every sample
//! waits for the replies of the ops sent so far, so the server has applied
//! them when its RSS is read.

use super::super::peers::resolve;
use super::super::ycsb::wire::{Memcached, Reply, Req, Resp, Wire};
use shoal_bench_baseline::rss::rss_of;
use shoal_bench_baseline::{run_ops, Generator, Target, WorkerReport, WorkloadParams, WorkloadSpec};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Ops sent before the client waits for their replies.
const DEPTH: usize = 64;
/// Longest a server takes to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// After the last op, RSS is sampled once more this much later (a server
/// may give memory back in the background: Shoal's cleaner, jemalloc's decay).
pub const SETTLE: Duration = Duration::from_secs(2);

/// A server started for one run; killed (it is this process' child) and
/// reaped when dropped.
pub struct Server {
    child: Child,
    pub pid: u32,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What to start.
pub enum Spec<'a> {
    /// `shoal server` (this executable) with `memory_bytes` of log, its
    /// Redis port the one used.
    Shoal { memory_bytes: u64 },
    /// `redis-server` (the program at `bin`), persistence off, no memory limit.
    Redis { bin: &'a str },
    /// memcached (the program at `bin`) with `memory_mib` for items: the
    /// runs size it so that nothing is ever evicted.
    Memcached { bin: &'a str, memory_mib: u64 },
}

fn free_port() -> Result<u16, String> {
    shoal_common::os::free_local_port().ok_or_else(|| "no free port on 127.0.0.1".to_string())
}

/// Starts the server `spec` says and waits until it accepts connections.
pub fn start(spec: &Spec<'_>) -> Result<Server, String> {
    let port = free_port()?;
    let mut cmd = match spec {
        Spec::Shoal { memory_bytes } => {
            let exe = std::env::current_exe().map_err(|e| format!("locating the shoal executable: {e}"))?;
            let mut c = Command::new(exe);
            c.arg("server")
                .args(["--listen", "127.0.0.1"])
                .args(["--native-port", &free_port()?.to_string()])
                .args(["--resp-port", &port.to_string()])
                .arg("--no-memcached")
                .args(["--memory", &memory_bytes.to_string()])
                .args(["--log-level", "warn"]);
            c
        }
        Spec::Redis { bin } => {
            let mut c = Command::new(bin);
            c.args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"]);
            c
        }
        Spec::Memcached { bin, memory_mib } => {
            let mut c = Command::new(bin);
            c.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0", "-m", &memory_mib.to_string()]);
            // memcached refuses to run as root without a user to become.
            if shoal_common::os::is_root() {
                c.args(["-u", "root"]);
            }
            c
        }
    };
    let name = format!("{:?}", cmd.get_program());
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {name}: {e}"))?;
    let mut server = Server { pid: child.id(), child, addr: resolve(&format!("127.0.0.1:{port}"))? };
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!("{name} exited at start: {status}"));
        }
        if TcpStream::connect_timeout(&server.addr, Duration::from_millis(200)).is_ok() {
            return Ok(server);
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(format!("{name} did not listen on {} within {START_TIMEOUT:?}", server.addr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A key-value target behind a client protocol, pipelining [`DEPTH`] ops.
struct WireTarget {
    wire: Box<dyn Wire>,
    queued: usize,
}

impl WireTarget {
    fn push(&mut self, req: Req<'_>) -> Result<(), String> {
        self.wire.push(req)?;
        self.queued += 1;
        if self.queued >= DEPTH {
            self.sync()?;
        }
        Ok(())
    }
}

impl Target for WireTarget {
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.push(Req::Set(key, value, 0))
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), String> {
        self.push(Req::Delete(key))
    }

    fn sync(&mut self) -> Result<(), String> {
        if self.queued == 0 {
            return Ok(());
        }
        self.queued = 0;
        let mut refused = None;
        self.wire.exchange(&mut |at, reply| {
            if reply != Reply::Stored && refused.is_none() {
                refused = Some(format!("op {at} of the last round: {reply:?}"));
            }
        })?;
        refused.map_or(Ok(()), Err)
    }
}

/// Drives `spec`'s op stream into `server` over `memcached`'s protocol or
/// RESP, sampling the server's RSS every `sample_every` ops.
pub fn drive(
    server: &Server,
    memcached: bool,
    engine: &str,
    spec: &WorkloadSpec,
    params: WorkloadParams,
    sample_every: u64,
) -> WorkerReport {
    let addr = server.addr;
    let make = || -> Result<WireTarget, String> {
        let wire: Box<dyn Wire> =
            if memcached { Box::new(Memcached::connect(addr)?) } else { Box::new(Resp::with_wait(addr, None)?) };
        Ok(WireTarget { wire, queued: 0 })
    };
    let mut ops = Generator::new(spec, params);
    let pid = server.pid;
    run_ops(engine, spec.name, make, move || Ok(ops.next()), sample_every, move || rss_of(pid))
}

/// What [`churn`] measured of one server.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Churn {
    /// RSS with the keys written once, before the cycles.
    pub start_rss_bytes: u64,
    /// Highest RSS sampled during the cycles.
    pub peak_rss_bytes: u64,
    /// RSS right after the last cycle.
    pub end_rss_bytes: u64,
    /// RSS [`SETTLE`] after the last cycle.
    pub settled_rss_bytes: u64,
    pub cycles: u64,
    pub elapsed_secs: f64,
}

/// Idle growth: writes `keys` keys of `value_bytes` that stay, then runs
/// `cycles` cycles, each a SET then a DEL of one of `keys` other keys (in
/// turn), pipelined [`DEPTH`] deep, sampling the server's RSS every
/// 10,000 cycles. A store that holds a few KB should stay near its
/// starting RSS however many commands it takes.
pub fn churn(server: &Server, memcached: bool, keys: u64, value_bytes: usize, cycles: u64) -> Result<Churn, String> {
    let wire: Box<dyn Wire> = if memcached {
        Box::new(Memcached::connect(server.addr)?)
    } else {
        Box::new(Resp::with_wait(server.addr, None)?)
    };
    let mut t = WireTarget { wire, queued: 0 };
    let value = vec![b'v'; value_bytes];
    for i in 0..keys {
        t.write(format!("idle:kept:{i}").as_bytes(), &value)?;
    }
    t.sync()?;
    let rss = || rss_of(server.pid);
    let mut c = Churn { start_rss_bytes: rss(), cycles, ..Churn::default() };
    c.peak_rss_bytes = c.start_rss_bytes;
    let started = Instant::now();
    let churned: Vec<String> = (0..keys).map(|i| format!("idle:churn:{i}")).collect();
    for n in 0..cycles {
        let k = churned[(n % keys) as usize].as_bytes();
        t.write(k, &value)?;
        t.delete(k)?;
        if n % 10_000 == 9_999 {
            t.sync()?;
            c.peak_rss_bytes = c.peak_rss_bytes.max(rss());
        }
    }
    t.sync()?;
    c.elapsed_secs = started.elapsed().as_secs_f64();
    c.end_rss_bytes = rss();
    c.peak_rss_bytes = c.peak_rss_bytes.max(c.end_rss_bytes);
    std::thread::sleep(SETTLE);
    c.settled_rss_bytes = rss();
    Ok(c)
}
