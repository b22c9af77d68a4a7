//! Identifiers shared by every Shoal component, and the key-hash function
//! that routes a key to its tablet.
//!
//! Every id is a newtype so that a table id can never be passed where a
//! version or a segment id is expected. The key hash is part of Shoal's
//! protocol: it must never change (see `docs/log-format.md`, "Key hash").

pub mod dirlock;
pub mod os;
pub mod slots;
pub mod stream;
pub mod tls;

use std::fmt;

pub use stream::{streamlet_key, StreamOffset, StreamShape};

/// A table's 64-bit id. Names belong to the coordinator; the store only sees ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct TableId(pub u64);

/// An object's version. Assigned by the master, strictly increasing per key,
/// also across a remove and re-create of the same key (the safe version).
/// Version 0 is never assigned: it means "no object".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Version(pub u64);

/// A segment's id, unique and ascending within one log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct SegmentId(pub u64);

/// The id of a log (one per master incarnation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct LogId(pub u64);

/// A chunk's 64-bit id (DXRAM): the 16-bit node id of the server that
/// created it in the top bits and a 48-bit local id below. Local ids start
/// at 1, so a chunk id is never 0; ids of removed chunks are reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ChunkId(pub u64);

impl ChunkId {
    /// Bits of the local id.
    pub const LOCAL_BITS: u32 = 48;
    /// The largest local id.
    pub const MAX_LOCAL: u64 = (1 << Self::LOCAL_BITS) - 1;

    /// The chunk id of `local` (at most [`ChunkId::MAX_LOCAL`]; higher bits are dropped) on `node`.
    pub fn new(node: u16, local: u64) -> ChunkId {
        ChunkId(((node as u64) << Self::LOCAL_BITS) | (local & Self::MAX_LOCAL))
    }

    /// The id of the server that created the chunk.
    pub fn node(self) -> u16 {
        (self.0 >> Self::LOCAL_BITS) as u16
    }

