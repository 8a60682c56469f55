//! The manager's side of fault tolerance. Each test runs the real service on a redb file in a
//! temporary directory and reopens it to check what is durable. This file holds what the tests
//! share (a manager on a directory, one helper per request); the tests live by subject:
//! `providers` (draining, removing, the replica overlay, status), `retention`,
//! `deleted_files`, `new_files`, `pages` (listings a page at a time), `gc` (fates, cutoffs,
//! rounds, the change log) and `durability` (a slow disk, older and newer state formats).

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

#[path = "../common/mod.rs"]
mod common;

mod deleted_files;
mod durability;
mod gc;
mod new_files;
mod pages;
mod providers;
mod retention;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use redb::ReadableTable;
use tomus_manager::service::ManagerService;
use tomus_manager::store::{Publication, Store};
use tomus_metadata::{BlobId, ChunkId, ProviderId, Span, Version};
use tomus_wire::maintenance::{
    Changes, Fates, GrantCutoffs, RecordReplicas, ReportMaintenance, TrimChanges,
};
use tomus_wire::manager::*;
use tomus_wire::{
    call_handler, BlobInfo, Change, Cutoffs, DataAge, ErrorKind, Fate, MaintenanceStatus,
    Placement, ProviderInfo, ProviderReport, Result, Retention, Rpc, VersionInfo, VersionList,
    VersionState, VersionsFrom, WriteOp, MAX_ATTRS_LISTING, MAX_LISTING,
};

use common::TempDir;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A manager on the state in `dir`, as `tomus_manager::run` assembles it.
fn open(dir: &Path, provider_timeout: Duration) -> Arc<ManagerService> {
    open_on(Arc::new(Store::open(dir).unwrap()), provider_timeout)
}

/// A manager on `store`.
fn open_on(store: Arc<Store>, provider_timeout: Duration) -> Arc<ManagerService> {
    let workers = tomus_worker::Workers::default();
    let reserve = tomus_manager::disk_reserve::DiskReserve::none();
    Arc::new(ManagerService::open(store, workers, provider_timeout, None, reserve).unwrap())
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
        fault: None,
    }
}

async fn register(m: &ManagerService, id: Option<ProviderId>, addr: &str) -> ProviderId {
    let req = Register {
        id,
        key: rand::random(),
        addr: addr.into(),
        report: report(),
        cluster: None,
    };
    call(m, req).await.unwrap().id
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

/// Assigns an append of 10 bytes whose data is as old as `data` says.
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
    let plain: Vec<Version> = call(
        m,
        ListVersions {
            blob,
            after: 0,
            limit: MAX_LISTING,
        },
    )
    .await
    .unwrap()
    .versions
    .iter()
    .map(|v| v.version)
    .collect();
    let with_attrs: Vec<Version> = call(
        m,
        VersionsAttrs {
            blob,
            from: VersionsFrom::After(0),
            limit: MAX_ATTRS_LISTING,
        },
    )
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
    let e = call(
        m,
        ListVersions {
            blob,
            after: 0,
            limit: MAX_LISTING,
        },
    )
    .await
    .unwrap_err();
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
