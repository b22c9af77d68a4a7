//! WAIT numreplicas timeout: the number of replicas that hold every write
//! this connection was answered for, at once.
//!
//! In a cluster a write is answered only once the log holding it is on all
//! of its master's replicas (R of them, from the cluster map), so WAIT never
//! has anything to wait for and answers R; a standalone server has no
//! replicas and answers 0 (without blocking, where Redis would wait for the
//! timeout). The arguments are checked as Redis checks them.

use super::{CommandSpec, NOT_AN_INTEGER};
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "wait",
    syntax: "numreplicas#integer timeout#integer",
    tips: &["request_policy:all_shards", "response_policy:agg_min"],
    arity: 3,
    flags: &["noscript"],
    acl: &["@slow", "@connection"],
    group: "generic",
    since: "3.0.0",
    summary: "Wait for the synchronous replication of all the write commands sent in the context of the current \
              connection",
    complexity: "O(1)",
    ..CommandSpec::BASE
};

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    parse_i64(args.get(1)).ok_or(NOT_AN_INTEGER)?;
    let timeout = parse_i64(args.get(2)).ok_or(ErrorReply::new("ERR timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(ErrorReply::new("ERR timeout is negative"));
    }
    let replicas = session.ctx.cluster.as_ref().map_or(0, |node| node.map().replicas);
    out.int(replicas as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ByteSize, ServerConfig};
    use crate::context::ServerContext;
    use crate::resp::reply::Protocol;
    use bytes::BytesMut;
    use std::sync::Arc;

    fn wait(words: &[&[u8]]) -> Vec<u8> {
        let ctx = ServerContext::new(ServerConfig { memory: ByteSize(64 << 20), ..Default::default() }).unwrap();
        let mut session = Session::new(Arc::new(ctx), 1);
        let mut data = Vec::new();
        let mut spans = Vec::new();
        for w in words {
            spans.push((data.len(), data.len() + w.len()));
            data.extend_from_slice(w);
        }
        let mut out = BytesMut::new();
        let mut reply = Reply::new(&mut out, Protocol::Resp2);
        if let Err(e) = run(Args::new(&data, &spans), &mut session, &mut reply) {
            reply.error(&e);
        }
        out.to_vec()
    }

    #[test]
    fn wait_answers_at_once_and_checks_its_arguments_as_redis() {
        assert_eq!(wait(&[b"WAIT", b"1", b"0"]), b":0\r\n", "standalone: no replicas");
        assert_eq!(wait(&[b"WAIT", b"x", b"0"]), b"-ERR value is not an integer or out of range\r\n");
        assert_eq!(wait(&[b"WAIT", b"1", b"1.5"]), b"-ERR timeout is not an integer or out of range\r\n");
        assert_eq!(wait(&[b"WAIT", b"1", b"-1"]), b"-ERR timeout is negative\r\n");
    }
}
