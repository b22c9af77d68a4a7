//! The worker threads that serve connections: one single-threaded tokio
//! runtime per thread, each with its own epoll instance, and each
//! connection served by one worker at a time.
//!
//! Why not one multi-thread runtime: with work stealing, a task woken by one
//! worker's epoll is often run by the other, so every request paid for
//! waking a parked thread (a quarter of the CPU under 50 clients went to
//! context switches); and a connection that spins for its client's next
//! request (see `spin`) made the other worker, asleep on the shared epoll,
//! wake for every byte it read. Here a worker sleeps only when none of its
//! connections has work, and only its own connections wake it.
//!
//! # Where connections are served: consolidate, spread when it pays
//!
//! Spreading connections over both workers is not free. Each worker then
//! runs out of work more often, sleeps, and is woken by the kernel, and in a
//! virtual machine a wakeup across cores costs tens of microseconds. With
//! 50 clients sending one request at a time, two workers took 0.17 context
//! switches and 16 us of CPU per request against one worker's 0.07 and
//! 11 us, and answered 20% fewer requests: the client, on the same two
//! cores, was the bottleneck, and the second worker only took CPU from it.
//! With pipelining clients the server is the bottleneck, and the second
//! worker raised GET throughput by 40%.
//!
//! So the workers measure how busy they are (the time their runtime is not
//! parked) and a balancer thread moves connections every [`WINDOW`]:
//! * connections start on worker 0 (consolidated);
//! * when worker 0 has been busy at least [`WARM`] of [`HOT_WINDOWS`]
//!   windows running and has several connections, half of them move to
//!   the other worker: a trial. If the requests executed per second rise
//!   by [`GAIN`] within [`TRIAL_WINDOWS`], the workers stay spread and new
//!   connections go to the one with fewer; otherwise the connections move
//!   back and no trial is made for a while (doubling, up to
//!   [`MAX_BACKOFF`]);
//! * spread workers consolidate again when together they are busy less
//!   than [`COLD`] of one core for [`COLD_WINDOWS`] windows.
//!
//! A worker need not be saturated for spreading to pay. A few clients
//! sending one request at a time leave one worker mostly idle, yet each
//! request waits behind the others' and behind the client threads the
//! worker's own replies wake on its core (the scheduler places a woken
//! client beside its waker); on a second worker the requests of half the
//! clients no longer wait. The trial measures whether that pays, so the
//! bar to try is low ([`WARM`]); [`COLD`] is below it, so that workers
//! consolidated for being cold are not at once tried again.
//!
//! A connection moves only between requests, with no reply owed and nothing
//! awaited (see [`Placement::should_move`]): its front end then hands back
//! the socket and its state ([`Moved`]), and the other worker resumes it.
//! An idle connection moves when it next becomes active. The balancer
//! sleeps while no connection is open.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle};
use tokio::sync::watch;
use tracing::{debug, warn};

/// Longest the workers take to drop the connections still open once told
/// to stop.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// How often the balancer looks at the workers.
pub const WINDOW: Duration = Duration::from_millis(100);
/// Busy fraction of worker 0 above which spreading is tried.
pub const WARM: f64 = 0.3;
/// Consecutive warm windows before a trial.
pub const HOT_WINDOWS: u32 = 2;
/// Windows a trial runs; its rate is measured over all but the first.
pub const TRIAL_WINDOWS: u32 = 4;
/// Rise in requests per second that makes a trial succeed.
pub const GAIN: f64 = 1.1;
/// Busy fraction of both workers together below which they consolidate
/// (below [`WARM`]: see the module comment).
pub const COLD: f64 = 0.25;
/// Consecutive cold windows before consolidating.
pub const COLD_WINDOWS: u32 = 5;
/// First and longest wait after a failed trial before the next.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A connection handed back by its front end to move to another worker:
/// its socket and how to resume serving it there.
pub struct Moved {
    pub stream: std::net::TcpStream,
    pub resume: Resume,
}

/// Resumes serving a moved connection on its new worker.
pub type Resume = Box<dyn FnOnce(TcpStream, Placement) -> Served + Send>;

/// A connection's task: ends with the connection, or hands it back to move.
pub type Served = Pin<Box<dyn Future<Output = Option<Moved>> + Send>>;

/// Counts the requests the server executed (for the balancer's trials).
pub type RequestCounter = Box<dyn Fn() -> u64 + Send + Sync>;

/// Worker threads, each running its own runtime until [`Workers::stop`].
pub struct Workers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    balancer: Option<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

