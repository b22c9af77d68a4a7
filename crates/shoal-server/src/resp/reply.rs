//! Encoding replies in RESP2 or RESP3 (chosen per connection by HELLO).
//!
//! Commands describe their reply with the RESP3 shapes (map, set, null,
//! verbatim string); on a RESP2 connection they are written as Redis writes
//! them there: a map as a flat array of 2n items, a set as an array, null as
//! the null bulk string (or null array), verbatim text as a bulk string.

use bytes::{BufMut, BytesMut};
use std::borrow::Cow;

/// The protocol version of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Resp2,
    Resp3,
}

impl Protocol {
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// An error reply: its text without the leading '-' (e.g. "ERR syntax error").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply(pub Cow<'static, [u8]>);

impl ErrorReply {
    pub const fn new(text: &'static str) -> ErrorReply {
        ErrorReply(Cow::Borrowed(text.as_bytes()))
    }

    pub fn owned(text: impl Into<Vec<u8>>) -> ErrorReply {
        ErrorReply(Cow::Owned(text.into()))
    }

    pub fn text(&self) -> &[u8] {
        &self.0
    }
}

impl From<String> for ErrorReply {
    fn from(s: String) -> ErrorReply {
        ErrorReply::owned(s)
    }
}

/// Writes replies into a connection's output buffer.
pub struct Reply<'a> {
    out: &'a mut BytesMut,
    proto: Protocol,
}

impl<'a> Reply<'a> {
    pub fn new(out: &'a mut BytesMut, proto: Protocol) -> Reply<'a> {
        Reply { out, proto }
    }

    /// Encodes what follows in `proto` (HELLO answers in the protocol it selects).
    pub fn set_protocol(&mut self, proto: Protocol) {
        self.proto = proto;
    }

    /// Bytes in the output buffer (replies not yet sent included).
    pub fn buffered(&self) -> usize {
        self.out.len()
    }

    /// Whether the reply written from offset `from` (a [`Reply::buffered`]
    /// taken before) is an error.
    pub fn last_was_error(&self, from: usize) -> bool {
        self.out.get(from) == Some(&b'-')
    }

    /// Replies already encoded (in this connection's protocol).
    pub fn raw(&mut self, encoded: &[u8]) {
        self.out.put_slice(encoded);
    }

    pub fn ok(&mut self) {
        self.out.put_slice(b"+OK\r\n");
    }

    /// A simple string; `s` must not contain CR or LF.
    pub fn simple(&mut self, s: &str) {
        self.out.put_u8(b'+');
        self.out.put_slice(s.as_bytes());
        self.out.put_slice(b"\r\n");
    }

    /// An error; CR and LF in the text become spaces, as in Redis.
    pub fn error(&mut self, e: &ErrorReply) {
        self.out.put_u8(b'-');
        self.out.extend(e.text().iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }));
        self.out.put_slice(b"\r\n");
    }

    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len() as i64);
        self.out.put_slice(b);
        self.out.put_slice(b"\r\n");
    }

    /// A missing value (RESP2: the null bulk string).
    pub fn null(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.out.put_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.out.put_slice(b"_\r\n"),
        }
    }

    /// A missing array (RESP2: the null array).
    pub fn null_array(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.out.put_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.out.put_slice(b"_\r\n"),
        }
    }

    pub fn array(&mut self, len: usize) {
        self.header(b'*', len as i64);
    }

    /// A map of `pairs` key/value pairs follows (2 x pairs items).
    pub fn map(&mut self, pairs: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', 2 * pairs as i64),
            Protocol::Resp3 => self.header(b'%', pairs as i64),
        }
    }

    pub fn set(&mut self, len: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', len as i64),
            Protocol::Resp3 => self.header(b'~', len as i64),
        }
    }

    /// Plain text (RESP3: a verbatim string of format "txt").
    pub fn verbatim(&mut self, text: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.header(b'=', text.len() as i64 + 4);
                self.out.put_slice(b"txt:");
                self.out.put_slice(text);
                self.out.put_slice(b"\r\n");
            }
        }
    }

    fn header(&mut self, kind: u8, n: i64) {
        self.out.put_u8(kind);
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut v = n.unsigned_abs();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        if n < 0 {
            self.out.put_u8(b'-');
        }
        self.out.put_slice(&digits[i..]);
        self.out.put_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(proto: Protocol, f: impl FnOnce(&mut Reply)) -> Vec<u8> {
        let mut b = BytesMut::new();
        f(&mut Reply::new(&mut b, proto));
        b.to_vec()
    }

    #[test]
    fn resp2_encodings() {
        assert_eq!(enc(Protocol::Resp2, |r| r.int(i64::MIN)), b":-9223372036854775808\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.int(0)), b":0\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.bulk(b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.null()), b"$-1\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.null_array()), b"*-1\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.map(2)), b"*4\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.verbatim(b"x")), b"$1\r\nx\r\n");
        assert_eq!(enc(Protocol::Resp2, |r| r.error(&ErrorReply::new("ERR a\r\nb"))), b"-ERR a  b\r\n");
    }

    #[test]
    fn resp3_encodings() {
        assert_eq!(enc(Protocol::Resp3, |r| r.null()), b"_\r\n");
        assert_eq!(enc(Protocol::Resp3, |r| r.map(2)), b"%2\r\n");
        assert_eq!(enc(Protocol::Resp3, |r| r.set(1)), b"~1\r\n");
        assert_eq!(enc(Protocol::Resp3, |r| r.verbatim(b"x")), b"=5\r\ntxt:x\r\n");
    }
}
