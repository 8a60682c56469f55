//! `tomus up`: a manager and N providers as processes on loopback (the embedded cluster),
//! optionally the S3 gateway in this process, in the foreground until Ctrl-C.
//!
//! A server that dies is restarted on its address and data directory, after 1 s, then after
//! twice as long each time it dies again within a minute (up to 32 s), so the cluster's fault
//! tolerance can be tried on one machine: kill a provider and the others keep serving while
//! it is down. The manager is restarted the same way (clients and providers reconnect to
//! it). With `--no-restart` a dead provider stays down, and a dead manager ends `tomus up`,
//! since nothing is served without it.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use tomus_wire::ClusterSecret;

use super::runtime;
use crate::embedded::{ClusterSpec, EmbeddedCluster, Exited, Launcher};
use crate::s3_cmd::S3Args;
use crate::size::parse_size;

#[derive(Args)]
pub(super) struct UpArgs {
    /// Number of providers.
    #[arg(long, default_value_t = 4)]
    providers: usize,
    /// Directory for all data (manager state, chunks, logs).
    #[arg(long, default_value = "tomus-data")]
    data: PathBuf,
    /// Memory tier per provider (e.g. 256MiB; 0: off).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    memory_tier: u64,
    /// Acknowledge writes once in the page cache instead of after fdatasync.
    #[arg(long)]
    no_fsync: bool,
    /// Also serve the S3 API on this address (port 0: any free port; printed on stdout).
    #[arg(long, value_name = "HOST:PORT")]
    s3: Option<String>,
    /// Access keys file of the S3 gateway (see `tomus s3 --help`).
    #[arg(long, value_name = "FILE", requires = "s3")]
    s3_keys: Option<PathBuf>,
    /// Let the S3 gateway accept unsigned requests.
    #[arg(long, requires = "s3")]
    s3_anonymous: bool,
    /// Serve the manager's web dashboard and Prometheus metrics on this address (see
    /// `tomus manager --help`).
    #[arg(long, value_name = "HOST:PORT")]
    http_addr: Option<String>,
    /// Leave a server that dies down instead of restarting it (a dead manager then ends
    /// `tomus up`).
    #[arg(long)]
    no_restart: bool,
    #[command(flatten)]
    maintenance: UpMaintenanceArgs,
}

/// The manager's maintenance flags `tomus up` passes on (see `tomus manager --help`).
#[derive(Args)]
#[command(next_help_heading = "Maintenance (passed to the manager)")]
struct UpMaintenanceArgs {
    /// Garbage collection's grace in milliseconds [default: 3600000, one hour]: deleted
    /// blobs and files, expired versions and data no write finished with are reclaimed once
    /// this old, and a write that takes longer than this is refused (WriteExpired). A short
    /// grace gives space back soon; it must stay longer than any write takes.
    #[arg(long, value_name = "MS")]
    gc_grace_ms: Option<u64>,
    /// Milliseconds chunks that were referenced wait once unreferenced (a copy made of
    /// metadata only may be about to refer to them) [default: 60000, or --gc-grace-ms when
    /// that is shorter].
    #[arg(long, value_name = "MS")]
    gc_reuse_grace_ms: Option<u64>,
    /// Pause between maintenance passes (repair, garbage collection) in milliseconds
    /// [default: 2000].
    #[arg(long, value_name = "MS")]
    maintenance_interval_ms: Option<u64>,
}

impl UpMaintenanceArgs {
    /// The `tomus manager` arguments for the flags given.
    fn manager_args(&self) -> Vec<String> {
        let reuse = self
            .gc_reuse_grace_ms
            .or_else(|| self.gc_grace_ms.map(|g| g.min(DEFAULT_REUSE_GRACE_MS)));
        let flags = [
            ("--gc-grace-ms", self.gc_grace_ms),
            ("--gc-reuse-grace-ms", reuse),
            ("--maintenance-interval-ms", self.maintenance_interval_ms),
        ];
        flags
            .into_iter()
            .filter_map(|(flag, v)| v.map(|v| [flag.to_string(), v.to_string()]))
            .flatten()
            .collect()
    }
}

/// The manager's default `--gc-reuse-grace-ms`.
const DEFAULT_REUSE_GRACE_MS: u64 = 60_000;

/// Which server of the cluster.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    Manager,
    Provider(usize),
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Server::Manager => write!(f, "manager"),
            Server::Provider(i) => write!(f, "provider {i}"),
        }
    }
}

/// When a dead server is started again, and how often it died in a row.
struct Restarts(Vec<Restart>);

struct Restart {
    server: Server,
    /// Deaths in a row, each within [`STABLE`] of its start.
    deaths: u32,
    started: Instant,
    /// When it is due to start again, while it is down.
    due: Option<Instant>,
}

/// A server that ran this long before dying starts again after the first delay.
const STABLE: Duration = Duration::from_secs(60);

impl Restarts {
    fn new(providers: usize) -> Self {
        let servers = std::iter::once(Server::Manager).chain((0..providers).map(Server::Provider));
        Restarts(
            servers
                .map(|server| Restart {
                    server,
                    deaths: 0,
                    started: Instant::now(),
                    due: None,
                })
                .collect(),
        )
    }

    fn entry(&mut self, s: Server) -> Option<&mut Restart> {
        self.0.iter_mut().find(|e| e.server == s)
    }

