//! Go `time.ParseDuration` syntax (`1m30s`, `5m`, `300ms`, `1.5h`, `0`), as the kubelet's
//! configuration file uses for grace and transition periods.
use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a sequence of `<number><unit>` with units ns, us, µs, ms, s, m, h.
    #[error("not a Go duration (like 90s, 1m30s, 300ms or 2h)")]
    Malformed,
    /// A leading `-`: every duration in the eviction configuration must be positive.
    #[error("negative duration")]
    Negative,
    /// Longer than about 292 years, which Go cannot represent either.
    #[error("out of range")]
    OutOfRange,
}

/// Parses a Go duration string. A leading `-` is recognised so it can be reported as
/// [`DurationError::Negative`] rather than as malformed text.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Malformed);
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or(DurationError::Malformed)?;
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(DurationError::Malformed),
        };
        total_nanos += number_nanos(number, unit_nanos)?;
        if total_nanos > i64::MAX as u128 {
            return Err(DurationError::OutOfRange);
        }
        rest = next;
    }
    if negative && total_nanos > 0 {
        return Err(DurationError::Negative);
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

/// `number` (digits with an optional fraction) times `unit_nanos`, truncated like Go.
fn number_nanos(number: &str, unit_nanos: u128) -> Result<u128, DurationError> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(DurationError::Malformed);
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| DurationError::OutOfRange)?
    };
    let mut nanos = whole
        .checked_mul(unit_nanos)
        .ok_or(DurationError::OutOfRange)?;
    let mut scale = unit_nanos;
    for digit in frac.bytes() {
        scale /= 10;
        nanos += u128::from(digit - b'0') * scale;
    }
    Ok(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        struct Case {
            name: &'static str,
            input: &'static str,
            expected: Result<Duration, DurationError>,
        }
        let cases = [
            Case {
                name: "seconds",
                input: "90s",
                expected: Ok(Duration::from_secs(90)),
            },
            Case {
                name: "minutes and seconds",
                input: "1m30s",
                expected: Ok(Duration::from_secs(90)),
            },
            Case {
                name: "minutes",
                input: "5m",
                expected: Ok(Duration::from_secs(300)),
            },
            Case {
                name: "milliseconds",
                input: "300ms",
                expected: Ok(Duration::from_millis(300)),
            },
            Case {
                name: "fractional hours",
                input: "1.5h",
                expected: Ok(Duration::from_secs(5400)),
            },
            Case {
                name: "micro sign",
                input: "7µs",
                expected: Ok(Duration::from_micros(7)),
            },
            Case {
                name: "bare zero",
                input: "0",
                expected: Ok(Duration::ZERO),
            },
            Case {
                name: "negative zero",
                input: "-0s",
                expected: Ok(Duration::ZERO),
            },
            Case {
                name: "negative",
                input: "-1s",
                expected: Err(DurationError::Negative),
            },
            Case {
                name: "missing unit",
                input: "30",
                expected: Err(DurationError::Malformed),
            },
            Case {
                name: "unknown unit",
                input: "3d",
                expected: Err(DurationError::Malformed),
            },
            Case {
                name: "empty",
                input: "",
                expected: Err(DurationError::Malformed),
            },
            Case {
                name: "unit only",
                input: "s",
                expected: Err(DurationError::Malformed),
            },
            Case {
                name: "too long",
                input: "3000000h",
                expected: Err(DurationError::OutOfRange),
            },
        ];
        for case in cases {
            assert_eq!(
                parse_go_duration(case.input),
                case.expected,
                "case {:?}",
                case.name
            );
        }
    }
}
