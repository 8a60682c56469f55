//! The servers the `tomus` command runs in the foreground: the manager (with the
//! maintenance service next to it), a provider, and the S3 gateway; their flags, and how a
//! signal stops them cleanly.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tomus_wire::ClusterSecret;

use super::{connect, runtime};
use crate::size::parse_size;

#[derive(Args)]
pub(super) struct ManagerArgs {
    /// Directory of the manager's durable state.
    #[arg(long)]
    data: PathBuf,
    /// Milliseconds without a heartbeat before a provider counts as down (and repair starts
    /// re-creating its copies elsewhere).
    #[arg(long, default_value_t = 10_000)]
    provider_timeout_ms: u64,
    /// Milliseconds a writer may hold a version number without completing it; after that it
    /// counts as dead and its version is aborted so later versions publish.
    #[arg(long, default_value_t = 10_000)]
    writer_lease_ms: u64,
    /// Do not run the maintenance service (repair, draining, garbage collection) in this
    /// process, nor the backup service (`tomus backup`) and geo-replication (`tomus sites`).
    #[arg(long)]
    no_maintenance: bool,
    /// Pause between maintenance passes, in milliseconds. A pass costs what changed since
    /// the last one: versions published, expired or deleted, providers lost.
    #[arg(long, default_value_t = 2_000)]
    maintenance_interval_ms: u64,
    /// Pause between full audits (the walk of every retained version and every provider's
    /// inventory, behind the incremental passes), in milliseconds.
    #[arg(long, default_value_t = 3_600_000)]
    audit_interval_ms: u64,
    /// Most bytes per second repair copies (0: unlimited), so it does not starve foreground
    /// traffic.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    repair_rate: u64,
    /// Chunk copies repair runs at once.
    #[arg(long, default_value_t = 4)]
    repair_parallelism: usize,
    /// Garbage collection deletes unreferenced chunks only once they are this many
    /// milliseconds old: longer than any write takes from its first chunk to its commit. A
    /// new file whose writers show no sign of life for this long is dropped too.
    #[arg(long, default_value_t = 3_600_000)]
    gc_grace_ms: u64,
    /// Garbage collection deletes chunks no version references any more once unreferenced
    /// for this many milliseconds (a copy made of metadata only, such as an S3 CopyObject,
    /// may be about to refer to them; a slower one is refused and redone).
    #[arg(long, default_value_t = 60_000)]
    gc_reuse_grace_ms: u64,
    /// Do not garbage-collect.
    #[arg(long)]
    no_gc: bool,
    /// Free space to keep on the disk of `--data`: below it, the manager refuses requests
    /// that start new writes (NoSpace) so its stores never meet a full disk mid-transaction;
    /// reads, deletions and writes already under way go on, and writes are taken again once
    /// space is back (0: no reserve).
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    min_free_space: u64,
    /// Serve the web dashboard and Prometheus metrics (`GET /metrics`) over HTTP on this
    /// address (off by default). A non-loopback address needs the cluster secret, which every
    /// HTTP request must then carry (bearer token or basic-auth password).
    #[arg(long, value_name = "HOST:PORT")]
    http_addr: Option<String>,
    #[command(flatten)]
    limits: ServerLimitArgs,
}

/// What clients may hold of a server (defaults fit the process's descriptor limit).
#[derive(Args)]
struct ServerLimitArgs {
    /// Connections served at once (default: three quarters of the open-file limit left after
    /// a reserve, at most 4096); at the cap the longest-idle connection is closed.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Connections from one IP address at once (default: three quarters of the cap).
    #[arg(long)]
    max_connections_per_peer: Option<usize>,
    /// Milliseconds a connection may stay idle before the server closes it.
    #[arg(long, default_value_t = 120_000)]
    idle_timeout_ms: u64,
    /// Milliseconds a request's header may take to arrive once it started (bodies get this
    /// plus their size at 1 MiB/s).
    #[arg(long, default_value_t = 10_000)]
    frame_timeout_ms: u64,
    /// Request bytes held at once over all connections; more waits.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    max_in_flight: u64,
}

