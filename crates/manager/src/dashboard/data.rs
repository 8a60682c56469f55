//! What the dashboard reads from stored data rather than from the manager's own state: the
//! bytes of any version of a file (`/download`), where each chunk of a version lives
//! (`/chunks`), the backup and replication services' status and the compute jobs' task
//! records. All of it
//! goes through an ordinary client of this very manager (the data lives on providers, and
//! version metadata in their DHT), connected on first use with the cluster secret.
//!
//! Downloads stream: a task reads the version a window at a time and hands each window to
//! the HTTP body, so a large file never sits whole in the manager's memory.

use std::net::SocketAddr;

use bytes::Bytes;
use tokio::sync::{mpsc, OnceCell};
use tomus_client::{Client, ClientOptions};
use tomus_metadata::Segment;
use tomus_metrics::Response;
use tomus_wire::{ClusterSecret, Error, ErrorKind, FsEntry, ProviderInfo, Result, VersionInfo};

/// Bytes a download reads from the providers at a time.
const WINDOW: u64 = 4 << 20;
/// Windows read ahead of what the HTTP client has taken.
const AHEAD: usize = 2;
/// Where `tomus.compute` keeps the task records of its jobs (one JSON-lines file per job).
pub(super) const JOBS_DIR: &str = ".compute/jobs";
/// The backup service's status file (see `tomus_backup::service`).
const BACKUP_STATUS: &str = ".tomus-backup/status.json";
/// The replication service's status file (see `tomus_sites::service`).
const SITES_STATUS: &str = ".tomus-sites/status.json";

/// A client of this manager, made on first use.
pub(super) struct Reader {
    addr: String,
    secret: Option<ClusterSecret>,
    client: OnceCell<Client>,
}

