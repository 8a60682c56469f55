//! `tomus bench`: the BlobSeer paper's scenarios against the native client on an embedded
//! cluster, the manager alone, and the machine's loopback TCP limit, all in one run, as JSON.
//!
//! S1 one writer, growing blob · S2 N readers of distinct 64 MiB ranges of one shared blob ·
//! S3 N writers each to its own blob, then read back · S4 N appenders to one shared blob (S3
//! and S4 interleaved run by run) · S5 4 KiB appends and reads from N clients. Each point is
//! the median of `--runs` runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::Rng;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tomus_client::{Blob, Client, ClientOptions};

use crate::bench_cleanup::{Made, ScratchDir};
use crate::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use crate::pattern;
use crate::size::parse_size;

pub(crate) const MIB: f64 = (1 << 20) as f64;
const BLOCK: u64 = 4 << 20;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Providers in the embedded cluster.
    #[arg(long, default_value_t = 4)]
    pub providers: usize,
    /// Client counts to measure.
    #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
    pub clients: Vec<usize>,
    /// Runs per point (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Scenarios: loopback, ceiling (S2's reads served by bare sendfile, no checksums or
    /// metadata: what memory and TCP allow), s1, s2, s3s4 (S3 and S4 interleaved), s5,
    /// manager, objects (the S3
    /// gateway's workload with the native client; not run by default), repair (failure
    /// detection, repair time and foreground reads during repair; not run by default),
    /// maintenance (the cost of maintenance rounds and of the full audit as the number of
    /// retained versions grows; not run by default), memory (the memory storage class against
    /// the disk class, 4 KiB and 4 MiB operations; not run by default).
    #[arg(
        long,
        default_value = "loopback,ceiling,s1,s2,s3s4,s5,manager",
        value_delimiter = ','
    )]
    pub scenarios: Vec<String>,
    /// Bytes each client moves in S2-S4 (S2 reads distinct ranges of this size).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub per_client: u64,
    /// Total size of the S1 blob.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub s1_size: u64,
    /// 4 KiB operations per client in S5. Enough that the appends outlast a few maintenance
    /// rounds (every 2 s by default), whose counting of each new version is part of an
    /// append's sustained cost: 8 clients × 1,000 appends take about 2 s and leave most of
    /// that counting outside the measured window.
    #[arg(long, default_value_t = 3000)]
    pub small_ops: u64,
    /// Chunk size of the blob S5 appends to: one leaf slot of its metadata tree holds this
    /// many bytes of 4 KiB appends.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub s5_chunk_size: u64,
    /// Write the JSON here as well as to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Providers acknowledge from the page cache (default: after fdatasync).
    #[arg(long)]
    pub no_fsync: bool,
    /// Measure this running cluster (its manager's address) instead of starting one; for
    /// the client scenarios (s1, s2, s3s4, s5, objects).
    #[arg(long, value_name = "HOST:PORT")]
    pub cluster: Option<String>,
    /// Size of the large objects of the objects scenario.
    #[arg(long, default_value = "128MiB", value_parser = parse_size)]
    pub object_size: u64,
    /// Bytes of copies the killed provider holds in the repair scenario.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub repair_size: u64,
    /// Retained versions the maintenance scenario measures with, one cluster each.
    #[arg(long, default_value = "1000,10000,100000", value_delimiter = ',')]
    pub maintenance_versions: Vec<u64>,
    /// Keep what the benchmarks wrote: their blobs and files (deleted otherwise as each
    /// scenario ends), and the data directories of the clusters bench starts (removed
    /// otherwise; their paths are printed).
    #[arg(long)]
    pub keep_data: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    const KNOWN: [&str; 11] = [
        "loopback",
        "ceiling",
        "s1",
        "s2",
        "s3s4",
        "s5",
        "manager",
        "objects",
        "repair",
        "maintenance",
        "memory",
    ];
    if let Some(bad) = args.scenarios.iter().find(|s| !KNOWN.contains(&s.as_str())) {
        bail!("unknown scenario {bad:?} (known: {})", KNOWN.join(", "));
    }
    if args.clients.is_empty() || args.clients.contains(&0) || args.runs == 0 {
        bail!("--clients must list positive counts and --runs must be at least 1");
    }
    crate::bench_cleanup::remove_stale();
    let launcher = Launcher::current()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut results = serde_json::Map::new();
    results.insert(
        "config".into(),
        json!({"providers": args.providers, "clients": args.clients, "runs": args.runs,
               "per_client_bytes": args.per_client, "small_ops": args.small_ops,
               "fsync": !args.no_fsync,
               "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)}),
    );
    for scenario in &args.scenarios {
        eprintln!("bench: {scenario}");
        let named = if scenario == "loopback" {
            vec![("loopback".to_string(), rt.block_on(loopback())?)]
        } else if scenario == "ceiling" {
            let dir = ScratchDir::new("bench-ceiling", args.keep_data);
            let out = crate::bench_ceiling::ceiling(
                dir.path(),
                &args.clients,
                args.per_client,
                args.runs,
            );
            vec![("ceiling".to_string(), out?)]
        } else if scenario == "repair" {
            vec![(
                "repair".to_string(),
                crate::bench_repair::repair(&launcher, &args, &rt)?,
            )]
        } else if scenario == "maintenance" {
            vec![(
                "maintenance".to_string(),
                crate::bench_maintenance::maintenance(&launcher, &args, &rt)?,
            )]
        } else if let Some(addr) = args.cluster.as_deref().filter(|_| scenario != "manager") {
            let dir = ScratchDir::new(&format!("bench-{scenario}"), args.keep_data);
            rt.block_on(scenario_run(scenario, addr, &args, dir.path()))?
        } else {
            // Declared first, dropped last: the cluster stops before its data goes.
            let dir = ScratchDir::new(&format!("bench-{scenario}"), args.keep_data);
            let mut spec = ClusterSpec::new(dir.path(), args.providers);
            spec.fsync = !args.no_fsync;
            if scenario == "memory" {
                spec.provider_args = crate::bench_memory::provider_args();
            }
            let cluster = EmbeddedCluster::start(&launcher, spec)?;
            let out = rt.block_on(scenario_run(scenario, &cluster.addr, &args, dir.path()));
            drop(cluster);
            out?
        };
        results.extend(named);
    }
    let text = serde_json::to_string_pretty(&Value::Object(results))?;
    if let Some(path) = &args.out {
        std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    outln!("{text}")?;
    Ok(())
}

/// Runs one scenario; returns its results by name (`s3s4` yields `s3` and `s4`).
async fn scenario_run(
    name: &str,
    addr: &str,
    args: &BenchArgs,
    dir: &std::path::Path,
) -> Result<Vec<(String, Value)>> {
    let client = Client::connect(addr, ClientOptions::default()).await?;
    let made = Made::new(args.keep_data);
    let named = |v: Value| vec![(name.to_string(), v)];
    let out = async {
        Ok(match name {
            "s1" => named(s1(&client, args, &made).await?),
            "s2" => named(s2(&client, args, &made).await?),
            "s3s4" => {
                let (s3, s4) = s3_s4(&client, args, &made).await?;
                vec![("s3".to_string(), s3), ("s4".to_string(), s4)]
            }
            "s5" => named(s5(&client, args, &made).await?),
            "objects" => named(crate::bench_objects::objects(&client, args).await?),
            "memory" => named(crate::bench_memory::memory(&client, args, &made).await?),
            "manager" => named(crate::bench_manager::manager(addr, dir, &made).await?),
            other => bail!("unknown scenario {other:?}"),
        })
    }
    .await;
    // Whether it succeeded or not.
    made.delete_all(&client).await;
    out
}

/// Runs `tasks` concurrently, each on its own tokio task; returns the seconds until all ended.
async fn timed<F>(tasks: impl IntoIterator<Item = F>) -> Result<f64>
where
    F: std::future::Future<Output = tomus_wire::Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    for h in handles {
        h.await??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Reads `len` bytes of the latest version of `blob` from `base`, `window` bytes at a time.
async fn read_range(blob: Blob, base: u64, len: u64, window: u64) -> tomus_wire::Result<()> {
    let mut buf = vec![0u8; window.min(len) as usize];
    let mut off = 0;
    while off < len {
        let n = (buf.len() as u64).min(len - off) as usize;
        blob.read_into(base + off, &mut buf[..n], None).await?;
        off += n as u64;
    }
    Ok(())
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub(crate) fn point(clients: usize, runs: Vec<f64>, unit: &str) -> Value {
    json!({"clients": clients, "median": median(runs.clone()), "runs": runs, "unit": unit})
}

/// Loopback TCP throughput: an in-process socket pair with 1, 2, 4 and 8 parallel streams of
/// 4 MiB writes (the best is the limit every figure is compared with), and iperf3 with 1 and 4
/// streams when it is installed (the conventional tool's figure, for reference).
async fn loopback() -> Result<Value> {
    let pair = socket_pair_limit().await?;
    let iperf = iperf3_baseline().await;
    Ok(json!({"points": pair.0, "limit_mib_s": pair.1, "iperf3": iperf}))
}

async fn iperf3_baseline() -> Value {
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port().to_string(),
        Err(e) => return json!({"skipped": format!("no free port: {e}")}),
    };
    let server = tokio::process::Command::new("iperf3")
        .args(["-s", "-p", &port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let Ok(_server) = server else {
        return json!({"skipped": "iperf3 is not installed (apt-get install iperf3)"});
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut out = serde_json::Map::new();
    for streams in [1, 4] {
        let run = tokio::process::Command::new("iperf3")
            .args([
                "-c",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "3",
                "-J",
                "-P",
                &streams.to_string(),
            ])
            .output()
            .await;
        let parsed = run
            .ok()
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
            .and_then(|v| v["end"]["sum_received"]["bits_per_second"].as_f64());
        match parsed {
            Some(bps) => out.insert(format!("streams_{streams}_mib_s"), json!(bps / 8.0 / MIB)),
            None => out.insert(format!("streams_{streams}_mib_s"), Value::Null),
        };
    }
    Value::Object(out)
}

async fn socket_pair_limit() -> Result<(Vec<Value>, f64)> {
    let mut points = Vec::new();
    let mut best: f64 = 0.0;
    for streams in [1usize, 2, 4, 8] {
        let mut runs = Vec::new();
        for _ in 0..3 {
            runs.push(loopback_once(streams, 2 << 30).await?);
        }
        let m = median(runs.clone());
        best = best.max(m);
        points.push(json!({"streams": streams, "median": m, "runs": runs, "unit": "MiB/s"}));
    }
    Ok((points, best))
}

async fn loopback_once(streams: usize, total: u64) -> Result<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let per = total / streams as u64;
    let server = tokio::spawn(async move {
        let mut readers = Vec::new();
        for _ in 0..streams {
            let (mut s, _) = listener.accept().await?;
            s.set_nodelay(true)?;
            readers.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 4 << 20];
                let mut got = 0u64;
                while got < per {
                    let n = s.read(&mut buf).await?;
                    if n == 0 {
                        break;
                    }
                    got += n as u64;
                }
                Ok::<_, std::io::Error>(got)
            }));
        }
        let mut total = 0;
        for r in readers {
            total += r.await.map_err(std::io::Error::other)??;
        }
        Ok::<_, std::io::Error>(total)
    });
    let start = Instant::now();
    let writers: Vec<_> = (0..streams)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                let buf = vec![7u8; 4 << 20];
                let mut sent = 0u64;
                while sent < per {
                    let n = (buf.len() as u64).min(per - sent) as usize;
                    s.write_all(&buf[..n]).await?;
                    sent += n as u64;
                }
                Ok::<_, std::io::Error>(())
            })
        })
        .collect();
    for w in writers {
        w.await??;
    }
    let received = server.await??;
    Ok(received as f64 / MIB / start.elapsed().as_secs_f64())
}

