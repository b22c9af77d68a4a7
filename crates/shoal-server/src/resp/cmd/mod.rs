//! The command table: every supported command's description (name, arity,
//! flags, keys, documentation: what COMMAND and COMMAND DOCS report) and
//! the function that runs it.
//!
//! Each command lives in its own file, which holds both directions: parsing
//! its arguments into a typed command (rejecting what Redis rejects, with
//! Redis's error text) and applying it to the database, encoding the reply.
//! The dispatcher checks the arity before a command's parser runs, so a
//! parser may index arguments within its arity.

use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

mod append;
mod auth;
mod client;
mod cluster;
mod command;
mod config;
mod dbsize;
mod del;
mod echo;
mod exists;
mod expire;
mod flushdb;
pub(crate) mod get;
mod getdel;
mod getex;
mod getset;
mod hello;
mod incr;
mod info;
mod keys;
mod latency;
mod mget;
mod monitor;
mod mset;
mod msetnx;
pub mod multi;
mod object;
mod persist;
mod ping;
mod quit;
mod randomkey;
mod range;
mod rename;
mod scan;
mod select;
mod set;
mod setex;
mod setnx;
mod shoal_local;
mod shoal_mc;
mod slowlog;
mod strlen;
mod syntax;
mod time;
mod ttl;
mod type_of;
mod wait;
mod xadd;
mod xdel;
mod xlen;
mod xrange;
mod xread;
mod xtrim;

pub use xread::BlockedRead;

pub use rename::copy_destination_db;
pub use scan::parse_cursor as scan_cursor;
pub use select::parse_index as select_index;

/// What COMMAND and COMMAND DOCS say about a command.
pub struct CommandSpec {
    /// Lower case, as Redis names it (subcommands: "config|get").
    pub name: &'static str,
    /// Redis's arity: n means exactly n arguments (name included), -n at least n.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub acl: &'static [&'static str],
    /// Redis's command tips (COMMAND INFO), which cluster clients read to
    /// send keyless commands to every master and combine the replies.
    pub tips: &'static [&'static str],
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    /// The arguments, in the notation of `syntax` (what COMMAND DOCS
    /// reports, and redis-cli shows as hints); "" for none.
    pub syntax: &'static str,
    pub subcommands: &'static [CommandSpec],
}

impl CommandSpec {
    /// A spec with no keys, flags or subcommands, for `..CommandSpec::BASE`.
    pub const BASE: CommandSpec = CommandSpec {
        name: "",
        arity: 1,
        flags: &[],
        first_key: 0,
        last_key: 0,
        step: 0,
        acl: &[],
        tips: &[],
        group: "generic",
        since: "1.0.0",
        summary: "",
        complexity: "O(1)",
        syntax: "",
        subcommands: &[],
    };

    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let a = self.arity as i64;
        if a >= 0 {
            argc == a
        } else {
            argc >= -a
        }
    }
}

/// Runs a command: parses `args` (whose arity was checked), applies it and
/// writes its reply, or returns the error to reply with.
pub type RunFn = fn(Args<'_>, &mut Session, &mut Reply<'_>) -> Result<(), ErrorReply>;

pub struct Entry {
    pub spec: &'static CommandSpec,
    pub run: RunFn,
}

