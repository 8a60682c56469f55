//! Registered files (workflows): files a task wrote on this host, adopted into the provider's
//! `registered` directory by a hard link (no byte copied) and served by range from there.
//!
//! Adoption checks that the path names the very file the client sees (same device and
//! inode), so a provider on another host cannot adopt a file of the same name of its own;
//! a file on another file system is refused (`EXDEV`): registering never copies. The
//! adopted inode is made read-only, since registered files are immutable.
//!
//! The file's CRC32C is computed after adoption, in the background, and recorded with the
//! manager (`FsSetChecksum`): registering stays O(1) in the file's size, and readers that
//! find no checksum yet wait for it. Small files are kept in memory while at it (the memory
//! tier of registered files), so the in-memory transfer module is answered without a disk
//! read; larger ranges go out with sendfile.
//!
//! A copy adopted without a path is one still being written (a swarm reader sharing the
//! pieces it has with the other readers): served by range, never checksummed nor kept in
//! memory, and kept apart in `partial/`. Copies go with `DropRegistered`: the manager's
//! collection of deleted files' copies, or a reader dropping its shared partial copy. A
//! reader that dies never drops its partial copy, and the manager never knew of it: partial
//! copies nobody wrote to for `PARTIAL_IDLE` are removed ([`crate::sweep_idle`]).

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tomus_wire::frame::MAX_BODY;
use tomus_wire::manager::FsSetChecksum;
use tomus_wire::{Adopted, Error, ErrorKind, FileRange, Payload, Pool, Result};

use crate::{blocking, io_error, sweep_idle};

/// How long the background checksum keeps trying to record itself (the registration that
/// follows the adoption may arrive late, or the manager may be restarting).
const RECORD_FOR: Duration = Duration::from_secs(60);
/// Longest copy name accepted from a reader.
const MAX_NAME: usize = 64;
/// Where partial copies (files still being written by a reader) are kept.
const PARTIAL: &str = "partial";
/// A partial copy nobody wrote to for this long belongs to a reader that is gone (a live
/// one writes a piece every few seconds, even on a slow link).
pub const PARTIAL_IDLE: Duration = Duration::from_secs(3600);

/// The registered files of one provider.
pub struct RegisteredFiles {
    dir: PathBuf,
    /// Where checksums are recorded, and this provider's pool to reach it.
    manager: String,
    pool: Arc<Pool>,
    /// Files up to this size are kept in memory after adoption (0: none).
    small_bytes: u64,
    cache: Mutex<Cache>,
    counter: AtomicU64,
}

/// Small registered files in memory, oldest evicted first, within a byte budget.
struct Cache {
    budget: u64,
    used: u64,
    files: HashMap<String, Bytes>,
    order: VecDeque<String>,
}

impl Cache {
    fn insert(&mut self, name: String, data: Bytes) {
        let len = data.len() as u64;
        if len > self.budget {
            return;
        }
        while self.used + len > self.budget {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(d) = self.files.remove(&old) {
                self.used -= d.len() as u64;
            }
        }
        self.used += len;
        self.order.push_back(name.clone());
        self.files.insert(name, data);
    }
}

impl RegisteredFiles {
    /// `memory_bytes`: budget of the in-memory copies of small files, each at most
    /// `small_bytes`.
    pub fn new(
        dir: PathBuf,
        manager: String,
        pool: Arc<Pool>,
        small_bytes: u64,
        memory_bytes: u64,
    ) -> Self {
        RegisteredFiles {
            dir,
            manager,
            pool,
            small_bytes,
            cache: Mutex::new(Cache {
                budget: memory_bytes,
                used: 0,
                files: HashMap::new(),
                order: VecDeque::new(),
            }),
            counter: AtomicU64::new(0),
        }
    }

