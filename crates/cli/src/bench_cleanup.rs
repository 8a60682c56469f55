//! What `tomus bench` leaves behind: nothing unless `--keep-data`. The blobs a scenario
//! creates are deleted when it ends (after each run where a scenario makes new ones per
//! run, and when it fails), so a cluster given with `--cluster` gets their space back after
//! its garbage-collection grace; the clusters bench starts itself live in scratch
//! directories removed when they stop, whether the scenario succeeded or not. A run that
//! cannot clean up (interrupted by Ctrl-C, killed) leaves its directories, named after its
//! process id: the next run removes those of processes that are gone ([`remove_stale`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tomus_client::{Blob, Client};
use tomus_metadata::BlobId;

/// A scratch directory (under the system temp dir) removed when dropped, unless kept.
pub struct ScratchDir {
    path: PathBuf,
    keep: bool,
}

impl ScratchDir {
    pub fn new(tag: &str, keep: bool) -> Self {
        ScratchDir {
            path: crate::scratch_dir(tag),
            keep,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Marks a directory kept with `--keep-data`, which later runs leave alone.
const KEPT: &str = "kept-by-tomus-bench";

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.path.exists() {
            return;
        }
        if self.keep {
            let _ = std::fs::write(self.path.join(KEPT), b"");
            eprintln!("bench: data kept in {} (--keep-data)", self.path.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("bench: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// The blobs a scenario created and has not deleted yet.
#[derive(Clone, Default)]
pub struct Made {
    blobs: Arc<Mutex<Vec<BlobId>>>,
    keep: bool,
}

impl Made {
    /// Blobs to delete when done, unless `keep`.
    pub fn new(keep: bool) -> Self {
        Made {
            blobs: Arc::default(),
            keep,
        }
    }

    /// Creates a blob, to be deleted by [`Made::delete_all`].
    pub async fn blob(
        &self,
        client: &Client,
        chunk_size: u64,
        replication: u32,
    ) -> tomus_wire::Result<Blob> {
        let blob = client.create_blob(chunk_size, replication).await?;
        self.record(blob.id());
        Ok(blob)
    }

    /// Notes a blob created otherwise.
    pub fn record(&self, id: BlobId) {
        self.blobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
    }

    /// Deletes every blob created so far (a failure is reported, not fatal: the figures
    /// stand).
    pub async fn delete_all(&self, client: &Client) {
        if self.keep {
            return;
        }
        let blobs = std::mem::take(&mut *self.blobs.lock().unwrap_or_else(|p| p.into_inner()));
        for id in blobs {
            if let Err(e) = client.delete_blob(id).await {
                eprintln!("bench: cannot delete blob {id}: {e}");
            }
        }
    }
}

/// Removes the scratch directories earlier runs of `tomus bench` left in the temp dir when
/// they were interrupted or killed: `tomus-bench-*-PID-*` of a process that no longer exists,
/// not kept with `--keep-data`. Returns how many it removed.
pub fn remove_stale() -> usize {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = bench_pid(&name) else {
            continue;
        };
        let path = entry.path();
        if pid == std::process::id() || alive(pid) || path.join(KEPT).exists() || !path.is_dir() {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => removed += 1,
            Err(e) => eprintln!("bench: cannot remove {}: {e}", path.display()),
        }
    }
    if removed > 0 {
        eprintln!("bench: removed {removed} scratch directories of interrupted runs");
    }
    removed
}

/// The process id in a scratch directory name of `tomus bench` (`tomus-bench-TAG-PID-HEX`).
fn bench_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("tomus-bench-")?;
    let mut parts = rest.rsplit('-');
    let hex = parts.next()?;
    let pid = parts.next()?;
    parts.next()?;
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a process with this id exists (one we may not signal counts as existing).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::bench_pid;

    #[test]
    fn scratch_names_give_their_pid() {
        assert_eq!(bench_pid("tomus-bench-s3s4-1234-9f0a"), Some(1234));
        assert_eq!(bench_pid("tomus-bench-ceiling-7-ab"), Some(7));
        assert_eq!(bench_pid("tomus-bench-1234-9f0a"), None);
        assert_eq!(bench_pid("tomus-test-x-1234-9f0a"), None);
        assert_eq!(bench_pid("tomus-bench-s1-x-9f0a"), None);
        assert_eq!(bench_pid("tomus-bench-s1-12-zz"), None);
    }
}
