//! The process' resident set size.

use std::sync::OnceLock;

fn page_bytes() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as u64
        } else {
            4096
        }
    })
}

/// Resident bytes of this process (`/proc/self/statm` resident pages times
/// the page size), or 0 where that file does not exist.
pub fn rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s.split_whitespace().nth(1).and_then(|f| f.parse().ok()).unwrap_or(0);
    pages * page_bytes()
}

/// Resident bytes of process `pid` (`VmRSS` of `/proc/PID/status`), or 0
/// where that cannot be read (the process is gone).
pub fn rss_of(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_grows_when_memory_is_touched() {
        if !std::path::Path::new("/proc/self/statm").exists() {
            return;
        }
        let before = rss_bytes();
        assert!(before > 0);
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = rss_bytes();
        assert!(after >= before + (48 << 20), "rss {before} -> {after}");
        drop(v);
    }

    #[test]
    fn rss_of_reads_this_process() {
        if !std::path::Path::new("/proc/self/status").exists() {
            return;
        }
        let own = rss_of(std::process::id());
        assert!(own > 0);
        // The two sources count the same pages, give or take what this
        // test touched in between.
        let statm = rss_bytes();
        assert!(own.abs_diff(statm) < (8 << 20), "status {own}, statm {statm}");
        assert_eq!(rss_of(u32::MAX), 0);
    }
}
