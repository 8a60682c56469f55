//! `tomus demo`: the storage demo. Starts an embedded cluster, runs concurrent appenders into
//! one shared blob while readers check snapshots and independent writers fill their own blobs,
//! verifies every acknowledged byte, and prints a report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::transfer::bytes_bar;
use anyhow::{bail, Result};
use clap::Args;
use rand::Rng;
use tomus_client::{Blob, Client, ClientOptions};

use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use crate::pattern;
use crate::size::{format_size, parse_size};

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Providers in the embedded cluster.
    #[arg(long, default_value_t = 4)]
    pub providers: usize,
    /// Total bytes to write (half appended to one shared blob, half to per-writer blobs).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub size: u64,
    /// Concurrent appenders (and as many independent writers).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Keep the cluster's data here instead of a temporary directory.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Print the report as JSON on stdout (narration goes to stderr).
    #[arg(skip)]
    pub json: bool,
}

/// Narration: part of the report in text mode, on stderr when stdout carries JSON.
fn say(args: &DemoArgs, line: String) -> std::io::Result<()> {
    if args.json {
        eprintln!("{line}");
        Ok(())
    } else {
        outln!("{line}")
    }
}

/// One acknowledged append: where the store said it landed.
#[derive(Clone, Copy, Debug)]
struct Landed {
    version: u64,
    offset: u64,
    len: u64,
    seed: u64,
}

pub fn run(args: DemoArgs) -> Result<()> {
    if args.clients == 0 || args.providers == 0 {
        bail!("--clients and --providers must be at least 1");
    }
    let launcher = Launcher::current()?;
    let (dir, temporary) = match &args.data {
        Some(d) => (d.clone(), false),
        None => (crate::scratch_dir("demo"), true),
    };
    say(
        &args,
        format!(
            "tomus demo: starting an embedded cluster (1 manager, {} providers) in {}",
            args.providers,
            dir.display()
        ),
    )?;
    let cluster = EmbeddedCluster::start(&launcher, ClusterSpec::new(&dir, args.providers))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = rt.block_on(demo(&cluster.addr, &args));
    drop(cluster);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    outcome
}

