//! Garbage collection from the ledger: carries out the node deletions it owes the providers
//! and deletes the chunks no live leaf has referred to since before the reuse cutoff.
//!
//! Node deletions of superseded nodes are confirmed with the manager first (`Fate`): each
//! node's version must be positively expired, given up or deleted. A deletion is done once
//! every live provider carried it out (nodes may sit on any provider after the ring
//! changed); a provider that is down keeps its copies, which the audit deletes later.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use tomus_client::cluster::Cluster;
use tomus_metadata::{BlobId, ChunkId, NodeKey, ProviderId, Version};
use tomus_wire::maintenance::Fates;
use tomus_wire::provider::{DeleteChunks, DeleteNodeRanges, DeleteNodes};
use tomus_wire::{Error, Fate, ProviderInfo, Result, Rpc};

use crate::follow::on_ledger;
use crate::ledger::{Doom, Ledger};

/// Ledger entries handled per round trip to the ledger.
const BATCH: usize = 64;
/// Items per delete request.
const DELETE_BATCH: usize = 1000;
/// Versions asked about per request.
const FATE_BATCH: usize = 10_000;

/// What one collection did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub nodes: u64,
    pub chunks: u64,
    pub bytes: u64,
}

/// Carries out the node deletions the ledger owes the live `providers`.
pub async fn nodes(
    cluster: &Cluster,
    ledger: &Arc<Ledger>,
    providers: &[ProviderInfo],
) -> Result<Collected> {
    let live: Vec<&ProviderInfo> = providers.iter().filter(|p| p.alive).collect();
    let mut done = Collected::default();
    let mut after = 0;
    loop {
        let batch = on_ledger(ledger, move |l| l.doomed(after, BATCH)).await?;
        let Some(&(last, _)) = batch.last() else {
            break;
        };
        after = last;
        // The batch's deletions go out together: one question to the manager and one request
        // per provider (per DELETE_BATCH items), not one of each per entry. Overwrites retire
        // a version each, so under a stream of small PUTs the entries arrive by hundreds a
        // second, and every request costs each provider a synced log write.
        let ids: Vec<u64> = batch.iter().map(|(id, _)| *id).collect();
        let (mut keys, mut ranges) = (Vec::new(), Vec::new());
        for (_, doom) in batch {
            match doom {
                Doom::Nodes(k) => keys.extend(k),
                Doom::Ranges(r) => ranges.extend(r),
            }
        }
        let keys = confirmed(cluster, keys).await?;
        let sent = async {
            broadcast(cluster, &live, &keys, |keys| DeleteNodes { keys }).await?;
            broadcast(cluster, &live, &ranges, |ranges| DeleteNodeRanges {
                ranges,
            })
            .await
        };
        match sent.await {
            Ok(()) => {
                done.nodes += keys.len() as u64;
                on_ledger(ledger, move |l| l.done_doomed(&ids)).await?;
            }
            Err(e) => tracing::info!("{} node deletions postponed: {e}", ids.len()),
        }
    }
    Ok(done)
}

/// The keys whose versions the manager positively knows dead; the others are kept, and
/// reported: the ledger disagrees with the manager.
async fn confirmed(cluster: &Cluster, keys: Vec<NodeKey>) -> Result<Vec<NodeKey>> {
    let versions: Vec<(BlobId, Version)> = keys
        .iter()
        .map(|k| (k.blob, k.node.version))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut fates: HashMap<(BlobId, Version), Fate> = HashMap::new();
    for batch in versions.chunks(FATE_BATCH) {
        let answer = cluster
            .manager(Fates {
                items: batch.to_vec(),
            })
            .await?;
        if answer.len() != batch.len() {
            return Err(Error::protocol("fates answered for other versions"));
        }
        fates.extend(batch.iter().copied().zip(answer));
    }
    let (dead, kept): (Vec<NodeKey>, Vec<NodeKey>) = keys.into_iter().partition(|k| {
        matches!(
            fates.get(&(k.blob, k.node.version)),
            Some(Fate::Expired | Fate::Aborted | Fate::Deleted)
        )
    });
    if !kept.is_empty() {
        tracing::error!(
            "the ledger found {} nodes dead whose versions the manager does not (e.g. {:?}); \
             kept",
            kept.len(),
            kept[0]
        );
    }
    Ok(dead)
}

