//! The provider's RPC service: chunk reads and writes, the metadata shard, and the requests
//! of repair, scrub and garbage collection.
//!
//! This module holds the service's state and routes each request to its handler after
//! checking its counts and sizes; metadata requests go straight to the [`MetaStore`].
//! `chunks.rs` serves chunk writes and reads (memory tier first, quarantining what is found
//! corrupt); `maintenance.rs` serves repair, scrub and garbage collection: repair copies
//! fetched from other providers, scrub steps and deletions.

/// Chunk writes and reads; quarantine of chunks found corrupt.
mod chunks;
/// Repair copies, scrub and deletion of chunks.
mod maintenance;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tomus_metadata::ChunkId;
use tomus_wire::provider::*;
use tomus_wire::{
    check_count, wrong_service, ChunkListing, Envelope, Error, ErrorKind, Handler, LocalChunks,
    Pool, Reply, Result, MAX_ITEMS,
};

use tomus_steward::probe::Agent;

use crate::chunk_store::ChunkStore;
use crate::data_dir::DataDirWatch;
use crate::memory_tier::MemoryTier;
use crate::meta_store::MetaStore;
use crate::registered::RegisteredFiles;
use crate::small_chunks::SMALL_CHUNK_MAX;

/// Most nodes one path request returns.
const MAX_PATH: u32 = 256;
/// Most ranges one path request follows.
const MAX_PATH_TARGETS: usize = 64;
/// Most sources one repair copy names.
const MAX_COPY_SOURCES: usize = 16;
/// Chunk bytes repair copies hold in memory at once (each copy holds its chunk whole).
const COPY_BUFFER_BYTES: usize = 512 << 20;
/// Most chunks or keys one listing or scrub request covers.
const MAX_LIST: u32 = 10_000;

pub struct ProviderService {
    chunks: ChunkStore,
    tier: Option<MemoryTier>,
    meta: MetaStore,
    /// Connections to other providers, for repair copies.
    peers: Arc<Pool>,
    /// Bytes of chunks being copied in, in KiB: repair copies wait for room.
    copy_buffers: Arc<Semaphore>,
    /// Answers topology probes (every provider is a node of the measured network).
    agent: Option<Agent>,
    /// Files registered in place (workflows); `None` in tests that need none.
    registered: Option<Arc<RegisteredFiles>>,
    /// Where its chunk files are, for short-circuit reads and writes; `None`: not offered.
    local_chunks: Option<LocalChunks>,
    /// Whether its data directory is still there; `None` in tests that need no watch.
    data_dir: Option<Arc<DataDirWatch>>,
}

impl ProviderService {
    pub fn new(
        chunks: ChunkStore,
        tier: Option<MemoryTier>,
        meta: MetaStore,
        peers: Arc<Pool>,
    ) -> Self {
        ProviderService {
            chunks,
            tier,
            meta,
            peers,
            copy_buffers: Arc::new(Semaphore::new(COPY_BUFFER_BYTES >> 10)),
            agent: None,
            registered: None,
            local_chunks: None,
            data_dir: None,
        }
    }

    /// The same service answering topology probes as `agent`.
    pub fn with_agent(mut self, agent: Agent) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Serves registered files (workflows) from `files`.
    pub fn with_registered(mut self, files: Arc<RegisteredFiles>) -> Self {
        self.registered = Some(files);
        self
    }

    /// Offers short-circuit reads and writes of the chunk files `local` describes.
    pub fn with_local_chunks(mut self, local: Option<LocalChunks>) -> Self {
        self.local_chunks = local;
        self
    }

    /// Refuses new data once `watch` found the data directory gone (clients that have not yet
    /// heard from the manager that this provider failed then store it elsewhere).
    pub(crate) fn with_data_dir_watch(mut self, watch: Arc<DataDirWatch>) -> Self {
        self.data_dir = Some(watch);
        self
    }

