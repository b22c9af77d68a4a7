//! The async client (tokio). Cheap to clone and share between tasks: every
//! clone uses the same tablet map and the same connection per server.
//!
//! Each connection ([`Channel`]) has a writer task and a reader task.
//! Callers encode their frames, register a waiter under the request id and
//! hand the bytes to the writer task, which coalesces whatever is queued
//! into one write; the reader task splits responses into frames and wakes
//! the waiter of each request id. So any number of requests from any number
//! of tasks are in flight on one connection at once, and a caller that is
//! cancelled never leaves half a frame on the socket.

use crate::blocking::{chunk_groups, item_error, rand_start, resolve, route_in, stream_route, Route};
use crate::conn::{login_result, ClientConfig};
use crate::error::{ClientError, IncrementError, LockError, ReadError, StreamError, TableError, WriteError};
use crate::locks::{self, ChunkLock, LockKeeper};
use crate::ops::{
    conv, disposition, ttl_ms, Consumed, Described, Disposition, Page, Produced, ResponseFrame, Retries, Stats, Ttl,
    Versioned, MAX_ATTEMPTS, UNREACHABLE_DELAY,
};
use crate::tablet::{MapSource, StaticMap, TabletMap};
use shoal_proto::LockMode;
use shoal_proto::{
    check_frame, key_hash, ChunkId, ErrorStatus, GroupClaim, KeyHash, ReadItem, RejectRules, RemoveItem, Request,
    Response, StreamOffset, StreamShape, Subscriber, TableId, Version, WriteItem, HEADER_LEN,
};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most bytes the writer task coalesces into one write.
const MAX_COALESCE: usize = 1 << 20;

#[derive(Default)]
struct Waiters {
    by_id: HashMap<u64, oneshot::Sender<ResponseFrame>>,
    closed: bool,
}

impl Waiters {
    /// Marks the connection dead; every waiter sees `Closed`.
    fn close(&mut self) {
        self.closed = true;
        self.by_id.clear();
    }
}

