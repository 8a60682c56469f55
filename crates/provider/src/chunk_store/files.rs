//! The chunk files on disk: `<dir>/<first two hex digits>/<32 hex digit id>`, written under
//! a temporary name and linked (or, over an existing copy, renamed) into place, read with positioned reads (verified before any
//! byte is returned), listed in id order, deleted or moved to quarantine, and counted and
//! cleaned up at startup.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{checksum, ChunkEntry, Error, FileRange, Result};

use super::drop_behind::CacheBehindWrites;
use super::format::{
    data_len_for, encode_header, file_len_for, parse_header, read_at, whole_crc, write_chunk_file,
    BLOCK_SIZE, CRC_LEN, HEADER_LEN,
};
use super::verify::{verify_blocks, verify_mapped_blocks, RangeCrc};
use super::{check_range, small_range, to_usize, ChunkRange, ChunkStats};
use crate::small_chunks::SmallChunks;
use crate::{io_error, sync_dir};

/// Suffix of files being written; leftovers of a crash are removed at startup.
pub(super) const TMP_SUFFIX: &str = ".tmp";
/// Ranges at least this large are verified where they are (see `verify_mapped_blocks`) and
/// then sent from the file with sendfile; smaller ones are read into memory once, verified
/// and sent from there.
pub(super) const SENDFILE_THRESHOLD: usize = 512 << 10;
/// Where corrupt chunk files go, inside the store's directory.
const QUARANTINE_DIR: &str = "quarantine";

/// The store's shared state: its directory, the chunk file statistics, the small-chunk log
/// and the quarantine reports.
pub(super) struct Inner {
    pub(super) dir: PathBuf,
    pub(super) fsync: bool,
    /// Counts the chunk files only.
    pub(super) chunks: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) small: SmallChunks,
    /// Which synced chunk files keep their pages cached.
    pub(super) cache_behind: CacheBehindWrites,
    /// Chunks quarantined since the manager last heard of it: the heartbeat reports them, so
    /// repair re-creates these copies at once instead of at its next full audit.
    pub(super) lost: std::sync::Mutex<Vec<ChunkId>>,
    /// Told when a chunk is quarantined, so the report goes out at once.
    pub(super) lost_waker: Arc<tokio::sync::Notify>,
    /// Run once by the next [`Inner::open_chunk`], after its size check: lets tests change
    /// a chunk file underneath a read, as another process or a failing disk could.
    #[cfg(test)]
    pub(super) after_open: std::sync::Mutex<Option<OpenHook>>,
}

