//! What garbage collection asks of the manager: the fates of versions, cutoffs that wait for
//! writers, the blobs each round looks at, and the change log.

use super::*;

async fn fates(m: &ManagerService, items: Vec<(BlobId, Version)>) -> Vec<Fate> {
    call(m, Fates { items }).await.unwrap()
}

#[tokio::test]
async fn fates_say_only_what_the_manager_positively_knows() {
    let dir = TempDir::new("fates");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let v1 = publish(&m, blob).await;
    let v2 = publish(&m, blob).await;
    let v3 = publish(&m, blob).await;
    let pending = assign(&m, blob, 10).await.unwrap();
    let given_up = assign(&m, blob, 10).await.unwrap();
    abort(&m, blob, given_up).await.unwrap();
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    // Held back: the pending version builds on v3 (and nothing below it).
    assert_eq!(listed(&m, blob).await, vec![v3]);
    let removed = fs_create(&m, "gone").await;
    publish(&m, removed).await;
    fs_delete(&m, "gone", false).await.unwrap();
    let never = removed + 100;
    let got = fates(
        &m,
        vec![
            (blob, v1),
            (blob, v2),
            (blob, v3),
            (blob, pending),
            (blob, given_up),
            (blob, given_up + 50),
            (removed, 1),
            (never, 1),
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![
            Fate::Expired,
            Fate::Expired,
            Fate::Live,
            Fate::Live,
            Fate::Aborted,
            Fate::Unknown,
            Fate::Deleted,
            Fate::Unknown,
        ]
    );
    // The tombstone is durable: a restarted manager still knows the blob was deleted.
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(fates(&m, vec![(removed, 1)]).await, vec![Fate::Deleted]);
}

/// Data stored a minute ago: older than any cutoff the tests grant.
const STORED_LONG_AGO: DataAge = DataAge {
    stored_ms: 60_000,
    reused_ms: None,
};
/// Fresh data with reused chunks found a minute ago.
const REUSED_LONG_AGO: DataAge = DataAge {
    stored_ms: 0,
    reused_ms: Some(60_000),
};

async fn grant(m: &ManagerService, fresh_ms: u64, reused_ms: u64) -> Cutoffs {
    let proposed = Cutoffs {
        fresh_ms,
        reused_ms,
    };
    call(m, GrantCutoffs { proposed }).await.unwrap()
}

#[tokio::test]
async fn gc_cutoffs_wait_for_writers_and_refuse_older_data() {
    let dir = TempDir::new("cutoffs");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let now = tomus_wire::now_ms();
    // A writer whose chunks were stored ten minutes ago is in progress: no cutoff passes it.
    let ten_minutes = 600_000;
    let slow = assign_aged(
        &m,
        blob,
        DataAge {
            stored_ms: ten_minutes,
            reused_ms: Some(ten_minutes),
        },
    )
    .await
    .unwrap();
    let granted = grant(&m, now, now).await;
    assert!(granted.fresh_ms <= now - ten_minutes, "{granted:?}");
    assert!(granted.reused_ms <= now - ten_minutes, "{granted:?}");
    complete(&m, blob, slow).await.unwrap();

    // Done: the cutoff moves up to what was asked, and writes with older data are refused.
    let granted = grant(&m, now - 5_000, now - 2_000).await;
    assert_eq!(
        granted,
        Cutoffs {
            fresh_ms: now - 5_000,
            reused_ms: now - 2_000
        }
    );
    let e = assign_aged(&m, blob, STORED_LONG_AGO).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    let e = assign_aged(&m, blob, REUSED_LONG_AGO).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired, "{e}");
    assign_aged(&m, blob, DataAge::default()).await.unwrap();

    // Cutoffs never go back, and survive a restart.
    assert_eq!(grant(&m, 0, 0).await, granted);
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(grant(&m, 0, 0).await, granted);
    let e = assign_aged(&m, blob, STORED_LONG_AGO).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::WriteExpired);
}

