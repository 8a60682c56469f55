//! The `tomus` command line: servers, embedded cluster, blob commands, demo and benchmarks.
//! The `tomus` binary and the Python package's `tomus` script both run [`main_with`].
//!
//! This file defines the command line and dispatches it; the blob commands, the servers and
//! `tomus up` have modules of their own (the other commands live in the crate's `*_cmd.rs`).

/// `tomus blob ...`: create, write, append, read and inspect blobs.
mod blob_cmd;
/// The configuration file (`--config`) and `tomus config show`.
mod config;
/// The servers (`tomus manager`, `tomus provider`, `tomus s3`): their flags, and how they
/// run until a signal stops them.
mod servers;
/// `tomus up`: an embedded cluster in the foreground.
mod up;

use std::ffi::OsString;
use std::path::PathBuf;

use crate::fs_cmd::FsCommand;
use crate::s3_cmd::S3Args;
use crate::size::format_size;
use crate::{bench, demo};
use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::json;
use tomus_client::{Client, ClientOptions};
use tomus_wire::{trace, ClusterSecret, ErrorKind, Placement};

use blob_cmd::BlobCommand;
use servers::{ManagerArgs, ProviderArgs};
use up::UpArgs;

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
`--storage` runs this binary's storage demo), `tomus compute APP ...` runs the \
applications (wordcount, mfw, grep, kmeans, pca, abrain, pagerank; `--sites FILE` across \
clusters), `tomus workflow run|status|logs|synthetic|blast` runs workflows that pass files \
inside the deployment, and `tomus service submit|status|list` runs data services on the \
storage nodes."
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
    /// Format of the log lines on stderr: `text`, or `json` (one JSON object per line, with
    /// timestamp, level, target and fields) for log collectors. `tomus up` passes it to its
    /// servers.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        env = "TOMUS_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or a filter such as
    /// `info,tomus_provider=debug` [default: TOMUS_LOG, else info for servers and warn for
    /// other commands]. `tomus up` passes it to its servers.
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Configuration file (TOML; default: TOMUS_CONFIG): a table per server (`[manager]`,
    /// `[provider]`, `[s3]`, `[up]`) of its long flags, and `[global]`. Flags given on the
    /// command line override the file. See `tomus config show --help`.
    #[arg(long, global = true, value_name = "FILE", env = "TOMUS_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The logging flags `tomus up` hands to the servers it starts.
pub(crate) fn log_args(format: LogFormat, level: Option<&str>) -> Vec<String> {
    let mut args = vec!["--log-format".to_string(), format.name().to_string()];
    if let Some(level) = level {
        args.extend(["--log-level".to_string(), level.to_string()]);
    }
    args
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
    /// Blob commands: create, write, append, read, stat, versions, locations, list, delete.
    #[command(subcommand)]
    Blob(BlobCommand),
    /// The file namespace: put, get, cat, head, tail, ls, stat, du, versions, cp, mkdir, rm,
    /// mv (files are blobs; paths may be tomus:// URLs).
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
    /// Backup to object storage (S3, a directory) and restore: enable, now, status, list,
    /// verify, restore.
    #[command(subcommand)]
    Backup(crate::backup_cmd::BackupCommand),
    /// Geo-replication to other tomus clusters ("sites"): add a site, replicate a subtree
    /// to it (versions replayed in order, asynchronously), see the lag.
    #[command(subcommand)]
    Sites(crate::sites_cmd::SitesCommand),
    /// The measured network and dedicated storage nodes (DataSteward): measure, show, select.
    #[command(subcommand)]
    Topology(crate::topology_cmd::TopologyCommand),
    /// Run a topology agent on a compute-only node: it answers the throughput probes of
    /// `tomus topology measure` (providers answer them too) and announces itself to the
    /// manager. Listens on --addr.
    Agent(crate::topology_cmd::AgentArgs),
    /// Deploy a placement plan (`tomus topology select --json`): providers on its storage
    /// nodes only, the computation on the others; the manager sends each writer's chunks to
    /// its own cluster's storage node first. Prints (or with --ssh runs) each host's command.
    Deploy(crate::deploy_cmd::DeployArgs),
    /// The configuration file (`--config FILE`): `tomus config show ROLE [FLAGS]` prints the
    /// effective configuration of a server.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration of `tomus ROLE FLAGS` (ROLE: manager, provider, s3,
    /// up) with the file of --config: every flag, its value and where it came from.
    Show {
        role: String,
        /// The flags the server would be started with.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        flags: Vec<String>,
    },
}

/// Runs the command line `args` (the program name first) and returns the process exit code.
pub fn main_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let args = match config::expand(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("tomus: error: {e:#}");
            return 2;
        }
    };
    let matches = match Cli::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) if e.use_stderr() && args.iter().any(|a| a == "--json") => {
            // A usage error of a command asked for JSON: JSON too (help and --version stay).
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            let message = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!(
                "{}",
                json!({"error": {"kind": "InvalidArgument", "message": message}})
            );
            return e.exit_code();
        }
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
        Command::Manager(_) | Command::Provider(_) | Command::S3(_) | Command::Agent(_)
    );
    let default_level = if server { "info" } else { "warn" };
    // s3s logs every client error (a 404, a bad signature) at error level: off by default.
    let filter = match &cli.log_level {
        Some(level) => match tracing_subscriber::EnvFilter::try_new(level) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("tomus: error: --log-level {level:?}: {e}");
                return 2;
            }
        },
        None => tracing_subscriber::EnvFilter::try_from_env("TOMUS_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!("{default_level},s3s=off"))
        }),
    };
    // Fails only when a subscriber is already set (a second call in one process): keep it.
    // Colours only on a terminal: the servers of `tomus up` log to files.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match cli.log_format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    let json_errors = cli.json;
    match run(cli, explicit_addr) {
        Ok(()) => 0,
        // The reader of our output is gone (`tomus fs ls | head -1`): nothing to say to anyone.
        Err(e) if crate::out::is_closed_output(&e) => 0,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            if json_errors {
                eprintln!(
                    "{}",
                    json!({"error": {"kind": error_kind(&e), "message": msg}})
                );
            } else {
                eprintln!("tomus: error: {msg}");
            }
            exit_code(&e)
        }
    }
}

