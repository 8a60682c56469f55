//! The client's view of the cluster: the manager's address, the connection pool, provider
//! addresses, the DHT ring and the node cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::RwLock;
use tomus_metadata::ProviderId;
use tomus_wire::{unexpected, Error, Pool, ProviderInfo, Request, Response, Result};

use crate::dht::{NodeCache, Ring};

/// How long a provider list is trusted before the next lookup refreshes it.
const PROVIDER_LIST_TTL: Duration = Duration::from_secs(5);

struct ProviderView {
    addrs: HashMap<ProviderId, String>,
    ring: Arc<Ring>,
    fetched: Instant,
}

pub struct Cluster {
    pub manager: String,
    pub pool: Arc<Pool>,
    pub cache: NodeCache,
    view: RwLock<Option<ProviderView>>,
}

impl Cluster {
    pub fn new(manager: String, pool: Arc<Pool>) -> Self {
        Cluster {
            manager,
            pool,
            cache: NodeCache::default(),
            view: RwLock::new(None),
        }
    }

    /// One request to the manager.
    pub async fn manager_call(&self, req: &Request) -> Result<Response> {
        self.pool
            .call(&self.manager, req, &[])
            .await
            .map(|(r, _)| r)
    }

    pub async fn providers(&self) -> Result<Vec<ProviderInfo>> {
        match self.manager_call(&Request::Providers).await? {
            Response::Providers(p) => Ok(p),
            other => Err(unexpected(&other)),
        }
    }

    async fn refresh(&self) -> Result<()> {
        let list = self.providers().await?;
        let ids: Vec<ProviderId> = list.iter().map(|p| p.id).collect();
        let addrs = list.into_iter().map(|p| (p.id, p.addr)).collect();
        *self.view.write().await = Some(ProviderView {
            addrs,
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
        self.fresh_view(|v| v.addrs.get(&id).cloned())
            .await?
            .ok_or_else(|| Error::not_found(format!("provider {id} is not registered")))
    }
}
