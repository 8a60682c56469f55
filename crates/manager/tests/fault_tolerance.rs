//! The manager's side of fault tolerance: draining and removing providers, the chunk replica
//! overlay, retention, deleting the blobs of removed files and the cluster status. Each test
//! runs the real service on a redb file in a temporary directory and reopens it to check what
//! is durable.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use redb::ReadableTable;
use tomus_manager::namespace::Namespace;
use tomus_manager::registry::Registry;
use tomus_manager::service::ManagerService;
use tomus_manager::store::{Publication, Store};
use tomus_manager::topology::Topology;
use tomus_manager::VersionManager;
use tomus_metadata::{BlobId, ChunkId, ProviderId, Span, Version};
use tomus_wire::maintenance::{
    Changes, Fates, GrantCutoffs, RecordReplicas, ReportMaintenance, TrimChanges,
};
use tomus_wire::manager::*;
use tomus_wire::{
    call_handler, BlobInfo, Change, Cutoffs, DataAge, ErrorKind, Fate, MaintenanceStatus,
    Placement, ProviderInfo, ProviderReport, Result, Retention, Rpc, VersionInfo, VersionState,
    WriteOp,
};

use common::TempDir;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A manager on the state in `dir`, as `tomus_manager::run` assembles it.
fn open(dir: &Path, provider_timeout: Duration) -> Arc<ManagerService> {
    let store = Arc::new(Store::open(dir).unwrap());
    let workers = tomus_worker::Workers::default();
    let versions = VersionManager::open(store.clone(), &workers).unwrap();
    let namespace = Arc::new(Namespace::open(store.clone(), versions.clone()).unwrap());
    let registry = Arc::new(Registry::open(store.clone(), provider_timeout).unwrap());
    let topology = Arc::new(Topology::new(store.clone(), None, provider_timeout));
    let steward = Arc::new(tomus_manager::steward::Steward::open(store.clone()).unwrap());
    Arc::new(ManagerService {
        versions,
        namespace,
        registry,
        store,
        workers,
        topology,
        steward,
    })
}

