//! Rebalancing and drain plans (`docs/migration.md`, "Rebalancing and
//! drain"): which tablets to split and move so that the memory and then
//! the load of the up servers become even, or so that one server masters
//! nothing. No I/O:
//! [`plan`] takes the map and what each server reported, and returns the
//! steps; the coordinator runs them one at a time through the ordinary
//! split and migration requests.
//!
//! **Weights.** A server reports its live bytes and, per table, the bytes
//! and objects of its objects (native STATS `live_bytes`, `stream_bytes`,
//! `table_<id>_bytes`, `table_<id>_objects`). A tablet's weight is its
//! table's figure on its master times its share of the hash width of that
//! table's tablets there: keys hash uniformly, so a tablet holds its
//! width's share of them. (A slot-hashed table whose keys share a few hash
//! tags is the exception: its estimate can be far off; the plan is then
//! less even, never wrong.) A server's memory is its live bytes, so what
//! cannot move (chunks, streams) still counts.
//!
//! A server also reports its operations per second, in all and per table
//! (`ops_per_sec`, `table_<id>_ops_per_sec`); a tablet's share of its
//! table's rate is estimated by hash width in the same way, so a tablet
//! whose traffic goes to a few keys is estimated as if spread over its
//! range (a split of it may move less load than planned, never more
//! memory).
//!
//! **Balancing** (greedy): while the most and least loaded eligible servers
//! differ by more than the tolerance (a twentieth of the mean load, at
//! least [`MIN_GAP`]), move from the first to the second about `want`
//! bytes: the first's excess over the mean or the second's shortfall,
//! whichever is smaller, so that no byte moves twice. The tablet of the
//! first closest to `want` moves if it is within half the tolerance of it;
//! otherwise the smallest tablet bigger than `want` is split so that its
//! upper part weighs `want`, and the part moves; failing both, the closest
//! tablet moves if that brings the two closer at all. Each step lowers the
//! sum of squared differences from the mean, so the loop ends;
//! [`MAX_STEPS`] bounds it.
//!
//! **Load** (after memory, not in a drain): memory comes first because it
//! is what can run out (a full server refuses writes), while an uneven
//! load only makes one server slower. Then, while the busiest and the
//! idlest servers differ by more than the load tolerance (a tenth of the
//! mean rate, at least [`MIN_OPS`]), about `want` operations per second
//! move from the first to the second, chosen as for memory (a whole
//! tablet near `want`, else the hottest-per-byte tablet split so that its
//! upper part carries `want`). Such a move also carries memory: if that
//! takes the memory spread past the larger of the memory tolerance and the
//! spread memory balancing left, the coldest-per-byte tablet of the idle
//! server (split to the bytes that moved if bigger) goes back the other
//! way, so that hot and cold data trade places. A load move is kept only
//! if, with its return, the load's sum of squared differences from the
//! mean falls and memory stays within that bound; else balancing stops.
//! Only tablets (and parts) bigger than [`GATHER_BYTES`] move for load,
//! so that gathering never undoes it.
//!
//! **Gathering and merging** (not in a drain): first, each tablet of at
//! most [`GATHER_BYTES`] whose neighbours in its table are all on other
//! servers moves onto the least loaded of those neighbours' (eligible)
//! servers, so that the pieces a crash recovery cut a tablet into, or a
//! balancing left small, come back together; moves that small hardly
//! change the loads. Last, every two adjacent tablets of a table that end
//! on one master are merged (a map change, no data moves). A tablet of a
//! big table is not gathered: it is a useful unit for balancing.
//!
//! **Drain**: every tablet of the drained server, heaviest first, goes to
//! the least loaded eligible server at that point; a tablet that would
//! take that server more than the tolerance past the mean load of the
//! servers that stay is split first, so that the part that moves fills it
//! to the mean, and the rest is placed the same way.

use crate::map::{ClusterMap, ServerId, ServerState, TabletInfo};
use serde::{Deserialize, Serialize};
use shoal_common::TableId;
use std::collections::{BTreeMap, BTreeSet};

/// Below this difference (bytes) between two servers nothing moves.
pub const MIN_GAP: u64 = 256 << 10;
/// Below this difference (operations per second) between two servers no
/// load moves: a server serves hundreds of thousands a second, so a
/// smaller difference is not worth a move's pause.
pub const MIN_OPS: u64 = 2000;
/// Most steps (splits, moves and merges) one plan holds.
pub const MAX_STEPS: usize = 256;
/// Tablets this small (estimated bytes) are gathered next to a neighbour
/// of their table and merged into it (see the module comment).
pub const GATHER_BYTES: u64 = MIN_GAP;
/// Bits of a slot-hashed key hash below its slot (`shoal_common::slots`):
/// such a table is split only at a slot's first hash.
const SLOT_LOW: u64 = (1 << 50) - 1;

/// What one server reported (its native STATS).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerUsage {
    /// `live_bytes` + `stream_bytes`: the memory its data holds.
    pub bytes: u64,
    /// Per table: (objects, bytes of their log entries).
    pub tables: BTreeMap<TableId, (u64, u64)>,
    /// `ops_per_sec`: operations per second, all tables.
    #[serde(default)]
    pub ops: u64,
    /// Per table: `table_<id>_ops_per_sec`.
    #[serde(default)]
    pub table_ops: BTreeMap<TableId, u64>,
}

/// What the plan is for.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Move only tablets of this table (loads still count every table).
    pub table: Option<TableId>,
    /// Move every tablet off this server instead of balancing.
    pub drain: Option<ServerId>,
    /// Servers that take no tablet (being drained).
    pub excluded: BTreeSet<ServerId>,
    /// Only gather and merge small pieces (what follows a recovery): no
    /// balancing of memory or load.
    pub gather_only: bool,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Split the tablet of `table` holding `at` at `at` (both parts stay
    /// on its master).
    Split { table: TableId, name: String, at: u64, master: ServerId },
    /// Move the tablet `start_hash..=end_hash` of `table` from `from` to
    /// `to`; `bytes` and `objects` are its estimated weight.
    Move {
        table: TableId,
        name: String,
        start_hash: u64,
        end_hash: u64,
        from: ServerId,
        to: ServerId,
        bytes: u64,
        objects: u64,
    },
    /// Merge the tablet of `table` starting at `at` into the one ending at
    /// `at - 1`, both on `master`.
    Merge { table: TableId, name: String, at: u64, master: ServerId },
}

