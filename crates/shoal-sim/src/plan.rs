//! What each system does for one request: the request's life as a list of
//! primitive actions (Katsarakis Fig. 4.2), each a use of one component
//! (a core, a NIC direction, memory) for a service time, a wire delay, a
//! change of a cached copy's state, or a fan-out of messages to peers.
//!
//! This module decides the routes and costs and holds no simulation state;
//! `sim` executes the steps. Message counts are tallied here, as plans are
//! made, into `Tally`.

use crate::scenario::{Consistency, Protocol, Scenario, Substrate};

/// Simulated time in picoseconds.
pub type Ps = u64;

/// A component a step occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Res {
    /// One given core of a server (EREW ownership).
    Core(u32, u32),
    /// Whichever core of the server frees up first (CREW, caches).
    AnyCore(u32),
    NicIn(u32),
    NicOut(u32),
    Mem(u32),
}

#[derive(Debug, Clone)]
pub enum Step {
    /// Occupy `res` for `ps` (FIFO); `coherence` marks protocol work.
    Use { res: Res, ps: Ps, coherence: bool },
    /// Pure latency, no component.
    Delay(Ps),
    /// Read the cached copy of `key` on `server`: under SC, waits while the
    /// copy is invalid; under EC, is counted stale if a newer version exists.
    CacheRead { key: u64, server: u32 },
    /// An invalidation arrives at (or is taken by the writer on) a copy.
    Invalidate { key: u64, server: u32 },
    /// Performs a write of a cached key on `server`: takes the next version.
    Write { key: u64, server: u32 },
    /// Applies the job's version to the copy on `server` (ends one
    /// invalidation under SC).
    Update { key: u64, server: u32 },
    /// Starts each child at once; with `join`, the job waits for all.
    Fork { children: Vec<Vec<Step>>, join: bool },
}

/// Messages planned, for the per-request counts in the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub messages: u64,
    pub coherence_messages: u64,
}

/// One client request, as the workload generator made it.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Popularity rank, 1 = hottest.
    pub key: u64,
    pub write: bool,
}

/// Service times converted to picoseconds, and the placement functions.
#[derive(Debug, Clone)]
pub struct Model {
    servers: u32,
    cores: u32,
    group: u32,
    latency: Ps,
    nic_ps_per_byte: f64,
    mem_ps_per_byte: f64,
    caching: bool,
    substrate: Substrate,
    protocol: Protocol,
    consistency: Consistency,
    cache_keys: u64,
    hot_filter: bool,
    replicas: u32,
    request: Ps,
    sync: Ps,
    send: Ps,
    receive: Ps,
    one_sided: Ps,
    header: u32,
    key_b: u32,
    value_b: u32,
    fetch_b: u32,
    meta_b: u32,
    mem_b: u32,
}

fn us(x: f64) -> Ps {
    (x * 1e6).round() as Ps
}

