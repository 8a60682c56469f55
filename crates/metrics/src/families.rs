//! The metric families, in one group per server role. A group registers its families with
//! the process's registry the first time it is used, so a provider's `/metrics` carries no
//! empty manager families and the other way round. Names follow Prometheus conventions
//! (`tomus_` prefix, base units, counters end in `_total`: the encoder adds that suffix to
//! the names registered here). docs/metrics.md has the table of every family.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tomus_wire::{RequestObserver, Served};

/// Label pairs of one series.
pub type Labels = Vec<(&'static str, String)>;
pub type Counters = Family<Labels, Counter>;
pub type Gauges = Family<Labels, Gauge>;
pub type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Latency buckets: 100 µs to ~6.5 s, doubling.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 17))
}

/// Group-commit sizes: 1 to 1024 items, doubling.
fn batch_sizes() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

fn counters() -> Counters {
    Family::default()
}

fn gauges() -> Gauges {
    Family::default()
}

fn histograms(make: fn() -> Histogram) -> Histograms {
    Family::new_with_constructor(make)
}

/// One label pair.
pub fn label(name: &'static str, value: impl Into<String>) -> Labels {
    vec![(name, value.into())]
}

/// A counter fed from a running total kept elsewhere (the maintenance service's totals,
/// which the manager receives): it adds what the total grew by. A total that went down
/// (its keeper restarted from zero) counts from zero again.
#[derive(Default)]
pub struct TotalCounter {
    pub counter: Counter,
    last: AtomicU64,
}

impl TotalCounter {
    pub fn observe(&self, total: u64) {
        let last = self.last.swap(total, Ordering::Relaxed);
        let grew = if total >= last { total - last } else { total };
        if grew > 0 {
            self.counter.inc_by(grew);
        }
    }
}

/// Registers a group once and hands it out.
fn group<T>(cell: &'static OnceLock<T>, build: impl FnOnce(&mut Registry) -> T) -> &'static T {
    cell.get_or_init(|| build(&mut crate::registry()))
}

/// Requests every tomus RPC server (manager, provider) answers.
pub struct RpcMetrics {
    /// `tomus_rpc_requests_total{service, kind, outcome}`: outcome is `ok` or the error kind.
    pub requests: Counters,
    /// `tomus_rpc_request_duration_seconds{service, kind}`.
    pub duration: Histograms,
    /// `tomus_rpc_received_bytes_total{service}` / `tomus_rpc_sent_bytes_total{service}`:
    /// frame bytes (headers and bodies).
    pub received_bytes: Counters,
    pub sent_bytes: Counters,
}

pub fn rpc() -> &'static RpcMetrics {
    static CELL: OnceLock<RpcMetrics> = OnceLock::new();
    group(&CELL, |r| {
        let m = RpcMetrics {
            requests: counters(),
            duration: histograms(latency),
            received_bytes: counters(),
            sent_bytes: counters(),
        };
        r.register(
            "tomus_rpc_requests",
            "Requests answered, by service, request kind and outcome (ok or the error kind)",
            m.requests.clone(),
        );
        r.register(
            "tomus_rpc_request_duration_seconds",
            "Time from a request's first byte to its answer written, by service and kind",
            m.duration.clone(),
        );
        r.register(
            "tomus_rpc_received_bytes",
            "Request bytes received (frame headers and bodies)",
            m.received_bytes.clone(),
        );
        r.register(
            "tomus_rpc_sent_bytes",
            "Answer bytes sent (frame headers and bodies)",
            m.sent_bytes.clone(),
        );
        m
    })
}

/// Feeds [`RpcMetrics`] from the wire server ([`tomus_wire::LoadGauge::observed`]).
pub struct RpcObserver;

impl RpcObserver {
    pub fn shared() -> Arc<dyn RequestObserver> {
        Arc::new(RpcObserver)
    }
}

impl RequestObserver for RpcObserver {
    fn served(&self, r: &Served<'_>) {
        let m = rpc();
        let outcome = r
            .failure
            .map_or_else(|| "ok".to_string(), |e| format!("{:?}", e.kind));
        m.requests
            .get_or_create(&vec![
                ("service", r.service.to_string()),
                ("kind", r.kind.to_string()),
                ("outcome", outcome),
            ])
            .inc();
        m.duration
            .get_or_create(&vec![
                ("service", r.service.to_string()),
                ("kind", r.kind.to_string()),
            ])
            .observe(r.elapsed.as_secs_f64());
        let service = label("service", r.service);
        m.received_bytes.get_or_create(&service).inc_by(r.bytes_in);
        m.sent_bytes.get_or_create(&service).inc_by(r.bytes_out);
    }
}