impl ServerLimitArgs {
    fn limits(&self) -> tomus_wire::ServerLimits {
        let mut limits = tomus_wire::ServerLimits::default();
        if let Some(n) = self.max_connections {
            limits.max_connections = n.max(1);
            limits.max_connections_per_peer = (n * 3 / 4).max(1);
        }
        if let Some(n) = self.max_connections_per_peer {
            limits.max_connections_per_peer = n.max(1);
        }
        limits.idle_timeout = Duration::from_millis(self.idle_timeout_ms.max(100));
        limits.frame_timeout = Duration::from_millis(self.frame_timeout_ms.max(100));
        limits.max_in_flight_bytes = self.max_in_flight.max(1 << 20);
        limits
    }
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(super) struct ProviderArgs {
    #[command(subcommand)]
    action: Option<crate::ops_cmd::ProviderAction>,
    /// Manager address.
    #[arg(long, env = "TOMUS_MANAGER", required = true)]
    manager: Option<String>,
    /// Directory for chunks and the metadata shard.
    #[arg(long, required = true)]
    data: Option<PathBuf>,
    /// Address to register with the manager (default: the bound address).
    #[arg(long)]
    advertise: Option<String>,
    /// Memory tier (e.g. 256MiB; 0: off).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    memory_tier: u64,
    /// RAM for memory-class chunks (`--storage memory` blobs and files; e.g. 4GiB; 0: this
    /// provider refuses them). Taken only as such chunks arrive.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    memory_class: u64,
    /// Heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Acknowledge writes once in the page cache instead of after fdatasync.
    #[arg(long)]
    no_fsync: bool,
    /// Bytes of the chunk files written most recently (and synced) that keep their pages in
    /// the page cache, for reads that follow writes; older files' pages are dropped, so
    /// long durable writes do not fill memory (e.g. 1GiB; 0: drop every file's pages once
    /// it is durable).
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    cache_behind_writes: u64,
    /// Serve Prometheus metrics (`GET /metrics`) over HTTP on this address (off by default;
    /// a non-loopback address needs the cluster secret, as the RPC port).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    #[command(flatten)]
    limits: ServerLimitArgs,
}

/// Runs `tomus manager` (and the maintenance service, unless turned off) until a signal.
pub(super) fn run_manager(
    addr: String,
    secret: Option<ClusterSecret>,
    a: ManagerArgs,
) -> Result<()> {
    let config = tomus_manager::ManagerConfig {
        data_dir: a.data.clone(),
        listen: addr,
        secret: secret.clone(),
        provider_timeout: Duration::from_millis(a.provider_timeout_ms.max(100)),
        writer_lease: Duration::from_millis(a.writer_lease_ms.max(100)),
        new_file_grace: Duration::from_millis(a.gc_grace_ms),
        limits: a.limits.limits(),
        http_listen: a.http_addr.clone(),
        workers: tomus_worker::Workers::default(),
        min_free_space: a.min_free_space,
    };
    // The backup service runs with maintenance (both are the manager's background clients).
    let backup = (!a.no_maintenance).then(|| secret.clone());
    let maintenance = (!a.no_maintenance).then(|| tomus_maintenance::MaintenanceConfig {
        secret,
        interval: Duration::from_millis(a.maintenance_interval_ms.max(10)),
        audit_interval: Duration::from_millis(a.audit_interval_ms.max(10)),
        repair_rate: a.repair_rate,
        repair_parallelism: a.repair_parallelism.max(1),
        gc_grace: (!a.no_gc).then(|| Duration::from_millis(a.gc_grace_ms)),
        reuse_grace: Duration::from_millis(a.gc_reuse_grace_ms),
        ..tomus_maintenance::MaintenanceConfig::new(String::new(), a.data.clone())
    });
    serve("manager", |ready, stop| {
        manager_with_maintenance(config, maintenance, backup, ready, stop)
    })
}

/// Runs `tomus provider` until a signal, or carries out a provider action (drain, remove).
pub(super) fn run_provider(
    addr: String,
    explicit_addr: bool,
    secret: Option<ClusterSecret>,
    json: bool,
    a: ProviderArgs,
) -> Result<()> {
    if let Some(action) = a.action {
        return runtime()?.block_on(async {
            let client = connect(&addr, secret, false).await?;
            crate::ops_cmd::provider_action(&client, json, action).await
        });
    }
    let (Some(manager), Some(data)) = (a.manager, a.data) else {
        anyhow::bail!("a provider needs --manager ADDR and --data DIR");
    };
    let config = tomus_provider::ProviderConfig {
        data_dir: data,
        listen: if explicit_addr {
            addr
        } else {
            "127.0.0.1:0".to_string()
        },
        advertise: a.advertise,
        manager,
        secret,
        memory_tier_bytes: a.memory_tier,
        memory_class_bytes: a.memory_class,
        heartbeat_interval: Duration::from_millis(a.heartbeat_ms),
        fsync: !a.no_fsync,
        cache_behind_writes: a.cache_behind_writes,
        limits: a.limits.limits(),
        metrics_listen: a.metrics_addr,
    };
    // A provider's state is durable at each acknowledgement and it runs no rounds worth
    // finishing: asked to stop, it stops at once (its heartbeats with it).
    serve("provider", |ready, mut stop| async move {
        tokio::select! {
            ended = tomus_provider::run(config, Some(ready)) => ended,
            _ = stop.wait_for(|stop| *stop) => Ok(()),
        }
    })
}

/// Runs the manager and, once it serves, the maintenance service next to it (a client of the
/// manager's own address). When `stop` turns true, the maintenance workers finish their
/// rounds before the manager goes.
async fn manager_with_maintenance(
    config: tomus_manager::ManagerConfig,
    maintenance: Option<tomus_maintenance::MaintenanceConfig>,
    // `Some(secret)`: run the backup service too.
    backup: Option<Option<ClusterSecret>>,
    ready: tokio::sync::oneshot::Sender<String>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tomus_wire::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let workers = config.workers.clone();
    let mut manager = tokio::spawn(tomus_manager::run(config, Some(tx)));
    let mut service = None;
    if let Ok(addr) = rx.await {
        if let Some(m) = maintenance {
            let config = tomus_maintenance::MaintenanceConfig {
                manager: addr.clone(),
                ..m
            };
            let stop = stop.clone();
            service = Some(tokio::spawn(async move {
                if let Err(e) = tomus_maintenance::run(config, stop).await {
                    tracing::error!("the maintenance service stopped: {e}");
                }
            }));
        }
        // The backup service (idle until `tomus backup enable`): a point it leaves
        // unfinished at shutdown resumes at the next start.
        if let Some(backup_secret) = backup {
            // Geo-replication (idle until `tomus sites replicate`) runs beside it: its
            // cursors are durable, so a pass cut short at shutdown resumes at the next start.
            let (sites_stop, sites_addr) = (stop.clone(), addr.clone());
            let (sites_secret, sites_workers) = (backup_secret.clone(), workers.clone());
            tokio::spawn(async move {
                let sites =
                    tomus_sites::service::run(sites_addr, sites_secret, sites_stop, &sites_workers);
                if let Err(e) = sites.await {
                    tracing::error!("the geo-replication service stopped: {e}");
                }
            });
            let backup_stop = stop.clone();
            let backup_addr = addr.clone();
            tokio::spawn(async move {
                let backup =
                    tomus_backup::service::run(backup_addr, backup_secret, backup_stop, &workers);
                if let Err(e) = backup.await {
                    tracing::error!("the backup service stopped: {e}");
                }
            });
        }
        let _ = ready.send(addr);
    }
    tokio::select! {
        ended = &mut manager => {
            ended.map_err(|e| tomus_wire::Error::internal(format!("manager task failed: {e}")))?
        }
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            if let Some(service) = service {
                let _ = service.await;
            }
            Ok(())
        }
    }
}

