//! The blocking client: plain `std::net` sockets with Shoal's own framing
//! (no runtime), one [`Connection`] per server, reused for every request.
//! It is the low-latency path: waiting for a reply spins briefly before it
//! blocks (see [`crate::conn`]). Not `Sync`: give each thread its own
//! client, or use the async [`crate::Client`].

use crate::conn::{ClientConfig, Connection};
use crate::error::{ClientError, IncrementError, LockError, ReadError, StreamError, TableError, WriteError};
use crate::locks::{self, ChunkLock};
use crate::ops::{
    conv, disposition, ttl_ms, Consumed, Described, Disposition, Page, Produced, ResponseFrame, Retries, Stats, Ttl,
    Versioned, MAX_ATTEMPTS, UNREACHABLE_DELAY,
};
use crate::tablet::{MapSource, StaticMap, TabletMap};
use shoal_proto::{
    key_hash, ChunkId, ErrorStatus, GroupClaim, KeyHash, LockMode, ReadItem, RejectRules, RemoveItem, Request,
    Response, StreamOffset, StreamShape, Subscriber, TableId, Version, WriteItem, HEADER_LEN,
};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Where a request goes.
#[derive(Clone, Copy)]
pub(crate) enum Route {
    Key(TableId, KeyHash),
    /// The server of a chunk's id range.
    Chunk(TableId, ChunkId),
    /// The `n`th (modulo their number) of the servers that create chunks
    /// of the table.
    ChunkCreate(TableId, u64),
    Admin,
}

impl Route {
    /// The route of try `attempt` of a request: a create goes to the next
    /// creator at each try, so that one that answers `RETRY` (its range
    /// being recovered) or cannot be reached does not get every try (a
    /// refused create applied nothing, so it may go anywhere).
    pub(crate) fn at_attempt(self, attempt: u32) -> Route {
        match self {
            Route::ChunkCreate(t, n) => Route::ChunkCreate(t, n.wrapping_add(u64::from(attempt))),
            other => other,
        }
    }
}

/// Where `route` goes in `map`.
pub(crate) fn route_in(map: &TabletMap, route: Route) -> Result<SocketAddr, ClientError> {
    match route {
        Route::Key(t, h) => map.locate(t, h).ok_or(ClientError::NoRoute(t)),
        Route::Chunk(t, id) => Ok(map.locate_chunk(t, id)),
        Route::ChunkCreate(t, n) => {
            let creators = map.chunk_creators(t);
            match creators.len() {
                0 => Err(ClientError::NoRoute(t)),
                len => Ok(creators[(n % len as u64) as usize]),
            }
        }
        Route::Admin => Ok(map.admin()),
    }
}

/// `ids` (of chunk table `table`) grouped by the id range that holds them
/// in `map`, each group as (an id of it to route by, the indices of its
/// ids in order); ids in no range form one group. A group stays whole
/// when its range moves to another server, so after a refresh of the map
/// it goes to one server again.
pub(crate) fn chunk_groups(
    map: &TabletMap,
    table: TableId,
    ids: impl Iterator<Item = ChunkId>,
) -> Vec<(ChunkId, Vec<usize>)> {
    // The start of each group's range (none: ids in no range), in the
    // order of the groups.
    let mut starts: Vec<Option<(u16, u64)>> = Vec::new();
    let mut groups: Vec<(ChunkId, Vec<usize>)> = Vec::new();
    for (i, id) in ids.enumerate() {
        let start = map.chunk_span(table, id).map(|c| (c.node, c.lo));
        match starts.iter().position(|s| *s == start) {
            Some(g) => groups[g].1.push(i),
            None => {
                starts.push(start);
                groups.push((id, vec![i]));
            }
        }
    }
    groups
}

