//! Block verification: every block a read, a verify or a scrub touches is checked against
//! its stored CRC32C, and the checksum of the range being sent is built on the way.

use std::cell::Cell;
use std::fs::File;
use std::ops::Range;

use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::check_block;
use tomus_wire::mapping::{guarded, Mapping, MIN_MAPPED_LEN};
use tomus_wire::{Error, Result};

use super::files::Inner;
use super::format::{block_shift, read_at, BLOCK_SIZE, CRC_LEN, HEADER_LEN};
use super::to_usize;

/// Blocks checked per positioned read when a range is verified without being kept (by verify
/// and scrub, and before sendfile for ranges not checked in a mapping): 4 x 64 KiB = 256 KiB,
/// small enough to stay in the L2 cache between the read that copies it and the CRC32C that
/// checks it, large enough that the system calls cost little.
const VERIFY_BLOCKS: u64 = 4;

thread_local! {
    /// The buffer [`verify_file_blocks`] reads into, kept per thread (the blocking pool's
    /// threads) so verification does not allocate. At most `VERIFY_BLOCKS` blocks each.
    static VERIFY_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

impl Inner {
    /// Verifies all of chunk `id` (small or file) and returns its data length.
    pub(super) fn verify(&self, id: ChunkId) -> Result<u64> {
        if let Some(found) = self.small.verify(id) {
            return found;
        }
        let (file, data_len) = self.open_chunk(id)?;
        let block = u64::from(BLOCK_SIZE);
        let blocks = data_len.div_ceil(block);
        let mut crcs = vec![0u8; to_usize(blocks * CRC_LEN, id)?];
        read_at(&file, &mut crcs, HEADER_LEN, id)?;
        let data_start = HEADER_LEN + blocks * CRC_LEN;
        let mut unused = RangeCrc::new(0..0);
        verify_file_blocks(&file, id, data_start, 0, data_len, &crcs, &mut unused)?;
        Ok(data_len)
    }
}

/// Checks each block of `data` (blocks `first..` of a chunk) against its stored CRC32C;
/// `crcs` must hold (at least) one per block.
/// Checks `data` (starting at the start of block `first`) against `crcs`, the checksums of
/// its blocks; feeds each verified block to `sent` (the checksum of the range being sent),
/// `at` being the offset of `data` in the span `sent` counts from.
pub(super) fn verify_blocks(
    id: ChunkId,
    first: u64,
    data: &[u8],
    crcs: &[u8],
    sent: &mut RangeCrc,
    at: u64,
) -> Result<()> {
    let blocks = data.len().div_ceil(BLOCK_SIZE as usize);
    // A block without its checksum would pass unchecked (zip stops at the shorter side).
    let Some(crcs) = crcs.get(..blocks * CRC_LEN as usize) else {
        return Err(Error::internal(format!(
            "chunk {id}: {blocks} blocks to check from block {first} but {} checksums",
            crcs.len() / CRC_LEN as usize
        )));
    };
    for (i, (data, crc)) in data
        .chunks(BLOCK_SIZE as usize)
        .zip(crcs.chunks_exact(CRC_LEN as usize))
        .enumerate()
    {
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        check_block(id, first + i as u64, data, stored)?;
        sent.block(at + i as u64 * u64::from(BLOCK_SIZE), data, stored);
    }
    Ok(())
}

/// The CRC32C of a range of chunk data, built while its blocks are verified: a whole block
/// inside the range adds its stored checksum (combined with a precomputed operator, a few
/// dozen shifts), the range's partial edge blocks and a chunk's short last block add their
/// bytes. What a reader checks the bytes it got against; no second pass over the data.
#[derive(Clone)]
pub(super) struct RangeCrc {
    /// The range, in bytes from the start of the verified span.
    want: Range<u64>,
    crc: u32,
}

impl RangeCrc {
    pub(super) fn new(want: Range<u64>) -> Self {
        RangeCrc { want, crc: 0 }
    }

    /// Feeds a verified block of `data` at `at` (bytes from the span's start), whose stored
    /// checksum is `stored`. Blocks must come in order.
    fn block(&mut self, at: u64, data: &[u8], stored: u32) {
        let end = at + data.len() as u64;
        let (lo, hi) = (self.want.start.max(at), self.want.end.min(end));
        if lo >= hi {
            return;
        }
        self.crc = if lo == at && hi == end && data.len() == BLOCK_SIZE as usize {
            block_shift().combine(self.crc, stored)
        } else {
            crc32c::crc32c_append(self.crc, &data[(lo - at) as usize..(hi - at) as usize])
        };
    }

    pub(super) fn crc(&self) -> u32 {
        self.crc
    }
}

/// Checks `len` bytes of chunk data at `pos` in `file`, starting at the start of block
/// `first`, against `crcs` (the checksums of those blocks), reading [`VERIFY_BLOCKS`] blocks
/// at a time into this thread's reused buffer.
pub(super) fn verify_file_blocks(
    file: &File,
    id: ChunkId,
    pos: u64,
    first: u64,
    len: u64,
    crcs: &[u8],
    sent: &mut RangeCrc,
) -> Result<()> {
    let step = VERIFY_BLOCKS * u64::from(BLOCK_SIZE);
    // Taken out of the thread-local slot for the duration (no borrow to get wrong), put back
    // even when verification fails.
    let mut buf = VERIFY_BUF.take();
    let result = (|| {
        let mut done = 0;
        while done < len {
            let n = step.min(len - done);
            buf.resize(to_usize(n, id)?, 0);
            read_at(file, &mut buf, pos + done, id)?;
            let block = first + done / u64::from(BLOCK_SIZE);
            let at = to_usize((block - first) * CRC_LEN, id)?;
            // Too few checksums leave an empty slice, which verify_blocks reports.
            let crcs = crcs.get(at..).unwrap_or_default();
            verify_blocks(id, block, &buf, crcs, sent, done)?;
            done += n;
        }
        Ok(())
    })();
    VERIFY_BUF.set(buf);
    result
}

/// Checks `len` bytes of chunk data at `pos` in `file` as [`verify_file_blocks`] does, in
/// place in a mapping of the file instead of copied out: the bytes are about to be sent with
/// sendfile, and under 8 remote readers the copy cost the providers about twice what the
/// checksums did (12% less provider CPU without it). Ranges under [`MIN_MAPPED_LEN`], where
/// the copy is the cheaper, are read. Where the file cannot be mapped, or the check in place
/// fails (a bad block, a page that cannot be read while mapped: truncated under the mapping,
/// a disk error), positioned reads check it again and say what is wrong: a file cut short
/// reads as truncated, not as a bad block of the zeros past its end, and an unreadable
/// sector as unreadable.
pub(super) fn verify_mapped_blocks(
    file: &File,
    id: ChunkId,
    pos: u64,
    first: u64,
    len: usize,
    crcs: &[u8],
    sent: &mut RangeCrc,
) -> Result<()> {
    let worth_it = len as u64 >= MIN_MAPPED_LEN;
    if let Some(Ok((mapping, at))) = worth_it.then(|| Mapping::covering(file, pos, len)) {
        let data = &mapping.as_ref()[at..];
        let mut mapped = sent.clone();
        let checked = guarded(data, || {
            verify_blocks(id, first, data, crcs, &mut mapped, 0)
        });
        if let Ok(Ok(())) = checked {
            *sent = mapped;
            return Ok(());
        }
    }
    verify_file_blocks(file, id, pos, first, len as u64, crcs, sent)
}
