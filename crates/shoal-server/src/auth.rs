//! Client authentication, shared by every client front end: the users a
//! server knows (the `default` user, whose password is `requirepass`, and
//! the users of an ACL file), checking a user-password pair in constant
//! time, and the credentials this server presents to other servers of its
//! cluster when it forwards a command (all servers of a cluster are given
//! the same credentials).
//!
//! Every enabled user has full access: Shoal has no per-command or per-key
//! permissions. The ACL file is Redis's format, a subset of its rules:
//!
//! ```text
//! user NAME [on|off] [>password ...] [<password] [nopass] [resetpass] [reset]
//!           [~* %RW~* &* +@all allkeys allchannels allcommands resetchannels]
//! ```
//!
//! Rules apply left to right, as in Redis: a new user starts off, with no
//! password; `nopass` accepts any password (and forgets the listed ones); a
//! `>password` after it requires a password again. The rules that grant
//! full access are accepted and change nothing; any rule that would limit
//! a user (`~pattern`, `-@dangerous`, `+get`, ...) and hashed passwords
//! (`#...`) are refused when the file is loaded, rather than silently
//! ignored. Blank lines and lines starting with `#` are skipped.
//!
//! Who needs to authenticate: a connection starts authenticated as
//! `default` when that user is on and has `nopass` (no `requirepass` and no
//! `default` line in the ACL file: a server without credentials), and
//! unauthenticated otherwise.

use crate::config::ServerConfig;
use std::fmt;
use std::sync::Arc;

/// Redis's name for the user of a password-only `AUTH` and of new connections.
pub const DEFAULT_USER: &str = "default";

/// A secret that never appears in `Debug` output (logs, panics).
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Password(pub String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl std::str::FromStr for Password {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Password, Self::Err> {
        Ok(Password(s.to_owned()))
    }
}

/// One user: whether it may log in, and with what.
#[derive(Clone, PartialEq, Eq)]
struct User {
    name: Vec<u8>,
    enabled: bool,
    /// Any password is accepted.
    nopass: bool,
    passwords: Vec<Vec<u8>>,
}

impl User {
    fn new(name: &[u8]) -> User {
        User { name: name.to_vec(), enabled: false, nopass: false, passwords: Vec::new() }
    }

    /// Applies one ACL rule; an error names the rule and why.
    fn apply(&mut self, rule: &str) -> Result<(), String> {
        const FULL_ACCESS: &[&str] =
            &["~*", "%RW~*", "&*", "+@all", "allkeys", "allchannels", "allcommands", "resetchannels", "resetkeys"];
        if let Some(pw) = rule.strip_prefix('>') {
            if !self.passwords.iter().any(|p| p == pw.as_bytes()) {
                self.passwords.push(pw.as_bytes().to_vec());
            }
            self.nopass = false;
        } else if let Some(pw) = rule.strip_prefix('<') {
            let before = self.passwords.len();
            self.passwords.retain(|p| p != pw.as_bytes());
            if self.passwords.len() == before {
                return Err("'<' removes a password the user does not have".into());
            }
        } else if rule.starts_with('#') || rule.starts_with('!') {
            return Err(format!(
                "hashed passwords ('{}...') are not supported; give the password with '>'",
                &rule[..1]
            ));
        } else if rule.eq_ignore_ascii_case("on") {
            self.enabled = true;
        } else if rule.eq_ignore_ascii_case("off") {
            self.enabled = false;
        } else if rule.eq_ignore_ascii_case("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if rule.eq_ignore_ascii_case("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if rule.eq_ignore_ascii_case("reset") {
            *self = User::new(&self.name);
        } else if FULL_ACCESS.iter().any(|r| r.eq_ignore_ascii_case(rule)) {
        } else {
            return Err(format!(
                "rule '{rule}' is not supported: every Shoal user has full access, so only on, off, >password, \
                 <password, nopass, resetpass, reset and the full-access rules (~* &* +@all allkeys allchannels \
                 allcommands) are accepted"
            ));
        }
        Ok(())
    }

    /// Whether `password` logs this user in. Takes time that depends on
    /// the lengths of the passwords only, not on where they differ.
    fn accepts(&self, password: &[u8]) -> bool {
        let mut ok = false;
        for p in &self.passwords {
            ok |= ct_eq(p, password);
        }
        self.enabled && (self.nopass || ok)
    }
}

/// Whether `a` and `b` are equal, in time that depends only on their
/// lengths (every byte of the longer one is looked at).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// A user name and password, as this server presents them to another.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: Vec<u8>,
    pub password: Vec<u8>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({}, <redacted>)", String::from_utf8_lossy(&self.user))
    }
}

