//! What a published version changed in its blob's metadata, read back from the DHT: its new
//! leaves (with the chunks and leaves they refer to) and the previous version's nodes at the
//! ranges it rewrote. And, for a rebuild, every leaf one version's tree reaches.
//!
//! The ranges a version rewrote are known without reading anything: its writer built a
//! node for its tree's root and for every range on the way down to the leaves its write
//! touches (see `tomus_metadata::build_version`). The previous version's node at each of
//! those ranges is found by walking the previous tree along them. Where that tree's node
//! belongs to a version whose write is known, its children at the halves that write touched
//! are that version's own nodes there, so a run of appends into one leaf slot is walked
//! without reading an inner node; the walk reads only where the two writes part.

use std::collections::{HashMap, HashSet};

use tomus_metadata::{BlobId, ChunkId, ChunkPiece, Node, NodeRef, NodeSource, Span, Version};
use tomus_wire::VersionInfo;

use crate::ledger::{ChunkUse, Delta, LeafRefs, Step};

/// The ranges `span` rewrites in a tree of `capacity` with leaves of `chunk_size`: the root,
/// then level by level every range intersecting `span` (just the root for an empty span).
pub fn rewritten(span: Span, capacity: u64, chunk_size: u64) -> Vec<Span> {
    let mut out = vec![Span::new(0, capacity)];
    let mut level = out.clone();
    while level.first().is_some_and(|s| s.size > chunk_size) {
        let mut next = Vec::new();
        for s in level {
            let half = s.size / 2;
            for h in [Span::new(s.offset, half), Span::new(s.offset + half, half)] {
                if h.intersects(&span) {
                    next.push(h);
                }
            }
        }
        out.extend(&next);
        level = next;
    }
    out
}

/// What a leaf node refers to.
pub fn leaf_refs(node: &Node) -> Option<LeafRefs> {
    let Node::Leaf {
        pieces,
        layers,
        inherited,
        base,
        ..
    } = node
    else {
        return None;
    };
    // Sorted rather than hashed: a flattened leaf has hundreds of pieces, mostly of distinct
    // chunks, and each chunk's use is built once, from its first piece (own before inherited).
    let mut cut: Vec<&ChunkPiece> = pieces
        .iter()
        .chain(inherited)
        .filter(|p| p.chunk != ChunkId::ZEROS)
        .collect();
    cut.sort_by_key(|p| p.chunk);
    let mut chunks: Vec<ChunkUse> = Vec::new();
    for p in cut {
        let extent = p.chunk_offset + p.len;
        match chunks.last_mut() {
            Some(u) if u.id == p.chunk => u.extent = u.extent.max(extent),
            _ => chunks.push(ChunkUse {
                id: p.chunk,
                extent,
                replicas: p.replicas.clone(),
            }),
        }
    }
    Some(LeafRefs {
        chunks,
        refs: layers.iter().chain(base.iter()).copied().collect(),
    })
}

/// The reference a parent holds for its half `half`, given the parent's `node`.
fn child_ref(node: &Node, parent: Span, half: Span) -> Option<NodeRef> {
    match node {
        Node::Inner { left, right } => {
            if half.offset == parent.offset {
                *left
            } else {
                *right
            }
        }
        Node::Leaf { .. } => None,
    }
}

/// The spans written by versions of one blob whose writes are known (those of the page of
/// changes being counted): the walk of a previous tree takes their nodes' children from them.
pub type KnownWrites = HashMap<Version, Span>;

/// The reference node `r` (at range `s`) holds for its half `half`, when it is known without
/// reading `r`: `r`'s version wrote inside `half`, so its writer built its own node there.
fn known_child(r: NodeRef, half: Span, known: &KnownWrites) -> Option<NodeRef> {
    known
        .get(&r.version)
        .filter(|written| half.intersects(written))
        .map(|_| NodeRef {
            version: r.version,
            offset: half.offset,
            size: half.size,
        })
}

/// The halves of `s` a write over `span` rewrote.
fn halves_within(s: Span, span: Span) -> impl Iterator<Item = Span> {
    let half = s.size / 2;
    [Span::new(s.offset, half), Span::new(s.offset + half, half)]
        .into_iter()
        .filter(move |h| h.intersects(&span))
}

