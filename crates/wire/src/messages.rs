//! Requests and responses of the manager and provider RPC services.
//!
//! Bulk data (chunk contents) never goes through these enums: it travels as the frame's raw body
//! next to the encoded header, so it is read straight into its final buffer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ChunkId, Node, NodeKey, ProviderId, Span, Version};

use crate::error::Error;

/// Chunk sizes a blob may be created with: any power of two in this range.
pub const MIN_CHUNK_SIZE: u64 = 4 << 10;
pub const MAX_CHUNK_SIZE: u64 = 256 << 20;
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;

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
    pub alive: bool,
    /// Being drained: it receives no new data and repair moves what it holds elsewhere.
    pub draining: bool,
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    Dir,
    File,
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

/// A chunk a provider holds, as listed for repair and garbage collection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEntry {
    pub id: ChunkId,
    /// Data length in bytes.
    pub len: u64,
    /// When this provider stored it (Unix milliseconds).
    pub stored_ms: u64,
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

/// What the maintenance service (repair, rebalancing, garbage collection) is doing, as
/// reported to the manager for `tomus status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MaintenanceStatus {
    /// Passes over the whole store completed since the service started.
    pub passes: u64,
    /// Whether a pass is running now, and when the last one ended (Unix ms; 0: none yet).
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
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Ping,

    // ---- manager: blobs and versions
    CreateBlob {
        chunk_size: u64,
        replication: u32,
    },
    BlobInfo {
        blob: BlobId,
    },
    ListBlobs,
    /// Choose providers for `chunks` new chunks of `blob` (one replica set each).
    Allocate {
        blob: BlobId,
        chunks: u32,
        /// Size the chunks will have at most (default: the blob's chunk size), for the space
        /// check and balancing.
        chunk_bytes: Option<u64>,
        placement: Placement,
        /// The writer's host, for the local policy.
        client_host: Option<String>,
    },
    Assign {
        blob: BlobId,
        op: WriteOp,
    },
    /// The writer stored its chunks and metadata; answered once the version is published.
    Complete {
        blob: BlobId,
        version: Version,
    },
    /// The writer cannot finish `version` (storing its data or metadata failed): it and the
    /// versions assigned after it are given up now instead of when its lease runs out.
    AbortVersion {
        blob: BlobId,
        version: Version,
    },
    /// A version's record (`None`: the latest published).
    Version {
        blob: BlobId,
        version: Option<Version>,
    },
    Versions {
        blob: BlobId,
    },

    // ---- manager: namespace (paths are `/`-separated; parents of new entries are implicit)
    FsMkdir {
        path: String,
        /// Also create missing parents, and accept an existing directory.
        parents: bool,
    },
    /// Creates a file backed by a new blob; an existing file is returned unless `exclusive`.
    FsCreate {
        path: String,
        chunk_size: u64,
        replication: u32,
        exclusive: bool,
    },
    FsStat {
        path: String,
    },
    /// Entries under directory `path` in path order: its children, or with `recursive` every
    /// descendant; only paths after `start_after`, at most `limit`.
    FsList {
        path: String,
        recursive: bool,
        start_after: Option<String>,
        limit: u32,
    },
    /// Moves a file or a directory tree; an existing file at `to` is replaced.
    FsRename {
        from: String,
        to: String,
    },
    FsDelete {
        path: String,
        recursive: bool,
    },

    // ---- manager: provider registry
    Register {
        id: Option<ProviderId>,
        addr: String,
        report: ProviderReport,
    },
    Heartbeat {
        id: ProviderId,
        report: ProviderReport,
    },
    Providers,

    // ---- provider: chunks (data in the frame body)
    PutChunk {
        id: ChunkId,
    },
    GetChunk {
        id: ChunkId,
        offset: u64,
        len: u64,
    },

    // ---- provider: metadata DHT shard
    PutNodes {
        nodes: Vec<(NodeKey, Node)>,
    },
    GetNodes {
        keys: Vec<NodeKey>,
    },
    /// The nodes this provider holds on the way from `start` down to any of `targets`
    /// (stopping where it lacks one), at most `limit`: one round trip instead of one per tree
    /// level.
    GetPath {
        blob: BlobId,
        start: tomus_metadata::NodeRef,
        targets: Vec<Span>,
        limit: u32,
    },

    // ---- manager: version attributes and conditional assignment (added after the above, so
    // the encoding of earlier requests is unchanged)
    /// [`Request::Assign`] with attributes published with the version; with `expect_size`,
    /// only if the blob's size after every version assigned so far is that (an append at a
    /// known offset), else a `PreconditionFailed` error.
    AssignWith {
        blob: BlobId,
        op: WriteOp,
        attrs: Attrs,
        expect_size: Option<u64>,
    },
    /// Every published version of a blob with its attributes.
    VersionsAttrs {
        blob: BlobId,
    },
    /// The file at `path`, one of its versions (`None`: the latest published) and that
    /// version's attributes, in one round trip.
    FsObject {
        path: String,
        version: Option<Version>,
    },
    /// [`Request::FsList`] with the attributes of each file's latest published version.
    FsListAttrs {
        path: String,
        recursive: bool,
        start_after: Option<String>,
        limit: u32,
    },

    // ---- fault tolerance: repair, drain, scrub, garbage collection
    /// Provider: the chunks it holds, in id order after `start_after`, at most `limit`.
    ListChunks {
        start_after: Option<ChunkId>,
        limit: u32,
    },
    /// Provider: removes chunks (ids it does not hold are ignored).
    DeleteChunks {
        ids: Vec<ChunkId>,
    },
    /// Provider: fetches chunk `id` whole from the first of `from` (provider addresses) that
    /// serves it intact and stores it (a repair copy, provider to provider).
    CopyChunk {
        id: ChunkId,
        len: u64,
        from: Vec<String>,
    },
    /// Provider: the metadata node keys it holds, in key order after `start_after`, at most
    /// `limit`.
    ListNodes {
        start_after: Option<NodeKey>,
        limit: u32,
    },
    /// Provider: removes metadata nodes (keys it does not hold are ignored).
    DeleteNodes {
        keys: Vec<NodeKey>,
    },
    /// Provider: verifies the checksums of the chunks after `start_after`, at most `limit`,
    /// and quarantines the corrupt ones.
    Scrub {
        start_after: Option<ChunkId>,
        limit: u32,
    },
    /// Manager: where repair put copies of these chunks (a chunk's replica set as repair last
    /// recorded it; empty when repair never touched the chunk). Readers ask when every
    /// replica its metadata names fails.
    ChunkReplicas {
        chunks: Vec<ChunkId>,
    },
    /// Manager (from the maintenance service): the current replica sets of repaired chunks.
    RecordReplicas {
        entries: Vec<(ChunkId, Vec<ProviderId>)>,
    },
    /// Manager: starts draining the provider at `addr` (no new data; repair moves its data).
    DrainProvider {
        addr: String,
    },
    /// Manager: forgets a provider that is drained or down for good, so it leaves the DHT
    /// ring and the registry. Refused while it holds data no other provider has.
    RemoveProvider {
        addr: String,
    },
    /// Manager: the cluster at a glance.
    Status,
    /// Manager (from the maintenance service): its current state.
    ReportMaintenance {
        status: MaintenanceStatus,
    },
    /// Manager: sets a blob's retention policy.
    SetRetention {
        blob: BlobId,
        retention: Retention,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    Err(Error),
    Blob(BlobInfo),
    Blobs(Vec<BlobInfo>),
    Placements(Vec<Vec<ProviderInfo>>),
    Assigned(Assignment),
    Version(VersionInfo),
    Versions(VersionList),
    Registered(ProviderId),
    Providers(Vec<ProviderInfo>),
    /// Chunk bytes are in the frame body.
    Chunk,
    Nodes(Vec<Option<Node>>),
    Path(Vec<(tomus_metadata::NodeRef, Node)>),
    Entry(FsEntry),
    Entries(Vec<FsEntry>),
    VersionsAttrs(Vec<(VersionInfo, Attrs)>),
    Object(ObjectInfo),
    /// Entries with attributes (empty for directories).
    EntriesAttrs(Vec<(FsEntry, Attrs)>),
    Chunks(Vec<ChunkEntry>),
    NodeKeys(Vec<NodeKey>),
    Scrubbed(ScrubReport),
    Replicas(Vec<Vec<ProviderId>>),
    Provider(ProviderInfo),
    Status(ClusterStatus),
}

impl Response {
    /// Turns an error response into `Err`.
    pub fn into_result(self) -> Result<Response, Error> {
        match self {
            Response::Err(e) => Err(e),
            other => Ok(other),
        }
    }
}

/// Builds the "unexpected response" error clients return when a peer answers out of protocol.
pub fn unexpected(resp: &Response) -> Error {
    let name = format!("{resp:?}");
    let short: String = name.chars().take(60).collect();
    Error::protocol(format!("unexpected response: {short}"))
}
