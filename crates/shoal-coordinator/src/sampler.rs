//! The dashboard's view of each server: once a second, the coordinator
//! asks every live server for its native STATS (after a PING, whose round
//! trip it times) and keeps the last [`HISTORY`] samples per server.
//!
//! Only the dashboard reads what this keeps; nothing here reaches the
//! coordinator's decisions (`state.rs`) or failure detection (a server
//! that does not answer here is only shown so). One task polls, holding
//! one native connection per server, opened again after any error. Every
//! answer is read with a bound on its size and time ([`MAX_STATS_BODY`],
//! [`POLL_TIMEOUT`]).
//!
//! A server that requires clients to log in (`--password`) answers STATS
//! only after AUTH, and a server whose client ports speak TLS answers only
//! PING in clear text: the coordinator has neither, so such a server shows
//! its PING round trip and why its statistics are missing.

use shoal_cluster::map::{ClusterMap, ServerId, ServerState};
use shoal_cluster::rebalance::ServerUsage;
use shoal_proto::{check_frame, decode_response, ErrorStatus, Header, Request, Response, StatValue};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Time between two polls of every server.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Samples kept per server: five minutes at one a second.
pub const HISTORY: usize = 300;
/// Time one server has to answer its PING and STATS.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(900);
/// Largest STATS answer read (a server's STATS is a few KiB; each crash
/// recovery partition it replayed adds nine stats).
pub const MAX_STATS_BODY: u32 = 1 << 20;

/// One poll of one server. `stats` is `None` when the server answered the
/// PING but not STATS (see the module comment), or answered nothing.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Sample {
    /// When the poll began (ms since the Unix epoch).
    pub unix_ms: u64,
    /// PING round trip from the coordinator, in microseconds.
    pub ping_us: Option<u64>,
    pub stats: Option<ServerStats>,
}

/// The STATS figures the dashboard shows (names as in the native STATS).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ServerStats {
    pub uptime_secs: u64,
    pub reads: u64,
    pub writes: u64,
    pub removes: u64,
    pub commands: u64,
    pub objects: u64,
    pub live_bytes: u64,
    pub memory_bytes: u64,
    pub seglet_bytes: u64,
    pub seglets_total: u64,
    pub seglets_in_use: u64,
    pub log_utilisation: f64,
    pub memory_utilisation: f64,
    pub connections_current: u64,
    pub closed_segments_below_r: u64,
    pub open_replicas: u64,
    pub durable_lag: u64,
    pub bytes_replicated: u64,
    /// Crash-recovery partitions this server replayed or is replaying.
    pub partitions: Vec<PartitionStats>,
}

/// `recovery_<id>_partition_<i>_*` of a recovery master's STATS.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PartitionStats {
    pub recovery: u64,
    pub partition: u32,
    pub done: bool,
    pub segments: u64,
    pub bytes: u64,
    pub objects: u64,
    pub total_ms: u64,
}

/// What the poller knows of one server.
#[derive(Clone, Debug, Default)]
pub struct ServerHistory {
    pub native: Option<SocketAddr>,
    /// Oldest first, at most [`HISTORY`].
    pub samples: VecDeque<Sample>,
    /// Why the last poll got no statistics, if it got none.
    pub error: Option<String>,
}

/// The samples of every server, shared by the poller and the dashboard.
#[derive(Default)]
pub struct Sampler {
    servers: parking_lot::Mutex<BTreeMap<ServerId, ServerHistory>>,
}

impl Sampler {
    /// A copy of what is known of every server polled so far.
    pub fn snapshot(&self) -> BTreeMap<ServerId, ServerHistory> {
        self.servers.lock().clone()
    }

    fn record(&self, id: ServerId, native: SocketAddr, sample: Sample, error: Option<String>) {
        let mut servers = self.servers.lock();
        let h = servers.entry(id).or_default();
        h.native = Some(native);
        if h.samples.len() == HISTORY {
            h.samples.pop_front();
        }
        h.samples.push_back(sample);
        h.error = error;
    }

    /// Forgets servers gone from the map, and down servers whose last
    /// sample left the history window.
    fn prune(&self, map: &ClusterMap, now_ms: u64) {
        let window = POLL_INTERVAL.as_millis() as u64 * HISTORY as u64;
        self.servers.lock().retain(|id, h| match map.server(*id) {
            None => false,
            Some(s) if s.state == ServerState::Down => {
                h.samples.back().is_some_and(|x| now_ms.saturating_sub(x.unix_ms) < window)
            }
            Some(_) => true,
        });
    }

