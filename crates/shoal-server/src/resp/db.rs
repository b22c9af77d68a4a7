//! A Redis database as the commands see it: string keys and values of one
//! Shoal table, named "db{n}" (created on the first write), over the store's
//! public operations only.
//!
//! Read-modify-write commands (INCR, APPEND, SET GET, ...) go through
//! [`Db::update`], which reads the value and its version and writes back
//! only if the version is unchanged (or, for a missing key, if it is still
//! missing), retrying otherwise: each such command is atomic. Commands that
//! change only a key's expiry (EXPIRE, PERSIST, GETEX) do the same with
//! [`Db::meta`] and a versioned [`Db::set_expiry`] or [`Db::remove_version`].
//!
//! Expiry: a key whose expiry time has come is missing to every read and
//! every rule here (the store sees to it); it keeps counting in
//! [`Db::len`] until the store reclaims it, as Redis's DBSIZE counts
//! expired keys not yet deleted.
//!
//! Inside EXEC (`multi`), the connection holds a store transaction and every
//! read and write of a key goes through it instead: staged, seen by the
//! transaction's later commands, applied together at its commit. The
//! keyless operations (scan, len, clear) are refused there; MULTI refuses
//! the commands that need them when they are queued.

use crate::context::{ServerContext, ServerStats};
use crate::resp::multi::Seen;
use crate::resp::reply::ErrorReply;
use shoal_engine::{
    key_hash, EnumCursor, Expiry, ObjectMeta, RejectRules, StoreError, TableId, Txn, UnixMillis, Version, WriteOp,
};
use std::cell::{Cell, RefCell};

/// Objects a SCAN examines per call into the store's enumeration.
const SCAN_STEP: usize = 16;

/// Number of databases (SELECT 0..15), as in Redis.
pub const DATABASES: usize = 16;

const DB_NAMES: [&str; DATABASES] = [
    "db0", "db1", "db2", "db3", "db4", "db5", "db6", "db7", "db8", "db9", "db10", "db11", "db12", "db13", "db14",
    "db15",
];

/// The table name of database `index`.
pub fn table_name(index: usize) -> &'static str {
    DB_NAMES[index]
}

/// The error reply for a store error, in Redis's words where Redis has one.
pub fn store_error(e: StoreError) -> ErrorReply {
    match e {
        StoreError::OutOfMemory => ErrorReply::new("OOM command not allowed when used memory > 'maxmemory'."),
        StoreError::ValueTooLarge { .. } => {
            ErrorReply::new("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
        }
        StoreError::KeyTooLarge { max, .. } => {
            ErrorReply::owned(format!("ERR key exceeds maximum allowed size ({max} bytes)"))
        }
        other => ErrorReply::owned(format!("ERR {other}")),
    }
}

/// A write's outcome: `Ok(false)` if a reject rule refused it.
fn refused_is_false<T>(r: Result<T, StoreError>) -> Result<bool, ErrorReply> {
    match r {
        Ok(_) => Ok(true),
        Err(StoreError::ObjectExists { .. } | StoreError::ObjectDoesntExist | StoreError::WrongVersion { .. }) => {
            Ok(false)
        }
        Err(e) => Err(store_error(e)),
    }
}

/// What an [`Db::update`] step decided.
pub enum Update<T> {
    /// Write this value, then return `T`.
    Write(Vec<u8>, T),
    /// Write nothing; return `T`.
    Keep(T),
}

/// One connection's memory of which table each database is, valid while
/// the registry's generation is unchanged: a command then finds its table
/// with one atomic load instead of a lock and a hash lookup.
pub struct TableCache {
    /// Per database: the registry generation of the lookup (`u64::MAX`:
    /// none yet) and its result.
    entries: [Cell<(u64, Option<TableId>)>; DATABASES],
}

impl Default for TableCache {
    fn default() -> TableCache {
        TableCache { entries: std::array::from_fn(|_| Cell::new((u64::MAX, None))) }
    }
}

/// One database of one connection.
pub struct Db<'a> {
    ctx: &'a ServerContext,
    index: usize,
    cache: &'a TableCache,
    /// The connection's transaction while EXEC runs its commands.
    txn: &'a RefCell<Option<Txn>>,
}

/// The error of a keyless operation inside a transaction (MULTI refuses
/// the commands that would need one, so it is not expected).
const NOT_IN_TRANSACTION: ErrorReply = ErrorReply::new("ERR this command cannot run inside a transaction");

