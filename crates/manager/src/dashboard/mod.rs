//! The manager's HTTP side (`--http-addr`): `/metrics` with the cluster-wide figures of the
//! providers' heartbeats and the maintenance service's reports, and the web dashboard.
//! The server itself (access rules included) is `tomus_metrics::http`.
//!
//! Pages: `/` (overview: providers, totals, a live chart of `/metrics`, repair, garbage
//! collection and backup progress, geo-replication lag per rule), `/fs?path=DIR` (a directory), `/file?path=FILE` (a file's
//! versions), `/chunks?path=FILE&version=N` (where each chunk of a version lives),
//! `/download?path=FILE&version=N` (the version's bytes), `/jobs` and `/job?id=N` (compute
//! jobs and one job's timeline of tasks per worker), and the two static files they use
//! (`/style.css`, `/chart.js`), compiled into the binary so it works offline.
//!
//! Access is `tomus_metrics::http`'s: with a cluster secret every request, downloads
//! included, must carry it; without one the server listens on loopback only.

/// Reads of stored data: downloads, chunk locations, backup and replication status, job
/// records.
mod data;
/// Compute jobs and their timelines.
mod jobs;
/// The HTML of every page.
mod pages;
/// Geo-replication (`tomus sites`) on the overview: each rule's lag and progress.
mod replication;

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use tomus_metrics::families::label;
use tomus_metrics::http::with_type;
use tomus_metrics::{Pages, Response};
use tomus_wire::{EntryKind, ErrorKind, ProviderState, Result};

use crate::service::ManagerService;

const STYLE: &str = include_str!("static/style.css");
const CHART: &str = include_str!("static/chart.js");
/// Entries a directory page shows at most.
const DIRECTORY_PAGE: u32 = 1000;

/// What the manager serves over HTTP.
pub struct ManagerPages {
    service: Arc<ManagerService>,
    reader: Arc<data::Reader>,
}

impl ManagerPages {
    /// The pages of the manager `service`, which listens for RPCs on `local` (the dashboard
    /// reads stored data through a client of it, with `secret`).
    pub fn new(
        service: Arc<ManagerService>,
        local: std::net::SocketAddr,
        secret: Option<tomus_wire::ClusterSecret>,
    ) -> Self {
        ManagerPages {
            service,
            reader: Arc::new(data::Reader::new(local, secret)),
        }
    }
}

/// A gauge's value (gauges are i64).
fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Pages for ManagerPages {
    fn before_scrape(&self) {
        let m = tomus_metrics::manager();
        let providers = self.service.registry.list_with_stored();
        let (mut stored, mut chunks, mut capacity, mut free) = (0u64, 0u64, 0u64, 0u64);
        for (p, bytes) in &providers {
            if p.alive {
                stored += bytes;
                chunks += p.chunks;
                capacity += p.capacity;
                free += p.free;
            }
        }
        for state in ProviderState::ALL {
            let n = providers.iter().filter(|(p, _)| p.state() == state).count();
            m.cluster_providers
                .get_or_create(&label("state", state.name()))
                .set(n as i64);
        }
        m.cluster_stored_bytes.set(clamp(stored));
        m.cluster_chunks.set(clamp(chunks));
        m.cluster_capacity_bytes.set(clamp(capacity));
        m.cluster_free_bytes.set(clamp(free));

        let (s, _) = self.service.maintenance_seen();
        m.repair_passes.observe(s.passes);
        m.repaired_chunks.observe(s.repaired_chunks);
        m.repaired_bytes.observe(s.repaired_bytes);
        m.gc_chunks.observe(s.gc_chunks);
        m.gc_bytes.observe(s.gc_bytes);
        m.gc_nodes.observe(s.gc_nodes);
        m.audits.observe(s.audits);
        let draining_bytes: u64 = s.draining.iter().map(|(_, b)| b).sum();
        let gauges = [
            ("under_replicated_chunks", s.under_replicated_chunks),
            ("under_replicated_bytes", s.under_replicated_bytes),
            ("lost_chunks", s.lost_chunks),
            (
                "repair_remaining_bytes",
                s.repair_total_bytes.saturating_sub(s.repair_done_bytes),
            ),
            ("unreferenced_bytes", s.unreferenced_bytes),
            ("pending_deletions", s.pending_deletions),
            ("draining_bytes", draining_bytes),
        ];
        for (what, v) in gauges {
            m.maintenance
                .get_or_create(&label("what", what))
                .set(clamp(v));
        }
    }

    fn get(&self, path: &str, query: &str) -> BoxFuture<'static, Option<Response>> {
        let service = self.service.clone();
        let reader = self.reader.clone();
        let path = path.to_string();
        let target = param(query, "path").unwrap_or_default();
        let version = param(query, "version");
        let id = param(query, "id");
        Box::pin(async move {
            let html = match path.as_str() {
                "/" => {
                    let providers = service.registry.list_with_stored();
                    let (maintenance, reported) = service.maintenance_seen();
                    let backup = reader.backup_status().await.map_err(|e| e.message);
                    let sites = reader.sites_status().await.map_err(|e| e.message);
                    let mut body = pages::overview(&providers, &maintenance, reported);
                    body.push_str(&pages::backup(&backup));
                    body.push_str(&replication::section(&sites));
                    Ok(pages::page("Cluster", &body))
                }
                "/fs" => blocking(move || browse(&service, &target)).await,
                "/file" => blocking(move || file(&service, &target)).await,
                "/chunks" => match number(version.as_deref()) {
                    Ok(v) => reader.chunks(&target, v).await.map(|(entry, info, segs)| {
                        let providers = service.registry.list_with_stored();
                        let title = format!("/{} · version {}", entry.path, info.version);
                        pages::page(&title, &pages::chunks(&entry, &info, &segs, &providers))
                    }),
                    Err(e) => Err(e),
                },
                "/download" => {
                    return Some(
                        match number(version.as_deref()) {
                            Ok(v) => reader.download(&target, v).await,
                            Err(e) => Err(e),
                        }
                        .unwrap_or_else(failure),
                    )
                }
                "/jobs" => reader
                    .jobs()
                    .await
                    .map(|entries| pages::page("Compute jobs", &jobs::list(&entries))),
                "/job" => match number(id.as_deref()) {
                    Ok(Some(id)) => reader.job(id).await.map(|records| {
                        pages::page(&format!("Job {id}"), &jobs::timeline(id, &records))
                    }),
                    Ok(None) => Err(tomus_wire::Error::invalid("which job? (/job?id=N)")),
                    Err(e) => Err(e),
                },
                "/style.css" => return Some(asset(STYLE, "text/css; charset=utf-8")),
                "/chart.js" => return Some(asset(CHART, "text/javascript; charset=utf-8")),
                _ => return None,
            };
            Some(match html {
                Ok(html) => with_type(
                    http::Response::new(tomus_metrics::full(html)),
                    "text/html; charset=utf-8",
                ),
                Err(e) => failure(e),
            })
        })
    }
}

