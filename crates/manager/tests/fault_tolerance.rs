//! The manager's side of fault tolerance: draining and removing providers, the chunk replica
//! overlay, retention, deleting the blobs of removed files and the cluster status. Each test
//! runs the real service on a redb file in a temporary directory and reopens it to check what
//! is durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tomus_manager::namespace::Namespace;
use tomus_manager::registry::Registry;
use tomus_manager::service::ManagerService;
use tomus_manager::store::{Publication, Store};
use tomus_manager::VersionManager;
use tomus_metadata::{BlobId, ChunkId, ProviderId, Span, Version};
use tomus_wire::{
    BlobInfo, ErrorKind, Handler, MaintenanceStatus, Placement, ProviderInfo, ProviderReport,
    Request, Response, Result, Retention, VersionInfo, VersionState, WriteOp,
};

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "tomus-manager-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// A manager on the state in `dir`, as `tomus_manager::run` assembles it.
fn open(dir: &Path, provider_timeout: Duration) -> Arc<ManagerService> {
    let store = Arc::new(Store::open(dir).unwrap());
    let versions = VersionManager::open(store.clone()).unwrap();
    let namespace = Arc::new(Namespace::open(store.clone(), versions.clone()).unwrap());
    let registry = Arc::new(Registry::open(store.clone(), provider_timeout).unwrap());
    Arc::new(ManagerService {
        versions,
        namespace,
        registry,
        store,
    })
}

