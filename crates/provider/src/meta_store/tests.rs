//! The metadata log: paths through the tree, replay after crashes and torn writes,
//! deletions, compaction, and the format header (new logs, upgrades, refusals).

use std::fs::OpenOptions;
use std::path::Path;

use tomus_metadata::{ChunkId, ChunkPiece, NodeRef};

use super::record::{
    encode_log_header, encode_record, encode_tombstone, header_key, header_version, read_record,
    record_size, Record, LOG_HEADER_LEN,
};
use super::snapshot::compact_path;
use super::*;
use crate::testutil::TempDir;

fn key(blob: u64, version: u64) -> NodeKey {
    NodeKey {
        blob,
        node: NodeRef {
            version,
            offset: version * 4096,
            size: 4096,
        },
    }
}

fn leaf(seed: u64) -> Node {
    Node::Leaf {
        pieces: vec![ChunkPiece {
            start: seed * 4096,
            len: 4096,
            chunk: ChunkId(u128::from(seed) << 64 | 5),
            chunk_offset: 0,
            replicas: vec![1, 2, 3],
        }],
        layers: Vec::new(),
        inherited: Vec::new(),
        base: None,
        depth: 0,
    }
}

/// Where the log's records end: after them the file holds only the zeros written ahead.
fn records_end(path: &Path) -> u64 {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let mut reader = std::io::BufReader::new(&file);
    let mut pos = 0;
    while pos < len {
        match read_record(&mut reader, len - pos).unwrap() {
            Ok((_, size)) => pos += size,
            Err(_) => break,
        }
    }
    assert!(tomus_wire::zeroed_ahead::zero_tail(&file, pos).unwrap());
    pos
}

fn log(dir: &TempDir) -> PathBuf {
    dir.path().join("meta.log")
}

#[tokio::test]
async fn path_follows_the_range_and_stops_at_missing_nodes() {
    let dir = TempDir::new("meta-path");
    let store = MetaStore::open(log(&dir), false).await.unwrap();
    let r = |version, offset, size| NodeRef {
        version,
        offset,
        size,
    };
    let at = |node| NodeKey { blob: 1, node };
    // Version 5: root [0, 16K) over [0, 8K) (version 5) and [8K, 16K) (version 3, which
    // this shard does not hold); [0, 8K) over leaves [0, 4K) and [4K, 8K).
    let inner = |left, right| Node::Inner { left, right };
    store
        .put_nodes(vec![
            (
                at(r(5, 0, 16384)),
                inner(Some(r(5, 0, 8192)), Some(r(3, 8192, 8192))),
            ),
            (
                at(r(5, 0, 8192)),
                inner(Some(r(5, 0, 4096)), Some(r(5, 4096, 4096))),
            ),
            (at(r(5, 0, 4096)), leaf(1)),
            (at(r(5, 4096, 4096)), leaf(2)),
        ])
        .await
        .unwrap();
    let refs = |nodes: Vec<(NodeRef, Node)>| nodes.into_iter().map(|(r, _)| r).collect::<Vec<_>>();
    let toward_second_leaf = store.path(1, r(5, 0, 16384), &[Span::new(5000, 1)], 64);
    assert_eq!(
        refs(toward_second_leaf),
        vec![r(5, 0, 16384), r(5, 0, 8192), r(5, 4096, 4096)]
    );
    let into_missing = store.path(1, r(5, 0, 16384), &[Span::new(9000, 1)], 64);
    assert_eq!(refs(into_missing), vec![r(5, 0, 16384)]);
    let limited = store.path(1, r(5, 0, 16384), &[Span::new(0, 16384)], 2);
    // Both borders of a write in one request: both branches, in depth-first order.
    let borders = store.path(
        1,
        r(5, 0, 16384),
        &[Span::new(100, 1), Span::new(5000, 1)],
        64,
    );
    assert_eq!(
        refs(borders),
        vec![
            r(5, 0, 16384),
            r(5, 0, 8192),
            r(5, 0, 4096),
            r(5, 4096, 4096)
        ]
    );
    assert_eq!(limited.len(), 2);
    assert!(store
        .path(2, r(5, 0, 16384), &[Span::new(0, 1)], 64)
        .is_empty());
}

