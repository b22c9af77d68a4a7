//! Brief, adaptive spinning after activity, so that a client sending one
//! request at a time may be answered without the kernel waking a sleeping
//! worker for each request.
//!
//! After a connection sends its replies, it may retry non-blocking reads
//! for up to [`SPIN`] before going back to sleep in epoll, yielding to the
//! runtime between tries so that its worker's other connections keep being
//! served. It spins only when its client's last request came within
//! [`ARM_GAP`] of the reply before it (the client is in a request loop),
//! only while no other connection spins and few are open ([`SpinGate`]:
//! with many clients a spin would hold a core others wait for), and only when
//! spinning has been measured to pay ([`SpinPolicy`]). So spinning never
//! outlasts activity: an idle server, or an idle connection, uses no CPU.
//!
//! Whether spinning pays depends on the machine: where a sleeping thread
//! wakes slowly (a cross-core wakeup of an idle virtual CPU can take 50 us)
//! it halves the round trip; where the scheduler runs client and server on
//! one core, handing the core back and forth, a spinning server keeps the
//! core from its client and is slower. So each connection measures both.
//!
//! The reads go straight to the socket (not through the runtime's
//! readiness, which only the worker's epoll updates). Bytes read this way
//! are simply in the buffer; the runtime may later report the socket
//! readable once more, which costs one read that finds nothing.

use crate::context::ServerStats;
use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Longest a connection spins for its client's next request.
pub const SPIN: Duration = Duration::from_micros(50);

/// A connection spins after a reply only if its client's last request came
/// at most this long after the reply before it. Longer than [`SPIN`]: a
/// gap measured while not spinning includes the wakeup that spinning saves.
pub const ARM_GAP: Duration = Duration::from_micros(200);

/// Most bytes one spinning read takes (the rest, if any, is read normally).
const SPIN_READ: usize = 4096;

/// One wait in this many is made the other way than the policy prefers,
/// so that both ways stay measured. Exploring spinning more rarely than
/// sleeping was measured slower: the policy then stays too long in the
/// wrong way after a noisy sample.
const EXPLORE_EVERY: u32 = 16;

/// Per connection: whether to spin for the next request. The decision core
/// of this module, without I/O: fed each request's gap, it answers.
///
/// The gap is the time from the connection's last reply being sent to the
/// next request being read: the client's turnaround plus every wakeup on
/// the way, which spinning may shorten or lengthen. The policy keeps a
/// moving average of the gaps after spinning and after sleeping, spins
/// when the former is shorter, and makes one wait in [`EXPLORE_EVERY`] the
/// other way. It never spins after a gap over [`ARM_GAP`].
#[derive(Clone, Debug, Default)]
pub struct SpinPolicy {
    /// Moving averages (1/8 weight for each new sample) of the gaps, in
    /// nanoseconds, after spinning and after sleeping; 0 until measured.
    spun_ns: u64,
    slept_ns: u64,
    /// Whether the current wait spins.
    spinning: bool,
    /// Whether the last gap was short enough to spin at all.
    armed: bool,
    waits: u32,
}

impl SpinPolicy {
    /// Records that a request came `gap` after the reply before it; the wait
    /// for it spun if the last [`SpinPolicy::spin_next`] said so.
    pub fn record(&mut self, gap: Duration) {
        let ns = gap.as_nanos().min(u64::MAX as u128) as u64;
        let avg = if self.spinning { &mut self.spun_ns } else { &mut self.slept_ns };
        *avg = if *avg == 0 { ns.max(1) } else { (*avg * 7 + ns) / 8 };
        self.armed = gap <= ARM_GAP;
    }

    /// Records a request that came with no reply before it since the last
    /// one (a request split over reads, or pipelining): no gap to learn from.
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// Records that the wait [`SpinPolicy::spin_next`] chose to spin does
    /// not (another connection spins).
    pub fn not_spinning(&mut self) {
        self.spinning = false;
    }

    /// Whether to spin while waiting for the next request; call once per wait.
    pub fn spin_next(&mut self) -> bool {
        if !self.armed {
            self.spinning = false;
            return false;
        }
        self.waits = self.waits.wrapping_add(1);
        let prefer_spin = match (self.spun_ns, self.slept_ns) {
            (0, _) => true,
            (_, 0) => false,
            (spun, slept) => spun < slept,
        };
        self.spinning = prefer_spin != self.waits.is_multiple_of(EXPLORE_EVERY);
        self.spinning
    }
}

/// Most connections a server may have open for one of them to spin: with
/// more, some other client is likely waiting for the core a spin would hold.
pub const MAX_CONNECTIONS_TO_SPIN: u64 = 2;

/// Lets at most one connection of the server spin at a time, and only
/// while at most [`MAX_CONNECTIONS_TO_SPIN`] are open.
#[derive(Default)]
pub struct SpinGate {
    spinning: AtomicUsize,
}

/// The right to spin, returned to the gate when dropped.
pub struct SpinPermit<'a>(&'a SpinGate);

