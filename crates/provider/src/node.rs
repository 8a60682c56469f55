//! A provider node: opens its stores, serves, registers with the manager, keeps its heartbeat
//! and sweeps what dead clients left, until the process ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tomus_wire::{
    check_bind, ClusterSecret, Error, LoadGauge, Pool, Result, RpcConfig, ServerLimits,
};

use crate::chunk_store::ChunkStore;
use crate::data_dir::DataDirWatch;
use crate::heartbeat::{Beats, Heartbeat};
use crate::io_error;
use crate::memory_tier::MemoryTier;
use crate::meta_store::MetaStore;
use crate::registered::RegisteredFiles;
use crate::service::ProviderService;
use crate::{metrics, registered, short_circuit};

/// Registered files up to this size are kept in memory once adopted: the in-memory transfer
/// module's threshold (15 MiB, as in the AFM paper).
const REGISTERED_SMALL_BYTES: u64 = 15 << 20;
/// Memory for those small registered files (oldest dropped first); apart from the chunk
/// memory tier, which is off by default.
const REGISTERED_MEMORY_BYTES: u64 = 256 << 20;
/// How often what dead clients left (partial copies, temporary chunk files) is looked for.
const LEFTOVER_SWEEP: Duration = Duration::from_secs(600);
/// A temporary chunk file nobody wrote to for this long belongs to a writer that is gone (a
/// live one writes a whole chunk and asks for its adoption within seconds).
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);
/// Requests to the manager must fail fast: a stuck heartbeat would hide the provider's state.
const MANAGER_TIMEOUT: Duration = Duration::from_secs(2);
/// Repair copies from other providers: a peer that does not accept within this is down.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Long enough for a whole chunk (up to 256 MiB) from a loaded peer.
const PEER_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// Holds the chunks (files and the small-chunk log), the metadata log and the provider id.
    pub data_dir: PathBuf,
    /// `host:port` to listen on (port 0: any free port).
    pub listen: String,
    /// Address to register with (default: the bound address).
    pub advertise: Option<String>,
    /// `host:port` of the manager.
    pub manager: String,
    pub secret: Option<ClusterSecret>,
    /// Bytes of recently written chunks kept in memory (0: no memory tier).
    pub memory_tier_bytes: u64,
    /// Bytes of memory-class chunk data this provider keeps in RAM at most (0: it refuses
    /// memory-class chunks).
    pub memory_class_bytes: u64,
    pub heartbeat_interval: Duration,
    /// Sync chunk files and metadata log records to disk before acknowledging them.
    pub fsync: bool,
    /// Bytes of the chunk files synced most recently that keep their pages in the page
    /// cache; older ones are dropped behind (see [`chunk_store::drop_behind`]).
    pub cache_behind_writes: u64,
    /// What clients may hold of the server: connections, time, memory.
    pub limits: ServerLimits,
    /// `host:port` to serve `GET /metrics` on over HTTP (`None`: no metrics server).
    pub metrics_listen: Option<String>,
}

