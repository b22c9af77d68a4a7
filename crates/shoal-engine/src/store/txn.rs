//! Transactions: reads and writes of a set of keys declared up front, run
//! while every other writer of those keys waits, and applied together.
//!
//! [`Store::transaction`] locks the hash-table stripes of the declared keys
//! (in stripe order, as multi-writes do, so transactions and multi-writes
//! never deadlock) and returns a [`Txn`]. Reads see the store plus the
//! transaction's own staged writes; writes and removes check their reject
//! rules against that view and are only staged. [`Txn::commit`] appends the
//! final state of every key the transaction changed as one batch (one
//! append group unless it spans a head roll) and installs it before the
//! locks are released; dropping a `Txn` without committing applies nothing.
//!
//! While a `Txn` lives, no other write, remove or cleaner relocation of its
//! stripes can run; lock-free readers of other threads see each key either
//! before or after the commit. A transaction must therefore be short: the
//! RESP front end runs one client's queued commands (MULTI/EXEC) in one.
//!
//! Memory: a commit that finds the log full releases the locks, waits for
//! the cleaner as a write does, and returns [`Commit::Retry`]: nothing was
//! applied, and the caller runs the whole transaction again (its reads may
//! now see other clients' writes).
//!
//! Expiry: an object whose expiry time has come when the transaction first
//! uses its key is missing to the transaction, as everywhere; writes set,
//! clear or keep expiry times as [`Store::write_with_expiry`] does.
//!
//! [`Store::write_with_expiry`]: super::Store::write_with_expiry

use super::{check_rules, key_hash, Expiry, Found, Inner, ObjectMeta, StoreError};
use crate::format;
use crate::log::Batch;
use crate::pool::Tier;
use shoal_common::{RejectRules, TableId, UnixMillis, Version};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// A transaction over a fixed set of keys; see the module comment.
pub struct Txn {
    inner: Arc<Inner>,
    /// The stripes locked, sorted and distinct.
    stripes: Vec<usize>,
    /// Per key written or removed: its state before the transaction and now.
    staged: HashMap<(TableId, Vec<u8>), Staged>,
    /// The keys of `staged` in the order first staged (the commit's order).
    order: Vec<(TableId, Vec<u8>)>,
    started: Instant,
}

struct Staged {
    /// The stored object when first staged (under the stripe lock, so it is
    /// still the stored object at commit), expired or not.
    original: Option<Found>,
    /// The version of `original` if it had not expired then: what the
    /// transaction saw.
    seen: Option<Version>,
    /// The object now; `None`: removed (or missing, or expired).
    now: Option<Current>,
    /// Highest version this key held in the transaction (the next one
    /// written must be above it, even after a remove).
    highest: Version,
}

/// A key's object as the transaction sees it.
struct Current {
    value: Vec<u8>,
    version: Version,
    expiry: Option<UnixMillis>,
}

/// What [`Txn::commit`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Commit {
    /// Every staged change is in the log and visible.
    Done,
    /// The log was full: nothing was applied, the cleaner ran; run the
    /// transaction again.
    Retry,
}

impl super::Store {
    /// Starts a transaction over `keys` (any order, repeats allowed): locks
    /// their stripes, waiting for writers that hold them. Only these keys
    /// (and others that share their stripes) may be used in it.
    pub fn transaction(&self, keys: &[(TableId, &[u8])]) -> Txn {
        let inner = self.inner.clone();
        let mut stripes: Vec<usize> = keys.iter().map(|(t, k)| inner.ht.stripe_of(key_hash(*t, k).0)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        for &s in &stripes {
            // Released by `Txn::drop` (see `unlock_stripe`).
            std::mem::forget(inner.ht.lock_stripe(s));
        }
        Txn { inner, stripes, staged: HashMap::new(), order: Vec::new(), started: Instant::now() }
    }
}

impl Txn {
    /// The key's hash, checked to be in the transaction's stripes.
    fn locked_hash(&self, table: TableId, key: &[u8]) -> Result<u64, StoreError> {
        self.inner.check_table(table)?;
        let hash = key_hash(table, key).0;
        match self.stripes.binary_search(&self.inner.ht.stripe_of(hash)) {
            Ok(_) => Ok(hash),
            Err(_) => Err(StoreError::NotInTransaction),
        }
    }