#[tokio::test]
async fn put_get_and_replay() {
    let dir = TempDir::new("meta");
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    let nodes: Vec<_> = (0..10).map(|i| (key(1, i), leaf(i))).collect();
    store.put_nodes(nodes.clone()).await.unwrap();
    // Putting existing keys again is fine.
    store.put_nodes(nodes[..3].to_vec()).await.unwrap();
    store.put_nodes(Vec::new()).await.unwrap();
    let inner = Node::Inner {
        left: Some(key(1, 0).node),
        right: None,
    };
    store
        .put_nodes(vec![(key(2, 1), inner.clone())])
        .await
        .unwrap();

    let got = store.get_nodes(&[key(1, 4), key(9, 9), key(2, 1)]);
    assert_eq!(got, vec![Some(leaf(4)), None, Some(inner.clone())]);
    drop(store);

    let store = MetaStore::open(log(&dir), true).await.unwrap();
    let keys: Vec<_> = (0..10).map(|i| key(1, i)).collect();
    let got = store.get_nodes(&keys);
    assert!(got.iter().zip(0..).all(|(n, i)| *n == Some(leaf(i))));
    assert_eq!(store.get_nodes(&[key(2, 1)]), vec![Some(inner)]);
}

#[tokio::test]
async fn torn_tail_is_dropped() {
    let dir = TempDir::new("meta-torn");
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    store.put_nodes(vec![(key(1, 1), leaf(1))]).await.unwrap();
    store.put_nodes(vec![(key(1, 2), leaf(2))]).await.unwrap();
    let good_len = records_end(&log(&dir));
    store.put_nodes(vec![(key(1, 3), leaf(3))]).await.unwrap();
    drop(store);

    // Cut the last record in the middle.
    let full = records_end(&log(&dir));
    let file = OpenOptions::new().write(true).open(log(&dir)).unwrap();
    file.set_len((good_len + full) / 2).unwrap();
    drop(file);

    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert_eq!(
        store.get_nodes(&[key(1, 1), key(1, 2), key(1, 3)]),
        vec![Some(leaf(1)), Some(leaf(2)), None]
    );
    assert_eq!(std::fs::metadata(log(&dir)).unwrap().len(), good_len);

    // New records after the cut replay too.
    store.put_nodes(vec![(key(1, 4), leaf(4))]).await.unwrap();
    drop(store);
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert_eq!(
        store.get_nodes(&[key(1, 2), key(1, 4)]),
        vec![Some(leaf(2)), Some(leaf(4))]
    );
}