/// Runs the provider until the process ends. Sends the advertised address on `ready` once it
/// is serving and registered with the manager.
pub async fn run(
    config: ProviderConfig,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        io_error(
            format_args!("cannot create data dir {}", config.data_dir.display()),
            e,
        )
    })?;
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", config.listen)))?;
    let local = listener.local_addr()?;
    check_bind(&local, config.secret.as_ref())?;
    let advertise = config
        .advertise
        .clone()
        .unwrap_or_else(|| local.to_string());
    if local.ip().is_unspecified() && config.advertise.is_none() {
        tracing::warn!("advertising the wildcard address {advertise}; set an advertise address");
    }

    let chunks = ChunkStore::open(config.data_dir.join("chunks"), config.fsync)
        .await?
        .with_memory(config.memory_class_bytes)?
        .with_cache_behind_writes(config.cache_behind_writes);
    // After the store made its directory.
    let local_chunks = match short_circuit::publish(&config.data_dir.join("chunks")) {
        Ok(local) => Some(local),
        Err(e) => {
            tracing::warn!("short-circuit reads and writes are off: {e}");
            None
        }
    };
    let meta = MetaStore::open(config.data_dir.join("meta.log"), config.fsync).await?;
    let watch = Arc::new(DataDirWatch::open(&[
        &config.data_dir,
        &config.data_dir.join("chunks"),
    ])?);
    let tier = (config.memory_tier_bytes > 0).then(|| MemoryTier::new(config.memory_tier_bytes));
    let stats = chunks.stats();
    tracing::info!(
        "provider listening on {local}, {} chunks ({} bytes) in {}",
        stats.chunks,
        stats.bytes,
        config.data_dir.display()
    );
    let peers = Pool::new(RpcConfig {
        connect_timeout: PEER_CONNECT_TIMEOUT,
        request_timeout: PEER_REQUEST_TIMEOUT,
        secret: config.secret.clone(),
    });
    if let Some(listen) = &config.metrics_listen {
        let http = tomus_metrics::bind(listen, config.secret.as_ref()).await?;
        tracing::info!("provider metrics on http://{}/metrics", http.local_addr()?);
        let pages = metrics::ProviderPages {
            chunks: chunks.clone(),
            tier: tier.clone(),
            watch: watch.clone(),
        };
        tokio::spawn(tomus_metrics::serve(
            http,
            config.secret.clone(),
            Arc::new(pages),
        ));
    }
    let agent = tomus_steward::probe::Agent::new(advertise.clone(), config.secret.clone());
    let registered = Arc::new(RegisteredFiles::new(
        config.data_dir.join("registered"),
        config.manager.clone(),
        peers.clone(),
        REGISTERED_SMALL_BYTES,
        REGISTERED_MEMORY_BYTES,
    ));
    let partial_copies = registered.clone();
    let leftover_chunks = chunks.clone();
    let service = Arc::new(
        ProviderService::new(chunks.clone(), tier, meta, peers)
            .with_agent(agent)
            .with_registered(registered)
            .with_local_chunks(local_chunks)
            .with_data_dir_watch(watch.clone()),
    );
    let load = Arc::new(LoadGauge::observed(tomus_metrics::RpcObserver::shared()));
    let pool = Pool::new(RpcConfig {
        connect_timeout: MANAGER_TIMEOUT,
        request_timeout: MANAGER_TIMEOUT,
        secret: config.secret.clone(),
    });
    let heartbeat = Heartbeat {
        pool,
        manager: config.manager.clone(),
        advertise: advertise.clone(),
        data_dir: config.data_dir.clone(),
        watch,
        chunks,
        load: load.clone(),
        interval: config.heartbeat_interval,
        fsync: config.fsync,
    };

    // Serve while registering: the manager may contact the provider before it answers, and
    // clients that still know this provider from before a restart can read from it at once.
    let serving = tomus_wire::serve(
        listener,
        config.secret.clone(),
        config.limits.clone(),
        service,
        load,
    );
    tokio::pin!(serving);
    let id = tokio::select! {
        _ = &mut serving => return Err(Error::internal("provider accept loop ended")),
        id = heartbeat.register() => id?,
    };
    tracing::info!("registered with the manager as provider {id} at {advertise}");
    if let Some(tx) = ready {
        let _ = tx.send(advertise);
    }
    // The heartbeat stops when this function ends (its future is dropped).
    let (_running, stopped) = tokio::sync::watch::channel(false);
    let wake = heartbeat.chunks.lost_waker();
    let (refused_tx, refused) = tokio::sync::oneshot::channel();
    let beats = Beats {
        heartbeat,
        id,
        sent: 0,
        missed: 0,
        refused: Some(refused_tx),
    };
    let beating = tomus_worker::Workers::default().run(beats, stopped, Some(wake));
    tokio::select! {
        _ = serving => Err(Error::internal("provider accept loop ended")),
        _ = beating => Err(Error::internal("provider heartbeat loop ended")),
        // The manager now serves another cluster (restarted on another data directory).
        Ok(e) = refused => Err(e),
        _ = sweep_leftovers(partial_copies, leftover_chunks) => Err(Error::internal("leftover sweep ended")),
    }
}