    /// `Unavailable` with the data directory's fault, when `look` finds one: the answer to a
    /// request that stores data here, which its client then stores elsewhere.
    fn refused_for_fault(&self, look: impl Fn(&DataDirWatch) -> Option<String>) -> Option<Reply> {
        let fault = look(self.data_dir.as_deref()?)?;
        Some(Reply::error(Error::unavailable(format!(
            "this provider takes no data: {fault}"
        ))))
    }

    fn registered(&self) -> Result<&Arc<RegisteredFiles>> {
        self.registered
            .as_ref()
            .ok_or_else(|| Error::invalid("this provider serves no registered files"))
    }

    async fn dispatch(&self, req: ProviderRequest, body: Bytes) -> Reply {
        use ProviderRequest as P;
        if let Err(e) = check_request(&req, &body) {
            return Reply::error(e);
        }
        if takes_data(&req) {
            if let Some(refused) = self.refused_for_fault(DataDirWatch::fault) {
                return refused;
            }
        }
        match req {
            P::PutChunk(r) if r.id == ChunkId::ZEROS => {
                Reply::error(Error::invalid("chunk id 0 is reserved for zero pieces"))
            }
            P::PutChunk(r) => Reply::of::<PutChunk>(self.put_chunk(r.id, body, r.crc).await),
            P::GetChunk(r) => match self.get_chunk(r.id, r.offset, r.len).await {
                Ok((data, crc)) => Reply::of::<GetChunk>(Ok(crc)).with_payload(data),
                Err(e) => Reply::error(e),
            },
            P::PutNodes(r) => Reply::of::<PutNodes>(self.meta.put_nodes(r.nodes).await),
            P::PutSmallWrite(r) if r.id == ChunkId::ZEROS => {
                Reply::error(Error::invalid("chunk id 0 is reserved for zero pieces"))
            }
            P::PutSmallWrite(r) => {
                let stored = self.put_small_write(r.id, body, r.crc, r.nodes).await;
                Reply::of::<PutSmallWrite>(stored)
            }
            P::GetNodes(r) => Reply::of::<GetNodes>(Ok(self.meta.get_nodes(&r.keys))),
            P::GetPath(r) => Reply::of::<GetPath>(Ok(self.meta.path(
                r.blob,
                r.start,
                &r.targets,
                r.limit.min(MAX_PATH) as usize,
            ))),
            P::ListChunks(r) => Reply::of::<ListChunks>(
                self.chunks
                    .list(r.start_after, r.limit.min(MAX_LIST) as usize)
                    .await
                    .map(|entries| ChunkListing {
                        now_ms: tomus_wire::now_ms(),
                        entries,
                    }),
            ),
            P::DeleteChunks(r) => Reply::of::<DeleteChunks>(self.delete_chunks(&r.ids).await),
            P::CopyChunk(r) => Reply::of::<CopyChunk>(self.copy_chunk(r.id, r.len, &r.from).await),
            P::ListNodes(r) => Reply::of::<ListNodes>(Ok(self
                .meta
                .list_keys(r.start_after, r.limit.min(MAX_LIST) as usize))),
            P::DeleteNodes(r) => Reply::of::<DeleteNodes>(self.meta.delete_nodes(r.keys).await),
            P::DeleteNodeRanges(r) => {
                let keys = self.meta.keys_in(&r.ranges);
                Reply::of::<DeleteNodeRanges>(self.meta.delete_nodes(keys).await)
            }
            P::Scrub(r) => Reply::of::<Scrub>(self.scrub(r.start_after, r.limit).await),
            P::AdoptFile(r) => {
                let adopted = match self.registered() {
                    Ok(files) => files.adopt(r.local_path, r.dev, r.ino, r.tomus_path).await,
                    Err(e) => Err(e),
                };
                Reply::of::<AdoptFile>(adopted)
            }
            P::ReadRegistered(r) => {
                let read = match self.registered() {
                    Ok(files) => files.read(r.name, r.offset, r.len).await,
                    Err(e) => Err(e),
                };
                match read {
                    Ok((data, size)) => Reply::of::<ReadRegistered>(Ok(size)).with_payload(data),
                    Err(e) => Reply::error(e),
                }
            }
            P::DropRegistered(r) => {
                let dropped = match self.registered() {
                    Ok(files) => files.drop_copies(r.names).await,
                    Err(e) => Err(e),
                };
                Reply::of::<DropRegistered>(dropped)
            }
            P::AdoptChunk(r) => {
                let adopted = match &self.local_chunks {
                    Some(_) => self.chunks.adopt(r.id, r.name, r.crc).await,
                    None => Err(Error::invalid(
                        "this provider offers no short-circuit writes",
                    )),
                };
                Reply::of::<AdoptChunk>(adopted)
            }
            P::LocalChunkDir(_) => Reply::of::<LocalChunkDir>(
                self.local_chunks
                    .clone()
                    .ok_or_else(|| Error::invalid("this provider offers no short-circuit reads")),
            ),
        }
    }
}

