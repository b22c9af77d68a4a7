//! The arithmetic of INCRBYFLOAT as Redis does it on x86-64 Linux, in
//! software: C's `long double` there is the x87 80-bit extended format (a
//! 64-bit mantissa, exponents down to 2^-16445 with subnormals, up to about
//! 1.19e4932). Redis parses both numbers with glibc's `strtold`, adds them
//! and prints the sum with `"%.17Lf"`, trailing zeros (and a bare point)
//! removed. An `f64` gives other digits for many sums, and refuses numbers
//! past 1.8e308 that Redis accepts; here every step is exact, then rounded
//! once as the hardware does (to nearest, ties to even):
//!
//! * [`parse`]: the text `strtold` accepts in full (decimal, hexadecimal
//!   with an optional binary exponent, `inf`/`infinity`), with Redis's
//!   refusals: a number that overflows, or underflows to zero, and NaN.
//! * [`add`]: the correctly rounded sum.
//! * [`format_human`]: `"%.17Lf"` with glibc's exact decimal expansion.
//!
//! Numbers are held exactly as `mantissa * 2^exp`; intermediate values are
//! a small unsigned big integer ([`Big`]). Inputs are bounded by the caller
//! (Redis refuses texts of 5120 bytes or more), so the work per call is
//! bounded too (at most some tens of thousands of bits per number).

use std::cmp::Ordering;

/// Exponent of the lowest mantissa bit of the smallest numbers
/// (subnormals and the least normal exponent).
const MIN_EXP: i64 = -16445;
/// Exponent of the lowest mantissa bit of the largest finite numbers.
const MAX_EXP: i64 = 16383 - 63;
/// Redis's bound on a number's text (`MAX_LONG_DOUBLE_CHARS`): longer is
/// not a valid float.
pub const MAX_TEXT: usize = 5 * 1024;

/// An 80-bit extended value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongDouble {
    /// `mant * 2^exp`, negative if `neg` (zero keeps its sign). Normal:
    /// `mant` has its top bit set and `exp` is in `MIN_EXP..=MAX_EXP`;
    /// subnormal: `exp == MIN_EXP` and the top bit clear.
    Finite {
        neg: bool,
        mant: u64,
        exp: i64,
    },
    Inf {
        neg: bool,
    },
    NaN,
}

impl LongDouble {
    pub fn is_finite(&self) -> bool {
        matches!(self, LongDouble::Finite { .. })
    }
}

/// Parses `text` as Redis's `string2ld` does: all of it must be a number
/// `strtold` reads, without leading space, not NaN, and neither
/// overflowing nor rounding to zero. `None`: not a valid float.
pub fn parse(text: &[u8]) -> Option<LongDouble> {
    if text.is_empty() || text.len() >= MAX_TEXT {
        return None;
    }
    let (neg, rest) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Some(LongDouble::Inf { neg });
    }
    let (mag, exp2, exp10) = if rest.len() > 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        let (mag, exp2) = parse_hex(&rest[2..])?;
        (mag, exp2, 0)
    } else {
        let (mag, exp10) = parse_decimal(rest)?;
        (mag, 0, exp10)
    };
    if mag.is_zero() {
        return Some(LongDouble::Finite { neg, mant: 0, exp: 0 });
    }
    let value = if exp10 >= 0 {
        // Past about 10^4933 the value overflows: decide before building
        // 10^exp10 (the exponent may be huge).
        if mag.decimal_digits_at_least() as i64 + exp10 > 4940 {
            return None;
        }
        round(neg, mag.mul(&Big::pow10(exp10 as u64)), exp2, false)
    } else {
        // Below about 10^-4952 it rounds to zero.
        if (mag.bits() as i64) * 30103 / 100000 + 1 + exp10 < -4955 {
            return None;
        }
        let (q, shift, sticky) = divide(&mag, &Big::pow10(exp10.unsigned_abs()));
        round(neg, q, -shift, sticky)
    };
    match value {
        LongDouble::Finite { mant: 0, .. } | LongDouble::Inf { .. } => None,
        v => Some(v),
    }
}