/// A server's memory (bytes) and load (operations per second), before or
/// after a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    pub server: ServerId,
    pub bytes: u64,
    #[serde(default)]
    pub ops: u64,
}

/// The steps, and the loads of the up servers before and (estimated)
/// after them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub before: Vec<Load>,
    pub after: Vec<Load>,
}

impl Plan {
    /// Most minus least memory of a server, of `loads` (0 if none).
    pub fn spread(loads: &[Load]) -> u64 {
        let max = loads.iter().map(|l| l.bytes).max().unwrap_or(0);
        let min = loads.iter().map(|l| l.bytes).min().unwrap_or(0);
        max - min
    }

    /// Busiest minus idlest server (operations per second), of `loads`.
    pub fn ops_spread(loads: &[Load]) -> u64 {
        let max = loads.iter().map(|l| l.ops).max().unwrap_or(0);
        let min = loads.iter().map(|l| l.ops).min().unwrap_or(0);
        max - min
    }

    /// Number of moves.
    pub fn moves(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, Step::Move { .. })).count()
    }

    /// Number of merges.
    pub fn merges(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, Step::Merge { .. })).count()
    }
}

/// A tablet with its estimated weight.
#[derive(Clone, Debug)]
struct Piece {
    tablet: TabletInfo,
    bytes: u64,
    objects: u64,
    /// Operations per second.
    ops: u64,
}

/// Each up server's memory and load, as the plan changes them.
#[derive(Clone)]
struct Loads {
    bytes: BTreeMap<ServerId, u64>,
    ops: BTreeMap<ServerId, u64>,
}

impl Loads {
    fn list(&self) -> Vec<Load> {
        self.bytes.iter().map(|(s, b)| Load { server: *s, bytes: *b, ops: self.ops[s] }).collect()
    }
}

/// Computes the plan. Errors (a message for the operator) when it cannot
/// be made: a migration or recovery in progress, no usage for an up
/// server, a drained server that is unknown or not up, the only eligible
/// server, or holding tablets that cannot move (chunk tables, streams:
/// listed).
pub fn plan(map: &ClusterMap, usage: &BTreeMap<ServerId, ServerUsage>, opts: &Options) -> Result<Plan, String> {
    if let Some(m) = map.migrations.first() {
        return Err(format!("migration {} is in progress: wait for it to end", m.id));
    }
    if let Some(r) = map.recoveries.first() {
        return Err(format!("the recovery of server {} is in progress: wait for it to end", r.dead));
    }
    let up: Vec<ServerId> = map.servers.iter().filter(|s| s.state == ServerState::Up).map(|s| s.id).collect();
    if let Some(missing) = up.iter().find(|s| !usage.contains_key(s)) {
        return Err(format!("no figures from server {missing}"));
    }
    let mut loads = Loads {
        bytes: up.iter().map(|s| (*s, usage[s].bytes)).collect(),
        ops: up.iter().map(|s| (*s, usage[s].ops)).collect(),
    };
    let before = loads.list();
    let eligible: BTreeSet<ServerId> =
        up.iter().copied().filter(|s| !opts.excluded.contains(s) && Some(*s) != opts.drain).collect();
    let mut pieces = weigh(map, usage);
    let movable = |t: &TabletInfo| {
        map.tables.iter().any(|x| x.id == t.table && !x.chunks && x.stream.is_none())
            && opts.table.is_none_or(|only| only == t.table)
    };
    let name = |t: TableId| map.tables.iter().find(|x| x.id == t).map_or_else(String::new, |x| x.name.clone());
    let mut steps = Vec::new();
    if let Some(d) = opts.drain {
        match map.server(d).map(|s| s.state) {
            None => return Err(format!("no server {d}")),
            Some(ServerState::Up) => {}
            Some(other) => return Err(format!("server {d} is not up ({other:?})")),
        }
        if eligible.is_empty() {
            return Err(format!(
                "server {d} is the only server up (or the others are being drained): nowhere to move its tablets"
            ));
        }
        let fixed: Vec<String> = map
            .tablets_of(d)
            .filter(|t| map.tables.iter().any(|x| x.id == t.table && (x.chunks || x.stream.is_some())))
            .map(|t| {
                let x = map.tables.iter().find(|x| x.id == t.table).expect("known table");
                format!("{} '{}'", if x.chunks { "chunk table" } else { "stream" }, x.name)
            })
            .collect();
        if !fixed.is_empty() {
            return Err(format!(
                "server {d} masters tablets that cannot move (only key-value tablets move): {}",
                fixed.join(", ")
            ));
        }
        let mut mine: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].tablet.master == d).collect();
        mine.sort_by_key(|&i| {
            (std::cmp::Reverse(pieces[i].bytes), pieces[i].tablet.table, pieces[i].tablet.start_hash)
        });
        let mut queue: std::collections::VecDeque<usize> = mine.into();
        let total: u64 = loads.bytes.values().sum();
        let mean = total / eligible.len() as u64;
        let tolerance = (mean / 20).max(MIN_GAP);
        while let Some(i) = queue.pop_front() {
            let to = *eligible.iter().min_by_key(|s| (loads.bytes[s], **s)).expect("eligible servers");
            let room = mean.saturating_sub(loads.bytes[&to]);
            // A split costs two steps; the moves still queued must fit.
            let budget = steps.len() + 2 + queue.len() < MAX_STEPS;
            let cut = (pieces[i].bytes > room + tolerance && room >= MIN_GAP && budget)
                .then(|| split_point(&pieces[i], room))
                .flatten();
            match cut {
                Some(at) => {
                    let table = pieces[i].tablet.table;
                    steps.push(Step::Split { table, name: name(table), at, master: d });
                    let upper = split(&mut pieces[i], at);
                    pieces.push(upper);
                    let j = pieces.len() - 1;
                    steps.push(move_step(&mut pieces[j], to, &mut loads, &name));
                    queue.push_front(i);
                }
                None => steps.push(move_step(&mut pieces[i], to, &mut loads, &name)),
            }
        }
    } else if eligible.len() >= 2 {
        gather(&mut pieces, &eligible, &movable, &mut loads, &mut steps, &name);
        let total: u64 = eligible.iter().map(|s| loads.bytes[s]).sum();
        let mean = total / eligible.len() as u64;
        let tolerance = (mean / 20).max(MIN_GAP);
        while !opts.gather_only && steps.len() + 2 <= MAX_STEPS {
            let load = &loads.bytes;
            let from = *eligible.iter().max_by_key(|s| (load[s], std::cmp::Reverse(**s))).expect("two servers");
            let to = *eligible.iter().min_by_key(|s| (load[s], **s)).expect("two servers");
            let gap = load[&from] - load[&to];
            let want = load[&from].saturating_sub(mean).min(mean.saturating_sub(load[&to]));
            if gap <= tolerance || want < MIN_GAP / 4 {
                break;
            }
            let theirs: Vec<usize> = (0..pieces.len())
                .filter(|&i| pieces[i].tablet.master == from && pieces[i].bytes > 0 && movable(&pieces[i].tablet))
                .collect();
            // Moving s brings the two closer iff s < gap.
            let off = |i: usize| want.abs_diff(pieces[i].bytes);
            let whole = theirs.iter().copied().filter(|&i| pieces[i].bytes < gap).min_by_key(|&i| off(i));
            let splittable = theirs
                .iter()
                .copied()
                .filter(|&i| pieces[i].bytes > want && split_point(&pieces[i], want).is_some())
                .min_by_key(|&i| pieces[i].bytes);
            let i = match (whole, splittable) {
                (Some(w), _) if off(w) <= tolerance / 2 => w,
                (_, Some(s)) => {
                    let at = split_point(&pieces[s], want).expect("checked");
                    steps.push(Step::Split {
                        table: pieces[s].tablet.table,
                        name: name(pieces[s].tablet.table),
                        at,
                        master: from,
                    });
                    let upper = split(&mut pieces[s], at);
                    pieces.push(upper);
                    pieces.len() - 1
                }
                (Some(w), None) => w,
                (None, None) => break,
            };
            steps.push(move_step(&mut pieces[i], to, &mut loads, &name));
        }
        if !opts.gather_only {
            let bound = Plan::spread(&eligible_loads(&loads, &eligible)).max(tolerance);
            balance_load(&mut pieces, &eligible, &movable, &mut loads, &mut steps, &name, bound);
        }
    }
    if opts.drain.is_none() {
        let room = MAX_STEPS.saturating_sub(steps.len());
        steps.extend(merges(&pieces, &movable, &name).into_iter().take(room));
    }
    let after = loads.list();
    Ok(Plan { steps, before, after })
}