/// Records a failed request of a multi-chunk write: with one group the
/// error is the call's (nothing was applied); with several, the groups
/// before it may have been applied, so the failure becomes its items'
/// results (the first item gets the error itself) and the call goes on,
/// rather than one error that hides writes done. Returns the error when
/// the call must end with it.
pub(crate) fn group_failed<T>(
    out: &mut [Option<Result<T, WriteError>>],
    idx: &[usize],
    groups: usize,
    e: WriteError,
) -> Result<(), WriteError> {
    if groups == 1 {
        return Err(e);
    }
    let said = e.to_string();
    let mut first = Some(e);
    for &i in idx {
        let failed = first.take().unwrap_or_else(|| WriteError::Client(crate::ClientError::GroupFailed(said.clone())));
        out[i] = Some(Err(failed));
    }
    Ok(())
}

/// A blocking Shoal client. Every operation routes by (table id, key hash)
/// through the tablet map, absorbs `UNKNOWN_TABLET` (refreshing the map)
/// and `RETRY` up to a bounded number of attempts, and reports every other
/// status as a typed error. An I/O error drops the connection (the next
/// request reconnects) and is returned: the request may or may not have
/// been executed.
pub struct Client {
    map: TabletMap,
    source: Box<dyn MapSource>,
    conns: HashMap<SocketAddr, Connection>,
    config: ClientConfig,
    /// The owner id of this client's chunk locks.
    lock_owner: u64,
    /// Round-robin over the servers that create chunks.
    next_creator: u64,
}

/// Where a client's round-robin over chunk creators starts: at random, so
/// that many clients do not all begin with the same server.
pub(crate) fn rand_start() -> u64 {
    crate::locks::new_owner_id()
}

/// One multi-op round: the indices of the items sent to one server.
struct Batch {
    addr: SocketAddr,
    items: Vec<usize>,
    id: u64,
}

