//! The agent's metrics and their Prometheus text exposition (format version 0.0.4).
use std::{collections::BTreeMap, fmt::Write as _};

use crate::engine::{
    reclaim_record::ReclaimTotals,
    shadow::{Outcome, Scorecard, Scored},
};

/// Cumulative histogram with fixed upper bounds.
#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub(crate) fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str) {
        self.render_labelled(out, name, "");
    }

    /// As [`Self::render`], each sample with `labels` (`key="value",`) before its own.
    fn render_labelled(&self, out: &mut String, name: &str, labels: &str) {
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {}", self.count);
        let braces = labels.trim_end_matches(',');
        let braces = if braces.is_empty() {
            String::new()
        } else {
            format!("{{{braces}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// The one signal counted in process IDs rather than bytes.
const PID_SIGNAL: &str = "pid.available";

/// Event-to-decision latency buckets in seconds: 10 µs to 10 s, since the eBPF path is
/// expected in the sub-millisecond range and the polling path in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
];

/// Lead-time buckets of the shadow scorecard, in seconds: the kubelet acts every 10 s on stats
/// up to 15 s old; a foreseen OOM kill may come within a second.
const LEAD_BUCKETS: &[f64] = &[0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0];

/// A dry run's shadow scorecard: its outcomes since it began (restored across restarts) and
/// the lead times since this agent started.
#[derive(Clone, Debug)]
pub(crate) struct ShadowMetrics {
    outcomes: BTreeMap<Outcome, u64>,
    lead_kubelet: Histogram,
    lead_kernel: Histogram,
}

impl ShadowMetrics {
    /// Every outcome from the scorecard's counts (0 for those that never happened: a counter
    /// born at 1 hides its first increase from `increase()`).
    pub(crate) fn counting_from(card: &Scorecard) -> Self {
        Self {
            outcomes: Outcome::ALL.iter().map(|o| (*o, card.count(*o))).collect(),
            lead_kubelet: Histogram::new(LEAD_BUCKETS),
            lead_kernel: Histogram::new(LEAD_BUCKETS),
        }
    }

    pub(crate) fn observe(&mut self, scored: Scored) {
        *self.outcomes.entry(scored.outcome).or_default() += 1;
        let histogram = match scored.outcome {
            Outcome::SamePod => &mut self.lead_kubelet,
            Outcome::KernelForeseen => &mut self.lead_kernel,
            _ => return,
        };
        // A naming within the kubelet's clock resolution after it is not a lead.
        if let Some(lead) = scored.lead_ns.filter(|lead| *lead >= 0) {
            histogram.observe(lead as f64 / 1e9);
        }
    }

    fn render(&self, out: &mut String) {
        let name = "monitor_shadow_outcomes_total";
        header(
            out,
            name,
            "counter",
            "A dry run's decisions matched with what happened next (shadow scorecard, since it began): the kubelet's evictions (same_pod, different_pod, late, missed), the kernel's OOM kills (kernel_foreseen, kernel_late, kernel_unforeseen, kernel_own_limit) and decisions nobody acted on (nothing_happened).",
        );
        for (outcome, count) in &self.outcomes {
            let _ = writeln!(out, "{name}{{outcome=\"{}\"}} {count}", outcome.as_str());
        }
        let name = "monitor_shadow_lead_seconds";
        header(
            out,
            name,
            "histogram",
            "How long before the kubelet evicted the pod the dry run named (against=kubelet), or before a kernel OOM kill it foresaw (against=kernel), the agent decided; since the agent started.",
        );
        self.lead_kubelet
            .render_labelled(out, name, "against=\"kubelet\",");
        self.lead_kernel
            .render_labelled(out, name, "against=\"kernel\",");
    }
}

/// Everything the agent exports. Keys of the maps are signal names (`memory.available`).
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    /// Evictions carried out (never a dry run's).
    pub evictions_by_signal: BTreeMap<&'static str, u64>,
    /// Decisions a dry run took and did not carry out.
    pub dry_run_decisions_by_signal: BTreeMap<&'static str, u64>,
    /// Latest observed value of each signal, in its unit (bytes or a count).
    pub signal_observations: BTreeMap<&'static str, f64>,
    /// 1 while a threshold of the signal is met.
    pub threshold_met: BTreeMap<&'static str, bool>,
    /// Each signal's threshold levels in force, resolved against its capacity, by kind
    /// (`hard`, `soft`): the highest where a signal has several of a kind.
    pub threshold_levels: BTreeMap<(&'static str, &'static str), f64>,
    pub pods_ranked: u64,
    pub events_received: u64,
    pub events_lost: u64,
    /// Kernel records that could not be decoded and were skipped.
    pub events_undecodable: u64,
    /// Stat updates the kernel could not count: its per-cgroup map was full.
    pub cgroup_map_full: u64,
    /// Whether the kernel's memcg stat programs run on their hooks now.
    pub stat_programs_attached: bool,
    /// The distance to a memory threshold within which they are attached (`None`: at all
    /// times, or no stat programs).
    pub stat_programs_attach_within: Option<u64>,
    /// Checkpoint writes that failed.
    pub checkpoint_write_failures: u64,
    /// Whether the last checkpoint write succeeded.
    pub checkpoint_writable: bool,
    /// Whether the checkpoint found at start could not be used and was set aside.
    pub checkpoint_damaged_at_start: bool,
    /// Pod cgroup reads that failed (not counting cgroups that were gone).
    pub pod_read_failures: u64,
    /// Pods whose processes were counted (every `cgroup.procs` of the pod listed).
    pub pod_process_counts: u64,
    /// Evictions whose action failed or was refused.
    pub action_failures: u64,
    /// Kills whose processes outlived force, by cause (`frozen`, `uninterruptible`,
    /// `other`).
    pub evictions_stuck: BTreeMap<&'static str, u64>,
    /// Log lines lost because stderr could not be written.
    pub log_write_failures: u64,
    /// Whether `--source auto` found the kernel programs unloadable and polls instead.
    pub source_fallback: bool,
    /// The agent's own memory cgroup: bytes charged, and its limit (`None`: none, or not
    /// read).
    pub own_memory_charged: Option<u64>,
    pub own_memory_limit: Option<u64>,
    pub decision_latency_seconds: Histogram,
    /// The configuration in force (`None` before the agent has one).
    pub config: Option<ConfigMetrics>,
    /// A dry run's shadow scorecard (`None`: an acting agent).
    pub shadow: Option<ShadowMetrics>,
    /// Reclaim before eviction (`None`: `--reclaim-first` off or refused).
    pub reclaim: Option<ReclaimTotals>,
}

/// The configuration in force, for `monitor_config_*`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigMetrics {
    /// Which files: `kubelet_config+config`, `kubelet_config`, `config` or `defaults`.
    pub source: &'static str,
    /// `--kubelet-config` and `--config` as given (empty when not).
    pub kubelet_config: String,
    pub config: String,
    pub checksum: String,
    /// When it was put in force, in seconds since the epoch.
    pub loaded_at_seconds: f64,
    /// Changes refused since start.
    pub reload_failures: u64,
    /// Whether the files' newest content is in force (0 while a change is refused).
    pub last_reload_successful: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            evictions_by_signal: BTreeMap::new(),
            dry_run_decisions_by_signal: BTreeMap::new(),
            signal_observations: BTreeMap::new(),
            threshold_met: BTreeMap::new(),
            threshold_levels: BTreeMap::new(),
            pods_ranked: 0,
            events_received: 0,
            events_lost: 0,
            events_undecodable: 0,
            cgroup_map_full: 0,
            stat_programs_attached: false,
            stat_programs_attach_within: None,
            checkpoint_write_failures: 0,
            checkpoint_writable: true,
            checkpoint_damaged_at_start: false,
            pod_read_failures: 0,
            pod_process_counts: 0,
            action_failures: 0,
            // A counter born at 1 hides its first increase from `increase()`.
            evictions_stuck: ["frozen", "uninterruptible", "other"]
                .into_iter()
                .map(|cause| (cause, 0))
                .collect(),
            log_write_failures: 0,
            source_fallback: false,
            own_memory_charged: None,
            own_memory_limit: None,
            decision_latency_seconds: Histogram::new(LATENCY_BUCKETS),
            config: None,
            shadow: None,
            reclaim: None,
        }
    }
}

