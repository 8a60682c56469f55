//! Multi-host fault tests: a manager on host 0 and four providers on hosts 1-4, each host a
//! Linux network namespace on one bridge (loopback when namespaces are not permitted; see
//! `common/hosts/`). The test process is the client, in the root namespace.
//!
//! Each scenario runs concurrent writes, appends and reads on a blob with replication 2 while
//! one provider fails (SIGKILL, or its link cut), then checks that every acknowledged version
//! reads back exactly as a model of the acknowledged operations says, that repair brings every
//! referenced chunk back to two copies on live providers (from the providers' own chunk
//! listings) and that `tomus status` reports nothing under-replicated in a pass that started
//! after the failure was detected.
//!
//! `cargo test -p tomus-cli --test netns -- --nocapture` prints the measured times.
//! `TOMUS_TEST_NO_NETNS=1` forces the loopback fallback; `TOMUS_TEST_KEEP=1` keeps the logs.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod repair;
mod verify;
mod workload;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tomus_cli::pattern;
use tomus_client::cluster::Cluster;
use tomus_client::dht::DhtSource;
use tomus_client::{Blob, Client, ClientOptions};
use tomus_metadata::{resolve_range, ChunkId, NodeRef, Segment, Span};
use tomus_wire::manager::GetStatus;
use tomus_wire::provider::ListChunks;
use tomus_wire::{ClusterStatus, Pool, ProviderInfo, RpcConfig, VersionInfo, VersionState};

use cluster::*;
use common::hosts::{Hosts, LinkSide};
use repair::*;
use verify::*;
use workload::*;

const PROVIDERS: usize = 4;
const CHUNK_SIZE: u64 = 64 << 10;
const REPLICATION: u32 = 2;
const PROVIDER_TIMEOUT_MS: u64 = 1500;
/// The concurrent workload, and when in it the fault strikes.
const WORKLOAD: Duration = Duration::from_secs(5);
const FAULT_AFTER: Duration = Duration::from_millis(1500);
/// Bytes the workload writes at most.
const WRITE_BUDGET: u64 = 40 << 20;
/// Bounds on detection, repair and a returning provider rejoining, from the fault. Repair
/// needs the provider timeout, a pass interval and a pass (a few seconds here; ~2.5 s after a
/// SIGKILL on a 2-core machine): 40 s is a generous bound that still fails a repair stalled
/// behind a long request timeout.
const DETECT_LIMIT: Duration = Duration::from_secs(20);
const REPAIR_LIMIT: Duration = Duration::from_secs(40);
const REJOIN_LIMIT: Duration = Duration::from_secs(20);
/// Reads in flight while verifying.
const VERIFY_PARALLELISM: usize = 8;

enum Fault {
    Kill,
    Cut(LinkSide),
}

struct Outcome {
    net: Net,
    client: Client,
    blob: Blob,
    ops: Vec<Op>,
    rng: StdRng,
    victim: usize,
    fault_at: Instant,
    timeline: SharedTimeline,
    published: Vec<VersionInfo>,
}

