//! Repair: re-creates missing chunk and metadata copies until every referenced item has as
//! many copies on live, non-draining providers as its blob's replication, and moves metadata
//! nodes to their current ring owners (rebalancing after providers join or leave).
//!
//! Chunks are copied provider to provider (`CopyChunk`), so repair data never passes through
//! the manager's host; the new replica sets are recorded with the manager, where readers find
//! them when the replicas the metadata names are gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::stream::{self, StreamExt};
use tomus_client::cluster::Cluster;
use tomus_client::dht::Ring;
use tomus_metadata::{ChunkId, Node, NodeKey, ProviderId};
use tomus_wire::{unexpected, MaintenanceStatus, Pool, ProviderInfo, Request, Response, Result};

use crate::inventory::Inventory;
use crate::references::References;
use crate::throttle::Throttle;

/// Replica sets recorded with the manager per request.
const RECORD_BATCH: usize = 256;
/// Nodes stored per request.
const NODE_BATCH: usize = 1000;

/// One chunk to copy: from any of `sources` onto each of `targets`.
struct ChunkCopy {
    id: ChunkId,
    len: u64,
    sources: Vec<String>,
    targets: Vec<ProviderInfo>,
    /// Copies that already count (live, not draining).
    good: Vec<ProviderId>,
}

/// What a pass must copy, and what it found.
#[derive(Default)]
pub struct Plan {
    chunks: Vec<ChunkCopy>,
    /// Per target provider: the nodes to store there.
    nodes: HashMap<ProviderId, Vec<(NodeKey, Arc<Node>)>>,
    pub under_replicated_chunks: u64,
    pub under_replicated_bytes: u64,
    pub lost_chunks: u64,
    pub under_replicated_nodes: u64,
    pub copy_bytes: u64,
    pub copy_nodes: u64,
    /// Per draining provider: chunk bytes (plus one per node) that had no other home when the
    /// pass started (a drain is complete once a pass finds 0).
    pub draining_left: HashMap<ProviderId, u64>,
}

/// Compares the references with what live providers hold.
pub fn plan(refs: &References, inv: &Inventory, ring: &Ring) -> Plan {
    let mut plan = Plan::default();
    let mut writable: Vec<&ProviderInfo> = inv.providers.values().filter(|p| !p.draining).collect();
    writable.sort_by_key(|p| p.id);
    for p in inv.providers.values().filter(|p| p.draining) {
        plan.draining_left.insert(p.id, 0);
    }
    // Bytes each provider holds (and will hold after this pass): new copies go to the emptiest.
    let mut load: HashMap<ProviderId, u64> = HashMap::new();
    for copies in inv.chunks.values() {
        for (id, _) in &copies.holders {
            *load.entry(*id).or_default() += copies.len;
        }
    }
    let mut ids: Vec<&ChunkId> = refs.chunks.keys().collect();
    ids.sort();
    for id in ids {
        let want = refs.chunks[id].replication as usize;
        let Some(copies) = inv.chunks.get(id) else {
            // Not on any live provider: on a dead one, perhaps back later.
            plan.lost_chunks += 1;
            continue;
        };
        let holders: Vec<ProviderId> = copies.holders.iter().map(|(p, _)| *p).collect();
        let good: Vec<ProviderId> = holders.iter().copied().filter(|p| inv.counts(*p)).collect();
        if good.len() >= want {
            continue;
        }
        plan.under_replicated_chunks += 1;
        plan.under_replicated_bytes += copies.len;
        let draining: Vec<ProviderId> = holders
            .iter()
            .copied()
            .filter(|p| !inv.counts(*p))
            .collect();
        for d in &draining {
            *plan.draining_left.entry(*d).or_default() += copies.len;
        }
        let mut candidates: Vec<&ProviderInfo> = writable
            .iter()
            .copied()
            .filter(|p| !holders.contains(&p.id))
            .collect();
        candidates.sort_by_key(|p| (load.get(&p.id).copied().unwrap_or(0), p.id));
        let targets: Vec<ProviderInfo> = candidates
            .into_iter()
            .take(want - good.len())
            .cloned()
            .collect();
        if targets.is_empty() {
            continue;
        }
        for t in &targets {
            *load.entry(t.id).or_default() += copies.len;
        }
        plan.copy_bytes += copies.len * targets.len() as u64;
        let sources = good
            .iter()
            .chain(&draining)
            .filter_map(|p| inv.providers.get(p).map(|i| i.addr.clone()))
            .collect();
        plan.chunks.push(ChunkCopy {
            id: *id,
            len: copies.len,
            sources,
            targets,
            good,
        });
    }
    for (key, entry) in &refs.nodes {
        let want = entry.replication as usize;
        let holders = inv.nodes.get(key).map(Vec::as_slice).unwrap_or_default();
        let good = holders.iter().filter(|p| inv.counts(**p)).count();
        if good < want {
            plan.under_replicated_nodes += 1;
            for d in holders.iter().filter(|p| !inv.counts(**p)) {
                *plan.draining_left.entry(*d).or_default() += 1;
            }
        }
        // The node belongs on the first `want` live, non-draining providers of its ring walk.
        let owners = ring
            .walk(key)
            .into_iter()
            .filter(|p| inv.counts(*p))
            .take(want);
        for owner in owners.filter(|o| !holders.contains(o)) {
            plan.copy_nodes += 1;
            plan.nodes
                .entry(owner)
                .or_default()
                .push((*key, entry.node.clone()));
        }
    }
    plan
}

