//! `tomus up`: a manager and N providers as processes on loopback (the embedded cluster),
//! optionally the S3 gateway in this process, in the foreground until Ctrl-C.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use tomus_wire::ClusterSecret;

use super::runtime;
use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
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
}

pub(super) fn up(addr: &str, secret: Option<ClusterSecret>, a: UpArgs) -> Result<()> {
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
    let rt = runtime()?;
    rt.block_on(async {
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
                    if let Some(what) = cluster.exited() {
                        anyhow::bail!("{what}; see the logs in {}", cluster.data_dir().join("logs").display());
                    }
                }
            }
        }
    })
}
