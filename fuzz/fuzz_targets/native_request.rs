//! Native protocol requests (`shoal-proto`): `check_frame` over a stream of
//! frames, then `Request::decode` of each body.
//!
//! Asserts: no panic; `check_frame` never reports a frame longer than the
//! bytes given or the limit, and every shorter prefix of a frame it accepts
//! is "need more"; a request that decodes re-encodes to exactly its frame's
//! body (the format is canonical) with the same opcode and request id, and
//! that encoding decodes back to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::{check_frame, Request, HEADER_LEN, MAGIC};

const MAX_BODY: u32 = 1 << 16;

fn round_trip(opcode: u8, request_id: u64, body: &[u8]) {
    let Ok(req) = Request::decode(opcode, body) else { return };
    assert_eq!(req.opcode() as u8, opcode);
    let mut out = Vec::new();
    let n = req.encode(request_id, &mut out);
    assert_eq!(n, out.len());
    assert_eq!(&out[HEADER_LEN..], body, "{req:?} does not re-encode to its body");
    let h = check_frame(&out, MAX_BODY).expect("an encoded frame").expect("a whole frame");
    assert_eq!((h.opcode, h.request_id, h.flags, h.frame_len()), (opcode, request_id, 0, out.len()));
    assert_eq!(Request::decode(h.opcode, &out[HEADER_LEN..]).as_ref(), Ok(&req));
}

fuzz_target!(|data: &[u8]| {
    if data.first() != Some(&MAGIC) {
        // A bare body: the first byte is the opcode.
        if let Some((&opcode, body)) = data.split_first() {
            round_trip(opcode, 7, body);
        }
        return;
    }
    let mut rest = data;
    while let Ok(Some(h)) = check_frame(rest, MAX_BODY) {
        assert!(h.body_len <= MAX_BODY && h.frame_len() <= rest.len());
        for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN, h.frame_len() - 1] {
            if cut < h.frame_len() {
                assert_eq!(check_frame(&rest[..cut], MAX_BODY), Ok(None), "prefix of {cut} bytes");
            }
        }
        round_trip(h.opcode, h.request_id, &rest[HEADER_LEN..h.frame_len()]);
        rest = &rest[h.frame_len()..];
    }
});
