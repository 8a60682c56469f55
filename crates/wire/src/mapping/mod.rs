//! Chunk files mapped into memory and checked in place, instead of copied out first: for
//! bytes that are then handed to a socket, which copies them anyway. Used by the client for
//! the pieces of chunk files on its host (`tomus_client::local::map_piece`, the S3 gateway's
//! GETs) and by the provider for the blocks it checks before `sendfile`.
//!
//! A read-only shared mapping sees the page cache: what is checked is what is sent, as long as
//! the pages stay in memory (a page dropped between the check and the send is read from the
//! disk again, unchecked, the window any check-then-send has). Chunk files never change in
//! place: they are written whole under another name and renamed, and removed by unlinking,
//! which leaves a mapping its pages. A truncation or a disk error under a mapping is survived
//! by the checksum pass ([`guarded`]) and reported as damage by it.

/// Surviving a SIGBUS while mapped pages are checked.
mod sigbus;

use std::fs::File;
use std::os::fd::AsRawFd;

pub use sigbus::{guarded, page_size, Damaged};

/// Ranges shorter than this are copied out rather than mapped, even where they could be:
/// mapping one and unmapping it costs more than copying it. Measured here (a 4 MiB chunk
/// file in the page cache, checked either way, 2 threads, two sittings; the client's
/// `crossover_of_mapping_and_copying`, `bench/results/mapped-piece-crossover-2026-11-29.json`):
/// 64 KiB 19-21 us mapped against 7-8 copied, 512 KiB 37-49 against 33-45, 1 MiB 65-76
/// against 66-85, 4 MiB 190-251 against 375-428.
pub const MIN_MAPPED_LEN: u64 = 1 << 20;

/// A read-only shared mapping of part of a file, unmapped when dropped.
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared reads of read-only memory.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps bytes `[start, start + len)` (`len > 0`) of `file`, from the page boundary at or
    /// below `start` (as mmap requires), read in ahead (`MAP_POPULATE`) so a checksum pass
    /// does not fault page by page. Returns the mapping and where `start` is in it.
    pub fn covering(file: &File, start: u64, len: usize) -> std::io::Result<(Mapping, usize)> {
        let at = (start % page_size() as u64) as usize;
        let mapping = Mapping::new(file, start - at as u64, at + len)?;
        Ok((mapping, at))
    }

    /// Maps `len` (> 0) bytes of `file` at `offset`, a multiple of the page size.
    fn new(file: &File, offset: u64, len: usize) -> std::io::Result<Mapping> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a new mapping at an address the kernel picks; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, once.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use std::path::PathBuf;

    use super::*;

    /// A scratch file, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A file of `len` bytes of `byte`, open for reading and writing.
    fn scratch(len: usize, byte: u8) -> (Scratch, File) {
        let path = std::env::temp_dir().join(format!(
            "tomus-mapping-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::write(&path, vec![byte; len]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        (Scratch(path), file)
    }

    #[test]
    fn a_range_off_the_page_boundary_maps_from_the_page_below() {
        let page = page_size();
        let (_s, file) = scratch(3 * page, 0);
        file.write_all_at(&[7; 10], page as u64 + 100).unwrap();
        let (m, at) = Mapping::covering(&file, page as u64 + 100, 20).unwrap();
        assert_eq!(at, 100);
        assert_eq!(m.as_ref().len(), 120);
        assert_eq!(&m.as_ref()[at..at + 10], &[7; 10]);
        assert_eq!(&m.as_ref()[at + 10..], &[0; 10]);
    }

    /// A file of `pages` pages, mapped, then truncated to nothing under the mapping.
    fn truncated_under_mapping(pages: usize) -> (Scratch, Mapping) {
        let len = pages * page_size();
        let (s, file) = scratch(len, 3);
        let mapping = Mapping::new(&file, 0, len).unwrap();
        file.set_len(0).unwrap();
        (s, mapping)
    }

    #[test]
    fn pages_truncated_under_the_checksum_pass_are_damage_not_death() {
        let (_s, mapping) = truncated_under_mapping(4);
        let pass = guarded(mapping.as_ref(), || crc32c::crc32c(mapping.as_ref()));
        assert!(
            pass.is_err(),
            "a pass over truncated pages was not seen damaged"
        );
        // The next pass on this thread starts clean.
        let whole = vec![1u8; 100];
        assert_eq!(
            guarded(&whole, || crc32c::crc32c(&whole)).unwrap(),
            crc32c::crc32c(&whole)
        );
    }

    /// What a sender of mapped pages relies on when a file is truncated after the check: the
    /// socket's copy fails with an error (the connection is dropped), no signal ends the
    /// process.
    #[test]
    fn sending_pages_truncated_under_the_mapping_is_an_error_not_a_signal() {
        let (_s, mapping) = truncated_under_mapping(2);
        let (mut tx, _rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = tx.write(mapping.as_ref()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
    }
}