/// Whether walking node `r`, found at range `s` of the previous tree, along a write over
/// `span` needs `r` read: some half the write rewrote has a child not known otherwise.
pub fn must_read(r: NodeRef, s: Span, span: Span, chunk_size: u64, known: &KnownWrites) -> bool {
    r.size == s.size
        && s.size > chunk_size
        && halves_within(s, span).any(|h| known_child(r, h, known).is_none())
}

/// What version `info` (published after `prev`, the version and tree capacity of the
/// blob's previous published version) changed. `known` holds the writes of versions of the
/// blob known to the caller (it may be empty).
pub async fn delta<S: NodeSource>(
    source: &S,
    chunk_size: u64,
    info: &VersionInfo,
    prev: Option<(Version, u64)>,
    known: &KnownWrites,
) -> Result<Delta, S::Error> {
    let ranges = rewritten(info.span, info.capacity, chunk_size);
    let mine = |s: &Span| NodeRef {
        version: info.version,
        offset: s.offset,
        size: s.size,
    };
    let leaves: Vec<NodeRef> = ranges
        .iter()
        .filter(|s| s.size == chunk_size)
        .map(mine)
        .collect();
    let nodes = source.fetch(&leaves).await?;
    let mut delta = Delta::default();
    for (r, node) in leaves.iter().zip(&nodes) {
        if let Some(refs) = leaf_refs(node) {
            delta.leaves.push((*r, refs));
        }
    }
    let Some((prev, prev_capacity)) = prev else {
        return Ok(delta);
    };
    // The previous tree's reference at each rewritten range, top down. A reference smaller
    // than its range is the root of an older, smaller tree on the left spine: it is met again
    // at its own size further down, where it is superseded if that range was rewritten.
    let mut at: HashMap<Span, NodeRef> = HashMap::new();
    at.insert(
        Span::new(0, info.capacity),
        NodeRef {
            version: prev,
            offset: 0,
            size: prev_capacity,
        },
    );
    let mut level = vec![Span::new(0, info.capacity)];
    while !level.is_empty() {
        let exact: Vec<NodeRef> = level
            .iter()
            .filter_map(|s| {
                at.get(s)
                    .filter(|r| must_read(**r, *s, info.span, chunk_size, known))
            })
            .copied()
            .collect();
        let fetched: HashMap<NodeRef, std::sync::Arc<Node>> = exact
            .iter()
            .copied()
            .zip(source.fetch(&exact).await?)
            .collect();
        let mut next = Vec::new();
        for s in level {
            let Some(r) = at.get(&s).copied() else {
                continue;
            };
            if r.size == s.size {
                delta.superseded.push(r);
            }
            if s.size <= chunk_size {
                continue;
            }
            for h in halves_within(s, info.span) {
                let child = if r.size == s.size {
                    known_child(r, h, known)
                        .or_else(|| fetched.get(&r).and_then(|n| child_ref(n, s, h)))
                } else {
                    (h.offset == s.offset && r.size <= h.size).then_some(r)
                };
                if let Some(c) = child {
                    at.insert(h, c);
                    next.push(h);
                }
            }
        }
        level = next;
    }
    Ok(delta)
}

