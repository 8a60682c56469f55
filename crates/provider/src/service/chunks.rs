//! Chunk writes and reads: written through to disk before the memory tier caches them, read
//! from the memory tier first, then from the chunk store; a chunk found corrupt is
//! quarantined.

use bytes::Bytes;
use tomus_metadata::{ChunkId, Node, NodeKey};
use tomus_wire::{checksum, Error, ErrorKind, Payload, Result};

use super::ProviderService;
use crate::chunk_store::{slice_in_memory, ChunkRange};

impl ProviderService {
    /// Writes through: the chunk is checked against its sender's checksum and on disk
    /// before it is cached or acknowledged.
    pub(super) async fn put_chunk(&self, id: ChunkId, data: Bytes, crc: u32) -> Result<()> {
        self.chunks.put_checked(id, data.clone(), crc).await?;
        self.cache_written(id, data, crc);
        Ok(())
    }

    /// A small write whole: its chunk is checked against its sender's checksum first, so a
    /// body damaged on the way stores nothing, its nodes included; then the chunk and the
    /// nodes are stored side by side (both logs sync at once).
    pub(super) async fn put_small_write(
        &self,
        id: ChunkId,
        data: Bytes,
        crc: u32,
        nodes: Vec<(NodeKey, Node)>,
    ) -> Result<()> {
        checksum::check_arrived(&data, crc, || format!("chunk {id}"))?;
        let (chunk, nodes) = tokio::join!(
            self.chunks.put(id, data.clone()),
            self.meta.put_nodes(nodes)
        );
        chunk.and(nodes)?;
        self.cache_written(id, data, crc);
        Ok(())
    }

    /// Caches a chunk just written (a memory-class chunk is in RAM already: caching it would
    /// hold it twice).
    fn cache_written(&self, id: ChunkId, data: Bytes, crc: u32) {
        if let Some(tier) = self.tier.as_ref().filter(|_| !id.is_memory()) {
            tier.insert(id, data, crc);
        }
    }

    /// A corrupt chunk on disk is quarantined, so it is no longer listed and repair
    /// re-creates this replica.
    /// The range and its CRC32C.
    pub(super) async fn get_chunk(
        &self,
        id: ChunkId,
        offset: u64,
        len: u64,
    ) -> Result<(Payload, u32)> {
        let got = self.read_chunk(id, offset, len).await;
        if let Ok((payload, _)) = &got {
            let m = tomus_metrics::provider();
            m.read_bytes.inc_by(payload.len());
            m.read_chunks.inc();
        }
        got
    }

    async fn read_chunk(&self, id: ChunkId, offset: u64, len: u64) -> Result<(Payload, u32)> {
        if let Some((data, whole_crc)) = self.tier.as_ref().and_then(|tier| tier.get(id)) {
            let (piece, crc) = slice_in_memory(id, &data, whole_crc, offset, len)?;
            return Ok((Payload::Bytes(piece), crc));
        }
        match self.chunks.read_range(id, offset, len).await {
            Ok((ChunkRange::Memory(b), crc)) => Ok((Payload::Bytes(b), crc)),
            Ok((ChunkRange::File(f), crc)) => Ok((Payload::File(f), crc)),
            Err(e) => {
                if e.kind == ErrorKind::Corrupt {
                    self.quarantine(id, &e).await;
                }
                Err(e)
            }
        }
    }

    /// Takes a chunk found corrupt out of service; a failure is only logged (the read that
    /// found it reports the corruption either way).
    pub(super) async fn quarantine(&self, id: ChunkId, why: &Error) {
        tracing::warn!("chunk {id} is corrupt, quarantining it: {why}");
        self.forget_cached(&[id]);
        if let Err(e) = self.chunks.quarantine(id).await {
            tracing::warn!("chunk {id}: quarantine failed: {e}");
        }
    }

    pub(super) fn forget_cached(&self, ids: &[ChunkId]) {
        if let Some(tier) = &self.tier {
            for &id in ids {
                tier.remove(id);
            }
        }
    }
}