    /// Schedules `s`, which just died (or failed to start), to start again; returns the delay.
    fn died(&mut self, s: Server) -> Duration {
        let Some(e) = self.entry(s) else {
            return Duration::ZERO;
        };
        if e.started.elapsed() >= STABLE {
            e.deaths = 0;
        }
        let delay = Duration::from_secs(1 << e.deaths.min(5));
        e.deaths += 1;
        e.due = Some(Instant::now() + delay);
        delay
    }

    fn started(&mut self, s: Server) {
        if let Some(e) = self.entry(s) {
            e.started = Instant::now();
            e.due = None;
        }
    }

    /// The servers due to start now, the manager first.
    fn due(&self) -> Vec<Server> {
        let now = Instant::now();
        self.0
            .iter()
            .filter(|e| e.due.is_some_and(|at| at <= now))
            .map(|e| e.server)
            .collect()
    }
}

/// How long a server gets to stop cleanly after Ctrl-C.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs `tomus up`; `server_args` are the flags its servers get (logging, the configuration
/// file).
pub(super) fn up(
    addr: &str,
    secret: Option<ClusterSecret>,
    server_args: Vec<String>,
    a: UpArgs,
) -> Result<()> {
    if a.providers == 0 {
        anyhow::bail!("--providers must be at least 1");
    }
    let gateway = match &a.s3 {
        Some(listen) => {
            let args = S3Args {
                listen: listen.clone(),
                keys: a.s3_keys.clone(),
                anonymous: a.s3_anonymous,
                chunk_size: tomus_wire::DEFAULT_CHUNK_SIZE,
                replication: 1,
                metrics_addr: None,
                max_connections: None,
                idle_timeout_ms: 30_000,
            };
            // Checked before the cluster starts: bad keys fail fast.
            Some(crate::s3_cmd::config("", secret, &args)?)
        }
        None => None,
    };
    let mut spec = ClusterSpec::new(&a.data, a.providers);
    spec.manager_addr = addr.to_string();
    spec.memory_tier = a.memory_tier;
    spec.fsync = !a.no_fsync;
    spec.manager_args = a.maintenance.manager_args();
    spec.manager_args.extend(server_args.iter().cloned());
    spec.provider_args.extend(server_args);
    if let Some(http) = &a.http_addr {
        spec.manager_args
            .extend(["--http-addr".to_string(), http.clone()]);
    }
    let mut cluster = EmbeddedCluster::start(&Launcher::current()?, spec)?;
    let _ = outln!("tomus cluster listening on {}", cluster.addr);
    eprintln!(
        "manager at {} with {} providers; data and logs in {}\n\
         use it with: export TOMUS_ADDR={}   (Ctrl-C stops the cluster)",
        cluster.addr,
        a.providers,
        a.data.display(),
        cluster.addr
    );
    let _ = std::io::stdout().flush();
    let logs = cluster.data_dir().join("logs");
    let mut restarts = Restarts::new(a.providers);
    let rt = runtime()?;
    // Children are started on this thread only (they die with the thread that started them)
    // and out of the terminal's process group: Ctrl-C stops them here, manager first.
    let outcome = rt.block_on(async {
        let mut s3 = match gateway {
            Some(mut config) => {
                config.manager = cluster.addr.clone();
                let (tx, rx) = tokio::sync::oneshot::channel();
                let task = tokio::spawn(tomus_s3::run(config, Some(tx)));
                if let Ok(s3_addr) = rx.await {
                    let _ = outln!("tomus s3 listening on {s3_addr}");
                    let _ = std::io::stdout().flush();
                }
                Some(task)
            }
            None => None,
        };
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(()),
                done = async {
                    match s3.as_mut() {
                        Some(task) => task.await,
                        None => std::future::pending().await,
                    }
                } => {
                    s3 = None;
                    match done {
                        Ok(Err(e)) => return Err(anyhow::Error::from(e).context("S3 gateway")),
                        Ok(Ok(())) => {}
                        Err(e) => anyhow::bail!("S3 gateway task failed: {e}"),
                    }
                }
                _ = tick.tick() => {
                    for gone in cluster.reap() {
                        let server = match gone {
                            Exited::Manager(_) => Server::Manager,
                            Exited::Provider(i, _) => Server::Provider(i),
                        };
                        if let Exited::Provider(i, status) = &gone {
                            if status.code() == Some(super::EXIT_PRECONDITION_FAILED) {
                                tracing::error!(
                                    "{gone}: its data belongs to another cluster than this \
                                     manager's (was the manager's directory emptied?); it stays \
                                     down, its chunks untouched. See {}",
                                    logs.join(format!("provider-{i}.log")).display()
                                );
                                continue;
                            }
                        }
                        if a.no_restart {
                            if server == Server::Manager {
                                anyhow::bail!("{gone}; see the logs in {}", logs.display());
                            }
                            tracing::warn!("{gone}; it stays down (--no-restart); logs in {}", logs.display());
                        } else {
                            let delay = restarts.died(server);
                            tracing::warn!("{gone}; restarting it in {} s (logs in {})", delay.as_secs(), logs.display());
                        }
                    }
                    for server in restarts.due() {
                        let started = match server {
                            Server::Manager => cluster.start_manager(),
                            Server::Provider(i) => cluster.start_provider(i),
                        };
                        match started {
                            Ok(()) => {
                                restarts.started(server);
                                tracing::warn!("{server} restarted");
                            }
                            Err(e) => {
                                let delay = restarts.died(server);
                                tracing::warn!("{server} did not start again ({e:#}); next try in {} s", delay.as_secs());
                            }
                        }
                    }
                }
            }
        }
    });
    cluster.stop(STOP_GRACE);
    outcome
}
