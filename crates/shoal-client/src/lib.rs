//! Shoal's client library.
//!
//! Two clients with the same operations: [`Client`] (async, tokio; clone it
//! freely, every clone shares connections) and [`blocking::Client`] (plain
//! `std::net` with Shoal's own framing and no runtime, for threads that
//! send one request at a time and want the lowest latency; it spins briefly
//! and adaptively on the socket before blocking).
//!
//! Both route every request by (table id, key hash) through a [`TabletMap`]
//! (today one entry: the whole hash range on one server), keep one
//! connection per server and reuse it, pipeline (many requests in flight
//! per connection, responses matched by request id), split multi-ops per
//! server, and absorb `UNKNOWN_TABLET` (refresh the map through its
//! [`MapSource`], then resend) and `RETRY` for a bounded number of
//! attempts. Errors are one enum per operation family: [`ReadError`],
//! [`WriteError`] (write and remove), [`IncrementError`], [`TableError`]
//! (table management and enumeration), all wrapping [`ClientError`] for
//! the connection and the protocol.
//!
//! With [`ClientConfig::credentials`] set, every new connection first logs
//! in with an AUTH request; a refusal is [`ClientError::AuthFailed`]. With
//! [`ClientConfig::tls`] set, every connection speaks TLS ([`ClientTls`]),
//! in both clients.

pub mod blocking;
mod client;
pub mod cluster;
mod conn;
mod error;
mod locks;
pub mod names;
mod ops;
mod stream;
mod tablet;
mod tls;

pub use client::{Channel, Client, Reply};
pub use cluster::CoordinatorMap;
pub use conn::{ClientConfig, Connection, Credentials};
pub use error::{ClientError, IncrementError, LockError, ReadError, Rejected, StreamError, TableError, WriteError};
pub use locks::{ChunkLock, LockKeeper, DEFAULT_LEASE, MAX_BACKOFF};
pub use ops::{Consumed, Described, ItemResults, Object, Page, Produced, ResponseFrame, Stats, Ttl, Versioned};
pub use stream::{
    decode_offsets, encode_offsets, Ack, AckResult, Consumer, GroupConsumer, GroupConsumerConfig, GroupRecord,
    Producer, ProducerConfig, Routing,
};
pub use tablet::{ChunkSpan, MapSource, StaticMap, Tablet, TabletMap};
pub use tls::ClientTls;

pub use shoal_proto::{
    key_hash, streamlet_key, ChunkId, ErrorStatus, GroupClaim, KeyHash, LockMode, ReadItem, RejectRules, RemoveItem,
    Request, Response, StatValue, StreamGroup, StreamOffset, StreamShape, Subscriber, TableId, UnixMillis, Version,
    WriteItem, MAX_CONSUMER_NAME, MAX_DESCRIBE_GROUPS, MAX_PRODUCE_RECORDS,
};
