//! Draining and removing providers, the chunk replica overlay, and the cluster status.

use super::*;

#[tokio::test]
async fn drained_providers_get_no_new_chunks_even_after_a_restart() {
    let dir = TempDir::new("drain");
    let m = open(dir.path(), TIMEOUT);
    let ids = [
        register(&m, None, "127.0.0.1:7001").await,
        register(&m, None, "127.0.0.1:7002").await,
        register(&m, None, "127.0.0.1:7003").await,
    ];
    let drained = drain(&m, "127.0.0.1:7002").await.unwrap();
    assert_eq!(
        (drained.id, drained.draining, drained.alive),
        (ids[1], true, true)
    );
    let e = drain(&m, "127.0.0.1:9999").await;
    assert_eq!(e.unwrap_err().kind, ErrorKind::NotFound);

    let flags: Vec<(ProviderId, bool)> = providers(&m)
        .await
        .iter()
        .map(|p| (p.id, p.draining))
        .collect();
    assert_eq!(flags, [(ids[0], false), (ids[1], true), (ids[2], false)]);

    // Two providers take data: replication 3 is refused, 2 placed on those two only.
    let e = create_blob(&m, 3).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("not draining"), "{}", e.message);
    let blob = create_blob(&m, 2).await.unwrap().id;
    let on = placed_on(&m, blob, 20).await;
    assert_eq!(on.len(), 40);
    assert!(!on.contains(&ids[1]), "{on:?}");

    // Heartbeats and a re-registration (a restarted provider) keep it draining.
    let hb = Heartbeat {
        id: ids[1],
        report: report(),
    };
    call(&m, hb).await.unwrap();
    assert_eq!(register(&m, Some(ids[1]), "127.0.0.1:7002").await, ids[1]);
    assert!(providers(&m).await[1].draining);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    let flags: Vec<(ProviderId, bool)> = providers(&m)
        .await
        .iter()
        .map(|p| (p.id, p.draining))
        .collect();
    assert_eq!(flags, [(ids[0], false), (ids[1], true), (ids[2], false)]);
    assert!(!placed_on(&m, blob, 20).await.contains(&ids[1]));
}

