//! A randomized fault test: concurrent appenders, writers and readers run while a nemesis
//! kills providers (for good, replaced by fresh ones, or restarted), corrupts chunk files and
//! kills the manager. The history of acknowledged operations is then checked: every
//! acknowledged append is readable at its version with its bytes, versions publish in order,
//! and every read of a version returned the same bytes.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tomus_cli::pattern;
use tomus_client::{Blob, Client, ClientOptions};
use tomus_wire::manager::GetStatus;

use common::{chunk_files, TestCluster};

const CHUNK: u64 = 64 << 10;
const RUN: Duration = Duration::from_secs(20);
/// Faults injected at least, even when the run outlasts [`RUN`].
const MIN_FAULTS: u32 = 4;

#[derive(Default)]
struct History {
    /// Blobs made by the creators.
    created: Vec<Created>,
    /// Acknowledged appends: (version, offset, data).
    appends: Vec<(u64, u64, Vec<u8>)>,
    /// Hash of the whole content of each version of the overwritten blob a reader saw.
    seen: HashMap<u64, u64>,
    /// Reads that returned bytes different from what was acknowledged or seen before.
    violations: Vec<String>,
}

/// A blob a creator wrote whole contents into, each longer than the one before.
struct Created {
    blob: u64,
    /// Hash and length of the last acknowledged content, then of every later attempt whose
    /// write failed: a failed write's outcome is unknown (the manager may have published it
    /// before a crash or a timeout cut the answer), so the blob may hold any of these.
    candidates: Vec<(u64, u64)>,
    /// The errors of those failed writes, shown if the blob holds none of the candidates.
    errors: Vec<String>,
}

