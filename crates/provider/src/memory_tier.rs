//! A bounded LRU cache of whole chunks, so recently written data is read back without disk I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use tomus_metadata::ChunkId;

/// Cheap to clone: clones share the cache (the metrics read its size).
#[derive(Clone)]
pub struct MemoryTier {
    capacity: u64,
    state: std::sync::Arc<Mutex<Lru>>,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<ChunkId, Entry>,
    /// Last-use stamp -> chunk, oldest first.
    order: BTreeMap<u64, ChunkId>,
    used: u64,
    clock: u64,
}

struct Entry {
    data: Bytes,
    /// The CRC32C of all of `data`, sent with whole-chunk reads.
    crc: u32,
    stamp: u64,
}

impl MemoryTier {
    /// A tier holding at most `capacity` bytes of chunk data.
    pub fn new(capacity: u64) -> Self {
        MemoryTier {
            capacity,
            state: std::sync::Arc::new(Mutex::new(Lru::default())),
        }
    }

    /// Caches `data` (whose CRC32C is `crc`) as chunk `id`, evicting the least recently used
    /// chunks to make room. Chunks larger than the whole tier are not cached.
    pub fn insert(&self, id: ChunkId, data: Bytes, crc: u32) {
        let mut lru = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        lru.remove(id);
        let len = data.len() as u64;
        if len > self.capacity {
            return;
        }
        while lru.used + len > self.capacity {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            if let Some(old) = lru.entries.remove(&oldest) {
                lru.used -= old.data.len() as u64;
            }
        }
        let stamp = lru.tick();
        lru.order.insert(stamp, id);
        lru.used += len;
        lru.entries.insert(id, Entry { data, crc, stamp });
    }

    /// Chunks and bytes cached now.
    pub fn stats(&self) -> (u64, u64) {
        let lru = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (lru.entries.len() as u64, lru.used)
    }

    /// The whole chunk and its CRC32C if cached (and marks it recently used).
    pub fn get(&self, id: ChunkId) -> Option<(Bytes, u32)> {
        let mut lru = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let stamp = lru.tick();
        let entry = lru.entries.get_mut(&id)?;
        let old = std::mem::replace(&mut entry.stamp, stamp);
        let found = (entry.data.clone(), entry.crc);
        lru.order.remove(&old);
        lru.order.insert(stamp, id);
        Some(found)
    }

    /// Drops chunk `id` if cached (deleted or found corrupt on disk).
    pub fn remove(&self, id: ChunkId) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    #[cfg(test)]
    fn used(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .used
    }
}

impl Lru {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn remove(&mut self, id: ChunkId) {
        if let Some(old) = self.entries.remove(&id) {
            self.order.remove(&old.stamp);
            self.used -= old.data.len() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    #[test]
    fn evicts_least_recently_used() {
        let tier = MemoryTier::new(300);
        tier.insert(ChunkId(1), chunk(100, 1), 0);
        tier.insert(ChunkId(2), chunk(100, 2), 0);
        tier.insert(ChunkId(3), chunk(100, 3), 0);
        // Touch 1 so 2 is the oldest.
        assert_eq!(tier.get(ChunkId(1)).unwrap().0[0], 1);
        tier.insert(ChunkId(4), chunk(150, 4), 0);
        assert!(tier.get(ChunkId(2)).is_none());
        assert!(tier.get(ChunkId(3)).is_none());
        assert_eq!(tier.get(ChunkId(1)).unwrap().0.len(), 100);
        assert_eq!(tier.get(ChunkId(4)).unwrap().0.len(), 150);
        assert_eq!(tier.used(), 250);
    }

    #[test]
    fn replaces_and_skips_oversized_chunks() {
        let tier = MemoryTier::new(100);
        tier.insert(ChunkId(1), chunk(60, 1), 0);
        tier.insert(ChunkId(1), chunk(80, 2), 0);
        assert_eq!(tier.used(), 80);
        assert_eq!(tier.get(ChunkId(1)).unwrap().0[0], 2);
        tier.insert(ChunkId(2), chunk(101, 3), 0);
        assert!(tier.get(ChunkId(2)).is_none());
        assert_eq!(tier.used(), 80);
        tier.insert(ChunkId(3), chunk(0, 0), 0);
        assert_eq!(tier.get(ChunkId(3)).unwrap().0.len(), 0);
    }
}
