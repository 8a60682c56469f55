//! Test harness: an embedded cluster of real `tomus` processes on loopback in a scratch dir.
#![allow(dead_code)]

pub mod backup;
pub mod emulators;
pub mod hosts;

use std::path::PathBuf;

use tomus_cli::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use tomus_client::{Client, ClientOptions};

pub struct TestCluster {
    pub cluster: EmbeddedCluster,
    pub dir: PathBuf,
}

impl TestCluster {
    pub fn start(providers: usize) -> Self {
        Self::start_with(providers, |_| {})
    }

    pub fn start_with(providers: usize, tweak: impl FnOnce(&mut ClusterSpec)) -> Self {
        let dir = tomus_cli::scratch_dir("test");
        let mut spec = ClusterSpec::new(&dir, providers);
        spec.heartbeat_ms = 200;
        tweak(&mut spec);
        let cluster =
            EmbeddedCluster::start(&Launcher::binary(exe()), spec).expect("start cluster");
        TestCluster { cluster, dir }
    }

    pub fn addr(&self) -> String {
        self.cluster.addr.clone()
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.cluster.addr, ClientOptions::default())
            .await
            .expect("connect")
    }

    /// A client that reads and writes every chunk through its provider's socket, never
    /// through the provider's files (tests of what happens on the network path).
    pub async fn client_through_providers(&self) -> Client {
        let options = ClientOptions {
            local_reads: false,
            local_writes: false,
            ..ClientOptions::default()
        };
        Client::connect(&self.cluster.addr, options)
            .await
            .expect("connect")
    }
}

impl Drop for TestCluster {
    /// A failed test's cluster stays on disk, logs included, for the post-mortem.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "the cluster's data and logs are kept in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `tomus manager` arguments for fault tests: a provider is down after 1.5 s of silence,
/// maintenance passes run every 300 ms, repair is unthrottled, and garbage collection spares
/// chunks younger than `gc_grace_ms`.
pub fn fast_maintenance(gc_grace_ms: u64) -> Vec<String> {
    let mut args: Vec<String> = [
        "--provider-timeout-ms",
        "1500",
        "--maintenance-interval-ms",
        "300",
        "--repair-rate",
        "0",
        "--audit-interval-ms",
        "3000",
        "--gc-reuse-grace-ms",
        "2000",
        "--gc-grace-ms",
    ]
    .map(String::from)
    .to_vec();
    args.push(gc_grace_ms.to_string());
    args
}

/// A version for an append of `size` bytes to `blob`, straight from the manager at `addr`,
/// as a writer that then dies (or aborts) would get it.
pub async fn raw_assign(
    pool: &tomus_wire::Pool,
    addr: &str,
    blob: u64,
    size: u64,
) -> tomus_wire::Assignment {
    let assign = tomus_wire::manager::Assign {
        blob,
        op: tomus_wire::WriteOp::Append { size },
        attrs: Default::default(),
        expect_size: None,
        data: Default::default(),
    };
    pool.call(addr, assign).await.expect("assign")
}

pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tomus"))
}

/// Runs the `tomus` command against the manager at `addr`.
pub fn tomus(addr: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(exe())
        .env("TOMUS_ADDR", addr)
        .args(args)
        .output()
        .expect("run tomus")
}

/// The stdout of a command that must have succeeded.
pub fn ok(out: std::process::Output) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The JSON a command that must have succeeded printed.
pub fn json(out: std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&ok(out)).expect("the command printed JSON")
}

/// A command's stderr, as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file-per-chunk chunk under a provider's directory (not the small-chunk log segments).
pub fn chunk_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("chunks")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if !is_not_a_chunk(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The other files of a provider's chunk directory: temporary files, the small-chunk logs,
/// the memory-class journal of ids and the token of short-circuit reads.
fn is_not_a_chunk(p: &std::path::Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.contains(".tmp")
        || (name.starts_with("small-") && name.ends_with(".log"))
        || name == "memory-class.ids"
        || name == "local-read-token"
}

/// A port free on loopback now (the kernel picks it; a server binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Prometheus text a server's HTTP endpoint at `addr` serves on `/metrics`.
pub fn scrape_metrics(addr: &str) -> String {
    http_get(addr, "/metrics")
}

/// The whole HTTP/1.1 response (status line, headers, body) to a GET of `target`.
pub fn http_get(addr: &str, target: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Waits until the registered file `path`'s checksum is recorded (its holder computes it after
/// registering) and returns its `ls --json` row.
pub fn row_with_checksum(addr: &str, path: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let rows = json(tomus(addr, &["fs", "ls", path, "--json"]));
        let row = rows[0].clone();
        if !row["checksum"].is_null() {
            return row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checksum recorded: {row}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
