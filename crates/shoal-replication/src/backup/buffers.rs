//! Segment buffers: files `buffers/buf-<n>` mapped `MAP_SHARED`, each a
//! 4 KiB metadata block followed by one segment's bytes.
//!
//! Invariant: a free buffer's data is all zeros, so whatever prefix of a
//! segment has arrived is followed by zeros and `format::scan` finds where
//! the complete appends end. Data is zeroed when a buffer is released, by
//! writing zeros through the mapping over what may have been written. The
//! pages stay resident for the next replica: punching a hole instead would
//! free them, and on some machines the first write to a fresh page costs
//! far more than the zeroing (`docs/replication.md`).
//!
//! The metadata block (all integers little-endian):
//!
//! ```text
//!  0  magic "SHBF"          4   format version u16 (2)   6  state u8 (0 free, 1 open, 2 closed)
//!  7  reserved u8 (0)       8   log id u64               16 log version u64
//!  24 segment id u64        32  segment size u32          36 length u32 (closed)
//!  40 last checksum u32     44  replica epoch u64         52 CRC32C of bytes 0..52 u32
//! ```
//!
//! It is written at OPEN, rewritten at CLOSE and at EPOCH, and cleared when
//! the buffer is released. A block whose magic or CRC does not check reads
//! as free. Version 1 blocks (earlier builds: no epoch, the CRC at 44 over
//! bytes 0..44) read as epoch 1.

use super::mmap::Mapping;
use parking_lot::{Mutex, MutexGuard};
use shoal_common::{LogId, SegmentId};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Bytes of the metadata block before a buffer's data.
pub(crate) const META_BYTES: usize = 4096;
const META_MAGIC: [u8; 4] = *b"SHBF";
const META_VERSION: u16 = 2;
const META_EPOCH_AT: usize = 44;
const META_CRC_AT: usize = 52;
const META_USED: usize = 56;
/// Version 1: no epoch, the CRC right after the last checksum.
const META_VERSION_1: u16 = 1;
const META_CRC_AT_1: usize = 44;
const _: () = assert!(META_EPOCH_AT + 8 == META_CRC_AT && META_CRC_AT + 4 == META_USED && META_USED <= META_BYTES);

/// What a buffer holds, as its metadata block says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub log: LogId,
    pub log_version: u64,
    pub segment: SegmentId,
    /// The segment size the master opened the replica with.
    pub size: u32,
    pub state: MetaState,
    /// The replica's epoch (OPEN, raised by EPOCH).
    pub epoch: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaState {
    Open,
    Closed { len: u32, checksum: u32 },
}

