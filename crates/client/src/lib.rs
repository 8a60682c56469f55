//! The tomus client library: the blob API over a cluster (used by the CLI, the Python package
//! and the S3 gateway).
//!
//! A write stores its chunks in parallel on providers chosen by the manager, then gets a
//! version, builds and stores that version's metadata nodes in the DHT, and reports completion;
//! it returns once the version is published. Reads walk the tree of a published version and
//! fetch chunk pieces in parallel, failing over between replicas.

pub mod chunks;
pub mod cluster;
pub mod dht;
pub mod namespace;
pub mod placements;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};
use tomus_metadata::{
    build_version, resolve_range, BlobId, ChunkId, ChunkPiece, InFlight, NodeRef, PublishedTree,
    Segment, Span, StoredChunk, Version, WritePlan,
};
use tomus_wire::{
    unexpected, Assignment, Attrs, BlobInfo, ClusterSecret, Error, ErrorKind, Placement, Pool,
    ProviderInfo, Request, Response, Result, RpcConfig, VersionInfo, VersionList, WriteOp,
};

use crate::cluster::Cluster;
use crate::dht::DhtSource;

pub use namespace::{CreateOptions, Namespace};
pub use tomus_wire;

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub secret: Option<ClusterSecret>,
    pub placement: Placement,
    /// Chunk transfers in flight per read or write call.
    pub parallelism: usize,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            secret: None,
            placement: Placement::Balanced,
            parallelism: 16,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

/// A connection to a tomus cluster. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Client {
    cluster: Arc<Cluster>,
    options: Arc<ClientOptions>,
    host: Option<String>,
    small_placements: Arc<placements::PlacementCache>,
}

/// Where a range of a blob version is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub offset: u64,
    pub size: u64,
    /// Provider addresses holding the range (empty: a hole, reads as zeros).
    pub providers: Vec<String>,
}

impl Client {
    /// Connects to the manager at `addr` (checks that it answers).
    pub async fn connect(addr: &str, options: ClientOptions) -> Result<Client> {
        let pool = Pool::new(RpcConfig {
            connect_timeout: options.connect_timeout,
            request_timeout: options.request_timeout,
            secret: options.secret.clone(),
        });
        let cluster = Arc::new(Cluster::new(addr.to_string(), pool));
        match cluster.manager_call(&Request::Ping).await? {
            Response::Ok => {}
            other => return Err(unexpected(&other)),
        }
        Ok(Client {
            host: local_host_towards(addr),
            cluster,
            options: Arc::new(options),
            small_placements: Arc::default(),
        })
    }

    pub fn manager_addr(&self) -> &str {
        &self.cluster.manager
    }

    /// One request to the manager, for operations without a method of their own (status,
    /// drain, retention).
    pub async fn manager_call(&self, req: &Request) -> Result<Response> {
        self.cluster.manager_call(req).await?.into_result()
    }

    /// One request to the provider at `addr` (scrub).
    pub async fn provider_call(&self, addr: &str, req: &Request) -> Result<Response> {
        Ok(self.cluster.pool.call(addr, req, &[]).await?.0)
    }