#[cfg(test)]
pub(super) type OpenHook = Box<dyn FnOnce(&Path) + Send>;

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
        tomus_wire::chunk_file::chunk_path(&self.dir, id)
    }

    pub(super) fn put(&self, id: ChunkId, data: &[u8], sent_crc: Option<u32>) -> Result<()> {
        static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);
        let header = encode_header(data);
        if let Some(sent) = sent_crc {
            let got = whole_crc(&header, data);
            if got != sent {
                return Err(checksum::damaged(format!("chunk {id}"), got, sent));
            }
        }
        let parent = self.dir.join(&id.to_string()[..2]);
        let tmp = parent.join(format!(
            ".{id}.{}.{}{TMP_SUFFIX}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let (file, file_len) = write_chunk_file(&tmp, &header, data).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_error(format_args!("storing chunk {id}"), e)
        })?;
        self.install(id, &tmp, &file, file_len)
    }

    /// Gives the complete chunk file `tmp` (open as `file`, `file_len` bytes) the name of
    /// chunk `id`, syncs it and, with fsync on, its directory, and counts it if it is new;
    /// `tmp` is removed if that fails.
    pub(super) fn install(
        &self,
        id: ChunkId,
        tmp: &Path,
        file: &File,
        file_len: u64,
    ) -> Result<()> {
        let path = self.path_of(id);
        let new = self.place(tmp, &path, file, file_len).map_err(|e| {
            let _ = fs::remove_file(tmp);
            io_error(format_args!("storing chunk {id}"), e)
        })?;
        if new {
            self.chunks.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(file_len, Ordering::Relaxed);
        }
        if self.fsync {
            // The new name must be durable, not only the file's contents.
            let parent = path.parent().unwrap_or(&self.dir);
            sync_dir(parent).map_err(|e| io_error(format_args!("storing chunk {id}"), e))?;
        }
        Ok(())
    }

    /// Gives the complete, written file `tmp` the chunk's name `path` and syncs its data;
    /// whether the name is new. A new name is linked before the data sync: the sync then
    /// commits the name too (on journaling file systems the link rides in the transaction
    /// the sync forces, which makes the directory sync after it nearly free), and a crash in
    /// between leaves only an unacknowledged chunk whose checksums fail. An existing name (a
    /// repeated put) may be an acknowledged copy: it is replaced only once the new file is
    /// durable, by rename (as is any name where the file system refuses hard links).
    fn place(&self, tmp: &Path, path: &Path, file: &File, file_len: u64) -> io::Result<bool> {
        let sync = |f: &File, new: bool| {
            if self.fsync {
                crate::group_commit::timed_sync(f, "chunk")?;
                self.cache_behind.synced(f, path, file_len, !new);
            }
            Ok(())
        };
        match fs::hard_link(tmp, path) {
            Ok(()) => {
                // Before the sync, so that it commits this change to the directory as well.
                fs::remove_file(tmp)?;
                sync(file, true).map(|()| true)
            }
            Err(e) => {
                let new = e.kind() != io::ErrorKind::AlreadyExists;
                sync(file, new)?;
                fs::rename(tmp, path).map(|()| new)
            }
        }
    }

    /// Verified bytes `[offset, offset + len)` of chunk `id`, with their CRC32C: small
    /// ranges in memory, large ones as a file range (checked in a mapping of the file) to be
    /// sent with sendfile.
    pub(super) fn read_range(
        &self,
        id: ChunkId,
        offset: u64,
        len: u64,
    ) -> Result<(ChunkRange, u32)> {
        if let Some(found) = self.small.read(id, offset, len) {
            return found.map(small_range);
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
            // Check the blocks where they are, then let the kernel send the verified range
            // from the page cache.
            verify_mapped_blocks(&file, id, file_start, first, span, &crcs, &mut sent)?;
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
    pub(super) fn open_chunk(&self, id: ChunkId) -> Result<(File, u64)> {
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

    /// The chunk files after `start_after` in id order, at most `limit`. The fan-out
    /// directories are in id order (they are the first byte of the id), so only the ones up
    /// to the directory where `limit` is reached are read.
    pub(super) fn list_files(
        &self,
        start_after: Option<ChunkId>,
        limit: usize,
    ) -> Result<Vec<ChunkEntry>> {
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

    /// Deletes every file of `ids` it can and returns those it could not (a disk error):
    /// one that cannot go does not keep the others.
    pub(super) fn delete_files(&self, ids: &[ChunkId]) -> Result<Vec<ChunkId>> {
        let mut dirs = Vec::new();
        let mut failed = Vec::new();
        for &id in ids {
            let path = self.path_of(id);
            match self.remove_counted(&path, |p| fs::remove_file(p)) {
                Ok(true) => dirs.push(self.dir.join(&id.to_string()[..2])),
                Ok(false) => {}
                Err(e) => {
                    if failed.is_empty() {
                        tracing::error!("deleting chunk {id}: {e}");
                    }
                    failed.push(id);
                }
            }
        }
        if self.fsync {
            dirs.sort_unstable();
            dirs.dedup();
            for dir in dirs {
                sync_dir(&dir).map_err(|e| io_error("deleting chunks", e))?;
            }
        }
        if failed.len() > 1 {
            tracing::error!(
                "{} of {} chunk files could not be deleted",
                failed.len(),
                ids.len()
            );
        }
        Ok(failed)
    }

    /// Moves chunk file `id` into the quarantine directory (replacing an earlier copy there).
    pub(super) fn quarantine_file(&self, id: ChunkId) -> Result<bool> {
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
    pub(super) fn get(&self, id: ChunkId, offset: u64, len: u64) -> Result<Bytes> {
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

fn is_chunk_name(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_chunk_name(name: &str) -> Option<ChunkId> {
    if !is_chunk_name(name) {
        return None;
    }
    u128::from_str_radix(name, 16).ok().map(ChunkId)
}

/// Removes the temporary files of the fan-out directories of `dir` last modified more than
/// `idle` before `now`; returns how many and their bytes. Those are the files of a client
/// that died between writing a chunk file and asking for its adoption (a live writer's file
/// is seconds old): without this they stayed until the provider's next start.
pub(super) fn sweep_stale_temporaries(
    dir: &Path,
    idle: Duration,
    now: SystemTime,
) -> Result<(usize, u64)> {
    let temporary = |name: &std::ffi::OsStr| name.to_string_lossy().ends_with(TMP_SUFFIX);
    let (mut count, mut bytes) = (0, 0);
    for prefix in 0..=255u8 {
        let sub = dir.join(format!("{prefix:02x}"));
        let (n, b) = crate::sweep_idle(&sub, idle, now, temporary)?;
        count += n;
        bytes += b;
    }
    Ok((count, bytes))
}

/// Creates the directory and its 256 fan-out subdirectories, removes stale temporary files
/// and counts the chunks present.
pub(super) fn prepare_dir(dir: &Path, fsync: bool) -> io::Result<ChunkStats> {
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
