//! KEYS pattern: every key of the database that matches the glob pattern,
//! in no particular order. In a cluster it runs on every live server and
//! the arrays are joined (`routing`). A reply that would pass the
//! connection's reply limit is refused with an error pointing to SCAN
//! (Redis would close the connection at its output buffer limit).

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::glob;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "keys",
    syntax: "pattern#pattern",
    tips: &["request_policy:all_shards", "nondeterministic_output_order"],
    arity: 2,
    flags: &["readonly"],
    acl: &["@keyspace", "@read", "@slow", "@dangerous"],
    group: "generic",
    summary: "Find all keys matching the given pattern",
    complexity: "O(N) with N being the number of keys in the database, under the assumption that the key names \
                 in the database and the given pattern have limited length.",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let pattern = args.get(1);
    let limit = session.reply_limit;
    let db = session.db();
    let mut keys = Vec::new();
    let mut bytes = 0;
    let mut cursor = Some(0);
    while let Some(c) = cursor {
        let (page, next) = db.scan(c, u64::MAX, 1024, limit, |k| glob::matches(pattern, k))?;
        for k in page {
            bytes += k.len() + 16;
            keys.push(k);
        }
        if bytes > limit {
            return Err(ErrorReply::owned(format!(
                "ERR KEYS reply exceeds the reply buffer limit ({limit} bytes): use SCAN"
            )));
        }
        cursor = next;
    }
    keys.extend(crate::resp::xstream::keys(&session.ctx, session.db).into_iter().filter(|k| glob::matches(pattern, k)));
    out.array(keys.len());
    for k in &keys {
        out.bulk(k);
    }
    Ok(())
}
