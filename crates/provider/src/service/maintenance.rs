//! The requests of repair, scrub and garbage collection: deletions that drop cached copies,
//! scrub steps, and repair copies fetched whole from other providers.

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::pool::Placed;
use tomus_wire::provider::GetChunk;
use tomus_wire::{checksum, Error, ErrorKind, Result, ScrubReport, MAX_CHUNK_SIZE};

use super::{ProviderService, MAX_LIST};

impl ProviderService {
    pub(super) async fn delete_chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkId>> {
        self.forget_cached(ids);
        self.chunks.delete(ids).await
    }

    pub(super) async fn scrub(
        &self,
        start_after: Option<ChunkId>,
        limit: u32,
    ) -> Result<ScrubReport> {
        let report = self
            .chunks
            .scrub(start_after, limit.min(MAX_LIST) as usize)
            .await?;
        self.forget_cached(&report.corrupt);
        Ok(report)
    }

    /// Repair copy: makes this provider hold chunk `id` (`len` bytes), fetched whole from the
    /// first of `from` that serves it. Nothing is fetched if an intact copy is here already.
    pub(super) async fn copy_chunk(&self, id: ChunkId, len: u64, from: &[String]) -> Result<()> {
        if id == ChunkId::ZEROS {
            return Err(Error::invalid("chunk id 0 is reserved for zero pieces"));
        }
        if len > MAX_CHUNK_SIZE {
            return Err(Error::invalid(format!(
                "chunk {id}: {len} bytes is larger than any chunk"
            )));
        }
        match self.chunks.verify(id).await {
            Ok(held) if held == len => return Ok(()),
            Ok(held) => {
                return Err(Error::invalid(format!(
                    "chunk {id} is held here with {held} bytes, not {len}"
                )))
            }
            Err(e) if e.kind == ErrorKind::Corrupt => self.quarantine(id, &e).await,
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (data, crc) = self.fetch(id, len, from).await?;
        // Not cached: a repair copy is not recently written data anyone is about to read.
        self.chunks.put_checked(id, data, crc).await
    }

    /// Chunk `id` whole, and its CRC32C, from the first of `from` that serves it intact;
    /// otherwise the most telling failure (corruption over unavailability over the rest).
    async fn fetch(&self, id: ChunkId, len: u64, from: &[String]) -> Result<(Bytes, u32)> {
        if from.is_empty() {
            return Err(Error::invalid(format!(
                "copy of chunk {id}: no source given"
            )));
        }
        let size = usize::try_from(len)
            .map_err(|_| Error::invalid(format!("chunk {id}: {len} bytes do not fit in memory")))?;
        let _room = self
            .copy_buffers
            .acquire_many(len.div_ceil(1024) as u32)
            .await
            .map_err(|_| Error::internal("copy buffers closed"))?;
        let mut buf = vec![0u8; size];
        let mut errors = Vec::new();
        for addr in from {
            match self.fetch_from(addr, id, &mut buf).await {
                Ok(crc) => return Ok((Bytes::from(buf), crc)),
                Err(e) => {
                    tracing::debug!("copy of chunk {id} from {addr}: {e}");
                    errors.push(e);
                }
            }
        }
        let first = Error::most_telling(errors)
            .ok_or_else(|| Error::internal(format!("copy of chunk {id}: no source tried")))?;
        Err(Error::new(
            first.kind,
            format!(
                "copy of chunk {id}: none of {} sources served it: {first}",
                from.len()
            ),
        ))
    }

    async fn fetch_from(&self, addr: &str, id: ChunkId, out: &mut [u8]) -> Result<u32> {
        let len = out.len() as u64;
        let req = GetChunk { id, offset: 0, len };
        match self.peers.call_into(addr, req, out).await? {
            (sent, Placed::Filled { crc }) if crc == sent => Ok(crc),
            (sent, Placed::Filled { crc }) => Err(checksum::damaged(
                format!("chunk {id} from {addr}"),
                crc,
                sent,
            )),
            (_, Placed::Elsewhere(body)) => Err(Error::corrupt(format!(
                "{addr} returned {} bytes of chunk {id}, expected {len}",
                body.len()
            ))),
        }
    }
}
