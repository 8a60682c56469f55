//! The manager's RPC service: dispatches requests to the version manager, the namespace, the
//! registry and the store.

use std::sync::Arc;

use tomus_wire::maintenance::*;
use tomus_wire::manager::*;
use tomus_wire::{
    check_count, check_page, wrong_service, ClusterSecret, ClusterStatus, Envelope, Error,
    ErrorKind, Handler, Holder, Joined, Placement, RegisteredFile, Reply, Result, Retention,
    StorageClass, MAX_ADDR_LEN, MAX_ALLOCATE, MAX_ATTRS_LISTING, MAX_ITEMS, MAX_LISTING,
};

use crate::disk_reserve::DiskReserve;
use crate::namespace::registered::{Registration, Stored};
use crate::namespace::Namespace;
use crate::placement::place;
use crate::registry::Registry;
use crate::steward::{host_part, Steward};
use crate::store::Store;
use crate::topology::Topology;
use crate::versions::VersionManager;

pub struct ManagerService {
    pub versions: Arc<VersionManager>,
    pub namespace: Arc<Namespace>,
    pub registry: Arc<Registry>,
    /// For the chunk replica overlay, which only the service reads and writes.
    pub store: Arc<Store>,
    /// The committer, leases and retention, for `tomus status`.
    pub workers: tomus_worker::Workers,
    /// Agents, and the measured network (`tomus topology`).
    pub topology: Arc<Topology>,
    /// Storage classes, memory-class room and the placement plan (dedicated storage).
    pub steward: Arc<Steward>,
    /// Free space kept on the manager's disk: requests that start new state wait for it.
    pub reserve: DiskReserve,
}

/// Runs `op` (which commits fsynced transactions) off the async workers: a slow disk sync
/// must not hold up requests that need none.
async fn blocking<T: Send + 'static>(op: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| Error::internal(format!("manager task failed: {e}")))?
}

impl ManagerService {
    /// The service over `store`, its parts opened from it; its background workers are the
    /// caller's to start ([`crate::run`]). `secret` is for probing agents, `provider_timeout`
    /// how long a silent provider counts as up.
    pub fn open(
        store: Arc<Store>,
        workers: tomus_worker::Workers,
        provider_timeout: std::time::Duration,
        secret: Option<ClusterSecret>,
        reserve: DiskReserve,
    ) -> Result<Self> {
        let versions = VersionManager::open(store.clone(), &workers)?;
        let namespace = Arc::new(Namespace::open(store.clone(), versions.clone())?);
        let registry = Arc::new(Registry::open(store.clone(), provider_timeout)?);
        // Drains that were under way before a restart.
        versions.watch_drain(registry.drain_horizon_ms());
        let topology = Arc::new(Topology::new(store.clone(), secret, provider_timeout));
        let steward = Arc::new(Steward::open(store.clone())?);
        Ok(ManagerService {
            versions,
            namespace,
            registry,
            store,
            workers,
            topology,
            steward,
            reserve,
        })
    }

    /// Runs a lookup of one path on the async worker that received it. It is a redb read
    /// transaction, which never waits for a commit's sync, over pages redb keeps cached: a few
    /// microseconds, where a hand-off to the blocking pool and back costs two thread switches
    /// (under 4 KiB S3 GETs, which each look their object up, those switches were most of the
    /// manager's CPU).
    fn lookup<T>(&self, op: impl FnOnce(&Namespace) -> Result<T>) -> Result<T> {
        op(&self.namespace)
    }

