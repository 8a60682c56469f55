//! The memory storage class: chunks whose id carries `ChunkId::MEMORY_TAG` are kept here,
//! in RAM, instead of on disk, up to a fixed capacity. Unlike the memory tier (a cache of
//! chunks that are on disk too) this is their only copy on this provider: they are gone
//! when the process ends, and repair re-creates them from the other replicas (in memory
//! again, since the class travels with the id).
//!
//! A chunk that does not fit is refused with `NoSpace`: nothing spills to disk, so the
//! writer learns at once that the class is full (the manager's placement already avoids
//! providers it knows to be full; this is the last word when reports are stale).
//!
//! The ids (not the data) of the chunks it took are appended to a journal file: a provider
//! that restarts reports every id in it as lost, so repair re-creates those copies at once
//! rather than at its next full audit (a restart loses the data like a death, but comes back
//! under the same id before the manager notices anything). Ids already deleted are reported
//! too; repair ignores chunks nothing references.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{ChunkEntry, Error, ErrorKind, Result};

struct Stored {
    data: Bytes,
    /// CRC32C of all of `data`, checked when it arrived.
    crc: u32,
    stored_ms: u64,
}

#[derive(Default)]
struct State {
    chunks: BTreeMap<ChunkId, Stored>,
    used: u64,
    /// The journal of ids taken (`None`: none kept, as in tests).
    journal: Option<std::fs::File>,
}

/// Cheap to clone: clones share the store.
#[derive(Clone)]
pub struct MemoryChunks {
    capacity: u64,
    state: Arc<Mutex<State>>,
}

