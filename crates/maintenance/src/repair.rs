//! Repair: re-creates missing chunk and metadata copies until every referenced item has as
//! many copies on live, non-draining providers as its blob's replication, and moves metadata
//! nodes to their current ring owners (rebalancing after providers join or leave).
//!
//! Three planners feed one executor:
//! - `chunks_from_ledger`: the chunks the ledger says had a copy on a provider that went
//!   down, is draining, or reported the copy lost: repair driven by the event, no scan;
//! - `nodes_from_listing`: nodes that are not on their current ring owners, from the
//!   providers' own listings (no tree walk), after the membership changed;
//! - `plan`: everything, from the audit's walk of every retained version and the providers'
//!   full inventories.
//!
//! Chunks are copied provider to provider (`CopyChunk`), so repair data never passes through
//! the manager's host; the new replica sets are recorded with the manager, where readers find
//! them when the replicas the metadata names are gone, and in the ledger.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::stream::{self, StreamExt};
use tomus_client::cluster::Cluster;
use tomus_client::dht::Ring;
use tomus_metadata::{BlobId, ChunkId, Node, NodeKey, ProviderId};
use tomus_wire::maintenance::RecordReplicas;
use tomus_wire::provider::{CopyChunk, GetNodes, PutNodes};
use tomus_wire::{MaintenanceStatus, Pool, ProviderInfo, Result};

use crate::follow::on_ledger;
use crate::inventory::Inventory;
use crate::ledger::{BlobTrack, ChunkTrack, Ledger};
use crate::references::References;
use crate::throttle::Throttle;

/// Replica sets recorded with the manager per request.
const RECORD_BATCH: usize = 256;
/// Nodes stored (or fetched) per request.
const NODE_BATCH: usize = 1000;
/// Chunks the ledger is asked for per round of event repair.
const LEDGER_BATCH: usize = 100_000;

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
    /// Replica sets that lost copies which do not count (a draining provider's, once the
    /// chunk has enough others): recorded without copying anything.
    trimmed: Vec<(ChunkId, Vec<ProviderId>)>,
    pub under_replicated_chunks: u64,
    pub under_replicated_bytes: u64,
    pub lost_chunks: u64,
    pub under_replicated_nodes: u64,
    pub copy_bytes: u64,
    pub copy_nodes: u64,
    /// Per draining provider: chunk bytes (plus one per node) that had no other home when the
    /// pass started (a drain is complete once a pass finds 0).
    pub draining_left: HashMap<ProviderId, u64>,
    /// Copies reported lost of chunks the ledger does not count as referenced (yet: the
    /// version naming them may not be counted).
    pub unknown_lost: Vec<(ChunkId, ProviderId)>,
}

impl Plan {
    /// This plan and `other` together (chunk repair and node repair of one pass).
    pub fn merge(mut self, other: Plan) -> Plan {
        self.chunks.extend(other.chunks);
        for (p, n) in other.nodes {
            self.nodes.entry(p).or_default().extend(n);
        }
        self.trimmed.extend(other.trimmed);
        self.under_replicated_chunks += other.under_replicated_chunks;
        self.under_replicated_bytes += other.under_replicated_bytes;
        self.lost_chunks += other.lost_chunks;
        self.under_replicated_nodes += other.under_replicated_nodes;
        self.copy_bytes += other.copy_bytes;
        self.copy_nodes += other.copy_nodes;
        for (p, b) in other.draining_left {
            *self.draining_left.entry(p).or_default() += b;
        }
        self.unknown_lost.extend(other.unknown_lost);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.nodes.is_empty() && self.trimmed.is_empty()
    }
}

/// Whether a copy on `p` counts: the provider is alive and not draining.
fn counts(providers: &HashMap<ProviderId, ProviderInfo>, p: ProviderId) -> bool {
    providers.get(&p).is_some_and(|i| i.alive && !i.draining)
}

