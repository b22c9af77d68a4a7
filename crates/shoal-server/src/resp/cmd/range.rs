//! GETRANGE key start end: the bytes of the value from `start` to `end`
//! included, negative offsets counting from the end, clamped as Redis
//! clamps them ("" for a missing key or an empty range).
//!
//! SETRANGE key offset value: overwrites the value from `offset` on,
//! padding with zero bytes; the new length. An empty `value` changes
//! nothing and answers the current length. The key keeps its expiry, as in
//! Redis. Atomic: a versioned
//! read-modify-write ([`Db::update`]). A result longer than the largest
//! value is refused with Redis's proto-max-bulk-len error.
//!
//! [`Db::update`]: crate::resp::db::Db::update

use super::{CommandSpec, NOT_AN_INTEGER};
use crate::resp::db::Update;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_engine::Expiry;

pub static GETRANGE: CommandSpec = CommandSpec {
    name: "getrange",
    syntax: "key start#integer end#integer",
    arity: 4,
    flags: &["readonly"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@read", "@string", "@slow"],
    group: "string",
    since: "2.4.0",
    summary: "Get a substring of the string stored at a key",
    complexity: "O(N) where N is the length of the returned string. The complexity is ultimately determined by \
                 the returned length, but because creating a substring from an existing string is very cheap, it \
                 can be considered O(1) for small strings.",
    ..CommandSpec::BASE
};

pub static SETRANGE: CommandSpec = CommandSpec {
    name: "setrange",
    syntax: "key offset#integer value",
    arity: 4,
    flags: &["write", "denyoom"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@string", "@slow"],
    group: "string",
    since: "2.2.0",
    summary: "Overwrite part of a string at key starting at the specified offset",
    complexity: "O(1), not counting the time taken to copy the new string in place. Usually, this string is very \
                 small so the amortized complexity is O(1). Otherwise, complexity is O(M) with M being the length \
                 of the value argument.",
    ..CommandSpec::BASE
};

const TOO_LONG: ErrorReply = ErrorReply::new("ERR string exceeds maximum allowed size (proto-max-bulk-len)");

/// The byte range of a value of `len` bytes that GETRANGE start end answers.
fn range(len: usize, start: i64, end: i64) -> std::ops::Range<usize> {
    let n = len as i64;
    if start < 0 && end < 0 && start > end {
        return 0..0;
    }
    let start = if start < 0 { (n + start).max(0) } else { start };
    let end = if end < 0 { (n + end).max(0) } else { end };
    let end = end.min(n - 1);
    if start > end || n == 0 {
        return 0..0;
    }
    start as usize..end as usize + 1
}

pub fn run_getrange(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let start = parse_i64(args.get(2)).ok_or(NOT_AN_INTEGER)?;
    let end = parse_i64(args.get(3)).ok_or(NOT_AN_INTEGER)?;
    let mut value = std::mem::take(&mut session.scratch);
    let found = session.db().get_into(args.get(1), &mut value);
    if let Ok(found) = &found {
        let r = if found.is_some() { range(value.len(), start, end) } else { 0..0 };
        out.bulk(&value[r]);
    }
    session.scratch = value;
    found.map(|_| ())
}

pub fn run_setrange(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let (key, patch) = (args.get(1), args.get(3));
    let offset = parse_i64(args.get(2)).ok_or(NOT_AN_INTEGER)?;
    let offset = usize::try_from(offset).map_err(|_| ErrorReply::new("ERR offset is out of range"))?;
    let max = session.ctx.store.config().max_value_bytes;
    let mut scratch = std::mem::take(&mut session.scratch);
    let result = session.db().update(key, &mut scratch, Expiry::Keep, |current| {
        let Some(current) = current else {
            if patch.is_empty() {
                return Ok(Update::Keep(0));
            }
            if offset.saturating_add(patch.len()) > max {
                return Err(TOO_LONG);
            }
            let mut v = vec![0u8; offset];
            v.extend_from_slice(patch);
            let len = v.len() as i64;
            return Ok(Update::Write(v, len));
        };
        if patch.is_empty() {
            return Ok(Update::Keep(current.len() as i64));
        }
        if offset.saturating_add(patch.len()) > max {
            return Err(TOO_LONG);
        }
        let mut v = current.to_vec();
        if v.len() < offset + patch.len() {
            v.resize(offset + patch.len(), 0);
        }
        v[offset..offset + patch.len()].copy_from_slice(patch);
        let len = v.len() as i64;
        Ok(Update::Write(v, len))
    });
    session.scratch = scratch;
    out.int(result?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn range_clamps_as_redis_does() {
        assert_eq!(range(5, 0, -1), 0..5);
        assert_eq!(range(5, 1, 3), 1..4);
        assert_eq!(range(5, -3, -1), 2..5);
        assert_eq!(range(5, -1, -3), 0..0);
        assert_eq!(range(5, 3, 100), 3..5);
        assert_eq!(range(5, -100, 1), 0..2);
        assert_eq!(range(5, 4, 2), 0..0);
        assert_eq!(range(0, 0, -1), 0..0);
        assert_eq!(range(5, 10, 20), 0..0);
        assert_eq!(range(5, i64::MIN, i64::MAX), 0..5);
    }
}
