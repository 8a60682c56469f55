//! Short-circuit reads and writes: chunks of providers on this host go through their chunk
//! files directly instead of through their sockets, as HDFS's short-circuit local reads do.
//!
//! Through the provider's socket, a read passes a byte through two processes: the provider
//! checks it in the page cache and hands the page to the socket (sendfile), the reader copies
//! it out of the socket into its buffer and checks it again, plus the TCP stack's work on
//! both ends and a request and its answer. A write is copied three times:
//! into the socket, out of it, and into the file. Read directly, a byte is copied once, from
//! the page cache into the reader's buffer, and checked there against the file's block
//! checksums (`read.rs`). A reader that hands the bytes on to a socket (the S3 gateway) gets
//! the file's pages mapped instead, checked in place, so the socket's copy is the only one
//! (`mapped.rs`). Written directly, it is copied once, into a temporary file in the
//! provider's directory, which the provider then checks, names and syncs as its own chunk
//! (`write.rs`; `AdoptChunk`).
//!
//! A provider is used this way only when it says where its chunk files are
//! (`LocalChunkDir`) and the client finds there the token that provider wrote at its
//! start, while running in the provider's network namespace (see `LocalChunks`). Only
//! providers listed alive and not failing are used. The answer is remembered per provider
//! address.
//!
//! Anything unexpected sends the chunk through the provider as before. For a read: no such
//! file (a small chunk kept in the provider's log, a file removed by garbage collection or
//! quarantined, one this user may not read) or a checksum mismatch; the provider then also
//! quarantines a damaged copy. For a write: a file that cannot be created or a refused
//! adoption. `TOMUS_LOCAL_READS=0` and `TOMUS_LOCAL_WRITES=0` in the environment turn each
//! off.

/// Mapping a piece of a chunk file, checked, for bytes handed on to a socket.
mod mapped;
/// Reading a piece of a chunk file, checked.
mod read;
#[cfg(test)]
mod test_chunks;
/// Writing a chunk file for the provider to adopt.
mod write;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tomus_metadata::{ChunkId, ChunkPiece, ProviderId};
use tomus_wire::chunk_file::{net_namespace, TOKEN_FILE};
use tomus_wire::mapping::MIN_MAPPED_LEN;
use tomus_wire::provider::{AdoptChunk, LocalChunkDir};
use tomus_wire::{ErrorKind, LocalChunks, Pool};

pub use mapped::map_piece;
pub use read::read_piece;
pub use write::write_chunk_file;

/// Chunks and pieces shorter than this go through the provider: chunks under 64 KiB live in
/// the provider's small-chunk log, not in files, and for a few KiB the request costs little.
pub const MIN_PIECE: u64 = 64 << 10;

/// Whether the environment variable `name` leaves its switch on (anything but `0`, `false`,
/// `off` or `no`).
pub fn enabled_by_env(name: &str) -> bool {
    !matches!(
        std::env::var(name)
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str(),
        "0" | "false" | "off" | "no"
    )
}

/// A provider's answer: the address it was asked at and its chunk directory (`None`: not on
/// this host, or it offers no short-circuit access).
type Asked = (String, Option<Arc<PathBuf>>);

/// What the client knows of the providers whose chunk files it may use directly.
pub struct LocalProviders {
    reads: bool,
    writes: bool,
    dirs: Mutex<HashMap<ProviderId, Asked>>,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
}

