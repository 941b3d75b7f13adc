//! One printed trace line.
use std::fmt::Write as _;

use serde::Serialize;

use super::{attribution::Subject, summary::SummaryReport};
use crate::{
    engine::printable::printable,
    engine::units::{bytes, millis, signed_bytes},
    source::pressure::Pressure,
};

/// What `monitor trace` prints for one kernel event, or the summary at the end.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum TraceRecord {
    /// A cgroup's memory stat moved by at least the step.
    Stat {
        /// CLOCK_MONOTONIC nanoseconds when the kernel saw the change.
        monotonic_ns: u64,
        #[serde(flatten)]
        subject: Subject,
        /// memory.stat name of the stat.
        stat: &'static str,
        delta_bytes: i64,
        /// The cgroup's own value now: baseline read from memory.stat at first sight plus the
        /// kernel's running sum.
        current_bytes: i64,
    },
    /// A cgroup was created.
    Mkdir {
        monotonic_ns: u64,
        cgroup_id: u64,
        cgroup_path: String,
    },
    /// A cgroup was removed.
    Rmdir {
        monotonic_ns: u64,
        cgroup_id: u64,
        cgroup_path: String,
    },
    /// A task stalled in reclaim for at least `--min-stall`; the subject is the task's cgroup.
    Stall {
        /// When reclaim began.
        monotonic_ns: u64,
        #[serde(flatten)]
        subject: Subject,
        /// `direct` (node short of memory) or `memcg` (the cgroup or an ancestor at its limit).
        reclaim: &'static str,
        pid: u32,
        tid: u32,
        comm: String,
        duration_ns: u64,
        reclaimed_bytes: u64,
    },
    /// kswapd of a NUMA node woke (`wake`) or went to sleep (`sleep`).
    Kswapd {
        monotonic_ns: u64,
        nid: i32,
        state: &'static str,
        order: i32,
    },
    /// The OOM killer chose a victim; the subject is the victim's cgroup.
    OomKill {
        monotonic_ns: u64,
        #[serde(flatten)]
        subject: Subject,
        /// `kernel` when the victim's cgroup was recorded by the kernel program as the killer
        /// chose it (6.8+), `proc` when read from /proc/<pid>/cgroup, `trigger` when neither
        /// named it and the subject is the cgroup whose task invoked the killer.
        cgroup_source: &'static str,
        pid: u32,
        comm: String,
        /// Cgroup of the task that invoked the OOM killer (for a cgroup OOM, the one at its limit).
        trigger: Subject,
        anon_rss_bytes: u64,
        file_rss_bytes: u64,
        shmem_rss_bytes: u64,
        oom_score_adj: i32,
    },
    /// A cgroup's memory grew faster than `--burst-rate` over the burst window.
    Burst {
        monotonic_ns: u64,
        #[serde(flatten)]
        subject: Subject,
        growth_bytes: i64,
        window_ns: u64,
        rate_bytes_per_sec: u64,
    },
    /// A PSI trigger fired: tasks stalled on memory longer than `--psi-stall` within the trigger window.
    Pressure {
        monotonic_ns: u64,
        /// `node` or `cgroup`.
        scope: &'static str,
        #[serde(flatten)]
        subject: Option<Subject>,
        some_avg10: f64,
        full_avg10: f64,
        some_avg60: f64,
        some_total_us: u64,
    },
    /// The end-of-trace summary, scoped like the trace: `cgroup_path` is the `--cgroup` root
    /// when one was given.
    Summary {
        /// When the trace ended.
        monotonic_ns: u64,
        #[serde(flatten)]
        scope: Option<Subject>,
        #[serde(flatten)]
        report: SummaryReport,
    },
}

impl TraceRecord {
    /// The pressure record for a PSI signal.
    pub(crate) fn pressure(monotonic_ns: u64, subject: Option<Subject>, p: Pressure) -> Self {
        TraceRecord::Pressure {
            monotonic_ns,
            scope: if subject.is_some() { "cgroup" } else { "node" },
            subject,
            some_avg10: p.some_avg10,
            full_avg10: p.full_avg10,
            some_avg60: p.some_avg60,
            some_total_us: p.some_total_us,
        }
    }

