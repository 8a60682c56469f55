//! Building the nodes of a new version without waiting for concurrent writers.
//!
//! The node of version v covering range C is labelled with the highest version <= v that wrote
//! inside C. For a child C that the write does not touch, that label is the larger of C's label
//! in the latest published tree (found by walking the published tree along the write's borders)
//! and the highest lower in-flight version whose range intersects C (handed out by the manager
//! with the version number). No writer waits for another.

use std::sync::Arc;

use crate::types::*;
use crate::{MetaError, NodeSource, MAX_LEAF_CHAIN};

/// The latest published version when the write's version was assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishedTree {
    pub version: Version,
    pub capacity: u64,
}

impl PublishedTree {
    pub fn root(&self) -> NodeRef {
        NodeRef {
            version: self.version,
            offset: 0,
            size: self.capacity,
        }
    }
}

/// A lower version that was assigned but not yet published when this write got its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub version: Version,
    pub span: Span,
    pub capacity: u64,
}

/// Everything needed to build a version's metadata.
#[derive(Clone, Debug)]
pub struct WritePlan<'a> {
    pub chunk_size: u64,
    pub version: Version,
    /// The range the write covers (offset fixed by the manager for appends).
    pub span: Span,
    /// Tree capacity of this version.
    pub capacity: u64,
    /// The write's data as stored, in order; lengths sum to `span.size`.
    pub chunks: &'a [StoredChunk],
    pub published: Option<PublishedTree>,
    /// Lower in-flight versions (any order).
    pub in_flight: &'a [InFlight],
    /// The write is the blob's whole new content (`WriteOp::Replace`): its span covers
    /// everything every lower version holds, published or in flight (zeros past the new
    /// size), so its leaves show none of theirs. They refer to no older leaf, which lets
    /// garbage collection reclaim an overwritten version's data even where the new content
    /// ends inside a chunk.
    pub replaces: bool,
}

impl WritePlan<'_> {
    fn validate(&self) -> Result<(), MetaError> {
        let total: u64 = self.chunks.iter().map(|c| c.len).sum();
        let bad = |m: String| Err(MetaError::Inconsistent(m));
        // An empty span is a version that changes no byte (it carries attributes, or
        // replaces empty content by empty content): it gets a root and no leaves of its own.
        if self.span.size == 0 && !self.chunks.is_empty() {
            return bad("empty write with chunks".into());
        }
        if total != self.span.size {
            return bad(format!(
                "chunks hold {total} bytes, write spans {}",
                self.span.size
            ));
        }
        if self.capacity < self.span.end() || !self.chunk_size.is_power_of_two() {
            return bad(format!(
                "capacity {} below write end {}",
                self.capacity,
                self.span.end()
            ));
        }
        if let Some(p) = self.published {
            if p.version >= self.version || p.capacity > self.capacity {
                return bad(format!(
                    "published tree {p:?} is not below version {}",
                    self.version
                ));
            }
        }
        if self.in_flight.iter().any(|f| f.version >= self.version) {
            return bad("in-flight version not below the new version".into());
        }
        Ok(())
    }

    /// The lower in-flight versions whose ranges intersect `slot`.
    fn in_flight_in(&self, slot: Span) -> impl Iterator<Item = &InFlight> {
        self.in_flight
            .iter()
            .filter(move |f| f.span.intersects(&slot))
    }

    /// The highest in-flight version that touched `slot`, as a reference to its node for
    /// `slot` (or to its whole tree when that tree is smaller than `slot`). A version touches
    /// the slots its write intersects and every slot its whole tree lies in (a slot on the
    /// left spine at least as large as its tree): its root is new even where it wrote
    /// nothing, as the published tree's root is. So the label of a slot is the same whether
    /// a lower version was published or still in flight when this one was assigned, and
    /// every version's tree is the previous version's with this write's slots replaced
    /// (garbage collection relies on that).
    fn in_flight_label(&self, slot: Span) -> Option<NodeRef> {
        let u = self
            .in_flight
            .iter()
            .filter(|f| {
                f.span.intersects(&slot)
                    || (slot.offset == 0 && f.capacity > 0 && f.capacity <= slot.size)
            })
            .max_by_key(|f| f.version)?;
        Some(label_ref(u.version, u.capacity, slot))
    }

    /// This write's data inside `slot`, as chunk pieces.
    fn pieces_in(&self, slot: Span) -> Vec<ChunkPiece> {
        let mut pieces = Vec::new();
        let mut start = self.span.offset;
        for c in self.chunks {
            let piece = ChunkPiece {
                start,
                len: c.len,
                chunk: c.chunk,
                chunk_offset: c.chunk_offset,
                replicas: c.replicas.clone(),
            };
            if let Some(p) = piece.clip(&slot) {
                pieces.push(p);
            }
            start += c.len;
        }
        pieces
    }
}

