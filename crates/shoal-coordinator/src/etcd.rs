//! The coordinator's state in etcd, and leadership among several
//! coordinators (`docs/coordinator.md`, "Standby coordinators").
//!
//! Two keys under a prefix (`--etcd-prefix`, one per cluster):
//! * `<prefix>/leader`: the leader's control address, attached to the
//!   leader's etcd lease. Whoever creates it leads; it disappears when
//!   that lease ends (the leader stopped renewing it, or resigned).
//! * `<prefix>/state`: the encoded [`ClusterState`](crate::ClusterState).
//!
//! [`Leadership::campaign`] waits until this process creates the leader
//! key. [`EtcdStore`] then writes the state only in a transaction that
//! compares both the state's `mod_revision` with the one this process
//! last read or wrote, and the leader key's `create_revision` with the one
//! it created: a coordinator that lost its lease, or whose state someone
//! else changed, can no longer write, whatever it still believes.
//!
//! While leading, a background task renews the lease every third of its
//! TTL. The leader counts its lease from when it *sent* the renewal that
//! etcd answered (etcd counts from when it received it, later), minus a
//! margin for clock drift ([`crate::lease::DRIFT_PER_MILLE`]); past that
//! instant it considers itself deposed ([`Fence::holds`] turns false, and
//! [`Leadership::lost`] completes), so it grants no master lease after
//! etcd can have let another coordinator take over.

use crate::lease::{DRIFT_PER_MILLE, MARGIN};
use crate::store::StateStore;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{info, warn};

/// Default TTL of a coordinator's etcd lease (`--etcd-lease-secs`): how
/// long a dead leader keeps its standbys waiting, at most.
pub const DEFAULT_LEASE_SECS: u64 = 2;
/// Default key prefix (`--etcd-prefix`).
pub const DEFAULT_PREFIX: &str = "/shoal/default";
/// Longest one etcd request may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest state etcd takes in one request by default (its
/// `--max-request-bytes`, 1.5 MiB), less room for the request's framing.
pub const MAX_STATE_BYTES: usize = 1_500_000;

/// Where and how the coordinators of one cluster meet in etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs of the etcd cluster (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Key prefix of this cluster, without a trailing `/`.
    pub prefix: String,
    /// TTL of each coordinator's lease, in seconds (etcd's unit).
    pub lease_secs: u64,
}

impl EtcdConfig {
    fn leader_key(&self) -> String {
        format!("{}/leader", self.prefix)
    }

    fn state_key(&self) -> String {
        format!("{}/state", self.prefix)
    }

    /// Connects to the endpoints (the client fails over among them).
    pub async fn connect(&self) -> Result<Client, etcd_client::Error> {
        let options = ConnectOptions::new().with_connect_timeout(REQUEST_TIMEOUT).with_timeout(REQUEST_TIMEOUT);
        Client::connect(&self.endpoints, Some(options)).await
    }
}

/// Whether this process may still act as the leader: cheap, and safe to
/// call from any thread.
#[derive(Clone, Debug)]
pub struct Fence {
    /// Until when this process surely holds its etcd lease (by its own
    /// clock, less the drift margin); `None` once it resigned or failed a
    /// compare-and-swap.
    until: Arc<Mutex<Option<Instant>>>,
    lost: watch::Sender<bool>,
}

impl Fence {
    fn new(until: Instant) -> Fence {
        Fence { until: Arc::new(Mutex::new(Some(until))), lost: watch::channel(false).0 }
    }

    /// True while this process is surely the leader.
    pub fn holds(&self) -> bool {
        self.until.lock().is_some_and(|u| Instant::now() < u)
    }

    /// Moves the end of the lease (a renewal answered).
    fn extend(&self, until: Instant) {
        let mut u = self.until.lock();
        if u.is_some() {
            *u = Some(until);
        }
    }

    /// Gives the leadership up for good.
    fn depose(&self) {
        *self.until.lock() = None;
        self.lost.send_replace(true);
    }
}

