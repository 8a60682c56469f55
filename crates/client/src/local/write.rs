//! Writing a chunk file, header and data as the provider writes them, under a temporary name
//! in the provider's directory, for the provider to adopt.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::chunk_path;
use tomus_wire::{Error, Result};

/// Writes chunk `id` (its encoded `header`, then `data`) as a new temporary file next to
/// where the chunk goes in the chunk directory `dir`; returns the file's name. Not synced:
/// the provider syncs it when it adopts it.
pub fn write_chunk_file(dir: &Path, id: ChunkId, header: &[u8], data: &[u8]) -> Result<String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // A client that dies between writing and adoption leaves this file (at most a chunk per
    // write in flight); providers remove `.tmp` files idle for an hour, and all at start.
    let name = format!(
        ".{id}.client-{}-{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let path = tmp_path(dir, id, &name);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| {
            f.write_all(header)?;
            f.write_all(data)
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(Error::unavailable(format!(
            "writing chunk {id} into {}: {e}",
            path.display()
        )));
    }
    Ok(name)
}

/// Where the temporary file `name` of chunk `id` lies in the chunk directory `dir`.
pub(super) fn tmp_path(dir: &Path, id: ChunkId, name: &str) -> PathBuf {
    let mut path = chunk_path(dir, id);
    path.set_file_name(name);
    path
}
