//! Full disks against real processes: providers whose data directories are on small tmpfs
//! mounts fill up under large writes and small appends. Writes go on where there is room,
//! a cluster with no room left refuses writes with `NoSpace`, what was acknowledged reads back
//! in every case, and space given back by a deletion takes writes again. Mounting needs root,
//! like the network-namespace tests.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tomus_cli::embedded::{ClusterSpec, Exited};
use tomus_cli::pattern;
use tomus_client::Client;
use tomus_wire::ErrorKind;

use common::TestCluster;

/// A tmpfs of a fixed size, mounted for one test and unmounted (and removed) after it.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(bytes: u64) -> Tmpfs {
        let dir = tomus_cli::scratch_dir("full-disk");
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a {bytes}-byte tmpfs on {} failed (these tests need root): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a provider still running (a failed test) keeps files open.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A cluster of `providers` whose first `on_tmpfs` keep their data on tmpfs mounts of
/// `bytes` each (their data directories are links to the mounts).
fn cluster_with_small_disks(
    providers: usize,
    on_tmpfs: usize,
    bytes: u64,
    tweak: impl FnOnce(&mut ClusterSpec),
) -> (Vec<Tmpfs>, TestCluster) {
    let disks: Vec<Tmpfs> = (0..on_tmpfs).map(|_| Tmpfs::mount(bytes)).collect();
    let tc = TestCluster::start_with(providers, |spec| {
        // Beats well inside the fault tests' 1.5 s provider timeout, so that a loaded
        // machine's late heartbeat does not count a provider down mid-test.
        spec.heartbeat_ms = 200;
        std::fs::create_dir_all(&spec.data_dir).unwrap();
        for (i, disk) in disks.iter().enumerate() {
            let link = spec.data_dir.join(format!("provider-{i}"));
            std::os::unix::fs::symlink(disk.path(), link).unwrap();
        }
        tweak(spec);
    });
    (disks, tc)
}

/// Fills the file system holding `dir` with one file, up to its last byte.
fn fill(dir: &Path) {
    let mut file = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 64 << 10];
    loop {
        if let Err(e) = file.write_all(&block) {
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::StorageFull,
                "filling {}: {e}",
                dir.display()
            );
            break;
        }
    }
    // A few bytes at a time, up to the last one.
    while file.write_all(&[0u8; 512]).is_ok() {}
}

async fn free_of(client: &Client, addr: &str) -> u64 {
    let list = client.providers().await.unwrap();
    list.iter().find(|p| p.addr == addr).unwrap().free
}

