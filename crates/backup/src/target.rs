//! A backup target: an object store named by a URL, through the `object_store` crate.
//!
//! - `s3://bucket/prefix`: any S3-compatible endpoint. Credentials, region and endpoint come
//!   from the usual AWS environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_REGION`, `AWS_ENDPOINT_URL`; an `http://` endpoint is allowed, for a local server);
//!   without `AWS_ACCESS_KEY_ID`, the keys come from the AWS shared credentials file
//!   (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`; profile `AWS_PROFILE`).
//!   Requests are path-style unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`.
//! - `az://container/prefix` (and the other Azure schemes) and `gs://bucket/prefix`: Azure
//!   Blob and Google Cloud Storage, configured from their environment (see [`crate::cloud`]).
//! - `file:///absolute/dir`: a local (or mounted) directory.
//!
//! Uploads wait on a token bucket (`--rate`), and count what they send so tests and the
//! status can say how many bytes a point cost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use tomus_wire::{Error, ErrorKind, Result};

use crate::throttle::Throttle;

pub struct Target {
    pub url: String,
    store: Arc<dyn ObjectStore>,
    /// The prefix every object name goes under (no leading or trailing `/`).
    prefix: String,
    throttle: Throttle,
    uploaded: AtomicU64,
}

/// An object store failure as a tomus error: unreachable or refused targets are
/// `Unavailable` (the service retries), a missing object `NotFound`.
fn store_err(what: &str, e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { .. } => Error::not_found(format!("{what}: {e}")),
        _ => Error::unavailable(format!("backup target: {what}: {e}")),
    }
}

/// A few quick retries: the service retries whole points with its own back-off and says so
/// in its status, instead of one request retrying for minutes.
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(15),
        ..Default::default()
    }
}

impl Target {
    /// Opens the target `url`; uploads go at most `rate` bytes per second (0: unlimited).
    pub fn open(url: &str, rate: u64) -> Result<Self> {
        let (store, prefix): (Arc<dyn ObjectStore>, String) =
            if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(Error::invalid(format!("{url}: no bucket named")));
                }
                let mut builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry());
                if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
                    if let Some(keys) = shared_credentials()? {
                        builder = builder
                            .with_access_key_id(keys.access_key_id)
                            .with_secret_access_key(keys.secret_access_key);
                        if let Some(token) = keys.session_token {
                            builder = builder.with_token(token);
                        }
                    }
                }
                let endpoint = std::env::var("AWS_ENDPOINT_URL")
                    .or_else(|_| std::env::var("AWS_ENDPOINT"))
                    .ok();
                if let Some(endpoint) = endpoint {
                    // A local S3 server is plain HTTP; the endpoint says so explicitly.
                    builder = builder
                        .with_allow_http(endpoint.starts_with("http://"))
                        .with_endpoint(endpoint);
                }
                let s3 = builder
                    .build()
                    .map_err(|e| Error::invalid(format!("{url}: {e}")))?;
                (Arc::new(s3), prefix.trim_matches('/').to_string())
            } else if let Some(dir) = url.strip_prefix("file://") {
                if !dir.starts_with('/') {
                    return Err(Error::invalid(format!(
                        "{url}: a file:// target names an absolute directory (file:///dir)"
                    )));
                }
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::invalid(format!("{url}: cannot create {dir}: {e}")))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| Error::invalid(format!("{url}: {e}")))?;
                (Arc::new(fs), String::new())
            } else if url.starts_with("gs://") {
                crate::cloud::gcs(url, retry())?
            } else if let Some(scheme) = crate::cloud::AZURE_SCHEMES
                .into_iter()
                .find(|s| url.strip_prefix(s).is_some_and(|r| r.starts_with("://")))
            {
                crate::cloud::azure(url, scheme, retry())?
            } else {
                return Err(Error::invalid(format!(
                    "{url}: unsupported target (use s3://bucket/prefix, az://container/prefix, \
                     gs://bucket/prefix or file:///absolute/dir)"
                )));
            };
        Ok(Target {
            url: url.to_string(),
            store,
            prefix,
            throttle: Throttle::new(rate),
            uploaded: AtomicU64::new(0),
        })
    }

    fn path(&self, name: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.prefix))
        }
    }

    /// `name` relative to the prefix, from a full object path.
    fn relative(&self, path: &Path) -> String {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            full.to_string()
        } else {
            full.strip_prefix(&self.prefix)
                .map(|s| s.trim_start_matches('/'))
                .unwrap_or(full)
                .to_string()
        }
    }

    /// Bytes uploaded through this handle so far.
    pub fn uploaded(&self) -> u64 {
        self.uploaded.load(Ordering::Relaxed)
    }

    /// Stores `data` as `name` (replacing any object there), at the throttled rate.
    pub async fn put(&self, name: &str, data: Bytes) -> Result<()> {
        self.throttle.take(data.len() as u64).await;
        let len = data.len() as u64;
        self.store
            .put(&self.path(name), PutPayload::from(data))
            .await
            .map_err(|e| store_err(&format!("put {name}"), e))?;
        self.uploaded.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    pub async fn get(&self, name: &str) -> Result<Bytes> {
        let r = self
            .store
            .get(&self.path(name))
            .await
            .map_err(|e| store_err(&format!("get {name}"), e))?;
        r.bytes()
            .await
            .map_err(|e| store_err(&format!("get {name}"), e))
    }

    /// Bytes `[start, end)` of object `name`.
    pub async fn get_range(&self, name: &str, start: u64, end: u64) -> Result<Bytes> {
        self.store
            .get_range(&self.path(name), start..end)
            .await
            .map_err(|e| store_err(&format!("get {name} [{start}, {end})"), e))
    }

    /// Names (relative to the prefix) and sizes of the objects under `dir`.
    pub async fn list(&self, dir: &str) -> Result<Vec<(String, u64)>> {
        let under = self.path(dir);
        let metas: Vec<_> = self
            .store
            .list(Some(&under))
            .try_collect()
            .await
            .map_err(|e| store_err(&format!("list {dir}"), e))?;
        Ok(metas
            .into_iter()
            .map(|m| (self.relative(&m.location), m.size))
            .collect())
    }

    pub async fn delete(&self, name: &str) -> Result<()> {
        match self.store.delete(&self.path(name)).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_err(&format!("delete {name}"), e)),
        }
    }
}

