//! Space-Saving (Metwally, Agrawal, El Abbadi 2005): the heavy hitters of
//! a stream in a fixed number of counters.
//!
//! With `m` counters over a stream of total weight `N`, every key whose
//! true weight exceeds `N / m` is held, and a held key's count
//! overestimates its true weight by at most its `error`, itself at most
//! `N / m`. Each observation costs a hash lookup and O(log m) heap steps;
//! a server feeds it a sample of its accesses.

use std::collections::HashMap;
use std::hash::Hash;

#[derive(Clone, Debug)]
struct Counter<K> {
    key: K,
    count: u64,
    error: u64,
}

/// The summary. Counters live in a binary min-heap by count, so the
/// smallest is the one a new key takes over.
#[derive(Clone, Debug)]
pub struct SpaceSaving<K> {
    capacity: usize,
    heap: Vec<Counter<K>>,
    /// Key to its position in `heap`.
    index: HashMap<K, usize>,
    total: u64,
}

impl<K: Hash + Eq + Clone + Ord> SpaceSaving<K> {
    /// A summary of `capacity` counters (at least 1).
    pub fn new(capacity: usize) -> SpaceSaving<K> {
        let capacity = capacity.max(1);
        SpaceSaving { capacity, heap: Vec::with_capacity(capacity), index: HashMap::with_capacity(capacity), total: 0 }
    }

    /// The weight observed since the summary was made or last cleared.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Counters in use.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True if nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Observes `key` with weight `weight`.
    pub fn observe(&mut self, key: &K, weight: u64) {
        self.total += weight;
        if let Some(&at) = self.index.get(key) {
            self.heap[at].count += weight;
            self.sift_down(at);
            return;
        }
        if self.heap.len() < self.capacity {
            self.heap.push(Counter { key: key.clone(), count: weight, error: 0 });
            let at = self.heap.len() - 1;
            self.index.insert(key.clone(), at);
            self.sift_up(at);
            return;
        }
        let min = &mut self.heap[0];
        self.index.remove(&min.key);
        min.error = min.count;
        min.count += weight;
        min.key = key.clone();
        self.index.insert(key.clone(), 0);
        self.sift_down(0);
    }

    /// `key`'s count and error, if held.
    pub fn get(&self, key: &K) -> Option<(u64, u64)> {
        self.index.get(key).map(|&at| (self.heap[at].count, self.heap[at].error))
    }

    /// The `n` highest counts, highest first (ties: smaller key first).
    pub fn top(&self, n: usize) -> Vec<(K, u64)> {
        let mut all: Vec<(K, u64)> = self.heap.iter().map(|c| (c.key.clone(), c.count)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// Halves every count and error (and the total), dropping counters
    /// that reach zero: keys that cool down fade over a few epochs instead
    /// of being forgotten at once.
    pub fn halve(&mut self) {
        self.total /= 2;
        let old = std::mem::take(&mut self.heap);
        self.index.clear();
        for mut c in old {
            c.count /= 2;
            c.error /= 2;
            if c.count > 0 {
                self.heap.push(c);
            }
        }
        // Halving keeps the heap order among survivors only up to
        // rounding: rebuild.
        for (at, c) in self.heap.iter().enumerate() {
            self.index.insert(c.key.clone(), at);
        }
        for at in (0..self.heap.len() / 2).rev() {
            self.sift_down(at);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        *self.index.get_mut(&self.heap[a].key).expect("indexed") = a;
        *self.index.get_mut(&self.heap[b].key).expect("indexed") = b;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].count <= self.heap[at].count {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut min = at;
            if l < self.heap.len() && self.heap[l].count < self.heap[min].count {
                min = l;
            }
            if r < self.heap.len() && self.heap[r].count < self.heap[min].count {
                min = r;
            }
            if min == at {
                return;
            }
            self.swap(at, min);
            at = min;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn observe_holds_the_heavy_key_of_a_skewed_stream() {
        let mut s = SpaceSaving::new(4);
        for i in 0..1000u64 {
            s.observe(&7u64, 1);
            s.observe(&(100 + i), 1);
        }
        assert_eq!(s.top(1)[0].0, 7);
        let (count, error) = s.get(&7).unwrap();
        assert!(count >= 1000 && count - error <= 1000, "{count} {error}");
        assert_eq!(s.total(), 2000);
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn halve_fades_keys_that_cool_down() {
        let mut s = SpaceSaving::new(8);
        s.observe(&1u64, 5);
        s.observe(&2u64, 1);
        s.halve();
        assert_eq!(s.get(&1), Some((2, 0)));
        assert_eq!(s.get(&2), None);
        s.observe(&3u64, 3);
        assert_eq!(s.top(8), vec![(3, 3), (1, 2)]);
    }

    proptest! {
        /// Space-Saving's guarantees against exact counts.
        #[test]
        fn observe_keeps_its_guarantees(stream in proptest::collection::vec((0u64..60, 1u64..4), 1..600), m in 1usize..24) {
            let mut s = SpaceSaving::new(m);
            let mut exact: HashMap<u64, u64> = HashMap::new();
            for (k, w) in &stream {
                s.observe(k, *w);
                *exact.entry(*k).or_default() += w;
            }
            let n: u64 = exact.values().sum();
            prop_assert_eq!(s.total(), n);
            for (k, &truth) in &exact {
                match s.get(k) {
                    Some((count, error)) => {
                        prop_assert!(count >= truth && count - error <= truth);
                        prop_assert!(error <= n / m as u64);
                    }
                    None => prop_assert!(truth <= n / m as u64, "key {} of weight {} > {} missing", k, truth, n / m as u64),
                }
            }
        }
    }
}
