//! Short-circuit reads: chunk pieces held by a provider on this host are read from its chunk
//! files directly, as HDFS's short-circuit local reads do. Through the provider a byte is
//! copied four times (page cache into the provider's verify buffer, into the socket by
//! sendfile, out of the socket into the reader's buffer, and the TCP stack's work on both
//! ends); read directly it is copied once, from the page cache into the reader's buffer, and
//! checked there against the file's block checksums.
//!
//! A provider is used this way only when it says where its chunk files are
//! ([`LocalChunkDir`]) and the reader finds there the token that provider wrote at its
//! start, while running in the provider's network namespace (see
//! [`tomus_wire::LocalChunks`]); the answer is remembered per provider address.
//! Anything unexpected (no such file: a small chunk kept in the provider's log, a file
//! removed by garbage collection, quarantined, or not readable by this user; a checksum
//! mismatch) sends that piece through the provider as before, which also quarantines a
//! damaged copy. `TOMUS_LOCAL_READS=0` in the environment turns short-circuit reads off.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tomus_metadata::{ChunkId, ChunkPiece, ProviderId};
use tomus_wire::chunk_file::{
    chunk_path, file_len_for, net_namespace, parse_header, BLOCK_SIZE, CRC_LEN, HEADER_LEN,
    TOKEN_FILE,
};
use tomus_wire::provider::LocalChunkDir;
use tomus_wire::{Error, ErrorKind, LocalChunks, Pool, Result};

/// Pieces shorter than this go through the provider: chunks under 64 KiB live in the
/// provider's small-chunk log, not in files, and for a few KiB the request costs little.
pub const MIN_PIECE: u64 = 64 << 10;

/// Whether the environment leaves short-circuit reads on (`TOMUS_LOCAL_READS` other than
/// `0`, `false`, `off` or `no`).
pub fn enabled_by_env() -> bool {
    !matches!(
        std::env::var("TOMUS_LOCAL_READS")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str(),
        "0" | "false" | "off" | "no"
    )
}

/// A provider's answer: the address it was asked at and its chunk directory (`None`: not on
/// this host, or it offers no short-circuit reads).
type Asked = (String, Option<Arc<PathBuf>>);

/// What the client knows of the providers it may read directly.
pub struct LocalReads {
    enabled: bool,
    dirs: Mutex<HashMap<ProviderId, Asked>>,
    bytes: AtomicU64,
}

impl LocalReads {
    pub fn new(enabled: bool) -> Self {
        LocalReads {
            enabled,
            dirs: Mutex::new(HashMap::new()),
            bytes: AtomicU64::new(0),
        }
    }

    /// Bytes read directly from chunk files so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether provider `id` is known to be readable directly (without asking it).
    pub fn is_local(&self, id: ProviderId) -> bool {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .is_some_and(|(_, dir)| dir.is_some())
    }

    /// Whether `piece` is one to read directly where its provider is on this host: large
    /// enough to be in a chunk file, not a memory-class chunk (held in RAM only).
    pub fn wants(&self, piece: &ChunkPiece) -> bool {
        self.enabled && piece.len >= MIN_PIECE && !piece.chunk.is_memory()
    }

    /// Reads `piece` (one it [`LocalReads::wants`]) into `out` from the chunk file of
    /// provider `id` (at `addr`) when that provider is on this host. `Ok(false)`: not tried
    /// (the piece must go through the provider); an error: tried and failed (also to go
    /// through the provider).
    pub async fn read(
        &self,
        pool: &Pool,
        id: ProviderId,
        addr: &str,
        piece: &ChunkPiece,
        out: &mut [u8],
    ) -> Result<bool> {
        let Some(dir) = self.dir_of(pool, id, addr).await else {
            return Ok(false);
        };
        blocking_here(|| read_piece(&dir, piece.chunk, piece.chunk_offset, out))?;
        self.bytes.fetch_add(piece.len, Ordering::Relaxed);
        Ok(true)
    }

    /// The chunk directory of provider `id` if it is on this host, asking it the first time.
    async fn dir_of(&self, pool: &Pool, id: ProviderId, addr: &str) -> Option<Arc<PathBuf>> {
        if let Some((asked, dir)) = self
            .dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            if asked == addr {
                return dir.clone();
            }
        }
        let dir = match pool.call(addr, LocalChunkDir {}).await {
            Ok(local) => usable_dir(&local).map(Arc::new),
            // Unreachable now: ask again next time rather than remember a guess.
            Err(e) if e.kind == ErrorKind::Unavailable => return None,
            // It offers none (or predates them): it will not change its mind.
            Err(e) => {
                tracing::debug!("provider {id} at {addr}: no short-circuit reads: {e}");
                None
            }
        };
        if let Some(d) = &dir {
            tracing::debug!(
                "provider {id} at {addr}: reading its chunks in {}",
                d.display()
            );
        }
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, (addr.to_string(), dir.clone()));
        dir
    }
}

