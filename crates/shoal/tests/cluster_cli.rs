//! The command line against a real 3-server cluster (see `common`):
//! `shoal stats --coordinator` lists every server, a dead one included,
//! and `shoal load --coordinator` spreads a file over the masters.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn shoal(args: &[&str]) -> Output {
    Command::new(SHOAL).args(args).env_remove("SHOAL_PASSWORD").output().expect("run shoal")
}

fn ok(args: &[&str]) -> String {
    let o = shoal(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(o.status.success(), "shoal {args:?}: {}{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

#[test]
fn stats_coordinator_shows_every_server() {
    let root = Root::new("cluster-cli-stats");
    let mut cluster = Cluster::start(&root.0, 3, 2, 0);
    let coordinator = cluster.coordinator.to_string();
    let map = cluster.map().unwrap();
    let ids: BTreeSet<u64> = map.servers.iter().map(|s| s.id.0).collect();
    assert_eq!(ids.len(), 3);

    let text = ok(&["stats", "--coordinator", &coordinator]);
    assert!(
        text.starts_with(&format!("cluster (coordinator {coordinator}): 3 servers (3 up, 0 recovering, 0 down)")),
        "{text}"
    );
    for s in &map.servers {
        let header = format!("server {} ({}, up):", s.id, s.native);
        let at = text.find(&header).unwrap_or_else(|| panic!("no section {header}: {text}"));
        let section = &text[at..];
        let server_id = section.lines().find(|l| l.starts_with("server_id ")).expect("server_id stat");
        assert_eq!(server_id.split_whitespace().nth(1), Some(s.id.0.to_string().as_str()), "{section}");
    }

    // --json: the coordinator's object, then one per server.
    let json = ok(&["stats", "--coordinator", &coordinator, "--json"]);
    let lines: Vec<Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4, "{json}");
    assert!(lines[0]["coordinator"]["servers"].is_array(), "{json}");
    let listed: BTreeSet<u64> = lines[1..].iter().map(|o| o["server"].as_u64().unwrap()).collect();
    assert_eq!(listed, ids);
    for o in &lines[1..] {
        assert_eq!(o["state"], "up");
        assert_eq!(o["stats"]["server_id"], o["server"], "{o}");
        assert!(o["stats"]["max_value_bytes"].as_u64().unwrap() > 0, "{o}");
    }

    // A server killed is still listed: not answering until the coordinator
    // declares it dead, then down.
    // The last process started, by the id its data directory keeps.
    let id = std::fs::read_to_string(root.0.join("server-2/data/server-id")).unwrap();
    let victim = map.servers.iter().find(|s| s.id.0.to_string() == id.trim()).expect("server-2's id").clone();
    let mut child = cluster.servers.pop().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen_down = false;
    while Instant::now() < deadline {
        let json = ok(&["stats", "--coordinator", &coordinator, "--json", "--timeout", "2"]);
        let o = json
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|o| o["server"] == victim.id.0)
            .unwrap_or_else(|| panic!("server {} not listed: {json}", victim.id));
        match o["state"].as_str() {
            Some("down") => {
                assert!(o.get("stats").is_none() && o.get("error").is_none(), "{o}");
                seen_down = true;
                break;
            }
            _ => assert!(o["error"].as_str().is_some_and(|e| e.contains(&victim.native.to_string())), "{o}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(seen_down, "server {} never shown down", victim.id);
    let text = ok(&["stats", "--coordinator", &coordinator]);
    assert!(text.contains(&format!("server {} ({}): down", victim.id, victim.native)), "{text}");
}

#[test]
fn load_through_the_coordinator_reaches_every_master() {
    let root = Root::new("cluster-cli-load");
    let cluster = Cluster::start(&root.0, 3, 1, 0);
    let coordinator = cluster.coordinator.to_string();
    ok(&["create-table", "t", "--coordinator", &coordinator]);
    let mut file = String::new();
    for i in 0..3000 {
        file.push_str(&format!("k{i}\tv{i}\n"));
    }
    let path = root.0.join("records.tsv");
    std::fs::write(&path, file).unwrap();
    let out = ok(&["load", "t", path.to_str().unwrap(), "--coordinator", &coordinator]);
    assert!(out.starts_with("loaded 3000 records"), "{out}");

    let mut c = cluster.client();
    let t = c.table_id("t").unwrap();
    for i in (0..3000).step_by(13) {
        assert_eq!(c.read(t, format!("k{i}").as_bytes()).unwrap().0, format!("v{i}").as_bytes());
    }
    let map = cluster.map().unwrap();
    for s in &map.servers {
        let mut one = shoal_client::blocking::Client::connect(s.native).unwrap();
        let objects = stat(&one.stats().unwrap(), "objects").unwrap();
        assert!(objects > 500, "server {}: {objects} objects", s.id);
    }
}

/// `shoal local`, stopped with SIGINT (then killed) when dropped, with
/// its stdout and its stderr as collected so far.
struct Local {
    child: std::process::Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

impl Drop for Local {
    fn drop(&mut self) {
        // One that exited (and was reaped by `wait_for`) has no process
        // left to signal.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        signal(self.child.id(), "-INT");
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Local {
    /// Waits up to `secs` for `what` on stdout; fails at once, with
    /// stderr, if `shoal local` exits first.
    fn wait_for(&mut self, what: &str, secs: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if self.out.lock().unwrap().contains(what) {
                return Ok(());
            }
            let exited = self.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() >= deadline {
                // Let the readers take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                let state = exited.map_or("still running".to_string(), |s| format!("exited: {s}"));
                return Err(format!(
                    "no {what:?} after {secs} s; shoal local {state}\nstdout:\n{}\nstderr:\n{}",
                    self.out.lock().unwrap(),
                    self.err.lock().unwrap()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Lines of `from`, appended to a shared string as they come.
fn collect(from: impl std::io::Read + Send + 'static) -> Arc<Mutex<String>> {
    use std::io::BufRead;
    let text = Arc::new(Mutex::new(String::new()));
    let collected = text.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            let mut t = collected.lock().unwrap();
            t.push_str(&line);
            t.push('\n');
        }
    });
    text
}

/// `shoal local --servers N` on `root` with the coordinator on `port`
/// and free ports elsewhere, waited for until it says it runs.
fn start_local_on(root: &std::path::Path, servers: usize, port: &str) -> Result<Local, String> {
    let mut child = Command::new(SHOAL)
        .args(["local", "--servers", &servers.to_string(), "--replicas", "1", "--memory", "64MiB"])
        .args(["--log-level", "info", "--coordinator-port", port, "--native-port", "0", "--resp-port", "0"])
        .args(["--memcached-port", "0", "--backup-port", "0"])
        .arg("--root")
        .arg(root)
        .env_remove("SHOAL_PASSWORD")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let mut local = Local { child, out, err };
    local.wait_for("Stop with Ctrl-C.", 60)?;
    Ok(local)
}

/// As `start_local_on`, on a free coordinator port: another free port
/// if the one picked was taken before `shoal local` bound it (or its
/// dashboard's, 2000 above). Returns the coordinator's address too.
fn start_local(root: &std::path::Path, servers: usize) -> (Local, String) {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port().to_string();
        match start_local_on(root, servers, &port) {
            Ok(local) => return (local, format!("127.0.0.1:{port}")),
            Err(e) if e.contains(" in use") => last = e,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("three ports in use: {last}");
}

#[test]
fn local_refuses_a_root_that_is_already_running() {
    let root = Root::new("cluster-cli-local-twice");
    let dir = root.0.join("local");
    let (first, coordinator) = start_local(&dir, 2);
    let port = coordinator.rsplit(':').next().unwrap().to_string();
    let log = dir.join("coordinator/log");
    let log_before = std::fs::metadata(&log).unwrap().len();
    let map_before = ok(&["stats", "--coordinator", &coordinator, "--json"]);

    // Same root, even on other ports: refused at once, nothing started.
    let started = Instant::now();
    let second = Command::new(SHOAL)
        .args(["local", "--servers", "2", "--coordinator-port", "0", "--native-port", "0", "--resp-port", "0"])
        .args(["--memcached-port", "0", "--backup-port", "0", "--root"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(!second.status.success(), "the second run succeeded: {stdout}{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "refused only after {:?}", started.elapsed());
    assert!(stderr.contains("is already running a cluster"), "{stderr}");
    assert!(stderr.contains(&format!("(process {})", first.child.id())), "the message names the holder: {stderr}");
    assert!(!stdout.contains("Shoal is running"), "no banner: {stdout}");

    // Another root on the live coordinator's port: refused too, rather
    // than its servers enlisting with the first run's coordinator.
    let other = root.0.join("other");
    let third = Command::new(SHOAL)
        .args(["local", "--servers", "1", "--coordinator-port", &port, "--native-port", "0", "--resp-port", "0"])
        .args(["--memcached-port", "0", "--backup-port", "0", "--no-metrics", "--root"])
        .arg(&other)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert!(!third.status.success(), "the run on a taken port succeeded: {stderr}");
    assert!(stderr.contains(&format!("{coordinator} is in use")), "{stderr}");
    assert!(!String::from_utf8_lossy(&third.stdout).contains("Shoal is running"));

    // The first cluster did not notice: its coordinator's log was not
    // truncated and it gained no server.
    assert!(std::fs::metadata(&log).unwrap().len() >= log_before, "the live coordinator's log was truncated");
    // `stats --json`'s first line is the coordinator's object.
    let servers = |json: &str| {
        let first: Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        first["coordinator"]["servers"].as_array().unwrap().len()
    };
    let map_after = ok(&["stats", "--coordinator", &coordinator, "--json"]);
    assert_eq!(servers(&map_after), servers(&map_before));
    assert_eq!(servers(&map_after), 2);

    // Stopped, the root is free again: a new run resumes it.
    drop(first);
    let _again = start_local_on(&dir, 2, &port).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(servers(&ok(&["stats", "--coordinator", &coordinator, "--json"])), 2);
}

#[test]
fn local_reports_the_recovery_of_a_killed_server() {
    let root = Root::new("cluster-cli-local");
    let (mut local, coordinator) = start_local(&root.0.join("local"), 4);
    ok(&["create-table", "t", "--coordinator", &coordinator]);
    for i in 0..50 {
        ok(&["put", "t", &format!("k{i}"), "v", "--coordinator", &coordinator]);
    }

    // Kill the server process of server-1's directory.
    let pids =
        Command::new("pgrep").args(["-P", &local.child.id().to_string(), "-f", "server-1/data"]).output().unwrap();
    let pid: u32 = String::from_utf8_lossy(&pids.stdout).trim().parse().expect("server-1's process");
    let id = std::fs::read_to_string(root.0.join("local/server-1/data/server-id")).unwrap();
    signal(pid, "-KILL");
    // Whether it saw the recovery running or only its end, shoal local
    // says which server died and that its recovery finished.
    local.wait_for(&format!("server {} died: recovery ", id.trim()), 60).unwrap_or_else(|e| panic!("{e}"));
    local.wait_for("recovered in ", 60).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok(&["get", "t", "k7", "--coordinator", &coordinator]), "v\n(version 1)\n");
}

#[test]
fn a_second_server_on_a_data_directory_in_use_is_refused() {
    let root = Root::new("cluster-cli-server-twice");
    let cluster = Cluster::start(&root.0, 1, 0, 0);
    let before = cluster.wait_up(1);
    let mut second = cluster.spawn_server(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "a second server runs on server-0's data directory");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = std::fs::read_to_string(root.0.join("server-0/log")).unwrap();
    assert!(log.contains("server.lock is locked by another running process (process"), "{log}");
    // It enlisted nothing: the cluster still has its one server, as it was.
    let after = cluster.map().unwrap();
    assert_eq!(after.servers, before.servers);
    assert_eq!(after.version, before.version);
}
