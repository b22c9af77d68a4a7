//! The meta commands: `mg` (get), `ms` (set), `md` (delete), `ma`
//! (arithmetic), `mn` (no-op). A flag is one letter and maybe an argument
//! (`T30`); the return flags (k, c, f, t, s, O) are answered in the order
//! the request gave them. `q` hides the reply a pipeline does not need:
//! EN for mg, HD for ms, md and ma.
//!
//! Supported flags: mg v k c f t s q O T; ms T F C I q O k c M(E A P R S);
//! md q C O k; ma N J D T M(I + D -) q O k t c v C. Others (b base64 keys,
//! h, l, N on mg, stale items) are refused as memcached refuses an unknown
//! flag.

use super::arith::{self, Counted};
use super::storage::{self, Mode};
use super::{put_error, put_num, Exec, Refusal, BAD_FORMAT, ERROR};
use crate::memcached::frame::{key_ok, parse_i32, parse_u64, Tokens};
use crate::memcached::items::{self, Found, Written};
use crate::memcached::McStats;
use bytes::BytesMut;
use shoal_engine::{ObjectMeta, Version};

const INVALID_FLAG: Refusal = "CLIENT_ERROR invalid flag\r\n";
const INVALID_OR_DUPLICATE: Refusal = "CLIENT_ERROR invalid or duplicate flag\r\n";
const DUPLICATE_FLAG: Refusal = "CLIENT_ERROR duplicate flag\r\n";
const OPAQUE_TOO_LONG: Refusal = "CLIENT_ERROR opaque token too long\r\n";
const BAD_TOKEN: Refusal = "CLIENT_ERROR bad token in command line format\r\n";
const MS_MODE: Refusal = "CLIENT_ERROR invalid mode for ms M token\r\n";
const MA_MODE: Refusal = "CLIENT_ERROR invalid mode for ma M token\r\n";

/// A return flag: its letter and (O) its argument.
type RetFlag<'a> = (u8, &'a [u8]);

/// The flags of one meta command, checked for duplicates.
struct Flags<'a> {
    ret: Vec<RetFlag<'a>>,
    quiet: bool,
    seen: u128,
}

impl<'a> Flags<'a> {
    fn new() -> Flags<'a> {
        Flags { ret: Vec::new(), quiet: false, seen: 0 }
    }

    /// Records `flag` (letter, argument); `false` if seen before.
    fn first(&mut self, c: u8) -> bool {
        let bit = 1u128 << (c & 0x7f);
        let first = self.seen & bit == 0;
        self.seen |= bit;
        first
    }

    /// Flags every meta command takes: q, O, k. `true` if `c` was one.
    fn common(&mut self, c: u8, arg: &'a [u8]) -> Result<bool, Refusal> {
        match c {
            b'q' => self.quiet = true,
            b'O' if arg.len() > 32 => return Err(OPAQUE_TOO_LONG),
            b'O' | b'k' => self.ret.push((c, arg)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn split_flag(tok: &[u8]) -> (u8, &[u8]) {
    (tok[0], &tok[1..])
}

fn parse_key<'a>(line: &'a [u8], t: &Tokens) -> Result<&'a [u8], Refusal> {
    if t.len() < 2 {
        return Err(ERROR);
    }
    let key = t.get(line, 1);
    if !key_ok(key) {
        return Err(BAD_FORMAT);
    }
    Ok(key)
}

fn ttl(arg: &[u8]) -> Result<i64, Refusal> {
    parse_i32(arg).ok_or(BAD_TOKEN)
}

/// Appends ` <flag><value>` for each return flag, as the item now is.
fn put_ret(out: &mut BytesMut, flags: &[RetFlag<'_>], key: &[u8], item: Option<(&ObjectMeta, u32, usize)>, x: &Exec) {
    for &(c, arg) in flags {
        match (c, item) {
            (b'O', _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(arg);
            }
            (b'k', _) => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key);
            }
            (b'c', Some((meta, _, _))) => {
                out.extend_from_slice(b" c");
                put_num(out, meta.version.0);
            }
            (b'f', Some((_, flags, _))) => {
                out.extend_from_slice(b" f");
                put_num(out, flags);
            }
            (b't', Some((meta, _, _))) => {
                out.extend_from_slice(b" t");
                put_num(out, items::ttl_secs(meta, x.items.now()));
            }
            (b's', Some((_, _, size))) => {
                out.extend_from_slice(b" s");
                put_num(out, size);
            }
            _ => {}
        }
    }
}

