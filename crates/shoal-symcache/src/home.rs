//! The home master's rule for a hot key's writes in one epoch.
//!
//! The home master owns the key: its log and its backups are the truth,
//! and a write is acknowledged only once the home has applied it and it is
//! durable, whichever member ran the write's protocol. Members choose
//! their writes' timestamps themselves (All-Peers), so two writers may
//! reach the home out of timestamp order; the home applies a write only
//! if its timestamp is higher than every timestamp it has applied for the
//! key in this epoch, and refuses it otherwise, telling the writer what it
//! has applied so that the writer retries with a higher timestamp. So the
//! home's log holds a key's writes in timestamp order, which is the order
//! in which members validate their copies, and no write is ever dropped
//! silently: each is applied or refused (and retried).
//!
//! Read-modify-writes (INCR, APPEND, a version check) are computed by the
//! home when it applies them, from the value it holds: the one of the
//! highest timestamp applied so far, which is the write just before it in
//! timestamp order.
//!
//! A new epoch starts every hot key over from [`Ts::ZERO`] (the caller
//! makes a new `HomeKey`); the caller refuses writes carrying another
//! epoch.

use crate::{Consistency, NodeId, Ts};

/// What the home decides for one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Apply the write at this timestamp (then answer the writer with the
    /// value after it, once durable).
    Apply(Ts),
    /// Do not apply it: a write with this higher (or equal) timestamp has
    /// been applied. The writer retries above it.
    Refuse { applied: Ts },
}

/// One hot key at its home master, in one epoch.
#[derive(Clone, Debug)]
pub struct HomeKey {
    home: NodeId,
    applied: Ts,
}

impl HomeKey {
    /// A key that became hot at the start of an epoch on home master `home`.
    pub fn new(home: NodeId) -> HomeKey {
        HomeKey { home, applied: Ts::ZERO }
    }

    /// The highest timestamp applied in this epoch ([`Ts::ZERO`] if none):
    /// the timestamp of the value the home holds, sent with it when a
    /// member's copy is filled.
    pub fn applied(&self) -> Ts {
        self.applied
    }

    /// A write arrives. Strong: `ts` is the writer's timestamp (it has
    /// invalidated every member at `ts`). Eventual: `ts` is `None` and the
    /// home stamps the write itself, always applying it.
    pub fn decide(&mut self, consistency: Consistency, ts: Option<Ts>) -> Decision {
        let ts = match (consistency, ts) {
            (Consistency::Strong, Some(ts)) => ts,
            // Eventual (or a strong write without a timestamp, which the
            // caller never sends): the home orders it after everything.
            _ => self.applied.next(self.home),
        };
        if ts <= self.applied {
            return Decision::Refuse { applied: self.applied };
        }
        self.applied = ts;
        Decision::Apply(ts)
    }

    /// A write of the key that did not come through the protocol (the
    /// caller refuses those while the key is hot in strong mode; in
    /// eventual mode it is stamped after everything applied, as
    /// [`HomeKey::decide`] with no timestamp).
    pub fn stamp(&mut self) -> Ts {
        self.applied = self.applied.next(self.home);
        self.applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(version: u64, node: u32) -> Ts {
        Ts { version, node: NodeId(node) }
    }

    #[test]
    fn decide_applies_in_timestamp_order_only() {
        let mut k = HomeKey::new(NodeId(1));
        assert_eq!(k.decide(Consistency::Strong, Some(ts(1, 3))), Decision::Apply(ts(1, 3)));
        assert_eq!(k.decide(Consistency::Strong, Some(ts(1, 2))), Decision::Refuse { applied: ts(1, 3) });
        assert_eq!(k.decide(Consistency::Strong, Some(ts(1, 3))), Decision::Refuse { applied: ts(1, 3) });
        assert_eq!(k.decide(Consistency::Strong, Some(ts(2, 2))), Decision::Apply(ts(2, 2)));
        assert_eq!(k.applied(), ts(2, 2));
    }

    #[test]
    fn decide_eventual_stamps_after_everything() {
        let mut k = HomeKey::new(NodeId(4));
        assert_eq!(k.decide(Consistency::Eventual, None), Decision::Apply(ts(1, 4)));
        assert_eq!(k.decide(Consistency::Strong, Some(ts(5, 2))), Decision::Apply(ts(5, 2)));
        assert_eq!(k.decide(Consistency::Eventual, None), Decision::Apply(ts(6, 4)));
        assert_eq!(k.stamp(), ts(7, 4));
    }
}
