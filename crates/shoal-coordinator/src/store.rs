//! Where the coordinator's state lives between runs.
//!
//! The coordinator sees one opaque byte string (the encoded
//! [`ClusterState`](crate::state::ClusterState)) behind [`StateStore`]: it
//! loads it once at start and saves the whole of it after every change,
//! before answering the request that made the change. [`DirStore`] keeps it
//! in a local directory (the embedded default). A store in a consensus
//! service such as etcd implements the same trait: `load` reads one key,
//! `save` writes it with a compare-and-swap on the revision it last read or
//! wrote, failing if another coordinator wrote in between, so that only the
//! lease holder's writes land (`docs/coordinator.md`, "State store").

use parking_lot::Mutex;
use shoal_common::dirlock::DirLock;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Durable storage for the coordinator's state.
///
/// Contract: after `save(b)` returns `Ok`, every later `load` (also after
/// a crash of this process or machine, as far as the medium allows)
/// returns `b` or the bytes of a later successful `save`; a `save` that
/// fails or is cut short by a crash leaves the previous bytes loadable.
/// Calls may come from any thread; the coordinator never overlaps two
/// `save`s.
pub trait StateStore: Send + Sync {
    /// The last saved bytes, or `None` if nothing was ever saved.
    fn load(&self) -> io::Result<Option<Vec<u8>>>;
    /// Replaces the saved bytes with `state`, atomically and durably.
    fn save(&self, state: &[u8]) -> io::Result<()>;
}

/// Name of the state file inside the data directory.
pub const STATE_FILE: &str = "coordinator.json";
/// Name of the lock file a [`DirStore`] holds in its directory.
pub const LOCK_FILE: &str = "coordinator.lock";
/// Name of the file a save writes before renaming it over [`STATE_FILE`].
pub const STATE_TMP_FILE: &str = "coordinator.json.tmp";

/// The state as `<dir>/coordinator.json`, replaced atomically: a save
/// writes `coordinator.json.tmp`, syncs it, renames it over
/// `coordinator.json` and syncs the directory, so a crash at any point
/// leaves either the old file or the new one. A leftover `.tmp` is ignored
/// and overwritten by the next save.
///
/// One process at a time: the store holds an exclusive lock on
/// [`LOCK_FILE`] in the directory for as long as it lives, and `open`
/// fails while another process (or another `DirStore`) holds it.
pub struct DirStore {
    dir: PathBuf,
    _lock: DirLock,
    /// Serializes saves from one process (the trait allows any thread).
    saving: Mutex<()>,
}

impl DirStore {
    /// Uses `dir`, creating it (and its parents) if missing. Errors: the
    /// directory cannot be created, or its lock is held
    /// ([`io::ErrorKind::WouldBlock`]: another coordinator uses it).
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<DirStore> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let lock = DirLock::acquire(&dir, LOCK_FILE)?;
        Ok(DirStore { dir, _lock: lock, saving: Mutex::new(()) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the state file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }
}

impl StateStore for DirStore {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path()) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn save(&self, state: &[u8]) -> io::Result<()> {
        let _guard = self.saving.lock();
        let tmp = self.dir.join(STATE_TMP_FILE);
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        file.write_all(state)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, self.path())?;
        // The rename is durable only once the directory entry is.
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_of_an_empty_directory_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::open(dir.path().join("a/b")).unwrap();
        assert!(store.dir().is_dir());
        assert_eq!(store.load().unwrap(), None);
    }

    #[test]
    fn save_replaces_and_load_returns_the_last_save() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::open(dir.path()).unwrap();
        store.save(b"first, and longer than the second").unwrap();
        store.save(b"second").unwrap();
        assert_eq!(store.load().unwrap().as_deref(), Some(&b"second"[..]));
        assert!(!dir.path().join(STATE_TMP_FILE).exists());
        // Another store on the same directory (a restart) sees it, once
        // this one is gone.
        let err = DirStore::open(dir.path()).err().expect("the directory is locked");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(store);
        assert_eq!(DirStore::open(dir.path()).unwrap().load().unwrap().as_deref(), Some(&b"second"[..]));
    }

    #[test]
    fn save_cut_short_leaves_the_previous_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::open(dir.path()).unwrap();
        store.save(b"committed").unwrap();
        drop(store);
        // A crash after writing the temporary file but before the rename.
        fs::write(dir.path().join(STATE_TMP_FILE), b"half writ").unwrap();
        let reopened = DirStore::open(dir.path()).unwrap();
        assert_eq!(reopened.load().unwrap().as_deref(), Some(&b"committed"[..]));
        reopened.save(b"next").unwrap();
        assert_eq!(reopened.load().unwrap().as_deref(), Some(&b"next"[..]));
    }

    #[test]
    fn save_into_a_vanished_directory_fails_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::open(dir.path().join("state")).unwrap();
        fs::remove_dir_all(store.dir()).unwrap();
        assert!(store.save(b"x").is_err());
        assert_eq!(store.load().unwrap(), None);
    }
}
