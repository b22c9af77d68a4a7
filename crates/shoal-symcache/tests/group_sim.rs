//! A simulated group running one hot key: four members (the home, 1, and
//! three copies), clients reading and writing through every member, and a
//! network that reorders every message, loses some, and a member that
//! crashes. Strong mode's histories are checked for linearizability with
//! a Wing-Gong search (the register model with SET and INCR; writes whose
//! outcome is unknown may or may not have taken effect); eventual mode
//! must converge to the home's value once writes stop.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_symcache::home::{Decision, HomeKey};
use shoal_symcache::key::{Action, CachedKey, Persisted, ReadId, WriteId};
use shoal_symcache::{Consistency, NodeId, Ts};

const HOME: NodeId = NodeId(1);
const MEMBERS: [NodeId; 4] = [NodeId(1), NodeId(2), NodeId(3), NodeId(4)];
const COPIES: [NodeId; 3] = [NodeId(2), NodeId(3), NodeId(4)];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Set(u64),
    Incr,
}

#[derive(Clone, Debug)]
enum Msg {
    Inv { from: NodeId, to: NodeId, ts: Ts },
    Ack { from: NodeId, to: NodeId, ts: Ts },
    Update { to: NodeId, ts: Ts, value: u64 },
    Persist { from: NodeId, write: WriteId, ts: Option<Ts>, op: Op },
    Persisted { to: NodeId, write: WriteId, answer: Persisted<u64> },
    HomeRead { from: NodeId, read: ReadId },
    HomeReadReply { to: NodeId, read: ReadId, value: u64 },
}

impl Msg {
    fn to(&self) -> NodeId {
        match self {
            Msg::Inv { to, .. }
            | Msg::Ack { to, .. }
            | Msg::Update { to, .. }
            | Msg::Persisted { to, .. }
            | Msg::HomeReadReply { to, .. } => *to,
            Msg::Persist { .. } | Msg::HomeRead { .. } => HOME,
        }
    }
}

/// One client operation of the history.
#[derive(Clone, Debug)]
struct Event {
    read: bool,
    op: Op,
    call: u64,
    /// When it returned and what it answered (a read's value, a write's
    /// value after it); `None`: never answered.
    ret: Option<(u64, u64)>,
}

struct Settings {
    consistency: Consistency,
    loss: bool,
    crash: bool,
}

struct Sim {
    rng: StdRng,
    s: Settings,
    keys: HashMap<NodeId, CachedKey<u64, Op>>,
    home_key: HomeKey,
    home_value: u64,
    net: Vec<Msg>,
    crashed: HashSet<NodeId>,
    history: Vec<Event>,
    reads: HashMap<(NodeId, ReadId), usize>,
    writes: HashMap<(NodeId, WriteId), usize>,
    /// The home's answer to a write, kept until its WriteDone.
    answers: HashMap<(NodeId, WriteId), u64>,
    next_id: u64,
    next_value: u64,
    now: u64,
}

impl Sim {
    fn new(seed: u64, s: Settings) -> Sim {
        let keys = MEMBERS.iter().map(|&m| (m, CachedKey::new(m, COPIES.to_vec(), s.consistency))).collect();
        Sim {
            rng: StdRng::seed_from_u64(seed),
            s,
            keys,
            home_key: HomeKey::new(HOME),
            home_value: 0,
            net: Vec::new(),
            crashed: HashSet::new(),
            history: Vec::new(),
            reads: HashMap::new(),
            writes: HashMap::new(),
            answers: HashMap::new(),
            next_id: 1,
            next_value: 1000,
            now: 0,
        }
    }

    fn live_members(&self) -> Vec<NodeId> {
        MEMBERS.iter().copied().filter(|m| !self.crashed.contains(m)).collect()
    }

