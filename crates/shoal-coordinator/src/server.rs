//! The control listener, its connections, and the [`Coordinator`] handle.
//!
//! A connection reads one request frame at a time, has the [`Service`]
//! answer it and writes the answer, until the peer closes, shutdown is
//! asked, or the peer misbehaves. Misbehaving (a frame too large, bytes
//! that are not a request, a frame begun and not finished within
//! [`FRAME_TIMEOUT`], an answer not taken within [`WRITE_TIMEOUT`]) gets an
//! `invalid_request` error where the connection still allows one, then the
//! connection is closed; nothing reaches the state and other connections
//! do not notice. At most `max_connections` are open, and at most
//! `max_connections_per_ip` from one IP address; one more is answered with
//! an `internal` error and closed.
//!
//! With a cluster secret, a connection's first bytes decide what it may
//! ask ([`Caller`]): a cluster handshake ([`shoal_cluster::auth`]) makes it
//! a member, or the server whose credential it presented; anything else is
//! anonymous, limited to the read-only requests and to frames of
//! [`MAX_ANONYMOUS_FRAME`] bytes. A peer must send its first 4 bytes within
//! [`HANDSHAKE_TIMEOUT`]. A failed handshake is refused and closed before
//! any request is read.
//!
//! With internal TLS ([`shoal_cluster::tls`]) every connection first
//! completes a mutual TLS handshake (a certificate of the cluster CA,
//! within [`HANDSHAKE_TIMEOUT`]), and all of the above runs inside it. A
//! peer speaking clear text is told so in clear text (a control `error`,
//! or [`auth::TLS_ONLY`] for a cluster handshake) and closed, unread; a
//! coordinator without internal TLS closes a peer that opens with TLS.

use crate::config::{CoordinatorConfig, CoordinatorError};
use crate::etcd::Fence;
use crate::http;
use crate::service::{Caller, Service};
use crate::store::{DirStore, StateStore};
use shoal_cluster::auth::{self, ClusterSecret, IpSlot, PerIpLimit, Port, Session, HANDSHAKE_TIMEOUT};
use shoal_cluster::control::{mask_response, read_frame_limited, write_frame};
use shoal_cluster::tls::{Accepted, InternalStream, InternalTls, TLS_HANDSHAKE_RECORD};
use shoal_cluster::{ClusterMap, ControlError, ControlErrorCode, ControlRequest, ControlResponse, ServerId};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, info, warn};

