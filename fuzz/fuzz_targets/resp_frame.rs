//! RESP request framing (`shoal-server`, `resp::frame`): `check` over a
//! stream of pipelined requests, `parse` of each, and `parse_i64`.
//!
//! Asserts: no panic; "need more" is only answered while the bytes held are
//! within the limits (a client cannot make the server buffer more); a
//! complete request is within the limits, every shorter prefix of it is
//! "need more", a multibulk request always parses and re-encodes to exactly
//! its bytes, arguments respect the bulk and count limits; the arguments
//! of a request, written as an inline command with every byte escaped,
//! parse back to themselves; `parse_i64` accepts exactly the canonical
//! decimal text of an i64.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::resp::frame::{check, parse, parse_i64, Args, Limits};

const LIMITS: Limits = Limits { max_request: 4096, max_bulk: 1024, max_inline: 512 };

fn multibulk<'a>(args: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

fn inline<'a>(args: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut v = Vec::new();
    for a in args {
        v.push(b'"');
        for b in a {
            v.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
        v.extend_from_slice(b"\" ");
    }
    v.extend_from_slice(b"\r\n");
    v
}

fn words(frame: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (mut spans, mut scratch) = (Vec::new(), Vec::new());
    let data = parse(frame, &mut spans, &mut scratch).ok()?;
    Some(Args::new(data, &spans).iter().map(<[u8]>::to_vec).collect())
}

fuzz_target!(|data: &[u8]| {
    if let Some(v) = parse_i64(data) {
        assert_eq!(v.to_string().as_bytes(), data, "parse_i64 accepted a non-canonical integer");
    } else if let Some(v) = std::str::from_utf8(data).ok().and_then(|s| s.parse::<i64>().ok()) {
        assert_ne!(v.to_string().as_bytes(), data, "parse_i64 refused a canonical integer");
    }

    let mut rest = data;
    let (mut spans, mut scratch) = (Vec::new(), Vec::new());
    loop {
        let n = match check(rest, &LIMITS) {
            Ok(Some(n)) => n,
            Ok(None) => {
                assert!(rest.len() < LIMITS.max_request.max(LIMITS.max_inline), "waits with {} bytes", rest.len());
                break;
            }
            Err(_) => break,
        };
        assert!(n > 0 && n <= rest.len() && n <= LIMITS.max_request.max(LIMITS.max_inline));
        let step = if n <= 256 { 1 } else { n / 64 };
        for cut in (0..n).step_by(step).chain([n - 1]) {
            assert_eq!(check(&rest[..cut], &LIMITS), Ok(None), "prefix of {cut} of a {n}-byte request");
        }
        let frame = &rest[..n];
        match parse(frame, &mut spans, &mut scratch) {
            Ok(data) => {
                let args = Args::new(data, &spans);
                assert!(args.len() <= LIMITS.max_args());
                for a in args.iter() {
                    assert!(a.len() <= LIMITS.max_bulk.max(LIMITS.max_inline));
                }
                if frame[0] == b'*' && !args.is_empty() {
                    assert_eq!(multibulk(args.iter()), frame, "a multibulk request does not re-encode to itself");
                }
                let again = inline(args.iter());
                if again.len() <= LIMITS.max_inline {
                    let all: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
                    assert_eq!(check(&again, &LIMITS), Ok(Some(again.len())));
                    assert_eq!(words(&again), Some(all), "escaped inline form parses differently");
                }
            }
            Err(e) => assert!(frame[0] != b'*', "a checked multibulk request fails to parse: {e}"),
        }
        rest = &rest[n..];
    }
});
