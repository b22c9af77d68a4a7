//! Redis transactions: MULTI queues a client's commands, EXEC runs them all
//! at once in one store transaction ([`shoal_engine::Txn`]), WATCH makes
//! EXEC apply nothing if a watched key changed.
//!
//! Guarantees, for the keys of one master (Redis's, per server):
//! * Nothing queued is applied before EXEC, and nothing at all if queueing
//!   failed (an unknown command, a wrong arity, a refused command: EXEC
//!   answers EXECABORT) or if a watched key's version changed since WATCH
//!   (EXEC answers a null array).
//! * EXEC locks the stripes of every key its commands name (found from the
//!   command specs' key positions, following SELECTs), runs the commands
//!   in order against the transaction's view, and commits their writes as
//!   one batch: no other client's write of those keys comes in between,
//!   and the reply (in a cluster, like every reply that touched data) goes
//!   out only once the batch is durable.
//! * Commands that touch data without naming keys (SCAN, DBSIZE, FLUSHDB)
//!   are refused when queued ("Command not allowed inside a transaction",
//!   Redis's text for such commands): a transaction locks keys, not tables.
//!
//! In a cluster, EXEC (in `Session::execute`, before routing) finds the
//! master of every key (and watched key): all here, it runs here; all on
//! one other server, the whole transaction goes there as one SHOAL.EXEC
//! request carrying the watched versions, and that server's reply is the
//! client's; keys on several servers abort it with CROSSSLOT. WATCH of a
//! key mastered elsewhere reads its version there (SHOAL.VERSIONS).
//!
//! A watched key is compared by version, so any write of it aborts EXEC
//! (the same client's too, as in Redis). For a key absent at WATCH, the
//! store's absence stamp also tells whether it was created and removed
//! again in between; it is shared by 1 in 65,536 of keys, so a removal of
//! another key can abort EXEC too (never the other way round).

use crate::resp::cmd::{self, Entry};
use crate::resp::db::{store_error, Db};
use crate::resp::forward::encode_request;
use crate::resp::frame::{self, parse_i64, Args, Limits};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::routing::{self, Owner, Routed, SlotOf};
use crate::resp::session::{Session, Step};
use bytes::BytesMut;
use shoal_engine::{Commit, TableId, Version};
use std::time::Instant;

/// Redis's reply to EXEC after a queueing error.
pub const EXECABORT: ErrorReply = ErrorReply::new("EXECABORT Transaction discarded because of previous errors.");
/// Redis's reply to a command that may not be queued.
pub const NOT_ALLOWED: ErrorReply = ErrorReply::new("ERR Command not allowed inside a transaction");
const EXEC_WITHOUT_MULTI: ErrorReply = ErrorReply::new("ERR EXEC without MULTI");

/// What WATCH saw of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Present(Version),
    /// Absent, with the store's absence stamp then (0 when the database
    /// had no table).
    Absent(u32),
}

impl Seen {
    /// As an integer on the wire (SHOAL.VERSIONS, SHOAL.EXEC): a version as
    /// itself (versions start at 1), an absent key as -1 - stamp.
    pub fn to_wire(self) -> i64 {
        match self {
            Seen::Present(v) => v.0.min(i64::MAX as u64) as i64,
            Seen::Absent(stamp) => -1 - stamp as i64,
        }
    }

    pub fn from_wire(n: i64) -> Option<Seen> {
        match n {
            1.. => Some(Seen::Present(Version(n as u64))),
            0 => None,
            _ => u32::try_from(-1 - n).ok().map(Seen::Absent),
        }
    }
}

/// A command queued by MULTI: its arguments, owned.
pub struct Queued {
    entry: &'static Entry,
    /// `entry`'s position in the command table (its counters' index).
    index: usize,
    data: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl Multi {
    /// Commands queued so far.
    pub fn queued_count(&self) -> usize {
        self.queued.len()
    }
}

impl Queued {
    fn new(entry: &'static Entry, args: Args<'_>) -> Queued {
        let mut data = Vec::new();
        let mut spans = Vec::with_capacity(args.len());
        for a in args.iter() {
            spans.push((data.len(), data.len() + a.len()));
            data.extend_from_slice(a);
        }
        Queued { entry, index: cmd::index_of(entry), data, spans }
    }

