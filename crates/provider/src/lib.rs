//! The tomus provider: stores immutable, checksummed chunks on local disk (optionally cached in
//! a memory tier) and one shard of the metadata DHT, and reports itself to the manager.

/// Immutable chunks as checksummed files, their pages dropped behind sustained writes.
pub mod chunk_store;
/// Whether the data directory the provider opened is still there.
mod data_dir;
/// Sweeps of dead clients' files, directory syncs, blocking I/O.
mod disk;
/// One sync for many records of the provider's append-only logs.
mod group_commit;
/// Registration with the manager and the periodic heartbeats.
mod heartbeat;
/// The provider's and its cluster's ids, kept in the data directory.
mod identity;
/// The memory storage class: chunks kept only in RAM, bounded, repaired from replicas.
pub mod memory_class;
/// Recently written chunks kept in memory (off by default).
pub mod memory_tier;
/// This provider's shard of the metadata DHT: tree nodes in memory and a log.
pub mod meta_store;
/// The provider's `/metrics` pages.
mod metrics;
/// A provider node's life: open, serve, register, beat, sweep.
mod node;
/// Files registered in place (workflows): adopted by hard link, served by range.
pub mod registered;
/// The RPC service: chunks, the metadata shard, repair, scrub and garbage collection.
pub mod service;
/// Short-circuit reads and writes: where the chunk files are, for clients on this host.
pub mod short_circuit;
/// Small chunks kept in one append-only log instead of a file each.
pub mod small_chunks;
#[cfg(test)]
mod testutil;

pub use disk::sweep_idle;
pub(crate) use disk::{blocking, sync_dir};
pub use node::{run, ProviderConfig};
pub(crate) use tomus_wire::io_error;
