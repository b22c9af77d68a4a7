//! The frames members of a group exchange (`docs/symmetric-caching.md`,
//! "Wire format"): the one module that reads and writes them.
//!
//! Every frame is a 24-byte header and a body, little-endian at fixed
//! offsets:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | kind ([`Kind`]) |
//! | 1 | 3 | reserved, 0 |
//! | 4 | 4 | body length, at most [`MAX_BODY`] |
//! | 8 | 8 | membership epoch ([`EpochId::membership`]) |
//! | 16 | 8 | round ([`EpochId::round`]) |
//!
//! Bodies (a key is a table id, u64, then a u32 length and the bytes; at
//! most [`MAX_KEY`] bytes):
//!
//! * REPORT (1): u32 count, then per entry a key and a u64 count.
//! * HOT_SET (2): u8 consistency (0 eventual, 1 strong), u32 count, keys.
//! * INV (3), ACK (4): u64 version, u32 node (the timestamp), a key.
//! * UPDATE (5): timestamp, a key, a value.
//! * PERSIST (6): u64 write id, u8 has-timestamp, timestamp (zero when
//!   absent), a key, u32 operation length and the operation's bytes (the
//!   server's encoding of the write, at most [`MAX_VALUE`] + 64 bytes).
//! * PERSISTED (7): u64 write id, u8 outcome (1 applied, 0 refused),
//!   timestamp (applied: the write's; refused: the home's highest), a
//!   key, a value (refused: absent).
//! * INSTALLED (8): empty; the sender has installed the header's epoch
//!   and dropped every older cache ([`crate::retired`]).
//! * LEASE (9), GRANT (10): u64 sequence number. A member asks a home for
//!   a lease on its copies of the home's keys, and the home grants it: the
//!   member serves those copies only while the lease it counts from its
//!   request holds (any epoch of the membership).
//!
//! A value is a u8 flag (0 absent, 1 present), then if present the
//! object's u64 version, a u32 length and at most [`MAX_VALUE`] bytes.
//!
//! The receiver checks the header's length against [`MAX_BODY`] before it
//! reads the body, and [`decode`] checks every inner length against what
//! is left and against its own limit: no input panics or allocates beyond
//! the body it was given.

use crate::group::EpochId;
use crate::{Consistency, Epoch, NodeId, Ts};

/// Bytes of a frame header.
pub const HEADER_LEN: usize = 24;
/// The longest body either side sends or accepts: a hot set of 100,000
/// keys of 100 bytes fits.
pub const MAX_BODY: usize = 32 << 20;
/// The longest key.
pub const MAX_KEY: usize = 64 * 1024;
/// The longest value a member caches or carries in an update; objects
/// above it are not cached (reads of them go to their home).
pub const MAX_VALUE: usize = 1 << 20;
/// Most entries in a REPORT or HOT_SET.
pub const MAX_KEYS: usize = 1 << 20;

const KIND_AT: usize = 0;
const BODY_LEN_AT: usize = 4;
const MEMBERSHIP_AT: usize = 8;
const ROUND_AT: usize = 16;
const _: () = assert!(ROUND_AT + 8 == HEADER_LEN);

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Report = 1,
    HotSet = 2,
    Inv = 3,
    Ack = 4,
    Update = 5,
    Persist = 6,
    Persisted = 7,
    Installed = 8,
    Lease = 9,
    Grant = 10,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Report,
            2 => Kind::HotSet,
            3 => Kind::Inv,
            4 => Kind::Ack,
            5 => Kind::Update,
            6 => Kind::Persist,
            7 => Kind::Persisted,
            8 => Kind::Installed,
            9 => Kind::Lease,
            10 => Kind::Grant,
            _ => return None,
        })
    }
}

/// A key of a table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub table: u64,
    pub key: Vec<u8>,
}

/// A cached value: the object (its version and bytes) or its absence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Absent,
    Present { version: u64, bytes: Vec<u8> },
}