/// Whether `req` stores data here (chunks, metadata nodes, adopted files).
fn takes_data(req: &ProviderRequest) -> bool {
    use ProviderRequest as P;
    matches!(
        req,
        P::PutChunk(_)
            | P::PutSmallWrite(_)
            | P::PutNodes(_)
            | P::CopyChunk(_)
            | P::AdoptChunk(_)
            | P::AdoptFile(_)
    )
}

/// Checks every count and size a request carries before anything is sized by it.
fn check_request(req: &ProviderRequest, body: &Bytes) -> Result<()> {
    use ProviderRequest as P;
    match req {
        P::PutChunk(_) | P::PutSmallWrite(_) if body.is_empty() => {
            Err(Error::invalid("an empty chunk"))
        }
        P::PutSmallWrite(_) if body.len() > SMALL_CHUNK_MAX => Err(Error::invalid(format!(
            "a small write of {} bytes: at most {SMALL_CHUNK_MAX}",
            body.len()
        ))),
        P::PutSmallWrite(r) => check_count("nodes", r.nodes.len(), MAX_ITEMS),
        P::PutNodes(r) => check_count("nodes", r.nodes.len(), MAX_ITEMS),
        P::GetNodes(r) => check_count("node keys", r.keys.len(), MAX_ITEMS),
        P::GetPath(r) => check_count("path targets", r.targets.len(), MAX_PATH_TARGETS),
        P::DeleteChunks(r) => check_count("chunk ids", r.ids.len(), MAX_ITEMS),
        P::DeleteNodes(r) => check_count("node keys", r.keys.len(), MAX_ITEMS),
        P::DeleteNodeRanges(r) => check_count("node ranges", r.ranges.len(), MAX_ITEMS),
        P::CopyChunk(r) => check_count("copy sources", r.from.len(), MAX_COPY_SOURCES),
        P::DropRegistered(r) => check_count("registered copies", r.names.len(), MAX_ITEMS),
        _ => Ok(()),
    }
}

impl Handler for ProviderService {
    async fn handle(&self, req: Envelope, body: Bytes) -> Reply {
        let req = match (req, &self.agent) {
            (Envelope::Provider(req), _) => req,
            (Envelope::Agent(req), Some(agent)) => return agent.handle(req, body).await,
            (other, _) => return wrong_service("provider", &other),
        };
        let name = req.name();
        let stores = takes_data(&req);
        let mut reply = self.dispatch(req, body).await;
        if stores && reply.failed().is_some() {
            // A write that failed in the moments between a removal of the data directory and
            // the next heartbeat's look finds the fault itself (a few `stat`s, on this error
            // path only), so its client fails over instead of meeting an error it does not
            // retry elsewhere.
            if let Some(refused) = self.refused_for_fault(DataDirWatch::check) {
                reply = refused;
            }
        }
        if let Some(e) = reply.failed() {
            // Damaged data and failing disks need an operator; the rest is the caller's
            // business.
            match e.kind {
                ErrorKind::Corrupt | ErrorKind::Internal | ErrorKind::NoSpace => {
                    tracing::warn!("{name}: {e}")
                }
                _ => tracing::debug!("{name}: {e}"),
            }
        }
        reply
    }
}
