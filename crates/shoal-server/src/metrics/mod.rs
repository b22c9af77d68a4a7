//! The server's metrics (`/metrics`, `docs/observability.md` lists every
//! one): gathered at scrape time from the figures the server keeps anyway
//! (the store's statistics, the front ends' counters, the replicator's and
//! the backup's), never kept twice.
//!
//! The only figures kept for metrics alone are the native and memcached
//! front ends' per-operation counters and latency histograms ([`ops`]);
//! the Redis front end's are its `INFO commandstats` counters, which keep
//! a histogram per command for the same cost. Their cost on the request
//! path is described in [`ops`]; everything else here runs only when
//! `/metrics` is read, off the workers (`http.rs`).

pub mod ops;

use crate::cluster::ClusterNode;
use crate::context::{ServerContext, ServerStats};
use ops::{bucket_bound, OpFigures, OpStats, BUCKETS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use shoal_http::prom::{Result, Scrape};
use std::sync::Arc;

/// One server's metrics, encoded when scraped.
pub struct ServerMetrics {
    ctx: Arc<ServerContext>,
}

impl ServerMetrics {
    pub fn new(ctx: Arc<ServerContext>) -> ServerMetrics {
        ServerMetrics { ctx }
    }
}

impl std::fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerMetrics")
    }
}

impl Collector for ServerMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> Result {
        let mut s = Scrape::new(encoder);
        let ctx = &self.ctx;
        process(&mut s, ctx)?;
        connections(&mut s, ctx)?;
        requests(&mut s, ctx)?;
        store(&mut s, ctx)?;
        if let Some(node) = &ctx.cluster {
            cluster(&mut s, node)?;
            replication(&mut s, node)?;
            backup(&mut s, node, ctx)?;
            recovery(&mut s, node)?;
            if let Some(sc) = &node.sc {
                symmetric_caching(&mut s, sc)?;
            }
        }
        Ok(())
    }
}

fn process(s: &mut Scrape, ctx: &ServerContext) -> Result {
    s.gauge("shoal_uptime_seconds", "Seconds since the server started.", ctx.uptime().as_secs_f64())?;
    s.gauge(
        "shoal_process_resident_memory_bytes",
        "Resident memory of the server process.",
        shoal_common::os::rss_bytes(),
    )?;
    let (user, system) = shoal_common::os::cpu_seconds(false);
    s.counters(
        "shoal_process_cpu_seconds",
        "CPU time the server process used, by mode.",
        [(&[("mode", "user")][..], user), (&[("mode", "system")][..], system)],
    )
}

fn connections(s: &mut Scrape, ctx: &ServerContext) -> Result {
    let st = &ctx.stats;
    let get = ServerStats::get;
    s.gauge(
        "shoal_client_connections",
        "Client connections open now (every front end).",
        get(&st.connections_current),
    )?;
    s.counter("shoal_client_connections_accepted", "Client connections accepted.", get(&st.connections_total))?;
    s.counter(
        "shoal_client_connections_rejected",
        "Client connections refused because max_connections were open.",
        get(&st.connections_rejected),
    )?;
    s.counters(
        "shoal_client_connections_closed",
        "Client connections the server closed, by reason.",
        [
            (&[("reason", "reply_overflow")][..], get(&st.reply_overflows)),
            (&[("reason", "idle_timeout")][..], get(&st.idle_timeouts)),
            (&[("reason", "request_timeout")][..], get(&st.request_timeouts)),
            (&[("reason", "lease_lapse")][..], get(&st.lease_lapses)),
            (&[("reason", "buffer_budget")][..], get(&st.client_buffer_disconnects)),
        ],
    )?;
    s.gauge("shoal_client_buffer_bytes", "Bytes all client connections' buffers hold.", ctx.budget.used() as u64)?;
    s.gauge(
        "shoal_client_buffer_budget_bytes",
        "The bound on all client connections' buffers (client_buffer_budget).",
        ctx.budget.limit() as u64,
    )?;
    s.counter(
        "shoal_stream_groups_trimmed",
        "Stream groups removed by retention (--stream-retention-bytes, --stream-retention-ms).",
        get(&st.stream_groups_trimmed),
    )?;
    s.counter("shoal_client_received_bytes", "Bytes received from clients.", get(&st.bytes_in))?;
    s.counter("shoal_client_sent_bytes", "Bytes sent to clients.", get(&st.bytes_out))?;
    s.counter(
        "shoal_protocol_errors",
        "Requests that broke their protocol's framing or encoding.",
        get(&st.protocol_errors),
    )?;
    s.counters(
        "shoal_tls_handshakes",
        "TLS handshakes on the client ports, by result.",
        [
            (&[("result", "ok")][..], get(&st.tls_handshakes)),
            (&[("result", "failed")][..], get(&st.tls_handshake_failures)),
            (&[("result", "timeout")][..], get(&st.tls_handshake_timeouts)),
        ],
    )
}