impl<'a> Db<'a> {
    pub fn new(ctx: &'a ServerContext, index: usize, cache: &'a TableCache, txn: &'a RefCell<Option<Txn>>) -> Db<'a> {
        Db { ctx, index, cache, txn }
    }

    fn in_transaction(&self) -> bool {
        self.txn.borrow().is_some()
    }

    /// The table, if it was ever written.
    pub fn table(&self) -> Option<TableId> {
        let entry = &self.cache.entries[self.index];
        // Read the generation before looking up: a change after it is seen
        // by the next call.
        let generation = self.ctx.tables.generation();
        match entry.get() {
            (g, table) if g == generation => table,
            _ => {
                let table = self.ctx.tables.lookup(table_name(self.index));
                entry.set((generation, table));
                table
            }
        }
    }

    /// The table, created if it was never written (in a cluster, by the
    /// coordinator: a blocking call, made once per database).
    pub fn table_for_write(&self) -> Result<TableId, ErrorReply> {
        match self.table() {
            Some(t) => Ok(t),
            None => self
                .ctx
                .tables
                .create_with(table_name(self.index), true)
                .map_err(|e| ErrorReply::owned(format!("TRYAGAIN cannot create the database's table: {e}"))),
        }
    }

    fn count(&self, found: bool) {
        let s = &self.ctx.stats;
        ServerStats::add(if found { &s.keyspace_hits } else { &s.keyspace_misses }, 1);
    }

    /// The log position that a read of `key` seen so far waits for
    /// (`Store::write_position`); 0 if the database has no table.
    pub fn write_position(&self, key: &[u8]) -> u64 {
        self.table().map_or(0, |t| self.ctx.store.write_position(t, key))
    }

    /// Reads `key`'s value into `out`; `Ok(None)` if it does not exist.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Version>, ErrorReply> {
        Ok(self.read(key, Some(out))?.map(|m| m.version))
    }

    /// [`Db::get_into`] that also returns the key's expiry time.
    pub fn get_meta_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<ObjectMeta>, ErrorReply> {
        self.read(key, Some(out))
    }

    /// `key`'s version and expiry time, without its value; `Ok(None)` if
    /// it does not exist.
    pub fn meta(&self, key: &[u8]) -> Result<Option<ObjectMeta>, ErrorReply> {
        self.read(key, None)
    }

