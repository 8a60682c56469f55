//! The provider's RPC service: chunk reads and writes, the metadata shard, and the requests
//! of repair, scrub and garbage collection.

use std::sync::Arc;

use bytes::Bytes;
use tomus_metadata::ChunkId;
use tomus_wire::{
    unexpected, Error, ErrorKind, Handler, Payload, Pool, Request, Response, Result, MAX_CHUNK_SIZE,
};

use crate::chunk_store::{check_range, ChunkRange, ChunkStore};
use crate::memory_tier::MemoryTier;
use crate::meta_store::MetaStore;

/// Most nodes one path request returns.
const MAX_PATH: u32 = 256;
/// Most chunks or keys one listing or scrub request covers.
const MAX_LIST: u32 = 10_000;

pub struct ProviderService {
    chunks: ChunkStore,
    tier: Option<MemoryTier>,
    meta: MetaStore,
    /// Connections to other providers, for repair copies.
    peers: Arc<Pool>,
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
        }
    }

    /// Writes through: the chunk is on disk before it is cached or acknowledged.
    async fn put_chunk(&self, id: ChunkId, data: Bytes) -> Result<()> {
        self.chunks.put(id, data.clone()).await?;
        if let Some(tier) = &self.tier {
            tier.insert(id, data);
        }
        Ok(())
    }

    /// A corrupt chunk on disk is quarantined, so it is no longer listed and repair
    /// re-creates this replica.
    async fn get_chunk(&self, id: ChunkId, offset: u64, len: u64) -> Result<Payload> {
        if let Some(data) = self.tier.as_ref().and_then(|tier| tier.get(id)) {
            let range = check_range(id, offset, len, data.len() as u64)?;
            return Ok(Payload::Bytes(data.slice(range)));
        }
        match self.chunks.read_range(id, offset, len).await {
            Ok(ChunkRange::Memory(b)) => Ok(Payload::Bytes(b)),
            Ok(ChunkRange::File(f)) => Ok(Payload::File(f)),
            Err(e) => {
                if e.kind == ErrorKind::Corrupt {
                    self.quarantine(id, &e).await;
                }
                Err(e)
            }
        }
    }

    /// Takes a chunk found corrupt out of service; a failure is only logged (the read that
    /// found it reports the corruption either way).
    async fn quarantine(&self, id: ChunkId, why: &Error) {
        tracing::warn!("chunk {id} is corrupt, quarantining it: {why}");
        self.forget_cached(&[id]);
        if let Err(e) = self.chunks.quarantine(id).await {
            tracing::warn!("chunk {id}: quarantine failed: {e}");
        }
    }

    fn forget_cached(&self, ids: &[ChunkId]) {
        if let Some(tier) = &self.tier {
            for &id in ids {
                tier.remove(id);
            }
        }
    }

    async fn delete_chunks(&self, ids: &[ChunkId]) -> Result<()> {
        self.forget_cached(ids);
        self.chunks.delete(ids).await
    }

    async fn scrub(&self, start_after: Option<ChunkId>, limit: u32) -> Result<Response> {
        let report = self
            .chunks
            .scrub(start_after, limit.min(MAX_LIST) as usize)
            .await?;
        self.forget_cached(&report.corrupt);
        Ok(Response::Scrubbed(report))
    }

    /// Repair copy: makes this provider hold chunk `id` (`len` bytes), fetched whole from the
    /// first of `from` that serves it. Nothing is fetched if an intact copy is here already.
    async fn copy_chunk(&self, id: ChunkId, len: u64, from: &[String]) -> Result<()> {
        if id == ChunkId::ZEROS {
            return Err(Error::invalid("chunk id 0 is reserved for zero pieces"));
        }
        if len > MAX_CHUNK_SIZE {
            return Err(Error::invalid(format!(
                "chunk {id}: {len} bytes is larger than any chunk"
            )));
        }
        match self.chunks.verify(id).await {
            Ok(held) if held == len => return Ok(()),
            Ok(held) => {
                return Err(Error::invalid(format!(
                    "chunk {id} is held here with {held} bytes, not {len}"
                )))
            }
            Err(e) if e.kind == ErrorKind::Corrupt => self.quarantine(id, &e).await,
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let data = self.fetch(id, len, from).await?;
        // Not cached: a repair copy is not recently written data anyone is about to read.
        self.chunks.put(id, data).await
    }

    /// Chunk `id` whole from the first of `from` that serves it; otherwise the most telling
    /// failure (corruption over unavailability over the rest).
    async fn fetch(&self, id: ChunkId, len: u64, from: &[String]) -> Result<Bytes> {
        if from.is_empty() {
            return Err(Error::invalid(format!(
                "copy of chunk {id}: no source given"
            )));
        }
        let size = usize::try_from(len)
            .map_err(|_| Error::invalid(format!("chunk {id}: {len} bytes do not fit in memory")))?;
        let mut buf = vec![0u8; size];
        let mut errors = Vec::new();
        for addr in from {
            match self.fetch_from(addr, id, &mut buf).await {
                Ok(()) => return Ok(Bytes::from(buf)),
                Err(e) => {
                    tracing::debug!("copy of chunk {id} from {addr}: {e}");
                    errors.push(e);
                }
            }
        }
        let first = Error::most_telling(errors)
            .ok_or_else(|| Error::internal(format!("copy of chunk {id}: no source tried")))?;
        Err(Error::new(
            first.kind,
            format!(
                "copy of chunk {id}: none of {} sources served it: {first}",
                from.len()
            ),
        ))
    }

    async fn fetch_from(&self, addr: &str, id: ChunkId, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        let req = Request::GetChunk { id, offset: 0, len };
        match self.peers.call_into(addr, &req, out).await? {
            (Response::Chunk, None) => Ok(()),
            (Response::Chunk, Some(body)) => Err(Error::corrupt(format!(
                "{addr} returned {} bytes of chunk {id}, expected {len}",
                body.len()
            ))),
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn dispatch(&self, req: Request, body: Bytes) -> Result<(Response, Payload)> {
        let ok = (Response::Ok, Payload::empty());
        let answer = |resp| (resp, Payload::empty());
        match req {
            Request::PutChunk { id } if id == ChunkId::ZEROS => {
                Err(Error::invalid("chunk id 0 is reserved for zero pieces"))
            }
            Request::PutChunk { id } => self.put_chunk(id, body).await.map(|()| ok),
            Request::GetChunk { id, offset, len } => self
                .get_chunk(id, offset, len)
                .await
                .map(|data| (Response::Chunk, data)),
            Request::PutNodes { nodes } => self.meta.put_nodes(nodes).await.map(|()| ok),
            Request::GetNodes { keys } => Ok(answer(Response::Nodes(self.meta.get_nodes(&keys)))),
            Request::GetPath {
                blob,
                start,
                targets,
                limit,
            } => Ok(answer(Response::Path(self.meta.path(
                blob,
                start,
                &targets,
                limit.min(MAX_PATH) as usize,
            )))),
            Request::ListChunks { start_after, limit } => self
                .chunks
                .list(start_after, limit.min(MAX_LIST) as usize)
                .await
                .map(|list| answer(Response::Chunks(list))),
            Request::DeleteChunks { ids } => self.delete_chunks(&ids).await.map(|()| ok),
            Request::CopyChunk { id, len, from } => {
                self.copy_chunk(id, len, &from).await.map(|()| ok)
            }
            Request::ListNodes { start_after, limit } => Ok(answer(Response::NodeKeys(
                self.meta
                    .list_keys(start_after, limit.min(MAX_LIST) as usize),
            ))),
            Request::DeleteNodes { keys } => self.meta.delete_nodes(keys).await.map(|()| ok),
            Request::Scrub { start_after, limit } => {
                self.scrub(start_after, limit).await.map(answer)
            }
            Request::Ping => Ok(ok),
            _ => Err(Error::invalid("not a provider request")),
        }
    }
}

impl Handler for ProviderService {
    async fn handle(&self, req: Request, body: Bytes) -> (Response, Payload) {
        match self.dispatch(req, body).await {
            Ok(answer) => answer,
            Err(e) => {
                // Damaged data and failing disks need an operator; the rest is the caller's
                // business.
                match e.kind {
                    ErrorKind::Corrupt | ErrorKind::Internal | ErrorKind::NoSpace => {
                        tracing::warn!("{e}")
                    }
                    _ => tracing::debug!("{e}"),
                }
                (Response::Err(e), Payload::empty())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use tokio::net::TcpListener;
    use tomus_metadata::{Node, NodeKey, NodeRef};
    use tomus_wire::{ChunkEntry, LoadGauge, RpcConfig, ScrubReport};

    use super::*;
    use crate::testutil::TempDir;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
            .collect()
    }

    async fn service(dir: &Path, tier: bool) -> Arc<ProviderService> {
        let chunks = ChunkStore::open(dir.join("chunks"), false).await.unwrap();
        let meta = MetaStore::open(dir.join("meta.log"), false).await.unwrap();
        let tier = tier.then(|| MemoryTier::new(1 << 20));
        let peers = Pool::new(RpcConfig::default());
        Arc::new(ProviderService::new(chunks, tier, meta, peers))
    }

    /// A service answering on a loopback port, like a provider process.
    async fn served(dir: &Path) -> (String, Arc<ProviderService>) {
        let service = service(dir, false).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let load = Arc::new(LoadGauge::default());
        tokio::spawn(tomus_wire::serve(listener, None, service.clone(), load));
        (addr, service)
    }

    /// An address nothing listens on.
    fn dead_addr() -> String {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().to_string()
    }

    async fn call(service: &ProviderService, req: Request, body: Vec<u8>) -> Result<Response> {
        match service.handle(req, Bytes::from(body)).await {
            (Response::Err(e), _) => Err(e),
            (resp, _) => Ok(resp),
        }
    }

    async fn put(service: &ProviderService, id: ChunkId, data: &[u8]) {
        let resp = call(service, Request::PutChunk { id }, data.to_vec()).await;
        assert_eq!(resp.unwrap(), Response::Ok);
    }

    /// The whole chunk as the service serves it, or the error.
    async fn read(service: &ProviderService, id: ChunkId, len: u64) -> Result<Vec<u8>> {
        let (resp, body) = service
            .handle(Request::GetChunk { id, offset: 0, len }, Bytes::new())
            .await;
        match (resp, body) {
            (Response::Err(e), _) => Err(e),
            (Response::Chunk, Payload::Bytes(b)) => Ok(b.to_vec()),
            (Response::Chunk, Payload::File(f)) => {
                let mut buf = vec![0u8; f.len as usize];
                std::os::unix::fs::FileExt::read_exact_at(&f.file, &mut buf, f.offset).unwrap();
                Ok(buf)
            }
            (other, _) => panic!("unexpected answer {other:?}"),
        }
    }

    async fn list(
        service: &ProviderService,
        start_after: Option<ChunkId>,
        limit: u32,
    ) -> Vec<ChunkEntry> {
        match call(
            service,
            Request::ListChunks { start_after, limit },
            Vec::new(),
        )
        .await
        {
            Ok(Response::Chunks(list)) => list,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    fn chunk_file(dir: &Path, id: ChunkId) -> PathBuf {
        let name = id.to_string();
        dir.join("chunks").join(&name[..2]).join(name)
    }

    /// Flips a bit of the first copy of `data` in `path`, `at` bytes into it.
    fn flip_in(path: &Path, data: &[u8], at: usize) {
        let mut raw = std::fs::read(path).unwrap();
        let start = raw
            .windows(data.len())
            .position(|w| w == data)
            .expect("data not in file");
        raw[start + at] ^= 0x01;
        std::fs::write(path, raw).unwrap();
    }

    #[tokio::test]
    async fn memory_tier_serves_ranges_and_checks_bounds() {
        let dir = TempDir::new("service");
        let chunks = ChunkStore::open(dir.path().join("chunks"), false)
            .await
            .unwrap();
        let meta = MetaStore::open(dir.path().join("meta.log"), false)
            .await
            .unwrap();
        let service = ProviderService::new(
            chunks,
            Some(MemoryTier::new(1 << 20)),
            meta,
            Pool::new(RpcConfig::default()),
        );
        let id = ChunkId(99);
        // Large enough for a chunk file of its own (smaller ones go to the small-chunk log).
        let data: Vec<u8> = (0..70_000u32).map(|i| i as u8).collect();
        let (resp, _) = service
            .handle(Request::PutChunk { id }, Bytes::from(data.clone()))
            .await;
        assert_eq!(resp, Response::Ok);

        // Remove the file: reads must come from memory now.
        let name = id.to_string();
        std::fs::remove_file(dir.path().join("chunks").join(&name[..2]).join(&name)).unwrap();
        let get = |offset, len| Request::GetChunk { id, offset, len };
        let (resp, body) = service.handle(get(10, 20), Bytes::new()).await;
        assert_eq!(resp, Response::Chunk);
        assert!(matches!(body, Payload::Bytes(b) if b[..] == data[10..30]));
        let (resp, _) = service.handle(get(69_990, 11), Bytes::new()).await;
        assert!(matches!(resp, Response::Err(e) if e.kind == ErrorKind::OutOfRange));
        let (resp, _) = service.handle(Request::Providers, Bytes::new()).await;
        assert!(matches!(resp, Response::Err(e) if e.kind == ErrorKind::InvalidArgument));
    }

    #[tokio::test]
    async fn a_corrupt_read_quarantines_the_chunk() {
        let dir = TempDir::new("service-corrupt");
        let service = service(dir.path(), false).await;
        let (file_id, file_data) = (ChunkId(0x10 << 120), pattern(200_000, 1));
        let (small_id, small_data) = (ChunkId(0x20 << 120), pattern(3000, 2));
        let (good_id, good_data) = (ChunkId(0x30 << 120), pattern(3000, 3));
        for (id, data) in [
            (file_id, &file_data),
            (small_id, &small_data),
            (good_id, &good_data),
        ] {
            put(&service, id, data).await;
        }
        flip_in(&chunk_file(dir.path(), file_id), &file_data, 150_000);
        flip_in(&dir.path().join("chunks/small-000000.log"), &small_data, 10);
        let before = service.chunks.stats();

        for (id, len) in [(file_id, 200_000), (small_id, 3000)] {
            // Found corrupt once, then gone: no longer served or listed.
            let err = read(&service, id, len).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
            let err = read(&service, id, len).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
        }
        let listed: Vec<ChunkId> = list(&service, None, 100)
            .await
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(listed, vec![good_id]);
        assert_eq!(service.chunks.stats().chunks, before.chunks - 2);
        let quarantined = dir
            .path()
            .join("chunks/quarantine")
            .join(file_id.to_string());
        assert!(quarantined.exists());
        assert_eq!(read(&service, good_id, 3000).await.unwrap(), good_data);
    }

    #[tokio::test]
    async fn scrub_and_delete_requests_drop_cached_copies() {
        let dir = TempDir::new("service-scrub");
        let service = service(dir.path(), true).await;
        let ids: Vec<ChunkId> = (1..=5u128).map(|n| ChunkId(n << 120)).collect();
        let data: Vec<Vec<u8>> = (1..=5u8).map(|n| pattern(70_000, n)).collect();
        for (id, data) in ids.iter().zip(&data) {
            put(&service, *id, data).await;
        }
        // Corrupt on disk, intact in the memory tier: scrub checks the disk and drops both.
        flip_in(&chunk_file(dir.path(), ids[1]), &data[1], 5);
        let scrub = |start_after, limit| Request::Scrub { start_after, limit };
        let resp = call(&service, scrub(None, 3), Vec::new()).await.unwrap();
        assert_eq!(
            resp,
            Response::Scrubbed(ScrubReport {
                checked: 3,
                bytes: 3 * 70_000,
                corrupt: vec![ids[1]],
                next: Some(ids[2]),
            })
        );
        let err = read(&service, ids[1], 70_000).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
        let resp = call(&service, scrub(Some(ids[2]), 3), Vec::new())
            .await
            .unwrap();
        assert!(matches!(resp, Response::Scrubbed(r) if r.checked == 2 && r.next.is_none()));

        // Deleted chunks are not served from memory either; unknown ids are ignored.
        let req = Request::DeleteChunks {
            ids: vec![ids[0], ids[4], ChunkId(77)],
        };
        assert_eq!(call(&service, req, Vec::new()).await.unwrap(), Response::Ok);
        for id in [ids[0], ids[4]] {
            let err = read(&service, id, 70_000).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::NotFound);
        }
        let listed = list(&service, None, 100).await;
        assert_eq!(
            listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
            vec![(ids[2], 70_000), (ids[3], 70_000)]
        );
        assert_eq!(read(&service, ids[3], 70_000).await.unwrap(), data[3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn listings_are_capped() {
        let dir = TempDir::new("service-cap");
        let service = service(dir.path(), false).await;
        let n = MAX_LIST as u128 + 5;
        let puts: Vec<_> = (1..=n)
            .map(|i| {
                let chunks = service.chunks.clone();
                tokio::spawn(async move { chunks.put(ChunkId(i), Bytes::from(vec![1u8])).await })
            })
            .collect();
        for p in puts {
            p.await.unwrap().unwrap();
        }
        let nodes: Vec<(NodeKey, Node)> = (0..n as u64)
            .map(|v| {
                let key = NodeKey {
                    blob: 1,
                    node: NodeRef {
                        version: v,
                        offset: 0,
                        size: 4096,
                    },
                };
                (
                    key,
                    Node::Inner {
                        left: None,
                        right: None,
                    },
                )
            })
            .collect();
        service.meta.put_nodes(nodes.clone()).await.unwrap();

        let listed = list(&service, None, u32::MAX).await;
        assert_eq!(listed.len(), MAX_LIST as usize);
        assert_eq!(listed[0].id, ChunkId(1));
        assert_eq!(listed.last().unwrap().id, ChunkId(MAX_LIST as u128));
        assert!(listed.iter().all(|e| e.len == 1));
        let rest = list(&service, Some(ChunkId(MAX_LIST as u128)), u32::MAX).await;
        assert_eq!(rest.len(), 5);

        let req = Request::ListNodes {
            start_after: None,
            limit: u32::MAX,
        };
        let Ok(Response::NodeKeys(keys)) = call(&service, req, Vec::new()).await else {
            panic!("no node keys");
        };
        assert_eq!(keys.len(), MAX_LIST as usize);
        assert_eq!(
            keys[..],
            nodes[..MAX_LIST as usize]
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()[..]
        );

        // Deleted nodes are neither listed nor served.
        let req = Request::DeleteNodes {
            keys: vec![nodes[0].0, nodes[1].0],
        };
        assert_eq!(call(&service, req, Vec::new()).await.unwrap(), Response::Ok);
        let req = Request::ListNodes {
            start_after: None,
            limit: 1,
        };
        assert_eq!(
            call(&service, req, Vec::new()).await.unwrap(),
            Response::NodeKeys(vec![nodes[2].0])
        );
        let req = Request::GetNodes {
            keys: vec![nodes[0].0, nodes[2].0],
        };
        assert_eq!(
            call(&service, req, Vec::new()).await.unwrap(),
            Response::Nodes(vec![None, Some(nodes[2].1.clone())])
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn copy_chunk_between_providers() {
        let dir = TempDir::new("service-copy");
        let (target_addr, target) = served(&dir.path().join("target")).await;
        let (empty_addr, _empty) = served(&dir.path().join("empty")).await;
        let (source_addr, source) = served(&dir.path().join("source")).await;
        let pool = Pool::new(RpcConfig::default());
        let copy = |id, len, from: Vec<String>| Request::CopyChunk { id, len, from };

        let (big, big_data) = (ChunkId(0xb1 << 120), pattern(300_000, 7));
        let (small, small_data) = (ChunkId(0x51 << 120), pattern(1000, 8));
        put(&source, big, &big_data).await;
        put(&source, small, &small_data).await;

        // The first source lacks the chunks, the second serves them.
        for (id, data) in [(big, &big_data), (small, &small_data)] {
            let req = copy(
                id,
                data.len() as u64,
                vec![empty_addr.clone(), source_addr.clone()],
            );
            let (resp, _) = pool.call(&target_addr, &req, &[]).await.unwrap();
            assert_eq!(resp, Response::Ok);
            assert_eq!(&read(&target, id, data.len() as u64).await.unwrap(), data);
        }
        let listed = list(&target, None, 10).await;
        assert_eq!(
            listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
            vec![(small, 1000), (big, 300_000)]
        );

        // Held intact already: done without asking anyone.
        let req = copy(big, 300_000, vec![dead_addr()]);
        assert_eq!(
            pool.call(&target_addr, &req, &[]).await.unwrap().0,
            Response::Ok
        );
        // Held with another length: refused, the copy here is left alone.
        let req = copy(big, 299_999, vec![source_addr.clone()]);
        let err = pool.call(&target_addr, &req, &[]).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
        assert_eq!(read(&target, big, 300_000).await.unwrap(), big_data);

        // A corrupt copy here is replaced from a source.
        flip_in(
            &chunk_file(&dir.path().join("target"), big),
            &big_data,
            1234,
        );
        let req = copy(big, 300_000, vec![source_addr.clone()]);
        assert_eq!(
            pool.call(&target_addr, &req, &[]).await.unwrap().0,
            Response::Ok
        );
        assert_eq!(read(&target, big, 300_000).await.unwrap(), big_data);

        // No source serves it: the most telling failure wins.
        let missing = ChunkId(0x99 << 120);
        let req = copy(missing, 10, vec![empty_addr.clone()]);
        let err = pool.call(&target_addr, &req, &[]).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
        assert!(err.message.contains(&missing.to_string()), "{err}");
        let req = copy(missing, 10, vec![empty_addr.clone(), dead_addr()]);
        let err = pool.call(&target_addr, &req, &[]).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");
        // A source whose copy is corrupt (it quarantines it as it finds out).
        let (bad, bad_data) = (ChunkId(0xbb << 120), pattern(100_000, 9));
        put(&source, bad, &bad_data).await;
        flip_in(
            &chunk_file(&dir.path().join("source"), bad),
            &bad_data,
            99_000,
        );
        let req = copy(
            bad,
            100_000,
            vec![dead_addr(), source_addr.clone(), empty_addr.clone()],
        );
        let err = pool.call(&target_addr, &req, &[]).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
        assert_eq!(
            read(&target, bad, 100_000).await.unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert!(list(&source, Some(big), 10).await.is_empty());
        // Nothing to copy from, or no chunk.
        let err = pool
            .call(&target_addr, &copy(missing, 10, Vec::new()), &[])
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
        let req = copy(ChunkId::ZEROS, 10, vec![source_addr.clone()]);
        let err = pool.call(&target_addr, &req, &[]).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
        assert_eq!(list(&target, None, 10).await.len(), 2);
    }
}
