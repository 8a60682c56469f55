//! Chunk files damaged on disk: flipped bytes found in their block, damaged headers, an
//! unknown format version, and files cut short underneath a read.

use super::*;

#[tokio::test]
async fn flipped_byte_is_detected_in_its_block_only() {
    let dir = TempDir::new("chunks-corrupt");
    let store = store(&dir).await;
    let id = ChunkId(0xfeed_beef);
    let b = BLOCK_SIZE as u64;
    let data = pattern(3 * b as usize + 17, 9);
    store.put(id, Bytes::from(data.clone())).await.unwrap();

    // Flip a byte in the middle of block 1.
    let path = dir
        .path()
        .join("chunks")
        .join(&id.to_string()[..2])
        .join(id.to_string());
    let mut raw = fs::read(&path).unwrap();
    let data_start = raw.len() - data.len();
    raw[data_start + b as usize + 1234] ^= 0x40;
    fs::write(&path, &raw).unwrap();

    let err = store.get(id, b + 1000, 500).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt);
    assert!(err.message.contains(&id.to_string()), "{}", err.message);
    assert!(err.message.contains("block 1"), "{}", err.message);
    let err = store.get(id, b - 10, 20).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt);
    // Blocks 0 and 2 are intact.
    let got = store.get(id, 0, b).await.unwrap();
    assert_eq!(&got[..], &data[..b as usize]);
    let got = store.get(id, 2 * b, b + 17).await.unwrap();
    assert_eq!(&got[..], &data[2 * b as usize..]);
}

/// Ranges sent with sendfile are checked piece by piece: a flipped byte deep inside one
/// is found and named by its block; the ranges around it still read back intact.
#[tokio::test]
async fn flipped_byte_in_a_sendfile_range_is_detected() {
    let dir = TempDir::new("chunks-corrupt-large");
    let store = store(&dir).await;
    let id = ChunkId(0x5a << 120);
    let b = BLOCK_SIZE as u64;
    let data = pattern((2 << 20) + 5, 3);
    store.put(id, Bytes::from(data.clone())).await.unwrap();
    let mut raw = fs::read(file_of(&dir, id)).unwrap();
    let data_start = raw.len() - data.len();
    raw[data_start + 21 * b as usize + 7] ^= 0x02;
    fs::write(file_of(&dir, id), &raw).unwrap();

    for (offset, len) in [(b + 5, 20 * b), (0, data.len() as u64)] {
        assert!(len >= SENDFILE_THRESHOLD as u64);
        let err = store.get(id, offset, len).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
        assert!(err.message.contains("block 21"), "{err}");
    }
    let err = store.verify(id).await.unwrap_err();
    assert!(err.message.contains("block 21"), "{err}");
    for (offset, len) in [(3, 21 * b - 3), (22 * b, data.len() as u64 - 22 * b)] {
        let got = store.get(id, offset, len).await.unwrap();
        assert_eq!(&got[..], &data[offset as usize..(offset + len) as usize]);
    }
}

#[tokio::test]
async fn damaged_headers_and_truncation_are_corrupt() {
    let dir = TempDir::new("chunks-header");
    let store = store(&dir).await;
    let id = ChunkId(7);
    let data = pattern(100_000, 1);
    store.put(id, Bytes::from(data)).await.unwrap();
    let path = dir
        .path()
        .join("chunks")
        .join(&id.to_string()[..2])
        .join(id.to_string());
    let good = fs::read(&path).unwrap();

    let damage: [fn(&mut Vec<u8>); 4] = [
        |f| f.truncate(f.len() - 1),
        |f| f.truncate(10),
        |f| f[0] = b'X',
        |f| f[4] = 99,
    ];
    for d in damage {
        let mut bad = good.clone();
        d(&mut bad);
        fs::write(&path, &bad).unwrap();
        let err = store.get(id, 0, 10).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt, "{}", err.message);
    }
}

/// A chunk file of a format this build does not know (a newer build's, after a
/// downgrade) is a clear `Corrupt` error naming both versions for reads, verify and
/// scrub (which sets it aside in quarantine), and never a panic.
#[tokio::test]
async fn an_unknown_chunk_format_version_is_a_clear_error() {
    let dir = TempDir::new("chunks-version");
    let store = store(&dir).await;
    let (a, b) = (ChunkId(0x41 << 120), ChunkId(0x42 << 120));
    for id in [a, b] {
        store
            .put(id, Bytes::from(pattern(1 << 20, 5)))
            .await
            .unwrap();
        let path = file_of(&dir, id);
        let mut raw = fs::read(&path).unwrap();
        assert_eq!(raw[4], FORMAT_VERSION);
        raw[4] = FORMAT_VERSION + 1;
        fs::write(&path, raw).unwrap();
    }
    for (offset, len) in [(0, 10), (0, 1 << 20)] {
        let err = store.get(a, offset, len).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
        assert!(
            err.message.contains(&a.to_string())
                && err.message.contains("format version 2")
                && err.message.contains("reads version 1"),
            "{err}"
        );
    }
    assert_eq!(store.verify(a).await.unwrap_err().kind, ErrorKind::Corrupt);
    // Listed (with the length its file size implies), then set aside by scrub.
    assert_eq!(store.list(None, 10).await.unwrap().len(), 2);
    let report = store.scrub(None, 10).await.unwrap();
    assert_eq!(report.corrupt, vec![a, b]);
    assert!(store.list(None, 10).await.unwrap().is_empty());
}