    /// Hard-links `local` (device `dev`, inode `ino`) into the registered directory.
    pub async fn adopt(
        self: &Arc<Self>,
        local: String,
        dev: u64,
        ino: u64,
        tomus_path: String,
    ) -> Result<Adopted> {
        let name = format!(
            "{:x}-{:x}-{}",
            tomus_wire::now_ms(),
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        );
        let dir = if tomus_path.is_empty() {
            self.dir.join(PARTIAL)
        } else {
            self.dir.clone()
        };
        let target = dir.join(&name);
        let size = blocking(move || {
            let meta = std::fs::metadata(&local)
                .map_err(|e| io_error(format_args!("cannot register {local}"), e))?;
            if !meta.is_file() {
                return Err(Error::invalid(format!("{local} is not a regular file")));
            }
            if meta.dev() != dev || meta.ino() != ino {
                return Err(Error::invalid(format!(
                    "{local} is not the file the client sees: this provider runs on another \
                     host"
                )));
            }
            std::fs::create_dir_all(&dir)
                .map_err(|e| io_error(format_args!("cannot create {}", dir.display()), e))?;
            if let Err(e) = std::fs::hard_link(&local, &target) {
                return Err(if e.raw_os_error() == Some(libc::EXDEV) {
                    Error::invalid(format!(
                        "{local} is on another file system than this provider's data \
                         directory {}: registering links the file, it never copies it",
                        dir.display()
                    ))
                } else {
                    io_error(
                        format_args!("cannot link {local} into {}", dir.display()),
                        e,
                    )
                });
            }
            // Immutable from now on, for the task that wrote it too (same inode).
            let mut perms = meta.permissions();
            perms.set_mode(perms.mode() & 0o444);
            if let Err(e) = std::fs::set_permissions(&target, perms) {
                tracing::debug!("{}: cannot make it read-only: {e}", target.display());
            }
            crate::sync_dir(&dir)
                .map_err(|e| io_error(format_args!("syncing {}", dir.display()), e))?;
            Ok(meta.len())
        })
        .await?;
        // A copy still being written (no path) is served as it is: its checksum would be
        // wrong, and a small one kept in memory would stay a partial copy.
        if !tomus_path.is_empty() {
            let me = self.clone();
            let copy = name.clone();
            tokio::spawn(async move { me.checksum_and_record(copy, size, tomus_path).await });
        }
        Ok(Adopted { name, size })
    }

    /// Computes the CRC32C of copy `name` (keeping a small file in memory) and records it.
    async fn checksum_and_record(self: Arc<Self>, name: String, size: u64, path: String) {
        let file = self.dir.join(&name);
        let small = size <= self.small_bytes;
        let computed = blocking(move || {
            if small {
                let data = std::fs::read(&file).map_err(|e| io_error("reading", e))?;
                Ok((crc32c::crc32c(&data), Some(Bytes::from(data))))
            } else {
                Ok((crc_of_file(&file)?, None))
            }
        })
        .await;
        let (crc, data) = match computed {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("registered {path}: checksum of copy {name} failed: {e}");
                return;
            }
        };
        if let Some(data) = data {
            self.lock().insert(name.clone(), data);
        }
        let deadline = tokio::time::Instant::now() + RECORD_FOR;
        loop {
            let req = FsSetChecksum {
                path: path.clone(),
                name: name.clone(),
                checksum: crc,
            };
            match self.pool.call(&self.manager, req).await {
                Ok(()) => return,
                Err(e) if e.kind == ErrorKind::Corrupt => {
                    tracing::warn!("registered {path}: {e}");
                    return;
                }
                Err(e) if tokio::time::Instant::now() > deadline => {
                    tracing::warn!("registered {path}: cannot record its checksum: {e}");
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes the copies `names` (from memory too); returns the bytes of those it held.
    /// Names it does not hold are ignored: collection retries after lost answers.
    pub async fn drop_copies(&self, names: Vec<String>) -> Result<u64> {
        for name in &names {
            check_name(name)?;
        }
        {
            let mut cache = self.lock();
            for name in &names {
                if let Some(d) = cache.files.remove(name) {
                    cache.used -= d.len() as u64;
                    cache.order.retain(|n| n != name);
                }
            }
        }
        let dir = self.dir.clone();
        blocking(move || {
            let mut freed = 0;
            for name in names {
                let Some((path, meta)) = find(&dir, &name)? else {
                    continue;
                };
                let len = meta.len();
                match std::fs::remove_file(&path) {
                    Ok(()) => freed += len,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error(format_args!("removing copy {name}"), e)),
                }
            }
            Ok(freed)
        })
        .await
    }

    /// Bytes `[offset, offset + len)` of copy `name` and the copy's whole size: from memory
    /// for a small file, else a file range for sendfile.
    pub async fn read(&self, name: String, offset: u64, len: u64) -> Result<(Payload, u64)> {
        check_name(&name)?;
        if len > MAX_BODY {
            return Err(Error::invalid(format!(
                "a registered range is at most {MAX_BODY} bytes; {len} asked"
            )));
        }
        let cached = self.lock().files.get(&name).cloned();
        if let Some(data) = cached {
            let size = data.len() as u64;
            let end = check_range(&name, offset, len, size)?;
            return Ok((Payload::Bytes(data.slice(offset as usize..end)), size));
        }
        let dir = self.dir.clone();
        blocking(move || {
            let Some((path, _)) = find(&dir, &name)? else {
                return Err(Error::not_found(format!("no registered copy {name} here")));
            };
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::not_found(format!("no registered copy {name} here")))
                }
                Err(e) => return Err(io_error(format_args!("opening copy {name}"), e)),
            };
            let size = file
                .metadata()
                .map_err(|e| io_error(format_args!("copy {name}"), e))?
                .len();
            check_range(&name, offset, len, size)?;
            Ok((Payload::File(FileRange { file, offset, len }), size))
        })
        .await
    }

    /// Removes the partial copies nobody wrote to for `idle` (see [`crate::sweep_idle`]).
    pub async fn sweep_idle_partials(&self, idle: Duration) -> Result<(usize, u64)> {
        let dir = self.dir.join(PARTIAL);
        blocking(move || sweep_idle(&dir, idle, std::time::SystemTime::now(), |_| true)).await
    }
}

