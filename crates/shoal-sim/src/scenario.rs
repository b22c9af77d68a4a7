//! A scenario: everything a simulation run depends on, read from TOML.
//!
//! Every field has a default; the defaults are the bold values of
//! Katsarakis' Table 4.1 (40 servers of 32 cores, 40 Gbit/s NICs, ~35 GB/s
//! of memory bandwidth, 250 M keys under Zipf 0.99, a cache of 0.1% of the
//! keys, 5% writes), with service times for the primitive actions taken
//! from the RDMA key-value store literature (HERD, FaSST, RackOut). A TOML
//! file names only what it changes, section by section, e.g.
//!
//! ```toml
//! [system]
//! substrate = "crew"
//! caching = false
//! [workload]
//! write_ratio = 0.01
//! ```

use serde::{Deserialize, Serialize};

/// The system under test: which substrate, with or without symmetric
/// caching, and which coherence protocol and consistency the caches use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Substrate {
    /// Exclusive reads and writes: each key belongs to one core of its home
    /// server (FaSST/HERD), and clients send it straight to that core.
    Erew,
    /// Concurrent reads, exclusive writes (RackOut): a client sends a read
    /// to any server of the key's group, which serves it on any core,
    /// reading a remote home's memory with one-sided RDMA reads; writes go
    /// to the home server (any core).
    Crew,
}

/// How writes to cached (hot) keys are serialised (Katsarakis Table 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// The write goes to the key's home, which performs it and all the
    /// broadcast actions (1 extra hop; broadcast cost on the home).
    PrimaryBroadcast,
    /// The receiving server asks the home for a timestamp (2 extra hops),
    /// then does the broadcast actions itself.
    PrimaryTimestamp,
    /// Every peer serialises with (version, node id) timestamps: no extra
    /// hop, broadcast cost spread over the group.
    AllPeers,
}

/// Consistency of the cached copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Consistency {
    /// Eventual: perform locally, reply, broadcast the update.
    Ec,
    /// Strong (linearisable): invalidate every peer and collect the acks,
    /// then perform, broadcast the update and reply; reads of an invalid
    /// copy wait for its update.
    Sc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// A name for reports and plots.
    pub name: String,
    pub seed: u64,
    pub infrastructure: Infrastructure,
    pub system: System,
    pub workload: Workload,
    pub costs: Costs,
    pub run: Run,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Infrastructure {
    pub servers: u32,
    pub cores_per_server: u32,
    /// Per server and per direction.
    pub nic_gbit_s: f64,
    /// Effective memory bandwidth per server.
    pub memory_gbyte_s: f64,
    /// One-way wire and switch latency of one network hop.
    pub network_latency_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct System {
    pub substrate: Substrate,
    /// Symmetric caching on or off.
    pub caching: bool,
    pub protocol: Protocol,
    pub consistency: Consistency,
    /// Servers per symmetric-caching group (and per RackOut group for the
    /// CREW baseline); 0 means one group of all servers. Must divide
    /// `servers`.
    pub group_size: u32,
    /// Keys in each server's cache: the hottest ones (an ideal popularity
    /// cache, as in the seed).
    pub cache_keys: u64,
    /// Clients know the hot set (a per-group filter, Katsarakis Sec. 3.4's
    /// "optimal" variant and Shoal's design): cold keys go straight to
    /// their home (its owning core under EREW), only hot keys are spread.
    /// Off (the seed's evaluated, transparent variant): every request goes
    /// to a random member, which forwards misses.
    pub hot_filter: bool,
    /// Backups every write is copied to before it is acknowledged (Shoal's
    /// R): the server that applies it sends the object to the next
    /// `replicas` servers and waits for their acknowledgements. 0 (the
    /// seed's model, and the default): writes are not replicated.
    pub replicas: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    pub keys: u64,
    pub zipf_exponent: f64,
    /// Fraction of requests that are writes, 0..=1.
    pub write_ratio: f64,
    pub key_bytes: u32,
    pub value_bytes: u32,
}

/// Service times and sizes of the primitive actions. Core costs are in
/// microseconds of one core; byte counts become NIC and memory service
/// times through the bandwidths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Costs {
    /// Receive a request, look the key up, perform it, post the reply
    /// (two-sided RPC, no synchronisation): the EREW per-request cost.
    pub request_us: f64,
    /// Extra core time of concurrency control (seqlock/optimistic reads,
    /// locks on writes) on every CREW access and every cache access.
    pub sync_us: f64,
    /// Post one extra message (forward, broadcast, ack).
    pub send_us: f64,
    /// Receive and apply one protocol message (invalidation, ack, update,
    /// timestamp request, forwarded reply).
    pub receive_us: f64,
    /// Issue one one-sided RDMA read and handle its completion.
    pub one_sided_us: f64,
    /// Header bytes of every message on the wire (transport, RPC).
    pub header_bytes: u32,
    /// Bytes a CREW one-sided read fetches from the home: RackOut/FaRM
    /// read a whole bucket or neighbourhood to find a key in one round
    /// trip.
    pub one_sided_fetch_bytes: u32,
    /// Protocol metadata per coherence message (timestamp, state).
    pub coherence_meta_bytes: u32,
    /// Memory bytes moved per object access (index and object lines).
    pub memory_bytes_per_access: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Run {
    /// Requests kept outstanding by the clients per server (closed loop).
    /// 0 = automatic: 64 for a baseline, whose bottleneck (one core, one
    /// NIC) saturates with few; 1024 with symmetric caching, whose
    /// bottleneck is every NIC at once and whose SC reads park on invalid
    /// copies. More than needed only lengthens the warm-up: requests pile
    /// up at a baseline's hot core and its queue takes one queueing delay
    /// (outstanding x service time) to reach its steady state.
    pub outstanding_per_server: u32,
    /// Requests per warm-up window: warm-up goes on, window after window,
    /// until two consecutive windows' throughputs agree within 1%.
    pub warmup_requests: u64,
    /// Requests measured.
    pub requests: u64,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "default".into(),
            seed: 1,
            infrastructure: Infrastructure::default(),
            system: System::default(),
            workload: Workload::default(),
            costs: Costs::default(),
            run: Run::default(),
        }
    }
}

