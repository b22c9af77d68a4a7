//! One member's view of its group: membership, the hot-set rounds and
//! their agreement, without I/O (`docs/symmetric-caching.md`, "Epochs").
//!
//! Membership comes from the cluster map: a group's members and its
//! membership epoch (the map version at which it got them). Within one
//! membership the group runs rounds, one per `--sc-epoch-ms`:
//!
//! 1. every member, each period, takes the heaviest keys of its sketch
//!    (and clears it) and sends them to the leader, the lowest id
//!    ([`Action::Report`]; the leader reports to itself);
//! 2. the leader merges the reports it holds with [`crate::hotset::agree`]
//!    once every member has reported since its last publication, or one
//!    period after it, whichever comes first, and publishes the next
//!    round's hot set to every member ([`Action::Publish`]);
//! 3. a member installs a hot set only from its group's leader, of its
//!    membership, and of a round above the one it holds
//!    ([`Action::Install`]): it drops its cache and fills it again.
//!
//! So within one membership all members install the same lists in the
//! same order (a member may skip rounds it never received), and an
//! [`EpochId`] names one list: protocol messages of another `EpochId` are
//! dropped by their receiver. The leader's consistency level travels with
//! the list, so a group never mixes eventual and strong members.
//!
//! A new membership (a member joined, died or was recovered) starts over
//! at round 0 with an empty hot set: [`GroupView::new`].

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::hotset::agree;
use crate::{Consistency, Epoch, NodeId};

/// One hot set of one group: the membership epoch (from the cluster map)
/// and the round within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EpochId {
    pub membership: u64,
    pub round: Epoch,
}

/// The group's settings at this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// Length of a round (`--sc-epoch-ms`), at least 1.
    pub epoch_ms: u64,
    /// Most keys in a hot set (`--sc-cache-keys`).
    pub cache_keys: usize,
    /// Keys a member reports per round: its sketch's heaviest.
    pub report_keys: usize,
    /// Fewest accesses (summed over the reports) that make a key hot.
    pub min_count: u64,
    /// The consistency this member publishes when it leads.
    pub consistency: Consistency,
}

/// What the caller must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<K> {
    /// Take the heaviest [`GroupConfig::report_keys`] keys of the sketch
    /// with their counts, clear it, and hand them to `leader`: through
    /// [`GroupView::report`] if the leader is this member, else in a
    /// report message.
    Report { leader: NodeId },
    /// Send hot set `epoch` (keys, consistency) to every other member.
    Publish { to: Vec<NodeId>, epoch: EpochId, keys: Vec<K>, consistency: Consistency },
    /// Install hot set `epoch` here: end every key's protocol of the
    /// previous hot set, drop the cache, and fill the new keys from their
    /// home masters.
    Install { epoch: EpochId, keys: Vec<K>, consistency: Consistency },
}

/// A member's view of its group in one membership epoch.
#[derive(Clone, Debug)]
pub struct GroupView<K> {
    me: NodeId,
    members: Vec<NodeId>,
    config: GroupConfig,
    epoch: EpochId,
    hot: Vec<K>,
    consistency: Consistency,
    next_report_ms: u64,
    /// Leader only: the reports since the last publication, one per
    /// member (a later one replaces an earlier).
    reports: BTreeMap<NodeId, Vec<(K, u64)>>,
    /// Leader only: when the last publication went out (or the view began).
    published_ms: u64,
}

impl<K: Clone + Hash + Eq + Ord> GroupView<K> {
    /// Member `me` of a group of `members` (any order; `me` among them) at
    /// membership epoch `membership`, at time `now_ms`. The hot set is
    /// empty until the first round is installed.
    pub fn new(me: NodeId, members: &[NodeId], membership: u64, config: GroupConfig, now_ms: u64) -> GroupView<K> {
        let mut members = members.to_vec();
        members.sort();
        members.dedup();
        let config = GroupConfig { epoch_ms: config.epoch_ms.max(1), ..config };
        GroupView {
            me,
            members,
            config,
            epoch: EpochId { membership, round: Epoch(0) },
            hot: Vec::new(),
            consistency: config.consistency,
            next_report_ms: now_ms + config.epoch_ms,
            reports: BTreeMap::new(),
            published_ms: now_ms,
        }
    }

    /// Changes the most keys of the hot sets this member publishes when
    /// it leads (`--sc-cache-keys` derived from the number of keys).
    pub fn set_cache_keys(&mut self, cache_keys: usize) {
        self.config.cache_keys = cache_keys;
        self.config.report_keys = cache_keys;
    }

    /// The group's leader: its lowest id.
    pub fn leader(&self) -> NodeId {
        self.members.first().copied().unwrap_or(self.me)
    }

    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The installed hot set's epoch (round 0: none installed yet).
    pub fn epoch(&self) -> EpochId {
        self.epoch
    }

