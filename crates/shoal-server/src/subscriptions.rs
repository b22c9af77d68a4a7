//! KerA's rule for consumers sharing a name: one consumer per group at a
//! time (`docs/streams.md`, "Consumer names: one consumer per group").
//! The decision-making core: no I/O and no clock of its own (every call
//! is given `now`), so tests drive time.
//!
//! # Contract
//!
//! * A *subscription* is a consumer name on a streamlet. Its instances
//!   (64-bit ids, not 0, the client's choice) take work with
//!   [`Subscriptions::claim`]: a group of the streamlet that no live
//!   instance of the name holds, under a lease of at most [`MAX_LEASE`].
//! * Leases are per (name, log of the MultiLog): a name reads a log's
//!   groups one at a time, in id order. The group offered for a log is
//!   the log's first group at or after the name's committed cursor
//!   (`Store::consumer_heads`); the cursor passes a group only when a
//!   commit reaches the end of the closed group, which also releases the
//!   lease. So a log's next group is handed out only once the previous one
//!   is done for the name, and each producer's records (all in one log, in
//!   group order) are read in order across instances.
//! * Reads and commits of a group ([`Subscriptions::holding`]) are served
//!   only to the instance whose lease on the group's log names that group;
//!   each renews the lease. Once a lease runs out, another instance may
//!   claim the group, from the last committed offset; from then on the
//!   first instance is refused ([`AssignError::NotHeld`]), so it can
//!   neither read on nor move the cursor.
//! * The claim's choice (reading the cursors and heads) and a commit's
//!   cursor update run under the streamlet's lock, so a claim never sees a
//!   commit half done: a group committed done is never handed out again.
//!   A read is checked under it and served after (it changes nothing).
//! * Bounded: at most [`MAX_NAMES`] names with leases per streamlet, and
//!   [`MAX_LEASES`] leases on the server (expired ones are swept first);
//!   a name has at most one lease per log, so its live instances are at
//!   most the streamlet's logs. Past a bound the claim is refused with
//!   [`AssignError::Full`], saying which.
//! * Leases are in memory only: after a crash recovery the new master
//!   holds none, instances' reads answer `NotHeld`, and they claim again
//!   from the committed offsets, which are durable (`stream_meta`).

use parking_lot::Mutex;
use shoal_common::{StreamOffset, TableId};
use shoal_engine::ConsumerHead;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest lease granted; a longer one asked for is cut to it.
pub const MAX_LEASE: Duration = Duration::from_secs(60);
/// Most consumer names holding leases in one streamlet at once.
pub const MAX_NAMES: usize = 32;
/// Most leases on the server at once.
pub const MAX_LEASES: usize = 65_536;

/// A group granted by [`Subscriptions::claim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub log: u32,
    pub group: u64,
    /// Where to read from: the name's committed offset in the group, or
    /// its start.
    pub from: StreamOffset,
    pub lease: Duration,
}

/// Why a claim, read or commit was refused. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    /// The instance does not hold a live lease on this group for the name:
    /// never claimed it, or its lease ran out and another instance took the
    /// group, or the name is done with it, or the server recovered the
    /// streamlet since. Claim again.
    #[error("consumer '{name}' instance {instance} does not hold group {group}: {why}; claim a group again")]
    NotHeld { name: String, instance: u64, group: u64, why: &'static str },
    /// A bound is reached.
    #[error("{0}")]
    Full(String),
    /// Instance id 0, or a zero lease.
    #[error("{0}")]
    Invalid(String),
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    instance: u64,
    group: u64,
    until: Instant,
}

/// A streamlet's leases: by name, by log.
#[derive(Default)]
struct Streamlet {
    names: HashMap<Box<str>, HashMap<u32, Lease>>,
}

impl Streamlet {
    /// Drops expired leases and names left without any; how many leases
    /// went.
    fn sweep(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        self.names.retain(|_, logs| {
            let before = logs.len();
            logs.retain(|_, l| l.until > now);
            dropped += before - logs.len();
            !logs.is_empty()
        });
        dropped
    }
}

/// A streamlet's leases, locked on their own so that streamlets do not
/// wait for each other.
type SharedStreamlet = Arc<Mutex<Streamlet>>;

/// Every streamlet's leases. See the module comment.
#[derive(Default)]
pub struct Subscriptions {
    streamlets: Mutex<HashMap<(TableId, u32), SharedStreamlet>>,
    leases: AtomicUsize,
}

impl Subscriptions {
    pub fn new() -> Subscriptions {
        Subscriptions::default()
    }

    /// The streamlet's leases, made if it has none: the caller has checked
    /// that the streamlet exists, so the map holds at most one entry per
    /// streamlet of the server's streams.
    fn streamlet(&self, table: TableId, streamlet: u32) -> SharedStreamlet {
        self.streamlets.lock().entry((table, streamlet)).or_default().clone()
    }

