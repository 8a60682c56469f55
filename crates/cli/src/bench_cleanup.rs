//! What `tomus bench` leaves behind: nothing unless `--keep-data`. The blobs a scenario
//! creates are deleted when it ends (after each run where a scenario makes new ones per
//! run, and when it fails), so a cluster given with `--cluster` gets their space back after
//! its garbage-collection grace; the clusters bench starts itself live in scratch
//! directories removed when they stop, whether the scenario succeeded or not.

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

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.path.exists() {
            return;
        }
        if self.keep {
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
