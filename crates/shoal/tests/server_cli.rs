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
        .args([
            "local",
            "--servers",
            "2",
            "--coordinator-port",
            "0",
            "--resp-port",
            "0",
            "--native-port",
            "0",
            "--memcached-port",
            "0",
        ])
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
    assert!(line.contains("redis-cli -c -p "), "{line}");
    ping(&addr);
    // Its processes share a private secret it made in its root.
    use std::os::unix::fs::PermissionsExt;
    let secret = std::fs::metadata(root.join("cluster-secret")).unwrap();
    assert_eq!(secret.permissions().mode() & 0o777, 0o600);
    signal(&child, "-INT");
    assert!(wait_exit(&mut child).success());
    wait_for(&out, "Shoal stopped.");
    let _ = std::fs::remove_dir_all(&root);
}

/// Sends `cmds` on one RESP connection to `addr`; the replies, as text.
fn resp(addr: &str, cmds: &[&[&str]]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the RESP port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reqs = Vec::new();
    for cmd in cmds {
        reqs.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
        for a in *cmd {
            reqs.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    s.write_all(&reqs).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Every reply of these commands is one line, but a bulk's two.
    while got.windows(2).filter(|w| w == b"\r\n").count() < cmds.len() + got.iter().filter(|&&c| c == b'$').count() {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "server closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn local_with_a_password_gives_it_to_every_server() {
    let root = std::env::temp_dir().join(format!("shoal-local-auth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut child = Command::new(SHOAL)
        .args([
            "local",
            "--servers",
            "2",
            "--coordinator-port",
            "0",
            "--resp-port",
            "0",
            "--native-port",
            "0",
            "--memcached-port",
            "0",
        ])
        // Forwarding (not Redis Cluster mode): the keys of both masters are
        // written through one server with the forwarded connections' login.
        .args(["--backup-port", "0", "--memory", "64MiB", "--password", "pw", "--cluster-mode", "off", "--root"])
        .arg(&root)
        .env_remove("SHOAL_PASSWORD")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    let servers: Vec<String> = (0..2)
        .map(|_| {
            let line = wait_for(&out, ", Redis protocol ");
            line.split(", Redis protocol ").nth(1).unwrap().split(',').next().unwrap().to_string()
        })
        .collect();
    let hint = wait_for(&out, "Redis protocol:");
    assert!(hint.contains("REDISCLI_AUTH=") && !hint.contains("pw "), "{hint}");
    for addr in &servers {
        assert_eq!(resp(addr, &[&["GET", "k"]]), "-NOAUTH Authentication required.\r\n");
    }
    // Keys of both masters, written through one server and read through the other.
    let keys: Vec<String> = (0..20).map(|i| format!("key{i}")).collect();
    let mut sets: Vec<Vec<&str>> = vec![vec!["AUTH", "pw"]];
    sets.extend(keys.iter().map(|k| vec!["SET", k.as_str(), "v"]));
    let sets: Vec<&[&str]> = sets.iter().map(|c| c.as_slice()).collect();
    assert_eq!(resp(&servers[0], &sets), "+OK\r\n".repeat(21));
    let mut gets: Vec<Vec<&str>> = vec![vec!["AUTH", "default", "pw"]];
    gets.extend(keys.iter().map(|k| vec!["GET", k.as_str()]));
    let gets: Vec<&[&str]> = gets.iter().map(|c| c.as_slice()).collect();
    assert_eq!(resp(&servers[1], &gets), format!("+OK\r\n{}", "$1\r\nv\r\n".repeat(20)));
    signal(&child, "-INT");
    assert!(wait_exit(&mut child).success());
    wait_for(&out, "Shoal stopped.");
    let _ = std::fs::remove_dir_all(&root);
}

/// Symmetric caching and eviction are refused together: an evicted hot key
/// would stay readable from the copies on the other servers (eviction sends
/// no invalidation). At start (a clear message, nothing started) and
/// through CONFIG SET (Redis's refusal shape, nothing changed).
#[test]
fn symmetric_caching_refuses_eviction_at_start_and_through_config_set() {
    let root = std::env::temp_dir().join(format!("shoal-local-sc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ports = ["--coordinator-port", "0", "--resp-port", "0", "--native-port", "0", "--memcached-port", "0"];
    let out = Command::new(SHOAL)
        .arg("local")
        .args(ports)
        .args(["--backup-port", "0", "--memory", "64MiB", "--sc", "on", "--eviction", "oldest", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be combined with eviction"), "{err}");

    let mut child = Command::new(SHOAL)
        .args(["local", "--servers", "2"])
        .args(ports)
        .args(["--backup-port", "0", "--memory", "64MiB", "--sc", "on", "--cluster-mode", "off", "--root"])
        .arg(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    let line = wait_for(&out, ", Redis protocol ");
    let addr = line.split(", Redis protocol ").nth(1).unwrap().split(',').next().unwrap().to_string();
    wait_for(&out, "Redis protocol:");
    assert_eq!(
        resp(
            &addr,
            &[&["CONFIG", "SET", "maxmemory-policy", "allkeys-oldest"], &["CONFIG", "GET", "maxmemory-policy"]]
        ),
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - allkeys-oldest cannot be \
         combined with symmetric caching (--sc on)\r\n*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n"
    );
    signal(&child, "-INT");
    assert!(wait_exit(&mut child).success());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn server_reads_its_config_file_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("shoal-server-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("shoal.toml");
    std::fs::write(
        &config,
        "resp_port = 0\nnative_port = 0\nmemcached_port = 0\nmemory = \"64MiB\"\nlog_level = \"info\"\n",
    )
    .unwrap();
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
    let out = Command::new(SHOAL)
        .args(["server", "--memory", "1MiB", "--resp-port", "0", "--memcached-port", "0"])
        .output()
        .unwrap();
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
        "--memcached-port",
        "--no-memcached",
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
        "--password",
        "SHOAL_PASSWORD",
        "--acl-file",
        "--cluster-secret-file",
        "--insecure-no-secret",
    ] {
        assert!(help.contains(flag), "{flag} missing from shoal server --help");
    }
}

#[test]
fn a_cluster_server_without_a_secret_is_refused_with_a_clear_message() {
    let dir = std::env::temp_dir().join(format!("shoal-no-secret-{}", std::process::id()));
    let out = Command::new(SHOAL)
        .args([
            "server",
            "--coordinator",
            "127.0.0.1:1",
            "--resp-port",
            "0",
            "--native-port",
            "0",
            "--memcached-port",
            "0",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cluster-secret-file") && err.contains("--insecure-no-secret"), "{err}");
    let out =
        Command::new(SHOAL).args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"]).arg(&dir).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cluster-secret-file") && err.contains("--insecure-no-secret"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
