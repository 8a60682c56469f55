//! Retention policies: which versions a policy keeps, and when it looks again.

use super::*;

#[tokio::test]
async fn keep_last_retains_the_newest_versions() {
    let dir = TempDir::new("keep-last");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let empty = create_blob(&m, 1).await.unwrap().id;
    for _ in 0..5 {
        publish(&m, blob).await;
    }
    for bad in [Retention::KeepLast(0), Retention::KeepNewerThan(0)] {
        let e = set_retention(&m, blob, bad).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
    }
    let e = set_retention(&m, 999, Retention::KeepLast(1))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);

    let info = set_retention(&m, blob, Retention::KeepLast(2))
        .await
        .unwrap();
    assert_eq!((info.retention, info.latest), (Retention::KeepLast(2), 5));
    assert_eq!(listed(&m, blob).await, [4, 5]);
    let e = version(&m, blob, Some(3)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(
        e.message,
        format!("version 3 of blob {blob} was removed by its retention policy (keep last 2)")
    );
    assert_eq!(version(&m, blob, Some(4)).await.unwrap().version, 4);
    assert_eq!(version(&m, blob, Some(0)).await.unwrap().size, 0);
    assert_eq!(version(&m, blob, None).await.unwrap().version, 5);

    // Empty blobs and version 0 are unaffected.
    set_retention(&m, empty, Retention::KeepLast(1))
        .await
        .unwrap();
    assert_eq!(listed(&m, empty).await, Vec::<Version>::new());
    assert_eq!(version(&m, empty, Some(0)).await.unwrap().version, 0);

    // New versions push old ones out at the next round; a pending one is not counted.
    publish(&m, blob).await;
    publish(&m, blob).await;
    let pending = assign(&m, blob, 10).await.unwrap();
    assert_eq!(
        m.versions
            .enforce_retention(tomus_manager::versions::now_ms()),
        1
    );
    assert_eq!(listed(&m, blob).await, [6, 7]);
    assert_eq!(complete(&m, blob, pending).await.unwrap().version, 8);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(
        blob_info(&m, blob).await.unwrap().retention,
        Retention::KeepLast(2)
    );
    m.versions
        .enforce_retention(tomus_manager::versions::now_ms());
    assert_eq!(listed(&m, blob).await, [7, 8]);
    let e = version(&m, blob, Some(6)).await.unwrap_err();
    assert!(e.message.contains("keep last 2"), "{}", e.message);

    // Going back to keep-all keeps what is left; what is gone stays gone.
    set_retention(&m, blob, Retention::KeepAll).await.unwrap();
    // (A restarted manager numbers new versions after the block it had reserved.)
    let next = publish(&m, blob).await;
    m.versions
        .enforce_retention(tomus_manager::versions::now_ms());
    assert_eq!(listed(&m, blob).await, [7, 8, next]);
    let e = version(&m, blob, Some(5)).await.unwrap_err();
    assert_eq!(
        e.message,
        format!("version 5 of blob {blob} was removed by an earlier retention policy")
    );
}

#[tokio::test]
async fn keep_newer_than_expires_by_age_and_keeps_the_latest() {
    // The window is wide enough that versions 3 and 4 are still inside it when the policy
    // is set, however slow a loaded machine is between the publications and that call.
    const WINDOW: u64 = 2_000;
    let dir = TempDir::new("keep-newer");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    publish(&m, blob).await;
    publish(&m, blob).await;
    tokio::time::sleep(Duration::from_millis(WINDOW + 100)).await;
    publish(&m, blob).await;
    publish(&m, blob).await;

    set_retention(&m, blob, Retention::KeepNewerThan(WINDOW))
        .await
        .unwrap();
    assert_eq!(listed(&m, blob).await, [3, 4]);
    let e = version(&m, blob, Some(2)).await.unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "version 2 of blob {blob} was removed by its retention policy (keep versions \
             newer than {WINDOW} ms)"
        )
    );

    // Everything old (a round run as if the window had passed): only the latest stays.
    let pending = assign(&m, blob, 10).await.unwrap();
    let later = version(&m, blob, None).await.unwrap().published_ms + WINDOW + 1;
    assert_eq!(m.versions.enforce_retention(later), 1);
    assert_eq!(listed(&m, blob).await, [4]);
    assert_eq!(version(&m, blob, None).await.unwrap().version, 4);
    assert_eq!(complete(&m, blob, pending).await.unwrap().version, 5);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(listed(&m, blob).await, [4, 5]);
    assert_eq!(
        version(&m, blob, Some(3)).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
}

