//! Registration with the manager and periodic heartbeats carrying the provider's state.
//!
//! The ids registration gives (the provider's, its cluster's) are kept in the data directory
//! ([`crate::identity`]), so a restarted provider registers under its old id, the replicas it
//! holds stay reachable under that id, and it never joins another cluster.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tomus_metadata::ProviderId;
use tomus_wire::manager::{self, Register};
use tomus_wire::{Error, ErrorKind, LoadGauge, Pool, ProviderReport, Result};
use tomus_worker::{Round, Worker};

use crate::blocking;
use crate::chunk_store::ChunkStore;
use crate::data_dir::DataDirWatch;
use crate::identity::Identity;

/// Minimum time between repeated warnings about the same ongoing problem.
const WARN_EVERY: Duration = Duration::from_secs(10);
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(2);
/// Guards against a zero interval, which would spin.
const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// Lost chunks one report carries at most (the rest go with the next ones).
const LOST_PER_REPORT: usize = 10_000;
/// Heartbeats that may fail in a row before the failure is reported as one: a manager that
/// restarts, or stops just before its providers, misses a beat without anything being wrong
/// (it declares a provider dead only after many missed beats).
const QUIET_MISSES: u32 = 2;

pub(crate) struct Heartbeat {
    pub pool: Arc<Pool>,
    pub manager: String,
    pub advertise: String,
    pub data_dir: PathBuf,
    pub watch: Arc<DataDirWatch>,
    pub chunks: ChunkStore,
    pub load: Arc<LoadGauge>,
    pub interval: Duration,
    pub fsync: bool,
}

/// Lets a warning through at most once per [`WARN_EVERY`].
#[derive(Default)]
struct WarnLimiter(Option<Instant>);

impl WarnLimiter {
    fn allow(&mut self) -> bool {
        let now = Instant::now();
        match self.0 {
            Some(last) if now.duration_since(last) < WARN_EVERY => false,
            _ => {
                self.0 = Some(now);
                true
            }
        }
    }
}

impl Heartbeat {
    /// Registers with the manager, retrying with backoff until it answers (it may start after
    /// the provider). Fails if the stored ids cannot be read or the new ones not saved, and
    /// with `PreconditionFailed` if the manager serves another cluster than the one this
    /// provider's data belongs to.
    pub async fn register(&self) -> Result<ProviderId> {
        let ids = Arc::new(Identity::new(&self.data_dir, self.fsync));
        let (stored, key, cluster) = {
            let ids = ids.clone();
            blocking(move || Ok((ids.provider()?, ids.registration_key()?, ids.cluster()?))).await?
        };
        let mut delay = FIRST_RETRY;
        let mut warn = WarnLimiter::default();
        loop {
            let report = self.report().await;
            let lost = report.lost.clone();
            let req = Register {
                id: stored,
                key,
                addr: self.advertise.clone(),
                report,
                cluster,
            };
            let outcome = self.pool.call(&self.manager, req).await;
            if outcome.is_err() {
                self.chunks.restore_lost(lost);
            }
            match outcome {
                Ok(joined) => {
                    let ids = ids.clone();
                    blocking(move || {
                        if cluster != Some(joined.cluster) {
                            ids.save_cluster(joined.cluster)?;
                        }
                        if stored != Some(joined.id) {
                            ids.save_provider(joined.id)?;
                        }
                        Ok(())
                    })
                    .await?;
                    return Ok(joined.id);
                }
                // Another cluster's manager: waiting changes nothing.
                Err(e) if e.kind == ErrorKind::PreconditionFailed => return Err(e),
                Err(e) => {
                    if warn.allow() {
                        tracing::warn!(
                            "cannot register with the manager at {}: {e} (retrying)",
                            self.manager
                        );
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RETRY);
                }
            }
        }
    }

    async fn report(&self) -> ProviderReport {
        let watch = self.watch.clone();
        let ((capacity, free), fault) = blocking(move || Ok(watch.space()))
            .await
            .unwrap_or(((0, 0), None));
        let stats = self.chunks.stats();
        ProviderReport {
            capacity,
            free,
            chunks: stats.chunks,
            load: self.load.current(),
            lost: self.chunks.take_lost(LOST_PER_REPORT),
            stored_bytes: stats.bytes,
            fault,
        }
    }
}

/// Heartbeats as a background worker: one per interval. A manager that no longer knows this
/// provider (its registry was reset) gets a registration instead. Up to [`QUIET_MISSES`]
/// failed heartbeats in a row are only noted in the summary; the next one fails the round.
pub(crate) struct Beats {
    pub heartbeat: Heartbeat,
    pub id: ProviderId,
    pub sent: u64,
    pub missed: u32,
    /// Told once if a registration is refused for belonging to another cluster: the
    /// provider then stops rather than beating on (`node::run` ends with the error).
    pub refused: Option<tokio::sync::oneshot::Sender<Error>>,
}

impl Worker for Beats {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn interval(&self) -> Duration {
        self.heartbeat.interval.max(MIN_INTERVAL)
    }

    async fn work(&mut self) -> Result<Round> {
        let hb = &self.heartbeat;
        let report = hb.report().await;
        let lost = report.lost.clone();
        let req = manager::Heartbeat {
            id: self.id,
            report,
        };
        let outcome = hb.pool.call(&hb.manager, req).await;
        if outcome.is_err() {
            // Reported again with the next heartbeat.
            hb.chunks.restore_lost(lost);
        }
        match outcome {
            Ok(()) => self.report_memory().await,
            Err(e) if e.kind == ErrorKind::NotFound => {
                tracing::info!(
                    "the manager does not know provider {}; registering again",
                    self.id
                );
                let id = match hb.register().await {
                    Err(e) if e.kind == ErrorKind::PreconditionFailed => {
                        if let Some(refused) = self.refused.take() {
                            let _ = refused.send(e.clone());
                        }
                        return Err(e);
                    }
                    other => other?,
                };
                if id != self.id {
                    tracing::info!("registered as provider {id} (was {})", self.id);
                }
                self.id = id;
            }
            Err(e) => {
                self.missed = self.missed.saturating_add(1);
                if self.missed <= QUIET_MISSES {
                    tracing::debug!("heartbeat to the manager at {}: {e}", hb.manager);
                    return Ok(Round::Idle);
                }
                return Err(Error::new(
                    e.kind,
                    format!(
                        "heartbeat to the manager at {} failed {} times in a row: {}",
                        hb.manager, self.missed, e.message
                    ),
                ));
            }
        }
        self.missed = 0;
        self.sent += 1;
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        let missed = match self.missed {
            0 => String::new(),
            n => format!(", the last {n} missed"),
        };
        format!(
            "provider {}: {} heartbeats sent{missed}",
            self.id, self.sent
        )
    }
}

impl Beats {
    /// Reports the memory-class store, when this provider keeps one: the manager places
    /// memory-class chunks by it. A failure is only logged; the next heartbeat reports again.
    async fn report_memory(&self) {
        let hb = &self.heartbeat;
        let memory = hb.chunks.memory();
        if memory.capacity() == 0 {
            return;
        }
        let (chunks, used) = memory.stats();
        let req = manager::MemoryReport {
            id: self.id,
            capacity: memory.capacity(),
            used,
            chunks,
        };
        if let Err(e) = hb.pool.call(&hb.manager, req).await {
            tracing::debug!("memory report to the manager at {}: {e}", hb.manager);
        }
    }
}
