//! Closed replicas on disk: `segments/<log>-<segment>.seg`.
//!
//! A file is a 4096-byte header block followed by exactly `length` segment
//! bytes, so the bytes start block aligned and are written and read with
//! O_DIRECT, straight from the replica's mapped buffer and into an aligned
//! read buffer, without passing through the page cache. The header block is
//! a 56-byte header (integers little-endian), then zeros:
//!
//! ```text
//!  0  magic "SHSG"     4  format version u16 (3)   6  reserved u16 (0)
//!  8  log id u64       16 log version u64          24 segment id u64
//!  32 length u32       36 last checksum u32        40 reserved u32 (0)
//!  44 replica epoch u64                            52 CRC32C of bytes 0..52 u32
//!  56 zeros up to 4096
//! ```
//!
//! Files of earlier builds are still read, as epoch 1: version 2 (a 48-byte
//! header without the epoch, its CRC at 44 over bytes 0..44, in the same
//! 4096-byte block) and version 1 (that 48-byte header with version 1, the
//! segment bytes right after it).
//!
//! An EPOCH for a replica on disk rewrites the header block in place and
//! syncs it ([`raise_epoch`]); the header lies in the file's first 512-byte
//! sector, which a disk writes whole, so a crash leaves the old header or
//! the new one. A version 1 file is rewritten whole instead.
//!
//! Files are written to `<name>.tmp`, synced, renamed into place and the
//! directory synced, so a file under its final name is always complete. The
//! header's CRC and the zeros guard the header block; the bytes are guarded
//! by the log format itself (every entry's CRC and the cumulative header
//! checksum), which readers check before serving them
//! (`restore::verify_replica`). Where the file system or device refuses
//! O_DIRECT (EINVAL: tmpfs, blocks larger than 4096 bytes), the same file is
//! written and read with buffered I/O.

use super::mmap::{AlignedBuf, BLOCK};
use parking_lot::Mutex;
use shoal_common::{LogId, SegmentId};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::ops::Deref;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FILE_HEADER_BYTES: usize = 56;
/// Where a file's segment bytes start (versions 2 and 3).
const FILE_DATA_AT: usize = BLOCK;
const FILE_MAGIC: [u8; 4] = *b"SHSG";
const FILE_VERSION: u16 = 3;
const EPOCH_AT: usize = 44;
const CRC_AT: usize = 52;
/// Earlier layouts: a 48-byte header without the epoch, its CRC at 44;
/// version 2 in a 4096-byte block, version 1 followed by the bytes at once.
const FILE_VERSION_2: u16 = 2;
const FILE_VERSION_1: u16 = 1;
const OLD_HEADER_BYTES: usize = 48;
const OLD_CRC_AT: usize = 44;
const _: () = assert!(
    EPOCH_AT + 8 == CRC_AT
        && CRC_AT + 4 == FILE_HEADER_BYTES
        && FILE_HEADER_BYTES <= 512
        && FILE_DATA_AT.is_multiple_of(BLOCK)
);