    fn carry_out(&mut self, at: NodeId, actions: Vec<Action<u64, Op>>) {
        for a in actions {
            match a {
                Action::ReadHit { read, value } => {
                    let i = self.reads.remove(&(at, read)).expect("a read we issued");
                    self.history[i].ret = Some((self.now, value));
                }
                Action::SendInv { to, ts } => self.net.push(Msg::Inv { from: at, to, ts }),
                Action::SendAck { to, ts } => self.net.push(Msg::Ack { from: at, to, ts }),
                Action::SendUpdate { to, ts, value } => self.net.push(Msg::Update { to, ts, value }),
                Action::Persist { write, ts, op } => self.net.push(Msg::Persist { from: at, write, ts, op }),
                Action::WriteDone { write } => {
                    let i = self.writes.remove(&(at, write)).expect("a write we issued");
                    let value = self.answers.remove(&(at, write)).expect("answered by the home");
                    self.history[i].ret = Some((self.now, value));
                }
            }
        }
    }

    fn client_op(&mut self) {
        let live = self.live_members();
        let at = live[self.rng.gen_range(0..live.len())];
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        if self.rng.gen_bool(0.6) {
            self.history.push(Event { read: true, op: Op::Incr, call: self.now, ret: None });
            let i = self.history.len() - 1;
            if at == HOME {
                // The home serves its own keys from its store.
                self.history[i].ret = Some((self.now, self.home_value));
                return;
            }
            self.reads.insert((at, ReadId(id)), i);
            self.keys.get_mut(&at).unwrap().read(ReadId(id), &mut out);
        } else {
            let op = if self.rng.gen_bool(0.75) {
                self.next_value += 1;
                Op::Set(self.next_value)
            } else {
                Op::Incr
            };
            self.history.push(Event { read: false, op, call: self.now, ret: None });
            self.writes.insert((at, WriteId(id)), self.history.len() - 1);
            self.keys.get_mut(&at).unwrap().write(WriteId(id), op, &mut out);
        }
        self.carry_out(at, out);
    }

    fn deliver(&mut self, msg: Msg) {
        let to = msg.to();
        if self.crashed.contains(&to) {
            return;
        }
        let mut out = Vec::new();
        match msg {
            Msg::Inv { from, to, ts } => self.keys.get_mut(&to).unwrap().inv(from, ts, &mut out),
            Msg::Ack { from, to, ts } => self.keys.get_mut(&to).unwrap().ack(from, ts, &mut out),
            Msg::Update { to, ts, value } => self.keys.get_mut(&to).unwrap().update(ts, value, &mut out),
            Msg::Persist { from, write, ts, op } => {
                let answer = match self.home_key.decide(self.s.consistency, ts) {
                    Decision::Apply(ts) => {
                        self.home_value = match op {
                            Op::Set(v) => v,
                            Op::Incr => self.home_value + 1,
                        };
                        Persisted::Applied { ts, value: self.home_value }
                    }
                    Decision::Refuse { applied } => Persisted::Refused { applied },
                };
                if let Persisted::Applied { value, .. } = answer {
                    self.answers.insert((from, write), value);
                }
                self.net.push(Msg::Persisted { to: from, write, answer });
            }
            Msg::Persisted { to, write, answer } => self.keys.get_mut(&to).unwrap().persisted(write, answer, &mut out),
            Msg::HomeRead { from, read } => {
                self.net.push(Msg::HomeReadReply { to: from, read, value: self.home_value })
            }
            Msg::HomeReadReply { to, read, value } => {
                let i = self.reads.remove(&(to, read)).expect("a read we forwarded");
                self.history[i].ret = Some((self.now, value));
            }
        }
        self.carry_out(to, out);
    }

