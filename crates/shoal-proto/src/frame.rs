//! The frame header and the first decoding pass.
//!
//! ```text
//!  0      1        2       3      4             12           16
//!  +------+--------+-------+------+-------------+------------+---------+
//!  | 0x53 | version| opcode| flags| request id  | body length| body    |
//!  |  u8  |   u8   |  u8   |  u8  |    u64      |    u32     |         |
//!  +------+--------+-------+------+-------------+------------+---------+
//! ```
//!
//! The header's layout never changes between protocol versions, so a peer
//! can always read the version and answer `UNSUPPORTED_VERSION`.

use crate::wire::{get_u32, get_u64, put_u32, put_u64};

/// First byte of every frame (`'S'`).
pub const MAGIC: u8 = 0x53;
/// The protocol version this code speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Flag bit set on responses; every other flag bit must be zero.
pub const FLAG_RESPONSE: u8 = 0x01;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 1;
const OPCODE_AT: usize = 2;
const FLAGS_AT: usize = 3;
const REQUEST_ID_AT: usize = 4;
const BODY_LEN_AT: usize = 12;
/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 16;
const _: () = assert!(BODY_LEN_AT + 4 == HEADER_LEN);
const _: () = assert!(REQUEST_ID_AT + 8 == BODY_LEN_AT);

/// Default limit on a frame's body: 16 MiB (sixteen largest values).
pub const DEFAULT_MAX_BODY_BYTES: u32 = 16 << 20;

/// A decoded frame header. The opcode is kept raw so that an unknown one can
/// be echoed in an `UNKNOWN_OPCODE` response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub opcode: u8,
    pub flags: u8,
    pub request_id: u64,
    pub body_len: u32,
}

impl Header {
    /// Total length of the frame (header and body).
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }

    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }
}

/// Why the bytes received cannot be framed. After `BadMagic` the stream has
/// lost its framing; after the others the header was readable (so an error
/// response can name its request id) but the body is not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("bad magic byte {0:#04x}: not a Shoal frame")]
    BadMagic(u8),
    #[error("unsupported protocol version {}", .version)]
    UnsupportedVersion { version: u8, header: Header },
    #[error("frame body of {} bytes exceeds the limit of {}", .header.body_len, .max)]
    TooLarge { header: Header, max: u32 },
}

/// Pass one: is a whole frame at the start of `buf`? `Ok(None)` means more
/// bytes are needed; `Ok(Some(h))` that `buf[..h.frame_len()]` is a frame
/// whose body is `buf[HEADER_LEN..h.frame_len()]`. The body length is
/// checked against `max_body` before anything else is done with it. Never
/// allocates, never panics.
pub fn check_frame(buf: &[u8], max_body: u32) -> Result<Option<Header>, FrameError> {
    if let Some(&m) = buf.first() {
        if m != MAGIC {
            return Err(FrameError::BadMagic(m));
        }
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let header = Header {
        opcode: buf[OPCODE_AT],
        flags: buf[FLAGS_AT],
        request_id: get_u64(buf, REQUEST_ID_AT),
        body_len: get_u32(buf, BODY_LEN_AT),
    };
    let version = buf[VERSION_AT];
    if version != PROTOCOL_VERSION {
        return Err(FrameError::UnsupportedVersion { version, header });
    }
    if header.body_len > max_body {
        return Err(FrameError::TooLarge { header, max: max_body });
    }
    if buf.len() < header.frame_len() {
        return Ok(None);
    }
    Ok(Some(header))
}

/// Appends a header to `out`. Returns the offset of the body-length field,
/// to be patched by [`finish_frame`] once the body is written.
pub fn encode_header(out: &mut Vec<u8>, opcode: u8, flags: u8, request_id: u64) -> usize {
    let start = out.len();
    out.resize(start + HEADER_LEN, 0);
    let h = &mut out[start..];
    h[MAGIC_AT] = MAGIC;
    h[VERSION_AT] = PROTOCOL_VERSION;
    h[OPCODE_AT] = opcode;
    h[FLAGS_AT] = flags;
    put_u64(h, REQUEST_ID_AT, request_id);
    start
}

/// Writes the body length of the frame whose header starts at `start`,
/// the body being everything appended after it. Returns the frame length.
/// A body longer than `u32::MAX` cannot be framed; callers bound their
/// bodies well below that (see [`DEFAULT_MAX_BODY_BYTES`]) and the length
/// is saturated so such a frame is refused by any receiver.
pub(crate) fn finish_frame(out: &mut [u8], start: usize) -> usize {
    let body = out.len() - start - HEADER_LEN;
    put_u32(&mut out[start..], BODY_LEN_AT, u32::try_from(body).unwrap_or(u32::MAX));
    out.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_frame_incomplete_header_needs_more() {
        let mut out = Vec::new();
        let start = encode_header(&mut out, 1, 0, 42);
        out.extend_from_slice(b"abc");
        finish_frame(&mut out, start);
        for n in 0..out.len() {
            assert_eq!(check_frame(&out[..n], 100), Ok(None), "prefix {n}");
        }
        let h = check_frame(&out, 100).unwrap().unwrap();
        assert_eq!(h, Header { opcode: 1, flags: 0, request_id: 42, body_len: 3 });
    }

    #[test]
    fn check_frame_rejects_bad_magic_and_version_and_size() {
        assert_eq!(check_frame(b"x", 10), Err(FrameError::BadMagic(b'x')));
        let mut out = Vec::new();
        let start = encode_header(&mut out, 1, 0, 7);
        out.extend_from_slice(&[0; 11]);
        finish_frame(&mut out, start);
        assert!(matches!(check_frame(&out[..HEADER_LEN], 10), Err(FrameError::TooLarge { max: 10, .. })));
        out[VERSION_AT] = 9;
        assert!(matches!(check_frame(&out, 100), Err(FrameError::UnsupportedVersion { version: 9, .. })));
    }
}