/// How long a server waits, after SIGTERM or SIGINT, for its workers to finish their rounds.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Runs a server and prints `tomus ROLE listening on ADDR` on stdout once it serves. SIGTERM
/// or SIGINT asks it to stop (`stop` turns true) and waits up to [`SHUTDOWN_WAIT`] for it;
/// a second signal ends it at once. (Every server's state is durable at each
/// acknowledgement, so an abrupt end loses nothing acknowledged; a clean one lets
/// background rounds finish.)
pub(super) fn serve<F, Fut>(role: &str, start: F) -> Result<()>
where
    F: FnOnce(tokio::sync::oneshot::Sender<String>, tokio::sync::watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = tomus_wire::Result<()>> + Send + 'static,
{
    let rt = runtime()?;
    rt.block_on(async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut server = tokio::spawn(start(tx, stopped));
        if let Ok(addr) = rx.await {
            // A server keeps serving whether or not anyone reads its stdout.
            let _ = outln!("tomus {role} listening on {addr}");
            let _ = std::io::stdout().flush();
        }
        let ended = tokio::select! {
            ended = &mut server => ended,
            signal = shutdown_signal() => {
                signal?;
                tracing::info!("{role}: stopping (a second signal ends it at once)");
                let _ = stop.send(true);
                tokio::select! {
                    ended = tokio::time::timeout(SHUTDOWN_WAIT, &mut server) => match ended {
                        Ok(ended) => ended,
                        Err(_) => {
                            tracing::warn!("{role}: not stopped after {SHUTDOWN_WAIT:?}; ending");
                            Ok(Ok(()))
                        }
                    },
                    _ = shutdown_signal() => Ok(Ok(())),
                }
            }
        };
        match ended {
            Ok(r) => r.map_err(anyhow::Error::from),
            Err(e) => Err(anyhow::anyhow!("{role} task failed: {e}")),
        }
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.context("listening for SIGINT")?,
    }
    Ok(())
}
