//! One hot key at one member of its group, in one epoch: the All-Peers
//! protocol (Katsarakis Fig. 3.4 and Listing 3.1), with Shoal's change
//! that a write takes effect when its home master applies it (durably,
//! in timestamp order: [`crate::home`]).
//!
//! Every member of the group but the key's home holds a copy; the home
//! serves the key from its store and takes part only as a writer. Any
//! member (the home too) may run a write:
//!
//! * **Strong** (linearizable). The writer takes the timestamp after the
//!   highest it has seen (version + 1, its own id), invalidates its own
//!   copy, sends an invalidation to every other member holding a copy and
//!   collects their acknowledgements; then it asks the home to apply the
//!   write at that timestamp. Once the home has applied it, the writer
//!   sends the value with its timestamp to every copy (an update), and
//!   answers its client. If the home refuses (it has applied a higher
//!   timestamp meanwhile), the writer starts over above it.
//!   A member that receives an invalidation acknowledges it, and if its
//!   timestamp is higher than the highest it has seen, records it and
//!   drops its copy's value. A copy becomes valid again only from an
//!   update whose timestamp is at least the highest seen.
//! * **Eventual.** The writer asks the home to apply the write; the home
//!   stamps it; the writer sends the update to every copy, which takes it
//!   if its timestamp is higher than the one it holds.
//!
//! The states of Fig. 3.4 map onto this type as: V = valid (a value held),
//! I^U = invalid (no value), W^A = a write of this member waiting for
//! acknowledgements; the R variants (reads buffered) are the waiting reads.
//! A member runs one write of the key at a time and queues the others
//! (Fig. 3.4's "buffer the write").
//!
//! Why a strong read never returns a stale or a non-durable value: a copy
//! holds a value only from an update, sent once the home applied the write
//! (durably); a write is applied only after every copy acknowledged its
//! invalidation, and a copy never takes an update whose timestamp is below
//! the highest invalidation it has seen. So once a write is applied, no
//! copy still answers with a value from before it, and a value is served
//! only once it is applied. Messages may be lost, repeated or reordered:
//! that can stall a write or leave a copy invalid (reads then go to the
//! home), never make a copy serve a stale value. A new epoch ends both.
//!
//! Network and time are the caller's: [`CachedKey`] returns [`Action`]s.

use std::collections::VecDeque;

use crate::{Consistency, NodeId, Ts};

/// A client read waiting at this member (the caller's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadId(pub u64);

/// A client write run by this member (the caller's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriteId(pub u64);

/// What the caller must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<V, O> {
    /// Answer read `read` with `value`.
    ReadHit { read: ReadId, value: V },
    /// Send an invalidation of the key at `ts` to member `to`.
    SendInv { to: NodeId, ts: Ts },
    /// Acknowledge to `to` its invalidation at `ts`.
    SendAck { to: NodeId, ts: Ts },
    /// Send the value of the write at `ts` to member `to`.
    SendUpdate { to: NodeId, ts: Ts, value: V },
    /// Ask the key's home master to apply write `write`'s operation (at
    /// `ts` in strong mode; eventual: the home stamps it). The answer comes
    /// back through [`CachedKey::persisted`].
    Persist { write: WriteId, ts: Option<Ts>, op: O },
    /// Write `write` is done: the home applied it (durably). Answer its
    /// client with what the home answered.
    WriteDone { write: WriteId },
}

/// The home's answer to [`Action::Persist`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persisted<V> {
    /// Applied at `ts`; `value` is the key's value after it.
    Applied { ts: Ts, value: V },
    /// Refused: the home has applied `applied`, not below the write's
    /// timestamp (strong mode only).
    Refused { applied: Ts },
}

#[derive(Clone, Debug)]
enum Phase {
    /// Waiting for these members' acknowledgements.
    Invalidating(Vec<NodeId>),
    /// Waiting for the home.
    Persisting,
}

#[derive(Clone, Debug)]
struct Running<O> {
    id: WriteId,
    op: O,
    ts: Ts,
    phase: Phase,
}

/// One hot key at one member, in one epoch. `V`: the key's value as the
/// caller caches it (absence included); `O`: a write's operation.
#[derive(Clone, Debug)]
pub struct CachedKey<V, O> {
    me: NodeId,
    /// Members holding a copy: every member of the group but the home.
    copies: Vec<NodeId>,
    consistency: Consistency,
    /// The highest timestamp seen (strong) or held (eventual).
    ts: Ts,
    /// The copy's value, the value of `ts`; `None`: invalid.
    value: Option<V>,
    reads: Vec<ReadId>,
    running: Option<Running<O>>,
    queued: VecDeque<(WriteId, O)>,
}

