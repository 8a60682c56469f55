//! The segment tree against a plain byte-vector model: random unaligned, overlapping writes and
//! appends (holes included), assigned with lower versions still in flight and completed in random
//! order, exactly as the version manager hands them out. Every version must read back exactly
//! as the model says, whole and in random sub-ranges.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

use std::ops::Range;
use std::sync::atomic::Ordering;

use proptest::prelude::*;
use tomus_metadata::*;
use tomus_metadata_testing::{Op, Writers};

/// A minimal version manager + writer simulation.
type Sim = Writers;

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..400, 1u64..120).prop_map(|(offset, len)| Op::Write { offset, len }),
        (1u64..90).prop_map(|len| Op::Append { len }),
        (0u64..300).prop_map(|len| Op::Replace { len }),
        // A version that changes no byte (it only carries attributes).
        Just(Op::Write { offset: 0, len: 0 }),
        copy_op(0..1000, 1..300, 0..500),
    ]
}

/// A copy of a range of one of the last versions ([`Op::Copy`]).
fn copy_op(from: Range<u64>, len: Range<u64>, offset: Range<u64>) -> impl Strategy<Value = Op> {
    (0u64..4, from, len, offset).prop_map(|(back, from, len, offset)| Op::Copy {
        back,
        from,
        len,
        offset,
    })
}

