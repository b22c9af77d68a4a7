//! INFO [section ...]: "field:value" lines under "# Section" headers, as
//! Redis writes them. Sections: server, clients, memory, persistence, stats,
//! replication, keyspace, and shoal (the store's own statistics: memory
//! and log utilisation, cleaner, write cost, ...). In a cluster,
//! `replication` also has the server's place in the cluster, its log's
//! replication and its backup's statistics. "default", "all" and
//! "everything" name them all; unknown sections are left out. RESP3 sends
//! the text as a verbatim string.

use super::{CommandSpec, COMMANDS};
use crate::cluster::ClusterNode;
use crate::context::{ServerContext, ServerStats};
use crate::resp::db::{table_name, DATABASES};
use crate::resp::frame::Args;
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::Session;
use shoal_cluster::ServerState;
use shoal_engine::Eviction;
use std::fmt::Write;

pub static SPEC: CommandSpec = CommandSpec {
    name: "info",
    syntax: "[section...]",
    tips: &["nondeterministic_output", "request_policy:all_shards", "response_policy:special"],
    arity: -1,
    flags: &["loading", "stale"],
    acl: &["@slow", "@dangerous"],
    group: "server",
    summary: "Get information and statistics about the server",
    ..CommandSpec::BASE
};

/// The version of Redis whose behaviour this front end follows.
pub const REDIS_VERSION: &str = "7.0.0";

/// Every section, in Redis's order; `commandstats` only when named or with
/// `all`/`everything` (as Redis).
const SECTIONS: [&str; 12] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "commandstats",
    "errorstats",
    "cluster",
    "keyspace",
    "shoal",
];

/// Sections left out of `INFO` and `INFO default`.
fn not_default(section: &str) -> bool {
    section == "commandstats"
}

struct Info {
    sections: Vec<&'static str>,
}

impl Info {
    fn parse(args: Args<'_>) -> Info {
        let mut sections: Vec<&'static str> = Vec::new();
        if args.len() == 1 {
            sections.extend(SECTIONS.iter().filter(|s| !not_default(s)));
        }
        for a in args.iter().skip(1) {
            if a.eq_ignore_ascii_case(b"default") {
                sections.extend(SECTIONS.iter().filter(|s| !not_default(s)));
            } else if ["all", "everything"].iter().any(|w| a.eq_ignore_ascii_case(w.as_bytes())) {
                sections.extend(SECTIONS);
            } else if let Some(s) = SECTIONS.iter().find(|s| a.eq_ignore_ascii_case(s.as_bytes())) {
                sections.push(s);
            }
        }
        let mut ordered: Vec<&'static str> = SECTIONS.into_iter().filter(|s| sections.contains(s)).collect();
        ordered.dedup();
        Info { sections: ordered }
    }

    fn apply(self, session: &mut Session, out: &mut Reply) {
        let mut text = String::new();
        for (i, s) in self.sections.iter().enumerate() {
            if i > 0 {
                text.push_str("\r\n");
            }
            section(&session.ctx, s, &mut text);
        }
        out.verbatim(text.as_bytes());
    }
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        n if n >= 1 << 30 => format!("{:.2}G", b / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.2}M", b / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.2}K", b / 1024.0),
        n => format!("{n}B"),
    }
}

