//! Fault tolerance against real processes on loopback: repair of lost copies
//! (`repair.rs`), providers joining and draining under load (and a write that outlives its
//! provider's removal), writes through a provider that failed and came back, retention and
//! garbage collection.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

#[path = "../common/mod.rs"]
mod common;
/// Repair of the copies of killed, emptied and corrupt providers.
mod repair;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::process::Command;
use std::time::{Duration, Instant};

use tomus_cli::embedded::ClusterSpec;
use tomus_cli::pattern;
use tomus_client::{Client, CommitOptions, Replace};
use tomus_metadata::ChunkId;
use tomus_wire::manager::{Allocate, GetStatus, SetRetention};
use tomus_wire::provider::{ListChunks, ListNodes, PutChunk};
use tomus_wire::{ClusterStatus, ErrorKind, Pool, ProviderInfo, Retention, RpcConfig};

use common::{chunk_files, exe, TestCluster};

const CHUNK: u64 = 64 << 10;

/// Fast failure detection and maintenance passes, unthrottled repair, short GC grace.
fn fast(spec: &mut ClusterSpec) {
    spec.heartbeat_ms = 200;
    spec.manager_args = common::fast_maintenance(4000);
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn status(client: &Client) -> ClusterStatus {
    client.manager_call(GetStatus {}).await.unwrap()
}

/// Which live providers hold each chunk, from their own listings.
async fn holders(client: &Client) -> HashMap<ChunkId, HashSet<u32>> {
    let pool = Pool::new(RpcConfig::default());
    let mut out: HashMap<ChunkId, HashSet<u32>> = HashMap::new();
    for p in client.providers().await.unwrap().iter().filter(|p| p.alive) {
        let mut after = None;
        loop {
            let req = ListChunks {
                start_after: after,
                limit: 1000,
            };
            let Ok(listing) = pool.call(&p.addr, req).await else {
                break;
            };
            let page = listing.entries;
            for c in &page {
                out.entry(c.id).or_default().insert(p.id);
            }
            if page.len() < 1000 {
                break;
            }
            after = page.last().map(|c| c.id);
        }
    }
    out
}

/// Waits until a maintenance pass that started after this call found nothing to repair.
async fn wait_repaired(client: &Client, timeout: Duration) {
    let since = status(client).await.now_ms;
    wait_until("repair to finish", timeout, || async {
        status(client).await.maintenance.repaired_since(since)
    })
    .await;
}

/// Stores `n` chunks for `blob` the way a writer does before it asks for a version, and
/// never commits them.
async fn store_orphans(client: &Client, blob: u64, n: u32) {
    let pool = Pool::new(RpcConfig::default());
    let req = Allocate {
        blob,
        chunks: n,
        chunk_bytes: None,
        placement: Default::default(),
        client_host: None,
        avoid: Vec::new(),
    };
    let sets = client.manager_call(req).await.unwrap();
    for (i, set) in sets.iter().enumerate() {
        let id = ChunkId(0xdead_0000 + i as u128);
        let data = pattern::generate(99 + i as u64, CHUNK as usize);
        for p in set {
            let crc = tomus_wire::checksum::crc32c(&data);
            pool.call_with_body(&p.addr, PutChunk { id, crc }, &data)
                .await
                .unwrap();
        }
    }
}

fn provider_at(list: &[ProviderInfo], addr: &str) -> ProviderInfo {
    list.iter()
        .find(|p| p.addr == addr)
        .cloned()
        .unwrap_or_else(|| panic!("no provider at {addr} in {list:?}"))
}

fn tomus(addr: &str, args: &[&str]) -> std::process::Output {
    Command::new(exe())
        .arg("--addr")
        .arg(addr)
        .args(args)
        .output()
        .expect("run tomus")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_join_and_drain_under_load_without_a_failed_operation() {
    let mut tc = TestCluster::start_with(4, fast);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let first = pattern::generate(3, 30 * CHUNK as usize);
    blob.append(&first).await.unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let blob = blob.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let data = pattern::generate(100 + i, 50_000 + (i as usize * 7919) % 100_000);
                let (v, off) = blob.append(&data).await.expect("append during join/drain");
                let back = blob
                    .read(off, data.len() as u64, Some(v))
                    .await
                    .expect("read");
                assert_eq!(back, data);
                acked.push((v, off, data));
                i += 1;
            }
            acked
        })
    };
    let joined = tc.cluster.add_provider().unwrap();
    let drained = tc.cluster.provider_addr(0).to_string();
    let out = tomus(&tc.addr(), &["provider", "drain", &drained, "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = load.await.unwrap();
    assert!(
        acked.len() >= 3,
        "only {} appends during the drain",
        acked.len()
    );

    // The drained provider can go: nothing is lost.
    tc.cluster.kill_provider(0);
    let out = tomus(&tc.addr(), &["provider", "remove", &drained]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let providers = client.providers().await.unwrap();
    assert!(providers.iter().all(|p| p.addr != drained), "{providers:?}");
    let fresh = tc.client().await;
    let b = fresh.open_blob(blob.id()).await.unwrap();
    assert_eq!(b.read(0, first.len() as u64, Some(1)).await.unwrap(), first);
    for (v, off, data) in &acked {
        assert_eq!(
            &b.read(*off, data.len() as u64, Some(*v)).await.unwrap(),
            data
        );
    }
    // The new provider took data and its share of the metadata ring.
    let joined_addr = tc.cluster.provider_addr(joined).to_string();
    let joined_id = provider_at(&providers, &joined_addr).id;
    let h = holders(&fresh).await;
    assert!(h.values().any(|s| s.contains(&joined_id)));
    let pool = Pool::new(RpcConfig::default());
    let list = ListNodes {
        start_after: None,
        limit: 10,
    };
    let nodes = pool.call(&joined_addr, list).await.unwrap();
    assert!(!nodes.is_empty(), "the new provider got no metadata");
}

/// A writer whose chunks went to a provider before it drained, and who commits only after the
/// provider was removed, is refused: no repair pass could see those chunks (nothing
/// referenced them), so publishing them would acknowledge data that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_outlives_a_removal_of_its_provider_is_refused() {
    // A long GC grace: the refusal must come from the removal, not from the writer's age.
    let mut tc = TestCluster::start_with(3, |spec| {
        spec.heartbeat_ms = 200;
        spec.manager_args = common::fast_maintenance(120_000);
    });
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let drained = tc.cluster.provider_addr(0).to_string();
    let drained_id = provider_at(&client.providers().await.unwrap(), &drained).id;

    // One whole writer batch is stored at once, before any version is asked for.
    let mut writer = blob.writer();
    writer.write(&pattern::generate(7, 32 << 20)).await.unwrap();
    let on_drained = holders(&client)
        .await
        .values()
        .filter(|h| h.contains(&drained_id))
        .count();
    assert!(
        on_drained > 0,
        "none of the writer's chunks went to {drained}"
    );

    let succeeds = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    succeeds(tomus(
        &tc.addr(),
        &["provider", "drain", &drained, "--wait"],
    ));
    tc.cluster.kill_provider(0);
    succeeds(tomus(&tc.addr(), &["provider", "remove", &drained]));

    let e = writer
        .commit(Replace::default(), &CommitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    assert!(
        e.message.contains("drained provider was removed"),
        "{}",
        e.message
    );
    assert_eq!(blob.latest().await.unwrap(), 0);
    // A write begun now goes to the providers left.
    let data = pattern::generate(8, 40 * CHUNK as usize);
    blob.append(&data).await.unwrap();
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_deletion_give_space_back() {
    let tc = TestCluster::start_with(2, fast);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let mut versions = Vec::new();
    for i in 0..6u64 {
        let data = pattern::generate(10 + i, 4 * CHUNK as usize);
        versions.push((blob.write(0, &data).await.unwrap(), data));
    }
    // A writer that dies before committing leaves chunks nothing references.
    store_orphans(&client, blob.id(), 3).await;
    wait_until(
        "the orphan chunks to be stored",
        Duration::from_secs(5),
        || async { holders(&client).await.len() == 27 },
    )
    .await;

    client
        .manager_call(SetRetention {
            blob: blob.id(),
            retention: Retention::KeepLast(2),
        })
        .await
        .unwrap();
    // Six versions of four chunks each and the orphans become the last two versions' eight.
    wait_until("garbage collection", Duration::from_secs(30), || async {
        holders(&client).await.len() == 8
    })
    .await;
    for (v, data) in &versions[4..] {
        assert_eq!(
            &blob.read(0, data.len() as u64, Some(*v)).await.unwrap(),
            data
        );
    }
    let e = blob.read(0, 10, Some(versions[0].0)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    let listed: Vec<u64> = blob
        .versions()
        .await
        .unwrap()
        .versions
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(listed, vec![versions[4].0, versions[5].0]);

    // Deleting a file gives its chunks back too.
    let ns = client.namespace();
    let options = tomus_client::CreateOptions {
        chunk_size: CHUNK,
        ..Default::default()
    };
    let (_, file) = ns.create("data/big.bin", options).await.unwrap();
    file.write(0, &pattern::generate(7, 5 * CHUNK as usize))
        .await
        .unwrap();
    wait_until("the file's chunks", Duration::from_secs(5), || async {
        holders(&client).await.len() == 13
    })
    .await;
    ns.delete("data/big.bin", false).await.unwrap();
    wait_until(
        "the deleted file's chunks to go",
        Duration::from_secs(30),
        || async { holders(&client).await.len() == 8 },
    )
    .await;
    // 16 chunks of expired versions, 3 orphans and the file's 5, reported within a second.
    wait_until("the collection report", Duration::from_secs(5), || async {
        let m = status(&client).await.maintenance;
        m.gc_chunks == 24 && m.gc_bytes == 24 * CHUNK && m.gc_nodes > 0
    })
    .await;
    assert_eq!(blob.read(0, 4 * CHUNK, None).await.unwrap(), versions[5].1);
}

/// A provider that failed a request is tried last for a while, not left out: with as many
/// providers as copies, a client that saw its provider restart keeps writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_keeps_writing_through_a_provider_it_saw_fail() {
    let mut tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let mut model = pattern::generate(1, 3 * CHUNK as usize);
    blob.append(&model).await.unwrap();

    tc.cluster.kill_provider(1);
    // Two copies cannot be made while it is down; the client notes that it failed.
    let err = blob.append(b"while down").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");
    tc.cluster.start_provider(1).unwrap();
    for i in 0..6u64 {
        let data = pattern::generate(10 + i, if i % 2 == 0 { 4096 } else { 2 * CHUNK as usize });
        blob.append(&data)
            .await
            .unwrap_or_else(|e| panic!("append {i} after the restart: {e}"));
        model.extend_from_slice(&data);
    }
    let fresh = tc.client().await;
    let reopened = fresh.open_blob(blob.id()).await.unwrap();
    assert_eq!(
        reopened.read(0, model.len() as u64, None).await.unwrap(),
        model
    );
}
