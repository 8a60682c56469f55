//! Batch buffers of streaming writers, recycled.
//!
//! A [`BlobWriter`](crate::writer::BlobWriter) gathers its data into batches of several MiB
//! before storing them. A fresh buffer that size is mapped, faulted in and cleared page by
//! page as it fills, then unmapped (it was 32 MiB, above glibc's largest threshold for mapping
//! allocations): profiled under 8 concurrent 128 MiB S3 PUTs, the page faults and clearing
//! were about a seventh of the gateway's CPU. Stored batches go back to a small free list
//! shared by every writer of the process instead.

use std::sync::{Mutex, MutexGuard};

/// Buffers smaller than this are not kept (a small object's buffer is not a batch; a batch
/// rounded down to whole chunks may be a little under 8 MiB).
const POOLED_MIN: usize = 4 << 20;

/// Idle bytes kept at most (sixteen 8 MiB batches).
const MAX_IDLE_BYTES: usize = 128 << 20;

/// The process's free list.
static BATCHES: Pool = Pool::new();

/// An empty buffer with room for `capacity` bytes: an idle one when one is big enough.
pub(crate) fn take(capacity: usize) -> Vec<u8> {
    BATCHES.take(capacity)
}

/// Keeps `buf` for a later batch, unless it is small or enough are idle already.
pub(crate) fn give_back(buf: Vec<u8>) {
    BATCHES.give_back(buf)
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
