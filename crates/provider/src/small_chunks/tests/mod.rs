//! The small-chunk log through the chunk store, as the provider uses it: `log.rs` stores,
//! reads, deletes and rolls segments; `cached.rs` reads without waiting for the disk;
//! `recovery.rs` reopens after torn writes, damage and segments of other formats.

mod cached;
mod log;
mod recovery;

use std::fs::{self, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tomus_wire::ErrorKind;

use super::format::{
    header_id, header_version, segment_header, segment_number, tombstone_header, SEGMENT_HEADER_LEN,
};
use super::recovery::{scan_record, Scanned};
use super::*;
use crate::chunk_store::{ChunkRange, ChunkStats, ChunkStore};
use crate::testutil::TempDir;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

async fn open(dir: &TempDir, segment_size: u64) -> ChunkStore {
    ChunkStore::open_with_segment_size(dir.path().join("chunks"), true, segment_size)
        .await
        .unwrap()
}

fn segments(dir: &TempDir) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir.path().join("chunks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| segment_number(&p.file_name().unwrap().to_string_lossy()).is_some())
        .collect();
    out.sort();
    out
}

/// Where the records of a (new-format) segment end: after them the file holds only the
/// zeros written ahead.
fn records_end(path: &Path) -> u64 {
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let mut reader = BufReader::new(&file);
    reader.seek(SeekFrom::Start(SEGMENT_HEADER_LEN)).unwrap();
    let mut data = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN;
    while pos < len {
        pos += match scan_record(&mut reader, len - pos, &mut data).unwrap() {
            Scanned::Chunk { len, .. } => (RECORD_HEADER as u32 + len) as u64,
            Scanned::Tombstone(_) => RECORD_HEADER as u64,
            Scanned::BadChecksum { .. } | Scanned::Damage(_) => break,
        };
    }
    assert!(tomus_wire::zeroed_ahead::zero_tail(&file, pos).unwrap());
    pos
}

fn loc(store: &ChunkStore, id: ChunkId) -> Loc {
    store.small().read_index().chunks[&id]
}

fn flip(path: &Path, at: u64) {
    let mut raw = fs::read(path).unwrap();
    raw[at as usize] ^= 0x10;
    fs::write(path, raw).unwrap();
}

async fn assert_reads(store: &ChunkStore, id: ChunkId, data: &[u8]) {
    let got = store.get(id, 0, data.len() as u64).await;
    assert_eq!(&got.unwrap()[..], data, "chunk {id}");
}

async fn assert_missing(store: &ChunkStore, id: ChunkId) {
    let err = store.get(id, 0, 0).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound, "chunk {id}: {err}");
}