/// An optional number parameter (a version, a job id).
fn number(value: Option<&str>) -> Result<Option<u64>> {
    value
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .map_err(|_| tomus_wire::Error::invalid(format!("not a number: {v:?}")))
        })
        .transpose()
}

/// Runs a namespace read (database transactions) off the async workers.
async fn blocking(op: impl FnOnce() -> Result<String> + Send + 'static) -> Result<String> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| tomus_wire::Error::internal(format!("dashboard task failed: {e}")))?
}

fn browse(service: &ManagerService, dir: &str) -> Result<String> {
    let entries = service.namespace.list(dir, false, None, DIRECTORY_PAGE)?;
    // Registered files' sizes and holders are in their records, not their entries.
    let mut registered = std::collections::HashMap::new();
    for e in entries.iter().filter(|e| e.kind == EntryKind::Registered) {
        match service.namespace.registered(&e.path) {
            Ok((_, stored)) => {
                registered.insert(e.path.clone(), (stored.size, stored.holders.len()));
            }
            // Deleted since the listing: shown without its record.
            Err(err) if err.kind == ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
    }
    let title = format!("/{}", dir.trim_matches('/'));
    Ok(pages::page(
        &title,
        &pages::directory(dir, &entries, &registered),
    ))
}

fn file(service: &ManagerService, path: &str) -> Result<String> {
    let entry = service.namespace.stat(path)?;
    let Some(blob) = (entry.kind == EntryKind::File)
        .then_some(entry.blob.as_ref())
        .flatten()
    else {
        return browse(service, path);
    };
    // One more than shown tells whether older versions exist.
    let mut versions = service
        .versions
        .newest_versions(blob.id, pages::VERSIONS_SHOWN + 1)?;
    let older = versions.versions.len() > pages::VERSIONS_SHOWN;
    versions.versions.truncate(pages::VERSIONS_SHOWN);
    Ok(pages::page(
        &format!("/{}", entry.path),
        &pages::file(&entry, &versions, older),
    ))
}

/// The page of an error: 404 for what does not exist, 400 for a bad request (a path of the
/// wrong kind: a file's given to the directory browser, a directory's to the download), 403,
/// 503, and 500 for the rest.
fn failure(e: tomus_wire::Error) -> Response {
    use http::StatusCode;
    let status = match e.kind {
        ErrorKind::NotFound | ErrorKind::VersionNotPublished | ErrorKind::VersionAborted => {
            StatusCode::NOT_FOUND
        }
        ErrorKind::InvalidArgument
        | ErrorKind::OutOfRange
        | ErrorKind::IsADirectory
        | ErrorKind::NotADirectory => StatusCode::BAD_REQUEST,
        ErrorKind::AuthFailed => StatusCode::FORBIDDEN,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut resp = with_type(
        http::Response::new(tomus_metrics::full(pages::page(
            "Error",
            &pages::esc(&e.message),
        ))),
        "text/html; charset=utf-8",
    );
    *resp.status_mut() = status;
    resp
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    with_type(
        http::Response::new(tomus_metrics::full(Bytes::from_static(body.as_bytes()))),
        content_type,
    )
}

/// The value of `key` in a query string, percent-decoded (`+` is a space).
fn param(query: &str, key: &str) -> Option<String> {
    let raw = query
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn hex(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    #[test]
    fn decodes_query_parameters() {
        assert_eq!(
            super::param("path=a%20b%2Fc&x=1", "path").as_deref(),
            Some("a b/c")
        );
        assert_eq!(super::param("x=1&path=d+e", "path").as_deref(), Some("d e"));
        assert_eq!(super::param("path=100%", "path").as_deref(), Some("100%"));
        assert_eq!(super::param("paths=1", "path"), None);
    }
}