impl<V: Clone, O: Clone> CachedKey<V, O> {
    /// The key at member `me`, held by `copies` (the group's members but
    /// the key's home; `me` may be the home, then it holds no copy). The
    /// copy starts invalid until the home fills it with an update.
    pub fn new(me: NodeId, copies: Vec<NodeId>, consistency: Consistency) -> CachedKey<V, O> {
        CachedKey {
            me,
            copies,
            consistency,
            ts: Ts::ZERO,
            value: None,
            reads: Vec::new(),
            running: None,
            queued: VecDeque::new(),
        }
    }

    /// The copy's value if it is valid.
    pub fn value(&self) -> Option<&V> {
        self.value.as_ref()
    }

    /// The highest timestamp seen.
    pub fn ts(&self) -> Ts {
        self.ts
    }

    /// Reads waiting for the copy to become valid.
    pub fn waiting_reads(&self) -> usize {
        self.reads.len()
    }

    /// Writes of this member not done yet (running and queued).
    pub fn pending_writes(&self) -> usize {
        self.running.iter().count() + self.queued.len()
    }

    /// A client reads the key here. Answered at once if the copy is
    /// valid; otherwise the read waits for an update (the caller bounds
    /// the wait with [`CachedKey::cancel_read`] and then reads at the home).
    pub fn read(&mut self, read: ReadId, out: &mut Vec<Action<V, O>>) {
        match &self.value {
            Some(value) => out.push(Action::ReadHit { read, value: value.clone() }),
            None => self.reads.push(read),
        }
    }

    /// Gives up waiting read `read`: true if it was still waiting (the
    /// caller now sends it to the home), false if it has been answered.
    pub fn cancel_read(&mut self, read: ReadId) -> bool {
        let before = self.reads.len();
        self.reads.retain(|r| *r != read);
        self.reads.len() != before
    }

    /// A client writes the key through this member.
    pub fn write(&mut self, write: WriteId, op: O, out: &mut Vec<Action<V, O>>) {
        if self.running.is_some() {
            self.queued.push_back((write, op));
        } else {
            self.start(write, op, out);
        }
    }

    fn start(&mut self, id: WriteId, op: O, out: &mut Vec<Action<V, O>>) {
        if self.consistency == Consistency::Eventual {
            out.push(Action::Persist { write: id, ts: None, op: op.clone() });
            self.running = Some(Running { id, op, ts: Ts::ZERO, phase: Phase::Persisting });
            return;
        }
        let ts = self.ts.next(self.me);
        self.ts = ts;
        self.value = None;
        let missing: Vec<NodeId> = self.copies.iter().copied().filter(|&n| n != self.me).collect();
        for &to in &missing {
            out.push(Action::SendInv { to, ts });
        }
        let phase = if missing.is_empty() {
            out.push(Action::Persist { write: id, ts: Some(ts), op: op.clone() });
            Phase::Persisting
        } else {
            Phase::Invalidating(missing)
        };
        self.running = Some(Running { id, op, ts, phase });
    }

    /// An invalidation at `ts` from member `from`. Always acknowledged
    /// (a writer below a newer one must still reach the home to be
    /// refused and retry); taken if above every timestamp seen.
    pub fn inv(&mut self, from: NodeId, ts: Ts, out: &mut Vec<Action<V, O>>) {
        if ts > self.ts {
            self.ts = ts;
            self.value = None;
        }
        out.push(Action::SendAck { to: from, ts });
    }

    /// An acknowledgement of this member's invalidation at `ts` from `from`.
    pub fn ack(&mut self, from: NodeId, ts: Ts, out: &mut Vec<Action<V, O>>) {
        let Some(run) = &mut self.running else { return };
        let Phase::Invalidating(missing) = &mut run.phase else { return };
        if run.ts != ts {
            return;
        }
        missing.retain(|&n| n != from);
        if missing.is_empty() {
            run.phase = Phase::Persisting;
            out.push(Action::Persist { write: run.id, ts: Some(ts), op: run.op.clone() });
        }
    }

