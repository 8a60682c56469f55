//! The manager's RPC service: dispatches requests to the version manager, the namespace, the
//! registry and the store.

use std::sync::Arc;

use bytes::Bytes;
use tomus_wire::{ClusterStatus, Error, Handler, Payload, Request, Response, Result};

use crate::namespace::Namespace;
use crate::placement::place;
use crate::registry::Registry;
use crate::store::Store;
use crate::versions::VersionManager;

pub struct ManagerService {
    pub versions: Arc<VersionManager>,
    pub namespace: Arc<Namespace>,
    pub registry: Arc<Registry>,
    /// For the chunk replica overlay, which only the service reads and writes.
    pub store: Arc<Store>,
}

/// Runs `op` (which commits fsynced transactions) off the async workers.
async fn blocking<T: Send + 'static>(op: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| Error::internal(format!("manager task failed: {e}")))?
}

impl ManagerService {
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

    fn status(&self) -> ClusterStatus {
        let (maintenance, maintenance_reported_ms) = self.registry.maintenance();
        ClusterStatus {
            providers: self.registry.list(),
            blobs: self.versions.blob_count() as u64,
            provider_timeout_ms: self.registry.timeout().as_millis() as u64,
            maintenance,
            maintenance_reported_ms,
        }
    }

    async fn dispatch(&self, req: Request) -> Result<Response> {
        Ok(match req {
            Request::Ping => Response::Ok,
            Request::CreateBlob {
                chunk_size,
                replication,
            } => {
                self.check_replication(replication)?;
                Response::Blob(self.versions.create_blob(chunk_size, replication)?)
            }
            Request::BlobInfo { blob } => Response::Blob(self.versions.blob_info(blob)?),
            Request::ListBlobs => Response::Blobs(self.versions.list_blobs()),
            Request::Allocate {
                blob,
                chunks,
                chunk_bytes,
                placement,
                client_host,
            } => {
                let (blob_chunk_size, replication) = self.versions.chunk_size(blob)?;
                let chunk_size = chunk_bytes.unwrap_or(blob_chunk_size).min(blob_chunk_size);
                let mut candidates = self.registry.candidates();
                let placed = place(
                    &mut candidates,
                    chunk_size,
                    chunks,
                    replication,
                    placement,
                    client_host.as_deref(),
                )?;
                let charged: Vec<_> = placed
                    .iter()
                    .flatten()
                    .map(|p| (p.id, chunk_size))
                    .collect();
                self.registry.charge(&charged);
                Response::Placements(placed)
            }
            Request::Assign { blob, op } => Response::Assigned(self.versions.assign(blob, op)?),
            Request::Complete { blob, version } => {
                Response::Version(self.versions.complete(blob, version).await?)
            }
            Request::AbortVersion { blob, version } => {
                self.versions.abort(blob, version)?;
                Response::Ok
            }
            Request::Version { blob, version } => {
                Response::Version(self.versions.version(blob, version)?)
            }
            Request::Versions { blob } => Response::Versions(self.versions.versions(blob)?),
            Request::Register { id, addr, report } => {
                Response::Registered(self.registry.register(id, addr, report)?)
            }
            Request::Heartbeat { id, report } => {
                self.registry.heartbeat(id, report)?;
                Response::Ok
            }
            Request::Providers => Response::Providers(self.registry.list()),
            Request::FsMkdir { path, parents } => {
                Response::Entry(self.namespace(move |ns| ns.mkdir(&path, parents)).await?)
            }
            Request::FsCreate {
                path,
                chunk_size,
                replication,
                exclusive,
            } => {
                self.check_replication(replication)?;
                let create =
                    move |ns: &Namespace| ns.create(&path, chunk_size, replication, exclusive);
                Response::Entry(self.namespace(create).await?)
            }
            Request::FsStat { path } => {
                Response::Entry(self.namespace(move |ns| ns.stat(&path)).await?)
            }
            Request::FsList {
                path,
                recursive,
                start_after,
                limit,
            } => {
                let list =
                    move |ns: &Namespace| ns.list(&path, recursive, start_after.as_deref(), limit);
                Response::Entries(self.namespace(list).await?)
            }
            Request::FsRename { from, to } => {
                self.namespace(move |ns| ns.rename(&from, &to)).await?;
                Response::Ok
            }
            Request::FsDelete { path, recursive } => {
                self.namespace(move |ns| ns.delete(&path, recursive))
                    .await?;
                Response::Ok
            }
            Request::AssignWith {
                blob,
                op,
                attrs,
                expect_size,
            } => Response::Assigned(self.versions.assign_with(blob, op, attrs, expect_size)?),
            Request::VersionsAttrs { blob } => {
                Response::VersionsAttrs(self.versions.versions_attrs(blob)?)
            }
            Request::FsObject { path, version } => {
                Response::Object(self.namespace(move |ns| ns.object(&path, version)).await?)
            }
            Request::FsListAttrs {
                path,
                recursive,
                start_after,
                limit,
            } => {
                let list = move |ns: &Namespace| {
                    ns.list_attrs(&path, recursive, start_after.as_deref(), limit)
                };
                Response::EntriesAttrs(self.namespace(list).await?)
            }
            Request::ChunkReplicas { chunks } => {
                Response::Replicas(self.store.chunk_replicas(&chunks)?)
            }
            Request::RecordReplicas { entries } => {
                let store = self.store.clone();
                blocking(move || store.record_replicas(&entries)).await?;
                Response::Ok
            }
            Request::DrainProvider { addr } => {
                let registry = self.registry.clone();
                Response::Provider(blocking(move || registry.drain(&addr)).await?)
            }
            Request::RemoveProvider { addr } => {
                let registry = self.registry.clone();
                blocking(move || registry.remove(&addr)).await?;
                Response::Ok
            }
            Request::Status => Response::Status(self.status()),
            Request::ReportMaintenance { status } => {
                self.registry.report_maintenance(status);
                Response::Ok
            }
            Request::SetRetention { blob, retention } => {
                let versions = self.versions.clone();
                Response::Blob(blocking(move || versions.set_retention(blob, retention)).await?)
            }
            Request::PutChunk { .. }
            | Request::GetChunk { .. }
            | Request::PutNodes { .. }
            | Request::GetNodes { .. }
            | Request::GetPath { .. }
            | Request::ListChunks { .. }
            | Request::DeleteChunks { .. }
            | Request::CopyChunk { .. }
            | Request::ListNodes { .. }
            | Request::DeleteNodes { .. }
            | Request::Scrub { .. } => {
                return Err(Error::invalid(
                    "this is the manager; chunk and metadata requests go to providers",
                ))
            }
        })
    }
}

impl Handler for ManagerService {
    async fn handle(&self, req: Request, _body: Bytes) -> (Response, Payload) {
        let resp = self.dispatch(req).await.unwrap_or_else(Response::Err);
        (resp, Payload::empty())
    }
}