/// One frame's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Report { entries: Vec<(Key, u64)> },
    HotSet { consistency: Consistency, keys: Vec<Key> },
    Inv { ts: Ts, key: Key },
    Ack { ts: Ts, key: Key },
    Update { ts: Ts, key: Key, value: Value },
    Persist { write: u64, ts: Option<Ts>, key: Key, op: Vec<u8> },
    Persisted { write: u64, applied: bool, ts: Ts, key: Key, value: Value },
    Installed,
    Lease { seq: u64 },
    Grant { seq: u64 },
}

/// Why bytes are not a frame. The connection that sent them is closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// A kind this code does not know.
    UnknownKind(u8),
    /// The header declares a body over [`MAX_BODY`].
    BodyTooLong(u32),
    /// The body ends inside a field.
    Truncated,
    /// Bytes after the last field.
    TrailingBytes,
    /// A key, value, operation or count over its limit, or a flag that is
    /// neither 0 nor 1.
    Invalid(&'static str),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::UnknownKind(k) => write!(f, "unknown symmetric-caching frame kind {k}"),
            WireError::BodyTooLong(n) => write!(f, "symmetric-caching frame body of {n} bytes is over the limit"),
            WireError::Truncated => f.write_str("symmetric-caching frame truncated"),
            WireError::TrailingBytes => f.write_str("symmetric-caching frame has trailing bytes"),
            WireError::Invalid(what) => write!(f, "symmetric-caching frame: {what}"),
        }
    }
}

impl std::error::Error for WireError {}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub body_len: usize,
    pub epoch: EpochId,
}

impl Header {
    /// Reads a header; errors: an unknown kind or a body over [`MAX_BODY`].
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, WireError> {
        let kind = Kind::from_u8(b[KIND_AT]).ok_or(WireError::UnknownKind(b[KIND_AT]))?;
        let len = u32::from_le_bytes(b[BODY_LEN_AT..BODY_LEN_AT + 4].try_into().expect("4 bytes"));
        if len as usize > MAX_BODY {
            return Err(WireError::BodyTooLong(len));
        }
        let membership = u64::from_le_bytes(b[MEMBERSHIP_AT..MEMBERSHIP_AT + 8].try_into().expect("8 bytes"));
        let round = u64::from_le_bytes(b[ROUND_AT..ROUND_AT + 8].try_into().expect("8 bytes"));
        Ok(Header { kind, body_len: len as usize, epoch: EpochId { membership, round: Epoch(round) } })
    }
}