/// One multiplexed connection to one server.
pub struct Channel {
    addr: SocketAddr,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    waiters: Arc<Mutex<Waiters>>,
    next_id: AtomicU64,
    max_body: u32,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Channel {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A response on its way: await [`Reply::wait`].
pub struct Reply {
    rx: oneshot::Receiver<ResponseFrame>,
}

impl Reply {
    pub async fn wait(self) -> Result<ResponseFrame, ClientError> {
        self.rx.await.map_err(|_| ClientError::Closed)
    }
}

impl Channel {
    async fn connect(addr: SocketAddr, config: &ClientConfig) -> Result<Arc<Channel>, ClientError> {
        let connect = TcpStream::connect(addr);
        let stream = match config.timeout {
            Some(t) => tokio::time::timeout(t, connect)
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??,
            None => connect.await?,
        };
        stream.set_nodelay(true)?;
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let max_body = config.max_body_bytes;
        let [writer, reader] = match &config.tls {
            None => {
                let (r, w) = stream.into_split();
                [
                    tokio::spawn(write_loop(w, rx, waiters.clone())),
                    tokio::spawn(read_loop(r, waiters.clone(), max_body)),
                ]
            }
            Some(tls) => {
                let handshake = tls.connect(addr, stream);
                let stream = match config.timeout {
                    Some(t) => tokio::time::timeout(t, handshake)
                        .await
                        .map_err(|_| ClientError::Tls("no TLS handshake within the timeout".into()))?,
                    None => handshake.await,
                }
                .map_err(|e| ClientError::Tls(e.to_string()))?;
                let (r, w) = tokio::io::split(stream);
                [
                    tokio::spawn(write_loop(w, rx, waiters.clone())),
                    tokio::spawn(read_loop(r, waiters.clone(), max_body)),
                ]
            }
        };
        let channel = Arc::new(Channel {
            addr,
            tx,
            waiters,
            next_id: AtomicU64::new(1),
            max_body: config.max_body_bytes,
            tasks: [writer, reader],
        });
        if let Some(c) = &config.credentials {
            let reply = channel.send(&c.request())?.wait();
            let frame = match config.timeout {
                Some(t) => tokio::time::timeout(t, reply)
                    .await
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply to AUTH"))??,
                None => reply.await?,
            };
            login_result(&frame)?;
        }
        Ok(channel)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.waiters.lock().expect("waiters lock").closed
    }

    /// Sends several requests in one write (pipelined); returns their
    /// replies in the same order. A request over the frame limit fails the
    /// whole call before anything is sent.
    pub fn send_all(&self, reqs: &[Request<'_>]) -> Result<Vec<Reply>, ClientError> {
        let mut buf = Vec::new();
        let mut ids = Vec::with_capacity(reqs.len());
        for req in reqs {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let len = req.encode(id, &mut buf) - HEADER_LEN;
            if len > self.max_body as usize {
                return Err(ClientError::RequestTooLarge { len, max: self.max_body });
            }
            ids.push(id);
        }
        let mut replies = Vec::with_capacity(ids.len());
        {
            let mut w = self.waiters.lock().expect("waiters lock");
            if w.closed {
                return Err(ClientError::Closed);
            }
            for id in ids {
                let (tx, rx) = oneshot::channel();
                w.by_id.insert(id, tx);
                replies.push(Reply { rx });
            }
        }
        self.tx.send(buf).map_err(|_| ClientError::Closed)?;
        Ok(replies)
    }

    /// Sends one request; await the reply with [`Reply::wait`].
    pub fn send(&self, req: &Request<'_>) -> Result<Reply, ClientError> {
        Ok(self.send_all(std::slice::from_ref(req))?.pop().expect("one reply per request"))
    }

    pub async fn call(&self, req: &Request<'_>) -> Result<ResponseFrame, ClientError> {
        self.send(req)?.wait().await
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    waiters: Arc<Mutex<Waiters>>,
) {
    while let Some(mut buf) = rx.recv().await {
        while buf.len() < MAX_COALESCE {
            match rx.try_recv() {
                Ok(more) => buf.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        // The flush sends what a TLS session holds back (a no-op on TCP).
        if w.write_all(&buf).await.is_err() || w.flush().await.is_err() {
            break;
        }
    }
    waiters.lock().expect("waiters lock").close();
}

async fn read_loop<R: AsyncRead + Unpin>(mut r: R, waiters: Arc<Mutex<Waiters>>, max_body: u32) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    'conn: loop {
        match r.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let mut start = 0;
        loop {
            match check_frame(&buf[start..], max_body) {
                Ok(Some(h)) if h.is_response() => {
                    let body = buf[start + HEADER_LEN..start + h.frame_len()].to_vec();
                    start += h.frame_len();
                    let waiter = waiters.lock().expect("waiters lock").by_id.remove(&h.request_id);
                    if let Some(tx) = waiter {
                        // The caller may have given up; that is fine.
                        let _ = tx.send(ResponseFrame { request_id: h.request_id, opcode: h.opcode, body });
                    }
                }
                Ok(None) => break,
                Ok(Some(_)) | Err(_) => break 'conn,
            }
        }
        buf.drain(..start);
        // Room for the rest of a partly received frame, and to read more.
        let whole = if buf.len() >= HEADER_LEN { frame_len(&buf) } else { 0 };
        let want = whole.max(buf.len() + 4096);
        buf.reserve(want - buf.len());
    }
    waiters.lock().expect("waiters lock").close();
}

/// The frame length announced by a whole header (already checked against
/// the limit by `check_frame`).
fn frame_len(b: &[u8]) -> usize {
    let len = u32::from_le_bytes([b[12], b[13], b[14], b[15]]) as usize;
    HEADER_LEN + len
}

struct Inner {
    map: RwLock<TabletMap>,
    source: Box<dyn MapSource>,
    channels: tokio::sync::Mutex<HashMap<SocketAddr, Arc<Channel>>>,
    config: ClientConfig,
    /// Symmetric caching's filters, per group (by its members).
    filters: Mutex<HashMap<Vec<SocketAddr>, GroupFilter>>,
    /// Round-robin over a group's members for hot reads.
    next_member: AtomicU64,
    /// The owner id of this client's chunk locks.
    lock_owner: AtomicU64,
    /// Round-robin over the servers that create chunks.
    next_creator: AtomicU64,
}

/// How often a group's filter of hot keys is fetched again (its rounds
/// are `--sc-epoch-ms`, 1 s by default).
const FILTER_REFRESH: std::time::Duration = std::time::Duration::from_millis(500);

/// One group's filter of hot keys, as last fetched.
#[derive(Default)]
struct GroupFilter {
    bloom: Option<shoal_symcache::bloom::Bloom>,
    fetched: Option<std::time::Instant>,
    fetching: bool,
}

/// An async Shoal client. Every operation routes by (table id, key hash)
/// through the tablet map, absorbs `UNKNOWN_TABLET` (refreshing the map)
/// and `RETRY` up to a bounded number of attempts, and reports every other
/// status as a typed error. A connection that fails is replaced on the next
/// request; requests in flight on it fail with `Closed` and may or may not
/// have been executed.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Batch {
    addr: SocketAddr,
    items: Vec<usize>,
}

impl Client {
    /// Connects to a single server.
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        Client::with_config(addr, ClientConfig::default()).await
    }

    pub async fn with_config(addr: impl ToSocketAddrs, config: ClientConfig) -> Result<Client, ClientError> {
        let addr = resolve(addr)?;
        let c = Client::with_map(TabletMap::single(addr), Box::new(StaticMap), config);
        c.channel(addr).await?;
        Ok(c)
    }

    /// Connects to the cluster of the coordinator at `coordinator` (or of
    /// the leader among several coordinators): the tablet map comes from
    /// there, and is refreshed from there.
    pub async fn connect_cluster(
        coordinator: impl Into<shoal_cluster::CoordinatorAddrs>,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let coordinator = coordinator.into();
        let source = crate::cluster::CoordinatorMap::with_tls(coordinator.clone(), config.coordinator_tls.clone());
        let cluster = shoal_cluster::ControlClient::new(coordinator.clone())
            .with_auth(shoal_cluster::ControlAuth::anonymous_tls(config.coordinator_tls.clone()))
            .get_map()
            .await
            .map_err(|e| ClientError::Cluster(e.to_string()))?;
        let map = crate::cluster::tablet_map(&cluster)
            .ok_or_else(|| ClientError::Cluster(format!("the cluster at {coordinator} has no servers up")))?;
        Ok(Client::with_map(map, Box::new(source), config))
    }

    /// A client over an explicit tablet map and refresh source (the cluster).
    pub fn with_map(map: TabletMap, source: Box<dyn MapSource>, config: ClientConfig) -> Client {
        Client {
            inner: Arc::new(Inner {
                map: RwLock::new(map),
                source,
                channels: tokio::sync::Mutex::new(HashMap::new()),
                config,
                filters: Mutex::new(HashMap::new()),
                next_member: AtomicU64::new(0),
                lock_owner: AtomicU64::new(crate::locks::new_owner_id()),
                next_creator: AtomicU64::new(rand_start()),
            }),
        }
    }

    pub fn tablet_map(&self) -> TabletMap {
        self.inner.map.read().expect("map lock").clone()
    }

    /// The connection to `addr`, connecting (or reconnecting) if needed.
    /// For pipelining by hand: [`Channel::send_all`].
    pub async fn channel(&self, addr: SocketAddr) -> Result<Arc<Channel>, ClientError> {
        let mut chans = self.inner.channels.lock().await;
        if let Some(c) = chans.get(&addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let c = Channel::connect(addr, &self.inner.config).await?;
        chans.insert(addr, c.clone());
        Ok(c)
    }

    fn route(&self, route: Route) -> Result<SocketAddr, ClientError> {
        route_in(&self.inner.map.read().expect("map lock"), route)
    }

    fn refresh_map(&self) {
        let fresh = self.inner.source.refresh(&self.inner.map.read().expect("map lock"));
        *self.inner.map.write().expect("map lock") = fresh;
    }

    async fn execute<T, E>(
        &self,
        route: Route,
        req: &Request<'_>,
        conv: impl Fn(Response<'_>) -> Result<T, ClientError>,
    ) -> Result<T, E>
    where
        E: From<ErrorStatus> + From<ClientError>,
    {
        let mut last = ErrorStatus::UnknownTablet;
        for attempt in 0..MAX_ATTEMPTS {
            let addr = match self.route(route.at_attempt(attempt)) {
                Ok(a) => a,
                // A table created since the map was fetched.
                Err(ClientError::NoRoute(_)) if attempt == 0 => {
                    self.refresh_map();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            // A server that cannot be reached (crashed, its tablets being
            // recovered elsewhere): the request was never sent, so it is
            // safe to refresh the map and send it again.
            let channel = match self.channel(addr).await {
                Ok(c) => c,
                Err(e) if matches!(route, Route::Admin) || attempt + 1 == MAX_ATTEMPTS => return Err(e.into()),
                Err(_) => {
                    tokio::time::sleep(UNREACHABLE_DELAY).await;
                    self.refresh_map();
                    continue;
                }
            };
            let frame = match channel.call(req).await {
                Ok(f) => f,
                // The connection closed with the request in flight (the
                // server crashed, or dropped the replies of a batch when its
                // lease lapsed): a read changed nothing and may be sent
                // again; a write's outcome is unknown, so it is the caller's.
                Err(ClientError::Closed | ClientError::Io(_)) if !req.mutates() && attempt + 1 < MAX_ATTEMPTS => {
                    tokio::time::sleep(UNREACHABLE_DELAY).await;
                    self.refresh_map();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let status = match frame.reply()? {
                Ok(r) => return conv(r).map_err(E::from),
                Err(status) => status,
            };
            match disposition(&status, |t| self.inner.map.read().expect("map lock").names_table(t)) {
                Disposition::Final => return Err(E::from(status)),
                Disposition::RefreshAndRetry => self.refresh_map(),
                Disposition::RefreshAfter(d) => {
                    self.refresh_map();
                    tokio::time::sleep(d).await;
                }
                Disposition::RetryAfter(d) => tokio::time::sleep(d).await,
            }
            last = status;
        }
        Err(E::from(ClientError::Unavailable { attempts: MAX_ATTEMPTS, last }))
    }

    pub async fn ping(&self) -> Result<(), ClientError> {
        self.execute(Route::Admin, &Request::Ping, conv::ping).await
    }

    /// Reads an object: its value and version.
    pub async fn read(&self, table: TableId, key: &[u8]) -> Result<Versioned, ReadError> {
        self.read_with(table, key, RejectRules::default()).await
    }

    pub async fn read_with(&self, table: TableId, key: &[u8], rules: RejectRules) -> Result<Versioned, ReadError> {
        let hash = key_hash(table, key);
        let req = Request::Read { table, key, rules };
        if rules == RejectRules::default() {
            if let Some(member) = self.hot_member(table, hash) {
                // A member without a valid copy refuses the key (it is not
                // its master): the read then goes home as any other.
                if let Ok(channel) = self.channel(member).await {
                    if let Ok(frame) = channel.call(&req).await {
                        match frame.reply() {
                            Ok(Ok(r)) => return conv::read(r).map_err(ReadError::from),
                            Ok(Err(ErrorStatus::ObjectDoesntExist)) => return Err(ReadError::NotFound),
                            _ => {}
                        }
                    }
                }
            }
        }
        self.execute(Route::Key(table, hash), &req, conv::read).await
    }

    /// Symmetric caching: if the filter of the group of the key's master
    /// says the key is hot, the member to read it from (round-robin over
    /// the group, the master included). Fetches a filter that is missing
    /// or older than [`FILTER_REFRESH`] in the background.
    fn hot_member(&self, table: TableId, hash: KeyHash) -> Option<SocketAddr> {
        if !self.inner.config.spread_hot_reads {
            return None;
        }
        let group: Vec<SocketAddr> = {
            let map = self.inner.map.read().expect("map lock");
            let home = map.locate(table, hash)?;
            map.group_of(home)?.to_vec()
        };
        if group.len() < 2 {
            return None;
        }
        let mut filters = self.inner.filters.lock().expect("filters lock");
        let f = filters.entry(group.clone()).or_default();
        let stale = f.fetched.is_none_or(|t| t.elapsed() >= FILTER_REFRESH);
        if stale && !f.fetching && tokio::runtime::Handle::try_current().is_ok() {
            f.fetching = true;
            let client = self.clone();
            let members = group.clone();
            tokio::spawn(async move { client.fetch_filter(members).await });
        }
        let hot = f.bloom.as_ref().is_some_and(|b| b.contains(hash.0));
        drop(filters);
        if !hot {
            return None;
        }
        let i = self.inner.next_member.fetch_add(1, Ordering::Relaxed) as usize;
        Some(group[i % group.len()])
    }

    /// Fetches the filter of the group of `members` from one of them.
    async fn fetch_filter(&self, members: Vec<SocketAddr>) {
        let i = self.inner.next_member.fetch_add(1, Ordering::Relaxed) as usize;
        let from = members[i % members.len()];
        let mut bloom = None;
        if let Ok(channel) = self.channel(from).await {
            if let Ok(frame) = channel.call(&Request::ScFilter).await {
                if let Ok(Ok(Response::ScFilter { bloom: bytes, .. })) = frame.reply() {
                    if !bytes.is_empty() {
                        bloom = shoal_symcache::bloom::Bloom::from_bytes(bytes).ok();
                    }
                }
            }
        }
        let mut filters = self.inner.filters.lock().expect("filters lock");
        let f = filters.entry(members).or_default();
        f.bloom = bloom;
        f.fetched = Some(std::time::Instant::now());
        f.fetching = false;
    }

    /// Creates or overwrites an object; returns its new version.
    pub async fn write(&self, table: TableId, key: &[u8], value: &[u8]) -> Result<Version, WriteError> {
        self.write_with(table, key, value, RejectRules::default()).await
    }

    pub async fn write_with(
        &self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
    ) -> Result<Version, WriteError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Write { table, key, value, rules }, conv::write).await
    }

    /// Creates or overwrites an object that expires `ttl` after the server
    /// applies the write (whole milliseconds, rounded up); returns its new
    /// version. Once expired, the object reads as missing.
    pub async fn write_ttl(
        &self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        ttl: std::time::Duration,
    ) -> Result<Version, WriteError> {
        self.write_ttl_with(table, key, value, ttl, RejectRules::default()).await
    }

    pub async fn write_ttl_with(
        &self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        ttl: std::time::Duration,
        rules: RejectRules,
    ) -> Result<Version, WriteError> {
        let route = Route::Key(table, key_hash(table, key));
        let req = Request::WriteTtl { table, key, value, rules, ttl_ms: ttl_ms(ttl) };
        self.execute(route, &req, conv::write).await
    }

    /// An object's version and expiry time, without its value. A missing
    /// or expired object is `ObjectDoesntExist`.
    pub async fn ttl(&self, table: TableId, key: &[u8]) -> Result<Ttl, ReadError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::ReadTtl { table, key, rules: RejectRules::default() }, conv::ttl).await
    }

    /// Removes an object; returns the version it had (`None`: it did not exist).
    pub async fn remove(&self, table: TableId, key: &[u8]) -> Result<Option<Version>, WriteError> {
        self.remove_with(table, key, RejectRules::default()).await
    }

    pub async fn remove_with(
        &self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
    ) -> Result<Option<Version>, WriteError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Remove { table, key, rules }, conv::remove).await
    }

    /// Adds `delta` to the counter at `key`, a signed 64-bit integer stored
    /// as decimal text as Redis INCR stores it (missing: 0); returns the new
    /// value and version.
    pub async fn increment(&self, table: TableId, key: &[u8], delta: i64) -> Result<(i64, Version), IncrementError> {
        self.increment_with(table, key, delta, RejectRules::default()).await
    }

    pub async fn increment_with(
        &self,
        table: TableId,
        key: &[u8],
        delta: i64,
        rules: RejectRules,
    ) -> Result<(i64, Version), IncrementError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Increment { table, key, delta, rules }, conv::increment).await
    }

