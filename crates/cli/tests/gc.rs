//! Garbage collection never deletes live data: it deletes a blob's metadata only on the
//! manager's positive word, never because a listing did not show the blob (issue 20: blobs
//! created concurrently became visible out of id order, and a pass that listed a higher id
//! without a lower one deleted the lower blob's fresh metadata).

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tomus_cli::embedded::ClusterSpec;
use tomus_cli::pattern;
use tomus_client::cluster::Cluster;
use tomus_maintenance::ledger::Ledger;
use tomus_maintenance::{audit, inventory, references};
use tomus_wire::{MaintenanceStatus, Pool, RpcConfig};

use common::TestCluster;

const CHUNK: u64 = 64 << 10;

/// A maintenance client of the cluster at `addr`, as the manager's maintenance service has.
fn maintenance_view(addr: &str) -> Cluster {
    Cluster::new(addr.to_string(), Pool::new(RpcConfig::default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_missing_from_a_listing_keeps_its_metadata() {
    let tc = TestCluster::start_with(2, |spec: &mut ClusterSpec| {
        spec.manager_args = vec!["--no-maintenance".into()];
    });
    let client = tc.client().await;
    let hidden = client.create_blob(CHUNK, 1).await.unwrap();
    let listed = client.create_blob(CHUNK, 1).await.unwrap();
    let hidden_data = pattern::generate(1, 3 * CHUNK as usize + 17);
    let listed_data = pattern::generate(2, CHUNK as usize);
    let v = hidden.write(0, &hidden_data).await.unwrap();
    listed.write(0, &listed_data).await.unwrap();

    // A pass whose listing showed the newer blob but not the older one (still being created
    // when the list was taken): its references lack the older blob entirely.
    let cluster = maintenance_view(&tc.addr());
    let mut refs = references::scan(&cluster, &Default::default())
        .await
        .unwrap();
    refs.nodes.retain(|key, _| key.blob != hidden.id());
    refs.first_retained.remove(&hidden.id());
    let providers = cluster.providers().await.unwrap();
    let inv = inventory::take(&cluster, &providers).await;
    assert!(
        inv.nodes.keys().any(|k| k.blob == hidden.id()),
        "the providers hold no metadata of blob {}",
        hidden.id()
    );
    let progress = Arc::new(Mutex::new(MaintenanceStatus::default()));
    // No chunk is old enough to go: this is about the metadata only.
    let ledger = Arc::new(Ledger::in_memory().unwrap());
    audit::sweep(&cluster, &ledger, &refs, &inv, 0, &progress)
        .await
        .unwrap();

    let after = inventory::take(&cluster, &providers).await;
    let before: Vec<_> = inv.nodes.keys().filter(|k| k.blob == hidden.id()).collect();
    for key in before {
        assert!(after.nodes.contains_key(key), "node {key:?} was deleted");
    }
    let fresh = tomus_client::Client::connect(&tc.addr(), Default::default())
        .await
        .unwrap();
    let blob = fresh.open_blob(hidden.id()).await.unwrap();
    let read = blob
        .read(0, hidden_data.len() as u64, Some(v))
        .await
        .unwrap();
    assert!(read == hidden_data, "blob {} reads back wrong", hidden.id());
    assert_eq!(
        progress.lock().unwrap().gc_nodes,
        0,
        "nodes of live blobs were counted as collected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creation_under_fast_collection_loses_nothing() {
    let tc = TestCluster::start_with(4, |spec: &mut ClusterSpec| {
        spec.heartbeat_ms = 200;
        let mut args = common::fast_maintenance(2000);
        // As fast as passes and audits go: every pass is a chance to see a listing out of
        // id order.
        args[3] = "20".into();
        args[7] = "100".into();
        spec.manager_args = args;
    });
    let client = tc.client().await;
    let written: Arc<Mutex<HashMap<u64, (u64, u64)>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs(8);
    let workers: Vec<_> = (0..16u64)
        .map(|w| {
            let client = client.clone();
            let written = written.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    let blob = client.create_blob(CHUNK, 1).await.unwrap();
                    let seed = w << 32 | n;
                    let len = 1000 + (seed % 3) * CHUNK;
                    let data = pattern::generate(seed, len as usize);
                    let v = blob.write(0, &data).await.unwrap();
                    assert_eq!(blob.append(&data[..100]).await.unwrap().1, len);
                    written.lock().unwrap().insert(blob.id(), (seed, v));
                    n += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    // Several more passes over everything written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = written.lock().unwrap().clone();
    assert!(written.len() > 100, "only {} blobs written", written.len());
    let fresh = tomus_client::Client::connect(&tc.addr(), Default::default())
        .await
        .unwrap();
    let mut lost = Vec::new();
    for (id, (seed, v)) in &written {
        let blob = fresh.open_blob(*id).await.unwrap();
        let len = 1000 + (seed % 3) * CHUNK;
        let mut expect = pattern::generate(*seed, len as usize);
        expect.extend_from_within(..100);
        match blob.read(0, len + 100, None).await {
            Ok(data) if data == expect => {}
            Ok(_) => lost.push(format!("blob {id}: wrong content")),
            Err(e) => lost.push(format!("blob {id}: {e}")),
        }
        // The first version too: nothing expires under the default retention.
        if let Err(e) = blob.read(0, len, Some(*v)).await {
            lost.push(format!("blob {id} version {v}: {e}"));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} blobs lost data: {:?}",
        lost.len(),
        written.len(),
        &lost[..lost.len().min(5)]
    );
}

/// Fast passes, and no audit after the one at startup: what happens must come from the
/// change log and the ledger.
fn without_audits(spec: &mut ClusterSpec) {
    spec.heartbeat_ms = 200;
    let mut args = common::fast_maintenance(4000);
    args[7] = "3600000".into();
    spec.manager_args = args;
}

async fn status(client: &tomus_client::Client) -> tomus_wire::ClusterStatus {
    client
        .manager_call(tomus_wire::manager::GetStatus {})
        .await
        .unwrap()
}

/// Chunks live providers hold, by their own listings.
async fn stored_chunks(client: &tomus_client::Client) -> usize {
    let pool = Pool::new(RpcConfig::default());
    let mut n = 0;
    for p in client.providers().await.unwrap().iter().filter(|p| p.alive) {
        let req = tomus_wire::provider::ListChunks {
            start_after: None,
            limit: 10_000,
        };
        n += pool.call(&p.addr, req).await.unwrap().entries.len();
    }
    n
}

/// Sets `blob`'s retention to its latest version only: the others expire.
async fn keep_last_one(client: &tomus_client::Client, blob: &tomus_client::Blob) {
    client
        .manager_call(tomus_wire::manager::SetRetention {
            blob: blob.id(),
            retention: tomus_wire::Retention::KeepLast(1),
        })
        .await
        .unwrap();
}

async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_comes_back_from_the_ledger_without_a_scan() {
    let tc = TestCluster::start_with(2, without_audits);
    let client = tc.client().await;
    wait_for("the startup audit", || async {
        status(&client).await.maintenance.audits == 1
    })
    .await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let mut last = Vec::new();
    for i in 0..5u64 {
        last = pattern::generate(30 + i, 3 * CHUNK as usize);
        blob.write(0, &last).await.unwrap();
    }
    // A copy made of metadata only shares the chunks of the latest version.
    let copy = client.create_blob(CHUNK, 1).await.unwrap();
    let v = blob.latest().await.unwrap();
    let source = tomus_client::Extent {
        blob: blob.clone(),
        version: v,
        offset: 0,
        len: last.len() as u64,
    };
    copy.compose(&[source], &Default::default()).await.unwrap();
    wait_for("every chunk stored", || async {
        stored_chunks(&client).await == 15
    })
    .await;

    keep_last_one(&client, &blob).await;
    // Four expired versions' chunks go; the latest's stay (the copy shares them).
    wait_for("the expired versions' chunks to go", || async {
        stored_chunks(&client).await == 3
    })
    .await;
    // The blob's file gone too: its chunks stay while the copy refers to them.
    let ns = client.namespace();
    let (_, file) = ns
        .create(
            "data/f",
            tomus_client::CreateOptions {
                chunk_size: CHUNK,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    file.write(0, &pattern::generate(40, 2 * CHUNK as usize))
        .await
        .unwrap();
    wait_for("the file's chunks", || async {
        stored_chunks(&client).await == 5
    })
    .await;
    ns.delete("data/f", false).await.unwrap();
    wait_for("the deleted file's chunks to go", || async {
        stored_chunks(&client).await == 3
    })
    .await;
    assert_eq!(copy.read(0, last.len() as u64, None).await.unwrap(), last);
    assert_eq!(blob.read(0, last.len() as u64, None).await.unwrap(), last);
    // Five writes, the copy and the file's write were counted; the collections reported.
    wait_for("the collection report", || async {
        let m = status(&client).await.maintenance;
        m.versions_counted == 7 && m.gc_chunks == 14 && m.gc_nodes > 0 && m.unreferenced_chunks == 0
    })
    .await;
    let m = status(&client).await.maintenance;
    assert_eq!(m.audits, 1, "an audit ran: {m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_provider_is_repaired_from_the_ledger_without_a_scan() {
    let mut tc = TestCluster::start_with(3, without_audits);
    let client = tc.client().await;
    wait_for("the startup audit", || async {
        status(&client).await.maintenance.audits == 1
    })
    .await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(50, 8 * CHUNK as usize);
    let v = blob.write(0, &data).await.unwrap();
    wait_for("the version counted", || async {
        status(&client).await.maintenance.ledger_chunks >= 8
    })
    .await;
    tc.cluster.kill_provider(0);
    wait_for("repair", || async {
        let s = status(&client).await;
        let m = &s.maintenance;
        s.providers.iter().any(|p| !p.alive)
            && m.repaired_chunks > 0
            && m.under_replicated_chunks == 0
            && m.under_replicated_nodes == 0
    })
    .await;
    // Every chunk has two copies on the two providers left.
    let alive = client.providers().await.unwrap();
    let pool = Pool::new(RpcConfig::default());
    let mut copies = 0;
    for p in alive.iter().filter(|p| p.alive) {
        let req = tomus_wire::provider::ListChunks {
            start_after: None,
            limit: 10_000,
        };
        copies += pool.call(&p.addr, req).await.unwrap().entries.len();
    }
    assert_eq!(copies, 16);
    let fresh = tomus_client::Client::connect(&tc.addr(), Default::default())
        .await
        .unwrap();
    let again = fresh.open_blob(blob.id()).await.unwrap();
    assert!(again.read(0, data.len() as u64, Some(v)).await.unwrap() == data);
    assert_eq!(status(&client).await.maintenance.audits, 1);
}

/// Clears the immutable attribute of a chunk file when dropped, so the test's scratch
/// directory can go even when the test failed halfway.
struct Immutable(std::path::PathBuf);

impl Immutable {
    /// Makes `path` immutable: unlinking it fails, for root too, as on a failing disk. Needs
    /// root (as the network-namespace tests do) and a file system with the attribute (ext4).
    fn set(path: std::path::PathBuf) -> Self {
        chattr("+i", &path);
        Immutable(path)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// Runs `chattr FLAG PATH`; the test fails if it cannot.
fn chattr(flag: &str, path: &std::path::Path) {
    let out = std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .output()
        .expect("chattr (e2fsprogs) runs");
    assert!(
        out.status.success(),
        "chattr {flag} {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A chunk one provider cannot delete holds back only itself: the other unreferenced chunks,
/// on that provider and the other, are collected, it stays counted as unreferenced, and it
/// goes once it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_a_provider_cannot_delete_holds_back_only_itself() {
    // Above the small-chunk log's limit: every chunk is a file of its own.
    const FILE_CHUNK: u64 = 128 << 10;
    let tc = TestCluster::start_with(2, without_audits);
    let client = tc.client().await;
    wait_for("the startup audit", || async {
        status(&client).await.maintenance.audits == 1
    })
    .await;
    let blob = client.create_blob(FILE_CHUNK, 1).await.unwrap();
    let mut versions = Vec::new();
    let mut last = Vec::new();
    for i in 0..4u64 {
        last = pattern::generate(60 + i, 3 * FILE_CHUNK as usize);
        versions.push(blob.write(0, &last).await.unwrap());
    }
    wait_for("every chunk stored", || async {
        stored_chunks(&client).await == 12
    })
    .await;
    let first = blob.stat(Some(versions[0])).await.unwrap();
    let stuck = match &blob.segments_of(&first).await.unwrap()[0] {
        tomus_metadata::Segment::Data(piece) => piece.chunk.to_string(),
        other => panic!("version 1 starts with {other:?}"),
    };
    let file = (0..2)
        .flat_map(|i| common::chunk_files(&tc.cluster.provider_dir(i)))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == stuck))
        .unwrap_or_else(|| panic!("no provider holds chunk {stuck} as a file"));
    let guard = Immutable::set(file.clone());

    keep_last_one(&client, &blob).await;
    // Nine chunks of the three expired versions: all but the stuck one go.
    wait_for("the other expired chunks to go", || async {
        let m = status(&client).await.maintenance;
        m.gc_chunks == 8 && m.unreferenced_chunks == 1
    })
    .await;
    assert_eq!(stored_chunks(&client).await, 4);
    assert!(file.exists(), "the immutable chunk file went");

    drop(guard);
    wait_for("the stuck chunk to go once it can", || async {
        let m = status(&client).await.maintenance;
        m.gc_chunks == 9 && m.unreferenced_chunks == 0
    })
    .await;
    assert_eq!(stored_chunks(&client).await, 3);
    assert!(!file.exists(), "chunk {stuck} is still stored");
    assert_eq!(blob.read(0, last.len() as u64, None).await.unwrap(), last);
}
