//! The data types requests and responses carry: blobs, versions, providers, namespace
//! entries, maintenance reports.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ChunkId, ProviderId, Span, Version};

/// Chunk sizes a blob may be created with: any power of two in this range.
pub const MIN_CHUNK_SIZE: u64 = 4 << 10;
pub const MAX_CHUNK_SIZE: u64 = 256 << 20;
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;

/// Most chunks one placement request asks for (writers ask in pages of this).
pub const MAX_ALLOCATE: u32 = 1 << 16;
/// Most items (keys, ids, entries, versions) one request carries or asks for.
pub const MAX_ITEMS: usize = 100_000;
/// Most entries one listing returns.
pub const MAX_LISTING: u32 = 10_000;
/// Most versions one listing with attributes returns: [`MAX_ATTRS_BYTES`] each keeps a page
/// within 16 MiB, well below a frame's header limit.
pub const MAX_ATTRS_LISTING: u32 = 1_000;
/// Longest provider address a registration may carry.
pub const MAX_ADDR_LEN: usize = 256;
/// Longest a client uses its list of providers (and placements taken from it) before asking
/// the manager again. Until then it may still write to a provider that started draining, and
/// the manager counts on this bound when it judges a drain complete.
pub const PROVIDER_VIEW_TTL: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobInfo {
    pub id: BlobId,
    pub chunk_size: u64,
    pub replication: u32,
    /// Latest published version (0: nothing written yet).
    pub latest: Version,
    /// Size at the latest published version.
    pub size: u64,
    /// When the latest version was published (Unix milliseconds; creation time before that).
    pub modified_ms: u64,
    /// Which versions are kept; the others are garbage-collected.
    pub retention: Retention,
}

/// Which published versions of a blob are kept. The latest version is always kept; versions
/// outside the policy become unreadable and their data is reclaimed by garbage collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Retention {
    #[default]
    KeepAll,
    /// The newest `n` published versions (at least 1).
    KeepLast(u32),
    /// Versions published less than this many milliseconds ago.
    KeepNewerThan(u64),
}

/// The policy new files of the namespace get when no directory above them has one: the
/// latest 3 versions (blobs made with the blob API keep all theirs, [`Retention::KeepAll`]).
pub const DEFAULT_FILE_RETENTION: Retention = Retention::KeepLast(3);

/// A namespace entry's retention policy and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsRetention {
    /// The entry (normalized path).
    pub path: String,
    pub kind: EntryKind,
    /// For a file, its blob's policy; for a directory, the policy files created below it
    /// get (its own, the nearest ancestor's, or [`DEFAULT_FILE_RETENTION`]).
    pub retention: Retention,
    /// Where `retention` comes from: the file itself; for a directory, the directory that
    /// set it (`None`: the default).
    pub from: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionState {
    /// Assigned, not yet published.
    Pending,
    Published,
    /// Given up: its writer's lease expired or the manager restarted before publication.
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    pub blob: BlobId,
    pub version: Version,
    /// The range this version wrote (empty for version 0).
    pub span: Span,
    /// Blob size at this version.
    pub size: u64,
    /// Tree capacity at this version (0 for version 0: no tree).
    pub capacity: u64,
    pub state: VersionState,
    /// Whether it was an append.
    pub append: bool,
    /// When it was published (Unix milliseconds; 0 while pending).
    pub published_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteOp {
    Write {
        offset: u64,
        size: u64,
    },
    Append {
        size: u64,
    },
    /// New whole content of `size` bytes: the version spans `[0, max(size, previous size))`,
    /// zeros past `size`, and its size is `size` (a file rewritten on close).
    Replace {
        size: u64,
    },
}

/// Attributes of a version (through the S3 gateway: an object's ETag, content type and user
/// metadata). Set by the version's writer with its assignment and published atomically with
/// it; immutable afterwards. Opaque to the store.
pub type Attrs = BTreeMap<String, String>;

/// Most bytes (keys and values together) a version's attributes may hold.
pub const MAX_ATTRS_BYTES: usize = 16 << 10;

/// A file with one of its versions and that version's attributes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    pub entry: FsEntry,
    pub version: VersionInfo,
    pub attrs: Attrs,
}

/// The versions of a blob: every published version, and the ranges of version numbers that
/// were given up (`[from, to)`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionList {
    pub versions: Vec<VersionInfo>,
    pub aborted: Vec<(Version, Version)>,
}

