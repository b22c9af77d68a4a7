//! Epochs: how memory freed by the cleaner is reclaimed only once no reader
//! can still see it (Rumble §4.4.3; RCU's wait-for-readers).
//!
//! Readers [`Epochs::pin`] around every use of a log reference they loaded
//! from the hash table; pinning is two atomic operations on a per-thread
//! stripe, never a lock. The cleaner, after unlinking a segment's entries
//! from the hash table, calls [`Epochs::synchronize`], which returns once
//! every reader that pinned before the call has unpinned. Only then may the
//! segment's seglets be reused.
//!
//! Contract: only one thread calls `synchronize` at a time (the cleaner), and
//! no thread calls it while pinned.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

const STRIPES: usize = 64;

#[repr(align(128))]
#[derive(Default)]
struct Stripe {
    /// Readers pinned in an even / odd epoch.
    active: [AtomicU64; 2],
}

pub struct Epochs {
    current: AtomicU64,
    stripes: Box<[Stripe]>,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_STRIPE: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed) % STRIPES;
}

/// Keeps memory visible to this reader alive until dropped.
pub struct Guard<'a> {
    stripe: &'a Stripe,
    parity: usize,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.stripe.active[self.parity].fetch_sub(1, Ordering::Release);
    }
}

impl Default for Epochs {
    fn default() -> Self {
        Epochs { current: AtomicU64::new(0), stripes: (0..STRIPES).map(|_| Stripe::default()).collect() }
    }
}

impl Epochs {
    pub fn pin(&self) -> Guard<'_> {
        let stripe = &self.stripes[THREAD_STRIPE.with(|s| *s)];
        loop {
            let e = self.current.load(Ordering::SeqCst);
            let parity = (e & 1) as usize;
            stripe.active[parity].fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.current.load(Ordering::SeqCst) == e {
                return Guard { stripe, parity };
            }
            stripe.active[parity].fetch_sub(1, Ordering::Release);
        }
    }

    /// Waits until every reader pinned before this call has unpinned.
    pub fn synchronize(&self) {
        fence(Ordering::SeqCst);
        let old = self.current.fetch_add(1, Ordering::SeqCst);
        let parity = (old & 1) as usize;
        let mut spins = 0u32;
        while self.stripes.iter().any(|s| s.active[parity].load(Ordering::Acquire) != 0) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        fence(Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn synchronize_waits_for_pinned_reader() {
        let epochs = Arc::new(Epochs::default());
        let released = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let (epochs, released) = (epochs.clone(), released.clone());
            std::thread::spawn(move || {
                let g = epochs.pin();
                tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                released.store(true, Ordering::SeqCst);
                drop(g);
            })
        };
        rx.recv().unwrap();
        epochs.synchronize();
        assert!(released.load(Ordering::SeqCst), "synchronize returned while a reader was pinned");
        reader.join().unwrap();
        // With no readers it returns at once, twice in a row (both parities).
        epochs.synchronize();
        epochs.synchronize();
    }
}
