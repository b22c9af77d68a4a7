//! CLIENT ID | GETNAME | SETNAME name | SETINFO LIB-NAME|LIB-VER value |
//! LIST [TYPE type] [ID id ...] | INFO | KILL ... | HELP: the connection's
//! id, its name (null if none), naming it ("+OK"; an empty name clears
//! it), recording the client library (what redis-py sends on connect),
//! describing connections in Redis's `CLIENT LIST` line format, and
//! closing them (`admin::clients`): `KILL addr:port` (+OK or "ERR No such
//! client") or `KILL` with filters `ID`, `ADDR`, `LADDR`, `USER`, `TYPE`,
//! `SKIPME` (the number closed; the connection itself, unless skipped,
//! closes once its reply is sent).

use super::{help, is, lookup_sub, unknown_subcommand, wrong_arity, CommandSpec, SYNTAX_ERROR};
use crate::admin::clients::ClientSlot;
use crate::resp::frame::{parse_i64, Args};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

const SUB: CommandSpec = CommandSpec {
    name: "client|id",
    arity: 2,
    flags: &["noscript", "loading", "stale"],
    acl: &["@slow", "@connection"],
    group: "connection",
    since: "5.0.0",
    summary: "Returns the client ID for the current connection",
    ..CommandSpec::BASE
};

pub static SPEC: CommandSpec = CommandSpec {
    name: "client",
    arity: -2,
    flags: &[],
    acl: &["@slow"],
    group: "connection",
    since: "2.4.0",
    summary: "A container for client connection commands",
    complexity: "Depends on subcommand.",
    subcommands: &[
        SUB,
        CommandSpec { name: "client|getname", since: "2.6.9", summary: "Get the current connection name", ..SUB },
        CommandSpec {
            name: "client|setname",
            syntax: "connection-name",
            arity: 3,
            since: "2.6.9",
            summary: "Set the current connection name",
            ..SUB
        },
        CommandSpec {
            name: "client|setinfo",
            syntax: "attr=(LIB-NAME libname|LIB-VER libver)",
            arity: 4,
            since: "7.2.0",
            summary: "Set client or connection specific info",
            ..SUB
        },
        CommandSpec {
            name: "client|list",
            syntax: "[TYPE client-type=(NORMAL|MASTER|REPLICA|PUBSUB)] [ID (client-id#integer...)]",
            arity: -2,
            flags: &["admin", "noscript", "loading", "stale"],
            acl: &["@admin", "@slow", "@dangerous", "@connection"],
            since: "2.4.0",
            summary: "Describe the client connections",
            complexity: "O(N) where N is the number of client connections",
            ..SUB
        },
        CommandSpec {
            name: "client|info",
            since: "6.2.0",
            summary: "Describe this connection",
            ..SUB
        },
        CommandSpec {
            name: "client|kill",
            syntax: "filter=(ip:port|new-format=([ID client-id#integer]|[TYPE client-type=(NORMAL|MASTER|SLAVE|REPLICA|PUBSUB)]|[USER username]|[ADDR ip:port]|[LADDR ip:port]|[SKIPME yes/no])...)",
            arity: -3,
            flags: &["admin", "noscript", "loading", "stale"],
            acl: &["@admin", "@slow", "@dangerous", "@connection"],
            since: "2.4.0",
            summary: "Close client connections chosen by address, id, user or type",
            complexity: "O(N) where N is the number of client connections",
            ..SUB
        },
        CommandSpec {
            name: "client|help",
            since: "5.0.0",
            summary: "Show helpful text about the different subcommands",
            ..SUB
        },
    ],
    ..CommandSpec::BASE
};

enum Client<'a> {
    Id,
    GetName,
    SetName(&'a [u8]),
    SetInfo {
        lib_name: bool,
        value: &'a [u8],
    },
    List {
        normal: bool,
        ids: Option<Vec<u64>>,
    },
    Info,
    /// The old form, `KILL addr:port`.
    KillAddr(&'a [u8]),
    Kill(KillFilter<'a>),
    Help,
}

/// Which connections CLIENT KILL closes: those matching every filter given.
#[derive(Default)]
struct KillFilter<'a> {
    id: Option<u64>,
    addr: Option<&'a [u8]>,
    laddr: Option<&'a [u8]>,
    user: Option<&'a [u8]>,
    /// `TYPE`: whether normal clients match (no other type exists here).
    normal: Option<bool>,
    /// Whether the connection asking is spared (default yes).
    skip_me: bool,
}

/// A client type as Redis names them: whether it is "normal" (Shoal has no
/// replica, master or pubsub clients).
fn parse_type(t: &[u8]) -> Result<bool, ErrorReply> {
    if is(t, "normal") {
        Ok(true)
    } else if ["master", "replica", "slave", "pubsub"].iter().any(|n| is(t, n)) {
        Ok(false)
    } else {
        Err(ErrorReply::owned([b"ERR Unknown client type '".as_slice(), t, b"'"].concat()))
    }
}

/// Redis's rule for names: printable ASCII without spaces.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|c| (b'!'..=b'~').contains(c))
}

