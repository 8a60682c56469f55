//! A reserve of free space on the manager's own disk. Below it, requests that start new
//! state (blobs, files, directories, versions, chunk placements) are refused with `NoSpace`,
//! while reads, deletions, completions of writes already under way and maintenance go on: the
//! manager's stores never meet a full disk in the middle of a transaction, after which redb
//! takes nothing more until reopened (see [`tomus_tables::store_error`]). HDFS's NameNode
//! keeps such a reserve too (`dfs.namenode.resource.du.reserved`) and turns read-only below
//! it. Writes are taken again as soon as the space is back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tomus_wire::disk_space::disk_space;
use tomus_wire::{Error, ErrorKind, ManagerDisk, Result};

/// The free space is looked up at most this often (a `statvfs`).
const CHECK_EVERY: Duration = Duration::from_millis(250);

pub struct DiskReserve {
    /// The manager's data directory (`None`: a store without one, which keeps no reserve).
    dir: Option<PathBuf>,
    /// Bytes to keep free (0: no reserve).
    min_free: u64,
    /// The last look: when, and the free bytes it found.
    last: Mutex<Option<(Instant, u64)>>,
    /// Whether the last look found the disk below the reserve (to log the crossings once).
    below: AtomicBool,
}

impl DiskReserve {
    /// Keeps `min_free` bytes free on the file system holding `dir` (0: no reserve).
    pub fn new(dir: PathBuf, min_free: u64) -> Self {
        DiskReserve {
            dir: Some(dir),
            min_free,
            last: Mutex::new(None),
            below: AtomicBool::new(false),
        }
    }

    /// No reserve and no disk to report (a store without a directory, in tests).
    pub fn none() -> Self {
        DiskReserve {
            dir: None,
            min_free: 0,
            last: Mutex::new(None),
            below: AtomicBool::new(false),
        }
    }

    /// `Ok` when a request that starts new state may go on; `NoSpace` below the reserve.
    pub fn check(&self) -> Result<()> {
        let Some(dir) = self.dir.as_deref().filter(|_| self.min_free > 0) else {
            return Ok(());
        };
        let free = self.free(dir);
        let below = free < self.min_free;
        if self.below.swap(below, Ordering::Relaxed) != below {
            let dir = dir.display();
            if below {
                tracing::error!(
                    "{dir} has {free} bytes free, under the manager's reserve of {}: new \
                     writes are refused until space is freed there",
                    self.min_free
                );
            } else {
                tracing::info!("{dir} has {free} bytes free again: new writes are taken");
            }
        }
        if !below {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "the manager's disk ({}) has {free} bytes free, under its reserve of {} \
                 (--min-free-space): it takes no new writes until space is freed there; \
                 reads and deletions go on",
                dir.display(),
                self.min_free
            ),
        ))
    }

    /// The disk's capacity and free space now, and the reserve, for `tomus status`.
    pub fn state(&self) -> ManagerDisk {
        let (capacity, free) = self.dir.as_deref().map_or((0, 0), disk_space);
        ManagerDisk {
            capacity,
            free,
            min_free: self.min_free,
        }
    }

    /// The free bytes, looked up again when the last look is older than [`CHECK_EVERY`].
    fn free(&self, dir: &Path) -> u64 {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some((at, free)) if at.elapsed() < CHECK_EVERY => free,
            _ => {
                let (_, free) = disk_space(dir);
                *last = Some((Instant::now(), free));
                free
            }
        }
    }
}
