//! Startup: the index rebuilt from every segment, and what a crash or damage left handled.
//!
//! Startup scans the segments in order and rebuilds the index, verifying every record (chunks
//! indexed at startup count as stored when their segment was last modified):
//! - a whole record whose checksum fails, followed by an intact record, was damaged on disk
//!   (not torn by a crash): it is skipped with an error, its chunk not indexed, and the scan
//!   goes on;
//! - otherwise, in the newest segment, the first bad record (torn or damaged) and everything
//!   after it is cut off with a warning: that is where a crash in the middle of an append
//!   leaves a torn record, and new appends continue from there (in a new segment if that one
//!   has no header);
//! - in an older segment (written completely and synced before the next one was started), a
//!   bad record is logged as an error and indexing of that segment stops there, without
//!   changing the file: its chunks from that record on read as `NotFound` here and are served
//!   by their replicas on other providers. Such a segment is never removed automatically.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use tomus_metadata::ChunkId;
use tomus_wire::{Error, Result};

use super::format::{
    record_crc, segment_format, segment_number, segment_path, tombstone_crc, RECORD_HEADER,
    RECORD_MAGIC, SEGMENT_HEADER_LEN, TOMBSTONE_MAGIC,
};
use super::index::{Index, Loc, SegmentState};
use super::writer::Segment;
use super::SMALL_CHUNK_MAX;
use crate::chunk_store::mtime_ms;
use crate::io_error;
use tomus_wire::zeroed_ahead::{drop_torn_tail, zero_tail};

