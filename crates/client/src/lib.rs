//! The tomus client library: the blob API over a cluster (used by the CLI, the Python package
//! and the S3 gateway).
//!
//! A write stores its chunks in parallel on providers chosen by the manager, then gets a
//! version, builds and stores that version's metadata nodes in the DHT, and reports completion;
//! it returns once the version is published. Reads walk the tree of a published version and
//! fetch chunk pieces in parallel, failing over between replicas.

/// Batch buffers of streaming writers, recycled.
mod batch_buffers;
/// Handles on blobs and their version records.
pub mod blob;
/// Chunk transfers: replicated stores, ranged reads with failover.
pub mod chunks;
/// The client: options, a connection to a cluster, blobs by id.
mod client;
/// The client's view of the cluster: manager, providers, suspects, caches.
pub mod cluster;
/// The commit protocol: a version for stored chunks, its metadata, its publication.
pub mod commit;
/// The metadata DHT: replicated node puts, lookups, the node cache.
pub mod dht;
/// Whole listings of blobs and versions, page by page.
pub mod listing;
/// Short-circuit reads and writes: chunk files of providers on this host used directly.
pub mod local;
/// The file namespace.
pub mod namespace;
/// Placements fetched ahead for small writes.
pub mod placements;
/// The read path: a version's tree to chunk pieces to bytes.
pub mod read;
/// Registered files (workflows): O(1) registration, fetches from their holders.
pub mod registered;
/// The consistent-hash ring of the metadata DHT.
pub mod ring;
/// Small writes: stored with their version's metadata, or where placement says.
pub mod small_write;
/// Storing a write's chunks: placement, parallel puts, failover.
pub mod upload;
/// Published version records, cached.
pub mod versions;
/// Writes, appends, replacements and composed versions.
pub mod write;
/// Streaming writers: one version from data that arrives in parts.
pub mod writer;

pub use blob::{Blob, Extent, Location};
pub use client::{Client, ClientOptions};
pub use commit::CommitOptions;
pub use namespace::{CreateOptions, Namespace};
pub use tomus_wire;
pub use writer::{Append, BlobWriter, Replace, WriteAt, WriteKind};
