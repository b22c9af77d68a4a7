//! memcached items over the store's public operations: the objects of the
//! Redis front end's database 0 (table "db0"), so that both front ends see
//! the same keys.
//!
//! An item is an object whose value is the item's data, prefixed by its
//! client flags only when it needs them (see [`encode`]): an item stored
//! with flags 0 is exactly its bytes, so Redis GET reads what memcached
//! `set` wrote and memcached `get` reads what Redis SET wrote (flags 0).
//! Its cas unique is the object's version; its expiry the object's expiry.
//!
//! Errors are memcached's texts (`SERVER_ERROR ...`), ready to reply.

use crate::context::ServerContext;
use crate::resp::db::{Db, TableCache};
use shoal_engine::{Expiry, ObjectMeta, RejectRules, StoreError, TableId, Txn, UnixMillis, Version};
use std::cell::RefCell;

/// Marks a value that carries client flags: these 4 bytes, then the flags
/// (u32, big-endian), then the data. Never the first bytes of a value
/// written through memcached without this prefix: a flags-0 item whose
/// data starts with them is stored prefixed too.
pub const FLAGS_MAGIC: [u8; 4] = [0xff, b'm', b'c', b'F'];
/// Bytes the prefix adds.
pub const FLAGS_PREFIX: usize = 8;

/// Most seconds of an exptime that is relative (memcached's 30 days);
/// larger ones are Unix times.
pub const RELATIVE_MAX: i64 = 60 * 60 * 24 * 30;

/// The stored value of an item with `flags` and `data`, written into `out`.
pub fn encode(flags: u32, data: &[u8], out: &mut Vec<u8>) {
    out.clear();
    if flags != 0 || data.starts_with(&FLAGS_MAGIC) {
        out.extend_from_slice(&FLAGS_MAGIC);
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out.extend_from_slice(data);
}

/// The flags and data of a stored value.
pub fn decode(value: &[u8]) -> (u32, &[u8]) {
    if value.len() >= FLAGS_PREFIX && value.starts_with(&FLAGS_MAGIC) {
        let flags = u32::from_be_bytes([value[4], value[5], value[6], value[7]]);
        (flags, &value[FLAGS_PREFIX..])
    } else {
        (0, value)
    }
}

/// memcached's exptime as a store expiry, at `now`: 0 never expires, a
/// negative one is already expired, up to 30 days is relative seconds,
/// anything larger a Unix time (in the past: expired).
pub fn expiry(exptime: i64, now: UnixMillis) -> Expiry {
    match exptime {
        0 => Expiry::Never,
        e if e < 0 => Expiry::At(UnixMillis(now.0.saturating_sub(1).max(1))),
        e if e <= RELATIVE_MAX => Expiry::At(now.plus_ms(e as u64 * 1000)),
        e => Expiry::At(UnixMillis((e as u64).saturating_mul(1000)).max(UnixMillis(1))),
    }
}

/// The expiry time [`expiry`] gives, `None` for never.
pub fn expiry_time(exptime: i64, now: UnixMillis) -> Option<UnixMillis> {
    match expiry(exptime, now) {
        Expiry::At(t) => Some(t),
        _ => None,
    }
}

/// Seconds left before `meta`'s expiry, -1 for never (memcached's `t`).
pub fn ttl_secs(meta: &ObjectMeta, now: UnixMillis) -> i64 {
    match meta.expiry {
        None => -1,
        Some(at) => (at.0.saturating_sub(now.0)).div_ceil(1000) as i64,
    }
}

pub const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object";
pub const TOO_LARGE: &str = "SERVER_ERROR object too large for cache";

/// The reply to a store error no rule explains.
pub fn server_error(e: StoreError) -> String {
    match e {
        StoreError::OutOfMemory => OUT_OF_MEMORY.into(),
        StoreError::ValueTooLarge { .. } => TOO_LARGE.into(),
        other => format!("SERVER_ERROR {other}"),
    }
}

/// An item as read.
pub struct Found {
    pub meta: ObjectMeta,
    pub flags: u32,
    /// Where the data starts in the read buffer.
    pub offset: usize,
}

/// What a conditional write found.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Stored(Version),
    /// The key exists (add) or has another version (cas).
    Exists,
    /// The key is missing (replace, cas).
    NotFound,
}

