//! What every cluster member agrees on, and how they ask the coordinator
//! for it.
//!
//! * [`map`]: the cluster map — servers, tables, tablets — that the
//!   coordinator owns and hands out, versioned so that a holder can tell a
//!   newer one.
//! * [`control`]: the control protocol (`docs/coordinator.md`): length-framed
//!   JSON requests and responses between the coordinator and servers,
//!   clients and the command line. It is off the data path; the native
//!   protocol (`shoal-proto`) carries reads and writes.
//! * [`auth`]: the cluster handshake that opens every internal connection
//!   (control and replication) when the cluster has a secret.
//! * [`rebalance`]: plans of tablet moves that even the servers' memory
//!   or empty one server (`shoal rebalance`, `shoal drain`), without I/O.
//! * [`tls`]: mutual TLS on the same connections, when the cluster has a
//!   CA for them (`--internal-tls-*`); the handshake then runs inside it.

pub mod auth;
pub mod control;
pub mod map;
pub mod rebalance;
pub mod tls;

pub use control::{
    ControlAuth, ControlClient, ControlError, ControlErrorCode, ControlRequest, ControlResponse, CoordinatorAddrs,
};
pub use map::{
    find_chunk_range, split_hash_space, ChunkMigration, ChunkRange, ChunkSpan, ClusterMap, FencedLog, HeadFloor,
    Migration, OwnedPiece, OwnedSince, Partition, Recovery, ReplicaFloor, ServerId, ServerInfo, ServerState, TableInfo,
    TabletInfo,
};
