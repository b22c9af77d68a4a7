//! A backup's files (`shoal-replication`, `backup::fuzzing`): the header
//! of a closed replica's segment file (versions 1-3) and the metadata
//! block of a buffer file, decoded from bytes, and whole segment files
//! read from disk as the start-up scan and a READ read them.
//!
//! The first input byte shapes the rest so that the fuzzer gets past the
//! checksums: bit 0 repairs the header CRCs, bit 1 pads the header to its
//! 4096-byte block, bit 2 sets the header's length to the bytes that follow.
//!
//! Asserts: no panic; a file header that decodes starts its bytes at 48
//! (version 1) or 4096, re-encodes (version 3) to exactly its 56 bytes, and
//! every header `encode` writes decodes back to itself; a buffer's metadata
//! that decodes re-encodes (version 2) to exactly its bytes; reading a file
//! succeeds exactly when its header decodes and its length matches, both
//! readers agree, and the bytes served are the file's after the header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_replication::backup::fuzzing::{read_file_header, read_segment_file, FileHeader, Meta};
use std::path::PathBuf;
use std::sync::OnceLock;

const BLOCK: usize = 4096;

fn crc_at(version: u16) -> Option<usize> {
    match version {
        3 => Some(52),
        1 | 2 => Some(44),
        _ => None,
    }
}

fn version(b: &[u8]) -> u16 {
    b.get(4..6).map_or(0, |v| u16::from_le_bytes([v[0], v[1]]))
}

fn scratch_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
        dir.join(format!("shoal-fuzz-{}.seg", std::process::id()))
    })
}

fn shape(mode: u8, input: &[u8]) -> Vec<u8> {
    let v = version(input);
    let header_len = if v == 3 { 56 } else { 48 };
    let mut b = input.to_vec();
    if mode & 2 != 0 && v != 1 && b.len() >= header_len && b.len() < BLOCK {
        b.splice(header_len..header_len, std::iter::repeat_n(0, BLOCK - b.len()));
    }
    if mode & 4 != 0 && b.len() >= header_len {
        let data_at = if v == 1 { 48 } else { BLOCK };
        let len = b.len().saturating_sub(data_at) as u32;
        b[32..36].copy_from_slice(&len.to_le_bytes());
    }
    if mode & 1 != 0 {
        if let Some(at) = crc_at(v).filter(|&at| b.len() >= at + 4) {
            let crc = crc32c::crc32c(&b[..at]);
            b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    b
}

fn file_header(b: &[u8]) {
    let Ok((h, data_at)) = FileHeader::decode(b) else { return };
    assert!(data_at == 48 && version(b) == 1 || data_at == BLOCK && b.len() >= BLOCK);
    let enc = h.encode();
    if version(b) == 3 {
        assert_eq!(enc[..], b[..56], "a version 3 header does not re-encode to itself");
    }
    let mut block = enc.to_vec();
    block.resize(BLOCK, 0);
    assert_eq!(FileHeader::decode(&block).expect("an encoded header decodes"), (h, BLOCK));
}

fn meta(b: &[u8]) {
    let Some(m) = Meta::decode(b) else { return };
    let enc = m.encode();
    if version(b) == 2 {
        assert_eq!(enc[..], b[..enc.len()], "{m:?} does not re-encode to its metadata block");
    }
    assert_eq!(Meta::decode(&enc), Some(m));
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let b = shape(mode, rest);
    file_header(&b);
    meta(&b);
    if mode & 8 == 0 {
        return;
    }
    let path = scratch_file();
    std::fs::write(path, &b).expect("writes the scratch file");
    let decoded = FileHeader::decode(&b[..b.len().min(BLOCK)]);
    let header = read_file_header(path);
    let read = read_segment_file(path, 64 << 10);
    match decoded {
        Ok((h, data_at)) if data_at + h.len as usize == b.len() => {
            assert_eq!(header.expect("a sound file's header reads"), h);
            let (h2, bytes) = read.expect("a sound file reads");
            assert_eq!(h2, h);
            assert_eq!(bytes, &b[data_at..]);
        }
        _ => assert!(header.is_err() && read.is_err(), "a damaged file was read"),
    }
});