/// Where a page of a blob's versions starts, and in which order it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionsFrom {
    /// Oldest first, from the first version numbered above this (0: the oldest).
    After(Version),
    /// Newest first, from the first version numbered below this (`Version::MAX`: the
    /// newest).
    Before(Version),
}

/// What a writer gets with its version number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub version: Version,
    /// Where the write lands (the append offset is fixed here) and the tree capacity it uses.
    pub span: Span,
    pub capacity: u64,
    /// Latest published version at assignment time, with its capacity (`None`: empty blob).
    pub published: Option<(Version, u64)>,
    /// Lower versions still in flight: (version, range, capacity).
    pub in_flight: Vec<(Version, Span, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderInfo {
    pub id: ProviderId,
    pub addr: String,
    /// Host part of the address, used by the "local" placement policy.
    pub host: String,
    pub capacity: u64,
    pub free: u64,
    pub chunks: u64,
    /// Requests in progress when it last reported.
    pub load: u32,
    /// Heartbeats arrive and it reported no fault: it takes data and serves what it holds.
    pub alive: bool,
    /// Being drained: it receives no new data and repair moves what it holds elsewhere.
    pub draining: bool,
    /// Why it reported it cannot keep data (its data directory vanished under it): such a
    /// provider is not alive, so nothing is placed on it and repair copies what it held.
    pub fault: Option<String>,
}

impl ProviderInfo {
    /// What it is, as every view names it (`tomus status`, the dashboard, `/metrics`).
    pub fn state(&self) -> ProviderState {
        match (self.alive, self.draining) {
            _ if self.fault.is_some() => ProviderState::Failed,
            (false, _) => ProviderState::Down,
            (true, true) => ProviderState::Draining,
            (true, false) => ProviderState::Up,
        }
    }
}

/// A provider's state: a fault outranks silence, and silence outranks draining (a down
/// provider being drained is down: nothing is read from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderState {
    Up,
    Draining,
    Down,
    Failed,
}

impl ProviderState {
    pub const ALL: [ProviderState; 4] = [
        ProviderState::Up,
        ProviderState::Draining,
        ProviderState::Down,
        ProviderState::Failed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProviderState::Up => "up",
            ProviderState::Draining => "draining",
            ProviderState::Down => "down",
            ProviderState::Failed => "failed",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Placement {
    /// Spread chunks over the providers with the most free space and least load.
    #[default]
    Balanced,
    /// Put the first replica on the writer's own host when a provider runs there.
    Local,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderReport {
    pub capacity: u64,
    pub free: u64,
    pub chunks: u64,
    pub load: u32,
    /// Chunks it quarantined (found corrupt) since its last report: repair re-creates them.
    pub lost: Vec<ChunkId>,
    /// Bytes of the chunks it stores (all tiers on disk; the memory tier only caches).
    pub stored_bytes: u64,
    /// Why it cannot keep data (its data directory is gone or was replaced), once found.
    pub fault: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    Dir,
    File,
    /// A file registered in place on its holders (workflows): no blob, immutable; its
    /// record comes with `FsRegistered`.
    Registered,
}

/// A namespace entry: a directory, or a file backed by a blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEntry {
    /// Normalized path: components joined by `/`, no leading or trailing `/`; `""` is the root.
    pub path: String,
    pub kind: EntryKind,
    pub created_ms: u64,
    /// The file's blob at its latest published version (`None` for directories).
    pub blob: Option<BlobInfo>,
}

/// A page of a listing read from one snapshot of the tree (`FsListSnapshot`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsSnapshotPage {
    /// The snapshot the next page must name; `None` when this page is the last (the manager
    /// holds nothing for it).
    pub snapshot: Option<u64>,
    pub entries: Vec<FsEntry>,
}

/// A chunk a provider holds, as listed for repair and garbage collection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEntry {
    pub id: ChunkId,
    /// Data length in bytes.
    pub len: u64,
    /// When this provider stored it (Unix milliseconds).
    pub stored_ms: u64,
}

/// A page of a provider's chunk listing, with the provider's clock when it was taken (so
/// readers compute how old each chunk is without trusting clocks to agree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkListing {
    pub now_ms: u64,
    pub entries: Vec<ChunkEntry>,
}

