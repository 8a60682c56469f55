//! Which durably written chunk files keep their pages in the page cache: the newest ones up
//! to the budget; older ones' pages are dropped once they are synced.

use bytes::Bytes;
use tomus_metadata::ChunkId;

use super::{file_of, pattern, store};
use crate::testutil::{resident_pages, TempDir};

#[tokio::test]
async fn the_newest_chunk_files_stay_cached_and_older_ones_are_dropped() {
    let dir = TempDir::new("page-cache");
    const CHUNK: usize = 1 << 20;
    // Room for two chunk files (each a little over CHUNK with its header and checksums).
    let s = store(&dir)
        .await
        .with_cache_behind_writes(2 * CHUNK as u64 + (64 << 10));
    let ids: Vec<ChunkId> = (1..=4u128).map(ChunkId).collect();
    for (i, id) in ids.iter().enumerate() {
        s.put(*id, Bytes::from(pattern(CHUNK, i as u8)))
            .await
            .unwrap();
    }
    for id in &ids[..2] {
        let (resident, pages) = resident_pages(&file_of(&dir, *id));
        assert_eq!(
            resident, 0,
            "chunk {id}: {resident} of {pages} pages still cached (a temp dir on tmpfs keeps them: \
             this needs a disk file system)"
        );
    }
    for id in &ids[2..] {
        let (resident, pages) = resident_pages(&file_of(&dir, *id));
        assert_eq!(
            resident, pages,
            "chunk {id}: only {resident} of {pages} pages cached"
        );
    }
    // Dropped pages are the cache's loss only: every chunk reads back whole.
    for (i, id) in ids.iter().enumerate() {
        let data = s.get(*id, 0, CHUNK as u64).await.unwrap();
        assert_eq!(&data[..], &pattern(CHUNK, i as u8)[..], "chunk {id}");
    }
}

#[tokio::test]
async fn a_budget_of_zero_keeps_no_written_chunk_cached() {
    let dir = TempDir::new("page-cache-zero");
    let s = store(&dir).await.with_cache_behind_writes(0);
    let id = ChunkId(9);
    s.put(id, Bytes::from(pattern(1 << 20, 9))).await.unwrap();
    let (resident, pages) = resident_pages(&file_of(&dir, id));
    assert_eq!(resident, 0, "{resident} of {pages} pages still cached");
}

/// A repeated put of a chunk takes the place of its first in the queue: counted once, and
/// its pages stay while it is among the newest files.
#[tokio::test]
async fn a_repeated_put_keeps_its_chunk_cached_as_one_of_the_newest() {
    let dir = TempDir::new("page-cache-repeat");
    const CHUNK: usize = 1 << 20;
    // Room for three chunk files: a, b and c once a's first put no longer counts.
    let s = store(&dir)
        .await
        .with_cache_behind_writes(3 * CHUNK as u64 + (64 << 10));
    let (a, b, c) = (ChunkId(1), ChunkId(2), ChunkId(3));
    for (id, seed) in [(a, 1), (b, 2), (a, 1), (c, 3)] {
        s.put(id, Bytes::from(pattern(CHUNK, seed))).await.unwrap();
    }
    for id in [a, b, c] {
        let (resident, pages) = resident_pages(&file_of(&dir, id));
        assert_eq!(
            resident, pages,
            "chunk {id}: only {resident} of {pages} pages cached"
        );
    }
}
