//! What the simulated-group tests share: a register history and its
//! linearizability check.

use std::collections::HashSet;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Set(u64),
    Incr,
}

/// One client operation of the history.
#[derive(Clone, Debug)]
pub struct Event {
    pub read: bool,
    pub op: Op,
    pub call: u64,
    /// When it returned and what it answered (a read's value, a write's
    /// value after it); `None`: never answered.
    pub ret: Option<(u64, u64)>,
}

/// Wing-Gong search (Lowe's memoised variant, as Porcupine runs it) for a
/// linearization of a register history: initial value 0, a write's answer
/// is the value after it. Reads that never returned are dropped; writes
/// that never returned may be placed anywhere after their call or left
/// out.
///
/// Two sound reductions and a search order keep it fast on the
/// simulator's histories:
/// * an eligible read that matches the current value is placed at once,
///   without branching (placing it earlier never hurts: it changes no
///   state and only relaxes the real-time constraints of the others);
/// * a pending `Set(v)` whose value no completed operation observed
///   (`v` to `v + 999`: the simulator's sets are multiples of 1000 and
///   fewer than 1000 increments run) is dropped: in any linearization
///   only pending operations can sit between it and the next set, so
///   leaving it (and them) out changes no completed answer.
pub fn linearizable(history: &[Event]) -> bool {
    let observed: Vec<u64> = history.iter().filter_map(|e| e.ret.map(|(_, v)| v)).collect();
    let ops: Vec<&Event> = history
        .iter()
        .filter(|e| e.ret.is_some() || !e.read)
        .filter(|e| match (e.ret, e.op) {
            (None, Op::Set(v)) => observed.iter().any(|&o| (v..v + 1000).contains(&o)),
            _ => true,
        })
        .collect();
    assert!(ops.len() <= 128, "history too long for the checker");
    let done_mask: u128 = ops.iter().enumerate().filter(|(_, e)| e.ret.is_some()).fold(0, |m, (i, _)| m | 1 << i);
    let mut seen: HashSet<(u128, u64)> = HashSet::new();
    fn search(
        ops: &[&Event],
        order: &[usize],
        done_mask: u128,
        mut mask: u128,
        state: u64,
        seen: &mut HashSet<(u128, u64)>,
    ) -> bool {
        loop {
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
            let eligible = |i: usize, e: &Event| mask & (1 << i) == 0 && e.call <= horizon;
            let read =
                ops.iter().enumerate().find(|&(i, e)| eligible(i, e) && e.read && e.ret.map(|(_, v)| v) == Some(state));
            match read {
                Some((i, _)) => mask |= 1 << i,
                None => break,
            }
        }
        let horizon = ops
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) == 0)
            .filter_map(|(_, e)| e.ret.map(|(t, _)| t))
            .min()
            .unwrap_or(u64::MAX);
        for &i in order {
            let e = ops[i];
            if mask & (1 << i) != 0 || e.call > horizon || e.read {
                continue;
            }
            let after = match e.op {
                Op::Set(v) => v,
                Op::Incr => state + 1,
            };
            if e.ret.is_some_and(|(_, v)| v != after) {
                continue;
            }
            if search(ops, order, done_mask, mask | 1 << i, after, seen) {
                return true;
            }
        }
        false
    }
    // Writes are tried soonest-needed first: by the earliest return of an
    // operation that answered the value the write produces (itself
    // included). Only the order of the search changes, not its result.
    let produces = |e: &Event| match (e.op, e.ret) {
        (Op::Set(v), _) => Some(v),
        (Op::Incr, Some((_, v))) => Some(v),
        (Op::Incr, None) => None,
    };
    let needed = |e: &Event| {
        produces(e)
            .and_then(|v| ops.iter().filter_map(|o| o.ret).filter(|&(_, r)| r == v).map(|(t, _)| t).min())
            .unwrap_or(u64::MAX)
    };
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (needed(ops[i]), ops[i].call));
    search(&ops, &order, done_mask, 0, 0, &mut seen)
}
