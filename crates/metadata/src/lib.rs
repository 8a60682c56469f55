//! The versioned metadata of a BLOB: one segment tree per version, sharing unchanged subtrees
//! with earlier versions (BlobSeer, section III).
//!
//! This crate is pure logic over a [`NodeSource`] (where nodes are fetched from): the client
//! plugs in the metadata DHT, tests plug in a map. [`build::build_version`] creates the nodes a
//! write adds; [`resolve::resolve_range`] maps a byte range of a version to chunk pieces.

pub mod build;
pub mod resolve;
pub mod types;

use std::future::Future;
use std::sync::Arc;

pub use build::{build_version, InFlight, PublishedTree, WritePlan};
pub use resolve::resolve_range;
pub use types::*;

/// Writers merge the top of a leaf's base chain into one piece list once it is this long, so
/// readers never follow long chains (small appends would otherwise chain one leaf per append).
pub const MAX_LEAF_CHAIN: u32 = 8;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MetaError {
    #[error("metadata node {0:?} not found")]
    Missing(NodeRef),
    #[error("inconsistent metadata: {0}")]
    Inconsistent(String),
}

impl MetaError {
    /// An inner node found at `at`, where a leaf's chain or a layer needs a leaf.
    pub(crate) fn not_a_leaf(at: NodeRef) -> Self {
        MetaError::Inconsistent(format!("inner node found where leaf {at:?} expected"))
    }
}

/// Where tree nodes of one blob are fetched from. Implementations should fetch the batch in
/// parallel and may cache: nodes are immutable.
pub trait NodeSource: Sync {
    /// The source's own error (network errors keep their kind through tree walks).
    type Error: From<MetaError> + Send;

    /// Nodes for `refs`, in the same order; a missing node is an error.
    fn fetch(
        &self,
        refs: &[NodeRef],
    ) -> impl Future<Output = Result<Vec<Arc<Node>>, Self::Error>> + Send;

    /// Hint that the nodes on the way from `root` down to each of `targets` are about to be
    /// fetched level by level; a source may load them in one go. Failures are not errors (the
    /// fetches that follow still run).
    fn prefetch(&self, _root: NodeRef, _targets: &[Span]) -> impl Future<Output = ()> + Send {
        async {}
    }
}
