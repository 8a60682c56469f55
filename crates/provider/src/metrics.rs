//! The provider's `/metrics` (on `--metrics-addr`): counters are kept where things happen
//! (chunk store, group commit, the wire server); the gauges of what it holds and of its
//! disk are read here, when a scrape asks.

use std::sync::Arc;

use futures::future::BoxFuture;
use tomus_metrics::families::label;
use tomus_metrics::{Pages, Response};

use crate::chunk_store::ChunkStore;
use crate::data_dir::DataDirWatch;
use crate::memory_tier::MemoryTier;

pub(crate) struct ProviderPages {
    pub chunks: ChunkStore,
    pub tier: Option<MemoryTier>,
    pub watch: Arc<DataDirWatch>,
}

impl Pages for ProviderPages {
    fn before_scrape(&self) {
        let m = tomus_metrics::provider();
        let stats = self.chunks.stats();
        let (tier_chunks, tier_bytes) = self.tier.as_ref().map_or((0, 0), |t| t.stats());
        let gauges = [
            (&m.stored_chunks, "disk", stats.chunks),
            (&m.stored_bytes, "disk", stats.bytes),
            (&m.stored_chunks, "memory", tier_chunks),
            (&m.stored_bytes, "memory", tier_bytes),
        ];
        for (family, tier, value) in gauges {
            family.get_or_create(&label("tier", tier)).set(clamp(value));
        }
        // A few stats and one statvfs: cheap enough to do inline on a scrape.
        let ((capacity, free), fault) = self.watch.space();
        m.capacity_bytes.set(clamp(capacity));
        m.free_bytes.set(clamp(free));
        m.failed.set(i64::from(fault.is_some()));
    }

    fn get(&self, _path: &str, _query: &str) -> BoxFuture<'static, Option<Response>> {
        Box::pin(async { None })
    }
}

/// A gauge's value (gauges are i64).
pub(crate) fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
