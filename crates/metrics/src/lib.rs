//! Metrics of the tomus servers in the Prometheus/OpenMetrics text format, and the small HTTP
//! server that serves them at `GET /metrics` (the manager adds its dashboard's pages to it).
//! Every metric is listed, with its labels and meaning, in docs/metrics.md.
//!
//! One process runs one server, so the metric families are process-wide: each group
//! registers itself on first use ([`rpc`], [`provider`], [`manager`], [`s3`], [`sites`]), and a process
//! exports only the groups it used. (Tests that run several servers in one process see their
//! sums.)

/// The metric families, in groups by server.
pub mod families;
/// The HTTP server: `/metrics`, pages of whoever embeds it, the cluster-secret check.
pub mod http;

pub use families::{manager, provider, rpc, s3, sites, Labels, RpcObserver};
pub use http::{bind, full, serve, streamed, Body, MetricsOnly, Pages, Response};

use std::sync::{Mutex, MutexGuard, OnceLock};

use prometheus_client::registry::Registry;

/// The process's registry.
fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| Mutex::new(Registry::default()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Every registered metric in the OpenMetrics text format (what `/metrics` answers).
pub fn encode() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry());
    out
}

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