    /// Polls every server of the map that is not down, every
    /// [`POLL_INTERVAL`], until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, map: watch::Receiver<Arc<ClusterMap>>, mut shutdown: watch::Receiver<bool>) {
        let mut conns: HashMap<ServerId, (SocketAddr, TcpStream)> = HashMap::new();
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut request_id = 0u64;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped(&mut shutdown) => return,
            }
            let current = map.borrow().clone();
            let live: Vec<(ServerId, SocketAddr)> =
                current.servers.iter().filter(|s| s.state != ServerState::Down).map(|s| (s.id, s.native)).collect();
            conns.retain(|id, (addr, _)| live.iter().any(|(l, a)| l == id && a == addr));
            let mut polls = JoinSet::new();
            for (id, native) in live {
                let conn = conns.remove(&id).map(|(_, c)| c);
                request_id = request_id.wrapping_add(2);
                polls.spawn(async move {
                    let unix_ms = unix_ms();
                    let mut poll = Poll { native, conn, sample: Sample { unix_ms, ..Sample::default() } };
                    let error = match tokio::time::timeout(POLL_TIMEOUT, poll.run(request_id)).await {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e),
                        Err(_) => {
                            poll.conn = None;
                            Some(format!("no answer within {} ms", POLL_TIMEOUT.as_millis()))
                        }
                    };
                    (id, poll, error)
                });
            }
            while let Some(done) = polls.join_next().await {
                let Ok((id, poll, error)) = done else { continue };
                if let Some(c) = poll.conn {
                    conns.insert(id, (poll.native, c));
                }
                self.record(id, poll.native, poll.sample, error);
            }
            self.prune(&current, unix_ms());
        }
    }
}

/// One server's poll: its connection (if one is open) and what it got.
struct Poll {
    native: SocketAddr,
    conn: Option<TcpStream>,
    sample: Sample,
}

impl Poll {
    /// PING (timed), then STATS. The connection is kept only if both
    /// exchanges completed.
    async fn run(&mut self, id: u64) -> Result<(), String> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => {
                let c = TcpStream::connect(self.native).await.map_err(|e| format!("cannot connect: {e}"))?;
                let _ = c.set_nodelay(true);
                c
            }
        };
        let ping_started = Instant::now();
        exchange(&mut conn, Request::Ping, id).await?;
        self.sample.ping_us = Some(ping_started.elapsed().as_micros().min(u64::MAX as u128) as u64);
        let (header, body) = exchange(&mut conn, Request::Stats, id + 1).await?;
        let stats = match decode_response(header.opcode, &body) {
            Ok(Ok(Response::Stats(stats))) => stats,
            Ok(Ok(other)) => return Err(format!("unexpected answer to STATS: {:?}", other.opcode())),
            Ok(Err(ErrorStatus::NotAuthenticated)) => {
                self.conn = Some(conn);
                return Err("no statistics: the server requires clients to log in (--password), and the \
                            coordinator has no password"
                    .into());
            }
            Ok(Err(ErrorStatus::MalformedRequest(m))) if m.contains("TLS") => {
                return Err("no statistics: the server's native port speaks TLS only".into())
            }
            Ok(Err(status)) => return Err(format!("STATS refused: {status}")),
            Err(e) => return Err(format!("malformed STATS answer: {e}")),
        };
        let mut s = ServerStats::default();
        let mut parts: BTreeMap<(u64, u32), PartitionStats> = BTreeMap::new();
        for stat in &stats {
            let v = match stat.value {
                StatValue::U64(v) => Value::U(v),
                StatValue::F64(v) => Value::F(v),
            };
            s.set(&stat.name, v, &mut parts);
        }
        s.partitions = parts.into_values().collect();
        self.sample.stats = Some(s);
        self.conn = Some(conn);
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Value {
    U(u64),
    F(f64),
}

impl Value {
    fn u(self) -> u64 {
        match self {
            Value::U(v) => v,
            Value::F(v) => v as u64,
        }
    }

    fn f(self) -> f64 {
        match self {
            Value::U(v) => v as f64,
            Value::F(v) => v,
        }
    }
}

impl ServerStats {
    /// Takes one stat by name; unknown names are ignored.
    fn set(&mut self, name: &str, v: Value, parts: &mut BTreeMap<(u64, u32), PartitionStats>) {
        match name {
            "uptime_secs" => self.uptime_secs = v.u(),
            "reads" => self.reads = v.u(),
            "writes" => self.writes = v.u(),
            "removes" => self.removes = v.u(),
            "commands" => self.commands = v.u(),
            "objects" => self.objects = v.u(),
            "live_bytes" => self.live_bytes = v.u(),
            "memory_bytes" => self.memory_bytes = v.u(),
            "seglet_bytes" => self.seglet_bytes = v.u(),
            "seglets_total" => self.seglets_total = v.u(),
            "seglets_in_use" => self.seglets_in_use = v.u(),
            "log_utilisation" => self.log_utilisation = v.f(),
            "memory_utilisation" => self.memory_utilisation = v.f(),
            "connections_current" => self.connections_current = v.u(),
            "closed_segments_below_r" => self.closed_segments_below_r = v.u(),
            "open_replicas" => self.open_replicas = v.u(),
            "durable_lag" => self.durable_lag = v.u(),
            "bytes_replicated" => self.bytes_replicated = v.u(),
            _ => {
                let Some((recovery, partition, what)) = partition_stat(name) else { return };
                if parts.len() >= MAX_PARTITIONS && !parts.contains_key(&(recovery, partition)) {
                    return;
                }
                let p = parts.entry((recovery, partition)).or_insert_with(|| PartitionStats {
                    recovery,
                    partition,
                    ..Default::default()
                });
                match what {
                    "done" => p.done = v.u() != 0,
                    "segments" => p.segments = v.u(),
                    "bytes" => p.bytes = v.u(),
                    "objects" => p.objects = v.u(),
                    "total_ms" => p.total_ms = v.u(),
                    _ => {}
                }
            }
        }
    }
}

