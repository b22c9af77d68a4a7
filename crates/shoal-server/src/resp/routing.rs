//! Where a command runs when the server is part of a cluster: "the Redis
//! front end of any server serves any key, forwarding to the key's master
//! when it is not local".
//!
//! [`route`] looks at the command's keys (from its spec's key positions),
//! finds each key's tablet in the cluster map and decides:
//! * every key here (or no keys): run it here, exactly as a standalone
//!   server does;
//! * every key on one other server: forward the whole request there;
//! * keys on several servers: MGET, DEL, UNLINK, EXISTS and MSET are split
//!   into one command per server (this server's share runs at once) and the
//!   replies merged; any other command (MSETNX) is refused with Redis
//!   Cluster's CROSSSLOT error, since it cannot be atomic across masters;
//! * DBSIZE, FLUSHDB, FLUSHALL and KEYS run on every live server; SCAN's cursor is a key
//!   hash, so it is routed like a key to the server of the tablet it is in.
//!
//! A session marked local-only (`SHOAL.LOCAL`, sent by the forwarding side)
//! never forwards: keyless commands count and clear only this server, and a
//! key this server does not master is refused with `TRYAGAIN` (the two
//! servers' maps disagree for a moment), so a request never loops.

use crate::cluster::{ClusterNode, Route};
use crate::context::ServerStats;
use crate::resp::cmd::{self, Entry};
use crate::resp::forward::{encode_request, Job, Merge, Part, Target};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use bytes::BytesMut;
use shoal_cluster::ServerState;
use shoal_common::slots::key_slot;
use shoal_engine::{key_hash, KeyHash, TableId};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a command whose key has no tablet in this server's map yet (a
/// table created a moment ago: the map watcher brings it) is retried
/// before it is refused with [`NO_TABLET`].
pub const NO_TABLET_PATIENCE: Duration = Duration::from_secs(1);
/// Pause between those retries.
pub const NO_TABLET_RETRY: Duration = Duration::from_millis(25);

pub const RECOVERING: ErrorReply = ErrorReply::new("TRYAGAIN tablet is being recovered");
/// The key's tablet is moving to another server (`docs/migration.md`).
pub const MOVING: ErrorReply = ErrorReply::new("TRYAGAIN tablet is moving to another server");
pub const CROSSSLOT: ErrorReply = ErrorReply::new("CROSSSLOT Keys in request don't hash to the same slot");
pub const NOT_HERE: ErrorReply =
    ErrorReply::new("TRYAGAIN the key's tablet is not served by this server (cluster map changing)");
pub const NO_TABLET: ErrorReply = ErrorReply::new("TRYAGAIN no tablet serves this key yet (cluster map changing)");
/// How long a command on a key of this server is retried while the
/// server's lease has lapsed, before it is refused with [`NO_LEASE`].
pub const NO_LEASE_PATIENCE: Duration = Duration::from_secs(3);
pub const NO_LEASE: ErrorReply =
    ErrorReply::new("TRYAGAIN this server's lease on the key's tablet has lapsed (no contact with the coordinator)");

/// What to do with one command.
pub enum Routed {
    /// Run it here, as a standalone server does.
    Local,
    /// Answer this error.
    Error(ErrorReply),
    /// Run it (or its remote parts) on other servers.
    Forward(Job),
    /// A key's tablet is not in the map yet: run the same request again
    /// after [`NO_TABLET_RETRY`].
    Wait,
}

/// Who serves a key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Here,
    There(SocketAddr),
}

/// Why a key has no owner to run on now.
enum Unserved {
    Recovering,
    Moving,
    NoTablet,
    NoLease,
}

/// Decides where the command `entry` with `args` (arity checked) runs, for
/// a session of a cluster member. Splitting a command runs this server's
/// share of it before returning.
pub fn route(s: &mut Session, entry: &'static Entry, args: Args<'_>) -> Routed {
    let routed = decide(s, entry, args);
    if !matches!(routed, Routed::Wait) {
        s.no_tablet_since = None;
    }
    routed
}

