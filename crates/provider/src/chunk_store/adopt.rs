//! Short-circuit writes, the provider's side: a client on this host writes a chunk file
//! under a temporary name in this store's directory (one copy, from its buffer into the
//! page cache) and asks the store to adopt it, instead of sending the bytes through the
//! provider's socket (a copy into the socket, one out of it, one into the file). The store
//! checks the file's header and size and the sender's CRC32C against the block checksums
//! the file carries, then gives the file its chunk name and syncs it exactly as a chunk it
//! wrote itself: the durability promise stays the provider's.
//!
//! The data is not read back: the client computed the block checksums from the very buffer
//! it wrote, as a provider does from the bytes it received, and every later read and scrub
//! checks every block. A temporary file left by a client that died is removed by the
//! provider's hourly sweep of idle temporaries, or at its next start.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::{block_shift, chunk_path};
use tomus_wire::{checksum, Error, Result};

use super::files::{Inner, TMP_SUFFIX};
use super::format::{file_len_for, parse_header, read_at, BLOCK_SIZE, CRC_LEN, HEADER_LEN};
use super::to_usize;
use crate::io_error;
use crate::small_chunks::SMALL_CHUNK_MAX;

impl Inner {
    /// Adopts the file `name` (a temporary name for chunk `id` in the chunk's fan-out
    /// directory) as chunk `id`, whose data has the CRC32C `sent_crc`; returns the data
    /// length. Whether the chunk is new is counted as for a put.
    pub(super) fn adopt(&self, id: ChunkId, name: &str, sent_crc: u32) -> Result<u64> {
        let prefix = format!(".{id}.");
        if name.contains('/') || !name.starts_with(&prefix) || !name.ends_with(TMP_SUFFIX) {
            return Err(Error::invalid(format!(
                "{name:?} is not a temporary file of chunk {id}"
            )));
        }
        let tmp = chunk_path(&self.dir, id).with_file_name(name);
        // Not through a symbolic link (the chunk's name would then be a link to elsewhere),
        // and without waiting for a writer should the name be a FIFO (refused below).
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&tmp);
        let file = file.map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Error::not_found(format!("no file {name} to adopt as chunk {id}"))
            } else {
                io_error(format_args!("opening {name}"), e)
            }
        })?;
        let checked = self.check_written(&file, id, sent_crc);
        let data_len = match checked {
            Ok(len) => len,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let file_len = file_len_for(data_len).unwrap_or(0);
        self.install(id, &tmp, &file, file_len)?;
        Ok(data_len)
    }

    /// Checks a chunk file written by a client: a regular file with no other name, its
    /// header, size (a chunk file, not one for the small-chunk log) and the whole data's
    /// CRC32C, combined from the block checksums, against the sender's. Returns the data
    /// length.
    fn check_written(&self, file: &File, id: ChunkId, sent_crc: u32) -> Result<u64> {
        let meta = file
            .metadata()
            .map_err(|e| io_error(format_args!("adopting chunk {id}"), e))?;
        if !meta.is_file() || meta.nlink() != 1 {
            return Err(Error::invalid(format!(
                "chunk {id}: only a regular file with no other name is adopted"
            )));
        }
        let file_len = meta.len();
        let mut header = [0u8; HEADER_LEN as usize];
        read_at(file, &mut header, 0, id)?;
        let data_len = parse_header(&header, id)?;
        if file_len_for(data_len) != Some(file_len) {
            return Err(Error::corrupt(format!(
                "chunk {id}: a file of {file_len} bytes cannot hold {data_len} bytes of data"
            )));
        }
        if data_len < SMALL_CHUNK_MAX as u64 {
            return Err(Error::invalid(format!(
                "chunk {id}: {data_len} bytes belong in the small-chunk log, not a file"
            )));
        }
        let block = u64::from(BLOCK_SIZE);
        let blocks = data_len.div_ceil(block);
        let mut crcs = vec![0u8; to_usize(blocks * CRC_LEN, id)?];
        read_at(file, &mut crcs, HEADER_LEN, id)?;
        let mut crc = 0u32;
        for (b, c) in crcs.chunks_exact(CRC_LEN as usize).enumerate() {
            let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let len = (data_len - b as u64 * block).min(block);
            crc = if len == block {
                block_shift().combine(crc, stored)
            } else {
                crc32c::crc32c_combine(crc, stored, len as usize)
            };
        }
        if crc != sent_crc {
            return Err(checksum::damaged(format!("chunk {id}"), crc, sent_crc));
        }
        Ok(data_len)
    }
}
