//! The metadata DHT as seen from a client: consistent hashing of node keys over providers,
//! replicated puts, lookups that fail over between replicas, and a cache of immutable nodes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use tomus_metadata::{BlobId, Node, NodeKey, NodeRef, NodeSource, ProviderId, Span};
use tomus_wire::{unexpected, Error, ErrorKind, Request, Response, Result};

use crate::cluster::Cluster;

/// Nodes asked for per path request: both border paths of a write in a very large blob.
const PATH_LIMIT: u32 = 64;
/// Points per provider on the ring, so keys spread evenly over few providers.
const VIRTUAL_NODES: u64 = 64;
/// Consecutive versions of a blob sharing a ring position: writers committing to one blob
/// at the same moment store their metadata on the same providers, whose group commit makes it
/// durable with one disk sync; the next run of versions goes elsewhere on the ring.
const VERSION_RUN: u64 = 64;
/// Nodes kept in one cache generation (two generations approximate LRU).
const CACHE_GENERATION: usize = 200_000;

/// SplitMix64 finalizer: a stable hash (the ring must agree across processes and builds).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Ring position of a node: all nodes of one version (and of its run of [`VERSION_RUN`]
/// versions) share it, so a writer stores a version's nodes with one request per replica, and
/// runs of versions spread over the providers.
pub fn key_hash(key: &NodeKey) -> u64 {
    mix(mix(key.blob) ^ (key.node.version / VERSION_RUN))
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

/// Stores `nodes` of `blob` on `replication` distinct providers each; succeeds only when every
/// node is on that many. Each node goes to the first providers of its ring walk that may
/// receive data (alive, not draining); a provider that fails is replaced by the next one of
/// the walk (lookups walk the whole ring, so they find nodes stored past their first owners).
pub async fn put_nodes(
    cluster: &Cluster,
    blob: BlobId,
    replication: u32,
    nodes: Vec<(NodeRef, Node)>,
) -> Result<()> {
    let ring = cluster.ring().await?;
    let r = replication as usize;
    // Per node: the providers still to try, in walk order, and how many copies it still needs.
    let mut pending: Vec<(NodeKey, Arc<Node>, VecDeque<ProviderId>, usize)> = Vec::new();
    for (node_ref, node) in nodes {
        let key = NodeKey {
            blob,
            node: node_ref,
        };
        let candidates: VecDeque<ProviderId> = cluster.writable(&ring.walk(&key)).await?.into();
        if candidates.len() < r {
            return Err(Error::new(
                ErrorKind::NoSpace,
                format!(
                    "metadata replication {replication} needs {replication} live providers, {} available",
                    candidates.len()
                ),
            ));
        }
        let node = Arc::new(node);
        cluster.cache.insert(key, node.clone());
        pending.push((key, node, candidates, r));
    }
    let mut last_err = None;
    while !pending.is_empty() {
        // One request per provider, carrying every node that needs a copy there now.
        let mut batches: HashMap<ProviderId, Vec<usize>> = HashMap::new();
        for (i, (_, _, candidates, needed)) in pending.iter_mut().enumerate() {
            if candidates.len() < *needed {
                return Err(last_err.unwrap_or_else(|| {
                    Error::unavailable("not enough providers accepted the metadata")
                }));
            }
            for id in candidates.drain(..*needed) {
                batches.entry(id).or_default().push(i);
            }
        }
        let puts = batches.into_iter().map(|(id, idx)| {
            let nodes: Vec<(NodeKey, Node)> = idx
                .iter()
                .map(|&i| (pending[i].0, Node::clone(&pending[i].1)))
                .collect();
            async move {
                let outcome = match cluster.addr_of(id).await {
                    Ok(addr) => cluster
                        .pool
                        .call(&addr, &Request::PutNodes { nodes }, &[])
                        .await
                        .map(|_| ()),
                    Err(e) => Err(e),
                };
                (id, idx, outcome)
            }
        });
        let mut still_needed = vec![0usize; pending.len()];
        for (id, idx, outcome) in join_all(puts).await {
            if let Err(e) = outcome {
                tracing::debug!("storing metadata on provider {id} failed: {e}");
                cluster.suspect(id, &e);
                for i in idx {
                    still_needed[i] += 1;
                }
                last_err = Some(e);
            }
        }
        let mut i = 0;
        pending.retain_mut(|entry| {
            entry.3 = still_needed[i];
            i += 1;
            entry.3 > 0
        });
    }
    Ok(())
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
        for id in self.cluster.read_order(&ring.walk(&key)).await {
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
                    self.cluster.suspect(id, &e);
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
        let order = self.cluster.read_order(&ring.walk(&key)).await;
        let Some(&owner) = order.first() else {
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
