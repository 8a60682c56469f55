//! Reopening the log: the index rebuilt, torn tails cut, damaged records skipped or
//! indexing stopped, and segments with and without a format header.

use super::*;

#[tokio::test]
async fn a_flipped_byte_is_corrupt_for_its_chunk_only() {
    let dir = TempDir::new("small-corrupt");
    let store = open(&dir, SEGMENT_SIZE).await;
    let ids = [ChunkId(1), ChunkId(2), ChunkId(3)];
    let data: Vec<Vec<u8>> = (0..3).map(|i| pattern(4096, i)).collect();
    for (id, data) in ids.iter().zip(&data) {
        store.put(*id, Bytes::from(data.clone())).await.unwrap();
    }
    let segment = &segments(&dir)[0];
    // A data byte of chunk 2, a byte of chunk 3's id in its record header.
    flip(segment, loc(&store, ids[1]).offset + 1000);
    flip(segment, loc(&store, ids[2]).offset - 3);
    for id in &ids[1..] {
        for (off, len) in [(0, 4096), (2000, 10), (0, 0)] {
            let err = store.get(*id, off, len).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
            assert!(err.message.contains(&id.to_string()), "{err}");
        }
    }
    assert_reads(&store, ids[0], &data[0]).await;
    let got = store.get(ids[0], 100, 50).await.unwrap();
    assert_eq!(&got[..], &data[0][100..150]);
}

