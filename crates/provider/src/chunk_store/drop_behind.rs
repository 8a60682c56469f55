//! How much of what a provider wrote durably stays in the page cache: the chunk files synced
//! most recently, up to a byte budget; older ones have their (clean) pages dropped.
//!
//! Sustained durable writes otherwise fill memory with pages nobody asked to keep, and what
//! the kernel pays to find and reclaim them grows with them. On this project's 2-core VM,
//! 8 writers × 256 MiB of 4 MiB files, each written and fdatasynced, moved 640–860 MiB/s
//! with 3.3–5 s of system CPU; dropping each file's pages after its sync: 2,080–2,110 MiB/s
//! with 0.6–0.7 s (HDFS DataNodes offer the same as `dfs.datanode.drop.cache.behind.writes`).
//! Keeping the newest files cached keeps reads of just-written data (the next task of a
//! workflow reading its input) out of the disk; the budget trades those reads against the
//! cost of writes (see `DEFAULT_BUDGET`).

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// At most this many files are remembered, whatever their size (small chunk files would
/// otherwise make the queue long).
const MAX_FILES: usize = 4096;

/// The budget unless told otherwise: room for the input a workflow's next task reads right
/// after it was written, small enough that a sustained write soon reuses the pages it
/// dropped. Measured here (8 writers × 256 MiB on 4 providers, each run on a fresh cluster,
/// 3 runs): 128 MiB per provider wrote 1,150–1,430 MiB/s and read it back at 2,750–2,890;
/// 256 MiB 1,050–1,350 and 3,460–3,610; 384 MiB 1,000–1,140 and 4,680–4,960; 768 MiB
/// 1,010–1,050 and 8,010–8,380 (all of it cached).
pub const DEFAULT_BUDGET: u64 = 256 << 20;

pub(super) struct CacheBehindWrites {
    budget: AtomicU64,
    recent: Mutex<Recent>,
}

#[derive(Default)]
struct Recent {
    files: VecDeque<(PathBuf, u64)>,
    bytes: u64,
}

impl CacheBehindWrites {
    /// Keeps the most recent `budget` bytes of synced chunk files cached (0: none).
    pub(super) fn new(budget: u64) -> Self {
        CacheBehindWrites {
            budget: AtomicU64::new(budget),
            recent: Mutex::new(Recent::default()),
        }
    }

    /// Changes the budget; files already remembered leave by the new one as others come.
    pub(super) fn set_budget(&self, budget: u64) {
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// `file`, the chunk file at `path` of `len` bytes, was just synced; `replaced`: it
    /// replaces a file of that name (a repeated put), whose place in the queue it takes.
    pub(super) fn synced(&self, file: &File, path: &Path, len: u64, replaced: bool) {
        let budget = self.budget.load(Ordering::Relaxed);
        if len > budget {
            drop_pages(file);
            return;
        }
        let out: Vec<PathBuf> = {
            let mut r = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if replaced {
                // Left in, the old entry would count the name twice and, once it leaves,
                // drop the pages of the new file while that one is among the newest.
                if let Some(i) = r.files.iter().position(|(p, _)| p == path) {
                    if let Some((_, n)) = r.files.remove(i) {
                        r.bytes -= n;
                    }
                }
            }
            r.files.push_back((path.to_path_buf(), len));
            r.bytes += len;
            let mut out = Vec::new();
            while r.bytes > budget || r.files.len() > MAX_FILES {
                let Some((p, n)) = r.files.pop_front() else {
                    break;
                };
                r.bytes -= n;
                out.push(p);
            }
            out
        };
        for p in out {
            // Deleted or moved since: nothing of it to drop, or no longer ours to manage.
            if let Ok(f) = File::open(&p) {
                drop_pages(&f);
            }
        }
    }
}

/// Asks the kernel to drop `file`'s clean pages. Advisory: a refusal changes nothing that
/// matters.
fn drop_pages(file: &File) {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor stays open for
    // the lifetime of `file`, which outlives the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        tracing::debug!(
            "posix_fadvise(DONTNEED) on a chunk file: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
}