/// Every supported command. Any other gets the unknown-command error.
pub static COMMANDS: &[Entry] = &[
    Entry { spec: &get::SPEC, run: get::run },
    Entry { spec: &set::SPEC, run: set::run },
    Entry { spec: &incr::INCR, run: incr::run_incr },
    Entry { spec: &mget::SPEC, run: mget::run },
    Entry { spec: &mset::SPEC, run: mset::run },
    Entry { spec: &ping::SPEC, run: ping::run },
    Entry { spec: &del::DEL, run: del::run },
    Entry { spec: &del::UNLINK, run: del::run },
    Entry { spec: &exists::SPEC, run: exists::run },
    Entry { spec: &incr::INCRBY, run: incr::run_incrby },
    Entry { spec: &incr::DECR, run: incr::run_decr },
    Entry { spec: &incr::DECRBY, run: incr::run_decrby },
    Entry { spec: &incr::INCRBYFLOAT, run: incr::run_incrbyfloat },
    Entry { spec: &append::SPEC, run: append::run },
    Entry { spec: &strlen::SPEC, run: strlen::run },
    Entry { spec: &setnx::SPEC, run: setnx::run },
    Entry { spec: &getset::SPEC, run: getset::run },
    Entry { spec: &msetnx::SPEC, run: msetnx::run },
    Entry { spec: &echo::SPEC, run: echo::run },
    Entry { spec: &scan::SPEC, run: scan::run },
    Entry { spec: &dbsize::SPEC, run: dbsize::run },
    Entry { spec: &select::SPEC, run: select::run },
    Entry { spec: &flushdb::SPEC, run: flushdb::run },
    Entry { spec: &info::SPEC, run: info::run },
    Entry { spec: &config::SPEC, run: config::run },
    Entry { spec: &client::SPEC, run: client::run },
    Entry { spec: &hello::SPEC, run: hello::run },
    Entry { spec: &auth::SPEC, run: auth::run },
    Entry { spec: &command::SPEC, run: command::run },
    Entry { spec: &quit::SPEC, run: quit::run },
    Entry { spec: &wait::SPEC, run: wait::run },
    Entry { spec: &shoal_local::SPEC, run: shoal_local::run },
    Entry { spec: &shoal_mc::SPEC, run: shoal_mc::run },
    Entry { spec: &setex::SETEX, run: setex::run_setex },
    Entry { spec: &setex::PSETEX, run: setex::run_psetex },
    Entry { spec: &getex::SPEC, run: getex::run },
    Entry { spec: &expire::EXPIRE, run: expire::run_expire },
    Entry { spec: &expire::PEXPIRE, run: expire::run_pexpire },
    Entry { spec: &expire::EXPIREAT, run: expire::run_expireat },
    Entry { spec: &expire::PEXPIREAT, run: expire::run_pexpireat },
    Entry { spec: &ttl::TTL, run: ttl::run_ttl },
    Entry { spec: &ttl::PTTL, run: ttl::run_pttl },
    Entry { spec: &ttl::EXPIRETIME, run: ttl::run_expiretime },
    Entry { spec: &ttl::PEXPIRETIME, run: ttl::run_pexpiretime },
    Entry { spec: &persist::SPEC, run: persist::run },
    Entry { spec: &getdel::SPEC, run: getdel::run },
    Entry { spec: &range::GETRANGE, run: range::run_getrange },
    Entry { spec: &range::SETRANGE, run: range::run_setrange },
    Entry { spec: &type_of::SPEC, run: type_of::run },
    Entry { spec: &time::SPEC, run: time::run },
    Entry { spec: &keys::SPEC, run: keys::run },
    Entry { spec: &flushdb::FLUSHALL, run: flushdb::run_flushall },
    Entry { spec: &multi::MULTI, run: multi::run_multi },
    Entry { spec: &multi::EXEC, run: multi::run_exec },
    Entry { spec: &multi::DISCARD, run: multi::run_discard },
    Entry { spec: &multi::WATCH, run: multi::run_watch },
    Entry { spec: &multi::UNWATCH, run: multi::run_unwatch },
    Entry { spec: &multi::SHOAL_EXEC, run: multi::run_shoal_exec },
    Entry { spec: &multi::SHOAL_VERSIONS, run: multi::run_shoal_versions },
    Entry { spec: &rename::RENAME, run: rename::run_rename },
    Entry { spec: &rename::RENAMENX, run: rename::run_renamenx },
    Entry { spec: &rename::COPY, run: rename::run_copy },
    Entry { spec: &object::OBJECT, run: object::run_object },
    Entry { spec: &object::MEMORY, run: object::run_memory },
    Entry { spec: &randomkey::SPEC, run: randomkey::run },
    Entry { spec: &cluster::SPEC, run: cluster::run },
    Entry { spec: &cluster::READONLY, run: cluster::run_ok },
    Entry { spec: &cluster::READWRITE, run: cluster::run_ok },
    Entry { spec: &cluster::ASKING, run: cluster::run_ok },
    Entry { spec: &slowlog::SPEC, run: slowlog::run },
    Entry { spec: &latency::SPEC, run: latency::run },
    Entry { spec: &monitor::SPEC, run: monitor::run },
    Entry { spec: &xadd::SPEC, run: xadd::run },
    Entry { spec: &xlen::SPEC, run: xlen::run },
    Entry { spec: &xrange::XRANGE, run: xrange::run_xrange },
    Entry { spec: &xrange::XREVRANGE, run: xrange::run_xrevrange },
    Entry { spec: &xread::SPEC, run: xread::run },
    Entry { spec: &xtrim::SPEC, run: xtrim::run },
    Entry { spec: &xdel::SPEC, run: xdel::run },
];