    /// The home's answer to this member's [`Action::Persist`] for `write`.
    pub fn persisted(&mut self, write: WriteId, answer: Persisted<V>, out: &mut Vec<Action<V, O>>) {
        match &self.running {
            Some(run) if run.id == write && matches!(run.phase, Phase::Persisting) => {}
            _ => return,
        }
        let run = self.running.take().expect("checked above");
        match answer {
            Persisted::Applied { ts, value } => {
                for &to in self.copies.iter().filter(|&&n| n != self.me) {
                    out.push(Action::SendUpdate { to, ts, value: value.clone() });
                }
                if self.copies.contains(&self.me) {
                    self.update(ts, value, out);
                }
                out.push(Action::WriteDone { write });
            }
            Persisted::Refused { applied } => {
                self.ts = self.ts.max(applied);
                self.start(run.id, run.op, out);
                return;
            }
        }
        if let Some((id, op)) = self.queued.pop_front() {
            self.start(id, op, out);
        }
    }

    /// The value of the write at `ts` (from its writer once the home
    /// applied it, or from the home filling the copy). Taken if `ts` is
    /// at least the highest timestamp seen (strong: an update below an
    /// invalidation seen is stale); then waiting reads are answered.
    pub fn update(&mut self, ts: Ts, value: V, out: &mut Vec<Action<V, O>>) {
        if !self.copies.contains(&self.me) {
            return;
        }
        if ts < self.ts || (ts == self.ts && self.value.is_some()) {
            return;
        }
        // Our own write in flight below `ts` will be refused by the home
        // and start over; until then the newer value is the key's value.
        self.ts = ts;
        for read in self.reads.drain(..) {
            out.push(Action::ReadHit { read, value: value.clone() });
        }
        self.value = Some(value);
    }

    /// Drops the copy's value, keeping the highest timestamp seen (so an
    /// older update still cannot make it valid): what a member does when
    /// its lease on the home's keys ran out and it may have missed
    /// invalidations.
    pub fn drop_value(&mut self) {
        self.value = None;
    }

    /// Sends the invalidations of the running write again to the members
    /// that have not acknowledged them (after a timeout: a message lost).
    pub fn retransmit(&self, out: &mut Vec<Action<V, O>>) {
        if let Some(Running { ts, phase: Phase::Invalidating(missing), .. }) = &self.running {
            for &to in missing {
                out.push(Action::SendInv { to, ts: *ts });
            }
        }
    }

