//! The discrete-event engine: executes the plans of `plan` on a network of
//! FIFO queues, with closed-loop clients, and measures.
//!
//! Contract: `simulate(scenario)` is a pure function of the scenario (its
//! seed included): the same scenario gives the same `Report`, bit for bit,
//! except `wall_seconds`.
//!
//! Implementation details:
//! - Time is an integer number of picoseconds, so no float rounding can
//!   reorder events; ties break by insertion order.
//! - Every component is one FIFO server. Because events are processed in
//!   time order, a job arriving at time `t` with service `s` finishes at
//!   `max(t, free_at) + s`, and one heap event per step suffices. An
//!   `AnyCore` step joins the core of its server that frees up first,
//!   which is a central FIFO queue in front of all the cores.
//! - Clients keep `outstanding_per_server * servers` requests in flight;
//!   a completed request is replaced at once by a new one (closed loop).
//!   With enough requests in flight the bottleneck component stays busy,
//!   so the measured rate is the system's capacity.
//! - A cached copy's state (version applied, invalidations pending, reads
//!   waiting) lives in flat arrays indexed by (rank, member of the group).

use crate::plan::{Model, Ps, Request, Res, Step, Tally};
use crate::report::{Report, Utilisation};
use crate::scenario::{Consistency, Scenario};
use crate::zipf::Zipf;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

const NONE: u32 = u32::MAX;
const MAX_WARMUP_WINDOWS: usize = 40;

#[derive(Debug, Default, Clone, Copy)]
struct Station {
    free_at: Ps,
    busy: Ps,
    coherence: Ps,
}

struct Job {
    steps: Vec<Step>,
    pos: usize,
    parent: u32,
    pending: u32,
    version: u32,
    /// For a client request: when it was sent and whether it is a read.
    root: Option<(Ps, bool)>,
}

struct Sim {
    model: Model,
    zipf: Zipf,
    write_ratio: f64,
    rng: ChaCha8Rng,
    now: Ps,
    seq: u64,
    heap: BinaryHeap<Reverse<(Ps, u64, u32)>>,
    jobs: Vec<Option<Job>>,
    free: Vec<u32>,
    /// Cores (servers x cores), then NIC in, NIC out, memory per server.
    stations: Vec<Station>,
    cached_keys: u64,
    latest: Vec<u32>,
    applied: Vec<u32>,
    invalid: Vec<u16>,
    parked: HashMap<usize, Vec<u32>>,
    tally: Tally,
    /// Requests planned so far (for messages per request).
    planned: u64,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    completed: u64,
    reads: u64,
    stale_reads: u64,
    versions_behind: u64,
    blocked_reads: u64,
}