/// Plans copies for one chunk held by `holders` (all listed copies) that needs `want`
/// counting copies; `load` is the bytes each provider holds, updated with the plan. New
/// copies go first to the writable providers of `lost_on` that have room, which reported
/// losing theirs: the copy goes back where it was placed, and if another repairer (the
/// audit) put it back there since the report, copying it again rewrites that copy instead of
/// making one more.
#[allow(clippy::too_many_arguments)]
fn plan_chunk(
    plan: &mut Plan,
    id: ChunkId,
    len: u64,
    want: usize,
    holders: &[ProviderId],
    lost_on: &[ProviderId],
    providers: &HashMap<ProviderId, ProviderInfo>,
    writable: &[&ProviderInfo],
    load: &mut HashMap<ProviderId, u64>,
) {
    let good: Vec<ProviderId> = holders
        .iter()
        .copied()
        .filter(|p| counts(providers, *p))
        .collect();
    let other: Vec<ProviderId> = holders
        .iter()
        .copied()
        .filter(|p| !counts(providers, *p))
        .collect();
    if good.len() >= want {
        if !other.is_empty() {
            plan.trimmed.push((id, good));
        }
        return;
    }
    plan.under_replicated_chunks += 1;
    plan.under_replicated_bytes += len;
    for d in other
        .iter()
        .filter(|p| providers.get(p).is_some_and(|i| i.draining))
    {
        *plan.draining_left.entry(*d).or_default() += len;
    }
    // Sources: counting copies, then draining ones still alive.
    let sources: Vec<String> = good
        .iter()
        .chain(&other)
        .filter_map(|p| providers.get(p).filter(|i| i.alive))
        .map(|i| i.addr.clone())
        .collect();
    if sources.is_empty() {
        plan.lost_chunks += 1;
        return;
    }
    let mut candidates: Vec<&ProviderInfo> = writable
        .iter()
        .copied()
        .filter(|p| !holders.contains(&p.id))
        .collect();
    candidates.sort_by_key(|p| {
        let back = lost_on.contains(&p.id) && p.free >= len;
        (!back, load.get(&p.id).copied().unwrap_or(0), p.id)
    });
    let targets: Vec<ProviderInfo> = candidates
        .into_iter()
        .take(want - good.len())
        .cloned()
        .collect();
    if targets.is_empty() {
        return;
    }
    for t in &targets {
        *load.entry(t.id).or_default() += len;
    }
    plan.copy_bytes += len * targets.len() as u64;
    plan.chunks.push(ChunkCopy {
        id,
        len,
        sources,
        targets,
        good,
    });
}

fn writable(providers: &HashMap<ProviderId, ProviderInfo>) -> Vec<&ProviderInfo> {
    let mut w: Vec<&ProviderInfo> = providers
        .values()
        .filter(|p| p.alive && !p.draining)
        .collect();
    w.sort_by_key(|p| p.id);
    w
}

/// Compares the references with what live providers hold (the audit).
pub fn plan(refs: &References, inv: &Inventory, ring: &Ring) -> Plan {
    let mut plan = Plan::default();
    let writable = writable(&inv.providers);
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
        plan_chunk(
            &mut plan,
            *id,
            copies.len,
            want,
            &holders,
            &[],
            &inv.providers,
            &writable,
            &mut load,
        );
    }
    // Whole replica sets from the listings: nothing to trim in the recorded sets.
    plan.trimmed.clear();
    let nodes = refs.nodes.iter().map(|(k, e)| {
        (
            *k,
            e.replication,
            inv.nodes.get(k).cloned().unwrap_or_default(),
        )
    });
    plan_nodes(&mut plan, nodes, &inv.providers, ring, |k| {
        refs.nodes.get(k).map(|e| e.node.clone())
    });
    plan
}

/// Plans node copies to the current ring owners of each `(key, replication, holders)`;
/// `content` gives a node's content.
fn plan_nodes(
    plan: &mut Plan,
    nodes: impl Iterator<Item = (NodeKey, u32, Vec<ProviderId>)>,
    providers: &HashMap<ProviderId, ProviderInfo>,
    ring: &Ring,
    mut content: impl FnMut(&NodeKey) -> Option<Arc<Node>>,
) {
    for (key, replication, holders) in nodes {
        let want = replication as usize;
        let good = holders.iter().filter(|p| counts(providers, **p)).count();
        if good < want {
            plan.under_replicated_nodes += 1;
            for d in holders
                .iter()
                .filter(|p| providers.get(p).is_some_and(|i| i.draining))
            {
                *plan.draining_left.entry(*d).or_default() += 1;
            }
        }
        // The node belongs on the first `want` live, non-draining providers of its ring walk.
        let owners = ring
            .walk(&key)
            .into_iter()
            .filter(|p| counts(providers, *p))
            .take(want);
        let missing: Vec<ProviderId> = owners.filter(|o| !holders.contains(o)).collect();
        if missing.is_empty() {
            continue;
        }
        let Some(node) = content(&key) else {
            continue;
        };
        for owner in missing {
            plan.copy_nodes += 1;
            plan.nodes
                .entry(owner)
                .or_default()
                .push((key, node.clone()));
        }
    }
}