/// This process's leadership of the cluster's coordinators, from
/// [`campaign`](Self::campaign) until [`lost`](Self::lost) completes or
/// [`resign`](Self::resign) is called.
pub struct Leadership {
    client: Client,
    config: EtcdConfig,
    lease: i64,
    /// `create_revision` of the leader key this process created.
    revision: i64,
    fence: Fence,
    renewer: tokio::task::JoinHandle<()>,
    /// Another coordinator led while this one campaigned.
    took_over: bool,
}

impl Leadership {
    /// Waits until this process leads: creates the leader key (holding
    /// `me`, the control address) under a fresh lease if no one holds it,
    /// else waits for it to be deleted and tries again. Errors: etcd
    /// failed (the caller retries).
    pub async fn campaign(client: &Client, config: &EtcdConfig, me: &str) -> Result<Leadership, etcd_client::Error> {
        let mut client = client.clone();
        let key = config.leader_key();
        let ttl = Duration::from_secs(config.lease_secs);
        let mut said = None::<String>;
        let mut took_over = false;
        loop {
            let lease = client.lease_grant(config.lease_secs as i64, None).await?.id();
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), me, Some(PutOptions::new().with_lease(lease)))])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let resp = client.txn(txn).await?;
            let revision = resp.header().map_or(0, |h| h.revision());
            if resp.succeeded() {
                // The grant may have waited for etcd (a cluster forming):
                // count the lease from a renewal sent now.
                let sent = Instant::now();
                let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                match answers.message().await? {
                    Some(r) if r.ttl() > 0 && sent.elapsed() < ttl / 3 => {}
                    _ => {
                        warn!("won the election but could not renew the lease in time; campaigning again");
                        let _ = client.lease_revoke(lease).await;
                        continue;
                    }
                }
                let fence = Fence::new(sent + ttl - margin(ttl));
                let renewer = tokio::spawn(renew(client.clone(), lease, ttl, fence.clone(), (keeper, answers)));
                info!("elected leader in etcd ({key} at revision {revision}, lease {lease:x}, {}s)", config.lease_secs);
                return Ok(Leadership { client, config: config.clone(), lease, revision, fence, renewer, took_over });
            }
            // Someone leads: give the lease back, and wait for the key to go.
            let _ = client.lease_revoke(lease).await;
            let holder = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                _ => None,
            });
            took_over |= holder.is_some();
            if let Some(h) = &holder {
                if said.as_ref() != Some(h) {
                    info!("standing by: the leader is the coordinator at {h}");
                    said = holder.clone();
                }
            }
            let options = WatchOptions::new().with_start_revision(revision + 1);
            let (_watcher, mut events) = client.watch(key.as_str(), Some(options)).await?;
            while let Some(msg) = events.message().await? {
                if msg.events().iter().any(|e| e.event_type() == EventType::Delete) {
                    info!("the leader's key is gone; campaigning");
                    break;
                }
            }
        }
    }

    /// What the state store and the service check before acting.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Whether another coordinator led while this one campaigned: this one
    /// takes over a running cluster (whose servers need no restart grace)
    /// rather than starting a stopped one.
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// The leader key's `create_revision`: this leadership's term.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The store of the cluster's state, writable only while this
    /// leadership lasts.
    pub fn store(&self) -> EtcdStore {
        EtcdStore {
            client: self.client.clone(),
            state_key: self.config.state_key(),
            leader_key: self.config.leader_key(),
            leader_revision: self.revision,
            read: Mutex::new(None),
            fence: self.fence.clone(),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Completes when the leadership is lost: the lease could not be
    /// renewed in time, etcd said it ended, or a write found the state or
    /// the leader key changed.
    pub async fn lost(&self) {
        let mut rx = self.fence.lost.subscribe();
        let _ = rx.wait_for(|l| *l).await;
    }

    /// Gives the leadership up now (revokes the lease, deleting the leader
    /// key), so that a standby need not wait for the TTL.
    pub async fn resign(mut self) {
        self.fence.depose();
        self.renewer.abort();
        if let Err(e) = tokio::time::timeout(REQUEST_TIMEOUT, self.client.lease_revoke(self.lease)).await {
            warn!("could not revoke the etcd lease (standbys wait for its TTL): {e}");
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// What is taken off a lease's end: the clocks' drift over the TTL, and
/// scheduling.
fn margin(ttl: Duration) -> Duration {
    ttl * (2 * DRIFT_PER_MILLE) / 1000 + MARGIN
}

/// Renews `lease` every third of `ttl`, extending `fence` from the send
/// time of each answered renewal, until the lease is lost.
async fn renew(
    mut client: Client,
    lease: i64,
    ttl: Duration,
    fence: Fence,
    keep_alive: (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream),
) {
    let every = ttl / 3;
    let mut stream = Some(keep_alive);
    tokio::time::sleep(every).await;
    loop {
        if !fence.holds() {
            warn!("the etcd lease was not renewed in time; no longer the leader");
            return fence.depose();
        }
        if stream.is_none() {
            stream = tokio::time::timeout(every, client.lease_keep_alive(lease)).await.ok().and_then(|r| r.ok());
        }
        if let Some((keeper, answers)) = stream.as_mut() {
            let sent = Instant::now();
            let answered = tokio::time::timeout(every, async {
                keeper.keep_alive().await?;
                answers.message().await
            })
            .await;
            match answered {
                Ok(Ok(Some(r))) if r.ttl() > 0 => fence.extend(sent + ttl - margin(ttl)),
                Ok(Ok(Some(_))) => {
                    warn!("etcd says this coordinator's lease has ended; no longer the leader");
                    return fence.depose();
                }
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                    warn!("renewing the etcd lease failed; retrying");
                    stream = None;
                }
            }
        }
        tokio::time::sleep(every.saturating_sub(Duration::from_millis(1))).await;
    }
}

/// The cluster state in etcd, for the leader only (see the module
/// comment). `load` and `save` block on the runtime the store was made on:
/// call them from a blocking thread, as the service does.
pub struct EtcdStore {
    client: Client,
    state_key: String,
    leader_key: String,
    leader_revision: i64,
    /// The state key's `mod_revision` as last read or written (0: absent);
    /// `None` before the first `load`.
    read: Mutex<Option<i64>>,
    fence: Fence,
    runtime: tokio::runtime::Handle,
}

impl EtcdStore {
    fn run<T>(&self, what: &str, f: impl std::future::Future<Output = Result<T, etcd_client::Error>>) -> io::Result<T> {
        match self.runtime.block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, f).await }) {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(io::Error::other(format!("etcd: {what}: {e}"))),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("etcd: {what}: no answer in time"))),
        }
    }
}