/// S1: one writer appends 4 MiB blocks to one blob up to `s1_size`; throughput per eighth of the
/// way shows whether the blob's growth slows writes down.
async fn s1(client: &Client, args: &BenchArgs, made: &Made) -> Result<Value> {
    let mut runs = Vec::new();
    let mut curve = Vec::new();
    let data = pattern::generate(1, BLOCK as usize);
    for _ in 0..args.runs {
        let blob = made.blob(client, BLOCK, 1).await?;
        let segment = (args.s1_size / 8).max(BLOCK);
        let start = Instant::now();
        let mut seg_start = Instant::now();
        let mut written = 0u64;
        let mut this_curve = Vec::new();
        while written < args.s1_size {
            blob.append(&data).await?;
            written += BLOCK;
            if written.is_multiple_of(segment) {
                this_curve.push(json!({"blob_size": written, "mib_s": segment as f64 / MIB / seg_start.elapsed().as_secs_f64()}));
                seg_start = Instant::now();
            }
        }
        runs.push(written as f64 / MIB / start.elapsed().as_secs_f64());
        curve = this_curve;
        made.delete_all(client).await;
    }
    Ok(json!({"points": [point(1, runs, "MiB/s")], "growth_curve_last_run": curve}))
}

/// S2: one shared blob of `max(N) * per_client` bytes; N readers each read a distinct range.
async fn s2(client: &Client, args: &BenchArgs, made: &Made) -> Result<Value> {
    let max_n = *args.clients.iter().max().unwrap_or(&1) as u64;
    let size = max_n * args.per_client;
    let blob = made.blob(client, BLOCK, 1).await?;
    let block = pattern::generate(2, (64u64 << 20).min(size) as usize);
    let mut at = 0;
    while at < size {
        let n = (block.len() as u64).min(size - at);
        blob.write(at, &block[..n as usize]).await?;
        at += n;
    }
    let mut points = Vec::new();
    for &n in &args.clients {
        let mut runs = Vec::new();
        for _ in 0..args.runs {
            let per = args.per_client;
            let secs =
                timed((0..n as u64).map(|i| read_range(blob.clone(), i * per, per, 16 << 20)))
                    .await?;
            runs.push((n as u64 * per) as f64 / MIB / secs);
        }
        points.push(point(n, runs, "MiB/s"));
    }
    Ok(json!({"points": points}))
}

