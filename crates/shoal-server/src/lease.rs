//! A master's lease on its tablets, the server's side (`docs/recovery.md`,
//! "Leases"; the coordinator's side is `shoal_coordinator::lease`).
//!
//! Contract for the front ends: a reply that carries data read from this
//! server's store goes out only if [`Lease::held`] was true *after* the
//! read (and the data read is durable, see `ServerContext::replication_target`).
//! The coordinator lets nobody else serve these tablets before the lease
//! has surely ended, so a read checked this way happened while this server
//! was still the only one serving its keys.
//!
//! The lease is counted from when the renewal was *sent*, on
//! `CLOCK_BOOTTIME` (it keeps counting through a suspend or a SIGSTOP), and
//! ends [`SAFETY`] early.

use crate::cluster::ClusterNode;
use shoal_cluster::{ControlRequest, ControlResponse};
use shoal_common::os::boot_time_ns;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The lease ends this much before the coordinator's view of it.
pub const SAFETY: Duration = Duration::from_millis(5);
/// How often a server without a lease asks for one.
const FIRST_ASK: Duration = Duration::from_millis(100);
/// How often a server whose head is not yet reported looks again (it
/// asks for its first lease as soon as it is).
const HEAD_POLL: Duration = Duration::from_millis(2);
/// Renewals per lease length.
const RENEWALS_PER_LEASE: u32 = 4;

/// Until when this server may serve its tablets.
#[derive(Debug, Default)]
pub struct Lease {
    /// `CLOCK_BOOTTIME` nanoseconds; 0: never held.
    expires_ns: AtomicU64,
}

impl Lease {
    /// Whether the lease is held now. One vDSO clock read.
    pub fn held(&self) -> bool {
        boot_time_ns() < self.expires_ns.load(Ordering::Acquire)
    }

    /// Records a lease of `granted`, asked for at `sent_ns`. Never shortens it.
    pub fn extend(&self, sent_ns: u64, granted: Duration) {
        let until = sent_ns + (granted.saturating_sub(SAFETY)).as_nanos() as u64;
        self.expires_ns.fetch_max(until, Ordering::AcqRel);
    }

    /// Ends the lease now (the server was declared dead or is stopping).
    pub fn revoke(&self) {
        self.expires_ns.store(0, Ordering::Release);
    }
}

/// Runs [`keep_renewed`] on a thread of its own (with its own runtime), so
/// that no other work of the server's runtime can delay a renewal past the
/// lease's end. If the thread cannot start, on the current runtime.
pub fn spawn_renewer(node: Arc<ClusterNode>, shutdown: tokio::sync::watch::Receiver<bool>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let (n, s) = (node.clone(), shutdown.clone());
    let started = runtime.map_err(|e| e.to_string()).and_then(|rt| {
        std::thread::Builder::new()
            .name("shoal-lease".into())
            .spawn(move || rt.block_on(keep_renewed(n, s)))
            .map_err(|e| e.to_string())
    });
    if let Err(e) = started {
        warn!("cannot start the lease thread ({e}); renewing on the server's runtime");
        tokio::spawn(keep_renewed(node, shutdown));
    }
}

/// Keeps `node`'s lease renewed until shutdown or until the server is
/// declared dead: a renewal every quarter of the granted length, one every
/// [`FIRST_ASK`] while none is held. A refusal or an unreachable
/// coordinator leaves the lease to run out; the server then stops serving
/// its tablets until a renewal succeeds.
pub async fn keep_renewed(node: Arc<ClusterNode>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut granted: Option<Duration> = None;
    let mut client = node.control_client().with_timeout(Duration::from_secs(1));
    let req = ControlRequest::RenewLease { server: node.id, log: node.log };
    let mut complaining = false;
    loop {
        if node.is_dead() {
            node.lease.revoke();
            return;
        }
        // No lease for a log with no head on a backup yet (`report_head`):
        // not asked for, rather than refused.
        if !node.may_serve() {
            tokio::select! {
                _ = tokio::time::sleep(HEAD_POLL) => continue,
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
        let sent = boot_time_ns();
        let answer = tokio::select! {
            a = client.call(&req) => a,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match answer {
            Ok(ControlResponse::Lease { ms }) => {
                let d = Duration::from_millis(ms);
                node.lease.extend(sent, d);
                if granted.is_none() || complaining {
                    info!("holding a master lease of {ms} ms, renewed every {} ms", ms / RENEWALS_PER_LEASE as u64);
                }
                granted = Some(d);
                complaining = false;
                // A slow coordinator must not make the next call's timeout
                // outlast the lease.
                client = client.with_timeout((d / 2).max(Duration::from_millis(50)));
            }
            Ok(other) => {
                if !complaining {
                    warn!("the coordinator refused to renew this server's lease: {other:?}");
                }
                complaining = true;
            }
            Err(e) => {
                if !complaining {
                    warn!("cannot renew this server's lease: {e}; its tablets go unserved when it ends");
                }
                complaining = true;
            }
        }
        let pause = match granted {
            Some(d) if node.lease.held() => d / RENEWALS_PER_LEASE,
            _ => FIRST_ASK,
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_held_from_its_renewal_until_its_length_less_the_safety() {
        let l = Lease::default();
        assert!(!l.held());
        let now = boot_time_ns();
        l.extend(now, Duration::from_secs(60));
        assert!(l.held());
        // Never shortened by an older renewal.
        l.extend(now - 120_000_000_000, Duration::from_secs(60));
        assert!(l.held());
        l.revoke();
        assert!(!l.held());
        // A renewal sent long enough ago has already ended.
        l.extend(boot_time_ns() - 2_000_000_000, Duration::from_secs(2));
        assert!(!l.held());
    }
}