    fn args(&self) -> Args<'_> {
        Args::new(&self.data, &self.spans)
    }

    /// Memory held, for the connection's bound.
    fn bytes(&self) -> usize {
        self.data.capacity() + self.spans.capacity() * 16 + 64
    }
}

/// A connection between MULTI and EXEC.
#[derive(Default)]
pub struct Multi {
    queued: Vec<Queued>,
    /// Memory the queued commands hold.
    pub bytes: usize,
    /// A command was refused while queueing: EXEC answers EXECABORT.
    pub aborted: bool,
    /// In Redis Cluster mode: the slot of the keys queued so far.
    slot: Option<u16>,
}

/// Whether the command runs at once even between MULTI and EXEC (Redis's
/// list, without RESET, which Shoal does not have).
fn runs_at_once(spec: &cmd::CommandSpec) -> bool {
    matches!(spec.name, "exec" | "discard" | "multi" | "watch" | "quit")
}

/// Whether the command may not be queued: it touches data without naming
/// keys, or it is a transaction itself.
fn refused_in_multi(spec: &cmd::CommandSpec) -> bool {
    // Redis streams are outside the store's transactions (`docs/streams.md`).
    (cmd::touches_data(spec) && spec.first_key == 0) || spec.name == "shoal.exec" || spec.group == "stream"
}

/// Whether the command changes the connection rather than data, so that it
/// cannot run on the pooled connection of another server.
fn changes_connection(spec: &cmd::CommandSpec) -> bool {
    matches!(spec.name, "hello" | "auth" | "client" | "shoal.local")
}

/// Handles what a transaction changes about dispatch, before routing: a
/// command between MULTI and EXEC is queued; in a cluster, EXEC and WATCH
/// are routed here. `None`: dispatch as usual.
pub fn intercept(s: &mut Session, entry: &'static Entry, args: Args<'_>, reply: &mut Reply<'_>) -> Option<Step> {
    if s.multi.is_some() && !runs_at_once(entry.spec) {
        if s.cluster_mode && !s.local_only {
            // Redis Cluster checks each queued command's keys as it comes:
            // one slot for the whole transaction, mastered here.
            let refused = match routing::slot_check(s, entry, args) {
                Ok(SlotOf::Slot(slot)) => {
                    let multi = s.multi.as_mut().expect("in MULTI");
                    match multi.slot.replace(slot) {
                        Some(other) if other != slot => {
                            multi.slot = Some(other);
                            Some(routing::CROSSSLOT)
                        }
                        _ => None,
                    }
                }
                Ok(SlotOf::Keyless | SlotOf::Unslotted) => None,
                Err(Routed::Wait) => return Some(Step::Retry),
                Err(Routed::Error(e)) => Some(e),
                Err(Routed::Local | Routed::Forward(_)) => None,
            };
            if let Some(e) = refused {
                s.abort_multi();
                reply.error(&e);
                return Some(Step::Done);
            }
        }
        match queue(s, entry, args) {
            Ok(()) => reply.simple("QUEUED"),
            Err(e) => {
                s.abort_multi();
                reply.error(&e);
            }
        }
        return Some(Step::Done);
    }
    if !s.clustered() {
        return None;
    }
    if std::ptr::eq(entry.spec, &cmd::multi::EXEC) && s.multi.is_some() {
        // From routing to the end of the transaction, as every other
        // command (`ClusterNode::serving`): a tablet's freeze for a move
        // waits for it, so no write of a transaction routed here lands
        // after the move's copy has read its keys.
        let node = s.ctx.cluster.clone();
        let _serving = node.as_ref().map(|n| n.serving());
        return Some(exec_routed(s, reply));
    }
    if std::ptr::eq(entry.spec, &cmd::multi::WATCH) {
        return Some(watch_routed(s, args, reply));
    }
    None
}

