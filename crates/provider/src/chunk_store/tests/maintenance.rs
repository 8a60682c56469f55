//! Listing, deletion, scrub and quarantine, over chunk files and small chunks together.

use std::time::Duration;

use super::*;

fn small_segment(dir: &TempDir) -> PathBuf {
    dir.path().join("chunks/small-000000.log")
}

/// Flips a bit of the first copy of `data` in `path`, `at` bytes into it.
fn flip_in(path: &Path, data: &[u8], at: usize) {
    let mut raw = fs::read(path).unwrap();
    let start = raw
        .windows(data.len())
        .position(|w| w == data)
        .expect("data not in file");
    raw[start + at] ^= 0x08;
    fs::write(path, raw).unwrap();
}

async fn list_all(store: &ChunkStore, page: usize) -> (Vec<ChunkEntry>, Vec<usize>) {
    let (mut all, mut sizes, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let got = store.list(cursor, page).await.unwrap();
        if got.is_empty() {
            return (all, sizes);
        }
        sizes.push(got.len());
        cursor = got.last().map(|e| e.id);
        all.extend(got);
    }
}

#[tokio::test]
async fn listing_pages_in_id_order_over_files_and_small_chunks() {
    let dir = TempDir::new("chunks-list");
    let store = store(&dir).await;
    let before = tomus_wire::now_ms();
    let mut expected = Vec::new();
    for n in 0..40u128 {
        // Spread over the fan-out directories; every fifth in one directory.
        let id = if n % 5 == 0 {
            ChunkId(0xab << 120 | n)
        } else {
            ChunkId(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
        };
        // Even: small-chunk log; odd: a file.
        let len = if n % 2 == 0 { 100 + n } else { 70_000 + n } as usize;
        store
            .put(id, Bytes::from(pattern(len, n as u8)))
            .await
            .unwrap();
        expected.push((id, len as u64));
    }
    let after = tomus_wire::now_ms();
    expected.sort();

    let (all, pages) = list_all(&store, 7).await;
    assert_eq!(pages, vec![7, 7, 7, 7, 7, 5]);
    let got: Vec<_> = all.iter().map(|e| (e.id, e.len)).collect();
    assert_eq!(got, expected);
    // Time stamps have a coarse clock: allow a second either way.
    for e in &all {
        assert!(
            e.stored_ms + 1000 >= before && e.stored_ms <= after + 1000,
            "{e:?} not in [{before}, {after}]"
        );
    }
    // After an id not held; nothing; past the end.
    let cut = ChunkId(expected[20].0 .0 + 1);
    let rest: Vec<_> = expected.iter().filter(|(id, _)| *id > cut).collect();
    let got = store.list(Some(cut), 1000).await.unwrap();
    assert_eq!(
        got.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>().len(),
        rest.len()
    );
    assert!(got
        .iter()
        .zip(&rest)
        .all(|(e, (id, len))| e.id == *id && e.len == *len));
    assert!(store.list(None, 0).await.unwrap().is_empty());
    assert!(store
        .list(Some(ChunkId(u128::MAX)), 10)
        .await
        .unwrap()
        .is_empty());
    drop(store);

    // After a restart small chunks date from their segment's last change: not earlier.
    let store = self::store(&dir).await;
    let (again, _) = list_all(&store, 1000).await;
    assert_eq!(again.len(), all.len());
    for (new, old) in again.iter().zip(&all) {
        assert_eq!((new.id, new.len), (old.id, old.len));
        assert!(new.stored_ms + 1000 >= old.stored_ms, "{new:?} {old:?}");
        assert!(new.stored_ms + 1000 >= before, "{new:?}");
    }
}

#[tokio::test]
async fn deleted_files_and_small_chunks_stay_deleted() {
    let dir = TempDir::new("chunks-delete");
    let store = store(&dir).await;
    let file_a = (ChunkId(0x11 << 120), pattern(100_000, 1));
    let file_b = (ChunkId(0x22 << 120), pattern(200_000, 2));
    let small_a = (ChunkId(0x33 << 120), pattern(500, 3));
    let small_b = (ChunkId(0x44 << 120), pattern(600, 4));
    for (id, data) in [&file_a, &file_b, &small_a, &small_b] {
        store.put(*id, Bytes::from(data.clone())).await.unwrap();
    }
    let before = store.stats();
    let file_a_size = fs::metadata(file_of(&dir, file_a.0)).unwrap().len();
    store
        .delete(&[file_a.0, small_a.0, ChunkId(0x55)])
        .await
        .unwrap();
    let expect = ChunkStats {
        chunks: before.chunks - 2,
        bytes: before.bytes - file_a_size - (28 + 500),
    };
    assert_eq!(store.stats(), expect);
    assert!(!file_of(&dir, file_a.0).exists());
    for id in [file_a.0, small_a.0] {
        let err = store.get(id, 0, 1).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
    }
    // Deleting again changes nothing.
    store.delete(&[file_a.0, small_a.0]).await.unwrap();
    assert_eq!(store.stats(), expect);
    drop(store);

    let store = self::store(&dir).await;
    assert_eq!(store.stats(), expect);
    let listed: Vec<_> = store.list(None, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|e| (e.id, e.len)).collect::<Vec<_>>(),
        vec![(file_b.0, 200_000), (small_b.0, 600)]
    );
    assert_eq!(
        &store.get(file_b.0, 0, 200_000).await.unwrap()[..],
        &file_b.1[..]
    );
    assert_eq!(
        &store.get(small_b.0, 0, 600).await.unwrap()[..],
        &small_b.1[..]
    );
}