impl Reader {
    /// A reader of the manager listening on `local` (a wildcard address is reached on
    /// loopback).
    pub(super) fn new(local: SocketAddr, secret: Option<ClusterSecret>) -> Self {
        let mut addr = local;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        Reader {
            addr: addr.to_string(),
            secret,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<&Client> {
        self.client
            .get_or_try_init(|| {
                let options = ClientOptions {
                    secret: self.secret.clone(),
                    ..ClientOptions::default()
                };
                Client::connect(&self.addr, options)
            })
            .await
    }

    /// A file of the user's namespace (reserved names are not served) and one of its
    /// versions (`None`: the latest), which must be published.
    async fn version(
        &self,
        path: &str,
        version: Option<u64>,
    ) -> Result<(FsEntry, tomus_client::Blob, VersionInfo)> {
        // tomus's own files (S3 gateway settings, backup configuration) are not for browsers.
        if tomus_client::namespace::is_reserved(path) {
            return Err(Error::not_found(format!(
                "no file /{}",
                path.trim_matches('/')
            )));
        }
        let client = self.client().await?;
        let (entry, blob) = client.namespace().open(path).await?;
        let info = blob.stat(version).await.map_err(|e| match e.kind {
            // A version that is not (or no longer) readable is, to a browser, not there.
            ErrorKind::VersionNotPublished | ErrorKind::VersionAborted => {
                Error::not_found(e.message)
            }
            _ => e,
        })?;
        Ok((entry, blob, info))
    }

    /// The bytes of `version` of the file at `path`, streamed, as an attachment.
    pub(super) async fn download(&self, path: &str, version: Option<u64>) -> Result<Response> {
        let (entry, blob, info) = self.version(path, version).await?;
        let (tx, rx) = mpsc::channel(AHEAD);
        let size = info.size;
        tokio::spawn(async move {
            let mut offset = 0;
            while offset < size {
                let n = WINDOW.min(size - offset) as usize;
                let mut buf = vec![0u8; n];
                let piece = match blob.read_version_into(&info, offset, &mut buf).await {
                    Ok(()) => Ok(Bytes::from(buf)),
                    Err(e) => {
                        tracing::warn!("dashboard download of blob {}: {e}", info.blob);
                        Err(std::io::Error::other(e.message))
                    }
                };
                let failed = piece.is_err();
                // The browser went away, or the read failed: stop either way.
                if tx.send(piece).await.is_err() || failed {
                    return;
                }
                offset += n as u64;
            }
        });
        let name = entry.path.rsplit('/').next().unwrap_or("download");
        let mut resp = http::Response::new(tomus_metrics::streamed(rx));
        let headers = resp.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(size));
        if let Ok(v) = http::HeaderValue::from_str(&disposition(name)) {
            headers.insert(http::header::CONTENT_DISPOSITION, v);
        }
        Ok(resp)
    }

    /// The version's record and its pieces in data order (chunk pieces and holes), with the
    /// providers holding each chunk as the manager knows them.
    pub(super) async fn chunks(
        &self,
        path: &str,
        version: Option<u64>,
    ) -> Result<(FsEntry, VersionInfo, Vec<Segment>)> {
        let (entry, blob, info) = self.version(path, version).await?;
        let segments = blob.segments_of(&info).await?;
        Ok((entry, info, segments))
    }

    /// The backup service's status as it wrote it (`None`: it never did, backup is off).
    pub(super) async fn backup_status(&self) -> Result<Option<serde_json::Value>> {
        self.status_file(BACKUP_STATUS).await
    }

    /// The replication service's status as it wrote it: its rules' lag (`None`: it never
    /// did, no subtree is replicated).
    pub(super) async fn sites_status(&self) -> Result<Option<serde_json::Value>> {
        self.status_file(SITES_STATUS).await
    }

    /// The JSON of a service's status file of the reserved namespace (`None`: no file).
    async fn status_file(&self, path: &str) -> Result<Option<serde_json::Value>> {
        match self.read_whole(path, true).await {
            Ok(data) => serde_json::from_slice(&data)
                .map(Some)
                .map_err(|e| Error::corrupt(format!("/{path}: {e}"))),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The compute jobs that left task records, newest first.
    pub(super) async fn jobs(&self) -> Result<Vec<FsEntry>> {
        let client = self.client().await?;
        let mut entries = match client.namespace().list(JOBS_DIR).await {
            Ok(e) => e,
            Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        entries.retain(|e| e.path.ends_with(".jsonl"));
        entries.sort_by_key(|e| std::cmp::Reverse(e.blob.as_ref().map_or(0, |b| b.modified_ms)));
        Ok(entries)
    }

    /// The task records of job `id`: one JSON object per line.
    pub(super) async fn job(&self, id: u64) -> Result<Vec<serde_json::Value>> {
        let data = self
            .read_whole(&format!("{JOBS_DIR}/{id}.jsonl"), false)
            .await?;
        // A line cut short by a driver that died mid-append is skipped, not an error.
        Ok(data
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect())
    }

    async fn read_whole(&self, path: &str, internal: bool) -> Result<Vec<u8>> {
        let client = self.client().await?;
        let ns = if internal {
            client.internal_namespace()
        } else {
            client.namespace()
        };
        let (_, blob) = ns.open(path).await?;
        let info = blob.stat(None).await?;
        if info.size > 64 << 20 {
            return Err(Error::invalid(format!(
                "/{path} is too large to show ({} bytes)",
                info.size
            )));
        }
        let mut buf = vec![0u8; info.size as usize];
        blob.read_version_into(&info, 0, &mut buf).await?;
        Ok(buf)
    }
}

/// The providers holding a chunk, as `id (address)` with each one's state.
pub(super) fn holders(replicas: &[u32], providers: &[(ProviderInfo, u64)]) -> Vec<String> {
    replicas
        .iter()
        .map(|id| match providers.iter().find(|(p, _)| p.id == *id) {
            Some((p, _)) if p.alive => format!("{} ({})", p.id, p.addr),
            Some((p, _)) => format!("{} ({}, down)", p.id, p.addr),
            None => format!("{id} (unknown)"),
        })
        .collect()
}

/// `Content-Disposition` of a download named `name`: a plain ASCII fallback and the exact
/// name in RFC 5987 form.
fn disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn disposition_quotes_safely() {
        assert_eq!(
            super::disposition("a \"b\".txt"),
            "attachment; filename=\"a _b_.txt\"; filename*=UTF-8''a%20%22b%22.txt"
        );
        assert_eq!(
            super::disposition("ü.bin"),
            "attachment; filename=\"_.bin\"; filename*=UTF-8''%C3%BC.bin"
        );
    }
}
