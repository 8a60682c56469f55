//! Mapping a piece of a chunk file instead of copying it out: for readers that hand the bytes
//! on to a socket (the S3 gateway's GETs), which copies them once more anyway.
//!
//! A read through `read.rs` copies each byte from the page cache into the reader's buffer,
//! then the socket copies it again. Mapped, the checksum pass reads the page cache in place
//! and the socket's copy is the only one: profiled under 8 concurrent 128 MiB GETs, the copy
//! out of the page cache was 31% of the gateway's CPU.
//!
//! What is checked is what is sent, as long as the pages stay in memory; a page dropped from
//! the page cache between the check and the send is read from the disk again unchecked, the
//! same window a provider's check-then-`sendfile` has. The file cannot change under the
//! mapping through tomus: chunk files are written whole under another name and renamed,
//! removed by unlinking (the mapping keeps the pages), never rewritten in place. A truncation
//! or a disk error under the mapping is survived: see `sigbus.rs`.

use std::os::fd::AsRawFd;
use std::path::Path;

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::check_block;
use tomus_wire::{Error, Result};

use super::read::Opened;
use super::sigbus::{self, guarded};

/// Bytes `[offset, offset + len)` of chunk `id`'s file in `dir`, mapped, every block they
/// touch checked against its stored CRC32C. The mapping lives as long as the bytes.
pub fn map_piece(dir: &Path, id: ChunkId, offset: u64, len: u64) -> Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let f = Opened::new(dir, id, offset, len)?;
    let block = u64::from(tomus_wire::chunk_file::BLOCK_SIZE);
    // Whole blocks are mapped, so the cut ones at the ends are checked in place too; the
    // mapping starts on a page boundary, as mmap requires.
    let (lo, hi) = (
        f.data_start + f.first * block,
        f.data_start + f.block_end(f.last),
    );
    let page = sigbus::page_size() as u64;
    let map_at = lo - lo % page;
    let mapping = Mapping::new(&f.file, map_at, (hi - map_at) as usize)
        .map_err(|e| Error::internal(format!("chunk file {id}: mmap: {e}")))?;
    let blocks = &mapping.as_ref()[(lo - map_at) as usize..];
    let checked = guarded(blocks, || {
        (f.first..=f.last).try_for_each(|b| {
            let from = ((b - f.first) * block) as usize;
            let to = from + (f.block_end(b) - b * block) as usize;
            check_block(id, b, &blocks[from..to], f.stored(b))
        })
    });
    match checked {
        Ok(r) => r?,
        Err(sigbus::Damaged) => {
            return Err(Error::corrupt(format!(
                "chunk file {id}: pages unreadable while mapped (truncated or a disk error)"
            )))
        }
    }
    let start = (f.data_start + offset - map_at) as usize;
    Ok(Bytes::from_owner(mapping).slice(start..start + len as usize))
}

/// A read-only shared mapping of part of a file, unmapped when dropped.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared reads of read-only memory.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` (> 0) bytes of `file` at `offset` (a multiple of the page size), read in
    /// ahead (`MAP_POPULATE`) so the checksum pass does not fault page by page.
    fn new(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a new mapping at an address the kernel picks; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                offset as libc::off_t,
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

    use tomus_wire::chunk_file::chunk_path;

    use super::*;
    use crate::local::test_chunks::{self, ChunkDir};

    fn map(dir: &Path, id: ChunkId, offset: u64, len: u64) -> Result<Vec<u8>> {
        map_piece(dir, id, offset, len).map(|b| b.to_vec())
    }

    #[test]
    fn every_range_maps_the_stored_bytes() {
        test_chunks::every_range_comes_back(map);
    }

    #[test]
    fn a_damaged_block_fails_the_ranges_that_touch_it_only() {
        test_chunks::a_damaged_block_fails_only_the_ranges_on_it(map);
    }

    #[test]
    fn missing_short_and_out_of_range_are_errors() {
        test_chunks::missing_short_and_out_of_range_are_errors(map);
    }

    /// A file of `pages` pages, mapped, then truncated to nothing under the mapping.
    fn truncated_under_mapping(pages: usize) -> (ChunkDir, Mapping) {
        let id = ChunkId(0xabc1_9abc);
        let len = pages * sigbus::page_size();
        let dir = ChunkDir::with(id, &vec![3u8; len]);
        let path = chunk_path(&dir.0, id);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mapping = Mapping::new(&file, 0, len).unwrap();
        file.set_len(0).unwrap();
        (dir, mapping)
    }

    #[test]
    fn pages_truncated_under_the_checksum_pass_are_damage_not_death() {
        let (_dir, mapping) = truncated_under_mapping(4);
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

    /// What the gateway relies on when a file is truncated after the check: the socket's copy
    /// fails with an error (the connection is dropped), no signal ends the process.
    #[test]
    fn sending_pages_truncated_under_the_mapping_is_an_error_not_a_signal() {
        let (_dir, mapping) = truncated_under_mapping(2);
        let (mut tx, _rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = tx.write(mapping.as_ref()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
    }
}
