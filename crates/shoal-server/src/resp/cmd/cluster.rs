//! Redis Cluster's view of Shoal (`docs/redis-cluster.md`), for the
//! cluster-aware clients: CLUSTER SLOTS | SHARDS | NODES | INFO | KEYSLOT |
//! MYID | HELP, and READONLY, READWRITE and ASKING.
//!
//! The slot map is read from the cluster map: database 0's table is
//! slot-hashed, so each of its tablets is a range of slots and its master
//! is the node serving them (adjacent ranges of one master are merged). A
//! node is a Shoal server, named by a 40-hex-digit id made from its server
//! id, at its Redis address; every node is a master (Shoal's replicas are
//! backups that serve no reads). The cluster bus port shown is the
//! server's native port. A standalone server in cluster mode is a
//! one-node cluster holding every slot. Without `--cluster-mode` these
//! commands answer Redis's "cluster support disabled" error.

use super::{lookup_sub, unknown_subcommand, wrong_arity, CommandSpec};
use crate::resp::db::Db;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_cluster::{ServerId, ServerState};
use shoal_common::slots::{hashes_slot_range, key_slot, SLOTS};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const DISABLED: ErrorReply = ErrorReply::new("ERR This instance has cluster support disabled");

/// How long CLUSTER waits for database 0's table, created by its first
/// call, to reach this server's copy of the cluster map.
const TABLE_PATIENCE: Duration = Duration::from_secs(2);

const SUB: CommandSpec = CommandSpec {
    name: "cluster|info",
    arity: 2,
    flags: &["loading", "stale"],
    acl: &["@slow"],
    group: "cluster",
    since: "3.0.0",
    summary: "Provides info about Redis Cluster node state",
    complexity: "O(1)",
    ..CommandSpec::BASE
};

pub static SPEC: CommandSpec = CommandSpec {
    name: "cluster",
    arity: -2,
    flags: &[],
    acl: &["@slow"],
    group: "cluster",
    since: "3.0.0",
    summary: "A container for cluster commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        SUB,
        CommandSpec {
            name: "cluster|keyslot",
            syntax: "key#string",
            arity: 3,
            flags: &["stale"],
            summary: "Returns the hash slot of the specified key",
            complexity: "O(N) where N is the number of bytes in the key",
            ..SUB
        },
        CommandSpec { name: "cluster|myid", summary: "Returns the node id", ..SUB },
        CommandSpec {
            name: "cluster|nodes",
            summary: "Get Cluster config for the node",
            complexity: "O(N) where N is the total number of Cluster nodes",
            ..SUB
        },
        CommandSpec {
            name: "cluster|slots",
            since: "3.0.0",
            summary: "Get array of Cluster slot to node mappings",
            complexity: "O(N) where N is the total number of Cluster nodes",
            ..SUB
        },
        CommandSpec {
            name: "cluster|shards",
            since: "7.0.0",
            summary: "Get array of cluster slots to node mappings",
            complexity: "O(N) where N is the total number of cluster nodes",
            ..SUB
        },
        CommandSpec { name: "cluster|help", summary: "Show helpful text about the different subcommands", ..SUB },
    ],
    ..CommandSpec::BASE
};

pub static READONLY: CommandSpec = CommandSpec {
    name: "readonly",
    arity: 1,
    flags: &["loading", "stale", "fast"],
    acl: &["@fast", "@connection"],
    group: "cluster",
    since: "3.0.0",
    summary: "Enables read queries for a connection to a cluster replica node",
    ..CommandSpec::BASE
};

pub static READWRITE: CommandSpec = CommandSpec {
    name: "readwrite",
    summary: "Disables read queries for a connection to a cluster replica node",
    ..READONLY
};

pub static ASKING: CommandSpec =
    CommandSpec { name: "asking", summary: "Sent by cluster clients after an -ASK redirect", ..READONLY };

/// READONLY, READWRITE, ASKING: "+OK" in cluster mode. Every node is a
/// master, so reads go to masters either way, and tablets do not move yet,
/// so no -ASK is ever sent.
pub fn run_ok(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    if !session.cluster_mode {
        return Err(DISABLED);
    }
    out.ok();
    Ok(())
}

