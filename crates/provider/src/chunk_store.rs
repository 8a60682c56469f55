//! Immutable chunks as checksummed files: `<dir>/<first two hex digits>/<32 hex digit id>`.
//! Chunks shorter than [`SMALL_CHUNK_MAX`] go to the small-chunk log in the same directory
//! instead (see [`crate::small_chunks`]); lookups try the log first, then the files.
//!
//! File layout: magic `TCHK`, format version (u8), data length (u64 LE), block size (u32 LE),
//! one CRC32C (u32 LE) per block of data, then the data. Per-block checksums let a ranged read
//! verify only the blocks it touches instead of the whole chunk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{Error, FileRange, Result};

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
        let path = self.path_of(id);
        let file = match File::open(&path) {
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
        let blocks = data_len.div_ceil(u64::from(BLOCK_SIZE));
        let expected_len = blocks
            .checked_mul(CRC_LEN)
            .and_then(|c| c.checked_add(HEADER_LEN))
            .and_then(|h| h.checked_add(data_len))
            .ok_or_else(|| Error::corrupt(format!("chunk {id}: impossible data length")))?;
        if file_len != expected_len {
            return Err(Error::corrupt(format!(
                "chunk {id}: file is {file_len} bytes, its header implies {expected_len}"
            )));
        }
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
    use tomus_wire::ErrorKind;

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
}