/// Decimal digits with an optional point and an optional exponent (at
/// least one digit before or after the point): the digits as an integer
/// and the power of ten to scale it by.
fn parse_decimal(s: &[u8]) -> Option<(Big, i64)> {
    let mut mag = Big::zero();
    let mut digits = 0usize;
    let mut frac = 0i64;
    let mut seen_point = false;
    let mut i = 0;
    let mut chunk = 0u32;
    let mut chunk_len = 0u32;
    while i < s.len() {
        match s[i] {
            c @ b'0'..=b'9' => {
                chunk = chunk * 10 + (c - b'0') as u32;
                chunk_len += 1;
                if chunk_len == 9 {
                    mag.mul_add_small(1_000_000_000, chunk);
                    (chunk, chunk_len) = (0, 0);
                }
                digits += 1;
                frac += seen_point as i64;
            }
            b'.' if !seen_point => seen_point = true,
            _ => break,
        }
        i += 1;
    }
    mag.mul_add_small(10u32.pow(chunk_len), chunk);
    if digits == 0 {
        return None;
    }
    let exp = if i < s.len() { parse_exponent(&s[i + 1..]).filter(|_| s[i] | 0x20 == b'e')? } else { 0 };
    Some((mag, exp - frac))
}

/// Hexadecimal digits after "0x" with an optional point and an optional
/// binary exponent ("p-3"): the digits as an integer and the power of two
/// to scale it by.
fn parse_hex(s: &[u8]) -> Option<(Big, i64)> {
    let mut mag = Big::zero();
    let mut digits = 0usize;
    let mut frac = 0i64;
    let mut seen_point = false;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'.' if !seen_point => seen_point = true,
            c if c.is_ascii_hexdigit() => {
                let d = (c as char).to_digit(16).unwrap_or(0);
                // Leading zeros add nothing; bound the integer's size.
                if !mag.is_zero() || d != 0 {
                    if mag.bits() > 40_000 {
                        return None;
                    }
                    mag.mul_add_small(16, d);
                }
                digits += 1;
                frac += 4 * seen_point as i64;
            }
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    let exp = if i < s.len() { parse_exponent(&s[i + 1..]).filter(|_| s[i] | 0x20 == b'p')? } else { 0 };
    Some((mag, exp - frac))
}

/// An exponent: optional sign and at least one digit, all of `s`. Values
/// are clamped to a million either way (far past any finite number).
fn parse_exponent(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0i64, |v, &d| (v * 10 + (d - b'0') as i64).min(1_000_000));
    Some(if neg { -v } else { v })
}

/// `num / den` to 66 or 67 significant bits: (quotient, shift, whether a
/// remainder was left) with `num / den ≈ quotient * 2^-shift`.
fn divide(num: &Big, den: &Big) -> (Big, i64, bool) {
    let shift = 66 - (num.bits() as i64 - den.bits() as i64);
    let (mut rem, den) =
        if shift >= 0 { (num.shl(shift as u64), den.clone()) } else { (num.clone(), den.shl(shift.unsigned_abs())) };
    // The quotient is below 2^67: one bit per step, from the top.
    let mut q = 0u128;
    for bit in (0..=67).rev() {
        let d = den.shl(bit);
        if rem.cmp(&d) != Ordering::Less {
            rem.sub_assign(&d);
            q |= 1 << bit;
        }
    }
    (Big::from_u128(q), shift, !rem.is_zero())
}

/// Rounds `mag * 2^exp` (plus a little more if `sticky`: a nonzero part
/// below the lowest bit of `mag`, which must then have at least 66 bits)
/// to the nearest extended value, ties to even.
fn round(neg: bool, mag: Big, exp: i64, sticky: bool) -> LongDouble {
    if mag.is_zero() {
        return LongDouble::Finite { neg, mant: 0, exp: 0 };
    }
    let target = (exp + mag.bits() as i64 - 64).max(MIN_EXP);
    let (mant, exp) = if target <= exp {
        // Exact: the bits fit (shifted up, to normalize).
        (mag.low_u64() << (exp - target), target)
    } else {
        let drop = (target - exp) as u64;
        let kept = mag.shr(drop).low_u64();
        let half = mag.bit(drop - 1);
        let below = sticky || mag.any_below(drop - 1);
        if half && (below || kept & 1 == 1) {
            match kept.checked_add(1) {
                Some(k) => (k, target),
                None => (1 << 63, target + 1),
            }
        } else {
            (kept, target)
        }
    };
    if exp > MAX_EXP {
        LongDouble::Inf { neg }
    } else {
        LongDouble::Finite { neg, mant, exp }
    }
}

