//! The in-memory index of the log: chunk id -> segment, data offset, length, checksum and
//! when it was stored; and per segment, what its removal waits for (live chunks, and the
//! older segments its tombstones delete chunks in).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::sync::{Arc, RwLock};

use tomus_metadata::ChunkId;

use super::format::RECORD_HEADER;

/// Where a chunk's record is.
#[derive(Clone, Copy, Debug)]
pub(super) struct Loc {
    pub(super) segment: u32,
    /// Offset of the data in the segment; the record header is just before it.
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) crc: u32,
    /// When it was stored (Unix ms); for chunks indexed at startup, when their segment was
    /// last modified (never earlier than the real time).
    pub(super) stored_ms: u64,
}

/// A segment file and what its removal waits for.
pub(super) struct SegmentState {
    /// Open for reading.
    pub(super) file: Arc<File>,
    /// Indexed chunks whose record is in this segment.
    pub(super) live: u64,
    /// Other segments holding records that tombstones in this one delete.
    pub(super) kills: HashSet<u32>,
    /// Startup found damage in it: left on disk for an operator, never removed.
    pub(super) damaged: bool,
}

impl SegmentState {
    pub(super) fn new(file: Arc<File>) -> Self {
        SegmentState {
            file,
            live: 0,
            kills: HashSet::new(),
            damaged: false,
        }
    }
}

#[derive(Default)]
pub(super) struct Index {
    /// Ordered, so chunks can be listed by id.
    pub(super) chunks: BTreeMap<ChunkId, Loc>,
    pub(super) segments: BTreeMap<u32, SegmentState>,
    /// Size of the indexed records (headers included).
    pub(super) bytes: u64,
}

impl Index {
    /// Indexes a chunk unless it already is (a second copy of a record changes nothing).
    pub(super) fn insert(&mut self, id: ChunkId, loc: Loc) {
        if let Entry::Vacant(slot) = self.chunks.entry(id) {
            slot.insert(loc);
            self.bytes += RECORD_HEADER as u64 + u64::from(loc.len);
            if let Some(segment) = self.segments.get_mut(&loc.segment) {
                segment.live += 1;
            }
        }
    }

    /// Drops chunk `id` for a tombstone in segment `tombstone`.
    pub(super) fn remove(&mut self, id: ChunkId, tombstone: u32) {
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
    pub(super) fn dead_segment(&self, current: Option<u32>) -> Option<u32> {
        self.segments
            .iter()
            .find(|(&n, s)| Some(n) != current && s.live == 0 && s.kills.is_empty() && !s.damaged)
            .map(|(&n, _)| n)
    }

    /// Forgets a segment whose file is gone.
    pub(super) fn forget_segment(&mut self, number: u32) {
        self.segments.remove(&number);
        for segment in self.segments.values_mut() {
            segment.kills.remove(&number);
        }
    }
}

pub(super) type SharedIndex = Arc<RwLock<Index>>;