    /// One page of `table`'s objects from `cursor` (0 to start).
    pub async fn enumerate(&self, table: TableId, cursor: u64, max_count: u32) -> Result<Page, TableError> {
        let route = Route::Key(table, KeyHash(cursor));
        self.execute(route, &Request::Enumerate { table, cursor, max_count }, conv::enumerate).await
    }

    /// Every object of `table` (all pages).
    pub async fn enumerate_all(&self, table: TableId) -> Result<Vec<crate::Object>, TableError> {
        let mut out = Vec::new();
        let mut cursor = Some(0);
        while let Some(c) = cursor {
            let page = self.enumerate(table, c, 1000).await?;
            out.extend(page.objects);
            cursor = page.next;
        }
        Ok(out)
    }

    /// Creates a table (or returns the id of the existing one of that name).
    pub async fn create_table(&self, name: &str) -> Result<TableId, TableError> {
        self.execute(Route::Admin, &Request::CreateTable { name }, conv::table_id).await
    }

    pub async fn drop_table(&self, name: &str) -> Result<(), TableError> {
        self.execute(Route::Admin, &Request::DropTable { name }, conv::drop_table).await
    }

    pub async fn table_id(&self, name: &str) -> Result<TableId, TableError> {
        self.execute(Route::Admin, &Request::GetTableId { name }, conv::table_id).await
    }

