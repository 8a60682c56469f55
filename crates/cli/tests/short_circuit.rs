//! Short-circuit reads and writes against real provider processes on this host: pieces are
//! read from the providers' chunk files and chunks written as files they adopt (counted by
//! the client), bytes handed on to a socket are the files' mapped pages, a damaged file sends
//! the read through its provider (which quarantines it, and the replica serves the bytes), a
//! provider whose token is not found where it says is used through its socket, and adoption
//! requests naming other files or carrying a wrong checksum are refused without storing
//! anything.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use tomus_cli::pattern;
use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::{chunk_path, encode_header};
use tomus_wire::provider::{AdoptChunk, GetChunk};
use tomus_wire::{ErrorKind, Pool, RpcConfig};

use common::{chunk_files, TestCluster};

const CHUNK: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_of_providers_on_this_host_are_read_from_their_files() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let data = pattern::generate(11, 8 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();

    // Every chunk was written as a file its provider adopted: no temporary file is left, and
    // each provider counts what it holds.
    assert_eq!(client.local_written_bytes(), data.len() as u64);
    let files: Vec<_> = (0..2)
        .flat_map(|i| chunk_files(&tc.cluster.provider_dir(i)))
        .collect();
    assert_eq!(files.len(), 8, "{files:?}");
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    assert_eq!(client.local_read_bytes(), data.len() as u64);
    // Off block and chunk edges: the two short end pieces go through the providers (under
    // 64 KiB), the two whole chunks between them are read from the files.
    let (offset, len) = (CHUNK - 100, 2 * CHUNK + 300);
    let got = blob.read(offset, len, None).await.unwrap();
    assert!(got == data[offset as usize..(offset + len) as usize]);
    assert_eq!(client.local_read_bytes(), data.len() as u64 + 2 * CHUNK);
    // Unaligned inside a chunk, across its checksum blocks.
    let (offset, len) = (3 * CHUNK + 65_000, 300_001);
    let got = blob.read(offset, len, None).await.unwrap();
    assert!(got == data[offset as usize..(offset + len) as usize]);
    assert_eq!(
        client.local_read_bytes(),
        data.len() as u64 + 2 * CHUNK + len
    );

    let remote = tc.client_through_providers().await;
    let blob = remote.open_blob(blob.id()).await.unwrap();
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    assert_eq!(remote.local_read_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_file_is_read_through_its_provider_and_quarantined() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(12, 8 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();
    let damaged = chunk_files(&tc.cluster.provider_dir(0));
    assert_eq!(damaged.len(), 8, "one copy of each chunk on each provider");
    for path in &damaged {
        let mut bytes = std::fs::read(path).unwrap();
        let n = bytes.len();
        bytes[n - 5000] ^= 0x21;
        std::fs::write(path, &bytes).unwrap();
    }
    let reader = tc.client().await;
    let blob = reader.open_blob(blob.id()).await.unwrap();
    // Chunk by chunk: a reader that has found one provider on its host still tries the
    // others it has not asked yet (it once kept to the first one it found).
    for _ in 0..3 {
        for c in 0..8 {
            let at = (c * CHUNK) as usize;
            let got = blob.read(at as u64, CHUNK, None).await.unwrap();
            assert!(got == data[at..at + CHUNK as usize], "chunk {c}");
        }
    }
    // Each read picks a replica at random: the damaged copies it met went through provider
    // 0, which found them damaged and set them aside; the rest came from provider 1's files.
    let quarantined = std::fs::read_dir(tc.cluster.provider_dir(0).join("chunks/quarantine"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(quarantined > 0, "no damaged copy was quarantined");
    assert!(
        quarantined <= 8,
        "{quarantined} copies quarantined, 8 damaged"
    );
    assert!(reader.local_read_bytes() > 0);
}

/// `read_version_bytes` (what the S3 gateway streams): the files' own pages, one piece per
/// chunk, where every piece maps; one buffer where one does not (a piece under 1 MiB,
/// `MIN_MAPPED_LEN`, a reader on another host); and never a damaged file's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_handed_on_are_the_files_pages_else_one_buffer_never_damage() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let data = pattern::generate(15, 4 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();
    let info = blob.stat(None).await.unwrap();
    let read = |client: &tomus_client::Client, offset: u64, len: u64| {
        let (client, info) = (client.clone(), info.clone());
        async move {
            let blob = client.open_blob(info.blob).await?;
            blob.read_version_bytes(&info, offset, len, |n| vec![0u8; n])
                .await
        }
    };
    let whole = |pieces: &[bytes::Bytes]| pieces.concat();

    let pieces = read(&client, CHUNK, 3 * CHUNK).await.unwrap();
    assert_eq!(pieces.len(), 3, "one mapped piece per chunk touched");
    assert!(whole(&pieces) == data[CHUNK as usize..(4 * CHUNK) as usize]);
    assert_eq!(client.local_read_bytes(), 3 * CHUNK);
    // A 100-byte piece at the start: read, with the rest, into one buffer.
    let (offset, len) = (CHUNK - 100, CHUNK + 300);
    let pieces = read(&client, offset, len).await.unwrap();
    assert_eq!(pieces.len(), 1);
    assert!(whole(&pieces) == data[offset as usize..(offset + len) as usize]);
    // Two pieces too short to be worth mapping (512 KiB each): one buffer as well.
    let (offset, len) = (CHUNK / 2, CHUNK);
    let pieces = read(&client, offset, len).await.unwrap();
    assert_eq!(pieces.len(), 1);
    assert!(whole(&pieces) == data[offset as usize..(offset + len) as usize]);

    let remote = tc.client_through_providers().await;
    let pieces = read(&remote, 0, data.len() as u64).await.unwrap();
    assert_eq!(pieces.len(), 1);
    assert!(whole(&pieces) == data);
    assert_eq!(remote.local_read_bytes(), 0);

    // The only copy of chunk 2 damaged: neither mapped nor read, an error.
    let start = &data[(2 * CHUNK) as usize..][..64];
    for dir in (0..2).map(|i| tc.cluster.provider_dir(i)) {
        for path in chunk_files(&dir) {
            let mut bytes = std::fs::read(&path).unwrap();
            if let Some(at) = bytes.windows(64).position(|w| w == start) {
                bytes[at + 10] ^= 0x08;
                std::fs::write(&path, &bytes).unwrap();
            }
        }
    }
    let reader = tc.client().await;
    let e = read(&reader, 2 * CHUNK, CHUNK).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    let pieces = read(&reader, 0, 2 * CHUNK).await.unwrap();
    assert!(whole(&pieces) == data[..(2 * CHUNK) as usize]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_token_is_not_found_is_read_through_its_socket() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let data = pattern::generate(13, 4 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();
    // What a same-named directory of another host would hold.
    for i in 0..2 {
        let token = tc.cluster.provider_dir(i).join("chunks/local-read-token");
        std::fs::write(token, "0123456789abcdef0123456789abcdef").unwrap();
    }
    let reader = tc.client().await;
    let blob = reader.open_blob(blob.id()).await.unwrap();
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    assert_eq!(reader.local_read_bytes(), 0);
    let more = pattern::generate(14, 2 * CHUNK as usize);
    blob.append(&more).await.unwrap();
    assert_eq!(reader.local_written_bytes(), 0);
    let got = blob
        .read(data.len() as u64, more.len() as u64, None)
        .await
        .unwrap();
    assert!(got == more);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adoption_of_other_files_or_damaged_chunks_is_refused() {
    let tc = TestCluster::start(1);
    let provider = tc.cluster.provider_addr(0).to_string();
    let chunks = tc.cluster.provider_dir(0).join("chunks");
    let pool = Pool::new(RpcConfig::default());
    let id = ChunkId(0x5eed_0000_0000_0001);
    let data = pattern::generate(15, 300_000);
    let mut file = encode_header(&data);
    file.extend_from_slice(&data);
    let crc = tomus_wire::checksum::crc32c(&data);
    let tmp = |name: &str| chunk_path(&chunks, id).with_file_name(name);
    let adopt = |name: &str, crc: u32| {
        pool.call(
            &provider,
            AdoptChunk {
                id,
                crc,
                name: name.into(),
            },
        )
    };

    // Names that are not a temporary file of this chunk in its directory.
    let outside = tc.dir.join("outside.tmp");
    std::fs::write(&outside, &file).unwrap();
    for name in [
        "../../outside.tmp".to_string(),
        format!(".{id}.x/../../../outside.tmp"),
        format!("{id}"),
        format!(".{}.x.tmp", ChunkId(7)),
        format!(".{id}.x"),
    ] {
        let e = adopt(&name, crc).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{name}: {e}");
    }
    assert!(outside.exists());
    // A symbolic link to a chunk file elsewhere: refused, and nothing is stored.
    let name = format!(".{id}.link.tmp");
    std::os::unix::fs::symlink(&outside, tmp(&name)).unwrap();
    let e = adopt(&name, crc).await.unwrap_err();
    assert_ne!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(chunk_files(&tc.cluster.provider_dir(0)).is_empty());
    assert!(outside.exists());
    // A second name of another file, and a FIFO (which must not block the provider).
    let name = format!(".{id}.hard.tmp");
    std::fs::hard_link(&outside, tmp(&name)).unwrap();
    let e = adopt(&name, crc).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    let name = format!(".{id}.fifo.tmp");
    let fifo = std::ffi::CString::new(tmp(&name).into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let e = adopt(&name, crc).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(chunk_files(&tc.cluster.provider_dir(0)).is_empty());
    assert!(outside.exists());
    // Missing, then a checksum that is not the data's: refused, and the file is gone.
    let name = format!(".{id}.test.tmp");
    let e = adopt(&name, crc).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    std::fs::write(tmp(&name), &file).unwrap();
    let e = adopt(&name, crc ^ 1).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(!tmp(&name).exists());
    // A file cut short: refused.
    std::fs::write(tmp(&name), &file[..file.len() - 1]).unwrap();
    let e = adopt(&name, crc).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(chunk_files(&tc.cluster.provider_dir(0)).is_empty());
    // The real thing: adopted under the chunk's name, readable through the provider.
    std::fs::write(tmp(&name), &file).unwrap();
    adopt(&name, crc).await.unwrap();
    assert!(!tmp(&name).exists());
    assert_eq!(chunk_files(&tc.cluster.provider_dir(0)).len(), 1);
    // The provider serves it, every block checked, with the data's checksum.
    let req = GetChunk {
        id,
        offset: 0,
        len: data.len() as u64,
    };
    assert_eq!(pool.call(&provider, req).await.unwrap(), crc);
}
