//! What each live provider actually holds, from its own listing: the ground truth repair and
//! garbage collection compare the references against.

use std::collections::HashMap;

use tomus_client::cluster::Cluster;
use tomus_metadata::{ChunkId, NodeKey, ProviderId};
use tomus_wire::provider::{ListChunks, ListNodes};
use tomus_wire::{now_ms, ProviderInfo, Result};

/// Entries asked for per listing request.
const PAGE: u32 = 10_000;

/// A chunk's copies on live providers.
pub struct ChunkCopies {
    pub len: u64,
    pub holders: Vec<(ProviderId, u64)>,
}

#[derive(Default)]
pub struct Inventory {
    /// Providers listed, by id (alive when the pass started).
    pub providers: HashMap<ProviderId, ProviderInfo>,
    pub chunks: HashMap<ChunkId, ChunkCopies>,
    pub nodes: HashMap<NodeKey, Vec<ProviderId>>,
    /// Alive providers whose listing failed: their copies are unknown this pass.
    pub unlisted: Vec<ProviderId>,
}

impl Inventory {
    /// Whether `id` may receive new data and its copies count toward replication.
    pub fn counts(&self, id: ProviderId) -> bool {
        self.providers.get(&id).is_some_and(|p| !p.draining)
    }
}

/// Lists the chunks and nodes of every alive provider.
pub async fn take(cluster: &Cluster, providers: &[ProviderInfo]) -> Inventory {
    let mut inv = Inventory::default();
    for p in providers.iter().filter(|p| p.alive) {
        match list(cluster, &p.addr).await {
            Ok((chunks, nodes)) => {
                for (id, len, stored_ms) in chunks {
                    let copies = inv.chunks.entry(id).or_insert(ChunkCopies {
                        len,
                        holders: Vec::new(),
                    });
                    copies.holders.push((p.id, stored_ms));
                }
                for key in nodes {
                    inv.nodes.entry(key).or_default().push(p.id);
                }
                inv.providers.insert(p.id, p.clone());
            }
            Err(e) => {
                tracing::warn!("listing provider {} ({}) failed: {e}", p.id, p.addr);
                inv.unlisted.push(p.id);
            }
        }
    }
    inv
}

/// The node keys every alive provider holds, with their holders (node repair after a
/// membership change). A provider whose listing fails is left out.
pub async fn nodes(
    cluster: &Cluster,
    providers: &[ProviderInfo],
) -> HashMap<NodeKey, Vec<ProviderId>> {
    let mut out: HashMap<NodeKey, Vec<ProviderId>> = HashMap::new();
    for p in providers.iter().filter(|p| p.alive) {
        match list_nodes(cluster, &p.addr).await {
            Ok(keys) => {
                for key in keys {
                    out.entry(key).or_default().push(p.id);
                }
            }
            Err(e) => tracing::warn!("listing the nodes of provider {} ({}): {e}", p.id, p.addr),
        }
    }
    out
}

type Listing = (Vec<(ChunkId, u64, u64)>, Vec<NodeKey>);

async fn list(cluster: &Cluster, addr: &str) -> Result<Listing> {
    Ok((
        list_chunks(cluster, addr).await?,
        list_nodes(cluster, addr).await?,
    ))
}

/// A provider's chunks: id, length, and when it was stored on this process's clock.
async fn list_chunks(cluster: &Cluster, addr: &str) -> Result<Vec<(ChunkId, u64, u64)>> {
    let mut chunks = Vec::new();
    let mut after = None;
    loop {
        let req = ListChunks {
            start_after: after,
            limit: PAGE,
        };
        let listing = cluster.pool.call(addr, req).await?;
        // Ages on the provider's own clock, turned into times on this one.
        let now = now_ms();
        let page = listing.entries;
        after = page.last().map(|c| c.id);
        let done = page.len() < PAGE as usize;
        chunks.extend(page.into_iter().map(|c| {
            let age = listing.now_ms.saturating_sub(c.stored_ms);
            (c.id, c.len, now.saturating_sub(age))
        }));
        if done || after.is_none() {
            break;
        }
    }
    Ok(chunks)
}

async fn list_nodes(cluster: &Cluster, addr: &str) -> Result<Vec<NodeKey>> {
    let mut nodes = Vec::new();
    let mut after = None;
    loop {
        let req = ListNodes {
            start_after: after,
            limit: PAGE,
        };
        let page = cluster.pool.call(addr, req).await?;
        after = page.last().copied();
        let done = page.len() < PAGE as usize;
        nodes.extend(page);
        if done || after.is_none() {
            break;
        }
    }
    Ok(nodes)
}