/// Event repair of chunks: those the ledger lists on providers in `affected` (down,
/// draining, or reporting lost copies), and the copies reported lost.
pub async fn chunks_from_ledger(
    ledger: &Arc<Ledger>,
    providers: &HashMap<ProviderId, ProviderInfo>,
    affected: &[ProviderId],
    lost: &[(ChunkId, ProviderId)],
) -> Result<Plan> {
    let mut plan = Plan::default();
    for p in providers.values().filter(|p| p.draining) {
        plan.draining_left.insert(p.id, 0);
    }
    if affected.is_empty() && lost.is_empty() {
        return Ok(plan);
    }
    let affected = affected.to_vec();
    let mut tracked: Vec<(ChunkId, ChunkTrack)> =
        on_ledger(ledger, move |l| l.chunks_on(&affected, LEDGER_BATCH)).await?;
    let reported: Vec<ChunkId> = lost.iter().map(|(c, _)| *c).collect();
    let known: HashSet<ChunkId> = tracked.iter().map(|(c, _)| *c).collect();
    let extra: Vec<ChunkId> = reported
        .iter()
        .copied()
        .filter(|c| !known.contains(c))
        .collect();
    let found = on_ledger(ledger, {
        let extra = extra.clone();
        move |l| l.chunks(&extra)
    })
    .await?;
    let mut unknown = HashSet::new();
    for (c, t) in extra.into_iter().zip(found) {
        match t.filter(|t| t.count > 0) {
            Some(t) => tracked.push((c, t)),
            None => {
                unknown.insert(c);
            }
        }
    }
    plan.unknown_lost = lost
        .iter()
        .copied()
        .filter(|(c, _)| unknown.contains(c))
        .collect();
    let lost_on: HashSet<(ChunkId, ProviderId)> = lost.iter().copied().collect();
    let mut losers: HashMap<ChunkId, Vec<ProviderId>> = HashMap::new();
    for (c, p) in lost {
        losers.entry(*c).or_default().push(*p);
    }
    let writable = writable(providers);
    let mut load: HashMap<ProviderId, u64> = providers.values().map(|p| (p.id, p.chunks)).collect();
    for (id, track) in tracked {
        // A copy reported lost no longer counts, wherever the ledger thinks it is.
        let holders: Vec<ProviderId> = track
            .replicas
            .iter()
            .copied()
            .filter(|p| !lost_on.contains(&(id, *p)))
            .collect();
        let trimmed_before = plan.trimmed.len();
        plan_chunk(
            &mut plan,
            id,
            track.len,
            track.replication.max(1) as usize,
            &holders,
            losers.get(&id).map_or(&[], Vec::as_slice),
            providers,
            &writable,
            &mut load,
        );
        if holders.len() < track.replicas.len() && plan.trimmed.len() == trimmed_before {
            // Enough copies remain without the lost ones: record the set without them.
            let good: Vec<ProviderId> = holders
                .iter()
                .copied()
                .filter(|p| counts(providers, *p))
                .collect();
            if good.len() >= track.replication.max(1) as usize {
                plan.trimmed.push((id, good));
            }
        }
    }
    Ok(plan)
}

