//! A running server: its runtime, listeners and shutdown.
//!
//! Threading: [`WORKER_THREADS`] worker threads ("shoal-worker"), each a
//! single-threaded tokio runtime with its own epoll instance (module
//! `workers`), serve the connections: each connection is handed, when
//! accepted, to the worker with the fewest, which reads its requests,
//! executes them against the store and writes all their replies at once.
//! So network I/O and execution are spread over both cores, and no request
//! pays for waking a second thread. Store operations are short and
//! synchronous; a write that must wait for the cleaner blocks its worker for
//! at most the store's `write_wait`, while the other worker keeps serving.
//! The listeners and signal handling run on the server's own thread
//! ("shoal-server"). Nothing polls when idle: idle threads sleep in epoll;
//! a connection spins briefly only right after activity (module `spin`).
//!
//! Shutdown (SIGINT/SIGTERM with [`Server::start_with_signals`], or
//! [`Server::shutdown`]): listeners stop accepting, each connection stops
//! reading, finishes the replies it owes and closes; the server waits up to
//! [`SHUTDOWN_GRACE`] for them.

use crate::cluster::ClusterNode;
use crate::config::{ConfigError, ServerConfig};
use crate::context::{ServerContext, ServerStats};
use crate::listener::{self, ConnectionTracker};
use crate::memcached::MemcachedFrontEnd;
use crate::native::NativeFrontEnd;
use crate::resp::RespFrontEnd;
use crate::workers::Workers;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{info, warn};