impl LocalProviders {
    pub fn new(reads: bool, writes: bool) -> Self {
        LocalProviders {
            reads,
            writes,
            dirs: Mutex::new(HashMap::new()),
            read_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes read from chunk files directly so far.
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of chunks written as files directly so far.
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes.load(Ordering::Relaxed)
    }

    /// Whether provider `id` is on this host, as far as known without asking it: `Some(true)`
    /// (its chunk files are readable here), `Some(false)` (on another host, or no direct
    /// access), `None` (not asked yet).
    pub fn on_this_host(&self, id: ProviderId) -> Option<bool> {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .map(|(_, dir)| dir.is_some())
    }

    /// Whether `piece` is one to read directly where its provider is on this host: large
    /// enough to be in a chunk file, not a memory-class chunk (held in RAM only).
    pub fn wants_read(&self, piece: &ChunkPiece) -> bool {
        self.reads && piece.len >= MIN_PIECE && !piece.chunk.is_memory()
    }

    /// Whether `piece` is one to map from a chunk file on this host, when its bytes are
    /// handed on rather than kept (see [`MIN_MAPPED_LEN`]).
    pub fn wants_map(&self, piece: &ChunkPiece) -> bool {
        self.wants_read(piece) && piece.len >= MIN_MAPPED_LEN
    }

    /// Whether chunk `id` of `len` bytes is one to write directly where a replica's
    /// provider is on this host.
    pub fn wants_write(&self, id: ChunkId, len: usize) -> bool {
        self.writes && len as u64 >= MIN_PIECE && !id.is_memory()
    }

    /// Reads `piece` (one it [`LocalProviders::wants_read`]) into `out` from the chunk file
    /// of provider `id` (at `addr`) when that provider is on this host. Whether it did: if
    /// not, the piece must go through the provider.
    pub async fn read(
        &self,
        pool: &Pool,
        id: ProviderId,
        addr: &str,
        piece: &ChunkPiece,
        out: &mut [u8],
    ) -> bool {
        let Some(dir) = self.dir_of(pool, id, addr).await else {
            return false;
        };
        match blocking_here(|| read_piece(&dir, piece.chunk, piece.chunk_offset, out)) {
            Ok(()) => {
                self.read_bytes.fetch_add(piece.len, Ordering::Relaxed);
                true
            }
            Err(e) => {
                let chunk = piece.chunk;
                tracing::debug!("reading chunk {chunk} of provider {id} through it: {e}");
                false
            }
        }
    }

    /// Maps `piece` (one it [`LocalProviders::wants_map`]) from the chunk file of provider
    /// `id` (at `addr`) when that provider is on this host and the file checks out; `None`
    /// otherwise (the piece must be read another way).
    pub async fn map(
        &self,
        pool: &Pool,
        id: ProviderId,
        addr: &str,
        piece: &ChunkPiece,
    ) -> Option<Bytes> {
        let dir = self.dir_of(pool, id, addr).await?;
        match blocking_here(|| map_piece(&dir, piece.chunk, piece.chunk_offset, piece.len)) {
            Ok(bytes) => {
                self.read_bytes.fetch_add(piece.len, Ordering::Relaxed);
                Some(bytes)
            }
            Err(e) => {
                let chunk = piece.chunk;
                tracing::debug!("mapping chunk {chunk} of provider {id}: {e}");
                None
            }
        }
    }

    /// Stores chunk `id` (one it [`LocalProviders::wants_write`]; `header` encoded from
    /// `data`, whose CRC32C is `crc`) on provider `provider` (at `addr`) by writing its file
    /// in the provider's directory and having the provider adopt it, when that provider is
    /// on this host. Whether it did: if not, the chunk must go through the socket.
    #[allow(
        clippy::too_many_arguments,
        reason = "one chunk, one provider, its address"
    )]
    pub async fn write(
        &self,
        pool: &Pool,
        provider: ProviderId,
        addr: &str,
        id: ChunkId,
        crc: u32,
        header: &[u8],
        data: &[u8],
    ) -> bool {
        let Some(dir) = self.dir_of(pool, provider, addr).await else {
            return false;
        };
        let written = match blocking_here(|| write_chunk_file(&dir, id, header, data)) {
            Ok(name) => {
                let adopt = AdoptChunk {
                    id,
                    crc,
                    name: name.clone(),
                };
                let adopted = pool.call(addr, adopt).await;
                if adopted.is_err() {
                    // Refused or not reached: the provider did not take it (a taken file has
                    // its chunk's name, so removing the temporary name is harmless either way).
                    let _ = std::fs::remove_file(write::tmp_path(&dir, id, &name));
                }
                adopted
            }
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => {
                let len = data.len() as u64;
                self.written_bytes.fetch_add(len, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::debug!("sending chunk {id} to provider {provider} instead: {e}");
                false
            }
        }
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
                tracing::debug!("provider {id} at {addr}: no short-circuit access: {e}");
                None
            }
        };
        if let Some(d) = &dir {
            tracing::debug!(
                "provider {id} at {addr}: its chunk files are in {}",
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

/// Runs blocking file I/O on this thread, telling a multi-threaded tokio runtime first so
/// it moves its other tasks elsewhere meanwhile. The data goes straight between the file and
/// the caller's buffer (which a task on the blocking pool could not borrow).
fn blocking_here<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}
