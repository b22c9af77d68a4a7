//! memcached's commands: parsing a command line into a typed command
//! ([`parse`]) and running it against the items ([`Command::run`]). Each
//! file holds its commands' parsing, running and reply encoding, with
//! memcached's reply texts (checked against a real memcached by
//! `tests/memcached_compat.py`).

pub mod admin;
pub mod arith;
pub mod delete;
pub mod meta;
pub mod retrieval;
pub mod storage;

use super::frame::Tokens;
use super::items::Items;
use super::McStats;
use crate::context::ServerContext;
use bytes::BytesMut;
use std::sync::Arc;

/// A command line memcached refuses: the reply (with its "\r\n").
pub type Refusal = &'static str;

pub const ERROR: Refusal = "ERROR\r\n";
pub const BAD_FORMAT: Refusal = "CLIENT_ERROR bad command line format\r\n";

/// One parsed command; borrowed words of its line.
pub enum Command<'a> {
    Storage(storage::Storage<'a>),
    Retrieval(retrieval::Retrieval<'a>),
    Delete(delete::Delete<'a>),
    Touch(delete::Touch<'a>),
    Arith(arith::Arith<'a>),
    FlushAll(admin::FlushAll),
    Version,
    Verbosity { noreply: bool },
    Stats(admin::Stats),
    Quit,
    MetaGet(meta::MetaGet<'a>),
    MetaSet(meta::MetaSet<'a>),
    MetaDelete(meta::MetaDelete<'a>),
    MetaArith(meta::MetaArith<'a>),
    MetaNoop,
}

/// Parses a command line (without its line end), split into `t`.
pub fn parse<'a>(line: &'a [u8], t: &Tokens) -> Result<Command<'a>, Refusal> {
    let name = t.get(line, 0);
    let cmd = match name {
        b"get" | b"gets" | b"gat" | b"gats" => Command::Retrieval(retrieval::parse(line, t)?),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => Command::Storage(storage::parse(line, t)?),
        b"delete" => Command::Delete(delete::parse_delete(line, t)?),
        b"touch" => Command::Touch(delete::parse_touch(line, t)?),
        b"incr" | b"decr" => Command::Arith(arith::parse(line, t)?),
        b"mg" => Command::MetaGet(meta::parse_get(line, t)?),
        b"ms" => Command::MetaSet(meta::parse_set(line, t)?),
        b"md" => Command::MetaDelete(meta::parse_delete(line, t)?),
        b"ma" => Command::MetaArith(meta::parse_arith(line, t)?),
        b"mn" => Command::MetaNoop,
        b"flush_all" => Command::FlushAll(admin::parse_flush(line, t)?),
        b"version" => Command::Version,
        b"verbosity" => admin::parse_verbosity(line, t)?,
        b"stats" => Command::Stats(admin::parse_stats(line, t)?),
        b"quit" => Command::Quit,
        _ => return Err(ERROR),
    };
    Ok(cmd)
}

/// The command names, for the front end's statistics (`/metrics`): a
/// command's index is its position here; 0 is any unknown name.
pub const OPS: [&str; 25] = [
    "unknown",
    "get",
    "gets",
    "gat",
    "gats",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "delete",
    "touch",
    "incr",
    "decr",
    "mg",
    "ms",
    "md",
    "ma",
    "mn",
    "flush_all",
    "version",
    "verbosity",
    "stats",
    "quit",
];

/// The index in [`OPS`] of the command called `name` (0 if none is).
pub fn op_index(name: &[u8]) -> usize {
    match name {
        b"get" => 1,
        b"gets" => 2,
        b"gat" => 3,
        b"gats" => 4,
        b"set" => 5,
        b"add" => 6,
        b"replace" => 7,
        b"append" => 8,
        b"prepend" => 9,
        b"cas" => 10,
        b"delete" => 11,
        b"touch" => 12,
        b"incr" => 13,
        b"decr" => 14,
        b"mg" => 15,
        b"ms" => 16,
        b"md" => 17,
        b"ma" => 18,
        b"mn" => 19,
        b"flush_all" => 20,
        b"version" => 21,
        b"verbosity" => 22,
        b"stats" => 23,
        b"quit" => 24,
        _ => 0,
    }
}

/// Whether a reply (from its first byte on) is one of memcached's errors.
pub fn is_error(reply: &[u8]) -> bool {
    reply.starts_with(b"ERROR") || reply.starts_with(b"CLIENT_ERROR") || reply.starts_with(b"SERVER_ERROR")
}

/// What a command needs to run: the items, reusable buffers, counters.
pub struct Exec<'a> {
    pub ctx: &'a Arc<ServerContext>,
    pub items: Items<'a>,
    pub stats: &'a McStats,
    /// Read buffer (values read from the store).
    pub buf: &'a mut Vec<u8>,
    /// Write buffer (values being stored).
    pub value: &'a mut Vec<u8>,
}

impl Command<'_> {
    /// The data block's length, for the storage commands.
    pub fn data_len(&self) -> Option<usize> {
        match self {
            Command::Storage(s) => Some(s.bytes),
            Command::MetaSet(s) => Some(s.bytes),
            _ => None,
        }
    }

    /// Whether the client asked for no reply (`noreply`).
    pub fn noreply(&self) -> bool {
        match self {
            Command::Storage(s) => s.noreply,
            Command::Delete(d) => d.noreply,
            Command::Touch(d) => d.noreply,
            Command::Arith(a) => a.noreply,
            Command::FlushAll(f) => f.noreply,
            Command::Verbosity { noreply } => *noreply,
            _ => false,
        }
    }

    /// The one key the command works on (`None`: none, or several).
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Command::Storage(s) => Some(s.key),
            Command::Delete(d) => Some(d.key),
            Command::Touch(d) => Some(d.key),
            Command::Arith(a) => Some(a.key),
            Command::MetaGet(m) => Some(m.key),
            Command::MetaSet(m) => Some(m.key),
            Command::MetaDelete(m) => Some(m.key),
            Command::MetaArith(m) => Some(m.key),
            Command::Retrieval(r) if r.keys.len() == 1 => Some(r.keys[0]),
            _ => None,
        }
    }

    /// Whether it may create a key (its table is then created if missing).
    pub fn writes(&self) -> bool {
        matches!(self, Command::Storage(_) | Command::MetaSet(_) | Command::MetaArith(_))
    }

    /// Whether it reads or writes stored data.
    pub fn touches_data(&self) -> bool {
        !matches!(self, Command::Version | Command::Verbosity { .. } | Command::Quit | Command::MetaNoop)
    }

    /// Runs the command (`data`: the data block of a storage command),
    /// appending its reply to `out`.
    pub fn run(&self, data: &[u8], x: &mut Exec<'_>, out: &mut BytesMut) {
        let from = out.len();
        match self {
            Command::Storage(s) => storage::run(s, data, x, out),
            Command::Retrieval(r) => retrieval::run(r, x, out),
            Command::Delete(d) => delete::run_delete(d, x, out),
            Command::Touch(d) => delete::run_touch(d, x, out),
            Command::Arith(a) => arith::run(a, x, out),
            Command::FlushAll(f) => admin::run_flush(f, x, out),
            Command::Version => {
                out.extend_from_slice(format!("VERSION {}\r\n", env!("CARGO_PKG_VERSION")).as_bytes());
            }
            Command::Verbosity { .. } => out.extend_from_slice(b"OK\r\n"),
            Command::Stats(s) => admin::run_stats(s, x, out),
            Command::Quit => {}
            Command::MetaGet(m) => meta::run_get(m, x, out),
            Command::MetaSet(m) => meta::run_set(m, data, x, out),
            Command::MetaDelete(m) => meta::run_delete(m, x, out),
            Command::MetaArith(m) => meta::run_arith(m, x, out),
            Command::MetaNoop => out.extend_from_slice(b"MN\r\n"),
        }
        if self.noreply() {
            out.truncate(from);
        }
    }
}

/// Appends `n` in decimal.
pub fn put_num(out: &mut BytesMut, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends a store failure's reply (`text` without its line end).
pub fn put_error(out: &mut BytesMut, text: &str) {
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}