    /// Runs a namespace operation (an fsynced transaction) off the async workers.
    async fn namespace<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Namespace) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let ns = self.namespace.clone();
        blocking(move || op(&ns)).await
    }

    /// New blobs need as many providers that can take data (alive, not draining) as their
    /// replication.
    fn check_replication(&self, replication: u32) -> Result<()> {
        let usable = self.registry.usable();
        if replication as usize > usable.max(1) {
            return Err(Error::invalid(format!(
                "replication {replication} needs at least {replication} live providers that \
                 are not draining; {usable} available"
            )));
        }
        Ok(())
    }

    /// The maintenance service's latest report and when it came (manager ms), as users see
    /// it (`tomus status`, the dashboard): "nothing left" on a draining provider holds only
    /// from a pass that started after every write that may have put data there was
    /// published, so until then it is not shown.
    pub(crate) fn maintenance_seen(&self) -> (tomus_wire::MaintenanceStatus, u64) {
        let (mut maintenance, reported_ms) = self.registry.maintenance();
        if !maintenance.draining.is_empty() {
            let started = maintenance.last_pass_started_ms;
            let settled = self
                .versions
                .drains_settled_at()
                .is_some_and(|t| started > t);
            maintenance
                .draining
                .retain(|(_, left)| *left > 0 || settled);
        }
        (maintenance, reported_ms)
    }

    fn status(&self) -> ClusterStatus {
        let (maintenance, maintenance_reported_ms) = self.maintenance_seen();
        ClusterStatus {
            providers: self.registry.list(),
            blobs: self.versions.blob_count() as u64,
            provider_timeout_ms: self.registry.timeout().as_millis() as u64,
            maintenance,
            maintenance_reported_ms,
            workers: self.workers.statuses(),
            now_ms: tomus_wire::now_ms(),
            manager_disk: self.reserve.state(),
            cluster: self.store.cluster_id(),
        }
    }

    async fn manager(&self, req: ManagerRequest) -> Reply {
        use ManagerRequest as M;
        let admitted = if starts_new_state(&req) {
            self.reserve.check()
        } else if changes_state(&req) {
            self.reserve.check_dir()
        } else {
            Ok(())
        };
        if let Err(e) = admitted {
            return Reply::error(e);
        }
        match req {
            M::CreateBlob(r) => {
                let r = CreateBlobIn {
                    chunk_size: r.chunk_size,
                    replication: r.replication,
                    storage: StorageClass::Disk,
                };
                Reply::of::<CreateBlob>(self.create_blob(r).await)
            }
            M::CreateBlobIn(r) => Reply::of::<CreateBlobIn>(self.create_blob(r).await),
            M::FsCreateIn(r) => Reply::of::<FsCreateIn>(self.fs_create_in(r).await),
            // A cached class or a read transaction: a lookup like the namespace's.
            M::BlobStorage(r) => Reply::of::<BlobStorage>(self.steward.class(r.blob)),
            M::MemoryReport(r) => {
                self.steward
                    .report_memory(r.id, r.capacity, r.used, r.chunks);
                Reply::of::<MemoryReport>(Ok(()))
            }
            M::MemoryStatus(_) => {
                let alive: Vec<_> = self
                    .registry
                    .list()
                    .into_iter()
                    .filter(|p| p.alive)
                    .collect();
                Reply::of::<MemoryStatus>(Ok(self.steward.memory_status(&alive)))
            }
            M::SetPlacementPlan(r) => {
                // Names resolved here (the matrix read is quick), stored off the workers.
                let hosts: std::collections::HashMap<String, String> = r
                    .plan
                    .iter()
                    .flat_map(|p| &p.clusters)
                    .flat_map(|c| std::iter::once(&c.storage).chain(&c.members))
                    .take(MAX_ITEMS + 1)
                    .map(|n| (n.clone(), self.host_of_node(n)))
                    .collect();
                let steward = self.steward.clone();
                let set =
                    move || steward.set_plan(r.plan, |n| hosts.get(n).cloned().unwrap_or_default());
                Reply::of::<SetPlacementPlan>(blocking(set).await)
            }
            M::GetPlacementPlan(_) => Reply::of::<GetPlacementPlan>(Ok(self.steward.plan())),
            M::GetBlob(r) => Reply::of::<GetBlob>(self.versions.blob_info(r.blob)),
            M::ListBlobs(r) => Reply::of::<ListBlobs>(
                check_page("blobs", r.limit, MAX_LISTING)
                    .map(|limit| self.versions.list_blobs(r.after, limit)),
            ),
            M::Allocate(r) => Reply::of::<Allocate>(self.allocate(r)),
            M::Assign(r) => Reply::of::<Assign>(
                self.versions
                    .assign(r.blob, r.op, r.attrs, r.expect_size, r.data)
                    .await,
            ),
            M::Complete(r) => {
                Reply::of::<Complete>(self.versions.complete(r.blob, r.version).await)
            }
            M::AbortVersion(r) => {
                let versions = self.versions.clone();
                let abort = move || versions.abort(r.blob, r.version);
                Reply::of::<AbortVersion>(blocking(abort).await)
            }
            M::GetVersion(r) => Reply::of::<GetVersion>(self.versions.version(r.blob, r.version)),
            M::ListVersions(r) => Reply::of::<ListVersions>(
                check_page("versions", r.limit, MAX_LISTING)
                    .and_then(|limit| self.versions.versions(r.blob, r.after, limit)),
            ),
            M::VersionsAttrs(r) => Reply::of::<VersionsAttrs>(
                check_page("versions with attributes", r.limit, MAX_ATTRS_LISTING)
                    .and_then(|limit| self.versions.versions_attrs(r.blob, r.from, limit)),
            ),
            M::SetRetention(r) => {
                let versions = self.versions.clone();
                let set = move || versions.set_retention(r.blob, r.retention);
                Reply::of::<SetRetention>(blocking(set).await)
            }
            M::FsMkdir(r) => {
                Reply::of::<FsMkdir>(self.namespace(move |ns| ns.mkdir(&r.path, r.parents)).await)
            }
            M::FsCreate(r) => {
                let r = FsCreateRetained {
                    path: r.path,
                    chunk_size: r.chunk_size,
                    replication: r.replication,
                    exclusive: r.exclusive,
                    retention: None,
                };
                Reply::of::<FsCreate>(self.fs_create(r).await)
            }
            M::FsCreateRetained(r) => Reply::of::<FsCreateRetained>(self.fs_create(r).await),
            M::FsGetRetention(r) => {
                Reply::of::<FsGetRetention>(self.namespace(move |ns| ns.retention(&r.path)).await)
            }
            M::FsSetRetention(r) => Reply::of::<FsSetRetention>(
                self.namespace(move |ns| ns.set_retention(&r.path, r.retention))
                    .await,
            ),
            M::RegisterAgent(r) => {
                Reply::of::<RegisterAgent>(self.topology.register(r.name, r.addr))
            }
            M::MeasureTopology(r) => {
                let nodes = self.topology.nodes(&self.registry);
                Reply::of::<MeasureTopology>(self.topology.measure(nodes, r).await)
            }
            M::GetTopology(_) => {
                let topology = self.topology.clone();
                Reply::of::<GetTopology>(blocking(move || topology.get()).await)
            }
            M::FsAbandon(r) => {
                Reply::of::<FsAbandon>(self.namespace(move |ns| ns.abandon(&r.path, r.blob)).await)
            }
            M::DeleteBlob(r) => {
                Reply::of::<DeleteBlob>(self.namespace(move |ns| ns.delete_blob(r.blob)).await)
            }
            M::FsStat(r) => Reply::of::<FsStat>(self.lookup(|ns| ns.stat(&r.path))),
            M::FsList(r) => Reply::of::<FsList>(
                self.namespace(move |ns| {
                    let limit = r.limit.min(MAX_LISTING);
                    ns.list(&r.path, r.recursive, r.start_after.as_deref(), limit)
                })
                .await,
            ),
            M::FsListSnapshot(r) => Reply::of::<FsListSnapshot>(
                self.namespace(move |ns| {
                    let limit = r.limit.min(MAX_LISTING);
                    let after = r.start_after.as_deref();
                    ns.list_snapshot(&r.path, r.recursive, r.snapshot, after, limit)
                })
                .await,
            ),
            M::FsListAttrs(r) => Reply::of::<FsListAttrs>(
                self.namespace(move |ns| {
                    let limit = r.limit.min(MAX_LISTING);
                    ns.list_attrs(&r.path, r.recursive, r.start_after.as_deref(), limit)
                })
                .await,
            ),
            M::FsObject(r) => {
                Reply::of::<FsObject>(self.lookup(|ns| ns.object(&r.path, r.version)))
            }
            M::FsRename(r) => {
                Reply::of::<FsRename>(self.namespace(move |ns| ns.rename(&r.from, &r.to)).await)
            }
            M::FsDelete(r) => Reply::of::<FsDelete>(
                self.namespace(move |ns| ns.delete(&r.path, r.recursive))
                    .await,
            ),
            M::Register(r) => Reply::of::<Register>(self.register(r).await),
            M::Heartbeat(r) => Reply::of::<Heartbeat>(self.registry.heartbeat(r.id, r.report)),
            M::ListProviders(_) => Reply::of::<ListProviders>(Ok(self.registry.list())),
            M::ChunkReplicas(r) => Reply::of::<ChunkReplicas>(
                check_count("chunks", r.chunks.len(), MAX_ITEMS)
                    .and_then(|()| self.store.chunk_replicas(&r.chunks)),
            ),
            M::DrainProvider(r) => {
                let registry = self.registry.clone();
                let drained = blocking(move || registry.drain(&r.addr)).await;
                self.versions.watch_drain(self.registry.drain_horizon_ms());
                Reply::of::<DrainProvider>(drained)
            }
            M::RemoveProvider(r) => {
                let registry = self.registry.clone();
                let versions = self.versions.clone();
                let removed = blocking(move || {
                    versions.remove_drained(|settled| registry.remove(&r.addr, settled))
                })
                .await;
                Reply::of::<RemoveProvider>(removed.map(|_| ()))
            }
            M::GetStatus(_) => Reply::of::<GetStatus>(Ok(self.status())),
            M::FsRegister(r) => Reply::of::<FsRegister>(self.fs_register(r).await),
            M::FsRegistered(r) => {
                let found = self.namespace(move |ns| ns.registered(&r.path)).await;
                Reply::of::<FsRegistered>(found.map(|(p, s)| self.registered_file(p, s)))
            }
            M::FsSetChecksum(r) => Reply::of::<FsSetChecksum>(
                self.namespace(move |ns| ns.set_checksum(&r.path, &r.name, r.checksum))
                    .await,
            ),
            M::FsDropHolder(r) => {
                let found = self
                    .namespace(move |ns| ns.drop_holder(&r.path, r.provider))
                    .await;
                Reply::of::<FsDropHolder>(found.map(|(p, s)| self.registered_file(p, s)))
            }
        }
    }

    async fn maintenance(&self, req: MaintenanceRequest) -> Reply {
        use MaintenanceRequest as M;
        match req {
            M::ReportMaintenance(r) => {
                Reply::of::<ReportMaintenance>(self.registry.report_maintenance(*r.status))
            }
            M::RecordReplicas(r) => {
                if let Err(e) = check_replica_sets(&r.entries) {
                    return Reply::error(e);
                }
                let store = self.store.clone();
                let record = move || store.record_replicas(&r.entries);
                Reply::of::<RecordReplicas>(blocking(record).await)
            }
            M::Changes(r) => {
                let store = self.store.clone();
                let limit = r.limit.min(MAX_LISTING) as usize;
                Reply::of::<Changes>(blocking(move || store.changes(r.after, limit)).await)
            }
            M::TrimChanges(r) => {
                let store = self.store.clone();
                Reply::of::<TrimChanges>(blocking(move || store.trim_changes(r.upto)).await)
            }
            M::GrantCutoffs(r) => {
                let versions = self.versions.clone();
                let grant = move || versions.grant_cutoffs(r.proposed);
                Reply::of::<GrantCutoffs>(blocking(grant).await)
            }
            M::TakeLostChunks(_) => Reply::of::<TakeLostChunks>(Ok(self.registry.take_lost())),
            M::Fates(r) => {
                if let Err(e) = check_count("versions", r.items.len(), MAX_ITEMS) {
                    return Reply::error(e);
                }
                let versions = self.versions.clone();
                Reply::of::<Fates>(blocking(move || versions.fates(&r.items)).await)
            }
        }
    }

    /// Registers a file held by the provider at `r.holder_addr` (see `namespace/registered.rs`).
    async fn fs_register(&self, r: FsRegister) -> Result<RegisteredFile> {
        let holder = self
            .registry
            .list()
            .into_iter()
            .find(|p| p.addr == r.holder_addr)
            .ok_or_else(|| {
                Error::not_found(format!("no provider is registered at {}", r.holder_addr))
            })?;
        let registration = Registration {
            path: r.path,
            size: r.size,
            checksum: r.checksum,
            holder: holder.id,
            name: r.name,
            hints: r.hints,
        };
        let (path, stored) = self.namespace(move |ns| ns.register(registration)).await?;
        Ok(self.registered_file(path, stored))
    }

    /// A stored record as readers need it: holders with their current addresses.
    fn registered_file(&self, path: String, s: Stored) -> RegisteredFile {
        let providers = self.registry.list();
        let holders = s
            .holders
            .into_iter()
            .map(|(id, name)| {
                let p = providers.iter().find(|p| p.id == id);
                Holder {
                    provider: id,
                    addr: p.map(|p| p.addr.clone()).unwrap_or_default(),
                    alive: p.is_some_and(|p| p.alive),
                    name,
                }
            })
            .collect();
        RegisteredFile {
            path,
            size: s.size,
            checksum: s.checksum,
            holders,
            hints: s.hints,
            created_ms: s.created_ms,
        }
    }

    async fn register(&self, r: Register) -> Result<Joined> {
        if r.addr.is_empty() || r.addr.len() > MAX_ADDR_LEN || !r.addr.contains(':') {
            return Err(Error::invalid(format!(
                "a provider registers with its host:port (at most {MAX_ADDR_LEN} bytes)"
            )));
        }
        let cluster = self.store.cluster_id();
        if let Some(theirs) = r.cluster.filter(|&c| c != cluster) {
            tracing::error!(
                "refused provider {} (at {}): its data belongs to cluster {theirs:016x}, this \
                 manager's is {cluster:016x}",
                r.id.map_or("(new)".to_string(), |id| id.to_string()),
                r.addr
            );
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "this provider's data belongs to cluster {theirs:016x}, but the manager \
                     serves cluster {cluster:016x} (was the manager started on another or an \
                     emptied data directory?); it does not join, so its chunks are not taken \
                     for garbage. Point it at its own cluster's manager, or give it a new data \
                     directory to join this one"
                ),
            ));
        }
        let registry = self.registry.clone();
        let id = blocking(move || registry.register(r.id, r.key, r.addr, r.report)).await?;
        Ok(Joined { id, cluster })
    }

    async fn create_blob(&self, r: CreateBlobIn) -> Result<tomus_wire::BlobInfo> {
        self.check_replication(r.replication)?;
        self.check_class(r.storage)?;
        let versions = self.versions.clone();
        let steward = self.steward.clone();
        blocking(move || {
            let info = versions.create_blob(r.chunk_size, r.replication, Retention::KeepAll)?;
            steward.set_class(info.id, r.storage)?;
            Ok(info)
        })
        .await
    }

    /// A class new data can be created in: the memory class needs providers that keep it.
    fn check_class(&self, class: StorageClass) -> Result<()> {
        if class == StorageClass::Memory
            && self
                .steward
                .memory_candidates(self.registry.candidates(), self.registry.timeout())
                .is_empty()
        {
            return Err(Error::new(
                ErrorKind::NoSpace,
                "no live provider keeps memory-class chunks (start providers with \
                 --memory-class SIZE)",
            ));
        }
        Ok(())
    }

    /// [`FsCreateIn`]: the new file's blob gets the class; an existing file keeps its own,
    /// also one another writer created and has not written yet (it chose its chunks' class
    /// from the class the file had when it asked).
    async fn fs_create_in(&self, r: FsCreateIn) -> Result<tomus_wire::FsEntry> {
        self.check_class(r.storage)?;
        let storage = r.storage;
        let (entry, made) = self
            .fs_create_or_open(FsCreateRetained {
                path: r.path,
                chunk_size: r.chunk_size,
                replication: r.replication,
                exclusive: r.exclusive,
                retention: r.retention,
            })
            .await?;
        if let Some(blob) = entry.blob.as_ref().filter(|_| made) {
            let steward = self.steward.clone();
            let id = blob.id;
            blocking(move || steward.set_class(id, storage)).await?;
        }
        Ok(entry)
    }

    /// The host of a plan's node name: from the measured matrix, the agents, or the name.
    fn host_of_node(&self, name: &str) -> String {
        if let Ok(Some(m)) = self.topology.get() {
            if let Some(i) = m.nodes.iter().position(|n| n == name) {
                if let Some(addr) = m.addrs.get(i) {
                    return host_part(addr);
                }
            }
        }
        match self.topology.agent_addr(name) {
            Some(addr) => host_part(&addr),
            None => host_part(name),
        }
    }

    async fn fs_create(&self, r: FsCreateRetained) -> Result<tomus_wire::FsEntry> {
        Ok(self.fs_create_or_open(r).await?.0)
    }

    /// [`FsCreateRetained`], and whether this call made the file.
    async fn fs_create_or_open(&self, r: FsCreateRetained) -> Result<(tomus_wire::FsEntry, bool)> {
        self.check_replication(r.replication)?;
        // Opening a file that exists is a lookup; only a creation needs the namespace's lock
        // and, for a new file, a transaction.
        if !r.exclusive {
            if let Some(entry) = self.lookup(|ns| ns.existing_file(&r.path))? {
                return Ok((entry, false));
            }
        }
        self.namespace(move |ns| {
            ns.create(
                &r.path,
                r.chunk_size,
                r.replication,
                r.exclusive,
                r.retention,
            )
        })
        .await
    }

    fn allocate(&self, r: Allocate) -> Result<Vec<Vec<tomus_wire::ProviderInfo>>> {
        check_count("chunk placements", r.chunks as usize, MAX_ALLOCATE as usize)?;
        if r.chunk_bytes == Some(0) {
            return Err(Error::invalid("placements for chunks of 0 bytes"));
        }
        let (blob_chunk_size, replication) = self.versions.chunk_size(r.blob)?;
        let chunk_size = r
            .chunk_bytes
            .unwrap_or(blob_chunk_size)
            .min(blob_chunk_size);
        check_count("providers to avoid", r.avoid.len(), MAX_ITEMS)?;
        let memory = self.steward.class(r.blob)? == StorageClass::Memory;
        let mut candidates = self.registry.candidates();
        if memory {
            candidates = self
                .steward
                .memory_candidates(candidates, self.registry.timeout());
        }
        // With a placement plan, the first replica goes to the storage node of the writer's
        // cluster: the `Local` policy aimed at that node's host.
        let (policy, host) = match self.steward.preferred_host(r.client_host.as_deref()) {
            Some(host) => (Placement::Local, Some(host)),
            None => (r.placement, r.client_host.clone()),
        };
        let others = candidates
            .iter()
            .filter(|(p, _)| !r.avoid.contains(&p.id))
            .count();
        if others >= replication as usize {
            candidates.retain(|(p, _)| !r.avoid.contains(&p.id));
        }
        let placed = place(
            &mut candidates,
            chunk_size,
            r.chunks,
            replication,
            policy,
            host.as_deref(),
        )
        .map_err(|e| match e.kind {
            ErrorKind::NoSpace if memory => {
                Error::new(e.kind, format!("memory storage class: {}", e.message))
            }
            ErrorKind::NoSpace | ErrorKind::Unavailable => Error::new(
                e.kind,
                format!("{} ({})", e.message, self.registry.states_summary()),
            ),
            _ => e,
        })?;
        let charged: Vec<_> = placed
            .iter()
            .flatten()
            .map(|p| (p.id, chunk_size))
            .collect();
        if memory {
            self.steward.charge_memory(&charged);
        } else {
            self.registry.charge(&charged);
        }
        Ok(placed)
    }
}