/// The loads of the eligible servers only.
fn eligible_loads(loads: &Loads, eligible: &BTreeSet<ServerId>) -> Vec<Load> {
    loads.list().into_iter().filter(|l| eligible.contains(&l.server)).collect()
}

/// Sum of squared differences of the eligible servers' rates from their
/// mean (as f64: rates squared may pass u64).
fn ops_deviation(loads: &Loads, eligible: &BTreeSet<ServerId>) -> f64 {
    let n = eligible.len() as f64;
    let mean = eligible.iter().map(|s| loads.ops[s] as f64).sum::<f64>() / n;
    eligible.iter().map(|s| (loads.ops[s] as f64 - mean).powi(2)).sum()
}

/// Evens the load (see the module comment, "Load"), keeping the memory
/// spread of the eligible servers within `bound` bytes.
fn balance_load(
    pieces: &mut Vec<Piece>,
    eligible: &BTreeSet<ServerId>,
    movable: &impl Fn(&TabletInfo) -> bool,
    loads: &mut Loads,
    steps: &mut Vec<Step>,
    name: &impl Fn(TableId) -> String,
    bound: u64,
) {
    let total: u64 = eligible.iter().map(|s| loads.ops[s]).sum();
    let mean = total / eligible.len() as u64;
    let tolerance = (mean / 10).max(MIN_OPS);
    // A load move and its return: at most two splits and two moves.
    while steps.len() + 4 <= MAX_STEPS {
        let ops = &loads.ops;
        let from = *eligible.iter().max_by_key(|s| (ops[s], std::cmp::Reverse(**s))).expect("two servers");
        let to = *eligible.iter().min_by_key(|s| (ops[s], **s)).expect("two servers");
        let gap = ops[&from] - ops[&to];
        let want = ops[&from].saturating_sub(mean).min(mean.saturating_sub(ops[&to]));
        if gap <= tolerance || want < tolerance / 4 {
            return;
        }
        // Tried on copies: kept only if the result is better.
        let (mut p, mut l, mut s) = (pieces.clone(), loads.clone(), Vec::new());
        // Only tablets bigger than GATHER_BYTES, in parts bigger than it,
        // move for load: a smaller one would be gathered back by the next
        // plan (hot small data is symmetric caching's job).
        let big = |x: &Piece| x.bytes > GATHER_BYTES && movable(&x.tablet);
        let theirs: Vec<usize> =
            (0..p.len()).filter(|&i| p[i].tablet.master == from && p[i].ops > 0 && big(&p[i])).collect();
        let halves_big = |x: &Piece, at: u64| {
            let mut lower = x.clone();
            let upper = split(&mut lower, at);
            lower.bytes > GATHER_BYTES && upper.bytes > GATHER_BYTES
        };
        let off = |i: usize| want.abs_diff(p[i].ops);
        let whole = theirs.iter().copied().filter(|&i| p[i].ops < gap).min_by_key(|&i| (off(i), p[i].bytes));
        // The hottest per byte, so the least memory moves with the load.
        let splittable = theirs
            .iter()
            .copied()
            .filter(|&i| p[i].ops > want && cut(&p[i].tablet, want, p[i].ops).is_some_and(|at| halves_big(&p[i], at)))
            .max_by_key(|&i| (u128::from(p[i].ops) << 64) / u128::from(p[i].bytes.max(1)));
        let i = match (whole, splittable) {
            (Some(w), _) if off(w) <= tolerance / 2 => w,
            (_, Some(x)) => {
                let at = cut(&p[x].tablet, want, p[x].ops).expect("checked");
                s.push(Step::Split { table: p[x].tablet.table, name: name(p[x].tablet.table), at, master: from });
                let upper = split(&mut p[x], at);
                p.push(upper);
                p.len() - 1
            }
            (Some(w), None) => w,
            (None, None) => return,
        };
        let moved = p[i].bytes;
        s.push(move_step(&mut p[i], to, &mut l, name));
        if Plan::spread(&eligible_loads(&l, eligible)) > bound {
            // Cold data of `to` goes back, about as much as came.
            let cold = (0..p.len()).filter(|&j| j != i && p[j].tablet.master == to && big(&p[j])).min_by_key(|&j| {
                ((u128::from(p[j].ops) << 64) / u128::from(p[j].bytes), std::cmp::Reverse(p[j].bytes))
            });
            let Some(j) = cold else { return };
            let j = match split_point(&p[j], moved) {
                Some(at) if p[j].bytes > moved + MIN_GAP / 4 && halves_big(&p[j], at) => {
                    s.push(Step::Split { table: p[j].tablet.table, name: name(p[j].tablet.table), at, master: to });
                    let upper = split(&mut p[j], at);
                    p.push(upper);
                    p.len() - 1
                }
                _ => j,
            };
            s.push(move_step(&mut p[j], from, &mut l, name));
        }
        if Plan::spread(&eligible_loads(&l, eligible)) > bound
            || ops_deviation(&l, eligible) >= ops_deviation(loads, eligible)
        {
            return;
        }
        (*pieces, *loads) = (p, l);
        steps.extend(s);
    }
}

