//! Key choosers: uniform, and YCSB's scrambled Zipfian.

use rand::Rng;

/// Zipfian ranks over `0..n` with exponent `theta` (0 < theta < 1): rank
/// `i` has probability proportional to `1 / (i + 1)^theta`. The algorithm
/// of Gray et al., "Quickly Generating Billion-Record Synthetic Databases"
/// (SIGMOD 1994), as in YCSB's `ZipfianGenerator`.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// Takes O(n) to compute the normalising constant.
    pub fn new(n: u64, theta: f64) -> Zipfian {
        assert!(n >= 1 && theta > 0.0 && theta < 1.0, "zipfian needs n >= 1 and 0 < theta < 1");
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let eta = if n > 1 { (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan) } else { 0.0 };
        Zipfian { n, theta, alpha: 1.0 / (1.0 - theta), zetan, eta }
    }

    /// A rank in `0..n`; 0 is the most popular.
    pub fn rank(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if self.n > 1 && uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// 64-bit FNV-1a of a number's little-endian bytes (YCSB's scrambling hash).
pub fn fnv1a64(v: u64) -> u64 {
    v.to_le_bytes().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Picks which of `n` objects to touch next.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform(u64),
    /// Zipfian ranks scattered over the key space by [`fnv1a64`], so the
    /// popular keys are not neighbours (YCSB's `ScrambledZipfianGenerator`).
    ScrambledZipfian(Zipfian),
}

impl KeyChooser {
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        match self {
            KeyChooser::Uniform(n) => rng.gen_range(0..*n),
            KeyChooser::ScrambledZipfian(z) => fnv1a64(z.rank(rng)) % z.n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// Ranks 0 and 1 are drawn exactly; beyond them the algorithm is
    /// Gray's continuous approximation, so check the cumulative mass.
    #[test]
    fn zipfian_frequencies_match_the_distribution() {
        let (n, theta, draws) = (10_000u64, 0.99, 400_000);
        let z = Zipfian::new(n, theta);
        let mut rng = StdRng::seed_from_u64(1);
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[z.rank(&mut rng) as usize] += 1;
        }
        let zn = zeta(n, theta);
        for (i, &count) in counts.iter().enumerate().take(2) {
            let want = draws as f64 / ((i + 1) as f64).powf(theta) / zn;
            assert!((count as f64 - want).abs() < 0.05 * want, "rank {i}: {count} draws, expected {want:.0}");
        }
        for k in [100usize, 1000] {
            let want = zeta(k as u64, theta) / zn * draws as f64;
            let got = counts[..k].iter().sum::<u64>() as f64;
            assert!((got - want).abs() < 0.1 * want, "ranks below {k}: {got} draws, expected {want:.0}");
        }
    }

    #[test]
    fn scrambled_zipfian_stays_in_range_and_spreads_the_head() {
        let c = KeyChooser::ScrambledZipfian(Zipfian::new(1000, 0.99));
        let mut rng = StdRng::seed_from_u64(2);
        let picks: Vec<u64> = (0..10_000).map(|_| c.next(&mut rng)).collect();
        assert!(picks.iter().all(|&k| k < 1000));
        assert_ne!(fnv1a64(0) % 1000, 0);
        let u = KeyChooser::Uniform(7);
        assert!((0..1000).all(|_| u.next(&mut rng) < 7));
    }
}