struct Shared {
    workers: Vec<Worker>,
    /// Whether new connections go to the worker with fewer (spread) or to
    /// worker 0.
    spread: std::sync::atomic::AtomicBool,
    stopping: std::sync::atomic::AtomicBool,
    balancer: OnceLock<std::thread::Thread>,
}

struct Worker {
    handle: Handle,
    /// Connections this worker serves now.
    load: Arc<AtomicUsize>,
    clock: Arc<BusyClock>,
    /// Connections asked to move away, and where to.
    evict: AtomicUsize,
    evict_to: AtomicUsize,
}

/// How long a worker's runtime has run: busy from each unpark to the next
/// park (parking is where an idle worker sleeps in epoll). Kept by the
/// runtime's park hooks, on the worker's own thread.
struct BusyClock {
    epoch: Instant,
    /// Nanoseconds busy up to the last park.
    busy_ns: AtomicU64,
    /// When the runtime last unparked (ns since `epoch`; 0 while parked).
    running_since: AtomicU64,
}

impl BusyClock {
    fn now_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    fn unpark(&self) {
        self.running_since.store(self.now_ns(), Ordering::Release);
    }

    fn park(&self) {
        let since = self.running_since.swap(0, Ordering::AcqRel);
        if since != 0 {
            self.busy_ns.fetch_add(self.now_ns().saturating_sub(since), Ordering::AcqRel);
        }
    }

    /// Nanoseconds busy so far.
    fn busy_now(&self) -> u64 {
        let since = self.running_since.load(Ordering::Acquire);
        self.busy_ns.load(Ordering::Acquire) + if since == 0 { 0 } else { self.now_ns().saturating_sub(since) }
    }
}

