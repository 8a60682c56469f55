//! Small chunks (shorter than [`SMALL_CHUNK_MAX`]) in an append-only log instead of one file
//! each: storing one costs a share of a group commit's single fdatasync, not a file creation,
//! an fdatasync and a directory fsync.
//!
//! The log is a series of segment files `<chunk dir>/small-NNNNNN.log` (NNNNNN: the segment
//! number, zero-padded, increasing). Appends go to the newest segment; a record that would take
//! it past the segment size (256 MiB) starts a new one. Creating a segment costs one directory
//! fsync; appends cost none. Segments are created when the first small chunk arrives, so a
//! store holding only large chunks has none.
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
//! other than the newest is removed from disk once none of its chunks is live and none of its
//! tombstones is still needed (they are, while the segment holding the chunk they delete
//! exists: removing them first would bring that chunk back at the next start).
//!
//! Writes go through a [`GroupCommit`] writer: the chunks of concurrent callers are appended
//! with one write, then synced with one fdatasync (when fsync is enabled), and only then are
//! they indexed and acknowledged. A chunk id already in the log is not written again (ids are
//! random and chunks immutable: the same id means the same content, e.g. a retried write).
//!
//! Reads look the chunk up in an in-memory index (id -> segment, data offset, length,
//! checksum), read the whole record and verify it before returning any of it.
//!
//! Startup scans the segments in order and rebuilds the index, verifying every record (chunks
//! indexed at startup count as stored when their segment was last modified):
//! - a whole record whose checksum fails, followed by an intact record, was damaged on disk
//!   (not torn by a crash): it is skipped with an error, its chunk not indexed, and the scan
//!   goes on;
//! - otherwise, in the newest segment, the first bad record (torn or damaged) and everything
//!   after it is cut off with a warning: that is where a crash in the middle of an append
//!   leaves a torn record, and new appends continue from there;
//! - in an older segment (written completely and synced before the next one was started), a
//!   bad record is logged as an error and indexing of that segment stops there, without
//!   changing the file: its chunks from that record on read as `NotFound` here and are served
//!   by their replicas on other providers. Such a segment is never removed automatically.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{ChunkEntry, Error, Result};

use crate::chunk_store::{check_range, mtime_ms};
use crate::group_commit::{append, drop_torn_tail, GroupCommit};
use crate::{io_error, sync_dir};
use tomus_wire::now_ms;

/// Chunks strictly shorter than this go to the log; others get a file of their own.
pub const SMALL_CHUNK_MAX: usize = 64 << 10;
/// Size at which the log moves on to a new segment.
pub const SEGMENT_SIZE: u64 = 256 << 20;
const RECORD_MAGIC: &[u8; 4] = b"TSML";
const TOMBSTONE_MAGIC: &[u8; 4] = b"TDEL";
const RECORD_HEADER: usize = 4 + 4 + 4 + 16;
const SEGMENT_PREFIX: &str = "small-";
const SEGMENT_SUFFIX: &str = ".log";

/// Where a chunk's record is.
#[derive(Clone, Copy, Debug)]
struct Loc {
    segment: u32,
    /// Offset of the data in the segment; the record header is just before it.
    offset: u64,
    len: u32,
    crc: u32,
    /// When it was stored (Unix ms); for chunks indexed at startup, when their segment was
    /// last modified (never earlier than the real time).
    stored_ms: u64,
}

/// A segment file and what its removal waits for.
struct SegmentState {
    /// Open for reading.
    file: Arc<File>,
    /// Indexed chunks whose record is in this segment.
    live: u64,
    /// Other segments holding records that tombstones in this one delete.
    kills: HashSet<u32>,
    /// Startup found damage in it: left on disk for an operator, never removed.
    damaged: bool,
}

impl SegmentState {
    fn new(file: Arc<File>) -> Self {
        SegmentState {
            file,
            live: 0,
            kills: HashSet::new(),
            damaged: false,
        }
    }
}

#[derive(Default)]
struct Index {
    /// Ordered, so chunks can be listed by id.
    chunks: BTreeMap<ChunkId, Loc>,
    segments: BTreeMap<u32, SegmentState>,
    /// Size of the indexed records (headers included).
    bytes: u64,
}

impl Index {
    /// Indexes a chunk unless it already is (a second copy of a record changes nothing).
    fn insert(&mut self, id: ChunkId, loc: Loc) {
        if let Entry::Vacant(slot) = self.chunks.entry(id) {
            slot.insert(loc);
            self.bytes += RECORD_HEADER as u64 + u64::from(loc.len);
            if let Some(segment) = self.segments.get_mut(&loc.segment) {
                segment.live += 1;
            }
        }
    }