    /// Leases held on the server (expired ones not swept yet included).
    pub fn leases(&self) -> usize {
        self.leases.load(Ordering::Relaxed)
    }

    /// Grants `instance` of consumer `name` a group of the streamlet (which
    /// the caller has checked exists) that no live instance of the name
    /// holds; `None` when there is none now.
    /// `heads` gives, under the streamlet's lock, each log's next group
    /// for the name (`Store::consumer_heads` of its committed cursors).
    /// Closed groups first (their records are all there), then open
    /// groups with records not read, then the others; lowest id first.
    #[allow(clippy::too_many_arguments)]
    pub fn claim<E: From<AssignError>>(
        &self,
        table: TableId,
        streamlet: u32,
        name: &str,
        instance: u64,
        lease: Duration,
        now: Instant,
        heads: impl FnOnce() -> Result<Vec<ConsumerHead>, E>,
    ) -> Result<Option<Claim>, E> {
        check(instance, lease)?;
        let lease = lease.min(MAX_LEASE);
        let sl = self.streamlet(table, streamlet);
        let mut sl = sl.lock();
        let swept = sl.sweep(now);
        self.leases.fetch_sub(swept, Ordering::Relaxed);
        if !sl.names.contains_key(name) && sl.names.len() >= MAX_NAMES {
            return Err(AssignError::Full(format!(
                "streamlet {streamlet} of stream {table} has leases of its maximum of {MAX_NAMES} consumer names"
            ))
            .into());
        }
        if self.leases() >= MAX_LEASES {
            self.sweep_all(now);
            if self.leases() >= MAX_LEASES {
                return Err(AssignError::Full(format!(
                    "the server holds its maximum of {MAX_LEASES} consumer group leases"
                ))
                .into());
            }
        }
        let held = sl.names.get(name);
        let free = |h: &ConsumerHead| held.and_then(|logs| logs.get(&h.log)).is_none_or(|l| l.until <= now);
        let rank = |h: &ConsumerHead| (!h.closed, !h.unread, h.group);
        let Some(best) = heads()?.into_iter().filter(free).min_by_key(rank) else {
            return Ok(None);
        };
        let logs = sl.names.entry(name.into()).or_default();
        let new = Lease { instance, group: best.group, until: now + lease };
        if logs.insert(best.log, new).is_none() {
            self.leases.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Claim { log: best.log, group: best.group, from: best.from, lease }))
    }

    /// Runs `f` (a read or a commit of group `group`) if `instance` holds
    /// the name's lease on the group's log for that group, renewing the
    /// lease for `lease` first; under the streamlet's lock. (The group is
    /// found among the name's leases, not in the store: a group retention
    /// removed can still be released.)
    /// `f` answers whether it finished the group (a commit of its end):
    /// the lease is then released, as it is when `release` is asked (even
    /// if `f` fails).
    #[allow(clippy::too_many_arguments)]
    pub fn holding<T, E: From<AssignError>>(
        &self,
        table: TableId,
        streamlet: u32,
        name: &str,
        instance: u64,
        group: u64,
        lease: Duration,
        now: Instant,
        release: bool,
        f: impl FnOnce() -> Result<(T, bool), E>,
    ) -> Result<T, E> {
        check(instance, lease)?;
        let not_held = |why| AssignError::NotHeld { name: name.to_owned(), instance, group, why };
        let sl = self.streamlets.lock().get(&(table, streamlet)).cloned();
        let sl = sl.ok_or_else(|| not_held("no instance of the name holds a group"))?;
        let mut sl = sl.lock();
        let logs = sl.names.get_mut(name).ok_or_else(|| not_held("no instance of the name holds a group"))?;
        let (&log, l) = logs
            .iter_mut()
            .find(|(_, l)| l.group == group)
            .ok_or_else(|| not_held("no instance holds it (never claimed, done, or its lease was swept)"))?;
        if l.instance != instance {
            return Err(not_held("another instance holds it (this one's lease ran out)").into());
        }
        // An expired lease nobody took over is still this instance's.
        l.until = now + lease.min(MAX_LEASE);
        let result = f();
        // Given back when asked even if `f` failed (a commit of a group
        // retention removed): the instance wants no more of it.
        let done = matches!(result, Ok((_, true)));
        if done || release {
            logs.remove(&log);
            self.leases.fetch_sub(1, Ordering::Relaxed);
            if logs.is_empty() {
                sl.names.remove(name);
            }
        }
        result.map(|(out, _)| out)
    }

    /// Drops every expired lease, and streamlets left without any.
    pub fn sweep_all(&self, now: Instant) {
        let mut map = self.streamlets.lock();
        map.retain(|_, sl| {
            let mut sl = sl.lock();
            let swept = sl.sweep(now);
            self.leases.fetch_sub(swept, Ordering::Relaxed);
            !sl.names.is_empty()
        });
    }
}