    pub async fn create_blob(&self, chunk_size: u64, replication: u32) -> Result<Blob> {
        let req = Request::CreateBlob {
            chunk_size,
            replication,
        };
        match self.cluster.manager_call(&req).await? {
            Response::Blob(info) => Ok(self.blob_handle(info)),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn open_blob(&self, id: BlobId) -> Result<Blob> {
        Ok(self.blob_handle(self.blob_info(id).await?))
    }

    pub async fn blob_info(&self, id: BlobId) -> Result<BlobInfo> {
        match self
            .cluster
            .manager_call(&Request::BlobInfo { blob: id })
            .await?
        {
            Response::Blob(info) => Ok(info),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn list_blobs(&self) -> Result<Vec<BlobInfo>> {
        match self.cluster.manager_call(&Request::ListBlobs).await? {
            Response::Blobs(b) => Ok(b),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn providers(&self) -> Result<Vec<ProviderInfo>> {
        self.cluster.providers().await
    }

    /// A handle on the blob described by `info` (e.g. from a namespace entry), without asking
    /// the manager.
    pub fn blob(&self, info: &BlobInfo) -> Blob {
        self.blob_handle(info.clone())
    }

    fn blob_handle(&self, info: BlobInfo) -> Blob {
        Blob {
            client: self.clone(),
            id: info.id,
            chunk_size: info.chunk_size,
            replication: info.replication,
        }
    }
}

/// The local address the OS would use to reach `addr`: the writer's host for local placement.
fn local_host_towards(addr: &str) -> Option<String> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.connect(addr).ok()?;
    Some(sock.local_addr().ok()?.ip().to_string())
}

/// What a commit publishes with its version, and the condition it sets.
#[derive(Clone, Debug, Default)]
pub struct CommitOptions {
    /// Attributes published atomically with the version (see [`Attrs`]).
    pub attrs: Attrs,
    /// Commit only if the blob's size after every version assigned so far is this (an append
    /// at a known offset); a `PreconditionFailed` error otherwise, with nothing published.
    pub expect_size: Option<u64>,
}

/// A byte range of a published version of a blob: one source of [`Blob::compose`].
#[derive(Clone)]
pub struct Extent {
    pub blob: Blob,
    pub version: Version,
    pub offset: u64,
    pub len: u64,
}

/// A handle on one blob. Cheap to clone.
#[derive(Clone)]
pub struct Blob {
    client: Client,
    id: BlobId,
    chunk_size: u64,
    replication: u32,
}

impl Blob {
    pub fn id(&self) -> BlobId {
        self.id
    }
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }
    pub fn replication(&self) -> u32 {
        self.replication
    }

    fn cluster(&self) -> &Cluster {
        &self.client.cluster
    }

    /// Writes `data` at `offset` (any offset, any size > 0; past the end leaves a hole of zeros)
    /// and returns the new, published version.
    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<Version> {
        if data.is_empty() {
            return Err(Error::invalid("empty write"));
        }
        if self.is_small(data) {
            let op = WriteOp::Write {
                offset,
                size: data.len() as u64,
            };
            return Ok(self.commit_small(op, data).await?.version);
        }
        let chunks = self.store_chunks(data).await?;
        Ok(self.commit_at(offset, chunks).await?.version)
    }

    /// Appends `data` and returns the new, published version and the offset it landed at.
    pub async fn append(&self, data: &[u8]) -> Result<(Version, u64)> {
        if data.is_empty() {
            return Err(Error::invalid("zero-length append"));
        }
        let op = WriteOp::Append {
            size: data.len() as u64,
        };
        let info = if self.is_small(data) {
            self.commit_small(op, data).await?
        } else {
            let chunks = self.store_chunks(data).await?;
            self.commit(op, chunks).await?
        };
        Ok((info.version, info.span.offset))
    }

    /// Whether `data` is a small write: one chunk, placed from the cache of placements.
    fn is_small(&self, data: &[u8]) -> bool {
        data.len() as u64 <= placements::SMALL_WRITE.min(self.chunk_size)
    }

    /// A small write: its chunk is stored while its version is assigned and its metadata
    /// stored, not before, which takes a round trip and a disk sync off its latency. (Large
    /// writes store their data first, so their version is not held in flight, delaying the
    /// publication of every later version, for the whole transfer.) When the chunk fails to
    /// store, the version is aborted and the write done the long way, with failover to other
    /// providers.
    async fn commit_small(&self, op: WriteOp, data: &[u8]) -> Result<VersionInfo> {
        let replicas = self.small_placement().await?;
        let chunk = chunks::whole_chunk(chunks::new_chunk_id(), data.len() as u64, &replicas);
        let (assigned, stored) = futures::join!(
            self.assign_and_store(op, vec![chunk.clone()], None),
            chunks::put_chunk_as(self.cluster(), chunk.chunk, data, &replicas),
        );
        match (assigned, stored) {
            (Ok(a), Ok(())) => match self.complete(a.version).await {
                // Given up behind a dead writer's version: the chunk is stored, commit again.
                Err(e) if e.kind == ErrorKind::Retry => {
                    self.commit_with(op, vec![chunk], None).await
                }
                other => other,
            },
            (Ok(a), Err(e)) => {
                self.abort(a.version).await;
                if e.kind != ErrorKind::Unavailable {
                    return Err(e);
                }
                // The provider that failed is suspected now: the next placement avoids it.
                tracing::info!("blob {}: {e}; storing the chunk elsewhere", self.id);
                let stored = self.store_chunks(data).await?;
                self.commit_with(op, stored, None).await
            }
            // A chunk stored without a version is collected as garbage after the grace period.
            (Err(e), _) => Err(e),
        }
    }

    /// Makes `data` (possibly empty) the whole content: the new version has `data.len()`
    /// bytes, whatever the previous size. Returns the new version (the latest one when both
    /// old and new content are empty).
    pub async fn replace(&self, data: &[u8]) -> Result<Version> {
        let chunks = if data.is_empty() {
            Vec::new()
        } else {
            self.store_chunks(data).await?
        };
        self.commit_replace(chunks).await
    }

    /// A streaming writer: data is stored chunk by chunk as it comes and becomes one version
    /// when committed (a file written and then closed).
    pub fn writer(&self) -> BlobWriter {
        BlobWriter {
            blob: self.clone(),
            buffer: Vec::new(),
            chunks: Vec::new(),
            in_flight: VecDeque::new(),
        }
    }

    async fn commit_at(&self, offset: u64, chunks: Vec<StoredChunk>) -> Result<VersionInfo> {
        let op = WriteOp::Write {
            offset,
            size: len(&chunks),
        };
        self.commit(op, chunks).await
    }

    /// Makes the concatenation of `sources` the whole new content without copying any data:
    /// the new version's metadata refers to the chunks the sources' bytes are stored in (a
    /// copy or a multipart upload made of metadata only). Returns the new version's record.
    pub async fn compose(
        &self,
        sources: &[Extent],
        options: &CommitOptions,
    ) -> Result<VersionInfo> {
        let resolves: Vec<_> = sources
            .iter()
            .map(|s| async move {
                s.blob
                    .segments(s.offset, s.len, Some(s.version))
                    .await
                    .map(|(_, segs)| segs)
            })
            .collect();
        let resolved: Vec<Vec<Segment>> = stream::iter(resolves)
            .buffered(self.client.options.parallelism)
            .try_collect()
            .await?;
        let chunks: Vec<StoredChunk> = resolved
            .iter()
            .flatten()
            .map(StoredChunk::from_segment)
            .collect();
        self.commit_with(
            WriteOp::Replace { size: len(&chunks) },
            chunks,
            Some(options),
        )
        .await
    }

    async fn commit_replace(&self, chunks: Vec<StoredChunk>) -> Result<Version> {
        let size = len(&chunks);
        if size == 0 {
            let latest = self.stat(None).await?;
            if latest.size == 0 {
                return Ok(latest.version);
            }
        }
        Ok(self
            .commit(WriteOp::Replace { size }, chunks)
            .await?
            .version)
    }

    /// Gets a version for stored `chunks`, stores its metadata and waits for publication.
    async fn commit(&self, op: WriteOp, chunks: Vec<StoredChunk>) -> Result<VersionInfo> {
        self.commit_with(op, chunks, None).await
    }

    /// [`Blob::commit`] with attributes and a condition. A version given up because a lower
    /// version's writer died is committed again (the stored chunks are reused).
    async fn commit_with(
        &self,
        op: WriteOp,
        chunks: Vec<StoredChunk>,
        options: Option<&CommitOptions>,
    ) -> Result<VersionInfo> {
        let mut attempt = 1;
        loop {
            match self.commit_once(op, chunks.clone(), options).await {
                Err(e) if e.kind == ErrorKind::Retry && attempt < COMMIT_ATTEMPTS => {
                    tracing::info!("blob {}: {e}; committing again", self.id);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn commit_once(
        &self,
        op: WriteOp,
        chunks: Vec<StoredChunk>,
        options: Option<&CommitOptions>,
    ) -> Result<VersionInfo> {
        let assignment = self.assign_and_store(op, chunks, options).await?;
        self.complete(assignment.version).await
    }

    /// Gets a version for stored `chunks` and stores its metadata. A version whose metadata
    /// fails to store is aborted, so the writers behind it need not wait for its lease.
    async fn assign_and_store(
        &self,
        op: WriteOp,
        mut chunks: Vec<StoredChunk>,
        options: Option<&CommitOptions>,
    ) -> Result<Assignment> {
        let req = match options {
            None => Request::Assign { blob: self.id, op },
            Some(o) => Request::AssignWith {
                blob: self.id,
                op,
                attrs: o.attrs.clone(),
                expect_size: o.expect_size,
            },
        };
        let assignment = match self.cluster().manager_call(&req).await? {
            Response::Assigned(a) => a,
            other => return Err(unexpected(&other)),
        };
        // A replacement spans the previous content too: what its data does not cover is cleared.
        let data = len(&chunks);
        if assignment.span.size > data {
            chunks.push(StoredChunk {
                chunk: ChunkId::ZEROS,
                len: assignment.span.size - data,
                replicas: Vec::new(),
                chunk_offset: 0,
            });
        }
        if let Err(e) = self.store_metadata(&assignment, &chunks).await {
            self.abort(assignment.version).await;
            return Err(e);
        }
        Ok(assignment)
    }

    /// Waits until `version`, whose chunks and metadata are stored, is published.
    async fn complete(&self, version: Version) -> Result<VersionInfo> {
        let complete = Request::Complete {
            blob: self.id,
            version,
        };
        match self.cluster().manager_call(&complete).await? {
            Response::Version(info) => Ok(info),
            other => Err(unexpected(&other)),
        }
    }

    /// Gives up `version`, which this writer cannot finish. Best effort: should the manager
    /// not hear of it, the version's lease runs out instead.
    async fn abort(&self, version: Version) {
        let req = Request::AbortVersion {
            blob: self.id,
            version,
        };
        if let Err(e) = self.cluster().manager_call(&req).await {
            tracing::info!("blob {}: aborting version {version}: {e}", self.id);
        }
    }

    /// Cuts `data` into chunk-size pieces and stores each on its replica set, in parallel.
    async fn store_chunks(&self, data: &[u8]) -> Result<Vec<StoredChunk>> {
        let cs = self.chunk_size as usize;
        let count = data.len().div_ceil(cs);
        let placements = if count == 1 && data.len() as u64 <= placements::SMALL_WRITE {
            vec![self.small_placement().await?]
        } else {
            self.allocate(count, None).await?
        };
        // Futures are built eagerly (not inside a Stream::map closure) so the borrowed slices
        // keep concrete lifetimes and callers can spawn these calls.
        let puts: Vec<_> =
            data.chunks(cs)
                .zip(placements)
                .map(|(piece, replicas)| async move {
                    self.put_chunk_with_failover(piece, replicas).await
                })
                .collect();
        stream::iter(puts)
            .buffered(self.client.options.parallelism)
            .try_collect()
            .await
    }

    /// Stores one chunk on `replicas`; when a provider fails, on a fresh replica set without
    /// the providers that failed (the manager may not have noticed yet that one is down).
    async fn put_chunk_with_failover(
        &self,
        data: &[u8],
        mut replicas: Vec<ProviderInfo>,
    ) -> Result<StoredChunk> {
        let mut attempt = 1;
        loop {
            match chunks::put_chunk(self.cluster(), data, &replicas).await {
                Err(e) if e.kind == ErrorKind::Unavailable && attempt < CHUNK_ATTEMPTS => {
                    tracing::info!("blob {}: {e}; storing the chunk elsewhere", self.id);
                    attempt += 1;
                    replicas = self.fresh_replicas(data.len() as u64).await?;
                }
                other => return other,
            }
        }
    }

    /// A replica set for one chunk avoiding providers that failed recently: the first of a
    /// few placements that has none.
    async fn fresh_replicas(&self, chunk_bytes: u64) -> Result<Vec<ProviderInfo>> {
        let sets = self
            .allocate(REPLACEMENT_CHOICES, Some(chunk_bytes))
            .await?;
        for set in &sets {
            let ids: Vec<_> = set.iter().map(|p| p.id).collect();
            if self.cluster().writable(&ids).await?.len() == ids.len() {
                return Ok(set.clone());
            }
        }
        sets.into_iter()
            .next()
            .ok_or_else(|| Error::internal("manager returned no placement"))
    }

    /// Replica sets for `count` chunks of at most `chunk_bytes` bytes.
    async fn allocate(
        &self,
        count: usize,
        chunk_bytes: Option<u64>,
    ) -> Result<Vec<Vec<ProviderInfo>>> {
        let req = Request::Allocate {
            blob: self.id,
            chunks: u32::try_from(count).map_err(|_| Error::invalid("write too large"))?,
            chunk_bytes,
            placement: self.client.options.placement,
            client_host: self.client.host.clone(),
        };
        match self.cluster().manager_call(&req).await? {
            Response::Placements(p) if p.len() == count => Ok(p),
            other => Err(unexpected(&other)),
        }
    }

    /// One replica set for a small write, from placements fetched in batches: small appends
    /// would otherwise spend a manager round trip on placement each.
    async fn small_placement(&self) -> Result<Vec<ProviderInfo>> {
        let cache = &self.client.small_placements;
        let avoid = self.cluster().suspected();
        if let Some(p) = cache.take(self.id, &avoid) {
            return Ok(p);
        }
        let batch = self
            .allocate(placements::BATCH, Some(placements::SMALL_WRITE))
            .await?;
        cache.refill(self.id, batch);
        match cache.take(self.id, &avoid) {
            Some(p) => Ok(p),
            // Every new run names a provider that just failed (the manager has not noticed).
            None => self.fresh_replicas(placements::SMALL_WRITE).await,
        }
    }

    async fn store_metadata(&self, a: &Assignment, chunks: &[StoredChunk]) -> Result<()> {
        let in_flight: Vec<InFlight> = a
            .in_flight
            .iter()
            .map(|&(version, span, capacity)| InFlight {
                version,
                span,
                capacity,
            })
            .collect();
        let plan = WritePlan {
            chunk_size: self.chunk_size,
            version: a.version,
            span: a.span,
            capacity: a.capacity,
            chunks,
            published: a
                .published
                .map(|(version, capacity)| PublishedTree { version, capacity }),
            in_flight: &in_flight,
        };
        let source = DhtSource {
            cluster: self.cluster(),
            blob: self.id,
        };
        let nodes = build_version(&plan, &source).await?;
        dht::put_nodes(self.cluster(), self.id, self.replication, nodes).await
    }

    /// The record of `version` (`None`: latest published).
    pub async fn stat(&self, version: Option<Version>) -> Result<VersionInfo> {
        let req = Request::Version {
            blob: self.id,
            version,
        };
        match self.cluster().manager_call(&req).await? {
            Response::Version(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn latest(&self) -> Result<Version> {
        Ok(self.stat(None).await?.version)
    }

    pub async fn size(&self, version: Option<Version>) -> Result<u64> {
        Ok(self.stat(version).await?.size)
    }

    /// Every published version with its attributes.
    pub async fn versions_attrs(&self) -> Result<Vec<(VersionInfo, Attrs)>> {
        match self
            .cluster()
            .manager_call(&Request::VersionsAttrs { blob: self.id })
            .await?
        {
            Response::VersionsAttrs(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn versions(&self) -> Result<VersionList> {
        match self
            .cluster()
            .manager_call(&Request::Versions { blob: self.id })
            .await?
        {
            Response::Versions(v) => Ok(v),
            other => Err(unexpected(&other)),
        }
    }

    /// Segments of `[offset, offset + size)` at `version`, after checking the range.
    async fn segments(
        &self,
        offset: u64,
        size: u64,
        version: Option<Version>,
    ) -> Result<(VersionInfo, Vec<Segment>)> {
        let info = self.stat(version).await?;
        let segments = self.segments_at(&info, offset, size).await?;
        Ok((info, segments))
    }

    /// Segments of `[offset, offset + size)` of the version `info` describes.
    async fn segments_at(
        &self,
        info: &VersionInfo,
        offset: u64,
        size: u64,
    ) -> Result<Vec<Segment>> {
        let end = offset
            .checked_add(size)
            .ok_or_else(|| Error::out_of_range("offset + size overflows"))?;
        if end > info.size {
            return Err(Error::out_of_range(format!(
                "range {offset}..{end} is past the end of blob {} at version {} (size {})",
                self.id, info.version, info.size
            )));
        }
        if size == 0 {
            return Ok(Vec::new());
        }
        let root = NodeRef {
            version: info.version,
            offset: 0,
            size: info.capacity,
        };
        let source = DhtSource {
            cluster: self.cluster(),
            blob: self.id,
        };
        let segments = resolve_range(root, Span::new(offset, size), &source).await?;
        Ok(coalesce(segments))
    }

    /// Reads `size` bytes at `offset` of `version` (`None`: latest published).
    pub async fn read(&self, offset: u64, size: u64, version: Option<Version>) -> Result<Vec<u8>> {
        let len = usize::try_from(size).map_err(|_| Error::invalid("read too large for memory"))?;
        let mut buf = vec![0u8; len];
        self.read_into(offset, &mut buf, version).await?;
        Ok(buf)
    }

    /// Fills `buf` with the bytes at `offset` of `version`; returns the version read.
    pub async fn read_into(
        &self,
        offset: u64,
        buf: &mut [u8],
        version: Option<Version>,
    ) -> Result<Version> {
        let (info, segments) = self.segments(offset, buf.len() as u64, version).await?;
        self.read_segments(segments, buf).await?;
        Ok(info.version)
    }

    /// Fills `buf` with the bytes at `offset` of the published version `info` describes (from
    /// [`Blob::stat`] or a namespace lookup), saving the version lookup of [`Blob::read_into`].
    pub async fn read_version_into(
        &self,
        info: &VersionInfo,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        if info.blob != self.id {
            return Err(Error::invalid(format!(
                "version record of blob {} used to read blob {}",
                info.blob, self.id
            )));
        }
        let segments = self.segments_at(info, offset, buf.len() as u64).await?;
        self.read_segments(segments, buf).await
    }

    /// Fetches `segments` (which tile `buf`) into `buf`, in parallel.
    async fn read_segments(&self, segments: Vec<Segment>, buf: &mut [u8]) -> Result<()> {
        let mut jobs: Vec<(ChunkPiece, &mut [u8])> = Vec::new();
        let mut rest = buf;
        for seg in segments {
            let (head, tail) = rest.split_at_mut(seg.span().size as usize);
            rest = tail;
            match seg {
                Segment::Zeros(_) => head.fill(0),
                Segment::Data(piece) => jobs.push((piece, head)),
            }
        }
        let cluster = self.cluster();
        let reads: Vec<_> = jobs
            .into_iter()
            .map(|(piece, out)| async move { chunks::read_piece(cluster, &piece, out).await })
            .collect();
        stream::iter(reads)
            .buffer_unordered(self.client.options.parallelism)
            .try_collect::<()>()
            .await
    }

    /// Which providers hold each part of `[offset, offset + size)` at `version`.
    pub async fn locations(
        &self,
        offset: u64,
        size: u64,
        version: Option<Version>,
    ) -> Result<Vec<Location>> {
        let (_, segments) = self.segments(offset, size, version).await?;
        let mut out: Vec<Location> = Vec::new();
        for seg in segments {
            let span = seg.span();
            let mut providers = Vec::new();
            if let Segment::Data(p) = &seg {
                for id in &p.replicas {
                    providers.push(self.cluster().addr_of(*id).await?);
                }
            }
            match out.last_mut() {
                Some(last)
                    if last.providers == providers && last.offset + last.size == span.offset =>
                {
                    last.size += span.size
                }
                _ => out.push(Location {
                    offset: span.offset,
                    size: span.size,
                    providers,
                }),
            }
        }
        Ok(out)
    }
}

/// How many times a write is committed when versions below it keep being given up.
const COMMIT_ATTEMPTS: u32 = 5;

/// Tries to store one chunk before a write gives up on unreachable providers.
const CHUNK_ATTEMPTS: u32 = 4;
/// Placements asked for when replacing a failed replica set.
const REPLACEMENT_CHOICES: usize = 8;

/// Total bytes of `chunks`.
fn len(chunks: &[StoredChunk]) -> u64 {
    chunks.iter().map(|c| c.len).sum()
}

/// Data buffered by a [`BlobWriter`] before its whole chunks are stored (in parallel): at
/// least one chunk.
const WRITER_BATCH: u64 = 32 << 20;

/// Batches a [`BlobWriter`] has being stored at once, while the caller produces the next.
const WRITER_IN_FLIGHT: usize = 2;

/// Writes one version from data that arrives in parts, storing whole chunks as they fill so
/// memory stays bounded; nothing is visible until a commit publishes the version. Full
/// batches are stored in the background while the caller produces the next ones. Chunks of a
/// writer dropped without a commit are left for garbage collection.
pub struct BlobWriter {
    blob: Blob,
    buffer: Vec<u8>,
    /// Stored chunks, in data order.
    chunks: Vec<StoredChunk>,
    /// Batches being stored, oldest first, with their sizes.
    in_flight: VecDeque<(u64, tokio::task::JoinHandle<Result<Vec<StoredChunk>>>)>,
}

impl BlobWriter {
    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        let sending: u64 = self.in_flight.iter().map(|(n, _)| n).sum();
        len(&self.chunks) + sending + self.buffer.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn batch(&self) -> usize {
        let cs = self.blob.chunk_size;
        (WRITER_BATCH / cs).max(1).saturating_mul(cs) as usize
    }

    pub async fn write(&mut self, mut data: &[u8]) -> Result<()> {
        let batch = self.batch();
        while !data.is_empty() {
            if self.buffer.is_empty() && data.len() >= batch {
                // Large writes go straight from the caller's buffer (whole chunks, all in
                // parallel), after the batches before them so the chunks stay in order.
                self.drain().await?;
                let whole = data.len() - data.len() % self.blob.chunk_size as usize;
                let stored = self.blob.store_chunks(&data[..whole]).await?;
                self.chunks.extend(stored);
                data = &data[whole..];
                continue;
            }
            let take = (batch - self.buffer.len()).min(data.len());
            self.buffer.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buffer.len() == batch {
                self.send_buffer().await?;
            }
        }
        Ok(())
    }

    /// Starts storing the buffered data in the background, waiting for the oldest batch
    /// when too many are in flight.
    async fn send_buffer(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.buffer);
        let blob = self.blob.clone();
        let size = data.len() as u64;
        let task = tokio::spawn(async move { blob.store_chunks(&data).await });
        self.in_flight.push_back((size, task));
        while self.in_flight.len() > WRITER_IN_FLIGHT {
            self.collect_oldest().await?;
        }
        Ok(())
    }

    async fn collect_oldest(&mut self) -> Result<()> {
        if let Some((_, task)) = self.in_flight.pop_front() {
            let stored = task
                .await
                .map_err(|e| Error::internal(format!("chunk upload task failed: {e}")))??;
            self.chunks.extend(stored);
        }
        Ok(())
    }

    async fn drain(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.collect_oldest().await?;
        }
        Ok(())
    }

    /// Stores everything written: the chunks are then complete, in order.
    async fn finish(&mut self) -> Result<()> {
        self.send_buffer().await?;
        self.drain().await
    }

    /// Publishes the data as the blob's whole new content; returns the version.
    pub async fn commit_replace(mut self) -> Result<Version> {
        self.finish().await?;
        self.blob.commit_replace(self.chunks).await
    }

    /// Publishes the data (possibly none) as the blob's whole new content with `options`;
    /// always a new version (one per S3 PUT), returned as its record.
    pub async fn commit_replace_with(mut self, options: &CommitOptions) -> Result<VersionInfo> {
        self.finish().await?;
        let op = WriteOp::Replace {
            size: len(&self.chunks),
        };
        self.blob.commit_with(op, self.chunks, Some(options)).await
    }

    /// Publishes the data as one append with `options`; `None` when nothing was written.
    pub async fn commit_append_with(
        mut self,
        options: &CommitOptions,
    ) -> Result<Option<VersionInfo>> {
        self.finish().await?;
        if self.chunks.is_empty() {
            return Ok(None);
        }
        let op = WriteOp::Append {
            size: len(&self.chunks),
        };
        let info = self
            .blob
            .commit_with(op, self.chunks, Some(options))
            .await?;
        Ok(Some(info))
    }

    /// Publishes the data as one append; `None` when nothing was written.
    pub async fn commit_append(mut self) -> Result<Option<(Version, u64)>> {
        self.finish().await?;
        if self.chunks.is_empty() {
            return Ok(None);
        }
        let op = WriteOp::Append {
            size: len(&self.chunks),
        };
        let info = self.blob.commit(op, self.chunks).await?;
        Ok(Some((info.version, info.span.offset)))
    }

    /// Publishes the data as one write at `offset`; `None` when nothing was written.
    pub async fn commit_write(mut self, offset: u64) -> Result<Option<Version>> {
        self.finish().await?;
        if self.chunks.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            self.blob.commit_at(offset, self.chunks).await?.version,
        ))
    }
}

/// Joins segments that continue each other in the same chunk (a chunk that spans two leaf
/// slots), so it is fetched with one request.
fn coalesce(segments: Vec<Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::with_capacity(segments.len());
    for s in segments {
        match (out.last_mut(), &s) {
            (Some(Segment::Data(a)), Segment::Data(b))
                if a.chunk == b.chunk
                    && a.start + a.len == b.start
                    && a.chunk_offset + a.len == b.chunk_offset =>
            {
                a.len += b.len
            }
            (Some(Segment::Zeros(a)), Segment::Zeros(b)) if a.end() == b.offset => a.size += b.size,
            _ => out.push(s),
        }
    }
    out
}