    pub async fn stats(&self) -> Result<Stats, ClientError> {
        self.execute(Route::Admin, &Request::Stats, conv::stats).await
    }

    // Streams (`docs/streams.md`). A streamlet's requests go to the master
    // of the tablet holding its key's hash. [`crate::Producer`] batches and
    // pipelines.

    /// Creates a stream of `shape` (a 0 in its logs, segment bytes or
    /// segments per group asks for the server's default), or finds the
    /// existing one of that name and shape; its id and its shape.
    pub async fn create_stream(&self, name: &str, shape: StreamShape) -> Result<(TableId, StreamShape), StreamError> {
        self.execute(Route::Admin, &Request::CreateStream { name, shape }, conv::create_stream).await
    }

    /// Appends `records` to `streamlet` as one batch, in the log of the
    /// streamlet's MultiLog that `producer` maps to; acknowledged once
    /// durable. Not sent again if the connection drops with it in flight
    /// (its outcome is unknown).
    pub async fn produce(
        &self,
        table: TableId,
        streamlet: u32,
        producer: u64,
        records: &[&[u8]],
    ) -> Result<Produced, StreamError> {
        let req = Request::Produce { table, streamlet, producer, records: records.to_vec() };
        self.execute(stream_route(table, streamlet), &req, |r| conv::produce(r, records.len())).await
    }

