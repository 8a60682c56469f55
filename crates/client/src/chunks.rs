//! Chunk transfers: parallel replicated stores and ranged reads that fail over between replicas.

use bytes::Bytes;
use rand::Rng;
use tomus_metadata::{ChunkId, ChunkPiece, ProviderId, StoredChunk};
use tomus_wire::chunk_file::{encode_header, whole_crc};
use tomus_wire::manager::ChunkReplicas;
use tomus_wire::pool::Placed;
use tomus_wire::provider::{GetChunk, PutChunk};
use tomus_wire::{checksum, Error, ProviderInfo, Result};

use crate::cluster::Cluster;

/// A fresh chunk id, of a memory-class chunk when `memory` (see [`ChunkId::MEMORY_TAG`]).
pub fn new_chunk_id(memory: bool) -> ChunkId {
    // From the OS, not a user-space generator: a forked child (Python multiprocessing) would
    // repeat the parent's buffered values and store different chunks under one id. Never
    // ChunkId::ZEROS, which marks pieces that read as zeros.
    ChunkId::with_class(rand::rngs::OsRng.gen_range(1..=u128::MAX), memory)
}

/// Stores `data` as a new chunk on every provider of `replicas`; all must acknowledge.
pub async fn put_chunk(
    cluster: &Cluster,
    data: &[u8],
    replicas: &[ProviderInfo],
    memory: bool,
) -> Result<StoredChunk> {
    let chunk = whole_chunk(new_chunk_id(memory), data.len() as u64, replicas);
    put_chunk_as(cluster, chunk.chunk, data, replicas).await?;
    Ok(chunk)
}

/// The record of chunk `id`, all `len` bytes of it, stored on `replicas`.
pub fn whole_chunk(id: ChunkId, len: u64, replicas: &[ProviderInfo]) -> StoredChunk {
    StoredChunk {
        chunk: id,
        len,
        replicas: replicas.iter().map(|p| p.id).collect(),
        chunk_offset: 0,
    }
}

/// Stores `data` as chunk `id` on every provider of `replicas`; all must acknowledge. Each
/// provider checks the data's CRC32C, computed here once, before it stores anything. A
/// replica whose provider is on this host gets the chunk as a file it adopts (see
/// [`crate::local`]); the others, and that one if that fails, through their sockets.
pub async fn put_chunk_as(
    cluster: &Cluster,
    id: ChunkId,
    data: &[u8],
    replicas: &[ProviderInfo],
) -> Result<()> {
    // A chunk file's header holds a CRC32C per block: the whole chunk's is combined from
    // them, not computed in a second pass.
    let header = cluster
        .local
        .wants_write(id, data.len())
        .then(|| encode_header(data));
    let crc = match &header {
        Some(h) => whole_crc(h, data),
        None => checksum::crc32c(data),
    };
    let header = header.as_deref();
    // Replicas on this host last: a direct write blocks this task while it copies, so the
    // requests to the others go out first.
    let mut order: Vec<&ProviderInfo> = replicas.iter().collect();
    order.sort_by_key(|p| cluster.local.on_this_host(p.id) == Some(true));
    let puts = order.iter().map(|p| async move {
        if let Some(header) = header {
            if cluster.healthy(p.id).await
                && cluster
                    .local
                    .write(&cluster.pool, p.id, &p.addr, id, crc, header, data)
                    .await
            {
                return Ok(());
            }
        }
        cluster
            .pool
            .call_with_body(&p.addr, PutChunk { id, crc }, data)
            .await
            .map(|_| ())
            .map_err(|e| {
                Error::new(
                    e.kind,
                    format!("storing chunk on provider {} ({}): {e}", p.id, p.addr),
                )
            })
    });
    for (r, p) in futures::future::join_all(puts).await.into_iter().zip(order) {
        if let Err(e) = r {
            cluster.suspect(p.id, &e);
            return Err(e);
        }
    }
    Ok(())
}