/// The chunk directory `local` names, if this process shares that provider's file system
/// (the token is there) and network namespace.
fn usable_dir(local: &LocalChunks) -> Option<PathBuf> {
    if local.net_ns == 0 || local.net_ns != net_namespace() {
        return None;
    }
    let dir = PathBuf::from(&local.dir);
    let token = std::fs::read_to_string(dir.join(TOKEN_FILE)).ok()?;
    (token == local.token).then_some(dir)
}

/// Runs blocking file reads on this thread, telling a multi-threaded tokio runtime first so
/// it moves its other tasks elsewhere meanwhile. The piece is read straight into the
/// caller's buffer (which a task on the blocking pool could not borrow).
fn blocking_here<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Reads bytes `[offset, offset + out.len())` of chunk `id` from its file in `dir` into
/// `out`, checking every block they touch against its stored CRC32C.
pub fn read_piece(dir: &Path, id: ChunkId, offset: u64, out: &mut [u8]) -> Result<()> {
    let file = File::open(chunk_path(dir, id))
        .map_err(|e| Error::not_found(format!("chunk file {id}: {e}")))?;
    let at = |buf: &mut [u8], pos: u64| {
        file.read_exact_at(buf, pos)
            .map_err(|e| Error::corrupt(format!("chunk file {id} at {pos}: {e}")))
    };
    let file_len = file
        .metadata()
        .map_err(|e| Error::not_found(format!("chunk file {id}: {e}")))?
        .len();
    let mut header = [0u8; HEADER_LEN as usize];
    at(&mut header, 0)?;
    let data_len = parse_header(&header, id)?;
    if file_len_for(data_len) != Some(file_len) {
        return Err(Error::corrupt(format!(
            "chunk file {id}: {file_len} bytes, its header says {data_len} bytes of data"
        )));
    }
    let end = offset
        .checked_add(out.len() as u64)
        .filter(|&end| end <= data_len)
        .ok_or_else(|| {
            Error::out_of_range(format!(
                "chunk {id} holds {data_len} bytes, not {offset}+{}",
                out.len()
            ))
        })?;
    if out.is_empty() {
        return Ok(());
    }
    let block = u64::from(BLOCK_SIZE);
    let (first, last) = (offset / block, (end - 1) / block);
    let mut crcs = vec![0u8; ((last - first + 1) * CRC_LEN) as usize];
    at(&mut crcs, HEADER_LEN + first * CRC_LEN)?;
    let data_start = HEADER_LEN + data_len.div_ceil(block) * CRC_LEN;
    let stored = |b: u64| {
        let i = ((b - first) * CRC_LEN) as usize;
        u32::from_le_bytes([crcs[i], crcs[i + 1], crcs[i + 2], crcs[i + 3]])
    };
    let check = |b: u64, data: &[u8]| {
        if crc32c::crc32c(data) == stored(b) {
            Ok(())
        } else {
            Err(Error::corrupt(format!(
                "chunk file {id}: checksum mismatch in block {b}"
            )))
        }
    };
    let block_end = |b: u64| ((b + 1) * block).min(data_len);
    // Blocks wholly inside the range are read in one call, straight into `out`, and checked
    // there; the (at most two) blocks the range cuts go through a block-sized buffer.
    let whole_from = if offset.is_multiple_of(block) {
        first
    } else {
        first + 1
    };
    let whole_to = if end == block_end(last) {
        last + 1
    } else {
        last
    };
    if whole_from < whole_to {
        let (lo, hi) = (whole_from * block, block_end(whole_to - 1));
        let span = &mut out[(lo - offset) as usize..(hi - offset) as usize];
        at(span, data_start + lo)?;
        for (b, data) in (whole_from..whole_to).zip(span.chunks(block as usize)) {
            check(b, data)?;
        }
    }
    let mut cut: Vec<u64> = Vec::new();
    if first < whole_from {
        cut.push(first);
    }
    if last >= whole_to && !cut.contains(&last) {
        cut.push(last);
    }
    let mut buf = Vec::new();
    for b in cut {
        let (lo, hi) = (b * block, block_end(b));
        buf.resize((hi - lo) as usize, 0);
        at(&mut buf, data_start + lo)?;
        check(b, &buf)?;
        let (from, to) = (offset.max(lo), end.min(hi));
        out[(from - offset) as usize..(to - offset) as usize]
            .copy_from_slice(&buf[(from - lo) as usize..(to - lo) as usize]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use super::*;
    use tomus_wire::chunk_file::encode_header;

    /// A chunk directory holding one chunk of `data` (removed when dropped).
    struct ChunkDir(PathBuf);

    impl ChunkDir {
        fn with(id: ChunkId, data: &[u8]) -> ChunkDir {
            let dir = std::env::temp_dir().join(format!(
                "tomus-local-reads-{}-{:x}",
                std::process::id(),
                rand::random::<u64>()
            ));
            let path = chunk_path(&dir, id);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut file = encode_header(data);
            file.extend_from_slice(data);
            std::fs::write(path, file).unwrap();
            ChunkDir(dir)
        }

        fn read(&self, id: ChunkId, offset: u64, len: usize) -> Result<Vec<u8>> {
            let mut out = vec![0xee; len];
            read_piece(&self.0, id, offset, &mut out).map(|()| out)
        }
    }

    impl Drop for ChunkDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const B: u64 = BLOCK_SIZE as u64;

    /// Three whole blocks and a short one: ranges on and off block edges.
    fn ranges(len: u64) -> Vec<(u64, u64)> {
        let points = [0, 1, B - 1, B, B + 7, 2 * B, 3 * B - 3, 3 * B, len - 1, len];
        let mut out = Vec::new();
        for &a in &points {
            for &b in &points {
                if a <= b && b <= len {
                    out.push((a, b - a));
                }
            }
        }
        out
    }

    #[test]
    fn every_range_reads_the_stored_bytes() {
        let id = ChunkId(0xabc0_1234);
        let data: Vec<u8> = (0..3 * B + 1000).map(|i| (i * 31 % 251) as u8).collect();
        let dir = ChunkDir::with(id, &data);
        for (offset, len) in ranges(data.len() as u64) {
            let got = dir.read(id, offset, len as usize).unwrap();
            let want = &data[offset as usize..(offset + len) as usize];
            assert!(got == want, "range {offset}+{len} differs");
        }
    }

    #[test]
    fn a_damaged_block_fails_the_ranges_that_touch_it_only() {
        let id = ChunkId(0xabc0_5678);
        let data: Vec<u8> = (0..3 * B + 1000).map(|i| (i * 17 % 253) as u8).collect();
        let dir = ChunkDir::with(id, &data);
        let path = chunk_path(&dir.0, id);
        let mut file = std::fs::read(&path).unwrap();
        let data_start = HEADER_LEN + 4 * CRC_LEN;
        file[(data_start + B + 100) as usize] ^= 0x40;
        std::fs::write(&path, file).unwrap();
        for (offset, len) in ranges(data.len() as u64) {
            let touches = len > 0 && offset < 2 * B && offset + len > B;
            match dir.read(id, offset, len as usize) {
                Ok(got) => {
                    assert!(!touches, "range {offset}+{len} read a damaged block");
                    assert!(got == data[offset as usize..(offset + len) as usize]);
                }
                Err(e) => {
                    assert!(touches, "range {offset}+{len}: {e}");
                    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
                }
            }
        }
    }

    #[test]
    fn missing_short_and_out_of_range_are_errors() {
        let id = ChunkId(0xabc0_9abc);
        let data = vec![7u8; (2 * B) as usize];
        let dir = ChunkDir::with(id, &data);
        let e = dir.read(ChunkId(0xdead), 0, 10).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
        let e = dir.read(id, 2 * B - 5, 10).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfRange, "{e}");
        let path = chunk_path(&dir.0, id);
        let file = std::fs::read(&path).unwrap();
        std::fs::write(&path, &file[..file.len() - 1]).unwrap();
        let e = dir.read(id, 0, 10).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    }

    #[test]
    fn a_token_of_another_run_or_namespace_is_not_trusted() {
        let id = ChunkId(1);
        let dir = ChunkDir::with(id, b"x");
        std::fs::write(dir.0.join(TOKEN_FILE), "abc").unwrap();
        let local = |token: &str, net_ns: u64| LocalChunks {
            dir: dir.0.to_string_lossy().into_owned(),
            token: token.into(),
            net_ns,
        };
        assert_eq!(
            usable_dir(&local("abc", net_namespace())),
            Some(dir.0.clone())
        );
        assert_eq!(usable_dir(&local("abd", net_namespace())), None);
        assert_eq!(usable_dir(&local("abc", net_namespace() + 1)), None);
        assert_eq!(usable_dir(&local("abc", 0)), None);
    }
}
