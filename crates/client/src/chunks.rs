//! Chunk transfers: parallel replicated stores and ranged reads that fail over between replicas.

use rand::Rng;
use tomus_metadata::{ChunkId, ChunkPiece, ProviderId, StoredChunk};
use tomus_wire::{unexpected, Error, ProviderInfo, Request, Response, Result};

use crate::cluster::Cluster;

pub fn new_chunk_id() -> ChunkId {
    // From the OS, not a user-space generator: a forked child (Python multiprocessing) would
    // repeat the parent's buffered values and store different chunks under one id. Never
    // ChunkId::ZEROS, which marks pieces that read as zeros.
    ChunkId(rand::rngs::OsRng.gen_range(1..=u128::MAX))
}

/// Stores `data` as one chunk on every provider of `replicas`; all must acknowledge.
pub async fn put_chunk(
    cluster: &Cluster,
    data: &[u8],
    replicas: &[ProviderInfo],
) -> Result<StoredChunk> {
    let id = new_chunk_id();
    let req = Request::PutChunk { id };
    let puts = replicas.iter().map(|p| {
        let req = &req;
        async move {
            cluster.pool.call(&p.addr, req, data).await.map_err(|e| {
                Error::new(
                    e.kind,
                    format!("storing chunk on provider {} ({}): {e}", p.id, p.addr),
                )
            })
        }
    });
    for r in futures::future::join_all(puts).await {
        match r? {
            (Response::Ok, _) => {}
            (other, _) => return Err(unexpected(&other)),
        }
    }
    Ok(StoredChunk {
        chunk: id,
        len: data.len() as u64,
        replicas: replicas.iter().map(|p| p.id).collect(),
        chunk_offset: 0,
    })
}

/// Reads `piece` into `out` (of the piece's length) from the first replica that serves it,
/// starting at a random one to spread readers. Checksum failures and unreachable providers fall
/// over to the next replica.
pub async fn read_piece(cluster: &Cluster, piece: &ChunkPiece, out: &mut [u8]) -> Result<()> {
    let n = piece.replicas.len();
    if n == 0 {
        return Err(Error::internal(format!(
            "chunk {} has no replicas",
            piece.chunk
        )));
    }
    let start = rand::thread_rng().gen_range(0..n);
    let mut errors = Vec::new();
    for i in 0..n {
        let id: ProviderId = piece.replicas[(start + i) % n];
        match read_from(cluster, id, piece, out).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::debug!("chunk {} on provider {id}: {e}", piece.chunk);
                errors.push(e);
            }
        }
    }
    // Report the most telling failure: corruption over unavailability over the rest.
    errors.sort_by_key(|e| match e.kind {
        tomus_wire::ErrorKind::Corrupt => 0,
        tomus_wire::ErrorKind::Unavailable => 1,
        _ => 2,
    });
    let first = errors.remove(0);
    Err(Error::new(
        first.kind,
        format!(
            "chunk {} unreadable on all {n} replicas: {first}",
            piece.chunk
        ),
    ))
}

async fn read_from(
    cluster: &Cluster,
    id: ProviderId,
    piece: &ChunkPiece,
    out: &mut [u8],
) -> Result<()> {
    let addr = cluster.addr_of(id).await?;
    let req = Request::GetChunk {
        id: piece.chunk,
        offset: piece.chunk_offset,
        len: piece.len,
    };
    match cluster.pool.call_into(&addr, &req, out).await? {
        (Response::Chunk, None) => Ok(()),
        (Response::Chunk, Some(body)) => Err(Error::corrupt(format!(
            "provider {id} returned {} bytes of chunk {}, expected {}",
            body.len(),
            piece.chunk,
            piece.len
        ))),
        (other, _) => Err(unexpected(&other)),
    }
}
