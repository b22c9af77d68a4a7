//! Per-chunk read-write locks with leases and fencing tokens (issue 18;
//! `docs/chunks.md`, "Locks"). The decision-making core: no I/O, no
//! clock of its own (every call is given [`Now`]), so tests drive time.
//!
//! # Contract
//!
//! * A lock is held by an *owner* (a client session's 64-bit id, not 0)
//!   in shared or exclusive mode, until it unlocks, its lease runs out
//!   (it may renew the lease before then), or the chunk is removed.
//! * Exclusive excludes every other holder; shared admits other shared
//!   holders. Nothing waits here: a request that cannot be granted now is
//!   answered [`LockError::Busy`], and a request *that queues* (`wait`)
//!   keeps a place in the chunk's queue for [`WAIT_PLACE`] after each
//!   attempt. A request is granted only when every queued request ahead of
//!   it is compatible with it, so a queued writer is not starved by a
//!   stream of readers: once it queues, later readers wait behind it.
//! * Every grant carries a fencing token, strictly greater than every
//!   token this table granted before (so monotonic per chunk), and at
//!   least `unix_ms << 20` of the grant: a table created after another
//!   one (a recovery master after the crashed master) grants greater
//!   tokens as long as the servers' clocks agree within the time the
//!   recovery took (`docs/chunks.md`).
//! * Chunks created by another server (their node id is not `own_node`),
//!   that is chunks this server took over in a crash recovery, are not
//!   granted until `max_lease` after this table first saw a request for
//!   that node's chunks of that table: by then every lease the crashed
//!   master granted has run out. (Keyed by table too: a chunk table's
//!   chunks of node X may come from a master that had itself recovered
//!   them from X, after this server had seen X's chunks of another table.)
//! * Chunks of an id range this server gained by a migration are not
//!   granted until `max_lease` after [`LockTable::hold_off`] was called for
//!   the range (when the copy is complete here, after the source stopped
//!   granting): the source's locks are released by the move, as by a
//!   crash, and every lease it granted has run out by then. Own chunks
//!   coming home wait too.
//! * Holders and queued requests together are at most `limit`, and those
//!   of one owner at most `owner_limit`: beyond either, requests are
//!   refused with [`LockError::TableFull`] or [`LockError::OwnerLimit`]
//!   (after dropping expired entries), so a client cannot grow the table
//!   without bound, and one owner id cannot take the whole table. Owner ids
//!   are the client's choice, so a client that uses many ids is bounded
//!   only by `limit` (`docs/chunks.md`, "Limits").
//! * Lock state belongs to one incarnation of a chunk: the server calls
//!   [`LockTable::forget`] whenever a chunk stops being live (the store's
//!   `on_chunk_gone`, under the chunk's stripe lock) and grants only while
//!   the chunk is live (`Store::with_chunk`), so a chunk created later with
//!   the same id starts unlocked.
//!
//! # Implementation
//!
//! One mutex over a map from chunk to its holders and queue; entries with
//! neither are removed. Expired holders and queue places are dropped
//! when their chunk is next touched, and all of them when a limit is
//! reached (at most once per [`SWEEP_EVERY`]) or the statistics are read.
//! An atomic copy of the number of entries lets [`LockTable::forget`]
//! return without the mutex when the table is empty (the common case of
//! evictions and removes).

use parking_lot::Mutex;
use shoal_common::{ChunkId, TableId};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a queued request keeps its place after an attempt: a client
/// that waits retries sooner than this (`shoal-client` retries at most
/// every 100 ms); one that stops retrying (it crashed) loses its place.
pub const WAIT_PLACE: Duration = Duration::from_millis(1000);

/// How long a refused request is told to wait before it tries again.
pub const RETRY_AFTER: Duration = Duration::from_millis(20);

/// A request refused by a limit sweeps the whole table for expired entries
/// at most this often (a client hammering its cap must not make every
/// request cost a walk over the table).
pub const SWEEP_EVERY: Duration = Duration::from_millis(10);

/// Bits of a fencing token below the grant's Unix milliseconds.
const TOKEN_SHIFT: u32 = 20;

/// Tokens of an earlier master are at least this (2020-01-01 in Unix
/// milliseconds, shifted): a smaller one was never granted by anyone.
const MIN_TOKEN: u64 = 1_577_836_800_000 << TOKEN_SHIFT;

/// Shared (read) or exclusive (write), as on the wire.
pub use shoal_proto::LockMode;

/// The time of a request: a monotonic instant for leases and the wall
/// clock's Unix milliseconds for tokens.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    pub at: Instant,
    pub unix_ms: u64,
}

impl Now {
    pub fn clock() -> Now {
        let unix_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        Now { at: Instant::now(), unix_ms }
    }

    /// `d` later on both clocks.
    pub fn plus(self, d: Duration) -> Now {
        Now { at: self.at + d, unix_ms: self.unix_ms + d.as_millis() as u64 }
    }
}

/// A granted lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub token: u64,
    /// The lease granted: the one asked for, at most the table's maximum.
    pub lease: Duration,
}