/// Decrements its worker's load when the connection's task ends.
struct LoadGuard(Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Which worker a connection runs on, and the question its front end asks
/// between requests: should it move?
pub struct Placement {
    shared: Arc<Shared>,
    worker: usize,
}

impl Placement {
    /// Whether this connection should move to another worker now. A front
    /// end asks only where moving is safe (no reply owed, nothing awaited)
    /// and, on `true`, must return [`Moved`]: the answer claims the move.
    pub fn should_move(&self) -> bool {
        let w = &self.shared.workers[self.worker];
        if w.evict.load(Ordering::Relaxed) == 0 {
            return false;
        }
        w.evict.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }

    /// The worker this connection runs on.
    pub fn worker(&self) -> usize {
        self.worker
    }
}

impl Workers {
    /// Starts `n` threads named `name`, each running a single-threaded
    /// runtime with I/O and timers, and (with more than one) the balancer,
    /// which reads `requests` to judge whether spreading pays.
    pub fn start(n: usize, name: &str, requests: RequestCounter) -> io::Result<Workers> {
        let stop = watch::channel(false).0;
        let epoch = Instant::now();
        let mut runtimes = Vec::with_capacity(n);
        let mut workers = Vec::with_capacity(n);
        for _ in 0..n {
            let clock = Arc::new(BusyClock { epoch, busy_ns: AtomicU64::new(0), running_since: AtomicU64::new(0) });
            let (parked, unparked) = (clock.clone(), clock.clone());
            let runtime = Builder::new_current_thread()
                .enable_all()
                .thread_name(format!("{name}-blocking"))
                .on_thread_park(move || parked.park())
                .on_thread_unpark(move || unparked.unpark())
                .build()?;
            workers.push(Worker {
                handle: runtime.handle().clone(),
                load: Arc::default(),
                clock,
                evict: AtomicUsize::new(0),
                evict_to: AtomicUsize::new(0),
            });
            runtimes.push(runtime);
        }
        let shared = Arc::new(Shared {
            workers,
            spread: Default::default(),
            stopping: Default::default(),
            balancer: OnceLock::new(),
        });
        let mut threads = Vec::with_capacity(n);
        for (i, runtime) in runtimes.into_iter().enumerate() {
            let mut stopped = stop.subscribe();
            let clock = shared.workers[i].clock.clone();
            threads.push(std::thread::Builder::new().name(name.into()).spawn(move || {
                clock.unpark();
                runtime.block_on(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                });
                runtime.shutdown_timeout(STOP_GRACE);
            })?);
        }
        let balancer = if n > 1 {
            let s = shared.clone();
            Some(std::thread::Builder::new().name(format!("{name}-balance")).spawn(move || balance(&s, &*requests))?)
        } else {
            None
        };
        Ok(Workers { shared, threads, balancer, stop })
    }

    /// Serves `stream` with `serve` on worker 0, or where connections are
    /// spread, on the worker with the fewest. `stream` may belong to
    /// another runtime: it is moved to the chosen worker's.
    pub fn spawn<F>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream, Placement) -> Served + Send + 'static,
    {
        let std_stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => return warn!("cannot hand a connection to a worker: {e}"),
        };
        let target = self.shared.place();
        start_on(&self.shared, target, std_stream, Box::new(serve));
        if let Some(t) = self.shared.balancer.get() {
            t.unpark();
        }
    }

    /// Stops every worker (connections still open are dropped within
    /// [`STOP_GRACE`]) and waits for their threads.
    pub fn stop(self) {
        self.shared.stopping.store(true, Ordering::Release);
        if let Some(t) = self.shared.balancer.get() {
            t.unpark();
        }
        if let Some(b) = self.balancer {
            let _ = b.join();
        }
        self.stop.send_replace(true);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Runs `resume` for `stream` on worker `w`; if the connection hands itself
/// back, starts it again on the worker it was asked to move to.
fn start_on(shared: &Arc<Shared>, w: usize, stream: std::net::TcpStream, resume: Resume) {
    let worker = &shared.workers[w];
    worker.load.fetch_add(1, Ordering::Relaxed);
    let guard = LoadGuard(worker.load.clone());
    let shared = shared.clone();
    worker.handle.spawn(async move {
        let moved = {
            let _guard = guard;
            match TcpStream::from_std(stream) {
                Ok(stream) => resume(stream, Placement { shared: shared.clone(), worker: w }).await,
                Err(e) => {
                    warn!("a worker cannot take a connection: {e}");
                    None
                }
            }
        };
        if let Some(m) = moved {
            let to = shared.workers[w].evict_to.load(Ordering::Acquire);
            debug!("connection moves from worker {w} to worker {to}");
            start_on(&shared, to, m.stream, m.resume);
        }
    });
}

impl Shared {
    fn place(&self) -> usize {
        if !self.spread.load(Ordering::Acquire) {
            return 0;
        }
        (0..self.workers.len()).min_by_key(|&i| self.workers[i].load.load(Ordering::Relaxed)).unwrap_or(0)
    }

    fn connections(&self) -> usize {
        self.workers.iter().map(|w| w.load.load(Ordering::Relaxed)).sum()
    }

    /// Asks `n` connections of worker `from` to move to `to`, and no others
    /// (an earlier request left standing would send them straight back).
    fn evict(&self, from: usize, to: usize, n: usize) {
        self.clear_evictions();
        let w = &self.workers[from];
        w.evict_to.store(to, Ordering::Release);
        w.evict.store(n, Ordering::Release);
    }

    fn clear_evictions(&self) {
        for w in &self.workers {
            w.evict.store(0, Ordering::Release);
        }
    }
}

/// The balancer's state between windows.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// New connections on worker 0; `hot` windows of worker 0 in a row.
    Consolidated { hot: u32 },
    /// Half the connections moved to worker 1; the rate before the move.
    Trial { windows: u32, base_rate: f64, first_requests: u64, first_at: Instant },
    /// Both workers serve; `cold` windows in a row.
    Spread { cold: u32 },
}

/// The balancer's decision for one window, without I/O: fed what was
/// measured, says what to do.
#[derive(Debug)]
pub struct Policy {
    mode: Mode,
    backoff: Duration,
    no_trial_before: Instant,
    last_rate: f64,
}

/// What the balancer does after a window.
#[derive(Debug, PartialEq)]
pub enum Action {
    None,
    /// Move this many connections of worker 0 to worker 1; new ones spread.
    Spread(usize),
    /// Move every connection of worker 1 to worker 0; new ones to worker 0.
    Consolidate,
}

/// One window's measurements.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub at: Instant,
    /// Busy fraction of worker 0 and of worker 1 over the window.
    pub busy: [f64; 2],
    /// Connections on worker 0.
    pub connections0: usize,
    /// Requests executed so far (a counter) and per second over the window.
    pub requests: u64,
    pub rate: f64,
}

impl Policy {
    pub fn new(now: Instant) -> Policy {
        Policy { mode: Mode::Consolidated { hot: 0 }, backoff: FIRST_BACKOFF, no_trial_before: now, last_rate: 0.0 }
    }

    pub fn spread(&self) -> bool {
        !matches!(self.mode, Mode::Consolidated { .. })
    }