/// A 64-bit mix (splitmix64's finaliser): placement of keys on servers
/// and cores, independent of popularity.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Model {
    pub fn new(s: &Scenario) -> Model {
        let i = &s.infrastructure;
        let c = &s.costs;
        Model {
            servers: i.servers,
            cores: i.cores_per_server,
            group: s.group_size(),
            latency: us(i.network_latency_us),
            // Gbit/s -> ps per byte: 8 bits / (g * 1e9 bit/s) = 8000/g ps.
            nic_ps_per_byte: 8000.0 / i.nic_gbit_s,
            mem_ps_per_byte: 1000.0 / i.memory_gbyte_s,
            caching: s.system.caching,
            substrate: s.system.substrate,
            protocol: s.system.protocol,
            consistency: s.system.consistency,
            cache_keys: s.system.cache_keys,
            hot_filter: s.system.hot_filter,
            replicas: s.system.replicas,
            request: us(c.request_us),
            sync: us(c.sync_us),
            send: us(c.send_us),
            receive: us(c.receive_us),
            one_sided: us(c.one_sided_us),
            header: c.header_bytes,
            key_b: s.workload.key_bytes,
            value_b: s.workload.value_bytes,
            fetch_b: c.one_sided_fetch_bytes,
            meta_b: c.coherence_meta_bytes,
            mem_b: c.memory_bytes_per_access,
        }
    }

    pub fn servers(&self) -> u32 {
        self.servers
    }
    pub fn cores(&self) -> u32 {
        self.cores
    }
    pub fn group(&self) -> u32 {
        self.group
    }
    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// The key's home server.
    pub fn home(&self, key: u64) -> u32 {
        (mix(key) % self.servers as u64) as u32
    }

    /// The core of its home that owns the key under EREW.
    pub fn owner(&self, key: u64) -> u32 {
        (mix(key ^ 0x5bd1_e995) % self.cores as u64) as u32
    }

    /// Whether every member of the key's group caches it.
    pub fn cached(&self, key: u64) -> bool {
        self.caching && key <= self.cache_keys
    }

    /// Where a client sends the request: `pick` is a uniform draw in
    /// `0..group` for systems that spread requests over the home's group.
    pub fn entry(&self, req: Request, pick: u32) -> u32 {
        let home = self.home(req.key);
        let spread = if self.caching && self.hot_filter {
            self.cached(req.key) || (self.substrate == Substrate::Crew && !req.write)
        } else {
            self.caching || (self.substrate == Substrate::Crew && !req.write)
        };
        if spread {
            home - home % self.group + pick
        } else {
            home
        }
    }

    /// The request's actions, from the client's send to its reply's arrival.
    pub fn plan(&self, req: Request, entry: u32, tally: &mut Tally) -> Vec<Step> {
        let mut p = Planner { m: self, steps: Vec::with_capacity(16), tally };
        let home = self.home(req.key);
        let put = self.header + self.key_b + self.value_b;
        let get = self.header + self.key_b;
        p.client_in(entry, if req.write { put } else { get });
        if self.cached(req.key) {
            p.core(Res::AnyCore(entry), self.request + self.sync, false);
            if req.write {
                self.hot_write(&mut p, req.key, entry, home);
            } else {
                p.steps.push(Step::CacheRead { key: req.key, server: entry });
                p.mem(entry, false);
                p.client_out(entry, self.header + self.value_b);
            }
        } else if self.caching && !self.hot_filter {
            // Cold key sent to a random member: it parses the request and
            // misses in its cache, then the substrate serves the key.
            p.core(Res::AnyCore(entry), self.request + self.sync, false);
            self.cold(&mut p, req, entry, home, true);
        } else {
            self.cold(&mut p, req, entry, home, false);
        }
        p.steps
    }

    /// A request for an uncached key arriving at `entry`. `probed`: a cache
    /// probe already parsed the request on `entry` (so a forward costs only
    /// a send, and a local EREW hand-off only the owner's work).
    fn cold(&self, p: &mut Planner, req: Request, entry: u32, home: u32, probed: bool) {
        let reply = if req.write { self.header } else { self.header + self.value_b };
        let fwd = if req.write { self.header + self.key_b + self.value_b } else { self.header + self.key_b };
        match self.substrate {
            Substrate::Erew => {
                let owner = Res::Core(home, self.owner(req.key));
                if entry == home {
                    p.core(owner, self.request, false);
                    p.mem(home, false);
                    if req.write {
                        self.replicate(p, home);
                    }
                    p.client_out(home, reply);
                } else {
                    p.core(Res::AnyCore(entry), self.send, false);
                    p.msg(entry, home, fwd, false);
                    p.core(owner, self.request, false);
                    p.mem(home, false);
                    if req.write {
                        self.replicate(p, home);
                    }
                    p.msg(home, entry, reply, false);
                    p.core(Res::AnyCore(entry), self.receive, false);
                    p.client_out(entry, reply);
                }
            }
            Substrate::Crew => {
                let parse = if probed { 0 } else { self.request + self.sync };
                if entry == home {
                    p.core(Res::AnyCore(home), parse, false);
                    p.mem(home, false);
                    if req.write {
                        self.replicate(p, home);
                    }
                    p.client_out(home, reply);
                } else if req.write {
                    // Writes run on the home (exclusive writer), by RPC.
                    p.core(Res::AnyCore(entry), self.send, false);
                    p.msg(entry, home, fwd, false);
                    p.core(Res::AnyCore(home), self.request + self.sync, false);
                    p.mem(home, false);
                    self.replicate(p, home);
                    p.msg(home, entry, reply, false);
                    p.core(Res::AnyCore(entry), self.receive, false);
                    p.client_out(entry, reply);
                } else {
                    // One-sided read of the home's bucket: no home core.
                    p.core(Res::AnyCore(entry), parse + self.one_sided, false);
                    p.msg(entry, home, self.header, false);
                    p.mem_bytes(home, self.fetch_b, false);
                    p.msg(home, entry, self.header + self.fetch_b, false);
                    p.core(Res::AnyCore(entry), self.one_sided, false);
                    p.client_out(entry, reply);
                }
            }
        }
    }

    /// A write of a cached key that arrived at `entry` (already parsed).
    fn hot_write(&self, p: &mut Planner, key: u64, entry: u32, home: u32) {
        let ts_req = self.header + self.key_b;
        let ts_reply = self.header + self.meta_b;
        match self.protocol {
            Protocol::AllPeers => {
                self.coherent_write(p, key, entry);
                p.client_out(entry, self.header);
            }
            Protocol::PrimaryTimestamp => {
                if entry != home {
                    p.core(Res::AnyCore(entry), self.send, true);
                    p.msg(entry, home, ts_req, true);
                    p.core(Res::AnyCore(home), self.receive + self.send, true);
                    p.msg(home, entry, ts_reply, true);
                    p.core(Res::AnyCore(entry), self.receive, true);
                }
                self.coherent_write(p, key, entry);
                p.client_out(entry, self.header);
            }
            Protocol::PrimaryBroadcast => {
                if entry != home {
                    let put = self.header + self.key_b + self.value_b;
                    p.core(Res::AnyCore(entry), self.send, true);
                    p.msg(entry, home, put, true);
                    p.core(Res::AnyCore(home), self.receive, true);
                    self.coherent_write(p, key, home);
                    p.msg(home, entry, self.header, true);
                    p.core(Res::AnyCore(entry), self.receive, true);
                } else {
                    self.coherent_write(p, key, home);
                }
                p.client_out(entry, self.header);
            }
        }
    }

    /// The write just applied on `server` copied to its backups (the next
    /// [`Model::replicas`] servers): the object out of its NIC to each, an
    /// acknowledgement back, waited for before the write is acknowledged.
    fn replicate(&self, p: &mut Planner, server: u32) {
        if self.replicas == 0 {
            return;
        }
        let object = self.header + self.key_b + self.value_b + self.meta_b;
        p.core(Res::AnyCore(server), self.replicas as Ps * self.send, false);
        let children = (1..=self.replicas)
            .map(|i| {
                let backup = (server + i) % self.servers;
                let mut c = p.child();
                c.msg(server, backup, object, false);
                c.core(Res::AnyCore(backup), self.receive + self.send, false);
                c.msg(backup, server, self.header, false);
                c.core(Res::AnyCore(server), self.receive, false);
                c.steps
            })
            .collect();
        p.steps.push(Step::Fork { children, join: true });
    }

    /// Performs a write of cached `key` on `writer` with the consistency's
    /// broadcast actions to the other members of the group.
    fn coherent_write(&self, p: &mut Planner, key: u64, writer: u32) {
        let base = writer - writer % self.group;
        let peers: Vec<u32> = (base..base + self.group).filter(|&s| s != writer).collect();
        let fan = peers.len() as Ps;
        let update = self.header + self.key_b + self.value_b + self.meta_b;
        let small = self.header + self.key_b + self.meta_b;
        if self.consistency == Consistency::Sc {
            p.steps.push(Step::Invalidate { key, server: writer });
            if fan > 0 {
                p.core(Res::AnyCore(writer), fan * self.send, true);
                let children = peers
                    .iter()
                    .map(|&peer| {
                        let mut c = p.child();
                        c.msg(writer, peer, small, true);
                        c.core(Res::AnyCore(peer), self.receive + self.send, true);
                        c.steps.push(Step::Invalidate { key, server: peer });
                        c.msg(peer, writer, small, true);
                        c.core(Res::AnyCore(writer), self.receive, true);
                        c.steps
                    })
                    .collect();
                p.steps.push(Step::Fork { children, join: true });
            }
        }
        p.steps.push(Step::Write { key, server: writer });
        p.mem(writer, false);
        self.replicate(p, writer);
        if self.consistency == Consistency::Sc {
            p.steps.push(Step::Update { key, server: writer });
        }
        if fan > 0 {
            p.core(Res::AnyCore(writer), fan * self.send, true);
            let children = peers
                .iter()
                .map(|&peer| {
                    let mut c = p.child();
                    c.msg(writer, peer, update, true);
                    c.core(Res::AnyCore(peer), self.receive + self.sync, true);
                    c.mem(peer, true);
                    c.steps.push(Step::Update { key, server: peer });
                    c.steps
                })
                .collect();
            p.steps.push(Step::Fork { children, join: false });
        }
    }
}