/// Closes a manager so its database can be opened again (the committer task lets go of it
/// once its version manager is gone).
async fn close(m: Arc<ManagerService>) {
    drop(m);
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn call(m: &ManagerService, req: Request) -> Result<Response> {
    m.handle(req, Bytes::new()).await.0.into_result()
}

fn report() -> ProviderReport {
    ProviderReport {
        capacity: 1 << 40,
        free: 1 << 40,
        chunks: 0,
        load: 0,
    }
}

async fn register(m: &ManagerService, id: Option<ProviderId>, addr: &str) -> ProviderId {
    let req = Request::Register {
        id,
        addr: addr.into(),
        report: report(),
    };
    match call(m, req).await.unwrap() {
        Response::Registered(id) => id,
        other => panic!("{other:?}"),
    }
}

async fn providers(m: &ManagerService) -> Vec<ProviderInfo> {
    match call(m, Request::Providers).await.unwrap() {
        Response::Providers(p) => p,
        other => panic!("{other:?}"),
    }
}

async fn create_blob(m: &ManagerService, replication: u32) -> Result<BlobInfo> {
    let req = Request::CreateBlob {
        chunk_size: 64 << 10,
        replication,
    };
    match call(m, req).await? {
        Response::Blob(b) => Ok(b),
        other => panic!("{other:?}"),
    }
}

/// Provider ids `chunks` new chunks of `blob` are placed on.
async fn placed_on(m: &ManagerService, blob: BlobId, chunks: u32) -> Vec<ProviderId> {
    let req = Request::Allocate {
        blob,
        chunks,
        chunk_bytes: None,
        placement: Placement::Balanced,
        client_host: None,
    };
    match call(m, req).await.unwrap() {
        Response::Placements(p) => p.into_iter().flatten().map(|p| p.id).collect(),
        other => panic!("{other:?}"),
    }
}

async fn assign(m: &ManagerService, blob: BlobId, size: u64) -> Result<Version> {
    let req = Request::Assign {
        blob,
        op: WriteOp::Append { size },
    };
    match call(m, req).await? {
        Response::Assigned(a) => Ok(a.version),
        other => panic!("{other:?}"),
    }
}

async fn complete(m: &ManagerService, blob: BlobId, version: Version) -> Result<VersionInfo> {
    match call(m, Request::Complete { blob, version }).await? {
        Response::Version(v) => Ok(v),
        other => panic!("{other:?}"),
    }
}

/// Appends one published version.
async fn publish(m: &ManagerService, blob: BlobId) -> Version {
    let v = assign(m, blob, 100).await.unwrap();
    complete(m, blob, v).await.unwrap().version
}

async fn version(m: &ManagerService, blob: BlobId, v: Option<Version>) -> Result<VersionInfo> {
    match call(m, Request::Version { blob, version: v }).await? {
        Response::Version(v) => Ok(v),
        other => panic!("{other:?}"),
    }
}

/// Numbers of the listed versions, from `Versions` and `VersionsAttrs` (which must agree).
async fn listed(m: &ManagerService, blob: BlobId) -> Vec<Version> {
    let plain = match call(m, Request::Versions { blob }).await.unwrap() {
        Response::Versions(l) => l.versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let with_attrs = match call(m, Request::VersionsAttrs { blob }).await.unwrap() {
        Response::VersionsAttrs(l) => l.iter().map(|(v, _)| v.version).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(plain, with_attrs);
    plain
}

async fn set_retention(m: &ManagerService, blob: BlobId, retention: Retention) -> Result<BlobInfo> {
    match call(m, Request::SetRetention { blob, retention }).await? {
        Response::Blob(b) => Ok(b),
        other => panic!("{other:?}"),
    }
}

async fn blob_info(m: &ManagerService, blob: BlobId) -> Result<BlobInfo> {
    match call(m, Request::BlobInfo { blob }).await? {
        Response::Blob(b) => Ok(b),
        other => panic!("{other:?}"),
    }
}

async fn fs_create(m: &ManagerService, path: &str) -> BlobId {
    let req = Request::FsCreate {
        path: path.into(),
        chunk_size: 64 << 10,
        replication: 1,
        exclusive: true,
    };
    match call(m, req).await.unwrap() {
        Response::Entry(e) => e.blob.unwrap().id,
        other => panic!("{other:?}"),
    }
}

async fn remove(m: &ManagerService, addr: &str) -> Result<Response> {
    call(m, Request::RemoveProvider { addr: addr.into() }).await
}

async fn report_maintenance(m: &ManagerService, status: MaintenanceStatus) {
    let resp = call(m, Request::ReportMaintenance { status })
        .await
        .unwrap();
    assert_eq!(resp, Response::Ok);
}

#[tokio::test]
async fn drained_providers_get_no_new_chunks_even_after_a_restart() {
    let dir = TempDir::new("drain");
    let m = open(dir.path(), TIMEOUT);
    let ids = [
        register(&m, None, "127.0.0.1:7001").await,
        register(&m, None, "127.0.0.1:7002").await,
        register(&m, None, "127.0.0.1:7003").await,
    ];
    let drained = match call(
        &m,
        Request::DrainProvider {
            addr: "127.0.0.1:7002".into(),
        },
    )
    .await
    {
        Ok(Response::Provider(p)) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (drained.id, drained.draining, drained.alive),
        (ids[1], true, true)
    );
    let e = call(
        &m,
        Request::DrainProvider {
            addr: "127.0.0.1:9999".into(),
        },
    )
    .await;
    assert_eq!(e.unwrap_err().kind, ErrorKind::NotFound);

    let flags: Vec<(ProviderId, bool)> = providers(&m)
        .await
        .iter()
        .map(|p| (p.id, p.draining))
        .collect();
    assert_eq!(flags, [(ids[0], false), (ids[1], true), (ids[2], false)]);

    // Two providers take data: replication 3 is refused, 2 placed on those two only.
    let e = create_blob(&m, 3).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("not draining"), "{}", e.message);
    let blob = create_blob(&m, 2).await.unwrap().id;
    let on = placed_on(&m, blob, 20).await;
    assert_eq!(on.len(), 40);
    assert!(!on.contains(&ids[1]), "{on:?}");

    // Heartbeats and a re-registration (a restarted provider) keep it draining.
    let hb = Request::Heartbeat {
        id: ids[1],
        report: report(),
    };
    call(&m, hb).await.unwrap();
    assert_eq!(register(&m, Some(ids[1]), "127.0.0.1:7002").await, ids[1]);
    assert!(providers(&m).await[1].draining);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    let flags: Vec<(ProviderId, bool)> = providers(&m)
        .await
        .iter()
        .map(|p| (p.id, p.draining))
        .collect();
    assert_eq!(flags, [(ids[0], false), (ids[1], true), (ids[2], false)]);
    assert!(!placed_on(&m, blob, 20).await.contains(&ids[1]));
}

#[tokio::test]
async fn providers_are_removed_only_when_drained_or_down() {
    let dir = TempDir::new("remove");
    let timeout = Duration::from_millis(400);
    let m = open(dir.path(), timeout);
    let a = register(&m, None, "127.0.0.1:7001").await;
    let b = register(&m, None, "127.0.0.1:7002").await;

    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(
        e.message.contains("still alive and not drained"),
        "{}",
        e.message
    );
    assert_eq!(
        remove(&m, "127.0.0.1:9999").await.unwrap_err().kind,
        ErrorKind::NotFound
    );

    // A report from before the drain says nothing about it.
    report_maintenance(&m, MaintenanceStatus::default()).await;
    call(
        &m,
        Request::DrainProvider {
            addr: "127.0.0.1:7001".into(),
        },
    )
    .await
    .unwrap();
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(e.message.contains("has not reported"), "{}", e.message);

    let mut status = MaintenanceStatus {
        draining: vec![(a, 1000)],
        ..MaintenanceStatus::default()
    };
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(e.message.contains("1000 bytes"), "{}", e.message);

    status.draining = vec![(a, 0)];
    report_maintenance(&m, status).await;
    assert_eq!(remove(&m, "127.0.0.1:7001").await.unwrap(), Response::Ok);
    let left: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(left, [b]);

    // Back again: a new id, not draining.
    let again = register(&m, Some(a), "127.0.0.1:7001").await;
    assert!(again > b, "{again}");
    assert!(!providers(&m).await.iter().any(|p| p.draining));

    // Down (no heartbeat for the timeout): removable without draining.
    tokio::time::sleep(timeout + Duration::from_millis(100)).await;
    let hb = Request::Heartbeat {
        id: again,
        report: report(),
    };
    call(&m, hb).await.unwrap();
    assert!(
        !providers(&m)
            .await
            .iter()
            .find(|p| p.id == b)
            .unwrap()
            .alive
    );
    assert_eq!(remove(&m, "127.0.0.1:7002").await.unwrap(), Response::Ok);
    // Its heartbeats are refused now, and it registers as a new provider.
    let hb = Request::Heartbeat {
        id: b,
        report: report(),
    };
    assert_eq!(call(&m, hb).await.unwrap_err().kind, ErrorKind::NotFound);

    close(m).await;
    let m = open(dir.path(), timeout);
    let left: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(left, [again]);
}

#[tokio::test]
async fn the_replica_overlay_is_upserted_and_survives_a_restart() {
    let dir = TempDir::new("overlay");
    let m = open(dir.path(), TIMEOUT);
    let (c1, c2, c3) = (ChunkId(1 << 100), ChunkId(7), ChunkId(u128::MAX));
    let record = |entries: Vec<(ChunkId, Vec<ProviderId>)>| Request::RecordReplicas { entries };
    let lookup = Request::ChunkReplicas {
        chunks: vec![c1, c3, c2],
    };
    assert_eq!(
        call(&m, record(vec![(c1, vec![1, 2]), (c2, vec![3])]))
            .await
            .unwrap(),
        Response::Ok
    );
    assert_eq!(
        call(&m, lookup.clone()).await.unwrap(),
        Response::Replicas(vec![vec![1, 2], vec![], vec![3]])
    );
    call(&m, record(vec![(c1, vec![4, 2]), (c3, vec![5])]))
        .await
        .unwrap();
    let expected = Response::Replicas(vec![vec![4, 2], vec![5], vec![3]]);
    assert_eq!(call(&m, lookup.clone()).await.unwrap(), expected);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(call(&m, lookup).await.unwrap(), expected);
    let none = Request::ChunkReplicas { chunks: vec![] };
    assert_eq!(call(&m, none).await.unwrap(), Response::Replicas(vec![]));
}

#[tokio::test]
async fn keep_last_retains_the_newest_versions() {
    let dir = TempDir::new("keep-last");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let empty = create_blob(&m, 1).await.unwrap().id;
    for _ in 0..5 {
        publish(&m, blob).await;
    }
    for bad in [Retention::KeepLast(0), Retention::KeepNewerThan(0)] {
        let e = set_retention(&m, blob, bad).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
    }
    let e = set_retention(&m, 999, Retention::KeepLast(1))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);

    let info = set_retention(&m, blob, Retention::KeepLast(2))
        .await
        .unwrap();
    assert_eq!((info.retention, info.latest), (Retention::KeepLast(2), 5));
    assert_eq!(listed(&m, blob).await, [4, 5]);
    let e = version(&m, blob, Some(3)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(
        e.message,
        format!("version 3 of blob {blob} was removed by its retention policy (keep last 2)")
    );
    assert_eq!(version(&m, blob, Some(4)).await.unwrap().version, 4);
    assert_eq!(version(&m, blob, Some(0)).await.unwrap().size, 0);
    assert_eq!(version(&m, blob, None).await.unwrap().version, 5);

    // Empty blobs and version 0 are unaffected.
    set_retention(&m, empty, Retention::KeepLast(1))
        .await
        .unwrap();
    assert_eq!(listed(&m, empty).await, Vec::<Version>::new());
    assert_eq!(version(&m, empty, Some(0)).await.unwrap().version, 0);

    // New versions push old ones out at the next round; a pending one is not counted.
    publish(&m, blob).await;
    publish(&m, blob).await;
    let pending = assign(&m, blob, 10).await.unwrap();
    assert_eq!(
        m.versions
            .enforce_retention(tomus_manager::versions::now_ms()),
        1
    );
    assert_eq!(listed(&m, blob).await, [6, 7]);
    assert_eq!(complete(&m, blob, pending).await.unwrap().version, 8);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(
        blob_info(&m, blob).await.unwrap().retention,
        Retention::KeepLast(2)
    );
    m.versions
        .enforce_retention(tomus_manager::versions::now_ms());
    assert_eq!(listed(&m, blob).await, [7, 8]);
    let e = version(&m, blob, Some(6)).await.unwrap_err();
    assert!(e.message.contains("keep last 2"), "{}", e.message);

    // Going back to keep-all keeps what is left; what is gone stays gone.
    set_retention(&m, blob, Retention::KeepAll).await.unwrap();
    // (A restarted manager numbers new versions after the block it had reserved.)
    let next = publish(&m, blob).await;
    m.versions
        .enforce_retention(tomus_manager::versions::now_ms());
    assert_eq!(listed(&m, blob).await, [7, 8, next]);
    let e = version(&m, blob, Some(5)).await.unwrap_err();
    assert_eq!(
        e.message,
        format!("version 5 of blob {blob} was removed by an earlier retention policy")
    );
}

#[tokio::test]
async fn keep_newer_than_expires_by_age_and_keeps_the_latest() {
    let dir = TempDir::new("keep-newer");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    publish(&m, blob).await;
    publish(&m, blob).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    publish(&m, blob).await;
    publish(&m, blob).await;

    set_retention(&m, blob, Retention::KeepNewerThan(300))
        .await
        .unwrap();
    assert_eq!(listed(&m, blob).await, [3, 4]);
    let e = version(&m, blob, Some(2)).await.unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "version 2 of blob {blob} was removed by its retention policy (keep versions \
             newer than 300 ms)"
        )
    );

    // Everything old: only the latest stays.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pending = assign(&m, blob, 10).await.unwrap();
    assert_eq!(
        m.versions
            .enforce_retention(tomus_manager::versions::now_ms()),
        1
    );
    assert_eq!(listed(&m, blob).await, [4]);
    assert_eq!(version(&m, blob, None).await.unwrap().version, 4);
    assert_eq!(complete(&m, blob, pending).await.unwrap().version, 5);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(listed(&m, blob).await, [4, 5]);
    assert_eq!(
        version(&m, blob, Some(3)).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
}

async fn fs_delete(m: &ManagerService, path: &str, recursive: bool) {
    let req = Request::FsDelete {
        path: path.into(),
        recursive,
    };
    assert_eq!(call(m, req).await.unwrap(), Response::Ok);
}

async fn assert_gone(m: &ManagerService, blob: BlobId) {
    assert_eq!(
        blob_info(m, blob).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    let e = call(m, Request::Versions { blob }).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = set_retention(m, blob, Retention::KeepLast(1))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(
        assign(m, blob, 1).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn removing_files_deletes_their_blobs() {
    let dir = TempDir::new("delete");
    let m = open(dir.path(), TIMEOUT);
    let file = fs_create(&m, "a/f").await;
    publish(&m, file).await;
    set_retention(&m, file, Retention::KeepLast(3))
        .await
        .unwrap();
    let x = fs_create(&m, "d/x").await;
    let y = fs_create(&m, "d/sub/y").await;
    publish(&m, y).await;
    let src = fs_create(&m, "r/src").await;
    let dst = fs_create(&m, "r/dst").await;
    publish(&m, dst).await;
    let kept = fs_create(&m, "kept").await;

    fs_delete(&m, "a/f", false).await;
    assert_gone(&m, file).await;
    fs_delete(&m, "d", true).await;
    assert_gone(&m, x).await;
    assert_gone(&m, y).await;

    let rename = Request::FsRename {
        from: "r/src".into(),
        to: "r/dst".into(),
    };
    call(&m, rename).await.unwrap();
    assert_gone(&m, dst).await;
    blob_info(&m, src).await.unwrap();
    match call(
        &m,
        Request::FsStat {
            path: "r/dst".into(),
        },
    )
    .await
    .unwrap()
    {
        Response::Entry(e) => assert_eq!(e.blob.unwrap().id, src),
        other => panic!("{other:?}"),
    }
    let listed = match call(
        &m,
        Request::FsList {
            path: "".into(),
            recursive: true,
            start_after: None,
            limit: 100,
        },
    )
    .await
    .unwrap()
    {
        Response::Entries(e) => e.into_iter().map(|e| e.path).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(listed, ["a", "kept", "r", "r/dst"]);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    for blob in [file, x, y, dst] {
        assert_gone(&m, blob).await;
    }
    let blobs = match call(&m, Request::ListBlobs).await.unwrap() {
        Response::Blobs(b) => b.into_iter().map(|b| b.id).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(blobs, [src, kept]);
}

#[tokio::test]
async fn writers_of_deleted_blobs_are_told_rather_than_left_waiting() {
    let dir = TempDir::new("delete-pending");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    let lower = assign(&m, blob, 10).await.unwrap();
    let upper = assign(&m, blob, 10).await.unwrap();
    // Completed, but waiting for the lower version's writer.
    let waiting = tokio::spawn({
        let m = m.clone();
        async move { complete(&m, blob, upper).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    fs_delete(&m, "f", false).await;
    let e = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting writer was not told")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = complete(&m, blob, lower).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[tokio::test]
async fn publications_of_deleted_blobs_do_not_bring_them_back() {
    let dir = TempDir::new("delete-race");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    let mut record = m
        .store
        .blobs()
        .unwrap()
        .into_iter()
        .find(|b| b.id == blob)
        .unwrap();
    fs_delete(&m, "f", false).await;
    // What the committer would write for a version completed just before the deletion.
    record.published = 1;
    let late = Publication {
        blob: record,
        versions: vec![VersionInfo {
            blob,
            version: 1,
            span: Span::new(0, 10),
            size: 10,
            capacity: 64 << 10,
            state: VersionState::Published,
            append: true,
            published_ms: 1,
        }],
        attrs: vec![],
    };
    assert_eq!(m.store.publish(&[late]).unwrap(), [blob]);
    assert!(m.store.blobs().unwrap().is_empty());
    assert!(m.store.version(blob, 1).unwrap().is_none());
}

#[tokio::test]
async fn status_shows_providers_blobs_and_the_last_maintenance_report() {
    let dir = TempDir::new("status");
    let m = open(dir.path(), TIMEOUT);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(tomus_wire::serve(
        listener,
        None,
        m.clone(),
        Arc::new(tomus_wire::LoadGauge::default()),
    ));
    let pool = tomus_wire::Pool::new(tomus_wire::RpcConfig::default());
    let status = |pool: Arc<tomus_wire::Pool>, addr: String| async move {
        match pool.call(&addr, &Request::Status, &[]).await.unwrap().0 {
            Response::Status(s) => s,
            other => panic!("{other:?}"),
        }
    };

    let before = status(pool.clone(), addr.clone()).await;
    assert!(before.providers.is_empty());
    assert_eq!((before.blobs, before.maintenance_reported_ms), (0, 0));
    assert_eq!(before.maintenance, MaintenanceStatus::default());
    assert_eq!(before.provider_timeout_ms, TIMEOUT.as_millis() as u64);

    let a = register(&m, None, "127.0.0.1:7001").await;
    register(&m, None, "127.0.0.1:7002").await;
    let drain = Request::DrainProvider {
        addr: "127.0.0.1:7001".into(),
    };
    pool.call(&addr, &drain, &[]).await.unwrap();
    create_blob(&m, 1).await.unwrap();
    fs_create(&m, "x").await;
    let report = MaintenanceStatus {
        passes: 3,
        running: true,
        under_replicated_chunks: 5,
        draining: vec![(a, 1 << 20)],
        last_error: Some("provider 2 unreachable".into()),
        ..MaintenanceStatus::default()
    };
    let req = Request::ReportMaintenance {
        status: report.clone(),
    };
    assert_eq!(pool.call(&addr, &req, &[]).await.unwrap().0, Response::Ok);

    let after = status(pool.clone(), addr.clone()).await;
    assert_eq!(after.blobs, 2);
    let flags: Vec<(bool, bool)> = after
        .providers
        .iter()
        .map(|p| (p.alive, p.draining))
        .collect();
    assert_eq!(flags, [(true, true), (true, false)]);
    assert_eq!(after.maintenance, report);
    let now = tomus_manager::versions::now_ms();
    assert!(after.maintenance_reported_ms > 0 && after.maintenance_reported_ms <= now);
}
