//! Request frames of the Redis protocol, in two passes (after mini-redis):
//! [`check`] finds whether the buffer starts with a complete request and how
//! long it is, without allocating; [`parse`] then splits that request into
//! arguments.
//!
//! A request is either a multibulk (`*<n>\r\n` then n times `$<len>\r\n<len
//! bytes>\r\n`, what every client library sends) or an inline command (one
//! line of space-separated words with Redis's quoting, what a person types
//! into `telnet`). Every length read from the wire is checked against
//! [`Limits`] before it is trusted, so a request never makes the server
//! buffer more than `Limits::max_request` bytes; no input panics. Errors
//! are protocol errors: the connection gets the error's text and is closed,
//! as Redis does. Their texts are Redis's.

use std::fmt;

/// Bounds on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of one request, framing included.
    pub max_request: usize,
    /// Longest bulk string (one argument).
    pub max_bulk: usize,
    /// Longest inline command line.
    pub max_inline: usize,
}

impl Limits {
    /// Redis's own bound on inline requests and count lines.
    pub const INLINE_MAX: usize = 64 * 1024;

    /// Limits for a server storing values of at most `max_value` bytes, keys
    /// of at most `max_key` bytes, in requests of at most `max_request` bytes.
    /// Bulk strings may exceed the largest value or key by 64 KiB, so that a
    /// value slightly too large gets the command's clear error rather than a
    /// protocol error.
    pub fn new(max_request: usize, max_value: usize, max_key: usize) -> Limits {
        Limits {
            max_request,
            max_bulk: (max_value.max(max_key) + 64 * 1024).min(max_request),
            max_inline: Self::INLINE_MAX.min(max_request),
        }
    }

    /// Most arguments a request can hold: each takes at least 6 bytes (`$0\r\n\r\n`).
    pub fn max_args(&self) -> usize {
        self.max_request / 6
    }
}

/// A request the server cannot accept; the connection is closed after the
/// error is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    TooBigCount,
    InvalidMultibulkLength,
    ExpectedDollar(u8),
    TooBigBulkCount,
    InvalidBulkLength,
    MissingCrlf,
    TooBigInline,
    UnbalancedQuotes,
    TooLarge { max: usize },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ERR Protocol error: ")?;
        match self {
            FrameError::TooBigCount => f.write_str("too big mbulk count string"),
            FrameError::InvalidMultibulkLength => f.write_str("invalid multibulk length"),
            FrameError::ExpectedDollar(c) => {
                let c = if c.is_ascii_graphic() || *c == b' ' { *c as char } else { ' ' };
                write!(f, "expected '$', got '{c}'")
            }
            FrameError::TooBigBulkCount => f.write_str("too big bulk count string"),
            FrameError::InvalidBulkLength => f.write_str("invalid bulk length"),
            FrameError::MissingCrlf => f.write_str("expected CRLF after bulk string"),
            FrameError::TooBigInline => f.write_str("too big inline request"),
            FrameError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
            FrameError::TooLarge { max } => write!(f, "request exceeds the maximum of {max} bytes"),
        }
    }
}

/// Longest `*<n>` or `$<len>` line accepted (any valid count fits in 21 bytes).
const MAX_COUNT_LINE: usize = 32;

/// If `buf` starts with a complete request, its length in bytes. `Ok(None)`:
/// more bytes are needed (and may be awaited: the request so far is within
/// the limits). Never allocates.
pub fn check(buf: &[u8], limits: &Limits) -> Result<Option<usize>, FrameError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => check_multibulk(buf, limits),
        Some(_) => match find_byte(buf, b'\n', limits.max_inline) {
            Some(i) => Ok(Some(i + 1)),
            None if buf.len() >= limits.max_inline => Err(FrameError::TooBigInline),
            None => Ok(None),
        },
    }
}

fn check_multibulk(buf: &[u8], limits: &Limits) -> Result<Option<usize>, FrameError> {
    let Some((count, mut pos)) = count_line(buf, 0, FrameError::TooBigCount)? else {
        return Ok(None);
    };
    let count = match count {
        Ok(n) if n <= 0 => return Ok(Some(pos)),
        Ok(n) if n as u64 <= limits.max_args() as u64 => n as usize,
        _ => return Err(FrameError::InvalidMultibulkLength),
    };
    for _ in 0..count {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(c) => return Err(FrameError::ExpectedDollar(*c)),
        }
        let Some((len, next)) = count_line(buf, pos, FrameError::TooBigBulkCount)? else {
            return Ok(None);
        };
        let len = match len {
            Ok(n) if n >= 0 && n as u64 <= limits.max_bulk as u64 => n as usize,
            _ => return Err(FrameError::InvalidBulkLength),
        };
        let end = next + len + 2;
        if end > limits.max_request {
            return Err(FrameError::TooLarge { max: limits.max_request });
        }
        if buf.len() < end {
            return Ok(None);
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(FrameError::MissingCrlf);
        }
        pos = end;
    }
    Ok(Some(pos))
}