/// One node: a Shoal server.
struct Node {
    id: ServerId,
    addr: SocketAddr,
    bus_port: u16,
    myself: bool,
    state: ServerState,
    /// Its slot ranges, ascending.
    ranges: Vec<(u16, u16)>,
}

impl Node {
    fn name(&self) -> String {
        format!("{:040x}", self.id.0)
    }

    fn slots(&self) -> usize {
        self.ranges.iter().map(|(a, b)| usize::from(b - a) + 1).sum()
    }
}

/// The cluster as Redis Cluster clients see it.
struct Topology {
    nodes: Vec<Node>,
    epoch: u64,
}

impl Topology {
    /// Every slot range with its node, ascending.
    fn ranges(&self) -> Vec<(u16, u16, &Node)> {
        let mut r: Vec<(u16, u16, &Node)> =
            self.nodes.iter().flat_map(|n| n.ranges.iter().map(move |&(a, b)| (a, b, n))).collect();
        r.sort_by_key(|x| x.0);
        r
    }

    fn slots(&self, up: bool) -> usize {
        self.nodes.iter().filter(|n| (n.state == ServerState::Up) == up).map(Node::slots).sum()
    }
}

/// A standalone server's address as clients reach it.
fn own_addr(s: &Session) -> SocketAddr {
    let c = &s.ctx.config;
    let ip = if c.listen.is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { c.listen };
    SocketAddr::new(ip, c.resp_port)
}

