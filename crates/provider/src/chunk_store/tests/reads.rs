//! Storing and reading chunks back: ranges at block boundaries, chunks that arrive damaged,
//! reopening the store, and the file size of each data length.

use super::*;

#[tokio::test]
async fn round_trip_at_block_boundaries() {
    let dir = TempDir::new("chunks");
    let store = store(&dir).await;
    let b = BLOCK_SIZE as u64;
    let sizes = [0u64, 1, b - 1, b, b + 1, (4 << 20) + 3];
    for (i, &size) in sizes.iter().enumerate() {
        let id = ChunkId(0x1000 + i as u128);
        let data = pattern(size as usize, i as u8);
        store.put(id, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(&store.get(id, 0, size).await.unwrap()[..], &data[..]);

        let mut ranges = vec![(0, 0), (size, 0)];
        for edge in [b - 1, b, b + 1, 2 * b, 3 * b - 1, size.saturating_sub(1)] {
            for (off, len) in [(edge, 1), (edge.saturating_sub(5), 10), (edge, b)] {
                if off + len <= size {
                    ranges.push((off, len));
                }
            }
        }
        for (off, len) in ranges {
            let got = store.get(id, off, len).await.unwrap();
            assert_eq!(
                &got[..],
                &data[off as usize..(off + len) as usize],
                "{size} {off} {len}"
            );
        }

        let err = store.get(id, size, 1).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::OutOfRange);
        let err = store.get(id, 1, u64::MAX).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::OutOfRange);
    }
    let err = store.get(ChunkId(42), 0, 0).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert_eq!(store.stats().chunks, sizes.len() as u64);

    // Storing an id again (a retried write: same content) is harmless and not counted
    // twice, in the log and as a file.
    let before = store.stats();
    for i in [1, sizes.len() - 1] {
        let id = ChunkId(0x1000 + i as u128);
        let data = pattern(sizes[i] as usize, i as u8);
        store.put(id, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(&store.get(id, 0, sizes[i]).await.unwrap()[..], &data[..]);
    }
    assert_eq!(store.stats(), before);
    // New names are linked and repeated ones renamed over: no temporary name is left.
    let mut left = Vec::new();
    for sub in fs::read_dir(dir.path().join("chunks")).unwrap() {
        let sub = sub.unwrap().path();
        if sub.is_dir() {
            for f in fs::read_dir(&sub).unwrap() {
                let name = f.unwrap().file_name().to_string_lossy().into_owned();
                if name.ends_with(".tmp") {
                    left.push(name);
                }
            }
        }
    }
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn chunks_that_arrive_damaged_are_refused_and_not_stored() {
    let dir = TempDir::new("chunks-arrived");
    let store = store(&dir).await;
    let b = BLOCK_SIZE as usize;
    // A small-chunk log record, a chunk file of one block, and one of several blocks
    // ending in a partial one.
    for (i, len) in [1000, b, 3 * b + 17].into_iter().enumerate() {
        let id = ChunkId(0x5000 + i as u128);
        let data = pattern(len, i as u8);
        let crc = crc32c::crc32c(&data);
        let mut damaged = data.clone();
        damaged[len / 2] ^= 4;
        let e = store
            .put_checked(id, Bytes::from(damaged), crc)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
        assert!(e.message.contains("arrived damaged"), "{e}");
        assert_eq!(
            store.get(id, 0, 1).await.unwrap_err().kind,
            ErrorKind::NotFound,
            "a refused chunk is not stored"
        );
        store
            .put_checked(id, Bytes::from(data.clone()), crc)
            .await
            .unwrap();
        assert_eq!(&store.get(id, 0, len as u64).await.unwrap()[..], &data[..]);
    }
}

#[tokio::test]
async fn reopen_counts_chunks_and_removes_temp_files() {
    let dir = TempDir::new("chunks-reopen");
    let store = store(&dir).await;
    store
        .put(ChunkId(1), Bytes::from(vec![1u8; 100]))
        .await
        .unwrap();
    store
        .put(ChunkId(u128::MAX), Bytes::from(vec![2u8; 70_000]))
        .await
        .unwrap();
    let before = store.stats();
    let stale = dir.path().join("chunks/00/.junk.1.2.tmp");
    fs::write(&stale, b"partial").unwrap();
    drop(store);

    let store = self::store(&dir).await;
    assert_eq!(store.stats(), before);
    assert_eq!(before.chunks, 2);
    assert!(!stale.exists());
    assert_eq!(
        &store.get(ChunkId(1), 0, 100).await.unwrap()[..],
        &[1u8; 100][..]
    );
}

#[test]
fn data_length_from_file_length() {
    let b = u64::from(BLOCK_SIZE);
    for data_len in [0, 1, b - 1, b, b + 1, 5 * b, 5 * b + 3, 256 << 20] {
        let file_len = file_len_for(data_len).unwrap();
        assert_eq!(data_len_for(file_len), Some(data_len), "{data_len}");
    }
    // Sizes no chunk file has: shorter than a header, a header with a checksum only.
    for file_len in [0, HEADER_LEN - 1, HEADER_LEN + 1, HEADER_LEN + CRC_LEN] {
        assert_eq!(data_len_for(file_len), None, "{file_len}");
    }
}
