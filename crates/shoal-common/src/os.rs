//! Small operating-system helpers shared by the binaries and their tests.

use std::sync::atomic::{AtomicU32, Ordering};

/// Lowers the calling thread's CPU priority to `nice` (Linux: priorities
/// are per thread). A failure leaves the priority as it was. Raising it
/// back needs privileges, so call this only on threads of their own.
pub fn lower_this_thread_priority(nice: i32) {
    // SAFETY: plain system calls on this thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

/// Whether this process runs as root (effective user id 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Ports [`free_local_port`] tried, so that successive picks differ.
static PORTS_TRIED: AtomicU32 = AtomicU32::new(0);

/// A port of 127.0.0.1 nobody listens on, from 20000-31999: below Linux's
/// ephemeral range (32768 and up), so that no outgoing connection or
/// port-0 listener of another process can take it between this check and
/// the bind of the process it is for. `None` if every port there is taken.
pub fn free_local_port() -> Option<u16> {
    let seed = std::process::id().wrapping_mul(7919);
    for _ in 0..12_000 {
        let n = PORTS_TRIED.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (seed.wrapping_add(n.wrapping_mul(131)) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Some(port);
        }
    }
    None
}

/// Nanoseconds of `CLOCK_BOOTTIME`: monotonic, and, unlike
/// `CLOCK_MONOTONIC`, still counting while the machine is suspended, so a
/// lease timed with it never outlives its real length across a suspend
/// (the coordinator's side of a lease may use any monotonic clock: a clock
/// that stops only makes it wait longer). A vDSO read, no system call, on
/// the TSC clock source.
pub fn boot_time_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on
    // every Linux this runs on (2.6.39 and later).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// User and system CPU seconds used by this process (`children`: by its
/// waited-for children), from getrusage; zeros if it fails.
pub fn cpu_seconds(children: bool) -> (f64, f64) {
    let who = if children { libc::RUSAGE_CHILDREN } else { libc::RUSAGE_SELF };
    // SAFETY: a zeroed rusage is a valid value of the plain C struct, and
    // getrusage only writes into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(u.ru_utime), secs(u.ru_stime))
}

/// Resident bytes of this process (`/proc/self/statm` resident pages times
/// the page size), or 0 where that file cannot be read.
pub fn rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s.split_whitespace().nth(1).and_then(|f| f.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * if page > 0 { page as u64 } else { 4096 }
}
