//! The log's records: framing (see [`crate::meta_store`]), encoding, the format header, and
//! reading one back.
//!
//! Format version: the log starts with a header record (40 bytes) stating its format,
//! [`FORMAT_VERSION`]. The header is a tombstone in that framing, of a key no node has
//! (blob `"tomusLOG"`, offset `"metadata"`, size 0, both as u64 LE; the node version field
//! holds the format version), so that builds from before the header replay it as the
//! deletion of nothing: a header they could not parse would be taken for a torn record and
//! the whole log cut off after a downgrade. Its layout is the same in every format, so any
//! build can tell which format a log has. Opening a log of another format fails with an
//! `Internal` error naming the file, the version found and the one this build reads, and
//! leaves the file untouched (no torn-tail cut: this build cannot frame its records). So
//! does a log whose first 40 bytes have the shape of a header but fail its checksum, when
//! records follow: the header is synced before any record is written, so that is damage,
//! not a torn write, and cutting the log there would drop all of it.
//!
//! [`FORMAT_VERSION`]: crate::meta_store::FORMAT_VERSION

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use bincode::Options;
use tomus_metadata::{Node, NodeKey, NodeRef};
use tomus_wire::{Error, Result};

use super::FORMAT_VERSION;

const RECORD_HEADER: u64 = 8;
/// Blob and offset of the key the header record "deletes"; no node has size 0.
const HEADER_BLOB: u64 = u64::from_le_bytes(*b"tomusLOG");
const HEADER_OFFSET: u64 = u64::from_le_bytes(*b"metadata");
/// Size of the header record: a record header and bincode(NodeKey), four u64.
pub(super) const LOG_HEADER_LEN: u64 = RECORD_HEADER + 32;
/// Set in a record's length field: the record is a tombstone.
const TOMBSTONE: u32 = 1 << 31;

/// A record read back from the log.
pub(super) enum Record {
    Put(NodeKey, Node),
    Delete(NodeKey),
}

/// The bincode configuration `bincode::serialize` uses, with a size limit so a damaged length
/// prefix inside a record cannot trigger a huge allocation.
fn codec(limit: u64) -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(limit)
}

/// Size of a node's record in the log.
pub(super) fn record_size(key: &NodeKey, node: &Node) -> u64 {
    RECORD_HEADER + bincode::serialized_size(&(key, node)).unwrap_or(0)
}

pub(super) fn encode_record(out: &mut Vec<u8>, key: &NodeKey, node: &Node) -> Result<()> {
    let payload = bincode::serialize(&(key, node))
        .map_err(|e| Error::internal(format!("encoding metadata node: {e}")))?;
    frame(out, &payload, 0)
}

pub(super) fn encode_tombstone(out: &mut Vec<u8>, key: &NodeKey) -> Result<()> {
    let payload = bincode::serialize(key)
        .map_err(|e| Error::internal(format!("encoding metadata key: {e}")))?;
    frame(out, &payload, TOMBSTONE)
}

/// The key whose tombstone is the header of a log of format `version`.
pub(super) fn header_key(version: u64) -> NodeKey {
    NodeKey {
        blob: HEADER_BLOB,
        node: NodeRef {
            version,
            offset: HEADER_OFFSET,
            size: 0,
        },
    }
}

/// The format a tombstone's key states if it is a log header.
pub(super) fn header_version(key: &NodeKey) -> Option<u64> {
    (key.blob == HEADER_BLOB && key.node.offset == HEADER_OFFSET && key.node.size == 0)
        .then_some(key.node.version)
}

/// Whether the log in `file` starts with what has the shape of a header (framing, blob,
/// offset and size of the header's key) though it failed to read as one. Unlike a torn
/// record, that is damage: the header is written and synced before any other record.
pub(super) fn damaged_header(file: &File) -> io::Result<bool> {
    let mut raw = [0u8; LOG_HEADER_LEN as usize];
    file.read_exact_at(&mut raw, 0)?;
    let u32_at = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[at..at + 8]);
        u64::from_le_bytes(b)
    };
    // Record header, then bincode(NodeKey): blob, version, offset, size.
    let r = RECORD_HEADER as usize;
    Ok(u32_at(0) == TOMBSTONE | 32
        && u64_at(r) == HEADER_BLOB
        && u64_at(r + 16) == HEADER_OFFSET
        && u64_at(r + 24) == 0)
}

/// The header record of a log of this build's format.
pub(super) fn encode_log_header() -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(LOG_HEADER_LEN as usize);
    encode_tombstone(&mut out, &header_key(FORMAT_VERSION))?;
    Ok(out)
}

/// Appends a record of `payload` with `flags` in its length field.
fn frame(out: &mut Vec<u8>, payload: &[u8], flags: u32) -> Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| len & TOMBSTONE == 0)
        .ok_or_else(|| Error::invalid("metadata node too large for the log"))?;
    out.extend_from_slice(&(len | flags).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Why replay stopped before the end of the log.
type Damage = String;

/// Reads the record at the reader's position, `remaining` bytes before the end of the file.
/// Returns the record and its size on disk, or what is wrong with it.
pub(super) fn read_record(
    reader: &mut impl Read,
    remaining: u64,
) -> io::Result<Result<(Record, u64), Damage>> {
    if remaining < RECORD_HEADER {
        return Ok(Err(format!("{remaining} bytes of a record header")));
    }
    let mut header = [0u8; RECORD_HEADER as usize];
    reader.read_exact(&mut header)?;
    let field = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let tombstone = field & TOMBSTONE != 0;
    let len = u64::from(field & !TOMBSTONE);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > remaining - RECORD_HEADER {
        return Ok(Err(format!(
            "record of {len} bytes with only {} bytes left",
            remaining - RECORD_HEADER
        )));
    }
    let mut payload = vec![0u8; len as usize];
    reader.read_exact(&mut payload)?;
    if crc32c::crc32c(&payload) != crc {
        return Ok(Err("checksum mismatch".into()));
    }
    let record = if tombstone {
        codec(len)
            .deserialize::<NodeKey>(&payload)
            .map(Record::Delete)
    } else {
        codec(len)
            .deserialize::<(NodeKey, Node)>(&payload)
            .map(|(key, node)| Record::Put(key, node))
    };
    Ok(record
        .map(|r| (r, RECORD_HEADER + len))
        .map_err(|e| format!("undecodable record: {e}")))
}
