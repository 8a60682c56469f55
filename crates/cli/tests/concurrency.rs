//! Concurrent writers, appenders and readers against real manager and provider processes,
//! checked against a plain model.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use tomus_cli::pattern;

use common::TestCluster;

/// Log-uniform size in [1, max]: many small, some large (mean far below max).
fn log_uniform(rng: &mut impl Rng, max: u64) -> u64 {
    let e = rng.gen_range(0.0..(max as f64).ln());
    (e.exp() as u64).clamp(1, max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_appenders_land_contiguously_without_overlap() {
    let tc = TestCluster::start(4);
    let client = tc.client().await;
    let blob = client.create_blob(1 << 20, 1).await.unwrap();
    let landed = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..16u64)
        .map(|w| {
            let (blob, landed) = (blob.clone(), landed.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                for seq in 0..50 {
                    let len = log_uniform(&mut rng, 10 << 20);
                    let seed = pattern::seed(w, seq);
                    let (version, offset) = blob
                        .append(&pattern::generate(seed, len as usize))
                        .await
                        .unwrap();
                    landed.lock().unwrap().push((version, offset, len, seed));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut all = landed.lock().unwrap().clone();
    all.sort();
    assert_eq!(all.len(), 800);
    let versions: Vec<u64> = all.iter().map(|a| a.0).collect();
    assert_eq!(
        versions,
        (1..=800).collect::<Vec<_>>(),
        "one version per append, no gaps"
    );
    let mut expect = 0;
    for &(v, off, len, _) in &all {
        assert_eq!(
            off, expect,
            "append of version {v} landed at {off}, previous ended at {expect}"
        );
        expect += len;
    }
    assert_eq!(blob.size(None).await.unwrap(), expect);
    // Content equals the concatenation in version order, read back in one pass at the end.
    let whole = blob.read(0, expect, Some(800)).await.unwrap();
    for &(v, off, len, seed) in &all {
        assert!(
            whole[off as usize..(off + len) as usize] == pattern::generate(seed, len as usize)[..],
            "content of append version {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_writers_match_the_model_at_every_version() {
    let tc = TestCluster::start(3);
    let client = tc.client().await;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    let done = Arc::new(Mutex::new(BTreeMap::new()));
    let tasks: Vec<_> = (0..8u64)
        .map(|w| {
            let (blob, done) = (blob.clone(), done.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(100 + w);
                for seq in 0..20 {
                    // Unaligned offsets, some past the current end (holes), overlapping others.
                    let offset = rng.gen_range(0..(2u64 << 20));
                    let len = rng.gen_range(1..(300u64 << 10));
                    let seed = pattern::seed(w, seq);
                    let v = blob
                        .write(offset, &pattern::generate(seed, len as usize))
                        .await
                        .unwrap();
                    done.lock().unwrap().insert(v, (offset, len, seed));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let done = done.lock().unwrap().clone();
    assert_eq!(done.len(), 160);
    let mut model: Vec<u8> = Vec::new();
    for (&v, &(offset, len, seed)) in &done {
        let end = (offset + len) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&pattern::generate(seed, len as usize));
        let got = blob.read(0, model.len() as u64, Some(v)).await.unwrap();
        assert!(got == model, "version {v} differs from the model");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_only_see_whole_snapshots_and_old_versions_never_change() {
    let tc = TestCluster::start(3);
    let client = tc.client().await;
    const SIZE: u64 = 1 << 20;
    let blob = client.create_blob(64 << 10, 1).await.unwrap();
    // Every write covers the whole range with one seed: a torn read mixes two patterns.
    let seeds = Arc::new(Mutex::new(BTreeMap::new()));
    let v1 = blob
        .write(0, &pattern::generate(0, SIZE as usize))
        .await
        .unwrap();
    seeds.lock().unwrap().insert(v1, 0u64);
    let writers: Vec<_> = (1..=4u64)
        .map(|w| {
            let (blob, seeds) = (blob.clone(), seeds.clone());
            tokio::spawn(async move {
                for seq in 0..10 {
                    let seed = pattern::seed(w, seq);
                    let data = pattern::generate(seed, SIZE as usize);
                    let v = blob.write(0, &data).await.unwrap();
                    seeds.lock().unwrap().insert(v, seed);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (blob, seeds) = (blob.clone(), seeds.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..15 {
                    let info = blob.stat(None).await.unwrap();
                    let got = blob.read(0, SIZE, Some(info.version)).await.unwrap();
                    seen.push((info.version, got));
                }
                // Versions read are published: their seed must show up once its writer returns.
                for _ in 0..200 {
                    let known = seeds.lock().unwrap().clone();
                    if seen.iter().all(|(v, _)| known.contains_key(v)) {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let known = seeds.lock().unwrap().clone();
                for (v, got) in &seen {
                    let seed = known[v];
                    assert!(
                        *got == pattern::generate(seed, SIZE as usize),
                        "torn read of version {v}"
                    );
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    for r in readers {
        for (v, got) in r.await.unwrap() {
            let again = blob.read(0, SIZE, Some(v)).await.unwrap();
            assert!(again == got, "version {v} changed after later writes");
        }
    }
    assert_eq!(blob.latest().await.unwrap(), 41);
}
