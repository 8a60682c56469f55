//! An S3-compatible gateway over a tomus cluster (`tomus s3`).
//!
//! Buckets are the top-level directories of the namespace and objects are the files below
//! them, so what `tomus fs` or fsspec writes is an object and back. Every PUT is one version
//! of the file's blob; ETag, content type and user metadata are attributes published with
//! that version. CopyObject and CompleteMultipartUpload compose new versions from existing
//! chunks without moving data. The protocol (routing, XML, SigV4) is the `s3s` crate's.

/// GetObjectAttributes.
mod attributes;
mod auth;
mod buckets;
mod checksums;
/// How a completion and an abort of one multipart upload end it one way.
mod claims;
mod conditional;
/// The gateway's connections: the cap, and letting idle ones go.
mod connections;
mod deletes;
mod errors;
mod hidden;
mod listing;
/// The MD5 of concurrent uploads, hashed side by side in SIMD lanes.
mod md5_lanes;
mod meta;
mod multipart;
mod objects;
/// S3 Express offset appends that lose, refused before their body moves.
mod offset_appends;
/// Which S3 operation a request is (the label of the gateway's metrics).
mod operations;
mod part_copy;
/// UploadPart and ListParts; a part that outlives its upload is removed.
mod parts;
mod paths;
mod server;
mod service;
mod unsupported;
mod urlenc;
mod version_ids;
mod versions;
/// Recycled read windows of streamed GETs.
mod windows;
mod writes;

use tokio::net::TcpListener;
use tomus_client::{Client, ClientOptions, CreateOptions};
use tomus_wire::{check_bind, Error, Result};

pub use auth::{Keys, ACCESS_KEY_ENV, SECRET_KEY_ENV};
pub use connections::ConnectionLimits;
pub use service::Gateway;

/// How to run a gateway.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// `host:port` to listen on (port 0: any free port).
    pub listen: String,
    /// The manager's address.
    pub manager: String,
    /// How to reach the cluster (its secret, timeouts).
    pub client: ClientOptions,
    /// Access keys whose signatures are accepted.
    pub keys: Keys,
    /// Also accept unsigned requests.
    pub anonymous: bool,
    /// Chunk size and replication of the files new objects create.
    pub files: CreateOptions,
    /// `host:port` to serve `GET /metrics` on over HTTP (`None`: no metrics server).
    pub metrics_listen: Option<String>,
    /// Connections held at once, and how long an idle one is kept.
    pub limits: ConnectionLimits,
}

/// Runs the gateway until the task is dropped. Sends the bound address on `ready` once it
/// accepts connections.
pub async fn run(
    config: GatewayConfig,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    if config.keys.is_empty() && !config.anonymous {
        return Err(Error::invalid(format!(
            "no S3 access keys: set {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, pass --keys FILE, \
             or allow unsigned requests with --anonymous"
        )));
    }
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", config.listen)))?;
    let local = listener.local_addr()?;
    check_bind(&local, config.client.secret.as_ref())?;
    let metrics = match &config.metrics_listen {
        Some(listen) => Some(tomus_metrics::bind(listen, config.client.secret.as_ref()).await?),
        None => None,
    };
    let client = Client::connect(&config.manager, config.client.clone()).await?;
    let gateway = Gateway::new(client, config.files);
    let mut builder = s3s::service::S3ServiceBuilder::new(gateway);
    if !config.keys.is_empty() {
        builder.set_auth(config.keys.clone());
        builder.set_access(auth::Access {
            anonymous: config.anonymous,
        });
    }
    // Without keys (only with --anonymous) there is no auth provider: s3s lets unsigned
    // requests through and refuses signed ones, whose signature nothing could check.
    let service = builder.build();
    tracing::info!(
        "S3 gateway listening on {local} for the cluster at {} ({} access keys{})",
        config.manager,
        config.keys.len(),
        if config.anonymous {
            ", anonymous allowed"
        } else {
            ""
        }
    );
    if let Some(http) = metrics {
        tracing::info!(
            "S3 gateway metrics on http://{}/metrics",
            http.local_addr()?
        );
        // Registered now so a scrape before the first request lists the families.
        let _ = tomus_metrics::s3();
        tokio::spawn(tomus_metrics::serve(
            http,
            config.client.secret.clone(),
            std::sync::Arc::new(tomus_metrics::MetricsOnly),
        ));
    }
    if let Some(tx) = ready {
        let _ = tx.send(local.to_string());
    }
    server::serve(listener, service, config.limits).await;
    Ok(())
}
