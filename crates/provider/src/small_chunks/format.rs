//! Segment files and the records in them.
//!
//! A segment starts with a header stating its format version ([`FORMAT_VERSION`]), then holds
//! records. The header is itself a tombstone record (see below) of a chunk id no chunk has:
//! the bytes `TOMUS-SMALL-` followed by the format version (u32), as a u128 LE. Builds from
//! before the header replay it as the deletion of nothing, so after a downgrade they read the
//! segment instead of taking an unknown header for damage (which in the newest segment means
//! cutting it off). Its layout is the same in every format. At startup every segment's header
//! is checked before anything is changed on disk: a segment of another format makes the open
//! fail with an `Internal` error naming the file, the version found and the one this build
//! reads, leaving all segments as they are.
//!
//! Segments written before the header existed start with an ordinary record; they are format
//! 1 and are read as they are, not rewritten: a full segment is immutable and goes away once
//! its chunks are deleted, so rewriting up to 256 MiB each would cost I/O for nothing. Such a
//! segment is not appended to either: if the newest segment has no header (its torn tail cut
//! off as below), the first append starts a new segment, so every segment this build writes
//! to carries its format.
//!
//! Record, all integers little-endian:
//!
//! ```text
//! [magic "TSML"][data length: u32][CRC32C over (chunk id bytes ++ data): u32][chunk id: u128][data]
//! ```
//!
//! The checksum covers the id, so a record can only be read back as the chunk it was written
//! for; the length is checked by the checksum too (a damaged length frames different bytes).
//!
//! Deleting a chunk appends a tombstone, a bare header with magic `TDEL`, length 0 and a
//! CRC32C over (chunk id bytes ++ "TDEL"); replay drops the chunk when it meets it. A chunk
//! stored again after its tombstone gets a new record, which replay meets later. A segment
//! other than the one appended to is removed from disk once none of its chunks is live and
//! none of its tombstones is still needed (they are, while the segment holding the chunk they
//! delete exists: removing them first would bring that chunk back at the next start).
//!
//! [`FORMAT_VERSION`]: crate::small_chunks::FORMAT_VERSION

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tomus_metadata::ChunkId;
use tomus_wire::{Error, Result};

use super::FORMAT_VERSION;
use crate::io_error;

pub(super) const RECORD_MAGIC: &[u8; 4] = b"TSML";
pub(super) const TOMBSTONE_MAGIC: &[u8; 4] = b"TDEL";
pub(super) const RECORD_HEADER: usize = 4 + 4 + 4 + 16;
/// The first bytes of the chunk id whose tombstone is a segment header; the format version
/// (u32 LE) follows.
const SEGMENT_HEADER_TAG: &[u8; 12] = b"TOMUS-SMALL-";
/// A segment header is one tombstone record.
pub(super) const SEGMENT_HEADER_LEN: u64 = RECORD_HEADER as u64;
const SEGMENT_PREFIX: &str = "small-";
const SEGMENT_SUFFIX: &str = ".log";

pub(super) fn record_crc(id: ChunkId, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&id.0.to_le_bytes()), data)
}

/// Differs from the checksum of an empty chunk's record, so neither reads as the other.
pub(super) fn tombstone_crc(id: ChunkId) -> u32 {
    record_crc(id, TOMBSTONE_MAGIC)
}

pub(super) fn tombstone_header(id: ChunkId) -> [u8; RECORD_HEADER] {
    let mut header = [0u8; RECORD_HEADER];
    header[..4].copy_from_slice(TOMBSTONE_MAGIC);
    // Length 0: the header is the whole record.
    header[8..12].copy_from_slice(&tombstone_crc(id).to_le_bytes());
    header[12..].copy_from_slice(&id.0.to_le_bytes());
    header
}

/// The chunk id whose tombstone is the header of a segment of format `version`.
pub(super) fn header_id(version: u32) -> ChunkId {
    let mut id = [0u8; 16];
    id[..12].copy_from_slice(SEGMENT_HEADER_TAG);
    id[12..].copy_from_slice(&version.to_le_bytes());
    ChunkId(u128::from_le_bytes(id))
}

/// The header of a segment of format `version`.
pub(super) fn segment_header(version: u32) -> [u8; RECORD_HEADER] {
    tombstone_header(header_id(version))
}

/// The format a segment's first `RECORD_HEADER` bytes state, if they are an intact header.
pub(super) fn header_version(first: &[u8; RECORD_HEADER]) -> Option<u32> {
    let mut id = [0u8; 16];
    id.copy_from_slice(&first[12..]);
    let version = u32::from_le_bytes([id[12], id[13], id[14], id[15]]);
    (id[..12] == SEGMENT_HEADER_TAG[..] && *first == segment_header(version)).then_some(version)
}

/// Whether the segment in `file` starts with a header; an error for a format this build does
/// not read. Reads only.
pub(super) fn segment_format(file: &File, path: &Path) -> Result<bool> {
    let fail = |e| io_error(format_args!("reading {}", path.display()), e);
    let len = file.metadata().map_err(fail)?.len();
    if len < SEGMENT_HEADER_LEN {
        return Ok(false);
    }
    let mut first = [0u8; RECORD_HEADER];
    file.read_exact_at(&mut first, 0).map_err(fail)?;
    match header_version(&first) {
        None => Ok(false),
        Some(FORMAT_VERSION) => Ok(true),
        Some(version) => Err(Error::internal(format!(
            "small-chunk log segment {}: format version {version}, this build reads format \
             version {FORMAT_VERSION} (and segments without a format header, which are version \
             1); written by a newer tomus? No segment was changed",
            path.display()
        ))),
    }
}

pub(super) fn segment_path(dir: &Path, number: u32) -> PathBuf {
    dir.join(format!("{SEGMENT_PREFIX}{number:06}{SEGMENT_SUFFIX}"))
}

/// The segment number in a file name like `small-000042.log`.
pub(super) fn segment_number(name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
