//! Storing, reading and deleting small chunks: ranges, group commits shared by concurrent
//! callers, segments rolling over and removed once nothing in them is needed.

use super::*;

#[tokio::test]
async fn small_chunks_round_trip_with_ranges() {
    let dir = TempDir::new("small-round-trip");
    let store = open(&dir, SEGMENT_SIZE).await;
    let sizes = [0usize, 1, 4096, SMALL_CHUNK_MAX - 1];
    for (i, &size) in sizes.iter().enumerate() {
        let id = ChunkId(0x5000 + i as u128);
        let data = pattern(size, i as u64);
        store.put(id, Bytes::from(data.clone())).await.unwrap();
        assert_reads(&store, id, &data).await;
        let size = size as u64;
        let mut ranges = vec![(0, 0), (size, 0), (0, size)];
        for (off, len) in [
            (1, size.saturating_sub(1)),
            (size / 2, 1),
            (size / 3, size / 3),
        ] {
            if off + len <= size {
                ranges.push((off, len));
            }
        }
        for (off, len) in ranges {
            match store.read_range(id, off, len).await.unwrap().0 {
                ChunkRange::Memory(got) => {
                    assert_eq!(&got[..], &data[off as usize..(off + len) as usize])
                }
                ChunkRange::File(_) => panic!("a small chunk read as a file range"),
            }
        }
        for (off, len) in [(size, 1), (1, u64::MAX), (u64::MAX, 1)] {
            let err = store.get(id, off, len).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::OutOfRange, "{off}+{len} of {size}");
        }
        // No file of its own.
        let name = id.to_string();
        assert!(!dir
            .path()
            .join("chunks")
            .join(&name[..2])
            .join(&name)
            .exists());
    }
    assert_missing(&store, ChunkId(42)).await;
    assert_eq!(segments(&dir).len(), 1);
    let log_bytes: u64 = sizes.iter().map(|&s| (RECORD_HEADER + s) as u64).sum();
    assert_eq!(store.stats().chunks, 4);
    assert_eq!(store.stats().bytes, log_bytes);
    assert_eq!(
        records_end(&segments(&dir)[0]),
        SEGMENT_HEADER_LEN + log_bytes
    );

    // 64 KiB is not small: it gets a file.
    let big = ChunkId(0x6000);
    let data = pattern(SMALL_CHUNK_MAX, 7);
    store.put(big, Bytes::from(data.clone())).await.unwrap();
    let name = big.to_string();
    assert!(dir
        .path()
        .join("chunks")
        .join(&name[..2])
        .join(&name)
        .exists());
    assert_reads(&store, big, &data).await;
    assert_eq!(store.small().stats(), (4, log_bytes));
    assert_eq!(store.stats().chunks, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_share_syncs_and_survive_reopen() {
    const TASKS: u64 = 32;
    const PUTS: u64 = 50;
    let dir = TempDir::new("small-concurrent");
    let store = open(&dir, SEGMENT_SIZE).await;
    // As slow as a VM's fsync at least, wherever the temp dir is.
    store.small().slow_down_syncs(Duration::from_millis(1));
    let id = |t: u64, i: u64| ChunkId(u128::from(t) << 64 | u128::from(i));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..PUTS {
                    let data = pattern(4096, t * 1000 + i);
                    store.put(id(t, i), Bytes::from(data)).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let syncs = store.small().syncs();
    let puts = TASKS * PUTS;
    assert!(syncs > 0);
    // About 17 puts share a sync here; 8 leaves a margin for a loaded machine.
    assert!(syncs <= puts / 8, "{syncs} fdatasyncs for {puts} puts");
    drop(store);

    let store = open(&dir, SEGMENT_SIZE).await;
    assert_eq!(store.stats().chunks, puts);
    for t in 0..TASKS {
        for i in 0..PUTS {
            assert_reads(&store, id(t, i), &pattern(4096, t * 1000 + i)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn segments_roll_over() {
    let dir = TempDir::new("small-roll");
    const SEGMENT: u64 = 10_000;
    let store = Arc::new(open(&dir, SEGMENT).await);
    let chunk = |n: u64| (ChunkId(1000 + u128::from(n)), pattern(3000, n));
    // Concurrent puts, so groups also cross segment boundaries.
    let tasks: Vec<_> = (0..20)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let (id, data) = chunk(n);
                store.put(id, Bytes::from(data)).await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // Larger than a whole segment: a segment of its own.
    let huge = ChunkId(5);
    let huge_data = pattern(20_000, 5);
    store
        .put(huge, Bytes::from(huge_data.clone()))
        .await
        .unwrap();

    let files = segments(&dir);
    // Three 3028-byte records fit in a segment after its 28-byte header.
    assert_eq!(files.len(), 8, "{files:?}");
    for (i, file) in files.iter().enumerate() {
        let len = records_end(file) - SEGMENT_HEADER_LEN;
        let expected = if i == 7 { 20_028 } else { 9084 };
        if i < 6 || i == 7 {
            assert_eq!(len, expected, "{}", file.display());
        } else {
            assert_eq!(len, 2 * 3028, "{}", file.display());
        }
    }
    for n in 0..20 {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    assert_reads(&store, huge, &huge_data).await;
    drop(store);

    let store = open(&dir, SEGMENT).await;
    for n in 0..20 {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    assert_reads(&store, huge, &huge_data).await;
    // The newest segment is full: the next chunk starts segment 8.
    let (id, data) = chunk(20);
    store.put(id, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(loc(&store, id).segment, 8);
    assert!(segments(&dir)[8].ends_with("small-000008.log"));
    drop(store);
    let store = open(&dir, SEGMENT).await;
    assert_reads(&store, id, &data).await;
    assert_eq!(store.stats().chunks, 22);
}

fn exists(dir: &TempDir, segment: u32) -> bool {
    segment_path(&dir.path().join("chunks"), segment).exists()
}

#[tokio::test]
async fn deletes_survive_reopen_and_dead_segments_are_removed() {
    let dir = TempDir::new("small-delete");
    // Three 3028-byte records fit in a segment; a tombstone takes 28 bytes.
    const SEGMENT: u64 = 10_000;
    let store = open(&dir, SEGMENT).await;
    let chunk = |n: u64| (ChunkId(900 + u128::from(n)), pattern(3000, n));
    let put = |n: u64| {
        let store = store.clone();
        async move {
            let (id, data) = chunk(n);
            store.put(id, Bytes::from(data)).await.unwrap();
        }
    };
    let delete = |ns: &[u64]| {
        let store = store.clone();
        let ids: Vec<ChunkId> = ns.iter().map(|&n| chunk(n).0).collect();
        async move { store.delete(&ids).await.unwrap() }
    };
    for n in 0..7 {
        put(n).await;
    }
    // Segments: 0 [c0 c1 c2], 1 [c3 c4 c5], 2 [c6].
    assert_eq!(loc(&store, chunk(6).0).segment, 2);
    let record = (RECORD_HEADER + 3000) as u64;
    assert_eq!(store.stats().bytes, 7 * record);

    // Tombstones for c3 (in segment 1) and c6 go to segment 2, then c7 and c8 fill it.
    delete(&[3, 6]).await;
    put(7).await;
    put(8).await;
    assert_eq!(loc(&store, chunk(8).0).segment, 2);
    put(9).await;
    assert_eq!(loc(&store, chunk(9).0).segment, 3);
    // Segment 2 has no live chunk now, but its tombstone of c3 is needed while segment 1
    // exists: it stays.
    delete(&[7, 8]).await;
    assert!(exists(&dir, 1) && exists(&dir, 2));
    assert_eq!(
        store.stats(),
        (ChunkStats {
            chunks: 6,
            bytes: 6 * record
        })
    );
    for n in [3, 6, 7, 8] {
        assert_missing(&store, chunk(n).0).await;
    }
    drop(store);

    let store = open(&dir, SEGMENT).await;
    assert_eq!(store.stats().chunks, 6);
    for n in [3, 6, 7, 8] {
        assert_missing(&store, chunk(n).0).await;
    }
    for n in [0, 1, 2, 4, 5, 9] {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }

    // The last chunks of segment 1 go: segment 1, then segment 2, are removed. Unknown
    // ids and ids deleted before are ignored.
    store
        .delete(&[chunk(4).0, chunk(5).0, chunk(3).0, ChunkId(12345)])
        .await
        .unwrap();
    assert!(!exists(&dir, 1) && !exists(&dir, 2));
    assert!(exists(&dir, 0) && exists(&dir, 3));
    assert_eq!(
        store.stats(),
        (ChunkStats {
            chunks: 4,
            bytes: 4 * record
        })
    );
    // Segment 0 goes too once empty; segment 3, being written, stays.
    store
        .delete(&[chunk(0).0, chunk(1).0, chunk(2).0])
        .await
        .unwrap();
    assert!(!exists(&dir, 0) && exists(&dir, 3));
    assert_eq!(segments(&dir).len(), 1);
    assert_eq!(
        store.stats(),
        (ChunkStats {
            chunks: 1,
            bytes: record
        })
    );

    // A deleted chunk stored again is back, after a reopen too.
    let (id3, data3) = chunk(3);
    store.put(id3, Bytes::from(data3.clone())).await.unwrap();
    assert_reads(&store, id3, &data3).await;
    drop(store);
    let store = open(&dir, SEGMENT).await;
    assert_reads(&store, id3, &data3).await;
    let (id9, data9) = chunk(9);
    assert_reads(&store, id9, &data9).await;
    for n in [0, 1, 2, 4, 5, 6, 7, 8] {
        assert_missing(&store, chunk(n).0).await;
    }
    assert_eq!(
        store.stats(),
        (ChunkStats {
            chunks: 2,
            bytes: 2 * record
        })
    );
    let listed: Vec<_> = store.list(None, 100).await.unwrap();
    assert_eq!(
        listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
        vec![(id3, 3000), (id9, 3000)]
    );
}

#[tokio::test]
async fn puts_and_deletes_share_a_group() {
    let dir = TempDir::new("small-group-order");
    let store = open(&dir, SEGMENT_SIZE).await;
    let (a, b) = (ChunkId(1), ChunkId(2));
    store.put(a, Bytes::from(vec![1u8; 10])).await.unwrap();
    // Queued together: slow syncs let them gather into one group.
    store.small().slow_down_syncs(Duration::from_millis(100));
    let blocker = store.put(ChunkId(3), Bytes::from(vec![3u8; 10]));
    let ids = [a];
    let ops = async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let put_b = store.put(b, Bytes::from(vec![2u8; 10]));
        let delete_a = store.delete(&ids);
        let (p, d) = tokio::join!(put_b, delete_a);
        p.unwrap();
        d.unwrap();
    };
    let (r, ()) = tokio::join!(blocker, ops);
    r.unwrap();
    // a, the blocker, then the put and the tombstone together (or all three together if
    // the writer was slow to wake); not one sync each.
    assert!(
        store.small().syncs() <= 3,
        "{} syncs",
        store.small().syncs()
    );
    assert_missing(&store, a).await;
    assert_reads(&store, b, &[2u8; 10]).await;
    drop(store);
    let store = open(&dir, SEGMENT_SIZE).await;
    assert_missing(&store, a).await;
    assert_reads(&store, b, &[2u8; 10]).await;
    assert_eq!(store.stats().chunks, 2);
}
