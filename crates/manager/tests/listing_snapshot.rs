//! Listings of many pages read from one snapshot (`FsListSnapshot`): a directory moved
//! between two pages is listed once, where it was when the first page was read; the
//! snapshot is let go with the last page, and a snapshot no longer held is refused.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::sync::Arc;

use tomus_manager::namespace::Namespace;
use tomus_manager::store::Store;
use tomus_manager::VersionManager;
use tomus_wire::{ErrorKind, FsEntry};

use common::TempDir;

const PAGE: u32 = 10;

fn paths(entries: &[FsEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.path.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_of_many_pages_shows_the_tree_as_of_its_first_page() {
    let dir = TempDir::new("listing-snapshot");
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let versions = VersionManager::open(store.clone(), &tomus_worker::Workers::default()).unwrap();
    let ns = Namespace::open(store, versions).unwrap();
    ns.mkdir("a/moved", true).unwrap();
    for i in 0..30 {
        ns.mkdir(&format!("m/{i:02}"), true).unwrap();
    }
    ns.mkdir("z", true).unwrap();

    // Pages read one by one, the directory moved from the first page's range to the last's.
    let mut snapshot = None;
    let mut after: Option<String> = None;
    let mut listed = Vec::new();
    let mut pages = 0;
    loop {
        let page = ns
            .list_snapshot("", true, snapshot, after.as_deref(), PAGE)
            .unwrap();
        pages += 1;
        if pages == 1 {
            ns.rename("a/moved", "z/moved").unwrap();
        }
        after = page.entries.last().map(|e| e.path.clone());
        listed.extend(page.entries);
        match page.snapshot {
            Some(id) => snapshot = Some(id),
            None => break,
        }
    }
    assert!(pages > 2, "{pages} pages");
    let moved: Vec<&str> = paths(&listed)
        .into_iter()
        .filter(|p| p.ends_with("moved"))
        .collect();
    assert_eq!(moved, ["a/moved"]);
    assert_eq!(listed.len(), 34, "{:?}", paths(&listed));

    // The last page let the snapshot go.
    let e = ns
        .list_snapshot("", true, snapshot, after.as_deref(), PAGE)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed, "{e}");
    let e = ns.list_snapshot("", true, Some(7), None, PAGE).unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed, "{e}");

    // A listing of one page holds nothing; the tree as it is now.
    let one = ns.list_snapshot("z", true, None, None, PAGE).unwrap();
    assert_eq!(one.snapshot, None);
    assert_eq!(paths(&one.entries), ["z/moved"]);
}
