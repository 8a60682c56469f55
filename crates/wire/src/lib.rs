//! The tomus wire protocol: typed errors, request/response messages, frames with raw bodies,
//! the cluster-secret handshake and the client connection pool / server loop.

pub mod auth;
pub mod error;
pub mod frame;
pub mod messages;
pub mod rpc;

pub use auth::{check_bind, ClusterSecret};
pub use error::{Error, ErrorKind, Result};
pub use messages::*;
pub use rpc::{serve, FileRange, Handler, LoadGauge, Payload, Pool, RpcConfig};

/// Wall-clock time in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Host part of a `host:port` address (brackets of IPv6 literals removed).
pub fn host_of(addr: &str) -> String {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    };
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}
