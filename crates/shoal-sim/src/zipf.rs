//! Exact Zipf sampling by rejection-inversion (Hörmann and Derflinger,
//! "Rejection-inversion to generate variates from monotone discrete
//! distributions", 1996).
//!
//! Contract: `Zipf::new(n, s)` draws ranks `1..=n` with probability
//! `k^-s / H(n, s)` exactly (not an approximation), in O(1) expected time
//! per draw and O(1) memory, for any `n >= 1` and `s > 0`. Rank 1 is the
//! most popular. The expected number of uniform draws per sample is below
//! 1.1 for the exponents that matter here.
//!
//! Implementation details: the method inverts the integral `H` of the
//! continuous hat function `h(x) = x^-s` over `[1.5, n + 0.5]`, rounds the
//! result to the nearest integer `k`, and accepts it when the uniform point
//! falls under the bar of height `k^-s` centred on `k`. `H` and its inverse
//! are written through `expm1`/`ln_1p`-style helpers so that `s` close to 1
//! (0.99 is the default) loses no precision.

use rand::Rng;

/// A Zipf distribution over ranks `1..=n`.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    squeeze: f64,
}

impl Zipf {
    /// Panics if `n == 0` or `s < 0` (a scenario is validated before this).
    pub fn new(n: u64, s: f64) -> Zipf {
        assert!(n >= 1 && s >= 0.0, "Zipf needs n >= 1 and s >= 0");
        let mut z = Zipf { n: n as f64, s, h_x1: 0.0, h_n: 0.0, squeeze: 0.0 };
        z.h_x1 = z.big_h(1.5) - 1.0;
        z.h_n = z.big_h(z.n + 0.5);
        z.squeeze = 2.0 - z.big_h_inv(z.big_h(2.5) - z.h(2.0));
        z
    }

    /// Draws one rank in `1..=n`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            let u = self.h_n + rng.gen::<f64>() * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            let k = x.round().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.big_h(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// The exact probability of rank `k` (sums `n` terms once per call:
    /// for tests and reports, not for the sampling path).
    pub fn probability(&self, k: u64) -> f64 {
        self.h(k as f64) / harmonic(self.n as u64, self.s)
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// `H(x) = (x^(1-s) - 1) / (1 - s)`, or `ln x` when `s == 1`.
    fn big_h(&self, x: f64) -> f64 {
        let lx = x.ln();
        expm1_over_x((1.0 - self.s) * lx) * lx
    }

    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        (ln1p_over_x(t) * y).exp()
    }
}

/// `(e^x - 1) / x`, continuous at 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x / 2.0 * (1.0 + x / 3.0 * (1.0 + x / 4.0))
    }
}

/// `ln(1 + x) / x`, continuous at 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// The generalised harmonic number `H(n, s) = sum_{k=1..n} k^-s`: exact
/// summation up to a million terms, beyond that the exact head plus an
/// Euler-Maclaurin tail (error far below 1e-9 relative).
pub fn harmonic(n: u64, s: f64) -> f64 {
    const HEAD: u64 = 1_000_000;
    let m = n.min(HEAD);
    // Sum small terms first for accuracy.
    let mut sum: f64 = (1..=m).rev().map(|k| (k as f64).powf(-s)).sum();
    if n > m {
        sum += tail(m as f64, n as f64, s);
    }
    sum
}

/// `sum_{k=a+1..b} k^-s` by Euler-Maclaurin: integral plus end corrections.
fn tail(a: f64, b: f64, s: f64) -> f64 {
    let integral = if (s - 1.0).abs() < 1e-12 { (b / a).ln() } else { (b.powf(1.0 - s) - a.powf(1.0 - s)) / (1.0 - s) };
    let f = |x: f64| x.powf(-s);
    let df = |x: f64| -s * x.powf(-s - 1.0);
    integral + (f(b) - f(a)) / 2.0 + (df(b) - df(a)) / 12.0
}

/// The fraction of accesses that go to the `c` most popular of `n` keys.
pub fn head_mass(c: u64, n: u64, s: f64) -> f64 {
    if c == 0 {
        return 0.0;
    }
    harmonic(c.min(n), s) / harmonic(n, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Pearson's chi-square of `draws` samples against the exact pmf.
    fn chi_square(n: u64, s: f64, draws: u64) -> f64 {
        let z = Zipf::new(n, s);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut counts = vec![0u64; n as usize + 1];
        for _ in 0..draws {
            let k = z.sample(&mut rng);
            assert!((1..=n).contains(&k));
            counts[k as usize] += 1;
        }
        let hn = harmonic(n, s);
        (1..=n)
            .map(|k| {
                let e = draws as f64 * (k as f64).powf(-s) / hn;
                (counts[k as usize] as f64 - e).powi(2) / e
            })
            .sum()
    }

    #[test]
    fn sample_matches_exact_pmf_on_small_key_space() {
        // 49 degrees of freedom: the 99.9% quantile of chi-square is 85.4.
        for s in [0.0, 0.5, 0.99, 1.0, 1.5] {
            let x2 = chi_square(50, s, 400_000);
            assert!(x2 < 85.4, "s={s}: chi-square {x2}");
        }
    }

    #[test]
    fn sample_single_key_space_always_returns_one() {
        let z = Zipf::new(1, 0.99);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!((0..1000).all(|_| z.sample(&mut rng) == 1));
    }

    #[test]
    fn harmonic_tail_matches_direct_sum() {
        let direct: f64 = (1..=3_000_000u64).rev().map(|k| (k as f64).powf(-0.99)).sum();
        let h = harmonic(3_000_000, 0.99);
        assert!((h - direct).abs() / direct < 1e-10, "{h} vs {direct}");
    }

    #[test]
    fn head_mass_of_default_cache_is_about_sixty_percent() {
        // Katsarakis Fig. 3.2: 0.1% of 250 M keys takes well over half.
        let m = head_mass(250_000, 250_000_000, 0.99);
        assert!((0.6..0.66).contains(&m), "{m}");
    }
}
