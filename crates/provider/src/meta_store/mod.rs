//! This provider's shard of the metadata DHT: tree nodes in memory, made durable by an
//! append-only log.
//!
//! Log record: `[u32 LE payload length][u32 LE CRC32C of payload][payload]`. The payload is
//! bincode((NodeKey, Node)) for a stored node; when the top bit of the length field is set the
//! record is a tombstone and its payload bincode(NodeKey) of a deleted node. Replay applies
//! records in order, so a node stored again after its deletion is back. A crash can leave a
//! torn record at the end; it is cut off when the log is replayed. Writes go through one
//! writer thread that combines the batches of concurrent callers, so a single fdatasync
//! acknowledges many of them (see `crate::group_commit`).
//!
//! The format header and how a log of another format is refused are in `record.rs`; replay,
//! the upgrade of logs from before the header, and the torn-tail cut in `replay.rs`;
//! group commits and compaction in `writer.rs`.

/// The log's records: framing, encoding, the format header, reading one back.
mod record;
/// Opening the log: format check, replay, torn-tail cut, upgrade.
mod replay;
/// Writing a whole new log of the live nodes (compaction, upgrade).
mod snapshot;
#[cfg(test)]
mod tests;
/// The writer thread's side: group commits and compaction.
mod writer;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use tomus_metadata::{BlobId, Node, NodeKey, NodeRef, Span, Version};
use tomus_wire::zeroed_ahead::ZeroedAhead;
use tomus_wire::Result;

use crate::blocking;
use crate::group_commit::GroupCommit;
use record::{encode_record, encode_tombstone};
use replay::replay;
use writer::Log;

/// The log format this build writes, and the only one it reads (logs without a header are
/// format 1).
pub const FORMAT_VERSION: u64 = 1;
/// Dead bytes below which the log is never compacted.
pub const COMPACT_MIN_DEAD: u64 = 64 << 20;

type NodeMap = Arc<RwLock<HashMap<NodeKey, Arc<Node>>>>;

/// A batch waiting to be written: its encoded records and the change to make once they are
/// durable.
enum Commit {
    /// Nodes with the size of their record.
    Put {
        records: Vec<u8>,
        nodes: Vec<(NodeKey, Node, u64)>,
    },
    Delete {
        records: Vec<u8>,
        keys: Vec<NodeKey>,
    },
}

impl Commit {
    fn records(&self) -> &[u8] {
        match self {
            Commit::Put { records, .. } | Commit::Delete { records, .. } => records,
        }
    }
}

pub struct MetaStore {
    nodes: NodeMap,
    writer: GroupCommit<Commit>,
}

impl MetaStore {
    /// Opens (creating if needed) the log at `path` and replays it. Starts the writer thread,
    /// which ends when the store is dropped.
    pub async fn open(path: PathBuf, fsync: bool) -> Result<Self> {
        Self::open_with_compaction(path, fsync, COMPACT_MIN_DEAD).await
    }

    /// [`MetaStore::open`], compacting from `compact_min_dead` dead bytes on.
    pub(crate) async fn open_with_compaction(
        path: PathBuf,
        fsync: bool,
        compact_min_dead: u64,
    ) -> Result<Self> {
        let log_path = path.clone();
        let replayed = blocking(move || replay(&log_path, fsync)).await?;
        let nodes: NodeMap = Arc::new(RwLock::new(replayed.nodes));
        let log = Log {
            path,
            file: replayed.file,
            len: replayed.len,
            live: replayed.live,
            fsync,
            nodes: nodes.clone(),
            compact_min_dead,
            compact_at: compact_min_dead,
            zeroed: ZeroedAhead::default(),
        };
        let writer = GroupCommit::start("metadata log", log)?;
        Ok(MetaStore { nodes, writer })
    }

