//! Chunk locks on the client side (`docs/chunks.md`, "Locks"): the lock
//! handle, the owner id each client takes, the retry schedule of a lock
//! that waits, and the background renewal of the async client.
//!
//! The server never parks a lock request: one it cannot grant now is
//! answered LOCK_BUSY (keeping the request's place in the chunk's queue
//! for a second). [`Client::lock_chunk`](crate::Client::lock_chunk) and
//! its blocking twin retry with a growing delay (1 ms doubling to
//! [`MAX_BACKOFF`]) until granted or until their timeout.

use crate::error::{ClientError, LockError};
use shoal_proto::{ChunkId, LockMode, Response, TableId, Version};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lease a lock asks for unless told otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);

/// The longest pause between two attempts of a waiting lock (well below
/// the second a server keeps a queued request's place).
pub const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// A lock granted to this client. Plain data: unlocking, renewing and the
/// fenced put take it by reference. Valid, from the client's point of
/// view, until [`ChunkLock::valid_until`]: the server's lease started no
/// earlier than the request was sent, so it lasts at least that long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLock {
    pub table: TableId,
    pub chunk: ChunkId,
    pub mode: LockMode,
    /// The client session that holds it ([`crate::Client::lock_owner`]).
    pub owner: u64,
    /// The fencing token: greater than every token granted for this chunk
    /// before (see `docs/chunks.md` for how to use it).
    pub token: u64,
    /// The lease granted (the one asked for, at most the server's maximum).
    pub lease: Duration,
    /// When the request that granted or last renewed the lease was sent.
    pub renewed_at: Instant,
}

impl ChunkLock {
    /// Until when the lock is certainly held, unless lost to a removal of
    /// the chunk or a crash of its master (which renewals report).
    pub fn valid_until(&self) -> Instant {
        self.renewed_at + self.lease
    }
}

/// A fresh owner id: random, never 0. Each client takes one when it is
/// made, so two clients (or two processes) never share locks.
pub(crate) fn new_owner_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.finish().max(1)
}

/// The lease as the request's field: whole milliseconds, 1 to `u32::MAX`.
pub(crate) fn lease_ms(lease: Duration) -> u32 {
    u32::try_from(lease.as_millis()).unwrap_or(u32::MAX).max(1)
}

/// The pause before the next attempt of a waiting lock: the server's hint,
/// at least the backoff so far and at most [`MAX_BACKOFF`] or what is left
/// of the timeout.
pub(crate) fn next_pause(backoff: &mut Duration, hint_us: u32, deadline: Instant) -> Option<Duration> {
    let left = deadline.checked_duration_since(Instant::now())?;
    let pause = (*backoff).max(Duration::from_micros(hint_us.into())).min(MAX_BACKOFF).min(left);
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    Some(pause)
}

pub(crate) mod conv {
    use super::*;

    fn mismatch(r: &Response<'_>) -> ClientError {
        ClientError::Protocol(format!("unexpected response to the request: {:?}", r.opcode()))
    }

    pub fn lock(r: Response<'_>) -> Result<(u64, Duration), ClientError> {
        match r {
            Response::ChunkLock { token, lease_ms } => Ok((token, Duration::from_millis(lease_ms.into()))),
            r => Err(mismatch(&r)),
        }
    }

    pub fn unlock(r: Response<'_>) -> Result<(), ClientError> {
        match r {
            Response::ChunkUnlock => Ok(()),
            r => Err(mismatch(&r)),
        }
    }

    pub fn renew(r: Response<'_>) -> Result<Duration, ClientError> {
        match r {
            Response::ChunkRenew { lease_ms } => Ok(Duration::from_millis(lease_ms.into())),
            r => Err(mismatch(&r)),
        }
    }

    pub fn put_locked(r: Response<'_>) -> Result<Version, ClientError> {
        match r {
            Response::ChunkPutLocked { version } => Ok(version),
            r => Err(mismatch(&r)),
        }
    }
}

/// Renews a lock in the background (async client,
/// [`Client::keep_chunk_lock`](crate::Client::keep_chunk_lock)) every
/// third of its lease until dropped or [`LockKeeper::unlock`]ed. If a
/// renewal answers that the lock is lost, or none succeeds before the
/// lease would run out, [`LockKeeper::is_lost`] turns true and renewal
/// stops: the application must stop acting under the lock.
pub struct LockKeeper {
    lock: ChunkLock,
    lost: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    client: crate::Client,
}

impl LockKeeper {
    pub(crate) fn start(client: crate::Client, lock: ChunkLock) -> LockKeeper {
        let lost = Arc::new(AtomicBool::new(false));
        let (c, flag) = (client.clone(), lost.clone());
        let task = tokio::spawn(async move {
            let mut held = lock;
            let mut pause = held.lease / 3;
            loop {
                tokio::time::sleep(pause).await;
                let sent = Instant::now();
                match c.renew_chunk_lock(&held).await {
                    Ok(lease) => {
                        held.lease = lease;
                        held.renewed_at = sent;
                        pause = lease / 3;
                    }
                    // Lost, or not held: nothing more to renew.
                    Err(LockError::Lost | LockError::NotHeld) => break,
                    // The server cannot be reached: try again soon, while
                    // the lease may still hold.
                    Err(_) if Instant::now() + held.lease / 10 < held.valid_until() => pause = held.lease / 10,
                    Err(_) => break,
                }
            }
            flag.store(true, Ordering::Release);
        });
        LockKeeper { lock, lost, task, client }
    }

    /// The lock as granted (its token does not change on renewal).
    pub fn lock(&self) -> &ChunkLock {
        &self.lock
    }

    /// Whether the lock is lost (or may be: renewal failed for a lease).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Stops renewing and releases the lock.
    pub async fn unlock(self) -> Result<(), LockError> {
        self.task.abort();
        self.client.unlock_chunk(&self.lock).await
    }
}

impl Drop for LockKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_owner_id_is_never_zero_and_differs() {
        let ids: std::collections::HashSet<u64> = (0..1000).map(|_| new_owner_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&0));
    }

    #[test]
    fn next_pause_grows_to_the_cap_and_stops_at_the_deadline() {
        let mut b = Duration::from_millis(1);
        let far = Instant::now() + Duration::from_secs(60);
        let pauses: Vec<_> = (0..10).map(|_| next_pause(&mut b, 0, far).unwrap()).collect();
        assert_eq!(pauses[0], Duration::from_millis(1));
        assert_eq!(pauses[1], Duration::from_millis(2));
        assert_eq!(*pauses.last().unwrap(), MAX_BACKOFF);
        // The server's hint is honoured, within the cap.
        let mut b = Duration::from_millis(1);
        assert_eq!(next_pause(&mut b, 20_000, far), Some(Duration::from_millis(20)));
        assert_eq!(next_pause(&mut b, 0, Instant::now() - Duration::from_millis(1)), None);
        assert_eq!(lease_ms(Duration::ZERO), 1);
        assert_eq!(lease_ms(Duration::from_secs(5)), 5000);
    }
}