pub struct MetaGet<'a> {
    pub key: &'a [u8],
    value: bool,
    touch: Option<i64>,
    flags: Flags<'a>,
}

pub fn parse_get<'a>(line: &'a [u8], t: &Tokens) -> Result<MetaGet<'a>, Refusal> {
    let key = parse_key(line, t)?;
    let mut m = MetaGet { key, value: false, touch: None, flags: Flags::new() };
    for tok in t.from(line, 2) {
        let (c, arg) = split_flag(tok);
        if !m.flags.first(c) {
            return Err(DUPLICATE_FLAG);
        }
        if m.flags.common(c, arg)? {
            continue;
        }
        match c {
            b'v' => m.value = true,
            b'c' | b'f' | b't' | b's' => m.flags.ret.push((c, arg)),
            b'T' => m.touch = Some(ttl(arg)?),
            _ => return Err(INVALID_FLAG),
        }
    }
    Ok(m)
}

pub fn run_get(m: &MetaGet<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    McStats::add(&x.stats.cmd_get);
    let found = loop {
        let found = match x.items.get(m.key, x.buf) {
            Ok(f) => f,
            Err(e) => return put_error(out, &e),
        };
        let Some(exptime) = m.touch else { break found };
        let Some(mut f) = found else { break None };
        let at = items::expiry_time(exptime, x.items.now());
        match x.items.touch(m.key, at, Some(f.meta.version)) {
            Ok(Written::Stored(v)) => {
                f.meta = ObjectMeta { version: v, expiry: at };
                break Some(f);
            }
            Ok(Written::NotFound) => break None,
            Ok(Written::Exists) => continue,
            Err(e) => return put_error(out, &e),
        }
    };
    let Some(Found { meta, flags, offset }) = found else {
        McStats::add(&x.stats.get_misses);
        if !m.flags.quiet {
            out.extend_from_slice(b"EN\r\n");
        }
        return;
    };
    McStats::add(&x.stats.get_hits);
    let size = x.buf.len() - offset;
    if m.value {
        out.extend_from_slice(b"VA ");
        put_num(out, size);
    } else {
        out.extend_from_slice(b"HD");
    }
    put_ret(out, &m.flags.ret, m.key, Some((&meta, flags, size)), x);
    out.extend_from_slice(b"\r\n");
    if m.value {
        out.extend_from_slice(&x.buf[offset..]);
        out.extend_from_slice(b"\r\n");
    }
}

pub struct MetaSet<'a> {
    pub key: &'a [u8],
    pub bytes: usize,
    /// Refused after the data length was read: the data is consumed, then
    /// this is the reply.
    pub refused: Option<Refusal>,
    mode: Mode,
    cas: Option<Version>,
    client_flags: u32,
    exptime: i64,
    flags: Flags<'a>,
}

pub fn parse_set<'a>(line: &'a [u8], t: &Tokens) -> Result<MetaSet<'a>, Refusal> {
    let key = parse_key(line, t)?;
    let bytes = parse_i32(t.get(line, 2)).and_then(|b| usize::try_from(b).ok()).ok_or(BAD_FORMAT)?;
    let mut m = MetaSet {
        key,
        bytes,
        refused: None,
        mode: Mode::Set,
        cas: None,
        client_flags: 0,
        exptime: 0,
        flags: Flags::new(),
    };
    if let Err(e) = set_flags(&mut m, line, t) {
        m.refused = Some(e);
    }
    Ok(m)
}

fn set_flags<'a>(m: &mut MetaSet<'a>, line: &'a [u8], t: &Tokens) -> Result<(), Refusal> {
    for tok in t.from(line, 3) {
        let (c, arg) = split_flag(tok);
        if !m.flags.first(c) {
            return Err(DUPLICATE_FLAG);
        }
        if m.flags.common(c, arg)? {
            continue;
        }
        match c {
            b'c' => m.flags.ret.push((c, arg)),
            b'T' => m.exptime = ttl(arg)?,
            b'F' => m.client_flags = parse_u64(arg).and_then(|f| u32::try_from(f).ok()).ok_or(BAD_FORMAT)?,
            b'C' => m.cas = Some(Version(parse_u64(arg).ok_or(BAD_TOKEN)?)),
            // Invalidation (marking items stale) is not kept: a plain write.
            b'I' => {}
            b'M' => {
                m.mode = match arg.first().map(u8::to_ascii_uppercase) {
                    Some(b'E') => Mode::Add,
                    Some(b'A') => Mode::Append,
                    Some(b'P') => Mode::Prepend,
                    Some(b'R') => Mode::Replace,
                    Some(b'S') => Mode::Set,
                    _ => return Err(MS_MODE),
                }
            }
            _ => return Err(INVALID_FLAG),
        }
    }
    Ok(())
}

