//! `flush_all [delay] [noreply]`, `verbosity <n> [noreply]` and
//! `stats [settings|items|slabs|sizes|conns|reset]`.

use super::{put_error, Command, Exec, Refusal, ERROR};
use crate::context::ServerStats;
use crate::memcached::frame::{parse_i32, Tokens};
use crate::memcached::items;
use crate::memcached::McStats;
use bytes::BytesMut;
use shoal_engine::Expiry;
use std::time::Duration;

pub struct FlushAll {
    /// memcached's delay (an exptime: relative seconds or a Unix time); 0: now.
    pub delay: i64,
    pub noreply: bool,
}

pub fn parse_flush(line: &[u8], t: &Tokens) -> Result<FlushAll, Refusal> {
    if t.len() > 3 {
        return Err(ERROR);
    }
    let noreply = t.len() > 1 && t.get(line, t.len() - 1) == b"noreply";
    let delay = match (t.len(), noreply) {
        (1, _) | (2, true) => 0,
        _ => parse_i32(t.get(line, 1)).ok_or(super::retrieval::INVALID_EXPTIME)?,
    };
    Ok(FlushAll { delay, noreply })
}

/// Removes every item, now or (with a delay) from a task that waits for it.
pub fn run_flush(f: &FlushAll, x: &mut Exec<'_>, out: &mut BytesMut) {
    McStats::add(&x.stats.cmd_flush);
    let now = x.items.now();
    let wait = match items::expiry(f.delay, now) {
        Expiry::At(at) if f.delay > 0 => Duration::from_millis(at.0.saturating_sub(now.0)),
        _ => Duration::ZERO,
    };
    if wait.is_zero() {
        match x.items.clear() {
            Ok(()) => out.extend_from_slice(b"OK\r\n"),
            Err(e) => put_error(out, &e),
        }
        return;
    }
    let ctx = x.ctx.clone();
    tokio::spawn(async move {
        let mut stop = ctx.shutdown_signal();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {
                let cache = Default::default();
                let _ = items::Items::new(&ctx, &cache).clear();
            }
            _ = stop.wait_for(|s| *s) => {}
        }
    });
    out.extend_from_slice(b"OK\r\n");
}

pub fn parse_verbosity<'a>(line: &[u8], t: &Tokens) -> Result<Command<'a>, Refusal> {
    if t.len() != 2 && t.len() != 3 {
        return Err(ERROR);
    }
    Ok(Command::Verbosity { noreply: t.get(line, t.len() - 1) == b"noreply" })
}

pub enum Stats {
    General,
    Settings,
    /// A group Shoal has nothing in (items, slabs, sizes, conns): END.
    Empty,
    Reset,
}

pub fn parse_stats(line: &[u8], t: &Tokens) -> Result<Stats, Refusal> {
    match t.get(line, 1) {
        b"" => Ok(Stats::General),
        b"settings" => Ok(Stats::Settings),
        b"items" | b"slabs" | b"sizes" | b"conns" => Ok(Stats::Empty),
        b"reset" => Ok(Stats::Reset),
        _ => Err(ERROR),
    }
}

pub fn run_stats(s: &Stats, x: &mut Exec<'_>, out: &mut BytesMut) {
    let mut stat = |name: &str, value: &dyn std::fmt::Display| {
        out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
    };
    let ctx = x.ctx;
    match s {
        Stats::General => {
            let m = x.stats;
            let now = x.items.now();
            let store = ctx.store.stats();
            stat("pid", &std::process::id());
            stat("uptime", &ctx.uptime().as_secs());
            stat("time", &(now.0 / 1000));
            stat("version", &env!("CARGO_PKG_VERSION"));
            stat("pointer_size", &(usize::BITS));
            stat("max_connections", &ctx.config.max_connections);
            stat("curr_connections", &McStats::get(&m.curr_connections));
            stat("total_connections", &McStats::get(&m.total_connections));
            for (name, counter) in m.commands() {
                stat(name, &McStats::get(counter));
            }
            stat("bytes_read", &ServerStats::get(&ctx.stats.bytes_in));
            stat("bytes_written", &ServerStats::get(&ctx.stats.bytes_out));
            stat("limit_maxbytes", &ctx.config.memory.0);
            stat("threads", &2);
            stat("bytes", &store.live_key_value_bytes);
            stat("curr_items", &x.items.count());
            stat("evictions", &store.evicted);
        }
        Stats::Settings => {
            stat("maxbytes", &ctx.config.memory.0);
            stat("maxconns", &ctx.config.max_connections);
            stat("tcpport", &ctx.config.memcached_port);
            stat("item_size_max", &ctx.config.max_value_size.0);
            stat("cas_enabled", &"yes");
            stat("evictions", &if ctx.store.eviction() == shoal_engine::Eviction::None { "off" } else { "on" });
        }
        Stats::Empty => {}
        Stats::Reset => {
            x.stats.reset();
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
    }
    out.extend_from_slice(b"END\r\n");
}
