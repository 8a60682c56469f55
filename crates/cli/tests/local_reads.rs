//! Short-circuit reads against real provider processes on this host: pieces are read from
//! the providers' chunk files (counted by the client), a damaged file sends the read through
//! its provider (which quarantines it, and the replica serves the bytes), and a provider
//! whose token is not found where it says is read through its socket.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use tomus_cli::pattern;

use common::{chunk_files, TestCluster};

const CHUNK: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_of_providers_on_this_host_are_read_from_their_files() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let data = pattern::generate(11, 8 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();

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
    for _ in 0..3 {
        assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    }
    // Each read picks a replica at random: the damaged copies it met went through provider
    // 0, which found them damaged and set them aside; the rest came from provider 1's files.
    let quarantined = std::fs::read_dir(tc.cluster.provider_dir(0).join("chunks/quarantine"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(quarantined > 0, "no damaged copy was quarantined");
    assert!(quarantined <= 8, "{quarantined} copies quarantined, 8 damaged");
    assert!(reader.local_read_bytes() > 0);
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
}
