//! The client: options, a connection to a cluster, and blob creation, lookup and deletion.

use std::sync::Arc;
use std::time::Duration;

use tomus_metadata::BlobId;
use tomus_wire::manager::{BlobStorage, CreateBlob, CreateBlobIn, DeleteBlob, GetBlob};
use tomus_wire::{
    BlobInfo, ClusterSecret, Error, ErrorKind, Ping, Placement, Pool, ProviderInfo, Result, Rpc,
    RpcConfig, StorageClass,
};

use crate::cluster::Cluster;
use crate::{chunks, local, placements, versions, Blob};

/// Storage classes a client remembers at most (it forgets them all past this).
const MAX_KNOWN_CLASSES: usize = 100_000;

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub secret: Option<ClusterSecret>,
    pub placement: Placement,
    /// Chunk transfers in flight per read or write call.
    pub parallelism: usize,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Read chunk pieces of providers on this host from their files directly (see
    /// [`local`]); on unless `TOMUS_LOCAL_READS=0`.
    pub local_reads: bool,
    /// Write chunks for providers on this host as files they adopt (see [`local`]); on
    /// unless `TOMUS_LOCAL_WRITES=0`.
    pub local_writes: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            secret: None,
            placement: Placement::Balanced,
            parallelism: 16,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            local_reads: local::enabled_by_env("TOMUS_LOCAL_READS"),
            local_writes: local::enabled_by_env("TOMUS_LOCAL_WRITES"),
        }
    }
}

/// A connection to a tomus cluster. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Client {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) options: Arc<ClientOptions>,
    pub(crate) host: Option<String>,
    pub(crate) small_placements: Arc<placements::PlacementCache>,
    pub(crate) versions: Arc<versions::VersionCache>,
    /// Whether each blob written so far is in the memory storage class (it never changes).
    pub(crate) memory_class: Arc<std::sync::Mutex<std::collections::HashMap<BlobId, bool>>>,
}

impl Client {
    /// Connects to the manager at `addr` (checks that it answers).
    pub async fn connect(addr: &str, options: ClientOptions) -> Result<Client> {
        let pool = Pool::new(RpcConfig {
            connect_timeout: options.connect_timeout,
            request_timeout: options.request_timeout,
            secret: options.secret.clone(),
        });
        let cluster = Arc::new(
            Cluster::new(addr.to_string(), pool)
                .with_local(options.local_reads, options.local_writes),
        );
        cluster.manager(Ping).await.map_err(|e| {
            // A server of another protocol at the address (an S3 or HTTP port): say which
            // server this address should have been.
            if e.kind == ErrorKind::Protocol && e.message.contains(tomus_wire::NOT_A_TOMUS_SERVER) {
                let manager = "is not a tomus manager";
                Error::protocol(
                    e.message
                        .replacen(tomus_wire::NOT_A_TOMUS_SERVER, manager, 1),
                )
            } else {
                e
            }
        })?;
        Ok(Client {
            host: local_host_towards(addr),
            cluster,
            options: Arc::new(options),
            small_placements: Arc::default(),
            versions: Arc::default(),
            memory_class: Arc::default(),
        })
    }

    /// Bytes this client has read from chunk files directly (short-circuit reads).
    pub fn local_read_bytes(&self) -> u64 {
        self.cluster.local.read_bytes()
    }

    /// Bytes of chunks this client has written as files providers adopted (short-circuit
    /// writes).
    pub fn local_written_bytes(&self) -> u64 {
        self.cluster.local.written_bytes()
    }

    pub fn manager_addr(&self) -> &str {
        &self.cluster.manager
    }

    /// One request to the manager, for operations without a method of their own (status,
    /// drain, retention).
    pub async fn manager_call<R: Rpc>(&self, req: R) -> Result<R::Response> {
        self.cluster.manager(req).await
    }

    /// One request to the provider at `addr` (scrub).
    pub async fn provider_call<R: Rpc>(&self, addr: &str, req: R) -> Result<R::Response> {
        self.cluster.pool.call(addr, req).await
    }