fn topology(s: &mut Session) -> Result<Topology, ErrorReply> {
    let Some(node) = s.ctx.cluster.clone() else {
        let c = &s.ctx.config;
        let me = Node {
            id: ServerId(0),
            addr: own_addr(s),
            bus_port: c.native_port,
            myself: true,
            state: ServerState::Up,
            ranges: vec![(0, SLOTS - 1)],
        };
        return Ok(Topology { nodes: vec![me], epoch: 0 });
    };
    // Database 0's table is made on first use, as by a first write.
    let table = Db::new(&s.ctx, 0, s.table_cache(), &s.txn).table_for_write()?;
    if !table.is_slot_hashed() {
        return Err(ErrorReply::new(
            "ERR database 0's table predates slot hashing: its keys have no Redis Cluster slots \
             (docs/redis-cluster.md)",
        ));
    }
    let since = Instant::now();
    let map = loop {
        let map = node.map();
        if map.tablets.iter().any(|t| t.table == table) || since.elapsed() >= TABLE_PATIENCE {
            break map;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut nodes: Vec<Node> = Vec::new();
    for t in map.tablets.iter().filter(|t| t.table == table) {
        let Some((first, last)) = hashes_slot_range(t.start_hash, t.end_hash) else { continue };
        match nodes.iter_mut().find(|n| n.id == t.master) {
            Some(n) => n.ranges.push((first, last)),
            None => {
                let Some(info) = map.server(t.master) else { continue };
                nodes.push(Node {
                    id: info.id,
                    addr: info.resp,
                    bus_port: info.native.port(),
                    myself: info.id == node.id,
                    state: info.state,
                    ranges: vec![(first, last)],
                });
            }
        }
    }
    // Live servers that hold no slots are nodes too.
    for info in map.servers.iter().filter(|x| x.state != ServerState::Down) {
        if !nodes.iter().any(|n| n.id == info.id) {
            nodes.push(Node {
                id: info.id,
                addr: info.resp,
                bus_port: info.native.port(),
                myself: info.id == node.id,
                state: info.state,
                ranges: Vec::new(),
            });
        }
    }
    for n in &mut nodes {
        n.ranges.sort_unstable();
        n.ranges.dedup_by(|b, a| {
            let adjacent = u32::from(a.1) + 1 == u32::from(b.0);
            if adjacent {
                a.1 = b.1;
            }
            adjacent
        });
    }
    nodes.sort_by_key(|n| n.id);
    Ok(Topology { nodes, epoch: map.version })
}

fn info(t: &Topology) -> String {
    let ok = t.slots(true);
    let state = if ok == usize::from(SLOTS) { "ok" } else { "fail" };
    let lines = [
        format!("cluster_state:{state}"),
        format!("cluster_slots_assigned:{}", ok + t.slots(false)),
        format!("cluster_slots_ok:{ok}"),
        "cluster_slots_pfail:0".to_string(),
        format!("cluster_slots_fail:{}", t.slots(false)),
        format!("cluster_known_nodes:{}", t.nodes.len()),
        format!("cluster_size:{}", t.nodes.iter().filter(|n| !n.ranges.is_empty()).count()),
        format!("cluster_current_epoch:{}", t.epoch),
        format!("cluster_my_epoch:{}", t.epoch),
        "cluster_stats_messages_sent:0".to_string(),
        "cluster_stats_messages_received:0".to_string(),
        "total_cluster_links_buffer_limit_exceeded:0".to_string(),
    ];
    let mut text = lines.join("\r\n");
    text.push_str("\r\n");
    text
}

fn nodes(t: &Topology) -> String {
    let mut text = String::new();
    for n in &t.nodes {
        let flags = match (n.myself, n.state) {
            (true, _) => "myself,master",
            (false, ServerState::Down) => "master,fail",
            (false, _) => "master",
        };
        let link = if n.state == ServerState::Down { "disconnected" } else { "connected" };
        text.push_str(&format!(
            "{} {}:{}@{} {flags} - 0 0 {} {link}",
            n.name(),
            n.addr.ip(),
            n.addr.port(),
            n.bus_port,
            t.epoch
        ));
        for &(a, b) in &n.ranges {
            if a == b {
                text.push_str(&format!(" {a}"));
            } else {
                text.push_str(&format!(" {a}-{b}"));
            }
        }
        text.push('\n');
    }
    text
}

fn slots(t: &Topology, out: &mut Reply<'_>) {
    let ranges = t.ranges();
    out.array(ranges.len());
    for (a, b, n) in ranges {
        out.array(3);
        out.int(i64::from(a));
        out.int(i64::from(b));
        out.array(4);
        out.bulk(n.addr.ip().to_string().as_bytes());
        out.int(i64::from(n.addr.port()));
        out.bulk(n.name().as_bytes());
        out.map(0);
    }
}

fn shards(t: &Topology, out: &mut Reply<'_>) {
    out.array(t.nodes.len());
    for n in &t.nodes {
        out.map(2);
        out.bulk(b"slots");
        out.array(2 * n.ranges.len());
        for &(a, b) in &n.ranges {
            out.int(i64::from(a));
            out.int(i64::from(b));
        }
        out.bulk(b"nodes");
        out.array(1);
        out.map(7);
        out.bulk(b"id");
        out.bulk(n.name().as_bytes());
        out.bulk(b"port");
        out.int(i64::from(n.addr.port()));
        out.bulk(b"ip");
        out.bulk(n.addr.ip().to_string().as_bytes());
        out.bulk(b"endpoint");
        out.bulk(n.addr.ip().to_string().as_bytes());
        out.bulk(b"role");
        out.bulk(b"master");
        out.bulk(b"replication-offset");
        out.int(0);
        out.bulk(b"health");
        out.bulk(match n.state {
            ServerState::Up => b"online".as_slice(),
            ServerState::Recovering => b"loading",
            ServerState::Down => b"failed",
        });
    }
}

const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "HELP",
    "    Print this help.",
];

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let sub = lookup_sub(&SPEC, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
    if !sub.arity_ok(args.len()) {
        return Err(wrong_arity(sub.name));
    }
    if !session.cluster_mode {
        return Err(DISABLED);
    }
    match sub.name {
        "cluster|help" => {
            out.array(HELP.len());
            for line in HELP {
                out.simple(line);
            }
        }
        "cluster|keyslot" => out.int(i64::from(key_slot(args.get(2)))),
        "cluster|myid" => {
            let id = session.ctx.cluster.as_ref().map_or(ServerId(0), |n| n.id);
            out.bulk(format!("{:040x}", id.0).as_bytes());
        }
        "cluster|info" => {
            let t = topology(session)?;
            out.verbatim(info(&t).as_bytes());
        }
        "cluster|nodes" => out.verbatim(nodes(&topology(session)?).as_bytes()),
        "cluster|slots" => slots(&topology(session)?, out),
        "cluster|shards" => shards(&topology(session)?, out),
        _ => return Err(unknown_subcommand(args)),
    }
    Ok(())
}
