//! A cluster in the test process: a coordinator and `n` servers with
//! their Redis ports on free loopback ports.

use super::Client;
use shoal_coordinator::{Coordinator, CoordinatorConfig};
use shoal_server::{ByteSize, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A temporary directory removed at the end (kept if the test failed).
pub struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub struct Cluster {
    pub servers: Vec<Server>,
    /// What every client connection logs in with first.
    pub password: Option<String>,
    _coordinator: Coordinator,
    _runtime: tokio::runtime::Runtime,
    _root: Root,
}

impl Cluster {
    pub fn start(name: &str, n: usize) -> Cluster {
        Cluster::start_with(name, n, ServerConfig::default().idle_timeout_secs)
    }

    pub fn start_with(name: &str, n: usize, idle_timeout_secs: u64) -> Cluster {
        Cluster::start_configured(name, n, None, |c| c.idle_timeout_secs = idle_timeout_secs)
    }

    /// `n` servers of the default config changed by `tweak`; clients log in
    /// with `password`.
    pub fn start_configured(
        name: &str,
        n: usize,
        password: Option<&str>,
        tweak: impl Fn(&mut ServerConfig),
    ) -> Cluster {
        let root = std::env::temp_dir().join(format!("shoal-resp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let coordinator = runtime
            .block_on(Coordinator::start(CoordinatorConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                data_dir: root.join("coordinator"),
                metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
                ..CoordinatorConfig::default()
            }))
            .expect("coordinator starts");
        let servers = (0..n)
            .map(|i| {
                let mut config = ServerConfig {
                    coordinator: Some(coordinator.local_addr().into()),
                    data_dir: Some(root.join(format!("server{i}"))),
                    native_port: 0,
                    resp_port: 0,
                    memcached_port: 0,
                    backup_port: 0,
                    memory: ByteSize(64 << 20),
                    log_level: "warn".into(),
                    ..ServerConfig::default()
                };
                tweak(&mut config);
                Server::start(config).expect("server starts")
            })
            .collect();
        let c = Cluster {
            servers,
            password: password.map(String::from),
            _coordinator: coordinator,
            _runtime: runtime,
            _root: Root(root),
        };
        // Every server knows every other before a table is created, so that
        // the table gets one tablet per server.
        let deadline = Instant::now() + Duration::from_secs(10);
        for s in &c.servers {
            loop {
                let info = c.client_to(s.resp_addr()).call(&["INFO", "replication"]);
                if info.contains(&format!("cluster_servers_up:{n}\r\n")) {
                    break;
                }
                assert!(Instant::now() < deadline, "servers never all up: {info}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        c
    }

    /// The coordinator's HTTP listener (`/metrics`).
    pub fn coordinator_metrics(&self) -> SocketAddr {
        self._coordinator.http_addr().expect("the harness starts it with metrics")
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        self.servers[i].resp_addr()
    }

    /// A connection to `addr`, logged in if the cluster has a password.
    pub fn client_to(&self, addr: SocketAddr) -> Client {
        let mut c = Client::connect(addr);
        if let Some(p) = &self.password {
            assert_eq!(c.call(&["AUTH", p]), "+OK\r\n");
        }
        c
    }

    /// A connection to server `i` that sees only that server's keys.
    pub fn local(&self, i: usize) -> Client {
        let mut c = self.client_to(self.addr(i));
        assert_eq!(c.call(&["SHOAL.LOCAL"]), "+OK\r\n");
        c
    }
}
