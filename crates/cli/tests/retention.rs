//! Space that comes back as users expect (issue 15, item 2): files of the namespace keep the
//! last 3 versions unless a directory above them says otherwise (`tomus fs retention`), and
//! garbage collection reclaims the rest (`tomus status` shows the bytes waiting); blobs made with the blob API and the objects of an
//! S3 bucket with versioning enabled keep every version.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tomus_cli::pattern;

use common::{chunk_files, exe, json, ok, tomus, TestCluster};

const CHUNK: usize = 64 << 10;

/// Puts `data` at `path` with `tomus fs put` (64 KiB chunks).
fn put(addr: &str, dir: &Path, path: &str, data: &[u8]) {
    let local = dir.join("local.bin");
    std::fs::write(&local, data).unwrap();
    let local = local.to_str().unwrap();
    ok(tomus(
        addr,
        &["fs", "put", "--chunk-size", "64KiB", local, path],
    ));
}

/// The published versions `tomus fs versions` lists for `path`.
fn versions(addr: &str, path: &str) -> Vec<u64> {
    json(tomus(addr, &["fs", "versions", path, "--json"]))["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["state"] == "published")
        .map(|v| v["version"].as_u64().unwrap())
        .collect()
}

/// Waits (up to 20 s) until `check` holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What `tomus status --json` says of maintenance.
fn maintenance(addr: &str) -> Value {
    json(tomus(addr, &["status", "--json"]))["maintenance"].clone()
}

fn retention_of(addr: &str, path: &str) -> Value {
    json(tomus(addr, &["fs", "retention", path, "--json"]))
}

#[test]
fn overwrites_keep_the_last_three_versions_and_the_rest_is_collected() {
    let tc = TestCluster::start_with(1, |spec| {
        spec.manager_args = common::fast_maintenance(1000);
    });
    let addr = tc.addr();
    let data: Vec<Vec<u8>> = (1..=5).map(|i| pattern::generate(i, 4 * CHUNK)).collect();
    let before = maintenance(&addr);
    for d in &data {
        put(&addr, &tc.dir, "/runs/r1/out.bin", d);
    }
    eventually("versions 3 to 5 alone", || {
        versions(&addr, "/runs/r1/out.bin") == [3, 4, 5]
    });
    // `tomus status`: the chunks of versions 1 and 2 wait for deletion (the reuse grace is
    // 2 s), then are collected.
    let expired = 2 * 4 * CHUNK as u64;
    let mut seen_waiting = 0;
    eventually("the expired versions' chunks collected", || {
        let m = maintenance(&addr);
        let waiting = m["unreferenced_bytes"].as_u64().unwrap();
        seen_waiting = seen_waiting.max(waiting);
        let collected = m["gc_bytes"].as_u64().unwrap() - before["gc_bytes"].as_u64().unwrap();
        collected >= expired && waiting == 0
    });
    assert_eq!(
        seen_waiting, expired,
        "the bytes waiting for GC were never shown"
    );
    // Versions 3 and 4 stay for the history: their chunks are held by old versions only.
    let held = 2 * 4 * CHUNK as u64;
    eventually("an audit counting the old versions' bytes", || {
        maintenance(&addr)["old_version_bytes"].as_u64() == Some(held)
    });
    let old = tomus(&addr, &["fs", "cat", "/runs/r1/out.bin", "--version", "2"]);
    assert!(!old.status.success());
    let why = String::from_utf8_lossy(&old.stderr);
    assert!(why.contains("removed by its retention policy"), "{why}");
    for v in 3..=5u64 {
        let read = ok(tomus(
            &addr,
            &["fs", "cat", "/runs/r1/out.bin", "--version", &v.to_string()],
        ));
        assert!(read == data[v as usize - 1], "version {v} reads back wrong");
    }
    // The data of versions 1 and 2 goes after the grace: 3 versions of 4 chunks stay.
    eventually("the chunks of versions 1 and 2 collected", || {
        chunk_files(&tc.cluster.provider_dir(0)).len() == 12
    });
    let r = retention_of(&addr, "/runs/r1/out.bin");
    assert_eq!(r["retention"], "KeepLast(3)");
    let r = retention_of(&addr, "/runs");
    assert_eq!(
        (&r["retention"], &r["from"]),
        (&"KeepLast(3)".into(), &Value::Null)
    );
}

#[test]
fn one_retention_round_expires_the_old_versions_of_many_files() {
    let tc = TestCluster::start_with(1, |spec| {
        spec.manager_args = common::fast_maintenance(1000);
    });
    let addr = tc.addr();
    let files: Vec<String> = (0..24).map(|i| format!("/many/f{i:02}.bin")).collect();
    let content = |file: usize, round: u64| pattern::generate(round * 100 + file as u64, 3000);
    for round in 1..=4 {
        for (i, f) in files.iter().enumerate() {
            put(&addr, &tc.dir, f, &content(i, round));
        }
    }
    // Expired together in one round's transaction, every file down to its last three.
    for f in &files {
        eventually("versions 2 to 4 alone", || versions(&addr, f) == [2, 3, 4]);
    }
    for (i, f) in files.iter().enumerate() {
        let old = tomus(&addr, &["fs", "cat", f, "--version", "1"]);
        assert!(!old.status.success(), "{f}: version 1 still reads");
        assert!(
            ok(tomus(&addr, &["fs", "cat", f])) == content(i, 4),
            "{f} reads back wrong"
        );
    }
}

#[test]
fn a_directory_policy_is_inherited_by_files_created_below_it() {
    let tc = TestCluster::start(1);
    let addr = tc.addr();
    ok(tomus(&addr, &["fs", "mkdir", "-p", "/keep/sub"]));
    ok(tomus(
        &addr,
        &["fs", "retention", "/keep", "--keep-last", "2"],
    ));
    let r = retention_of(&addr, "/keep/sub");
    assert_eq!(
        (&r["retention"], &r["from"]),
        (&"KeepLast(2)".into(), &"/keep".into())
    );
    let text = String::from_utf8(ok(tomus(&addr, &["fs", "retention", "/keep/sub"]))).unwrap();
    assert!(text.contains("inherited from /keep"), "{text}");
    for i in 1..=4 {
        put(
            &addr,
            &tc.dir,
            "/keep/sub/deeper/f",
            &pattern::generate(i, CHUNK),
        );
    }
    eventually("versions 3 and 4 alone", || {
        versions(&addr, "/keep/sub/deeper/f") == [3, 4]
    });
    assert_eq!(
        retention_of(&addr, "/keep/sub/deeper/f")["retention"],
        "KeepLast(2)"
    );

    // Changing the directory's policy changes what new files get, not the files there.
    ok(tomus(&addr, &["fs", "retention", "/keep", "--keep-all"]));
    assert_eq!(
        retention_of(&addr, "/keep/sub/deeper/f")["retention"],
        "KeepLast(2)"
    );
    for i in 1..=5 {
        put(&addr, &tc.dir, "/keep/g", &pattern::generate(i, CHUNK));
    }
    assert_eq!(retention_of(&addr, "/keep/g")["retention"], "KeepAll");
    // A file's own policy, applied at once.
    ok(tomus(
        &addr,
        &["fs", "retention", "/keep/g", "--keep-last", "1"],
    ));
    eventually("version 5 alone", || versions(&addr, "/keep/g") == [5]);
    // Elsewhere, the default.
    put(&addr, &tc.dir, "/other/h", b"h");
    assert_eq!(retention_of(&addr, "/other/h")["retention"], "KeepLast(3)");

    // Bad input is refused with the usual exit code of an invalid argument (2).
    for bad in [
        &["fs", "retention", "/keep/g", "--inherit"][..],
        &["fs", "retention", "/keep", "--keep-last", "0"][..],
    ] {
        let out = tomus(&addr, bad);
        assert!(!out.status.success(), "{bad:?} succeeded");
    }
    let out = tomus(&addr, &["fs", "retention", "/missing"]);
    assert!(!out.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_of_the_blob_api_keeps_every_version() {
    let tc = TestCluster::start_with(1, |spec| {
        spec.manager_args = common::fast_maintenance(1000);
    });
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK as u64, 1).await.unwrap();
    for i in 1..=5 {
        blob.write(0, &pattern::generate(i, CHUNK)).await.unwrap();
    }
    // A few retention and maintenance rounds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let list = blob.versions().await.unwrap();
    let published: Vec<u64> = list
        .versions
        .iter()
        .map(|v| v.version)
        .filter(|v| *v > 0)
        .collect();
    assert_eq!(published, [1, 2, 3, 4, 5]);
    let first = blob.read(0, CHUNK as u64, Some(1)).await.unwrap();
    assert!(first == pattern::generate(1, CHUNK));
}

/// Sends one HTTP/1.1 request and returns the status line.
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().next().unwrap_or_default().to_string()
}

/// Objects keep every version in a bucket with versioning, as S3 does, and only the current
/// one in a bucket without.
#[test]
fn s3_objects_keep_every_version_in_versioned_buckets_only() {
    let tc = TestCluster::start_with(1, |spec| {
        spec.manager_args = common::fast_maintenance(1000);
    });
    let mut child = Command::new(exe())
        .args([
            "s3",
            "--addr",
            &tc.addr(),
            "--listen",
            "127.0.0.1:0",
            "--anonymous",
        ])
        .env_remove("TOMUS_CLUSTER_SECRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let s3 = first
        .trim()
        .strip_prefix("tomus s3 listening on ")
        .unwrap()
        .to_string();
    let enabled = b"<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                    <Status>Enabled</Status></VersioningConfiguration>";
    for bucket in ["versioned", "plain"] {
        let status = http(&s3, "PUT", &format!("/{bucket}"), b"");
        assert!(status.contains(" 200 "), "{status}");
    }
    let status = http(&s3, "PUT", "/versioned?versioning", enabled);
    assert!(status.contains(" 200 "), "{status}");
    for bucket in ["versioned", "plain"] {
        for i in 1..=5 {
            let body = pattern::generate(i, 1000);
            let status = http(&s3, "PUT", &format!("/{bucket}/key"), &body);
            assert!(status.contains(" 200 "), "{status}");
        }
    }
    let addr = tc.addr();
    eventually("the plain bucket's overwritten versions removed", || {
        versions(&addr, "/plain/key") == [5]
    });
    assert_eq!(
        retention_of(&addr, "/plain/key")["retention"],
        "KeepLast(1)"
    );
    assert_eq!(versions(&addr, "/versioned/key"), [1, 2, 3, 4, 5]);
    assert_eq!(
        retention_of(&addr, "/versioned/key")["retention"],
        "KeepAll"
    );
    let _ = child.kill();
    let _ = child.wait();
}
