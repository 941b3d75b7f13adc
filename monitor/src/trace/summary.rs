//! The summary printed when the trace ends: who suffered most (stall time), who caused most
//! (memory grown in bursts, and reclaim forced by hitting its own limit), and the OOM kills.
use std::collections::HashMap;

use serde::Serialize;

use super::attribution::Subject;
use crate::engine::units::{bytes, millis};
use crate::engine::{incident::Reclaim, printable::printable};

/// Rows shown per ranking.
pub(crate) const TOP: usize = 10;

/// Totals for one pod or cgroup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Totals {
    /// `namespace/name` of the pod, else the cgroup path.
    pub subject: String,
    pub stalls: u64,
    pub stall_ns: u64,
    pub max_stall_ns: u64,
    /// Bytes reclaimed by memcg-limit stalls of this subject: reclaim it forced on itself (the
    /// kernel reclaims the cgroup at its limit, this one or an ancestor).
    pub limit_reclaimed_bytes: u64,
    pub bursts: u64,
    /// Growth within the windows of its bursts.
    pub burst_growth_bytes: i64,
}

impl Totals {
    /// How much memory pressure this subject caused.
    fn caused_bytes(&self) -> i64 {
        self.burst_growth_bytes.max(0) + self.limit_reclaimed_bytes as i64
    }
}

/// One OOM kill, as summarised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct OomSummary {
    pub pid: u32,
    pub comm: String,
    /// The victim's pod or cgroup, when it could be resolved.
    pub subject: Option<String>,
}

/// Accumulates the trace's incidents.
#[derive(Clone, Debug, Default)]
pub(crate) struct Summary {
    totals: HashMap<String, Totals>,
    oom_kills: Vec<OomSummary>,
}

/// The final report, also the `type: "summary"` JSON object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct SummaryReport {
    /// Most stall time first.
    pub most_stalled: Vec<Totals>,
    /// Most memory pressure caused first.
    pub most_reclaim_caused: Vec<Totals>,
    pub oom_kills: Vec<OomSummary>,
}

impl Summary {
    pub(crate) fn stall(
        &mut self,
        subject: &Subject,
        reclaim: Reclaim,
        duration_ns: u64,
        reclaimed_bytes: u64,
    ) {
        let totals = self.totals_of(subject);
        totals.stalls += 1;
        totals.stall_ns += duration_ns;
        totals.max_stall_ns = totals.max_stall_ns.max(duration_ns);
        if reclaim == Reclaim::Memcg {
            totals.limit_reclaimed_bytes += reclaimed_bytes;
        }
    }

    pub(crate) fn burst(&mut self, subject: &Subject, growth_bytes: i64) {
        let totals = self.totals_of(subject);
        totals.bursts += 1;
        totals.burst_growth_bytes += growth_bytes;
    }

    pub(crate) fn oom_kill(&mut self, pid: u32, comm: &str, victim: Option<&Subject>) {
        self.oom_kills.push(OomSummary {
            pid,
            comm: comm.to_string(),
            subject: victim.map(Subject::label),
        });
    }

    fn totals_of(&mut self, subject: &Subject) -> &mut Totals {
        let label = subject.label();
        self.totals.entry(label.clone()).or_insert_with(|| Totals {
            subject: label,
            ..Totals::default()
        })
    }

    /// The rankings, ties broken by name so the output is stable.
    pub(crate) fn report(&self) -> SummaryReport {
        let ranked = |key: fn(&Totals) -> i128| {
            let mut rows: Vec<Totals> = self
                .totals
                .values()
                .filter(|t| key(t) > 0)
                .cloned()
                .collect();
            rows.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.subject.cmp(&b.subject)));
            rows.truncate(TOP);
            rows
        };
        SummaryReport {
            most_stalled: ranked(|t| i128::from(t.stall_ns)),
            most_reclaim_caused: ranked(|t| i128::from(t.caused_bytes())),
            oom_kills: self.oom_kills.clone(),
        }
    }
}

