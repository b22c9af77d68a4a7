//! Replication of masters' logs to backups, Tailwind's way over TCP
//! (`docs/replication.md`).
//!
//! * [`wire`]: the replication protocol's frames, both directions.
//! * [`backup`]: the backup service every server runs: pre-zeroed segment
//!   buffers that stream bytes land in at their final offset, files for
//!   closed segments, admission control, and reading replicas back.
//! * [`master`]: the master's side: a [`shoal_engine::LogObserver`] that
//!   streams every segment to R backups and tells writers when their bytes
//!   are durable (group commit, pipelined rounds).
//! * [`restore`]: finding a log among backups' replicas and fetching it
//!   (whole-cluster restart now; crash recovery later).

pub mod backup;
pub mod master;
pub mod restore;
pub mod wire;