/// Largest request body the coordinator reads. Requests are small (the
/// largest, `recovered`, lists a server's earlier logs); this bounds what
/// one connection can make the coordinator allocate.
pub const MAX_REQUEST_FRAME: usize = 1 << 20;
/// Largest request body read from an anonymous connection (one without
/// the handshake, on a coordinator with a secret): its requests are tiny.
pub const MAX_ANONYMOUS_FRAME: usize = 4096;
/// Time a peer has to finish sending a request once its first byte came.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// Time a peer has to take an answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time connections have at shutdown to finish the request they are in.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A running coordinator: its control listener and its state.
///
/// Dropping the handle shuts the coordinator down without waiting.
pub struct Coordinator {
    addr: SocketAddr,
    /// The HTTP listener's address (`--metrics-port`: `/metrics` and the
    /// dashboard), if any.
    http_addr: Option<SocketAddr>,
    service: Arc<Service>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Coordinator {
    /// Loads (or creates) the state in `config.data_dir`, listens on
    /// `config.listen` (and `config.metrics_listen`) and serves in the
    /// background on the current tokio runtime. Errors: the directory cannot be used, the saved state
    /// cannot be read or is damaged (it is never overwritten then), or
    /// the address cannot be bound.
    pub async fn start(config: CoordinatorConfig) -> Result<Coordinator, CoordinatorError> {
        let store = DirStore::open(&config.data_dir)
            .map_err(|source| CoordinatorError::DataDir { dir: config.data_dir.clone(), source })?;
        Coordinator::start_with_store(config, Arc::new(store)).await
    }

    /// [`start`](Self::start) with the state in `store` instead of
    /// `config.data_dir`.
    pub async fn start_with_store(
        config: CoordinatorConfig,
        store: Arc<dyn StateStore>,
    ) -> Result<Coordinator, CoordinatorError> {
        Coordinator::start_fenced(config, store, None).await
    }

    /// [`start_with_store`](Self::start_with_store) for a leader elected in
    /// etcd: master leases are granted only while `fence` holds.
    pub async fn start_fenced(
        config: CoordinatorConfig,
        store: Arc<dyn StateStore>,
        fence: Option<Fence>,
    ) -> Result<Coordinator, CoordinatorError> {
        let service = Arc::new(
            Service::open(store, config.replicas, config.sc_group_size, config.probe)
                .await?
                .with_restart_grace(config.restart_grace)
                .with_lease(config.lease)
                .with_auto_rebalance(config.auto_rebalance)
                .with_fence(fence),
        );
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| CoordinatorError::Bind { addr: config.listen, source })?;
        let addr = listener.local_addr().map_err(|source| CoordinatorError::Bind { addr: config.listen, source })?;
        let (shutdown, _) = watch::channel(false);
        let limits = Limits {
            total: config.max_connections.max(1),
            per_ip: config.max_connections_per_ip.max(1),
            secret: config.secret.clone(),
            tls: config.internal_tls.clone(),
        };
        let http_addr = match config.metrics_listen {
            Some(at) => Some(http::start(at, addr, &service, &shutdown).await?),
            None => None,
        };
        let task = tokio::spawn(serve(listener, service.clone(), shutdown.subscribe(), limits));
        if service.auto_rebalance() {
            tokio::spawn(crate::rebalancer::after_recoveries(service.clone(), shutdown.subscribe()));
        }
        tokio::spawn(crate::rebalancer::resume(service.clone()));
        Ok(Coordinator { addr, http_addr, service, shutdown, task: Some(task) })
    }

    /// The address of the HTTP listener (`/metrics` and the dashboard), if
    /// it has one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The address the control protocol listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The current (saved) cluster map.
    pub fn map(&self) -> ClusterMap {
        (*self.service.map()).clone()
    }

