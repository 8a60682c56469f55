//! The tomus maintenance service: keeps every retained version readable with its full
//! replication while providers fail, join and leave, and reclaims what nothing retains.
//!
//! It runs next to the manager (in the `tomus manager` process) as a client of the cluster.
//! Each pass:
//! 1. walks the segment trees of every retained version: the chunks and metadata nodes that
//!    must be kept, and the replication each needs ([`references`]);
//! 2. lists what every live provider holds ([`inventory`]);
//! 3. copies under-replicated chunks provider to provider and metadata nodes to their ring
//!    owners, throttled ([`repair`]); draining providers' copies do not count, so this also
//!    moves their data away;
//! 4. deletes what no retained version references ([`gc`]).
//!
//! All of its state is derived from the cluster at each pass, so a restarted manager resumes
//! repair where it stopped. Progress goes to the manager for `tomus status`.

pub mod gc;
pub mod inventory;
pub mod references;
pub mod repair;
pub mod throttle;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tomus_client::cluster::Cluster;
use tomus_wire::{now_ms, ClusterSecret, MaintenanceStatus, Pool, Request, Result, RpcConfig};

use crate::repair::Progress;
use crate::throttle::Throttle;

#[derive(Clone, Debug)]
pub struct MaintenanceConfig {
    /// The manager's address.
    pub manager: String,
    pub secret: Option<ClusterSecret>,
    /// Pause between passes.
    pub interval: Duration,
    /// Repair copies at most this many bytes per second (0: unlimited).
    pub repair_rate: u64,
    /// Chunk copies in flight at once.
    pub repair_parallelism: usize,
    /// Garbage collection deletes only chunks stored longer ago than this (`None`: no
    /// garbage collection).
    pub gc_grace: Option<Duration>,
}

impl MaintenanceConfig {
    pub fn new(manager: String) -> Self {
        MaintenanceConfig {
            manager,
            secret: None,
            interval: Duration::from_secs(5),
            repair_rate: 64 << 20,
            repair_parallelism: 4,
            gc_grace: Some(Duration::from_secs(3600)),
        }
    }
}

/// How often progress is sent to the manager.
const REPORT_EVERY: Duration = Duration::from_millis(500);
/// Listings, metadata lookups and reports are small: a provider that does not answer them
/// within this is taken as gone for the pass, so a silent one (cut off the network) holds a
/// pass up for this long, not for a bulk transfer's timeout.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// A chunk copy moves up to a chunk (256 MiB at most) between providers.
const COPY_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs passes forever.
pub async fn run(config: MaintenanceConfig) {
    let pool = |request_timeout| {
        Pool::new(RpcConfig {
            connect_timeout: Duration::from_secs(3),
            request_timeout,
            secret: config.secret.clone(),
        })
    };
    let cluster = Cluster::new(config.manager.clone(), pool(CONTROL_TIMEOUT));
    let copies = pool(COPY_TIMEOUT);
    let throttle = Throttle::new(config.repair_rate);
    let progress: Progress = Arc::new(Mutex::new(MaintenanceStatus::default()));
    let reporter = report_forever(&cluster, &progress);
    let passes = async {
        loop {
            let outcome = pass(&cluster, &copies, &config, &throttle, &progress).await;
            finish_pass(&progress, outcome);
            tokio::time::sleep(config.interval).await;
        }
    };
    tokio::join!(reporter, passes);
}

fn finish_pass(progress: &Progress, outcome: Result<()>) {
    let mut s = progress.lock().unwrap_or_else(|p| p.into_inner());
    s.running = false;
    s.last_pass_ms = now_ms();
    match outcome {
        Ok(()) => {
            s.passes += 1;
            s.last_error = None;
        }
        Err(e) => {
            tracing::warn!("maintenance pass failed: {e}");
            s.last_error = Some(e.to_string());
        }
    }
}

async fn report_forever(cluster: &Cluster, progress: &Progress) {
    loop {
        let status = progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Err(e) = cluster
            .manager_call(&Request::ReportMaintenance { status })
            .await
        {
            tracing::debug!("reporting maintenance progress: {e}");
        }
        tokio::time::sleep(REPORT_EVERY).await;
    }
}

/// One pass: scan, inventory, repair, garbage collection.
async fn pass(
    cluster: &Cluster,
    copies: &Pool,
    config: &MaintenanceConfig,
    throttle: &Throttle,
    progress: &Progress,
) -> Result<()> {
    let started_ms = now_ms();
    progress.lock().unwrap_or_else(|p| p.into_inner()).running = true;
    let refs = references::scan(cluster).await?;
    let providers = cluster.providers().await?;
    let inv = inventory::take(cluster, &providers).await;
    // The ring of this pass's provider list, not the client's cached view: nodes must move to
    // a provider that just joined at once.
    let ids: Vec<_> = providers.iter().map(|p| p.id).collect();
    let ring = tomus_client::dht::Ring::new(&ids);
    let plan = repair::plan(&refs, &inv, &ring);
    {
        let mut s = progress.lock().unwrap_or_else(|p| p.into_inner());
        s.under_replicated_chunks = plan.under_replicated_chunks;
        s.under_replicated_bytes = plan.under_replicated_bytes;
        s.lost_chunks = plan.lost_chunks;
        s.under_replicated_nodes = plan.under_replicated_nodes;
        s.repair_total_bytes = plan.copy_bytes;
        s.repair_done_bytes = 0;
        s.repair_total_nodes = plan.copy_nodes;
        s.repair_done_nodes = 0;
        s.draining = repair::sorted(plan.draining_left.clone());
    }
    if plan.copy_bytes > 0 || plan.copy_nodes > 0 {
        tracing::info!(
            "repair: {} under-replicated chunks ({} bytes), {} nodes; copying {} bytes and {} nodes",
            plan.under_replicated_chunks,
            plan.under_replicated_bytes,
            plan.under_replicated_nodes,
            plan.copy_bytes,
            plan.copy_nodes
        );
    }
    repair::execute(
        cluster,
        copies,
        plan,
        &inv,
        throttle,
        config.repair_parallelism,
        progress,
    )
    .await?;
    if let Some(grace) = config.gc_grace {
        if inv.unlisted.is_empty() && refs.unreadable == 0 {
            let older_than = started_ms.saturating_sub(grace.as_millis() as u64);
            gc::collect(cluster, &refs, &inv, older_than, progress).await?;
        } else {
            tracing::info!(
                "garbage collection skipped: providers {:?} could not be listed, {} nodes unreadable",
                inv.unlisted,
                refs.unreadable
            );
        }
    }
    Ok(())
}