/// What one scrub step of a provider found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Chunks verified in this step and their data bytes.
    pub checked: u64,
    pub bytes: u64,
    /// Chunks whose checksum failed; each was removed from the provider (quarantined) so
    /// repair re-creates it from a good replica.
    pub corrupt: Vec<ChunkId>,
    /// Where the next step starts (`None`: the scrub is complete).
    pub next: Option<ChunkId>,
}

/// What the manager positively knows of a blob's version, asked by garbage collection before
/// it deletes anything of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fate {
    /// Published and retained, or being written: its data stays.
    Live,
    /// Removed by the blob's retention policy. Its nodes may still be shared with retained
    /// versions: only the unreferenced ones may go.
    Expired,
    /// Given up before publication: nothing refers to its nodes.
    Aborted,
    /// Its blob was deleted.
    Deleted,
    /// Nothing is known (a version never assigned, a blob being created): keep everything.
    Unknown,
}

/// A change of the manager's state that the maintenance service follows, in the order the
/// manager made it (its durable change log): what became referenced and what died.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// Versions published, in order, with the blob's chunk size and replication.
    Published {
        blob: BlobId,
        chunk_size: u64,
        replication: u32,
        versions: Vec<VersionInfo>,
    },
    /// Retention removed the published versions below `retained_from`.
    Expired {
        blob: BlobId,
        retained_from: Version,
    },
    /// Versions `[from, to)` were given up.
    Aborted {
        blob: BlobId,
        from: Version,
        to: Version,
    },
    /// The blob was deleted (with its file).
    Deleted { blob: BlobId },
    /// What happened before this entry was not recorded (the manager's state predates the
    /// log): a reader must rebuild what it derives from the cluster itself.
    Unrecorded,
}

/// How old the data a new version refers to is, as its writer tells the manager with the
/// assignment: the chunks it stored, or the chunks of other versions it reuses (a copy made
/// of metadata only). A write whose data is older than garbage collection's cutoff is
/// refused with [`crate::ErrorKind::WriteExpired`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataAge {
    /// Milliseconds since the writer started storing the chunks of this version (0: none or
    /// just now).
    pub stored_ms: u64,
    /// Milliseconds since the writer found the chunks it reuses referenced by a retained
    /// version (`None`: it reuses none).
    pub reused_ms: Option<u64>,
}

/// Chunk copies providers reported lost (quarantined) since repair last asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostChunks {
    pub chunks: Vec<(ChunkId, ProviderId)>,
    /// Some reports did not fit the manager's queue: repair must look for itself.
    pub overflowed: bool,
}

/// A page of the change log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePage {
    /// Changes with their sequence numbers, in order.
    pub changes: Vec<(u64, Change)>,
    /// The oldest sequence number the log still holds (the log keeps a bounded number): a
    /// reader whose position is older missed changes and must rebuild what it derives.
    pub first_kept: u64,
    /// The newest sequence number written (0: none yet).
    pub last: u64,
}

/// Before when data must have been stored, or referenced, for garbage collection to delete it
/// (Unix ms on the manager's clock). Writers whose data is older are refused, so what a
/// write refers to is never collected before it commits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cutoffs {
    /// Chunks never referenced by a published version, stored before this, may go.
    pub fresh_ms: u64,
    /// Chunks no published version references any more, unreferenced since before this,
    /// may go.
    pub reused_ms: u64,
}

