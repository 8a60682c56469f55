//! The provider service through its request handler and over loopback connections: the
//! memory tier, quarantine of corrupt reads, scrub and deletion, listing caps, repair copies.

use std::path::{Path, PathBuf};

use tokio::net::TcpListener;
use tomus_metadata::{Node, NodeKey, NodeRef};
use tomus_wire::{
    call_handler, call_handler_payload, checksum, ChunkEntry, LoadGauge, Payload, Rpc, RpcConfig,
    ScrubReport,
};

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
    let limits = tomus_wire::ServerLimits::default();
    tokio::spawn(tomus_wire::serve(
        listener,
        None,
        limits,
        service.clone(),
        load,
    ));
    (addr, service)
}

/// An address nothing listens on.
fn dead_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

async fn call<R: Rpc>(service: &ProviderService, req: R, body: Vec<u8>) -> Result<R::Response> {
    call_handler(service, req, Bytes::from(body)).await
}

async fn put(service: &ProviderService, id: ChunkId, data: &[u8]) {
    let crc = checksum::crc32c(data);
    call(service, PutChunk { id, crc }, data.to_vec())
        .await
        .unwrap();
}

/// Bytes `[offset, offset + len)` of chunk `id` as the service serves them, or the error.
async fn read_at(service: &ProviderService, id: ChunkId, offset: u64, len: u64) -> Result<Vec<u8>> {
    let req = GetChunk { id, offset, len };
    let (crc, payload) = call_handler_payload(service, req, Bytes::new()).await?;
    let data = match payload {
        Payload::Bytes(b) => b.to_vec(),
        Payload::File(f) => {
            let mut buf = vec![0u8; f.len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&f.file, &mut buf, f.offset).unwrap();
            buf
        }
    };
    // Every range served in these tests comes with the right checksum.
    assert_eq!(
        checksum::crc32c(&data),
        crc,
        "checksum of {id} {offset}+{len}"
    );
    Ok(data)
}

/// The whole chunk as the service serves it, or the error.
async fn read(service: &ProviderService, id: ChunkId, len: u64) -> Result<Vec<u8>> {
    read_at(service, id, 0, len).await
}

async fn list(
    service: &ProviderService,
    start_after: Option<ChunkId>,
    limit: u32,
) -> Vec<ChunkEntry> {
    call(service, ListChunks { start_after, limit }, Vec::new())
        .await
        .unwrap()
        .entries
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
    put(&service, id, &data).await;

    // Remove the file: reads must come from memory now.
    let name = id.to_string();
    std::fs::remove_file(dir.path().join("chunks").join(&name[..2]).join(&name)).unwrap();
    assert_eq!(read_at(&service, id, 10, 20).await.unwrap(), data[10..30]);
    let err = read_at(&service, id, 69_990, 11).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::OutOfRange);
    let err = call(&service, tomus_wire::manager::ListProviders {}, Vec::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
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
    let scrub = |start_after, limit| Scrub { start_after, limit };
    let report = call(&service, scrub(None, 3), Vec::new()).await.unwrap();
    assert_eq!(
        report,
        ScrubReport {
            checked: 3,
            bytes: 3 * 70_000,
            corrupt: vec![ids[1]],
            next: Some(ids[2]),
        }
    );
    let err = read(&service, ids[1], 70_000).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    let report = call(&service, scrub(Some(ids[2]), 3), Vec::new())
        .await
        .unwrap();
    assert!(report.checked == 2 && report.next.is_none());

    // Deleted chunks are not served from memory either; unknown ids are ignored.
    let req = DeleteChunks {
        ids: vec![ids[0], ids[4], ChunkId(77)],
    };
    call(&service, req, Vec::new()).await.unwrap();
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

    let req = ListNodes {
        start_after: None,
        limit: u32::MAX,
    };
    let keys = call(&service, req, Vec::new()).await.unwrap();
    assert_eq!(keys.len(), MAX_LIST as usize);
    assert_eq!(
        keys[..],
        nodes[..MAX_LIST as usize]
            .iter()
            .map(|(k, _)| *k)
            .collect::<Vec<_>>()[..]
    );

    // Deleted nodes are neither listed nor served.
    let req = DeleteNodes {
        keys: vec![nodes[0].0, nodes[1].0],
    };
    call(&service, req, Vec::new()).await.unwrap();
    let req = ListNodes {
        start_after: None,
        limit: 1,
    };
    assert_eq!(
        call(&service, req, Vec::new()).await.unwrap(),
        vec![nodes[2].0]
    );
    let req = GetNodes {
        keys: vec![nodes[0].0, nodes[2].0],
    };
    assert_eq!(
        call(&service, req, Vec::new()).await.unwrap(),
        vec![None, Some(nodes[2].1.clone())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_chunk_between_providers() {
    let dir = TempDir::new("service-copy");
    let (target_addr, target) = served(&dir.path().join("target")).await;
    let (empty_addr, _empty) = served(&dir.path().join("empty")).await;
    let (source_addr, source) = served(&dir.path().join("source")).await;
    let pool = Pool::new(RpcConfig::default());
    let copy = |id, len, from: Vec<String>| CopyChunk { id, len, from };

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
        pool.call(&target_addr, req).await.unwrap();
        assert_eq!(&read(&target, id, data.len() as u64).await.unwrap(), data);
    }
    let listed = list(&target, None, 10).await;
    assert_eq!(
        listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
        vec![(small, 1000), (big, 300_000)]
    );

    // Held intact already: done without asking anyone.
    let req = copy(big, 300_000, vec![dead_addr()]);
    pool.call(&target_addr, req).await.unwrap();
    // Held with another length: refused, the copy here is left alone.
    let req = copy(big, 299_999, vec![source_addr.clone()]);
    let err = pool.call(&target_addr, req).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
    assert_eq!(read(&target, big, 300_000).await.unwrap(), big_data);

    // A corrupt copy here is replaced from a source.
    flip_in(
        &chunk_file(&dir.path().join("target"), big),
        &big_data,
        1234,
    );
    let req = copy(big, 300_000, vec![source_addr.clone()]);
    pool.call(&target_addr, req).await.unwrap();
    assert_eq!(read(&target, big, 300_000).await.unwrap(), big_data);

    // No source serves it: the most telling failure wins.
    let missing = ChunkId(0x99 << 120);
    let req = copy(missing, 10, vec![empty_addr.clone()]);
    let err = pool.call(&target_addr, req).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
    assert!(err.message.contains(&missing.to_string()), "{err}");
    let req = copy(missing, 10, vec![empty_addr.clone(), dead_addr()]);
    let err = pool.call(&target_addr, req).await.unwrap_err();
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
    let err = pool.call(&target_addr, req).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
    assert_eq!(
        read(&target, bad, 100_000).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert!(list(&source, Some(big), 10).await.is_empty());
    // Nothing to copy from, or no chunk.
    let err = pool
        .call(&target_addr, copy(missing, 10, Vec::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
    let req = copy(ChunkId::ZEROS, 10, vec![source_addr.clone()]);
    let err = pool.call(&target_addr, req).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
    assert_eq!(list(&target, None, 10).await.len(), 2);
}
