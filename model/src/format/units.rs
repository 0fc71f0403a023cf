//! Sizes (bytes) and durations (ns) as written in programs: an integer, or a string with a unit such as `"512 KiB"`,
//! `"2GiB"`, `"1.5 MiB"`, `"250 us"`, `"10 s"`.

/// Units of size, in bytes. Binary (`KiB`) and decimal (`kB`, `KB`) prefixes are both accepted.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// Units of time, in nanoseconds.
const DURATION_UNITS: &[(&str, u64)] =
    &[("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000)];

/// What a size may look like, for help texts.
pub const SIZE_HELP: &str =
    "a size is an integer (bytes) or a string such as \"4096 B\", \"512 KiB\", \"1.5 MiB\", \"2 GiB\" (units: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)";

/// What a duration may look like, for help texts.
pub const DURATION_HELP: &str =
    "a duration is an integer (ns) or a string such as \"500 ns\", \"10 us\", \"1.5 ms\", \"10 s\" (units: ns, us, µs, ms, s)";

/// Parses a size string into bytes: a non-negative decimal number (optionally with a fraction and `_` separators),
/// optional spaces, and a unit (`B`, `KiB`, `MiB`, `GiB`, `TiB`, `kB`/`KB`, `MB`, `GB`, `TB`). A bare number means
/// bytes. The result must be a whole number of bytes that fits in 64 bits.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_quantity(s, SIZE_UNITS, "B", "bytes").map_err(|e| format!("invalid size `{s}`: {e}"))
}

/// Parses a duration string into nanoseconds: a non-negative decimal number, optional spaces, and a unit (`ns`,
/// `us` or `µs`, `ms`, `s`). A bare number means nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    parse_quantity(s, DURATION_UNITS, "ns", "nanoseconds").map_err(|e| format!("invalid duration `{s}`: {e}"))
}

fn parse_quantity(s: &str, units: &[(&str, u64)], default_unit: &str, whole: &str) -> Result<u64, String> {
    let s = s.trim();
    // "-5 ms" read as the unit `-5 ms`.
    if s.starts_with('-') {
        return Err("it is negative; sizes and durations are zero or more".to_string());
    }
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let (number, unit) = (&s[..number_end], s[number_end..].trim_start());
    let unit = if unit.is_empty() { default_unit } else { unit };
    let Some(&(_, scale)) = units.iter().find(|(u, _)| *u == unit) else {
        return Err(format!("unknown unit `{unit}`"));
    };
    let number: String = number.chars().filter(|&c| c != '_').collect();
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number.as_str(), ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err("expected a number".to_string());
    }
    if frac_part.contains('.') {
        return Err("malformed number".to_string());
    }
    let too_large = || "too large".to_string();
    let int: u128 = if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| too_large())? };
    let mut value = int.checked_mul(u128::from(scale)).ok_or_else(too_large)?;
    if !frac_part.is_empty() {
        if frac_part.len() > 18 {
            return Err("too many decimals".to_string());
        }
        let frac: u128 = frac_part.parse().map_err(|_| "malformed number".to_string())?;
        let denom = 10u128.pow(frac_part.len() as u32);
        let scaled = frac * u128::from(scale);
        if scaled % denom != 0 {
            return Err(format!("not a whole number of {whole}"));
        }
        value = value.checked_add(scaled / denom).ok_or_else(too_large)?;
    }
    u64::try_from(value).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096 B"), Ok(4096));
        assert_eq!(parse_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size(" 64 MiB "), Ok(64 << 20));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("1_000 kB"), Ok(1_000_000));
        assert_eq!(parse_size(".5 KiB"), Ok(512));
        assert!(parse_size("1.3 B").unwrap_err().contains("whole number of bytes"));
        assert!(parse_size("2 GB/s").unwrap_err().contains("unknown unit"));
        // A negative duration was reported as an unknown unit `-5 ms`.
        assert_eq!(parse_duration("-5 ms").unwrap_err(), "invalid duration `-5 ms`: it is negative; sizes and durations are zero or more");
        assert!(parse_size(" -1").unwrap_err().contains("negative"));
        assert!(parse_size("").is_err());
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("1.2.3 KiB").is_err());
        assert!(parse_size("99999999999 TiB").unwrap_err().contains("too large"));
        assert!(parse_size("-1 KiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10000"), Ok(10_000));
        assert_eq!(parse_duration("1 ms"), Ok(1_000_000));
        assert_eq!(parse_duration("250 us"), Ok(250_000));
        assert_eq!(parse_duration("250µs"), Ok(250_000));
        assert_eq!(parse_duration("10 s"), Ok(10_000_000_000));
        assert_eq!(parse_duration("1.5 ms"), Ok(1_500_000));
        assert!(parse_duration("10 min").is_err());
    }
}
