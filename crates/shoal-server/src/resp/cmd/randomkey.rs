//! RANDOMKEY: a random key of the selected database, or null if it has
//! none. The store's enumeration is in key-hash order, so the key is the
//! first at or after a random hash (wrapping round): keys after a long gap
//! in the hash space come up more often, as in any hash-sampled choice. In
//! a cluster it is a key of this server (in Redis Cluster mode, as Redis
//! Cluster; without it, the server the client is connected to).

use super::CommandSpec;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "randomkey",
    arity: 1,
    flags: &["readonly"],
    tips: &["request_policy:all_shards", "response_policy:special", "nondeterministic_output"],
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "1.0.0",
    summary: "Return a random key from the keyspace",
    ..CommandSpec::BASE
};

pub fn run(_: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let start: u64 = rand::random();
    let db = session.db();
    // A key at or after the random hash; if none, the first from 0.
    for cursor in [start, 0] {
        let (keys, _) = db.scan(cursor, u64::MAX, 1, usize::MAX, |_| true)?;
        if let Some(k) = keys.first() {
            out.bulk(k);
            return Ok(());
        }
    }
    out.null();
    Ok(())
}
