//! The `tomus` command line: servers, embedded cluster, blob commands, demo and benchmarks.
//! The `tomus` binary and the Python package's `tomus` script both run [`main_with`].

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use crate::fs_cmd::FsCommand;
use crate::s3_cmd::S3Args;
use crate::size::{format_size, parse_size};
use crate::transfer::{copy_range, fill_writer, open_input};
use crate::{bench, demo};
use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::json;
use tomus_client::{Client, ClientOptions};
use tomus_wire::{ClusterSecret, ErrorKind, Placement, VersionState};

#[derive(Parser)]
#[command(
    name = "tomus",
    version,
    about = "tomus: a versioned BLOB store over the disks of the machines a job runs on",
    long_about = "tomus federates local disks into one versioned BLOB store with lock-free \
concurrent writes and appends (BlobSeer's design).\n\nStart a single-machine cluster with \
`tomus up`, then use `tomus blob ...` or `tomus fs ...` against it (TOMUS_ADDR or --addr names \
the manager).\n\nThe `tomus` command of the Python package adds the compute layer: `tomus demo` \
runs the main job (MostFrequentWords, KMeans and A-Brain on Dask next to the data; \
`--storage` runs this binary's storage demo) and `tomus compute APP ...` runs the \
applications (wordcount, mfw, grep, kmeans, pca, abrain)."
)]
struct Cli {
    /// Manager address (host:port).
    #[arg(
        long,
        global = true,
        env = "TOMUS_ADDR",
        default_value = "127.0.0.1:7070"
    )]
    addr: String,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    /// File holding the cluster secret (default: TOMUS_CLUSTER_SECRET). Required to listen on
    /// a non-loopback address, and to talk to servers that require it.
    #[arg(long, global = true, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an embedded cluster (a manager and N providers on loopback) in the foreground.
    Up(UpArgs),
    /// Run the manager (version manager, provider registry, placement).
    Manager(ManagerArgs),
    /// Run a provider (chunk store + metadata DHT shard) that joins a manager; or drain or
    /// remove one (`tomus provider drain ADDR`).
    Provider(ProviderArgs),
    /// Blob commands: create, write, append, read, stat, versions, locations, list.
    #[command(subcommand)]
    Blob(BlobCommand),
    /// The file namespace: put, get, cat, ls, stat, mkdir, rm, mv (files are blobs).
    #[command(subcommand)]
    Fs(FsCommand),
    /// List the providers the manager knows, with capacity and liveness.
    Providers,
    /// The cluster at a glance: providers (up, down, draining), under-replicated data,
    /// repair progress, garbage collection.
    Status,
    /// Verify the checksum of every chunk on the providers; corrupt copies are quarantined
    /// and repair re-creates them from good replicas.
    Scrub(crate::ops_cmd::ScrubArgs),
    /// Serve the S3 API over the cluster (buckets are top-level directories).
    S3(S3Args),
    /// Storage demo: start an embedded cluster, write/append/read concurrently, report.
    Demo(demo::DemoArgs),
    /// Benchmarks (BlobSeer scenarios S1-S5, manager micro-benchmark, loopback TCP limit).
    Bench(bench::BenchArgs),
}

#[derive(Args)]
struct UpArgs {
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
}

