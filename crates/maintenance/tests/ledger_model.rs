//! The ledger against the real tree-building code: random unaligned writes, appends and
//! copies made of metadata only, assigned with lower versions in flight and completed in
//! random order (exactly as the version manager hands them out), random retention, and
//! garbage collection carried out from the ledger after every change. After every step each
//! retained version must read back exactly as the model says (nothing live was deleted), and
//! at the end nothing unreachable may be left (nothing leaked). Midway, the ledger may be
//! thrown away and rebuilt from the retained trees, as the service does when it lost it.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use proptest::prelude::*;
use tomus_maintenance::delta::{delta, rebuild};
use tomus_maintenance::ledger::{Doom, Ledger, Step};
use tomus_metadata::*;
use tomus_wire::{VersionInfo, VersionState};

const BLOB: BlobId = 7;

#[derive(Default)]
struct MemSource {
    nodes: Mutex<HashMap<NodeRef, Arc<Node>>>,
}

impl NodeSource for MemSource {
    type Error = MetaError;
    async fn fetch(&self, refs: &[NodeRef]) -> Result<Vec<Arc<Node>>, MetaError> {
        let nodes = self.nodes.lock().unwrap();
        refs.iter()
            .map(|r| nodes.get(r).cloned().ok_or(MetaError::Missing(*r)))
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        offset: u64,
        len: u64,
    },
    Append {
        len: u64,
    },
    /// A range of the latest published version written at `offset` as pieces of its
    /// chunks: no data stored.
    Copy {
        from: u64,
        len: u64,
        offset: u64,
    },
    /// Retention moves up by this many published versions (as far as the writers in
    /// progress let it).
    Expire {
        by: u64,
    },
}

struct Assigned {
    version: Version,
    span: Span,
    capacity: u64,
    published: Option<PublishedTree>,
    in_flight: Vec<InFlight>,
    data: Vec<u8>,
    /// For a copy: the chunks it reuses, resolved when it was assigned, and when.
    reused: Option<(Vec<StoredChunk>, u64)>,
}

struct Sim {
    cs: u64,
    source: MemSource,
    chunks: HashMap<ChunkId, Vec<u8>>,
    next_chunk: u128,
    size: u64,
    capacity: u64,
    next_version: Version,
    pending: BTreeMap<Version, (Assigned, bool)>,
    published: Option<PublishedTree>,
    /// Published versions in order, with their records.
    history: Vec<VersionInfo>,
    model: Vec<Vec<u8>>,
    sizes: Vec<u64>,
    caps: Vec<u64>,
    retained_from: Version,
    ledger: Ledger,
    /// A logical clock: one tick per step.
    now: u64,
}

impl Sim {
    fn new(cs: u64) -> Self {
        Sim {
            cs,
            source: MemSource::default(),
            chunks: HashMap::new(),
            next_chunk: 1,
            size: 0,
            capacity: 0,
            next_version: 1,
            pending: BTreeMap::new(),
            published: None,
            history: Vec::new(),
            model: vec![Vec::new()],
            sizes: vec![0],
            caps: vec![0],
            retained_from: 0,
            ledger: Ledger::in_memory().unwrap(),
            now: 1,
        }
    }

