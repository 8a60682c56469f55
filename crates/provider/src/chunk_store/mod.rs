//! Immutable chunks as checksummed files: `<dir>/<first two hex digits>/<32 hex digit id>`.
//! Chunks shorter than [`SMALL_CHUNK_MAX`] go to the small-chunk log in the same directory
//! instead (see [`crate::small_chunks`]); lookups try the log first, then the files.
//!
//! File layout: magic `TCHK`, format version (u8), data length (u64 LE), block size (u32 LE),
//! one CRC32C (u32 LE) per block of data, then the data. Per-block checksums let a ranged read
//! verify only the blocks it touches instead of the whole chunk.
//!
//! The format version is checked on every open of a chunk file: a version other than this
//! build's (1; a newer build's file, after a downgrade) is reported as `Corrupt` with
//! the version found and the one this build reads. This build cannot check such a chunk, so
//! it must not serve it: like a damaged chunk, the service and scrub set it aside in the
//! quarantine directory (kept, not deleted), and the chunk is read and repaired from its
//! replicas.
//!
//! Reads check every block they touch before any byte leaves the provider. Ranges under
//! `SENDFILE_THRESHOLD` (512 KiB) are read with positioned reads (pread) into memory, checked
//! and sent from there. Larger ones are checked where they are, then sent from the file with
//! sendfile (the checked blocks are in the page cache by then): from 1 MiB
//! (`tomus_wire::mapping::MIN_MAPPED_LEN`) in place in a memory map of the file, since
//! copying them out only to check them cost twice what the checks did; below that with
//! positioned reads into a small buffer, which costs no more than the mapping. A chunk file
//! truncated underneath (another process, an operator) or a bad sector raises SIGBUS on a
//! mapped page; the checksum pass survives it (`tomus_wire::mapping::guarded`) and the range
//! is checked again with positioned reads, which return a short read or EIO, reported as
//! `Corrupt` for that chunk alone. If the file shrinks between the check and sendfile,
//! sendfile comes back short, the response fails and its connection is closed.
//!
//! A chunk file found corrupt is moved to `<dir>/quarantine/<id>` (kept for inspection, no
//! longer listed or served); a small chunk found corrupt is deleted from its log.
//!
//! Crash safety: a chunk file is written under a temporary name, synced, renamed into place
//! and its directory synced (with fsync on), so a crash leaves the whole chunk or none of it;
//! leftover temporary files are removed at startup.
//!
//! The store's parts: `files.rs` holds the chunk files on disk (paths, writes, ranged
//! reads, listing, deletion, quarantine, startup); `format.rs` the chunk file format (header,
//! sizes, checksums of whole chunks, positioned reads); `verify.rs` the checking of blocks
//! against their checksums and the checksum of a range being sent. This module is the
//! store's API, which sends small chunks to the small-chunk log and the rest to the files.
//!
//! Memory-class chunks (their id says so, see [`ChunkId::is_memory`]) go to the memory
//! class store instead ([`crate::memory_class`]) and are listed, read, verified and deleted
//! from there like the others, so repair, scrub and garbage collection treat them alike.

/// Chunk files written by a client on this host, adopted (short-circuit writes).
mod adopt;
/// Which durably written chunk files keep their pages in the page cache.
pub mod drop_behind;
/// The chunk files on disk: paths, writes, ranged reads, listing, deletion, quarantine.
mod files;
/// The chunk file format: header, sizes, whole-chunk checksums, positioned reads.
mod format;
#[cfg(test)]
mod tests;
/// Checking blocks against their stored checksums; the checksum of a range being sent.
mod verify;

use std::ops::Range;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{checksum, ChunkEntry, Error, ErrorKind, FileRange, Result, ScrubReport};

use crate::memory_class::MemoryChunks;
use crate::small_chunks::{SmallChunks, SEGMENT_SIZE, SMALL_CHUNK_MAX};
use crate::{blocking, io_error};
pub(crate) use files::mtime_ms;
use files::{prepare_dir, sweep_stale_temporaries, Inner};
pub use tomus_wire::chunk_file::BLOCK_SIZE;

