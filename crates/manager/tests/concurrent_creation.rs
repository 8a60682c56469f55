//! New files created by many writers at once: their creations are committed in batches
//! (`namespace/creation.rs`), with the outcomes one creation at a time under the namespace
//! lock would give: distinct files get distinct blobs, writers of one path share its blob,
//! exclusive creators of one path all fail but one, other changes interleave without
//! deadlock, and every acknowledged creation survives a restart.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::thread;

use tomus_manager::namespace::Namespace;
use tomus_manager::store::Store;
use tomus_manager::VersionManager;
use tomus_wire::ErrorKind;

use common::TempDir;

const WRITERS: usize = 16;

fn open(dir: &Path) -> (Arc<VersionManager>, Arc<Namespace>) {
    let store = Arc::new(Store::open(dir).unwrap());
    let workers = tomus_worker::Workers::default();
    let versions = VersionManager::open(store.clone(), &workers).unwrap();
    let ns = Arc::new(Namespace::open(store, versions.clone()).unwrap());
    (versions, ns)
}

/// Runs `f(i)` on `WRITERS` threads at once; their results in order.
fn at_once<T: Send + 'static>(f: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let f = Arc::new(f);
    let barrier = Arc::new(std::sync::Barrier::new(WRITERS));
    let handles: Vec<_> = (0..WRITERS)
        .map(|i| {
            let (f, barrier) = (f.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn blob_of(ns: &Namespace, path: &str, exclusive: bool) -> tomus_wire::Result<u64> {
    let (e, _) = ns.create(path, 64 << 10, 1, exclusive, None)?;
    Ok(e.blob.unwrap().id)
}

#[tokio::test(flavor = "multi_thread")]
async fn many_writers_creating_at_once_get_what_one_at_a_time_would() {
    let dir = TempDir::new("concurrent-creation");
    let (_versions, ns) = open(dir.path());
    // Distinct files, 20 per writer: distinct blobs, every one acknowledged.
    let n = ns.clone();
    let blobs: Vec<Vec<u64>> = at_once(move |w| {
        (0..20)
            .map(|i| blob_of(&n, &format!("runs/w{w}/f{i}"), true).unwrap())
            .collect()
    });
    let all: Vec<u64> = blobs.iter().flatten().copied().collect();
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), WRITERS * 20);
    // One path, created by every writer: one blob, shared.
    let n = ns.clone();
    let shared = at_once(move |_| blob_of(&n, "runs/shared", false).unwrap());
    assert!(shared.iter().all(|b| *b == shared[0]), "{shared:?}");
    // One path, created exclusively by every writer: one succeeds.
    let n = ns.clone();
    let exclusive = at_once(move |_| blob_of(&n, "runs/mine", true));
    let won: Vec<_> = exclusive.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(won.len(), 1, "{exclusive:?}");
    for r in &exclusive {
        if let Err(e) = r {
            assert_eq!(e.kind, ErrorKind::AlreadyExists, "{e}");
        }
    }
    // Creations interleaved with directory changes: no deadlock, nothing lost.
    let n = ns.clone();
    let mixed = at_once(move |w| {
        for i in 0..10 {
            if w % 2 == 0 {
                blob_of(&n, &format!("mixed/w{w}/f{i}"), true).unwrap();
            } else {
                n.mkdir(&format!("mixed/d{w}/{i}"), true).unwrap();
            }
        }
        w
    });
    assert_eq!(mixed.len(), WRITERS);
    drop(ns);
    drop(_versions);
    // Acknowledged means committed: after a restart each path still has its blob.
    let (_versions, ns) = open(dir.path());
    for (w, files) in blobs.iter().enumerate() {
        for (i, blob) in files.iter().enumerate() {
            assert_eq!(
                blob_of(&ns, &format!("runs/w{w}/f{i}"), false).unwrap(),
                *blob
            );
        }
    }
    assert_eq!(blob_of(&ns, "runs/shared", false).unwrap(), shared[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_below_a_file_being_created_is_refused() {
    let dir = TempDir::new("creation-parent");
    let (_versions, ns) = open(dir.path());
    blob_of(&ns, "a/b", true).unwrap();
    let e = blob_of(&ns, "a/b/c", true).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotADirectory, "{e}");
}

/// Publishes a first version of `blob` (a one-byte append) as its writer would, without the
/// data: the manager only orders and records versions.
async fn publish_first(versions: &VersionManager, blob: u64) -> tomus_wire::Result<()> {
    let op = tomus_wire::WriteOp::Append { size: 1 };
    let a = versions
        .assign(blob, op, Default::default(), None, Default::default())
        .await?;
    versions.complete(blob, a.version).await.map(|_| ())
}

/// A file created at a path while a new file below that path is published: the publication
/// makes the path a directory, so the creation, checked before, must not then turn it into a
/// file (that left a file listed below a file, and the directory's record lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_creation_racing_a_publication_below_it_never_makes_a_file_a_parent() {
    let dir = TempDir::new("creation-publication");
    let (versions, ns) = open(dir.path());
    for round in 0..150 {
        let below = blob_of(&ns, &format!("r{round}/x/y"), true).unwrap();
        let (v, n) = (versions.clone(), ns.clone());
        let publish = tokio::spawn(async move { publish_first(&v, below).await });
        let creator = {
            let (v, n) = (versions.clone(), n.clone());
            tokio::spawn(async move {
                let path = format!("r{round}/x");
                let blob = tokio::task::spawn_blocking(move || blob_of(&n, &path, false))
                    .await
                    .unwrap()?;
                publish_first(&v, blob).await
            })
        };
        let (below_published, file_published) = (publish.await.unwrap(), creator.await.unwrap());
        let entries = ns.list(&format!("r{round}"), true, None, 100).unwrap();
        let kind = |p: &str| entries.iter().find(|e| e.path == p).map(|e| e.kind);
        let x = kind(&format!("r{round}/x"));
        let y = kind(&format!("r{round}/x/y"));
        match (x, y) {
            // The new file below won: x is its directory, and the file x was refused.
            (Some(tomus_wire::EntryKind::Dir), Some(tomus_wire::EntryKind::File)) => {
                assert!(
                    below_published.is_ok(),
                    "round {round}: {below_published:?}"
                );
                assert!(file_published.is_err(), "round {round}: x is a directory");
            }
            // The file x won: nothing was published below it.
            (Some(tomus_wire::EntryKind::File), None) => {
                assert!(file_published.is_ok(), "round {round}: {file_published:?}");
                assert!(below_published.is_err(), "round {round}: x is a file");
            }
            other => panic!("round {round}: x and x/y are {other:?}; listing: {entries:?}"),
        }
    }
}