fn decide(s: &mut Session, entry: &'static Entry, args: Args<'_>) -> Routed {
    if s.cluster_mode && !s.local_only {
        return decide_by_slot(s, entry, args);
    }
    let spec = entry.spec;
    if spec.first_key == 0 {
        return match spec.name {
            "scan" => route_scan(s, args),
            "dbsize" | "flushdb" | "flushall" | "keys" if !s.local_only => everywhere(s, entry, args),
            _ => Routed::Local,
        };
    }
    let Some((first, last, step)) = key_positions(entry, args.len()) else {
        // Malformed (an MSET without its last value): the command says so.
        return Routed::Local;
    };
    let table = if spec.flags.contains(&"denyoom") {
        match s.db().table_for_write() {
            Ok(t) => t,
            Err(e) => return Routed::Error(e),
        }
    } else {
        match s.db().table() {
            Some(t) => t,
            // A table this server does not know has no keys.
            None => return Routed::Local,
        }
    };
    let Some(node) = s.ctx.cluster.as_deref() else { return Routed::Local };
    if let Some(sc) = &node.sc {
        sc.sample(table, args.get(first));
    }
    if first == last {
        return match owner(node, table, args.get(first)) {
            Ok(Owner::Here) => Routed::Local,
            Ok(Owner::There(_)) if s.local_only => Routed::Error(NOT_HERE),
            Ok(Owner::There(addr)) => relay(s, addr, args),
            Err(u) => unserved(s, u),
        };
    }
    let mut groups: Vec<(Owner, Vec<usize>)> = Vec::new();
    for p in (first..=last).step_by(step) {
        let o = match owner(node, table, args.get(p)) {
            Ok(o) => o,
            Err(u) => return unserved(s, u),
        };
        match groups.iter_mut().find(|(g, _)| *g == o) {
            Some((_, positions)) => positions.push(p),
            None => groups.push((o, vec![p])),
        }
    }
    match &groups[..] {
        [(Owner::Here, _)] => Routed::Local,
        _ if s.local_only => Routed::Error(NOT_HERE),
        [(Owner::There(addr), _)] => relay(s, *addr, args),
        _ => split(s, entry, args, (first, step), groups),
    }
}

/// Redis Cluster mode (`docs/redis-cluster.md`): runs here what
/// [`slot_check`] lets through. A database whose table is not slot-hashed
/// (made before slot hashing existed) has no slot map: its keys are
/// forwarded as without cluster mode.
fn decide_by_slot(s: &mut Session, entry: &'static Entry, args: Args<'_>) -> Routed {
    match slot_check(s, entry, args) {
        Ok(SlotOf::Keyless | SlotOf::Slot(_)) => Routed::Local,
        Ok(SlotOf::Unslotted) => {
            s.cluster_mode = false;
            let routed = decide(s, entry, args);
            s.cluster_mode = true;
            routed
        }
        Err(routed) => routed,
    }
}

/// What [`slot_check`] found of a command's keys.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SlotOf {
    /// No keys: it runs here and sees this server only.
    Keyless,
    /// Every key is in this slot, mastered here.
    Slot(u16),
    /// The database's table is not slot-hashed.
    Unslotted,
}

/// Redis Cluster's rules for a command's keys: all of one slot (else
/// CROSSSLOT, even when the slots share a master, as Redis Cluster
/// answers), and that slot mastered here (else `-MOVED slot host:port`,
/// which a cluster client follows and remembers). `Err` is what to answer
/// instead (or `Wait`).
pub fn slot_check(s: &mut Session, entry: &'static Entry, args: Args<'_>) -> Result<SlotOf, Routed> {
    if entry.spec.first_key == 0 {
        return Ok(SlotOf::Keyless);
    }
    let Some((first, last, step)) = key_positions(entry, args.len()) else { return Ok(SlotOf::Keyless) };
    let slot = key_slot(args.get(first));
    if (first + step..=last).step_by(step).any(|p| key_slot(args.get(p)) != slot) {
        return Err(Routed::Error(CROSSSLOT));
    }
    if s.ctx.cluster.is_none() {
        return Ok(SlotOf::Slot(slot));
    }
    let table = if entry.spec.flags.contains(&"denyoom") {
        s.db().table_for_write().map_err(Routed::Error)?
    } else {
        match s.db().table() {
            Some(t) => t,
            None => return Ok(SlotOf::Slot(slot)),
        }
    };
    if !table.is_slot_hashed() {
        return Ok(SlotOf::Unslotted);
    }
    // The slot is known: the key hash reuses it.
    let hash = shoal_common::key_hash_in_slot(table, args.get(first), slot);
    let Some(node) = s.ctx.cluster.as_deref() else { return Ok(SlotOf::Slot(slot)) };
    match owner_of_hash(node, table, hash) {
        Ok(Owner::Here) => Ok(SlotOf::Slot(slot)),
        Ok(Owner::There(addr)) => {
            ServerStats::add(&s.ctx.stats.moved_replies, 1);
            Err(Routed::Error(moved(slot, addr)))
        }
        Err(u) => Err(unserved(s, u)),
    }
}

/// Redis Cluster's redirection to the master of `slot`.
pub fn moved(slot: u16, addr: SocketAddr) -> ErrorReply {
    ErrorReply::owned(format!("MOVED {slot} {addr}"))
}

