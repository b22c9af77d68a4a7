//! The client buffer budget: one bound on the memory that the request and
//! reply buffers of all client connections (every front end) hold together,
//! `client_buffer_budget` bytes.
//!
//! Each connection owns an [`Account`] and reports to it, after every step
//! that may have changed them, how many bytes its buffers hold and how many
//! of those are replies its client has not read yet ([`Account::report`]).
//! The account charges the shared counter in whole chunks ([`CHUNK`],
//! rounding up), so a connection writes shared memory only when its buffers
//! cross a chunk boundary: an ordinary connection, whose buffers stay under
//! [`FREE`], is never charged and never touches the counter. What the
//! budget does not see is therefore at most [`FREE`] per connection
//! (bounded by `max_connections`), plus what a connection's buffers grew by
//! since its last report (one request or reply).
//!
//! When the total goes over the budget:
//! 1. Back-pressure. A connection with more than [`PAUSE_SLACK`] bytes of
//!    unread replies stops reading and executing requests while the server
//!    is over ([`Account::throttled`]); it keeps sending what it owes, and
//!    resumes once its client reads or the total is back under. Connections
//!    whose clients read their replies are not paused.
//! 2. Eviction. If the total is still over [`GRACE`] later, the enforcer
//!    ([`enforce`]) closes the connections holding the most unread reply
//!    bytes (among equals, those unread for longest first) until the total
//!    would be under [`LOW_WATER`] of the budget, with a log line each,
//!    counted in `client_buffer_disconnects`; and looks again [`GRACE`]
//!    later. The victims are chosen by [`choose_victims`], which does no I/O.
//!
//! A front end learns that its connection was chosen from
//! [`Account::evicted`] (a future that completes then) and closes it at
//! once, without sending the replies it owes.

use crate::context::{ServerContext, ServerStats};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::warn;

/// Granularity of the accounting: a connection's charge is a multiple of it.
pub const CHUNK: usize = 64 * 1024;
/// A connection whose buffers hold at most this many bytes is not charged
/// (its everyday read and write buffers).
pub const FREE: usize = 128 * 1024;
/// Unread reply bytes a connection may hold and still read while the
/// server is over its budget.
pub const PAUSE_SLACK: usize = 64 * 1024;
/// How long back-pressure alone gets to bring the total under the budget
/// before connections are closed, and the pause between rounds of closing.
pub const GRACE: Duration = Duration::from_millis(250);
/// Closing stops once the total would be under this fraction (in eighths)
/// of the budget, so that one round makes room for a while.
pub const LOW_WATER: usize = 7;

/// The server-wide counter and the registry of charged connections.
pub struct ClientBudget {
    limit: usize,
    used: AtomicUsize,
    /// Wakes the enforcer when the total goes over the limit.
    over: Notify,
    conns: Mutex<HashMap<u64, Arc<Share>>>,
    started: Instant,
}

/// What the enforcer sees of one connection (written by its account).
struct Share {
    id: u64,
    peer: SocketAddr,
    charged: AtomicUsize,
    unread: AtomicUsize,
    /// Milliseconds since the budget was created, when its replies started
    /// to be unread (valid while `unread > 0`).
    unread_since: AtomicU64,
    evicted: AtomicBool,
    kick: Notify,
}