    /// The id within its creating server's range.
    pub fn local(self) -> u64 {
        self.0 & Self::MAX_LOCAL
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The 64-bit hash of (table id, key) that routes a key. See [`key_hash`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct KeyHash(pub u64);

/// A wall-clock time: milliseconds since the Unix epoch (1970-01-01 UTC),
/// as Redis keeps expiry times. An object's expiry is one: absolute, so it
/// means the same after a restart and on another machine. An object whose
/// expiry is at or before the current time is expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// This machine's wall clock now (0 if it reads before the epoch).
    pub fn now() -> UnixMillis {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        UnixMillis(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    /// `ms` milliseconds later, saturating at the largest time.
    pub fn plus_ms(self, ms: u64) -> UnixMillis {
        UnixMillis(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn ms_since(self, earlier: UnixMillis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Conditions on an object's version under which an operation is refused
/// (RAMCloud's reject rules). The default rejects nothing. Shared by the
/// store, the wire format and the client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RejectRules {
    /// The version the `version_*` rules compare with.
    pub given_version: Version,
    /// Refuse if the object does not exist.
    pub doesnt_exist: bool,
    /// Refuse if the object exists.
    pub exists: bool,
    /// Refuse if the object exists with version <= `given_version`.
    pub version_le_given: bool,
    /// Refuse if the object exists with version != `given_version`.
    pub version_ne_given: bool,
}

impl RejectRules {
    /// Only if the object's version is exactly `v` (compare-and-swap).
    pub fn version_is(v: Version) -> Self {
        RejectRules { given_version: v, doesnt_exist: true, version_ne_given: true, ..Default::default() }
    }

    /// Only if the object exists.
    pub fn must_exist() -> Self {
        RejectRules { doesnt_exist: true, ..Default::default() }
    }

    /// Only if the object does not exist.
    pub fn must_not_exist() -> Self {
        RejectRules { exists: true, ..Default::default() }
    }
}

/// Largest key the system accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 64 * 1024;

/// Default largest value, in bytes (configurable per store).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1024 * 1024;

/// Shoal's key hash: XXH3-64 (seed 0) over the table id as 8 little-endian
/// bytes followed by the key bytes; for a slot-hashed table (the flag
/// [`slots::SLOT_HASHED`] in its id) the Redis Cluster slot of the key in
/// the top 14 bits, above the top 50 bits of that XXH3 (see [`slots`]).
///
/// This function is part of the protocol: clients in every language compute
/// it to route requests, so it is stable across versions and platforms. Test
/// vectors are in `docs/log-format.md` and in the tests below.
pub fn key_hash(table: TableId, key: &[u8]) -> KeyHash {
    let h = xxh3_of(table, key);
    KeyHash(if table.is_slot_hashed() { slots::slot_hash(key, h) } else { h })
}

/// XXH3-64 over the table id (8 bytes, little-endian) and the key. A key
/// of up to [`ONE_SHOT_KEY_BYTES`] is hashed in one call over a copy on the
/// stack: the streaming hasher costs several times more for short inputs
/// (it sets up and then drains a 256-byte buffer), and XXH3 of the same
/// bytes is the same value either way.
#[inline]
fn xxh3_of(table: TableId, key: &[u8]) -> u64 {
    if key.len() <= ONE_SHOT_KEY_BYTES {
        let mut buf = [0u8; 8 + ONE_SHOT_KEY_BYTES];
        buf[..8].copy_from_slice(&table.0.to_le_bytes());
        buf[8..8 + key.len()].copy_from_slice(key);
        return xxhash_rust::xxh3::xxh3_64(&buf[..8 + key.len()]);
    }
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&table.0.to_le_bytes());
    hasher.update(key);
    hasher.digest()
}

/// Longest key [`xxh3_of`] hashes in one call.
const ONE_SHOT_KEY_BYTES: usize = 120;

/// [`key_hash`] for a caller that already knows the key's Redis Cluster
/// slot (`slots::key_slot(key)`), which a slot-hashed table's hash holds:
/// saves computing it twice.
pub fn key_hash_in_slot(table: TableId, key: &[u8], slot: u16) -> KeyHash {
    debug_assert_eq!(slot, slots::key_slot(key));
    let h = xxh3_of(table, key);
    KeyHash(if table.is_slot_hashed() { slots::slot_hash_with(slot, h) } else { h })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_in_slot_is_key_hash() {
        for table in [TableId(7), TableId(7 | slots::SLOT_HASHED)] {
            for key in [&b"a"[..], b"{user}:1", b""] {
                assert_eq!(key_hash_in_slot(table, key, slots::key_slot(key)), key_hash(table, key));
            }
        }
    }

    /// The documented test vectors (cross-checked with Python's `xxhash`
    /// package). If this test fails, the protocol broke.
    #[test]
    fn key_hash_matches_test_vectors() {
        let direct = |t: u64, k: &[u8]| {
            let mut buf = t.to_le_bytes().to_vec();
            buf.extend_from_slice(k);
            xxhash_rust::xxh3::xxh3_64(&buf)
        };
        for (t, k) in [(0u64, &b""[..]), (1, b"a"), (7, b"user:1000"), (1 << 40, b"\x00\xff")] {
            assert_eq!(key_hash(TableId(t), k).0, direct(t, k));
        }
        assert_eq!(key_hash(TableId(0), b"").0, 0xc77b_3abb_6f87_acd9);
        assert_eq!(key_hash(TableId(1), b"a").0, 0xc777_2475_8a6e_c4d1);
        assert_eq!(key_hash(TableId(7), b"user:1000").0, 0x8a01_8683_baf2_cb8a);
        assert_eq!(key_hash(TableId(1 << 40), b"\x00\xff").0, 0x3ddd_f62c_2c38_3f28);
        // Slot-hashed table 65 (number 1, flag 64): the slot (12182, 3443) on top.
        assert_eq!(key_hash(TableId(65), b"foo").0, 0xbe5a_5e06_cccf_c836);
        assert_eq!(key_hash(TableId(65), b"{user1000}.following").0, 0x35cc_5a1b_4139_4a5b);
    }

    /// The one-shot path for short keys and the streaming one for long keys
    /// give XXH3 of the same bytes, on both sides of the threshold.
    #[test]
    fn short_and_long_keys_hash_as_their_bytes() {
        let key: Vec<u8> = (0..400u32).map(|i| (i * 31 % 251) as u8).collect();
        for len in 0..key.len() {
            let t = TableId(0x0102_0304_0506_0708 ^ len as u64);
            let mut streaming = xxhash_rust::xxh3::Xxh3::new();
            streaming.update(&t.0.to_le_bytes());
            streaming.update(&key[..len]);
            assert_eq!(xxh3_of(t, &key[..len]), streaming.digest(), "key of {len} bytes");
        }
    }
}
