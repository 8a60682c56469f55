//! What the store must keep: every chunk and metadata node reachable from the retained
//! versions of every blob, found by walking their segment trees.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tomus_client::cluster::Cluster;
use tomus_client::dht::DhtSource;
use tomus_client::listing;
use tomus_metadata::{BlobId, ChunkId, Node, NodeKey, NodeRef, NodeSource, Version};
use tomus_wire::{BlobInfo, Fate, Result};

/// Nodes fetched per request wave while walking a tree.
const FETCH_WAVE: usize = 256;

/// A referenced chunk: the replication it needs (the highest of the blobs referring to it).
pub struct ChunkRef {
    pub replication: u32,
    /// Whether a leaf the maintenance ledger has counted refers to it (a leaf of a version at
    /// or below the blob's last counted one): then the ledger must track it.
    pub counted: bool,
}

/// A referenced metadata node, with its content (to copy it) and the replication it needs.
pub struct NodeEntry {
    pub node: Arc<Node>,
    pub replication: u32,
}

/// The references found by one scan.
#[derive(Default)]
pub struct References {
    pub chunks: HashMap<ChunkId, ChunkRef>,
    pub nodes: HashMap<NodeKey, NodeEntry>,
    /// Per blob scanned: its first retained version when the scan read its version list
    /// (0: none published). Garbage collection deletes the nodes of expired versions only
    /// below it: a version that expired later may be referenced by versions published since.
    pub first_retained: HashMap<BlobId, Version>,
    /// Blobs the ledger tracked when the scan began.
    pub tracked: HashSet<BlobId>,
    /// Blobs whose every retained version the ledger had counted when the scan read them.
    pub caught_up: HashSet<BlobId>,
    /// Nodes that could not be read (their only copies are on providers that are down):
    /// what lies below them is unknown, so nothing may be garbage-collected.
    pub unreadable: u64,
}

impl References {
    /// Whether garbage collection may delete a node nothing references, given what the
    /// manager positively knows of its version ([`Fate`]). Deletion is never inferred from
    /// a blob or a version missing from a listing.
    ///
    /// The maintenance ledger may still have to read a blob's nodes (to count its versions
    /// published since the ledger last looked, or the previous tree they replaced): those of
    /// a deleted blob are left alone until the ledger saw the deletion, those of expired
    /// versions until the ledger counted every version the scan saw.
    pub fn node_is_garbage(&self, key: &NodeKey, fate: Fate) -> bool {
        if self.nodes.contains_key(key) {
            return false;
        }
        match fate {
            Fate::Aborted => true,
            Fate::Deleted => !self.tracked.contains(&key.blob),
            Fate::Expired => {
                self.caught_up.contains(&key.blob)
                    && self
                        .first_retained
                        .get(&key.blob)
                        .is_some_and(|&first| key.node.version < first)
            }
            Fate::Live | Fate::Unknown => false,
        }
    }
}

/// Walks every retained version of every blob.
pub async fn scan(cluster: &Cluster, counted: &HashMap<BlobId, Version>) -> Result<References> {
    let blobs = listing::blobs(cluster).await?;
    let mut refs = References {
        tracked: counted.keys().copied().collect(),
        ..References::default()
    };
    for blob in &blobs {
        let counted = counted.get(&blob.id).copied().unwrap_or(0);
        scan_blob(cluster, blob, counted, &mut refs).await?;
    }
    if refs.unreadable > 0 {
        tracing::warn!(
            "{} metadata nodes are unreadable on every live provider",
            refs.unreadable
        );
    }
    Ok(refs)
}

async fn scan_blob(
    cluster: &Cluster,
    blob: &BlobInfo,
    counted: Version,
    refs: &mut References,
) -> Result<()> {
    let versions = match listing::versions(cluster, blob.id, 0).await {
        Ok(v) => v.versions,
        // Deleted since it was listed: nothing of it to keep.
        Err(e) if e.kind == tomus_wire::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let first = versions.iter().map(|v| v.version).min().unwrap_or(0);
    refs.first_retained.insert(blob.id, first);
    if versions.last().is_some_and(|v| v.version <= counted) {
        refs.caught_up.insert(blob.id);
    }
    let mut frontier: Vec<NodeRef> = versions
        .iter()
        .filter(|v| v.capacity > 0)
        .map(|v| NodeRef {
            version: v.version,
            offset: 0,
            size: v.capacity,
        })
        .collect();
    let mut seen: HashSet<NodeRef> = frontier.iter().copied().collect();
    let source = DhtSource {
        cluster,
        blob: blob.id,
    };
    while !frontier.is_empty() {
        let wave: Vec<NodeRef> = frontier.drain(..frontier.len().min(FETCH_WAVE)).collect();
        let fetches = wave.iter().map(|r| source.fetch(std::slice::from_ref(r)));
        let fetched = futures::future::join_all(fetches).await;
        for (at, found) in wave.into_iter().zip(fetched) {
            // Keep walking the rest of the tree: repair must not stop at the first loss.
            let node = match found.map(|mut n| n.pop()) {
                Ok(Some(node)) => node,
                Ok(None) => continue,
                Err(e) => {
                    tracing::debug!("blob {}: node {at:?} unreadable: {e}", blob.id);
                    refs.unreadable += 1;
                    continue;
                }
            };
            for child in children(&node) {
                if seen.insert(child) {
                    frontier.push(child);
                }
            }
            for chunk in chunks_of(&node) {
                let r = refs.chunks.entry(chunk).or_insert(ChunkRef {
                    replication: 0,
                    counted: false,
                });
                r.replication = r.replication.max(blob.replication);
                r.counted |= at.version <= counted;
            }
            refs.nodes.insert(
                NodeKey {
                    blob: blob.id,
                    node: at,
                },
                NodeEntry {
                    node,
                    replication: blob.replication,
                },
            );
        }
    }
    Ok(())
}

/// The nodes a node refers to: an inner node's children, a leaf's layers and base.
fn children(node: &Node) -> Vec<NodeRef> {
    match node {
        Node::Inner { left, right } => left.iter().chain(right.iter()).copied().collect(),
        Node::Leaf { layers, base, .. } => layers.iter().chain(base.iter()).copied().collect(),
    }
}

/// The stored chunks a leaf's own and inherited pieces are cut from.
fn chunks_of(node: &Node) -> Vec<ChunkId> {
    match node {
        Node::Inner { .. } => Vec::new(),
        Node::Leaf {
            pieces, inherited, ..
        } => pieces
            .iter()
            .chain(inherited)
            .map(|p| p.chunk)
            .filter(|c| *c != ChunkId::ZEROS)
            .collect(),
    }
}