fn hash(data: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

async fn connect(addr: &str) -> Client {
    let options = ClientOptions {
        request_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    Client::connect(addr, options).await.expect("connect")
}

/// Waits (bounded) for a maintenance pass started after now to find nothing to repair.
async fn settle(addr: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let client = loop {
        if let Ok(c) = Client::connect(addr, ClientOptions::default()).await {
            break c;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut since = None;
    while Instant::now() < deadline {
        if let Ok(s) = client.manager_call(GetStatus {}).await {
            let start = *since.get_or_insert(s.now_ms);
            if s.maintenance.repaired_since(start) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Ok(s) = client.manager_call(GetStatus {}).await {
        eprintln!(
            "maintenance did not settle: {:?}; providers (id, alive, draining) {:?}",
            s.maintenance,
            s.providers
                .iter()
                .map(|p| (p.id, p.alive, p.draining))
                .collect::<Vec<_>>()
        );
    }
    false
}

async fn appender(blob: Blob, seed: u64, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let len = rng.gen_range(1..200_000);
        let data = pattern::generate(seed.wrapping_mul(1_000_003).wrapping_add(i), len);
        i += 1;
        if let Ok((v, off)) = blob.append(&data).await {
            history.lock().unwrap().appends.push((v, off, data));
        }
    }
}

async fn append_reader(
    blob: Blob,
    seed: u64,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    reads: Arc<AtomicU64>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let pick = {
            let h = history.lock().unwrap();
            (!h.appends.is_empty()).then(|| h.appends[rng.gen_range(0..h.appends.len())].clone())
        };
        let Some((v, off, data)) = pick else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        // A later version must show the same bytes there as well.
        let version = if rng.gen_bool(0.5) { Some(v) } else { None };
        if let Ok(back) = blob.read(off, data.len() as u64, version).await {
            reads.fetch_add(1, Ordering::Relaxed);
            if back != data {
                history.lock().unwrap().violations.push(format!(
                    "append of version {v} at {off} read back different bytes at {version:?}"
                ));
            }
        }
    }
}

async fn overwriter(blob: Blob, seed: u64, stop: Arc<AtomicBool>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let off = rng.gen_range(0..2_000_000);
        let data = pattern::generate(
            seed.wrapping_mul(1_000_003).wrapping_add(i),
            rng.gen_range(1..150_000),
        );
        i += 1;
        let _ = blob.write(off, &data).await;
    }
}

async fn snapshot_reader(
    blob: Blob,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    reads: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(info) = blob.stat(None).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if let Ok(content) = blob.read(0, info.size, Some(info.version)).await {
            reads.fetch_add(1, Ordering::Relaxed);
            let h = hash(&content);
            let mut hist = history.lock().unwrap();
            if let Some(prev) = hist.seen.insert(info.version, h) {
                if prev != h {
                    hist.violations
                        .push(format!("version {} read two different ways", info.version));
                }
            }
        }
    }
}

/// Creates blobs and files concurrently with everyone else and rewrites them under retention,
/// and deletes some files: blob creation, publication, expiry and deletion race with the
/// maintenance passes.
async fn creator(client: Client, seed: u64, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut n = 0u64;
    let ns = client.namespace();
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let Ok(blob) = client.create_blob(CHUNK, 2).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut candidates = Vec::new();
        let mut errors = Vec::new();
        for round in 0..3u64 {
            let data = pattern::generate(seed ^ (n << 8) ^ round, 1000 + (round as usize) * 70_000);
            let outcome = blob.write(0, &data).await;
            if outcome.is_ok() {
                candidates.clear();
                errors.clear();
            }
            candidates.push((hash(&data), data.len() as u64));
            if let Err(e) = outcome {
                errors.push(format!("round {round}: {e}"));
            }
            if round == 0 {
                let keep = tomus_wire::manager::SetRetention {
                    blob: blob.id(),
                    retention: tomus_wire::Retention::KeepLast(1),
                };
                let _ = client.manager_call(keep).await;
            }
        }
        // Only blobs with an acknowledged write are checked: the first candidate is then
        // acknowledged, the rest are later attempts that failed.
        if errors.len() < candidates.len() {
            history.lock().unwrap().created.push(Created {
                blob: blob.id(),
                candidates,
                errors,
            });
        }
        // A file made and deleted: its blob's data goes while the others' stays.
        let path = format!("nemesis/{seed}/{n}");
        let options = tomus_client::CreateOptions {
            chunk_size: CHUNK,
            replication: 2,
            ..Default::default()
        };
        if let Ok((_, file)) = ns.create(&path, options).await {
            let _ = file.write(0, &pattern::generate(n, 5000)).await;
            let _ = ns.delete(&path, false).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nemesis() {
    let seed: u64 = std::env::var("TOMUS_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("nemesis seed {seed} (TOMUS_NEMESIS_SEED reruns it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tc = TestCluster::start_with(5, |s| {
        s.heartbeat_ms = 200;
        s.writer_lease_ms = Some(2000);
        // Fast passes and audits: creations, expiry and deletions race with collection.
        let mut args = common::fast_maintenance(600_000);
        args[7] = "2000".into();
        s.manager_args = args;
    });
    let client = connect(&tc.addr()).await;
    let appended = client.create_blob(CHUNK, 2).await.unwrap();
    let overwritten = client.create_blob(CHUNK, 2).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(History::default()));
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(tokio::spawn(appender(
            appended.clone(),
            seed ^ (i + 1),
            stop.clone(),
            history.clone(),
        )));
    }
    tasks.push(tokio::spawn(append_reader(
        appended.clone(),
        seed ^ 11,
        stop.clone(),
        history.clone(),
        reads.clone(),
    )));
    for i in 0..2 {
        tasks.push(tokio::spawn(overwriter(
            overwritten.clone(),
            seed ^ (21 + i),
            stop.clone(),
        )));
    }
    tasks.push(tokio::spawn(snapshot_reader(
        overwritten.clone(),
        stop.clone(),
        history.clone(),
        reads.clone(),
    )));
    for i in 0..2 {
        tasks.push(tokio::spawn(creator(
            client.clone(),
            seed ^ (31 + i),
            stop.clone(),
            history.clone(),
        )));
    }

    // One fault at a time, each healed and repaired before the next (R=2 survives one).
    let started = Instant::now();
    let mut faults: HashMap<&str, u32> = HashMap::new();
    // At least MIN_FAULTS, however long repair after each takes (it grows with the data the
    // writers managed to store).
    while started.elapsed() < RUN || faults.values().sum::<u32>() < MIN_FAULTS {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..1200))).await;
        let running: Vec<usize> = (0..tc.cluster.provider_count())
            .filter(|&i| tc.cluster.is_running(i))
            .collect();
        let kind = match rng.gen_range(0..4) {
            0 => {
                let i = running[rng.gen_range(0..running.len())];
                tc.cluster.kill_provider(i);
                tc.cluster.add_provider().expect("add a provider");
                "provider lost, new one joined"
            }
            1 => {
                let i = running[rng.gen_range(0..running.len())];
                tc.cluster.kill_provider(i);
                tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2500))).await;
                tc.cluster.start_provider(i).expect("restart provider");
                "provider restarted"
            }
            2 => {
                let i = running[rng.gen_range(0..running.len())];
                let files = chunk_files(&tc.cluster.provider_dir(i));
                if files.is_empty() {
                    continue;
                }
                let path = &files[rng.gen_range(0..files.len())];
                if let Ok(mut bytes) = std::fs::read(path) {
                    let at = rng.gen_range(bytes.len() / 2..bytes.len());
                    bytes[at] ^= 0x77;
                    let _ = std::fs::write(path, &bytes);
                }
                "chunk file corrupted"
            }
            _ => {
                tc.cluster.kill_manager();
                tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1000))).await;
                tc.cluster.start_manager().expect("restart manager");
                "manager restarted"
            }
        };
        *faults.entry(kind).or_default() += 1;
        if kind == "chunk file corrupted" {
            // Corruption is found by reads or scrub; scrub now so repair sees it.
            let out = std::process::Command::new(common::exe())
                .args(["--addr", &tc.addr(), "scrub"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            settle(&tc.addr(), Duration::from_secs(40)).await,
            "no repair after {kind}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        settle(&tc.addr(), Duration::from_secs(40)).await,
        "no repair at the end"
    );

    // Check the history against a fresh client.
    let client = connect(&tc.addr()).await;
    let a = client.open_blob(appended.id()).await.unwrap();
    let b = client.open_blob(overwritten.id()).await.unwrap();
    let hist = std::mem::take(&mut *history.lock().unwrap());
    assert!(hist.violations.is_empty(), "{:?}", hist.violations);
    let mut checked = 0;
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (v, off, data) in &hist.appends {
        assert_eq!(
            &a.read(*off, data.len() as u64, Some(*v)).await.unwrap(),
            data,
            "append v{v}"
        );
        assert_eq!(
            &a.read(*off, data.len() as u64, None).await.unwrap(),
            data,
            "append v{v} at latest"
        );
        spans.push((*off, *off + data.len() as u64));
        checked += 1;
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "acknowledged appends overlap: {w:?}");
    }
    let list = a.versions().await.unwrap().versions;
    for w in list.windows(2) {
        assert!(
            w[0].version < w[1].version && w[0].size <= w[1].size,
            "{w:?}"
        );
    }
    for (v, h) in &hist.seen {
        let info = b.stat(Some(*v)).await.unwrap();
        assert_eq!(
            hash(&b.read(0, info.size, Some(*v)).await.unwrap()),
            *h,
            "version {v}"
        );
        checked += 1;
    }
    for c in &hist.created {
        let blob = client.open_blob(c.blob).await.unwrap();
        let info = blob.stat(None).await.unwrap();
        let h = hash(&blob.read(0, info.size, None).await.unwrap());
        assert!(
            c.candidates.contains(&(h, info.size)),
            "created blob {} holds {} bytes at version {} that match neither its last \
             acknowledged write nor a later failed one: candidates (hash, len) {:?}, \
             failed writes {:?}, versions {:?}",
            c.blob,
            info.size,
            info.version,
            c.candidates,
            c.errors,
            blob.versions().await.map(|l| l.versions)
        );
        checked += 1;
    }
    let injected: u32 = faults.values().sum();
    eprintln!(
        "nemesis: {injected} faults {faults:?}; {} acknowledged appends, {} snapshot versions, \
         {} blobs created, {} reads during the run, {checked} checks after it; 0 lost",
        hist.appends.len(),
        hist.created.len(),
        hist.seen.len(),
        reads.load(Ordering::Relaxed)
    );
    assert!(injected >= MIN_FAULTS, "only {injected} faults injected");
    assert!(
        hist.appends.len() >= 20,
        "only {} appends acknowledged",
        hist.appends.len()
    );
}
