//! Failure paths and bad input against real processes: manager SIGKILL and restart, provider
//! restart, corrupt chunk files, unreachable servers, invalid requests, the cluster secret.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use tomus_cli::pattern;
use tomus_client::{Client, ClientOptions};
use tomus_wire::manager::{AbortVersion, Complete};
use tomus_wire::{ClusterSecret, ErrorKind, Pool, RpcConfig};

use common::{chunk_files, exe, TestCluster};
use tomus_cli::embedded::{ClusterSpec, EmbeddedCluster, Launcher};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_sigkill_and_restart_keeps_published_versions() {
    let mut tc = TestCluster::start(3);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let mut contents = Vec::new();
    let mut model = Vec::new();
    for i in 0..12u64 {
        let data = pattern::generate(i, 100_000 + i as usize * 777);
        if i % 2 == 0 {
            blob.append(&data).await.unwrap();
            model.extend_from_slice(&data);
        } else {
            let off = i * 5000;
            blob.write(off, &data).await.unwrap();
            let end = off as usize + data.len();
            model.resize(model.len().max(end), 0);
            model[off as usize..end].copy_from_slice(&data);
        }
        contents.push(model.clone());
    }
    // A version assigned but never completed when the manager dies.
    let pool = Pool::new(RpcConfig::default());
    let a = common::raw_assign(&pool, &tc.addr(), blob.id(), 10).await;
    assert_eq!(a.version, 13);
    tc.cluster.kill_manager();
    let down = client
        .open_blob(blob.id())
        .await
        .err()
        .expect("manager is down");
    assert_eq!(down.kind, ErrorKind::Unavailable);
    tc.cluster.start_manager().unwrap();

    let client = Client::connect(&tc.addr(), ClientOptions::default())
        .await
        .unwrap();
    let blob = client.open_blob(blob.id()).await.unwrap();
    assert_eq!(blob.latest().await.unwrap(), 12);
    for (i, want) in contents.iter().enumerate() {
        let v = i as u64 + 1;
        let got = blob.read(0, want.len() as u64, Some(v)).await.unwrap();
        assert!(got == *want, "version {v} after restart");
    }
    // Writing continues after the restart with a fresh version number.
    let v = blob.append(b"after restart").await.unwrap().0;
    assert!(
        v > 12,
        "new version {v} must not reuse a number handed out before the crash"
    );
    let size = contents.last().unwrap().len() as u64;
    assert_eq!(blob.read(size, 13, None).await.unwrap(), b"after restart");
    // Skipped numbers are reported as aborted, and reading them says so.
    let list = blob.versions().await.unwrap();
    assert_eq!(list.versions.len(), 13);
    assert_eq!(list.aborted, vec![(13, v)]);
    let e = blob.read(0, 1, Some(13)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::VersionAborted);
    // The writer of version 13 coming back late is told so.
    let late = Complete {
        blob: blob.id(),
        version: 13,
    };
    let e = pool.call(&tc.addr(), late).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::VersionAborted);
}

/// A read of a known version asks only the metadata DHT and the providers: with the manager
/// gone, versions this client read before (or learned through the namespace) still read,
/// anywhere in them; only the latest, which only the manager knows, cannot be found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_known_versions_do_not_need_the_manager() {
    let mut tc = TestCluster::start(3);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 2).await.unwrap();
    let first = pattern::generate(1, 1 << 20);
    let v1 = blob.write(0, &first).await.unwrap();
    let patch = pattern::generate(2, 100_000);
    let v2 = blob.write(300_000, &patch).await.unwrap();
    let mut second = first.clone();
    second[300_000..400_000].copy_from_slice(&patch);
    let ns = client.namespace();
    let (_, file) = ns.create("/data/f", Default::default()).await.unwrap();
    let fv = file.write(0, &patch).await.unwrap();
    // A reader that wrote nothing knows: v2 from a read, v1 from its record, the file's
    // version from the namespace.
    let reader = tc.client().await;
    let blob = reader.open_blob(blob.id()).await.unwrap();
    blob.read(0, 10, Some(v2)).await.unwrap();
    blob.stat(Some(v1)).await.unwrap();
    let (object, file) = reader.namespace().object("/data/f", None).await.unwrap();
    assert_eq!(object.version.version, fv);

    tc.cluster.kill_manager();
    for (v, content) in [(v1, &first), (v2, &second)] {
        for (off, len) in [(0, 1 << 20), (299_990, 20), (65_536, 131_072)] {
            let got = blob.read(off, len, Some(v)).await.unwrap();
            assert!(
                got == content[off as usize..(off + len) as usize],
                "v{v} {off}+{len}"
            );
        }
    }
    assert_eq!(file.read(0, 100_000, Some(fv)).await.unwrap(), patch);
    let e = blob.read(0, 10, None).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_restart_keeps_chunks_and_metadata() {
    let mut tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(16 << 10, 1).await.unwrap();
    let data = pattern::generate(7, 300_000);
    blob.write(0, &data).await.unwrap();
    let blob = sigkill_providers_and_reopen(&mut tc, 2, blob.id()).await;
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
}