    /// Reads records of one group of `streamlet` from `from`, up to about
    /// `max_bytes`.
    pub async fn consume(
        &self,
        table: TableId,
        streamlet: u32,
        from: StreamOffset,
        max_bytes: u32,
    ) -> Result<Consumed, StreamError> {
        let req = Request::Consume { table, streamlet, from, max_bytes };
        self.execute(stream_route(table, streamlet), &req, conv::consume).await
    }

    /// The stream's shape and the groups of `streamlet` with ids from
    /// `from_group`, at most `max_groups` (the server answers at most
    /// [`shoal_proto::MAX_DESCRIBE_GROUPS`]).
    pub async fn describe_stream(
        &self,
        table: TableId,
        streamlet: u32,
        from_group: u64,
        max_groups: u32,
    ) -> Result<Described, StreamError> {
        let req = Request::DescribeStream { table, streamlet, from_group, max_groups };
        self.execute(stream_route(table, streamlet), &req, conv::describe_stream).await
    }

    /// Claims a group of `who.streamlet` for instance `who.instance` of
    /// consumer `who.name`: one no other live instance of the name holds,
    /// under a lease (`docs/streams.md`, "Consumer names"); `None` when
    /// none is free now. [`crate::GroupConsumer`] uses it.
    pub async fn claim_group(&self, who: Subscriber<'_>) -> Result<Option<GroupClaim>, StreamError> {
        self.execute(stream_route(who.table, who.streamlet), &Request::ClaimGroup(who), conv::claim_group).await
    }

    /// Reads a group the instance holds, as [`Client::consume`]; renews
    /// its lease. [`StreamError::NotHeld`] once the lease is lost.
    pub async fn consume_claimed(
        &self,
        who: Subscriber<'_>,
        from: StreamOffset,
        max_bytes: u32,
    ) -> Result<Consumed, StreamError> {
        let req = Request::ConsumeClaimed { who, from, max_bytes };
        self.execute(stream_route(who.table, who.streamlet), &req, conv::consume).await
    }

    /// Commits the name's offset `at` in a group the instance holds,
    /// durably; renews the lease, or gives the group up when `release`.
    /// True when `at` was the end of the closed group: the name is done
    /// with it and the instance no longer holds it.
    pub async fn commit_group(
        &self,
        who: Subscriber<'_>,
        at: StreamOffset,
        release: bool,
    ) -> Result<bool, StreamError> {
        let req = Request::CommitGroup { who, at, release };
        self.execute(stream_route(who.table, who.streamlet), &req, conv::commit_group).await
    }