#[tokio::test]
async fn scrub_quarantines_flipped_bytes_and_pages() {
    let dir = TempDir::new("chunks-scrub");
    let store = store(&dir).await;
    let b = BLOCK_SIZE as usize;
    // Odd: files of three blocks and a bit; even: small chunks.
    let chunks: Vec<(ChunkId, Vec<u8>)> = (1..=10u8)
        .map(|n| {
            let len = if n % 2 == 1 {
                3 * b + n as usize
            } else {
                2000 + n as usize
            };
            (ChunkId(u128::from(n) << 100), pattern(len, n))
        })
        .collect();
    for (id, data) in &chunks {
        store.put(*id, Bytes::from(data.clone())).await.unwrap();
    }
    let total: u64 = chunks.iter().map(|(_, d)| d.len() as u64).sum();
    let (bad_file, bad_small) = (&chunks[4], &chunks[7]);
    // In the last block of the file, in the middle of the small record's data.
    flip_in(&file_of(&dir, bad_file.0), &bad_file.1, 3 * b + 2);
    flip_in(&small_segment(&dir), &bad_small.1, 1000);
    let raw_bad_file = fs::read(file_of(&dir, bad_file.0)).unwrap();
    let before = store.stats();

    let (mut cursor, mut steps) = (None, Vec::new());
    let (mut checked, mut bytes, mut corrupt) = (0, 0, Vec::new());
    loop {
        let report = store.scrub(cursor, 3).await.unwrap();
        steps.push(report.checked);
        checked += report.checked;
        bytes += report.bytes;
        corrupt.extend(report.corrupt);
        match report.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(steps, vec![3, 3, 3, 1]);
    assert_eq!((checked, bytes), (10, total));
    assert_eq!(corrupt, vec![bad_file.0, bad_small.0]);

    // No longer listed or served; off the statistics; the file kept in quarantine.
    let listed: Vec<ChunkId> = store
        .list(None, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed.len(), 8);
    for (id, data) in [bad_file, bad_small] {
        assert!(!listed.contains(id));
        let err = store.get(*id, 0, data.len() as u64).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
    }
    let stats = store.stats();
    assert_eq!(stats.chunks, before.chunks - 2);
    assert_eq!(
        stats.bytes,
        before.bytes - raw_bad_file.len() as u64 - (28 + bad_small.1.len() as u64)
    );
    assert!(!file_of(&dir, bad_file.0).exists());
    let quarantined = dir
        .path()
        .join("chunks/quarantine")
        .join(bad_file.0.to_string());
    assert_eq!(fs::read(&quarantined).unwrap(), raw_bad_file);

    // A second pass finds nothing; nor does one after a restart.
    let report = store.scrub(None, 100).await.unwrap();
    assert_eq!(
        (report.checked, report.corrupt.len(), report.next),
        (8, 0, None),
        "{report:?}"
    );
    drop(store);
    let store = self::store(&dir).await;
    let report = store.scrub(None, 100).await.unwrap();
    assert_eq!(report.checked, 8);
    assert!(report.corrupt.is_empty());
    assert_eq!(store.stats(), stats);

    // The byte budget ends a step early: the first chunk crosses it alone.
    let report = store.scrub_with_budget(None, 100, 1).await.unwrap();
    assert_eq!(report.checked, 1);
    assert_eq!(report.bytes, chunks[0].1.len() as u64);
    assert_eq!(report.next, Some(chunks[0].0));
    let report = store
        .scrub_with_budget(Some(chunks[0].0), 100, 1)
        .await
        .unwrap();
    assert_eq!(report.next, Some(chunks[1].0));
    // Scrubbing an empty range: done.
    let last = chunks[9].0;
    let report = store.scrub(Some(last), 100).await.unwrap();
    assert_eq!((report.checked, report.next), (0, None));
}

#[tokio::test]
async fn quarantine_of_a_damaged_header_and_verify() {
    let dir = TempDir::new("chunks-verify");
    let store = store(&dir).await;
    let id = ChunkId(0x77 << 120);
    let data = pattern(5 * BLOCK_SIZE as usize + 3, 7);
    store.put(id, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(store.verify(id).await.unwrap(), data.len() as u64);
    // Truncated: listed with what the header claims, found by verify, quarantined.
    let path = file_of(&dir, id);
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(fs::metadata(&path).unwrap().len() - 10)
        .unwrap();
    drop(file);
    let listed = store.list(None, 10).await.unwrap();
    assert_eq!((listed[0].id, listed[0].len), (id, data.len() as u64));
    assert_eq!(store.verify(id).await.unwrap_err().kind, ErrorKind::Corrupt);
    assert!(store.quarantine(id).await.unwrap());
    assert!(!store.quarantine(id).await.unwrap());
    assert_eq!(
        store.verify(id).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(store.stats().chunks, 0);
    assert!(store.list(None, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn temporary_files_idle_for_the_limit_are_swept_and_the_rest_kept() {
    let dir = TempDir::new("chunks-sweep");
    let store = store(&dir).await;
    let id = ChunkId(0xab << 120 | 7);
    let data = vec![5u8; 100_000];
    store.put(id, Bytes::from(data.clone())).await.unwrap();
    let fan_out = file_of(&dir, id).parent().unwrap().to_path_buf();
    let dead = fan_out.join(format!(".{id}.client-1-0.tmp"));
    let live = fan_out.join(format!(".{id}.client-1-1.tmp"));
    fs::write(&dead, vec![0u8; 3000]).unwrap();
    fs::write(&live, b"being written").unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    fs::File::options()
        .write(true)
        .open(&dead)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let swept = store
        .sweep_stale_temporaries(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(swept, (1, 3000));
    assert!(!dead.exists());
    assert!(
        live.exists(),
        "a temporary file written to recently is kept"
    );
    assert_eq!(store.get(id, 0, data.len() as u64).await.unwrap(), data);
}