/// Reference to version `version`'s node for `slot`, given that version's tree capacity.
fn label_ref(version: Version, capacity: u64, slot: Span) -> NodeRef {
    if capacity >= slot.end() {
        NodeRef {
            version,
            offset: slot.offset,
            size: slot.size,
        }
    } else {
        // A version whose whole tree is smaller than the slot (left spine of a grown tree).
        NodeRef {
            version,
            offset: 0,
            size: capacity,
        }
    }
}

fn newer(a: Option<NodeRef>, b: Option<NodeRef>) -> Option<NodeRef> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.version > x.version { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A slot of the new tree that the write intersects, with the published tree's reference for it.
struct Frontier {
    slot: Span,
    published: Option<NodeRef>,
}

/// Nodes (keyed by their reference) that version `plan.version` adds. O(log n) inner nodes plus
/// one leaf per chunk slot the write touches.
pub async fn build_version<S: NodeSource>(
    plan: &WritePlan<'_>,
    source: &S,
) -> Result<Vec<(NodeRef, Node)>, S::Error> {
    plan.validate()?;
    let cs = plan.chunk_size;
    let mut out = Vec::new();
    if let (Some(p), false) = (plan.published, plan.span.size == 0) {
        // Only the two borders of the write need the published tree.
        let borders = [
            Span::new(plan.span.offset, 1),
            Span::new(plan.span.end() - 1, 1),
        ];
        source.prefetch(p.root(), &borders).await;
    }
    let whole = Span::new(0, plan.capacity);
    let mut frontier = vec![Frontier {
        slot: whole,
        published: plan
            .published
            .map(|p| p.root())
            .filter(|_| !plan.span.contains(&whole)),
    }];
    while !frontier.is_empty() {
        // Fetch, in one batch, the published nodes whose children this level needs: those of
        // slots the write covers only partly (inside it, every child is rewritten).
        let wanted: Vec<NodeRef> = frontier
            .iter()
            .filter_map(|f| f.published.filter(|p| p.size == f.slot.size))
            .collect();
        let fetched = if wanted.is_empty() {
            Vec::new()
        } else {
            source.fetch(&wanted).await?
        };
        let mut fetched = wanted
            .into_iter()
            .zip(fetched)
            .collect::<Vec<_>>()
            .into_iter();
        let mut next = Vec::new();
        for f in frontier {
            let published_node = match f.published {
                Some(p) if p.size == f.slot.size => fetched.next().map(|(_, n)| n),
                _ => None,
            };
            let me = NodeRef {
                version: plan.version,
                offset: f.slot.offset,
                size: f.slot.size,
            };
            if f.slot.size == cs {
                let leaf = build_leaf(plan, f.slot, f.published, published_node, source).await?;
                out.push((me, leaf));
                continue;
            }
            let (pub_left, pub_right) = published_children(f.slot, f.published, published_node)?;
            let half = f.slot.size / 2;
            let halves = [
                (Span::new(f.slot.offset, half), pub_left),
                (Span::new(f.slot.offset + half, half), pub_right),
            ];
            let mut refs = [None, None];
            for (i, (slot, published)) in halves.into_iter().enumerate() {
                if slot.intersects(&plan.span) {
                    refs[i] = Some(NodeRef {
                        version: plan.version,
                        offset: slot.offset,
                        size: slot.size,
                    });
                    let published = published.filter(|_| !plan.span.contains(&slot));
                    next.push(Frontier { slot, published });
                } else {
                    refs[i] = newer(published, plan.in_flight_label(slot));
                }
            }
            out.push((
                me,
                Node::Inner {
                    left: refs[0],
                    right: refs[1],
                },
            ));
        }
        frontier = next;
    }
    Ok(out)
}

/// The published tree's references for the two halves of `slot`.
fn published_children(
    slot: Span,
    published: Option<NodeRef>,
    node: Option<Arc<Node>>,
) -> Result<(Option<NodeRef>, Option<NodeRef>), MetaError> {
    let Some(p) = published else {
        return Ok((None, None));
    };
    if p.size < slot.size {
        // The published tree is smaller than this slot: it all lies in the left half.
        return Ok((Some(p), None));
    }
    match node.as_deref() {
        Some(Node::Inner { left, right }) => Ok((*left, *right)),
        Some(Node::Leaf { .. }) => Err(MetaError::Inconsistent(format!(
            "leaf found where inner node {p:?} expected"
        ))),
        None => Err(MetaError::Missing(p)),
    }
}

async fn build_leaf<S: NodeSource>(
    plan: &WritePlan<'_>,
    slot: Span,
    published: Option<NodeRef>,
    published_leaf: Option<Arc<Node>>,
    source: &S,
) -> Result<Node, S::Error> {
    let own = plan.pieces_in(slot);
    let covered: u64 = own.iter().map(|p| p.len).sum();
    if covered == slot.size || plan.replaces {
        return Ok(Node::Leaf {
            pieces: own,
            layers: Vec::new(),
            inherited: Vec::new(),
            base: None,
            depth: 0,
        });
    }
    // Lower in-flight versions that wrote in this slot lie between the published content and
    // this write: only their own pieces apply, newest first. Their leaves cannot be read yet,
    // so they are referenced, never flattened; there are at most as many as concurrent writers.
    let mut in_flight: Vec<&InFlight> = plan.in_flight_in(slot).collect();
    in_flight.sort_by_key(|f| std::cmp::Reverse(f.version));
    let layers = in_flight
        .iter()
        .map(|f| NodeRef {
            version: f.version,
            offset: slot.offset,
            size: slot.size,
        })
        .collect();
    let Some(base) = published else {
        return Ok(Node::Leaf {
            pieces: own,
            layers,
            inherited: Vec::new(),
            base: None,
            depth: 0,
        });
    };
    let Some(base_leaf) = published_leaf else {
        return Err(MetaError::Missing(base).into());
    };
    let base_depth = match &*base_leaf {
        Node::Leaf { depth, .. } => *depth,
        Node::Inner { .. } => return Err(MetaError::not_a_leaf(base).into()),
    };
    if base_depth < MAX_LEAF_CHAIN {
        return Ok(Node::Leaf {
            pieces: own,
            layers,
            inherited: Vec::new(),
            base: Some(base),
            depth: base_depth + 1,
        });
    }
    // The chain is full: its top is merged into this leaf, as pieces (one walk of the chain,
    // clipped to the bytes this write leaves alone), down to the leaf found by `merge_point`,
    // which stays below as the base. Merging it all each time would copy every piece of the
    // slot once per MAX_LEAF_CHAIN + 1 versions: quadratic in a slot of small appends (1,024 4
    // KiB appends in a 4 MiB slot wrote 58 pieces per append, as many bytes of metadata as of
    // data). Merged this way, a piece is copied a few times in all, as in a log-structured
    // merge, and reads still follow at most MAX_LEAF_CHAIN bases.
    let stop = merge_point(base, base_leaf, source).await?;
    let left_alone = gaps(slot, &own);
    let segments = crate::resolve::resolve_above(base, slot, stop.map(|(r, _)| r), source).await?;
    let mut inherited = Vec::new();
    for seg in segments {
        let piece = match seg {
            Segment::Data(p) => p,
            // Without a base, bytes nothing covers are zeros already; with one, they would
            // show the base's bytes, so zeros above it are kept as zero pieces.
            Segment::Zeros(_) if stop.is_none() => continue,
            Segment::Zeros(span) => ChunkPiece {
                start: span.offset,
                len: span.size,
                chunk: ChunkId::ZEROS,
                chunk_offset: 0,
                replicas: Vec::new(),
            },
        };
        inherited.extend(left_alone.iter().filter_map(|g| piece.clip(g)));
    }
    Ok(Node::Leaf {
        pieces: own,
        layers,
        inherited: merge_adjacent(inherited),
        base: stop.map(|(r, _)| r),
        depth: stop.map_or(0, |(_, depth)| depth + 1),
    })
}

/// Where a full leaf chain is cut when its top is merged: walking down from `base` (whose
/// leaf is `leaf`), the first leaf with at least twice as many pieces as all the leaves above
/// it together, and its depth; `None` when there is none (the whole chain is merged). Cutting
/// at a leaf much larger than what is merged keeps each merge small, and each piece is copied
/// again only once the leaves merged above it outgrow it.
async fn merge_point<S: NodeSource>(
    base: NodeRef,
    leaf: Arc<Node>,
    source: &S,
) -> Result<Option<(NodeRef, u32)>, S::Error> {
    let (mut at, mut node) = (base, leaf);
    let mut above = 0usize;
    // A chain is never longer than this; a longer one (a cycle among corrupt nodes) would
    // keep the walk going forever.
    for _ in 0..=MAX_LEAF_CHAIN {
        let Node::Leaf {
            pieces,
            inherited,
            base: below,
            depth,
            ..
        } = &*node
        else {
            return Err(MetaError::not_a_leaf(at).into());
        };
        let size = pieces.len() + inherited.len();
        if above > 0 && size >= 2 * above {
            return Ok(Some((at, *depth)));
        }
        above += size;
        let Some(next) = *below else {
            return Ok(None);
        };
        let fetched = source.fetch(&[next]).await?;
        node = fetched.into_iter().next().ok_or(MetaError::Missing(next))?;
        at = next;
    }
    Err(MetaError::Inconsistent(format!(
        "the leaf chain below {base:?} is longer than {MAX_LEAF_CHAIN} leaves"
    ))
    .into())
}

/// Parts of `slot` not covered by `pieces` (which lie inside `slot`).
pub(crate) fn gaps(slot: Span, pieces: &[ChunkPiece]) -> Vec<Span> {
    let mut sorted: Vec<Span> = pieces.iter().map(|p| p.span()).collect();
    sorted.sort_by_key(|s| s.offset);
    let mut out = Vec::new();
    let mut at = slot.offset;
    for s in sorted {
        if s.offset > at {
            out.push(Span::new(at, s.offset - at));
        }
        at = at.max(s.end());
    }
    if at < slot.end() {
        out.push(Span::new(at, slot.end() - at));
    }
    out
}

/// Joins pieces that continue each other inside the same chunk.
fn merge_adjacent(pieces: Vec<ChunkPiece>) -> Vec<ChunkPiece> {
    let mut out: Vec<ChunkPiece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        if let Some(last) = out.last_mut() {
            if last.chunk == p.chunk
                && last.start + last.len == p.start
                && last.chunk_offset + last.len == p.chunk_offset
            {
                last.len += p.len;
                continue;
            }
        }
        out.push(p);
    }
    out
}
