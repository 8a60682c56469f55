//! The maintenance service's three workers, sharing one [`Service`]:
//! - `gc`: asks the manager for cutoffs, follows its change log into the ledger and deletes
//!   what the ledger found dead;
//! - `repair`: copies what providers that went down, drain or lost copies held, from the
//!   ledger's replica sets, and moves nodes to their ring owners when membership changed;
//! - `audit`: the slow full walk, every `--audit-interval-ms` or when repair asks for it.
//!
//! They run side by side, so a long audit or a big repair does not hold collection up. The
//! audit and `gc` take turns on the ledger (its check must see the ledger and the cluster at
//! one moment); repair only reads the ledger and updates replica sets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tomus_client::cluster::Cluster;
use tomus_client::dht::Ring;
use tomus_metadata::{BlobId, ChunkId, ProviderId};
use tomus_wire::maintenance::{Changes, GrantCutoffs, TakeLostChunks};
use tomus_wire::{now_ms, Cutoffs, Pool, ProviderInfo, Result};
use tomus_worker::{Round, Worker};

use crate::follow::{self, on_ledger};
use crate::ledger::{BlobTrack, Ledger};
use crate::repair::{self, update, Progress};
use crate::throttle::Throttle;
use crate::{audit, collect, inventory, MaintenanceConfig};

/// What the workers share.
pub(crate) struct Service {
    pub config: MaintenanceConfig,
    pub cluster: Cluster,
    pub copies: Arc<Pool>,
    pub ledger: Arc<Ledger>,
    pub throttle: Throttle,
    pub progress: Progress,
    /// Held by a `gc` round and by the audit's walk and ledger check.
    pub ledger_turn: tokio::sync::Mutex<()>,
    /// Held by a repair round and by the audit from listing the providers to the end of its
    /// copies. Each plans from a view taken when it starts: run together, after a provider
    /// died, both copied every chunk it held (a third copy each, kept for good).
    pub copy_turn: tokio::sync::Mutex<()>,
    /// The cutoffs granted by the last `gc` round that followed the whole change log: the
    /// audit deletes untracked chunks older than these (`None`: none yet, or no collection).
    pub settled: Mutex<Option<Cutoffs>>,
    /// Set by repair when reports of lost copies were dropped: only an audit finds them.
    pub audit_wanted: AtomicBool,
    pub wake_audit: Arc<Notify>,
    /// Cuts `gc`'s pause short: repair is waiting for the ledger.
    pub wake_gc: Arc<Notify>,
    /// When the bytes of the unreferenced chunks were last summed, and what it took.
    pub bytes_summed: Mutex<Option<(Instant, Duration)>>,
}

/// The sum of the unreferenced chunks' bytes reads a row per chunk waiting: with 100,000
/// of them (8 x 12,500 small appends deleted) a `gc` round took 51-65 ms instead of 1-4,
/// every 2 s for the whole reuse grace, and the cost grows with the chunks. It is redone
/// once this many times what it last took has passed (every round or every other while
/// few chunks wait), so it never costs more than a hundredth of a core.
const SUM_AFTER_TAKING: u32 = 100;

impl Service {
    /// Refreshes the ledger's figures in the status: the counts every time, the bytes
    /// waiting for deletion when they are due (see [`SUM_AFTER_TAKING`]) or `now`.
    async fn refresh_ledger_stats(&self, now: bool) -> Result<()> {
        let stats = on_ledger(&self.ledger, |l| l.stats()).await?;
        let due = || {
            self.bytes_summed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none_or(|(at, took)| at.elapsed() >= took * SUM_AFTER_TAKING)
        };
        let bytes = if stats.unreferenced_chunks == 0 {
            Some(0)
        } else if !now && !due() {
            None
        } else {
            let started = Instant::now();
            let bytes = on_ledger(&self.ledger, |l| l.unreferenced_bytes()).await?;
            *self
                .bytes_summed
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some((Instant::now(), started.elapsed()));
            Some(bytes)
        };
        update(&self.progress, |s| {
            s.ledger_leaves = stats.leaves;
            s.ledger_chunks = stats.chunks;
            s.unreferenced_chunks = stats.unreferenced_chunks;
            if let Some(bytes) = bytes {
                s.unreferenced_bytes = bytes;
            }
            s.pending_deletions = stats.doomed;
        });
        Ok(())
    }
}