impl Meta {
    pub fn encode(&self) -> [u8; META_USED] {
        let mut b = [0u8; META_USED];
        b[0..4].copy_from_slice(&META_MAGIC);
        b[4..6].copy_from_slice(&META_VERSION.to_le_bytes());
        let (state, len, checksum) = match self.state {
            MetaState::Open => (1u8, 0u32, 0u32),
            MetaState::Closed { len, checksum } => (2, len, checksum),
        };
        b[6] = state;
        b[8..16].copy_from_slice(&self.log.0.to_le_bytes());
        b[16..24].copy_from_slice(&self.log_version.to_le_bytes());
        b[24..32].copy_from_slice(&self.segment.0.to_le_bytes());
        b[32..36].copy_from_slice(&self.size.to_le_bytes());
        b[36..40].copy_from_slice(&len.to_le_bytes());
        b[40..44].copy_from_slice(&checksum.to_le_bytes());
        b[META_EPOCH_AT..META_CRC_AT].copy_from_slice(&self.epoch.to_le_bytes());
        let crc = crc32c::crc32c(&b[..META_CRC_AT]);
        b[META_CRC_AT..META_USED].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a metadata block (version 2, or 1 as epoch 1); `None` for a
    /// free or unreadable one.
    pub fn decode(b: &[u8]) -> Option<Meta> {
        let b = b.get(..META_USED)?;
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let (crc_at, epoch) = match u16::from_le_bytes([b[4], b[5]]) {
            META_VERSION => (META_CRC_AT, u64_at(META_EPOCH_AT)),
            META_VERSION_1 => (META_CRC_AT_1, 1),
            _ => return None,
        };
        if b[0..4] != META_MAGIC || b[7] != 0 || epoch == 0 || crc32c::crc32c(&b[..crc_at]) != u32_at(crc_at) {
            return None;
        }
        let state = match b[6] {
            1 => MetaState::Open,
            2 => MetaState::Closed { len: u32_at(36), checksum: u32_at(40) },
            _ => return None,
        };
        Some(Meta {
            log: LogId(u64_at(8)),
            log_version: u64_at(16),
            segment: SegmentId(u64_at(24)),
            size: u32_at(32),
            state,
            epoch,
        })
    }
}

/// One buffer file. Everything about it is behind one lock: the connection
/// receiving into it holds the lock for each non-blocking read, readers
/// and the flusher for their copy or scan.
pub(crate) struct Buffer {
    pub idx: usize,
    pub path: PathBuf,
    inner: Mutex<BufInner>,
}

pub(crate) struct BufInner {
    file: File,
    map: Mapping,
    /// What the buffer holds; `None` when free.
    pub meta: Option<Meta>,
    /// Changes whenever the buffer is given to a replica (0 while free):
    /// holders of an older generation have lost it.
    pub gen: u64,
    /// Bytes received so far (for a buffer found open at start: its size,
    /// since only a scan can tell).
    pub received: u32,
    /// Data bytes that may be nonzero (what releasing must zero).
    dirty: usize,
}

impl Buffer {
    /// Opens (or creates) `buf-<idx>` in `dir`. A new file, or a file
    /// holding no replica, is sized for `capacity` data bytes and zeroed; a
    /// file holding a replica is kept as it is.
    pub(crate) fn open(dir: &Path, idx: usize, capacity: usize) -> io::Result<Buffer> {
        let path = dir.join(format!("buf-{idx}"));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        let file_len = file.metadata()?.len() as usize;
        let mut meta = None;
        if file_len > META_BYTES {
            let mut block = [0u8; META_USED];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut block, 0)?;
            meta = Meta::decode(&block).filter(|m| m.size as usize <= file_len - META_BYTES);
        }
        let map = match meta {
            Some(_) => Mapping::new(&file, file_len)?,
            None => {
                // Free: make it exactly the configured size and all zeros.
                file.set_len(0)?;
                file.set_len((META_BYTES + capacity) as u64)?;
                Mapping::new(&file, META_BYTES + capacity)?
            }
        };
        let received = meta.map_or(0, |m| m.size);
        let dirty = map.len() - META_BYTES;
        let inner = BufInner { file, map, meta, gen: 0, received, dirty: if meta.is_some() { dirty } else { 0 } };
        Ok(Buffer { idx, path, inner: Mutex::new(inner) })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, BufInner> {
        self.inner.lock()
    }
}

impl BufInner {
    /// Data bytes this buffer can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.map.len() - META_BYTES
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.map.bytes()[META_BYTES..]
    }

    /// The data bytes `start..end`, to receive into. Callers check the range
    /// against the replica's size first.
    pub(crate) fn data_mut(&mut self, start: usize, end: usize) -> &mut [u8] {
        &mut self.map.bytes_mut()[META_BYTES + start..META_BYTES + end]
    }

    /// Records that data up to `end` was written.
    pub(crate) fn written(&mut self, end: usize) {
        self.received = end as u32;
        self.dirty = self.dirty.max(end);
    }

    /// Gives a free (zeroed) buffer to a replica, or restarts the replica
    /// this buffer holds: zeroes what was written and writes `meta`.
    pub(crate) fn assign(&mut self, meta: Meta, gen: u64, sync: bool) -> io::Result<()> {
        self.zero_data();
        self.meta = Some(meta);
        self.gen = gen;
        self.received = 0;
        self.write_meta(sync)
    }

    /// Raises the replica's epoch to `epoch` (never lowers it) and rewrites
    /// the metadata block; `sync` makes it durable before returning.
    pub(crate) fn raise_epoch(&mut self, epoch: u64, sync: bool) -> io::Result<()> {
        let meta = self.meta.as_mut().ok_or_else(|| io::Error::other("raising the epoch of a free buffer"))?;
        meta.epoch = meta.epoch.max(epoch);
        self.write_meta(sync)
    }

    /// Records the replica as closed at `len` with `checksum`.
    pub(crate) fn close(&mut self, len: u32, checksum: u32, sync: bool) -> io::Result<()> {
        let meta = self.meta.as_mut().ok_or_else(|| io::Error::other("closing a free buffer"))?;
        meta.state = MetaState::Closed { len, checksum };
        self.write_meta(sync)
    }

    /// Frees the buffer: clears its metadata, zeroes its data and, if its
    /// size is not `capacity`, resizes it.
    pub(crate) fn release(&mut self, capacity: usize) -> io::Result<()> {
        self.meta = None;
        self.gen = 0;
        self.received = 0;
        self.map.bytes_mut()[..META_USED].fill(0);
        if self.capacity() != capacity {
            self.file.set_len(0)?;
            self.file.set_len((META_BYTES + capacity) as u64)?;
            // The old mapping is not touched between the truncation and
            // this assignment, which unmaps it.
            self.map = Mapping::new(&self.file, META_BYTES + capacity)?;
            self.dirty = 0;
            return Ok(());
        }
        self.zero_data();
        Ok(())
    }