/// Closes a manager so its database can be opened again (the committer task lets go of it
/// once its version manager is gone).
async fn close(m: Arc<ManagerService>) {
    drop(m);
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn call<R: Rpc>(m: &ManagerService, req: R) -> Result<R::Response> {
    call_handler(m, req, Bytes::new()).await
}

fn report() -> ProviderReport {
    ProviderReport {
        capacity: 1 << 40,
        free: 1 << 40,
        chunks: 0,
        load: 0,
        lost: Vec::new(),
        stored_bytes: 0,
    }
}

async fn register(m: &ManagerService, id: Option<ProviderId>, addr: &str) -> ProviderId {
    let req = Register {
        id,
        addr: addr.into(),
        report: report(),
    };
    call(m, req).await.unwrap()
}

async fn providers(m: &ManagerService) -> Vec<ProviderInfo> {
    call(m, ListProviders {}).await.unwrap()
}

async fn create_blob(m: &ManagerService, replication: u32) -> Result<BlobInfo> {
    let req = CreateBlob {
        chunk_size: 64 << 10,
        replication,
    };
    call(m, req).await
}

/// Provider ids `chunks` new chunks of `blob` are placed on.
async fn placed_on(m: &ManagerService, blob: BlobId, chunks: u32) -> Vec<ProviderId> {
    let req = Allocate {
        blob,
        chunks,
        chunk_bytes: None,
        placement: Placement::Balanced,
        client_host: None,
        avoid: Vec::new(),
    };
    let placed = call(m, req).await.unwrap();
    placed.into_iter().flatten().map(|p| p.id).collect()
}

async fn assign(m: &ManagerService, blob: BlobId, size: u64) -> Result<Version> {
    let req = Assign {
        blob,
        op: WriteOp::Append { size },
        attrs: Default::default(),
        expect_size: None,
        data: Default::default(),
    };
    Ok(call(m, req).await?.version)
}

async fn complete(m: &ManagerService, blob: BlobId, version: Version) -> Result<VersionInfo> {
    call(m, Complete { blob, version }).await
}

/// Appends one published version.
async fn publish(m: &ManagerService, blob: BlobId) -> Version {
    let v = assign(m, blob, 100).await.unwrap();
    complete(m, blob, v).await.unwrap().version
}

async fn version(m: &ManagerService, blob: BlobId, v: Option<Version>) -> Result<VersionInfo> {
    call(m, GetVersion { blob, version: v }).await
}

/// Numbers of the listed versions, from `ListVersions` and `VersionsAttrs` (which must agree).
async fn listed(m: &ManagerService, blob: BlobId) -> Vec<Version> {
    let plain: Vec<Version> = call(m, ListVersions { blob })
        .await
        .unwrap()
        .versions
        .iter()
        .map(|v| v.version)
        .collect();
    let with_attrs: Vec<Version> = call(m, VersionsAttrs { blob })
        .await
        .unwrap()
        .iter()
        .map(|(v, _)| v.version)
        .collect();
    assert_eq!(plain, with_attrs);
    plain
}

async fn abort(m: &ManagerService, blob: BlobId, version: Version) -> Result<()> {
    call(m, AbortVersion { blob, version }).await
}

async fn set_retention(m: &ManagerService, blob: BlobId, retention: Retention) -> Result<BlobInfo> {
    call(m, SetRetention { blob, retention }).await
}

async fn blob_info(m: &ManagerService, blob: BlobId) -> Result<BlobInfo> {
    call(m, GetBlob { blob }).await
}

async fn fs_create(m: &ManagerService, path: &str) -> BlobId {
    let req = FsCreate {
        path: path.into(),
        chunk_size: 64 << 10,
        replication: 1,
        exclusive: true,
    };
    call(m, req).await.unwrap().blob.unwrap().id
}

async fn remove(m: &ManagerService, addr: &str) -> Result<()> {
    call(m, RemoveProvider { addr: addr.into() }).await
}

async fn report_maintenance(m: &ManagerService, status: MaintenanceStatus) {
    call(
        m,
        ReportMaintenance {
            status: Box::new(status),
        },
    )
    .await
    .unwrap();
}

async fn drain(m: &ManagerService, addr: &str) -> Result<ProviderInfo> {
    call(m, DrainProvider { addr: addr.into() }).await
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
    let drained = drain(&m, "127.0.0.1:7002").await.unwrap();
    assert_eq!(
        (drained.id, drained.draining, drained.alive),
        (ids[1], true, true)
    );
    let e = drain(&m, "127.0.0.1:9999").await;
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
    let hb = Heartbeat {
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

    // A pass that started before clients can all know of the drain says nothing about it:
    // a client may write there by a provider list fetched just before the drain.
    let blob = create_blob(&m, 1).await.unwrap().id;
    let drained_at = tomus_wire::now_ms();
    drain(&m, "127.0.0.1:7001").await.unwrap();
    let horizon = drained_at + tomus_wire::PROVIDER_VIEW_TTL.as_millis() as u64;
    let mut status = MaintenanceStatus {
        draining: vec![(a, 0)],
        last_pass_started_ms: tomus_wire::now_ms(),
        ..MaintenanceStatus::default()
    };
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(
        e.message.contains("no maintenance pass has started since"),
        "{}",
        e.message
    );
    let shown = call(&m, GetStatus {}).await.unwrap().maintenance.draining;
    assert!(shown.is_empty(), "not yet known to be empty: {shown:?}");

    // A write with data stored before that horizon, in flight: whatever a pass found, it
    // may hold data there until it is published.
    let v = assign(&m, blob, 100).await.unwrap();
    status.last_pass_started_ms = horizon + 1_000;
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert!(e.message.contains("not published yet"), "{}", e.message);
    complete(&m, blob, v).await.unwrap();

    status.draining = vec![(a, 1000)];
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(e.message.contains("1000 bytes"), "{}", e.message);
    let shown = call(&m, GetStatus {}).await.unwrap().maintenance.draining;
    assert_eq!(shown, [(a, 1000)]);

    status.draining = vec![(a, 0)];
    report_maintenance(&m, status).await;
    assert_eq!(
        call(&m, GetStatus {}).await.unwrap().maintenance.draining,
        [(a, 0)]
    );
    remove(&m, "127.0.0.1:7001").await.unwrap();
    let left: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(left, [b]);

    // A write whose data began storing before the horizon, assigned only now, may have put
    // it on the removed provider: refused. One whose data is newer (past the margin for its
    // request's transit) is not.
    let since_drain = DataAge {
        stored_ms: tomus_wire::now_ms() - drained_at + 1,
        reused_ms: None,
    };
    let e = assign_aged(&m, blob, since_drain).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired);
    assert!(
        e.message.contains("drained provider was removed"),
        "{}",
        e.message
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let v = assign(&m, blob, 100).await.unwrap();
    assert_eq!(complete(&m, blob, v).await.unwrap().version, v);

    // Back again: a new id, not draining.
    let again = register(&m, Some(a), "127.0.0.1:7001").await;
    assert!(again > b, "{again}");
    assert!(!providers(&m).await.iter().any(|p| p.draining));

    // Down (no heartbeat for the timeout): removable without draining.
    tokio::time::sleep(timeout + Duration::from_millis(100)).await;
    let hb = Heartbeat {
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
    remove(&m, "127.0.0.1:7002").await.unwrap();
    // Its heartbeats are refused now, and it registers as a new provider.
    let hb = Heartbeat {
        id: b,
        report: report(),
    };
    assert_eq!(call(&m, hb).await.unwrap_err().kind, ErrorKind::NotFound);

    close(m).await;
    let m = open(dir.path(), timeout);
    let left: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(left, [again]);
    // A restarted manager still refuses a write that may have data on the removed provider.
    let since_drain = DataAge {
        stored_ms: tomus_wire::now_ms() - drained_at + 1,
        reused_ms: None,
    };
    let e = assign_aged(&m, blob, since_drain).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    assign(&m, blob, 100).await.unwrap();
}

#[tokio::test]
async fn the_replica_overlay_is_upserted_and_survives_a_restart() {
    let dir = TempDir::new("overlay");
    let m = open(dir.path(), TIMEOUT);
    let (c1, c2, c3) = (ChunkId(1 << 100), ChunkId(7), ChunkId(u128::MAX));
    let record = |entries: Vec<(ChunkId, Vec<ProviderId>)>| RecordReplicas { entries };
    let lookup = ChunkReplicas {
        chunks: vec![c1, c3, c2],
    };
    call(&m, record(vec![(c1, vec![1, 2]), (c2, vec![3])]))
        .await
        .unwrap();
    assert_eq!(
        call(&m, lookup.clone()).await.unwrap(),
        vec![vec![1, 2], vec![], vec![3]]
    );
    call(&m, record(vec![(c1, vec![4, 2]), (c3, vec![5])]))
        .await
        .unwrap();
    let expected = vec![vec![4, 2], vec![5], vec![3]];
    assert_eq!(call(&m, lookup.clone()).await.unwrap(), expected);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(call(&m, lookup).await.unwrap(), expected);
    let none = ChunkReplicas { chunks: vec![] };
    assert!(call(&m, none).await.unwrap().is_empty());
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

/// A time-based policy is looked at again when its cutoff passes a version it keeps, not
/// later (nor every round, which would read the store for every such blob every second).
#[tokio::test]
async fn keep_newer_than_removes_a_version_in_the_first_round_after_it_ages_out() {
    const DAY: u64 = 86_400_000;
    let dir = TempDir::new("keep-newer-due");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    for _ in 0..3 {
        publish(&m, blob).await;
        // Distinct publication times, so each version ages out on its own.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set_retention(&m, blob, Retention::KeepNewerThan(DAY))
        .await
        .unwrap();
    assert_eq!(listed(&m, blob).await, [1, 2, 3]);
    let p1 = version(&m, blob, Some(1)).await.unwrap().published_ms;
    let p2 = version(&m, blob, Some(2)).await.unwrap().published_ms;

    let enforce = |now: u64| m.versions.enforce_retention(now);
    assert_eq!(enforce(p1 + DAY), 0, "version 1 is exactly a day old");
    assert_eq!(listed(&m, blob).await, [1, 2, 3]);
    assert_eq!(enforce(p1 + DAY + 1), 1);
    assert_eq!(listed(&m, blob).await, [2, 3]);
    assert_eq!(enforce(p2 + DAY), 0);
    assert_eq!(enforce(p2 + DAY + 1), 1);
    assert_eq!(listed(&m, blob).await, [3]);
    // The latest stays however old it gets.
    assert_eq!(enforce(p2 + 1000 * DAY), 0);
    assert_eq!(listed(&m, blob).await, [3]);
    close(m).await;
}

async fn fs_delete(m: &ManagerService, path: &str, recursive: bool) -> Result<()> {
    let req = FsDelete {
        path: path.into(),
        recursive,
    };
    call(m, req).await
}

async fn fs_mkdir(m: &ManagerService, path: &str, parents: bool) -> Result<tomus_wire::FsEntry> {
    let req = FsMkdir {
        path: path.into(),
        parents,
    };
    call(m, req).await
}

async fn fs_rename(m: &ManagerService, from: &str, to: &str) -> Result<()> {
    let req = FsRename {
        from: from.into(),
        to: to.into(),
    };
    call(m, req).await
}

async fn assert_gone(m: &ManagerService, blob: BlobId) {
    assert_eq!(
        blob_info(m, blob).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    let e = call(m, ListVersions { blob }).await.unwrap_err();
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
    publish(&m, src).await;
    let dst = fs_create(&m, "r/dst").await;
    publish(&m, dst).await;
    let kept = fs_create(&m, "kept").await;
    publish(&m, kept).await;

    fs_delete(&m, "a/f", false).await.unwrap();
    assert_gone(&m, file).await;
    fs_delete(&m, "d", true).await.unwrap();
    assert_gone(&m, x).await;
    assert_gone(&m, y).await;

    fs_rename(&m, "r/src", "r/dst").await.unwrap();
    assert_gone(&m, dst).await;
    blob_info(&m, src).await.unwrap();
    let stat = FsStat {
        path: "r/dst".into(),
    };
    assert_eq!(call(&m, stat).await.unwrap().blob.unwrap().id, src);
    let list = FsList {
        path: "".into(),
        recursive: true,
        start_after: None,
        limit: 100,
    };
    let listed: Vec<String> = call(&m, list)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(listed, ["a", "kept", "r", "r/dst"]);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    for blob in [file, x, y, dst] {
        assert_gone(&m, blob).await;
    }
    let blobs: Vec<BlobId> = call(&m, ListBlobs {})
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(blobs, [src, kept]);
}

#[tokio::test]
async fn writers_of_deleted_blobs_are_told_rather_than_left_waiting() {
    let dir = TempDir::new("delete-pending");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    publish(&m, blob).await;
    let lower = assign(&m, blob, 10).await.unwrap();
    let upper = assign(&m, blob, 10).await.unwrap();
    // Completed, but waiting for the lower version's writer.
    let waiting = tokio::spawn({
        let m = m.clone();
        async move { complete(&m, blob, upper).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    fs_delete(&m, "f", false).await.unwrap();
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
    publish(&m, blob).await;
    let mut record = m
        .store
        .blobs()
        .unwrap()
        .into_iter()
        .find(|b| b.id == blob)
        .unwrap();
    fs_delete(&m, "f", false).await.unwrap();
    // What the committer would write for a version completed just before the deletion.
    record.published = 2;
    let late = Publication {
        blob: record,
        versions: vec![VersionInfo {
            blob,
            version: 2,
            span: Span::new(0, 10),
            size: 10,
            capacity: 64 << 10,
            state: VersionState::Published,
            append: true,
            published_ms: 1,
        }],
        attrs: vec![],
        name: None,
    };
    assert_eq!(m.store.publish(&[late]).unwrap().deleted, [blob]);
    assert!(m.store.blobs().unwrap().is_empty());
    assert!(m.store.version(blob, 2).unwrap().is_none());
}

/// A file's later versions are published through the journal; removing the file right after
/// (before redb holds them) and restarting must not bring any of it back.
#[tokio::test]
async fn a_file_removed_after_journaled_versions_stays_removed_after_a_restart() {
    let dir = TempDir::new("journal-delete");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    // The first version names the file (committed to redb); the others go to the journal.
    for _ in 0..4 {
        publish(&m, blob).await;
    }
    // Asked of memory, not redb: a listing would apply the journal first.
    assert_eq!(version(&m, blob, None).await.unwrap().version, 4);
    let kept = fs_create(&m, "g").await;
    publish(&m, kept).await;
    publish(&m, kept).await;
    fs_delete(&m, "f", false).await.unwrap();
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_gone(&m, blob).await;
    assert_eq!(listed(&m, kept).await, [1, 2]);
    let deleted_then_published = call(
        &m,
        Changes {
            after: 0,
            limit: 1000,
        },
    )
    .await
    .unwrap()
    .changes
    .iter()
    .skip_while(|(_, c)| !matches!(c, Change::Deleted { blob: b, .. } if *b == blob))
    .any(|(_, c)| matches!(c, Change::Published { blob: b, .. } if *b == blob));
    assert!(
        !deleted_then_published,
        "a publication logged after its blob's deletion"
    );
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
        tomus_wire::ServerLimits::default(),
        m.clone(),
        Arc::new(tomus_wire::LoadGauge::default()),
    ));
    let pool = tomus_wire::Pool::new(tomus_wire::RpcConfig::default());
    let status = |pool: Arc<tomus_wire::Pool>, addr: String| async move {
        pool.call(&addr, GetStatus {}).await.unwrap()
    };

    let before = status(pool.clone(), addr.clone()).await;
    assert!(before.providers.is_empty());
    assert_eq!((before.blobs, before.maintenance_reported_ms), (0, 0));
    assert_eq!(before.maintenance, MaintenanceStatus::default());
    assert_eq!(before.provider_timeout_ms, TIMEOUT.as_millis() as u64);

    let a = register(&m, None, "127.0.0.1:7001").await;
    register(&m, None, "127.0.0.1:7002").await;
    let drain = DrainProvider {
        addr: "127.0.0.1:7001".into(),
    };
    pool.call(&addr, drain).await.unwrap();
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
    let req = ReportMaintenance {
        status: Box::new(report.clone()),
    };
    pool.call(&addr, req).await.unwrap();

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

async fn fates(m: &ManagerService, items: Vec<(BlobId, Version)>) -> Vec<Fate> {
    call(m, Fates { items }).await.unwrap()
}

#[tokio::test]
async fn fates_say_only_what_the_manager_positively_knows() {
    let dir = TempDir::new("fates");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let v1 = publish(&m, blob).await;
    let v2 = publish(&m, blob).await;
    let v3 = publish(&m, blob).await;
    let pending = assign(&m, blob, 10).await.unwrap();
    let given_up = assign(&m, blob, 10).await.unwrap();
    abort(&m, blob, given_up).await.unwrap();
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    // Held back: the pending version builds on v3 (and nothing below it).
    assert_eq!(listed(&m, blob).await, vec![v3]);
    let removed = fs_create(&m, "gone").await;
    publish(&m, removed).await;
    fs_delete(&m, "gone", false).await.unwrap();
    let never = removed + 100;
    let got = fates(
        &m,
        vec![
            (blob, v1),
            (blob, v2),
            (blob, v3),
            (blob, pending),
            (blob, given_up),
            (blob, given_up + 50),
            (removed, 1),
            (never, 1),
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            Fate::Expired,
            Fate::Expired,
            Fate::Live,
            Fate::Live,
            Fate::Aborted,
            Fate::Unknown,
            Fate::Deleted,
            Fate::Unknown,
        ]
    );
    // The tombstone is durable: a restarted manager still knows the blob was deleted.
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(fates(&m, vec![(removed, 1)]).await, vec![Fate::Deleted]);
}

#[tokio::test]
async fn retention_keeps_the_version_a_pending_writer_builds_on() {
    let dir = TempDir::new("retention-hold");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    publish(&m, blob).await;
    let base = publish(&m, blob).await;
    // Three writers get versions, then a slow one: it builds on `base` and refers to the
    // three in flight below it. The three publish; the slow one is still writing.
    let mut fast = Vec::new();
    for _ in 0..3 {
        fast.push(assign(&m, blob, 10).await.unwrap());
    }
    let slow = assign(&m, blob, 10).await.unwrap();
    for v in &fast {
        complete(&m, blob, *v).await.unwrap();
    }
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    // The slow writer's metadata may refer to any node of `base` and of the versions above
    // it: they all stay while it is pending, though the policy would keep only the latest.
    let mut held = vec![base];
    held.extend(&fast);
    assert_eq!(listed(&m, blob).await, held);
    assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 0);
    assert_eq!(listed(&m, blob).await, held);

    complete(&m, blob, slow).await.unwrap();
    // The writer is done: the policy applies in full at the next round (the manager runs
    // one every second).
    assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 1);
    assert_eq!(listed(&m, blob).await, vec![slow]);
    assert_eq!(
        version(&m, blob, Some(base)).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
}

/// A file whose syncs take as long as `delay_ms` says: a slow or overloaded disk.
#[derive(Debug)]
struct SlowSyncs {
    file: redb::backends::FileBackend,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl redb::StorageBackend for SlowSyncs {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.file.read(offset, len)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn sync_data(&self, eventual: bool) -> std::io::Result<()> {
        let ms = self.delay_ms.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(ms));
        self.file.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file.write(offset, data)
    }
}

/// One async worker thread, a disk whose syncs take a second: requests that sync (creating
/// a blob, registering a provider, giving a version up, reserving version numbers) must not
/// hold up the requests that do not.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_disk_sync_does_not_stall_requests_that_need_none() {
    let dir = TempDir::new("slow-sync");
    let delay_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join("manager.redb"))
        .unwrap();
    let backend = SlowSyncs {
        file: redb::backends::FileBackend::new(file).unwrap(),
        delay_ms: delay_ms.clone(),
    };
    let store = Arc::new(Store::open_on(backend, "slow").unwrap());
    let workers = tomus_worker::Workers::default();
    let versions = VersionManager::open(store.clone(), &workers).unwrap();
    let namespace = Arc::new(Namespace::open(store.clone(), versions.clone()).unwrap());
    let registry = Arc::new(Registry::open(store.clone(), TIMEOUT).unwrap());
    let topology = Arc::new(Topology::new(store.clone(), None, TIMEOUT));
    let steward = Arc::new(tomus_manager::steward::Steward::open(store.clone()).unwrap());
    let m = Arc::new(ManagerService {
        versions,
        namespace,
        registry,
        store,
        workers,
        topology,
        steward,
    });
    register(&m, None, "127.0.0.1:7001").await;
    let blob = create_blob(&m, 1).await.unwrap().id;
    let pending = assign(&m, blob, 10).await.unwrap();
    delay_ms.store(1000, std::sync::atomic::Ordering::Relaxed);

    let syncing: Vec<tokio::task::JoinHandle<()>> = vec![
        tokio::spawn({
            let m = m.clone();
            async move {
                create_blob(&m, 1).await.unwrap();
            }
        }),
        tokio::spawn({
            let m = m.clone();
            async move {
                register(&m, None, "127.0.0.1:7002").await;
            }
        }),
        tokio::spawn({
            let m = m.clone();
            async move {
                abort(&m, blob, pending).await.unwrap();
            }
        }),
    ];
    // Let them reach their syncs.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    for _ in 0..10 {
        blob_info(&m, blob).await.unwrap();
        call(&m, GetStatus {}).await.unwrap();
        version(&m, blob, None).await.unwrap();
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(300),
        "requests without a sync waited {took:?} behind syncing ones"
    );
    for task in syncing {
        task.await.unwrap();
    }
    delay_ms.store(0, std::sync::atomic::Ordering::Relaxed);
}

#[tokio::test]
async fn state_of_a_newer_format_is_refused_and_an_older_one_upgraded() {
    let dir = TempDir::new("schema");
    let path = dir.path().join("manager.redb");
    {
        // A store as issue 3 left it: its tables, no format record.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<u64, &[u8]>::new("blobs"))
            .unwrap();
        txn.commit().unwrap();
    }
    let m = open(dir.path(), TIMEOUT);
    create_blob(&m, 1).await.unwrap();
    close(m).await;
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let meta = redb::TableDefinition::<&str, u64>::new("meta");
        assert_eq!(
            txn.open_table(meta)
                .unwrap()
                .get("schema")
                .unwrap()
                .unwrap()
                .value(),
            5
        );
        txn.open_table(meta).unwrap().insert("schema", 99).unwrap();
        txn.commit().unwrap();
    }
    let e = Store::open(dir.path()).err().unwrap();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("format 99"), "{e}");
}

/// Data stored a minute ago: older than any cutoff the tests grant.
const STORED_LONG_AGO: DataAge = DataAge {
    stored_ms: 60_000,
    reused_ms: None,
};
/// Fresh data with reused chunks found a minute ago.
const REUSED_LONG_AGO: DataAge = DataAge {
    stored_ms: 0,
    reused_ms: Some(60_000),
};

async fn assign_aged(m: &ManagerService, blob: BlobId, data: DataAge) -> Result<Version> {
    let req = Assign {
        blob,
        op: WriteOp::Append { size: 10 },
        attrs: Default::default(),
        expect_size: None,
        data,
    };
    Ok(call(m, req).await?.version)
}

async fn grant(m: &ManagerService, fresh_ms: u64, reused_ms: u64) -> Cutoffs {
    let proposed = Cutoffs {
        fresh_ms,
        reused_ms,
    };
    call(m, GrantCutoffs { proposed }).await.unwrap()
}

#[tokio::test]
async fn gc_cutoffs_wait_for_writers_and_refuse_older_data() {
    let dir = TempDir::new("cutoffs");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let now = tomus_wire::now_ms();
    // A writer whose chunks were stored ten minutes ago is in progress: no cutoff passes it.
    let ten_minutes = 600_000;
    let slow = assign_aged(
        &m,
        blob,
        DataAge {
            stored_ms: ten_minutes,
            reused_ms: Some(ten_minutes),
        },
    )
    .await
    .unwrap();
    let granted = grant(&m, now, now).await;
    assert!(granted.fresh_ms <= now - ten_minutes, "{granted:?}");
    assert!(granted.reused_ms <= now - ten_minutes, "{granted:?}");
    complete(&m, blob, slow).await.unwrap();

    // Done: the cutoff moves up to what was asked, and writes with older data are refused.
    let granted = grant(&m, now - 5_000, now - 2_000).await;
    assert_eq!(
        granted,
        Cutoffs {
            fresh_ms: now - 5_000,
            reused_ms: now - 2_000
        }
    );
    let e = assign_aged(&m, blob, STORED_LONG_AGO).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    let e = assign_aged(&m, blob, REUSED_LONG_AGO).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    assign_aged(&m, blob, DataAge::default()).await.unwrap();

    // Cutoffs never go back, and survive a restart.
    assert_eq!(grant(&m, 0, 0).await, granted);
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(grant(&m, 0, 0).await, granted);
    let e = assign_aged(&m, blob, STORED_LONG_AGO).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired);
}

/// The periodic rounds look only at the blobs listed as changed (`versions/watchlist.rs`),
/// not at every blob: one that stayed idle through many rounds, and dropped off the lists,
/// is seen again by each round once it has a writer or new versions.
#[tokio::test]
async fn the_rounds_see_an_idle_blob_again_once_it_changes() {
    let dir = TempDir::new("watchlist");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    publish(&m, blob).await;
    for _ in 0..3 {
        assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 0);
        assert_eq!(m.versions.expire_leases(Duration::ZERO).unwrap(), 0);
        assert_eq!(grant(&m, 0, 0).await, Cutoffs::default());
    }

    // A writer whose data is ten minutes old: the cutoffs wait for it...
    let now = tomus_wire::now_ms();
    let ten_minutes = 600_000;
    let age = DataAge {
        stored_ms: ten_minutes,
        reused_ms: None,
    };
    let slow = assign_aged(&m, blob, age).await.unwrap();
    assert!(grant(&m, now, now).await.fresh_ms <= now - ten_minutes);
    // ...and its lease runs out.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        m.versions.expire_leases(Duration::from_millis(10)).unwrap(),
        1
    );
    let e = complete(&m, blob, slow).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::VersionAborted, "{e}");

    // Idle again for a few rounds, then two new versions: retention keeps the last.
    for _ in 0..3 {
        assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 0);
        assert_eq!(m.versions.expire_leases(Duration::ZERO).unwrap(), 0);
    }
    publish(&m, blob).await;
    let last = publish(&m, blob).await;
    assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 1);
    assert_eq!(listed(&m, blob).await, vec![last]);
}

