//! `shoal local`'s view of crash recoveries: while the cluster runs, it
//! polls the coordinator's statistics (the `stats` control request) and
//! shows each recovery's progress on stdout, a bar on a terminal and plain
//! lines otherwise ([`crate::progress`]).
//!
//! The coordinator plans a recovery as partitions of the dead master's
//! tablets (pieces of them), one partition per recovery master, and marks
//! a partition done when its master reports it replayed and durable
//! (`docs/recovery.md`). That is the progress it knows, and what is shown:
//! tablet pieces of finished partitions out of all of them, and partitions
//! done. Replay inside a partition is not reported to the coordinator, so
//! the bar moves in steps, one per finished partition.

use crate::progress::{Progress, Stream, Task, Unit};
use serde_json::Value;
use shoal_cluster::control::call_blocking_any;
use shoal_cluster::{ControlAuth, ControlRequest, ControlResponse, CoordinatorAddrs};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How often the coordinator is asked.
const POLL: Duration = Duration::from_millis(500);
/// Longest one question to the coordinator may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Watches the recoveries of the cluster of one coordinator.
pub struct RecoveryWatch {
    coordinator: CoordinatorAddrs,
    /// How to reach it (internal TLS when the cluster uses it).
    auth: ControlAuth,
    progress: Progress,
    /// The recoveries being shown, by id.
    tasks: BTreeMap<u64, Task>,
    /// Finished recoveries already reported.
    reported: BTreeSet<u64>,
    last_poll: Option<Instant>,
}

impl RecoveryWatch {
    pub fn new(coordinator: CoordinatorAddrs, auth: ControlAuth) -> RecoveryWatch {
        RecoveryWatch {
            coordinator,
            auth,
            progress: Progress::new(Stream::Stdout),
            tasks: BTreeMap::new(),
            reported: BTreeSet::new(),
            last_poll: None,
        }
    }

    /// Where other output should go through while bars may be drawn.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Asks the coordinator (at most every [`POLL`]; call it often) and
    /// updates what is shown. A coordinator that does not answer is asked
    /// again at the next poll.
    pub fn poll(&mut self) {
        if self.last_poll.is_some_and(|t| t.elapsed() < POLL) {
            return;
        }
        self.last_poll = Some(Instant::now());
        let stats = match call_blocking_any(&self.coordinator, &self.auth, &ControlRequest::Stats, TIMEOUT) {
            Ok(ControlResponse::Stats { stats }) => stats,
            _ => return,
        };
        let running = running(&stats);
        for r in &running {
            let task = self.tasks.entry(r.id).or_insert_with(|| {
                self.progress.println(&format!(
                    "server {} died: recovery {} replays its {} tablet pieces on {} recovery masters{}",
                    r.dead,
                    r.id,
                    r.tablets,
                    r.partitions,
                    r.detection_ms.map_or(String::new(), |ms| format!(" (detected in {ms} ms)"))
                ));
                self.progress.task(
                    format!("recovery {} of server {}", r.id, r.dead),
                    Some(r.tablets),
                    Unit::Count("tablets"),
                )
            });
            task.set_total(r.tablets);
            task.set_position(r.tablets_done);
            task.set_message(r.message());
        }
        let ended: Vec<u64> = self.tasks.keys().copied().filter(|id| !running.iter().any(|r| r.id == *id)).collect();
        for id in ended {
            let task = self.tasks.remove(&id).expect("listed above");
            let summary = finished(&stats, id).unwrap_or_else(|| "finished".to_string());
            task.finish(summary);
            self.reported.insert(id);
        }
        // Recoveries that ran and ended between two polls. The coordinator
        // is this cluster's own process: everything it lists happened
        // while this watch ran.
        for (id, dead) in finished_ids(&stats) {
            if self.reported.insert(id) && !self.tasks.contains_key(&id) {
                let summary = finished(&stats, id).unwrap_or_else(|| "finished".to_string());
                self.progress.println(&format!("server {dead} died: recovery {id} {summary}"));
            }
        }
    }
}

/// One running recovery, as the coordinator's statistics describe it.
#[derive(Debug, PartialEq, Eq)]
struct Running {
    id: u64,
    dead: u64,
    partitions: u64,
    partitions_done: u64,
    /// Tablet pieces of all partitions, and of the finished ones.
    tablets: u64,
    tablets_done: u64,
    elapsed_ms: u64,
    detection_ms: Option<u64>,
}

