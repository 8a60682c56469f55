//! A reserve of free space on the manager's own disk. Below it, requests that start new
//! state (blobs, files, directories, versions, chunk placements) are refused with `NoSpace`,
//! while reads, deletions, completions of writes already under way and maintenance go on: the
//! manager's stores never meet a full disk in the middle of a transaction, after which redb
//! takes nothing more until reopened (see [`tomus_tables::store_error`]). HDFS's NameNode
//! keeps such a reserve too (`dfs.namenode.resource.du.reserved`) and turns read-only below
//! it. Writes are taken again as soon as the space is back.
//!
//! It also watches that the directory is still the one the manager opened. One removed under
//! the running manager (an `rm -rf` of a scratch directory) takes its stores with it, while
//! their open files go on taking commits nothing will read back: a rename or a deletion would
//! be acknowledged and then lost with the process. From then on every request that changes
//! state is refused with the reason; reads go on from the open files until a restart.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tomus_wire::disk_space::disk_space;
use tomus_wire::held_dir::HeldDir;
use tomus_wire::{Error, ErrorKind, ManagerDisk, Result};

/// The free space and the directory are looked up at most this often (a `statvfs`, two
/// `stat`s).
const CHECK_EVERY: Duration = Duration::from_millis(250);

pub struct DiskReserve {
    /// The manager's data directory, held open (`None`: a store without one, which keeps no
    /// reserve).
    held: Option<HeldDir>,
    /// When the directory was last found in place.
    looked: Mutex<Option<Instant>>,
    /// What was found wrong with the directory; it stays (what vanished does not come back).
    fault: OnceLock<String>,
    /// Bytes to keep free (0: no reserve).
    min_free: u64,
    /// The last look: when, and the free bytes it found.
    last: Mutex<Option<(Instant, u64)>>,
    /// Whether the last look found the disk below the reserve (to log the crossings once).
    below: AtomicBool,
}

impl DiskReserve {
    /// Keeps `min_free` bytes free on the file system holding `dir` (0: no reserve), and
    /// watches `dir`, which must exist.
    pub fn new(dir: PathBuf, min_free: u64) -> Result<Self> {
        Ok(DiskReserve {
            held: Some(HeldDir::open(&dir)?),
            looked: Mutex::new(None),
            fault: OnceLock::new(),
            min_free,
            last: Mutex::new(None),
            below: AtomicBool::new(false),
        })
    }

    /// No reserve and no disk to report (a store without a directory, in tests).
    pub fn none() -> Self {
        DiskReserve {
            held: None,
            looked: Mutex::new(None),
            fault: OnceLock::new(),
            min_free: 0,
            last: Mutex::new(None),
            below: AtomicBool::new(false),
        }
    }

    /// `Ok` when a request that changes state may go on; `Unavailable` once the directory
    /// was found removed or replaced.
    pub fn check_dir(&self) -> Result<()> {
        match self.fault() {
            None => Ok(()),
            Some(fault) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{fault}: the manager takes no changes (they would be lost with it). \
                     Reads go on. To write again, stop it and start it on its data directory \
                     if that was moved, or restore a backup"
                ),
            )),
        }
    }

    /// What was found wrong with the data directory, looked up again when the last look is
    /// older than [`CHECK_EVERY`].
    pub fn fault(&self) -> Option<String> {
        if let Some(fault) = self.fault.get() {
            return Some(fault.clone());
        }
        let held = self.held.as_ref()?;
        let mut looked = self.looked.lock().unwrap_or_else(|p| p.into_inner());
        if looked.is_some_and(|at| at.elapsed() < CHECK_EVERY) {
            return None;
        }
        *looked = Some(Instant::now());
        let problem = held.problem("manager")?;
        let fault = self.fault.get_or_init(|| {
            tracing::error!(
                "{problem}: the namespace, the versions and the change log stored there are \
                 gone. The manager refuses every change from now on and serves reads from \
                 its open files; restart it on its data directory if that was moved, or \
                 restore a backup"
            );
            problem
        });
        Some(fault.clone())
    }

    /// `Ok` when a request that starts new state may go on: the directory is in place and
    /// above the reserve (`NoSpace` below it).
    pub fn check(&self) -> Result<()> {
        self.check_dir()?;
        let Some(dir) = self
            .held
            .as_ref()
            .map(HeldDir::path)
            .filter(|_| self.min_free > 0)
        else {
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

    /// The disk's capacity and free space now, the reserve, and the directory's fault, for
    /// `tomus status`.
    pub fn state(&self) -> ManagerDisk {
        let fault = self.fault();
        let (capacity, free) = match &self.held {
            Some(dir) if fault.is_none() => disk_space(dir.path()),
            _ => (0, 0),
        };
        ManagerDisk {
            capacity,
            free,
            min_free: self.min_free,
            fault,
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
