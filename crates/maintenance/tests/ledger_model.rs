//! The ledger against the real tree-building code: random unaligned writes, appends and
//! copies made of metadata only, assigned with lower versions in flight and completed in
//! random order (exactly as the version manager hands them out), random retention, and
//! garbage collection carried out from the ledger after every change. After every step each
//! retained version must read back exactly as the model says (nothing live was deleted), and
//! at the end nothing unreachable may be left (nothing leaked). Midway, the ledger may be
//! thrown away and rebuilt from the retained trees, as the service does when it lost it.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

use std::collections::HashSet;

use futures::executor::block_on;
use proptest::prelude::*;
use tomus_maintenance::delta::{delta, rebuild, KnownWrites};
use tomus_maintenance::ledger::{Doom, Ledger, Step};
use tomus_metadata::*;
use tomus_metadata_testing::{Assigned, Op, Writers};
use tomus_wire::{VersionInfo, VersionState};

const BLOB: BlobId = 7;

#[derive(Clone, Debug)]
enum Action {
    /// A write, append or copy (a copy's chunks are resolved when it gets its version).
    Write(Op),
    /// Retention moves up by this many published versions (as far as the writers in
    /// progress let it).
    Expire { by: u64 },
}

struct Sim {
    /// The writers, each version tagged with the clock when it was assigned.
    writers: Writers<u64>,
    /// Published versions in order, with their records.
    history: Vec<VersionInfo>,
    retained_from: Version,
    ledger: Ledger,
    /// A logical clock: one tick per step.
    now: u64,
}

impl Sim {
    fn new(cs: u64) -> Self {
        Sim {
            writers: Writers::new(cs),
            history: Vec::new(),
            retained_from: 0,
            ledger: Ledger::in_memory().unwrap(),
            now: 1,
        }
    }

    fn act(&mut self, action: &Action, fill: u8) {
        match action {
            Action::Write(op) => {
                self.writers.assign_tagged(op, fill, self.now);
            }
            Action::Expire { by } => self.expire(*by),
        }
    }

    /// The writer of the `pick`-th pending version stores its chunks and metadata and
    /// completes; the completed prefix is published and counted.
    fn complete(&mut self, pick: usize, cut: u64) {
        for a in self.writers.complete(pick, cut) {
            self.publish(a);
        }
    }

    fn publish(&mut self, a: Assigned<u64>) {
        let info = VersionInfo {
            blob: BLOB,
            version: a.version,
            span: a.span,
            size: self.writers.sizes[a.version as usize],
            capacity: a.capacity,
            state: VersionState::Published,
            append: false,
            published_ms: self.now,
        };
        let prev = self.history.last().map(|p| (p.version, p.capacity));
        let source = &self.writers.source;
        let cs = self.writers.cs;
        let read = block_on(delta(source, cs, &info, prev, &KnownWrites::new())).expect("delta");
        // Taking children from the writes of earlier versions must find what reading the
        // previous tree finds.
        let known: KnownWrites = self.history.iter().map(|v| (v.version, v.span)).collect();
        let d = block_on(delta(source, cs, &info, prev, &known)).expect("delta");
        assert_eq!(d, read, "delta of {info:?} from known writes");
        let step = Step::Count {
            blob: BLOB,
            chunk_size: self.writers.cs,
            replication: 1,
            version: info.version,
            capacity: info.capacity,
            delta: d,
        };
        self.apply(vec![step]);
        self.history.push(info);
    }

    fn apply(&mut self, steps: Vec<Step>) {
        self.now += 1;
        let applied = self.ledger.apply(&steps, 0, self.now).unwrap();
        assert!(
            applied.inconsistencies.is_empty(),
            "{:?}",
            applied.inconsistencies
        );
    }

    /// Retention moves up `by` published versions, held back (as the manager does) by the
    /// version each writer in progress builds on; the latest always stays.
    fn expire(&mut self, by: u64) {
        let Some(latest) = self.history.last().map(|i| i.version) else {
            return;
        };
        let retained: Vec<Version> = self
            .history
            .iter()
            .map(|i| i.version)
            .filter(|v| *v >= self.retained_from)
            .collect();
        let mut keep_from = retained
            .get((by as usize).min(retained.len() - 1))
            .copied()
            .unwrap_or(latest);
        for (a, _) in self.writers.pending.values() {
            keep_from = keep_from.min(a.published.map_or(1, |p| p.version.max(1)));
        }
        if keep_from <= self.retained_from {
            return;
        }
        self.retained_from = keep_from;
        self.writers.copyable_from = keep_from;
        self.apply(vec![Step::Expire {
            blob: BLOB,
            retained_from: keep_from,
        }]);
    }

    /// Carries out what the ledger says is dead: doomed nodes, and chunks unreferenced since
    /// before the cutoff (held back by copies in progress, as the manager holds it).
    fn collect(&mut self) {
        let mut after = 0;
        loop {
            let batch = self.ledger.doomed(after, 100).unwrap();
            let Some(&(last, _)) = batch.last() else {
                break;
            };
            after = last;
            let mut nodes = self.writers.source.lock();
            for (_, doom) in &batch {
                match doom {
                    Doom::Nodes(keys) => {
                        for k in keys {
                            assert!(
                                k.node.version < self.retained_from,
                                "node {k:?} of a retained version doomed"
                            );
                            nodes.remove(&k.node);
                        }
                    }
                    Doom::Ranges(_) => panic!("no blob is deleted or aborted here"),
                }
            }
            drop(nodes);
            let ids: Vec<u64> = batch.iter().map(|(id, _)| *id).collect();
            self.ledger.done_doomed(&ids).unwrap();
        }
        // Time passes: what was released before now is past its grace.
        self.now += 1;
        let cutoff = self
            .writers
            .pending
            .values()
            .filter_map(|(a, _)| a.reused.as_ref().map(|_| a.tag))
            .fold(self.now, u64::min);
        let dead = self
            .ledger
            .unreferenced_before(cutoff, None, usize::MAX)
            .unwrap();
        let ids: Vec<ChunkId> = dead.iter().map(|(id, _)| *id).collect();
        for id in self.ledger.forget_chunks(&ids).unwrap() {
            self.writers.chunks.remove(&id);
        }
    }