/// A provider's chunks, disk and logs.
pub struct ProviderMetrics {
    /// `tomus_provider_written_bytes_total` / `tomus_provider_written_chunks_total`: chunk
    /// data stored (new chunks: from clients, repair and rebalancing).
    pub written_bytes: Counter,
    pub written_chunks: Counter,
    /// `tomus_provider_read_bytes_total` / `tomus_provider_read_chunks_total`: chunk data
    /// served.
    pub read_bytes: Counter,
    pub read_chunks: Counter,
    /// `tomus_provider_deleted_chunks_total`: chunks deleted (garbage collection, moves).
    pub deleted_chunks: Counter,
    /// `tomus_provider_stored_chunks{tier}` / `tomus_provider_stored_bytes{tier}`: tier is
    /// `disk` (everything stored) or `memory` (the cache of recent chunks).
    pub stored_chunks: Gauges,
    pub stored_bytes: Gauges,
    /// `tomus_provider_capacity_bytes` / `tomus_provider_free_bytes`: the data directory's
    /// file system.
    pub capacity_bytes: Gauge,
    pub free_bytes: Gauge,
    /// `tomus_provider_failed`: 1 once the data directory was removed or replaced under the
    /// running provider (it then takes no data; see `tomus status`), else 0.
    pub failed: Gauge,
    /// `tomus_provider_group_commit_batch_size{log}`: records one group commit carried.
    pub group_commit_batch: Histograms,
    /// `tomus_provider_group_commit_duration_seconds{log}`: one group's write and sync.
    pub group_commit_duration: Histograms,
    /// `tomus_provider_fsync_duration_seconds{file}`: one fdatasync (`log` or `chunk`).
    pub fsync_duration: Histograms,
    /// `tomus_provider_quarantined_chunks_total`: copies found corrupt and set aside.
    pub quarantined_chunks: Counter,
    /// `tomus_provider_scrubbed_chunks_total` / `..._bytes_total`: verified by scrub steps.
    pub scrubbed_chunks: Counter,
    pub scrubbed_bytes: Counter,
}

pub fn provider() -> &'static ProviderMetrics {
    static CELL: OnceLock<ProviderMetrics> = OnceLock::new();
    group(&CELL, |r| {
        let m = ProviderMetrics {
            written_bytes: Counter::default(),
            written_chunks: Counter::default(),
            read_bytes: Counter::default(),
            read_chunks: Counter::default(),
            deleted_chunks: Counter::default(),
            stored_chunks: gauges(),
            stored_bytes: gauges(),
            capacity_bytes: Gauge::default(),
            free_bytes: Gauge::default(),
            failed: Gauge::default(),
            group_commit_batch: histograms(batch_sizes),
            group_commit_duration: histograms(latency),
            fsync_duration: histograms(latency),
            quarantined_chunks: Counter::default(),
            scrubbed_chunks: Counter::default(),
            scrubbed_bytes: Counter::default(),
        };
        r.register(
            "tomus_provider_scrubbed_chunks",
            "Chunks verified by scrub steps",
            m.scrubbed_chunks.clone(),
        );
        r.register(
            "tomus_provider_scrubbed_bytes",
            "Chunk bytes verified by scrub steps",
            m.scrubbed_bytes.clone(),
        );
        r.register(
            "tomus_provider_written_bytes",
            "Chunk bytes stored (new chunks from clients, repair, moves)",
            m.written_bytes.clone(),
        );
        r.register(
            "tomus_provider_written_chunks",
            "Chunks stored",
            m.written_chunks.clone(),
        );
        r.register(
            "tomus_provider_read_bytes",
            "Chunk bytes served",
            m.read_bytes.clone(),
        );
        r.register(
            "tomus_provider_read_chunks",
            "Chunk reads served",
            m.read_chunks.clone(),
        );
        r.register(
            "tomus_provider_deleted_chunks",
            "Chunks deleted (garbage collection, moves)",
            m.deleted_chunks.clone(),
        );
        r.register(
            "tomus_provider_stored_chunks",
            "Chunks held, by tier (disk: all stored; memory: the cache)",
            m.stored_chunks.clone(),
        );
        r.register(
            "tomus_provider_stored_bytes",
            "Chunk bytes held, by tier",
            m.stored_bytes.clone(),
        );
        r.register(
            "tomus_provider_capacity_bytes",
            "Size of the data directory's file system",
            m.capacity_bytes.clone(),
        );
        r.register(
            "tomus_provider_free_bytes",
            "Free space of the data directory's file system",
            m.free_bytes.clone(),
        );
        r.register(
            "tomus_provider_failed",
            "1 once the data directory was removed or replaced under the running provider",
            m.failed.clone(),
        );
        r.register(
            "tomus_provider_group_commit_batch_size",
            "Records one group commit of a log carried, by log",
            m.group_commit_batch.clone(),
        );
        r.register(
            "tomus_provider_group_commit_duration_seconds",
            "Time one group commit (write and sync) took, by log",
            m.group_commit_duration.clone(),
        );
        r.register(
            "tomus_provider_fsync_duration_seconds",
            "Time one fdatasync took, by file kind (log, chunk)",
            m.fsync_duration.clone(),
        );
        r.register(
            "tomus_provider_quarantined_chunks",
            "Chunk copies found corrupt and set aside",
            m.quarantined_chunks.clone(),
        );
        m
    })
}