    /// Writes the pages of data `start..end` to the file (sync_open).
    pub(crate) fn sync_data(&self, start: usize, end: usize) -> io::Result<()> {
        self.map.sync(META_BYTES + start, META_BYTES + end)
    }

    fn write_meta(&mut self, sync: bool) -> io::Result<()> {
        let block = match self.meta {
            Some(m) => m.encode(),
            None => [0; META_USED],
        };
        self.map.bytes_mut()[..META_USED].copy_from_slice(&block);
        if sync {
            self.map.sync(0, META_USED)?;
        }
        Ok(())
    }

    fn zero_data(&mut self) {
        let dirty = self.dirty.min(self.capacity());
        self.map.bytes_mut()[META_BYTES..META_BYTES + dirty].fill(0);
        self.dirty = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_a_flipped_bit() {
        let m = Meta {
            log: LogId(7),
            log_version: 3,
            segment: SegmentId(12),
            size: 1 << 20,
            state: MetaState::Closed { len: 999, checksum: 0xdead_beef },
            epoch: 5,
        };
        let b = m.encode();
        assert_eq!(Meta::decode(&b), Some(m));
        assert_eq!(b[META_EPOCH_AT..META_CRC_AT], 5u64.to_le_bytes());
        for bit in 0..META_USED * 8 {
            let mut bad = b;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(Meta::decode(&bad), None, "bit {bit}");
        }
        assert_eq!(Meta::decode(&[0; META_USED]), None);
    }

    #[test]
    fn version_1_blocks_read_as_epoch_1() {
        let m = Meta {
            log: LogId(7),
            log_version: 3,
            segment: SegmentId(12),
            size: 1 << 20,
            state: MetaState::Open,
            epoch: 1,
        };
        let mut b = m.encode();
        b[4..6].copy_from_slice(&META_VERSION_1.to_le_bytes());
        b[META_CRC_AT_1..].fill(0);
        let crc = crc32c::crc32c(&b[..META_CRC_AT_1]);
        b[META_CRC_AT_1..META_CRC_AT_1 + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Meta::decode(&b), Some(m));
    }

    #[test]
    fn release_zeroes_what_was_written_and_keeps_the_file_size() {
        let dir = tempfile::tempdir().unwrap();
        let buf = Buffer::open(dir.path(), 0, 64 << 10).unwrap();
        let meta = Meta {
            log: LogId(1),
            log_version: 1,
            segment: SegmentId(2),
            size: 64 << 10,
            state: MetaState::Open,
            epoch: 1,
        };
        let mut g = buf.lock();
        g.assign(meta, 5, true).unwrap();
        g.data_mut(0, 10_000).fill(0xab);
        g.written(10_000);
        g.close(10_000, 1, false).unwrap();
        g.raise_epoch(3, true).unwrap();
        g.raise_epoch(2, false).unwrap();
        drop(g);
        // A second open of the same file sees the replica (as after a kill).
        let again = Buffer::open(dir.path(), 0, 64 << 10).unwrap();
        assert_eq!(again.lock().meta.map(|m| m.state), Some(MetaState::Closed { len: 10_000, checksum: 1 }));
        assert_eq!(again.lock().meta.map(|m| m.epoch), Some(3), "epochs only grow");
        assert!(again.lock().data()[..10_000].iter().all(|b| *b == 0xab));
        let mut g = buf.lock();
        g.release(64 << 10).unwrap();
        assert!(g.data().iter().all(|b| *b == 0));
        drop(g);
        assert_eq!(std::fs::metadata(&buf.path).unwrap().len(), (META_BYTES + (64 << 10)) as u64);
        assert!(Buffer::open(dir.path(), 0, 64 << 10).unwrap().lock().meta.is_none());
    }

    #[test]
    fn release_resizes_a_buffer_of_another_size() {
        let dir = tempfile::tempdir().unwrap();
        let buf = Buffer::open(dir.path(), 3, 8 << 10).unwrap();
        let meta = Meta {
            log: LogId(1),
            log_version: 1,
            segment: SegmentId(2),
            size: 8 << 10,
            state: MetaState::Open,
            epoch: 1,
        };
        buf.lock().assign(meta, 1, false).unwrap();
        drop(buf);
        let buf = Buffer::open(dir.path(), 3, 32 << 10).unwrap();
        assert_eq!(buf.lock().capacity(), 8 << 10, "a buffer holding a replica keeps its size");
        buf.lock().release(32 << 10).unwrap();
        assert_eq!(buf.lock().capacity(), 32 << 10);
        assert!(buf.lock().data().iter().all(|b| *b == 0));
    }
}
