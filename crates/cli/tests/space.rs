//! Space that comes back (issue 15, item 2): `tomus blob delete`, the maintenance flags of
//! `tomus up`, and `tomus bench` leaving nothing behind.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{chunk_files, exe, stderr, tomus, TestCluster};

const CHUNK: usize = 64 << 10;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs a command that must succeed; returns its stdout.
fn ok(addr: &str, args: &[&str]) -> String {
    let out = tomus(addr, args);
    assert!(out.status.success(), "tomus {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// The kind of the `--json` error of a failed command, with its exit code.
fn error_of(out: &Output) -> (i32, String, String) {
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    (
        out.status.code().unwrap(),
        e["error"]["kind"].as_str().unwrap().to_string(),
        e["error"]["message"].as_str().unwrap().to_string(),
    )
}

/// Polls `f` until it holds, for at most `secs` seconds.
fn eventually(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn write_file(dir: &Path, name: &str, len: usize, seed: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, tomus_cli::pattern::generate(seed, len)).unwrap();
    path
}

/// A blob of four 64 KiB chunks (four chunk files at replication 1); returns its id.
fn four_chunk_blob(addr: &str, scratch: &Path) -> String {
    let id = ok(addr, &["blob", "create", "--chunk-size", "64KiB"]);
    let input = write_file(scratch, &format!("in-{id}"), 4 * CHUNK, 1);
    ok(addr, &["blob", "write", &id, "0", input.to_str().unwrap()]);
    id
}

#[test]
fn blob_delete_removes_the_blob_and_gc_reclaims_its_chunks() {
    let tc = TestCluster::start_with(2, |spec| {
        let mut args = common::fast_maintenance(500);
        args[9] = "500".into(); // --gc-reuse-grace-ms
        spec.manager_args = args;
    });
    let addr = tc.addr();
    let scratch = tc.dir.join("inputs");
    std::fs::create_dir_all(&scratch).unwrap();
    let chunks = || -> usize {
        (0..2)
            .map(|i| chunk_files(&tc.cluster.provider_dir(i)).len())
            .sum()
    };
    let id = four_chunk_blob(&addr, &scratch);
    // A file beside it: one chunk file of 100 KiB, which must survive.
    let local = write_file(&scratch, "file.bin", 100 << 10, 2);
    ok(
        &addr,
        &["fs", "put", local.to_str().unwrap(), "/keep/file.bin"],
    );
    assert_eq!(chunks(), 5);
    let stat: Value =
        serde_json::from_str(&ok(&addr, &["fs", "stat", "/keep/file.bin", "--json"])).unwrap();
    let file_blob = stat["blob"].as_u64().unwrap().to_string();

    // A file's blob is refused, naming the file.
    let refused = tomus(&addr, &["blob", "delete", &file_blob, "--json"]);
    let (code, kind, message) = error_of(&refused);
    assert_eq!(
        (code, kind.as_str()),
        (10, "PreconditionFailed"),
        "{message}"
    );
    assert!(
        message.contains("/keep/file.bin") && message.contains("fs rm"),
        "{message}"
    );

    assert_eq!(
        ok(&addr, &["blob", "delete", &id]),
        format!("deleted blob {id}")
    );
    // Gone: reads, a second delete, and an id never handed out are NotFound (exit 3).
    for args in [
        vec!["blob", "read", id.as_str()],
        vec!["blob", "stat", id.as_str()],
        vec!["blob", "delete", id.as_str()],
        vec!["blob", "delete", "999999"],
    ] {
        let mut args = args.clone();
        args.push("--json");
        let out = tomus(&addr, &args);
        let (code, kind, message) = error_of(&out);
        assert_eq!(
            (code, kind.as_str()),
            (3, "NotFound"),
            "{args:?}: {message}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed something");
    }
    let listed = ok(&addr, &["blob", "list", "--json"]);
    assert!(
        !serde_json::from_str::<Value>(&listed)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["id"].as_u64().unwrap().to_string() == id),
        "blob {id} still listed: {listed}"
    );

    // Its four chunk files go after the grace; the file's stays and reads back.
    eventually("the deleted blob's chunk files removed", 60, || {
        chunks() == 1
    });
    let copy = scratch.join("copy.bin");
    ok(
        &addr,
        &["fs", "get", "/keep/file.bin", copy.to_str().unwrap()],
    );
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&local).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_read_a_blob_cannot_read_it_once_deleted() {
    let tc = TestCluster::start(1);
    let client = tc.client().await;
    let blob = client.create_blob(CHUNK as u64, 1).await.unwrap();
    let data = tomus_cli::pattern::generate(3, 2 * CHUNK);
    let v = blob.write(0, &data).await.unwrap();
    assert!(blob.read(0, data.len() as u64, Some(v)).await.unwrap() == data);
    client.delete_blob(blob.id()).await.unwrap();
    for version in [None, Some(v)] {
        let e = blob.read(0, 10, version).await.unwrap_err();
        assert_eq!(e.kind, tomus_wire::ErrorKind::NotFound, "{version:?}: {e}");
    }
    let e = blob.append(&data).await.unwrap_err();
    assert_eq!(e.kind, tomus_wire::ErrorKind::NotFound, "{e}");
}

/// `tomus up` as a shell job, in its own process group, stopped by Ctrl-C when dropped.
struct Up {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Up {
    fn start(extra: &[&str]) -> Self {
        let dir = tomus_cli::scratch_dir("space-up");
        let mut cmd = Command::new(exe());
        cmd.args(["up", "--addr", "127.0.0.1:0", "--providers", "2", "--data"])
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains("listening on"), "{line}");
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        std::thread::spawn(move || lines.for_each(drop));
        Up { child, addr, dir }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let pgid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: a plain syscall.
        unsafe {
            libc::kill(-pgid, libc::SIGINT);
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("the cluster's data and logs are in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[test]
fn up_passes_the_gc_grace_and_maintenance_interval_to_its_manager() {
    let help = stdout(&Command::new(exe()).args(["up", "--help"]).output().unwrap());
    for flag in [
        "--gc-grace-ms",
        "--gc-reuse-grace-ms",
        "--maintenance-interval-ms",
    ] {
        assert!(help.contains(flag), "`tomus up --help` lacks {flag}");
    }
    let up = Up::start(&["--gc-grace-ms", "500", "--maintenance-interval-ms", "200"]);
    let scratch = up.dir.join("inputs");
    std::fs::create_dir_all(&scratch).unwrap();
    let chunks = || -> usize {
        (0..2)
            .map(|i| chunk_files(&up.dir.join(format!("provider-{i}"))).len())
            .sum()
    };
    let id = four_chunk_blob(&up.addr, &scratch);
    assert_eq!(chunks(), 4);
    ok(&up.addr, &["blob", "delete", &id]);
    // The defaults (an hour's grace, a minute for chunks that were referenced) would keep
    // them far longer.
    eventually("chunk files of the deleted blob removed", 20, || {
        chunks() == 0
    });
}

/// The smallest run of every data scenario.
const SMALL_BENCH: [&str; 14] = [
    "bench",
    "--scenarios",
    "s1,s2,s3s4,s5,objects",
    "--providers",
    "2",
    "--clients",
    "1",
    "--runs",
    "1",
    "--per-client",
    "256KiB",
    "--s1-size",
    "4MiB",
    "--small-ops",
];

fn bench(tmp: &Path, addr: Option<&str>, extra: &[&str]) -> Value {
    let mut cmd = Command::new(exe());
    cmd.env("TMPDIR", tmp)
        .args(SMALL_BENCH)
        .args(["10", "--object-size", "256KiB"])
        .args(extra);
    if let Some(addr) = addr {
        cmd.args(["--cluster", addr]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "tomus bench: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn bench_leaves_no_data_behind() {
    let tmp = tomus_cli::scratch_dir("space-bench");
    std::fs::create_dir_all(&tmp).unwrap();
    // What earlier runs left: one killed (its process is gone), one still running (this
    // process stands for it), one kept with --keep-data.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = tmp.join(format!("tomus-bench-s1-{dead}-5ca1e"));
    let running = format!("tomus-bench-s1-{}-1a2b", std::process::id());
    let kept = format!("tomus-bench-s2-{dead}-3c4d");
    for d in [stale.clone(), tmp.join(&running), tmp.join(&kept)] {
        std::fs::create_dir_all(d.join("provider-0")).unwrap();
    }
    std::fs::write(tmp.join(&kept).join("kept-by-tomus-bench"), b"").unwrap();

    // Its own clusters: their data directories go, and so does what the killed run left.
    let report = bench(&tmp, None, &[]);
    for key in ["config", "s1", "s2", "s3", "s4", "s5", "objects"] {
        assert!(report.get(key).is_some(), "no {key} in {report}");
    }
    let mut left = entries(&tmp);
    left.sort();
    assert_eq!(left, vec![running.clone(), kept.clone()]);
    std::fs::remove_dir_all(tmp.join(&running)).unwrap();
    std::fs::remove_dir_all(tmp.join(&kept)).unwrap();

    // A running cluster: every blob and file it wrote is deleted.
    let tc = TestCluster::start(2);
    bench(&tmp, Some(&tc.addr()), &[]);
    assert_eq!(ok(&tc.addr(), &["blob", "list", "--json"]), "[]");
    let root = ok(&tc.addr(), &["fs", "ls", "/", "--json"]);
    assert_eq!(root, "[]");
    assert_eq!(entries(&tmp), Vec::<String>::new());

    // --keep-data keeps both.
    bench(&tmp, Some(&tc.addr()), &["--keep-data"]);
    assert_ne!(ok(&tc.addr(), &["blob", "list", "--json"]), "[]");
    let kept = tmp.join("kept");
    std::fs::create_dir_all(&kept).unwrap();
    let mut cmd = Command::new(exe());
    let out = cmd
        .env("TMPDIR", &kept)
        .args([
            "bench",
            "--scenarios",
            "s1",
            "--providers",
            "1",
            "--clients",
            "1",
        ])
        .args(["--runs", "1", "--s1-size", "4MiB", "--keep-data"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let dirs = entries(&kept);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(stderr(&out).contains("--keep-data"), "{}", stderr(&out));
    std::fs::remove_dir_all(&tmp).unwrap();
}