impl SummaryReport {
    /// The report as aligned text tables.
    pub(crate) fn text(&self) -> String {
        let mut out = String::from("\nSUMMARY\n");
        out += &format!(
            "most stall time:\n  {:<44} {:>7} {:>11} {:>11}\n",
            "POD/CGROUP", "STALLS", "TOTAL", "MAX"
        );
        for t in &self.most_stalled {
            out += &format!(
                "  {:<44} {:>7} {:>11} {:>11}\n",
                t.subject,
                t.stalls,
                millis(t.stall_ns),
                millis(t.max_stall_ns)
            );
        }
        out += &format!(
            "most reclaim caused:\n  {:<44} {:>7} {:>11} {:>11}\n",
            "POD/CGROUP", "BURSTS", "GROWN", "LIMIT-RECL"
        );
        for t in &self.most_reclaim_caused {
            out += &format!(
                "  {:<44} {:>7} {:>11} {:>11}\n",
                t.subject,
                t.bursts,
                bytes(t.burst_growth_bytes),
                bytes(t.limit_reclaimed_bytes as i64)
            );
        }
        out += &format!("oom kills: {}\n", self.oom_kills.len());
        for kill in &self.oom_kills {
            out += &format!(
                "  pid {:<8} {:<16} {}\n",
                kill.pid,
                printable(&kill.comm),
                kill.subject.as_deref().unwrap_or("<cgroup unknown>")
            );
        }
        out
    }
}

/// Nanoseconds as milliseconds with one decimal (`12.5ms`).
#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn subject(path: &str) -> Subject {
        Subject {
            cgroup_id: path.len() as u64,
            cgroup_path: Some(path.into()),
            pod: None,
        }
    }

    #[test]
    fn rankings_by_case() {
        let mut s = Summary::default();
        s.stall(&subject("/a"), Reclaim::Direct, 5 * MS, 4096);
        s.stall(&subject("/a"), Reclaim::Direct, 7 * MS, 4096);
        s.stall(&subject("/b"), Reclaim::Memcg, 20 * MS, 1 << 20);
        s.burst(&subject("/c"), 300 << 20);
        s.burst(&subject("/c"), 100 << 20);
        s.oom_kill(42, "alloc", Some(&subject("/b")));
        s.oom_kill(43, "gone", None);
        let report = s.report();
        let names = |rows: &[Totals]| rows.iter().map(|t| t.subject.clone()).collect::<Vec<_>>();
        let cases: [(&str, Vec<String>, Vec<&str>); 2] = [
            (
                "stall time ranks /b (20 ms) over /a (12 ms); /c never stalled",
                names(&report.most_stalled),
                vec!["/b", "/a"],
            ),
            (
                "bursts (400 MiB) outrank limit reclaim (1 MiB); direct reclaim causes nothing",
                names(&report.most_reclaim_caused),
                vec!["/c", "/b"],
            ),
        ];
        for (name, got, expected) in cases {
            assert_eq!(got, expected, "{name}");
        }
        let a = &report.most_stalled[1];
        assert_eq!((a.stalls, a.stall_ns, a.max_stall_ns), (2, 12 * MS, 7 * MS));
        assert_eq!(
            report.oom_kills[0],
            OomSummary {
                pid: 42,
                comm: "alloc".into(),
                subject: Some("/b".into())
            }
        );
        let text = report.text();
        assert!(
            text.contains("oom kills: 2") && text.contains("<cgroup unknown>"),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["most_stalled"][0]["stall_ns"], 20 * MS);
    }

    #[test]
    fn rankings_are_capped_and_stable() {
        let mut s = Summary::default();
        for i in 0..(TOP + 5) {
            s.stall(&subject(&format!("/p{i:02}")), Reclaim::Direct, MS, 0);
        }
        let report = s.report();
        assert_eq!(report.most_stalled.len(), TOP);
        assert_eq!(
            report.most_stalled[0].subject, "/p00",
            "ties sorted by name"
        );
        assert!(report.most_reclaim_caused.is_empty());
    }
}
