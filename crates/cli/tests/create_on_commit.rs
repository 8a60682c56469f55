//! `tomus fs put` and create-on-commit: a put that fails or is interrupted leaves nothing
//! visible (and its new file is dropped once its writer is known dead), and tomus's own
//! reserved names are neither listed nor changeable.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{exe, stderr, tomus, TestCluster};

/// Every path `tomus fs ls -r /` lists.
fn listed(addr: &str) -> Vec<String> {
    let out = tomus(addr, &["fs", "ls", "-r", "/", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_interrupted_puts_leave_nothing_visible() {
    // A short grace, so the file of a killed writer is dropped within the test; not too
    // short, for the live writer shows life only when it places a batch (8 MiB) of chunks,
    // and a manager stalled on a loaded machine hears nothing meanwhile: with 1.5 s, a
    // debug-build put lost its file while it was still being fed (and the feeding failed on
    // a closed pipe).
    let cluster = TestCluster::start_with(2, |spec| {
        spec.manager_args = vec!["--gc-grace-ms".into(), "5000".into()];
    });
    let addr = cluster.addr();
    let client = cluster.client().await;
    let blobs_before = client.list_blobs().await.unwrap().len();

    // Bad inputs are refused before the cluster is touched.
    let missing = cluster.dir.join("no-such-file");
    let out = tomus(
        &addr,
        &["fs", "put", missing.to_str().unwrap(), "/bug/ghost.csv"],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    let out = tomus(&addr, &["fs", "put", cluster.dir.to_str().unwrap(), "/ld"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    assert_eq!(listed(&addr), Vec::<String>::new());
    let out = tomus(&addr, &["fs", "stat", "/bug/ghost.csv"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(client.list_blobs().await.unwrap().len(), blobs_before);

    // A put killed (SIGTERM) halfway through a new file: nothing appears.
    let mut put = Command::new(exe())
        .env("TOMUS_ADDR", &addr)
        .args(["fs", "put", "-", "/big/new.bin", "--chunk-size", "64KiB"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = put.stdin.take().unwrap();
    // One batch and a little more: the put stores the batch and waits for the rest. Fed
    // 40 MiB, it could still lose its file to a stall of the manager longer than the grace
    // (seen once with 5 s, while the manager answered nothing for 12 s).
    let piece = vec![42u8; 1 << 20];
    for _ in 0..9 {
        stdin.write_all(&piece).unwrap();
    }
    stdin.flush().unwrap();
    // The put has created its file and stored chunks by now.
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.list_blobs().await.unwrap().len() == blobs_before {
        assert!(Instant::now() < deadline, "the put never created its file");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = Command::new("kill")
        .args(["-TERM", &put.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(stdin);
    assert!(!put.wait().unwrap().success());
    assert_eq!(listed(&addr), Vec::<String>::new());
    let out = tomus(&addr, &["fs", "stat", "/big"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Its writer is gone: the manager drops the new file and its blob after the grace.
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.list_blobs().await.unwrap().len() != blobs_before {
        assert!(
            Instant::now() < deadline,
            "the abandoned new file was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A put that succeeds makes the file and its parents at once; so does an empty append.
    let small = cluster.dir.join("small");
    std::fs::write(&small, b"data").unwrap();
    let out = tomus(
        &addr,
        &["fs", "put", small.to_str().unwrap(), "/big/new.bin"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let empty = cluster.dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let out = tomus(
        &addr,
        &["fs", "put", "--append", empty.to_str().unwrap(), "/e/log"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(listed(&addr), ["/big", "/big/new.bin", "/e", "/e/log"]);
    assert_eq!(tomus(&addr, &["fs", "cat", "/big/new.bin"]).stdout, b"data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_names_are_hidden_and_refused() {
    let cluster = TestCluster::start(1);
    let addr = cluster.addr();
    let client = cluster.client().await;
    // What the S3 gateway keeps, made as it does.
    let internal = client.internal_namespace();
    internal.mkdir(".tomus-buckets", true).await.unwrap();
    internal.mkdir(".tomus-uploads/b/u1", true).await.unwrap();
    let file = cluster.dir.join("f");
    std::fs::write(&file, b"x").unwrap();
    let out = tomus(&addr, &["fs", "put", file.to_str().unwrap(), "/data/f"]);
    assert!(out.status.success(), "{}", stderr(&out));

    assert_eq!(listed(&addr), ["/data", "/data/f"]);
    let out = tomus(&addr, &["fs", "ls", "/"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(".tomus"));
    // Asked for by name, a reserved directory can still be looked at.
    let out = tomus(&addr, &["fs", "ls", "/.tomus-uploads/b"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("u1"));

    let refused: [&[&str]; 5] = [
        &["fs", "put", file.to_str().unwrap(), "/.tomus-buckets/mine"],
        &["fs", "mkdir", "-p", "/.tomus-uploads/x"],
        &["fs", "rm", "-r", "/.tomus-uploads"],
        &["fs", "mv", "/.tomus-buckets", "/stolen"],
        &["fs", "mv", "/data", "/.tomus-new"],
    ];
    for args in refused {
        let out = tomus(&addr, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("reserved"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let all: Vec<String> = internal
        .walk("")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        all,
        [
            ".tomus-buckets",
            ".tomus-uploads",
            ".tomus-uploads/b",
            ".tomus-uploads/b/u1",
            "data",
            "data/f"
        ]
    );
}
