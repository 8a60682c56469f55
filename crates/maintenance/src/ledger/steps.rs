//! What the ledger is told: the changes to apply (a published version's delta, expiry,
//! deletion, abort, and the resets and baselines of a rebuild), and what applying them found.

use tomus_metadata::{BlobId, ChunkId, NodeRef, ProviderId, Version};

/// A chunk as a leaf uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkUse {
    pub id: ChunkId,
    /// How far into the chunk the leaf's pieces reach.
    pub extent: u64,
    pub replicas: Vec<ProviderId>,
}

/// What a leaf refers to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeafRefs {
    pub chunks: Vec<ChunkUse>,
    pub refs: Vec<NodeRef>,
}

/// What a published version changed in its blob's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Its new leaves.
    pub leaves: Vec<(NodeRef, LeafRefs)>,
    /// The previous version's nodes at the ranges it rewrote.
    pub superseded: Vec<NodeRef>,
}
/// One change to apply.
#[derive(Clone, Debug)]
pub enum Step {
    /// A published version of `blob`, counted: what it changed.
    Count {
        blob: BlobId,
        chunk_size: u64,
        replication: u32,
        version: Version,
        capacity: u64,
        delta: Delta,
    },
    /// Retention removed the versions of `blob` below `retained_from`.
    Expire {
        blob: BlobId,
        retained_from: Version,
    },
    /// `blob` was deleted: its nodes go, its chunks lose its references.
    Delete { blob: BlobId },
    /// Versions `[from, to)` of `blob` were given up: their nodes go.
    Abort {
        blob: BlobId,
        from: Version,
        to: Version,
    },
    /// Forgets what is tracked of `blob` (its chunks lose its references) without deleting
    /// its data: the start of a rebuild.
    Reset { blob: BlobId },
    /// The start of a rebuild: every leaf reachable from the tree of `version` (the first
    /// retained one), counted. `in_tree` says whether the tree reaches it through its inner
    /// nodes (else only as the base or layer of another leaf: already superseded).
    Baseline {
        blob: BlobId,
        chunk_size: u64,
        replication: u32,
        version: Version,
        capacity: u64,
        retained_from: Version,
        leaves: Vec<(NodeRef, LeafRefs, bool)>,
    },
}

/// What applying steps found that disagrees with the model: a row that should exist does
/// not. Nothing is deleted on such a finding; the audit reconciles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub inconsistencies: Vec<String>,
}