/// The name of an error's kind for JSON output: the tomus error kind (`NotFound`, ...), `Io`
/// for a local I/O failure, `Other` for the rest.
fn error_kind(e: &anyhow::Error) -> String {
    if let Some(t) = e.downcast_ref::<tomus_wire::Error>() {
        return format!("{:?}", t.kind);
    }
    if e.chain().any(|c| c.is::<std::io::Error>()) {
        return "Io".into();
    }
    "Other".into()
}

/// Exit status of a condition that did not hold: an append at an expected size that moved
/// on, or a provider whose data belongs to another cluster than its manager's (which
/// `tomus up` then leaves down: restarting it changes nothing).
pub(crate) const EXIT_PRECONDITION_FAILED: i32 = 10;

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
        Some(ErrorKind::WriteExpired) => 9,
        Some(ErrorKind::PreconditionFailed) => EXIT_PRECONDITION_FAILED,
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
        Command::Config(ConfigCommand::Show { role, flags }) => {
            let shown = config::show(Cli::command(), cli.config.as_deref(), &role, &flags)?;
            let _ = outln!("{}", shown.trim_end());
            Ok(())
        }
        Command::Up(a) => {
            let mut server_args = log_args(cli.log_format, cli.log_level.as_deref());
            // The file's `[manager]` and `[provider]` tables configure the servers `up` runs
            // (the flags `up` gives them override the file's, as any command line does).
            if let Some(file) = &cli.config {
                let file = std::fs::canonicalize(file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                server_args.extend(["--config".to_string(), file.display().to_string()]);
            }
            up::up(&cli.addr, secret, server_args, a)
        }
        Command::S3(a) => {
            let config = crate::s3_cmd::config(&cli.addr, secret, &a)?;
            servers::serve("s3", |ready, _| tomus_s3::run(config, Some(ready)))
        }
        Command::Manager(a) => servers::run_manager(cli.addr, secret, a),
        Command::Provider(a) => servers::run_provider(cli.addr, explicit_addr, secret, cli.json, a),
        // One request id per command: every request it makes carries it (see tomus_wire::trace).
        Command::Blob(cmd) => runtime()?.block_on(trace::scope(
            trace::new_id(),
            blob_cmd::run(&cli.addr, secret, cli.json, cmd),
        )),
        Command::Fs(cmd) => runtime()?.block_on(trace::scope(trace::new_id(), async {
            let client = connect(&cli.addr, secret, false).await?;
            crate::fs_cmd::run(&client, cli.json, cmd).await
        })),
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
        Command::Backup(cmd) => {
            runtime()?.block_on(crate::backup_cmd::run(&cli.addr, secret, cli.json, cmd))
        }
        Command::Sites(cmd) => {
            runtime()?.block_on(crate::sites_cmd::run(&cli.addr, secret, cli.json, cmd))
        }
        Command::Topology(cmd) => {
            runtime()?.block_on(crate::topology_cmd::run(&cli.addr, secret, cli.json, cmd))
        }
        Command::Deploy(a) => runtime()?.block_on(crate::deploy_cmd::run(
            &cli.addr,
            secret,
            cli.secret_file.as_deref(),
            cli.json,
            a,
        )),
        Command::Agent(a) => {
            let config = crate::topology_cmd::agent_config(cli.addr, explicit_addr, secret, a);
            servers::serve("agent", |ready, _| {
                tomus_steward::agent::run(config, Some(ready))
            })
        }
    }
}