    /// Asks the coordinator to stop: no new connections, pending long
    /// polls answered with the current map, requests in progress finished
    /// (for at most [`SHUTDOWN_GRACE`]). Returns at once; see [`wait`](Self::wait).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits until the coordinator has stopped after [`shutdown`](Self::shutdown).
    pub async fn wait(mut self) {
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

/// What the listener enforces on every connection.
struct Limits {
    total: usize,
    per_ip: usize,
    secret: Option<ClusterSecret>,
    tls: Option<InternalTls>,
}

/// Accepts connections until shutdown, then drains them.
async fn serve(listener: TcpListener, service: Arc<Service>, shutdown: watch::Receiver<bool>, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.total));
    let per_ip = PerIpLimit::default();
    let secret = Arc::new(limits.secret);
    let tls = Arc::new(limits.tls);
    let mut connections = JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match (permits.clone().try_acquire_owned(), per_ip.take(peer.ip(), limits.per_ip)) {
                    (Ok(permit), Some(slot)) => {
                        let _ = stream.set_nodelay(true);
                        let slots = (permit, slot);
                        let auth = (secret.clone(), tls.clone());
                        connections.spawn(connection(service.clone(), auth, stream, peer, shutdown.clone(), slots));
                    }
                    // Over a limit a TLS port closes without a word: clear
                    // bytes would not be read as TLS.
                    (Err(_), _) => {
                        warn!("refusing a control connection from {peer}: {} are open", limits.total);
                        if tls.is_none() {
                            refuse(stream, "the coordinator has too many open control connections; retry later").await;
                        }
                    }
                    (_, None) => {
                        warn!("refusing a control connection from {peer}: {} are open from {}", limits.per_ip, peer.ip());
                        if tls.is_none() {
                            refuse(stream, "too many open control connections from this address; retry later").await;
                        }
                    }
                },
                Err(e) => {
                    // Out of file descriptors and the like: let some close.
                    warn!("cannot accept a control connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    drop(listener);
    info!("shutting down: no new connections, finishing requests in progress");
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        warn!("{} control connections did not finish within {SHUTDOWN_GRACE:?}; closing them", connections.len());
        connections.shutdown().await;
    }
    info!("coordinator stopped");
}

/// Completes when shutdown is asked (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Tells a connection over the limit why it is closed, without waiting for it.
async fn refuse(stream: TcpStream, message: &str) {
    let resp = ControlResponse::Error { code: ControlErrorCode::Internal, message: message.into() };
    let mut frame = Vec::new();
    if write_frame(&mut frame, &resp).await.is_ok() {
        let _ = stream.try_write(&frame);
    }
}

/// Serves one control connection (see the module comment).
async fn connection(
    service: Arc<Service>,
    (secret, tls): (Arc<Option<ClusterSecret>>, Arc<Option<InternalTls>>),
    stream: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
    _slots: (OwnedSemaphorePermit, IpSlot),
) {
    service.connections.fetch_add(1, Ordering::Relaxed);
    if let Some(mut stream) = open_tls((*tls).as_ref(), stream, peer).await {
        if let Some((caller, session)) = open(&service, (*secret).as_ref(), &mut stream, peer).await {
            serve_requests(&service, &mut stream, peer, caller, session, &mut shutdown).await;
        }
    }
    service.connections.fetch_sub(1, Ordering::Relaxed);
}

/// With internal TLS, the TLS handshake; a clear-text peer is told why it
/// is refused and closed (`None`, as for a failed handshake).
async fn open_tls(tls: Option<&InternalTls>, stream: TcpStream, peer: SocketAddr) -> Option<InternalStream> {
    let Some(tls) = tls else { return Some(InternalStream::Plain(stream)) };
    match tls.accept(stream).await {
        Ok(Accepted::Tls(s)) => Some(s),
        Ok(Accepted::Clear(mut stream)) => {
            warn!(
                "refused a clear-text control connection from {peer}: this control port speaks only TLS \
                 (the peer needs the cluster's --internal-tls-cert, --internal-tls-key and --internal-tls-ca)"
            );
            let first = auth::peek_start(&stream, Duration::from_secs(1)).await.ok().flatten();
            if first.is_some_and(|f| auth::is_handshake(&f)) {
                auth::refuse_clear_handshake(&mut stream).await;
            } else {
                let message = "this coordinator's control port speaks only TLS: give the cluster's \
                               --internal-tls-cert, --internal-tls-key and --internal-tls-ca";
                let resp = ControlResponse::Error { code: ControlErrorCode::Unauthorized, message: message.into() };
                linger_answer(stream, &resp).await;
            }
            None
        }
        Err(e) => {
            warn!("refused a control connection from {peer}: internal TLS: {e}");
            None
        }
    }
}

/// Sends `resp` to a peer about to be closed, then reads what it still
/// sends for a moment (at most 1 s and 64 KiB), so that it gets the answer
/// rather than a reset.
async fn linger_answer(mut stream: TcpStream, resp: &ControlResponse) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        write_frame(&mut stream, resp).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut total = 0;
        while total < 64 << 10 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => total += n,
            }
        }
        Ok::<(), ControlError>(())
    })
    .await;
}