/// Partitions kept per sample (a server lists every partition it ever
/// replayed; the dashboard needs the recent ones).
const MAX_PARTITIONS: usize = 64;

/// "recovery_3_partition_1_bytes" -> (3, 1, "bytes").
fn partition_stat(name: &str) -> Option<(u64, u32, &str)> {
    let rest = name.strip_prefix("recovery_")?;
    let (recovery, rest) = rest.split_once("_partition_")?;
    let (partition, what) = rest.split_once('_')?;
    Some((recovery.parse().ok()?, partition.parse().ok()?, what))
}

/// What rebalancing weighs (`shoal_cluster::rebalance`): the server at
/// `native`'s `live_bytes` + `stream_bytes`, `ops_per_sec`, and its
/// `table_<id>_objects`, `table_<id>_bytes` and `table_<id>_ops_per_sec`,
/// read with one STATS on a connection of its own
/// within `timeout`. Errors say why (as for the dashboard: a server that
/// needs a password or speaks TLS on its native port answers no STATS).
pub(crate) async fn usage(native: SocketAddr, timeout: Duration) -> Result<ServerUsage, String> {
    let ask = async {
        let mut conn = TcpStream::connect(native).await.map_err(|e| format!("cannot connect: {e}"))?;
        let _ = conn.set_nodelay(true);
        let (header, body) = exchange(&mut conn, Request::Stats, 1).await?;
        match decode_response(header.opcode, &body) {
            Ok(Ok(Response::Stats(stats))) => Ok(stats
                .iter()
                .map(|s| {
                    let v = match s.value {
                        StatValue::U64(v) => v,
                        StatValue::F64(v) => v as u64,
                    };
                    (s.name.to_string(), v)
                })
                .collect::<Vec<_>>()),
            Ok(Ok(other)) => Err(format!("unexpected answer to STATS: {:?}", other.opcode())),
            Ok(Err(status)) => Err(format!("STATS refused: {status}")),
            Err(e) => Err(format!("malformed STATS answer: {e}")),
        }
    };
    let stats = tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))??;
    let mut u = ServerUsage::default();
    for (name, v) in stats {
        match name.as_str() {
            "live_bytes" | "stream_bytes" => u.bytes += v,
            "ops_per_sec" => u.ops = v,
            _ => {
                let Some((table, what)) = name.strip_prefix("table_").and_then(|r| r.split_once('_')) else {
                    continue;
                };
                let Ok(table) = table.parse() else { continue };
                let table = shoal_common::TableId(table);
                match what {
                    "objects" => u.tables.entry(table).or_default().0 = v,
                    "bytes" => u.tables.entry(table).or_default().1 = v,
                    "ops_per_sec" => {
                        u.table_ops.insert(table, v);
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(u)
}

/// Sends one request and reads its answer (header and body), which must be
/// a response to `id` of at most [`MAX_STATS_BODY`] bytes.
async fn exchange(conn: &mut TcpStream, req: Request<'_>, id: u64) -> Result<(Header, Vec<u8>), String> {
    let mut frame = Vec::new();
    req.encode(id, &mut frame);
    conn.write_all(&frame).await.map_err(|e| format!("cannot send: {e}"))?;
    // One request is outstanding at a time, so the answer is all there is
    // to read; check_frame refuses a body over the bound from the header.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header = loop {
        match check_frame(&buf, MAX_STATS_BODY) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => return Err(format!("not a Shoal answer: {e}")),
        }
        match conn.read(&mut chunk).await {
            Ok(0) => return Err("the server closed the connection".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("no answer: {e}")),
        }
    };
    if !header.is_response() || header.request_id != id || buf.len() != header.frame_len() {
        return Err(format!("unexpected frame (flags {:#x}, request id {})", header.flags, header.request_id));
    }
    buf.drain(..shoal_proto::HEADER_LEN);
    Ok((header, buf))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis().min(u64::MAX as u128) as u64)
}

/// Completes when shutdown is asked (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_cluster::map::ServerInfo;
    use shoal_common::LogId;
    use shoal_proto::{encode_error, Stat};
    use std::borrow::Cow;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::net::TcpListener;

    /// A native port that answers PING, and STATS with `stats` (or, if
    /// `auth`, NOT_AUTHENTICATED). Counts the connections it accepted.
    async fn fake_server(stats: Vec<(&'static str, StatValue)>, auth: bool) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::Relaxed);
                let stats = stats.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Ok(Some(h)) = check_frame(&buf, 1 << 20) {
                            let mut out = Vec::new();
                            match shoal_proto::Opcode::from_u8(h.opcode) {
                                Some(shoal_proto::Opcode::Ping) => {
                                    Response::Ping.encode(h.request_id, &mut out);
                                }
                                _ if auth => {
                                    encode_error(&mut out, h.request_id, h.opcode, &ErrorStatus::NotAuthenticated);
                                }
                                _ => {
                                    let list = stats.iter().map(|(n, v)| Stat { name: Cow::Borrowed(*n), value: *v });
                                    Response::Stats(list.collect()).encode(h.request_id, &mut out);
                                }
                            }
                            buf.drain(..h.frame_len());
                            if s.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    fn map_of(native: SocketAddr) -> Arc<ClusterMap> {
        let server =
            ServerInfo { id: ServerId(1), native, resp: native, backup: native, log: LogId(1), state: ServerState::Up };
        Arc::new(ClusterMap { version: 2, servers: vec![server], ..ClusterMap::default() })
    }

    /// Polls the server of `map` until it has `n` samples; its history.
    async fn poll(map: Arc<ClusterMap>, n: usize) -> ServerHistory {
        let sampler = Arc::new(Sampler::default());
        let (_map_tx, map_rx) = watch::channel(map);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(sampler.clone().run(map_rx, stop_rx));
        let deadline = Instant::now() + Duration::from_secs(10);
        let history = loop {
            if let Some(h) = sampler.snapshot().remove(&ServerId(1)).filter(|h| h.samples.len() >= n) {
                break h;
            }
            assert!(Instant::now() < deadline, "no {n} samples in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        stop.send_replace(true);
        task.await.unwrap();
        history
    }

    #[tokio::test]
    async fn polls_stats_and_times_the_ping_on_one_kept_connection() {
        let stats = vec![
            ("reads", StatValue::U64(7)),
            ("memory_bytes", StatValue::U64(64 << 20)),
            ("log_utilisation", StatValue::F64(0.5)),
            ("closed_segments_below_r", StatValue::U64(2)),
            ("recovery_4_partition_1_bytes", StatValue::U64(1000)),
            ("recovery_4_partition_1_done", StatValue::U64(1)),
            ("something_new", StatValue::U64(1)),
        ];
        let (addr, accepted) = fake_server(stats, false).await;
        let h = poll(map_of(addr), 2).await;
        assert_eq!(h.error, None);
        let last = h.samples.back().unwrap();
        assert!(last.ping_us.is_some());
        let s = last.stats.as_ref().unwrap();
        assert_eq!((s.reads, s.memory_bytes, s.log_utilisation, s.closed_segments_below_r), (7, 64 << 20, 0.5, 2));
        let p = PartitionStats { recovery: 4, partition: 1, done: true, bytes: 1000, ..Default::default() };
        assert_eq!(s.partitions, vec![p]);
        assert_eq!(accepted.load(Ordering::Relaxed), 1, "one connection for every poll");
    }

    #[tokio::test]
    async fn a_server_that_wants_a_password_shows_why_it_has_no_figures() {
        let (addr, _) = fake_server(Vec::new(), true).await;
        let h = poll(map_of(addr), 1).await;
        let last = h.samples.back().unwrap();
        assert!(last.ping_us.is_some() && last.stats.is_none());
        assert!(h.error.as_deref().unwrap().contains("log in"), "{:?}", h.error);
    }

    #[tokio::test]
    async fn a_server_that_is_gone_gets_empty_samples_and_a_reason() {
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let h = poll(map_of(gone), 1).await;
        assert!(h.samples.back().unwrap().ping_us.is_none());
        assert!(h.error.as_deref().unwrap().contains("cannot connect"), "{:?}", h.error);
    }

    #[test]
    fn partition_stat_names() {
        assert_eq!(partition_stat("recovery_3_partition_1_bytes"), Some((3, 1, "bytes")));
        assert_eq!(partition_stat("recovery_3_partition_12_total_ms"), Some((3, 12, "total_ms")));
        assert_eq!(partition_stat("recovery_partitions"), None);
        assert_eq!(partition_stat("recovery_x_partition_1_bytes"), None);
        assert_eq!(partition_stat("recovery_1_partition_"), None);
    }
}