/// The manager: versions, the cluster as heartbeats report it, maintenance.
pub struct ManagerMetrics {
    /// `tomus_versions_assigned_total`, `..._published_total`, `..._aborted_total`.
    pub versions_assigned: Counter,
    pub versions_published: Counter,
    pub versions_aborted: Counter,
    /// `tomus_versions_in_flight`: assigned, neither published nor aborted yet.
    pub versions_in_flight: Gauge,
    /// `tomus_cluster_providers{state}`: state is `up`, `down`, `draining` or `failed` (a
    /// draining provider that is down counts as down; one that reports a fault, as failed).
    pub cluster_providers: Gauges,
    /// `tomus_cluster_stored_bytes`, `..._chunks`, `..._capacity_bytes`, `..._free_bytes`:
    /// sums of the live providers' last heartbeats.
    pub cluster_stored_bytes: Gauge,
    pub cluster_chunks: Gauge,
    pub cluster_capacity_bytes: Gauge,
    pub cluster_free_bytes: Gauge,
    /// Maintenance, from the reports of the maintenance service.
    pub repair_passes: TotalCounter,
    pub repaired_chunks: TotalCounter,
    pub repaired_bytes: TotalCounter,
    pub gc_chunks: TotalCounter,
    pub gc_bytes: TotalCounter,
    pub gc_nodes: TotalCounter,
    pub audits: TotalCounter,
    /// Gauges of the latest pass: `under_replicated_chunks`, `_bytes`, `lost_chunks`,
    /// `repair_remaining_bytes`, `unreferenced_bytes`, `pending_deletions`, `draining_bytes`.
    pub maintenance: Gauges,
}

pub fn manager() -> &'static ManagerMetrics {
    static CELL: OnceLock<ManagerMetrics> = OnceLock::new();
    group(&CELL, |r| {
        let m = ManagerMetrics {
            versions_assigned: Counter::default(),
            versions_published: Counter::default(),
            versions_aborted: Counter::default(),
            versions_in_flight: Gauge::default(),
            cluster_providers: gauges(),
            cluster_stored_bytes: Gauge::default(),
            cluster_chunks: Gauge::default(),
            cluster_capacity_bytes: Gauge::default(),
            cluster_free_bytes: Gauge::default(),
            repair_passes: TotalCounter::default(),
            repaired_chunks: TotalCounter::default(),
            repaired_bytes: TotalCounter::default(),
            gc_chunks: TotalCounter::default(),
            gc_bytes: TotalCounter::default(),
            gc_nodes: TotalCounter::default(),
            audits: TotalCounter::default(),
            maintenance: gauges(),
        };
        r.register(
            "tomus_versions_assigned",
            "Version numbers assigned to writers",
            m.versions_assigned.clone(),
        );
        r.register(
            "tomus_versions_published",
            "Versions published",
            m.versions_published.clone(),
        );
        r.register(
            "tomus_versions_aborted",
            "Versions given up (writer aborted, lease expired, restart)",
            m.versions_aborted.clone(),
        );
        r.register(
            "tomus_versions_in_flight",
            "Versions assigned and neither published nor aborted",
            m.versions_in_flight.clone(),
        );
        r.register(
            "tomus_cluster_providers",
            "Known providers by state (up, down, draining)",
            m.cluster_providers.clone(),
        );
        r.register(
            "tomus_cluster_stored_bytes",
            "Chunk bytes stored on the live providers (their last heartbeats)",
            m.cluster_stored_bytes.clone(),
        );
        r.register(
            "tomus_cluster_chunks",
            "Chunks stored on the live providers",
            m.cluster_chunks.clone(),
        );
        r.register(
            "tomus_cluster_capacity_bytes",
            "Disk capacity of the live providers",
            m.cluster_capacity_bytes.clone(),
        );
        r.register(
            "tomus_cluster_free_bytes",
            "Free disk space of the live providers",
            m.cluster_free_bytes.clone(),
        );
        r.register(
            "tomus_repair_passes",
            "Repair passes completed by the maintenance service",
            m.repair_passes.counter.clone(),
        );
        r.register(
            "tomus_repair_chunks",
            "Chunk copies re-created by repair",
            m.repaired_chunks.counter.clone(),
        );
        r.register(
            "tomus_repair_bytes",
            "Bytes copied by repair",
            m.repaired_bytes.counter.clone(),
        );
        r.register(
            "tomus_gc_chunks",
            "Chunks deleted by garbage collection",
            m.gc_chunks.counter.clone(),
        );
        r.register(
            "tomus_gc_bytes",
            "Bytes freed by garbage collection",
            m.gc_bytes.counter.clone(),
        );
        r.register(
            "tomus_gc_nodes",
            "Metadata nodes deleted by garbage collection",
            m.gc_nodes.counter.clone(),
        );
        r.register(
            "tomus_audits",
            "Full audits (scrubs of every version and inventory) completed",
            m.audits.counter.clone(),
        );
        r.register(
            "tomus_maintenance",
            "State of the latest maintenance pass, by what (under_replicated_chunks, under_replicated_bytes, lost_chunks, repair_remaining_bytes, unreferenced_bytes, pending_deletions, draining_bytes)",
            m.maintenance.clone(),
        );
        m
    })
}

