//! Mapping a piece of a chunk file instead of copying it out: for readers that hand the bytes
//! on to a socket (the S3 gateway's GETs), which copies them once more anyway.
//!
//! A read through `read.rs` copies each byte from the page cache into the reader's buffer,
//! then the socket copies it again. Mapped, the checksum pass reads the page cache in place
//! and the socket's copy is the only one: profiled under 8 concurrent 128 MiB GETs, the copy
//! out of the page cache was 31% of the gateway's CPU. What a mapping guarantees, and how a
//! truncation or a disk error under it is survived: `tomus_wire::mapping`.

use std::path::Path;

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::check_block;
use tomus_wire::mapping::{guarded, Damaged, Mapping};
use tomus_wire::{Error, Result};

use super::read::Opened;

/// Bytes `[offset, offset + len)` of chunk `id`'s file in `dir`, mapped, every block they
/// touch checked against its stored CRC32C. The mapping lives as long as the bytes.
pub fn map_piece(dir: &Path, id: ChunkId, offset: u64, len: u64) -> Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let f = Opened::new(dir, id, offset, len)?;
    let block = u64::from(tomus_wire::chunk_file::BLOCK_SIZE);
    // Whole blocks are mapped, so the cut ones at the ends are checked in place too.
    let (lo, hi) = (
        f.data_start + f.first * block,
        f.data_start + f.block_end(f.last),
    );
    let (mapping, at) = Mapping::covering(&f.file, lo, (hi - lo) as usize)
        .map_err(|e| Error::internal(format!("chunk file {id}: mmap: {e}")))?;
    let blocks = &mapping.as_ref()[at..];
    let checked = guarded(blocks, || {
        (f.first..=f.last).try_for_each(|b| {
            let from = ((b - f.first) * block) as usize;
            let to = from + (f.block_end(b) - b * block) as usize;
            check_block(id, b, &blocks[from..to], f.stored(b))
        })
    });
    match checked {
        Ok(r) => r?,
        Err(Damaged) => {
            return Err(Error::corrupt(format!(
                "chunk file {id}: pages unreadable while mapped (truncated or a disk error)"
            )))
        }
    }
    let start = at + (f.data_start + offset - lo) as usize;
    Ok(Bytes::from_owner(mapping).slice(start..start + len as usize))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use super::*;
    use crate::local::test_chunks;

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
}
