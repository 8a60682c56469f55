//! This provider's shard of the metadata DHT: tree nodes in memory, made durable by an
//! append-only log.
//!
//! Log record: `[u32 LE payload length][u32 LE CRC32C of payload][bincode((NodeKey, Node))]`.
//! A crash can leave a torn record at the end; it is cut off when the log is replayed. Writes
//! go through one writer thread that combines the batches of concurrent callers, so a single
//! fdatasync acknowledges many of them (see [`crate::group_commit`]).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use bincode::Options;
use tomus_metadata::{BlobId, Node, NodeKey, NodeRef, Span};
use tomus_wire::{Error, Result};

use crate::group_commit::{append, drop_torn_tail, GroupCommit};
use crate::{blocking, io_error};

const RECORD_HEADER: u64 = 8;

type NodeMap = Arc<RwLock<HashMap<NodeKey, Arc<Node>>>>;

/// A batch waiting to be written: its encoded records and the nodes to publish once they are
/// durable.
struct Commit {
    records: Vec<u8>,
    nodes: Vec<(NodeKey, Node)>,
}

pub struct MetaStore {
    nodes: NodeMap,
    writer: GroupCommit<Commit>,
}

impl MetaStore {
    /// Opens (creating if needed) the log at `path` and replays it. Starts the writer thread,
    /// which ends when the store is dropped.
    pub async fn open(path: PathBuf, fsync: bool) -> Result<Self> {
        let (file, len, map) = blocking(move || {
            replay(&path, fsync)
                .map_err(|e| io_error(format_args!("opening metadata log {}", path.display()), e))
        })
        .await?;
        let nodes: NodeMap = Arc::new(RwLock::new(map));
        let mut log = Log {
            file,
            len,
            fsync,
            nodes: nodes.clone(),
        };
        let writer = GroupCommit::start("metadata log", move |group| log.commit(group))?;
        Ok(MetaStore { nodes, writer })
    }

    /// Stores `nodes`; returns once they are in the log (and synced when fsync is enabled).
    /// Keys already present are skipped: nodes are immutable, so they hold the same content.
    pub async fn put_nodes(&self, nodes: Vec<(NodeKey, Node)>) -> Result<()> {
        let fresh: Vec<(NodeKey, Node)> = {
            let map = self.nodes.read().unwrap_or_else(PoisonError::into_inner);
            nodes
                .into_iter()
                .filter(|(key, _)| !map.contains_key(key))
                .collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let mut records = Vec::new();
        for (key, node) in &fresh {
            encode_record(&mut records, key, node)?;
        }
        let size = records.len();
        self.writer
            .submit(
                Commit {
                    records,
                    nodes: fresh,
                },
                size,
            )
            .await
    }

    /// The nodes for `keys`, in the same order (`None`: not stored here).
    pub fn get_nodes(&self, keys: &[NodeKey]) -> Vec<Option<Node>> {
        let found: Vec<Option<Arc<Node>>> = {
            let map = self.nodes.read().unwrap_or_else(PoisonError::into_inner);
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
            let map = self.nodes.read().unwrap_or_else(PoisonError::into_inner);
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
}

/// The writer's side of the log, owned by the group-commit thread.
struct Log {
    file: File,
    /// End of the valid log: where the next group goes.
    len: u64,
    fsync: bool,
    nodes: NodeMap,
}

impl Log {
    /// Writes a group of batches with one write and one fdatasync, then publishes its nodes.
    fn commit(&mut self, group: Vec<Commit>) -> Result<()> {
        let size = group.iter().map(|c| c.records.len()).sum();
        let mut buf = Vec::with_capacity(size);
        for commit in &group {
            buf.extend_from_slice(&commit.records);
        }
        append(&self.file, self.len, &buf, self.fsync)
            .map_err(|e| io_error("appending to the metadata log", e))?;
        self.len += size as u64;
        let mut map = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
        for commit in group {
            for (key, node) in commit.nodes {
                map.insert(key, Arc::new(node));
            }
        }
        Ok(())
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

fn encode_record(out: &mut Vec<u8>, key: &NodeKey, node: &Node) -> Result<()> {
    let payload = bincode::serialize(&(key, node))
        .map_err(|e| Error::internal(format!("encoding metadata node: {e}")))?;
    let len = u32::try_from(payload.len())
        .map_err(|_| Error::invalid("metadata node too large for the log"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// Why replay stopped before the end of the log.
type Damage = String;

/// Reads the record at the reader's position, `remaining` bytes before the end of the file.
/// Returns the record and its size on disk, or what is wrong with it.
fn read_record(
    reader: &mut impl Read,
    remaining: u64,
) -> io::Result<Result<(NodeKey, Node, u64), Damage>> {
    if remaining < RECORD_HEADER {
        return Ok(Err(format!("{remaining} bytes of a record header")));
    }
    let mut header = [0u8; RECORD_HEADER as usize];
    reader.read_exact(&mut header)?;
    let len = u64::from(u32::from_le_bytes([
        header[0], header[1], header[2], header[3],
    ]));
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
    match codec(len).deserialize::<(NodeKey, Node)>(&payload) {
        Ok((key, node)) => Ok(Ok((key, node, RECORD_HEADER + len))),
        Err(e) => Ok(Err(format!("undecodable record: {e}"))),
    }
}

/// Opens the log, loads every intact record and cuts the file after the last one.
fn replay(path: &Path, fsync: bool) -> io::Result<(File, u64, HashMap<NodeKey, Arc<Node>>)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let file_len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, &file);
    let mut map = HashMap::new();
    let mut pos = 0u64;
    while pos < file_len {
        match read_record(&mut reader, file_len - pos)? {
            Ok((key, node, size)) => {
                map.insert(key, Arc::new(node));
                pos += size;
            }
            Err(damage) => {
                drop_torn_tail(&file, path, "metadata log", pos, &damage, fsync)?;
                break;
            }
        }
    }
    drop(reader);
    Ok((file, pos, map))
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
}