fn section(ctx: &ServerContext, name: &str, t: &mut String) {
    let st = &ctx.stats;
    let get = ServerStats::get;
    let c = &ctx.config;
    macro_rules! line {
        ($($arg:tt)*) => {{ let _ = write!(t, $($arg)*); t.push_str("\r\n"); }};
    }
    match name {
        "server" => {
            let up = ctx.uptime().as_secs();
            line!("# Server");
            line!("redis_version:{REDIS_VERSION}");
            line!("shoal_version:{}", env!("CARGO_PKG_VERSION"));
            line!("redis_mode:{}", if c.cluster_mode { "cluster" } else { "standalone" });
            line!("os:{} {}", std::env::consts::OS, std::env::consts::ARCH);
            line!("arch_bits:{}", usize::BITS);
            line!("multiplexing_api:epoll");
            line!("process_id:{}", std::process::id());
            line!("tcp_port:{}", c.resp_port);
            line!("native_port:{}", c.native_port);
            line!("uptime_in_seconds:{up}");
            line!("uptime_in_days:{}", up / 86400);
            line!("io_threads_active:0");
            line!("worker_threads:{}", crate::server::WORKER_THREADS);
        }
        "clients" => {
            line!("# Clients");
            line!("connected_clients:{}", get(&st.connections_current));
            line!("maxclients:{}", c.max_connections);
            line!("client_recent_max_input_buffer:{}", c.request_buffer_size.0);
            line!("client_recent_max_output_buffer:{}", c.reply_buffer_size.0);
            line!("client_buffer_budget:{}", ctx.budget.limit());
            line!("client_buffer_bytes:{}", ctx.budget.used());
            line!("blocked_clients:0");
        }
        "memory" => {
            let s = ctx.store.stats();
            let used = s.seglets_in_use * s.seglet_bytes + s.hash_table_bytes;
            line!("# Memory");
            line!("used_memory:{used}");
            line!("used_memory_human:{}", human(used));
            line!("used_memory_dataset:{}", s.live_bytes);
            line!("used_memory_dataset_human:{}", human(s.live_bytes));
            line!("maxmemory:{}", s.memory_bytes);
            line!("maxmemory_human:{}", human(s.memory_bytes));
            line!("maxmemory_policy:{}", maxmemory_policy(ctx));
            line!("mem_allocator:shoal-log");
        }
        "persistence" => {
            line!("# Persistence");
            line!("loading:0");
            line!("rdb_changes_since_last_save:0");
            line!("rdb_bgsave_in_progress:0");
            line!("aof_enabled:0");
            line!("aof_rewrite_in_progress:0");
        }
        "stats" => {
            line!("# Stats");
            line!("total_connections_received:{}", get(&st.connections_total));
            line!("total_commands_processed:{}", get(&st.commands));
            line!("total_net_input_bytes:{}", get(&st.bytes_in));
            line!("total_net_output_bytes:{}", get(&st.bytes_out));
            line!("rejected_connections:{}", get(&st.connections_rejected));
            line!("client_output_buffer_limit_disconnections:{}", get(&st.reply_overflows));
            line!("client_idle_timeout_disconnections:{}", get(&st.idle_timeouts));
            line!("lease_lapse_disconnections:{}", get(&st.lease_lapses));
            line!("client_buffer_disconnects:{}", get(&st.client_buffer_disconnects));
            line!("client_request_timeouts:{}", get(&st.request_timeouts));
            line!("tls_handshakes:{}", get(&st.tls_handshakes));
            line!("tls_handshake_failures:{}", get(&st.tls_handshake_failures));
            line!("tls_handshake_timeouts:{}", get(&st.tls_handshake_timeouts));
            line!("total_error_replies:{}", st.resp_commands.total_errors());
            line!("protocol_errors:{}", get(&st.protocol_errors));
            line!("keyspace_hits:{}", get(&st.keyspace_hits));
            line!("keyspace_misses:{}", get(&st.keyspace_misses));
            line!("forwarded_requests:{}", get(&st.forwarded_requests));
            line!("moved_replies:{}", get(&st.moved_replies));
            let store = ctx.store.stats();
            line!("expired_keys:{}", store.expired_keys);
            line!("evicted_keys:{}", store.evicted);
        }
        "replication" => {
            line!("# Replication");
            line!("role:master");
            line!("connected_slaves:0");
            if let Some(node) = &ctx.cluster {
                cluster_fields(node, t);
            }
        }
        "cpu" => {
            let (user, sys) = shoal_common::os::cpu_seconds(false);
            let (cuser, csys) = shoal_common::os::cpu_seconds(true);
            line!("# CPU");
            line!("used_cpu_sys:{sys:.6}");
            line!("used_cpu_user:{user:.6}");
            line!("used_cpu_sys_children:{csys:.6}");
            line!("used_cpu_user_children:{cuser:.6}");
        }
        "commandstats" => {
            line!("# Commandstats");
            for (i, e) in COMMANDS.iter().enumerate() {
                let f = st.resp_commands.figures(i);
                if f.calls + f.rejected == 0 {
                    continue;
                }
                let per_call = if f.calls == 0 { 0.0 } else { f.usec as f64 / f.calls as f64 };
                line!(
                    "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
                    e.spec.name,
                    f.calls,
                    f.usec,
                    f.rejected,
                    f.failed
                );
            }
        }
        "errorstats" => {
            line!("# Errorstats");
            for (code, n) in st.resp_commands.error_counts() {
                line!("errorstat_{code}:count={n}");
            }
        }
        "cluster" => {
            line!("# Cluster");
            line!("cluster_enabled:{}", u8::from(c.cluster_mode));
        }
        "keyspace" => {
            line!("# Keyspace");
            for db in 0..DATABASES {
                if let Some(table) = ctx.tables.lookup(table_name(db)) {
                    match ctx.tables.len(table) {
                        Ok(0) | Err(_) => {}
                        Ok(n) => {
                            let expires = ctx.store.table_expiring(table).unwrap_or(0);
                            line!("db{db}:keys={n},expires={expires},avg_ttl=0")
                        }
                    }
                }
            }
        }
        "shoal" => {
            let s = ctx.store.stats();
            line!("# Shoal");
            line!("memory_bytes:{}", s.memory_bytes);
            line!("segment_bytes:{}", s.segment_bytes);
            line!("seglet_bytes:{}", s.seglet_bytes);
            line!("seglets_total:{}", s.seglets_total);
            line!("seglets_free:{}", s.seglets_free);
            line!("seglets_in_use:{}", s.seglets_in_use);
            line!("segments_in_log:{}", s.segments_in_log);
            line!("objects:{}", s.objects);
            line!("live_bytes:{}", s.live_bytes);
            line!("live_key_value_bytes:{}", s.live_key_value_bytes);
            line!("tombstone_bytes:{}", s.tombstone_bytes);
            line!("tombstones_written:{}", s.tombstones_written);
            line!("tombstones_elided:{}", s.tombstones_elided);
            line!("memory_utilisation:{:.4}", s.memory_utilisation);
            line!("log_utilisation:{:.4}", s.log_utilisation);
            line!("hash_table_bytes:{}", s.hash_table_bytes);
            line!("hash_table_buckets:{}", s.hash_table_buckets);
            line!("hash_table_growths:{}", s.hash_table_growths);
            line!("store_reads:{}", s.reads);
            line!("store_writes:{}", s.writes);
            line!("store_removes:{}", s.removes);
            line!("out_of_memory_refusals:{}", s.out_of_memory);
            line!("cleaner_compactions:{}", s.compactions);
            line!("cleaner_combined_passes:{}", s.combined_passes);
            line!("cleaner_segments_compacted:{}", s.segments_compacted);
            line!("cleaner_segments_cleaned:{}", s.segments_cleaned);
            line!("cleaner_tombstone_scans:{}", s.tombstone_scans);
            line!("cleaner_bytes_relocated:{}", s.bytes_relocated);
            line!("cleaner_seglets_freed:{}", s.seglets_freed);
            line!("cleaner_ms:{}", s.cleaning_ms);
            line!("expiring_objects:{}", s.expiring_objects);
            line!("expired_keys:{}", s.expired_keys);
            line!("expired_swept:{}", s.expired_swept);
            line!("expired_dropped_by_cleaner:{}", s.expired_dropped);
            line!("expiry_sweep_passes:{}", s.sweep_passes);
            line!("expiry_sweep_segments_scanned:{}", s.sweep_segments_scanned);
            line!("expiry_sweep_ms:{}", s.sweep_ms);
            line!("eviction:{}", ctx.store.eviction().name());
            line!("evicted_objects:{}", s.evicted);
            line!("evicted_bytes:{}", s.evicted_bytes);
            line!("eviction_passes:{}", s.eviction_passes);
            line!("seglets_returned_to_os_now:{}", s.seglets_returned_now);
            line!("seglets_returned_to_os:{}", s.seglets_returned);
            line!("heads_rolled:{}", s.heads_rolled);
            line!("write_cost:{:.4}", s.write_cost);
            line!("tables:{}", ctx.tables.list().len());
            if let Some(sc) = ctx.cluster.as_ref().and_then(|n| n.sc.as_ref()) {
                sc_fields(sc, t);
            }
        }
        _ => {}
    }
}

