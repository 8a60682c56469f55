//! Provider registry: who stores data, where, how full and how busy (from heartbeats), which
//! providers are draining, and what the maintenance service last reported.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tomus_metadata::{ChunkId, ProviderId};
use tomus_wire::{
    check_count, host_of, Error, ErrorKind, LostChunks, MaintenanceStatus, ProviderInfo,
    ProviderReport, Result, MAX_ITEMS, PROVIDER_VIEW_TTL,
};

/// Longest last-error message a maintenance report or a provider's fault keeps.
const MAX_REPORTED_ERROR: usize = 4096;

use crate::store::Store;
use crate::versions::{drain_horizon, now_ms, removal_fence};

struct Entry {
    info: ProviderInfo,
    last_seen: Option<Instant>,
    /// Whether it reported its space since the manager started.
    reported: bool,
    /// Bytes placed on it since its last report (so placement does not pile onto one provider
    /// between heartbeats).
    placed_since_report: u64,
    /// Chunks placed on it since its last report.
    placed_chunks_since_report: u64,
    /// While draining: when the drain started (Unix ms, durable).
    drain_started_ms: u64,
    /// Bytes of chunks it stores, from its last report (not durable: heartbeats refresh it).
    stored_bytes: u64,
}

/// The maintenance service's latest report.
#[derive(Default)]
struct Maintenance {
    status: MaintenanceStatus,
    /// When it arrived (Unix ms; 0: never).
    received_ms: u64,
}

pub struct Registry {
    store: Arc<Store>,
    timeout: Duration,
    entries: Mutex<HashMap<ProviderId, Entry>>,
    /// Serializes durable changes (register, drain, remove), so a removal and a
    /// re-registration under the same id cannot interleave.
    changes: Mutex<()>,
    maintenance: Mutex<Maintenance>,
    /// Chunk copies providers reported lost (quarantined), for repair to take.
    lost: Mutex<LostChunks>,
}

/// Most lost-copy reports kept until repair takes them; past it, repair's audit finds them.
const MAX_LOST: usize = 100_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cuts `text` to at most `max` bytes on a character boundary: reports shown by `tomus status`
/// come from the network and are not a place to store a book.
fn truncate_at_char(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
}

/// A fault a provider reported, cut to [`MAX_REPORTED_ERROR`].
fn bounded(fault: Option<String>) -> Option<String> {
    fault.map(|mut f| {
        truncate_at_char(&mut f, MAX_REPORTED_ERROR);
        f
    })
}

/// Logs a provider's fault when it changes.
fn log_fault_change(id: ProviderId, addr: &str, old: Option<&str>, new: Option<&str>) {
    match (old, new) {
        (old, Some(f)) if old != Some(f) => {
            tracing::error!("provider {id} ({addr}) reports a fault and counts as down: {f}")
        }
        (Some(_), None) => tracing::info!("provider {id} ({addr}) no longer reports a fault"),
        _ => {}
    }
}