/// The periodic rounds look only at the blobs listed as changed (`versions/watchlist.rs`),
/// not at every blob: one that stayed idle through many rounds, and dropped off the lists,
/// is seen again by each round once it has a writer or new versions.
#[tokio::test]
async fn the_rounds_see_an_idle_blob_again_once_it_changes() {
    let dir = TempDir::new("watchlist");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    publish(&m, blob).await;
    for _ in 0..3 {
        assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 0);
        assert_eq!(m.versions.expire_leases(Duration::ZERO).unwrap(), 0);
        assert_eq!(grant(&m, 0, 0).await, Cutoffs::default());
    }

    // A writer whose data is ten minutes old: the cutoffs wait for it...
    let now = tomus_wire::now_ms();
    let ten_minutes = 600_000;
    let age = DataAge {
        stored_ms: ten_minutes,
        reused_ms: None,
    };
    let slow = assign_aged(&m, blob, age).await.unwrap();
    assert!(grant(&m, now, now).await.fresh_ms <= now - ten_minutes);
    // ...and its lease runs out.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        m.versions.expire_leases(Duration::from_millis(10)).unwrap(),
        1
    );
    let e = complete(&m, blob, slow).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::VersionAborted, "{e}");

    // Idle again for a few rounds, then two new versions: retention keeps the last.
    for _ in 0..3 {
        assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 0);
        assert_eq!(m.versions.expire_leases(Duration::ZERO).unwrap(), 0);
    }
    publish(&m, blob).await;
    let last = publish(&m, blob).await;
    assert_eq!(m.versions.enforce_retention(tomus_wire::now_ms()), 1);
    assert_eq!(listed(&m, blob).await, vec![last]);
}

#[tokio::test]
async fn the_change_log_records_what_became_referenced_and_what_died() {
    let dir = TempDir::new("changes");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    let v1 = publish(&m, blob).await;
    let v2 = publish(&m, blob).await;
    let dead = assign(&m, blob, 5).await.unwrap();
    abort(&m, blob, dead).await.unwrap();
    set_retention(&m, blob, Retention::KeepLast(1))
        .await
        .unwrap();
    // A new file given up before its first version: its blob is deleted.
    let file = fs_create(&m, "f").await;
    abandon(&m, "f", file).await;

    let page = all_changes(&m).await;
    let kinds: Vec<String> = page
        .changes
        .iter()
        .map(|(_, c)| match c {
            Change::Published {
                blob: b, versions, ..
            } => {
                format!(
                    "published {b}:{:?}",
                    versions.iter().map(|v| v.version).collect::<Vec<_>>()
                )
            }
            Change::Aborted { blob: b, from, to } => format!("aborted {b}:{from}..{to}"),
            Change::Expired {
                blob: b,
                retained_from,
            } => format!("expired {b}:<{retained_from}"),
            Change::Deleted { blob: b } => format!("deleted {b}"),
            Change::Unrecorded => "unrecorded".into(),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            format!("published {blob}:[{v1}]"),
            format!("published {blob}:[{v2}]"),
            format!("aborted {blob}:{dead}..{}", dead + 1),
            format!("expired {blob}:<{v2}"),
            format!("deleted {file}"),
        ]
    );
    let seqs: Vec<u64> = page.changes.iter().map(|(s, _)| *s).collect();
    assert_eq!(page.first_kept, seqs[0]);
    // Trimmed changes are gone; the rest stay, and so does the numbering.
    call(&m, TrimChanges { upto: seqs[2] }).await.unwrap();
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    let page = all_changes(&m).await;
    assert_eq!(page.first_kept, seqs[3]);
    assert_eq!(
        page.changes[..2]
            .iter()
            .map(|(s, _)| *s)
            .collect::<Vec<_>>(),
        seqs[3..]
    );
    // The restart gave up the version numbers reserved beyond the last published one.
    assert!(
        matches!(page.changes[2].1, Change::Aborted { blob: b, from, .. } if b == blob && from == v2 + 1),
        "{:?}",
        page.changes[2..].to_vec()
    );
}

/// The change log from its start (at most 100 entries).
async fn all_changes(m: &ManagerService) -> tomus_wire::ChangePage {
    call(
        m,
        Changes {
            after: 0,
            limit: 100,
        },
    )
    .await
    .unwrap()
}
