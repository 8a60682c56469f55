//! The client's view of the cluster: the manager's address, the connection pool, provider
//! addresses and states, the DHT ring and the node cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::RwLock;
use tomus_metadata::ProviderId;
use tomus_wire::manager::ListProviders;
use tomus_wire::{Error, ErrorKind, Pool, ProviderInfo, Result, Rpc};

use crate::dht::{NodeCache, Ring};
use crate::local::{enabled_by_env, LocalProviders};

/// How long a provider list is trusted before the next lookup refreshes it (the manager
/// counts on this bound when it judges a drain complete).
const PROVIDER_LIST_TTL: Duration = tomus_wire::PROVIDER_VIEW_TTL;
/// How long a provider that just failed a request is tried last. Shorter than the manager's
/// failure detection, so a provider that only hiccuped is soon used again.
const SUSPECT_FOR: Duration = Duration::from_secs(3);

struct ProviderView {
    providers: HashMap<ProviderId, ProviderInfo>,
    ring: Arc<Ring>,
    fetched: Instant,
}

pub struct Cluster {
    pub manager: String,
    pub pool: Arc<Pool>,
    pub cache: NodeCache,
    view: RwLock<Option<ProviderView>>,
    /// Providers that failed a request recently (connection refused, timeout): tried after
    /// the others until [`SUSPECT_FOR`] passes, so one dead provider delays only the first
    /// request that meets it, not every later one until the manager notices.
    suspects: Mutex<HashMap<ProviderId, Instant>>,
    /// Providers that refused data recently for want of disk space: no new data goes to them
    /// for [`SUSPECT_FOR`] (the manager learns of it with their next heartbeat), but they are
    /// read from as before.
    full: Mutex<HashMap<ProviderId, Instant>>,
    /// Providers on this host, whose chunk files are used directly.
    pub local: LocalProviders,
}

impl Cluster {
    pub fn new(manager: String, pool: Arc<Pool>) -> Self {
        Cluster {
            manager,
            pool,
            cache: NodeCache::default(),
            view: RwLock::new(None),
            suspects: Mutex::new(HashMap::new()),
            full: Mutex::new(HashMap::new()),
            local: LocalProviders::new(
                enabled_by_env("TOMUS_LOCAL_READS"),
                enabled_by_env("TOMUS_LOCAL_WRITES"),
            ),
        }
    }

    /// The same view, reading and writing chunk files of providers on this host directly
    /// or not.
    pub fn with_local(mut self, reads: bool, writes: bool) -> Self {
        self.local = LocalProviders::new(reads, writes);
        self
    }

    /// One request to the manager.
    pub async fn manager<R: Rpc>(&self, req: R) -> Result<R::Response> {
        self.pool.call(&self.manager, req).await
    }

    pub async fn providers(&self) -> Result<Vec<ProviderInfo>> {
        self.manager(ListProviders {}).await
    }

    async fn refresh(&self) -> Result<()> {
        let list = self.providers().await?;
        let ids: Vec<ProviderId> = list.iter().map(|p| p.id).collect();
        *self.view.write().await = Some(ProviderView {
            providers: list.into_iter().map(|p| (p.id, p)).collect(),
            ring: Arc::new(Ring::new(&ids)),
            fetched: Instant::now(),
        });
        Ok(())
    }

    async fn fresh_view<T>(&self, f: impl Fn(&ProviderView) -> Option<T>) -> Result<Option<T>> {
        {
            let view = self.view.read().await;
            if let Some(v) = view
                .as_ref()
                .filter(|v| v.fetched.elapsed() < PROVIDER_LIST_TTL)
            {
                if let Some(x) = f(v) {
                    return Ok(Some(x));
                }
            }
        }
        self.refresh().await?;
        let view = self.view.read().await;
        Ok(view.as_ref().and_then(f))
    }

    /// The DHT ring over every registered provider.
    pub async fn ring(&self) -> Result<Arc<Ring>> {
        self.fresh_view(|v| Some(v.ring.clone()))
            .await?
            .ok_or_else(|| Error::internal("provider view missing after refresh"))
    }

    /// Address of provider `id` (refreshing the list once if it is unknown).
    pub async fn addr_of(&self, id: ProviderId) -> Result<String> {
        self.fresh_view(|v| v.providers.get(&id).map(|p| p.addr.clone()))
            .await?
            .ok_or_else(|| Error::not_found(format!("provider {id} is not registered")))
    }