/// Adjacent tablets of one table on one master: indexes into the pieces,
/// in hash order, and their weight.
struct Run {
    pieces: Vec<usize>,
    table: TableId,
    master: ServerId,
    start: u64,
    end: u64,
    bytes: u64,
}

/// The runs of the movable tablets, by table and hash.
fn runs(pieces: &[Piece], movable: &impl Fn(&TabletInfo) -> bool) -> Vec<Run> {
    let mut order: Vec<usize> = (0..pieces.len()).filter(|&i| movable(&pieces[i].tablet)).collect();
    order.sort_by_key(|&i| (pieces[i].tablet.table, pieces[i].tablet.start_hash));
    let mut runs: Vec<Run> = Vec::new();
    for i in order {
        let t = &pieces[i].tablet;
        match runs.last_mut() {
            Some(r) if r.table == t.table && r.master == t.master && r.end.checked_add(1) == Some(t.start_hash) => {
                r.pieces.push(i);
                r.end = t.end_hash;
                r.bytes += pieces[i].bytes;
            }
            _ => runs.push(Run {
                pieces: vec![i],
                table: t.table,
                master: t.master,
                start: t.start_hash,
                end: t.end_hash,
                bytes: pieces[i].bytes,
            }),
        }
    }
    runs
}

/// Gathers small runs of tablets onto a neighbour's server (see the module
/// comment): the smallest run of at most [`GATHER_BYTES`] moves onto the
/// server of its heavier adjacent run (on an eligible server), so every
/// tablet moves about once, until none can or half of [`MAX_STEPS`] is
/// used. Each move joins two runs, so this ends.
fn gather(
    pieces: &mut [Piece],
    eligible: &BTreeSet<ServerId>,
    movable: &impl Fn(&TabletInfo) -> bool,
    loads: &mut Loads,
    steps: &mut Vec<Step>,
    name: &impl Fn(TableId) -> String,
) {
    loop {
        let runs = runs(pieces, movable);
        let mut best: Option<(u64, usize, ServerId)> = None;
        for (k, r) in runs.iter().enumerate() {
            if r.bytes > GATHER_BYTES || !eligible.contains(&r.master) || best.is_some_and(|b| b.0 <= r.bytes) {
                continue;
            }
            let touching = |n: &Run| {
                n.table == r.table
                    && (n.end.checked_add(1) == Some(r.start) || r.end.checked_add(1) == Some(n.start))
                    && eligible.contains(&n.master)
            };
            let neighbour = [k.checked_sub(1).map(|j| &runs[j]), runs.get(k + 1)]
                .into_iter()
                .flatten()
                .filter(|n| touching(n))
                .max_by_key(|n| (n.bytes, std::cmp::Reverse((loads.bytes[&n.master], n.master))));
            let Some(to) = neighbour.map(|n| n.master) else { continue };
            // The spread of the loads may not widen past MIN_GAP (below
            // which a cluster counts as balanced).
            let mut after = loads.clone();
            let from = after.bytes.get_mut(&r.master).expect("an up master");
            *from -= r.bytes.min(*from);
            *after.bytes.get_mut(&to).expect("an eligible server") += r.bytes;
            if Plan::spread(&after.list()) > Plan::spread(&loads.list()).max(MIN_GAP) {
                continue;
            }
            best = Some((r.bytes, k, to));
        }
        let Some((_, k, to)) = best else { return };
        if steps.len() + runs[k].pieces.len() > MAX_STEPS / 2 {
            return;
        }
        for &i in &runs[k].pieces {
            steps.push(move_step(&mut pieces[i], to, loads, name));
        }
    }
}