#[derive(Args)]
struct ManagerArgs {
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
    /// process.
    #[arg(long)]
    no_maintenance: bool,
    /// Pause between maintenance passes, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    maintenance_interval_ms: u64,
    /// Most bytes per second repair copies (0: unlimited), so it does not starve foreground
    /// traffic.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    repair_rate: u64,
    /// Chunk copies repair runs at once.
    #[arg(long, default_value_t = 4)]
    repair_parallelism: usize,
    /// Garbage collection deletes unreferenced chunks only once they are this many
    /// milliseconds old: longer than any write takes from its first chunk to its commit.
    #[arg(long, default_value_t = 3_600_000)]
    gc_grace_ms: u64,
    /// Do not garbage-collect.
    #[arg(long)]
    no_gc: bool,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct ProviderArgs {
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
    /// Heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Acknowledge writes once in the page cache instead of after fdatasync.
    #[arg(long)]
    no_fsync: bool,
}

#[derive(Subcommand)]
enum BlobCommand {
    /// Create a blob; prints its id.
    Create {
        /// Chunk size: a power of two from 4KiB to 256MiB.
        #[arg(long, default_value = "4MiB", value_parser = parse_size)]
        chunk_size: u64,
        /// Replicas of every chunk and metadata node.
        #[arg(long, default_value_t = 1)]
        replication: u32,
    },
    /// Write FILE (or stdin) at OFFSET; prints the new version.
    Write {
        /// Blob id.
        id: u64,
        /// Where to write (any offset; past the end leaves a hole that reads as zeros).
        #[arg(value_parser = parse_size)]
        offset: u64,
        /// Input file; `-` or nothing reads stdin.
        file: Option<PathBuf>,
        /// Put the first replica on this machine's provider when there is one.
        #[arg(long)]
        local: bool,
    },
    /// Append FILE (or stdin); prints the new version and the offset it landed at.
    Append {
        /// Blob id.
        id: u64,
        /// Input file; `-` or nothing reads stdin.
        file: Option<PathBuf>,
        /// Put the first replica on this machine's provider when there is one.
        #[arg(long)]
        local: bool,
    },
    /// Read bytes to stdout (default: the whole latest version).
    Read(RangeArgs),
    /// Show a version's size, range and state.
    Stat {
        /// Blob id.
        id: u64,
        /// Version (default: the latest published).
        #[arg(long)]
        version: Option<u64>,
    },
    /// List published versions (and aborted ones).
    Versions {
        /// Blob id.
        id: u64,
    },
    /// Show which providers hold each range.
    Locations(RangeArgs),
    /// Set which versions are kept (the others are garbage-collected; the latest always
    /// stays).
    Retention(crate::ops_cmd::RetentionArgs),
    /// List all blobs.
    List,
}

/// A byte range of one version of a blob.
#[derive(Args)]
struct RangeArgs {
    /// Blob id.
    id: u64,
    /// Version (default: the latest published).
    #[arg(long)]
    version: Option<u64>,
    /// First byte (accepts units: 4MiB).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    offset: u64,
    /// Bytes (default: to the end).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
}

/// Runs the command line `args` (the program name first) and returns the process exit code.
pub fn main_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    // A provider binds --addr only when given on the command line: TOMUS_ADDR names the manager.
    let explicit_addr = matches.value_source("addr") == Some(ValueSource::CommandLine);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let server = matches!(
        cli.command,
        Command::Manager(_) | Command::Provider(_) | Command::S3(_)
    );
    let default_level = if server { "info" } else { "warn" };
    // s3s logs every client error (a 404, a bad signature) at error level: off by default.
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOMUS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default_level},s3s=off")));
    // Fails only when a subscriber is already set (a second call in one process): keep it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    match run(cli, explicit_addr) {
        Ok(()) => 0,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("tomus: error: {msg}");
            exit_code(&e)
        }
    }
}