    /// Stores `nodes`; returns once they are in the log (and synced when fsync is enabled).
    /// Keys already present are skipped: nodes are immutable, so they hold the same content.
    /// (A node deleted before this call is not present, so it is stored again.)
    pub async fn put_nodes(&self, nodes: Vec<(NodeKey, Node)>) -> Result<()> {
        let fresh: Vec<(NodeKey, Node)> = {
            let map = self.read_map();
            nodes
                .into_iter()
                .filter(|(key, _)| !map.contains_key(key))
                .collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let mut records = Vec::new();
        let mut sized = Vec::with_capacity(fresh.len());
        for (key, node) in fresh {
            let before = records.len();
            encode_record(&mut records, &key, &node)?;
            let size = (records.len() - before) as u64;
            sized.push((key, node, size));
        }
        let size = records.len();
        self.writer
            .submit(
                Commit::Put {
                    records,
                    nodes: sized,
                },
                size,
            )
            .await
    }

    /// Deletes the nodes among `keys` held here; returns once their tombstones are in the
    /// log (and synced when fsync is enabled).
    pub async fn delete_nodes(&self, keys: Vec<NodeKey>) -> Result<()> {
        let mut held: Vec<NodeKey> = {
            let map = self.read_map();
            keys.into_iter().filter(|k| map.contains_key(k)).collect()
        };
        held.sort_unstable();
        held.dedup();
        if held.is_empty() {
            return Ok(());
        }
        let mut records = Vec::new();
        for key in &held {
            encode_tombstone(&mut records, key)?;
        }
        let size = records.len();
        self.writer
            .submit(
                Commit::Delete {
                    records,
                    keys: held,
                },
                size,
            )
            .await
    }

    /// The keys held of each `(blob, from, to)`: the nodes of `blob` with a version in
    /// `[from, to)`. Scans the shard (in memory): for deletions of whole blobs and of
    /// given-up versions, which are rare.
    pub fn keys_in(&self, ranges: &[(BlobId, Version, Version)]) -> Vec<NodeKey> {
        let map = self.read_map();
        map.keys()
            .filter(|k| {
                ranges
                    .iter()
                    .any(|&(b, from, to)| k.blob == b && (from..to).contains(&k.node.version))
            })
            .copied()
            .collect()
    }

    /// The keys held after `start_after` in key order, at most `limit`. Copies the keys out
    /// under the lock and orders them after releasing it.
    pub fn list_keys(&self, start_after: Option<NodeKey>, limit: usize) -> Vec<NodeKey> {
        let mut keys: Vec<NodeKey> = {
            let map = self.read_map();
            map.keys()
                .filter(|k| start_after.is_none_or(|after| **k > after))
                .copied()
                .collect()
        };
        if keys.len() > limit {
            keys.select_nth_unstable(limit);
            keys.truncate(limit);
        }
        keys.sort_unstable();
        keys
    }

    /// The nodes for `keys`, in the same order (`None`: not stored here).
    pub fn get_nodes(&self, keys: &[NodeKey]) -> Vec<Option<Node>> {
        let found: Vec<Option<Arc<Node>>> = {
            let map = self.read_map();
            keys.iter().map(|key| map.get(key).cloned()).collect()
        };
        // Deep copies are made after releasing the lock so writers are not held up.
        found
            .into_iter()
            .map(|node| node.map(|n| Node::clone(&n)))
            .collect()
    }

    /// Nodes of `blob` held here on the way from `start` down to any of `targets`, depth
    /// first, at most `limit`; a child this shard does not hold ends that branch.
    pub fn path(
        &self,
        blob: BlobId,
        start: NodeRef,
        targets: &[Span],
        limit: usize,
    ) -> Vec<(NodeRef, Node)> {
        let found: Vec<(NodeRef, Arc<Node>)> = {
            let map = self.read_map();
            let mut found = Vec::new();
            let mut stack = vec![start];
            while let Some(at) = stack.pop() {
                if found.len() >= limit {
                    break;
                }
                let Some(node) = map.get(&NodeKey { blob, node: at }) else {
                    continue;
                };
                if let Node::Inner { left, right } = &**node {
                    let half = at.size / 2;
                    let halves = [(at.offset, left), (at.offset + half, right)];
                    for (offset, child) in halves.into_iter().rev() {
                        if let Some(c) = child {
                            let slot = Span::new(offset, half);
                            if targets.iter().any(|t| slot.intersects(t)) {
                                stack.push(*c);
                            }
                        }
                    }
                }
                found.push((at, node.clone()));
            }
            found
        };
        found
            .into_iter()
            .map(|(r, n)| (r, Node::clone(&n)))
            .collect()
    }

    fn read_map(&self) -> std::sync::RwLockReadGuard<'_, HashMap<NodeKey, Arc<Node>>> {
        self.nodes.read().unwrap_or_else(PoisonError::into_inner)
    }
}
