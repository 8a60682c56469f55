//! `tomus bench --scenarios memory`: the memory storage class against the disk class on one
//! cluster in one sitting. Each round runs both classes one after the other (which goes
//! first alternates), on blobs of replication 2: 4 KiB appends and random 4 KiB reads, then
//! 4 MiB appends and 4 MiB reads, by 1 client and by 8 concurrent clients. Medians over the
//! rounds, and the memory/disk ratio of each. The providers keep the memory class in RAM
//! (`--memory-class 2GiB`) and write the disk class with the cluster's fsync setting.

use std::time::Instant;

use anyhow::Result;
use rand::Rng;
use serde_json::{json, Value};
use tomus_client::{Blob, Client};
use tomus_wire::StorageClass;

use crate::bench::{median, point, BenchArgs};
use crate::bench_cleanup::Made;
use crate::pattern;

const SMALL: usize = 4096;
const LARGE: usize = 4 << 20;
/// 4 MiB operations per client per round.
const LARGE_OPS: usize = 8;
const CLIENTS: [usize; 2] = [1, 8];
const CLASSES: [StorageClass; 2] = [StorageClass::Disk, StorageClass::Memory];

/// The `tomus provider` arguments the scenario's cluster needs.
pub fn provider_args() -> Vec<String> {
    vec!["--memory-class".into(), "2GiB".into()]
}

/// Runs `clients` tasks of `ops` operations each; returns operations per second.
async fn rate<F, Fut>(clients: usize, ops: usize, op: F) -> Result<f64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = tomus_wire::Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..clients).map(|i| tokio::spawn(op(i))).collect();
    for h in handles {
        h.await??;
    }
    Ok((clients * ops) as f64 / start.elapsed().as_secs_f64())
}

/// One class, one client count, one round: (append_4k, read_4k, append_4m, read_4m) ops/s.
async fn round(
    client: &Client,
    made: &Made,
    class: StorageClass,
    clients: usize,
    small_ops: usize,
) -> Result<[f64; 4]> {
    let small = client.create_blob_in(64 << 10, 2, class).await?;
    made.record(small.id());
    let large = client.create_blob_in(LARGE as u64, 2, class).await?;
    made.record(large.id());
    let appends = |blob: &Blob, len: usize, ops: usize| {
        let blob = blob.clone();
        move |i: usize| {
            let b = blob.clone();
            async move {
                let data = pattern::generate(i as u64, len);
                for _ in 0..ops {
                    b.append(&data).await?;
                }
                Ok(())
            }
        }
    };
    let reads = |blob: &Blob, len: usize, ops: usize, size: u64| {
        let blob = blob.clone();
        move |_: usize| {
            let b = blob.clone();
            async move {
                let mut buf = vec![0u8; len];
                let slots = (size / len as u64).max(1);
                for _ in 0..ops {
                    let off = rand::thread_rng().gen_range(0..slots) * len as u64;
                    b.read_into(off, &mut buf, None).await?;
                }
                Ok(())
            }
        }
    };
    let a4k = rate(clients, small_ops, appends(&small, SMALL, small_ops)).await?;
    let size = small.size(None).await?;
    let r4k = rate(clients, small_ops, reads(&small, SMALL, small_ops, size)).await?;
    let a4m = rate(clients, LARGE_OPS, appends(&large, LARGE, LARGE_OPS)).await?;
    let size = large.size(None).await?;
    let r4m = rate(clients, LARGE_OPS, reads(&large, LARGE, LARGE_OPS, size)).await?;
    made.delete_all(client).await;
    Ok([a4k, r4k, a4m, r4m])
}

pub async fn memory(client: &Client, args: &BenchArgs, made: &Made) -> Result<Value> {
    const OPS: [&str; 4] = ["append_4k", "read_4k", "append_4m", "read_4m"];
    let small_ops = (args.small_ops as usize).max(1);
    let mut out = serde_json::Map::new();
    for &n in &CLIENTS {
        // runs[class][op] -> ops/s per round.
        let mut runs = vec![vec![Vec::new(); OPS.len()]; CLASSES.len()];
        for r in 0..args.runs {
            for k in 0..CLASSES.len() {
                // Alternate which class goes first, so neither always runs on a warmer cache.
                let c = (k + r) % CLASSES.len();
                let got = round(client, made, CLASSES[c], n, small_ops).await?;
                for (op, v) in got.iter().enumerate() {
                    runs[c][op].push(*v);
                }
            }
        }
        let mut per = serde_json::Map::new();
        for (op, name) in OPS.iter().enumerate() {
            let disk = median(runs[0][op].clone());
            let memory = median(runs[1][op].clone());
            let mib = |ops_s: f64| {
                let len = if name.ends_with("4k") { SMALL } else { LARGE };
                ops_s * len as f64 / (1 << 20) as f64
            };
            per.insert(
                (*name).into(),
                json!({
                    "disk": point(n, runs[0][op].clone(), "ops/s"),
                    "memory": point(n, runs[1][op].clone(), "ops/s"),
                    "disk_mib_s": mib(disk),
                    "memory_mib_s": mib(memory),
                    "ratio_memory_over_disk": memory / disk,
                }),
            );
        }
        out.insert(format!("clients_{n}"), Value::Object(per));
    }
    out.insert(
        "config".into(),
        json!({"replication": 2, "small_ops_per_client": small_ops,
               "large_ops_per_client": LARGE_OPS, "small_chunk_size": 65536,
               "large_chunk_size": LARGE,
               "build_profile": if cfg!(debug_assertions) { "debug" } else { "release" }}),
    );
    Ok(Value::Object(out))
}
