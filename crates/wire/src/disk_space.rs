//! Capacity and free space of the file system holding a path: providers report theirs to
//! the manager, and the manager keeps a reserve free on its own.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Capacity and free space (available to unprivileged users) of the file system holding
/// `path`, in bytes. Reports `(0, 0)` when the file system cannot be queried, so the manager
/// places nothing on a provider whose disk state is unknown.
pub fn disk_space(path: &Path) -> (u64, u64) {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return (0, 0);
    };
    // SAFETY: statvfs is plain old data, all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is a valid NUL-terminated string and st a writable statvfs.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    if rc != 0 {
        tracing::warn!(
            "statvfs {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        return (0, 0);
    }
    // The field types differ between platforms (u32 or u64), so the casts are needed somewhere.
    #[allow(clippy::unnecessary_cast)]
    let (blocks, avail, frsize) = (st.f_blocks as u64, st.f_bavail as u64, st.f_frsize as u64);
    (blocks.saturating_mul(frsize), avail.saturating_mul(frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_space_of_temp_dir() {
        let (capacity, free) = disk_space(&std::env::temp_dir());
        assert!(capacity > 0 && free <= capacity, "{capacity} {free}");
        assert_eq!(disk_space(Path::new("/nonexistent/tomus")), (0, 0));
    }
}
