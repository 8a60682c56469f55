//! The segment tree against a plain byte-vector model: random unaligned, overlapping writes and
//! appends (holes included), assigned with lower versions still in flight and completed in random
//! order, exactly as the version manager hands them out. Every version must read back exactly
//! as the model says, whole and in random sub-ranges.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use proptest::prelude::*;
use tomus_metadata::*;

#[derive(Default)]
struct MemSource {
    nodes: Mutex<HashMap<NodeRef, Arc<Node>>>,
    fetches: std::sync::atomic::AtomicUsize,
}

impl NodeSource for MemSource {
    type Error = MetaError;
    async fn fetch(&self, refs: &[NodeRef]) -> Result<Vec<Arc<Node>>, MetaError> {
        self.fetches
            .fetch_add(refs.len(), std::sync::atomic::Ordering::Relaxed);
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
    /// Writes, at `offset`, a range of the latest published version as pieces of its chunks
    /// (a composed version: no data stored).
    Copy {
        from: u64,
        len: u64,
        offset: u64,
    },
}

struct Assigned {
    version: Version,
    span: Span,
    capacity: u64,
    published: Option<PublishedTree>,
    in_flight: Vec<InFlight>,
    data: Vec<u8>,
    /// For a copy: the published version and range its data comes from.
    source: Option<(PublishedTree, Span)>,
}

/// A minimal version manager + writer simulation.
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
    model: Vec<Vec<u8>>, // model[v] = blob content at version v
    sizes: Vec<u64>,
    caps: Vec<u64>,
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
            model: vec![Vec::new()],
            sizes: vec![0],
            caps: vec![0],
        }
    }

    fn assign(&mut self, op: &Op, fill: u8) {
        let mut source = None;
        let (offset, len) = match *op {
            Op::Write { offset, len } => (offset, len),
            Op::Append { len } => (self.size, len),
            Op::Copy { from, len, offset } => {
                let Some(p) = self.published else { return };
                let size = self.sizes[p.version as usize];
                if size == 0 {
                    return;
                }
                let from = from % size;
                let len = len.min(size - from);
                source = Some((p, Span::new(from, len)));
                (offset, len)
            }
        };
        let version = self.next_version;
        self.next_version += 1;
        let end = offset + len;
        self.size = self.size.max(end);
        self.capacity = self.capacity.max(capacity_for(self.cs, self.size));
        let data: Vec<u8> = match source {
            Some((p, span)) => {
                self.model[p.version as usize][span.offset as usize..span.end() as usize].to_vec()
            }
            None => (0..len)
                .map(|i| fill.wrapping_add((i % 251) as u8) | 1)
                .collect(),
        };
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
            source,
        };
        self.pending.insert(version, (a, false));
    }

    /// Writer of the `pick`-th pending version builds and stores its metadata and completes.
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
        if let Some((p, span)) = a.source {
            // Composed: the pieces of the source range, referenced, not copied.
            let segs = block_on(resolve_range(p.root(), span, &self.source)).expect("resolve");
            stored = segs.iter().map(StoredChunk::from_segment).collect();
        }
        // Store the data as chunks of varying size (at most one chunk size each).
        let step = match cut % self.cs {
            0 => self.cs,
            r => r,
        };
        let mut at = if a.source.is_some() { a.data.len() } else { 0 };
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
                assert_eq!(r.version, v);
                assert!(
                    m.insert(r, Arc::new(n)).is_none(),
                    "node {r:?} written twice"
                );
            }
        }
        self.pending.get_mut(&v).unwrap().1 = true;
        // Publish the completed prefix, in order.
        while let Some((&first, (_, true))) = self.pending.iter().next() {
            self.pending.remove(&first);
            self.published = Some(PublishedTree {
                version: first,
                capacity: self.caps[first as usize],
            });
        }
    }

    fn read(&self, v: Version, range: Span) -> Vec<u8> {
        let root = NodeRef {
            version: v,
            offset: 0,
            size: self.caps[v as usize],
        };
        let segs = block_on(resolve_range(root, range, &self.source)).expect("resolve");
        let mut out = Vec::new();
        for s in segs {
            match s {
                Segment::Zeros(sp) => out.resize(out.len() + sp.size as usize, 0),
                Segment::Data(p) => {
                    let c = &self.chunks[&p.chunk];
                    out.extend_from_slice(
                        &c[p.chunk_offset as usize..(p.chunk_offset + p.len) as usize],
                    );
                }
            }
        }
        out
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..400, 1u64..120).prop_map(|(offset, len)| Op::Write { offset, len }),
        (1u64..90).prop_map(|len| Op::Append { len }),
        // A version that changes no byte (it only carries attributes).
        Just(Op::Write { offset: 0, len: 0 }),
        (0u64..1000, 1u64..300, 0u64..500).prop_map(|(from, len, offset)| Op::Copy {
            from,
            len,
            offset
        }),
    ]
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
        for v in 1..sim.model.len() as u64 {
            let size = sim.sizes[v as usize];
            let whole = sim.read(v, Span::new(0, size));
            prop_assert_eq!(&whole, &sim.model[v as usize], "version {} whole", v);
            for &(o, n) in &probes {
                if size == 0 { continue; }
                let o = o % size;
                let n = n.min(size - o);
                let part = sim.read(v, Span::new(o, n));
                prop_assert_eq!(&part[..], &sim.model[v as usize][o as usize..(o + n) as usize]);
            }
        }
    }
}

#[test]
fn long_append_runs_keep_leaf_chains_short() {
    // Many tiny appends into one chunk slot, all sequential: chains must be flattened.
    let mut sim = Sim::new(4096);
    for i in 0..300 {
        sim.assign(&Op::Append { len: 7 }, i as u8);
        sim.complete(0, 4096);
    }
    let nodes = sim.source.nodes.lock().unwrap();
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
    let v = sim.model.len() as u64 - 1;
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
    let before = sim.source.nodes.lock().unwrap().len();
    sim.assign(
        &Op::Write {
            offset: cs * 517 + 5,
            len: 10,
        },
        2,
    );
    sim.complete(0, cs);
    let added = sim.source.nodes.lock().unwrap().len() - before;
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
    let v = sim.model.len() as u64 - 1;
    let size = sim.sizes[v as usize];
    sim.source
        .fetches
        .store(0, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(sim.read(v, Span::new(0, size)), sim.model[v as usize]);
    let fetches = sim
        .source
        .fetches
        .load(std::sync::atomic::Ordering::Relaxed);
    // One leaf slot: the leaf, up to 8 layers and a chain of up to MAX_LEAF_CHAIN bases, each
    // of which may bring its own layers.
    let bound = (1 + 8) * (MAX_LEAF_CHAIN as usize + 1);
    assert!(
        fetches <= bound,
        "{fetches} lookups to read one slot (bound {bound})"
    );
}