    /// Remembers that provider `id` just failed a request in a way that says it may be down,
    /// or that its disk is full.
    pub fn suspect(&self, id: ProviderId, error: &Error) {
        // Corrupt: a copy found damaged there, or bytes damaged on the way (a bad link or
        // NIC): either way, the provider is tried last for a while.
        let list = match error.kind {
            ErrorKind::Unavailable | ErrorKind::Corrupt => &self.suspects,
            ErrorKind::NoSpace => &self.full,
            _ => return,
        };
        list.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Instant::now());
    }

    /// Providers that failed a request within the last [`SUSPECT_FOR`].
    pub(crate) fn suspected(&self) -> Vec<ProviderId> {
        recent(&self.suspects)
    }

    /// Providers no new data should go to now: suspected, or refused data for want of space
    /// within the last [`SUSPECT_FOR`].
    pub(crate) fn avoided_by_writes(&self) -> Vec<ProviderId> {
        let mut ids = self.suspected();
        ids.extend(recent(&self.full));
        ids
    }

    /// Whether provider `id` is listed alive and did not fail a request recently. Only such
    /// a provider's chunk files are read directly: the provider stays the authority on its
    /// copies (a dead one may have died of its disk, a drained one is being emptied).
    pub async fn healthy(&self, id: ProviderId) -> bool {
        if self.suspected().contains(&id) {
            return false;
        }
        let listed = self
            .fresh_view(|v| Some(v.providers.get(&id).is_some_and(|p| p.alive && !p.draining)))
            .await;
        matches!(listed, Ok(Some(true)))
    }

    /// `ids` reordered for reading: providers the manager lists as alive and that did not fail
    /// recently first (in the given order, those not known to be on another host before the
    /// others), then the rest (still worth a try as a last resort). A provider not asked yet
    /// whether it is on this host counts as a local one: preferring only the ones known local
    /// would keep the first provider a reader found on its host its only one.
    pub async fn read_order(&self, ids: &[ProviderId]) -> Vec<ProviderId> {
        let suspects = self.suspected();
        let up: Vec<bool> = match self
            .fresh_view(|v| {
                Some(
                    ids.iter()
                        .map(|id| v.providers.get(id).is_some_and(|p| p.alive))
                        .collect::<Vec<bool>>(),
                )
            })
            .await
        {
            Ok(Some(up)) => up,
            _ => vec![true; ids.len()],
        };
        let healthy = |i: usize| up[i] && !suspects.contains(&ids[i]);
        let local = |i: usize| self.local.on_this_host(ids[i]) != Some(false);
        let first = (0..ids.len()).filter(|&i| healthy(i) && local(i));
        let then = (0..ids.len()).filter(|&i| healthy(i) && !local(i));
        let last = (0..ids.len()).filter(|&i| !healthy(i));
        first.chain(then).chain(last).map(|i| ids[i]).collect()
    }

    /// The providers of `candidates` that may receive new data: alive and not draining, in
    /// the given order, with those that were full recently after the others, and those that
    /// failed a request recently last. Both are hints that last [`SUSPECT_FOR`]: a provider
    /// that failed may be back already (restarted), and space comes back when deleted blobs
    /// are collected. When the others are too few, asking one of them again answers with
    /// the real error (or takes the data) instead of failing for want of live providers.
    pub async fn writable(&self, candidates: &[ProviderId]) -> Result<Vec<ProviderId>> {
        let suspects = self.suspected();
        let recently_full = recent(&self.full);
        let usable = self
            .fresh_view(|v| {
                Some(
                    candidates
                        .iter()
                        .copied()
                        .filter(|id| v.providers.get(id).is_some_and(|p| p.alive && !p.draining))
                        .collect::<Vec<_>>(),
                )
            })
            .await?
            .unwrap_or_default();
        let (failed, answering): (Vec<_>, Vec<_>) =
            usable.into_iter().partition(|id| suspects.contains(id));
        let (full, roomy): (Vec<_>, Vec<_>) = answering
            .into_iter()
            .partition(|id| recently_full.contains(id));
        Ok(roomy.into_iter().chain(full).chain(failed).collect())
    }
}

/// The providers of `list` noted within the last [`SUSPECT_FOR`] (older notes are dropped).
fn recent(list: &Mutex<HashMap<ProviderId, Instant>>) -> Vec<ProviderId> {
    let mut l = list.lock().unwrap_or_else(|p| p.into_inner());
    l.retain(|_, since| since.elapsed() < SUSPECT_FOR);
    l.keys().copied().collect()
}