/// The S3 gateway's requests.
pub struct S3Metrics {
    /// `tomus_s3_requests_total{operation, status}`: status is the HTTP status code.
    pub requests: Counters,
    /// `tomus_s3_request_duration_seconds{operation}`: until the response head.
    pub duration: Histograms,
    /// `tomus_s3_received_bytes_total` / `tomus_s3_sent_bytes_total`: bodies, by their
    /// Content-Length.
    pub received_bytes: Counter,
    pub sent_bytes: Counter,
}

pub fn s3() -> &'static S3Metrics {
    static CELL: OnceLock<S3Metrics> = OnceLock::new();
    group(&CELL, |r| {
        let m = S3Metrics {
            requests: counters(),
            duration: histograms(latency),
            received_bytes: Counter::default(),
            sent_bytes: Counter::default(),
        };
        r.register(
            "tomus_s3_requests",
            "S3 requests by operation and HTTP status",
            m.requests.clone(),
        );
        r.register(
            "tomus_s3_request_duration_seconds",
            "Time to an S3 response's head, by operation",
            m.duration.clone(),
        );
        r.register(
            "tomus_s3_received_bytes",
            "S3 request body bytes (by Content-Length)",
            m.received_bytes.clone(),
        );
        r.register(
            "tomus_s3_sent_bytes",
            "S3 response body bytes (by Content-Length)",
            m.sent_bytes.clone(),
        );
        m
    })
}

/// Geo-replication (crates/sites), from the service in the manager's process: one series
/// per rule (`site`, `path`).
pub struct SitesMetrics {
    /// `tomus_replication_lag_versions{site, path}`: versions published at the source and
    /// not yet on the site, as of the last scan.
    pub lag_versions: Gauges,
    /// `tomus_replication_lag_seconds{site, path}`: age of the oldest of them (0: caught up).
    pub lag_seconds: Family<Labels, Gauge<f64, AtomicU64>>,
    /// `tomus_replication_versions_total{site, path}` / `_bytes_total`: replayed on the site.
    pub versions: Counters,
    pub bytes: Counters,
    /// `tomus_replication_errors_total{site, path}`: failed attempts (each is retried).
    pub errors: Counters,
    /// `tomus_replication_site_reachable{site, path}`: 1 when the last attempt reached it.
    pub reachable: Gauges,
}

pub fn sites() -> &'static SitesMetrics {
    static CELL: OnceLock<SitesMetrics> = OnceLock::new();
    group(&CELL, |r| {
        let m = SitesMetrics {
            lag_versions: gauges(),
            lag_seconds: Family::default(),
            versions: counters(),
            bytes: counters(),
            errors: counters(),
            reachable: gauges(),
        };
        r.register(
            "tomus_replication_lag_versions",
            "Versions published at the source and not yet replayed on the site",
            m.lag_versions.clone(),
        );
        r.register(
            "tomus_replication_lag_seconds",
            "Age of the oldest version not yet replayed on the site (0: caught up)",
            m.lag_seconds.clone(),
        );
        r.register(
            "tomus_replication_versions",
            "Versions replayed on the site",
            m.versions.clone(),
        );
        r.register(
            "tomus_replication_bytes",
            "Bytes replayed on the site",
            m.bytes.clone(),
        );
        r.register(
            "tomus_replication_errors",
            "Failed replication attempts (each is retried with back-off)",
            m.errors.clone(),
        );
        r.register(
            "tomus_replication_site_reachable",
            "1 when the last attempt reached the site, 0 when it did not",
            m.reachable.clone(),
        );
        m
    })
}
