//! Read windows of streamed GETs, recycled.
//!
//! A GET reads its object window by window into buffers that hyper then writes to the
//! socket. A fresh multi-MiB buffer per window costs a `memset` (the allocation must be zeroed
//! before the store writes into it) and, once glibc returns it to the kernel, page faults and
//! page clearing on the next one: profiled under 8 concurrent 128 MiB GETs, that was ~13% of
//! the gateway's CPU. Buffers here go back to a small free list when hyper drops the bytes
//! (`Bytes::from_owner`), so the steady state allocates and zeroes nothing.

use std::sync::{Arc, Mutex};

/// Windows shorter than this are allocated exactly and not recycled (a 4 KiB GET must not
/// pin a whole window).
const POOLED_MIN: usize = 1 << 20;

/// A free list of equally sized buffers.
pub(crate) struct WindowPool {
    size: usize,
    /// At most this many idle buffers are kept (`size × max_idle` bytes at most).
    max_idle: usize,
    idle: Mutex<Vec<Vec<u8>>>,
}

impl WindowPool {
    pub fn new(size: usize, max_idle: usize) -> Arc<WindowPool> {
        Arc::new(WindowPool {
            size,
            max_idle,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A buffer of `len` bytes (at most the pool's size) for the store to fill, and what turns
    /// it into response bytes.
    pub fn take(self: &Arc<Self>, len: usize) -> Window {
        if len < POOLED_MIN || len > self.size {
            return Window {
                buf: vec![0; len],
                len,
                pool: None,
            };
        }
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        Window {
            buf: idle.unwrap_or_else(|| vec![0; self.size]),
            len,
            pool: Some(self.clone()),
        }
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push(buf);
        }
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A window being filled, then sent; its buffer returns to the pool when the bytes are dropped.
pub(crate) struct Window {
    buf: Vec<u8>,
    len: usize,
    pool: Option<Arc<WindowPool>>,
}

impl Window {
    #[cfg(test)]
    fn into_bytes(self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self)
    }
}

impl AsMut<[u8]> for Window {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_windows_are_reused_and_small_ones_are_not_pooled() {
        let pool = WindowPool::new(4 << 20, 2);
        let mut w = pool.take(3 << 20);
        w.as_mut().fill(7);
        let first = w.buf.as_ptr();
        let bytes = w.into_bytes();
        assert_eq!((bytes.len(), bytes[0]), (3 << 20, 7));
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(pool.idle(), 0, "a slice still holds the window");
        drop(slice);
        assert_eq!(pool.idle(), 1);
        let again = pool.take(4 << 20);
        assert_eq!(again.buf.as_ptr(), first);
        assert_eq!(again.as_ref().len(), 4 << 20);
        let small = pool.take(4096);
        assert!(small.pool.is_none());
        drop((again, small));
        assert_eq!(pool.idle(), 1);
    }

    #[test]
    fn at_most_max_idle_buffers_are_kept() {
        let pool = WindowPool::new(1 << 20, 2);
        let windows: Vec<_> = (0..4).map(|_| pool.take(1 << 20)).collect();
        drop(windows);
        assert_eq!(pool.idle(), 2);
    }
}