impl ConfigMetrics {
    fn render(&self, out: &mut String) {
        let name = "monitor_config_info";
        header(
            out,
            name,
            "gauge",
            "Always 1; the configuration in force: which files, and the SHA-256 of their bytes in order.",
        );
        let _ = writeln!(
            out,
            "{name}{{source=\"{}\",kubelet_config=\"{}\",config=\"{}\",checksum=\"{}\"}} 1",
            self.source,
            escape(&self.kubelet_config),
            escape(&self.config),
            escape(&self.checksum)
        );
        for (name, kind, help, value) in [
            (
                "monitor_config_loaded_timestamp_seconds",
                "gauge",
                "When the configuration in force was put in force, in seconds since the epoch.",
                self.loaded_at_seconds,
            ),
            (
                "monitor_config_last_reload_successful",
                "gauge",
                "1 while the configuration files' newest content is in force; 0 while it is refused (the log says why) and the previous one kept.",
                f64::from(u8::from(self.last_reload_successful)),
            ),
            (
                "monitor_config_reload_failures_total",
                "counter",
                "Changes of the configuration refused (invalid, unreadable, removed); the one in force was kept.",
                self.reload_failures as f64,
            ),
        ] {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

impl Metrics {
    /// The text exposition format. Names follow Prometheus' conventions (the unit in the
    /// name, `_total` on counters only, bytes and counts in separate families) and the
    /// kubelet's where they mean the same: `eviction_signal` as in `kubelet_evictions`.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let name = "monitor_build_info";
        header(
            &mut out,
            name,
            "gauge",
            "Always 1; the labels name the agent's version and CPU architecture.",
        );
        let _ = writeln!(
            out,
            "{name}{{version=\"{}\",arch=\"{}\"}} 1",
            escape(env!("CARGO_PKG_VERSION")),
            escape(std::env::consts::ARCH)
        );
        // What was done and what a dry run would have done, apart: a sum over one family
        // never mixes them.
        for (name, help, counts) in [
            (
                "monitor_evictions_total",
                "Pods evicted, by the signal that led to it; a dry run's decisions are not \
                 counted here (monitor_dry_run_decisions_total).",
                &self.evictions_by_signal,
            ),
            (
                "monitor_dry_run_decisions_total",
                "Eviction decisions a dry run took and did not carry out, by signal; the same \
                 pod decided again at each interval counts each time.",
                &self.dry_run_decisions_by_signal,
            ),
        ] {
            header(&mut out, name, "counter", help);
            for (signal, n) in counts {
                let _ = writeln!(out, "{name}{{eviction_signal=\"{}\"}} {n}", escape(signal));
            }
        }
        // pid.available counts process IDs; every other signal is bytes.
        let (pids, bytes): (Vec<_>, Vec<_>) = self
            .signal_observations
            .iter()
            .partition(|(signal, _)| **signal == PID_SIGNAL);
        for (name, help, observations) in [
            (
                "monitor_eviction_signal_available_bytes",
                "Latest value of each memory eviction signal, in bytes.",
                bytes,
            ),
            (
                "monitor_eviction_signal_available_pids",
                "Latest value of pid.available: process IDs left.",
                pids,
            ),
        ] {
            header(&mut out, name, "gauge", help);
            for (signal, v) in observations {
                let _ = writeln!(out, "{name}{{eviction_signal=\"{}\"}} {v}", escape(signal));
            }
        }
        let (pids, bytes): (Vec<_>, Vec<_>) = self
            .threshold_levels
            .iter()
            .partition(|((signal, _), _)| *signal == PID_SIGNAL);
        for (name, help, levels) in [
            (
                "monitor_eviction_threshold_bytes",
                "Level of each memory eviction threshold in force, in bytes, resolved against the signal's capacity; the signal's threshold is met below it.",
                bytes,
            ),
            (
                "monitor_eviction_threshold_pids",
                "Level of each pid.available threshold in force, in process IDs.",
                pids,
            ),
        ] {
            header(&mut out, name, "gauge", help);
            for ((signal, kind), v) in levels {
                let _ = writeln!(
                    out,
                    "{name}{{eviction_signal=\"{}\",threshold_kind=\"{kind}\"}} {v}",
                    escape(signal)
                );
            }
        }
        let name = "monitor_evictions_stuck_total";
        header(
            &mut out,
            name,
            "counter",
            "Evictions whose processes outlived force (SIGKILL pending), by cause: frozen where they could not be thawed, uninterruptible sleep in the kernel, other; each was passed over for the next pod.",
        );
        for (cause, n) in &self.evictions_stuck {
            let _ = writeln!(out, "{name}{{cause=\"{}\"}} {n}", escape(cause));
        }
        let name = "monitor_eviction_threshold_met";
        header(
            &mut out,
            name,
            "gauge",
            "1 while an eviction threshold of the signal is met.",
        );
        for (signal, met) in &self.threshold_met {
            let _ = writeln!(
                out,
                "{name}{{eviction_signal=\"{}\"}} {}",
                escape(signal),
                u8::from(*met)
            );
        }
        for (name, kind, help, value) in [
            (
                "monitor_pods_ranked",
                "gauge",
                "Pods in the eviction ranking.",
                self.pods_ranked,
            ),
            (
                "monitor_events_received_total",
                "counter",
                "Kernel events read from the ring buffer.",
                self.events_received,
            ),
            (
                "monitor_events_lost_total",
                "counter",
                "Kernel events dropped because the ring buffer was full.",
                self.events_lost,
            ),
            (
                "monitor_events_undecodable_total",
                "counter",
                "Kernel records that could not be decoded and were skipped.",
                self.events_undecodable,
            ),
            (
                "monitor_cgroup_map_full_total",
                "counter",
                "Kernel stat updates not counted because the per-cgroup map was full; those cgroups are read at resyncs only.",
                self.cgroup_map_full,
            ),
            (
                "monitor_pod_process_counts_total",
                "counter",
                "Pods whose processes were counted for the PID ranking (each a listing of the pod's cgroup.procs files): at resyncs, and at a fork record only the pods the kernel marked.",
                self.pod_process_counts,
            ),
            (
                "monitor_stat_programs_attached",
                "gauge",
                "1 while the kernel's memcg stat programs run on their hooks; 0 while polling, or while --attach-within (auto by default) keeps them off far from every memory threshold.",
                u64::from(self.stat_programs_attached),
            ),
            (
                "monitor_checkpoint_write_failures_total",
                "counter",
                "Checkpoint writes that failed (full or read-only disk, no file descriptors, I/O errors); retried with backoff.",
                self.checkpoint_write_failures,
            ),
            (
                "monitor_checkpoint_writable",
                "gauge",
                "1 while the last checkpoint write succeeded, 0 while writes fail.",
                u64::from(self.checkpoint_writable),
            ),
            (
                "monitor_checkpoint_damaged_at_start",
                "gauge",
                "1 when the checkpoint found at start could not be used (damaged, truncated, not a regular file, unreadable): it was set aside and the agent started with an empty state.",
                u64::from(self.checkpoint_damaged_at_start),
            ),
            (
                "monitor_pod_read_failures_total",
                "counter",
                "Reads of a pod's cgroup that failed; the pod's last good value stands in.",
                self.pod_read_failures,
            ),
            (
                "monitor_action_failures_total",
                "counter",
                "Evictions whose action failed or was refused.",
                self.action_failures,
            ),
            (
                "monitor_log_write_failures_total",
                "counter",
                "Log lines lost because stderr could not be written (the agent runs on).",
                self.log_write_failures,
            ),
            (
                "monitor_event_source_fallback",
                "gauge",
                "1 when --source auto could not load the kernel programs and the agent polls cgroupfs instead (/readyz says why).",
                u64::from(self.source_fallback),
            ),
        ] {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        for (name, help, value) in [
            (
                "monitor_stat_programs_attach_within_bytes",
                "The distance to the nearest memory threshold within which the memcg stat programs are attached (--attach-within; auto: derived from the node's CPUs, the fastest growth seen and the time to read every pod); absent while they are attached at all times or absent.",
                self.stat_programs_attach_within,
            ),
            (
                "monitor_own_memory_charged_bytes",
                "Bytes the agent's own memory cgroup is charged (heap, locked pages, kernel maps, page cache of its binary).",
                self.own_memory_charged,
            ),
            (
                "monitor_own_memory_limit_bytes",
                "The memory limit of the agent's own cgroup; absent without one.",
                self.own_memory_limit,
            ),
        ] {
            if let Some(value) = value {
                header(&mut out, name, "gauge", help);
                let _ = writeln!(out, "{name} {value}");
            }
        }
        if let Some(config) = &self.config {
            config.render(&mut out);
        }
        if let Some(shadow) = &self.shadow {
            shadow.render(&mut out);
        }
        if let Some(reclaim) = &self.reclaim {
            render_reclaim(reclaim, &mut out);
        }
        let name = "monitor_event_to_decision_seconds";
        header(
            &mut out,
            name,
            "histogram",
            "Time from the kernel event to the decision it led to.",
        );
        self.decision_latency_seconds.render(&mut out, name);
        out
    }
}

/// `--reclaim-first`: what the ladders took and spared since the agent started.
fn render_reclaim(totals: &ReclaimTotals, out: &mut String) {
    let name = "monitor_reclaim_bytes_total";
    header(
        out,
        name,
        "counter",
        "Page cache taken back through memory.reclaim before an eviction (--reclaim-first), by pod (the 256 pods it took most from).",
    );
    for (pod, taken) in &totals.bytes_by_pod {
        let _ = writeln!(out, "{name}{{pod=\"{}\"}} {taken}", escape(pod));
    }
    for (name, help, value) in [
        (
            "monitor_reclaim_ladders_total",
            "Memory pressure episodes in which reclaim ran before eviction.",
            totals.ladders,
        ),
        (
            "monitor_reclaim_evictions_avoided_total",
            "Memory pressure episodes that ended with no eviction after reclaim took something.",
            totals.evictions_avoided,
        ),
        (
            "monitor_reclaim_skipped_total",
            "Memory pressure episodes in which the OOM point was projected nearer than reclaim's time budget, so the eviction went first.",
            totals.skipped_for_race,
        ),
    ] {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    let name = "monitor_reclaim_seconds_total";
    header(
        out,
        name,
        "counter",
        "Time reclaim ran before eviction, in all.",
    );
    let _ = writeln!(out, "{name} {}", totals.ladder_time.as_secs_f64());
}

pub(super) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Label values escape backslash, quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(&[0.001, 0.1]);
        for v in [0.0005, 0.05, 3.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x");
        assert!(out.contains("x_bucket{le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count 3\n"), "{out}");
    }

    #[test]
    fn exposition_names_every_family_once_with_labels() {
        let mut m = Metrics::default();
        m.evictions_by_signal.insert("memory.available", 2);
        m.dry_run_decisions_by_signal.insert("pid.available", 3);
        m.signal_observations.insert("memory.available", 1048576.0);
        m.signal_observations.insert("pid.available", 4000.0);
        m.threshold_met.insert("memory.available", true);
        m.threshold_levels
            .insert(("memory.available", "hard"), 104857600.0);
        m.threshold_levels.insert(("pid.available", "soft"), 1000.0);
        m.events_received = 10;
        m.events_lost = 1;
        m.pods_ranked = 40;
        m.source_fallback = true;
        m.own_memory_charged = Some(30 << 20);
        m.stat_programs_attach_within = Some(1 << 30);
        let text = m.render();
        for line in [
            "monitor_evictions_total{eviction_signal=\"memory.available\"} 2",
            "monitor_dry_run_decisions_total{eviction_signal=\"pid.available\"} 3",
            "monitor_eviction_signal_available_bytes{eviction_signal=\"memory.available\"} 1048576",
            "monitor_eviction_signal_available_pids{eviction_signal=\"pid.available\"} 4000",
            "monitor_eviction_threshold_met{eviction_signal=\"memory.available\"} 1",
            "monitor_eviction_threshold_bytes{eviction_signal=\"memory.available\",threshold_kind=\"hard\"} 104857600",
            "monitor_eviction_threshold_pids{eviction_signal=\"pid.available\",threshold_kind=\"soft\"} 1000",
            "monitor_pods_ranked 40",
            "monitor_events_received_total 10",
            "monitor_events_lost_total 1",
            "monitor_event_to_decision_seconds_count 0",
            "monitor_event_source_fallback 1",
            "monitor_own_memory_charged_bytes 31457280",
            "monitor_stat_programs_attach_within_bytes 1073741824",
            "monitor_checkpoint_damaged_at_start 0",
            "monitor_evictions_stuck_total{cause=\"frozen\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(
            types, 26,
            "one TYPE line per family (no limit: no limit family)"
        );
        let build = format!(
            "monitor_build_info{{version=\"{}\",arch=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH
        );
        assert!(
            text.lines().any(|l| l == build),
            "missing {build:?} in\n{text}"
        );
    }

    #[test]
    fn reclaim_families_are_exported_only_with_the_flag() {
        let mut m = Metrics::default();
        assert!(!m.render().contains("monitor_reclaim"), "off: not exported");
        let mut totals = ReclaimTotals::default();
        totals
            .bytes_by_pod
            .insert("shop/\"cache\"".into(), 64 << 20);
        totals.ladders = 3;
        totals.evictions_avoided = 2;
        totals.skipped_for_race = 1;
        totals.ladder_time = std::time::Duration::from_millis(250);
        m.reclaim = Some(totals);
        let text = m.render();
        for line in [
            "monitor_reclaim_bytes_total{pod=\"shop/\\\"cache\\\"\"} 67108864",
            "monitor_reclaim_ladders_total 3",
            "monitor_reclaim_evictions_avoided_total 2",
            "monitor_reclaim_skipped_total 1",
            "monitor_reclaim_seconds_total 0.25",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}