/// The items of one connection (or one forwarded request).
pub struct Items<'a> {
    ctx: &'a ServerContext,
    cache: &'a TableCache,
    none: RefCell<Option<Txn>>,
}

impl<'a> Items<'a> {
    pub fn new(ctx: &'a ServerContext, cache: &'a TableCache) -> Items<'a> {
        Items { ctx, cache, none: RefCell::new(None) }
    }

    fn db(&self) -> Db<'_> {
        Db::new(self.ctx, 0, self.cache, &self.none)
    }

    /// The table, if it exists yet.
    pub fn table(&self) -> Option<TableId> {
        self.db().table()
    }

    /// The table, created if needed.
    pub fn table_for_write(&self) -> Result<TableId, String> {
        self.db().table_for_write().map_err(|e| {
            let text = String::from_utf8_lossy(e.text()).into_owned();
            format!("SERVER_ERROR {}", text.split_once(' ').map_or(&text[..], |(_, t)| t))
        })
    }

    pub fn now(&self) -> UnixMillis {
        self.ctx.store.now()
    }

    /// Reads `key` into `buf`; `None` if missing or expired.
    pub fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<Option<Found>, String> {
        let Some(t) = self.table() else { return Ok(None) };
        match self.ctx.store.read_meta_into(t, key, RejectRules::default(), buf) {
            Ok(meta) => {
                let (flags, data) = decode(buf);
                let offset = buf.len() - data.len();
                Ok(Some(Found { meta, flags, offset }))
            }
            Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                Ok(None)
            }
            Err(e) => Err(server_error(e)),
        }
    }

    /// The key's version and expiry; `None` if missing or expired.
    pub fn meta(&self, key: &[u8]) -> Result<Option<ObjectMeta>, String> {
        let Some(t) = self.table() else { return Ok(None) };
        match self.ctx.store.meta(t, key, RejectRules::default()) {
            Ok(meta) => Ok(Some(meta)),
            Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                Ok(None)
            }
            Err(e) => Err(server_error(e)),
        }
    }

    /// Writes the stored value `value` under `rules` with `expiry`.
    pub fn put(&self, key: &[u8], value: &[u8], rules: RejectRules, expiry: Expiry) -> Result<Written, String> {
        let t = self.table_for_write()?;
        match self.ctx.store.write_with_expiry(t, key, value, rules, expiry) {
            Ok(v) => Ok(Written::Stored(v)),
            Err(StoreError::ObjectExists { .. } | StoreError::WrongVersion { .. }) => Ok(Written::Exists),
            Err(StoreError::ObjectDoesntExist) => Ok(Written::NotFound),
            Err(e) => Err(server_error(e)),
        }
    }

    /// Gives `key` a new expiry (`None`: never) if it is at `version` (any
    /// version if `None`); the new version.
    pub fn touch(&self, key: &[u8], at: Option<UnixMillis>, version: Option<Version>) -> Result<Written, String> {
        let Some(t) = self.table() else { return Ok(Written::NotFound) };
        let rules = version.map_or_else(RejectRules::must_exist, RejectRules::version_is);
        match self.ctx.store.set_expiry(t, key, at, rules) {
            Ok(v) => Ok(Written::Stored(v)),
            Err(StoreError::WrongVersion { .. }) => Ok(Written::Exists),
            Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                Ok(Written::NotFound)
            }
            Err(e) => Err(server_error(e)),
        }
    }

    /// Removes `key` if it is at `version` (any if `None`).
    pub fn remove(&self, key: &[u8], version: Option<Version>) -> Result<Written, String> {
        let Some(t) = self.table() else { return Ok(Written::NotFound) };
        let rules = version.map_or_else(RejectRules::default, RejectRules::version_is);
        match self.ctx.store.remove(t, key, rules) {
            Ok(Some(v)) => Ok(Written::Stored(v)),
            Ok(None) => Ok(Written::NotFound),
            Err(StoreError::WrongVersion { .. }) => Ok(Written::Exists),
            Err(StoreError::ObjectDoesntExist | StoreError::UnknownTable(_) | StoreError::KeyTooLarge { .. }) => {
                Ok(Written::NotFound)
            }
            Err(e) => Err(server_error(e)),
        }
    }

    /// Number of items (expired ones not yet reclaimed included).
    pub fn count(&self) -> u64 {
        self.table().and_then(|t| self.ctx.tables.len(t).ok()).unwrap_or(0)
    }

    /// Removes every item.
    pub fn clear(&self) -> Result<(), String> {
        match self.table() {
            None => Ok(()),
            Some(t) => self.ctx.tables.clear(t).map_err(server_error),
        }
    }
}

