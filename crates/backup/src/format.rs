//! What a backup target holds, and the names it holds it under. Everything is immutable once
//! written except the chunk objects, which a later point may replace with a longer prefix of
//! the same (immutable) chunk.
//!
//! Layout under the target's prefix:
//! - `chunks/<chunk id>.<len>.<sha256>`: bytes `[0, len)` of a chunk. The name carries the
//!   length and checksum, so a listing of `chunks/` is the index of what is uploaded (a point
//!   uploads only what the listing lacks, an interrupted point resumes where it stopped) and
//!   `verify` checks an object against its own name.
//! - `versions/<blob>/<version>.json`: a `VersionRecord`: one published version's record,
//!   attributes and where each of its bytes is (chunk pieces and holes). Written after the
//!   chunks it names.
//! - `points/<point>.json`: a `PointManifest`: the namespace, the blob records, the retained
//!   versions and the retention policies at one moment. Written last, after every object it
//!   names: a point is complete exactly when its manifest exists, so an interrupted point is
//!   never listed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Attrs, BlobInfo, EntryKind, Retention, StorageClass, VersionInfo};

/// Format of the manifests this build writes; newer ones are refused by restore.
pub const FORMAT: u32 = 1;

pub const CHUNKS: &str = "chunks";
pub const VERSIONS: &str = "versions";
pub const POINTS: &str = "points";

/// A range of a version: chunk bytes or zeros.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Piece {
    /// `len` bytes at `chunk_offset` of chunk `chunk` (hex id, as in object names).
    Data {
        start: u64,
        len: u64,
        chunk: String,
        chunk_offset: u64,
    },
    Zeros {
        start: u64,
        len: u64,
    },
}

impl Piece {
    pub fn start(&self) -> u64 {
        match self {
            Piece::Data { start, .. } | Piece::Zeros { start, .. } => *start,
        }
    }
    pub fn len(&self) -> u64 {
        match self {
            Piece::Data { len, .. } | Piece::Zeros { len, .. } => *len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One published version of a blob, as backed up.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VersionRecord {
    pub info: VersionInfo,
    pub attrs: Attrs,
    /// Its bytes `[0, info.size)`, in order, tiling the range.
    pub pieces: Vec<Piece>,
}

/// A blob at a point: its record and the versions it retained then.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlobEntry {
    /// As the manager had it at the point (`latest` caps which versions belong to it).
    pub info: BlobInfo,
    /// Retained published versions, ascending; each has a [`VersionRecord`] object.
    pub versions: Vec<Version>,
    /// The file backed by this blob (`None`: a blob of the blob API).
    pub path: Option<String>,
    /// Where its chunks live (points of earlier builds have none: disk).
    #[serde(default, skip_serializing_if = "on_disk")]
    pub storage: StorageClass,
}

fn on_disk(class: &StorageClass) -> bool {
    *class == StorageClass::Disk
}

/// A namespace entry at a point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PathEntry {
    pub path: String,
    pub kind: EntryKind,
    pub blob: Option<BlobId>,
    /// The bytes of a registered file (points of earlier builds have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<RegisteredContent>,
}

/// A registered file's bytes at a point (see `registered.rs`): pieces of objects named like
/// chunks, listed in the point's `chunks`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RegisteredContent {
    pub size: u64,
    pub crc32c: u32,
    /// How many holders it had: the replication of the file a restore makes of it.
    pub holders: u32,
    /// Its bytes `[0, size)`, in order.
    pub pieces: Vec<Piece>,
}

/// A complete backup point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointManifest {
    pub format: u32,
    /// Its name (sortable: later points sort after earlier ones).
    pub id: String,
    /// When the point's state was read (Unix ms).
    pub taken_ms: u64,
    /// When the manifest was written (Unix ms).
    pub completed_ms: u64,
    /// The subtrees backed up (empty: the whole namespace).
    pub paths: Vec<String>,
    pub namespace: Vec<PathEntry>,
    pub blobs: Vec<BlobEntry>,
    /// Directories with a policy of their own (the one files created below them get).
    pub dir_retention: Vec<(String, Retention)>,
    /// The chunk objects the point's versions read from: chunk id → object name.
    pub chunks: BTreeMap<String, String>,
    /// Bytes uploaded for this point (chunks and version records; not reused objects).
    pub uploaded_bytes: u64,
    /// Bytes of the retained versions the point holds (what a restore writes).
    pub logical_bytes: u64,
    /// Registered files left out because no holder could give their bytes (path: why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// The name of a chunk object.
pub fn chunk_key(chunk: &str, len: u64, sha256: &str) -> String {
    format!("{CHUNKS}/{chunk}.{len}.{sha256}")
}

/// The parts of a chunk object's name: (chunk id, length, sha256).
pub fn parse_chunk_key(name: &str) -> Option<(String, u64, String)> {
    let file = name.rsplit('/').next()?;
    let mut parts = file.split('.');
    let id = parts.next()?.to_string();
    let len = parts.next()?.parse().ok()?;
    let sha = parts.next()?.to_string();
    if parts.next().is_some() || id.len() != 32 || sha.len() != 64 {
        return None;
    }
    Some((id, len, sha))
}

pub fn version_key(blob: BlobId, version: Version) -> String {
    format!("{VERSIONS}/{blob}/{version:020}.json")
}

pub fn point_key(id: &str) -> String {
    format!("{POINTS}/{id}.json")
}

/// A point's name from when it was taken: sortable, readable, unique per millisecond.
pub fn point_id(taken_ms: u64) -> String {
    format!("{taken_ms:015}")
}

/// Hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(data);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_names_round_trip() {
        let sha = sha256_hex(b"abc");
        let id = format!("{:032x}", 7u128);
        let key = chunk_key(&id, 3, &sha);
        assert_eq!(parse_chunk_key(&key), Some((id, 3, sha)));
        assert_eq!(parse_chunk_key("chunks/xyz"), None);
    }
}
