//! A file mapped into memory `MAP_SHARED`: the only file of the backup with
//! `unsafe`.
//!
//! Bytes written through the mapping are the file's page cache, so they
//! survive the process being killed. A [`Mapping`] owns its mapping for its
//! whole life; access goes through `&self`/`&mut self`, so Rust's borrow
//! rules give the usual exclusion as long as no other process writes the
//! file (the backup owns its data directory) and the file is never shrunk
//! while mapped (callers unmap before resizing; see `buffers.rs`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

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

/// Deallocates `offset..offset+len` of `file` keeping its size, so the range
/// reads as zeros (mapped pages included). Returns false when the file
/// system cannot punch holes; the caller then writes zeros itself.
pub(crate) fn punch_hole(file: &File, offset: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    // SAFETY: a plain system call on a descriptor we own; it takes no
    // pointers.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    r == 0
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
