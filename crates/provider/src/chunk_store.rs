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
//! Reads check every block they touch before any byte leaves the provider. Data is read with
//! positioned reads (pread) into a small buffer, never through a memory map: a chunk file
//! truncated underneath (another process, an operator) or a bad sector would raise SIGBUS on
//! a mapped page and kill the whole provider, where pread returns a short read or EIO, which
//! are reported as `Corrupt` for that chunk alone. Ranges of `SENDFILE_THRESHOLD` (512 KiB)
//! or more are then sent from the file with sendfile (the verified blocks are in the page
//! cache by then); if the file shrinks between the check and sendfile, sendfile comes back
//! short, the response fails and its connection is closed.
//!
//! A chunk file found corrupt is moved to `<dir>/quarantine/<id>` (kept for inspection, no
//! longer listed or served); a small chunk found corrupt is deleted from its log.
//!
//! Crash safety: a chunk file is written under a temporary name, synced, renamed into place
//! and its directory synced (with fsync on), so a crash leaves the whole chunk or none of it;
//! leftover temporary files are removed at startup.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{checksum, ChunkEntry, Error, ErrorKind, FileRange, Result, ScrubReport};

use crate::small_chunks::{SmallChunks, SEGMENT_SIZE, SMALL_CHUNK_MAX};
use crate::{blocking, io_error, sync_dir};

const MAGIC: &[u8; 4] = b"TCHK";
/// The chunk file format this build writes and reads.
const FORMAT_VERSION: u8 = 1;
/// Granularity of checksums: the smallest unit a read verifies.
pub const BLOCK_SIZE: u32 = 64 << 10;
const HEADER_LEN: u64 = 4 + 1 + 8 + 4;
const CRC_LEN: u64 = 4;
/// Suffix of files being written; leftovers of a crash are removed at startup.
const TMP_SUFFIX: &str = ".tmp";
/// Ranges at least this large are verified in pieces and then sent from the file with
/// sendfile; smaller ones are read into memory once, verified and sent from there.
const SENDFILE_THRESHOLD: usize = 512 << 10;
/// Quarantined chunks remembered for the manager at most (more are found by repair's audit).
const MAX_LOST_REPORTS: usize = 100_000;
/// Where corrupt chunk files go, inside the store's directory.
const QUARANTINE_DIR: &str = "quarantine";
/// Blocks checked per positioned read when a range is verified without being kept (before
/// sendfile, and by verify and scrub): 4 x 64 KiB = 256 KiB, small enough to stay in the L2
/// cache between the read that copies it and the CRC32C that checks it, large enough that
/// the system calls cost little.
const VERIFY_BLOCKS: u64 = 4;
/// Data one scrub step verifies at most (it stops after the chunk that crosses it), so one
/// request stays short.
pub const SCRUB_BUDGET: u64 = 256 << 20;

thread_local! {
    /// The buffer [`verify_file_blocks`] reads into, kept per thread (the blocking pool's
    /// threads) so verification does not allocate. At most `VERIFY_BLOCKS` blocks each.
    static VERIFY_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

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
}

struct Inner {
    dir: PathBuf,
    fsync: bool,
    /// Counts the chunk files only.
    chunks: AtomicU64,
    bytes: AtomicU64,
    small: SmallChunks,
    /// Chunks quarantined since the manager last heard of it: the heartbeat reports them, so
    /// repair re-creates these copies at once instead of at its next full audit.
    lost: std::sync::Mutex<Vec<ChunkId>>,
    /// Told when a chunk is quarantined, so the report goes out at once.
    lost_waker: Arc<tokio::sync::Notify>,
    /// Run once by the next [`Inner::open_chunk`], after its size check: lets tests change
    /// a chunk file underneath a read, as another process or a failing disk could.
    #[cfg(test)]
    after_open: std::sync::Mutex<Option<OpenHook>>,
}

