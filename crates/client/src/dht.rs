//! The metadata DHT as seen from a client: replicated puts of nodes to their owners on the
//! ring ([`crate::ring`]), lookups that fail over between replicas, and a cache of immutable
//! nodes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use tomus_metadata::{
    BlobId, ChunkId, Node, NodeKey, NodeRef, NodeSource, ProviderId, Span, Version,
};
use tomus_wire::provider::{GetNodes, GetPath, PutNodes, PutSmallWrite};
use tomus_wire::{checksum, Error, ErrorKind, Result};

use crate::cluster::Cluster;
pub use crate::ring::{key_hash, Ring};

/// Nodes asked for per path request: both border paths of a write in a very large blob.
const PATH_LIMIT: u32 = 64;
/// Nodes kept in one cache generation (two generations approximate LRU).
const CACHE_GENERATION: usize = 200_000;
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
            return Err(too_few_providers(replication, candidates.len()));
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
                        .call(&addr, PutNodes { nodes })
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

/// The providers (id and address) that store the nodes of `version` of `blob` first: every
/// node of a version has the same ring position, so the same `replication` owners.
pub async fn version_owners(
    cluster: &Cluster,
    blob: BlobId,
    version: Version,
    replication: u32,
) -> Result<Vec<(ProviderId, String)>> {
    let key = NodeKey {
        blob,
        node: NodeRef {
            version,
            offset: 0,
            size: 0,
        },
    };
    let ring = cluster.ring().await?;
    let writable = cluster.writable(&ring.walk(&key)).await?;
    if writable.len() < replication as usize {
        return Err(too_few_providers(replication, writable.len()));
    }
    let mut owners = Vec::with_capacity(replication as usize);
    for id in writable.into_iter().take(replication as usize) {
        owners.push((id, cluster.addr_of(id).await?));
    }
    Ok(owners)
}

/// Metadata replication `replication` cannot be met with `available` providers.
fn too_few_providers(replication: u32, available: usize) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "metadata replication {replication} needs {replication} live providers, {available} available"
        ),
    )
}

/// Stores a small write whole on each of `owners`, its version's metadata owners: `data` as
/// chunk `id` and the version's `nodes`, in one request each. All must acknowledge.
pub async fn put_small_write(
    cluster: &Cluster,
    blob: BlobId,
    owners: &[(ProviderId, String)],
    nodes: Vec<(NodeRef, Node)>,
    id: ChunkId,
    data: &[u8],
) -> Result<()> {
    let crc = checksum::crc32c(data);
    let keyed: Vec<(NodeKey, Node)> = nodes
        .into_iter()
        .map(|(node, n)| (NodeKey { blob, node }, n))
        .collect();
    for (key, node) in &keyed {
        cluster.cache.insert(*key, Arc::new(node.clone()));
    }
    // The last owner's request takes the nodes, the others a copy (a flattened leaf holds
    // hundreds of pieces).
    let mut keyed = Some(keyed);
    let last = owners.len().saturating_sub(1);
    let puts = owners.iter().enumerate().map(|(i, (p, addr))| {
        let nodes = if i == last {
            keyed.take()
        } else {
            keyed.clone()
        };
        let req = PutSmallWrite {
            nodes: nodes.unwrap_or_default(),
            id,
            crc,
        };
        async move { (*p, cluster.pool.call_with_body(addr, req, data).await) }
    });
    for (p, outcome) in join_all(puts).await {
        if let Err(e) = outcome {
            cluster.suspect(p, &e);
            return Err(e);
        }
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
            let req = GetNodes { keys: vec![key] };
            match self.cluster.pool.call(&addr, req).await {
                Ok(mut found) => {
                    if let Some(node) = found.pop().flatten() {
                        let node = Arc::new(node);
                        self.cluster.cache.insert(key, node.clone());
                        return Ok(node);
                    }
                }
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
        let req = GetPath {
            blob: self.blob,
            start: root,
            targets: targets.to_vec(),
            limit: PATH_LIMIT,
        };
        if let Ok(nodes) = self.cluster.pool.call(&addr, req).await {
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

    /// Cached nodes from the cache; the others with one request per first healthy owner
    /// (the nodes of a version, and of its run of versions, share owners), and whatever that
    /// misses one at a time with failover over the whole ring.
    async fn fetch(&self, refs: &[NodeRef]) -> Result<Vec<Arc<Node>>> {
        let mut out: Vec<Option<Arc<Node>>> = refs
            .iter()
            .map(|r| {
                self.cluster.cache.get(&NodeKey {
                    blob: self.blob,
                    node: *r,
                })
            })
            .collect();
        let missing: Vec<usize> = (0..refs.len()).filter(|&i| out[i].is_none()).collect();
        if missing.len() > 1 {
            self.fetch_grouped(refs, &missing, &mut out).await;
        }
        let rest = (0..refs.len()).filter(|&i| out[i].is_none());
        let fetched =
            join_all(rest.map(|i| async move { (i, self.fetch_one(refs[i]).await) })).await;
        for (i, node) in fetched {
            out[i] = Some(node?);
        }
        out.into_iter()
            .map(|n| n.ok_or_else(|| Error::internal("node fetch left a gap")))
            .collect()
    }
}

impl DhtSource<'_> {
    /// Fetches the nodes at `which` (indexes into `refs`) grouped by their first healthy
    /// owner, one request per owner; fills `out` with what was found. Failures are left for
    /// the one-by-one lookups.
    async fn fetch_grouped(
        &self,
        refs: &[NodeRef],
        which: &[usize],
        out: &mut [Option<Arc<Node>>],
    ) {
        let Ok(ring) = self.cluster.ring().await else {
            return;
        };
        let mut by_owner: HashMap<ProviderId, Vec<usize>> = HashMap::new();
        for &i in which {
            let key = NodeKey {
                blob: self.blob,
                node: refs[i],
            };
            if let Some(&owner) = self.cluster.read_order(&ring.walk(&key)).await.first() {
                by_owner.entry(owner).or_default().push(i);
            }
        }
        let asks = by_owner.into_iter().map(|(owner, idx)| async move {
            let addr = self.cluster.addr_of(owner).await.ok()?;
            let keys = idx
                .iter()
                .map(|&i| NodeKey {
                    blob: self.blob,
                    node: refs[i],
                })
                .collect();
            let found = self
                .cluster
                .pool
                .call(&addr, GetNodes { keys })
                .await
                .ok()?;
            Some((idx, found))
        });
        for (idx, found) in join_all(asks).await.into_iter().flatten() {
            for (i, node) in idx.into_iter().zip(found) {
                if let Some(node) = node {
                    let node = Arc::new(node);
                    self.cluster.cache.insert(
                        NodeKey {
                            blob: self.blob,
                            node: refs[i],
                        },
                        node.clone(),
                    );
                    out[i] = Some(node);
                }
            }
        }
    }
}
