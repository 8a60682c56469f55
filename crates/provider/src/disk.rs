//! What the provider asks of its disk beyond chunks and logs: sweeping files dead clients
//! left, directory syncs and blocking I/O off the async threads. (Free space:
//! [`tomus_wire::disk_space`]; I/O errors that say what was being done:
//! [`tomus_wire::io_error`].)

use std::path::Path;
use std::time::Duration;

use tomus_wire::{io_error, Error, Result};

/// Removes the files of `dir` whose names are `wanted` and that were last modified more
/// than `idle` before `now` (what clients that died left behind); returns how many and their
/// bytes. A missing directory holds none.
pub fn sweep_idle(
    dir: &Path,
    idle: Duration,
    now: std::time::SystemTime,
    wanted: impl Fn(&std::ffi::OsStr) -> bool,
) -> Result<(usize, u64)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(io_error(format_args!("listing {}", dir.display()), e)),
    };
    let (mut count, mut bytes) = (0, 0);
    for entry in entries {
        let entry = entry.map_err(|e| io_error(format_args!("listing {}", dir.display()), e))?;
        if !wanted(&entry.file_name()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else {
            continue; // removed meanwhile
        };
        let stale = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > idle);
        if meta.is_file() && stale && std::fs::remove_file(entry.path()).is_ok() {
            count += 1;
            bytes += meta.len();
        }
    }
    Ok((count, bytes))
}

/// Makes a directory's entries (a rename, a new file) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Runs blocking file I/O off the async worker threads.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("blocking I/O task failed: {e}")))?
}
