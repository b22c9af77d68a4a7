//! RESP commands end to end (`shoal-server`, `resp::fuzzing::Harness`):
//! raw bytes through the framing, the command table's argument parsers and
//! the commands themselves, on a standalone in-memory store.
//!
//! Asserts: no panic; the replies are well-formed RESP2/RESP3 (every
//! length and count matches what follows, simple strings and errors are
//! single lines) and there is exactly one reply per command executed, plus
//! one for a protocol error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::resp::fuzzing::Harness;
use std::cell::RefCell;

thread_local! {
    static HARNESS: RefCell<Harness> = RefCell::new(Harness::new());
}

/// Position after the "\r\n"-terminated line starting at `pos` (the line
/// itself holds no CR or LF).
fn line(b: &[u8], pos: usize) -> (&[u8], usize) {
    let rest = &b[pos..];
    let end = rest.iter().position(|&c| c == b'\r' || c == b'\n').expect("an unterminated reply line");
    assert_eq!(rest.get(end..end + 2), Some(&b"\r\n"[..]), "a reply line with a bare CR or LF");
    (&rest[..end], pos + end + 2)
}

fn number(text: &[u8]) -> i64 {
    let s = std::str::from_utf8(text).expect("a UTF-8 number");
    let n: i64 = s.parse().expect("a number");
    assert_eq!(n.to_string(), s, "a non-canonical number");
    n
}

/// Checks one reply at `pos`; returns the position after it.
fn reply(b: &[u8], pos: usize) -> usize {
    let kind = *b.get(pos).expect("a truncated reply");
    let (text, next) = line(b, pos + 1);
    match kind {
        b'+' | b'-' => next,
        b':' => {
            number(text);
            next
        }
        b'_' => {
            assert!(text.is_empty());
            next
        }
        b',' | b'#' | b'(' => next,
        b'$' | b'=' | b'!' => {
            let n = number(text);
            if n == -1 && kind == b'$' {
                return next;
            }
            let n = usize::try_from(n).expect("a bulk length");
            assert!(kind != b'=' || (n >= 4 && b[next + 3] == b':'), "a verbatim string without its format");
            assert_eq!(b.get(next + n..next + n + 2), Some(&b"\r\n"[..]), "a bulk string's length is wrong");
            next + n + 2
        }
        b'*' | b'~' | b'%' | b'>' | b'|' => {
            let n = number(text);
            if n == -1 && kind == b'*' {
                return next;
            }
            let items = usize::try_from(n).expect("a count") * if matches!(kind, b'%' | b'|') { 2 } else { 1 };
            (0..items).fold(next, |p, _| reply(b, p))
        }
        other => panic!("unknown reply type {:?}", other as char),
    }
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with(|h| {
        let mut h = h.borrow_mut();
        let outcome = h.run(data);
        let replies = &h.replies[..];
        let (mut pos, mut count) = (0, 0);
        while pos < replies.len() {
            pos = reply(replies, pos);
            count += 1;
        }
        assert_eq!(count, outcome.commands + outcome.protocol_error as usize, "{outcome:?}");
    });
});