/// Reads `<type><digits>\r\n` at `start`: the number (Err if not a valid
/// integer) and the position after the line; `None` if the line is incomplete.
#[allow(clippy::type_complexity)]
fn count_line(buf: &[u8], start: usize, too_long: FrameError) -> Result<Option<(Result<i64, ()>, usize)>, FrameError> {
    let Some(rest) = buf.get(start + 1..) else {
        return Ok(None);
    };
    match find_byte(rest, b'\r', MAX_COUNT_LINE) {
        None if rest.len() >= MAX_COUNT_LINE => Err(too_long),
        None => Ok(None),
        Some(i) => match rest.get(i + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((parse_i64(&rest[..i]).ok_or(()), start + 1 + i + 2))),
            Some(_) => Ok(Some((Err(()), start + 1 + i + 2))),
        },
    }
}

fn find_byte(buf: &[u8], b: u8, within: usize) -> Option<usize> {
    buf[..buf.len().min(within)].iter().position(|&c| c == b)
}

/// Redis's `string2ll`: an optional '-', then digits without leading zeros
/// ("0" alone is fine), within i64. Nothing else: no '+', no spaces.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] if digits.len() <= 19 => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// The arguments of one request: byte ranges into `data`, which is either
/// the request itself (multibulk) or the unescaped words of an inline command.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    data: &'a [u8],
    spans: &'a [(usize, usize)],
}

impl<'a> Args<'a> {
    pub fn new(data: &'a [u8], spans: &'a [(usize, usize)]) -> Args<'a> {
        Args { data, spans }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Argument `i` (0 is the command name). Panics if `i >= len()`:
    /// commands index only within the arity they were checked for.
    pub fn get(&self, i: usize) -> &'a [u8] {
        let (s, e) = self.spans[i];
        &self.data[s..e]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + '_ {
        self.spans.iter().map(|&(s, e)| &self.data[s..e])
    }

    /// The arguments from `i` on.
    pub fn skip(&self, i: usize) -> Args<'a> {
        Args { data: self.data, spans: &self.spans[i.min(self.spans.len())..] }
    }
}

/// Splits a complete request (as measured by [`check`]) into arguments:
/// fills `spans` and returns the bytes they index, which are `frame`
/// itself or, for an inline command, `scratch`. An empty result is an empty
/// request, which Redis ignores.
pub fn parse<'a>(
    frame: &'a [u8],
    spans: &mut Vec<(usize, usize)>,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], FrameError> {
    spans.clear();
    if frame.first() != Some(&b'*') {
        parse_inline(frame, spans, scratch)?;
        return Ok(scratch);
    }
    let Some((Ok(count), mut pos)) = count_line(frame, 0, FrameError::TooBigCount)? else {
        return Err(FrameError::InvalidMultibulkLength);
    };
    for _ in 0..count.max(0) {
        if frame.get(pos) != Some(&b'$') {
            return Err(FrameError::InvalidBulkLength);
        }
        let Some((Ok(len), start)) = count_line(frame, pos, FrameError::TooBigBulkCount)? else {
            return Err(FrameError::InvalidBulkLength);
        };
        let end = start.checked_add(usize::try_from(len).map_err(|_| FrameError::InvalidBulkLength)?);
        match end {
            Some(end) if end + 2 <= frame.len() => {
                spans.push((start, end));
                pos = end + 2;
            }
            _ => return Err(FrameError::InvalidBulkLength),
        }
    }
    Ok(frame)
}

