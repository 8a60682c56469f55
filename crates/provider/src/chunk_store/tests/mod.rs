//! The chunk store as the provider uses it: `reads.rs` stores and reads chunks back (block
//! boundaries, damage on arrival, reopening); `damage.rs` finds chunk files damaged on disk
//! (flipped bytes, headers, unknown format versions, truncation under a read); `maintenance.rs`
//! lists, deletes, scrubs and quarantines; `page_cache.rs` keeps the newest written files cached
//! and drops the pages of older ones.

mod damage;
mod maintenance;
mod page_cache;
mod reads;

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use tomus_wire::ChunkEntry;

use super::files::SENDFILE_THRESHOLD;
use super::format::{data_len_for, file_len_for, CRC_LEN, FORMAT_VERSION, HEADER_LEN};
use super::*;
use crate::testutil::TempDir;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

async fn store(dir: &TempDir) -> ChunkStore {
    ChunkStore::open(dir.path().join("chunks"), true)
        .await
        .unwrap()
}

fn file_of(dir: &TempDir, id: ChunkId) -> PathBuf {
    let name = id.to_string();
    dir.path().join("chunks").join(&name[..2]).join(name)
}
