//! The publication journal: a publication acknowledged from the journal alone survives a stop
//! or a crash before redb holds it, and a record torn by a crash is cut off without losing
//! the ones before it. Each test runs the real store on files in a temporary directory and
//! opens it again to check what is durable.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tomus_manager::store::{BlobRecord, Publication, Store};
use tomus_metadata::{BlobId, Span, Version};
use tomus_wire::{Attrs, Retention, VersionInfo, VersionState};

use common::TempDir;

const CHUNK: u64 = 64 << 10;

fn new_blob(store: &Store) -> BlobRecord {
    let made = store
        .create_blobs(
            &[Retention::KeepAll],
            64,
            |_, id| BlobRecord {
                id,
                chunk_size: CHUNK,
                replication: 1,
                published: 0,
                size: 0,
                capacity: 0,
                modified_ms: 1,
            },
            |_, _, _| Ok(()),
        )
        .unwrap();
    made[0].clone()
}

/// The publication of `version` of `record`'s blob, a 10-byte append with an attribute.
fn appended(record: &mut BlobRecord, version: Version) -> Publication {
    let blob = record.id;
    record.published = version;
    record.size = version * 10;
    record.capacity = CHUNK;
    record.modified_ms = 1000 + version;
    let mut attrs = Attrs::new();
    attrs.insert("etag".into(), format!("e{version}"));
    Publication {
        blob: record.clone(),
        versions: vec![VersionInfo {
            blob,
            version,
            span: Span::new((version - 1) * 10, 10),
            size: version * 10,
            capacity: CHUNK,
            state: VersionState::Published,
            append: true,
            published_ms: 1000 + version,
        }],
        attrs: vec![(version, attrs)],
        name: None,
    }
}

/// Whether redb itself (not the journal) holds `version` of `blob`, read with the store closed.
fn in_redb(dir: &Path, blob: BlobId, version: Version) -> bool {
    let db = redb::Database::create(dir.join("manager.redb")).unwrap();
    let txn = db.begin_read().unwrap();
    let versions = redb::TableDefinition::<(u64, u64), &[u8]>::new("versions");
    let table = txn.open_table(versions).unwrap();
    table.get((blob, version)).unwrap().is_some()
}

fn check_published(store: &Store, blob: BlobId, upto: Version) {
    let listed: Vec<Version> = store
        .versions(blob, 1..=u64::MAX, usize::MAX, false)
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(listed, (1..=upto).collect::<Vec<_>>());
    let keys: Vec<_> = (1..=upto).map(|v| (blob, v)).collect();
    for (v, attrs) in (1..=upto).zip(store.attrs(&keys).unwrap()) {
        assert_eq!(attrs.get("etag"), Some(&format!("e{v}")), "version {v}");
    }
    let record = store.blobs().unwrap().into_iter().find(|b| b.id == blob);
    assert_eq!(
        record.map(|r| (r.published, r.size)),
        Some((upto, upto * 10))
    );
}

#[test]
fn a_publication_acknowledged_from_the_journal_survives_a_stop_before_redb_has_it() {
    let dir = TempDir::new("journal-durable");
    let mut record;
    {
        let store = Store::open(dir.path()).unwrap();
        record = new_blob(&store);
        // One group: nothing makes it due for redb (50 ms, 256 groups), and nothing below
        // reads through a transaction, which would apply it.
        store.publish(&[appended(&mut record, 1)]).unwrap();
        // Answered from the journal's pending list.
        let v = store.version(record.id, 1).unwrap().unwrap();
        assert_eq!((v.version, v.size), (1, 10));
    }
    assert!(
        !in_redb(dir.path(), record.id, 1),
        "the version reached redb before the stop: this test no longer tests the journal"
    );
    let store = Store::open(dir.path()).unwrap();
    check_published(&store, record.id, 1);
    // The journal was applied and started again: a later publication goes on from there.
    store.publish(&[appended(&mut record, 2)]).unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    check_published(&store, record.id, 2);
}

/// A journal removed while the store runs (its directory `rm -rf`'ed) would take and sync
/// records that no restart reads: the publication fails instead of being acknowledged.
#[test]
fn a_publication_into_a_removed_journal_is_refused() {
    let dir = TempDir::new("journal-removed");
    let store = Store::open(dir.path()).unwrap();
    let mut record = new_blob(&store);
    store.publish(&[appended(&mut record, 1)]).unwrap();
    std::fs::remove_file(dir.path().join("publications.journal")).unwrap();
    let Err(e) = store.publish(&[appended(&mut record, 2)]) else {
        panic!("a publication into a removed journal was acknowledged");
    };
    assert!(e.message.contains("removed while open"), "{e}");
    assert!(
        store.version(record.id, 2).unwrap().is_none(),
        "a refused publication is listed"
    );
}

