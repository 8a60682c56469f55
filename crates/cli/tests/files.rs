//! Files: the namespace on the manager, whole-content replacement and streaming writers,
//! against real manager and provider processes.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use tomus_cli::pattern;
use tomus_client::{Append, CommitOptions, CreateOptions, Replace, WriteAt};
use tomus_wire::{Attrs, EntryKind, ErrorKind};

use common::{free_port, scrape_metrics, TestCluster};

const CHUNK: u64 = 64 << 10;

/// The kind of the error `r` must be.
fn kind<T>(r: Result<T, tomus_wire::Error>) -> ErrorKind {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.kind,
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write(u64, Vec<u8>),
    Append(Vec<u8>),
    Replace(Vec<u8>),
}

/// Applies `op` to the byte-vector model; `landed` is where an append went.
fn apply(model: &mut Vec<u8>, op: &Op, landed: u64) {
    let (at, data) = match op {
        Op::Write(off, d) => (*off, d),
        Op::Append(d) => (landed, d),
        Op::Replace(d) => {
            *model = d.clone();
            return;
        }
    };
    let end = at as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[at as usize..end].copy_from_slice(data);
}

/// Concurrent writes, appends and shrinking/growing replacements: every published version
/// reads exactly as the model that applies the operations in version order. In particular a
/// replacement's cleared tail never shows through a later sparse write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_replacements_match_the_model_at_every_version() {
    let tc = TestCluster::start(3);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    let tasks: Vec<_> = (0..6u64)
        .map(|w| {
            let blob = blob.clone();
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(100 + w);
                let mut done = Vec::new();
                for seq in 0..12 {
                    let len = rng.gen_range(1..5 * CHUNK) as usize;
                    let data = pattern::generate(pattern::seed(w, seq), len);
                    let op = match rng.gen_range(0..3) {
                        0 => Op::Write(rng.gen_range(0..8 * CHUNK), data),
                        1 => Op::Append(data),
                        _ if rng.gen_bool(0.3) => Op::Replace(data[..len / 8].to_vec()),
                        _ => Op::Replace(data),
                    };
                    let (version, landed) = match &op {
                        Op::Write(off, d) => (blob.write(*off, d).await.unwrap(), *off),
                        Op::Append(d) => blob.append(d).await.unwrap(),
                        Op::Replace(d) => (blob.replace(d).await.unwrap(), 0),
                    };
                    done.push((version, op, landed));
                }
                done
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by_key(|(v, _, _)| *v);
    let versions: Vec<u64> = all.iter().map(|(v, _, _)| *v).collect();
    assert_eq!(versions, (1..=72).collect::<Vec<_>>());
    let mut model = Vec::new();
    for (version, op, landed) in &all {
        apply(&mut model, op, *landed);
        let size = blob.size(Some(*version)).await.unwrap();
        assert_eq!(size, model.len() as u64, "size at version {version}");
        let got = blob.read(0, size, Some(*version)).await.unwrap();
        assert!(
            got == model,
            "content of version {version} differs from the model"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_writer_commits_one_version_and_nothing_before() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 1).await.unwrap();
    blob.write(0, &vec![7u8; (20 * CHUNK) as usize])
        .await
        .unwrap();

    let data = pattern::generate(5, (3 * CHUNK + 123) as usize);
    let mut w = blob.writer();
    for part in data.chunks(10_000) {
        w.write(part).await.unwrap();
    }
    assert_eq!(w.len(), data.len() as u64);
    assert_eq!(
        blob.latest().await.unwrap(),
        1,
        "nothing published before the commit"
    );
    let v = w
        .commit(Replace { reuse_empty: true }, &CommitOptions::default())
        .await
        .unwrap();
    assert_eq!(v.version, 2);
    assert_eq!(blob.size(None).await.unwrap(), data.len() as u64);
    assert_eq!(blob.read(0, data.len() as u64, None).await.unwrap(), data);
    // The cleared tail reads as zeros when a sparse write exposes it again.
    let end = 20 * CHUNK;
    blob.write(end - 1, b"!").await.unwrap();
    let tail = blob
        .read(data.len() as u64, end - 1 - data.len() as u64, None)
        .await
        .unwrap();
    assert!(tail.iter().all(|b| *b == 0), "stale bytes showed through");
    let locs = blob.locations(data.len() as u64, 10, None).await.unwrap();
    assert!(locs[0].providers.is_empty(), "a cleared range is a hole");

    // Empty writers publish nothing; replacing with empty content empties the blob.
    let nothing = blob
        .writer()
        .commit(Append, &CommitOptions::default())
        .await
        .unwrap();
    assert_eq!(nothing, None);
    let nothing = blob
        .writer()
        .commit(WriteAt { offset: 3 }, &CommitOptions::default())
        .await;
    assert_eq!(nothing.unwrap(), None);
    let v = blob.replace(b"").await.unwrap();
    assert_eq!(blob.size(Some(v)).await.unwrap(), 0);
    let (_, off) = blob.append(b"abc").await.unwrap();
    assert_eq!(off, 0, "appends land at the replaced size");
}

/// A streamed version that fits one small chunk (an S3 PUT of a few KiB) is committed as a
/// small write, its chunk stored beside the assignment: its attributes and its condition
/// apply as on the long path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_streamed_version_is_committed_as_a_small_write() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK, 2).await.unwrap();
    blob.append(b"first").await.unwrap();
    let mut written = Vec::new();
    for i in 0..16u8 {
        let data = pattern::generate(u64::from(i), 1_000 + 300 * usize::from(i));
        let mut w = blob.writer();
        let (head, tail) = data.split_at(400);
        w.write(head).await.unwrap();
        w.write(tail).await.unwrap();
        let options = CommitOptions {
            attrs: Attrs::from([("part".to_string(), i.to_string())]),
            expect_size: None,
        };
        let info = w.commit(Replace::default(), &options).await.unwrap();
        assert_eq!(info.size, data.len() as u64);
        written.push((info.version, data));
    }
    let attrs: std::collections::BTreeMap<u64, Attrs> = blob
        .versions_attrs()
        .await
        .unwrap()
        .into_iter()
        .map(|(v, a)| (v.version, a))
        .collect();
    for (i, (version, data)) in written.iter().enumerate() {
        let read = blob
            .read(0, data.len() as u64, Some(*version))
            .await
            .unwrap();
        assert_eq!(&read, data, "version {version}");
        assert_eq!(attrs[version]["part"], i.to_string(), "version {version}");
    }
    // A condition that does not hold publishes nothing.
    let latest = blob.latest().await.unwrap();
    let mut w = blob.writer();
    w.write(b"late").await.unwrap();
    let options = CommitOptions {
        expect_size: Some(1),
        ..CommitOptions::default()
    };
    let refused = w.commit(Append, &options).await;
    assert_eq!(kind(refused), ErrorKind::PreconditionFailed);
    assert_eq!(blob.latest().await.unwrap(), latest);
    let last = &written[written.len() - 1].1;
    assert_eq!(blob.size(None).await.unwrap(), last.len() as u64);
}

/// Sum of the manager's `tomus_rpc_requests_total` for request `kind` answered `ok`.
fn manager_requests(http: &str, kind: &str) -> u64 {
    let kind = format!("kind=\"{kind}\"");
    scrape_metrics(http)
        .lines()
        .filter(|l| {
            l.starts_with("tomus_rpc_requests_total{")
                && l.contains("service=\"manager\"")
                && l.contains(&kind)
                && l.contains("outcome=\"ok\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Small writes to many blobs (S3 PUTs of small objects: a blob each) take their placements
/// from one cache shared by blobs placed alike, not from a manager request each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_to_many_blobs_share_their_placements() {
    let http = format!("127.0.0.1:{}", free_port());
    let tc = TestCluster::start_with(3, |s| {
        s.manager_args = vec!["--http-addr".into(), http.clone()];
    });
    let client = tc.client().await;
    let first = client.create_blob(CHUNK, 2).await.unwrap();
    first.append(b"fills the cache").await.unwrap();
    let before = manager_requests(&http, "Allocate");
    let started = std::time::Instant::now();
    let mut blobs = Vec::new();
    for i in 0..16u64 {
        let blob = client.create_blob(CHUNK, 2).await.unwrap();
        let data = pattern::generate(i, 4096);
        blob.replace(&data).await.unwrap();
        blobs.push((blob, data));
    }
    let allocations = manager_requests(&http, "Allocate") - before;
    // One per blob before the cache was shared. A batch goes stale after 2 s, so a slow
    // machine may fetch one more per 2 s the loop took.
    let allowed = 1 + started.elapsed().as_secs() / 2;
    assert!(
        allocations <= allowed,
        "{allocations} allocations for 16 small writes (at most {allowed})"
    );
    for (blob, data) in &blobs {
        assert_eq!(blob.read(0, 4096, None).await.unwrap(), *data);
        let locations = blob.locations(0, 4096, None).await.unwrap();
        assert_eq!(
            locations[0].providers.len(),
            2,
            "replication of {}",
            blob.id()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_operations_and_their_errors() {
    let tc = TestCluster::start(2);
    let client = tc.client().await;
    let ns = client.namespace();
    let opts = CreateOptions {
        chunk_size: CHUNK,
        ..CreateOptions::default()
    };
    let (entry, blob) = ns.create("/data/run1/a.csv", opts).await.unwrap();
    assert_eq!(entry.path, "data/run1/a.csv");
    blob.replace(b"x,y\n1,2\n").await.unwrap();
    // A new file appears only with its first version.
    let (_, b) = ns.create("data/run1/b.csv", opts).await.unwrap();
    assert_eq!(kind(ns.stat("data/run1/b.csv").await), ErrorKind::NotFound);
    b.replace(b"b").await.unwrap();
    ns.mkdir("data/empty", false).await.unwrap();

    let names = |v: Vec<tomus_wire::FsEntry>| v.into_iter().map(|e| e.path).collect::<Vec<_>>();
    assert_eq!(names(ns.list("/").await.unwrap()), ["data"]);
    assert_eq!(
        names(ns.list("data").await.unwrap()),
        ["data/empty", "data/run1"]
    );
    assert_eq!(
        names(ns.walk("").await.unwrap()),
        [
            "data",
            "data/empty",
            "data/run1",
            "data/run1/a.csv",
            "data/run1/b.csv"
        ]
    );
    let stat = ns.stat("data/run1/a.csv").await.unwrap();
    let info = stat.blob.unwrap();
    assert_eq!((info.size, info.latest, info.id), (8, 1, blob.id()));
    assert!(info.modified_ms >= stat.created_ms);

    // Errors are typed and change nothing.
    assert_eq!(kind(ns.stat("nope").await), ErrorKind::NotFound);
    assert_eq!(
        kind(ns.mkdir("data/run1", false).await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(kind(ns.mkdir("x/y", false).await), ErrorKind::NotFound);
    assert_eq!(
        kind(ns.create("data/run1/a.csv/z", opts).await),
        ErrorKind::NotADirectory
    );
    assert_eq!(kind(ns.create("data", opts).await), ErrorKind::IsADirectory);
    assert_eq!(kind(ns.open("data").await), ErrorKind::IsADirectory);
    let exclusive = CreateOptions {
        exclusive: true,
        ..opts
    };
    assert_eq!(
        kind(ns.create("data/run1/a.csv", exclusive).await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(kind(ns.delete("data", false).await), ErrorKind::NotEmpty);
    assert_eq!(
        kind(ns.rename("data", "data/run1/in").await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(ns.rename("data/run1", "data/empty").await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(kind(ns.stat("a/../b").await), ErrorKind::InvalidArgument);
    assert_eq!(kind(ns.delete("/", true).await), ErrorKind::InvalidArgument);
    let bad_chunk = CreateOptions {
        chunk_size: 1000,
        ..opts
    };
    assert_eq!(
        kind(ns.create("c.bin", bad_chunk).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(kind(ns.stat("c.bin").await), ErrorKind::NotFound);
    assert_eq!(
        ns.walk("").await.unwrap().len(),
        5,
        "failed calls changed nothing"
    );

    // A directory moves with everything below it; a file replaces a file.
    ns.rename("data/run1", "archive/2026/run1").await.unwrap();
    let (_, moved) = ns.open("archive/2026/run1/a.csv").await.unwrap();
    assert_eq!(moved.id(), blob.id());
    assert_eq!(moved.read(0, 8, None).await.unwrap(), b"x,y\n1,2\n");
    ns.rename("archive/2026/run1/b.csv", "archive/2026/run1/a.csv")
        .await
        .unwrap();
    assert_eq!(
        names(ns.walk("archive").await.unwrap()),
        [
            "archive/2026",
            "archive/2026/run1",
            "archive/2026/run1/a.csv"
        ]
    );
    ns.delete("archive", true).await.unwrap();
    assert_eq!(names(ns.walk("").await.unwrap()), ["data", "data/empty"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_agree_and_the_namespace_survives_a_manager_kill() {
    let mut tc = TestCluster::start(2);
    let client = tc.client().await;
    let ns = client.namespace();
    let opts = CreateOptions {
        chunk_size: CHUNK,
        ..CreateOptions::default()
    };
    // Eight racing creates of one path get one file; eight exclusive ones: one winner.
    // (A new file's racing creators share it before it is published, too.)
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let ns = ns.clone();
            tokio::spawn(async move { ns.create("shared/log", opts).await.map(|(_, b)| b) })
        })
        .collect();
    let mut ids = BTreeSet::new();
    let mut shared = None;
    for r in racers {
        let b = r.await.unwrap().unwrap();
        ids.insert(b.id());
        shared = Some(b);
    }
    assert_eq!(ids.len(), 1);
    shared.unwrap().replace(b"").await.unwrap();
    let exclusive = CreateOptions {
        exclusive: true,
        ..opts
    };
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let ns = ns.clone();
            tokio::spawn(async move { ns.create("shared/once", exclusive).await.ok() })
        })
        .collect();
    let mut winners = Vec::new();
    for r in racers {
        winners.extend(r.await.unwrap());
    }
    assert_eq!(winners.len(), 1);
    for (_, b) in winners {
        b.replace(b"").await.unwrap();
    }

    // Enough entries for several listing pages.
    for i in 0..1100 {
        let (_, b) = ns.create(&format!("many/f{i:05}"), opts).await.unwrap();
        b.replace(b"").await.unwrap();
    }
    let page = ns
        .list_page("many", false, Some("many/f00099"), 7)
        .await
        .unwrap();
    let first: Vec<_> = page.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(first[0], "many/f00100");
    assert_eq!(first.len(), 7);
    let before = ns.walk("").await.unwrap();
    assert_eq!(
        before.len(),
        3 + 1 + 1100,
        "shared, its two files, many and its files"
    );

    tc.cluster.kill_manager();
    tc.cluster.start_manager().unwrap();
    let client = tc.client().await;
    let after = client.namespace().walk("").await.unwrap();
    let paths = |v: &[tomus_wire::FsEntry]| {
        v.iter()
            .map(|e| (e.path.clone(), e.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(paths(&after), paths(&before));
    assert!(after
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .all(|e| e.blob.is_some()));
}

/// Several batches in flight at once, and a large write from the caller's buffer between
/// them: the version holds the bytes in the order they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_streaming_writer_keeps_order_across_background_batches() {
    let tc = TestCluster::start(3);
    let client = tc.client().await;
    let blob = client.create_blob(1 << 20, 1).await.unwrap();
    let data = pattern::generate(9, (100 << 20) + 12_345);
    let mut w = blob.writer();
    let (small, rest) = data.split_at(70 << 20);
    for piece in small.chunks((3 << 20) + 1) {
        w.write(piece).await.unwrap();
    }
    w.write(rest).await.unwrap();
    assert_eq!(w.len(), data.len() as u64);
    let v = w
        .commit(Append, &CommitOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((v.version, v.span.offset), (1, 0));
    let back = blob.read(0, data.len() as u64, None).await.unwrap();
    assert!(back == data, "content differs from what was written");
}