impl Client {
    /// Connects to a single server.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        Client::with_config(addr, ClientConfig::default())
    }

    pub fn with_config(addr: impl ToSocketAddrs, config: ClientConfig) -> Result<Client, ClientError> {
        let addr = resolve(addr)?;
        let mut c = Client::with_map(TabletMap::single(addr), Box::new(StaticMap), config);
        c.conn(addr)?;
        Ok(c)
    }

    /// Connects to the cluster of the coordinator at `coordinator` (or of
    /// the leader among several coordinators): the tablet map comes from
    /// there, and is refreshed from there.
    pub fn connect_cluster(
        coordinator: impl Into<shoal_cluster::CoordinatorAddrs>,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let source = crate::cluster::CoordinatorMap::with_tls(coordinator, config.coordinator_tls.clone());
        let map = source.fetch()?;
        Ok(Client::with_map(map, Box::new(source), config))
    }

    /// A client over an explicit tablet map and refresh source (the cluster).
    pub fn with_map(map: TabletMap, source: Box<dyn MapSource>, config: ClientConfig) -> Client {
        Client {
            map,
            source,
            conns: HashMap::new(),
            config,
            lock_owner: crate::locks::new_owner_id(),
            next_creator: rand_start(),
        }
    }

    pub fn tablet_map(&self) -> &TabletMap {
        &self.map
    }

    /// The pooled connection to `addr`, connecting if needed. For
    /// pipelining by hand: `send` many requests, then `recv` them.
    pub fn conn(&mut self, addr: SocketAddr) -> Result<&mut Connection, ClientError> {
        if self.conns.get_mut(&addr).is_some_and(|c| c.is_stale()) {
            self.conns.remove(&addr);
        }
        if !self.conns.contains_key(&addr) {
            let c = Connection::connect(addr, &self.config)?;
            self.conns.insert(addr, c);
        }
        Ok(self.conns.get_mut(&addr).expect("inserted above"))
    }

    /// The server owning (table, key).
    pub fn locate(&self, table: TableId, key: &[u8]) -> Result<SocketAddr, ClientError> {
        self.route(Route::Key(table, key_hash(table, key)))
    }

    fn route(&self, route: Route) -> Result<SocketAddr, ClientError> {
        route_in(&self.map, route)
    }

    fn refresh_map(&mut self) {
        self.map = self.source.refresh(&self.map);
    }

    /// Sends `req` on `addr`'s connection and waits for its response; drops
    /// the connection on failure.
    fn call_on(&mut self, addr: SocketAddr, req: &Request<'_>) -> Result<ResponseFrame, ClientError> {
        let r = self.conn(addr)?.call(req);
        self.drop_on_error(addr, r)
    }

    /// Sends one request with routing and retries, and converts the answer.
    fn execute<T, E>(
        &mut self,
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
            if let Err(e) = self.conn(addr) {
                if matches!(route, Route::Admin) || attempt + 1 == MAX_ATTEMPTS {
                    return Err(e.into());
                }
                std::thread::sleep(UNREACHABLE_DELAY);
                self.refresh_map();
                continue;
            }
            let frame = match self.call_on(addr, req) {
                Ok(f) => f,
                // The connection closed with the request in flight: a read
                // may be sent again, a write's outcome is the caller's.
                Err(ClientError::Closed | ClientError::Io(_)) if !req.mutates() && attempt + 1 < MAX_ATTEMPTS => {
                    std::thread::sleep(UNREACHABLE_DELAY);
                    self.refresh_map();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let status = match frame.reply()? {
                Ok(r) => return conv(r).map_err(E::from),
                Err(status) => status,
            };
            match disposition(&status, |t| self.map.names_table(t)) {
                Disposition::Final => return Err(E::from(status)),
                Disposition::RefreshAndRetry => self.refresh_map(),
                Disposition::RefreshAfter(d) => {
                    self.refresh_map();
                    std::thread::sleep(d);
                }
                Disposition::RetryAfter(d) => std::thread::sleep(d),
            }
            last = status;
        }
        Err(E::from(ClientError::Unavailable { attempts: MAX_ATTEMPTS, last }))
    }

    pub fn ping(&mut self) -> Result<(), ClientError> {
        self.execute(Route::Admin, &Request::Ping, conv::ping)
    }

    /// Reads an object: its value and version.
    pub fn read(&mut self, table: TableId, key: &[u8]) -> Result<Versioned, ReadError> {
        self.read_with(table, key, RejectRules::default())
    }

    pub fn read_with(&mut self, table: TableId, key: &[u8], rules: RejectRules) -> Result<Versioned, ReadError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Read { table, key, rules }, conv::read)
    }

    /// Creates or overwrites an object; returns its new version.
    pub fn write(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<Version, WriteError> {
        self.write_with(table, key, value, RejectRules::default())
    }

    pub fn write_with(
        &mut self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
    ) -> Result<Version, WriteError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Write { table, key, value, rules }, conv::write)
    }

    /// Creates or overwrites an object that expires `ttl` after the server
    /// applies the write (whole milliseconds, rounded up); returns its new
    /// version. Once expired, the object reads as missing.
    pub fn write_ttl(
        &mut self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<Version, WriteError> {
        self.write_ttl_with(table, key, value, ttl, RejectRules::default())
    }

    pub fn write_ttl_with(
        &mut self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        ttl: Duration,
        rules: RejectRules,
    ) -> Result<Version, WriteError> {
        let route = Route::Key(table, key_hash(table, key));
        let req = Request::WriteTtl { table, key, value, rules, ttl_ms: ttl_ms(ttl) };
        self.execute(route, &req, conv::write)
    }

    /// An object's version and expiry time, without its value. A missing
    /// or expired object is `ObjectDoesntExist`.
    pub fn ttl(&mut self, table: TableId, key: &[u8]) -> Result<Ttl, ReadError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::ReadTtl { table, key, rules: RejectRules::default() }, conv::ttl)
    }

    /// Removes an object; returns the version it had (`None`: it did not exist).
    pub fn remove(&mut self, table: TableId, key: &[u8]) -> Result<Option<Version>, WriteError> {
        self.remove_with(table, key, RejectRules::default())
    }

    pub fn remove_with(
        &mut self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
    ) -> Result<Option<Version>, WriteError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Remove { table, key, rules }, conv::remove)
    }

    /// Adds `delta` to the counter at `key`, a signed 64-bit integer stored
    /// as decimal text as Redis INCR stores it (missing: 0); returns the new
    /// value and version.
    pub fn increment(&mut self, table: TableId, key: &[u8], delta: i64) -> Result<(i64, Version), IncrementError> {
        self.increment_with(table, key, delta, RejectRules::default())
    }

    pub fn increment_with(
        &mut self,
        table: TableId,
        key: &[u8],
        delta: i64,
        rules: RejectRules,
    ) -> Result<(i64, Version), IncrementError> {
        let route = Route::Key(table, key_hash(table, key));
        self.execute(route, &Request::Increment { table, key, delta, rules }, conv::increment)
    }

    /// One page of `table`'s objects from `cursor` (0 to start).
    pub fn enumerate(&mut self, table: TableId, cursor: u64, max_count: u32) -> Result<Page, TableError> {
        let route = Route::Key(table, KeyHash(cursor));
        self.execute(route, &Request::Enumerate { table, cursor, max_count }, conv::enumerate)
    }

    /// Every object of `table` (all pages).
    pub fn enumerate_all(&mut self, table: TableId) -> Result<Vec<crate::Object>, TableError> {
        let mut out = Vec::new();
        let mut cursor = Some(0);
        while let Some(c) = cursor {
            let page = self.enumerate(table, c, 1000)?;
            out.extend(page.objects);
            cursor = page.next;
        }
        Ok(out)
    }

    // Chunks (`docs/chunks.md`): keyless objects of chunk tables, with ids
    // the server hands out. A request on ids goes to the server of their
    // id range in the map (a multi request is split by range, its results
    // merged in order); a create goes to the servers that create chunks of
    // the table in turn.

    /// Creates a chunk table (or returns the id of the existing one of that
    /// name; a key-value table of that name is refused).
    /// [`crate::Client::create_stream`].
    pub fn create_stream(&mut self, name: &str, shape: StreamShape) -> Result<(TableId, StreamShape), StreamError> {
        self.execute(Route::Admin, &Request::CreateStream { name, shape }, conv::create_stream)
    }

    /// [`crate::Client::produce`].
    pub fn produce(
        &mut self,
        table: TableId,
        streamlet: u32,
        producer: u64,
        records: &[&[u8]],
    ) -> Result<Produced, StreamError> {
        let req = Request::Produce { table, streamlet, producer, records: records.to_vec() };
        self.execute(stream_route(table, streamlet), &req, |r| conv::produce(r, records.len()))
    }

    /// [`crate::Client::consume`].
    pub fn consume(
        &mut self,
        table: TableId,
        streamlet: u32,
        from: StreamOffset,
        max_bytes: u32,
    ) -> Result<Consumed, StreamError> {
        let req = Request::Consume { table, streamlet, from, max_bytes };
        self.execute(stream_route(table, streamlet), &req, conv::consume)
    }

    /// [`crate::Client::describe_stream`].
    pub fn describe_stream(
        &mut self,
        table: TableId,
        streamlet: u32,
        from_group: u64,
        max_groups: u32,
    ) -> Result<Described, StreamError> {
        let req = Request::DescribeStream { table, streamlet, from_group, max_groups };
        self.execute(stream_route(table, streamlet), &req, conv::describe_stream)
    }

    /// [`crate::Client::claim_group`].
    pub fn claim_group(&mut self, who: Subscriber<'_>) -> Result<Option<GroupClaim>, StreamError> {
        self.execute(stream_route(who.table, who.streamlet), &Request::ClaimGroup(who), conv::claim_group)
    }

    /// [`crate::Client::consume_claimed`].
    pub fn consume_claimed(
        &mut self,
        who: Subscriber<'_>,
        from: StreamOffset,
        max_bytes: u32,
    ) -> Result<Consumed, StreamError> {
        let req = Request::ConsumeClaimed { who, from, max_bytes };
        self.execute(stream_route(who.table, who.streamlet), &req, conv::consume)
    }

    /// [`crate::Client::commit_group`].
    pub fn commit_group(&mut self, who: Subscriber<'_>, at: StreamOffset, release: bool) -> Result<bool, StreamError> {
        let req = Request::CommitGroup { who, at, release };
        self.execute(stream_route(who.table, who.streamlet), &req, conv::commit_group)
    }

    pub fn create_chunk_table(&mut self, name: &str) -> Result<TableId, TableError> {
        self.execute(Route::Admin, &Request::CreateChunkTable { name }, conv::table_id)
    }

    /// Creates one chunk per payload; returns their ids in order. Sent in
    /// requests of at most [`shoal_proto::MAX_CHUNK_CREATE`] chunks, each
    /// created whole or not at all; on an error the requests before it
    /// stay created.
    pub fn create_chunks(&mut self, table: TableId, payloads: &[&[u8]]) -> Result<Vec<ChunkId>, WriteError> {
        let mut ids = Vec::with_capacity(payloads.len());
        for group in payloads.chunks(shoal_proto::MAX_CHUNK_CREATE) {
            let req = Request::ChunkCreate { table, payloads: group.to_vec() };
            self.next_creator = self.next_creator.wrapping_add(1);
            let route = Route::ChunkCreate(table, self.next_creator);
            ids.extend(self.execute::<_, WriteError>(route, &req, |r| conv::chunk_create(r, group.len()))?);
        }
        Ok(ids)
    }

    pub fn create_chunk(&mut self, table: TableId, payload: &[u8]) -> Result<ChunkId, WriteError> {
        Ok(self.create_chunks(table, &[payload])?[0])
    }

    /// Reads chunks: one result per id, in order (`NotFound` for a chunk
    /// that does not exist).
    pub fn get_chunks(
        &mut self,
        table: TableId,
        ids: &[ChunkId],
    ) -> Result<Vec<Result<Versioned, ReadError>>, ReadError> {
        let mut out: Vec<Option<Result<Versioned, ReadError>>> = ids.iter().map(|_| None).collect();
        for (first, idx) in chunk_groups(&self.map, table, ids.iter().copied()) {
            let req = Request::ChunkGet { table, ids: idx.iter().map(|&i| ids[i]).collect() };
            let got =
                self.execute::<_, ReadError>(Route::Chunk(table, first), &req, |r| conv::chunk_get(r, idx.len()))?;
            for (&i, r) in idx.iter().zip(got) {
                out[i] = Some(r.map_err(item_error));
            }
        }
        Ok(out.into_iter().map(|r| r.expect("every id is in a group")).collect())
    }

    /// Reads a chunk: its payload and version.
    pub fn get_chunk(&mut self, table: TableId, id: ChunkId) -> Result<Versioned, ReadError> {
        self.get_chunks(table, &[id])?.remove(0)
    }

    /// Replaces the payloads of existing chunks; one new version (or why
    /// not) per item, in order.
    pub fn put_chunks(
        &mut self,
        table: TableId,
        items: &[(ChunkId, &[u8])],
    ) -> Result<Vec<Result<Version, WriteError>>, WriteError> {
        let mut out: Vec<Option<Result<Version, WriteError>>> = items.iter().map(|_| None).collect();
        let groups = chunk_groups(&self.map, table, items.iter().map(|i| i.0));
        let n = groups.len();
        for (first, idx) in groups {
            let req = Request::ChunkPut { table, items: idx.iter().map(|&i| items[i]).collect() };
            let route = Route::Chunk(table, first);
            let got = match self.execute::<_, WriteError>(route, &req, |r| conv::chunk_versions(r, idx.len())) {
                Ok(got) => got,
                Err(e) => {
                    group_failed(&mut out, &idx, n, e)?;
                    continue;
                }
            };
            for (&i, r) in idx.iter().zip(got) {
                out[i] = Some(r.map_err(item_error));
            }
        }
        Ok(out.into_iter().map(|r| r.expect("every item is in a group")).collect())
    }

    pub fn put_chunk(&mut self, table: TableId, id: ChunkId, payload: &[u8]) -> Result<Version, WriteError> {
        self.put_chunks(table, &[(id, payload)])?.remove(0)
    }

    /// Removes chunks; one result per id (the version it had), in order.
    /// Their ids will be reused.
    pub fn remove_chunks(
        &mut self,
        table: TableId,
        ids: &[ChunkId],
    ) -> Result<Vec<Result<Version, WriteError>>, WriteError> {
        let mut out: Vec<Option<Result<Version, WriteError>>> = ids.iter().map(|_| None).collect();
        let groups = chunk_groups(&self.map, table, ids.iter().copied());
        let n = groups.len();
        for (first, idx) in groups {
            let req = Request::ChunkRemove { table, ids: idx.iter().map(|&i| ids[i]).collect() };
            let route = Route::Chunk(table, first);
            let got = match self.execute::<_, WriteError>(route, &req, |r| conv::chunk_versions(r, idx.len())) {
                Ok(got) => got,
                Err(e) => {
                    group_failed(&mut out, &idx, n, e)?;
                    continue;
                }
            };
            for (&i, r) in idx.iter().zip(got) {
                out[i] = Some(r.map_err(item_error));
            }
        }
        Ok(out.into_iter().map(|r| r.expect("every id is in a group")).collect())
    }

    pub fn remove_chunk(&mut self, table: TableId, id: ChunkId) -> Result<Version, WriteError> {
        self.remove_chunks(table, &[id])?.remove(0)
    }

    // Chunk locks (`docs/chunks.md`, "Locks"): as in the async client,
    // without background renewal (call `renew_chunk_lock` within the lease).

    /// The owner id of this client's locks (random per client).
    pub fn lock_owner(&self) -> u64 {
        self.lock_owner
    }

    /// Acts as lock owner `owner` from now on (not 0).
    pub fn set_lock_owner(&mut self, owner: u64) {
        self.lock_owner = owner;
    }

    fn lock_attempt(
        &mut self,
        table: TableId,
        chunk: ChunkId,
        mode: LockMode,
        lease: Duration,
        wait: bool,
    ) -> Result<ChunkLock, LockError> {
        let owner = self.lock_owner;
        let req = Request::ChunkLock { table, chunk, owner, mode, wait, lease_ms: locks::lease_ms(lease) };
        let renewed_at = Instant::now();
        let (token, lease) = self.execute::<_, LockError>(Route::Chunk(table, chunk), &req, locks::conv::lock)?;
        Ok(ChunkLock { table, chunk, mode, owner, token, lease, renewed_at })
    }

    /// Locks a chunk if it can be granted now; [`LockError::Busy`] if not.
    pub fn try_lock_chunk(
        &mut self,
        table: TableId,
        chunk: ChunkId,
        mode: LockMode,
        lease: Duration,
    ) -> Result<ChunkLock, LockError> {
        self.lock_attempt(table, chunk, mode, lease, false)
    }

    /// Locks a chunk, waiting up to `timeout` (see the async client's
    /// `lock_chunk`).
    pub fn lock_chunk(
        &mut self,
        table: TableId,
        chunk: ChunkId,
        mode: LockMode,
        lease: Duration,
        timeout: Duration,
    ) -> Result<ChunkLock, LockError> {
        let deadline = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(1);
        loop {
            match self.lock_attempt(table, chunk, mode, lease, true) {
                Err(LockError::Busy { after_us }) => match locks::next_pause(&mut backoff, after_us, deadline) {
                    Some(pause) => std::thread::sleep(pause),
                    None => return Err(LockError::Timeout),
                },
                r => return r,
            }
        }
    }

    /// Releases a lock.
    pub fn unlock_chunk(&mut self, lock: &ChunkLock) -> Result<(), LockError> {
        let req = Request::ChunkUnlock { table: lock.table, chunk: lock.chunk, owner: lock.owner, token: lock.token };
        self.execute(Route::Chunk(lock.table, lock.chunk), &req, locks::conv::unlock)
    }

    /// Renews a lock's lease (for `lock.lease` from now); the lease granted.
    pub fn renew_chunk_lock(&mut self, lock: &ChunkLock) -> Result<Duration, LockError> {
        let (table, chunk, owner, token) = (lock.table, lock.chunk, lock.owner, lock.token);
        let req = Request::ChunkRenew { table, chunk, owner, token, lease_ms: locks::lease_ms(lock.lease) };
        self.execute(Route::Chunk(table, chunk), &req, locks::conv::renew)
    }

    /// Puts a chunk's payload only while `lock` (exclusive) is held (see
    /// the async client's `put_chunk_locked`).
    pub fn put_chunk_locked(&mut self, lock: &ChunkLock, payload: &[u8]) -> Result<Version, LockError> {
        let (table, chunk, owner, token) = (lock.table, lock.chunk, lock.owner, lock.token);
        let req = Request::ChunkPutLocked { table, chunk, owner, token, payload };
        self.execute(Route::Chunk(table, chunk), &req, locks::conv::put_locked)
    }

    /// Creates a table (or returns the id of the existing one of that name).
    pub fn create_table(&mut self, name: &str) -> Result<TableId, TableError> {
        self.execute(Route::Admin, &Request::CreateTable { name }, conv::table_id)
    }

    pub fn drop_table(&mut self, name: &str) -> Result<(), TableError> {
        self.execute(Route::Admin, &Request::DropTable { name }, conv::drop_table)
    }

    pub fn table_id(&mut self, name: &str) -> Result<TableId, TableError> {
        self.execute(Route::Admin, &Request::GetTableId { name }, conv::table_id)
    }

    pub fn stats(&mut self) -> Result<Stats, ClientError> {
        self.execute(Route::Admin, &Request::Stats, conv::stats)
    }

    /// Reads several objects; one result per item, in order. Items are sent
    /// as one multi-read per server (several if they exceed a frame).
    pub fn multi_read(&mut self, items: &[(TableId, &[u8])]) -> Result<Vec<Result<Versioned, ReadError>>, ClientError> {
        let routes: Vec<_> = items.iter().map(|(t, k)| (*t, key_hash(*t, k), k.len() + 12)).collect();
        let out = self.multi(
            &routes,
            |idx| Request::MultiRead(idx.iter().map(|&i| ReadItem { table: items[i].0, key: items[i].1 }).collect()),
            conv::multi_read,
        )?;
        Ok(out.into_iter().map(|r| r.map_err(item_error)).collect())
    }

    /// Writes several objects; one result per item, in order. The items sent
    /// to one server in one frame are appended as one group.
    pub fn multi_write(&mut self, items: &[WriteItem<'_>]) -> Result<Vec<Result<Version, WriteError>>, ClientError> {
        let routes: Vec<_> =
            items.iter().map(|w| (w.table, key_hash(w.table, w.key), w.key.len() + w.value.len() + 25)).collect();
        let out =
            self.multi(&routes, |idx| Request::MultiWrite(idx.iter().map(|&i| items[i]).collect()), conv::multi_write)?;
        Ok(out.into_iter().map(|r| r.map_err(item_error)).collect())
    }

    /// Removes several objects; one result per item, in order.
    pub fn multi_remove(
        &mut self,
        items: &[RemoveItem<'_>],
    ) -> Result<Vec<Result<Option<Version>, WriteError>>, ClientError> {
        let routes: Vec<_> = items.iter().map(|r| (r.table, key_hash(r.table, r.key), r.key.len() + 21)).collect();
        let out = self.multi(
            &routes,
            |idx| Request::MultiRemove(idx.iter().map(|&i| items[i]).collect()),
            conv::multi_remove,
        )?;
        Ok(out.into_iter().map(|r| r.map_err(item_error)).collect())
    }

    /// The multi-op engine: groups pending items by server and frame size,
    /// sends every group before reading any answer (pipelined), and resends
    /// the items whose server answered "not my tablet" or "retry".
    fn multi<'r, T>(
        &mut self,
        routes: &[(TableId, KeyHash, usize)],
        build: impl Fn(&[usize]) -> Request<'r>,
        parse: impl Fn(Response<'_>, usize) -> Result<Vec<Result<T, ErrorStatus>>, ClientError>,
    ) -> Result<Vec<Result<T, ErrorStatus>>, ClientError> {
        let mut results: Vec<Option<Result<T, ErrorStatus>>> = routes.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..routes.len()).collect();
        let mut last = ErrorStatus::UnknownTablet;
        for _ in 0..MAX_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            let budget = (self.config.max_body_bytes as usize).saturating_sub(HEADER_LEN + 64).max(1);
            let mut batches: Vec<Batch> = Vec::new();
            for &i in &pending {
                let (t, h, size) = routes[i];
                let addr = self.map.locate(t, h).ok_or(ClientError::NoRoute(t))?;
                let fits =
                    |b: &Batch| b.addr == addr && b.items.iter().map(|&j| routes[j].2).sum::<usize>() + size <= budget;
                match batches.iter_mut().rev().find(|b| fits(b)) {
                    Some(b) => b.items.push(i),
                    None => batches.push(Batch { addr, items: vec![i], id: 0 }),
                }
            }
            for b in &mut batches {
                let req = build(&b.items);
                let sent = self.conn(b.addr)?.send(&req);
                if matches!(sent, Err(ClientError::Io(_) | ClientError::Closed)) {
                    self.conns.remove(&b.addr);
                }
                b.id = sent?;
            }
            pending.clear();
            let per_table = self.map.per_table();
            let mut retry = Retries { per_table, pending: &mut pending, refresh: false, delay: None };
            for b in &batches {
                let got = self.conn(b.addr)?.recv_id(b.id);
                let frame = self.drop_on_error(b.addr, got)?;
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
                std::thread::sleep(d);
            }
        }
        Ok(results.into_iter().map(|r| r.unwrap_or_else(|| Err(last.clone()))).collect())
    }

    /// Forgets the connection to `addr` when `r` shows it is broken, or is
    /// a refusal after which the server closes it.
    fn drop_on_error(
        &mut self,
        addr: SocketAddr,
        r: Result<ResponseFrame, ClientError>,
    ) -> Result<ResponseFrame, ClientError> {
        let broken = match &r {
            Err(ClientError::Io(_) | ClientError::Closed | ClientError::Protocol(_)) => true,
            Ok(f) => closes_connection(f),
            Err(_) => false,
        };
        if broken {
            self.conns.remove(&addr);
        }
        r
    }
}

