//! Human sizes: parse `4MiB`, `64k`, `1G`, `4096`; print `4.0 MiB`. Also the storage class
//! names of `--storage`.

/// Parses a storage class: `disk` or `memory`.
pub fn parse_storage(text: &str) -> Result<tomus_wire::StorageClass, String> {
    tomus_wire::StorageClass::parse(text)
        .ok_or_else(|| format!("unknown storage class {text:?}: disk or memory"))
}

/// Parses a rate in bytes per second: a size, optionally followed by `/s` (`64MiB/s`).
pub fn parse_rate(text: &str) -> Result<u64, String> {
    parse_size(text.trim().trim_end_matches("/s"))
}

/// Parses a byte size with an optional binary unit (k/K/KiB/KB = 1024, and so on).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let invalid =
        || format!("invalid size {text:?}: expected a number with an optional unit like 4MiB");
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "invalid size unit {other:?} in {text:?} (use B, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let too_large = || format!("size {text:?} is larger than 2^64 - 1 bytes");
    if !num.contains('.') {
        // Whole numbers exactly: a float would round the largest ones to 2^64.
        let n: u128 = num.parse().map_err(|_| invalid())?;
        return n
            .checked_mul(mult as u128)
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(too_large);
    }
    let value: f64 = num.parse().map_err(|_| invalid())?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes.fract() != 0.0 {
        return Err(format!(
            "invalid size {text:?}: not a whole number of bytes"
        ));
    }
    // 2^64 is exact as a float; anything at or above it does not fit.
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(too_large());
    }
    Ok(bytes as u64)
}

/// Bytes for people (the same figures the dashboard shows).
pub use tomus_wire::human::size as format_size;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        // The largest whole sizes are exact, and one more is an error, not 2^64 - 1.
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_size("18446744073709551616")
            .unwrap_err()
            .contains("larger than"));
        assert!(parse_size("16777216TiB").is_err());
        assert_eq!(parse_size("16777215TiB").unwrap(), 16_777_215 << 40);
        assert!(parse_size("0.5").is_err());
        assert_eq!(format_size(4 << 20), "4.0 MiB");
        assert_eq!(format_size(12), "12 B");
    }
}
