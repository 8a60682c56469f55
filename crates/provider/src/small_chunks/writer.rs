//! The writer's side of the log, owned by the group-commit thread: groups of puts and
//! deletes appended with one write and one sync, segments rolled over and removed.
//!
//! A new segment is created, its header written and synced, then the directory synced,
//! before any record goes in. A crash in between leaves a newest segment that is empty or
//! holds a torn header, so has no header: startup cuts it back to nothing as a torn tail,
//! removes it as a segment with nothing live, and appends go to a new segment.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::zeroed_ahead::ZeroedAhead;
use tomus_wire::{now_ms, Error, Result};

use super::format::{
    segment_header, segment_path, tombstone_header, RECORD_HEADER, SEGMENT_HEADER_LEN,
};
use super::index::{Loc, SegmentState, SharedIndex};
#[cfg(test)]
use super::TestHooks;
use super::FORMAT_VERSION;
use crate::group_commit::{append, append_zeroed, refill_zeros, GroupLog};
use crate::{io_error, sync_dir};

/// A chunk on its way to the log, its header already encoded.
pub(super) struct Put {
    pub(super) id: ChunkId,
    pub(super) header: [u8; RECORD_HEADER],
    pub(super) data: Bytes,
    pub(super) crc: u32,
}

/// What callers hand the writer.
pub(super) enum Op {
    Put(Put),
    Delete(Vec<ChunkId>),
}

/// A record the writer appends.
enum Record {
    Put(Put),
    Tombstone(ChunkId),
}

impl Record {
    fn len(&self) -> u64 {
        match self {
            Record::Put(put) => (RECORD_HEADER + put.data.len()) as u64,
            Record::Tombstone(_) => RECORD_HEADER as u64,
        }
    }
}

/// The index change a record makes once it is durable.
enum Change {
    Insert(ChunkId, Loc),
    Remove(ChunkId),
}
/// The segment being appended to.
pub(super) struct Segment {
    pub(super) number: u32,
    pub(super) file: Arc<File>,
    /// End of its valid records: where the next one goes.
    pub(super) len: u64,
}

/// The writer's side of the log, owned by the group-commit thread.
pub(super) struct Writer {
    pub(super) dir: PathBuf,
    pub(super) fsync: bool,
    pub(super) segment_size: u64,
    /// `None` until the first segment is created.
    pub(super) current: Option<Segment>,
    pub(super) next_segment: u32,
    pub(super) index: SharedIndex,
    /// Zeros written ahead of the current segment's records.
    pub(super) zeroed: ZeroedAhead,
    #[cfg(test)]
    pub(super) hooks: Arc<TestHooks>,
}

impl GroupLog<Op> for Writer {
    fn commit(&mut self, group: Vec<Op>) -> Result<()> {
        Writer::commit(self, group)
    }

    fn after_group(&mut self) {
        if let Some(segment) = &self.current {
            let log = "the small-chunk log";
            refill_zeros(
                &mut self.zeroed,
                &segment.file,
                segment.len,
                self.fsync,
                &log,
            );
        }
    }
}

impl Writer {
    /// Appends a group of records (one write and one sync per segment it touches, normally
    /// one), applies them to the index once they are durable, then removes segments that are
    /// no longer needed.
    pub(super) fn commit(&mut self, group: Vec<Op>) -> Result<()> {
        let records = self.records_for(group);
        let mut buf = Vec::with_capacity(
            records
                .iter()
                .map(Record::len)
                .sum::<u64>()
                .min(self.segment_size) as usize,
        );
        let mut changes = Vec::with_capacity(records.len());
        for record in records {
            let record_len = record.len();
            let full = match &self.current {
                None => true,
                Some(segment) => {
                    // A segment holding no record yet takes any record, however large.
                    let used = segment.len + buf.len() as u64;
                    used > SEGMENT_HEADER_LEN && used + record_len > self.segment_size
                }
            };
            if full {
                self.flush(&mut buf, &mut changes)?;
                self.roll()?;
            }
            let Some(segment) = &self.current else {
                return Err(Error::internal("small-chunk log has no segment"));
            };
            match record {
                Record::Put(put) => {
                    changes.push(Change::Insert(
                        put.id,
                        Loc {
                            segment: segment.number,
                            offset: segment.len + (buf.len() + RECORD_HEADER) as u64,
                            len: put.data.len() as u32,
                            crc: put.crc,
                            // Set once durable.
                            stored_ms: 0,
                        },
                    ));
                    buf.extend_from_slice(&put.header);
                    buf.extend_from_slice(&put.data);
                }
                Record::Tombstone(id) => {
                    changes.push(Change::Remove(id));
                    buf.extend_from_slice(&tombstone_header(id));
                }
            }
        }
        self.flush(&mut buf, &mut changes)?;
        self.remove_dead_segments();
        Ok(())
    }

