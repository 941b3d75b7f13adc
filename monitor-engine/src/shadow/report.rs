//! The scorecard as `/debug/shadow` answers it and `monitor shadow` prints it.
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Line, Outcome, Scorecard, median};
use crate::printable::printable;

/// A scorecard with what is not final yet, at `now_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowReport {
    /// The node it is about (`None`: the agent was not told its name).
    pub node: Option<String>,
    pub now_ns: u64,
    /// The agent's own, shared: publishing a report copies none of it.
    pub scorecard: Arc<Scorecard>,
    /// An episode of decisions whose outcome is not known yet.
    pub episode_open: bool,
    /// Evictions and kills waiting for a late naming.
    pub waiting: usize,
}

impl ShadowReport {
    /// In words; `time` prints a wall-clock unix nanosecond.
    pub fn text(&self, time: &dyn Fn(u64) -> String) -> String {
        let card = &self.scorecard;
        let n = |o: Outcome| card.count(o);
        let mut out = format!(
            "shadow scorecard{} since {} ({})\n",
            self.node
                .as_deref()
                .map(|node| format!(" of {}", printable(node)))
                .unwrap_or_default(),
            time(card.since_ns),
            seconds_words(self.now_ns.saturating_sub(card.since_ns) / 1_000_000_000),
        );
        out += &format!(
            "kubelet evictions {}: named first {} (same pod), {} different pods, {} named late, \
             {} missed",
            card.kubelet_evictions(),
            n(Outcome::SamePod),
            n(Outcome::DifferentPod),
            n(Outcome::Late),
            n(Outcome::Missed),
        );
        if let Some(share) = card.agreement() {
            out += &format!("; agreement {:.1} %", share * 100.0);
        }
        if let Some(lead) = median(&card.kubelet_leads_ns) {
            out += &format!("; lead time median {}", seconds(lead));
        }
        out += "\n";
        let kills =
            n(Outcome::KernelForeseen) + n(Outcome::KernelLate) + n(Outcome::KernelUnforeseen);
        out += &format!(
            "kernel OOM kills {kills}: foreseen {}{}, named after {}, not foreseen {}; at a \
             pod's own limit {} (neither the kubelet nor the agent acts on those)\n",
            n(Outcome::KernelForeseen),
            median(&card.kernel_leads_ns)
                .map(|lead| format!(" (median {} before)", seconds(lead)))
                .unwrap_or_default(),
            n(Outcome::KernelLate),
            n(Outcome::KernelUnforeseen),
            n(Outcome::KernelOwnLimit),
        );
        out += &format!(
            "decisions nobody acted on: {} (nothing happened)\n",
            n(Outcome::NothingHappened)
        );
        if self.episode_open || self.waiting > 0 {
            out += &format!(
                "not final yet: {}{} waiting for a naming\n",
                if self.episode_open {
                    "an episode of decisions open, "
                } else {
                    ""
                },
                self.waiting
            );
        }
        let different: Vec<&Line> = card
            .lines
            .iter()
            .filter(|l| l.outcome == Outcome::DifferentPod)
            .collect();
        if !different.is_empty() {
            out += "different pods:\n";
            for line in different {
                out += &format!("  {}\n", line_words(line, time));
            }
        }
        if !card.lines.is_empty() {
            out += "newest outcomes:\n";
            for line in card.lines.iter().rev().take(10) {
                out += &format!("  {}\n", line_words(line, time));
            }
        }
        out
    }
}

fn line_words(line: &Line, time: &dyn Fn(u64) -> String) -> String {
    format!(
        "{} {}: {} acted on {}, the agent named {}{}; {}",
        time(line.at_ns),
        line.outcome.as_str(),
        line.outcome.against(),
        printable(&line.acted_on),
        printable(&line.named),
        line.lead_ns
            .map(|lead| format!(" (lead {})", seconds(lead)))
            .unwrap_or_default(),
        printable(&line.detail),
    )
}

/// Signed nanoseconds as seconds with one decimal (`8.1 s`, `-0.4 s`).
pub fn seconds(ns: i64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

fn seconds_words(total: u64) -> String {
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s}s"),
        _ => format!("{h}h {m}m"),
    }
}