struct Planner<'a> {
    m: &'a Model,
    steps: Vec<Step>,
    tally: &'a mut Tally,
}

impl<'a> Planner<'a> {
    fn child(&mut self) -> Planner<'_> {
        Planner { m: self.m, steps: Vec::with_capacity(8), tally: self.tally }
    }

    fn core(&mut self, res: Res, ps: Ps, coherence: bool) {
        if ps > 0 {
            self.steps.push(Step::Use { res, ps, coherence });
        }
    }

    fn nic(&self, bytes: u32) -> Ps {
        (bytes as f64 * self.m.nic_ps_per_byte).round() as Ps
    }

    fn mem(&mut self, server: u32, coherence: bool) {
        self.mem_bytes(server, self.m.mem_b, coherence);
    }

    fn mem_bytes(&mut self, server: u32, bytes: u32, coherence: bool) {
        let ps = (bytes as f64 * self.m.mem_ps_per_byte).round() as Ps;
        self.core(Res::Mem(server), ps, coherence);
    }

    /// One message between servers: sender's NIC out, the wire, the
    /// receiver's NIC in.
    fn msg(&mut self, from: u32, to: u32, bytes: u32, coherence: bool) {
        self.tally.messages += 1;
        if coherence {
            self.tally.coherence_messages += 1;
        }
        let ps = self.nic(bytes);
        self.steps.push(Step::Use { res: Res::NicOut(from), ps, coherence });
        self.steps.push(Step::Delay(self.m.latency));
        self.steps.push(Step::Use { res: Res::NicIn(to), ps, coherence });
    }

    fn client_in(&mut self, to: u32, bytes: u32) {
        self.tally.messages += 1;
        self.steps.push(Step::Delay(self.m.latency));
        let ps = self.nic(bytes);
        self.steps.push(Step::Use { res: Res::NicIn(to), ps, coherence: false });
    }

    fn client_out(&mut self, from: u32, bytes: u32) {
        self.tally.messages += 1;
        let ps = self.nic(bytes);
        self.steps.push(Step::Use { res: Res::NicOut(from), ps, coherence: false });
        self.steps.push(Step::Delay(self.m.latency));
    }
}

/// The network messages and the extra hops on a write's critical path that
/// each protocol action costs in a group of `g` servers (Katsarakis Ch. 3,
/// Table 3.1), for a write of a hot key arriving at a member that is not
/// the key's home. Client request and reply are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ActionCost {
    /// Messages sent between servers for the write.
    pub messages: u32,
    /// Server-to-server hops the client waits for.
    pub critical_hops: u32,
}

pub fn hot_write_cost(protocol: Protocol, consistency: Consistency, g: u32) -> ActionCost {
    let peers = g.saturating_sub(1);
    let (bcast_msgs, bcast_hops) = match consistency {
        // Updates are sent after the reply: off the critical path.
        Consistency::Ec => (peers, 0),
        // Invalidations and acks on the path, then updates off it.
        Consistency::Sc => (3 * peers, 2),
    };
    let (extra_msgs, extra_hops) = match protocol {
        Protocol::AllPeers => (0, 0),
        Protocol::PrimaryTimestamp => (2, 2),
        Protocol::PrimaryBroadcast => (2, 2),
    };
    ActionCost { messages: bcast_msgs + extra_msgs, critical_hops: bcast_hops + extra_hops }
}
