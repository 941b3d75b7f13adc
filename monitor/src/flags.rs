//! Flag values shared by the agent and the subcommands: the output format and the parsers
//! clap calls for durations and byte quantities. A leaf: it knows nothing of the commands, so
//! they and the command line can both use it.
use std::time::Duration;

use crate::engine::{
    attach_distance::AttachWithin, duration::parse_go_duration, quantity::Quantity,
};

/// A Go duration above zero (`100ms`, `1s`, `1m30s`).
pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_go_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be longer than zero".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A Kubernetes quantity of bytes above zero (`256Ki`, `1Gi`, `500M`).
pub(crate) fn positive_bytes(text: &str) -> Result<u64, String> {
    let quantity: Quantity = text.parse().map_err(|e| format!("{e}"))?;
    u64::try_from(quantity.ceil_units())
        .ok()
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{text} is not a positive number of bytes"))
}

/// `--attach-within`: `auto`, `always`, or a positive quantity of bytes.
pub(crate) fn attach_within(text: &str) -> Result<AttachWithin, String> {
    match text {
        "auto" => Ok(AttachWithin::Auto),
        "always" => Ok(AttachWithin::Always),
        _ => positive_bytes(text)
            .map(AttachWithin::Bytes)
            .map_err(|e| format!("{e}; or auto, or always")),
    }
}

/// Bytes per second: a quantity, optionally followed by `/s` (`100Mi`, `1Gi/s`).
pub(crate) fn byte_rate(text: &str) -> Result<u64, String> {
    positive_bytes(text.strip_suffix("/s").unwrap_or(text))
}

/// `--output`: for people or for programs. Each command's flag help says what its JSON holds.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    /// Aligned text for people.
    Text,
    /// JSON for programs.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked() {
        assert_eq!(positive_bytes("256Ki"), Ok(256 << 10));
        assert_eq!(positive_bytes("1Gi"), Ok(1 << 30));
        for bad in ["-1Mi", "0", "lots"] {
            assert!(positive_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(byte_rate("1Gi/s"), Ok(1 << 30));
        assert_eq!(byte_rate("100Mi"), Ok(100 << 20));
        assert_eq!(byte_rate("5000"), Ok(5000));
        assert_eq!(positive_duration("100ms"), Ok(Duration::from_millis(100)));
        assert!(positive_duration("0s").is_err());
        assert!(positive_duration("10").is_err(), "a unit is required");
        assert_eq!(attach_within("auto"), Ok(AttachWithin::Auto));
        assert_eq!(attach_within("always"), Ok(AttachWithin::Always));
        assert_eq!(attach_within("2Gi"), Ok(AttachWithin::Bytes(2 << 30)));
        for bad in ["0", "never", "-1Gi", "Auto"] {
            let e = attach_within(bad).unwrap_err();
            assert!(e.ends_with("or auto, or always"), "{bad}: {e}");
        }
    }
}