/// The journal of the memory-class chunk ids taken (see [`crate::memory_class`]).
const MEMORY_JOURNAL: &str = "memory-class.ids";
/// Quarantined chunks remembered for the manager at most (more are found by repair's audit).
const MAX_LOST_REPORTS: usize = 100_000;
/// Data one scrub step verifies at most (it stops after the chunk that crosses it), so one
/// request stays short.
pub const SCRUB_BUDGET: u64 = 256 << 20;

/// A verified chunk range: in memory, or a range of the chunk file.
pub enum ChunkRange {
    Memory(Bytes),
    File(FileRange),
}

/// Number of chunks and their total size on disk (headers and checksums included), chunk
/// files and small-chunk log together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkStats {
    pub chunks: u64,
    pub bytes: u64,
}

/// The chunks of one provider. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ChunkStore {
    inner: Arc<Inner>,
    /// Memory-class chunks (none kept unless given a capacity with `with_memory`).
    memory: MemoryChunks,
}

impl ChunkStore {
    /// Opens (creating if needed) the store in `dir`, counting the chunks already there,
    /// removing temporary files a crash left behind and loading the small-chunk log. Starts
    /// the log's writer thread, which ends when the last clone of the store is dropped.
    pub async fn open(dir: PathBuf, fsync: bool) -> Result<Self> {
        Self::open_with_segment_size(dir, fsync, SEGMENT_SIZE).await
    }

    /// [`ChunkStore::open`] with small-chunk log segments of `segment_size` bytes.
    pub(crate) async fn open_with_segment_size(
        dir: PathBuf,
        fsync: bool,
        segment_size: u64,
    ) -> Result<Self> {
        blocking(move || {
            let stats = prepare_dir(&dir, fsync)
                .map_err(|e| io_error(format_args!("opening chunk store {}", dir.display()), e))?;
            let small = SmallChunks::open(&dir, fsync, segment_size)?;
            Ok(ChunkStore {
                inner: Arc::new(Inner {
                    dir,
                    fsync,
                    chunks: AtomicU64::new(stats.chunks),
                    bytes: AtomicU64::new(stats.bytes),
                    small,
                    cache_behind: drop_behind::CacheBehindWrites::new(drop_behind::DEFAULT_BUDGET),
                    lost: std::sync::Mutex::new(Vec::new()),
                    lost_waker: Arc::new(tokio::sync::Notify::new()),
                    #[cfg(test)]
                    after_open: std::sync::Mutex::new(None),
                }),
                memory: MemoryChunks::new(0),
            })
        })
        .await
    }

    /// Removes the temporary chunk files nobody wrote to for `idle` (a short-circuit
    /// writer that died before the adoption); returns how many and their bytes.
    pub async fn sweep_stale_temporaries(&self, idle: Duration) -> Result<(usize, u64)> {
        let dir = self.inner.dir.clone();
        blocking(move || sweep_stale_temporaries(&dir, idle, SystemTime::now())).await
    }

    /// Keeps the pages of the chunk files synced most recently in the page cache up to
    /// `bytes` (0: drops every file's pages once it is durable) instead of
    /// [`drop_behind::DEFAULT_BUDGET`]. Only durable writes (fsync on) drop pages: without
    /// syncs they are dirty and the kernel writes them back in its own time.
    pub fn with_cache_behind_writes(self, bytes: u64) -> Self {
        self.inner.cache_behind.set_budget(bytes);
        self
    }

    /// The same store keeping memory-class chunks, up to `capacity` bytes of them. The
    /// memory-class chunks a previous run of this store held are gone: they are reported
    /// lost (with the quarantined ones), so repair re-creates them elsewhere at once.
    pub fn with_memory(mut self, capacity: u64) -> Result<Self> {
        let (memory, gone) =
            MemoryChunks::new(capacity).with_journal(&self.inner.dir.join(MEMORY_JOURNAL))?;
        if !gone.is_empty() {
            tracing::info!(
                "{} memory-class chunks of the previous run are gone: reporting them lost",
                gone.len()
            );
            self.restore_lost(gone);
        }
        self.memory = memory;
        Ok(self)
    }

