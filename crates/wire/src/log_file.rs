//! A check every append-only log makes before acknowledging what it synced (the providers'
//! metadata and small-chunk logs, the manager's publication journal).

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;

/// `NotFound` when `file` has no name left in any directory. A log removed while open (its
/// directory `rm -rf`'ed) still takes writes and syncs through the handle, but nothing will
/// ever read them back: appends to it must fail, not be acknowledged. One `fstat`.
pub fn still_linked(file: &File) -> io::Result<()> {
    if file.metadata()?.nlink() == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the log file was removed while open: its records are not kept",
        ));
    }
    Ok(())
}
