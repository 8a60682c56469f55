//! The audit: the slow, complete check behind the incremental ledger. It walks every
//! retained version's tree, lists what every live provider holds, and
//! - repairs whatever has too few copies or is off its ring owners (repair's full plan);
//! - deletes what is positively dead yet still stored: nodes of deleted blobs, given-up
//!   versions, and versions expired before the audit began that no retained tree reaches
//!   (the manager's word, `Fate`, is asked for each), and chunks no retained version
//!   references that the ledger does not track and that were stored before the fresh
//!   cutoff (a writer that died before committing);
//! - checks the ledger: a chunk a retained version references that the ledger does not
//!   count as referenced means the ledger is wrong; it is rebuilt, and nothing the walk
//!   found is deleted meanwhile.
//!
//! It runs rarely (`--audit-interval-ms`) and on request; garbage collection and repair run
//! from the ledger in between.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use tomus_client::cluster::Cluster;
use tomus_client::dht::Ring;
use tomus_metadata::{BlobId, ChunkId, NodeKey, ProviderId, Version};
use tomus_wire::maintenance::Fates;
use tomus_wire::provider::{DeleteChunks, DeleteNodes};
use tomus_wire::{Error, Fate, Pool, ProviderInfo, Result};

use crate::follow::on_ledger;
use crate::inventory::{self, Inventory};
use crate::ledger::Ledger;
use crate::references::{self, References};
use crate::repair::{self, update, Progress};
use crate::throttle::Throttle;

/// Items deleted per request.
const DELETE_BATCH: usize = 1000;
/// Versions asked about per request.
const FATE_BATCH: usize = 10_000;

/// What an audit found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audited {
    /// Referenced chunks the ledger did not count: it must be rebuilt.
    pub untracked_references: u64,
    /// What its walk and inventory found to repair (and repaired).
    pub under_replicated_chunks: u64,
    pub under_replicated_nodes: u64,
    pub lost_chunks: u64,
}

/// One audit. `fresh_cutoff_ms`: untracked chunks stored before it may go (`None`: no
/// garbage collection); it must have been granted before the audit began. `ledger_turn` is
/// held from reading what the ledger counted to checking it, so the ledger does not move
/// under the walk (an expiry applied meanwhile would look like a chunk it lost). `copy_turn`
/// is held from listing what the providers hold to the end of the copies, as the repair
/// worker holds it: each sees the other's copies, instead of both copying one chunk.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    cluster: &Cluster,
    copies: &Pool,
    ledger: &Arc<Ledger>,
    ledger_turn: &tokio::sync::Mutex<()>,
    copy_turn: &tokio::sync::Mutex<()>,
    fresh_cutoff_ms: Option<u64>,
    throttle: &Throttle,
    parallelism: usize,
    progress: &Progress,
) -> Result<Audited> {
    let turn = ledger_turn.lock().await;
    // What the ledger counted so far: chunks only later versions refer to are not its yet.
    let counted: HashMap<BlobId, Version> = on_ledger(ledger, |l| l.blobs())
        .await?
        .into_iter()
        .map(|(id, t)| (id, t.counted))
        .collect();
    let refs = references::scan(cluster, &counted).await?;
    let untracked = untracked(ledger, &refs).await?;
    let mut audited = Audited {
        untracked_references: untracked.len() as u64,
        ..Audited::default()
    };
    if !untracked.is_empty() {
        tracing::error!(
            "the maintenance ledger does not count {} chunks retained versions reference \
             (e.g. {}): rebuilding it",
            untracked.len(),
            untracked[0]
        );
        // Before the turn is given back: collection must not act on the ledger again before
        // it is rebuilt.
        on_ledger(ledger, |l| l.request_rebuild()).await?;
    }
    drop(turn);
    let copying = copy_turn.lock().await;
    let providers = cluster.providers().await?;
    let inv = inventory::take(cluster, &providers).await;
    let ids: Vec<ProviderId> = providers.iter().map(|p| p.id).collect();
    let ring = Ring::new(&ids);
    let plan = repair::plan(&refs, &inv, &ring);
    // Its own findings, not the repair worker's (which `tomus status` shows and waiters
    // watch): the audit's inventory may predate the latest failure.
    audited.under_replicated_chunks = plan.under_replicated_chunks;
    audited.under_replicated_nodes = plan.under_replicated_nodes;
    audited.lost_chunks = plan.lost_chunks;
    let all: HashMap<ProviderId, ProviderInfo> =
        providers.iter().map(|p| (p.id, p.clone())).collect();
    repair::execute(
        cluster,
        copies,
        plan,
        &all,
        Some(ledger),
        throttle,
        parallelism,
        progress,
    )
    .await?;
    drop(copying);

    // Nothing the walk found unreferenced is deleted while the ledger is being rebuilt.
    let Some(cutoff) = fresh_cutoff_ms.filter(|_| audited.untracked_references == 0) else {
        return Ok(audited);
    };
    if !inv.unlisted.is_empty() || refs.unreadable > 0 {
        tracing::info!(
            "the audit deletes nothing: providers {:?} could not be listed, {} nodes unreadable",
            inv.unlisted,
            refs.unreadable
        );
        return Ok(audited);
    }
    sweep(cluster, ledger, &refs, &inv, cutoff, progress).await?;
    Ok(audited)
}