/// Whether the command may run on a connection that has not authenticated
/// (Redis's `no_auth` flag: AUTH, HELLO, QUIT).
pub fn allowed_before_auth(spec: &CommandSpec) -> bool {
    spec.flags.contains(&"no_auth")
}

/// Redis's reply to any other command before authentication.
pub const NOAUTH: ErrorReply = ErrorReply::new("NOAUTH Authentication required.");

/// Whether the command may write.
pub fn writes(spec: &CommandSpec) -> bool {
    spec.flags.contains(&"write")
}

/// Whether the command reads or writes stored data (Redis's `readonly` and
/// `write` flags). In a cluster its reply waits until the log is durable
/// (a read must not return what a crash could still lose) and goes out
/// only if this server's lease held after it ran (`lease.rs`).
pub fn touches_data(spec: &CommandSpec) -> bool {
    writes(spec) || spec.flags.contains(&"readonly")
}

/// Commands that say themselves what their reply waits for
/// (`Session::durable`: GET, a read of one key) instead of the whole log
/// applied so far.
pub fn waits_for_own_keys(spec: &CommandSpec) -> bool {
    std::ptr::eq(spec, &get::SPEC)
}

/// The entry for a command name, in any case.
pub fn lookup(name: &[u8]) -> Option<&'static Entry> {
    lookup_index(name).map(|i| &COMMANDS[i])
}

