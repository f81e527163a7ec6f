//! KV memory sizes as people write them (`256MiB`, `2GiB`, `512MB`): what `--kv-memory`
//! and the Python package's `kv_memory` accept.

/// A byte count: a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB, TiB; `K`,
/// `M`, `G`, `T` are the binary ones). The message of an error quotes the input.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (try 256MiB or 2GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}` (B, KB, MB, GB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let bytes = x * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{s}` is not a usable size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_units_and_bad_ones_are_refused() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("512MB"), Ok(512_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["", "MiB", "12XB", "-3MiB", "0", "1e999GiB"] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
    }
}
