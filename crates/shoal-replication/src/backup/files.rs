//! Closed replicas on disk: `segments/<log>-<segment>.seg`.
//!
//! A file is a 48-byte header followed by exactly `length` segment bytes
//! (integers little-endian):
//!
//! ```text
//!  0  magic "SHSG"     4  format version u16 (1)   6  reserved u16 (0)
//!  8  log id u64       16 log version u64          24 segment id u64
//!  32 length u32       36 last checksum u32        40 reserved u32 (0)
//!  44 CRC32C of bytes 0..44 u32
//! ```
//!
//! Files are written to `<name>.tmp`, synced, renamed into place and the
//! directory synced, so a file under its final name is always complete. The
//! header's CRC guards the header; the bytes are guarded by the log format
//! itself (every entry's CRC and the cumulative header checksum), which
//! readers check before serving them (`restore::verify_replica`).

use shoal_common::{LogId, SegmentId};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

pub(crate) const FILE_HEADER_BYTES: usize = 48;
const FILE_MAGIC: [u8; 4] = *b"SHSG";
const FILE_VERSION: u16 = 1;
const CRC_AT: usize = 44;

/// The header of a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileHeader {
    pub log: LogId,
    pub log_version: u64,
    pub segment: SegmentId,
    pub len: u32,
    pub checksum: u32,
}

impl FileHeader {
    fn encode(&self) -> [u8; FILE_HEADER_BYTES] {
        let mut b = [0u8; FILE_HEADER_BYTES];
        b[0..4].copy_from_slice(&FILE_MAGIC);
        b[4..6].copy_from_slice(&FILE_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.log.0.to_le_bytes());
        b[16..24].copy_from_slice(&self.log_version.to_le_bytes());
        b[24..32].copy_from_slice(&self.segment.0.to_le_bytes());
        b[32..36].copy_from_slice(&self.len.to_le_bytes());
        b[36..40].copy_from_slice(&self.checksum.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8; FILE_HEADER_BYTES]) -> Option<FileHeader> {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if b[0..4] != FILE_MAGIC
            || u16::from_le_bytes([b[4], b[5]]) != FILE_VERSION
            || b[6..8] != [0, 0]
            || b[40..44] != [0; 4]
            || crc32c::crc32c(&b[..CRC_AT]) != u32_at(CRC_AT)
        {
            return None;
        }
        Some(FileHeader {
            log: LogId(u64_at(8)),
            log_version: u64_at(16),
            segment: SegmentId(u64_at(24)),
            len: u32_at(32),
            checksum: u32_at(36),
        })
    }
}

/// Where the closed replica of `(log, segment)` lives.
pub(crate) fn segment_path(dir: &Path, log: LogId, segment: SegmentId) -> PathBuf {
    dir.join(format!("{}-{}.seg", log.0, segment.0))
}

/// Writes a closed replica durably (tmp file, fsync, rename, fsync of the
/// directory) and returns its path.
pub(crate) fn write_segment(dir: &Path, header: &FileHeader, bytes: &[u8]) -> io::Result<PathBuf> {
    debug_assert_eq!(bytes.len(), header.len as usize);
    let path = segment_path(dir, header.log, header.segment);
    let tmp = path.with_extension("seg.tmp");
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(&header.encode())?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

/// Reads a segment file's header and checks that the file is exactly as
/// long as it says.
pub(crate) fn read_header(path: &Path) -> io::Result<FileHeader> {
    let mut f = File::open(path)?;
    let mut b = [0u8; FILE_HEADER_BYTES];
    f.read_exact(&mut b).map_err(|_| invalid("shorter than its header"))?;
    let h = FileHeader::decode(&b).ok_or_else(|| invalid("bad header (magic, version or CRC)"))?;
    if f.metadata()?.len() != (FILE_HEADER_BYTES + h.len as usize) as u64 {
        return Err(invalid("length does not match its header"));
    }
    Ok(h)
}

/// Reads a segment file: its header (checked as by [`read_header`]) and bytes.
pub(crate) fn read_segment(path: &Path) -> io::Result<(FileHeader, Vec<u8>)> {
    let mut f = File::open(path)?;
    let mut b = [0u8; FILE_HEADER_BYTES];
    f.read_exact(&mut b).map_err(|_| invalid("shorter than its header"))?;
    let h = FileHeader::decode(&b).ok_or_else(|| invalid("bad header (magic, version or CRC)"))?;
    let mut bytes = Vec::with_capacity(h.len as usize);
    f.take(h.len as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() != h.len as usize {
        return Err(invalid("length does not match its header"));
    }
    Ok((h, bytes))
}

/// Every segment file of `dir` with a sound header whose name matches it.
/// Removes leftover `.tmp` files; skips (with a warning) anything else.
pub(crate) fn scan_dir(dir: &Path) -> io::Result<Vec<(FileHeader, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if name.ends_with(".seg.tmp") {
            let _ = fs::remove_file(&path);
            continue;
        }
        let Some(stem) = name.strip_suffix(".seg") else {
            tracing::warn!(path = %path.display(), "backup: ignoring an unknown file among segments");
            continue;
        };
        match read_header(&path) {
            Ok(h) if segment_path(dir, h.log, h.segment).file_name().and_then(|n| n.to_str()) == Some(&name) => {
                found.push((h, path))
            }
            Ok(_) => {
                tracing::warn!(file = stem, "backup: skipping a segment file whose name does not match its header")
            }
            Err(e) => tracing::warn!(file = stem, error = %e, "backup: skipping a corrupt segment file"),
        }
    }
    Ok(found)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("segment file {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_scan_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let h = FileHeader { log: LogId(4), log_version: 2, segment: SegmentId(9), len: 5, checksum: 77 };
        let path = write_segment(dir.path(), &h, b"hello").unwrap();
        assert_eq!(path, dir.path().join("4-9.seg"));
        assert_eq!(read_segment(&path).unwrap(), (h, b"hello".to_vec()));
        fs::write(dir.path().join("1-1.seg.tmp"), b"partial").unwrap();
        fs::write(dir.path().join("1-2.seg"), b"short").unwrap();
        let found = scan_dir(dir.path()).unwrap();
        assert_eq!(found, vec![(h, path.clone())]);
        assert!(!dir.path().join("1-1.seg.tmp").exists());
    }

    #[test]
    fn truncated_or_flipped_headers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let h = FileHeader { log: LogId(1), log_version: 1, segment: SegmentId(1), len: 3, checksum: 1 };
        let path = write_segment(dir.path(), &h, b"abc").unwrap();
        let good = fs::read(&path).unwrap();
        fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(read_header(&path).is_err());
        assert!(read_segment(&path).is_err());
        for bit in 0..FILE_HEADER_BYTES * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            fs::write(&path, &bad).unwrap();
            assert!(read_header(&path).is_err(), "bit {bit}");
        }
    }
}