fn queue(s: &mut Session, entry: &'static Entry, args: Args<'_>) -> Result<(), ErrorReply> {
    if refused_in_multi(entry.spec) {
        return Err(NOT_ALLOWED);
    }
    let q = Queued::new(entry, args);
    let limit = s.transaction_limit();
    let multi = s.multi.as_mut().expect("in MULTI");
    if multi.bytes + q.bytes() > limit {
        return Err(ErrorReply::owned(format!(
            "ERR transaction too large: queued commands would exceed {limit} bytes (request-buffer-size)"
        )));
    }
    multi.bytes += q.bytes();
    multi.queued.push(q);
    Ok(())
}

/// Where a transaction's keys are, and the databases it runs in.
struct Plan {
    /// The database when EXEC starts, and after its SELECTs.
    start_db: usize,
    end_db: usize,
    /// Every key a queued command names, and every watched key whose
    /// table exists, with its table.
    keys: Vec<(TableId, Vec<u8>)>,
    /// Each watched key's database, its table (`None`: the database has no
    /// table, so the key cannot exist) and the version WATCH saw.
    watched: Vec<(usize, Option<TableId>, Vec<u8>, Seen)>,
}

/// The database index a valid SELECT switches to.
fn selected(q: &Queued) -> Option<usize> {
    let args = q.args();
    if q.entry.spec.name != "select" || args.len() != 2 {
        return None;
    }
    cmd::select_index(args.get(1))
}

/// The other database a queued COPY writes in, if any.
fn copy_destination(q: &Queued) -> Option<usize> {
    (q.entry.spec.name == "copy").then(|| cmd::copy_destination_db(q.args())).flatten()
}

/// Finds the keys of `queued` and `watched` (creating the tables of the
/// databases it writes, before any lock is taken: table creation may ask
/// the coordinator).
fn plan(s: &Session, queued: &[Queued], watched: Vec<(usize, Vec<u8>, Seen)>) -> Result<Plan, ErrorReply> {
    let start_db = s.db;
    let db = |index: usize| Db::new(&s.ctx, index, s.table_cache(), &s.txn);
    let mut current = start_db;
    for q in queued {
        if let Some(i) = selected(q) {
            current = i;
        } else if cmd::writes(q.entry.spec) {
            db(current).table_for_write()?;
            if let Some(dest) = copy_destination(q) {
                db(dest).table_for_write()?;
            }
        }
    }
    let end_db = current;
    let mut keys = Vec::new();
    current = start_db;
    for q in queued {
        if let Some(i) = selected(q) {
            current = i;
            continue;
        }
        let args = q.args();
        let Some((first, last, step)) = routing::key_positions(q.entry, args.len()) else { continue };
        let Some(table) = db(current).table() else { continue };
        for p in (first..=last).step_by(step) {
            keys.push((table, args.get(p).to_vec()));
        }
        // COPY ... DB n writes its destination in database n.
        if let Some(t) = copy_destination(q).and_then(|d| db(d).table()) {
            keys.push((t, args.get(2).to_vec()));
        }
    }
    let watched: Vec<_> =
        watched.into_iter().map(|(index, key, version)| (index, db(index).table(), key, version)).collect();
    keys.extend(watched.iter().filter_map(|(_, t, key, _)| t.map(|t| (t, key.clone()))));
    Ok(Plan { start_db, end_db, keys, watched })
}

/// Runs `f` with every read and write of the (database, key) pairs `keys`
/// in one store transaction, applied together when `f` returns `Ok` and
/// not at all when it returns `Err`; if the commit finds the store changed
/// underneath, `f` runs again. Inside EXEC, `f` runs in EXEC's
/// transaction. For the commands that change several keys at once
/// (RENAME, COPY). The databases' tables must exist.
pub fn atomically<R>(
    s: &mut Session,
    keys: &[(usize, &[u8])],
    mut f: impl FnMut(&mut Session) -> Result<R, ErrorReply>,
) -> Result<R, ErrorReply> {
    if s.txn.borrow().is_some() {
        return f(s);
    }
    let mut locked = Vec::with_capacity(keys.len());
    for &(index, key) in keys {
        let table = Db::new(&s.ctx, index, s.table_cache(), &s.txn).table_for_write()?;
        locked.push((table, key));
    }
    loop {
        let txn = s.ctx.store.transaction(&locked);
        *s.txn.borrow_mut() = Some(txn);
        let r = f(s);
        let txn = s.txn.borrow_mut().take().expect("the transaction atomically started");
        // An error drops the transaction: nothing it staged is applied.
        let r = r?;
        match txn.commit().map_err(store_error)? {
            Commit::Done => return Ok(r),
            Commit::Retry => continue,
        }
    }
}