/// Why a lock operation was refused. Nothing changed, except that a
/// refused `wait` request holds (or refreshed) its place in the queue.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// Held by others in a conflicting mode, or others queued first, or
    /// the chunk's previous master's leases may still run: try again.
    #[error("lock busy: try again in {} ms", .retry_after.as_millis())]
    Busy { retry_after: Duration },
    /// The owner already holds the chunk in the other mode.
    #[error("this owner holds the lock in the other mode; unlock it first")]
    HeldInOtherMode,
    /// Unlock or renew of a lock this owner does not hold with this
    /// token, which this table never granted (a wrong token, or a lock
    /// that was never taken).
    #[error("lock not held: this server never granted that token")]
    NotHeld,
    /// Unlock or renew of a lock that was granted with this token and is
    /// not held any more: its lease ran out, it was unlocked, its chunk
    /// was removed, or it was granted by an earlier master of the chunk
    /// (before a crash recovery). Its token must no longer be used.
    #[error("lock lost: its lease expired, it was released, its chunk was removed, or its master recovered")]
    Lost,
    /// Holders and queued requests fill the table.
    #[error("the server's chunk lock table is full ({limit} locks and waiters)")]
    TableFull { limit: usize },
    /// This owner's holders and queued requests are at its limit.
    #[error("this lock owner holds its maximum of chunk locks and waiting requests ({limit}); unlock some first")]
    OwnerLimit { limit: usize },
    /// Owner id 0 or a zero lease.
    #[error("{0}")]
    Invalid(&'static str),
}

/// The table's counters and gauges (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Holders now (a shared lock with three holders counts three).
    pub held: u64,
    /// Queued requests now.
    pub waiters: u64,
    /// Owners with at least one holder or queued request now.
    pub owners: u64,
    pub grants: u64,
    /// Requests answered busy.
    pub busy: u64,
    /// Requests refused by the per-owner limit.
    pub owner_limited: u64,
    /// Holders dropped because their lease ran out.
    pub lease_expiries: u64,
    /// Holders dropped by an unlock, or because their chunk stopped being
    /// live (removed, evicted, its table dropped).
    pub releases: u64,
}

/// Limits and identity of a lock table.
#[derive(Clone, Copy, Debug)]
pub struct LockConfig {
    /// The node id of the chunks this server creates (see the grace rule).
    pub own_node: u16,
    /// The longest lease granted; also the grace for other nodes' chunks.
    pub max_lease: Duration,
    /// Most holders and queued requests together.
    pub limit: usize,
    /// Most holders and queued requests of one owner.
    pub owner_limit: usize,
}

#[derive(Debug)]
struct Holder {
    owner: u64,
    token: u64,
    expires: Instant,
}

#[derive(Debug)]
struct Waiter {
    owner: u64,
    mode: LockMode,
    expires: Instant,
}

#[derive(Debug, Default)]
struct ChunkLock {
    /// Exclusive: one holder; shared: any number.
    exclusive: bool,
    holders: Vec<Holder>,
    queue: VecDeque<Waiter>,
}

impl ChunkLock {
    /// Drops expired holders and queue places, accounting each in `acct`.
    fn expire(&mut self, at: Instant, acct: &mut Accounts) {
        self.holders.retain(|h| {
            let keep = h.expires > at;
            if !keep {
                acct.sub(h.owner, Gone::Expired);
            }
            keep
        });
        self.queue.retain(|w| {
            let keep = w.expires > at;
            if !keep {
                acct.sub(w.owner, Gone::Waiter);
            }
            keep
        });
        if self.holders.is_empty() {
            self.exclusive = false;
        }
    }

    fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }

    /// Whether `owner` asking for `mode` may be granted now: compatible
    /// with the holders and with every queued request ahead of it.
    fn grantable(&self, owner: u64, mode: LockMode) -> bool {
        let ahead = self.queue.iter().take_while(|w| w.owner != owner);
        match mode {
            LockMode::Exclusive => self.holders.is_empty() && ahead.count() == 0,
            LockMode::Shared => !self.exclusive && ahead.into_iter().all(|w| w.mode == LockMode::Shared),
        }
    }
}

/// How an entry left the table (for the statistics).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// A holder whose lease ran out.
    Expired,
    /// A holder that unlocked, or whose chunk went.
    Released,
    /// A queued request (granted, lapsed, or its chunk went).
    Waiter,
}

/// The counts of entries: in all, per owner, and the statistics.
#[derive(Default)]
struct Accounts {
    /// Holders plus queued requests.
    entries: usize,
    /// Holders plus queued requests of each owner that has any.
    per_owner: HashMap<u64, usize>,
    stats: LockStats,
}

impl Accounts {
    fn add(&mut self, owner: u64, holder: bool) {
        self.entries += 1;
        *self.per_owner.entry(owner).or_default() += 1;
        if holder {
            self.stats.held += 1;
        } else {
            self.stats.waiters += 1;
        }
    }

    fn sub(&mut self, owner: u64, how: Gone) {
        self.entries -= 1;
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.per_owner.entry(owner) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        match how {
            Gone::Expired => {
                self.stats.held -= 1;
                self.stats.lease_expiries += 1;
            }
            Gone::Released => {
                self.stats.held -= 1;
                self.stats.releases += 1;
            }
            Gone::Waiter => self.stats.waiters -= 1,
        }
    }

    fn of(&self, owner: u64) -> usize {
        self.per_owner.get(&owner).copied().unwrap_or(0)
    }
}