/// The first and last argument positions of the command's keys and the
/// step between them; `None` if the arguments do not hold whole groups.
pub fn key_positions(entry: &Entry, argc: usize) -> Option<(usize, usize, usize)> {
    let spec = entry.spec;
    let first = usize::try_from(spec.first_key).ok()?;
    let last = if spec.last_key < 0 { argc as i64 + spec.last_key as i64 } else { spec.last_key as i64 };
    let last = usize::try_from(last).ok()?;
    let step = usize::try_from(spec.step).ok()?.max(1);
    if first < 1 || first > last {
        return None;
    }
    // `last` bounds the keys; the last key is the last position the step reaches.
    let last = first + (last - first) / step * step;
    (last + step <= argc).then_some((first, last, step))
}

/// The one server that masters every key of `keys` (`None`: no keys).
/// Keys on several servers are `Err(Routed::Error(CROSSSLOT))`; a key with
/// no master to run on now is `Err` of what [`route`] would answer.
pub fn owner_of_keys(s: &mut Session, keys: &[(TableId, Vec<u8>)]) -> Result<Option<Owner>, Routed> {
    let Some(node) = s.ctx.cluster.clone() else { return Ok(keys.first().map(|_| Owner::Here)) };
    let mut found = None;
    for (table, key) in keys {
        let o = match owner(&node, *table, key) {
            Ok(o) => o,
            Err(u) => return Err(unserved(s, u)),
        };
        match found {
            None => found = Some(o),
            Some(f) if f == o => {}
            Some(_) => return Err(Routed::Error(CROSSSLOT)),
        }
    }
    s.no_tablet_since = None;
    Ok(found)
}

fn owner(node: &ClusterNode, table: TableId, key: &[u8]) -> Result<Owner, Unserved> {
    owner_of_hash(node, table, key_hash(table, key))
}

fn owner_of_hash(node: &ClusterNode, table: TableId, hash: KeyHash) -> Result<Owner, Unserved> {
    match node.route(table, hash) {
        Route::Local => Ok(Owner::Here),
        Route::Remote { resp, .. } => Ok(Owner::There(resp)),
        Route::Recovering => Err(Unserved::Recovering),
        Route::Moving => Err(Unserved::Moving),
        Route::NoTablet => Err(Unserved::NoTablet),
        Route::NoLease => Err(Unserved::NoLease),
    }
}

fn unserved(s: &mut Session, why: Unserved) -> Routed {
    match why {
        Unserved::Recovering => Routed::Error(RECOVERING),
        Unserved::Moving => Routed::Error(MOVING),
        Unserved::NoTablet => wait_or(s, NO_TABLET_PATIENCE, NO_TABLET),
        Unserved::NoLease => wait_or(s, NO_LEASE_PATIENCE, NO_LEASE),
    }
}

/// Runs the command again after [`NO_TABLET_RETRY`] until it has waited
/// `patience`, then answers `error`.
fn wait_or(s: &mut Session, patience: Duration, error: ErrorReply) -> Routed {
    let since = *s.no_tablet_since.get_or_insert_with(Instant::now);
    match since.elapsed() >= patience {
        true => Routed::Error(error),
        false => Routed::Wait,
    }
}

/// The whole request, to `addr`.
fn relay(s: &Session, addr: SocketAddr, args: Args<'_>) -> Routed {
    let words: Vec<&[u8]> = args.iter().collect();
    let mut request = Vec::new();
    encode_request(&words, &mut request);
    let part = Part { target: Target::Remote { addr, request }, slots: Vec::new() };
    Routed::Forward(job(s, vec![part], Merge::Relay))
}

/// A job sending `request` (encoded) to `addr` in the session's database
/// and protocol, its reply relayed as it is.
pub fn relay_job(s: &Session, addr: SocketAddr, request: Vec<u8>) -> Job {
    let part = Part { target: Target::Remote { addr, request }, slots: Vec::new() };
    job(s, vec![part], Merge::Relay)
}

