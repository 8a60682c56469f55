//! Requests of the manager: blobs and versions, the file namespace, the provider registry.

use tomus_metadata::{BlobId, ChunkId, ProviderId, Version};

use crate::rpc::service;
use crate::storage::{MemoryUsage, PlacementPlan, StorageClass};
use crate::types::*;

service! {
    /// Every request the manager serves to clients and providers.
    pub enum ManagerRequest in Envelope::Manager {
        // ---- blobs and versions
        /// Creates a blob.
        CreateBlob { chunk_size: u64, replication: u32 } -> BlobInfo, once;
        /// A blob's record at its latest published version.
        GetBlob { blob: BlobId } -> BlobInfo;
        /// Blobs in id order, the first `limit` (at most [`MAX_LISTING`]) with ids above
        /// `after`; fewer than `limit`: the last page.
        ListBlobs { after: BlobId, limit: u32 } -> Vec<BlobInfo>;
        /// Chooses providers for `chunks` new chunks of `blob` (one replica set each).
        Allocate {
            blob: BlobId,
            chunks: u32,
            /// Size the chunks will have at most (default: the blob's chunk size), for the
            /// space check and balancing.
            chunk_bytes: Option<u64>,
            placement: Placement,
            /// The writer's host, for the local policy.
            client_host: Option<String>,
            /// Providers the writer saw fail (or damage transfers) moments ago: left out when
            /// the others are enough for the replication.
            avoid: Vec<ProviderId>,
        } -> Vec<Vec<ProviderInfo>>;
        /// A version number for `op`, to be published with `attrs` (see [`Attrs`]); with
        /// `expect_size`, only if the blob's size after every version assigned so far is
        /// that (an append at a known offset), else a `PreconditionFailed` error.
        Assign {
            blob: BlobId,
            op: WriteOp,
            attrs: Attrs,
            expect_size: Option<u64>,
            /// What the version refers to, and since when ([`DataAge`]): garbage collection
            /// must not have been allowed to delete it.
            data: DataAge,
        } -> Assignment, once;
        /// The writer stored its chunks and metadata; answered once the version is published.
        Complete { blob: BlobId, version: Version } -> VersionInfo;
        /// The writer cannot finish `version` (storing its data or metadata failed): it and
        /// the versions assigned after it are given up now instead of when its lease runs out.
        AbortVersion { blob: BlobId, version: Version } -> ();
        /// A version's record (`None`: the latest published).
        GetVersion { blob: BlobId, version: Option<Version> } -> VersionInfo;
        /// The retained published versions numbered above `after`, the first `limit` (at
        /// most [`MAX_LISTING`]; fewer: the last page), with the aborted ranges that start
        /// among the versions the page covers.
        ListVersions { blob: BlobId, after: Version, limit: u32 } -> VersionList;
        /// The retained published versions of a blob with their attributes, from `from` on
        /// in its order, the first `limit` (at most [`MAX_ATTRS_LISTING`]; fewer: the last
        /// page).
        VersionsAttrs {
            blob: BlobId,
            from: VersionsFrom,
            limit: u32,
        } -> Vec<(VersionInfo, Attrs)>;
        /// Sets a blob's retention policy.
        SetRetention { blob: BlobId, retention: Retention } -> BlobInfo;

        // ---- namespace (paths are `/`-separated; parents of new entries are implicit)
        /// Creates a directory; with `parents`, missing parents too and an existing
        /// directory is accepted.
        FsMkdir { path: String, parents: bool } -> FsEntry, once;
        /// Creates a file backed by a new blob; an existing file is returned unless
        /// `exclusive`. A new file is invisible until its blob's first version is published,
        /// which makes it (and its missing parents) appear in the same transaction; another
        /// non-exclusive create of it meanwhile answers the same blob.
        FsCreate {
            path: String,
            chunk_size: u64,
            replication: u32,
            exclusive: bool,
        } -> FsEntry, once;
        FsStat { path: String } -> FsEntry;
        /// Entries under directory `path` in path order: its children, or with `recursive`
        /// every descendant; only paths after `start_after`, at most `limit`.
        FsList {
            path: String,
            recursive: bool,
            start_after: Option<String>,
            limit: u32,
        } -> Vec<FsEntry>;
        /// [`FsList`] with the attributes of each file's latest published version.
        FsListAttrs {
            path: String,
            recursive: bool,
            start_after: Option<String>,
            limit: u32,
        } -> Vec<(FsEntry, Attrs)>;
        /// The file at `path`, one of its versions (`None`: the latest published) and that
        /// version's attributes, in one round trip.
        FsObject { path: String, version: Option<Version> } -> ObjectInfo;
        /// Moves a file or a directory tree; an existing file at `to` is replaced.
        FsRename { from: String, to: String } -> (), once;
        FsDelete { path: String, recursive: bool } -> (), once;

        // ---- provider registry
        /// A provider joins (a new id when `id` is `None`). `key`: drawn once per data
        /// directory; a registration sent again after its answer was lost (the manager may
        /// have taken it) gets the id the key was given, not one more. `cluster`: the
        /// cluster its data belongs to (`None` before its first registration); another
        /// cluster's provider is refused with `PreconditionFailed`, before its chunks could
        /// be taken for garbage.
        Register {
            id: Option<ProviderId>,
            key: u128,
            addr: String,
            report: ProviderReport,
            cluster: Option<ClusterId>,
        } -> Joined;
        Heartbeat { id: ProviderId, report: ProviderReport } -> ();
        ListProviders {} -> Vec<ProviderInfo>;
        /// Where repair put copies of these chunks (a chunk's replica set as repair last
        /// recorded it; empty when repair never touched the chunk). Readers ask when every
        /// replica its metadata names fails.
        ChunkReplicas { chunks: Vec<ChunkId> } -> Vec<Vec<ProviderId>>;
        /// Starts draining the provider at `addr` (no new data; repair moves its data).
        DrainProvider { addr: String } -> ProviderInfo;
        /// Forgets a provider that is drained or down for good, so it leaves the DHT ring and
        /// the registry. Refused while it holds data no other provider has.
        RemoveProvider { addr: String } -> ();
        /// The cluster at a glance.
        GetStatus {} -> ClusterStatus;

        // ---- added later: new requests go last, so the variants before keep their numbers
        /// A writer of the new file `path` (backed by `blob`, as its `FsCreate` answered)
        /// gives it up having published nothing; the file, invisible until its first
        /// version, is dropped once no writer holds it. Anything else at `path` is left alone.
        FsAbandon { path: String, blob: BlobId } -> (), once;
        /// Deletes a blob made with [`CreateBlob`]: its records go, a tombstone stays, and
        /// garbage collection reclaims its data after the grace. A blob that backs a file
        /// (or a new file being written) is refused with `PreconditionFailed` naming the
        /// path: files go with `FsDelete`. An unknown or already deleted blob: `NotFound`.
        DeleteBlob { blob: BlobId } -> (), once;
        /// [`FsCreate`] whose new file gets `retention` instead of the policy of the
        /// directory it is created in (`None`: that policy, as `FsCreate`). An existing
        /// file keeps its own.
        FsCreateRetained {
            path: String,
            chunk_size: u64,
            replication: u32,
            exclusive: bool,
            retention: Option<Retention>,
        } -> FsEntry, once;
        /// The retention policy of a file, or the one a directory gives the files created
        /// below it, and where it comes from.
        FsGetRetention { path: String } -> FsRetention;
        /// Sets a file's policy (applied at once), or the one a directory gives the files
        /// created below it from now on (files already there keep theirs). `None` on a
        /// directory: it follows its parent again; a file must have a policy.
        FsSetRetention { path: String, retention: Option<Retention> } -> FsRetention, once;

        // ---- topology (DataSteward: measured network, dedicated storage nodes)
        /// A compute-only node's `tomus agent` announces itself (again every few seconds,
        /// like a heartbeat): `name` for the matrix, `addr` where it answers probes.
        RegisterAgent { name: String, addr: String } -> ();
        /// Measures the throughput between every ordered pair of live nodes (providers and
        /// agents): `rounds` samples per pair, each a probe of `duration_ms`, the pairs of a
        /// round probed `parallel` at a time with no node in two probes at once, rounds one
        /// after the other so a pair's samples are spread in time. Stores and answers the
        /// matrix.
        MeasureTopology { rounds: u32, duration_ms: u32, parallel: u32, frame_bytes: u32 } -> TopologyMatrix, once;
        /// The matrix last measured (`None`: never measured).
        GetTopology {} -> Option<TopologyMatrix>;
        // ---- registered files (workflows)
        /// Records that the provider at `holder_addr` holds `size` bytes as `name` in its
        /// `registered` directory, as the immutable file `path` (missing parents are made).
        /// A registered file already at `path` with the same size (and checksum, when both
        /// are known) gains the holder; anything else there is `AlreadyExists`.
        FsRegister {
            path: String,
            size: u64,
            checksum: Option<u32>,
            holder_addr: String,
            name: String,
            hints: Vec<(String, String)>,
        } -> RegisteredFile, once;
        /// The record of the registered file `path`, holders with their current addresses.
        FsRegistered { path: String } -> RegisteredFile;
        /// The first holder computed the checksum of `path` (its copy `name`): recorded when
        /// none is yet; a different one already recorded is `Corrupt`.
        FsSetChecksum { path: String, name: String, checksum: u32 } -> (), once;
        /// A reader found the copy of `provider` damaged: it stops being a holder.
        FsDropHolder { path: String, provider: ProviderId } -> RegisteredFile, once;

        // ---- dedicated storage nodes (DataSteward): storage classes and placement plans
        /// [`CreateBlob`] in a storage class.
        CreateBlobIn { chunk_size: u64, replication: u32, storage: StorageClass } -> BlobInfo, once;
        /// [`FsCreateRetained`] whose new file's blob is in `storage`; an existing file keeps
        /// its own class.
        FsCreateIn {
            path: String,
            chunk_size: u64,
            replication: u32,
            exclusive: bool,
            retention: Option<Retention>,
            storage: StorageClass,
        } -> FsEntry, once;
        /// The storage class of a blob (writers ask once per blob: it decides the ids of its
        /// chunks, see `ChunkId::MEMORY_TAG`).
        BlobStorage { blob: BlobId } -> StorageClass;
        /// A provider's memory-class store, sent with its heartbeats when it has one.
        MemoryReport { id: ProviderId, capacity: u64, used: u64, chunks: u64 } -> ();
        /// The memory-class stores of the live providers.
        MemoryStatus {} -> Vec<MemoryUsage>;
        /// Sets (or with `None` clears) the placement plan: a writer's chunks go first to the
        /// storage node of its cluster. The manager resolves the names to hosts and answers
        /// the plan it stored.
        SetPlacementPlan { plan: Option<PlacementPlan> } -> Option<PlacementPlan>, once;
        GetPlacementPlan {} -> Option<PlacementPlan>;

        // ---- consistent listings
        /// [`FsList`] read from one snapshot of the tree, held for the pages of one listing:
        /// the first page (`snapshot: None`) takes it and, unless it is also the last, answers
        /// its id; each later page names it. A listing of many pages then shows the tree as
        /// of one moment: a file moved meanwhile is listed once, at one of its paths. A
        /// snapshot idle for a minute (or pushed out by newer ones) is dropped; naming it
        /// then is `PreconditionFailed`, and the listing starts again.
        FsListSnapshot {
            path: String,
            recursive: bool,
            snapshot: Option<u64>,
            start_after: Option<String>,
            limit: u32,
        } -> FsSnapshotPage;
    }
}
