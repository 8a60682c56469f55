//! Small chunks (shorter than [`SMALL_CHUNK_MAX`]) in an append-only log instead of one file
//! each: storing one costs a share of a group commit's single fdatasync, not a file creation,
//! an fdatasync and a directory fsync.
//!
//! The log is a series of segment files `<chunk dir>/small-NNNNNN.log` (NNNNNN: the segment
//! number, zero-padded, increasing). Appends go to the newest segment; a record that would take
//! it past the segment size (256 MiB) starts a new one. Creating a segment costs one directory
//! fsync; appends cost none. Segments are created when the first small chunk arrives, so a
//! store holding only large chunks has none.
//!
//! Writes go through a `GroupCommit` writer: the chunks of concurrent callers are appended
//! with one write, then synced with one fdatasync (when fsync is enabled), and only then are
//! they indexed and acknowledged. A chunk id already in the log is not written again (ids are
//! random and chunks immutable: the same id means the same content, e.g. a retried write).
//!
//! Reads look the chunk up in an in-memory index (id -> segment, data offset, length,
//! checksum), read the whole record and verify it before returning any of it. A read whose
//! record the page cache holds can be done on the calling (async) thread (`read_cached`): a
//! 4 KiB copy costs less than the hand-off to a blocking thread and back.
//!
//! The segment and record formats are in `format.rs`, the index in `index.rs`, the writer
//! (group commits, segment creation and removal) in `writer.rs`, and what startup does with
//! what a crash or damage left in `recovery.rs`.

/// Segment files and records: names, headers, checksums.
mod format;
/// Which chunks the log holds, and where.
mod index;
/// Rebuilding the index at startup; torn tails and damage.
mod recovery;
#[cfg(test)]
mod tests;
/// The writer thread's side: appending groups, rolling and removing segments.
mod writer;

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::zeroed_ahead::ZeroedAhead;
use tomus_wire::{ChunkEntry, Error, Result};

use crate::chunk_store::check_range;
use crate::group_commit::GroupCommit;
use crate::io_error;
use format::{record_crc, segment_path, RECORD_HEADER, RECORD_MAGIC};
use index::{Index, Loc, SharedIndex};
use recovery::scan;
use writer::{Op, Put, Writer};

/// Chunks strictly shorter than this go to the log; others get a file of their own.
pub const SMALL_CHUNK_MAX: usize = 64 << 10;
/// Size at which the log moves on to a new segment.
pub const SEGMENT_SIZE: u64 = 256 << 20;
/// The segment format this build writes, and the only one it reads (segments without a
/// header are format 1).
pub const FORMAT_VERSION: u32 = 1;

pub struct SmallChunks {
    dir: PathBuf,
    index: SharedIndex,
    writer: GroupCommit<Op>,
    #[cfg(test)]
    hooks: Arc<TestHooks>,
}

/// Lets tests count syncs and make them slower (a cheap fsync, as on tmpfs, leaves little to
/// group).
#[cfg(test)]
#[derive(Default)]
struct TestHooks {
    syncs: std::sync::atomic::AtomicU64,
    sync_delay_us: std::sync::atomic::AtomicU64,
}