    /// The memory-class chunks.
    pub fn memory(&self) -> &MemoryChunks {
        &self.memory
    }

    /// Chunks held (memory-class ones included) and bytes on disk.
    pub fn stats(&self) -> ChunkStats {
        let (small_chunks, small_bytes) = self.inner.small.stats();
        let (memory_chunks, _) = self.memory.stats();
        ChunkStats {
            chunks: self.inner.chunks.load(Ordering::Relaxed) + small_chunks + memory_chunks,
            bytes: self.inner.bytes.load(Ordering::Relaxed) + small_bytes,
        }
    }

    /// Stores chunk `id` atomically: readers see the whole chunk or none of it. Chunks shorter
    /// than [`SMALL_CHUNK_MAX`] go to the small-chunk log, where storing an id again is
    /// skipped; a larger chunk stored again replaces its file with the same content (a
    /// retried write). Either is harmless.
    pub async fn put(&self, id: ChunkId, data: Bytes) -> Result<()> {
        self.put_inner(id, data, None).await
    }

    /// [`ChunkStore::put`] of data that arrived with `sent_crc`, its sender's CRC32C: data
    /// damaged on the way is refused (`Corrupt`) before anything is stored. For a chunk file
    /// the check takes no pass of its own: it combines the block checksums the file stores.
    pub async fn put_checked(&self, id: ChunkId, data: Bytes, sent_crc: u32) -> Result<()> {
        self.put_inner(id, data, Some(sent_crc)).await
    }

    async fn put_inner(&self, id: ChunkId, data: Bytes, sent_crc: Option<u32>) -> Result<()> {
        let len = data.len() as u64;
        if id.is_memory() {
            let crc = match sent_crc {
                Some(sent) => {
                    checksum::check_arrived(&data, sent, || format!("chunk {id}"))?;
                    sent
                }
                None => checksum::crc32c(&data),
            };
            self.memory.put(id, data, crc)?;
        } else if data.len() < SMALL_CHUNK_MAX {
            if let Some(sent) = sent_crc {
                checksum::check_arrived(&data, sent, || format!("chunk {id}"))?;
            }
            self.inner.small.put(id, data).await?;
        } else {
            let inner = self.inner.clone();
            blocking(move || inner.put(id, &data, sent_crc)).await?;
        }
        let m = tomus_metrics::provider();
        m.written_bytes.inc_by(len);
        m.written_chunks.inc();
        Ok(())
    }

    /// Adopts the file `name`, written by a client on this host in the fan-out directory of
    /// chunk `id`, as that chunk (see `adopt.rs`); `sent_crc` is its data's CRC32C.
    pub async fn adopt(&self, id: ChunkId, name: String, sent_crc: u32) -> Result<()> {
        if id.is_memory() {
            return Err(Error::invalid(format!(
                "chunk {id} is a memory-class chunk: it is never a file"
            )));
        }
        let inner = self.inner.clone();
        let len = blocking(move || inner.adopt(id, &name, sent_crc)).await?;
        let m = tomus_metrics::provider();
        m.written_bytes.inc_by(len);
        m.written_chunks.inc();
        Ok(())
    }

    /// Runs `hook` with the path of the next chunk file opened, once its header and size
    /// have been checked (before any data is read).
    #[cfg(test)]
    pub(crate) fn after_open(&self, hook: impl FnOnce(&Path) + Send + 'static) {
        let mut slot = self
            .inner
            .after_open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(Box::new(hook));
    }

    /// The small-chunk log, for tests that look at it directly.
    #[cfg(test)]
    pub(crate) fn small(&self) -> &SmallChunks {
        &self.inner.small
    }

    /// Bytes `[offset, offset + len)` of chunk `id`, verified, for sending, with their CRC32C:
    /// large ranges stay in the file (see [`ChunkRange`]).
    pub async fn read_range(
        &self,
        id: ChunkId,
        offset: u64,
        len: u64,
    ) -> Result<(ChunkRange, u32)> {
        if let Some((data, whole_crc)) = self.memory.get(id) {
            let (piece, crc) = slice_in_memory(id, &data, whole_crc, offset, len)?;
            return Ok((ChunkRange::Memory(piece), crc));
        }
        // A small chunk in the page cache is read here: under 4 KiB S3 GETs the hand-off to
        // the blocking pool and back was most of the provider's CPU per read.
        if let Some(found) = self.inner.small.read_cached(id, offset, len) {
            return found.map(small_range);
        }
        let inner = self.inner.clone();
        blocking(move || inner.read_range(id, offset, len)).await
    }

