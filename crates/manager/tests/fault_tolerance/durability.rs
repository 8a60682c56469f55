//! The manager's store on a slow disk and across format versions.

use super::*;

/// A file whose syncs take as long as `delay_ms` says: a slow or overloaded disk.
#[derive(Debug)]
struct SlowSyncs {
    file: redb::backends::FileBackend,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl redb::StorageBackend for SlowSyncs {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.file.read(offset, len)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn sync_data(&self, eventual: bool) -> std::io::Result<()> {
        let ms = self.delay_ms.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(ms));
        self.file.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file.write(offset, data)
    }
}

/// One async worker thread, a disk whose syncs take a second: requests that sync (creating
/// a blob, registering a provider, giving a version up, reserving version numbers) must not
/// hold up the requests that do not.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_disk_sync_does_not_stall_requests_that_need_none() {
    let dir = TempDir::new("slow-sync");
    let delay_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join("manager.redb"))
        .unwrap();
    let backend = SlowSyncs {
        file: redb::backends::FileBackend::new(file).unwrap(),
        delay_ms: delay_ms.clone(),
    };
    let m = open_on(Arc::new(Store::open_on(backend, "slow").unwrap()), TIMEOUT);
    register(&m, None, "127.0.0.1:7001").await;
    let blob = create_blob(&m, 1).await.unwrap().id;
    let pending = assign(&m, blob, 10).await.unwrap();
    delay_ms.store(1000, std::sync::atomic::Ordering::Relaxed);

    let syncing: Vec<tokio::task::JoinHandle<()>> = vec![
        tokio::spawn({
            let m = m.clone();
            async move {
                create_blob(&m, 1).await.unwrap();
            }
        }),
        tokio::spawn({
            let m = m.clone();
            async move {
                register(&m, None, "127.0.0.1:7002").await;
            }
        }),
        tokio::spawn({
            let m = m.clone();
            async move {
                abort(&m, blob, pending).await.unwrap();
            }
        }),
    ];
    // Let them reach their syncs.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    for _ in 0..10 {
        blob_info(&m, blob).await.unwrap();
        call(&m, GetStatus {}).await.unwrap();
        version(&m, blob, None).await.unwrap();
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(300),
        "requests without a sync waited {took:?} behind syncing ones"
    );
    for task in syncing {
        task.await.unwrap();
    }
    delay_ms.store(0, std::sync::atomic::Ordering::Relaxed);
}

#[tokio::test]
async fn state_of_a_newer_format_is_refused_and_an_older_one_upgraded() {
    let dir = TempDir::new("schema");
    let path = dir.path().join("manager.redb");
    {
        // A store as issue 3 left it: its tables, no format record.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<u64, &[u8]>::new("blobs"))
            .unwrap();
        txn.commit().unwrap();
    }
    let m = open(dir.path(), TIMEOUT);
    create_blob(&m, 1).await.unwrap();
    close(m).await;
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let meta = redb::TableDefinition::<&str, u64>::new("meta");
        assert_eq!(
            txn.open_table(meta)
                .unwrap()
                .get("schema")
                .unwrap()
                .unwrap()
                .value(),
            5
        );
        txn.open_table(meta).unwrap().insert("schema", 99).unwrap();
        txn.commit().unwrap();
    }
    let e = Store::open(dir.path()).err().unwrap();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("format 99"), "{e}");
}
