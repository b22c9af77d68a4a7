//! XTRIM key (MAXLEN | MINID) [= | ~] threshold [LIMIT count]: removes a
//! stream's oldest entries; how many. Also the option parser XADD shares
//! (Redis's `streamParseAddOrTrimArgsOrReply`, same order of checks and
//! texts).

use super::CommandSpec;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use crate::resp::xstream::{self, ParsedId, Trim, TrimKind};

pub static SPEC: CommandSpec = CommandSpec {
    name: "xtrim",
    syntax: "key trim=(strategy=(MAXLEN|MINID) [operator=(=|~)] threshold [LIMIT count#integer])",
    arity: -4,
    flags: &["write"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@stream", "@slow"],
    tips: &["nondeterministic_output"],
    group: "stream",
    since: "5.0.0",
    summary: "Trims the stream to (approximately if '~' is passed) a certain size",
    complexity: "O(N), with N being the number of evicted entries. Constant times are very small however, since \
                 entries are organized in macro nodes containing multiple entries that can be released with a \
                 single deallocation.",
    ..CommandSpec::BASE
};

/// Redis's default LIMIT for `~` trimming (100 x stream-node-max-entries).
const APPROX_LIMIT: u64 = 10_000;

/// XADD's and XTRIM's options.
pub struct AddTrimArgs {
    pub trim: Option<Trim>,
    pub no_mkstream: bool,
    /// XADD's explicit ID (`None`: `*`).
    pub id: Option<ParsedId>,
    /// Where XADD's ID is (the fields follow it); `args.len()` if the
    /// options ran to the end.
    pub id_pos: usize,
}

fn integer(arg: &[u8]) -> Result<i64, ErrorReply> {
    parse_i64(arg).ok_or(super::NOT_AN_INTEGER)
}

/// Parses the options from argument 2 on.
pub fn parse_add_trim(args: Args<'_>, xadd: bool) -> Result<AddTrimArgs, ErrorReply> {
    let mut kind = None;
    let mut approx = false;
    let mut limit: Option<u64> = None;
    let mut parsed = AddTrimArgs { trim: None, no_mkstream: false, id: None, id_pos: args.len() };
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args.get(i);
        let next_is = |w: &[u8]| more >= 2 && args.get(i + 1) == w;
        if xadd && opt == b"*" {
            parsed.id_pos = i;
            break;
        } else if super::is(opt, "maxlen") && more > 0 {
            if kind.is_some() {
                return Err(ErrorReply::new(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            approx = next_is(b"~");
            if approx || next_is(b"=") {
                i += 1;
            }
            let max = integer(args.get(i + 1))?;
            if max < 0 {
                return Err(ErrorReply::new("ERR The MAXLEN argument must be >= 0."));
            }
            i += 1;
            kind = Some(TrimKind::MaxLen(max as u64));
        } else if super::is(opt, "minid") && more > 0 {
            if kind.is_some() {
                return Err(ErrorReply::new(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            approx = next_is(b"~");
            if approx || next_is(b"=") {
                i += 1;
            }
            let min = xstream::parse_id(args.get(i + 1), true, 0, false)?;
            i += 1;
            kind = Some(TrimKind::MinId(min.id));
        } else if super::is(opt, "limit") && more > 0 {
            let n = integer(args.get(i + 1))?;
            if n < 0 {
                return Err(ErrorReply::new("ERR The LIMIT argument must be >= 0."));
            }
            limit = Some(n as u64);
            i += 1;
        } else if xadd && super::is(opt, "nomkstream") {
            parsed.no_mkstream = true;
        } else if xadd {
            parsed.id = Some(xstream::parse_id(opt, true, 0, true)?);
            parsed.id_pos = i;
            break;
        } else {
            return Err(super::SYNTAX_ERROR);
        }
        i += 1;
    }
    if limit.is_some_and(|n| n > 0) && kind.is_none() {
        return Err(ErrorReply::new("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && kind.is_none() {
        return Err(ErrorReply::new("ERR syntax error, XTRIM must be called with a trimming strategy"));
    }
    if limit.is_some() && !approx {
        return Err(ErrorReply::new("ERR syntax error, LIMIT cannot be used without the special ~ option"));
    }
    parsed.trim = kind.map(|kind| Trim { kind, approx, limit: limit.unwrap_or(if approx { APPROX_LIMIT } else { 0 }) });
    Ok(parsed)
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    xstream::check_standalone(session)?;
    let parsed = parse_add_trim(args, false)?;
    let trim = parsed.trim.expect("XTRIM parses with a strategy");
    let Some(x) = xstream::lookup(session, args.get(1))? else {
        out.int(0);
        return Ok(());
    };
    let removed = x.lock().trim(&session.ctx, trim)?;
    out.int(removed as i64);
    Ok(())
}
