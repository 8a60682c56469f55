//! Listings of blobs and versions come in pages: a blob appended to for an hour has millions
//! of versions, more than one answer may carry.

use super::*;

async fn blobs_page(m: &ManagerService, after: BlobId, limit: u32) -> Result<Vec<BlobId>> {
    let page = call(m, ListBlobs { after, limit }).await?;
    Ok(page.iter().map(|b| b.id).collect())
}

async fn versions_page(
    m: &ManagerService,
    blob: BlobId,
    after: Version,
    limit: u32,
) -> Result<VersionList> {
    let plain = call(m, ListVersions { blob, after, limit }).await?;
    let from = VersionsFrom::After(after);
    let with_attrs = call(m, VersionsAttrs { blob, from, limit }).await?;
    let attrs_listed: Vec<Version> = with_attrs.iter().map(|(v, _)| v.version).collect();
    assert_eq!(numbers(&plain), attrs_listed, "both listings agree");
    Ok(plain)
}

fn numbers(list: &VersionList) -> Vec<Version> {
    list.versions.iter().map(|v| v.version).collect()
}

#[tokio::test]
async fn blobs_are_listed_in_id_order_a_page_at_a_time() {
    let dir = TempDir::new("blob-pages");
    let m = open(dir.path(), TIMEOUT);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(create_blob(&m, 1).await.unwrap().id);
    }
    assert_eq!(blobs_page(&m, 0, 2).await.unwrap(), ids[..2]);
    assert_eq!(blobs_page(&m, ids[1], 2).await.unwrap(), ids[2..4]);
    // A blob deleted between pages is not listed; one created meanwhile is.
    call(&m, DeleteBlob { blob: ids[4] }).await.unwrap();
    let new = create_blob(&m, 1).await.unwrap().id;
    assert_eq!(blobs_page(&m, ids[3], 2).await.unwrap(), [new]);
    assert!(blobs_page(&m, new, 2).await.unwrap().is_empty());

    for bad in [0, MAX_LISTING + 1] {
        let e = blobs_page(&m, 0, bad).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
        assert!(e.message.contains("1 to 10000 entries"), "{}", e.message);
    }
}

#[tokio::test]
async fn versions_are_listed_a_page_at_a_time_with_the_aborted_ranges_they_cover() {
    let dir = TempDir::new("version-pages");
    let m = open(dir.path(), TIMEOUT);
    let blob = create_blob(&m, 1).await.unwrap().id;
    // Versions 1-3 published, 4 aborted, 5-7 published, 8-9 aborted, 10-12 published.
    let mut published = Vec::new();
    for v in 1..=12 {
        let got = assign(&m, blob, 10).await.unwrap();
        assert_eq!(got, v);
        if v == 4 || v == 8 || v == 9 {
            abort(&m, blob, v).await.unwrap();
        } else {
            published.push(complete(&m, blob, v).await.unwrap().version);
        }
    }
    let whole = versions_page(&m, blob, 0, MAX_ATTRS_LISTING).await.unwrap();
    assert_eq!(numbers(&whole), published);
    // Half-open ranges, one per abort.
    let all_aborted = whole.aborted.clone();
    assert_eq!(all_aborted, [(4, 5), (8, 9), (9, 10)]);

    // Pages of 3: each aborted range comes with the page whose versions it starts among.
    let first = versions_page(&m, blob, 0, 3).await.unwrap();
    assert_eq!(
        (numbers(&first), first.aborted.clone()),
        (vec![1, 2, 3], vec![])
    );
    let second = versions_page(&m, blob, 3, 3).await.unwrap();
    assert_eq!(numbers(&second), [5, 6, 7]);
    assert_eq!(second.aborted, all_aborted[..1]);
    let third = versions_page(&m, blob, 7, 3).await.unwrap();
    assert_eq!(numbers(&third), [10, 11, 12]);
    assert_eq!(third.aborted, all_aborted[1..]);
    let end = versions_page(&m, blob, 12, 3).await.unwrap();
    assert!(numbers(&end).is_empty() && end.aborted.is_empty());

    // Newest first, from below a version on.
    let newest = |before: Version, limit: u32| {
        let m = &m;
        async move {
            let from = VersionsFrom::Before(before);
            let page = call(m, VersionsAttrs { blob, from, limit }).await.unwrap();
            page.iter().map(|(v, _)| v.version).collect::<Vec<_>>()
        }
    };
    assert_eq!(newest(Version::MAX, 4).await, [12, 11, 10, 7]);
    assert_eq!(newest(7, 4).await, [6, 5, 3, 2]);
    assert_eq!(newest(2, 4).await, [1]);
    assert!(newest(1, 4).await.is_empty());
    assert!(newest(0, 4).await.is_empty());

    // Versions removed by retention between two pages are not listed by the later one.
    set_retention(&m, blob, Retention::KeepLast(2))
        .await
        .unwrap();
    let after_expiry = versions_page(&m, blob, 3, 3).await.unwrap();
    assert_eq!(numbers(&after_expiry), [11, 12]);
    assert_eq!(newest(12, 4).await, [11]);
    assert!(newest(11, 4).await.is_empty());
    assert!(newest(5, 4).await.is_empty());

    let e = versions_page(&m, blob, 0, 0).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let e = call(
        &m,
        VersionsAttrs {
            blob,
            from: VersionsFrom::After(0),
            limit: MAX_ATTRS_LISTING + 1,
        },
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("1 to 1000 entries"), "{}", e.message);
    let e = versions_page(&m, 999, 0, 3).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}
