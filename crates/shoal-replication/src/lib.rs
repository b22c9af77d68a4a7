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
//! * [`dial`]: how this process connects to backups (the cluster
//!   handshake, when it has a secret).
//! * [`restore`]: finding a log among backups' replicas and fetching it
//!   (whole-cluster restart now; crash recovery later).

pub mod backup;
pub mod dial;
pub mod master;
pub mod restore;
pub mod wire;

/// The CPU priority (nice value) of recovery's bulk work: backups cutting
/// replicas for READ_PART and recovery masters replaying. Above 0, so that
/// on a busy machine the clients of live masters are served first and a
/// recovery takes the CPU they leave (RAMCloud's recovery had whole
/// machines to itself; here it shares two cores with everything else).
pub const RECOVERY_NICE: i32 = 19;

/// Runs `f` on a thread of its own named `name` at [`RECOVERY_NICE`]; the
/// result comes back through the returned channel (closed if `f`
/// panicked). A thread of its own, not a pooled one, because a thread's
/// priority can be lowered freely but raised back only with privileges.
pub fn spawn_recovery_work<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<tokio::sync::oneshot::Receiver<T>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        shoal_common::os::lower_this_thread_priority(RECOVERY_NICE);
        let _ = tx.send(f());
    })?;
    Ok(rx)
}