    /// The connection to the master of `streamlet` of stream `table` (for
    /// pipelining produces in order: [`crate::Producer`]).
    pub(crate) async fn stream_channel(&self, table: TableId, streamlet: u32) -> Result<Arc<Channel>, ClientError> {
        let addr = match self.route(stream_route(table, streamlet)) {
            Ok(a) => a,
            Err(ClientError::NoRoute(_)) => {
                self.refresh_map();
                self.route(stream_route(table, streamlet))?
            }
            Err(e) => return Err(e),
        };
        self.channel(addr).await
    }

    // Chunks (`docs/chunks.md`): keyless objects of chunk tables, with ids
    // the server hands out. A request on ids goes to the server of their
    // id range in the map (a multi request is split by range, its results
    // merged in order); a create goes to the servers that create chunks of
    // the table in turn.

    /// Creates a chunk table (or returns the id of the existing one of that
    /// name; a key-value table of that name is refused).
    pub async fn create_chunk_table(&self, name: &str) -> Result<TableId, TableError> {
        self.execute(Route::Admin, &Request::CreateChunkTable { name }, conv::table_id).await
    }

    /// Creates one chunk per payload; returns their ids in order. Sent in
    /// requests of at most [`shoal_proto::MAX_CHUNK_CREATE`] chunks, each
    /// created whole or not at all; on an error the requests before it
    /// stay created.
    pub async fn create_chunks(&self, table: TableId, payloads: &[&[u8]]) -> Result<Vec<ChunkId>, WriteError> {
        let mut ids = Vec::with_capacity(payloads.len());
        for group in payloads.chunks(shoal_proto::MAX_CHUNK_CREATE) {
            let req = Request::ChunkCreate { table, payloads: group.to_vec() };
            let route = Route::ChunkCreate(table, self.inner.next_creator.fetch_add(1, Ordering::Relaxed));
            ids.extend(self.execute::<_, WriteError>(route, &req, |r| conv::chunk_create(r, group.len())).await?);
        }
        Ok(ids)
    }

    pub async fn create_chunk(&self, table: TableId, payload: &[u8]) -> Result<ChunkId, WriteError> {
        Ok(self.create_chunks(table, &[payload]).await?[0])
    }

    /// Reads chunks: one result per id, in order (`NotFound` for a chunk
    /// that does not exist).
    pub async fn get_chunks(
        &self,
        table: TableId,
        ids: &[ChunkId],
    ) -> Result<Vec<Result<Versioned, ReadError>>, ReadError> {
        let mut out: Vec<Option<Result<Versioned, ReadError>>> = ids.iter().map(|_| None).collect();
        for (first, idx) in self.chunk_groups(table, ids.iter().copied()) {
            let req = Request::ChunkGet { table, ids: idx.iter().map(|&i| ids[i]).collect() };
            let route = Route::Chunk(table, first);
            let got = self.execute::<_, ReadError>(route, &req, |r| conv::chunk_get(r, idx.len())).await?;
            for (&i, r) in idx.iter().zip(got) {
                out[i] = Some(r.map_err(item_error));
            }
        }
        Ok(out.into_iter().map(|r| r.expect("every id is in a group")).collect())
    }

    /// Reads a chunk: its payload and version.
    pub async fn get_chunk(&self, table: TableId, id: ChunkId) -> Result<Versioned, ReadError> {
        self.get_chunks(table, &[id]).await?.remove(0)
    }

    /// Replaces the payloads of existing chunks; one new version (or why
    /// not) per item, in order.
    pub async fn put_chunks(
        &self,
        table: TableId,
        items: &[(ChunkId, &[u8])],
    ) -> Result<Vec<Result<Version, WriteError>>, WriteError> {
        let mut out: Vec<Option<Result<Version, WriteError>>> = items.iter().map(|_| None).collect();
        let groups = self.chunk_groups(table, items.iter().map(|i| i.0));
        let n = groups.len();
        for (first, idx) in groups {
            let req = Request::ChunkPut { table, items: idx.iter().map(|&i| items[i]).collect() };
            let route = Route::Chunk(table, first);
            let got = match self.execute::<_, WriteError>(route, &req, |r| conv::chunk_versions(r, idx.len())).await {
                Ok(got) => got,
                Err(e) => {
                    crate::blocking::group_failed(&mut out, &idx, n, e)?;
                    continue;
                }
            };
            for (&i, r) in idx.iter().zip(got) {
                out[i] = Some(r.map_err(item_error));
            }
        }
        Ok(out.into_iter().map(|r| r.expect("every item is in a group")).collect())
    }

    pub async fn put_chunk(&self, table: TableId, id: ChunkId, payload: &[u8]) -> Result<Version, WriteError> {
        self.put_chunks(table, &[(id, payload)]).await?.remove(0)
    }