/// Event repair of nodes: every listed node of a version the ledger counted (`tracks`) that is
/// not on its current ring owners is copied there from a holder. Nodes of unknown blobs and of
/// versions not counted yet are left alone: their writers may still be storing them, so one
/// listing after another can catch them on some owners and not yet on the others.
pub async fn nodes_from_listing(
    cluster: &Cluster,
    holders: &HashMap<NodeKey, Vec<ProviderId>>,
    providers: &HashMap<ProviderId, ProviderInfo>,
    ring: &Ring,
    tracks: &HashMap<BlobId, BlobTrack>,
) -> Result<Plan> {
    let replication = |k: &NodeKey| {
        tracks
            .get(&k.blob)
            .filter(|t| k.node.version <= t.counted)
            .map(|t| t.replication)
    };
    let mut plan = Plan::default();
    for p in providers.values().filter(|p| p.draining) {
        plan.draining_left.insert(p.id, 0);
    }
    // First pass without content: which nodes need a copy at all.
    let mut needed: Vec<NodeKey> = Vec::new();
    let mut probe = Plan::default();
    let items = holders
        .iter()
        .filter_map(|(k, h)| replication(k).map(|r| (*k, r, h.clone())));
    plan_nodes(&mut probe, items, providers, ring, |k| {
        needed.push(*k);
        None
    });
    plan.under_replicated_nodes = probe.under_replicated_nodes;
    for (p, n) in probe.draining_left {
        *plan.draining_left.entry(p).or_default() += n;
    }
    if needed.is_empty() {
        return Ok(plan);
    }
    // Fetch their content from a live holder each, one request per holder and batch.
    let mut by_holder: HashMap<ProviderId, Vec<NodeKey>> = HashMap::new();
    for k in &needed {
        if let Some(h) = holders[k]
            .iter()
            .find(|p| providers.get(p).is_some_and(|i| i.alive))
        {
            by_holder.entry(*h).or_default().push(*k);
        }
    }
    let mut content: HashMap<NodeKey, Arc<Node>> = HashMap::new();
    for (holder, keys) in by_holder {
        let Some(addr) = providers.get(&holder).map(|p| p.addr.clone()) else {
            continue;
        };
        for batch in keys.chunks(NODE_BATCH) {
            let req = GetNodes {
                keys: batch.to_vec(),
            };
            match cluster.pool.call(&addr, req).await {
                Ok(found) => {
                    for (k, n) in batch.iter().zip(found) {
                        if let Some(n) = n {
                            content.insert(*k, Arc::new(n));
                        }
                    }
                }
                Err(e) => tracing::warn!("fetching nodes from provider {holder}: {e}"),
            }
        }
    }
    let items = needed
        .iter()
        .filter_map(|k| replication(k).map(|r| (*k, r, holders[k].clone())));
    let mut copies = Plan::default();
    plan_nodes(&mut copies, items, providers, ring, |k| {
        content.get(k).cloned()
    });
    plan.nodes = copies.nodes;
    plan.copy_nodes = copies.copy_nodes;
    Ok(plan)
}

/// Shared progress of the running pass.
pub type Progress = Arc<Mutex<MaintenanceStatus>>;

pub(crate) fn update(progress: &Progress, f: impl FnOnce(&mut MaintenanceStatus)) {
    f(&mut progress.lock().unwrap_or_else(|p| p.into_inner()));
}

