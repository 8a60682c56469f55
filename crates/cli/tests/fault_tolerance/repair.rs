//! Repair: a killed provider's copies, an emptied data directory's, corrupt copies found by
//! reads and by scrub, and an audit running while a dead provider's copies are made.

use super::*;

/// Waits until the manager lists the provider at `addr` down.
async fn wait_down(client: &Client, addr: &str) {
    wait_until(
        "the manager to mark the provider down",
        Duration::from_secs(10),
        || async { !provider_at(&client.providers().await.unwrap(), addr).alive },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_provider_is_detected_and_its_copies_recreated() {
    let mut tc = TestCluster::start_with(4, fast);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(1, 40 * CHUNK as usize + 123);
    blob.write(0, &data).await.unwrap();
    let victim = tc.cluster.provider_addr(1).to_string();
    let victim_id = provider_at(&client.providers().await.unwrap(), &victim).id;
    let before = holders(&client).await;
    let lost: usize = before.values().filter(|h| h.contains(&victim_id)).count();
    assert!(lost > 0, "provider 1 holds none of 41 chunks");

    let killed = Instant::now();
    tc.cluster.kill_provider(1);
    // Reads fail over at once, before the manager notices.
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    wait_down(&client, &victim).await;
    let detected = killed.elapsed();
    wait_repaired(&client, Duration::from_secs(30)).await;
    eprintln!(
        "detected after {detected:?}, repaired {lost} chunks after {:?}",
        killed.elapsed()
    );
    let after = holders(&client).await;
    assert_eq!(after.len(), before.len(), "every chunk still exists");
    for (chunk, h) in &after {
        assert!(h.len() >= 2, "chunk {chunk} has copies on {h:?} only");
        assert!(!h.contains(&victim_id));
    }
    let s = status(&client).await;
    assert!(s.maintenance.repaired_chunks >= lost as u64, "{s:?}");

    // The new copies are real: losing a second provider loses nothing either.
    tc.cluster.kill_provider(2);
    let c2 = tc.client().await;
    let b2 = c2.open_blob(blob.id()).await.unwrap();
    assert_eq!(b2.read(0, data.len() as u64, None).await.unwrap(), data);
}

/// A provider whose data directory is removed under it (a scratch cleanup's `rm -rf`) keeps
/// running but says so: the manager lists it failed with the reason instead of up and full,
/// places nothing on it, repair copies what it held, and `tomus status` names the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_loses_its_data_directory_is_failed_and_its_copies_recreated() {
    let tc = TestCluster::start_with(3, fast);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(5, 30 * CHUNK as usize + 9);
    blob.write(0, &data).await.unwrap();
    let victim = tc.cluster.provider_addr(0).to_string();
    let victim_id = provider_at(&client.providers().await.unwrap(), &victim).id;
    let before = holders(&client).await;
    assert!(
        before.values().any(|h| h.contains(&victim_id)),
        "provider 0 holds none of 31 chunks"
    );

    std::fs::remove_dir_all(tc.cluster.provider_dir(0)).unwrap();
    // At once, before its next heartbeat looks: a chunk sent to it meets the missing
    // directory, and the answer is one clients fail over on.
    let probe = pattern::generate(7, CHUNK as usize);
    let put = |id: u128| PutChunk {
        id: ChunkId(id),
        crc: tomus_wire::checksum::crc32c(&probe),
    };
    let pool = Pool::new(RpcConfig::default());
    let e = pool
        .call_with_body(&victim, put(0xfa_0001), &probe)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("takes no data"), "{e}");
    wait_until(
        "the manager to list provider 0 failed",
        Duration::from_secs(10),
        || async {
            provider_at(&client.providers().await.unwrap(), &victim)
                .fault
                .is_some()
        },
    )
    .await;
    let failed = provider_at(&client.providers().await.unwrap(), &victim);
    assert!(!failed.alive, "{failed:?}");
    let fault = failed.fault.unwrap();
    assert!(
        fault.contains("was removed under the running provider"),
        "{fault}"
    );
    assert!(tc.cluster.is_running(0), "the provider exited");
    // Once failed, it refuses data before trying to store it.
    let e = pool
        .call_with_body(&victim, put(0xfa_0002), &probe)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("takes no data"), "{e}");

    // Nothing is placed on it: a new blob's chunks all go to the two others.
    let other = client.create_blob(CHUNK, 2).await.unwrap();
    let more = pattern::generate(6, 8 * CHUNK as usize);
    other.write(0, &more).await.unwrap();
    assert_eq!(other.read(0, more.len() as u64, None).await.unwrap(), more);
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);

    wait_repaired(&client, Duration::from_secs(30)).await;
    let after = holders(&client).await;
    assert!(after.len() >= before.len(), "chunks vanished");
    for (chunk, h) in &after {
        assert!(h.len() >= 2, "chunk {chunk} has copies on {h:?} only");
        assert!(
            !h.contains(&victim_id),
            "chunk {chunk} listed on the failed provider"
        );
    }

    let out = tomus(&tc.addr(), &["status"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("failed"), "{shown}");
    assert!(
        shown.contains(&format!("provider {victim_id} ({victim}) failed: ")),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_copy_is_served_from_the_replica_and_scrub_repairs_it() {
    let tc = TestCluster::start_with(3, fast);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(2, 12 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();
    let files: Vec<_> = (0..3)
        .flat_map(|i| chunk_files(&tc.cluster.provider_dir(i)))
        .collect();
    assert_eq!(files.len(), 24, "12 chunks, 2 copies each");
    let flip = |path: &std::path::Path| {
        let mut bytes = std::fs::read(path).unwrap();
        let n = bytes.len();
        bytes[n - 1000] ^= 0x5a;
        std::fs::write(path, &bytes).unwrap();
    };
    // A corrupt copy a read may meet (it is then served from the replica and quarantined),
    // and one that only scrub finds.
    flip(&files[0]);
    for _ in 0..3 {
        assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    }
    let hidden = files
        .iter()
        .skip(1)
        .find(|f| f.file_name() != files[0].file_name())
        .unwrap();
    flip(hidden);
    let hidden_id = hidden.file_name().unwrap().to_string_lossy().into_owned();
    let out = tomus(&tc.addr(), &["--json", "scrub", "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let corrupt: Vec<String> = report
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["corrupt"].as_array().unwrap().clone())
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let checked: u64 = report
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["checked"].as_u64().unwrap())
        .sum();
    assert!(corrupt.contains(&hidden_id), "{report}");
    assert!(corrupt.len() <= 2, "{report}");
    assert!(checked >= 22, "{report}");
    wait_repaired(&client, Duration::from_secs(30)).await;
    let h = holders(&client).await;
    assert_eq!(h.len(), 12);
    assert!(h.values().all(|s| s.len() == 2), "{h:?}");
    let again = tomus(&tc.addr(), &["--json", "scrub"]);
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert!(
        report
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["corrupt"].as_array().unwrap().is_empty()),
        "{report}"
    );
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
}

/// The audit and the repair of a dead provider do not both copy one chunk: with repair
/// throttled, audits run while the dead provider's chunks are copied, and afterwards every
/// chunk has its two copies, not three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_during_repair_makes_no_extra_copies() {
    let mut tc = TestCluster::start_with(4, |spec| {
        spec.heartbeat_ms = 200;
        // A grace longer than the first write can take on a loaded machine (a 4 s grace
        // refused it once in CI with WriteExpired); garbage collection plays no part here.
        let mut args = common::fast_maintenance(60_000);
        let at = args.iter().position(|a| a == "--repair-rate").unwrap();
        args[at + 1] = (1u64 << 20).to_string();
        let at = args
            .iter()
            .position(|a| a == "--audit-interval-ms")
            .unwrap();
        args[at + 1] = "300".into();
        spec.manager_args = args;
    });
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(5, 64 * CHUNK as usize);
    blob.write(0, &data).await.unwrap();
    let victim = tc.cluster.provider_addr(1).to_string();
    tc.cluster.kill_provider(1);
    wait_down(&client, &victim).await;
    wait_repaired(&client, Duration::from_secs(60)).await;
    let s = status(&client).await;
    assert!(
        s.maintenance.audits >= 2,
        "no audit ran during the repair: {s:?}"
    );
    let h = holders(&client).await;
    assert_eq!(h.len(), 64);
    let extra: Vec<_> = h.iter().filter(|(_, s)| s.len() != 2).collect();
    assert!(extra.is_empty(), "{} chunks: {extra:?}", extra.len());
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
}
