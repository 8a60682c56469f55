//! Chunk files for the tests of reading and mapping them.

use std::path::PathBuf;

use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::{chunk_path, encode_header, BLOCK_SIZE};

/// A chunk directory holding one chunk (removed when dropped).
pub struct ChunkDir(pub PathBuf);

impl ChunkDir {
    /// A directory with chunk `id` holding `data`.
    pub fn with(id: ChunkId, data: &[u8]) -> ChunkDir {
        let dir = std::env::temp_dir().join(format!(
            "tomus-local-reads-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let path = chunk_path(&dir, id);
        std::fs::create_dir_all(path.parent().expect("a chunk path has a parent"))
            .expect("chunk directory");
        let mut file = encode_header(data);
        file.extend_from_slice(data);
        std::fs::write(path, file).expect("chunk file");
        ChunkDir(dir)
    }
}

impl Drop for ChunkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const B: u64 = BLOCK_SIZE as u64;

/// Ranges `(offset, len)` of a chunk of `len` bytes (three whole blocks and a short one), on
/// and off block edges.
pub fn ranges(len: u64) -> Vec<(u64, u64)> {
    let points = [0, 1, B - 1, B, B + 7, 2 * B, 3 * B - 3, 3 * B, len - 1, len];
    let mut out = Vec::new();
    for &a in &points {
        for &b in &points {
            if a <= b && b <= len {
                out.push((a, b - a));
            }
        }
    }
    out
}