    pub fn step(&mut self, w: Window) -> Action {
        let prev_rate = std::mem::replace(&mut self.last_rate, w.rate);
        match self.mode {
            Mode::Consolidated { hot } => {
                let hot = if w.busy[0] >= WARM && w.connections0 >= 2 { hot + 1 } else { 0 };
                self.mode = Mode::Consolidated { hot };
                if hot >= HOT_WINDOWS && w.at >= self.no_trial_before {
                    self.mode = Mode::Trial {
                        windows: 0,
                        base_rate: (w.rate + prev_rate) / 2.0,
                        first_requests: w.requests,
                        first_at: w.at,
                    };
                    return Action::Spread(w.connections0 / 2);
                }
                Action::None
            }
            Mode::Trial { windows, base_rate, first_requests, first_at } => {
                let windows = windows + 1;
                if windows == 1 {
                    // The window of the move itself is not measured.
                    self.mode = Mode::Trial { windows, base_rate, first_requests: w.requests, first_at: w.at };
                    return Action::None;
                }
                if windows < TRIAL_WINDOWS {
                    self.mode = Mode::Trial { windows, base_rate, first_requests, first_at };
                    return Action::None;
                }
                let secs = w.at.duration_since(first_at).as_secs_f64().max(1e-3);
                let rate = w.requests.saturating_sub(first_requests) as f64 / secs;
                if rate >= base_rate * GAIN {
                    self.backoff = FIRST_BACKOFF;
                    self.mode = Mode::Spread { cold: 0 };
                    Action::None
                } else {
                    self.no_trial_before = w.at + self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    self.mode = Mode::Consolidated { hot: 0 };
                    Action::Consolidate
                }
            }
            Mode::Spread { cold } => {
                let cold = if w.busy[0] + w.busy[1] < COLD { cold + 1 } else { 0 };
                if cold >= COLD_WINDOWS {
                    self.mode = Mode::Consolidated { hot: 0 };
                    return Action::Consolidate;
                }
                self.mode = Mode::Spread { cold };
                Action::None
            }
        }
    }
}