/// Reads `piece` into `out` (of the piece's length) from the first replica that serves it:
/// healthy replicas first, starting at a random one to spread readers. Checksum failures and
/// unreachable providers fall over to the next replica; when every replica the metadata names
/// fails, the copies repair made elsewhere (recorded by the manager) are tried.
pub async fn read_piece(cluster: &Cluster, piece: &ChunkPiece, out: &mut [u8]) -> Result<()> {
    if piece.replicas.is_empty() {
        return Err(Error::internal(format!(
            "chunk {} has no replicas",
            piece.chunk
        )));
    }
    let mut ids = piece.replicas.clone();
    let start = rand::thread_rng().gen_range(0..ids.len());
    ids.rotate_left(start);
    let mut tried = Vec::new();
    let mut errors = Vec::new();
    let named = cluster.read_order(&ids).await;
    if try_replicas(cluster, &named, piece, out, &mut tried, &mut errors).await {
        return Ok(());
    }
    let repaired = repaired_replicas(cluster, piece.chunk).await;
    if try_replicas(cluster, &repaired, piece, out, &mut tried, &mut errors).await {
        return Ok(());
    }
    let first = Error::most_telling(errors)
        .ok_or_else(|| Error::internal(format!("chunk {}: no replica tried", piece.chunk)))?;
    Err(Error::new(
        first.kind,
        format!(
            "chunk {} unreadable on all {} replicas: {first}",
            piece.chunk,
            tried.len()
        ),
    ))
}

/// Reads `piece` from the first of `ids` not tried yet that serves it; records the ones tried
/// and their errors. Whether one served it.
async fn try_replicas(
    cluster: &Cluster,
    ids: &[ProviderId],
    piece: &ChunkPiece,
    out: &mut [u8],
    tried: &mut Vec<ProviderId>,
    errors: &mut Vec<Error>,
) -> bool {
    for &id in ids {
        if tried.contains(&id) {
            continue;
        }
        tried.push(id);
        match read_from(cluster, id, piece, out).await {
            Ok(()) => return true,
            Err(e) => {
                tracing::debug!("chunk {} on provider {id}: {e}", piece.chunk);
                cluster.suspect(id, &e);
                errors.push(e);
            }
        }
    }
    false
}

/// The replica set repair recorded for `chunk` (empty when it never moved or the manager
/// cannot say).
async fn repaired_replicas(cluster: &Cluster, chunk: ChunkId) -> Vec<ProviderId> {
    let req = ChunkReplicas {
        chunks: vec![chunk],
    };
    match cluster.manager(req).await {
        Ok(mut sets) => sets.pop().unwrap_or_default(),
        Err(e) => {
            tracing::debug!("asking for the replicas of chunk {chunk}: {e}");
            Vec::new()
        }
    }
}

/// `piece` mapped from the chunk file of one of its replicas on this host that is healthy
/// (see [`crate::local::map_piece`]); `None` when none is or none checks out.
pub async fn map_piece(cluster: &Cluster, piece: &ChunkPiece) -> Option<Bytes> {
    if !cluster.local.wants_map(piece) {
        return None;
    }
    for id in cluster.read_order(&piece.replicas).await {
        if cluster.local.on_this_host(id) == Some(false) || !cluster.healthy(id).await {
            continue;
        }
        let Ok(addr) = cluster.addr_of(id).await else {
            continue;
        };
        if let Some(bytes) = cluster.local.map(&cluster.pool, id, &addr, piece).await {
            return Some(bytes);
        }
    }
    None
}

async fn read_from(
    cluster: &Cluster,
    id: ProviderId,
    piece: &ChunkPiece,
    out: &mut [u8],
) -> Result<()> {
    let addr = cluster.addr_of(id).await?;
    if cluster.local.wants_read(piece)
        && cluster.healthy(id).await
        && cluster
            .local
            .read(&cluster.pool, id, &addr, piece, out)
            .await
    {
        return Ok(());
    }
    let req = GetChunk {
        id: piece.chunk,
        offset: piece.chunk_offset,
        len: piece.len,
    };
    match cluster.pool.call_into(&addr, req, out).await? {
        (sent, Placed::Filled { crc }) if crc == sent => Ok(()),
        (sent, Placed::Filled { crc }) => Err(checksum::damaged(
            format!("chunk {} from provider {id}", piece.chunk),
            crc,
            sent,
        )),
        (_, Placed::Elsewhere(body)) => Err(Error::corrupt(format!(
            "provider {id} returned {} bytes of chunk {}, expected {}",
            body.len(),
            piece.chunk,
            piece.len
        ))),
    }
}