/// Where copy `name` lies (the registered directory, or its partial copies) and its
/// metadata; `None` if in neither.
fn find(dir: &Path, name: &str) -> Result<Option<(PathBuf, std::fs::Metadata)>> {
    for path in [dir.join(name), dir.join(PARTIAL).join(name)] {
        match std::fs::metadata(&path) {
            Ok(meta) => return Ok(Some((path, meta))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(format_args!("copy {name}"), e)),
        }
    }
    Ok(None)
}

/// Refuses names this provider never gives (a path that could leave its directory).
fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    {
        return Err(Error::invalid(format!(
            "no registered copy is named {name:?}"
        )));
    }
    Ok(())
}

/// The end of `[offset, offset + len)` if it lies within a copy of `size` bytes.
fn check_range(name: &str, offset: u64, len: u64, size: u64) -> Result<usize> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(end as usize),
        _ => Err(Error::new(
            ErrorKind::OutOfRange,
            format!(
                "range {offset}+{len} is past the end of registered copy {name} ({size} bytes)"
            ),
        )),
    }
}

/// CRC32C of a whole file, read in large blocks.
fn crc_of_file(path: &Path) -> Result<u32> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| io_error("opening", e))?;
    let mut buf = vec![0u8; 4 << 20];
    let mut crc = 0u32;
    loop {
        let n = file.read(&mut buf).map_err(|e| io_error("reading", e))?;
        if n == 0 {
            return Ok(crc);
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use crate::sweep_idle;
    use crate::testutil::TempDir;

    #[test]
    fn only_partial_copies_idle_for_longer_than_the_limit_are_swept() {
        let dir = TempDir::new("partials");
        let hour = Duration::from_secs(3600);
        let now = SystemTime::now();
        let idle = dir.path().join("1-2-3");
        let live = dir.path().join("1-2-4");
        std::fs::write(&idle, vec![7u8; 1000]).unwrap();
        std::fs::write(&live, vec![7u8; 10]).unwrap();
        let old = std::fs::File::options().write(true).open(&idle).unwrap();
        old.set_modified(now - 2 * hour).unwrap();
        let recent = std::fs::File::options().write(true).open(&live).unwrap();
        recent.set_modified(now - hour / 2).unwrap();

        assert_eq!(
            sweep_idle(dir.path(), hour, now, |_| true).unwrap(),
            (1, 1000)
        );
        assert!(!idle.exists(), "an idle partial copy stayed");
        assert!(
            live.exists(),
            "a partial copy written to recently was removed"
        );
        // A reader writing again keeps its copy; an empty or missing directory is fine.
        assert_eq!(sweep_idle(dir.path(), hour, now, |_| true).unwrap(), (0, 0));
        let missing = dir.path().join("none");
        assert_eq!(sweep_idle(&missing, hour, now, |_| true).unwrap(), (0, 0));
    }
}
