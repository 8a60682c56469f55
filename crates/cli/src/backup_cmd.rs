//! `tomus backup ...`: configure the manager's backup service, ask it for a point, see its
//! status, list and verify the points at a target, and restore one (a fresh cluster data
//! directory that `tomus up --data DIR` serves, or one file into a running cluster).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use tomus_backup::restore::{self, choose_point};
use tomus_backup::service::{self, Config};
use tomus_backup::{list_points, read_point, verify, Target};
use tomus_wire::ClusterSecret;

use crate::app::connect_client;
use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use crate::size::{format_size, parse_rate};

#[derive(Subcommand)]
pub enum BackupCommand {
    /// Turn on background backup to TARGET (s3://bucket/prefix with the AWS_* environment
    /// variables of the manager, or file:///absolute/dir). Stored by the manager; the service
    /// in the manager process takes a point every INTERVAL, preferring quiet moments.
    Enable(EnableArgs),
    /// Turn background backup off (points already taken stay at the target).
    Disable,
    /// Ask the backup service for a point now.
    Now {
        /// Wait until the point is complete (or the wait times out).
        #[arg(long)]
        wait: bool,
        /// Longest wait, in seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// What the backup service is doing: its last point, progress, last error.
    Status,
    /// The complete points at the target (default: the configured one).
    List(TargetArg),
    /// Check every object a point names (default: the newest) against its checksum; names
    /// the missing and corrupt ones and fails when there are any.
    Verify {
        point: Option<String>,
        #[command(flatten)]
        target: TargetArg,
    },
    /// Restore a point: into a fresh data directory (`--data DIR`, then `tomus up --data DIR`
    /// serves it), or one file into the running cluster (`--path P --to Q`).
    Restore(RestoreArgs),
}

#[derive(Args)]
pub struct EnableArgs {
    /// Where points go: s3://bucket/prefix or file:///absolute/dir.
    #[arg(long)]
    target: String,
    /// Pause between points (e.g. 1h, 30m, 10s, 500ms).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    interval: Duration,
    /// Namespace subtrees to back up (default: the whole namespace and every blob).
    #[arg(long, num_args = 1..)]
    paths: Vec<String>,
    /// Upload rate limit (e.g. 64MiB/s; 0: unlimited).
    #[arg(long, default_value = "64MiB/s", value_parser = parse_rate)]
    rate: u64,
    /// Complete points kept at the target; older ones and what only they need are removed
    /// (0: keep all).
    #[arg(long, default_value_t = 0)]
    keep: u32,
}

#[derive(Args)]
pub struct TargetArg {
    /// Target URL (default: the one `tomus backup enable` set).
    #[arg(long)]
    target: Option<String>,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// Where the points are: s3://bucket/prefix (AWS_* variables) or file:///absolute/dir.
    #[arg(long)]
    target: String,
    /// The point: its id, or a time (Unix ms or RFC 3339: the newest point taken at or
    /// before it). Default: the newest point.
    #[arg(long)]
    at: Option<String>,
    /// A new cluster data directory to build (must not exist or be empty).
    #[arg(long, conflicts_with_all = ["path", "to"])]
    data: Option<PathBuf>,
    /// Providers of the restored cluster (as `tomus up --providers`).
    #[arg(long, default_value_t = 4)]
    providers: usize,
    /// A file of the point to restore into the running cluster (at --to).
    #[arg(long, requires = "to")]
    path: Option<String>,
    /// Where the restored file goes (a new path).
    #[arg(long, requires = "path")]
    to: Option<String>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 1h, 30m, 10s, 500ms"))?;
    let ms = match unit {
        "ms" => 1,
        "" | "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "invalid duration unit in {text:?} (ms, s, m, h, d)"
            ))
        }
    };
    Ok(Duration::from_millis(n.saturating_mul(ms)))
}