    /// One aligned text line (TIME, KIND, POD/CGROUP, VALUE, DETAIL); `start_ns` is the
    /// trace's start, so times are relative. The summary is a multi-line table.
    pub(crate) fn text(&self, start_ns: u64) -> String {
        let secs = |ns: u64| ns.saturating_sub(start_ns) as f64 / 1e9;
        let row = |ns: u64, kind: &str, who: &str, value: &str, detail: &str| {
            let mut line = String::new();
            let _ = write!(
                line,
                "{:>12.6}  {:<8} {:<44} {:>10}  {}",
                secs(ns),
                kind,
                who,
                value,
                detail
            );
            line.trim_end().to_string()
        };
        match self {
            TraceRecord::Stat {
                monotonic_ns,
                subject,
                stat,
                delta_bytes,
                current_bytes,
            } => row(
                *monotonic_ns,
                "stat",
                &subject.label(),
                &signed_bytes(*delta_bytes),
                &format!("{stat} now {}", bytes(*current_bytes)),
            ),
            TraceRecord::Mkdir {
                monotonic_ns,
                cgroup_id,
                cgroup_path,
            } => row(
                *monotonic_ns,
                "mkdir",
                cgroup_path,
                "",
                &format!("id {cgroup_id}"),
            ),
            TraceRecord::Rmdir {
                monotonic_ns,
                cgroup_id,
                cgroup_path,
            } => row(
                *monotonic_ns,
                "rmdir",
                cgroup_path,
                "",
                &format!("id {cgroup_id}"),
            ),
            TraceRecord::Stall {
                monotonic_ns,
                subject,
                reclaim,
                pid,
                tid,
                comm,
                duration_ns,
                reclaimed_bytes,
            } => row(
                *monotonic_ns,
                "stall",
                &subject.label(),
                &millis(*duration_ns),
                &format!(
                    "{reclaim} reclaim, pid {pid} tid {tid} {}, freed {}",
                    printable(comm),
                    bytes(*reclaimed_bytes as i64)
                ),
            ),
            TraceRecord::Kswapd {
                monotonic_ns,
                nid,
                state,
                order,
            } => {
                let detail = if *state == "wake" {
                    format!("wake, order {order}")
                } else {
                    state.to_string()
                };
                row(*monotonic_ns, "kswapd", &format!("node {nid}"), "", &detail)
            }
            TraceRecord::OomKill {
                monotonic_ns,
                subject,
                pid,
                comm,
                trigger,
                anon_rss_bytes,
                oom_score_adj,
                ..
            } => row(
                *monotonic_ns,
                "oom_kill",
                &subject.label(),
                &bytes(*anon_rss_bytes as i64),
                &format!(
                    "pid {pid} {} killed (anon rss), oom_score_adj {oom_score_adj}, OOM in {}",
                    printable(comm),
                    trigger.label()
                ),
            ),
            TraceRecord::Burst {
                monotonic_ns,
                subject,
                growth_bytes,
                window_ns,
                rate_bytes_per_sec,
            } => row(
                *monotonic_ns,
                "burst",
                &subject.label(),
                &format!("{}/s", bytes(*rate_bytes_per_sec as i64)),
                &format!("grew {} in {}", bytes(*growth_bytes), millis(*window_ns)),
            ),
            TraceRecord::Pressure {
                monotonic_ns,
                subject,
                some_avg10,
                full_avg10,
                some_avg60,
                ..
            } => row(
                *monotonic_ns,
                "pressure",
                &subject
                    .as_ref()
                    .map_or_else(|| "node".to_string(), Subject::label),
                &format!("{some_avg10:.2}%"),
                &format!("some avg10; full avg10 {full_avg10:.2}%, some avg60 {some_avg60:.2}%"),
            ),
            TraceRecord::Summary { report, .. } => report.text(),
        }
    }