/// Cutoffs, the change log, collection.
pub(crate) struct GcWorker {
    pub service: Arc<Service>,
    pub last: String,
}

impl Worker for GcWorker {
    fn name(&self) -> &'static str {
        "gc"
    }

    fn interval(&self) -> Duration {
        self.service.config.interval
    }

    async fn work(&mut self) -> Result<Round> {
        let s = &self.service;
        let _turn = s.ledger_turn.lock().await;
        let started = Instant::now();
        // Granted before the changes are read: versions published after this were pending
        // at the grant or came later, and their data is younger than the cutoffs.
        let cutoffs = match s.config.gc_grace {
            Some(grace) => {
                let now = now_ms();
                let proposed = Cutoffs {
                    fresh_ms: now.saturating_sub(grace.as_millis() as u64),
                    reused_ms: now.saturating_sub(s.config.reuse_grace.as_millis() as u64),
                };
                Some(s.cluster.manager(GrantCutoffs { proposed }).await?)
            }
            None => None,
        };
        let mut first_error = None;
        let followed = follow::follow(&s.cluster, &s.ledger).await;
        let caught_up = followed.is_ok();
        match followed {
            Ok(f) => update(&s.progress, |p| {
                p.changes_applied += f.changes;
                p.versions_counted += f.counted;
                p.rebuilds += f.rebuilt as u64;
                if f.counted > 0 {
                    p.last_count_round_versions = f.counted;
                    p.last_count_round_ms = started.elapsed().as_millis() as u64;
                }
            }),
            Err(e) => first_error = Some(e),
        }
        let (mut nodes, mut chunks) = (0, 0);
        if let Some(c) = cutoffs {
            let providers = s.cluster.providers().await?;
            // What the ledger doomed is dead whatever happened to the counting since; the
            // unreferenced chunks wait for a round that followed the whole log.
            match collect::nodes(&s.cluster, &s.ledger, &providers).await {
                Ok(n) => nodes = n.nodes,
                Err(e) => first_error = first_error.or(Some(e)),
            }
            if caught_up {
                match collect::chunks(&s.cluster, &s.ledger, &providers, c.reused_ms).await {
                    Ok(n) => {
                        chunks = n.chunks;
                        update(&s.progress, |p| {
                            p.gc_chunks += n.chunks;
                            p.gc_bytes += n.bytes;
                        })
                    }
                    Err(e) => first_error = first_error.or(Some(e)),
                }
                *s.settled.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
            }
            update(&s.progress, |p| p.gc_nodes += nodes);
        }
        s.refresh_ledger_stats(false).await?;
        self.last = format!("deleted {nodes} nodes and {chunks} chunks");
        first_error.map_or(Ok(Round::Idle), Err)
    }

    fn summary(&self) -> String {
        self.last.clone()
    }
}

/// Event repair.
pub(crate) struct RepairWorker {
    pub service: Arc<Service>,
    /// Providers as the last complete round saw them (id -> alive, draining), to notice
    /// changes.
    pub membership: HashMap<ProviderId, (bool, bool)>,
    /// Copies reported lost that the ledger could not place yet: tried again until a round
    /// whose ledger had followed the whole change log.
    pub unresolved: Vec<(ChunkId, ProviderId)>,
    /// The pass under way, kept across rounds until one completes it.
    pub pass: Option<PassStart>,
    pub last: String,
}

/// Where a repair pass began: the change log's end and the manager's clock then. A round
/// completes the pass once it plans from a ledger that has applied the log up to `position`;
/// the target stays put across rounds, so writers that keep moving the log's end (and a `gc`
/// slower than a round) cannot keep every pass from completing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PassStart {
    position: u64,
    started_ms: u64,
}

/// How often a repair round waiting for the ledger looks again.
const LEDGER_POLL: Duration = Duration::from_millis(20);

/// Lost-copy reports kept for a later round at most (the audit finds the rest).
const MAX_UNRESOLVED: usize = 100_000;

