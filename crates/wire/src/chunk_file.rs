//! The chunk file format, shared by the provider that writes chunk files and the clients on
//! its host that read them directly (short-circuit reads): magic `TCHK`, format version (u8),
//! data length (u64 LE), block size (u32 LE), one CRC32C (u32 LE) per block of data, then
//! the data. A chunk file lives at `<chunk dir>/<first two hex digits>/<32 hex digit id>`.

use std::path::{Path, PathBuf};

use tomus_metadata::ChunkId;

use crate::{checksum, Error, Result};

const MAGIC: &[u8; 4] = b"TCHK";
/// The chunk file format this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// Granularity of checksums: the smallest unit a read verifies.
pub const BLOCK_SIZE: u32 = 64 << 10;
pub const HEADER_LEN: u64 = 4 + 1 + 8 + 4;
pub const CRC_LEN: u64 = 4;

/// Where chunk `id` lives in the chunk directory `dir`.
pub fn chunk_path(dir: &Path, id: ChunkId) -> PathBuf {
    let name = id.to_string();
    dir.join(&name[..2]).join(name)
}

/// Size of the file holding `data_len` bytes of data.
pub fn file_len_for(data_len: u64) -> Option<u64> {
    data_len
        .div_ceil(u64::from(BLOCK_SIZE))
        .checked_mul(CRC_LEN)?
        .checked_add(HEADER_LEN)?
        .checked_add(data_len)
}

/// The data length of a chunk file of `file_len` bytes, if that size is possible: the file
/// is the header, 4 bytes per block and the data, so it holds ceil(body / (block + 4))
/// blocks.
pub fn data_len_for(file_len: u64) -> Option<u64> {
    let body = file_len.checked_sub(HEADER_LEN)?;
    let blocks = body.div_ceil(u64::from(BLOCK_SIZE) + CRC_LEN);
    let data_len = body.checked_sub(blocks * CRC_LEN)?;
    (file_len_for(data_len) == Some(file_len)).then_some(data_len)
}

/// Validates the fixed header and returns the data length.
pub fn parse_header(header: &[u8; HEADER_LEN as usize], id: ChunkId) -> Result<u64> {
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

/// Checks block `index` of chunk `id`, whose bytes are `data`, against its stored CRC32C.
pub fn check_block(id: ChunkId, index: u64, data: &[u8], stored: u32) -> Result<()> {
    if crc32c::crc32c(data) == stored {
        Ok(())
    } else {
        Err(Error::corrupt(format!(
            "chunk {id}: checksum mismatch in block {index}"
        )))
    }
}

/// Header plus one checksum per block of `data`.
pub fn encode_header(data: &[u8]) -> Vec<u8> {
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
pub fn block_shift() -> checksum::Shift {
    static SHIFT: std::sync::OnceLock<checksum::Shift> = std::sync::OnceLock::new();
    *SHIFT.get_or_init(|| checksum::Shift::new(BLOCK_SIZE as usize))
}

/// The CRC32C of a chunk's `data` from the block checksums in its `header`: whole blocks
/// combined, a short last block checksummed again (at most 64 KiB).
pub fn whole_crc(header: &[u8], data: &[u8]) -> u32 {
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

/// The file in a chunk directory holding the token of [`crate::LocalChunks`].
pub const TOKEN_FILE: &str = "local-read-token";

/// The inode of this process's network namespace, 0 where `/proc` does not say.
pub fn net_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}
