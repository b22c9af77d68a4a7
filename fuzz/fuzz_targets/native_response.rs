//! Native protocol responses (`shoal-proto`): `check_frame`, then
//! `decode_response` of each body, as a client reads them.
//!
//! Asserts: no panic; a response that decodes (an OK result or an error
//! status) re-encodes to exactly its body (the format is canonical), and
//! that frame is whole, a response, and carries the same opcode and id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::{check_frame, decode_response, encode_error, HEADER_LEN, MAGIC};

const MAX_BODY: u32 = 1 << 16;

fn round_trip(opcode: u8, request_id: u64, body: &[u8]) {
    let Ok(res) = decode_response(opcode, body) else { return };
    let mut out = Vec::new();
    let n = match &res {
        Ok(r) => {
            assert_eq!(r.opcode() as u8, opcode);
            r.encode(request_id, &mut out)
        }
        Err(status) => encode_error(&mut out, request_id, opcode, status),
    };
    assert_eq!(n, out.len());
    assert_eq!(&out[HEADER_LEN..], body, "{res:?} does not re-encode to its body");
    let h = check_frame(&out, MAX_BODY).expect("an encoded frame").expect("a whole frame");
    assert!(h.is_response());
    assert_eq!((h.opcode, h.request_id, h.frame_len()), (opcode, request_id, out.len()));
}

fuzz_target!(|data: &[u8]| {
    if data.first() != Some(&MAGIC) {
        if let Some((&opcode, body)) = data.split_first() {
            round_trip(opcode, 7, body);
        }
        return;
    }
    let mut rest = data;
    while let Ok(Some(h)) = check_frame(rest, MAX_BODY) {
        assert!(h.body_len <= MAX_BODY && h.frame_len() <= rest.len());
        round_trip(h.opcode, h.request_id, &rest[HEADER_LEN..h.frame_len()]);
        rest = &rest[h.frame_len()..];
    }
});
