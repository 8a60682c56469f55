//! Reading and writing chunk files; the format itself ([`tomus_wire::chunk_file`]) is
//! shared with the clients that read chunk files of a provider on their host directly.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use tomus_metadata::ChunkId;
use tomus_wire::{Error, Result};

#[cfg(test)]
pub(super) use tomus_wire::chunk_file::FORMAT_VERSION;
pub(super) use tomus_wire::chunk_file::{
    block_shift, data_len_for, encode_header, file_len_for, parse_header, whole_crc, BLOCK_SIZE,
    CRC_LEN, HEADER_LEN,
};

use crate::io_error;

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

/// Writes a new chunk file at `path` from its encoded header and data (not synced); returns
/// the open file and its size.
pub(super) fn write_chunk_file(path: &Path, header: &[u8], data: &[u8]) -> io::Result<(File, u64)> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(header)?;
    file.write_all(data)?;
    Ok((file, (header.len() + data.len()) as u64))
}
