//! `tomus s3`: the S3-compatible gateway as a command, alone or inside `tomus up --s3`.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::Args;
use tomus_client::{ClientOptions, CreateOptions};
use tomus_s3::{ConnectionLimits, GatewayConfig, Keys};
use tomus_wire::ClusterSecret;

use crate::size::parse_size;

#[derive(Args, Clone, Debug)]
pub struct S3Args {
    /// Address to serve S3 on (port 0: any free port). A non-loopback address needs the
    /// cluster secret.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: String,
    /// File of access keys, one `ACCESS_KEY SECRET` per line (added to the pair in
    /// TOMUS_S3_ACCESS_KEY / TOMUS_S3_SECRET_KEY).
    #[arg(long, value_name = "FILE")]
    pub keys: Option<PathBuf>,
    /// Also accept unsigned (anonymous) requests.
    #[arg(long)]
    pub anonymous: bool,
    /// Chunk size of the blobs of new objects.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub chunk_size: u64,
    /// Replicas of the chunks of new objects.
    #[arg(long, default_value_t = 1)]
    pub replication: u32,
    /// Serve Prometheus metrics (`GET /metrics`) over HTTP on this address (off by default;
    /// a non-loopback address needs the cluster secret).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Connections served at once (default: from the open-file limit, at most 4096). At the
    /// cap, the oldest connections are closed once idle to make room.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Close a connection that starts no request for this long; a request head must arrive
    /// within it too.
    #[arg(long, default_value_t = 30_000)]
    pub idle_timeout_ms: u64,
}

/// Access keys from the environment and `file`.
pub fn load_keys(file: Option<&std::path::Path>) -> Result<Keys> {
    let mut keys = Keys::from_env().map_err(|e| anyhow!(e))?;
    if let Some(path) = file {
        for (access, secret) in Keys::load(path).map_err(|e| anyhow!(e))?.pairs() {
            keys.insert(access, secret);
        }
    }
    Ok(keys)
}

/// The gateway configuration for the manager at `manager`.
pub fn config(manager: &str, secret: Option<ClusterSecret>, a: &S3Args) -> Result<GatewayConfig> {
    let keys = load_keys(a.keys.as_deref())?;
    if keys.is_empty() && !a.anonymous {
        return Err(anyhow!(
            "no S3 access keys: set {} and {}, pass a keys file, or allow unsigned requests \
             with --anonymous",
            tomus_s3::ACCESS_KEY_ENV,
            tomus_s3::SECRET_KEY_ENV
        ));
    }
    Ok(GatewayConfig {
        listen: a.listen.clone(),
        manager: manager.to_string(),
        client: ClientOptions {
            secret,
            ..ClientOptions::default()
        },
        keys,
        anonymous: a.anonymous,
        files: CreateOptions {
            chunk_size: a.chunk_size,
            replication: a.replication,
            exclusive: false,
        },
        metrics_listen: a.metrics_addr.clone(),
        limits: ConnectionLimits {
            max_connections: a
                .max_connections
                .unwrap_or_else(|| ConnectionLimits::default().max_connections)
                .max(1),
            idle_timeout: std::time::Duration::from_millis(a.idle_timeout_ms.max(100)),
        },
    })
}
