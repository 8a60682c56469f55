//! Directory retention in the manager's namespace: new files get the policy of the nearest
//! directory above them that has one (else keep the last 3), blobs made with the blob API
//! keep every version, policies survive a restart and move and go with their directories,
//! and a store of format 3 opens (upgraded, with no directory policy).

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::path::Path;
use std::sync::Arc;

use tomus_manager::namespace::Namespace;
use tomus_manager::store::Store;
use tomus_manager::VersionManager;
use tomus_wire::{EntryKind, ErrorKind, Retention, DEFAULT_FILE_RETENTION};

use common::TempDir;

struct Manager {
    versions: Arc<VersionManager>,
    ns: Namespace,
}

fn open(dir: &Path) -> Manager {
    let store = Arc::new(Store::open(dir).unwrap());
    let workers = tomus_worker::Workers::default();
    let versions = VersionManager::open(store.clone(), &workers).unwrap();
    let ns = Namespace::open(store, versions.clone()).unwrap();
    Manager { versions, ns }
}

impl Manager {
    /// The policy the new file `path` got (its blob's, as the manager holds it).
    fn create(&self, path: &str) -> Retention {
        let (e, _) = self.ns.create(path, 64 << 10, 1, true, None).unwrap();
        self.versions
            .blob_info(e.blob.unwrap().id)
            .unwrap()
            .retention
    }

    fn dir_policy(&self, path: &str) -> (Retention, Option<String>) {
        let r = self.ns.retention(path).unwrap();
        assert_eq!(r.kind, EntryKind::Dir);
        (r.retention, r.from)
    }
}

#[tokio::test]
async fn new_files_get_their_directorys_policy_and_blobs_keep_everything() {
    let dir = TempDir::new("dir-retention");
    let m = open(dir.path());
    // Defaults: files keep the last 3, blobs of the blob API everything.
    assert_eq!(DEFAULT_FILE_RETENTION, Retention::KeepLast(3));
    assert_eq!(m.create("plain/f"), Retention::KeepLast(3));
    let raw = m
        .versions
        .create_blob(64 << 10, 1, Retention::KeepAll)
        .unwrap();
    assert_eq!(raw.retention, Retention::KeepAll);
    assert_eq!(m.dir_policy("/"), (DEFAULT_FILE_RETENTION, None));

    m.ns.mkdir("runs/deep/er", true).unwrap();
    let set =
        m.ns.set_retention("/runs", Some(Retention::KeepLast(5)))
            .unwrap();
    assert_eq!(set.retention, Retention::KeepLast(5));
    assert_eq!(set.from.as_deref(), Some("runs"));
    // Inherited by what is below, existing directories included, and by new files.
    assert_eq!(
        m.dir_policy("runs/deep/er"),
        (Retention::KeepLast(5), Some("runs".into()))
    );
    let f =
        m.ns.create("runs/deep/er/f", 64 << 10, 1, true, None)
            .unwrap()
            .0;
    let f = f.blob.unwrap().id;
    assert_eq!(
        m.versions.blob_info(f).unwrap().retention,
        Retention::KeepLast(5)
    );
    assert_eq!(m.create("runs/new/dir/f"), Retention::KeepLast(5));
    // The nearest policy wins; an explicit one beats the directory's.
    m.ns.set_retention("runs/deep", Some(Retention::KeepAll))
        .unwrap();
    assert_eq!(m.create("runs/deep/g"), Retention::KeepAll);
    let e =
        m.ns.create("runs/s3", 64 << 10, 1, true, Some(Retention::KeepAll));
    assert_eq!(e.unwrap().0.blob.unwrap().retention, Retention::KeepAll);
    // Files already there keep theirs (a file's own policy is set with `tomus fs
    // retention FILE`, tested with published files in the cli crate).
    assert_eq!(
        m.versions.blob_info(f).unwrap().retention,
        Retention::KeepLast(5)
    );
    // Policies that keep nothing are refused; a new file is not there to be given one.
    let e =
        m.ns.set_retention("runs/deep/er/f", Some(Retention::KeepAll))
            .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e =
        m.ns.set_retention("runs", Some(Retention::KeepLast(0)))
            .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let e =
        m.ns.set_retention("missing", Some(Retention::KeepAll))
            .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    // --inherit: the parent's again.
    m.ns.set_retention("runs/deep", None).unwrap();
    assert_eq!(
        m.dir_policy("runs/deep"),
        (Retention::KeepLast(5), Some("runs".into()))
    );
    m.ns.set_retention("runs/deep", Some(Retention::KeepNewerThan(60_000)))
        .unwrap();
    drop(m);

    // Durable; moved with their directories, gone with them.
    let m = open(dir.path());
    assert_eq!(
        m.dir_policy("runs"),
        (Retention::KeepLast(5), Some("runs".into()))
    );
    m.ns.rename("runs", "archive/runs").unwrap();
    assert_eq!(
        m.dir_policy("archive/runs/deep"),
        (
            Retention::KeepNewerThan(60_000),
            Some("archive/runs/deep".into())
        )
    );
    m.ns.mkdir("runs", false).unwrap();
    assert_eq!(m.dir_policy("runs"), (DEFAULT_FILE_RETENTION, None));
    m.ns.delete("archive", true).unwrap();
    m.ns.mkdir("archive/runs/deep", true).unwrap();
    assert_eq!(
        m.dir_policy("archive/runs/deep"),
        (DEFAULT_FILE_RETENTION, None)
    );
    // The root's policy is every directory's without one of its own.
    m.ns.set_retention("/", Some(Retention::KeepLast(7)))
        .unwrap();
    assert_eq!(m.create("archive/x"), Retention::KeepLast(7));
}

#[tokio::test]
async fn a_format_3_store_opens_with_no_directory_policy() {
    let dir = TempDir::new("dir-retention-upgrade");
    let m = open(dir.path());
    m.ns.mkdir("a", false).unwrap();
    let f =
        m.ns.create("a/f", 64 << 10, 1, true, None)
            .unwrap()
            .0
            .blob
            .unwrap()
            .id;
    m.ns.set_retention("a", Some(Retention::KeepLast(9)))
        .unwrap();
    drop(m);
    {
        // As format 3 left it: no policy table.
        let db = redb::Database::create(dir.path().join("manager.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let meta = redb::TableDefinition::<&str, u64>::new("meta");
        txn.open_table(meta).unwrap().insert("schema", 3).unwrap();
        let policies = redb::TableDefinition::<&str, &[u8]>::new("dir_retention");
        assert!(txn.delete_table(policies).unwrap());
        txn.commit().unwrap();
    }
    let m = open(dir.path());
    assert_eq!(m.dir_policy("a"), (DEFAULT_FILE_RETENTION, None));
    assert_eq!(
        m.versions.blob_info(f).unwrap().retention,
        Retention::KeepLast(3)
    );
    m.ns.set_retention("a", Some(Retention::KeepAll)).unwrap();
    assert_eq!(m.create("a/g"), Retention::KeepAll);
}