    /// Drops chunk `id` for a tombstone in segment `tombstone`.
    fn remove(&mut self, id: ChunkId, tombstone: u32) {
        let Some(loc) = self.chunks.remove(&id) else {
            return;
        };
        self.bytes -= RECORD_HEADER as u64 + u64::from(loc.len);
        if let Some(segment) = self.segments.get_mut(&loc.segment) {
            segment.live = segment.live.saturating_sub(1);
        }
        if loc.segment != tombstone {
            if let Some(segment) = self.segments.get_mut(&tombstone) {
                segment.kills.insert(loc.segment);
            }
        }
    }

    /// A segment other than `current` that nothing needs any more, if there is one.
    fn dead_segment(&self, current: Option<u32>) -> Option<u32> {
        self.segments
            .iter()
            .find(|(&n, s)| Some(n) != current && s.live == 0 && s.kills.is_empty() && !s.damaged)
            .map(|(&n, _)| n)
    }

    /// Forgets a segment whose file is gone.
    fn forget_segment(&mut self, number: u32) {
        self.segments.remove(&number);
        for segment in self.segments.values_mut() {
            segment.kills.remove(&number);
        }
    }
}

type SharedIndex = Arc<RwLock<Index>>;

/// A chunk on its way to the log, its header already encoded.
struct Put {
    id: ChunkId,
    header: [u8; RECORD_HEADER],
    data: Bytes,
    crc: u32,
}

/// What callers hand the writer.
enum Op {
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

pub struct SmallChunks {
    dir: PathBuf,
    index: SharedIndex,
    writer: GroupCommit<Op>,
    #[cfg(test)]
    hooks: Arc<TestHooks>,
}

/// Lets tests count syncs and make them slower (a cheap fsync, as on tmpfs, leaves little to
/// group).
#[cfg(test)]
#[derive(Default)]
struct TestHooks {
    syncs: std::sync::atomic::AtomicU64,
    sync_delay_us: std::sync::atomic::AtomicU64,
}

impl SmallChunks {
    /// Opens the log in `dir` (which must exist), rebuilding the index from its segments, and
    /// starts its writer thread. Blocking.
    pub fn open(dir: &Path, fsync: bool, segment_size: u64) -> Result<Self> {
        let (index, current, next_segment) = scan(dir, fsync).map_err(|e| {
            io_error(
                format_args!("opening the small-chunk log in {}", dir.display()),
                e,
            )
        })?;
        let index = Arc::new(RwLock::new(index));
        #[cfg(test)]
        let hooks = Arc::new(TestHooks::default());
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            fsync,
            segment_size,
            current,
            next_segment,
            index: index.clone(),
            #[cfg(test)]
            hooks: hooks.clone(),
        };
        // Removals a crash interrupted.
        writer.remove_dead_segments();
        let writer = GroupCommit::start("small-chunk log", move |group| writer.commit(group))?;
        Ok(SmallChunks {
            dir: dir.to_path_buf(),
            index,
            writer,
            #[cfg(test)]
            hooks,
        })
    }

    /// Stores chunk `id` (shorter than [`SMALL_CHUNK_MAX`]); returns once it is in the log
    /// (and synced when fsync is enabled). An id already stored is not written again.
    pub async fn put(&self, id: ChunkId, data: Bytes) -> Result<()> {
        if data.len() >= SMALL_CHUNK_MAX {
            return Err(Error::internal(format!(
                "chunk {id} of {} bytes is too large for the small-chunk log",
                data.len()
            )));
        }
        if self.read_index().chunks.contains_key(&id) {
            return Ok(());
        }
        let crc = record_crc(id, &data);
        let mut header = [0u8; RECORD_HEADER];
        header[..4].copy_from_slice(RECORD_MAGIC);
        header[4..8].copy_from_slice(&(data.len() as u32).to_le_bytes());
        header[8..12].copy_from_slice(&crc.to_le_bytes());
        header[12..].copy_from_slice(&id.0.to_le_bytes());
        let size = RECORD_HEADER + data.len();
        self.writer
            .submit(
                Op::Put(Put {
                    id,
                    header,
                    data,
                    crc,
                }),
                size,
            )
            .await
    }

    /// Deletes the chunks among `ids` that the log holds; returns once their tombstones are
    /// in the log (and synced when fsync is enabled).
    pub async fn delete(&self, ids: &[ChunkId]) -> Result<()> {
        let held: Vec<ChunkId> = {
            let index = self.read_index();
            ids.iter()
                .copied()
                .filter(|id| index.chunks.contains_key(id))
                .collect()
        };
        if held.is_empty() {
            return Ok(());
        }
        let size = held.len() * RECORD_HEADER;
        self.writer.submit(Op::Delete(held), size).await
    }

    pub fn contains(&self, id: ChunkId) -> bool {
        self.read_index().chunks.contains_key(&id)
    }