#[tokio::test]
async fn the_change_log_records_what_became_referenced_and_what_died() {
    let dir = TempDir::new("changes");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let v1 = publish(&m, blob).await;
    let v2 = publish(&m, blob).await;
    let dead = assign(&m, blob, 5).await.unwrap();
    abort(&m, blob, dead).await.unwrap();
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    // A new file given up before its first version: its blob is deleted.
    let file = fs_create(&m, "f").await;
    abandon(&m, "f", file).await;

    let page = call(
        &m,
        Changes {
            after: 0,
            limit: 100,
        },
    )
    .await
    .unwrap();
    let kinds: Vec<String> = page
        .changes
        .iter()
        .map(|(_, c)| match c {
            Change::Published {
                blob: b, versions, ..
            } => {
                format!(
                    "published {b}:{:?}",
                    versions.iter().map(|v| v.version).collect::<Vec<_>>()
                )
            }
            Change::Aborted { blob: b, from, to } => format!("aborted {b}:{from}..{to}"),
            Change::Expired {
                blob: b,
                retained_from,
            } => format!("expired {b}:<{retained_from}"),
            Change::Deleted { blob: b } => format!("deleted {b}"),
            Change::Unrecorded => "unrecorded".into(),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            format!("published {blob}:[{v1}]"),
            format!("published {blob}:[{v2}]"),
            format!("aborted {blob}:{dead}..{}", dead + 1),
            format!("expired {blob}:<{v2}"),
            format!("deleted {file}"),
        ]
    );
    let seqs: Vec<u64> = page.changes.iter().map(|(s, _)| *s).collect();
    assert_eq!(page.first_kept, seqs[0]);
    // Trimmed changes are gone; the rest stay, and so does the numbering.
    call(&m, TrimChanges { upto: seqs[2] }).await.unwrap();
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    let page = call(
        &m,
        Changes {
            after: 0,
            limit: 100,
        },
    )
    .await
    .unwrap();
    assert_eq!(page.first_kept, seqs[3]);
    assert_eq!(
        page.changes[..2]
            .iter()
            .map(|(s, _)| *s)
            .collect::<Vec<_>>(),
        seqs[3..]
    );
    // The restart gave up the version numbers reserved beyond the last published one.
    assert!(
        matches!(page.changes[2].1, Change::Aborted { blob: b, from, .. } if b == blob && from == v2 + 1),
        "{:?}",
        page.changes[2..].to_vec()
    );
}