/// EXEC of a standalone server, or of a cluster member whose keys are all
/// here: runs the queued commands in one store transaction.
pub fn exec_here(s: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let multi = s.multi.take().ok_or(EXEC_WITHOUT_MULTI)?;
    let watched = s.take_watched();
    if multi.aborted {
        return Err(EXECABORT);
    }
    let plan = plan(s, &multi.queued, watched)?;
    run(s, &multi.queued, &plan, out)
}

/// Runs `queued` as one transaction over `plan.keys`; appends EXEC's reply.
fn run(s: &mut Session, queued: &[Queued], plan: &Plan, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let keys: Vec<(TableId, &[u8])> = plan.keys.iter().map(|(t, k)| (*t, &k[..])).collect();
    loop {
        let txn = s.ctx.store.transaction(&keys);
        for (_, table, key, seen) in &plan.watched {
            let now = match table {
                Some(t) => {
                    let stamp = txn.absence_stamp(*t, key).map_err(store_error)?;
                    match txn.version(*t, key).map_err(store_error)? {
                        Some(v) => Seen::Present(v),
                        None => Seen::Absent(stamp),
                    }
                }
                None => Seen::Absent(0),
            };
            if now != *seen {
                out.null_array();
                return Ok(());
            }
        }
        *s.txn.borrow_mut() = Some(txn);
        s.db = plan.start_db;
        let mut replies = BytesMut::new();
        Reply::new(&mut replies, s.proto).array(queued.len());
        for q in queued {
            let mut reply = Reply::new(&mut replies, s.proto);
            let started = Instant::now();
            let failed = match (q.entry.run)(q.args(), s, &mut reply) {
                Ok(()) => false,
                Err(e) => {
                    reply.error(&e);
                    s.ctx.stats.resp_commands.error(e.text().strip_prefix(b"-").unwrap_or(e.text()));
                    true
                }
            };
            // Each command EXEC runs counts as a call of its own, as in Redis.
            let took = started.elapsed();
            let usec = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            s.ctx.stats.resp_commands.ran(q.index, took, failed);
            // As in Redis, each command EXEC runs is shown to monitors and
            // may enter the slow log.
            s.observe(q.index, cmd::sub_index(q.entry.spec, q.args()), q.args(), usec);
            if s.clustered() && cmd::touches_data(q.entry.spec) {
                s.touch(q.entry.spec);
            }
        }
        let txn = s.txn.borrow_mut().take().expect("the transaction EXEC started");
        match txn.commit() {
            Ok(Commit::Done) => {
                out.raw(&replies);
                return Ok(());
            }
            // Nothing was applied; the commands run again on what is there now.
            Ok(Commit::Retry) => continue,
            Err(e) => {
                s.db = plan.start_db;
                return Err(store_error(e));
            }
        }
    }
}

/// EXEC in a cluster: here, forwarded whole to the one other master of its
/// keys, or refused.
fn exec_routed(s: &mut Session, reply: &mut Reply<'_>) -> Step {
    if s.multi.as_ref().is_some_and(|m| m.aborted) {
        let r = exec_here(s, reply);
        if let Err(e) = r {
            reply.error(&e);
        }
        return Step::Done;
    }
    let queued = std::mem::take(&mut s.multi.as_mut().expect("in MULTI").queued);
    let watched = s.watched_list();
    let outcome = route_exec(s, &queued, watched);
    match outcome {
        Routed::Wait => {
            // Run EXEC again shortly, with everything still queued.
            s.multi.as_mut().expect("in MULTI").queued = queued;
            Step::Retry
        }
        Routed::Local => {
            s.multi.as_mut().expect("in MULTI").queued = queued;
            if let Err(e) = exec_here(s, reply) {
                reply.error(&e);
            }
            Step::Done
        }
        Routed::Forward(job) => {
            s.multi = None;
            s.take_watched();
            Step::Forward(job)
        }
        Routed::Error(e) => {
            s.multi = None;
            s.take_watched();
            reply.error(&e);
            Step::Done
        }
    }
}

