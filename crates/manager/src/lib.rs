//! The tomus manager: version manager, file namespace, provider registry and placement in one
//! process (BlobSeer's version manager, namespace manager and provider manager). Its state is
//! durable.

/// The HTTP side: `/metrics` with cluster-wide figures, and the web dashboard.
pub mod dashboard;
/// A reserve of free space on the manager's disk, below which new writes are refused.
pub mod disk_reserve;
pub mod namespace;
pub mod placement;
pub mod registry;
pub mod service;
/// Dedicated storage nodes: storage classes, memory-class room, the placement plan.
pub mod steward;
pub mod store;
pub mod topology;
pub mod versions;
pub mod workers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tomus_wire::{check_bind, ClusterSecret, Error, LoadGauge, Result, ServerLimits};
use tomus_worker::Workers;

pub use versions::VersionManager;

#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub data_dir: PathBuf,
    /// `host:port` to listen on (port 0: any free port).
    pub listen: String,
    pub secret: Option<ClusterSecret>,
    /// A provider silent for this long counts as down.
    pub provider_timeout: Duration,
    /// A writer that holds a version number this long without completing it is taken as
    /// dead: its version (and those assigned after it) are given up so later writes publish.
    pub writer_lease: Duration,
    /// A new file (invisible until its first version is published) whose writers show no
    /// sign of life for this long is dropped: the garbage-collection grace, past which its
    /// write would be refused anyway.
    pub new_file_grace: Duration,
    /// What clients may hold of the server: connections, time, memory.
    pub limits: ServerLimits,
    /// `host:port` of the HTTP server (`/metrics` and the dashboard; `None`: none).
    pub http_listen: Option<String>,
    /// Where the manager's workers (committer, leases, retention) report, for `tomus
    /// status`; other background work of the process (the backup service) reports here too.
    pub workers: Workers,
    /// Bytes kept free on the disk of `data_dir`: below, new writes are refused (0: none).
    pub min_free_space: u64,
}

/// Runs the manager until the process ends (or the future is dropped). Sends the bound
/// address on `ready` once serving.
pub async fn run(
    config: ManagerConfig,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    // Both addresses before the store is opened: a manager refused one leaves no state behind.
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", config.listen)))?;
    let local = listener.local_addr()?;
    check_bind(&local, config.secret.as_ref())?;
    let http = match &config.http_listen {
        Some(addr) => Some(tomus_metrics::bind(addr, config.secret.as_ref()).await?),
        None => None,
    };
    let store = Arc::new(store::Store::open(&config.data_dir)?);
    let workers = config.workers.clone();
    let service = Arc::new(service::ManagerService::open(
        store.clone(),
        workers.clone(),
        config.provider_timeout,
        config.secret.clone(),
        disk_reserve::DiskReserve::new(config.data_dir.clone(), config.min_free_space)?,
    )?);
    // The workers stop when this function ends (its future is dropped with the runtime).
    let (_running, stopped) = watch::channel(false);
    let leases = workers::Leases {
        versions: Arc::downgrade(&service.versions),
        lease: config.writer_lease,
        given_up: 0,
    };
    workers.spawn(leases, stopped.clone(), None);
    let abandoned = workers::AbandonedFiles {
        namespace: Arc::downgrade(&service.namespace),
        grace: config.new_file_grace,
        dropped: 0,
    };
    workers.spawn(abandoned, stopped.clone(), None);
    let retention = workers::Retention {
        versions: Arc::downgrade(&service.versions),
        expired: 0,
    };
    workers.spawn(retention, stopped.clone(), None);
    let purge = workers::RowPurge {
        store: Arc::downgrade(&store),
        removed: 0,
    };
    workers.spawn(purge, stopped.clone(), None);
    let copies = workers::RegisteredCopies {
        namespace: Arc::downgrade(&service.namespace),
        registry: Arc::downgrade(&service.registry),
        pool: tomus_wire::Pool::new(tomus_wire::RpcConfig {
            secret: config.secret.clone(),
            ..tomus_wire::RpcConfig::default()
        }),
        removed: 0,
        freed: 0,
    };
    workers.spawn(copies, stopped, None);
    tracing::info!(
        "manager listening on {local}, state in {}",
        config.data_dir.display()
    );
    if let Some(tx) = ready {
        let _ = tx.send(local.to_string());
    }
    if let Some(http) = http {
        tracing::info!(
            "manager dashboard and metrics on http://{}/",
            http.local_addr()?
        );
        let pages = dashboard::ManagerPages::new(service.clone(), local, config.secret.clone());
        tokio::spawn(tomus_metrics::serve(
            http,
            config.secret.clone(),
            Arc::new(pages),
        ));
    }
    tomus_wire::serve(
        listener,
        config.secret,
        config.limits,
        service,
        Arc::new(LoadGauge::observed(tomus_metrics::RpcObserver::shared())),
    )
    .await;
    Ok(())
}
