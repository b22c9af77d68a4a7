//! `incr <key> <delta> [noreply]`, `decr ...`: the new value, or
//! NOT_FOUND. A counter is its decimal digits (the format Redis INCR
//! keeps too, so both front ends count the same objects); incr wraps at
//! 2^64, decr stops at 0, as memcached. The item keeps its flags and expiry.

use super::{put_error, put_num, Exec, Refusal, BAD_FORMAT, ERROR};
use crate::memcached::frame::{key_ok, parse_u64, Tokens};
use crate::memcached::items::{encode, parse_counter, Written};
use crate::memcached::McStats;
use bytes::BytesMut;
use shoal_engine::{Expiry, ObjectMeta, RejectRules};

pub struct Arith<'a> {
    pub key: &'a [u8],
    pub incr: bool,
    pub delta: u64,
    pub noreply: bool,
}

pub const INVALID_DELTA: Refusal = "CLIENT_ERROR invalid numeric delta argument\r\n";
pub const NON_NUMERIC: &str = "CLIENT_ERROR cannot increment or decrement non-numeric value";

pub fn parse<'a>(line: &'a [u8], t: &Tokens) -> Result<Arith<'a>, Refusal> {
    if t.len() != 3 && t.len() != 4 {
        return Err(ERROR);
    }
    let key = t.get(line, 1);
    if !key_ok(key) {
        return Err(BAD_FORMAT);
    }
    let delta = parse_u64(t.get(line, 2)).ok_or(INVALID_DELTA)?;
    let noreply = t.len() == 4 && t.get(line, 3) == b"noreply";
    Ok(Arith { key, incr: t.get(line, 0) == b"incr", delta, noreply })
}

/// What an increment found.
pub enum Counted {
    /// The new value and the item after it.
    Value(u64, ObjectMeta),
    NotFound,
    /// The error reply's text.
    Refused(String),
}

/// Adds (or subtracts) `delta` to the counter `key`; if it is missing and
/// `create` holds (initial value, expiry), creates it with that value.
pub fn apply(
    x: &mut Exec<'_>,
    key: &[u8],
    incr: bool,
    delta: u64,
    create: Option<(u64, Expiry)>,
) -> Result<Counted, String> {
    loop {
        let Some(found) = x.items.get(key, x.buf)? else {
            McStats::add(if incr { &x.stats.incr_misses } else { &x.stats.decr_misses });
            let Some((initial, expiry)) = create else { return Ok(Counted::NotFound) };
            let digits = itoa::Buffer::new().format(initial).as_bytes().to_vec();
            match x.items.put(key, &digits, RejectRules::must_not_exist(), expiry)? {
                Written::Stored(v) => {
                    let at = match expiry {
                        Expiry::At(t) => Some(t),
                        _ => None,
                    };
                    return Ok(Counted::Value(initial, ObjectMeta { version: v, expiry: at }));
                }
                _ => continue,
            }
        };
        let Some(n) = parse_counter(&x.buf[found.offset..]) else {
            return Ok(Counted::Refused(NON_NUMERIC.into()));
        };
        let n = if incr { n.wrapping_add(delta) } else { n.saturating_sub(delta) };
        McStats::add(if incr { &x.stats.incr_hits } else { &x.stats.decr_hits });
        encode(found.flags, itoa::Buffer::new().format(n).as_bytes(), x.value);
        match x.items.put(key, x.value, RejectRules::version_is(found.meta.version), Expiry::Keep)? {
            Written::Stored(v) => return Ok(Counted::Value(n, ObjectMeta { version: v, expiry: found.meta.expiry })),
            // Changed since read: again, on the new value.
            _ => continue,
        }
    }
}

pub fn run(a: &Arith<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    match apply(x, a.key, a.incr, a.delta, None) {
        Ok(Counted::Value(n, _)) => {
            put_num(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Ok(Counted::NotFound) => out.extend_from_slice(b"NOT_FOUND\r\n"),
        Ok(Counted::Refused(e)) | Err(e) => put_error(out, &e),
    }
}