    /// Reads `piece` (a range of one chunk, as [`Blob::segments_of`] names it) from the
    /// first of its replicas that serves it intact.
    pub async fn read_piece(&self, piece: &tomus_metadata::ChunkPiece) -> Result<Vec<u8>> {
        let len =
            usize::try_from(piece.len).map_err(|_| Error::invalid("piece too large for memory"))?;
        let mut out = vec![0u8; len];
        tomus_wire::trace::operation(chunks::read_piece(&self.cluster, piece, &mut out)).await?;
        Ok(out)
    }

    pub async fn create_blob(&self, chunk_size: u64, replication: u32) -> Result<Blob> {
        let req = CreateBlob {
            chunk_size,
            replication,
        };
        Ok(self.blob_handle(self.cluster.manager(req).await?))
    }

    /// [`Client::create_blob`] in a storage class (the memory class keeps its chunks in the
    /// RAM of `replication` providers).
    pub async fn create_blob_in(
        &self,
        chunk_size: u64,
        replication: u32,
        storage: StorageClass,
    ) -> Result<Blob> {
        let req = CreateBlobIn {
            chunk_size,
            replication,
            storage,
        };
        let info = self.cluster.manager(req).await?;
        self.note_class(info.id, storage);
        Ok(self.blob_handle(info))
    }

    /// Remembers the class of `blob`, as its creation answered.
    pub(crate) fn note_class(&self, blob: BlobId, storage: StorageClass) {
        let mut known = self.memory_class.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= MAX_KNOWN_CLASSES {
            known.clear();
        }
        known.insert(blob, storage == StorageClass::Memory);
    }

    /// Whether the chunks of `blob` are memory-class ones: asked of the manager once per
    /// blob, by writers (it decides the new chunks' ids).
    pub(crate) async fn is_memory_class(&self, blob: BlobId) -> Result<bool> {
        let known = self
            .memory_class
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&blob)
            .copied();
        if let Some(memory) = known {
            return Ok(memory);
        }
        let class = self.cluster.manager(BlobStorage { blob }).await?;
        self.note_class(blob, class);
        Ok(class == StorageClass::Memory)
    }

    /// The storage class of `blob`.
    pub async fn storage_class(&self, blob: BlobId) -> Result<StorageClass> {
        Ok(if self.is_memory_class(blob).await? {
            StorageClass::Memory
        } else {
            StorageClass::Disk
        })
    }

    pub async fn open_blob(&self, id: BlobId) -> Result<Blob> {
        Ok(self.blob_handle(self.blob_info(id).await?))
    }

    /// Deletes a blob made with [`Client::create_blob`]: reads of it fail with `NotFound`
    /// from now on and garbage collection reclaims its space after the grace. A blob that
    /// backs a file is refused (`PreconditionFailed`, naming the path): remove the file.
    pub async fn delete_blob(&self, id: BlobId) -> Result<()> {
        self.cluster.manager(DeleteBlob { blob: id }).await?;
        self.versions.forget_blob(id);
        Ok(())
    }

    pub async fn blob_info(&self, id: BlobId) -> Result<BlobInfo> {
        self.cluster.manager(GetBlob { blob: id }).await
    }

    /// Every blob, in id order (see [`crate::listing`]).
    pub async fn list_blobs(&self) -> Result<Vec<BlobInfo>> {
        crate::listing::blobs(&self.cluster).await
    }

    pub async fn providers(&self) -> Result<Vec<ProviderInfo>> {
        self.cluster.providers().await
    }

    /// How many providers take new data now (alive, not draining): the most replicas a new
    /// blob can get.
    pub async fn writable_providers(&self) -> Result<u32> {
        let providers = self.providers().await?;
        Ok(providers.iter().filter(|p| p.alive && !p.draining).count() as u32)
    }

    /// A handle on the blob described by `info` (e.g. from a namespace entry), without asking
    /// the manager.
    pub fn blob(&self, info: &BlobInfo) -> Blob {
        self.blob_handle(info.clone())
    }

    pub(crate) fn blob_handle(&self, info: BlobInfo) -> Blob {
        Blob::new(self.clone(), &info)
    }
}

/// The local address the OS would use to reach `addr`: the writer's host for local placement.
fn local_host_towards(addr: &str) -> Option<String> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.connect(addr).ok()?;
    Some(sock.local_addr().ok()?.ip().to_string())
}