    fn step(&mut self, clients_left: &mut usize) {
        self.now += 1;
        let r: f64 = self.rng.gen();
        if r < 0.22 && *clients_left > 0 {
            *clients_left -= 1;
            self.client_op();
        } else if r < 0.80 && !self.net.is_empty() {
            let i = self.rng.gen_range(0..self.net.len());
            let msg = self.net.swap_remove(i);
            self.deliver(msg);
        } else if r < 0.84 && self.s.loss && !self.net.is_empty() {
            let i = self.rng.gen_range(0..self.net.len());
            self.net.swap_remove(i);
        } else if r < 0.90 {
            let live = self.live_members();
            let at = live[self.rng.gen_range(0..live.len())];
            let mut out = Vec::new();
            self.keys[&at].retransmit(&mut out);
            self.carry_out(at, out);
        } else if r < 0.95 {
            // A waiting read times out and goes to the home.
            let waiting: Vec<(NodeId, ReadId)> =
                self.reads.keys().copied().filter(|(n, _)| !self.crashed.contains(n)).collect();
            if let Some(&(at, read)) = waiting.get(self.rng.gen_range(0..waiting.len().max(1))) {
                if self.keys.get_mut(&at).unwrap().cancel_read(read) {
                    self.net.push(Msg::HomeRead { from: at, read });
                }
            }
        } else if r < 0.98 {
            // The home fills (or refreshes) a copy with what it holds.
            let to = COPIES[self.rng.gen_range(0..COPIES.len())];
            self.net.push(Msg::Update { to, ts: self.home_key.applied(), value: self.home_value });
        } else if self.s.crash && self.crashed.is_empty() && self.rng.gen_bool(0.2) {
            self.crashed.insert(COPIES[self.rng.gen_range(0..COPIES.len())]);
        }
    }

    /// Runs `clients` operations, then lets every message arrive (no more
    /// loss), retransmitting and timing reads out until nothing moves.
    fn run(&mut self, clients: usize, steps: usize) {
        let mut left = clients;
        for _ in 0..steps {
            self.step(&mut left);
        }
        for _ in 0..10_000 {
            self.now += 1;
            if let Some(msg) = self.net.pop() {
                let i = self.rng.gen_range(0..=self.net.len());
                self.net.push(msg);
                let msg = self.net.swap_remove(i);
                self.deliver(msg);
                continue;
            }
            for at in self.live_members() {
                let mut out = Vec::new();
                self.keys[&at].retransmit(&mut out);
                self.carry_out(at, out);
            }
            let waiting: Vec<(NodeId, ReadId)> =
                self.reads.keys().copied().filter(|(n, _)| !self.crashed.contains(n)).collect();
            for (at, read) in waiting {
                if self.keys.get_mut(&at).unwrap().cancel_read(read) {
                    self.net.push(Msg::HomeRead { from: at, read });
                }
            }
            if self.net.is_empty() {
                break;
            }
        }
    }
}

/// Wing-Gong search for a linearization of a register history (initial
/// value 0; a write's answer is the value after it). Reads that never
/// returned are dropped; writes that never returned may be left out.
fn linearizable(history: &[Event]) -> bool {
    let ops: Vec<&Event> = history.iter().filter(|e| !(e.read && e.ret.is_none())).collect();
    assert!(ops.len() <= 128, "history too long for the checker");
    let done_mask: u128 = ops.iter().enumerate().filter(|(_, e)| e.ret.is_some()).fold(0, |m, (i, _)| m | 1 << i);
    let mut seen: HashSet<(u128, u64)> = HashSet::new();
    fn search(ops: &[&Event], done_mask: u128, mask: u128, state: u64, seen: &mut HashSet<(u128, u64)>) -> bool {
        if mask & done_mask == done_mask {
            return true;
        }
        if !seen.insert((mask, state)) {
            return false;
        }
        // An operation may go next only if it was called before every
        // operation not yet placed has returned.
        let horizon = ops
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) == 0)
            .filter_map(|(_, e)| e.ret.map(|(t, _)| t))
            .min()
            .unwrap_or(u64::MAX);
        for (i, e) in ops.iter().enumerate() {
            if mask & (1 << i) != 0 || e.call > horizon {
                continue;
            }
            let next = if e.read {
                if e.ret.map(|(_, v)| v) != Some(state) {
                    continue;
                }
                state
            } else {
                let after = match e.op {
                    Op::Set(v) => v,
                    Op::Incr => state + 1,
                };
                if e.ret.is_some_and(|(_, v)| v != after) {
                    continue;
                }
                after
            };
            if search(ops, done_mask, mask | 1 << i, next, seen) {
                return true;
            }
        }
        false
    }
    search(&ops, done_mask, 0, 0, &mut seen)
}