impl SmallChunks {
    /// Opens the log in `dir` (which must exist), rebuilding the index from its segments, and
    /// starts its writer thread. Blocking.
    pub fn open(dir: &Path, fsync: bool, segment_size: u64) -> Result<Self> {
        let (index, current, next_segment) = scan(dir, fsync)?;
        let index = Arc::new(RwLock::new(index));
        #[cfg(test)]
        let hooks = Arc::new(TestHooks::default());
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            fsync,
            segment_size,
            current,
            next_segment,
            index: index.clone(),
            zeroed: ZeroedAhead::default(),
            #[cfg(test)]
            hooks: hooks.clone(),
        };
        // Removals a crash interrupted.
        writer.remove_dead_segments();
        let writer = GroupCommit::start("small-chunk log", writer)?;
        Ok(SmallChunks {
            dir: dir.to_path_buf(),
            index,
            writer,
            #[cfg(test)]
            hooks,
        })
    }

    /// Stores chunk `id` (shorter than [`SMALL_CHUNK_MAX`]); returns once it is in the log
    /// (and synced when fsync is enabled). An id already stored is not written again.
    pub async fn put(&self, id: ChunkId, data: Bytes) -> Result<()> {
        if data.len() >= SMALL_CHUNK_MAX {
            return Err(Error::internal(format!(
                "chunk {id} of {} bytes is too large for the small-chunk log",
                data.len()
            )));
        }
        if self.read_index().chunks.contains_key(&id) {
            return Ok(());
        }
        let crc = record_crc(id, &data);
        let mut header = [0u8; RECORD_HEADER];
        header[..4].copy_from_slice(RECORD_MAGIC);
        header[4..8].copy_from_slice(&(data.len() as u32).to_le_bytes());
        header[8..12].copy_from_slice(&crc.to_le_bytes());
        header[12..].copy_from_slice(&id.0.to_le_bytes());
        let size = RECORD_HEADER + data.len();
        self.writer
            .submit(
                Op::Put(Put {
                    id,
                    header,
                    data,
                    crc,
                }),
                size,
            )
            .await
    }

    /// Deletes the chunks among `ids` that the log holds; returns once their tombstones are
    /// in the log (and synced when fsync is enabled).
    pub async fn delete(&self, ids: &[ChunkId]) -> Result<()> {
        let held: Vec<ChunkId> = {
            let index = self.read_index();
            ids.iter()
                .copied()
                .filter(|id| index.chunks.contains_key(id))
                .collect()
        };
        if held.is_empty() {
            return Ok(());
        }
        let size = held.len() * RECORD_HEADER;
        self.writer.submit(Op::Delete(held), size).await
    }

    pub fn contains(&self, id: ChunkId) -> bool {
        self.read_index().chunks.contains_key(&id)
    }

    /// The chunks after `start_after` in id order, at most `limit`.
    pub fn list(&self, start_after: Option<ChunkId>, limit: usize) -> Vec<ChunkEntry> {
        let lower = start_after.map_or(Bound::Unbounded, Bound::Excluded);
        self.read_index()
            .chunks
            .range((lower, Bound::Unbounded))
            .take(limit)
            .map(|(&id, loc)| ChunkEntry {
                id,
                len: u64::from(loc.len),
                stored_ms: loc.stored_ms,
            })
            .collect()
    }

    /// Verifies the whole record of chunk `id` and returns its length, or `None` if the log
    /// does not hold it. Blocking.
    pub fn verify(&self, id: ChunkId) -> Option<Result<u64>> {
        let len = self.read_index().chunks.get(&id)?.len;
        Some(
            self.read(id, 0, u64::from(len))?
                .map(|data| data.len() as u64),
        )
    }

    /// Verified bytes `[offset, offset + len)` of chunk `id`, or `None` if the log does not
    /// hold it. Blocking.
    pub fn read(&self, id: ChunkId, offset: u64, len: u64) -> Option<Result<Bytes>> {
        let (loc, file) = self.locate(id)?;
        self.read_at(id, loc, file, offset, len, Fill::Wait)
            .transpose()
    }

    /// [`SmallChunks::read`] that never waits for the disk, for async threads: `None` also
    /// when part of the chunk's record is not in the page cache (read it with `read` then).
    pub fn read_cached(&self, id: ChunkId, offset: u64, len: u64) -> Option<Result<Bytes>> {
        let (loc, file) = self.locate(id)?;
        self.read_at(id, loc, file, offset, len, Fill::CachedOnly)
            .transpose()
    }

    /// Where chunk `id`'s record is, and its segment's file, if the log holds it.
    fn locate(&self, id: ChunkId) -> Option<(Loc, Option<Arc<File>>)> {
        let index = self.read_index();
        let loc = *index.chunks.get(&id)?;
        Some((
            loc,
            index.segments.get(&loc.segment).map(|s| s.file.clone()),
        ))
    }

    /// The verified bytes of chunk `id` at `loc`; `None` when `fill` is `CachedOnly` and the
    /// record is not all in the page cache.
    fn read_at(
        &self,
        id: ChunkId,
        loc: Loc,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        fill: Fill,
    ) -> Result<Option<Bytes>> {
        let range = check_range(id, offset, len, u64::from(loc.len))?;
        let segment = segment_path(&self.dir, loc.segment);
        let file = file.ok_or_else(|| {
            Error::internal(format!(
                "chunk {id}: segment {} is not open",
                segment.display()
            ))
        })?;
        let mut record = vec![0u8; RECORD_HEADER + loc.len as usize];
        let start = loc.offset - RECORD_HEADER as u64;
        let filled = match fill {
            Fill::Wait => file.read_exact_at(&mut record, start).map(|()| true),
            Fill::CachedOnly => read_cached_at(&file, &mut record, start),
        };
        let filled = filled.map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                Error::corrupt(format!(
                    "chunk {id}: {} is truncated before the end of its record",
                    segment.display()
                ))
            } else {
                io_error(format_args!("reading chunk {id}"), e)
            }
        })?;
        if !filled {
            return Ok(None);
        }
        let (header, data) = record.split_at(RECORD_HEADER);
        let intact = &header[..4] == RECORD_MAGIC
            && header[4..8] == loc.len.to_le_bytes()
            && header[8..12] == loc.crc.to_le_bytes()
            && header[12..] == id.0.to_le_bytes()
            && record_crc(id, data) == loc.crc;
        if !intact {
            return Err(Error::corrupt(format!(
                "chunk {id}: checksum mismatch in its record at offset {start} of {}",
                segment.display()
            )));
        }
        Ok(Some(Bytes::from(record).slice(
            RECORD_HEADER + range.start..RECORD_HEADER + range.end,
        )))
    }

    /// Number of chunks in the log and the size of their records.
    pub fn stats(&self) -> (u64, u64) {
        let index = self.read_index();
        (index.chunks.len() as u64, index.bytes)
    }

    /// How many times the log was synced (fdatasync) since it was opened.
    #[cfg(test)]
    pub fn syncs(&self) -> u64 {
        self.hooks.syncs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes every sync take at least this much longer.
    #[cfg(test)]
    pub fn slow_down_syncs(&self, delay: std::time::Duration) {
        let us = delay.as_micros() as u64;
        self.hooks
            .sync_delay_us
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }

    fn read_index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How a read fills its buffer.
#[derive(Clone, Copy)]
enum Fill {
    /// From the page cache or the disk.
    Wait,
    /// Only if the page cache holds every byte.
    CachedOnly,
}

/// Reads `buf.len()` bytes at `offset` if the page cache holds them all (`preadv2` with
/// `RWF_NOWAIT`): `Ok(false)` when the read would wait for the disk, came back short (the
/// waiting read then tells a truncated file from a partly cached one), or the kernel or file
/// system does not support the flag. A miss starts the disk read without waiting for it; on a
/// fast disk that read can be done before the kernel looks again, and the bytes come back.
fn read_cached_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let Ok(offset) = libc::off_t::try_from(offset) else {
        return Ok(false);
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec describing `buf`, which is valid for writes of its length and
    // borrowed mutably for the whole call.
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(false),
            _ => Err(e),
        };
    }
    Ok(n as usize == buf.len())
}