    /// Removes chunks; one result per id (the version it had), in order.
    /// Their ids will be reused.
    pub async fn remove_chunks(
        &self,
        table: TableId,
        ids: &[ChunkId],
    ) -> Result<Vec<Result<Version, WriteError>>, WriteError> {
        let mut out: Vec<Option<Result<Version, WriteError>>> = ids.iter().map(|_| None).collect();
        let groups = self.chunk_groups(table, ids.iter().copied());
        let n = groups.len();
        for (first, idx) in groups {
            let req = Request::ChunkRemove { table, ids: idx.iter().map(|&i| ids[i]).collect() };
            let route = Route::Chunk(table, first);
            let got = match self.execute::<_, WriteError>(route, &req, |r| conv::chunk_versions(r, idx.len())).await {
                Ok(got) => got,
                Err(e) => {
                    crate::blocking::group_failed(&mut out, &idx, n, e)?;
                    continue;
                }
            };
            for (&i, r) in idx.iter().zip(got) {
                out[i] = Some(r.map_err(item_error));
            }
        }
        Ok(out.into_iter().map(|r| r.expect("every id is in a group")).collect())
    }

    pub async fn remove_chunk(&self, table: TableId, id: ChunkId) -> Result<Version, WriteError> {
        self.remove_chunks(table, &[id]).await?.remove(0)
    }

    /// `ids` grouped by the id range holding them in the current map.
    fn chunk_groups(&self, table: TableId, ids: impl Iterator<Item = ChunkId>) -> Vec<(ChunkId, Vec<usize>)> {
        chunk_groups(&self.inner.map.read().expect("map lock"), table, ids)
    }

    // Chunk locks (`docs/chunks.md`, "Locks"). Locks are held by this
    // client's owner id (a random one per client, shared by its clones).

    /// The owner id of this client's locks.
    pub fn lock_owner(&self) -> u64 {
        self.inner.lock_owner.load(Ordering::Relaxed)
    }

    /// Acts as lock owner `owner` from now on (not 0): to unlock, from a
    /// new process, a lock taken by an earlier one that knew the id.
    pub fn set_lock_owner(&self, owner: u64) {
        self.inner.lock_owner.store(owner, Ordering::Relaxed);
    }

    async fn lock_attempt(
        &self,
        table: TableId,
        chunk: ChunkId,
        mode: LockMode,
        lease: Duration,
        wait: bool,
    ) -> Result<ChunkLock, LockError> {
        let owner = self.lock_owner();
        let req = Request::ChunkLock { table, chunk, owner, mode, wait, lease_ms: locks::lease_ms(lease) };
        let renewed_at = Instant::now();
        let (token, lease) = self.execute::<_, LockError>(Route::Chunk(table, chunk), &req, locks::conv::lock).await?;
        Ok(ChunkLock { table, chunk, mode, owner, token, lease, renewed_at })
    }

    /// Locks a chunk if it can be granted now; [`LockError::Busy`] if not.
    /// If this client holds it in `mode` already, the same lock again.
    pub async fn try_lock_chunk(
        &self,
        table: TableId,
        chunk: ChunkId,
        mode: LockMode,
        lease: Duration,
    ) -> Result<ChunkLock, LockError> {
        self.lock_attempt(table, chunk, mode, lease, false).await
    }