async fn abandon(m: &ManagerService, path: &str, blob: BlobId) {
    let req = FsAbandon {
        path: path.into(),
        blob,
    };
    call(m, req).await.unwrap();
}

async fn create(m: &ManagerService, path: &str, exclusive: bool) -> Result<BlobId> {
    let req = FsCreate {
        path: path.into(),
        chunk_size: 64 << 10,
        replication: 1,
        exclusive,
    };
    Ok(call(m, req).await?.blob.unwrap().id)
}

async fn stat(m: &ManagerService, path: &str) -> Result<tomus_wire::FsEntry> {
    call(m, FsStat { path: path.into() }).await
}

/// Every path in the namespace, in order.
async fn every_path(m: &ManagerService) -> Vec<String> {
    let list = FsList {
        path: "".into(),
        recursive: true,
        start_after: None,
        limit: 100,
    };
    let entries = call(m, list).await.unwrap();
    entries.into_iter().map(|e| e.path).collect()
}

#[tokio::test]
async fn new_files_appear_only_with_their_first_version() {
    let dir = TempDir::new("create-on-commit");
    let m = open(dir.path(), TIMEOUT);
    let blob = create(&m, "d/new", false).await.unwrap();
    // Neither the file nor its parent is visible, to any read.
    assert_eq!(
        stat(&m, "d/new").await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(stat(&m, "d").await.unwrap_err().kind, ErrorKind::NotFound);
    let object = FsObject {
        path: "d/new".into(),
        version: None,
    };
    assert_eq!(
        call(&m, object).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert!(every_path(&m).await.is_empty());
    let e = fs_delete(&m, "d/new", false).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    // Concurrent creators of the new file share it (as writers of an existing file do); an
    // exclusive one, or a directory, is refused.
    assert_eq!(create(&m, "d/new", false).await.unwrap(), blob);
    let e = create(&m, "d/new", true).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::AlreadyExists);
    let e = fs_mkdir(&m, "d/new", true).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::AlreadyExists);
    // A directory made meanwhile at its parent is fine.
    fs_mkdir(&m, "d", false).await.unwrap();
    // A restart keeps it pending, and its first publication binds it.
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(every_path(&m).await, ["d"]);
    let v = publish(&m, blob).await;
    let e = stat(&m, "d/new").await.unwrap();
    let info = e.blob.unwrap();
    assert_eq!(info.latest, v);
    // Created when its first version was published, not later.
    assert_eq!(e.created_ms, info.modified_ms);
    assert_eq!(every_path(&m).await, ["d", "d/new"]);
    // Its parents are made with it; later writers just add versions.
    let deep = create(&m, "a/b/c", false).await.unwrap();
    assert_eq!(every_path(&m).await, ["d", "d/new"]);
    publish(&m, deep).await;
    assert_eq!(every_path(&m).await, ["a", "a/b", "a/b/c", "d", "d/new"]);
    assert_eq!(create(&m, "a/b/c", false).await.unwrap(), deep);
    publish(&m, deep).await;
    assert_eq!(stat(&m, "a/b/c").await.unwrap().blob.unwrap().latest, 2);
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(every_path(&m).await, ["a", "a/b", "a/b/c", "d", "d/new"]);
}

