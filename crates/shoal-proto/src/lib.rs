//! Shoal's native wire format: the one place that reads and writes it.
//!
//! `docs/wire-format.md` is the specification; this crate mirrors it. A
//! connection carries *frames* in both directions. Every frame is a 16-byte
//! header (magic, protocol version, opcode, flags, request id, body length)
//! followed by the body. A request's body holds the operation's arguments;
//! a response's body starts with a one-byte status, then the status's
//! detail, then (status OK only) the operation's result. Responses carry
//! their request's id, so a client may keep many requests in flight on one
//! connection (pipelining) and match the answers; multi-read, multi-write
//! and multi-remove batch many objects in one frame, each with its own
//! status.
//!
//! Decoding follows mini-redis, in two passes. [`check_frame`] looks at
//! the bytes received so far without allocating and says whether a whole
//! frame is there, checking the body length against the receiver's limit
//! before anything trusts it. Then [`Request::decode`] or
//! [`decode_response`] parse the body into typed messages that borrow
//! their keys and values from the buffer; they reject trailing bytes, and
//! every count and length inside a body is checked against the bytes that
//! remain. Nothing here panics on any input.
//!
//! All integers are little-endian, read and written at named offsets;
//! fixed sizes are pinned by compile-time asserts. The key hash that routes
//! requests ([`shoal_common::key_hash`]) is part of the protocol too.

mod frame;
mod request;
mod response;
mod status;
mod stream;
mod wire;

pub use frame::{check_frame, encode_header, Header, FLAG_RESPONSE, HEADER_LEN, MAGIC, PROTOCOL_VERSION};
pub use frame::{FrameError, DEFAULT_MAX_BODY_BYTES};
pub use request::{LockMode, Opcode, ReadItem, RejectRules, RemoveItem, Request, WriteItem, MAX_CHUNK_CREATE};
pub use response::{decode_response, encode_error, Object, Response, Stat, StatValue};
pub use status::{ErrorStatus, StatusCode};
pub use stream::{GroupClaim, StreamGroup, Subscriber, MAX_CONSUMER_NAME, MAX_DESCRIBE_GROUPS, MAX_PRODUCE_RECORDS};
pub use wire::DecodeError;

pub use shoal_common::{
    key_hash, streamlet_key, ChunkId, KeyHash, StreamOffset, StreamShape, TableId, UnixMillis, Version,
};
