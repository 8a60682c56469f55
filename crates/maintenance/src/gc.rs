//! Garbage collection: deletes the chunks and metadata nodes no retained version references
//! (expired versions, deleted blobs, aborted writes, writers that never committed).
//!
//! Only a pass that saw every live provider and walked every retained version deletes
//! anything, and never what may belong to a write still in progress: a chunk must be older
//! than the grace period (a writer stores chunks before its version exists), and a node must
//! belong to a deleted blob or to a version that was already published when the scan began.

use std::collections::HashMap;

use tomus_client::cluster::Cluster;
use tomus_metadata::{ChunkId, NodeKey, ProviderId};
use tomus_wire::{unexpected, Request, Response, Result};

use crate::inventory::Inventory;
use crate::references::References;
use crate::repair::Progress;

/// Items deleted per request.
const DELETE_BATCH: usize = 1000;

/// What one provider should delete.
#[derive(Default)]
struct Garbage {
    /// Chunk ids with their lengths.
    chunks: Vec<(ChunkId, u64)>,
    nodes: Vec<NodeKey>,
}

/// Deletes unreferenced items stored before `older_than_ms` (chunks) from every listed provider.
pub async fn collect(
    cluster: &Cluster,
    refs: &References,
    inv: &Inventory,
    older_than_ms: u64,
    progress: &Progress,
) -> Result<()> {
    let mut per_provider: HashMap<ProviderId, Garbage> = HashMap::new();
    for (id, copies) in &inv.chunks {
        if refs.chunks.contains_key(id) {
            continue;
        }
        for (holder, stored_ms) in &copies.holders {
            if *stored_ms < older_than_ms {
                let g = per_provider.entry(*holder).or_default();
                g.chunks.push((*id, copies.len));
            }
        }
    }
    for (key, holders) in &inv.nodes {
        if refs.node_is_garbage(key) {
            for holder in holders {
                per_provider.entry(*holder).or_default().nodes.push(*key);
            }
        }
    }
    let mut first_error = None;
    for (provider, garbage) in per_provider {
        let Some(addr) = inv.providers.get(&provider).map(|p| p.addr.clone()) else {
            continue;
        };
        if let Err(e) = delete(cluster, &addr, garbage, progress).await {
            tracing::warn!("garbage collection on provider {provider}: {e}");
            first_error = first_error.or(Some(e));
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn delete(cluster: &Cluster, addr: &str, g: Garbage, progress: &Progress) -> Result<()> {
    for batch in g.chunks.chunks(DELETE_BATCH) {
        let req = Request::DeleteChunks {
            ids: batch.iter().map(|(id, _)| *id).collect(),
        };
        expect_ok(cluster.pool.call(addr, &req, &[]).await?.0)?;
        let mut s = progress.lock().unwrap_or_else(|p| p.into_inner());
        s.gc_chunks += batch.len() as u64;
        s.gc_bytes += batch.iter().map(|(_, len)| len).sum::<u64>();
    }
    for batch in g.nodes.chunks(DELETE_BATCH) {
        let req = Request::DeleteNodes {
            keys: batch.to_vec(),
        };
        expect_ok(cluster.pool.call(addr, &req, &[]).await?.0)?;
        let mut s = progress.lock().unwrap_or_else(|p| p.into_inner());
        s.gc_nodes += batch.len() as u64;
    }
    Ok(())
}

fn expect_ok(resp: Response) -> Result<()> {
    match resp {
        Response::Ok => Ok(()),
        other => Err(unexpected(&other)),
    }
}