/// SIGKILLs and restarts the cluster's `providers`, then opens `blob` with a new client.
async fn sigkill_providers_and_reopen(
    tc: &mut TestCluster,
    providers: usize,
    blob: u64,
) -> tomus_client::Blob {
    for i in 0..providers {
        tc.cluster.kill_provider(i);
        tc.cluster.start_provider(i).unwrap();
    }
    let fresh = Client::connect(&tc.addr(), ClientOptions::default())
        .await
        .unwrap();
    fresh.open_blob(blob).await.unwrap()
}

/// Small durable appends go to the providers' logs, which keep zeros written ahead of their
/// records: SIGKILLed providers come back with every acknowledged append, cut the zeros off,
/// and take appends again (twice, so appends after a restart survive the next one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_appends_survive_provider_sigkills() {
    let mut tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    // Every append's data and where it landed.
    let mut landed: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut seed = 0u64;
    for round in 0..2 {
        // 4 appenders × 80 appends × 4 KiB: over half of the 1 MiB of zeros each log
        // keeps ahead, so the logs refill them while appends go on.
        let tasks: Vec<_> = (0..4)
            .map(|t| {
                let blob = blob.clone();
                let first = seed + t * 1000;
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    for i in 0..80 {
                        let data = pattern::generate(first + i, 4096);
                        let (_, offset) = blob.append(&data).await.unwrap();
                        out.push((offset, data));
                    }
                    out
                })
            })
            .collect();
        for task in tasks {
            landed.extend(task.await.unwrap());
        }
        seed += 10_000;
        let reopened = sigkill_providers_and_reopen(&mut tc, 2, blob.id()).await;
        let size = 4096 * landed.len() as u64;
        let all = reopened.read(0, size, None).await.unwrap();
        assert_eq!(all.len() as u64, size, "round {round}");
        for (offset, data) in &landed {
            let at = *offset as usize;
            assert!(
                all[at..at + data.len()] == data[..],
                "round {round}: the append at {offset} came back different"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_typed_errors_and_changes_nothing() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let e = client.open_blob(4242).await.err().unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound);
    for bad in [0u64, 1000, 2048, 512 << 20, (4 << 20) + 1] {
        let e = client.create_blob(bad, 1).await.err().unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "chunk size {bad}");
    }
    let e = client.create_blob(4 << 10, 3).await.err().unwrap();
    assert_eq!(
        e.kind,
        ErrorKind::InvalidArgument,
        "replication above provider count"
    );

    let blob = client.create_blob(4 << 10, 1).await.unwrap();
    blob.write(0, b"0123456789").await.unwrap();
    assert_eq!(
        blob.append(b"").await.unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        blob.write(3, b"").await.unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    // The range's end is past the end, not its offset: the message says which.
    let e = blob.read(5, 6, None).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(e.to_string().contains("5..11 ends past the end"), "{e}");
    let e = blob.read(11, 1, None).await.unwrap_err();
    assert!(e.to_string().contains("offset 11 is past the end"), "{e}");
    assert_eq!(
        blob.read(u64::MAX, 2, None).await.unwrap_err().kind,
        ErrorKind::OutOfRange
    );
    assert_eq!(
        blob.read(0, 1, Some(2)).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    // The offset asked for is reported, not a saturated 2^64 - 1.
    let e = blob.write(u64::MAX - 3, b"overflow").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    let said = e.to_string();
    assert!(said.contains(&(u64::MAX - 3).to_string()), "{said}");
    assert!(!said.contains(&u64::MAX.to_string()), "{said}");
    // Nothing above changed the blob.
    assert_eq!(blob.latest().await.unwrap(), 1);
    assert_eq!(blob.read(0, 10, None).await.unwrap(), b"0123456789");
    // Version 0 is the empty blob.
    assert_eq!(blob.read(0, 0, Some(0)).await.unwrap(), b"");
    assert_eq!(
        blob.read(0, 1, Some(0)).await.unwrap_err().kind,
        ErrorKind::OutOfRange
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_chunk_file_is_a_checksum_error_not_wrong_bytes() {
    let tc = TestCluster::start(1);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let data = pattern::generate(9, 64 << 10);
    blob.write(0, &data).await.unwrap();
    let files = chunk_files(&tc.cluster.provider_dir(0));
    assert_eq!(files.len(), 1);
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0xff;
    std::fs::write(&files[0], &bytes).unwrap();
    let e = blob.read(0, data.len() as u64, None).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers_fail_fast() {
    let mut tc = TestCluster::start(1);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    blob.write(0, &pattern::generate(1, 1000)).await.unwrap();
    // Cache the tree first, then lose the only provider: the chunk read must fail, not hang.
    blob.read(0, 1000, None).await.unwrap();
    tc.cluster.kill_provider(0);
    let start = Instant::now();
    let e = blob.read(0, 1000, None).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    tc.cluster.kill_manager();
    let start = Instant::now();
    let e = blob.latest().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    let e = Client::connect("127.0.0.1:1", ClientOptions::default())
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Unavailable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_secret_is_required_off_loopback_and_checked() {
    // Refuses to listen on a non-loopback address without a secret. (The manager opens its
    // store first: a scratch directory, not a fixed path that would outlive the test.)
    let dir = tomus_cli::scratch_dir("secret");
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(exe())
        .args(["manager", "--data"])
        .arg(dir.join("refused"))
        .args(["--addr", "0.0.0.0:0"])
        .env_remove("TOMUS_CLUSTER_SECRET")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("cluster secret"));

    // A manager with a secret refuses clients without it or with the wrong one.
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "correct horse battery staple").unwrap();
    let mut child = Command::new(exe())
        .args(["manager", "--data"])
        .arg(dir.join("m"))
        .args(["--addr", "127.0.0.1:0", "--secret-file"])
        .arg(&secret_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();

    let e = Client::connect(&addr, ClientOptions::default())
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::AuthFailed, "{e}");
    let wrong = ClientOptions {
        secret: Some(ClusterSecret::new("not the right secret!").unwrap()),
        ..Default::default()
    };
    let e = Client::connect(&addr, wrong).await.err().unwrap();
    assert_eq!(e.kind, ErrorKind::AuthFailed, "{e}");
    let right = ClientOptions {
        secret: Some(ClusterSecret::new("correct horse battery staple").unwrap()),
        ..Default::default()
    };
    let client = Client::connect(&addr, right).await.unwrap();
    assert!(client.list_blobs().await.unwrap().is_empty());
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A writer that dies holding a version number blocks nobody for longer than its lease: its
/// version is aborted, the versions assigned behind it are committed again by their writers,
/// later appends close the gap, and the late writer is told its version was aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_writer_is_aborted_after_its_lease_and_blocks_nobody() {
    let tc = TestCluster::start_with(3, |s| s.writer_lease_ms = Some(1500));
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let head = pattern::generate(1, 100);
    blob.append(&head).await.unwrap();

    // The "dead" writer: gets a version for an append and never completes it.
    let pool = Pool::new(RpcConfig::default());
    let dead = common::raw_assign(&pool, &tc.addr(), blob.id(), 50).await;
    assert_eq!(dead.version, 2);

    let started = Instant::now();
    let writers = spawn_appenders(&blob, 6, 5, |w, seq| 1000 + (w * 7 + seq) as usize * 311);
    contiguous_after(&blob, &head, writers).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "writers were held for {:?}",
        started.elapsed()
    );

    let list = blob.versions().await.unwrap();
    assert!(
        list.aborted
            .iter()
            .any(|(from, to)| (*from..*to).contains(&2)),
        "version 2 listed as aborted: {:?}",
        list.aborted
    );
    assert_eq!(
        blob.stat(Some(2)).await.unwrap_err().kind,
        ErrorKind::VersionAborted
    );
    let complete = Complete {
        blob: blob.id(),
        version: dead.version,
    };
    let late = pool.call(&tc.addr(), complete).await.unwrap_err();
    assert_eq!(late.kind, ErrorKind::VersionAborted, "{late}");
    assert!(late.message.contains("lease"), "{late}");
}

/// A writer that cannot finish its version gives it up at once: the writers behind it go on
/// without waiting for the lease, and the given-up version reads as aborted by its writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_aborted_by_its_writer_releases_the_writers_behind_it_at_once() {
    // A lease far longer than the test: only the explicit abort can release the writers.
    let tc = TestCluster::start_with(2, |s| s.writer_lease_ms = Some(120_000));
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let head = pattern::generate(1, 300);
    blob.append(&head).await.unwrap();

    let pool = Pool::new(RpcConfig::default());
    let failed = common::raw_assign(&pool, &tc.addr(), blob.id(), 70).await;
    assert_eq!(failed.version, 2);

    let started = Instant::now();
    let writers = spawn_appenders(&blob, 4, 4, |w, seq| 500 + (w * 5 + seq) as usize * 97);
    // The writers are held behind version 2 until its writer gives it up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        writers.iter().all(|w| !w.is_finished()),
        "writers went past an unfinished version"
    );
    let abort = AbortVersion {
        blob: blob.id(),
        version: failed.version,
    };
    pool.call(&tc.addr(), abort.clone()).await.unwrap();
    let expect = contiguous_after(&blob, &head, writers).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "writers were held for {:?}",
        started.elapsed()
    );

    // Aborting again changes nothing; the late writer learns who gave its version up.
    pool.call(&tc.addr(), abort).await.unwrap();
    let complete = Complete {
        blob: blob.id(),
        version: failed.version,
    };
    let late = pool.call(&tc.addr(), complete).await.unwrap_err();
    assert_eq!(late.kind, ErrorKind::VersionAborted, "{late}");
    assert!(late.message.contains("aborted by its writer"), "{late}");
    assert_eq!(
        blob.stat(Some(2)).await.unwrap_err().kind,
        ErrorKind::VersionAborted
    );

    // A published version cannot be aborted, nor can one that was never assigned.
    let published = AbortVersion {
        blob: blob.id(),
        version: 1,
    };
    let e = pool.call(&tc.addr(), published).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    let future = AbortVersion {
        blob: blob.id(),
        version: 1000,
    };
    assert!(pool.call(&tc.addr(), future).await.is_err());
    assert_eq!(
        blob.read(0, expect.len() as u64, None).await.unwrap(),
        expect
    );
}