/// Every version reads as the model says, whole and at each (offset, length) of `probes`, cut
/// to its size.
fn check_versions(sim: &Sim, probes: &[(u64, u64)]) -> Result<(), TestCaseError> {
    for v in 1..sim.model.len() as u64 {
        let size = sim.sizes[v as usize];
        let whole = sim.read(v, Span::new(0, size));
        prop_assert_eq!(&whole, &sim.model[v as usize], "version {} whole", v);
        for &(o, n) in probes {
            if size == 0 {
                continue;
            }
            let o = o % size;
            let n = n.min(size - o);
            let part = sim.read(v, Span::new(o, n));
            prop_assert_eq!(
                &part[..],
                &sim.model[v as usize][o as usize..(o + n) as usize]
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn every_version_matches_the_model(
        ops in prop::collection::vec(op_strategy(), 1..40),
        steps in prop::collection::vec((0usize..8, 0usize..16, 1u64..64), 1..80),
        cs_shift in 2u32..6,
        probes in prop::collection::vec((0u64..1000, 0u64..200), 8),
    ) {
        let cs = 1u64 << cs_shift;
        let mut sim = Sim::new(cs);
        let mut next_op = 0;
        // Interleave assignments and completions: `k` assignments then one completion.
        for (k, pick, cut) in steps.iter().copied() {
            for _ in 0..k.min(ops.len() - next_op) {
                sim.assign(&ops[next_op], next_op as u8);
                next_op += 1;
            }
            sim.complete(pick, cut);
        }
        while next_op < ops.len() {
            sim.assign(&ops[next_op], next_op as u8);
            next_op += 1;
        }
        let mut guard = 0;
        while !sim.pending.is_empty() {
            sim.complete(guard, 7 + guard as u64);
            guard += 1;
        }
        check_versions(&sim, &probes)?;
    }
}

/// Ops that all land in one slot of 1,024 bytes: long chains of leaves, merged again and again.
fn one_slot_op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..24).prop_map(|len| Op::Append { len }),
        2 => (0u64..1000, 1u64..24).prop_map(|(offset, len)| Op::Write { offset, len }),
        // Shorter content leaves zeros in the slot, which the merged leaves must keep over
        // the older bytes still below them.
        1 => (0u64..900).prop_map(|len| Op::Replace { len }),
        1 => copy_op(0..900, 1..100, 0..900),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Hundreds of versions of one slot, some writers in flight: the top of each full chain is
    /// merged, often over a base left below it (in about a third of the cases), and every
    /// version still reads as the model says.
    #[test]
    fn merged_leaf_chains_match_the_model(
        ops in prop::collection::vec(one_slot_op_strategy(), 150..400),
        in_flight in prop::collection::vec(0usize..4, 400),
        probes in prop::collection::vec((0u64..1024, 1u64..300), 4),
    ) {
        let mut sim = Sim::new(1024);
        for (i, op) in ops.iter().enumerate() {
            sim.assign(op, i as u8);
            if sim.pending.len() > in_flight[i] {
                sim.complete(i, 1024);
            }
        }
        while !sim.pending.is_empty() {
            sim.complete(0, 1024);
        }
        check_versions(&sim, &probes)?;
    }
}

#[test]
fn a_slot_of_small_appends_copies_each_piece_a_few_times() {
    // 1,024 appends of 4 bytes into one 4 KiB slot (a 4 MiB chunk of 4 KiB appends, scaled):
    // merging each full chain whole would store about 58 pieces per append.
    let mut sim = Sim::new(4096);
    for i in 0..1024 {
        sim.assign(&Op::Append { len: 4 }, i as u8);
        sim.complete(0, 4096);
    }
    let pieces: usize = sim
        .source
        .lock()
        .values()
        .map(|n| match &**n {
            Node::Leaf {
                pieces, inherited, ..
            } => pieces.len() + inherited.len(),
            Node::Inner { .. } => 0,
        })
        .sum();
    assert!(
        pieces <= 8 * 1024,
        "{pieces} pieces stored for 1,024 appends"
    );
    let cut_above_a_base = sim.source.lock().values().any(
        |n| matches!(&**n, Node::Leaf { inherited, base: Some(_), .. } if !inherited.is_empty()),
    );
    assert!(cut_above_a_base, "no chain was cut above a base");
    let v = sim.latest();
    assert_eq!(sim.read(v, Span::new(0, 4096)), sim.model[v as usize]);
}

#[test]
fn zeros_merged_above_a_base_hide_the_bytes_below() {
    let mut sim = Sim::new(4096);
    let mut step = |op: Op, fill: u8| {
        sim.assign(&op, fill);
        sim.complete(0, 4096);
    };
    step(
        Op::Write {
            offset: 1000,
            len: 1,
        },
        1,
    ); // bytes 0..1000 of version 1: a hole
    step(
        Op::Write {
            offset: 0,
            len: 1000,
        },
        2,
    );
    for i in 0..300 {
        step(Op::Append { len: 4 }, i as u8);
    }
    // Version 1's hole copied over 0..50: zero pieces over data older leaves hold.
    let copy = Op::Copy {
        back: 10_000,
        from: 0,
        len: 50,
        offset: 0,
    };
    step(copy, 3);
    for i in 0..16 {
        step(Op::Append { len: 4 }, i as u8);
    }
    let zeros_over_a_base = sim.source.lock().values().any(|n| {
        matches!(&**n, Node::Leaf { inherited, base: Some(_), .. }
            if inherited.iter().any(|p| p.chunk == ChunkId::ZEROS))
    });
    assert!(zeros_over_a_base, "the zeros were not merged above a base");
    check_versions(&sim, &[]).unwrap();
}

#[test]
#[should_panic(expected = "longer than")]
fn a_cycle_in_a_leaf_chain_fails_the_write_instead_of_looping() {
    let mut sim = Sim::new(4096);
    for i in 0..9 {
        sim.assign(&Op::Append { len: 4 }, i);
        sim.complete(0, 4096);
    }
    // The first leaf of the slot made to point at the latest: the chain has no end.
    let top = sim.root(sim.latest());
    let top = NodeRef { size: 4096, ..top };
    let mut nodes = sim.source.lock();
    let first = NodeRef { version: 1, ..top };
    let Some(Node::Leaf { pieces, .. }) = nodes.get(&first).map(|n| (**n).clone()) else {
        panic!("no leaf of version 1");
    };
    let cyclic = Node::Leaf {
        pieces,
        layers: Vec::new(),
        inherited: Vec::new(),
        base: Some(top),
        depth: 0,
    };
    nodes.insert(first, std::sync::Arc::new(cyclic));
    drop(nodes);
    sim.assign(&Op::Append { len: 4 }, 9);
    sim.complete(0, 4096);
}

#[test]
fn long_append_runs_keep_leaf_chains_short() {
    // Many tiny appends into one chunk slot, all sequential: chains must be flattened.
    let mut sim = Sim::new(4096);
    for i in 0..300 {
        sim.assign(&Op::Append { len: 7 }, i as u8);
        sim.complete(0, 4096);
    }
    let nodes = sim.source.lock();
    let max_depth = nodes
        .values()
        .filter_map(|n| match &**n {
            Node::Leaf { depth, .. } => Some(*depth),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(max_depth <= MAX_LEAF_CHAIN, "depth {max_depth}");
    drop(nodes);
    let v = sim.latest();
    assert_eq!(
        sim.read(v, Span::new(0, sim.sizes[v as usize])),
        sim.model[v as usize]
    );
}

#[test]
fn a_write_adds_logarithmically_many_nodes() {
    let cs = 4096;
    let mut sim = Sim::new(cs);
    sim.assign(
        &Op::Write {
            offset: 0,
            len: cs * 1024,
        },
        1,
    );
    sim.complete(0, cs);
    let before = sim.source.lock().len();
    sim.assign(
        &Op::Write {
            offset: cs * 517 + 5,
            len: 10,
        },
        2,
    );
    sim.complete(0, cs);
    let added = sim.source.lock().len() - before;
    // One leaf and one node per level above it: log2(1024) + 1.
    assert_eq!(added, 11);
}

#[test]
fn appends_with_writers_always_in_flight_keep_reads_short() {
    // 8 appenders into one slot, a new one assigned each time one completes, so lower versions
    // are always in flight: the tail leaf of every version must still resolve in a bounded
    // number of lookups (layers <= writers in flight, base chain <= MAX_LEAF_CHAIN).
    let mut sim = Sim::new(1 << 20);
    let mut n = 0u8;
    for _ in 0..8 {
        sim.assign(&Op::Append { len: 64 }, n);
        n = n.wrapping_add(1);
    }
    for _ in 0..600 {
        sim.complete(0, 1 << 20);
        sim.assign(&Op::Append { len: 64 }, n);
        n = n.wrapping_add(1);
    }
    while !sim.pending.is_empty() {
        sim.complete(0, 1 << 20);
    }
    let v = sim.latest();
    let size = sim.sizes[v as usize];
    sim.source.fetches.store(0, Ordering::Relaxed);
    assert_eq!(sim.read(v, Span::new(0, size)), sim.model[v as usize]);
    let fetches = sim.source.fetches.load(Ordering::Relaxed);
    // One leaf slot: the leaf, up to 8 layers and a chain of up to MAX_LEAF_CHAIN bases, each
    // of which may bring its own layers.
    let bound = (1 + 8) * (MAX_LEAF_CHAIN as usize + 1);
    assert!(
        fetches <= bound,
        "{fetches} lookups to read one slot (bound {bound})"
    );
}
