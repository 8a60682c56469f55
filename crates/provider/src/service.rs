//! The provider's RPC service: chunk reads and writes and the metadata shard.

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{Error, ErrorKind, Handler, Payload, Request, Response, Result};

use crate::chunk_store::{check_range, ChunkRange, ChunkStore};
use crate::memory_tier::MemoryTier;
use crate::meta_store::MetaStore;

/// Most nodes one path request returns.
const MAX_PATH: u32 = 256;

pub struct ProviderService {
    chunks: ChunkStore,
    tier: Option<MemoryTier>,
    meta: MetaStore,
}

impl ProviderService {
    pub fn new(chunks: ChunkStore, tier: Option<MemoryTier>, meta: MetaStore) -> Self {
        ProviderService { chunks, tier, meta }
    }

    /// Writes through: the chunk is on disk before it is cached or acknowledged.
    async fn put_chunk(&self, id: ChunkId, data: Bytes) -> Result<()> {
        self.chunks.put(id, data.clone()).await?;
        if let Some(tier) = &self.tier {
            tier.insert(id, data);
        }
        Ok(())
    }

    async fn get_chunk(&self, id: ChunkId, offset: u64, len: u64) -> Result<Payload> {
        if let Some(data) = self.tier.as_ref().and_then(|tier| tier.get(id)) {
            let range = check_range(id, offset, len, data.len() as u64)?;
            return Ok(Payload::Bytes(data.slice(range)));
        }
        Ok(match self.chunks.read_range(id, offset, len).await? {
            ChunkRange::Memory(b) => Payload::Bytes(b),
            ChunkRange::File(f) => Payload::File(f),
        })
    }

    async fn dispatch(&self, req: Request, body: Bytes) -> Result<(Response, Payload)> {
        let ok = (Response::Ok, Payload::empty());
        match req {
            Request::PutChunk { id } if id == ChunkId::ZEROS => {
                Err(Error::invalid("chunk id 0 is reserved for zero pieces"))
            }
            Request::PutChunk { id } => self.put_chunk(id, body).await.map(|()| ok),
            Request::GetChunk { id, offset, len } => self
                .get_chunk(id, offset, len)
                .await
                .map(|data| (Response::Chunk, data)),
            Request::PutNodes { nodes } => self.meta.put_nodes(nodes).await.map(|()| ok),
            Request::GetNodes { keys } => Ok((
                Response::Nodes(self.meta.get_nodes(&keys)),
                Payload::empty(),
            )),
            Request::GetPath {
                blob,
                start,
                targets,
                limit,
            } => Ok((
                Response::Path(
                    self.meta
                        .path(blob, start, &targets, limit.min(MAX_PATH) as usize),
                ),
                Payload::empty(),
            )),
            Request::Ping => Ok(ok),
            _ => Err(Error::invalid("not a provider request")),
        }
    }
}

impl Handler for ProviderService {
    async fn handle(&self, req: Request, body: Bytes) -> (Response, Payload) {
        match self.dispatch(req, body).await {
            Ok(answer) => answer,
            Err(e) => {
                // Damaged data and failing disks need an operator; the rest is the caller's
                // business.
                match e.kind {
                    ErrorKind::Corrupt | ErrorKind::Internal | ErrorKind::NoSpace => {
                        tracing::warn!("{e}")
                    }
                    _ => tracing::debug!("{e}"),
                }
                (Response::Err(e), Payload::empty())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[tokio::test]
    async fn memory_tier_serves_ranges_and_checks_bounds() {
        let dir = TempDir::new("service");
        let chunks = ChunkStore::open(dir.path().join("chunks"), false)
            .await
            .unwrap();
        let meta = MetaStore::open(dir.path().join("meta.log"), false)
            .await
            .unwrap();
        let service = ProviderService::new(chunks, Some(MemoryTier::new(1 << 20)), meta);
        let id = ChunkId(99);
        // Large enough for a chunk file of its own (smaller ones go to the small-chunk log).
        let data: Vec<u8> = (0..70_000u32).map(|i| i as u8).collect();
        let (resp, _) = service
            .handle(Request::PutChunk { id }, Bytes::from(data.clone()))
            .await;
        assert_eq!(resp, Response::Ok);

        // Remove the file: reads must come from memory now.
        let name = id.to_string();
        std::fs::remove_file(dir.path().join("chunks").join(&name[..2]).join(&name)).unwrap();
        let get = |offset, len| Request::GetChunk { id, offset, len };
        let (resp, body) = service.handle(get(10, 20), Bytes::new()).await;
        assert_eq!(resp, Response::Chunk);
        assert!(matches!(body, Payload::Bytes(b) if b[..] == data[10..30]));
        let (resp, _) = service.handle(get(69_990, 11), Bytes::new()).await;
        assert!(matches!(resp, Response::Err(e) if e.kind == ErrorKind::OutOfRange));
        let (resp, _) = service.handle(Request::Providers, Bytes::new()).await;
        assert!(matches!(resp, Response::Err(e) if e.kind == ErrorKind::InvalidArgument));
    }
}