/// Longest a shutdown waits for connections to finish their replies.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Worker threads of the runtime.
pub const WORKER_THREADS: usize = 2;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Store(#[from] shoal_engine::ConfigError),
    #[error("cannot listen on {addr} ({protocol}): {source}")]
    Bind { protocol: &'static str, addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot join the cluster: {0}")]
    Join(#[from] crate::cluster::JoinError),
}

/// The addresses a started server listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addresses {
    pub resp: SocketAddr,
    /// The memcached protocol's address (`None`: not served).
    pub memcached: Option<SocketAddr>,
    /// The native protocol's address (`None` only for a server built without it).
    pub native: Option<SocketAddr>,
    /// The HTTP listener serving `/metrics` (`None`: no `--metrics-port`).
    pub metrics: Option<SocketAddr>,
}

/// A server running on its own runtime in a background thread.
pub struct Server {
    ctx: Arc<ServerContext>,
    addrs: Addresses,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Validates `config`, creates the store, binds every listener and
    /// starts serving; returns once the listeners are bound. Stops on
    /// [`Server::shutdown`] or when dropped.
    pub fn start(config: ServerConfig) -> Result<Server, ServerError> {
        Self::launch(config, false)
    }

    /// Like [`Server::start`], and also stops on SIGINT or SIGTERM.
    pub fn start_with_signals(config: ServerConfig) -> Result<Server, ServerError> {
        Self::launch(config, true)
    }

    fn launch(config: ServerConfig, signals: bool) -> Result<Server, ServerError> {
        config.validate()?;
        // Bound first: a cluster member enlists with its real addresses.
        let resp = bind("resp", config.resp_addr())?;
        let native = bind("native", config.native_addr())?;
        let memcached = match config.memcached {
            true => Some(bind("memcached", config.memcached_addr())?),
            false => None,
        };
        let metrics = match config.metrics_addr() {
            Some(addr) => Some(shoal_http::bind(addr).map_err(|source| ServerError::Bind {
                protocol: "metrics",
                addr,
                source,
            })?),
            None => None,
        };
        let resp_addr = resp.local_addr().unwrap_or(config.resp_addr());
        let native_addr = native.local_addr().unwrap_or(config.native_addr());
        // Ports given as 0 become the ones bound (INFO, CLUSTER SLOTS).
        let mut config = config;
        config.resp_port = resp_addr.port();
        config.native_port = native_addr.port();
        let ctx = match config.coordinator {
            Some(_) => {
                let node = Arc::new(ClusterNode::join(&config, native_addr, resp_addr)?);
                let ctx = Arc::new(ServerContext::with_cluster(config, node.clone())?);
                node.migrations.attach(&node, ctx.store.clone());
                node.migrations.attach_locks(ctx.locks.clone());
                node.start_sc().map_err(ServerError::Runtime)?;
                ctx
            }
            None => Arc::new(ServerContext::new(config)?),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .thread_name("shoal-blocking")
            .enable_all()
            .build()
            .map_err(ServerError::Runtime)?;
        let counted = ctx.clone();
        let requests = Box::new(move || ServerStats::get(&counted.stats.commands));
        let workers = Arc::new(Workers::start(WORKER_THREADS, "shoal-worker", requests).map_err(ServerError::Runtime)?);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let c = ctx.clone();
        let thread = std::thread::Builder::new()
            .name("shoal-server".into())
            .spawn(move || {
                let listeners = Listeners { resp, native, memcached, metrics };
                runtime.block_on(serve(c, signals, workers.clone(), listeners, ready_tx));
                runtime.shutdown_timeout(Duration::from_secs(1));
                // The listeners are gone, so this is the last reference.
                if let Ok(workers) = Arc::try_unwrap(workers) {
                    workers.stop();
                }
            })
            .map_err(ServerError::Runtime)?;
        match ready_rx.recv() {
            Ok(Ok(addrs)) => Ok(Server { ctx, addrs, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(ServerError::Runtime(std::io::Error::other("server thread ended before it was ready")))
            }
        }
    }

    pub fn addresses(&self) -> Addresses {
        self.addrs
    }

    pub fn resp_addr(&self) -> SocketAddr {
        self.addrs.resp
    }

    pub fn context(&self) -> &Arc<ServerContext> {
        &self.ctx
    }

    /// Stops the server (see the module comment) and waits until it has.
    pub fn shutdown(mut self) {
        self.ctx.shutdown();
        self.join();
    }

    /// Waits until the server stopped (by a signal or [`ServerContext::shutdown`]).
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.ctx.shutdown();
        self.join();
    }
}

/// Pending connections the kernel may queue for a listener (capped by
/// `net.core.somaxconn`), so that a burst of connects is not dropped.
const LISTEN_BACKLOG: u32 = 4096;

/// Listens on `addr` with `SO_REUSEADDR` (a restarted server gets its port
/// back at once) and a deep backlog; the socket is handed to the runtime
/// by `serve`.
fn bind(protocol: &'static str, addr: SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    use socket2::{Domain, Socket, Type};
    let listen = || {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        socket.listen(LISTEN_BACKLOG as i32)?;
        socket.set_nonblocking(true)?;
        Ok::<_, std::io::Error>(std::net::TcpListener::from(socket))
    };
    listen().map_err(|source| ServerError::Bind { protocol, addr, source })
}

/// The listeners `launch` bound, for `serve`.
struct Listeners {
    resp: std::net::TcpListener,
    native: std::net::TcpListener,
    memcached: Option<std::net::TcpListener>,
    /// The HTTP listener of `/metrics` (`http`).
    metrics: Option<std::net::TcpListener>,
}

/// Binds the listeners, reports readiness, serves until shutdown.
///
/// Front ends: each is one `bind` and one `listener::run` spawn below. The
/// native protocol's front end (module `native`) joins here the same way,
/// on `ctx.config.native_addr()`, and fills `Addresses::native`.
async fn serve(
    ctx: Arc<ServerContext>,
    signals: bool,
    workers: Arc<Workers>,
    listeners: Listeners,
    ready: std::sync::mpsc::Sender<Result<Addresses, ServerError>>,
) {
    let tracker = ConnectionTracker::default();
    let Listeners { resp, native, memcached, metrics } = listeners;
    let tokio_listener = TcpListener::from_std;
    let (resp, native) = match (tokio_listener(resp), tokio_listener(native)) {
        (Ok(r), Ok(n)) => (r, n),
        (Err(e), _) | (_, Err(e)) => {
            let _ = ready.send(Err(ServerError::Runtime(e)));
            return;
        }
    };
    let (memcached, metrics) =
        match (memcached.map(tokio_listener).transpose(), metrics.map(tokio_listener).transpose()) {
            (Ok(m), Ok(h)) => (m, h),
            (Err(e), _) | (_, Err(e)) => {
                let _ = ready.send(Err(ServerError::Runtime(e)));
                return;
            }
        };
    let addrs = Addresses {
        resp: resp.local_addr().unwrap_or(ctx.config.resp_addr()),
        memcached: memcached.as_ref().map(|m| m.local_addr().unwrap_or(ctx.config.memcached_addr())),
        native: Some(native.local_addr().unwrap_or(ctx.config.native_addr())),
        metrics: metrics.as_ref().and_then(|m| m.local_addr().ok()),
    };
    if let Some(metrics) = metrics {
        tokio::spawn(crate::http::serve(ctx.clone(), metrics));
    }
    if let Some(node) = ctx.cluster.clone() {
        let c = ctx.clone();
        let c2 = ctx.clone();
        tokio::spawn(node.clone().watch_map(
            ctx.store.clone(),
            ctx.shutdown_signal(),
            move |map| c.tables.sync(map),
            move || c2.shutdown(),
        ));
        tokio::spawn(node.clone().ping_peers(ctx.shutdown_signal()));
        crate::lease::spawn_renewer(node.clone(), ctx.shutdown_signal());
        tokio::spawn(node.clone().report_head(ctx.store.clone(), ctx.shutdown_signal()));
        tokio::spawn(node.recover(ctx.store.clone(), ctx.shutdown_signal()));
    }
    let mut acceptors = vec![
        tokio::spawn(listener::run(
            ctx.clone(),
            resp,
            Arc::new(RespFrontEnd::new(&ctx)),
            workers.clone(),
            tracker.handle(),
        )),
        tokio::spawn(listener::run(
            ctx.clone(),
            native,
            Arc::new(NativeFrontEnd::new()),
            workers.clone(),
            tracker.handle(),
        )),
    ];
    if let Some(memcached) = memcached {
        acceptors.push(tokio::spawn(listener::run(
            ctx.clone(),
            memcached,
            Arc::new(MemcachedFrontEnd),
            workers.clone(),
            tracker.handle(),
        )));
    }
    tokio::spawn(crate::budget::enforce(ctx.clone()));
    tokio::spawn(crate::retention::run(ctx.clone()));
    tokio::spawn(crate::load::run(ctx.clone()));
    if signals {
        tokio::spawn(stop_on_signals(ctx.clone()));
    }
    let _ = ready.send(Ok(addrs));
    ctx.shutdown_signal().wait_for(|s| *s).await.ok();
    info!("shutting down: no new connections, finishing replies");
    for a in acceptors {
        let _ = a.await;
    }
    if !tracker.wait(SHUTDOWN_GRACE).await {
        warn!("some connections did not finish within {SHUTDOWN_GRACE:?}; closing them");
    }
    if let Some(node) = &ctx.cluster {
        node.stop();
    }
    info!("stopped");
}

async fn stop_on_signals(ctx: Arc<ServerContext>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        warn!("cannot install signal handlers: stop the server with its shutdown command");
        return;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!("{name} received");
    ctx.shutdown();
}

/// Sends `tracing` output to stderr as plain lines (no colours), filtered by
/// `filter` (a level or a `tracing_subscriber` filter). Does nothing if a
/// subscriber is already installed.
pub fn init_logging(filter: &str) -> Result<(), String> {
    let filter =
        tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("bad log level '{filter}': {e}"))?;
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::io::stderr).try_init();
    Ok(())
}
