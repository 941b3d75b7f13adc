//! Reaction latency: from the page that crosses an eviction threshold to the agent's decision.
//!
//! One agent per source runs in `--dry-run` on a bench-owned kubepods tree with one pod whose
//! cgroup holds a `bench_load step` helper. The threshold is a hard
//! `allocatableMemory.available` set 16 MiB above the tree's idle working set. Each trial:
//! 1. read the kubepods working set from cgroupfs and top the helper up to 1 MiB below the
//!    threshold; let it settle;
//! 2. (poll sources) wait a random part of the poll interval, so crossings fall at every
//!    phase of the agent's poll ticks;
//! 3. the helper maps a fresh chunk and touches it page by page, reading CLOCK_MONOTONIC
//!    right after the page that crosses the threshold (by the working set read just before),
//!    then touches 1 MiB more, so the crossing is clear of the kernel's 256 KiB reporting
//!    step and the charge batching;
//! 4. the agent's JSON decision carries `monotonic_ns` (and for eBPF the kernel event's
//!    timestamp); latency = decision - crossing page;
//! 5. the chunk is freed and the trial waits out the eviction gates (100 ms) before the next.
//!
//! The agent keeps running across trials; its eviction interval and cleanup timeout are
//! 100 ms, so every trial is a fresh first crossing, not a re-decision.
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    Size,
    env::{Agent, BenchTree, Binaries, Machine, Rng, SourceArg, Stepper, loadavg},
    percentile,
    report::{Figure, Section},
};

const MIB: u64 = 1 << 20;
/// Allocatable memory given to the agent.
const ALLOCATABLE: u64 = 4 << 30;
/// The crossing chunk starts this far below the threshold.
const BELOW: u64 = MIB;
/// ... and continues this far beyond it.
const BEYOND: u64 = MIB;

/// One trial's timestamps (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Trial {
    /// Right after the crossing page was touched, in the allocating process.
    pub crossed: u64,
    /// The agent's decision.
    pub decided: u64,
    /// The kernel event that triggered it (eBPF source).
    pub event: Option<u64>,
    /// When the bench read the decision line.
    pub read: u64,
    /// Touch cost per page in the crossing chunk (the resolution of `crossed`).
    pub ns_per_page: u64,
}

impl Trial {
    /// Decision minus crossing, in ms (negative when the agent saw the crossing a few pages
    /// early, within the charge batching).
    pub(super) fn latency_ms(&self) -> f64 {
        (self.decided as i64 - self.crossed as i64) as f64 / 1e6
    }
}

struct Plan {
    source: SourceArg,
    trials: usize,
}

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let ms = Duration::from_millis;
    // Trials per source: eBPF, then polling every 100 ms, 1 s and 10 s (not in the quick run).
    let trials: [usize; 4] = size.pick([1, 1, 1, 1], [40, 15, 4, 0], [300, 60, 20, 6]);
    let sources = [
        SourceArg::Ebpf,
        SourceArg::Poll(ms(100)),
        SourceArg::Poll(ms(1000)),
        SourceArg::Poll(ms(10_000)),
    ];
    let plans: Vec<Plan> = sources
        .into_iter()
        .zip(trials)
        .filter(|(_, trials)| *trials > 0)
        .map(|(source, trials)| Plan { source, trials })
        .collect();
    let mut results = Vec::new();
    for plan in &plans {
        let load = loadavg();
        eprintln!(
            "bench: latency {} ({} trials, load {load:.2})",
            plan.source.label(),
            plan.trials
        );
        let trials = measure(bins, plan.source, plan.trials)
            .with_context(|| format!("latency with {}", plan.source.label()))?;
        size.expect_trials(&plan.source.label(), trials.len(), plan.trials)?;
        results.push((plan.source, trials, load));
    }
    Ok(summarize(machine, &results))
}

