//! HELLO [protover [AUTH username password] [SETNAME clientname]]: switches
//! the connection to RESP2 or RESP3 and replies with a map describing the
//! server (server, version, proto, id, mode, role, modules).
//!
//! As in Redis 7, the options take effect one by one as they are read: an
//! AUTH logs the connection in (see `auth`) and a SETNAME names it even if a
//! later option is in error. An unauthenticated connection gets NOAUTH
//! unless the HELLO itself logs it in; the protocol changes only on success.

use super::{is, CommandSpec};
use crate::resp::cmd::auth::login;
use crate::resp::cmd::info::REDIS_VERSION;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Protocol, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "hello",
    syntax: "arguments=[protover#integer [AUTH (username password)] [SETNAME clientname]]",
    arity: -1,
    flags: &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"],
    acl: &["@fast", "@connection"],
    group: "connection",
    since: "6.0.0",
    summary: "Handshake with Redis",
    ..CommandSpec::BASE
};

/// Redis 7.0's reply to a HELLO on an unauthenticated connection without AUTH.
const NOAUTH_HELLO: ErrorReply = ErrorReply::new(
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> \
     option can be used to authenticate the client and select the RESP protocol version at the same time",
);

struct Hello {
    proto: Option<Protocol>,
}

impl Hello {
    /// Parses the protocol version, then reads and applies the options in
    /// order (AUTH logs in, SETNAME names the connection).
    fn parse_and_apply_options(args: Args<'_>, session: &mut Session) -> Result<Hello, ErrorReply> {
        let mut hello = Hello { proto: None };
        if args.len() >= 2 {
            let v = parse_i64(args.get(1))
                .ok_or(ErrorReply::new("ERR Protocol version is not an integer or out of range"))?;
            hello.proto = Some(match v {
                2 => Protocol::Resp2,
                3 => Protocol::Resp3,
                _ => return Err(ErrorReply::new("NOPROTO unsupported protocol version")),
            });
        }
        let mut i = 2;
        while i < args.len() {
            let more = args.len() - 1 - i;
            let opt = args.get(i);
            if is(opt, "AUTH") && more >= 2 {
                login(session, args.get(i + 1), args.get(i + 2))?;
                i += 3;
            } else if is(opt, "SETNAME") && more >= 1 {
                let name = args.get(i + 1);
                if !name.iter().all(|c| (b'!'..=b'~').contains(c)) {
                    return Err(ErrorReply::new(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                session.slot.update_text(|t| t.name = name.to_vec());
                i += 2;
            } else {
                return Err(ErrorReply::owned([b"ERR Syntax error in HELLO option '".as_slice(), opt, b"'"].concat()));
            }
        }
        if !session.authenticated {
            return Err(NOAUTH_HELLO);
        }
        Ok(hello)
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        if let Some(p) = self.proto {
            session.proto = p;
        }
        // The reply already uses the new protocol.
        out.set_protocol(session.proto);
        let reply = out;
        reply.map(7);
        reply.bulk(b"server");
        reply.bulk(b"redis");
        reply.bulk(b"version");
        reply.bulk(REDIS_VERSION.as_bytes());
        reply.bulk(b"proto");
        reply.int(session.proto.version());
        reply.bulk(b"id");
        reply.int(session.id as i64);
        reply.bulk(b"mode");
        reply.bulk(if session.cluster_mode { b"cluster" } else { b"standalone" });
        reply.bulk(b"role");
        reply.bulk(b"master");
        reply.bulk(b"modules");
        reply.array(0);
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Hello::parse_and_apply_options(args, session)?.apply(session, out);
    Ok(())
}