impl MemoryChunks {
    /// A store of at most `capacity` bytes of chunk data (0: refuses every chunk).
    pub fn new(capacity: u64) -> Self {
        MemoryChunks {
            capacity,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the map and its byte count consistent before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the journal of ids in `path`; returns the ids a previous run journaled (its
    /// chunks are gone with its memory), and starts the journal afresh.
    pub fn with_journal(self, path: &Path) -> Result<(Self, Vec<ChunkId>)> {
        let io = |e: std::io::Error| {
            Error::internal(format!("memory-class journal {}: {e}", path.display()))
        };
        let mut previous = Vec::new();
        match std::fs::File::open(path) {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).map_err(io)?;
                // A torn last record (a crash mid-append) is left out.
                for rec in bytes.chunks_exact(16) {
                    let mut id = [0u8; 16];
                    id.copy_from_slice(rec);
                    previous.push(ChunkId(u128::from_le_bytes(id)));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let file = std::fs::File::create(path).map_err(io)?;
        self.state().journal = Some(file);
        Ok((self, previous))
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Keeps `data` (already checked against its sender's CRC32C `crc`) as chunk `id`.
    /// Storing an id again is a retried write of the same content: accepted, nothing changes.
    pub fn put(&self, id: ChunkId, data: Bytes, crc: u32) -> Result<()> {
        let mut s = self.state();
        if s.chunks.contains_key(&id) {
            return Ok(());
        }
        let len = data.len() as u64;
        if s.used + len > self.capacity {
            return Err(Error::new(
                ErrorKind::NoSpace,
                format!(
                    "memory storage class full: {} of {} bytes used, chunk {id} needs {len} more",
                    s.used, self.capacity
                ),
            ));
        }
        s.used += len;
        if let Some(journal) = s.journal.as_mut() {
            // Not synced: the journal only speeds repair up; the audit finds what it misses.
            if let Err(e) = journal.write_all(&id.0.to_le_bytes()) {
                tracing::warn!("memory-class journal: {e}");
            }
        }
        s.chunks.insert(
            id,
            Stored {
                data,
                crc,
                stored_ms: tomus_wire::now_ms(),
            },
        );
        Ok(())
    }

    /// The whole chunk and its CRC32C, if held.
    pub fn get(&self, id: ChunkId) -> Option<(Bytes, u32)> {
        self.state()
            .chunks
            .get(&id)
            .map(|c| (c.data.clone(), c.crc))
    }

    pub fn contains(&self, id: ChunkId) -> bool {
        self.state().chunks.contains_key(&id)
    }

    /// Chunks after `start_after` in id order, at most `limit`.
    pub fn list(&self, start_after: Option<ChunkId>, limit: usize) -> Vec<ChunkEntry> {
        let s = self.state();
        let from = match start_after {
            Some(after) => std::ops::Bound::Excluded(after),
            None => std::ops::Bound::Unbounded,
        };
        s.chunks
            .range((from, std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(id, c)| ChunkEntry {
                id: *id,
                len: c.data.len() as u64,
                stored_ms: c.stored_ms,
            })
            .collect()
    }

    /// Drops chunks (ids not held are ignored); returns how many were held.
    pub fn delete(&self, ids: &[ChunkId]) -> u64 {
        let mut s = self.state();
        let mut n = 0;
        for id in ids {
            if let Some(c) = s.chunks.remove(id) {
                s.used -= c.data.len() as u64;
                n += 1;
            }
        }
        n
    }

    /// (chunks, bytes) held now.
    pub fn stats(&self) -> (u64, u64) {
        let s = self.state();
        (s.chunks.len() as u64, s.used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> ChunkId {
        ChunkId::with_class(n, true)
    }

    #[test]
    fn bounded_by_capacity_with_a_clear_error() {
        let m = MemoryChunks::new(100);
        m.put(id(1), Bytes::from(vec![1; 60]), 0).unwrap();
        // The same id again is a retry: accepted, not counted twice.
        m.put(id(1), Bytes::from(vec![1; 60]), 0).unwrap();
        assert_eq!(m.stats(), (1, 60));
        let e = m.put(id(2), Bytes::from(vec![2; 41]), 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSpace);
        assert!(e.to_string().contains("memory storage class full"), "{e}");
        m.put(id(2), Bytes::from(vec![2; 40]), 0).unwrap();
        assert_eq!(m.stats(), (2, 100));
        assert_eq!(m.delete(&[id(1), id(9)]), 1);
        assert_eq!(m.stats(), (1, 40));
        assert_eq!(m.get(id(2)).unwrap().0[0], 2);
        assert!(m.get(id(1)).is_none());
    }

    #[test]
    fn lists_in_id_order_after_a_start() {
        let m = MemoryChunks::new(1 << 20);
        for n in [5u128, 1, 3] {
            m.put(id(n), Bytes::from(vec![0; n as usize]), 0).unwrap();
        }
        let all: Vec<_> = m.list(None, 10).iter().map(|e| e.len).collect();
        assert_eq!(all, vec![1, 3, 5]);
        let after: Vec<_> = m.list(Some(id(1)), 1).iter().map(|e| e.len).collect();
        assert_eq!(after, vec![3]);
    }

    #[test]
    fn a_restart_reports_the_journaled_ids() {
        let dir = std::env::temp_dir().join(format!("tomus-memj-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ids");
        let (m, before) = MemoryChunks::new(1 << 20).with_journal(&path).unwrap();
        assert!(before.is_empty());
        m.put(id(1), Bytes::from_static(b"a"), 0).unwrap();
        m.put(id(2), Bytes::from_static(b"b"), 0).unwrap();
        m.put(id(1), Bytes::from_static(b"a"), 0).unwrap();
        drop(m);
        let (_, lost) = MemoryChunks::new(1 << 20).with_journal(&path).unwrap();
        assert_eq!(lost, vec![id(1), id(2)]);
        let (_, again) = MemoryChunks::new(1 << 20).with_journal(&path).unwrap();
        assert!(again.is_empty(), "the journal starts afresh");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_class_is_in_the_id() {
        assert!(id(7).is_memory());
        assert!(!ChunkId::with_class(7, false).is_memory());
        let tagged = (u128::from(ChunkId::MEMORY_TAG) << 96) | 5;
        assert!(!ChunkId::with_class(tagged, false).is_memory());
        assert_ne!(ChunkId::with_class(0, false), ChunkId::ZEROS);
    }
}
