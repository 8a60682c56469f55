//! The publication journal: where a group of publications becomes durable before it is in
//! redb.
//!
//! A redb commit of one small publication group cost 120-157 µs of CPU and 330-403 µs of wall
//! time on this project's 2-core VM, where one append and fdatasync of a small record takes
//! about 115 µs; under small concurrent appends the committer spent most of its time in those
//! commits (1.7 versions each). So a group is appended here and synced, the writers are told,
//! and the groups reach redb later, many in one transaction (see `Store::publish`).
//!
//! Record: `[u32 LE MAGIC][u32 LE payload length][u32 LE CRC32C of payload][payload]`, the
//! payload bincode((sequence number, publications)). Sequence numbers grow by one per record
//! and never restart; redb's META row `journal_applied` says up to which one redb holds the
//! groups, so replay skips what is there already. The file keeps written zeros ahead of its
//! records (a sync inside them writes the record alone, not the file's new size as well);
//! opening cuts them off with whatever a crash tore.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tomus_wire::log_file::still_linked;
use tomus_wire::zeroed_ahead::{drop_torn_tail, ZeroedAhead};
use tomus_wire::{Error, Result};

use super::versions::Publication;

const MAGIC: u32 = 0x7075_626a; // "pubj"
const HEADER: u64 = 12;
/// A record larger than this is damage, not a record (a group is a few KiB).
const MAX_RECORD: u32 = 64 << 20;
/// Past this size the journal starts again empty once redb durably holds all of it.
pub(super) const RESET_AFTER: u64 = 8 << 20;

/// A journaled group of publications: its sequence number and the publications.
pub(super) type Group = (u64, Vec<Publication>);

pub(super) struct Journal {
    file: File,
    path: PathBuf,
    /// End of the valid records.
    end: u64,
    /// The zeros written ahead of the records.
    zeroed: ZeroedAhead,
    /// Sequence number of the last record appended or replayed (0: none).
    pub(super) last_seq: u64,
}

/// An I/O error of the journal at `path`, `NoSpace` for a full disk.
fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    tomus_wire::io_error(
        format_args!("publication journal {}: {what}", path.display()),
        e,
    )
}

impl Journal {
    /// Opens (or creates) the journal at `path` and returns the groups recorded after
    /// sequence number `applied`, in order. A torn or damaged tail is cut off. No zeros are
    /// written ahead yet: the caller empties the journal or [`Journal::refill`]s it.
    pub(super) fn open(path: &Path, applied: u64) -> Result<(Journal, Vec<Group>)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err(path, "open", e))?;
        let len = file.metadata().map_err(|e| io_err(path, "stat", e))?.len();
        let mut groups = Vec::new();
        let mut at = 0u64;
        let mut prev = 0u64;
        let damage = loop {
            match read_record(&file, at, len) {
                Ok(Some((next, (seq, group)))) => {
                    if seq <= prev {
                        break Some(format!("sequence number {seq} after {prev}"));
                    }
                    prev = seq;
                    if seq > applied {
                        groups.push((seq, group));
                    }
                    at = next;
                }
                Ok(None) => break None,
                Err(why) => break Some(why),
            }
        };
        if at < len {
            let damage = damage.unwrap_or_else(|| "data after an empty record header".into());
            drop_torn_tail(&file, path, "publication journal", at, &damage, true)
                .map_err(|e| io_err(path, "cut", e))?;
        }
        let journal = Journal {
            file,
            path: path.to_path_buf(),
            end: at,
            zeroed: ZeroedAhead::default(),
            last_seq: applied.max(prev),
        };
        Ok((journal, groups))
    }

    /// Appends `group` as record `seq` and syncs it. On failure nothing after `end` counts:
    /// the next append writes over it. A journal removed while open fails every append.
    pub(super) fn append(&mut self, seq: u64, group: &[Publication]) -> Result<()> {
        let payload = bincode::serialize(&(seq, group))
            .map_err(|e| Error::internal(format!("encoding a publication group: {e}")))?;
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_RECORD)
            .ok_or_else(|| Error::internal("a publication group too large for the journal"))?;
        let mut record = Vec::with_capacity(HEADER as usize + payload.len());
        record.extend_from_slice(&MAGIC.to_le_bytes());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        self.file
            .write_all_at(&record, self.end)
            .and_then(|()| self.file.sync_data())
            .and_then(|()| still_linked(&self.file))
            .map_err(|e| io_err(&self.path, "append", e))?;
        self.end += record.len() as u64;
        self.last_seq = seq;
        Ok(())
    }

    /// Bytes of records.
    pub(super) fn len(&self) -> u64 {
        self.end
    }

    /// Empties the journal: only once redb durably holds every group in it.
    pub(super) fn reset(&mut self) -> Result<()> {
        self.file
            .set_len(0)
            .map_err(|e| io_err(&self.path, "reset", e))?;
        // Cut: appends start again at 0, whether or not the sync below succeeds (appending
        // past a hole would hide every record after it from replay).
        self.end = 0;
        self.zeroed.forget();
        self.file
            .sync_all()
            .map_err(|e| io_err(&self.path, "reset", e))?;
        self.refill();
        Ok(())
    }

    /// Writes and syncs zeros ahead of the records once less than half of them is left
    /// (best effort: without them appends just extend the file).
    pub(super) fn refill(&mut self) {
        let log = self.path.display();
        self.zeroed
            .refill(&self.file, self.end, &log, |f| f.sync_data());
    }
}

/// The record at `at` with the offset after it; `Ok(None)` at the end of the records (end of
/// file or zeros), `Err` with what is wrong when what follows is not a whole record.
fn read_record(
    file: &File,
    at: u64,
    len: u64,
) -> std::result::Result<Option<(u64, Group)>, String> {
    if at + HEADER > len {
        return if at == len {
            Ok(None)
        } else {
            Err("a record header cut short".into())
        };
    }
    let mut header = [0u8; HEADER as usize];
    file.read_exact_at(&mut header, at)
        .map_err(|e| format!("reading: {e}"))?;
    let word =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let (magic, size, crc) = (word(0), word(4), word(8));
    if magic == 0 && size == 0 && crc == 0 {
        return Ok(None);
    }
    if magic != MAGIC {
        return Err("not a record".into());
    }
    if size > MAX_RECORD || at + HEADER + u64::from(size) > len {
        return Err(format!("a record of {size} bytes cut short"));
    }
    let mut payload = vec![0u8; size as usize];
    file.read_exact_at(&mut payload, at + HEADER)
        .map_err(|e| format!("reading: {e}"))?;
    if crc32c::crc32c(&payload) != crc {
        return Err("a record whose checksum does not match".into());
    }
    let group: Group = bincode::deserialize(&payload)
        .map_err(|e| format!("a record that does not decode: {e}"))?;
    Ok(Some((at + HEADER + u64::from(size), group)))
}