/// Exit codes by error kind, so scripts can tell "bad input" from "cluster down".
fn exit_code(e: &anyhow::Error) -> i32 {
    match e.downcast_ref::<tomus_wire::Error>().map(|e| e.kind) {
        Some(ErrorKind::InvalidArgument | ErrorKind::OutOfRange) => 2,
        Some(
            ErrorKind::NotFound
            | ErrorKind::VersionNotPublished
            | ErrorKind::VersionAborted
            | ErrorKind::Retry,
        ) => 3,
        Some(ErrorKind::Unavailable) => 4,
        Some(ErrorKind::AuthFailed) => 5,
        Some(ErrorKind::Corrupt) => 6,
        Some(ErrorKind::NoSpace) => 7,
        Some(ErrorKind::AlreadyExists) => 8,
        Some(ErrorKind::NotEmpty | ErrorKind::IsADirectory | ErrorKind::NotADirectory) => 2,
        _ => 1,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn run(cli: Cli, explicit_addr: bool) -> Result<()> {
    let secret = ClusterSecret::load(cli.secret_file.as_deref())?;
    match cli.command {
        Command::Up(a) => up(&cli.addr, secret, a),
        Command::S3(a) => {
            let config = crate::s3_cmd::config(&cli.addr, secret, &a)?;
            serve("s3", |ready| tomus_s3::run(config, Some(ready)))
        }
        Command::Manager(a) => {
            let config = tomus_manager::ManagerConfig {
                data_dir: a.data.clone(),
                listen: cli.addr,
                secret: secret.clone(),
                provider_timeout: Duration::from_millis(a.provider_timeout_ms.max(100)),
                writer_lease: Duration::from_millis(a.writer_lease_ms.max(100)),
            };
            let maintenance = (!a.no_maintenance).then(|| tomus_maintenance::MaintenanceConfig {
                secret,
                interval: Duration::from_millis(a.maintenance_interval_ms.max(10)),
                repair_rate: a.repair_rate,
                repair_parallelism: a.repair_parallelism.max(1),
                gc_grace: (!a.no_gc).then(|| Duration::from_millis(a.gc_grace_ms)),
                ..tomus_maintenance::MaintenanceConfig::new(String::new())
            });
            serve("manager", |ready| {
                manager_with_maintenance(config, maintenance, ready)
            })
        }
        Command::Provider(a) => {
            if let Some(action) = a.action {
                return runtime()?.block_on(async {
                    let client = connect(&cli.addr, secret, false).await?;
                    crate::ops_cmd::provider_action(&client, cli.json, action).await
                });
            }
            let (Some(manager), Some(data)) = (a.manager, a.data) else {
                anyhow::bail!("a provider needs --manager ADDR and --data DIR");
            };
            let config = tomus_provider::ProviderConfig {
                data_dir: data,
                listen: if explicit_addr {
                    cli.addr
                } else {
                    "127.0.0.1:0".to_string()
                },
                advertise: a.advertise,
                manager,
                secret,
                memory_tier_bytes: a.memory_tier,
                heartbeat_interval: Duration::from_millis(a.heartbeat_ms),
                fsync: !a.no_fsync,
            };
            serve("provider", |ready| tomus_provider::run(config, Some(ready)))
        }
        Command::Blob(cmd) => runtime()?.block_on(blob_command(&cli.addr, secret, cli.json, cmd)),
        Command::Fs(cmd) => runtime()?.block_on(async {
            let client = connect(&cli.addr, secret, false).await?;
            crate::fs_cmd::run(&client, cli.json, cmd).await
        }),
        Command::Providers => runtime()?.block_on(providers(&cli.addr, secret, cli.json)),
        Command::Status => runtime()?.block_on(async {
            let client = connect(&cli.addr, secret, false).await?;
            crate::ops_cmd::print_status(&client, cli.json).await
        }),
        Command::Scrub(a) => runtime()?.block_on(async {
            let client = connect(&cli.addr, secret, false).await?;
            crate::ops_cmd::scrub(&client, cli.json, a).await
        }),
        Command::Demo(a) => demo::run(demo::DemoArgs {
            json: cli.json,
            ..a
        }),
        Command::Bench(a) => bench::run(a),
    }
}

/// Runs the manager and, once it serves, the maintenance service next to it (a client of the
/// manager's own address).
async fn manager_with_maintenance(
    config: tomus_manager::ManagerConfig,
    maintenance: Option<tomus_maintenance::MaintenanceConfig>,
    ready: tokio::sync::oneshot::Sender<String>,
) -> tomus_wire::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let manager = tokio::spawn(tomus_manager::run(config, Some(tx)));
    if let Ok(addr) = rx.await {
        if let Some(m) = maintenance {
            tokio::spawn(tomus_maintenance::run(
                tomus_maintenance::MaintenanceConfig {
                    manager: addr.clone(),
                    ..m
                },
            ));
        }
        let _ = ready.send(addr);
    }
    manager
        .await
        .map_err(|e| tomus_wire::Error::internal(format!("manager task failed: {e}")))?
}

/// Runs a server and prints `tomus ROLE listening on ADDR` on stdout once it serves.
fn serve<F, Fut>(role: &str, start: F) -> Result<()>
where
    F: FnOnce(tokio::sync::oneshot::Sender<String>) -> Fut,
    Fut: std::future::Future<Output = tomus_wire::Result<()>> + Send + 'static,
{
    let rt = runtime()?;
    rt.block_on(async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(start(tx));
        if let Ok(addr) = rx.await {
            println!("tomus {role} listening on {addr}");
            let _ = std::io::stdout().flush();
        }
        match server.await {
            Ok(r) => r.map_err(anyhow::Error::from),
            Err(e) => Err(anyhow::anyhow!("{role} task failed: {e}")),
        }
    })
}

