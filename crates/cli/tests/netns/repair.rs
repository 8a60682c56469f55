//! Detection and repair: when the manager saw the fault, and every referenced chunk back to
//! two copies on live providers.

use super::*;

/// What the manager said after the fault, polled every 50 ms from the moment of the fault.
#[derive(Default)]
pub(super) struct Timeline {
    /// When `ListProviders` first listed the failed provider as not alive.
    pub(super) detected: Option<Duration>,
    /// The manager's clock then: a repair pass that started later saw the failure.
    pub(super) detected_ms: u64,
    pub(super) first_under_replicated: Option<Duration>,
    pub(super) max_under_chunks: u64,
    pub(super) max_under_bytes: u64,
    pub(super) max_under_nodes: u64,
    pub(super) max_lost: u64,
    pub(super) max_repair_total_bytes: u64,
    /// When the status first reported nothing under-replicated or lost from a pass that
    /// started after the detection, and that status.
    pub(super) clean: Option<(Duration, ClusterStatus)>,
    pub(super) last: Option<ClusterStatus>,
}

pub(super) type SharedTimeline = Arc<Mutex<Timeline>>;

pub(super) async fn monitor(client: Client, addr: String, fault_at: Instant, t: SharedTimeline) {
    while fault_at.elapsed() < REPAIR_LIMIT {
        let detected = t.lock().unwrap().detected.is_some();
        if !detected {
            if let Ok(list) = client.providers().await {
                if list.iter().any(|p| p.addr == addr && !p.alive) {
                    let at = fault_at.elapsed();
                    let detected_ms = status(&client).await.now_ms;
                    let mut t = t.lock().unwrap();
                    t.detected = Some(at);
                    t.detected_ms = detected_ms;
                }
            }
        }
        if let Ok(st) = client.manager_call(GetStatus {}).await {
            let at = fault_at.elapsed();
            let mut t = t.lock().unwrap();
            let m = &st.maintenance;
            if m.under_replicated_chunks > 0 || m.under_replicated_nodes > 0 || m.lost_chunks > 0 {
                t.first_under_replicated.get_or_insert(at);
            }
            t.max_under_chunks = t.max_under_chunks.max(m.under_replicated_chunks);
            t.max_under_bytes = t.max_under_bytes.max(m.under_replicated_bytes);
            t.max_under_nodes = t.max_under_nodes.max(m.under_replicated_nodes);
            t.max_lost = t.max_lost.max(m.lost_chunks);
            t.max_repair_total_bytes = t.max_repair_total_bytes.max(m.repair_total_bytes);
            if t.detected.is_some() && t.clean.is_none() && m.repaired_since(t.detected_ms) {
                t.clean = Some((at, st.clone()));
            }
            let done = t.clean.is_some();
            t.last = Some(st);
            if done {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every chunk referenced by the given versions of the blob, from their metadata trees.
pub(super) async fn referenced_chunks(
    net: &Net,
    blob: &Blob,
    versions: &[VersionInfo],
) -> Vec<ChunkId> {
    let cluster = Cluster::new(net.manager.clone(), net.pool());
    let source = DhtSource {
        cluster: &cluster,
        blob: blob.id(),
    };
    let mut out = BTreeSet::new();
    for info in versions {
        let root = NodeRef {
            version: info.version,
            offset: 0,
            size: info.capacity,
        };
        let segments = resolve_range(root, Span::new(0, info.size), &source)
            .await
            .unwrap_or_else(|e| panic!("resolving version {}: {e}", info.version));
        for s in segments {
            if let Segment::Data(p) = s {
                out.insert(p.chunk);
            }
        }
    }
    out.into_iter().collect()
}

/// The chunks a provider holds (id, length), from its own listing.
pub(super) async fn list_chunks(pool: &Pool, addr: &str) -> Result<Vec<(ChunkId, u64)>, String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let req = ListChunks {
            start_after: after,
            limit: 5000,
        };
        let page = pool
            .call(addr, req)
            .await
            .map_err(|e| format!("ListChunks on {addr}: {e}"))?
            .entries;
        let done = page.len() < 5000;
        after = page.last().map(|c| c.id);
        out.extend(page.into_iter().map(|c| (c.id, c.len)));
        if done {
            return Ok(out);
        }
    }
}

/// Waits until every chunk in `refs` is held by at least `REPLICATION` live providers other
/// than `gone` (their own listings), and the monitor saw `tomus status` report nothing
/// under-replicated from a pass that started after the detection. Returns when the listings
/// were first found complete (an upper bound: they are first checked after the read-back)
/// and the referenced bytes.
pub(super) async fn wait_repaired(
    o: &Outcome,
    refs: &[ChunkId],
    gone: &str,
    label: &str,
) -> (Duration, u64) {
    let pool = o.net.pool();
    let mut listed_at = None;
    let mut bytes = 0;
    loop {
        let providers: Vec<ProviderInfo> = o.client.providers().await.expect("providers");
        let live: Vec<&ProviderInfo> = providers
            .iter()
            .filter(|p| p.alive && p.addr != gone)
            .collect();
        let mut holders: HashMap<ChunkId, (usize, u64)> = HashMap::new();
        let mut listing_errors = Vec::new();
        for p in &live {
            match list_chunks(&pool, &p.addr).await {
                Ok(ids) => {
                    for (id, len) in ids {
                        let h = holders.entry(id).or_default();
                        h.0 += 1;
                        h.1 = len;
                    }
                }
                Err(e) => listing_errors.push(e),
            }
        }
        let short: Vec<(&ChunkId, usize)> = refs
            .iter()
            .map(|id| (id, holders.get(id).map_or(0, |h| h.0)))
            .filter(|&(_, n)| n < REPLICATION as usize)
            .collect();
        if listed_at.is_none() && short.is_empty() && listing_errors.is_empty() {
            listed_at = Some(o.fault_at.elapsed());
            bytes = refs.iter().map(|id| holders[id].1).sum();
        }
        let clean = o.timeline.lock().unwrap().clean.is_some();
        if let (Some(at), true) = (listed_at, clean) {
            return (at, bytes);
        }
        if o.fault_at.elapsed() > REPAIR_LIMIT {
            let t = o.timeline.lock().unwrap();
            let m = t
                .last
                .as_ref()
                .map(|s| s.maintenance.clone())
                .unwrap_or_default();
            let stuck = if m.last_pass_started_ms <= t.detected_ms {
                format!(
                    "the maintenance service completed no pass that started after the failure was \
                     detected at {} Unix ms (running now: {}, last pass ended at {} Unix ms); ",
                    t.detected_ms, m.running, m.last_pass_ms
                )
            } else {
                String::new()
            };
            panic!(
                "[{label}] not repaired {REPAIR_LIMIT:?} after the fault: {stuck}{} of {} \
                 referenced chunks on fewer than {REPLICATION} live providers (e.g. {:?}); \
                 listing errors {listing_errors:?}; live providers {:?}; status clean: {clean}; \
                 last maintenance status {m:#?}\n{}",
                short.len(),
                refs.len(),
                short.iter().take(3).collect::<Vec<_>>(),
                live.iter().map(|p| &p.addr).collect::<Vec<_>>(),
                o.net.hosts.log_tails(15)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