/// Whether `req` starts new state (a blob, a file, a directory, a version, chunk
/// placements): such requests wait for the manager's disk reserve. Completions of writes
/// under way, deletions, renames and settings do not (they are what frees space, or small and
/// bounded by the writes already admitted).
fn starts_new_state(req: &ManagerRequest) -> bool {
    use ManagerRequest as M;
    matches!(
        req,
        M::CreateBlob(_)
            | M::CreateBlobIn(_)
            | M::Allocate(_)
            | M::Assign(_)
            | M::FsMkdir(_)
            | M::FsCreate(_)
            | M::FsCreateIn(_)
            | M::FsCreateRetained(_)
            | M::FsRegister(_)
    )
}

/// Whether `req` may change the manager's durable state; the others read it, or report what
/// lives in memory only (heartbeats, memory usage), and are served even with the data
/// directory gone. Listed as the reads so that a new request is guarded by default.
fn changes_state(req: &ManagerRequest) -> bool {
    use ManagerRequest as M;
    !matches!(
        req,
        M::GetBlob(_)
            | M::ListBlobs(_)
            | M::GetVersion(_)
            | M::ListVersions(_)
            | M::VersionsAttrs(_)
            | M::FsStat(_)
            | M::FsList(_)
            | M::FsListAttrs(_)
            | M::FsListSnapshot(_)
            | M::FsObject(_)
            | M::FsGetRetention(_)
            | M::FsRegistered(_)
            | M::Heartbeat(_)
            | M::ListProviders(_)
            | M::ChunkReplicas(_)
            | M::GetStatus(_)
            | M::GetTopology(_)
            | M::BlobStorage(_)
            | M::MemoryReport(_)
            | M::MemoryStatus(_)
            | M::GetPlacementPlan(_)
    )
}

/// Replica sets repair records: a bounded number, each no larger than any replication.
fn check_replica_sets(
    entries: &[(tomus_metadata::ChunkId, Vec<tomus_metadata::ProviderId>)],
) -> Result<()> {
    check_count("replica sets", entries.len(), MAX_ITEMS)?;
    let widest = entries.iter().map(|(_, set)| set.len()).max().unwrap_or(0);
    check_count(
        "replicas per chunk",
        widest,
        crate::versions::MAX_REPLICATION as usize,
    )
}

impl Handler for ManagerService {
    async fn handle(&self, req: Envelope, _body: bytes::Bytes) -> Reply {
        match req {
            Envelope::Manager(r) => self.manager(r).await,
            Envelope::Maintenance(r) => self.maintenance(r).await,
            other => wrong_service("manager", &other),
        }
    }
}