impl ClientBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> ClientBudget {
        ClientBudget {
            limit,
            used: AtomicUsize::new(0),
            over: Notify::new(),
            conns: Mutex::new(HashMap::new()),
            started: Instant::now(),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged now, over all connections.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether the charged bytes exceed the budget.
    pub fn is_over(&self) -> bool {
        self.used() > self.limit
    }

    /// An account for connection `id` from `peer`; it charges nothing until
    /// its buffers grow past [`FREE`], and releases its charge when dropped.
    pub fn open(self: &Arc<Self>, id: u64, peer: SocketAddr) -> Account {
        Account {
            budget: self.clone(),
            share: Arc::new(Share {
                id,
                peer,
                charged: AtomicUsize::new(0),
                unread: AtomicUsize::new(0),
                unread_since: AtomicU64::new(0),
                evicted: AtomicBool::new(false),
                kick: Notify::new(),
            }),
            charged: 0,
            unread_chunks: 0,
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

/// One connection's part of the budget. Not shared: the connection's task
/// owns it.
pub struct Account {
    budget: Arc<ClientBudget>,
    share: Arc<Share>,
    /// Last published charge and unread replies (in chunks).
    charged: usize,
    unread_chunks: usize,
}

/// The charge for buffers holding `held` bytes.
fn charge_for(held: usize) -> usize {
    if held <= FREE {
        0
    } else {
        held.div_ceil(CHUNK) * CHUNK
    }
}

impl Account {
    /// The connection's buffers hold `held` bytes (their capacity), of which
    /// `unread` are replies not yet taken by the client. Cheap when nothing
    /// crossed a chunk boundary since the last report.
    #[inline]
    pub fn report(&mut self, held: usize, unread: usize) {
        if charge_for(held) != self.charged || unread / CHUNK != self.unread_chunks {
            self.publish(charge_for(held), unread);
        }
    }

    #[cold]
    fn publish(&mut self, charge: usize, unread: usize) {
        let b = &self.budget;
        if charge > self.charged {
            let add = charge - self.charged;
            let before = b.used.fetch_add(add, Ordering::Relaxed);
            if before <= b.limit && before + add > b.limit {
                b.over.notify_one();
            }
        } else if charge < self.charged {
            b.used.fetch_sub(self.charged - charge, Ordering::Relaxed);
        }
        if self.charged == 0 && charge > 0 {
            b.conns.lock().insert(self.share.id, self.share.clone());
        } else if self.charged > 0 && charge == 0 {
            b.conns.lock().remove(&self.share.id);
        }
        if self.unread_chunks == 0 && unread >= CHUNK {
            self.share.unread_since.store(b.now_ms(), Ordering::Relaxed);
        }
        self.charged = charge;
        self.unread_chunks = unread / CHUNK;
        self.share.charged.store(charge, Ordering::Relaxed);
        self.share.unread.store(unread, Ordering::Relaxed);
    }

    /// Whether the connection must stop reading and executing requests: it
    /// holds more than [`PAUSE_SLACK`] unread reply bytes while the server
    /// is over its budget.
    #[inline]
    pub fn throttled(&self, unread: usize) -> bool {
        unread > PAUSE_SLACK && self.budget.is_over()
    }

    /// Whether the connection holds a charge, and so could be chosen for
    /// closing: only then need it wait on [`Account::evicted`].
    #[inline]
    pub fn is_charged(&self) -> bool {
        self.charged > 0
    }

    /// Completes once the enforcer chose this connection for closing
    /// (at once if it already has).
    pub async fn evicted(&self) {
        if self.share.evicted.load(Ordering::Relaxed) {
            return;
        }
        self.share.kick.notified().await
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        if self.charged > 0 {
            self.budget.used.fetch_sub(self.charged, Ordering::Relaxed);
            self.budget.conns.lock().remove(&self.share.id);
        }
    }
}

/// One charged connection, as [`choose_victims`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub charged: usize,
    pub unread: usize,
    /// When its replies started to be unread (any unit; smaller is older).
    pub unread_since: u64,
}

/// Which of `holders` to close so that `used` charged bytes fall under
/// [`LOW_WATER`] eighths of `limit`: indexes into `holders`, most unread
/// reply bytes first (among equal amounts, unread for longest first), then
/// connections with no unread replies by their charge. Empty when `used`
/// is within the limit. Closing all may not be enough (the charge of a
/// connection is what closing it frees); then all are returned.
pub fn choose_victims(holders: &[Holder], used: usize, limit: usize) -> Vec<usize> {
    if used <= limit {
        return Vec::new();
    }
    let target = limit / 8 * LOW_WATER;
    let mut order: Vec<usize> = (0..holders.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&holders[a], &holders[b]);
        let chunks = |h: &Holder| h.unread / CHUNK;
        chunks(y).cmp(&chunks(x)).then(x.unread_since.cmp(&y.unread_since)).then(y.charged.cmp(&x.charged))
    });
    let mut left = used;
    let mut chosen = Vec::new();
    for i in order {
        if left <= target {
            break;
        }
        left = left.saturating_sub(holders[i].charged);
        chosen.push(i);
    }
    chosen
}

/// The enforcer: sleeps until the total goes over the budget, then closes
/// connections as the module comment says, until shutdown. One per server.
pub async fn enforce(ctx: Arc<ServerContext>) {
    let budget = ctx.budget.clone();
    let mut shutdown = ctx.shutdown_signal();
    loop {
        tokio::select! {
            _ = budget.over.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        // Back-pressure first; close only what it did not cure.
        while budget.is_over() {
            tokio::select! {
                _ = tokio::time::sleep(GRACE) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            evict_round(&ctx, &budget);
        }
    }
}

/// One round of closing (see [`choose_victims`]).
fn evict_round(ctx: &ServerContext, budget: &ClientBudget) {
    let used = budget.used();
    if used <= budget.limit {
        return;
    }
    let shares: Vec<Arc<Share>> =
        budget.conns.lock().values().filter(|s| !s.evicted.load(Ordering::Relaxed)).cloned().collect();
    let holders: Vec<Holder> = shares
        .iter()
        .map(|s| Holder {
            charged: s.charged.load(Ordering::Relaxed),
            unread: s.unread.load(Ordering::Relaxed),
            unread_since: s.unread_since.load(Ordering::Relaxed),
        })
        .collect();
    for i in choose_victims(&holders, used, budget.limit) {
        let (s, h) = (&shares[i], &holders[i]);
        warn!(
            "client buffers over budget ({used} bytes charged, budget {}): closing connection {} from {} \
             ({} bytes of unread replies, {} bytes of buffers)",
            budget.limit, s.id, s.peer, h.unread, h.charged
        );
        ServerStats::add(&ctx.stats.client_buffer_disconnects, 1);
        s.evicted.store(true, Ordering::Relaxed);
        s.kick.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(charged: usize, unread: usize, since: u64) -> Holder {
        Holder { charged, unread, unread_since: since }
    }

    #[test]
    fn choose_victims_none_within_the_limit() {
        let h = [holder(10 * CHUNK, 10 * CHUNK, 0)];
        assert!(choose_victims(&h, 100 * CHUNK, 100 * CHUNK).is_empty());
    }

    #[test]
    fn choose_victims_most_unread_first_then_oldest_until_under_low_water() {
        let limit = 80 * CHUNK;
        let h = [
            holder(20 * CHUNK, 20 * CHUNK, 5),
            holder(30 * CHUNK, 30 * CHUNK, 9),
            holder(20 * CHUNK, 20 * CHUNK, 1),
            holder(30 * CHUNK, 0, 0),
        ];
        // 100 chunks used, 70 the low water: the most unread goes, and is enough.
        assert_eq!(choose_victims(&h, 100 * CHUNK, limit), vec![1]);
        // 120 used: the most unread, then the older of the two equal ones.
        assert_eq!(choose_victims(&h, 120 * CHUNK, limit), vec![1, 2]);
        assert_eq!(choose_victims(&h, 140 * CHUNK, limit), vec![1, 2, 0]);
    }

    #[test]
    fn choose_victims_takes_non_readers_last_by_charge() {
        let h = [holder(5 * CHUNK, 0, 0), holder(40 * CHUNK, 0, 0), holder(2 * CHUNK, 2 * CHUNK, 7)];
        // Low water 63 chunks: the reader with unread replies, then the largest.
        assert_eq!(choose_victims(&h, 100 * CHUNK, 72 * CHUNK), vec![2, 1]);
    }

    #[test]
    fn choose_victims_returns_all_when_closing_all_is_not_enough() {
        let h = [holder(CHUNK, CHUNK, 0), holder(CHUNK, 0, 0)];
        assert_eq!(choose_victims(&h, 100 * CHUNK, 8 * CHUNK).len(), 2);
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn report_charges_in_chunks_past_free_and_drop_releases() {
        let b = Arc::new(ClientBudget::new(1 << 30));
        let mut a = b.open(1, peer());
        a.report(FREE, 0);
        assert_eq!(b.used(), 0, "everyday buffers are free");
        assert!(!a.is_charged());
        a.report(FREE + 1, 0);
        assert_eq!(b.used(), FREE + CHUNK);
        assert_eq!(b.conns.lock().len(), 1);
        a.report(10 * CHUNK + 3, 9 * CHUNK);
        assert_eq!(b.used(), 11 * CHUNK);
        let mut c = b.open(2, peer());
        c.report(4 * CHUNK, 0);
        assert_eq!(b.used(), 15 * CHUNK);
        a.report(100, 0);
        assert_eq!(b.used(), 4 * CHUNK);
        assert_eq!(b.conns.lock().len(), 1);
        drop(c);
        assert_eq!(b.used(), 0);
        assert!(b.conns.lock().is_empty());
    }

    #[test]
    fn throttled_only_over_budget_with_unread_replies() {
        let b = Arc::new(ClientBudget::new(4 * CHUNK));
        let mut a = b.open(1, peer());
        assert!(!a.throttled(10 * CHUNK), "within budget");
        a.report(6 * CHUNK, 6 * CHUNK);
        assert!(b.is_over());
        assert!(a.throttled(PAUSE_SLACK + 1));
        assert!(!a.throttled(PAUSE_SLACK), "a reading client is not paused");
    }

    #[tokio::test]
    async fn evicted_completes_once_chosen() {
        let b = Arc::new(ClientBudget::new(CHUNK));
        let mut a = b.open(1, peer());
        a.report(4 * CHUNK, 4 * CHUNK);
        let share = b.conns.lock().get(&1).unwrap().clone();
        share.evicted.store(true, Ordering::Relaxed);
        share.kick.notify_one();
        tokio::time::timeout(Duration::from_secs(1), a.evicted()).await.expect("woken");
    }
}