#[tokio::test]
async fn providers_are_removed_only_when_drained_or_down() {
    let dir = TempDir::new("remove");
    let timeout = Duration::from_millis(400);
    let m = open(dir.path(), timeout);
    let a = register(&m, None, "127.0.0.1:7001").await;
    let b = register(&m, None, "127.0.0.1:7002").await;

    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(
        e.message.contains("still alive and not drained"),
        "{}",
        e.message
    );
    assert_eq!(
        remove(&m, "127.0.0.1:9999").await.unwrap_err().kind,
        ErrorKind::NotFound
    );

    // A pass that started before clients can all know of the drain says nothing about it:
    // a client may write there by a provider list fetched just before the drain.
    let blob = create_blob(&m, 1).await.unwrap().id;
    let drained_at = tomus_wire::now_ms();
    drain(&m, "127.0.0.1:7001").await.unwrap();
    let horizon = drained_at + tomus_wire::PROVIDER_VIEW_TTL.as_millis() as u64;
    let mut status = MaintenanceStatus {
        draining: vec![(a, 0)],
        last_pass_started_ms: tomus_wire::now_ms(),
        ..MaintenanceStatus::default()
    };
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(
        e.message.contains("no maintenance pass has started since"),
        "{}",
        e.message
    );
    let shown = call(&m, GetStatus {}).await.unwrap().maintenance.draining;
    assert!(shown.is_empty(), "not yet known to be empty: {shown:?}");

    // A write with data stored before that horizon, in flight: whatever a pass found, it
    // may hold data there until it is published.
    let v = assign(&m, blob, 100).await.unwrap();
    status.last_pass_started_ms = horizon + 1_000;
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert!(e.message.contains("not published yet"), "{}", e.message);
    complete(&m, blob, v).await.unwrap();

    status.draining = vec![(a, 1000)];
    report_maintenance(&m, status.clone()).await;
    let e = remove(&m, "127.0.0.1:7001").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    assert!(e.message.contains("1000 bytes"), "{}", e.message);
    let shown = call(&m, GetStatus {}).await.unwrap().maintenance.draining;
    assert_eq!(shown, [(a, 1000)]);

    status.draining = vec![(a, 0)];
    report_maintenance(&m, status).await;
    assert_eq!(
        call(&m, GetStatus {}).await.unwrap().maintenance.draining,
        [(a, 0)]
    );
    remove(&m, "127.0.0.1:7001").await.unwrap();
    let left: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(left, [b]);

    // A write whose data began storing before the horizon, assigned only now, may have put
    // it on the removed provider: refused. One whose data is newer (past the margin for its
    // request's transit) is not.
    let e = refused_stored_before(&m, blob, drained_at).await;
    assert!(
        e.message.contains("drained provider was removed"),
        "{}",
        e.message
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let v = assign(&m, blob, 100).await.unwrap();
    assert_eq!(complete(&m, blob, v).await.unwrap().version, v);

    // Back again: a new id, not draining.
    let again = register(&m, Some(a), "127.0.0.1:7001").await;
    assert!(again > b, "{again}");
    assert!(!providers(&m).await.iter().any(|p| p.draining));

    // Down (no heartbeat for the timeout): removable without draining.
    tokio::time::sleep(timeout + Duration::from_millis(100)).await;
    let hb = Heartbeat {
        id: again,
        report: report(),
    };
    call(&m, hb).await.unwrap();
    assert!(
        !providers(&m)
            .await
            .iter()
            .find(|p| p.id == b)
            .unwrap()
            .alive
    );
    remove(&m, "127.0.0.1:7002").await.unwrap();
    // Its heartbeats are refused now, and it registers as a new provider.
    let hb = Heartbeat {
        id: b,
        report: report(),
    };
    assert_eq!(call(&m, hb).await.unwrap_err().kind, ErrorKind::NotFound);

    close(m).await;
    let m = open(dir.path(), timeout);
    let left: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(left, [again]);
    // A restarted manager still refuses a write that may have data on the removed provider.
    refused_stored_before(&m, blob, drained_at).await;
    assign(&m, blob, 100).await.unwrap();
}

#[tokio::test]
async fn the_replica_overlay_is_upserted_and_survives_a_restart() {
    let dir = TempDir::new("overlay");
    let m = open(dir.path(), TIMEOUT);
    let (c1, c2, c3) = (ChunkId(1 << 100), ChunkId(7), ChunkId(u128::MAX));
    let record = |entries: Vec<(ChunkId, Vec<ProviderId>)>| RecordReplicas { entries };
    let lookup = ChunkReplicas {
        chunks: vec![c1, c3, c2],
    };
    call(&m, record(vec![(c1, vec![1, 2]), (c2, vec![3])]))
        .await
        .unwrap();
    assert_eq!(
        call(&m, lookup.clone()).await.unwrap(),
        vec![vec![1, 2], vec![], vec![3]]
    );
    call(&m, record(vec![(c1, vec![4, 2]), (c3, vec![5])]))
        .await
        .unwrap();
    let expected = vec![vec![4, 2], vec![5], vec![3]];
    assert_eq!(call(&m, lookup.clone()).await.unwrap(), expected);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(call(&m, lookup).await.unwrap(), expected);
    let none = ChunkReplicas { chunks: vec![] };
    assert!(call(&m, none).await.unwrap().is_empty());
}

#[tokio::test]
async fn status_shows_providers_blobs_and_the_last_maintenance_report() {
    let dir = TempDir::new("status");
    let m = open(dir.path(), TIMEOUT);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(tomus_wire::serve(
        listener,
        None,
        tomus_wire::ServerLimits::default(),
        m.clone(),
        Arc::new(tomus_wire::LoadGauge::default()),
    ));
    let pool = tomus_wire::Pool::new(tomus_wire::RpcConfig::default());
    let status = |pool: Arc<tomus_wire::Pool>, addr: String| async move {
        pool.call(&addr, GetStatus {}).await.unwrap()
    };

    let before = status(pool.clone(), addr.clone()).await;
    assert!(before.providers.is_empty());
    assert_eq!((before.blobs, before.maintenance_reported_ms), (0, 0));
    assert_eq!(before.maintenance, MaintenanceStatus::default());
    assert_eq!(before.provider_timeout_ms, TIMEOUT.as_millis() as u64);

    let a = register(&m, None, "127.0.0.1:7001").await;
    register(&m, None, "127.0.0.1:7002").await;
    let drain = DrainProvider {
        addr: "127.0.0.1:7001".into(),
    };
    pool.call(&addr, drain).await.unwrap();
    create_blob(&m, 1).await.unwrap();
    fs_create(&m, "x").await;
    let report = MaintenanceStatus {
        passes: 3,
        running: true,
        under_replicated_chunks: 5,
        draining: vec![(a, 1 << 20)],
        last_error: Some("provider 2 unreachable".into()),
        ..MaintenanceStatus::default()
    };
    let req = ReportMaintenance {
        status: Box::new(report.clone()),
    };
    pool.call(&addr, req).await.unwrap();

    let after = status(pool.clone(), addr.clone()).await;
    assert_eq!(after.blobs, 2);
    let flags: Vec<(bool, bool)> = after
        .providers
        .iter()
        .map(|p| (p.alive, p.draining))
        .collect();
    assert_eq!(flags, [(true, true), (true, false)]);
    assert_eq!(after.maintenance, report);
    let now = tomus_manager::versions::now_ms();
    assert!(after.maintenance_reported_ms > 0 && after.maintenance_reported_ms <= now);
}

/// Assigns a write to `blob` whose data began storing just before `drained_at`, the drain of
/// a provider removed since (so it may have put data there): refused, with the error.
async fn refused_stored_before(
    m: &ManagerService,
    blob: BlobId,
    drained_at: u64,
) -> tomus_wire::Error {
    let since_drain = DataAge {
        stored_ms: tomus_wire::now_ms() - drained_at + 1,
        reused_ms: None,
    };
    let e = assign_aged(m, blob, since_drain).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    e
}

/// A provider that reports a fault (its data directory vanished) counts as down although it
/// heartbeats: nothing is placed on it, the placement error says why, and the reported text is
/// bounded. A provider restarted on a sound directory reports no fault and takes data again.
#[tokio::test]
async fn a_faulted_provider_gets_no_chunks_and_placement_errors_name_its_fault() {
    let dir = TempDir::new("fault");
    let m = open(dir.path(), TIMEOUT);
    let ids = [
        register(&m, None, "127.0.0.1:7001").await,
        register(&m, None, "127.0.0.1:7002").await,
    ];
    let blob = create_blob(&m, 2).await.unwrap().id;
    let faulted = |fault: Option<String>| Heartbeat {
        id: ids[1],
        report: ProviderReport { fault, ..report() },
    };
    let long = format!(
        "/data/p2 was removed under the running provider{}",
        "!".repeat(1 << 20)
    );
    call(&m, faulted(Some(long))).await.unwrap();

    let listed = providers(&m).await;
    let p = listed.iter().find(|p| p.id == ids[1]).unwrap();
    assert!(!p.alive);
    let fault = p.fault.as_deref().unwrap();
    assert!(fault.starts_with("/data/p2 was removed"), "{fault}");
    assert!(fault.len() <= 4096, "a {} byte fault kept", fault.len());

    let req = Allocate {
        blob,
        chunks: 1,
        chunk_bytes: None,
        placement: Placement::Balanced,
        client_host: None,
        avoid: Vec::new(),
    };
    let e = call(&m, req).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("1 take data"), "{}", e.message);
    assert!(e.message.contains("1 failed"), "{}", e.message);
    assert!(
        e.message.contains(&format!(
            "provider {} (127.0.0.1:7002): /data/p2 was removed",
            ids[1]
        )),
        "{}",
        e.message
    );

    call(&m, faulted(None)).await.unwrap();
    assert!(providers(&m)
        .await
        .iter()
        .all(|p| p.alive && p.fault.is_none()));
    let on = placed_on(&m, blob, 4).await;
    assert!(on.contains(&ids[1]), "{on:?}");
}