/// `a + b`, rounded once.
pub fn add(a: LongDouble, b: LongDouble) -> LongDouble {
    use LongDouble::*;
    match (a, b) {
        (NaN, _) | (_, NaN) => NaN,
        (Inf { neg: x }, Inf { neg: y }) if x != y => NaN,
        (Inf { neg }, _) | (_, Inf { neg }) => Inf { neg },
        (Finite { neg: na, mant: 0, .. }, Finite { neg: nb, mant: 0, .. }) => Finite { neg: na && nb, mant: 0, exp: 0 },
        (Finite { mant: 0, .. }, x) | (x, Finite { mant: 0, .. }) => x,
        (Finite { neg: na, mant: ma, exp: ea }, Finite { neg: nb, mant: mb, exp: eb }) => {
            let exp = ea.min(eb);
            let x = Big::from_u128(ma as u128).shl((ea - exp) as u64);
            let y = Big::from_u128(mb as u128).shl((eb - exp) as u64);
            if na == nb {
                return round(na, x.add(&y), exp, false);
            }
            match x.cmp(&y) {
                Ordering::Equal => Finite { neg: false, mant: 0, exp: 0 },
                Ordering::Greater => round(na, x.sub(&y), exp, false),
                Ordering::Less => round(nb, y.sub(&x), exp, false),
            }
        }
    }
}

/// A finite `value` as Redis's `ld2string(..., LD_STR_HUMAN)` writes it:
/// `"%.17Lf"` (exactly rounded, ties to even), trailing zeros and a bare
/// point removed, "-0" written "0". Infinities are written "inf"/"-inf".
pub fn format_human(value: LongDouble) -> String {
    let (neg, mant, exp) = match value {
        LongDouble::Finite { neg, mant, exp } => (neg, mant, exp),
        LongDouble::Inf { neg } => return if neg { "-inf".into() } else { "inf".into() },
        LongDouble::NaN => return "nan".into(),
    };
    let mag = Big::from_u128(mant as u128);
    let mut text = String::new();
    if neg {
        text.push('-');
    }
    if exp >= 0 {
        text.push_str(&mag.shl(exp as u64).to_decimal());
    } else {
        // The value times 10^17, rounded to an integer: its last 17 digits
        // are the fraction.
        let scaled = mag.mul(&Big::pow10(17));
        let drop = exp.unsigned_abs();
        let mut q = scaled.shr(drop);
        if scaled.bit(drop - 1) && (scaled.any_below(drop - 1) || q.bit(0)) {
            q = q.add(&Big::from_u128(1));
        }
        let digits = format!("{:0>18}", q.to_decimal());
        let (int, frac) = digits.split_at(digits.len() - 17);
        text.push_str(int);
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            text.push('.');
            text.push_str(frac);
        }
    }
    if text == "-0" {
        text.remove(0);
    }
    text
}