impl StateStore for EtcdStore {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        let mut client = self.client.clone();
        let resp = self.run("reading the state", client.get(self.state_key.as_str(), None))?;
        let kv = resp.kvs().first();
        *self.read.lock() = Some(kv.map_or(0, |kv| kv.mod_revision()));
        Ok(kv.map(|kv| kv.value().to_vec()))
    }

    /// Errors also when this process is no longer the leader, or the state
    /// changed since it was last read or written here (this store is then
    /// deposed for good), or the state is larger than [`MAX_STATE_BYTES`].
    fn save(&self, state: &[u8]) -> io::Result<()> {
        let Some(read) = *self.read.lock() else {
            return Err(io::Error::other("the state store saves only after a load"));
        };
        if state.len() > MAX_STATE_BYTES {
            return Err(io::Error::other(format!(
                "the state ({} bytes) is larger than an etcd request may be ({MAX_STATE_BYTES})",
                state.len()
            )));
        }
        if !self.fence.holds() {
            return Err(io::Error::other("this coordinator is no longer the leader"));
        }
        let txn = Txn::new()
            .when([
                Compare::mod_revision(self.state_key.as_str(), CompareOp::Equal, read),
                Compare::create_revision(self.leader_key.as_str(), CompareOp::Equal, self.leader_revision),
            ])
            .and_then([TxnOp::put(self.state_key.as_str(), state, None)]);
        let mut client = self.client.clone();
        let resp = self.run("saving the state", client.txn(txn))?;
        if !resp.succeeded() {
            self.fence.depose();
            return Err(io::Error::other(
                "the state in etcd changed under this coordinator, or it is no longer the leader; stepping down",
            ));
        }
        *self.read.lock() = Some(resp.header().map_or(read, |h| h.revision()));
        Ok(())
    }
}