/// The chunks a counted leaf of a retained version references that the ledger does not
/// count as referenced: each one means the ledger is wrong.
async fn untracked(ledger: &Arc<Ledger>, refs: &References) -> Result<Vec<ChunkId>> {
    let referenced: Vec<ChunkId> = refs
        .chunks
        .iter()
        .filter(|(_, r)| r.counted)
        .map(|(id, _)| *id)
        .collect();
    let tracked = on_ledger(ledger, {
        let referenced = referenced.clone();
        move |l| l.chunks(&referenced)
    })
    .await?;
    Ok(referenced
        .iter()
        .zip(&tracked)
        .filter(|(_, t)| t.as_ref().is_none_or(|t| t.count == 0))
        .map(|(c, _)| *c)
        .collect())
}

/// What one provider should delete.
#[derive(Default)]
struct Garbage {
    /// Chunk ids with their lengths.
    chunks: Vec<(ChunkId, u64)>,
    nodes: Vec<NodeKey>,
}

/// Deletes what is positively dead yet stored (see the module docs): untracked chunks
/// unreferenced by `refs` and stored before `cutoff_ms`, and unreferenced nodes the manager
/// confirms dead.
pub async fn sweep(
    cluster: &Cluster,
    ledger: &Arc<Ledger>,
    refs: &References,
    inv: &Inventory,
    cutoff_ms: u64,
    progress: &Progress,
) -> Result<()> {
    let mut per_provider: HashMap<ProviderId, Garbage> = HashMap::new();
    let candidates: Vec<ChunkId> = inv
        .chunks
        .keys()
        .filter(|id| !refs.chunks.contains_key(id))
        .copied()
        .collect();
    let tracked = on_ledger(ledger, {
        let candidates = candidates.clone();
        move |l| l.chunks(&candidates)
    })
    .await?;
    for (id, t) in candidates.iter().zip(tracked) {
        // A chunk the ledger tracks is its to collect (referenced, or waiting for the reuse
        // cutoff).
        if t.is_some() {
            continue;
        }
        let copies = &inv.chunks[id];
        for (holder, stored_ms) in &copies.holders {
            if *stored_ms < cutoff_ms {
                let g = per_provider.entry(*holder).or_default();
                g.chunks.push((*id, copies.len));
            }
        }
    }
    let unreferenced: Vec<(&NodeKey, &Vec<ProviderId>)> = inv
        .nodes
        .iter()
        .filter(|(key, _)| !refs.nodes.contains_key(key))
        .collect();
    let fates = fates(
        cluster,
        unreferenced.iter().map(|(k, _)| (k.blob, k.node.version)),
    )
    .await?;
    for (key, holders) in unreferenced {
        let fate = fates
            .get(&(key.blob, key.node.version))
            .copied()
            .unwrap_or(Fate::Unknown);
        if refs.node_is_garbage(key, fate) {
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
            tracing::warn!("the audit's deletions on provider {provider}: {e}");
            first_error = first_error.or(Some(e));
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// What the manager knows of each (blob, version), asked in batches.
async fn fates(
    cluster: &Cluster,
    items: impl Iterator<Item = (BlobId, Version)>,
) -> Result<HashMap<(BlobId, Version), Fate>> {
    let unique: Vec<(BlobId, Version)> = items.collect::<BTreeSet<_>>().into_iter().collect();
    let mut out = HashMap::with_capacity(unique.len());
    for batch in unique.chunks(FATE_BATCH) {
        let req = Fates {
            items: batch.to_vec(),
        };
        let fates = cluster.manager(req).await?;
        if fates.len() != batch.len() {
            return Err(Error::protocol(format!(
                "asked the fates of {} versions, got {}",
                batch.len(),
                fates.len()
            )));
        }
        out.extend(batch.iter().copied().zip(fates));
    }
    Ok(out)
}

async fn delete(cluster: &Cluster, addr: &str, g: Garbage, progress: &Progress) -> Result<()> {
    for batch in g.chunks.chunks(DELETE_BATCH) {
        let req = DeleteChunks {
            ids: batch.iter().map(|(id, _)| *id).collect(),
        };
        // What could not be deleted stays for the next audit.
        let failed: HashSet<ChunkId> = cluster.pool.call(addr, req).await?.into_iter().collect();
        let deleted = batch.iter().filter(|(id, _)| !failed.contains(id));
        let (count, bytes) = deleted.fold((0, 0), |(n, b), (_, len)| (n + 1, b + len));
        update(progress, |s| {
            s.gc_chunks += count;
            s.gc_bytes += bytes;
        });
    }
    for batch in g.nodes.chunks(DELETE_BATCH) {
        let req = DeleteNodes {
            keys: batch.to_vec(),
        };
        cluster.pool.call(addr, req).await?;
        update(progress, |s| s.gc_nodes += batch.len() as u64);
    }
    Ok(())
}