impl Frame {
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Report { .. } => Kind::Report,
            Frame::HotSet { .. } => Kind::HotSet,
            Frame::Inv { .. } => Kind::Inv,
            Frame::Ack { .. } => Kind::Ack,
            Frame::Update { .. } => Kind::Update,
            Frame::Persist { .. } => Kind::Persist,
            Frame::Persisted { .. } => Kind::Persisted,
            Frame::Installed => Kind::Installed,
            Frame::Lease { .. } => Kind::Lease,
            Frame::Grant { .. } => Kind::Grant,
        }
    }

    /// Appends the frame, header and body, to `out`. Errors (nothing
    /// appended): a field over its limit, or a body over [`MAX_BODY`].
    pub fn encode(&self, epoch: EpochId, out: &mut Vec<u8>) -> Result<(), WireError> {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        let body = self.encode_body(out);
        let len = out.len() - start - HEADER_LEN;
        let fits = if len > MAX_BODY { Err(WireError::Invalid("body too long")) } else { Ok(()) };
        if let Err(e) = body.and(fits) {
            out.truncate(start);
            return Err(e);
        }
        let h = &mut out[start..start + HEADER_LEN];
        h[KIND_AT] = self.kind() as u8;
        h[BODY_LEN_AT..BODY_LEN_AT + 4].copy_from_slice(&(len as u32).to_le_bytes());
        h[MEMBERSHIP_AT..MEMBERSHIP_AT + 8].copy_from_slice(&epoch.membership.to_le_bytes());
        h[ROUND_AT..ROUND_AT + 8].copy_from_slice(&epoch.round.0.to_le_bytes());
        Ok(())
    }

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        match self {
            Frame::Report { entries } => {
                put_count(entries.len(), out)?;
                for (key, count) in entries {
                    put_key(key, out)?;
                    out.extend_from_slice(&count.to_le_bytes());
                }
            }
            Frame::HotSet { consistency, keys } => {
                out.push(match consistency {
                    Consistency::Eventual => 0,
                    Consistency::Strong => 1,
                });
                put_count(keys.len(), out)?;
                for key in keys {
                    put_key(key, out)?;
                }
            }
            Frame::Inv { ts, key } | Frame::Ack { ts, key } => {
                put_ts(*ts, out);
                put_key(key, out)?;
            }
            Frame::Update { ts, key, value } => {
                put_ts(*ts, out);
                put_key(key, out)?;
                put_value(value, out)?;
            }
            Frame::Persist { write, ts, key, op } => {
                out.extend_from_slice(&write.to_le_bytes());
                out.push(u8::from(ts.is_some()));
                put_ts(ts.unwrap_or(Ts::ZERO), out);
                put_key(key, out)?;
                if op.len() > MAX_OP {
                    return Err(WireError::Invalid("operation too long"));
                }
                out.extend_from_slice(&(op.len() as u32).to_le_bytes());
                out.extend_from_slice(op);
            }
            Frame::Persisted { write, applied, ts, key, value } => {
                out.extend_from_slice(&write.to_le_bytes());
                out.push(u8::from(*applied));
                put_ts(*ts, out);
                put_key(key, out)?;
                put_value(value, out)?;
            }
            Frame::Installed => {}
            Frame::Lease { seq } | Frame::Grant { seq } => out.extend_from_slice(&seq.to_le_bytes()),
        }
        Ok(())
    }
}

/// The longest operation in a PERSIST: a value and room for its options.
pub const MAX_OP: usize = MAX_VALUE + 64;

fn put_count(n: usize, out: &mut Vec<u8>) -> Result<(), WireError> {
    if n > MAX_KEYS {
        return Err(WireError::Invalid("too many keys"));
    }
    out.extend_from_slice(&(n as u32).to_le_bytes());
    Ok(())
}

fn put_ts(ts: Ts, out: &mut Vec<u8>) {
    out.extend_from_slice(&ts.version.to_le_bytes());
    out.extend_from_slice(&ts.node.0.to_le_bytes());
}

fn put_key(key: &Key, out: &mut Vec<u8>) -> Result<(), WireError> {
    if key.key.len() > MAX_KEY {
        return Err(WireError::Invalid("key too long"));
    }
    out.extend_from_slice(&key.table.to_le_bytes());
    out.extend_from_slice(&(key.key.len() as u32).to_le_bytes());
    out.extend_from_slice(&key.key);
    Ok(())
}

fn put_value(value: &Value, out: &mut Vec<u8>) -> Result<(), WireError> {
    match value {
        Value::Absent => out.push(0),
        Value::Present { version, bytes } => {
            if bytes.len() > MAX_VALUE {
                return Err(WireError::Invalid("value too long"));
            }
            out.push(1);
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
    Ok(())
}

/// A cursor over a body that never reads past its end.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn flag(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Invalid("flag neither 0 nor 1")),
        }
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn bytes(&mut self, limit: usize, what: &'static str) -> Result<Vec<u8>, WireError> {
        let len = self.u32()? as usize;
        if len > limit {
            return Err(WireError::Invalid(what));
        }
        Ok(self.take(len)?.to_vec())
    }

    fn ts(&mut self) -> Result<Ts, WireError> {
        Ok(Ts { version: self.u64()?, node: NodeId(self.u32()?) })
    }

    fn key(&mut self) -> Result<Key, WireError> {
        Ok(Key { table: self.u64()?, key: self.bytes(MAX_KEY, "key too long")? })
    }

    fn value(&mut self) -> Result<Value, WireError> {
        if !self.flag()? {
            return Ok(Value::Absent);
        }
        Ok(Value::Present { version: self.u64()?, bytes: self.bytes(MAX_VALUE, "value too long")? })
    }

    /// A count of entries, each at least `min_entry` bytes: refused if the
    /// body cannot hold them, so no vector is sized from a claim.
    fn count(&mut self, min_entry: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > MAX_KEYS {
            return Err(WireError::Invalid("too many keys"));
        }
        if n.saturating_mul(min_entry) > self.b.len() {
            return Err(WireError::Truncated);
        }
        Ok(n)
    }
}