/// Where the transaction of `queued` runs: `Local`, `Forward` (a SHOAL.EXEC
/// job; the session's database is then set to the one its SELECTs leave),
/// `Wait`, or `Error` (it is discarded).
fn route_exec(s: &mut Session, queued: &[Queued], watched: Vec<(usize, Vec<u8>, Seen)>) -> Routed {
    let plan = match plan(s, queued, watched) {
        Ok(p) => p,
        Err(e) => return Routed::Error(e),
    };
    let addr = match routing::owner_of_keys(s, &plan.keys) {
        Ok(None | Some(Owner::Here)) => return Routed::Local,
        Ok(Some(Owner::There(addr))) => addr,
        Err(routed) => return routed,
    };
    if let Some(q) = queued.iter().find(|q| changes_connection(q.entry.spec)) {
        return Routed::Error(ErrorReply::owned(format!(
            "ERR {} cannot run in a transaction whose keys another server masters",
            q.entry.spec.name.to_uppercase()
        )));
    }
    let request = encode_exec(&plan, queued);
    // In the database EXEC started in (the session's still).
    let job = routing::relay_job(s, addr, request);
    s.db = plan.end_db;
    Routed::Forward(job)
}

/// SHOAL.EXEC n [db key version]xn command...: each command one argument,
/// encoded as a RESP request; version 0 is an absent key.
fn encode_exec(plan: &Plan, queued: &[Queued]) -> Vec<u8> {
    let mut words: Vec<Vec<u8>> = vec![b"shoal.exec".to_vec(), plan.watched.len().to_string().into_bytes()];
    for (db, _, key, version) in &plan.watched {
        words.push(db.to_string().into_bytes());
        words.push(key.clone());
        words.push(version.to_wire().to_string().into_bytes());
    }
    for q in queued {
        let parts: Vec<&[u8]> = q.args().iter().collect();
        let mut encoded = Vec::new();
        encode_request(&parts, &mut encoded);
        words.push(encoded);
    }
    let refs: Vec<&[u8]> = words.iter().map(|w| &w[..]).collect();
    let mut request = Vec::new();
    encode_request(&refs, &mut request);
    request
}

/// SHOAL.EXEC on the server that masters the keys: checks everything
/// before anything runs, then runs the transaction as EXEC would. The
/// connection's database is the same afterwards (it is another server's
/// pooled connection).
pub fn exec_forwarded(args: Args<'_>, s: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    let malformed = |what: &str| ErrorReply::owned(format!("ERR malformed SHOAL.EXEC: {what}"));
    let n = parse_i64(args.get(1)).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| malformed("watch count"))?;
    if n > (args.len() - 2) / 3 {
        return Err(malformed("watch count"));
    }
    let mut watched = Vec::with_capacity(n);
    for i in 0..n {
        let db = cmd::select_index(args.get(2 + 3 * i)).ok_or_else(|| malformed("database"))?;
        let key = args.get(3 + 3 * i).to_vec();
        let seen = parse_i64(args.get(4 + 3 * i)).and_then(Seen::from_wire).ok_or_else(|| malformed("version"))?;
        watched.push((db, key, seen));
    }
    let cfg = &s.ctx.config;
    let store = s.ctx.store.config();
    let limits = Limits::new(cfg.max_request_size.0 as usize, store.max_value_bytes, store.max_key_bytes);
    let mut queued = Vec::new();
    let (mut spans, mut inline) = (Vec::new(), Vec::new());
    for request in args.iter().skip(2 + 3 * n) {
        match frame::check(request, &limits) {
            Ok(Some(len)) if len == request.len() => {}
            _ => return Err(malformed("a command is not one complete request")),
        }
        let data = frame::parse(request, &mut spans, &mut inline).map_err(|e| malformed(&e.to_string()))?;
        let command = Args::new(data, &spans);
        if command.is_empty() {
            return Err(malformed("an empty command"));
        }
        let entry = cmd::lookup(command.get(0)).ok_or_else(|| cmd::unknown_command(command))?;
        if !entry.spec.arity_ok(command.len()) {
            return Err(cmd::wrong_arity(entry.spec.name));
        }
        if refused_in_multi(entry.spec) || runs_at_once(entry.spec) || changes_connection(entry.spec) {
            return Err(NOT_ALLOWED);
        }
        queued.push(Queued::new(entry, command));
    }
    let plan = plan(s, &queued, watched)?;
    if s.clustered() {
        match routing::owner_of_keys(s, &plan.keys) {
            Ok(None | Some(Owner::Here)) => {}
            Ok(Some(Owner::There(_))) => return Err(routing::NOT_HERE),
            Err(Routed::Error(e)) => return Err(e),
            Err(_) => return Err(routing::NOT_HERE),
        }
    }
    let saved = s.db;
    let r = run(s, &queued, &plan, out);
    s.db = saved;
    r
}

