//! Writes, appends, replacements and composed versions of a blob. Large writes store their
//! data first and then commit; small ones (one chunk of at most [`placements::SMALL_WRITE`])
//! store their chunk once their version is assigned (`crate::small_write`).

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};
use tomus_metadata::{Segment, StoredChunk, Version};
use tomus_wire::{Error, Result, VersionInfo, WriteOp};

use crate::blob::{Blob, Extent};
use crate::commit::{len, Commit, CommitOptions};
use crate::placements;
use crate::writer::BlobWriter;

impl Blob {
    /// Writes `data` at `offset` (any offset, any size > 0; past the end leaves a hole of zeros)
    /// and returns the new, published version.
    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<Version> {
        if data.is_empty() {
            return Err(Error::invalid("empty write"));
        }
        let op = WriteOp::Write {
            offset,
            size: data.len() as u64,
        };
        Ok(self.write_op(op, data).await?.version)
    }

    /// Appends `data` and returns the new, published version and the offset it landed at.
    pub async fn append(&self, data: &[u8]) -> Result<(Version, u64)> {
        if data.is_empty() {
            return Err(Error::invalid("zero-length append"));
        }
        let op = WriteOp::Append {
            size: data.len() as u64,
        };
        let info = self.write_op(op, data).await?;
        Ok((info.version, info.span.offset))
    }

    /// Stores `data` and commits it as `op`.
    async fn write_op(&self, op: WriteOp, data: &[u8]) -> Result<VersionInfo> {
        tomus_wire::trace::operation(self.write_op_traced(op, data)).await
    }

    async fn write_op_traced(&self, op: WriteOp, data: &[u8]) -> Result<VersionInfo> {
        if self.is_small(data) {
            return self.commit_small(op, data, None).await;
        }
        let stored_at = Instant::now();
        let chunks = self.store_chunks(data).await?;
        self.commit(Commit {
            op,
            chunks,
            options: None,
            stored_at: Some(stored_at),
            reused_at: None,
        })
        .await
    }

    /// Whether `data` is a small write: one chunk, stored with its version's metadata.
    pub(crate) fn is_small(&self, data: &[u8]) -> bool {
        !data.is_empty() && data.len() as u64 <= placements::SMALL_WRITE.min(self.chunk_size)
    }

    /// Makes `data` (possibly empty) the whole content: the new version has `data.len()`
    /// bytes, whatever the previous size. Returns the new version (the latest one when both
    /// old and new content are empty).
    pub async fn replace(&self, data: &[u8]) -> Result<Version> {
        tomus_wire::trace::operation(self.replace_traced(data)).await
    }

    async fn replace_traced(&self, data: &[u8]) -> Result<Version> {
        if self.is_small(data) {
            let op = WriteOp::Replace {
                size: data.len() as u64,
            };
            return Ok(self.commit_small(op, data, None).await?.version);
        }
        let stored_at = Instant::now();
        let chunks = if data.is_empty() {
            Vec::new()
        } else {
            self.store_chunks(data).await?
        };
        self.commit_replace(chunks, stored_at).await
    }

    /// Commits `chunks` (stored since `stored_at`) as the whole new content; empty content
    /// over a published empty content makes no version (a blob with no version yet gets an
    /// empty first one: a new file appears with it).
    async fn commit_replace(
        &self,
        chunks: Vec<StoredChunk>,
        stored_at: Instant,
    ) -> Result<Version> {
        let size = len(&chunks);
        if size == 0 {
            if let Some(latest) = self.empty_again().await? {
                return Ok(latest.version);
            }
        }
        let c = Commit {
            op: WriteOp::Replace { size },
            chunks,
            options: None,
            stored_at: Some(stored_at),
            reused_at: None,
        };
        Ok(self.commit(c).await?.version)
    }

    /// The latest version when it is published and empty (empty content replacing it needs
    /// no new version); `None` when the blob has content or no version yet.
    pub(crate) async fn empty_again(&self) -> Result<Option<VersionInfo>> {
        let latest = self.stat(None).await?;
        Ok((latest.size == 0 && latest.version > 0).then_some(latest))
    }

    /// A streaming writer: data is stored chunk by chunk as it comes and becomes one version
    /// when committed (a file written and then closed).
    pub fn writer(&self) -> BlobWriter {
        BlobWriter::new(self.clone())
    }

    /// Makes the concatenation of `sources` the whole new content without copying any data:
    /// the new version's metadata refers to the chunks the sources' bytes are stored in (a
    /// copy or a multipart upload made of metadata only). Returns the new version's record.
    pub async fn compose(
        &self,
        sources: &[Extent],
        options: &CommitOptions,
    ) -> Result<VersionInfo> {
        // The sources' chunks are referenced by retained versions from here on: the commit
        // must come before garbage collection may take them (see DataAge).
        let reused_at = Instant::now();
        let resolves: Vec<_> = sources
            .iter()
            .map(|s| async move {
                s.blob
                    .segments(s.offset, s.len, Some(s.version))
                    .await
                    .map(|(_, segs)| segs)
            })
            .collect();
        let resolved: Vec<Vec<Segment>> = stream::iter(resolves)
            .buffered(self.client.options.parallelism)
            .try_collect()
            .await?;
        let chunks: Vec<StoredChunk> = resolved
            .iter()
            .flatten()
            .map(StoredChunk::from_segment)
            .collect();
        self.commit(Commit {
            op: WriteOp::Replace { size: len(&chunks) },
            chunks,
            options: Some(options),
            stored_at: None,
            reused_at: Some(reused_at),
        })
        .await
    }
}

/// Runs `fut`, returning its output and how long it took.
pub(crate) async fn timed<T>(fut: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = fut.await;
    (out, started.elapsed())
}