/// Sends `items` to every live provider, [`DELETE_BATCH`] at a time, as the requests
/// `request` makes of them.
async fn broadcast<T: Clone, R: Rpc>(
    cluster: &Cluster,
    live: &[&ProviderInfo],
    items: &[T],
    request: impl Fn(Vec<T>) -> R,
) -> Result<()> {
    for batch in items.chunks(DELETE_BATCH) {
        let sends = live
            .iter()
            .map(|p| cluster.pool.call(&p.addr, request(batch.to_vec())));
        for r in futures::future::join_all(sends).await {
            r?;
        }
    }
    Ok(())
}

/// Deletes the chunks no live leaf has referred to since before `cutoff_ms` from the
/// providers that hold them, then forgets them. A chunk whose deletion failed on a live
/// provider is kept for the next round, and the chunks behind it still go: one provider
/// that cannot delete (a disk error) holds back its own chunks, not the cluster's.
pub async fn chunks(
    cluster: &Cluster,
    ledger: &Arc<Ledger>,
    providers: &[ProviderInfo],
    cutoff_ms: u64,
) -> Result<Collected> {
    let addr: HashMap<ProviderId, &str> = providers
        .iter()
        .filter(|p| p.alive)
        .map(|p| (p.id, p.addr.as_str()))
        .collect();
    let mut done = Collected::default();
    let mut after = None;
    let mut kept = 0usize;
    let mut last_error = None;
    loop {
        let batch = on_ledger(ledger, move |l| {
            l.unreferenced_before(cutoff_ms, after, DELETE_BATCH)
        })
        .await?;
        let Some((last_id, last_track)) = batch.last() else {
            break;
        };
        after = Some((last_track.zero_since, *last_id));
        let mut per_provider: HashMap<ProviderId, Vec<ChunkId>> = HashMap::new();
        for (id, track) in &batch {
            for p in &track.replicas {
                per_provider.entry(*p).or_default().push(*id);
            }
        }
        // A provider that is down keeps its copies until the audit finds them.
        let sends = per_provider.iter().filter_map(|(p, ids)| {
            let a = addr.get(p)?;
            let sent = cluster.pool.call(a, DeleteChunks { ids: ids.clone() });
            Some(async move { (*p, ids, sent.await) })
        });
        // Chunks still stored on some live provider: kept in the ledger for the next round.
        let mut left: HashSet<ChunkId> = HashSet::new();
        for (p, sent, outcome) in futures::future::join_all(sends).await {
            match outcome {
                Ok(failed) if failed.is_empty() => {}
                Ok(failed) => {
                    last_error = Some(format!(
                        "provider {p} could not delete {} of them (a disk error?)",
                        failed.len()
                    ));
                    left.extend(failed);
                }
                Err(e) => {
                    last_error = Some(format!("provider {p}: {e}"));
                    left.extend(sent.iter().copied());
                }
            }
        }
        let ids: Vec<ChunkId> = batch
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !left.contains(id))
            .collect();
        kept += batch.len() - ids.len();
        let lens: HashMap<ChunkId, u64> = batch.iter().map(|(id, t)| (*id, t.len)).collect();
        let forgotten = on_ledger(ledger, move |l| l.forget_chunks(&ids)).await?;
        done.chunks += forgotten.len() as u64;
        done.bytes += forgotten.iter().filter_map(|id| lens.get(id)).sum::<u64>();
    }
    if let Some(e) = last_error {
        tracing::warn!("{kept} unreferenced chunks kept for the next round: {e}");
    }
    Ok(done)
}