/// Starts the cluster, runs the workload with `fault` striking provider `victim`, checks the
/// workload's own record and reads everything back; returns the state for the repair checks.
async fn fault_under_load(label: &str, fault: Fault, victim: usize) -> Outcome {
    let mut net = Net::start(label);
    let client = net.client().await;
    wait_all_alive(&client, PROVIDERS).await;
    let blob = client
        .create_blob(CHUNK_SIZE, REPLICATION)
        .await
        .expect("create blob");
    let seed: u64 = rand::random();
    eprintln!(
        "[{label}] manager {}, providers {:?}, blob {} (chunk {CHUNK_SIZE}, replication \
         {REPLICATION}), seed {seed:#x}",
        net.manager,
        (0..PROVIDERS)
            .map(|i| net.provider_addr(i))
            .collect::<Vec<_>>(),
        blob.id()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let record: Shared = Arc::default();
    let started = Instant::now();
    let tasks = spawn_workload(&blob, &record, WORKLOAD, WRITE_BUDGET, seed);

    tokio::time::sleep(FAULT_AFTER).await;
    let victim_addr = net.provider_addr(victim);
    let fault_at = Instant::now();
    match fault {
        Fault::Kill => {
            net.hosts.kill(net.providers[victim]);
            eprintln!(
                "[{label}] SIGKILLed provider-{victim} ({victim_addr}) {:.2} s into the workload",
                FAULT_AFTER.as_secs_f64()
            );
        }
        Fault::Cut(side) => {
            net.hosts.cut(victim + 1, side);
            let how = if net.hosts.is_netns() {
                format!("its veth down on the {side:?} side")
            } else {
                "loopback fallback: SIGSTOPped".to_string()
            };
            eprintln!(
                "[{label}] cut provider-{victim} ({victim_addr}) off the network ({how}) {:.2} s \
                 into the workload",
                FAULT_AFTER.as_secs_f64()
            );
        }
    }
    let timeline: SharedTimeline = Arc::default();
    tokio::spawn(monitor(
        client.clone(),
        victim_addr.clone(),
        fault_at,
        timeline.clone(),
    ));
    for t in tasks {
        t.await.expect("workload task panicked");
    }
    let workload_took = started.elapsed();
    let r = std::mem::take(&mut *lock(&record));
    let after_fault = r.ops.iter().filter(|o| o.acked > fault_at).count();
    eprintln!(
        "[{label}] workload {:.1} s: {} appends ok / {} failed, {} writes ok / {} failed \
         ({} acknowledged after the fault), {} concurrent reads ok ({} MiB), {} read errors",
        workload_took.as_secs_f64(),
        r.appends_ok,
        r.appends_failed,
        r.writes_ok,
        r.writes_failed,
        after_fault,
        r.reads_ok,
        r.read_bytes >> 20,
        r.read_errors.len()
    );
    for e in r.write_errors.iter().take(5) {
        eprintln!("[{label}]   failed (not acknowledged): {e}");
    }
    let dead = net.hosts.exited();
    assert!(dead.is_empty(), "[{label}] processes died: {dead:?}");
    assert!(
        r.mismatches.is_empty(),
        "[{label}] concurrent reads returned wrong data:\n{}",
        r.mismatches.join("\n")
    );
    assert!(
        r.read_errors.is_empty(),
        "[{label}] reads failed although every chunk has a live replica:\n{}",
        r.read_errors.join("\n")
    );
    assert!(
        r.appends_ok + r.writes_ok >= 20 && r.reads_ok >= 20,
        "[{label}] the workload did too little to mean anything"
    );
    assert!(
        after_fault > 0,
        "[{label}] no write or append was acknowledged after the fault: {:?}",
        r.write_errors
    );

    let verified = verify_all(&blob, &r.ops, label, &mut rng).await;
    assert!(verified.checks > 0 && verified.bytes > 0 && verified.versions == r.ops.len());

    // Detection must have happened by now (the workload and the read-back take longer).
    let detect_deadline = fault_at + DETECT_LIMIT;
    let detected = loop {
        if let Some(d) = timeline.lock().unwrap().detected {
            break d;
        }
        assert!(
            Instant::now() < detect_deadline,
            "[{label}] the manager still lists provider-{victim} as alive {DETECT_LIMIT:?} after \
             the fault\n{}",
            net.hosts.log_tails(10)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "[{label}] DETECTION: the manager lists provider-{victim} as not alive {} ms after the \
         fault (provider timeout {PROVIDER_TIMEOUT_MS} ms, heartbeat 200 ms)",
        detected.as_millis()
    );
    Outcome {
        net,
        client,
        blob,
        ops: r.ops,
        rng,
        victim,
        fault_at,
        timeline,
        published: verified.published,
    }
}

/// Waits for full repair after the fault and checks what the status says about it.
async fn repair_after(o: &Outcome, label: &str) {
    let refs = referenced_chunks(&o.net, &o.blob, &o.published).await;
    let victim_addr = o.net.provider_addr(o.victim);
    let (listed_at, bytes) = wait_repaired(o, &refs, &victim_addr, label).await;
    let t = o.timeline.lock().unwrap();
    let (clean_at, st) = t.clean.as_ref().expect("clean status");
    let m = &st.maintenance;
    eprintln!(
        "[{label}] REPAIR: status reports 0 under-replicated/lost chunks and nodes from a pass \
         started after detection {} ms after the fault (detected at {} Unix ms, the pass \
         started at {}); \
         under-replicated first reported at {:?} ms, at most {} chunks ({} KiB) and {} nodes, \
         lost {}; repaired {} chunks ({} KiB) in total; all {} chunks ({} KiB) referenced by \
         the {} published versions on >= {REPLICATION} live providers by their listings \
         (checked {} ms after the fault)",
        clean_at.as_millis(),
        t.detected_ms,
        m.last_pass_started_ms,
        t.first_under_replicated.map(|d| d.as_millis()),
        t.max_under_chunks,
        t.max_under_bytes >> 10,
        t.max_under_nodes,
        t.max_lost,
        m.repaired_chunks,
        m.repaired_bytes >> 10,
        refs.len(),
        bytes >> 10,
        o.published.len(),
        listed_at.as_millis()
    );
    assert!(
        m.repaired_chunks > 0 && t.max_under_chunks > 0,
        "[{label}] the failed provider held chunks of the blob, yet repair found or copied \
         none: {m:?}"
    );
    assert_eq!(m.lost_chunks, 0, "[{label}] {m:?}");
    let down: Vec<&str> = st
        .providers
        .iter()
        .filter(|p| !p.alive)
        .map(|p| p.addr.as_str())
        .collect();
    assert_eq!(
        down,
        vec![victim_addr.as_str()],
        "[{label}] exactly the failed provider is down in the status"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provider_sigkill_under_load_is_repaired_to_full_replication() {
    let label = "netns-kill";
    let test_start = Instant::now();
    let mut o = fault_under_load(label, Fault::Kill, 1).await;
    repair_after(&o, label).await;

    // The repaired copies are real: with a second provider gone, every chunk whose two
    // original replicas were both on the failed ones is read from a copy repair made.
    let second = 3;
    o.net.hosts.kill(o.net.providers[second]);
    eprintln!(
        "[{label}] after repair, SIGKILLed a second provider (provider-{second}); reading \
         everything again"
    );
    let client = o.net.client().await;
    let blob = client.open_blob(o.blob.id()).await.expect("open blob");
    verify_all(&blob, &o.ops, label, &mut o.rng).await;
    eprintln!(
        "[{label}] done in {:.1} s",
        test_start.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provider_cut_off_under_load_is_repaired_and_returns_harmlessly() {
    let label = "netns-cut";
    let test_start = Instant::now();
    let mut o = fault_under_load(label, Fault::Cut(LinkSide::Bridge), 1).await;
    repair_after(&o, label).await;

    // Back on the network: it still holds its old copies and metadata, and missed everything
    // written while it was away.
    let host = o.victim + 1;
    let addr = o.net.provider_addr(o.victim);
    o.net.hosts.restore(host);
    let back_at = Instant::now();
    let rejoined = watch_alive(o.client.clone(), addr.clone(), true, back_at, REJOIN_LIMIT)
        .await
        .unwrap_or_else(|| {
            panic!(
                "[{label}] provider-{} not alive again {REJOIN_LIMIT:?} after its link came back\n{}",
                o.victim,
                o.net.hosts.log_tails(15)
            )
        });
    eprintln!(
        "[{label}] link restored; the manager lists provider-{} alive again after {} ms",
        o.victim,
        rejoined.0.as_millis()
    );
    assert!(
        o.net.hosts.running(o.net.providers[o.victim]),
        "[{label}] the cut-off provider exited"
    );

    // A fresh client (no cached metadata, no suspicion of the returning provider) reads
    // everything again, after a little more writing that may now land on it.
    let client = o.net.client().await;
    wait_all_alive(&client, PROVIDERS).await;
    let blob = client.open_blob(o.blob.id()).await.expect("open blob");
    let record: Shared = Arc::default();
    let seed: u64 = o.rng.gen();
    let tasks = spawn_workload(
        &blob,
        &record,
        Duration::from_millis(1500),
        WRITE_BUDGET / 4,
        seed,
    );
    for t in tasks {
        t.await.expect("workload task panicked");
    }
    let r = std::mem::take(&mut *lock(&record));
    eprintln!(
        "[{label}] after the return: {} appends and {} writes acknowledged ({} failed), {} reads \
         ok, {} read errors",
        r.appends_ok,
        r.writes_ok,
        r.appends_failed + r.writes_failed,
        r.reads_ok,
        r.read_errors.len()
    );
    assert!(
        r.mismatches.is_empty() && r.read_errors.is_empty(),
        "[{label}] reads after the return: {:?} {:?}",
        r.mismatches,
        r.read_errors
    );
    assert!(
        r.write_errors.is_empty(),
        "[{label}] writes failed with every provider back: {:?}",
        r.write_errors
    );
    let mut ops = std::mem::take(&mut o.ops);
    ops.extend(r.ops);
    verify_all(&blob, &ops, label, &mut o.rng).await;
    let dead = o.net.hosts.exited();
    assert!(dead.is_empty(), "[{label}] processes died: {dead:?}");
    eprintln!(
        "[{label}] done in {:.1} s",
        test_start.elapsed().as_secs_f64()
    );
}
