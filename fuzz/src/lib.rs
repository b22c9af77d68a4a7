//! Helpers shared by the fuzz targets (`docs/fuzzing.md`).
//!
//! Log entries and file headers carry CRC32Cs, which random mutations
//! almost never get right, so a fuzzer would stay in front of every
//! checksum test. [`seal_entries`] repairs them the way a writer computes
//! them, so that targets can also feed inputs whose checksums hold and
//! reach the code behind those tests.

use shoal_engine::format::{read_header, EntryType, HeaderCrc};

/// Rewrites, in place, the CRC of every structured entry of `buf` and the
/// value of every checksum entry (the cumulative header CRC), walking the
/// entries from offset 0 as `format::scan` does; stops where no entry
/// header can be read or an entry runs past the end.
pub fn seal_entries(buf: &mut [u8]) {
    let mut crc = HeaderCrc::default();
    let mut pos = 0;
    while pos < buf.len() {
        let Ok(h) = read_header(&buf[pos..]) else { return };
        let end = pos + h.total_len();
        if end > buf.len() {
            return;
        }
        crc.add(&buf[pos..pos + h.header_len]);
        let body = pos + h.header_len;
        match h.entry_type {
            EntryType::Checksum => buf[body..end].copy_from_slice(&crc.value().to_le_bytes()),
            EntryType::SegmentHeader
            | EntryType::Object
            | EntryType::ObjectWithExpiry
            | EntryType::Tombstone
            | EntryType::LogDigest
            | EntryType::SafeVersion
            | EntryType::Chunk
            | EntryType::ChunkTombstone
            | EntryType::StreamBatch
            | EntryType::ChunkRun => {
                if h.body_len >= 4 {
                    let sum = crc32c::crc32c_append(crc32c::crc32c(&buf[pos..body]), &buf[body + 4..end]);
                    buf[body..body + 4].copy_from_slice(&sum.to_le_bytes());
                }
            }
        }
        pos = end;
    }
}