#[cfg(test)]
type OpenHook = Box<dyn FnOnce(&Path) + Send>;

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
                    lost: std::sync::Mutex::new(Vec::new()),
                    lost_waker: Arc::new(tokio::sync::Notify::new()),
                    #[cfg(test)]
                    after_open: std::sync::Mutex::new(None),
                }),
            })
        })
        .await
    }

    pub fn stats(&self) -> ChunkStats {
        let (small_chunks, small_bytes) = self.inner.small.stats();
        ChunkStats {
            chunks: self.inner.chunks.load(Ordering::Relaxed) + small_chunks,
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
        if data.len() < SMALL_CHUNK_MAX {
            if let Some(sent) = sent_crc {
                checksum::check_arrived(&data, sent, || format!("chunk {id}"))?;
            }
            return self.inner.small.put(id, data).await;
        }
        let inner = self.inner.clone();
        blocking(move || inner.put(id, &data, sent_crc)).await
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
        let inner = self.inner.clone();
        let files = blocking(move || inner.list_files(start_after, limit)).await?;
        Ok(merge_sorted(small, files, limit))
    }

    /// Removes chunks; ids not held are ignored. Durable when it returns (with fsync on).
    pub async fn delete(&self, ids: &[ChunkId]) -> Result<()> {
        self.inner.small.delete(ids).await?;
        let inner = self.inner.clone();
        let ids = ids.to_vec();
        blocking(move || inner.delete_files(&ids)).await
    }

    /// Verifies every checksum of chunk `id` and returns its data length.
    pub async fn verify(&self, id: ChunkId) -> Result<u64> {
        let inner = self.inner.clone();
        blocking(move || inner.verify(id)).await
    }

    /// Takes a corrupt chunk out of service: a small chunk is deleted from its log, a chunk
    /// file moved to the quarantine directory. Returns whether the chunk was held.
    pub async fn quarantine(&self, id: ChunkId) -> Result<bool> {
        let held = if self.inner.small.contains(id) {
            self.inner.small.delete(&[id]).await?;
            true
        } else {
            let inner = self.inner.clone();
            blocking(move || inner.quarantine_file(id)).await?
        };
        if held {
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
        self.scrub_with_budget(start_after, limit, SCRUB_BUDGET)
            .await
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

/// A file's modification time as Unix milliseconds; now if the file system has none (later
/// than the truth is the safe side: garbage collection spares recent chunks).
pub(crate) fn mtime_ms(meta: &fs::Metadata) -> u64 {
    meta.modified()
        .map_or_else(|_| tomus_wire::now_ms(), unix_ms)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Inner {
    fn path_of(&self, id: ChunkId) -> PathBuf {
        let name = id.to_string();
        self.dir.join(&name[..2]).join(name)
    }

    fn put(&self, id: ChunkId, data: &[u8], sent_crc: Option<u32>) -> Result<()> {
        static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);
        let header = encode_header(data);
        if let Some(sent) = sent_crc {
            let got = whole_crc(&header, data);
            if got != sent {
                return Err(checksum::damaged(format!("chunk {id}"), got, sent));
            }
        }
        let path = self.path_of(id);
        let parent = self.dir.join(&id.to_string()[..2]);
        let tmp = parent.join(format!(
            ".{id}.{}.{}{TMP_SUFFIX}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file_len = match write_chunk_file(&tmp, &header, data, self.fsync) {
            Ok(n) => n,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(io_error(format_args!("storing chunk {id}"), e));
            }
        };
        // Only for the statistics: a concurrent put of the same id may count it twice.
        let existed = path.symlink_metadata().is_ok();
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(io_error(format_args!("storing chunk {id}"), e));
        }
        if !existed {
            self.chunks.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(file_len, Ordering::Relaxed);
        }
        if self.fsync {
            // The rename itself must be durable, not only the file's contents.
            sync_dir(&parent).map_err(|e| io_error(format_args!("storing chunk {id}"), e))?;
        }
        Ok(())
    }

    /// Verified bytes `[offset, offset + len)` of chunk `id`, with their CRC32C: small
    /// ranges in memory, large ones as a file range (checked with positioned reads) to be
    /// sent with sendfile.
    fn read_range(&self, id: ChunkId, offset: u64, len: u64) -> Result<(ChunkRange, u32)> {
        if let Some(found) = self.small.read(id, offset, len) {
            return found.map(|b| {
                let crc = crc32c::crc32c(&b);
                (ChunkRange::Memory(b), crc)
            });
        }
        let (file, data_len) = self.open_chunk(id)?;
        let blocks = data_len.div_ceil(u64::from(BLOCK_SIZE));
        let range = check_range(id, offset, len, data_len)?;
        if range.is_empty() {
            return Ok((ChunkRange::Memory(Bytes::new()), 0));
        }

        let block = u64::from(BLOCK_SIZE);
        let first = offset / block;
        let last = (offset + len - 1) / block;
        let count = last - first + 1;
        let mut crcs = vec![0u8; to_usize(count * CRC_LEN, id)?];
        read_at(&file, &mut crcs, HEADER_LEN + first * CRC_LEN, id)?;
        let data_start = first * block;
        let data_end = ((last + 1) * block).min(data_len);
        let file_start = HEADER_LEN + blocks * CRC_LEN + data_start;
        let span = to_usize(data_end - data_start, id)?;
        let skip = to_usize(offset - data_start, id)?;
        let mut sent = RangeCrc::new(skip as u64..(skip + range.len()) as u64);
        if span >= SENDFILE_THRESHOLD {
            // Check the blocks a few at a time, then let the kernel send the verified range
            // from the page cache. Not through a memory map: the file may be cut short after
            // the size check above (another process, a failing disk), and a mapped page past
            // the end raises SIGBUS, killing the process, where pread returns short.
            verify_file_blocks(&file, id, file_start, first, span as u64, &crcs, &mut sent)?;
            let data = ChunkRange::File(FileRange {
                file,
                offset: file_start + skip as u64,
                len: range.len() as u64,
            });
            return Ok((data, sent.crc()));
        }
        let mut buf = vec![0u8; span];
        read_at(&file, &mut buf, file_start, id)?;
        verify_blocks(id, first, &buf, &crcs, &mut sent, 0)?;
        let data = ChunkRange::Memory(Bytes::from(buf).slice(skip..skip + range.len()));
        Ok((data, sent.crc()))
    }

    /// Opens chunk file `id` and checks its header against its size; returns the file and
    /// the data length.
    fn open_chunk(&self, id: ChunkId) -> Result<(File, u64)> {
        let file = match File::open(self.path_of(id)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::not_found(format!("chunk {id} not found")))
            }
            Err(e) => return Err(io_error(format_args!("opening chunk {id}"), e)),
        };
        let file_len = file
            .metadata()
            .map_err(|e| io_error(format_args!("reading chunk {id}"), e))?
            .len();
        let mut header = [0u8; HEADER_LEN as usize];
        read_at(&file, &mut header, 0, id)?;
        let data_len = parse_header(&header, id)?;
        let expected_len = file_len_for(data_len)
            .ok_or_else(|| Error::corrupt(format!("chunk {id}: impossible data length")))?;
        if file_len != expected_len {
            return Err(Error::corrupt(format!(
                "chunk {id}: file is {file_len} bytes, its header implies {expected_len}"
            )));
        }
        #[cfg(test)]
        {
            let hook = self
                .after_open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(hook) = hook {
                hook(&self.path_of(id));
            }
        }
        Ok((file, data_len))
    }

    /// Verifies all of chunk `id` (small or file) and returns its data length.
    fn verify(&self, id: ChunkId) -> Result<u64> {
        if let Some(found) = self.small.verify(id) {
            return found;
        }
        let (file, data_len) = self.open_chunk(id)?;
        let block = u64::from(BLOCK_SIZE);
        let blocks = data_len.div_ceil(block);
        let mut crcs = vec![0u8; to_usize(blocks * CRC_LEN, id)?];
        read_at(&file, &mut crcs, HEADER_LEN, id)?;
        let data_start = HEADER_LEN + blocks * CRC_LEN;
        let mut unused = RangeCrc::new(0..0);
        verify_file_blocks(&file, id, data_start, 0, data_len, &crcs, &mut unused)?;
        Ok(data_len)
    }

    /// The chunk files after `start_after` in id order, at most `limit`. The fan-out
    /// directories are in id order (they are the first byte of the id), so only the ones up
    /// to the directory where `limit` is reached are read.
    fn list_files(&self, start_after: Option<ChunkId>, limit: usize) -> Result<Vec<ChunkEntry>> {
        let mut out = Vec::new();
        if limit == 0 || start_after == Some(ChunkId(u128::MAX)) {
            return Ok(out);
        }
        let first = start_after.map_or(0, |id| (id.0 >> 120) as u8);
        for prefix in first..=u8::MAX {
            let sub = self.dir.join(format!("{prefix:02x}"));
            let mut found = self
                .list_dir(&sub, start_after)
                .map_err(|e| io_error(format_args!("listing {}", sub.display()), e))?;
            found.sort_unstable_by_key(|e| e.id);
            out.extend(found);
            if out.len() >= limit {
                break;
            }
        }
        out.truncate(limit);
        for entry in &mut out {
            if let Ok(len) = self.header_len(entry.id) {
                entry.len = len;
            }
        }
        Ok(out)
    }

    /// The data length the header of chunk file `id` states.
    fn header_len(&self, id: ChunkId) -> Result<u64> {
        let file = File::open(self.path_of(id))
            .map_err(|e| io_error(format_args!("opening chunk {id}"), e))?;
        let mut header = [0u8; HEADER_LEN as usize];
        read_at(&file, &mut header, 0, id)?;
        parse_header(&header, id)
    }

    /// The chunk files in one fan-out directory after `start_after`, unordered.
    fn list_dir(&self, sub: &Path, start_after: Option<ChunkId>) -> io::Result<Vec<ChunkEntry>> {
        let mut found = Vec::new();
        let entries = match fs::read_dir(sub) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Some(id) = parse_chunk_name(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            if start_after.is_some_and(|after| id <= after) {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                // Deleted since the directory was read.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            // The length from the file size, corrected from the header for the entries
            // returned (a truncated file can have the size of a shorter chunk).
            found.push(ChunkEntry {
                id,
                len: data_len_for(meta.len()).unwrap_or(0),
                stored_ms: mtime_ms(&meta),
            });
        }
        Ok(found)
    }

    fn delete_files(&self, ids: &[ChunkId]) -> Result<()> {
        let mut dirs = Vec::new();
        for &id in ids {
            let path = self.path_of(id);
            let removed = self
                .remove_counted(&path, |p| fs::remove_file(p))
                .map_err(|e| io_error(format_args!("deleting chunk {id}"), e))?;
            if removed {
                dirs.push(self.dir.join(&id.to_string()[..2]));
            }
        }
        if self.fsync {
            dirs.sort_unstable();
            dirs.dedup();
            for dir in dirs {
                sync_dir(&dir).map_err(|e| io_error("deleting chunks", e))?;
            }
        }
        Ok(())
    }

    /// Moves chunk file `id` into the quarantine directory (replacing an earlier copy there).
    fn quarantine_file(&self, id: ChunkId) -> Result<bool> {
        let context = || format!("quarantining chunk {id}");
        let qdir = self.dir.join(QUARANTINE_DIR);
        fs::create_dir_all(&qdir).map_err(|e| io_error(context(), e))?;
        let target = qdir.join(id.to_string());
        let moved = self
            .remove_counted(&self.path_of(id), |p| fs::rename(p, &target))
            .map_err(|e| io_error(context(), e))?;
        if moved {
            tracing::warn!("chunk {id} moved to {}", target.display());
            if self.fsync {
                sync_dir(&self.dir.join(&id.to_string()[..2]))
                    .and_then(|()| sync_dir(&qdir))
                    .map_err(|e| io_error(context(), e))?;
            }
        }
        Ok(moved)
    }

    /// Takes the chunk file at `path` away with `remove` (unlink or rename) and takes it off
    /// the statistics. Returns false if there was no such file.
    fn remove_counted(
        &self,
        path: &Path,
        remove: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<bool> {
        let file_len = match path.symlink_metadata() {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match remove(path) {
            Ok(()) => {}
            // Removed by a concurrent request, which counted it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        }
        saturating_sub(&self.chunks, 1);
        saturating_sub(&self.bytes, file_len);
        Ok(true)
    }

    #[cfg(test)]
    fn get(&self, id: ChunkId, offset: u64, len: u64) -> Result<Bytes> {
        let (range, crc) = self.read_range(id, offset, len)?;
        let data = match range {
            ChunkRange::Memory(b) => b,
            ChunkRange::File(r) => {
                let mut buf = vec![0u8; to_usize(r.len, id)?];
                read_at(&r.file, &mut buf, r.offset, id)?;
                Bytes::from(buf)
            }
        };
        // Every test read checks the range checksum the service would send.
        assert_eq!(crc32c::crc32c(&data), crc, "range checksum of chunk {id}");
        Ok(data)
    }
}

fn saturating_sub(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

/// Size of the file holding `data_len` bytes of data.
fn file_len_for(data_len: u64) -> Option<u64> {
    data_len
        .div_ceil(u64::from(BLOCK_SIZE))
        .checked_mul(CRC_LEN)?
        .checked_add(HEADER_LEN)?
        .checked_add(data_len)
}

/// The data length of a chunk file of `file_len` bytes, if that size is possible: the file
/// is the header, 4 bytes per block and the data, so it holds ceil(body / (block + 4))
/// blocks.
fn data_len_for(file_len: u64) -> Option<u64> {
    let body = file_len.checked_sub(HEADER_LEN)?;
    let blocks = body.div_ceil(u64::from(BLOCK_SIZE) + CRC_LEN);
    let data_len = body.checked_sub(blocks * CRC_LEN)?;
    (file_len_for(data_len) == Some(file_len)).then_some(data_len)
}

/// Checks each block of `data` (blocks `first..` of a chunk) against its stored CRC32C;
/// `crcs` must hold (at least) one per block.
/// Checks `data` (starting at the start of block `first`) against `crcs`, the checksums of
/// its blocks; feeds each verified block to `sent` (the checksum of the range being sent),
/// `at` being the offset of `data` in the span `sent` counts from.
fn verify_blocks(
    id: ChunkId,
    first: u64,
    data: &[u8],
    crcs: &[u8],
    sent: &mut RangeCrc,
    at: u64,
) -> Result<()> {
    let blocks = data.len().div_ceil(BLOCK_SIZE as usize);
    // A block without its checksum would pass unchecked (zip stops at the shorter side).
    let Some(crcs) = crcs.get(..blocks * CRC_LEN as usize) else {
        return Err(Error::internal(format!(
            "chunk {id}: {blocks} blocks to check from block {first} but {} checksums",
            crcs.len() / CRC_LEN as usize
        )));
    };
    for (i, (data, crc)) in data
        .chunks(BLOCK_SIZE as usize)
        .zip(crcs.chunks_exact(CRC_LEN as usize))
        .enumerate()
    {
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32c::crc32c(data) != stored {
            return Err(Error::corrupt(format!(
                "chunk {id}: checksum mismatch in block {}",
                first + i as u64
            )));
        }
        sent.block(at + i as u64 * u64::from(BLOCK_SIZE), data, stored);
    }
    Ok(())
}

/// The CRC32C of a range of chunk data, built while its blocks are verified: a whole block
/// inside the range adds its stored checksum (combined with a precomputed operator, a few
/// dozen shifts), the range's partial edge blocks and a chunk's short last block add their
/// bytes. What a reader checks the bytes it got against; no second pass over the data.
pub(crate) struct RangeCrc {
    /// The range, in bytes from the start of the verified span.
    want: Range<u64>,
    crc: u32,
}

impl RangeCrc {
    pub(crate) fn new(want: Range<u64>) -> Self {
        RangeCrc { want, crc: 0 }
    }

    /// Feeds a verified block of `data` at `at` (bytes from the span's start), whose stored
    /// checksum is `stored`. Blocks must come in order.
    fn block(&mut self, at: u64, data: &[u8], stored: u32) {
        let end = at + data.len() as u64;
        let (lo, hi) = (self.want.start.max(at), self.want.end.min(end));
        if lo >= hi {
            return;
        }
        self.crc = if lo == at && hi == end && data.len() == BLOCK_SIZE as usize {
            block_shift().combine(self.crc, stored)
        } else {
            crc32c::crc32c_append(self.crc, &data[(lo - at) as usize..(hi - at) as usize])
        };
    }

    pub(crate) fn crc(&self) -> u32 {
        self.crc
    }
}

/// Checks `len` bytes of chunk data at `pos` in `file`, starting at the start of block
/// `first`, against `crcs` (the checksums of those blocks), reading [`VERIFY_BLOCKS`] blocks
/// at a time into this thread's reused buffer.
fn verify_file_blocks(
    file: &File,
    id: ChunkId,
    pos: u64,
    first: u64,
    len: u64,
    crcs: &[u8],
    sent: &mut RangeCrc,
) -> Result<()> {
    let step = VERIFY_BLOCKS * u64::from(BLOCK_SIZE);
    // Taken out of the thread-local slot for the duration (no borrow to get wrong), put back
    // even when verification fails.
    let mut buf = VERIFY_BUF.take();
    let result = (|| {
        let mut done = 0;
        while done < len {
            let n = step.min(len - done);
            buf.resize(to_usize(n, id)?, 0);
            read_at(file, &mut buf, pos + done, id)?;
            let block = first + done / u64::from(BLOCK_SIZE);
            let at = to_usize((block - first) * CRC_LEN, id)?;
            // Too few checksums leave an empty slice, which verify_blocks reports.
            let crcs = crcs.get(at..).unwrap_or_default();
            verify_blocks(id, block, &buf, crcs, sent, done)?;
            done += n;
        }
        Ok(())
    })();
    VERIFY_BUF.set(buf);
    result
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

/// Validates the fixed header and returns the data length.
fn parse_header(header: &[u8; HEADER_LEN as usize], id: ChunkId) -> Result<u64> {
    if &header[..4] != MAGIC {
        return Err(Error::corrupt(format!("chunk {id}: bad magic")));
    }
    if header[4] != FORMAT_VERSION {
        return Err(Error::corrupt(format!(
            "chunk {id}: chunk file format version {}, this build reads version \
             {FORMAT_VERSION} only (written by a newer tomus?)",
            header[4]
        )));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[5..13]);
    let mut block = [0u8; 4];
    block.copy_from_slice(&header[13..17]);
    let block = u32::from_le_bytes(block);
    if block != BLOCK_SIZE {
        return Err(Error::corrupt(format!(
            "chunk {id}: block size {block}, expected {BLOCK_SIZE}"
        )));
    }
    Ok(u64::from_le_bytes(len))
}

/// Reads exactly `buf.len()` bytes at `pos`. A short file (truncated under the reader) or an
/// EIO (a bad sector) means this chunk's copy is damaged: `Corrupt`, so the chunk is
/// quarantined and repair copies it from another replica. Other errors stay I/O errors.
fn read_at(file: &File, buf: &mut [u8], pos: u64, id: ChunkId) -> Result<()> {
    file.read_exact_at(buf, pos).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::corrupt(format!(
                "chunk {id}: file is truncated (short read of {} bytes at offset {pos})",
                buf.len()
            ))
        } else if e.raw_os_error() == Some(libc::EIO) {
            Error::corrupt(format!("chunk {id}: unreadable at offset {pos}: {e}"))
        } else {
            io_error(format_args!("reading chunk {id}"), e)
        }
    })
}

/// Header plus one checksum per block of `data`.
fn encode_header(data: &[u8]) -> Vec<u8> {
    let blocks = data.len().div_ceil(BLOCK_SIZE as usize);
    let mut out = Vec::with_capacity(HEADER_LEN as usize + blocks * CRC_LEN as usize);
    out.extend_from_slice(MAGIC);
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&BLOCK_SIZE.to_le_bytes());
    for block in data.chunks(BLOCK_SIZE as usize) {
        out.extend_from_slice(&crc32c::crc32c(block).to_le_bytes());
    }
    out
}

/// The operator that appends a whole block to a CRC32C (built once).
fn block_shift() -> checksum::Shift {
    static SHIFT: std::sync::OnceLock<checksum::Shift> = std::sync::OnceLock::new();
    *SHIFT.get_or_init(|| checksum::Shift::new(BLOCK_SIZE as usize))
}

/// The CRC32C of a chunk's `data` from the block checksums in its `header`: whole blocks
/// combined, a short last block checksummed again (at most 64 KiB).
fn whole_crc(header: &[u8], data: &[u8]) -> u32 {
    let crcs = header.get(HEADER_LEN as usize..).unwrap_or_default();
    let mut crc = 0;
    for (block, c) in data
        .chunks(BLOCK_SIZE as usize)
        .zip(crcs.chunks_exact(CRC_LEN as usize))
    {
        crc = if block.len() == BLOCK_SIZE as usize {
            block_shift().combine(crc, u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        } else {
            crc32c::crc32c_append(crc, block)
        };
    }
    crc
}

/// Writes a new chunk file at `path` from its encoded header and data; returns its size.
fn write_chunk_file(path: &Path, header: &[u8], data: &[u8], fsync: bool) -> io::Result<u64> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(header)?;
    file.write_all(data)?;
    if fsync {
        file.sync_data()?;
    }
    Ok((header.len() + data.len()) as u64)
}

fn is_chunk_name(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_chunk_name(name: &str) -> Option<ChunkId> {
    if !is_chunk_name(name) {
        return None;
    }
    u128::from_str_radix(name, 16).ok().map(ChunkId)
}

/// Creates the directory and its 256 fan-out subdirectories, removes stale temporary files
/// and counts the chunks present.
fn prepare_dir(dir: &Path, fsync: bool) -> io::Result<ChunkStats> {
    fs::create_dir_all(dir)?;
    let mut stats = ChunkStats {
        chunks: 0,
        bytes: 0,
    };
    for prefix in 0..=255u8 {
        let sub = dir.join(format!("{prefix:02x}"));
        fs::create_dir_all(&sub)?;
        for entry in fs::read_dir(&sub)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if is_chunk_name(&name) {
                stats.chunks += 1;
                stats.bytes += entry.metadata()?.len();
            } else if name.ends_with(TMP_SUFFIX) {
                tracing::debug!("removing stale temporary file {}", entry.path().display());
                fs::remove_file(entry.path())?;
            }
        }
    }
    if fsync {
        sync_dir(dir)?;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
            .collect()
    }

    async fn store(dir: &TempDir) -> ChunkStore {
        ChunkStore::open(dir.path().join("chunks"), true)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn round_trip_at_block_boundaries() {
        let dir = TempDir::new("chunks");
        let store = store(&dir).await;
        let b = BLOCK_SIZE as u64;
        let sizes = [0u64, 1, b - 1, b, b + 1, (4 << 20) + 3];
        for (i, &size) in sizes.iter().enumerate() {
            let id = ChunkId(0x1000 + i as u128);
            let data = pattern(size as usize, i as u8);
            store.put(id, Bytes::from(data.clone())).await.unwrap();
            assert_eq!(&store.get(id, 0, size).await.unwrap()[..], &data[..]);

            let mut ranges = vec![(0, 0), (size, 0)];
            for edge in [b - 1, b, b + 1, 2 * b, 3 * b - 1, size.saturating_sub(1)] {
                for (off, len) in [(edge, 1), (edge.saturating_sub(5), 10), (edge, b)] {
                    if off + len <= size {
                        ranges.push((off, len));
                    }
                }
            }
            for (off, len) in ranges {
                let got = store.get(id, off, len).await.unwrap();
                assert_eq!(
                    &got[..],
                    &data[off as usize..(off + len) as usize],
                    "{size} {off} {len}"
                );
            }

            let err = store.get(id, size, 1).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::OutOfRange);
            let err = store.get(id, 1, u64::MAX).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::OutOfRange);
        }
        let err = store.get(ChunkId(42), 0, 0).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(store.stats().chunks, sizes.len() as u64);

        // Storing an id again (a retried write: same content) is harmless and not counted
        // twice, in the log and as a file.
        let before = store.stats();
        for i in [1, sizes.len() - 1] {
            let id = ChunkId(0x1000 + i as u128);
            let data = pattern(sizes[i] as usize, i as u8);
            store.put(id, Bytes::from(data.clone())).await.unwrap();
            assert_eq!(&store.get(id, 0, sizes[i]).await.unwrap()[..], &data[..]);
        }
        assert_eq!(store.stats(), before);
    }

    #[tokio::test]
    async fn chunks_that_arrive_damaged_are_refused_and_not_stored() {
        let dir = TempDir::new("chunks-arrived");
        let store = store(&dir).await;
        let b = BLOCK_SIZE as usize;
        // A small-chunk log record, a chunk file of one block, and one of several blocks
        // ending in a partial one.
        for (i, len) in [1000, b, 3 * b + 17].into_iter().enumerate() {
            let id = ChunkId(0x5000 + i as u128);
            let data = pattern(len, i as u8);
            let crc = crc32c::crc32c(&data);
            let mut damaged = data.clone();
            damaged[len / 2] ^= 4;
            let e = store
                .put_checked(id, Bytes::from(damaged), crc)
                .await
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
            assert!(e.message.contains("arrived damaged"), "{e}");
            assert_eq!(
                store.get(id, 0, 1).await.unwrap_err().kind,
                ErrorKind::NotFound,
                "a refused chunk is not stored"
            );
            store
                .put_checked(id, Bytes::from(data.clone()), crc)
                .await
                .unwrap();
            assert_eq!(&store.get(id, 0, len as u64).await.unwrap()[..], &data[..]);
        }
    }

    #[tokio::test]
    async fn reopen_counts_chunks_and_removes_temp_files() {
        let dir = TempDir::new("chunks-reopen");
        let store = store(&dir).await;
        store
            .put(ChunkId(1), Bytes::from(vec![1u8; 100]))
            .await
            .unwrap();
        store
            .put(ChunkId(u128::MAX), Bytes::from(vec![2u8; 70_000]))
            .await
            .unwrap();
        let before = store.stats();
        let stale = dir.path().join("chunks/00/.junk.1.2.tmp");
        fs::write(&stale, b"partial").unwrap();
        drop(store);

        let store = self::store(&dir).await;
        assert_eq!(store.stats(), before);
        assert_eq!(before.chunks, 2);
        assert!(!stale.exists());
        assert_eq!(
            &store.get(ChunkId(1), 0, 100).await.unwrap()[..],
            &[1u8; 100][..]
        );
    }

    #[tokio::test]
    async fn flipped_byte_is_detected_in_its_block_only() {
        let dir = TempDir::new("chunks-corrupt");
        let store = store(&dir).await;
        let id = ChunkId(0xfeed_beef);
        let b = BLOCK_SIZE as u64;
        let data = pattern(3 * b as usize + 17, 9);
        store.put(id, Bytes::from(data.clone())).await.unwrap();

        // Flip a byte in the middle of block 1.
        let path = dir
            .path()
            .join("chunks")
            .join(&id.to_string()[..2])
            .join(id.to_string());
        let mut raw = fs::read(&path).unwrap();
        let data_start = raw.len() - data.len();
        raw[data_start + b as usize + 1234] ^= 0x40;
        fs::write(&path, &raw).unwrap();

        let err = store.get(id, b + 1000, 500).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt);
        assert!(err.message.contains(&id.to_string()), "{}", err.message);
        assert!(err.message.contains("block 1"), "{}", err.message);
        let err = store.get(id, b - 10, 20).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt);
        // Blocks 0 and 2 are intact.
        let got = store.get(id, 0, b).await.unwrap();
        assert_eq!(&got[..], &data[..b as usize]);
        let got = store.get(id, 2 * b, b + 17).await.unwrap();
        assert_eq!(&got[..], &data[2 * b as usize..]);
    }

    /// Ranges sent with sendfile are checked piece by piece: a flipped byte deep inside one
    /// is found and named by its block; the ranges around it still read back intact.
    #[tokio::test]
    async fn flipped_byte_in_a_sendfile_range_is_detected() {
        let dir = TempDir::new("chunks-corrupt-large");
        let store = store(&dir).await;
        let id = ChunkId(0x5a << 120);
        let b = BLOCK_SIZE as u64;
        let data = pattern((2 << 20) + 5, 3);
        store.put(id, Bytes::from(data.clone())).await.unwrap();
        let mut raw = fs::read(file_of(&dir, id)).unwrap();
        let data_start = raw.len() - data.len();
        raw[data_start + 21 * b as usize + 7] ^= 0x02;
        fs::write(file_of(&dir, id), &raw).unwrap();

        for (offset, len) in [(b + 5, 20 * b), (0, data.len() as u64)] {
            assert!(len >= SENDFILE_THRESHOLD as u64);
            let err = store.get(id, offset, len).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
            assert!(err.message.contains("block 21"), "{err}");
        }
        let err = store.verify(id).await.unwrap_err();
        assert!(err.message.contains("block 21"), "{err}");
        for (offset, len) in [(3, 21 * b - 3), (22 * b, data.len() as u64 - 22 * b)] {
            let got = store.get(id, offset, len).await.unwrap();
            assert_eq!(&got[..], &data[offset as usize..(offset + len) as usize]);
        }
    }

    #[tokio::test]
    async fn damaged_headers_and_truncation_are_corrupt() {
        let dir = TempDir::new("chunks-header");
        let store = store(&dir).await;
        let id = ChunkId(7);
        let data = pattern(100_000, 1);
        store.put(id, Bytes::from(data)).await.unwrap();
        let path = dir
            .path()
            .join("chunks")
            .join(&id.to_string()[..2])
            .join(id.to_string());
        let good = fs::read(&path).unwrap();

        let damage: [fn(&mut Vec<u8>); 4] = [
            |f| f.truncate(f.len() - 1),
            |f| f.truncate(10),
            |f| f[0] = b'X',
            |f| f[4] = 99,
        ];
        for d in damage {
            let mut bad = good.clone();
            d(&mut bad);
            fs::write(&path, &bad).unwrap();
            let err = store.get(id, 0, 10).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::Corrupt, "{}", err.message);
        }
    }

    /// A chunk file of a format this build does not know (a newer build's, after a
    /// downgrade) is a clear `Corrupt` error naming both versions for reads, verify and
    /// scrub (which sets it aside in quarantine), and never a panic.
    #[tokio::test]
    async fn an_unknown_chunk_format_version_is_a_clear_error() {
        let dir = TempDir::new("chunks-version");
        let store = store(&dir).await;
        let (a, b) = (ChunkId(0x41 << 120), ChunkId(0x42 << 120));
        for id in [a, b] {
            store
                .put(id, Bytes::from(pattern(1 << 20, 5)))
                .await
                .unwrap();
            let path = file_of(&dir, id);
            let mut raw = fs::read(&path).unwrap();
            assert_eq!(raw[4], FORMAT_VERSION);
            raw[4] = FORMAT_VERSION + 1;
            fs::write(&path, raw).unwrap();
        }
        for (offset, len) in [(0, 10), (0, 1 << 20)] {
            let err = store.get(a, offset, len).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
            assert!(
                err.message.contains(&a.to_string())
                    && err.message.contains("format version 2")
                    && err.message.contains("reads version 1"),
                "{err}"
            );
        }
        assert_eq!(store.verify(a).await.unwrap_err().kind, ErrorKind::Corrupt);
        // Listed (with the length its file size implies), then set aside by scrub.
        assert_eq!(store.list(None, 10).await.unwrap().len(), 2);
        let report = store.scrub(None, 10).await.unwrap();
        assert_eq!(report.corrupt, vec![a, b]);
        assert!(store.list(None, 10).await.unwrap().is_empty());
    }

    fn file_of(dir: &TempDir, id: ChunkId) -> PathBuf {
        let name = id.to_string();
        dir.path().join("chunks").join(&name[..2]).join(name)
    }

    /// Cuts the file at `path` to half its size, as a failing disk, another process or an
    /// operator could while the provider reads it.
    fn truncate_to_half(path: &Path) {
        let file = OpenOptions::new().write(true).open(path).unwrap();
        let len = file.metadata().unwrap().len();
        file.set_len(len / 2).unwrap();
    }

    /// A chunk file cut short after a read checked its size: the read of a range large enough
    /// for sendfile, a verify and a scrub all report `Corrupt` (a positioned read comes back
    /// short), and the process lives on. Through a memory map, touching the pages past the
    /// new end raised SIGBUS and killed the whole provider.
    #[tokio::test]
    async fn a_file_truncated_under_a_large_read_is_corrupt() {
        let dir = TempDir::new("chunks-truncated");
        let store = store(&dir).await;
        let len = 2 << 20;
        let ids = [
            ChunkId(0x61 << 120),
            ChunkId(0x62 << 120),
            ChunkId(0x63 << 120),
        ];
        for (n, id) in ids.iter().enumerate() {
            let data = pattern(len, n as u8);
            store.put(*id, Bytes::from(data)).await.unwrap();
            // A chunk file, not a record of the small-chunk log.
            assert!(file_of(&dir, *id).exists());
        }

        // 768 KiB from 1 MiB on: all of it past the new end, and sent with sendfile if intact.
        let range = 768 << 10;
        assert!(range >= SENDFILE_THRESHOLD as u64);
        store.after_open(truncate_to_half);
        let err = match store.read_range(ids[0], 1 << 20, range).await {
            Ok(_) => panic!("a truncated chunk was read"),
            Err(e) => e,
        };
        assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
        assert!(err.message.contains(&ids[0].to_string()), "{err}");
        assert!(err.message.contains("truncated"), "{err}");

        store.after_open(truncate_to_half);
        let err = store.verify(ids[1]).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");

        // Scrub finds it and quarantines it.
        store.after_open(truncate_to_half);
        let report = store.scrub(Some(ids[1]), 10).await.unwrap();
        assert_eq!(report.corrupt, vec![ids[2]]);
        assert!(!file_of(&dir, ids[2]).exists());
        let quarantined = dir
            .path()
            .join("chunks/quarantine")
            .join(ids[2].to_string());
        assert!(quarantined.exists());
    }

    /// The service quarantines a chunk truncated under a large read: the read fails with
    /// `Corrupt`, the next one finds nothing.
    #[tokio::test]
    async fn the_service_quarantines_a_chunk_truncated_under_a_read() {
        use crate::meta_store::MetaStore;
        use crate::service::ProviderService;
        use tomus_wire::provider::GetChunk;
        use tomus_wire::{call_handler, Pool, RpcConfig};

        let dir = TempDir::new("chunks-truncated-service");
        let chunks = store(&dir).await;
        let meta = MetaStore::open(dir.path().join("meta.log"), false)
            .await
            .unwrap();
        let service =
            ProviderService::new(chunks.clone(), None, meta, Pool::new(RpcConfig::default()));
        let id = ChunkId(0x64 << 120);
        chunks
            .put(id, Bytes::from(pattern(2 << 20, 4)))
            .await
            .unwrap();
        let get = GetChunk {
            id,
            offset: 1 << 20,
            len: 1 << 20,
        };

        chunks.after_open(truncate_to_half);
        let e = call_handler(&service, get.clone(), Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
        assert!(!file_of(&dir, id).exists());
        let quarantined = dir.path().join("chunks/quarantine").join(id.to_string());
        assert!(quarantined.exists());
        let e = call_handler(&service, get, Bytes::new()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
        assert_eq!(chunks.stats().chunks, 0);
    }

    fn small_segment(dir: &TempDir) -> PathBuf {
        dir.path().join("chunks/small-000000.log")
    }

    /// Flips a bit of the first copy of `data` in `path`, `at` bytes into it.
    fn flip_in(path: &Path, data: &[u8], at: usize) {
        let mut raw = fs::read(path).unwrap();
        let start = raw
            .windows(data.len())
            .position(|w| w == data)
            .expect("data not in file");
        raw[start + at] ^= 0x08;
        fs::write(path, raw).unwrap();
    }

    async fn list_all(store: &ChunkStore, page: usize) -> (Vec<ChunkEntry>, Vec<usize>) {
        let (mut all, mut sizes, mut cursor) = (Vec::new(), Vec::new(), None);
        loop {
            let got = store.list(cursor, page).await.unwrap();
            if got.is_empty() {
                return (all, sizes);
            }
            sizes.push(got.len());
            cursor = got.last().map(|e| e.id);
            all.extend(got);
        }
    }

    #[test]
    fn data_length_from_file_length() {
        let b = u64::from(BLOCK_SIZE);
        for data_len in [0, 1, b - 1, b, b + 1, 5 * b, 5 * b + 3, 256 << 20] {
            let file_len = file_len_for(data_len).unwrap();
            assert_eq!(data_len_for(file_len), Some(data_len), "{data_len}");
        }
        // Sizes no chunk file has: shorter than a header, a header with a checksum only.
        for file_len in [0, HEADER_LEN - 1, HEADER_LEN + 1, HEADER_LEN + CRC_LEN] {
            assert_eq!(data_len_for(file_len), None, "{file_len}");
        }
    }

    #[tokio::test]
    async fn listing_pages_in_id_order_over_files_and_small_chunks() {
        let dir = TempDir::new("chunks-list");
        let store = store(&dir).await;
        let before = tomus_wire::now_ms();
        let mut expected = Vec::new();
        for n in 0..40u128 {
            // Spread over the fan-out directories; every fifth in one directory.
            let id = if n % 5 == 0 {
                ChunkId(0xab << 120 | n)
            } else {
                ChunkId(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
            };
            // Even: small-chunk log; odd: a file.
            let len = if n % 2 == 0 { 100 + n } else { 70_000 + n } as usize;
            store
                .put(id, Bytes::from(pattern(len, n as u8)))
                .await
                .unwrap();
            expected.push((id, len as u64));
        }
        let after = tomus_wire::now_ms();
        expected.sort();

        let (all, pages) = list_all(&store, 7).await;
        assert_eq!(pages, vec![7, 7, 7, 7, 7, 5]);
        let got: Vec<_> = all.iter().map(|e| (e.id, e.len)).collect();
        assert_eq!(got, expected);
        // Time stamps have a coarse clock: allow a second either way.
        for e in &all {
            assert!(
                e.stored_ms + 1000 >= before && e.stored_ms <= after + 1000,
                "{e:?} not in [{before}, {after}]"
            );
        }
        // After an id not held; nothing; past the end.
        let cut = ChunkId(expected[20].0 .0 + 1);
        let rest: Vec<_> = expected.iter().filter(|(id, _)| *id > cut).collect();
        let got = store.list(Some(cut), 1000).await.unwrap();
        assert_eq!(
            got.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>().len(),
            rest.len()
        );
        assert!(got
            .iter()
            .zip(&rest)
            .all(|(e, (id, len))| e.id == *id && e.len == *len));
        assert!(store.list(None, 0).await.unwrap().is_empty());
        assert!(store
            .list(Some(ChunkId(u128::MAX)), 10)
            .await
            .unwrap()
            .is_empty());
        drop(store);

        // After a restart small chunks date from their segment's last change: not earlier.
        let store = self::store(&dir).await;
        let (again, _) = list_all(&store, 1000).await;
        assert_eq!(again.len(), all.len());
        for (new, old) in again.iter().zip(&all) {
            assert_eq!((new.id, new.len), (old.id, old.len));
            assert!(new.stored_ms + 1000 >= old.stored_ms, "{new:?} {old:?}");
            assert!(new.stored_ms + 1000 >= before, "{new:?}");
        }
    }

    #[tokio::test]
    async fn deleted_files_and_small_chunks_stay_deleted() {
        let dir = TempDir::new("chunks-delete");
        let store = store(&dir).await;
        let file_a = (ChunkId(0x11 << 120), pattern(100_000, 1));
        let file_b = (ChunkId(0x22 << 120), pattern(200_000, 2));
        let small_a = (ChunkId(0x33 << 120), pattern(500, 3));
        let small_b = (ChunkId(0x44 << 120), pattern(600, 4));
        for (id, data) in [&file_a, &file_b, &small_a, &small_b] {
            store.put(*id, Bytes::from(data.clone())).await.unwrap();
        }
        let before = store.stats();
        let file_a_size = fs::metadata(file_of(&dir, file_a.0)).unwrap().len();
        store
            .delete(&[file_a.0, small_a.0, ChunkId(0x55)])
            .await
            .unwrap();
        let expect = ChunkStats {
            chunks: before.chunks - 2,
            bytes: before.bytes - file_a_size - (28 + 500),
        };
        assert_eq!(store.stats(), expect);
        assert!(!file_of(&dir, file_a.0).exists());
        for id in [file_a.0, small_a.0] {
            let err = store.get(id, 0, 1).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::NotFound);
        }
        // Deleting again changes nothing.
        store.delete(&[file_a.0, small_a.0]).await.unwrap();
        assert_eq!(store.stats(), expect);
        drop(store);

        let store = self::store(&dir).await;
        assert_eq!(store.stats(), expect);
        let listed: Vec<_> = store.list(None, 10).await.unwrap();
        assert_eq!(
            listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
            vec![(file_b.0, 200_000), (small_b.0, 600)]
        );
        assert_eq!(
            &store.get(file_b.0, 0, 200_000).await.unwrap()[..],
            &file_b.1[..]
        );
        assert_eq!(
            &store.get(small_b.0, 0, 600).await.unwrap()[..],
            &small_b.1[..]
        );
    }

    #[tokio::test]
    async fn scrub_quarantines_flipped_bytes_and_pages() {
        let dir = TempDir::new("chunks-scrub");
        let store = store(&dir).await;
        let b = BLOCK_SIZE as usize;
        // Odd: files of three blocks and a bit; even: small chunks.
        let chunks: Vec<(ChunkId, Vec<u8>)> = (1..=10u8)
            .map(|n| {
                let len = if n % 2 == 1 {
                    3 * b + n as usize
                } else {
                    2000 + n as usize
                };
                (ChunkId(u128::from(n) << 100), pattern(len, n))
            })
            .collect();
        for (id, data) in &chunks {
            store.put(*id, Bytes::from(data.clone())).await.unwrap();
        }
        let total: u64 = chunks.iter().map(|(_, d)| d.len() as u64).sum();
        let (bad_file, bad_small) = (&chunks[4], &chunks[7]);
        // In the last block of the file, in the middle of the small record's data.
        flip_in(&file_of(&dir, bad_file.0), &bad_file.1, 3 * b + 2);
        flip_in(&small_segment(&dir), &bad_small.1, 1000);
        let raw_bad_file = fs::read(file_of(&dir, bad_file.0)).unwrap();
        let before = store.stats();

        let (mut cursor, mut steps) = (None, Vec::new());
        let (mut checked, mut bytes, mut corrupt) = (0, 0, Vec::new());
        loop {
            let report = store.scrub(cursor, 3).await.unwrap();
            steps.push(report.checked);
            checked += report.checked;
            bytes += report.bytes;
            corrupt.extend(report.corrupt);
            match report.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(steps, vec![3, 3, 3, 1]);
        assert_eq!((checked, bytes), (10, total));
        assert_eq!(corrupt, vec![bad_file.0, bad_small.0]);

        // No longer listed or served; off the statistics; the file kept in quarantine.
        let listed: Vec<ChunkId> = store
            .list(None, 100)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(listed.len(), 8);
        for (id, data) in [bad_file, bad_small] {
            assert!(!listed.contains(id));
            let err = store.get(*id, 0, data.len() as u64).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
        }
        let stats = store.stats();
        assert_eq!(stats.chunks, before.chunks - 2);
        assert_eq!(
            stats.bytes,
            before.bytes - raw_bad_file.len() as u64 - (28 + bad_small.1.len() as u64)
        );
        assert!(!file_of(&dir, bad_file.0).exists());
        let quarantined = dir
            .path()
            .join("chunks/quarantine")
            .join(bad_file.0.to_string());
        assert_eq!(fs::read(&quarantined).unwrap(), raw_bad_file);

        // A second pass finds nothing; nor does one after a restart.
        let report = store.scrub(None, 100).await.unwrap();
        assert_eq!(
            (report.checked, report.corrupt.len(), report.next),
            (8, 0, None),
            "{report:?}"
        );
        drop(store);
        let store = self::store(&dir).await;
        let report = store.scrub(None, 100).await.unwrap();
        assert_eq!(report.checked, 8);
        assert!(report.corrupt.is_empty());
        assert_eq!(store.stats(), stats);

        // The byte budget ends a step early: the first chunk crosses it alone.
        let report = store.scrub_with_budget(None, 100, 1).await.unwrap();
        assert_eq!(report.checked, 1);
        assert_eq!(report.bytes, chunks[0].1.len() as u64);
        assert_eq!(report.next, Some(chunks[0].0));
        let report = store
            .scrub_with_budget(Some(chunks[0].0), 100, 1)
            .await
            .unwrap();
        assert_eq!(report.next, Some(chunks[1].0));
        // Scrubbing an empty range: done.
        let last = chunks[9].0;
        let report = store.scrub(Some(last), 100).await.unwrap();
        assert_eq!((report.checked, report.next), (0, None));
    }

    #[tokio::test]
    async fn quarantine_of_a_damaged_header_and_verify() {
        let dir = TempDir::new("chunks-verify");
        let store = store(&dir).await;
        let id = ChunkId(0x77 << 120);
        let data = pattern(5 * BLOCK_SIZE as usize + 3, 7);
        store.put(id, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(store.verify(id).await.unwrap(), data.len() as u64);
        // Truncated: listed with what the header claims, found by verify, quarantined.
        let path = file_of(&dir, id);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(fs::metadata(&path).unwrap().len() - 10)
            .unwrap();
        drop(file);
        let listed = store.list(None, 10).await.unwrap();
        assert_eq!((listed[0].id, listed[0].len), (id, data.len() as u64));
        assert_eq!(store.verify(id).await.unwrap_err().kind, ErrorKind::Corrupt);
        assert!(store.quarantine(id).await.unwrap());
        assert!(!store.quarantine(id).await.unwrap());
        assert_eq!(
            store.verify(id).await.unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert_eq!(store.stats().chunks, 0);
        assert!(store.list(None, 10).await.unwrap().is_empty());
    }
}
