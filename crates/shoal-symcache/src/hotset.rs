//! One hot set for a group from its members' reports.
//!
//! At the end of an epoch every member reports its heaviest keys with
//! their counts (from its [`crate::sketch::SpaceSaving`]); the member that
//! leads the group (the caller picks it: the lowest id) merges the
//! reports with [`agree`] and sends the result to every member with the
//! next epoch. The merge is deterministic (counts summed, highest first,
//! ties broken by key), so any member given the same reports computes the
//! same list: that symmetry is what lets every member cache exactly the
//! same keys.

use std::collections::HashMap;
use std::hash::Hash;

/// The hot set: at most `limit` keys, those with the highest summed
/// counts of at least `min_count`, highest first (ties: smaller key
/// first). A key reported twice by one member counts twice.
pub fn agree<K: Hash + Eq + Ord + Clone>(reports: &[Vec<(K, u64)>], limit: usize, min_count: u64) -> Vec<K> {
    let mut sums: HashMap<&K, u64> = HashMap::new();
    for report in reports {
        for (key, count) in report {
            // Counts come from other members' frames: never overflow.
            let sum = sums.entry(key).or_default();
            *sum = sum.saturating_add(*count);
        }
    }
    let mut all: Vec<(&K, u64)> = sums.into_iter().filter(|&(_, c)| c >= min_count.max(1)).collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    all.into_iter().take(limit).map(|(k, _)| k.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agree_saturates_counts_from_hostile_reports() {
        let reports = vec![vec![("a", u64::MAX)], vec![("a", u64::MAX), ("b", 3)]];
        assert_eq!(agree(&reports, 2, 1), vec!["a", "b"]);
    }

    #[test]
    fn agree_sums_across_members_and_cuts() {
        let a = vec![(1u64, 10), (2, 9), (3, 1)];
        let b = vec![(2u64, 5), (4, 12), (3, 1)];
        assert_eq!(agree(&[a.clone(), b.clone()], 2, 1), vec![2, 4]);
        assert_eq!(agree(&[b, a], 10, 3), vec![2, 4, 1], "order of reports does not matter; cold keys cut");
        assert_eq!(agree::<u64>(&[], 10, 1), Vec::<u64>::new());
    }

    #[test]
    fn agree_breaks_ties_by_key() {
        let r = vec![(9u64, 4), (3, 4), (5, 4)];
        assert_eq!(agree(&[r], 2, 0), vec![3, 5]);
    }
}
