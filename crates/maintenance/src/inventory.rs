//! What each live provider actually holds, from its own listing: the ground truth repair and
//! garbage collection compare the references against.

use std::collections::HashMap;

use tomus_client::cluster::Cluster;
use tomus_metadata::{ChunkId, NodeKey, ProviderId};
use tomus_wire::{unexpected, ProviderInfo, Request, Response, Result};

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

type Listing = (Vec<(ChunkId, u64, u64)>, Vec<NodeKey>);

async fn list(cluster: &Cluster, addr: &str) -> Result<Listing> {
    let mut chunks = Vec::new();
    let mut after = None;
    loop {
        let req = Request::ListChunks {
            start_after: after,
            limit: PAGE,
        };
        let page = match cluster.pool.call(addr, &req, &[]).await?.0 {
            Response::Chunks(c) => c,
            other => return Err(unexpected(&other)),
        };
        after = page.last().map(|c| c.id);
        let done = page.len() < PAGE as usize;
        chunks.extend(page.into_iter().map(|c| (c.id, c.len, c.stored_ms)));
        if done || after.is_none() {
            break;
        }
    }
    let mut nodes = Vec::new();
    let mut after = None;
    loop {
        let req = Request::ListNodes {
            start_after: after,
            limit: PAGE,
        };
        let page = match cluster.pool.call(addr, &req, &[]).await?.0 {
            Response::NodeKeys(k) => k,
            other => return Err(unexpected(&other)),
        };
        after = page.last().copied();
        let done = page.len() < PAGE as usize;
        nodes.extend(page);
        if done || after.is_none() {
            break;
        }
    }
    Ok((chunks, nodes))
}
