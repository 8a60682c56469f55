//! Hostile clients against real manager and provider processes: garbage and truncated
//! frames, huge declared lengths, requests of the wrong type or service, absurd counts,
//! thousands of idle connections and slow-drip senders. After each attack the server still
//! serves a legitimate client, and its memory stays bounded.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tomus_cli::embedded::ClusterSpec;
use tomus_cli::pattern;
use tomus_client::Client;
use tomus_metadata::{ChunkId, Node, NodeKey, NodeRef};
use tomus_wire::maintenance::{Fates, RecordReplicas, ReportMaintenance};
use tomus_wire::manager::{Allocate, ChunkReplicas, FsList, Register};
use tomus_wire::provider::{
    CopyChunk, DeleteChunks, GetNodes, GetPath, ListChunks, PutChunk, PutSmallWrite,
};
use tomus_wire::rpc::encode;
use tomus_wire::{
    checksum, Envelope, ErrorKind, MaintenanceStatus, Placement, Pool, ProviderReport, Rpc,
    RpcConfig,
};

use common::TestCluster;

/// Servers with small limits, so attacks reach them quickly.
const MAX_CONNECTIONS: usize = 64;
const IDLE_MS: u64 = 3000;
const FRAME_MS: u64 = 1500;

fn limits() -> Vec<String> {
    [
        "--max-connections",
        &MAX_CONNECTIONS.to_string(),
        "--idle-timeout-ms",
        &IDLE_MS.to_string(),
        "--frame-timeout-ms",
        &FRAME_MS.to_string(),
        "--max-in-flight",
        "256MiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn cluster() -> TestCluster {
    TestCluster::start_with(2, |spec: &mut ClusterSpec| {
        spec.manager_args = limits();
        spec.manager_args.push("--no-maintenance".into());
        spec.provider_args = limits();
    })
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb << 10
}

/// A raw connection that passed the handshake (servers on loopback ask for no secret).
fn raw(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The client's hello: magic, protocol version, CR LF CR LF.
    s.write_all(&tomus_wire::auth::CLIENT_HELLO).unwrap();
    let mut hello = [0u8; 38];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..4], b"TOMS");
    s.write_all(&[0u8; 64]).unwrap();
    let mut answer = [0u8; 33];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], 0, "handshake refused");
    s
}

fn frame(header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(header.len() as u32).to_le_bytes());
    f.extend_from_slice(&(body.len() as u64).to_le_bytes());
    f.extend_from_slice(header);
    f.extend_from_slice(body);
    f
}

/// Reads frames until the server closes the connection; whether it did within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
        if started.elapsed() > within {
            return false;
        }
    }
}

/// A legitimate client writes and reads back through the cluster.
async fn still_serves(addr: &str, seed: u64) {
    let client = Client::connect(addr, Default::default())
        .await
        .expect("a legitimate client cannot connect");
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let data = pattern::generate(seed, 200_000);
    let v = blob.write(0, &data).await.unwrap();
    assert_eq!(
        blob.read(0, data.len() as u64, Some(v)).await.unwrap(),
        data
    );
}