#[tokio::test]
async fn new_files_given_up_or_abandoned_leave_nothing() {
    let dir = TempDir::new("abandon");
    let m = open(dir.path(), TIMEOUT);
    // Two writers hold it: it goes when the second gives it up.
    let shared = create(&m, "x/a", false).await.unwrap();
    assert_eq!(create(&m, "x/a", false).await.unwrap(), shared);
    abandon(&m, "x/a", shared).await;
    assert_eq!(
        create(&m, "x/a", true).await.unwrap_err().kind,
        ErrorKind::AlreadyExists
    );
    abandon(&m, "x/a", shared).await;
    assert_gone(&m, shared).await;
    let again = create(&m, "x/a", true).await.unwrap();
    assert_ne!(again, shared);
    // Giving up a published file does nothing.
    publish(&m, again).await;
    abandon(&m, "x/a", again).await;
    assert_eq!(stat(&m, "x/a").await.unwrap().blob.unwrap().id, again);

    // Writers that died: dropped after the grace, unless a version is on its way.
    let dead = create(&m, "y/b", false).await.unwrap();
    let busy = create(&m, "y/c", false).await.unwrap();
    let v = assign(&m, busy, 10).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        m.namespace
            .collect_abandoned(Duration::from_millis(50))
            .unwrap(),
        1
    );
    assert_gone(&m, dead).await;
    assert_ne!(create(&m, "y/b", true).await.unwrap(), dead);
    complete(&m, busy, v).await.unwrap();
    assert_eq!(every_path(&m).await, ["x", "x/a", "y", "y/c"]);
}