#[tokio::test]
async fn reopen_rebuilds_the_index_and_drops_a_torn_tail() {
    let dir = TempDir::new("small-reopen");
    let store = open(&dir, SEGMENT_SIZE).await;
    let chunk = |n: u64| {
        (
            ChunkId(u128::from(n) << 100 | 7),
            pattern(1000 * n as usize, n),
        )
    };
    for n in 1..=2 {
        let (id, data) = chunk(n);
        store.put(id, Bytes::from(data)).await.unwrap();
    }
    let segment = segments(&dir)[0].clone();
    let good_len = records_end(&segment);
    let (id3, data3) = chunk(3);
    store.put(id3, Bytes::from(data3.clone())).await.unwrap();
    let before = store.stats();
    drop(store);

    // Unchanged, everything comes back.
    let store = open(&dir, SEGMENT_SIZE).await;
    assert_eq!(store.stats(), before);
    assert_reads(&store, id3, &data3).await;
    drop(store);

    // Cut the last record in the middle (a torn append).
    let file = OpenOptions::new().write(true).open(&segment).unwrap();
    file.set_len(good_len + 1500).unwrap();
    drop(file);
    let store = open(&dir, SEGMENT_SIZE).await;
    for n in 1..=2 {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    assert_missing(&store, id3).await;
    assert_eq!(store.stats().chunks, 2);
    assert_eq!(fs::metadata(&segment).unwrap().len(), good_len);

    // Appends continue after the cut and survive another reopen.
    for n in 3..=4 {
        let (id, data) = chunk(n);
        store.put(id, Bytes::from(data)).await.unwrap();
    }
    drop(store);
    let store = open(&dir, SEGMENT_SIZE).await;
    for n in 1..=4 {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    assert_eq!(store.stats().chunks, 4);
    assert_eq!(segments(&dir).len(), 1);
    drop(store);

    // A torn header is dropped too.
    let len = fs::metadata(&segment).unwrap().len();
    let mut raw = fs::read(&segment).unwrap();
    raw.extend_from_slice(&RECORD_MAGIC[..]);
    raw.extend_from_slice(&[1, 2, 3]);
    fs::write(&segment, raw).unwrap();
    let store = open(&dir, SEGMENT_SIZE).await;
    assert_eq!(store.stats().chunks, 4);
    assert_eq!(fs::metadata(&segment).unwrap().len(), len);
}

#[tokio::test]
async fn damage_in_an_older_segment_stops_indexing_that_segment() {
    let dir = TempDir::new("small-older");
    const SEGMENT: u64 = 10_000;
    let store = open(&dir, SEGMENT).await;
    let chunk = |n: u64| (ChunkId(77 + u128::from(n)), pattern(3000, n));
    for n in 0..7 {
        let (id, data) = chunk(n);
        store.put(id, Bytes::from(data)).await.unwrap();
    }
    // Segments: [0 1 2] [3 4 5] [6]. Damage the framing of chunk 4 (its record magic),
    // in the middle of segment 1.
    let (id4, _) = chunk(4);
    let at = loc(&store, id4);
    assert_eq!(at.segment, 1);
    drop(store);
    let files = segments(&dir);
    let len = fs::metadata(&files[1]).unwrap().len();
    flip(&files[1], at.offset - RECORD_HEADER as u64);

    let store = open(&dir, SEGMENT).await;
    for n in [0, 1, 2, 3, 6] {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    for n in [4, 5] {
        assert_missing(&store, chunk(n).0).await;
    }
    // The older segment is left as it is, even once its indexed chunks are deleted.
    assert_eq!(fs::metadata(&files[1]).unwrap().len(), len);
    assert_eq!(store.stats().chunks, 5);
    store.delete(&[chunk(3).0]).await.unwrap();
    assert!(files[1].exists());
}

#[tokio::test]
async fn a_flipped_data_byte_skips_only_its_record() {
    let dir = TempDir::new("small-skip");
    const SEGMENT: u64 = 10_000;
    let store = open(&dir, SEGMENT).await;
    let chunk = |n: u64| (ChunkId(500 + u128::from(n)), pattern(3000, n));
    for n in 0..8 {
        let (id, data) = chunk(n);
        store.put(id, Bytes::from(data)).await.unwrap();
    }
    // Segments: [0 1 2] [3 4 5] [6 7]. Flip a data byte of chunk 4 (older segment) and
    // of chunk 6 (newest segment, followed by chunk 7).
    let (at4, at6, at7) = (
        loc(&store, chunk(4).0),
        loc(&store, chunk(6).0),
        loc(&store, chunk(7).0),
    );
    assert_eq!((at4.segment, at6.segment, at7.segment), (1, 2, 2));
    drop(store);
    let files = segments(&dir);
    let newest_len = records_end(&files[2]);
    flip(&files[1], at4.offset + 10);
    flip(&files[2], at6.offset + 2999);

    let store = open(&dir, SEGMENT).await;
    for n in [0, 1, 2, 3, 5, 7] {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    for n in [4, 6] {
        assert_missing(&store, chunk(n).0).await;
    }
    assert_eq!(fs::metadata(&files[2]).unwrap().len(), newest_len);
    assert_eq!(store.stats().chunks, 6);
    drop(store);

    // A damaged last record is a torn append: cut off (with the damaged one before it,
    // since two in a row leave the framing in doubt), and appends continue there.
    flip(&files[2], at7.offset + 5);
    let store = open(&dir, SEGMENT).await;
    assert_missing(&store, chunk(7).0).await;
    assert_eq!(
        fs::metadata(&files[2]).unwrap().len(),
        at6.offset - RECORD_HEADER as u64
    );
    let (id8, data8) = chunk(8);
    store.put(id8, Bytes::from(data8.clone())).await.unwrap();
    drop(store);
    let store = open(&dir, SEGMENT).await;
    assert_reads(&store, id8, &data8).await;
    assert_eq!(store.stats().chunks, 6);
}

/// A chunk record as every format so far writes it.
fn record(id: ChunkId, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(RECORD_MAGIC);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&record_crc(id, data).to_le_bytes());
    out.extend_from_slice(&id.0.to_le_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn the_segment_header_is_a_tombstone_older_builds_skip() {
    let header = segment_header(FORMAT_VERSION);
    assert_eq!(header.len() as u64, SEGMENT_HEADER_LEN);
    assert_eq!(header_version(&header), Some(FORMAT_VERSION));
    // Scanned as the record framing (unchanged since before the header) scans it: the
    // tombstone of an id no chunk has, which deletes nothing.
    let mut data = Vec::new();
    match scan_record(&mut &header[..], SEGMENT_HEADER_LEN, &mut data).unwrap() {
        Scanned::Tombstone(id) => assert_eq!(id, header_id(FORMAT_VERSION)),
        _ => panic!("the header does not scan as a tombstone"),
    }
    assert_ne!(header_id(FORMAT_VERSION), ChunkId::ZEROS);
    // Ordinary records and tombstones are not headers.
    let mut first = [0u8; RECORD_HEADER];
    first.copy_from_slice(&record(ChunkId(5), b"hello")[..RECORD_HEADER]);
    assert_eq!(header_version(&first), None);
    assert_eq!(header_version(&tombstone_header(ChunkId(5))), None);
}

#[tokio::test]
async fn headerless_segments_are_read_and_not_appended_to() {
    let dir = TempDir::new("small-headerless");
    let chunks = dir.path().join("chunks");
    fs::create_dir_all(&chunks).unwrap();
    let chunk = |n: u64| {
        (
            ChunkId(0xabc0 + u128::from(n)),
            pattern(2000 + n as usize, n),
        )
    };
    // As builds before the header wrote them: segment 0 full, segment 1 the newest, with
    // a tombstone of a chunk in segment 0 and a torn record at its end.
    let mut seg0 = Vec::new();
    for n in 0..3 {
        let (id, data) = chunk(n);
        seg0.extend_from_slice(&record(id, &data));
    }
    let mut seg1 = Vec::new();
    for n in 3..5 {
        let (id, data) = chunk(n);
        seg1.extend_from_slice(&record(id, &data));
    }
    seg1.extend_from_slice(&tombstone_header(chunk(1).0));
    let intact1 = seg1.len() as u64;
    let (id5, data5) = chunk(5);
    seg1.extend_from_slice(&record(id5, &data5)[..100]);
    fs::write(segment_path(&chunks, 0), &seg0).unwrap();
    fs::write(segment_path(&chunks, 1), &seg1).unwrap();

    let live = [0u64, 2, 3, 4];
    let store = open(&dir, SEGMENT_SIZE).await;
    for n in live {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    for n in [1, 5] {
        assert_missing(&store, chunk(n).0).await;
    }
    assert_eq!(store.stats().chunks, 4);
    // The torn tail is cut; nothing else is written to a segment without a header.
    assert_eq!(
        fs::metadata(segment_path(&chunks, 1)).unwrap().len(),
        intact1
    );
    let (id6, data6) = chunk(6);
    store.put(id6, Bytes::from(data6.clone())).await.unwrap();
    assert_eq!(loc(&store, id6).segment, 2);
    let seg2 = fs::read(segment_path(&chunks, 2)).unwrap();
    assert_eq!(&seg2[..RECORD_HEADER], &segment_header(FORMAT_VERSION)[..]);
    assert_eq!(fs::read(segment_path(&chunks, 0)).unwrap(), seg0);
    assert_eq!(
        fs::read(segment_path(&chunks, 1)).unwrap(),
        &seg1[..intact1 as usize]
    );
    drop(store);

    // The same after a restart; deleting the last chunks of the headerless segments
    // removes them as usual.
    let store = open(&dir, SEGMENT_SIZE).await;
    for n in [0, 2, 3, 4, 6] {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    store
        .delete(&[chunk(0).0, chunk(2).0, chunk(3).0, chunk(4).0])
        .await
        .unwrap();
    assert_eq!(segments(&dir), vec![segment_path(&chunks, 2)]);
    drop(store);
    let store = open(&dir, SEGMENT_SIZE).await;
    assert_reads(&store, id6, &data6).await;
    assert_eq!(store.stats().chunks, 1);
}

#[tokio::test]
async fn a_segment_of_a_newer_format_is_refused_and_nothing_changed() {
    let dir = TempDir::new("small-future");
    let chunks = dir.path().join("chunks");
    let store = open(&dir, SEGMENT_SIZE).await;
    store
        .put(ChunkId(1), Bytes::from(vec![1u8; 100]))
        .await
        .unwrap();
    drop(store);
    // Segment 0 claims format 2; segment 1, the newest, ends with a torn record that a
    // successful open would cut.
    let mut seg0 = segment_header(FORMAT_VERSION + 1).to_vec();
    seg0.extend_from_slice(b"records of a format this build does not know");
    let mut seg1 = fs::read(segment_path(&chunks, 0)).unwrap();
    seg1.extend_from_slice(&record(ChunkId(2), &[2u8; 100])[..50]);
    fs::write(segment_path(&chunks, 0), &seg0).unwrap();
    fs::write(segment_path(&chunks, 1), &seg1).unwrap();

    let err = match ChunkStore::open(chunks.clone(), true).await {
        Ok(_) => panic!("a segment of format 2 was opened"),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::Internal, "{err}");
    for needle in [
        segment_path(&chunks, 0).display().to_string(),
        "format version 2".into(),
        "reads format version 1".into(),
    ] {
        assert!(err.message.contains(&needle), "{err}");
    }
    assert_eq!(fs::read(segment_path(&chunks, 0)).unwrap(), seg0);
    assert_eq!(fs::read(segment_path(&chunks, 1)).unwrap(), seg1);
}

#[tokio::test]
async fn a_segment_torn_while_it_was_created_is_removed() {
    let dir = TempDir::new("small-torn-header");
    let chunks = dir.path().join("chunks");
    let store = open(&dir, SEGMENT_SIZE).await;
    let (a, data_a) = (ChunkId(1), pattern(500, 1));
    store.put(a, Bytes::from(data_a.clone())).await.unwrap();
    drop(store);
    // A crash while creating segment 1 (empty), or later segment 3 (half its header).
    for (number, content) in [(1, &[][..]), (3, &segment_header(FORMAT_VERSION)[..10])] {
        fs::write(segment_path(&chunks, number), content).unwrap();
        let store = open(&dir, SEGMENT_SIZE).await;
        assert!(!segment_path(&chunks, number).exists());
        assert_reads(&store, a, &data_a).await;
        // Appends go on in a new segment (the torn one's number is not reused).
        let (b, data_b) = (ChunkId(10 + number as u128), pattern(300, number.into()));
        store.put(b, Bytes::from(data_b.clone())).await.unwrap();
        assert_eq!(loc(&store, b).segment, number + 1);
        let fresh = fs::read(segment_path(&chunks, number + 1)).unwrap();
        assert_eq!(&fresh[..RECORD_HEADER], &segment_header(FORMAT_VERSION)[..]);
        drop(store);
        let store = open(&dir, SEGMENT_SIZE).await;
        assert_reads(&store, b, &data_b).await;
        assert_reads(&store, a, &data_a).await;
    }
}

#[tokio::test]
async fn zeros_written_ahead_are_cut_from_the_newest_segment_and_passed_over_in_older_ones() {
    let dir = TempDir::new("small-zeros");
    const SEGMENT: u64 = 10_000;
    let store = open(&dir, SEGMENT).await;
    let chunk = |n: u64| (ChunkId(900 + u128::from(n)), pattern(3000, n));
    for n in 0..7 {
        let (id, data) = chunk(n);
        store.put(id, Bytes::from(data)).await.unwrap();
    }
    drop(store);
    // Segments: [0 1 2] [3 4 5] [6]. The newest has zeros after its record; full ones were
    // cut back to their records when the next one started.
    let files = segments(&dir);
    assert_eq!(files.len(), 3);
    let newest_end = records_end(&files[2]);
    assert!(
        fs::metadata(&files[2]).unwrap().len()
            >= newest_end + tomus_wire::zeroed_ahead::ZEROED_AHEAD / 2
    );
    for file in &files[..2] {
        assert_eq!(fs::metadata(file).unwrap().len(), records_end(file));
    }
    // A crash between a segment filling up and its cut leaves zeros after an older
    // segment's records.
    let mut older = fs::read(&files[1]).unwrap();
    older.extend_from_slice(&[0u8; 4096]);
    fs::write(&files[1], &older).unwrap();

    let store = open(&dir, SEGMENT).await;
    for n in 0..7 {
        let (id, data) = chunk(n);
        assert_reads(&store, id, &data).await;
    }
    assert_eq!(fs::metadata(&files[2]).unwrap().len(), newest_end);
    // Segment 1 is not taken for damaged: once its chunks are deleted, it is removed.
    assert!(!store.small().read_index().segments[&1].damaged);
    store
        .delete(&[chunk(3).0, chunk(4).0, chunk(5).0])
        .await
        .unwrap();
    assert!(!files[1].exists());
    assert_eq!(store.stats().chunks, 4);
}
