//! Test support for `tomus-metadata` and what is built on it: a model of concurrent writers of
//! one blob, for tests that check the segment tree against plain byte vectors. A crate of its
//! own, not a feature of `tomus-metadata`: a feature turned on by dev-dependencies changes the
//! library every other build compiles, so the test build and the Python extension's build
//! (`maturin develop`, which sees no dev-dependency) could not share a single crate.
//!
//! [`Writers`] hands out versions as the version manager does (each with the latest published
//! tree and the lower versions still in flight), records what every version must read as, and
//! completes the writers in any order: a writer stores its data as chunks of varying size (or
//! reuses the pieces of a copy's source), builds its metadata with [`build_version`] into a
//! [`MemSource`], and the completed prefix of versions is published in order.
//!
//! Like the tests it serves, it panics on anything unexpected (a failed build or resolve, a
//! node written twice): a test stops at its first error.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::executor::block_on;

use tomus_metadata::types::*;
use tomus_metadata::{
    build_version, resolve_range, InFlight, MetaError, NodeSource, PublishedTree, WritePlan,
};

/// Tree nodes kept in a map, counting the nodes fetched.
#[derive(Default)]
pub struct MemSource {
    nodes: Mutex<HashMap<NodeRef, Arc<Node>>>,
    pub fetches: AtomicUsize,
}

impl MemSource {
    /// The stored nodes (a panic elsewhere does not hide them).
    pub fn lock(&self) -> MutexGuard<'_, HashMap<NodeRef, Arc<Node>>> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl NodeSource for MemSource {
    type Error = MetaError;
    async fn fetch(&self, refs: &[NodeRef]) -> Result<Vec<Arc<Node>>, MetaError> {
        self.fetches.fetch_add(refs.len(), Ordering::Relaxed);
        let nodes = self.lock();
        refs.iter()
            .map(|r| nodes.get(r).cloned().ok_or(MetaError::Missing(*r)))
            .collect()
    }
}

/// A write a writer asks a version for.
#[derive(Clone, Debug)]
pub enum Op {
    Write {
        offset: u64,
        len: u64,
    },
    Append {
        len: u64,
    },
    /// New whole content of `len` bytes (zeros over the rest of the previous content, which
    /// its span covers, as the manager assigns it).
    Replace {
        len: u64,
    },
    /// Writes, at `offset`, a range of a published version as pieces of its chunks (a composed
    /// version: no data stored). The source is `back` versions before the latest published,
    /// but not below [`Writers::copyable_from`]; `from` and `len` are cut to its size.
    Copy {
        back: u64,
        from: u64,
        len: u64,
        offset: u64,
    },
}

/// A version handed to a writer, with what its writer needs to build its metadata.
pub struct Assigned<T = ()> {
    pub version: Version,
    pub span: Span,
    pub capacity: u64,
    pub published: Option<PublishedTree>,
    pub in_flight: Vec<InFlight>,
    /// The bytes the version writes over `span`.
    pub data: Vec<u8>,
    /// For a copy: the pieces of its source range, resolved when the version was assigned.
    pub reused: Option<Vec<StoredChunk>>,
    /// Whether the version is a replacement ([`Op::Replace`]).
    pub replaces: bool,
    /// What the test attached to the version when it was assigned.
    pub tag: T,
}

/// The version manager and the writers of one blob, with the content every version must read
/// as. Version 0 is the empty blob.
pub struct Writers<T = ()> {
    pub cs: u64,
    pub source: MemSource,
    /// The stored chunks' bytes.
    pub chunks: HashMap<ChunkId, Vec<u8>>,
    next_chunk: u128,
    pub size: u64,
    pub capacity: u64,
    next_version: Version,
    /// Versions assigned and not yet published, each with whether its writer completed.
    pub pending: BTreeMap<Version, (Assigned<T>, bool)>,
    /// The latest published version.
    pub published: Option<PublishedTree>,
    /// The oldest version copies may take their source from (the oldest one still retained).
    /// Writers build on the latest published version, which retention keeps; a copy's source
    /// may be older, so its chunks can lose their last reference while the copy is in flight.
    pub copyable_from: Version,
    /// `model[v]`: the blob's content at version `v`.
    pub model: Vec<Vec<u8>>,
    /// `sizes[v]`, `caps[v]`: the blob's size and tree capacity at version `v`.
    pub sizes: Vec<u64>,
    pub caps: Vec<u64>,
}

impl<T> Writers<T> {
    /// An empty blob with chunk size `cs`.
    pub fn new(cs: u64) -> Self {
        Writers {
            cs,
            source: MemSource::default(),
            chunks: HashMap::new(),
            next_chunk: 1,
            size: 0,
            capacity: 0,
            next_version: 1,
            pending: BTreeMap::new(),
            published: None,
            copyable_from: 1,
            model: vec![Vec::new()],
            sizes: vec![0],
            caps: vec![0],
        }
    }

    /// The highest version assigned.
    pub fn latest(&self) -> Version {
        self.next_version - 1
    }