/// Runs the scenario to completion and reports what was measured.
pub fn simulate(scenario: &Scenario) -> Result<Report, String> {
    scenario.validate()?;
    let wall = std::time::Instant::now();
    let model = Model::new(scenario);
    let servers = model.servers() as usize;
    let cores = model.cores() as usize;
    let group = model.group() as usize;
    let cached_keys = if scenario.system.caching { scenario.system.cache_keys } else { 0 };
    let mut sim = Sim {
        zipf: Zipf::new(scenario.workload.keys, scenario.workload.zipf_exponent),
        write_ratio: scenario.workload.write_ratio,
        rng: ChaCha8Rng::seed_from_u64(scenario.seed),
        now: 0,
        seq: 0,
        heap: BinaryHeap::new(),
        jobs: Vec::new(),
        free: Vec::new(),
        stations: vec![Station::default(); servers * (cores + 3)],
        cached_keys,
        latest: vec![0; cached_keys as usize + 1],
        applied: vec![0; (cached_keys as usize + 1) * group],
        invalid: vec![0; (cached_keys as usize + 1) * group],
        parked: HashMap::new(),
        tally: Tally::default(),
        planned: 0,
        stats: Stats::default(),
        model,
    };
    let run = &scenario.run;
    let clients = scenario.outstanding_per_server() as u64 * servers as u64;
    for _ in 0..clients {
        sim.new_request();
    }

    // Warm up in windows of `warmup_requests` until two consecutive
    // windows' throughputs agree within 1% (queues at the bottleneck have
    // filled), at most `MAX_WARMUP_WINDOWS`; then measure `requests`
    // completions in two halves.
    let mut last = f64::NAN;
    for _ in 0..MAX_WARMUP_WINDOWS {
        let t0 = sim.now;
        sim.run_until(run.warmup_requests);
        let rate = run.warmup_requests as f64 / (sim.now - t0).max(1) as f64;
        if (rate - last).abs() / rate < 0.01 {
            break;
        }
        last = rate;
    }
    let start = sim.snapshot();
    let half = run.requests / 2;
    sim.stats = Stats::default();
    let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds");
    sim.run_measured(half, &mut latency);
    let mid = sim.now;
    sim.run_measured(run.requests - half, &mut latency);
    let end = sim.snapshot();

    let t = |a: Ps, b: Ps| (b - a) as f64 * 1e-12;
    let first = half as f64 / t(start.now, mid);
    let second = (run.requests - half) as f64 / t(mid, end.now);
    let throughput = run.requests as f64 / t(start.now, end.now);
    let window = (end.now - start.now) as f64;
    let util = |range: std::ops::Range<usize>| {
        let busy: Vec<f64> = range.clone().map(|i| ((end.busy[i] - start.busy[i]) as f64 / window).min(1.0)).collect();
        let coh: Vec<f64> = range.map(|i| (end.coherence[i] - start.coherence[i]) as f64 / window).collect();
        Utilisation::of(&busy, &coh)
    };
    let nc = servers * cores;
    let s = &sim.stats;
    Ok(Report {
        scenario: scenario.name.clone(),
        system: crate::report::label(scenario),
        throughput_mops: throughput / 1e6,
        first_half_mops: first / 1e6,
        second_half_mops: second / 1e6,
        halves_differ: (first - second).abs() / throughput,
        cores: util(0..nc),
        nic_in: util(nc..nc + servers),
        nic_out: util(nc + servers..nc + 2 * servers),
        memory: util(nc + 2 * servers..nc + 3 * servers),
        latency_us: crate::report::Latency::of(&latency),
        reads: s.reads,
        stale_read_fraction: if s.reads > 0 { s.stale_reads as f64 / s.reads as f64 } else { 0.0 },
        mean_versions_behind: if s.stale_reads > 0 { s.versions_behind as f64 / s.stale_reads as f64 } else { 0.0 },
        blocked_read_fraction: if s.reads > 0 { s.blocked_reads as f64 / s.reads as f64 } else { 0.0 },
        messages_per_request: (end.messages - start.messages) as f64 / (end.planned - start.planned) as f64,
        coherence_messages_per_request: (end.coherence_messages - start.coherence_messages) as f64
            / (end.planned - start.planned) as f64,
        simulated_ms: window * 1e-9,
        requests: run.requests,
        wall_seconds: wall.elapsed().as_secs_f64(),
    })
}

struct Snapshot {
    now: Ps,
    busy: Vec<Ps>,
    coherence: Vec<Ps>,
    messages: u64,
    coherence_messages: u64,
    planned: u64,
}