/// A small write's chunk lives with its version's metadata, on the version's ring owner; when
/// that owner dies, the small writes of the next versions (same owner: a run of versions
/// shares it) still succeed: the combined store fails, the version is aborted, and the write
/// is done the long way on live providers; every acknowledged write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_writes_survive_their_metadata_owner_dying() {
    let mut tc = TestCluster::start(3);
    let client = tc.client().await;
    let blob = client.create_blob(1 << 20, 1).await.unwrap();
    let mut expect = Vec::new();
    for seq in 0..4 {
        let data = pattern::generate(pattern::seed(9, seq), 4096);
        blob.append(&data).await.unwrap();
        expect.extend_from_slice(&data);
    }
    let used = blob.locations(0, expect.len() as u64, None).await.unwrap();
    let victim = (0..tc.cluster.provider_count())
        .find(|&i| {
            used[0]
                .providers
                .iter()
                .any(|a| a == tc.cluster.provider_addr(i))
        })
        .expect("the provider of the first append's chunk");
    // The chunk's provider holds the version's nodes too.
    let pool = Pool::new(RpcConfig::default());
    let keys = pool
        .call(
            tc.cluster.provider_addr(victim),
            tomus_wire::provider::ListNodes {
                start_after: None,
                limit: 10_000,
            },
        )
        .await
        .unwrap();
    assert!(
        keys.iter()
            .any(|k| k.blob == blob.id() && k.node.version == 1),
        "the first version's nodes are not beside its chunk"
    );
    tc.cluster.kill_provider(victim);
    for seq in 4..40 {
        let data = pattern::generate(pattern::seed(9, seq), 1000 + seq as usize * 50);
        let (_, off) = blob.append(&data).await.unwrap();
        assert_eq!(off, expect.len() as u64);
        expect.extend_from_slice(&data);
    }
    let from = 4 * 4096;
    assert_eq!(
        blob.read(from, expect.len() as u64 - from, None)
            .await
            .unwrap(),
        expect[from as usize..]
    );
    let list = blob.versions().await.unwrap();
    assert!(
        !list.aborted.is_empty(),
        "the write that met the dead provider aborted its version"
    );
}