impl<'a> Client<'a> {
    fn parse(args: Args<'a>) -> Result<Client<'a>, ErrorReply> {
        let sub = lookup_sub(&SPEC, args.get(1)).ok_or_else(|| unknown_subcommand(args))?;
        if !sub.arity_ok(args.len()) {
            return Err(wrong_arity(sub.name));
        }
        Ok(match sub.name {
            "client|id" => Client::Id,
            "client|getname" => Client::GetName,
            "client|setname" => {
                let name = args.get(2);
                if !valid_name(name) {
                    return Err(ErrorReply::new(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                Client::SetName(name)
            }
            "client|setinfo" => {
                let attr = args.get(2);
                let lib_name = if is(attr, "LIB-NAME") {
                    true
                } else if is(attr, "LIB-VER") {
                    false
                } else {
                    return Err(ErrorReply::owned([b"ERR Unrecognized option '".as_slice(), attr, b"'"].concat()));
                };
                let value = args.get(3);
                if !valid_name(value) {
                    return Err(ErrorReply::owned(
                        [b"ERR ".as_slice(), attr, b" cannot contain spaces, newlines or special characters."].concat(),
                    ));
                }
                Client::SetInfo { lib_name, value }
            }
            "client|list" => Client::parse_list(args)?,
            "client|info" => Client::Info,
            "client|kill" if args.len() == 3 => Client::KillAddr(args.get(2)),
            "client|kill" => Client::parse_kill(args)?,
            _ => Client::Help,
        })
    }

    fn parse_list(args: Args<'a>) -> Result<Client<'a>, ErrorReply> {
        let mut normal = true;
        let mut ids = None;
        let mut i = 2;
        while i < args.len() {
            if is(args.get(i), "TYPE") && i + 1 < args.len() {
                normal = parse_type(args.get(i + 1))?;
                i += 2;
            } else if is(args.get(i), "ID") && i + 1 < args.len() {
                let mut list = Vec::new();
                for a in args.skip(i + 1).iter() {
                    match parse_i64(a) {
                        Some(id) if id > 0 => list.push(id as u64),
                        _ => return Err(ErrorReply::new("ERR Invalid client ID")),
                    }
                }
                ids = Some(list);
                i = args.len();
            } else {
                return Err(SYNTAX_ERROR);
            }
        }
        Ok(Client::List { normal, ids })
    }

    fn parse_kill(args: Args<'a>) -> Result<Client<'a>, ErrorReply> {
        let mut f = KillFilter { skip_me: true, ..KillFilter::default() };
        let mut i = 2;
        while i < args.len() {
            let (opt, value) = (args.get(i), args.get((i + 1).min(args.len() - 1)));
            if i + 1 >= args.len() {
                return Err(SYNTAX_ERROR);
            }
            if is(opt, "ID") {
                match parse_i64(value) {
                    Some(id) if id > 0 => f.id = Some(id as u64),
                    _ => return Err(ErrorReply::new("ERR client-id should be greater than 0")),
                }
            } else if is(opt, "TYPE") {
                f.normal = Some(parse_type(value)?);
            } else if is(opt, "ADDR") {
                f.addr = Some(value);
            } else if is(opt, "LADDR") {
                f.laddr = Some(value);
            } else if is(opt, "USER") {
                f.user = Some(value);
            } else if is(opt, "SKIPME") {
                f.skip_me = if is(value, "yes") {
                    true
                } else if is(value, "no") {
                    false
                } else {
                    return Err(SYNTAX_ERROR);
                };
            } else {
                return Err(SYNTAX_ERROR);
            }
            i += 2;
        }
        Ok(Client::Kill(f))
    }

    fn apply(self, session: &mut Session, out: &mut Reply) -> Result<(), ErrorReply> {
        match self {
            Client::Id => out.int(session.id as i64),
            Client::GetName => match session.slot.text().name {
                n if n.is_empty() => out.null(),
                n => out.bulk(&n),
            },
            Client::SetName(name) => {
                session.slot.update_text(|t| t.name = name.to_vec());
                out.ok();
            }
            Client::SetInfo { lib_name, value } => {
                session.slot.update_text(|t| {
                    if lib_name {
                        t.lib_name = value.to_vec()
                    } else {
                        t.lib_ver = value.to_vec()
                    }
                });
                out.ok();
            }
            Client::List { normal, ids } => {
                let now = Instant::now();
                let mut text = Vec::new();
                let clients = session.ctx.admin.clients.list();
                let wanted = |c: &ClientSlot| normal && ids.as_ref().is_none_or(|ids| ids.contains(&c.id));
                for c in clients.iter().filter(|c| wanted(c)) {
                    describe(c, now, &mut text);
                    text.push(b'\n');
                }
                out.verbatim(&text);
            }
            Client::Info => {
                let mut text = Vec::new();
                describe(&session.slot, Instant::now(), &mut text);
                text.push(b'\n');
                out.verbatim(&text);
            }
            Client::KillAddr(addr) => {
                let f = KillFilter { addr: Some(addr), ..KillFilter::default() };
                match kill(session, &f) {
                    0 => return Err(ErrorReply::new("ERR No such client")),
                    _ => out.ok(),
                }
            }
            Client::Kill(f) => {
                if let Some(user) = f.user {
                    if !session.ctx.auth.has_user(user) {
                        return Err(ErrorReply::owned([b"ERR No such user '".as_slice(), user, b"'"].concat()));
                    }
                }
                out.int(kill(session, &f) as i64);
            }
            Client::Help => {
                let lines = [
                    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GETNAME",
                    "    Return the name of the current connection.",
                    "ID",
                    "    Return the ID of the current connection.",
                    "INFO",
                    "    Return information about the current client connection.",
                    "KILL <ip:port>",
                    "    Kill connection made from <ip:port>.",
                    "KILL <option> <value> [<option> <value> [...]]",
                    "    Kill connections. Options are:",
                    "    * ADDR (<ip:port>|<unixsocket>:0)",
                    "      Kill connections made from the specified address",
                    "    * LADDR (<ip:port>|<unixsocket>:0)",
                    "      Kill connections made to specified local address",
                    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
                    "      Kill connections by type.",
                    "    * USER <username>",
                    "      Kill connections authenticated by <username>.",
                    "    * SKIPME (YES|NO)",
                    "      Skip killing current connection (default: yes).",
                    "LIST [options ...]",
                    "    Return information about client connections. Options:",
                    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
                    "      Return clients of specified type.",
                    "SETNAME <name>",
                    "    Assign the name <name> to the current connection.",
                    "SETINFO <option> <value>",
                    "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
                    "HELP",
                    "    Prints this help.",
                ];
                help(out, &lines);
            }
        }
        Ok(())
    }
}

/// Closes the connections `f` matches: how many. The asking connection,
/// if it matches and is not skipped, closes after its reply.
fn kill(session: &mut Session, f: &KillFilter) -> usize {
    let mut n = 0;
    for c in session.ctx.admin.clients.list() {
        let matches = f.id.is_none_or(|id| id == c.id)
            && f.addr.is_none_or(|a| a == c.addr.to_string().as_bytes())
            && f.laddr.is_none_or(|a| c.laddr.is_some_and(|l| a == l.to_string().as_bytes()))
            && f.user.is_none_or(|u| u == c.text().user.as_slice())
            && f.normal.is_none_or(|normal| normal);
        if !matches || (f.skip_me && c.id == session.id) {
            continue;
        }
        if c.id == session.id {
            session.quit = true;
        } else {
            c.kill();
        }
        n += 1;
    }
    n
}

/// One connection as a line of CLIENT LIST (without its newline), with
/// Redis's fields. Buffer figures are Shoal's own: `qbuf` the bytes
/// received and not yet run, `obl` the bytes of replies not yet sent,
/// `omem` the reply buffer's size; Shoal has no pubsub, tracking or
/// redirection (their fields are 0 or -1).
fn describe(c: &ClientSlot, now: Instant, out: &mut Vec<u8>) {
    use std::io::Write;
    let (age, idle) = c.age_and_idle(now);
    let text = c.text();
    let multi = c.multi.load(Relaxed);
    let mut flags = String::new();
    if c.is_monitor() {
        flags.push('O');
    }
    if multi >= 0 {
        flags.push('x');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let (qbuf, qcap) = (c.qbuf.load(Relaxed), c.qbuf_cap.load(Relaxed));
    let (obl, omem) = (c.obl.load(Relaxed), c.omem.load(Relaxed));
    let cmd = match c.last_command() {
        None => "NULL".to_string(),
        Some((i, sub)) => {
            let spec = super::COMMANDS[i].spec;
            sub.and_then(|s| spec.subcommands.get(s)).map_or(spec.name, |s| s.name).to_string()
        }
    };
    let laddr = c.laddr.map_or_else(String::new, |l| l.to_string());
    let _ = write!(out, "id={} addr={} laddr={} fd={} name=", c.id, c.addr, laddr, c.fd);
    out.extend_from_slice(&text.name);
    let _ = write!(
        out,
        " age={age} idle={idle} flags={flags} db={} sub=0 psub=0 ssub=0 multi={multi} qbuf={qbuf} qbuf-free={} \
         argv-mem=0 multi-mem=0 rbs={qcap} rbp={qcap} obl={obl} oll=0 omem={omem} tot-mem={} events={} cmd={cmd} user=",
        c.db.load(Relaxed),
        qcap.saturating_sub(qbuf),
        qcap + omem,
        if obl > 0 { "rw" } else { "r" },
    );
    out.extend_from_slice(&text.user);
    let _ = write!(out, " redir=-1 resp={}", c.resp.load(Relaxed));
    if !text.lib_name.is_empty() || !text.lib_ver.is_empty() {
        out.extend_from_slice(b" lib-name=");
        out.extend_from_slice(&text.lib_name);
        out.extend_from_slice(b" lib-ver=");
        out.extend_from_slice(&text.lib_ver);
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Client::parse(args)?.apply(session, out)
}
