//! Placements fetched ahead for small writes: one manager request serves many small appends.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tomus_metadata::BlobId;
use tomus_wire::{Error, ProviderInfo, Result};

/// Writes up to this size take their placement from the cache.
pub const SMALL_WRITE: u64 = 64 << 10;
/// Placements fetched per manager request.
pub const BATCH: usize = 64;
/// Older placements are dropped: provider load and liveness change.
const FRESH_FOR: Duration = Duration::from_secs(2);

/// When a batch was fetched, and its replica sets not handed out yet.
type Batch = (Instant, VecDeque<Vec<ProviderInfo>>);

#[derive(Default)]
pub struct PlacementCache {
    by_blob: Mutex<HashMap<BlobId, Batch>>,
}

impl PlacementCache {
    /// A fresh cached replica set for `blob`, if any.
    pub fn take(&self, blob: BlobId) -> Option<Vec<ProviderInfo>> {
        let mut map = self.by_blob.lock().unwrap_or_else(|p| p.into_inner());
        let (fetched, queue) = map.get_mut(&blob)?;
        if fetched.elapsed() > FRESH_FOR {
            map.remove(&blob);
            return None;
        }
        queue.pop_front()
    }

    /// Stores a new batch for `blob` and returns its first replica set.
    pub fn refill(&self, blob: BlobId, batch: Vec<Vec<ProviderInfo>>) -> Result<Vec<ProviderInfo>> {
        let mut queue: VecDeque<_> = batch.into();
        let first = queue
            .pop_front()
            .ok_or_else(|| Error::internal("manager returned no placement"))?;
        let mut map = self.by_blob.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(blob, (Instant::now(), queue));
        Ok(first)
    }
}
