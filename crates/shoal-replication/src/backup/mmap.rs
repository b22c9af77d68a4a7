//! Memory the backup manages itself: a file mapped into memory
//! `MAP_SHARED` ([`Mapping`]) and heap blocks aligned for O_DIRECT
//! ([`AlignedBuf`]). The only file of the backup with `unsafe`.
//!
//! Bytes written through the mapping are the file's page cache, so they
//! survive the process being killed. A [`Mapping`] owns its mapping for its
//! whole life; access goes through `&self`/`&mut self`, so Rust's borrow
//! rules give the usual exclusion as long as no other process writes the
//! file (the backup owns its data directory) and the file is never shrunk
//! while mapped (callers unmap before resizing; see `buffers.rs`).

use std::alloc::{self, Layout};
use std::fs::File;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// The alignment of [`AlignedBuf`] and the unit of O_DIRECT I/O: buffer
/// addresses, file offsets and lengths are multiples of it. 4096 is a
/// multiple of every common logical block size (512 and 4096); a device
/// with larger blocks refuses such I/O with EINVAL and callers fall back to
/// buffered I/O.
pub(crate) const BLOCK: usize = 4096;

/// `len` bytes of a file, mapped read-write and shared.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; shared access
// is `&self` reads only and writes need `&mut self`.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file`, which must be at least that
    /// long (callers `set_len` first) and opened read-write.
    pub(crate) fn new(file: &File, len: usize) -> io::Result<Mapping> {
        if len == 0 || file.metadata()?.len() < len as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "file shorter than the mapping"));
        }
        // SAFETY: no address hint; a shared read-write mapping of a file we
        // hold open read-write and that is at least `len` bytes long. The
        // result is checked before use and unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a live mapping owned by self (unmapped
        // only in Drop); writes need `&mut self`, so none happens while this
        // borrow lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Writes the pages holding `start..end` to the file and waits (msync
    /// MS_SYNC): the `sync_open` durability of open buffers.
    pub(crate) fn sync(&self, start: usize, end: usize) -> io::Result<()> {
        let end = end.min(self.len);
        if start >= end {
            return Ok(());
        }
        let page = page_size();
        let first = start / page * page;
        // SAFETY: `first..end` lies within our mapping and `first` is page
        // aligned as msync requires; msync does not touch the bytes.
        let r = unsafe { libc::msync(self.ptr.as_ptr().add(first) as *mut libc::c_void, end - first, libc::MS_SYNC) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region `new` mapped; no borrow of it can
        // outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Zeroed heap memory whose address and length are multiples of [`BLOCK`],
/// to read and write files with O_DIRECT. Derefs to its bytes.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the allocation is plain memory owned by this value alone; shared
// access is `&self` reads only and writes need `&mut self`.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes rounded up to whole blocks (at least one), all zero.
    /// Errors (rather than aborting) if the memory cannot be had.
    pub(crate) fn zeroed(len: usize) -> io::Result<AlignedBuf> {
        let size = len.max(1).checked_next_multiple_of(BLOCK);
        let layout = size
            .and_then(|size| Layout::from_size_align(size, BLOCK).ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "aligned buffer too large"))?;
        // SAFETY: the layout's size is nonzero (at least one block).
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "aligned buffer"))?;
        Ok(AlignedBuf { ptr, layout })
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `layout.size()` bytes allocated (and
        // initialized, zeroed) by `zeroed` and owned by self until Drop;
        // writes need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: frees exactly what `zeroed` allocated, with its layout; no
        // borrow of it can outlive `self`.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