/// Figures for every source: p50, p99 and max, poll sources against eBPF and eBPF against
/// the 100 ms poll; for eBPF also where the time goes.
pub(super) fn summarize(machine: &Machine, results: &[(SourceArg, Vec<Trial>, f64)]) -> Section {
    let mut figures = Vec::new();
    let mut raw = Vec::new();
    let stats = |trials: &[Trial]| {
        let l: Vec<f64> = trials.iter().map(Trial::latency_ms).collect();
        [50.0, 99.0, 100.0].map(|p| percentile(&l, p).unwrap_or(f64::NAN))
    };
    let ebpf = results
        .iter()
        .find(|r| r.0 == SourceArg::Ebpf)
        .map(|r| stats(&r.1));
    let poll100 = results
        .iter()
        .find(|r| r.0 == SourceArg::Poll(Duration::from_millis(100)))
        .map(|r| stats(&r.1));
    for (source, trials, load) in results {
        let label = source.label();
        let [p50, p99, max] = stats(trials);
        let baseline = match source {
            SourceArg::Ebpf => poll100.map(|b| (b, "poll 100ms")),
            SourceArg::Poll(_) => ebpf.map(|b| (b, "ebpf")),
        };
        let per_page: Vec<f64> = trials.iter().map(|t| t.ns_per_page as f64).collect();
        let resolution = percentile(&per_page, 50.0).unwrap_or(0.0) / 1e3;
        for (i, (metric, value)) in [("p50", p50), ("p99", p99), ("max", max)]
            .into_iter()
            .enumerate()
        {
            let mut figure = Figure::new("latency", &label, metric, value, "ms")
                .note(format!(
                    "n={} trials, {resolution:.1} us/page",
                    trials.len()
                ))
                .on(machine, *load);
            if let Some((base, name)) = baseline {
                figure = figure.against(&Figure::new("latency", name, metric, base[i], "ms"));
            }
            figures.push(figure);
        }
        if *source == SourceArg::Ebpf {
            // Where the time goes: each stage's duration of a trial, in ms.
            type Stage = (&'static str, fn(&Trial) -> Option<f64>);
            let parts: [Stage; 3] = [
                ("crossing->kernel event", |t| {
                    Some((t.event? as i64 - t.crossed as i64) as f64 / 1e6)
                }),
                ("kernel event->decision", |t| {
                    Some((t.decided as i64 - t.event? as i64) as f64 / 1e6)
                }),
                ("decision->stdout read", |t| {
                    Some((t.read as i64 - t.decided as i64) as f64 / 1e6)
                }),
            ];
            for (name, part) in parts {
                let values: Vec<f64> = trials.iter().filter_map(part).collect();
                for p in [50.0, 99.0] {
                    if let Some(v) = percentile(&values, p) {
                        figures.push(
                            Figure::new("latency", &label, &format!("p{p:.0} {name}"), v, "ms")
                                .note(format!("n={}", values.len()))
                                .on(machine, *load),
                        );
                    }
                }
            }
        }
        raw.push(json!({
            "source": label,
            "load": load,
            "latency_ms": { "p50": p50, "p99": p99, "max": max },
            "trials": trials.iter().map(|t| json!({
                "crossed_ns": t.crossed,
                "decided_ns": t.decided,
                "event_ns": t.event,
                "read_ns": t.read,
                "ns_per_page": t.ns_per_page,
            })).collect::<Vec<_>>(),
        }));
    }
    Section {
        figures,
        raw: Value::Array(raw),
    }
}

fn measure(bins: &Binaries, source: SourceArg, trials: usize) -> anyhow::Result<Vec<Trial>> {
    let name = format!("latency-{}", source.label().replace(' ', "-"));
    let tree = BenchTree::create(&name, 4)?;
    let kubepods = tree.kubepods_dir();
    let mut helper = Stepper::start_in(bins, &tree.pod_dir(&tree.uids[0]))?;
    let idle = tree.hierarchy.working_set(&kubepods)?;
    let threshold_kib = (ALLOCATABLE - idle - 16 * MIB) / 1024;
    // The agent decides once the working set exceeds this.
    let crossing_ws = ALLOCATABLE - threshold_kib * 1024;
    let config = tree.write_config(threshold_kib)?;
    let agent = Agent::start(
        bins,
        &tree,
        source,
        &config,
        &ALLOCATABLE.to_string(),
        "latency",
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let poll = match source {
        SourceArg::Poll(d) => Some(d),
        SourceArg::Ebpf => None,
    };
    let timeout = poll.unwrap_or_default() * 2 + Duration::from_secs(3);
    let mut rng = Rng::seeded();
    let mut out = Vec::with_capacity(trials);
    let mut missed = 0;
    let mut early = 0;
    while out.len() < trials {
        if missed > 3 + trials / 10 {
            bail!(
                "{missed} trials without a decision; agent log:\n{}",
                agent.log_text()
            );
        }
        // 1. Top up to just below the threshold.
        let below = crossing_ws as i64 - tree.hierarchy.working_set(&kubepods)? as i64;
        if below < (BELOW / 2) as i64 {
            helper.command("free all")?;
            std::thread::sleep(Duration::from_millis(200));
            early += 1;
            if early > 3 + trials / 10 {
                bail!(
                    "the working set keeps sitting above the threshold; agent log:\n{}",
                    agent.log_text()
                );
            }
            continue;
        }
        if below as u64 > BELOW + 256 * 1024 {
            helper.command(&format!("alloc {}", below as u64 - BELOW))?;
        }
        std::thread::sleep(Duration::from_millis(30));
        // 2. A random phase against the poll ticks.
        if let Some(interval) = poll {
            std::thread::sleep(interval.mul_f64(rng.unit()));
        }
        let stray = agent.drain();
        if !stray.is_empty() {
            eprintln!(
                "bench: {} decision(s) before the crossing; trial repeated",
                stray.len()
            );
            helper.command("free all")?;
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        // 3. Cross.
        let at = crossing_ws.saturating_sub(tree.hierarchy.working_set(&kubepods)?);
        let answer = helper.command(&format!("cross {} {at}", at + BEYOND))?;
        let (crossed, ns_per_page) = parse_crossed(&answer)
            .with_context(|| format!("unexpected answer from the load helper: {answer}"))?;
        // 4. The decision.
        let trial = if let Some(line) = agent.next_line(timeout)? {
            let decision: Value = serde_json::from_str(&line.text)
                .with_context(|| format!("agent output is not JSON: {}", line.text))?;
            let decided = decision["monotonic_ns"]
                .as_u64()
                .context("no monotonic_ns")?;
            let event = decision["event_monotonic_ns"].as_u64();
            Some(Trial {
                crossed,
                decided,
                event,
                read: line.read_ns,
                ns_per_page,
            })
        } else {
            missed += 1;
            eprintln!(
                "bench: no decision within {timeout:?} (trial {})",
                out.len() + 1
            );
            None
        };
        // 5. Back below the threshold; wait out the eviction gates.
        helper.command("free last")?;
        std::thread::sleep(Duration::from_millis(150));
        if let Some(trial) = trial {
            out.push(trial);
        }
    }
    agent.stop()?;
    Ok(out)
}

/// `crossed <ns> <end ns> <ns per page>` -> (ns, ns per page).
fn parse_crossed(answer: &str) -> Option<(u64, u64)> {
    let mut words = answer.split_whitespace();
    if words.next()? != "crossed" {
        return None;
    }
    let crossed = words.next()?.parse().ok()?;
    let _end: u64 = words.next()?.parse().ok()?;
    let per_page = words.next()?.parse().ok()?;
    Some((crossed, per_page))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine {
            cores: 2,
            kernel: "test".into(),
            memory_bytes: 0,
        }
    }

    fn trial(crossed: u64, decided: u64, event: Option<u64>) -> Trial {
        Trial {
            crossed,
            decided,
            event,
            read: decided + 20_000,
            ns_per_page: 900,
        }
    }

    #[test]
    fn helper_answers_parse() {
        assert_eq!(parse_crossed("crossed 100 200 3"), Some((100, 3)));
        assert_eq!(parse_crossed("ok"), None);
        assert_eq!(parse_crossed("crossed x 1 2"), None);
    }

    #[test]
    fn latency_is_signed() {
        assert_eq!(trial(1_000_000, 1_500_000, None).latency_ms(), 0.5);
        assert_eq!(trial(1_500_000, 1_000_000, None).latency_ms(), -0.5);
    }

    #[test]
    fn summary_compares_sources_and_splits_ebpf_latency() {
        let ebpf: Vec<Trial> = (1..=10)
            .map(|i| trial(0, i * 100_000, Some(i * 40_000)))
            .collect();
        let poll: Vec<Trial> = (1..=10).map(|i| trial(0, i * 10_000_000, None)).collect();
        let results = vec![
            (SourceArg::Ebpf, ebpf, 0.5),
            (SourceArg::Poll(Duration::from_millis(100)), poll, 0.7),
        ];
        let section = summarize(&machine(), &results);
        let find = |case: &str, metric: &str| {
            section
                .figures
                .iter()
                .find(|f| f.case == case && f.metric == metric)
                .unwrap()
                .clone()
        };
        let e50 = find("ebpf", "p50");
        assert_eq!(e50.value, 0.5);
        assert_eq!(e50.ratio, Some((0.01, "poll 100ms".into())));
        assert_eq!(find("poll 100ms", "max").value, 100.0);
        assert_eq!(
            find("poll 100ms", "p50").ratio,
            Some((100.0, "ebpf".into()))
        );
        assert_eq!(find("ebpf", "p50 crossing->kernel event").value, 0.2);
        assert_eq!(find("ebpf", "p99 kernel event->decision").value, 0.6);
        assert_eq!(find("ebpf", "p50 decision->stdout read").value, 0.02);
        assert_eq!(section.raw[0]["trials"].as_array().unwrap().len(), 10);
        assert!(find("ebpf", "p99").note.contains("n=10"));
    }
}
