//! Batch buffers of streaming writers, recycled.
//!
//! A [`BlobWriter`](crate::writer::BlobWriter) gathers its data into batches of several MiB
//! before storing them. A fresh buffer that size is mapped, faulted in and cleared page by
//! page as it fills, then unmapped (it was 32 MiB, above glibc's largest threshold for mapping
//! allocations): profiled under 8 concurrent 128 MiB S3 PUTs, the page faults and clearing
//! were about a seventh of the gateway's CPU. Stored batches go back to a small free list
//! shared by every writer of the process instead.
//!
//! The batches being stored by all writers of the process share one budget of memory: a
//! writer whose full batch does not fit waits until others' batches are stored. Without it, a
//! server taking hundreds of concurrent uploads (`s5cmd` runs 256 at once by default) would
//! hold up to 56 MiB for each of them; with it, each holds at most the batch it is filling.
//! Filling batches take no share: a thread that fills many writers in turn (a program writing
//! hundreds of partition files round-robin) must never wait for room that only its own other
//! writers hold.

use std::sync::{LazyLock, Mutex, MutexGuard};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Buffers smaller than this are not kept (a small object's buffer is not a batch; a batch
/// rounded down to whole chunks may be a little under 8 MiB).
const POOLED_MIN: usize = 4 << 20;

/// Idle bytes kept at most (sixteen 8 MiB batches).
const MAX_IDLE_BYTES: usize = 128 << 20;

/// The process's free list.
static BATCHES: Pool = Pool::new();

/// The process's budget.
static BUDGET: LazyLock<Budget> = LazyLock::new(|| Budget::new(budget_mib()));

const MIB: usize = 1 << 20;

/// An empty buffer with room for `capacity` bytes: an idle one when one is big enough.
pub(crate) fn take(capacity: usize) -> Vec<u8> {
    BATCHES.take(capacity)
}

/// A share of the process's budget for a batch of `bytes` to be stored, once there is room
/// for it. Keep it until the batch is stored.
pub(crate) async fn reserve(bytes: usize) -> Share {
    BUDGET.reserve(bytes).await
}

/// Keeps `buf` for a later batch, unless it is small or enough are idle already.
pub(crate) fn give_back(buf: Vec<u8>) {
    BATCHES.give_back(buf)
}

/// Bytes the writers of this process may have being stored at once, in MiB (see
/// [`budget_from`]).
fn budget_mib() -> u32 {
    let set = std::env::var("TOMUS_WRITE_BUFFER_MIB").ok();
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    budget_from(set.as_deref(), meminfo.as_deref())
}

/// The budget in MiB: `set` (`TOMUS_WRITE_BUFFER_MIB`) if it is a number, else a quarter of
/// the `MemTotal` of `meminfo`, from 256 MiB to 16 GiB (1 GiB where it is not known).
fn budget_from(set: Option<&str>, meminfo: Option<&str>) -> u32 {
    if let Some(set) = set {
        match set.trim().parse::<u32>() {
            Ok(mib) => return mib.max(1),
            Err(e) => tracing::warn!(
                "TOMUS_WRITE_BUFFER_MIB={set:?} is not a number of MiB ({e}); using the default"
            ),
        }
    }
    let total_kib = meminfo.and_then(|info| {
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    match total_kib {
        Some(kib) => (kib / 1024 / 4).clamp(256, 16 << 10) as u32,
        None => 1 << 10,
    }
}

/// A budget of memory for batches, in MiB.
struct Budget {
    permits: Semaphore,
    mib: u32,
}

/// A batch's share of the budget, given back when dropped.
pub(crate) struct Share {
    _permit: Option<SemaphorePermit<'static>>,
}

impl Budget {
    fn new(mib: u32) -> Budget {
        Budget {
            permits: Semaphore::new(mib as usize),
            mib,
        }
    }

    /// Waits for room for `bytes` (all of the budget, for a batch larger than it).
    async fn reserve(&'static self, bytes: usize) -> Share {
        let want = (bytes.div_ceil(MIB) as u32).clamp(1, self.mib);
        // The semaphore is never closed, so this only waits.
        Share {
            _permit: self.permits.acquire_many(want).await.ok(),
        }
    }
}

struct Pool {
    idle: Mutex<Vec<Vec<u8>>>,
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            idle: Mutex::new(Vec::new()),
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        // The list is changed by single pushes and removals, so a poisoned lock is still good.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn take(&self, capacity: usize) -> Vec<u8> {
        let mut idle = self.idle();
        match idle.iter().position(|buf| buf.capacity() >= capacity) {
            Some(i) => idle.swap_remove(i),
            None => Vec::with_capacity(capacity),
        }
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() < POOLED_MIN {
            return;
        }
        let mut idle = self.idle();
        let held: usize = idle.iter().map(Vec::capacity).sum();
        if held + buf.capacity() <= MAX_IDLE_BYTES {
            buf.clear();
            idle.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_comes_back_empty_to_the_next_writer() {
        let pool = Pool::new();
        let mut buf = pool.take(32 << 20);
        buf.extend_from_slice(&[7; 100]);
        let at = buf.as_ptr();
        pool.give_back(buf);
        let again = pool.take(32 << 20);
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty());
        // Too small for what is asked: a new one.
        pool.give_back(again);
        assert!(pool.take(64 << 20).capacity() >= 64 << 20);
        assert_eq!(pool.idle().len(), 1);
    }

    #[tokio::test]
    async fn batches_wait_for_room_in_the_budget() {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(16)));
        let first = budget.reserve(8 * MIB).await;
        let second = budget.reserve(8 * MIB - 1).await;
        let wait = std::time::Duration::from_millis(50);
        let third = tokio::time::timeout(wait, budget.reserve(1)).await;
        assert!(third.is_err(), "a batch got room past the budget");
        drop(first);
        let third = tokio::time::timeout(wait, budget.reserve(8 * MIB)).await;
        assert!(third.is_ok(), "a returned share was not reused");
        // Larger than the whole budget: it waits for all of it, then goes alone.
        drop(second);
        let huge = tokio::time::timeout(wait, budget.reserve(64 * MIB)).await;
        assert!(huge.is_err(), "the huge batch did not wait for the others");
        drop(third);
        let huge = tokio::time::timeout(wait, budget.reserve(64 * MIB)).await;
        assert!(huge.is_ok());
        assert_eq!(budget.permits.available_permits(), 0);
    }

    #[test]
    fn the_budget_follows_the_machine_within_bounds_unless_set() {
        let mem = |kib: u64| format!("MemFree:  1 kB\nMemTotal:  {kib} kB\n");
        assert_eq!(budget_from(None, Some(&mem(24 << 20))), 6 << 10);
        assert_eq!(budget_from(None, Some(&mem(512 << 10))), 256);
        assert_eq!(budget_from(None, Some(&mem(1 << 30))), 16 << 10);
        assert_eq!(budget_from(None, Some("MemTotal: lots")), 1 << 10);
        assert_eq!(budget_from(None, None), 1 << 10);
        assert_eq!(budget_from(Some(" 64 "), Some(&mem(24 << 20))), 64);
        assert_eq!(budget_from(Some("0"), None), 1);
        assert_eq!(budget_from(Some("64MiB"), Some(&mem(24 << 20))), 6 << 10);
    }

    #[test]
    fn small_buffers_are_dropped_and_idle_bytes_are_bounded() {
        let pool = Pool::new();
        pool.give_back(Vec::with_capacity(64 << 10));
        assert_eq!(pool.idle().len(), 0);
        for _ in 0..10 {
            pool.give_back(Vec::with_capacity(32 << 20));
        }
        let held: usize = pool.idle().iter().map(Vec::capacity).sum();
        assert!(held <= MAX_IDLE_BYTES, "{held} bytes idle");
        assert_eq!(pool.idle().len(), MAX_IDLE_BYTES / (32 << 20));
    }
}
