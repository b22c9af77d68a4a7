//! `set`, `add`, `replace`, `append`, `prepend`, `cas`:
//! `<cmd> <key> <flags> <exptime> <bytes> [<cas unique>] [noreply]\r\n<data>\r\n`.
//! Replies: STORED, NOT_STORED, EXISTS (cas: another version), NOT_FOUND
//! (cas: no item). `cas` is a write under the version reject rule
//! "version == cas unique"; append and prepend keep the item's flags and
//! expiry, as memcached does.

use super::{put_error, Exec, Refusal, BAD_FORMAT, ERROR};
use crate::memcached::frame::{key_ok, parse_i32, parse_u64, Tokens};
use crate::memcached::items::{self, encode, Written};
use crate::memcached::McStats;
use bytes::BytesMut;
use shoal_engine::{Expiry, RejectRules, Version};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// Only over this version.
    Cas(Version),
}

pub struct Storage<'a> {
    pub mode: Mode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i64,
    pub bytes: usize,
    pub noreply: bool,
}

pub fn parse<'a>(line: &'a [u8], t: &Tokens) -> Result<Storage<'a>, Refusal> {
    let name = t.get(line, 0);
    let is_cas = name == b"cas";
    let base = if is_cas { 6 } else { 5 };
    if t.len() != base && t.len() != base + 1 {
        return Err(ERROR);
    }
    let key = t.get(line, 1);
    if !key_ok(key) {
        return Err(BAD_FORMAT);
    }
    let flags = parse_u64(t.get(line, 2)).and_then(|f| u32::try_from(f).ok()).ok_or(BAD_FORMAT)?;
    let exptime = parse_i32(t.get(line, 3)).ok_or(BAD_FORMAT)?;
    let bytes = parse_i32(t.get(line, 4)).and_then(|b| usize::try_from(b).ok()).ok_or(BAD_FORMAT)?;
    let mode = match name {
        b"set" => Mode::Set,
        b"add" => Mode::Add,
        b"replace" => Mode::Replace,
        b"append" => Mode::Append,
        b"prepend" => Mode::Prepend,
        _ => Mode::Cas(Version(parse_u64(t.get(line, 5)).ok_or(BAD_FORMAT)?)),
    };
    let noreply = t.len() == base + 1 && t.get(line, base) == b"noreply";
    Ok(Storage { mode, key, flags, exptime, bytes, noreply })
}

/// What a store of `data` under `mode` did.
pub fn store(
    x: &mut Exec<'_>,
    key: &[u8],
    mode: Mode,
    flags: u32,
    expiry: Expiry,
    data: &[u8],
) -> Result<Written, String> {
    McStats::add(&x.stats.cmd_set);
    match mode {
        Mode::Append | Mode::Prepend => loop {
            let Some(found) = x.items.get(key, x.buf)? else { return Ok(Written::NotFound) };
            let old = &x.buf[found.offset..];
            let joined = if mode == Mode::Append { [old, data].concat() } else { [data, old].concat() };
            encode(found.flags, &joined, x.value);
            let rules = RejectRules::version_is(found.meta.version);
            match x.items.put(key, x.value, rules, Expiry::Keep)? {
                Written::Stored(v) => return Ok(Written::Stored(v)),
                // Changed meanwhile: again, on the new value.
                _ => continue,
            }
        },
        _ => {
            let rules = match mode {
                Mode::Add => RejectRules::must_not_exist(),
                Mode::Replace => RejectRules::must_exist(),
                Mode::Cas(v) => RejectRules::version_is(v),
                _ => RejectRules::default(),
            };
            encode(flags, data, x.value);
            let written = x.items.put(key, x.value, rules, expiry)?;
            if let Mode::Cas(_) = mode {
                McStats::add(match written {
                    Written::Stored(_) => &x.stats.cas_hits,
                    Written::Exists => &x.stats.cas_badval,
                    Written::NotFound => &x.stats.cas_misses,
                });
            }
            Ok(written)
        }
    }
}

pub fn run(s: &Storage<'_>, data: &[u8], x: &mut Exec<'_>, out: &mut BytesMut) {
    let expiry = items::expiry(s.exptime, x.items.now());
    match store(x, s.key, s.mode, s.flags, expiry, data) {
        Ok(Written::Stored(_)) => out.extend_from_slice(b"STORED\r\n"),
        Ok(Written::Exists) if matches!(s.mode, Mode::Cas(_)) => out.extend_from_slice(b"EXISTS\r\n"),
        Ok(Written::NotFound) if matches!(s.mode, Mode::Cas(_)) => out.extend_from_slice(b"NOT_FOUND\r\n"),
        Ok(_) => out.extend_from_slice(b"NOT_STORED\r\n"),
        Err(e) => put_error(out, &e),
    }
}
