//! AUTH [username] password: logs the connection in as `username` (the
//! `default` user when only a password is given), as Redis 7 does, with its
//! error texts. A failed AUTH leaves the connection as it was (still
//! unauthenticated, or still logged in). The check is `auth::Users`'s,
//! shared with HELLO AUTH and the native protocol.

use super::{CommandSpec, SYNTAX_ERROR};
use crate::auth::DEFAULT_USER;
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

pub static SPEC: CommandSpec = CommandSpec {
    name: "auth",
    syntax: "[username] password",
    arity: -2,
    flags: &["noscript", "loading", "stale", "fast", "no_auth", "sentinel", "allow_busy"],
    acl: &["@fast", "@connection"],
    group: "connection",
    summary: "Authenticate to the server",
    complexity: "O(N) where N is the number of passwords defined for the user",
    ..CommandSpec::BASE
};

/// Redis's reply to a user-password pair that does not log in.
pub const WRONGPASS: ErrorReply = ErrorReply::new("WRONGPASS invalid username-password pair or user is disabled.");
/// Redis's reply to a password-only AUTH when the default user needs none.
const NO_PASSWORD_SET: ErrorReply = ErrorReply::new(
    "ERR AUTH <password> called without any password configured for the default user. Are you sure your \
     configuration is correct?",
);

struct Auth<'a> {
    user: &'a [u8],
    password: &'a [u8],
}

impl<'a> Auth<'a> {
    fn parse(args: Args<'a>, session: &Session) -> Result<Auth<'a>, ErrorReply> {
        match args.len() {
            2 if session.ctx.auth.default_nopass() => Err(NO_PASSWORD_SET),
            2 => Ok(Auth { user: DEFAULT_USER.as_bytes(), password: args.get(1) }),
            3 => Ok(Auth { user: args.get(1), password: args.get(2) }),
            _ => Err(SYNTAX_ERROR),
        }
    }
}

/// Logs `session` in as `user` if `password` is right; `WRONGPASS` if not
/// (the session is then unchanged).
pub fn login(session: &mut Session, user: &[u8], password: &[u8]) -> Result<(), ErrorReply> {
    if !session.ctx.auth.authenticate(user, password) {
        return Err(WRONGPASS);
    }
    session.authenticated = true;
    session.slot.update_text(|t| t.user = user.to_vec());
    Ok(())
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let auth = Auth::parse(args, session)?;
    login(session, auth.user, auth.password)?;
    out.ok();
    Ok(())
}