/// WATCH in a cluster: keys mastered here are read here; others by
/// SHOAL.VERSIONS on their masters, recorded when the reply comes
/// ([`Session::forwarded`]).
fn watch_routed(s: &mut Session, args: Args<'_>, reply: &mut Reply<'_>) -> Step {
    if s.multi.is_some() {
        reply.error(&ErrorReply::new("ERR WATCH inside MULTI is not allowed"));
        return Step::Done;
    }
    let versions = cmd::lookup(b"shoal.versions").expect("SHOAL.VERSIONS is in the command table");
    let mut data = b"shoal.versions".to_vec();
    let mut spans = vec![(0, data.len())];
    for key in args.iter().skip(1) {
        spans.push((data.len(), data.len() + key.len()));
        data.extend_from_slice(key);
    }
    match routing::route(s, versions, Args::new(&data, &spans)) {
        Routed::Local => {
            if let Err(e) = cmd::multi::run_watch(args, s, reply) {
                reply.error(&e);
            }
            Step::Done
        }
        Routed::Forward(job) => {
            s.pending_watch = Some((s.db, args.iter().skip(1).map(|k| k.to_vec()).collect()));
            Step::Forward(job)
        }
        Routed::Wait => Step::Retry,
        Routed::Error(e) => {
            reply.error(&e);
            Step::Done
        }
    }
}

/// What a SHOAL.VERSIONS reply says of each key (an array of `n` integers,
/// [`Seen::to_wire`]); `None` if it is anything else.
pub fn parse_versions(reply: &[u8], n: usize) -> Option<Vec<Seen>> {
    let mut rest = reply;
    let mut lines = std::iter::from_fn(|| {
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let line = &rest[..end];
        rest = &rest[end + 2..];
        Some(line)
    });
    let header = lines.next()?;
    if header.first() != Some(&b'*') || parse_i64(&header[1..])? != n as i64 {
        return None;
    }
    let out: Option<Vec<Seen>> =
        lines.by_ref().take(n).map(|l| Seen::from_wire(parse_i64(l.strip_prefix(b":")?)?)).collect();
    let out = out?;
    (out.len() == n && lines.next().is_none() && rest.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_round_trips_through_its_wire_integer() {
        for seen in
            [Seen::Present(Version(1)), Seen::Present(Version(1 << 40)), Seen::Absent(0), Seen::Absent(u32::MAX)]
        {
            assert_eq!(Seen::from_wire(seen.to_wire()), Some(seen));
        }
        assert_eq!(Seen::from_wire(0), None);
        assert_eq!(Seen::from_wire(i64::MIN), None);
    }

    #[test]
    fn parse_versions_takes_exactly_n_integers() {
        assert_eq!(parse_versions(b"*2\r\n:5\r\n:-1\r\n", 2), Some(vec![Seen::Present(Version(5)), Seen::Absent(0)]));
        assert_eq!(parse_versions(b"*0\r\n", 0), Some(vec![]));
        assert_eq!(parse_versions(b"*2\r\n:5\r\n:-8\r\n", 3), None);
        assert_eq!(parse_versions(b"*1\r\n:0\r\n", 1), None);
        assert_eq!(parse_versions(b"*1\r\n$1\r\nx\r\n", 1), None);
        assert_eq!(parse_versions(b"*1\r\n:1\r\n:2\r\n", 1), None);
        assert_eq!(parse_versions(b"-ERR x\r\n", 1), None);
    }
}
