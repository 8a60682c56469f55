//! The immutable records of the metadata tree and the ranges they cover.

use serde::{Deserialize, Serialize};

pub type BlobId = u64;
pub type Version = u64;
pub type ProviderId = u32;

/// Identifier of an immutable chunk. Clients draw them at random (128 bits), so chunks can be
/// stored before the version that will reference them is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkId(pub u128);

impl ChunkId {
    /// Not a stored chunk: pieces of it read as zeros. A write uses it to clear a range
    /// explicitly (the tail a shorter replacement leaves), so that older content below
    /// does not show through.
    pub const ZEROS: ChunkId = ChunkId(0);

    /// The top 32 bits of the ids of memory-class chunks (ASCII `MEM1`): a provider keeps
    /// such a chunk in RAM, not on disk, wherever it arrives from (a writer or a repair
    /// copy), so the class travels with the id and no request needs to carry it. Other ids
    /// are drawn outside this tag.
    pub const MEMORY_TAG: u32 = 0x4d45_4d31;

    /// Whether this is the id of a memory-class chunk (see [`ChunkId::MEMORY_TAG`]).
    pub fn is_memory(self) -> bool {
        (self.0 >> 96) as u32 == Self::MEMORY_TAG
    }

    /// `random` made the id of a memory-class chunk (`memory`) or of a disk chunk: the tag
    /// is put in, or kept out.
    pub fn with_class(random: u128, memory: bool) -> ChunkId {
        let low = random & ((1u128 << 96) - 1);
        if memory {
            ChunkId((u128::from(Self::MEMORY_TAG) << 96) | low.max(1))
        } else if (random >> 96) as u32 == Self::MEMORY_TAG || random == 0 {
            // Flip one bit of the tag, and never the reserved 0.
            ChunkId(random ^ (1u128 << 127) | 1)
        } else {
            ChunkId(random)
        }
    }
}

impl std::fmt::Display for ChunkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A half-open byte range `[offset, offset + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Span {
    pub offset: u64,
    pub size: u64,
}

impl Span {
    pub fn new(offset: u64, size: u64) -> Self {
        Span { offset, size }
    }
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }
    pub fn intersects(&self, other: &Span) -> bool {
        self.offset < other.end() && other.offset < self.end()
    }
    pub fn intersection(&self, other: &Span) -> Option<Span> {
        let start = self.offset.max(other.offset);
        let end = self.end().min(other.end());
        (start < end).then(|| Span::new(start, end - start))
    }
    pub fn contains(&self, other: &Span) -> bool {
        self.offset <= other.offset && other.end() <= self.end()
    }
}

/// Reference to a tree node: the node of version `version` covering `[offset, offset + size)`.
///
/// A parent refers to a child covering less than the child's slot only on the left spine of a
/// grown tree (the old root of a smaller tree); the uncovered rest of the slot is a hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeRef {
    pub version: Version,
    pub offset: u64,
    pub size: u64,
}

impl NodeRef {
    pub fn span(&self) -> Span {
        Span::new(self.offset, self.size)
    }
}

/// Global key of a node in the metadata DHT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeKey {
    pub blob: BlobId,
    pub node: NodeRef,
}

/// A piece of a stored chunk mapped into the blob: bytes `[start, start + len)` of the blob are
/// bytes `[chunk_offset, chunk_offset + len)` of `chunk`, which lives on `replicas`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkPiece {
    pub start: u64,
    pub len: u64,
    pub chunk: ChunkId,
    pub chunk_offset: u64,
    pub replicas: Vec<ProviderId>,
}

impl ChunkPiece {
    pub fn span(&self) -> Span {
        Span::new(self.start, self.len)
    }

    /// The part of this piece that falls inside `span`, if any.
    pub fn clip(&self, span: &Span) -> Option<ChunkPiece> {
        let cut = self.span().intersection(span)?;
        Some(ChunkPiece {
            start: cut.offset,
            len: cut.size,
            chunk: self.chunk,
            chunk_offset: self.chunk_offset + (cut.offset - self.start),
            replicas: self.replicas.clone(),
        })
    }
}

/// A node of a version's segment tree. Immutable once stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Node {
    /// Covers twice the size of each child. `None` is a hole (reads as zeros).
    Inner {
        left: Option<NodeRef>,
        right: Option<NodeRef>,
    },
    /// Covers one chunk-sized slot of the blob. Bytes of the slot resolve, in order, from
    /// `pieces` (this version's write), then from the own pieces of each leaf in `layers` (the
    /// lower versions that were in flight when this one was assigned, newest first), then from
    /// `inherited` (published content below, merged from the top of the base chain), then
    /// from `base` (an earlier published leaf of the slot, resolved fully); bytes none of them
    /// cover are zeros.
    Leaf {
        pieces: Vec<ChunkPiece>,
        layers: Vec<NodeRef>,
        inherited: Vec<ChunkPiece>,
        base: Option<NodeRef>,
        /// Length of the base chain below this leaf; writers merge its top into `inherited`
        /// when it would exceed [`crate::MAX_LEAF_CHAIN`].
        depth: u32,
    },
}

/// A physical chunk of a write's data, in data order: the write's next `len` bytes are bytes
/// `[chunk_offset, chunk_offset + len)` of chunk `chunk` on `replicas` ([`ChunkId::ZEROS`]
/// with no replicas: a run of zeros that is not stored). A freshly stored chunk is used whole
/// (`chunk_offset` 0); a composed version (a copy or a multipart upload made of metadata only)
/// refers to pieces of chunks stored by earlier writes, possibly of other blobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredChunk {
    pub chunk: ChunkId,
    pub len: u64,
    pub replicas: Vec<ProviderId>,
    #[serde(default)]
    pub chunk_offset: u64,
}

impl StoredChunk {
    /// The chunk data of a read segment, as a piece of a new version.
    pub fn from_segment(seg: &Segment) -> StoredChunk {
        match seg {
            Segment::Zeros(span) => StoredChunk {
                chunk: ChunkId::ZEROS,
                len: span.size,
                replicas: Vec::new(),
                chunk_offset: 0,
            },
            Segment::Data(p) => StoredChunk {
                chunk: p.chunk,
                len: p.len,
                replicas: p.replicas.clone(),
                chunk_offset: p.chunk_offset,
            },
        }
    }
}

/// What a reader gets for a range: data from a chunk, or zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Zeros(Span),
    Data(ChunkPiece),
}

impl Segment {
    /// What a leaf piece reads as: its chunk's bytes, or zeros for [`ChunkId::ZEROS`].
    pub fn from_piece(p: ChunkPiece) -> Segment {
        if p.chunk == ChunkId::ZEROS {
            Segment::Zeros(p.span())
        } else {
            Segment::Data(p)
        }
    }

    pub fn span(&self) -> Span {
        match self {
            Segment::Zeros(s) => *s,
            Segment::Data(p) => p.span(),
        }
    }
}

/// Capacity (tree size) a blob of `size` bytes needs: the chunk size times the smallest power of
/// two whose multiple covers `size`, at least one chunk.
pub fn capacity_for(chunk_size: u64, size: u64) -> u64 {
    let chunks = size.div_ceil(chunk_size).max(1);
    chunk_size.saturating_mul(chunks.next_power_of_two())
}
