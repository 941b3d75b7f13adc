//! Wall-clock milliseconds printed for people and for file names.

/// `2026-01-31T12:00:00Z`: RFC 3339 in UTC, to the second.
pub fn rfc3339(unix_ms: u64) -> String {
    format_utc(unix_ms, "%Y-%m-%dT%H:%M:%SZ")
}

/// `20260131T120000Z`: the same instant using only characters valid in a checkpoint key.
pub fn compact(unix_ms: u64) -> String {
    format_utc(unix_ms, "%Y%m%dT%H%M%SZ")
}

fn format_utc(unix_ms: u64, format: &str) -> String {
    i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || format!("{unix_ms}ms-after-epoch"),
            |ts| ts.strftime(format).to_string(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        let cases = [
            ("epoch", 0, "1970-01-01T00:00:00Z", "19700101T000000Z"),
            (
                "milliseconds are truncated",
                1_700_000_000_999,
                "2023-11-14T22:13:20Z",
                "20231114T221320Z",
            ),
        ];
        for (name, ms, long, short) in cases {
            assert_eq!(
                (rfc3339(ms).as_str(), compact(ms).as_str()),
                (long, short),
                "{name}"
            );
        }
    }
}
