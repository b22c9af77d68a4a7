//! Replication frames (`shoal-replication`, `wire`): the header, then the
//! body decoder of the header's kind, as backups and masters read them.
//!
//! Asserts: no panic (every body decoder also runs on every body); a frame
//! whose header and body decode re-encodes to exactly its bytes with the
//! kind's encoder (the format is canonical; REFUSED and ERROR text only when
//! it is valid UTF-8 within 1 KiB, as it is lossily decoded and cut); a
//! READ_PART body that decodes has a length `read_part_len_ok` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_replication::wire::{self, Header, Hello, Kind, DATA_PREFIX, HEADER_LEN};

const MAX_BODY: usize = 1 << 16;

fn every_decoder(body: &[u8]) {
    let _ = Hello::decode(body);
    let _ = wire::decode_open(body);
    let _ = wire::decode_close(body);
    let _ = wire::decode_epoch(body);
    let _ = wire::decode_u32(body, "u32");
    let _ = wire::decode_u64(body, "u64");
    let _ = wire::decode_listing(body);
    let _ = wire::decode_segment(body);
    let _ = wire::decode_read_part(body);
    let _ = wire::decode_part(body);
    let _ = wire::decode_text(body);
}

/// The frame re-encoded from what its body decodes to, if it decodes.
fn reencode(h: &Header, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let seg = h.segment;
    match h.kind {
        Kind::Hello => {
            let hello = Hello::decode(body).ok()?;
            hello.encode(&mut out);
            // HELLO always goes out with segment 0; compare the rest.
            out[8..16].copy_from_slice(&seg.0.to_le_bytes());
        }
        Kind::Open => wire::encode_open(seg, &wire::decode_open(body).ok()?, &mut out),
        Kind::Data | Kind::Append => {
            let offset = wire::decode_u32(body.get(..DATA_PREFIX)?, "DATA").ok()?;
            wire::encode_data_prefix(h.kind, seg, offset, body.len() - DATA_PREFIX, &mut out);
            out.extend_from_slice(&body[DATA_PREFIX..]);
        }
        Kind::Close => {
            let (len, checksum) = wire::decode_close(body).ok()?;
            wire::encode_close(seg, len, checksum, &mut out);
        }
        Kind::Free | Kind::Opened | Kind::Freed | Kind::HelloOk => {
            if !body.is_empty() {
                return None;
            }
            wire::encode_empty(h.kind, seg, &mut out);
        }
        Kind::Ack | Kind::Closed | Kind::Appended => {
            wire::encode_u32(h.kind, seg, wire::decode_u32(body, "u32").ok()?, &mut out)
        }
        Kind::List | Kind::Read | Kind::FreeLog => {
            wire::encode_u64(h.kind, seg, wire::decode_u64(body, "u64").ok()?, &mut out)
        }
        Kind::Epoch | Kind::Epoched => wire::encode_epoch(h.kind, seg, wire::decode_epoch(body).ok()?, &mut out),
        Kind::Listing => {
            wire::encode_listing(&wire::decode_listing(body).ok()?, &mut out);
            out[8..16].copy_from_slice(&seg.0.to_le_bytes());
        }
        Kind::Segment => {
            let (version, state, bytes) = wire::decode_segment(body).ok()?;
            wire::encode_segment_prefix(seg, version, state, bytes.len() as u32, &mut out);
            out.extend_from_slice(bytes);
        }
        Kind::ReadPart => {
            let (log, ranges) = wire::decode_read_part(body).ok()?;
            assert!(wire::read_part_len_ok(body.len()));
            wire::encode_read_part(log, seg, &ranges, &mut out);
        }
        Kind::Part => {
            let (info, entries) = wire::decode_part(body).ok()?;
            wire::encode_part_prefix(seg, &info, entries.len(), &mut out);
            out.extend_from_slice(entries);
        }
        Kind::Refused | Kind::Error => {
            let text = std::str::from_utf8(body).ok().filter(|t| t.len() <= 1024)?;
            assert_eq!(wire::decode_text(body), text);
            wire::encode_text(h.kind, seg, text, &mut out);
        }
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while rest.len() >= HEADER_LEN {
        let head: &[u8; HEADER_LEN] = rest[..HEADER_LEN].try_into().expect("a header");
        let Ok(h) = Header::decode(head, MAX_BODY) else {
            every_decoder(&rest[HEADER_LEN..]);
            return;
        };
        assert!(h.body_len <= MAX_BODY);
        let Some(body) = rest[HEADER_LEN..].get(..h.body_len) else {
            every_decoder(&rest[HEADER_LEN..]);
            return;
        };
        every_decoder(body);
        if let Some(out) = reencode(&h, body) {
            assert_eq!(out, &rest[..HEADER_LEN + h.body_len], "{:?} does not re-encode to its frame", h.kind);
        }
        rest = &rest[HEADER_LEN + h.body_len..];
    }
});
