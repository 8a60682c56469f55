//! `tomus bench --scenarios maintenance`: what maintenance costs as the store grows.
//!
//! For each store size (retained versions, `--maintenance-versions`), on a fresh embedded
//! cluster: the versions are written as 4 KiB appends to 16 blobs that keep every version;
//! the run waits until the ledger has counted them all (catch-up rate), then measures the
//! incremental work: batches of 100 new versions (how long from the first append until all
//! are counted, a latency that includes writing them and the pause between rounds, and the
//! `gc` round that counted them, scaled to 100 versions: the work a pass does for them).
//! It then restarts the manager, whose audit runs
//! at start, and records the audit's duration: the full walk of every retained tree and every
//! provider's listing, which is what every pass cost before the ledger.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value};
use tomus_client::{Blob, Client, ClientOptions};
use tomus_wire::ClusterStatus;

use crate::bench::BenchArgs;
use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use crate::pattern;

const BLOBS: usize = 16;
/// New versions per measured incremental round, and the rounds measured.
const BATCH: u64 = 100;
const ROUNDS: usize = 5;
const POLL: Duration = Duration::from_millis(20);
/// Counting or auditing taking longer than this is reported as a failure.
const LIMIT: Duration = Duration::from_secs(1800);

pub fn maintenance(
    launcher: &Launcher,
    args: &BenchArgs,
    rt: &tokio::runtime::Runtime,
) -> Result<Value> {
    let mut points = Vec::new();
    for &versions in &args.maintenance_versions {
        points.push(one_size(launcher, args, rt, versions)?);
    }
    Ok(json!({"blobs": BLOBS, "batch_versions": BATCH, "points": points}))
}

fn one_size(
    launcher: &Launcher,
    args: &BenchArgs,
    rt: &tokio::runtime::Runtime,
    versions: u64,
) -> Result<Value> {
    // Declared first, dropped last: the cluster stops before its data goes.
    let dir = crate::bench_cleanup::ScratchDir::new("bench-maintenance", args.keep_data);
    let mut spec = ClusterSpec::new(dir.path(), args.providers);
    // This measures maintenance, not the disk.
    spec.fsync = false;
    spec.manager_args = [
        "--maintenance-interval-ms",
        "200",
        "--audit-interval-ms",
        "3600000",
        "--gc-grace-ms",
        "3600000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut cluster = EmbeddedCluster::start(launcher, spec)?;
    let out = rt.block_on(async {
        let client = Client::connect(&cluster.addr, ClientOptions::default()).await?;
        let mut blobs = Vec::new();
        for _ in 0..BLOBS {
            // Every version retained (the default policy).
            blobs.push(client.create_blob(64 << 10, 1).await?);
        }
        let base = counted(&client).await?;
        let written = Instant::now();
        append_versions(&blobs, versions).await?;
        let write_s = written.elapsed().as_secs_f64();
        // Counting starts while they are written; the rate is over both.
        wait_counted(&client, versions, base).await?;
        let catch_up_s = written.elapsed().as_secs_f64();

        let mut incremental_ms = Vec::new();
        let mut gc_round_ms = Vec::new();
        for i in 0..ROUNDS {
            let before = counted(&client).await?;
            let started = Instant::now();
            append_versions(&blobs, BATCH).await?;
            wait_counted(&client, BATCH, before).await?;
            incremental_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let m = status(&client).await?.maintenance;
            // The round that counted the batch (it may have been split over two).
            gc_round_ms.push(m.last_count_round_ms as f64 * BATCH as f64
                / m.last_count_round_versions.max(1) as f64);
            eprintln!(
                "maintenance bench: {versions} versions, round {i}: {BATCH} new versions counted in {:.0} ms",
                incremental_ms[i]
            );
        }
        let ledger = status(&client).await?.maintenance;
        Ok::<_, anyhow::Error>((
            write_s,
            catch_up_s,
            incremental_ms,
            gc_round_ms,
            ledger.ledger_leaves,
            ledger.ledger_chunks,
        ))
    });
    let (write_s, catch_up_s, incremental_ms, gc_round_ms, leaves, chunks) = match out {
        Ok(o) => o,
        Err(e) => {
            drop(cluster);
            return Err(e);
        }
    };
    // The audit runs when the maintenance service starts: a manager restart measures it.
    cluster.kill_manager();
    cluster.start_manager()?;
    let audit = rt.block_on(async {
        let client = Client::connect(&cluster.addr, ClientOptions::default()).await?;
        let started = Instant::now();
        loop {
            let m = status(&client).await?.maintenance;
            if m.audits >= 1 {
                return Ok::<_, anyhow::Error>(m.last_audit_duration_ms);
            }
            if started.elapsed() > LIMIT {
                bail!("no audit finished {LIMIT:?} after the manager restarted");
            }
            tokio::time::sleep(POLL).await;
        }
    });
    drop(cluster);
    let audit_ms = audit?;
    let incremental = median(incremental_ms.clone());
    let gc_round = median(gc_round_ms.clone());
    eprintln!(
        "maintenance bench: {versions} versions: a gc round counts {BATCH} new ones in \
         {gc_round:.0} ms (median; {incremental:.0} ms from the first append), the full audit \
         took {audit_ms} ms"
    );
    Ok(json!({
        "versions": versions,
        "write_s": write_s,
        "catch_up_versions_per_s": versions as f64 / catch_up_s,
        "batch_counted_after_ms": {"median": incremental, "runs": incremental_ms},
        "gc_round_per_batch_ms": {"median": gc_round, "runs": gc_round_ms},
        "audit_ms": audit_ms,
        "audit_over_gc_round": audit_ms as f64 / gc_round.max(1.0),
        "ledger_leaves": leaves,
        "ledger_chunks": chunks,
    }))
}

/// `total` 4 KiB appends spread over `blobs`, one appender per blob.
async fn append_versions(blobs: &[Blob], total: u64) -> Result<()> {
    let n = blobs.len() as u64;
    let appenders = blobs.iter().enumerate().map(|(i, b)| {
        let count = total / n + u64::from((i as u64) < total % n);
        async move {
            let data = pattern::generate(i as u64, 4096);
            for _ in 0..count {
                b.append(&data).await?;
            }
            Ok::<_, tomus_wire::Error>(())
        }
    });
    futures::future::try_join_all(appenders).await?;
    Ok(())
}

async fn status(client: &Client) -> Result<ClusterStatus> {
    crate::ops_cmd::status(client).await
}

async fn counted(client: &Client) -> Result<u64> {
    Ok(status(client).await?.maintenance.versions_counted)
}

/// Waits until the ledger has counted `n` more versions than `base`.
async fn wait_counted(client: &Client, n: u64, base: u64) -> Result<()> {
    let started = Instant::now();
    while counted(client).await? < base + n {
        if started.elapsed() > LIMIT {
            bail!("the ledger did not count {n} versions in {LIMIT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
