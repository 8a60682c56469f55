//! Removing files deletes their blobs, for good: writers are told, publications and restarts
//! bring nothing back.

use super::*;

#[tokio::test]
async fn removing_files_deletes_their_blobs() {
    let dir = TempDir::new("delete");
    let m = open(dir.path(), TIMEOUT);
    let file = fs_create(&m, "a/f").await;
    publish(&m, file).await;
    set_retention(&m, file, Retention::KeepLast(3))
        .await
        .unwrap();
    let x = fs_create(&m, "d/x").await;
    let y = fs_create(&m, "d/sub/y").await;
    publish(&m, y).await;
    let src = fs_create(&m, "r/src").await;
    publish(&m, src).await;
    let dst = fs_create(&m, "r/dst").await;
    publish(&m, dst).await;
    let kept = fs_create(&m, "kept").await;
    publish(&m, kept).await;

    fs_delete(&m, "a/f", false).await.unwrap();
    assert_gone(&m, file).await;
    fs_delete(&m, "d", true).await.unwrap();
    assert_gone(&m, x).await;
    assert_gone(&m, y).await;

    fs_rename(&m, "r/src", "r/dst").await.unwrap();
    assert_gone(&m, dst).await;
    blob_info(&m, src).await.unwrap();
    let stat = FsStat {
        path: "r/dst".into(),
    };
    assert_eq!(call(&m, stat).await.unwrap().blob.unwrap().id, src);
    let list = FsList {
        path: "".into(),
        recursive: true,
        start_after: None,
        limit: 100,
    };
    let listed: Vec<String> = call(&m, list)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(listed, ["a", "kept", "r", "r/dst"]);

    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    for blob in [file, x, y, dst] {
        assert_gone(&m, blob).await;
    }
    let blobs: Vec<BlobId> = call(
        &m,
        ListBlobs {
            after: 0,
            limit: MAX_LISTING,
        },
    )
    .await
    .unwrap()
    .into_iter()
    .map(|b| b.id)
    .collect();
    assert_eq!(blobs, [src, kept]);
}

#[tokio::test]
async fn writers_of_deleted_blobs_are_told_rather_than_left_waiting() {
    let dir = TempDir::new("delete-pending");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    publish(&m, blob).await;
    let lower = assign(&m, blob, 10).await.unwrap();
    let upper = assign(&m, blob, 10).await.unwrap();
    // Completed, but waiting for the lower version's writer.
    let waiting = tokio::spawn({
        let m = m.clone();
        async move { complete(&m, blob, upper).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    fs_delete(&m, "f", false).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting writer was not told")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = complete(&m, blob, lower).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[tokio::test]
async fn publications_of_deleted_blobs_do_not_bring_them_back() {
    let dir = TempDir::new("delete-race");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    publish(&m, blob).await;
    let mut record = m
        .store
        .blobs()
        .unwrap()
        .into_iter()
        .find(|b| b.id == blob)
        .unwrap();
    fs_delete(&m, "f", false).await.unwrap();
    // What the committer would write for a version completed just before the deletion.
    record.published = 2;
    let late = Publication {
        blob: record,
        versions: vec![VersionInfo {
            blob,
            version: 2,
            span: Span::new(0, 10),
            size: 10,
            capacity: 64 << 10,
            state: VersionState::Published,
            append: true,
            published_ms: 1,
        }],
        attrs: vec![],
        name: None,
    };
    assert_eq!(m.store.publish(&[late]).unwrap().deleted, [blob]);
    assert!(m.store.blobs().unwrap().is_empty());
    assert!(m.store.version(blob, 2).unwrap().is_none());
}

/// A file's later versions are published through the journal; removing the file right after
/// (before redb holds them) and restarting must not bring any of it back.
#[tokio::test]
async fn a_file_removed_after_journaled_versions_stays_removed_after_a_restart() {
    let dir = TempDir::new("journal-delete");
    let m = open(dir.path(), TIMEOUT);
    let blob = fs_create(&m, "f").await;
    // The first version names the file (committed to redb); the others go to the journal.
    for _ in 0..4 {
        publish(&m, blob).await;
    }
    // Asked of memory, not redb: a listing would apply the journal first.
    assert_eq!(version(&m, blob, None).await.unwrap().version, 4);
    let kept = fs_create(&m, "g").await;
    publish(&m, kept).await;
    publish(&m, kept).await;
    fs_delete(&m, "f", false).await.unwrap();
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_gone(&m, blob).await;
    assert_eq!(listed(&m, kept).await, [1, 2]);
    let deleted_then_published = call(
        &m,
        Changes {
            after: 0,
            limit: 1000,
        },
    )
    .await
    .unwrap()
    .changes
    .iter()
    .skip_while(|(_, c)| !matches!(c, Change::Deleted { blob: b, .. } if *b == blob))
    .any(|(_, c)| matches!(c, Change::Published { blob: b, .. } if *b == blob));
    assert!(
        !deleted_then_published,
        "a publication logged after its blob's deletion"
    );
}

/// Deleting a blob removes its record at once; its version rows go after it, a batch at a
/// time (`Store::purge_rows`, run by the manager's "row purge" worker), and a
/// restart halfway leaves the rest to the next batch. Other blobs keep theirs.
#[tokio::test]
async fn a_deleted_blobs_version_rows_go_in_batches_across_a_restart() {
    let dir = TempDir::new("purge");
    let m = open(dir.path(), TIMEOUT);
    register(&m, None, "127.0.0.1:7001").await;
    let gone = create_blob(&m, 1).await.unwrap().id;
    let kept = create_blob(&m, 1).await.unwrap().id;
    for _ in 0..10 {
        publish(&m, gone).await;
    }
    for _ in 0..3 {
        publish(&m, kept).await;
    }
    assert_eq!(m.store.purge_rows(4).unwrap(), 0, "nothing deleted yet");
    call(&m, DeleteBlob { blob: gone }).await.unwrap();
    let e = version(&m, gone, Some(1)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert_eq!(
        m.store
            .versions(gone, 0..=u64::MAX, usize::MAX, false)
            .unwrap()
            .len(),
        10
    );

    assert_eq!(m.store.purge_rows(4).unwrap(), 4);
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    let e = version(&m, gone, Some(9)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert_eq!(
        m.store
            .versions(gone, 0..=u64::MAX, usize::MAX, false)
            .unwrap()
            .len(),
        6
    );
    assert_eq!(m.store.purge_rows(4).unwrap(), 4);
    assert_eq!(m.store.purge_rows(4).unwrap(), 2);
    assert_eq!(m.store.purge_rows(4).unwrap(), 0);
    assert!(m
        .store
        .versions(gone, 0..=u64::MAX, usize::MAX, false)
        .unwrap()
        .is_empty());
    assert_eq!(listed(&m, kept).await, vec![1, 2, 3]);
    assert_eq!(
        m.store
            .versions(kept, 0..=u64::MAX, usize::MAX, false)
            .unwrap()
            .len(),
        3
    );
}