/// Cuts the file at `path` to half its size, as a failing disk, another process or an
/// operator could while the provider reads it.
fn truncate_to_half(path: &Path) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len / 2).unwrap();
}

/// A chunk file cut short after a read checked its size: the read of a range large enough
/// for sendfile, a verify and a scrub all report `Corrupt` (a positioned read comes back
/// short), and the process lives on.
#[tokio::test]
async fn a_file_truncated_under_a_large_read_is_corrupt() {
    let dir = TempDir::new("chunks-truncated");
    let store = store(&dir).await;
    let len = 2 << 20;
    let ids = [
        ChunkId(0x61 << 120),
        ChunkId(0x62 << 120),
        ChunkId(0x63 << 120),
    ];
    for (n, id) in ids.iter().enumerate() {
        let data = pattern(len, n as u8);
        store.put(*id, Bytes::from(data)).await.unwrap();
        // A chunk file, not a record of the small-chunk log.
        assert!(file_of(&dir, *id).exists());
    }

    // 768 KiB from 1 MiB on: all of it past the new end, and sent with sendfile if intact.
    let range = 768 << 10;
    assert!(range >= SENDFILE_THRESHOLD as u64);
    store.after_open(truncate_to_half);
    let err = match store.read_range(ids[0], 1 << 20, range).await {
        Ok(_) => panic!("a truncated chunk was read"),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
    assert!(err.message.contains(&ids[0].to_string()), "{err}");
    assert!(err.message.contains("truncated"), "{err}");

    store.after_open(truncate_to_half);
    let err = store.verify(ids[1]).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");

    // Scrub finds it and quarantines it.
    store.after_open(truncate_to_half);
    let report = store.scrub(Some(ids[1]), 10).await.unwrap();
    assert_eq!(report.corrupt, vec![ids[2]]);
    assert!(!file_of(&dir, ids[2]).exists());
    let quarantined = dir
        .path()
        .join("chunks/quarantine")
        .join(ids[2].to_string());
    assert!(quarantined.exists());
}

/// The same under a range large enough to be checked in a mapping of the file: the pages
/// past the new end raise SIGBUS in the checksum pass, which must not end the process; the
/// range is checked again with positioned reads, and the read is `Corrupt`.
#[tokio::test]
async fn a_file_truncated_under_a_mapped_check_is_corrupt() {
    let dir = TempDir::new("chunks-truncated-mapped");
    let store = store(&dir).await;
    let id = ChunkId(0x65 << 120);
    store
        .put(id, Bytes::from(pattern(4 << 20, 5)))
        .await
        .unwrap();
    // 2 MiB from 1 MiB on: its first half before the new end, its second half past it.
    let range = 2 << 20;
    assert!(range >= tomus_wire::mapping::MIN_MAPPED_LEN);
    store.after_open(truncate_to_half);
    let err = match store.read_range(id, 1 << 20, range).await {
        Ok(_) => panic!("a truncated chunk was read"),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
    assert!(err.message.contains(&id.to_string()), "{err}");
    assert!(err.message.contains("truncated"), "{err}");
}

/// The service quarantines a chunk truncated under a large read: the read fails with
/// `Corrupt`, the next one finds nothing.
#[tokio::test]
async fn the_service_quarantines_a_chunk_truncated_under_a_read() {
    use crate::meta_store::MetaStore;
    use crate::service::ProviderService;
    use tomus_wire::provider::GetChunk;
    use tomus_wire::{call_handler, Pool, RpcConfig};

    let dir = TempDir::new("chunks-truncated-service");
    let chunks = store(&dir).await;
    let meta = MetaStore::open(dir.path().join("meta.log"), false)
        .await
        .unwrap();
    let service = ProviderService::new(chunks.clone(), None, meta, Pool::new(RpcConfig::default()));
    let id = ChunkId(0x64 << 120);
    chunks
        .put(id, Bytes::from(pattern(2 << 20, 4)))
        .await
        .unwrap();
    let get = GetChunk {
        id,
        offset: 1 << 20,
        len: 1 << 20,
    };

    chunks.after_open(truncate_to_half);
    let e = call_handler(&service, get.clone(), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(!file_of(&dir, id).exists());
    let quarantined = dir.path().join("chunks/quarantine").join(id.to_string());
    assert!(quarantined.exists());
    let e = call_handler(&service, get, Bytes::new()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert_eq!(chunks.stats().chunks, 0);
}
