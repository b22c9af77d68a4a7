//! `get <key>*`, `gets <key>*` (with cas uniques), `gat <exptime> <key>*`
//! and `gats` (touch, then get): `VALUE <key> <flags> <bytes> [<cas>]` and
//! the data per hit, then `END`.

use super::{put_error, put_num, Exec, Refusal, ERROR};
use crate::memcached::frame::{key_ok, parse_i32, Tokens};
use crate::memcached::items::{self, Found, Written};
use crate::memcached::McStats;
use bytes::BytesMut;

/// Keys of one line kept inline (more spill to the heap).
pub type Keys<'a> = Vec<&'a [u8]>;

pub struct Retrieval<'a> {
    pub cas: bool,
    /// gat/gats: the new exptime.
    pub touch: Option<i64>,
    pub keys: Keys<'a>,
}

pub const INVALID_EXPTIME: Refusal = "CLIENT_ERROR invalid exptime argument\r\n";
const BAD_FORMAT: Refusal = super::BAD_FORMAT;

pub fn parse<'a>(line: &'a [u8], t: &Tokens) -> Result<Retrieval<'a>, Refusal> {
    let name = t.get(line, 0);
    let (cas, gat) = match name {
        b"get" => (false, false),
        b"gets" => (true, false),
        b"gat" => (false, true),
        _ => (true, true),
    };
    let first = if gat { 2 } else { 1 };
    // A gat with its exptime and no key is an empty reply, as memcached's.
    if t.len() < 2 {
        return Err(ERROR);
    }
    let touch = match gat {
        true => Some(parse_i32(t.get(line, 1)).ok_or(INVALID_EXPTIME)?),
        false => None,
    };
    let keys: Keys = t.from(line, first).collect();
    if !keys.iter().all(|k| key_ok(k)) {
        return Err(BAD_FORMAT);
    }
    Ok(Retrieval { cas, touch, keys })
}

pub fn run(r: &Retrieval<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    for key in &r.keys {
        match get_one(r, key, x) {
            Ok(Some(found)) => put_value(out, key, &found, &x.buf[found.offset..], r.cas),
            Ok(None) => {}
            Err(e) => {
                put_error(out, &e);
                return;
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// One key of a get or gat; its item in `x.buf`.
fn get_one(r: &Retrieval<'_>, key: &[u8], x: &mut Exec<'_>) -> Result<Option<Found>, String> {
    McStats::add(if r.touch.is_some() { &x.stats.cmd_touch } else { &x.stats.cmd_get });
    loop {
        let Some(mut found) = x.items.get(key, x.buf)? else {
            McStats::add(if r.touch.is_some() { &x.stats.touch_misses } else { &x.stats.get_misses });
            return Ok(None);
        };
        let Some(exptime) = r.touch else {
            McStats::add(&x.stats.get_hits);
            return Ok(Some(found));
        };
        let at = items::expiry_time(exptime, x.items.now());
        match x.items.touch(key, at, Some(found.meta.version))? {
            Written::Stored(v) => {
                McStats::add(&x.stats.touch_hits);
                found.meta.version = v;
                found.meta.expiry = at;
                return Ok(Some(found));
            }
            Written::NotFound => {
                McStats::add(&x.stats.touch_misses);
                return Ok(None);
            }
            // Changed since read: read it again.
            Written::Exists => continue,
        }
    }
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`.
pub fn put_value(out: &mut BytesMut, key: &[u8], found: &Found, data: &[u8], cas: bool) {
    out.reserve(key.len() + data.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" ");
    put_num(out, found.flags);
    out.extend_from_slice(b" ");
    put_num(out, data.len());
    if cas {
        out.extend_from_slice(b" ");
        put_num(out, found.meta.version.0);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}
