//! Streaming writers: one version from data that arrives in parts (a file written and then
//! closed, an S3 upload), stored whole chunks at a time so memory stays bounded.

use std::collections::VecDeque;
use std::time::Instant;

use tomus_metadata::{StoredChunk, Version};
use tomus_wire::{trace, Error, Result, VersionInfo, WriteOp};

use crate::blob::Blob;
use crate::commit::{len, Commit, CommitOptions};

/// Data buffered by a [`BlobWriter`] before its whole chunks are stored (in parallel): at
/// least one chunk.
const WRITER_BATCH: u64 = 32 << 20;

/// Batches a [`BlobWriter`] has being stored at once, while the caller produces the next.
const WRITER_IN_FLIGHT: usize = 2;

/// Writes one version from data that arrives in parts, storing whole chunks as they fill so
/// memory stays bounded; nothing is visible until a commit publishes the version. Full
/// batches are stored in the background while the caller produces the next ones. Chunks of a
/// writer dropped without a commit are left for garbage collection. A commit that comes
/// longer than garbage collection's grace after the first chunk was stored is refused
/// (`WriteExpired`): those chunks may be gone.
pub struct BlobWriter {
    blob: Blob,
    buffer: Vec<u8>,
    /// Stored chunks, in data order.
    chunks: Vec<StoredChunk>,
    /// Batches being stored, oldest first, with their sizes.
    in_flight: VecDeque<(u64, tokio::task::JoinHandle<Result<Vec<StoredChunk>>>)>,
    /// When the first chunk started to be stored.
    started: Option<Instant>,
    /// The request id of the whole write (the caller's operation, or one of its own): every
    /// request storing or committing it carries it.
    request: u64,
}

impl BlobWriter {
    pub(crate) fn new(blob: Blob) -> Self {
        BlobWriter {
            blob,
            buffer: Vec::new(),
            chunks: Vec::new(),
            in_flight: VecDeque::new(),
            started: None,
            request: trace::current().unwrap_or_else(trace::new_id),
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        let sending: u64 = self.in_flight.iter().map(|(n, _)| n).sum();
        len(&self.chunks) + sending + self.buffer.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn batch(&self) -> usize {
        let cs = self.blob.chunk_size;
        (WRITER_BATCH / cs).max(1).saturating_mul(cs) as usize
    }

    pub async fn write(&mut self, mut data: &[u8]) -> Result<()> {
        let batch = self.batch();
        while !data.is_empty() {
            if self.buffer.is_empty() && data.len() >= batch {
                // Large writes go straight from the caller's buffer (whole chunks, all in
                // parallel), after the batches before them so the chunks stay in order.
                self.drain().await?;
                let whole = data.len() - data.len() % self.blob.chunk_size as usize;
                self.started.get_or_insert_with(Instant::now);
                let stored =
                    trace::scope(self.request, self.blob.store_chunks(&data[..whole])).await?;
                self.chunks.extend(stored);
                data = &data[whole..];
                continue;
            }
            let take = (batch - self.buffer.len()).min(data.len());
            self.buffer.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buffer.len() == batch {
                self.send_buffer().await?;
            }
        }
        Ok(())
    }

    /// Starts storing the buffered data in the background, waiting for the oldest batch
    /// when too many are in flight.
    async fn send_buffer(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.started.get_or_insert_with(Instant::now);
        let data = std::mem::take(&mut self.buffer);
        let blob = self.blob.clone();
        let size = data.len() as u64;
        let task = tokio::spawn(trace::scope(self.request, async move {
            blob.store_chunks(&data).await
        }));
        self.in_flight.push_back((size, task));
        while self.in_flight.len() > WRITER_IN_FLIGHT {
            self.collect_oldest().await?;
        }
        Ok(())
    }

    async fn collect_oldest(&mut self) -> Result<()> {
        if let Some((_, task)) = self.in_flight.pop_front() {
            let stored = task
                .await
                .map_err(|e| Error::internal(format!("chunk upload task failed: {e}")))??;
            self.chunks.extend(stored);
        }
        Ok(())
    }

    async fn drain(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.collect_oldest().await?;
        }
        Ok(())
    }

    /// Stores everything written and returns the version to commit as `op(size)`; `None`
    /// when nothing was written and `op` needs data.
    async fn finish<'a>(
        mut self,
        op: impl FnOnce(u64) -> Option<WriteOp>,
        options: Option<&'a CommitOptions>,
    ) -> Result<Option<(Traced, Commit<'a>)>> {
        self.send_buffer().await?;
        self.drain().await?;
        let Some(op) = op(len(&self.chunks)) else {
            return Ok(None);
        };
        let commit = Commit {
            op,
            chunks: self.chunks,
            options,
            stored_at: Some(self.started.unwrap_or_else(Instant::now)),
            reused_at: None,
        };
        Ok(Some((
            Traced {
                blob: self.blob,
                request: self.request,
            },
            commit,
        )))
    }

