//! New files appear with their first version; files given up, abandoned or that cannot take
//! their name leave nothing.

use super::*;

#[tokio::test]
async fn new_files_appear_only_with_their_first_version() {
    let dir = TempDir::new("create-on-commit");
    let m = open(dir.path(), TIMEOUT);
    let blob = create(&m, "d/new", false).await.unwrap();
    // Neither the file nor its parent is visible, to any read.
    assert_eq!(
        stat(&m, "d/new").await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(stat(&m, "d").await.unwrap_err().kind, ErrorKind::NotFound);
    let object = FsObject {
        path: "d/new".into(),
        version: None,
    };
    assert_eq!(
        call(&m, object).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert!(every_path(&m).await.is_empty());
    let e = fs_delete(&m, "d/new", false).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    // Concurrent creators of the new file share it (as writers of an existing file do); an
    // exclusive one, or a directory, is refused.
    assert_eq!(create(&m, "d/new", false).await.unwrap(), blob);
    let e = create(&m, "d/new", true).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::AlreadyExists);
    let e = fs_mkdir(&m, "d/new", true).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::AlreadyExists);
    // A directory made meanwhile at its parent is fine.
    fs_mkdir(&m, "d", false).await.unwrap();
    // A restart keeps it pending, and its first publication binds it.
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(every_path(&m).await, ["d"]);
    let v = publish(&m, blob).await;
    let e = stat(&m, "d/new").await.unwrap();
    let info = e.blob.unwrap();
    assert_eq!(info.latest, v);
    // Created when its first version was published, not later.
    assert_eq!(e.created_ms, info.modified_ms);
    assert_eq!(every_path(&m).await, ["d", "d/new"]);
    // Its parents are made with it; later writers just add versions.
    let deep = create(&m, "a/b/c", false).await.unwrap();
    assert_eq!(every_path(&m).await, ["d", "d/new"]);
    publish(&m, deep).await;
    assert_eq!(every_path(&m).await, ["a", "a/b", "a/b/c", "d", "d/new"]);
    assert_eq!(create(&m, "a/b/c", false).await.unwrap(), deep);
    publish(&m, deep).await;
    assert_eq!(stat(&m, "a/b/c").await.unwrap().blob.unwrap().latest, 2);
    close(m).await;
    let m = open(dir.path(), TIMEOUT);
    assert_eq!(every_path(&m).await, ["a", "a/b", "a/b/c", "d", "d/new"]);
}

#[tokio::test]
async fn new_files_given_up_or_abandoned_leave_nothing() {
    let dir = TempDir::new("abandon");
    let m = open(dir.path(), TIMEOUT);
    // Two writers hold it: it goes when the second gives it up.
    let shared = create(&m, "x/a", false).await.unwrap();
    assert_eq!(create(&m, "x/a", false).await.unwrap(), shared);
    abandon(&m, "x/a", shared).await;
    assert_eq!(
        create(&m, "x/a", true).await.unwrap_err().kind,
        ErrorKind::AlreadyExists
    );
    abandon(&m, "x/a", shared).await;
    assert_gone(&m, shared).await;
    let again = create(&m, "x/a", true).await.unwrap();
    assert_ne!(again, shared);
    // Giving up a published file does nothing.
    publish(&m, again).await;
    abandon(&m, "x/a", again).await;
    assert_eq!(stat(&m, "x/a").await.unwrap().blob.unwrap().id, again);

    // Writers that died: dropped after the grace, unless a version is on its way.
    let dead = create(&m, "y/b", false).await.unwrap();
    let busy = create(&m, "y/c", false).await.unwrap();
    let v = assign(&m, busy, 10).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        m.namespace
            .collect_abandoned(Duration::from_millis(50))
            .unwrap(),
        1
    );
    assert_gone(&m, dead).await;
    assert_ne!(create(&m, "y/b", true).await.unwrap(), dead);
    complete(&m, busy, v).await.unwrap();
    assert_eq!(every_path(&m).await, ["x", "x/a", "y", "y/c"]);
}

#[tokio::test]
async fn a_new_file_that_cannot_take_its_name_publishes_nothing() {
    let dir = TempDir::new("bind-conflict");
    let m = open(dir.path(), TIMEOUT);
    let below = create(&m, "p/f", false).await.unwrap();
    // Meanwhile "p" becomes a file.
    let p = create(&m, "p", false).await.unwrap();
    publish(&m, p).await;
    let v = assign(&m, below, 10).await.unwrap();
    let e = complete(&m, below, v).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotADirectory, "{e}");
    assert!(e.message.contains("nothing was published"), "{e}");
    assert_gone(&m, below).await;
    assert_eq!(every_path(&m).await, ["p"]);

    // Something renamed onto a new file's path takes it; the new file's writer is told.
    let pending = create(&m, "t", false).await.unwrap();
    let s = create(&m, "s", false).await.unwrap();
    publish(&m, s).await;
    fs_rename(&m, "s", "t").await.unwrap();
    assert_eq!(stat(&m, "t").await.unwrap().blob.unwrap().id, s);
    assert_gone(&m, pending).await;
    // A directory renamed away leaves new files below it where they were created.
    let kept = create(&m, "dir/new", false).await.unwrap();
    let old = create(&m, "dir/old", false).await.unwrap();
    publish(&m, old).await;
    fs_rename(&m, "dir", "moved").await.unwrap();
    assert_eq!(every_path(&m).await, ["moved", "moved/old", "p", "t"]);
    publish(&m, kept).await;
    assert_eq!(
        every_path(&m).await,
        ["dir", "dir/new", "moved", "moved/old", "p", "t"]
    );
}