/// S3 and S4, run interleaved (an S3 run, then an S4 run, for every run and client count) on
/// one cluster: with fsync on, both are bound by the disk, whose speed drifts over minutes, so
/// only runs taken side by side compare the two.
async fn s3_s4(client: &Client, args: &BenchArgs, made: &Made) -> Result<(Value, Value)> {
    let data = Arc::new(pattern::generate(3, BLOCK as usize));
    let (mut write_points, mut read_points, mut append_points) =
        (Vec::new(), Vec::new(), Vec::new());
    for &n in &args.clients {
        let (mut w_runs, mut r_runs, mut a_runs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let (w, r) = s3_once(client, made, n, args.per_client, &data).await?;
            w_runs.push(w);
            r_runs.push(r);
            a_runs.push(s4_once(client, made, n, args.per_client, &data).await?);
            made.delete_all(client).await;
        }
        write_points.push(point(n, w_runs, "MiB/s"));
        read_points.push(point(n, r_runs, "MiB/s"));
        append_points.push(point(n, a_runs, "MiB/s"));
    }
    Ok((
        json!({"write": write_points, "read": read_points}),
        json!({"points": append_points}),
    ))
}

/// S3: N writers, each to its own blob, then the same N read their blob back: (write, read).
async fn s3_once(
    client: &Client,
    made: &Made,
    n: usize,
    per: u64,
    data: &Arc<Vec<u8>>,
) -> Result<(f64, f64)> {
    let mut blobs = Vec::new();
    for _ in 0..n {
        blobs.push(made.blob(client, BLOCK, 1).await?);
    }
    let writers = blobs.iter().map(|b| {
        let (b, data) = (b.clone(), data.clone());
        async move {
            let mut at = 0;
            while at < per {
                let len = BLOCK.min(per - at) as usize;
                b.write(at, &data[..len]).await?;
                at += len as u64;
            }
            Ok(())
        }
    });
    let write_secs = timed(writers).await?;
    let read_secs = timed(blobs.into_iter().map(|b| read_range(b, 0, per, BLOCK))).await?;
    let bytes = (n as u64 * per) as f64 / MIB;
    Ok((bytes / write_secs, bytes / read_secs))
}

