//! Requests of a provider: chunks (their bytes travel as the frame's raw body, next to the
//! encoded header, so they land straight in their final buffer), its shard of the metadata
//! DHT, and what repair, scrub and garbage collection ask of it.

use tomus_metadata::{BlobId, ChunkId, Node, NodeKey, NodeRef, Span, Version};

use crate::rpc::service;
use crate::types::*;

service! {
    /// Every request a provider serves.
    pub enum ProviderRequest in Envelope::Provider {
        // ---- chunks
        /// Stores the frame's body as chunk `id`. `crc` is the CRC32C of the body as the
        /// sender had it: the provider checks it before storing anything and refuses a body
        /// damaged on the way (`Corrupt`), so the sender stores it again.
        PutChunk { id: ChunkId, crc: u32 } -> ();
        /// Bytes `[offset, offset + len)` of chunk `id`, in the answer's body; the answer is
        /// their CRC32C, for the reader to check what arrived.
        GetChunk { id: ChunkId, offset: u64, len: u64 } -> u32;

        // ---- metadata DHT shard
        PutNodes { nodes: Vec<(NodeKey, Node)> } -> ();
        /// A small write whole: the frame's body stored as chunk `id` (as [`PutChunk`], `crc`
        /// checked first) and its version's `nodes` (as [`PutNodes`]), both durable before
        /// the answer. One request instead of two, to the version's metadata owner.
        PutSmallWrite { nodes: Vec<(NodeKey, Node)>, id: ChunkId, crc: u32 } -> ();
        /// The nodes of `keys`, in order (`None`: not held here).
        GetNodes { keys: Vec<NodeKey> } -> Vec<Option<Node>>;
        /// The nodes this provider holds on the way from `start` down to any of `targets`
        /// (stopping where it lacks one), at most `limit`: one round trip instead of one per
        /// tree level.
        GetPath {
            blob: BlobId,
            start: NodeRef,
            targets: Vec<Span>,
            limit: u32,
        } -> Vec<(NodeRef, Node)>;

        // ---- repair, scrub, garbage collection
        /// The chunks it holds, in id order after `start_after`, at most `limit`.
        ListChunks { start_after: Option<ChunkId>, limit: u32 } -> ChunkListing;
        /// Removes chunks (ids it does not hold are ignored). Answers the ids whose files
        /// could not be removed (a disk error); the others are gone.
        DeleteChunks { ids: Vec<ChunkId> } -> Vec<ChunkId>;
        /// Fetches chunk `id` whole from the first of `from` (provider addresses) that serves
        /// it intact and stores it (a repair copy, provider to provider).
        CopyChunk { id: ChunkId, len: u64, from: Vec<String> } -> ();
        /// The metadata node keys it holds, in key order after `start_after`, at most `limit`.
        ListNodes { start_after: Option<NodeKey>, limit: u32 } -> Vec<NodeKey>;
        /// Removes metadata nodes (keys it does not hold are ignored).
        DeleteNodes { keys: Vec<NodeKey> } -> ();
        /// Removes every node of each blob whose version is in `[from, to)` (a deleted blob,
        /// given-up versions): the caller need not know their keys.
        DeleteNodeRanges { ranges: Vec<(BlobId, Version, Version)> } -> ();
        /// Verifies the checksums of the chunks after `start_after`, at most `limit`, and
        /// quarantines the corrupt ones.
        Scrub { start_after: Option<ChunkId>, limit: u32 } -> ScrubReport;

        // ---- registered files (workflows)
        /// Hard-links the local file `local_path` (which must be the file with inode `ino`
        /// on device `dev`, i.e. on this host and this file system) into the `registered`
        /// directory: no byte is copied. The provider then computes its CRC32C in the
        /// background and records it for `tomus_path` with the manager; an empty `tomus_path`
        /// adopts a copy still being written (a swarm reader sharing its pieces): served by
        /// range, never checksummed nor kept in memory.
        AdoptFile { local_path: String, dev: u64, ino: u64, tomus_path: String } -> Adopted, once;
        /// Bytes `[offset, offset + len)` of the registered file `name`, in the answer's body
        /// (sent with sendfile); the answer is the file's whole size.
        ReadRegistered { name: String, offset: u64, len: u64 } -> u64;
        /// Removes the registered copies `names` (names it does not hold are ignored): the
        /// manager collecting the copies of deleted registered files, or a reader dropping
        /// the copy it shared while it was still downloading. The answer: bytes of the
        /// copies removed.
        DropRegistered { names: Vec<String> } -> u64;

        // ---- short-circuit reads and writes
        /// Where its chunk files are, for a client on this host to read and write them
        /// directly.
        LocalChunkDir {} -> LocalChunks;
        /// Takes the file `name`, which a client on this host wrote in the directory of chunk
        /// `id` (`.<id>.<anything>.tmp`: header, block checksums and data, as the provider
        /// writes them), as chunk `id`, whose data has the CRC32C `crc`: checked, named and
        /// synced as a chunk the provider wrote. Not repeated by the pool: the file is gone
        /// once adopted, and the client sends the chunk through the socket instead.
        AdoptChunk { id: ChunkId, crc: u32, name: String } -> (), once;
    }
}
