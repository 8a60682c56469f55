//! Deterministic, cheap test data: the bytes of a record follow from its seed, so a reader can
//! check content without keeping a copy.

/// Fills `buf` with the xorshift64* stream of `seed`.
pub fn fill(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut words = buf.chunks_exact_mut(8);
    for w in &mut words {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        w.copy_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    let rest = words.into_remainder();
    x ^= x >> 12;
    let tail = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
    let n = rest.len();
    rest.copy_from_slice(&tail[..n]);
}

pub fn generate(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, &mut v);
    v
}

/// Seed of record `seq` of writer `writer`.
pub fn seed(writer: u64, seq: u64) -> u64 {
    (writer << 32) ^ seq ^ 0x5eed
}
