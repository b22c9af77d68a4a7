//! The worker threads that serve connections: one single-threaded tokio
//! runtime per thread, each with its own epoll instance, and each
//! connection served start to end by the least loaded worker.
//!
//! Why not one multi-thread runtime: with work stealing, a task woken by one
//! worker's epoll is often run by the other, so every request paid for
//! waking a parked thread (a quarter of the CPU under 50 clients went to
//! context switches); and a connection that spins for its client's next
//! request (see `spin`) made the other worker, asleep on the shared epoll,
//! wake for every byte it read. Here a worker sleeps only when none of its
//! connections has work, and only its own connections wake it.
//!
//! The cost: connections do not migrate, so one busy connection cannot use
//! both cores, and a store operation that waits for the cleaner delays the
//! other connections of its worker.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle};
use tokio::sync::watch;
use tracing::warn;

/// Longest the workers take to drop the connections still open once told
/// to stop.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Worker threads, each running its own runtime until [`Workers::stop`].
pub struct Workers {
    workers: Vec<Worker>,
    threads: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

struct Worker {
    handle: Handle,
    /// Connections this worker serves now.
    load: Arc<AtomicUsize>,
}

/// Decrements its worker's load when the connection's task ends.
struct LoadGuard(Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Starts `n` threads named `name`, each running a single-threaded
    /// runtime with I/O and timers.
    pub fn start(n: usize, name: &str) -> io::Result<Workers> {
        let stop = watch::channel(false).0;
        let mut workers = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for _ in 0..n {
            let runtime = Builder::new_current_thread().enable_all().thread_name(format!("{name}-blocking")).build()?;
            workers.push(Worker { handle: runtime.handle().clone(), load: Arc::default() });
            let mut stopped = stop.subscribe();
            threads.push(std::thread::Builder::new().name(name.into()).spawn(move || {
                runtime.block_on(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                });
                runtime.shutdown_timeout(STOP_GRACE);
            })?);
        }
        Ok(Workers { workers, threads, stop })
    }

    /// Serves `stream` with `serve` on the worker with the fewest
    /// connections. `stream` may belong to another runtime: it is moved to
    /// the chosen worker's.
    pub fn spawn<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let std_stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => return warn!("cannot hand a connection to a worker: {e}"),
        };
        let Some(worker) = self.workers.iter().min_by_key(|w| w.load.load(Ordering::Relaxed)) else {
            return;
        };
        worker.load.fetch_add(1, Ordering::Relaxed);
        let guard = LoadGuard(worker.load.clone());
        worker.handle.spawn(async move {
            let _guard = guard;
            match TcpStream::from_std(std_stream) {
                Ok(stream) => serve(stream).await,
                Err(e) => warn!("a worker cannot take a connection: {e}"),
            }
        });
    }

    /// Stops every worker (connections still open are dropped within
    /// [`STOP_GRACE`]) and waits for their threads.
    pub fn stop(self) {
        self.stop.send_replace(true);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