    /// The chunks after `start_after` in id order, at most `limit`.
    pub fn list(&self, start_after: Option<ChunkId>, limit: usize) -> Vec<ChunkEntry> {
        let lower = start_after.map_or(Bound::Unbounded, Bound::Excluded);
        self.read_index()
            .chunks
            .range((lower, Bound::Unbounded))
            .take(limit)
            .map(|(&id, loc)| ChunkEntry {
                id,
                len: u64::from(loc.len),
                stored_ms: loc.stored_ms,
            })
            .collect()
    }

    /// Verifies the whole record of chunk `id` and returns its length, or `None` if the log
    /// does not hold it. Blocking.
    pub fn verify(&self, id: ChunkId) -> Option<Result<u64>> {
        let len = self.read_index().chunks.get(&id)?.len;
        Some(
            self.read(id, 0, u64::from(len))?
                .map(|data| data.len() as u64),
        )
    }

    /// Verified bytes `[offset, offset + len)` of chunk `id`, or `None` if the log does not
    /// hold it. Blocking.
    pub fn read(&self, id: ChunkId, offset: u64, len: u64) -> Option<Result<Bytes>> {
        let (loc, file) = {
            let index = self.read_index();
            let loc = *index.chunks.get(&id)?;
            (
                loc,
                index.segments.get(&loc.segment).map(|s| s.file.clone()),
            )
        };
        Some(self.read_at(id, loc, file, offset, len))
    }