/// The position in [`COMMANDS`] of a command name, in any case.
pub fn lookup_index(name: &[u8]) -> Option<usize> {
    COMMANDS.iter().position(|e| e.spec.name.len() == name.len() && e.spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// The position in [`COMMANDS`] of one of its entries.
pub fn index_of(entry: &'static Entry) -> usize {
    let offset = (entry as *const Entry as usize).wrapping_sub(COMMANDS.as_ptr() as usize);
    let index = offset / std::mem::size_of::<Entry>();
    debug_assert!(std::ptr::eq(&COMMANDS[index], entry), "an entry of the command table");
    index
}

/// The position in `spec.subcommands` of the subcommand `args` name, if
/// `spec` has subcommands and it is one of them.
pub fn sub_index(spec: &'static CommandSpec, args: Args<'_>) -> Option<usize> {
    if spec.subcommands.is_empty() || args.len() < 2 {
        return None;
    }
    let name = args.get(1);
    spec.subcommands.iter().position(|s| {
        let sub = s.name.split_once('|').map_or(s.name, |(_, sub)| sub);
        sub.as_bytes().eq_ignore_ascii_case(name)
    })
}

/// Whether MONITOR does not show the command, as Redis hides
/// administrative commands (`admin` flag) from it.
pub fn hidden_from_monitor(spec: &CommandSpec) -> bool {
    spec.flags.contains(&"admin") || spec.flags.contains(&"skip_monitor")
}

/// The arguments as the slow log and MONITOR show them: a password
/// (AUTH's arguments, HELLO's AUTH pair) replaced by "(redacted)", as Redis does.
pub fn redacted(args: Args<'_>) -> Vec<std::borrow::Cow<'_, [u8]>> {
    use std::borrow::Cow;
    const HIDDEN: &[u8] = b"(redacted)";
    let mut shown: Vec<Cow<'_, [u8]>> = args.iter().map(Cow::Borrowed).collect();
    if is(args.get(0), "auth") {
        shown.iter_mut().skip(1).for_each(|a| *a = Cow::Borrowed(HIDDEN));
    } else if is(args.get(0), "hello") {
        let mut i = 2;
        while i < shown.len() {
            if is(&shown[i], "auth") && i + 2 < shown.len() {
                shown[i + 1] = Cow::Borrowed(HIDDEN);
                shown[i + 2] = Cow::Borrowed(HIDDEN);
                i += 3;
            } else {
                i += 1;
            }
        }
    }
    shown
}

/// A MONITOR line, as Redis writes it: `+<secs>.<micros> [<db> <addr>]`
/// and each argument quoted (C escapes for the backslash, the quote and
/// control characters, `\xHH` for other unprintable bytes).
pub fn monitor_line<'a>(
    now: std::time::Duration,
    db: usize,
    addr: &std::net::SocketAddr,
    args: impl Iterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let mut line = format!("+{}.{:06} [{} {}]", now.as_secs(), now.subsec_micros(), db, addr).into_bytes();
    for a in args {
        line.extend_from_slice(b" \"");
        for &c in a {
            match c {
                b'\\' | b'"' => line.extend_from_slice(&[b'\\', c]),
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                b'\t' => line.extend_from_slice(b"\\t"),
                7 => line.extend_from_slice(b"\\a"),
                8 => line.extend_from_slice(b"\\b"),
                b' '..=b'~' => line.push(c),
                _ => line.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
            }
        }
        line.push(b'"');
    }
    line.extend_from_slice(b"\r\n");
    line
}

/// The spec of a subcommand of `parent`, in any case.
pub fn lookup_sub(parent: &'static CommandSpec, name: &[u8]) -> Option<&'static CommandSpec> {
    parent.subcommands.iter().find(|s| {
        let sub = s.name.split_once('|').map_or(s.name, |(_, sub)| sub);
        sub.as_bytes().eq_ignore_ascii_case(name)
    })
}

/// Redis's arity error: "ERR wrong number of arguments for 'get' command".
pub fn wrong_arity(name: &str) -> ErrorReply {
    ErrorReply::owned(format!("ERR wrong number of arguments for '{name}' command"))
}

pub const SYNTAX_ERROR: ErrorReply = ErrorReply::new("ERR syntax error");
pub const NOT_AN_INTEGER: ErrorReply = ErrorReply::new("ERR value is not an integer or out of range");

/// Redis's text for an unknown command: its name and the start of its
/// arguments, each quoted and cut as Redis cuts them (at 128 bytes, at a NUL).
pub fn unknown_command(args: Args<'_>) -> ErrorReply {
    let mut text = b"ERR unknown command '".to_vec();
    text.extend_from_slice(c_string(args.get(0), 128));
    text.extend_from_slice(b"', with args beginning with: ");
    let mut listed = Vec::new();
    for a in args.iter().skip(1) {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push(b'\'');
        listed.extend_from_slice(c_string(a, room));
        listed.extend_from_slice(b"' ");
    }
    text.extend_from_slice(&listed);
    ErrorReply::owned(text)
}

/// Redis's text for an unknown subcommand: "ERR unknown subcommand 'x'. Try CONFIG HELP."
pub fn unknown_subcommand(args: Args<'_>) -> ErrorReply {
    let mut text = b"ERR unknown subcommand '".to_vec();
    text.extend_from_slice(c_string(args.get(1), 128));
    text.extend_from_slice(b"'. Try ");
    text.extend_from_slice(&args.get(0).to_ascii_uppercase());
    text.extend_from_slice(b" HELP.");
    ErrorReply::owned(text)
}

/// `s` as C's "%.{max}s" prints it: up to the first NUL, at most `max` bytes.
pub(super) fn c_string(s: &[u8], max: usize) -> &[u8] {
    let s = s.split(|&c| c == 0).next().unwrap_or(s);
    &s[..s.len().min(max)]
}

/// A HELP subcommand's reply: its lines as simple strings.
pub(super) fn help(out: &mut Reply, lines: &[&str]) {
    out.array(lines.len());
    for l in lines {
        out.simple(l);
    }
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_of(words: &[&[u8]]) -> (Vec<u8>, Vec<(usize, usize)>) {
        let mut data = Vec::new();
        let mut spans = Vec::new();
        for w in words {
            spans.push((data.len(), data.len() + w.len()));
            data.extend_from_slice(w);
        }
        (data, spans)
    }

    #[test]
    fn unknown_command_text_matches_redis() {
        let (d, s) = args_of(&[b"foo"]);
        assert_eq!(unknown_command(Args::new(&d, &s)).text(), b"ERR unknown command 'foo', with args beginning with: ");
        let (d, s) = args_of(&[b"foo", b"a", b"b\0c"]);
        assert_eq!(
            unknown_command(Args::new(&d, &s)).text(),
            b"ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        let long = [b'x'; 200];
        let (d, s) = args_of(&[b"foo", &long, b"next"]);
        let t = unknown_command(Args::new(&d, &s));
        assert!(t.text().ends_with(&[[b'x'; 128].as_slice(), b"' "].concat()));
    }

    #[test]
    fn every_command_is_found_in_any_case_and_names_are_unique() {
        for e in COMMANDS {
            assert!(lookup(e.spec.name.as_bytes()).is_some());
            assert!(lookup(e.spec.name.to_uppercase().as_bytes()).is_some());
            assert_eq!(COMMANDS.iter().filter(|o| o.spec.name == e.spec.name).count(), 1);
        }
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn monitor_line_quotes_and_escapes_as_redis() {
        let (d, s) = args_of(&[b"set", b"a b", b"q\"\\\n\r\t\x07\x08\x01\xff"]);
        let addr = "127.0.0.1:5000".parse().unwrap();
        let line =
            monitor_line(std::time::Duration::from_micros(1_700_000_000_000_042), 3, &addr, Args::new(&d, &s).iter());
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "+1700000000.000042 [3 127.0.0.1:5000] \"set\" \"a b\" \"q\\\"\\\\\\n\\r\\t\\a\\b\\x01\\xff\"\r\n"
        );
    }

    #[test]
    fn redacted_hides_auth_and_hello_passwords() {
        let (d, s) = args_of(&[b"AUTH", b"user", b"pw"]);
        let shown: Vec<Vec<u8>> = redacted(Args::new(&d, &s)).iter().map(|a| a.to_vec()).collect();
        assert_eq!(shown, vec![b"AUTH".to_vec(), b"(redacted)".to_vec(), b"(redacted)".to_vec()]);
        let (d, s) = args_of(&[b"hello", b"3", b"auth", b"u", b"p", b"SETNAME", b"n"]);
        let shown: Vec<Vec<u8>> = redacted(Args::new(&d, &s)).iter().map(|a| a.to_vec()).collect();
        assert_eq!(shown[3], b"(redacted)");
        assert_eq!(shown[4], b"(redacted)");
        assert_eq!(shown[6], b"n");
    }

    #[test]
    fn the_table_fits_the_command_counters() {
        assert!(COMMANDS.len() <= crate::resp::stats::MAX_COMMANDS);
    }

    #[test]
    fn arity_follows_redis_convention() {
        let exact = CommandSpec { arity: 2, ..CommandSpec::BASE };
        assert!(exact.arity_ok(2) && !exact.arity_ok(1) && !exact.arity_ok(3));
        let at_least = CommandSpec { arity: -2, ..CommandSpec::BASE };
        assert!(at_least.arity_ok(2) && at_least.arity_ok(5) && !at_least.arity_ok(1));
    }
}
