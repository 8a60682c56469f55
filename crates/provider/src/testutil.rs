//! Scratch directories for the provider's unit tests, and what the page cache holds of a
//! file.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "tomus-provider-{tag}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pages of the file at `path` resident in the page cache, and its pages in all (`mincore`
/// over a mapping of it, which does not fault pages in).
pub fn resident_pages(path: &Path) -> (usize, usize) {
    let file = std::fs::File::open(path).expect("open");
    let len = usize::try_from(file.metadata().expect("stat").len()).expect("file size");
    if len == 0 {
        return (0, 0);
    }
    // SAFETY: sysconf only reads its argument.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("page");
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: a fresh shared read-only mapping of `len` bytes of an open file; mincore writes
    // one byte per page into `resident`, which has that many, and the mapping is unmapped
    // before returning, with no reference into it kept.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let rc = libc::mincore(map, len, resident.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(map, len);
        assert_eq!(rc, 0, "mincore: {err}");
    }
    let cached = resident.iter().filter(|&&b| b & 1 == 1).count();
    (cached, resident.len())
}
