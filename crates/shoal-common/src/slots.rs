//! Redis Cluster's key slots, and how a slot-hashed table's key hashes
//! carry them.
//!
//! A Redis Cluster client routes a key by its slot: CRC16 (XMODEM) of the
//! key, or of its `{hash tag}` if it has one, modulo 16,384. For such a
//! client to find a key's master from the slot alone, every key of a slot
//! must live in one tablet. Shoal's tablets are key-hash ranges, so a
//! table created *slot-hashed* (the Redis databases of a cluster: the flag
//! [`SLOT_HASHED`] in its id) gets key hashes whose top 14 bits are the
//! slot and whose low 50 bits are the top 50 bits of the ordinary XXH3
//! hash:
//!
//! ```text
//!   63          50 49                                   0
//!  +--------------+--------------------------------------+
//!  |  slot (14)   |  XXH3-64(table id LE || key) >> 14   |
//!  +--------------+--------------------------------------+
//! ```
//!
//! A hash range aligned to slot boundaries ([`slot_range_hashes`]) is then
//! exactly a range of slots, and every tablet of a slot-hashed table is
//! created and split on such boundaries. Within a slot the hashes are
//! uniform, so the hash table's buckets (in key-hash order) spread the
//! keys of a slot over `buckets / 16384` buckets: many keys under one hash
//! tag share few buckets, as they share one node in Redis Cluster.

use crate::TableId;

/// Number of Redis Cluster slots.
pub const SLOTS: u16 = 16384;

/// The flag bit of a [`TableId`] that makes the table slot-hashed. Bit 6,
/// so that the first 64 tables of either kind have ids below 128, one byte
/// as the varint in every log entry ([`table_id`] spreads the numbers
/// around it).
pub const SLOT_HASHED: u64 = 1 << 6;

/// Bits of a slot-hashed key hash below the slot.
const SLOT_SHIFT: u32 = 50;

const XMODEM: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

impl TableId {
    /// Whether keys of this table hash by Redis Cluster slot.
    pub fn is_slot_hashed(self) -> bool {
        self.0 & SLOT_HASHED != 0
    }
}

/// The id of the table numbered `number` (a counter starting at 1): its
/// low 6 bits, the flag, then the rest of the number. Ids of different
/// numbers never collide, whatever their flags.
pub fn table_id(number: u64, slots: bool) -> TableId {
    TableId((number & (SLOT_HASHED - 1)) | (u64::from(slots) << 6) | ((number >> 6) << 7))
}

/// The number [`table_id`] made `id` from.
pub fn table_number(id: TableId) -> u64 {
    (id.0 & (SLOT_HASHED - 1)) | ((id.0 >> 7) << 6)
}

/// The part of `key` that Redis Cluster hashes: the bytes between the
/// first `{` and the first `}` after it, if that is not empty; else the
/// whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// `key`'s Redis Cluster slot (`CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> u16 {
    XMODEM.checksum(hash_tag(key)) % SLOTS
}

/// The key hash of `key` in a slot-hashed table (see the module comment),
/// from the ordinary XXH3 hash `xxh3`.
pub(crate) fn slot_hash(key: &[u8], xxh3: u64) -> u64 {
    slot_hash_with(key_slot(key), xxh3)
}

/// [`slot_hash`] of a key whose slot is `slot`.
pub(crate) fn slot_hash_with(slot: u16, xxh3: u64) -> u64 {
    (u64::from(slot) << SLOT_SHIFT) | (xxh3 >> (64 - SLOT_SHIFT))
}

/// The slot a slot-hashed table's key hash belongs to.
pub fn slot_of_hash(hash: u64) -> u16 {
    (hash >> SLOT_SHIFT) as u16
}

/// The inclusive key-hash range of slots `first..=last` (`last < 16384`).
pub fn slot_range_hashes(first: u16, last: u16) -> (u64, u64) {
    debug_assert!(first <= last && last < SLOTS);
    let start = u64::from(first) << SLOT_SHIFT;
    let end = (u64::from(last) << SLOT_SHIFT) | ((1u64 << SLOT_SHIFT) - 1);
    (start, end)
}