    fn assign(&mut self, op: &Op, fill: u8) {
        let mut reused = None;
        let (offset, len, data) = match *op {
            Op::Write { offset, len } => (offset, len, None),
            Op::Append { len } => (self.size, len, None),
            Op::Copy { from, len, offset } => {
                let Some(p) = self.published else { return };
                let size = self.sizes[p.version as usize];
                if size == 0 {
                    return;
                }
                let from = from % size;
                let len = len.min(size - from);
                let segs = block_on(resolve_range(p.root(), Span::new(from, len), &self.source))
                    .expect("resolve a copy's source");
                let stored: Vec<StoredChunk> = segs.iter().map(StoredChunk::from_segment).collect();
                reused = Some((stored, self.now));
                let data =
                    self.model[p.version as usize][from as usize..(from + len) as usize].to_vec();
                (offset, len, Some(data))
            }
            Op::Expire { .. } => return,
        };
        let data = data.unwrap_or_else(|| {
            (0..len)
                .map(|i| fill.wrapping_add((i % 251) as u8) | 1)
                .collect()
        });
        let version = self.next_version;
        self.next_version += 1;
        let end = offset + len;
        self.size = self.size.max(end);
        self.capacity = self.capacity.max(capacity_for(self.cs, self.size));
        let mut content = self.model.last().unwrap().clone();
        content.resize(self.size as usize, 0);
        content[offset as usize..end as usize].copy_from_slice(&data);
        self.model.push(content);
        self.sizes.push(self.size);
        self.caps.push(self.capacity);
        let in_flight = self
            .pending
            .values()
            .map(|(a, _)| InFlight {
                version: a.version,
                span: a.span,
                capacity: a.capacity,
            })
            .collect();
        let a = Assigned {
            version,
            span: Span::new(offset, len),
            capacity: self.capacity,
            published: self.published,
            in_flight,
            data,
            reused,
        };
        self.pending.insert(version, (a, false));
    }

    /// The writer of the `pick`-th pending version stores its chunks and metadata and
    /// completes; the completed prefix is published and counted.
    fn complete(&mut self, pick: usize, cut: u64) {
        let open: Vec<Version> = self
            .pending
            .iter()
            .filter(|(_, (_, done))| !done)
            .map(|(v, _)| *v)
            .collect();
        if open.is_empty() {
            return;
        }
        let v = open[pick % open.len()];
        let (a, _) = &self.pending[&v];
        let mut stored = Vec::new();
        match &a.reused {
            Some((chunks, _)) => stored = chunks.clone(),
            None => {
                let step = match cut % self.cs {
                    0 => self.cs,
                    r => r,
                };
                let mut at = 0;
                while at < a.data.len() {
                    let n = (step as usize).min(a.data.len() - at);
                    let id = ChunkId(self.next_chunk);
                    self.next_chunk += 1;
                    self.chunks.insert(id, a.data[at..at + n].to_vec());
                    stored.push(StoredChunk {
                        chunk: id,
                        len: n as u64,
                        replicas: vec![1],
                        chunk_offset: 0,
                    });
                    at += n;
                }
            }
        }
        let plan = WritePlan {
            chunk_size: self.cs,
            version: a.version,
            span: a.span,
            capacity: a.capacity,
            chunks: &stored,
            published: a.published,
            in_flight: &a.in_flight,
        };
        let nodes = block_on(build_version(&plan, &self.source)).expect("build");
        {
            let mut m = self.source.nodes.lock().unwrap();
            for (r, n) in nodes {
                assert!(
                    m.insert(r, Arc::new(n)).is_none(),
                    "node {r:?} written twice"
                );
            }
        }
        self.pending.get_mut(&v).unwrap().1 = true;
        while let Some((&first, (_, true))) = self.pending.iter().next() {
            let (a, _) = self.pending.remove(&first).unwrap();
            self.publish(a);
        }
    }

