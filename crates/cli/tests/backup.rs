//! Backup and restore to a local directory (issue 14): points taken by the manager's backup
//! service across writes, overwrites, appends and deletes restore into fresh clusters exactly
//! (same blob ids, version numbers, bytes, policies; nothing later); a second point uploads
//! only what changed; a manager killed mid-point resumes it; `verify` names damaged objects.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tomus_client::{CommitOptions, CreateOptions, Replace};
use tomus_wire::{Retention, StorageClass};

use common::backup::{enable, held, on_disk, point_now, points, restore_and_read};
use common::{json, stderr, tomus, TestCluster};

const CHUNK: u64 = 256 << 10;

fn options() -> CreateOptions {
    CreateOptions {
        chunk_size: CHUNK,
        ..CreateOptions::default()
    }
}

/// A test's backup target, beside its cluster's directory. It outlives the cluster (a test
/// restores from it once the cluster is gone) and is removed when the test ends well, kept
/// with the cluster's for the post-mortem of a failed one.
struct TargetDir(PathBuf);

impl std::ops::Deref for TargetDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TargetDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn target_dir(tc: &TestCluster) -> (TargetDir, String) {
    let dir = tc.dir.with_extension("target");
    let url = format!("file://{}", dir.display());
    (TargetDir(dir), url)
}

