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

/// Not a test: what mapping and checking a piece costs against reading and checking it, by
/// piece length, on 1 and 2 threads (where [`tomus_wire::mapping::MIN_MAPPED_LEN`] comes
/// from). Run with
/// `cargo test --release -p tomus-client --lib crossover_of_mapping -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a test"]
fn crossover_of_mapping_and_copying() {
    use std::time::Instant;
    let id = ChunkId(0xabc0_9999);
    let data: Vec<u8> = (0..(4u64 << 20)).map(|i| (i * 31 % 251) as u8).collect();
    let dir = ChunkDir::with(id, &data);
    for len in [
        64u64 << 10,
        128 << 10,
        256 << 10,
        512 << 10,
        1 << 20,
        4 << 20,
    ] {
        for threads in [1usize, 2] {
            let iters = ((256u64 << 20) / len).max(64) as usize;
            let run = |map: bool| {
                let started = Instant::now();
                std::thread::scope(|s| {
                    for t in 0..threads {
                        let dir = &dir.0;
                        s.spawn(move || {
                            let mut buf = vec![0u8; len as usize];
                            for i in 0..iters / threads {
                                let off = ((i + t) as u64 * len) % (4 << 20);
                                let off = off.min((4 << 20) - len);
                                if map {
                                    let b = super::map_piece(dir, id, off, len).unwrap();
                                    std::hint::black_box(b.len());
                                } else {
                                    super::read_piece(dir, id, off, &mut buf).unwrap();
                                    std::hint::black_box(buf[0]);
                                }
                            }
                        });
                    }
                });
                started.elapsed().as_secs_f64() * 1e6 / iters as f64
            };
            let (r1, m1, r2, m2) = (run(false), run(true), run(false), run(true));
            println!(
                "len {:>5} KiB threads {threads}: read {:.1} {:.1} us/op, map {:.1} {:.1} us/op",
                len >> 10,
                r1,
                r2,
                m1,
                m2
            );
        }
    }
}
