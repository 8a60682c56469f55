//! This provider's shard of the metadata DHT: tree nodes in memory, made durable by an
//! append-only log.
//!
//! Log record: `[u32 LE payload length][u32 LE CRC32C of payload][payload]`. The payload is
//! bincode((NodeKey, Node)) for a stored node; when the top bit of the length field is set the
//! record is a tombstone and its payload bincode(NodeKey) of a deleted node. Replay applies
//! records in order, so a node stored again after its deletion is back. A crash can leave a
//! torn record at the end; it is cut off when the log is replayed. Writes go through one
//! writer thread that combines the batches of concurrent callers, so a single fdatasync
//! acknowledges many of them (see [`crate::group_commit`]).
//!
//! Compaction: once most of the log (at least half, and at least [`COMPACT_MIN_DEAD`] bytes)
//! is records of deleted nodes and tombstones, the writer thread writes the live nodes to a
//! temporary file, syncs it and renames it over the log. A crash leaves either log whole.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use bincode::Options;
use tomus_metadata::{BlobId, Node, NodeKey, NodeRef, Span};
use tomus_wire::{Error, Result};

use crate::group_commit::{append, drop_torn_tail, GroupCommit};
use crate::{blocking, io_error, sync_dir};

const RECORD_HEADER: u64 = 8;
/// Set in a record's length field: the record is a tombstone.
const TOMBSTONE: u32 = 1 << 31;
/// Dead bytes below which the log is never compacted.
pub const COMPACT_MIN_DEAD: u64 = 64 << 20;
/// Suffix of the file a compaction writes before renaming it over the log.
const COMPACT_SUFFIX: &str = ".compact";

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

