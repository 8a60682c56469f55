//! `tomus bench --scenarios repair`: failure detection and repair on an embedded cluster.
//!
//! A blob with replication 2 is written so that one of three providers holds `--repair-size`
//! bytes of copies; foreground readers measure their throughput, the provider is SIGKILLed,
//! and the run records when the manager marks it down, how long repair takes to bring every
//! chunk back to two copies, and the readers' throughput while repair runs. Once with the
//! default repair throttle and once unthrottled.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value};
use tomus_client::{Append, Blob, Client, ClientOptions, CommitOptions};

use crate::bench::BenchArgs;
use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use crate::pattern;

const MIB: f64 = (1 << 20) as f64;
const PROVIDERS: usize = 3;
const REPLICATION: u32 = 2;
/// Foreground readers and how long each throughput sample runs.
const READERS: usize = 2;
const SAMPLE: Duration = Duration::from_secs(8);
const WINDOW: u64 = 16 << 20;

pub fn repair(
    launcher: &Launcher,
    args: &BenchArgs,
    rt: &tokio::runtime::Runtime,
) -> Result<Value> {
    let throttled = one_run(launcher, args, rt, None)?;
    let unthrottled = one_run(launcher, args, rt, Some(0))?;
    Ok(json!({
        "providers": PROVIDERS, "replication": REPLICATION, "lost_bytes_target": args.repair_size,
        "throttled": throttled, "unthrottled": unthrottled,
    }))
}

/// One cluster: write, baseline reads, kill, detection, reads during repair, repair time.
fn one_run(
    launcher: &Launcher,
    args: &BenchArgs,
    rt: &tokio::runtime::Runtime,
    repair_rate: Option<u64>,
) -> Result<Value> {
    // Declared first, dropped last: the cluster stops before its data goes.
    let dir = crate::bench_cleanup::ScratchDir::new("bench-repair", args.keep_data);
    let mut spec = ClusterSpec::new(dir.path(), PROVIDERS);
    spec.fsync = !args.no_fsync;
    if let Some(rate) = repair_rate {
        spec.manager_args = vec!["--repair-rate".into(), rate.to_string()];
    }
    let mut cluster = EmbeddedCluster::start(launcher, spec)?;
    let out = rt.block_on(async {
        let client = Client::connect(&cluster.addr, ClientOptions::default()).await?;
        // Each provider holds size * R / PROVIDERS bytes of copies.
        let size = args.repair_size * PROVIDERS as u64 / REPLICATION as u64;
        let blob = client.create_blob(4 << 20, REPLICATION).await?;
        write_blob(&blob, size).await?;
        let before = read_throughput(&blob, size, SAMPLE).await?;
        let victim = cluster.provider_addr(0).to_string();
        // From the kill on, concurrently: detection, repair, and the foreground readers.
        let killed = Instant::now();
        cluster.kill_provider(0);
        let (detected, (repaired, under_bytes), during) = tokio::try_join!(
            watch_detection(&client, &victim, killed),
            watch_repair(&client, killed),
            read_throughput(&blob, size, SAMPLE),
        )?;
        let after = read_throughput(&blob, size, SAMPLE).await?;
        eprintln!(
            "repair (rate {repair_rate:?}): detected {detected:?}, {} MiB repaired {repaired:?} after the kill, reads {before:.0} -> {during:.0} -> {after:.0} MiB/s",
            under_bytes as f64 / MIB
        );
        Ok::<_, anyhow::Error>(json!({
            "repair_rate": repair_rate.map_or("default (64MiB/s)".to_string(), |r| r.to_string()),
            "blob_bytes": size,
            "under_replicated_bytes": under_bytes,
            "detect_s": detected.as_secs_f64(),
            "repaired_after_kill_s": repaired.as_secs_f64(),
            "repaired_after_detection_s": (repaired.saturating_sub(detected)).as_secs_f64(),
            "repair_mib_s_after_kill": under_bytes as f64 / MIB / repaired.as_secs_f64(),
            "foreground_read_mib_s": {"before": before, "during_repair": during, "after": after},
            "foreground_during_over_before": during / before,
        }))
    });
    drop(cluster);
    out
}

/// Polls the provider list until the manager marks `victim` down; returns when (after the kill).
async fn watch_detection(client: &Client, victim: &str, killed: Instant) -> Result<Duration> {
    loop {
        let list = client.providers().await?;
        if list.iter().any(|p| p.addr == victim && !p.alive) {
            return Ok(killed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the maintenance status until a pass that started after the kill found nothing to
/// repair; returns when (after the kill) and the most under-replicated bytes seen. Repair may
/// start before the manager marks the provider down: a provider whose listing fails counts
/// for nothing in that pass.
async fn watch_repair(client: &Client, killed: Instant) -> Result<(Duration, u64)> {
    let since = crate::ops_cmd::status(client).await?.now_ms;
    let mut under_bytes = 0;
    loop {
        let m = crate::ops_cmd::status(client).await?.maintenance;
        under_bytes = under_bytes.max(m.under_replicated_bytes);
        if m.repaired_since(since) && under_bytes > 0 {
            return Ok((killed.elapsed(), under_bytes));
        }
        if killed.elapsed() > Duration::from_secs(1800) {
            bail!("repair did not finish in 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn write_blob(blob: &Blob, size: u64) -> Result<()> {
    let block = pattern::generate(7, 64 << 20);
    let mut writer = blob.writer();
    let mut written = 0;
    while written < size {
        let n = (block.len() as u64).min(size - written) as usize;
        writer.write(&block[..n]).await?;
        written += n as u64;
    }
    writer.commit(Append, &CommitOptions::default()).await?;
    Ok(())
}

/// MiB/s of `READERS` readers reading random 16 MiB windows of the blob for `duration`.
async fn read_throughput(blob: &Blob, size: u64, duration: Duration) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..READERS)
        .map(|i| {
            let (blob, stop, bytes) = (blob.clone(), stop.clone(), bytes.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; WINDOW as usize];
                let windows = (size / WINDOW).max(1);
                let mut k = i as u64;
                while !stop.load(Ordering::Relaxed) {
                    let off = (k * 7919 % windows) * WINDOW;
                    let n = WINDOW.min(size - off) as usize;
                    blob.read_into(off, &mut buf[..n], None).await?;
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                    k += READERS as u64;
                }
                Ok::<_, tomus_wire::Error>(())
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(bytes.load(Ordering::Relaxed) as f64 / MIB / start.elapsed().as_secs_f64())
}
