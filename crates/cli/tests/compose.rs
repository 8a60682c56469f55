//! Version attributes, conditional appends, versions that change no byte, and composed
//! versions (metadata-only copies), against real manager and provider processes.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use tomus_cli::pattern;
use tomus_client::{Append, CommitOptions, CreateOptions, Extent, Replace};
use tomus_wire::{Attrs, ErrorKind};

use common::{chunk_files, TestCluster};

const CHUNK: u64 = 64 << 10;

fn attrs(pairs: &[(&str, &str)]) -> Attrs {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stored_chunks(tc: &TestCluster) -> usize {
    (0..tc.cluster.provider_count())
        .map(|i| chunk_files(&tc.cluster.provider_dir(i)).len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attributes_publish_with_their_version() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let ns = client.namespace();
    let options = CreateOptions {
        chunk_size: CHUNK,
        ..CreateOptions::default()
    };
    let (_, blob) = ns.create("b/obj", options).await.unwrap();

    let mut w = blob.writer();
    w.write(b"first").await.unwrap();
    let first = CommitOptions {
        attrs: attrs(&[("etag", "one"), ("content-type", "text/plain")]),
        expect_size: None,
    };
    let v1 = w.commit(Replace::default(), &first).await.unwrap();

    // An empty replacement of empty content is still a version when it carries attributes.
    let (_, empty) = ns.create("b/empty", options).await.unwrap();
    let e1 = empty
        .writer()
        .commit(Replace::default(), &CommitOptions::default())
        .await
        .unwrap();
    let e2 = empty
        .writer()
        .commit(Replace::default(), &first)
        .await
        .unwrap();
    assert_eq!((e1.size, e2.size), (0, 0));
    assert!(e2.version > e1.version);
    let (o, _) = ns.object("b/empty", None).await.unwrap();
    assert_eq!(o.version.version, e2.version);
    assert_eq!(o.attrs, first.attrs);
    // A later write on top of an empty version reads back normally.
    empty.write(3, b"xyz").await.unwrap();
    assert_eq!(empty.read(0, 6, None).await.unwrap(), b"\0\0\0xyz");

    let mut w = blob.writer();
    w.write(b"second!").await.unwrap();
    let v2 = w
        .commit(
            Replace::default(),
            &CommitOptions {
                attrs: attrs(&[("etag", "two")]),
                expect_size: None,
            },
        )
        .await
        .unwrap();

    let (latest, _) = ns.object("b/obj", None).await.unwrap();
    assert_eq!(latest.version.version, v2.version);
    assert_eq!(latest.attrs, attrs(&[("etag", "two")]));
    let (old, handle) = ns.object("b/obj", Some(v1.version)).await.unwrap();
    assert_eq!(old.attrs, first.attrs);
    let mut buf = vec![0u8; old.version.size as usize];
    handle
        .read_version_into(&old.version, 0, &mut buf)
        .await
        .unwrap();
    assert_eq!(buf, b"first");

    let listed = ns.list_page_attrs("b", true, None, 100).await.unwrap();
    let names: Vec<(&str, Option<&String>)> = listed
        .iter()
        .map(|(e, a)| (e.path.as_str(), a.get("etag")))
        .collect();
    // b/empty's latest version came from a plain write: no attributes.
    assert_eq!(names, [("b/empty", None), ("b/obj", Some(&"two".into()))]);

    let history = blob.versions_attrs().await.unwrap();
    let etags: Vec<_> = history
        .iter()
        .map(|(_, a)| a.get("etag").cloned())
        .collect();
    assert_eq!(etags, [Some("one".into()), Some("two".into())]);

    // Plain writes keep working and carry no attributes.
    let v3 = blob.append(b"+").await.unwrap().0;
    let (plain, _) = ns.object("b/obj", Some(v3)).await.unwrap();
    assert!(plain.attrs.is_empty());
    assert_eq!(
        kind(ns.object("b", None).await.map(|_| ())),
        ErrorKind::IsADirectory
    );
}

fn kind(r: Result<(), tomus_wire::Error>) -> ErrorKind {
    r.expect_err("expected an error").kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_at_a_known_offset_are_checked_at_assignment() {
    let tc = TestCluster::start(1);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let at = |size| CommitOptions {
        attrs: Attrs::new(),
        expect_size: Some(size),
    };
    let mut w = blob.writer();
    w.write(b"abc").await.unwrap();
    let v = w.commit(Append, &at(0)).await.unwrap().unwrap();
    assert_eq!(v.span.offset, 0);
    let mut stale = blob.writer();
    stale.write(b"zz").await.unwrap();
    let err = stale.commit(Append, &at(0)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::PreconditionFailed);
    let mut w = blob.writer();
    w.write(b"def").await.unwrap();
    assert_eq!(
        w.commit(Append, &at(3)).await.unwrap().unwrap().span.offset,
        3
    );
    assert_eq!(blob.read(0, 6, None).await.unwrap(), b"abcdef");
}

/// A composed version refers to the sources' chunks: it stores no chunk, reads back as the
/// concatenation, and its sources may be unaligned ranges of other blobs and versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composed_versions_store_no_data() {
    let tc = TestCluster::start(3);
    let client = tc.client().await;
    let a = client.create_blob(CHUNK, 1).await.unwrap();
    let b = client.create_blob(4 * CHUNK, 1).await.unwrap();
    let da = pattern::generate(pattern::seed(1, 0), (5 * CHUNK + 123) as usize);
    let db = pattern::generate(pattern::seed(2, 0), (3 * CHUNK + 7) as usize);
    let va = a.write(0, &da).await.unwrap();
    let vb = b.write(0, &db).await.unwrap();
    // A later version of `a` must not leak into the composed one.
    a.write(0, &vec![9u8; 1000]).await.unwrap();

    let target = client.create_blob(2 * CHUNK, 1).await.unwrap();
    target
        .write(0, &vec![1u8; 10 * CHUNK as usize])
        .await
        .unwrap();
    let before = stored_chunks(&tc);
    let sources = [
        Extent {
            blob: a.clone(),
            version: va,
            offset: 100,
            len: 2 * CHUNK + 5,
        },
        Extent {
            blob: b.clone(),
            version: vb,
            offset: 0,
            len: db.len() as u64,
        },
        Extent {
            blob: a.clone(),
            version: va,
            offset: 4 * CHUNK,
            len: CHUNK + 123,
        },
    ];
    let info = target
        .compose(&sources, &CommitOptions::default())
        .await
        .unwrap();
    assert_eq!(stored_chunks(&tc), before, "compose stored chunk data");
    let mut want = da[100..(100 + 2 * CHUNK + 5) as usize].to_vec();
    want.extend_from_slice(&db);
    want.extend_from_slice(&da[(4 * CHUNK) as usize..]);
    assert_eq!(info.size, want.len() as u64);
    assert_eq!(
        target.read(0, info.size, Some(info.version)).await.unwrap(),
        want
    );
    // The shrunk tail of the previous content is gone; a write on top behaves as usual.
    target.write(10, b"over").await.unwrap();
    want[10..14].copy_from_slice(b"over");
    assert_eq!(target.read(0, info.size, None).await.unwrap(), want);

    let bad = [Extent {
        blob: b.clone(),
        version: vb,
        offset: db.len() as u64,
        len: 1,
    }];
    let err = target
        .compose(&bad, &CommitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::OutOfRange);
}