fn up(addr: &str, secret: Option<ClusterSecret>, a: UpArgs) -> Result<()> {
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
    let mut cluster = EmbeddedCluster::start(&Launcher::current()?, spec)?;
    println!("tomus cluster listening on {}", cluster.addr);
    eprintln!(
        "manager at {} with {} providers; data and logs in {}\n\
         use it with: export TOMUS_ADDR={}   (Ctrl-C stops the cluster)",
        cluster.addr,
        a.providers,
        a.data.display(),
        cluster.addr
    );
    let _ = std::io::stdout().flush();
    let rt = runtime()?;
    rt.block_on(async {
        let mut s3 = match gateway {
            Some(mut config) => {
                config.manager = cluster.addr.clone();
                let (tx, rx) = tokio::sync::oneshot::channel();
                let task = tokio::spawn(tomus_s3::run(config, Some(tx)));
                if let Ok(s3_addr) = rx.await {
                    println!("tomus s3 listening on {s3_addr}");
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
                    if let Some(what) = cluster.exited() {
                        anyhow::bail!("{what}; see the logs in {}", cluster.data_dir().join("logs").display());
                    }
                }
            }
        }
    })
}

async fn connect(addr: &str, secret: Option<ClusterSecret>, local: bool) -> Result<Client> {
    let options = ClientOptions {
        secret,
        placement: if local {
            Placement::Local
        } else {
            Placement::Balanced
        },
        ..ClientOptions::default()
    };
    Ok(Client::connect(addr, options).await?)
}

async fn blob_command(
    addr: &str,
    secret: Option<ClusterSecret>,
    json_out: bool,
    cmd: BlobCommand,
) -> Result<()> {
    let local = matches!(
        cmd,
        BlobCommand::Write { local: true, .. } | BlobCommand::Append { local: true, .. }
    );
    let client = connect(addr, secret, local).await?;
    match cmd {
        BlobCommand::Create {
            chunk_size,
            replication,
        } => {
            let b = client.create_blob(chunk_size, replication).await?;
            if json_out {
                println!(
                    "{}",
                    json!({"id": b.id(), "chunk_size": b.chunk_size(), "replication": b.replication()})
                );
            } else {
                println!("{}", b.id());
            }
        }
        BlobCommand::Write {
            id, offset, file, ..
        } => {
            let blob = client.open_blob(id).await?;
            let mut writer = blob.writer();
            let (input, size) = open_input(file.as_deref())?;
            fill_writer(input, size, &mut writer).await?;
            let len = writer.len();
            let v = writer.commit_write(offset).await?.ok_or_else(empty_input)?;
            print_landed(json_out, v, offset, len, false);
        }
        BlobCommand::Append { id, file, .. } => {
            let blob = client.open_blob(id).await?;
            let mut writer = blob.writer();
            let (input, size) = open_input(file.as_deref())?;
            fill_writer(input, size, &mut writer).await?;
            let len = writer.len();
            let (v, off) = writer.commit_append().await?.ok_or_else(empty_input)?;
            print_landed(json_out, v, off, len, true);
        }
        BlobCommand::Read(RangeArgs {
            id,
            version,
            offset,
            size,
        }) => {
            let blob = client.open_blob(id).await?;
            copy_range(&blob, version, offset, size, &mut std::io::stdout().lock()).await?;
        }
        BlobCommand::Stat { id, version } => {
            let blob = client.open_blob(id).await?;
            let v = blob.stat(version).await?;
            if json_out {
                println!(
                    "{}",
                    json!({"blob": id, "version": v.version, "size": v.size, "chunk_size": blob.chunk_size(),
                           "replication": blob.replication(), "write_offset": v.span.offset,
                           "write_size": v.span.size, "append": v.append, "state": state_name(v.state)})
                );
            } else {
                println!(
                    "blob {id} version {} size {} ({})  chunk size {}  replication {}",
                    v.version,
                    v.size,
                    format_size(v.size),
                    format_size(blob.chunk_size()),
                    blob.replication()
                );
            }
        }
        BlobCommand::Versions { id } => {
            let blob = client.open_blob(id).await?;
            let list = blob.versions().await?;
            if json_out {
                let versions: Vec<_> = list
                    .versions
                    .iter()
                    .map(|v| json!({"version": v.version, "offset": v.span.offset, "size": v.span.size,
                                    "blob_size": v.size, "append": v.append, "state": state_name(v.state)}))
                    .collect();
                let aborted: Vec<_> = list
                    .aborted
                    .iter()
                    .map(|(a, b)| json!({"from": a, "to": b}))
                    .collect();
                println!("{}", json!({"versions": versions, "aborted": aborted}));
            } else {
                println!(
                    "{:>8}  {:>9}  {:>14}  {:>12}  {:>14}",
                    "VERSION", "STATE", "OFFSET", "WRITTEN", "BLOB SIZE"
                );
                for v in &list.versions {
                    let kind = if v.append { "append" } else { "write" };
                    println!(
                        "{:>8}  {:>9}  {:>14}  {:>12}  {:>14}  {kind}",
                        v.version,
                        state_name(v.state),
                        v.span.offset,
                        v.span.size,
                        v.size
                    );
                }
                for (a, b) in &list.aborted {
                    println!(
                        "versions {a}..{} aborted (not published before a manager restart)",
                        b - 1
                    );
                }
            }
        }
        BlobCommand::Locations(RangeArgs {
            id,
            version,
            offset,
            size,
        }) => {
            let blob = client.open_blob(id).await?;
            let total = blob.size(version).await?;
            let size = size.unwrap_or(total.saturating_sub(offset));
            let locs = blob.locations(offset, size, version).await?;
            if json_out {
                let rows: Vec<_> = locs
                    .iter()
                    .map(|l| json!({"offset": l.offset, "size": l.size, "providers": l.providers}))
                    .collect();
                println!("{}", serde_json::Value::Array(rows));
            } else {
                for l in locs {
                    let where_ = if l.providers.is_empty() {
                        "(hole: zeros)".to_string()
                    } else {
                        l.providers.join(",")
                    };
                    println!("{:>14} {:>12}  {where_}", l.offset, l.size);
                }
            }
        }
        BlobCommand::Retention(a) => crate::ops_cmd::set_retention(&client, json_out, a).await?,
        BlobCommand::List => {
            let blobs = client.list_blobs().await?;
            if json_out {
                let rows: Vec<_> = blobs
                    .iter()
                    .map(|b| json!({"id": b.id, "latest": b.latest, "size": b.size, "chunk_size": b.chunk_size, "replication": b.replication}))
                    .collect();
                println!("{}", serde_json::Value::Array(rows));
            } else {
                println!(
                    "{:>8}  {:>8}  {:>14}  {:>10}  {:>3}",
                    "ID", "VERSION", "SIZE", "CHUNK", "R"
                );
                for b in blobs {
                    println!(
                        "{:>8}  {:>8}  {:>14}  {:>10}  {:>3}",
                        b.id,
                        b.latest,
                        b.size,
                        format_size(b.chunk_size),
                        b.replication
                    );
                }
            }
        }
    }
    Ok(())
}