/// Loads the index from every segment in `dir`; returns it, the segment to append to (the
/// newest, if it has a header) and the number for the next one. Checks the format of every
/// segment before changing any.
pub(super) fn scan(dir: &Path, fsync: bool) -> Result<(Index, Option<Segment>, u32)> {
    let fail = |e| {
        io_error(
            format_args!("opening the small-chunk log in {}", dir.display()),
            e,
        )
    };
    let mut numbers = Vec::new();
    for entry in fs::read_dir(dir).map_err(fail)? {
        if let Some(n) = segment_number(&entry.map_err(fail)?.file_name().to_string_lossy()) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    let mut segments = Vec::with_capacity(numbers.len());
    for (i, &number) in numbers.iter().enumerate() {
        let newest = i + 1 == numbers.len();
        let path = segment_path(dir, number);
        let file = OpenOptions::new()
            .read(true)
            .write(newest)
            .open(&path)
            .map_err(fail)?;
        let headed = segment_format(&file, &path)?;
        segments.push((number, path, Arc::new(file), headed, newest));
    }
    let mut index = Index::default();
    let mut current = None;
    for (number, path, file, headed, newest) in segments {
        index
            .segments
            .insert(number, SegmentState::new(file.clone()));
        let start = if headed { SEGMENT_HEADER_LEN } else { 0 };
        let (valid, damage) =
            scan_segment(&file, &path, number, start, &mut index).map_err(fail)?;
        // Zeros alone after the records: space written ahead of them, not damage.
        let damage = match damage {
            Some(_) if !newest && zero_tail(&file, valid).map_err(fail)? => None,
            damage => damage,
        };
        if let Some(damage) = damage {
            if newest {
                drop_torn_tail(&file, &path, "small-chunk log", valid, &damage, fsync)
                    .map_err(fail)?;
            } else {
                if let Some(segment) = index.segments.get_mut(&number) {
                    segment.damaged = true;
                }
                let file_len = file.metadata().map_err(fail)?.len();
                tracing::error!(
                    "small-chunk log {}: {damage} at offset {valid}; the {} bytes from there \
                     on are not indexed (their chunks must be read from other replicas)",
                    path.display(),
                    file_len - valid
                );
            }
        }
        // A segment without a header is read, never appended to: the next append starts a
        // new segment (and this one is removed once nothing in it is needed).
        if newest && headed {
            current = Some(Segment {
                number,
                file,
                len: valid,
            });
        }
    }
    let next = match numbers.last() {
        None => 0,
        Some(&n) => n
            .checked_add(1)
            .ok_or_else(|| Error::internal("small-chunk log: out of segment numbers"))?,
    };
    Ok((index, current, next))
}

/// What the scan found at one position of a segment.
pub(super) enum Scanned {
    /// An intact chunk record (its data in the scan buffer).
    Chunk {
        id: ChunkId,
        len: u32,
        crc: u32,
    },
    Tombstone(ChunkId),
    /// A whole record whose checksum fails: damage inside the segment if an intact record
    /// follows it, else a torn write.
    BadChecksum {
        id: ChunkId,
    },
    /// Not a record: nothing after this position can be framed.
    Damage(String),
}

/// Indexes the records of one segment, from `start` (after its header), up to the first bad
/// one. Returns the length of the
/// intact records and, if it stopped early, why. A record whose checksum fails but which is
/// followed by an intact one (a bit flipped on disk, not a torn append) is skipped with an
/// error instead: its chunk is not indexed, the records after it are.
fn scan_segment(
    file: &File,
    path: &Path,
    number: u32,
    start: u64,
    index: &mut Index,
) -> io::Result<(u64, Option<String>)> {
    let meta = file.metadata()?;
    let file_len = meta.len();
    let stored_ms = mtime_ms(&meta);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    reader.seek(SeekFrom::Start(start))?;
    let mut data = Vec::with_capacity(SMALL_CHUNK_MAX);
    let mut pos = start;
    // A record whose checksum failed, passed over until an intact record after it shows the
    // framing held.
    let mut suspect: Option<(u64, String)> = None;
    while pos < file_len {
        let scanned = scan_record(&mut reader, file_len - pos, &mut data)?;
        let size = match &scanned {
            Scanned::Chunk { len, .. } => RECORD_HEADER as u64 + u64::from(*len),
            Scanned::Tombstone(_) => RECORD_HEADER as u64,
            Scanned::BadChecksum { id } => {
                if suspect.is_some() {
                    // Two in a row: the framing is not to be trusted.
                    break;
                }
                suspect = Some((pos, format!("checksum mismatch (chunk {id})")));
                pos += RECORD_HEADER as u64 + data.len() as u64;
                continue;
            }
            Scanned::Damage(why) => {
                let (at, why) = suspect.unwrap_or((pos, why.clone()));
                return Ok((at, Some(why)));
            }
        };
        if let Some((at, why)) = suspect.take() {
            tracing::error!(
                "small-chunk log {}: {why} at offset {at}, between intact records; skipping \
                 that record (its chunk must be read from other replicas)",
                path.display()
            );
        }
        match scanned {
            // A chunk stored twice keeps its first copy.
            Scanned::Chunk { id, len, crc } => index.insert(
                id,
                Loc {
                    segment: number,
                    offset: pos + RECORD_HEADER as u64,
                    len,
                    crc,
                    stored_ms,
                },
            ),
            Scanned::Tombstone(id) => index.remove(id, number),
            Scanned::BadChecksum { .. } | Scanned::Damage(_) => {}
        }
        pos += size;
    }
    Ok(match suspect {
        Some((at, why)) => (at, Some(why)),
        None => (pos, None),
    })
}

/// Reads the record at the reader's position, `remaining` bytes before the end of the
/// segment; a chunk's data (or a damaged record's) is left in `data`.
pub(super) fn scan_record(
    reader: &mut impl Read,
    remaining: u64,
    data: &mut Vec<u8>,
) -> io::Result<Scanned> {
    if remaining < RECORD_HEADER as u64 {
        return Ok(Scanned::Damage(format!(
            "{remaining} bytes of a record header"
        )));
    }
    let mut header = [0u8; RECORD_HEADER];
    reader.read_exact(&mut header)?;
    let field = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let len = field(4);
    let crc = field(8);
    let mut id = [0u8; 16];
    id.copy_from_slice(&header[12..]);
    let id = ChunkId(u128::from_le_bytes(id));
    data.clear();
    if &header[..4] == TOMBSTONE_MAGIC {
        return Ok(match (len, crc == tombstone_crc(id)) {
            (0, true) => Scanned::Tombstone(id),
            (0, false) => Scanned::BadChecksum { id },
            _ => Scanned::Damage(format!("tombstone with length {len}")),
        });
    }
    if &header[..4] != RECORD_MAGIC {
        return Ok(Scanned::Damage("bad record magic".into()));
    }
    if len as usize >= SMALL_CHUNK_MAX {
        return Ok(Scanned::Damage(format!("impossible record length {len}")));
    }
    let left = remaining - RECORD_HEADER as u64;
    if u64::from(len) > left {
        return Ok(Scanned::Damage(format!(
            "record of {len} bytes with only {left} bytes left"
        )));
    }
    data.resize(len as usize, 0);
    reader.read_exact(data)?;
    Ok(if record_crc(id, data) == crc {
        Scanned::Chunk { id, len, crc }
    } else {
        Scanned::BadChecksum { id }
    })
}