impl SpinGate {
    /// The permit to spin, unless another connection holds it or too many
    /// connections are open (by `stats`).
    pub fn try_enter(&self, stats: &ServerStats) -> Option<SpinPermit<'_>> {
        if ServerStats::get(&stats.connections_current) > MAX_CONNECTIONS_TO_SPIN {
            return None;
        }
        self.spinning.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).ok().map(|_| SpinPermit(self))
    }
}

impl Drop for SpinPermit<'_> {
    fn drop(&mut self) {
        self.0.spinning.store(0, Ordering::Release);
    }
}

/// Retries a non-blocking read of `stream` into `buf` (at most `room`
/// bytes, within its spare capacity) until bytes come, the peer closes
/// (`Ok(Some(0))`), or `until` passes (`Ok(None)`). Yields to the runtime
/// between tries. Dropping the future mid-way leaves `buf` as it was.
pub async fn read_until<B: SpinBuf>(
    stream: &TcpStream,
    buf: &mut B,
    room: usize,
    until: Instant,
) -> io::Result<Option<usize>> {
    let max = room.min(buf.spare()).min(SPIN_READ);
    if max == 0 {
        return Ok(None);
    }
    loop {
        match try_read(stream, buf, max) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        tokio::task::yield_now().await;
    }
}

/// One non-blocking read straight from the socket, appended to `buf`.
fn try_read<B: SpinBuf>(stream: &TcpStream, buf: &mut B, max: usize) -> io::Result<usize> {
    let len = buf.len();
    buf.set_len_zeroed(len + max);
    let r = (&*socket2::SockRef::from(stream)).read(&mut buf[len..]);
    buf.set_len_zeroed(len + *r.as_ref().unwrap_or(&0));
    r
}

/// A connection's input buffer, as a spinning read appends to it (RESP
/// keeps a `BytesMut`, the native protocol a `Vec<u8>`).
pub trait SpinBuf: std::ops::DerefMut<Target = [u8]> {
    /// Bytes that fit without growing.
    fn spare(&self) -> usize;
    /// Grows (with zeros) or cuts to `len` bytes.
    fn set_len_zeroed(&mut self, len: usize);
}

impl SpinBuf for bytes::BytesMut {
    fn spare(&self) -> usize {
        self.capacity() - self.len()
    }

    fn set_len_zeroed(&mut self, len: usize) {
        self.resize(len, 0);
    }
}

impl SpinBuf for Vec<u8> {
    fn spare(&self) -> usize {
        self.capacity() - self.len()
    }

    fn set_len_zeroed(&mut self, len: usize) {
        self.resize(len, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `policy` waits whose gap is `spun` after spinning and `slept`
    /// after sleeping; returns how many of `n` waits spun.
    fn run(policy: &mut SpinPolicy, n: usize, spun: u64, slept: u64) -> usize {
        let mut spins = 0;
        for _ in 0..n {
            let spin = policy.spin_next();
            spins += spin as usize;
            policy.record(Duration::from_micros(if spin { spun } else { slept }));
        }
        spins
    }

    #[test]
    fn spin_policy_spins_mostly_where_spinning_is_faster() {
        let mut p = SpinPolicy::default();
        p.record(Duration::from_micros(30));
        let spins = run(&mut p, 1600, 10, 55);
        assert!(spins > 1400 && spins < 1600, "spun {spins} of 1600: explores the other way now and then");
    }

    #[test]
    fn spin_policy_stops_spinning_where_sleeping_is_faster() {
        let mut p = SpinPolicy::default();
        p.record(Duration::from_micros(30));
        let spins = run(&mut p, 1600, 40, 9);
        assert!(spins > 0 && spins < 200, "spun {spins} of 1600");
    }

    #[test]
    fn spin_policy_follows_a_change_of_machine_behaviour() {
        let mut p = SpinPolicy::default();
        p.record(Duration::from_micros(30));
        run(&mut p, 800, 40, 9);
        assert!(run(&mut p, 800, 10, 55) > 600, "spinning became faster: it spins again");
    }

    #[test]
    fn spin_policy_never_spins_after_a_long_gap_or_without_one() {
        let mut p = SpinPolicy::default();
        assert!(!p.spin_next(), "nothing measured yet");
        p.record(Duration::from_micros(10));
        assert!(p.spin_next());
        p.record(Duration::from_millis(5));
        assert!((0..100).all(|_| !p.spin_next()), "an idle client is not spun for");
        p.record(Duration::from_micros(10));
        p.disarm();
        assert!(!p.spin_next());
    }

    #[test]
    fn spin_gate_admits_one_spinner_at_a_time() {
        let gate = SpinGate::default();
        let stats = ServerStats::default();
        let first = gate.try_enter(&stats);
        assert!(first.is_some());
        assert!(gate.try_enter(&stats).is_none());
        drop(first);
        assert!(gate.try_enter(&stats).is_some());
        ServerStats::add(&stats.connections_current, MAX_CONNECTIONS_TO_SPIN + 1);
        assert!(gate.try_enter(&stats).is_none(), "many clients: none spins");
    }
}