struct Inner {
    chunks: HashMap<(TableId, ChunkId), ChunkLock>,
    /// The last token granted (0: none yet).
    last_token: u64,
    acct: Accounts,
    /// When the table was last swept because of a limit.
    last_sweep: Option<Instant>,
    /// When this table first saw a request for another node's chunks of
    /// a chunk table (at most one entry per table and node with chunks).
    first_seen: HashMap<(TableId, u16), Instant>,
    /// Chunk id ranges gained by a migration and when their grants may
    /// start: (table, node, lo, hi, until). Entries go once past.
    held_off: Vec<(TableId, u16, u64, u64, Instant)>,
}

impl Inner {
    /// Drops the expired holders and queue places of one chunk.
    fn expire_chunk(&mut self, key: (TableId, ChunkId), at: Instant) {
        if let Some(state) = self.chunks.get_mut(&key) {
            state.expire(at, &mut self.acct);
            if state.is_empty() {
                self.chunks.remove(&key);
            }
        }
    }

    /// Drops every expired holder and queue place, and empty entries.
    fn sweep(&mut self, at: Instant) {
        let acct = &mut self.acct;
        self.chunks.retain(|_, state| {
            state.expire(at, acct);
            !state.is_empty()
        });
    }

    /// Whether one more entry for `owner` fits both limits (sweeping the
    /// table first if either is reached and no sweep ran lately).
    fn room_for(&mut self, owner: u64, config: &LockConfig, at: Instant) -> Result<(), LockError> {
        let full = |a: &Accounts| a.entries >= config.limit || a.of(owner) >= config.owner_limit;
        if full(&self.acct) && self.last_sweep.is_none_or(|t| at.saturating_duration_since(t) >= SWEEP_EVERY) {
            self.last_sweep = Some(at);
            self.sweep(at);
        }
        if self.acct.entries >= config.limit {
            return Err(LockError::TableFull { limit: config.limit });
        }
        if self.acct.of(owner) >= config.owner_limit {
            self.acct.stats.owner_limited += 1;
            return Err(LockError::OwnerLimit { limit: config.owner_limit });
        }
        Ok(())
    }
}

/// The lock table of one server (see the module comment).
pub struct LockTable {
    config: LockConfig,
    inner: Mutex<Inner>,
    /// `acct.entries`, stored under the mutex after every change.
    entries: AtomicUsize,
}

/// Most ranges [`LockTable::hold_off`] keeps at once.
const MAX_HELD_OFF: usize = 1024;

impl LockTable {
    pub fn new(config: LockConfig) -> LockTable {
        LockTable {
            config,
            inner: Mutex::new(Inner {
                chunks: HashMap::new(),
                last_token: 0,
                acct: Accounts::default(),
                last_sweep: None,
                first_seen: HashMap::new(),
                held_off: Vec::new(),
            }),
            entries: AtomicUsize::new(0),
        }
    }

    pub fn config(&self) -> LockConfig {
        self.config
    }