/// One command per owner, each with the owner's keys (and their values),
/// in their order in the request.
fn split(
    s: &mut Session,
    entry: &'static Entry,
    args: Args<'_>,
    (first, step): (usize, usize),
    groups: Vec<(Owner, Vec<usize>)>,
) -> Routed {
    let keys = groups.iter().map(|(_, p)| p.len()).sum();
    let merge = match entry.spec.name {
        "mget" | "shoal.versions" => Merge::Array { len: keys },
        "del" | "unlink" | "exists" => Merge::Sum,
        "mset" => Merge::AllOk,
        _ => return Routed::Error(CROSSSLOT),
    };
    let mut parts = Vec::with_capacity(groups.len());
    for (owner, positions) in groups {
        let mut words: Vec<&[u8]> = (0..first).map(|i| args.get(i)).collect();
        for &p in &positions {
            words.extend((p..p + step).map(|i| args.get(i)));
        }
        let slots = positions.iter().map(|p| (p - first) / step).collect();
        let target = match owner {
            Owner::Here => Target::Here(run_here(s, entry, &words)),
            Owner::There(addr) => {
                let mut request = Vec::new();
                encode_request(&words, &mut request);
                Target::Remote { addr, request }
            }
        };
        parts.push(Part { target, slots });
    }
    Routed::Forward(job(s, parts, merge))
}

/// A job of `parts` for this session's database, protocol and credentials.
fn job(s: &Session, parts: Vec<Part>, merge: Merge) -> Job {
    Job {
        db: s.db,
        proto: s.proto,
        parts,
        merge,
        max_reply: s.reply_limit,
        credentials: s.ctx.auth.peer_credentials().cloned(),
        tls: s.ctx.tls.clone(),
    }
}

/// DBSIZE, FLUSHDB, FLUSHALL and KEYS: here and on every other live server.
fn everywhere(s: &mut Session, entry: &'static Entry, args: Args<'_>) -> Routed {
    let Some(node) = s.ctx.cluster.as_deref() else { return Routed::Local };
    let map = node.map();
    let others: Vec<SocketAddr> =
        map.servers.iter().filter(|x| x.id != node.id && x.state != ServerState::Down).map(|x| x.resp).collect();
    if others.is_empty() {
        return Routed::Local;
    }
    let words: Vec<&[u8]> = args.iter().collect();
    let mut request = Vec::new();
    encode_request(&words, &mut request);
    let mut parts = vec![Part { target: Target::Here(run_here(s, entry, &words)), slots: Vec::new() }];
    parts.extend(
        others
            .into_iter()
            .map(|addr| Part { target: Target::Remote { addr, request: request.clone() }, slots: Vec::new() }),
    );
    let merge = match entry.spec.name {
        "dbsize" => Merge::Sum,
        "keys" => Merge::Concat,
        _ => Merge::AllOk,
    };
    Routed::Forward(job(s, parts, merge))
}

/// SCAN: the cursor is a key-hash position, served by the server of the
/// tablet that holds it (which scans to the end of that tablet at most).
fn route_scan(s: &mut Session, args: Args<'_>) -> Routed {
    let Some(cursor) = cmd::scan_cursor(args.get(1)) else { return Routed::Local };
    let Some(table) = s.db().table() else { return Routed::Local };
    let Some(node) = s.ctx.cluster.as_deref() else { return Routed::Local };
    match owner_of_hash(node, table, KeyHash(cursor)) {
        Ok(Owner::Here) => Routed::Local,
        Ok(Owner::There(_)) if s.local_only => Routed::Error(NOT_HERE),
        Ok(Owner::There(addr)) => relay(s, addr, args),
        Err(u) => unserved(s, u),
    }
}

/// Runs `words` (a request for `entry`) here; its reply.
fn run_here(s: &mut Session, entry: &'static Entry, words: &[&[u8]]) -> BytesMut {
    let mut data = Vec::new();
    let mut spans = Vec::with_capacity(words.len());
    for w in words {
        spans.push((data.len(), data.len() + w.len()));
        data.extend_from_slice(w);
    }
    let mut out = BytesMut::new();
    let mut reply = Reply::new(&mut out, s.proto);
    if let Err(e) = (entry.run)(Args::new(&data, &spans), s, &mut reply) {
        reply.error(&e);
    }
    if cmd::touches_data(entry.spec) {
        s.touch(entry.spec);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_positions_follow_the_specs() {
        let get = cmd::lookup(b"get").unwrap();
        assert_eq!(key_positions(get, 2), Some((1, 1, 1)));
        let set = cmd::lookup(b"set").unwrap();
        assert_eq!(key_positions(set, 4), Some((1, 1, 1)));
        let mget = cmd::lookup(b"mget").unwrap();
        assert_eq!(key_positions(mget, 4), Some((1, 3, 1)));
        let mset = cmd::lookup(b"mset").unwrap();
        assert_eq!(key_positions(mset, 5), Some((1, 3, 2)));
        assert_eq!(key_positions(mset, 7), Some((1, 5, 2)));
        assert_eq!(key_positions(mset, 4), None, "a key without its value");
        let ping = cmd::lookup(b"ping").unwrap();
        assert_eq!(key_positions(ping, 1), None);
    }
}