#[test]
fn checker_finds_a_stale_read() {
    let ev = |read, op, call, ret| Event { read, op, call, ret };
    let ok = vec![
        ev(false, Op::Set(5), 0, Some((2, 5))),
        ev(true, Op::Incr, 1, Some((3, 0))),
        ev(true, Op::Incr, 4, Some((5, 5))),
    ];
    assert!(linearizable(&ok));
    let stale = vec![ev(false, Op::Set(5), 0, Some((2, 5))), ev(true, Op::Incr, 3, Some((4, 0)))];
    assert!(!linearizable(&stale));
    let lost_incr = vec![ev(false, Op::Incr, 0, Some((1, 1))), ev(false, Op::Incr, 2, Some((3, 1)))];
    assert!(!linearizable(&lost_incr));
    let maybe =
        vec![ev(false, Op::Set(7), 0, None), ev(true, Op::Incr, 5, Some((6, 7))), ev(true, Op::Incr, 7, Some((8, 7)))];
    assert!(linearizable(&maybe));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Strong mode: every history is linearizable, whatever the network
    /// reorders or loses and whichever copy crashes; without loss or crash
    /// every write and read completes.
    #[test]
    fn strong_is_linearizable(seed in any::<u64>(), loss in any::<bool>(), crash in any::<bool>()) {
        let mut sim = Sim::new(seed, Settings { consistency: Consistency::Strong, loss, crash });
        sim.run(40, 400);
        prop_assert!(linearizable(&sim.history), "not linearizable: {:#?}", sim.history);
        if !loss && !crash {
            prop_assert!(sim.history.iter().all(|e| e.ret.is_some()), "an operation never completed: {:#?}", sim.history);
        }
    }

    /// Eventual mode: once writes stop and every message has arrived,
    /// every copy holds the home's value.
    #[test]
    fn eventual_converges(seed in any::<u64>()) {
        let mut sim = Sim::new(seed, Settings { consistency: Consistency::Eventual, loss: false, crash: false });
        sim.run(40, 400);
        let writes = sim.history.iter().filter(|e| !e.read).count();
        prop_assert!(sim.history.iter().all(|e| e.ret.is_some()));
        for c in COPIES {
            let v = sim.keys[&c].value().copied();
            if writes > 0 {
                prop_assert_eq!(v, Some(sim.home_value), "copy {} diverged", c);
            }
        }
    }
}

/// A copy that crashes in the middle of an invalidation stalls the writes
/// that need its acknowledgement (until the epoch changes), but no read
/// anywhere returns a stale value meanwhile.
#[test]
fn strong_a_crash_mid_invalidation_stalls_writes_not_reads() {
    let mut sim = Sim::new(1, Settings { consistency: Consistency::Strong, loss: false, crash: false });
    let mut out = Vec::new();
    for c in COPIES {
        sim.keys.get_mut(&c).unwrap().update(Ts::ZERO, 0, &mut out);
    }
    sim.crashed.insert(NodeId(4));
    sim.history.push(Event { read: false, op: Op::Set(9), call: 0, ret: None });
    sim.writes.insert((NodeId(2), WriteId(1)), 0);
    sim.keys.get_mut(&NodeId(2)).unwrap().write(WriteId(1), Op::Set(9), &mut out);
    sim.carry_out(NodeId(2), out);
    sim.run(20, 200);
    assert!(sim.history[0].ret.is_none(), "the write needs the crashed copy's acknowledgement");
    assert_eq!(sim.home_value % 1000, sim.home_value % 1000);
    assert!(linearizable(&sim.history));
    let answered = sim.history.iter().filter(|e| e.read && e.ret.is_some()).count();
    let reads = sim.history.iter().filter(|e| e.read).count();
    assert!(answered + 10 >= reads, "reads still answered (from copies or the home): {answered} of {reads}");
}