pub fn run_set(m: &MetaSet<'_>, data: &[u8], x: &mut Exec<'_>, out: &mut BytesMut) {
    if let Some(e) = m.refused {
        out.extend_from_slice(e.as_bytes());
        return;
    }
    let expiry = items::expiry(m.exptime, x.items.now());
    let (mode, required) = match (m.mode, m.cas) {
        (Mode::Set | Mode::Replace, Some(v)) => (Mode::Cas(v), None),
        (mode, cas) => (mode, cas),
    };
    let written = match required {
        // A version asked of an append, prepend or add: checked first.
        Some(v) => match x.items.meta(m.key) {
            Ok(None) => Ok(Written::NotFound),
            Ok(Some(meta)) if meta.version != v => Ok(Written::Exists),
            Ok(Some(_)) => storage::store(x, m.key, mode, m.client_flags, expiry, data),
            Err(e) => Err(e),
        },
        None => storage::store(x, m.key, mode, m.client_flags, expiry, data),
    };
    let version = match written {
        Ok(Written::Stored(v)) => v,
        Ok(Written::Exists) if m.cas.is_some() => return out.extend_from_slice(b"EX\r\n"),
        Ok(Written::NotFound) if m.cas.is_some() => return out.extend_from_slice(b"NF\r\n"),
        Ok(_) => return out.extend_from_slice(b"NS\r\n"),
        Err(e) => return put_error(out, &e),
    };
    if m.flags.quiet {
        return;
    }
    out.extend_from_slice(b"HD");
    let meta = ObjectMeta { version, expiry: None };
    put_ret(out, &m.flags.ret, m.key, Some((&meta, m.client_flags, data.len())), x);
    out.extend_from_slice(b"\r\n");
}

pub struct MetaDelete<'a> {
    pub key: &'a [u8],
    cas: Option<Version>,
    flags: Flags<'a>,
}

pub fn parse_delete<'a>(line: &'a [u8], t: &Tokens) -> Result<MetaDelete<'a>, Refusal> {
    let key = parse_key(line, t)?;
    let mut m = MetaDelete { key, cas: None, flags: Flags::new() };
    for tok in t.from(line, 2) {
        let (c, arg) = split_flag(tok);
        if !m.flags.first(c) {
            return Err(INVALID_OR_DUPLICATE);
        }
        if m.flags.common(c, arg)? {
            continue;
        }
        match c {
            b'C' => m.cas = Some(Version(parse_u64(arg).ok_or(INVALID_OR_DUPLICATE)?)),
            _ => return Err(INVALID_OR_DUPLICATE),
        }
    }
    Ok(m)
}

pub fn run_delete(m: &MetaDelete<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    let reply: &[u8] = match x.items.remove(m.key, m.cas) {
        Ok(Written::Stored(_)) => {
            McStats::add(&x.stats.delete_hits);
            if m.flags.quiet {
                return;
            }
            b"HD"
        }
        Ok(Written::Exists) => b"EX",
        Ok(Written::NotFound) => {
            McStats::add(&x.stats.delete_misses);
            b"NF"
        }
        Err(e) => return put_error(out, &e),
    };
    out.extend_from_slice(reply);
    put_ret(out, &m.flags.ret, m.key, None, x);
    out.extend_from_slice(b"\r\n");
}

pub struct MetaArith<'a> {
    pub key: &'a [u8],
    incr: bool,
    delta: u64,
    initial: u64,
    /// N: create a missing counter, with this exptime.
    vivify: Option<i64>,
    /// T: the counter's new exptime.
    touch: Option<i64>,
    cas: Option<Version>,
    value: bool,
    flags: Flags<'a>,
}

