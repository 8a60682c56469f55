//! A data directory held open, to find out whether it is still the one the server opened:
//! a directory removed under a running server (a scratch cleanup's `rm -rf`, an unmounted
//! volume) takes its files with it, while the server's open handles go on taking writes and
//! syncs that nothing will ever read back.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::{io_error, Result};

/// A directory and an open handle on it. The handle keeps the directory's inode allocated, so
/// one removed and made again under the same name gets another inode and is told apart from
/// the one that held the data (a removed directory's handle shows no links).
pub struct HeldDir {
    path: PathBuf,
    held: File,
}

impl HeldDir {
    /// Opens `path`, which must exist.
    pub fn open(path: &Path) -> Result<Self> {
        let held = File::open(path)
            .map_err(|e| io_error(format_args!("opening {}", path.display()), e))?;
        Ok(HeldDir {
            path: path.to_path_buf(),
            held,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is wrong with the directory, if anything, worded for the server named `who`
    /// ("provider", "manager"). Blocking: two `stat`s.
    pub fn problem(&self, who: &str) -> Option<String> {
        let dir = self.path.display();
        let held = match self.held.metadata() {
            Ok(meta) if meta.nlink() == 0 => {
                return Some(format!("{dir} was removed under the running {who}"))
            }
            Ok(meta) => meta,
            Err(e) => return Some(format!("{dir} cannot be read: {e}")),
        };
        match std::fs::metadata(&self.path) {
            Ok(now) if (now.dev(), now.ino()) != (held.dev(), held.ino()) => Some(format!(
                "{dir} was replaced under the running {who} (another directory is at its path)"
            )),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some(format!("{dir} was removed under the running {who}"))
            }
            Err(e) => Some(format!("{dir} cannot be read: {e}")),
        }
    }
}
