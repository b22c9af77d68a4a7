//! The one counter format of every front end: a counter is an object whose
//! value is a signed 64-bit integer in decimal ASCII, as Redis stores the
//! values of INCR and memcached those of incr. So the native protocol's
//! increment, Redis's INCR/INCRBY/DECR and memcached's incr/decr read and
//! change each other's counters, and a counter reads as its number with GET.
//!
//! A value is a counter if [`parse`] accepts it: Redis's `string2ll`
//! rules, an optional `-` then digits without leading zeros ("0" itself,
//! but not "-0", "+1", "01", " 1" or "1 "), within i64.

/// Longest decimal i64 ("-9223372036854775808").
pub const MAX_LEN: usize = 20;

/// The counter `value` holds, if it is one.
pub fn parse(value: &[u8]) -> Option<i64> {
    if value.is_empty() || value.len() > MAX_LEN {
        return None;
    }
    let (neg, digits) = match value {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, value),
    };
    match digits {
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        (v <= i64::MAX as u64 + 1).then(|| (v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// `n` in the counter format, in `buf`.
pub fn format(n: i64, buf: &mut itoa::Buffer) -> &[u8] {
    buf.format(n).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_follows_redis_string2ll() {
        for (s, v) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("42", Some(42)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("-0", None),
            ("01", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("-", None),
            ("1a", None),
            ("00000000000000000000001", None),
        ] {
            assert_eq!(parse(s.as_bytes()), v, "{s:?}");
        }
        // 8 little-endian bytes (the old native format) are not a counter.
        assert_eq!(parse(&5i64.to_le_bytes()), None);
    }

    #[test]
    fn format_round_trips() {
        let mut buf = itoa::Buffer::new();
        for n in [0, 1, -1, i64::MAX, i64::MIN, 1234567890] {
            assert_eq!(parse(format(n, &mut buf)), Some(n));
        }
    }
}
