//! Provider registry: who stores data, where, how full and how busy (from heartbeats).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tomus_metadata::ProviderId;
use tomus_wire::{host_of, Error, ProviderInfo, ProviderReport, Result};

use crate::store::{ProviderRecord, Store};

struct Entry {
    info: ProviderInfo,
    last_seen: Option<Instant>,
    /// Whether it reported its space since the manager started.
    reported: bool,
    /// Bytes placed on it since its last report (so placement does not pile onto one provider
    /// between heartbeats).
    placed_since_report: u64,
}

pub struct Registry {
    store: Arc<Store>,
    timeout: Duration,
    entries: Mutex<HashMap<ProviderId, Entry>>,
}

impl Registry {
    /// Loads known providers. A restarted manager trusts them for one timeout period (they
    /// keep running while it restarts) so writes need not wait for their next heartbeat; one
    /// that does not report within that period counts as down.
    pub fn open(store: Arc<Store>, timeout: Duration) -> Result<Self> {
        let now = Instant::now();
        let mut entries = HashMap::new();
        for r in store.providers()? {
            entries.insert(
                r.id,
                Entry {
                    info: ProviderInfo {
                        id: r.id,
                        host: host_of(&r.addr),
                        addr: r.addr,
                        capacity: 0,
                        free: 0,
                        chunks: 0,
                        load: 0,
                        alive: true,
                    },
                    last_seen: Some(now),
                    reported: false,
                    placed_since_report: 0,
                },
            );
        }
        Ok(Registry {
            store,
            timeout,
            entries: Mutex::new(entries),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProviderId, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn register(
        &self,
        id: Option<ProviderId>,
        addr: String,
        report: ProviderReport,
    ) -> Result<ProviderId> {
        if addr.parse::<std::net::SocketAddr>().is_err() && !addr.contains(':') {
            return Err(Error::invalid(format!(
                "provider address {addr:?} is not host:port"
            )));
        }
        let known = id.filter(|i| self.lock().contains_key(i));
        let id = match known {
            Some(i) => i,
            None => self.store.next_id("provider")? as ProviderId,
        };
        self.store.put_provider(&ProviderRecord {
            id,
            addr: addr.clone(),
        })?;
        let mut entries = self.lock();
        entries.insert(
            id,
            Entry {
                info: ProviderInfo {
                    id,
                    host: host_of(&addr),
                    addr,
                    capacity: report.capacity,
                    free: report.free,
                    chunks: report.chunks,
                    load: report.load,
                    alive: true,
                },
                last_seen: Some(Instant::now()),
                reported: true,
                placed_since_report: 0,
            },
        );
        tracing::info!("provider {id} registered");
        Ok(id)
    }

    pub fn heartbeat(&self, id: ProviderId, report: ProviderReport) -> Result<()> {
        let mut entries = self.lock();
        let e = entries
            .get_mut(&id)
            .ok_or_else(|| Error::not_found(format!("provider {id} is not registered")))?;
        e.info.capacity = report.capacity;
        e.info.free = report.free;
        e.info.chunks = report.chunks;
        e.info.load = report.load;
        e.last_seen = Some(Instant::now());
        e.reported = true;
        e.placed_since_report = 0;
        Ok(())
    }

    /// Every known provider, with `alive` from the heartbeat timeout.
    pub fn list(&self) -> Vec<ProviderInfo> {
        let now = Instant::now();
        let entries = self.lock();
        let mut out: Vec<ProviderInfo> = entries
            .values()
            .map(|e| {
                let mut i = e.info.clone();
                i.alive = e
                    .last_seen
                    .is_some_and(|t| now.duration_since(t) < self.timeout);
                i
            })
            .collect();
        out.sort_by_key(|p| p.id);
        out
    }

    /// Alive providers with their free space minus what was placed on them since their last
    /// report: the input of placement.
    pub fn candidates(&self) -> Vec<(ProviderInfo, u64)> {
        let now = Instant::now();
        let entries = self.lock();
        let mut out: Vec<(ProviderInfo, u64)> = entries
            .values()
            .filter(|e| {
                e.last_seen
                    .is_some_and(|t| now.duration_since(t) < self.timeout)
            })
            .map(|e| {
                // Until a provider reports, its space is unknown: place as if it had room.
                let free = if e.reported {
                    e.info.free
                } else {
                    u64::MAX / 2
                };
                (e.info.clone(), free.saturating_sub(e.placed_since_report))
            })
            .collect();
        out.sort_by_key(|(p, _)| p.id);
        out
    }

    /// Accounts for bytes just placed on providers.
    pub fn charge(&self, placed: &[(ProviderId, u64)]) {
        let mut entries = self.lock();
        for (id, bytes) in placed {
            if let Some(e) = entries.get_mut(id) {
                e.placed_since_report += bytes;
            }
        }
    }
}
