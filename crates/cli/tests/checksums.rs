//! End-to-end checksums: a provider reached through a link that damages bytes (a proxy that
//! flips one bit in every large read it forwards, in one direction). Chunk bodies damaged on
//! the way to the provider are refused before they are stored, and the write goes to another
//! provider; chunk bodies damaged on the way back are caught by the reader, which reads the
//! other replica. Without the checksums the first would store wrong bytes silently and the
//! second would return them.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tomus_cli::pattern;
use tomus_metadata::ChunkId;
use tomus_wire::provider::ListChunks;
use tomus_wire::{Pool, RpcConfig};

use common::{exe, TestCluster};

const CHUNK: u64 = 1 << 20;

/// What the proxy damages, and how often it did.
#[derive(Default)]
struct Damage {
    /// Bytes on their way to the provider (requests: chunk bodies being stored).
    up: AtomicBool,
    /// Bytes on their way back (answers: chunk bodies being read).
    down: AtomicBool,
    flipped_up: AtomicU64,
    flipped_down: AtomicU64,
}

/// The proxy flips one byte in every this many it forwards (at an odd offset within them):
/// nearly all bytes on these connections are chunk bodies, so nearly every flip lands in one.
const FLIP_EVERY: u64 = 512 << 10;
const FLIP_AT: u64 = 4321;

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    damage: Arc<Damage>,
    up: bool,
) {
    let mut buf = vec![0u8; 64 << 10];
    let mut forwarded = 0u64;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let on = if up { &damage.up } else { &damage.down };
        // The next position to damage: FLIP_AT into the next FLIP_EVERY bytes.
        let next = (forwarded / FLIP_EVERY) * FLIP_EVERY + FLIP_AT;
        let next = if next < forwarded {
            next + FLIP_EVERY
        } else {
            next
        };
        if on.load(Ordering::SeqCst) && next < forwarded + n as u64 {
            buf[(next - forwarded) as usize] ^= 0x10;
            let count = if up {
                &damage.flipped_up
            } else {
                &damage.flipped_down
            };
            count.fetch_add(1, Ordering::SeqCst);
        }
        forwarded += n as u64;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Forwards every connection to `listener` to `target`, damaging as `damage` says.
async fn proxy(listener: TcpListener, target: String, damage: Arc<Damage>) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(&target).await else {
            continue;
        };
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        tokio::spawn(pump(cr, sw, damage.clone(), true));
        tokio::spawn(pump(sr, cw, damage.clone(), false));
    }
}

/// A provider process listening on `listen` that registers with the manager under
/// `advertise` (the proxy's address); returns once it is registered.
fn provider_behind(manager: &str, dir: &std::path::Path, listen: &str, advertise: &str) -> Child {
    let mut child = Command::new(exe())
        .args(["--addr", listen, "provider", "--manager", manager, "--data"])
        .arg(dir)
        .args(["--advertise", advertise, "--heartbeat-ms", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the provider");
    let mut out = child.stdout.take().expect("its stdout");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while std::io::Read::read(&mut out, &mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8(line).expect("utf-8");
    assert_eq!(line, format!("tomus provider listening on {advertise}"));
    child
}

/// The chunks the provider listening on `addr` holds.
async fn held(addr: &str) -> Vec<ChunkId> {
    let req = ListChunks {
        start_after: None,
        limit: 1000,
    };
    let listing = Pool::new(RpcConfig::default())
        .call(addr, req)
        .await
        .unwrap();
    listing.entries.iter().map(|e| e.id).collect()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_transfers_are_refused_and_read_elsewhere() {
    let tc = TestCluster::start(2);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let advertised = listener.local_addr().unwrap().to_string();
    let dir = tc.dir.join("provider-behind-proxy");
    std::fs::create_dir_all(&dir).unwrap();
    // A free port for the provider itself (released just before it binds it).
    let real = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let _child = Killed(provider_behind(&tc.addr(), &dir, &real, &advertised));
    let damage = Arc::new(Damage::default());
    tokio::spawn(proxy(listener, real.clone(), damage.clone()));
    // Through the providers' sockets: a read from the files of a provider on this host would
    // not cross the damaging link at all.
    let client = tc.client_through_providers().await;
    for _ in 0..100 {
        if client
            .providers()
            .await
            .unwrap()
            .iter()
            .filter(|p| p.alive)
            .count()
            == 3
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Damaged on the way out: the reader notices and reads the other replica.
    let read = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(8, 12 * CHUNK as usize);
    read.write(0, &data).await.unwrap();
    damage.down.store(true, Ordering::SeqCst);
    for _ in 0..6 {
        let got = read.read(0, data.len() as u64, None).await.unwrap();
        assert!(got == data, "a read returned damaged bytes");
    }
    assert!(
        damage.flipped_down.load(Ordering::SeqCst) > 0,
        "no read went to the provider behind the proxy"
    );
    damage.down.store(false, Ordering::SeqCst);

    // Damaged on the way in: refused by the provider, stored elsewhere. A new client: this
    // one avoids the provider that sent it damaged bytes for a few seconds.
    let client = tc.client_through_providers().await;
    let before = held(&real).await;
    damage.up.store(true, Ordering::SeqCst);
    let stored = client.create_blob(CHUNK, 2).await.unwrap();
    let data = pattern::generate(7, 12 * CHUNK as usize);
    stored.write(0, &data).await.expect("the write fails over");
    damage.up.store(false, Ordering::SeqCst);
    assert!(
        damage.flipped_up.load(Ordering::SeqCst) > 0,
        "no chunk was sent to the provider behind the proxy: {:?}",
        client.providers().await
    );
    let after = held(&real).await;
    assert_eq!(
        after, before,
        "the provider stored chunks that arrived damaged"
    );
    assert_eq!(stored.read(0, data.len() as u64, None).await.unwrap(), data);
}
