//! Published version records, cached by the client: a record never changes once its version
//! is published, so reads of a known version need not ask the manager (only the metadata DHT
//! and the providers). Retention may remove a version later; a read that finds the
//! version's data gone asks the manager again and reports what it says.

use std::collections::HashMap;
use std::sync::Mutex;

use tomus_metadata::{BlobId, Version};
use tomus_wire::{VersionInfo, VersionState};

/// Records kept in one generation (two generations approximate LRU).
const GENERATION: usize = 100_000;

type Generation = HashMap<(BlobId, Version), VersionInfo>;

#[derive(Default)]
pub struct VersionCache {
    gens: Mutex<(Generation, Generation)>,
}

impl VersionCache {
    pub fn get(&self, blob: BlobId, version: Version) -> Option<VersionInfo> {
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = g.0.get(&(blob, version)) {
            return Some(v.clone());
        }
        let v = g.1.remove(&(blob, version))?;
        g.0.insert((blob, version), v.clone());
        Some(v)
    }

    /// Keeps `info` if its version is published (other records may still change).
    pub fn insert(&self, info: &VersionInfo) {
        if info.state != VersionState::Published || info.version == 0 {
            return;
        }
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() >= GENERATION {
            g.1 = std::mem::take(&mut g.0);
        }
        g.0.insert((info.blob, info.version), info.clone());
    }

    pub fn forget(&self, blob: BlobId, version: Version) {
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        g.0.remove(&(blob, version));
        g.1.remove(&(blob, version));
    }

    /// Forgets every record of `blob` (it was deleted).
    pub fn forget_blob(&self, blob: BlobId) {
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        g.0.retain(|k, _| k.0 != blob);
        g.1.retain(|k, _| k.0 != blob);
    }
}