async fn demo(addr: &str, args: &DemoArgs) -> Result<()> {
    let client = Client::connect(addr, ClientOptions::default()).await?;
    let shared = client.create_blob(4 << 20, 1).await?;
    let per_client = (args.size / 2 / args.clients as u64).max(1);

    // Phase 1: concurrent appenders into one blob, readers checking snapshots meanwhile.
    say(
        args,
        format!(
            "\n1. {} clients append records of 64 KiB-4 MiB to blob {} while 2 readers check snapshots",
            args.clients,
            shared.id()
        ),
    )?;
    let pb = bytes_bar(per_client * args.clients as u64, "appends");
    let done = Arc::new(AtomicBool::new(false));
    let landed = Arc::new(std::sync::Mutex::new(Vec::<Landed>::new()));
    let snapshots = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(snapshot_reader(
                shared.clone(),
                landed.clone(),
                done.clone(),
                snapshots.clone(),
            ))
        })
        .collect();
    let start = Instant::now();
    let appenders: Vec<_> = (0..args.clients as u64)
        .map(|w| {
            let (blob, pb, landed) = (shared.clone(), pb.clone(), landed.clone());
            tokio::spawn(async move {
                let mut written = 0u64;
                let mut seq = 0u64;
                while written < per_client {
                    let len = rand::thread_rng()
                        .gen_range(64 << 10..=4 << 20)
                        .min(per_client - written);
                    let seed = pattern::seed(w, seq);
                    let data = pattern::generate(seed, len as usize);
                    let (version, offset) = blob.append(&data).await?;
                    landed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(Landed {
                            version,
                            offset,
                            len,
                            seed,
                        });
                    written += len;
                    seq += 1;
                    pb.inc(len);
                }
                Ok::<_, tomus_wire::Error>(())
            })
        })
        .collect();
    for a in appenders {
        a.await??;
    }
    let append_secs = start.elapsed().as_secs_f64();
    pb.finish();
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.await??;
    }

    // Verify: every append contiguous, no overlaps, content intact at the final version.
    let mut all = landed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    all.sort_by_key(|l| l.version);
    let final_version = shared.latest().await?;
    let size = shared.size(None).await?;
    let mut expect_offset = 0;
    for l in &all {
        if l.offset != expect_offset {
            bail!(
                "append of version {} landed at {} but the previous one ended at {expect_offset}",
                l.version,
                l.offset
            );
        }
        expect_offset += l.len;
    }
    if expect_offset != size {
        bail!("blob size {size} differs from the sum of appends {expect_offset}");
    }
    let pbv = bytes_bar(size, "verify");
    for l in &all {
        let got = shared.read(l.offset, l.len, Some(final_version)).await?;
        if got != pattern::generate(l.seed, l.len as usize) {
            bail!(
                "content of version {} at offset {} is wrong",
                l.version,
                l.offset
            );
        }
        pbv.inc(l.len);
    }
    pbv.finish();

    // Phase 2: independent writers, each to its own blob, then read back.
    say(
        args,
        format!(
            "\n2. {} clients write 4 MiB blocks to blobs of their own, then read them back",
            args.clients
        ),
    )?;
    let pbw = bytes_bar(per_client * args.clients as u64, "writes");
    let start = Instant::now();
    let writers: Vec<_> = (0..args.clients as u64)
        .map(|w| {
            let (client, pb) = (client.clone(), pbw.clone());
            tokio::spawn(async move {
                let blob = client.create_blob(4 << 20, 1).await?;
                let mut at = 0;
                while at < per_client {
                    let len = (4u64 << 20).min(per_client - at);
                    blob.write(
                        at,
                        &pattern::generate(pattern::seed(100 + w, at), len as usize),
                    )
                    .await?;
                    at += len;
                    pb.inc(len);
                }
                Ok::<_, tomus_wire::Error>(blob)
            })
        })
        .collect();
    let mut blobs = Vec::new();
    for w in writers {
        blobs.push(w.await??);
    }
    let write_secs = start.elapsed().as_secs_f64();
    pbw.finish();
    let pbr = bytes_bar(per_client * args.clients as u64, "reads");
    let start = Instant::now();
    let reads: Vec<_> = blobs
        .iter()
        .enumerate()
        .map(|(w, blob)| {
            let (blob, pb) = (blob.clone(), pbr.clone());
            tokio::spawn(async move {
                let mut at = 0;
                while at < per_client {
                    let len = (4u64 << 20).min(per_client - at);
                    let got = blob.read(at, len, None).await?;
                    if got != pattern::generate(pattern::seed(100 + w as u64, at), len as usize) {
                        return Ok(false);
                    }
                    at += len;
                    pb.inc(len);
                }
                Ok::<_, tomus_wire::Error>(true)
            })
        })
        .collect();
    for r in reads {
        if !r.await?? {
            bail!("a written blob read back wrong");
        }
    }
    let read_secs = start.elapsed().as_secs_f64();
    pbr.finish();

    let mut striped: std::collections::BTreeMap<String, u64> = Default::default();
    for l in shared.locations(0, size, Some(final_version)).await? {
        for p in l.providers {
            *striped.entry(p).or_default() += l.size;
        }
    }
    let total_half = per_client * args.clients as u64;
    let snapshots = snapshots.load(Ordering::Relaxed);
    if args.json {
        let report = serde_json::json!({
            "shared_blob": {"id": shared.id(), "appends": all.len(), "clients": args.clients,
                            "versions": final_version, "size": size, "verified": true,
                            "snapshots_checked": snapshots},
            "mib_s": {"concurrent_appends": mib_s(total_half, append_secs),
                      "independent_writes": mib_s(total_half, write_secs),
                      "reads": mib_s(total_half, read_secs)},
            "striping": striped,
        });
        outln!("{report}")?;
        return Ok(());
    }
    outln!("\nreport")?;
    outln!(
        "  shared blob {}: {} appends from {} clients -> versions 1..{final_version}, size {}",
        shared.id(),
        all.len(),
        args.clients,
        format_size(size)
    )?;
    outln!("    every append landed contiguously where it was told; content verified")?;
    outln!("    {snapshots} snapshots read during the appends, all consistent")?;
    outln!(
        "  concurrent appends  {:>8.1} MiB/s",
        mib_s(total_half, append_secs)
    )?;
    outln!(
        "  independent writes  {:>8.1} MiB/s",
        mib_s(total_half, write_secs)
    )?;
    outln!(
        "  reads               {:>8.1} MiB/s",
        mib_s(total_half, read_secs)
    )?;
    outln!("  shared blob striped over providers:")?;
    for (addr, bytes) in striped {
        outln!("    {addr:<22} {:>10}", format_size(bytes))?;
    }
    Ok(())
}

fn mib_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / secs.max(1e-9)
}

/// Repeatedly reads the latest published snapshot and checks every record it contains that the
/// appenders had acknowledged: a torn or partial write would show as wrong bytes.
async fn snapshot_reader(
    blob: Blob,
    landed: Arc<std::sync::Mutex<Vec<Landed>>>,
    done: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> Result<()> {
    while !done.load(Ordering::Relaxed) {
        let info = blob.stat(None).await?;
        let known: Vec<Landed> = landed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|l| l.version <= info.version)
            .copied()
            .collect();
        let Some(l) = known.get(rand::thread_rng().gen_range(0..known.len().max(1))) else {
            tokio::task::yield_now().await;
            continue;
        };
        let got = blob.read(l.offset, l.len, Some(info.version)).await?;
        if got != pattern::generate(l.seed, l.len as usize) {
            bail!(
                "snapshot {} shows wrong bytes for the append of version {}",
                info.version,
                l.version
            );
        }
        count.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