/// memcached's reading of a counter's data (C's strtoull as memcached's
/// `safe_strtoull` uses it): leading spaces, an optional sign, digits, then
/// the end or a space; no digits reads as 0 when the data starts with a
/// space; empty data is not a number. `None`: not a number (or over 2^64 - 1).
pub fn parse_counter(data: &[u8]) -> Option<u64> {
    let start = data.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(data.len());
    let mut i = start;
    let negative = match data.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = data[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        // memcached refuses an empty value outright.
        return match data.first() {
            Some(c) if c.is_ascii_whitespace() => Some(0),
            _ => None,
        };
    }
    let end = i + digits;
    if data.get(end).is_some_and(|c| !c.is_ascii_whitespace()) {
        return None;
    }
    let mut n: u64 = 0;
    for &c in &data[i..end] {
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if negative {
        let n = n.wrapping_neg();
        // As safe_strtoull: a negative number that is not 0 is refused.
        return ((n as i64) >= 0).then_some(n);
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_keeps_flags_zero_values_as_they_are() {
        let mut out = Vec::new();
        encode(0, b"hello", &mut out);
        assert_eq!(out, b"hello");
        assert_eq!(decode(&out), (0, &b"hello"[..]));
        encode(7, b"hi", &mut out);
        assert_eq!(out.len(), 2 + FLAGS_PREFIX);
        assert_eq!(decode(&out), (7, &b"hi"[..]));
        let tricky = [&FLAGS_MAGIC[..], b"\0\0\0\x05x"].concat();
        encode(0, &tricky, &mut out);
        assert_eq!(decode(&out), (0, &tricky[..]));
    }

    #[test]
    fn expiry_follows_memcached() {
        let now = UnixMillis(1_700_000_000_000);
        assert_eq!(expiry(0, now), Expiry::Never);
        assert!(matches!(expiry(-1, now), Expiry::At(t) if t < now));
        assert_eq!(expiry(10, now), Expiry::At(UnixMillis(1_700_000_010_000)));
        assert_eq!(expiry(RELATIVE_MAX, now), Expiry::At(now.plus_ms(RELATIVE_MAX as u64 * 1000)));
        assert_eq!(expiry(1_800_000_000, now), Expiry::At(UnixMillis(1_800_000_000_000)));
        assert!(matches!(expiry(RELATIVE_MAX + 1, now), Expiry::At(t) if t < now));
    }

    #[test]
    fn parse_counter_reads_as_strtoull() {
        assert_eq!(parse_counter(b"10"), Some(10));
        assert_eq!(parse_counter(b"9 "), Some(9));
        assert_eq!(parse_counter(b"  12"), Some(12));
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"x"), None);
        assert_eq!(parse_counter(b"12x"), None);
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"-0"), Some(0));
    }
}