impl Registry {
    /// Loads known providers. A restarted manager trusts them for one timeout period (they
    /// keep running while it restarts) so writes need not wait for their next heartbeat; one
    /// that does not report within that period counts as down.
    pub fn open(store: Arc<Store>, timeout: Duration) -> Result<Self> {
        let now = Instant::now();
        let drains: HashMap<ProviderId, u64> = store.drains()?.into_iter().collect();
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
                        draining: drains.contains_key(&r.id),
                        fault: None,
                    },
                    last_seen: Some(now),
                    reported: false,
                    placed_since_report: 0,
                    placed_chunks_since_report: 0,
                    drain_started_ms: drains.get(&r.id).copied().unwrap_or(0),
                    stored_bytes: 0,
                },
            );
        }
        Ok(Registry {
            store,
            timeout,
            entries: Mutex::new(entries),
            changes: Mutex::new(()),
            maintenance: Mutex::new(Maintenance::default()),
            lost: Mutex::new(LostChunks::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ProviderId, Entry>> {
        lock(&self.entries)
    }

    /// After this long without a heartbeat a provider counts as down.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Heard from within the timeout, and not reporting a fault.
    fn alive(&self, e: &Entry, now: Instant) -> bool {
        e.info.fault.is_none()
            && e.last_seen
                .is_some_and(|t| now.duration_since(t) < self.timeout)
    }

    /// The entry's info with `alive` from the heartbeat timeout and the reported fault.
    fn view(&self, e: &Entry, now: Instant) -> ProviderInfo {
        ProviderInfo {
            alive: self.alive(e, now),
            ..e.info.clone()
        }
    }

    pub fn register(
        &self,
        id: Option<ProviderId>,
        key: u128,
        addr: String,
        report: ProviderReport,
    ) -> Result<ProviderId> {
        if addr.parse::<std::net::SocketAddr>().is_err() && !addr.contains(':') {
            return Err(Error::invalid(format!(
                "provider address {addr:?} is not host:port"
            )));
        }
        let _changes = lock(&self.changes);
        // A removed provider's id is gone: it comes back under a new one. A provider sends
        // its registration again when the answer does not come in time (a slow disk under
        // the manager): its key then names the id the manager gave it.
        let listed = |i: &ProviderId| self.lock().contains_key(i);
        let known = match id.filter(listed) {
            Some(i) => Some(i),
            None => self.store.provider_of_key(key)?.filter(listed),
        };
        let id = self.store.put_provider(known, &addr, key)?;
        let fault = bounded(report.fault);
        let mut entries = self.lock();
        // Draining survives re-registration (a provider restarting mid-drain).
        let (draining, drain_started_ms, old_fault) =
            entries.get(&id).map_or((false, 0, None), |e| {
                (e.info.draining, e.drain_started_ms, e.info.fault.clone())
            });
        log_fault_change(id, &addr, old_fault.as_deref(), fault.as_deref());
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
                    draining,
                    fault,
                },
                last_seen: Some(Instant::now()),
                reported: true,
                placed_since_report: 0,
                placed_chunks_since_report: 0,
                drain_started_ms,
                stored_bytes: report.stored_bytes,
            },
        );
        drop(entries);
        self.note_lost(id, report.lost);
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
        e.stored_bytes = report.stored_bytes;
        e.last_seen = Some(Instant::now());
        e.reported = true;
        e.placed_since_report = 0;
        e.placed_chunks_since_report = 0;
        let fault = bounded(report.fault);
        log_fault_change(id, &e.info.addr, e.info.fault.as_deref(), fault.as_deref());
        e.info.fault = fault;
        drop(entries);
        self.note_lost(id, report.lost);
        Ok(())
    }

    fn note_lost(&self, provider: ProviderId, chunks: Vec<ChunkId>) {
        if chunks.is_empty() {
            return;
        }
        let mut lost = lock(&self.lost);
        for c in chunks {
            if lost.chunks.len() >= MAX_LOST {
                lost.overflowed = true;
                break;
            }
            lost.chunks.push((c, provider));
        }
    }

    /// The lost copies reported since the last call, and whether some did not fit.
    pub fn take_lost(&self) -> LostChunks {
        std::mem::take(&mut *lock(&self.lost))
    }

    /// Every known provider, with `alive` from the heartbeat timeout.
    pub fn list(&self) -> Vec<ProviderInfo> {
        let now = Instant::now();
        let entries = self.lock();
        let mut out: Vec<ProviderInfo> = entries.values().map(|e| self.view(e, now)).collect();
        out.sort_by_key(|p| p.id);
        out
    }

    /// Every known provider (as [`Registry::list`]) with the chunk bytes it last reported
    /// storing, for metrics and the dashboard.
    pub fn list_with_stored(&self) -> Vec<(ProviderInfo, u64)> {
        let now = Instant::now();
        let entries = self.lock();
        let mut out: Vec<(ProviderInfo, u64)> = entries
            .values()
            .map(|e| (self.view(e, now), e.stored_bytes))
            .collect();
        out.sort_by_key(|(p, _)| p.id);
        out
    }

    /// How many providers can take new data: alive and not draining.
    pub fn usable(&self) -> usize {
        let now = Instant::now();
        let entries = self.lock();
        entries
            .values()
            .filter(|e| self.alive(e, now) && !e.info.draining)
            .count()
    }

    /// The providers' states, for an error that says placement failed: how many take data and
    /// the most free space among them, how many are down, draining or failed, and the first
    /// faults reported.
    pub fn states_summary(&self) -> String {
        const FAULTS_SHOWN: usize = 3;
        let now = Instant::now();
        let entries = self.lock();
        let (mut taking, mut most_free, mut down, mut draining) = (0, 0u64, 0, 0);
        let mut faults = Vec::new();
        for e in entries.values() {
            if let Some(f) = &e.info.fault {
                faults.push(format!("provider {} ({}): {f}", e.info.id, e.info.addr));
            } else if !self.alive(e, now) {
                down += 1;
            } else if e.info.draining {
                draining += 1;
            } else {
                taking += 1;
                most_free = most_free.max(e.info.free.saturating_sub(e.placed_since_report));
            }
        }
        let mut out = format!(
            "of {} providers, {taking} take data (the most free space on one: {most_free} \
             bytes), {down} down, {draining} draining, {} failed",
            entries.len(),
            faults.len()
        );
        faults.sort();
        for f in faults.iter().take(FAULTS_SHOWN) {
            out.push_str("; ");
            out.push_str(f);
        }
        if faults.len() > FAULTS_SHOWN {
            out.push_str(&format!("; {} more failed", faults.len() - FAULTS_SHOWN));
        }
        out
    }

    /// Alive providers that are not draining, with their free space minus what was placed
    /// on them since their last report (and their chunk count plus the chunks placed since):
    /// the input of placement.
    pub fn candidates(&self) -> Vec<(ProviderInfo, u64)> {
        let now = Instant::now();
        let entries = self.lock();
        let mut out: Vec<(ProviderInfo, u64)> = entries
            .values()
            .filter(|e| self.alive(e, now) && !e.info.draining)
            .map(|e| {
                // Until a provider reports, its space is unknown: place as if it had room.
                let free = if e.reported {
                    e.info.free
                } else {
                    u64::MAX / 2
                };
                let mut info = self.view(e, now);
                info.chunks += e.placed_chunks_since_report;
                (info, free.saturating_sub(e.placed_since_report))
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
                e.placed_chunks_since_report += 1;
            }
        }
    }

    /// Ids of the providers registered at `addr` (a provider that lost its state and
    /// registered again may have left an older id there), or NotFound.
    fn at(&self, entries: &HashMap<ProviderId, Entry>, addr: &str) -> Result<Vec<ProviderId>> {
        let mut ids: Vec<ProviderId> = entries
            .values()
            .filter(|e| e.info.addr == addr)
            .map(|e| e.info.id)
            .collect();
        if ids.is_empty() {
            return Err(Error::not_found(format!(
                "no provider is registered at {addr}"
            )));
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Starts draining the provider(s) at `addr`, durably: they get no new chunks and the
    /// maintenance service moves their data elsewhere. Returns the newest one's info.
    pub fn drain(&self, addr: &str) -> Result<ProviderInfo> {
        let _changes = lock(&self.changes);
        let (ids, fresh) = {
            let entries = self.lock();
            let ids = self.at(&entries, addr)?;
            let fresh: Vec<ProviderId> = ids
                .iter()
                .copied()
                .filter(|id| entries.get(id).is_some_and(|e| !e.info.draining))
                .collect();
            (ids, fresh)
        };
        let since = now_ms();
        let marks: Vec<(ProviderId, u64)> = fresh.iter().map(|id| (*id, since)).collect();
        if !marks.is_empty() {
            self.store.put_drains(&marks)?;
        }
        let now = Instant::now();
        let mut entries = self.lock();
        for id in &fresh {
            if let Some(e) = entries.get_mut(id) {
                e.info.draining = true;
                e.drain_started_ms = since;
                tracing::info!("provider {id} ({addr}) is draining");
            }
        }
        ids.iter()
            .rev()
            .find_map(|id| entries.get(id))
            .map(|e| self.view(e, now))
            .ok_or_else(|| Error::not_found(format!("no provider is registered at {addr}")))
    }

    /// The latest drain horizon of the draining providers (0: none drains).
    pub fn drain_horizon_ms(&self) -> u64 {
        self.lock()
            .values()
            .filter(|e| e.info.draining)
            .map(|e| drain_horizon(e.drain_started_ms))
            .max()
            .unwrap_or(0)
    }

    /// Why the provider of `e` may not be removed yet (`None`: it may). `settled`: what
    /// [`crate::versions::VersionManager::drains_settled_at`] says.
    fn keeps(
        &self,
        e: &Entry,
        now: Instant,
        m: &Maintenance,
        settled: Option<u64>,
    ) -> Option<String> {
        let who = format!("provider {} ({})", e.info.id, e.info.addr);
        if !self.alive(e, now) {
            return None;
        }
        if !e.info.draining {
            return Some(format!(
                "{who} is still alive and not drained: drain it first, or stop it and wait \
                 {:.0}s until it counts as down",
                self.timeout.as_secs_f64()
            ));
        }
        let Some(settled) = settled else {
            return Some(format!(
                "{who} is still alive and not drained: writes that may have put data on it \
                 are not published yet"
            ));
        };
        if m.status.last_pass_started_ms <= settled {
            return Some(format!(
                "{who} is still alive and not drained: no maintenance pass has started since \
                 the last write that may have put data on it (clients learn of a drain within \
                 {}s)",
                PROVIDER_VIEW_TTL.as_secs()
            ));
        }
        // Not listed: the reporting pass planned before the drain began, so it says nothing
        // about this provider yet.
        let Some(left) = m
            .status
            .draining
            .iter()
            .find(|(id, _)| *id == e.info.id)
            .map(|(_, bytes)| *bytes)
        else {
            return Some(format!(
                "{who} is still alive and not drained: no maintenance pass has planned its \
                 drain yet"
            ));
        };
        (left > 0).then(|| {
            format!(
                "{who} is still alive and not drained: {left} bytes are still to be moved \
                 off it (maintenance report of {} ms ago)",
                now_ms().saturating_sub(m.received_ms)
            )
        })
    }

    /// Forgets the provider(s) at `addr`: allowed when down, or when draining and the report
    /// of a maintenance pass that started after `settled` (see `Registry::keeps`) shows
    /// nothing left on it. Returns their ids and the time before which writes may have put
    /// data on them (see [`removal_fence`]; 0: none was draining), recorded with the removal.
    pub fn remove(&self, addr: &str, settled: Option<u64>) -> Result<(Vec<ProviderId>, u64)> {
        let _changes = lock(&self.changes);
        let (ids, horizon) = {
            let entries = self.lock();
            let m = lock(&self.maintenance);
            let now = Instant::now();
            let ids = self.at(&entries, addr)?;
            let mut horizon = 0;
            for e in ids.iter().filter_map(|id| entries.get(id)) {
                if let Some(why) = self.keeps(e, now, &m, settled) {
                    return Err(Error::new(ErrorKind::PreconditionFailed, why));
                }
                if e.info.draining {
                    horizon = horizon.max(drain_horizon(e.drain_started_ms));
                }
            }
            (ids, horizon)
        };
        let fence = removal_fence(horizon);
        self.store.remove_providers(&ids, fence)?;
        let mut entries = self.lock();
        for id in &ids {
            entries.remove(id);
            tracing::info!("provider {id} ({addr}) removed");
        }
        Ok((ids, fence))
    }

    /// Keeps the maintenance service's latest report (in memory: it reports again soon).
    pub fn report_maintenance(&self, mut status: MaintenanceStatus) -> Result<()> {
        check_count("draining providers", status.draining.len(), MAX_ITEMS)?;
        if let Some(e) = status.last_error.as_mut() {
            truncate_at_char(e, MAX_REPORTED_ERROR);
        }
        let mut m = lock(&self.maintenance);
        m.status = status;
        m.received_ms = now_ms();
        Ok(())
    }

    /// The latest maintenance report and when it arrived (Unix ms; 0: never).
    pub fn maintenance(&self) -> (MaintenanceStatus, u64) {
        let m = lock(&self.maintenance);
        (m.status.clone(), m.received_ms)
    }
}