#[tokio::test]
async fn a_new_file_that_cannot_take_its_name_publishes_nothing() {
    let dir = TempDir::new("bind-conflict");
    let m = open(dir.path(), TIMEOUT);
    let below = create(&m, "p/f", false).await.unwrap();
    // Meanwhile "p" becomes a file.
    let p = create(&m, "p", false).await.unwrap();
    publish(&m, p).await;
    let v = assign(&m, below, 10).await.unwrap();
    let e = complete(&m, below, v).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotADirectory, "{e}");
    assert!(e.message.contains("nothing was published"), "{e}");
    assert_gone(&m, below).await;
    assert_eq!(every_path(&m).await, ["p"]);

    // Something renamed onto a new file's path takes it; the new file's writer is told.
    let pending = create(&m, "t", false).await.unwrap();
    let s = create(&m, "s", false).await.unwrap();
    publish(&m, s).await;
    fs_rename(&m, "s", "t").await.unwrap();
    assert_eq!(stat(&m, "t").await.unwrap().blob.unwrap().id, s);
    assert_gone(&m, pending).await;
    // A directory renamed away leaves new files below it where they were created.
    let kept = create(&m, "dir/new", false).await.unwrap();
    let old = create(&m, "dir/old", false).await.unwrap();
    publish(&m, old).await;
    fs_rename(&m, "dir", "moved").await.unwrap();
    assert_eq!(every_path(&m).await, ["moved", "moved/old", "p", "t"]);
    publish(&m, kept).await;
    assert_eq!(
        every_path(&m).await,
        ["dir", "dir/new", "moved", "moved/old", "p", "t"]
    );
}