fn check(instance: u64, lease: Duration) -> Result<(), AssignError> {
    if instance == 0 {
        return Err(AssignError::Invalid("consumer instance id 0 is reserved".into()));
    }
    if lease.is_zero() {
        return Err(AssignError::Invalid("a consumer group lease must be at least 1 ms".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const T: TableId = TableId(9);
    const LEASE: Duration = Duration::from_millis(100);

    /// A model streamlet: each log's groups in id order (id, records,
    /// closed), and each name's committed cursors, applied as the store
    /// does (`Store::commit_consumer`).
    #[derive(Default)]
    struct Model {
        logs: BTreeMap<u32, Vec<(u64, u32, bool)>>,
        cursors: HashMap<String, BTreeMap<u32, StreamOffset>>,
    }

    fn off(group: u64, position: u32) -> StreamOffset {
        StreamOffset { group, segment: 0, position }
    }

    impl Model {
        fn heads(&self, name: &str) -> Vec<ConsumerHead> {
            let cursors = self.cursors.get(name).cloned().unwrap_or_default();
            let mut out = Vec::new();
            for (&log, groups) in &self.logs {
                let c = cursors.get(&log).copied().unwrap_or_default();
                if let Some(&(id, records, closed)) = groups.iter().find(|g| g.0 >= c.group) {
                    let from = if id == c.group { c } else { off(id, 0) };
                    out.push(ConsumerHead { log, group: id, from, closed, unread: records > from.position });
                }
            }
            out
        }

        fn commit(&mut self, name: &str, log: u32, at: StreamOffset) -> bool {
            let (_, records, closed) = *self.logs[&log].iter().find(|g| g.0 == at.group).expect("group");
            let done = closed && at.position == records;
            let c = if done { off(at.group + 1, 0) } else { at };
            self.cursors.entry(name.into()).or_default().insert(log, c);
            done
        }
    }

    fn claim(s: &Subscriptions, m: &Model, name: &str, instance: u64, now: Instant) -> Option<Claim> {
        s.claim(T, 0, name, instance, LEASE, now, || Ok::<_, AssignError>(m.heads(name))).unwrap()
    }

    fn commit(
        s: &Subscriptions,
        m: &mut Model,
        name: &str,
        instance: u64,
        c: &Claim,
        at: StreamOffset,
        now: Instant,
    ) -> Result<bool, AssignError> {
        s.holding(T, 0, name, instance, c.group, LEASE, now, false, || {
            let done = m.commit(name, c.log, at);
            Ok::<_, AssignError>((done, done))
        })
    }

    #[test]
    fn claim_two_instances_never_hold_the_same_group() {
        let s = Subscriptions::new();
        let mut m = Model::default();
        m.logs.insert(0, vec![(0, 5, true), (2, 5, false)]);
        m.logs.insert(1, vec![(1, 5, false)]);
        let now = Instant::now();
        let a = claim(&s, &m, "n", 1, now).unwrap();
        assert_eq!((a.log, a.group, a.from), (0, 0, off(0, 0)), "closed groups first");
        let b = claim(&s, &m, "n", 2, now).unwrap();
        assert_eq!((b.log, b.group), (1, 1));
        assert_eq!(claim(&s, &m, "n", 3, now), None, "every log is held: nothing for a third");
        assert_eq!(claim(&s, &m, "n", 1, now), None, "nor for a holder");
        // Another name reads the same groups independently.
        assert_eq!(claim(&s, &m, "other", 3, now).map(|c| c.group), Some(0));
        // Instance 2 cannot read or commit instance 1's group.
        let e = commit(&s, &mut m, "n", 2, &a, off(0, 5), now).unwrap_err();
        assert!(matches!(e, AssignError::NotHeld { instance: 2, group: 0, .. }), "{e}");
        assert!(!m.cursors.contains_key("n"), "a refused commit changes nothing");
    }

    #[test]
    fn claim_per_log_order_next_group_only_after_the_previous_is_done() {
        let s = Subscriptions::new();
        let mut m = Model::default();
        m.logs.insert(0, vec![(0, 5, true), (1, 5, true)]);
        let now = Instant::now();
        let a = claim(&s, &m, "n", 1, now).unwrap();
        assert_eq!(a.group, 0);
        // Group 1 is closed and unread, but its log's group 0 is not done.
        assert_eq!(claim(&s, &m, "n", 2, now), None);
        assert_eq!(commit(&s, &mut m, "n", 1, &a, off(0, 3), now), Ok(false), "part of a group");
        assert_eq!(claim(&s, &m, "n", 2, now), None);
        assert_eq!(commit(&s, &mut m, "n", 1, &a, off(0, 5), now), Ok(true), "its end: done, released");
        let b = claim(&s, &m, "n", 2, now).unwrap();
        assert_eq!((b.group, b.from), (1, off(1, 0)));
        let e = commit(&s, &mut m, "n", 1, &a, off(0, 5), now).unwrap_err();
        assert!(matches!(e, AssignError::NotHeld { .. }), "a done group's lease is gone: {e}");
    }

    #[test]
    fn lease_expiry_hands_the_group_over_from_the_committed_offset() {
        let s = Subscriptions::new();
        let mut m = Model::default();
        m.logs.insert(0, vec![(0, 10, false)]);
        let t0 = Instant::now();
        let a = claim(&s, &m, "n", 1, t0).unwrap();
        commit(&s, &mut m, "n", 1, &a, off(0, 4), t0).unwrap();
        // Renewed by its reads and commits: still held after one lease.
        let t1 = t0 + LEASE * 3 / 4;
        let read = s.holding(T, 0, "n", 1, 0, LEASE, t1, false, || Ok::<_, AssignError>(((), false)));
        assert_eq!(read, Ok(()));
        assert_eq!(claim(&s, &m, "n", 2, t0 + LEASE + Duration::from_millis(10)), None);
        // Instance 1 goes silent (it read up to 7 but committed 4).
        let t2 = t1 + LEASE + Duration::from_millis(1);
        let b = claim(&s, &m, "n", 2, t2).unwrap();
        assert_eq!((b.group, b.from), (0, off(0, 4)), "from the last commit");
        let e = commit(&s, &mut m, "n", 1, &a, off(0, 7), t2).unwrap_err();
        assert!(matches!(e, AssignError::NotHeld { instance: 1, .. }), "{e}");
        assert_eq!(m.cursors["n"][&0], off(0, 4), "the old holder cannot move the cursor");
        assert_eq!(commit(&s, &mut m, "n", 2, &b, off(0, 10), t2), Ok(false), "open: not done");
    }

    #[test]
    fn expired_lease_nobody_took_is_still_the_holders() {
        let s = Subscriptions::new();
        let mut m = Model::default();
        m.logs.insert(0, vec![(0, 10, true)]);
        let t0 = Instant::now();
        let a = claim(&s, &m, "n", 1, t0).unwrap();
        assert_eq!(commit(&s, &mut m, "n", 1, &a, off(0, 10), t0 + LEASE * 5), Ok(true));
    }

    #[test]
    fn release_gives_the_group_back_and_bad_input_is_refused() {
        let s = Subscriptions::new();
        let m = {
            let mut m = Model::default();
            m.logs.insert(0, vec![(0, 1, false)]);
            m
        };
        let now = Instant::now();
        let a = claim(&s, &m, "n", 1, now).unwrap();
        s.holding(T, 0, "n", 1, a.group, LEASE, now, true, || Ok::<_, AssignError>(((), false))).unwrap();
        assert_eq!(s.leases(), 0);
        let b = claim(&s, &m, "n", 2, now).unwrap();
        assert_eq!(b.group, 0);
        // A release whose commit fails (its group was removed) still
        // gives the group back.
        let failed = s.holding(T, 0, "n", 2, b.group, LEASE, now, true, || {
            Err::<((), bool), _>(AssignError::Invalid("group 0 was removed".into()))
        });
        assert!(failed.is_err());
        assert_eq!(s.leases(), 0);
        assert_eq!(claim(&s, &m, "n", 2, now).map(|c| c.group), Some(0));
        let heads = || Ok::<_, AssignError>(m.heads("n"));
        assert!(matches!(s.claim(T, 0, "n", 0, LEASE, now, heads), Err(AssignError::Invalid(_))));
        assert!(matches!(s.claim(T, 0, "n", 1, Duration::ZERO, now, heads), Err(AssignError::Invalid(_))));
        let long = s.claim(T, 0, "z", 1, Duration::from_secs(3600), now, heads).unwrap().unwrap();
        assert_eq!(long.lease, MAX_LEASE);
    }

    #[test]
    fn claim_past_the_name_limit_is_refused_until_leases_expire() {
        let s = Subscriptions::new();
        let mut m = Model::default();
        m.logs.insert(0, vec![(0, 1, false)]);
        let now = Instant::now();
        for i in 0..MAX_NAMES {
            assert!(claim(&s, &m, &format!("n{i}"), 1, now).is_some());
        }
        let e = s.claim(T, 0, "late", 1, LEASE, now, || Ok::<_, AssignError>(m.heads("late"))).unwrap_err();
        assert!(matches!(&e, AssignError::Full(why) if why.contains("32 consumer names")), "{e}");
        assert!(claim(&s, &m, "late", 1, now + LEASE * 2).is_some(), "expired names are swept");
        s.sweep_all(now + LEASE * 10);
        assert_eq!(s.leases(), 0);
        assert!(s.streamlets.lock().is_empty());
    }
}
