//! The tomus maintenance service: keeps every retained version readable with its full
//! replication while providers fail, join and leave, and reclaims what nothing retains. It
//! runs next to the manager (in the `tomus manager` process) as a client of the cluster.
//!
//! Its work follows events, not scans, so a pass costs what changed since the last one, not
//! what is stored:
//! - the manager's change log is applied to a durable [`ledger`] of references: each
//!   published version's delta read from the DHT ([`follow`], [`delta`]);
//! - what expiry, deletions and aborts killed is deleted from the providers, and chunks
//!   unreferenced since before the reuse cutoff with them ([`collect`]); cutoffs are granted
//!   by the manager first, so nothing a writer in progress refers to goes;
//! - chunks on a provider that went down or drains, or reported lost by one, are copied
//!   elsewhere from the ledger's replica sets; nodes are moved to their ring owners from the
//!   providers' listings when membership changed ([`repair`]);
//! - a full [`audit`] (the walk of every retained tree and every provider's inventory) runs
//!   rarely, repairs anything left, deletes positively dead leftovers and checks the ledger.
//!
//! Progress goes to the manager for `tomus status`.

/// The full walk and inventory behind the ledger.
pub mod audit;
/// Deleting what the ledger found dead.
pub mod collect;
/// What a published version changed, read from the DHT.
pub mod delta;
/// Applying the manager's change log to the ledger.
pub mod follow;
/// What each live provider holds, from its own listing.
pub mod inventory;
/// The durable record of references.
pub mod ledger;
/// What every retained version references, by walking their trees.
pub mod references;
/// Copies that restore replication and ring placement.
pub mod repair;
/// A token bucket for repair traffic.
pub mod throttle;
/// The gc, repair and audit workers.
mod workers;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tomus_client::cluster::Cluster;
use tomus_wire::maintenance::ReportMaintenance;
use tomus_wire::{ClusterSecret, MaintenanceStatus, Pool, Result, RpcConfig};
use tomus_worker::Workers;

use crate::ledger::Ledger;
use crate::throttle::Throttle;
use crate::workers::{AuditWorker, GcWorker, RepairWorker, Service};

#[derive(Clone, Debug)]
pub struct MaintenanceConfig {
    /// The manager's address.
    pub manager: String,
    pub secret: Option<ClusterSecret>,
    /// Where the ledger lives (next to the manager's state).
    pub state_dir: PathBuf,
    /// Pause between rounds of collection and of repair.
    pub interval: Duration,
    /// Pause between full audits.
    pub audit_interval: Duration,
    /// Repair copies at most this many bytes per second (0: unlimited).
    pub repair_rate: u64,
    /// Chunk copies in flight at once.
    pub repair_parallelism: usize,
    /// Garbage collection deletes chunks never referenced only once stored longer ago than
    /// this (a writer stores chunks before its version exists); `None`: no garbage
    /// collection.
    pub gc_grace: Option<Duration>,
    /// Chunks that were referenced go once unreferenced for this long (a copy made of
    /// metadata only may be about to refer to them).
    pub reuse_grace: Duration,
}

impl MaintenanceConfig {
    pub fn new(manager: String, state_dir: PathBuf) -> Self {
        MaintenanceConfig {
            manager,
            secret: None,
            state_dir,
            interval: Duration::from_secs(2),
            audit_interval: Duration::from_secs(3600),
            repair_rate: 64 << 20,
            repair_parallelism: 4,
            gc_grace: Some(Duration::from_secs(3600)),
            reuse_grace: Duration::from_secs(60),
        }
    }
}

/// How often progress is sent to the manager.
const REPORT_EVERY: Duration = Duration::from_millis(500);
/// Listings, metadata lookups and reports are small: a provider that does not answer them
/// within this is taken as gone for the round, so a silent one (cut off the network) holds a
/// round up for this long, not for a bulk transfer's timeout.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// A chunk copy moves up to a chunk (256 MiB at most) between providers.
const COPY_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the workers until `stop` becomes true (each finishes its round first).
pub async fn run(config: MaintenanceConfig, stop: watch::Receiver<bool>) -> Result<()> {
    let pool = |request_timeout| {
        Pool::new(RpcConfig {
            connect_timeout: Duration::from_secs(3),
            request_timeout,
            secret: config.secret.clone(),
        })
    };
    let path = config.state_dir.join("maintenance.redb");
    let ledger = tokio::task::spawn_blocking(move || Ledger::open(&path))
        .await
        .map_err(|e| tomus_wire::Error::internal(format!("opening the ledger: {e}")))??;
    let service = Arc::new(Service {
        cluster: Cluster::new(config.manager.clone(), pool(CONTROL_TIMEOUT)),
        copies: pool(COPY_TIMEOUT),
        ledger: Arc::new(ledger),
        throttle: Throttle::new(config.repair_rate),
        progress: Arc::new(Mutex::new(MaintenanceStatus::default())),
        ledger_turn: tokio::sync::Mutex::new(()),
        copy_turn: tokio::sync::Mutex::new(()),
        settled: Mutex::new(None),
        audit_wanted: AtomicBool::new(false),
        wake_audit: Arc::new(Notify::new()),
        wake_gc: Arc::new(Notify::new()),
        bytes_summed: Mutex::new(None),
        config,
    });
    let workers = Workers::default();
    let gc = GcWorker {
        service: service.clone(),
        last: String::new(),
    };
    let repair = RepairWorker {
        service: service.clone(),
        membership: Default::default(),
        unresolved: Vec::new(),
        pass: None,
        last: String::new(),
    };
    let audit = AuditWorker {
        service: service.clone(),
        last: String::new(),
    };
    let mut tasks = vec![
        workers.spawn(gc, stop.clone(), Some(service.wake_gc.clone())),
        workers.spawn(repair, stop.clone(), None),
        workers.spawn(audit, stop.clone(), Some(service.wake_audit.clone())),
    ];
    tasks.push(tokio::spawn(report_until_stopped(service, workers, stop)));
    for task in tasks {
        if let Err(e) = task.await {
            tracing::error!("a maintenance worker failed: {e}");
        }
    }
    Ok(())
}

/// Sends progress, with every worker's status, to the manager for `tomus status`.
async fn report_until_stopped(
    service: Arc<Service>,
    workers: Workers,
    mut stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        let mut status = service
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        status.workers = workers.statuses();
        let status = Box::new(status);
        if let Err(e) = service.cluster.manager(ReportMaintenance { status }).await {
            tracing::debug!("reporting maintenance progress: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep(REPORT_EVERY) => {}
            _ = stop.changed() => {}
        }
    }
}
