//! The hot keys of epochs a home master has left but some member may
//! still serve from its cache: the barrier between epochs
//! (`docs/symmetric-caching.md`, "Changing epochs").
//!
//! Members install a new epoch (a round, or a new membership) at
//! different times, and installing one drops the member's cache. A write
//! that runs the protocol in the new epoch is safe on its own: its
//! invalidations carry the new epoch, a member still in an older one drops
//! them unacknowledged, so the write waits until that member has installed
//! the new epoch, and with it dropped its old cache. A write that does not
//! run the protocol is not: a key hot in the old epoch but cold in the new
//! one is written at its home like any key, while a member still in the
//! old epoch answers reads of it from its cache.
//!
//! So a home keeps, per epoch it left, that epoch's hot keys and the
//! members that have not yet confirmed leaving it: a member confirms with
//! the epoch it installed since (an INSTALLED frame), and a member the
//! cluster map shows down is gone (its lease was condemned and ran out
//! before the map said so: it serves nothing). Until every member of the
//! old epoch has confirmed, [`Retired::holds`] is true for its keys, and
//! the home holds writes of those keys (the ones not hot in its current
//! epoch) back.
//!
//! Epochs compare as [`EpochId`]s: by membership epoch (a map version;
//! a member's later group always has a higher one), then round. A member
//! that installed epoch `e` has left every epoch below `e`.

use std::collections::{BTreeSet, HashSet};
use std::hash::Hash;

use crate::group::EpochId;
use crate::NodeId;

#[derive(Clone, Debug)]
struct Left<K> {
    epoch: EpochId,
    keys: HashSet<K>,
    waiting: BTreeSet<NodeId>,
}

/// The epochs this home left that some member may still be in.
#[derive(Clone, Debug)]
pub struct Retired<K> {
    epochs: Vec<Left<K>>,
}

impl<K> Default for Retired<K> {
    fn default() -> Retired<K> {
        Retired { epochs: Vec::new() }
    }
}

impl<K: Hash + Eq> Retired<K> {
    pub fn new() -> Retired<K> {
        Retired::default()
    }

    /// This home left `epoch`, whose hot keys were `keys` and members
    /// `members` (itself among them or not: it is not waited for).
    /// `confirmed` lists members already known to be past it.
    pub fn retire(
        &mut self,
        me: NodeId,
        epoch: EpochId,
        members: &[NodeId],
        keys: impl IntoIterator<Item = K>,
        confirmed: &[(NodeId, EpochId)],
    ) {
        let waiting: BTreeSet<NodeId> = members
            .iter()
            .copied()
            .filter(|&m| m != me)
            .filter(|m| !confirmed.iter().any(|(c, at)| c == m && *at > epoch))
            .collect();
        let keys: HashSet<K> = keys.into_iter().collect();
        if waiting.is_empty() || keys.is_empty() {
            return;
        }
        self.epochs.push(Left { epoch, keys, waiting });
    }

    /// `member` has installed epoch `at`: it has left every epoch below.
    pub fn installed(&mut self, member: NodeId, at: EpochId) {
        for e in &mut self.epochs {
            if e.epoch < at {
                e.waiting.remove(&member);
            }
        }
        self.epochs.retain(|e| !e.waiting.is_empty());
    }

    /// `member` is down in the cluster map: it serves nothing any more.
    pub fn gone(&mut self, member: NodeId) {
        for e in &mut self.epochs {
            e.waiting.remove(&member);
        }
        self.epochs.retain(|e| !e.waiting.is_empty());
    }

    /// Whether some member may still serve `key` from the cache of an
    /// epoch this home left: a write of it that does not run the protocol
    /// must wait.
    pub fn holds(&self, key: &K) -> bool {
        self.epochs.iter().any(|e| e.keys.contains(key))
    }

    /// The members some epoch holding `key` still waits for.
    pub fn waiting_for(&self, key: &K) -> BTreeSet<NodeId> {
        self.epochs.iter().filter(|e| e.keys.contains(key)).flat_map(|e| e.waiting.iter().copied()).collect()
    }

    /// Members still awaited, over all epochs left (with repeats).
    pub fn waiting(&self) -> usize {
        self.epochs.iter().map(|e| e.waiting.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Epoch;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn e(membership: u64, round: u64) -> EpochId {
        EpochId { membership, round: Epoch(round) }
    }

    #[test]
    fn holds_until_every_other_member_installed_a_later_epoch() {
        let mut r = Retired::new();
        r.retire(n(1), e(5, 3), &[n(1), n(2), n(3)], ["a", "b"], &[]);
        assert!(r.holds(&"a") && r.holds(&"b") && !r.holds(&"c"));
        r.installed(n(2), e(5, 4));
        r.installed(n(3), e(5, 3));
        assert!(r.holds(&"a"), "member 3 only confirmed the epoch it is leaving");
        r.installed(n(3), e(6, 0));
        assert!(!r.holds(&"a"), "a later membership counts as leaving");
        assert_eq!(r.waiting(), 0);
    }

    #[test]
    fn waiting_for_names_the_members_of_the_epochs_holding_the_key() {
        let mut r = Retired::new();
        r.retire(n(1), e(5, 3), &[n(1), n(2), n(3)], ["a"], &[]);
        r.retire(n(1), e(5, 4), &[n(1), n(4)], ["a", "b"], &[]);
        assert_eq!(r.waiting_for(&"a"), [n(2), n(3), n(4)].into_iter().collect());
        assert_eq!(r.waiting_for(&"b"), [n(4)].into_iter().collect());
        r.installed(n(4), e(6, 0));
        assert!(r.waiting_for(&"b").is_empty());
        assert!(r.waiting_for(&"c").is_empty());
    }

    #[test]
    fn gone_members_are_not_waited_for() {
        let mut r = Retired::new();
        r.retire(n(1), e(5, 3), &[n(1), n(2)], ["a"], &[]);
        r.retire(n(1), e(5, 4), &[n(1), n(2)], ["b"], &[]);
        assert_eq!(r.waiting(), 2);
        r.gone(n(2));
        assert!(!r.holds(&"a") && !r.holds(&"b"));
    }

    #[test]
    fn retire_skips_members_already_past_and_empty_epochs() {
        let mut r = Retired::new();
        r.retire(n(1), e(5, 3), &[n(1), n(2)], ["a"], &[(n(2), e(5, 4))]);
        assert!(!r.holds(&"a"));
        r.retire(n(1), e(5, 4), &[n(1), n(2)], Vec::<&str>::new(), &[]);
        r.retire(n(1), e(5, 5), &[n(1)], ["a"], &[]);
        assert_eq!(r.waiting(), 0);
    }

    #[test]
    fn installed_of_an_older_epoch_releases_nothing() {
        let mut r = Retired::new();
        r.retire(n(1), e(5, 3), &[n(2)], ["a"], &[]);
        r.installed(n(2), e(4, 9));
        assert!(r.holds(&"a"));
    }
}
