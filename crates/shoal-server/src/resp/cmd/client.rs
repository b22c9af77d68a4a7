//! CLIENT ID | GETNAME | SETNAME name | SETINFO LIB-NAME|LIB-VER value |
//! HELP: the connection's id, its name (null if none), naming it ("+OK";
//! an empty name clears it), and recording the client library (what
//! redis-py sends on connect).

use super::{is, lookup_sub, unknown_subcommand, wrong_arity, CommandSpec};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;

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
            arity: 3,
            since: "2.6.9",
            summary: "Set the current connection name",
            ..SUB
        },
        CommandSpec {
            name: "client|setinfo",
            arity: 4,
            since: "7.2.0",
            summary: "Set client or connection specific info",
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
    SetInfo { lib_name: bool, value: &'a [u8] },
    Help,
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
            _ => Client::Help,
        })
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        match self {
            Client::Id => out.int(session.id as i64),
            Client::GetName => match &session.name {
                Some(n) => out.bulk(n),
                None => out.null(),
            },
            Client::SetName(name) => {
                session.name = (!name.is_empty()).then(|| name.to_vec());
                out.ok();
            }
            Client::SetInfo { lib_name, value } => {
                let v = (!value.is_empty()).then(|| value.to_vec());
                if lib_name {
                    session.lib_name = v;
                } else {
                    session.lib_ver = v;
                }
                out.ok();
            }
            Client::Help => {
                let lines = [
                    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GETNAME",
                    "    Return the name of the current connection.",
                    "ID",
                    "    Return the ID of the current connection.",
                    "SETNAME <name>",
                    "    Assign the name <name> to the current connection.",
                    "SETINFO <option> <value>",
                    "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
                    "HELP",
                    "    Prints this help.",
                ];
                out.array(lines.len());
                for l in lines {
                    out.simple(l);
                }
            }
        }
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Client::parse(args)?.apply(session, out);
    Ok(())
}
