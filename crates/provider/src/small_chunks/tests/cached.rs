//! Reads on the async thread (`read_cached`): from the page cache, checked like any other
//! read, and left to the waiting read when the disk would be needed.

use std::os::fd::AsRawFd;

use super::*;
use crate::testutil::resident_pages;

/// Drops the pages of the file at `path` from the page cache, and waits until none is
/// resident (a page that another thread holds for a moment is not dropped).
fn evict(path: &Path) {
    let file = File::open(path).unwrap();
    for _ in 0..500 {
        // SAFETY: posix_fadvise only reads its arguments; the descriptor is open for the call.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        if resident_pages(path).0 == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{} stays in the page cache", path.display());
}

/// Puts the first chunk of a fresh log, and returns once its writer is idle. The writer
/// writes and syncs zeros ahead of the first record after acknowledging it, which locks the
/// record's last page for a moment and would bring it back into the page cache. A second put
/// is taken only once that is done, and needs no more zeros.
async fn put_settled(store: &ChunkStore, id: ChunkId, data: &[u8]) {
    store.put(id, Bytes::copy_from_slice(data)).await.unwrap();
    let settle = ChunkId(id.0 ^ 0xffff_0000);
    store
        .put(settle, Bytes::from(pattern(512, 3)))
        .await
        .unwrap();
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
    put_settled(&store, id, &data).await;

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
async fn a_small_chunk_out_of_the_page_cache_is_read_right_on_either_path() {
    let dir = TempDir::new("small-uncached");
    let store = open(&dir, SEGMENT_SIZE).await;
    let id = ChunkId(0x6101);
    let data = pattern(8192, 11);
    put_settled(&store, id, &data).await;

    // Synced, so its pages are clean and can be dropped. A read without waiting then starts
    // the disk read and declines, but returns the bytes when that read finishes at once:
    // on this VM's disk, 7 test processes of 60 got the bytes on every try, 21 on none, so
    // which path is taken cannot be asserted. Either must give the right bytes.
    for _ in 0..5 {
        evict(&segments(&dir)[0]);
        if let Some(got) = store.small().read_cached(id, 0, 8192) {
            assert_eq!(&got.unwrap()[..], &data[..]);
        }
        evict(&segments(&dir)[0]);
        assert_eq!(
            &read_range_bytes(&store, id, 4096, 4096).await[..],
            &data[4096..]
        );
    }
    // The last read brought the record back into the page cache.
    let got = store.small().read_cached(id, 0, 8192).unwrap().unwrap();
    assert_eq!(&got[..], &data[..]);
}
