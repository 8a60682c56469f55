//! `tomus topology` and `tomus agent`: DataSteward's network measurement and the choice of
//! dedicated storage nodes.
//!
//! - `measure`: the manager has every node (providers, and `tomus agent`s on compute-only
//!   nodes) probe every other one and stores the matrix;
//! - `show`: the stored matrix as a table, JSON (the format `select --matrix` reads) or a
//!   heat-map PNG;
//! - `select`: a placement plan (storage nodes, and the compute nodes each serves) from the
//!   stored matrix or a matrix file, by Algorithm 2 or one of its two baselines.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use tomus_steward::matrix::Matrix;
use tomus_steward::select::{select, SelectOptions, Strategy};
use tomus_wire::manager::{GetTopology, MeasureTopology};
use tomus_wire::{ClusterSecret, Pool, RpcConfig};

use crate::size::parse_size;

#[derive(Subcommand)]
pub enum TopologyCommand {
    /// Measure TCP throughput between every ordered pair of nodes (live providers and
    /// `tomus agent`s) and store the matrix with the manager.
    Measure(MeasureArgs),
    /// Print the stored matrix (MiB/s, mean ± stddev; `--json` prints the matrix file format).
    Show {
        /// Also write a heat map of the throughput (row = from, column = to) to FILE.
        #[arg(long, value_name = "FILE")]
        png: Option<PathBuf>,
    },
    /// Choose the storage nodes: a placement plan from the stored matrix or a matrix file.
    Select(SelectArgs),
}

#[derive(Args)]
pub struct MeasureArgs {
    /// Samples per pair; each round probes every pair once, so a pair's samples are spread
    /// over the measurement.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Length of one probe, in milliseconds.
    #[arg(long, default_value_t = 300)]
    probe_ms: u32,
    /// Probes running at once (never two on one node).
    #[arg(long, default_value_t = 2)]
    parallel: u32,
    /// Size of the frames a probe streams.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    frame: u64,
    /// Give up waiting for the manager after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_s: u64,
    /// Also write a heat map of the result to FILE.
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
}

#[derive(Args)]
pub struct SelectArgs {
    /// Read this matrix file instead of asking the manager (offline; format: `tomus
    /// topology show --json`).
    #[arg(long, value_name = "FILE")]
    matrix: Option<PathBuf>,
    /// How many storage nodes to choose.
    #[arg(long)]
    storage_nodes: usize,
    /// Never choose a node whose mean throughput with the others is below this (MiB/s; the
    /// paper uses 95% of the QoS the provider promises).
    #[arg(long, value_name = "MiB/s")]
    min_throughput: Option<f64>,
    /// Never choose a node whose links vary more than this (mean stddev / mean).
    #[arg(long, value_name = "CV")]
    max_variability: Option<f64>,
    /// Seed of the random starts (the same seed gives the same plan).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Starts of the clustering; the best plan is kept.
    #[arg(long, default_value_t = 16)]
    restarts: usize,
    /// datasteward (the paper's Algorithm 2), random, or latency (k-medoids on round-trip
    /// time, needs a measured matrix or latency_ms in the file).
    #[arg(long, default_value = "datasteward", value_parser = parse_strategy)]
    strategy: Strategy,
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    Strategy::parse(s).ok_or_else(|| format!("{s:?}: choose datasteward, random or latency"))
}

/// `tomus agent`'s flags.
#[derive(Args)]
pub struct AgentArgs {
    /// The manager to announce this node to.
    #[arg(long, env = "TOMUS_MANAGER")]
    manager: String,
    /// This node's name in the matrix (default: its address).
    #[arg(long)]
    name: Option<String>,
    /// Address the other nodes reach this one at (default: the address it listens on).
    #[arg(long)]
    advertise: Option<String>,
    /// Milliseconds between announcements (the manager forgets an agent silent for its
    /// provider timeout).
    #[arg(long, default_value_t = 3_000)]
    interval_ms: u64,
}

/// The agent's configuration: it listens on `--addr` when given, else on a free loopback
/// port (as a provider).
pub fn agent_config(
    addr: String,
    explicit_addr: bool,
    secret: Option<ClusterSecret>,
    a: AgentArgs,
) -> tomus_steward::agent::AgentConfig {
    tomus_steward::agent::AgentConfig {
        listen: if explicit_addr {
            addr
        } else {
            "127.0.0.1:0".to_string()
        },
        advertise: a.advertise,
        name: a.name,
        manager: a.manager,
        secret,
        interval: Duration::from_millis(a.interval_ms.max(100)),
    }
}