/// A merge for every two adjacent tablets of a table on one master, in
/// the order the coordinator can take them (each joins the tablet starting
/// at `at` to the one before it, which may be the result of the last).
fn merges(pieces: &[Piece], movable: &impl Fn(&TabletInfo) -> bool, name: &impl Fn(TableId) -> String) -> Vec<Step> {
    let mut tablets: Vec<&TabletInfo> = pieces.iter().map(|p| &p.tablet).filter(|t| movable(t)).collect();
    tablets.sort_by_key(|t| (t.table, t.start_hash));
    tablets
        .windows(2)
        .filter(|w| {
            w[0].table == w[1].table
                && w[0].master == w[1].master
                && w[0].end_hash.checked_add(1) == Some(w[1].start_hash)
        })
        .map(|w| Step::Merge { table: w[1].table, name: name(w[1].table), at: w[1].start_hash, master: w[1].master })
        .collect()
}

/// Each tablet of an up master with its estimated weight (see the module
/// comment).
fn weigh(map: &ClusterMap, usage: &BTreeMap<ServerId, ServerUsage>) -> Vec<Piece> {
    let width = |t: &TabletInfo| u128::from(t.end_hash - t.start_hash) + 1;
    let mut total: BTreeMap<(ServerId, TableId), u128> = BTreeMap::new();
    for t in &map.tablets {
        *total.entry((t.master, t.table)).or_default() += width(t);
    }
    map.tablets
        .iter()
        .filter_map(|t| {
            let u = usage.get(&t.master)?;
            let (objects, bytes) = u.tables.get(&t.table).copied().unwrap_or((0, 0));
            let ops = u.table_ops.get(&t.table).copied().unwrap_or(0);
            let share = |v: u64| (u128::from(v) * width(t) / total[&(t.master, t.table)]) as u64;
            Some(Piece { tablet: t.clone(), bytes: share(bytes), objects: share(objects), ops: share(ops) })
        })
        .collect()
}

/// The hash at which to cut `p` so that its upper part `[at, end]` weighs
/// about `want` bytes; `None` if no such cut exists (a one-hash tablet, a
/// slot-hashed tablet of one slot).
fn split_point(p: &Piece, want: u64) -> Option<u64> {
    cut(&p.tablet, want, p.bytes)
}

/// The hash at which to cut `t` so that its upper part holds `want` of
/// its `of` (bytes or operations), shared by width; `None` as for
/// [`split_point`].
fn cut(t: &TabletInfo, want: u64, of: u64) -> Option<u64> {
    let width = u128::from(t.end_hash - t.start_hash) + 1;
    let upper = (width * u128::from(want) / u128::from(of.max(1))).max(1);
    if upper >= width {
        return None;
    }
    let mut at = (u128::from(t.end_hash) + 1 - upper) as u64;
    if t.table.is_slot_hashed() {
        at &= !SLOT_LOW;
    }
    (at > t.start_hash && at <= t.end_hash).then_some(at)
}

/// Cuts `p` at `at`: `p` keeps `[start, at - 1]`, the returned piece is
/// `[at, end]`; weights are shared by width.
fn split(p: &mut Piece, at: u64) -> Piece {
    let width = u128::from(p.tablet.end_hash - p.tablet.start_hash) + 1;
    let upper_width = u128::from(p.tablet.end_hash - at) + 1;
    let share = |v: u64| (u128::from(v) * upper_width / width) as u64;
    let upper = Piece {
        tablet: TabletInfo { start_hash: at, ..p.tablet.clone() },
        bytes: share(p.bytes),
        objects: share(p.objects),
        ops: share(p.ops),
    };
    p.tablet.end_hash = at - 1;
    p.bytes -= upper.bytes;
    p.objects -= upper.objects;
    p.ops -= upper.ops;
    upper
}