    /// The installed hot set, hottest first.
    pub fn hot(&self) -> &[K] {
        &self.hot
    }

    /// The installed hot set's consistency (the leader's).
    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// When [`GroupView::tick`] next has something to do.
    pub fn next_deadline_ms(&self) -> u64 {
        if self.leader() == self.me {
            self.next_report_ms.min(self.published_ms + self.config.epoch_ms)
        } else {
            self.next_report_ms
        }
    }

    /// Time passes: reports fall due every period; the leader publishes
    /// one period after its last publication with what it has.
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<Action<K>>) {
        if now_ms >= self.next_report_ms {
            // Skip periods missed (a stalled caller) rather than report
            // several times at once.
            let periods = (now_ms - self.next_report_ms) / self.config.epoch_ms + 1;
            self.next_report_ms += periods * self.config.epoch_ms;
            out.push(Action::Report { leader: self.leader() });
        }
        if self.leader() == self.me && now_ms >= self.published_ms + self.config.epoch_ms && !self.reports.is_empty() {
            self.publish(now_ms, out);
        }
    }

    /// A report from member `from` of membership `membership`. Only the
    /// leader takes reports, only from members of its membership; once
    /// every member has reported since its last publication it publishes.
    /// Entries beyond [`GroupConfig::report_keys`] are ignored.
    pub fn report(
        &mut self,
        from: NodeId,
        membership: u64,
        mut entries: Vec<(K, u64)>,
        now_ms: u64,
        out: &mut Vec<Action<K>>,
    ) {
        if self.leader() != self.me || membership != self.epoch.membership || !self.members.contains(&from) {
            return;
        }
        entries.truncate(self.config.report_keys);
        self.reports.insert(from, entries);
        if self.reports.len() == self.members.len() {
            self.publish(now_ms, out);
        }
    }

    fn publish(&mut self, now_ms: u64, out: &mut Vec<Action<K>>) {
        let reports: Vec<Vec<(K, u64)>> = std::mem::take(&mut self.reports).into_values().collect();
        let keys = agree(&reports, self.config.cache_keys, self.config.min_count);
        let epoch = EpochId { membership: self.epoch.membership, round: Epoch(self.epoch.round.0 + 1) };
        self.published_ms = now_ms;
        let to: Vec<NodeId> = self.members.iter().copied().filter(|&m| m != self.me).collect();
        out.push(Action::Publish { to, epoch, keys: keys.clone(), consistency: self.config.consistency });
        self.install(epoch, keys, self.config.consistency, out);
    }

    /// A hot set published by `from`. Installed only if `from` is this
    /// group's leader, `epoch` is of this membership and above the round
    /// held; anything else is dropped (a stale or misdirected message).
    /// Returns whether it was installed.
    pub fn hot_set(
        &mut self,
        from: NodeId,
        epoch: EpochId,
        keys: Vec<K>,
        consistency: Consistency,
        out: &mut Vec<Action<K>>,
    ) -> bool {
        if from != self.leader() || from == self.me || epoch.membership != self.epoch.membership || epoch <= self.epoch
        {
            return false;
        }
        self.install(epoch, keys, consistency, out);
        true
    }

    fn install(&mut self, epoch: EpochId, keys: Vec<K>, consistency: Consistency, out: &mut Vec<Action<K>>) {
        self.epoch = epoch;
        self.hot = keys.clone();
        self.consistency = consistency;
        out.push(Action::Install { epoch, keys, consistency });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: GroupConfig =
        GroupConfig { epoch_ms: 100, cache_keys: 2, report_keys: 3, min_count: 2, consistency: Consistency::Strong };

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn view(me: u32) -> GroupView<u64> {
        GroupView::new(n(me), &[n(3), n(1), n(2)], 7, CONFIG, 0)
    }

    fn installed(out: &[Action<u64>]) -> Option<(EpochId, Vec<u64>)> {
        out.iter().find_map(|a| match a {
            Action::Install { epoch, keys, .. } => Some((*epoch, keys.clone())),
            _ => None,
        })
    }

    #[test]
    fn tick_asks_for_a_report_each_period_to_the_lowest_id() {
        let mut v = view(2);
        let mut out = Vec::new();
        v.tick(99, &mut out);
        assert!(out.is_empty());
        v.tick(100, &mut out);
        assert_eq!(out, vec![Action::Report { leader: n(1) }]);
        out.clear();
        v.tick(450, &mut out);
        assert_eq!(out, vec![Action::Report { leader: n(1) }], "missed periods give one report");
        assert_eq!(v.next_deadline_ms(), 500);
    }

    #[test]
    fn report_leader_publishes_once_every_member_reported() {
        let mut v = view(1);
        let mut out = Vec::new();
        v.report(n(1), 7, vec![(10, 5), (11, 1)], 50, &mut out);
        v.report(n(2), 7, vec![(11, 2), (12, 9)], 50, &mut out);
        v.report(n(9), 7, vec![(13, 99)], 50, &mut out);
        v.report(n(3), 6, vec![(13, 99)], 50, &mut out);
        assert!(out.is_empty(), "a stranger's or another membership's report is ignored");
        v.report(n(3), 7, vec![(10, 1), (14, 1), (15, 1), (16, 50)], 60, &mut out);
        let epoch = EpochId { membership: 7, round: Epoch(1) };
        assert_eq!(
            out[0],
            Action::Publish { to: vec![n(2), n(3)], epoch, keys: vec![12, 10], consistency: Consistency::Strong },
            "summed, cut at 2 keys and 2 accesses; key 16 beyond the report's 3 entries"
        );
        assert_eq!(installed(&out), Some((epoch, vec![12, 10])));
        assert_eq!(v.hot(), &[12, 10]);
    }

    #[test]
    fn tick_leader_publishes_with_what_it_has_after_a_period() {
        let mut v = view(1);
        let mut out = Vec::new();
        v.report(n(2), 7, vec![(4, 3)], 10, &mut out);
        v.tick(99, &mut out);
        assert!(out.is_empty());
        v.tick(100, &mut out);
        assert_eq!(out[0], Action::Report { leader: n(1) });
        assert_eq!(installed(&out), Some((EpochId { membership: 7, round: Epoch(1) }, vec![4])));
        out.clear();
        v.tick(200, &mut out);
        assert_eq!(out, vec![Action::Report { leader: n(1) }], "nothing reported: nothing published");
    }

    #[test]
    fn hot_set_installed_only_from_the_leader_of_this_membership_in_order() {
        let mut v = view(3);
        let mut out = Vec::new();
        let e = |membership, round| EpochId { membership, round: Epoch(round) };
        assert!(!v.hot_set(n(2), e(7, 1), vec![1], Consistency::Strong, &mut out), "not the leader");
        assert!(!v.hot_set(n(1), e(8, 1), vec![1], Consistency::Strong, &mut out), "another membership");
        assert!(v.hot_set(n(1), e(7, 2), vec![1, 2], Consistency::Eventual, &mut out));
        assert!(!v.hot_set(n(1), e(7, 1), vec![3], Consistency::Strong, &mut out), "an older round");
        assert!(!v.hot_set(n(1), e(7, 2), vec![3], Consistency::Strong, &mut out), "the same round again");
        assert_eq!(out.len(), 1);
        assert_eq!(v.epoch(), e(7, 2));
        assert_eq!(v.hot(), &[1, 2]);
        assert_eq!(v.consistency(), Consistency::Eventual, "the leader's consistency");
    }

    #[test]
    fn report_at_a_member_that_does_not_lead_is_ignored() {
        let mut v = view(2);
        let mut out = Vec::new();
        for m in [1, 2, 3] {
            v.report(n(m), 7, vec![(1, 9)], 0, &mut out);
        }
        assert!(out.is_empty());
        assert_eq!(v.epoch().round, Epoch(0));
    }

    /// A whole group over a lossless network: after each round every member
    /// holds the same list, the keys hot across the group.
    #[test]
    fn group_every_member_installs_the_same_lists() {
        let ids = [n(1), n(2), n(3)];
        let mut views: Vec<GroupView<u64>> = ids.iter().map(|&m| GroupView::new(m, &ids, 4, CONFIG, 0)).collect();
        for round in 1..=5u64 {
            let now = round * 100;
            let mut published = None;
            for i in 0..3 {
                let mut out = Vec::new();
                views[i].tick(now, &mut out);
                for a in out {
                    if let Action::Report { leader } = a {
                        // Member i's accesses: key 100+round everywhere, and a key of its own.
                        let report = vec![(100 + round, 3), (i as u64, 1)];
                        let mut lout = Vec::new();
                        views[leader.0 as usize - 1].report(ids[i], 4, report, now, &mut lout);
                        for la in lout {
                            if let Action::Publish { epoch, keys, consistency, .. } = la {
                                published = Some((epoch, keys, consistency));
                            }
                        }
                    }
                }
            }
            let (epoch, keys, consistency) = published.expect("the leader published");
            for v in views.iter_mut().skip(1) {
                assert!(v.hot_set(n(1), epoch, keys.clone(), consistency, &mut Vec::new()));
            }
            for v in &views {
                assert_eq!(v.hot(), &[100 + round], "round {round}");
                assert_eq!(v.epoch(), EpochId { membership: 4, round: Epoch(round) });
            }
        }
    }
}