    fn read(&self, key: &[u8], out: Option<&mut Vec<u8>>) -> Result<Option<ObjectMeta>, ErrorReply> {
        let Some(t) = self.table() else {
            self.count(false);
            return Ok(None);
        };
        let store = &self.ctx.store;
        let read = match (self.txn.borrow().as_ref(), out) {
            (Some(txn), out) => txn.read_meta_into(t, key, out),
            (None, Some(out)) => store.read_meta_into(t, key, RejectRules::default(), out),
            (None, None) => store.meta(t, key, RejectRules::default()),
        };
        match read {
            Ok(m) => {
                self.count(true);
                Ok(Some(m))
            }
            // A key too long to be stored cannot exist.
            Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                self.count(false);
                Ok(None)
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// The current time by the store's clock, which expiry times are
    /// compared with.
    pub fn now(&self) -> UnixMillis {
        self.ctx.store.now()
    }

    pub fn exists(&self, key: &[u8], scratch: &mut Vec<u8>) -> Result<bool, ErrorReply> {
        Ok(self.get_into(key, scratch)?.is_some())
    }

    /// What WATCH records of the key: its version, or that it is absent
    /// (missing or expired) and the store's absence stamp (read first)
    /// then. A key created and expired between WATCH and EXEC is seen as
    /// changed once the store reclaimed it (the sweep does within its
    /// interval), which bumps the stamp; before, it is not.
    pub fn seen(&self, key: &[u8]) -> Result<Seen, ErrorReply> {
        let Some(t) = self.table() else { return Ok(Seen::Absent(0)) };
        let (stamp, found) = match self.txn.borrow().as_ref() {
            Some(txn) => (txn.absence_stamp(t, key), txn.version(t, key)),
            None => (
                Ok(self.ctx.store.absence_stamp(t, key)),
                self.ctx.store.meta(t, key, RejectRules::default()).map(|m| Some(m.version)),
            ),
        };
        let stamp = stamp.map_err(store_error)?;
        match found {
            Ok(Some(v)) => Ok(Seen::Present(v)),
            Ok(None)
            | Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                Ok(Seen::Absent(stamp))
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// Writes `key` under `rules`, without expiry (clearing one the key
    /// had); `Ok(false)` if a rule refused it.
    pub fn write(&self, key: &[u8], value: &[u8], rules: RejectRules) -> Result<bool, ErrorReply> {
        self.write_with_expiry(key, value, rules, Expiry::Never)
    }

    /// [`Db::write`] with an expiry: a time, none, or the old value's (KEEPTTL).
    pub fn write_with_expiry(
        &self,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
        expiry: Expiry,
    ) -> Result<bool, ErrorReply> {
        let t = self.table_for_write()?;
        let written = match self.txn.borrow_mut().as_mut() {
            Some(txn) => txn.write_with_expiry(t, key, value, rules, expiry),
            None => self.ctx.store.write_with_expiry(t, key, value, rules, expiry),
        };
        refused_is_false(written)
    }

    /// Gives `key` a new expiry time (`None`: never expires), keeping its
    /// value; `Ok(false)` if `rules` refused or the key is missing.
    pub fn set_expiry(&self, key: &[u8], expiry: Option<UnixMillis>, rules: RejectRules) -> Result<bool, ErrorReply> {
        let Some(t) = self.table() else { return Ok(false) };
        let changed = match self.txn.borrow_mut().as_mut() {
            Some(txn) => txn.set_expiry(t, key, expiry, rules),
            None => self.ctx.store.set_expiry(t, key, expiry, rules),
        };
        match changed {
            Ok(_) => Ok(true),
            Err(
                StoreError::ObjectExists { .. }
                | StoreError::ObjectDoesntExist
                | StoreError::WrongVersion { .. }
                | StoreError::UnknownTable(_),
            ) => Ok(false),
            Err(e) => Err(store_error(e)),
        }
    }

    /// Writes every (key, value) pair in order, as one append group where
    /// the store can; the version of each written pair, `None` where a rule
    /// refused it. On an error, pairs before it may have been written.
    pub fn write_all(&self, pairs: &[(&[u8], &[u8])], rules: RejectRules) -> Result<Vec<Option<Version>>, ErrorReply> {
        let t = self.table_for_write()?;
        let ops: Vec<WriteOp> = pairs.iter().map(|(key, value)| WriteOp::new(t, key, value, rules)).collect();
        let results = match self.txn.borrow_mut().as_mut() {
            Some(txn) => ops.iter().map(|op| txn.write(t, op.key, op.value, op.rules)).collect(),
            None => self.ctx.store.multi_write(&ops),
        };
        let mut written = Vec::with_capacity(ops.len());
        for r in results {
            match r {
                Ok(v) => written.push(Some(v)),
                Err(
                    StoreError::ObjectExists { .. } | StoreError::ObjectDoesntExist | StoreError::WrongVersion { .. },
                ) => written.push(None),
                Err(e) => return Err(store_error(e)),
            }
        }
        Ok(written)
    }

    /// Writes every (key, value) pair or none, atomically: `Ok(false)`, with
    /// nothing written, if `rules` refuse any pair. Keys must be distinct
    /// and at most [`shoal_engine::MAX_ATOMIC_BATCH`]; the caller checks both.
    pub fn write_all_or_nothing(&self, pairs: &[(&[u8], &[u8])], rules: RejectRules) -> Result<bool, ErrorReply> {
        let t = self.table_for_write()?;
        if let Some(txn) = self.txn.borrow_mut().as_mut() {
            // Every rule is checked before anything is staged.
            for (key, _) in pairs {
                match txn.check(t, key, &rules) {
                    Ok(()) => {}
                    Err(
                        StoreError::ObjectExists { .. }
                        | StoreError::ObjectDoesntExist
                        | StoreError::WrongVersion { .. },
                    ) => return Ok(false),
                    Err(e) => return Err(store_error(e)),
                }
            }
            for (key, value) in pairs {
                txn.write(t, key, value, RejectRules::default()).map_err(store_error)?;
            }
            return Ok(true);
        }
        let ops: Vec<WriteOp> = pairs.iter().map(|(key, value)| WriteOp::new(t, key, value, rules)).collect();
        match self.ctx.store.multi_write_all_or_nothing(&ops) {
            Ok(_) => Ok(true),
            Err((
                _,
                StoreError::ObjectExists { .. } | StoreError::ObjectDoesntExist | StoreError::WrongVersion { .. },
            )) => Ok(false),
            Err((_, e)) => Err(store_error(e)),
        }
    }

    /// Removes `key`; whether it existed.
    pub fn remove(&self, key: &[u8]) -> Result<bool, ErrorReply> {
        let Some(t) = self.table() else { return Ok(false) };
        let removed = match self.txn.borrow_mut().as_mut() {
            Some(txn) => txn.remove(t, key, RejectRules::default()),
            None => self.ctx.store.remove(t, key, RejectRules::default()),
        };
        match removed {
            Ok(v) => Ok(v.is_some()),
            Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                Ok(false)
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// Removes `key` if it is still at `version`; `Ok(false)` if it changed
    /// or is gone.
    pub fn remove_version(&self, key: &[u8], version: Version) -> Result<bool, ErrorReply> {
        let Some(t) = self.table() else { return Ok(false) };
        let rules = RejectRules::version_is(version);
        let removed = match self.txn.borrow_mut().as_mut() {
            Some(txn) => txn.remove(t, key, rules),
            None => self.ctx.store.remove(t, key, rules),
        };
        match removed {
            Ok(v) => Ok(v.is_some()),
            Err(StoreError::ObjectDoesntExist | StoreError::WrongVersion { .. } | StoreError::UnknownTable(_)) => {
                Ok(false)
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// Atomic read-modify-write of `key`: `step` sees the current value
    /// (`None` if missing) and decides; a write happens only if nobody
    /// changed the key in between, else `step` runs again on the new value.
    /// The value written gets `expiry` (`Expiry::Keep`: the key's own, as
    /// INCR and APPEND keep it).
    pub fn update<T>(
        &self,
        key: &[u8],
        scratch: &mut Vec<u8>,
        expiry: Expiry,
        mut step: impl FnMut(Option<&[u8]>) -> Result<Update<T>, ErrorReply>,
    ) -> Result<T, ErrorReply> {
        loop {
            let version = self.get_into(key, scratch)?;
            let decision = step(version.map(|_| scratch.as_slice()))?;
            let (value, result) = match decision {
                Update::Keep(r) => return Ok(r),
                Update::Write(value, r) => (value, r),
            };
            let rules = match version {
                Some(v) => RejectRules::version_is(v),
                None => RejectRules::must_not_exist(),
            };
            if self.write_with_expiry(key, &value, rules, expiry)? {
                return Ok(result);
            }
        }
    }

    /// The keys that `keep` accepts among those enumerated from `cursor` on
    /// (a key-hash position) up to key hash `end` included, and the cursor
    /// to continue from (`None`: the end of the table; `end + 1` once past
    /// `end`). At least `count` keys are examined unless the range ends (a
    /// few more may be), and no more once about `max_bytes` of keys are
    /// kept. Only keys are copied.
    pub fn scan(
        &self,
        cursor: u64,
        end: u64,
        count: usize,
        max_bytes: usize,
        mut keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<(Vec<Vec<u8>>, Option<u64>), ErrorReply> {
        if self.in_transaction() {
            return Err(NOT_IN_TRANSACTION);
        }
        let Some(t) = self.table() else { return Ok((Vec::new(), None)) };
        let bounded = end != u64::MAX;
        let mut keys = Vec::new();
        let (mut examined, mut bytes) = (0, 0);
        let mut next = Some(EnumCursor(cursor));
        // Steps of a few keys, so that the byte bound is checked often.
        while let Some(c) = next {
            if examined >= count || bytes >= max_bytes {
                break;
            }
            let step = (count - examined).min(SCAN_STEP);
            next = match self.ctx.store.enumerate_with(t, c, step, |key, _, _| {
                if bounded && key_hash(t, key).0 > end {
                    return;
                }
                examined += 1;
                if keep(key) {
                    bytes += key.len();
                    keys.push(key.to_vec());
                }
            }) {
                Ok(n) => n,
                Err(StoreError::UnknownTable(_)) => None,
                Err(e) => return Err(store_error(e)),
            };
            // The enumeration goes in key-hash order: past `end` is another tablet's.
            if bounded && next.is_none_or(|c| c.0 > end) {
                next = Some(EnumCursor(end + 1));
                break;
            }
        }
        Ok((keys, next.map(|c| c.0)))
    }

    /// Number of keys (expired ones not yet reclaimed included, as Redis
    /// counts them).
    pub fn len(&self) -> Result<u64, ErrorReply> {
        if self.in_transaction() {
            return Err(NOT_IN_TRANSACTION);
        }
        match self.table() {
            None => Ok(0),
            Some(t) => self.ctx.tables.len(t).map_err(store_error),
        }
    }

    /// Removes every key (not atomically: concurrent writes may survive).
    pub fn clear(&self) -> Result<(), ErrorReply> {
        if self.in_transaction() {
            return Err(NOT_IN_TRANSACTION);
        }
        match self.table() {
            None => Ok(()),
            Some(t) => self.ctx.tables.clear(t).map_err(store_error),
        }
    }
}
