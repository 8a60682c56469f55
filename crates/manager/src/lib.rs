//! The tomus manager: version manager, file namespace, provider registry and placement in one
//! process (BlobSeer's version manager, namespace manager and provider manager). Its state is
//! durable.

pub mod namespace;
pub mod placement;
pub mod registry;
pub mod service;
pub mod store;
pub mod versions;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tomus_wire::{check_bind, ClusterSecret, Error, LoadGauge, Result};

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
}

/// Runs the manager until the process ends. Sends the bound address on `ready` once serving.
pub async fn run(
    config: ManagerConfig,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let store = Arc::new(store::Store::open(&config.data_dir)?);
    let versions = VersionManager::open(store.clone())?;
    let namespace = Arc::new(namespace::Namespace::open(store.clone(), versions.clone())?);
    tokio::spawn(enforce_leases(
        Arc::downgrade(&versions),
        config.writer_lease,
    ));
    tokio::spawn(enforce_retention(Arc::downgrade(&versions)));
    let registry = Arc::new(registry::Registry::open(
        store.clone(),
        config.provider_timeout,
    )?);
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", config.listen)))?;
    let local = listener.local_addr()?;
    check_bind(&local, config.secret.as_ref())?;
    tracing::info!(
        "manager listening on {local}, state in {}",
        config.data_dir.display()
    );
    if let Some(tx) = ready {
        let _ = tx.send(local.to_string());
    }
    let service = Arc::new(service::ManagerService {
        versions,
        namespace,
        registry,
        store,
    });
    tomus_wire::serve(
        listener,
        config.secret,
        service,
        Arc::new(LoadGauge::default()),
    )
    .await;
    Ok(())
}

/// Checks writer leases a few times per lease period for as long as the manager runs.
async fn enforce_leases(versions: std::sync::Weak<VersionManager>, lease: Duration) {
    let mut tick = tokio::time::interval((lease / 4).max(Duration::from_millis(50)));
    loop {
        tick.tick().await;
        let Some(vm) = versions.upgrade() else { return };
        if let Err(e) = vm.expire_leases(lease) {
            tracing::error!("checking writer leases failed: {e}");
        }
    }
}

/// Applies retention policies every second for as long as the manager runs (time-based
/// policies expire versions without any request).
async fn enforce_retention(versions: std::sync::Weak<VersionManager>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(vm) = versions.upgrade() else { return };
        let round = tokio::task::spawn_blocking(move || vm.enforce_retention(versions::now_ms()));
        if let Err(e) = round.await {
            tracing::error!("applying retention policies failed: {e}");
        }
    }
}