/// A time-based policy is looked at again when its cutoff passes a version it keeps, not
/// later (nor every round, which would read the store for every such blob every second).
#[tokio::test]
async fn keep_newer_than_removes_a_version_in_the_first_round_after_it_ages_out() {
    const DAY: u64 = 86_400_000;
    let dir = TempDir::new("keep-newer-due");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    for _ in 0..3 {
        publish(&m, blob).await;
        // Distinct publication times, so each version ages out on its own.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set_retention(&m, blob, Retention::KeepNewerThan(DAY))
        .await
        .unwrap();
    assert_eq!(listed(&m, blob).await, [1, 2, 3]);
    let p1 = version(&m, blob, Some(1)).await.unwrap().published_ms;
    let p2 = version(&m, blob, Some(2)).await.unwrap().published_ms;

    let enforce = |now: u64| m.versions.enforce_retention(now);
    assert_eq!(enforce(p1 + DAY), 0, "version 1 is exactly a day old");
    assert_eq!(listed(&m, blob).await, [1, 2, 3]);
    assert_eq!(enforce(p1 + DAY + 1), 1);
    assert_eq!(listed(&m, blob).await, [2, 3]);
    assert_eq!(enforce(p2 + DAY), 0);
    assert_eq!(enforce(p2 + DAY + 1), 1);
    assert_eq!(listed(&m, blob).await, [3]);
    // The latest stays however old it gets.
    assert_eq!(enforce(p2 + 1000 * DAY), 0);
    assert_eq!(listed(&m, blob).await, [3]);
    close(m).await;
}

#[tokio::test]
async fn retention_keeps_the_version_a_pending_writer_builds_on() {
    let dir = TempDir::new("retention-hold");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    publish(&m, blob).await;
    let base = publish(&m, blob).await;
    // Three writers get versions, then a slow one: it builds on `base` and refers to the
    // three in flight below it. The three publish; the slow one is still writing.
    let mut fast = Vec::new();
    for _ in 0..3 {
        fast.push(assign(&m, blob, 10).await.unwrap());
    }
    let slow = assign(&m, blob, 10).await.unwrap();
    for v in &fast {
        complete(&m, blob, *v).await.unwrap();
    }
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    // The slow writer's metadata may refer to any node of `base` and of the versions above
    // it: they all stay while it is pending, though the policy would keep only the latest.
    let mut held = vec![base];
    held.extend(&fast);
    assert_eq!(listed(&m, blob).await, held);
    assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 0);
    assert_eq!(listed(&m, blob).await, held);

    complete(&m, blob, slow).await.unwrap();
    // The writer is done: the policy applies in full at the next round (the manager runs
    // one every second).
    assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 1);
    assert_eq!(listed(&m, blob).await, vec![slow]);
    assert_eq!(
        version(&m, blob, Some(base)).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
}

/// Expired versions' rows wait for the row purge (`Store::purge_rows`), and nothing sees
/// them meanwhile: listings, reads and the policy's next rounds start at the first retained
/// version. The purge then takes exactly the rows below it.
#[tokio::test]
async fn expired_versions_rows_wait_for_the_purge_unseen() {
    let dir = TempDir::new("expiry-purge");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    for _ in 0..6 {
        publish(&m, blob).await;
    }
    set_retention(&m, blob, Retention::KeepLast(2))
        .await
        .unwrap();
    assert_eq!(listed(&m, blob).await, [5, 6]);
    assert_eq!(
        m.store
            .versions(blob, 0..=u64::MAX, usize::MAX, false)
            .unwrap()
            .len(),
        6,
        "rows wait"
    );
    let now = tomus_manager::versions::now_ms;
    assert_eq!(
        m.versions.enforce_retention(now()),
        0,
        "nothing more to expire"
    );
    publish(&m, blob).await;
    assert_eq!(m.versions.enforce_retention(now()), 1);
    assert_eq!(listed(&m, blob).await, [6, 7]);
    let e = version(&m, blob, Some(5)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");

    assert_eq!(m.store.purge_rows(100).unwrap(), 5);
    assert_eq!(m.store.purge_rows(100).unwrap(), 0);
    let stored: Vec<Version> = m
        .store
        .versions(blob, 0..=u64::MAX, usize::MAX, false)
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(stored, [6, 7]);
    assert_eq!(listed(&m, blob).await, [6, 7]);
}
