//! The chunk file format: magic `TCHK`, format version (u8), data length (u64 LE), block
//! size (u32 LE), one CRC32C (u32 LE) per block of data, then the data.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use tomus_metadata::ChunkId;
use tomus_wire::{checksum, Error, Result};

use crate::io_error;

const MAGIC: &[u8; 4] = b"TCHK";
/// The chunk file format this build writes and reads.
pub(super) const FORMAT_VERSION: u8 = 1;
/// Granularity of checksums: the smallest unit a read verifies.
pub const BLOCK_SIZE: u32 = 64 << 10;
pub(super) const HEADER_LEN: u64 = 4 + 1 + 8 + 4;
pub(super) const CRC_LEN: u64 = 4;

/// Size of the file holding `data_len` bytes of data.
pub(super) fn file_len_for(data_len: u64) -> Option<u64> {
    data_len
        .div_ceil(u64::from(BLOCK_SIZE))
        .checked_mul(CRC_LEN)?
        .checked_add(HEADER_LEN)?
        .checked_add(data_len)
}

/// The data length of a chunk file of `file_len` bytes, if that size is possible: the file
/// is the header, 4 bytes per block and the data, so it holds ceil(body / (block + 4))
/// blocks.
pub(super) fn data_len_for(file_len: u64) -> Option<u64> {
    let body = file_len.checked_sub(HEADER_LEN)?;
    let blocks = body.div_ceil(u64::from(BLOCK_SIZE) + CRC_LEN);
    let data_len = body.checked_sub(blocks * CRC_LEN)?;
    (file_len_for(data_len) == Some(file_len)).then_some(data_len)
}

/// Validates the fixed header and returns the data length.
pub(super) fn parse_header(header: &[u8; HEADER_LEN as usize], id: ChunkId) -> Result<u64> {
    if &header[..4] != MAGIC {
        return Err(Error::corrupt(format!("chunk {id}: bad magic")));
    }
    if header[4] != FORMAT_VERSION {
        return Err(Error::corrupt(format!(
            "chunk {id}: chunk file format version {}, this build reads version \
             {FORMAT_VERSION} only (written by a newer tomus?)",
            header[4]
        )));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[5..13]);
    let mut block = [0u8; 4];
    block.copy_from_slice(&header[13..17]);
    let block = u32::from_le_bytes(block);
    if block != BLOCK_SIZE {
        return Err(Error::corrupt(format!(
            "chunk {id}: block size {block}, expected {BLOCK_SIZE}"
        )));
    }
    Ok(u64::from_le_bytes(len))
}

/// Reads exactly `buf.len()` bytes at `pos`. A short file (truncated under the reader) or an
/// EIO (a bad sector) means this chunk's copy is damaged: `Corrupt`, so the chunk is
/// quarantined and repair copies it from another replica. Other errors stay I/O errors.
pub(super) fn read_at(file: &File, buf: &mut [u8], pos: u64, id: ChunkId) -> Result<()> {
    file.read_exact_at(buf, pos).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::corrupt(format!(
                "chunk {id}: file is truncated (short read of {} bytes at offset {pos})",
                buf.len()
            ))
        } else if e.raw_os_error() == Some(libc::EIO) {
            Error::corrupt(format!("chunk {id}: unreadable at offset {pos}: {e}"))
        } else {
            io_error(format_args!("reading chunk {id}"), e)
        }
    })
}

/// Header plus one checksum per block of `data`.
pub(super) fn encode_header(data: &[u8]) -> Vec<u8> {
    let blocks = data.len().div_ceil(BLOCK_SIZE as usize);
    let mut out = Vec::with_capacity(HEADER_LEN as usize + blocks * CRC_LEN as usize);
    out.extend_from_slice(MAGIC);
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&BLOCK_SIZE.to_le_bytes());
    for block in data.chunks(BLOCK_SIZE as usize) {
        out.extend_from_slice(&crc32c::crc32c(block).to_le_bytes());
    }
    out
}

/// The operator that appends a whole block to a CRC32C (built once).
pub(super) fn block_shift() -> checksum::Shift {
    static SHIFT: std::sync::OnceLock<checksum::Shift> = std::sync::OnceLock::new();
    *SHIFT.get_or_init(|| checksum::Shift::new(BLOCK_SIZE as usize))
}

/// The CRC32C of a chunk's `data` from the block checksums in its `header`: whole blocks
/// combined, a short last block checksummed again (at most 64 KiB).
pub(super) fn whole_crc(header: &[u8], data: &[u8]) -> u32 {
    let crcs = header.get(HEADER_LEN as usize..).unwrap_or_default();
    let mut crc = 0;
    for (block, c) in data
        .chunks(BLOCK_SIZE as usize)
        .zip(crcs.chunks_exact(CRC_LEN as usize))
    {
        crc = if block.len() == BLOCK_SIZE as usize {
            block_shift().combine(crc, u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        } else {
            crc32c::crc32c_append(crc, block)
        };
    }
    crc
}

/// Writes a new chunk file at `path` from its encoded header and data (not synced); returns
/// the open file and its size.
pub(super) fn write_chunk_file(path: &Path, header: &[u8], data: &[u8]) -> io::Result<(File, u64)> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(header)?;
    file.write_all(data)?;
    Ok((file, (header.len() + data.len()) as u64))
}
