//! Reading: map a byte range of a version to chunk pieces and holes, one tree level per batch of
//! (parallel) node fetches.

use crate::build::gaps;
use crate::types::*;
use crate::{MetaError, NodeSource};

/// Segments covering exactly `range` of the tree rooted at `root`, in offset order. Slots that no
/// write touched read as zeros.
pub async fn resolve_range<S: NodeSource>(
    root: NodeRef,
    range: Span,
    source: &S,
) -> Result<Vec<Segment>, S::Error> {
    let mut out = Vec::new();
    if range.size == 0 {
        return Ok(out);
    }
    let mut frontier = vec![(root, range)];
    while !frontier.is_empty() {
        // A reference may cover less than the slot it sits in (a grown tree's old root): the
        // rest of the slot is a hole.
        let mut wanted = Vec::with_capacity(frontier.len());
        for (node, want) in frontier {
            let inside = node.span().intersection(&want);
            for hole in outside(want, inside) {
                out.push(Segment::Zeros(hole));
            }
            if let Some(inside) = inside {
                wanted.push((node, inside));
            }
        }
        if wanted.is_empty() {
            break;
        }
        let refs: Vec<NodeRef> = wanted.iter().map(|(n, _)| *n).collect();
        let nodes = source.fetch(&refs).await?;
        if nodes.len() != refs.len() {
            return Err(
                MetaError::Inconsistent("node source returned a short batch".into()).into(),
            );
        }
        let mut next = Vec::new();
        for ((node_ref, want), node) in wanted.into_iter().zip(nodes) {
            match &*node {
                Node::Inner { left, right } => {
                    let half = node_ref.size / 2;
                    let halves = [
                        (Span::new(node_ref.offset, half), left),
                        (Span::new(node_ref.offset + half, half), right),
                    ];
                    for (slot, child) in halves {
                        if let Some(part) = slot.intersection(&want) {
                            match child {
                                Some(c) => next.push((*c, part)),
                                None => out.push(Segment::Zeros(part)),
                            }
                        }
                    }
                }
                Node::Leaf { pieces, base, .. } => {
                    let mine: Vec<ChunkPiece> =
                        pieces.iter().filter_map(|p| p.clip(&want)).collect();
                    for gap in gaps(want, &mine) {
                        match base {
                            Some(b) => next.push((*b, gap)),
                            None => out.push(Segment::Zeros(gap)),
                        }
                    }
                    out.extend(mine.into_iter().map(Segment::Data));
                }
            }
        }
        frontier = next;
    }
    out.sort_by_key(|s| s.span().offset);
    check_cover(range, &out)?;
    Ok(out)
}

/// Resolves `range` (inside one chunk slot) through a chain of leaves starting at `leaf`.
pub(crate) async fn resolve_leaf_chain<S: NodeSource>(
    leaf: NodeRef,
    range: Span,
    source: &S,
) -> Result<Vec<Segment>, S::Error> {
    resolve_range(leaf, range, source).await
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

fn check_cover(range: Span, segments: &[Segment]) -> Result<(), MetaError> {
    let mut at = range.offset;
    for s in segments {
        let span = s.span();
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
