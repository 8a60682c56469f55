//! Immutable chunks as checksummed files: `<dir>/<first two hex digits>/<32 hex digit id>`.
//! Chunks shorter than [`SMALL_CHUNK_MAX`] go to the small-chunk log in the same directory
//! instead (see [`crate::small_chunks`]); lookups try the log first, then the files.
//!
//! File layout: magic `TCHK`, format version (u8), data length (u64 LE), block size (u32 LE),
//! one CRC32C (u32 LE) per block of data, then the data. Per-block checksums let a ranged read
//! verify only the blocks it touches instead of the whole chunk.
//!
//! A chunk file found corrupt is moved to `<dir>/quarantine/<id>` (kept for inspection, no
//! longer listed or served); a small chunk found corrupt is deleted from its log.

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
use tomus_wire::{ChunkEntry, Error, ErrorKind, FileRange, Result, ScrubReport};

use crate::small_chunks::{SmallChunks, SEGMENT_SIZE, SMALL_CHUNK_MAX};
use crate::{blocking, io_error, sync_dir};

const MAGIC: &[u8; 4] = b"TCHK";
const FORMAT_VERSION: u8 = 1;
/// Granularity of checksums: the smallest unit a read verifies.
pub const BLOCK_SIZE: u32 = 64 << 10;
const HEADER_LEN: u64 = 4 + 1 + 8 + 4;
const CRC_LEN: u64 = 4;
/// Suffix of files being written; leftovers of a crash are removed at startup.
const TMP_SUFFIX: &str = ".tmp";
/// Ranges at least this large are verified through a memory map and sent with sendfile;
/// smaller ones are read into memory (mapping costs more than copying a few pages).
const SENDFILE_THRESHOLD: usize = 512 << 10;
/// Where corrupt chunk files go, inside the store's directory.
const QUARANTINE_DIR: &str = "quarantine";
/// Blocks verified per read when a whole chunk file is checked (4 MiB).
const VERIFY_BLOCKS: u64 = 64;
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
}

struct Inner {
    dir: PathBuf,
    fsync: bool,
    /// Counts the chunk files only.
    chunks: AtomicU64,
    bytes: AtomicU64,
    small: SmallChunks,
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
        if data.len() < SMALL_CHUNK_MAX {
            return self.inner.small.put(id, data).await;
        }
        let inner = self.inner.clone();
        blocking(move || inner.put(id, &data)).await
    }

    /// The small-chunk log, for tests that look at it directly.
    #[cfg(test)]
    pub(crate) fn small(&self) -> &SmallChunks {
        &self.inner.small
    }

    /// Bytes `[offset, offset + len)` of chunk `id`, verified, for sending: large ranges stay
    /// in the file (see [`ChunkRange`]).
    pub async fn read_range(&self, id: ChunkId, offset: u64, len: u64) -> Result<ChunkRange> {
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
        if self.inner.small.contains(id) {
            self.inner.small.delete(&[id]).await?;
            return Ok(true);
        }
        let inner = self.inner.clone();
        blocking(move || inner.quarantine_file(id)).await
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

    fn put(&self, id: ChunkId, data: &[u8]) -> Result<()> {
        static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = self.path_of(id);
        let parent = self.dir.join(&id.to_string()[..2]);
        let tmp = parent.join(format!(
            ".{id}.{}.{}{TMP_SUFFIX}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file_len = match write_chunk_file(&tmp, data, self.fsync) {
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

    /// Verified bytes `[offset, offset + len)` of chunk `id`: small ranges in memory, large
    /// ones as a file range (checked through a memory map) to be sent with sendfile.
    fn read_range(&self, id: ChunkId, offset: u64, len: u64) -> Result<ChunkRange> {
        if let Some(found) = self.small.read(id, offset, len) {
            return found.map(ChunkRange::Memory);
        }
        let (file, data_len) = self.open_chunk(id)?;
        let blocks = data_len.div_ceil(u64::from(BLOCK_SIZE));
        let range = check_range(id, offset, len, data_len)?;
        if range.is_empty() {
            return Ok(ChunkRange::Memory(Bytes::new()));
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
        if span >= SENDFILE_THRESHOLD {
            // Verify through a memory map (no copy), then let the kernel send the verified
            // range straight from the page cache.
            // SAFETY: chunk files are immutable (replaced by rename, never rewritten or
            // truncated in place) and the file length was checked above.
            let map = unsafe {
                memmap2::MmapOptions::new()
                    .offset(file_start)
                    .len(span)
                    .populate()
                    .map(&file)
            }
            .map_err(|e| io_error(format_args!("mapping chunk {id}"), e))?;
            verify_blocks(id, first, &map, &crcs)?;
            drop(map);
            return Ok(ChunkRange::File(FileRange {
                file,
                offset: file_start + skip as u64,
                len: range.len() as u64,
            }));
        }
        let mut buf = vec![0u8; span];
        read_at(&file, &mut buf, file_start, id)?;
        verify_blocks(id, first, &buf, &crcs)?;
        Ok(ChunkRange::Memory(
            Bytes::from(buf).slice(skip..skip + range.len()),
        ))
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
        let mut buf = Vec::new();
        let mut first = 0;
        while first < blocks {
            let count = VERIFY_BLOCKS.min(blocks - first);
            let span = ((first + count) * block).min(data_len) - first * block;
            buf.resize(to_usize(span, id)?, 0);
            read_at(&file, &mut buf, data_start + first * block, id)?;
            let crcs = &crcs[(first * CRC_LEN) as usize..((first + count) * CRC_LEN) as usize];
            verify_blocks(id, first, &buf, crcs)?;
            first += count;
        }
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
        match self.read_range(id, offset, len)? {
            ChunkRange::Memory(b) => Ok(b),
            ChunkRange::File(r) => {
                let mut buf = vec![0u8; to_usize(r.len, id)?];
                read_at(&r.file, &mut buf, r.offset, id)?;
                Ok(Bytes::from(buf))
            }
        }
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

/// Checks each block of `data` (blocks `first..` of a chunk) against its stored CRC32C.
fn verify_blocks(id: ChunkId, first: u64, data: &[u8], crcs: &[u8]) -> Result<()> {
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
    }
    Ok(())
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
            "chunk {id}: unknown format version {}",
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

/// Reads exactly `buf.len()` bytes at `pos`; a short file means the chunk is damaged.
fn read_at(file: &File, buf: &mut [u8], pos: u64, id: ChunkId) -> Result<()> {
    file.read_exact_at(buf, pos).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::corrupt(format!("chunk {id}: file is truncated"))
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

/// Writes a new chunk file at `path` and returns its size.
fn write_chunk_file(path: &Path, data: &[u8], fsync: bool) -> io::Result<u64> {
    let header = encode_header(data);
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(&header)?;
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

    fn file_of(dir: &TempDir, id: ChunkId) -> PathBuf {
        let name = id.to_string();
        dir.path().join("chunks").join(&name[..2]).join(name)
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