/// The smallest encoded key: table and length.
const MIN_KEY: usize = 12;

/// Reads the body of a frame of kind `kind`. Errors say what is wrong;
/// none panics, whatever the bytes.
pub fn decode(kind: Kind, body: &[u8]) -> Result<Frame, WireError> {
    let mut c = Cursor { b: body };
    let frame = match kind {
        Kind::Report => {
            let n = c.count(MIN_KEY + 8)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let key = c.key()?;
                entries.push((key, c.u64()?));
            }
            Frame::Report { entries }
        }
        Kind::HotSet => {
            let consistency = if c.flag()? { Consistency::Strong } else { Consistency::Eventual };
            let n = c.count(MIN_KEY)?;
            let mut keys = Vec::with_capacity(n);
            for _ in 0..n {
                keys.push(c.key()?);
            }
            Frame::HotSet { consistency, keys }
        }
        Kind::Inv => Frame::Inv { ts: c.ts()?, key: c.key()? },
        Kind::Ack => Frame::Ack { ts: c.ts()?, key: c.key()? },
        Kind::Update => Frame::Update { ts: c.ts()?, key: c.key()?, value: c.value()? },
        Kind::Persist => {
            let write = c.u64()?;
            let has_ts = c.flag()?;
            let ts = c.ts()?;
            let key = c.key()?;
            let op = c.bytes(MAX_OP, "operation too long")?;
            Frame::Persist { write, ts: has_ts.then_some(ts), key, op }
        }
        Kind::Persisted => {
            Frame::Persisted { write: c.u64()?, applied: c.flag()?, ts: c.ts()?, key: c.key()?, value: c.value()? }
        }
        Kind::Installed => Frame::Installed,
        Kind::Lease => Frame::Lease { seq: c.u64()? },
        Kind::Grant => Frame::Grant { seq: c.u64()? },
    };
    if !c.b.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        Key { table: 3, key: k.as_bytes().to_vec() }
    }

    fn ts(v: u64, n: u32) -> Ts {
        Ts { version: v, node: NodeId(n) }
    }

    fn samples() -> Vec<Frame> {
        vec![
            Frame::Report { entries: vec![(key("a"), 5), (key(""), 0)] },
            Frame::Report { entries: vec![] },
            Frame::HotSet { consistency: Consistency::Strong, keys: vec![key("x"), key("yy")] },
            Frame::HotSet { consistency: Consistency::Eventual, keys: vec![] },
            Frame::Inv { ts: ts(4, 2), key: key("k") },
            Frame::Ack { ts: ts(u64::MAX, u32::MAX), key: key("k") },
            Frame::Update { ts: ts(1, 1), key: key("k"), value: Value::Present { version: 9, bytes: b"v".to_vec() } },
            Frame::Update { ts: Ts::ZERO, key: key("k"), value: Value::Absent },
            Frame::Persist { write: 7, ts: Some(ts(2, 3)), key: key("k"), op: b"SET v".to_vec() },
            Frame::Persist { write: 8, ts: None, key: key("k"), op: vec![] },
            Frame::Persisted { write: 7, applied: true, ts: ts(2, 3), key: key("k"), value: Value::Absent },
            Frame::Persisted { write: 7, applied: false, ts: ts(5, 1), key: key("k"), value: Value::Absent },
            Frame::Installed,
            Frame::Lease { seq: 1 },
            Frame::Grant { seq: u64::MAX },
        ]
    }

    fn split(bytes: &[u8]) -> (Header, &[u8]) {
        let h = Header::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
        (h, &bytes[HEADER_LEN..])
    }

    #[test]
    fn encode_decode_round_trips_every_kind() {
        let epoch = EpochId { membership: 12, round: Epoch(34) };
        for f in samples() {
            let mut out = Vec::new();
            f.encode(epoch, &mut out).unwrap();
            let (h, body) = split(&out);
            assert_eq!((h.kind, h.body_len, h.epoch), (f.kind(), body.len(), epoch));
            assert_eq!(decode(h.kind, body), Ok(f));
        }
    }

    #[test]
    fn encode_pins_the_header_bytes() {
        let mut out = Vec::new();
        Frame::Inv { ts: ts(1, 2), key: Key { table: 5, key: b"k".to_vec() } }
            .encode(EpochId { membership: 3, round: Epoch(4) }, &mut out)
            .unwrap();
        let mut expect = vec![3, 0, 0, 0, 25, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0];
        expect.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'k']);
        assert_eq!(out, expect);
    }

    #[test]
    fn decode_refuses_every_truncation_and_trailing_bytes() {
        for f in samples() {
            let mut out = Vec::new();
            f.encode(EpochId::default(), &mut out).unwrap();
            let (h, body) = split(&out);
            for cut in 0..body.len() {
                assert!(decode(h.kind, &body[..cut]).is_err(), "{f:?} cut at {cut}");
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert_eq!(decode(h.kind, &longer), Err(WireError::TrailingBytes));
        }
    }

    #[test]
    fn decode_refuses_lengths_over_their_limits() {
        let mut h = [0u8; HEADER_LEN];
        h[0] = 11;
        assert_eq!(Header::decode(&h), Err(WireError::UnknownKind(11)));
        h[0] = 0;
        assert_eq!(Header::decode(&h), Err(WireError::UnknownKind(0)));
        h[0] = 1;
        h[4..8].copy_from_slice(&(MAX_BODY as u32 + 1).to_le_bytes());
        assert_eq!(Header::decode(&h), Err(WireError::BodyTooLong(MAX_BODY as u32 + 1)));
        let mut body = vec![0u8; 12];
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&(MAX_KEY as u32 + 1).to_le_bytes());
        assert_eq!(decode(Kind::Inv, &body), Err(WireError::Invalid("key too long")));
        let claim = u32::MAX.to_le_bytes();
        assert!(decode(Kind::Report, &claim).is_err(), "a count the body cannot hold allocates nothing");
        let big = Frame::Update {
            ts: Ts::ZERO,
            key: key("k"),
            value: Value::Present { version: 1, bytes: vec![0; MAX_VALUE + 1] },
        };
        let mut out = vec![7];
        assert_eq!(big.encode(EpochId::default(), &mut out), Err(WireError::Invalid("value too long")));
        assert_eq!(out, vec![7], "nothing appended on error");
    }

    #[test]
    fn decode_random_bytes_never_panics() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let mut valid = Vec::new();
        for f in samples() {
            let mut out = Vec::new();
            f.encode(EpochId::default(), &mut out).unwrap();
            valid.push((f.kind(), out[HEADER_LEN..].to_vec()));
        }
        for _ in 0..20_000 {
            let (kind, mut body) = valid[rng.gen_range(0..valid.len())].clone();
            for _ in 0..rng.gen_range(1..4) {
                if body.is_empty() {
                    break;
                }
                let at = rng.gen_range(0..body.len());
                body[at] = rng.gen();
            }
            let _ = decode(kind, &body);
        }
    }
}
