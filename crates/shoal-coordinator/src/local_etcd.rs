//! A local etcd cluster of child processes, for `shoal local --etcd` and
//! the tests: one or more `etcd` members (Debian's `etcd-server`) on
//! 127.0.0.1, each with its data and its log under one directory.
//!
//! Stopped (SIGKILL, then reaped) when dropped; only the processes this
//! value started are ever signalled.

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The etcd executable, unless `SHOAL_ETCD` names another.
pub fn etcd_binary() -> PathBuf {
    std::env::var_os("SHOAL_ETCD").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("etcd"))
}

/// Whether [`etcd_binary`] can be run (`etcd --version` succeeds).
pub fn etcd_installed() -> bool {
    Command::new(etcd_binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One member: its process and its ports.
struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A running local etcd cluster.
pub struct LocalEtcd {
    dir: PathBuf,
    members: Vec<Member>,
}

impl LocalEtcd {
    /// Starts `nodes` members under `dir` (member `i` in `dir/etcd-<i>`),
    /// member `i` taking client port `ports[i].0` and peer port
    /// `ports[i].1`, and waits (up to 30 s) until every client port
    /// accepts connections. A directory that already holds a member's
    /// data resumes it (its ports must then be the same as before).
    /// Errors: `etcd` cannot be started, or exits, or does not listen in
    /// time.
    pub fn start(dir: &Path, ports: &[(u16, u16)]) -> io::Result<LocalEtcd> {
        let mut etcd = LocalEtcd { dir: dir.to_path_buf(), members: Vec::new() };
        for (i, &(client, peer)) in ports.iter().enumerate() {
            etcd.members.push(Member { name: format!("etcd-{i}"), client, peer, child: None });
        }
        for i in 0..etcd.members.len() {
            etcd.spawn(i)?;
        }
        etcd.wait_listening(Instant::now() + Duration::from_secs(30))?;
        Ok(etcd)
    }

    fn spawn(&mut self, i: usize) -> io::Result<()> {
        let cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let m = &self.members[i];
        let dir = self.dir.join(&m.name);
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("log"))?;
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let child = Command::new(etcd_binary())
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &cluster, "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "shoal-local"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start {}: {e}", etcd_binary().display())))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    fn wait_listening(&mut self, deadline: Instant) -> io::Result<()> {
        for m in &mut self.members {
            loop {
                if let Some(child) = m.child.as_mut() {
                    if let Some(status) = child.try_wait()? {
                        return Err(io::Error::other(format!(
                            "{} exited ({status}); see {}",
                            m.name,
                            self.dir.join(&m.name).join("log").display()
                        )));
                    }
                }
                if TcpStream::connect(("127.0.0.1", m.client)).is_ok() {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, format!("{} did not listen in time", m.name)));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// The client URLs, one per member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| format!("http://127.0.0.1:{}", m.client)).collect()
    }

    /// The PID of member `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members.get(i)?.child.as_ref().map(Child::id)
    }

    /// Whether every member is still running.
    pub fn running(&mut self) -> bool {
        self.members.iter_mut().all(|m| m.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))))
    }

    /// Kills member `i` (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members.get_mut(i).and_then(|m| m.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data and ports (after [`kill`](Self::kill)).
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_listening(Instant::now() + Duration::from_secs(30))
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