/// The target named on the command line, else the configured one.
async fn target_of(addr: &str, secret: Option<ClusterSecret>, arg: &TargetArg) -> Result<Target> {
    let url = match &arg.target {
        Some(t) => t.clone(),
        None => {
            let client = connect_client(addr, secret).await?;
            match service::config(&client).await? {
                Some(c) => c.target,
                None => {
                    bail!("no backup target configured: give --target or run `tomus backup enable`")
                }
            }
        }
    };
    Ok(Target::open(&url, 0)?)
}

pub async fn run(
    addr: &str,
    secret: Option<ClusterSecret>,
    json_out: bool,
    cmd: BackupCommand,
) -> Result<()> {
    match cmd {
        BackupCommand::Enable(a) => {
            let client = connect_client(addr, secret).await?;
            let config = Config {
                enabled: true,
                target: a.target,
                interval_ms: a.interval.as_millis() as u64,
                paths: a.paths,
                rate: a.rate,
                keep: a.keep,
                enabled_ms: tomus_backup::point::now_ms(),
            };
            service::set_config(&client, &config).await?;
            if json_out {
                outln!("{}", serde_json::to_string(&config)?)?;
            } else {
                outln!(
                    "backup enabled: {} every {:?}, rate {}",
                    config.target,
                    a.interval,
                    if config.rate == 0 {
                        "unlimited".into()
                    } else {
                        format!("{}/s", format_size(config.rate))
                    }
                )?;
            }
        }
        BackupCommand::Disable => {
            let client = connect_client(addr, secret).await?;
            let Some(mut config) = service::config(&client).await? else {
                bail!("backup is not configured");
            };
            config.enabled = false;
            service::set_config(&client, &config).await?;
            outln!("backup disabled")?;
        }
        BackupCommand::Now { wait, timeout } => {
            let client = connect_client(addr, secret).await?;
            match service::config(&client).await? {
                Some(c) if c.enabled => {}
                _ => bail!("backup is not enabled: run `tomus backup enable --target URL` first"),
            }
            let seq = service::request_now(&client).await?;
            if !wait {
                outln!("backup point requested (request {seq})")?;
                return Ok(());
            }
            let deadline = Instant::now() + Duration::from_secs(timeout);
            let mut last_error: Option<String>;
            loop {
                match service::status(&client).await {
                    Ok(st) if st.requests_done >= seq => {
                        if json_out {
                            outln!("{}", serde_json::to_string(&st)?)?;
                        } else {
                            outln!(
                                "point {} complete: {} uploaded",
                                st.last_point.unwrap_or_default(),
                                format_size(st.last_uploaded_bytes)
                            )?;
                        }
                        return Ok(());
                    }
                    Ok(st) => last_error = st.error,
                    Err(e) => last_error = Some(e.to_string()),
                }
                if Instant::now() > deadline {
                    bail!(
                        "the point is not complete after {timeout} s{}",
                        last_error.map(|e| format!(": {e}")).unwrap_or_default()
                    );
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        BackupCommand::Status => {
            let client = connect_client(addr, secret).await?;
            let st = service::status(&client).await?;
            let config = service::config(&client).await?;
            if json_out {
                outln!("{}", json!({"status": st, "config": config}))?;
            } else {
                outln!("state:       {}", st.state)?;
                if let Some(c) = &config {
                    outln!(
                        "target:      {} (every {} ms, enabled: {})",
                        c.target,
                        c.interval_ms,
                        c.enabled
                    )?;
                }
                outln!(
                    "last point:  {}",
                    st.last_point.as_deref().unwrap_or("none")
                )?;
                outln!(
                    "uploaded:    {} (last point)",
                    format_size(st.last_uploaded_bytes)
                )?;
                if st.state == "running" {
                    outln!(
                        "progress:    {}/{} chunks, {}",
                        st.chunks_done,
                        st.chunks_total,
                        format_size(st.bytes_uploaded)
                    )?;
                }
                if let Some(e) = &st.error {
                    outln!("error:       {e}")?;
                }
                if let Some(w) = &st.warning {
                    outln!("warning:     {w}")?;
                }
            }
        }
        BackupCommand::List(t) => {
            let target = target_of(addr, secret, &t).await?;
            let mut rows = Vec::new();
            for id in list_points(&target).await? {
                let m = read_point(&target, &id).await?;
                let versions: usize = m.blobs.iter().map(|b| b.versions.len()).sum();
                rows.push(
                    json!({"point": m.id, "taken_ms": m.taken_ms, "blobs": m.blobs.len(),
                    "versions": versions, "logical_bytes": m.logical_bytes,
                    "uploaded_bytes": m.uploaded_bytes, "unreadable": m.unreadable}),
                );
            }
            if json_out {
                outln!("{}", serde_json::Value::Array(rows))?;
            } else {
                outln!(
                    "{:<16}  {:>6}  {:>8}  {:>10}  {:>10}",
                    "POINT",
                    "BLOBS",
                    "VERSIONS",
                    "SIZE",
                    "UPLOADED"
                )?;
                for r in rows {
                    outln!(
                        "{:<16}  {:>6}  {:>8}  {:>10}  {:>10}",
                        r["point"].as_str().unwrap_or_default(),
                        r["blobs"],
                        r["versions"],
                        format_size(r["logical_bytes"].as_u64().unwrap_or(0)),
                        format_size(r["uploaded_bytes"].as_u64().unwrap_or(0))
                    )?;
                }
            }
        }
        BackupCommand::Verify { point, target } => {
            let target = target_of(addr, secret, &target).await?;
            let id = choose_point(&target, point.as_deref()).await?;
            let report = verify::verify(&target, &id).await?;
            if json_out {
                outln!("{}", serde_json::to_string(&report)?)?;
            } else {
                outln!(
                    "point {}: {} chunk objects ({}), {} version records",
                    report.point,
                    report.chunks,
                    format_size(report.bytes),
                    report.versions
                )?;
                for m in &report.missing {
                    outln!("missing: {m}")?;
                }
                for c in &report.corrupt {
                    outln!("corrupt: {c}")?;
                }
            }
            if !report.ok() {
                return Err(tomus_wire::Error::corrupt(format!(
                    "point {}: {} missing and {} corrupt objects",
                    report.point,
                    report.missing.len(),
                    report.corrupt.len()
                ))
                .into());
            }
        }
        BackupCommand::Restore(a) => {
            let target = Target::open(&a.target, 0)?;
            let id = choose_point(&target, a.at.as_deref()).await?;
            let done = match (&a.data, &a.path, &a.to) {
                (Some(dir), None, None) => restore_data_dir(&target, &id, dir, a.providers).await?,
                (None, Some(path), Some(to)) => {
                    let client = connect_client(addr, secret).await?;
                    restore::restore_file(&client, &target, &id, path, to).await?
                }
                _ => bail!("give --data DIR (a new cluster) or --path P --to Q (one file)"),
            };
            if json_out {
                outln!("{}", serde_json::to_string(&done)?)?;
            } else {
                outln!(
                    "restored point {}: {} blobs ({} files), {} versions, {}",
                    done.point,
                    done.blobs,
                    done.files,
                    done.versions,
                    format_size(done.bytes)
                )?;
                if done.memory_on_disk > 0 {
                    outln!(
                        "{} blobs of the memory storage class are on disk in the restored \
                         cluster (a memory class holds nothing once its providers restart)",
                        done.memory_on_disk
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Builds a cluster in the new directory `dir` from point `id`: an embedded cluster is
/// started there, the point replayed into it, and the cluster stopped cleanly.
async fn restore_data_dir(
    target: &Target,
    id: &str,
    dir: &std::path::Path,
    providers: usize,
) -> Result<restore::Restored> {
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} is not empty: a restore builds a new cluster",
            dir.display()
        );
    }
    let spec = ClusterSpec::new(dir, providers.max(1));
    let mut cluster = EmbeddedCluster::start(&Launcher::current()?, spec)?;
    let client = connect_client(&cluster.addr, None).await?;
    let done = restore::restore_cluster(&client, target, id).await;
    cluster.stop(Duration::from_secs(10));
    Ok(done?)
}
