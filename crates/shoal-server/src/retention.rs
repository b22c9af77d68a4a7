//! Stream retention (`docs/streams.md`, "Retention"): a task that, every
//! [`PERIOD`], removes the oldest groups of each streamlet beyond
//! `--stream-retention-bytes` or older than `--stream-retention-ms`.
//!
//! For each streamlet due, in this order:
//! 1. the streamlet's trim point is written to the store
//!    ([`Store::mark_stream_trimmed`]: an object of the stream's table,
//!    replicated as any write);
//! 2. the task waits until the log is durable past it (in a cluster);
//! 3. the groups below it leave the index ([`Store::trim_stream`]): their
//!    batches are dead, and the cleaner frees the log segments that held
//!    only dead data, in memory and then on the backups.
//!
//! Step 2 is what makes a removal final: a log segment of a removed group
//! may be cleaned (and its replicas freed) only after the point that
//! removes it is durable, so no recovery can bring back part of a group
//! without the point that removes all of it. A crash between 1 and 3
//! leaves the groups in the index; the replay of a recovery or a restart
//! applies the point ([`Store::finish_replay`]).
//!
//! Only streamlets this server serves are looked at: one it is recovering
//! is left alone until the recovery hands it over.
//!
//! [`Store::mark_stream_trimmed`]: shoal_engine::Store::mark_stream_trimmed
//! [`Store::trim_stream`]: shoal_engine::Store::trim_stream
//! [`Store::finish_replay`]: shoal_engine::Store::finish_replay

use crate::context::{ServerContext, ServerStats};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How often the task looks for groups to remove.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Runs until the server shuts down; returns at once without a limit.
pub async fn run(ctx: Arc<ServerContext>) {
    let limits = ctx.config.stream_retention();
    if limits.is_none() {
        return;
    }
    let mut stop = ctx.shutdown_signal();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if !ctx.lease_held() {
            // A server that may have lost its tablets writes nothing.
            continue;
        }
        for (table, streamlet, keep) in ctx.store.stream_retention_due(limits) {
            if !serves(&ctx, table, streamlet) {
                // A streamlet this server is recovering (its groups are
                // being replayed, and the dead master's trim point may not
                // be yet) is its dead master's until the recovery hands it
                // over: a point written here now would outrank that one.
                continue;
            }
            if let Err(e) = ctx.store.mark_stream_trimmed(table, streamlet, keep) {
                warn!("stream retention: cannot write the trim point of stream {table} streamlet {streamlet}: {e}");
                continue;
            }
            if let Some(pos) = ctx.replication_target() {
                if !ctx.wait_durable(pos).await {
                    return;
                }
            }
            match ctx.store.trim_stream(table, streamlet, keep) {
                Ok(n) => {
                    ServerStats::add(&ctx.stats.stream_groups_trimmed, n as u64);
                    info!(
                        "stream retention: removed {n} group(s) of stream {table} streamlet {streamlet} below {keep}"
                    );
                }
                Err(e) => warn!("stream retention: stream {table} streamlet {streamlet}: {e}"),
            }
        }
    }
}

/// Whether this server serves `streamlet` of stream `table` now (always,
/// outside a cluster).
fn serves(ctx: &ServerContext, table: shoal_common::TableId, streamlet: u32) -> bool {
    ctx.cluster.as_ref().is_none_or(|node| {
        let hash = shoal_common::key_hash(table, &shoal_common::streamlet_key(streamlet));
        matches!(node.route(table, hash), crate::cluster::Route::Local)
    })
}
