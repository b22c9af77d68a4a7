//! Little-endian field access and the body reader shared by every message.
//!
//! `get_*`/`put_*` read and write at a named offset of a slice whose length
//! the caller has already checked. [`Reader`] walks a body front to back,
//! checking every read against the bytes that remain, and refuses trailing
//! bytes at the end.

/// Why a frame body could not be parsed. The frame itself was whole, so the
/// stream keeps its framing: the receiver answers this request with an error
/// and goes on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown opcode {0}")]
    UnknownOpcode(u8),
    #[error("malformed message: {0}")]
    Malformed(&'static str),
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A cursor over a message body. Every method fails with
/// [`DecodeError::Malformed`] instead of reading past the end.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

const TRUNCATED: DecodeError = DecodeError::Malformed("message truncated");

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Takes the next `n` bytes, which must be present.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(TRUNCATED);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// Takes a fixed-size block, for the named-offset accessors.
    pub fn fixed(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        self.take(n)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(get_u32(self.take(4)?, 0))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(get_u64(self.take(8)?, 0))
    }

    /// A count of items each at least `min_item` bytes long: checked against
    /// the bytes left so that no allocation is sized by an unchecked number.
    pub fn count(&mut self, min_item: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.remaining() {
            return Err(DecodeError::Malformed("item count exceeds the message"));
        }
        Ok(n)
    }

    /// A UTF-8 string preceded by a u16 length.
    pub fn str16(&mut self) -> Result<&'a str, DecodeError> {
        let n = self.u16()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| DecodeError::Malformed("string is not UTF-8"))
    }

    /// A UTF-8 string preceded by a u8 length.
    pub fn str8(&mut self) -> Result<&'a str, DecodeError> {
        let n = self.u8()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| DecodeError::Malformed("string is not UTF-8"))
    }

    /// Ends the message: trailing bytes are an error.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Malformed("trailing bytes after the message"))
        }
    }
}

/// Appends a u16-length-prefixed string, cut at 65,535 bytes (on a char
/// boundary).
pub(crate) fn put_str16(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..n]);
}

/// Appends a u8-length-prefixed string, cut at 255 bytes (on a char boundary).
pub(crate) fn put_str8(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len().min(u8::MAX as usize);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.push(n as u8);
    out.extend_from_slice(&s.as_bytes()[..n]);
}

/// Length of a byte string as its u32 length field. Frames are bounded far
/// below 4 GiB, so a longer string can only come from a caller error; it is
/// saturated and the frame will be refused by its receiver.
pub(crate) fn len32(b: &[u8]) -> [u8; 4] {
    u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes()
}