    /// The key's current version in the transaction's view (`None`: absent).
    pub fn version(&self, table: TableId, key: &[u8]) -> Result<Option<Version>, StoreError> {
        let hash = self.locked_hash(table, key)?;
        if let Some(s) = self.staged.get(&(table, key.to_vec())) {
            return Ok(s.now.as_ref().map(|c| c.version));
        }
        Ok(self.inner.live(self.inner.lookup(table, key, hash)).map(|f| f.version))
    }

    /// The key's [`Store::absence_stamp`] (committed removals only).
    pub fn absence_stamp(&self, table: TableId, key: &[u8]) -> Result<u32, StoreError> {
        let hash = self.locked_hash(table, key)?;
        Ok(self.inner.removals[super::absence_slot(hash)].load(Ordering::Acquire))
    }

    /// Whether `rules` accept a write or remove of the key now: the refusal
    /// a [`Txn::write`] would return, without staging anything.
    pub fn check(&self, table: TableId, key: &[u8], rules: &RejectRules) -> Result<(), StoreError> {
        check_rules(rules, self.version(table, key)?)
    }

    /// Reads the key into `out` (replacing its contents); its version, or
    /// `ObjectDoesntExist`.
    pub fn read_into(&self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> Result<Version, StoreError> {
        self.read_meta_into(table, key, Some(out)).map(|m| m.version)
    }

    /// The key's version and expiry time, and its value into `out` when
    /// given; `ObjectDoesntExist` if missing or expired.
    pub fn read_meta_into(
        &self,
        table: TableId,
        key: &[u8],
        out: Option<&mut Vec<u8>>,
    ) -> Result<ObjectMeta, StoreError> {
        let hash = self.locked_hash(table, key)?;
        self.inner.counters.reads.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = self.staged.get(&(table, key.to_vec())) {
            let c = s.now.as_ref().ok_or(StoreError::ObjectDoesntExist)?;
            if let Some(out) = out {
                out.clear();
                out.extend_from_slice(&c.value);
            }
            return Ok(ObjectMeta { version: c.version, expiry: c.expiry });
        }
        let f = self.inner.live(self.inner.lookup(table, key, hash)).ok_or(StoreError::ObjectDoesntExist)?;
        if let Some(out) = out {
            let e = self.inner.segs.entry(f.r);
            let o = format::parse_object(&e).expect("live object");
            out.clear();
            out.extend_from_slice(o.value);
        }
        Ok(ObjectMeta { version: f.version, expiry: f.expiry })
    }

    /// Stages a write of `value` under `rules`, without expiry; the version
    /// it will have.
    pub fn write(
        &mut self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
    ) -> Result<Version, StoreError> {
        self.write_with_expiry(table, key, value, rules, Expiry::Never)
    }

    /// [`Txn::write`] with an expiry (a time, none, or the key's own).
    pub fn write_with_expiry(
        &mut self,
        table: TableId,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
        expiry: Expiry,
    ) -> Result<Version, StoreError> {
        self.inner.check_sizes(key, Some(value))?;
        self.stage_write(table, key, rules, |now| {
            let expiry = expiry.resolve(now.and_then(|c| c.expiry));
            Ok((value.to_vec(), expiry))
        })
    }

    /// Stages a new expiry time for the key (`None`: never), its value
    /// unchanged; the version it will have. `ObjectDoesntExist` if the key
    /// is missing or expired.
    pub fn set_expiry(
        &mut self,
        table: TableId,
        key: &[u8],
        expiry: Option<UnixMillis>,
        rules: RejectRules,
    ) -> Result<Version, StoreError> {
        self.stage_write(table, key, rules, |now| {
            let c = now.ok_or(StoreError::ObjectDoesntExist)?;
            Ok((c.value.clone(), expiry))
        })
    }

    /// Stages a write whose value and expiry `new` makes from the key's
    /// object now, once `rules` accept it.
    fn stage_write(
        &mut self,
        table: TableId,
        key: &[u8],
        rules: RejectRules,
        new: impl FnOnce(Option<&Current>) -> Result<(Vec<u8>, Option<UnixMillis>), StoreError>,
    ) -> Result<Version, StoreError> {
        let fresh = self.inner.next_version(None);
        let s = self.stage(table, key)?;
        let current = s.now.as_ref().map(|c| c.version);
        check_rules(&rules, current)?;
        let (value, expiry) = new(s.now.as_ref())?;
        let version = match current {
            Some(v) => Version(v.0 + 1),
            None => s.highest.max(fresh),
        };
        s.highest = Version(version.0 + 1);
        s.now = Some(Current { value, version, expiry });
        Ok(version)
    }

    /// Stages the removal of the key under `rules`; the version removed
    /// (`None`: it did not exist, nothing staged).
    pub fn remove(&mut self, table: TableId, key: &[u8], rules: RejectRules) -> Result<Option<Version>, StoreError> {
        self.inner.check_sizes(key, None)?;
        let s = self.stage(table, key)?;
        let current = s.now.as_ref().map(|c| c.version);
        check_rules(&rules, current)?;
        s.now = None;
        Ok(current)
    }

    /// The staged state of the key, created from the store on first use.
    fn stage(&mut self, table: TableId, key: &[u8]) -> Result<&mut Staged, StoreError> {
        let hash = self.locked_hash(table, key)?;
        let id = (table, key.to_vec());
        if !self.staged.contains_key(&id) {
            let original = self.inner.lookup(table, key, hash);
            let now = self.inner.live(original).map(|f| {
                let e = self.inner.segs.entry(f.r);
                let o = format::parse_object(&e).expect("live object");
                Current { value: o.value.to_vec(), version: f.version, expiry: f.expiry }
            });
            let seen = now.as_ref().map(|c| c.version);
            // Above the stored version even if it expired: versions only grow.
            let highest = original.map_or(Version(0), |f| Version(f.version.0 + 1));
            self.order.push(id.clone());
            self.staged.insert(id.clone(), Staged { original, seen, now, highest });
        }
        Ok(self.staged.get_mut(&id).expect("staged"))
    }

    /// Applies every staged change: one batch of objects and tombstones,
    /// installed before the locks are released. Err(OutOfMemory) when the
    /// cleaner can free nothing (nothing applied).
    pub fn commit(mut self) -> Result<Commit, StoreError> {
        let inner = self.inner.clone();
        let mut b = Batch::default();
        // (key, hash, original, entry index of the new object)
        let mut plan = Vec::with_capacity(self.order.len());
        let mut removes = 0;
        for id in &self.order {
            let s = &self.staged[id];
            let (table, key) = (id.0, &id.1[..]);
            if s.seen == s.now.as_ref().map(|c| c.version) {
                // Unchanged (written and removed again, only read-staged,
                // or a refused change of a missing or expired key).
                continue;
            }
            let mut obj = None;
            if let Some(c) = &s.now {
                format::encode_object_with(&mut b.buf, table, c.version, c.expiry, key, &c.value);
                b.mark();
                obj = Some(b.ends.len() - 1);
            } else {
                removes += 1;
            }
            if let Some(f) = s.original {
                inner.push_tombstone(&mut b, table, key, &f);
            }
            plan.push((id.clone(), key_hash(table, key).0, s.original, obj));
        }
        if plan.is_empty() {
            return Ok(Commit::Done);
        }
        let tier = if removes == plan.len() { Tier::Remove } else { Tier::Write };
        let mut refs = Vec::new();
        if inner.try_append(&b, tier, &mut refs).is_err() {
            let started = self.started;
            drop(self);
            inner.wait_for_space(started)?;
            return Ok(Commit::Retry);
        }
        let len_of = |k: usize| b.ends[k] - if k == 0 { 0 } else { b.ends[k - 1] };
        // Overwrites and removes first: an insert may move slots of its
        // bucket into an overflow bucket, staling the positions found.
        plan.sort_by_key(|p| p.2.is_none());
        for ((table, key), hash, original, obj) in plan {
            let s = &self.staged[&(table, key.clone())];
            match (obj, original) {
                (Some(k), _) => {
                    let (value_len, expiry) = s.now.as_ref().map_or((0, None), |c| (c.value.len(), c.expiry));
                    inner.install(table, hash, original, refs[k], len_of(k), key.len() + value_len, expiry);
                    if original.is_some() && s.seen.is_none() {
                        inner.counters.expired_lazily.fetch_add(1, Ordering::Relaxed);
                    }
                    inner.counters.writes.fetch_add(1, Ordering::Relaxed);
                }
                (None, Some(f)) => {
                    inner.uninstall(table, hash, f);
                    inner.counters.removes.fetch_add(1, Ordering::Relaxed);
                }
                (None, None) => unreachable!("unchanged keys are not planned"),
            }
        }
        self.staged.clear();
        Ok(Commit::Done)
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        for &s in &self.stripes {
            // SAFETY: `Store::transaction` locked each of these stripes once
            // and forgot the guard; this is the matching unlock, once.
            unsafe { self.inner.ht.unlock_stripe(s) };
        }
        self.inner.grow_hash_table();
    }
}