/// A record read back from the log.
enum Record {
    Put(NodeKey, Node),
    Delete(NodeKey),
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
        let replayed = blocking(move || {
            replay(&log_path, fsync).map_err(|e| {
                io_error(
                    format_args!("opening metadata log {}", log_path.display()),
                    e,
                )
            })
        })
        .await?;
        let nodes: NodeMap = Arc::new(RwLock::new(replayed.nodes));
        let mut log = Log {
            path,
            file: replayed.file,
            len: replayed.len,
            live: replayed.live,
            fsync,
            nodes: nodes.clone(),
            compact_min_dead,
            compact_at: compact_min_dead,
        };
        let writer = GroupCommit::start("metadata log", move |group| log.commit(group))?;
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

/// The writer's side of the log, owned by the group-commit thread.
struct Log {
    path: PathBuf,
    file: File,
    /// End of the valid log: where the next group goes.
    len: u64,
    /// Bytes of the records of the nodes in the map; the rest of the log is dead.
    live: u64,
    fsync: bool,
    nodes: NodeMap,
    compact_min_dead: u64,
    /// Dead bytes from which compaction is tried (raised after a failed attempt).
    compact_at: u64,
}

impl Log {
    /// Writes a group of batches with one write and one fdatasync, then applies them to the
    /// map, and compacts the log if it is mostly dead.
    fn commit(&mut self, group: Vec<Commit>) -> Result<()> {
        let size = group.iter().map(|c| c.records().len()).sum();
        let mut buf = Vec::with_capacity(size);
        for commit in &group {
            buf.extend_from_slice(commit.records());
        }
        append(&self.file, self.len, &buf, self.fsync)
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
        let tmp = compact_path(&self.path);
        let (file, len) = match write_snapshot(&tmp, &snapshot)
            .and_then(|written| fs::rename(&tmp, &self.path).map(|()| written))
        {
            Ok(written) => written,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        // The path names the new file now: appends must go there, whatever happens next.
        self.file = file;
        self.len = len;
        self.live = len;
        sync_dir(parent_dir(&self.path))
    }
}

/// Writes `nodes` as a new log at `path`, synced (always: it is about to replace the whole
/// log). Returns the file, open for appending, and its length.
fn write_snapshot(path: &Path, nodes: &[(NodeKey, Arc<Node>)]) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    let mut record = Vec::new();
    let mut len = 0u64;
    for (key, node) in nodes {
        record.clear();
        encode_record(&mut record, key, node).map_err(|e| io::Error::other(e.message))?;
        out.write_all(&record)?;
        len += record.len() as u64;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    Ok((file, len))
}

fn compact_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(COMPACT_SUFFIX);
    PathBuf::from(name)
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The bincode configuration `bincode::serialize` uses, with a size limit so a damaged length
/// prefix inside a record cannot trigger a huge allocation.
fn codec(limit: u64) -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(limit)
}

/// Size of a node's record in the log.
fn record_size(key: &NodeKey, node: &Node) -> u64 {
    RECORD_HEADER + bincode::serialized_size(&(key, node)).unwrap_or(0)
}

fn encode_record(out: &mut Vec<u8>, key: &NodeKey, node: &Node) -> Result<()> {
    let payload = bincode::serialize(&(key, node))
        .map_err(|e| Error::internal(format!("encoding metadata node: {e}")))?;
    frame(out, &payload, 0)
}

fn encode_tombstone(out: &mut Vec<u8>, key: &NodeKey) -> Result<()> {
    let payload = bincode::serialize(key)
        .map_err(|e| Error::internal(format!("encoding metadata key: {e}")))?;
    frame(out, &payload, TOMBSTONE)
}

/// Appends a record of `payload` with `flags` in its length field.
fn frame(out: &mut Vec<u8>, payload: &[u8], flags: u32) -> Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| len & TOMBSTONE == 0)
        .ok_or_else(|| Error::invalid("metadata node too large for the log"))?;
    out.extend_from_slice(&(len | flags).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Why replay stopped before the end of the log.
type Damage = String;

/// Reads the record at the reader's position, `remaining` bytes before the end of the file.
/// Returns the record and its size on disk, or what is wrong with it.
fn read_record(
    reader: &mut impl Read,
    remaining: u64,
) -> io::Result<Result<(Record, u64), Damage>> {
    if remaining < RECORD_HEADER {
        return Ok(Err(format!("{remaining} bytes of a record header")));
    }
    let mut header = [0u8; RECORD_HEADER as usize];
    reader.read_exact(&mut header)?;
    let field = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let tombstone = field & TOMBSTONE != 0;
    let len = u64::from(field & !TOMBSTONE);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > remaining - RECORD_HEADER {
        return Ok(Err(format!(
            "record of {len} bytes with only {} bytes left",
            remaining - RECORD_HEADER
        )));
    }
    let mut payload = vec![0u8; len as usize];
    reader.read_exact(&mut payload)?;
    if crc32c::crc32c(&payload) != crc {
        return Ok(Err("checksum mismatch".into()));
    }
    let record = if tombstone {
        codec(len)
            .deserialize::<NodeKey>(&payload)
            .map(Record::Delete)
    } else {
        codec(len)
            .deserialize::<(NodeKey, Node)>(&payload)
            .map(|(key, node)| Record::Put(key, node))
    };
    Ok(record
        .map(|r| (r, RECORD_HEADER + len))
        .map_err(|e| format!("undecodable record: {e}")))
}

/// What replaying the log found.
struct Replayed {
    file: File,
    /// Length of the intact records.
    len: u64,
    /// Bytes of the records of the nodes held.
    live: u64,
    nodes: HashMap<NodeKey, Arc<Node>>,
}

/// Opens the log, applies every intact record and cuts the file after the last one.
fn replay(path: &Path, fsync: bool) -> io::Result<Replayed> {
    // What a compaction that did not finish left behind.
    match fs::remove_file(compact_path(path)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let file_len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, &file);
    let mut map = HashMap::new();
    let mut live = 0u64;
    let mut pos = 0u64;
    while pos < file_len {
        match read_record(&mut reader, file_len - pos)? {
            Ok((record, size)) => {
                let gone = match record {
                    Record::Put(key, node) => {
                        live += size;
                        map.insert(key, Arc::new(node)).map(|old| (key, old))
                    }
                    Record::Delete(key) => map.remove(&key).map(|old| (key, old)),
                };
                if let Some((key, old)) = gone {
                    live = live.saturating_sub(record_size(&key, &old));
                }
                pos += size;
            }
            Err(damage) => {
                drop_torn_tail(&file, path, "metadata log", pos, &damage, fsync)?;
                break;
            }
        }
    }
    drop(reader);
    Ok(Replayed {
        file,
        len: pos,
        live,
        nodes: map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use tomus_metadata::{ChunkId, ChunkPiece, NodeRef};

    fn key(blob: u64, version: u64) -> NodeKey {
        NodeKey {
            blob,
            node: NodeRef {
                version,
                offset: version * 4096,
                size: 4096,
            },
        }
    }

    fn leaf(seed: u64) -> Node {
        Node::Leaf {
            pieces: vec![ChunkPiece {
                start: seed * 4096,
                len: 4096,
                chunk: ChunkId(u128::from(seed) << 64 | 5),
                chunk_offset: 0,
                replicas: vec![1, 2, 3],
            }],
            layers: Vec::new(),
            inherited: Vec::new(),
            base: None,
            depth: 0,
        }
    }

    fn log(dir: &TempDir) -> PathBuf {
        dir.path().join("meta.log")
    }

    #[tokio::test]
    async fn path_follows_the_range_and_stops_at_missing_nodes() {
        let dir = TempDir::new("meta-path");
        let store = MetaStore::open(log(&dir), false).await.unwrap();
        let r = |version, offset, size| NodeRef {
            version,
            offset,
            size,
        };
        let at = |node| NodeKey { blob: 1, node };
        // Version 5: root [0, 16K) over [0, 8K) (version 5) and [8K, 16K) (version 3, which
        // this shard does not hold); [0, 8K) over leaves [0, 4K) and [4K, 8K).
        let inner = |left, right| Node::Inner { left, right };
        store
            .put_nodes(vec![
                (
                    at(r(5, 0, 16384)),
                    inner(Some(r(5, 0, 8192)), Some(r(3, 8192, 8192))),
                ),
                (
                    at(r(5, 0, 8192)),
                    inner(Some(r(5, 0, 4096)), Some(r(5, 4096, 4096))),
                ),
                (at(r(5, 0, 4096)), leaf(1)),
                (at(r(5, 4096, 4096)), leaf(2)),
            ])
            .await
            .unwrap();
        let refs =
            |nodes: Vec<(NodeRef, Node)>| nodes.into_iter().map(|(r, _)| r).collect::<Vec<_>>();
        let toward_second_leaf = store.path(1, r(5, 0, 16384), &[Span::new(5000, 1)], 64);
        assert_eq!(
            refs(toward_second_leaf),
            vec![r(5, 0, 16384), r(5, 0, 8192), r(5, 4096, 4096)]
        );
        let into_missing = store.path(1, r(5, 0, 16384), &[Span::new(9000, 1)], 64);
        assert_eq!(refs(into_missing), vec![r(5, 0, 16384)]);
        let limited = store.path(1, r(5, 0, 16384), &[Span::new(0, 16384)], 2);
        // Both borders of a write in one request: both branches, in depth-first order.
        let borders = store.path(
            1,
            r(5, 0, 16384),
            &[Span::new(100, 1), Span::new(5000, 1)],
            64,
        );
        assert_eq!(
            refs(borders),
            vec![
                r(5, 0, 16384),
                r(5, 0, 8192),
                r(5, 0, 4096),
                r(5, 4096, 4096)
            ]
        );
        assert_eq!(limited.len(), 2);
        assert!(store
            .path(2, r(5, 0, 16384), &[Span::new(0, 1)], 64)
            .is_empty());
    }

    #[tokio::test]
    async fn put_get_and_replay() {
        let dir = TempDir::new("meta");
        let store = MetaStore::open(log(&dir), true).await.unwrap();
        let nodes: Vec<_> = (0..10).map(|i| (key(1, i), leaf(i))).collect();
        store.put_nodes(nodes.clone()).await.unwrap();
        // Putting existing keys again is fine.
        store.put_nodes(nodes[..3].to_vec()).await.unwrap();
        store.put_nodes(Vec::new()).await.unwrap();
        let inner = Node::Inner {
            left: Some(key(1, 0).node),
            right: None,
        };
        store
            .put_nodes(vec![(key(2, 1), inner.clone())])
            .await
            .unwrap();

        let got = store.get_nodes(&[key(1, 4), key(9, 9), key(2, 1)]);
        assert_eq!(got, vec![Some(leaf(4)), None, Some(inner.clone())]);
        drop(store);

        let store = MetaStore::open(log(&dir), true).await.unwrap();
        let keys: Vec<_> = (0..10).map(|i| key(1, i)).collect();
        let got = store.get_nodes(&keys);
        assert!(got.iter().zip(0..).all(|(n, i)| *n == Some(leaf(i))));
        assert_eq!(store.get_nodes(&[key(2, 1)]), vec![Some(inner)]);
    }

    #[tokio::test]
    async fn torn_tail_is_dropped() {
        let dir = TempDir::new("meta-torn");
        let store = MetaStore::open(log(&dir), true).await.unwrap();
        store.put_nodes(vec![(key(1, 1), leaf(1))]).await.unwrap();
        store.put_nodes(vec![(key(1, 2), leaf(2))]).await.unwrap();
        let good_len = std::fs::metadata(log(&dir)).unwrap().len();
        store.put_nodes(vec![(key(1, 3), leaf(3))]).await.unwrap();
        drop(store);

        // Cut the last record in the middle.
        let full = std::fs::metadata(log(&dir)).unwrap().len();
        let file = OpenOptions::new().write(true).open(log(&dir)).unwrap();
        file.set_len((good_len + full) / 2).unwrap();
        drop(file);

        let store = MetaStore::open(log(&dir), true).await.unwrap();
        assert_eq!(
            store.get_nodes(&[key(1, 1), key(1, 2), key(1, 3)]),
            vec![Some(leaf(1)), Some(leaf(2)), None]
        );
        assert_eq!(std::fs::metadata(log(&dir)).unwrap().len(), good_len);

        // New records after the cut replay too.
        store.put_nodes(vec![(key(1, 4), leaf(4))]).await.unwrap();
        drop(store);
        let store = MetaStore::open(log(&dir), true).await.unwrap();
        assert_eq!(
            store.get_nodes(&[key(1, 2), key(1, 4)]),
            vec![Some(leaf(2)), Some(leaf(4))]
        );
    }

    #[tokio::test]
    async fn corrupt_record_stops_replay() {
        let dir = TempDir::new("meta-corrupt");
        let store = MetaStore::open(log(&dir), false).await.unwrap();
        store.put_nodes(vec![(key(1, 1), leaf(1))]).await.unwrap();
        let good_len = std::fs::metadata(log(&dir)).unwrap().len();
        store.put_nodes(vec![(key(1, 2), leaf(2))]).await.unwrap();
        drop(store);

        let mut raw = std::fs::read(log(&dir)).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        std::fs::write(log(&dir), &raw).unwrap();

        let store = MetaStore::open(log(&dir), false).await.unwrap();
        assert_eq!(
            store.get_nodes(&[key(1, 1), key(1, 2)]),
            vec![Some(leaf(1)), None]
        );
        assert_eq!(std::fs::metadata(log(&dir)).unwrap().len(), good_len);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_puts_are_all_durable() {
        let dir = TempDir::new("meta-concurrent");
        let store = Arc::new(MetaStore::open(log(&dir), true).await.unwrap());
        let mut tasks = Vec::new();
        for t in 0..16u64 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20u64 {
                    let batch = (0..5).map(|j| (key(t, i * 5 + j), leaf(t * 1000 + i * 5 + j)));
                    store.put_nodes(batch.collect()).await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        drop(store);

        let store = MetaStore::open(log(&dir), true).await.unwrap();
        for t in 0..16u64 {
            let keys: Vec<_> = (0..100).map(|i| key(t, i)).collect();
            let got = store.get_nodes(&keys);
            for (i, node) in got.into_iter().enumerate() {
                assert_eq!(node, Some(leaf(t * 1000 + i as u64)), "task {t} node {i}");
            }
        }
    }

    #[tokio::test]
    async fn list_keys_pages_in_key_order() {
        let dir = TempDir::new("meta-list");
        let store = MetaStore::open(log(&dir), false).await.unwrap();
        let mut keys: Vec<NodeKey> = (0..45u64).map(|i| key(i % 3 + 1, (i * 17) % 45)).collect();
        // Stored out of order.
        store
            .put_nodes(
                keys.iter()
                    .rev()
                    .map(|k| (*k, leaf(k.node.version)))
                    .collect(),
            )
            .await
            .unwrap();
        keys.sort();
        let (mut all, mut pages, mut cursor) = (Vec::new(), Vec::new(), None);
        loop {
            let page = store.list_keys(cursor, 10);
            if page.is_empty() {
                break;
            }
            pages.push(page.len());
            cursor = page.last().copied();
            all.extend(page);
        }
        assert_eq!(pages, vec![10, 10, 10, 10, 5]);
        assert_eq!(all, keys);
        assert!(store.list_keys(None, 0).is_empty());
        assert_eq!(store.list_keys(Some(keys[40]), 100), keys[41..].to_vec());
        // After a key not held.
        let between = NodeKey {
            blob: 2,
            node: NodeRef {
                version: 0,
                offset: 1,
                size: 0,
            },
        };
        let after: Vec<_> = keys.iter().copied().filter(|k| *k > between).collect();
        assert_eq!(store.list_keys(Some(between), 100), after);
    }

    #[tokio::test]
    async fn deletes_survive_reopen_and_deleted_nodes_can_come_back() {
        let dir = TempDir::new("meta-delete");
        let store = MetaStore::open(log(&dir), true).await.unwrap();
        let nodes: Vec<_> = (0..10).map(|i| (key(1, i), leaf(i))).collect();
        store.put_nodes(nodes.clone()).await.unwrap();
        // An unknown key and a repeated one are ignored.
        store
            .delete_nodes(vec![key(1, 2), key(1, 5), key(9, 9), key(1, 2)])
            .await
            .unwrap();
        let got = store.get_nodes(&[key(1, 1), key(1, 2), key(1, 5)]);
        assert_eq!(got, vec![Some(leaf(1)), None, None]);
        drop(store);

        let store = MetaStore::open(log(&dir), true).await.unwrap();
        let listed = store.list_keys(None, 100);
        let expected: Vec<_> = (0..10)
            .filter(|i| ![2, 5].contains(i))
            .map(|i| key(1, i))
            .collect();
        assert_eq!(listed, expected);
        // Repair stores a deleted node again: it is written, not skipped as known.
        store.put_nodes(vec![(key(1, 2), leaf(2))]).await.unwrap();
        assert_eq!(store.get_nodes(&[key(1, 2)]), vec![Some(leaf(2))]);
        drop(store);

        let store = MetaStore::open(log(&dir), true).await.unwrap();
        assert_eq!(
            store.get_nodes(&[key(1, 2), key(1, 5), key(1, 9)]),
            vec![Some(leaf(2)), None, Some(leaf(9))]
        );
        assert_eq!(store.list_keys(None, 100).len(), 9);
    }

    #[tokio::test]
    async fn compaction_keeps_exactly_the_live_nodes() {
        let dir = TempDir::new("meta-compact");
        // Compacts as soon as half the log is dead.
        let open = || MetaStore::open_with_compaction(log(&dir), true, 1);
        let store = open().await.unwrap();
        let nodes: Vec<_> = (0..20).map(|i| (key(1, i), leaf(i))).collect();
        store.put_nodes(nodes.clone()).await.unwrap();
        let full = std::fs::metadata(log(&dir)).unwrap().len();
        let live_size = |keys: &[u64]| -> u64 {
            keys.iter()
                .map(|&i| record_size(&key(1, i), &leaf(i)))
                .sum()
        };
        assert_eq!(full, live_size(&(0..20).collect::<Vec<_>>()));
        // 4 of 20 nodes dead (their records and tombstones are less than half the log): not
        // yet.
        store
            .delete_nodes((0..4).map(|i| key(1, i)).collect())
            .await
            .unwrap();
        assert!(std::fs::metadata(log(&dir)).unwrap().len() > full);
        // 15 of 20: the log is rewritten with the 5 left.
        store
            .delete_nodes((4..15).map(|i| key(1, i)).collect())
            .await
            .unwrap();
        let left: Vec<u64> = (15..20).collect();
        assert_eq!(
            std::fs::metadata(log(&dir)).unwrap().len(),
            live_size(&left)
        );
        assert!(!compact_path(&log(&dir)).exists());

        // Appends go to the new log; a deleted node comes back; all of it survives a reopen.
        store.put_nodes(vec![(key(1, 3), leaf(3))]).await.unwrap();
        store.delete_nodes(vec![key(1, 19)]).await.unwrap();
        drop(store);
        let store = open().await.unwrap();
        let expected: Vec<NodeKey> = [3, 15, 16, 17, 18].iter().map(|&i| key(1, i)).collect();
        assert_eq!(store.list_keys(None, 100), expected);
        for k in expected {
            assert_eq!(store.get_nodes(&[k]), vec![Some(leaf(k.node.version))]);
        }
        // A leftover of a compaction interrupted by a crash is removed at startup.
        drop(store);
        std::fs::write(compact_path(&log(&dir)), b"partial").unwrap();
        let store = open().await.unwrap();
        assert!(!compact_path(&log(&dir)).exists());
        assert_eq!(store.list_keys(None, 100).len(), 5);
    }
}
