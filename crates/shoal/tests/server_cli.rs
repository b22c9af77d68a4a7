//! The real `shoal` binary: `shoal local` and `shoal server` start, serve
//! the Redis protocol, and stop cleanly on SIGINT and SIGTERM; `--help`
//! explains every option.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// Lines of `stream` sent to a channel, so they can be awaited with a timeout.
fn lines_of(stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line containing `marker`; returns it.
fn wait_for(lines: &mpsc::Receiver<String>, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(marker) => return line,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no line containing {marker:?}");
}

fn ping(addr: &str) {
    let mut s = TcpStream::connect(addr).expect("connect to the RESP port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nGET k\r\n").unwrap();
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 12 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "server closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"+OK\r\n$1\r\nv\r\n");
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig}");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("shoal did not stop within 15 s of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn local_prints_how_to_connect_serves_and_stops_on_sigint() {
    let root = std::env::temp_dir().join(format!("shoal-local-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut child = Command::new(SHOAL)
        .args(["local", "--servers", "2", "--coordinator-port", "0", "--resp-port", "0", "--native-port", "0"])
        .args(["--backup-port", "0", "--memory", "64MiB", "--root"])
        .arg(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    wait_for(&out, "native protocol: 127.0.0.1:");
    let line = wait_for(&out, "Redis protocol:");
    let addr = line.split_whitespace().nth(2).unwrap().to_string();
    assert!(line.contains("redis-cli -p "), "{line}");
    ping(&addr);
    signal(&child, "-INT");
    assert!(wait_exit(&mut child).success());
    wait_for(&out, "Shoal stopped.");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn server_reads_its_config_file_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("shoal-server-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("shoal.toml");
    std::fs::write(&config, "resp_port = 0\nnative_port = 0\nmemory = \"64MiB\"\nlog_level = \"info\"\n").unwrap();
    let mut child = Command::new(SHOAL)
        .args(["server", "--config", config.to_str().unwrap(), "--max-connections", "50"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = lines_of(child.stderr.take().unwrap());
    let line = wait_for(&log, "Redis protocol on ");
    let addr = line.rsplit(' ').next().unwrap().to_string();
    ping(&addr);
    signal(&child, "-TERM");
    assert!(wait_exit(&mut child).success());
    wait_for(&log, "stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn server_rejects_a_bad_configuration_with_a_clear_message() {
    let out = Command::new(SHOAL).args(["server", "--memory", "1MiB", "--resp-port", "0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memory"), "{err}");
}

#[test]
fn server_help_explains_every_option() {
    let out = Command::new(SHOAL).args(["server", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--config",
        "--listen",
        "--native-port",
        "--resp-port",
        "--memory",
        "--max-value-size",
        "--max-request-size",
        "--request-buffer-size",
        "--reply-buffer-size",
        "--max-connections",
        "--client-buffer-budget",
        "--request-timeout-ms",
        "--idle-timeout",
        "--log-level",
        "--data-dir",
    ] {
        assert!(help.contains(flag), "{flag} missing from shoal server --help");
    }
}
