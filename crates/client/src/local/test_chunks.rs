//! Chunk files for the tests of reading and mapping them, and the checks both ways of
//! getting a piece out of a file must pass.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

use std::path::{Path, PathBuf};

use tomus_metadata::ChunkId;
use tomus_wire::chunk_file::{chunk_path, encode_header, BLOCK_SIZE, CRC_LEN, HEADER_LEN};
use tomus_wire::{ErrorKind, Result};

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

/// A way to get bytes `[offset, offset + len)` of chunk `id` out of its file in a directory.
pub type Reader = fn(&Path, ChunkId, u64, u64) -> Result<Vec<u8>>;

/// Every range of a chunk of three whole blocks and a short one comes back as stored.
pub fn every_range_comes_back(read: Reader) {
    let id = ChunkId(0xabc0_1234);
    let data: Vec<u8> = (0..3 * B + 1000).map(|i| (i * 31 % 251) as u8).collect();
    let dir = ChunkDir::with(id, &data);
    for (offset, len) in ranges(data.len() as u64) {
        let got = read(&dir.0, id, offset, len).unwrap();
        let want = &data[offset as usize..(offset + len) as usize];
        assert!(got == want, "range {offset}+{len} differs");
    }
}

/// A damaged byte in the second block fails the ranges that touch that block, and only them.
pub fn a_damaged_block_fails_only_the_ranges_on_it(read: Reader) {
    let id = ChunkId(0xabc0_5678);
    let data: Vec<u8> = (0..3 * B + 1000).map(|i| (i * 17 % 253) as u8).collect();
    let dir = ChunkDir::with(id, &data);
    let path = chunk_path(&dir.0, id);
    let mut file = std::fs::read(&path).unwrap();
    let data_start = HEADER_LEN + 4 * CRC_LEN;
    file[(data_start + B + 100) as usize] ^= 0x40;
    std::fs::write(&path, file).unwrap();
    for (offset, len) in ranges(data.len() as u64) {
        let touches = len > 0 && offset < 2 * B && offset + len > B;
        match read(&dir.0, id, offset, len) {
            Ok(got) => {
                assert!(!touches, "range {offset}+{len} got a damaged block");
                assert!(got == data[offset as usize..(offset + len) as usize]);
            }
            Err(e) => {
                assert!(touches, "range {offset}+{len}: {e}");
                assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
            }
        }
    }
}

/// No file is `NotFound`, a range past the data `OutOfRange`, a file shorter than its header
/// says `Corrupt`.
pub fn missing_short_and_out_of_range_are_errors(read: Reader) {
    let id = ChunkId(0xabc0_9abc);
    let data = vec![7u8; (2 * B) as usize];
    let dir = ChunkDir::with(id, &data);
    let e = read(&dir.0, ChunkId(0xdead), 0, 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    let e = read(&dir.0, id, 2 * B - 5, 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange, "{e}");
    let path = chunk_path(&dir.0, id);
    let file = std::fs::read(&path).unwrap();
    std::fs::write(&path, &file[..file.len() - 1]).unwrap();
    let e = read(&dir.0, id, 0, 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
}
