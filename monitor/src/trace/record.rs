//! One printed trace line.
use std::fmt::Write as _;

use serde::Serialize;

/// What `monitor trace` prints for one kernel event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceRecord {
    /// A cgroup's memory stat moved by at least the step.
    Stat {
        /// CLOCK_MONOTONIC nanoseconds when the kernel saw the change.
        monotonic_ns: u64,
        cgroup_id: u64,
        /// Path below the hierarchy root, or `None` for a cgroup not seen being created.
        cgroup_path: Option<String>,
        /// memory.stat name of the stat.
        stat: &'static str,
        delta_bytes: i64,
        /// The cgroup's own value now: baseline read from memory.stat at first sight plus the
        /// kernel's running sum.
        current_bytes: i64,
    },
    /// A cgroup was created.
    Mkdir { monotonic_ns: u64, cgroup_id: u64, cgroup_path: String },
    /// A cgroup was removed.
    Rmdir { monotonic_ns: u64, cgroup_id: u64, cgroup_path: String },
}

impl TraceRecord {
    /// One aligned text line; `start_ns` is the trace's start, so times are relative.
    pub fn text(&self, start_ns: u64) -> String {
        let secs = |ns: u64| ns.saturating_sub(start_ns) as f64 / 1e9;
        let mut line = String::new();
        match self {
            TraceRecord::Stat {
                monotonic_ns,
                cgroup_id,
                cgroup_path,
                stat,
                delta_bytes,
                current_bytes,
            } => {
                let path = cgroup_path
                    .clone()
                    .unwrap_or_else(|| format!("<cgroup id {cgroup_id}>"));
                let _ = write!(
                    line,
                    "{:>12.6}  {:<6} {:<40} {:<14} {:>10} {:>10}",
                    secs(*monotonic_ns),
                    "stat",
                    path,
                    stat,
                    signed_bytes(*delta_bytes),
                    bytes(*current_bytes)
                );
            }
            TraceRecord::Mkdir { monotonic_ns, cgroup_id, cgroup_path }
            | TraceRecord::Rmdir { monotonic_ns, cgroup_id, cgroup_path } => {
                let kind = if matches!(self, TraceRecord::Mkdir { .. }) { "mkdir" } else { "rmdir" };
                let _ = write!(
                    line,
                    "{:>12.6}  {:<6} {:<40} id {}",
                    secs(*monotonic_ns),
                    kind,
                    cgroup_path,
                    cgroup_id
                );
            }
        }
        line
    }

    /// Header matching [`TraceRecord::text`].
    pub fn text_header() -> String {
        format!(
            "{:>12}  {:<6} {:<40} {:<14} {:>10} {:>10}",
            "TIME(s)", "EVENT", "CGROUP", "STAT", "DELTA", "CURRENT"
        )
    }
}

/// Bytes in binary units with one decimal, as `kubectl top` readers expect (`1.5Gi`).
pub fn bytes(value: i64) -> String {
    const UNITS: [&str; 5] = ["", "Ki", "Mi", "Gi", "Ti"];
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

fn signed_bytes(value: i64) -> String {
    if value >= 0 {
        format!("+{}", bytes(value))
    } else {
        bytes(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_pick_binary_units() {
        assert_eq!(bytes(0), "0");
        assert_eq!(bytes(1023), "1023");
        assert_eq!(bytes(1536), "1.5Ki");
        assert_eq!(bytes(256 << 20), "256.0Mi");
        assert_eq!(bytes(-(3 << 30)), "-3.0Gi");
        assert_eq!(signed_bytes(1 << 20), "+1.0Mi");
    }

    #[test]
    fn json_has_the_documented_fields() {
        let record = TraceRecord::Stat {
            monotonic_ns: 5,
            cgroup_id: 7,
            cgroup_path: Some("/a".into()),
            stat: "anon",
            delta_bytes: 1 << 20,
            current_bytes: 2 << 20,
        };
        let json: serde_json::Value = serde_json::to_value(&record).unwrap();
        for field in ["type", "monotonic_ns", "cgroup_id", "cgroup_path", "stat", "delta_bytes", "current_bytes"] {
            assert!(json.get(field).is_some(), "missing {field} in {json}");
        }
        assert_eq!(json["type"], "stat");
    }

    #[test]
    fn text_lines_are_relative_and_aligned() {
        let record = TraceRecord::Mkdir {
            monotonic_ns: 2_500_000_000,
            cgroup_id: 9,
            cgroup_path: "/x".into(),
        };
        let line = record.text(500_000_000);
        assert!(line.starts_with("    2.000000  mkdir  /x"), "{line:?}");
        let stat = TraceRecord::Stat {
            monotonic_ns: 0,
            cgroup_id: 9,
            cgroup_path: None,
            stat: "file",
            delta_bytes: -4096,
            current_bytes: 0,
        };
        assert!(stat.text(0).contains("<cgroup id 9>"));
        assert_eq!(
            stat.text(0).find("file"),
            TraceRecord::text_header().find("STAT"),
            "columns line up with the header"
        );
    }
}
