//! Byte counts and durations as people read them, shared by every text output (the agent's
//! log lines, `monitor trace`, `monitor checkpoint show`).

/// Bytes in binary units with one decimal, as `kubectl top` readers expect (`1.5Gi`).
pub fn bytes(value: i64) -> String {
    const UNITS: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut scaled = value as f64;
    let mut unit = 0;
    while scaled.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        scaled /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value}")
    } else {
        format!("{scaled:.1}{}", UNITS[unit])
    }
}

/// [`bytes`] of an unsigned count (saturating at `i64::MAX`, 8 EiB).
pub fn unsigned_bytes(value: u64) -> String {
    bytes(i64::try_from(value).unwrap_or(i64::MAX))
}

/// [`bytes`] with its sign always written (`+1.0Mi`).
pub fn signed_bytes(value: i64) -> String {
    if value >= 0 {
        format!("+{}", bytes(value))
    } else {
        bytes(value)
    }
}

/// Nanoseconds as milliseconds with one decimal (`12.5ms`).
pub fn millis(ns: u64) -> String {
    format!("{:.1}ms", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_pick_binary_units() {
        let cases = [
            ("zero", bytes(0), "0"),
            ("below a KiB", bytes(1023), "1023"),
            ("KiB", bytes(1536), "1.5Ki"),
            ("MiB", bytes(256 << 20), "256.0Mi"),
            ("negative", bytes(-(3 << 30)), "-3.0Gi"),
            ("signed", signed_bytes(1 << 20), "+1.0Mi"),
            ("signed negative", signed_bytes(-2048), "-2.0Ki"),
            ("unsigned", unsigned_bytes(3 << 29), "1.5Gi"),
            ("unsigned saturates", unsigned_bytes(u64::MAX), "8.0Ei"),
            ("millis", millis(12_500_000), "12.5ms"),
        ];
        for (name, actual, expected) in cases {
            assert_eq!(actual, expected, "{name}");
        }
    }
}
