//! XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id
//! ...]: the entries of each stream with IDs greater than its `id` (`$`:
//! the stream's last ID), at most `count` per stream; with BLOCK, waits
//! for one when there is none yet.
//!
//! Blocking does not hold a worker thread: the command sets
//! [`Session::wait`] to a future that completes at the next XADD to one of
//! its keys or at the timeout, and the connection runs the same
//! request again then (with the IDs resolved the first time kept in
//! [`BlockedRead`], so `$` still means the last ID when it started).

use super::CommandSpec;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Protocol, Reply};
use crate::resp::session::Session;
use crate::resp::xstream::{self, StreamId};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub static SPEC: CommandSpec = CommandSpec {
    name: "xread",
    syntax: "[COUNT count#integer] [BLOCK milliseconds#integer] STREAMS (key... id...)",
    arity: -4,
    flags: &["readonly", "blocking", "movablekeys"],
    acl: &["@read", "@stream", "@slow", "@blocking"],
    group: "stream",
    since: "5.0.0",
    summary: "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller \
              for each stream. Can block.",
    complexity: "For each stream mentioned: O(N) with N being the number of elements being returned, it means that \
                 XREAD-ing with a fixed COUNT is O(1). Note that when the BLOCK option is used, XADD will pay O(M) \
                 time in order to serve the M clients blocked on the stream getting new data.",
    ..CommandSpec::BASE
};

/// A blocked XREAD between its runs.
pub struct BlockedRead {
    /// When it answers a null array (`None`: never, BLOCK 0).
    deadline: Option<Instant>,
    /// Each stream's ID, `$` resolved.
    ids: Vec<StreamId>,
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    xstream::check_standalone(session)?;
    let blocked = session.blocked_read.take();
    let mut timeout: Option<u64> = None;
    let mut count: usize = 0;
    let mut streams_at = 0;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let opt = args.get(i);
        if super::is(opt, "block") && more > 0 {
            i += 1;
            let ms = parse_i64(args.get(i)).ok_or(ErrorReply::new("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(ErrorReply::new("ERR timeout is negative"));
            }
            timeout = Some(ms as u64);
        } else if super::is(opt, "count") && more > 0 {
            i += 1;
            count = parse_i64(args.get(i)).ok_or(super::NOT_AN_INTEGER)?.max(0) as usize;
        } else if super::is(opt, "streams") && more > 0 {
            streams_at = i + 1;
            if !(args.len() - streams_at).is_multiple_of(2) {
                return Err(ErrorReply::new(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            break;
        } else if super::is(opt, "group") && more >= 2 {
            return Err(ErrorReply::new(
                "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
            ));
        } else if super::is(opt, "noack") {
            return Err(ErrorReply::new(
                "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
            ));
        } else {
            return Err(super::SYNTAX_ERROR);
        }
        i += 1;
    }
    if streams_at == 0 {
        return Err(super::SYNTAX_ERROR);
    }
    let n = (args.len() - streams_at) / 2;
    // Only the same request runs again after a wait; anything else (it
    // cannot be) starts afresh.
    let blocked = blocked.filter(|b| b.ids.len() == n);
    // Registered before looking, so that no append after the look is missed.
    let waiter = timeout.map(|_| {
        let waiter = Arc::new(Notify::new());
        let keys = (streams_at..streams_at + n).map(|i| args.get(i));
        session.ctx.xstreams.wait_on(session.db, keys, &waiter);
        waiter
    });
    let mut streams = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for k in 0..n {
        let x = xstream::lookup(session, args.get(streams_at + k))?;
        let arg = args.get(streams_at + n + k);
        let id = match &blocked {
            Some(b) => b.ids[k],
            None if arg == b"$" => x.as_ref().map_or(StreamId::MIN, |x| x.lock().last),
            None if arg == b">" => {
                return Err(ErrorReply::new(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> \
                     <consumer> option.",
                ))
            }
            None => xstream::parse_id(arg, true, 0, false)?.id,
        };
        streams.push(x);
        ids.push(id);
    }
    let ready: Vec<usize> = (0..n)
        .filter(|&k| {
            let last = streams[k].as_ref().and_then(|x| x.lock().last_entry());
            last.is_some_and(|last| last > ids[k])
        })
        .collect();
    if !ready.is_empty() {
        match session.proto {
            Protocol::Resp2 => out.array(ready.len()),
            Protocol::Resp3 => out.map(ready.len()),
        }
        for &k in &ready {
            if session.proto == Protocol::Resp2 {
                out.array(2);
            }
            out.bulk(args.get(streams_at + k));
            let x = streams[k].as_ref().expect("a ready stream exists");
            let mut s = x.lock();
            let from = ids[k].next().unwrap_or(StreamId::MAX);
            let found = s.range(from, StreamId::MAX, count, false, session.reply_limit);
            s.reply_entries(&session.ctx, &found, session.reply_limit, out);
        }
        return Ok(());
    }
    let Some(ms) = timeout else {
        out.null_array();
        return Ok(());
    };
    let deadline = match blocked {
        Some(b) => b.deadline,
        None if ms == 0 => None,
        None => Instant::now().checked_add(Duration::from_millis(ms)),
    };
    // Inside a transaction a client may not block: it times out at once.
    if session.txn.borrow().is_some() || deadline.is_some_and(|d| Instant::now() >= d) {
        out.null_array();
        return Ok(());
    }
    let waiter = waiter.expect("registered when BLOCK is given");
    session.blocked_read = Some(BlockedRead { deadline, ids });
    session.wait = Some(Box::pin(async move {
        match deadline {
            Some(d) => {
                let _ = tokio::time::timeout_at(d.into(), waiter.notified()).await;
            }
            None => waiter.notified().await,
        }
    }));
    Ok(())
}
