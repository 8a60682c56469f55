//! `tomus s3` as a command next to a running cluster: it prints its address, serves HTTP with
//! request ids, and refuses to start without keys or on a non-loopback address without the
//! cluster secret. (The S3 API itself is tested with boto3 in python/tests/s3.)

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{exe, TestCluster};

/// Sends one HTTP/1.1 request and returns the status line and the whole response.
fn http(addr: &str, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.lines().next().unwrap_or_default().to_string();
    (status, out)
}

fn gateway(manager: &str, listen: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(exe());
    cmd.args(["s3", "--addr", manager, "--listen", listen])
        .args(extra)
        .env_remove("TOMUS_S3_ACCESS_KEY")
        .env_remove("TOMUS_S3_SECRET_KEY")
        .env_remove("TOMUS_CLUSTER_SECRET");
    cmd
}

#[test]
fn the_gateway_serves_next_to_a_cluster() {
    let tc = TestCluster::start(1);
    let mut child = gateway(&tc.addr(), "127.0.0.1:0", &["--anonymous"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tomus s3");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix("tomus s3 listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();

    let req = |method: &str, path: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    };
    let (status, _) = http(&addr, &req("PUT", "/made-by-cli"));
    assert!(status.contains(" 200 "), "{status}");
    let (status, body) = http(&addr, &req("GET", "/"));
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("<Name>made-by-cli</Name>"), "{body}");
    assert!(body.to_ascii_lowercase().contains("x-amz-request-id:"));
    let (status, body) = http(&addr, &req("GET", "/made-by-cli/missing"));
    assert!(status.contains(" 404 "), "{status}");
    assert!(body.contains("<Code>NoSuchKey</Code>") && body.contains("<RequestId>"));
    // The bucket is a directory of the namespace.
    let ls = Command::new(exe())
        .args(["fs", "ls", "--addr", &tc.addr()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&ls.stdout).contains("made-by-cli"));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_gateway_refuses_unsafe_configurations() {
    let tc = TestCluster::start(1);
    let out = gateway(&tc.addr(), "127.0.0.1:0", &[]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no S3 access keys"));

    let out = gateway(&tc.addr(), "0.0.0.0:0", &["--anonymous"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cluster secret"));

    let keys = tc.dir.join("keys");
    std::fs::write(&keys, "only-one-word\n").unwrap();
    let out = gateway(
        &tc.addr(),
        "127.0.0.1:0",
        &["--keys", keys.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}
