//! Request frames of memcached's text protocol, in two passes: [`line`]
//! finds whether the buffer starts with a complete command line (and how
//! long it is) without allocating, bounded by [`Limits::max_line`];
//! [`Tokens::split`] then splits it into words (memcached's tokenizer:
//! words separated by spaces, empty ones skipped). A storage command's data
//! block follows its line; its length comes from the line, and the caller
//! checks it against [`Limits`] before waiting for it (`data_span`).
//! No input panics.

/// Bounds on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest command line, "\r\n" included.
    pub max_line: usize,
    /// Largest data block a storage command may carry.
    pub max_value: usize,
    /// Most bytes of one request, data block included.
    pub max_request: usize,
}

/// memcached's limit on keys.
pub const MAX_KEY: usize = 250;

impl Limits {
    /// A multi-get line of a few hundred keys fits.
    pub const LINE_MAX: usize = 64 * 1024;

    pub fn new(max_request: usize, max_value: usize) -> Limits {
        Limits { max_line: Self::LINE_MAX.min(max_request), max_value, max_request }
    }
}

/// A line longer than the limit: the connection is closed.
#[derive(Debug, PartialEq, Eq)]
pub struct LineTooLong;

/// If `buf` starts with a complete line (ended by "\n"), its length with
/// the "\n"; `Ok(None)` if more bytes are needed.
pub fn line(buf: &[u8], limits: &Limits) -> Result<Option<usize>, LineTooLong> {
    let window = &buf[..buf.len().min(limits.max_line)];
    match memchr(b'\n', window) {
        Some(i) => Ok(Some(i + 1)),
        None if buf.len() >= limits.max_line => Err(LineTooLong),
        None => Ok(None),
    }
}

fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// The words of one line, as spans into it (reused between requests).
#[derive(Default)]
pub struct Tokens {
    spans: Vec<(u32, u32)>,
}

impl Tokens {
    /// Splits `line` (without its "\r\n" or "\n") into words.
    pub fn split(&mut self, line: &[u8]) {
        self.spans.clear();
        let mut start = None;
        for (i, &c) in line.iter().enumerate() {
            match (c == b' ', start) {
                (true, Some(s)) => {
                    self.spans.push((s as u32, i as u32));
                    start = None;
                }
                (false, None) => start = Some(i),
                _ => {}
            }
        }
        if let Some(s) = start {
            self.spans.push((s as u32, line.len() as u32));
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Word `i` of `line` (the line given to `split`); empty past the end.
    pub fn get<'a>(&self, line: &'a [u8], i: usize) -> &'a [u8] {
        self.spans.get(i).map_or(&[][..], |&(s, e)| &line[s as usize..e as usize])
    }

    /// The words from `i` on.
    pub fn from<'a, 'b>(&'b self, line: &'a [u8], i: usize) -> impl Iterator<Item = &'a [u8]> + 'b
    where
        'a: 'b,
    {
        self.spans.iter().skip(i).map(move |&(s, e)| &line[s as usize..e as usize])
    }
}

/// The command line of `frame` (a complete line), without "\r\n" or "\n".
pub fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A decimal unsigned number (as memcached's strtoul: no sign, no spaces).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(n)
}

/// A decimal signed number that fits 32 bits (memcached's safe_strtol).
pub fn parse_i32(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let n = parse_u64(digits)? as i128;
    let n = if neg { -n } else { n };
    (i32::MIN as i128..=i32::MAX as i128).contains(&n).then_some(n as i64)
}

/// Whether `key` can be a memcached key: 1 to 250 bytes (the tokenizer
/// already excludes spaces and line ends).
pub fn key_ok(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_waits_for_newline_and_bounds_it() {
        let l = Limits::new(1 << 20, 1 << 20);
        assert_eq!(line(b"get a", &l), Ok(None));
        assert_eq!(line(b"get a\r\nget b\r\n", &l), Ok(Some(7)));
        let small = Limits { max_line: 8, max_value: 10, max_request: 100 };
        assert_eq!(line(b"get abcdef", &small), Err(LineTooLong));
    }

    #[test]
    fn split_skips_empty_words() {
        let mut t = Tokens::default();
        let line = b"  get  a b ";
        t.split(line);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(line, 0), b"get");
        assert_eq!(t.get(line, 2), b"b");
        assert_eq!(t.get(line, 3), b"");
        assert_eq!(t.from(line, 1).collect::<Vec<_>>(), vec![&b"a"[..], b"b"]);
    }

    #[test]
    fn numbers_parse_as_memcached() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"x"), None);
    }
}
