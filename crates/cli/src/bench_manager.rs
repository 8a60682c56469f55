//! `tomus bench --scenarios manager`: the manager alone, without data.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};
use tomus_wire::manager::{Assign, Complete, CreateBlob};
use tomus_wire::{Attrs, DataAge, Pool, RpcConfig, WriteOp};

use crate::bench_cleanup::Made;

const BLOCK: u64 = 4 << 20;

/// The manager alone: version assignment + publication with no data, in process (its own
/// durable store, group commit included) and over RPC against the cluster's manager; and the
/// creation of new files in process (by 1 creator, then 16 at once: batched commits).
pub(crate) async fn manager(addr: &str, dir: &std::path::Path, made: &Made) -> Result<Value> {
    let duration = Duration::from_secs(3);
    let store = Arc::new(tomus_manager::store::Store::open(
        &dir.join("micro-manager"),
    )?);
    let vm = tomus_manager::VersionManager::open(store.clone(), &tomus_worker::Workers::default())?;
    let ns = Arc::new(tomus_manager::namespace::Namespace::open(
        store,
        vm.clone(),
    )?);
    let next = Arc::new(AtomicU64::new(0));
    // One creator pays a sync per file; concurrent ones share them.
    let mut creations = Vec::new();
    for creators in [1, 16] {
        let (ns, next) = (ns.clone(), next.clone());
        let rate = drive(creators, duration, move || {
            let (ns, next) = (ns.clone(), next.clone());
            async move {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let path = format!("bench/f{n}");
                tokio::task::spawn_blocking(move || ns.create(&path, BLOCK, 1, true, None))
                    .await
                    .map_err(|e| tomus_wire::Error::internal(format!("creation failed: {e}")))??;
                Ok(())
            }
        })
        .await?;
        creations.push(json!({"creators": creators, "files_s": rate}));
    }
    let blob = vm.create_blob(BLOCK, 1, tomus_wire::Retention::KeepAll)?.id;
    let in_process = drive(256, duration, {
        let vm = vm.clone();
        move || {
            let vm = vm.clone();
            async move {
                let a = vm
                    .assign(
                        blob,
                        WriteOp::Append { size: 4096 },
                        Attrs::new(),
                        None,
                        DataAge::default(),
                    )
                    .await?;
                vm.complete(blob, a.version).await?;
                Ok(())
            }
        }
    })
    .await?;
    let pool = Pool::new(RpcConfig::default());
    let create = CreateBlob {
        chunk_size: BLOCK,
        replication: 1,
    };
    let blob = pool.call(addr, create).await?.id;
    made.record(blob);
    let addr = addr.to_string();
    let over_rpc = drive(64, duration, move || {
        let (pool, addr) = (pool.clone(), addr.clone());
        async move {
            let assign = Assign {
                blob,
                op: WriteOp::Append { size: 4096 },
                attrs: Attrs::new(),
                expect_size: None,
                data: DataAge::default(),
            };
            let version = pool.call(&addr, assign).await?.version;
            pool.call(&addr, Complete { blob, version }).await?;
            Ok(())
        }
    })
    .await?;
    Ok(json!({
        "in_process_ops_s": in_process,
        "rpc_ops_s": over_rpc,
        "unit": "assign+publish per second",
        "file_creations": creations,
    }))
}

/// Runs `op` from `tasks` concurrent loops for `duration`; returns operations per second.
async fn drive<F, Fut>(tasks: usize, duration: Duration, op: F) -> Result<f64>
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = tomus_wire::Result<()>> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (op, stop, count) = (op.clone(), stop.clone(), count.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    op().await?;
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, tomus_wire::Error>(())
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}