    /// Ends the key's epoch here: the writes not done (the running one
    /// first, and whether the home may already have applied it) and the
    /// reads still waiting, for the caller to finish another way.
    pub fn end(self) -> (Vec<(WriteId, O, bool)>, Vec<ReadId>) {
        let mut writes = Vec::new();
        if let Some(run) = self.running {
            writes.push((run.id, run.op, matches!(run.phase, Phase::Persisting)));
        }
        writes.extend(self.queued.into_iter().map(|(id, op)| (id, op, false)));
        (writes, self.reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Key = CachedKey<u64, u64>;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn ts(version: u64, node: u32) -> Ts {
        Ts { version, node: n(node) }
    }

    /// Member 2 of a group {1, 2, 3, 4} holding a copy of a key homed on 1.
    fn member(me: u32, c: Consistency) -> Key {
        CachedKey::new(n(me), vec![n(2), n(3), n(4)], c)
    }

    #[test]
    fn read_waits_until_filled() {
        let mut k = member(2, Consistency::Strong);
        let mut out = Vec::new();
        k.read(ReadId(1), &mut out);
        assert!(out.is_empty());
        assert_eq!(k.waiting_reads(), 1);
        k.update(Ts::ZERO, 7, &mut out);
        assert_eq!(out, vec![Action::ReadHit { read: ReadId(1), value: 7 }]);
        out.clear();
        k.read(ReadId(2), &mut out);
        assert_eq!(out, vec![Action::ReadHit { read: ReadId(2), value: 7 }]);
        assert!(!k.cancel_read(ReadId(2)));
    }

    #[test]
    fn write_strong_invalidates_then_persists_then_updates() {
        let mut k = member(2, Consistency::Strong);
        let mut out = Vec::new();
        k.update(Ts::ZERO, 7, &mut out);
        k.write(WriteId(1), 8, &mut out);
        assert_eq!(out, vec![Action::SendInv { to: n(3), ts: ts(1, 2) }, Action::SendInv { to: n(4), ts: ts(1, 2) }]);
        assert_eq!(k.value(), None, "the writer's own copy is invalid while it writes");
        out.clear();
        k.ack(n(3), ts(1, 2), &mut out);
        k.ack(n(3), ts(1, 2), &mut out);
        assert!(out.is_empty());
        k.ack(n(4), ts(1, 2), &mut out);
        assert_eq!(out, vec![Action::Persist { write: WriteId(1), ts: Some(ts(1, 2)), op: 8 }]);
        out.clear();
        k.persisted(WriteId(1), Persisted::Applied { ts: ts(1, 2), value: 8 }, &mut out);
        assert_eq!(
            out,
            vec![
                Action::SendUpdate { to: n(3), ts: ts(1, 2), value: 8 },
                Action::SendUpdate { to: n(4), ts: ts(1, 2), value: 8 },
                Action::WriteDone { write: WriteId(1) }
            ]
        );
        assert_eq!(k.value(), Some(&8));
    }

    #[test]
    fn inv_higher_drops_the_value_lower_keeps_it_both_acknowledged() {
        let mut k = member(3, Consistency::Strong);
        let mut out = Vec::new();
        k.update(ts(2, 4), 5, &mut out);
        k.inv(n(2), ts(1, 2), &mut out);
        assert_eq!(k.value(), Some(&5));
        k.inv(n(4), ts(3, 4), &mut out);
        assert_eq!(k.value(), None);
        assert_eq!(out, vec![Action::SendAck { to: n(2), ts: ts(1, 2) }, Action::SendAck { to: n(4), ts: ts(3, 4) }]);
        out.clear();
        k.update(ts(2, 4), 5, &mut out);
        assert_eq!(k.value(), None, "an update below an invalidation seen is stale");
        k.update(ts(3, 4), 6, &mut out);
        assert_eq!(k.value(), Some(&6));
    }

    #[test]
    fn persisted_refused_starts_over_above_the_applied() {
        let mut k = member(2, Consistency::Strong);
        let mut out = Vec::new();
        k.write(WriteId(1), 8, &mut out);
        k.ack(n(3), ts(1, 2), &mut out);
        k.ack(n(4), ts(1, 2), &mut out);
        out.clear();
        k.persisted(WriteId(1), Persisted::Refused { applied: ts(4, 3) }, &mut out);
        assert_eq!(out, vec![Action::SendInv { to: n(3), ts: ts(5, 2) }, Action::SendInv { to: n(4), ts: ts(5, 2) }]);
        assert_eq!(k.pending_writes(), 1);
    }

    #[test]
    fn write_queued_behind_the_running_one() {
        let mut k = member(2, Consistency::Strong);
        let mut out = Vec::new();
        k.write(WriteId(1), 8, &mut out);
        k.write(WriteId(2), 9, &mut out);
        assert_eq!(k.pending_writes(), 2);
        k.ack(n(3), ts(1, 2), &mut out);
        k.ack(n(4), ts(1, 2), &mut out);
        out.clear();
        k.persisted(WriteId(1), Persisted::Applied { ts: ts(1, 2), value: 8 }, &mut out);
        assert!(out.contains(&Action::WriteDone { write: WriteId(1) }));
        assert!(out.contains(&Action::SendInv { to: n(3), ts: ts(2, 2) }));
        let (writes, reads) = k.end();
        assert_eq!(writes, vec![(WriteId(2), 9, false)]);
        assert!(reads.is_empty());
    }

    #[test]
    fn write_at_the_home_invalidates_every_copy() {
        let mut k: Key = CachedKey::new(n(1), vec![n(2), n(3)], Consistency::Strong);
        let mut out = Vec::new();
        k.write(WriteId(1), 8, &mut out);
        assert_eq!(out, vec![Action::SendInv { to: n(2), ts: ts(1, 1) }, Action::SendInv { to: n(3), ts: ts(1, 1) }]);
        out.clear();
        k.retransmit(&mut out);
        assert_eq!(out.len(), 2);
        out.clear();
        k.update(ts(9, 2), 1, &mut out);
        assert_eq!(k.value(), None, "the home holds no copy");
    }

    #[test]
    fn write_eventual_persists_then_updates_higher_only() {
        let mut k = member(2, Consistency::Eventual);
        let mut out = Vec::new();
        k.write(WriteId(1), 8, &mut out);
        assert_eq!(out, vec![Action::Persist { write: WriteId(1), ts: None, op: 8 }]);
        out.clear();
        k.update(ts(3, 1), 9, &mut out);
        k.persisted(WriteId(1), Persisted::Applied { ts: ts(2, 1), value: 8 }, &mut out);
        assert_eq!(k.value(), Some(&9), "an older update does not overwrite a newer value");
        assert!(out.contains(&Action::SendUpdate { to: n(3), ts: ts(2, 1), value: 8 }));
    }
}
