//! The `tomus` command as users run it: the demo, and blob commands with --json against
//! `tomus up`, including exit codes and one-line errors.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

use common::exe;

fn tomus(addr: &str, args: &[&str]) -> std::process::Output {
    Command::new(exe())
        .env("TOMUS_ADDR", addr)
        .args(args)
        .output()
        .unwrap()
}

fn json_out(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A manager refused an address (not loopback, and no cluster secret) says why and leaves
/// no state in its data directory, for either of its two addresses.
#[test]
fn a_manager_refused_its_address_leaves_no_state() {
    let dir = std::env::temp_dir().join(format!("tomus-refused-{}", std::process::id()));
    let data = dir.join("manager");
    for extra in [&["--addr", "0.0.0.0:0"][..], &["--http-addr", "0.0.0.0:0"]] {
        let mut args = vec!["manager", "--data", data.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = Command::new(exe())
            .env_remove("TOMUS_CLUSTER_SECRET")
            .env("TOMUS_ADDR", "127.0.0.1:0")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains("without a cluster secret"), "{args:?}: {err}");
        assert!(!data.exists(), "{args:?} left {}", data.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_verifies_its_data_and_reports_json() {
    let out = Command::new(exe())
        .args(["demo", "--size", "8MiB", "--clients", "4", "--json"])
        .output()
        .unwrap();
    let report = json_out(&out);
    assert_eq!(report["shared_blob"]["verified"], Value::Bool(true));
    assert_eq!(report["shared_blob"]["size"], Value::from(4u64 << 20));
    let versions = report["shared_blob"]["versions"].as_u64().unwrap();
    assert_eq!(versions, report["shared_blob"]["appends"].as_u64().unwrap());
    let striped: u64 = report["striping"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(striped, 4 << 20);
}

/// `tomus up` on any free port with its data in `data` and `args`: the process and the
/// manager address it prints first.
fn start_up(data: &std::path::Path, args: &[&str]) -> (std::process::Child, String) {
    let mut up = Command::new(exe())
        .args(["up", "--addr", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(up.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    (up, addr)
}

#[test]
fn blob_commands_against_tomus_up() {
    let dir = tomus_cli::scratch_dir("cli");
    let (mut up, addr) = start_up(&dir, &["--providers", "2"]);

    let created = json_out(&tomus(
        &addr,
        &["blob", "create", "--chunk-size", "4KiB", "--json"],
    ));
    let id = created["id"].as_u64().unwrap().to_string();
    assert_eq!(created["chunk_size"], Value::from(4096));

    let file = dir.join("input");
    std::fs::write(&file, vec![7u8; 10_000]).unwrap();
    let w = json_out(&tomus(
        &addr,
        &["blob", "write", &id, "0", file.to_str().unwrap(), "--json"],
    ));
    assert_eq!(w["version"], Value::from(1));

    let mut append = Command::new(exe())
        .env("TOMUS_ADDR", &addr)
        .args(["blob", "append", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    append.stdin.take().unwrap().write_all(b"tail").unwrap();
    let out = append.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2 10000");

    let read = tomus(
        &addr,
        &["blob", "read", &id, "--offset", "9998", "--size", "6"],
    );
    assert_eq!(read.stdout, b"\x07\x07tail");
    let v1 = tomus(&addr, &["blob", "read", &id, "--version", "1"]);
    assert_eq!(v1.stdout, vec![7u8; 10_000]);

    let versions = json_out(&tomus(&addr, &["blob", "versions", &id, "--json"]));
    assert_eq!(versions["versions"].as_array().unwrap().len(), 2);
    assert_eq!(versions["versions"][1]["append"], Value::Bool(true));
    let locations = json_out(&tomus(&addr, &["blob", "locations", &id, "--json"]));
    let covered: u64 = locations
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .sum();
    assert_eq!(covered, 10_004);
    let stat = json_out(&tomus(&addr, &["blob", "stat", &id, "--json"]));
    assert_eq!(stat["size"], Value::from(10_004));
    let providers = json_out(&tomus(&addr, &["providers", "--json"]));
    assert_eq!(providers.as_array().unwrap().len(), 2);

    // Errors: one line on stderr, exit code by kind.
    let past = tomus(
        &addr,
        &["blob", "read", &id, "--offset", "10000", "--size", "5"],
    );
    assert_eq!(past.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&past.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("tomus: error: "), "{stderr}");
    assert_eq!(
        tomus(&addr, &["blob", "stat", "999"]).status.code(),
        Some(3)
    );
    assert_eq!(
        tomus(&addr, &["blob", "create", "--chunk-size", "3000"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        tomus("127.0.0.1:1", &["blob", "list"]).status.code(),
        Some(4)
    );
    // More replicas than live providers is a bad argument (2), not a full disk (7).
    let too_many = tomus(&addr, &["blob", "create", "--replication", "3"]);
    assert_eq!(
        too_many.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&too_many.stderr)
    );
    assert!(String::from_utf8_lossy(&too_many.stderr).contains("live providers"));

    fs_commands(&addr, &dir);

    let _ = up.kill();
    let _ = up.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tomus up --config FILE` hands the file to the servers it runs: its `[manager]` table
/// configures the manager (here a disk reserve no disk has, so writes are refused).
#[test]
fn tomus_up_hands_its_configuration_file_to_its_servers() {
    let dir = tomus_cli::scratch_dir("cli-config");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("tomus.toml");
    std::fs::write(&config, "[manager]\nmin-free-space = \"16777215TiB\"\n").unwrap();
    let config_arg = config.to_str().unwrap();
    let (mut up, addr) = start_up(
        &dir.join("data"),
        &["--providers", "1", "--config", config_arg],
    );

    let providers = json_out(&tomus(&addr, &["providers", "--json"]));
    assert_eq!(providers.as_array().unwrap().len(), 1);
    let put = tomus(&addr, &["fs", "put", config.to_str().unwrap(), "/copy"]);
    let stderr = String::from_utf8_lossy(&put.stderr);
    assert_eq!(put.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("--min-free-space"), "{stderr}");

    let _ = up.kill();
    let _ = up.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tomus fs ...` on the same cluster: put (replace and append), get, cat, ls, mv, rm.
fn fs_commands(addr: &str, dir: &std::path::Path) {
    let big = dir.join("big");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&big, &data).unwrap();
    let put = json_out(&tomus(
        addr,
        &[
            "fs",
            "put",
            big.to_str().unwrap(),
            "/runs/r1/big.bin",
            "--chunk-size",
            "64KiB",
            "--json",
        ],
    ));
    assert_eq!(
        (put["version"].as_u64(), put["size"].as_u64()),
        (Some(1), Some(300_000))
    );
    let back = dir.join("back");
    let get = tomus(
        addr,
        &["fs", "get", "/runs/r1/big.bin", back.to_str().unwrap()],
    );
    assert!(get.status.success());
    assert_eq!(std::fs::read(&back).unwrap(), data);

    let small = dir.join("small");
    std::fs::write(&small, b"short").unwrap();
    let put = tomus(
        addr,
        &["fs", "put", small.to_str().unwrap(), "runs/r1/big.bin"],
    );
    assert_eq!(
        String::from_utf8_lossy(&put.stdout).trim(),
        "put /runs/r1/big.bin: version 2, 5 B"
    );
    assert_eq!(
        tomus(addr, &["fs", "cat", "runs/r1/big.bin"]).stdout,
        b"short"
    );
    let v1 = tomus(
        addr,
        &[
            "fs",
            "cat",
            "runs/r1/big.bin",
            "--version",
            "1",
            "--offset",
            "299998",
        ],
    );
    assert_eq!(v1.stdout, &data[299_998..]);
    for expect in [
        "append /logs/a: version 1 at offset 0, 5 B",
        "append /logs/a: version 2 at offset 5, 5 B",
    ] {
        let put = tomus(
            addr,
            &["fs", "put", small.to_str().unwrap(), "/logs/a", "--append"],
        );
        assert_eq!(String::from_utf8_lossy(&put.stdout).trim(), expect);
    }

    tomus(addr, &["fs", "mv", "/runs", "/archive/runs"]);
    let ls = json_out(&tomus(addr, &["fs", "ls", "-r", "/", "--json"]));
    let paths: Vec<&str> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/archive",
            "/archive/runs",
            "/archive/runs/r1",
            "/archive/runs/r1/big.bin",
            "/logs",
            "/logs/a"
        ]
    );
    assert_eq!(ls[5]["size"], Value::from(10));
    let rm = tomus(addr, &["fs", "rm", "/archive"]);
    assert_eq!(rm.status.code(), Some(2), "a non-empty directory needs -r");
    assert!(tomus(addr, &["fs", "rm", "-r", "/archive"])
        .status
        .success());
    assert_eq!(
        tomus(addr, &["fs", "cat", "/archive/runs/r1/big.bin"])
            .status
            .code(),
        Some(3)
    );
}

/// `tomus status` lists every background worker of the manager process (committer, leases,
/// retention, abandoned new files, the backup and geo-replication services) and of maintenance (gc, repair, audit), with
/// what each has done, as text and as JSON: background work runs behind one worker
/// abstraction that status can show (issue 20).
#[test]
fn status_lists_the_workers_of_the_manager_and_of_maintenance() {
    let tc = common::TestCluster::start_with(2, |s| {
        s.manager_args = common::fast_maintenance(2000);
    });
    let addr = tc.addr();
    let names = |workers: &Value| -> Vec<String> {
        let mut n: Vec<String> = workers
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    // Until maintenance has reported rounds of its gc and repair workers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        let status = json_out(&tomus(&addr, &["status", "--json"]));
        let rounds = |name: &str| {
            status["maintenance"]["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["name"] == name)
                .map_or(0, |w| w["rounds"].as_u64().unwrap())
        };
        if rounds("gc") > 0 && rounds("repair") > 0 {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "maintenance reported no rounds: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        names(&status["workers"]),
        [
            "abandoned new files",
            "backup",
            "committer",
            "geo-replication",
            "leases",
            "registered copies",
            "retention",
            "row purge"
        ],
        "{status}"
    );
    assert_eq!(
        names(&status["maintenance"]["workers"]),
        ["audit", "gc", "repair"],
        "{status}"
    );
    // Each says what it is doing; none has stopped.
    let all = status["workers"].as_array().unwrap().iter();
    for w in all.chain(status["maintenance"]["workers"].as_array().unwrap()) {
        assert_ne!(w["state"], "stopped", "{w}");
        assert!(!w["state"].as_str().unwrap().is_empty(), "{w}");
    }

    let out = tomus(&addr, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "committer",
        "leases",
        "retention",
        "abandoned new files",
        "backup",
        "geo-replication",
        "registered copies",
        "row purge",
    ] {
        assert!(
            text.contains(&format!("manager worker {name}")),
            "no manager worker {name} in:\n{text}"
        );
    }
    for name in ["gc", "repair", "audit"] {
        assert!(
            text.contains(&format!("maintenance worker {name}")),
            "no maintenance worker {name} in:\n{text}"
        );
    }
}