    /// Bytes `[offset, offset + len)` of chunk `id`, verified, always in memory: for tests
    /// (the service sends [`ChunkStore::read_range`] results as they are).
    #[cfg(test)]
    pub async fn get(&self, id: ChunkId, offset: u64, len: u64) -> Result<Bytes> {
        let inner = self.inner.clone();
        blocking(move || inner.get(id, offset, len)).await
    }

    /// The chunks held (files and small-chunk log together) after `start_after` in id order,
    /// at most `limit`. A chunk file's `stored_ms` is its modification time.
    pub async fn list(
        &self,
        start_after: Option<ChunkId>,
        limit: usize,
    ) -> Result<Vec<ChunkEntry>> {
        let small = self.inner.small.list(start_after, limit);
        let memory = self.memory.list(start_after, limit);
        let inner = self.inner.clone();
        let files = blocking(move || inner.list_files(start_after, limit)).await?;
        Ok(merge_sorted(
            merge_sorted(small, memory, limit),
            files,
            limit,
        ))
    }

    /// Removes chunks; ids not held are ignored. Durable when it returns (with fsync on).
    /// Returns the ids whose files could not be removed (a disk error).
    pub async fn delete(&self, ids: &[ChunkId]) -> Result<Vec<ChunkId>> {
        self.memory.delete(ids);
        self.inner.small.delete(ids).await?;
        let inner = self.inner.clone();
        let ids = ids.to_vec();
        let n = ids.len();
        let failed = blocking(move || inner.delete_files(&ids)).await?;
        tomus_metrics::provider()
            .deleted_chunks
            .inc_by((n - failed.len()) as u64);
        Ok(failed)
    }

    /// Verifies every checksum of chunk `id` and returns its data length.
    pub async fn verify(&self, id: ChunkId) -> Result<u64> {
        if let Some((data, crc)) = self.memory.get(id) {
            checksum::check_arrived(&data, crc, || format!("memory-class chunk {id}"))?;
            return Ok(data.len() as u64);
        }
        let inner = self.inner.clone();
        blocking(move || inner.verify(id)).await
    }

    /// Takes a corrupt chunk out of service: a small chunk is deleted from its log, a chunk
    /// file moved to the quarantine directory. Returns whether the chunk was held.
    pub async fn quarantine(&self, id: ChunkId) -> Result<bool> {
        let held = if self.memory.contains(id) {
            self.memory.delete(&[id]);
            true
        } else if self.inner.small.contains(id) {
            self.inner.small.delete(&[id]).await?;
            true
        } else {
            let inner = self.inner.clone();
            blocking(move || inner.quarantine_file(id)).await?
        };
        if held {
            tomus_metrics::provider().quarantined_chunks.inc();
            let mut lost = self.inner.lost.lock().unwrap_or_else(|p| p.into_inner());
            if lost.len() < MAX_LOST_REPORTS {
                lost.push(id);
            }
            self.inner.lost_waker.notify_one();
        }
        Ok(held)
    }

    /// Notified whenever a chunk is quarantined: the heartbeat reports it without waiting
    /// for its interval, so repair starts at once.
    pub fn lost_waker(&self) -> Arc<tokio::sync::Notify> {
        self.inner.lost_waker.clone()
    }

    /// Chunks quarantined since the last call, at most `limit` (to report to the manager).
    pub fn take_lost(&self, limit: usize) -> Vec<ChunkId> {
        let mut lost = self.inner.lost.lock().unwrap_or_else(|p| p.into_inner());
        let n = lost.len().min(limit);
        lost.drain(..n).collect()
    }