    /// Assigns the next version to `op` (its bytes derived from `fill`), tagged with `tag`, and
    /// returns it; a copy with nothing published to copy from gets none.
    pub fn assign_tagged(&mut self, op: &Op, fill: u8, tag: T) -> Option<Version> {
        let mut reused = None;
        let (offset, len) = match *op {
            Op::Write { offset, len } => (offset, len),
            Op::Append { len } => (self.size, len),
            Op::Replace { len } => (0, len.max(self.size)),
            Op::Copy {
                back,
                from,
                len,
                offset,
            } => {
                let latest = self.published?.version;
                let v = latest
                    .saturating_sub(back)
                    .max(self.copyable_from)
                    .clamp(1, latest);
                let size = self.sizes[v as usize];
                if size == 0 {
                    return None;
                }
                let from = from % size;
                let len = len.min(size - from);
                let segs = block_on(resolve_range(
                    self.root(v),
                    Span::new(from, len),
                    &self.source,
                ))
                .expect("resolve a copy's source");
                let pieces = segs.iter().map(StoredChunk::from_segment).collect();
                reused = Some((pieces, v, from));
                (offset, len)
            }
        };
        let mut data: Vec<u8> = match reused {
            Some((_, v, from)) => {
                self.model[v as usize][from as usize..(from + len) as usize].to_vec()
            }
            None => (0..len)
                .map(|i| fill.wrapping_add((i % 251) as u8) | 1)
                .collect(),
        };
        let replaces = matches!(op, Op::Replace { .. });
        let new_size = match *op {
            Op::Replace { len: size } => {
                data[size as usize..].fill(0);
                size
            }
            _ => self.size.max(offset + len),
        };
        let version = self.next_version;
        self.next_version += 1;
        let end = offset + len;
        self.capacity = self.capacity.max(capacity_for(self.cs, self.size.max(end)));
        self.size = new_size;
        let mut content = self.model.last().cloned().unwrap_or_default();
        content.resize(end.max(content.len() as u64) as usize, 0);
        content[offset as usize..end as usize].copy_from_slice(&data);
        content.truncate(new_size as usize);
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
            reused: reused.map(|(pieces, _, _)| pieces),
            replaces,
            tag,
        };
        self.pending.insert(version, (a, false));
        Some(version)
    }

    /// The writer of the `pick`-th (modulo) version not yet completed stores its data (as
    /// chunks of `cut` modulo the chunk size bytes, a whole chunk for 0) and its metadata,
    /// and completes. Returns the versions this publishes (the completed prefix), in order.
    pub fn complete(&mut self, pick: usize, cut: u64) -> Vec<Assigned<T>> {
        let open: Vec<Version> = self
            .pending
            .iter()
            .filter(|(_, (_, done))| !done)
            .map(|(v, _)| *v)
            .collect();
        if open.is_empty() {
            return Vec::new();
        }
        let v = open[pick % open.len()];
        let (a, _) = &self.pending[&v];
        let stored = match &a.reused {
            Some(pieces) => pieces.clone(),
            None => {
                let step = match cut % self.cs {
                    0 => self.cs,
                    r => r,
                };
                let mut stored = Vec::new();
                for data in a.data.chunks(step as usize) {
                    let id = ChunkId(self.next_chunk);
                    self.next_chunk += 1;
                    self.chunks.insert(id, data.to_vec());
                    stored.push(StoredChunk {
                        chunk: id,
                        len: data.len() as u64,
                        replicas: vec![1],
                        chunk_offset: 0,
                    });
                }
                stored
            }
        };
        let plan = WritePlan {
            chunk_size: self.cs,
            version: a.version,
            span: a.span,
            capacity: a.capacity,
            chunks: &stored,
            published: a.published,
            in_flight: &a.in_flight,
            replaces: a.replaces,
        };
        let nodes = block_on(build_version(&plan, &self.source)).expect("build");
        {
            let mut m = self.source.lock();
            for (r, n) in nodes {
                assert_eq!(r.version, v, "version {v} built a node of another");
                assert!(
                    m.insert(r, Arc::new(n)).is_none(),
                    "node {r:?} written twice"
                );
            }
        }
        if let Some((_, done)) = self.pending.get_mut(&v) {
            *done = true;
        }
        // Publish the completed prefix, in order.
        let mut published = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if !entry.get().1 {
                break;
            }
            let (a, _) = entry.remove();
            self.published = Some(PublishedTree {
                version: a.version,
                capacity: a.capacity,
            });
            published.push(a);
        }
        published
    }

    /// The root of version `v`'s tree.
    pub fn root(&self, v: Version) -> NodeRef {
        NodeRef {
            version: v,
            offset: 0,
            size: self.caps[v as usize],
        }
    }

    /// Reads `range` of version `v` through its tree and the stored chunks.
    pub fn read(&self, v: Version, range: Span) -> Vec<u8> {
        let segs = block_on(resolve_range(self.root(v), range, &self.source))
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
}

impl<T: Default> Writers<T> {
    /// [`Writers::assign_tagged`] with the default tag.
    pub fn assign(&mut self, op: &Op, fill: u8) -> Option<Version> {
        self.assign_tagged(op, fill, T::default())
    }
}