/// Labels of one front end's operation.
fn op_labels<'a>(frontend: &'static str, command: &'a str) -> [(&'static str, &'a str); 2] {
    [("frontend", frontend), ("command", command)]
}

/// Every operation of every front end that was received at least once.
fn used_ops(ctx: &ServerContext) -> Vec<([(&'static str, &'static str); 2], OpFigures)> {
    fn add<const N: usize>(
        v: &mut Vec<([(&'static str, &'static str); 2], OpFigures)>,
        frontend: &'static str,
        ops: &OpStats<N>,
        name: impl Fn(usize) -> Option<&'static str>,
    ) {
        for i in 0..N {
            let f = ops.figures(i);
            if f.calls + f.rejected == 0 {
                continue;
            }
            if let Some(command) = name(i) {
                v.push((op_labels(frontend, command), f));
            }
        }
    }
    let st = &ctx.stats;
    let mut v = Vec::new();
    add(&mut v, "resp", st.resp_commands.ops(), crate::resp::stats::command_name);
    add(&mut v, "native", &st.native_ops, crate::native::op_name);
    add(&mut v, "memcached", &st.memcached_ops, |i| crate::memcached::cmd::OPS.get(i).copied());
    v
}

fn requests(s: &mut Scrape, ctx: &ServerContext) -> Result {
    let used = used_ops(ctx);
    s.counters(
        "shoal_requests",
        "Requests received, by front end and command: those that ran here and those refused before running.",
        used.iter().map(|(l, f)| (&l[..], f.calls + f.rejected)),
    )?;
    s.counters(
        "shoal_request_errors",
        "Requests answered with an error, by front end and command: those that failed and those refused.",
        used.iter().map(|(l, f)| (&l[..], f.failed + f.rejected)),
    )?;
    let buckets: Vec<[(f64, u64); BUCKETS]> =
        used.iter().map(|(_, f)| std::array::from_fn(|i| (bucket_bound(i), f.buckets[i]))).collect();
    s.histograms(
        "shoal_request_duration_seconds",
        "Time to run a request on its worker (parse to reply, without the durability wait), by front end and command.",
        used.iter().zip(&buckets).map(|((l, f), b)| (&l[..], f.sum_ns as f64 * 1e-9, &b[..])),
    )?;
    let st = &ctx.stats;
    let codes: Vec<(String, u64)> =
        st.resp_commands.error_counts().into_iter().map(|(code, n)| (label_safe(&code), n)).collect();
    let labels: Vec<[(&str, &str); 1]> = codes.iter().map(|(code, _)| [("code", code.as_str())]).collect();
    s.counters(
        "shoal_resp_error_replies",
        "Redis error replies by error code (the first word, as INFO errorstats; at most 128 codes).",
        labels.iter().zip(&codes).map(|(l, (_, n))| (&l[..], *n)),
    )?;
    s.counter(
        "shoal_forwarded_requests",
        "Requests sent on to the server that masters their key.",
        ServerStats::get(&st.forwarded_requests),
    )?;
    s.counter(
        "shoal_moved_replies",
        "Redis requests answered -MOVED (Redis Cluster mode).",
        ServerStats::get(&st.moved_replies),
    )?;
    s.counters(
        "shoal_keyspace_lookups",
        "Reads of a key by the text front ends, by whether it was found.",
        [
            (&[("result", "hit")][..], ServerStats::get(&st.keyspace_hits)),
            (&[("result", "miss")][..], ServerStats::get(&st.keyspace_misses)),
        ],
    )
}

