//! Data directories removed under running servers (a scratch cleanup's `rm -rf`, a wrong
//! `--data`), against real processes: nothing written into a removed directory is
//! acknowledged, a manager whose directory is gone refuses every change and keeps serving
//! reads, and providers do not join a manager started on an emptied directory. A provider
//! whose directory is removed is failed and repaired around: `fault_tolerance/repair.rs`.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::time::{Duration, Instant};

use tomus_cli::embedded::Exited;
use tomus_cli::pattern;
use tomus_metadata::ChunkId;
use tomus_wire::provider::PutSmallWrite;
use tomus_wire::{ErrorKind, Pool, RpcConfig};

use common::{chunk_files, json, ok, stderr, tomus, TestCluster};

const CHUNK: u64 = 64 << 10;

/// Small writes go to logs the provider holds open, which take writes and syncs even once
/// removed with their directory: a small write sent there right after an `rm -rf` must not
/// be acknowledged (with one copy, it would be lost with the directory). Appends made in that
/// window fail over and survive the provider's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_into_a_removed_data_directory_are_not_acknowledged() {
    let mut tc = TestCluster::start(2);
    let client = tc.client().await;
    let victim = tc.cluster.provider_addr(0).to_string();
    let pool = Pool::new(RpcConfig::default());
    let probe = pattern::generate(8, 4096);
    let small = |id: u128| PutSmallWrite {
        nodes: Vec::new(),
        id: ChunkId(id),
        crc: tomus_wire::checksum::crc32c(&probe),
    };
    // Its small-chunk log is open (a provider opens it at its first small write).
    pool.call_with_body(&victim, small(0xfa_0003), &probe)
        .await
        .unwrap();

    std::fs::remove_dir_all(tc.cluster.provider_dir(0)).unwrap();
    // Before its next heartbeat looks (once a second here).
    let e = pool
        .call_with_body(&victim, small(0xfa_0004), &probe)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("takes no data"), "{e}");

    // One copy of everything: what went to provider 0 would be lost with it. 8 runs of 64
    // versions, each run's metadata (and its small chunks) on one of the two providers.
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let mut model = Vec::new();
    for i in 0..512u64 {
        let data = pattern::generate(100 + i, 4096);
        blob.append(&data).await.unwrap();
        model.extend_from_slice(&data);
    }
    tc.cluster.kill_provider(0);
    let again = tc.client().await;
    let reopened = again.open_blob(blob.id()).await.unwrap();
    assert_eq!(
        reopened.read(0, model.len() as u64, None).await.unwrap(),
        model,
        "acknowledged appends lost with the removed directory"
    );
}

/// The manager's state directory emptied (a cleanup, a wrong `--data`) and the manager
/// started again on it: an empty manager that would find every chunk of its providers
/// unreferenced and collect it. The providers see another cluster, stop, and keep their
/// chunks; `tomus status` of the new manager lists none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_do_not_join_a_manager_started_on_an_emptied_directory() {
    let mut tc = TestCluster::start_with(2, |spec| {
        spec.heartbeat_ms = 200;
        spec.manager_args = common::fast_maintenance(4000);
    });
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    blob.write(0, &pattern::generate(9, 8 * CHUNK as usize))
        .await
        .unwrap();
    let files = |tc: &TestCluster| {
        (0..2)
            .map(|i| chunk_files(&tc.cluster.provider_dir(i)).len())
            .collect::<Vec<_>>()
    };
    let before = files(&tc);
    assert_eq!(before, [8, 8]);
    let cluster_of = |addr: &str| {
        let out = tomus(addr, &["--json", "status"]);
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        shown["cluster"].as_str().unwrap().to_string()
    };
    let cluster = cluster_of(&tc.addr());
    for i in 0..2 {
        let kept = std::fs::read_to_string(tc.cluster.provider_dir(i).join("cluster.id"));
        assert_eq!(kept.unwrap().trim(), cluster, "provider {i}");
    }

    tc.cluster.kill_manager();
    std::fs::remove_dir_all(tc.cluster.data_dir().join("manager")).unwrap();
    tc.cluster.start_manager().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stopped = Vec::new();
    while stopped.len() < 2 {
        for exited in tc.cluster.reap() {
            match exited {
                Exited::Provider(i, status) => {
                    assert!(!status.success(), "provider {i}: {status}");
                    stopped.push(i);
                }
                Exited::Manager(status) => panic!("the manager exited: {status}"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "providers {stopped:?} of 2 stopped; the others joined the new manager"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(tc.cluster.data_dir().join("logs/provider-0.log"))
        .unwrap_or_default();
    assert!(log.contains("belongs to cluster"), "{log}");
    assert_eq!(files(&tc), before, "chunks went");
    let status = tomus(&tc.addr(), &["--json", "status"]);
    let shown: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(shown["providers"], serde_json::json!([]), "{shown}");
    assert_ne!(
        cluster_of(&tc.addr()),
        cluster,
        "the emptied manager kept the cluster id"
    );
}

/// The manager's data directory removed under the running manager: its stores' open files
/// would go on taking commits that are lost with the process, so a rename or a deletion would
/// be acknowledged and then undone. Every change is refused with the reason (exit status 4)
/// and changes nothing; reads go on; `tomus status` says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_whose_data_directory_is_removed_refuses_changes_and_serves_reads() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let data = pattern::generate(11, 300_000);
    let local = tc.dir.join("kept.bin");
    std::fs::write(&local, &data).unwrap();
    let local = local.to_str().unwrap();
    ok(tomus(&addr, &["fs", "put", local, "/kept"]));
    ok(tomus(&addr, &["fs", "mkdir", "/dir"]));

    std::fs::remove_dir_all(tc.cluster.data_dir().join("manager")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // the manager's last look ages out

    for change in [
        vec!["fs", "mv", "/kept", "/moved"],
        vec!["fs", "rm", "/kept"],
        vec!["fs", "rm", "-r", "/dir"],
        vec!["fs", "put", local, "/kept"],
        vec!["fs", "put", local, "/new"],
        vec!["fs", "retention", "/dir", "--keep-last", "1"],
    ] {
        let out = tomus(&addr, &change);
        assert_eq!(out.status.code(), Some(4), "{change:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("was removed under the running manager"),
            "{change:?}: {}",
            stderr(&out)
        );
    }
    let client = tc.client().await;
    let e = client.create_blob(CHUNK, 2).await.err().unwrap();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");

    // Nothing changed, and reads go on.
    assert_eq!(ok(tomus(&addr, &["fs", "cat", "/kept"])), data);
    let listed = json(tomus(&addr, &["--json", "fs", "ls", "/"]));
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/dir", "/kept"], "{listed}");
    let versions = json(tomus(&addr, &["--json", "fs", "versions", "/kept"]));
    assert_eq!(
        versions["versions"].as_array().unwrap().len(),
        1,
        "{versions}"
    );

    let status = json(tomus(&addr, &["--json", "status"]));
    let fault = status["manager_disk"]["fault"].as_str().unwrap_or_default();
    assert!(
        fault.contains("was removed under the running manager"),
        "{status}"
    );
    let shown = String::from_utf8(ok(tomus(&addr, &["status"]))).unwrap();
    assert!(shown.contains("manager disk: FAILED: "), "{shown}");
}
