//! The filter of a group's hot set that clients fetch each epoch: a Bloom
//! filter over the keys' 64-bit hashes (the hash the cluster already
//! routes by), so a client tests a key without rehashing it.
//!
//! Sizing (`Bloom::for_keys`): `m = -n ln p / (ln 2)^2` bits and
//! `k = (m / n) ln 2` probes; 100,000 keys at p = 0.1% take 1.44 Mbit
//! (180 KB) and 10 probes. Probes use double hashing of a remix of the
//! key hash (Kirsch and Mitzenmacher), so that filter positions do not
//! follow the hash ranges tablets are cut by.
//!
//! Encoding (`to_bytes`/`from_bytes`), little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | probes `k` (1-32) |
//! | 1 | 8 | bits `m` (64 to [`MAX_BITS`], a multiple of 64) |
//! | 9 | m / 8 | the bit array, 64-bit words, bit `i` of word `w` is position `64 w + i` |

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The most bits a filter may have: 16 Mibit (2 MiB), room for about 1.1 M
/// keys at 0.1%; `from_bytes` refuses more.
pub const MAX_BITS: u64 = 1 << 24;

/// The header's length in bytes.
pub const HEADER_LEN: usize = 9;

const REMIX_SEED: u64 = 0x5348_4f41_4c5f_5343; // "SHOAL_SC"

/// A Bloom filter of key hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bloom {
    probes: u32,
    words: Vec<u64>,
}

/// Why bytes are not a filter.
#[derive(Debug, PartialEq, Eq)]
pub enum BloomError {
    /// Shorter than the header or than the bit array it declares.
    Truncated,
    /// Longer than the bit array it declares.
    TrailingBytes,
    /// Probes outside 1-32, or bits not a multiple of 64 within 64 to
    /// [`MAX_BITS`].
    BadShape,
}

impl std::fmt::Display for BloomError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BloomError::Truncated => "hot-set filter truncated",
            BloomError::TrailingBytes => "hot-set filter has trailing bytes",
            BloomError::BadShape => "hot-set filter has an impossible shape",
        })
    }
}

impl std::error::Error for BloomError {}

impl Bloom {
    /// An empty filter sized for `keys` keys at false-positive rate `fp`
    /// (clamped to 1e-9..0.5), within [`MAX_BITS`].
    pub fn for_keys(keys: usize, fp: f64) -> Bloom {
        let fp = fp.clamp(1e-9, 0.5);
        let n = keys.max(1) as f64;
        let ln2 = std::f64::consts::LN_2;
        let bits = (-n * fp.ln() / (ln2 * ln2)).ceil().clamp(64.0, MAX_BITS as f64) as u64;
        let bits = bits.div_ceil(64) * 64;
        let probes = ((bits as f64 / n) * ln2).round().clamp(1.0, 32.0) as u32;
        Bloom { probes, words: vec![0; (bits / 64) as usize] }
    }

    /// The filter's size in bits.
    pub fn bits(&self) -> u64 {
        self.words.len() as u64 * 64
    }

    /// Probes per key.
    pub fn probes(&self) -> u32 {
        self.probes
    }

    fn positions(&self, key_hash: u64) -> impl Iterator<Item = u64> {
        let h = xxh3_64_with_seed(&key_hash.to_le_bytes(), REMIX_SEED);
        let (h1, h2) = (h, h.rotate_left(32) | 1);
        let bits = self.bits();
        (0..self.probes as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
    }

    /// Adds a key by its hash.
    pub fn insert(&mut self, key_hash: u64) {
        for p in self.positions(key_hash).collect::<Vec<_>>() {
            self.words[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    /// False if the key is surely not in the set; true if it may be.
    pub fn contains(&self, key_hash: u64) -> bool {
        self.positions(key_hash).all(|p| self.words[(p / 64) as usize] & (1 << (p % 64)) != 0)
    }

    /// The encoding above.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.words.len() * 8);
        out.push(self.probes as u8);
        out.extend_from_slice(&self.bits().to_le_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Decodes [`Bloom::to_bytes`]'s encoding, checking every length
    /// before using it (the bytes come from the network).
    pub fn from_bytes(bytes: &[u8]) -> Result<Bloom, BloomError> {
        if bytes.len() < HEADER_LEN {
            return Err(BloomError::Truncated);
        }
        let probes = bytes[0] as u32;
        let bits = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));
        if !(1..=32).contains(&probes) || !(64..=MAX_BITS).contains(&bits) || bits % 64 != 0 {
            return Err(BloomError::BadShape);
        }
        let body = &bytes[HEADER_LEN..];
        let want = (bits / 8) as usize;
        if body.len() < want {
            return Err(BloomError::Truncated);
        }
        if body.len() > want {
            return Err(BloomError::TrailingBytes);
        }
        let words = body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        Ok(Bloom { probes, words })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn for_keys_sizes_as_the_formula_says() {
        let b = Bloom::for_keys(100_000, 0.001);
        assert_eq!(b.bits(), 1_437_760);
        assert_eq!(b.probes(), 10);
        assert_eq!(b.to_bytes().len(), HEADER_LEN + 179_720);
    }

    #[test]
    fn contains_has_no_false_negatives_and_the_false_positive_rate_asked() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let keys: Vec<u64> = (0..100_000).map(|_| rng.gen()).collect();
        let mut b = Bloom::for_keys(keys.len(), 0.001);
        for &k in &keys {
            b.insert(k);
        }
        assert!(keys.iter().all(|&k| b.contains(k)));
        let probes = 1_000_000;
        let fp = (0..probes).filter(|_| b.contains(rng.gen())).count();
        assert!(fp < probes / 700, "{fp} false positives in {probes} (asked 0.1%)");
    }

    #[test]
    fn from_bytes_round_trips_and_refuses_bad_input() {
        let mut b = Bloom::for_keys(50, 0.01);
        b.insert(1);
        b.insert(u64::MAX);
        let bytes = b.to_bytes();
        assert_eq!(Bloom::from_bytes(&bytes), Ok(b));
        assert_eq!(Bloom::from_bytes(&bytes[..5]), Err(BloomError::Truncated));
        assert_eq!(Bloom::from_bytes(&bytes[..bytes.len() - 1]), Err(BloomError::Truncated));
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Bloom::from_bytes(&long), Err(BloomError::TrailingBytes));
        let mut bad = bytes.clone();
        bad[0] = 0;
        assert_eq!(Bloom::from_bytes(&bad), Err(BloomError::BadShape));
        let mut huge = bytes.clone();
        huge[1..9].copy_from_slice(&(MAX_BITS * 2).to_le_bytes());
        assert_eq!(Bloom::from_bytes(&huge), Err(BloomError::BadShape));
        let mut odd = bytes;
        odd[1..9].copy_from_slice(&100u64.to_le_bytes());
        assert_eq!(Bloom::from_bytes(&odd), Err(BloomError::BadShape));
    }
}
