//! Property test against real processes: random unaligned, overlapping writes (some past the
//! end, leaving holes) and appends, some issued concurrently, on a real cluster; every version
//! must read back exactly as a plain byte-vector model says.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use proptest::prelude::*;
use tomus_cli::pattern;

use common::TestCluster;

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, len: u64 },
    Append { len: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..200_000, 1u64..40_000).prop_map(|(offset, len)| Op::Write { offset, len }),
        (1u64..30_000).prop_map(|len| Op::Append { len }),
    ]
}

/// Applies `op` (data from `seed`) to `model`; for appends, at `at`.
fn apply(model: &mut Vec<u8>, op: &Op, at: u64, seed: u64) {
    let (offset, len) = match *op {
        Op::Write { offset, len } => (offset, len),
        Op::Append { len } => (at, len),
    };
    let end = (offset + len) as usize;
    if model.len() < end {
        model.resize(end, 0);
    }
    model[offset as usize..end].copy_from_slice(&pattern::generate(seed, len as usize));
}

#[test]
fn versions_match_the_model_on_a_real_cluster() {
    let tc = TestCluster::start(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(tc.client());
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(batches in prop::collection::vec(prop::collection::vec(op(), 1..4), 1..8))| {
        rt.block_on(async {
            // 4 KiB chunks: trees many levels deep, writes spanning many leaves.
            let blob = client.create_blob(4 << 10, 1).await.unwrap();
            let mut done: Vec<(u64, u64, Op, u64)> = Vec::new(); // (version, landed offset, op, seed)
            let mut seed = 0u64;
            for batch in &batches {
                // Each batch runs concurrently: versions are assigned in some order.
                let calls = batch.iter().map(|op| {
                    seed += 1;
                    let (blob, op, s) = (blob.clone(), op.clone(), seed);
                    async move {
                        let data = pattern::generate(s, match op { Op::Write { len, .. } | Op::Append { len } => len as usize });
                        let (v, at) = match op {
                            Op::Write { offset, .. } => (blob.write(offset, &data).await.unwrap(), offset),
                            Op::Append { .. } => blob.append(&data).await.unwrap(),
                        };
                        (v, at, op, s)
                    }
                });
                done.extend(futures::future::join_all(calls).await);
            }
            done.sort_by_key(|d| d.0);
            let mut model = Vec::new();
            for (v, at, op, s) in &done {
                if let Op::Append { .. } = op {
                    prop_assert_eq!(*at, model.len() as u64, "append of version {} landed off the end", v);
                }
                apply(&mut model, op, *at, *s);
                let got = blob.read(0, model.len() as u64, Some(*v)).await.unwrap();
                prop_assert!(got == model, "version {} differs from the model", v);
            }
            Ok(())
        })?;
    });
}