/// Symmetric caching's figures (`sc.rs`), in `# Shoal`.
fn sc_fields(sc: &crate::sc::Sc, t: &mut String) {
    use std::sync::atomic::Ordering::Relaxed;
    macro_rules! line {
        ($($arg:tt)*) => {{ let _ = write!(t, $($arg)*); t.push_str("\r\n"); }};
    }
    let s = &sc.stats;
    line!(
        "sc_consistency:{}",
        if sc.settings().consistency == shoal_symcache::Consistency::Strong { "strong" } else { "eventual" }
    );
    line!("sc_membership_epoch:{}", s.membership.load(Relaxed));
    line!("sc_round:{}", s.round.load(Relaxed));
    line!("sc_hot_keys:{}", s.hot_keys.load(Relaxed));
    line!("sc_home_keys:{}", s.home_keys.load(Relaxed));
    line!("sc_copies:{}", s.copies.load(Relaxed));
    line!("sc_hits:{}", s.hits.load(Relaxed));
    line!("sc_misses:{}", s.misses.load(Relaxed));
    line!("sc_invalidations_sent:{}", s.invalidations_sent.load(Relaxed));
    line!("sc_invalidations_received:{}", s.invalidations_received.load(Relaxed));
    line!("sc_acks_received:{}", s.acks_received.load(Relaxed));
    line!("sc_updates_sent:{}", s.updates_sent.load(Relaxed));
    line!("sc_updates_received:{}", s.updates_received.load(Relaxed));
    line!("sc_writes_held:{}", s.writes_held.load(Relaxed));
    line!("sc_frames_dropped:{}", s.frames_dropped.load(Relaxed));
    line!("sc_installs:{}", s.installs.load(Relaxed));
}