fn pool(secret: Option<ClusterSecret>, timeout: Duration) -> std::sync::Arc<Pool> {
    Pool::new(RpcConfig {
        request_timeout: timeout,
        secret,
        ..RpcConfig::default()
    })
}

async fn stored(addr: &str, secret: Option<ClusterSecret>) -> Result<Matrix> {
    let m = pool(secret, Duration::from_secs(30))
        .call(addr, GetTopology {})
        .await?
        .context("no topology measured yet: run `tomus topology measure` first")?;
    Ok(Matrix::from_measured(&m))
}

fn write_png(m: &Matrix, path: &PathBuf) -> Result<()> {
    let bytes = tomus_steward::heatmap::render(m).map_err(anyhow::Error::msg)?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

pub async fn run(
    addr: &str,
    secret: Option<ClusterSecret>,
    json: bool,
    cmd: TopologyCommand,
) -> Result<()> {
    match cmd {
        TopologyCommand::Measure(a) => {
            let frame_bytes = u32::try_from(a.frame).context("--frame is too large")?;
            let req = MeasureTopology {
                rounds: a.rounds,
                duration_ms: a.probe_ms,
                parallel: a.parallel,
                frame_bytes,
            };
            let m = pool(secret, Duration::from_secs(a.timeout_s))
                .call(addr, req)
                .await?;
            let m = Matrix::from_measured(&m);
            if let Some(path) = &a.png {
                write_png(&m, path)?;
            }
            print_matrix(&m, json)
        }
        TopologyCommand::Show { png } => {
            let m = stored(addr, secret).await?;
            if let Some(path) = &png {
                write_png(&m, path)?;
            }
            print_matrix(&m, json)
        }
        TopologyCommand::Select(a) => {
            let m = match &a.matrix {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    Matrix::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
                }
                None => stored(addr, secret).await?,
            };
            let o = SelectOptions {
                storage_nodes: a.storage_nodes,
                min_throughput: a.min_throughput,
                max_variability: a.max_variability,
                seed: a.seed,
                restarts: a.restarts,
                strategy: a.strategy,
            };
            let plan = select(&m, &o).map_err(|e| {
                anyhow::Error::new(tomus_wire::Error::invalid(e)).context("cannot select")
            })?;
            if json {
                outln!("{}", plan.to_json(&m))?;
                return Ok(());
            }
            let name = |i: &usize| m.nodes[*i].as_str();
            outln!(
                "{} storage node(s) by {}: {}",
                plan.storage.len(),
                plan.strategy.name(),
                plan.storage.iter().map(name).collect::<Vec<_>>().join(", ")
            )?;
            for (s, clients) in plan.storage.iter().zip(&plan.clusters) {
                let members: Vec<&str> = clients.iter().map(name).collect();
                outln!(
                    "  {} serves {}: {}",
                    name(s),
                    members.len(),
                    members.join(", ")
                )?;
            }
            outln!(
                "cumulative compute -> storage throughput: {:.1} MiB/s",
                plan.cumulative
            )?;
            if !plan.filtered.is_empty() {
                let f: Vec<&str> = plan.filtered.iter().map(name).collect();
                outln!(
                    "never storage (throughput or variability): {}",
                    f.join(", ")
                )?;
            }
            Ok(())
        }
    }
}

fn print_matrix(m: &Matrix, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string(m)?)?;
        return Ok(());
    }
    if m.is_empty() {
        bail!("the matrix has no nodes");
    }
    let qos = m.qos();
    outln!("nodes (mean throughput with the others, variability = mean stddev/mean):")?;
    for (i, name) in m.nodes.iter().enumerate() {
        let addr = m.addrs.as_ref().and_then(|a| a.get(i)).map(String::as_str);
        outln!(
            "  [{i}] {name}{}  {:.1} MiB/s  cv {:.3}",
            addr.filter(|a| *a != name)
                .map(|a| format!(" ({a})"))
                .unwrap_or_default(),
            qos[i].throughput,
            qos[i].variability
        )?;
    }
    outln!("throughput MiB/s, row = from, column = to (mean ± stddev):")?;
    let header: Vec<String> = (0..m.len())
        .map(|j| format!("{:>13}", format!("[{j}]")))
        .collect();
    outln!("     {}", header.join(""))?;
    for (i, row) in m.throughput.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(j, t)| {
                if i == j {
                    format!("{:>13}", "-")
                } else {
                    let sd = m.stddev.as_ref().map_or(0.0, |s| s[i][j]);
                    format!("{:>13}", format!("{t:.1}±{sd:.1}"))
                }
            })
            .collect();
        outln!("{:>5}{}", format!("[{i}]"), cells.join(""))?;
    }
    for f in &m.failures {
        outln!("failed: {f}")?;
    }
    Ok(())
}