/// Removes, at start and then every [`LEFTOVER_SWEEP`], what clients that died left behind:
/// the partial copies of swarm readers (see [`registered::PARTIAL_IDLE`]) and the temporary
/// chunk files of short-circuit writers (idle for [`STALE_TEMPORARY`]).
async fn sweep_leftovers(files: Arc<RegisteredFiles>, chunks: ChunkStore) {
    loop {
        match files.sweep_idle_partials(registered::PARTIAL_IDLE).await {
            Ok((0, _)) => {}
            Ok((n, bytes)) => tracing::info!("removed {n} idle partial copies ({bytes} bytes)"),
            Err(e) => tracing::warn!("sweeping partial copies: {e}"),
        }
        match chunks.sweep_stale_temporaries(STALE_TEMPORARY).await {
            Ok((0, _)) => {}
            Ok((n, bytes)) => {
                tracing::info!("removed {n} stale temporary chunk files ({bytes} bytes)")
            }
            Err(e) => tracing::warn!("sweeping temporary chunk files: {e}"),
        }
        tokio::time::sleep(LEFTOVER_SWEEP).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tomus_manager::ManagerConfig;
    use tomus_metadata::{ChunkId, Node, NodeKey, NodeRef};
    use tomus_wire::manager::{ListBlobs, ListProviders, RemoveProvider};
    use tomus_wire::provider::{GetChunk, GetNodes, PutChunk, PutNodes};
    use tomus_wire::{ErrorKind, Ping, ProviderInfo};

    use std::path::Path;

    use super::*;
    use crate::chunk_store;
    use crate::testutil::TempDir;

    /// How long a test waits for the provider or the manager to reach a state.
    const WAIT: Duration = Duration::from_secs(10);

    /// A real manager on a runtime of its own. Stopping it shuts that runtime down, which ends
    /// the accept loop and the connection tasks `tomus_wire::serve` spawned, closing every
    /// socket as a process exit would (aborting the task running `tomus_manager::run` would
    /// leave open connections served by the old registry).
    struct Manager {
        addr: String,
        runtime: Option<tokio::runtime::Runtime>,
    }

    impl Manager {
        /// Starts a manager with its state in `data_dir`, listening on `listen`. Retries while
        /// the address is still taken (a manager that was just stopped).
        async fn start(data_dir: &Path, listen: &str) -> Manager {
            Self::start_with(data_dir, listen, Duration::from_secs(10)).await
        }

        /// [`Manager::start`] counting a provider down after `provider_timeout` without a
        /// heartbeat.
        async fn start_with(data_dir: &Path, listen: &str, provider_timeout: Duration) -> Manager {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let deadline = Instant::now() + WAIT;
            loop {
                let config = ManagerConfig {
                    data_dir: data_dir.to_path_buf(),
                    listen: listen.to_string(),
                    secret: None,
                    provider_timeout,
                    writer_lease: Duration::from_secs(10),
                    new_file_grace: Duration::from_secs(3600),
                    limits: ServerLimits::default(),
                    http_listen: None,
                    workers: Default::default(),
                    min_free_space: 0,
                };
                let (tx, rx) = tokio::sync::oneshot::channel();
                let task = runtime.spawn(tomus_manager::run(config, Some(tx)));
                if let Ok(addr) = rx.await {
                    return Manager {
                        addr,
                        runtime: Some(runtime),
                    };
                }
                // `run` returned without serving.
                let err = task.await.unwrap().unwrap_err();
                assert!(
                    Instant::now() < deadline,
                    "manager cannot start on {listen}: {err}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        /// Stops the manager and waits until all its tasks, and so its sockets, are gone.
        async fn stop(mut self) {
            let runtime = self.runtime.take().unwrap();
            tokio::task::spawn_blocking(move || runtime.shutdown_timeout(WAIT))
                .await
                .unwrap();
        }

        async fn providers(&self, pool: &Pool) -> Vec<ProviderInfo> {
            pool.call(&self.addr, ListProviders {}).await.unwrap()
        }

        /// Polls the manager until it lists a provider at `addr` matching `cond`.
        async fn wait_for_provider(
            &self,
            addr: &str,
            what: &str,
            cond: impl Fn(&ProviderInfo) -> bool,
        ) -> ProviderInfo {
            let pool = Pool::new(RpcConfig::default());
            let deadline = Instant::now() + WAIT;
            loop {
                let list = self.providers(&pool).await;
                if let Some(p) = list.iter().find(|p| p.addr == addr && cond(p)) {
                    return p.clone();
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {what}; the manager lists {list:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    impl Drop for Manager {
        fn drop(&mut self) {
            if let Some(runtime) = self.runtime.take() {
                runtime.shutdown_background();
            }
        }
    }

    fn config(dir: &Path, manager: String) -> ProviderConfig {
        ProviderConfig {
            data_dir: dir.join("data"),
            listen: "127.0.0.1:0".into(),
            advertise: None,
            manager,
            secret: None,
            memory_tier_bytes: 1 << 20,
            memory_class_bytes: 1 << 20,
            heartbeat_interval: Duration::from_millis(30),
            fsync: true,
            cache_behind_writes: chunk_store::drop_behind::DEFAULT_BUDGET,
            limits: ServerLimits::default(),
            metrics_listen: None,
        }
    }

    fn stored_id(dir: &Path) -> u32 {
        let text = std::fs::read_to_string(dir.join("data/provider.id")).unwrap();
        text.trim().parse().unwrap()
    }

    /// Waits for the provider's ready signal (registered and serving).
    async fn ready(rx: tokio::sync::oneshot::Receiver<String>) -> String {
        tokio::time::timeout(WAIT, rx)
            .await
            .expect("provider did not become ready")
            .expect("provider stopped before it was ready")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn serves_chunks_and_nodes_and_heartbeats() {
        let dir = TempDir::new("run");
        let manager = Manager::start(&dir.path().join("manager"), "127.0.0.1:0").await;

        let (tx, rx) = tokio::sync::oneshot::channel();
        let provider = tokio::spawn(run(config(dir.path(), manager.addr.clone()), Some(tx)));
        let addr = ready(rx).await;
        let registered = manager
            .wait_for_provider(&addr, "registration", |p| p.alive)
            .await;
        assert_eq!(registered.id, stored_id(dir.path()));
        assert!(registered.capacity > 0);

        let pool = Pool::new(RpcConfig::default());
        let id = ChunkId(0xabcdef);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let crc = tomus_wire::checksum::crc32c(&data);
        pool.call_with_body(&addr, PutChunk { id, crc }, &data)
            .await
            .unwrap();
        let get = GetChunk {
            id,
            offset: 65_000,
            len: 70_000,
        };
        let (crc, body) = pool.call_with_body(&addr, get, &[]).await.unwrap();
        assert_eq!(&body[..], &data[65_000..135_000]);
        assert_eq!(crc, tomus_wire::checksum::crc32c(&body));
        let missing = GetChunk {
            id: ChunkId(1),
            offset: 0,
            len: 1,
        };
        let err = pool.call(&addr, missing).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);

        let key = NodeKey {
            blob: 3,
            node: NodeRef {
                version: 1,
                offset: 0,
                size: 4096,
            },
        };
        let node = Node::Inner {
            left: None,
            right: None,
        };
        let put = PutNodes {
            nodes: vec![(key, node.clone())],
        };
        pool.call(&addr, put).await.unwrap();
        let get = GetNodes { keys: vec![key] };
        assert_eq!(pool.call(&addr, get).await.unwrap(), vec![Some(node)]);
        pool.call(&addr, Ping).await.unwrap();
        let err = pool
            .call(&addr, ListBlobs { after: 0, limit: 1 })
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument);

        // Registration reported no chunks; only a heartbeat can carry the new one.
        let reported = manager
            .wait_for_provider(&addr, "a heartbeat reporting the chunk", |p| {
                p.alive && p.chunks >= 1
            })
            .await;
        assert_eq!(reported.id, registered.id);
        // One registration: the provider is listed once.
        assert_eq!(manager.providers(&pool).await.len(), 1);
        provider.abort();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn waits_for_late_manager() {
        let dir = TempDir::new("late");
        // Reserve a port for a manager that starts only after the provider.
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let manager_addr = probe.local_addr().unwrap().to_string();
        drop(probe);

        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let provider = tokio::spawn(run(config(dir.path(), manager_addr.clone()), Some(tx)));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            rx.try_recv().is_err(),
            "provider was ready without a manager"
        );
        let manager = Manager::start(&dir.path().join("manager"), &manager_addr).await;
        assert_eq!(manager.addr, manager_addr);
        let addr = ready(rx).await;
        let registered = manager
            .wait_for_provider(&addr, "registration", |p| p.alive)
            .await;
        assert_eq!(registered.id, stored_id(dir.path()));
        provider.abort();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn reregisters_when_its_manager_forgets_it() {
        let dir = TempDir::new("rereg");
        // Heartbeats 1.5 s apart against a 300 ms timeout: between two, the provider is down,
        // and a down provider may be removed.
        let manager = Manager::start_with(
            &dir.path().join("manager"),
            "127.0.0.1:0",
            Duration::from_millis(300),
        )
        .await;
        let mut cfg = config(dir.path(), manager.addr.clone());
        cfg.heartbeat_interval = Duration::from_millis(1500);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let provider = tokio::spawn(run(cfg, Some(tx)));
        let addr = ready(rx).await;
        let first = manager
            .wait_for_provider(&addr, "registration", |p| p.alive)
            .await;

        // Removed while it runs: its next heartbeat is answered NotFound, and it registers
        // again, under a new id.
        let pool = Pool::new(RpcConfig::default());
        let deadline = Instant::now() + WAIT;
        while let Err(e) = pool
            .call(&manager.addr, RemoveProvider { addr: addr.clone() })
            .await
        {
            assert!(Instant::now() < deadline, "never removable: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let again = manager
            .wait_for_provider(&addr, "re-registration", |p| p.id != first.id)
            .await;
        // The provider saves its new id once the manager has answered, which the listing
        // above may show first.
        let deadline = Instant::now() + WAIT;
        while stored_id(dir.path()) != again.id {
            assert!(
                Instant::now() < deadline,
                "the new id {} was never saved (still {})",
                again.id,
                stored_id(dir.path())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        provider.abort();
    }

    /// A manager started on an empty data directory at its manager's address is another
    /// cluster, which would take every chunk this provider holds for garbage: the provider
    /// stops rather than joining it, and keeps its data.
    #[tokio::test(flavor = "multi_thread")]
    async fn stops_rather_than_join_another_cluster() {
        let dir = TempDir::new("other-cluster");
        let first = Manager::start(&dir.path().join("manager-a"), "127.0.0.1:0").await;
        let manager_addr = first.addr.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let provider = tokio::spawn(run(config(dir.path(), manager_addr.clone()), Some(tx)));
        let addr = ready(rx).await;
        let pool = Pool::new(RpcConfig::default());
        let chunk = b"kept".to_vec();
        let put = PutChunk {
            id: ChunkId(7),
            crc: tomus_wire::checksum::crc32c(&chunk),
        };
        pool.call_with_body(&addr, put, &chunk).await.unwrap();
        let cluster_file = dir.path().join("data/cluster.id");
        let joined = std::fs::read_to_string(&cluster_file).unwrap();
        first.stop().await;

        let second = Manager::start(&dir.path().join("manager-b"), &manager_addr).await;
        let ended = tokio::time::timeout(WAIT, provider)
            .await
            .expect("the provider kept running beside another cluster's manager")
            .unwrap();
        let e = ended.unwrap_err();
        assert_eq!(e.kind, ErrorKind::PreconditionFailed, "{e}");
        assert!(e.message.contains("belongs to cluster"), "{e}");
        assert!(second.providers(&pool).await.is_empty());
        assert_eq!(std::fs::read_to_string(&cluster_file).unwrap(), joined);

        // Started again, it refuses to join at once, its chunk still on disk; with its own
        // manager back, it serves it.
        let e = run(config(dir.path(), manager_addr.clone()), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::PreconditionFailed, "{e}");
        second.stop().await;
        let first = Manager::start(&dir.path().join("manager-a"), &manager_addr).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let provider = tokio::spawn(run(config(dir.path(), manager_addr.clone()), Some(tx)));
        let addr = ready(rx).await;
        let get = GetChunk {
            id: ChunkId(7),
            offset: 0,
            len: 4,
        };
        let (_, body) = pool.call_with_body(&addr, get, &[]).await.unwrap();
        assert_eq!(&body[..], &chunk[..]);
        provider.abort();
        first.stop().await;
    }

    #[tokio::test]
    async fn refuses_public_address_without_secret() {
        let dir = TempDir::new("bind");
        let mut cfg = config(dir.path(), "127.0.0.1:1".into());
        cfg.listen = "0.0.0.0:0".into();
        let err = run(cfg, None).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::AuthFailed);
    }
}