/// Keys of one profile of an AWS shared credentials file.
#[derive(Debug, PartialEq, Eq)]
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// The keys of profile `AWS_PROFILE` (default `default`) in the AWS shared credentials file:
/// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials` if it exists. `None` when there
/// is no such file; an error when the named file cannot be read or lacks the profile.
pub fn shared_credentials() -> Result<Option<Keys>> {
    let explicit = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE");
    let path = match &explicit {
        Some(p) => std::path::PathBuf::from(p),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::Path::new(&home).join(".aws/credentials"),
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if explicit.is_none() && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => {
            return Err(Error::invalid(format!(
                "AWS credentials file {}: {e}",
                path.display()
            )))
        }
    };
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    match parse_credentials(&text, &profile) {
        Some(k) => Ok(Some(k)),
        None if explicit.is_none() => Ok(None),
        None => Err(Error::invalid(format!(
            "AWS credentials file {}: no profile [{profile}] with aws_access_key_id and \
             aws_secret_access_key",
            path.display()
        ))),
    }
}

/// The keys of `[profile]` in the INI text of an AWS shared credentials file.
pub fn parse_credentials(text: &str, profile: &str) -> Option<Keys> {
    let mut section = String::new();
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        if section != profile {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().to_string();
            match k.trim().to_ascii_lowercase().as_str() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    Some(Keys {
        access_key_id: id?,
        secret_access_key: secret?,
        session_token: token,
    })
}

/// Whether `e` may pass with time (the target or the cluster unreachable): the service
/// retries these, and says so in its status.
pub fn transient(e: &Error) -> bool {
    matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Retry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_profile_asked_for() {
        let text = "# keys\n[default]\naws_access_key_id = AK1\naws_secret_access_key=SK1\n\n\
                    [other]\n aws_access_key_id = AK2 \n aws_secret_access_key = SK2\n\
                    aws_session_token = T2\n";
        assert_eq!(
            parse_credentials(text, "default"),
            Some(Keys {
                access_key_id: "AK1".into(),
                secret_access_key: "SK1".into(),
                session_token: None
            })
        );
        let other = parse_credentials(text, "other").unwrap();
        assert_eq!(
            (other.access_key_id.as_str(), other.session_token.as_deref()),
            ("AK2", Some("T2"))
        );
        assert_eq!(parse_credentials(text, "missing"), None);
        assert_eq!(
            parse_credentials("[default]\naws_access_key_id=x\n", "default"),
            None
        );
    }
}