    fn publish(&mut self, a: Assigned) {
        let info = VersionInfo {
            blob: BLOB,
            version: a.version,
            span: a.span,
            size: self.sizes[a.version as usize],
            capacity: a.capacity,
            state: VersionState::Published,
            append: false,
            published_ms: self.now,
        };
        let prev = self.history.last().map(|p| (p.version, p.capacity));
        let d = block_on(delta(&self.source, self.cs, &info, prev)).expect("delta");
        let step = Step::Count {
            blob: BLOB,
            chunk_size: self.cs,
            replication: 1,
            version: info.version,
            capacity: info.capacity,
            delta: d,
        };
        self.apply(vec![step]);
        self.published = Some(PublishedTree {
            version: a.version,
            capacity: a.capacity,
        });
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
        for (a, _) in self.pending.values() {
            keep_from = keep_from.min(a.published.map_or(1, |p| p.version.max(1)));
        }
        if keep_from <= self.retained_from {
            return;
        }
        self.retained_from = keep_from;
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
            let mut nodes = self.source.nodes.lock().unwrap();
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
            .pending
            .values()
            .filter_map(|(a, _)| a.reused.as_ref().map(|(_, at)| *at))
            .fold(self.now, u64::min);
        let dead = self.ledger.unreferenced_before(cutoff, usize::MAX).unwrap();
        let ids: Vec<ChunkId> = dead.iter().map(|(id, _)| *id).collect();
        for id in self.ledger.forget_chunks(&ids).unwrap() {
            self.chunks.remove(&id);
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
        let steps = block_on(rebuild(&self.source, BLOB, self.cs, 1, &retained)).expect("rebuild");
        self.apply(steps);
    }

    fn read(&self, v: Version) -> Vec<u8> {
        let size = self.sizes[v as usize];
        let root = NodeRef {
            version: v,
            offset: 0,
            size: self.caps[v as usize],
        };
        let segs = block_on(resolve_range(root, Span::new(0, size), &self.source))
            .unwrap_or_else(|e| panic!("version {v} unreadable: {e}"));
        let mut out = Vec::new();
        for s in segs {
            match s {
                Segment::Zeros(sp) => out.resize(out.len() + sp.size as usize, 0),
                Segment::Data(p) => {
                    let c = self
                        .chunks
                        .get(&p.chunk)
                        .unwrap_or_else(|| panic!("version {v}: chunk {} deleted", p.chunk));
                    out.extend_from_slice(
                        &c[p.chunk_offset as usize..(p.chunk_offset + p.len) as usize],
                    );
                }
            }
        }
        out
    }

    /// Every retained version reads back as the model says.
    fn check_retained(&self) {
        for info in self
            .history
            .iter()
            .filter(|i| i.version >= self.retained_from)
        {
            assert_eq!(
                self.read(info.version),
                self.model[info.version as usize],
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
        let mut stack = vec![NodeRef {
            version: v,
            offset: 0,
            size: self.caps[v as usize],
        }];
        let m = self.source.nodes.lock().unwrap();
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

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..400, 1u64..120).prop_map(|(offset, len)| Op::Write { offset, len }),
        4 => (1u64..90).prop_map(|len| Op::Append { len }),
        1 => Just(Op::Write { offset: 0, len: 0 }),
        2 => (0u64..1000, 1u64..300, 0u64..500).prop_map(|(from, len, offset)| Op::Copy {
            from,
            len,
            offset
        }),
        3 => (0u64..4).prop_map(|by| Op::Expire { by }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn collection_from_the_ledger_keeps_every_retained_version_and_leaks_nothing(
        ops in prop::collection::vec(op_strategy(), 1..50),
        steps in prop::collection::vec((0usize..6, 0usize..16, 1u64..64), 1..80),
        cs_shift in 2u32..6,
        rebuild_at in prop::option::of(0usize..80),
    ) {
        let cs = 1u64 << cs_shift;
        let mut sim = Sim::new(cs);
        let mut next_op = 0;
        for (i, (k, pick, cut)) in steps.iter().copied().enumerate() {
            for _ in 0..k.min(ops.len() - next_op) {
                match ops[next_op] {
                    Op::Expire { by } => sim.expire(by),
                    ref op => sim.assign(op, next_op as u8),
                }
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
            match ops[next_op] {
                Op::Expire { by } => sim.expire(by),
                ref op => sim.assign(op, next_op as u8),
            }
            next_op += 1;
        }
        let mut guard = 0;
        while !sim.pending.is_empty() {
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
            let stored: HashSet<NodeRef> = sim.source.nodes.lock().unwrap().keys().copied().collect();
            let leaked: Vec<&NodeRef> = stored.difference(&nodes).collect();
            prop_assert!(leaked.is_empty(), "nodes left unreachable: {:?}", leaked);
            let kept: HashSet<ChunkId> = sim.chunks.keys().copied().collect();
            let leaked: Vec<&ChunkId> = kept.difference(&chunks).collect();
            prop_assert!(leaked.is_empty(), "chunks left unreferenced: {:?}", leaked);
        }
    }
}