/// `text` with every character a label value may not carry unescaped
/// replaced by `_` (error codes come from replies).
fn label_safe(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

fn store(s: &mut Scrape, ctx: &ServerContext) -> Result {
    let t = ctx.store.stats();
    let seglets = |n: u64| n * t.seglet_bytes;
    s.gauge("shoal_memory_pool_bytes", "Memory for objects (--memory): the log's pool.", t.memory_bytes)?;
    s.gauge("shoal_memory_pool_free_bytes", "Pool memory in free seglets.", seglets(t.seglets_free))?;
    s.gauge("shoal_memory_log_bytes", "Pool memory in seglets of the log (in use).", seglets(t.seglets_in_use))?;
    s.gauge("shoal_memory_live_bytes", "Bytes of live object entries (headers, keys and values).", t.live_bytes)?;
    s.gauge(
        "shoal_memory_live_key_value_bytes",
        "Bytes of live objects' keys and values alone.",
        t.live_key_value_bytes,
    )?;
    s.gauge("shoal_memory_tombstone_bytes", "Bytes of tombstones believed live.", t.tombstone_bytes)?;
    s.gauge("shoal_memory_hash_table_bytes", "Bytes of the hash table.", t.hash_table_bytes)?;
    s.gauge("shoal_memory_cid_table_bytes", "Bytes of the chunks' CID tables.", t.cid_table_bytes)?;
    s.gauge("shoal_memory_stream_bytes", "Bytes of stream batch entries in the log.", t.stream_bytes)?;
    s.gauge(
        "shoal_hash_table_buckets",
        "Main buckets of the hash table (it grows with the objects).",
        t.hash_table_buckets,
    )?;
    s.counter("shoal_hash_table_growths", "Times the hash table has grown.", t.hash_table_growths)?;
    s.gauge(
        "shoal_memory_returned_bytes",
        "Free pool memory given back to the OS now.",
        seglets(t.seglets_returned_now),
    )?;
    s.gauge("shoal_memory_prefaulted_bytes", "Pool memory made resident ahead of use.", t.prefaulted_bytes)?;
    s.gauge("shoal_log_segments", "Segments in the log.", t.segments_in_log)?;
    s.gauge(
        "shoal_log_utilisation_ratio",
        "Live bytes over the log's seglet bytes: how full the log is.",
        t.log_utilisation,
    )?;
    s.gauge("shoal_memory_utilisation_ratio", "Live bytes over the pool's bytes.", t.memory_utilisation)?;
    s.gauge("shoal_objects", "Live objects.", t.objects)?;
    s.gauge("shoal_chunks", "Live chunks (of every chunk table).", t.chunks)?;
    let l = ctx.locks.stats(crate::chunklocks::Now::clock());
    s.gauge("shoal_chunk_locks_held", "Chunk lock holders (a shared lock counts each holder).", l.held)?;
    s.gauge("shoal_chunk_lock_waiters", "Chunk lock requests queued (waiting clients retrying).", l.waiters)?;
    s.counter("shoal_chunk_lock_grants", "Chunk locks granted.", l.grants)?;
    s.counter("shoal_chunk_lock_busy", "Chunk lock requests answered busy.", l.busy)?;
    s.gauge("shoal_chunk_lock_owners", "Lock owners with a chunk lock held or queued.", l.owners)?;
    s.counter(
        "shoal_chunk_lock_owner_limited",
        "Chunk lock requests refused by the per-owner limit (--chunk-lock-owner-limit).",
        l.owner_limited,
    )?;
    s.counter(
        "shoal_chunk_lock_releases",
        "Chunk locks unlocked, or released because their chunk went (removed, evicted, table dropped).",
        l.releases,
    )?;
    s.counter("shoal_chunk_lock_lease_expiries", "Chunk locks whose lease ran out.", l.lease_expiries)?;
    s.gauge("shoal_objects_expiring", "Live objects that carry an expiry time.", t.expiring_objects)?;
    s.counters(
        "shoal_store_operations",
        "Store operations, by kind.",
        [(&[("op", "read")][..], t.reads), (&[("op", "write")][..], t.writes), (&[("op", "remove")][..], t.removes)],
    )?;
    s.counter("shoal_store_out_of_memory", "Writes refused for lack of memory.", t.out_of_memory)?;
    s.counters(
        "shoal_cleaner_passes",
        "Cleaner passes, by kind (compaction in memory, combined cleaning into survivors).",
        [(&[("kind", "compaction")][..], t.compactions), (&[("kind", "combined")][..], t.combined_passes)],
    )?;
    s.counters(
        "shoal_cleaner_segments",
        "Segments the cleaner processed, by kind of pass.",
        [(&[("kind", "compaction")][..], t.segments_compacted), (&[("kind", "combined")][..], t.segments_cleaned)],
    )?;
    s.counter(
        "shoal_tombstones_written",
        "Tombstones appended by overwrites, removes and replays.",
        t.tombstones_written,
    )?;
    s.counter(
        "shoal_tombstones_elided",
        "Overwrites that appended no tombstone (the object they replaced was in the head with them).",
        t.tombstones_elided,
    )?;
    s.counter("shoal_cleaner_tombstone_scans", "Tombstone scans the cleaner ran.", t.tombstone_scans)?;
    s.counter("shoal_cleaner_relocated_bytes", "Bytes of live entries the cleaner relocated.", t.bytes_relocated)?;
    s.counter("shoal_cleaner_freed_bytes", "Seglet bytes the cleaner freed.", seglets(t.seglets_freed))?;
    s.counter("shoal_cleaner_busy_seconds", "Time the cleaner spent cleaning.", t.cleaning_ms as f64 / 1000.0)?;
    s.gauge(
        "shoal_cleaner_write_cost",
        "(bytes appended by clients + bytes relocated) / bytes appended by clients.",
        t.write_cost,
    )?;
    s.counter(
        "shoal_memory_returned_to_os_bytes",
        "Pool memory given back to the OS so far.",
        seglets(t.seglets_returned),
    )?;
    s.counter(
        "shoal_cleaner_heads_rolled",
        "Head segments the cleaner closed early because they were mostly dead and the log was above its target.",
        t.heads_rolled,
    )?;
    s.counters(
        "shoal_expired_objects",
        "Objects reclaimed because they expired, by who reclaimed them.",
        [
            (&[("by", "sweep")][..], t.expired_swept),
            (&[("by", "cleaner")][..], t.expired_dropped),
            (&[("by", "write")][..], t.expired_keys.saturating_sub(t.expired_swept + t.expired_dropped)),
        ],
    )?;
    s.counter("shoal_expiry_sweep_passes", "Passes of the expiry sweep.", t.sweep_passes)?;
    s.counter("shoal_expiry_sweep_segments_scanned", "Segments the expiry sweep scanned.", t.sweep_segments_scanned)?;
    s.counter("shoal_expiry_sweep_busy_seconds", "Time the expiry sweep ran.", t.sweep_ms as f64 / 1000.0)?;
    s.counter("shoal_evicted_objects", "Live objects evicted (cache mode).", t.evicted)?;
    s.counter("shoal_evicted_bytes", "Entry bytes of evicted objects (cache mode).", t.evicted_bytes)?;
    s.counter("shoal_eviction_passes", "Cleaner passes that evicted (cache mode).", t.eviction_passes)
}

/// Symmetric caching's figures (`sc.rs`; the same as INFO's `sc_*`).
fn symmetric_caching(s: &mut Scrape, sc: &crate::sc::Sc) -> Result {
    use std::sync::atomic::Ordering::Relaxed;
    let t = &sc.stats;
    s.gauge(
        "shoal_sc_membership_epoch",
        "Membership epoch of this server's symmetric-caching group.",
        t.membership.load(Relaxed),
    )?;
    s.gauge("shoal_sc_round", "Hot-set round installed in that membership.", t.round.load(Relaxed))?;
    s.gauge(
        "shoal_sc_hot_keys",
        "Keys of the installed hot set homed in this server's group.",
        t.hot_keys.load(Relaxed),
    )?;
    s.gauge("shoal_sc_home_keys", "Keys of the installed hot set homed here.", t.home_keys.load(Relaxed))?;
    s.gauge("shoal_sc_copies", "Copies held here of other members' hot keys.", t.copies.load(Relaxed))?;
    s.counters(
        "shoal_sc_reads",
        "Reads of other members' hot keys: answered from this server's copy (hit) or sent to the key's master (miss).",
        [(&[("result", "hit")][..], t.hits.load(Relaxed)), (&[("result", "miss")][..], t.misses.load(Relaxed))],
    )?;
    s.counters(
        "shoal_sc_invalidations",
        "Invalidations of hot keys sent (as their home) and received (as a member).",
        [
            (&[("direction", "sent")][..], t.invalidations_sent.load(Relaxed)),
            (&[("direction", "received")][..], t.invalidations_received.load(Relaxed)),
        ],
    )?;
    s.counters(
        "shoal_sc_updates",
        "Updates of hot keys sent (as their home) and received (as a member).",
        [
            (&[("direction", "sent")][..], t.updates_sent.load(Relaxed)),
            (&[("direction", "received")][..], t.updates_received.load(Relaxed)),
        ],
    )?;
    s.counter("shoal_sc_acks_received", "Acknowledgements of invalidations received.", t.acks_received.load(Relaxed))?;
    s.counter(
        "shoal_sc_writes_held",
        "Writes of hot keys whose replies waited for the members' acknowledgements or the barrier.",
        t.writes_held.load(Relaxed),
    )?;
    s.counter(
        "shoal_sc_frames_dropped",
        "Frames to members dropped (queue full or connection down).",
        t.frames_dropped.load(Relaxed),
    )?;
    s.counter("shoal_sc_installs", "Hot sets installed.", t.installs.load(Relaxed))
}

fn cluster(s: &mut Scrape, node: &ClusterNode) -> Result {
    let map = node.map();
    s.gauge("shoal_cluster_map_version", "Version of the cluster map this server holds.", map.version)?;
    s.gauge("shoal_cluster_replicas", "Replicas each master keeps of its log (R).", u64::from(map.replicas))?;
    s.gauge("shoal_lease_held", "1 while this server holds its master lease.", u64::from(node.lease.held()))?;
    s.gauge(
        "shoal_recovering",
        "1 while this server replays its own log at a restart.",
        u64::from(node.is_recovering()),
    )
}

fn replication(s: &mut Scrape, node: &ClusterNode) -> Result {
    let r = node.replicator.stats();
    s.counter("shoal_replication_rounds", "Replication rounds that carried new log bytes to backups.", r.rounds)?;
    s.gauge("shoal_replication_round_appends_mean", "Mean log appends carried per round.", r.round_appends_mean)?;
    s.gauge("shoal_replication_round_appends_max", "Most log appends carried by one round.", r.round_appends_max)?;
    s.gauge("shoal_replication_round_mean_bytes", "Mean new log bytes per round.", r.round_bytes_mean)?;
    s.gauge("shoal_replication_round_max_bytes", "Most new log bytes in one round.", r.round_bytes_max)?;
    s.counter(
        "shoal_replication_sent_bytes",
        "Segment bytes sent to backups, summed over replicas.",
        r.bytes_replicated,
    )?;
    s.gauge("shoal_replication_log_position_bytes", "Bytes appended to this master's log.", r.position)?;
    s.gauge("shoal_replication_durable_position_bytes", "Bytes of the log durable on R backups.", r.durable)?;
    s.gauge("shoal_replication_lag_bytes", "Log bytes appended and not yet durable.", r.durable_lag)?;
    s.gauge(
        "shoal_replication_segments_below_r",
        "Closed segments with fewer than R replicas now.",
        r.closed_segments_below_r,
    )?;
    s.gauge("shoal_replication_open_replicas", "Replicas open now.", r.open_replicas)?;
    s.counters(
        "shoal_replication_replicas",
        "Replica events: opened, confirmed closed, lost and re-opened elsewhere, refused.",
        [
            (&[("event", "opened")][..], r.replicas_opened),
            (&[("event", "closed")][..], r.replicas_closed),
            (&[("event", "reopened")][..], r.replicas_reopened),
            (&[("event", "refused")][..], r.refusals),
        ],
    )?;
    s.counter("shoal_replication_segments_freed", "Segments freed on their backups.", r.segments_freed)?;
    s.counter(
        "shoal_replication_segments_rereplicated",
        "Closed segments copied to new backups after a replica was lost.",
        r.segments_rereplicated,
    )?;
    s.counter("shoal_replication_rereplicated_bytes", "Segment bytes sent for those copies.", r.rereplication_bytes)?;
    s.counter("shoal_replication_epochs_raised", "Segment epochs raised after a replica was lost.", r.epochs_raised)?;
    s.counter("shoal_replication_floors_recorded", "Replica floors recorded at the coordinator.", r.floors_recorded)?;
    s.gauge(
        "shoal_replication_floors_waiting",
        "Segments whose new epoch's floor is not recorded yet.",
        r.floors_waiting,
    )
}

fn backup(s: &mut Scrape, node: &ClusterNode, ctx: &ServerContext) -> Result {
    let Some(b) = node.backup_stats() else { return Ok(()) };
    s.gauge("shoal_backup_buffers", "Segment buffers of the backup.", b.buffers_total as u64)?;
    s.gauge("shoal_backup_buffers_in_use", "Segment buffers holding a replica.", b.buffers_in_use as u64)?;
    s.gauge(
        "shoal_backup_awaiting_flush",
        "Closed replicas still in their buffers, waiting to be written to a file.",
        b.awaiting_flush as u64,
    )?;
    s.gauge("shoal_backup_segment_files", "Closed replicas in files.", b.segments_on_disk as u64)?;
    if let Some(dir) = &ctx.config.data_dir {
        s.gauge(
            "shoal_backup_disk_bytes",
            "Bytes of the backup's segment files.",
            dir_bytes(&dir.join("backup").join("segments")),
        )?;
    }
    s.counter("shoal_backup_received_bytes", "Segment bytes received from masters.", b.bytes_received)?;
    s.counters(
        "shoal_backup_segments",
        "Replica events on this backup: opened, closed, flushed to a file, freed.",
        [
            (&[("event", "opened")][..], b.segments_opened),
            (&[("event", "closed")][..], b.segments_closed),
            (&[("event", "flushed")][..], b.segments_flushed),
            (&[("event", "freed")][..], b.segments_freed),
        ],
    )?;
    s.counter("shoal_backup_refusals", "Replica opens refused (no free buffer, or the flush backlog).", b.refusals)?;
    s.gauge("shoal_backup_connections", "Replication connections open now.", b.connections_active)?;
    s.counter("shoal_backup_conventional_appends", "APPEND calls served (conventional mode).", b.conventional_appends)?;
    s.counter("shoal_backup_protocol_errors", "Replication connections closed for bad input.", b.protocol_errors)?;
    s.counter("shoal_backup_corrupt_replicas", "Closed replicas found corrupt (not served).", b.corrupt_replicas)
}

/// Bytes of the regular files directly in `dir` (0 if it cannot be read);
/// at most 1,000,000 entries are looked at.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.take(1_000_000).filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

fn recovery(s: &mut Scrape, node: &ClusterNode) -> Result {
    let p = node.recovery.lock().clone();
    s.gauge("shoal_restart_recovery_segments", "Segments this server's restart replayed of its own log.", p.segments)?;
    s.gauge("shoal_restart_recovery_bytes", "Bytes this server's restart replayed of its own log.", p.bytes)?;
    s.gauge("shoal_restart_recovery_objects", "Objects this server's restart replayed of its own log.", p.objects)?;
    s.gauge(
        "shoal_restart_recovery_seconds",
        "Time this server's restart recovery took (so far, if running).",
        p.elapsed_ms as f64 / 1000.0,
    )?;
    s.gauge(
        "shoal_restart_recovery_done",
        "1 once the restart recovery finished (or none was needed).",
        u64::from(p.done || p.logs.is_empty()),
    )?;
    // Crash-recovery partitions: summed, so that the series stay few
    // however many recoveries this server took part in.
    let parts = node.partitions.lock().clone();
    let done = parts.iter().filter(|p| p.phase == "done").count() as u64;
    s.gauges(
        "shoal_recovery_partitions",
        "Crash-recovery partitions this server replayed or is replaying, by state.",
        [(&[("state", "done")][..], done), (&[("state", "running")][..], parts.len() as u64 - done)],
    )?;
    let sum = |f: fn(&crate::cluster::PartitionProgress) -> u64| parts.iter().map(f).sum::<u64>();
    s.counter(
        "shoal_recovery_replayed_segments",
        "Segments crash-recovery partitions replayed here.",
        sum(|p| p.segments),
    )?;
    s.counter("shoal_recovery_replayed_bytes", "Bytes crash-recovery partitions replayed here.", sum(|p| p.bytes))?;
    s.counter(
        "shoal_recovery_replayed_objects",
        "Objects crash-recovery partitions replayed here.",
        sum(|p| p.objects),
    )?;
    let secs = |ms: u64| ms as f64 / 1000.0;
    s.counters(
        "shoal_recovery_phase_seconds",
        "Time crash-recovery partitions spent here per phase (finding replicas, replaying, making the result \
         durable), summed over partitions.",
        [
            (&[("phase", "find")][..], secs(sum(|p| p.find_ms))),
            (&[("phase", "replay")][..], secs(sum(|p| p.replay_ms))),
            (&[("phase", "durable")][..], secs(sum(|p| p.durable_ms))),
        ],
    )?;
    s.counter(
        "shoal_recovery_partition_seconds",
        "Time from the start of each crash-recovery partition here to its end (so far, if running), summed.",
        secs(sum(|p| p.total_ms)),
    )
}