/// Shared progress of the running pass.
pub type Progress = Arc<Mutex<MaintenanceStatus>>;

fn update(progress: &Progress, f: impl FnOnce(&mut MaintenanceStatus)) {
    f(&mut progress.lock().unwrap_or_else(|p| p.into_inner()));
}

/// Carries out `plan`: chunk copies (over `copies`, a pool with a bulk transfer's timeout)
/// `parallelism` at a time under `throttle`, then the node copies. Returns the first error
/// after doing everything it could.
pub async fn execute(
    cluster: &Cluster,
    copies: &Pool,
    plan: Plan,
    inv: &Inventory,
    throttle: &Throttle,
    parallelism: usize,
    progress: &Progress,
) -> Result<()> {
    let mut first_error = None;
    let transfers = plan.chunks.into_iter().map(|copy| async move {
        throttle.take(copy.len * copy.targets.len() as u64).await;
        let results = futures::future::join_all(copy.targets.iter().map(|t| {
            let req = Request::CopyChunk {
                id: copy.id,
                len: copy.len,
                from: copy.sources.clone(),
            };
            async move { (t.id, copies.call(&t.addr, &req, &[]).await) }
        }))
        .await;
        (copy, results)
    });
    let mut stream = stream::iter(transfers).buffer_unordered(parallelism.max(1));
    let mut recorded: Vec<(ChunkId, Vec<ProviderId>)> = Vec::new();
    while let Some((copy, results)) = stream.next().await {
        let mut set = copy.good.clone();
        for (target, outcome) in results {
            match outcome {
                Ok((Response::Ok, _)) => {
                    set.push(target);
                    update(progress, |s| {
                        s.repair_done_bytes += copy.len;
                        s.repaired_bytes += copy.len;
                    });
                }
                Ok((other, _)) => first_error = first_error.or(Some(unexpected(&other))),
                Err(e) => {
                    tracing::warn!("copying chunk {} to provider {target}: {e}", copy.id);
                    first_error = first_error.or(Some(e));
                }
            }
        }
        if set.len() > copy.good.len() {
            update(progress, |s| s.repaired_chunks += 1);
            recorded.push((copy.id, set));
        }
        if recorded.len() >= RECORD_BATCH {
            record(cluster, std::mem::take(&mut recorded)).await?;
        }
    }
    record(cluster, recorded).await?;
    for (target, nodes) in plan.nodes {
        let Some(addr) = inv.providers.get(&target).map(|p| p.addr.clone()) else {
            continue;
        };
        for batch in nodes.chunks(NODE_BATCH) {
            let req = Request::PutNodes {
                nodes: batch.iter().map(|(k, n)| (*k, Node::clone(n))).collect(),
            };
            match cluster.pool.call(&addr, &req, &[]).await {
                Ok(_) => update(progress, |s| s.repair_done_nodes += batch.len() as u64),
                Err(e) => {
                    tracing::warn!("copying metadata to provider {target}: {e}");
                    first_error = first_error.or(Some(e));
                }
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The draining providers' remaining bytes, by provider id.
pub fn sorted(left: HashMap<ProviderId, u64>) -> Vec<(ProviderId, u64)> {
    let mut v: Vec<_> = left.into_iter().collect();
    v.sort();
    v
}

async fn record(cluster: &Cluster, entries: Vec<(ChunkId, Vec<ProviderId>)>) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    match cluster
        .manager_call(&Request::RecordReplicas { entries })
        .await?
    {
        Response::Ok => Ok(()),
        other => Err(unexpected(&other)),
    }
}