    /// Puts back reports that did not reach the manager.
    pub fn restore_lost(&self, ids: Vec<ChunkId>) {
        let mut lost = self.inner.lost.lock().unwrap_or_else(|p| p.into_inner());
        let room = MAX_LOST_REPORTS.saturating_sub(lost.len());
        lost.extend(ids.into_iter().take(room));
    }

    /// One scrub step: verifies the chunks after `start_after` in id order (at most `limit`,
    /// at least one, and none after the one crossing [`SCRUB_BUDGET`] bytes) and quarantines
    /// the corrupt ones. `next` is the last chunk examined while more remain.
    pub async fn scrub(&self, start_after: Option<ChunkId>, limit: usize) -> Result<ScrubReport> {
        let report = self
            .scrub_with_budget(start_after, limit, SCRUB_BUDGET)
            .await?;
        let m = tomus_metrics::provider();
        m.scrubbed_chunks.inc_by(report.checked);
        m.scrubbed_bytes.inc_by(report.bytes);
        Ok(report)
    }

    pub(crate) async fn scrub_with_budget(
        &self,
        start_after: Option<ChunkId>,
        limit: usize,
        budget: u64,
    ) -> Result<ScrubReport> {
        let limit = limit.max(1);
        // One more than examined at most, to know whether any remain.
        let entries = self.list(start_after, limit + 1).await?;
        let mut report = ScrubReport {
            checked: 0,
            bytes: 0,
            corrupt: Vec::new(),
            next: None,
        };
        let mut examined = 0;
        for entry in entries.iter().take(limit) {
            if report.bytes >= budget {
                break;
            }
            match self.verify(entry.id).await {
                Ok(len) => {
                    report.checked += 1;
                    report.bytes += len;
                }
                Err(e) if e.kind == ErrorKind::Corrupt => {
                    tracing::warn!("scrub: chunk {} is corrupt, quarantining it: {e}", entry.id);
                    self.quarantine(entry.id).await?;
                    report.checked += 1;
                    report.bytes += entry.len;
                    report.corrupt.push(entry.id);
                }
                // Deleted since it was listed.
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            examined += 1;
        }
        if examined < entries.len() {
            report.next = entries[..examined].last().map(|e| e.id);
        }
        Ok(report)
    }
}

/// The first `limit` entries of two id-sorted lists together (an id in both counts once).
fn merge_sorted(a: Vec<ChunkEntry>, b: Vec<ChunkEntry>, limit: usize) -> Vec<ChunkEntry> {
    let mut all = a;
    all.extend(b);
    all.sort_by_key(|e| e.id);
    all.dedup_by_key(|e| e.id);
    all.truncate(limit);
    all
}

/// A verified small chunk's bytes, to send from memory with their CRC32C.
fn small_range(bytes: Bytes) -> (ChunkRange, u32) {
    let crc = crc32c::crc32c(&bytes);
    (ChunkRange::Memory(bytes), crc)
}

/// Bytes `[offset, offset + len)` of a chunk held in memory as `data` with the CRC32C
/// `whole_crc`, and their CRC32C (the whole chunk's when the range is all of it).
pub(crate) fn slice_in_memory(
    id: ChunkId,
    data: &Bytes,
    whole_crc: u32,
    offset: u64,
    len: u64,
) -> Result<(Bytes, u32)> {
    let piece = data.slice(check_range(id, offset, len, data.len() as u64)?);
    let crc = if piece.len() == data.len() {
        whole_crc
    } else {
        checksum::crc32c(&piece)
    };
    Ok((piece, crc))
}

/// The byte range `[offset, offset + len)` of a chunk of `chunk_len` bytes, or `OutOfRange`.
pub(crate) fn check_range(
    id: ChunkId,
    offset: u64,
    len: u64,
    chunk_len: u64,
) -> Result<Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= chunk_len => Ok(to_usize(offset, id)?..to_usize(end, id)?),
        _ => Err(Error::out_of_range(format!(
            "range {offset}+{len} is past the end of chunk {id} ({chunk_len} bytes)"
        ))),
    }
}

fn to_usize(n: u64, id: ChunkId) -> Result<usize> {
    usize::try_from(n)
        .map_err(|_| Error::out_of_range(format!("chunk {id}: {n} bytes do not fit in memory")))
}
