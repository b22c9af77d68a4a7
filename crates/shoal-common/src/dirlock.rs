//! One process at a time per directory.
//!
//! A [`DirLock`] is an exclusive `flock` on a file inside a directory,
//! held for as long as the value lives (and by the kernel until the
//! process is gone, so a SIGKILL frees it too). The file also holds the
//! holder's PID, for the message a second process gets. Who takes one:
//! `shoal local` on its root, the coordinator's directory store, and a
//! cluster server on its data directory, so that two processes can never
//! write one directory at once.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// An exclusive lock on `<dir>/<name>`, released on drop.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    /// Holds the lock: closing the file releases it.
    _file: File,
}

impl DirLock {
    /// Takes the lock on `<dir>/<name>` (creating the file) without
    /// waiting, and writes this process's PID into it. Errors: the file
    /// cannot be opened or written, or another holder has it
    /// ([`io::ErrorKind::WouldBlock`], the message naming the file and the
    /// PID it holds).
    pub fn acquire(dir: &Path, name: &str) -> io::Result<DirLock> {
        let path = dir.join(name);
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => String::new(),
                    pid => format!(" (process {pid})"),
                };
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is locked by another running process{holder}", path.display()),
                ));
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        Ok(DirLock { path, _file: file })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_refuses_a_second_holder_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("shoal-dirlock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = DirLock::acquire(&dir, "lock").unwrap();
        assert_eq!(std::fs::read_to_string(first.path()).unwrap().trim(), std::process::id().to_string());
        let err = DirLock::acquire(&dir, "lock").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(err.to_string().contains(&format!("(process {})", std::process::id())), "{err}");
        drop(first);
        let again = DirLock::acquire(&dir, "lock").unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
