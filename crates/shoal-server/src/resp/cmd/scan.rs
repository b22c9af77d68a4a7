//! SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: [next cursor,
//! [keys...]].
//!
//! The cursor is the store's enumeration position (a key hash) written in
//! decimal; 0 starts and ends an iteration. As in Redis, a key present for
//! the whole iteration is returned exactly once, COUNT (default 10) is a
//! hint, MATCH filters the keys examined (so a page may be empty before
//! the end), and TYPE matches only "string". Pages are also cut at
//! about 1 MiB of matching keys, so a reply stays small whatever COUNT says.
//!
//! In a cluster the cursor is still a key-hash position, now across the
//! table's tablets: the server whose tablet holds it scans at most to the
//! tablet's end and answers the tablet's end + 1 as the next cursor, which
//! the routing sends to the next tablet's server (see `routing`).

use super::{is, CommandSpec, NOT_AN_INTEGER, SYNTAX_ERROR};
use crate::cluster::Route;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::glob;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::routing;
use crate::resp::session::Session;
use shoal_engine::KeyHash;

pub static SPEC: CommandSpec = CommandSpec {
    name: "scan",
    syntax: "cursor#integer [MATCH pattern#pattern] [COUNT count#integer] [TYPE type]",
    tips: &["nondeterministic_output", "request_policy:special"],
    arity: -2,
    flags: &["readonly"],
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "2.8.0",
    summary: "Incrementally iterate the keys space",
    complexity: "O(1) for every call. O(N) for a complete iteration.",
    ..CommandSpec::BASE
};

const MAX_PAGE_BYTES: usize = 1 << 20;

struct Scan<'a> {
    cursor: u64,
    pattern: Option<&'a [u8]>,
    count: usize,
    /// TYPE given and not "string": nothing matches.
    other_type: bool,
}

/// Redis's cursor parsing (`strtoul`): optional sign, decimal digits, no
/// leading space; "" is 0 and "-n" wraps around, as C does.
pub fn parse_cursor(s: &[u8]) -> Option<u64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, s),
    };
    if s.is_empty() {
        return Some(0);
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?;
    Some(if neg { v.wrapping_neg() } else { v })
}

impl<'a> Scan<'a> {
    fn parse(args: Args<'a>) -> Result<Scan<'a>, ErrorReply> {
        let cursor = parse_cursor(args.get(1)).ok_or(ErrorReply::new("ERR invalid cursor"))?;
        let mut scan = Scan { cursor, pattern: None, count: 10, other_type: false };
        let mut i = 2;
        while i < args.len() {
            let more = i + 1 < args.len();
            let opt = args.get(i);
            if is(opt, "COUNT") && more {
                let n = parse_i64(args.get(i + 1)).ok_or(NOT_AN_INTEGER)?;
                if n < 1 {
                    return Err(SYNTAX_ERROR);
                }
                scan.count = n.min(100_000) as usize;
            } else if is(opt, "MATCH") && more {
                let p = args.get(i + 1);
                scan.pattern = (p != b"*").then_some(p);
            } else if is(opt, "TYPE") && more {
                scan.other_type = !is(args.get(i + 1), "string");
            } else {
                return Err(SYNTAX_ERROR);
            }
            i += 2;
        }
        Ok(scan)
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        let keep = |k: &[u8]| !self.other_type && self.pattern.is_none_or(|p| glob::matches(p, k));
        let end = tablet_end(session, self.cursor)?;
        let (keys, next) = session.db().scan(self.cursor, end, self.count, MAX_PAGE_BYTES, keep)?;
        out.array(2);
        out.bulk(next.unwrap_or(0).to_string().as_bytes());
        out.array(keys.len());
        for k in &keys {
            out.bulk(k);
        }
        Ok(())
    }
}

/// The last key hash this page may cover: in a cluster, the end of the
/// local tablet holding `cursor` (the routing sent the SCAN here because
/// it is local); otherwise the whole hash space.
fn tablet_end(session: &Session, cursor: u64) -> Result<u64, ErrorReply> {
    let (Some(node), Some(table)) = (&session.ctx.cluster, session.db().table()) else {
        return Ok(u64::MAX);
    };
    match node.local_tablet_end(table, KeyHash(cursor)) {
        Ok(end) => Ok(end),
        Err(Route::Recovering) => Err(routing::RECOVERING),
        Err(Route::Moving) => Err(routing::MOVING),
        Err(_) => Err(routing::NOT_HERE),
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Scan::parse(args)?.apply(session, out)
}

#[cfg(test)]
mod tests {
    use super::parse_cursor;

    #[test]
    fn cursor_parses_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"007"), Some(7));
        assert_eq!(parse_cursor(b"+7"), Some(7));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b"18446744073709551616"[..], b" 1", b"1 ", b"x", b"-", b"1.5"] {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
        }
    }
}