impl Running {
    fn message(&self) -> String {
        let elapsed = self.elapsed_ms as f64 / 1000.0;
        if self.partitions == 0 {
            return format!("waiting for a live server to recover onto, {elapsed:.1} s");
        }
        format!("{}/{} partitions replayed, {elapsed:.1} s", self.partitions_done, self.partitions)
    }
}

/// The recoveries in progress in the coordinator's `stats` answer.
fn running(stats: &Value) -> Vec<Running> {
    let Some(list) = stats["recoveries"].as_array() else { return Vec::new() };
    list.iter()
        .filter_map(|r| {
            let parts = r["partitions"].as_array().map(Vec::as_slice).unwrap_or_default();
            let tablets = |done_only: bool| {
                parts
                    .iter()
                    .filter(|p| !done_only || p["done"].as_bool() == Some(true))
                    .map(|p| p["tablets"].as_u64().unwrap_or(0))
                    .sum()
            };
            Some(Running {
                id: r["id"].as_u64()?,
                dead: r["dead"].as_u64().unwrap_or(0),
                partitions: parts.len() as u64,
                partitions_done: parts.iter().filter(|p| p["done"].as_bool() == Some(true)).count() as u64,
                tablets: tablets(false),
                tablets_done: tablets(true),
                elapsed_ms: r["elapsed_ms"].as_u64().unwrap_or(0),
                detection_ms: r["detection_ms"].as_u64(),
            })
        })
        .collect()
}

/// The ids of the finished recoveries the coordinator lists, with their
/// dead servers.
fn finished_ids(stats: &Value) -> Vec<(u64, u64)> {
    let Some(list) = stats["finished_recoveries"].as_array() else { return Vec::new() };
    list.iter().filter_map(|r| Some((r["id"].as_u64()?, r["dead"].as_u64().unwrap_or(0)))).collect()
}

/// The summary of finished recovery `id`, if the coordinator still lists it.
fn finished(stats: &Value, id: u64) -> Option<String> {
    let list = stats["finished_recoveries"].as_array()?;
    let r = list.iter().find(|r| r["id"].as_u64() == Some(id))?;
    let mut s = format!("recovered in {} ms", r["total_ms"].as_u64()?);
    if let (Some(objects), Some(bytes)) = (r["objects"].as_u64(), r["bytes"].as_u64()) {
        s += &format!(": {objects} objects, {}", indicatif::HumanBytes(bytes));
    }
    if let Some(p) = r["partitions"].as_u64() {
        s += &format!(", {p} partition{}", if p == 1 { "" } else { "s" });
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn running_counts_tablets_of_finished_partitions() {
        let stats = json!({
            "recoveries": [{
                "id": 7, "dead": 2, "elapsed_ms": 1500, "detection_ms": 300,
                "partitions": [
                    {"master": 1, "tablets": 3, "done": true},
                    {"master": 3, "tablets": 2, "done": false},
                    {"master": 4, "tablets": 2, "done": false},
                ],
            }],
        });
        let r = running(&stats);
        assert_eq!(
            r,
            [Running {
                id: 7,
                dead: 2,
                partitions: 3,
                partitions_done: 1,
                tablets: 7,
                tablets_done: 3,
                elapsed_ms: 1500,
                detection_ms: Some(300),
            }]
        );
        assert_eq!(r[0].message(), "1/3 partitions replayed, 1.5 s");
        assert!(running(&json!({"recoveries": []})).is_empty());
        assert!(running(&json!({})).is_empty());
    }

    #[test]
    fn a_recovery_without_partitions_waits() {
        let r = &running(&json!({"recoveries": [{"id": 1, "dead": 4, "partitions": []}]}))[0];
        assert_eq!((r.tablets, r.partitions), (0, 0));
        assert!(r.message().starts_with("waiting for a live server"));
    }

    #[test]
    fn finished_summarises_the_coordinator_record() {
        let stats = json!({"finished_recoveries": [
            {"id": 7, "total_ms": 2100, "objects": 1000, "bytes": 2048, "partitions": 3},
            {"id": 8, "total_ms": 900, "objects": null, "bytes": null, "partitions": 1},
        ]});
        assert_eq!(finished(&stats, 7).unwrap(), "recovered in 2100 ms: 1000 objects, 2.00 KiB, 3 partitions");
        assert_eq!(finished(&stats, 8).unwrap(), "recovered in 900 ms, 1 partition");
        assert_eq!(finished(&stats, 9), None);
        assert_eq!(finished_ids(&json!({"finished_recoveries": [{"id": 7, "dead": 2}]})), [(7, 2)]);
    }
}