    /// The records a group needs, in order: a chunk already held (or put earlier in the
    /// group) is not written again, and only held chunks get a tombstone.
    fn records_for(&self, group: Vec<Op>) -> Vec<Record> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        // Whether a chunk is held after the records so far.
        let mut held: HashMap<ChunkId, bool> = HashMap::new();
        let mut records = Vec::with_capacity(group.len());
        for op in group {
            match op {
                Op::Put(put) => {
                    let now = held
                        .entry(put.id)
                        .or_insert_with(|| index.chunks.contains_key(&put.id));
                    if !*now {
                        *now = true;
                        records.push(Record::Put(put));
                    }
                }
                Op::Delete(ids) => {
                    for id in ids {
                        let now = held
                            .entry(id)
                            .or_insert_with(|| index.chunks.contains_key(&id));
                        if *now {
                            *now = false;
                            records.push(Record::Tombstone(id));
                        }
                    }
                }
            }
        }
        records
    }

    /// Removes from disk, oldest first, the segments (except the current one) that hold no
    /// live chunk and no needed tombstone. Stops at the first failure, so a segment whose
    /// tombstones delete chunks in an older one never goes before it. A failure only costs
    /// space; it is retried after the next commit.
    pub(super) fn remove_dead_segments(&mut self) {
        let current = self.current.as_ref().map(|s| s.number);
        loop {
            let dead = self
                .index
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .dead_segment(current);
            let Some(number) = dead else {
                return;
            };
            let path = segment_path(&self.dir, number);
            let removed = match fs::remove_file(&path) {
                Ok(()) if self.fsync => sync_dir(&self.dir),
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = removed {
                tracing::warn!("cannot remove dead segment {}: {e}", path.display());
                return;
            }
            tracing::debug!("removed dead segment {}", path.display());
            self.index
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .forget_segment(number);
        }
    }

    /// Appends `buf` to the current segment, syncs it, and applies its `changes` to the index.
    fn flush(&mut self, buf: &mut Vec<u8>, changes: &mut Vec<Change>) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let Some(segment) = &mut self.current else {
            return Err(Error::internal("small-chunk log has no segment"));
        };
        append_zeroed(
            &mut self.zeroed,
            &segment.file,
            segment.len,
            buf,
            self.fsync,
        )
        .map_err(|e| {
            io_error(
                format_args!(
                    "appending to {}",
                    segment_path(&self.dir, segment.number).display()
                ),
                e,
            )
        })?;
        #[cfg(test)]
        if self.fsync {
            use std::sync::atomic::Ordering::Relaxed;
            self.hooks.syncs.fetch_add(1, Relaxed);
            let delay = self.hooks.sync_delay_us.load(Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        segment.len += buf.len() as u64;
        buf.clear();
        let number = segment.number;
        let stored_ms = now_ms();
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        for change in changes.drain(..) {
            match change {
                Change::Insert(id, loc) => index.insert(id, Loc { stored_ms, ..loc }),
                Change::Remove(id) => index.remove(id, number),
            }
        }
        Ok(())
    }

    /// Starts a new segment and makes its creation durable.
    fn roll(&mut self) -> Result<()> {
        if let Some(full) = &self.current {
            // Best effort: the zeros written ahead of its records are not needed any more
            // (startup passes over them where they are left).
            if let Err(e) = full.file.set_len(full.len) {
                tracing::debug!("cannot cut the zeros off a full small-chunk segment: {e}");
            }
        }
        self.zeroed.forget();
        let number = self.next_segment;
        // Moves on even if this attempt fails, so a retry does not trip over a leftover file.
        self.next_segment = number
            .checked_add(1)
            .ok_or_else(|| Error::internal("small-chunk log: out of segment numbers"))?;
        let path = segment_path(&self.dir, number);
        let context = |e| io_error(format_args!("creating {}", path.display()), e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(context)?;
        // The header is durable before the segment's name is, and before any record.
        let header = segment_header(FORMAT_VERSION);
        if let Err(e) = append(&file, 0, &header, self.fsync).and_then(|()| {
            if self.fsync {
                sync_dir(&self.dir)
            } else {
                Ok(())
            }
        }) {
            // Best effort: a file left behind is an empty or torn segment, which startup
            // cuts and removes.
            let _ = fs::remove_file(&path);
            return Err(context(e));
        }
        let file = Arc::new(file);
        self.index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .segments
            .insert(number, SegmentState::new(file.clone()));
        self.current = Some(Segment {
            number,
            file,
            len: SEGMENT_HEADER_LEN,
        });
        Ok(())
    }
}