pub(crate) fn resolve(addr: impl ToSocketAddrs) -> Result<SocketAddr, ClientError> {
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        ClientError::Io(std::io::Error::new(std::io::ErrorKind::NotFound, "address resolves to nothing"))
    })
}

/// A multi-op item's status as its family's error; a retryable status left
/// after the last attempt means the client gave up.
/// Where the requests of `streamlet` of stream `table` go: the tablet
/// holding its key's hash (`shoal_proto::streamlet_key`).
pub(crate) fn stream_route(table: TableId, streamlet: u32) -> Route {
    Route::Key(table, key_hash(table, &shoal_proto::streamlet_key(streamlet)))
}

pub(crate) fn item_error<E: From<ErrorStatus> + From<ClientError>>(s: ErrorStatus) -> E {
    match disposition(&s, |_| false) {
        Disposition::Final => E::from(s),
        _ => E::from(ClientError::Unavailable { attempts: MAX_ATTEMPTS, last: s }),
    }
}

/// Whether the server closes the connection after this response: a frame
/// it could not take (too large, unsupported version) or lost framing.
pub(crate) fn closes_connection(f: &ResponseFrame) -> bool {
    use shoal_proto::StatusCode;
    let code = f.body.first().copied().and_then(StatusCode::from_u8);
    matches!(code, Some(StatusCode::FrameTooLarge | StatusCode::UnsupportedVersion))
        || (f.request_id == 0 && code == Some(StatusCode::MalformedRequest))
}