fn servers(tc: &TestCluster) -> Vec<(String, u32)> {
    let mut out = vec![(tc.addr(), tc.cluster.manager_pid().unwrap())];
    for i in 0..tc.cluster.provider_count() {
        let addr = tc.cluster.provider_addr(i).to_string();
        out.push((addr, tc.cluster.provider_pid(i).unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_truncated_and_mistyped_frames_are_answered_or_dropped() {
    let tc = cluster();
    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    for (addr, pid) in servers(&tc) {
        let before = rss(pid);
        for round in 0..200 {
            let mut s = raw(&addr);
            match round % 5 {
                // Random bytes.
                0 => {
                    let n = rng.gen_range(1..5000);
                    let junk: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                    let _ = s.write_all(&junk);
                }
                // A whole frame whose header is random.
                1 => {
                    let n = rng.gen_range(0..300);
                    let header: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                    let _ = s.write_all(&frame(&header, b""));
                }
                // A frame cut short.
                2 => {
                    let f = frame(&[7u8; 200], &[1u8; 1000]);
                    let cut = rng.gen_range(1..f.len());
                    let _ = s.write_all(&f[..cut]);
                }
                // Lengths past the limits.
                3 => {
                    let mut f = Vec::new();
                    f.extend_from_slice(&u32::MAX.to_le_bytes());
                    f.extend_from_slice(&u64::MAX.to_le_bytes());
                    let _ = s.write_all(&f);
                }
                // A well-formed request for the other kind of server.
                _ => {
                    let wrong: Envelope = if addr == tc.addr() {
                        PutChunk {
                            id: ChunkId(5),
                            crc: 0,
                        }
                        .into_envelope()
                    } else {
                        FsList {
                            path: "".into(),
                            recursive: true,
                            start_after: None,
                            limit: 10,
                        }
                        .into_envelope()
                    };
                    s.write_all(&frame(&encode(&wrong).unwrap(), b"x")).unwrap();
                }
            }
            drop(s);
        }
        let grown = rss(pid).saturating_sub(before);
        assert!(grown < 64 << 20, "{addr} grew by {grown} bytes");
    }
    // A request of the wrong service gets a typed error, and the connection goes on.
    let pool = Pool::new(RpcConfig::default());
    let e = pool
        .call(
            &tc.addr(),
            PutChunk {
                id: ChunkId(5),
                crc: 0,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    still_serves(&tc.addr(), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_declared_lengths_allocate_nothing_they_are_not_sent() {
    let tc = cluster();
    let (addr, pid) = servers(&tc)[1].clone();
    let manager_pid = tc.cluster.manager_pid().unwrap();
    let before = (rss(pid), rss(manager_pid));
    let mut held = Vec::new();
    for i in 0..40 {
        for target in [&addr, &tc.addr()] {
            let mut s = raw(target);
            let mut prefix = Vec::new();
            // A 64 MiB header, or a 128 MiB body after a small header.
            if i % 2 == 0 {
                prefix.extend_from_slice(&(64u32 << 20).to_le_bytes());
                prefix.extend_from_slice(&0u64.to_le_bytes());
                prefix.extend_from_slice(&[1u8; 1024]);
            } else {
                let header = encode(
                    &PutChunk {
                        id: ChunkId(9),
                        crc: 0,
                    }
                    .into_envelope(),
                )
                .unwrap();
                prefix.extend_from_slice(&(header.len() as u32).to_le_bytes());
                prefix.extend_from_slice(&(128u64 << 20).to_le_bytes());
                prefix.extend_from_slice(&header);
                prefix.extend_from_slice(&[1u8; 1024]);
            }
            s.write_all(&prefix).unwrap();
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Legitimate clients are served meanwhile: small requests never wait for the budget,
    // and large ones wait only until the stalled senders' frames are late.
    still_serves(&tc.addr(), 2).await;
    let started = Instant::now();
    let client = Client::connect(&tc.addr(), Default::default())
        .await
        .unwrap();
    let big = client.create_blob(4 << 20, 1).await.unwrap();
    let data = pattern::generate(7, 12 << 20);
    let v = big.write(0, &data).await.unwrap();
    assert_eq!(big.read(0, data.len() as u64, Some(v)).await.unwrap(), data);
    assert!(
        started.elapsed() < Duration::from_millis(FRAME_MS * 4 + 5000),
        "a large write waited {:?} behind stalled senders",
        started.elapsed()
    );
    let grown = (
        rss(pid).saturating_sub(before.0),
        rss(manager_pid).saturating_sub(before.1),
    );
    assert!(
        grown.0 < 64 << 20 && grown.1 < 64 << 20,
        "declared lengths grew the provider by {} and the manager by {} bytes",
        grown.0,
        grown.1
    );
    // The senders are cut off once their frames are late.
    let deadline = Duration::from_millis(FRAME_MS * 3 + 2000);
    for s in held.iter_mut() {
        assert!(closed_within(s, deadline), "a stalled frame was kept");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_lock_clients_out() {
    let tc = cluster();
    // Thousands of idle connections, far more than either server serves at once (as many as
    // this process may open, with room for its own files).
    let room = tomus_wire::server::descriptor_limit().saturating_sub(256) as usize;
    let per_server = (room / servers(&tc).len()).min(1000);
    assert!(
        per_server >= MAX_CONNECTIONS * 3,
        "the open-file limit leaves room for only {per_server} connections per server"
    );
    let mut idle: Vec<TcpStream> = Vec::new();
    for _ in 0..per_server {
        for (addr, _) in servers(&tc) {
            if let Ok(mut s) = TcpStream::connect(&addr) {
                let mut hello = [0u8; 38];
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                if s.read_exact(&mut hello).is_ok() {
                    let _ = s.write_all(&[0u8; 64]);
                    idle.push(s);
                }
            }
        }
    }
    // The servers close the idle ones that stand in the way.
    still_serves(&tc.addr(), 3).await;
    still_serves(&tc.addr(), 4).await;
    // And every idle connection once its idle time is up.
    let deadline = Duration::from_millis(IDLE_MS + 3000);
    let started = Instant::now();
    for s in idle.iter_mut() {
        let left = deadline
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(10));
        assert!(closed_within(s, left), "an idle connection was kept");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_drip_senders_are_cut_off() {
    let tc = cluster();
    let mut dripping = Vec::new();
    for (addr, _) in servers(&tc) {
        let mut s = raw(&addr);
        let header = encode(
            &FsList {
                path: "".into(),
                recursive: false,
                start_after: None,
                limit: 1,
            }
            .into_envelope(),
        )
        .unwrap();
        let f = frame(&header, b"");
        s.write_all(&f[..3]).unwrap();
        dripping.push((s, f));
    }
    let started = Instant::now();
    let mut cut = vec![false; dripping.len()];
    while cut.iter().any(|c| !c) {
        assert!(
            started.elapsed() < Duration::from_millis(FRAME_MS * 4),
            "a slow-drip frame was accepted for {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        for (i, (s, f)) in dripping.iter_mut().enumerate() {
            if cut[i] {
                continue;
            }
            let at = 3 + (started.elapsed().as_millis() / 400) as usize;
            if s.write_all(&f[at.min(f.len() - 1)..at.min(f.len() - 1) + 1])
                .is_err()
                || closed_within(s, Duration::from_millis(1))
            {
                cut[i] = true;
            }
        }
    }
    still_serves(&tc.addr(), 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_counts_get_typed_errors() {
    let tc = cluster();
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let pool = Pool::new(RpcConfig::default());
    let manager = tc.addr();
    let provider = tc.cluster.provider_addr(0).to_string();
    let before = (
        rss(tc.cluster.manager_pid().unwrap()),
        rss(tc.cluster.provider_pid(0).unwrap()),
    );
    let invalid = |r: tomus_wire::Result<_>, what: &str| {
        let e = r.err().unwrap_or_else(|| panic!("{what} was accepted"));
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{what}: {e}");
    };

    for chunk_bytes in [Some(0), None] {
        let req = Allocate {
            blob: blob.id(),
            chunks: u32::MAX,
            chunk_bytes,
            placement: Placement::Balanced,
            client_host: None,
            avoid: Vec::new(),
        };
        invalid(
            pool.call(&manager, req).await.map(|_| ()),
            "Allocate u32::MAX",
        );
    }
    let req = Allocate {
        blob: blob.id(),
        chunks: 3,
        chunk_bytes: Some(0),
        placement: Placement::Balanced,
        client_host: None,
        avoid: Vec::new(),
    };
    invalid(
        pool.call(&manager, req).await.map(|_| ()),
        "chunks of 0 bytes",
    );
    let req = ChunkReplicas {
        chunks: vec![ChunkId(1); 1_000_000],
    };
    invalid(
        pool.call(&manager, req).await.map(|_| ()),
        "1M replica lookups",
    );
    let req = Fates {
        items: vec![(blob.id(), 1); 1_000_000],
    };
    invalid(pool.call(&manager, req).await.map(|_| ()), "1M fates");
    let req = RecordReplicas {
        entries: vec![(ChunkId(1), vec![1; 1000])],
    };
    invalid(pool.call(&manager, req).await.map(|_| ()), "1000 replicas");
    let req = Register {
        id: None,
        key: 1,
        addr: "x".repeat(1 << 20),
        report: ProviderReport {
            capacity: 0,
            free: 0,
            chunks: 0,
            load: 0,
            lost: Vec::new(),
            stored_bytes: 0,
            fault: None,
        },
        cluster: None,
    };
    invalid(
        pool.call(&manager, req).await.map(|_| ()),
        "a 1 MiB address",
    );
    let req = ReportMaintenance {
        status: Box::new(MaintenanceStatus {
            draining: vec![(1, 1); 1_000_000],
            ..Default::default()
        }),
    };
    invalid(pool.call(&manager, req).await.map(|_| ()), "1M draining");
    // A listing asking for everything gets a page.
    let req = FsList {
        path: "".into(),
        recursive: true,
        start_after: None,
        limit: u32::MAX,
    };
    pool.call(&manager, req).await.unwrap();

    let key = NodeKey {
        blob: blob.id(),
        node: NodeRef {
            version: 1,
            offset: 0,
            size: 64 << 10,
        },
    };
    let req = GetNodes {
        keys: vec![key; 1_000_000],
    };
    invalid(pool.call(&provider, req).await.map(|_| ()), "1M node keys");
    let req = GetPath {
        blob: blob.id(),
        start: key.node,
        targets: vec![key.node.span(); 10_000],
        limit: u32::MAX,
    };
    invalid(
        pool.call(&provider, req).await.map(|_| ()),
        "10k path targets",
    );
    let req = DeleteChunks {
        ids: vec![ChunkId(3); 1_000_000],
    };
    invalid(pool.call(&provider, req).await.map(|_| ()), "1M deletes");
    let req = CopyChunk {
        id: ChunkId(4),
        len: u64::MAX,
        from: vec![manager.clone()],
    };
    invalid(
        pool.call(&provider, req).await.map(|_| ()),
        "a copy of 2^64 bytes",
    );
    let req = CopyChunk {
        id: ChunkId(4),
        len: 10,
        from: vec![manager.clone(); 1000],
    };
    invalid(
        pool.call(&provider, req).await.map(|_| ()),
        "1000 copy sources",
    );
    let e = pool
        .call_with_body(
            &provider,
            PutChunk {
                id: ChunkId(6),
                crc: 0,
            },
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    // A small write whole: refused when empty, larger than a small chunk, of the reserved
    // id, with too many nodes, or damaged on the way; nothing of it is stored.
    let small = |id: u128, crc: u32, nodes: usize| PutSmallWrite {
        nodes: vec![
            (
                key,
                Node::Inner {
                    left: None,
                    right: None
                }
            );
            nodes
        ],
        id: ChunkId(id),
        crc,
    };
    let data = vec![7u8; 4096];
    for (req, body, what) in [
        (small(8, 0, 1), &data[..0], "an empty small write"),
        (
            small(8, 0, 1),
            &vec![7u8; (64 << 10) + 1][..],
            "a small write over 64 KiB",
        ),
        (
            small(0, checksum::crc32c(&data), 1),
            &data[..],
            "chunk id 0",
        ),
        (
            small(8, checksum::crc32c(&data), 1_000_000),
            &data[..],
            "1M nodes",
        ),
    ] {
        let e = pool.call_with_body(&provider, req, body).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{what}: {e}");
    }
    // A damaged body stores none of the nodes it carries either: the node it names keeps
    // what it held.
    let node_at = || pool.call(&provider, GetNodes { keys: vec![key] });
    let held_before = node_at().await.unwrap();
    let damaged = small(9, checksum::crc32c(&data) ^ 1, 1);
    let e = pool
        .call_with_body(&provider, damaged, &data)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert_eq!(
        node_at().await.unwrap(),
        held_before,
        "a damaged small write stored its nodes"
    );
    let held = pool
        .call(
            &provider,
            ListChunks {
                start_after: None,
                limit: 1000,
            },
        )
        .await
        .unwrap();
    assert!(
        held.entries
            .iter()
            .all(|c| c.id != ChunkId(8) && c.id != ChunkId(9)),
        "a refused small write stored its chunk"
    );

    let grown = (
        rss(tc.cluster.manager_pid().unwrap()).saturating_sub(before.0),
        rss(tc.cluster.provider_pid(0).unwrap()).saturating_sub(before.1),
    );
    assert!(
        grown.0 < 256 << 20 && grown.1 < 256 << 20,
        "absurd requests grew the manager by {} and the provider by {} bytes",
        grown.0,
        grown.1
    );
    still_serves(&manager, 6).await;
}
