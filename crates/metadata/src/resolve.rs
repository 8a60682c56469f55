//! Reading: map a byte range of a version to chunk pieces and holes, one tree level per batch of
//! (parallel) node fetches.

use std::sync::Arc;

use crate::build::gaps;
use crate::types::*;
use crate::{MetaError, NodeSource};

/// What a leaf's bytes resolve to after its own pieces: its layers, inherited pieces and base.
/// Borrowed from the leaf itself (shared with the node cache), never copied: a leaf of small
/// appends inherits up to a slot's worth of pieces, and a 4 KiB read must not clone them.
struct LeafTail<'a> {
    layers: &'a [NodeRef],
    inherited: &'a [ChunkPiece],
    base: Option<NodeRef>,
}

impl LeafTail<'_> {
    /// The tail of `leaf`; an inner node has an empty one (so no layer of it is ever queued).
    fn of(leaf: &Node) -> LeafTail<'_> {
        match leaf {
            Node::Leaf {
                layers,
                inherited,
                base,
                ..
            } => LeafTail {
                layers,
                inherited,
                base: *base,
            },
            Node::Inner { .. } => LeafTail {
                layers: &[],
                inherited: &[],
                base: None,
            },
        }
    }
}

/// A pending lookup: a node whose bytes in `want` are needed, either resolved fully or (for a
/// layer of a leaf) only its own pieces, the rest continuing down the tail of `leaf`.
enum Work {
    Node(NodeRef, Span),
    Layer {
        leaf: Arc<Node>,
        index: usize,
        want: Span,
    },
}

impl Work {
    fn node(&self) -> NodeRef {
        match self {
            Work::Node(n, _) => *n,
            Work::Layer { leaf, index, .. } => LeafTail::of(leaf).layers[*index],
        }
    }
}

/// Segments covering exactly `range` of the tree rooted at `root`, in offset order. Slots that no
/// write touched read as zeros.
pub async fn resolve_range<S: NodeSource>(
    root: NodeRef,
    range: Span,
    source: &S,
) -> Result<Vec<Segment>, S::Error> {
    resolve_above(root, range, None, source).await
}

/// Like [`resolve_range`], except that the parts of `range` that resolve from the node `stop`
/// (a leaf of the base chain below `root`) are left out, unresolved: the segments cover the
/// rest. A writer merging the top of a leaf chain reads it this way.
pub(crate) async fn resolve_above<S: NodeSource>(
    root: NodeRef,
    range: Span,
    stop: Option<NodeRef>,
    source: &S,
) -> Result<Vec<Segment>, S::Error> {
    let mut out = Vec::new();
    let mut below = Vec::new();
    if range.size == 0 {
        return Ok(out);
    }
    source.prefetch(root, &[range]).await;
    let mut frontier = vec![Work::Node(root, range)];
    while !frontier.is_empty() {
        // A reference may cover less than the slot it sits in (a grown tree's old root): the
        // rest of the slot is a hole.
        let mut wanted = Vec::with_capacity(frontier.len());
        for work in frontier {
            match work {
                Work::Node(node, want) if Some(node) == stop => below.push(want),
                Work::Node(node, want) => {
                    let inside = node.span().intersection(&want);
                    for hole in outside(want, inside) {
                        out.push(Segment::Zeros(hole));
                    }
                    if let Some(inside) = inside {
                        wanted.push(Work::Node(node, inside));
                    }
                }
                layer => wanted.push(layer),
            }
        }
        if wanted.is_empty() {
            break;
        }
        let refs: Vec<NodeRef> = wanted.iter().map(Work::node).collect();
        let nodes = source.fetch(&refs).await?;
        if nodes.len() != refs.len() {
            return Err(
                MetaError::Inconsistent("node source returned a short batch".into()).into(),
            );
        }
        let mut next = Vec::new();
        for (work, node) in wanted.into_iter().zip(nodes) {
            match (work, &*node) {
                (Work::Node(node_ref, want), Node::Inner { left, right }) => {
                    let half = node_ref.size / 2;
                    let halves = [
                        (Span::new(node_ref.offset, half), left),
                        (Span::new(node_ref.offset + half, half), right),
                    ];
                    for (slot, child) in halves {
                        if let Some(part) = slot.intersection(&want) {
                            match child {
                                Some(c) => next.push(Work::Node(*c, part)),
                                None => out.push(Segment::Zeros(part)),
                            }
                        }
                    }
                }
                (Work::Node(_, want), Node::Leaf { pieces, .. }) => {
                    for gap in take_pieces(pieces, want, &mut out) {
                        continue_tail(&node, 0, gap, &mut out, &mut next);
                    }
                }
                (Work::Layer { leaf, index, want }, Node::Leaf { pieces, .. }) => {
                    for gap in take_pieces(pieces, want, &mut out) {
                        continue_tail(&leaf, index + 1, gap, &mut out, &mut next);
                    }
                }
                (w, Node::Inner { .. }) => return Err(MetaError::not_a_leaf(w.node()).into()),
            }
        }
        frontier = next;
    }
    out.sort_by_key(|s| s.span().offset);
    if below.is_empty() {
        check_cover(range, out.iter().map(Segment::span))?;
    } else {
        let mut spans: Vec<Span> = out.iter().map(Segment::span).chain(below).collect();
        spans.sort_by_key(|s| s.offset);
        check_cover(range, spans)?;
    }
    Ok(out)
}

