//! `delete <key> [0] [noreply]` (DELETED, NOT_FOUND) and
//! `touch <key> <exptime> [noreply]` (TOUCHED, NOT_FOUND).

use super::{put_error, Exec, Refusal, BAD_FORMAT, ERROR};
use crate::memcached::frame::{key_ok, parse_i32, Tokens};
use crate::memcached::items::{self, Written};
use crate::memcached::McStats;
use bytes::BytesMut;

pub struct Delete<'a> {
    pub key: &'a [u8],
    pub noreply: bool,
}

pub struct Touch<'a> {
    pub key: &'a [u8],
    pub exptime: i64,
    pub noreply: bool,
}

const DELETE_USAGE: Refusal = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";

pub fn parse_delete<'a>(line: &'a [u8], t: &Tokens) -> Result<Delete<'a>, Refusal> {
    if !(2..=4).contains(&t.len()) {
        return Err(ERROR);
    }
    let key = t.get(line, 1);
    if !key_ok(key) {
        return Err(BAD_FORMAT);
    }
    // memcached accepts only a legacy hold time of 0, and noreply.
    let noreply = t.len() > 2 && t.get(line, t.len() - 1) == b"noreply";
    let valid = match t.len() {
        2 => true,
        3 => t.get(line, 2) == b"0" || noreply,
        _ => t.get(line, 2) == b"0" && noreply,
    };
    if !valid {
        return Err(DELETE_USAGE);
    }
    Ok(Delete { key, noreply })
}

pub fn run_delete(d: &Delete<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    match x.items.remove(d.key, None) {
        Ok(Written::Stored(_)) => {
            McStats::add(&x.stats.delete_hits);
            out.extend_from_slice(b"DELETED\r\n");
        }
        Ok(_) => {
            McStats::add(&x.stats.delete_misses);
            out.extend_from_slice(b"NOT_FOUND\r\n");
        }
        Err(e) => put_error(out, &e),
    }
}

pub fn parse_touch<'a>(line: &'a [u8], t: &Tokens) -> Result<Touch<'a>, Refusal> {
    if t.len() != 3 && t.len() != 4 {
        return Err(ERROR);
    }
    let key = t.get(line, 1);
    if !key_ok(key) {
        return Err(BAD_FORMAT);
    }
    let exptime = parse_i32(t.get(line, 2)).ok_or(super::retrieval::INVALID_EXPTIME)?;
    let noreply = t.len() == 4 && t.get(line, 3) == b"noreply";
    Ok(Touch { key, exptime, noreply })
}

pub fn run_touch(d: &Touch<'_>, x: &mut Exec<'_>, out: &mut BytesMut) {
    McStats::add(&x.stats.cmd_touch);
    let at = items::expiry_time(d.exptime, x.items.now());
    match x.items.touch(d.key, at, None) {
        Ok(Written::Stored(_)) => {
            McStats::add(&x.stats.touch_hits);
            out.extend_from_slice(b"TOUCHED\r\n");
        }
        Ok(_) => {
            McStats::add(&x.stats.touch_misses);
            out.extend_from_slice(b"NOT_FOUND\r\n");
        }
        Err(e) => put_error(out, &e),
    }
}
