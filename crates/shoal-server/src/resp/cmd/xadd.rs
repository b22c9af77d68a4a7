//! XADD key [NOMKSTREAM] [(MAXLEN | MINID) [= | ~] threshold [LIMIT count]]
//! (* | id) field value [field value ...]: appends an entry to a stream
//! (created on the first XADD unless NOMKSTREAM), then trims it; the
//! entry's ID.

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use crate::resp::xstream::{self, AddRefused, NewId};

pub static SPEC: CommandSpec = CommandSpec {
    name: "xadd",
    syntax: "key [NOMKSTREAM] [trim=(strategy=(MAXLEN|MINID) [operator=(=|~)] threshold [LIMIT count#integer])] \
             id_or_auto=(*|id) field_value=(field value)...",
    arity: -5,
    flags: &["write", "denyoom", "fast"],
    first_key: 1,
    last_key: 1,
    step: 1,
    acl: &["@write", "@stream", "@fast"],
    tips: &["nondeterministic_output"],
    group: "stream",
    since: "5.0.0",
    summary: "Appends a new entry to a stream",
    complexity: "O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    xstream::check_standalone(session)?;
    let parsed = super::xtrim::parse_add_trim(args, true)?;
    let fields = parsed.id_pos + 1;
    if args.len() < fields + 2 || (args.len() - fields) % 2 == 1 {
        return Err(super::wrong_arity("xadd"));
    }
    let new = match &parsed.id {
        None => NewId::Auto,
        Some(p) if p.seq_given && p.id == xstream::StreamId::MIN => {
            return Err(ErrorReply::new("ERR The ID specified in XADD must be greater than 0-0"))
        }
        Some(p) if p.seq_given => NewId::Exact(p.id),
        Some(p) => NewId::Ms(p.id.ms),
    };
    let key = args.get(1);
    // The stream may be removed (DEL) between its lookup and the append:
    // then it is looked up (created) again.
    loop {
        let x = match xstream::lookup(session, key)? {
            Some(x) => x,
            None if parsed.no_mkstream => {
                out.null();
                return Ok(());
            }
            None => {
                // Checked before the stream is created, so that a refused
                // entry leaves no empty stream behind.
                let bytes = xstream::ENTRY_OVERHEAD + args.skip(fields).iter().map(|f| 4 + f.len()).sum::<usize>();
                xstream::check_entry_size(&session.ctx, bytes)?;
                xstream::find_or_create(&session.ctx, session.db, key)?
            }
        };
        let added = x.lock().add(&session.ctx, new, args.skip(fields).iter(), parsed.trim);
        match added {
            Ok(id) => {
                session.ctx.xstreams.wake(session.db, key);
                out.bulk(&id.text());
                return Ok(());
            }
            Err(AddRefused::Dropped) => continue,
            Err(AddRefused::Error(e)) => return Err(e),
        }
    }
}