#[test]
fn many_journaled_groups_reach_redb_in_order_with_the_change_log() {
    let dir = TempDir::new("journal-many");
    let store = Store::open(dir.path()).unwrap();
    let mut record = new_blob(&store);
    for v in 1..=600 {
        store.publish(&[appended(&mut record, v)]).unwrap();
    }
    check_published(&store, record.id, 600);
    let page = store.changes(0, 10_000).unwrap();
    let published: Vec<Version> = page
        .changes
        .iter()
        .filter_map(|(_, c)| match c {
            tomus_wire::Change::Published { versions, .. } => Some(versions[0].version),
            _ => None,
        })
        .collect();
    assert_eq!(published, (1..=600).collect::<Vec<_>>());
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    check_published(&store, record.id, 600);
}

#[test]
fn a_torn_journal_record_is_cut_and_the_ones_before_it_kept() {
    let dir = TempDir::new("journal-torn");
    let mut record;
    {
        let store = Store::open(dir.path()).unwrap();
        record = new_blob(&store);
        store.publish(&[appended(&mut record, 1)]).unwrap();
        store.publish(&[appended(&mut record, 2)]).unwrap();
    }
    // Cut the second record short, as a crash in the middle of its write would (its writer
    // was never told).
    let path = dir.path().join("publications.journal");
    let bytes = std::fs::read(&path).unwrap();
    let first = 12 + u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    assert_eq!(
        &bytes[first..first + 4],
        &bytes[0..4],
        "a second record follows"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len((first + 15) as u64)
        .unwrap();
    let store = Store::open(dir.path()).unwrap();
    check_published(&store, record.id, 1);
    assert!(store.version(record.id, 2).unwrap().is_none());
}

/// Set in the child process of the kill test: the store directory it publishes into.
const CHILD_ENV: &str = "TOMUS_JOURNAL_KILL_CHILD";
const KILL_TEST: &str = "acknowledged_publications_survive_a_kill_with_reads_between_them";
/// Bytes of padding per publication, so the journal passes its reset size (8 MiB) within a
/// few hundred publications.
const PAD: usize = 16 << 10;

/// The kill test's child: publishes big versions one by one, each read back through a
/// transaction (which applies the journal to redb without a sync), and says which are
/// acknowledged, until it is killed.
fn publish_until_killed(dir: &Path) {
    let store = Store::open(dir).unwrap();
    let mut record = new_blob(&store);
    println!("blob {}", record.id);
    for v in 1.. {
        let mut p = appended(&mut record, v);
        p.attrs[0].1.insert("pad".into(), "x".repeat(PAD));
        store.publish(&[p]).unwrap();
        assert_eq!(
            store
                .versions(record.id, v..=u64::MAX, usize::MAX, false)
                .unwrap()
                .len(),
            1
        );
        println!("published {v}");
    }
}

/// A crash (SIGKILL) loses no acknowledged publication, while reads keep applying the
/// journal to redb without syncs and the journal starts again empty several times.
#[test]
fn acknowledged_publications_survive_a_kill_with_reads_between_them() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        publish_until_killed(Path::new(&dir));
        return;
    }
    let dir = TempDir::new("journal-kill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", KILL_TEST, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut blob, mut acked) = (None, 0);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // The test harness's own output may share the first line.
        if let Some((_, id)) = line.rsplit_once("blob ") {
            blob = Some(id.parse::<BlobId>().unwrap());
        }
        if let Some((_, v)) = line.rsplit_once("published ") {
            acked = v.parse().unwrap();
            if acked >= 1500 {
                break;
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(acked >= 1500, "the child stopped at {acked}");
    let blob = blob.unwrap();
    let store = Store::open(dir.path()).unwrap();
    let record = store
        .blobs()
        .unwrap()
        .into_iter()
        .find(|b| b.id == blob)
        .unwrap();
    assert!(
        record.published >= acked,
        "acknowledged up to {acked}, {} after the kill",
        record.published
    );
    let versions = store
        .versions(blob, 1..=u64::MAX, usize::MAX, false)
        .unwrap();
    let numbers: Vec<Version> = versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, (1..=record.published).collect::<Vec<_>>());
    let keys: Vec<_> = numbers.iter().map(|&v| (blob, v)).collect();
    for (v, attrs) in numbers.iter().zip(store.attrs(&keys).unwrap()) {
        assert_eq!(attrs.get("etag"), Some(&format!("e{v}")), "version {v}");
        assert_eq!(attrs.get("pad").map(String::len), Some(PAD), "version {v}");
    }
}
