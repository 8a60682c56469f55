//! Placements fetched ahead for small writes that go where placement says (memory-class
//! blobs; disk-class small writes go to their version's metadata owners, see
//! `Blob::commit_small`): one manager request serves many small writes.
//!
//! A replica set serves a run of consecutive small writes rather than one: writers appending
//! at the same moment then reach the same providers, whose group commit makes their chunks
//! durable with one disk sync instead of one each, and neighbouring small pieces sit together
//! for readers. Successive runs take turns over the providers, as the manager's placement
//! decides.
//!
//! Placements are shared by every blob with the same replication and storage class (all the
//! manager's placement looks at of a blob), not kept per blob: small writes spread over many
//! blobs (S3 PUTs of small objects, each its own blob) would otherwise each cost a manager
//! request.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tomus_metadata::ProviderId;
use tomus_wire::ProviderInfo;

/// Writes up to this size take their placement from the cache.
pub const SMALL_WRITE: u64 = 64 << 10;
/// Placements (runs) fetched per manager request.
pub const BATCH: usize = 4;
/// Small writes sharing one replica set.
const RUN_WRITES: u32 = 64;
/// Older placements are dropped: provider load and liveness change.
const FRESH_FOR: Duration = Duration::from_secs(2);
// A drain is judged complete on the promise that no client writes by a provider list older
// than this.
const _: () = assert!(FRESH_FOR.as_millis() <= tomus_wire::PROVIDER_VIEW_TTL.as_millis());

/// What a placement depends on of a blob: its replication, and whether it is of the memory
/// storage class.
pub type PlacementKey = (u32, bool);
/// A replica set and how many writes of its run it served.
type Run = (Vec<ProviderInfo>, u32);
/// When a batch was fetched, and its runs not finished yet.
type Batch = (Instant, VecDeque<Run>);

#[derive(Default)]
pub struct PlacementCache {
    by_key: Mutex<HashMap<PlacementKey, Batch>>,
}

impl PlacementCache {
    /// A fresh cached replica set for blobs of `key` without any provider of `avoid`
    /// (providers that failed recently: their runs are dropped), if any.
    pub fn take(&self, key: PlacementKey, avoid: &[ProviderId]) -> Option<Vec<ProviderInfo>> {
        let mut map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        let (fetched, queue) = map.get_mut(&key)?;
        if fetched.elapsed() > FRESH_FOR {
            map.remove(&key);
            return None;
        }
        queue.retain(|(set, _)| !set.iter().any(|p| avoid.contains(&p.id)));
        next_of_run(queue)
    }

    /// Stores a new batch for blobs of `key`, replacing what is left of the previous one.
    pub fn refill(&self, key: PlacementKey, batch: Vec<Vec<ProviderInfo>>) {
        let queue: VecDeque<Run> = batch.into_iter().map(|set| (set, 0)).collect();
        let mut map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(key, (Instant::now(), queue));
    }
}

/// The replica set of the current run; a finished run gives way to the next.
fn next_of_run(queue: &mut VecDeque<Run>) -> Option<Vec<ProviderInfo>> {
    let (set, served) = queue.front_mut()?;
    *served += 1;
    let set = set.clone();
    if *served >= RUN_WRITES {
        queue.pop_front();
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: ProviderId) -> Vec<ProviderInfo> {
        vec![ProviderInfo {
            id,
            addr: format!("127.0.0.1:{}", 7000 + id),
            host: "127.0.0.1".into(),
            capacity: 1 << 30,
            free: 1 << 30,
            chunks: 0,
            load: 0,
            alive: true,
            draining: false,
            fault: None,
        }]
    }

    fn ids(cache: &PlacementCache, key: PlacementKey, avoid: &[ProviderId]) -> Option<ProviderId> {
        cache.take(key, avoid).map(|s| s[0].id)
    }

    #[test]
    fn a_replica_set_serves_a_run_of_writes_then_the_next_takes_over() {
        let cache = PlacementCache::default();
        cache.refill((2, false), vec![set(1), set(2)]);
        for _ in 0..RUN_WRITES {
            assert_eq!(ids(&cache, (2, false), &[]), Some(1));
        }
        for _ in 0..RUN_WRITES {
            assert_eq!(ids(&cache, (2, false), &[]), Some(2));
        }
        assert_eq!(ids(&cache, (2, false), &[]), None, "batch used up");
        cache.refill((2, false), vec![set(1)]);
        assert_eq!(
            ids(&cache, (3, false), &[]),
            None,
            "another replication has its own batches"
        );
        assert_eq!(
            ids(&cache, (2, true), &[]),
            None,
            "the memory class has its own batches"
        );
    }

    #[test]
    fn runs_on_a_failed_provider_are_dropped() {
        let cache = PlacementCache::default();
        cache.refill((1, false), vec![set(1), set(2), set(1)]);
        assert_eq!(ids(&cache, (1, false), &[1]), Some(2));
        assert_eq!(ids(&cache, (1, false), &[2]), None);
    }
}
