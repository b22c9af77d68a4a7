//! XRANGE key start end [COUNT count] and XREVRANGE key end start [COUNT
//! count]: a stream's entries between two IDs (`-`, `+`, `ms`, `ms-seq`,
//! `(` for an exclusive bound), oldest or newest first.

use super::CommandSpec;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use crate::resp::xstream::{self, StreamId};

pub static XRANGE: CommandSpec = CommandSpec {
    name: "xrange",
    syntax: "key start end [COUNT count#integer]",
    arity: -4,
    flags: &["readonly"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@read", "@stream", "@slow"],
    group: "stream",
    since: "5.0.0",
    summary: "Return a range of elements in a stream, with IDs matching the specified IDs interval",
    complexity: "O(N) with N being the number of elements being returned. If N is constant (e.g. always asking for \
                 the first 10 elements with COUNT), you can consider it O(1).",
    ..CommandSpec::BASE
};

pub static XREVRANGE: CommandSpec = CommandSpec {
    name: "xrevrange",
    syntax: "key end start [COUNT count#integer]",
    summary: "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse \
              order (from greater to smaller IDs) compared to XRANGE",
    complexity: "O(N) with N being the number of elements returned. If N is constant (e.g. always asking for the \
                 first 10 elements with COUNT), you can consider it O(1).",
    ..XRANGE
};

/// An interval bound (Redis's `streamParseIntervalIDOrReply`): `(id` is
/// exclusive (and then `-`, `+` are refused); a missing sequence is
/// `missing_seq`.
fn bound(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), ErrorReply> {
    if arg.len() > 1 && arg[0] == b'(' {
        Ok((xstream::parse_id(&arg[1..], true, missing_seq, false)?.id, true))
    } else {
        Ok((xstream::parse_id(arg, false, missing_seq, false)?.id, false))
    }
}

fn run_range(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>, rev: bool) -> Result<(), ErrorReply> {
    xstream::check_standalone(session)?;
    let (start_arg, end_arg) = if rev { (args.get(3), args.get(2)) } else { (args.get(2), args.get(3)) };
    let (mut start, exclusive) = bound(start_arg, 0)?;
    if exclusive {
        start = start.next().ok_or(ErrorReply::new("ERR invalid start ID for the interval"))?;
    }
    let (mut end, exclusive) = bound(end_arg, u64::MAX)?;
    if exclusive {
        end = end.prev().ok_or(ErrorReply::new("ERR invalid end ID for the interval"))?;
    }
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if super::is(args.get(j), "count") && j + 1 < args.len() {
            count = parse_i64(args.get(j + 1)).ok_or(super::NOT_AN_INTEGER)?.max(0);
            j += 2;
        } else {
            return Err(super::SYNTAX_ERROR);
        }
    }
    let Some(x) = xstream::lookup(session, args.get(1))? else {
        out.array(0);
        return Ok(());
    };
    if count == 0 {
        out.null_array();
        return Ok(());
    }
    let mut s = x.lock();
    let found = s.range(start, end, count.max(0) as usize, rev, session.reply_limit);
    s.reply_entries(&session.ctx, &found, session.reply_limit, out);
    Ok(())
}

pub fn run_xrange(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    run_range(args, session, out, false)
}

pub fn run_xrevrange(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    run_range(args, session, out, true)
}
