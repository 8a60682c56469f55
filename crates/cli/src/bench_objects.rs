//! `tomus bench --scenarios objects`: the S3 gateway's workload done with the native client,
//! so the gateway's figures (bench/s3.py) have a same-cluster, same-run reference. Every
//! operation goes through the namespace as the gateway's do: a PUT opens (or creates) a file
//! and streams one replacement version into it; a GET looks the file's latest version up and
//! reads it in 16 MiB windows.

use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};
use tomus_client::{Client, CommitOptions, CreateOptions, Namespace, Replace};

use crate::bench::BenchArgs;
use crate::pattern;

const MIB: f64 = (1 << 20) as f64;
const SMALL: usize = 4096;
/// Pieces a large PUT arrives in (as an HTTP body would).
const PIECE: usize = 1 << 20;
const WINDOW: u64 = 16 << 20;

async fn put(ns: &Namespace, path: &str, data: &[u8]) -> tomus_wire::Result<()> {
    let (_, blob) = ns.create(path, CreateOptions::default()).await?;
    let mut w = blob.writer();
    for piece in data.chunks(PIECE) {
        w.write(piece).await?;
    }
    w.commit(Replace::default(), &CommitOptions::default())
        .await?;
    Ok(())
}

async fn get(ns: &Namespace, path: &str) -> tomus_wire::Result<u64> {
    let (o, blob) = ns.object(path, None).await?;
    let size = o.version.size;
    let mut buf = vec![0u8; WINDOW.min(size) as usize];
    let mut off = 0;
    while off < size {
        let n = (buf.len() as u64).min(size - off) as usize;
        blob.read_version_into(&o.version, off, &mut buf[..n])
            .await?;
        off += n as u64;
    }
    Ok(size)
}

/// Runs `ops(client index)` on `clients` concurrent tasks; returns the seconds until all ended.
async fn timed<F, Fut>(clients: usize, ops: F) -> Result<f64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = tomus_wire::Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..clients).map(|i| tokio::spawn(ops(i))).collect();
    for h in handles {
        h.await??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Runs the scenario in a directory of its own, removed afterwards (whether it succeeded or
/// not) unless `--keep-data`.
pub async fn objects(client: &Client, args: &BenchArgs) -> Result<Value> {
    let ns = client.namespace();
    let run: u64 = rand::random();
    let dir = format!("bench-objects-{run:x}");
    ns.mkdir(&dir, true).await?;
    let out = objects_in(&ns, &dir, args).await;
    if !args.keep_data {
        if let Err(e) = ns.delete(&dir, true).await {
            eprintln!("bench: cannot remove /{dir}: {e}");
        }
    }
    out
}

async fn objects_in(ns: &Namespace, dir: &str, args: &BenchArgs) -> Result<Value> {
    let size = args.object_size as usize;
    let small_ops = args.small_ops as usize;
    let mut points = Vec::new();
    for &n in &args.clients {
        let data = std::sync::Arc::new(pattern::generate(n as u64, size));
        let big = |i: usize| format!("{dir}/c{n}/big-{i}");
        let secs = timed(n, |i| {
            let (ns, data, path) = (ns.clone(), data.clone(), big(i));
            async move { put(&ns, &path, &data).await }
        })
        .await?;
        let put_mib_s = (n * size) as f64 / MIB / secs;
        let secs = timed(n, |i| {
            let (ns, path) = (ns.clone(), big(i));
            async move { get(&ns, &path).await.map(|_| ()) }
        })
        .await?;
        let get_mib_s = (n * size) as f64 / MIB / secs;
        let small = std::sync::Arc::new(pattern::generate(7, SMALL));
        let prefix = format!("{dir}/c{n}/small");
        let secs = timed(n, |i| {
            let (ns, small, p) = (ns.clone(), small.clone(), format!("{prefix}-{i}"));
            async move {
                for k in 0..small_ops {
                    put(&ns, &format!("{p}/{k}"), &small).await?;
                }
                Ok(())
            }
        })
        .await?;
        let put_ops = (n * small_ops) as f64 / secs;
        let secs = timed(n, |i| {
            let (ns, p) = (ns.clone(), format!("{prefix}-{i}"));
            async move {
                for k in 0..small_ops {
                    get(&ns, &format!("{p}/{k}")).await?;
                }
                Ok(())
            }
        })
        .await?;
        let get_ops = (n * small_ops) as f64 / secs;
        points.push(json!({
            "clients": n, "object_bytes": size, "small_ops_per_client": small_ops,
            "put_mib_s": put_mib_s, "get_mib_s": get_mib_s,
            "put_4k_ops_s": put_ops, "get_4k_ops_s": get_ops,
        }));
    }
    Ok(json!({ "points": points }))
}