/// Decides what the connection proved from its first bytes (the module
/// comment); `None` if it is closed instead.
async fn open(
    service: &Arc<Service>,
    secret: Option<&ClusterSecret>,
    stream: &mut InternalStream,
    peer: SocketAddr,
) -> Option<(Caller, Option<Session>)> {
    let first = match stream.peek_start(HANDSHAKE_TIMEOUT).await {
        Ok(Some(first)) => first,
        Ok(None) => return None,
        Err(e) => {
            debug!("closing the control connection from {peer}: {e}");
            return None;
        }
    };
    if !stream.is_tls() && first[0] == TLS_HANDSHAKE_RECORD {
        warn!(
            "{peer} opened a TLS handshake, but this coordinator's control port has no internal TLS \
             (--internal-tls-cert); closing"
        );
        return None;
    }
    let Some(secret) = secret else {
        if auth::is_handshake(&first) {
            warn!("{peer} opened a cluster handshake, but this coordinator has no cluster secret; closing");
            return None;
        }
        return Some((Caller::Unchecked, None));
    };
    if !auth::is_handshake(&first) {
        return Some((Caller::Anonymous, None));
    }
    let accepting = match auth::accept(stream, secret, Port::Control).await {
        Ok(a) => a,
        Err(e) => {
            warn!("refused a control connection from {peer}: {e}");
            return None;
        }
    };
    let decision = match accepting.identity {
        None => Ok(Caller::Member),
        Some(identity) => match service.prove(ServerId(identity.id), &identity.credential).await {
            Ok(Some(id)) => Ok(Caller::Server(id)),
            Ok(None) => Ok(Caller::Member),
            Err(why) => Err(why),
        },
    };
    let caller = match &decision {
        Ok(c) => *c,
        Err(_) => Caller::Anonymous,
    };
    match accepting.finish(stream, decision.map(|_| ())).await {
        Ok(session) => Some((caller, Some(session))),
        Err(e) => {
            warn!("refused a control connection from {peer}: {e}");
            None
        }
    }
}

async fn serve_requests(
    service: &Arc<Service>,
    stream: &mut InternalStream,
    peer: SocketAddr,
    caller: Caller,
    session: Option<Session>,
    shutdown: &mut watch::Receiver<bool>,
) {
    let limit = if caller == Caller::Anonymous { MAX_ANONYMOUS_FRAME } else { MAX_REQUEST_FRAME };
    loop {
        // Idle connections are fine (servers keep theirs); wait for a byte.
        tokio::select! {
            biased;
            _ = stopped(shutdown) => return,
            more = stream.wait_data() => if !more {
                return;
            },
        }
        let read = tokio::time::timeout(FRAME_TIMEOUT, read_frame_limited(stream, limit)).await;
        let req: ControlRequest = match read {
            Ok(Ok(Some(req))) => req,
            Ok(Ok(None)) | Ok(Err(ControlError::Io(_))) => return,
            Ok(Err(e)) => return reject(stream, peer, e.to_string()).await,
            Err(_) => {
                return reject(stream, peer, format!("request not completed within {FRAME_TIMEOUT:?}")).await;
            }
        };
        let mut resp = service.handle(req, caller, shutdown).await;
        if let Err(message) = mask_response(&mut resp, session.as_ref()) {
            resp = ControlResponse::Error { code: ControlErrorCode::Internal, message };
        }
        if !send(stream, &resp).await {
            return;
        }
    }
}

/// Answers a bad request with `invalid_request`; the caller then closes.
async fn reject(stream: &mut InternalStream, peer: SocketAddr, message: String) {
    debug!("closing the control connection from {peer}: {message}");
    let resp = ControlResponse::Error { code: ControlErrorCode::InvalidRequest, message };
    send(stream, &resp).await;
}

/// Writes `resp`; false if the connection is no longer usable.
async fn send(stream: &mut InternalStream, resp: &ControlResponse) -> bool {
    let result = match tokio::time::timeout(WRITE_TIMEOUT, write_frame(stream, resp)).await {
        Ok(r) => r,
        Err(_) => return false,
    };
    match result {
        Ok(()) => true,
        Err(ControlError::TooLarge(n)) => {
            let resp = ControlResponse::Error {
                code: ControlErrorCode::Internal,
                message: format!("the answer ({n} bytes) exceeds the control frame limit"),
            };
            matches!(tokio::time::timeout(WRITE_TIMEOUT, write_frame(stream, &resp)).await, Ok(Ok(())))
        }
        Err(_) => false,
    }
}
