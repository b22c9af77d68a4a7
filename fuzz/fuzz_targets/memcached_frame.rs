//! memcached request framing (`shoal-server`, `memcached::frame` and
//! `memcached::cmd::parse`): `line` over a stream of pipelined command
//! lines, each split into words and parsed into a typed command.
//!
//! Asserts: no panic; "need more" is only answered while the bytes held
//! are within the line limit (a client cannot make the server buffer more);
//! a complete line is within the limit and every shorter prefix of it is
//! "need more"; words are non-empty and hold no space; a parsed command's
//! keys are 1 to 250 bytes and a storage command's data length fits the
//! protocol's 32-bit length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::memcached::cmd::{parse, Command};
use shoal_server::memcached::frame::{line, trim_eol, Limits, Tokens, MAX_KEY};

const LIMITS: Limits = Limits { max_line: 512, max_value: 1024, max_request: 4096 };

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let mut tokens = Tokens::default();
    loop {
        let n = match line(rest, &LIMITS) {
            Ok(Some(n)) => n,
            Ok(None) => {
                assert!(rest.len() < LIMITS.max_line, "waits with {} bytes", rest.len());
                break;
            }
            Err(_) => {
                assert!(rest.len() >= LIMITS.max_line);
                break;
            }
        };
        assert!(n > 0 && n <= rest.len() && n <= LIMITS.max_line && rest[n - 1] == b'\n');
        for cut in 0..n {
            assert!(matches!(line(&rest[..cut], &LIMITS), Ok(None)), "prefix of {cut} of a {n}-byte line");
        }
        let text = trim_eol(&rest[..n]);
        tokens.split(text);
        for i in 0..tokens.len() {
            let w = tokens.get(text, i);
            assert!(!w.is_empty() && !w.contains(&b' '));
        }
        if let Ok(cmd) = parse(text, &tokens) {
            if let Some(key) = cmd.key() {
                assert!(!key.is_empty() && key.len() <= MAX_KEY);
            }
            if let Command::Retrieval(r) = &cmd {
                assert!(r.keys.iter().all(|k| !k.is_empty() && k.len() <= MAX_KEY));
            }
            if let Some(len) = cmd.data_len() {
                assert!(len <= i32::MAX as usize);
            }
        }
        rest = &rest[n..];
    }
});
