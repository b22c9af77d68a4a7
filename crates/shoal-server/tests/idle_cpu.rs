//! An idle server uses no CPU: nothing polls. Its own test binary, so that
//! no other server's worker threads are counted.

mod common;

use common::{config, start, Client};
use std::net::TcpStream;
use std::time::Duration;

/// The number of this process's threads named `name`, and their CPU time in clock ticks.
fn cpu_ticks_of_threads(name: &str) -> (usize, u64) {
    let (mut threads, mut total) = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the ")" that closes the name: state is field 3; utime, stime are 14 and 15.
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("").split_whitespace().collect();
        threads += 1;
        if fields.len() > 12 {
            total += fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
        }
    }
    (threads, total)
}

#[test]
fn an_idle_server_with_open_connections_uses_no_cpu() {
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("SKIPPED: no /proc on this system");
        return;
    }
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["SET", "k", "v"]), "+OK\r\n");
    let _idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(server.resp_addr()).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let (threads, before) = cpu_ticks_of_threads("shoal-worker");
    assert_eq!(threads, shoal_server::server::WORKER_THREADS, "the runtime's worker threads are found");
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks_of_threads("shoal-worker").1 - before;
    // Clock ticks are 10 ms: allow 3 (1.5% of one core over 2 s).
    assert!(used <= 3, "idle workers used {used} ticks in 2 s");
    assert_eq!(c.call(&["GET", "k"]), "$1\r\nv\r\n");
}