/// A cluster member's part of `# Replication`: who it is in the cluster,
/// its log's replication to the backups and its own backup.
fn cluster_fields(node: &ClusterNode, t: &mut String) {
    macro_rules! line {
        ($($arg:tt)*) => {{ let _ = write!(t, $($arg)*); t.push_str("\r\n"); }};
    }
    let map = node.map();
    let up = map.servers.iter().filter(|s| s.state == ServerState::Up).count();
    line!("shoal_cluster:1");
    line!("server_id:{}", node.id);
    line!("log_id:{}", node.log.0);
    line!("coordinator:{}", node.coordinator);
    line!("map_version:{}", map.version);
    line!("cluster_servers:{}", map.servers.len());
    line!("cluster_servers_up:{up}");
    line!("cluster_tablets:{}", map.tablets.len());
    line!("local_tablets:{}", map.tablets_of(node.id).count());
    line!("replicas:{}", map.replicas);
    line!("recovering:{}", node.is_recovering() as u8);
    {
        let r = node.recovery.lock();
        if !r.logs.is_empty() {
            line!("recovery_phase:{}", r.phase);
            line!("recovery_logs:{}", r.logs.len());
            line!("recovery_segments:{}", r.segments);
            line!("recovery_bytes:{}", r.bytes);
            line!("recovery_objects:{}", r.objects);
            line!("recovery_ms:{}", r.elapsed_ms);
        }
    }
    let r = node.replicator.stats();
    line!("master_repl_offset:{}", r.position);
    line!("repl_durable_offset:{}", r.durable);
    line!("repl_durable_lag:{}", r.durable_lag);
    line!("repl_rounds:{}", r.rounds);
    line!("repl_round_bytes_mean:{:.1}", r.round_bytes_mean);
    line!("repl_round_bytes_max:{}", r.round_bytes_max);
    line!("repl_round_appends_mean:{:.2}", r.round_appends_mean);
    line!("repl_round_appends_max:{}", r.round_appends_max);
    line!("repl_bytes_replicated:{}", r.bytes_replicated);
    line!("repl_replicas_opened:{}", r.replicas_opened);
    line!("repl_replicas_closed:{}", r.replicas_closed);
    line!("repl_replicas_reopened:{}", r.replicas_reopened);
    line!("repl_refusals:{}", r.refusals);
    line!("repl_open_replicas:{}", r.open_replicas);
    line!("repl_segments_freed:{}", r.segments_freed);
    if let Some(b) = node.backup_stats() {
        line!("backup_buffers_total:{}", b.buffers_total);
        line!("backup_buffers_in_use:{}", b.buffers_in_use);
        line!("backup_awaiting_flush:{}", b.awaiting_flush);
        line!("backup_segments_on_disk:{}", b.segments_on_disk);
        line!("backup_bytes_received:{}", b.bytes_received);
        line!("backup_segments_opened:{}", b.segments_opened);
        line!("backup_segments_closed:{}", b.segments_closed);
        line!("backup_segments_flushed:{}", b.segments_flushed);
        line!("backup_segments_freed:{}", b.segments_freed);
        line!("backup_refusals:{}", b.refusals);
        line!("backup_connections_active:{}", b.connections_active);
    }
}

pub fn run(args: Args<'_>, session: &mut Session, out: &mut Reply<'_>) -> Result<(), ErrorReply> {
    Info::parse(args).apply(session, out);
    Ok(())
}

/// Redis's name for what a full store does: `noeviction`, or Shoal's own
/// `allkeys-oldest` (cache mode evicts the oldest segments of the log,
/// first written first out: none of Redis's policies, so none of their
/// names).
pub(crate) fn maxmemory_policy(ctx: &ServerContext) -> &'static str {
    match ctx.store.eviction() {
        Eviction::None => "noeviction",
        Eviction::Oldest => "allkeys-oldest",
    }
}