    /// Runs `f` on the table's state and publishes its entry count.
    fn with_inner<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.inner.lock();
        let out = f(&mut g);
        self.entries.store(g.acct.entries, Ordering::Release);
        out
    }

    /// Locks `chunk` of `table` for `owner` in `mode` with a lease of
    /// `lease` (at most the maximum). If `owner` holds it in `mode`
    /// already, the grant is repeated (same token, lease renewed), so a
    /// retried request is harmless. `wait`: a refusal queues the request
    /// (see the module comment). The caller checks that the chunk is live
    /// and keeps it so until this returns (`Store::with_chunk`).
    // The arguments are the request's fields, as on the wire.
    #[allow(clippy::too_many_arguments)]
    pub fn lock(
        &self,
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        mode: LockMode,
        lease: Duration,
        wait: bool,
        now: Now,
    ) -> Result<Grant, LockError> {
        check(owner, lease)?;
        let lease = lease.min(self.config.max_lease);
        let config = self.config;
        self.with_inner(|inner| {
            inner.held_off.retain(|h| h.4 > now.at);
            let (node, local) = (chunk.node(), chunk.local());
            let held = inner.held_off.iter().filter(|h| h.0 == table && h.1 == node && h.2 <= local && local <= h.3);
            if let Some(until) = held.map(|h| h.4).max() {
                inner.acct.stats.busy += 1;
                return Err(LockError::Busy { retry_after: (until - now.at).min(RETRY_AFTER * 10) });
            }
            if chunk.node() != config.own_node {
                let since = *inner.first_seen.entry((table, chunk.node())).or_insert(now.at);
                let until = since + config.max_lease;
                if now.at < until {
                    inner.acct.stats.busy += 1;
                    return Err(LockError::Busy { retry_after: (until - now.at).min(RETRY_AFTER * 10) });
                }
            }
            let key = (table, chunk);
            inner.expire_chunk(key, now.at);
            let state = inner.chunks.entry(key).or_default();
            if let Some(h) = state.holders.iter_mut().find(|h| h.owner == owner) {
                let held = if state.exclusive { LockMode::Exclusive } else { LockMode::Shared };
                if held != mode {
                    return Err(LockError::HeldInOtherMode);
                }
                h.expires = now.at + lease;
                return Ok(Grant { token: h.token, lease });
            }
            let queued = state.queue.iter().position(|w| w.owner == owner);
            if state.grantable(owner, mode) {
                if let Some(i) = queued {
                    // The queued place becomes the holder: no new entry.
                    state.queue.remove(i);
                    inner.acct.sub(owner, Gone::Waiter);
                } else if let Err(e) = inner.room_for(owner, &config, now.at) {
                    // (A sweep may have dropped this chunk's empty entry.)
                    if inner.chunks.get(&key).is_some_and(ChunkLock::is_empty) {
                        inner.chunks.remove(&key);
                    }
                    return Err(e);
                }
                let token = (inner.last_token + 1).max(now.unix_ms << TOKEN_SHIFT);
                inner.last_token = token;
                let state = inner.chunks.entry(key).or_default();
                state.exclusive = mode == LockMode::Exclusive;
                state.holders.push(Holder { owner, token, expires: now.at + lease });
                inner.acct.add(owner, true);
                inner.acct.stats.grants += 1;
                return Ok(Grant { token, lease });
            }
            inner.acct.stats.busy += 1;
            if wait {
                match queued {
                    Some(i) => state.queue[i].expires = now.at + WAIT_PLACE,
                    None => {
                        if let Err(e) = inner.room_for(owner, &config, now.at) {
                            if inner.chunks.get(&key).is_some_and(ChunkLock::is_empty) {
                                inner.chunks.remove(&key);
                            }
                            return Err(e);
                        }
                        let state = inner.chunks.entry(key).or_default();
                        state.queue.push_back(Waiter { owner, mode, expires: now.at + WAIT_PLACE });
                        inner.acct.add(owner, false);
                    }
                }
            } else if state.is_empty() {
                inner.chunks.remove(&key);
            }
            Err(LockError::Busy { retry_after: RETRY_AFTER })
        })
    }

    /// Releases the lock `owner` holds on `chunk` with `token`.
    pub fn unlock(&self, table: TableId, chunk: ChunkId, owner: u64, token: u64, now: Now) -> Result<(), LockError> {
        check(owner, Duration::from_millis(1))?;
        self.with_inner(|inner| {
            let key = (table, chunk);
            inner.expire_chunk(key, now.at);
            let found = inner.chunks.get_mut(&key).and_then(|state| {
                let i = state.holders.iter().position(|h| h.owner == owner && h.token == token)?;
                state.holders.swap_remove(i);
                if state.holders.is_empty() {
                    state.exclusive = false;
                }
                Some(state.is_empty())
            });
            match found {
                Some(empty) => {
                    if empty {
                        inner.chunks.remove(&key);
                    }
                    inner.acct.sub(owner, Gone::Released);
                    Ok(())
                }
                None => Err(missing(inner, token, now)),
            }
        })
    }

    /// Renews the lease of the lock `owner` holds on `chunk` with `token`
    /// to `lease` (at most the maximum) from now; the lease granted.
    pub fn renew(
        &self,
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        token: u64,
        lease: Duration,
        now: Now,
    ) -> Result<Duration, LockError> {
        check(owner, lease)?;
        let lease = lease.min(self.config.max_lease);
        self.with_inner(|inner| {
            inner.expire_chunk((table, chunk), now.at);
            let holder = inner
                .chunks
                .get_mut(&(table, chunk))
                .and_then(|state| state.holders.iter_mut().find(|h| h.owner == owner && h.token == token));
            match holder {
                Some(h) => {
                    h.expires = now.at + lease;
                    Ok(lease)
                }
                None => Err(missing(inner, token, now)),
            }
        })
    }

    /// Whether `owner` holds `chunk` exclusively with `token` now:
    /// `Ok(())`, or [`LockError::Lost`] or [`LockError::NotHeld`]. The
    /// fenced put runs this under the chunk's stripe lock, just before its
    /// append (`Store::put_chunk_if`): a grant to anyone else also needs
    /// that stripe lock (`Store::with_chunk`), so none can come between.
    pub fn check_exclusive(
        &self,
        table: TableId,
        chunk: ChunkId,
        owner: u64,
        token: u64,
        now: Now,
    ) -> Result<(), LockError> {
        check(owner, Duration::from_millis(1))?;
        self.with_inner(|inner| {
            inner.expire_chunk((table, chunk), now.at);
            let held = inner.chunks.get(&(table, chunk)).is_some_and(|state| {
                state.exclusive && state.holders.iter().any(|h| h.owner == owner && h.token == token)
            });
            if held {
                Ok(())
            } else {
                Err(missing(inner, token, now))
            }
        })
    }

    /// Grants no lock on chunks `node:lo..=node:hi` of `table` until
    /// `max_lease` from `now` (a range this server gains by a migration;
    /// see the module comment). At most [`MAX_HELD_OFF`] ranges are held
    /// off at once; past that the oldest is dropped.
    pub fn hold_off(&self, table: TableId, node: u16, lo: u64, hi: u64, now: Now) {
        let until = now.at + self.config.max_lease;
        let own = self.config.own_node;
        self.with_inner(|inner| {
            // The grace for another node's chunks runs from now too, not
            // from the first request after the hold-off.
            if node != own {
                inner.first_seen.entry((table, node)).or_insert(now.at);
            }
            inner.held_off.retain(|h| h.4 > now.at);
            if inner.held_off.len() >= MAX_HELD_OFF {
                inner.held_off.remove(0);
            }
            inner.held_off.push((table, node, lo, hi, until));
        })
    }

    /// Drops every lock and queued request on `chunks` of `table` (they
    /// stopped being live): their holders' renewals answer
    /// [`LockError::Lost`]. Cheap when the table is empty (no mutex).
    pub fn forget(&self, table: TableId, chunks: impl IntoIterator<Item = ChunkId>) {
        if self.entries.load(Ordering::Acquire) == 0 {
            return;
        }
        self.with_inner(|inner| {
            for chunk in chunks {
                if let Some(state) = inner.chunks.remove(&(table, chunk)) {
                    for h in &state.holders {
                        inner.acct.sub(h.owner, Gone::Released);
                    }
                    for w in &state.queue {
                        inner.acct.sub(w.owner, Gone::Waiter);
                    }
                }
            }
        })
    }

    /// The statistics, after dropping every expired entry.
    pub fn stats(&self, now: Now) -> LockStats {
        self.with_inner(|inner| {
            inner.sweep(now.at);
            LockStats { owners: inner.acct.per_owner.len() as u64, ..inner.acct.stats }
        })
    }

    /// Checks the counts against the map (tests): entries, holders and
    /// queued requests add up, in all and per owner; no entry is empty; an
    /// exclusive lock has one holder.
    #[cfg(test)]
    fn check_invariants(&self) {
        let g = self.inner.lock();
        let holders: usize = g.chunks.values().map(|c| c.holders.len()).sum();
        let queued: usize = g.chunks.values().map(|c| c.queue.len()).sum();
        assert_eq!(g.acct.entries, holders + queued);
        assert_eq!(self.entries.load(Ordering::Acquire), g.acct.entries);
        assert_eq!((g.acct.stats.held, g.acct.stats.waiters), (holders as u64, queued as u64));
        let mut per_owner: HashMap<u64, usize> = HashMap::new();
        for c in g.chunks.values() {
            assert!(!c.is_empty());
            assert!(!c.exclusive || c.holders.len() == 1);
            for o in c.holders.iter().map(|h| h.owner).chain(c.queue.iter().map(|w| w.owner)) {
                *per_owner.entry(o).or_default() += 1;
            }
        }
        assert_eq!(per_owner, g.acct.per_owner);
    }
}

