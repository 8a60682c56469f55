//! Reading a piece of a chunk file, every block it touches checked against its stored
//! CRC32C.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::{
    check_block, chunk_path, file_len_for, parse_header, BLOCK_SIZE, CRC_LEN, HEADER_LEN,
};
use tomus_wire::{Error, Result};

/// A chunk file opened for a read of bytes `[offset, end)` of its data: its header and length
/// checked, and the stored CRC32Cs of the blocks the range touches read.
pub(super) struct Opened {
    pub file: File,
    data_len: u64,
    /// Where the data starts in the file (after the header and every block's CRC).
    pub data_start: u64,
    /// The first and last blocks the range touches.
    pub first: u64,
    pub last: u64,
    crcs: Vec<u8>,
}

impl Opened {
    /// Opens chunk `id`'s file in `dir` for bytes `[offset, offset + len)` of its data.
    pub fn new(dir: &Path, id: ChunkId, offset: u64, len: u64) -> Result<Opened> {
        let file = File::open(chunk_path(dir, id))
            .map_err(|e| Error::not_found(format!("chunk file {id}: {e}")))?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::not_found(format!("chunk file {id}: {e}")))?
            .len();
        let mut header = [0u8; HEADER_LEN as usize];
        read_at(&file, id, &mut header, 0)?;
        let data_len = parse_header(&header, id)?;
        if file_len_for(data_len) != Some(file_len) {
            return Err(Error::corrupt(format!(
                "chunk file {id}: {file_len} bytes, its header says {data_len} bytes of data"
            )));
        }
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= data_len)
            .ok_or_else(|| {
                Error::out_of_range(format!(
                    "chunk {id} holds {data_len} bytes, not {offset}+{len}"
                ))
            })?;
        let block = u64::from(BLOCK_SIZE);
        let (first, last) = (offset / block, (end.max(1) - 1) / block);
        // An empty range touches no block.
        let touched = if len == 0 { 0 } else { last - first + 1 };
        let mut crcs = vec![0u8; (touched * CRC_LEN) as usize];
        read_at(&file, id, &mut crcs, HEADER_LEN + first * CRC_LEN)?;
        Ok(Opened {
            file,
            data_len,
            data_start: HEADER_LEN + data_len.div_ceil(block) * CRC_LEN,
            first,
            last,
            crcs,
        })
    }

    /// The stored CRC32C of block `b` (one the range touches).
    pub fn stored(&self, b: u64) -> u32 {
        let i = ((b - self.first) * CRC_LEN) as usize;
        let c = &self.crcs;
        u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]])
    }

    /// Where block `b`'s data ends (the last block may be short).
    pub fn block_end(&self, b: u64) -> u64 {
        ((b + 1) * u64::from(BLOCK_SIZE)).min(self.data_len)
    }
}

fn read_at(file: &File, id: ChunkId, buf: &mut [u8], pos: u64) -> Result<()> {
    file.read_exact_at(buf, pos)
        .map_err(|e| Error::corrupt(format!("chunk file {id} at {pos}: {e}")))
}

/// Reads bytes `[offset, offset + out.len())` of chunk `id` from its file in `dir` into
/// `out`, checking every block they touch against its stored CRC32C.
pub fn read_piece(dir: &Path, id: ChunkId, offset: u64, out: &mut [u8]) -> Result<()> {
    let len = out.len() as u64;
    let f = Opened::new(dir, id, offset, len)?;
    if out.is_empty() {
        return Ok(());
    }
    let end = offset + len;
    let block = u64::from(BLOCK_SIZE);
    let (first, last, data_start) = (f.first, f.last, f.data_start);
    let at = |buf: &mut [u8], pos: u64| read_at(&f.file, id, buf, pos);
    let stored = |b: u64| f.stored(b);
    let block_end = |b: u64| f.block_end(b);
    let check = |b: u64, data: &[u8]| check_block(id, b, data, stored(b));
    // Blocks wholly inside the range are read in one call, straight into `out`, and checked
    // there; the (at most two) blocks the range cuts go through a block-sized buffer.
    let whole_from = if offset.is_multiple_of(block) {
        first
    } else {
        first + 1
    };
    let whole_to = if end == block_end(last) {
        last + 1
    } else {
        last
    };
    if whole_from < whole_to {
        let (lo, hi) = (whole_from * block, block_end(whole_to - 1));
        let span = &mut out[(lo - offset) as usize..(hi - offset) as usize];
        at(span, data_start + lo)?;
        for (b, data) in (whole_from..whole_to).zip(span.chunks(block as usize)) {
            check(b, data)?;
        }
    }
    let mut cut: Vec<u64> = Vec::new();
    if first < whole_from {
        cut.push(first);
    }
    if last >= whole_to && !cut.contains(&last) {
        cut.push(last);
    }
    let mut buf = Vec::new();
    for b in cut {
        let (lo, hi) = (b * block, block_end(b));
        buf.resize((hi - lo) as usize, 0);
        at(&mut buf, data_start + lo)?;
        check(b, &buf)?;
        let (from, to) = (offset.max(lo), end.min(hi));
        out[(from - offset) as usize..(to - offset) as usize]
            .copy_from_slice(&buf[(from - lo) as usize..(to - lo) as usize]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use super::*;
    use tomus_wire::chunk_file::{net_namespace, TOKEN_FILE};
    use tomus_wire::LocalChunks;

    use crate::local::test_chunks::{self, ChunkDir};
    use crate::local::usable_dir;

    fn read(dir: &Path, id: ChunkId, offset: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = vec![0xee; len as usize];
        read_piece(dir, id, offset, &mut out).map(|()| out)
    }

    #[test]
    fn every_range_reads_the_stored_bytes() {
        test_chunks::every_range_comes_back(read);
    }

    #[test]
    fn a_damaged_block_fails_the_ranges_that_touch_it_only() {
        test_chunks::a_damaged_block_fails_only_the_ranges_on_it(read);
    }

    #[test]
    fn missing_short_and_out_of_range_are_errors() {
        test_chunks::missing_short_and_out_of_range_are_errors(read);
    }

    #[test]
    fn a_token_of_another_run_or_namespace_is_not_trusted() {
        let id = ChunkId(1);
        let dir = ChunkDir::with(id, b"x");
        std::fs::write(dir.0.join(TOKEN_FILE), "abc").unwrap();
        let local = |token: &str, net_ns: u64| LocalChunks {
            dir: dir.0.to_string_lossy().into_owned(),
            token: token.into(),
            net_ns,
        };
        assert_eq!(
            usable_dir(&local("abc", net_namespace())),
            Some(dir.0.clone())
        );
        assert_eq!(usable_dir(&local("abd", net_namespace())), None);
        assert_eq!(usable_dir(&local("abc", net_namespace() + 1)), None);
        assert_eq!(usable_dir(&local("abc", 0)), None);
    }
}
