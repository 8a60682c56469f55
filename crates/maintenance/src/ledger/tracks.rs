//! What the ledger records of blobs, leaves and chunks, and the deletions it owes providers:
//! the rows of its tables (bincode in redb: changing one is a change of the ledger's `SCHEMA`).

use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ChunkId, NodeKey, NodeRef, ProviderId, Version};

/// What is tracked of a blob.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobTrack {
    pub chunk_size: u64,
    pub replication: u32,
    /// The last published version counted (0: none), and its tree's capacity.
    pub counted: Version,
    pub counted_capacity: u64,
    /// Published versions below this were removed by retention.
    pub retained_from: Version,
}

/// A live leaf: what it refers to, and who refers to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafTrack {
    /// Chunks its pieces (own and inherited) are cut from, each once.
    pub chunks: Vec<ChunkId>,
    /// Leaves it reads through: its base and its layers.
    pub refs: Vec<NodeRef>,
    /// Live leaves that name this one as base or layer.
    pub dependents: u32,
    /// The version whose write replaced it in the tree (`None`: still in the latest tree).
    pub superseded_at: Option<Version>,
}

/// A chunk some leaf referred to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkTrack {
    /// Live leaves referring to it.
    pub count: u32,
    /// Its length, as far as the pieces referring to it show (the provider's listing has
    /// the exact one).
    pub len: u64,
    /// Copies it needs: the highest replication of the blobs referring to it.
    pub replication: u32,
    /// Where its copies are.
    pub replicas: Vec<ProviderId>,
    /// When its count fell to 0 (Unix ms; 0 while referenced).
    pub zero_since: u64,
}

/// A deletion owed to the providers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Doom {
    /// Nodes superseded by versions retention removed (the manager is asked to confirm).
    Nodes(Vec<NodeKey>),
    /// Every node of a blob with a version in `[from, to)`: a deleted blob, given-up
    /// versions (positively dead by the change that reported them).
    Ranges(Vec<(BlobId, Version, Version)>),
}