/// The header of a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub log: LogId,
    pub log_version: u64,
    pub segment: SegmentId,
    pub len: u32,
    pub checksum: u32,
    /// The replica's epoch (1 in files of earlier versions).
    pub epoch: u64,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; FILE_HEADER_BYTES] {
        let mut b = [0u8; FILE_HEADER_BYTES];
        b[0..4].copy_from_slice(&FILE_MAGIC);
        b[4..6].copy_from_slice(&FILE_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.log.0.to_le_bytes());
        b[16..24].copy_from_slice(&self.log_version.to_le_bytes());
        b[24..32].copy_from_slice(&self.segment.0.to_le_bytes());
        b[32..36].copy_from_slice(&self.len.to_le_bytes());
        b[36..40].copy_from_slice(&self.checksum.to_le_bytes());
        b[EPOCH_AT..CRC_AT].copy_from_slice(&self.epoch.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the start of a file (its first block, or all of it if
    /// shorter): the header and where the segment bytes start.
    pub fn decode(b: &[u8]) -> io::Result<(FileHeader, usize)> {
        let version = match b.get(..6) {
            Some(v) => u16::from_le_bytes([v[4], v[5]]),
            None => return Err(invalid("shorter than its header")),
        };
        let (header_bytes, crc_at) = match version {
            FILE_VERSION => (FILE_HEADER_BYTES, CRC_AT),
            FILE_VERSION_2 | FILE_VERSION_1 => (OLD_HEADER_BYTES, OLD_CRC_AT),
            _ => return Err(invalid("bad header (magic, version or CRC)")),
        };
        let b_head = b.get(..header_bytes).ok_or_else(|| invalid("shorter than its header"))?;
        let u32_at = |at: usize| u32::from_le_bytes(b_head[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b_head[at..at + 8].try_into().expect("8 bytes"));
        let epoch = if version == FILE_VERSION { u64_at(EPOCH_AT) } else { 1 };
        if b_head[0..4] != FILE_MAGIC
            || b_head[6..8] != [0, 0]
            || b_head[40..44] != [0; 4]
            || epoch == 0
            || crc32c::crc32c(&b_head[..crc_at]) != u32_at(crc_at)
        {
            return Err(invalid("bad header (magic, version or CRC)"));
        }
        let data_at = if version == FILE_VERSION_1 {
            header_bytes
        } else {
            let pad = b.get(header_bytes..FILE_DATA_AT).ok_or_else(|| invalid("shorter than its header"))?;
            if pad.iter().any(|&x| x != 0) {
                return Err(invalid("bad header (nonzero padding)"));
            }
            FILE_DATA_AT
        };
        let h = FileHeader {
            log: LogId(u64_at(8)),
            log_version: u64_at(16),
            segment: SegmentId(u64_at(24)),
            len: u32_at(32),
            checksum: u32_at(36),
            epoch,
        };
        Ok((h, data_at))
    }
}

/// Where the closed replica of `(log, segment)` lives.
pub(crate) fn segment_path(dir: &Path, log: LogId, segment: SegmentId) -> PathBuf {
    dir.join(format!("{}-{}.seg", log.0, segment.0))
}

/// Writes a closed replica durably (tmp file, fsync, rename, fsync of the
/// directory) and returns its path. The bytes go to the disk with O_DIRECT
/// when `bytes` starts block aligned (a buffer's data does) or is shorter
/// than a block, else (or where O_DIRECT is refused) through the page cache.
pub(crate) fn write_segment(dir: &Path, header: &FileHeader, bytes: &[u8]) -> io::Result<PathBuf> {
    debug_assert_eq!(bytes.len(), header.len as usize);
    let path = segment_path(dir, header.log, header.segment);
    let tmp = path.with_extension("seg.tmp");
    let direct = (bytes.as_ptr() as usize).is_multiple_of(BLOCK) || bytes.len() < BLOCK;
    let result = match write_file(&tmp, header, bytes, direct) {
        Err(e) if direct && refused_direct(&e) => write_file(&tmp, header, bytes, false),
        r => r,
    };
    let result = result.and_then(|()| {
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

/// Creates (or truncates) `tmp` and writes the whole file, synced. With
/// `direct`, `bytes` must start block aligned unless shorter than a block.
fn write_file(tmp: &Path, header: &FileHeader, bytes: &[u8], direct: bool) -> io::Result<()> {
    let f = open_options(direct).write(true).create(true).truncate(true).open(tmp)?;
    let mut block = AlignedBuf::zeroed(BLOCK)?;
    block[..FILE_HEADER_BYTES].copy_from_slice(&header.encode());
    f.write_all_at(&block, 0)?;
    if direct {
        // Whole blocks straight from `bytes`; the last partial block from a
        // zero-padded copy, then the file cut back to its exact length.
        let whole = bytes.len() / BLOCK * BLOCK;
        f.write_all_at(&bytes[..whole], FILE_DATA_AT as u64)?;
        let tail = &bytes[whole..];
        if !tail.is_empty() {
            block.fill(0);
            block[..tail.len()].copy_from_slice(tail);
            f.write_all_at(&block, (FILE_DATA_AT + whole) as u64)?;
            f.set_len((FILE_DATA_AT + bytes.len()) as u64)?;
        }
    } else {
        f.write_all_at(bytes, FILE_DATA_AT as u64)?;
    }
    f.sync_all()
}

/// Reads a segment file's header and checks that the file is exactly as
/// long as it says (buffered: this reads one block).
pub(crate) fn read_header(path: &Path) -> io::Result<FileHeader> {
    read_header_at(path).map(|(h, _)| h)
}

/// [`read_header`], and where the file's segment bytes start.
fn read_header_at(path: &Path) -> io::Result<(FileHeader, usize)> {
    let f = File::open(path)?;
    let mut b = Vec::with_capacity(BLOCK);
    (&f).take(BLOCK as u64).read_to_end(&mut b)?;
    let (h, data_at) = FileHeader::decode(&b)?;
    if f.metadata()?.len() != (data_at + h.len as usize) as u64 {
        return Err(invalid("length does not match its header"));
    }
    Ok((h, data_at))
}

/// Raises the epoch the file at `path` records to `epoch` (never lowers
/// it), durably, and returns the header the file holds now. The header
/// block is rewritten in place (O_DIRECT where allowed) and synced; a
/// version 1 file, whose bytes share that block, is rewritten whole (tmp
/// file, rename) in the current layout. Errors: the file is gone
/// (`NotFound`), unreadable or damaged, or the write failed.
pub(crate) fn raise_epoch(path: &Path, epoch: u64) -> io::Result<FileHeader> {
    let (h, data_at) = read_header_at(path)?;
    if h.epoch >= epoch {
        return Ok(h);
    }
    let new = FileHeader { epoch, ..h };
    if data_at != FILE_DATA_AT {
        let bytes = fs::read(path)?;
        let dir = path.parent().ok_or_else(|| invalid("path without a directory"))?;
        let tail = bytes.get(data_at..).ok_or_else(|| invalid("shorter than it was"))?;
        write_segment(dir, &new, tail)?;
        return Ok(new);
    }
    let write = |direct: bool| -> io::Result<()> {
        let f = open_options(direct).write(true).open(path)?;
        let mut block = AlignedBuf::zeroed(BLOCK)?;
        block[..FILE_HEADER_BYTES].copy_from_slice(&new.encode());
        f.write_all_at(&block, 0)?;
        f.sync_data()
    };
    match write(true) {
        Err(e) if refused_direct(&e) => write(false),
        r => r,
    }?;
    Ok(new)
}

/// Reads a segment file, with O_DIRECT where the file system allows, into
/// a buffer from `bufs`: its header (checked as by [`read_header`]) and
/// bytes.
pub(crate) fn read_segment(path: &Path, bufs: &Arc<ReadBufs>) -> io::Result<(FileHeader, SegmentBytes)> {
    match read_file(path, bufs, true) {
        Err(e) if refused_direct(&e) => read_file(path, bufs, false),
        r => r,
    }
}

fn read_file(path: &Path, bufs: &Arc<ReadBufs>, direct: bool) -> io::Result<(FileHeader, SegmentBytes)> {
    let f = open_options(direct).read(true).open(path)?;
    let file_len = f.metadata()?.len();
    // The header block first, so nothing is sized by an unchecked length.
    let mut buf = bufs.take(BLOCK)?;
    read_full(&f, &mut buf[..BLOCK], 0, file_len.min(BLOCK as u64) as usize)?;
    let (h, data_at) = FileHeader::decode(&buf[..file_len.min(BLOCK as u64) as usize])?;
    let total = data_at + h.len as usize;
    if file_len != total as u64 {
        return Err(invalid("length does not match its header"));
    }
    if total > buf.len() {
        let mut bigger = bufs.take(total)?;
        bigger[..BLOCK].copy_from_slice(&buf[..BLOCK]);
        buf = bigger;
    }
    if total > BLOCK {
        let end = total.next_multiple_of(BLOCK);
        read_full(&f, &mut buf[BLOCK..end], BLOCK as u64, total - BLOCK)?;
    }
    Ok((h, SegmentBytes { buf, start: data_at, end: total }))
}

/// Reads into `dst` from `offset` until at least `need` bytes are in (the
/// requests stay block aligned for O_DIRECT: `dst` is whole blocks and
/// reads return whole blocks short of the end of the file).
fn read_full(f: &File, dst: &mut [u8], offset: u64, need: usize) -> io::Result<()> {
    let mut got = 0;
    while got < need {
        match f.read_at(&mut dst[got..], offset + got as u64) {
            Ok(0) => return Err(invalid("shorter than it was")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn open_options(direct: bool) -> OpenOptions {
    let mut o = OpenOptions::new();
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o
}

/// O_DIRECT refused by the file system (at open) or the device (at I/O).
fn refused_direct(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// A few block-aligned buffers for reading segment files, kept between
/// reads: a read lands in pages already resident rather than in fresh ones
/// (on some machines the first touch of a page costs more than reading it
/// from the disk). Buffers are one segment file long; up to [`KEEP_READ_BUFS`]
/// are kept, more are allocated while more reads are in flight and freed
/// after.
pub(crate) struct ReadBufs {
    /// Bytes of a kept buffer: the largest file of a configured segment.
    size: usize,
    free: Mutex<Vec<AlignedBuf>>,
}

const KEEP_READ_BUFS: usize = 4;

impl ReadBufs {
    pub(crate) fn new(segment_bytes: usize) -> Arc<ReadBufs> {
        let size = (FILE_DATA_AT + segment_bytes).next_multiple_of(BLOCK);
        Arc::new(ReadBufs { size, free: Mutex::new(Vec::new()) })
    }

    /// A buffer of at least `len` bytes (a kept one if `len` fits in one).
    fn take(self: &Arc<Self>, len: usize) -> io::Result<ReadBuf> {
        let kept = if len <= self.size { self.free.lock().pop() } else { None };
        let buf = match kept {
            Some(b) => b,
            None => AlignedBuf::zeroed(len.max(self.size))?,
        };
        Ok(ReadBuf { buf: Some(buf), bufs: self.clone() })
    }
}

/// A buffer out of [`ReadBufs`], given back when dropped.
struct ReadBuf {
    /// `Some` until Drop.
    buf: Option<AlignedBuf>,
    bufs: Arc<ReadBufs>,
}

impl Deref for ReadBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.buf.as_deref().expect("taken only in Drop")
    }
}

impl std::ops::DerefMut for ReadBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().expect("taken only in Drop")
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        if buf.len() == self.bufs.size {
            let mut free = self.bufs.free.lock();
            if free.len() < KEEP_READ_BUFS {
                free.push(buf);
            }
        }
    }
}

/// A segment file's bytes as [`read_segment`] read them, in their aligned
/// buffer (given back for reuse when this is dropped). Derefs to the bytes.
pub(crate) struct SegmentBytes {
    buf: ReadBuf,
    start: usize,
    end: usize,
}

impl Deref for SegmentBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
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

    fn header(len: usize) -> FileHeader {
        FileHeader { log: LogId(4), log_version: 2, segment: SegmentId(9), len: len as u32, checksum: 77, epoch: 3 }
    }

    /// A header of an earlier version (1 or 2): 48 bytes, no epoch.
    fn old_header(h: &FileHeader, version: u16) -> Vec<u8> {
        let mut b = h.encode()[..OLD_HEADER_BYTES].to_vec();
        b[4..6].copy_from_slice(&version.to_le_bytes());
        b[OLD_CRC_AT..].fill(0);
        let crc = crc32c::crc32c(&b[..OLD_CRC_AT]);
        b[OLD_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + 7) as u8).collect()
    }

    #[test]
    fn write_then_scan_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(1 << 20);
        let h = header(5);
        let path = write_segment(dir.path(), &h, b"hello").unwrap();
        assert_eq!(path, dir.path().join("4-9.seg"));
        let (got, bytes) = read_segment(&path, &bufs).unwrap();
        assert_eq!((got, &*bytes), (h, &b"hello"[..]));
        fs::write(dir.path().join("1-1.seg.tmp"), b"partial").unwrap();
        fs::write(dir.path().join("1-2.seg"), b"short").unwrap();
        let found = scan_dir(dir.path()).unwrap();
        assert_eq!(found, vec![(h, path.clone())]);
        assert!(!dir.path().join("1-1.seg.tmp").exists());
    }

    /// Every length lands as a header block then exactly the bytes, the
    /// same whether written with O_DIRECT from an aligned source (as from a
    /// buffer), from an unaligned one, or buffered; and reads back the same
    /// with O_DIRECT or buffered.
    #[test]
    fn write_segment_round_trips_block_aligned_and_partial_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(64 << 10);
        for len in [0, 5, BLOCK - 1, BLOCK, 3 * BLOCK + 123, 64 << 10] {
            let data = pattern(len);
            let mut aligned = AlignedBuf::zeroed(len + BLOCK).unwrap();
            aligned[..len].copy_from_slice(&data);
            aligned[len..].fill(0xee); // beyond the replica: must not reach the file
            let mut unaligned = vec![0u8; len + 1];
            unaligned[1..].copy_from_slice(&data);
            let h = header(len);

            let path = write_segment(dir.path(), &h, &aligned[..len]).unwrap();
            let file = fs::read(&path).unwrap();
            assert_eq!(file.len(), FILE_DATA_AT + len, "len {len}");
            assert_eq!(file[..FILE_HEADER_BYTES], h.encode());
            assert!(file[FILE_HEADER_BYTES..FILE_DATA_AT].iter().all(|&b| b == 0));
            assert_eq!(file[FILE_DATA_AT..], data[..], "len {len}");
            for direct in [true, false] {
                let (got, bytes) = read_file(&path, &bufs, direct).unwrap();
                assert_eq!((got, &*bytes), (h, &data[..]), "len {len}, direct {direct}");
            }
            assert_eq!(read_header(&path).unwrap(), h);

            write_segment(dir.path(), &h, &unaligned[1..]).unwrap();
            assert_eq!(fs::read(&path).unwrap(), file, "unaligned source, len {len}");
            let tmp = path.with_extension("seg.tmp");
            write_file(&tmp, &h, &data, false).unwrap();
            assert_eq!(fs::read(&tmp).unwrap(), file, "buffered, len {len}");
        }
    }

    #[test]
    fn read_buffers_are_reused_and_oversized_files_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(8 << 10);
        let small = write_segment(dir.path(), &header(6000), &pattern(6000)).unwrap();
        let (_, a) = read_segment(&small, &bufs).unwrap();
        let (_, b) = read_segment(&small, &bufs).unwrap();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        drop((a, b));
        assert_eq!(bufs.free.lock().len(), 2);
        let (_, again) = read_segment(&small, &bufs).unwrap();
        assert!(again.as_ptr() == pa || again.as_ptr() == pb, "a kept buffer is reused");
        drop(again);
        // A file longer than the configured segment (written under another
        // configuration) gets a buffer of its own, not kept.
        let h = FileHeader { segment: SegmentId(10), ..header(50_000) };
        let big = write_segment(dir.path(), &h, &pattern(50_000)).unwrap();
        let (_, bytes) = read_segment(&big, &bufs).unwrap();
        assert_eq!(&*bytes, &pattern(50_000)[..]);
        drop(bytes);
        assert!(bufs.free.lock().iter().all(|b| b.len() == bufs.size));
    }

    #[test]
    fn damaged_header_blocks_and_wrong_lengths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(64 << 10);
        let h = header(BLOCK + 3);
        let path = write_segment(dir.path(), &h, &pattern(BLOCK + 3)).unwrap();
        let good = fs::read(&path).unwrap();
        let refused = |bytes: &[u8], what: &str| {
            fs::write(&path, bytes).unwrap();
            assert!(read_header(&path).is_err(), "{what}");
            assert!(read_segment(&path, &bufs).is_err(), "{what}");
        };
        refused(&good[..good.len() - 1], "one byte short");
        refused(&[&good[..], &[0]].concat(), "one byte long");
        refused(&good[..FILE_DATA_AT - 1], "shorter than the header block");
        for bit in 0..FILE_HEADER_BYTES * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            refused(&bad, &format!("bit {bit}"));
        }
        for at in [FILE_HEADER_BYTES, 1000, FILE_DATA_AT - 1] {
            let mut bad = good.clone();
            bad[at] = 1;
            refused(&bad, &format!("padding byte {at}"));
        }
        fs::write(&path, &good).unwrap();
        assert_eq!(read_segment(&path, &bufs).unwrap().0, h);
    }

    #[test]
    fn version_2_files_are_still_read_as_epoch_1() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(64 << 10);
        let h = FileHeader { epoch: 1, ..header(10_000) };
        let mut block = old_header(&h, FILE_VERSION_2);
        block.resize(FILE_DATA_AT, 0);
        let path = segment_path(dir.path(), h.log, h.segment);
        fs::write(&path, [&block[..], &pattern(10_000)].concat()).unwrap();
        assert_eq!(read_header(&path).unwrap(), h);
        let (got, bytes) = read_segment(&path, &bufs).unwrap();
        assert_eq!((got, &*bytes), (h, &pattern(10_000)[..]));
        block[OLD_HEADER_BYTES + 1] = 1;
        fs::write(&path, [&block[..], &pattern(10_000)].concat()).unwrap();
        assert!(read_header(&path).is_err(), "nonzero padding");
    }

    /// EPOCH on disk: the header block is rewritten in place (a version 2
    /// file becomes version 3), a version 1 file is rewritten whole; the
    /// bytes stay, an epoch never goes down, and a file that is gone says so.
    #[test]
    fn raise_epoch_rewrites_the_header_and_keeps_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(64 << 10);
        let h = header(3 * BLOCK + 5);
        let path = write_segment(dir.path(), &h, &pattern(3 * BLOCK + 5)).unwrap();
        assert_eq!(raise_epoch(&path, 7).unwrap(), FileHeader { epoch: 7, ..h });
        assert_eq!(raise_epoch(&path, 4).unwrap().epoch, 7, "never lowered");
        let (got, bytes) = read_segment(&path, &bufs).unwrap();
        assert_eq!((got.epoch, &*bytes), (7, &pattern(3 * BLOCK + 5)[..]));
        let file = fs::read(&path).unwrap();
        assert_eq!(file.len(), FILE_DATA_AT + 3 * BLOCK + 5);
        assert_eq!(file[EPOCH_AT..CRC_AT], 7u64.to_le_bytes());

        for version in [FILE_VERSION_2, FILE_VERSION_1] {
            let old = FileHeader { epoch: 1, segment: SegmentId(20 + version as u64), ..header(5000) };
            let mut head = old_header(&old, version);
            if version == FILE_VERSION_2 {
                head.resize(FILE_DATA_AT, 0);
            }
            let path = segment_path(dir.path(), old.log, old.segment);
            fs::write(&path, [&head[..], &pattern(5000)].concat()).unwrap();
            assert_eq!(raise_epoch(&path, 2).unwrap(), FileHeader { epoch: 2, ..old }, "version {version}");
            let (got, bytes) = read_segment(&path, &bufs).unwrap();
            assert_eq!((got, &*bytes), (FileHeader { epoch: 2, ..old }, &pattern(5000)[..]), "version {version}");
            assert_eq!(fs::read(&path).unwrap().len(), FILE_DATA_AT + 5000, "now version 3");
        }
        let gone = segment_path(dir.path(), LogId(4), SegmentId(99));
        assert_eq!(raise_epoch(&gone, 2).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(scan_dir(dir.path()).unwrap().len() == 3, "no tmp file left");
    }

    #[test]
    fn version_1_files_are_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let bufs = ReadBufs::new(64 << 10);
        let h = FileHeader { epoch: 1, ..header(10_000) };
        let v1 = old_header(&h, FILE_VERSION_1);
        let path = segment_path(dir.path(), h.log, h.segment);
        fs::write(&path, [&v1[..], &pattern(10_000)].concat()).unwrap();
        assert_eq!(read_header(&path).unwrap(), h);
        let (got, bytes) = read_segment(&path, &bufs).unwrap();
        assert_eq!((got, &*bytes), (h, &pattern(10_000)[..]));
        fs::write(&path, [&v1[..], &pattern(9_999)].concat()).unwrap();
        assert!(read_segment(&path, &bufs).is_err());
    }
}
