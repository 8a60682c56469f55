//! Writes, appends, replacements and composed versions of a blob. Large writes store their
//! data first and then commit; small ones (one chunk of at most [`placements::SMALL_WRITE`])
//! store their chunk while their version is assigned.

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};
use tomus_metadata::{Segment, StoredChunk, Version};
use tomus_wire::{Assignment, Error, ErrorKind, Result, VersionInfo, WriteOp};

use crate::blob::{Blob, Extent};
use crate::commit::{len, spanning, Commit, CommitOptions};
use crate::writer::BlobWriter;
use crate::{chunks, dht, placements};

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

    /// A small write: its chunk is stored once its version is assigned, not before, which
    /// takes a round trip and a disk sync off its latency. (Large writes store their data
    /// first, so their version is not held in flight, delaying the publication of every later
    /// version, for the whole transfer.) When the chunk fails to store, the version is
    /// aborted and the write done the long way, with failover to other providers. `options`
    /// are published with the version, as for any commit.
    pub(crate) async fn commit_small(
        &self,
        op: WriteOp,
        data: &[u8],
        options: Option<&CommitOptions>,
    ) -> Result<VersionInfo> {
        if self.client.is_memory_class(self.id).await? {
            return self.commit_small_placed(op, data, options).await;
        }
        self.commit_small_beside_metadata(op, data, options).await
    }

    /// A small write stored with its version's metadata: once the version is assigned, one
    /// request to each metadata owner of the version carries the chunk and the nodes, so an
    /// append costs the providers one request and the client one fewer.
    async fn commit_small_beside_metadata(
        &self,
        op: WriteOp,
        data: &[u8],
        options: Option<&CommitOptions>,
    ) -> Result<VersionInfo> {
        let started = Instant::now();
        let commit = |chunks: Vec<StoredChunk>| Commit {
            op,
            chunks,
            options,
            stored_at: Some(started),
            reused_at: None,
        };
        let (assigned, assign_took) = timed(self.assign(&commit(Vec::new()))).await;
        let a = assigned?;
        let (stored, store_took) = timed(self.store_small_write(&a, op, data)).await;
        let chunk = match stored {
            Ok(chunk) => chunk,
            Err(e) => {
                // The owner that failed (down, its disk full) is the version's only: the write
                // is done again the long way, its chunk where placement says and its metadata
                // with failover along the ring.
                self.abort(a.version).await;
                tracing::info!(
                    "blob {}: {e}; storing the small write the long way",
                    self.id
                );
                let stored = self.store_chunks(data).await?;
                return self.commit(commit(stored)).await;
            }
        };
        let (completed, complete_took) = timed(self.complete(a.version)).await;
        // Where a small write's latency goes (`TOMUS_LOG=tomus_client=debug`).
        tracing::debug!(
            blob = %self.id,
            version = a.version,
            assign_us = assign_took.as_micros() as u64,
            store_us = store_took.as_micros() as u64,
            complete_us = complete_took.as_micros() as u64,
            total_us = started.elapsed().as_micros() as u64,
            "small write"
        );
        match completed {
            // Given up behind a dead writer's version: the chunk is stored, commit again.
            Err(e) if e.kind == ErrorKind::Retry => self.commit(commit(vec![chunk])).await,
            other => {
                if let Ok(v) = &other {
                    self.log_committed(v);
                }
                other
            }
        }
    }

    /// Stores a small write's chunk and version `a`'s metadata on the version's metadata
    /// owners; returns the chunk.
    async fn store_small_write(
        &self,
        a: &Assignment,
        op: WriteOp,
        data: &[u8],
    ) -> Result<StoredChunk> {
        let owners =
            dht::version_owners(self.cluster(), self.id, a.version, self.replication).await?;
        let chunk = StoredChunk {
            chunk: chunks::new_chunk_id(false),
            len: data.len() as u64,
            replicas: owners.iter().map(|(id, _)| *id).collect(),
            chunk_offset: 0,
        };
        let all = spanning(a, vec![chunk.clone()]);
        let replaces = matches!(op, WriteOp::Replace { .. });
        let nodes = self.build_metadata(a, &all, replaces).await?;
        dht::put_small_write(self.cluster(), self.id, &owners, nodes, chunk.chunk, data).await?;
        Ok(chunk)
    }

    /// A small write of a memory-class blob: its chunk goes where the manager's placement
    /// says (providers with room in memory), stored while the version is assigned and its
    /// metadata stored.
    async fn commit_small_placed(
        &self,
        op: WriteOp,
        data: &[u8],
        options: Option<&CommitOptions>,
    ) -> Result<VersionInfo> {
        let started = Instant::now();
        let replicas = self.small_placement().await?;
        let chunk = chunks::whole_chunk(chunks::new_chunk_id(true), data.len() as u64, &replicas);
        let commit = |chunks: Vec<StoredChunk>| Commit {
            op,
            chunks,
            options,
            stored_at: Some(started),
            reused_at: None,
        };
        let first = commit(vec![chunk.clone()]);
        let (assigned, (stored, chunk_took)) = futures::join!(
            self.assign_and_store(&first),
            timed(chunks::put_chunk_as(
                self.cluster(),
                chunk.chunk,
                data,
                &replicas
            )),
        );
        match (assigned, stored) {
            (Ok(a), Ok(())) => {
                let (completed, complete_took) = timed(self.complete(a.version)).await;
                // Where a small write's latency goes (`TOMUS_LOG=tomus_client=debug`): its
                // chunk's store ran beside the assignment and the metadata's.
                tracing::debug!(
                    blob = %self.id,
                    version = a.version,
                    chunk_us = chunk_took.as_micros() as u64,
                    complete_us = complete_took.as_micros() as u64,
                    total_us = started.elapsed().as_micros() as u64,
                    "small write"
                );
                match completed {
                    // Given up behind a dead writer's version: the chunk is stored, commit
                    // again.
                    Err(e) if e.kind == ErrorKind::Retry => self.commit(first).await,
                    other => {
                        if let Ok(v) = &other {
                            self.log_committed(v);
                        }
                        other
                    }
                }
            }
            (Ok(a), Err(e)) => {
                self.abort(a.version).await;
                if e.kind != ErrorKind::Unavailable {
                    return Err(e);
                }
                // The provider that failed is suspected now: the next placement avoids it.
                tracing::info!("blob {}: {e}; storing the chunk elsewhere", self.id);
                let stored = self.store_chunks(data).await?;
                self.commit(commit(stored)).await
            }
            // A chunk stored without a version is collected as garbage after the grace period.
            (Err(e), _) => Err(e),
        }
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
