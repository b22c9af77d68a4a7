//! Standby coordinators with the state in etcd (docs/coordinator.md,
//! "Standby coordinators"), as processes: the leader SIGKILLed just after
//! it saved a crash recovery, under a write load, and the standby finishes
//! that recovery with every acknowledged write kept; two coordinators
//! started at once never both act, as etcd's history of revisions shows.
//!
//! They need etcd (Debian's etcd-server, installed by .ci/run) and are
//! skipped, saying so, where it is not installed.

mod common;

use common::*;
use etcd_client::{EventType, WatchOptions};
use shoal_cluster::{ClusterMap, ControlClient, CoordinatorAddrs, ServerState};
use shoal_coordinator::local_etcd::{etcd_installed, LocalEtcd};
use shoal_coordinator::ClusterState;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

fn skip(test: &str) -> bool {
    if etcd_installed() {
        return false;
    }
    eprintln!("SKIPPED {test}: etcd is not installed (apt-get install etcd-server; .ci/run installs it)");
    true
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The map, from whichever coordinator leads.
fn map(addrs: &CoordinatorAddrs) -> Option<ClusterMap> {
    let mut c = ControlClient::new(addrs.clone()).with_timeout(Duration::from_secs(2));
    runtime().block_on(c.get_map()).ok()
}

fn wait_for_map(addrs: &CoordinatorAddrs, what: &str, secs: u64, f: impl Fn(&ClusterMap) -> bool) -> ClusterMap {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(m) = map(addrs) {
            if f(&m) {
                return m;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `shoal local --etcd`, stopped with SIGINT (then killed) when dropped.
struct Local {
    child: Child,
    out: Arc<Mutex<String>>,
}

impl Local {
    fn start(root: &Path, servers: usize) -> Local {
        let mut child = Command::new(SHOAL)
            .args(["local", "--etcd", "--etcd-port", "0", "--servers", &servers.to_string(), "--replicas", "1"])
            .args(["--memory", "64MiB", "--coordinator-port", "0", "--native-port", "0", "--resp-port", "0"])
            .args(["--memcached-port", "0", "--backup-port", "0", "--no-metrics", "--root"])
            .arg(root)
            .env_remove("SHOAL_PASSWORD")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let (stdout, collected) = (child.stdout.take().unwrap(), out.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut o = collected.lock().unwrap();
                o.push_str(&line);
                o.push('\n');
            }
        });
        let local = Local { child, out };
        let deadline = Instant::now() + Duration::from_secs(90);
        while !local.out.lock().unwrap().contains("Stop with Ctrl-C.") {
            assert!(Instant::now() < deadline, "shoal local did not start: {}", local.out.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
        local
    }

    /// The address of the coordinator the banner calls `role`.
    fn coordinator(&self, role: &str) -> SocketAddr {
        let out = self.out.lock().unwrap();
        let line = out.lines().find(|l| l.contains("coordinator:") && l.ends_with(&format!("({role})"))).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The etcd endpoint the banner names.
    fn etcd(&self) -> String {
        let out = self.out.lock().unwrap();
        let line = out.lines().find(|l| l.trim_start().starts_with("etcd:")).unwrap();
        line.split_whitespace().nth(1).unwrap().to_string()
    }

    /// The PID of the child process whose command line contains `needle`.
    fn child_pid(&self, needle: &str) -> u32 {
        let out = Command::new("pgrep").args(["-P", &self.child.id().to_string(), "-f", needle]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let pids: Vec<u32> = text.split_whitespace().map(|p| p.parse().unwrap()).collect();
        assert_eq!(pids.len(), 1, "processes matching {needle:?}: {text}");
        pids[0]
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        signal(self.child.id(), "-INT");
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Watches the state key in etcd from the current revision on and SIGKILLs
/// `pid` as soon as a saved state holds a recovery; sends that state's map.
fn kill_at_first_recovery(endpoint: String, key: &'static str, pid: u32) -> mpsc::Receiver<ClusterMap> {
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut client = etcd_client::Client::connect([endpoint], None).await.unwrap();
            let (_watcher, mut events) = client.watch(key, None::<WatchOptions>).await.unwrap();
            ready_tx.send(()).unwrap();
            while let Ok(Some(msg)) = events.message().await {
                for e in msg.events() {
                    let Some(kv) = e.kv().filter(|_| e.event_type() == EventType::Put) else { continue };
                    let (state, _) = ClusterState::decode(kv.value(), None).unwrap();
                    if !state.map().recoveries.is_empty() {
                        signal(pid, "-KILL");
                        let _ = tx.send(state.map().clone());
                        return;
                    }
                }
            }
        })
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).expect("the etcd watch started");
    rx
}

#[test]
fn a_standby_finishes_the_recovery_a_killed_leader_began_and_no_acknowledged_write_is_lost() {
    if skip("a_standby_finishes_the_recovery...") {
        return;
    }
    let root = Root::new("failover-recovery");
    let local = Local::start(&root.0, 4);
    let (leader, standby) = (local.coordinator("leader"), local.coordinator("standby"));
    let addrs = CoordinatorAddrs::new(vec![leader, standby]).unwrap();
    let secret = shoal_cluster::auth::ClusterSecret::load(&root.0.join("cluster-secret")).unwrap();
    let member = shoal_cluster::ControlAuth { secret: Some(secret), ..Default::default() };
    let table =
        runtime().block_on(ControlClient::new(addrs.clone()).with_auth(member).create_table("t", 0)).unwrap().id;

    let load = WriteLoad::start(addrs.clone(), table, 4, |t, n| Some(format!("k{t}-{}", n % 400).into_bytes()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.acks() < 2000 {
        assert!(Instant::now() < deadline, "only {} writes acknowledged", load.acks());
        std::thread::sleep(Duration::from_millis(20));
    }

    // The leader dies right after it saved the recovery of a master.
    let leader_pid = local.child_pid(&format!("coordinator --listen {leader}"));
    let saved = kill_at_first_recovery(local.etcd(), "/shoal/local/state", leader_pid);
    let map = map(&addrs).unwrap();
    let victim = map.tablets.iter().find(|t| t.table == table).unwrap().master;
    let dir = (0..4)
        .find(|i| {
            std::fs::read_to_string(root.0.join(format!("server-{i}/data/server-id")))
                .is_ok_and(|s| s.trim() == victim.0.to_string())
        })
        .unwrap();
    signal(local.child_pid(&format!("server-{dir}/data")), "-KILL");
    let killed_at = Instant::now();
    let planned = saved.recv_timeout(Duration::from_secs(30)).expect("a recovery was saved and the leader killed");
    assert_eq!(planned.recoveries.len(), 1);
    assert_eq!(planned.recoveries[0].dead, victim);

    // The standby takes over with the recovery still in progress, and
    // finishes it.
    let done = wait_for_map(&addrs, "the recovery to finish under the standby", 45, |m| {
        m.recoveries.is_empty() && m.server(victim).is_some_and(|s| s.state == ServerState::Down)
    });
    eprintln!("recovery finished {:?} after the master's kill", killed_at.elapsed());
    assert!(done.version > planned.version);
    let logs: String = ["coordinator", "coordinator-1"]
        .iter()
        .map(|d| std::fs::read_to_string(root.0.join(d).join("log")).unwrap())
        .collect();
    let resumed: Vec<&str> = logs.lines().filter(|l| l.contains("resumed cluster:")).collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(resumed[0].ends_with("1 recoveries in progress"), "the standby resumed mid-recovery: {}", resumed[0]);
    assert!(done.tablets.iter().filter(|t| t.table == table).all(|t| t.master != victim));

    // Writes go on, and every acknowledged one is there.
    let before = load.acks();
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.acks() < before + 500 {
        assert!(Instant::now() < deadline, "writes stopped after the fail-over at {}", load.acks());
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ledger, acks) = load.finish();
    assert!(acks > 2500, "{acks}");
    let mut c = shoal_client::blocking::Client::connect_cluster(addrs, Default::default()).unwrap();
    check_ledger(&mut c, table, &ledger);
}

/// A `shoal coordinator --etcd` process on `listen`, its log in `dir`.
fn coordinator(listen: SocketAddr, etcd: &str, dir: &Path) -> Child {
    std::fs::create_dir_all(dir).unwrap();
    Command::new(SHOAL)
        .args(["coordinator", "--listen", &listen.to_string(), "--etcd", etcd, "--etcd-prefix", "/test/two"])
        .args(["--insecure-no-secret", "--log-level", "info", "--data-dir"])
        .arg(dir.join("unused"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(dir))
        .spawn()
        .unwrap()
}

/// Which of `addrs` accept a TCP connection now.
fn listening(addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    addrs
        .iter()
        .copied()
        .filter(|a| std::net::TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok())
        .collect()
}

fn create_table(addrs: &CoordinatorAddrs, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = ControlClient::new(addrs.clone()).with_timeout(Duration::from_secs(2));
        match runtime().block_on(c.create_table(name, 1)) {
            Ok(_) => return,
            Err(e) => assert!(Instant::now() < deadline, "create {name}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_coordinators_started_at_once_never_both_act() {
    if skip("two_coordinators_started_at_once_never_both_act") {
        return;
    }
    let root = Root::new("failover-two");
    let etcd = LocalEtcd::start(&root.0.join("etcd"), &[(free_port(), free_port())]).unwrap();
    let endpoint = etcd.endpoints()[0].clone();
    let ports = [free_port(), free_port()];
    let at: Vec<SocketAddr> = ports.iter().map(|p| format!("127.0.0.1:{p}").parse().unwrap()).collect();
    let addrs = CoordinatorAddrs::new(at.clone()).unwrap();
    let mut procs: Vec<Child> = (0..2).map(|i| coordinator(at[i], &endpoint, &root.0.join(format!("c{i}")))).collect();
    wait_for_map(&addrs, "a leader", 30, |_| true);

    // Two servers to take tablets (enlisted by hand: nothing here needs
    // them to serve).
    for i in 0..2u16 {
        let a: SocketAddr = format!("127.0.0.1:{}", 9 + i).parse().unwrap();
        let enlist = shoal_cluster::ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a };
        runtime().block_on(ControlClient::new(addrs.clone()).call(&enlist)).unwrap();
    }

    // Exactly one listens, and always the same one.
    let first = listening(&at);
    assert_eq!(first.len(), 1, "{first:?}");
    for _ in 0..20 {
        assert_eq!(listening(&at), first);
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 0..5 {
        create_table(&addrs, &format!("before-{i}"));
    }
    let leader = at.iter().position(|a| *a == first[0]).unwrap();
    let killed = Instant::now();
    let _ = procs[leader].kill();
    let _ = procs[leader].wait();
    for i in 0..5 {
        create_table(&addrs, &format!("after-{i}"));
    }
    eprintln!("the standby answered 5 changes {:?} after the leader's kill", killed.elapsed());
    assert_eq!(listening(&at), vec![at[1 - leader]]);
    // The killed one comes back as a standby and stays one.
    procs[leader] = coordinator(at[leader], &endpoint, &root.0.join(format!("c{leader}-again")));
    std::thread::sleep(Duration::from_secs(3));
    create_table(&addrs, "last");
    assert_eq!(listening(&at), vec![at[1 - leader]]);
    assert_eq!(map(&addrs).unwrap().tables.len(), 11);

    // etcd's history under the prefix: leaderships never overlap, every
    // state write falls inside one, and each state builds on the last
    // (map versions grow, one table more per creation).
    let events = runtime().block_on(async {
        let mut client = etcd_client::Client::connect([endpoint.clone()], None).await.unwrap();
        let now = client.get("/test/two/", None).await.unwrap().header().unwrap().revision();
        let options = WatchOptions::new().with_prefix().with_start_revision(1);
        let (_watcher, mut stream) = client.watch("/test/two/", Some(options)).await.unwrap();
        let mut events = Vec::new();
        while let Some(msg) = stream.message().await.unwrap() {
            for e in msg.events() {
                let kv = e.kv().unwrap();
                events.push((
                    kv.mod_revision(),
                    e.event_type(),
                    kv.key_str().unwrap().to_string(),
                    kv.value().to_vec(),
                ));
            }
            if events.last().is_some_and(|e| e.0 >= now) {
                break;
            }
        }
        events
    });
    let mut holder: Option<String> = None;
    let mut leaders = Vec::new();
    let (mut version, mut tables, mut writes) = (0, 0, 0);
    for (revision, kind, key, value) in &events {
        match (key.as_str(), kind) {
            ("/test/two/leader", EventType::Put) => {
                let who = String::from_utf8_lossy(value).into_owned();
                assert!(holder.is_none(), "revision {revision}: {who} elected while {holder:?} leads");
                leaders.push(who.clone());
                holder = Some(who);
            }
            ("/test/two/leader", EventType::Delete) => holder = None,
            ("/test/two/state", EventType::Put) => {
                assert!(holder.is_some(), "revision {revision}: the state written with no leader");
                let (state, _) = ClusterState::decode(value, None).unwrap();
                let map = state.map();
                assert!(map.version > version, "revision {revision}: map version {} after {version}", map.version);
                assert!(map.tables.len() == tables || map.tables.len() == tables + 1, "revision {revision}");
                (version, tables) = (map.version, map.tables.len());
                writes += 1;
            }
            other => panic!("unexpected event {other:?} at revision {revision}"),
        }
    }
    assert_eq!(leaders, vec![at[leader].to_string(), at[1 - leader].to_string()]);
    assert_eq!(tables, 11);
    assert!(writes >= 12, "{writes} state writes");

    // A leader stopped with SIGTERM resigns: the standby leads at once,
    // not a lease TTL (2 s; 1.3 s at the least after a renewal) later.
    let stopped = Instant::now();
    signal(procs[1 - leader].id(), "-TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while listening(&at) != vec![at[leader]] {
        assert!(Instant::now() < deadline, "no takeover after SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = stopped.elapsed();
    eprintln!("the standby listened {took:?} after the leader's SIGTERM");
    assert!(took < Duration::from_secs(1), "{took:?}: the leader did not resign");
    assert!(procs[1 - leader].wait().unwrap().success(), "a clean stop");
    for mut p in procs {
        let _ = p.kill();
        let _ = p.wait();
    }
}

#[test]
fn an_etcd_outage_refuses_changes_then_the_leader_steps_down_and_a_coordinator_leads_again_when_etcd_is_back() {
    if skip("an_etcd_outage...") {
        return;
    }
    let root = Root::new("failover-etcd-outage");
    let mut etcd = LocalEtcd::start(&root.0.join("etcd"), &[(free_port(), free_port())]).unwrap();
    let endpoint = etcd.endpoints()[0].clone();
    let at: Vec<SocketAddr> = (0..2).map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap()).collect();
    let addrs = CoordinatorAddrs::new(at.clone()).unwrap();
    let mut procs: Vec<Child> = (0..2).map(|i| coordinator(at[i], &endpoint, &root.0.join(format!("c{i}")))).collect();
    wait_for_map(&addrs, "a leader", 30, |_| true);
    for i in 0..2u16 {
        let a: SocketAddr = format!("127.0.0.1:{}", 9 + i).parse().unwrap();
        let enlist = shoal_cluster::ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a };
        runtime().block_on(ControlClient::new(addrs.clone()).call(&enlist)).unwrap();
    }
    create_table(&addrs, "before");
    let version = map(&addrs).unwrap().version;

    // etcd goes away: a change is refused and changes nothing...
    etcd.kill(0);
    let lost = Instant::now();
    let mut c = ControlClient::new(addrs.clone()).with_timeout(Duration::from_secs(10));
    let refused = runtime().block_on(c.create_table("during", 1)).unwrap_err();
    assert!(
        matches!(&refused, shoal_cluster::ControlError::Refused { code: shoal_cluster::ControlErrorCode::Internal, message }
            if message.contains("cannot save")),
        "{refused}"
    );
    // ... and within the lease's TTL (2 s) and a renewal period the leader
    // stops serving: no coordinator listens while etcd is down.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening(&at).is_empty() {
        assert!(Instant::now() < deadline, "a coordinator still listens {:?} into the outage", lost.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("no coordinator listens {:?} into the etcd outage", lost.elapsed());
    std::thread::sleep(Duration::from_secs(2));
    assert!(listening(&at).is_empty());

    // etcd is back: a coordinator leads again, with the state as it was.
    etcd.restart(0).unwrap();
    let back = Instant::now();
    let m = wait_for_map(&addrs, "a leader after the outage", 30, |_| true);
    eprintln!("a coordinator leads {:?} after etcd restarted", back.elapsed());
    assert_eq!(m.version, version, "the refused change left no trace");
    assert_eq!(m.tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["before"]);
    create_table(&addrs, "after");
    assert_eq!(listening(&at).len(), 1);
    for p in &mut procs {
        assert!(matches!(p.try_wait(), Ok(None)), "a coordinator exited instead of standing by");
        let _ = p.kill();
        let _ = p.wait();
    }
}

#[test]
fn a_leader_whose_state_was_written_by_another_steps_down_and_a_coordinator_leads_again() {
    if skip("a_leader_whose_state_was_written_by_another...") {
        return;
    }
    let root = Root::new("failover-cas");
    let etcd = LocalEtcd::start(&root.0.join("etcd"), &[(free_port(), free_port())]).unwrap();
    let endpoint = etcd.endpoints()[0].clone();
    let at: Vec<SocketAddr> = (0..2).map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap()).collect();
    let addrs = CoordinatorAddrs::new(at.clone()).unwrap();
    let mut procs: Vec<Child> = (0..2).map(|i| coordinator(at[i], &endpoint, &root.0.join(format!("c{i}")))).collect();
    wait_for_map(&addrs, "a leader", 30, |_| true);
    let a: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let enlist = shoal_cluster::ControlRequest::Enlist { previous: None, native: a, resp: a, backup: a };
    runtime().block_on(ControlClient::new(addrs.clone()).call(&enlist)).unwrap();
    create_table(&addrs, "before");
    let leader = listening(&at);

    // Someone writes the state behind the leader's back (the same bytes,
    // at a new revision): its next save fails, and it steps down.
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect([endpoint.clone()], None).await.unwrap();
        let state = client.get("/test/two/state", None).await.unwrap().kvs()[0].value().to_vec();
        client.put("/test/two/state", state, None).await.unwrap();
    });
    let mut c = ControlClient::new(addrs.clone()).with_timeout(Duration::from_secs(5));
    let refused = runtime().block_on(c.create_table("refused", 1)).unwrap_err();
    assert!(refused.to_string().contains("changed under this coordinator"), "{refused}");
    let stepped_down = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(10);
    while listening(&at) == leader {
        assert!(Instant::now() < deadline, "the deposed leader still listens");
        std::thread::sleep(Duration::from_millis(10));
    }

    // It freed its key, so a coordinator (either) leads again at once, on
    // the state as etcd has it.
    create_table(&addrs, "after");
    let took = stepped_down.elapsed();
    eprintln!("a coordinator led again {took:?} after the failed save");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let names: Vec<String> = map(&addrs).unwrap().tables.into_iter().map(|t| t.name).collect();
    assert_eq!(names, vec!["before".to_string(), "after".to_string()]);
    for p in &mut procs {
        assert!(matches!(p.try_wait(), Ok(None)), "a coordinator exited instead of standing by");
        let _ = p.kill();
        let _ = p.wait();
    }
}

/// A drain (a rebalancing job) whose leader coordinator is SIGKILLed while
/// the job runs: the standby, elected, finds the saved job, plans it again
/// and finishes it under the same id; the `shoal drain` that was waiting
/// follows it to the end through the standby, the drained server masters
/// nothing, and every acknowledged write reads back (`docs/coordinator.md`,
/// "Rebalancing across a fail-over").
#[test]
fn a_standby_finishes_the_drain_a_killed_leader_was_running() {
    if skip("a_standby_finishes_the_drain...") {
        return;
    }
    let root = Root::new("failover-drain");
    let local = Local::start(&root.0, 3);
    let (leader, standby) = (local.coordinator("leader"), local.coordinator("standby"));
    let addrs = CoordinatorAddrs::new(vec![leader, standby]).unwrap();
    let secret = shoal_cluster::auth::ClusterSecret::load(&root.0.join("cluster-secret")).unwrap();
    let member = shoal_cluster::ControlAuth { secret: Some(secret), ..Default::default() };
    let table = runtime()
        .block_on(ControlClient::new(addrs.clone()).with_auth(member.clone()).create_table("t", 0))
        .unwrap()
        .id;
    let mut c = shoal_client::blocking::Client::connect_cluster(addrs.clone(), Default::default()).unwrap();
    let filler = "p".repeat(2000);
    for i in 0..6000 {
        c.write(table, format!("pre-{i}").as_bytes(), format!("{i}-{filler}").as_bytes()).unwrap();
    }
    let load = WriteLoad::start(addrs.clone(), table, 2, |t, n| Some(format!("k{t}-{}", n % 400).into_bytes()));
    let drained = map(&addrs).unwrap().tablets.iter().find(|t| t.table == table).unwrap().master;

    let mut cmd = Command::new(SHOAL);
    cmd.args(["drain", "--server", &drained.0.to_string(), "--wait", "120", "--json", "--coordinator"])
        .arg(addrs.to_string())
        .arg("--cluster-secret-file")
        .arg(root.0.join("cluster-secret"))
        .stdin(Stdio::null());
    let follower = std::thread::spawn(move || cmd.output().unwrap());
    let stats = |at: &CoordinatorAddrs| {
        let mut c = ControlClient::new(at.clone()).with_timeout(Duration::from_secs(2)).with_auth(member.clone());
        match runtime().block_on(c.call(&shoal_cluster::ControlRequest::Stats)) {
            Ok(shoal_cluster::ControlResponse::Stats { stats }) => Some(stats),
            _ => None,
        }
    };
    // Kill the leader while the job runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        if let Some(s) = stats(&CoordinatorAddrs::from(leader)) {
            if s["rebalance"]["state"] == "running" {
                break s["rebalance"]["id"].as_u64().unwrap();
            }
        }
        assert!(Instant::now() < deadline, "the drain never started");
        std::thread::sleep(Duration::from_millis(5));
    };
    signal(local.child_pid(&format!("coordinator --listen {leader}")), "-KILL");
    let killed = Instant::now();

    let out = follower.join().unwrap();
    assert!(out.status.success(), "shoal drain did not follow the job through the standby: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let done: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!((done["state"].as_str(), done["job"].as_u64()), (Some("done"), Some(job)), "{text}");
    let s = stats(&CoordinatorAddrs::from(standby)).expect("the standby leads");
    assert_eq!(s["rebalance"]["trigger"], "resume", "{s}");
    assert!(s["rebalance_job"].is_null(), "{s}");
    let m = map(&addrs).unwrap();
    assert_eq!(m.tablets_of(drained).count(), 0, "{m:?}");
    assert!(m.migrations.is_empty());
    eprintln!("leader killed mid-drain; the standby finished job {job} {:?} after the kill", killed.elapsed());

    let (ledger, acks) = load.finish();
    assert!(acks > 0);
    check_ledger(&mut c, table, &ledger);
    for i in (0..6000).step_by(7) {
        assert_eq!(c.read(table, format!("pre-{i}").as_bytes()).unwrap().0, format!("{i}-{filler}").into_bytes());
    }
}
