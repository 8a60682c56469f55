//! The writer's side of the log, owned by the group-commit thread.
//!
//! Compaction: once most of the log (at least half, and at least [`COMPACT_MIN_DEAD`] bytes)
//! is records of deleted nodes and tombstones, the writer thread writes the header and the
//! live nodes to a temporary file, syncs it and renames it over the log. A crash leaves
//! either log whole.
//!
//! [`COMPACT_MIN_DEAD`]: crate::meta_store::COMPACT_MIN_DEAD

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

use tomus_metadata::{Node, NodeKey};
use tomus_wire::zeroed_ahead::ZeroedAhead;
use tomus_wire::Result;

use super::record::record_size;
use super::snapshot::{parent_dir, rewrite};
use super::{Commit, NodeMap};
use crate::group_commit::{append_zeroed, refill_zeros, GroupLog};
use crate::{io_error, sync_dir};

/// The writer's side of the log, owned by the group-commit thread.
pub(super) struct Log {
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// End of the valid log: where the next group goes.
    pub(super) len: u64,
    /// Bytes of the records of the nodes in the map; the rest of the log is dead.
    pub(super) live: u64,
    pub(super) fsync: bool,
    pub(super) nodes: NodeMap,
    pub(super) compact_min_dead: u64,
    /// Dead bytes from which compaction is tried (raised after a failed attempt).
    pub(super) compact_at: u64,
    /// Zeros written ahead of `len`.
    pub(super) zeroed: ZeroedAhead,
}

impl GroupLog<Commit> for Log {
    fn commit(&mut self, group: Vec<Commit>) -> Result<()> {
        Log::commit(self, group)
    }

    fn after_group(&mut self) {
        let log = self.path.display();
        refill_zeros(&mut self.zeroed, &self.file, self.len, self.fsync, &log);
    }
}

impl Log {
    /// Writes a group of batches with one write and one fdatasync, then applies them to the
    /// map, and compacts the log if it is mostly dead.
    pub(super) fn commit(&mut self, group: Vec<Commit>) -> Result<()> {
        let size = group.iter().map(|c| c.records().len()).sum();
        let mut buf = Vec::with_capacity(size);
        for commit in &group {
            buf.extend_from_slice(commit.records());
        }
        append_zeroed(&mut self.zeroed, &self.file, self.len, &buf, self.fsync)
            .map_err(|e| io_error("appending to the metadata log", e))?;
        self.len += size as u64;
        // Nodes replaced or deleted, sized after the lock is released.
        let mut gone = Vec::new();
        {
            let mut map = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
            for commit in group {
                match commit {
                    Commit::Put { nodes, .. } => {
                        for (key, node, size) in nodes {
                            self.live += size;
                            if let Some(old) = map.insert(key, Arc::new(node)) {
                                gone.push((key, old));
                            }
                        }
                    }
                    Commit::Delete { keys, .. } => {
                        for key in keys {
                            if let Some(old) = map.remove(&key) {
                                gone.push((key, old));
                            }
                        }
                    }
                }
            }
        }
        for (key, old) in gone {
            self.live = self.live.saturating_sub(record_size(&key, &old));
        }
        self.maybe_compact();
        Ok(())
    }

    /// Compacts once at least half the log, and at least `compact_at` bytes, is dead. A
    /// failure leaves the old log in use and is retried after more is dead.
    fn maybe_compact(&mut self) {
        let dead = self.len.saturating_sub(self.live);
        if dead < self.compact_at || dead < self.live {
            return;
        }
        match self.compact() {
            Ok(()) => {
                tracing::info!(
                    "compacted metadata log {}: {dead} dead bytes dropped, {} bytes left",
                    self.path.display(),
                    self.len
                );
                self.compact_at = self.compact_min_dead;
            }
            Err(e) => {
                tracing::warn!("cannot compact metadata log {}: {e}", self.path.display());
                self.compact_at = dead.saturating_add(self.compact_min_dead);
            }
        }
    }

    /// Replaces the log with one holding only the live nodes.
    fn compact(&mut self) -> io::Result<()> {
        // Only this thread changes the map, so the snapshot is exactly what the log holds.
        let snapshot: Vec<(NodeKey, Arc<Node>)> = {
            let map = self.nodes.read().unwrap_or_else(PoisonError::into_inner);
            map.iter().map(|(k, n)| (*k, n.clone())).collect()
        };
        let (file, len) = rewrite(&self.path, &snapshot)?;
        // The path names the new file now: appends must go there, whatever happens next.
        self.file = file;
        self.len = len;
        self.live = len;
        self.zeroed.forget();
        sync_dir(parent_dir(&self.path))
    }
}