/// One provider of three finds its disk full (another tenant of the disk filled it) before
/// the manager hears of it: large writes and small appends placed on it are still
/// acknowledged (their chunks and metadata go to the providers with room), every byte reads
/// back, and the full provider stays up, serving what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_when_one_providers_disk_is_full() {
    // Heartbeats every 3 s: the manager places on the full provider until the next one.
    let (disks, mut tc) = cluster_with_small_disks(3, 3, 64 << 20, |spec| spec.heartbeat_ms = 3000);
    let client = tc.client().await;
    let full = tc.cluster.provider_addr(0).to_string();
    let large = client.create_blob(256 << 10, 2).await.unwrap();
    let small = client.create_blob(64 << 10, 2).await.unwrap();
    let early = pattern::generate(1, 1 << 20);
    large.append(&early).await.unwrap();
    fill(disks[0].path());

    let (mut large_model, mut small_model) = (early, Vec::new());
    for i in 0..10u64 {
        let data = pattern::generate(10 + i, (1 << 20) + 4096 * i as usize);
        large
            .append(&data)
            .await
            .unwrap_or_else(|e| panic!("large append {i}: {e}"));
        large_model.extend_from_slice(&data);
        for j in 0..40u64 {
            let data = pattern::generate(1000 + i * 40 + j, 4096);
            small
                .append(&data)
                .await
                .unwrap_or_else(|e| panic!("small append {i}.{j}: {e}"));
            small_model.extend_from_slice(&data);
        }
    }
    let len = large_model.len() as u64;
    assert_eq!(large.read(0, len, None).await.unwrap(), large_model);
    let len = small_model.len() as u64;
    assert_eq!(small.read(0, len, None).await.unwrap(), small_model);

    // The full provider is still up and says it is full.
    let deadline = Instant::now() + Duration::from_secs(10);
    while free_of(&client, &full).await >= 64 << 10 {
        assert!(
            Instant::now() < deadline,
            "provider 0 never reported its disk full"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let p = client.providers().await.unwrap();
    assert!(p.iter().all(|p| p.alive), "{p:?}");
    assert!(tc.cluster.is_running(0));

    // Its logs took no torn record: restarted with room again, it opens them and is up
    // with what it held before its disk filled.
    let list = client.providers().await.unwrap();
    let held = list.iter().find(|p| p.addr == full).unwrap().chunks;
    tc.cluster.kill_provider(0);
    std::fs::remove_file(disks[0].path().join("filler")).unwrap();
    tc.cluster.start_provider(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = client.providers().await.unwrap();
        let p = list.iter().find(|p| p.addr == full).unwrap();
        if p.alive && p.free > 1 << 20 {
            assert!(
                p.chunks >= held,
                "{} chunks after the restart, {held} before",
                p.chunks
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "provider 0 did not come back: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A fresh client (no cache of what it wrote) reads the same bytes.
    let again = tc.client().await;
    for (id, model) in [(large.id(), &large_model), (small.id(), &small_model)] {
        let blob = again.open_blob(id).await.unwrap();
        let read = blob.read(0, model.len() as u64, None).await.unwrap();
        assert!(read == *model, "blob {id} read back differs");
    }
}

/// Every provider's disk is full: a write is refused with `NoSpace` (exit status 7 from the
/// CLI) and changes nothing; what was written before reads back; once a deleted blob's space
/// is collected, writes are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_out_of_space_refuses_writes_and_takes_them_again_after_a_deletion() {
    let (_disks, tc) = cluster_with_small_disks(2, 2, 8 << 20, |spec| {
        spec.manager_args = common::fast_maintenance(500);
    });
    let client = tc.client().await;

    let keep = client.create_blob(256 << 10, 1).await.unwrap();
    let kept = pattern::generate(1, 2 << 20);
    keep.append(&kept).await.unwrap();
    let filler = client.create_blob(256 << 10, 1).await.unwrap();
    let mut written = 0u64;
    let refused = loop {
        let data = pattern::generate(2 + written, 1 << 20);
        match filler.append(&data).await {
            Ok(_) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 64, "64 MiB fitted on two 8 MiB disks");
    };
    assert_eq!(refused.kind, ErrorKind::NoSpace, "{refused}");
    assert!(written >= 4, "only {written} MiB fitted: {refused}");
    let size = filler.size(None).await.unwrap();
    assert_eq!(size, written << 20, "the refused write changed the blob");
    assert_eq!(keep.read(0, kept.len() as u64, None).await.unwrap(), kept);

    let local = tc.dir.join("more.bin");
    std::fs::write(&local, pattern::generate(3, 1 << 20)).unwrap();
    let out = common::tomus(&tc.addr(), &["fs", "put", local.to_str().unwrap(), "/more"]);
    assert_eq!(out.status.code(), Some(7), "{}", common::stderr(&out));

    client.delete_blob(filler.id()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let more = pattern::generate(99, 2 << 20);
    loop {
        match keep.append(&more).await {
            Ok(_) => break,
            Err(e) if e.kind == ErrorKind::NoSpace => {
                assert!(Instant::now() < deadline, "no space came back: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut model = kept;
    model.extend_from_slice(&more);
    assert_eq!(keep.read(0, model.len() as u64, None).await.unwrap(), model);
}

/// The only provider's disk fills behind the manager's back, refuses a write, and gets its
/// space back at once: the next write is taken, data and metadata, although the client saw
/// the provider refuse data for want of space a moment before (it keeps such providers out
/// of new writes only while others can take them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_space_comes_back_takes_the_next_write_at_once() {
    // Heartbeats every 3 s: the manager goes on placing on the provider it thinks has room.
    let (disks, tc) = cluster_with_small_disks(1, 1, 16 << 20, |spec| spec.heartbeat_ms = 3000);
    let client = tc.client().await;
    let blob = client.create_blob(256 << 10, 1).await.unwrap();
    let first = pattern::generate(1, 1 << 20);
    blob.append(&first).await.unwrap();

    fill(disks[0].path());
    let refused = blob
        .append(&pattern::generate(2, 1 << 20))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::NoSpace, "{refused}");
    std::fs::remove_file(disks[0].path().join("filler")).unwrap();

    let second = pattern::generate(3, 1 << 20);
    blob.append(&second)
        .await
        .unwrap_or_else(|e| panic!("the write after the space came back: {e}"));
    let mut model = first;
    model.extend_from_slice(&second);
    assert_eq!(blob.size(None).await.unwrap(), model.len() as u64);
    assert_eq!(blob.read(0, model.len() as u64, None).await.unwrap(), model);
}

/// A cluster of `providers` whose manager keeps its state on a tmpfs of `bytes`.
fn cluster_with_a_small_manager_disk(
    providers: usize,
    bytes: u64,
    manager_args: &[&str],
) -> (Tmpfs, TestCluster) {
    let disk = Tmpfs::mount(bytes);
    let tc = TestCluster::start_with(providers, |spec| {
        // Beats well inside the fault tests' 1.5 s provider timeout, so that a loaded
        // machine's late heartbeat does not count a provider down mid-test.
        spec.heartbeat_ms = 200;
        std::fs::create_dir_all(&spec.data_dir).unwrap();
        std::os::unix::fs::symlink(disk.path(), spec.data_dir.join("manager")).unwrap();
        spec.manager_args = manager_args.iter().map(|a| a.to_string()).collect();
    });
    (disk, tc)
}

/// Appends until one is refused; returns what was acknowledged and the refusal.
async fn append_until_refused(blob: &tomus_client::Blob, model: &mut Vec<u8>) -> tomus_wire::Error {
    for i in 0..1000u64 {
        let data = pattern::generate(500 + i, 100_000);
        match blob.append(&data).await {
            Ok(_) => model.extend_from_slice(&data),
            Err(e) => return e,
        }
    }
    panic!("1000 appends taken on a full disk");
}

/// The manager's own disk runs low: under its reserve (`--min-free-space`) new writes and new
/// blobs are refused with `NoSpace` (exit status 7 from the CLI) while reads and deletions go
/// on, and writes are taken again as soon as space is back, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_its_disk_reserve_the_manager_refuses_new_writes_and_serves_reads() {
    let (disk, tc) = cluster_with_a_small_manager_disk(2, 32 << 20, &["--min-free-space", "8MiB"]);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 2).await.unwrap();
    let doomed = client.create_blob(64 << 10, 2).await.unwrap();
    let mut model = pattern::generate(1, 300_000);
    blob.append(&model).await.unwrap();

    // 4 MiB left: under the reserve.
    fill(disk.path());
    let filler = disk.path().join("filler");
    let len = std::fs::metadata(&filler).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len - (4 << 20))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // the manager's last look ages out

    let e = append_until_refused(&blob, &mut model).await;
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    assert!(e.message.contains("reserve"), "{e}");
    let e = client.create_blob(64 << 10, 2).await.err().unwrap();
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    let local = tc.dir.join("small.bin");
    std::fs::write(&local, b"hello").unwrap();
    let out = common::tomus(
        &tc.addr(),
        &["fs", "put", local.to_str().unwrap(), "/small"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("--min-free-space"),
        "{}",
        common::stderr(&out)
    );
    let status = common::json(common::tomus(&tc.addr(), &["status", "--json"]));
    let disk = &status["manager_disk"];
    assert_eq!(disk["min_free"].as_u64(), Some(8 << 20), "{disk}");
    assert!(disk["free"].as_u64().unwrap() < 8 << 20, "{disk}");
    let shown = String::from_utf8(common::ok(common::tomus(&tc.addr(), &["status"]))).unwrap();
    assert!(shown.contains("UNDER its reserve of 8.0 MiB"), "{shown}");

    let len = model.len() as u64;
    assert_eq!(blob.read(0, len, None).await.unwrap(), model);
    client.delete_blob(doomed.id()).await.unwrap();

    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let more = pattern::generate(2, 50_000);
    loop {
        match blob.append(&more).await {
            Ok(_) => break,
            Err(e) if e.kind == ErrorKind::NoSpace && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("writes not taken again: {e}"),
        }
    }
    model.extend_from_slice(&more);
    assert_eq!(blob.read(0, model.len() as u64, None).await.unwrap(), model);
}

/// The manager's disk fills to the last byte under a manager without a reserve: a write meets
/// the full disk in the manager's stores and is refused with `NoSpace`; the manager then ends
/// itself (its stores take nothing more until reopened) instead of refusing every write
/// forever, and once restarted with space it has every acknowledged write and takes new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_whose_disk_fills_ends_and_restarts_with_everything_acknowledged() {
    let (disk, mut tc) = cluster_with_a_small_manager_disk(2, 32 << 20, &["--min-free-space", "0"]);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 2).await.unwrap();
    let mut model = pattern::generate(1, 300_000);
    blob.append(&model).await.unwrap();

    fill(disk.path());
    let e = append_until_refused(&blob, &mut model).await;
    assert!(
        matches!(e.kind, ErrorKind::NoSpace | ErrorKind::Unavailable),
        "{e}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        // Its next use of the stores ends it; writes are what use them.
        let _ = blob.append(b"x").await;
        if let Some(exited) = tc.cluster.reap().into_iter().find_map(|e| match e {
            Exited::Manager(status) => Some(status),
            Exited::Provider(..) => None,
        }) {
            break exited;
        }
        assert!(
            Instant::now() < deadline,
            "the manager kept running on a wedged store"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        status.code(),
        Some(tomus_tables::EXIT_REOPEN_STORE),
        "{status}"
    );

    std::fs::remove_file(disk.path().join("filler")).unwrap();
    tc.cluster.start_manager().unwrap();
    let again = tc.client().await;
    let reopened = again.open_blob(blob.id()).await.unwrap();
    let size = reopened.size(None).await.unwrap();
    assert!(
        size >= model.len() as u64,
        "{size} bytes, {} acknowledged",
        model.len()
    );
    assert_eq!(
        reopened.read(0, model.len() as u64, None).await.unwrap(),
        model,
        "acknowledged appends lost"
    );
    let more = pattern::generate(3, 50_000);
    reopened.append(&more).await.unwrap();
}