/// A provider's heartbeat may miss a beat while its manager restarts (or stops just before
/// it) without that being news; a manager that stays away is warned about, once.
#[test]
fn a_missed_heartbeat_is_quiet_and_a_manager_that_stays_away_is_warned_about() {
    let mut tc = TestCluster::start_with(1, |spec| spec.heartbeat_ms = 1000);
    let log = tc.dir.join("logs").join("provider-0.log");
    let read_log = || std::fs::read_to_string(&log).unwrap();
    tc.cluster.kill_manager();
    tc.cluster.start_manager().unwrap();
    // Two beats after the restart: at most one of them missed the manager.
    std::thread::sleep(Duration::from_millis(2500));
    let text = read_log();
    assert!(!text.contains(" WARN "), "a restart warned:\n{text}");

    tc.cluster.kill_manager();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !read_log().contains("failed 3 times in a row") {
        assert!(
            Instant::now() < deadline,
            "no warning about a manager gone for good:\n{}",
            read_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let warnings = read_log().matches(" WARN ").count();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        read_log().matches(" WARN ").count(),
        warnings,
        "warned at every beat"
    );
}

/// The providers start side by side: one that cannot start fails the cluster's start, and the
/// manager and the providers that did start are ended with it, not left running.
#[test]
fn a_provider_that_cannot_start_fails_the_start_and_ends_the_others() {
    let dir = tomus_cli::scratch_dir("test");
    // Provider 2's directory is taken by a file: that provider cannot open its stores.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("provider-2"), b"not a directory").unwrap();
    let spec = ClusterSpec::new(&dir, 4);
    let err = EmbeddedCluster::start(&Launcher::binary(exe()), spec)
        .err()
        .expect("a cluster whose provider cannot start must not start");
    assert!(
        format!("{err:#}").contains("provider-2 did not start"),
        "{err:#}"
    );
    let ours = |pid: &str| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*dir.to_string_lossy()))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && ours(pid))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "servers left running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The (offset, version, data) of every append of one appender.