/// Emits the parts of `pieces` inside `want` and returns the gaps they leave. A leaf's pieces
/// (own or inherited) are in offset order and do not overlap, as writers build them, so the
/// first that reaches `want` is found by binary search: a leaf of a slot of small appends
/// holds thousands, and a 4 KiB read needs one or two.
fn take_pieces(pieces: &[ChunkPiece], want: Span, out: &mut Vec<Segment>) -> Vec<Span> {
    let first = pieces.partition_point(|p| p.start.saturating_add(p.len) <= want.offset);
    let mine: Vec<ChunkPiece> = pieces[first..]
        .iter()
        .take_while(|p| p.start < want.end())
        .filter_map(|p| p.clip(&want))
        .collect();
    let left = gaps(want, &mine);
    out.extend(mine.into_iter().map(Segment::from_piece));
    left
}

/// Resolves `gap` of `leaf` from layer `index` on: the next layer's own pieces, else the
/// inherited pieces and then the base, else zeros.
fn continue_tail(
    leaf: &Arc<Node>,
    index: usize,
    gap: Span,
    out: &mut Vec<Segment>,
    next: &mut Vec<Work>,
) {
    let tail = LeafTail::of(leaf);
    if index < tail.layers.len() {
        next.push(Work::Layer {
            leaf: leaf.clone(),
            index,
            want: gap,
        });
        return;
    }
    for rest in take_pieces(tail.inherited, gap, out) {
        match tail.base {
            Some(b) => next.push(Work::Node(b, rest)),
            None => out.push(Segment::Zeros(rest)),
        }
    }
}

/// Parts of `want` outside `inside` (which, when present, lies within `want`).
fn outside(want: Span, inside: Option<Span>) -> Vec<Span> {
    match inside {
        None => vec![want],
        Some(i) => {
            let mut v = Vec::new();
            if i.offset > want.offset {
                v.push(Span::new(want.offset, i.offset - want.offset));
            }
            if i.end() < want.end() {
                v.push(Span::new(i.end(), want.end() - i.end()));
            }
            v
        }
    }
}

fn check_cover(range: Span, spans: impl IntoIterator<Item = Span>) -> Result<(), MetaError> {
    let mut at = range.offset;
    for span in spans {
        if span.offset != at {
            return Err(MetaError::Inconsistent(format!(
                "segments do not tile {range:?}: expected offset {at}, found {span:?}"
            )));
        }
        at = span.end();
    }
    if at != range.end() {
        return Err(MetaError::Inconsistent(format!(
            "segments end at {at}, range ends at {}",
            range.end()
        )));
    }
    Ok(())
}
