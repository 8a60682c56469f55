//! What the store must keep: every chunk and metadata node reachable from the retained
//! versions of every blob, found by walking their segment trees.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tomus_client::cluster::Cluster;
use tomus_client::dht::DhtSource;
use tomus_metadata::{BlobId, ChunkId, Node, NodeKey, NodeRef, NodeSource, Version};
use tomus_wire::{unexpected, BlobInfo, Request, Response, Result};

/// Nodes fetched per request wave while walking a tree.
const FETCH_WAVE: usize = 256;

/// A referenced chunk: the replication it needs (the highest of the blobs referring to it).
pub struct ChunkRef {
    pub replication: u32,
}

/// A referenced metadata node, with its content (to copy it) and the replication it needs.
pub struct NodeEntry {
    pub node: Arc<Node>,
    pub replication: u32,
}

/// The references found by one scan, and the state of the blobs when it started (garbage
/// collection must not touch what was created after that).
#[derive(Default)]
pub struct References {
    pub chunks: HashMap<ChunkId, ChunkRef>,
    pub nodes: HashMap<NodeKey, NodeEntry>,
    /// Blobs at the start of the scan, with their latest published version then.
    pub published: HashMap<BlobId, Version>,
    /// The highest blob id at the start of the scan.
    pub max_blob: BlobId,
    /// Nodes that could not be read (their only copies are on providers that are down):
    /// what lies below them is unknown, so nothing may be garbage-collected.
    pub unreadable: u64,
}

impl References {
    /// Whether garbage collection may delete a node nothing references: its blob was
    /// deleted, or its version was already published when the scan started (so it is an
    /// expired or aborted version's node, not an in-flight writer's).
    pub fn node_is_garbage(&self, key: &NodeKey) -> bool {
        if self.nodes.contains_key(key) {
            return false;
        }
        match self.published.get(&key.blob) {
            Some(&published) => key.node.version <= published,
            None => key.blob <= self.max_blob,
        }
    }
}

/// Walks every retained version of every blob.
pub async fn scan(cluster: &Cluster) -> Result<References> {
    let blobs = match cluster.manager_call(&Request::ListBlobs).await? {
        Response::Blobs(b) => b,
        other => return Err(unexpected(&other)),
    };
    let mut refs = References {
        max_blob: blobs.iter().map(|b| b.id).max().unwrap_or(0),
        published: blobs.iter().map(|b| (b.id, b.latest)).collect(),
        ..References::default()
    };
    for blob in &blobs {
        scan_blob(cluster, blob, &mut refs).await?;
    }
    if refs.unreadable > 0 {
        tracing::warn!(
            "{} metadata nodes are unreadable on every live provider",
            refs.unreadable
        );
    }
    Ok(refs)
}

async fn scan_blob(cluster: &Cluster, blob: &BlobInfo, refs: &mut References) -> Result<()> {
    let versions = match cluster
        .manager_call(&Request::Versions { blob: blob.id })
        .await
    {
        Ok(Response::Versions(v)) => v.versions,
        Ok(other) => return Err(unexpected(&other)),
        // Deleted since it was listed: nothing of it to keep.
        Err(e) if e.kind == tomus_wire::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
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
                let r = refs
                    .chunks
                    .entry(chunk)
                    .or_insert(ChunkRef { replication: 0 });
                r.replication = r.replication.max(blob.replication);
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