    /// Header matching [`TraceRecord::text`].
    pub(crate) fn text_header() -> String {
        format!(
            "{:>12}  {:<8} {:<44} {:>10}  {}",
            "TIME(s)", "KIND", "POD/CGROUP", "VALUE", "DETAIL"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(path: Option<&str>) -> Subject {
        Subject {
            cgroup_id: 7,
            cgroup_path: path.map(str::to_string),
            pod: None,
        }
    }

    #[test]
    fn json_has_the_documented_fields() {
        let stall = TraceRecord::Stall {
            monotonic_ns: 5,
            subject: subject(Some("/a")),
            reclaim: "memcg",
            pid: 1,
            tid: 2,
            comm: "x".into(),
            duration_ns: 3,
            reclaimed_bytes: 4096,
        };
        let cases: [(&str, TraceRecord, &[&str]); 3] = [
            (
                "stat",
                TraceRecord::Stat {
                    monotonic_ns: 5,
                    subject: subject(Some("/a")),
                    stat: "anon",
                    delta_bytes: 1 << 20,
                    current_bytes: 2 << 20,
                },
                &[
                    "monotonic_ns",
                    "cgroup_id",
                    "cgroup_path",
                    "stat",
                    "delta_bytes",
                    "current_bytes",
                ],
            ),
            (
                "stall",
                stall,
                &[
                    "monotonic_ns",
                    "cgroup_id",
                    "cgroup_path",
                    "reclaim",
                    "pid",
                    "tid",
                    "comm",
                    "duration_ns",
                ],
            ),
            (
                "pressure",
                TraceRecord::pressure(1, None, Pressure::default()),
                &["monotonic_ns", "scope", "some_avg10", "full_avg10"],
            ),
        ];
        for (kind, record, fields) in cases {
            let json: serde_json::Value = serde_json::to_value(&record).unwrap();
            assert_eq!(json["type"], kind);
            for field in fields {
                assert!(json.get(field).is_some(), "missing {field} in {json}");
            }
            assert!(
                json.get("pod").is_none(),
                "no pod without a pod source: {json}"
            );
        }
        let summary = serde_json::to_value(TraceRecord::Summary {
            monotonic_ns: 9,
            scope: Some(subject(Some("/a"))),
            report: super::super::summary::Summary::default().report(),
        })
        .unwrap();
        assert_eq!(summary["type"], "summary");
        assert_eq!(summary["cgroup_path"], "/a", "scoped like the trace");
        assert!(
            summary["most_stalled"].is_array() && summary["oom_kills"].is_array(),
            "{summary}"
        );
    }

    #[test]
    fn text_lines_are_relative_and_aligned() {
        let record = TraceRecord::Mkdir {
            monotonic_ns: 2_500_000_000,
            cgroup_id: 9,
            cgroup_path: "/x".into(),
        };
        let line = record.text(500_000_000);
        assert!(line.starts_with("    2.000000  mkdir    /x"), "{line:?}");
        let header = TraceRecord::text_header();
        let stat = TraceRecord::Stat {
            monotonic_ns: 0,
            subject: Subject {
                cgroup_id: 9,
                cgroup_path: None,
                pod: None,
            },
            stat: "file",
            delta_bytes: -4096,
            current_bytes: 0,
        };
        let stall = TraceRecord::Stall {
            monotonic_ns: 0,
            subject: subject(Some("/pods/a")),
            reclaim: "direct",
            pid: 1,
            tid: 1,
            comm: "x".into(),
            duration_ns: 12_340_000,
            reclaimed_bytes: 0,
        };
        assert!(stat.text(0).contains("<cgroup id 9>"));
        for (name, line, value) in [
            ("stat", stat.text(0), "-4.0Ki"),
            ("stall", stall.text(0), "12.3ms"),
        ] {
            let value_end = line.find(value).unwrap() + value.len();
            assert_eq!(
                value_end,
                header.find("VALUE").unwrap() + "VALUE".len(),
                "{name}: VALUE column is right-aligned: {line:?}"
            );
            assert_eq!(line.find(name), header.find("KIND"), "{name}: KIND column");
        }
    }
}