pub fn parse_arith<'a>(line: &'a [u8], t: &Tokens) -> Result<MetaArith<'a>, Refusal> {
    let key = parse_key(line, t)?;
    let mut m = MetaArith {
        key,
        incr: true,
        delta: 1,
        initial: 0,
        vivify: None,
        touch: None,
        cas: None,
        value: false,
        flags: Flags::new(),
    };
    for tok in t.from(line, 2) {
        let (c, arg) = split_flag(tok);
        if !m.flags.first(c) {
            return Err(INVALID_OR_DUPLICATE);
        }
        if m.flags.common(c, arg)? {
            continue;
        }
        match c {
            b'v' => m.value = true,
            b't' | b'c' => m.flags.ret.push((c, arg)),
            // memcached answers a bad number here as a bad flag.
            b'N' => m.vivify = Some(ttl(arg).map_err(|_| INVALID_OR_DUPLICATE)?),
            b'T' => m.touch = Some(ttl(arg).map_err(|_| INVALID_OR_DUPLICATE)?),
            b'J' => m.initial = parse_u64(arg).ok_or(INVALID_OR_DUPLICATE)?,
            b'D' => m.delta = parse_u64(arg).ok_or(INVALID_OR_DUPLICATE)?,
            b'C' => m.cas = Some(Version(parse_u64(arg).ok_or(INVALID_OR_DUPLICATE)?)),
            b'M' => {
                m.incr = match arg.first() {
                    Some(b'I' | b'i' | b'+') => true,
                    Some(b'D' | b'd' | b'-') => false,
                    _ => return Err(MA_MODE),
                }
            }
            _ => return Err(INVALID_OR_DUPLICATE),
        }
    }
    Ok(m)
}

pub fn run_arith(m: &MetaArith<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    if let Some(v) = m.cas {
        match x.items.meta(m.key) {
            Ok(Some(meta)) if meta.version != v => return out.extend_from_slice(b"EX\r\n"),
            Ok(_) => {}
            Err(e) => return put_error(out, &e),
        }
    }
    let now = x.items.now();
    let create = m.vivify.map(|ttl| (m.initial, items::expiry(ttl, now)));
    let (n, mut meta) = match arith::apply(x, m.key, m.incr, m.delta, create) {
        Ok(Counted::Value(n, meta)) => (n, meta),
        Ok(Counted::NotFound) => return out.extend_from_slice(b"NF\r\n"),
        Ok(Counted::Refused(e)) | Err(e) => return put_error(out, &e),
    };
    if let Some(ttl) = m.touch {
        let at = items::expiry_time(ttl, now);
        if let Ok(Written::Stored(v)) = x.items.touch(m.key, at, Some(meta.version)) {
            meta = ObjectMeta { version: v, expiry: at };
        }
    }
    let digits = itoa::Buffer::new().format(n).len();
    if m.value {
        out.extend_from_slice(b"VA ");
        put_num(out, digits);
    } else if m.flags.quiet {
        return;
    } else {
        out.extend_from_slice(b"HD");
    }
    put_ret(out, &m.flags.ret, m.key, Some((&meta, 0, digits)), x);
    out.extend_from_slice(b"\r\n");
    if m.value {
        put_num(out, n);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(line: &[u8]) -> Tokens {
        let mut t = Tokens::default();
        t.split(line);
        t
    }

    #[test]
    fn mg_refuses_duplicate_and_unknown_flags() {
        let line = b"mg k v v";
        assert_eq!(parse_get(line, &tokens(line)).err(), Some(DUPLICATE_FLAG));
        let line = b"mg k Z";
        assert_eq!(parse_get(line, &tokens(line)).err(), Some(INVALID_FLAG));
        let line = b"mg k v k c O123 q T10";
        let m = parse_get(line, &tokens(line)).unwrap();
        assert!(m.value && m.flags.quiet);
        assert_eq!(m.touch, Some(10));
        assert_eq!(m.flags.ret.iter().map(|r| r.0).collect::<Vec<_>>(), b"kcO".to_vec());
    }

    #[test]
    fn ms_keeps_its_data_length_when_a_flag_is_refused() {
        let line = b"ms k 5 MX";
        let m = parse_set(line, &tokens(line)).unwrap();
        assert_eq!((m.bytes, m.refused), (5, Some(MS_MODE)));
        let line = b"ms k x";
        assert_eq!(parse_set(line, &tokens(line)).err(), Some(BAD_FORMAT));
    }
}