    /// Publishes the data as the blob's whole new content; returns the version.
    pub async fn commit_replace(mut self) -> Result<Version> {
        self.send_buffer().await?;
        self.drain().await?;
        let started = self.started.unwrap_or_else(Instant::now);
        let commit = self.blob.commit_replace(self.chunks, started);
        trace::scope(self.request, commit).await
    }

    /// Publishes the data (possibly none) as the blob's whole new content with `options`;
    /// always a new version (one per S3 PUT), returned as its record.
    pub async fn commit_replace_with(self, options: &CommitOptions) -> Result<VersionInfo> {
        let replace = |size| Some(WriteOp::Replace { size });
        match self.finish(replace, Some(options)).await? {
            Some((traced, c)) => traced.commit(c).await,
            None => Err(Error::internal("a replacement always has an operation")),
        }
    }

    /// Publishes the data as one append with `options`; `None` when nothing was written.
    pub async fn commit_append_with(self, options: &CommitOptions) -> Result<Option<VersionInfo>> {
        let append = |size| (size > 0).then_some(WriteOp::Append { size });
        match self.finish(append, Some(options)).await? {
            Some((traced, c)) => Ok(Some(traced.commit(c).await?)),
            None => Ok(None),
        }
    }

    /// Publishes the data as one append; `None` when nothing was written.
    pub async fn commit_append(self) -> Result<Option<(Version, u64)>> {
        let append = |size| (size > 0).then_some(WriteOp::Append { size });
        match self.finish(append, None).await? {
            Some((traced, c)) => {
                let info = traced.commit(c).await?;
                Ok(Some((info.version, info.span.offset)))
            }
            None => Ok(None),
        }
    }

    /// Publishes the data as one write at `offset` with `options`; `None` when nothing was
    /// written.
    pub async fn commit_write_with(
        self,
        offset: u64,
        options: &CommitOptions,
    ) -> Result<Option<VersionInfo>> {
        let write = |size| (size > 0).then_some(WriteOp::Write { offset, size });
        match self.finish(write, Some(options)).await? {
            Some((blob, c)) => Ok(Some(blob.commit(c).await?)),
            None => Ok(None),
        }
    }

    /// Publishes the data as one write at `offset`; `None` when nothing was written.
    pub async fn commit_write(self, offset: u64) -> Result<Option<Version>> {
        let write = |size| (size > 0).then_some(WriteOp::Write { offset, size });
        match self.finish(write, None).await? {
            Some((traced, c)) => Ok(Some(traced.commit(c).await?.version)),
            None => Ok(None),
        }
    }
}

/// A writer's blob and request id, for its commit.
struct Traced {
    blob: Blob,
    request: u64,
}

impl Traced {
    async fn commit(self, c: Commit<'_>) -> Result<VersionInfo> {
        trace::scope(self.request, self.blob.commit(c)).await
    }
}