/// A client of the manager at `addr` (balanced placement).
pub(crate) async fn connect_client(addr: &str, secret: Option<ClusterSecret>) -> Result<Client> {
    connect(addr, secret, false).await
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
    Client::connect(addr, options).await.map_err(|e| {
        if e.kind == ErrorKind::Unavailable {
            // Nobody serves there: most likely no cluster was started, or this is not its
            // address. The kind (and so the exit code) stays.
            tomus_wire::Error::new(e.kind, format!("{}; {NO_CLUSTER_HINT}", e.message)).into()
        } else {
            e.into()
        }
    })
}

/// What to do when the manager cannot be reached.
const NO_CLUSTER_HINT: &str = "start a cluster with `tomus up` (in another terminal, or with `&`), or point TOMUS_ADDR or --addr at a running manager";

async fn providers(addr: &str, secret: Option<ClusterSecret>, json_out: bool) -> Result<()> {
    let client = connect(addr, secret, false).await?;
    let list = client.providers().await?;
    if json_out {
        let rows: Vec<_> = list
            .iter()
            .map(|p| {
                json!({"id": p.id, "addr": p.addr, "alive": p.alive, "fault": p.fault,
                            "capacity": p.capacity, "free": p.free, "chunks": p.chunks, "load": p.load})
            })
            .collect();
        outln!("{}", serde_json::Value::Array(rows))?;
    } else {
        outln!(
            "{:>4}  {:<22}  {:>5}  {:>10}  {:>10}  {:>8}",
            "ID",
            "ADDRESS",
            "ALIVE",
            "CAPACITY",
            "FREE",
            "CHUNKS"
        )?;
        for p in list {
            outln!(
                "{:>4}  {:<22}  {:>5}  {:>10}  {:>10}  {:>8}",
                p.id,
                p.addr,
                if p.alive { "yes" } else { "no" },
                format_size(p.capacity),
                format_size(p.free),
                p.chunks
            )?;
        }
    }
    Ok(())
}
