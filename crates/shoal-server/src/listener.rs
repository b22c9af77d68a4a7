//! Accepting connections for a front end: the per-server connection limit,
//! TCP options, and tracking connections so that shutdown can wait for them.
//!
//! A front end (RESP, native) implements [`FrontEnd`]; [`run`] accepts on
//! its socket until shutdown and hands each connection to a worker thread
//! (`workers`), which runs one task for it: with TLS on (`tls`), the
//! handshake and then the front end over the TLS stream; else the front end
//! over the socket. The limit on open connections is shared by all front
//! ends: a connection over it is sent the front end's
//! [`FrontEnd::refusal`] (without waiting; on a TLS port, nothing, since
//! plain bytes would not be read as TLS) and closed.

use crate::budget::Account;
use crate::context::{ServerContext, ServerStats};
use crate::stream::ClientStream;
use crate::tls::Accepted;
use crate::workers::{Placement, Served, Workers};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// A protocol served on one listening socket.
pub trait FrontEnd: Send + Sync + 'static {
    /// Short name, used in logs ("resp", "native").
    fn name(&self) -> &'static str;

    /// Bytes sent to a connection refused because `max_connections` are
    /// open, just before it is closed. Sent with one non-blocking write.
    fn refusal(&self) -> &'static [u8];

    /// Serves one accepted connection until the peer closes it, it breaks a
    /// limit, or shutdown is asked (`conn.ctx.shutdown_signal()`); on
    /// shutdown it should finish the replies it owes, then return `None`.
    /// Between requests, with no reply owed, it asks
    /// [`Placement::should_move`] and on `true` returns the connection
    /// ([`Moved`]) for another worker to resume.
    fn serve<S: ClientStream>(self: Arc<Self>, stream: S, conn: Connection, placement: Placement) -> Served;

    /// On a port that speaks TLS, serves a client whose first byte shows it
    /// does not: refuses it (RESP: an error reply, then closes) or serves
    /// what is safe in clear text (native: PING only, which failure
    /// detection sends without TLS).
    fn serve_plain_on_tls(self: Arc<Self>, stream: TcpStream, conn: Connection, placement: Placement) -> Served;
}

/// One accepted connection: its id (unique in this server), peer and the
/// shared context, and its part of the client buffer budget. Dropping it
/// counts the connection as closed.
pub struct Connection {
    pub id: u64,
    pub peer: SocketAddr,
    /// The server's end of the connection, and its file descriptor (-1 if
    /// unknown), as CLIENT LIST shows them.
    pub local: Option<SocketAddr>,
    pub fd: i64,
    pub ctx: Arc<ServerContext>,
    pub account: Account,
    _open: OpenGuard,
}

/// Decrements the open-connection count and releases the shutdown tracker.
struct OpenGuard {
    ctx: Arc<ServerContext>,
    _tracker: mpsc::Sender<()>,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.ctx.stats.connections_current.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Completes when every connection spawned by listeners sharing it has
/// ended (each holds a clone of the sender).
pub struct ConnectionTracker {
    tx: mpsc::Sender<()>,
    rx: mpsc::Receiver<()>,
}

impl Default for ConnectionTracker {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(1);
        ConnectionTracker { tx, rx }
    }
}

impl ConnectionTracker {
    pub fn handle(&self) -> mpsc::Sender<()> {
        self.tx.clone()
    }

    /// Waits until every connection ended, or `grace` passed; returns
    /// whether all ended.
    pub async fn wait(self, grace: Duration) -> bool {
        let ConnectionTracker { tx, mut rx } = self;
        drop(tx);
        tokio::time::timeout(grace, rx.recv()).await.is_ok()
    }
}

/// Accepts connections on `listener` for `front_end` until shutdown; each
/// is served on one of `workers`.
pub async fn run<F: FrontEnd>(
    ctx: Arc<ServerContext>,
    listener: TcpListener,
    front_end: Arc<F>,
    workers: Arc<Workers>,
    tracker: mpsc::Sender<()>,
) {
    let mut shutdown = ctx.shutdown_signal();
    let name = front_end.name();
    if let Ok(addr) = listener.local_addr() {
        info!("{name} listening on {addr}");
    }
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and similar: back off instead of spinning.
                warn!("{name}: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let stats = &ctx.stats;
        let open = stats.connections_current.fetch_add(1, Ordering::Relaxed);
        if open >= ctx.admin.settings.max_clients() {
            stats.connections_current.fetch_sub(1, Ordering::Relaxed);
            ServerStats::add(&stats.connections_rejected, 1);
            if ctx.tls.is_none() {
                let _ = stream.try_write(front_end.refusal());
            }
            debug!("{name}: refused {peer}: {open} connections open");
            continue;
        }
        let id = stats.connections_total.fetch_add(1, Ordering::Relaxed) + 1;
        let _ = stream.set_nodelay(true);
        let conn = Connection {
            id,
            peer,
            local: stream.local_addr().ok(),
            fd: raw_fd(&stream),
            ctx: ctx.clone(),
            account: ctx.budget.open(id, peer),
            _open: OpenGuard { ctx: ctx.clone(), _tracker: tracker.clone() },
        };
        debug!("{name}: connection {id} from {peer}");
        let front_end = front_end.clone();
        match ctx.tls.clone() {
            None => workers.spawn(stream, move |stream, placement| front_end.serve(stream, conn, placement)),
            Some(tls) => workers.spawn(stream, move |stream, placement| {
                Box::pin(async move {
                    match tls.accept(stream, &conn).await? {
                        Accepted::Tls(stream) => front_end.serve(*stream, conn, placement).await,
                        Accepted::Plain(stream) => front_end.serve_plain_on_tls(stream, conn, placement).await,
                    }
                })
            }),
        }
    }
    info!("{name}: stopped accepting");
}

/// The socket's file descriptor, where there is one.
fn raw_fd(stream: &TcpStream) -> i64 {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        stream.as_raw_fd() as i64
    }
    #[cfg(not(unix))]
    {
        let _ = stream;
        -1
    }
}