/// Carries out `plan`: chunk copies (over `copies`, a pool with a bulk transfer's timeout)
/// `parallelism` at a time under `throttle`, then the node copies, then the new replica sets
/// (with the manager and, when given, the ledger). Returns the first error after doing
/// everything it could.
#[allow(clippy::too_many_arguments)]
pub async fn execute(
    cluster: &Cluster,
    copies: &Pool,
    plan: Plan,
    providers: &HashMap<ProviderId, ProviderInfo>,
    ledger: Option<&Arc<Ledger>>,
    throttle: &Throttle,
    parallelism: usize,
    progress: &Progress,
) -> Result<()> {
    let mut first_error = None;
    let transfers = plan.chunks.into_iter().map(|copy| async move {
        throttle.take(copy.len * copy.targets.len() as u64).await;
        let results = futures::future::join_all(copy.targets.iter().map(|t| {
            let req = CopyChunk {
                id: copy.id,
                len: copy.len,
                from: copy.sources.clone(),
            };
            async move { (t.id, copies.call(&t.addr, req).await) }
        }))
        .await;
        (copy, results)
    });
    let mut stream = stream::iter(transfers).buffer_unordered(parallelism.max(1));
    let mut recorded: Vec<(ChunkId, Vec<ProviderId>)> = plan.trimmed;
    while let Some((copy, results)) = stream.next().await {
        let mut set = copy.good.clone();
        for (target, outcome) in results {
            match outcome {
                Ok(()) => {
                    set.push(target);
                    update(progress, |s| {
                        s.repair_done_bytes += copy.len;
                        s.repaired_bytes += copy.len;
                    });
                }
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
            record(cluster, ledger, std::mem::take(&mut recorded)).await?;
        }
    }
    record(cluster, ledger, recorded).await?;
    for (target, nodes) in plan.nodes {
        let Some(addr) = providers.get(&target).map(|p| p.addr.clone()) else {
            continue;
        };
        for batch in nodes.chunks(NODE_BATCH) {
            let req = PutNodes {
                nodes: batch.iter().map(|(k, n)| (*k, Node::clone(n))).collect(),
            };
            match cluster.pool.call(&addr, req).await {
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

async fn record(
    cluster: &Cluster,
    ledger: Option<&Arc<Ledger>>,
    entries: Vec<(ChunkId, Vec<ProviderId>)>,
) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    if let Some(ledger) = ledger {
        let e = entries.clone();
        on_ledger(ledger, move |l| l.set_replicas(&e)).await?;
    }
    cluster.manager(RecordReplicas { entries }).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tomus_metadata::NodeRef;
    use tomus_wire::RpcConfig;

    fn provider(id: ProviderId) -> ProviderInfo {
        ProviderInfo {
            id,
            addr: format!("127.0.0.1:{}", 1 + id),
            host: "127.0.0.1".into(),
            capacity: 1 << 30,
            free: 1 << 30,
            chunks: 0,
            load: 0,
            alive: true,
            draining: false,
            fault: None,
        }
    }

    /// A lost copy is made again on the provider that lost it while that one can take it,
    /// even when another has more room: a concurrent repairer (the audit) may have put it
    /// back there since the report, and a copy elsewhere would then be a third one.
    #[test]
    fn a_lost_copy_goes_back_to_the_provider_that_lost_it() {
        let mut providers: HashMap<ProviderId, ProviderInfo> =
            (0..3).map(|id| (id, provider(id))).collect();
        let targets = |providers: &HashMap<ProviderId, ProviderInfo>, lost_on: &[ProviderId]| {
            let mut plan = Plan::default();
            let mut load = HashMap::from([(0, 10 << 20), (1, 0), (2, 10 << 20)]);
            let writable = writable(providers);
            plan_chunk(
                &mut plan,
                ChunkId(9),
                1 << 16,
                2,
                &[2],
                lost_on,
                providers,
                &writable,
                &mut load,
            );
            assert_eq!(plan.chunks.len(), 1);
            let ids: Vec<ProviderId> = plan.chunks[0].targets.iter().map(|t| t.id).collect();
            ids
        };
        assert_eq!(
            targets(&providers, &[]),
            [1],
            "the emptiest, when none lost it"
        );
        assert_eq!(targets(&providers, &[0]), [0]);
        // One without room for it, or that cannot take data any more (draining), is passed
        // over.
        providers.get_mut(&0).unwrap().free = 1000;
        assert_eq!(targets(&providers, &[0]), [1]);
        providers.get_mut(&0).unwrap().free = 1 << 30;
        providers.get_mut(&0).unwrap().draining = true;
        assert_eq!(targets(&providers, &[0]), [1]);
    }

    /// A node listed on one provider of two is under-replicated only once the ledger counted
    /// its version: before that its writer may still be storing the other copy (the race
    /// that kept a repair pass from ever settling under steady writes).
    #[tokio::test]
    async fn nodes_of_versions_not_counted_yet_are_left_to_their_writers() {
        let cluster = Cluster::new("127.0.0.1:1".into(), Pool::new(RpcConfig::default()));
        let providers: HashMap<ProviderId, ProviderInfo> =
            (0..3).map(|id| (id, provider(id))).collect();
        let ring = Ring::new(&[0, 1, 2]);
        let key = NodeKey {
            blob: 7,
            node: NodeRef {
                version: 5,
                offset: 0,
                size: 1 << 16,
            },
        };
        let holders = HashMap::from([(key, vec![ring.walk(&key)[0]])]);
        let track = |counted| BlobTrack {
            chunk_size: 1 << 16,
            replication: 2,
            counted,
            counted_capacity: 1 << 16,
            retained_from: 1,
        };
        let writing = HashMap::from([(7, track(4))]);
        let plan = nodes_from_listing(&cluster, &holders, &providers, &ring, &writing)
            .await
            .unwrap();
        assert_eq!(plan.under_replicated_nodes, 0);
        assert!(plan.nodes.is_empty());
        let published = HashMap::from([(7, track(5))]);
        let plan = nodes_from_listing(&cluster, &holders, &providers, &ring, &published)
            .await
            .unwrap();
        assert_eq!(plan.under_replicated_nodes, 1);
    }
}