impl Worker for RepairWorker {
    fn name(&self) -> &'static str {
        "repair"
    }

    fn interval(&self) -> Duration {
        self.service.config.interval
    }

    /// A round completes a pass (what `tomus status` and waiting tests count) only when the
    /// ledger it planned from had followed every change logged before the pass began (at the
    /// first round since the last complete one): its findings then cover every version
    /// published before that start, which is the start the pass reports.
    async fn work(&mut self) -> Result<Round> {
        update(&self.service.progress, |p| p.running = true);
        let started = Instant::now();
        let outcome = self.repair().await;
        update(&self.service.progress, |p| {
            p.running = false;
            p.last_pass_ms = now_ms();
            p.last_pass_duration_ms = started.elapsed().as_millis() as u64;
            match &outcome {
                Ok(completed) => {
                    if let Some(pass) = completed {
                        p.passes += 1;
                        p.last_pass_started_ms = pass.started_ms;
                    }
                    p.last_error = None;
                }
                Err(e) => p.last_error = Some(e.to_string()),
            }
        });
        outcome.map(|_| Round::Idle)
    }

    fn summary(&self) -> String {
        self.last.clone()
    }
}

/// How long a repair round waits for the ledger to reach the log's position, at least.
const LEDGER_WAIT: Duration = Duration::from_secs(1);

impl RepairWorker {
    /// Waits (a little) until the ledger has applied the change log up to `position`; the
    /// ledger's position then.
    async fn wait_for_ledger(&self, position: u64) -> Result<u64> {
        let s = &self.service;
        let deadline = Instant::now() + LEDGER_WAIT + 2 * s.config.interval;
        loop {
            let cursor = on_ledger(&s.ledger, |l| l.cursor()).await?;
            if cursor >= position || Instant::now() >= deadline {
                return Ok(cursor);
            }
            s.wake_gc.notify_one();
            tokio::time::sleep(LEDGER_POLL).await;
        }
    }

    /// Chunks of providers that are down or draining and copies reported lost, from the
    /// ledger; nodes off their ring owners when membership changed. Returns the pass this
    /// round completed: one whose start the ledger it planned from had caught up with (it
    /// waits a little for that, waking `gc`: under a steady stream of writes the ledger is
    /// always a round behind the log).
    async fn repair(&mut self) -> Result<Option<PassStart>> {
        let s = self.service.clone();
        // Before the view is taken: an audit copying meanwhile would not be in it.
        let _copying = s.copy_turn.lock().await;
        let started_ms = now_ms();
        let providers = s.cluster.providers().await?;
        let mut lost = s.cluster.manager(TakeLostChunks {}).await?;
        lost.chunks.append(&mut self.unresolved);
        // Read after the reports were taken: a chunk reported lost belongs to a version
        // published before this position, so a ledger that reached it knows the chunk (or
        // nothing retained references it).
        let position = s
            .cluster
            .manager(Changes {
                after: u64::MAX,
                limit: 0,
            })
            .await?
            .last;
        let pass = *self.pass.get_or_insert(PassStart {
            position,
            started_ms,
        });
        // Waits for this round's position, as its own reports and membership need it; the
        // pass needs only its older start.
        let cursor = self.wait_for_ledger(position).await?;
        let caught_up = cursor >= position;
        if lost.overflowed {
            s.audit_wanted.store(true, Ordering::SeqCst);
            s.wake_audit.notify_one();
        }
        let by_id: HashMap<ProviderId, ProviderInfo> =
            providers.iter().map(|p| (p.id, p.clone())).collect();
        let now: HashMap<ProviderId, (bool, bool)> = providers
            .iter()
            .map(|p| (p.id, (p.alive, p.draining)))
            .collect();
        let changed = self.membership != now;
        let affected: Vec<ProviderId> = providers
            .iter()
            .filter(|p| !p.alive || p.draining)
            .map(|p| p.id)
            .collect();
        let mut plan =
            repair::chunks_from_ledger(&s.ledger, &by_id, &affected, &lost.chunks).await?;
        let unknown_lost = std::mem::take(&mut plan.unknown_lost);
        if changed || providers.iter().any(|p| p.draining) {
            let ids: Vec<ProviderId> = providers.iter().map(|p| p.id).collect();
            let ring = Ring::new(&ids);
            let listing = inventory::nodes(&s.cluster, &providers).await;
            let tracks: HashMap<BlobId, BlobTrack> = on_ledger(&s.ledger, |l| l.blobs())
                .await?
                .into_iter()
                .collect();
            let nodes =
                repair::nodes_from_listing(&s.cluster, &listing, &by_id, &ring, &tracks).await?;
            plan = plan.merge(nodes);
        }
        update(&s.progress, |p| {
            p.under_replicated_chunks = plan.under_replicated_chunks;
            p.under_replicated_bytes = plan.under_replicated_bytes;
            p.lost_chunks = plan.lost_chunks;
            p.under_replicated_nodes = plan.under_replicated_nodes;
            p.repair_total_bytes = plan.copy_bytes;
            p.repair_done_bytes = 0;
            p.repair_total_nodes = plan.copy_nodes;
            p.repair_done_nodes = 0;
            p.draining = repair::sorted(plan.draining_left.clone());
        });
        self.last = format!(
            "{} under-replicated chunks ({} bytes), {} nodes; {} lost",
            plan.under_replicated_chunks,
            plan.under_replicated_bytes,
            plan.under_replicated_nodes,
            plan.lost_chunks
        );
        if !plan.is_empty() {
            tracing::info!(
                "repair: {}; copying {} bytes and {} nodes",
                self.last,
                plan.copy_bytes,
                plan.copy_nodes
            );
            repair::execute(
                &s.cluster,
                &s.copies,
                plan,
                &by_id,
                Some(&s.ledger),
                &s.throttle,
                s.config.repair_parallelism,
                &s.progress,
            )
            .await?;
        }
        if caught_up {
            // Remembered only once acted on with a ledger that knew every version before
            // the change: a failed or early round sees it again.
            self.membership = now;
        } else {
            self.unresolved = unknown_lost;
            self.unresolved.truncate(MAX_UNRESOLVED);
        }
        if cursor >= pass.position {
            self.pass = None;
            return Ok(Some(pass));
        }
        Ok(None)
    }
}