    fn read_at(
        &self,
        id: ChunkId,
        loc: Loc,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        let range = check_range(id, offset, len, u64::from(loc.len))?;
        let segment = segment_path(&self.dir, loc.segment);
        let file = file.ok_or_else(|| {
            Error::internal(format!(
                "chunk {id}: segment {} is not open",
                segment.display()
            ))
        })?;
        let mut record = vec![0u8; RECORD_HEADER + loc.len as usize];
        let start = loc.offset - RECORD_HEADER as u64;
        file.read_exact_at(&mut record, start).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                Error::corrupt(format!(
                    "chunk {id}: {} is truncated before the end of its record",
                    segment.display()
                ))
            } else {
                io_error(format_args!("reading chunk {id}"), e)
            }
        })?;
        let (header, data) = record.split_at(RECORD_HEADER);
        let intact = &header[..4] == RECORD_MAGIC
            && header[4..8] == loc.len.to_le_bytes()
            && header[8..12] == loc.crc.to_le_bytes()
            && header[12..] == id.0.to_le_bytes()
            && record_crc(id, data) == loc.crc;
        if !intact {
            return Err(Error::corrupt(format!(
                "chunk {id}: checksum mismatch in its record at offset {start} of {}",
                segment.display()
            )));
        }
        Ok(Bytes::from(record).slice(RECORD_HEADER + range.start..RECORD_HEADER + range.end))
    }

    /// Number of chunks in the log and the size of their records.
    pub fn stats(&self) -> (u64, u64) {
        let index = self.read_index();
        (index.chunks.len() as u64, index.bytes)
    }

    /// How many times the log was synced (fdatasync) since it was opened.
    #[cfg(test)]
    pub fn syncs(&self) -> u64 {
        self.hooks.syncs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes every sync take at least this much longer.
    #[cfg(test)]
    pub fn slow_down_syncs(&self, delay: std::time::Duration) {
        let us = delay.as_micros() as u64;
        self.hooks
            .sync_delay_us
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }

    fn read_index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The segment being appended to.
struct Segment {
    number: u32,
    file: Arc<File>,
    /// End of its valid records: where the next one goes.
    len: u64,
}

/// The writer's side of the log, owned by the group-commit thread.
struct Writer {
    dir: PathBuf,
    fsync: bool,
    segment_size: u64,
    /// `None` until the first segment is created.
    current: Option<Segment>,
    next_segment: u32,
    index: SharedIndex,
    #[cfg(test)]
    hooks: Arc<TestHooks>,
}

impl Writer {
    /// Appends a group of records (one write and one sync per segment it touches, normally
    /// one), applies them to the index once they are durable, then removes segments that are
    /// no longer needed.
    fn commit(&mut self, group: Vec<Op>) -> Result<()> {
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
                    let used = segment.len + buf.len() as u64;
                    used > 0 && used + record_len > self.segment_size
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
    fn remove_dead_segments(&mut self) {
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
        append(&segment.file, segment.len, buf, self.fsync).map_err(|e| {
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
        let number = self.next_segment;
        // Moves on even if this attempt fails, so a retry does not trip over a leftover file.
        self.next_segment = number
            .checked_add(1)
            .ok_or_else(|| Error::internal("small-chunk log: out of segment numbers"))?;
        let path = segment_path(&self.dir, number);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|file| {
                if self.fsync {
                    sync_dir(&self.dir)?;
                }
                Ok(file)
            })
            .map_err(|e| io_error(format_args!("creating {}", path.display()), e))?;
        let file = Arc::new(file);
        self.index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .segments
            .insert(number, SegmentState::new(file.clone()));
        self.current = Some(Segment {
            number,
            file,
            len: 0,
        });
        Ok(())
    }
}

fn record_crc(id: ChunkId, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&id.0.to_le_bytes()), data)
}

/// Differs from the checksum of an empty chunk's record, so neither reads as the other.
fn tombstone_crc(id: ChunkId) -> u32 {
    record_crc(id, TOMBSTONE_MAGIC)
}

fn tombstone_header(id: ChunkId) -> [u8; RECORD_HEADER] {
    let mut header = [0u8; RECORD_HEADER];
    header[..4].copy_from_slice(TOMBSTONE_MAGIC);
    // Length 0: the header is the whole record.
    header[8..12].copy_from_slice(&tombstone_crc(id).to_le_bytes());
    header[12..].copy_from_slice(&id.0.to_le_bytes());
    header
}

fn segment_path(dir: &Path, number: u32) -> PathBuf {
    dir.join(format!("{SEGMENT_PREFIX}{number:06}{SEGMENT_SUFFIX}"))
}

/// The segment number in a file name like `small-000042.log`.
fn segment_number(name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Loads the index from every segment in `dir`; returns it, the newest segment (to append
/// to) and the number for the next one.
fn scan(dir: &Path, fsync: bool) -> io::Result<(Index, Option<Segment>, u32)> {
    let mut numbers = Vec::new();
    for entry in fs::read_dir(dir)? {
        if let Some(n) = segment_number(&entry?.file_name().to_string_lossy()) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    let mut index = Index::default();
    let mut current = None;
    for (i, &number) in numbers.iter().enumerate() {
        let newest = i + 1 == numbers.len();
        let path = segment_path(dir, number);
        let file = Arc::new(OpenOptions::new().read(true).write(newest).open(&path)?);
        index
            .segments
            .insert(number, SegmentState::new(file.clone()));
        let (valid, damage) = scan_segment(&file, &path, number, &mut index)?;
        if let Some(damage) = damage {
            if newest {
                drop_torn_tail(&file, &path, "small-chunk log", valid, &damage, fsync)?;
            } else {
                if let Some(segment) = index.segments.get_mut(&number) {
                    segment.damaged = true;
                }
                let file_len = file.metadata()?.len();
                tracing::error!(
                    "small-chunk log {}: {damage} at offset {valid}; the {} bytes from there \
                     on are not indexed (their chunks must be read from other replicas)",
                    path.display(),
                    file_len - valid
                );
            }
        }
        if newest {
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
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "out of segment numbers"))?,
    };
    Ok((index, current, next))
}

/// What the scan found at one position of a segment.
enum Scanned {
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

/// Indexes the records of one segment up to the first bad one. Returns the length of the
/// intact records and, if it stopped early, why. A record whose checksum fails but which is
/// followed by an intact one (a bit flipped on disk, not a torn append) is skipped with an
/// error instead: its chunk is not indexed, the records after it are.
fn scan_segment(
    file: &File,
    path: &Path,
    number: u32,
    index: &mut Index,
) -> io::Result<(u64, Option<String>)> {
    let meta = file.metadata()?;
    let file_len = meta.len();
    let stored_ms = mtime_ms(&meta);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut data = Vec::with_capacity(SMALL_CHUNK_MAX);
    let mut pos = 0u64;
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
fn scan_record(reader: &mut impl Read, remaining: u64, data: &mut Vec<u8>) -> io::Result<Scanned> {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tomus_wire::ErrorKind;

    use super::*;
    use crate::chunk_store::{ChunkRange, ChunkStats, ChunkStore};
    use crate::testutil::TempDir;

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    async fn open(dir: &TempDir, segment_size: u64) -> ChunkStore {
        ChunkStore::open_with_segment_size(dir.path().join("chunks"), true, segment_size)
            .await
            .unwrap()
    }

    fn segments(dir: &TempDir) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = fs::read_dir(dir.path().join("chunks"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| segment_number(&p.file_name().unwrap().to_string_lossy()).is_some())
            .collect();
        out.sort();
        out
    }

    fn loc(store: &ChunkStore, id: ChunkId) -> Loc {
        store.small().read_index().chunks[&id]
    }

    fn flip(path: &Path, at: u64) {
        let mut raw = fs::read(path).unwrap();
        raw[at as usize] ^= 0x10;
        fs::write(path, raw).unwrap();
    }

    async fn assert_reads(store: &ChunkStore, id: ChunkId, data: &[u8]) {
        let got = store.get(id, 0, data.len() as u64).await;
        assert_eq!(&got.unwrap()[..], data, "chunk {id}");
    }

    async fn assert_missing(store: &ChunkStore, id: ChunkId) {
        let err = store.get(id, 0, 0).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "chunk {id}: {err}");
    }

    #[tokio::test]
    async fn small_chunks_round_trip_with_ranges() {
        let dir = TempDir::new("small-round-trip");
        let store = open(&dir, SEGMENT_SIZE).await;
        let sizes = [0usize, 1, 4096, SMALL_CHUNK_MAX - 1];
        for (i, &size) in sizes.iter().enumerate() {
            let id = ChunkId(0x5000 + i as u128);
            let data = pattern(size, i as u64);
            store.put(id, Bytes::from(data.clone())).await.unwrap();
            assert_reads(&store, id, &data).await;
            let size = size as u64;
            let mut ranges = vec![(0, 0), (size, 0), (0, size)];
            for (off, len) in [
                (1, size.saturating_sub(1)),
                (size / 2, 1),
                (size / 3, size / 3),
            ] {
                if off + len <= size {
                    ranges.push((off, len));
                }
            }
            for (off, len) in ranges {
                match store.read_range(id, off, len).await.unwrap() {
                    ChunkRange::Memory(got) => {
                        assert_eq!(&got[..], &data[off as usize..(off + len) as usize])
                    }
                    ChunkRange::File(_) => panic!("a small chunk read as a file range"),
                }
            }
            for (off, len) in [(size, 1), (1, u64::MAX), (u64::MAX, 1)] {
                let err = store.get(id, off, len).await.unwrap_err();
                assert_eq!(err.kind, ErrorKind::OutOfRange, "{off}+{len} of {size}");
            }
            // No file of its own.
            let name = id.to_string();
            assert!(!dir
                .path()
                .join("chunks")
                .join(&name[..2])
                .join(&name)
                .exists());
        }
        assert_missing(&store, ChunkId(42)).await;
        assert_eq!(segments(&dir).len(), 1);
        let log_bytes: u64 = sizes.iter().map(|&s| (RECORD_HEADER + s) as u64).sum();
        assert_eq!(store.stats().chunks, 4);
        assert_eq!(store.stats().bytes, log_bytes);
        assert_eq!(fs::metadata(&segments(&dir)[0]).unwrap().len(), log_bytes);

        // 64 KiB is not small: it gets a file.
        let big = ChunkId(0x6000);
        let data = pattern(SMALL_CHUNK_MAX, 7);
        store.put(big, Bytes::from(data.clone())).await.unwrap();
        let name = big.to_string();
        assert!(dir
            .path()
            .join("chunks")
            .join(&name[..2])
            .join(&name)
            .exists());
        assert_reads(&store, big, &data).await;
        assert_eq!(store.small().stats(), (4, log_bytes));
        assert_eq!(store.stats().chunks, 5);
    }

    #[tokio::test]
    async fn a_flipped_byte_is_corrupt_for_its_chunk_only() {
        let dir = TempDir::new("small-corrupt");
        let store = open(&dir, SEGMENT_SIZE).await;
        let ids = [ChunkId(1), ChunkId(2), ChunkId(3)];
        let data: Vec<Vec<u8>> = (0..3).map(|i| pattern(4096, i)).collect();
        for (id, data) in ids.iter().zip(&data) {
            store.put(*id, Bytes::from(data.clone())).await.unwrap();
        }
        let segment = &segments(&dir)[0];
        // A data byte of chunk 2, a byte of chunk 3's id in its record header.
        flip(segment, loc(&store, ids[1]).offset + 1000);
        flip(segment, loc(&store, ids[2]).offset - 3);
        for id in &ids[1..] {
            for (off, len) in [(0, 4096), (2000, 10), (0, 0)] {
                let err = store.get(*id, off, len).await.unwrap_err();
                assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
                assert!(err.message.contains(&id.to_string()), "{err}");
            }
        }
        assert_reads(&store, ids[0], &data[0]).await;
        let got = store.get(ids[0], 100, 50).await.unwrap();
        assert_eq!(&got[..], &data[0][100..150]);
    }

    #[tokio::test]
    async fn reopen_rebuilds_the_index_and_drops_a_torn_tail() {
        let dir = TempDir::new("small-reopen");
        let store = open(&dir, SEGMENT_SIZE).await;
        let chunk = |n: u64| {
            (
                ChunkId(u128::from(n) << 100 | 7),
                pattern(1000 * n as usize, n),
            )
        };
        for n in 1..=2 {
            let (id, data) = chunk(n);
            store.put(id, Bytes::from(data)).await.unwrap();
        }
        let segment = segments(&dir)[0].clone();
        let good_len = fs::metadata(&segment).unwrap().len();
        let (id3, data3) = chunk(3);
        store.put(id3, Bytes::from(data3.clone())).await.unwrap();
        let before = store.stats();
        drop(store);

        // Unchanged, everything comes back.
        let store = open(&dir, SEGMENT_SIZE).await;
        assert_eq!(store.stats(), before);
        assert_reads(&store, id3, &data3).await;
        drop(store);

        // Cut the last record in the middle (a torn append).
        let file = OpenOptions::new().write(true).open(&segment).unwrap();
        file.set_len(good_len + 1500).unwrap();
        drop(file);
        let store = open(&dir, SEGMENT_SIZE).await;
        for n in 1..=2 {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }
        assert_missing(&store, id3).await;
        assert_eq!(store.stats().chunks, 2);
        assert_eq!(fs::metadata(&segment).unwrap().len(), good_len);

        // Appends continue after the cut and survive another reopen.
        for n in 3..=4 {
            let (id, data) = chunk(n);
            store.put(id, Bytes::from(data)).await.unwrap();
        }
        drop(store);
        let store = open(&dir, SEGMENT_SIZE).await;
        for n in 1..=4 {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }
        assert_eq!(store.stats().chunks, 4);
        assert_eq!(segments(&dir).len(), 1);
        drop(store);

        // A torn header is dropped too.
        let len = fs::metadata(&segment).unwrap().len();
        let mut raw = fs::read(&segment).unwrap();
        raw.extend_from_slice(&RECORD_MAGIC[..]);
        raw.extend_from_slice(&[1, 2, 3]);
        fs::write(&segment, raw).unwrap();
        let store = open(&dir, SEGMENT_SIZE).await;
        assert_eq!(store.stats().chunks, 4);
        assert_eq!(fs::metadata(&segment).unwrap().len(), len);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_puts_share_syncs_and_survive_reopen() {
        const TASKS: u64 = 32;
        const PUTS: u64 = 50;
        let dir = TempDir::new("small-concurrent");
        let store = open(&dir, SEGMENT_SIZE).await;
        // As slow as a VM's fsync at least, wherever the temp dir is.
        store.small().slow_down_syncs(Duration::from_millis(1));
        let id = |t: u64, i: u64| ChunkId(u128::from(t) << 64 | u128::from(i));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..PUTS {
                        let data = pattern(4096, t * 1000 + i);
                        store.put(id(t, i), Bytes::from(data)).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let syncs = store.small().syncs();
        let puts = TASKS * PUTS;
        assert!(syncs > 0);
        // About 17 puts share a sync here; 8 leaves a margin for a loaded machine.
        assert!(syncs <= puts / 8, "{syncs} fdatasyncs for {puts} puts");
        drop(store);

        let store = open(&dir, SEGMENT_SIZE).await;
        assert_eq!(store.stats().chunks, puts);
        for t in 0..TASKS {
            for i in 0..PUTS {
                assert_reads(&store, id(t, i), &pattern(4096, t * 1000 + i)).await;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn segments_roll_over() {
        let dir = TempDir::new("small-roll");
        const SEGMENT: u64 = 10_000;
        let store = Arc::new(open(&dir, SEGMENT).await);
        let chunk = |n: u64| (ChunkId(1000 + u128::from(n)), pattern(3000, n));
        // Concurrent puts, so groups also cross segment boundaries.
        let tasks: Vec<_> = (0..20)
            .map(|n| {
                let store = store.clone();
                tokio::spawn(async move {
                    let (id, data) = chunk(n);
                    store.put(id, Bytes::from(data)).await.unwrap();
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        // Larger than a whole segment: a segment of its own.
        let huge = ChunkId(5);
        let huge_data = pattern(20_000, 5);
        store
            .put(huge, Bytes::from(huge_data.clone()))
            .await
            .unwrap();

        let files = segments(&dir);
        // Three 3028-byte records fit in a segment.
        assert_eq!(files.len(), 8, "{files:?}");
        for (i, file) in files.iter().enumerate() {
            let len = fs::metadata(file).unwrap().len();
            let expected = if i == 7 { 20_028 } else { 9084 };
            if i < 6 || i == 7 {
                assert_eq!(len, expected, "{}", file.display());
            } else {
                assert_eq!(len, 2 * 3028, "{}", file.display());
            }
        }
        for n in 0..20 {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }
        assert_reads(&store, huge, &huge_data).await;
        drop(store);

        let store = open(&dir, SEGMENT).await;
        for n in 0..20 {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }
        assert_reads(&store, huge, &huge_data).await;
        // The newest segment is full: the next chunk starts segment 8.
        let (id, data) = chunk(20);
        store.put(id, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(loc(&store, id).segment, 8);
        assert!(segments(&dir)[8].ends_with("small-000008.log"));
        drop(store);
        let store = open(&dir, SEGMENT).await;
        assert_reads(&store, id, &data).await;
        assert_eq!(store.stats().chunks, 22);
    }

    #[tokio::test]
    async fn damage_in_an_older_segment_stops_indexing_that_segment() {
        let dir = TempDir::new("small-older");
        const SEGMENT: u64 = 10_000;
        let store = open(&dir, SEGMENT).await;
        let chunk = |n: u64| (ChunkId(77 + u128::from(n)), pattern(3000, n));
        for n in 0..7 {
            let (id, data) = chunk(n);
            store.put(id, Bytes::from(data)).await.unwrap();
        }
        // Segments: [0 1 2] [3 4 5] [6]. Damage the framing of chunk 4 (its record magic),
        // in the middle of segment 1.
        let (id4, _) = chunk(4);
        let at = loc(&store, id4);
        assert_eq!(at.segment, 1);
        drop(store);
        let files = segments(&dir);
        let len = fs::metadata(&files[1]).unwrap().len();
        flip(&files[1], at.offset - RECORD_HEADER as u64);

        let store = open(&dir, SEGMENT).await;
        for n in [0, 1, 2, 3, 6] {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }
        for n in [4, 5] {
            assert_missing(&store, chunk(n).0).await;
        }
        // The older segment is left as it is, even once its indexed chunks are deleted.
        assert_eq!(fs::metadata(&files[1]).unwrap().len(), len);
        assert_eq!(store.stats().chunks, 5);
        store.delete(&[chunk(3).0]).await.unwrap();
        assert!(files[1].exists());
    }

    #[tokio::test]
    async fn a_flipped_data_byte_skips_only_its_record() {
        let dir = TempDir::new("small-skip");
        const SEGMENT: u64 = 10_000;
        let store = open(&dir, SEGMENT).await;
        let chunk = |n: u64| (ChunkId(500 + u128::from(n)), pattern(3000, n));
        for n in 0..8 {
            let (id, data) = chunk(n);
            store.put(id, Bytes::from(data)).await.unwrap();
        }
        // Segments: [0 1 2] [3 4 5] [6 7]. Flip a data byte of chunk 4 (older segment) and
        // of chunk 6 (newest segment, followed by chunk 7).
        let (at4, at6, at7) = (
            loc(&store, chunk(4).0),
            loc(&store, chunk(6).0),
            loc(&store, chunk(7).0),
        );
        assert_eq!((at4.segment, at6.segment, at7.segment), (1, 2, 2));
        drop(store);
        let files = segments(&dir);
        let newest_len = fs::metadata(&files[2]).unwrap().len();
        flip(&files[1], at4.offset + 10);
        flip(&files[2], at6.offset + 2999);

        let store = open(&dir, SEGMENT).await;
        for n in [0, 1, 2, 3, 5, 7] {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }
        for n in [4, 6] {
            assert_missing(&store, chunk(n).0).await;
        }
        assert_eq!(fs::metadata(&files[2]).unwrap().len(), newest_len);
        assert_eq!(store.stats().chunks, 6);
        drop(store);

        // A damaged last record is a torn append: cut off (with the damaged one before it,
        // since two in a row leave the framing in doubt), and appends continue there.
        flip(&files[2], at7.offset + 5);
        let store = open(&dir, SEGMENT).await;
        assert_missing(&store, chunk(7).0).await;
        assert_eq!(
            fs::metadata(&files[2]).unwrap().len(),
            at6.offset - RECORD_HEADER as u64
        );
        let (id8, data8) = chunk(8);
        store.put(id8, Bytes::from(data8.clone())).await.unwrap();
        drop(store);
        let store = open(&dir, SEGMENT).await;
        assert_reads(&store, id8, &data8).await;
        assert_eq!(store.stats().chunks, 6);
    }

    fn exists(dir: &TempDir, segment: u32) -> bool {
        segment_path(&dir.path().join("chunks"), segment).exists()
    }

    #[tokio::test]
    async fn deletes_survive_reopen_and_dead_segments_are_removed() {
        let dir = TempDir::new("small-delete");
        // Three 3028-byte records fit in a segment; a tombstone takes 28 bytes.
        const SEGMENT: u64 = 10_000;
        let store = open(&dir, SEGMENT).await;
        let chunk = |n: u64| (ChunkId(900 + u128::from(n)), pattern(3000, n));
        let put = |n: u64| {
            let store = store.clone();
            async move {
                let (id, data) = chunk(n);
                store.put(id, Bytes::from(data)).await.unwrap();
            }
        };
        let delete = |ns: &[u64]| {
            let store = store.clone();
            let ids: Vec<ChunkId> = ns.iter().map(|&n| chunk(n).0).collect();
            async move { store.delete(&ids).await.unwrap() }
        };
        for n in 0..7 {
            put(n).await;
        }
        // Segments: 0 [c0 c1 c2], 1 [c3 c4 c5], 2 [c6].
        assert_eq!(loc(&store, chunk(6).0).segment, 2);
        let record = (RECORD_HEADER + 3000) as u64;
        assert_eq!(store.stats().bytes, 7 * record);

        // Tombstones for c3 (in segment 1) and c6 go to segment 2, then c7 and c8 fill it.
        delete(&[3, 6]).await;
        put(7).await;
        put(8).await;
        assert_eq!(loc(&store, chunk(8).0).segment, 2);
        put(9).await;
        assert_eq!(loc(&store, chunk(9).0).segment, 3);
        // Segment 2 has no live chunk now, but its tombstone of c3 is needed while segment 1
        // exists: it stays.
        delete(&[7, 8]).await;
        assert!(exists(&dir, 1) && exists(&dir, 2));
        assert_eq!(
            store.stats(),
            (ChunkStats {
                chunks: 6,
                bytes: 6 * record
            })
        );
        for n in [3, 6, 7, 8] {
            assert_missing(&store, chunk(n).0).await;
        }
        drop(store);

        let store = open(&dir, SEGMENT).await;
        assert_eq!(store.stats().chunks, 6);
        for n in [3, 6, 7, 8] {
            assert_missing(&store, chunk(n).0).await;
        }
        for n in [0, 1, 2, 4, 5, 9] {
            let (id, data) = chunk(n);
            assert_reads(&store, id, &data).await;
        }

        // The last chunks of segment 1 go: segment 1, then segment 2, are removed. Unknown
        // ids and ids deleted before are ignored.
        store
            .delete(&[chunk(4).0, chunk(5).0, chunk(3).0, ChunkId(12345)])
            .await
            .unwrap();
        assert!(!exists(&dir, 1) && !exists(&dir, 2));
        assert!(exists(&dir, 0) && exists(&dir, 3));
        assert_eq!(
            store.stats(),
            (ChunkStats {
                chunks: 4,
                bytes: 4 * record
            })
        );
        // Segment 0 goes too once empty; segment 3, being written, stays.
        store
            .delete(&[chunk(0).0, chunk(1).0, chunk(2).0])
            .await
            .unwrap();
        assert!(!exists(&dir, 0) && exists(&dir, 3));
        assert_eq!(segments(&dir).len(), 1);
        assert_eq!(
            store.stats(),
            (ChunkStats {
                chunks: 1,
                bytes: record
            })
        );

        // A deleted chunk stored again is back, after a reopen too.
        let (id3, data3) = chunk(3);
        store.put(id3, Bytes::from(data3.clone())).await.unwrap();
        assert_reads(&store, id3, &data3).await;
        drop(store);
        let store = open(&dir, SEGMENT).await;
        assert_reads(&store, id3, &data3).await;
        let (id9, data9) = chunk(9);
        assert_reads(&store, id9, &data9).await;
        for n in [0, 1, 2, 4, 5, 6, 7, 8] {
            assert_missing(&store, chunk(n).0).await;
        }
        assert_eq!(
            store.stats(),
            (ChunkStats {
                chunks: 2,
                bytes: 2 * record
            })
        );
        let listed: Vec<_> = store.list(None, 100).await.unwrap();
        assert_eq!(
            listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
            vec![(id3, 3000), (id9, 3000)]
        );
    }

    #[tokio::test]
    async fn puts_and_deletes_share_a_group() {
        let dir = TempDir::new("small-group-order");
        let store = open(&dir, SEGMENT_SIZE).await;
        let (a, b) = (ChunkId(1), ChunkId(2));
        store.put(a, Bytes::from(vec![1u8; 10])).await.unwrap();
        // Queued together: slow syncs let them gather into one group.
        store.small().slow_down_syncs(Duration::from_millis(100));
        let blocker = store.put(ChunkId(3), Bytes::from(vec![3u8; 10]));
        let ids = [a];
        let ops = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let put_b = store.put(b, Bytes::from(vec![2u8; 10]));
            let delete_a = store.delete(&ids);
            let (p, d) = tokio::join!(put_b, delete_a);
            p.unwrap();
            d.unwrap();
        };
        let (r, ()) = tokio::join!(blocker, ops);
        r.unwrap();
        // a, the blocker, then the put and the tombstone together (or all three together if
        // the writer was slow to wake); not one sync each.
        assert!(
            store.small().syncs() <= 3,
            "{} syncs",
            store.small().syncs()
        );
        assert_missing(&store, a).await;
        assert_reads(&store, b, &[2u8; 10]).await;
        drop(store);
        let store = open(&dir, SEGMENT_SIZE).await;
        assert_missing(&store, a).await;
        assert_reads(&store, b, &[2u8; 10]).await;
        assert_eq!(store.stats().chunks, 2);
    }
}
