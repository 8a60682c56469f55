//! `tomus s3` as a command next to a running cluster: it prints its address, serves HTTP with
//! request ids, and refuses to start without keys or on a non-loopback address without the
//! cluster secret. (The S3 API itself is tested with boto3 in python/tests/s3.)

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// A running `tomus s3`, stopped when dropped: a test that fails leaves no gateway behind.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A gateway next to the cluster at `manager` with `extra` arguments: the process and the
/// address it serves on.
fn start_gateway(manager: &str, extra: &[&str]) -> (Served, String) {
    let mut child = gateway(manager, "127.0.0.1:0", extra)
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
    (Served(child), addr)
}

/// A request without a body on a connection closed after the answer.
fn request(addr: &str, method: &str, path: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

#[test]
fn the_gateway_serves_next_to_a_cluster() {
    let tc = TestCluster::start(1);
    let (_served, addr) = start_gateway(&tc.addr(), &["--anonymous"]);
    let req = |method: &str, path: &str| request(&addr, method, path);
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
}

/// A cluster out of space answers 507 with a code of its own, not the 503 S3 clients retry
/// for minutes (here the manager's disk reserve is larger than any disk).
#[test]
fn a_full_cluster_answers_insufficient_storage() {
    let tc = TestCluster::start_with(1, |spec| {
        spec.manager_args = vec!["--min-free-space".into(), "16777215TiB".into()];
    });
    let (_served, addr) = start_gateway(&tc.addr(), &["--anonymous"]);
    let (status, body) = http(&addr, &request(&addr, "PUT", "/no-room"));
    assert!(status.contains(" 507 "), "{status}");
    assert!(body.contains("<Code>XTomusStorageFull</Code>"), "{body}");
    assert!(body.contains("--min-free-space"), "{body}");
    let (status, _) = http(&addr, &request(&addr, "GET", "/"));
    assert!(status.contains(" 200 "), "reads go on: {status}");
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

/// Connections that never send a byte cannot lock clients out of the gateway: at its cap
/// the oldest are closed to make room, and every one is closed after the idle timeout
/// (issue 20; before, such connections were kept forever and, once they filled the cap,
/// every new client was refused).
#[test]
fn silent_connections_cannot_lock_clients_out() {
    let tc = TestCluster::start(1);
    let limits = [
        "--anonymous",
        "--max-connections",
        "16",
        "--idle-timeout-ms",
        "1500",
    ];
    let (_served, addr) = start_gateway(&tc.addr(), &limits);
    // Four times the cap, each silent after connecting.
    let mut silent: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for round in 0..3 {
        let started = Instant::now();
        let (status, _) = http(&addr, &request(&addr, "GET", "/"));
        assert!(status.contains(" 200 "), "round {round}: {status:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "round {round}: a client waited {:?} behind silent connections",
            started.elapsed()
        );
    }
    // A request head dripped a byte at a time is cut off once the idle timeout passes,
    // however steadily the bytes come.
    let mut drip = TcpStream::connect(&addr).unwrap();
    let head = request(&addr, "GET", "/");
    let started = Instant::now();
    let mut cut = false;
    for b in head.as_bytes() {
        if drip.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_millis(1500 + 3000) {
            break;
        }
    }
    if !cut {
        // Closed by the gateway (whatever it said first), not kept waiting for the rest.
        drip.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut answer = Vec::new();
        match drip.read_to_end(&mut answer) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!(
                    "a head dripped over {:?} was kept waiting",
                    started.elapsed()
                )
            }
            Err(_) => {}
        }
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            !answer.contains(" 200 "),
            "a dripped head was answered: {answer}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // Every silent connection is closed: made room for others, or idle too long.
    let deadline = Instant::now() + Duration::from_millis(2 * 1500 + 3000);
    for (i, s) in silent.iter_mut().enumerate() {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        s.set_read_timeout(Some(left)).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e)
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!("silent connection {i} was kept: {other:?}"),
        }
    }
}

/// Sends an HTTP/1.1 request with `body`; waits up to a minute for the answer.
fn send(addr: &str, method: &str, path: &str, body: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.lines().next().unwrap_or_default().to_string();
    (status, out)
}

/// The text of the first `<tag>` element of `xml`.
fn element<'x>(xml: &'x str, tag: &str) -> &'x str {
    let open = format!("<{tag}>");
    let start = xml.find(&open).map(|i| i + open.len()).unwrap_or(0);
    let end = xml[start..].find('<').map_or(xml.len(), |i| start + i);
    &xml[start..end]
}

/// A multipart upload whose completion claimed it and whose gateway then died (the claim is
/// made by hand here, as the dead gateway left it): a retried completion finishes it and an
/// abort removes it, once the claim has been held for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_by_a_dead_completion_is_taken_over() {
    let tc = TestCluster::start(1);
    let (_served, addr) = start_gateway(&tc.addr(), &["--anonymous"]);
    let (status, _) = http(&addr, &request(&addr, "PUT", "/claims"));
    assert!(status.contains(" 200 "), "{status}");
    let internal = tc.client().await.internal_namespace();
    // Two uploads of one part each, both claimed by a completion that never ends.
    let mut uploads = Vec::new();
    for key in ["finished", "aborted"] {
        let (_, body) = send(&addr, "POST", &format!("/claims/{key}?uploads"), "");
        let id = element(&body, "UploadId").to_string();
        let part = format!("/claims/{key}?partNumber=1&uploadId={id}");
        let (status, head) = send(&addr, "PUT", &part, "the only part");
        assert!(status.contains(" 200 "), "{status}");
        let etag = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("etag: ")
                    .map(str::to_string)
            })
            .unwrap();
        let dir = format!(".tomus-uploads/claims/{id}");
        internal
            .rename(&format!("{dir}/upload"), &format!("{dir}/completing"))
            .await
            .unwrap();
        uploads.push((key, id, etag, dir));
    }
    let started = Instant::now();
    let retried = {
        let (addr, (key, id, etag, _)) = (addr.clone(), uploads[0].clone());
        std::thread::spawn(move || {
            let list = format!(
                "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag>\
                 </Part></CompleteMultipartUpload>"
            );
            send(
                &addr,
                "POST",
                &format!("/claims/{key}?uploadId={id}"),
                &list,
            )
        })
    };
    let (key, id, _, dir) = &uploads[1];
    let (status, _) = send(&addr, "DELETE", &format!("/claims/{key}?uploadId={id}"), "");
    assert!(status.contains(" 204 "), "{status}");
    assert!(
        started.elapsed() >= Duration::from_secs(29),
        "the abort did not wait for the claim"
    );
    assert!(
        internal.stat(dir).await.is_err(),
        "the aborted upload is still there"
    );
    let (status, body) = retried.join().unwrap();
    assert!(status.contains(" 200 "), "{status} {body}");
    let (status, body) = http(&addr, &request(&addr, "GET", "/claims/finished"));
    assert!(
        status.contains(" 200 ") && body.ends_with("the only part"),
        "{status}"
    );
    assert!(internal.stat(&uploads[0].3).await.is_err());
}