/// What the maintenance service (repair, rebalancing, garbage collection) is doing, as
/// reported to the manager for `tomus status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MaintenanceStatus {
    /// Repair rounds completed since the service started (a test or `tomus drain` waits
    /// for two after a change to know repair has seen it).
    pub passes: u64,
    /// Whether a repair round is running now, and when the last one ended (Unix ms; 0:
    /// none yet).
    pub running: bool,
    pub last_pass_ms: u64,
    /// Found by the latest scan: referenced chunks with fewer live replicas than their blob's
    /// replication, their bytes, and chunks with no live replica at all.
    pub under_replicated_chunks: u64,
    pub under_replicated_bytes: u64,
    pub lost_chunks: u64,
    /// Metadata nodes with fewer live copies than their blob's replication.
    pub under_replicated_nodes: u64,
    /// Progress of the current (or last) pass: bytes and nodes copied of those to copy.
    pub repair_done_bytes: u64,
    pub repair_total_bytes: u64,
    pub repair_done_nodes: u64,
    pub repair_total_nodes: u64,
    /// Totals since the service started.
    pub repaired_chunks: u64,
    pub repaired_bytes: u64,
    pub gc_chunks: u64,
    pub gc_bytes: u64,
    pub gc_nodes: u64,
    /// Draining providers and the bytes still to move off each.
    pub draining: Vec<(ProviderId, u64)>,
    /// The last error a pass stopped on, if any.
    pub last_error: Option<String>,
    /// How long the last pass took (ms): following the change log, collecting, repairing.
    pub last_pass_duration_ms: u64,
    /// Change-log entries applied and published versions counted, since the start.
    pub changes_applied: u64,
    pub versions_counted: u64,
    /// The last `gc` round that counted versions: how many, and how long it took (ms).
    pub last_count_round_versions: u64,
    pub last_count_round_ms: u64,
    /// Times the ledger was rebuilt from the cluster.
    pub rebuilds: u64,
    /// What the ledger tracks: leaves, chunks, chunks no longer referenced (waiting for the
    /// reuse cutoff), deletions owed to providers.
    pub ledger_leaves: u64,
    pub ledger_chunks: u64,
    pub unreferenced_chunks: u64,
    pub pending_deletions: u64,
    /// Full audits done, when the last one ended (Unix ms) and how long it took (ms).
    pub audits: u64,
    pub last_audit_ms: u64,
    pub last_audit_duration_ms: u64,
    /// The service's workers (gc, repair, audit).
    pub workers: Vec<WorkerStatus>,
    /// Bytes on the providers of the unreferenced chunks (`unreferenced_chunks`: no
    /// retained version refers to them; deleted once the reuse grace passed), as of the
    /// last sum: every audit, and the `gc` rounds that come once a hundred times what the
    /// last sum took has passed (every round or every other while few chunks wait; every
    /// 5-6 s with 100,000).
    pub unreferenced_bytes: u64,
    /// Bytes on the providers of the chunks only versions older than their blob's latest
    /// refer to (what retention keeps for the history), as of the last audit.
    pub old_version_bytes: u64,
    /// When the last complete repair pass started (Unix ms, the manager's clock; 0: none
    /// yet). A pass is complete when it planned from a ledger that had followed every change
    /// logged before it began; the findings above are those of the latest pass (set when it
    /// plans, so a pass that started later may have found less).
    pub last_pass_started_ms: u64,
}

impl MaintenanceStatus {
    /// Whether a complete repair pass that started after `t0_ms` (the manager's clock) found
    /// nothing under-replicated or lost: whatever was wrong at `t0_ms` has been repaired.
    pub fn repaired_since(&self, t0_ms: u64) -> bool {
        self.last_pass_started_ms > t0_ms
            && self.under_replicated_chunks == 0
            && self.under_replicated_nodes == 0
            && self.lost_chunks == 0
    }
}

/// What one background worker is doing (`tomus status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct WorkerStatus {
    pub name: String,
    /// "working", "busy" (more waiting), "idle", "failed, retrying", "stopped".
    pub state: String,
    /// The pause between rounds when idle (ms).
    pub interval_ms: u64,
    /// Rounds done, when the last one ended (Unix ms) and how long it took (ms).
    pub rounds: u64,
    pub last_round_ms: u64,
    pub last_duration_ms: u64,
    /// What it did last, in a line.
    pub summary: String,
    pub errors: u64,
    pub last_error: Option<String>,
}

/// The cluster at a glance: `tomus status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub providers: Vec<ProviderInfo>,
    pub blobs: u64,
    /// After this long without a heartbeat a provider counts as down.
    pub provider_timeout_ms: u64,
    pub maintenance: MaintenanceStatus,
    /// When the maintenance service last reported (Unix ms; 0: never).
    pub maintenance_reported_ms: u64,
    /// The manager's own workers (committer, leases, retention).
    pub workers: Vec<WorkerStatus>,
    /// The manager's clock when it answered (Unix ms): what to compare the maintenance
    /// times with.
    pub now_ms: u64,
    /// The disk of the manager's state.
    pub manager_disk: ManagerDisk,
    /// The cluster's id, which its providers keep ([`ClusterId`]).
    pub cluster: ClusterId,
}

/// A cluster's identity: drawn at random when its manager's state is created, and kept by
/// every provider that joins it. A provider whose data belongs to another cluster (a manager
/// started on another or an emptied data directory) is refused rather than having every
/// chunk it holds taken for garbage.
pub type ClusterId = u64;

