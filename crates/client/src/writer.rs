//! Streaming writers: one version from data that arrives in parts (a file written and then
//! closed, an S3 upload), stored whole chunks at a time so memory stays bounded.

use std::collections::VecDeque;
use std::time::Instant;

use tomus_metadata::StoredChunk;
use tomus_wire::{trace, Error, Result, VersionInfo, WriteOp};

use crate::batch_buffers;
use crate::blob::Blob;
use crate::commit::{len, Commit, CommitOptions};

/// Data buffered by a [`BlobWriter`] before its whole chunks are stored (in parallel): at
/// least one chunk. Smaller batches, more of them in flight, cost the S3 gateway less CPU per
/// MiB than 32 MiB ones did (see `WRITER_IN_FLIGHT_BYTES`): the data is stored soon after it
/// was copied in, and the batches in use fit the recycled buffers (see `batch_buffers`).
const WRITER_BATCH: u64 = 8 << 20;

/// A buffer past this size is given room for its whole batch at once (a small object's
/// buffer stays small).
const RESERVE_WHOLE_BATCH: usize = 1 << 20;

/// Bytes of batches a [`BlobWriter`] has being stored at once, while the caller produces the
/// next: six 8 MiB batches, or one batch of a chunk larger than this. Against two 32 MiB
/// batches, under 8 concurrent 128 MiB S3 PUTs, the gateway's CPU per MiB fell by about 12%
/// and the native client's 128 MiB writes (`tomus bench --scenarios objects`) went 8-12%
/// faster.
const WRITER_IN_FLIGHT_BYTES: u64 = 48 << 20;

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
            if self.buffer.len() + take > self.buffer.capacity()
                && self.buffer.len() + take > RESERVE_WHOLE_BATCH
            {
                // One buffer for the whole batch (recycled, see `batch_buffers`) rather
                // than copying it again at every doubling of the buffer.
                let mut whole = batch_buffers::take(batch);
                whole.extend_from_slice(&self.buffer);
                self.buffer = whole;
            }
            self.buffer.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buffer.len() == batch {
                self.send_buffer().await?;
            }
        }
        Ok(())
    }

    /// Starts storing the buffered data in the background, once the process's budget for
    /// batches being stored has room for it (see `batch_buffers`), waiting for the oldest
    /// batch when too many are in flight.
    async fn send_buffer(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.started.get_or_insert_with(Instant::now);
        let share = batch_buffers::reserve(self.buffer.len()).await;
        let data = std::mem::take(&mut self.buffer);
        let blob = self.blob.clone();
        let size = data.len() as u64;
        let task = tokio::spawn(trace::scope(self.request, async move {
            let stored = blob.store_chunks(&data).await;
            batch_buffers::give_back(data);
            drop(share);
            stored
        }));
        self.in_flight.push_back((size, task));
        let most = (WRITER_IN_FLIGHT_BYTES / self.batch() as u64).max(1) as usize;
        while self.in_flight.len() > most {
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

    /// Publishes the data as one version of the given `kind` with `options` (attributes
    /// published with it, a size condition). What it returns depends on the kind: a
    /// [`Replace`] always yields a version's record, an [`Append`] or a [`WriteAt`] yields
    /// none when nothing was written (no version is made).
    pub async fn commit<K: WriteKind>(
        mut self,
        kind: K,
        options: &CommitOptions,
    ) -> Result<K::Output> {
        if self.chunks.is_empty() && self.in_flight.is_empty() && self.blob.is_small(&self.buffer) {
            // All of it is one small chunk: stored while the version is assigned.
            let size = self.buffer.len() as u64;
            let op = match kind.op(size) {
                Ok(op) => op,
                Err(nothing) => return Ok(nothing),
            };
            let small = self.blob.commit_small(op, &self.buffer, Some(options));
            return Ok(K::committed(trace::scope(self.request, small).await?));
        }
        self.send_buffer().await?;
        self.drain().await?;
        let size = len(&self.chunks);
        let op = match kind.op(size) {
            Ok(op) => op,
            Err(nothing) => return Ok(nothing),
        };
        if size == 0 && kind.reuses_empty() {
            if let Some(latest) = trace::scope(self.request, self.blob.empty_again()).await? {
                return Ok(K::committed(latest));
            }
        }
        let commit = Commit {
            op,
            chunks: self.chunks,
            options: Some(options),
            stored_at: Some(self.started.unwrap_or_else(Instant::now)),
            reused_at: None,
        };
        let info = trace::scope(self.request, self.blob.commit(commit)).await?;
        Ok(K::committed(info))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Replace {}
    impl Sealed for super::Append {}
    impl Sealed for super::WriteAt {}
}

/// How a [`BlobWriter`]'s data becomes a version, and so what [`BlobWriter::commit`]
/// returns: [`Replace`], [`Append`] or [`WriteAt`].
pub trait WriteKind: sealed::Sealed {
    /// What the commit yields.
    type Output;
    /// The operation publishing `size` bytes written, or what the commit returns without
    /// publishing anything (a kind that needs data, given none).
    #[doc(hidden)]
    fn op(&self, size: u64) -> std::result::Result<WriteOp, Self::Output>;
    /// Whether empty data over published empty content keeps that version.
    #[doc(hidden)]
    fn reuses_empty(&self) -> bool {
        false
    }
    /// The output for the version published (or kept).
    #[doc(hidden)]
    fn committed(info: VersionInfo) -> Self::Output;
}

/// The data (possibly none) is the blob's whole new content: the commit always yields a
/// version.
#[derive(Clone, Copy, Debug, Default)]
pub struct Replace {
    /// Empty data over published empty content makes no new version: the commit returns
    /// the latest one (rewriting an empty file changes nothing; a blob with no version yet
    /// still gets its empty first one). Off, every commit is a new version (one per S3 PUT,
    /// and a condition or attributes are always applied).
    pub reuse_empty: bool,
}

impl WriteKind for Replace {
    type Output = VersionInfo;
    fn op(&self, size: u64) -> std::result::Result<WriteOp, VersionInfo> {
        Ok(WriteOp::Replace { size })
    }
    fn reuses_empty(&self) -> bool {
        self.reuse_empty
    }
    fn committed(info: VersionInfo) -> VersionInfo {
        info
    }
}

/// The data is appended to the blob: `None` when nothing was written.
#[derive(Clone, Copy, Debug, Default)]
pub struct Append;

impl WriteKind for Append {
    type Output = Option<VersionInfo>;
    fn op(&self, size: u64) -> std::result::Result<WriteOp, Option<VersionInfo>> {
        if size == 0 {
            return Err(None);
        }
        Ok(WriteOp::Append { size })
    }
    fn committed(info: VersionInfo) -> Option<VersionInfo> {
        Some(info)
    }
}

/// The data is written at `offset` of the blob: `None` when nothing was written.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteAt {
    pub offset: u64,
}

impl WriteKind for WriteAt {
    type Output = Option<VersionInfo>;
    fn op(&self, size: u64) -> std::result::Result<WriteOp, Option<VersionInfo>> {
        if size == 0 {
            return Err(None);
        }
        Ok(WriteOp::Write {
            offset: self.offset,
            size,
        })
    }
    fn committed(info: VersionInfo) -> Option<VersionInfo> {
        Some(info)
    }
}
