//! The tomus wire protocol.

/// The cluster-secret handshake every connection starts with.
pub mod auth;
/// CRC32Cs of chunk transfers, computed by the sender and checked by the receiver.
pub mod checksum;
/// The chunk file format, shared by providers and the clients reading their files directly.
pub mod chunk_file;
/// Capacity and free space of the file system holding a path.
pub mod disk_space;
/// The typed error every component returns and sends.
pub mod error;
/// Frames: length prefixes, encoded headers and raw bodies.
pub mod frame;
/// A data directory held open, to tell whether it was removed or replaced under its server.
pub mod held_dir;
/// Sizes and times for people (the CLI and the dashboard).
pub mod human;
/// The check an append-only log makes before acknowledging: that its file still exists.
pub mod log_file;
/// The requests of the maintenance service to the manager.
pub mod maintenance;
/// The requests of the manager.
pub mod manager;
/// Chunk files mapped into memory and checked in place (surviving SIGBUS).
pub mod mapping;
/// The client's pool of connections and typed calls.
pub mod pool;
/// The requests of a provider.
pub mod provider;
/// Typed requests, the service envelope, encoded answers.
pub mod rpc;
/// The accept loop and request handlers.
pub mod server;
/// Storage classes, memory-class usage and placement plans (dedicated storage nodes).
pub mod storage;
/// The requests of a topology agent (throughput probes between nodes).
pub mod topology;
/// Request ids carried from a client operation to every server it reaches, for the logs.
pub mod trace;
/// The data requests and answers carry.
pub mod types;
/// Zeros kept written ahead of an append-only log, so a sync writes the records alone.
pub mod zeroed_ahead;

pub use auth::{check_bind, ClusterSecret, NOT_A_TOMUS_SERVER};
pub use error::{check_count, check_page, io_error, Error, ErrorKind, Result};
pub use pool::{Pool, RpcConfig};
pub use rpc::{Envelope, Ping, Reply, Rpc};
pub use server::{
    call_handler, call_handler_payload, serve, wrong_service, FileRange, Handler, LoadGauge,
    Payload, RequestObserver, Served, ServerLimits,
};
pub use storage::{MemoryUsage, PlacementPlan, PlanCluster, StorageClass};
pub use types::*;

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