/// An unsigned integer of any size: little-endian 32-bit limbs, no zero
/// limb at the top.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn zero() -> Big {
        Big(Vec::new())
    }

    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn pow10(k: u64) -> Big {
        let mut p = Big::from_u128(1);
        let mut left = k;
        while left > 0 {
            let step = left.min(9) as u32;
            p.mul_add_small(10u32.pow(step), 0);
            left -= step as u64;
        }
        p
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(top) => self.0.len() as u64 * 32 - top.leading_zeros() as u64,
        }
    }

    /// A lower bound on the number of decimal digits.
    fn decimal_digits_at_least(&self) -> u64 {
        self.bits().saturating_sub(1) * 30102 / 100000 + 1
    }

    fn bit(&self, i: u64) -> bool {
        self.0.get((i / 32) as usize).is_some_and(|l| l >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below bit `i` is set.
    fn any_below(&self, i: u64) -> bool {
        let whole = ((i / 32) as usize).min(self.0.len());
        if self.0[..whole].iter().any(|&l| l != 0) {
            return true;
        }
        let part = i % 32;
        part > 0 && self.0.get(whole).is_some_and(|&l| l & ((1u32 << part) - 1) != 0)
    }

    fn low_u64(&self) -> u64 {
        let lo = self.0.first().copied().unwrap_or(0) as u64;
        let hi = self.0.get(1).copied().unwrap_or(0) as u64;
        lo | hi << 32
    }

    /// `self * m + a`.
    fn mul_add_small(&mut self, m: u32, a: u32) {
        let mut carry = a as u64;
        for l in &mut self.0 {
            let v = *l as u64 * m as u64 + carry;
            *l = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn mul(&self, other: &Big) -> Big {
        let mut r = vec![0u32; self.0.len() + other.0.len()];
        for (i, &a) in self.0.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.0.iter().enumerate() {
                let v = r[i + j] as u64 + a as u64 * b as u64 + carry;
                r[i + j] = v as u32;
                carry = v >> 32;
            }
            r[i + other.0.len()] = carry as u32;
        }
        let mut r = Big(r);
        r.trim();
        r
    }

    fn shl(&self, n: u64) -> Big {
        if self.is_zero() {
            return Big::zero();
        }
        let (limbs, bits) = ((n / 32) as usize, n % 32);
        let mut r = vec![0u32; limbs];
        r.reserve(self.0.len() + 1);
        let mut carry = 0u32;
        for &l in &self.0 {
            r.push(if bits == 0 { l } else { l << bits | carry });
            carry = if bits == 0 { 0 } else { l >> (32 - bits) };
        }
        r.push(carry);
        let mut r = Big(r);
        r.trim();
        r
    }

    fn shr(&self, n: u64) -> Big {
        let (limbs, bits) = ((n / 32) as usize, n % 32);
        if limbs >= self.0.len() {
            return Big::zero();
        }
        let src = &self.0[limbs..];
        let mut r: Vec<u32> = (0..src.len())
            .map(|i| {
                let hi = src.get(i + 1).copied().unwrap_or(0);
                if bits == 0 {
                    src[i]
                } else {
                    src[i] >> bits | hi << (32 - bits)
                }
            })
            .collect();
        while r.last() == Some(&0) {
            r.pop();
        }
        Big(r)
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn add(&self, other: &Big) -> Big {
        let (long, short) = if self.0.len() >= other.0.len() { (self, other) } else { (other, self) };
        let mut r = Vec::with_capacity(long.0.len() + 1);
        let mut carry = 0u64;
        for (i, &l) in long.0.iter().enumerate() {
            let v = l as u64 + short.0.get(i).copied().unwrap_or(0) as u64 + carry;
            r.push(v as u32);
            carry = v >> 32;
        }
        if carry != 0 {
            r.push(carry as u32);
        }
        Big(r)
    }

    /// `self - other`; `self` must not be smaller.
    fn sub(&self, other: &Big) -> Big {
        let mut r = self.clone();
        r.sub_assign(other);
        r
    }

    fn sub_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let v = self.0[i] as i64 - other.0.get(i).copied().unwrap_or(0) as i64 - borrow;
            borrow = (v < 0) as i64;
            self.0[i] = v.rem_euclid(1 << 32) as u32;
        }
        debug_assert_eq!(borrow, 0, "subtracting a larger number");
        self.trim();
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut chunks = Vec::new();
        let mut n = self.0.clone();
        while !n.is_empty() {
            let mut rem = 0u64;
            for l in n.iter_mut().rev() {
                let v = rem << 32 | *l as u64;
                *l = (v / 1_000_000_000) as u32;
                rem = v % 1_000_000_000;
            }
            while n.last() == Some(&0) {
                n.pop();
            }
            chunks.push(rem as u32);
        }
        let mut s = chunks.last().map(|c| c.to_string()).unwrap_or_default();
        for c in chunks.iter().rev().skip(1) {
            s.push_str(&format!("{c:09}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> Option<String> {
        let sum = add(parse(a.as_bytes())?, parse(b.as_bytes())?);
        Some(if sum.is_finite() { format_human(sum) } else { "NaN or Infinity".into() })
    }

    #[test]
    fn parse_accepts_what_strtold_reads_in_full() {
        for ok in ["1", "-1", "+1", "1.", ".5", "1e5", "1E+05", "1.5e-3", "0x10", "0X1.8p1", "0x.8", "inf", "-Infinity"]
        {
            assert!(parse(ok.as_bytes()).is_some(), "{ok}");
        }
        for bad in ["", " 1", "1 ", ".", "e1", "1e", "1e+", "0x", "0xp1", "1x", "nan", "NaN", "infinit", "1..2", "--1"]
        {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse(&[b'1'; MAX_TEXT]), None, "too long");
    }

    #[test]
    fn parse_refuses_overflow_and_underflow_to_zero_but_keeps_extended_range() {
        assert_eq!(parse(b"1e5000"), None);
        assert_eq!(parse(b"1e-5000"), None);
        assert_eq!(parse(b"1e999999999999999999999"), None);
        assert!(parse(b"0e999999999999").is_some(), "zero is zero at any scale");
        assert!(parse(b"1e4000").is_some(), "beyond f64, within long double");
        assert!(parse(b"1e-4940").is_some(), "a subnormal");
    }

    #[test]
    fn sums_are_printed_as_redis_prints_them() {
        assert_eq!(incr("10.5", "0.1").as_deref(), Some("10.6"));
        assert_eq!(incr("0", "0.1").as_deref(), Some("0.1"));
        assert_eq!(incr("5.0e3", "2.0e2").as_deref(), Some("5200"));
        assert_eq!(incr("3", "-3").as_deref(), Some("0"));
        assert_eq!(incr("-0", "-0").as_deref(), Some("0"));
        assert_eq!(incr("1e-20", "0").as_deref(), Some("0"));
        assert_eq!(incr("-1e-20", "0").as_deref(), Some("0"));
        assert_eq!(incr("1e20", "1").as_deref(), Some("100000000000000000000"), "67 bits rounded to 64");
        assert_eq!(incr("0x1p-1", "0").as_deref(), Some("0.5"));
        assert_eq!(incr("inf", "1").as_deref(), Some("NaN or Infinity"));
        assert_eq!(incr("1.1e4932", "1.1e4932").as_deref(), Some("NaN or Infinity"));
        assert_eq!(incr("1e30", "0").as_deref(), Some("1000000000000000000024696061952"));
    }

    #[test]
    fn random_texts_never_panic_and_f64_sums_agree_to_f64_precision() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(15);
        let alphabet = b"0123456789.eEpPxX+-infatyINF ";
        for _ in 0..20_000 {
            let len = rng.gen_range(0..24);
            let text: Vec<u8> = (0..len).map(|_| alphabet[rng.gen_range(0..alphabet.len())]).collect();
            if let Some(v) = parse(&text) {
                let _ = format_human(add(v, v));
            }
        }
        for _ in 0..2_000 {
            let (a, b) = (rng.gen_range(-1e9..1e9f64), rng.gen_range(-1e3..1e3f64));
            let sum = add(parse(a.to_string().as_bytes()).unwrap(), parse(b.to_string().as_bytes()).unwrap());
            let text = format_human(sum);
            let back: f64 = text.parse().unwrap();
            assert!((back - (a + b)).abs() <= 1e-6 * (a + b).abs().max(1.0), "{a} + {b} = {text}");
        }
    }

    #[test]
    fn big_integers_convert_exactly() {
        assert_eq!(Big::pow10(30).to_decimal(), format!("1{}", "0".repeat(30)));
        let x = Big::from_u128(u128::MAX);
        assert_eq!(x.to_decimal(), u128::MAX.to_string());
        assert_eq!(x.shl(37).shr(37), x);
        assert_eq!(x.add(&Big::from_u128(1)).sub(&Big::from_u128(1)), x);
    }
}