/// Redis's `sdssplitargs` over one line (without its "\n", and a trailing
/// "\r" dropped): words separated by spaces; "double quotes" with \n \r \t
/// \b \a \\ \" and \xHH escapes; 'single quotes' with \' only. A closing
/// quote must be followed by a space or the end.
fn parse_inline(frame: &[u8], spans: &mut Vec<(usize, usize)>, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let mut line = frame.strip_suffix(b"\n").unwrap_or(frame);
    line = line.strip_suffix(b"\r").unwrap_or(line);
    out.clear();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            return Ok(());
        }
        let start = out.len();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            let c = line.get(i).copied();
            if in_dq {
                match c {
                    None => return Err(FrameError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'x') && hex_pair(line.get(i + 2..i + 4)).is_some() => {
                        out.push(hex_pair(line.get(i + 2..i + 4)).unwrap_or(0));
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        out.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return Err(FrameError::UnbalancedQuotes);
                        }
                        in_dq = false;
                        i += 1;
                        break;
                    }
                    Some(c) => out.push(c),
                }
            } else if in_sq {
                match c {
                    None => return Err(FrameError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        out.push(b'\'');
                        i += 1;
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return Err(FrameError::UnbalancedQuotes);
                        }
                        in_sq = false;
                        i += 1;
                        break;
                    }
                    Some(c) => out.push(c),
                }
            } else {
                match c {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => in_dq = true,
                    Some(b'\'') => in_sq = true,
                    Some(c) => out.push(c),
                }
            }
            i += 1;
        }
        debug_assert!(!in_dq && !in_sq);
        spans.push((start, out.len()));
    }
}