type Landed = Vec<(u64, u64, Vec<u8>)>;

/// `writers` tasks appending `appends` pieces each to `blob`, of `size(writer, seq)` bytes.
fn spawn_appenders(
    blob: &tomus_client::Blob,
    writers: u64,
    appends: u64,
    size: fn(u64, u64) -> usize,
) -> Vec<tokio::task::JoinHandle<Landed>> {
    (0..writers)
        .map(|w| {
            let blob = blob.clone();
            tokio::spawn(async move {
                let mut landed = Vec::new();
                for seq in 0..appends {
                    let data = pattern::generate(pattern::seed(w, seq), size(w, seq));
                    let (v, off) = blob.append(&data).await.unwrap();
                    landed.push((off, v, data));
                }
                landed
            })
        })
        .collect()
}

/// Waits for `writers` and checks that their appends follow `head` without gap or overlap and
/// read back; returns the blob's expected content.
async fn contiguous_after(
    blob: &tomus_client::Blob,
    head: &[u8],
    writers: Vec<tokio::task::JoinHandle<Landed>>,
) -> Vec<u8> {
    let mut landed = Vec::new();
    for w in writers {
        landed.extend(w.await.unwrap());
    }
    landed.sort_by_key(|(off, _, _)| *off);
    let mut expect = head.to_vec();
    for (off, v, data) in &landed {
        assert_eq!(
            *off,
            expect.len() as u64,
            "append of version {v} left a gap or overlap"
        );
        expect.extend_from_slice(data);
    }
    assert_eq!(
        blob.read(0, expect.len() as u64, None).await.unwrap(),
        expect
    );
    expect
}