/// S4: N appenders to one shared blob, 4 MiB appends each.
async fn s4_once(
    client: &Client,
    made: &Made,
    n: usize,
    per: u64,
    data: &Arc<Vec<u8>>,
) -> Result<f64> {
    let blob = made.blob(client, BLOCK, 1).await?;
    let appenders = (0..n).map(|_| {
        let (b, data) = (blob.clone(), data.clone());
        async move {
            let mut done = 0;
            while done < per {
                let len = BLOCK.min(per - done) as usize;
                b.append(&data[..len]).await?;
                done += len as u64;
            }
            Ok(())
        }
    });
    let secs = timed(appenders).await?;
    let size = blob.size(None).await?;
    if size != n as u64 * per {
        bail!(
            "S4: blob size {size} after {n} appenders, expected {}",
            n as u64 * per
        );
    }
    Ok(size as f64 / MIB / secs)
}

/// S5: 4 KiB appends to one shared blob from N clients, then 4 KiB reads at random offsets:
/// of the latest version (each read asks the manager which it is, as every read did before
/// clients cached version records) and of a pinned version (the manager off the read path:
/// only the metadata DHT, mostly cached, and the providers).
async fn s5(client: &Client, args: &BenchArgs, made: &Made) -> Result<Value> {
    let mut appends = Vec::new();
    let mut reads = Vec::new();
    let mut pinned_reads = Vec::new();
    for &n in &args.clients {
        let (mut a_runs, mut r_runs, mut p_runs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let blob = made.blob(client, args.s5_chunk_size, 1).await?;
            let ops = args.small_ops;
            let appenders = (0..n).map(|i| {
                let b = blob.clone();
                async move {
                    let data = pattern::generate(i as u64, 4096);
                    for _ in 0..ops {
                        b.append(&data).await?;
                    }
                    Ok(())
                }
            });
            a_runs.push((n as u64 * ops) as f64 / timed(appenders).await?);
            let latest = blob.stat(None).await?;
            let size = latest.size;
            let readers = |version: Option<u64>| {
                let blob = &blob;
                (0..n).map(move |_| {
                    let b = blob.clone();
                    async move {
                        let mut buf = vec![0u8; 4096];
                        for _ in 0..ops {
                            let off = rand::thread_rng().gen_range(0..size / 4096) * 4096;
                            b.read_into(off, &mut buf, version).await?;
                        }
                        Ok(())
                    }
                })
            };
            r_runs.push((n as u64 * ops) as f64 / timed(readers(None)).await?);
            let pinned = Some(latest.version);
            p_runs.push((n as u64 * ops) as f64 / timed(readers(pinned)).await?);
            made.delete_all(client).await;
        }
        appends.push(point(n, a_runs, "ops/s"));
        reads.push(point(n, r_runs, "ops/s"));
        pinned_reads.push(point(n, p_runs, "ops/s"));
    }
    Ok(json!({
        "append_4k": appends,
        "read_4k": reads,
        "read_4k_pinned": pinned_reads,
        "chunk_size": args.s5_chunk_size,
    }))
}