fn hex_pair(s: Option<&[u8]>) -> Option<u8> {
    let s = s?;
    let hex = |c: u8| (c as char).to_digit(16);
    Some((hex(s[0])? * 16 + hex(s[1])?) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: Limits = Limits { max_request: 4096, max_bulk: 1024, max_inline: 256 };

    fn words(input: &[u8]) -> Result<Vec<Vec<u8>>, FrameError> {
        let n = check(input, &L)?.expect("complete");
        let mut spans = Vec::new();
        let mut scratch = Vec::new();
        let data = parse(&input[..n], &mut spans, &mut scratch)?;
        Ok(Args::new(data, &spans).iter().map(|a| a.to_vec()).collect())
    }

    fn multibulk(args: &[&[u8]]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    #[test]
    fn check_multibulk_complete_and_incomplete() {
        let f = multibulk(&[b"SET", b"key", b"value"]);
        assert_eq!(check(&f, &L), Ok(Some(f.len())));
        for cut in 0..f.len() {
            assert_eq!(check(&f[..cut], &L), Ok(None), "prefix of {cut} bytes");
        }
        let mut two = f.clone();
        two.extend_from_slice(&f);
        assert_eq!(check(&two, &L), Ok(Some(f.len())));
    }

    #[test]
    fn parse_multibulk_returns_arguments_including_binary_and_empty() {
        let f = multibulk(&[b"SET", b"k\r\n\0", b""]);
        assert_eq!(words(&f).unwrap(), vec![b"SET".to_vec(), b"k\r\n\0".to_vec(), vec![]]);
    }

    #[test]
    fn empty_and_negative_multibulk_are_empty_requests() {
        assert_eq!(words(b"*0\r\n").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(words(b"*-1\r\n").unwrap(), Vec::<Vec<u8>>::new());
    }

    #[test]
    fn check_rejects_bad_counts_and_lengths() {
        assert_eq!(check(b"*abc\r\n", &L), Err(FrameError::InvalidMultibulkLength));
        assert_eq!(check(b"*+1\r\n", &L), Err(FrameError::InvalidMultibulkLength));
        assert_eq!(check(b"*1\rx", &L), Err(FrameError::InvalidMultibulkLength));
        assert_eq!(check(b"*100000\r\n", &L), Err(FrameError::InvalidMultibulkLength));
        assert_eq!(check(b"*1\r\n:1\r\n", &L), Err(FrameError::ExpectedDollar(b':')));
        assert_eq!(check(b"*1\r\n$-1\r\n", &L), Err(FrameError::InvalidBulkLength));
        assert_eq!(check(b"*1\r\n$1025\r\n", &L), Err(FrameError::InvalidBulkLength));
        assert_eq!(check(b"*1\r\n$99999999999999999999999\r\n", &L), Err(FrameError::InvalidBulkLength));
        assert_eq!(check(b"*1\r\n$1\r\nab\r\n", &L), Err(FrameError::MissingCrlf));
        assert_eq!(check(&[b"*1".as_slice(), &[b'1'; 40]].concat(), &L), Err(FrameError::TooBigCount));
        assert_eq!(check(&[b"*1\r\n$".as_slice(), &[b'1'; 40]].concat(), &L), Err(FrameError::TooBigBulkCount));
    }

    #[test]
    fn check_rejects_request_over_the_limit_before_it_arrives() {
        let mut f = b"*5\r\n".to_vec();
        for _ in 0..4 {
            f.extend_from_slice(b"$1000\r\n");
            f.extend_from_slice(&[b'x'; 1000]);
            f.extend_from_slice(b"\r\n");
        }
        f.extend_from_slice(b"$1000\r\n");
        assert_eq!(check(&f, &L), Err(FrameError::TooLarge { max: 4096 }));
    }

    #[test]
    fn inline_commands_split_like_redis() {
        assert_eq!(words(b"PING\r\n").unwrap(), vec![b"PING".to_vec()]);
        assert_eq!(words(b"  set a  b \n").unwrap(), vec![b"set".to_vec(), b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(
            words(b"set \"a b\\n\\x41\" 'it\\'s'\r\n").unwrap(),
            vec![b"set".to_vec(), b"a b\nA".to_vec(), b"it's".to_vec()]
        );
        assert_eq!(words(b"\r\n").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(words(b"set \"abc\r\n"), Err(FrameError::UnbalancedQuotes));
        assert_eq!(words(b"set \"a\"b\r\n"), Err(FrameError::UnbalancedQuotes));
        assert_eq!(words(b"set 'a\r\n"), Err(FrameError::UnbalancedQuotes));
    }

    #[test]
    fn inline_over_the_limit_is_rejected() {
        assert_eq!(check(&[b'a'; 255], &L), Ok(None));
        assert_eq!(check(&[b'a'; 256], &L), Err(FrameError::TooBigInline));
    }

    #[test]
    fn parse_i64_is_string2ll() {
        for (s, v) in [("0", Some(0)), ("-1", Some(-1)), ("9223372036854775807", Some(i64::MAX))] {
            assert_eq!(parse_i64(s.as_bytes()), v, "{s}");
        }
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for s in ["", "-", "-0", "+1", "01", " 1", "1 ", "1a", "9223372036854775808", "-9223372036854775809"] {
            assert_eq!(parse_i64(s.as_bytes()), None, "{s:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Random bytes: never a panic, and a complete request is never longer
        /// than the limit and parses into arguments within the limits.
        #[test]
        fn random_bytes_never_panic_or_exceed_limits(
            bytes in proptest::collection::vec(prop_oneof![
                Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'"'), Just(b'\''), Just(b'\\'),
                Just(b'-'), Just(b' '), b'0'..=b'9', any::<u8>()], 0..600)
        ) {
            let limits = Limits { max_request: 300, max_bulk: 100, max_inline: 200 };
            if let Ok(Some(n)) = check(&bytes, &limits) {
                prop_assert!(n <= bytes.len());
                prop_assert!(n <= limits.max_request.max(limits.max_inline));
                let mut spans = Vec::new();
                let mut scratch = Vec::new();
                if let Ok(data) = parse(&bytes[..n], &mut spans, &mut scratch) {
                    let args = Args::new(data, &spans);
                    prop_assert!(args.len() <= limits.max_args().max(n));
                    for a in args.iter() {
                        prop_assert!(a.len() <= limits.max_bulk.max(limits.max_inline));
                    }
                }
            }
        }

        /// Valid requests split at random points: every prefix is incomplete,
        /// the whole parses back to the same arguments, pipelined requests are
        /// found one after the other.
        #[test]
        fn valid_frames_split_anywhere_parse_back(
            reqs in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6), 1..4),
            cut in 0usize..1000,
        ) {
            let frames: Vec<Vec<u8>> = reqs.iter().map(|r| {
                let refs: Vec<&[u8]> = r.iter().map(|a| a.as_slice()).collect();
                multibulk(&refs)
            }).collect();
            let stream: Vec<u8> = frames.concat();
            let cut = cut % (stream.len() + 1);
            let mut pos = 0;
            for (f, r) in frames.iter().zip(&reqs) {
                if pos <= cut && cut < pos + f.len() {
                    prop_assert_eq!(check(&stream[pos..cut], &L), Ok(None));
                }
                prop_assert_eq!(check(&stream[pos..], &L), Ok(Some(f.len())));
                let mut spans = Vec::new();
                let mut scratch = Vec::new();
                let data = parse(&stream[pos..pos + f.len()], &mut spans, &mut scratch).unwrap();
                let got: Vec<Vec<u8>> = Args::new(data, &spans).iter().map(|a| a.to_vec()).collect();
                prop_assert_eq!(&got, r);
                pos += f.len();
            }
        }
    }
}