    /// Rebuilds what the ledger tracks of the blob from its retained versions with the
    /// service's own rebuild steps (which start by forgetting it).
    fn rebuild(&mut self) {
        let retained: Vec<VersionInfo> = self
            .history
            .iter()
            .filter(|i| i.version >= self.retained_from)
            .cloned()
            .collect();
        let steps = block_on(rebuild(
            &self.writers.source,
            BLOB,
            self.writers.cs,
            1,
            &retained,
        ))
        .expect("rebuild");
        self.apply(steps);
    }

    /// Every retained version reads back as the model says.
    fn check_retained(&self) {
        for info in self
            .history
            .iter()
            .filter(|i| i.version >= self.retained_from)
        {
            let v = info.version;
            assert_eq!(
                self.writers
                    .read(v, Span::new(0, self.writers.sizes[v as usize])),
                self.writers.model[v as usize],
                "version {} (retained from {})",
                info.version,
                self.retained_from
            );
        }
    }

    /// Every node and chunk the tree of `v` reaches (through inner nodes, bases, layers).
    fn reachable(&self, v: Version) -> (HashSet<NodeRef>, HashSet<ChunkId>) {
        let mut nodes = HashSet::new();
        let mut chunks = HashSet::new();
        let mut stack = vec![self.writers.root(v)];
        let m = self.writers.source.lock();
        while let Some(r) = stack.pop() {
            if !nodes.insert(r) {
                continue;
            }
            match m.get(&r).map(|n| n.as_ref()) {
                Some(Node::Inner { left, right }) => stack.extend(left.iter().chain(right.iter())),
                Some(Node::Leaf {
                    pieces,
                    layers,
                    inherited,
                    base,
                    ..
                }) => {
                    chunks.extend(pieces.iter().chain(inherited).map(|p| p.chunk));
                    stack.extend(layers.iter().chain(base.iter()));
                }
                None => panic!("node {r:?} reachable from version {v} is gone"),
            }
        }
        chunks.remove(&ChunkId::ZEROS);
        (nodes, chunks)
    }
}

fn action_strategy() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0u64..400, 1u64..120)
            .prop_map(|(offset, len)| Action::Write(Op::Write { offset, len })),
        4 => (1u64..90).prop_map(|len| Action::Write(Op::Append { len })),
        2 => (0u64..300).prop_map(|len| Action::Write(Op::Replace { len })),
        1 => Just(Action::Write(Op::Write { offset: 0, len: 0 })),
        2 => (0u64..4, 0u64..1000, 1u64..300, 0u64..500).prop_map(|(back, from, len, offset)| {
            Action::Write(Op::Copy {
                back,
                from,
                len,
                offset,
            })
        }),
        3 => (0u64..4).prop_map(|by| Action::Expire { by }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn collection_from_the_ledger_keeps_every_retained_version_and_leaks_nothing(
        ops in prop::collection::vec(action_strategy(), 1..50),
        steps in prop::collection::vec((0usize..6, 0usize..16, 1u64..64), 1..80),
        cs_shift in 2u32..6,
        rebuild_at in prop::option::of(0usize..80),
    ) {
        let cs = 1u64 << cs_shift;
        let mut sim = Sim::new(cs);
        let mut next_op = 0;
        for (i, (k, pick, cut)) in steps.iter().copied().enumerate() {
            for _ in 0..k.min(ops.len() - next_op) {
                sim.act(&ops[next_op], next_op as u8);
                next_op += 1;
            }
            sim.complete(pick, cut);
            if rebuild_at == Some(i) {
                sim.rebuild();
            }
            sim.collect();
            sim.check_retained();
        }
        while next_op < ops.len() {
            sim.act(&ops[next_op], next_op as u8);
            next_op += 1;
        }
        let mut guard = 0;
        while !sim.writers.pending.is_empty() {
            sim.complete(guard, 7 + guard as u64);
            guard += 1;
            sim.collect();
            sim.check_retained();
        }
        // Everything but the latest expires: what is left must be exactly what it reaches.
        if let Some(latest) = sim.history.last().map(|i| i.version) {
            sim.expire(u64::MAX);
            prop_assert_eq!(sim.retained_from, latest);
            sim.collect();
            sim.check_retained();
            let (nodes, chunks) = sim.reachable(latest);
            let stored: HashSet<NodeRef> = sim.writers.source.lock().keys().copied().collect();
            let leaked: Vec<&NodeRef> = stored.difference(&nodes).collect();
            prop_assert!(leaked.is_empty(), "nodes left unreachable: {:?}", leaked);
            let kept: HashSet<ChunkId> = sim.writers.chunks.keys().copied().collect();
            let leaked: Vec<&ChunkId> = kept.difference(&chunks).collect();
            prop_assert!(leaked.is_empty(), "chunks left unreferenced: {:?}", leaked);
        }
    }
}
