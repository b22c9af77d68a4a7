//! Writers waiting for the durable position, woken one runtime at a time.
//!
//! Waking a task that lives on another runtime costs that runtime's thread
//! a syscall (its driver is unparked), once per task woken. Writers of one
//! server worker all live on that worker's runtime, so each runtime gets one
//! dispatcher task that alone waits on the replicator's watch channel and
//! wakes the runtime's writers from inside it: one cross-thread wake per
//! runtime per durable advance, however many writers wait there.
//!
//! A dispatcher runs while its runtime has waiters and exits when none is
//! left (or its runtime is dropped, waking everyone so that they re-poll).

use super::{Inner, ReplicationError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::runtime::{Handle, Id};

/// Every runtime's waiters of one replicator.
#[derive(Default)]
pub(super) struct Waiters {
    by_runtime: Mutex<HashMap<Id, Arc<Local>>>,
}

/// The waiters of one runtime.
#[derive(Default)]
struct Local {
    st: Mutex<LocalState>,
}

#[derive(Default)]
struct LocalState {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Slots with a waker.
    pending: usize,
    /// A dispatcher task is running for these waiters.
    running: bool,
}

#[derive(Default)]
struct Slot {
    pos: u64,
    waker: Option<Waker>,
}

/// Resolves once the durable position reaches `pos` (see
/// [`super::Replicator::wait_durable`]); polled inside a tokio runtime.
pub(super) struct Wait<'a> {
    inner: &'a Arc<Inner>,
    pos: u64,
    handle: Handle,
    slot: Option<(Arc<Local>, usize)>,
}

impl<'a> Wait<'a> {
    pub fn new(inner: &'a Arc<Inner>, pos: u64, handle: Handle) -> Wait<'a> {
        Wait { inner, pos, handle, slot: None }
    }

    fn ready(&self) -> Option<Result<(), ReplicationError>> {
        if self.inner.durable.load(Ordering::SeqCst) >= self.pos {
            Some(Ok(()))
        } else if self.inner.closed.load(Ordering::SeqCst) {
            Some(Err(ReplicationError::Shutdown))
        } else {
            None
        }
    }
}

impl Future for Wait<'_> {
    type Output = Result<(), ReplicationError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(r) = this.ready() {
            return Poll::Ready(r);
        }
        let (local, ix) = this.slot.get_or_insert_with(|| {
            let id = this.handle.id();
            let local = this.inner.waiters.by_runtime.lock().entry(id).or_default().clone();
            let ix = {
                let mut st = local.st.lock();
                match st.free.pop() {
                    Some(ix) => ix,
                    None => {
                        st.slots.push(Slot::default());
                        st.slots.len() - 1
                    }
                }
            };
            (local, ix)
        });
        let spawn = {
            let mut st = local.st.lock();
            let slot = &mut st.slots[*ix];
            slot.pos = this.pos;
            let fresh = match &mut slot.waker {
                Some(w) => {
                    w.clone_from(cx.waker());
                    false
                }
                None => {
                    slot.waker = Some(cx.waker().clone());
                    true
                }
            };
            if fresh {
                st.pending += 1;
            }
            let spawn = !st.running;
            st.running = true;
            spawn
        };
        if spawn {
            let id = this.handle.id();
            this.handle.spawn(dispatch(this.inner.clone(), local.clone(), id));
        }
        // The position may have moved before the waker was in place.
        match this.ready() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some((local, ix)) = self.slot.take() {
            let mut st = local.st.lock();
            if st.slots[ix].waker.take().is_some() {
                st.pending -= 1;
            }
            st.free.push(ix);
        }
    }
}

/// Stops a dispatcher's bookkeeping however it ends (its runtime may drop
/// it): whoever still waits is woken, to re-poll and start another.
struct Exit {
    local: Arc<Local>,
    /// Left because no one waits: nothing to clean up.
    idle: bool,
}

impl Drop for Exit {
    fn drop(&mut self) {
        if self.idle {
            return;
        }
        let wakers: Vec<Waker> = {
            let mut st = self.local.st.lock();
            st.running = false;
            st.pending = 0;
            st.slots.iter_mut().filter_map(|s| s.waker.take()).collect()
        };
        for w in wakers {
            w.wake();
        }
    }
}

/// Wakes this runtime's waiters whenever the durable position passes theirs.
async fn dispatch(inner: Arc<Inner>, local: Arc<Local>, id: Id) {
    let mut exit = Exit { local: local.clone(), idle: false };
    let mut rx = inner.durable_rx.clone();
    let mut due: Vec<Waker> = Vec::new();
    loop {
        rx.borrow_and_update();
        let durable = inner.durable.load(Ordering::SeqCst);
        let closed = inner.closed.load(Ordering::SeqCst);
        let idle = {
            let mut st = local.st.lock();
            let mut woken = 0;
            for s in st.slots.iter_mut() {
                if s.waker.is_some() && (s.pos <= durable || closed) {
                    due.push(s.waker.take().expect("checked"));
                    woken += 1;
                }
            }
            st.pending -= woken;
            if st.pending == 0 {
                st.running = false;
            }
            st.pending == 0
        };
        for w in due.drain(..) {
            w.wake();
        }
        if idle {
            exit.idle = true;
            let mut map = inner.waiters.by_runtime.lock();
            if map.get(&id).is_some_and(|l| Arc::ptr_eq(l, &local)) && !local.st.lock().running {
                map.remove(&id);
            }
            return;
        }
        if closed || rx.changed().await.is_err() {
            // Shut down: `Exit` wakes everyone, who see it.
            return;
        }
    }
}
