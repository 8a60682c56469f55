//! Storing a write's chunks before its version is assigned: placements from the manager
//! (paged, and cached for small writes), puts to every replica in parallel, and failover to
//! a fresh replica set when a provider fails.

use futures::stream::{self, StreamExt, TryStreamExt};
use tomus_metadata::StoredChunk;
use tomus_wire::manager::Allocate;
use tomus_wire::{Error, ErrorKind, ProviderInfo, Result, MAX_ALLOCATE};

use crate::blob::Blob;
use crate::{chunks, placements};

/// Tries to store one chunk before a write gives up on unreachable providers.
const CHUNK_ATTEMPTS: u32 = 4;

impl Blob {
    /// Cuts `data` into chunk-size pieces and stores each on its replica set, in parallel.
    pub(crate) async fn store_chunks(&self, data: &[u8]) -> Result<Vec<StoredChunk>> {
        let cs = self.chunk_size as usize;
        let count = data.len().div_ceil(cs);
        let placements = if count == 1 && data.len() as u64 <= placements::SMALL_WRITE {
            vec![self.small_placement().await?]
        } else {
            self.allocate(count, None).await?
        };
        // Futures are built eagerly (not inside a Stream::map closure) so the borrowed slices
        // keep concrete lifetimes and callers can spawn these calls.
        let puts: Vec<_> =
            data.chunks(cs)
                .zip(placements)
                .map(|(piece, replicas)| async move {
                    self.put_chunk_with_failover(piece, replicas).await
                })
                .collect();
        stream::iter(puts)
            .buffered(self.client.options.parallelism)
            .try_collect()
            .await
    }

    /// Stores one chunk on `replicas`; when a provider fails, the chunk reached it damaged or
    /// its disk is full, on a fresh replica set without the providers that failed (the
    /// manager may not have noticed yet that one is down or full: it learns a provider's free
    /// space from its heartbeats). A memory-class chunk refused for want of room is the
    /// caller's error: placement already chose the providers with the most room in memory.
    async fn put_chunk_with_failover(
        &self,
        data: &[u8],
        mut replicas: Vec<ProviderInfo>,
    ) -> Result<StoredChunk> {
        let mut attempt = 1;
        let memory = self.client.is_memory_class(self.id).await?;
        loop {
            match chunks::put_chunk(self.cluster(), data, &replicas, memory).await {
                Err(e)
                    if (matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Corrupt)
                        || (e.kind == ErrorKind::NoSpace && !memory))
                        && attempt < CHUNK_ATTEMPTS =>
                {
                    tracing::info!("blob {}: {e}; storing the chunk elsewhere", self.id);
                    attempt += 1;
                    replicas = self.fresh_replicas(data.len() as u64).await?;
                }
                other => return other,
            }
        }
    }

    /// A replica set for one chunk, placed by the manager away from the providers this client
    /// saw fail or refuse data recently whenever enough others can take it (otherwise every
    /// set the manager could give includes one of them). One placement: the manager charges
    /// each one it gives against its providers' free space until their next heartbeat.
    pub(crate) async fn fresh_replicas(&self, chunk_bytes: u64) -> Result<Vec<ProviderInfo>> {
        self.allocate(1, Some(chunk_bytes))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::internal("manager returned no placement"))
    }

    /// Replica sets for `count` chunks of at most `chunk_bytes` bytes.
    async fn allocate(
        &self,
        count: usize,
        chunk_bytes: Option<u64>,
    ) -> Result<Vec<Vec<ProviderInfo>>> {
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            // The manager places at most MAX_ALLOCATE chunks per request.
            let n = (count - out.len()).min(MAX_ALLOCATE as usize);
            let req = Allocate {
                blob: self.id,
                chunks: n as u32,
                chunk_bytes,
                placement: self.client.options.placement,
                client_host: self.client.host.clone(),
                avoid: self.cluster().avoided_by_writes(),
            };
            let placed = self.cluster().manager(req).await?;
            if placed.len() != n {
                return Err(Error::protocol(format!(
                    "asked the manager for {n} placements, got {}",
                    placed.len()
                )));
            }
            out.extend(placed);
        }
        Ok(out)
    }

    /// One replica set for a small write, from placements fetched in batches and shared by
    /// the blobs placed alike: small writes would otherwise spend a manager round trip on
    /// placement each.
    pub(crate) async fn small_placement(&self) -> Result<Vec<ProviderInfo>> {
        let cache = &self.client.small_placements;
        let key = (
            self.replication,
            self.client.is_memory_class(self.id).await?,
        );
        let avoid = self.cluster().avoided_by_writes();
        if let Some(p) = cache.take(key, &avoid) {
            return Ok(p);
        }
        let batch = self
            .allocate(placements::BATCH, Some(placements::SMALL_WRITE))
            .await?;
        cache.refill(key, batch);
        match cache.take(key, &avoid) {
            Some(p) => Ok(p),
            // Every new run names a provider that just failed (the manager has not noticed).
            None => self.fresh_replicas(placements::SMALL_WRITE).await,
        }
    }
}