impl Default for Infrastructure {
    fn default() -> Self {
        Infrastructure {
            servers: 40,
            cores_per_server: 32,
            nic_gbit_s: 40.0,
            memory_gbyte_s: 35.0,
            network_latency_us: 0.5,
        }
    }
}

impl Default for System {
    fn default() -> Self {
        System {
            substrate: Substrate::Erew,
            caching: true,
            protocol: Protocol::AllPeers,
            consistency: Consistency::Ec,
            group_size: 0,
            cache_keys: 250_000,
            hot_filter: false,
            replicas: 0,
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        Workload { keys: 250_000_000, zipf_exponent: 0.99, write_ratio: 0.05, key_bytes: 8, value_bytes: 40 }
    }
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            request_us: 0.2,
            sync_us: 0.05,
            send_us: 0.02,
            receive_us: 0.08,
            one_sided_us: 0.08,
            header_bytes: 32,
            one_sided_fetch_bytes: 384,
            coherence_meta_bytes: 8,
            memory_bytes_per_access: 128,
        }
    }
}

impl Default for Run {
    fn default() -> Self {
        Run { outstanding_per_server: 0, warmup_requests: 200_000, requests: 2_000_000 }
    }
}

impl Scenario {
    /// Reads a scenario from TOML text; missing fields keep their defaults.
    pub fn from_toml(text: &str) -> Result<Scenario, String> {
        let s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario as TOML (every field, defaults included).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a scenario always serialises")
    }

    /// Servers per group after resolving 0 to all servers.
    pub fn group_size(&self) -> u32 {
        match self.system.group_size {
            0 => self.infrastructure.servers,
            g => g,
        }
    }

    /// Requests in flight per server, `run.outstanding_per_server` with 0
    /// resolved.
    pub fn outstanding_per_server(&self) -> u32 {
        match (self.run.outstanding_per_server, self.system.caching) {
            (0, false) => 64,
            (0, true) => 1024,
            (n, _) => n,
        }
    }

    /// Checks the ranges the model relies on.
    pub fn validate(&self) -> Result<(), String> {
        let i = &self.infrastructure;
        let w = &self.workload;
        let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
        check(i.servers >= 1, "infrastructure.servers must be >= 1")?;
        check(i.cores_per_server >= 1, "infrastructure.cores_per_server must be >= 1")?;
        check(i.nic_gbit_s > 0.0 && i.memory_gbyte_s > 0.0, "bandwidths must be > 0")?;
        check(i.network_latency_us >= 0.0, "network_latency_us must be >= 0")?;
        check(i.servers.is_multiple_of(self.group_size()), "system.group_size must divide servers")?;
        check(self.system.replicas < i.servers, "system.replicas must be below servers")?;
        check(w.keys >= 1, "workload.keys must be >= 1")?;
        check(w.zipf_exponent >= 0.0, "workload.zipf_exponent must be >= 0 (0: uniform)")?;
        check((0.0..=1.0).contains(&w.write_ratio), "workload.write_ratio must be in 0..=1")?;
        check(self.system.cache_keys <= w.keys, "system.cache_keys must be <= workload.keys")?;
        check(self.run.requests >= 2, "run.requests must be >= 2")?;
        let c = &self.costs;
        check(
            [c.request_us, c.sync_us, c.send_us, c.receive_us, c.one_sided_us].iter().all(|x| *x >= 0.0),
            "costs must be >= 0",
        )
    }
}