/// The slots `(first, last)` that the key-hash range `[start, end]` covers
/// exactly, or `None` if it does not start and end on slot boundaries.
pub fn hashes_slot_range(start: u64, end: u64) -> Option<(u16, u16)> {
    let low = (1u64 << SLOT_SHIFT) - 1;
    (start & low == 0 && end & low == low && start <= end).then(|| (slot_of_hash(start), slot_of_hash(end)))
}

/// Splits slots `first..=last` into at most `n` (>= 1) contiguous ranges of
/// nearly equal size covering them once, as key-hash ranges.
pub fn split_slots(first: u16, last: u16, n: u64) -> Vec<(u64, u64)> {
    let count = u64::from(last - first) + 1;
    let n = n.clamp(1, count);
    (0..n)
        .map(|i| {
            let a = first + (count * i / n) as u16;
            let b = first + (count * (i + 1) / n - 1) as u16;
            slot_range_hashes(a, b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_hash;

    /// Slots as `CLUSTER KEYSLOT` of Redis 7.0.15 answers them.
    #[test]
    fn key_slot_matches_redis() {
        for (key, slot) in [
            (&b"foo"[..], 12182),
            (b"bar", 5061),
            (b"{user1000}.following", 3443),
            (b"", 0),
            (b"{}", 15257),
            (b"a{}b", 13694),
            (b"{a}{b}", 15495),
            (b"{{x}}", 11068),
            (b"123456789", 12739),
        ] {
            assert_eq!(key_slot(key), slot, "{:?}", String::from_utf8_lossy(key));
        }
        assert_eq!(key_slot(b"{a}{b}"), key_slot(b"a"));
        assert_eq!(key_slot(b"x{user}y"), key_slot(b"{user}"));
    }

    #[test]
    fn slot_hashed_keys_hash_into_their_slots_range() {
        let table = table_id(7, true);
        assert_eq!(table, TableId(71));
        assert!(table.is_slot_hashed() && !TableId(7).is_slot_hashed());
        for key in [&b"foo"[..], b"bar", b"{user1000}.following", b"k:1", b"k:2"] {
            let h = key_hash(table, key).0;
            let slot = key_slot(key);
            assert_eq!(slot_of_hash(h), slot);
            let (s, e) = slot_range_hashes(slot, slot);
            assert!(s <= h && h <= e);
        }
        // Same tag, same slot, different hashes.
        let (a, b) = (key_hash(table, b"{u}:a").0, key_hash(table, b"{u}:b").0);
        assert_eq!(slot_of_hash(a), slot_of_hash(b));
        assert_ne!(a, b);
    }

    #[test]
    fn table_ids_round_trip_and_stay_small() {
        for n in [1u64, 2, 63, 64, 65, 1000, 1 << 40] {
            for slots in [false, true] {
                let id = table_id(n, slots);
                assert_eq!(table_number(id), n);
                assert_eq!(id.is_slot_hashed(), slots);
            }
            assert_ne!(table_id(n, false), table_id(n, true));
        }
        assert!(table_id(63, true).0 < 128 && table_id(63, false).0 < 128);
        assert_eq!(table_id(1, false), TableId(1), "plain ids are unchanged below 64");
    }

    #[test]
    fn split_slots_covers_the_slots_once_on_boundaries() {
        for n in [1u64, 2, 3, 4, 7, 16384, 20000] {
            let r = split_slots(0, SLOTS - 1, n);
            assert_eq!(r.len() as u64, n.min(16384));
            assert_eq!(r[0].0, 0);
            assert_eq!(r.last().unwrap().1, u64::MAX);
            for w in r.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
            for &(s, e) in &r {
                assert!(hashes_slot_range(s, e).is_some());
            }
        }
        assert_eq!(split_slots(10, 12, 5).len(), 3);
        assert_eq!(hashes_slot_range(0, u64::MAX), Some((0, SLOTS - 1)));
        assert_eq!(hashes_slot_range(1, u64::MAX), None);
        assert_eq!(hashes_slot_range(0, u64::MAX - 1), None);
    }
}