/// The full audit.
pub(crate) struct AuditWorker {
    pub service: Arc<Service>,
    pub last: String,
}

impl Worker for AuditWorker {
    fn name(&self) -> &'static str {
        "audit"
    }

    /// The audit's pause is the audit interval, not the rounds' interval.
    #[allow(clippy::misnamed_getters)]
    fn interval(&self) -> Duration {
        self.service.config.audit_interval
    }

    async fn work(&mut self) -> Result<Round> {
        let s = &self.service;
        s.audit_wanted.store(false, Ordering::SeqCst);
        let started = Instant::now();
        let cutoffs = *s.settled.lock().unwrap_or_else(|p| p.into_inner());
        let audited = audit::run(
            &s.cluster,
            &s.copies,
            &s.ledger,
            &s.ledger_turn,
            &s.copy_turn,
            cutoffs.map(|c| c.fresh_ms),
            &s.throttle,
            s.config.repair_parallelism,
            &s.progress,
        )
        .await?;
        update(&s.progress, |p| {
            p.audits += 1;
            p.last_audit_ms = now_ms();
            p.last_audit_duration_ms = started.elapsed().as_millis() as u64;
        });
        let found = format!(
            "found {} under-replicated chunks, {} nodes, {} lost",
            audited.under_replicated_chunks, audited.under_replicated_nodes, audited.lost_chunks
        );
        self.last = if audited.untracked_references > 0 {
            format!(
                "{found}; {} referenced chunks were not tracked: the ledger is being rebuilt",
                audited.untracked_references
            )
        } else {
            format!("{found}; the ledger agrees with the cluster")
        };
        s.refresh_ledger_stats(true).await?;
        let old = on_ledger(&s.ledger, |l| l.old_version_bytes()).await?;
        update(&s.progress, |p| p.old_version_bytes = old);
        let again = s.audit_wanted.load(Ordering::SeqCst);
        Ok(if again { Round::Busy } else { Round::Idle })
    }

    fn summary(&self) -> String {
        self.last.clone()
    }
}
