//! End-to-end checksums of chunk transfers: the sender computes the CRC32C of what it sends
//! and the receiver checks what arrived, so damage between one side's memory and the other's
//! (a NIC, a kernel bug, a bad memory stick; TCP's own checksum is 16 bits) is caught and the
//! transfer retried or served from another replica, never stored or returned.

pub use crc32c::{crc32c, crc32c_append};

use crate::error::{Error, Result};

/// The CRC32C polynomial, bit-reversed (the crate computes the reflected form).
const POLY: u32 = 0x82F6_3B78;

/// Appending `len` bytes to data with CRC32C `crc` multiplies it by this operator; combining
/// with precomputed operators is a few dozen shifts instead of a pass over the bytes (and
/// instead of `crc32c_combine`, which builds the operator each time: about 25 us).
#[derive(Clone, Copy, Debug)]
pub struct Shift(u32);

impl Shift {
    /// The operator for `len` bytes (costs one `crc32c_combine`: build it once).
    pub fn new(len: usize) -> Self {
        // combine(a, b, len) = a * x^(8 len) + b; `a` = x^0 (0x8000_0000 reflected), b = 0.
        Shift(crc32c::crc32c_combine(0x8000_0000, 0, len))
    }

    /// The CRC32C of `A ++ B` from those of `A` and of `B` (`B` being `len` bytes long, the
    /// length this operator was built for).
    pub fn combine(self, crc_a: u32, crc_b: u32) -> u32 {
        multiply(self.0, crc_a) ^ crc_b
    }
}

/// `a * b` modulo the polynomial, in the reflected representation (zlib's `multmodp`).
fn multiply(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        if m == 0 {
            return p;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// Checks bytes that arrived against the CRC32C their sender computed: a mismatch is
/// `Corrupt`, naming `what` arrived.
pub fn check_arrived(data: &[u8], sent_crc: u32, what: impl FnOnce() -> String) -> Result<()> {
    let got = crc32c(data);
    if got == sent_crc {
        return Ok(());
    }
    Err(damaged(what(), got, sent_crc))
}

/// The error for `what`, whose checksum came to `got` where the sender's was `sent`.
pub fn damaged(what: String, got: u32, sent: u32) -> Error {
    Error::corrupt(format!(
        "{what} arrived damaged: its checksum is {got:08x}, the sender's {sent:08x}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_combine_like_the_crate() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        for len in [1, 17, 4096, 65_536, 100_000] {
            let (a, b) = data.split_at(data.len() - len);
            let shift = Shift::new(len);
            assert_eq!(
                shift.combine(crc32c(a), crc32c(b)),
                crc32c(&data),
                "len {len}"
            );
            assert_eq!(shift.combine(0, crc32c(b)), crc32c(b), "nothing before");
        }
    }

    #[test]
    fn a_flipped_bit_is_caught_and_named() {
        let mut data = vec![7u8; 1000];
        let crc = crc32c(&data);
        check_arrived(&data, crc, || "chunk 1".into()).unwrap();
        data[500] ^= 1;
        let e = check_arrived(&data, crc, || "chunk 1".into()).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Corrupt);
        assert!(e.message.starts_with("chunk 1 arrived damaged"), "{e}");
    }
}