fn empty_input() -> tomus_wire::Error {
    tomus_wire::Error::invalid("the input is empty: nothing to write")
}

/// Prints where a write landed: `VERSION` (or `VERSION OFFSET` for appends), or JSON.
fn print_landed(json_out: bool, version: u64, offset: u64, size: u64, with_offset: bool) {
    if json_out {
        println!(
            "{}",
            json!({"version": version, "offset": offset, "size": size})
        );
    } else if with_offset {
        println!("{version} {offset}");
    } else {
        println!("{version}");
    }
}

fn state_name(s: VersionState) -> &'static str {
    match s {
        VersionState::Pending => "pending",
        VersionState::Published => "published",
        VersionState::Aborted => "aborted",
    }
}

async fn providers(addr: &str, secret: Option<ClusterSecret>, json_out: bool) -> Result<()> {
    let client = connect(addr, secret, false).await?;
    let list = client.providers().await?;
    if json_out {
        let rows: Vec<_> = list
            .iter()
            .map(|p| {
                json!({"id": p.id, "addr": p.addr, "alive": p.alive, "capacity": p.capacity,
                            "free": p.free, "chunks": p.chunks, "load": p.load})
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        println!(
            "{:>4}  {:<22}  {:>5}  {:>10}  {:>10}  {:>8}",
            "ID", "ADDRESS", "ALIVE", "CAPACITY", "FREE", "CHUNKS"
        );
        for p in list {
            println!(
                "{:>4}  {:<22}  {:>5}  {:>10}  {:>10}  {:>8}",
                p.id,
                p.addr,
                if p.alive { "yes" } else { "no" },
                format_size(p.capacity),
                format_size(p.free),
                p.chunks
            );
        }
    }
    Ok(())
}