/// The answer to a provider's registration: its id and the cluster it joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Joined {
    pub id: ProviderId,
    pub cluster: ClusterId,
}

/// The disk holding the manager's state, and the free space it keeps there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerDisk {
    pub capacity: u64,
    pub free: u64,
    /// Below this much free space new writes are refused (`--min-free-space`; 0: no reserve).
    pub min_free: u64,
    /// Why the manager takes no changes: its data directory was removed or replaced under it.
    pub fault: Option<String>,
}

/// One throughput probe from one node to another ([`Probe`](crate::topology::Probe)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSample {
    /// Bytes the receiver acknowledged.
    pub bytes: u64,
    /// From the first frame sent to the last answer (µs).
    pub elapsed_us: u64,
    /// Median round trip of a few pings before the stream (µs).
    pub rtt_us: u64,
}

/// The measured network between the nodes of a deployment: row = from, column = to. The
/// diagonal is 0 (a node is not probed to itself); a pair whose probes all failed is 0 too,
/// and named in `failures`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopologyMatrix {
    /// Node names: a provider's address, or the name a `tomus agent` gave.
    pub nodes: Vec<String>,
    /// Where each node answers probes, in `nodes` order.
    pub addrs: Vec<String>,
    /// Mean throughput over the samples (MiB/s).
    pub throughput: Vec<Vec<f64>>,
    /// Standard deviation of the samples (MiB/s).
    pub stddev: Vec<Vec<f64>>,
    /// Median round-trip time (ms).
    pub latency_ms: Vec<Vec<f64>>,
    /// Samples per pair, probe length (ms), and when the measurement ended (Unix ms).
    pub rounds: u32,
    pub duration_ms: u32,
    pub measured_ms: u64,
    /// Pairs whose probes failed, with the first error: "from -> to: error".
    pub failures: Vec<String>,
}

/// A file registered in place (workflows): one manager record naming the providers that
/// hold its bytes in their data directories, instead of a blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredFile {
    /// Normalized path, as in [`FsEntry`].
    pub path: String,
    pub size: u64,
    /// CRC32C of the whole file; `None` while its first holder still computes it.
    pub checksum: Option<u32>,
    /// Where the bytes are, first registered first.
    pub holders: Vec<Holder>,
    /// Free-form transfer hints given at registration (`key`, `value`).
    pub hints: Vec<(String, String)>,
    pub created_ms: u64,
}

/// One provider holding a registered file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub provider: ProviderId,
    /// The provider's address now (empty when it left the registry).
    pub addr: String,
    pub alive: bool,
    /// The file's name in that provider's `registered` directory.
    pub name: String,
}

/// Where a provider keeps its chunk files, for clients on its host to read and write them
/// directly (short-circuit reads and writes). A client trusts the directory only when the
/// file [`crate::chunk_file::TOKEN_FILE`] in it holds `token` (the same file system, not a
/// same-named directory of another host)
/// and it runs in the network namespace `net_ns` (a host emulated with network namespaces
/// on one machine shares the file system but not the network the test means to measure).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalChunks {
    /// The chunk directory, absolute.
    pub dir: String,
    /// A random value this run of the provider wrote in `<dir>/local-read-token`.
    pub token: String,
    /// The inode of the provider's network namespace (`/proc/self/ns/net`), 0 if unknown.
    pub net_ns: u64,
}

/// What a provider answers when it adopted a local file (hard link into its data directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adopted {
    /// Its name in the provider's `registered` directory.
    pub name: String,
    pub size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_outranks_silence_which_outranks_draining() {
        let p = |alive, draining, fault: Option<&str>| ProviderInfo {
            id: 1,
            addr: "127.0.0.1:1".into(),
            host: "127.0.0.1".into(),
            capacity: 0,
            free: 0,
            chunks: 0,
            load: 0,
            alive,
            draining,
            fault: fault.map(str::to_string),
        };
        assert_eq!(p(true, false, None).state(), ProviderState::Up);
        assert_eq!(p(true, true, None).state(), ProviderState::Draining);
        assert_eq!(p(false, false, None).state(), ProviderState::Down);
        assert_eq!(p(false, true, None).state(), ProviderState::Down);
        assert_eq!(p(false, true, Some("gone")).state(), ProviderState::Failed);
        assert_eq!(p(true, false, Some("gone")).state(), ProviderState::Failed);
        let names: Vec<_> = ProviderState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["up", "draining", "down", "failed"]);
    }
}