/// Bytes of every file under `dir`, and of those under `dir/chunks`.
fn bytes_at(dir: &Path) -> (u64, u64) {
    fn walk(d: &Path, total: &mut u64, chunks: &mut u64, in_chunks: bool) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.is_dir() {
                let c = in_chunks || p.file_name().is_some_and(|n| n == "chunks");
                walk(&p, total, chunks, c);
            } else {
                let len = e.metadata().unwrap().len();
                *total += len;
                if in_chunks {
                    *chunks += len;
                }
            }
        }
    }
    let (mut t, mut c) = (0, 0);
    walk(dir, &mut t, &mut c, false);
    (t, c)
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_point_restores_exactly_and_nothing_later_leaks() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let (dir, url) = target_dir(&tc);
    let client = tc.client().await;
    let ns = client.namespace();
    enable(&addr, &url, &[]);

    // Point 1: two files, a blob of the blob API, a directory with a policy of its own.
    ns.mkdir("/docs", true).await.unwrap();
    ns.set_retention("/docs", Some(Retention::KeepLast(10)))
        .await
        .unwrap();
    let (_, a) = ns.create("/docs/a", options()).await.unwrap();
    a.replace(&data(1, 700_000)).await.unwrap();
    let (_, b) = ns.create("/b", options()).await.unwrap();
    b.replace(&data(2, 1000)).await.unwrap();
    let raw = client.create_blob(CHUNK, 1).await.unwrap();
    raw.append(&data(3, 300_000)).await.unwrap();
    // And a file and a blob in the memory storage class: they come back in it.
    let (_, in_memory) = ns
        .create_in("/docs/hot", options(), None, StorageClass::Memory)
        .await
        .unwrap();
    in_memory.replace(&data(11, 200_000)).await.unwrap();
    let raw_in_memory = client
        .create_blob_in(CHUNK, 1, StorageClass::Memory)
        .await
        .unwrap();
    raw_in_memory.append(&data(12, 1000)).await.unwrap();
    let mut expected = vec![held(&client).await];
    assert!(expected[0]["file:/docs/hot"].1.ends_with("in Memory"));
    let mut ids = vec![point_now(&addr)];

    // Point 2: an overwrite inside /docs/a, appends, a new file, a deleted file.
    a.write(100_000, &data(4, 50_000)).await.unwrap();
    b.append(&data(5, 400_000)).await.unwrap();
    b.append(&data(6, 10)).await.unwrap();
    raw.write(0, &data(7, 5)).await.unwrap();
    let (_, c) = ns.create("/c", options()).await.unwrap();
    c.replace(b"short lived").await.unwrap();
    let (_, d) = ns.create("/d", options()).await.unwrap();
    d.replace(b"deleted before point 2").await.unwrap();
    ns.delete("/d", false).await.unwrap();
    expected.push(held(&client).await);
    ids.push(point_now(&addr));

    // Point 3: /b keeps 3 versions (the default), so its oldest go; /c is deleted; /docs/a
    // is replaced by a shorter content; a rename.
    b.append(&data(8, 1)).await.unwrap();
    b.append(&data(9, 2)).await.unwrap();
    ns.delete("/c", false).await.unwrap();
    a.replace(&data(10, 1000)).await.unwrap();
    ns.rename("/b", "/docs/b").await.unwrap();
    ns.create("/e", options())
        .await
        .unwrap()
        .1
        .replace(&[])
        .await
        .unwrap();
    // The manager expires versions past a policy within a second: let it, so the point and
    // the restored cluster (which applies the policy at once) agree.
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.versions().await.unwrap().versions.len() > 3 {
        assert!(Instant::now() < deadline, "/b keeps more than 3 versions");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    expected.push(held(&client).await);
    ids.push(point_now(&addr));

    // Later writes are in no point.
    a.append(b"after the last point").await.unwrap();
    let listed = points(&addr, &url);
    for id in &ids {
        assert!(listed.contains(id), "{id} not in {listed:?}");
    }
    assert!(
        expected[2].contains_key("file:/docs/b"),
        "{:?}",
        expected[2].keys()
    );
    assert!(!expected[2].contains_key("file:/c"));
    drop(client);
    drop(tc); // the cluster is gone; only the target is left

    for (i, (id, want)) in ids.iter().zip(&expected).enumerate() {
        let restored = tomus_cli::scratch_dir(&format!("restored-{i}"));
        let got = restore_and_read(&url, id, &restored).await;
        assert_eq!(got, on_disk(want), "point {i} ({id}) restored differently");
        let _ = std::fs::remove_dir_all(&restored);
    }

    // Verify: intact, then one chunk object damaged and one gone, both named.
    let ok_report = json(tomus(
        "127.0.0.1:1",
        &["backup", "verify", "--target", &url, "--json"],
    ));
    assert_eq!(
        ok_report["missing"].as_array().unwrap().len(),
        0,
        "{ok_report}"
    );
    assert_eq!(
        ok_report["corrupt"].as_array().unwrap().len(),
        0,
        "{ok_report}"
    );
    // Two chunk objects the first point needs (its manifest names them).
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("points").join(format!("{}.json", ids[0]))).unwrap(),
    )
    .unwrap();
    let chunks: Vec<PathBuf> = manifest["chunks"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| dir.join(n.as_str().unwrap()))
        .collect();
    assert!(chunks.len() >= 2);
    let mut damaged = std::fs::read(&chunks[0]).unwrap();
    damaged[0] ^= 0xff;
    std::fs::write(&chunks[0], &damaged).unwrap();
    std::fs::remove_file(&chunks[1]).unwrap();
    let out = tomus(
        "127.0.0.1:1",
        &[
            "backup",
            "verify",
            ids[0].as_str(),
            "--target",
            &url,
            "--json",
        ],
    );
    assert!(!out.status.success(), "verify passed a damaged point");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().to_string();
    let text = report.to_string();
    assert!(text.contains(&name(&chunks[0])), "{report}");
    assert!(text.contains(&name(&chunks[1])), "{report}");
    assert!(stderr(&out).contains("corrupt"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_point_uploads_only_what_changed() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let (dir, url) = target_dir(&tc);
    let client = tc.client().await;
    let (_, big) = client
        .namespace()
        .create(
            "/big",
            CreateOptions {
                chunk_size: 4 << 20,
                ..CreateOptions::default()
            },
        )
        .await
        .unwrap();
    let mut w = big.writer();
    for i in 0..16u8 {
        w.write(&data(i, 4 << 20)).await.unwrap();
    }
    w.commit(Replace::default(), &CommitOptions::default())
        .await
        .unwrap();
    enable(&addr, &url, &[]);
    point_now(&addr);
    let (total1, chunks1) = bytes_at(&dir);
    assert!(
        chunks1 >= 64 << 20,
        "first point holds {chunks1} chunk bytes"
    );

    big.append(&data(99, 1 << 20)).await.unwrap();
    let second = point_now(&addr);
    let (total2, chunks2) = bytes_at(&dir);
    let new_chunks = chunks2 - chunks1;
    let new_total = total2 - total1;
    assert_eq!(
        new_chunks,
        1 << 20,
        "chunk bytes the append added at the target"
    );
    assert!(
        new_total < (1 << 20) + (256 << 10),
        "{new_total} bytes added in all"
    );
    let listed = json(tomus(&addr, &["backup", "list", "--json"]));
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["point"] == second.as_str())
        .unwrap();
    assert!(
        row["uploaded_bytes"].as_u64().unwrap() < (1 << 20) + (256 << 10),
        "{row}"
    );
    assert_eq!(
        row["logical_bytes"].as_u64().unwrap(),
        (64 << 20) + (64 << 20) + (1 << 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manager_killed_mid_point_resumes_it() {
    let mut tc = TestCluster::start(2);
    let addr = tc.addr();
    let (dir, url) = target_dir(&tc);
    let client = tc.client().await;
    let (_, f) = client.namespace().create("/f", options()).await.unwrap();
    let content = data(5, 24 << 20);
    f.replace(&content).await.unwrap();
    let want = held(&client).await;
    // 4 MiB/s: the point takes about 5 s (status every 2 s), time enough to kill the
    // manager in it.
    ok_enable_slow(&addr, &url);
    ok_now(&addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = json(tomus(&addr, &["backup", "status", "--json"]));
        if st["status"]["state"] == "running" && st["status"]["chunks_done"].as_u64().unwrap() >= 2
        {
            break;
        }
        assert!(Instant::now() < deadline, "the point never ran: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    tc.cluster.kill_manager();
    assert!(points(&addr, &url).is_empty(), "a partial point is listed");
    let partial = bytes_at(&dir).1;
    assert!(
        partial > 0 && partial < 24 << 20,
        "{partial} bytes before the kill"
    );
    tc.cluster.start_manager().unwrap();
    let addr = tc.addr();
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let listed = points(&addr, &url);
        if !listed.is_empty() {
            break listed;
        }
        assert!(
            Instant::now() < deadline,
            "the point never completed after the restart"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(listed.len(), 1);
    // Resumed: the chunks uploaded before the kill were not uploaded again.
    let m = json(tomus(&addr, &["backup", "list", "--json"]));
    let uploaded = m[0]["uploaded_bytes"].as_u64().unwrap();
    assert!(
        uploaded < (24 << 20) - partial + (1 << 20),
        "{uploaded} uploaded after {partial}"
    );
    drop(client);
    drop(tc);
    let restored = tomus_cli::scratch_dir("restored-kill");
    assert_eq!(restore_and_read(&url, &listed[0], &restored).await, want);
    let _ = std::fs::remove_dir_all(&restored);
}

fn ok_enable_slow(addr: &str, url: &str) {
    common::ok(tomus(
        addr,
        &["backup", "enable", "--target", url, "--rate", "4MiB/s"],
    ));
}

fn ok_now(addr: &str) {
    common::ok(tomus(addr, &["backup", "now"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn old_points_go_and_one_file_restores_into_a_running_cluster() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let (dir, url) = target_dir(&tc);
    let client = tc.client().await;
    let ns = client.namespace();
    enable(&addr, &url, &["--keep", "2"]);
    let (_, f) = ns.create("/f", options()).await.unwrap();
    f.replace(&data(1, 600_000)).await.unwrap();
    let first = point_now(&addr);
    let with_f = bytes_at(&dir).1;
    ns.delete("/f", false).await.unwrap();
    let (_, g) = ns
        .create_in("/g", options(), None, StorageClass::Memory)
        .await
        .unwrap();
    g.replace(&data(2, 1000)).await.unwrap();
    g.append(&data(3, 2000)).await.unwrap();
    point_now(&addr);
    let want = held(&client).await;
    let last = point_now(&addr);
    // Two points kept; /f's chunks were needed by the first only.
    let listed = points(&addr, &url);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(!listed.contains(&first));
    assert!(
        bytes_at(&dir).1 < with_f,
        "the first point's chunks are still there"
    );
    common::ok(tomus(&addr, &["backup", "verify"]));

    // One file back into the running cluster, under a new name, every version.
    common::ok(tomus(
        &addr,
        &[
            "backup", "restore", "--target", &url, "--at", &last, "--path", "/g", "--to", "/g2",
        ],
    ));
    let (_, g2) = ns.open("/g2").await.unwrap();
    // Into a running cluster, a file comes back in its storage class.
    let class = client.storage_class(g2.id()).await.unwrap();
    assert_eq!(class, StorageClass::Memory);
    let (old, new) = (g.versions().await.unwrap(), g2.versions().await.unwrap());
    assert_eq!(old.versions.len(), new.versions.len());
    for (a, b) in old.versions.iter().zip(&new.versions) {
        assert_eq!(
            g.read(0, a.size, Some(a.version)).await.unwrap(),
            g2.read(0, b.size, Some(b.version)).await.unwrap()
        );
    }
    drop(client);
    drop(tc);
    let restored = tomus_cli::scratch_dir("restored-keep");
    let got = restore_and_read(&url, &last, &restored).await;
    assert_eq!(got, on_disk(&want));
    assert!(want["file:/g"].1.ends_with("in Memory"));
    assert!(got["file:/g"].1.ends_with("in Disk"));
    let _ = std::fs::remove_dir_all(&restored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduled_point_waits_for_a_quiet_moment() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let (_target, url) = target_dir(&tc);
    let client = tc.client().await;
    let (_, busy) = client.namespace().create("/busy", options()).await.unwrap();
    enable(&addr, &url, &["--interval", "3s"]);
    let started = Instant::now();
    // Writes every 100 ms for 6 s: the point due at 3 s waits while they go on.
    let writer = tokio::spawn(async move {
        while started.elapsed() < Duration::from_secs(6) {
            busy.append(&data(1, 4096)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut waited = false;
    while started.elapsed() < Duration::from_secs(6) {
        let st = json(tomus(&addr, &["backup", "status", "--json"]));
        if st["status"]["state"] == "waiting for a quiet moment" {
            waited = true;
            assert!(points(&addr, &url).is_empty(), "a point taken while busy");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(waited, "the service never waited for a quiet moment");
    writer.await.unwrap();
    // It waits one interval at most, then goes.
    let deadline = Instant::now() + Duration::from_secs(20);
    while points(&addr, &url).is_empty() {
        assert!(Instant::now() < deadline, "no scheduled point");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A file renamed back and forth while points are taken is in every point exactly once:
/// the namespace is read as of one moment even when its listing takes many pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_moved_during_a_point_is_in_it_exactly_once() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let client = tc.client().await;
    let ns = client.namespace();
    let (dir, url) = target_dir(&tc);
    // More entries than one page of the listing (1,000), between the file's two places.
    let fill = futures::future::join_all((0..2_500).map(|i| {
        let ns = client.namespace();
        async move {
            let (_, f) = ns.create(&format!("/m/{i:05}"), options()).await.unwrap();
            f.replace(b"f").await.unwrap();
        }
    }));
    fill.await;
    let (_, moved) = ns.create("/a/moved", options()).await.unwrap();
    moved.replace(b"moving").await.unwrap();
    enable(&addr, &url, &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = tokio::spawn({
        let stop = stop.clone();
        let ns = client.namespace();
        async move {
            let mut at = "/a/moved";
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let to = if at == "/a/moved" {
                    "/z/moved"
                } else {
                    "/a/moved"
                };
                ns.rename(at, to).await.unwrap();
                at = to;
            }
        }
    });
    let ids: Vec<String> = (0..6).map(|_| point_now(&addr)).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    mover.await.unwrap();
    for id in ids {
        let text = std::fs::read(dir.join(format!("points/{id}.json"))).unwrap();
        let point: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let paths: Vec<&str> = point["namespace"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        let found: Vec<&&str> = paths.iter().filter(|p| p.ends_with("/moved")).collect();
        assert_eq!(found.len(), 1, "point {id}: {found:?}");
        assert_eq!(paths.iter().filter(|p| p.starts_with("m/")).count(), 2_500);
    }
}

/// Registered files (workflow outputs kept in place on their holders) are in points: their
/// bytes are uploaded once, and a restore brings them back as ordinary files, whole or one
/// at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registered_files_are_backed_up_and_restored_as_ordinary_files() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let client = tc.client().await;
    let (dir, url) = target_dir(&tc);
    let work = tc.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // More than one 8 MiB piece, one byte, and nothing.
    let files = [
        ("/wf/big.bin", data(9, (17 << 20) + 5)),
        ("/wf/one", data(10, 1)),
        ("/wf/empty", Vec::new()),
    ];
    for (i, (path, bytes)) in files.iter().enumerate() {
        let local = work.join(format!("f{i}"));
        std::fs::write(&local, bytes).unwrap();
        common::ok(tomus(
            &addr,
            &["fs", "register", local.to_str().unwrap(), path],
        ));
    }
    let (_, plain) = client
        .namespace()
        .create("/wf/plain", options())
        .await
        .unwrap();
    plain.replace(&data(11, 1000)).await.unwrap();
    enable(&addr, &url, &[]);
    let first = point_now(&addr);
    let second = point_now(&addr);
    let manifest = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(format!("points/{id}.json"))).unwrap())
            .unwrap()
    };
    let (m1, m2) = (manifest(&first), manifest(&second));
    assert!(m1["uploaded_bytes"].as_u64().unwrap() >= (17 << 20) + 1006);
    // Immutable: not read or uploaded again.
    assert!(
        m2["uploaded_bytes"].as_u64().unwrap() < 1 << 20,
        "{}",
        m2["uploaded_bytes"]
    );
    let big = m2["namespace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "wf/big.bin")
        .unwrap();
    assert_eq!(big["registered"]["pieces"].as_array().unwrap().len(), 3);

    // Whole: a fresh cluster has them as ordinary files.
    let restored = tomus_cli::scratch_dir("restored-registered");
    let held = restore_and_read(&url, &second, &restored).await;
    let _ = std::fs::remove_dir_all(&restored);
    for (path, bytes) in &files {
        let (_, _, versions) = &held[&format!("file:{path}")];
        let want = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            h.finish()
        };
        assert_eq!(versions.len(), 1, "{path}");
        assert_eq!(
            (versions[0].1, versions[0].2),
            (bytes.len() as u64, want),
            "{path}"
        );
    }
    assert!(held.contains_key("file:/wf/plain"));

    // One file, into the running cluster.
    common::ok(tomus(
        &addr,
        &[
            "backup",
            "restore",
            "--target",
            &url,
            "--at",
            &first,
            "--path",
            "/wf/big.bin",
            "--to",
            "/wf/big.restored",
        ],
    ));
    let (_, blob) = client.namespace().open("/wf/big.restored").await.unwrap();
    let got = blob.read(0, files[0].1.len() as u64, None).await.unwrap();
    assert!(got == files[0].1, "restored bytes differ");
    // `verify` checks the pieces like chunks.
    common::ok(tomus(&addr, &["backup", "verify"]));
}

/// With no holder able to give its bytes intact (here: its only copy changed on disk), a
/// registered file an earlier point holds is named again without being read (after a manager
/// restart too: from the newest point), and one never backed up is left out of the point,
/// said in it and in the status, instead of failing every point.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registered_file_no_holder_can_give_does_not_stop_points() {
    let mut tc = TestCluster::start(2);
    let addr = tc.addr();
    let (dir, url) = target_dir(&tc);
    let work = tc.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let p1 = tc.cluster.provider_addr(1).to_string();
    let register = |addr: &str, name: &str, bytes: &[u8]| {
        let local = work.join(name);
        std::fs::write(&local, bytes).unwrap();
        let path = format!("/wf/{name}");
        common::ok(tomus(
            addr,
            &[
                "fs",
                "register",
                local.to_str().unwrap(),
                &path,
                "--provider",
                &p1,
            ],
        ));
        common::row_with_checksum(addr, &path);
    };
    // Past the 15 MiB a holder keeps in memory, so it reads its copy from disk.
    const SIZE: usize = (16 << 20) + 1;
    register(&addr, "kept", &data(1, SIZE));
    enable(&addr, &url, &[]);
    let first = point_now(&addr);
    register(&addr, "fresh", &data(2, SIZE));
    // The holder's copies are hard links of these files: other bytes, the same sizes.
    std::fs::write(work.join("kept"), data(3, SIZE)).unwrap();
    std::fs::write(work.join("fresh"), data(4, SIZE)).unwrap();
    tc.cluster.kill_manager();
    tc.cluster.start_manager().unwrap();
    let addr = tc.addr();
    let second = point_now(&addr);
    let manifest = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(format!("points/{id}.json"))).unwrap())
            .unwrap()
    };
    let entry = |m: &serde_json::Value, path: &str| {
        m["namespace"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == path)
            .cloned()
    };
    let (m1, m2) = (manifest(&first), manifest(&second));
    assert_eq!(
        entry(&m2, "wf/kept").unwrap()["registered"],
        entry(&m1, "wf/kept").unwrap()["registered"]
    );
    assert!(
        entry(&m2, "wf/fresh").is_none(),
        "{:?}",
        entry(&m2, "wf/fresh")
    );
    let unreadable = m2["unreadable"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    assert!(unreadable[0].as_str().unwrap().starts_with("/wf/fresh: "));
    let st = json(tomus(&addr, &["backup", "status", "--json"]));
    let warning = st["status"]["warning"].as_str().unwrap_or_default();
    assert!(warning.contains("/wf/fresh"), "{st}");
}