/// The steps that rebuild what the ledger tracks of one blob from its retained `versions`
/// (in order): the first one's tree counted whole, then each later one's delta. A later
/// version may have been written on a tree older than the first retained one (its writer
/// started before retention moved): the leaves its new leaves name that the first tree does
/// not reach are counted too, as leaves already out of the tree.
pub async fn rebuild<S: NodeSource>(
    source: &S,
    blob: BlobId,
    chunk_size: u64,
    replication: u32,
    versions: &[VersionInfo],
) -> Result<Vec<Step>, S::Error> {
    let Some(first) = versions.first() else {
        return Ok(vec![Step::Reset { blob }]);
    };
    let known: KnownWrites = versions.iter().map(|v| (v.version, v.span)).collect();
    let mut counts = Vec::new();
    let mut prev = (first.version, first.capacity);
    for info in &versions[1..] {
        let d = delta(source, chunk_size, info, Some(prev), &known).await?;
        counts.push((info, d));
        prev = (info.version, info.capacity);
    }
    let roots: Vec<NodeRef> = if first.capacity == 0 {
        Vec::new()
    } else {
        vec![NodeRef {
            version: first.version,
            offset: 0,
            size: first.capacity,
        }]
    };
    let named: Vec<NodeRef> = counts
        .iter()
        .flat_map(|(_, d)| {
            d.leaves
                .iter()
                .flat_map(|(_, refs)| refs.refs.iter().copied())
        })
        .collect();
    let added: HashSet<NodeRef> = counts
        .iter()
        .flat_map(|(_, d)| d.leaves.iter().map(|(r, _)| *r))
        .collect();
    let leaves = reachable_leaves(source, &roots, &named, &added).await?;
    let mut steps = vec![
        Step::Reset { blob },
        Step::Baseline {
            blob,
            chunk_size,
            replication,
            version: first.version,
            capacity: first.capacity,
            retained_from: first.version,
            leaves,
        },
    ];
    for (info, delta) in counts {
        steps.push(Step::Count {
            blob,
            chunk_size,
            replication,
            version: info.version,
            capacity: info.capacity,
            delta,
        });
    }
    Ok(steps)
}

/// Every leaf the trees of `roots` reach through their inner nodes (`true`), and every leaf
/// they or `named` reach only as the base or a layer of another leaf (`false`), leaving out
/// `skip` (leaves counted otherwise); with what each refers to.
pub async fn reachable_leaves<S: NodeSource>(
    source: &S,
    roots: &[NodeRef],
    named: &[NodeRef],
    skip: &HashSet<NodeRef>,
) -> Result<Vec<(NodeRef, LeafRefs, bool)>, S::Error> {
    let mut out = Vec::new();
    let mut seen: HashSet<NodeRef> = skip.clone();
    let mut in_tree: Vec<NodeRef> = roots.iter().copied().filter(|r| seen.insert(*r)).collect();
    let mut named: Vec<NodeRef> = named.to_vec();
    // Down the inner nodes, level by level.
    while !in_tree.is_empty() {
        let nodes = source.fetch(&in_tree).await?;
        let mut next = Vec::new();
        for (r, node) in in_tree.iter().zip(nodes) {
            match node.as_ref() {
                Node::Inner { left, right } => {
                    for c in left.iter().chain(right.iter()) {
                        if seen.insert(*c) {
                            next.push(*c);
                        }
                    }
                }
                leaf => {
                    if let Some(refs) = leaf_refs(leaf) {
                        named.extend(refs.refs.iter().copied());
                        out.push((*r, refs, true));
                    }
                }
            }
        }
        in_tree = next;
    }
    // Leaves reached only through other leaves.
    named.retain(|r| seen.insert(*r));
    while !named.is_empty() {
        let nodes = source.fetch(&named).await?;
        let mut next = Vec::new();
        for (r, node) in named.iter().zip(nodes) {
            if let Some(refs) = leaf_refs(&node) {
                next.extend(refs.refs.iter().copied().filter(|n| seen.insert(*n)));
                out.push((*r, refs, false));
            }
        }
        named = next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewritten_ranges_follow_the_write_down_the_tree() {
        let cs = 4;
        // A write of [5, 7) in a 16-byte tree: root, [0,8), [4,8), leaves [4,8) only.
        let r = rewritten(Span::new(5, 2), 16, cs);
        assert_eq!(r, vec![Span::new(0, 16), Span::new(0, 8), Span::new(4, 4)]);
        // Across a leaf boundary.
        let r = rewritten(Span::new(3, 2), 8, cs);
        assert_eq!(r, vec![Span::new(0, 8), Span::new(0, 4), Span::new(4, 4)]);
        // An empty span rewrites only the root; a one-leaf tree's root is its leaf.
        assert_eq!(rewritten(Span::new(8, 0), 16, cs), vec![Span::new(0, 16)]);
        assert_eq!(rewritten(Span::new(0, 3), 4, cs), vec![Span::new(0, 4)]);
    }
}
