//! The metadata DHT as seen from a client: consistent hashing of node keys over providers,
//! replicated puts, lookups that fail over between replicas, and a cache of immutable nodes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use tomus_metadata::{BlobId, Node, NodeKey, NodeRef, NodeSource, ProviderId, Span};
use tomus_wire::{unexpected, Error, ErrorKind, Request, Response, Result};

use crate::cluster::Cluster;

/// Nodes asked for per path request: both border paths of a write in a very large blob.
const PATH_LIMIT: u32 = 64;
/// Points per provider on the ring, so keys spread evenly over few providers.
const VIRTUAL_NODES: u64 = 64;
/// Nodes kept in one cache generation (two generations approximate LRU).
const CACHE_GENERATION: usize = 200_000;

/// SplitMix64 finalizer: a stable hash (the ring must agree across processes and builds).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Ring position of a node: all nodes of one version share it, so a writer stores a version's
/// nodes with one request per replica, and versions spread over the providers.
pub fn key_hash(key: &NodeKey) -> u64 {
    mix(mix(key.blob) ^ key.node.version)
}

/// Consistent-hash ring over provider ids.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    points: Vec<(u64, ProviderId)>,
    providers: usize,
}

impl Ring {
    pub fn new(providers: &[ProviderId]) -> Self {
        let mut points: Vec<(u64, ProviderId)> = providers
            .iter()
            .flat_map(|&p| (0..VIRTUAL_NODES).map(move |i| (mix(((p as u64) << 32) | i), p)))
            .collect();
        points.sort_unstable();
        Ring {
            points,
            providers: providers.len(),
        }
    }

    /// Every provider in ring order starting at `key`'s position: the first `r` are its owners,
    /// the rest are where to look when membership changed since the node was written.
    pub fn walk(&self, key: &NodeKey) -> Vec<ProviderId> {
        let mut out = Vec::with_capacity(self.providers);
        if self.points.is_empty() {
            return out;
        }
        let h = key_hash(key);
        let start = self.points.partition_point(|(p, _)| *p < h);
        for i in 0..self.points.len() {
            let (_, id) = self.points[(start + i) % self.points.len()];
            if !out.contains(&id) {
                out.push(id);
                if out.len() == self.providers {
                    break;
                }
            }
        }
        out
    }
}

type Generation = HashMap<NodeKey, Arc<Node>>;

/// Two-generation cache of immutable nodes: (current, previous).
#[derive(Default)]
pub struct NodeCache {
    gens: Mutex<(Generation, Generation)>,
}

impl NodeCache {
    pub fn get(&self, key: &NodeKey) -> Option<Arc<Node>> {
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = g.0.get(key) {
            return Some(n.clone());
        }
        let n = g.1.remove(key)?;
        g.0.insert(*key, n.clone());
        Some(n)
    }

    pub fn insert(&self, key: NodeKey, node: Arc<Node>) {
        let mut g = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() >= CACHE_GENERATION {
            g.1 = std::mem::take(&mut g.0);
        }
        g.0.insert(key, node);
    }
}

/// Stores `nodes` of `blob` on `replication` ring owners each; succeeds only when every node is
/// on that many distinct providers.
pub async fn put_nodes(
    cluster: &Cluster,
    blob: BlobId,
    replication: u32,
    nodes: Vec<(NodeRef, Node)>,
) -> Result<()> {
    let ring = cluster.ring().await?;
    let mut per_provider: HashMap<ProviderId, Vec<(NodeKey, Node)>> = HashMap::new();
    for (node_ref, node) in nodes {
        let key = NodeKey {
            blob,
            node: node_ref,
        };
        let owners = ring.walk(&key);
        if owners.len() < replication as usize {
            return Err(Error::new(
                ErrorKind::NoSpace,
                format!(
                    "metadata replication {replication} needs {replication} providers, {} known",
                    owners.len()
                ),
            ));
        }
        for id in owners.into_iter().take(replication as usize) {
            per_provider
                .entry(id)
                .or_default()
                .push((key, node.clone()));
        }
        cluster.cache.insert(key, Arc::new(node));
    }
    let puts = per_provider.into_iter().map(|(id, nodes)| async move {
        let addr = cluster.addr_of(id).await?;
        cluster
            .pool
            .call(&addr, &Request::PutNodes { nodes }, &[])
            .await
            .map(|_| ())
    });
    join_all(puts).await.into_iter().collect()
}

/// Node lookups for one blob, through the cache and then the DHT.
pub struct DhtSource<'a> {
    pub cluster: &'a Cluster,
    pub blob: BlobId,
}

impl DhtSource<'_> {
    async fn fetch_one(&self, node: NodeRef) -> Result<Arc<Node>> {
        let key = NodeKey {
            blob: self.blob,
            node,
        };
        if let Some(n) = self.cluster.cache.get(&key) {
            return Ok(n);
        }
        let ring = self.cluster.ring().await?;
        let mut last_err = None;
        for id in ring.walk(&key) {
            let addr = match self.cluster.addr_of(id).await {
                Ok(a) => a,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let req = Request::GetNodes { keys: vec![key] };
            match self.cluster.pool.call(&addr, &req, &[]).await {
                Ok((Response::Nodes(mut found), _)) if found.len() == 1 => {
                    if let Some(node) = found.pop().flatten() {
                        let node = Arc::new(node);
                        self.cluster.cache.insert(key, node.clone());
                        return Ok(node);
                    }
                }
                Ok((other, _)) => last_err = Some(unexpected(&other)),
                Err(e) => {
                    tracing::debug!("metadata lookup on provider {id} failed: {e}");
                    last_err = Some(e)
                }
            }
        }
        Err(match last_err {
            Some(e) if e.kind != ErrorKind::NotFound => e,
            _ => Error::not_found(format!(
                "metadata node {node:?} of blob {} is not stored on any provider",
                self.blob
            )),
        })
    }
}

impl NodeSource for DhtSource<'_> {
    type Error = Error;

    /// Asks the owner of `root` for the paths toward `targets` unless `root` is cached already
    /// (then the paths below it most likely are too).
    async fn prefetch(&self, root: NodeRef, targets: &[Span]) {
        let key = NodeKey {
            blob: self.blob,
            node: root,
        };
        if self.cluster.cache.get(&key).is_some() {
            return;
        }
        let Ok(ring) = self.cluster.ring().await else {
            return;
        };
        let Some(owner) = ring.walk(&key).into_iter().next() else {
            return;
        };
        let Ok(addr) = self.cluster.addr_of(owner).await else {
            return;
        };
        let req = Request::GetPath {
            blob: self.blob,
            start: root,
            targets: targets.to_vec(),
            limit: PATH_LIMIT,
        };
        if let Ok((Response::Path(nodes), _)) = self.cluster.pool.call(&addr, &req, &[]).await {
            for (node, n) in nodes {
                self.cluster.cache.insert(
                    NodeKey {
                        blob: self.blob,
                        node,
                    },
                    Arc::new(n),
                );
            }
        }
    }

    async fn fetch(&self, refs: &[NodeRef]) -> Result<Vec<Arc<Node>>> {
        join_all(refs.iter().map(|r| self.fetch_one(*r)))
            .await
            .into_iter()
            .collect()
    }
}