#[tokio::test]
async fn corrupt_record_stops_replay() {
    let dir = TempDir::new("meta-corrupt");
    let store = MetaStore::open(log(&dir), false).await.unwrap();
    store.put_nodes(vec![(key(1, 1), leaf(1))]).await.unwrap();
    let good_len = std::fs::metadata(log(&dir)).unwrap().len();
    store.put_nodes(vec![(key(1, 2), leaf(2))]).await.unwrap();
    drop(store);

    let mut raw = std::fs::read(log(&dir)).unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    std::fs::write(log(&dir), &raw).unwrap();

    let store = MetaStore::open(log(&dir), false).await.unwrap();
    assert_eq!(
        store.get_nodes(&[key(1, 1), key(1, 2)]),
        vec![Some(leaf(1)), None]
    );
    assert_eq!(std::fs::metadata(log(&dir)).unwrap().len(), good_len);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_are_all_durable() {
    let dir = TempDir::new("meta-concurrent");
    let store = Arc::new(MetaStore::open(log(&dir), true).await.unwrap());
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20u64 {
                let batch = (0..5).map(|j| (key(t, i * 5 + j), leaf(t * 1000 + i * 5 + j)));
                store.put_nodes(batch.collect()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    drop(store);

    let store = MetaStore::open(log(&dir), true).await.unwrap();
    for t in 0..16u64 {
        let keys: Vec<_> = (0..100).map(|i| key(t, i)).collect();
        let got = store.get_nodes(&keys);
        for (i, node) in got.into_iter().enumerate() {
            assert_eq!(node, Some(leaf(t * 1000 + i as u64)), "task {t} node {i}");
        }
    }
}

#[tokio::test]
async fn list_keys_pages_in_key_order() {
    let dir = TempDir::new("meta-list");
    let store = MetaStore::open(log(&dir), false).await.unwrap();
    let mut keys: Vec<NodeKey> = (0..45u64).map(|i| key(i % 3 + 1, (i * 17) % 45)).collect();
    // Stored out of order.
    store
        .put_nodes(
            keys.iter()
                .rev()
                .map(|k| (*k, leaf(k.node.version)))
                .collect(),
        )
        .await
        .unwrap();
    keys.sort();
    let (mut all, mut pages, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let page = store.list_keys(cursor, 10);
        if page.is_empty() {
            break;
        }
        pages.push(page.len());
        cursor = page.last().copied();
        all.extend(page);
    }
    assert_eq!(pages, vec![10, 10, 10, 10, 5]);
    assert_eq!(all, keys);
    assert!(store.list_keys(None, 0).is_empty());
    assert_eq!(store.list_keys(Some(keys[40]), 100), keys[41..].to_vec());
    // After a key not held.
    let between = NodeKey {
        blob: 2,
        node: NodeRef {
            version: 0,
            offset: 1,
            size: 0,
        },
    };
    let after: Vec<_> = keys.iter().copied().filter(|k| *k > between).collect();
    assert_eq!(store.list_keys(Some(between), 100), after);
}

#[tokio::test]
async fn deletes_survive_reopen_and_deleted_nodes_can_come_back() {
    let dir = TempDir::new("meta-delete");
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    let nodes: Vec<_> = (0..10).map(|i| (key(1, i), leaf(i))).collect();
    store.put_nodes(nodes.clone()).await.unwrap();
    // An unknown key and a repeated one are ignored.
    store
        .delete_nodes(vec![key(1, 2), key(1, 5), key(9, 9), key(1, 2)])
        .await
        .unwrap();
    let got = store.get_nodes(&[key(1, 1), key(1, 2), key(1, 5)]);
    assert_eq!(got, vec![Some(leaf(1)), None, None]);
    drop(store);

    let store = MetaStore::open(log(&dir), true).await.unwrap();
    let listed = store.list_keys(None, 100);
    let expected: Vec<_> = (0..10)
        .filter(|i| ![2, 5].contains(i))
        .map(|i| key(1, i))
        .collect();
    assert_eq!(listed, expected);
    // Repair stores a deleted node again: it is written, not skipped as known.
    store.put_nodes(vec![(key(1, 2), leaf(2))]).await.unwrap();
    assert_eq!(store.get_nodes(&[key(1, 2)]), vec![Some(leaf(2))]);
    drop(store);

    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert_eq!(
        store.get_nodes(&[key(1, 2), key(1, 5), key(1, 9)]),
        vec![Some(leaf(2)), None, Some(leaf(9))]
    );
    assert_eq!(store.list_keys(None, 100).len(), 9);
}

#[tokio::test]
async fn compaction_keeps_exactly_the_live_nodes() {
    let dir = TempDir::new("meta-compact");
    // Compacts as soon as half the log is dead.
    let open = || MetaStore::open_with_compaction(log(&dir), true, 1);
    let store = open().await.unwrap();
    let nodes: Vec<_> = (0..20).map(|i| (key(1, i), leaf(i))).collect();
    store.put_nodes(nodes.clone()).await.unwrap();
    let full = records_end(&log(&dir));
    // The header counts as live: every log has it.
    let live_size = |keys: &[u64]| -> u64 {
        LOG_HEADER_LEN
            + keys
                .iter()
                .map(|&i| record_size(&key(1, i), &leaf(i)))
                .sum::<u64>()
    };
    assert_eq!(full, live_size(&(0..20).collect::<Vec<_>>()));
    // 4 of 20 nodes dead (their records and tombstones are less than half the log): not
    // yet.
    store
        .delete_nodes((0..4).map(|i| key(1, i)).collect())
        .await
        .unwrap();
    assert!(records_end(&log(&dir)) > full);
    // 15 of 20: the log is rewritten with the 5 left.
    store
        .delete_nodes((4..15).map(|i| key(1, i)).collect())
        .await
        .unwrap();
    let left: Vec<u64> = (15..20).collect();
    assert_eq!(records_end(&log(&dir)), live_size(&left));
    assert!(!compact_path(&log(&dir)).exists());

    // Appends go to the new log; a deleted node comes back; all of it survives a reopen.
    store.put_nodes(vec![(key(1, 3), leaf(3))]).await.unwrap();
    store.delete_nodes(vec![key(1, 19)]).await.unwrap();
    drop(store);
    let store = open().await.unwrap();
    let expected: Vec<NodeKey> = [3, 15, 16, 17, 18].iter().map(|&i| key(1, i)).collect();
    assert_eq!(store.list_keys(None, 100), expected);
    for k in expected {
        assert_eq!(store.get_nodes(&[k]), vec![Some(leaf(k.node.version))]);
    }
    // A leftover of a compaction interrupted by a crash is removed at startup.
    drop(store);
    std::fs::write(compact_path(&log(&dir)), b"partial").unwrap();
    let store = open().await.unwrap();
    assert!(!compact_path(&log(&dir)).exists());
    assert_eq!(store.list_keys(None, 100).len(), 5);
}

/// A log as builds before the format header wrote it: records from the first byte on.
fn write_headerless(path: &Path, records: &[(NodeKey, Option<Node>)]) -> Vec<u8> {
    let mut raw = Vec::new();
    for (key, node) in records {
        match node {
            Some(node) => encode_record(&mut raw, key, node).unwrap(),
            None => encode_tombstone(&mut raw, key).unwrap(),
        }
    }
    std::fs::write(path, &raw).unwrap();
    raw
}

#[test]
fn the_header_is_a_tombstone_older_builds_skip() {
    let header = encode_log_header().unwrap();
    assert_eq!(header.len() as u64, LOG_HEADER_LEN);
    // Read as the record framing (unchanged since before the header) reads it: the
    // deletion of a key no node has (size 0), so replaying it changes nothing.
    let (record, size) = read_record(&mut &header[..], LOG_HEADER_LEN)
        .unwrap()
        .unwrap();
    assert_eq!(size, LOG_HEADER_LEN);
    match record {
        Record::Delete(key) => {
            assert_eq!(key.node.size, 0);
            assert_eq!(header_version(&key), Some(FORMAT_VERSION));
        }
        Record::Put(..) => panic!("the header reads as a stored node"),
    }
    // Ordinary keys are not headers.
    assert_eq!(header_version(&key(1, 1)), None);
}

#[tokio::test]
async fn a_new_log_starts_with_its_header() {
    let dir = TempDir::new("meta-new");
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    let header = encode_log_header().unwrap();
    assert_eq!(std::fs::read(log(&dir)).unwrap(), header);
    store.put_nodes(vec![(key(1, 1), leaf(1))]).await.unwrap();
    drop(store);
    let raw = std::fs::read(log(&dir)).unwrap();
    assert_eq!(&raw[..header.len()], &header[..]);
    assert_eq!(
        records_end(&log(&dir)),
        LOG_HEADER_LEN + record_size(&key(1, 1), &leaf(1))
    );

    // A header torn by a crash (nothing after it) is cut off and written again.
    std::fs::write(log(&dir), &header[..10]).unwrap();
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert!(store.list_keys(None, 10).is_empty());
    assert_eq!(std::fs::read(log(&dir)).unwrap(), header);
}

#[tokio::test]
async fn a_headerless_log_is_read_and_upgraded() {
    let dir = TempDir::new("meta-headerless");
    let mut records: Vec<(NodeKey, Option<Node>)> =
        (0..10).map(|i| (key(1, i), Some(leaf(i)))).collect();
    // A deleted node, and one stored again after its deletion.
    records.push((key(1, 3), None));
    records.push((key(1, 7), None));
    records.push((key(1, 7), Some(leaf(70))));
    let mut raw = write_headerless(&log(&dir), &records);
    // A torn record at the end, as a crash leaves it.
    let mut torn = Vec::new();
    encode_record(&mut torn, &key(1, 11), &leaf(11)).unwrap();
    raw.extend_from_slice(&torn[..torn.len() / 2]);
    std::fs::write(log(&dir), &raw).unwrap();

    let expect = |store: &MetaStore| {
        let keys: Vec<NodeKey> = (0..12).map(|i| key(1, i)).collect();
        let want: Vec<Option<Node>> = (0..12)
            .map(|i| match i {
                3 | 10 | 11 => None,
                7 => Some(leaf(70)),
                _ => Some(leaf(i)),
            })
            .collect();
        assert_eq!(store.get_nodes(&keys), want);
    };
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    expect(&store);
    // Upgraded in place: the header, then the live nodes only.
    let upgraded = std::fs::read(log(&dir)).unwrap();
    let header = encode_log_header().unwrap();
    assert_eq!(&upgraded[..header.len()], &header[..]);
    let live: u64 = (0..10)
        .filter(|&i| i != 3)
        .map(|i| record_size(&key(1, i), &leaf(if i == 7 { 70 } else { i })))
        .sum();
    assert_eq!(upgraded.len() as u64, LOG_HEADER_LEN + live);
    assert!(!compact_path(&log(&dir)).exists());

    // Appends and deletes go on as usual and survive a reopen, which leaves the file.
    store.put_nodes(vec![(key(1, 10), leaf(10))]).await.unwrap();
    store.delete_nodes(vec![key(1, 10)]).await.unwrap();
    drop(store);
    let mut before = std::fs::read(log(&dir)).unwrap();
    before.truncate(records_end(&log(&dir)) as usize);
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    expect(&store);
    // Only the zeros written ahead of the records are cut.
    assert_eq!(std::fs::read(log(&dir)).unwrap(), before);

    // An upgrade interrupted before its rename leaves the old log and a temporary file:
    // the next start removes the leftover and upgrades again.
    drop(store);
    write_headerless(&log(&dir), &records);
    std::fs::write(compact_path(&log(&dir)), &header).unwrap();
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    expect(&store);
    assert!(!compact_path(&log(&dir)).exists());
    assert_eq!(
        &std::fs::read(log(&dir)).unwrap()[..header.len()],
        &header[..]
    );

    // An empty log from before the header gets one.
    drop(store);
    std::fs::write(log(&dir), b"").unwrap();
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert!(store.list_keys(None, 10).is_empty());
    assert_eq!(std::fs::read(log(&dir)).unwrap(), header);
}

#[tokio::test]
async fn a_log_of_a_newer_format_is_refused_and_left_alone() {
    let dir = TempDir::new("meta-future");
    let mut raw = Vec::new();
    encode_tombstone(&mut raw, &header_key(FORMAT_VERSION + 1)).unwrap();
    // Whatever a newer format's records are, this build must not cut them as torn.
    raw.extend_from_slice(b"records of a format this build does not know");
    std::fs::write(log(&dir), &raw).unwrap();

    let err = match MetaStore::open(log(&dir), true).await {
        Ok(_) => panic!("a log of format 2 was opened"),
        Err(e) => e,
    };
    assert_eq!(err.kind, tomus_wire::ErrorKind::Internal, "{err}");
    for needle in [
        log(&dir).display().to_string(),
        "format version 2".into(),
        "reads format version 1".into(),
    ] {
        assert!(err.message.contains(&needle), "{err}");
    }
    assert_eq!(std::fs::read(log(&dir)).unwrap(), raw);

    // A damaged header (a flipped bit in its version) with records after it: refused
    // too, rather than taken for a torn write and the whole log cut off.
    let mut raw = encode_log_header().unwrap();
    encode_record(&mut raw, &key(1, 1), &leaf(1)).unwrap();
    raw[16] ^= 0x02;
    std::fs::write(log(&dir), &raw).unwrap();
    let err = match MetaStore::open(log(&dir), true).await {
        Ok(_) => panic!("a log with a damaged header was opened"),
        Err(e) => e,
    };
    assert_eq!(err.kind, tomus_wire::ErrorKind::Internal, "{err}");
    assert!(err.message.contains("header is damaged"), "{err}");
    assert_eq!(std::fs::read(log(&dir)).unwrap(), raw);
}

#[tokio::test]
async fn zeros_written_ahead_of_the_records_are_cut_quietly_at_reopen() {
    let dir = TempDir::new("meta-zeros");
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    for i in 0..5 {
        store.put_nodes(vec![(key(1, i), leaf(i))]).await.unwrap();
    }
    drop(store);
    let end = records_end(&log(&dir));
    assert!(
        std::fs::metadata(log(&dir)).unwrap().len()
            >= end + tomus_wire::zeroed_ahead::ZEROED_AHEAD / 2
    );

    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert_eq!(std::fs::metadata(log(&dir)).unwrap().len(), end);
    assert_eq!(store.list_keys(None, 10).len(), 5);
    // Appends go on from the records' end, into new zeros.
    store.put_nodes(vec![(key(1, 5), leaf(5))]).await.unwrap();
    drop(store);
    let store = MetaStore::open(log(&dir), true).await.unwrap();
    assert_eq!(
        store.get_nodes(&[key(1, 0), key(1, 5)]),
        vec![Some(leaf(0)), Some(leaf(5))]
    );
}