/// Records the move of `p` to `to` in `p` and the loads.
fn move_step(p: &mut Piece, to: ServerId, loads: &mut Loads, name: &impl Fn(TableId) -> String) -> Step {
    let from = p.tablet.master;
    if let Some(l) = loads.bytes.get_mut(&from) {
        *l = l.saturating_sub(p.bytes);
    }
    if let Some(l) = loads.ops.get_mut(&from) {
        *l = l.saturating_sub(p.ops);
    }
    *loads.bytes.entry(to).or_default() += p.bytes;
    *loads.ops.entry(to).or_default() += p.ops;
    p.tablet.master = to;
    Step::Move {
        table: p.tablet.table,
        name: name(p.tablet.table),
        start_hash: p.tablet.start_hash,
        end_hash: p.tablet.end_hash,
        from,
        to,
        bytes: p.bytes,
        objects: p.objects,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::{Migration, ServerInfo, TableInfo};
    use shoal_common::LogId;

    fn server(id: u64, state: ServerState) -> ServerInfo {
        let addr = format!("127.0.0.1:{}", 7000 + id).parse().unwrap();
        ServerInfo { id: ServerId(id), native: addr, resp: addr, backup: addr, log: LogId(id), state }
    }

    /// `servers` up servers; table 1 "kv" with `span` equal tablets dealt
    /// round-robin over the first `holders` of them.
    fn cluster(servers: u64, holders: u64, span: u32) -> ClusterMap {
        let tablets = crate::split_hash_space(span)
            .into_iter()
            .enumerate()
            .map(|(i, (start_hash, end_hash))| TabletInfo {
                table: TableId(1),
                start_hash,
                end_hash,
                master: ServerId(1 + i as u64 % holders),
            })
            .collect();
        ClusterMap {
            version: 5,
            replicas: 1,
            servers: (1..=servers).map(|i| server(i, ServerState::Up)).collect(),
            tables: vec![TableInfo { id: TableId(1), name: "kv".into(), chunks: false, stream: None }],
            tablets,
            ..ClusterMap::default()
        }
    }

    /// Usage as if every tablet of table 1 held `per_tablet` bytes.
    fn usage(map: &ClusterMap, per_tablet: u64) -> BTreeMap<ServerId, ServerUsage> {
        let mut u: BTreeMap<ServerId, ServerUsage> =
            map.servers.iter().map(|s| (s.id, ServerUsage::default())).collect();
        for t in &map.tablets {
            let e = u.get_mut(&t.master).unwrap();
            e.bytes += per_tablet;
            let x = e.tables.entry(t.table).or_default();
            x.0 += per_tablet / 100;
            x.1 += per_tablet;
        }
        u
    }

    /// Applies `plan` to `map` as the coordinator would, checking each
    /// step is one the coordinator takes.
    fn run(map: &mut ClusterMap, plan: &Plan) {
        for s in &plan.steps {
            match s {
                Step::Split { table, at, master, .. } => {
                    let i = map
                        .tablets
                        .iter()
                        .position(|t| t.table == *table && t.start_hash < *at && *at <= t.end_hash)
                        .expect("a tablet to split");
                    assert_eq!(map.tablets[i].master, *master);
                    let upper = TabletInfo { start_hash: *at, ..map.tablets[i].clone() };
                    map.tablets[i].end_hash = at - 1;
                    map.tablets.push(upper);
                }
                Step::Move { table, start_hash, end_hash, from, to, .. } => {
                    let t = map
                        .tablets
                        .iter_mut()
                        .find(|t| t.table == *table && t.start_hash == *start_hash)
                        .expect("a tablet to move");
                    assert_eq!((t.end_hash, t.master), (*end_hash, *from));
                    assert_ne!(from, to);
                    t.master = *to;
                }
                Step::Merge { table, at, master, .. } => {
                    let upper = map
                        .tablets
                        .iter()
                        .position(|t| t.table == *table && t.start_hash == *at)
                        .expect("a tablet starting at the merge point");
                    let upper = map.tablets.remove(upper);
                    let lower = map
                        .tablets
                        .iter_mut()
                        .find(|t| t.table == *table && t.end_hash.checked_add(1) == Some(*at))
                        .expect("a tablet ending before the merge point");
                    assert_eq!((lower.master, upper.master), (*master, *master));
                    lower.end_hash = upper.end_hash;
                }
            }
        }
    }

    #[test]
    fn plan_after_a_server_joins_splits_and_evens_the_memory() {
        // Three servers with one big tablet each, and a fourth, empty.
        let mut map = cluster(4, 3, 3);
        let u = usage(&map, 90 << 20);
        let plan = plan(&map, &u, &Options::default()).unwrap();
        assert!(plan.steps.iter().any(|s| matches!(s, Step::Split { .. })), "{plan:?}");
        assert_eq!(Plan::spread(&plan.before), 90 << 20);
        let mean = (270u64 << 20) / 4;
        assert!(Plan::spread(&plan.after) <= mean / 10, "{:?}", plan.after);
        run(&mut map, &plan);
        assert!(map.tablets_of(ServerId(4)).count() > 0);
        assert_eq!(plan.after.iter().map(|l| l.bytes).sum::<u64>(), 270 << 20, "moves keep the total");
        // No byte moves twice: what moves is what the new server ends with.
        let moved: u64 = plan.steps.iter().map(|s| if let Step::Move { bytes, .. } = s { *bytes } else { 0 }).sum();
        assert_eq!(moved, plan.after.iter().find(|l| l.server == ServerId(4)).unwrap().bytes);
        assert_eq!(plan.moves(), 3, "{plan:?}");
    }

    #[test]
    fn random_clusters_get_valid_plans_that_never_widen_the_spread() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let servers = 2 + next() % 6;
            let mut map = cluster(servers, 1 + next() % servers, 1 + (next() % 12) as u32);
            let mut u = BTreeMap::new();
            for s in &map.servers {
                u.insert(s.id, ServerUsage::default());
            }
            for t in &map.tablets {
                let bytes = next() % (64 << 20);
                let e = u.get_mut(&t.master).unwrap();
                e.bytes += bytes;
                let x = e.tables.entry(t.table).or_default();
                x.0 += bytes / 1000;
                x.1 += bytes;
                let ops = if next() % 3 == 0 { next() % 5000 } else { 0 };
                e.ops += ops;
                *e.table_ops.entry(t.table).or_default() += ops;
            }
            let drain = (next() % 4 == 0).then(|| ServerId(1 + next() % servers));
            let opts = Options { drain, ..Options::default() };
            let plan = plan(&map, &u, &opts).unwrap();
            assert!(plan.steps.len() <= MAX_STEPS);
            let sum = |l: &[Load]| l.iter().map(|x| x.bytes).sum::<u64>();
            assert_eq!(sum(&plan.before), sum(&plan.after));
            let ops = |l: &[Load]| l.iter().map(|x| x.ops).sum::<u64>();
            assert!(ops(&plan.before).abs_diff(ops(&plan.after)) <= 2 * MAX_STEPS as u64, "rounding only");
            run(&mut map, &plan);
            match drain {
                Some(d) => assert_eq!(map.tablets_of(d).count(), 0),
                // Gathering small tablets may widen a spread below MIN_GAP,
                // and moving load one below the memory tolerance.
                None => {
                    let mean = sum(&plan.before) / servers;
                    let bound = Plan::spread(&plan.before).max(MIN_GAP).max(mean / 20);
                    assert!(Plan::spread(&plan.after) <= bound, "{plan:?}");
                }
            }
        }
    }

    #[test]
    fn small_pieces_of_a_table_are_gathered_and_merged_back() {
        // Table 1: four big tablets, one per server. Table 2: the pieces a
        // recovery cut one small tablet into, dealt over the servers.
        let mut map = cluster(4, 4, 4);
        map.tables.push(TableInfo { id: TableId(2), name: "small".into(), chunks: false, stream: None });
        for (i, (start_hash, end_hash)) in crate::split_hash_space(8).into_iter().enumerate() {
            map.tablets.push(TabletInfo {
                table: TableId(2),
                start_hash,
                end_hash,
                master: ServerId(1 + i as u64 % 4),
            });
        }
        let mut u = usage(&map, 0);
        for s in map.servers.iter() {
            let e = u.get_mut(&s.id).unwrap();
            e.bytes = (64 << 20) + (20 << 10);
            e.tables.insert(TableId(1), (1000, 64 << 20));
            e.tables.insert(TableId(2), (20, 20 << 10));
        }
        let plan = plan(&map, &u, &Options::default()).unwrap();
        // Each piece not on the server that gathers them moves once.
        assert_eq!((plan.moves(), plan.merges()), (6, 7), "{plan:?}");
        assert!(Plan::spread(&plan.after) <= 80 << 10, "{:?}", plan.after);
        run(&mut map, &plan);
        let small: Vec<&TabletInfo> = map.tablets.iter().filter(|t| t.table == TableId(2)).collect();
        assert_eq!(small.len(), 1, "{small:?}");
        assert_eq!((small[0].start_hash, small[0].end_hash), (0, u64::MAX));
        assert_eq!(map.tablets.iter().filter(|t| t.table == TableId(1)).count(), 4, "big tablets stay");
        // Nothing left to do.
        let u2 = usage(&map, 64 << 20);
        let again = plan_for(&map, &u2);
        assert_eq!(again.merges(), 0, "{again:?}");
    }

    fn plan_for(map: &ClusterMap, u: &BTreeMap<ServerId, ServerUsage>) -> Plan {
        plan(map, u, &Options::default()).unwrap()
    }

    #[test]
    fn plan_moves_load_off_a_hot_server_and_cold_data_back_keeping_memory_even() {
        // One tablet per server, 30 MiB each; all traffic on server 1's.
        let mut map = cluster(3, 3, 3);
        let mut u = usage(&map, 30 << 20);
        let one = u.get_mut(&ServerId(1)).unwrap();
        one.ops = 30_000;
        one.table_ops.insert(TableId(1), 30_000);
        let plan = plan(&map, &u, &Options::default()).unwrap();
        assert_eq!(Plan::ops_spread(&plan.before), 30_000);
        assert!(Plan::ops_spread(&plan.after) <= MIN_OPS, "{plan:?}");
        assert!(Plan::spread(&plan.after) <= (30 << 20) / 20, "memory stays even: {plan:?}");
        // Hot parts go out, cold parts come back: two of each.
        assert_eq!(plan.moves(), 4, "{plan:?}");
        let sum = |l: &[Load]| (l.iter().map(|x| x.bytes).sum::<u64>(), l.iter().map(|x| x.ops).sum::<u64>());
        assert_eq!(sum(&plan.before), sum(&plan.after));
        run(&mut map, &plan);
        let out_of_one = plan.steps.iter().filter(|s| matches!(s, Step::Move { from: ServerId(1), .. })).count();
        assert_eq!(out_of_one, 2, "two hot parts leave server 1: {plan:?}");
        // Each of the other two masters a part of the hot tablet.
        let hot_end = crate::split_hash_space(3)[0].1;
        for i in 2..=3 {
            assert!(map.tablets_of(ServerId(i)).any(|t| t.start_hash <= hot_end), "server {i}: {map:?}");
        }
        // Planning again from the figures the plan expects: nothing to do.
        let mut u2 = usage(&map, 0);
        for l in &plan.after {
            let e = u2.get_mut(&l.server).unwrap();
            (e.bytes, e.ops) = (l.bytes, l.ops);
            e.tables.insert(TableId(1), (l.bytes / 100, l.bytes));
            e.table_ops.insert(TableId(1), l.ops);
        }
        let again = super::plan(&map, &u2, &Options::default()).unwrap();
        assert_eq!(again.moves(), 0, "{again:?}");
    }

    #[test]
    fn load_moves_never_break_the_memory_balance_when_nothing_cold_can_return() {
        // Two servers, one tablet each, even memory; server 1 is hot but
        // server 2 has nothing cold to give back except its only tablet.
        let map = cluster(2, 2, 2);
        let mut u = usage(&map, 30 << 20);
        let one = u.get_mut(&ServerId(1)).unwrap();
        one.ops = 10_000;
        one.table_ops.insert(TableId(1), 10_000);
        let plan = plan(&map, &u, &Options::default()).unwrap();
        assert!(Plan::spread(&plan.after) <= (30 << 20) / 20, "{plan:?}");
        assert!(Plan::ops_spread(&plan.after) < 10_000, "{plan:?}");
    }

    #[test]
    fn small_tablets_do_not_move_for_load_and_small_differences_move_nothing() {
        // A hot table of 100 KiB per tablet: gathering would undo a split
        // for load. (Gathering itself moves small runs, load or not.)
        let map = cluster(3, 3, 3);
        let mut u = usage(&map, 100 << 10);
        let one = u.get_mut(&ServerId(1)).unwrap();
        (one.ops, one.table_ops) = (30_000, [(TableId(1), 30_000)].into());
        let plan = plan(&map, &u, &Options::default()).unwrap();
        assert!(!plan.steps.iter().any(|s| matches!(s, Step::Split { .. })), "{plan:?}");
        let gathered = super::plan(&map, &u, &Options { gather_only: true, ..Options::default() }).unwrap();
        assert_eq!(plan.steps, gathered.steps, "only gathering and merging");
        // Below MIN_OPS nothing moves, however big the tablets.
        let mut u = usage(&map, 30 << 20);
        let one = u.get_mut(&ServerId(1)).unwrap();
        (one.ops, one.table_ops) = (MIN_OPS, [(TableId(1), MIN_OPS)].into());
        assert!(super::plan(&map, &u, &Options::default()).unwrap().steps.is_empty());
    }

    #[test]
    fn gather_only_plans_merge_back_pieces_and_balance_nothing() {
        // Server 1 holds everything, as pieces: gathered and merged, not
        // spread over server 2.
        let map = cluster(2, 1, 8);
        let plan = plan(&map, &usage(&map, 10 << 20), &Options { gather_only: true, ..Options::default() }).unwrap();
        assert_eq!((plan.moves(), plan.merges()), (0, 7), "{plan:?}");
    }

    #[test]
    fn plan_of_a_balanced_cluster_is_empty() {
        let map = cluster(3, 3, 6);
        let plan = plan(&map, &usage(&map, 10 << 20), &Options::default()).unwrap();
        assert!(plan.steps.is_empty(), "{plan:?}");
        assert_eq!(plan.before, plan.after);
    }

    #[test]
    fn plan_moves_whole_tablets_when_they_fit() {
        // Server 1 holds four tablets, server 2 none: two move, none splits.
        let map = cluster(2, 1, 4);
        let plan = plan(&map, &usage(&map, 10 << 20), &Options::default()).unwrap();
        assert_eq!(plan.moves(), 2, "{plan:?}");
        // No split; what stays adjacent on one server is merged.
        assert_eq!(plan.steps.len(), 2 + plan.merges());
        assert!(plan.merges() >= 1, "{plan:?}");
        assert_eq!(Plan::spread(&plan.after), 0);
    }

    #[test]
    fn plan_keeps_to_the_table_asked_for_and_off_excluded_servers() {
        let mut map = cluster(3, 1, 4);
        map.tables.push(TableInfo { id: TableId(2), name: "other".into(), chunks: false, stream: None });
        let opts = Options { table: Some(TableId(2)), ..Options::default() };
        let plan = plan(&map, &usage(&map, 10 << 20), &opts).unwrap();
        assert!(plan.steps.is_empty(), "table 2 has no tablets: {plan:?}");
        let opts = Options { excluded: [ServerId(3)].into(), ..Options::default() };
        let plan = super::plan(&map, &usage(&map, 10 << 20), &opts).unwrap();
        assert!(plan.moves() > 0);
        assert!(plan.steps.iter().all(|s| !matches!(s, Step::Move { to: ServerId(3), .. })), "{plan:?}");
    }

    #[test]
    fn drain_moves_every_tablet_to_the_least_loaded_others() {
        let mut map = cluster(3, 3, 6);
        let u = usage(&map, 10 << 20);
        let opts = Options { drain: Some(ServerId(2)), ..Options::default() };
        let plan = plan(&map, &u, &opts).unwrap();
        assert_eq!(plan.moves(), 2);
        run(&mut map, &plan);
        assert_eq!(map.tablets_of(ServerId(2)).count(), 0);
        assert_eq!(map.tablets_of(ServerId(1)).count(), 3);
        assert_eq!(map.tablets_of(ServerId(3)).count(), 3);
    }

    #[test]
    fn drain_splits_a_big_tablet_so_the_others_stay_even() {
        // Server 3's one tablet weighs as much as the others together.
        let mut map = cluster(3, 3, 3);
        let mut u = usage(&map, 10 << 20);
        let three = u.get_mut(&ServerId(3)).unwrap();
        three.bytes = 20 << 20;
        three.tables.get_mut(&TableId(1)).unwrap().1 = 20 << 20;
        let opts = Options { drain: Some(ServerId(3)), ..Options::default() };
        let plan = plan(&map, &u, &opts).unwrap();
        run(&mut map, &plan);
        assert_eq!(map.tablets_of(ServerId(3)).count(), 0);
        let after: BTreeMap<ServerId, u64> = plan.after.iter().map(|l| (l.server, l.bytes)).collect();
        assert_eq!(
            (after[&ServerId(1)], after[&ServerId(2)], after[&ServerId(3)]),
            (20 << 20, 20 << 20, 0),
            "{plan:?}"
        );
    }

    #[test]
    fn drain_is_refused_when_impossible() {
        let map = cluster(1, 1, 2);
        let opts = Options { drain: Some(ServerId(1)), ..Options::default() };
        let e = plan(&map, &usage(&map, 1 << 20), &opts).unwrap_err();
        assert!(e.contains("only server up"), "{e}");

        let mut map = cluster(2, 2, 2);
        map.tables.push(TableInfo { id: TableId(2), name: "blobs".into(), chunks: true, stream: None });
        map.tablets.push(TabletInfo { table: TableId(2), start_hash: 0, end_hash: u64::MAX, master: ServerId(2) });
        let opts = Options { drain: Some(ServerId(2)), ..Options::default() };
        let e = plan(&map, &usage(&map, 1 << 20), &opts).unwrap_err();
        assert!(e.contains("cannot move") && e.contains("chunk table 'blobs'"), "{e}");

        let e =
            plan(&map, &usage(&map, 1 << 20), &Options { drain: Some(ServerId(9)), ..Options::default() }).unwrap_err();
        assert!(e.contains("no server 9"), "{e}");
    }

    #[test]
    fn plan_is_refused_during_a_migration_or_without_figures() {
        let mut map = cluster(2, 1, 2);
        let mut u = usage(&map, 1 << 20);
        u.remove(&ServerId(2));
        assert!(plan(&map, &u, &Options::default()).unwrap_err().contains("no figures from server 2"));
        map.migrations.push(Migration {
            id: 7,
            table: TableId(1),
            start_hash: 0,
            end_hash: u64::MAX / 2,
            from: ServerId(1),
            to: ServerId(2),
            started_unix_ms: 0,
        });
        assert!(plan(&map, &usage(&map, 1 << 20), &Options::default()).unwrap_err().contains("migration 7"));
    }

    #[test]
    fn slot_hashed_tables_are_split_at_slot_boundaries() {
        let mut map = cluster(2, 1, 1);
        let slotted = shoal_common::slots::table_id(1, true);
        map.tables[0].id = slotted;
        map.tablets[0].table = slotted;
        let plan = plan(&map, &usage(&map, 64 << 20), &Options::default()).unwrap();
        let Some(Step::Split { at, .. }) = plan.steps.first() else { panic!("{plan:?}") };
        assert_eq!(at & SLOT_LOW, 0, "{at:#x} is a slot's first hash");
        assert!(Plan::spread(&plan.after) < Plan::spread(&plan.before));
    }
}