/// Whether a token this table did not find held was granted (by this
/// table, or by an earlier master of the chunk: any token of a time
/// already past) and is lost, or never was (a token of the future, or
/// too small to be a token).
fn missing(inner: &Inner, token: u64, now: Now) -> LockError {
    if (MIN_TOKEN..=inner.last_token.max(now.unix_ms << TOKEN_SHIFT)).contains(&token) {
        LockError::Lost
    } else {
        LockError::NotHeld
    }
}

fn check(owner: u64, lease: Duration) -> Result<(), LockError> {
    if owner == 0 {
        return Err(LockError::Invalid("lock owner id 0 is reserved"));
    }
    if lease.is_zero() {
        return Err(LockError::Invalid("a lease must be at least 1 ms"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TableId = TableId(1);
    const C: ChunkId = ChunkId(5);
    const LEASE: Duration = Duration::from_secs(2);

    fn table() -> (LockTable, Now) {
        let now = Now { at: Instant::now(), unix_ms: 1_800_000_000_000 };
        let config = LockConfig { own_node: 0, max_lease: Duration::from_secs(10), limit: 8, owner_limit: 8 };
        (LockTable::new(config), now)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn lock_shared_admits_readers_excludes_writer() {
        let (t, now) = table();
        let a = t.lock(T, C, 1, LockMode::Shared, LEASE, false, now).unwrap();
        let b = t.lock(T, C, 2, LockMode::Shared, LEASE, false, now).unwrap();
        assert!(b.token > a.token);
        assert!(matches!(t.lock(T, C, 3, LockMode::Exclusive, LEASE, false, now), Err(LockError::Busy { .. })));
        t.unlock(T, C, 1, a.token, now).unwrap();
        assert!(matches!(t.lock(T, C, 3, LockMode::Exclusive, LEASE, false, now), Err(LockError::Busy { .. })));
        t.unlock(T, C, 2, b.token, now).unwrap();
        let c = t.lock(T, C, 3, LockMode::Exclusive, LEASE, false, now).unwrap();
        assert!(c.token > b.token);
        assert_eq!(t.stats(now).held, 1);
    }

    #[test]
    fn lock_exclusive_excludes_everyone() {
        let (t, now) = table();
        let w = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        assert!(matches!(t.lock(T, C, 2, LockMode::Shared, LEASE, false, now), Err(LockError::Busy { .. })));
        assert!(matches!(t.lock(T, C, 2, LockMode::Exclusive, LEASE, false, now), Err(LockError::Busy { .. })));
        // Another chunk, or the same id in another table, is independent.
        t.lock(T, ChunkId(6), 2, LockMode::Exclusive, LEASE, false, now).unwrap();
        t.lock(TableId(2), C, 2, LockMode::Exclusive, LEASE, false, now).unwrap();
        t.unlock(T, C, 1, w.token, now).unwrap();
        t.lock(T, C, 2, LockMode::Shared, LEASE, false, now).unwrap();
    }

    #[test]
    fn lock_repeated_by_holder_returns_same_token() {
        let (t, now) = table();
        let a = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        let again = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now.plus(ms(1500))).unwrap();
        assert_eq!(again.token, a.token);
        // The lease was renewed from the repeat: still held at 3 s.
        assert!(matches!(
            t.lock(T, C, 2, LockMode::Exclusive, LEASE, false, now.plus(ms(3000))),
            Err(LockError::Busy { .. })
        ));
        assert_eq!(t.lock(T, C, 1, LockMode::Shared, LEASE, false, now), Err(LockError::HeldInOtherMode));
    }

    #[test]
    fn lease_expiry_frees_the_lock_and_loses_the_token() {
        let (t, now) = table();
        let a = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        let later = now.plus(LEASE + ms(1));
        let b = t.lock(T, C, 2, LockMode::Exclusive, LEASE, false, later).unwrap();
        assert!(b.token > a.token);
        assert_eq!(t.renew(T, C, 1, a.token, LEASE, later), Err(LockError::Lost));
        assert_eq!(t.unlock(T, C, 1, a.token, later), Err(LockError::Lost));
        let s = t.stats(later);
        assert_eq!((s.held, s.lease_expiries), (1, 1));
    }

    #[test]
    fn renew_extends_the_lease() {
        let (t, now) = table();
        let a = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        for step in 1..=5 {
            let at = now.plus(ms(1500 * step));
            assert_eq!(t.renew(T, C, 1, a.token, LEASE, at), Ok(LEASE));
            assert!(matches!(t.lock(T, C, 2, LockMode::Shared, LEASE, false, at), Err(LockError::Busy { .. })));
        }
        // A lease above the maximum is cut to it.
        assert_eq!(t.renew(T, C, 1, a.token, Duration::from_secs(60), now), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn unlock_bad_input_is_refused() {
        let (t, now) = table();
        assert_eq!(t.unlock(T, C, 1, (now.unix_ms + 5000) << TOKEN_SHIFT, now), Err(LockError::NotHeld));
        let a = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        // Someone else's token, or a token from before this table (an earlier master).
        assert_eq!(t.unlock(T, C, 2, a.token, now), Err(LockError::Lost));
        assert_eq!(t.unlock(T, C, 1, a.token + 1, now), Err(LockError::NotHeld));
        assert_eq!(t.renew(T, C, 1, 7, LEASE, now), Err(LockError::NotHeld), "never a token");
        let earlier = (now.unix_ms - 60_000) << TOKEN_SHIFT;
        assert_eq!(t.renew(T, C, 1, earlier, LEASE, now), Err(LockError::Lost), "an earlier master's");
        assert!(matches!(t.lock(T, C, 0, LockMode::Shared, LEASE, false, now), Err(LockError::Invalid(_))));
        assert!(matches!(t.lock(T, C, 1, LockMode::Shared, Duration::ZERO, false, now), Err(LockError::Invalid(_))));
        t.unlock(T, C, 1, a.token, now).unwrap();
        assert_eq!(t.unlock(T, C, 1, a.token, now), Err(LockError::Lost), "a second unlock");
    }

    #[test]
    fn queued_writer_is_not_starved_by_readers() {
        let (t, now) = table();
        let r1 = t.lock(T, C, 1, LockMode::Shared, LEASE, false, now).unwrap();
        assert!(t.lock(T, C, 9, LockMode::Exclusive, LEASE, true, now).is_err());
        // A reader arriving after the writer queued waits behind it, even
        // though it is compatible with the holder.
        assert!(matches!(t.lock(T, C, 2, LockMode::Shared, LEASE, true, now), Err(LockError::Busy { .. })));
        t.unlock(T, C, 1, r1.token, now).unwrap();
        assert!(t.lock(T, C, 2, LockMode::Shared, LEASE, true, now).is_err(), "writer first");
        let w = t.lock(T, C, 9, LockMode::Exclusive, LEASE, true, now).unwrap();
        t.unlock(T, C, 9, w.token, now).unwrap();
        t.lock(T, C, 2, LockMode::Shared, LEASE, true, now).unwrap();
        assert_eq!(t.stats(now).waiters, 0);
    }

    #[test]
    fn queued_place_lapses_when_the_waiter_stops_retrying() {
        let (t, now) = table();
        let r = t.lock(T, C, 1, LockMode::Shared, LEASE, false, now).unwrap();
        assert!(t.lock(T, C, 9, LockMode::Exclusive, LEASE, true, now).is_err());
        t.unlock(T, C, 1, r.token, now).unwrap();
        // The writer never comes back: after its place lapses, others go.
        let later = now.plus(WAIT_PLACE + ms(1));
        assert!(t.lock(T, C, 2, LockMode::Shared, LEASE, false, now).is_err());
        t.lock(T, C, 2, LockMode::Shared, LEASE, false, later).unwrap();
    }

    #[test]
    fn tokens_increase_across_chunks_and_tables() {
        let (t, now) = table();
        let mut last = 0;
        for i in 0..20u64 {
            let at = now.plus(ms(i / 3));
            let g = t.lock(T, ChunkId(i % 3 + 1), 1, LockMode::Exclusive, LEASE, false, at).unwrap();
            assert!(g.token > last);
            assert!(g.token >= at.unix_ms << TOKEN_SHIFT);
            last = g.token;
            t.unlock(T, ChunkId(i % 3 + 1), 1, g.token, at).unwrap();
        }
        // A table made later (a recovery master) grants greater tokens,
        // and takes this table's tokens for lost ones.
        let later = now.plus(ms(100));
        let t2 = LockTable::new(t.config());
        let g = t2.lock(T, C, 1, LockMode::Exclusive, LEASE, false, later).unwrap();
        assert!(g.token > last);
        assert_eq!(t2.renew(T, C, 1, last, LEASE, later), Err(LockError::Lost));
    }

    #[test]
    fn other_nodes_chunks_wait_out_the_grace() {
        let (t, now) = table();
        let foreign = ChunkId::new(7, 1);
        let max = t.config().max_lease;
        assert!(matches!(t.lock(T, foreign, 1, LockMode::Exclusive, LEASE, false, now), Err(LockError::Busy { .. })));
        assert!(t.lock(T, foreign, 1, LockMode::Exclusive, LEASE, false, now.plus(max - ms(1))).is_err());
        t.lock(T, foreign, 1, LockMode::Exclusive, LEASE, false, now.plus(max)).unwrap();
        // Own chunks are granted at once; the same node's chunks of
        // another table wait out their own grace.
        t.lock(T, ChunkId::new(0, 2), 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        let later = now.plus(max);
        assert!(t.lock(TableId(2), foreign, 1, LockMode::Exclusive, LEASE, false, later).is_err());
        t.lock(TableId(2), foreign, 1, LockMode::Exclusive, LEASE, false, later.plus(max)).unwrap();
    }

    #[test]
    fn a_range_held_off_is_granted_only_after_the_longest_lease() {
        let (t, now) = table();
        let max = t.config().max_lease;
        let own = |local| ChunkId::new(0, local);
        t.hold_off(T, 0, 10, 19, now);
        let lock = |id, at: Now| t.lock(T, id, 1, LockMode::Exclusive, LEASE, false, at);
        assert!(matches!(lock(own(10), now), Err(LockError::Busy { .. })), "own chunks coming home wait too");
        assert!(lock(own(19), now.plus(max - ms(1))).is_err());
        lock(own(9), now).unwrap();
        lock(own(20), now).unwrap();
        lock(own(15), now.plus(max)).unwrap();
        assert!(t.lock(TableId(2), own(15), 1, LockMode::Exclusive, LEASE, false, now).is_ok(), "another table");
        // Another node's chunks: the grace runs beside the hold-off, not after it.
        let foreign = ChunkId::new(7, 12);
        t.hold_off(T, 7, 10, 19, now);
        assert!(t.lock(T, foreign, 1, LockMode::Exclusive, LEASE, false, now.plus(max - ms(1))).is_err());
        t.lock(T, foreign, 1, LockMode::Exclusive, LEASE, false, now.plus(max)).unwrap();
    }

    #[test]
    fn table_full_is_refused_until_entries_expire() {
        let (t, now) = table();
        for i in 0..8 {
            t.lock(T, ChunkId(i + 1), 1, LockMode::Shared, LEASE, false, now).unwrap();
        }
        assert_eq!(
            t.lock(T, ChunkId(100), 1, LockMode::Shared, LEASE, false, now),
            Err(LockError::TableFull { limit: 8 })
        );
        // A waiter counts too.
        assert_eq!(
            t.lock(T, ChunkId(1), 2, LockMode::Exclusive, LEASE, true, now),
            Err(LockError::TableFull { limit: 8 })
        );
        let later = now.plus(LEASE);
        t.lock(T, ChunkId(100), 1, LockMode::Shared, LEASE, false, later).unwrap();
        assert_eq!(t.stats(later).held, 1);
    }

    #[test]
    fn owner_limit_caps_one_owner_not_the_others() {
        let (t, now) = table();
        let t = LockTable::new(LockConfig { owner_limit: 3, ..t.config() });
        for i in 0..3 {
            t.lock(T, ChunkId(i + 1), 1, LockMode::Shared, LEASE, false, now).unwrap();
        }
        // A fourth lock of owner 1, held or queued, is refused; a repeat of
        // one it holds is not (no new entry).
        assert_eq!(
            t.lock(T, ChunkId(10), 1, LockMode::Shared, LEASE, false, now),
            Err(LockError::OwnerLimit { limit: 3 })
        );
        let w = t.lock(T, ChunkId(11), 2, LockMode::Exclusive, LEASE, false, now).unwrap();
        assert_eq!(
            t.lock(T, ChunkId(11), 1, LockMode::Shared, LEASE, true, now),
            Err(LockError::OwnerLimit { limit: 3 })
        );
        t.lock(T, ChunkId(1), 1, LockMode::Shared, LEASE, false, now).unwrap();
        // Other owners are not limited by owner 1's locks.
        t.lock(T, ChunkId(1), 3, LockMode::Shared, LEASE, false, now).unwrap();
        t.check_invariants();
        // A queued place turning into the hold takes no extra room.
        let t2 = LockTable::new(LockConfig { owner_limit: 1, ..t.config() });
        let w2 = t2.lock(T, C, 2, LockMode::Exclusive, LEASE, false, now).unwrap();
        assert!(matches!(t2.lock(T, C, 1, LockMode::Exclusive, LEASE, true, now), Err(LockError::Busy { .. })));
        t2.unlock(T, C, 2, w2.token, now).unwrap();
        t2.lock(T, C, 1, LockMode::Exclusive, LEASE, true, now).unwrap();
        t2.check_invariants();
        // Unlocking, an expired lease and a forgotten chunk give room back.
        t.unlock(T, ChunkId(11), 2, w.token, now).unwrap();
        t.forget(T, [ChunkId(2)]);
        t.lock(T, ChunkId(10), 1, LockMode::Shared, LEASE, false, now).unwrap();
        assert!(t.lock(T, ChunkId(12), 1, LockMode::Shared, LEASE, false, now).is_err());
        let later = now.plus(LEASE);
        t.lock(T, ChunkId(12), 1, LockMode::Shared, LEASE, false, later).unwrap();
        let s = t.stats(later);
        assert_eq!((s.held, s.owners, s.owner_limited), (1, 1, 3));
        t.check_invariants();
    }

    #[test]
    fn limit_sweeps_are_rate_limited() {
        let (t, now) = table();
        let t = LockTable::new(LockConfig { owner_limit: 1, ..t.config() });
        t.lock(T, ChunkId(1), 1, LockMode::Shared, ms(5), false, now).unwrap();
        assert!(t.lock(T, ChunkId(2), 1, LockMode::Shared, LEASE, false, now).is_err(), "swept at now");
        // The first lock expired at 5 ms, but the refusal at 6 ms does not
        // sweep again so soon (its own chunk is not touched); at 10 ms it does.
        assert!(t.lock(T, ChunkId(2), 1, LockMode::Shared, LEASE, false, now.plus(ms(6))).is_err());
        t.lock(T, ChunkId(2), 1, LockMode::Shared, LEASE, false, now.plus(SWEEP_EVERY)).unwrap();
        t.check_invariants();
    }

    #[test]
    fn forget_loses_the_locks_of_removed_chunks() {
        let (t, now) = table();
        let a = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        assert!(t.lock(T, C, 2, LockMode::Exclusive, LEASE, true, now).is_err());
        t.forget(T, [C]);
        assert_eq!(t.renew(T, C, 1, a.token, LEASE, now), Err(LockError::Lost));
        assert_eq!(t.stats(now), LockStats { grants: 1, busy: 1, releases: 1, ..LockStats::default() });
    }

    #[test]
    fn check_exclusive_passes_only_for_the_holder() {
        let (t, now) = table();
        let r = t.lock(T, C, 1, LockMode::Shared, LEASE, false, now).unwrap();
        assert_eq!(t.check_exclusive(T, C, 1, r.token, now), Err(LockError::Lost), "shared is not enough");
        t.unlock(T, C, 1, r.token, now).unwrap();
        let w = t.lock(T, C, 1, LockMode::Exclusive, LEASE, false, now).unwrap();
        assert_eq!(t.check_exclusive(T, C, 1, w.token, now), Ok(()));
        assert_eq!(t.check_exclusive(T, C, 2, w.token, now), Err(LockError::Lost), "another owner");
        assert_eq!(t.check_exclusive(T, C, 1, w.token, now.plus(LEASE)), Err(LockError::Lost));
    }

    /// A random sequence of operations against a simple model: at every
    /// step, at most one exclusive holder and never one beside readers;
    /// tokens strictly increase; the gauges match the model.
    #[test]
    fn model_random_operations_keep_the_invariants() {
        let (t, start) = table();
        let t = LockTable::new(LockConfig { limit: 1000, owner_limit: 1000, ..t.config() });
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // (owner, chunk) -> (token, exclusive, expires)
        let mut model: HashMap<(u64, u64), (u64, bool, Instant)> = HashMap::new();
        let mut last = 0;
        let mut now = start;
        for _ in 0..20_000 {
            now = now.plus(ms(next() % 50));
            model.retain(|_, v| v.2 > now.at);
            let owner = next() % 4 + 1;
            let chunk = next() % 3 + 1;
            let held = model.get(&(owner, chunk)).copied();
            match next() % 6 {
                0 | 1 => {
                    let mode = if next() % 2 == 0 { LockMode::Shared } else { LockMode::Exclusive };
                    let lease = ms(next() % 500 + 1);
                    match t.lock(T, ChunkId(chunk), owner, mode, lease, next() % 2 == 0, now) {
                        Ok(g) => {
                            let exclusive = mode == LockMode::Exclusive;
                            match held {
                                Some((token, ex, _)) => assert_eq!((g.token, ex), (token, exclusive)),
                                None => {
                                    assert!(g.token > last);
                                    last = g.token;
                                }
                            }
                            model.insert((owner, chunk), (g.token, exclusive, now.at + lease));
                        }
                        Err(LockError::Busy { .. }) => assert!(held.is_none()),
                        Err(LockError::HeldInOtherMode) => assert!(held.is_some()),
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
                2 => {
                    let r = t.unlock(T, ChunkId(chunk), owner, held.map_or(last, |h| h.0), now);
                    assert_eq!(r.is_ok(), held.is_some());
                    model.remove(&(owner, chunk));
                }
                3 => {
                    if let Some((token, ex, _)) = held {
                        let lease = ms(next() % 500 + 1);
                        assert_eq!(t.renew(T, ChunkId(chunk), owner, token, lease, now), Ok(lease));
                        model.insert((owner, chunk), (token, ex, now.at + lease));
                    }
                }
                4 => {
                    let token = held.map_or(last, |h| h.0);
                    let ran = t.check_exclusive(T, ChunkId(chunk), owner, token, now).is_ok();
                    assert_eq!(ran, held.is_some_and(|h| h.1));
                }
                _ => {
                    if next() % 8 == 0 {
                        t.forget(T, [ChunkId(chunk)]);
                        model.retain(|k, _| k.1 != chunk);
                    }
                }
            }
            t.check_invariants();
            for c in 1..=3 {
                let holders: Vec<_> = model.iter().filter(|(k, _)| k.1 == c).map(|(_, v)| v.1).collect();
                assert!(!holders.contains(&true) || holders.len() == 1, "exclusive holder not alone: {holders:?}");
            }
        }
        assert_eq!(t.stats(now).held, model.len() as u64);
    }
}
