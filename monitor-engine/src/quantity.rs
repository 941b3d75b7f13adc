//! Kubernetes `resource.Quantity` values as exact integers.
//!
//! A quantity is kept in thousandths of its base unit (bytes, inodes, processes), so `500m`,
//! `1.5Gi` and `100Mi` are all exact, and sums and comparisons agree with the kubelet's
//! decimal arithmetic for every value written with at most milli precision. `n` and `u`
//! suffixes are accepted and rounded up to the next milli, which only matters for
//! sub-milli-byte values nobody writes.
use std::fmt;
use std::str::FromStr;

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Empty input.
    #[error("empty quantity")]
    Empty,
    /// Not `<sign><digits>[.<digits>][suffix]`.
    #[error("not a number with an optional suffix (like 100Mi, 1G, 500m or 1e6)")]
    Malformed,
    /// The suffix is none of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an `e<exp>` exponent.
    #[error("unknown suffix {0:?}")]
    UnknownSuffix(String),
    /// Larger than this agent can represent (about 1.7e35 base units).
    #[error("out of range")]
    OutOfRange,
}

/// An exact quantity in thousandths of its base unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    millis: i128,
}

impl Quantity {
    /// Zero, the request of a pod that asked for nothing.
    pub const ZERO: Quantity = Quantity { millis: 0 };

    /// A whole number of base units (bytes, inodes, processes).
    pub const fn from_units(units: i64) -> Quantity {
        Quantity {
            millis: units as i128 * 1000,
        }
    }

    /// The exact value in thousandths of a base unit.
    pub(crate) const fn millis(self) -> i128 {
        self.millis
    }

    /// Negative quantities are legal to parse but rejected where the kubelet rejects them.
    pub(crate) const fn is_negative(self) -> bool {
        self.millis < 0
    }

    /// The value rounded up to whole base units, like Go's `Quantity.Value()`, saturated.
    pub fn ceil_units(self) -> i64 {
        let units = self.millis.div_euclid(1000) + i128::from(self.millis.rem_euclid(1000) != 0);
        units.clamp(i64::MIN.into(), i64::MAX.into()) as i64
    }

    /// Sum, saturating (only reachable with absurd inputs).
    pub(crate) fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            millis: self.millis.saturating_add(other.millis),
        }
    }

    /// Difference, saturating.
    pub(crate) fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            millis: self.millis.saturating_sub(other.millis),
        }
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(text: &str) -> Result<Quantity, QuantityError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let (negative, rest) = match text.as_bytes()[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
            return Err(QuantityError::Malformed);
        }
        // mantissa * 10^exp10 * 2^exp2 base units, computed exactly then scaled to millis.
        let mut mantissa: i128 = 0;
        for digit in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(digit - b'0')))
                .ok_or(QuantityError::OutOfRange)?;
        }
        let frac_digits = i32::try_from(frac_part.len()).map_err(|_| QuantityError::OutOfRange)?;
        let (exp10, exp2) = suffix_exponents(suffix)?;
        let millis = scale(mantissa, exp10 - frac_digits + 3, exp2)?;
        Ok(Quantity {
            millis: if negative { -millis } else { millis },
        })
    }
}

/// Powers of ten and two that a suffix stands for.
fn suffix_exponents(suffix: &str) -> Result<(i32, u32), QuantityError> {
    let exponents = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<i32>().ok())
                .filter(|e| e.abs() <= 40)
                .ok_or_else(|| QuantityError::UnknownSuffix(suffix.to_string()))?;
            (exponent, 0)
        }
    };
    Ok(exponents)
}

/// `mantissa * 10^exp10 * 2^exp2`, rounded up when `exp10` is negative.
fn scale(mantissa: i128, exp10: i32, exp2: u32) -> Result<i128, QuantityError> {
    let mut value = mantissa
        .checked_mul(1i128.checked_shl(exp2).ok_or(QuantityError::OutOfRange)?)
        .ok_or(QuantityError::OutOfRange)?;
    if exp10 >= 0 {
        let factor = 10i128
            .checked_pow(exp10.unsigned_abs())
            .ok_or(QuantityError::OutOfRange)?;
        value = value.checked_mul(factor).ok_or(QuantityError::OutOfRange)?;
    } else {
        let divisor = 10i128.checked_pow(exp10.unsigned_abs());
        value = match divisor {
            Some(d) => value / d + i128::from(value % d != 0),
            None => i128::from(value != 0),
        };
    }
    Ok(value)
}

impl serde::Serialize for Quantity {
    /// Serialized exactly: an integer of base units when whole (bytes, inodes, processes),
    /// else a number with up to three decimals (`500m` is `0.5`). Below 10^12 units the
    /// shortest float text that round-trips is those decimals, so the text is exact.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(self.millis / 1000) {
            Ok(units) if self.millis % 1000 == 0 => serializer.serialize_i64(units),
            _ => serializer.serialize_f64(self.millis as f64 / 1000.0),
        }
    }
}

