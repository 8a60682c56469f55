//! Reads on the async thread (`read_cached`): only from the page cache, checked like any
//! other read, and left to the waiting read when the disk would be needed.

use std::os::fd::AsRawFd;

use super::*;

/// Drops the clean pages of the file at `path` from the page cache.
fn evict(path: &Path) {
    let file = File::open(path).unwrap();
    // SAFETY: posix_fadvise only reads its arguments; the descriptor is open for the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

async fn read_range_bytes(store: &ChunkStore, id: ChunkId, offset: u64, len: u64) -> Bytes {
    match store.read_range(id, offset, len).await.unwrap() {
        (ChunkRange::Memory(got), crc) => {
            assert_eq!(
                crc,
                crc32c::crc32c(&got),
                "chunk {id}: CRC of the range sent"
            );
            got
        }
        (ChunkRange::File(_), _) => panic!("a small chunk read as a file range"),
    }
}

#[tokio::test]
async fn a_cached_small_chunk_is_read_without_waiting_and_checked_like_any_read() {
    let dir = TempDir::new("small-cached");
    let store = open(&dir, SEGMENT_SIZE).await;
    let id = ChunkId(0x6001);
    let data = pattern(4096, 7);
    store.put(id, Bytes::from(data.clone())).await.unwrap();

    // Just written: its record is in the page cache.
    let got = store.small().read_cached(id, 100, 1000).unwrap().unwrap();
    assert_eq!(&got[..], &data[100..1100]);
    assert_eq!(&read_range_bytes(&store, id, 0, 4096).await[..], &data[..]);
    assert!(store.small().read_cached(ChunkId(0x6002), 0, 1).is_none());
    let err = store
        .small()
        .read_cached(id, 4000, 200)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::OutOfRange);

    // A byte damaged in the cached record is caught on this path too.
    let at = loc(&store, id).offset + 10;
    flip(&segments(&dir)[0], at);
    let err = store.small().read_cached(id, 0, 4096).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
    match store.read_range(id, 0, 4096).await {
        Err(e) => assert_eq!(e.kind, ErrorKind::Corrupt, "{e}"),
        Ok(_) => panic!("a damaged small chunk was served"),
    }
}

#[tokio::test]
async fn a_small_chunk_out_of_the_page_cache_is_read_by_the_waiting_read() {
    let dir = TempDir::new("small-uncached");
    let store = open(&dir, SEGMENT_SIZE).await;
    let id = ChunkId(0x6101);
    let data = pattern(8192, 11);
    store.put(id, Bytes::from(data.clone())).await.unwrap();

    // Synced, so its pages are clean and can be dropped.
    evict(&segments(&dir)[0]);
    assert!(
        store.small().read_cached(id, 0, 8192).is_none(),
        "a read that needs the disk is not done on the async thread"
    );
    assert_eq!(
        &read_range_bytes(&store, id, 4096, 4096).await[..],
        &data[4096..]
    );
    // The waiting read brought the record back into the page cache.
    let got = store.small().read_cached(id, 0, 8192).unwrap().unwrap();
    assert_eq!(&got[..], &data[..]);
}
