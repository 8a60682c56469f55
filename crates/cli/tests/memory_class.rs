//! The memory storage class end to end on real processes: `blob create --storage memory`
//! and `fs put --storage memory` round trips with the data in the providers' RAM (their
//! reported memory use, not their disks), a clear `NoSpace` when the class is full, copies
//! re-created in memory after a provider dies (replication 2), the class surviving a
//! manager restart, and a new disk file keeping its class when another writer opens it
//! asking for the memory class.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{fast_maintenance, json, ok, tomus, TestCluster};
use tomus_client::tomus_wire::StorageClass;
use tomus_client::CreateOptions;

const MEMORY: &str = "1MiB";
const LIMIT: Duration = Duration::from_secs(30);

fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

/// Memory-class bytes used per live provider address, as `tomus status` shows them.
fn memory_used(addr: &str) -> HashMap<String, u64> {
    let s = json(tomus(addr, &["--json", "status"]));
    s["memory_class"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["addr"].as_str().unwrap().to_string(),
                u["used"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits until `check` holds for the reported memory use.
fn wait_memory(addr: &str, what: &str, check: impl Fn(&HashMap<String, u64>) -> bool) {
    let started = Instant::now();
    loop {
        let used = memory_used(addr);
        if check(&used) {
            return;
        }
        assert!(
            started.elapsed() < LIMIT,
            "{what}: memory use is {used:?}; status: {}",
            String::from_utf8_lossy(&tomus(addr, &["status"]).stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write_file(dir: &std::path::Path, name: &str, data: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, data).unwrap();
    path.to_string_lossy().into_owned()
}

fn with_memory_class(spec: &mut tomus_cli::embedded::ClusterSpec) {
    spec.provider_args = vec!["--memory-class".into(), MEMORY.into()];
}

#[test]
fn memory_blobs_and_files_round_trip_in_ram_and_refuse_when_full() {
    let c = TestCluster::start_with(2, with_memory_class);
    let addr = c.addr();
    wait_memory(&addr, "both providers report", |u| u.len() == 2);

    // A blob: 256 KiB in 64 KiB chunks, on both providers (replication 2).
    let created = json(tomus(
        &addr,
        &[
            "--json",
            "blob",
            "create",
            "--storage",
            "memory",
            "--replication",
            "2",
            "--chunk-size",
            "64KiB",
        ],
    ));
    assert_eq!(created["storage"], "memory");
    let id = created["id"].as_u64().unwrap().to_string();
    let data = content(3, 256 << 10);
    let input = write_file(&c.dir, "blob-in", &data);
    ok(tomus(&addr, &["blob", "write", &id, "0", &input]));
    assert!(ok(tomus(&addr, &["blob", "read", &id])) == data);
    wait_memory(&addr, "the blob is in both providers' memory", |u| {
        u.values().all(|&b| b == 256 << 10)
    });

    // A file, and a disk file next to it that leaves the memory class alone.
    let small = content(5, 10_000);
    let small_in = write_file(&c.dir, "small-in", &small);
    ok(tomus(
        &addr,
        &[
            "fs",
            "put",
            "--storage",
            "memory",
            "--replication",
            "2",
            &small_in,
            "/mem/small",
        ],
    ));
    ok(tomus(&addr, &["fs", "put", &small_in, "/disk/small"]));
    assert!(ok(tomus(&addr, &["fs", "cat", "/mem/small"])) == small);
    assert!(ok(tomus(&addr, &["fs", "cat", "/disk/small"])) == small);
    wait_memory(&addr, "the memory file is counted once", |u| {
        u.values().all(|&b| b == (256 << 10) + 10_000)
    });
    // An append to the memory file stays in memory.
    ok(tomus(
        &addr,
        &["fs", "put", "--append", &small_in, "/mem/small"],
    ));
    wait_memory(&addr, "the append is in memory", |u| {
        u.values().all(|&b| b == (256 << 10) + 20_000)
    });

    // 1 MiB more does not fit: a clear NoSpace, and nothing of it is published.
    let big = write_file(&c.dir, "big-in", &content(7, 1 << 20));
    let out = tomus(&addr, &["--json", "blob", "append", &id, &big]);
    assert!(!out.status.success());
    let err: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["kind"], "NoSpace", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory storage class"),
        "{err}"
    );
    assert!(ok(tomus(&addr, &["blob", "read", &id])) == data);

    let text = String::from_utf8(ok(tomus(&addr, &["status"]))).unwrap();
    assert!(text.contains("memory class:"), "{text}");
}

/// A file made on disk and not written yet is another writer's to fill: opening it with
/// `create_in(.., Memory)` returns it in its own class. Before, the manager re-classed the
/// blob as memory under its creator, and the opener cut memory-class chunks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_new_disk_file_in_the_memory_class_leaves_it_on_disk() {
    let c = TestCluster::start_with(2, with_memory_class);
    let addr = c.addr();
    wait_memory(&addr, "both providers report", |u| u.len() == 2);
    let creator = c.client().await;
    let (_, made) = creator
        .namespace()
        .create("/raced/f", CreateOptions::default())
        .await
        .unwrap();
    let opener = c.client().await;
    let (entry, opened) = opener
        .namespace()
        .create_in(
            "/raced/f",
            CreateOptions::default(),
            None,
            StorageClass::Memory,
        )
        .await
        .unwrap();
    assert_eq!(opened.id(), made.id(), "{entry:?}");
    assert_eq!(
        opener.storage_class(made.id()).await.unwrap(),
        StorageClass::Disk
    );
    let bystander = c.client().await;
    assert_eq!(
        bystander.storage_class(made.id()).await.unwrap(),
        StorageClass::Disk
    );

    // What the opener writes goes to disk: no provider holds any of it in memory.
    let data = content(11, 100_000);
    opened.write(0, &data).await.unwrap();
    assert_eq!(made.read(0, data.len() as u64, None).await.unwrap(), data);
    // Memory use arrives with heartbeats (every 200 ms here): wait for a few.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let used = memory_used(&addr);
    assert!(used.values().all(|&b| b == 0), "{used:?}");
}

#[test]
fn memory_copies_are_repaired_in_memory_and_the_class_survives_a_manager_restart() {
    let mut c = TestCluster::start_with(3, |spec| {
        with_memory_class(spec);
        spec.manager_args = fast_maintenance(60_000);
    });
    let addr = c.addr();
    wait_memory(&addr, "three providers report", |u| u.len() == 3);
    let data = content(11, 512 << 10);
    let input = write_file(&c.dir, "in", &data);
    ok(tomus(
        &addr,
        &[
            "fs",
            "put",
            "--storage",
            "memory",
            "--replication",
            "2",
            "--chunk-size",
            "64KiB",
            &input,
            "/m/data",
        ],
    ));
    let total = 2 * (512u64 << 10);
    wait_memory(&addr, "two copies in memory", |u| {
        u.values().sum::<u64>() == total
    });
    // Nothing of it is on the providers' disks.
    for i in 0..3 {
        let files: Vec<_> = common::chunk_files(&c.cluster.provider_dir(i))
            .into_iter()
            .filter(|f| !f.ends_with("memory-class.ids"))
            .collect();
        assert!(files.is_empty(), "memory-class chunks on disk: {files:?}");
    }
    let before = memory_used(&addr);
    let victim = c.cluster.provider_addr(0).to_string();
    assert!(before[&victim] > 0, "provider 0 holds copies: {before:?}");

    // Provider 0 dies with its RAM: repair copies its chunks into the others' memory.
    c.cluster.kill_provider(0);
    wait_memory(&addr, "repaired into the survivors' memory", |u| {
        !u.contains_key(&victim) && u.values().sum::<u64>() == total
    });
    assert!(ok(tomus(&addr, &["fs", "cat", "/m/data"])) == data);
    let after = memory_used(&addr);
    assert!(after.values().all(|&b| b == 512 << 10), "{after:?}");

    // The manager restarts: the file is still memory-class, its appends still go to RAM.
    c.cluster.kill_manager();
    c.cluster.start_manager().unwrap();
    let addr = c.addr();
    wait_memory(&addr, "the providers report to the new manager", |u| {
        u.len() == 2
    });
    let stat = json(tomus(&addr, &["--json", "fs", "stat", "/m/data"]));
    assert_eq!(stat["storage"], "memory", "{stat}");
    let more = content(13, 20_000);
    let more_in = write_file(&c.dir, "more", &more);
    ok(tomus(
        &addr,
        &["fs", "put", "--append", &more_in, "/m/data"],
    ));
    wait_memory(&addr, "the append after the restart is in memory", |u| {
        u.values().sum::<u64>() == total + 2 * 20_000
    });
    let mut want = data;
    want.extend_from_slice(&more);
    assert!(ok(tomus(&addr, &["fs", "cat", "/m/data"])) == want);

    // A provider restarts (same id, empty memory): repair makes the second copies again
    // (the restarted provider reports its journaled memory-class chunks lost, so repair
    // need not wait for an audit to notice).
    let restarted = c.cluster.provider_addr(1).to_string();
    let held = memory_used(&addr)[&restarted];
    assert!(held > 0);
    c.cluster.kill_provider(1);
    c.cluster.start_provider(1).unwrap();
    let total = total + 2 * 20_000;
    wait_memory(&addr, "full replication after the restart", |u| {
        u.len() == 2 && u.values().sum::<u64>() == total
    });
    assert!(ok(tomus(&addr, &["fs", "cat", "/m/data"])) == want);
}

/// Sends one HTTP/1.1 request with `body` and returns the whole response.
fn http(addr: &str, head: &str, body: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn s3_reduced_redundancy_puts_land_in_the_memory_class() {
    use std::io::BufRead;
    let c = TestCluster::start_with(1, with_memory_class);
    let manager = c.addr();
    wait_memory(&manager, "the provider reports", |u| u.len() == 1);
    let mut child = std::process::Command::new(common::exe())
        .args([
            "s3",
            "--addr",
            &manager,
            "--listen",
            "127.0.0.1:0",
            "--anonymous",
        ])
        .env_remove("TOMUS_S3_ACCESS_KEY")
        .env_remove("TOMUS_S3_SECRET_KEY")
        .env_remove("TOMUS_CLUSTER_SECRET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let s3 = first
        .trim()
        .strip_prefix("tomus s3 listening on ")
        .unwrap()
        .to_string();
    let put = |path: &str, class: Option<&str>, body: &[u8]| {
        let class = class.map_or(String::new(), |c| format!("x-amz-storage-class: {c}\r\n"));
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {s3}\r\n{class}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        http(&s3, &head, body)
    };
    assert!(put("/bkt", None, b"").contains(" 200 "));
    let body = content(17, 30_000);
    for (key, class) in [("rr", "REDUCED_REDUNDANCY"), ("mem", "MEMORY")] {
        let out = put(&format!("/bkt/{key}"), Some(class), &body);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        let stat = json(tomus(
            &manager,
            &["--json", "fs", "stat", &format!("/bkt/{key}")],
        ));
        assert_eq!(stat["storage"], "memory", "{class}: {stat}");
        assert!(ok(tomus(&manager, &["fs", "cat", &format!("/bkt/{key}")])) == body);
    }
    let out = put("/bkt/std", Some("STANDARD"), &body);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let stat = json(tomus(&manager, &["--json", "fs", "stat", "/bkt/std"]));
    assert_eq!(stat["storage"], "disk");
    // Classes tomus has no equivalent of are still refused.
    let out = put("/bkt/cold", Some("GLACIER"), &body);
    assert!(out.starts_with("HTTP/1.1 501"), "{out}");
    wait_memory(&manager, "two objects in memory", |u| {
        u.values().sum::<u64>() == 60_000
    });
    let _ = child.kill();
    let _ = child.wait();
}
