//! Symmetric caching's decision-making core, without I/O (Katsarakis,
//! *Symmetric Caching*, Ch. 3; `docs/symmetric-caching.md`).
//!
//! Servers form groups; per epoch a group agrees on one hot set, and every
//! member caches every hot key of the group whose home master is another
//! member. This crate holds the parts that decide, each fed events and
//! returning actions for its caller to carry out:
//!
//! * [`key::CachedKey`]: one hot key at one member in one epoch, the
//!   All-Peers protocol (eventual or strong consistency), with Shoal's
//!   change: a write takes effect when the key's home master has applied
//!   it to its log (durably), in timestamp order ([`home::HomeKey`]).
//! * [`group::GroupView`]: a member's membership epoch and hot-set
//!   rounds: reports to the leader, its publication, installation.
//! * [`retired::Retired`]: at a home, the hot keys of epochs it left that
//!   some member may still serve, whose writes wait for the barrier.
//! * [`sketch::SpaceSaving`]: the heavy hitters of a member's accesses.
//! * [`hotset::agree`]: one hot set from the members' reports.
//! * [`wire`]: the frames members exchange (reports, hot sets,
//!   invalidations, acknowledgements, updates, writes to the home).
//! * [`bloom::Bloom`]: the filter of a hot set that clients use to send
//!   hot reads to any member and cold keys straight home.
//!
//! Nothing here owns a socket, a clock or a thread: the server's driver
//! sends the messages, keeps time and stores the values.

pub mod bloom;
pub mod group;
pub mod home;
pub mod hotset;
pub mod key;
pub mod retired;
pub mod sketch;
pub mod wire;

use std::fmt;

/// A server's id within the cluster (never 0: [`Ts::ZERO`] uses 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A group's epoch: it changes with the hot set and with membership.
/// Messages of another epoch are dropped by their receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

/// A write's virtual timestamp: a version, then the id of the node that
/// ran the write (All-Peers, Fig. 3.4). Ordered by version, then node, so
/// two concurrent writes on different nodes never tie.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts {
    pub version: u64,
    pub node: NodeId,
}

impl Ts {
    /// Below every timestamp a node can make: a key nobody has written in
    /// this epoch.
    pub const ZERO: Ts = Ts { version: 0, node: NodeId(0) };

    /// The next timestamp `node` may use after having seen `self`.
    pub fn next(self, node: NodeId) -> Ts {
        Ts { version: self.version + 1, node }
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.version, self.node)
    }
}

/// The consistency of hot keys' writes (`--sc-consistency`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// The write is applied at the home master, then the update is sent
    /// to every member, which applies it if its timestamp is higher.
    Eventual,
    /// Linearizable: invalidate every member and collect their
    /// acknowledgements, then apply at the home master, then send the
    /// update; reads of an invalid key wait (or go to the home master).
    Strong,
}