    /// Locks a chunk, waiting up to `timeout` ([`LockError::Timeout`]):
    /// the request is sent again (1 ms doubling to
    /// [`crate::MAX_BACKOFF`]) while the server answers busy, keeping its
    /// place in the chunk's queue.
    pub async fn lock_chunk(
        &self,
        table: TableId,
        chunk: ChunkId,
        mode: LockMode,
        lease: Duration,
        timeout: Duration,
    ) -> Result<ChunkLock, LockError> {
        let deadline = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(1);
        loop {
            match self.lock_attempt(table, chunk, mode, lease, true).await {
                Err(LockError::Busy { after_us }) => match locks::next_pause(&mut backoff, after_us, deadline) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => return Err(LockError::Timeout),
                },
                r => return r,
            }
        }
    }

    /// Releases a lock.
    pub async fn unlock_chunk(&self, lock: &ChunkLock) -> Result<(), LockError> {
        let req = Request::ChunkUnlock { table: lock.table, chunk: lock.chunk, owner: lock.owner, token: lock.token };
        self.execute(Route::Chunk(lock.table, lock.chunk), &req, locks::conv::unlock).await
    }

    /// Renews a lock's lease (for `lock.lease` from now); the lease granted.
    pub async fn renew_chunk_lock(&self, lock: &ChunkLock) -> Result<Duration, LockError> {
        let (table, chunk, owner, token) = (lock.table, lock.chunk, lock.owner, lock.token);
        let req = Request::ChunkRenew { table, chunk, owner, token, lease_ms: locks::lease_ms(lock.lease) };
        self.execute(Route::Chunk(table, chunk), &req, locks::conv::renew).await
    }

    /// Keeps renewing `lock` in the background until the keeper is dropped
    /// or unlocked (see [`LockKeeper`]). Needs a Tokio runtime.
    pub fn keep_chunk_lock(&self, lock: ChunkLock) -> LockKeeper {
        LockKeeper::start(self.clone(), lock)
    }

    /// Puts a chunk's payload only while `lock` (exclusive) is held: the
    /// server checks the owner and token and appends under its lock table,
    /// so a client whose lease ran out cannot overwrite a newer holder's
    /// data ([`LockError::Lost`]).
    pub async fn put_chunk_locked(&self, lock: &ChunkLock, payload: &[u8]) -> Result<Version, LockError> {
        let (table, chunk, owner, token) = (lock.table, lock.chunk, lock.owner, lock.token);
        let req = Request::ChunkPutLocked { table, chunk, owner, token, payload };
        self.execute(Route::Chunk(table, chunk), &req, locks::conv::put_locked).await
    }

    /// Reads several objects; one result per item, in order. Items are sent
    /// as one multi-read per server (several if they exceed a frame).
    pub async fn multi_read(
        &self,
        items: &[(TableId, &[u8])],
    ) -> Result<Vec<Result<Versioned, ReadError>>, ClientError> {
        let routes: Vec<_> = items.iter().map(|(t, k)| (*t, key_hash(*t, k), k.len() + 12)).collect();
        let out = self
            .multi(
                &routes,
                |idx| {
                    Request::MultiRead(idx.iter().map(|&i| ReadItem { table: items[i].0, key: items[i].1 }).collect())
                },
                conv::multi_read,
            )
            .await?;
        Ok(out.into_iter().map(|r| r.map_err(item_error)).collect())
    }

    /// Writes several objects; one result per item, in order. The items sent
    /// to one server in one frame are appended as one group.
    pub async fn multi_write(&self, items: &[WriteItem<'_>]) -> Result<Vec<Result<Version, WriteError>>, ClientError> {
        let routes: Vec<_> =
            items.iter().map(|w| (w.table, key_hash(w.table, w.key), w.key.len() + w.value.len() + 25)).collect();
        let out = self
            .multi(&routes, |idx| Request::MultiWrite(idx.iter().map(|&i| items[i]).collect()), conv::multi_write)
            .await?;
        Ok(out.into_iter().map(|r| r.map_err(item_error)).collect())
    }

    /// Removes several objects; one result per item, in order.
    pub async fn multi_remove(
        &self,
        items: &[RemoveItem<'_>],
    ) -> Result<Vec<Result<Option<Version>, WriteError>>, ClientError> {
        let routes: Vec<_> = items.iter().map(|r| (r.table, key_hash(r.table, r.key), r.key.len() + 21)).collect();
        let out = self
            .multi(&routes, |idx| Request::MultiRemove(idx.iter().map(|&i| items[i]).collect()), conv::multi_remove)
            .await?;
        Ok(out.into_iter().map(|r| r.map_err(item_error)).collect())
    }

    /// The multi-op engine (as in the blocking client): groups pending items
    /// by server and frame size, sends every group before awaiting any
    /// answer, and resends items answered with "not my tablet" or "retry".
    async fn multi<'r, T>(
        &self,
        routes: &[(TableId, KeyHash, usize)],
        build: impl Fn(&[usize]) -> Request<'r>,
        parse: impl Fn(Response<'_>, usize) -> Result<Vec<Result<T, ErrorStatus>>, ClientError>,
    ) -> Result<Vec<Result<T, ErrorStatus>>, ClientError> {
        let mut results: Vec<Option<Result<T, ErrorStatus>>> = routes.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..routes.len()).collect();
        let mut last = ErrorStatus::UnknownTablet;
        let budget = (self.inner.config.max_body_bytes as usize).saturating_sub(HEADER_LEN + 64).max(1);
        for _ in 0..MAX_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            let mut batches: Vec<Batch> = Vec::new();
            let per_table = {
                let map = self.inner.map.read().expect("map lock");
                for &i in &pending {
                    let (t, h, size) = routes[i];
                    let addr = map.locate(t, h).ok_or(ClientError::NoRoute(t))?;
                    let fits = |b: &Batch| {
                        b.addr == addr && b.items.iter().map(|&j| routes[j].2).sum::<usize>() + size <= budget
                    };
                    match batches.iter_mut().rev().find(|b| fits(b)) {
                        Some(b) => b.items.push(i),
                        None => batches.push(Batch { addr, items: vec![i] }),
                    }
                }
                map.per_table()
            };
            let mut replies = Vec::with_capacity(batches.len());
            for b in &batches {
                replies.push(self.channel(b.addr).await?.send(&build(&b.items))?);
            }
            pending.clear();
            let mut retry = Retries { per_table, pending: &mut pending, refresh: false, delay: None };
            for (b, reply) in batches.iter().zip(replies) {
                let frame = reply.wait().await?;
                let items = match frame.reply()? {
                    Ok(r) => parse(r, b.items.len())?,
                    Err(status) => b.items.iter().map(|_| Err(status.clone())).collect(),
                };
                for (&i, r) in b.items.iter().zip(items) {
                    if let Some(s) = retry.sort(i, r, &mut results) {
                        last = s;
                    }
                }
            }
            let (refresh, delay) = (retry.refresh, retry.delay);
            if refresh {
                self.refresh_map();
            }
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
        }
        Ok(results.into_iter().map(|r| r.unwrap_or_else(|| Err(last.clone()))).collect())
    }
}