/// The users of a server (see the module comment). Cheap to query; built
/// once at start.
#[derive(Clone)]
pub struct Users {
    /// `default` first, then the ACL file's users in file order.
    users: Vec<User>,
    requirepass: Option<Password>,
    peer: Option<Arc<Credentials>>,
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.users.iter().map(|u| String::from_utf8_lossy(&u.name).into_owned()).collect();
        f.debug_struct("Users").field("names", &names).field("required", &self.required()).finish()
    }
}

impl Users {
    /// The users of `config`: `requirepass` and the ACL file (read here).
    /// Errors name the file, the line and the rule.
    pub fn from_config(config: &ServerConfig) -> Result<Users, String> {
        let text = match &config.acl_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the ACL file {}: {e}", path.display()))?,
            ),
            None => None,
        };
        Users::new(config.requirepass.as_ref(), text.as_deref()).map_err(|e| match &config.acl_file {
            Some(path) => format!("ACL file {}: {e}", path.display()),
            None => e,
        })
    }

    /// The users given `requirepass` and the text of an ACL file. An empty
    /// `requirepass` is no password, as in Redis.
    pub fn new(requirepass: Option<&Password>, acl: Option<&str>) -> Result<Users, String> {
        let requirepass = requirepass.filter(|p| !p.0.is_empty());
        let mut users: Vec<User> = Vec::new();
        for (n, line) in acl.unwrap_or("").lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_ascii_whitespace();
            if words.next() != Some("user") {
                return Err(format!("line {}: a line must start with 'user'", n + 1));
            }
            let Some(name) = words.next() else {
                return Err(format!("line {}: 'user' needs a name", n + 1));
            };
            if users.iter().any(|u| u.name == name.as_bytes()) {
                return Err(format!("line {}: duplicate user '{name}'", n + 1));
            }
            let mut user = User::new(name.as_bytes());
            for rule in words {
                user.apply(rule).map_err(|e| format!("line {}: user '{name}': {e}", n + 1))?;
            }
            users.push(user);
        }
        let pos = users.iter().position(|u| u.name == DEFAULT_USER.as_bytes());
        let default = match (pos, requirepass) {
            (Some(_), Some(_)) => {
                return Err("both requirepass (--password) and the ACL file set the default user's password; \
                            set it in one place"
                    .into())
            }
            (Some(i), None) => users.remove(i),
            (None, Some(pw)) => {
                User { name: DEFAULT_USER.into(), enabled: true, nopass: false, passwords: vec![pw.0.clone().into()] }
            }
            (None, None) => User { name: DEFAULT_USER.into(), enabled: true, nopass: true, passwords: Vec::new() },
        };
        users.insert(0, default);
        let mut users = Users { users, requirepass: requirepass.cloned(), peer: None };
        users.peer = users.pick_peer_credentials().map(Arc::new);
        Ok(users)
    }

    /// Whether new connections must authenticate before anything else.
    pub fn required(&self) -> bool {
        let default = &self.users[0];
        !(default.enabled && default.nopass)
    }

    /// Whether the default user takes any password (a password-only `AUTH`
    /// is then a configuration mistake, as Redis says).
    pub fn default_nopass(&self) -> bool {
        self.users[0].nopass
    }

    /// Whether `user` with `password` may log in. A user that does not
    /// exist costs one comparison too, so the time taken does not tell
    /// which names exist.
    pub fn authenticate(&self, user: &[u8], password: &[u8]) -> bool {
        match self.users.iter().find(|u| u.name == user) {
            Some(u) => u.accepts(password),
            None => {
                let decoy =
                    User { name: Vec::new(), enabled: false, nopass: false, passwords: vec![password.to_vec()] };
                decoy.accepts(password)
            }
        }
    }

    /// Whether a user of that name exists (CLIENT KILL USER).
    pub fn has_user(&self, name: &[u8]) -> bool {
        self.users.iter().any(|u| u.name == name)
    }

    /// `requirepass` as CONFIG GET shows it ("" when unset).
    pub fn requirepass(&self) -> &str {
        self.requirepass.as_ref().map_or("", |p| &p.0)
    }

    /// What this server presents to other servers' client ports (all
    /// servers of a cluster share the credentials): `default` and
    /// `requirepass`, or else the first enabled user of the ACL file that
    /// has a password (or `nopass`). `None` when no authentication is
    /// needed, or no user can log in.
    pub fn peer_credentials(&self) -> Option<&Arc<Credentials>> {
        self.peer.as_ref()
    }

    fn pick_peer_credentials(&self) -> Option<Credentials> {
        if !self.required() {
            return None;
        }
        self.users.iter().filter(|u| u.enabled).find_map(|u| {
            let password = if u.nopass { Vec::new() } else { u.passwords.first()?.clone() };
            Some(Credentials { user: u.name.clone(), password })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw(s: &str) -> Password {
        Password(s.into())
    }

    #[test]
    fn ct_eq_compares_bytes_and_lengths() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"secret", b"secret"));
        assert!(!ct_eq(b"secret", b"secreT"));
        assert!(!ct_eq(b"secret", b"secret\0"));
        assert!(!ct_eq(b"", b"\0"));
        assert!(!ct_eq(b"a", b""));
    }

    #[test]
    fn new_without_credentials_needs_no_authentication() {
        let u = Users::new(None, None).unwrap();
        assert!(!u.required());
        assert!(u.default_nopass());
        assert!(u.authenticate(b"default", b"anything"));
        assert!(!u.authenticate(b"alice", b"anything"));
        assert_eq!(u.requirepass(), "");
        assert!(u.peer_credentials().is_none());
    }

    #[test]
    fn new_with_an_empty_requirepass_has_no_password() {
        let u = Users::new(Some(&pw("")), None).unwrap();
        assert!(!u.required());
        assert_eq!(u.requirepass(), "");
    }

    #[test]
    fn new_with_requirepass_protects_the_default_user() {
        let u = Users::new(Some(&pw("s3cret")), None).unwrap();
        assert!(u.required());
        assert!(!u.default_nopass());
        assert!(u.authenticate(b"default", b"s3cret"));
        assert!(!u.authenticate(b"default", b"s3cre"));
        assert!(!u.authenticate(b"default", b""));
        assert!(!u.authenticate(b"nobody", b"s3cret"));
        assert_eq!(u.requirepass(), "s3cret");
        let c = u.peer_credentials().unwrap();
        assert_eq!((&c.user[..], &c.password[..]), (&b"default"[..], &b"s3cret"[..]));
        assert!(!format!("{c:?}{:?}", pw("s3cret")).contains("s3cret"));
    }

    #[test]
    fn acl_file_rules_apply_left_to_right() {
        let acl = "# users\n\nuser alice on >a1 >a2 ~* &* +@all\nuser bob off >b\nuser carol on nopass\n\
                   user dave on nopass >d\nuser erin on >e1 >e2 <e1\nuser frank on >f resetpass\n\
                   user gina on >g reset\n";
        let u = Users::new(Some(&pw("top")), Some(acl)).unwrap();
        assert!(u.authenticate(b"alice", b"a1") && u.authenticate(b"alice", b"a2"));
        assert!(!u.authenticate(b"alice", b"a3"));
        assert!(!u.authenticate(b"bob", b"b"), "off");
        assert!(u.authenticate(b"carol", b"") && u.authenticate(b"carol", b"x"), "nopass");
        assert!(u.authenticate(b"dave", b"d") && !u.authenticate(b"dave", b"x"), "> after nopass");
        assert!(!u.authenticate(b"erin", b"e1") && u.authenticate(b"erin", b"e2"));
        assert!(!u.authenticate(b"frank", b"f") && !u.authenticate(b"frank", b""));
        assert!(!u.authenticate(b"gina", b"g"), "reset turns the user off");
        assert!(u.authenticate(b"default", b"top"));
    }

    #[test]
    fn acl_file_may_define_the_default_user() {
        let u = Users::new(None, Some("user default on >d\nuser alice on >a\n")).unwrap();
        assert!(u.required());
        assert!(u.authenticate(b"default", b"d"));
        assert_eq!(u.requirepass(), "");
        let off = Users::new(None, Some("user default off\nuser alice on nopass\n")).unwrap();
        assert!(off.required());
        assert!(!off.authenticate(b"default", b""));
        let c = off.peer_credentials().unwrap();
        assert_eq!((&c.user[..], &c.password[..]), (&b"alice"[..], &b""[..]));
    }

    #[test]
    fn acl_file_errors_name_the_line() {
        let bad = |acl: &str| Users::new(None, Some(acl)).unwrap_err();
        assert!(bad("user alice on >a ~keys:*").contains("line 1: user 'alice': rule '~keys:*' is not supported"));
        assert!(bad("\nuser alice on -@dangerous").starts_with("line 2"));
        assert!(bad("user alice on #5e88").contains("hashed passwords"));
        assert!(bad("alice on").contains("must start with 'user'"));
        assert!(bad("user").contains("needs a name"));
        assert!(bad("user a on\nuser a off").contains("duplicate user 'a'"));
        assert!(bad("user a on <x").contains("does not have"));
        let both = Users::new(Some(&pw("p")), Some("user default on >q")).unwrap_err();
        assert!(both.contains("both requirepass"));
    }
}