/// The balancer thread: one window at a time while connections are open;
/// parked while none are.
fn balance(shared: &Arc<Shared>, requests: &(dyn Fn() -> u64 + Send + Sync)) {
    let _ = shared.balancer.set(std::thread::current());
    let mut policy = Policy::new(Instant::now());
    let mut last: Option<(Instant, [u64; 2], u64)> = None;
    while !shared.stopping.load(Ordering::Acquire) {
        if shared.connections() == 0 {
            if policy.spread() {
                policy = Policy::new(Instant::now());
                shared.spread.store(false, Ordering::Release);
            }
            shared.clear_evictions();
            last = None;
            std::thread::park();
            continue;
        }
        std::thread::park_timeout(WINDOW);
        let at = Instant::now();
        let busy = [shared.workers[0].clock.busy_now(), shared.workers[1].clock.busy_now()];
        let count = requests();
        if let Some((t, b0, r0)) = last {
            let span = at.duration_since(t).as_secs_f64();
            if span >= WINDOW.as_secs_f64() / 2.0 {
                let frac = |i: usize| (busy[i].saturating_sub(b0[i]) as f64 / 1e9 / span).min(1.0);
                let w = Window {
                    at,
                    busy: [frac(0), frac(1)],
                    connections0: shared.workers[0].load.load(Ordering::Relaxed),
                    requests: count,
                    rate: count.saturating_sub(r0) as f64 / span,
                };
                match policy.step(w) {
                    Action::None => {}
                    Action::Spread(n) => {
                        debug!("workers: trying to spread {n} connections ({w:?})");
                        shared.spread.store(true, Ordering::Release);
                        shared.evict(0, 1, n);
                    }
                    Action::Consolidate => {
                        debug!("workers: consolidating on worker 0 ({w:?})");
                        shared.spread.store(false, Ordering::Release);
                        shared.evict(1, 0, usize::MAX);
                    }
                }
            }
        }
        last = Some((at, busy, count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(at: Instant, busy0: f64, busy1: f64, conns: usize, requests: u64, rate: f64) -> Window {
        Window { at, busy: [busy0, busy1], connections0: conns, requests, rate }
    }

    #[test]
    fn a_hot_worker_spreads_and_stays_spread_when_the_rate_rises() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0);
        let at = |i: u32| t0 + WINDOW * i;
        assert_eq!(p.step(window(at(1), 0.9, 0.0, 50, 10_000, 100_000.0)), Action::None);
        assert_eq!(p.step(window(at(2), 0.95, 0.0, 50, 20_000, 100_000.0)), Action::Spread(25));
        let mut n = 20_000;
        for i in 3..3 + TRIAL_WINDOWS {
            n += 15_000;
            assert_eq!(p.step(window(at(i), 0.7, 0.7, 25, n, 150_000.0)), Action::None);
        }
        assert!(p.spread());
    }

    #[test]
    fn a_trial_that_does_not_pay_is_undone_and_not_retried_at_once() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0);
        let at = |i: u32| t0 + WINDOW * i;
        p.step(window(at(1), 0.9, 0.0, 50, 10_000, 100_000.0));
        assert_eq!(p.step(window(at(2), 0.9, 0.0, 50, 20_000, 100_000.0)), Action::Spread(25));
        let mut n = 20_000;
        let mut last = Action::None;
        for i in 3..3 + TRIAL_WINDOWS {
            n += 9_000;
            last = p.step(window(at(i), 0.6, 0.6, 25, n, 90_000.0));
        }
        assert_eq!(last, Action::Consolidate);
        assert!(!p.spread());
        // Hot again at once: no new trial before the backoff.
        let i = 3 + TRIAL_WINDOWS;
        for k in 0..5 {
            assert_eq!(p.step(window(at(i + k), 0.9, 0.0, 50, n, 100_000.0)), Action::None);
        }
        let later = at(i) + FIRST_BACKOFF;
        assert_eq!(p.step(window(later, 0.9, 0.0, 50, n, 100_000.0)), Action::Spread(25));
    }

    #[test]
    fn spread_workers_consolidate_when_cold() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0);
        let at = |i: u32| t0 + WINDOW * i;
        p.step(window(at(1), 0.9, 0.0, 4, 10_000, 100_000.0));
        p.step(window(at(2), 0.9, 0.0, 4, 20_000, 100_000.0));
        let mut n = 20_000;
        for i in 3..3 + TRIAL_WINDOWS {
            n += 20_000;
            p.step(window(at(i), 0.8, 0.8, 2, n, 200_000.0));
        }
        assert!(p.spread());
        let i = 3 + TRIAL_WINDOWS;
        for k in 0..COLD_WINDOWS - 1 {
            assert_eq!(p.step(window(at(i + k), 0.1, 0.1, 2, n, 1_000.0)), Action::None);
        }
        assert_eq!(p.step(window(at(i + COLD_WINDOWS), 0.1, 0.1, 2, n, 1_000.0)), Action::Consolidate);
    }

    /// An echo connection that reports, with each echoed line, the worker
    /// it runs on, and moves when asked.
    fn echo(mut stream: TcpStream, placement: Placement) -> Served {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        Box::pin(async move {
            let mut buf = [0u8; 64];
            loop {
                if placement.should_move() {
                    let stream = stream.into_std().expect("into_std");
                    return Some(Moved { stream, resume: Box::new(echo) });
                }
                let n = match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => n,
                };
                let mut reply = buf[..n].to_vec();
                reply.push(b'0' + placement.worker() as u8);
                if stream.write_all(&reply).await.is_err() {
                    return None;
                }
            }
        })
    }

    #[test]
    fn a_connection_asked_to_move_goes_on_on_the_other_worker_without_losing_bytes() {
        use std::io::{Read, Write};
        let workers = Workers::start(2, "test-worker", Box::new(|| 0)).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let server = rt.block_on(async { TcpStream::from_std(server).unwrap() });
        workers.spawn(server, echo);
        let mut ask = |line: &[u8]| {
            client.write_all(line).unwrap();
            let mut got = vec![0u8; line.len() + 1];
            client.read_exact(&mut got).unwrap();
            assert_eq!(&got[..line.len()], line, "echoed whole");
            got[line.len()] - b'0'
        };
        assert_eq!(ask(b"a"), 0, "new connections start on worker 0");
        workers.shared.evict(0, 1, 1);
        // The connection moves at its next look at the request: after the
        // next request if it was waiting in a read when asked, before it
        // if it had not got back to its read yet (a loaded machine).
        assert!(ask(b"bc") <= 1);
        assert_eq!(ask(b"def"), 1);
        assert_eq!(workers.shared.workers[0].load.load(Ordering::Relaxed), 0);
        assert_eq!(workers.shared.workers[1].load.load(Ordering::Relaxed), 1);
        workers.shared.evict(1, 0, usize::MAX);
        assert!(ask(b"g") <= 1);
        assert_eq!(ask(b"hi"), 0, "and back");
        assert_eq!(ask(b"j"), 0);
        drop(client);
        workers.stop();
    }

    #[test]
    fn one_busy_connection_is_not_spread() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0);
        for i in 1..20 {
            assert_eq!(p.step(window(t0 + WINDOW * i, 1.0, 0.0, 1, 0, 50_000.0)), Action::None);
        }
    }
}
