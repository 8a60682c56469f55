//! Benchmark (ignored by default; run by bench/geo_replication.sh): geo-replication lag under
//! a steady write load over a rate-limited link. Site A (manager and provider) on one network
//! namespace, site B on another whose link is shaped with `tc` to `TOMUS_BENCH_LINK_MBIT`
//! (default 40) Mbit/s each way. For each offered load (a fraction of the link), a client
//! appends to four files on A at 20 versions per second for `TOMUS_BENCH_SECONDS` (default
//! 20) while `/data` is replicated to B; then it waits until B has caught up.
//!
//! Reported per load: the delay of every version (its publication on B minus its publication
//! on A, from both clusters' version records), as median, p95 and max; the lag the service
//! reported (`tomus sites status`) sampled every 250 ms; the catch-up time after the load
//! stopped; and the rate at which data reached B. JSON to `TOMUS_BENCH_OUT` (and stdout).

#![allow(clippy::unwrap_used, reason = "a benchmark stops at its first error")]

mod common;

use std::time::{Duration, Instant};

use tomus_client::{Client, CreateOptions};
use tomus_wire::{Retention, VersionState};

use common::hosts::Hosts;

const FILES: usize = 4;
const VERSIONS_PER_S: u64 = 20;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Publication times of every version of each file under `dir`: path → version → ms.
async fn published(
    c: &Client,
    dir: &str,
) -> std::collections::BTreeMap<String, Vec<(String, u64)>> {
    let mut out = std::collections::BTreeMap::new();
    for e in c.internal_namespace().walk(dir).await.unwrap() {
        let Some(info) = e.blob else { continue };
        let mut vs = Vec::new();
        for (v, attrs) in c.blob(&info).versions_attrs().await.unwrap() {
            if v.version == 0 || v.state != VersionState::Published {
                continue;
            }
            let key = attrs
                .get(tomus_sites::REPLICA_OF)
                .cloned()
                .unwrap_or_else(|| format!("{}:{}", info.id, v.version));
            vs.push((key, v.published_ms));
        }
        out.insert(e.path, vs);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: bench/geo_replication.sh"]
async fn bench_replication_lag_over_a_shaped_link() {
    let link_mbit = env_or("TOMUS_BENCH_LINK_MBIT", 40) as u32;
    let seconds = env_or("TOMUS_BENCH_SECONDS", 20);
    let mut hosts = Hosts::new("sites-bench", 2);
    assert!(
        hosts.is_netns(),
        "the benchmark needs network namespaces (root)"
    );
    let mut managers = Vec::new();
    for (h, name) in [(0usize, "a"), (1, "b")] {
        let (_, addr) = hosts.spawn_manager(h, &format!("manager-{name}"), &[]);
        let provider = format!("provider-{name}");
        hosts.spawn_provider(h, &provider, &addr, &provider, &[]);
        managers.push(addr);
    }
    hosts.shape_host(1, link_mbit).unwrap();
    let options = hosts.client_options();
    let ca = Client::connect(&managers[0], options.clone())
        .await
        .unwrap();
    let cb = Client::connect(&managers[1], options).await.unwrap();
    let secret = hosts.secret_file.to_string_lossy().into_owned();
    tomus_sites::add_site(
        &ca,
        "b",
        tomus_sites::Site {
            addr: managers[1].clone(),
            secret_file: Some(secret),
        },
    )
    .await
    .unwrap();
    let link_bytes_s = f64::from(link_mbit) * 1e6 / 8.0;
    let mut results = Vec::new();
    for (n, load) in [0.25f64, 0.5, 0.75].into_iter().enumerate() {
        let root = format!("run{n}");
        let ns = ca.namespace();
        ns.mkdir(&root, true).await.unwrap();
        ns.set_retention(&root, Some(Retention::KeepAll))
            .await
            .unwrap();
        tomus_sites::replicate(&ca, &root, "b", 0).await.unwrap();
        let size = (load * link_bytes_s / VERSIONS_PER_S as f64) as usize;
        let data = vec![0x5au8; size];
        let opts = CreateOptions {
            chunk_size: 1 << 20,
            replication: 1,
            exclusive: false,
        };
        let mut blobs = Vec::new();
        for f in 0..FILES {
            blobs.push(ns.create(&format!("{root}/f{f}"), opts).await.unwrap().1);
        }
        // The steady load: one append every 1/20 s, round robin over the files.
        let started = Instant::now();
        let tick = Duration::from_millis(1000 / VERSIONS_PER_S);
        let mut samples: Vec<(f64, u64, f64)> = Vec::new();
        let mut next_sample = Instant::now();
        let mut written = 0u64;
        let mut i = 0usize;
        while started.elapsed() < Duration::from_secs(seconds) {
            let due = started + tick * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                tokio::time::sleep(wait).await;
            }
            blobs[i % FILES].append(&data).await.unwrap();
            written += size as u64;
            i += 1;
            if Instant::now() >= next_sample {
                next_sample += Duration::from_millis(250);
                let st = tomus_sites::status(&ca).await.unwrap();
                if let Some(r) = st.rules.get(&format!("b:/{root}")) {
                    samples.push((
                        started.elapsed().as_secs_f64(),
                        r.versions_behind,
                        r.seconds_behind,
                    ));
                }
            }
        }
        let load_end = Instant::now();
        let offered_s = started.elapsed().as_secs_f64();
        // Caught up: B has every version of every file.
        let want = published(&ca, &root).await;
        let total: usize = want.values().map(Vec::len).sum();
        let deadline = Instant::now() + Duration::from_secs(600);
        let got = loop {
            let got = published(&cb, &root).await;
            let have: usize = got.values().map(Vec::len).sum();
            if have >= total {
                break got;
            }
            assert!(
                Instant::now() < deadline,
                "B has {have} of {total} versions"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let catch_up_s = load_end.elapsed().as_secs_f64();
        let mut delays = Vec::new();
        let mut last_b = 0u64;
        let mut first_a = u64::MAX;
        for (path, vs) in &want {
            let on_b: std::collections::HashMap<&str, u64> =
                got[path].iter().map(|(k, ms)| (k.as_str(), *ms)).collect();
            for (k, ms) in vs {
                let b_ms = on_b[k.as_str()];
                delays.push(b_ms.saturating_sub(*ms) as f64 / 1000.0);
                last_b = last_b.max(b_ms);
                first_a = first_a.min(*ms);
            }
        }
        let span_s = (last_b.saturating_sub(first_a)) as f64 / 1000.0;
        let mut lag_s: Vec<f64> = samples.iter().map(|s| s.2).collect();
        let mut lag_v: Vec<f64> = samples.iter().map(|s| s.1 as f64).collect();
        let mut d = delays.clone();
        let r = serde_json::json!({
            "offered_fraction_of_link": load,
            "offered_mib_s": written as f64 / offered_s / 1048576.0,
            "version_bytes": size,
            "versions": total,
            "load_seconds": offered_s,
            "version_delay_s": {
                "median": quantile(&mut d, 0.5),
                "p95": quantile(&mut d, 0.95),
                "max": quantile(&mut d, 1.0),
            },
            "reported_lag_seconds": {
                "median": quantile(&mut lag_s, 0.5),
                "max": quantile(&mut lag_s, 1.0),
            },
            "reported_lag_versions": {
                "median": quantile(&mut lag_v, 0.5),
                "max": quantile(&mut lag_v, 1.0),
            },
            "catch_up_after_load_s": catch_up_s,
            "delivered_mib_s": written as f64 / span_s.max(0.001) / 1048576.0,
        });
        eprintln!("{r}");
        results.push(r);
        tomus_sites::stop_replicating(&ca, &root, "b")
            .await
            .unwrap();
    }
    let out = serde_json::json!({
        "benchmark": "geo-replication lag under a steady append load over a tc-shaped link",
        "link_mbit_s": link_mbit,
        "link_mib_s": link_bytes_s / 1048576.0,
        "versions_per_s": VERSIONS_PER_S,
        "files": FILES,
        "build": if cfg!(debug_assertions) { "debug (workspace crates unoptimized)" } else { "release" },
        "machine": "2 shared cores, other jobs running: figures are indicative",
        "runs": results,
    });
    let text = serde_json::to_string_pretty(&out).unwrap();
    println!("{text}");
    if let Ok(path) = std::env::var("TOMUS_BENCH_OUT") {
        std::fs::write(path, text + "\n").unwrap();
    }
}