impl Sim {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            now: self.now,
            busy: self.stations.iter().map(|s| s.busy).collect(),
            coherence: self.stations.iter().map(|s| s.coherence).collect(),
            messages: self.tally.messages,
            coherence_messages: self.tally.coherence_messages,
            planned: self.planned,
        }
    }

    fn push(&mut self, at: Ps, job: u32) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, job)));
    }

    fn alloc(&mut self, job: Job) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.jobs[id as usize] = Some(job);
                id
            }
            None => {
                self.jobs.push(Some(job));
                (self.jobs.len() - 1) as u32
            }
        }
    }

    /// A client sends a new request now.
    fn new_request(&mut self) {
        let key = self.zipf.sample(&mut self.rng);
        let write = self.write_ratio > 0.0 && self.rng.gen::<f64>() < self.write_ratio;
        let req = Request { key, write };
        let pick = self.rng.gen_range(0..self.model.group());
        let entry = self.model.entry(req, pick);
        let steps = self.model.plan(req, entry, &mut self.tally);
        self.planned += 1;
        let job = Job { steps, pos: 0, parent: NONE, pending: 0, version: 0, root: Some((self.now, !write)) };
        let id = self.alloc(job);
        self.push(self.now, id);
    }

    fn run_until(&mut self, completions: u64) {
        let target = self.stats.completed + completions;
        while self.stats.completed < target {
            self.step(None);
        }
    }

    fn run_measured(&mut self, completions: u64, latency: &mut Histogram<u64>) {
        let target = self.stats.completed + completions;
        while self.stats.completed < target {
            self.step(Some(latency));
        }
    }

    /// Processes one event.
    fn step(&mut self, latency: Option<&mut Histogram<u64>>) {
        let Reverse((at, _, id)) = self.heap.pop().expect("clients keep jobs in flight");
        self.now = at;
        if let Some((start, read)) = self.advance(id) {
            self.stats.completed += 1;
            if read {
                self.stats.reads += 1;
            }
            if let Some(h) = latency {
                h.saturating_record(((self.now - start) / 1000).max(1));
            }
            self.new_request();
        }
    }

    /// Runs job `id` from its current step until it waits (for a component,
    /// a delay, its children or an invalid copy) or ends. Returns the
    /// request's start time and kind when a client request completes.
    fn advance(&mut self, id: u32) -> Option<(Ps, bool)> {
        loop {
            let job = self.jobs[id as usize].as_mut().expect("live job");
            if job.pos == job.steps.len() {
                let job = self.jobs[id as usize].take().expect("live job");
                self.free.push(id);
                if job.parent != NONE {
                    let parent = self.jobs[job.parent as usize].as_mut().expect("live parent");
                    parent.pending -= 1;
                    if parent.pending == 0 {
                        self.push(self.now, job.parent);
                    }
                }
                return job.root;
            }
            let pos = job.pos;
            job.pos += 1;
            match &mut job.steps[pos] {
                Step::Use { res, ps, coherence } => {
                    let (res, ps, coherence) = (*res, *ps, *coherence);
                    let now = self.now;
                    let st = self.station(res);
                    let finish = st.free_at.max(now) + ps;
                    st.free_at = finish;
                    st.busy += ps;
                    if coherence {
                        st.coherence += ps;
                    }
                    self.push(finish, id);
                    return None;
                }
                Step::Delay(d) => {
                    let d = *d;
                    self.push(self.now + d, id);
                    return None;
                }
                Step::Fork { children, join } => {
                    let children = std::mem::take(children);
                    let join = *join;
                    let version = job.version;
                    let n = children.len() as u32;
                    if join {
                        job.pending = n;
                    }
                    for steps in children {
                        let parent = if join { id } else { NONE };
                        let child = Job { steps, pos: 0, parent, pending: 0, version, root: None };
                        let cid = self.alloc(child);
                        self.push(self.now, cid);
                    }
                    if join && n > 0 {
                        return None;
                    }
                }
                Step::CacheRead { key, server } => {
                    let (key, server) = (*key, *server);
                    let slot = self.slot(key, server);
                    if self.model.consistency() == Consistency::Sc && self.invalid[slot] > 0 {
                        self.stats.blocked_reads += 1;
                        self.parked.entry(slot).or_default().push(id);
                        return None;
                    }
                    let latest = self.latest[key as usize];
                    let seen = self.applied[slot];
                    if seen < latest {
                        self.stats.stale_reads += 1;
                        self.stats.versions_behind += (latest - seen) as u64;
                    }
                }
                Step::Invalidate { key, server } => {
                    let (key, server) = (*key, *server);
                    let slot = self.slot(key, server);
                    self.invalid[slot] += 1;
                }
                Step::Write { key, server } => {
                    let (key, server) = (*key, *server);
                    self.latest[key as usize] += 1;
                    let v = self.latest[key as usize];
                    job.version = v;
                    let slot = self.slot(key, server);
                    self.applied[slot] = self.applied[slot].max(v);
                }
                Step::Update { key, server } => {
                    let (key, server) = (*key, *server);
                    let v = job.version;
                    let slot = self.slot(key, server);
                    self.applied[slot] = self.applied[slot].max(v);
                    if self.model.consistency() == Consistency::Sc {
                        self.invalid[slot] -= 1;
                        if self.invalid[slot] == 0 {
                            if let Some(waiting) = self.parked.remove(&slot) {
                                for w in waiting {
                                    self.push(self.now, w);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The state slot of the copy of cached `key` on `server`.
    fn slot(&self, key: u64, server: u32) -> usize {
        debug_assert!(key <= self.cached_keys);
        key as usize * self.model.group() as usize + (server % self.model.group()) as usize
    }

    fn station(&mut self, res: Res) -> &mut Station {
        let cores = self.model.cores() as usize;
        let servers = self.model.servers() as usize;
        let i = match res {
            Res::Core(s, c) => s as usize * cores + c as usize,
            Res::AnyCore(s) => {
                let base = s as usize * cores;
                let mut best = base;
                for i in base + 1..base + cores {
                    if self.stations[i].free_at < self.stations[best].free_at {
                        best = i;
                    }
                }
                best
            }
            Res::NicIn(s) => servers * cores + s as usize,
            Res::NicOut(s) => servers * cores + servers + s as usize,
            Res::Mem(s) => servers * cores + 2 * servers + s as usize,
        };
        &mut self.stations[i]
    }
}