impl fmt::Display for Quantity {
    /// Shortest exact binary form for whole units (`100Mi`, `1536Ki`, `7`), else decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis % 1000 != 0 {
            let sign = if self.millis < 0 { "-" } else { "" };
            let abs = self.millis.unsigned_abs();
            return write!(f, "{sign}{}.{:03}", abs / 1000, abs % 1000);
        }
        let units = self.millis / 1000;
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i128 << shift;
            if units != 0 && units % unit == 0 {
                return write!(f, "{}{suffix}", units / unit);
            }
        }
        write!(f, "{units}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_suffixes() {
        struct Case {
            name: &'static str,
            input: &'static str,
            millis: Result<i128, QuantityError>,
        }
        let cases = [
            Case {
                name: "plain bytes",
                input: "1024",
                millis: Ok(1_024_000),
            },
            Case {
                name: "binary Mi",
                input: "100Mi",
                millis: Ok(100 * (1 << 20) * 1000),
            },
            Case {
                name: "binary Gi",
                input: "1Gi",
                millis: Ok((1 << 30) * 1000),
            },
            Case {
                name: "binary Ei",
                input: "1Ei",
                millis: Ok((1i128 << 60) * 1000),
            },
            Case {
                name: "decimal G",
                input: "1G",
                millis: Ok(1_000_000_000_000),
            },
            Case {
                name: "decimal M",
                input: "500M",
                millis: Ok(500_000_000_000),
            },
            Case {
                name: "decimal k",
                input: "2k",
                millis: Ok(2_000_000),
            },
            Case {
                name: "milli",
                input: "500m",
                millis: Ok(500),
            },
            Case {
                name: "fraction with binary suffix",
                input: "1.5Gi",
                millis: Ok(1_610_612_736_000),
            },
            Case {
                name: "leading dot",
                input: ".5Ki",
                millis: Ok(512_000),
            },
            Case {
                name: "exponent",
                input: "1e3",
                millis: Ok(1_000_000),
            },
            Case {
                name: "nano rounds up to a milli",
                input: "1n",
                millis: Ok(1),
            },
            Case {
                name: "negative",
                input: "-1Mi",
                millis: Ok(-(1 << 20) * 1000),
            },
            Case {
                name: "explicit plus",
                input: "+7",
                millis: Ok(7000),
            },
            Case {
                name: "empty",
                input: "",
                millis: Err(QuantityError::Empty),
            },
            Case {
                name: "suffix only",
                input: "Mi",
                millis: Err(QuantityError::Malformed),
            },
            Case {
                name: "two dots",
                input: "1.2.3",
                millis: Err(QuantityError::Malformed),
            },
            Case {
                name: "lowercase mi is not a suffix",
                input: "100mi",
                millis: Err(QuantityError::UnknownSuffix("mi".into())),
            },
            Case {
                name: "percent is not a quantity",
                input: "10%",
                millis: Err(QuantityError::UnknownSuffix("%".into())),
            },
            Case {
                name: "too many digits",
                input: "999999999999999999999999999999999999999999",
                millis: Err(QuantityError::OutOfRange),
            },
        ];
        for case in cases {
            let got = case.input.parse::<Quantity>().map(Quantity::millis);
            assert_eq!(got, case.millis, "case {:?}", case.name);
        }
    }

    #[test]
    fn rounds_up_to_units_and_displays_compactly() {
        struct Case {
            name: &'static str,
            input: &'static str,
            units: i64,
            display: &'static str,
        }
        let cases = [
            Case {
                name: "binary",
                input: "100Mi",
                units: 104_857_600,
                display: "100Mi",
            },
            Case {
                name: "decimal shown plainly",
                input: "1G",
                units: 1_000_000_000,
                display: "1000000000",
            },
            Case {
                name: "decimal divisible by Ki",
                input: "1024k",
                units: 1_024_000,
                display: "1000Ki",
            },
            Case {
                name: "milli rounds up",
                input: "1500m",
                units: 2,
                display: "1.500",
            },
            Case {
                name: "zero",
                input: "0",
                units: 0,
                display: "0",
            },
            Case {
                name: "negative",
                input: "-2Ki",
                units: -2048,
                display: "-2Ki",
            },
        ];
        for case in cases {
            let quantity: Quantity = case.input.parse().expect(case.name);
            assert_eq!(quantity.ceil_units(), case.units, "case {:?}", case.name);
            assert_eq!(quantity.to_string(), case.display, "case {:?}", case.name);
        }
    }

    #[test]
    fn serializes_exactly_to_json() {
        let cases = [
            ("whole bytes", "100Mi", "104857600"),
            ("zero", "0", "0"),
            ("a fraction of a byte", "500m", "0.5"),
            ("thousandths", "1001m", "1.001"),
            ("negative fraction", "-1500m", "-1.5"),
            ("decimal suffix", "1.5k", "1500"),
        ];
        for (name, text, json) in cases {
            let quantity: Quantity = text.parse().expect(name);
            assert_eq!(
                serde_json::to_string(&quantity).expect(name),
                json,
                "case {name:?}"
            );
        }
    }
}