/// A manager keeps its cluster id across restarts; a provider registering with the id of
/// another cluster (its data belongs there) is refused and not listed, while one with this
/// cluster's id, or none yet, joins.
#[tokio::test]
async fn a_provider_of_another_cluster_is_refused() {
    let dir = TempDir::new("cluster-id");
    let m = open(dir.path(), TIMEOUT);
    let join = |cluster| Register {
        id: None,
        key: rand::random(),
        addr: "127.0.0.1:7001".into(),
        report: report(),
        cluster,
    };
    let first = call(&m, join(None)).await.unwrap();
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    let again = call(&m, join(Some(first.cluster))).await.unwrap();
    assert_eq!(
        again.cluster, first.cluster,
        "the cluster id changed at a restart"
    );

    let other = TempDir::new("cluster-id-other");
    let stranger = open(other.path(), TIMEOUT);
    let e = call(&stranger, join(Some(first.cluster)))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed, "{e}");
    assert!(e.message.contains("belongs to cluster"), "{e}");
    assert!(providers(&stranger).await.is_empty());
    let own = call(&stranger, join(None)).await.unwrap();
    assert_ne!(own.cluster, first.cluster);
    close(stranger).await;
    close(m).await;
}

/// A registration sent again (its answer came too late, or never) gets the id the first got,
/// by the key the provider's data directory keeps, also after a manager restart; only a
/// removed provider comes back under a new id.
#[tokio::test]
async fn a_registration_sent_again_gets_the_same_id() {
    let dir = TempDir::new("register-again");
    let timeout = Duration::from_millis(400);
    let m = open(dir.path(), timeout);
    let join = |id, key, addr: &str| Register {
        id,
        key,
        addr: addr.into(),
        report: report(),
        cluster: None,
    };
    let first = call(&m, join(None, 7, "127.0.0.1:7001")).await.unwrap().id;
    let again = call(&m, join(None, 7, "127.0.0.1:7001")).await.unwrap().id;
    assert_eq!(again, first);
    let other = call(&m, join(None, 8, "127.0.0.1:7002")).await.unwrap().id;
    assert_ne!(other, first, "another data directory is another provider");
    let ids: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(ids, [first, other]);

    close(m).await;
    let m = open(dir.path(), timeout);
    let after_restart = call(&m, join(None, 7, "127.0.0.1:7001")).await.unwrap().id;
    assert_eq!(after_restart, first);
    assert_eq!(providers(&m).await.len(), 2);

    // Down (no heartbeat for the timeout), removed, back: a new id, which its key then names.
    tokio::time::sleep(timeout + Duration::from_millis(100)).await;
    remove(&m, "127.0.0.1:7002").await.unwrap();
    let back = call(&m, join(Some(other), 8, "127.0.0.1:7002"))
        .await
        .unwrap()
        .id;
    assert!(back > other, "{back}");
    let resent = call(&m, join(None, 8, "127.0.0.1:7002")).await.unwrap().id;
    assert_eq!(resent, back);
    let ids: Vec<ProviderId> = providers(&m).await.iter().map(|p| p.id).collect();
    assert_eq!(ids, [first, back]);
    close(m).await;
}
